"""How many replicas an InferenceEndpoint (or one side of a disaggregated one: prefill or decode)
should run, from the model servers' own metrics (:mod:`ringmaster.planning.serving_signals`),
corrected toward the performance engine's sustainable rate per replica. Pure: one call per
interval, the state carried in a :class:`ScalingMemory` the caller keeps.

The policy, and why:

- **Needed** = max(ceil(observed requests/s / capacity), ceil(running + waiting / sustainable
  concurrency)), summed over the replicas that answered. The rate term sizes steady load; the
  in-flight term sees load the rate cannot (a completion rate stops rising at saturation while
  the queue grows). Capacity per replica = the engine's sustainable rate x a **correction**.
- **Correction** is what the replicas showed of their real capacity. Replicas whose TTFT/TPOT
  p99 is over target at a rate below the believed capacity lower it at once to their mean
  rate / the engine's (the engine was optimistic for this traffic); when every replica with
  latency evidence meets the targets above the believed capacity with no request waiting, it
  rises halfway toward their mean rate / the engine's (the engine was pessimistic; raising is
  the risky direction, so it is slow). Bounded to [0.25, 1.5] so one bad window cannot size
  the fleet, and kept in the memory: it moves only on evidence, so a lowered correction does not
  spring back after the scale-up that fixed latency and flap the count. Evidence needs
  ``min_latency_observations`` in the window (a p99 of a handful of requests is noise).
- **Latency over target with requests waiting** adds at least one replica even when the counts
  say enough: the queue is what the SLO feels first.
- **Up at once**, by as many replicas as needed (a burst should not take several cool-downs),
  but **at most one scale event per cool-down** (default 120 s: new replicas need that long to
  load and show up in the figures; acting earlier doubles the response).
- **Down slowly**: only when a smaller count keeps utilisation under
  ``scale_down_utilization`` (0.7) of capacity, every current replica answered (a missing replica's
  load is unknown), no replica is over target, and all of that has held for the stabilisation
  period (default 180 s); then to the largest such count seen over the period (as Kubernetes'
  HPA does with its scale-down stabilisation window). Up above 1.0 and down below 0.7 of capacity
  leave a band in which load noise moves nothing.
- **No signal** from any replica: hold. Bounds (min/max) are applied at once, as the spec's word.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from ringmaster.planning.serving_signals import ServerWindow


class Reason(StrEnum):
    """The decision's cause, CamelCase for conditions and Events."""

    SCALE_UP_RATE = "ScaleUpRate"
    SCALE_UP_QUEUE = "ScaleUpQueue"
    SCALE_UP_LATENCY = "ScaleUpLatency"
    SCALE_DOWN_IDLE = "ScaleDownIdle"
    HOLD = "Hold"
    COOLING_DOWN = "CoolingDown"
    NO_SIGNAL = "NoSignal"
    AT_MAX_REPLICAS = "AtMaxReplicas"
    OUTSIDE_BOUNDS = "OutsideBounds"


class Side(StrEnum):
    UNIFIED = "unified"
    PREFILL = "prefill"
    DECODE = "decode"


UP = "Up"
DOWN = "Down"


@dataclass(frozen=True)
class EngineCapacity:
    """The performance engine's figures for one replica at the SLO (for an LLM endpoint:
    ``LlmServingPrediction.requests_per_second_per_replica`` and the running sequences at that
    rate). Zero or less: not known, the term that uses it is left out."""

    requests_per_second: float
    concurrency: float


@dataclass(frozen=True)
class SloTargets:
    """p99 targets in seconds; ``None``: not checked."""

    ttft_p99_seconds: float | None = None
    tpot_p99_seconds: float | None = None

    def for_side(self, side: Side) -> SloTargets:
        """A prefill server answers for TTFT only, a decode server for TPOT only."""
        if side is Side.PREFILL:
            return SloTargets(self.ttft_p99_seconds, None)
        if side is Side.DECODE:
            return SloTargets(None, self.tpot_p99_seconds)
        return self


@dataclass(frozen=True)
class ScalingPolicy:
    cooldown_seconds: float = 120.0
    stabilization_seconds: float = 180.0
    scale_down_utilization: float = 0.7
    min_correction: float = 0.25
    max_correction: float = 1.5
    min_latency_observations: float = 20.0

    def __post_init__(self) -> None:
        if not 0 < self.scale_down_utilization < 1:
            raise ValueError("scale_down_utilization must be in (0, 1)")
        if not 0 < self.min_correction <= 1 <= self.max_correction:
            raise ValueError("the correction bounds must bracket 1")
        if self.cooldown_seconds < 0 or self.stabilization_seconds < 0:
            raise ValueError("cool-down and stabilisation must not be negative")


@dataclass(frozen=True)
class ScalingMemory:
    """What one decision leaves the next: the last scale event, since when the load has fitted
    fewer replicas (and the most it needed meanwhile), and the learnt correction."""

    last_scale_at: float | None = None
    last_direction: str | None = None  # UP or DOWN
    below_since: float | None = None
    below_peak: int = 0
    correction: float = 1.0


