"""The kopf shell of the TrainingJob controller: feed the admission snapshot, run admission
cycles, apply decisions, write status.

- Node, pod and PriorityClass events update the admission snapshot (one object at a time) and
  wake the admission loop. TrainingJob and worker pod events put the job's key on the work queue.
- A worker reconciles one job at a time (training_lifecycle decides); a job that waits for room
  is put in the admission queue (``waiting``).
- The admission loop runs a cycle (admission/cycle.py) when the snapshot or the queue changed,
  at most every CYCLE_SECONDS; each verdict is handed to its job's reconcile, which records it.
  An admitted gang's room is held in the snapshot from the moment the cycle admits it.
- Apply, in one order for every decision: objects to apply, then Events (awaited, so what the
  status records was announced even if the process dies next) with the rendezvous Service, then
  status (so an admission is on record before its pods exist), then pods to create, pods to
  delete.

No kopf change handler, timer or daemon is used: those store progress in the object or add a
finalizer, and a TrainingJob needs neither (its pods, Service and own reducer pool go with it
through ownerReferences).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from ringmaster import metrics
from ringmaster.admission.cycle import (
    DEFAULT_BYPASS_LIMIT_SECONDS,
    Admit,
    QueueingRule,
    QueueingSettings,
    Verdict,
    Wait,
    WaitingGang,
    admission_pass,
    promise_for,
)
from ringmaster.admission.kueue import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    WORKLOAD_CRD,
    WORKLOAD_PLURAL,
    WorkloadWrite,
    queue_name,
)
from ringmaster.admission.snapshot import ClusterSnapshot, NodeFacts
from ringmaster.api import (
    GROUP,
    VERSION,
    TrainingJobSpec,
    TrainingJobStatus,
    TrainingPlan,
)
from ringmaster.controllers import progress_server
from ringmaster.controllers.admission_gate import AdmissionGate
from ringmaster.controllers.base import Controller, Key, as_body, snapshot
from ringmaster.controllers.catalog import job_hardware_problem, on_catalog_change
from ringmaster.controllers.cluster_state import POD_INDEX, indexed_pod, worker_pods
from ringmaster.controllers.expectations import UNWATCHED, CreateExpectations
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.reporting import Conditions, Event
from ringmaster.controllers.training_admission import admission_announcements
from ringmaster.controllers.training_lifecycle import gang_attempt, reconcile_training
from ringmaster.controllers.training_observer import TrainingObserver, estimate_starts
from ringmaster.controllers.training_step import (
    PENDING,
    Decision,
    JobView,
    KueueWorld,
    Planner,
    ReducerPool,
    World,
)
from ringmaster.manifests.reduction import REDUCER_REQUESTS
from ringmaster.placement.pools import node_from_object, parse_resources
from ringmaster.planning.alternatives import alternatives_hardware_problem

log = logging.getLogger(__name__)
PLURAL = "trainingjobs"
PHASES = ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Suspended")
# The operator settings of the queueing rule (`ringmaster run --queueing`, `--bypass-limit`).
QUEUEING_ENV = "RINGMASTER_QUEUEING"
BYPASS_LIMIT_ENV = "RINGMASTER_BYPASS_LIMIT_SECONDS"
# At most one admission cycle this often: events arrive in bursts (a gang's pods, a node pool
# coming up), and one cycle after the burst decides as well as one per event.
CYCLE_SECONDS = 0.2
# A waiting job's numbers alone ("N fit now") are rewritten at most this often; a new reason is
# written at once. Room churns when gangs finish, and at 5 s the waiting jobs' rewrites were a
# third of the status writes in the scale bench's churn, landing at the moment the next gangs'
# writes wait on the same API server (Kueue throttles its pending Workloads' message-only
# updates for the same reason: kubernetes-sigs/kueue#8095).
WAIT_REFRESH_SECONDS = 30.0
# A starting or running gang's worker counts alone (status.workers) are rewritten at most this
# often: a gang's pods move one event at a time, and a status write per event was most of the
# API calls in the scale bench, in the same API server queue as the next gang's pods.
PROGRESS_SECONDS = 1.0
# A new job's first look writes nothing when it joins the admission queue: the cycle's verdict
# comes a moment later and is written with the plan in one status write. If none has come after
# this long, the next look writes as any other.
FIRST_LOOK_SECONDS = 2.0
# A worker pod's event looks at its job this much later, so a gang's pods moving together (bound,
# Running, exited) make one look instead of one each: as Kubernetes' Job controller batches its
# pod events (syncJobBatchPeriod, 1 s, pkg/controller/job/job_controller.go). Admission does not
# wait on it: the snapshot takes the pod at once and the cycle admits from it.
POD_BATCH_SECONDS = 0.5


def queueing_settings() -> QueueingSettings:
    rule = QueueingRule(os.environ.get(QUEUEING_ENV) or QueueingRule.BEST_EFFORT_FIFO)
    limit = float(os.environ.get(BYPASS_LIMIT_ENV) or DEFAULT_BYPASS_LIMIT_SECONDS)
    return QueueingSettings(rule, limit)


# ---------------------------------------------------------------- indexes (fed by kopf's watches)
# Coroutines, so kopf runs them on the event loop, not through its thread pool (cluster_state.py).


@kopf.index(GROUP, VERSION, PLURAL)
async def ringmaster_trainingjobs(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", name): snapshot(body)}


@kopf.index("scheduling.k8s.io", "v1", "priorityclasses")
async def ringmaster_priority_classes(name: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {name: (int(body.get("value") or 0), bool(body.get("globalDefault")))}


@kopf.index("namespaces")
async def ringmaster_terminating_namespaces(
    name: str, body: kopf.Body, **_: Any
) -> dict[str, bool]:
    """Namespaces being deleted: their jobs' pods go with them, which is no worker failure."""
    terminating = bool(body.get("metadata", {}).get("deletionTimestamp")) or (
        (body.get("status") or {}).get("phase") == "Terminating"
    )
    return {name: True} if terminating else {}


