"""The InferenceEndpoint controller on the real control plane: kube-controller-manager turns the
operator's Deployments into ReplicaSets and pods, kube-scheduler places them, kwok marks them
Running and Ready, the garbage collector cascades deletion; the operator runs as a process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import InferenceEndpointSpec
from ringmaster.planning import plan_inference
from tests.e2e.kube import Cluster, OperatorProcess, wait_for

REPO = Path(__file__).resolve().parents[2]
T4_EXAMPLE = REPO / "examples" / "inferenceendpoint-resnet50-int8-t4.yaml"
A100_EXAMPLE = REPO / "examples" / "inferenceendpoint-resnet50-int8-a100.yaml"
LLAMA_8B_EXAMPLE = REPO / "examples" / "inferenceendpoint-llama3-8b-fp8-h100.yaml"
LLAMA_70B_INT4_EXAMPLE = REPO / "examples" / "inferenceendpoint-llama3-70b-int4-a100.yaml"
POOL_LABEL = "cloud.google.com/gke-nodepool"
SELECTOR = "ringmaster.dev/inferenceendpoint"


def manifest(path: Path, name: str | None = None, **spec_changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    if name:
        body["metadata"]["name"] = name
    for dotted, value in spec_changes.items():
        *parents, leaf = dotted.split("__")
        node = body["spec"]
        for part in parents:
            node = node[part]
        node[leaf] = value
    return body


def engine_replicas(body: dict[str, Any]) -> int:
    """What the engine asks for, computed here from the same manifest."""
    return int(
        plan_inference(InferenceEndpointSpec.model_validate(body["spec"])).to_json()["replicas"]
    )


def endpoint(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get_json("inferenceendpoint", name, "-n", ns)


def status(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return endpoint(cluster, ns, name).get("status") or {}


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), None
    )


def server_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    pods = cluster.get_json("pods", "-n", ns, "-l", f"{SELECTOR}={name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def wait_serving(cluster: Cluster, ns: str, name: str, replicas: int, timeout: float = 90) -> None:
    """status.replicas and readyReplicas at `replicas`, with that many running pods."""

    def serving() -> bool:
        s = status(cluster, ns, name)
        pods = server_pods(cluster, ns, name)
        return (
            s.get("replicas") == replicas
            and s.get("readyReplicas") == replicas
            and len(pods) == replicas
        )

    wait_for(
        serving,
        timeout=timeout,
        what=f"{name} serving {replicas} replicas (status {status(cluster, ns, name)})",
    )


def pools_of(cluster: Cluster, pods: list[dict[str, Any]]) -> set[str]:
    nodes = {p["spec"]["nodeName"] for p in pods}
    return {cluster.get_json("node", n)["metadata"]["labels"][POOL_LABEL] for n in nodes}


def events_of(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return cluster.get_json(
        "events",
        "-n",
        ns,
        "--field-selector",
        f"involvedObject.kind=InferenceEndpoint,involvedObject.name={name}",
    )["items"]


def patch_spec(cluster: Cluster, ns: str, name: str, patch: str) -> None:
    cluster.kubectl("patch", "inferenceendpoint", name, "-n", ns, "--type", "merge", "-p", patch)


def test_the_t4_and_a100_examples_come_up_on_their_pools_with_the_engines_counts(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    t4, a100 = manifest(T4_EXAMPLE), manifest(A100_EXAMPLE)
    cluster.apply(t4, ns)
    cluster.apply(a100, ns)
    expected = {
        "resnet50-int8-t4": engine_replicas(t4),
        "resnet50-int8-a100": engine_replicas(a100),
    }
    assert expected == {"resnet50-int8-t4": 2, "resnet50-int8-a100": 1}
    for name, replicas in expected.items():
        wait_serving(cluster, ns, name, replicas)
        wait_for(
            lambda n=name: status(cluster, ns, n).get("phase") == "Ready", what=f"{name} Ready"
        )

    assert pools_of(cluster, server_pods(cluster, ns, "resnet50-int8-t4")) == {"t4-serving"}
    assert pools_of(cluster, server_pods(cluster, ns, "resnet50-int8-a100")) == {"a100-highgpu-8g"}

    obj = endpoint(cluster, ns, "resnet50-int8-t4")
    s = obj["status"]
    assert s["pool"] == "t4-serving"
    assert s["url"] == f"http://resnet50-int8-t4.{ns}.svc.cluster.local:8000"
    plan = s["plan"]
    # the typical batch the greedy batcher forms at the sized rate (maxBatchSize is 64)
    assert 1 <= plan["batchSize"] <= 64 and plan["bottleneck"].startswith("compute")
    assert plan["capacityRequestsPerSecond"] == pytest.approx(
        2 * plan["perReplicaRequestsPerSecond"], rel=1e-5
    )
    assert plan["capacityRequestsPerSecond"] >= plan["targetRequestsPerSecond"] == 4000
    assert 0 < plan["latencyP99Milliseconds"] <= 25 and plan["costPerHourUSD"] > 0
    for type_ in ("Ready", "CapacityMet"):
        c = condition(obj, type_)
        assert c is not None and c["status"] == "True"
        assert c["observedGeneration"] == obj["metadata"]["generation"]

    service = cluster.get_json("service", "resnet50-int8-t4", "-n", ns)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == 8000
    # The A100 example turns autoscaling on: an HPA on its Deployment between min and max.
    hpa = cluster.get_json("hpa", "resnet50-int8-a100", "-n", ns)
    assert hpa["spec"]["scaleTargetRef"]["name"] == "resnet50-int8-a100"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 6)
    table = cluster.kubectl("get", "ie", "-n", ns).stdout
    row = next(line for line in table.splitlines() if line.startswith("resnet50-int8-t4 "))
    assert row.split()[1:5] == ["Ready", "ReplicasReady", "2", "2"]  # phase, reason, replicas
    reasons = {e["reason"] for e in events_of(cluster, ns, "resnet50-int8-t4")}
    assert {"PoolSelected", "Scaled", "Ready"} <= reasons

    metrics = operator.metrics()
    labels = f'name="resnet50-int8-t4",namespace="{ns}"'
    assert f'ringmaster_inference_replicas{{{labels},state="desired"}} 2.0' in metrics
    assert f'ringmaster_inference_replicas{{{labels},state="ready"}} 2.0' in metrics
    assert f"ringmaster_inference_target_requests_per_second{{{labels}}} 4000.0" in metrics
    assert f"ringmaster_inference_predicted_capacity_requests_per_second{{{labels}}}" in metrics


def test_raising_the_target_scales_out_and_lowering_it_scales_in_without_restarts(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    body = manifest(T4_EXAMPLE)
    cluster.apply(body, ns)
    wait_serving(cluster, ns, "resnet50-int8-t4", 2)
    first = {p["metadata"]["uid"] for p in server_pods(cluster, ns, "resnet50-int8-t4")}

    higher = manifest(T4_EXAMPLE, slo__targetRequestsPerSecond=16000)
    assert engine_replicas(higher) == 3
    patch_spec(
        cluster, ns, "resnet50-int8-t4", '{"spec":{"slo":{"targetRequestsPerSecond":16000}}}'
    )
    wait_serving(cluster, ns, "resnet50-int8-t4", 3)
    pods = server_pods(cluster, ns, "resnet50-int8-t4")
    assert first <= {p["metadata"]["uid"] for p in pods}  # the serving pods were left alone
    assert pools_of(cluster, pods) == {"t4-serving"}

    patch_spec(cluster, ns, "resnet50-int8-t4", '{"spec":{"slo":{"targetRequestsPerSecond":4000}}}')
    wait_serving(cluster, ns, "resnet50-int8-t4", 2)
    # Only the replica count moved: one ReplicaSet all along, the Deployment's template untouched.
    replica_sets = cluster.get_json("replicasets", "-n", ns, "-l", f"{SELECTOR}=resnet50-int8-t4")
    assert len(replica_sets["items"]) == 1
    scaled = [
        e["message"] for e in events_of(cluster, ns, "resnet50-int8-t4") if e["reason"] == "Scaled"
    ]
    assert any(m.startswith("scaled from 2 to 3 replicas") for m in scaled)
    assert any(m.startswith("scaled from 3 to 2 replicas") for m in scaled)
    assert condition(endpoint(cluster, ns, "resnet50-int8-t4"), "CapacityMet")["status"] == "True"


def test_fp16_needs_more_replicas_than_int8_for_the_same_target(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    int8 = manifest(T4_EXAMPLE, "int8", slo__targetRequestsPerSecond=8000)
    fp16 = manifest(T4_EXAMPLE, "fp16", slo__targetRequestsPerSecond=8000, precision="FP16")
    assert (engine_replicas(int8), engine_replicas(fp16)) == (2, 3)
    cluster.apply(int8, ns)
    cluster.apply(fp16, ns)
    wait_serving(cluster, ns, "int8", 2)
    wait_serving(cluster, ns, "fp16", 3)
    assert pools_of(cluster, server_pods(cluster, ns, "fp16")) == {"t4-serving"}
    per_replica = {
        n: status(cluster, ns, n)["plan"]["perReplicaRequestsPerSecond"] for n in ("int8", "fp16")
    }
    assert per_replica["fp16"] < per_replica["int8"]


def test_an_impossible_latency_target_gives_the_condition_and_still_serves(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(manifest(T4_EXAMPLE, "too-fast", slo__latencyP99Milliseconds=0.3), ns)
    wait_serving(cluster, ns, "too-fast", 2)  # minReplicas: it serves what it can
    obj = endpoint(cluster, ns, "too-fast")
    capacity = condition(obj, "CapacityMet")
    assert capacity is not None
    assert (capacity["status"], capacity["reason"]) == ("False", "LatencyTargetUnreachable")
    assert "0.3 ms" in capacity["message"] and "nvidia-tesla-t4" in capacity["message"]
    assert obj["status"]["phase"] == "Degraded"
    assert condition(obj, "Ready")["status"] == "True"
    warnings = [e for e in events_of(cluster, ns, "too-fast") if e["reason"] == "CapacityNotMet"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"  # once, not per reconcile


def test_kubectl_scale_sets_the_replica_count(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(manifest(T4_EXAMPLE), ns)
    wait_serving(cluster, ns, "resnet50-int8-t4", 2)
    cluster.kubectl("scale", "ie/resnet50-int8-t4", "-n", ns, "--replicas=5")
    assert endpoint(cluster, ns, "resnet50-int8-t4")["spec"]["replicas"] == 5
    wait_serving(cluster, ns, "resnet50-int8-t4", 5)
    deployment = cluster.get_json("deployment", "resnet50-int8-t4", "-n", ns)
    assert deployment["spec"]["replicas"] == 5
    assert pools_of(cluster, server_pods(cluster, ns, "resnet50-int8-t4")) == {"t4-serving"}
    scaled = [e["message"] for e in events_of(cluster, ns, "resnet50-int8-t4")]
    assert "scaled from 2 to 5 replicas: spec.replicas" in scaled
    # What an HPA reads through the scale subresource: the count and the pods' selector. (The
    # apiserver serves it only while spec.replicas is set, as it now is.)
    scale = cluster.get_json(
        "inferenceendpoint", "resnet50-int8-t4", "-n", ns, "--subresource=scale"
    )
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (5, 5)
    selected = cluster.get_json("pods", "-n", ns, "-l", scale["status"]["selector"])["items"]
    assert len(selected) == 5


def test_with_autoscaling_the_hpa_owns_the_count_and_status_follows_it(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(manifest(A100_EXAMPLE), ns)
    wait_serving(cluster, ns, "resnet50-int8-a100", 1)
    # What the HPA does when it scales: write the Deployment's scale subresource.
    cluster.kubectl("scale", "deployment/resnet50-int8-a100", "-n", ns, "--replicas=3")
    wait_serving(cluster, ns, "resnet50-int8-a100", 3)
    # A later change to the endpoint re-applies the Deployment, and must not take the count back.
    patch_spec(
        cluster, ns, "resnet50-int8-a100", '{"spec":{"slo":{"targetRequestsPerSecond":21000}}}'
    )
    wait_for(
        lambda: (
            status(cluster, ns, "resnet50-int8-a100").get("plan", {}).get("targetRequestsPerSecond")
            == 21000
        ),
        what="the new target planned",
    )
    deployment = cluster.get_json("deployment", "resnet50-int8-a100", "-n", ns)
    assert deployment["spec"]["replicas"] == 3
    assert status(cluster, ns, "resnet50-int8-a100")["replicas"] == 3
    assert pools_of(cluster, server_pods(cluster, ns, "resnet50-int8-a100")) == {"a100-highgpu-8g"}

    # Autoscaling off: the HPA goes and the operator sizes it again.
    patch_spec(cluster, ns, "resnet50-int8-a100", '{"spec":{"autoscaling":{"enabled":false}}}')
    wait_serving(cluster, ns, "resnet50-int8-a100", 1)
    wait_for(lambda: not cluster.get_json("hpa", "-n", ns)["items"], what="the HPA deleted")


def test_deleting_an_endpoint_removes_everything_it_created(
    operator: OperatorProcess, cluster: Cluster, namespace: str
):
    ns = namespace
    cluster.apply(manifest(A100_EXAMPLE, "short-lived"), ns)
    wait_serving(cluster, ns, "short-lived", 1)
    cluster.kubectl("delete", "inferenceendpoint", "short-lived", "-n", ns)

    def all_gone() -> bool:
        kinds = "deployments,replicasets,services,horizontalpodautoscalers"
        return not cluster.get_json(kinds, "-n", ns)["items"] and not server_pods(
            cluster, ns, "short-lived"
        )

    wait_for(all_gone, timeout=60, what="the endpoint's objects garbage-collected")


def test_an_sglang_endpoint_gets_sglangs_launcher_env_and_memory_split(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    """spec.engine reaches the server (RINGMASTER_SERVING_ENGINE) and the plan: SGLang keeps
    0.88 of HBM for weights and cache where vLLM keeps 0.9, so its replica holds fewer sequences;
    the evidence says its step constants are another engine's."""
    ns = quiet_namespace
    body = manifest(LLAMA_8B_EXAMPLE, "llama-sglang")
    body["spec"]["engine"] = "SGLang"
    sglang = plan_inference(InferenceEndpointSpec.model_validate(body["spec"])).to_json()
    vllm_body = manifest(LLAMA_8B_EXAMPLE, "llama-vllm")
    vllm_body["spec"]["engine"] = "vLLM"
    vllm = plan_inference(InferenceEndpointSpec.model_validate(vllm_body["spec"])).to_json()
    assert sglang["maxConcurrentSequences"] < vllm["maxConcurrentSequences"]
    cluster.apply(body, ns)
    wait_serving(cluster, ns, "llama-sglang", sglang["replicas"])
    deployment = cluster.get_json("deployment", "llama-sglang", "-n", ns)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RINGMASTER_SERVING_ENGINE"] == "SGLang"
    obj = endpoint(cluster, ns, "llama-sglang")
    plan = obj["status"]["plan"]
    assert plan["engine"] == "SGLang"
    assert plan["evidence"].startswith(
        "engine SGLang (spec.engine); extrapolated: no checked serving run of SGLang on"
    )
    assert "; extrapolated: no fitted run of SGLang" in plan["evidence"]
    # the example's command line still starts vLLM's server: the plan says so, by name
    plausible = condition(obj, "Plausible")
    assert plausible is not None and plausible["status"] == "False", obj["status"]
    assert "starts vLLM's server where the plan is SGLang's" in plausible["message"]
    bad = manifest(LLAMA_8B_EXAMPLE, "llama-bad-engine")
    bad["spec"]["engine"] = "TGI"
    result = cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert result.returncode != 0 and "spec.engine" in result.stderr


