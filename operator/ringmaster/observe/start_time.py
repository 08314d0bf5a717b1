"""When a waiting job is expected to start: the running jobs' ends, and the admission order.

The estimate replays the queue against a timeline of each candidate pool's free accelerators:
running jobs give theirs back at their ETA; the jobs ahead of this one, in admission order, take
room at the first moment they fit and hold it for their predicted duration (conservative
backfilling: a later job may start earlier only where it delays no one ahead). A job starts at
the first moment its gang fits on one of its candidate pools for as long as it runs.

What it does not know, it says: a running job with neither progress reports nor ``spec.steps``
has no end in time, so a start that waits for its room is "unknown", naming that job. Counting
accelerators ignores how they spread over hosts (a gang of whole hosts waits for whole hosts),
so the estimate is the earliest start capacity allows, not a promise.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MAX_QUEUE = 200
"""Waiting jobs replayed, in admission order; those beyond get "unknown" (the replay is
quadratic in a pool's events, and a start 200 jobs away is not worth a number)."""


@dataclass(frozen=True)
class Holder:
    """A job that holds accelerators of a pool now (admitted or running)."""

    job: str  # namespace/name
    pool: str
    accelerators: int
    ends: dt.datetime | None
    """Its ETA, or None: unknown."""


@dataclass(frozen=True)
class Queued:
    """A waiting job, in admission order."""

    job: str
    pools: tuple[str, ...]  # its candidate pools, best first
    accelerators: int
    duration_seconds: float | None
    """spec.steps x predicted step time, or None: unknown (it holds its room for good)."""
    pool_accelerators: tuple[int, ...] = ()
    """Accelerators it needs on each of ``pools`` where they differ (a job with accelerator
    alternatives: each pool's accelerator runs its own shape); empty: ``accelerators`` on all."""

    def needs(self, index: int) -> int:
        return self.pool_accelerators[index] if self.pool_accelerators else self.accelerators


@dataclass(frozen=True)
class StartEstimate:
    time: dt.datetime | None
    pool: str | None
    reason: str
    now: bool = False
    """Room enough is free already (or a job it waits for is past its ETA): no time is given,
    since "now" would be a new time at every estimate and rewrite the status for nothing."""

    def message(self) -> str:
        if self.now:
            return f"any moment on pool {self.pool}: {self.reason}"
        if self.time is None:
            return f"unknown: {self.reason}"
        return f"{self.time.isoformat()} on pool {self.pool}: {self.reason}"


@dataclass
class _Timeline:
    """A pool's free accelerators from now on: a start value and timed changes."""

    free: int
    changes: list[tuple[dt.datetime, int]] = field(default_factory=list)
    held_for_good: list[str] = field(default_factory=list)  # why room never comes back

    def add(self, when: dt.datetime, delta: int) -> None:
        self.changes.append((when, delta))
        self.changes.sort(key=lambda c: c[0])

    def earliest(self, need: int, now: dt.datetime, hold: float | None) -> dt.datetime | None:
        """The first time from ``now`` when ``need`` is free for ``hold`` seconds (None: ever)."""
        times = [now] + [t for t, _ in self.changes if t > now]
        for start in times:
            end = None if hold is None else start + dt.timedelta(seconds=hold)
            if all(
                self._free_at(t) >= need
                for t in [start]
                + [c for c, _ in self.changes if start < c and (end is None or c < end)]
            ):
                return start
        return None

    def _free_at(self, when: dt.datetime) -> int:
        return self.free + sum(delta for t, delta in self.changes if t <= when)


def expected_starts(
    free: Mapping[str, int],
    holders: Sequence[Holder],
    queue: Sequence[Queued],
    now: dt.datetime,
) -> dict[str, StartEstimate]:
    """An estimate for every job of ``queue`` (given in admission order)."""
    timelines = {pool: _Timeline(free=count) for pool, count in free.items()}
    for holder in holders:
        timeline = timelines.setdefault(holder.pool, _Timeline(free=0))
        if holder.ends is None:
            timeline.held_for_good.append(
                f"{holder.job} runs on {holder.pool} with neither progress reports nor "
                "spec.steps, so its end is unknown"
            )
        else:
            timeline.add(max(holder.ends, now), holder.accelerators)
    estimates: dict[str, StartEstimate] = {}
    for position, job in enumerate(queue):
        if position >= MAX_QUEUE:
            estimates[job.job] = StartEstimate(
                None, None, f"more than {MAX_QUEUE} jobs are ahead of it"
            )
            continue
        best: tuple[dt.datetime, str, int] | None = None
        for index, pool in enumerate(job.pools):
            candidate = timelines.get(pool)
            if candidate is None:
                continue
            when = candidate.earliest(job.needs(index), now, job.duration_seconds)
            if when is not None and (best is None or when < best[0]):
                best = (when, pool, job.needs(index))
        if best is None:
            estimates[job.job] = StartEstimate(None, None, _why_unknown(job, timelines))
            continue
        when, pool, need = best
        timeline = timelines[pool]
        timeline.add(when, -need)
        if job.duration_seconds is None:
            timeline.held_for_good.append(
                f"{job.job}, ahead of it on {pool}, has no spec.steps, so its end is unknown"
            )
        else:
            timeline.add(when + dt.timedelta(seconds=job.duration_seconds), need)
        if when <= now:
            estimates[job.job] = StartEstimate(
                None,
                pool,
                "enough accelerators are free, or will be as soon as the jobs past their ETA "
                "end; it waits on how they spread over hosts, or on what its condition says",
                now=True,
            )
            continue
        estimates[job.job] = StartEstimate(
            when.replace(microsecond=0),
            pool,
            f"from the running jobs' ETAs and {position} job(s) ahead in admission order",
        )
    return estimates


def _why_unknown(job: Queued, timelines: Mapping[str, _Timeline]) -> str:
    reasons = [r for pool in job.pools if pool in timelines for r in timelines[pool].held_for_good]
    if reasons:
        more = f" (and {len(reasons) - 2} more)" if len(reasons) > 2 else ""
        return "; ".join(reasons[:2]) + more
    if not any(pool in timelines for pool in job.pools):
        return "no candidate pool is known"
    return "its candidate pools have fewer accelerators than it needs, even when every job ends"
