"""The kopf shell of the TrainingJob controller: read, decide (training_lifecycle), apply, report.

kopf watches TrainingJobs, nodes and pods and keeps them in indexes (in-memory caches fed by the
watches), so no reconcile lists the cluster. Watch events only put keys on a work queue; the
queue's workers reconcile one job at a time from the indexes. No kopf change handler, timer or
daemon is used: those store progress in the object or add a finalizer, and a TrainingJob needs
neither (its pods, Service and own reducer pool go with it through ownerReferences).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from decimal import Decimal
from typing import Any

import kopf
from pydantic import ValidationError

from ringmaster import metrics
from ringmaster.api import (
    DEFAULT_REDUCER_MACHINE_TYPE,
    GROUP,
    VERSION,
    TrainingJobSpec,
    TrainingJobStatus,
    set_condition,
)
from ringmaster.controllers import cluster_state
from ringmaster.controllers.base import Controller, Key, as_body, controller_for, snapshot
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.training_lifecycle import (
    PENDING,
    REDUCTION_SERVER,
    Capacity,
    Decision,
    JobView,
    Planner,
    ReducerPool,
    WorkerPod,
    reconcile_training,
)
from ringmaster.manifests.naming import (
    MANAGED_BY,
    OPERATOR,
    ROLE_LABEL,
    TRAINING_JOB_LABEL,
    owned_reducer_pool_name,
)
from ringmaster.manifests.reduction import REDUCER_REQUESTS
from ringmaster.placement.labels import POOL_NAME_KEYS
from ringmaster.placement.pools import (
    TERMINAL_PHASES,
    NodePool,
    free_capacity,
    parse_resources,
    pod_requests,
    pods_that_fit,
)

PLURAL = "trainingjobs"
# A safety net only: a hold ends when the watch shows the gang's pods, when creating them fails,
# or when the job goes. Under load the pod watch can run minutes behind the decisions, and a
# hold that expired before its pods were seen let gangs be admitted twice over (bench_scale).
LEDGER_SECONDS = 600.0
PHASES = ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Suspended")
REDUCER_REQUEST = parse_resources(REDUCER_REQUESTS)


# ---------------------------------------------------------------- indexes (fed by kopf's watches)


WORKER_LABELS: dict[str, Any] = {
    MANAGED_BY: OPERATOR,
    ROLE_LABEL: "worker",
    TRAINING_JOB_LABEL: kopf.PRESENT,
}


@kopf.index("pods", labels=WORKER_LABELS)
def ringmaster_worker_pods(
    body: kopf.Body,
    namespace: str | None,
    labels: kopf.Labels,
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    **_: Any,
) -> dict[Hashable, Any]:
    job = labels[TRAINING_JOB_LABEL]
    keys: dict[Hashable, Any] = {("job", namespace or "", job): WorkerPod.from_object(body)}
    unbound = not spec.get("nodeName") and status.get("phase") not in TERMINAL_PHASES
    if unbound and not meta.get("deletionTimestamp"):
        selector = spec.get("nodeSelector") or {}
        pool = next((selector[k] for k in POOL_NAME_KEYS if k in selector), None)
        if pool:
            keys[("promised", pool)] = ((namespace or "", job), pod_requests(body))
    return keys


@kopf.index(GROUP, VERSION, PLURAL)
def ringmaster_trainingjobs(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", name): snapshot(body)}


# ---------------------------------------------------------------- the engine, for status.plan


def status_plan(
    spec: TrainingJobSpec, machine_type: str | None, reducers: ReducerPool | None
) -> dict[str, Any]:
    """The engine's plan for the pool's machine type and the reducers the job really has, in the
    shape of ``status.plan``."""
    from ringmaster.planning import plan_training

    count = None
    if reducers is not None and reducers.replicas > 0:
        count = reducers.replicas
        settings = spec.communication.reduction_server
        if settings is not None and settings.machine_type != reducers.machine_type:
            # A shared pool's machines, not the job's default, set the reducers' bandwidth.
            settings = settings.model_copy(update={"machine_type": reducers.machine_type})
            communication = spec.communication.model_copy(update={"reduction_server": settings})
            spec = spec.model_copy(update={"communication": communication})
    training_plan = plan_training(spec, machine_type=machine_type, reducers=count)
    plan = training_plan.to_json()
    strategies = plan["strategies"]
    chosen = strategies[plan["chosenStrategy"]]
    rule = strategies.get(REDUCTION_SERVER, {})
    return {
        "strategy": plan["chosenStrategy"],
        "stepSeconds": chosen["stepSeconds"],
        "computeSeconds": chosen.get("computeSeconds"),
        "communicationSeconds": chosen["communicationSeconds"],
        "samplesPerSecond": chosen["samplesPerSecond"],
        "busBandwidthGBps": chosen["busBandwidthGBps"],
        "bottleneck": chosen["bottleneck"],
        "machineType": plan["machineType"],
        "reducers": chosen.get("reducers"),
        "reducerMachineType": chosen.get("reducerMachineType"),
        # The bandwidth rule's count: what a pool sized by its jobs gives this one.
        "reducersWanted": rule.get("vertexRuleReducers"),
        "costOptimalReducers": rule.get("costOptimalReducers"),
        "costPerHourUSD": chosen["costPerHourUSD"],
        "alternatives": {name: s["stepSeconds"] for name, s in strategies.items()},
        **training_plan.status_fields(),
    }


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
    )


# ---------------------------------------------------------------- the controller


class TrainingController(Controller):
    kind = "TrainingJob"
    plural = PLURAL
    index = "ringmaster_trainingjobs"

    def __init__(self, api: KubeApi, planner: Planner) -> None:
        super().__init__(api)
        self.planner = planner
        # Admitted gangs whose pods the pod index may not show yet: (pool, requests, since).
        self.ledger: dict[Key, tuple[str, list[dict[str, Decimal]], float]] = {}
        # Reducers a job's decision asked for, until its pool's pods show up: (machine, n, since).
        self.reducers_asked: dict[Key, tuple[str, int, float]] = {}
        # Admission reads and changes the capacity all jobs share: one decision at a time.
        self.decide_lock = asyncio.Lock()

    def free_reducer_hosts(
        self,
        pools: Mapping[str, NodePool],
        used: Mapping[str, Mapping[str, Decimal]],
        deciding: Key,
    ) -> dict[str, int]:
        """Per machine type: CPU hosts where one more reducer fits (reducers take one host
        each), less reducers asked for that have no host yet."""
        hosts_taken: set[str] = set()
        unplaced: dict[Key, int] = defaultdict(int)
        for key, store in self.indexes.get("ringmaster_reducer_pods", {}).items():
            for _ordinal, _ready, _unschedulable, node in store:
                if node:
                    hosts_taken.add(node)
                else:
                    unplaced[key] += 1
        free: dict[str, int] = defaultdict(int)
        for pool in pools.values():
            if pool.identity.accelerator is not None or not pool.identity.instance_type:
                continue
            for node in pool.nodes:
                room = free_capacity(node, used.get(node.name, {}))
                if (
                    node.schedulable
                    and node.name not in hosts_taken
                    and pods_that_fit(room, REDUCER_REQUEST)
                ):
                    free[pool.identity.instance_type] += 1
        reducer_pools = self.indexes.get("ringmaster_reduction_pools", {})
        for key, count in unplaced.items():
            bodies = list(reducer_pools.get(key, []))
            machine = (bodies[0].get("spec") or {}).get("machineType") if bodies else None
            free[machine or DEFAULT_REDUCER_MACHINE_TYPE] -= count
        for job, (machine, count, _since) in self.reducers_asked.items():
            if job != deciding:
                free[machine] -= count
        return dict(free)

    def capacity(self, deciding: Key) -> Capacity:
        """The world as `deciding` sees it: what other jobs hold counts, its own hold does not.

        A pod counts once: bound (in `used`), or created and unbound (the index's "promised"),
        or decided but not seen yet (the ledger, for the pods the index does not show)."""
        pools, used = cluster_state.pools_and_usage(self.indexes)
        workers = self.indexes["ringmaster_worker_pods"]
        promised: dict[str, list[Mapping[str, Decimal]]] = defaultdict(list)
        for key, store in workers.items():
            if key[0] == "promised":
                promised[key[1]] += [req for job, req in store if job != deciding]
        now = time.monotonic()
        for job, (pool, requests, since) in list(self.ledger.items()):
            seen = len(list(workers.get(("job", *job), [])))
            if seen >= len(requests) or now - since > LEDGER_SECONDS:
                del self.ledger[job]  # the index shows them all now (or they never came)
            elif job != deciding:
                promised[pool] += requests[: len(requests) - seen]
        return Capacity(
            pools=pools,
            used=used,
            promised=dict(promised),
            free_reducer_hosts=self.free_reducer_hosts(pools, used, deciding),
        )

    def reducer_pools(self, namespace: str) -> dict[str, ReducerPool]:
        pools = self.indexes.get("ringmaster_reduction_pools", {})
        return {
            key[1]: reducer_pool_view(body)
            for key, store in pools.items()
            if key[0] == namespace
            for body in store
        }

    def _settle_reducers_asked(self, key: Key) -> None:
        now = time.monotonic()
        asked = self.reducers_asked.get(key)
        if asked:
            pool_pods = self.indexes.get("ringmaster_reducer_pods", {})
            seen = len(list(pool_pods.get((key[0], owned_reducer_pool_name(key[1])), [])))
            if seen >= asked[1] or now - asked[2] > LEDGER_SECONDS:
                del self.reducers_asked[key]

    async def reconcile_object(
        self, namespace: str, name: str, body: dict[str, Any], current: dict[str, Any]
    ) -> float | None:
        status = TrainingJobStatus.model_validate(current)
        generation = int(body["metadata"].get("generation", 1))
        try:
            spec = TrainingJobSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            # The CRD admits what the models admit; this catches a CRD older than the operator.
            await self._report_invalid(namespace, name, body, current, status, generation, error)
            return None
        pods = list(self.indexes["ringmaster_worker_pods"].get(("job", namespace, name), []))
        async with self.decide_lock:
            self._settle_reducers_asked((namespace, name))
            decision = reconcile_training(
                JobView(name, namespace, generation, spec, status),
                pods,
                self.capacity((namespace, name)),
                dt.datetime.now(dt.UTC).replace(microsecond=0),
                self.planner,
                self.reducer_pools(namespace),
            )
            if decision.admitted_pool:
                requests = [pod_requests(o) for o in decision.create if o["kind"] == "Pod"]
                self.ledger[(namespace, name)] = (
                    decision.admitted_pool,
                    requests,
                    time.monotonic(),
                )
            elif decision.held:
                # Hold the workers' room while the job's reducers start (renewed each look).
                held_pool, one_worker = decision.held
                self.ledger[(namespace, name)] = (
                    held_pool,
                    [one_worker] * spec.workers,
                    time.monotonic(),
                )
            if decision.reducers_asked:
                machine, count = decision.reducers_asked
                self.reducers_asked[(namespace, name)] = (machine, count, time.monotonic())
        try:
            await self._apply(namespace, name, body, current, decision)
        except Exception:
            # Nothing was admitted after all (a terminating namespace refuses new pods, say):
            # release the capacity the decision held, or other gangs would wait for it.
            if decision.admitted_pool:
                self.ledger.pop((namespace, name), None)
            raise
        self._observe(namespace, name, body, decision)
        return decision.requeue_after

    async def _apply(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
        current: dict[str, Any],
        decision: Decision,
    ) -> None:
        for obj in decision.apply:
            kopf.append_owner_reference(obj, owner=as_body(body))
            await self.api.apply(namespace, obj)
        for obj in decision.create:
            kopf.append_owner_reference(obj, owner=as_body(body))
        # A gang's pods at once: one by one, a large gang spends seconds in round trips.
        await asyncio.gather(*(self.api.create(namespace, obj) for obj in decision.create))
        await asyncio.gather(
            *(self.api.delete_object(namespace, "Pod", pod) for pod in decision.delete)
        )
        await self.write_status(namespace, name, current, decision.status.to_k8s())
        for event in decision.events:
            self.post(body, event.type, event.reason, event.message)
        pool = decision.status.reduction_server_pool
        reducers = controller_for("ReductionServerPool")
        if pool and reducers is not None:
            reducers.queue.add((namespace, pool))  # the pool sizes itself from its jobs
        if decision.delete_job:
            self.post(body, "Normal", "Expired", "ttlSecondsAfterFinished passed: deleting it")
            await self.api.delete_custom(PLURAL, namespace, name)

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
        status.conditions = set_condition(
            status.conditions, "Valid", "False", "InvalidSpec", message, generation
        )
        if status.to_k8s() != current:
            self.post(body, "Warning", "InvalidSpec", message)
            await self.write_status(namespace, name, current, status.to_k8s())

    def _observe(self, namespace: str, name: str, body: dict[str, Any], decision: Decision) -> None:
        plan = decision.status.plan
        if plan is not None and plan.step_seconds is not None:
            metrics.PREDICTED_STEP_SECONDS.labels(namespace, name).set(plan.step_seconds)
            if plan.samples_per_second is not None:
                metrics.PREDICTED_SAMPLES_PER_SECOND.labels(namespace, name).set(
                    plan.samples_per_second
                )
        if decision.admitted_pool:
            created = body["metadata"].get("creationTimestamp")
            if created and not decision.status.restarts:
                since = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
                wait = (dt.datetime.now(dt.UTC) - since).total_seconds()
                metrics.ADMISSION_WAIT_SECONDS.observe(max(wait, 0.0))

    def forget(self, key: Key) -> None:
        self.ledger.pop(key, None)
        self.reducers_asked.pop(key, None)
        for gauge in (metrics.PREDICTED_STEP_SECONDS, metrics.PREDICTED_SAMPLES_PER_SECOND):
            with contextlib.suppress(KeyError):
                gauge.remove(*key)

    def is_settled(self, body: dict[str, Any]) -> bool:
        """Only jobs waiting for room need a periodic look: capacity frees without an event of
        theirs. Running jobs are woken by their pods' events, deadlines by requeue_after."""
        phase = (body.get("status") or {}).get("phase")
        return phase not in (None, PENDING)

    def resync_filter(self) -> Callable[[dict[str, Any]], bool]:
        """A job waiting for capacity is looked at again only when its accelerator type has at
        least as many free devices as its gang needs. One snapshot a tick, instead of a full
        decision for every waiting job: with hundreds waiting on thousands of hosts, re-deciding
        them all every few seconds is what would saturate the operator."""
        pools, used = cluster_state.pools_and_usage(self.indexes)
        free: dict[str, Decimal] = defaultdict(Decimal)
        for pool in pools.values():
            resource = pool.accelerator_resource
            if pool.identity.accelerator is None or resource is None:
                continue
            for node in pool.nodes:
                if node.schedulable:
                    taken = used.get(node.name, {}).get(resource, Decimal(0))
                    room = node.allocatable.get(resource, Decimal(0)) - taken
                    free[pool.identity.accelerator] += room
        # Optimistic on purpose (holds are not subtracted): it only skips jobs that cannot fit
        # even so; the decision itself checks everything.

        def worth_a_look(body: dict[str, Any]) -> bool:
            status = body.get("status") or {}
            conditions: list[dict[str, Any]] = status.get("conditions") or []
            waiting = next((c for c in conditions if c.get("type") == "Schedulable"), {})
            if waiting.get("reason") != "InsufficientCapacity":
                return True
            spec = body.get("spec") or {}
            accelerator = str((spec.get("accelerator") or {}).get("type", ""))
            needed = int(spec.get("workers", 0)) * int(
                (spec.get("accelerator") or {}).get("perWorker", 0)
            )
            return free.get(accelerator, Decimal(0)) >= needed

        return worth_a_look

    def after_resync(self) -> None:
        phases: dict[str, int] = defaultdict(int)
        for store in self.objects().values():
            for body in store:
                phases[(body.get("status") or {}).get("phase") or PENDING] += 1
        for phase in PHASES:
            metrics.TRAINING_JOBS.labels(phase).set(phases.get(phase, 0))


CONTROLLER: TrainingController | None = None


@kopf.on.startup()
async def start_training_controller(**_: Any) -> None:
    global CONTROLLER
    CONTROLLER = TrainingController(KubeApi(), status_plan)


@kopf.on.cleanup()
async def stop_training_controller(**_: Any) -> None:
    if CONTROLLER is not None:
        await CONTROLLER.stop()


def _controller(kwargs: Mapping[str, Any]) -> TrainingController:
    assert CONTROLLER is not None, "the TrainingJob controller starts in the startup handler"
    CONTROLLER.bind(kwargs)
    return CONTROLLER


@kopf.on.event(GROUP, VERSION, PLURAL)
async def trainingjob_changed(namespace: str | None, name: str, **kwargs: Any) -> None:
    _controller(kwargs).queue.add((namespace or "", name))


@kopf.on.event("pods", labels=WORKER_LABELS)
async def worker_pod_changed(namespace: str | None, labels: kopf.Labels, **kwargs: Any) -> None:
    _controller(kwargs).queue.add((namespace or "", labels[TRAINING_JOB_LABEL]))
