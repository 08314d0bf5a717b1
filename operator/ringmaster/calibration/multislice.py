"""TPU multislice: MaxText's published MFU on 1 to 32 slices of TPU v5e-256 beside the engine's.

Two quantities per row, both only checked (nothing here is fitted):

- the MFU at N slices, which carries the single-slice model's own error (the 16B one-slice row
  fits LLM_MATMUL_EFFICIENCY_TPU in :mod:`.llm_training`);
- the MFU kept from 1 to N slices (MFU_N / MFU_1), which isolates what the data-center network
  costs: the cross-slice gradient all-reduce over each host's DCN NIC, overlapped with backward
  (engine.llm_training.multislice_dcn_seconds).

Points: ``multislice_points.yaml`` beside this module, each with its source.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringmaster.calibration.llm_training import TOLERANCE, maxtext_model
from ringmaster.calibration.points import read_yaml
from ringmaster.engine import llm_training as L
from ringmaster.engine.frameworks import Framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RING, SHARD_FULL
from ringmaster.engine.training import dcn_bandwidth

MULTISLICE_POINTS = Path(__file__).with_name("multislice_points.yaml")
SLICE_HOSTS = 64  # a v5e-256 slice: 16x16 chips on 64 hosts of 4


@dataclass(frozen=True)
class MultisliceRow:
    setup: str
    quantity: str
    published: float
    predicted: float

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published

    @property
    def ok(self) -> bool:
        return abs(self.error) <= TOLERANCE


def multislice_points(path: Path = MULTISLICE_POINTS) -> dict[str, Any]:
    return dict(read_yaml(path))


def v5e_slices(slices: int) -> L.LayoutHardware:
    """``slices`` v5e-256 slices (16x16 tori) joined over the hosts' DCN NICs."""
    host = DEFAULT_CATALOG.host("tpu-v5-lite-podslice", 4)
    return L.layout_hardware(
        host,
        SLICE_HOSTS * slices,
        DEFAULT_CATALOG,
        slice_axes=(16, 16, 1),
        wrapped=(True, True, False),
        slices=slices,
        dcn_bandwidth=dcn_bandwidth(host),
    )


def maxtext_mfu(
    params_billion: int, per_device_batch: int, slices: int, framework: Framework | None = None
) -> float:
    """The engine's MFU for MaxText's configs/v5e/<size>b.sh on ``slices`` v5e-256 slices
    (``framework``: another profile than MaxText's, to compare)."""
    tensor = 16 if params_billion == 128 else 1
    hw = v5e_slices(slices)
    if framework is not None:
        hw = replace(hw, framework=framework)
    arrays = L.evaluate_layouts(
        maxtext_model(params_billion),
        hw,
        global_batch=256 * slices * per_device_batch,
        tensor=tensor,
        pipeline=1,
        sharding=SHARD_FULL,
        micro_batch=per_device_batch * tensor,
        recompute=RECOMPUTE_FULL,  # every size ran remat_policy=full (calibration.llm_training)
        strategy=RING,
    )
    return float(arrays.mfu)


def multislice_report(points: dict[str, Any] | None = None) -> list[MultisliceRow]:
    rows = []
    for point in (points or multislice_points())["multislice"]:
        batches = {int(k): int(v) for k, v in point["per_device_batch"].items()}
        for size, by_slices in point["mfu"].items():
            size = int(size)
            published = {int(k): float(v) for k, v in by_slices.items()}
            predicted = {n: maxtext_mfu(size, batches[size], n) for n in published}
            for n in sorted(published):
                if n == 1:
                    continue
                setup = f"{size}B on {n} x v5e-256"
                rows.append(MultisliceRow(setup, "MFU", published[n], predicted[n]))
                rows.append(
                    MultisliceRow(
                        setup,
                        "MFU kept from 1 slice",
                        published[n] / published[1],
                        predicted[n] / predicted[1],
                    )
                )
    return rows


def render_multislice_section(points: dict[str, Any] | None = None) -> str:
    rows = multislice_report(points)
    lines = [
        "TPU multislice (MaxText on 1-32 x v5e-256; every row checked, none fitted; "
        f"source: {MULTISLICE_POINTS.name}):",
        f"  {'setup':<22} {'quantity':<22} {'published':>10} {'predicted':>10} {'error':>8}",
    ]
    for r in rows:
        lines.append(
            f"  {r.setup:<22} {r.quantity:<22} {r.published:>10.4f} {r.predicted:>10.4f} "
            f"{r.error:>+8.1%}{'' if r.ok else '  !'}"
        )
    for quantity in ("MFU", "MFU kept from 1 slice"):
        errors = [abs(r.error) for r in rows if r.quantity == quantity]
        within = sum(e <= TOLERANCE for e in errors)
        lines.append(
            f"  {quantity}: {within} of {len(errors)} within {TOLERANCE:.0%}; "
            f"mean |error| {statistics.fmean(errors):.1%}, max {max(errors):.1%}"
        )
    return "\n".join(lines)
