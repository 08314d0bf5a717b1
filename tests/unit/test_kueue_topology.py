"""Issue 43 through Kueue: a TrainingJob's topology verdict (spec.placement.topology, Auto resolved
from the plan) becomes its worker pod set's Topology Aware Scheduling request, as Kueue v0.19.2's
integrations write one (apis/kueue/v1beta2/topology_types.go, jobframework/tas.go): the pod
template annotation and the pod set's ``topologyRequest``; only for levels a TAS flavor of the
job's pools has (a request on a flavor without a topology is never admitted)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ringmaster.admission import kueue
from ringmaster.admission.kueue import Flavor, TopologyRequest, tas_levels, topology_request
from ringmaster.admission.snapshot import ClusterSnapshot, NodeFacts
from ringmaster.api import TrainingJobStatus, TrainingPlan
from ringmaster.api.trainingjob import PlacementPlan, PlacementStep
from ringmaster.controllers.training_lifecycle import reconcile_training
from ringmaster.controllers.training_step import Decision, JobView, KueueWorld, World
from ringmaster.placement.pools import node_from_object
from ringmaster.placement.topology import GKE_BLOCK, NVLINK_CLIQUE
from tests.unit.training_world import NOW, REDUCER_REQUEST, node_objects, ring_planner, spec

pytestmark = pytest.mark.unit

UID = "6f1c0d2e-0000-4000-8000-000000000043"
A100 = "a100-highgpu-8g"
NODEPOOL = "cloud.google.com/gke-nodepool"
HOSTNAME = "kubernetes.io/hostname"
TAS_FLAVOR = {"a100-tas": Flavor({NODEPOOL: A100}, (), "gke-blocks")}
TOPOLOGIES = {"gke-blocks": (GKE_BLOCK, HOSTNAME)}


# ---------------------------------------------------------------- the pure part


def test_the_annotations_and_the_workload_field_are_kueues() -> None:
    required = TopologyRequest(required=GKE_BLOCK)
    assert required.annotations() == {"kueue.x-k8s.io/podset-required-topology": GKE_BLOCK}
    assert required.to_workload() == {"required": GKE_BLOCK}
    sliced = TopologyRequest(preferred=GKE_BLOCK, slice_level=NVLINK_CLIQUE, slice_size=2)
    assert sliced.annotations() == {
        "kueue.x-k8s.io/podset-preferred-topology": GKE_BLOCK,
        "kueue.x-k8s.io/podset-slice-required-topology": NVLINK_CLIQUE,
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    assert sliced.to_workload() == {
        "preferred": GKE_BLOCK,
        "podSetSliceRequiredTopology": NVLINK_CLIQUE,
        "podSetSliceSize": 2,
    }


def test_the_request_names_only_levels_kueue_has() -> None:
    levels = (GKE_BLOCK, NVLINK_CLIQUE)
    every = {GKE_BLOCK, NVLINK_CLIQUE, HOSTNAME}
    assert topology_request(levels, "Required", "Preferred", 1, every, NVLINK_CLIQUE) == (
        TopologyRequest(required=GKE_BLOCK)
    )
    assert topology_request(levels, "Preferred", "Required", 2, every, NVLINK_CLIQUE) == (
        TopologyRequest(preferred=GKE_BLOCK, slice_level=NVLINK_CLIQUE, slice_size=2)
    )
    # No group over trays: the clique's requirement asks nothing.
    assert topology_request(levels, "Preferred", "Required", 1, every, NVLINK_CLIQUE) == (
        TopologyRequest(preferred=GKE_BLOCK)
    )
    # A Topology without the clique level: only the block.
    assert topology_request(levels, "Required", "Required", 2, {GKE_BLOCK}, NVLINK_CLIQUE) == (
        TopologyRequest(required=GKE_BLOCK)
    )
    # A clique-only pool: the slice alone.
    assert topology_request((NVLINK_CLIQUE,), "Required", "Required", 2, every, NVLINK_CLIQUE) == (
        TopologyRequest(slice_level=NVLINK_CLIQUE, slice_size=2)
    )
    assert topology_request(levels, "Required", "Required", 2, set(), NVLINK_CLIQUE) is None
    assert topology_request((), "Required", "Required", 2, every, NVLINK_CLIQUE) is None


def test_tas_levels_come_from_the_topologies_of_the_flavors_that_select_the_pools() -> None:
    flavors = {
        **TAS_FLAVOR,
        "other-pool": Flavor({NODEPOOL: "h100"}, (), "racks"),
        "plain": Flavor({NODEPOOL: A100}),
    }
    topologies = {**TOPOLOGIES, "racks": ("rack",)}
    assert tas_levels([{NODEPOOL: A100}], flavors, topologies) == {GKE_BLOCK, HOSTNAME}
    assert tas_levels([{NODEPOOL: A100}], {"plain": Flavor({NODEPOOL: A100})}, topologies) == set()
    # A flavor whose Topology the operator has not seen asks nothing.
    assert tas_levels([{NODEPOOL: A100}], TAS_FLAVOR, {}) == set()


def test_kueue_objects_are_read() -> None:
    flavor = Flavor.from_object(
        {"spec": {"nodeLabels": {NODEPOOL: A100}, "topologyName": "gke-blocks"}}
    )
    assert flavor.topology_name == "gke-blocks"
    assert Flavor.from_object({"spec": {}}).topology_name is None
    body = {"spec": {"levels": [{"nodeLabel": GKE_BLOCK}, {"nodeLabel": HOSTNAME}]}}
    assert kueue.topology_levels(body) == (GKE_BLOCK, HOSTNAME)


# ---------------------------------------------------------------- through the state machine


def blocked_pools() -> dict[str, Any]:
    """The A100 pool with its four hosts in two GKE blocks."""
    objects = node_objects({A100: 4})
    for i, obj in enumerate(objects):
        obj["metadata"]["labels"][GKE_BLOCK] = f"b{i // 2}"
    facts = [NodeFacts.from_node(node_from_object(o)) for o in objects]
    return ClusterSnapshot.rebuilt(REDUCER_REQUEST, facts, []).pools()


def labelled_job(**extra: Any) -> JobView:
    return JobView(
        "bert",
        "ml",
        1,
        spec(**extra),
        TrainingJobStatus(),
        NOW,
        uid=UID,
        labels={kueue.QUEUE_NAME_LABEL: "team-a"},
    )


def decide(
    job: JobView,
    planner=ring_planner,
    flavors: dict[str, Flavor] = TAS_FLAVOR,
    workloads: list[dict[str, Any]] | None = None,
) -> Decision:
    the_kueue = KueueWorld(
        workloads=workloads or [],
        flavors=flavors,
        pool_labels=lambda pool: {NODEPOOL: pool},
        topologies=TOPOLOGIES,
    )
    world = World(blocked_pools(), {}, kueue=the_kueue)
    return reconcile_training(job, [], world, NOW, planner)


def workers_of(decision: Decision) -> dict[str, Any]:
    [write] = [w for w in decision.workload if w.action in ("create", "patch")]
    body = copy.deepcopy(dict(write.body or {}))
    return next(s for s in body["spec"]["podSets"] if s["name"] == "workers")


def engine_requires_a_block(the_spec: Any, machine_type: str | None, reducers: Any = None):
    """A plan whose placement figures make Auto require a block (a 2:1 spine, say)."""
    return TrainingPlan(
        strategy="Ring",
        step_seconds=2.04,
        bottleneck="network",
        machine_type=machine_type,
        placement=PlacementPlan(
            steps=[
                PlacementStep(placement="Packed", step_seconds=2.04, loss_percent=0.0),
                PlacementStep(placement="Spread", step_seconds=2.41, loss_percent=18.1),
            ],
            spine_oversubscription=2.0,
            loss_threshold_percent=5.0,
            block="Required",
        ),
    )


def test_auto_required_by_the_engine_asks_kueue_for_one_block() -> None:
    workers = workers_of(decide(labelled_job(), planner=engine_requires_a_block))
    assert workers["topologyRequest"] == {"required": GKE_BLOCK}
    annotations = workers["template"]["metadata"]["annotations"]
    assert annotations[kueue.PODSET_REQUIRED_TOPOLOGY] == GKE_BLOCK


def test_auto_without_a_loss_and_preferred_ask_kueue_to_prefer_a_block() -> None:
    assert workers_of(decide(labelled_job()))["topologyRequest"] == {"preferred": GKE_BLOCK}
    preferred = labelled_job(placement={"topology": "Preferred"})
    workers = workers_of(decide(preferred, planner=engine_requires_a_block))
    assert workers["topologyRequest"] == {"preferred": GKE_BLOCK}
    annotations = workers["template"]["metadata"]["annotations"]
    assert annotations[kueue.PODSET_PREFERRED_TOPOLOGY] == GKE_BLOCK
    assert kueue.PODSET_REQUIRED_TOPOLOGY not in annotations
    required = labelled_job(placement={"topology": "Required"})
    assert workers_of(decide(required))["topologyRequest"] == {"required": GKE_BLOCK}


def test_no_request_without_a_tas_flavor_for_the_pool() -> None:
    plain = {"a100": Flavor({NODEPOOL: A100})}
    workers = workers_of(decide(labelled_job(), planner=engine_requires_a_block, flavors=plain))
    assert "topologyRequest" not in workers
    assert kueue.PODSET_REQUIRED_TOPOLOGY not in (
        workers["template"].get("metadata", {}).get("annotations", {})
    )


def test_a_changed_verdict_is_patched_into_a_workload_kueue_has_not_admitted() -> None:
    created = decide(labelled_job())
    [write] = [w for w in created.workload if w.action == "create"]
    body = copy.deepcopy(dict(write.body or {}))
    body["metadata"]["ownerReferences"] = [
        {"kind": "TrainingJob", "name": "bert", "uid": UID, "controller": True}
    ]
    body["metadata"].update(resourceVersion="7", generation=1)
    body["status"] = {}
    again = decide(labelled_job(), planner=engine_requires_a_block, workloads=[body])
    [patch] = [w for w in again.workload if w.action == "patch"]
    [workers] = [s for s in (patch.body or {})["spec"]["podSets"] if s["name"] == "workers"]
    assert workers["topologyRequest"] == {"required": GKE_BLOCK}


# ---------------------------------------------------------------- Kueue's topology assignment


def test_a_compressed_assignment_gives_each_rank_its_domain_in_order() -> None:
    # v1beta2's slices: a prefix and roots per host, pod counts per domain (rankToDomainID).
    assignment = {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"individual": {"prefix": "a100-highgpu-8g-000", "roots": ["3", "2"]}}
                ],
                "podCounts": {"individual": [1, 2]},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "a100-highgpu-8g-0000"}],
                "podCounts": {"universal": 1},
            },
        ],
    }
    hosts = [d[HOSTNAME] for d in kueue.rank_domains(assignment)]
    assert hosts == [
        "a100-highgpu-8g-0003",
        "a100-highgpu-8g-0002",
        "a100-highgpu-8g-0002",
        "a100-highgpu-8g-0000",
    ]
    # v1beta1's domains, two levels.
    older = {
        "levels": [GKE_BLOCK, HOSTNAME],
        "domains": [{"values": ["b1", "h3"], "count": 2}, {"values": ["b1", "h2"], "count": 1}],
    }
    assert kueue.rank_domains(older) == (
        {GKE_BLOCK: "b1", HOSTNAME: "h3"},
        {GKE_BLOCK: "b1", HOSTNAME: "h3"},
        {GKE_BLOCK: "b1", HOSTNAME: "h2"},
    )


def test_ranks_map_to_their_pod_set() -> None:
    assert kueue.pod_set_of_rank(4, 1, 3) == ("workers", 3)
    assert kueue.pod_set_of_rank(8, 2, 5) == ("slice-1", 1)
    with pytest.raises(ValueError, match="past"):
        kueue.pod_set_of_rank(4, 1, 4)


def admitted_by_topology(workload: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    """The Workload admitted on the TAS flavor, Kueue's topology assignment naming ``hosts``."""
    body = copy.deepcopy(workload)
    body["metadata"]["ownerReferences"] = [
        {"kind": "TrainingJob", "name": "bert", "uid": UID, "controller": True}
    ]
    body["metadata"].update(resourceVersion="9", generation=1)
    assignment = {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": len(hosts),
                "valuesPerLevel": [{"individual": {"roots": hosts}}],
                "podCounts": {"universal": 1},
            }
        ],
    }
    now = "2026-11-27T01:00:00Z"
    body["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": "tas",
            "podSetAssignments": [
                {
                    "name": "workers",
                    "flavors": {"nvidia.com/gpu": "a100-tas"},
                    "count": len(hosts),
                    "topologyAssignment": assignment,
                }
            ],
        },
    }
    return body


