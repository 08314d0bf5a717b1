"""A mixture of experts' routed experts as grouped GEMMs at their own shape (issue 42): each
local expert multiplies the tokens routed to it, not the micro-batch's, so its GEMM runs at the
efficiency of that M and of the expert's own width."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import llm_training as L
from ringmaster.engine import recompute as R
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
    fwd = 2.0 * R.busiest_rank_parameters_per_layer(QWEN3_30B)
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


QWEN3_235B = KNOWN_TRANSFORMERS["qwen3-235b-a22b"]


def test_expert_tensor_degree_folds_the_stage_ranks() -> None:
    """Qwen3-235B at tensor 2 over a stage of 32 ranks (data 16): EP 32 fills the stage only
    with each expert on one rank (ETP 1, MoE parallel folding); EP 16 fits either way."""
    from ringmaster.engine.llm_layout_search import expert_degrees, valid_expert

    assert valid_expert(QWEN3_235B, 16, 32, tensor=2, expert_tensor=1)
    assert not valid_expert(QWEN3_235B, 16, 32, tensor=2, expert_tensor=2)
    assert not valid_expert(QWEN3_235B, 16, 32, tensor=2)  # the default: the tensor degree
    assert valid_expert(QWEN3_235B, 16, 16, tensor=2)
    assert (32, 1) in expert_degrees(QWEN3_235B, 16, None, 2)
    assert (32, 2) not in expert_degrees(QWEN3_235B, 16, None, 2)
    assert expert_degrees(QWEN3_235B, 16, 32, 2, 2) == []
    assert not valid_expert(QWEN3_235B, 16, 16, tensor=2, expert_tensor=7)  # 1536 % 7


def test_folded_experts_by_hand() -> None:
    """At tensor 2, an expert split over one rank (ETP 1) is twice as wide as at ETP 2 and sees
    half the tokens from each of its EP peers (the tensor ranks dispatch their halves apart):
    the expert GEMMs' FLOPs are the same, their shape differs; the routed experts' weights per
    rank are routed / (EP x ETP)."""
    from ringmaster.engine.llm_memory import routed_expert_parameters_per_layer, stage_parameters

    hw = h100()
    default = micro_batch_parts(QWEN3_235B, hw, 1, 2, 8, RECOMPUTE_NONE, expert=16)
    same = micro_batch_parts(QWEN3_235B, hw, 1, 2, 8, RECOMPUTE_NONE, expert=16, expert_tensor=2)
    assert float(same.gemm) == float(default.gemm)
    folded = micro_batch_parts(QWEN3_235B, hw, 1, 2, 8, RECOMPUTE_NONE, expert=32, expert_tensor=1)
    assert float(folded.gemm) != float(default.gemm)
    assert float(folded.attention) == float(default.attention)
    assert float(expert_tokens(QWEN3_235B, 4096.0 * 1 / 2, 32)) == 4096 / 2 * 32 * 8 / 128
    routed = routed_expert_parameters_per_layer(QWEN3_235B)
    dense = QWEN3_235B.parameters_per_layer - routed
    for e, etp in ((16, 2), (32, 1)):
        layer = float(stage_parameters(QWEN3_235B, 2, 8, e, etp).layer)
        assert layer == np.float64(dense / 2 + routed / (e * etp))


@settings(max_examples=40, deadline=None)
@given(
    width=st.sampled_from([768, 1536, 2048, 2880, 14336]),
    experts=st.sampled_from([1, 4, 8, 32]),
    tokens=st.integers(1, 4096),
    more=st.integers(1, 4096),
)
def test_more_tokens_per_expert_never_lower_the_grouped_gemm_efficiency(
    width, experts, tokens, more
) -> None:
    """The grouped-GEMM call's achieved FLOP/s never falls as its experts get more tokens: the
    weights are streamed once whatever M, the rate is M's own or better."""
    from ringmaster.engine.step_parts import _grouped_gemm_seconds

    hw = h100()
    local = experts * 3.0 * width * 4096

    def rate(m: int) -> float:
        flops = 2.0 * m * local
        return flops / float(_grouped_gemm_seconds(hw, flops / 3, 2 * flops / 3, width, local))

    assert rate(tokens + more) >= rate(tokens) * (1 - 1e-12)
