"""Serving mixtures of experts: active-parameter FLOPs, the experts a step touches, MLA's latent
KV cache, expert parallelism inside a replica and FP4 on Blackwell."""

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.moe_op import W4A16_MOE_TILE_ROWS
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
MIXTRAL = KNOWN_TRANSFORMERS["mixtral-8x7b"]
DEEPSEEK_V3 = KNOWN_TRANSFORMERS["deepseek-v3"]
QWEN3_30B = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]
# Mixtral's active-dense twin: one FFN as wide as its two active experts side by side (the same
# FLOPs per token but for the router's 0.1%).
MIXTRAL_TWIN = replace(MIXTRAL, experts=0, active_experts=0, ffn_hidden=2 * 14336)


def _terms(model: Transformer, tp: int = 2, ep: int = 1) -> S.ServingTerms:
    return S.serving_terms(
        model, H100, tp, H100.peak("bf16"), 2.0, 2.0, 1000.0, 1000.0, expert_parallel=ep
    )


def _routed_active(model: Transformer) -> float:
    """The routed experts' weights one token runs through (top-k in every MoE layer)."""
    return float(model.moe_layers * model.active_experts * model.expert_parameters)


def _experts_read(model: Transformer, tokens: float) -> float:
    miss = 1.0 - model.active_experts / model.experts
    return model.experts * float(S.expert_fraction_read(miss, tokens))


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"])
def test_one_token_reads_top_k_experts_and_a_large_batch_nearly_all(name: str) -> None:
    model = KNOWN_TRANSFORMERS[name]
    assert _experts_read(model, 1) == pytest.approx(model.active_experts)
    # E (1 - (1 - k/E)^B) by hand at B = 4: Mixtral 8 x (1 - 0.75^4) = 5.47
    if name == "mixtral-8x7b":
        assert _experts_read(model, 4) == pytest.approx(8 * (1 - 0.75**4))
    assert _experts_read(model, 4096) > 0.99 * model.experts
    reads = [_experts_read(model, b) for b in (1, 2, 8, 64, 512)]
    assert reads == sorted(reads)


def test_moe_step_reads_touched_experts_between_its_active_and_total_weights() -> None:
    t = _terms(MIXTRAL)
    per_byte = 1.0 / (H100.memory_bandwidth * S.LLM_MEMORY_EFFICIENCY) * 2.0 / 2
    one = float(S.weights_read_seconds(t, 1.0))
    everything = float(S.weights_read_seconds(t, 10_000.0))
    active = MIXTRAL.matmul_parameters * per_byte
    total = (MIXTRAL.matmul_parameters + 6 * 32 * MIXTRAL.expert_parameters) * per_byte
    assert one == pytest.approx(active, rel=1e-12)
    assert everything == pytest.approx(total, rel=1e-9)
    # FLOPs follow the active parameters only: the dense ones at the fitted rate, the top-k
    # routed experts' apart, at that rate x their GEMM shape's (engine.llm_step, two rooflines).
    rate = 2 * H100.peak("bf16") * S.LLM_COMPUTE_EFFICIENCY
    routed = 2.0 * _routed_active(MIXTRAL)
    assert float(t.gemm_per_token) == pytest.approx(
        (2.0 * MIXTRAL.matmul_parameters - routed) / rate
    )
    ratio = float(S.expert_shape_ratio(MIXTRAL, 2, 1, "bf16"))
    assert float(t.expert_gemm_per_token) == pytest.approx(routed / (rate * ratio))


def test_moe_decode_step_is_slower_than_its_active_dense_twin_at_high_batch() -> None:
    moe, twin = _terms(MIXTRAL), _terms(MIXTRAL_TWIN)
    assert MIXTRAL_TWIN.matmul_parameters == pytest.approx(MIXTRAL.matmul_parameters, rel=2e-3)
    at_one = float(S.step_seconds(moe, 1, 0)) / float(S.step_seconds(twin, 1, 0))
    at_128 = float(S.step_seconds(moe, 128, 0)) / float(S.step_seconds(twin, 128, 0))
    assert at_one == pytest.approx(1.0, abs=0.01)
    assert at_128 > 1.5  # it streams all 8 experts against the twin's 2 experts' worth


