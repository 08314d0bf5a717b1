"""The transformer description: the engine's formulas, the API's Python twin and its CEL twin
agree, on published models and on random shapes."""

from __future__ import annotations

import functools
from typing import Any

import celpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.api.architecture import (
    LatentAttention as ApiLatentAttention,
)
from ringmaster.api.architecture import (
    SlidingWindow,
    TransformerArchitecture,
    architecture_active_parameters,
    architecture_parameters,
    cel_architecture_active_parameters,
    cel_architecture_parameters,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer
from ringmaster.planning.layouts import transformer_of

pytestmark = pytest.mark.unit


def _api(t: Transformer) -> TransformerArchitecture:
    mla = t.latent_attention
    moe = t.experts > 0
    return TransformerArchitecture(
        layers=t.layers,
        hidden_size=t.hidden,
        attention_heads=t.heads,
        kv_heads=None if mla else t.kv_heads,
        head_dim=None if mla else t.head_dim,
        attention_type="MultiHeadLatent" if mla else "Standard",
        latent_attention=None
        if mla is None
        else ApiLatentAttention(
            kv_lora_rank=mla.kv_lora_rank,
            q_lora_rank=mla.q_lora_rank or None,
            qk_rope_head_dim=mla.qk_rope_head_dim,
            qk_nope_head_dim=mla.qk_nope_head_dim,
            v_head_dim=mla.v_head_dim,
        ),
        ffn_hidden_size=t.ffn_hidden,
        ffn_type="Gated" if t.gated_ffn else "Standard",
        vocab_size=t.vocab,
        sequence_length=t.sequence_length,
        tied_embeddings=t.tied_embeddings,
        experts=t.experts if moe else None,
        active_experts=t.active_experts if moe else None,
        shared_experts=t.shared_experts if moe else None,
        expert_ffn_hidden_size=t.expert_ffn_hidden if moe else None,
        first_dense_layers=t.first_dense_layers if moe else None,
        moe_layer_frequency=t.moe_layer_frequency if moe else None,
        sliding_window=None
        if not t.sliding_window
        else SlidingWindow(
            size=t.sliding_window, full_attention_every=t.full_attention_every or None
        ),
        mtp_layers=t.mtp_layers or None,
        expert_weights="MXFP4" if t.mxfp4_experts else None,
    )


@functools.cache
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def _cel(expression: str, arch: TransformerArchitecture) -> int:
    program = _program(expression)
    # What the apiserver's rules see after defaulting: every defaulted field present.
    obj = arch.model_dump(mode="json", by_alias=True, exclude_none=True)
    return int(program.evaluate({"self": celpy.json_to_cel(obj)}))


def _cel_parameters(arch: TransformerArchitecture) -> int:
    return _cel(cel_architecture_parameters("self"), arch)


def _cel_active_parameters(arch: TransformerArchitecture) -> int:
    return _cel(cel_architecture_active_parameters("self"), arch)


# Published sizes: Meta's model cards (Llama 2: 6.74B / 13.0B / 69.0B in the paper's Table 1 as
# 7/13/70B; Llama 3: 8.03B, 70.6B; Llama 3.1: 405B) and GPT-3's 175B (Brown et al. Table 2.1).
PUBLISHED = {
    "llama-2-7b": 6.74e9,
    "llama-2-13b": 13.0e9,
    "llama-2-70b": 69.0e9,
    "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.6e9,
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.6e9,
    "llama-3.1-405b": 405e9,
    "gpt-3-175b": 175e9,
    # Nemotron-4 reports: 3.2B embedding + 12.5B non-embedding; 9.4B + 331.6B.
    "nemotron-4-15b": 15.7e9,
    "nemotron-4-340b": 341.0e9,
    # Mixtures of experts: (total, active) as each model's publisher states them.
    # Mixtral 8x7B: 46.7B / 12.9B (Jiang et al. 2024, "Mixtral of Experts", section 2.1).
    "mixtral-8x7b": 46.7e9,
    # DeepSeek-V3: 671B / 37B (DeepSeek-V3 Technical Report, abstract; without the 14B MTP
    # module, deepseek-ai/DeepSeek-V3 README).
    "deepseek-v3": 671e9,
    # Kimi K2: 1.04T / 32.6B (Kimi K2 technical report, section 1 / Table 2; the model card's
    # "1T total, 32B activated").
    "kimi-k2": 1.04e12,
    # Qwen3-235B-A22B: 235B / 22B; Qwen3-30B-A3B: 30.5B / 3.3B (the Qwen model cards).
    "qwen3-235b-a22b": 235e9,
    "qwen3-32b": 32.8e9,  # Qwen/Qwen3-32B's model card: 32.8B parameters
    "qwen3-30b-a3b": 30.5e9,
    # gpt-oss: 116.83B / 5.13B and 20.91B / 3.61B (OpenAI's gpt-oss model card, Table 1:
    # its active count leaves the embedding out).
    "gpt-oss-120b": 116.83e9,
    "gpt-oss-20b": 20.91e9,
    # Llama 4 Scout 109B / 17B, Maverick 400B / 17B (Meta's Llama 4 model card: the totals
    # include the vision encoder, which the text model here lacks).
    "llama-4-scout": 109e9,
    "llama-4-maverick": 400e9,
    # Gemma 3 12B: 1,012M embedding + 10,759M non-embedding parameters (Gemma 3 technical
    # report, arXiv 2503.19786, Table 1; its 417M vision encoder left out).
    "gemma-3-12b": 11.771e9,
}
# How close each published count is reachable, where not within 0.5%: Kimi K2's 1.04T and
# Scout's 109B count parts outside the text decoder (the report's rounding, the vision encoder).
TOLERANCE = {"kimi-k2": 0.015, "llama-4-scout": 0.015}
PUBLISHED_ACTIVE = {
    "mixtral-8x7b": 12.9e9,
    "deepseek-v3": 37e9,
    "kimi-k2": 32.6e9,
    "qwen3-235b-a22b": 22e9,
    "qwen3-30b-a3b": 3.3e9,
    "llama-4-scout": 17e9,
    "llama-4-maverick": 17e9,
}
# Published active counts are rounded to two significant figures (37B, 22B, 3.3B, 17B).
ACTIVE_TOLERANCE = 0.025


@pytest.mark.parametrize("name", sorted(KNOWN_TRANSFORMERS))
def test_known_models_have_their_published_size(name: str) -> None:
    t = KNOWN_TRANSFORMERS[name]
    assert t.parameters == pytest.approx(PUBLISHED[name], rel=TOLERANCE.get(name, 0.005))


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE))
def test_known_mixtures_have_their_published_active_size(name: str) -> None:
    t = KNOWN_TRANSFORMERS[name]
    assert t.active_parameters == pytest.approx(PUBLISHED_ACTIVE[name], rel=ACTIVE_TOLERANCE)


