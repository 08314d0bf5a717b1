"""A disaggregated InferenceEndpoint in the controller's pure decision: two side workloads with
their role labels and the KV connector's env, the Service in front of decode, what ran before
deleted, both sides in status and readiness; and its InferencePools (spec.routing)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import InferenceEndpointSpec, InferenceEndpointStatus, find_condition
from ringmaster.api.manifest import parse_manifest
from ringmaster.controllers.inference_lifecycle import (
    DeploymentView,
    EndpointView,
    reconcile_inference,
)
from ringmaster.controllers.inference_routing import InferenceExtension
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list
from ringmaster.manifests.disaggregated import (
    KV_TRANSFER_CONFIG_ENV,
    LLM_D_ROLE_LABEL,
    ROLE_ENV,
    SGLANG_BACKEND_ENV,
    kv_transfer_config,
)
from ringmaster.manifests.inference import TENSOR_PARALLEL_ENV
from ringmaster.placement.pools import discover_pools, node_from_object
from ringmaster.planning import plan_inference

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "inferenceendpoint-llama3-70b-disaggregated-h100.yaml"
NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
BOTH = InferenceExtension(pools=True, objectives=True)


def spec(**changes: Any) -> InferenceEndpointSpec:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].update(copy.deepcopy(changes))
    return parse_manifest(doc).spec  # type: ignore[return-value]


def pools(h100_hosts: int = 8) -> dict[str, Any]:
    counts = dict.fromkeys(POOLS_BY_NAME, 0)
    counts["h100-highgpu-8g"] = h100_hosts
    objects = node_list(counts)["items"]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return discover_pools(node_from_object(o) for o in objects)


def decide(
    s: InferenceEndpointSpec,
    status: InferenceEndpointStatus | None = None,
    extension: InferenceExtension = BOTH,
    **kwargs: Any,
):  # type: ignore[no-untyped-def]
    return reconcile_inference(
        EndpointView("llama", "serving", 1, s, status or InferenceEndpointStatus()),
        kwargs.pop("deployment", None),
        kwargs.pop("autoscaler_present", False),
        world if (world := kwargs.pop("world", None)) is not None else pools(),
        {},
        lambda x: plan_inference(x).to_json(),
        NOW,
        inference_extension=extension,
        **kwargs,
    )


def by_kind(decision: Any, kind: str) -> list[dict[str, Any]]:
    return [o for o in decision.apply if o["kind"] == kind]


def env_of(workload: dict[str, Any]) -> dict[str, str]:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_the_example_runs_as_two_sides_with_roles_and_the_connector_env() -> None:
    decision = decide(spec())
    plan = plan_inference(spec()).to_json()["disaggregation"]
    assert plan["chosen"] == "Disaggregated"
    deployments = {d["metadata"]["name"]: d for d in by_kind(decision, "Deployment")}
    assert set(deployments) == {"llama-prefill", "llama-decode"}
    for side in ("prefill", "decode"):
        d = deployments[f"llama-{side}"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert labels[LLM_D_ROLE_LABEL] == side
        assert d["spec"]["selector"]["matchLabels"][LLM_D_ROLE_LABEL] == side
        assert d["spec"]["replicas"] == plan[side]["replicas"]
        env = env_of(d)
        assert env[ROLE_ENV] == side and env[SGLANG_BACKEND_ENV] == "nixl"
        assert json.loads(env[KV_TRANSFER_CONFIG_ENV]) == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
        }
        assert env[TENSOR_PARALLEL_ENV] == str(plan[side]["tensorParallel"])
        gpus = d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert gpus["nvidia.com/gpu"] == str(plan[side]["perReplica"])
    (service,) = by_kind(decision, "Service")
    assert service["spec"]["selector"][LLM_D_ROLE_LABEL] == "decode"
    status = decision.status
    assert status.sides is not None and status.sides.prefill is not None
    assert status.sides.prefill.replicas == plan["prefill"]["replicas"]
    assert status.replicas == plan["prefill"]["replicas"] + plan["decode"]["replicas"]
    assert status.plan is not None and status.plan.disaggregation is not None
    assert status.plan.disaggregation.kv_transfer is not None
    # each side says what its step rests on, as an aggregated plan does
    for side in (status.plan.disaggregation.prefill, status.plan.disaggregation.decode):
        assert side is not None and side.evidence and "constants fitted on" in side.evidence
    # kubectl get ie's columns: the endpoint as it runs (the narrower side's capacity).
    capacity = min(
        plan[s]["replicas"] * plan[s]["perReplicaRequestsPerSecond"]
        for s in plan
        if s in ("prefill", "decode")
    )
    assert status.plan.capacity_requests_per_second == pytest.approx(capacity, rel=1e-5)
    assert status.plan.output_tokens_per_second == pytest.approx(capacity * 200, rel=1e-5)
    assert status.plan.ttft_p99_milliseconds == plan["ttftP99Milliseconds"]
    assert status.plan.tpot_p99_milliseconds == plan["tpotP99Milliseconds"]
    assert capacity >= 4.0  # the SLO's 4 req/s
    capacity = find_condition(status.conditions, "CapacityMet")
    assert capacity is not None and capacity.status == "True"
    assert "KV transfer" in capacity.message and "prefill" in capacity.message
    ready = find_condition(status.conditions, "Ready")
    assert ready is not None and ready.reason == "Creating"


def test_mooncake_gives_producer_and_consumer_roles() -> None:
    assert json.loads(kv_transfer_config("Mooncake", "prefill"))["kv_role"] == "kv_producer"
    assert json.loads(kv_transfer_config("Mooncake", "decode"))["kv_role"] == "kv_consumer"
    decision = decide(spec(disaggregation={"mode": "Disaggregated", "transferBackend": "Mooncake"}))
    envs = {d["metadata"]["name"]: env_of(d) for d in by_kind(decision, "Deployment")}
    assert envs["llama-decode"][SGLANG_BACKEND_ENV] == "mooncake"


def _view(name: str, replicas: int) -> DeploymentView:
    return DeploymentView(2, 2, replicas, replicas, replicas, replicas, name=name)


def test_both_sides_ready_make_the_endpoint_ready_and_the_aggregated_deployment_goes() -> None:
    plan = plan_inference(spec()).to_json()["disaggregation"]
    sides = {
        f"llama-{side}": _view(f"llama-{side}", plan[side]["replicas"])
        for side in ("prefill", "decode")
    }
    decision = decide(spec(), deployment=_view("llama", 10), side_workloads=sides)
    assert ("Deployment", "llama") in decision.delete_objects
    ready = find_condition(decision.status.conditions, "Ready")
    assert ready is not None and ready.status == "True"
    assert decision.status.phase == "Ready"
    assert decision.status.ready_replicas == decision.status.replicas
    # One side short: not ready, and the message counts each side.
    short = dict(sides)
    short["llama-prefill"] = _view("llama-prefill", plan["prefill"]["replicas"] - 1)
    decision = decide(spec(), side_workloads=short)
    ready = find_condition(decision.status.conditions, "Ready")
    assert ready is not None and ready.status == "False" and "prefill" in ready.message


def test_back_to_aggregated_deletes_the_sides() -> None:
    off = spec(disaggregation={"mode": "Aggregated"})
    sides = {"llama-prefill": _view("llama-prefill", 3), "llama-decode": _view("llama-decode", 2)}
    decision = decide(off, side_workloads=sides)
    assert {("Deployment", "llama-prefill"), ("Deployment", "llama-decode")} <= set(
        decision.delete_objects
    )
    assert [d["metadata"]["name"] for d in by_kind(decision, "Deployment")] == ["llama"]
    assert decision.status.sides is None


def test_a_pool_too_small_for_a_side_waits_and_names_the_side() -> None:
    decision = decide(spec(), world=pools(h100_hosts=0))
    assert by_kind(decision, "Deployment") == []
    ready = find_condition(decision.status.conditions, "Ready")
    assert ready is not None and ready.status == "False"
    assert ready.message.startswith(("prefill side", "decode side"))


def test_inference_pools_select_the_serving_pods_of_each_side() -> None:
    decision = decide(spec())
    pools_applied = {p["metadata"]["name"]: p for p in by_kind(decision, "InferencePool")}
    assert set(pools_applied) == {"llama", "llama-prefill", "llama-decode"}
    workloads = {d["metadata"]["name"]: d for d in by_kind(decision, "Deployment")}
    for side in ("prefill", "decode"):
        selector = pools_applied[f"llama-{side}"]["spec"]["selector"]["matchLabels"]
        pod = workloads[f"llama-{side}"]["spec"]["template"]["metadata"]["labels"]
        other = workloads[f"llama-{'decode' if side == 'prefill' else 'prefill'}"]
        other_pod = other["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod.items()
        assert not selector.items() <= other_pod.items()
    both = pools_applied["llama"]["spec"]["selector"]["matchLabels"]
    for d in workloads.values():
        assert both.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ref = pools_applied["llama"]["spec"]["endpointPickerRef"]
    assert ref["name"] == "llama31-70b-epp" and ref["port"] == {"number": 9002}
    (objective,) = by_kind(decision, "InferenceObjective")
    assert objective["spec"]["poolRef"]["name"] == "llama"
    condition = find_condition(decision.status.conditions, "InferencePool")
    assert condition is not None and condition.status == "True"
    assert decision.status.inference_pools == ["llama", "llama-prefill", "llama-decode"]


def test_without_the_extension_or_a_picker_no_pool_and_a_condition_says_why() -> None:
    decision = decide(spec(), extension=InferenceExtension())
    assert by_kind(decision, "InferencePool") == []
    condition = find_condition(decision.status.conditions, "InferencePool")
    assert condition is not None and condition.reason == "InferenceExtensionNotInstalled"
    assert by_kind(decision, "Service")  # the plain Service stays
    no_picker = decide(spec(routing={"inferencePool": "Auto"}))
    condition = find_condition(no_picker.status.conditions, "InferencePool")
    assert condition is not None and condition.reason == "NoEndpointPicker"


def test_routing_turned_off_deletes_the_pools_it_made() -> None:
    before = decide(spec()).status
    after = decide(spec(routing={"inferencePool": "Disabled"}), status=before)
    assert ("InferencePool", "llama-prefill") in after.delete_objects
    assert ("InferenceObjective", "llama") in after.delete_objects
    assert find_condition(after.status.conditions, "InferencePool") is None
    assert after.status.inference_pools is None


def test_an_aggregated_endpoint_gets_one_pool_of_its_replicas() -> None:
    decision = decide(spec(disaggregation={"mode": "Aggregated"}))
    (pool,) = by_kind(decision, "InferencePool")
    (deployment,) = by_kind(decision, "Deployment")
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
