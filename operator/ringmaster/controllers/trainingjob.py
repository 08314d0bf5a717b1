"""The kopf shell of the TrainingJob controller: read, decide (training_lifecycle), apply, report.

kopf watches TrainingJobs, nodes and pods and keeps them in indexes (in-memory caches fed by the
watches), so no reconcile lists the cluster. Watch events only put keys on a work queue; the
queue's workers reconcile one job at a time from the indexes. No kopf change handler, timer or
daemon is used: those store progress in the object or add a finalizer, and a TrainingJob needs
neither (its pods and Service are cleaned up by the garbage collector through ownerReferences).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import time
from collections import defaultdict
from collections.abc import Hashable, Mapping
from decimal import Decimal
from typing import Any, cast

import kopf
from pydantic import ValidationError

from ringmaster import metrics
from ringmaster.api import GROUP, VERSION, TrainingJobSpec, TrainingJobStatus, set_condition
from ringmaster.controllers import cluster_state
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.training_lifecycle import (
    FINISHED,
    PENDING,
    Capacity,
    Decision,
    JobView,
    Planner,
    WorkerPod,
    reconcile_training,
)
from ringmaster.controllers.workqueue import WorkQueue
from ringmaster.manifests.naming import MANAGED_BY, OPERATOR, TRAINING_JOB_LABEL
from ringmaster.placement.labels import POOL_NAME_KEYS
from ringmaster.placement.pools import TERMINAL_PHASES, pod_requests

log = logging.getLogger(__name__)
PLURAL = "trainingjobs"
KIND = "TrainingJob"
# Pending jobs look again this often: capacity frees without an event of theirs.
RESYNC_SECONDS = 5.0
# How long an admitted gang's capacity is held for it before its pods must show up.
LEDGER_SECONDS = 60.0
# How long our last status write may run ahead of the watch.
WRITTEN_SECONDS = 30.0

Key = tuple[str, str]


def _as_body(snapshot: dict[str, Any]) -> kopf.Body:
    """kopf's posting and adoption need only apiVersion, kind and metadata, which a snapshot has."""
    return cast(kopf.Body, snapshot)


def _snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """A plain, detached copy of a kopf body (the watch replaces bodies; we keep our own)."""
    copy: dict[str, Any] = json.loads(json.dumps(dict(body), default=str))
    return copy


# ---------------------------------------------------------------- indexes (fed by kopf's watches)


@kopf.index("pods", labels={MANAGED_BY: OPERATOR, TRAINING_JOB_LABEL: kopf.PRESENT})
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
    return {(namespace or "", name): _snapshot(body)}


# ---------------------------------------------------------------- the controller


def status_plan(spec: TrainingJobSpec, machine_type: str | None) -> dict[str, Any]:
    """The engine's plan for the pool's machine type, in the shape of ``status.plan``."""
    from ringmaster.planning import plan_training

    plan = plan_training(spec, machine_type=machine_type).to_json()
    strategies = plan["strategies"]
    chosen = strategies[plan["chosenStrategy"]]
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
        "costPerHourUSD": chosen["costPerHourUSD"],
        "alternatives": {name: s["stepSeconds"] for name, s in strategies.items()},
    }