@pytest.mark.parametrize(("name", "active"), [("gpt-oss-120b", 5.13e9), ("gpt-oss-20b", 3.61e9)])
def test_gpt_oss_active_count_leaves_the_embedding_out(name: str, active: float) -> None:
    t = KNOWN_TRANSFORMERS[name]
    assert t.active_parameters - t.embedding_parameters == pytest.approx(active, rel=0.005)


@pytest.mark.parametrize("name", sorted(KNOWN_TRANSFORMERS))
def test_api_and_cel_twins_equal_the_engine(name: str) -> None:
    t = KNOWN_TRANSFORMERS[name]
    arch = _api(t)
    assert architecture_parameters(arch) == t.parameters
    assert _cel_parameters(arch) == t.parameters
    assert architecture_active_parameters(arch) == t.active_parameters
    assert _cel_active_parameters(arch) == t.active_parameters
    assert transformer_of(arch) == t


@given(
    layers=st.integers(1, 128),
    head_dim=st.sampled_from([32, 64, 128]),
    heads=st.integers(1, 64),
    group=st.sampled_from([1, 2, 4, 8]),
    ffn=st.one_of(st.none(), st.integers(1, 65536)),
    gated=st.booleans(),
    tied=st.booleans(),
    vocab=st.integers(1, 262144),
)
def test_twins_agree_on_random_shapes(layers, head_dim, heads, group, ffn, gated, tied, vocab):
    heads *= group
    kv_heads = heads // group
    arch = TransformerArchitecture(
        layers=layers,
        hidden_size=heads * head_dim,
        attention_heads=heads,
        kv_heads=kv_heads,
        ffn_hidden_size=ffn,
        ffn_type="Gated" if gated else "Standard",
        vocab_size=vocab,
        sequence_length=2048,
        tied_embeddings=tied,
    )
    engine = Transformer(
        layers,
        heads * head_dim,
        heads,
        vocab,
        2048,
        kv_heads=kv_heads,
        ffn_hidden=ffn or 0,
        gated_ffn=gated,
        tied_embeddings=tied,
    )
    assert architecture_parameters(arch) == engine.parameters == _cel_parameters(arch)


