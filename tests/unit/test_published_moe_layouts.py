"""Published MoE training layouts the API once refused: DeepSeek-V3's 61 layers over 16 and
over 8 pipeline stages (the first and the last stages share what the 4- or 8-layer middle stages
leave, as Megatron-LM's --decoder-first/last-pipeline-num-layers allow), and Qwen3-235B's tensor 2
x expert 32 x pipeline 8 on 256 GPUs, whose experts are split over one rank each (MoE parallel
folding: expert_tensor_parallel_size 1). Accepted by the Python twins of the CEL rules, planned by
the engine with those layouts."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api.manifest import parse_manifest
from ringmaster.api.parallelism import pipeline_stages_layers
from ringmaster.engine.llm_memory import stage_layers, valid_pipeline
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.planning import plan_training

pytestmark = pytest.mark.unit
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainingjob-qwen3-30b-a3b-h100.yaml"
# deepseek-ai/DeepSeek-V3 config.json (the MTP module left out, as engine.transformer does).
DEEPSEEK_V3 = {
    "layers": 61,
    "hiddenSize": 7168,
    "attentionHeads": 128,
    "ffnHiddenSize": 18432,
    "ffnType": "Gated",
    "vocabSize": 129280,
    "sequenceLength": 4096,
    "experts": 256,
    "activeExperts": 8,
    "sharedExperts": 1,
    "expertFfnHiddenSize": 2048,
    "firstDenseLayers": 3,
    "attentionType": "MultiHeadLatent",
    "latentAttention": {
        "kvLoraRank": 512,
        "qLoraRank": 1536,
        "qkRopeHeadDim": 64,
        "qkNopeHeadDim": 128,
        "vHeadDim": 128,
    },
}


def deepseek_job(pipeline: int, workers: int) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["workers"] = workers
    spec["model"] = {"name": "deepseek-v3", "architecture": copy.deepcopy(DEEPSEEK_V3)}
    spec["parallelism"] = {
        "tensor": 1,
        "pipeline": pipeline,
        "expert": 64,
        "context": 1,
        "sharding": "Optimizer",
        "globalBatchSize": 15360,
        "microBatchSize": 1,
    }
    return doc


@pytest.mark.parametrize(("pipeline", "ends"), [(16, (3, 4, 2)), (8, (7, 8, 6))])
def test_deepseek_v3_stages_61_layers(pipeline: int, ends: tuple[int, int, int]) -> None:
    assert valid_pipeline(61, pipeline) and pipeline_stages_layers(61, pipeline)
    # The decoder's 61 layers; the MTP block joins the last stage (tests/engine/test_mtp.py).
    decoder = replace(KNOWN_TRANSFORMERS["deepseek-v3"], mtp_layers=0)
    stages = stage_layers(decoder, pipeline)
    assert (float(stages.first), float(stages.middle), float(stages.last)) == ends
    first, middle, last = ends
    assert first + (pipeline - 2) * middle + last == 61


def test_every_stage_split_counts_every_layer() -> None:
    """Property: wherever the stages are valid, first + middles + last is the layer count, and
    no end stage holds more than a middle one or fewer than none."""
    for layers in range(1, 130):
        for pipeline in range(1, min(layers, 64) + 1):
            model = type(KNOWN_TRANSFORMERS["deepseek-v3"])(layers, 64, 4, 100, 128)
            ok = valid_pipeline(layers, pipeline)
            assert ok == pipeline_stages_layers(layers, pipeline)
            if not ok:
                continue
            s = stage_layers(model, pipeline)
            first, middle, last = float(s.first), float(s.middle), float(s.last)
            total = first if pipeline == 1 else first + (pipeline - 2) * middle + last
            assert total == layers, (layers, pipeline)
            assert 0 <= first <= middle and 0 <= last <= middle


@pytest.mark.parametrize(("pipeline", "workers"), [(16, 256), (8, 128)])
def test_deepseek_v3_published_layouts_are_accepted_and_planned(
    pipeline: int, workers: int
) -> None:
    job = parse_manifest(deepseek_job(pipeline, workers))
    report = plan_training(job.spec)  # type: ignore[arg-type]
    plan = report.to_json()
    layout = plan["layout"]
    assert plan["fits"], plan
    assert layout["pipeline"] == pipeline and layout["expert"] == 64


# Qwen/Qwen3-235B-A22B config.json.
QWEN3_235B = {
    "layers": 94,
    "hiddenSize": 4096,
    "attentionHeads": 64,
    "kvHeads": 4,
    "headDim": 128,
    "ffnHiddenSize": 12288,
    "ffnType": "Gated",
    "vocabSize": 151936,
    "sequenceLength": 4096,
    "experts": 128,
    "activeExperts": 8,
    "expertFfnHiddenSize": 1536,
}


def qwen3_job(expert_tensor: int | str) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["workers"] = 32
    spec["model"] = {"name": "qwen3-235b-a22b", "architecture": copy.deepcopy(QWEN3_235B)}
    spec["parallelism"] = {
        "tensor": 2,
        "pipeline": 8,
        "expert": 32,
        "expertTensor": expert_tensor,
        "context": 1,
        "sharding": "Optimizer",
        "globalBatchSize": 1024,
        "microBatchSize": 1,
    }
    return doc


@pytest.mark.parametrize("expert_tensor", [1, "Auto"])
def test_qwen3_235b_published_layout_is_accepted_and_planned_folded(expert_tensor) -> None:
    """EP 32 x ETP 1 fill a stage's 32 ranks (tensor 2 x data 16); under Auto the engine finds
    it too: an expert split over the tensor degree (2) would need 64."""
    job = parse_manifest(qwen3_job(expert_tensor))
    report = plan_training(job.spec)  # type: ignore[arg-type]
    plan = report.to_json()
    layout = plan["layout"]
    assert plan["fits"], plan
    assert (layout["tensor"], layout["expert"], layout["expertTensor"]) == (2, 32, 1)
    assert (layout["pipeline"], layout["data"]) == (8, 16)
    assert report.layout is not None
    assert report.layout.chosen.name == "TP2 EP32 ETP1 PP8 DP16"


def test_an_expert_split_that_does_not_fill_the_stage_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="expert 32 x expertTensor 2 x pipeline 8 does not divide"):
        parse_manifest(qwen3_job(2))
