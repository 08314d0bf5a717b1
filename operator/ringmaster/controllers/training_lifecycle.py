"""The TrainingJob state machine: one function per phase, from a snapshot of the world.

Pure: no I/O, no clock (``now`` is an argument), no kopf. The kopf shell (trainingjob.py) reads
the job and its pods, calls :func:`reconcile_training`, and applies the :class:`Decision`. Whether
and where a waiting gang starts is not decided here: the admission cycle
(:mod:`ringmaster.admission.cycle`) decides it for all waiting jobs at once and hands the job its
verdict; this machine records the verdict in status and acts on it.

Phases (``status.phase``): finished (Succeeded, Failed), suspended, waiting (Pending, no admission
for the current attempt), admitted (admission recorded, pods being created or reducers
starting), running, and restarting (a worker failed or went: the gang goes, a new attempt waits).
The admission is written to ``status.admission`` before any pod is created, so a restarted
operator finds it in the API.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ringmaster.admission import kueue
from ringmaster.admission.cycle import (
    WORKER_LARGER_THAN_NODE,
    Admit,
    GangOption,
    ReducerNeed,
    Verdict,
    Wait,
    WaitingGang,
    promise_for,
)
from ringmaster.admission.kueue import Flavor, WorkloadView, WorkloadWrite
from ringmaster.admission.pools import candidate_pools
from ringmaster.admission.snapshot import Key, PoolSummary, Promise, shape
from ringmaster.api import (
    TrainingJobSpec,
    TrainingJobStatus,
    TrainingPlan,
    WorkerCounts,
    find_condition,
    is_tpu,
)
from ringmaster.api.reductionserverpool import ReductionServerPoolSpec
from ringmaster.api.trainingjob import Admission, ReductionServerSettings
from ringmaster.controllers.reporting import (
    Conditions,
    Event,
    plan_warnings,
    report_plausibility,
)
from ringmaster.manifests.naming import (
    ATTEMPT_ANNOTATION,
    MANAGED_BY,
    OPERATOR,
    RANK_LABEL,
    TRAINING_JOB_LABEL,
    owned_reducer_pool_name,
)
from ringmaster.manifests.reduction import owned_reducer_pool, reducer_statefulset
from ringmaster.manifests.training import (
    REDUCER_ENDPOINTS_ENV,
    PoolPlacement,
    rendezvous_service,
    worker_pod,
)
from ringmaster.placement.labels import GKE_NODEPOOL, GPU_RESOURCE, POOL_NAME_KEYS, TPU_RESOURCE
from ringmaster.placement.pools import NoPool, pod_requests

PENDING, ADMITTED, RUNNING = "Pending", "Admitted", "Running"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
FINISHED = (SUCCEEDED, FAILED)

SCHEDULABLE, PLANNED, COMPLETE = "Schedulable", "Planned", "Complete"
DOES_NOT_FIT, PLAN_FAILED = "DoesNotFit", "PlanFailed"
FAILED_CONDITION, SUSPENDED_CONDITION = "Failed", "Suspended"

# How soon to look again while something is in motion (pods starting or going away).
SOON_SECONDS = 1.0

REDUCTION_SERVER = "ReductionServer"
# A gang restarted for the infrastructure's sake (a named host lost before its worker started).
REQUEUED = "Requeued"
# A gang restarted because a worker failed or went (an attempt of runPolicy.backoffLimit spent).
RESTARTED = "Restarted"
# Schedulable=False of a gang that waits for the admission cycle's word on its new attempt.
WAITING_FOR_ADMISSION = "WaitingForAdmission"
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
    running_jobs: frozenset[str] = frozenset()  # the pool's status.runningJobs
    share: float = 1.0  # the part of its bandwidth the job looking at it gets (reducer_pool_for)

    def share_for(self, job: str) -> float:
        """A job's part of the pool's bandwidth: the jobs that run on it at once divide it
        evenly, and a job about to start counts itself in (so its plan, and the pool's size
        that follows from the plan, already hold when it runs)."""
        return 1.0 / (len(self.running_jobs - {job}) + 1)


Planner = Callable[[TrainingJobSpec, str | None, ReducerPool | None], TrainingPlan]
"""(spec, machine type of the pool, the reducer pool if any) -> status.plan; raises ValueError
when the engine cannot model the hardware."""


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
    pool: str | None = None  # the pool its nodeSelector names
    reducer_endpoints: tuple[str, ...] = ()  # the reducers it was started with (its env)

    @classmethod
    def from_object(cls, pod: Mapping[str, Any]) -> WorkerPod:
        metadata = pod.get("metadata") or {}
        status = pod.get("status") or {}
        spec = pod.get("spec") or {}
        detail = None
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and terminated.get("exitCode", 0) != 0:
                detail = f"exit code {terminated['exitCode']} ({terminated.get('reason', '')})"
        selector = spec.get("nodeSelector") or {}
        env = {
            e.get("name"): e.get("value")
            for c in spec.get("containers") or []
            for e in c.get("env") or []
        }
        reducers = env.get(REDUCER_ENDPOINTS_ENV) or ""
        return cls(
            name=metadata["name"],
            rank=int((metadata.get("labels") or {}).get(RANK_LABEL, -1)),
            attempt=int((metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION, 0)),
            phase=status.get("phase") or "Pending",
            node=spec.get("nodeName"),
            terminating=bool(metadata.get("deletionTimestamp")),
            exit_detail=detail,
            pool=next((selector[k] for k in POOL_NAME_KEYS if k in selector), None),
            reducer_endpoints=tuple(e for e in reducers.split(",") if e),
        )


@dataclass(frozen=True)
class JobView:
    name: str
    namespace: str
    generation: int
    spec: TrainingJobSpec
    status: TrainingJobStatus
    created: dt.datetime | None = None
    ending: bool = False
    """The job is being deleted, or its namespace is: its pods go with it, which is no failure."""
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class World:
    """What one job's reconcile reads besides the job and its pods."""

    pools: Mapping[str, PoolSummary]
    reducer_pools: Mapping[str, ReducerPool] = field(default_factory=dict)
    verdict: Verdict | None = None
    """The admission cycle's latest word on this job, if it has one the job has not acted on."""
    hardware: tuple[str, str] | None = None
    """Why the operator's catalog cannot place the job's accelerator (reason, message:
    planning.catalog.hardware_problem), or None. Checked only before admission: a gang that
    runs keeps running when the catalog changes."""
    kueue: KueueWorld | None = None
    """Set when Kueue is installed (its Workload CRD is served) and the operator may use it."""
    held: Promise | None = None
    """The room the admission snapshot holds for this job now, if any."""
    host_problems: Mapping[str, str] = field(default_factory=dict)
    """Why hosts the job's admission named can no longer take its workers (host -> why)."""


