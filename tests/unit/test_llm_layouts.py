"""LLM training layouts through the API, `ringmaster plan`, the state machine and the worker pods:
CEL (offline, as the apiserver) and parse_manifest refusing the same layouts with the numbers,
the JSON contract's additions, DoesNotFit, and the layout in the pods' environment."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import ManifestError, TrainingJobSpec, find_condition, parse_manifest
from ringmaster.api.architecture import architecture_parameters
from ringmaster.cli import main
from ringmaster.controllers.trainingjob import status_plan
from ringmaster.manifests.training import LAYOUT_ENV
from tests.unit.test_api_bad_input import offline_admit
from tests.unit.training_world import TrainingWorld, job

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FSDP = EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml"
AUTO = EXAMPLES / "trainingjob-llama2-70b-auto-a100.yaml"
TPU = EXAMPLES / "trainingjob-maxtext-tpu-v5e.yaml"


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def fixed_layout_job(
    framework: str, sharding: str = "Optimizer", recompute: str = "Selective"
) -> dict[str, Any]:
    """The Llama 2 70B example at one layout (tensor 8, one stage, micro-batch 1, 128 sequences)
    and ``framework``, so that two plans of a setting's values run the same layout."""
    doc = copy.deepcopy(load(AUTO))
    doc["spec"]["framework"] = {"name": framework}
    doc["spec"]["parallelism"] = {
        "tensor": 8,
        "pipeline": 1,
        "context": 1,
        "sharding": sharding,
        "microBatchSize": 1,
        "globalBatchSize": 128,
        "activationRecompute": recompute,
    }
    return doc


def refusals(doc: dict[str, Any]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    crd = offline_admit(doc)
    try:
        parse_manifest(doc)
        python: list[tuple[str, str]] = []
    except ManifestError as exc:
        python = [(e.path, e.message) for e in exc.errors]
    return crd, python


# --- API -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FSDP, AUTO, TPU], ids=lambda p: p.name)
def test_llm_examples_pass_both(path):
    assert refusals(load(path)) == ([], [])


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda s: s["parallelism"].update(tensor=3), "spec.parallelism.tensor", "tensor 3"),
        (
            # 5 x 19 = 95: the first and the last cannot give up 15 layers of 5 each
            lambda s: s["parallelism"].update(pipeline=19),
            "spec.parallelism.pipeline",
            "pipeline 19 cannot stage layers 80",
        ),
        (
            lambda s: s["parallelism"].update(context=3),
            "spec.parallelism.context",
            "context 3: 2 x context must divide sequenceLength 4096",
        ),
        (
            lambda s: s["parallelism"].update(tensor=4, context=16),
            "spec.parallelism.context",
            "tensor 4 x context 16 x pipeline Auto does not divide the 32 accelerators",
        ),
        (
            lambda s: s["model"].update(fp8Recipe="Linear"),
            "spec.model.fp8Recipe",
            "fp8Recipe needs computePrecision: fp8",
        ),
        (
            lambda s: s["parallelism"].update(activationRecompute="Everything"),
            "spec.parallelism.activationRecompute",
            "",
        ),
        (
            lambda s: s["parallelism"].update(tensor=4, pipeline=16),
            "spec.parallelism",
            "tensor 4 x pipeline 16 does not divide the 32 accelerators",
        ),
        (
            lambda s: s["model"].update(parameters=50_000_000_000),
            "spec.model.parameters",
            "parameters 50000000000 differs by more than 3% from",
        ),
        (lambda s: s["parallelism"].update(sharding="ZeRO3"), "spec.parallelism.sharding", ""),
        (lambda s: s["parallelism"].update(tensor="auto"), "spec.parallelism.tensor", ""),
        (lambda s: s["parallelism"].update(tensor=0), "spec.parallelism.tensor", ""),
    ],
    ids=[
        "heads",
        "layers",
        "context-sequence",
        "context-accelerators",
        "fp8-recipe-without-fp8",
        "recompute-name",
        "accelerators",
        "parameters",
        "sharding",
        "lowercase-auto",
        "zero",
    ],
)
def test_bad_layouts_are_refused_by_crd_and_python_naming_the_numbers(change, field, words):
    doc = load(AUTO)
    change(doc["spec"])
    crd, python = refusals(doc)
    assert any(path.startswith(field) for _, path, _ in crd), crd
    assert python, "parse_manifest accepted what the CRD refuses"
    if words:
        assert any(words in message for _, path, message in crd if path == field), crd
        assert any(words in message for path, message in python), python


