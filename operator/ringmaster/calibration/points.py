"""What every calibration family shares: the points file, the row of the accuracy table and its
statuses (fitted apart from checked), and the relative-error helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringmaster.engine.units import GIB

EXIT_USAGE = 2
PACKAGED_POINTS = Path(__file__).resolve().parent / "points.yaml"
# ../shared/calibration/points.yaml relative to the repository root (operator/ringmaster/..).
SHARED_POINTS = (
    Path(__file__).resolve().parents[3].parent / "shared" / "calibration" / "points.yaml"
)

# nccl-tests reports busbw for its largest messages; the points say "large messages" (8 GiB where
# nccl-tests issues 149/178 show the plateau), ">= 2 GiB" (H100) and ">= 128 MiB" (GCP TCP).
LARGE_MESSAGE_BYTES = 8.0 * GIB
# ResNet-50: "about 4.1 GMACs per image" (the MLPerf points' setup); 1 MAC = 2 operations.
RESNET50_OPERATIONS = 2 * 4.1e9
# MLPerf "offline" has no latency bound: the batch is as large as throughput wants. The engine's
# throughput b / t(b) at this batch is within 0.1% of its limit b -> infinity.
OFFLINE_BATCH = 8192
# The goal the issue sets for the checked points.
GOAL_MEDIAN = 0.10
GOAL_MAX = 0.25

FITTED = "fitted"  # a constant was derived from this figure: agreement is by construction
CHECKED = "checked"  # nothing was fitted on it: the honest test of the model
BOUND = "bound"  # the published figure must not exceed the model's bound
DECISION = "decision"  # a rule or a choice, exact
VERBATIM = "verbatim"  # a constant copied from a source (not a measurement)
OUT_OF_REACH = "out of reach"  # no prediction here; the note says why
NETWORK_MODEL = "network"
LLM_SERVING_MODEL = "llm serving"


@dataclass(frozen=True)
class Row:
    id: str
    quantity: str
    published: float | None
    predicted: float | None
    error: float | None  # relative, (predicted - published) / published; 0 inside a range
    tolerance: float
    status: str  # FITTED, CHECKED, BOUND, DECISION, VERBATIM, OUT_OF_REACH
    note: str = ""
    model: str = "network"  # NETWORK_MODEL (OWN_SECTIONS) or LLM_SERVING_MODEL

    @property
    def how(self) -> str:  # the older name of the column
        return self.status

    @property
    def ok(self) -> bool:
        # bool(): a numpy float's comparison is numpy's bool, which json refuses
        return self.error is None or bool(abs(self.error) <= self.tolerance)


class PointsError(ValueError):
    pass


def read_yaml(path: Path) -> Any:
    """A calibration file's data, parsed by libyaml where PyYAML has it (the points files are
    ~1 MB: the pure-Python parser took ~1 s of each plan), with safe_load's meaning either way."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)


def load_points(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = read_yaml(path)
    except OSError as exc:
        raise PointsError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PointsError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise PointsError(f"{path}: expected a map with collectives, reduction_server, inference")
    return data


SECTIONS = ("collectives", "reduction_server", "inference")


def points_by_id(points: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        for point in points.get(section) or []:
            out[str(point["id"])] = point
    return out


def point_by_id(points: Mapping[str, Any], pid: str) -> dict[str, Any]:
    try:
        return points_by_id(points)[pid]
    except KeyError:
        raise PointsError(f"points file has no point with id {pid!r}") from None


def section_point(points: Mapping[str, Any], section: str, pid: str, where: str) -> dict[str, Any]:
    """The point ``pid`` of ``section`` in a points file other than points.yaml (``where``
    names it in the error)."""
    for point in points.get(section) or []:
        if point["id"] == pid:
            return dict(point)
    raise PointsError(f"{where} has no {section} point with id {pid!r}")


def relative_error(predicted: float, published: float) -> float:
    return (predicted - published) / published


def range_error(predicted: float, low: float, high: float) -> float:
    """0 inside [low, high], else the relative error to the nearer end."""
    if low <= predicted <= high:
        return 0.0
    return relative_error(predicted, low if predicted < low else high)