@dataclass(frozen=True)
class KueueWorld:
    """What a job's reconcile reads of Kueue (admission/kueue.py has the protocol)."""

    workloads: Sequence[Mapping[str, Any]] = ()
    """Workloads controlled by a TrainingJob of this name (the one of this job's UID is its own)."""
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    workload_priority_classes: Mapping[str, int] = field(default_factory=dict)
    priority_classes: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    """PriorityClasses: name -> (value, globalDefault)."""
    pool_labels: Callable[[str], Mapping[str, str]] = lambda _pool: {}
    """The labels every node of a pool carries: what a flavor's node labels must select."""


@dataclass
class Decision:
    status: TrainingJobStatus
    create: list[dict[str, Any]] = field(default_factory=list)
    """Created after status is written (so an admission is on record before its pods exist)."""
    apply: list[dict[str, Any]] = field(default_factory=list)
    """Objects to server-side apply every time (the job's own ReductionServerPool)."""
    delete: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    """Posted before status is written: what the status records was announced (the Admitted
    Event of an admission), whenever the process dies."""
    delete_job: bool = False
    requeue_after: float | None = None
    waiting: WaitingGang | None = None
    """Set while the job waits for admission: what the admission cycle needs to decide it."""
    promise: Promise | None = None
    """The room the job's admission holds until its pods are seen."""
    release: bool = False
    """The job holds no room beyond its pods any more."""
    workload: list[WorkloadWrite] = field(default_factory=list)
    """Writes to the job's Kueue Workload (created, kept in step, reported to)."""


def accelerator_resource(spec: TrainingJobSpec) -> str:
    return TPU_RESOURCE if is_tpu(spec.accelerator.type) else GPU_RESOURCE


@dataclass
class _Step:
    """What every phase function works on."""

    job: JobView
    world: World
    now: dt.datetime
    planner: Planner
    decision: Decision
    conditions: Conditions

    @property
    def spec(self) -> TrainingJobSpec:
        return self.job.spec

    @property
    def status(self) -> TrainingJobStatus:
        return self.decision.status

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))  # type: ignore[arg-type]


def reconcile_training(
    job: JobView,
    pods: Sequence[WorkerPod],
    world: World,
    now: dt.datetime,
    planner: Planner,
) -> Decision:
    status = job.status.model_copy(deep=True)
    status.observed_generation = job.generation
    decision = Decision(status=status)
    step = _Step(job, world, now, planner, decision, Conditions(status, job.generation, now))
    if job.ending:
        _ending(step)
        return decision
    if status.phase in FINISHED:
        _finished(step)
    elif job.spec.run_policy.suspend:
        _suspended(step, pods)
    else:
        _resumed(step)
        _active(step, pods)
    if status.phase in FINISHED:
        _settle_finished(step)
    if world.kueue is not None:
        _kueue_report(step, pods)
    _phase_and_schedulable_agree(step)
    step.conditions.stamp()
    return decision


def _phase_and_schedulable_agree(step: _Step) -> None:
    """Every status written says one thing of the gang's room: a gang that waits (Pending) is
    not Schedulable=True Admitted, one that holds its room (Admitted, Running) is
    Schedulable=True. The paths that send a gang back to Pending say why (a restart, a requeue,
    a wait); this catches any that does not, so that no write contradicts itself (issue 45: a
    multislice job seen Pending and Admitted at once across an operator restart)."""
    status = step.status
    schedulable = step.conditions.get(SCHEDULABLE)
    holds = schedulable is not None and schedulable.status == "True"
    if status.phase == PENDING and holds:
        attempt = gang_attempt(status)
        step.conditions.set(
            SCHEDULABLE,
            "False",
            WAITING_FOR_ADMISSION,
            f"attempt {attempt} of the gang waits for admission",
        )
    elif status.phase in (ADMITTED, RUNNING) and not holds:
        pool = status.admission.pool if status.admission else status.pool
        message = f"gang of {step.spec.workers} workers admitted on pool {pool}"
        step.conditions.set(SCHEDULABLE, "True", "Admitted", message)


def _settle_finished(step: _Step) -> None:
    """A finished job's conditions agree with its phase: a gang that ran was schedulable, even
    if a later edit (or an older operator) left Schedulable=False on it."""
    status = step.status
    schedulable = step.conditions.get(SCHEDULABLE)
    ran = status.admission is not None or status.start_time is not None
    if ran and status.pool and (schedulable is None or schedulable.status != "True"):
        step.conditions.set(SCHEDULABLE, "True", "Admitted", f"the gang ran on pool {status.pool}")


# ---------------------------------------------------------------- ending, finished, suspended


def _ending(step: _Step) -> None:
    """The job (or its namespace) is being deleted: its pods going is the deletion, not lost
    workers. A quiet end: no restart, no attempt spent, nothing created (a terminating
    namespace refuses it), no Event; the status stays as it was and the room is let go."""
    step.decision.status = step.job.status.model_copy(deep=True)
    step.decision.release = True


def _finished(step: _Step) -> None:
    """Nothing runs again; only the TTL is left to honour."""
    decision, status = step.decision, step.status
    decision.release = True
    ttl = step.spec.run_policy.ttl_seconds_after_finished
    if ttl is not None and status.completion_time is not None:
        remaining = (status.completion_time - step.now).total_seconds() + ttl
        if remaining <= 0:
            decision.delete_job = True
        else:
            decision.requeue_after = remaining


def _suspended(step: _Step, pods: Sequence[WorkerPod]) -> None:
    status = step.status
    step.decision.delete = [p.name for p in pods if not p.terminating]
    step.decision.release = True
    status.admission = None  # a resumed job is admitted again
    status.workers = None
    _release_reducers(step)
    # A suspended gang holds no room: Schedulable says so, not the admission it had.
    step.conditions.set(
        SCHEDULABLE, "False", SUSPENDED, "runPolicy.suspend is true: the gang holds no room"
    )
    if pods:
        # Suspended means no worker exists, and a suspension can be lifted only once the job is
        # Suspended (the CRD's rule): so a resume never finds the old gang's pods still listed
        # and takes them for its own (seen: a quick resume adopted them on the old pool).
        step.conditions.set(
            SUSPENDED_CONDITION,
            "True",
            "Suspending",
            f"runPolicy.suspend is true: {len(pods)} workers are being deleted",
        )
        step.decision.requeue_after = SOON_SECONDS
        return
    if status.phase != SUSPENDED:
        step.event("Normal", "Suspended", "job suspended: workers deleted")
    status.phase = SUSPENDED
    step.conditions.set(SUSPENDED_CONDITION, "True", "Suspended", "runPolicy.suspend is true")


