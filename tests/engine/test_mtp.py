"""Multi-token prediction (DeepSeek-V3 report, arXiv 2412.19437, section 2.2): what an MTP module
weighs, what it costs a training step and where, DeepSeek-V3's published counts, and that serving
leaves it out."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import llm_training as L
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_NONE, SHARD_NONE
from ringmaster.engine.llm_memory import (
    BYTES_LOSS_PER_LOGIT,
    memory_per_accelerator,
    stage_layers,
)
from ringmaster.engine.step_parts import micro_batch_parts
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

DENSE = Transformer(8, 512, 8, 5000, 2048, kv_heads=2, ffn_hidden=1536, gated_ffn=True)
DEEPSEEK_V3 = KNOWN_TRANSFORMERS["deepseek-v3"]


def test_an_mtp_module_adds_exactly_one_block_and_its_projection():
    """One module: a layer of the model (attention, FFN, two norms), eh_proj (2h x h) and three
    norms (enorm, hnorm, the final one); the embedding and the head are shared."""
    h = DENSE.hidden
    with_mtp = replace(DENSE, mtp_layers=1)
    assert with_mtp.parameters == DENSE.parameters  # the model as published and served
    assert with_mtp.mtp_parameters == DENSE.parameters_per_layer + 2 * h * h + 3 * h
    assert with_mtp.trained_parameters - DENSE.trained_parameters == with_mtp.mtp_parameters
    assert replace(DENSE, mtp_layers=3).mtp_parameters == 3 * with_mtp.mtp_parameters
    assert DENSE.mtp_parameters == 0 and DENSE.head_passes == 1


def test_the_mtp_block_is_of_the_last_layers_kind():
    """Megatron-Core builds the MTP block from the decoder's last layer spec: DeepSeek-V3's is
    MoE (58 of 61 layers after 3 dense ones); a model whose last layer is dense gets a dense one."""
    assert DEEPSEEK_V3.last_layer_is_moe
    h = DEEPSEEK_V3.hidden
    block = (
        DEEPSEEK_V3.attention_parameters_per_layer + 2 * h + DEEPSEEK_V3.moe_parameters_per_layer
    )
    assert DEEPSEEK_V3.mtp_parameters == block + 2 * h * h + 3 * h
    # 47 layers, MoE every 2nd (layers 1, 3, ..., 45): the last, 46, is dense.
    odd = Transformer(
        47, 512, 8, 1000, 1024, gated_ffn=True, experts=8, active_experts=2, moe_layer_frequency=2
    )
    assert not odd.last_layer_is_moe
    assert (
        replace(odd, mtp_layers=1).mtp_parameters
        == (odd.attention_parameters_per_layer + 2 * 512 + odd.ffn_parameters_per_layer)
        + 2 * 512 * 512
        + 3 * 512
    )


def test_deepseek_v3_counts_as_published():
    """DeepSeek-V3's README_WEIGHTS.md (deepseek-ai/DeepSeek-V3): the main model 671B, of which
    36.6B activated counting the 0.9B head but not the embedding; the MTP module 11.5B of its own
    (the shared 0.9B embedding and 0.9B head excluded); the README's 685B on Hugging Face is
    671B + 14B, the module with its copies of the embedding and the head. Tolerances: 0.5% where
    the figure has three or more significant digits; 1.5% for the module's 11.5B (the block alone
    is 11.51B, with eh_proj's 0.10B 11.61B: the README's rounding)."""
    m = DEEPSEEK_V3
    assert m.mtp_layers == 1
    assert m.parameters == pytest.approx(671e9, rel=0.005)
    assert m.active_parameters - m.embedding_parameters == pytest.approx(36.6e9, rel=0.005)
    assert m.mtp_parameters == pytest.approx(11.5e9, rel=0.015)
    stored = m.trained_parameters + m.embedding_parameters + m.head_parameters
    assert stored == pytest.approx(685e9, rel=0.005)


def test_training_flops_count_the_module_as_megatron_does():
    """Megatron-LM's num_floating_point_operations: the MTP block as one more layer of the last
    kind, eh_proj and its norms, and the logits (mtp + 1) times; x 3 for forward and backward."""
    with_mtp = replace(DENSE, mtp_layers=1)
    h, v, s = DENSE.hidden, DENSE.vocab, DENSE.sequence_length
    layer = DENSE.parameters_per_layer + 2 * h * h + 3 * h
    core = DENSE.attention_flops_per_token(s) / DENSE.layers
    extra = 3.0 * (2.0 * (layer + v * h) + core)
    got = with_mtp.training_flops_per_token() - DENSE.training_flops_per_token()
    assert got == pytest.approx(extra, rel=1e-12)
    # Serving's forward pass does not run it.
    assert with_mtp.forward_flops_per_token() == DENSE.forward_flops_per_token()
    assert with_mtp.kv_cache_bytes_per_token(2.0) == DENSE.kv_cache_bytes_per_token(2.0)


@pytest.mark.parametrize("pipeline", [1, 2, 4])
def test_the_module_runs_on_the_last_stage(pipeline: int):
    """Megatron-Core's default placement (mtp_on_this_rank): the last pipeline stage runs the
    module's block beside its own layers, and the head and the loss once more."""
    with_mtp = replace(DENSE, mtp_layers=1)
    base, more = stage_layers(DENSE, pipeline), stage_layers(with_mtp, pipeline)
    assert float(more.last) == float(base.last) + 1
    assert float(more.middle) == float(base.middle)
    if pipeline > 1:
        assert float(more.first) == float(base.first)
    flops = [
        float(L.stage_flops_per_micro_batch(m, 1, 1, pipeline, RECOMPUTE_NONE))
        for m in (DENSE, with_mtp)
    ]
    per_layer = 3.0 * (
        2.0 * DENSE.parameters_per_layer
        + DENSE.attention_flops_per_token(DENSE.sequence_length) / DENSE.layers
    )
    head = 3.0 * 2.0 * DENSE.vocab * DENSE.hidden
    tokens = DENSE.sequence_length
    last_base = float(base.last) * per_layer + head
    last_more = last_base + per_layer + head
    expected = [max(float(base.middle) * per_layer, x) * tokens for x in (last_base, last_more)]
    assert flops == pytest.approx(expected, rel=1e-12)


