"""LLM endpoints without a cluster: `ringmaster plan` (table and JSON), the decision (Deployment,
env, status, CapacityMet, HPA) and an endpoint no replica can hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ringmaster.api import InferenceEndpointSpec, parse_manifest
from ringmaster.cli import main
from ringmaster.manifests.inference import (
    KV_CACHE_DTYPE_ENV,
    MAX_MODEL_LEN_ENV,
    MAX_NUM_SEQS_ENV,
    OUTPUT_TOKENS_PER_SECOND_METRIC,
    TENSOR_PARALLEL_ENV,
)
from tests.unit.test_inference_lifecycle import applied, condition, decide, reasons

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LLAMA_8B = EXAMPLES / "inferenceendpoint-llama3-8b-fp8-h100.yaml"
LLAMA_70B_TP4 = EXAMPLES / "inferenceendpoint-llama3-70b-a100-tp4.yaml"
LLAMA_70B_INT4 = EXAMPLES / "inferenceendpoint-llama3-70b-int4-a100.yaml"
LLM_SIZES = {"h100-highgpu-8g": 2, "a100-ultragpu-8g": 4}
LLM_KEYS = {
    "outputTokensPerSecondPerReplica",
    "ttftP99Milliseconds",
    "tpotP99Milliseconds",
    "maxConcurrentSequences",
    "kvCacheBytesPerToken",
    "weightsBytesPerAccelerator",
    "replicas",
    "replicasNeeded",
    "feasible",
    "reason",
}


def spec_of(path: Path, **changes) -> InferenceEndpointSpec:
    body = yaml.safe_load(path.read_text())
    spec = body["spec"]
    for key, value in changes.items():
        *parents, leaf = key.split("__")
        node = spec
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return InferenceEndpointSpec.model_validate(spec)


def plan_json(capsys, path: Path | str) -> dict:
    assert main(["plan", "-o", "json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_json_has_the_llm_figures(capsys):
    out = plan_json(capsys, LLAMA_8B)
    assert set(out) >= LLM_KEYS
    assert out["feasible"] is True and out["reason"] is None
    assert out["kvCacheBytesPerToken"] == 2 * 32 * 8 * 128 * 1  # FP8 cache, GQA 8 KV heads
    assert out["weightsBytesPerAccelerator"] == pytest.approx(8.03e9, rel=1e-3)
    assert out["ttftP99Milliseconds"] <= 300 and out["tpotP99Milliseconds"] <= 25
    assert out["replicas"] == out["replicasNeeded"] >= 1
    assert out["tensorParallel"] == 1 and out["maxModelLen"] == 8192
    tp4 = plan_json(capsys, LLAMA_70B_TP4)
    assert tp4["feasible"] and tp4["tensorParallel"] == 4
    assert tp4["kvCacheBytesPerToken"] == 327_680
    assert tp4["weightsBytesPerAccelerator"] == pytest.approx(70.55e9 * 2 / 4, rel=1e-3)


def test_an_infeasible_endpoint_is_still_a_plan(capsys, tmp_path):
    bf16 = tmp_path / "bf16.yaml"
    bf16.write_text(LLAMA_70B_INT4.read_text().replace("precision: INT4", "precision: BF16"))
    out = plan_json(capsys, bf16)
    assert out["feasible"] is False and out["replicasNeeded"] is None
    assert out["reason"].startswith("Llama-3-70B in BF16 needs 131 GiB of weights; one ")
    assert out["reason"].endswith("use perReplica: 2 or INT4")
    assert main(["plan", str(bf16)]) == 0
    table = capsys.readouterr().out
    assert "infeasible" in table and "target NOT met: Llama-3-70B in BF16 needs 131 GiB" in table
    assert plan_json(capsys, LLAMA_70B_INT4)["feasible"] is True  # the same model in INT4


def test_plan_table_names_the_bottleneck(capsys, tmp_path):
    assert main(["plan", str(LLAMA_70B_TP4)]) == 0
    out = capsys.readouterr().out
    assert "tensor parallel 4" in out and "TTFT p99 ms" in out and "TPOT p99 ms" in out
    # the TPOT target binds, and the plan says which resource of the step does (the HBM that
    # streams the weights and the KV cache, or compute where prompts' chunks fill the steps)
    assert re.search(r"TPOT target \((HBM bandwidth in decode|compute, BF16)", out)
    tight = tmp_path / "tight.yaml"
    tight.write_text(
        LLAMA_8B.read_text().replace(
            "timeToFirstTokenP99Milliseconds: 300", "timeToFirstTokenP99Milliseconds: 45"
        )
    )
    assert main(["plan", str(tight)]) == 0
    assert "TTFT target (compute in prefill" in capsys.readouterr().out
    assert main(["plan", "--sweep", "slo.targetRequestsPerSecond=1:10:3", str(LLAMA_8B)]) == 2


def test_the_deployment_carries_the_serving_settings_and_the_status_the_figures():
    spec = spec_of(LLAMA_70B_TP4)
    decision = decide(spec, sizes=LLM_SIZES)
    plan = json.loads(json.dumps(decision.status.plan.to_k8s()))
    deployment = applied(decision, "Deployment")
    assert deployment["spec"]["replicas"] == decision.desired_replicas == plan["replicas"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[TENSOR_PARALLEL_ENV] == "4"
    assert env[MAX_MODEL_LEN_ENV] == "8192"
    assert int(env[MAX_NUM_SEQS_ENV]) == plan["maxNumSeqs"] >= 1
    assert plan["kvCachePrecision"] == "BF16" and env[KV_CACHE_DTYPE_ENV] == "auto"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert plan["outputTokensPerSecond"] == pytest.approx(
        decision.desired_replicas * plan["outputTokensPerSecondPerReplica"], rel=1e-5
    )
    assert plan["ttftP99Milliseconds"] <= 2000 and plan["tpotP99Milliseconds"] <= 60
    met = condition(decision, "CapacityMet")
    assert met.status == "True" and "output tokens/s" in met.message
    assert met.message.endswith("binds")  # which target binds the per-replica rate
    assert decision.status.pool == "a100-ultragpu-8g"


def test_a_new_target_rolls_no_llm_pod():
    low = decide(spec_of(LLAMA_8B), sizes=LLM_SIZES)
    high = decide(spec_of(LLAMA_8B, slo__targetRequestsPerSecond=300), sizes=LLM_SIZES)
    assert high.desired_replicas > low.desired_replicas
    template = [applied(d, "Deployment")["spec"]["template"] for d in (low, high)]
    assert template[0] == template[1]


def test_the_hpa_targets_output_tokens_when_the_slo_does():
    spec = spec_of(LLAMA_70B_TP4, autoscaling={"enabled": True})
    decision = decide(spec, sizes=LLM_SIZES)
    hpa = applied(decision, "HorizontalPodAutoscaler")
    pods = hpa["spec"]["metrics"][0]["pods"]
    assert pods["metric"]["name"] == OUTPUT_TOKENS_PER_SECOND_METRIC
    per_replica = decision.status.plan.output_tokens_per_second_per_replica
    assert pods["target"]["averageValue"] == str(int(per_replica))


def test_an_endpoint_no_replica_can_hold_waits_and_creates_nothing():
    spec = spec_of(LLAMA_70B_INT4, precision="BF16")
    decision = decide(spec, sizes=LLM_SIZES)
    assert decision.apply == [] and decision.hold_replicas is None
    assert decision.status.phase == "Pending"
    ready = condition(decision, "Ready")
    assert ready.status == "False" and ready.reason == "ModelDoesNotFit"
    assert "needs 131 GiB of weights" in ready.message
    assert reasons(decision) == ["CapacityNotMet"]
    again = decide(spec, decision.status, sizes=LLM_SIZES)
    assert again.events == []  # the reason is reported once


def test_parse_manifest_refuses_what_the_crd_refuses():
    body = yaml.safe_load(LLAMA_8B.read_text())
    body["spec"]["slo"].pop("timePerOutputTokenP99Milliseconds")
    with pytest.raises(Exception, match="timePerOutputTokenP99Milliseconds"):
        parse_manifest(body)
    body = yaml.safe_load(LLAMA_8B.read_text())
    body["spec"]["slo"]["targetOutputTokensPerSecond"] = 1000
    with pytest.raises(Exception, match="exactly one of targetRequestsPerSecond"):
        parse_manifest(body)
    body = yaml.safe_load(LLAMA_8B.read_text())
    body["spec"]["tokens"]["inputP99"] = 10
    with pytest.raises(Exception, match="inputP99 must be at least inputMean"):
        parse_manifest(body)


def _unreachable(tmp_path: Path) -> Path:
    """Llama-3-70B in BF16 on two H100s with a 20 ms TPOT p99: no rate meets it."""
    body = yaml.safe_load(LLAMA_70B_TP4.read_text())
    body["metadata"]["name"] = "unreachable"
    body["spec"]["accelerator"] = {"type": "nvidia-h100-80gb", "perReplica": 2}
    body["spec"]["slo"]["timePerOutputTokenP99Milliseconds"] = 20
    body["spec"]["maxReplicas"] = 4
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_an_unreachable_target_prints_the_offline_throughput_and_the_alternatives(capsys, tmp_path):
    path = _unreachable(tmp_path)
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "target NOT met: TPOT p99 target 20 ms is below the" in out
    assert "offline maximum per replica (no latency target):" in out
    assert "nearest alternatives that meet the target (Pareto set, cheapest first):" in out
    doc = plan_json(capsys, path)
    assert doc["feasible"] is False and doc["replicasNeeded"] is None
    assert doc["offlineOutputTokensPerSecondPerReplica"] > 0  # never a capacity of 0
    assert len(doc["loadCurve"]) == 10
    alternatives = doc["alternatives"]
    assert alternatives, "a one-change variant meets a 20 ms TPOT"
    for a in alternatives:
        assert a["tpotP99Milliseconds"] <= 20 and a["ttftP99Milliseconds"] <= 2000
        assert a["fitsMaxReplicas"] == (a["replicas"] <= 4)
    # a Pareto set: no alternative is at least as good as another on all four and better on one
    keys = [
        (a["replicas"], a["ttftP99Milliseconds"], a["tpotP99Milliseconds"], a["costPerHourUSD"])
        for a in alternatives
    ]
    for i, a in enumerate(keys):
        for j, b in enumerate(keys):
            assert i == j or not (all(x <= y for x, y in zip(b, a, strict=True)) and a != b)
    costs = [a["costPerHourUSD"] for a in alternatives]
    assert costs == sorted(costs)


def test_plot_draws_the_load_curve_with_both_slo_lines(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from ringmaster.planning import command

    drawn = {}

    def keep(fig, plt, path):  # the figure as it is saved
        drawn["axes"] = fig.axes
        fig.savefig(path)
        plt.close(fig)

    monkeypatch.setattr(command, "_save", keep)
    png = tmp_path / "curve.png"
    assert main(["plan", str(LLAMA_8B), "--plot", str(png)]) == 0
    assert png.stat().st_size > 0
    capsys.readouterr()
    doc = plan_json(capsys, LLAMA_8B)
    ttft_axis, tpot_axis = drawn["axes"]
    for axis, target in ((ttft_axis, 300.0), (tpot_axis, 25.0)):
        labels = {line.get_label(): line for line in axis.get_lines()}
        slo = labels[f"{'TTFT' if axis is ttft_axis else 'TPOT'} p99 target"]
        assert list(slo.get_ydata()) == [target, target]  # the SLO line, in ms
        hpa = labels["sustainable rate (HPA target)"]
        assert hpa.get_xdata()[0] == pytest.approx(doc["perReplicaRequestsPerSecond"], rel=1e-5)
        curve = labels[f"{'TTFT' if axis is ttft_axis else 'TPOT'} p99"]
        assert len(curve.get_xdata()) == 10
    # a non-LLM endpoint without --sweep has nothing to draw
    resnet = LLAMA_8B.parent / "inferenceendpoint-resnet50-int8-t4.yaml"
    assert main(["plan", str(resnet), "--plot", str(png)]) == 2


def test_a_precision_the_accelerator_lacks_waits_precision_unsupported_not_model_does_not_fit():
    # Llama 3 8B fits one H100 many times over; it is FP4's tensor cores the H100 lacks.
    decision = decide(spec_of(LLAMA_8B, precision="FP4"), sizes=LLM_SIZES)
    ready, capacity = condition(decision, "Ready"), condition(decision, "CapacityMet")
    assert (ready.status, ready.reason) == ("False", "PrecisionUnsupported")
    assert capacity.reason == "PrecisionUnsupported"
    assert "FP4 tensor cores" in ready.message
    assert decision.apply == []


def test_an_object_the_api_server_refuses_is_reported_not_retried_in_a_loop():
    from ringmaster.controllers.inference_lifecycle import refused_apply
    from tests.unit.test_inference_lifecycle import NOW

    decision = decide(spec_of(LLAMA_8B), sizes=LLM_SIZES)
    refused = refused_apply(
        decision, "Service", "llama3-8b", "Only one reference can have Controller set", NOW
    )
    ready = condition(refused, "Ready")
    assert (ready.status, ready.reason) == ("False", "ApplyRefused")
    assert "Service llama3-8b" in ready.message and "Only one reference" in ready.message
    assert [e.reason for e in refused.events] == ["ApplyRefused"]
    assert refused.apply == []


def test_the_operator_plans_a_spec_once_until_the_catalog_changes():
    """An endpoint is reconciled on every look; its plan (0.05-0.15 s for an LLM) is cached by
    spec, handed out as a copy, and dropped when the catalog changes."""
    import yaml

    from ringmaster.api import parse_manifest
    from ringmaster.controllers import inferenceendpoint as controller

    spec = parse_manifest(yaml.safe_load(LLAMA_8B.read_text())).spec
    controller._cached_plan.cache_clear()
    first = controller.plan(spec)
    first["replicas"] = -1  # a caller's change never reaches the cache
    second = controller.plan(spec)
    assert controller._cached_plan.cache_info().hits == 1
    assert second["replicas"] >= 1
    api = controller.InferenceController.__new__(controller.InferenceController)
    api.indexes = {}
    controller.InferenceController.catalog_changed(api)
    assert controller._cached_plan.cache_info().currsize == 0
