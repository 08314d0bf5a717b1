"""The transformer description: the engine's formulas, the API's Python twin and its CEL twin
agree, on published models and on random shapes."""

from __future__ import annotations

import celpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmaster.api.architecture import (
    TransformerArchitecture,
    architecture_parameters,
    cel_architecture_parameters,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

pytestmark = pytest.mark.unit


def _api(t: Transformer) -> TransformerArchitecture:
    return TransformerArchitecture(
        layers=t.layers,
        hidden_size=t.hidden,
        attention_heads=t.heads,
        kv_heads=t.kv_heads,
        ffn_hidden_size=t.ffn_hidden,
        ffn_type="Gated" if t.gated_ffn else "Standard",
        vocab_size=t.vocab,
        sequence_length=t.sequence_length,
        tied_embeddings=t.tied_embeddings,
    )


def _cel_parameters(arch: TransformerArchitecture) -> int:
    env = celpy.Environment()
    program = env.program(env.compile(cel_architecture_parameters("self")))
    # What the apiserver's rules see after defaulting: every defaulted field present.
    obj = arch.model_dump(mode="json", by_alias=True, exclude_none=True)
    return int(program.evaluate({"self": celpy.json_to_cel(obj)}))


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
}


@pytest.mark.parametrize("name", sorted(KNOWN_TRANSFORMERS))
def test_known_models_have_their_published_size(name: str) -> None:
    t = KNOWN_TRANSFORMERS[name]
    assert t.parameters == pytest.approx(PUBLISHED[name], rel=0.005)


@pytest.mark.parametrize("name", sorted(KNOWN_TRANSFORMERS))
def test_api_and_cel_twins_equal_the_engine(name: str) -> None:
    t = KNOWN_TRANSFORMERS[name]
    arch = _api(t)
    assert architecture_parameters(arch) == t.parameters
    assert _cel_parameters(arch) == t.parameters


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