def test_all_weights_stay_resident() -> None:
    inputs = L.LlmServingInputs(
        MIXTRAL, "nvidia-h100-80gb", 2, "BF16", 1000, 200, 2.0, 0.1, target_requests_per_second=1
    )
    p = L.predict_llm_serving(inputs)
    assert p.weights_bytes_per_accelerator == pytest.approx(MIXTRAL.parameters * 2.0 / 2)
    assert 46.6e9 < MIXTRAL.parameters < 46.8e9


def test_single_expert_of_top_one_serves_exactly_as_the_dense_model() -> None:
    dense = KNOWN_TRANSFORMERS["llama-3-8b"]
    one = replace(dense, experts=1, active_experts=1)
    a, b = _terms(dense, 1), _terms(one, 1)
    for n, p in ((1, 0), (64, 512), (0, 2048)):
        assert float(S.step_seconds(a, n, p)) == pytest.approx(
            float(S.step_seconds(b, n, p)), rel=1e-12
        )
    base = L.LlmServingInputs(
        dense, "nvidia-h100-80gb", 1, "BF16", 512, 256, 1.0, 0.05, target_requests_per_second=20
    )
    pa, pb = L.predict_llm_serving(base), L.predict_llm_serving(replace(base, model=one))
    assert pa.replicas == pb.replicas
    assert pa.output_tokens_per_second_per_replica == pytest.approx(
        pb.output_tokens_per_second_per_replica, rel=1e-9
    )


def test_mla_caches_the_latent_whole_on_every_rank() -> None:
    assert DEEPSEEK_V3.kv_cache_bytes_per_token(2.0) == 61 * (512 + 64) * 2
    for tp in (1, 8):
        assert S.kv_bytes_per_token_per_accelerator(DEEPSEEK_V3, tp, 2.0) == 61 * 576 * 2
    t = S.serving_terms(DEEPSEEK_V3, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0)
    assert float(t.kv_bytes_per_token) == 61 * 576
    # Decode attention reads the latent: a token of context costs its bytes at the KV rate.
    rate = H100.memory_bandwidth * S.LLM_KV_READ_EFFICIENCY
    assert float(t.kv_read_per_token) == pytest.approx(61 * 576 / rate)
    # GQA is unchanged: Mixtral's 8 KV heads split over 2 ranks.
    assert S.kv_bytes_per_token_per_accelerator(MIXTRAL, 2, 2.0) == 2 * 32 * 4 * 128 * 2


def test_deepseek_v3_in_fp8_needs_more_than_one_h100_host_and_says_so() -> None:
    inputs = L.LlmServingInputs(
        DEEPSEEK_V3, "nvidia-h100-80gb", 8, "FP8", 1000, 1000, 5.0, 0.2,
        target_requests_per_second=1, expert_parallel=8,
    )  # fmt: skip
    p = L.predict_llm_serving(inputs)
    assert not p.feasible and p.reason is not None
    assert "needs" in p.reason and "8 x nvidia-h100-80gb" in p.reason
    on_h200 = L.predict_llm_serving(replace(inputs, accelerator="nvidia-h200-141gb"))
    assert on_h200.feasible, on_h200.reason


def test_expert_parallel_keeps_memory_and_exchanges_only_where_tokens_differ() -> None:
    tp, ep = _terms(MIXTRAL, 2, 1), _terms(MIXTRAL, 2, 2)
    assert float(ep.expert_weights_read) == float(tp.expert_weights_read)
    assert float(ep.kv_cache_tokens) == float(tp.kv_cache_tokens)
    # Under attention tensor parallelism every rank holds the step's tokens: it runs its own
    # experts on them and the partial sums are all-reduced, as the sliced experts' are (vLLM's
    # use_all2all_kernels needs dp_size > 1; TensorRT-LLM all-reduces without attention DP).
    assert float(ep.allreduce_base) == float(tp.allreduce_base)
    assert float(ep.allreduce_per_token) == float(tp.allreduce_per_token)
    dense = _terms(MIXTRAL_TWIN, 2)
    assert float(tp.allreduce_base) == pytest.approx(float(dense.allreduce_base))
    # DeepEP asked, or attention data parallelism (each group its own tokens): the 32 MoE layers
    # trade their FFN all-reduce for a dispatch and a combine.
    args = (MIXTRAL, H100, 2, H100.peak("bf16"), 2.0, 2.0, 1000.0, 1000.0)
    deepep = S.serving_terms(*args, expert_parallel=2, dispatcher="DeepEP")
    assert float(deepep.allreduce_base) > float(tp.allreduce_base)
    wide = S.serving_terms(*args[:2], 1, *args[3:], expert_parallel=2, attention_data=2)
    alone = S.serving_terms(*args[:2], 1, *args[3:])
    assert float(wide.allreduce_base) > float(alone.allreduce_base) == 0.0