@given(
    layers=st.integers(2, 64),
    heads=st.integers(1, 32),
    head_dim=st.sampled_from([64, 128]),
    explicit_head_dim=st.booleans(),
    experts=st.integers(1, 64),
    top=st.integers(1, 8),
    shared=st.integers(0, 2),
    expert_ffn=st.one_of(st.none(), st.integers(1, 8192)),
    first_dense=st.integers(0, 3),
    frequency=st.integers(1, 2),
    latent=st.booleans(),
    q_lora=st.one_of(st.none(), st.integers(1, 2048)),
)
@settings(deadline=None)  # CEL evaluation on a shared machine
def test_twins_agree_on_random_mixtures(
    layers,
    heads,
    head_dim,
    explicit_head_dim,
    experts,
    top,
    shared,
    expert_ffn,
    first_dense,
    frequency,
    latent,
    q_lora,
):
    first_dense = min(first_dense, layers - frequency)
    hidden = heads * 96 if explicit_head_dim else heads * head_dim
    mla = (
        {"kvLoraRank": 512, "qkRopeHeadDim": 64, "qkNopeHeadDim": 128, "vHeadDim": 128}
        if latent
        else None
    )
    if mla and q_lora:
        mla["qLoraRank"] = q_lora
    arch = TransformerArchitecture.model_validate(
        {
            "layers": layers,
            "hiddenSize": hidden,
            "attentionHeads": heads,
            "vocabSize": 32000,
            "sequenceLength": 4096,
            "ffnType": "Gated",
            "ffnHiddenSize": 4096,
            **({"headDim": head_dim} if explicit_head_dim and not latent else {}),
            **({"attentionType": "MultiHeadLatent", "latentAttention": mla} if mla else {}),
            "experts": experts,
            "activeExperts": min(top, experts),
            "sharedExperts": shared,
            **({"expertFfnHiddenSize": expert_ffn} if expert_ffn else {}),
            "firstDenseLayers": first_dense,
            "moeLayerFrequency": frequency,
        }
    )
    engine = transformer_of(arch)
    assert architecture_parameters(arch) == engine.parameters == _cel_parameters(arch)
    assert (
        architecture_active_parameters(arch)
        == engine.active_parameters
        == _cel_active_parameters(arch)
    )
    assert engine.active_parameters <= engine.parameters


def test_hand_computed_mixtral_8x7b() -> None:
    t = KNOWN_TRANSFORMERS["mixtral-8x7b"]
    h, f = 4096, 14336
    attention = 2 * h * h + 2 * h * 1024
    expert = 3 * h * f
    router = 8 * h
    per_layer = attention + 8 * expert + router + 2 * h
    assert t.parameters == 32 * per_layer + 2 * 32000 * h + h
    assert t.active_parameters == 32 * (attention + 2 * expert + router + 2 * h) + 2 * 32000 * h + h
    assert t.routed_expert_parameters == 32 * 8 * expert
    # Training FLOPs follow the active weights: 6 x (active matmul weights) + attention.
    matmul = t.active_parameters - 32000 * h - h
    assert t.training_flops_per_token() == pytest.approx(6 * matmul + 12 * 32 * h * 32768)


def test_hand_computed_deepseek_v3() -> None:
    t = KNOWN_TRANSFORMERS["deepseek-v3"]
    h, heads = 7168, 128
    # MLA: W_qa 7168x1536, W_qb 1536x(128x192), W_kva 7168x(512+64), W_kvb 512x(128x256),
    # W_o (128x128)x7168.
    attention = h * 1536 + 1536 * heads * 192 + h * 576 + 512 * heads * 256 + heads * 128 * h
    assert t.attention_parameters_per_layer == attention
    dense = 3 * h * 18432
    expert = 3 * h * 2048
    moe = 257 * expert + 256 * h
    assert t.moe_layers == 58 and t.dense_layers == 3
    assert t.parameters == 61 * (attention + 2 * h) + 3 * dense + 58 * moe + 2 * 129280 * h + h
    # The latent cache: 512 + 64 elements per layer, 70 KB per token in bf16 (DeepSeek-V2's
    # section 2.1.2: 4.5 x d_h per layer, d_h = 128), against 2 x 128 x 128 for MHA.
    assert t.kv_cache_bytes_per_token(2) == 61 * 576 * 2
    # Attention FLOPs: scores over 192-wide heads, values 128 wide.
    assert t.attention_flops_per_token(1000) == 2 * 61 * 1000 * heads * (192 + 128)


def test_one_expert_of_top_one_is_the_dense_model() -> None:
    dense = KNOWN_TRANSFORMERS["llama-3-8b"]
    moe = Transformer(
        32,
        4096,
        32,
        128256,
        8192,
        kv_heads=8,
        ffn_hidden=14336,
        gated_ffn=True,
        experts=1,
        active_experts=1,
    )
    assert moe.parameters == moe.active_parameters == dense.parameters
    assert moe.training_flops_per_token() == dense.training_flops_per_token()
    assert moe.kv_cache_bytes_per_token(2) == dense.kv_cache_bytes_per_token(2)