@pytest.mark.parametrize(
    ("layers", "change"),
    [
        (78, {"pipeline": 8}),  # 10 layers a stage, 9 on the first and the last
        (80, {"context": 2}),
        (80, {"activationRecompute": "SelectiveOp"}),
        (80, {"activationRecompute": "Minimal"}),
        (80, {"activationRecompute": "SaveDotExceptMlp"}),
    ],
    ids=["uneven-pipeline", "context", "selective-op", "minimal", "save-dot"],
)
def test_new_layout_fields_pass_both(layers, change):
    doc = load(AUTO)
    doc["spec"]["model"]["architecture"]["layers"] = layers
    doc["spec"]["parallelism"].update(change)
    assert refusals(doc) == ([], [])


def test_a_pipeline_whose_ends_cannot_absorb_the_remainder_is_refused_by_both():
    doc = load(AUTO)
    # 2 x 16 = 32: the first and the last would have to give up 15 layers of 2 each.
    doc["spec"]["model"]["architecture"]["layers"] = 17
    doc["spec"]["parallelism"]["pipeline"] = 16
    crd, python = refusals(doc)
    assert any("pipeline 16 cannot stage layers 17" in m for _, _, m in crd), crd
    assert python


def test_fp8_recipe_with_fp8_passes_both():
    doc = load(AUTO)
    doc["spec"]["accelerator"] = {"type": "nvidia-h100-80gb", "perWorker": 8}
    doc["spec"]["model"].update(computePrecision="fp8", fp8Recipe="AllMatmuls")
    assert refusals(doc) == ([], [])


def test_pipeline_staging_rule_is_the_engine_s_twin():
    from ringmaster.api.parallelism import pipeline_stages_layers
    from ringmaster.engine.llm_memory import valid_pipeline

    for layers in range(1, 140):
        for pipeline in range(0, 70):
            assert pipeline_stages_layers(layers, pipeline) == valid_pipeline(layers, pipeline)


def test_tensor_heads_message_names_both_numbers():
    doc = load(AUTO)
    doc["spec"]["parallelism"]["tensor"] = 3
    doc["spec"]["workers"] = 3  # 24 accelerators: 3 divides them, not the 64 heads
    crd, python = refusals(doc)
    messages = [m for _, p, m in crd if p == "spec.parallelism.tensor"]
    assert "tensor 3 does not divide attentionHeads 64" in messages
    assert ("spec.parallelism.tensor", "tensor 3 does not divide attentionHeads 64") in python


def test_tensor_must_stay_within_a_gpu_host():
    doc = load(FSDP)
    doc["spec"]["accelerator"]["perWorker"] = 4
    doc["spec"]["workers"] = 4
    doc["spec"]["parallelism"]["tensor"] = 8
    crd, python = refusals(doc)
    assert any("stays within a host" in m for _, _, m in crd), crd
    assert python


def test_parameters_and_batch_are_derivable():
    doc = load(AUTO)
    assert "parameters" not in doc["spec"]["model"]
    assert "batchSizePerAccelerator" not in doc["spec"]["model"]
    spec = parse_manifest(doc).spec
    assert spec.model.parameters is None
    derived = architecture_parameters(spec.model.architecture)
    doc["spec"]["model"]["parameters"] = derived + derived // 50  # within 3%
    assert refusals(doc) == ([], [])
    doc["spec"]["model"]["parameters"] = "70B"  # a string: the operator checks it
    assert offline_admit(doc) == []