def _resumed(step: _Step) -> None:
    suspended = step.conditions.get(SUSPENDED_CONDITION)
    if suspended is not None and suspended.status == "True":
        step.conditions.set(SUSPENDED_CONDITION, "False", "Resumed", "runPolicy.suspend is false")
        step.event("Normal", "Resumed", "job resumed: admitting the gang again")
        step.status.phase = PENDING


def _finish(step: _Step, live: Sequence[WorkerPod], phase: str, reason: str, message: str) -> None:
    status, decision = step.status, step.decision
    status.phase = phase
    status.completion_time = step.now
    condition = COMPLETE if phase == SUCCEEDED else FAILED_CONDITION
    step.conditions.set(condition, "True", reason, message)
    if phase == FAILED:
        decision.delete = [p.name for p in live if p.phase not in FINISHED]
    decision.create = []
    decision.release = True
    step.event("Normal" if phase == SUCCEEDED else "Warning", reason, message)
    ttl = step.spec.run_policy.ttl_seconds_after_finished
    decision.requeue_after = float(ttl) if ttl is not None else None


# ---------------------------------------------------------------- the gang's attempts


def gang_attempt(status: TrainingJobStatus) -> int:
    """The gang attempt that runs or waits: every restart makes a new one, whether it spent an
    attempt of the backoff limit (restarts) or not (requeues)."""
    return (status.restarts or 0) + (status.requeues or 0)


def _active(step: _Step, pods: Sequence[WorkerPod]) -> None:
    status, decision = step.status, step.decision
    attempt = gang_attempt(status)
    if _kueue_queue(step) is not None:
        view = _own_workload(step)
        if view is None or not view.runs:
            _kueue_stopped(step, pods, view, attempt)
            return
    live = [p for p in pods if not p.terminating]
    current = {p.rank: p for p in live if p.attempt == attempt}
    stale = [p for p in live if p.attempt != attempt]
    decision.delete += [p.name for p in stale]
    admission = (
        status.admission if status.admission and status.admission.attempt == attempt else None
    )
    if admission is None and current:
        admission = _adopt(step, current, attempt)
        if admission is None:
            return
    if admission is None:
        if stale or any(p.terminating for p in pods):
            # The previous gang is still going away (its pods have the same names).
            status.phase = PENDING
            decision.requeue_after = SOON_SECONDS
            return
        admission = _waiting(step, attempt)
        if admission is None:
            _release_reducers(step)  # a gang that waits holds no reducers either
            return
    _admitted(step, admission, current, live)


def _adopt(step: _Step, current: Mapping[int, WorkerPod], attempt: int) -> Admission | None:
    """Pods of this attempt exist with no admission on record (an operator older than the
    record, or a record lost in a race): a whole gang is adopted as admitted where it is; a
    partial one is released, since nothing says its room was ever checked."""
    workers = step.spec.workers
    pool = step.status.pool or next((p.pool for p in current.values() if p.pool), None)
    if len(current) >= workers and pool is not None:
        slices = step.spec.accelerator.slices
        per_slice = workers // slices
        # A multislice gang: each slice where its first worker's nodeSelector put it.
        slice_pools = [
            current[s * per_slice].pool if s * per_slice in current else None for s in range(slices)
        ]
        admission = Admission(
            pool=slice_pools[0] or pool if slices > 1 else pool,
            time=step.now,
            attempt=attempt,
            slice_pools=[p or pool for p in slice_pools] if slices > 1 else None,
        )
        step.status.admission = admission
        message = f"gang of {workers} workers adopted on pool {pool}"
        if step.conditions.transition(SCHEDULABLE, "True", "Admitted", message):
            step.event("Normal", "Admitted", message)
        return admission
    step.decision.delete += [p.name for p in current.values()]
    step.status.phase = PENDING
    step.decision.requeue_after = SOON_SECONDS
    return None


def _plan(step: _Step, pool: PoolSummary | None, reducers: ReducerPool | None) -> str:
    """status.plan for the pool's machine type, the Planned condition and StrategyChosen.
    Returns why the engine could not plan the job ("" when it did)."""
    status = step.status
    previous = status.plan.strategy if status.plan else None
    machine = pool.identity.instance_type if pool else None
    try:
        status.plan = step.planner(step.spec, machine, reducers)
    except ValueError as error:
        # No plan: a waiting job waits with the reason (_waiting); a gang that runs already
        # keeps running, without a prediction.
        status.plan = None
        step.conditions.set(PLANNED, "False", PLAN_FAILED, str(error))
        return str(error)
    plan = status.plan
    step.conditions.set(PLANNED, "True", "Planned", f"strategy {plan.strategy}")
    step.decision.events += report_plausibility(step.conditions, plan_warnings(plan))
    if plan.strategy != previous and plan.fits is not False:
        step.decision.events.append(strategy_announcement(step.job.name, step.job.uid, plan))
    return ""


def _strategy_message(plan: TrainingPlan) -> str:
    return (
        f"{plan.strategy}: predicted {plan.step_seconds or 0:.3g} s/step, "
        f"bottleneck {plan.bottleneck}"
    )


def strategy_announcement(name: str, uid: str, plan: TrainingPlan) -> Event:
    """The StrategyChosen Event of the strategy `plan` gives the job, named after the job and
    that strategy. It is decided when the strategy on record (status.plan, as the API has it)
    changes, and posted again by an operator that finds an admission on record it may not have
    announced (admission_announcements); posted any number of times, by any process, the API
    keeps one per strategy the job was given. (So a job that goes back to a strategy it had
    before is not told again: that Event is there already.)"""
    identity = hashlib.sha256(f"{uid}/{plan.strategy}".encode()).hexdigest()[:12]
    # An Event's name is a DNS subdomain of at most 253 characters.
    return Event(
        "Normal", "StrategyChosen", _strategy_message(plan), f"{name[:200]}.strategy-{identity}"
    )