def test_the_step_and_the_memory_grow_on_the_last_stage():
    """One stage: the step's GEMMs gain one layer and one head pass, the loss doubles, the
    logits held for the loss double; weights, gradients and optimizer state gain a layer's."""
    with_mtp = replace(DENSE, mtp_layers=1)
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    hw = L.layout_hardware(host, 1, DEFAULT_CATALOG, framework=framework("Megatron"))
    base, more = (micro_batch_parts(m, hw, 1, 1, 1, RECOMPUTE_NONE) for m in (DENSE, with_mtp))
    assert float(more.loss) == pytest.approx(2.0 * float(base.loss), rel=1e-12)
    assert float(more.gemm) > float(base.gemm)
    assert float(more.attention) == pytest.approx(9 / 8 * float(base.attention), rel=1e-12)
    kw = dict(
        tensor=1,
        pipeline=1,
        data=1,
        sharding=SHARD_NONE,
        micro_batch=1,
        micro_batches=1,
        recompute=RECOMPUTE_NONE,
    )
    m0, m1 = memory_per_accelerator(DENSE, **kw), memory_per_accelerator(with_mtp, **kw)
    logits = BYTES_LOSS_PER_LOGIT * DENSE.sequence_length * DENSE.vocab
    assert float(m1.activations - m0.activations) > logits
    ratio = float(m1.weights / m0.weights)
    assert ratio == pytest.approx(
        (DENSE.parameters + DENSE.parameters_per_layer) / DENSE.parameters, rel=1e-9
    )
    assert np.isfinite(float(m1.total))
