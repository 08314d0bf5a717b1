"""The TrainingJob state machine: what to create, delete and report, from a snapshot of the world.

Pure: no I/O, no clock (``now`` is an argument), no kopf. The kopf shell (trainingjob.py) reads
the job, its pods and the node pools from kopf's indexes, calls :func:`reconcile_training`, and
applies the :class:`Decision`. Level-based: the same snapshot always gives the same decision, so
running it again after a crash or on a resync is safe.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ringmaster.api import (
    TrainingJobSpec,
    TrainingJobStatus,
    TrainingPlan,
    WorkerCounts,
    find_condition,
    set_condition,
)
from ringmaster.api.trainingjob import ReductionServerSettings
from ringmaster.manifests.naming import ATTEMPT_ANNOTATION, RANK_LABEL, owned_reducer_pool_name
from ringmaster.manifests.reduction import owned_reducer_pool
from ringmaster.manifests.training import (
    PoolPlacement,
    rendezvous_service,
    worker_pod,
)
from ringmaster.placement.pools import NodePool, NoPool, accelerator_pools, gang_fits, pod_requests

PENDING, ADMITTED, RUNNING = "Pending", "Admitted", "Running"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
FINISHED = (SUCCEEDED, FAILED)

SCHEDULABLE, PLANNED, COMPLETE = "Schedulable", "Planned", "Complete"
DOES_NOT_FIT = "DoesNotFit"
FAILED_CONDITION, SUSPENDED_CONDITION = "Failed", "Suspended"

# How soon to look again while something is in motion (pods starting or going away).
SOON_SECONDS = 1.0

REDUCTION_SERVER = "ReductionServer"
REDUCERS_CONDITION = "ReductionServerReady"


@dataclass(frozen=True)
class ReducerPool:
    """What a job needs to know of the ReductionServerPool it uses."""

    name: str
    replicas: int  # desired (status.replicas)
    ready: int
    endpoints: tuple[str, ...]
    machine_type: str
    message: str = ""  # the pool's Ready condition message ("3/25 ready; 22 cannot be scheduled")


Planner = Callable[[TrainingJobSpec, str | None, ReducerPool | None], dict[str, Any]]
"""(spec, machine type of the chosen pool, the reducer pool if any) -> status.plan (camelCase)."""


@dataclass(frozen=True)
class WorkerPod:
    """What the state machine needs to know of one worker pod."""

    name: str
    rank: int
    attempt: int
    phase: str
    node: str | None
    terminating: bool
    exit_detail: str | None = None  # "exit code 137 (Error)" for a failed container

    @classmethod
    def from_object(cls, pod: Mapping[str, Any]) -> WorkerPod:
        metadata = pod.get("metadata") or {}
        status = pod.get("status") or {}
        detail = None
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and terminated.get("exitCode", 0) != 0:
                detail = f"exit code {terminated['exitCode']} ({terminated.get('reason', '')})"
        return cls(
            name=metadata["name"],
            rank=int((metadata.get("labels") or {}).get(RANK_LABEL, -1)),
            attempt=int((metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION, 0)),
            phase=status.get("phase") or "Pending",
            node=(pod.get("spec") or {}).get("nodeName"),
            terminating=bool(metadata.get("deletionTimestamp")),
            exit_detail=detail,
        )


@dataclass(frozen=True)
class JobView:
    name: str
    namespace: str
    generation: int
    spec: TrainingJobSpec
    status: TrainingJobStatus


@dataclass(frozen=True)
class Capacity:
    """The world, as admission sees it."""

    pools: Mapping[str, NodePool]
    used: Mapping[str, Mapping[str, Decimal]]
    """Requests of running pods, by node."""
    promised: Mapping[str, Sequence[Mapping[str, Decimal]]] = field(default_factory=dict)
    """Per pool: requests of other admitted gangs' pods that are not bound yet."""
    free_reducer_hosts: Mapping[str, int] = field(default_factory=dict)
    """Per machine type: CPU hosts with room for one more reducer (none there yet), less the
    reducers already asked for that have no host."""


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class Decision:
    status: TrainingJobStatus
    create: list[dict[str, Any]] = field(default_factory=list)
    apply: list[dict[str, Any]] = field(default_factory=list)
    """Objects to server-side apply every time (the job's own ReductionServerPool)."""
    delete: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None
    admitted_pool: str | None = None
    """Set when this decision admits a gang: the pool whose capacity it now holds."""
    held: tuple[str, dict[str, Decimal]] | None = None
    """While the job's own reducers start: (pool, one worker's requests) whose room is held."""
    reducers_asked: tuple[str, int] | None = None
    """(machine type, count) of reducers this decision asks for, until they have hosts."""