@dataclass(frozen=True)
class ScalingDecision:
    replicas: int
    reason: Reason
    message: str
    memory: ScalingMemory
    needed: int | None = None  # what the load needs at the corrected capacity, before bounds
    correction: float = 1.0

    @property
    def scaled(self) -> bool:
        return self.reason in (
            Reason.SCALE_UP_RATE,
            Reason.SCALE_UP_QUEUE,
            Reason.SCALE_UP_LATENCY,
            Reason.SCALE_DOWN_IDLE,
            Reason.OUTSIDE_BOUNDS,
        )


def _ceil(x: float) -> int:
    """ceil, forgiving the last bits of float error (3.0000000001 replicas is 3)."""
    return max(0, math.ceil(x - 1e-9))


def _over_target(w: ServerWindow, targets: SloTargets, floor: float) -> bool | None:
    """Whether the window's p99s break a target; ``None`` without enough observations."""
    checks: list[bool] = []
    for p99, seen, target in (
        (w.ttft_p99_seconds, w.ttft_observations, targets.ttft_p99_seconds),
        (w.tpot_p99_seconds, w.tpot_observations, targets.tpot_p99_seconds),
    ):
        if target is not None and p99 is not None and seen >= floor:
            checks.append(p99 > target)
    return any(checks) if checks else None


def _latency_words(live: Sequence[ServerWindow], targets: SloTargets) -> str:
    parts = []
    for name, target, attr in (
        ("TTFT", targets.ttft_p99_seconds, "ttft_p99_seconds"),
        ("TPOT", targets.tpot_p99_seconds, "tpot_p99_seconds"),
    ):
        values = [v for w in live if (v := getattr(w, attr)) is not None]
        if target is not None and values:
            parts.append(f"worst {name} p99 {max(values) * 1e3:.0f} ms (target {target * 1e3:.0f})")
    return ", ".join(parts)