# ---------------------------------------------------------------- the engine, for status.plan


@functools.lru_cache(maxsize=4096)
def _cached_plan(
    spec_json: str,
    machine_type: str | None,
    reducers: int | None,
    reducer_machine: str | None,
    reducer_share: float,
) -> TrainingPlan:
    from ringmaster.planning import plan_training, training_warnings

    spec = TrainingJobSpec.model_validate_json(spec_json)
    settings = spec.communication.reduction_server
    if reducer_machine is not None and settings and settings.machine_type != reducer_machine:
        # A shared pool's machines, not the job's default, set the reducers' bandwidth.
        settings = settings.model_copy(update={"machine_type": reducer_machine})
        communication = spec.communication.model_copy(update={"reduction_server": settings})
        spec = spec.model_copy(update={"communication": communication})
    report = plan_training(
        spec, machine_type=machine_type, reducers=reducers, reducer_share=reducer_share
    )
    plan = report.to_status()
    plan.warnings = [str(w) for w in training_warnings(spec, report)] or None
    return plan


def status_plan(
    spec: TrainingJobSpec, machine_type: str | None, reducers: ReducerPool | None
) -> TrainingPlan:
    """The engine's plan for the pool's machine type and the reducers the job really has.
    Cached: a job is planned on every look, and many jobs share a spec."""
    count = reducers.replicas if reducers is not None and reducers.replicas > 0 else None
    machine = reducers.machine_type if count is not None and reducers is not None else None
    share = reducers.share if reducers is not None else 1.0
    plan = _cached_plan(spec.model_dump_json(by_alias=True), machine_type, count, machine, share)
    return plan.model_copy(deep=True)


