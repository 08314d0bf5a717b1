"""The InferenceEndpoint decision on snapshots of simulated node pools, with the real engine."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from ringmaster.api import InferenceEndpointSpec, InferenceEndpointStatus, find_condition
from ringmaster.controllers.inference_lifecycle import (
    MAIN_MANAGER,
    REPLICAS_MANAGER,
    DeploymentView,
    EndpointView,
    NoPool,
    choose_pool,
    invalid_spec,
    reconcile_inference,
)
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list
from ringmaster.placement.pools import discover_pools, node_from_object, used_by_node
from ringmaster.planning import PlanError, plan_inference

pytestmark = pytest.mark.unit
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(minutes=5)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def planner(spec):
    return plan_inference(spec).to_json()


def example(name, **changes):
    body = yaml.safe_load((EXAMPLES / f"inferenceendpoint-resnet50-int8-{name}.yaml").read_text())
    spec = body["spec"]
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = spec
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return InferenceEndpointSpec.model_validate(spec)


def world(sizes=None, bound=()):
    """Nodes of the pools named (8 T4 hosts and 8 A100 8-GPU hosts by default), all Ready."""
    counts = dict.fromkeys(POOLS_BY_NAME, 0)
    counts.update(sizes or {"t4-serving": 8, "a100-highgpu-8g": 8})
    objects = node_list(counts)["items"]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    pools = discover_pools(node_from_object(o) for o in objects)
    return pools, used_by_node(bound)


def endpoint(spec, status=None, generation=1, name="resnet"):
    return EndpointView(name, "serving", generation, spec, status or InferenceEndpointStatus())


def deployment(replicas, ready=None, managers=(MAIN_MANAGER,), **extra):
    ready = replicas if ready is None else ready
    fields = dict(
        generation=1,
        observed_generation=1,
        spec_replicas=replicas,
        replicas=replicas,
        updated_replicas=replicas,
        ready_replicas=ready,
        replicas_managers=frozenset(managers),
    )
    fields.update(extra)
    return DeploymentView(**fields)


def decide(spec, status=None, deploy=None, hpa=False, sizes=None, generation=1, now=NOW):
    pools, used = world(sizes)
    return reconcile_inference(
        endpoint(spec, status, generation), deploy, hpa, pools, used, planner, now
    )


def applied(decision, kind):
    return next((o for o in decision.apply if o["kind"] == kind), None)


def condition(decision, type_):
    return find_condition(decision.status.conditions, type_)


def reasons(decision):
    return [e.reason for e in decision.events]


def message(decision, reason):
    return next(e.message for e in decision.events if e.reason == reason)


# ---------------------------------------------------------------- sizing from the engine


def test_a_new_endpoint_gets_the_engines_count_on_its_pool_with_the_plan_in_status():
    spec = example("t4")
    engine = planner(spec)
    decision = decide(spec)

    deployment_obj = applied(decision, "Deployment")
    assert deployment_obj["spec"]["replicas"] == engine["replicas"] == 2
    pod = deployment_obj["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "t4-serving"}
    assert applied(decision, "Service")["spec"]["type"] == "ClusterIP"
    assert applied(decision, "HorizontalPodAutoscaler") is None
    status = decision.status
    assert (status.replicas, status.ready_replicas, status.pool) == (2, 0, "t4-serving")
    assert status.url == "http://resnet.serving.svc.cluster.local:8000"
    assert status.selector == "ringmaster.dev/inferenceendpoint=resnet,ringmaster.dev/role=server"
    assert status.plan.batch_size == engine["batchSize"]
    assert status.plan.per_replica_requests_per_second == engine["perReplicaRequestsPerSecond"]
    assert status.plan.capacity_requests_per_second == pytest.approx(
        2 * engine["perReplicaRequestsPerSecond"], rel=1e-5
    )
    assert status.plan.latency_p99_milliseconds == engine["p99LatencyMilliseconds"]
    assert status.plan.cost_per_hour_usd == engine["costPerHourUSD"]
    assert status.plan.bottleneck.startswith("compute")
    assert status.plan.replicas == engine["replicasNeeded"] == 1  # minReplicas asks for more
    assert status.phase == "Pending"
    assert condition(decision, "Ready").reason == "Creating"
    capacity = condition(decision, "CapacityMet")
    assert (capacity.status, capacity.reason, capacity.observed_generation) == (
        "True",
        "TargetMet",
        1,
    )
    assert reasons(decision) == ["PoolSelected", "Scaled"]
    assert "minReplicas" in message(decision, "Scaled")


def test_ready_replicas_make_it_ready_and_a_second_look_changes_nothing():
    spec = example("t4")
    first = decide(spec)
    progressing = decide(spec, first.status, deployment(2, ready=1))
    assert progressing.status.phase == "Progressing"
    assert condition(progressing, "Ready").message == "1/2 replicas ready"
    assert progressing.events == []

    ready = decide(spec, progressing.status, deployment(2), now=LATER)
    assert ready.status.phase == "Ready" and ready.status.ready_replicas == 2
    assert (condition(ready, "Ready").status, condition(ready, "Ready").reason) == (
        "True",
        "ReplicasReady",
    )
    assert condition(ready, "Ready").last_transition_time == LATER
    assert reasons(ready) == ["Ready"]

    again = decide(spec, ready.status, deployment(2), now=LATER + dt.timedelta(hours=1))
    assert again.status.to_k8s() == ready.status.to_k8s()  # no status write
    assert again.events == []  # no repeated Events
    assert again.apply == ready.apply  # the same objects: the apply is a no-op


def test_raising_the_target_scales_out_and_lowering_it_scales_in_with_an_event_each():
    low = example("t4")
    base = decide(low, deploy=None)
    ready = decide(low, base.status, deployment(2))

    high = example("t4", slo__targetRequestsPerSecond=16000)
    out = decide(high, ready.status, deployment(2), generation=2)
    assert out.desired_replicas == planner(high)["replicas"] == 3
    assert applied(out, "Deployment")["spec"]["replicas"] == 3
    assert out.status.phase == "Progressing"  # the Deployment has not acted yet
    assert reasons(out) == ["Scaled"]
    assert message(out, "Scaled").startswith("scaled from 2 to 3 replicas: the engine needs 3 x")

    scaled = decide(high, out.status, deployment(3), generation=2)
    back = decide(low, scaled.status, deployment(3), generation=3)
    assert back.desired_replicas == 2
    assert reasons(back) == ["Scaled"] and "from 3 to 2" in message(back, "Scaled")
    # Scaling in keeps it Ready: the remaining replicas were ready all along.
    assert back.status.phase == "Ready"


def test_the_pod_template_does_not_depend_on_the_target_or_precision():
    """So a new target or precision changes the count and restarts no serving pod."""
    templates = [
        applied(decide(s), "Deployment")["spec"]["template"]
        for s in (
            example("t4"),
            example("t4", slo__targetRequestsPerSecond=16000),
            example("t4", precision="FP16"),
        )
    ]
    assert templates[0] == templates[1] == templates[2]


def test_fp16_needs_more_replicas_than_int8_for_the_same_target():
    int8 = decide(example("t4", slo__targetRequestsPerSecond=8000))
    fp16 = decide(example("t4", precision="FP16", slo__targetRequestsPerSecond=8000))
    assert int8.desired_replicas == 2
    assert fp16.desired_replicas == 3
    assert (
        fp16.status.plan.per_replica_requests_per_second
        < int8.status.plan.per_replica_requests_per_second
    )


def test_an_impossible_latency_still_serves_and_says_so_once():
    spec = example("t4", slo__latencyP99Milliseconds=0.3)
    decision = decide(spec)
    assert decision.desired_replicas == 2  # minReplicas: serve what it can
    assert applied(decision, "Deployment")["spec"]["replicas"] == 2
    capacity = condition(decision, "CapacityMet")
    assert (capacity.status, capacity.reason) == ("False", "LatencyTargetUnreachable")
    assert "0.3 ms" in capacity.message and "0.623 ms" in capacity.message
    assert decision.status.phase == "Degraded"
    assert "CapacityNotMet" in reasons(decision)

    ready = decide(spec, decision.status, deployment(2))
    assert ready.status.phase == "Degraded"  # all replicas ready, but the SLO is out of reach
    assert condition(ready, "Ready").status == "True"
    assert "CapacityNotMet" not in reasons(ready)


def test_too_few_max_replicas_gives_the_numbers():
    spec = example("t4", slo__targetRequestsPerSecond=60000)
    decision = decide(spec)
    assert decision.desired_replicas == 8  # maxReplicas
    capacity = condition(decision, "CapacityMet")
    assert (capacity.status, capacity.reason) == ("False", "TooFewReplicas")
    assert "maxReplicas 8 x 5,551 req/s = 44,407 req/s" in capacity.message
    assert "below the target 60,000 req/s (11 needed)" in capacity.message
    assert "maxReplicas; the engine needs 11" in message(decision, "Scaled")


def test_capacity_coming_back_is_reported_once():
    short = decide(example("t4", slo__targetRequestsPerSecond=60000))
    met = decide(example("t4", slo__targetRequestsPerSecond=8000), short.status, deployment(8))
    assert condition(met, "CapacityMet").status == "True"
    assert "CapacityMet" in reasons(met)


def test_spec_replicas_overrides_the_engine_and_the_figures_follow_it():
    spec = example("t4", replicas=3, slo__targetRequestsPerSecond=20000)
    decision = decide(spec)
    assert decision.desired_replicas == 3
    assert applied(decision, "Deployment")["spec"]["replicas"] == 3
    assert decision.status.plan.replicas == 4  # what the engine would ask for
    rate = decision.status.plan.per_replica_requests_per_second
    assert decision.status.plan.capacity_requests_per_second == pytest.approx(3 * rate, rel=1e-5)
    assert condition(decision, "CapacityMet").reason == "TooFewReplicas"
    assert message(decision, "Scaled") == "3 replicas: spec.replicas"


def test_a_stuck_rollout_is_degraded():
    spec = example("t4")
    stuck = decide(spec, deploy=deployment(2, ready=1, progress_deadline_exceeded=True))
    assert stuck.status.phase == "Degraded"
    assert condition(stuck, "Ready").reason == "ProgressDeadlineExceeded"


def test_a_template_rollout_is_not_ready_until_the_new_pods_are():
    spec = example("t4")
    rolling = decide(spec, deploy=deployment(2, updated_replicas=1, generation=2))
    assert condition(rolling, "Ready").status == "False"
    assert rolling.status.phase == "Progressing"


# ---------------------------------------------------------------- the HPA and the scale subresource


def test_autoscaling_creates_an_hpa_and_hands_it_the_count():
    spec = example("a100")
    created = decide(spec)
    engine = planner(spec)
    assert created.desired_replicas == engine["replicas"] == 1
    # First apply: the count is set, and held by the second manager for the hand-over.
    assert applied(created, "Deployment")["spec"]["replicas"] == 1
    assert created.hold_replicas["spec"] == {"replicas": 1}
    hpa = applied(created, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 6)
    pods_metric = hpa["spec"]["metrics"][0]["pods"]
    assert pods_metric["target"]["averageValue"] == str(int(engine["perReplicaRequestsPerSecond"]))

    held = decide(spec, created.status, deployment(1, managers=(MAIN_MANAGER, REPLICAS_MANAGER)))
    assert "replicas" not in applied(held, "Deployment")["spec"]  # never fought over
    assert held.hold_replicas is None
    assert held.status.phase == "Ready"


def test_the_hpas_count_becomes_status_replicas():
    spec = example("a100")
    created = decide(spec)
    scaled = decide(
        spec, created.status, deployment(3, managers=(REPLICAS_MANAGER, "kube-controller-manager"))
    )
    assert scaled.status.replicas == 3
    assert "replicas" not in applied(scaled, "Deployment")["spec"]
    assert message(scaled, "Scaled") == (
        "scaled from 1 to 3 replicas: set by the HorizontalPodAutoscaler"
    )
    rate = scaled.status.plan.per_replica_requests_per_second
    assert scaled.status.plan.capacity_requests_per_second == pytest.approx(3 * rate, rel=1e-5)


def test_turning_autoscaling_on_starts_the_hpa_from_what_runs():
    spec = example("a100", autoscaling={"enabled": True})
    decision = decide(spec, deploy=deployment(4))  # the operator alone owned the count
    assert decision.desired_replicas == 4
    assert applied(decision, "Deployment")["spec"]["replicas"] == 4
    assert decision.hold_replicas["spec"] == {"replicas": 4}


def test_turning_autoscaling_off_deletes_the_hpa_and_takes_the_count_back():
    spec = example("a100", autoscaling={"enabled": False})
    decision = decide(
        spec, deploy=deployment(4, managers=(REPLICAS_MANAGER, "kube-controller-manager")), hpa=True
    )
    assert decision.delete_autoscaler
    assert decision.hold_replicas is None
    assert applied(decision, "Deployment")["spec"]["replicas"] == decision.desired_replicas == 1
    assert applied(decision, "HorizontalPodAutoscaler") is None
    assert not decide(spec).delete_autoscaler  # nothing to delete when there is none


# ---------------------------------------------------------------- pools


def test_an_endpoint_waits_without_a_pool_of_its_accelerator():
    spec = example("t4")
    decision = decide(spec, sizes={"a100-highgpu-8g": 2})
    assert decision.apply == []
    assert decision.status.phase == "Pending"
    ready = condition(decision, "Ready")
    assert (ready.status, ready.reason) == ("False", "NoMatchingPool")
    assert "nvidia-tesla-a100" in ready.message  # what the cluster does have
    assert reasons(decision) == ["NoMatchingPool"]
    assert decide(spec, decision.status, sizes={"a100-highgpu-8g": 2}).events == []


def test_replicas_bigger_than_the_hosts_have_no_pool():
    pools, used = world()
    spec = example("t4", accelerator={"type": "nvidia-tesla-t4", "perReplica": 2})
    result = choose_pool(spec, pools, used, 1)
    assert isinstance(result, NoPool) and "at most 1 each" in result.message


def test_a100_replicas_go_where_they_fit_and_stay_on_their_pool():
    sizes = {"a100-highgpu-8g": 1, "a100-megagpu-16g": 1}
    pools, _ = world(sizes)
    spec = example("a100")
    assert choose_pool(spec, pools, {}, 4).name == "a100-highgpu-8g"
    full = {"a100-highgpu-8g-0000": {"nvidia.com/gpu": 8}}
    assert choose_pool(spec, pools, full, 4).name == "a100-megagpu-16g"
    assert choose_pool(spec, pools, {}, 4, current="a100-megagpu-16g").name == "a100-megagpu-16g"


def test_tpu_replicas_get_the_tpu_resource_and_toleration():
    spec = InferenceEndpointSpec.model_validate(
        {
            "accelerator": {"type": "tpu-v4-podslice", "perReplica": 4},
            "model": {"parameters": "25.6M", "flopsPerRequest": "8.2G"},
            "precision": "FP16",
            "slo": {"targetRequestsPerSecond": 1000, "latencyP99Milliseconds": 50},
            "template": {"image": "serving:1"},
        }
    )
    decision = decide(spec, sizes={"tpu-v4-2x2x4": 4})
    pod = applied(decision, "Deployment")["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}
    assert pod["tolerations"][0]["key"] == "google.com/tpu"
    assert decision.status.pool == "tpu-v4-2x2x4"


# ---------------------------------------------------------------- failures and parsing


def test_a_spec_the_engine_cannot_plan_fails_with_the_engines_words():
    def refusing(spec):
        raise PlanError("spec.accelerator.type: unknown accelerator")

    pools, used = world()
    decision = reconcile_inference(endpoint(example("t4")), None, False, pools, used, refusing, NOW)
    assert decision.apply == []
    assert decision.status.phase == "Failed"
    ready = condition(decision, "Ready")
    assert (ready.reason, ready.message) == (
        "PlanFailed",
        "spec.accelerator.type: unknown accelerator",
    )
    assert reasons(decision) == ["PlanFailed"]


def test_an_accelerator_the_catalog_lacks_waits_with_unknown_accelerator_and_applies_nothing():
    def must_not_plan(spec):
        raise AssertionError("no plan for hardware the catalog lacks")

    pools, used = world()
    problem = ("UnknownAccelerator", "accelerator nvidia-l4 is not in the operator's catalog")
    args = (pools, used, must_not_plan, NOW, problem)
    decision = reconcile_inference(endpoint(example("t4")), None, False, *args)
    assert decision.apply == [] and decision.status.phase == "Pending"
    ready = condition(decision, "Ready")
    assert (ready.status, ready.reason) == ("False", "UnknownAccelerator")
    assert reasons(decision) == ["UnknownAccelerator"]
    again = reconcile_inference(endpoint(example("t4"), decision.status), None, False, *args)
    assert again.events == []  # said once


def test_an_invalid_spec_fails_once():
    first = invalid_spec(InferenceEndpointStatus(), 2, "spec.slo: Field required", NOW)
    assert first.status.phase == "Failed" and first.status.observed_generation == 2
    assert reasons(first) == ["InvalidSpec"]
    assert invalid_spec(first.status, 2, "spec.slo: Field required", LATER).events == []


def test_deployment_view_reads_status_and_the_owners_of_the_count():
    view = DeploymentView.from_object(
        {
            "metadata": {
                "generation": 3,
                "managedFields": [
                    {"manager": "ringmaster", "fieldsV1": {"f:spec": {"f:template": {}}}},
                    {
                        "manager": "kube-controller-manager",
                        "subresource": "scale",
                        "fieldsV1": {"f:spec": {"f:replicas": {}}},
                    },
                ],
            },
            "spec": {"replicas": 5},
            "status": {
                "observedGeneration": 3,
                "replicas": 5,
                "updatedReplicas": 5,
                "readyReplicas": 4,
                "conditions": [
                    {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
                ],
            },
        }
    )
    assert view.replicas_managers == {"kube-controller-manager"}
    assert (view.generation, view.spec_replicas, view.ready_replicas) == (3, 5, 4)
    assert view.progress_deadline_exceeded
    assert not view.serves(5) and view.serves(4)