def _reducer_settings(step: _Step) -> tuple[ReductionServerSettings, str, ReducerPool | None]:
    """The job's reducer settings, its pool's name, and the pool as this job sees it: a shared
    pool's bandwidth is divided among the jobs running on it (the job's own pool is all its)."""
    settings = step.spec.communication.reduction_server or ReductionServerSettings()
    name = settings.pool_name or owned_reducer_pool_name(step.job.name)
    pool = step.world.reducer_pools.get(name)
    if pool is not None and settings.pool_name is not None:
        pool = replace(pool, share=pool.share_for(step.job.name))
    return settings, name, pool


def _reducers_in_use(
    reducers: ReducerPool | None, current: Mapping[int, WorkerPod]
) -> ReducerPool | None:
    """The pool as running workers use it: the reducers they were started with that still serve
    (a pool grown for another job adds none to them; a lost or scaled-away one takes one away)."""
    used = {e for p in current.values() for e in p.reducer_endpoints}
    if reducers is None or not used:
        return reducers
    serving = len(used & set(reducers.endpoints))
    return replace(reducers, replicas=serving, ready=serving) if serving else reducers


def _uses_reducers(plan: TrainingPlan | None) -> bool:
    return plan is not None and plan.strategy == REDUCTION_SERVER


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


def _placement(step: _Step, pool_name: str, pool: PoolSummary | None) -> PoolPlacement:
    return PoolPlacement(
        pool=pool_name,
        node_selector=dict(pool.node_selector) if pool else {GKE_NODEPOOL: pool_name},
        accelerator_resource=accelerator_resource(step.spec),
        machine_type=pool.identity.instance_type if pool else None,
    )


def _option(step: _Step, pool: PoolSummary, attempt: int) -> GangOption:
    """The gang on one pool: its workers, and its own reducers if the plan there wants them."""
    spec, job = step.spec, step.job
    placement = _placement(step, pool.name, pool)
    one_worker = pod_requests(worker_pod(job.name, job.namespace, spec, placement, 0, attempt))
    settings, name, reducers = _reducer_settings(step)
    need = None
    if settings.pool_name is None:
        try:
            plan = step.planner(spec, pool.identity.instance_type, reducers)
        except ValueError:
            plan = None
        if plan is not None and _uses_reducers(plan):
            wanted = settings.replicas or plan.reducers_wanted or 1
            need = ReducerNeed(settings.machine_type, wanted, (job.namespace, name))
    return GangOption(
        pool=pool.name,
        worker=shape(one_worker),
        workers=spec.workers,
        one_per_node=placement.accelerator_resource == TPU_RESOURCE,
        accelerator_resource=placement.accelerator_resource,
        per_worker=spec.accelerator.per_worker,
        reducers=need,
    )


def _slices_option(step: _Step, pools: Sequence[PoolSummary], attempt: int) -> GangOption:
    """A multislice gang: one option over every pool that can hold one of its slices (the cycle
    takes ``slices`` distinct ones of them, or none)."""
    spec = step.spec
    option = _option(step, pools[0], attempt)
    return replace(
        option,
        slices=spec.accelerator.slices,
        pools=tuple(p.name for p in pools),
        slice_shape=f"{spec.accelerator.type} {spec.accelerator.topology}",
    )


def _slice_pools(admission: Admission) -> tuple[str, ...]:
    """The pool of each slice of a multislice admission; () for one slice."""
    return tuple(admission.slice_pools or ())


def _wait(step: _Step, reason: str, message: str) -> None:
    step.status.phase = PENDING
    if step.conditions.transition(SCHEDULABLE, "False", reason, message):
        step.event("Warning" if reason in _WARNINGS else "Normal", reason, message)


# Reasons a user must act on (the others clear by themselves as room frees).
_WARNINGS = frozenset(
    {
        "NoMatchingPool",
        "TopologyMismatch",
        "ReductionServerPoolNotFound",
        "PriorityClassNotFound",
        "UnknownAccelerator",
        "UnsupportedHostShape",
        "UnsupportedTopology",
        WORKER_LARGER_THAN_NODE,
        DOES_NOT_FIT,
        PLAN_FAILED,
        # Kueue admitted the job where it cannot run, or finished its Workload (admission/kueue.py).
        "FlavorMismatch",
        "InsufficientSliceFlavors",
        "ResourceFlavorNotFound",
        "WorkloadFinished",
    }
)


def _waiting(step: _Step, attempt: int) -> Admission | None:
    """No admission for this attempt: plan, join the admission queue, and act on the cycle's
    verdict. Returns the admission when the verdict admits the gang now."""
    spec, status, job = step.spec, step.status, step.job
    status.phase = PENDING
    status.workers = None
    if step.world.hardware is not None:
        # No pool, plan or pod for hardware the catalog does not define: wait for the catalog.
        _wait(step, *step.world.hardware)
        return None
    candidates = candidate_pools(
        step.world.pools,
        spec.accelerator.type,
        spec.accelerator.per_worker,
        spec.machine_type,
        spec.accelerator.topology,
        current=status.pool,
    )
    if isinstance(candidates, NoPool):
        _wait(step, candidates.reason, candidates.message)
        return None
    settings, reducer_pool_name, reducers = _reducer_settings(step)
    failed = _plan(step, candidates[0], reducers)
    if failed:
        # A refusal stops what it refuses: no admission, no pod, no reducer for a job the
        # engine cannot plan (ringmaster plan refuses the same file).
        _wait(step, PLAN_FAILED, failed)
        return None
    if status.plan is not None and status.plan.fits is False:
        # The model fits no layout on this pool's accelerators: wait, say why, create nothing.
        _wait(step, DOES_NOT_FIT, status.plan.reason or "the model does not fit in memory")
        return None
    uses_reducers = _uses_reducers(status.plan)
    status.reduction_server_pool = reducer_pool_name if uses_reducers else None
    if uses_reducers and settings.pool_name is not None:
        # A shared pool is sized by its jobs (this one included, through reductionServerPool)
        # and holds its own hosts: the job joins the queue once the pool serves.
        problem = _reducer_problem(settings.pool_name, reducers, job.namespace)
        if problem is not None:
            _wait(step, *problem)
            step.decision.requeue_after = SOON_SECONDS
            return None
    if _kueue_queue(step) is not None:
        return _kueue_waiting(step, candidates, attempt)
    schedulable = step.conditions.get(SCHEDULABLE)
    waiting_since = (
        schedulable.last_transition_time
        if schedulable is not None and schedulable.status == "False"
        else step.now
    )
    gang = WaitingGang(
        key=job.key,
        created=job.created or step.now,
        queue=spec.accelerator.type,
        options=(
            (_slices_option(step, candidates, attempt),)
            if spec.accelerator.slices > 1
            else tuple(_option(step, pool, attempt) for pool in candidates)
        ),
        priority_class=spec.template.priority_class_name,
        attempt=attempt,
        waiting_since=waiting_since,
    )
    verdict = step.world.verdict
    if isinstance(verdict, Admit):
        chosen = next((o for o in gang.options if o == verdict.option), None)
        if chosen is not None:
            return _record_admission(
                step, chosen, attempt, hosts=verdict.hosts, pools=verdict.pools
            )
        # The job changed since the cycle decided: the verdict no longer applies.
    elif isinstance(verdict, Wait):
        _wait(step, verdict.reason, verdict.message)
    step.decision.waiting = gang
    return None


