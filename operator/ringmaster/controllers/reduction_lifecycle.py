"""The ReductionServerPool state machine (pure): how many reducers, and what to report.

A pool with ``spec.replicas`` has that many. Otherwise it is sized by the TrainingJobs bound to
it: the largest reducer count any of them asks for under the bandwidth rule (reducers' aggregate
bandwidth >= workers' aggregate, Vertex AI's sizing rule), up to maxReplicas. The jobs that run at
once divide the pool's bandwidth evenly (``status.runningJobs``), and each asks at its share, so
two equal jobs size the pool twice as large as one. When no job uses a
sized pool any more, its reducers stay for scaleDownGracePeriodSeconds (a restarting job finds
them) and then scale to zero.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ringmaster.api import ReductionServerPoolSpec, ReductionServerPoolStatus
from ringmaster.controllers.reporting import Conditions, Event
from ringmaster.manifests.reduction import (
    reducer_endpoint,
    reducer_service,
    reducer_statefulset,
    selector_string,
)

READY, SCALING, IDLE, PENDING = "Ready", "Scaling", "Idle", "Pending"
TRUE: Literal["True", "False"] = "True"
FALSE: Literal["True", "False"] = "False"


@dataclass(frozen=True)
class PoolView:
    name: str
    namespace: str
    generation: int
    spec: ReductionServerPoolSpec
    status: ReductionServerPoolStatus


@dataclass(frozen=True)
class BoundJob:
    name: str
    reducers_wanted: int | None  # the job's reducer count under the bandwidth rule, at its share
    running: bool = False  # its gang holds its pool now, so it divides the reducers' bandwidth


@dataclass(frozen=True)
class ReducerPods:
    """What the pool's pods are doing."""

    ready_ordinals: tuple[int, ...] = ()
    unschedulable: int = 0


@dataclass
class PoolDecision:
    status: ReductionServerPoolStatus
    apply: list[dict[str, Any]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None


def desired_replicas(
    pool: PoolView, jobs: Sequence[BoundJob], now: dt.datetime
) -> tuple[int, dt.datetime | None, float | None]:
    """(replicas, idle since, seconds until the grace period ends)."""
    spec, status = pool.spec, pool.status
    if spec.replicas is not None:
        return spec.replicas, None, None
    wanted = [j.reducers_wanted for j in jobs if j.reducers_wanted]
    if jobs:
        return min(max(wanted, default=status.replicas or 0), spec.max_replicas), None, None
    idle_since = status.idle_since or now
    remaining = spec.scale_down_grace_period_seconds - (now - idle_since).total_seconds()
    if remaining <= 0:
        return 0, idle_since, None
    return status.replicas or 0, idle_since, remaining


def reconcile_reduction_pool(
    pool: PoolView,
    jobs: Sequence[BoundJob],
    pods: ReducerPods,
    gbps_per_reducer: float | None,
    now: dt.datetime,
) -> PoolDecision:
    spec = pool.spec
    status = pool.status.model_copy(deep=True)
    status.observed_generation = pool.generation
    decision = PoolDecision(status=status)
    replicas, idle_since, grace_left = desired_replicas(pool, jobs, now)
    decision.requeue_after = grace_left
    if replicas != (pool.status.replicas or 0) and pool.status.replicas is not None:
        decision.events.append(
            Event("Normal", "Resized", f"reducers {pool.status.replicas} -> {replicas}")
        )

    decision.apply = [
        reducer_service(pool.name, spec.port),
        reducer_statefulset(pool.name, spec, replicas),
    ]
    ready = [o for o in pods.ready_ordinals if o < replicas]
    status.replicas = replicas
    status.ready_replicas = len(ready)
    status.selector = selector_string(pool.name)
    status.endpoints = [reducer_endpoint(pool.name, pool.namespace, spec.port, o) for o in ready]
    status.aggregate_bandwidth_gbps = (
        round(len(ready) * gbps_per_reducer, 3) if gbps_per_reducer is not None else None
    )
    status.bound_jobs = sorted(j.name for j in jobs)
    status.running_jobs = sorted(j.name for j in jobs if j.running)
    status.idle_since = idle_since

    value: Literal["True", "False"]
    if replicas == 0:
        status.phase = IDLE if not jobs else PENDING
        reason, message, value = "NoReducers", "no job needs reducers", FALSE
    elif len(ready) >= replicas:
        status.phase = READY if jobs or spec.replicas is not None else IDLE
        reason, message, value = "ReducersReady", f"{replicas} reducers ready", TRUE
    elif pods.unschedulable:
        status.phase = SCALING
        reason, value = "Unschedulable", FALSE
        message = (
            f"{len(ready)}/{replicas} reducers ready; {pods.unschedulable} cannot be scheduled: "
            f"no free {spec.machine_type} node"
        )
    else:
        status.phase = SCALING
        reason, message, value = "Starting", f"{len(ready)}/{replicas} reducers ready", FALSE
    conditions = Conditions(status, pool.generation, now)
    before = conditions.set("Ready", value, reason, message).before
    if reason == "Unschedulable" and (before is None or before.reason != reason):
        decision.events.append(Event("Warning", reason, message))
    conditions.stamp()
    return decision