@pytest.mark.parametrize(
    ("model", "tp", "ep", "words"),
    [
        (KNOWN_TRANSFORMERS["llama-3-8b"], 2, 2, "needs a mixture of experts"),
        (QWEN3_30B, 4, 2, "must be 1 or the replica's tensor degree 4"),
        (replace(MIXTRAL, experts=6), 4, 4, "must divide the 6 expert slots"),
    ],
)
def test_bad_expert_parallelism_is_refused_clearly(
    model: Transformer, tp: int, ep: int, words: str
) -> None:
    inputs = L.LlmServingInputs(
        model, "nvidia-h100-80gb", tp, "BF16", 100, 100, 1.0, 0.1, expert_parallel=ep
    )
    with pytest.raises(ValueError, match=words):
        L.predict_llm_serving(inputs)


@pytest.mark.parametrize(("ep", "tensor"), [(1, {8, 16}), (16, {16}), (8, {8})])
def test_an_expert_degree_keeps_the_layouts_whose_tensor_degree_it_is(
    ep: int, tensor: set[int]
) -> None:
    # Qwen3-30B-A3B (128 experts, 32 heads) on 2 x 8 H100 per replica, layout left to the
    # engine: EP spans the tensor-parallel ranks, so only layouts with TP = EP are weighed (both
    # were, and the one with the other TP refused the whole plan).
    inputs = L.LlmServingInputs(
        QWEN3_30B, "nvidia-h100-80gb", 16, "BF16", 1000, 200, 2.0, 0.05,
        target_requests_per_second=5, expert_parallel=ep,
    )  # fmt: skip
    assert {layout.tensor for layout in L.choose_layouts(inputs, 8, 2)} == tensor
    prediction = L.predict_llm_serving(inputs)
    assert prediction.tensor_parallel in tensor and prediction.expert_parallel == ep


def test_fp4_is_refused_on_h100_and_planned_on_b200() -> None:
    inputs = L.LlmServingInputs(
        QWEN3_30B, "nvidia-h100-80gb", 8, "FP4", 1000, 500, 2.0, 0.05,
        target_requests_per_second=5,
    )  # fmt: skip
    refused = L.predict_llm_serving(inputs)
    assert not refused.feasible
    assert refused.reason == (
        "precision FP4 needs FP4 tensor cores (Blackwell: B200, GB200); nvidia-h100-80gb has "
        "none: use FP8 or INT4"
    )
    b200 = L.predict_llm_serving(replace(inputs, accelerator="nvidia-b200"))
    assert b200.feasible, b200.reason
    assert b200.kv_cache_precision == "FP8"
    assert b200.weights_bytes_per_accelerator == pytest.approx(QWEN3_30B.parameters * 0.5625 / 8)
    fp8 = L.predict_llm_serving(replace(inputs, accelerator="nvidia-b200", precision="FP8"))
    assert b200.offline_output_tokens_per_second > fp8.offline_output_tokens_per_second
    assert DEFAULT_CATALOG.accelerator("nvidia-b200").peak("fp4") == 9000e12
    assert not H100.supports("fp4")


def test_an_moe_plan_reports_the_experts_its_batch_reads() -> None:
    inputs = L.LlmServingInputs(
        QWEN3_30B, "nvidia-h100-80gb", 1, "BF16", 1000, 500, 2.0, 0.1,
        target_requests_per_second=5,
    )  # fmt: skip
    p = L.predict_llm_serving(inputs)
    expected = _experts_read(QWEN3_30B, p.max_num_seqs)
    assert p.experts_read_per_step == pytest.approx(expected, rel=0.3)
    assert 8 < p.experts_read_per_step <= 128
    assert np.isfinite(p.offline_output_tokens_per_second)