def test_without_architecture_parameters_and_batch_stay_required():
    doc = load(EXAMPLES / "trainingjob-bert-large-auto.yaml")
    del doc["spec"]["model"]["parameters"]
    crd, python = refusals(doc)
    assert any(p == "spec.model.parameters" for _, p, _ in crd) and python
    doc = load(EXAMPLES / "trainingjob-bert-large-auto.yaml")
    del doc["spec"]["model"]["batchSizePerAccelerator"]
    crd, python = refusals(doc)
    assert any(p == "spec.model.batchSizePerAccelerator" for _, p, _ in crd) and python
    doc = load(EXAMPLES / "trainingjob-bert-large-auto.yaml")
    doc["spec"]["parallelism"] = {}
    crd, python = refusals(doc)
    assert any(p == "spec.parallelism" for _, p, _ in crd) and python


# --- `ringmaster plan` ----------------------------------------------------------------------------

LAYOUT_KEYS = {
    "tensor",
    "pipeline",
    "context",
    "data",
    "sharding",
    "microBatchSize",
    "virtualPipelineStages",
    "activationRecompute",
}
MEMORY_KEYS = {"weights", "gradients", "optimizer", "activations", "total", "capacity"}


def plan(capsys, *args):
    code = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_has_the_layout_contract(capsys):
    code, out, err = plan(capsys, AUTO, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["layout"]) >= LAYOUT_KEYS
    assert doc["fits"] is True and doc["reason"] is None
    assert set(doc["memoryPerAcceleratorBytes"]) >= MEMORY_KEYS
    mem = doc["memoryPerAcceleratorBytes"]
    assert mem["total"] <= mem["capacity"]
    assert doc["tokensPerSecond"] > 0 and 0 < doc["mfu"] < 1
    assert doc["alternatives"] and all(a["why"] for a in doc["alternatives"])
    layout = doc["layout"]
    assert layout["tensor"] * layout["pipeline"] * layout["data"] == 32
    for s in doc["strategies"].values():
        assert s["stepSeconds"] > 0


def test_a_model_that_fits_nowhere_is_still_a_plan(tmp_path, capsys):
    doc = load(AUTO)
    doc["spec"]["workers"] = 1
    doc["spec"]["accelerator"] = {"type": "nvidia-tesla-a100", "perWorker": 8}
    path = tmp_path / "too-big.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["fits"] is False
    assert "per accelerator" in result["reason"] and "nvidia-tesla-a100 has" in result["reason"]
    code, out, _ = plan(capsys, path)
    assert code == 0 and "DOES NOT FIT" in out


def test_plan_table_shows_layout_memory_and_alternatives(capsys):
    code, out, _ = plan(capsys, AUTO)
    assert code == 0
    assert "layout: TP" in out and "memory per accelerator GiB" in out and "MFU" in out
    assert "alternative" in out


def llama3_405b_on_8192_h100() -> dict[str, Any]:
    """Llama 3 405B's pre-training layout (Dubey et al. 2024, Table 4): 1,024 hosts of 8 H100,
    TP8 CP1 PP16 DP64, 126 layers over 16 stages, 2,048 sequences of 8,192 tokens."""
    doc = load(FSDP)
    doc["metadata"]["name"] = "llama3-405b"
    doc["spec"]["workers"] = 1024
    doc["spec"]["model"] = {
        "architecture": {
            "layers": 126,
            "hiddenSize": 16384,
            "attentionHeads": 128,
            "kvHeads": 8,
            "ffnHiddenSize": 53248,
            "ffnType": "Gated",
            "vocabSize": 128256,
            "sequenceLength": 8192,
        }
    }
    doc["spec"]["parallelism"] = {
        "tensor": 8,
        "context": 1,
        "pipeline": 16,
        "sharding": "Optimizer",
        "microBatchSize": 1,
        "globalBatchSize": 2048,
    }
    return doc