def test_an_llm_endpoint_runs_with_its_serving_settings_and_token_columns(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    body = manifest(LLAMA_8B_EXAMPLE)
    plan = plan_inference(InferenceEndpointSpec.model_validate(body["spec"])).to_json()
    assert plan["feasible"] and plan["replicas"] >= 2
    replicas = plan["replicas"]
    cluster.apply(body, ns)
    name = "llama3-8b-fp8-h100"
    wait_serving(cluster, ns, name, replicas)
    assert pools_of(cluster, server_pods(cluster, ns, name)) == {"h100-highgpu-8g"}

    deployment = cluster.get_json("deployment", name, "-n", ns)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["RINGMASTER_TENSOR_PARALLEL"] == "1"
    assert env["RINGMASTER_MAX_NUM_SEQS"] == str(plan["maxNumSeqs"])
    assert env["RINGMASTER_MAX_MODEL_LEN"] == "8192"
    assert env["RINGMASTER_MAX_NUM_BATCHED_TOKENS"] == str(plan["maxNumBatchedTokens"])
    assert env["RINGMASTER_SERVING_ENGINE"] == plan["engine"] == "vLLM"  # the image's
    # the FP8 cache the sizing counted on, which vLLM's default ("auto": 16-bit) would not run
    assert plan["kvCachePrecision"] == "FP8" and env["RINGMASTER_KV_CACHE_DTYPE"] == "fp8"

    obj = endpoint(cluster, ns, name)
    s = obj["status"]["plan"]
    assert s["engine"] == "vLLM" and s["evidence"].startswith("engine vLLM (from the image")
    assert s["outputTokensPerSecond"] == pytest.approx(
        replicas * plan["outputTokensPerSecondPerReplica"], rel=1e-5
    )
    # the offline maximum and where each SLO starts to fail, beside the sustainable rate
    assert s["offlineOutputTokensPerSecondPerReplica"] == pytest.approx(
        plan["offlineOutputTokensPerSecondPerReplica"], rel=1e-5
    )
    assert s["offlineOutputTokensPerSecondPerReplica"] > s["outputTokensPerSecondPerReplica"]
    assert s["ttftSloRequestsPerSecondPerReplica"] == pytest.approx(
        plan["ttftSloRequestsPerSecondPerReplica"], rel=1e-5
    )
    assert s["ttftP99Milliseconds"] <= 300 and s["tpotP99Milliseconds"] <= 25
    met = condition(obj, "CapacityMet")
    assert met is not None and met["status"] == "True" and met["message"].endswith("binds")

    table = cluster.kubectl("get", "ie", name, "-n", ns).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    columns = dict(zip(header, row, strict=False))
    assert float(columns["TOKENS/S"]) == pytest.approx(s["outputTokensPerSecond"], rel=1e-3)
    assert float(columns["TTFT-MS"]) == pytest.approx(s["ttftP99Milliseconds"], rel=1e-3)
    assert float(columns["TPOT-MS"]) == pytest.approx(s["tpotP99Milliseconds"], rel=1e-3)


def test_an_llm_that_no_replica_can_hold_waits_with_the_reason_and_creates_nothing(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(manifest(LLAMA_70B_INT4_EXAMPLE, "too-big", precision="BF16"), ns)

    def waiting() -> bool:
        ready = condition(endpoint(cluster, ns, "too-big"), "Ready")
        return ready is not None and ready["reason"] == "ModelDoesNotFit"

    wait_for(waiting, what="too-big waiting with ModelDoesNotFit")
    obj = endpoint(cluster, ns, "too-big")
    assert obj["status"]["phase"] == "Pending"
    ready = condition(obj, "Ready")
    assert ready["status"] == "False"
    assert "needs 131 GiB of weights" in ready["message"]
    assert ready["message"].endswith("use perReplica: 2 or INT4")
    assert cluster.get_json("deployments,services,hpa", "-n", ns)["items"] == []

    # The Event goes out after the status that records the condition (the shell posts it
    # without waiting): under load it lands a moment later.
    def capacity_warnings() -> list[dict]:
        return [e for e in events_of(cluster, ns, "too-big") if e["reason"] == "CapacityNotMet"]

    wait_for(capacity_warnings, timeout=30, interval=0.5, what="the CapacityNotMet Event")
    warnings = capacity_warnings()
    assert len(warnings) == 1 and "131 GiB" in warnings[0]["message"]


def _quantity(text: str) -> float:
    return float(text[:-1]) / 1000.0 if text.endswith("m") else float(text)


def test_an_llm_endpoints_hpa_targets_the_plans_sustainable_rate(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    # Llama-3-70B in INT4 on one A100: a few requests/s per replica, which the HPA's target
    # must carry to the thousandth (an integer would round 1.5 down to 1).
    body = manifest(
        LLAMA_70B_INT4_EXAMPLE, "llm-autoscaled", autoscaling={"enabled": True}, maxReplicas=4
    )
    plan = plan_inference(InferenceEndpointSpec.model_validate(body["spec"])).to_json()
    assert plan["feasible"], plan["reason"]
    rate = plan["perReplicaRequestsPerSecond"]
    unit = "requests_per_second"
    if body["spec"]["slo"].get("targetOutputTokensPerSecond") is not None:
        rate, unit = plan["outputTokensPerSecondPerReplica"], "output_tokens_per_second"
    cluster.apply(body, ns)
    wait_for(
        lambda: bool(cluster.get_json("hpa", "-n", ns)["items"]), what="the LLM endpoint's HPA"
    )
    hpa = cluster.get_json("hpa", "llm-autoscaled", "-n", ns)
    pods = next(m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods")
    assert pods["metric"]["name"] == unit
    assert _quantity(pods["target"]["averageValue"]) == pytest.approx(rate, rel=1e-3 + 1e-3 / rate)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    s = status(cluster, ns, "llm-autoscaled")["plan"]
    assert s["perReplicaRequestsPerSecond"] == pytest.approx(plan["perReplicaRequestsPerSecond"])


def test_an_llm_whose_slo_no_rate_meets_waits_with_the_numbers_and_creates_nothing(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    # A 2 ms TPOT p99 for an 8B model: below even an idle replica's decode step.
    body = manifest(LLAMA_8B_EXAMPLE, "too-fast", slo__timePerOutputTokenP99Milliseconds=2)
    cluster.apply(body, ns)

    def waiting() -> bool:
        ready = condition(endpoint(cluster, ns, "too-fast"), "Ready")
        return ready is not None and ready["reason"] == "LatencyTargetUnreachable"

    wait_for(waiting, what="too-fast waiting with LatencyTargetUnreachable")
    obj = endpoint(cluster, ns, "too-fast")
    assert obj["status"]["phase"] == "Pending"
    message = condition(obj, "Ready")["message"]
    assert message.startswith("TPOT p99 target 2 ms is below the")
    assert "offline it serves" in message and "output tokens/s" in message
    # the offline maximum is in status even though no rate meets the SLO
    assert obj["status"]["plan"]["offlineOutputTokensPerSecondPerReplica"] > 0
    assert cluster.get_json("deployments,services,hpa", "-n", ns)["items"] == []
