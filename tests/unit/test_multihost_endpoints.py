"""An endpoint whose replicas span hosts: one LeaderWorkerSet group per replica (its objects
from a plan), nothing without LeaderWorkerSet, and groups admitted whole."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from ringmaster.admission.cycle import CycleView, Grant, Hold, admission_pass
from ringmaster.admission.snapshot import ClusterSnapshot, shape
from ringmaster.api import InferenceEndpointSpec, find_condition
from ringmaster.controllers.cluster_state import pod_facts
from ringmaster.controllers.inference_lifecycle import reconcile_inference
from ringmaster.manifests.inference import (
    LWS_GROUP_KEY_LABEL,
    LWS_SIZE_ANNOTATION,
    ServingPlacement,
    object_name,
    server_leader_worker_set,
    workload_name,
)
from ringmaster.manifests.naming import ADMISSION_GATE
from tests.unit.test_inference_lifecycle import NOW, applied, deployment, endpoint, planner, world
from tests.unit.test_serving_admission import SETTINGS
from tests.unit.training_world import REDUCER_REQUEST, nodes

pytestmark = pytest.mark.unit
EXAMPLE = (
    Path(__file__).resolve().parents[2]
    / "examples"
    / "inferenceendpoint-llama31-405b-bf16-2x-h100.yaml"
)
H100_POOL = "h100-highgpu-8g"
GPU8 = shape({"nvidia.com/gpu": Decimal(8)})


def spec(**changes: object) -> InferenceEndpointSpec:
    body = yaml.safe_load(EXAMPLE.read_text())["spec"]
    body.update(changes)
    return InferenceEndpointSpec.model_validate(body)


def decide(s: InferenceEndpointSpec, installed: bool, group=None, deploy=None, hosts: int = 8):
    pools, used = world({H100_POOL: hosts})
    return reconcile_inference(
        endpoint(s, name="llama"),
        deploy,
        False,
        pools,
        used,
        planner,
        NOW,
        group=group,
        leader_worker_set_installed=installed,
    )


def env_of(template: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in template["spec"]["containers"][0]["env"]}


# ---------------------------------------------------------------- the objects


def test_a_two_host_replica_becomes_a_leader_worker_set_of_size_two() -> None:
    decision = decide(spec(), installed=True)
    assert applied(decision, "Deployment") is None
    lws = applied(decision, "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["replicas"] == decision.desired_replicas == 4
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    env = env_of(leader)
    assert env["RINGMASTER_TENSOR_PARALLEL"] == "8"
    assert env["RINGMASTER_PIPELINE_PARALLEL"] == "2"
    assert env["RINGMASTER_EXPERT_PARALLEL"] == "1"
    assert env["RINGMASTER_GROUP_SIZE"] == "2"
    assert env["RINGMASTER_LEADER_ADDRESS"] == "$(LWS_LEADER_ADDRESS)"
    assert env["RINGMASTER_NODE_RANK"] == "$(LWS_WORKER_INDEX)"
    # One host's share of the accelerators per pod, behind the admission gate, a host each.
    for pod in (leader, worker):
        container = pod["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert pod["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
        anti = pod["spec"]["affinity"]["podAntiAffinity"]
        [term] = anti["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
    # Readiness from the leader: the worker runs ranks and listens on no server port.
    assert "readinessProbe" in leader["spec"]["containers"][0]
    assert "readinessProbe" not in worker["spec"]["containers"][0]
    service = applied(decision, "Service")
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert decision.status.plan.layout.startswith("TP 8 inside each host x PP 2 across hosts")
    assert decision.status.plan.hosts_per_replica == 2


def test_the_hpa_scales_the_leader_worker_set_and_holds_its_count() -> None:
    s = spec(autoscaling={"enabled": True})
    decision = decide(s, installed=True)
    hpa = applied(decision, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    assert decision.hold_replicas["kind"] == "LeaderWorkerSet"


def test_without_leader_worker_set_a_multi_host_endpoint_waits_and_creates_nothing() -> None:
    decision = decide(spec(), installed=False)
    assert decision.apply == []
    ready = find_condition(decision.status.conditions, "Ready")
    assert (ready.status, ready.reason) == ("False", "LeaderWorkerSetNotInstalled")
    assert "spans 2 hosts" in ready.message
    assert [e.reason for e in decision.events] == ["LeaderWorkerSetNotInstalled"]
    assert decision.status.phase == "Pending"


def test_a_single_host_endpoint_keeps_its_deployment_with_leader_worker_set_installed() -> None:
    one_host = spec(accelerator={"type": "nvidia-h100-80gb", "perReplica": 8}, precision="FP8")
    decision = decide(one_host, True)
    assert applied(decision, "LeaderWorkerSet") is None
    assert applied(decision, "Deployment") is not None
    # The Deployment of an endpoint whose replicas come to span hosts goes away.
    moved = decide(spec(), installed=True, deploy=deployment(2))
    assert moved.delete_workload == "Deployment"


def test_replicas_across_hosts_are_placed_on_hosts_with_a_hosts_share() -> None:
    # 8 hosts of 8 H100: 4 replicas of 2 hosts fill them; the pool is chosen for 8 pods of 8.
    decision = decide(spec(), installed=True, hosts=8)
    assert decision.status.pool == H100_POOL


# ---------------------------------------------------------------- admission of whole groups


def group_pod(name: str, group: str, size: int = 2) -> dict:
    placement = ServingPlacement(
        H100_POOL, {"cloud.google.com/gke-nodepool": H100_POOL}, "nvidia.com/gpu"
    )
    lws = server_leader_worker_set("llama", "serving", spec(), placement, 1, size, {})
    template = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    labels = {**template["metadata"]["labels"], LWS_GROUP_KEY_LABEL: group}
    return {
        "metadata": {
            "name": name,
            "namespace": "serving",
            "labels": labels,
            "annotations": {LWS_SIZE_ANNOTATION: str(size)},
        },
        "spec": template["spec"],
        "status": {"phase": "Pending"},
    }


def snap(hosts: int, *pods: dict) -> ClusterSnapshot:
    return ClusterSnapshot.rebuilt(
        REDUCER_REQUEST, nodes({H100_POOL: hosts}), [pod_facts(p) for p in pods]
    )


def test_a_group_waits_whole_until_all_its_pods_are_at_the_gate() -> None:
    grants, _ = admission_pass(snap(4, group_pod("llama-0", "g0")), [], SETTINGS, NOW)
    [hold] = grants
    assert isinstance(hold, Hold)
    assert "1 of its 2 pods" in hold.message


def test_a_group_is_granted_distinct_hosts_of_one_pool_in_one_pass() -> None:
    pods = (group_pod("llama-0", "g0"), group_pod("llama-0-1", "g0"))
    grants, _ = admission_pass(snap(4, *pods), [], SETTINGS, NOW)
    assert all(isinstance(g, Grant) for g in grants)
    hosts = [g.host for g in grants]
    assert len(set(hosts)) == 2 and all(hosts)


def test_a_group_that_does_not_fit_holds_every_pod_and_takes_no_room() -> None:
    # Three hosts: the first group takes two; the second finds one and is held whole, leaving
    # that host to a later group's... nothing: no partial group ever starts.
    pods = [
        group_pod("a-0", "ga"),
        group_pod("a-0-1", "ga"),
        group_pod("b-0", "gb"),
        group_pod("b-0-1", "gb"),
    ]
    s = snap(3, *pods)
    grants, _ = admission_pass(s, [], SETTINGS, NOW)
    by_pod = {g.pod[1]: g for g in grants}
    assert isinstance(by_pod["a-0"], Grant) and isinstance(by_pod["a-0-1"], Grant)
    assert isinstance(by_pod["b-0"], Hold) and isinstance(by_pod["b-0-1"], Hold)
    assert "needs 2 hosts" in by_pod["b-0"].message and "1 of 3" in by_pod["b-0"].message
    # The held group took nothing: the room after the pass is the third host.
    view = CycleView(s)
    for g in grants:
        if isinstance(g, Grant):
            s.grant(g.pod, g.host)
    assert CycleView(s).room(H100_POOL).count(GPU8, 10, True) == 1
    del view


# ---------------------------------------------------------------- names, host shapes, pool size


@pytest.mark.parametrize("name", ["llama", "a" * 63, "llama.3-405b", "x" * 80])
def test_the_leader_worker_set_never_takes_the_endpoints_service_name(name: str) -> None:
    # LeaderWorkerSet names its headless Service after itself and skips it when one of the name
    # exists: sharing the endpoint's Service name broke either the apply or the leader address.
    lws_name = workload_name(name, "LeaderWorkerSet")
    assert lws_name != object_name(name)
    assert len(lws_name) <= 63
    assert workload_name(name) == object_name(name)  # the Deployment keeps the endpoint's name


def test_the_objects_of_a_multi_host_endpoint_carry_the_names_apart() -> None:
    decision = decide(spec(autoscaling={"enabled": True}), installed=True)
    lws, service = applied(decision, "LeaderWorkerSet"), applied(decision, "Service")
    hpa = applied(decision, "HorizontalPodAutoscaler")
    assert service["metadata"]["name"] == "llama"
    assert lws["metadata"]["name"] == "llama-group"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "llama-group"
    assert decision.hold_replicas["metadata"]["name"] == "llama-group"


def test_a_replica_no_pool_can_build_waits_unsupported_host_shape_and_creates_nothing() -> None:
    # 12 x H100 is planned as 3 hosts of 4; the only H100 pool has hosts of 8.
    twelve = spec(
        accelerator={"type": "nvidia-h100-80gb", "perReplica": 12},
        parallelism={"tensor": 4, "pipeline": 3},
    )
    decision = decide(twelve, installed=True)
    assert decision.apply == []
    ready = find_condition(decision.status.conditions, "Ready")
    assert (ready.status, ready.reason) == ("False", "UnsupportedHostShape")
    assert "3 hosts x 4 nvidia-h100-80gb" in ready.message
    assert f"{H100_POOL} 8" in ready.message
    assert decision.status.phase == "Pending"
    assert "UnsupportedHostShape" in [e.reason for e in decision.events if e.type == "Warning"]


def test_groups_the_pool_cannot_hold_show_in_the_endpoints_conditions() -> None:
    # 4 groups of 2 hosts on a pool of 2 hosts: one group runs, the conditions say 3 wait.
    decision = decide(spec(), installed=True, hosts=2)
    assert applied(decision, "LeaderWorkerSet")["spec"]["replicas"] == 4
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.reason) == ("False", "PoolTooSmall")
    assert "4 groups of 2 hosts" in schedulable.message
    assert "2 schedulable hosts, which hold 1: 3 wait" in schedulable.message
    assert "PoolTooSmall" in [e.reason for e in decision.events]
    # Room for all four: the condition says so.
    roomy = decide(spec(), installed=True, hosts=8)
    schedulable = find_condition(roomy.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.reason) == ("True", "PoolFits")


def test_a_pool_smaller_than_one_group_gets_nothing_created() -> None:
    decision = decide(spec(), installed=True, hosts=1)
    assert decision.apply == []
    ready = find_condition(decision.status.conditions, "Ready")
    assert (ready.status, ready.reason) == ("False", "PoolTooSmall")
    assert "one group needs 2 hosts of 8 x nvidia-h100-80gb" in ready.message
    assert decision.status.phase == "Pending"


def test_a_group_whose_grant_was_cut_short_is_completed_not_held_forever() -> None:
    # The operator lifted the leader's gate, then died before the worker's: the leader is bound
    # on a host; the worker alone at the gate follows onto another host.
    leader = group_pod("llama-0", "g0")
    leader["spec"]["schedulingGates"] = []
    leader["spec"]["nodeName"] = "h100-highgpu-8g-0"
    leader["status"]["phase"] = "Running"
    worker = group_pod("llama-0-1", "g0")
    s = snap(4, leader, worker)
    grants, _ = admission_pass(s, [], SETTINGS, NOW)
    [grant] = grants
    assert isinstance(grant, Grant), grant
    assert grant.pod == ("serving", "llama-0-1")
    assert grant.host and grant.host != "h100-highgpu-8g-0"