def reducer_pool_view(body: Mapping[str, Any]) -> ReducerPool:
    status = body.get("status") or {}
    conditions: list[dict[str, Any]] = status.get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return ReducerPool(
        name=body["metadata"]["name"],
        replicas=int(status.get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        endpoints=tuple(status.get("endpoints") or ()),
        machine_type=(body.get("spec") or {}).get("machineType", ""),
        message=ready.get("message", ""),
        running_jobs=frozenset(status.get("runningJobs") or ()),
    )


def _without_workers(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k != "workers"}


def _created(body: Mapping[str, Any]) -> dt.datetime | None:
    stamp = (body.get("metadata") or {}).get("creationTimestamp")
    return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None


# ---------------------------------------------------------------- the controller


class TrainingController(Controller):
    kind = "TrainingJob"
    plural = PLURAL
    index = "ringmaster_trainingjobs"
    # A reconcile mostly waits on the API (status, then a gang's pods): the gangs one cycle
    # admits start side by side instead of four at a time. At 16 the scale bench (100 gangs on
    # 400 hosts) had all 16 busy for 8 s with first looks and admitted gangs queued behind
    # them: 50 admitted at 1.5 s, their pods created by 9.4 s; at 32, operator/floor 2.3 -> 1.9.
    workers = 32

    def __init__(self, api: KubeApi, planner: Planner, settings: QueueingSettings) -> None:
        super().__init__(api)
        self.planner = planner
        self.settings = settings
        self.snapshot = ClusterSnapshot(parse_resources(REDUCER_REQUESTS))
        self.waiting: dict[Key, WaitingGang] = {}
        self.verdicts: dict[Key, Verdict] = {}  # decided by a cycle, not yet acted on
        self.delivered: dict[Key, Verdict] = {}  # the last verdict each job acted on
        self.delivered_at: dict[Key, dt.datetime] = {}
        self.wake_cycle = asyncio.Event()
        self.cycle_task: asyncio.Task[None] | None = None
        self._last_cycle: tuple[int, int] | None = None
        self._queue_version = 0
        self._status_written_at: dict[Key, float] = {}
        self._admitted_at: dict[Key, float] = {}  # when a cycle admitted it (monotonic)
        self._first_looks_skipped: set[Key] = set()
        self._announced: dict[Key, frozenset[str]] = {}  # named Events this process posted
        self.expectations = CreateExpectations()
        # Pods at the admission gate: serving replicas and PoolProfile runs (admission_gate.py).
        self.gate = AdmissionGate(api, self.snapshot, self.wake)
        # Progress reports, drift, the cluster calibration, expected starts (docs/progress.md).
        self.observer = TrainingObserver.from_environment(api, self.queue.add)

    # ------------------------------------------------------------ feeding the snapshot

    def bind(self, kwargs: Mapping[str, Any]) -> None:
        first = not self.indexes
        super().bind(kwargs)
        if first:
            # kopf runs no handler before every index is filled: start from them, then follow
            # the events (updates are idempotent, so an event the index already had is harmless).
            for store in self.indexes["ringmaster_nodes"].values():
                for node in store:
                    self.snapshot.set_node(NodeFacts.from_node(node))
            for store in self.indexes[POD_INDEX].values():
                for entry in store:
                    self.snapshot.set_pod(entry.facts)
            for name, store in self.indexes["ringmaster_priority_classes"].items():
                for value, is_default in store:
                    self.snapshot.set_priority_class(name, value, is_default)
            self.hold_recorded_admissions()
            self.cycle_task = asyncio.create_task(self.admission_loop())
            self.observer.start(self.estimate_starts)

    def hold_recorded_admissions(self) -> None:
        """At start, before any cycle: hold the room of every admission on record, as the job's
        first look would. A job whose operator was killed between its admission and its pods
        has no pods to show for it; a cycle that ran before that job's first look (another
        job's key came first) gave its room away, and two gangs got the same hosts."""
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        for (namespace, name), store in self.objects().items():
            for body in store:
                status = body.get("status") or {}
                if not status.get("admission"):
                    continue
                try:
                    spec = TrainingJobSpec.model_validate(body.get("spec") or {})
                    decision = self._decide(
                        namespace,
                        name,
                        body,
                        spec,
                        TrainingJobStatus.model_validate(status),
                        None,
                        now,
                    )
                except Exception:
                    log.exception("could not recover the admission of %s/%s", namespace, name)
                    continue  # the job's own look decides it (and reports what is wrong)
                if decision.promise is not None:
                    self.snapshot.promise(decision.promise)

    def node_event(self, event: str | None, name: str, body: Mapping[str, Any]) -> None:
        if event == "DELETED":
            self.snapshot.remove_node(name)
        else:
            self.snapshot.set_node(NodeFacts.from_node(node_from_object(body)))
        self.wake()

    def pod_event(self, event: str | None, body: Mapping[str, Any]) -> None:
        facts = indexed_pod(body).facts  # parsed once for the index and this event
        if event == "DELETED":
            self.snapshot.remove_pod(facts.key)
            self.gate.forget(facts.key)
        else:
            self.snapshot.set_pod(facts)
        if facts.job is not None:
            if event != "DELETED":
                # Listed pods carry no kind (watch events do): say which this is.
                self.expectations.observed(facts.job, {"kind": "Pod", "metadata": body["metadata"]})
            self.queue.add(facts.job, after=POD_BATCH_SECONDS)
        self.wake()

    def job_event(self, key: Key, phase: str | None, version: str | None) -> None:
        if not phase and key not in self.waiting:
            # A job no look has seen yet: its first look puts it in the admission queue, so it
            # goes before status-only looks (a burst of new jobs waited behind them otherwise).
            self.queue.add(key, urgent=True)
        else:
            self.object_changed(key, version)

    def reducer_pool_event(self, namespace: str, name: str, meta: Mapping[str, Any]) -> None:
        """A reducer pool changed: the jobs that use it plan and admit with its real state."""
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == self.kind:
                self.queue.add((namespace, str(ref["name"])))
        for (job_namespace, job_name), store in self.objects().items():
            if job_namespace == namespace and any(
                (b.get("status") or {}).get("reductionServerPool") == name for b in store
            ):
                self.queue.add((job_namespace, job_name))

    def priority_class_event(self, event: str | None, name: str, body: Mapping[str, Any]) -> None:
        if event == "DELETED":
            self.snapshot.remove_priority_class(name)
        else:
            value = int(body.get("value") or 0)
            self.snapshot.set_priority_class(name, value, bool(body.get("globalDefault")))
        self.wake()

    # ------------------------------------------------------------ admission cycles

    def wake(self) -> None:
        self.wake_cycle.set()

    async def admission_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.wake_cycle.wait()
            self.wake_cycle.clear()
            started = loop.time()
            try:
                self.run_cycle(dt.datetime.now(dt.UTC))
            except Exception:
                log.exception("admission cycle failed; the next change runs another")
            await asyncio.sleep(max(0.0, CYCLE_SECONDS - (loop.time() - started)))

    def run_cycle(self, now: dt.datetime) -> None:
        """Decide every waiting gang from the snapshot, unless nothing changed since the last
        cycle (the time bound of BestEffortFIFO is checked on resync)."""
        state = (self.snapshot.version, self._queue_version)
        if not (self.waiting or self.snapshot.has_gated()) or state == self._last_cycle:
            return
        with metrics.ADMISSION_CYCLE_SECONDS.time():
            grants, verdicts = admission_pass(
                self.snapshot, self.waiting.values(), self.settings, now
            )
        for grant in grants:
            self.gate.serve(grant)
        for verdict in verdicts:
            if isinstance(verdict, Admit):
                # The room is held at once: later cycles see it taken before any pod exists.
                gang = self.waiting.pop(verdict.key)
                self.snapshot.promise(
                    promise_for(
                        verdict.key, gang.attempt, verdict.option, verdict.hosts, verdict.pools
                    )
                )
                self.verdicts[verdict.key] = verdict
                self._admitted_at[verdict.key] = time.monotonic()
                # Its room is held from now on: it goes before status-only reconciles.
                self.queue.add(verdict.key, urgent=True)
            elif self._worth_writing(verdict, now):
                self.verdicts[verdict.key] = verdict
                self.queue.add(verdict.key)
        self._last_cycle = (self.snapshot.version, self._queue_version)
        self.observer.starts_changed.set()

    def estimate_starts(self) -> dict[Key, Any]:
        """Expected starts of the waiting jobs (training_observer.py), from this controller's
        snapshot, admission queue and index."""
        jobs = {key: next(iter(store)) for key, store in self.objects().items() if store}
        now = dt.datetime.now(dt.UTC)
        return estimate_starts(self.snapshot, self.waiting, jobs, now, self.observer.etas)

    def _worth_writing(self, verdict: Verdict, now: dt.datetime) -> bool:
        """A new reason at once; new numbers for the same reason at most every
        WAIT_REFRESH_SECONDS (capacity churn would otherwise rewrite every waiting job)."""
        before = self.delivered.get(verdict.key)
        if before == verdict:
            return False
        if not isinstance(before, Wait) or not isinstance(verdict, Wait):
            return True
        if before.reason != verdict.reason:
            return True
        since = self.delivered_at.get(verdict.key)
        return since is None or (now - since).total_seconds() >= WAIT_REFRESH_SECONDS

    # ------------------------------------------------------------ one job

    def catalog_changed(self) -> None:
        """A new hardware catalog: plans made with the old one go, every job is looked at."""
        _cached_plan.cache_clear()
        if self.indexes:
            for key in list(self.objects()):
                self.queue.add(key)
            self._last_cycle = None
            self.wake()

    def reducer_pools(self, namespace: str) -> dict[str, ReducerPool]:
        pools = self.indexes.get("ringmaster_reduction_pools", {})
        return {
            key[1]: reducer_pool_view(body)
            for key, store in pools.items()
            if key[0] == namespace
            for body in store
        }

    async def reconcile_object(
        self, namespace: str, name: str, body: dict[str, Any], current: dict[str, Any]
    ) -> float | None:
        key = (namespace, name)
        status = TrainingJobStatus.model_validate(current)
        generation = int(body["metadata"].get("generation", 1))
        try:
            spec = TrainingJobSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            # The CRD admits what the models admit; this catches a CRD older than the operator.
            await self._report_invalid(namespace, name, body, current, status, generation, error)
            return None
        verdict = self.verdicts.pop(key, None)
        admitted_at = self._admitted_at.pop(key, None) if isinstance(verdict, Admit) else None
        if admitted_at is not None:
            metrics.ADMISSION_START_SECONDS.labels("queued").observe(time.monotonic() - admitted_at)
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        try:
            decision = self._decide(namespace, name, body, spec, status, verdict, now)
            self.observer.annotate(key, body, spec, status, decision, now)
        except Exception:
            if isinstance(verdict, Admit):  # admitted, and nothing recorded: decide again
                self.snapshot.release(key)
                self.wake()
            raise
        # Here, with no await since the index was read: a pod is either in the index the
        # decision read or still expected. Filtered after the writes before the creates, a pod
        # seen meanwhile (its expectation ended) would be POSTed again (60 of 460 at 400 hosts).
        decision.create = self.expectations.still_to_create(key, decision.create)
        self._admission_bookkeeping(key, verdict, decision)
        if self._skip_first_look_write(key, current, verdict, decision):
            return FIRST_LOOK_SECONDS
        later = self._progress_later(key, current, decision)
        if later is not None:
            return later
        try:
            await self._apply(namespace, name, body, current, status, decision)
        except Exception:
            if decision.promise is not None and verdict is not None:
                # Admitted by this look, and nothing recorded: let the room go, decide again.
                self.snapshot.release(key)
                self.wake()
            raise
        self._observe(namespace, name, body, decision, verdict)
        if admitted_at is not None and decision.create:
            seconds = time.monotonic() - admitted_at
            metrics.ADMISSION_START_SECONDS.labels("created").observe(seconds)
        return decision.requeue_after

    def _skip_first_look_write(
        self, key: Key, current: dict[str, Any], verdict: Verdict | None, decision: Decision
    ) -> bool:
        """True when a brand-new job's look, which only plans it and queues it, is not written:
        its StrategyChosen Event and plan go out with the verdict's (Admitted or why it waits),
        one status write and one round trip fewer on an admitted gang's path (100 of the 310
        status writes of the scale bench at 400 hosts). Once per job."""
        if current or verdict is not None or decision.waiting is None:
            return False
        if key in self._first_looks_skipped:
            return False
        if decision.apply or decision.create or decision.delete or decision.workload:
            return False
        self._first_looks_skipped.add(key)
        return True

    def _progress_later(
        self, key: Key, current: dict[str, Any], decision: Decision
    ) -> float | None:
        """Seconds until the decision is worth applying, when it only moves the worker counts
        and counts were written less than PROGRESS_SECONDS ago; None to apply it now."""
        if decision.apply or decision.create or decision.delete or decision.events:
            return None
        if decision.workload:
            return None
        if decision.delete_job:
            return None
        new = decision.status.to_k8s()
        counts_only = new.get("workers") != current.get("workers") and (
            _without_workers(new) == _without_workers(current)
        )
        if not counts_only:
            return None
        since = time.monotonic() - self._status_written_at.get(key, float("-inf"))
        if since >= PROGRESS_SECONDS:
            return None
        wait = PROGRESS_SECONDS - since
        return min(wait, decision.requeue_after) if decision.requeue_after is not None else wait

    def _decide(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
        spec: TrainingJobSpec,
        status: TrainingJobStatus,
        verdict: Verdict | None,
        now: dt.datetime,
    ) -> Decision:
        """The state machine's decision for one job from the indexes (no I/O)."""
        key = (namespace, name)
        metadata = body["metadata"]
        generation = int(metadata.get("generation", 1))
        labels = dict(metadata.get("labels") or {})
        pods = worker_pods(self.indexes, key)
        ending = bool(metadata.get("deletionTimestamp")) or namespace in self.indexes.get(
            "ringmaster_terminating_namespaces", {}
        )
        return reconcile_training(
            JobView(
                name,
                namespace,
                generation,
                spec,
                status,
                _created(body),
                ending,
                uid=str(metadata.get("uid") or ""),
                labels=labels,
            ),
            pods,
            World(
                self.snapshot.pools(),
                self.reducer_pools(namespace),
                verdict,
                job_hardware_problem(
                    spec.accelerator.type, spec.accelerator.per_worker, spec.accelerator.topology
                )
                or alternatives_hardware_problem(spec, job_hardware_problem),
                kueue=self.kueue_world(key, labels),
                held=self.snapshot.promised(key),
                host_problems=self.snapshot.host_problems(
                    status.admission.hosts or () if status.admission else ()
                ),
            ),
            now,
            self.planner,
        )

    def _admission_bookkeeping(self, key: Key, verdict: Verdict | None, decision: Decision) -> None:
        if verdict is not None:
            self.delivered[key] = verdict
            self.delivered_at[key] = dt.datetime.now(dt.UTC)
        if decision.promise is not None:
            self.snapshot.promise(decision.promise)
        elif decision.release or decision.waiting is not None or isinstance(verdict, Admit):
            # Done, waiting (a waiting job holds nothing), or changed since the cycle admitted it.
            self.snapshot.release(key)
        if decision.waiting is not None:
            if self.waiting.get(key) != decision.waiting:
                self.waiting[key] = decision.waiting
                self._queue_version += 1
                self.wake()
        elif self.waiting.pop(key, None) is not None:
            self._queue_version += 1
            self.delivered.pop(key, None)
            self.delivered_at.pop(key, None)

    async def _apply(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
        current: dict[str, Any],
        status: TrainingJobStatus,
        decision: Decision,
    ) -> None:
        """Apply one decision; `current` is the status on record, `status` the same, parsed."""
        key = (namespace, name)
        for obj in decision.apply:
            kopf.append_owner_reference(obj, owner=as_body(body))
            await self.api.apply(namespace, obj)
        # The Events (and a Service, which nothing orders), then status, then pods: every Event
        # is in the API before the status that records what it announces, and an admission is on
        # record before any of its pods exists; a phase on record has its Service. A new
        # admission's Events are the exception: named after it, they go out with its pods, and
        # one on record that this process did not announce is announced first (see
        # admission_announcements).
        before, after = self._announcements(key, body, status, decision)
        services = [obj for obj in decision.create if obj["kind"] in UNWATCHED]
        for obj in services:
            kopf.append_owner_reference(obj, owner=as_body(body))
        await asyncio.gather(
            self.announce(body, before),
            *(self.api.create(namespace, obj) for obj in services),
        )
        self._announced_now(key, (e.name for e in before))
        self.expectations.created(key, services)
        new = decision.status.to_k8s()
        if new != current:
            await self.write_status(namespace, name, current, new)
            self._status_written_at[key] = time.monotonic()
        for write in decision.workload:
            await self._write_workload(namespace, body, write)
        # The pods (the Service went out above; what was created moments ago was filtered out
        # when the decision was made).
        create = [obj for obj in decision.create if obj["kind"] not in UNWATCHED]
        for obj in create:
            kopf.append_owner_reference(obj, owner=as_body(body))
        announcing = asyncio.ensure_future(self.announce(body, after)) if after else None
        try:
            # A gang's pods at once: one by one, a large gang spends seconds in round trips.
            await asyncio.gather(*(self.api.create(namespace, obj) for obj in create))
            self.expectations.created(key, create)
        finally:
            if announcing is not None:
                await announcing
                self._announced_now(key, (e.name for e in after))
        await asyncio.gather(
            *(self.api.delete_object(namespace, "Pod", pod) for pod in decision.delete)
        )
        if decision.delete_job:
            self.post(body, "Normal", "Expired", "ttlSecondsAfterFinished passed: deleting it")
            await self.api.delete_custom(PLURAL, namespace, name)

    def _announcements(
        self, key: Key, body: dict[str, Any], current: TrainingJobStatus, decision: Decision
    ) -> tuple[list[Event], list[Event]]:
        """The decision's Events split into those posted before its status write and those
        posted with its pods after it (a new admission's, named after it). Before them all, the
        Events of an admission on record that this process has not announced."""
        name, uid = key[1], str(body["metadata"].get("uid") or "")
        announced = self._announced.get(key, frozenset())
        recorded = [
            e for e in admission_announcements(name, uid, current) if e.name not in announced
        ]
        recorded_names = {e.name for e in recorded} | announced
        named = {
            e.reason: e.name
            for e in admission_announcements(name, uid, decision.status)
            if e.name not in recorded_names
        }
        after = [replace(e, name=named[e.reason]) for e in decision.events if e.reason in named]
        # A named Event the decision repeats that is announced already (or is in `recorded`)
        # is not posted twice: its name says it is the same one.
        before = recorded + [
            e
            for e in decision.events
            if e.reason not in named and not (e.name and e.name in recorded_names)
        ]
        # What the decision itself does not announce (a strategy unchanged since the last
        # attempt) is not announced after a restart either.
        said = {e.reason for e in after}
        self._announced_now(key, [n for reason, n in named.items() if reason not in said])
        return before, after

    def _announced_now(self, key: Key, names: Iterable[str]) -> None:
        """Named Events this process posted (or chose not to): not posted again."""
        done = {name for name in names if name}
        if done:
            self._announced[key] = self._announced.get(key, frozenset()) | done

    # ------------------------------------------------------------ Kueue (kueue_workloads.py)

    def kueue_installed(self) -> bool:
        """Kueue's Workload CRD is served (only indexed when the integration is on)."""
        return bool(self.indexes.get("ringmaster_kueue_crd", {}).get(WORKLOAD_CRD))

    def kueue_world(self, key: Key, labels: Mapping[str, str]) -> KueueWorld | None:
        """What the job's reconcile reads of Kueue: None when Kueue is not installed, so a
        labelled job is admitted exactly as an unlabelled one."""
        if not self.kueue_installed():
            return None
        workloads = list(self.indexes["ringmaster_kueue_workloads"].get(key, []))
        if queue_name(labels) is None and not workloads:
            return KueueWorld()
        return KueueWorld(
            workloads=workloads,
            flavors={
                name: flavor
                for name, store in self.indexes["ringmaster_kueue_flavors"].items()
                for flavor in store
            },
            workload_priority_classes={
                name: value
                for name, store in self.indexes["ringmaster_kueue_priority_classes"].items()
                for value in store
            },
            priority_classes={
                name: entry
                for name, store in self.indexes["ringmaster_priority_classes"].items()
                for entry in store
            },
            pool_labels=self.pool_labels,
            topologies={
                name: levels
                for name, store in self.indexes.get("ringmaster_kueue_topologies", {}).items()
                for levels in store
            },
        )

    def pool_labels(self, pool: str) -> dict[str, str]:
        """The labels every node of the pool carries (what a flavor may select it by)."""
        common: dict[str, str] | None = None
        for store in self.indexes["ringmaster_nodes"].values():
            for node in store:
                if node.identity.pool != pool:
                    continue
                if common is None:
                    common = dict(node.labels)
                else:
                    common = {k: v for k, v in common.items() if node.labels.get(k) == v}
        return common or {}

    def kueue_changed(self) -> None:
        """Kueue came or went: its labelled jobs are admitted the other way from now on."""
        for (namespace, name), store in self.objects().items():
            if any(queue_name((b.get("metadata") or {}).get("labels")) for b in store):
                self.queue.add((namespace, name))

    async def _write_workload(
        self, namespace: str, body: dict[str, Any], write: WorkloadWrite
    ) -> None:
        where = (KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PLURAL, namespace)
        try:
            if write.action == "create":
                workload = dict(write.body or {})
                kopf.append_owner_reference(workload, owner=as_body(body))
                await self.api.create_custom(*where, workload)
            elif write.action == "delete":
                await self.api.delete_custom_object(*where, write.name)
            else:
                await self.api.patch_custom(
                    *where,
                    write.name,
                    dict(write.body or {}),
                    status=write.action == "status",
                )
        except ApiException as error:
            if error.status == 409 and write.action == "status":
                # Kueue wrote first (our patch names the resourceVersion read): its write
                # wakes the job, which looks again at the new state.
                log.debug("Workload %s/%s changed meanwhile: %s", namespace, write.name, error)
                return
            raise

    async def _report_invalid(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
        current: dict[str, Any],
        status: TrainingJobStatus,
        generation: int,
        error: ValidationError,
    ) -> None:
        message = "; ".join(
            f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
        )[:1000]
        status.observed_generation = generation
        status.phase = "Failed"
        conditions = Conditions(status, generation, dt.datetime.now(dt.UTC).replace(microsecond=0))
        conditions.set("Valid", "False", "InvalidSpec", message)
        conditions.stamp()
        if status.to_k8s() != current:
            await self.announce(body, [Event("Warning", "InvalidSpec", message)])
            await self.write_status(namespace, name, current, status.to_k8s())

    def _observe(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
        decision: Decision,
        verdict: Verdict | None,
    ) -> None:
        plan = decision.status.plan
        if plan is not None and plan.step_seconds is not None:
            metrics.PREDICTED_STEP_SECONDS.labels(namespace, name).set(plan.step_seconds)
            if plan.samples_per_second is not None:
                metrics.PREDICTED_SAMPLES_PER_SECOND.labels(namespace, name).set(
                    plan.samples_per_second
                )
        if isinstance(verdict, Admit) and decision.promise is not None:
            created = _created(body)
            if created and not gang_attempt(decision.status):
                wait = (dt.datetime.now(dt.UTC) - created).total_seconds()
                metrics.ADMISSION_WAIT_SECONDS.observe(max(wait, 0.0))

    def forget(self, key: Key) -> None:
        self.observer.forget(key)
        self._status_written_at.pop(key, None)
        self.expectations.forget(key)
        self._first_looks_skipped.discard(key)
        self._announced.pop(key, None)
        self._admitted_at.pop(key, None)
        self.snapshot.release(key)
        self.verdicts.pop(key, None)
        self.delivered.pop(key, None)
        self.delivered_at.pop(key, None)
        if self.waiting.pop(key, None) is not None:
            self._queue_version += 1
        self.wake()
        for gauge in (metrics.PREDICTED_STEP_SECONDS, metrics.PREDICTED_SAMPLES_PER_SECOND):
            with contextlib.suppress(KeyError):
                gauge.remove(*key)

    def is_settled(self, body: dict[str, Any]) -> bool:
        """Jobs the admission queue holds are decided by cycles, which capacity changes wake;
        running jobs are woken by their pods' events, deadlines by requeue_after. Only a pending
        job that is in no queue yet (waiting for its reducers, say) needs a periodic look."""
        metadata = body.get("metadata") or {}
        key = (metadata.get("namespace") or "", metadata.get("name") or "")
        phase = (body.get("status") or {}).get("phase")
        return phase not in (None, PENDING) or key in self.waiting

    def after_resync(self) -> None:
        # A waiting gang may have passed the BestEffortFIFO bypass limit: look again.
        self._last_cycle = None
        self.wake()
        phases: dict[str, int] = defaultdict(int)
        for store in self.objects().values():
            for body in store:
                phases[(body.get("status") or {}).get("phase") or PENDING] += 1
        for phase in PHASES:
            metrics.TRAINING_JOBS.labels(phase).set(phases.get(phase, 0))
        metrics.ADMISSION_WAITING.set(len(self.waiting))

    async def stop(self) -> None:
        if self.cycle_task is not None:
            self.cycle_task.cancel()
        self.gate.stop()
        self.observer.stop()
        await super().stop()


CONTROLLER: TrainingController | None = None
PROGRESS_ENDPOINT: Any = None  # the progress endpoint's server (progress_server.py), if served


@kopf.on.startup()
async def start_training_controller(**_: Any) -> None:
    global CONTROLLER
    CONTROLLER = TrainingController(KubeApi(), status_plan, queueing_settings())
    on_catalog_change(CONTROLLER.catalog_changed)
    await CONTROLLER.observer.store.load()
    global PROGRESS_ENDPOINT
    PROGRESS_ENDPOINT = await progress_server.start_for(CONTROLLER)


@kopf.on.cleanup()
async def stop_training_controller(**_: Any) -> None:
    await progress_server.stop(PROGRESS_ENDPOINT)
    if CONTROLLER is not None:
        await CONTROLLER.stop()


def _controller(kwargs: Mapping[str, Any]) -> TrainingController:
    assert CONTROLLER is not None, "the TrainingJob controller starts in the startup handler"
    CONTROLLER.bind(kwargs)
    return CONTROLLER


@kopf.on.event(GROUP, VERSION, PLURAL)
async def trainingjob_changed(
    namespace: str | None, name: str, meta: kopf.Meta, status: kopf.Status, **kwargs: Any
) -> None:
    key = (namespace or "", name)
    _controller(kwargs).job_event(key, status.get("phase"), meta.get("resourceVersion"))


@kopf.on.event("pods")
async def pod_changed(type: str | None, body: kopf.Body, **kwargs: Any) -> None:
    _controller(kwargs).pod_event(type, body)


@kopf.on.event("nodes")
async def node_changed(type: str | None, name: str, body: kopf.Body, **kwargs: Any) -> None:
    _controller(kwargs).node_event(type, name, body)


@kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses")
async def priority_class_changed(
    type: str | None, name: str, body: kopf.Body, **kwargs: Any
) -> None:
    _controller(kwargs).priority_class_event(type, name, body)


@kopf.on.event(GROUP, VERSION, "reductionserverpools")
async def reducer_pool_changed(
    namespace: str | None, name: str, meta: kopf.Meta, **kwargs: Any
) -> None:
    _controller(kwargs).reducer_pool_event(namespace or "", name, meta)