def _record_admission(
    step: _Step,
    option: GangOption,
    attempt: int,
    by: str = "",
    hosts: tuple[str, ...] = (),
    pools: tuple[str, ...] = (),
) -> Admission:
    spec, status = step.spec, step.status
    first = pools[0] if pools else option.pool
    pool = step.world.pools.get(first)
    admission = Admission(
        pool=first,
        time=step.now,
        attempt=attempt,
        hosts=list(hosts) if hosts else None,
        slice_pools=list(pools) if len(pools) > 1 else None,
    )
    status.admission = admission
    status.pool = first
    status.phase = ADMITTED
    machine = f" ({pool.identity.instance_type})" if pool and pool.identity.instance_type else ""
    where = f"pool {first}{machine}"
    if len(pools) > 1:
        where = f"{len(pools)} slices of {option.slice_shape} on pools {', '.join(pools)}"
    message = (
        f"gang of {spec.workers} workers x {spec.accelerator.per_worker} "
        f"{spec.accelerator.type} admitted{by} on {where}"
    )
    if step.conditions.transition(SCHEDULABLE, "True", "Admitted", message):
        step.event("Normal", "Admitted", message)
    step.decision.promise = promise_for(step.job.key, attempt, option, hosts, pools)
    return admission


def admission_announcements(name: str, uid: str, status: TrainingJobStatus) -> list[Event]:
    """The Events that announce the admission `status` records while its phase is Admitted,
    rebuilt from the status alone: Admitted named after the admission (uid, attempt, time),
    StrategyChosen after the strategy (strategy_announcement); whoever posts them, and however
    often, the API keeps one of each. An admitted gang's Events go out
    with its pods, after the status write, one round trip fewer on its path than before it; an
    operator that finds an admission on record it did not announce itself (it was killed in
    between, or the post failed) posts these before anything else, so none is ever lost.
    Empty when the status records no admission in phase Admitted."""
    admission = status.admission
    if status.phase != ADMITTED or admission is None:
        return []
    admitted = f"{uid}/{admission.attempt}/{admission.time.isoformat()}"
    identity = hashlib.sha256(admitted.encode()).hexdigest()[:12]
    prefix = name[:200]  # an Event's name is a DNS subdomain of at most 253 characters
    events = []
    plan = status.plan
    if plan is not None and plan.fits is not False:
        # Named after the strategy, not the admission: a gang restarted with the strategy it
        # had is admitted again without a new StrategyChosen, and an operator started while it
        # is Admitted finds the one posted at its first admission (issue 45).
        events.append(strategy_announcement(name, uid, plan))
    schedulable = find_condition(status.conditions, SCHEDULABLE)
    if schedulable is not None and (schedulable.status, schedulable.reason) == ("True", "Admitted"):
        events.append(
            Event("Normal", "Admitted", schedulable.message, f"{prefix}.admitted-{identity}")
        )
    return events


# ---------------------------------------------------------------- admitted, running, restarting