def test_prefill_runs_on_active_parameters() -> None:
    t = _terms(MIXTRAL)
    rate = 2 * H100.peak("bf16") * S.LLM_COMPUTE_EFFICIENCY
    head = 2.0 * MIXTRAL.vocab * MIXTRAL.hidden / 1000.0
    # the routed experts' share runs in expert_gemm_per_token, for prompt and decode tokens alike
    assert float(t.prefill_gemm_per_token) == pytest.approx(
        (2.0 * MIXTRAL.active_layer_parameters - 2.0 * _routed_active(MIXTRAL) + head) / rate
    )


def test_a_w4a16_moe_step_tiles_its_grouped_gemms_at_marlins_rows() -> None:
    """4-bit weights under 16-bit math (an INT4 MoE checkpoint without an op of its own
    measured) run a kernel that tiles M at 8 rows at decode (Marlin's MoE), not the 16-bit op's
    measured tile: the engine's MoE floor and fractions stay, its tile does not. gpt-oss's
    MXFP4 experts run their own measured op, at its tile."""
    from ringmaster.engine.llm_serving_fit import WEIGHT_BYTES
    from ringmaster.engine.serving_engines import ENGINE_MOE

    gpt_oss = KNOWN_TRANSFORMERS["gpt-oss-120b"]
    int4_moe = replace(gpt_oss, mxfp4_experts=False)  # its shape, uniformly quantised
    h200 = DEFAULT_CATALOG.accelerator("nvidia-h200-141gb")

    def terms(weight_bytes: float, model: Transformer = int4_moe) -> S.ServingTerms:
        return S.serving_terms(
            model, h200, 1, h200.peak("bf16"), weight_bytes, 2.0, 1024.0, 1024.0,
            serving_engine="TensorRT-LLM",
        )  # fmt: skip

    w4a16, bf16 = terms(WEIGHT_BYTES["INT4"]), terms(2.0)
    mxfp4 = terms(WEIGHT_BYTES["INT4"], gpt_oss)
    own_tile = ENGINE_MOE[("nvidia-h200-141gb", "trtllm", "mxfp4")][4]
    assert float(mxfp4.expert_tile_tokens) == pytest.approx(
        own_tile * gpt_oss.experts / gpt_oss.active_experts
    )
    per_expert = gpt_oss.experts / gpt_oss.active_experts
    tile = ENGINE_MOE[("nvidia-h200-141gb", "trtllm", "bf16")][4]
    assert float(bf16.expert_tile_tokens) == pytest.approx(tile * per_expert)
    assert float(w4a16.expert_tile_tokens) == pytest.approx(W4A16_MOE_TILE_ROWS * per_expert)
    assert tile > W4A16_MOE_TILE_ROWS
    # at a decode batch the padded rows were most of the step: now far fewer
    batch = np.array(64.0)
    assert float(S.expert_compute_seconds(w4a16, batch)) < 0.2 * float(
        S.expert_compute_seconds(bf16, batch)
    )


def test_an_expert_parallel_plan_under_tensor_parallel_attention_says_it_exchanges_nothing() -> (
    None
):
    """The plan names what the step prices: with attention tensor-parallel the experts' partial
    sums are all-reduced, and an expertDispatch asked for there is named as not applying."""
    base = L.LlmServingInputs(
        QWEN3_30B, "nvidia-h100-80gb", 2, "BF16", 1000, 200, 2.0, 0.1, expert_parallel=2
    )
    words = "under tensor-parallel attention: every rank holds the step's tokens"
    plain = L.predict_llm_serving(base)
    assert any(words in n and "expertDispatch" not in n for n in plain.notes)
    asked = L.predict_llm_serving(replace(base, expert_dispatch="AllToAll"))
    assert any("expertDispatch AllToAll applies under attention data parallelism" in n
               for n in asked.notes)  # fmt: skip
    deepep = L.predict_llm_serving(replace(base, expert_dispatch="DeepEP"))
    assert not any(words in n for n in deepep.notes)
    sliced = L.predict_llm_serving(replace(base, expert_parallel=1))
    assert not any(words in n for n in sliced.notes)
