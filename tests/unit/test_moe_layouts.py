"""A mixture of experts through the API, `ringmaster plan` and the operator's pods: expert
parallelism's rules (CEL and Python twins), the plan's MoE figures and the pods'
RINGMASTER_EXPERT_PARALLEL."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import TrainingJobSpec, parse_manifest
from ringmaster.cli import main
from ringmaster.manifests.training import LAYOUT_ENV
from tests.unit.test_api_bad_input import offline_admit
from tests.unit.test_llm_layouts import real_planner
from tests.unit.training_world import TrainingWorld, job

pytestmark = pytest.mark.unit

QWEN = Path(__file__).resolve().parents[2] / "examples" / "trainingjob-qwen3-30b-a3b-h100.yaml"


def load() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(QWEN.read_text())
    return doc


def plan_json_and_table(doc: dict[str, Any], path: Path, capsys: Any) -> tuple[Any, str]:
    """``ringmaster plan`` of ``doc`` (written to ``path``): its JSON plan and its table."""
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", "-o", "json", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert main(["plan", str(path)]) == 0
    return (out[0] if isinstance(out, list) else out), capsys.readouterr().out


def _refusals(doc: dict[str, Any]) -> tuple[list[str], str]:
    """What the CRD (offline, its CEL) and parse_manifest say about ``doc``."""
    crd = [str(e) for e in offline_admit(doc)]
    try:
        parse_manifest(doc)
        python = ""
    except ValueError as exc:
        python = str(exc)
    return crd, python


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expert": 3}, "parallelism.expert must divide model.architecture.experts"),
        (
            {"expert": 16, "pipeline": 1, "context": 1},
            "expert 16 x expertTensor Auto x pipeline 1 does not divide the 8 accelerators",
        ),
        (
            {"expert": 4, "expertTensor": 4, "pipeline": 1},
            "expert 4 x expertTensor 4 x pipeline 1 does not divide the 8 accelerators",
        ),
    ],
)
def test_expert_rules_refuse_at_apply_and_in_python_alike(change, message) -> None:
    doc = copy.deepcopy(load())
    doc["spec"]["parallelism"].update(change)
    crd, python = _refusals(doc)
    assert any("parallelism.expert" in e for e in crd), crd
    assert message in python


def test_expert_parallelism_on_a_dense_model_is_refused() -> None:
    doc = copy.deepcopy(load())
    arch = doc["spec"]["model"]["architecture"]
    for key in ("experts", "activeExperts", "expertFfnHiddenSize"):
        del arch[key]
    doc["spec"]["parallelism"]["expert"] = 2
    crd, python = _refusals(doc)
    assert crd and "parallelism.expert must divide" in python


def test_the_global_batch_rule_does_not_divide_by_expert() -> None:
    # 8 GPUs, tensor 1, context 1, pipeline 1: data 8 whatever expert is (Megatron carves EP
    # out of data), so a global batch of 8 x 1 is accepted with expert 8.
    doc = copy.deepcopy(load())
    doc["spec"]["parallelism"].update(
        expert=8, pipeline=1, context=1, microBatchSize=1, globalBatchSize=8
    )
    crd, python = _refusals(doc)
    assert not crd and not python


def test_plan_json_reports_total_and_active_parameters_and_the_all_to_all(capsys, tmp_path) -> None:
    # expert parallelism pinned: left to the engine, one host of H100s now keeps every expert
    # on each rank (a dropless layer's host sync is paid per layer and micro-batch on a GPU,
    # so the search prefers few layers per GPU: engine.frameworks.MEGATRON_MOE_SYNC_SECONDS)
    doc = copy.deepcopy(load())
    doc["spec"]["parallelism"]["expert"] = 4
    pinned = tmp_path / "qwen-ep4.yaml"
    pinned.write_text(yaml.safe_dump(doc))
    assert main(["plan", "-o", "json", str(pinned)]) == 0
    out = json.loads(capsys.readouterr().out)
    plan = out[0] if isinstance(out, list) else out
    moe = plan["moe"]
    assert moe["totalParameters"] == pytest.approx(30.5e9, rel=0.01)
    assert moe["activeParameters"] == pytest.approx(3.35e9, rel=0.01)
    assert moe["expertParallel"] == plan["layout"]["expert"] >= 1
    assert 0 < moe["allToAllShare"] < 1


def test_plan_table_shows_the_mixture(capsys) -> None:
    assert main(["plan", str(QWEN)]) == 0
    out = capsys.readouterr().out
    assert "mixture of experts: 30.53B total, 3.35B active (8 of 128 experts" in out
    assert "dispatch/combine all-to-all" in out


def test_expert_parallel_degree_reaches_every_worker_pod() -> None:
    assert ("RINGMASTER_EXPERT_PARALLEL", "expert") in LAYOUT_ENV
    world = TrainingWorld({"h100-highgpu-8g": 1})
    doc = copy.deepcopy(load())
    doc["spec"]["parallelism"].update(expert=4, tensor=2, pipeline=1, context=1)
    spec = TrainingJobSpec.model_validate(doc["spec"])
    decision = world.decide(job(spec, name="qwen-ep"), planner=real_planner)
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert pods and decision.status.plan.expert == 4
    assert "EP4" in (decision.status.plan.layout or "")
    for pod in pods:
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["RINGMASTER_EXPERT_PARALLEL"] == "4"
        assert env["RINGMASTER_DATA_PARALLEL"] == "4"
        # each expert over the tensor degree or folded onto one rank: what the plan chose
        assert decision.status.plan.expert_tensor in (1, 2)
        assert env["RINGMASTER_EXPERT_TENSOR_PARALLEL"] == str(decision.status.plan.expert_tensor)


def test_cuda_graph_is_megatron_only_at_apply_and_in_the_plan(capsys, tmp_path) -> None:
    """spec.framework.cudaGraph: refused by the CRD's CEL and the API for another framework; a
    full iteration takes the dropless layers' host syncs out of the plan, which names them
    otherwise."""
    doc = copy.deepcopy(load())
    doc["spec"]["framework"] = {"name": "Torchtitan", "cudaGraph": "FullIteration"}
    crd, python = _refusals(doc)
    assert any("cudaGraph" in m for m in crd) and "applies to Megatron only" in python
    steps = {}
    for graph in ("None", "FullIteration"):
        doc["spec"]["framework"] = {"name": "Megatron", "cudaGraph": graph}
        doc["spec"]["parallelism"]["expert"] = 4
        plan, text = plan_json_and_table(doc, tmp_path / f"qwen-{graph}.yaml", capsys)
        steps[graph] = plan["moe"]["hostSyncSecondsPerLayer"]
        assert ("a dropless MoE layer's host sync" in text) == (graph == "None")
        assert f"CUDA graphs {graph} (spec.framework)" in text
    assert steps["None"] > 0 and steps["FullIteration"] == 0


def test_the_cuda_graph_setting_reaches_every_worker_pod() -> None:
    """spec.framework.cudaGraph is in status.plan and the workers' RINGMASTER_CUDA_GRAPH (the
    launcher's --cuda-graph-impl); a Megatron job that names none runs eagerly ("None")."""
    for given, expected in ((None, "None"), ("FullIteration", "FullIteration")):
        world = TrainingWorld({"h100-highgpu-8g": 1})
        doc = copy.deepcopy(load())
        doc["spec"]["parallelism"].update(expert=4, tensor=2, pipeline=1, context=1)
        doc["spec"]["framework"] = {"name": "Megatron"}
        if given is not None:
            doc["spec"]["framework"]["cudaGraph"] = given
        spec = TrainingJobSpec.model_validate(doc["spec"])
        decision = world.decide(job(spec, name="qwen-graphs"), planner=real_planner)
        pods = [o for o in decision.create if o["kind"] == "Pod"]
        assert pods and decision.status.plan.cuda_graph == expected
        for pod in pods:
            env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
            assert env["RINGMASTER_CUDA_GRAPH"] == expected


def test_torchtitans_plan_pays_and_names_its_host_sync_above_one_rank(capsys, tmp_path) -> None:
    """Torchtitan's expert-parallel dispatchers read their counts back (Megatron-Core's fitted
    sync, carried): a plan at expert 4 pays it and names where it comes from; at expert 1 the
    local dispatcher keeps them on the device and the plan pays and says nothing."""
    doc = copy.deepcopy(load())
    doc["spec"]["framework"] = {"name": "Torchtitan"}
    doc["spec"]["parallelism"].update(sharding="Full")
    paid = {}
    for expert in (1, 4):
        doc["spec"]["parallelism"]["expert"] = expert
        plan, text = plan_json_and_table(doc, tmp_path / f"qwen-titan-ep{expert}.yaml", capsys)
        paid[expert] = plan["moe"]["hostSyncSecondsPerLayer"]
        assert ("TORCHTITAN_MOE_SYNC_SECONDS" in text) == (expert > 1)
    assert paid[1] == 0 and paid[4] == pytest.approx(4.07e-3)