def _admitted(
    step: _Step, admission: Admission, current: Mapping[int, WorkerPod], live: Sequence[WorkerPod]
) -> None:
    spec, status, decision, job = step.spec, step.status, step.decision, step.job
    attempt = admission.attempt
    status.pool = admission.pool
    pool = step.world.pools.get(admission.pool)
    settings, reducer_pool_name, reducers = _reducer_settings(step)
    unplanned = _plan(step, pool, _reducers_in_use(reducers, current))
    if unplanned and not current:
        # Admitted, then the engine could no longer plan it (a new catalog) before any worker
        # existed: nothing is created for a job without a plan; it waits with the reason.
        status.admission = None
        decision.release = True
        _release_reducers(step)
        _wait(step, PLAN_FAILED, unplanned)
        return
    uses_reducers = _uses_reducers(status.plan)
    status.reduction_server_pool = reducer_pool_name if uses_reducers else None
    schedulable = step.conditions.get(SCHEDULABLE)
    if schedulable is None or schedulable.status != "True":
        message = f"gang of {spec.workers} workers admitted on pool {admission.pool}"
        if step.conditions.transition(SCHEDULABLE, "True", "Admitted", message):
            step.event("Normal", "Admitted", message)

    # The room stays held until every pod is seen (idempotent; recovers it after a restart).
    # Held already for this attempt on this pool: kept as it is, not recomputed (rendering a
    # worker pod and planning again on every look of every admitted job).
    held = step.world.held
    hosts = _hosts(admission, spec.workers)
    slice_pools = _slice_pools(admission)
    if (
        held is not None
        and held.attempt == attempt
        and held.pool == admission.pool
        and held.pools == slice_pools
        and held.workers == spec.workers
        and held.hosts == hosts
    ):
        decision.promise = held
    elif pool is not None:
        option = _option(step, pool, attempt)
        if slice_pools:
            known = [step.world.pools[p] for p in slice_pools if p in step.world.pools]
            option = _slices_option(step, known or [pool], attempt)
        decision.promise = promise_for(job.key, attempt, option, hosts, slice_pools)

    # A failed worker fails the gang: restart all of it, or give up at the backoff limit.
    failed = sorted((p for p in current.values() if p.phase == "Failed"), key=lambda p: p.rank)
    lost = status.phase == RUNNING and len(current) < spec.workers
    if failed or lost:
        _restart(step, failed, current, live, attempt)
        return
    gone = _host_lost(step, hosts, current)
    if gone:
        # A host chosen for a worker that has not started went away or was taken: the gang's
        # pods are pinned, so it starts again elsewhere, as when a running worker's host dies.
        _restart(step, [], current, live, attempt, what=gone, infrastructure=True)
        return
    if len(current) == spec.workers and all(p.phase == "Succeeded" for p in current.values()):
        _finish(step, live, SUCCEEDED, "Completed", f"all {spec.workers} workers succeeded")
        return
    deadline = spec.run_policy.active_deadline_seconds
    started = status.start_time
    if (
        deadline is not None
        and started is not None
        and (step.now - started).total_seconds() >= deadline
    ):
        message = f"ran longer than activeDeadlineSeconds ({deadline})"
        _finish(step, live, FAILED, "DeadlineExceeded", message)
        return

    endpoints: tuple[str, ...] = ()
    if uses_reducers:
        if settings.pool_name is None:
            wanted = settings.replicas or (status.plan.reducers_wanted if status.plan else 1) or 1
            decision.apply.append(owned_reducer_pool(job.name, settings, wanted))
        problem = _reducer_problem(settings.pool_name, reducers, job.namespace)
        if problem is not None and reducers is not None and current:
            # A shared pool grows when another job starts on it; workers that still reach every
            # reducer they were started with have lost none.
            used = {e for p in current.values() for e in p.reducer_endpoints}
            if used and used <= set(reducers.endpoints):
                problem = None
        if problem is None:
            ready = reducers.ready if reducers else 0
            message = f"{ready} reducers of pool {reducer_pool_name} ready"
            step.conditions.set(REDUCERS_CONDITION, "True", "ReducersReady", message)
            endpoints = reducers.endpoints if reducers else ()
        else:
            changed = step.conditions.transition(REDUCERS_CONDITION, "False", *problem)
            if changed and status.phase == RUNNING:
                # Workers keep running (a reducer restarts in seconds); the user should know.
                step.event("Warning", "ReducersLost", problem[1])
            if not current:
                status.phase = ADMITTED  # the workers start once their reducers serve
                decision.requeue_after = SOON_SECONDS
                return

    placements = _slice_placements(step, admission, pool)
    missing = [r for r in range(spec.workers) if r not in current]
    if missing:
        # Admitted: create what is not there yet (all of it, or what a crash kept us from).
        # The layout (tensor, pipeline, data...) reaches the workers as environment variables.
        layout = status.plan.to_k8s() if status.plan else None
        decision.create = [
            worker_pod(
                job.name,
                job.namespace,
                spec,
                placements[rank * len(placements) // spec.workers],
                rank,
                attempt,
                endpoints,
                layout,
                host=hosts[rank] if hosts else None,
            )
            for rank in missing
        ]
    elif all(p.node for p in current.values()):
        # The rendezvous Service once the whole gang is bound, not with its pods: kube-scheduler
        # spreads every pod a Service selects over hosts and zones (at 2000 hosts the same pods
        # bound 1.7x slower with their Services than without), and the endpoint controllers
        # follow each pod from its creation. A worker that starts first retries the lookup of
        # its peers' names. It outlives the gang's attempts; the shell creates it once.
        decision.create = [rendezvous_service(job.name)]
    counts = _counts(list(current.values()), spec.workers)
    status.workers = WorkerCounts(**counts)
    if counts["running"] == spec.workers:
        if status.phase != RUNNING:
            step.event("Normal", "Running", f"all {spec.workers} workers run")
        status.phase = RUNNING
        status.start_time = status.start_time or step.now
        if deadline is not None:
            decision.requeue_after = deadline - (step.now - status.start_time).total_seconds()
    else:
        status.phase = ADMITTED
        decision.requeue_after = SOON_SECONDS


def _slice_placements(
    step: _Step, admission: Admission, pool: PoolSummary | None
) -> list[PoolPlacement]:
    """Where each slice's workers go (one placement for a one-slice gang): slice s on the pool
    admission gave it, with the node labels of the Kueue flavor its pod set was given."""
    pools = _slice_pools(admission)
    if not pools:
        return [_kueue_placement(step, _placement(step, admission.pool, pool))]
    return [
        _kueue_placement(step, _placement(step, name, step.world.pools.get(name)), slice_id)
        for slice_id, name in enumerate(pools)
    ]


def _hosts(admission: Admission, workers: int) -> tuple[str, ...]:
    """The admission's host per rank, or () when it named none (or not one per worker)."""
    hosts = tuple(admission.hosts or ())
    return hosts if len(hosts) == workers else ()


def _host_lost(step: _Step, hosts: tuple[str, ...], current: Mapping[int, WorkerPod]) -> str:
    """Why a worker not bound yet cannot start on the host admission pinned it to, or ""."""
    for rank, host in enumerate(hosts):
        pod = current.get(rank)
        if pod is not None and pod.node:
            continue
        problem = step.world.host_problems.get(host)
        if problem:
            return f"{problem} before worker {rank} started there"
    return ""


def _restart(
    step: _Step,
    failed: Sequence[WorkerPod],
    current: Mapping[int, WorkerPod],
    live: Sequence[WorkerPod],
    attempt: int,
    what: str = "",
    infrastructure: bool = False,
) -> None:
    """The gang goes whole (every pod of the attempt, with its own reducers) and a new attempt
    waits for admission. A worker's failure spends an attempt of runPolicy.backoffLimit; a host
    lost before its worker started (``infrastructure``) is no fault of the job and spends none
    (status.requeues, as Kueue's evictions)."""
    spec, status, decision = step.spec, step.status, step.decision
    what = what or (
        f"worker {failed[0].rank} failed ({failed[0].exit_detail or 'Failed'})"
        if failed
        else f"{spec.workers - len(current)} worker pod(s) disappeared"
    )
    limit = spec.run_policy.backoff_limit
    spent = status.restarts or 0
    if not infrastructure and spent >= limit:
        _finish(step, live, FAILED, "BackoffLimitExceeded", f"{what}; backoffLimit {limit} reached")
        return
    decision.delete += [p.name for p in live if p.name not in decision.delete]
    decision.promise = None
    decision.release = True
    status.admission = None  # the next attempt is admitted anew
    status.phase = PENDING
    status.workers = None
    _release_reducers(step)
    if infrastructure:
        status.requeues = (status.requeues or 0) + 1
        reason = REQUEUED
        step.event(
            "Warning",
            REQUEUED,
            f"{what}; the gang starts again elsewhere, no attempt spent ({spent}/{limit} used, "
            f"{status.requeues} requeued)",
        )
    else:
        status.restarts = spent + 1
        reason = RESTARTED
        step.event("Warning", RESTARTED, f"{what}; restarting the gang ({spent + 1}/{limit})")
    # The room the gang had is let go with it: Schedulable says so until the new attempt's
    # admission (which announces itself again), not the admission that ended.
    step.conditions.set(
        SCHEDULABLE,
        "False",
        reason,
        f"{what}; attempt {gang_attempt(status)} of the gang waits for admission",
    )
    decision.requeue_after = SOON_SECONDS


def _release_reducers(step: _Step) -> None:
    """A gang that does not run holds none of its own reducers: its ReductionServerPool scales
    to zero (and back at its next admission). A shared pool is sized by its jobs."""
    settings, _name, reducers = _reducer_settings(step)
    if settings.pool_name is None and reducers is not None and reducers.replicas > 0:
        step.decision.apply.append(owned_reducer_pool(step.job.name, settings, 0))


def _counts(pods: Sequence[WorkerPod], workers: int) -> dict[str, int]:
    counts = {"total": workers, "pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in pods:
        key = pod.phase.lower()
        if key in counts and key != "total":
            counts[key] += 1
    return counts


# ---------------------------------------------------------------- jobs Kueue admits

QUEUED_IN_KUEUE = "QueuedInKueue"


def _kueue_queue(step: _Step) -> str | None:
    """The LocalQueue of a job that Kueue admits (labelled, and Kueue installed), or None."""
    return kueue.queue_name(step.job.labels) if step.world.kueue is not None else None


def _own_workload(step: _Step) -> WorkloadView | None:
    world = step.world.kueue
    if world is None:
        return None
    body = next((w for w in world.workloads if kueue.owned_by(w, step.job.uid)), None)
    return kueue.read_workload(body) if body is not None else None


def _kueue_detail(view: WorkloadView | None) -> str:
    if view is None:
        return "creating its Workload"
    if view.evicted is not None:
        evicted = view.evicted
        return f"evicted ({evicted.reason}: {evicted.message}); waiting to be admitted again"
    return view.pending_message()


def _queued(step: _Step, view: WorkloadView | None, detail: str) -> None:
    name = view.name if view else kueue.workload_name(step.job.name, step.job.uid)
    queue = _kueue_queue(step)
    _wait(step, QUEUED_IN_KUEUE, f"queued in Kueue LocalQueue {queue} (Workload {name}): {detail}")


def _kueue_stopped(
    step: _Step, pods: Sequence[WorkerPod], view: WorkloadView | None, attempt: int
) -> None:
    """Kueue has not admitted the job, or has evicted it: no gang may run. One that runs is
    stopped whole (no attempt spent: the job did nothing wrong), then the job waits in Kueue."""
    status, decision = step.status, step.decision
    live = [p for p in pods if not p.terminating]
    if live or status.admission is not None:
        decision.delete += [p.name for p in live]
        if view is not None and view.evicted is not None:
            evicted = view.evicted
            step.event(
                "Warning",
                "Evicted",
                f"Kueue evicted Workload {view.name} ({evicted.reason}: {evicted.message}): the "
                "gang is stopped and waits to be admitted again (no restart counted)",
            )
        else:
            step.event("Normal", "Stopped", "the gang is stopped: its Workload is not admitted")
        settings, name, _reducers = _reducer_settings(step)
        if settings.pool_name is None and status.reduction_server_pool == name:
            # The reducers' quota goes back with the workers': the job's own pool scales to 0.
            decision.apply.append(owned_reducer_pool(step.job.name, settings, 0))
    status.admission = None
    status.workers = None
    decision.release = True
    if pods:
        status.phase = PENDING
        _queued(step, view, f"{_kueue_detail(view)}; {len(pods)} workers are being deleted")
        decision.requeue_after = SOON_SECONDS
        return
    _waiting(step, attempt)


def _kueue_pod_sets(step: _Step, pool: PoolSummary, attempt: int) -> list[kueue.PodSet]:
    """The job's pods as Kueue counts them: the workers, and the job's own reducers if the plan
    uses them (a shared ReductionServerPool is not the job's to count)."""
    spec, job, plan = step.spec, step.job, step.status.plan
    layout = plan.to_k8s() if plan else None
    placement = _placement(step, pool.name, pool)
    pod_sets = []
    first = 0
    for name, count in kueue.worker_pod_sets(spec.workers, spec.accelerator.slices):
        worker = worker_pod(job.name, job.namespace, spec, placement, first, attempt, (), layout)
        pod_sets.append(kueue.PodSet(name, count, worker))
        first += count
    settings, _name, _reducers = _reducer_settings(step)
    if _uses_reducers(plan) and settings.pool_name is None:
        wanted = settings.replicas or (plan.reducers_wanted if plan else None) or 1
        owned = owned_reducer_pool(job.name, settings, wanted)
        pool_spec = ReductionServerPoolSpec.model_validate(owned["spec"])
        reducers = reducer_statefulset(owned["metadata"]["name"], pool_spec, wanted)
        pod_sets.append(kueue.PodSet(kueue.REDUCERS_POD_SET, wanted, reducers["spec"]["template"]))
    return pod_sets


def _kueue_waiting(
    step: _Step, candidates: Sequence[PoolSummary], attempt: int
) -> Admission | None:
    """A planned job that Kueue admits: keep its Workload in step with it and wait for Kueue;
    once admitted, take the pool the flavor selects. Returns the admission when it starts now."""
    world, job, spec = step.world.kueue, step.job, step.spec
    queue = _kueue_queue(step)
    assert world is not None and queue is not None
    priority = kueue.workload_priority(
        job.labels,
        spec.template.priority_class_name,
        world.workload_priority_classes,
        world.priority_classes,
    )
    if isinstance(priority, kueue.PriorityProblem):
        _wait(step, priority.reason, priority.message)
        return None
    desired = kueue.build_workload(
        job=job.name,
        namespace=job.namespace,
        uid=job.uid,
        queue=queue,
        pod_sets=_kueue_pod_sets(step, candidates[0], attempt),
        priority=priority,
        pools=[dict(p.node_selector) for p in candidates],
        labels={MANAGED_BY: OPERATOR, TRAINING_JOB_LABEL: job.name},
    )
    view = _own_workload(step)
    decision = step.decision
    if view is None:
        decision.workload.append(WorkloadWrite("create", desired["metadata"]["name"], desired))
        _queued(step, None, "creating its Workload")
        return None
    if view.finished is not None:
        finished = view.finished
        _wait(
            step,
            "WorkloadFinished",
            f"Workload {view.name} is Finished ({finished.reason}: {finished.message}): "
            "delete the Workload to queue the job again",
        )
        return None
    current = view.body.get("spec") or {}
    new_shape = kueue.quota_shape(current) != kueue.quota_shape(desired["spec"])
    new_priority = kueue.priority_shape(current) != kueue.priority_shape(desired["spec"])
    if (new_shape or new_priority) and not view.quota_reserved:
        fields = ("queueName", "podSets", "priority", "priorityClassRef")
        patch = {"spec": {k: desired["spec"].get(k) for k in fields}}
        decision.workload.append(WorkloadWrite("patch", view.name, patch))
        _queued(step, view, "its Workload is brought in step with the job")
        return None
    if new_shape:
        # Kueue reserved quota for another shape (counts, resources, queue): a new Workload.
        decision.workload.append(WorkloadWrite("delete", view.name))
        _queued(step, view, "the job changed since Kueue admitted it: a new Workload follows")
        return None
    if not view.runs:
        _queued(step, view, _kueue_detail(view))
        return None
    if spec.accelerator.slices > 1:
        return _kueue_slices_admitted(step, view, candidates, attempt)
    placement = kueue.flavor_placement(view, kueue.WORKERS_POD_SET, world.flavors)
    if isinstance(placement, kueue.FlavorProblem):
        _wait(step, placement.reason, placement.message)
        return None
    chosen = kueue.pool_for_flavor(
        [(p.name, world.pool_labels(p.name)) for p in candidates], placement
    )
    if isinstance(chosen, kueue.FlavorProblem):
        _wait(step, chosen.reason, chosen.message)
        return None
    pool = next(p for p in candidates if p.name == chosen)
    by = f" by Kueue (ClusterQueue {view.cluster_queue}, {placement.describe()})"
    return _record_admission(step, _option(step, pool, attempt), attempt, by)


def _kueue_slices_admitted(
    step: _Step, view: WorkloadView, candidates: Sequence[PoolSummary], attempt: int
) -> Admission | None:
    """Kueue admitted a multislice job: each slice takes a distinct pool its pod set's flavor
    selects (Kueue counts quota, not which node pool holds a slice)."""
    world, spec = step.world.kueue, step.spec
    assert world is not None
    taken: list[str] = []
    described = []
    for name, _count in kueue.worker_pod_sets(spec.workers, spec.accelerator.slices):
        placement = kueue.flavor_placement(view, name, world.flavors)
        if isinstance(placement, kueue.FlavorProblem):
            _wait(step, placement.reason, placement.message)
            return None
        free = [(p.name, world.pool_labels(p.name)) for p in candidates if p.name not in taken]
        chosen = kueue.pool_for_flavor(free, placement)
        if isinstance(chosen, kueue.FlavorProblem):
            _wait(
                step,
                "InsufficientSliceFlavors",
                f"pod set {name}: {chosen.message} (each slice needs a pool of its own; "
                f"taken: {', '.join(taken) or 'none'})",
            )
            return None
        taken.append(chosen)
        described.append(placement.describe())
    option = _slices_option(step, candidates, attempt)
    flavors = ", ".join(sorted(set(described)))
    by = f" by Kueue (ClusterQueue {view.cluster_queue}, {flavors})"
    return _record_admission(step, option, attempt, by, pools=tuple(taken))


def _kueue_placement(
    step: _Step, placement: PoolPlacement, slice_id: int | None = None
) -> PoolPlacement:
    """The pool's placement with the admitted flavor's node labels and tolerations added (a
    multislice job's slice: its own pod set's flavor)."""
    world = step.world.kueue
    view = _own_workload(step) if _kueue_queue(step) is not None else None
    if world is None or view is None or not view.runs:
        return placement
    pod_set = kueue.WORKERS_POD_SET
    if slice_id is not None:
        sets = kueue.worker_pod_sets(step.spec.workers, step.spec.accelerator.slices)
        pod_set = sets[slice_id][0] if len(sets) > 1 else pod_set
    flavor = kueue.flavor_placement(view, pod_set, world.flavors)
    if isinstance(flavor, kueue.FlavorProblem):
        return placement
    merged = kueue.merged_placement(placement.node_selector, flavor)
    if isinstance(merged, kueue.FlavorProblem):
        return placement
    return replace(placement, node_selector=merged, tolerations=flavor.tolerations)


def _kueue_report(step: _Step, pods: Sequence[WorkerPod]) -> None:
    """What Kueue learns from the job: PodsReady, Finished, the quota given back after an
    eviction once no pod is left, and spec.active following runPolicy.suspend."""
    view = _own_workload(step)
    if view is None:
        return
    status, decision = step.status, step.decision
    if any(w.action == "delete" for w in decision.workload):
        return  # a new Workload follows: nothing to tell this one
    if _kueue_queue(step) is None:
        # The label was taken off: Ringmaster admits the job now; the Workload would hold quota.
        decision.workload.append(WorkloadWrite("delete", view.name))
        return
    edit = kueue.StatusEdit(view, step.now)
    if status.phase in FINISHED:
        kind = COMPLETE if status.phase == SUCCEEDED else FAILED_CONDITION
        condition = step.conditions.get(kind)
        message = condition.message if condition is not None else status.phase
        kueue.report_finished(edit, status.phase == SUCCEEDED, message)
    elif view.evicted is not None and not pods:
        kueue.release_after_eviction(edit)
    elif view.runs:
        counts = status.workers
        ready = counts is not None and counts.running + counts.succeeded >= step.spec.workers
        kueue.report_pods_ready(edit, ready)
    patch = edit.patch()
    if patch is not None:
        # First: it carries the resourceVersion read, which a spec patch would move.
        decision.workload.insert(0, WorkloadWrite("status", view.name, patch))
    suspended = step.spec.run_policy.suspend and status.phase not in FINISHED
    if suspended and view.active:
        deactivate = {
            "metadata": {"annotations": {kueue.SUSPENDED_ANNOTATION: "true"}},
            "spec": {"active": False},
        }
        decision.workload.append(WorkloadWrite("patch", view.name, deactivate))
    elif not suspended and not view.active and view.deactivated_by_suspend:
        activate = {
            "metadata": {"annotations": {kueue.SUSPENDED_ANNOTATION: None}},
            "spec": {"active": True},
        }
        decision.workload.append(WorkloadWrite("patch", view.name, activate))