def test_each_worker_goes_to_the_host_kueue_assigned_it_and_is_kueues_tas_pod() -> None:
    # Without the assignment kube-scheduler may bind the gang on other hosts of the pool than
    # Kueue counted; Kueue then counts the pods again (as non-TAS pods) and holds the next job.
    created = decide(labelled_job())
    [write] = [w for w in created.workload if w.action == "create"]
    hosts = [f"{A100}-0003", f"{A100}-0001", f"{A100}-0002", f"{A100}-0000"]
    workload = admitted_by_topology(dict(write.body or {}), hosts)
    decision = decide(labelled_job(), workloads=[workload])
    pods = sorted(
        (o for o in decision.create if o["kind"] == "Pod"),
        key=lambda p: int(p["metadata"]["labels"]["ringmaster.dev/rank"]),
    )
    assert [p["spec"]["nodeSelector"] for p in pods] == [
        {NODEPOOL: A100, HOSTNAME: host} for host in hosts
    ]
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert annotations[kueue.PODSET_PREFERRED_TOPOLOGY] == GKE_BLOCK  # the job's request
        assert kueue.PODSET_UNCONSTRAINED_TOPOLOGY not in annotations


def test_a_pod_set_placed_by_topology_without_a_request_is_unconstrained() -> None:
    workload = admitted_by_topology(
        {"metadata": {"name": "w"}, "spec": {"podSets": [{"name": "workers"}]}}, ["h0"]
    )
    view = kueue.read_workload(workload)
    assert kueue.tas_pod_annotations(view, "workers") == {
        kueue.PODSET_UNCONSTRAINED_TOPOLOGY: "true"
    }
    del workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert kueue.tas_pod_annotations(kueue.read_workload(workload), "workers") == {}
