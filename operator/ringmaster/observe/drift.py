"""Observed against predicted: drift of the whole job, and stragglers within the gang.

DRIFT_TOLERANCE is 25 %: the engine's checked training points (``ringmaster calibrate``: LLM
training MFU and TFLOP/s rows) miss by 10 % in the mean and 17 % at most, so a job that runs
within 25 % of its prediction is within what the model is known to miss by, and one beyond it
shows something the model does not know about this cluster (a power cap, another NCCL
algorithm, a slow data loader). The band is symmetric in ratio (x1.25 slower or x1/1.25
faster), and a condition once set clears only back inside 80 % of it, so a job that hovers at
the edge does not flap.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ringmaster.observe.reports import RankTiming

DRIFT_TOLERANCE = 0.25
CLEAR_FRACTION = 0.8
"""A drift clears when the ratio is back within CLEAR_FRACTION x the tolerance (hysteresis)."""
MIN_DRIFT_SAMPLES = 5
"""Step times in the window before drift is judged: the first steps compile, warm caches and
fill the data pipeline, and are not the job's step time."""
STRAGGLER_FACTOR = 1.2
"""A host (or rank) whose step time is 20 % above the gang's median stands out: in synchronous
data parallelism every rank waits for it, so the gang loses that much per step. Below this the
spread is the ordinary jitter of data loading and the collectives' arrival order."""


@dataclass(frozen=True)
class Drift:
    observed: float
    predicted: float
    ratio: float
    cause: str

    @property
    def slower(self) -> bool:
        return self.ratio > 1

    def message(self) -> str:
        direction = "slower" if self.slower else "faster"
        return (
            f"observed step {self.observed:.4g} s against {self.predicted:.4g} s predicted "
            f"(x{self.ratio:.2f}, {direction} than the {DRIFT_TOLERANCE:.0%} tolerance): "
            f"{self.cause}"
        )


def judge_drift(
    observed: float | None,
    predicted: float | None,
    samples: int,
    *,
    compute_seconds: float | None = None,
    communication_seconds: float | None = None,
    drifting: bool = False,
    tolerance: float = DRIFT_TOLERANCE,
) -> Drift | None:
    """The drift, or None when the job runs as predicted (or too little is known yet).
    ``drifting``: the job is flagged already (it clears only inside the narrower band)."""
    if not observed or not predicted or samples < MIN_DRIFT_SAMPLES:
        return None
    ratio = observed / predicted
    band = 1 + tolerance * (CLEAR_FRACTION if drifting else 1.0)
    if 1 / band <= ratio <= band:
        return None
    return Drift(
        observed,
        predicted,
        round(ratio, 3),
        _likely_cause(ratio, compute_seconds, communication_seconds),
    )


def _likely_cause(ratio: float, compute: float | None, communication: float | None) -> str:
    """What the plan can say: the larger share of its step is the likelier place of the miss."""
    if not compute or communication is None:
        return "the plan does not split its step into compute and communication"
    share = communication / (compute + communication)
    if ratio > 1:
        if share >= 0.5:
            return (
                f"the plan has communication as {share:.0%} of the step: a network slower than "
                "modelled (NIC bandwidth, NCCL algorithm or protocol, traffic from other jobs) "
                "is the likely cause"
            )
        return (
            f"the plan has compute as {1 - share:.0%} of the step: a lower achieved FLOP rate "
            "(power or clock caps, kernels, the data loader) is the likely cause"
        )
    return (
        f"the plan has {'communication' if share >= 0.5 else 'compute'} as "
        f"{max(share, 1 - share):.0%} of the step: it is faster on this cluster than modelled"
    )


@dataclass(frozen=True)
class Straggler:
    where: str  # the host, or "rank N" when the report names no host
    seconds: float
    median: float


def stragglers(timings: Sequence[RankTiming], factor: float = STRAGGLER_FACTOR) -> list[Straggler]:
    """Hosts (ranks, where no host is named) whose step time stands out from the gang's median.
    A host counts by its slowest rank; at least two hosts are needed to have a median."""
    by_host: dict[str, float] = {}
    for timing in timings:
        where = timing.host or f"rank {timing.rank}"
        by_host[where] = max(by_host.get(where, 0.0), timing.step_seconds)
    if len(by_host) < 2:
        return []
    median = statistics.median(by_host.values())
    return sorted(
        (
            Straggler(where, seconds, median)
            for where, seconds in by_host.items()
            if seconds > factor * median
        ),
        key=lambda s: (-s.seconds, s.where),
    )


def degraded_message(found: Sequence[Straggler], limit: int = 5) -> str:
    shown = ", ".join(f"{s.where} {s.seconds:.4g} s" for s in found[:limit])
    more = f" and {len(found) - limit} more" if len(found) > limit else ""
    return (
        f"{len(found)} host(s) step slower than {STRAGGLER_FACTOR:.2f} x the gang's median "
        f"{found[0].median:.4g} s: {shown}{more}"
    )