def test_llama3_405b_on_8192_h100_plans_with_uneven_stages(tmp_path, capsys):
    doc = llama3_405b_on_8192_h100()
    assert refusals(doc) == ([], [])
    path = tmp_path / "405b.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["fits"] is True
    layout = result["layout"]
    assert (layout["tensor"], layout["context"], layout["pipeline"], layout["data"]) == (
        8,
        1,
        16,
        64,
    )


def test_plan_refuses_a_context_that_cannot_split_the_sequence(tmp_path, capsys):
    doc = load(FSDP)
    doc["spec"]["parallelism"]["context"] = 3
    path = tmp_path / "cp3.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = plan(capsys, path)
    assert code == 2
    assert "spec.parallelism.context" in err
    assert "context 3: 2 x context must divide sequenceLength 8192" in err


def test_plan_json_shows_a_context_parallel_layout(tmp_path, capsys):
    doc = load(FSDP)
    doc["spec"]["parallelism"]["context"] = 2
    path = tmp_path / "cp2.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["layout"]["context"] == 2 and result["layout"]["data"] == 8
    code, out, _ = plan(capsys, path)
    assert code == 0 and "layout: TP1 CP2 PP1 DP8" in out


def test_a_batch_that_divides_no_layout_is_invalid_input(tmp_path, capsys):
    doc = load(FSDP)
    doc["spec"]["parallelism"]["globalBatchSize"] = 33  # 16 replicas do not divide 33
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = plan(capsys, path)
    assert code == 2
    # The CRD's rule (and its Python twin) refuses it before the engine is asked.
    assert "spec.parallelism.globalBatchSize" in err
    assert (
        "global batch 33 is not a multiple of micro-batch 1 x data-parallel 16 = 16 "
        "(data-parallel 16 = 16 accelerators / (tensor 1 x context 1 x pipeline 1))"
    ) in err


# --- status, DoesNotFit, environment ------------------------------------------------------------


def _spec(path: Path, **changes: Any) -> TrainingJobSpec:
    doc = copy.deepcopy(load(path))
    doc["spec"].update(changes)
    return TrainingJobSpec.model_validate(doc["spec"])


def real_planner(spec, machine_type, reducers=None):
    return status_plan(spec, machine_type, reducers)


def test_status_plan_carries_the_layout():
    plan_ = status_plan(_spec(AUTO), "a2-ultragpu-8g", None).to_k8s()
    assert plan_["layout"].startswith("TP") and plan_["fits"] is True
    assert plan_["tensor"] * plan_["pipeline"] * plan_["data"] == 32
    assert plan_["mfu"] > 0 and plan_["tokensPerSecond"] > 0
    assert plan_["memoryPerAcceleratorBytes"]["total"] > 0


def test_auto_layout_reaches_every_worker_pod():
    world = TrainingWorld({"a100-ultragpu-8g": 4})
    decision = world.decide(job(_spec(AUTO), name="llama"), planner=real_planner)
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert len(pods) == 4
    plan_ = decision.status.plan
    assert plan_ is not None and plan_.layout and plan_.fits
    for pod in pods:
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        for name, _ in LAYOUT_ENV:
            assert name in env
        assert int(env["RINGMASTER_TENSOR_PARALLEL"]) == plan_.tensor
        assert env["RINGMASTER_GLOBAL_BATCH_SIZE"] == "128"


def test_does_not_fit_waits_with_the_numbers_and_creates_nothing():
    too_big = _spec(AUTO, workers=2, accelerator={"type": "nvidia-tesla-a100", "perWorker": 8})
    world = TrainingWorld({"a100-highgpu-8g": 4})
    decision = world.decide(job(too_big, name="llama"), planner=real_planner)
    assert decision.create == [] and decision.apply == []
    cond = find_condition(decision.status.conditions, "Schedulable")
    assert cond is not None and cond.status == "False" and cond.reason == "DoesNotFit"
    assert "GiB per accelerator" in cond.message and "nvidia-tesla-a100 has" in cond.message
    assert [e.reason for e in decision.events] == ["DoesNotFit"]
    assert decision.status.phase == "Pending"