def test_interleaved_and_leading_dense_layers() -> None:
    maverick = KNOWN_TRANSFORMERS["llama-4-maverick"]
    assert maverick.moe_layers == 24 and maverick.dense_layers == 24
    kimi = KNOWN_TRANSFORMERS["kimi-k2"]
    assert kimi.moe_layers == 60


def test_hand_computed_llama_3_8b() -> None:
    t = KNOWN_TRANSFORMERS["llama-3-8b"]
    # Grouped-query attention: 8 KV heads of 128 -> K and V are 4096 x 1024 each.
    assert t.head_dim == 128 and t.kv_hidden == 1024
    assert t.attention_parameters_per_layer == 2 * 4096**2 + 2 * 4096 * 1024
    assert t.ffn_parameters_per_layer == 3 * 4096 * 14336
    # KV cache in bf16: 2 (K, V) x 32 layers x 1024 x 2 bytes = 128 KiB per token.
    assert t.kv_cache_bytes_per_token(2) == 131072
    # Training FLOPs per token = 6 x matmul weights + 12 x layers x hidden x sequence.
    n = t.parameters - t.embedding_parameters  # untied: the LM head is a matmul
    assert t.training_flops_per_token() == pytest.approx(6 * n + 12 * 32 * 4096 * 8192)
    assert t.weight_bytes(2) == 2 * t.parameters


def test_tied_embeddings_count_once_but_still_multiply() -> None:
    untied = Transformer(16, 2048, 32, 128256, 8192, kv_heads=8, ffn_hidden=8192, gated_ffn=True)
    tied = Transformer(
        16,
        2048,
        32,
        128256,
        8192,
        kv_heads=8,
        ffn_hidden=8192,
        gated_ffn=True,
        tied_embeddings=True,
    )
    assert untied.parameters - tied.parameters == 128256 * 2048
    assert untied.forward_flops_per_token() == tied.forward_flops_per_token()
    assert tied.parameters == pytest.approx(1.24e9, rel=0.01)  # Llama 3.2 1B's model card


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hidden": 4100, "heads": 32}, "hidden 4100 is not divisible by heads 32"),
        ({"kv_heads": 5}, "heads 32 is not divisible by kv_heads 5"),
        ({"layers": 0}, "layers must be positive"),
        ({"experts": 8, "active_experts": 9}, "active_experts 9 must be between 1 and experts 8"),
        ({"shared_experts": 1}, "active_experts and shared_experts need experts"),
        (
            {"experts": 8, "active_experts": 2, "first_dense_layers": 32},
            "leave no MoE layer",
        ),
    ],
)
def test_engine_refuses_impossible_shapes(kwargs: dict[str, int], message: str) -> None:
    shape = {"layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000, "sequence_length": 4096}
    with pytest.raises(ValueError, match=message):
        Transformer(**{**shape, **kwargs})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"hiddenSize": 4100}, "hiddenSize 4100 must be divisible by attentionHeads 32"),
        ({"kvHeads": 5}, "kvHeads 5 must divide attentionHeads 32"),
        ({"experts": 8}, "experts and activeExperts go together"),
        ({"experts": 8, "activeExperts": 9}, "activeExperts 9 must be at most experts 8"),
        ({"sharedExperts": 1}, "sharedExperts, expertFfnHiddenSize, firstDenseLayers,"),
        ({"expertWeights": "MXFP4"}, "moeLayerFrequency and expertWeights need experts"),
        (
            {"experts": 8, "activeExperts": 2, "firstDenseLayers": 32},
            "firstDenseLayers and moeLayerFrequency leave no MoE layer",
        ),
        ({"attentionType": "MultiHeadLatent"}, "latentAttention is required with attentionType"),
        (
            {
                "latentAttention": {
                    "kvLoraRank": 512,
                    "qkRopeHeadDim": 64,
                    "qkNopeHeadDim": 128,
                    "vHeadDim": 128,
                }
            },
            "latentAttention is required with attentionType",
        ),
    ],
)
def test_api_refuses_impossible_shapes(fields: dict[str, int], message: str) -> None:
    base = {
        "layers": 32,
        "hiddenSize": 4096,
        "attentionHeads": 32,
        "vocabSize": 32000,
        "sequenceLength": 4096,
    }
    with pytest.raises(ValueError, match=message):
        TransformerArchitecture.model_validate({**base, **fields})
