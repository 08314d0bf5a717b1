"""``spec.parallelism.recomputeLayers``: Full recompute limited to N layers of each model chunk
(Megatron-LM's --recompute-method block --recompute-num-layers N). The layers that recompute
weigh their share of the step and the memory, the rest keep None's activations; the API refuses
it without Full or outside Megatron; the plan and the workers' env carry it; a launcher literal
other than the plan's is named."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from ringmaster.api import parse_manifest
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RECOMPUTE_NONE
from ringmaster.engine.llm_training import (
    LayoutArrays,
    LayoutHardware,
    evaluate_layouts,
    layout_hardware,
)
from ringmaster.engine.recompute import recomputed_layer_share
from ringmaster.engine.transformer import Transformer
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.training_flags import classify
from tests.unit.test_llm_layouts import AUTO, load, refusals

pytestmark = pytest.mark.unit

LLAMA3_8B = Transformer(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    vocab=128256,
    sequence_length=8192,
    gated_ffn=True,
)


H100 = layout_hardware(DEFAULT_CATALOG.host("nvidia-h100-80gb", 8), 1, DEFAULT_CATALOG)


def evaluate_8b(
    recompute: int,
    *,
    recompute_layers: int | None = None,
    offload_layers: int | None = None,
    hw: LayoutHardware = H100,
    pipeline: int = 1,
    virtual: int = 1,
) -> LayoutArrays:
    """Llama 3 8B on one host of H100s: tensor 1, FSDP, micro-batch 1, 64 sequences a step."""
    return evaluate_layouts(
        LLAMA3_8B,
        hw,
        tensor=np.array([1]),
        pipeline=np.array([pipeline]),
        sharding=np.array([3]),
        micro_batch=np.array([1]),
        recompute=np.array([recompute]),
        global_batch=64,
        virtual_stages=virtual,
        recompute_layers=recompute_layers,
        offload_layers=offload_layers,
    )


def _evaluate(recompute: int, layers: int | None) -> LayoutArrays:
    return evaluate_8b(recompute, recompute_layers=layers)


def test_the_share_is_the_layers_of_a_chunk_that_recompute() -> None:
    assert float(recomputed_layer_share(5, 32, 1, 1)) == pytest.approx(5 / 32)
    assert float(recomputed_layer_share(1, 32, 2, 1)) == pytest.approx(1 / 16)
    assert float(recomputed_layer_share(1, 32, 4, 2)) == pytest.approx(1 / 4)  # chunks of 4
    assert float(recomputed_layer_share(9, 32, 4, 1)) == 1.0  # more than a chunk: all of it


def test_every_layer_is_full_recompute_and_none_is_no_layer() -> None:
    full = _evaluate(RECOMPUTE_FULL, None)
    assert float(_evaluate(RECOMPUTE_FULL, 32).step_seconds[0]) == float(full.step_seconds[0])
    assert float(_evaluate(RECOMPUTE_FULL, 32).memory.total[0]) == float(full.memory.total[0])


def test_the_step_weighs_the_recomputed_layers_by_their_share() -> None:
    none, full = _evaluate(RECOMPUTE_NONE, None), _evaluate(RECOMPUTE_FULL, None)
    part = _evaluate(RECOMPUTE_FULL, 8)
    share = 8 / 32
    for field in ("compute_seconds", "gemm_seconds", "attention_seconds", "memory_bound_seconds"):
        expected = share * getattr(full, field)[0] + (1 - share) * getattr(none, field)[0]
        assert float(getattr(part, field)[0]) == pytest.approx(float(expected), rel=1e-9), field
    assert none.step_seconds[0] < part.step_seconds[0] < full.step_seconds[0]


def test_memory_keeps_none_activations_for_the_layers_that_do_not_recompute() -> None:
    none, full = _evaluate(RECOMPUTE_NONE, None), _evaluate(RECOMPUTE_FULL, None)
    one, eight = _evaluate(RECOMPUTE_FULL, 1), _evaluate(RECOMPUTE_FULL, 8)
    assert full.memory.activations[0] < eight.memory.activations[0] < one.memory.activations[0]
    # Each layer more that recomputes trades None's stored set for Full's, linearly.
    step = (one.memory.activations[0] - eight.memory.activations[0]) / 7
    assert float(full.memory.activations[0]) == pytest.approx(
        float(one.memory.activations[0] - 31 * step), rel=1e-9
    )
    # Full's working set for the layer it rebuilds stays on top: one recomputed layer holds
    # more than no recompute at all.
    assert one.memory.activations[0] > none.memory.activations[0]


def megatron_job(**parallelism: Any) -> dict[str, Any]:
    doc = copy.deepcopy(load(AUTO))
    doc["spec"]["framework"] = {"name": "Megatron"}
    doc["spec"]["parallelism"] = {
        "tensor": 4,
        "pipeline": 4,
        "microBatchSize": 1,
        "globalBatchSize": 128,
        "activationRecompute": "Full",
        "recomputeLayers": 2,
        **parallelism,
    }
    return doc


def test_the_api_takes_it_with_full_recompute_on_megatron() -> None:
    assert refusals(megatron_job()) == ([], [])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"activationRecompute": "Selective"}, "set activationRecompute Full"),
        ({"framework": {"name": "Torchtitan"}}, "set framework.name Megatron"),
        ({"framework": None}, "set framework.name Megatron"),
    ],
)
def test_the_api_refuses_it_elsewhere(change: dict[str, Any], words: str) -> None:
    doc = megatron_job()
    if "framework" in change:
        if change["framework"] is None:
            del doc["spec"]["framework"]
        else:
            doc["spec"]["framework"] = change["framework"]
    else:
        doc["spec"]["parallelism"].update(change)
    crd, python = refusals(doc)
    assert any(path == "spec.parallelism.recomputeLayers" and words in m for _, path, m in crd), crd
    assert any(p.endswith("recomputeLayers") and words in m for p, m in python), python


def test_the_plan_and_the_env_carry_it_and_a_launcher_literal_is_held_to_it() -> None:
    spec = parse_manifest(megatron_job()).spec
    plan = plan_training(spec)
    assert plan.layout is not None
    assert plan.layout.chosen.recompute_layers == 2
    status = layout_status(plan.layout)
    assert status["recomputeLayers"] == 2
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_RECOMPUTE_LAYERS"] == "2"
    words = ["torchrun", "pretrain_gpt.py", "--recompute-granularity", "full"]
    agreed = classify([*words, "--recompute-num-layers", "2"], [], env)
    assert agreed is not None and agreed.conflicts == ()
    other = classify([*words, "--recompute-num-layers", "1"], [], env)
    assert other is not None
    assert [(c.setting, c.value, c.planned, c.variable) for c in other.conflicts] == [
        ("--recompute-num-layers", "1", "2", "RINGMASTER_RECOMPUTE_LAYERS")
    ]
