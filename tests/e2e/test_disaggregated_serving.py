"""A disaggregated InferenceEndpoint on the real control plane, with the Gateway API Inference
Extension's real CRDs (built from its pinned module by hack/cluster-tools.sh): the example plans
prefill and decode sides, both go through the operator's admission gate onto the H100 pool and
run with their role labels and the KV connector's env; each InferencePool the apiserver accepts
selects exactly the serving pods it should; switched to aggregated, the sides and their pools
go."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api.manifest import parse_manifest
from ringmaster.planning import plan_inference
from tests.e2e.kube import Cluster, OperatorProcess, pool_grown_to, wait_for
from tests.e2e.test_inferenceendpoint import condition, patch_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "inferenceendpoint-llama3-70b-disaggregated-h100.yaml"
POOL = "h100-highgpu-8g"
POOL_LABEL = "cloud.google.com/gke-nodepool"
SELECTOR = "ringmaster.dev/inferenceendpoint"
ROLE = "llm-d.ai/role"
GATE = "ringmaster.dev/admission"


def example() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


def planned_sides() -> dict[str, dict[str, Any]]:
    plan = plan_inference(parse_manifest(example()).spec).to_json()  # type: ignore[arg-type]
    split = plan["disaggregation"]
    assert split["chosen"] == "Disaggregated", split["why"]
    return {side: split[side] for side in ("prefill", "decode")}


def hosts_needed(sides: dict[str, dict[str, Any]], per_host: int = 8) -> int:
    return sum(math.ceil(s["replicas"] * s["perReplica"] / per_host) for s in sides.values())


@pytest.fixture
def h100_hosts(cluster: Cluster) -> Iterator[None]:
    with pool_grown_to(cluster, POOL, hosts_needed(planned_sides()), POOL_LABEL):
        yield


def pods(cluster: Cluster, ns: str, selector: dict[str, str]) -> set[str]:
    query = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    items = cluster.get_json("pods", "-n", ns, "-l", query)["items"]
    return {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}


def running(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    items = cluster.get_json("pods", "-n", ns, "-l", f"{SELECTOR}={name}")["items"]
    return [
        p
        for p in items
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    ]


def test_a_disaggregated_endpoint_runs_both_sides_behind_its_inference_pools(
    operator: OperatorProcess,
    cluster: Cluster,
    quiet_namespace: str,
    gie: Cluster,
    h100_hosts: None,
) -> None:
    ns = quiet_namespace
    doc = example()
    name = doc["metadata"]["name"]
    sides = planned_sides()
    want = sum(s["replicas"] for s in sides.values())
    cluster.apply(doc, namespace=ns)

    def ready() -> dict[str, Any] | None:
        obj = cluster.get_json("inferenceendpoint", name, "-n", ns)
        c = condition(obj, "Ready")
        return obj if c and c["status"] == "True" else None

    obj = wait_for(ready, timeout=180, what="the disaggregated endpoint Ready")
    status = obj["status"]
    assert status["replicas"] == want and status["readyReplicas"] == want
    assert status["sides"]["prefill"]["replicas"] == sides["prefill"]["replicas"]
    assert status["sides"]["decode"]["replicas"] == sides["decode"]["replicas"]
    assert status["plan"]["disaggregation"]["chosen"] == "Disaggregated"
    assert status["plan"]["disaggregation"]["kvTransfer"]["shareOfTtft"] > 0

    # Both sides' pods: admitted through the gate, running, with the role and the connector.
    live = running(cluster, ns, name)
    assert len(live) == want
    by_role: dict[str, list[dict[str, Any]]] = {"prefill": [], "decode": []}
    for pod in live:
        assert not pod["spec"].get("schedulingGates"), "every replica went through admission"
        role = pod["metadata"]["labels"][ROLE]
        by_role[role].append(pod)
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RINGMASTER_DISAGGREGATION_ROLE"] == role
        assert json.loads(env["RINGMASTER_KV_TRANSFER_CONFIG"])["kv_connector"] == "NixlConnector"
        assert env["RINGMASTER_TENSOR_PARALLEL"] == str(sides[role]["tensorParallel"])
        gpus = pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        assert gpus == str(sides[role]["perReplica"])
    assert {r: len(p) for r, p in by_role.items()} == {r: s["replicas"] for r, s in sides.items()}

    # The InferencePools, accepted by the real CRDs, select exactly the serving pods.
    pools = {
        p["metadata"]["name"]: p for p in cluster.get_json("inferencepools", "-n", ns)["items"]
    }
    assert set(pools) == {name, f"{name}-prefill", f"{name}-decode"}
    everyone = {p["metadata"]["name"] for p in live}
    assert pods(cluster, ns, pools[name]["spec"]["selector"]["matchLabels"]) == everyone
    for role, members in by_role.items():
        selected = pods(cluster, ns, pools[f"{name}-{role}"]["spec"]["selector"]["matchLabels"])
        assert selected == {p["metadata"]["name"] for p in members}
    assert pools[name]["spec"]["endpointPickerRef"]["name"] == "llama31-70b-epp"
    objective = cluster.get_json("inferenceobjective", name, "-n", ns)
    assert objective["spec"]["poolRef"]["name"] == name
    # The endpoint's Service sends requests to the decode side.
    service = cluster.get_json("service", name, "-n", ns)
    assert service["spec"]["selector"][ROLE] == "decode"

    # Aggregated again: the sides and their pools go, one Deployment and one pool stay.
    patch_spec(cluster, ns, name, '{"spec": {"disaggregation": {"mode": "Aggregated"}}}')

    def aggregated() -> bool:
        names = {
            d["metadata"]["name"]
            for d in cluster.get_json("deployments", "-n", ns)["items"]
            if not d["metadata"].get("deletionTimestamp")
        }
        pool_names = {
            p["metadata"]["name"] for p in cluster.get_json("inferencepools", "-n", ns)["items"]
        }
        return names == {name} and pool_names == {name}

    wait_for(aggregated, timeout=120, what="the sides and their pools gone, one Deployment left")
    obj = cluster.get_json("inferenceendpoint", name, "-n", ns)
    assert "sides" not in obj["status"]
    assert "disaggregation" not in obj["status"]["plan"]


def test_server_metrics_autoscaling_reads_the_pods_and_holds_without_a_signal(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
) -> None:
    """The operator's loop on the real control plane: an endpoint scaled on its servers'
    metrics gets no HPA; every interval the operator lists its ready pods and scrapes them, and
    kwok's pods, which serve nothing, give no signal: the count holds and the Autoscaling
    condition says why, naming the failed scrapes. (The scale-up under load needs a model server
    that answers: llm-d's simulator, which the Go module proxy does not serve.)"""
    ns = quiet_namespace
    doc = yaml.safe_load(
        (REPO / "examples" / "inferenceendpoint-llama3-8b-fp8-h100.yaml").read_text()
    )
    doc["spec"]["autoscaling"] = {"enabled": True, "source": "ServerMetrics"}
    name = doc["metadata"]["name"]
    cluster.apply(doc, namespace=ns)

    def no_signal() -> dict[str, Any] | None:
        # NoSignal comes first with no replica ready ("none of 0 replicas gave figures"); the
        # loop's next interval, once the pods are ready, names the scrapes that failed.
        obj = cluster.get_json("inferenceendpoint", name, "-n", ns)
        c = condition(obj, "Autoscaling")
        scraped = c is not None and "answered" in c.get("message", "")
        return obj if c and c["reason"] == "NoSignal" and scraped else None

    obj = wait_for(
        no_signal, timeout=180, what="the Autoscaling condition NoSignal naming failed scrapes"
    )
    autoscaling = condition(obj, "Autoscaling")
    assert autoscaling is not None and autoscaling["status"] == "False"
    assert "answered" in autoscaling["message"], autoscaling  # the scrape's own words
    planned = obj["status"]["plan"]["replicas"]
    assert obj["status"]["replicas"] == planned
    hpas = cluster.get_json("horizontalpodautoscalers", "-n", ns)["items"]
    assert hpas == []
