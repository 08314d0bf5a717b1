"""spec.machineType, spec.maxBatchSize and spec.batching on an InferenceEndpoint: each acts in
the plan (ringmaster plan and status.plan), machineType in the pool choice, and the API refuses
what cannot be served."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import InferenceEndpointSpec, InferenceEndpointStatus, find_condition
from ringmaster.api.manifest import ManifestError, parse_manifest
from ringmaster.controllers.inference_lifecycle import (
    EndpointView,
    NoPool,
    choose_pool,
    reconcile_inference,
    status_plan,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list
from ringmaster.manifests.inference import BATCHING_ENV, MAX_NUM_SEQS_ENV, serving_env
from ringmaster.placement.pools import discover_pools, node_from_object
from ringmaster.planning import PlanError, plan_inference
from ringmaster.planning.catalog import replica_hardware_problem
from ringmaster.planning.render import render_llm_inference

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def llm(**changes: Any) -> dict[str, Any]:
    """The Llama-3-8B FP8 example with top-level spec fields changed."""
    doc = yaml.safe_load((EXAMPLES / "inferenceendpoint-llama3-8b-fp8-h100.yaml").read_text())
    doc["spec"].update(copy.deepcopy(changes))
    return doc


def spec(**changes: Any) -> InferenceEndpointSpec:
    return parse_manifest(llm(**changes)).spec  # type: ignore[return-value]


def plan(**changes: Any) -> dict[str, Any]:
    return plan_inference(spec(**changes)).to_json()


H200_SHARE = {
    "accelerator": {"type": "nvidia-h200-141gb", "perReplica": 1},
    "machineType": "a3-ultragpu-8g",
}


# --- machineType in the plan ------------------------------------------------------------------


def test_one_h200_of_an_8_gpu_host_is_planned_on_that_host_at_its_share_of_the_price():
    without = {"accelerator": H200_SHARE["accelerator"]}
    with pytest.raises(PlanError, match=r"spec\.accelerator\.perReplica"):
        plan(**without)  # the catalog's H200 hosts come 8 per host
    p = plan(**H200_SHARE)
    assert p["machineType"] == "a3-ultragpu-8g" and p["hostsPerReplica"] == 1
    host = DEFAULT_CATALOG.machine("a3-ultragpu-8g").price_per_hour
    assert p["costPerHourUSD"] == pytest.approx(p["replicas"] * host / 8, rel=1e-4)


def test_the_machine_type_changes_the_plan_price_and_host():
    eight = {"accelerator": {"type": "nvidia-h100-80gb", "perReplica": 8}}
    default = plan(**eight)
    mega = plan(**eight, machineType="a3-megagpu-8g")
    assert default["machineType"] == "a3-highgpu-8g" and mega["machineType"] == "a3-megagpu-8g"
    per_replica = [p["costPerHourUSD"] / p["replicas"] for p in (default, mega)]
    prices = [DEFAULT_CATALOG.machine(m).price_per_hour for m in ("a3-highgpu-8g", "a3-megagpu-8g")]
    assert per_replica == pytest.approx(prices, rel=1e-4) and prices[0] != prices[1]


def test_an_unknown_or_mismatched_machine_type_is_a_clear_error():
    with pytest.raises(
        PlanError,
        match=r"spec\.machineType: unknown machine type 'a3-nope-8g'.*"
        r"a3-ultragpu-8g \(8 x nvidia-h200-141gb\)",
    ):
        plan(**{**H200_SHARE, "machineType": "a3-nope-8g"})
    with pytest.raises(PlanError, match=r"spec\.machineType: machine type a3-highgpu-8g carries"):
        plan(**{**H200_SHARE, "machineType": "a3-highgpu-8g"})
    with pytest.raises(PlanError, match="12 per host"):
        plan(
            **{
                **H200_SHARE,
                "accelerator": {
                    "type": "nvidia-h200-141gb",
                    "perReplica": 12,
                    "hostsPerReplica": 1,
                },
            },
            parallelism={"tensor": 4, "pipeline": 3},
        )


def test_a_replica_of_whole_hosts_of_the_machine_type_spans_them():
    p = plan(**{**H200_SHARE, "accelerator": {"type": "nvidia-h200-141gb", "perReplica": 16}})
    assert p["hostsPerReplica"] == 2 and p["machineType"] == "a3-ultragpu-8g"


def test_the_operator_catalog_check_builds_the_replica_on_the_machine_type():
    assert replica_hardware_problem(DEFAULT_CATALOG, "nvidia-h200-141gb", 1) is not None
    assert (
        replica_hardware_problem(DEFAULT_CATALOG, "nvidia-h200-141gb", 1, None, "a3-ultragpu-8g")
        is None
    )
    reason, message = replica_hardware_problem(
        DEFAULT_CATALOG, "nvidia-h200-141gb", 12, 2, "a3-ultragpu-8g"
    ) or ("", "")
    assert reason == "UnsupportedHostShape" and "a3-ultragpu-8g has 8" in message


# --- machineType in the pool choice -----------------------------------------------------------


def pools(sizes: dict[str, int]) -> dict[str, Any]:
    counts = dict.fromkeys(POOLS_BY_NAME, 0)
    counts.update(sizes)
    objects = node_list(counts)["items"]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return discover_pools(node_from_object(o) for o in objects)


def test_the_pool_must_be_of_the_machine_type_and_the_refusal_names_both():
    world = pools({"h100-highgpu-8g": 2, "h200-ultragpu-8g": 2})
    share = spec(**H200_SHARE)
    chosen = choose_pool(share, world, {}, replicas=3)
    assert not isinstance(chosen, NoPool) and chosen.name == "h200-ultragpu-8g"
    other = spec(
        accelerator={"type": "nvidia-h100-80gb", "perReplica": 8}, machineType="a3-megagpu-8g"
    )
    refused = choose_pool(other, world, {}, replicas=1)
    assert isinstance(refused, NoPool) and refused.reason == "NoMatchingPool"
    assert "a3-megagpu-8g" in refused.message and "a3-highgpu-8g" in refused.message
    # Without a machine type any pool of the accelerator serves, as before.
    free = spec(accelerator={"type": "nvidia-h100-80gb", "perReplica": 8})
    assert not isinstance(choose_pool(free, world, {}, replicas=1), NoPool)


def test_an_endpoint_on_another_machine_type_waits_with_no_matching_pool():
    other = spec(
        accelerator={"type": "nvidia-h100-80gb", "perReplica": 8}, machineType="a3-megagpu-8g"
    )
    decision = reconcile_inference(
        EndpointView("llama", "serving", 1, other, InferenceEndpointStatus()),
        None,
        False,
        pools({"h100-highgpu-8g": 2}),
        {},
        lambda s: plan_inference(s).to_json(),
        NOW,
    )
    assert decision.apply == []
    ready = find_condition(decision.status.conditions, "Ready")
    assert ready is not None and ready.reason == "NoMatchingPool"
    assert "a3-megagpu-8g" in ready.message and "a3-highgpu-8g" in ready.message
    assert decision.status.plan is not None
    assert decision.status.plan.machine_type == "a3-megagpu-8g"


def test_eight_one_gpu_replicas_pack_on_one_host_of_the_machine_type():
    decision = reconcile_inference(
        EndpointView(
            "llama", "serving", 1, spec(**H200_SHARE, replicas=8), InferenceEndpointStatus()
        ),
        None,
        False,
        pools({"h200-ultragpu-8g": 1}),
        {},
        lambda s: plan_inference(s).to_json(),
        NOW,
    )
    assert decision.status.pool == "h200-ultragpu-8g"
    workload = decision.apply[0]
    pod = workload["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "h200-ultragpu-8g"}
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert schedulable is not None and schedulable.status == "True"


# --- maxBatchSize and batching in the plan ---------------------------------------------------


def test_the_plan_shows_the_cap_it_used_and_the_server_gets_it():
    free = plan()
    assert free["maxBatchSize"] is None and free["batching"] == "Continuous"
    assert free["maxNumSeqs"] > 64
    capped = plan(maxBatchSize=64)
    assert capped["maxBatchSize"] == 64 and capped["maxNumSeqs"] <= 64
    assert (
        capped["offlineOutputTokensPerSecondPerReplica"]
        < free["offlineOutputTokensPerSecondPerReplica"]
    )
    assert serving_env(capped)[MAX_NUM_SEQS_ENV] == str(capped["maxNumSeqs"])
    assert BATCHING_ENV not in serving_env(capped)
    status = status_plan(capped, capped["replicas"], 150.0)
    assert status.max_batch_size == 64 and status.batching == "Continuous"
    assert status.max_num_seqs == capped["maxNumSeqs"]
    text = render_llm_inference(plan_inference(spec(maxBatchSize=64)))  # type: ignore[arg-type]
    assert "capped at maxBatchSize 64" in text


def test_a_static_batch_is_planned_and_passed_to_the_server():
    static = plan(batching="Static", maxBatchSize=64)
    continuous = plan(maxBatchSize=64)
    assert static["batching"] == "Static" and static["maxNumSeqs"] <= 64
    assert (
        static["offlineOutputTokensPerSecondPerReplica"]
        < continuous["offlineOutputTokensPerSecondPerReplica"]
    )
    assert serving_env(static)[BATCHING_ENV] == "Static"
    text = render_llm_inference(plan_inference(spec(batching="Static", maxBatchSize=64)))  # type: ignore[arg-type]
    assert "static batches" in text


def test_a_block_endpoint_keeps_its_batch_of_32_by_default():
    doc = yaml.safe_load((EXAMPLES / "inferenceendpoint-resnet50-int8-t4.yaml").read_text())
    doc["spec"].pop("maxBatchSize", None)
    p = plan_inference(parse_manifest(doc).spec).to_json()  # type: ignore[arg-type]
    assert p["batchSize"] <= 32


def test_batching_needs_an_architecture():
    doc = yaml.safe_load((EXAMPLES / "inferenceendpoint-resnet50-int8-t4.yaml").read_text())
    doc["spec"]["batching"] = "Static"
    with pytest.raises(ManifestError, match=r"batching needs model\.architecture"):
        parse_manifest(doc)
    with pytest.raises(ManifestError):
        parse_manifest(llm(batching="Fixed"))
    with pytest.raises(ManifestError):
        parse_manifest(llm(maxBatchSize=0))