class TrainingController:
    def __init__(self, api: KubeApi, planner: Planner) -> None:
        self.api = api
        self.planner = planner
        self.queue = WorkQueue(self.reconcile)
        self.indexes: Mapping[str, Any] = {}
        # Admitted gangs whose pods the pod index may not show yet: (pool, requests, since).
        self.ledger: dict[Key, tuple[str, list[dict[str, Decimal]], float]] = {}
        self.decide_lock = asyncio.Lock()
        # The status we last wrote and the resourceVersion our write produced. The operator is
        # the only writer of status, so until the watch brings that version back, our write is
        # newer than what the index holds; deciding from the index would repeat Events.
        self.written: dict[Key, tuple[str, dict[str, Any], float]] = {}
        self.resync_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.queue.start()
        self.resync_task = asyncio.create_task(self.resync())

    async def stop(self) -> None:
        if self.resync_task is not None:
            self.resync_task.cancel()
        await self.queue.stop()

    def bind(self, kwargs: Mapping[str, Any]) -> None:
        """On the first watch event: keep references to kopf's live indexes (handed to every
        handler as keyword args) and start the workers. Started from a handler, not from the
        startup activity, so they inherit the context that kopf.event() posts Events through."""
        if not self.indexes:
            self.indexes = {k: v for k, v in kwargs.items() if k.startswith("ringmaster_")}
            self.start()

    def _index(self, name: str) -> Any:
        return self.indexes[name]

    def capacity(self) -> Capacity:
        pools, used = cluster_state.pools_and_usage(self.indexes)
        promised: dict[str, list[Mapping[str, Decimal]]] = defaultdict(list)
        for key, store in self._index("ringmaster_worker_pods").items():
            if key[0] == "promised":
                promised[key[1]] += [req for job, req in store if job not in self.ledger]
        for pool, requests, _since in self.ledger.values():
            promised[pool] += requests
        return Capacity(pools=pools, used=used, promised=dict(promised))

    def _settle_ledger(self, key: Key, pods_seen: int, workers: int) -> None:
        entry = self.ledger.get(key)
        if entry and (pods_seen >= workers or time.monotonic() - entry[2] > LEDGER_SECONDS):
            del self.ledger[key]

    async def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        store = self._index("ringmaster_trainingjobs").get((namespace, name))
        if not store:
            self.forget((namespace, name))
            return None
        body = next(iter(store))
        with metrics.RECONCILE_SECONDS.labels(KIND).time():
            try:
                return await self._reconcile(namespace, name, body)
            except Exception as error:
                metrics.RECONCILE_ERRORS.labels(KIND, type(error).__name__).inc()
                raise

    def _current_status(self, key: Key, body: dict[str, Any]) -> dict[str, Any]:
        written = self.written.get(key)
        if written is None:
            return body.get("status") or {}
        version, status, since = written
        if version == body["metadata"].get("resourceVersion") or (
            time.monotonic() - since > WRITTEN_SECONDS
        ):
            del self.written[key]  # the watch has caught up (or a relist skipped our version)
            return body.get("status") or {}
        return status

    async def _reconcile(self, namespace: str, name: str, body: dict[str, Any]) -> float | None:
        current = self._current_status((namespace, name), body)
        status = TrainingJobStatus.model_validate(current)
        generation = int(body["metadata"].get("generation", 1))
        try:
            spec = TrainingJobSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            # The CRD admits what the models admit; this catches a CRD older than the operator.
            await self._report_invalid(namespace, name, body, status, generation, error)
            return None
        pods = list(self._index("ringmaster_worker_pods").get(("job", namespace, name), []))
        async with self.decide_lock:
            self._settle_ledger((namespace, name), len(pods), spec.workers)
            decision = reconcile_training(
                JobView(name, namespace, generation, spec, status),
                pods,
                self.capacity(),
                dt.datetime.now(dt.UTC).replace(microsecond=0),
                self.planner,
            )
            if decision.admitted_pool:
                requests = [pod_requests(o) for o in decision.create if o["kind"] == "Pod"]
                self.ledger[(namespace, name)] = (
                    decision.admitted_pool,
                    requests,
                    time.monotonic(),
                )
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
        current_status: dict[str, Any],
        decision: Decision,
    ) -> None:
        for obj in decision.create:
            kopf.adopt(obj, owner=_as_body(body))
            await self.api.create(namespace, obj)
        for pod in decision.delete:
            await self.api.delete_pod(namespace, pod)
        new_status = decision.status.to_k8s()
        if new_status != current_status:
            version = await self.api.patch_status(PLURAL, namespace, name, new_status)
            if version is not None:
                self.written[(namespace, name)] = (version, new_status, time.monotonic())
        for event in decision.events:
            kopf.event(_as_body(body), type=event.type, reason=event.reason, message=event.message)
        if decision.delete_job:
            kopf.event(
                _as_body(body),
                type="Normal",
                reason="Expired",
                message="ttlSecondsAfterFinished passed: deleting the job",
            )
            await self.api.delete_custom(PLURAL, namespace, name)

    async def _report_invalid(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
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
        if status.to_k8s() != (body.get("status") or {}):
            kopf.warn(_as_body(body), reason="InvalidSpec", message=message)
            await self.api.patch_status(PLURAL, namespace, name, status.to_k8s())

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
        self.written.pop(key, None)
        for gauge in (metrics.PREDICTED_STEP_SECONDS, metrics.PREDICTED_SAMPLES_PER_SECOND):
            with contextlib.suppress(KeyError):
                gauge.remove(*key)

    async def resync(self) -> None:
        """Periodically: pending jobs look for capacity again; the phase gauge is refreshed."""
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            if not self.indexes:
                continue
            phases: dict[str, int] = defaultdict(int)
            for key, store in self._index("ringmaster_trainingjobs").items():
                for body in store:
                    phase = (body.get("status") or {}).get("phase") or PENDING
                    phases[phase] += 1
                    if phase not in FINISHED:
                        self.queue.add(key)
            for phase in ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Suspended"):
                metrics.TRAINING_JOBS.labels(phase).set(phases.get(phase, 0))


CONTROLLER: TrainingController | None = None


def controller() -> TrainingController:
    assert CONTROLLER is not None, "the TrainingJob controller starts in the startup handler"
    return CONTROLLER


@kopf.on.startup()
async def start_training_controller(**_: Any) -> None:
    global CONTROLLER
    CONTROLLER = TrainingController(KubeApi(), status_plan)


@kopf.on.cleanup()
async def stop_training_controller(**_: Any) -> None:
    if CONTROLLER is not None:
        await CONTROLLER.stop()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def trainingjob_changed(namespace: str | None, name: str, **kwargs: Any) -> None:
    ctl = controller()
    ctl.bind(kwargs)
    ctl.queue.add((namespace or "", name))


@kopf.on.event("pods", labels={MANAGED_BY: OPERATOR, TRAINING_JOB_LABEL: kopf.PRESENT})
async def worker_pod_changed(namespace: str | None, labels: kopf.Labels, **kwargs: Any) -> None:
    ctl = controller()
    ctl.bind(kwargs)
    ctl.queue.add((namespace or "", labels[TRAINING_JOB_LABEL]))
