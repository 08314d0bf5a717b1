"""A MoE layer's routing and token permutation in the training step (issue 42: "token
permutation, router and unpermutation are not counted"): bytes by hand, and their place in the
step's memory-bound part."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import llm_training as L
from ringmaster.engine import moe_routing as R
from ringmaster.engine import step_parts as P
from ringmaster.engine.ceilings import H100_STREAM_GBPS
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_SELECTIVE
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.engine.units import GB

pytestmark = pytest.mark.unit

QWEN3_30B = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]  # 48 MoE layers, 128 experts, top-8, h 2048


def test_routing_bytes_per_token_by_hand() -> None:
    # permute + unpermute, forward and backward: 4 x (8 + 1) x 2048 x 2 bytes = 147,456;
    # expert parallelism's sort by local expert: 4 x 8 x 2048 x 2 = 131,072 more;
    # the router over 128 experts in fp32, 6 passes: 3,072
    local = float(R.moe_routing_bytes_per_token(QWEN3_30B, np.asarray(False)))
    spread = float(R.moe_routing_bytes_per_token(QWEN3_30B, np.asarray(True)))
    assert local == 147_456 + 3_072
    assert spread == 147_456 + 131_072 + 3_072


def _parts(model, expert):  # type: ignore[no-untyped-def]
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    hw = L.layout_hardware(host, 1, DEFAULT_CATALOG, framework=framework("Megatron"))
    return P.micro_batch_parts(
        model, hw, 1, 1, 1, np.asarray(RECOMPUTE_SELECTIVE), expert=expert
    ), hw


def test_the_routing_is_in_the_memory_bound_part_of_every_moe_layer() -> None:
    """The same model with routing costing nothing (no experts to route: the per-layer share
    is 0) differs by exactly the MoE layers' routing bytes at the streaming rate."""
    moe, hw = _parts(QWEN3_30B, 8)
    tokens = QWEN3_30B.sequence_length  # one sequence, tensor 1: every token on this rank
    moved = float(R.moe_routing_bytes_per_token(QWEN3_30B, np.asarray(True)))
    per_layer = (
        (QWEN3_30B.moe_layers / QWEN3_30B.layers)
        * tokens
        * moved
        * hw.ceilings.hbm_scale
        / (H100_STREAM_GBPS * GB)
    )
    # the memory-bound part counts the busiest stage's layers (all of them: no pipeline)
    without = P.micro_batch_parts(
        replace(QWEN3_30B, experts=1, active_experts=1),
        hw,
        1,
        1,
        1,
        np.asarray(RECOMPUTE_SELECTIVE),
        expert=1,
    )
    extra = float(moe.memory_bound) - float(without.memory_bound)
    assert extra == pytest.approx(QWEN3_30B.layers * per_layer, rel=1e-9)
    assert extra > 0.0