def decide(
    *,
    current: int,
    min_replicas: int,
    max_replicas: int,
    engine: EngineCapacity,
    targets: SloTargets,
    windows: Sequence[ServerWindow | None],
    memory: ScalingMemory,
    now: float,
    policy: ScalingPolicy | None = None,
) -> ScalingDecision:
    """One interval's decision. ``windows``: one per replica scraped, ``None`` where the scrape
    failed; ``now``: seconds on the same clock as the memory's times."""
    policy = policy or ScalingPolicy()
    if min_replicas < 0 or max_replicas < min_replicas or current < 0:
        raise ValueError(f"replicas {current} with bounds [{min_replicas}, {max_replicas}]")
    reset = replace(memory, below_since=None, below_peak=0)
    correction = min(max(memory.correction, policy.min_correction), policy.max_correction)

    if not min_replicas <= current <= max_replicas:
        target = min(max(current, min_replicas), max_replicas)
        return ScalingDecision(
            target,
            Reason.OUTSIDE_BOUNDS,
            f"{current} replicas is outside [{min_replicas}, {max_replicas}]: {target}",
            replace(reset, last_scale_at=now, last_direction=UP if target > current else DOWN),
            correction=correction,
        )

    live = [w for w in windows if w is not None and w.has_signal]
    if not live:
        return ScalingDecision(
            current,
            Reason.NO_SIGNAL,
            f"none of {len(windows)} replicas gave figures; holding {current}",
            reset,
            correction=correction,
        )

    floor = policy.min_latency_observations
    over = [_over_target(w, targets, floor) for w in live]
    rate_per_replica = engine.requests_per_second if engine.requests_per_second > 0 else None
    concurrency = engine.concurrency if engine.concurrency > 0 else None

    # The correction, on evidence: replicas with a rate and a p99 of enough observations.
    if rate_per_replica is not None:
        evidence = [
            (rps, o)
            for w, o in zip(live, over, strict=True)
            if o is not None and (rps := w.requests_per_second) is not None and rps > 0
        ]
        slow = [rps for rps, o in evidence if o]
        if slow:
            correction = min(correction, sum(slow) / len(slow) / rate_per_replica)
        elif evidence and not any((w.requests_waiting or 0) > 0 for w in live):
            # Raised halfway only, and only while no queue forms: a ramp meets its targets
            # for a window before its queue builds, and raising is the risky direction.
            mean = sum(rps for rps, _ in evidence) / len(evidence)
            correction = max(correction, (correction + mean / rate_per_replica) / 2)
        correction = min(max(correction, policy.min_correction), policy.max_correction)
    memory = replace(memory, correction=correction)
    reset = replace(reset, correction=correction)

    rates = [w.requests_per_second for w in live if w.requests_per_second is not None]
    flights = [f for w in live if (f := w.in_flight) is not None]
    rate = sum(rates) if rates else None
    in_flight = sum(flights) if flights else None
    capacity = None if rate_per_replica is None else rate_per_replica * correction
    breach = any(o and (w.requests_waiting or 0) > 0 for w, o in zip(live, over, strict=True))

    terms: list[tuple[int, Reason]] = []
    if rate is not None and capacity is not None:
        terms.append((_ceil(rate / capacity), Reason.SCALE_UP_RATE))
    if in_flight is not None and concurrency is not None:
        terms.append((_ceil(in_flight / concurrency), Reason.SCALE_UP_QUEUE))
    if breach:
        terms.append((current + 1, Reason.SCALE_UP_LATENCY))
    if not terms:
        return ScalingDecision(
            current,
            Reason.NO_SIGNAL,
            f"{len(live)} replicas answered but neither a request rate against the engine's "
            f"rate nor requests in flight against its concurrency is known; holding {current}",
            reset,
            correction=correction,
        )
    needed, driver = max(terms, key=lambda t: t[0])  # max keeps the first of equals

    figures = []
    if rate is not None:
        figures.append(f"{rate:.3g} req/s")
        if capacity is not None and rate_per_replica is not None:
            figures[-1] += (
                f" at {capacity:.3g} req/s per replica (engine {rate_per_replica:.3g}"
                f" x correction {correction:.2f})"
            )
    if in_flight is not None:
        figures.append(f"{in_flight:.0f} running+waiting")
        if concurrency is not None:
            figures[-1] += f" at {concurrency:.3g} per replica"
    latency = _latency_words(live, targets)
    if latency:
        figures.append(latency)
    what = f"{len(live)}/{len(windows)} replicas report {'; '.join(figures)}"

    since_scale = None if memory.last_scale_at is None else now - memory.last_scale_at
    cooling = since_scale is not None and since_scale < policy.cooldown_seconds

    def decision(replicas: int, reason: Reason, text: str, mem: ScalingMemory) -> ScalingDecision:
        return ScalingDecision(replicas, reason, text, mem, needed, correction)

    if needed > current:
        if current >= max_replicas:
            return decision(
                current,
                Reason.AT_MAX_REPLICAS,
                f"{what}; {needed} needed, held at maxReplicas {max_replicas}",
                reset,
            )
        target = min(needed, max_replicas)
        if cooling:
            return decision(
                current,
                Reason.COOLING_DOWN,
                f"{what}; {target} needed, but last scaled {since_scale:.0f} s ago "
                f"(cool-down {policy.cooldown_seconds:.0f} s), holding {current}",
                reset,
            )
        capped = f" (maxReplicas {max_replicas})" if target < needed else ""
        return decision(
            target,
            driver,
            f"{what}; {needed} needed: {current} -> {target}{capped}",
            replace(reset, last_scale_at=now, last_direction=UP),
        )

    # Scale-down: the count that keeps utilisation under the band, held for the period.
    band = policy.scale_down_utilization
    comfortable = [0]
    if rate is not None and capacity is not None:
        comfortable.append(_ceil(rate / (band * capacity)))
    if in_flight is not None and concurrency is not None:
        comfortable.append(_ceil(in_flight / (band * concurrency)))
    fits = max(max(comfortable), min_replicas, needed)
    blockers = []
    if fits >= current:
        blockers.append(f"no fewer replicas keep utilisation under {band:.0%}")
    complete = len(live)  # replicas with every figure the terms use
    if rate is not None and capacity is not None:
        complete = min(complete, len(rates))
    if in_flight is not None and concurrency is not None:
        complete = min(complete, len(flights))
    if complete < current:
        blockers.append(f"{current - complete} of {current} replicas gave no figures")
    if any(over):
        blockers.append("a replica is over its latency target")
    if blockers:
        return decision(current, Reason.HOLD, f"{what}; {'; '.join(blockers)}", reset)

    # A period that began at another count (the spec was edited meanwhile) starts over.
    if memory.below_since is None or memory.below_peak >= current:
        since, peak = now, fits
    else:
        since, peak = memory.below_since, max(memory.below_peak, fits)
    below = replace(memory, below_since=since, below_peak=peak)
    held = now - since
    if held < policy.stabilization_seconds:
        return decision(
            current,
            Reason.HOLD,
            f"{what}; {peak} would do, for {held:.0f} s of {policy.stabilization_seconds:.0f} s",
            below,
        )
    if cooling:
        return decision(
            current,
            Reason.COOLING_DOWN,
            f"{what}; {peak} would do, but last scaled {since_scale:.0f} s ago "
            f"(cool-down {policy.cooldown_seconds:.0f} s)",
            below,
        )
    return decision(
        peak,
        Reason.SCALE_DOWN_IDLE,
        f"{what}; {peak} have kept utilisation under {band:.0%} for {held:.0f} s: "
        f"{current} -> {peak}",
        replace(reset, last_scale_at=now, last_direction=DOWN),
    )