# Why a job cannot be placed (the name the state machine has always used).
Unschedulable = NoPool


def _reducer_problem(
    shared: str | None, reducers: ReducerPool | None, namespace: str
) -> tuple[str, str] | None:
    """Why the job's reducers cannot serve it yet (reason, message), or None when they can."""
    if reducers is None:
        if shared:
            return (
                "ReductionServerPoolNotFound",
                f"ReductionServerPool {shared} does not exist in namespace {namespace}",
            )
        return "ReducersNotReady", "creating the job's reduction server pool"
    if reducers.replicas == 0 or reducers.ready < reducers.replicas:
        detail = reducers.message or f"{reducers.ready}/{reducers.replicas} ready"
        return "ReducersNotReady", f"reducers of pool {reducers.name}: {detail}"
    return None


def _accelerator_resource(spec: TrainingJobSpec) -> str:
    return "google.com/tpu" if spec.accelerator.type.startswith("tpu-") else "nvidia.com/gpu"


def choose_pool(
    spec: TrainingJobSpec, capacity: Capacity, current: str | None = None
) -> NodePool | Unschedulable:
    """The pool for the gang: same accelerator, hosts big enough, machine type and TPU topology
    as asked. Among those: the one the job already uses, else one where the gang fits now, else
    the one whose hosts match perWorker exactly (no stranded accelerators)."""
    accelerator = spec.accelerator.type
    per_worker = spec.accelerator.per_worker
    big_enough = accelerator_pools(capacity.pools, accelerator, per_worker, "perWorker")
    if isinstance(big_enough, NoPool):
        return big_enough
    if spec.machine_type:
        wanted = spec.machine_type
        big_enough = [p for p in big_enough if p.identity.instance_type == wanted]
        if not big_enough:
            return Unschedulable(
                "NoMatchingPool", f"no {accelerator} pool of machine type {wanted}"
            )
    if spec.accelerator.topology:
        topology = spec.accelerator.topology
        matching = [p for p in big_enough if p.identity.tpu_topology == topology]
        if not matching:
            seen = ", ".join(f"{p.name}={p.identity.tpu_topology or '-'}" for p in big_enough)
            return Unschedulable(
                "TopologyMismatch", f"no {accelerator} pool has topology {topology} ({seen})"
            )
        big_enough = matching
    by_name = {p.name: p for p in big_enough}
    if current in by_name:
        return by_name[current]
    if len(big_enough) == 1:
        return big_enough[0]  # nothing to rank
    request = {_accelerator_resource(spec): Decimal(per_worker)}

    def preference(pool: NodePool) -> tuple[bool, bool, str]:
        fits = gang_fits(
            pool,
            capacity.used,
            request,
            spec.workers,
            promised=capacity.promised.get(pool.name, ()),
        ).fits
        return (not fits, pool.accelerators_per_node != per_worker, pool.name)

    return min(big_enough, key=preference)


def _set(
    job: JobView,
    status: TrainingJobStatus,
    type_: str,
    value: str,
    reason: str,
    message: str,
    now: dt.datetime,
) -> bool:
    """Set a condition; True when its status or reason changed: a transition, worth an Event.
    A new message alone (progress such as "11/25 reducers ready") updates it quietly."""
    before = find_condition(status.conditions, type_)
    status.conditions = set_condition(
        status.conditions,
        type_,
        value,  # type: ignore[arg-type]
        reason,
        message,
        observed_generation=job.generation,
        now=now,
    )
    return before is None or (before.status, before.reason) != (value, reason)


