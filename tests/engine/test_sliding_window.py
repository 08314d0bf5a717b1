"""Sliding-window attention in the transformer description: attention FLOPs and KV-cache bytes by
hand, the properties that bound them by full attention, and the training step reading them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import llm_training as L
from ringmaster.engine import recompute as R
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_NONE
from ringmaster.engine.step_parts import (
    ATTENTION_BACKWARD_FLOPS,
    layer_attention_flops,
    micro_batch_parts,
    ring_attention_flops,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

# 4 layers, 4 heads of 64 (one layer's scores and weighted sum: 2 x 4 x (64 + 64) = 1024 FLOPs
# per query per key), a 128-token window on layers 0 and 2 (full every 2nd, as gpt-oss).
SMALL = Transformer(4, 256, 4, 1000, 1024, kv_heads=2, sliding_window=128, full_attention_every=2)
PER_KEY = 2 * 4 * (64 + 64)


def test_windowed_layers_follow_the_pattern():
    assert (SMALL.windowed_layers, SMALL.full_attention_layers) == (2, 2)
    gpt_oss = KNOWN_TRANSFORMERS["gpt-oss-120b"]
    assert (gpt_oss.windowed_layers, gpt_oss.full_attention_layers) == (18, 18)
    # Mistral 7B v0.1: a 4096 window on all 32 layers; Gemma 3 27B: 62 layers, five of six
    # windowed (sliding_window_pattern 6: layers 5, 11, ..., 59 full).
    mistral = Transformer(32, 4096, 32, 32000, 32768, kv_heads=8, sliding_window=4096)
    assert mistral.windowed_layers == 32
    gemma3 = Transformer(62, 5376, 32, 262208, 131072, head_dim=128, sliding_window=1024)
    gemma3 = replace(gemma3, full_attention_every=6)
    assert (gemma3.windowed_layers, gemma3.full_attention_layers) == (52, 10)


def test_training_attention_flops_by_hand():
    """S = 1024, w = 128: a full layer's whole-context count is 1024 keys; a windowed layer's
    causal mean is w - w^2 / (2S) = 128 - 8 = 120 keys, counted twice (240) as the full layer's
    512 is counted as 1024."""
    whole = PER_KEY * (2 * 1024 + 2 * (2 * 128 - 128**2 / 1024))
    assert SMALL.attention_flops_per_token(1024) == pytest.approx(whole, rel=1e-12)
    causal = PER_KEY * (2 * 512 + 2 * 120)
    assert float(SMALL.causal_attention_flops_per_token(1024)) == pytest.approx(causal, rel=1e-12)
    # Eager attention computes the masked scores too: every layer at the whole sequence.
    assert SMALL.dense_attention_flops_per_token(1024) == PER_KEY * 4 * 1024


def test_the_causal_mean_is_the_positions_mean():
    """The continuous mean w - w^2 / (2S) against the mean of min(i, w) over positions 1..S."""
    s, w = 1024, 128
    positions = np.arange(1, s + 1)
    exact = float(np.minimum(positions, w).mean())
    windowed_layer = float(SMALL.causal_attention_flops_per_token(s)) / PER_KEY - 2 * s / 2
    assert windowed_layer / 2 == pytest.approx(exact, rel=1e-3)


def test_decode_attention_and_kv_cache_by_hand():
    """One token at context 1000: 1000 keys on a full layer, 128 on a windowed one; the cache
    holds the same tokens, 2 x kv_heads x head_dim elements each per layer."""
    assert float(SMALL.decode_attention_flops_per_token(1000)) == PER_KEY * (2 * 1000 + 2 * 128)
    per_layer_token = 2 * 2 * 64 * 2.0  # K and V, 2 KV heads of 64, 2 bytes
    assert float(SMALL.kv_cache_bytes(1000, 2.0)) == per_layer_token * (2 * 1000 + 2 * 128)
    assert float(SMALL.kv_cache_layers(1000)) == pytest.approx(2 + 2 * 128 / 1000)
    # Below the window every layer holds every token.
    assert float(SMALL.kv_cache_layers(100)) == 4
    assert float(SMALL.kv_cache_bytes(100, 2.0)) == 100 * SMALL.kv_cache_bytes_per_token(2.0)


def test_kv_methods_take_arrays():
    contexts = np.array([64.0, 128.0, 4096.0])
    got = SMALL.kv_cache_bytes(contexts, 1.0)
    assert got.shape == (3,)
    assert [float(x) for x in got] == [float(SMALL.kv_cache_bytes(c, 1.0)) for c in contexts]


def test_gpt_oss_halves_its_cache_at_long_context():
    """gpt-oss-120b: 18 of 36 layers windowed at 128, so at its 131,072-token context a
    sequence's cache is about half of full attention's."""
    model = KNOWN_TRANSFORMERS["gpt-oss-120b"]
    full = replace(model, sliding_window=0, full_attention_every=0)
    ratio = float(model.kv_cache_bytes(131072, 2.0) / full.kv_cache_bytes(131072, 2.0))
    assert ratio == pytest.approx((18 + 18 * 128 / 131072) / 36, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    layers=st.integers(1, 64),
    window=st.integers(1, 1 << 17),
    every=st.integers(0, 8),
    sequence=st.integers(1, 1 << 17),
    context=st.integers(0, 1 << 17),
)
def test_a_window_never_costs_more_than_full_attention(layers, window, every, sequence, context):
    """A window never raises attention FLOPs or KV bytes over full attention, and is full
    attention exactly where it covers the sequence (or the context)."""
    model = Transformer(
        layers,
        512,
        8,
        1000,
        sequence,
        kv_heads=2,
        sliding_window=window,
        full_attention_every=every,
    )
    full = replace(model, sliding_window=0, full_attention_every=0)
    checks = [
        (
            model.attention_flops_per_token(sequence),
            full.attention_flops_per_token(sequence),
            sequence,
        ),
        (
            float(model.causal_attention_flops_per_token(sequence)),
            float(full.causal_attention_flops_per_token(sequence)),
            sequence,
        ),
        (
            float(model.decode_attention_flops_per_token(context)),
            float(full.decode_attention_flops_per_token(context)),
            context,
        ),
        (
            float(model.kv_cache_bytes(context, 2.0)),
            float(full.kv_cache_bytes(context, 2.0)),
            context,
        ),
    ]
    for windowed, dense, length in checks:
        assert windowed <= dense * (1 + 1e-12)
        if window >= length:
            assert windowed == pytest.approx(dense, rel=1e-12)
    # A wider window never costs less.
    wider = replace(model, sliding_window=window + 1)
    assert wider.attention_flops_per_token(sequence) >= model.attention_flops_per_token(sequence)


def _h100(fw: str) -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    return L.layout_hardware(host, 1, DEFAULT_CATALOG, framework=framework(fw))


@pytest.mark.parametrize("fw", ["Megatron", "PyTorch"])
def test_the_training_step_reads_the_window(fw: str):
    """gpt-oss-20b at 8192 tokens: the window shortens the attention part of the step (with a
    fused kernel) by the causal FLOPs, each layer's at its kernel's rate for its key loop (the
    windowed ones' 128 keys run slower per FLOP); a window as long as the sequence is full
    attention's step."""
    model = replace(KNOWN_TRANSFORMERS["gpt-oss-20b"], sequence_length=8192)
    full = replace(model, sliding_window=0, full_attention_every=0)
    covering = replace(model, sliding_window=8192)
    hw = _h100(fw)
    windowed, dense, same = (
        micro_batch_parts(m, hw, 1, 1, 1, RECOMPUTE_NONE) for m in (model, full, covering)
    )
    assert float(same.attention) == pytest.approx(float(dense.attention), rel=1e-12)
    expected = float(
        model.causal_attention_flops_per_token(8192) / full.causal_attention_flops_per_token(8192)
    )
    ce, kernel = hw.ceilings, hw.framework.attention_kernel(hw.nccl_arch)

    def seconds_per_forward_flop(m: Transformer, rate) -> float:  # type: ignore[no-untyped-def]
        return 1.0 / float(rate(ce, kernel, "forward", m, 1)) + ATTENTION_BACKWARD_FLOPS / float(
            rate(ce, kernel, "backward", m, 1)
        )

    slower = seconds_per_forward_flop(model, layer_attention_flops) / seconds_per_forward_flop(
        full, ring_attention_flops
    )
    assert 1.0 < slower < 1.2  # 3 % of its attention FLOPs in 128-key windows
    assert float(windowed.attention) == pytest.approx(
        expected * slower * float(dense.attention), rel=1e-9
    )
    assert float(windowed.gemm) == pytest.approx(float(dense.gemm), rel=1e-12)
    assert R.hardware_flops_per_token(model, RECOMPUTE_NONE) < R.hardware_flops_per_token(
        full, RECOMPUTE_NONE
    )


def test_eager_attention_gains_nothing_from_the_window():
    """Without a fused kernel the scores are materialised and masked: the same step."""
    model = replace(KNOWN_TRANSFORMERS["gpt-oss-20b"], sequence_length=4096)
    full = replace(model, sliding_window=0, full_attention_every=0)
    hw = _h100("PyTorch")
    eager = [
        micro_batch_parts(m, hw, 1, 1, 1, RECOMPUTE_NONE, flash_attention=False)
        for m in (model, full)
    ]
    assert float(eager[0].attention) == pytest.approx(float(eager[1].attention), rel=1e-12)


def test_serving_holds_and_reads_a_windowed_cache_and_caps_prompt_attention() -> None:
    """Serving reads the window too (engine.llm_step): gpt-oss-120b's cache per token at a
    served length of 9,000 tokens is its full layers' plus the windowed layers' last 128, its
    decode reads at the mean context the same way, and a prompt token attends to at most the
    window in a windowed layer; without the window every figure is every layer's."""
    from dataclasses import replace as _replace

    from ringmaster.engine import llm_step as S
    from ringmaster.engine.hardware import DEFAULT_CATALOG

    model = KNOWN_TRANSFORMERS["gpt-oss-120b"]
    full = _replace(model, sliding_window=0, full_attention_every=0)
    h100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")

    def terms(m):  # type: ignore[no-untyped-def]
        return S.serving_terms(m, h100, 2, h100.peak("fp8"), 1.0, 1.0, 8000.0, 1000.0)

    windowed, everything = terms(model), terms(full)
    served, context = 9000.0, 8500.0
    held = float(model.kv_cache_layers(served)) / model.layers
    read = float(model.kv_cache_layers(context)) / model.layers
    assert float(windowed.kv_bytes_per_token) == pytest.approx(
        held * float(everything.kv_bytes_per_token)
    )
    assert float(windowed.kv_read_per_token) == pytest.approx(
        read * float(everything.kv_read_per_token)
    )
    assert float(windowed.kv_cache_tokens) > 1.8 * float(everything.kv_cache_tokens)
    ratio = float(model.causal_attention_flops_per_token(8000.0)) / float(
        full.causal_attention_flops_per_token(8000.0)
    )
    # the windowed layers' FLOPs run at their 128-key loop's rate (engine.llm_step)
    from ringmaster.engine.ceilings import ceilings_for

    chip, kernel = ceilings_for(h100), S.prefill_attention_kernel(h100.nccl_arch)
    prompt_rate = float(chip.attention_flops(kernel, "forward", 8000.0, model.head_dim))
    windowed_rate = float(chip.attention_flops(kernel, "forward", 256.0, model.head_dim))
    share = float(model.windowed_attention_share(8000.0))
    slower = prompt_rate * ((1.0 - share) / prompt_rate + share / windowed_rate)
    assert float(windowed.prefill_attention_per_context) == pytest.approx(
        ratio * slower * float(everything.prefill_attention_per_context)
    )
