"""What every phase function of the TrainingJob state machine works on: the job's phases and
condition reasons, the snapshot of the world one reconcile reads (:class:`World`,
:class:`JobView`, :class:`WorkerPod`, :class:`ReducerPool`), the :class:`Decision` it returns, and
the step a phase function edits (``_Step``, ``_wait``).

Pure, as training_lifecycle.py, which has the phase functions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringmaster.admission.cycle import WORKER_LARGER_THAN_NODE, Verdict, WaitingGang
from ringmaster.admission.kueue import Flavor, WorkloadWrite
from ringmaster.admission.snapshot import Key, PoolSummary, Promise
from ringmaster.api import TrainingJobSpec, TrainingJobStatus, TrainingPlan
from ringmaster.controllers.reporting import Conditions, Event
from ringmaster.manifests.naming import ATTEMPT_ANNOTATION, RANK_LABEL
from ringmaster.manifests.training import REDUCER_ENDPOINTS_ENV
from ringmaster.placement import labels
from ringmaster.placement.labels import POOL_NAME_KEYS
from ringmaster.planning.alternatives import spec_on

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
    topologies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Kueue's Topologies: name -> their levels' node labels, outermost first."""


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
    return labels.accelerator_resource(spec.accelerator.type)


@dataclass
class _Step:
    """What every phase function works on."""

    job: JobView
    world: World
    now: dt.datetime
    planner: Planner
    decision: Decision
    conditions: Conditions
    _specs: dict[str | None, TrainingJobSpec] = field(default_factory=dict)

    @property
    def spec(self) -> TrainingJobSpec:
        """The spec the gang runs with: on the accelerator its admission on record chose, where
        the job names alternatives (planning/alternatives.py), else the job's own."""
        spec = self.job.spec
        if not spec.accelerator.alternatives:
            return spec
        chosen = admitted_accelerator(self.decision.status)
        if chosen not in self._specs:
            try:
                self._specs[chosen] = spec_on(spec, chosen)
            except ValueError:
                # Deterministic, and it succeeded at admission: kept as a fallback only.
                self._specs[chosen] = spec
        return self._specs[chosen]

    @property
    def status(self) -> TrainingJobStatus:
        return self.decision.status

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))  # type: ignore[arg-type]


def admitted_accelerator(status: TrainingJobStatus) -> str | None:
    """The accelerator the admission of the current gang attempt chose among the job's
    alternatives; None where it names none (or there is no such admission)."""
    admission = status.admission
    attempt = (status.restarts or 0) + (status.requeues or 0)
    if admission is None or admission.attempt != attempt:
        return None
    return admission.accelerator


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