def test_a_job_without_architecture_gets_no_layout_env():
    from tests.unit.training_world import spec

    decision = TrainingWorld().decide(job(spec()))
    pod = next(o for o in decision.create if o["kind"] == "Pod")
    names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
    assert not names & {n for n, _ in LAYOUT_ENV}


def _written(tmp_path: Path, doc: dict[str, Any], name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_job_without_gradient_all_reduce_shows_one_row_and_no_reducers(capsys):
    # DP 1 (the 70B example) and full sharding (the FSDP example): nothing for a reduction
    # server to replace, so no reducer sizing and no pair of identical rows.
    for path in (AUTO, FSDP):
        code, out, err = plan(capsys, path)
        assert code == 0, err
        assert "reducers:" not in out and "ReductionServer" not in out and "scaling" not in out
        header = next(line for line in out.splitlines() if line.startswith("step s"))
        assert header.split()[:4] == ["step", "s", "tokens/s", "MFU"]
        assert "$/M tokens" in header
        code, out, _ = plan(capsys, path, "-o", "json")
        assert set(json.loads(out)["strategies"]) == {"Ring"}


def test_fully_sharded_layouts_never_get_reducers(tmp_path, capsys):
    # 32 H100 fully sharded: the engine once picked a 100-reducer pool for FSDP's reduce-scatter.
    doc = load(FSDP)
    doc["spec"]["workers"] = 4
    code, out, err = plan(capsys, _written(tmp_path, doc), "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["layout"]["sharding"] == "Full" and result["chosenStrategy"] == "Ring"
    assert set(result["strategies"]) == {"Ring"}


def test_a_gradient_all_reduce_keeps_the_ring_and_reduction_server_rows(tmp_path, capsys):
    doc = load(AUTO)
    doc["spec"]["workers"] = 8
    doc["spec"]["parallelism"].update(tensor=8, pipeline=1, sharding="Optimizer")
    code, out, err = plan(capsys, _written(tmp_path, doc))
    assert code == 0, err
    assert "data-parallel: gradient all-reduce over 8 replicas" in out
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("Ring", "Reduction"))]
    assert rows == ["Ring", "ReductionServer"]
    assert "reducers: " in out and "chosen: " in out


def test_per_million_tokens_is_the_hourly_cost_over_the_tokens_of_an_hour():
    from ringmaster.planning.render import per_million_tokens

    assert per_million_tokens(36.0, 10_000.0) == pytest.approx(36.0 / 36e6 * 1e6)
    assert per_million_tokens(36.0, 0.0) is None


def test_a_workers_sweep_replans_the_layout_at_each_point(capsys):
    code, out, err = plan(capsys, AUTO, "--sweep", "workers=1..8", "-o", "json")
    assert code == 0, err
    points = json.loads(out)["sweep"]["points"]
    assert [p["workers"] for p in points] == list(range(1, 9))
    planned = [p for p in points if "layout" in p]
    # The layout is searched at each size: tensor x pipeline x data is the accelerator count.
    for p in planned:
        layout = p["layout"]
        assert layout["tensor"] * layout["pipeline"] * layout["data"] == p["accelerators"]
        assert p["tokensPerSecond"] > 0 and 0 < p["mfu"] < 1
        hourly, per_m = p["costPerHourUSD"], p["costPerMillionTokensUSD"]
        assert per_m == pytest.approx(hourly / 3600 / p["tokensPerSecond"] * 1e6, rel=1e-4)
    assert len({p["layout"]["pipeline"] for p in planned}) > 1  # not one layout stretched
    # 3 hosts (24 A100): 80 layers over pipeline stages that do not divide them (3 of 27, 27,
    # 26, or 6 of 12, 14, 14, 14, 14, 12), the ends holding what the middle stages leave.
    three = points[2]
    assert 80 % three["layout"]["pipeline"] != 0
    # Not monotonic (6 hosts divide 80 layers into no better pipeline than 5 do), but 8 hosts
    # run fastest.
    tokens = [p["tokensPerSecond"] for p in planned if p["fits"]]
    assert tokens[-1] == max(tokens) and tokens[0] < tokens[-1]


