"""The cluster's own calibration: observed-to-predicted step time ratios of finished jobs, per
machine type and workload kind, and the correction they make for new plans.

Robust and bounded, so a few odd jobs cannot swing every plan:

- the correction is the median ratio of the group (a job that ran on a broken host or spent half
  its time checkpointing is one outlier, and moves a median by one rank at most);
- it is applied from MIN_JOBS finished jobs on: fewer is an anecdote;
- each group keeps its MAX_JOBS latest jobs and forgets jobs older than MAX_AGE (drivers, NCCL
  and firmware change; last quarter's cluster is not this one);
- a ratio outside [MIN_RATIO, MAX_RATIO] is refused as a unit error, never averaged in.

The store is the JSON kept in the operator's ConfigMap (key ``calibration.json``), and the same
file feeds ``ringmaster plan --cluster-calibration FILE``.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

MIN_JOBS = 3
MAX_JOBS = 50
MAX_AGE = dt.timedelta(days=90)
MIN_RATIO, MAX_RATIO = 0.1, 10.0
DATA_KEY = "calibration.json"
FORMAT_VERSION = 1

LLM, DATA_PARALLEL = "llm", "data-parallel"
"""Workload kinds: a transformer with a parallel layout, or data-parallel training of a model
given by its compute time or FLOPs. Their efficiencies differ (matmul-bound vs. a user's step)."""


@dataclass(frozen=True)
class Observation:
    """One finished job: its observed step time over the engine's uncorrected prediction."""

    machine_type: str
    kind: str
    ratio: float
    job: str  # namespace/name/uid: a job counts once, whoever records it
    time: str  # RFC 3339, when it finished


@dataclass(frozen=True)
class Correction:
    factor: float
    jobs: int
    machine_type: str
    kind: str

    def describe(self) -> str:
        return f"x{self.factor:.2f} from {self.jobs} jobs observed on {self.machine_type}"


@dataclass
class ClusterCalibration:
    observations: list[Observation] = field(default_factory=list)

    # ------------------------------------------------------------ learning

    def record(self, observation: Observation, now: dt.datetime) -> bool:
        """Add a finished job's ratio; False when refused or already recorded."""
        if not MIN_RATIO <= observation.ratio <= MAX_RATIO:
            return False
        if any(o.job == observation.job for o in self.observations):
            return False
        self.observations.append(observation)
        self.prune(now)
        return observation in self.observations

    def prune(self, now: dt.datetime) -> None:
        """Forget what is too old, then keep each group's MAX_JOBS latest."""
        fresh = [o for o in self.observations if now - _parse(o.time) <= MAX_AGE]
        fresh.sort(key=lambda o: o.time)
        kept: list[Observation] = []
        counts: dict[tuple[str, str], int] = {}
        for o in reversed(fresh):
            group = (o.machine_type, o.kind)
            if counts.get(group, 0) < MAX_JOBS:
                counts[group] = counts.get(group, 0) + 1
                kept.append(o)
        self.observations = sorted(kept, key=lambda o: (o.time, o.job))

    # ------------------------------------------------------------ applying

    def correction(
        self, machine_type: str | None, kind: str, now: dt.datetime
    ) -> Correction | None:
        if machine_type is None:
            return None
        ratios = [
            o.ratio
            for o in self.observations
            if o.machine_type == machine_type and o.kind == kind and now - _parse(o.time) <= MAX_AGE
        ]
        if len(ratios) < MIN_JOBS:
            return None
        return Correction(round(statistics.median(ratios), 3), len(ratios), machine_type, kind)

    # ------------------------------------------------------------ the stored form

    def to_json(self) -> str:
        body = {"version": FORMAT_VERSION, "observations": [asdict(o) for o in self.observations]}
        return json.dumps(body, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClusterCalibration:
        """Parse the stored form; ValueError saying what is wrong."""
        try:
            body = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON: {error}") from None
        if not isinstance(body, Mapping) or body.get("version") != FORMAT_VERSION:
            raise ValueError(f"expected an object with version {FORMAT_VERSION}")
        return cls(list(_observations(body.get("observations") or [])))

    @classmethod
    def from_config_map_or_file(cls, document: Any) -> ClusterCalibration:
        """A ConfigMap (``kubectl get cm -o yaml``) or the stored JSON itself, already parsed."""
        if isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
            text = (document.get("data") or {}).get(DATA_KEY)
            if text is None:
                raise ValueError(f"the ConfigMap has no {DATA_KEY} key")
            return cls.from_json(text)
        return cls.from_json(json.dumps(document))


def _observations(items: Iterable[Any]) -> Iterable[Observation]:
    for item in items:
        try:
            observation = Observation(
                machine_type=str(item["machine_type"]),
                kind=str(item["kind"]),
                ratio=float(item["ratio"]),
                job=str(item["job"]),
                time=str(item["time"]),
            )
            _parse(observation.time)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"bad observation {item!r}: {error}") from None
        yield observation


def _parse(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def workload_kind(has_architecture: bool) -> str:
    return LLM if has_architecture else DATA_PARALLEL
