"""The kopf shell of the ReductionServerPool controller: reducers as a StatefulSet on CPU nodes,
sized by the pool's spec or by the TrainingJobs bound to it (reduction_lifecycle decides)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Hashable, Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from ringmaster import metrics
from ringmaster.api import (
    GROUP,
    VERSION,
    ReductionServerPoolSpec,
    ReductionServerPoolStatus,
    TrainingJobStatus,
)
from ringmaster.api.trainingjob import gang_admitted
from ringmaster.controllers.base import Controller, Key, as_body, snapshot
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.reduction_lifecycle import (
    BoundJob,
    PoolView,
    ReducerPods,
    reconcile_reduction_pool,
)
from ringmaster.manifests.naming import REDUCTION_POOL_LABEL, ROLE_LABEL

PLURAL = "reductionserverpools"
FINISHED_JOBS = ("Succeeded", "Failed")


@kopf.index(GROUP, VERSION, PLURAL)
def ringmaster_reduction_pools(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", name): snapshot(body)}


@kopf.index("pods", labels={ROLE_LABEL: "reducer", REDUCTION_POOL_LABEL: kopf.PRESENT})
def ringmaster_reducer_pods(
    name: str,
    namespace: str | None,
    labels: kopf.Labels,
    spec: kopf.Spec,
    status: kopf.Status,
    **_: Any,
) -> dict[Hashable, tuple[int, bool, bool, str | None]]:
    """(ordinal, ready, unschedulable, node) of each reducer pod, by (namespace, pool)."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready", {}).get("status") == "True"
    scheduled = conditions.get("PodScheduled", {})
    unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == (
        "Unschedulable"
    )
    ordinal = int(name.rsplit("-", 1)[-1])
    key = (namespace or "", labels[REDUCTION_POOL_LABEL])
    return {key: (ordinal, ready, unschedulable, spec.get("nodeName"))}


def reducer_gbps(machine_type: str) -> float | None:
    """One reducer's network bandwidth: its host's NIC, from the engine's catalog."""
    from ringmaster.planning import active_catalog

    try:
        return active_catalog().machine(machine_type).nic_bandwidth * 8 / 1e9
    except Exception:  # an unknown machine type: no prediction, the pool still runs
        return None


class ReductionPoolController(Controller):
    kind = "ReductionServerPool"
    plural = PLURAL
    index = "ringmaster_reduction_pools"

    def bound_jobs(self, namespace: str, pool: str) -> list[BoundJob]:
        jobs = []
        for (job_namespace, job_name), store in self.indexes["ringmaster_trainingjobs"].items():
            if job_namespace != namespace:
                continue
            for body in store:
                status = body.get("status") or {}
                if status.get("reductionServerPool") != pool:
                    continue
                if status.get("phase") in FINISHED_JOBS:
                    continue
                job_status = TrainingJobStatus.model_validate(status)
                plan = job_status.plan
                jobs.append(
                    BoundJob(
                        job_name,
                        plan.reducers_wanted if plan else None,
                        running=gang_admitted(job_status),
                    )
                )
        return jobs

    def reducer_pods(self, namespace: str, pool: str) -> ReducerPods:
        pods = list(self.indexes["ringmaster_reducer_pods"].get((namespace, pool), []))
        return ReducerPods(
            ready_ordinals=tuple(sorted(o for o, ready, _, _ in pods if ready)),
            unschedulable=sum(1 for _, _, unschedulable, _ in pods if unschedulable),
        )

    async def reconcile_object(
        self, namespace: str, name: str, body: dict[str, Any], current: dict[str, Any]
    ) -> float | None:
        status = ReductionServerPoolStatus.model_validate(current)
        generation = int(body["metadata"].get("generation", 1))
        try:
            spec = ReductionServerPoolSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            self.post(body, "Warning", "InvalidSpec", str(error)[:1000])
            return None
        jobs = self.bound_jobs(namespace, name)
        decision = reconcile_reduction_pool(
            PoolView(name, namespace, generation, spec, status),
            jobs,
            self.reducer_pods(namespace, name),
            reducer_gbps(spec.machine_type),
            dt.datetime.now(dt.UTC).replace(microsecond=0),
        )
        for obj in decision.apply:
            kopf.append_owner_reference(obj, owner=as_body(body))
            await self.api.apply(namespace, obj)
        await self.write_status(namespace, name, current, decision.status.to_k8s())
        for event in decision.events:
            self.post(body, event.type, event.reason, event.message)
        metrics.REDUCERS.labels(namespace, name, "desired").set(decision.status.replicas or 0)
        metrics.REDUCERS.labels(namespace, name, "ready").set(decision.status.ready_replicas or 0)
        return decision.requeue_after

    def forget(self, key: Key) -> None:
        for which in ("desired", "ready"):
            with contextlib.suppress(KeyError):
                metrics.REDUCERS.remove(*key, which)


CONTROLLER: ReductionPoolController | None = None


@kopf.on.startup()
async def start_reduction_pool_controller(**_: Any) -> None:
    global CONTROLLER
    CONTROLLER = ReductionPoolController(KubeApi())


@kopf.on.cleanup()
async def stop_reduction_pool_controller(**_: Any) -> None:
    if CONTROLLER is not None:
        await CONTROLLER.stop()


def _controller(kwargs: Mapping[str, Any]) -> ReductionPoolController:
    assert CONTROLLER is not None, "the ReductionServerPool controller starts at startup"
    CONTROLLER.bind(kwargs)
    return CONTROLLER


@kopf.on.event(GROUP, VERSION, PLURAL)
async def reduction_pool_changed(namespace: str | None, name: str, **kwargs: Any) -> None:
    _controller(kwargs).queue.add((namespace or "", name))


@kopf.on.event("pods", labels={ROLE_LABEL: "reducer", REDUCTION_POOL_LABEL: kopf.PRESENT})
async def reducer_pod_changed(namespace: str | None, labels: kopf.Labels, **kwargs: Any) -> None:
    _controller(kwargs).queue.add((namespace or "", labels[REDUCTION_POOL_LABEL]))


# Filtered, so kopf calls nothing for the events of jobs without reducers (most of them).
@kopf.on.event(
    GROUP, VERSION, "trainingjobs", field="status.reductionServerPool", value=kopf.PRESENT
)
async def bound_job_changed(namespace: str | None, status: kopf.Status, **kwargs: Any) -> None:
    """A job that uses a pool changed: the pool sizes itself from its jobs."""
    _controller(kwargs).queue.add((namespace or "", str(status["reductionServerPool"])))