def test_a_workers_sweep_table_names_the_layout_per_point(capsys):
    code, out, err = plan(capsys, FSDP, "--sweep", "workers=1,2,4")
    assert code == 0, err
    lines = out.splitlines()
    assert "layout planned at each point" in lines[0]
    assert lines[1].split()[:3] == ["workers", "accelerators", "layout"]
    for column in ("tokens/s", "MFU", "step s", "$/hour", "$/M tokens"):
        assert column in lines[1]
    assert [line.split()[2] for line in lines[2:]] == ["TP1", "TP1", "TP1"]
    assert [line.split()[4] for line in lines[2:]] == ["DP8", "DP16", "DP32"]


def test_context_parallel_layout_reaches_every_worker_pod():
    world = TrainingWorld({"a100-ultragpu-8g": 4})
    doc = copy.deepcopy(load(AUTO))
    doc["spec"]["parallelism"].update(tensor=8, context=2, pipeline=2)
    spec = TrainingJobSpec.model_validate(doc["spec"])
    decision = world.decide(job(spec, name="llama-cp"), planner=real_planner)
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert pods and decision.status.plan.context == 2
    assert decision.status.plan.layout == "TP8 CP2 PP2 DP1"
    for pod in pods:
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["RINGMASTER_CONTEXT_PARALLEL"] == "2"
        assert env["RINGMASTER_DATA_PARALLEL"] == "1"


def test_activation_bound_refusal_names_the_levers_that_shrink_activations(tmp_path, capsys):
    doc = load(FSDP)
    doc["spec"]["model"]["architecture"]["sequenceLength"] = 131072
    doc["spec"]["parallelism"].update(activationRecompute="None", globalBatchSize=16)
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["fits"] is False
    reason = result["reason"]
    assert "activations dominate" in reason
    assert "activationRecompute: Full" in reason and "sharding" not in reason.split("try")[1]


def test_state_bound_refusal_names_sharding_tensor_or_pipeline(tmp_path, capsys):
    doc = load(AUTO)
    doc["spec"]["parallelism"].update(sharding="None", tensor=1, pipeline=1, context=1)
    path = tmp_path / "state.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 0, err
    reason = json.loads(out)["reason"]
    assert "weights, gradients and optimizer dominate" in reason
    tips = reason.split("; try ")[1]
    assert tips.startswith(("sharding: Full", "tensor: 2", "pipeline: 2"))


def test_an_llm_sweep_of_another_field_is_refused_in_one_line(capsys):
    code, _, err = plan(capsys, AUTO, "--sweep", "reducers=1..4")
    assert code == 2
    assert "known: workers, perWorker" in err and "\n" not in err.strip()


def test_an_llm_sweep_draws_its_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "sweep.png"
    code, _, err = plan(capsys, FSDP, "--sweep", "workers=1..2", "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fixed_context_degree_divides_the_data_parallel_replicas(tmp_path, capsys):
    # 16 H100, TP1 CP2 PP1: 8 data-parallel replicas; 12 sequences do not split over them.
    doc = load(FSDP)
    doc["spec"]["parallelism"].update(context=2, globalBatchSize=12)
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = plan(capsys, path)
    assert code == 2
    assert (
        "global batch 12 is not a multiple of micro-batch 1 x data-parallel 8 = 8 "
        "(data-parallel 8 = 16 accelerators / (tensor 1 x context 2 x pipeline 1))"
    ) in err
    doc["spec"]["parallelism"].update(globalBatchSize=24)
    path.write_text(yaml.safe_dump(doc))
    code, _, err = plan(capsys, path)
    assert code == 0, err
