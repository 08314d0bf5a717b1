"""A mixture of experts' routed experts as grouped GEMMs at their own shape (issue 42): each
local expert multiplies the tokens routed to it, not the micro-batch's, so its GEMM runs at the
efficiency of that M and of the expert's own width."""

from __future__ import annotations

import itertools

import numpy as np

from ringmaster.engine import llm_training as L
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_NONE
from ringmaster.engine.step_parts import expert_tokens, micro_batch_parts
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

QWEN3_30B = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]
LLAMA_8B = KNOWN_TRANSFORMERS["llama-3.1-8b"]


def h100() -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    return L.layout_hardware(host, 1, DEFAULT_CATALOG, framework=framework("Megatron"))


def test_tokens_per_expert_by_hand() -> None:
    # 4,096 tokens a rank, EP 4 (4 ranks send it theirs), top-8 of 128 experts: 4096 x 4 x 8 / 128.
    assert float(expert_tokens(QWEN3_30B, 4096.0, 4)) == 1024.0
    assert float(expert_tokens(QWEN3_30B, 4096.0, 1)) == 256.0
    assert float(expert_tokens(QWEN3_30B, 1.0, 1)) == 1.0  # at least one token


def test_the_routed_experts_run_at_their_own_shape() -> None:
    """Qwen3-30B-A3B at EP 1: each expert sees 256 of a 4,096-token micro-batch, in GEMMs 768
    wide; the step's GEMMs take longer than the same FLOPs at the micro-batch's shape."""
    hw = h100()
    parts = micro_batch_parts(QWEN3_30B, hw, 1, 1, 1, RECOMPUTE_NONE, expert=1)
    ce = hw.ceilings
    tokens = QWEN3_30B.sequence_length
    fwd = 2.0 * L.busiest_rank_parameters_per_layer(QWEN3_30B)
    at_batch_shape = (
        3.0 * fwd * tokens / (ce.gemm_flops("bf16", QWEN3_30B.hidden, tokens) * hw.step_fit)
    )
    assert float(parts.gemm) > 1.05 * at_batch_shape


def test_more_tokens_per_expert_never_lower_the_gemm_efficiency() -> None:
    """Property: a larger expert-parallel group (each expert gathers more tokens) never makes the
    micro-batch's GEMMs slower; a dense model's do not depend on it at all."""
    hw = h100()
    times = [
        float(micro_batch_parts(QWEN3_30B, hw, 1, 1, 1, RECOMPUTE_NONE, expert=e).gemm)
        for e in (1, 2, 4, 8, 16, 32, 64, 128)
    ]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(times))
    dense = {
        float(micro_batch_parts(LLAMA_8B, hw, 1, 1, 1, RECOMPUTE_NONE, expert=e).gemm)
        for e in (1, 8)
    }
    assert len(dense) == 1
    assert np.isfinite(times).all()
