"""A world of simulated node pools for the TrainingJob state machine and the admission cycle,
with the loop the kopf shell runs: reconcile the job, run a cycle if it waits, hand it the
verdict, record what it holds in the snapshot. No kopf, no cluster."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from ringmaster.admission.cycle import QueueingSettings, WaitingGang, admission_cycle
from ringmaster.admission.snapshot import ClusterSnapshot, NodeFacts, PodFacts, shape
from ringmaster.api import TrainingJobSpec, TrainingJobStatus, TrainingPlan
from ringmaster.controllers.cluster_state import pod_facts
from ringmaster.controllers.training_lifecycle import reconcile_training
from ringmaster.controllers.training_step import Decision, JobView, ReducerPool, WorkerPod, World
from ringmaster.engine.hardware import DEFAULT_CATALOG, Catalog
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list
from ringmaster.manifests.reduction import REDUCER_REQUESTS
from ringmaster.placement.pools import node_from_object, parse_resources
from ringmaster.placement.topology import GKE_BLOCK, GKE_SUBBLOCK, NVLINK_CLIQUE
from ringmaster.planning.catalog import hardware_problem

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
REDUCER_REQUEST = parse_resources(REDUCER_REQUESTS)
GPU8 = shape({"nvidia.com/gpu": Decimal(8)})


def ring_planner(spec: Any, machine_type: str | None, reducers: Any = None) -> TrainingPlan:
    return TrainingPlan(
        strategy="Ring", step_seconds=0.5, bottleneck="compute", machine_type=machine_type
    )


def node_objects(sizes: Mapping[str, int]) -> list[dict[str, Any]]:
    """Ready nodes of the local cluster's pools: only the pools named."""
    counts = dict.fromkeys(POOLS_BY_NAME, 0) | dict(sizes)
    objects: list[dict[str, Any]] = node_list(counts)["items"]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return objects


def untopologised_node_objects(sizes: Mapping[str, int]) -> list[dict[str, Any]]:
    """As :func:`node_objects`, without the pools' own topology labels (blocks, sub-blocks,
    NVLink cliques): for tests that label hosts with a topology of their own."""
    objects = node_objects(sizes)
    for obj in objects:
        for key in (GKE_BLOCK, GKE_SUBBLOCK, NVLINK_CLIQUE):
            obj["metadata"]["labels"].pop(key, None)
    return objects


def nodes(sizes: Mapping[str, int]) -> list[NodeFacts]:
    return [NodeFacts.from_node(node_from_object(o)) for o in node_objects(sizes)]


def bound_pod(name: str, node: str, gpus: int = 8, namespace: str = "other") -> PodFacts:
    return PodFacts(namespace, name, shape({"nvidia.com/gpu": Decimal(gpus)}), node=node)


def spec(workers=4, per_worker=8, accelerator="nvidia-tesla-a100", topology=None, **extra):
    hardware = {"type": accelerator, "perWorker": per_worker}
    if topology:
        hardware["topology"] = topology
    body = {
        "workers": workers,
        "accelerator": hardware,
        "model": {
            "parameters": 340_000_000,
            "computeSecondsPerStep": 0.3,
            "batchSizePerAccelerator": 32,
        },
        "template": {"image": "trainer:1"},
        **extra,
    }
    return TrainingJobSpec.model_validate(body)


def job(the_spec, status=None, name="bert", created=NOW, namespace="ml") -> JobView:
    return JobView(name, namespace, 1, the_spec, status or TrainingJobStatus(), created)


def pods_of(decision: Decision, phase="Running", node="a100-highgpu-8g-0000", attempt=0):
    return [
        WorkerPod(
            o["metadata"]["name"],
            int(o["metadata"]["labels"]["ringmaster.dev/rank"]),
            attempt,
            phase,
            node,
            False,
        )
        for o in decision.create
        if o["kind"] == "Pod"
    ]


class TrainingWorld:
    def __init__(
        self,
        sizes: Mapping[str, int] | None = None,
        pods: Iterable[PodFacts] = (),
        settings: QueueingSettings | None = None,
    ) -> None:
        self.snapshot = ClusterSnapshot.rebuilt(
            REDUCER_REQUEST, nodes(sizes or {"a100-highgpu-8g": 4, "tpu-v4-2x2x4": 4}), pods
        )
        self.settings = settings or QueueingSettings()

    def decide(
        self,
        the_job: JobView,
        pods: Sequence[WorkerPod] = (),
        reducer_pools: Mapping[str, ReducerPool] | None = None,
        planner=ring_planner,
        now: dt.datetime = NOW,
        catalog: Catalog = DEFAULT_CATALOG,
    ) -> Decision:
        """One look at the job as the shell takes it: reconcile (with what ``catalog`` says of
        the job's hardware); if it waits, one cycle and a second look with the verdict; then
        record what it holds."""
        pools = reducer_pools or {}
        hw = the_job.spec.accelerator
        hardware = hardware_problem(catalog, hw.type, hw.per_worker, hw.topology)
        held = self.snapshot.promised(the_job.key)
        admission = the_job.status.admission
        problems = self.snapshot.host_problems(admission.hosts or () if admission else ())
        world = World(
            self.snapshot.pools(), pools, None, hardware, held=held, host_problems=problems
        )
        decision = reconcile_training(the_job, pods, world, now, planner)
        if decision.waiting is not None:
            verdicts = admission_cycle(self.snapshot, [decision.waiting], self.settings, now)
            verdict = next(v for v in verdicts if v.key == the_job.key)
            decision = reconcile_training(
                the_job, pods, replace(world, verdict=verdict), now, planner
            )
        if decision.promise is not None:
            self.snapshot.promise(decision.promise)
        elif decision.release:
            self.snapshot.release(the_job.key)
        return decision

    def cycle(self, gangs: Iterable[WaitingGang], now: dt.datetime = NOW):
        return admission_cycle(self.snapshot, gangs, self.settings, now)

    def create_pods(self, decision: Decision, bind_to: Sequence[str] | None = None) -> None:
        """The decision's pods appear (bound to the nodes given, or unbound)."""
        pods = [o for o in decision.create if o["kind"] == "Pod"]
        for i, obj in enumerate(pods):
            if bind_to is not None:
                obj = {**obj, "spec": {**obj["spec"], "nodeName": bind_to[i]}}
            self.snapshot.set_pod(pod_facts(obj))
