"""Expert parallelism in the training engine: memory sharded over EP, compute on active
parameters, dispatch/combine all-to-alls on the fabric, the search over EP."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ringmaster.engine import llm_training as L
from ringmaster.engine import recompute as R
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL
from ringmaster.engine.llm_layout_search import LayoutRequest, NoLayoutError, search_layouts
from ringmaster.engine.llm_memory import (
    BYTES_WEIGHTS,
    MemoryArrays,
    memory_per_accelerator,
    routed_expert_parameters_per_layer,
    stage_layers,
)
from ringmaster.engine.moe_training import MOE_LOAD_IMBALANCE
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

pytestmark = pytest.mark.unit

H100_HOST = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
MIXTRAL = dataclasses.replace(KNOWN_TRANSFORMERS["mixtral-8x7b"], sequence_length=4096)
QWEN3_30B = dataclasses.replace(KNOWN_TRANSFORMERS["qwen3-30b-a3b"], sequence_length=4096)


def _memory(model: Transformer, expert: np.ndarray, sharding: int = 1) -> MemoryArrays:
    return memory_per_accelerator(
        model,
        tensor=1,
        pipeline=4,
        data=16,
        sharding=sharding,
        micro_batch=1,
        micro_batches=8,
        recompute=RECOMPUTE_FULL,
        expert=expert,
    )


@pytest.mark.parametrize("sharding", [0, 1, 2, 3])
def test_more_expert_parallelism_never_raises_memory(sharding: int) -> None:
    experts = np.array([1, 2, 4, 8])
    mem = _memory(MIXTRAL, experts, sharding)
    assert np.all(np.diff(mem.weights) < 0)
    assert np.all(np.diff(mem.total) < 0)
    # Without sharding, the experts' weights are split exactly e ways.
    if sharding == 0:
        middle_layers = stage_layers(MIXTRAL, 4).middle
        routed = routed_expert_parameters_per_layer(MIXTRAL) * float(middle_layers)
        saved = float(mem.weights[0] - mem.weights[3])
        assert saved == pytest.approx(routed * (1 - 1 / 8) * BYTES_WEIGHTS, rel=0.02)


def test_one_expert_of_top_one_plans_as_the_dense_model() -> None:
    dense = dataclasses.replace(KNOWN_TRANSFORMERS["llama-3-8b"], sequence_length=4096)
    moe = dataclasses.replace(dense, experts=1, active_experts=1)
    hw = L.layout_hardware(H100_HOST, 2, DEFAULT_CATALOG)
    a = search_layouts(LayoutRequest(dense, 64), hw)
    b = search_layouts(LayoutRequest(moe, 64), hw)
    assert a.chosen == b.chosen


def test_compute_follows_active_parameters_with_the_load_imbalance() -> None:
    per_layer = R.busiest_rank_parameters_per_layer(MIXTRAL)
    routed_active = 2 * MIXTRAL.expert_parameters
    assert per_layer == pytest.approx(
        MIXTRAL.active_parameters_per_layer + (MOE_LOAD_IMBALANCE - 1) * routed_active
    )
    assert per_layer < MIXTRAL.parameters_per_layer / 2


def test_expert_parallelism_is_carved_out_of_data_parallelism() -> None:
    hw = L.layout_hardware(H100_HOST, 1, DEFAULT_CATALOG)
    request = LayoutRequest(QWEN3_30B, 64, tensor=1, pipeline=1, context=1, expert=8)
    layout = search_layouts(request, hw).chosen
    assert layout.expert == 8 and layout.data == 8
    assert layout.name == "TP1 EP8 PP1 DP8"
    assert layout.expert_parallel_seconds > 0


def test_all_to_all_across_hosts_costs_more_than_inside_one() -> None:
    hw = L.layout_hardware(H100_HOST, 4, DEFAULT_CATALOG)
    inside = search_layouts(
        LayoutRequest(
            QWEN3_30B, 256, tensor=1, pipeline=1, context=1, expert=8, sharding="Optimizer"
        ),
        hw,
    ).chosen
    across = search_layouts(
        LayoutRequest(
            QWEN3_30B, 256, tensor=1, pipeline=1, context=1, expert=32, sharding="Optimizer"
        ),
        hw,
    ).chosen
    assert across.expert_parallel_seconds > 2 * inside.expert_parallel_seconds


def test_auto_searches_expert_parallelism_and_a_bad_degree_has_no_layout() -> None:
    hw = L.layout_hardware(H100_HOST, 1, DEFAULT_CATALOG)
    search = search_layouts(LayoutRequest(QWEN3_30B, 64), hw)
    assert len(set(search.arrays.expert.tolist())) > 1
    with pytest.raises(NoLayoutError, match="expert 3"):
        search_layouts(LayoutRequest(QWEN3_30B, 64, expert=3), hw)


def test_a_model_too_big_for_its_gpus_suggests_expert_parallelism() -> None:
    hw = L.layout_hardware(H100_HOST, 1, DEFAULT_CATALOG)
    request = LayoutRequest(MIXTRAL, 64, tensor=1, pipeline=1, context=1, expert=1, sharding="None")
    search = search_layouts(request, hw)
    assert not search.fits
    assert "expert:" in (search.reason or "")