def _counts(pods: Sequence[WorkerPod], workers: int) -> dict[str, int]:
    counts = {"total": workers, "pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in pods:
        key = pod.phase.lower()
        if key in counts and key != "total":
            counts[key] += 1
    return counts


def _finish(
    job: JobView,
    decision: Decision,
    live: Sequence[WorkerPod],
    phase: str,
    reason: str,
    message: str,
    now: dt.datetime,
) -> Decision:
    status = decision.status
    status.phase = phase
    status.completion_time = now
    condition = COMPLETE if phase == SUCCEEDED else FAILED_CONDITION
    _set(job, status, condition, "True", reason, message, now)
    if phase == FAILED:
        decision.delete = [p.name for p in live if p.phase not in FINISHED]
    decision.events.append(Event("Normal" if phase == SUCCEEDED else "Warning", reason, message))
    ttl = job.spec.run_policy.ttl_seconds_after_finished
    decision.requeue_after = float(ttl) if ttl is not None else None
    return decision


def reconcile_training(
    job: JobView,
    pods: Sequence[WorkerPod],
    capacity: Capacity,
    now: dt.datetime,
    planner: Planner,
    reducer_pools: Mapping[str, ReducerPool] | None = None,
) -> Decision:
    spec = job.spec
    status = job.status.model_copy(deep=True)
    status.observed_generation = job.generation
    decision = Decision(status=status)
    live = [p for p in pods if not p.terminating]
    attempt = status.restarts or 0

    # Finished: nothing runs again; only the TTL is left to honour.
    if status.phase in FINISHED:
        ttl = spec.run_policy.ttl_seconds_after_finished
        if ttl is not None and status.completion_time is not None:
            remaining = (status.completion_time - now).total_seconds() + ttl
            if remaining <= 0:
                decision.delete_job = True
            else:
                decision.requeue_after = remaining
        return decision

    if spec.run_policy.suspend:
        decision.delete = [p.name for p in live]
        if status.phase != SUSPENDED:
            decision.events.append(Event("Normal", "Suspended", "job suspended: workers deleted"))
        status.phase = SUSPENDED
        _set(
            job, status, SUSPENDED_CONDITION, "True", "Suspended", "runPolicy.suspend is true", now
        )
        status.workers = None
        return decision
    suspended = find_condition(status.conditions, SUSPENDED_CONDITION)
    if suspended is not None and suspended.status == "True":
        _set(
            job, status, SUSPENDED_CONDITION, "False", "Resumed", "runPolicy.suspend is false", now
        )
        decision.events.append(Event("Normal", "Resumed", "job resumed: admitting the gang again"))
        status.phase = PENDING

    choice = choose_pool(spec, capacity, current=status.pool)
    if isinstance(choice, Unschedulable):
        status.phase = PENDING
        if _set(job, status, SCHEDULABLE, "False", choice.reason, choice.message, now):
            decision.events.append(Event("Warning", choice.reason, choice.message))
        return decision
    pool = choice

    previous_strategy = status.plan.strategy if status.plan else None
    settings = spec.communication.reduction_server or ReductionServerSettings()
    reducer_pool_name = settings.pool_name or owned_reducer_pool_name(job.name)
    reducers = (reducer_pools or {}).get(reducer_pool_name)
    try:
        plan = planner(spec, pool.identity.instance_type, reducers)
    except ValueError as error:
        # The engine cannot model this hardware: run anyway, without a prediction, and say why.
        status.plan = None
        if _set(job, status, PLANNED, "False", "PlanFailed", str(error), now):
            decision.events.append(Event("Warning", "PlanFailed", str(error)))
        plan = {}
    else:
        status.plan = TrainingPlan.model_validate(plan)
        _set(job, status, PLANNED, "True", "Planned", f"strategy {plan.get('strategy')}", now)
    if plan.get("fits") is False:
        # The model fits no layout on this pool's accelerators: wait, say why, create nothing.
        status.phase = PENDING
        message = str(plan.get("reason") or "the model does not fit in accelerator memory")
        if _set(job, status, SCHEDULABLE, "False", DOES_NOT_FIT, message, now):
            decision.events.append(Event("Warning", DOES_NOT_FIT, message))
        return decision
    if status.plan is not None and status.plan.strategy != previous_strategy:
        decision.events.append(
            Event(
                "Normal",
                "StrategyChosen",
                f"{status.plan.strategy}: predicted {plan.get('stepSeconds', 0):.3g} s/step, "
                f"bottleneck {plan.get('bottleneck')}",
            )
        )

    placement = PoolPlacement(
        pool=pool.name,
        node_selector=pool.node_selector(),
        accelerator_resource=_accelerator_resource(spec),
        machine_type=pool.identity.instance_type,
    )
    # What one worker asks of a node: every fit check below needs it, and it is the same pod.
    one_worker = pod_requests(
        worker_pod(job.name, job.namespace, spec, placement, 0, attempt, layout=plan)
    )
    uses_reducers = plan.get("strategy") == REDUCTION_SERVER
    status.reduction_server_pool = reducer_pool_name if uses_reducers else None
    if uses_reducers and settings.pool_name is None:
        wanted = settings.replicas or int(plan.get("reducersWanted") or 1)
        waiting = not any(p.attempt == attempt for p in live)
        if reducers is None and waiting:
            # The job's reducers are part of its gang: create them only when the workers fit
            # now and every reducer has a free host, or two jobs could each strand half a pool.
            fit = gang_fits(
                pool,
                capacity.used,
                one_worker,
                spec.workers,
                promised=capacity.promised.get(pool.name, ()),
                one_per_node=placement.accelerator_resource == "google.com/tpu",
            )
            free_hosts = capacity.free_reducer_hosts.get(settings.machine_type, 0)
            shortage = None
            if not fit.fits:
                shortage = (
                    "InsufficientCapacity",
                    f"needs {spec.workers} workers x {spec.accelerator.per_worker} "
                    f"{placement.accelerator_resource} on pool {pool.name}; "
                    f"{fit.available} fit now",
                )
            elif free_hosts < wanted:
                shortage = (
                    "InsufficientReducerCapacity",
                    f"needs {wanted} free {settings.machine_type} hosts for its reducers; "
                    f"{free_hosts} free",
                )
            if shortage:
                status.phase = PENDING
                if _set(job, status, SCHEDULABLE, "False", *shortage, now):
                    decision.events.append(Event("Normal", *shortage))
                return decision
            decision.reducers_asked = (settings.machine_type, wanted)
        decision.apply.append(owned_reducer_pool(job.name, settings, wanted))
        if waiting:  # keep the workers' room while the reducers start
            decision.held = (pool.name, one_worker)
    reducer_problem = None
    if uses_reducers:
        reducer_problem = _reducer_problem(settings.pool_name, reducers, job.namespace)
        if reducer_problem is None:
            ready = reducers.ready if reducers else 0
            message = f"{ready} reducers of pool {reducer_pool_name} ready"
            _set(job, status, REDUCERS_CONDITION, "True", "ReducersReady", message, now)
        else:
            reason, message = reducer_problem
            changed = _set(job, status, REDUCERS_CONDITION, "False", reason, message, now)
            if changed and status.phase == RUNNING:
                # Workers keep running (a reducer restarts in seconds); the user should know.
                decision.events.append(Event("Warning", "ReducersLost", message))

    endpoints = reducers.endpoints if uses_reducers and reducers else ()
    current = {p.rank: p for p in live if p.attempt == attempt}
    stale = [p for p in live if p.attempt != attempt]
    decision.delete += [p.name for p in stale]
    status.workers = None

    # A failed worker fails the gang: restart all of it, or give up at the backoff limit.
    failed = sorted((p for p in current.values() if p.phase == "Failed"), key=lambda p: p.rank)
    lost = status.phase == RUNNING and len(current) < spec.workers
    if failed or lost:
        what = (
            f"worker {failed[0].rank} failed ({failed[0].exit_detail or 'Failed'})"
            if failed
            else f"{spec.workers - len(current)} worker pod(s) disappeared"
        )
        if attempt >= spec.run_policy.backoff_limit:
            return _finish(
                job,
                decision,
                live,
                FAILED,
                "BackoffLimitExceeded",
                f"{what}; backoffLimit {spec.run_policy.backoff_limit} reached",
                now,
            )
        decision.delete += [p.name for p in current.values()]
        status.restarts = attempt + 1
        status.phase = PENDING
        decision.events.append(
            Event(
                "Warning",
                "Restarted",
                f"{what}; restarting the gang ({attempt + 1}/{spec.run_policy.backoff_limit})",
            )
        )
        decision.requeue_after = SOON_SECONDS
        return decision

    if len(current) == spec.workers and all(p.phase == "Succeeded" for p in current.values()):
        return _finish(
            job,
            decision,
            live,
            SUCCEEDED,
            "Completed",
            f"all {spec.workers} workers succeeded",
            now,
        )

    deadline = spec.run_policy.active_deadline_seconds
    started = status.start_time
    if deadline is not None and started is not None and (now - started).total_seconds() >= deadline:
        return _finish(
            job,
            decision,
            live,
            FAILED,
            "DeadlineExceeded",
            f"ran longer than activeDeadlineSeconds ({deadline})",
            now,
        )

    if not current:
        if stale or any(p.terminating for p in pods):
            decision.requeue_after = SOON_SECONDS  # the previous gang is still going away
            return decision
        if reducer_problem:
            status.phase = PENDING
            reason, message = reducer_problem
            if _set(job, status, SCHEDULABLE, "False", reason, message, now):
                decision.events.append(Event("Normal", reason, message))
            decision.requeue_after = SOON_SECONDS
            return decision
        fit = gang_fits(
            pool,
            capacity.used,
            one_worker,
            spec.workers,
            promised=capacity.promised.get(pool.name, ()),
            one_per_node=placement.accelerator_resource == "google.com/tpu",
        )
        if not fit.fits:
            status.phase = PENDING
            message = (
                f"needs {spec.workers} workers x {spec.accelerator.per_worker} "
                f"{placement.accelerator_resource} on pool {pool.name}; {fit.available} fit now"
            )
            if _set(job, status, SCHEDULABLE, "False", "InsufficientCapacity", message, now):
                decision.events.append(Event("Normal", "InsufficientCapacity", message))
            return decision
        decision.create = [rendezvous_service(job.name)] + [
            worker_pod(job.name, job.namespace, spec, placement, rank, attempt, endpoints, plan)
            for rank in range(spec.workers)
        ]
        decision.admitted_pool = pool.name
        status.phase = ADMITTED
        status.pool = pool.name
        message = (
            f"gang of {spec.workers} workers x {spec.accelerator.per_worker} "
            f"{spec.accelerator.type} admitted on pool {pool.name} "
            f"({pool.identity.instance_type})"
        )
        if _set(job, status, SCHEDULABLE, "True", "Admitted", message, now):
            decision.events.append(Event("Normal", "Admitted", message))
        decision.requeue_after = SOON_SECONDS
        return decision

    missing = [r for r in range(spec.workers) if r not in current]
    admitted = find_condition(status.conditions, SCHEDULABLE)
    if missing and (admitted is None or admitted.status != "True"):
        # A partial gang that was never recorded as admitted (the operator stopped while
        # creating it): the missing workers must fit now, or the partial gang is released.
        fit = gang_fits(
            pool,
            capacity.used,
            one_worker,
            len(missing),
            promised=capacity.promised.get(pool.name, ()),
            one_per_node=placement.accelerator_resource == "google.com/tpu",
        )
        if not fit.fits:
            decision.delete += [p.name for p in current.values()]
            status.phase = PENDING
            decision.requeue_after = SOON_SECONDS
            return decision
        message = f"gang of {spec.workers} workers completed on pool {pool.name}"
        _set(job, status, SCHEDULABLE, "True", "Admitted", message, now)
        status.pool = pool.name
        decision.admitted_pool = pool.name
    # Admitted earlier: recreate pods that a crash kept us from creating.
    decision.create = [
        worker_pod(job.name, job.namespace, spec, placement, rank, attempt, endpoints, plan)
        for rank in missing
    ]
    counts = _counts(list(current.values()), spec.workers)
    status.workers = WorkerCounts(**counts)
    if counts["running"] == spec.workers:
        if status.phase != RUNNING:
            decision.events.append(Event("Normal", "Running", f"all {spec.workers} workers run"))
        status.phase = RUNNING
        status.start_time = status.start_time or now
        if deadline is not None:
            decision.requeue_after = deadline - (now - status.start_time).total_seconds()
    else:
        status.phase = ADMITTED
        decision.requeue_after = SOON_SECONDS
    return decision
