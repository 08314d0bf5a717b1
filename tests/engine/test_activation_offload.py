"""Activation offloading to host memory (MaxText's qkv_proj_offloaded and minimal_offloaded):
what stays in HBM and what goes to the host, by hand; the copies charged only beyond the
layer's compute; the host's room; the published Llama 2 70B v6e-256 layout that fits."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import llm_training as L
from ringmaster.engine import recompute as R
from ringmaster.engine.activation_offload import (
    HOST_LINK_GBPS_PER_DIRECTION,
    OFFLOADED_ELEMENTS,
    exposed_offload_seconds,
    host_offload_bytes,
    offload_bytes_per_layer,
    offload_refusal,
    offloaded_elements,
)
from ringmaster.engine.efficiency import PCIE_EFFICIENCY
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_FULL,
    RECOMPUTE_MINIMAL,
    RECOMPUTE_MINIMAL_OFFLOADED,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTES,
    SHARD_FULL,
)
from ringmaster.engine.llm_layout_search import (
    SEARCHED_RECOMPUTES,
    LayoutRequest,
    layout_grid,
    search_layouts,
)
from ringmaster.engine.llm_memory import (
    REBUILDS_LAYER,
    REPLICATED_WITHOUT_SP,
    SAVED_ELEMENTS,
    _saved_elements,
    activation_bytes_per_layer,
)
from ringmaster.engine.step_parts import micro_batch_parts
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer
from ringmaster.engine.units import GB, GIB

pytestmark = pytest.mark.unit

OFFLOADING = (RECOMPUTE_QKV_PROJ_OFFLOADED, RECOMPUTE_MINIMAL_OFFLOADED)
# h 8, h_kv 4 (2 heads of 4, 1 KV head), f 16 gated, 2 layers, sequence 4, vocabulary 16.
TINY = Transformer(2, 8, 2, 16, 4, kv_heads=1, ffn_hidden=16, gated_ffn=True)
LLAMA2_70B_4K = replace(KNOWN_TRANSFORMERS["llama-2-70b"], sequence_length=4096)


def v6e_256() -> L.LayoutHardware:
    """One v6e-256 slice: 16x16, 64 hosts of 4 chips, wrapped both ways, MaxText."""
    host = DEFAULT_CATALOG.host("tpu-v6e-slice", 4)
    return L.layout_hardware(
        host,
        64,
        DEFAULT_CATALOG,
        slice_axes=(16, 16, 1),
        wrapped=(True, True, False),
        framework=framework("MaxText"),
    )


def maxtext_request(
    recompute: str, micro_batch: int = 2, model: Transformer = LLAMA2_70B_4K
) -> LayoutRequest:
    """MaxText's llama2_70b_4096 on v6e-256: per_device_batch_size 2 (micro-batch 2, one per
    step), ici_fsdp_transpose_parallelism -1 (FSDP over the 256 chips), sequence 4096; another
    ``model`` on the same slice and layout."""
    return LayoutRequest(
        model=model,
        global_batch=256 * micro_batch,
        tensor=1,
        pipeline=1,
        context=1,
        sharding="Full",
        micro_batch=micro_batch,
        recompute=recompute,
        strategy="Ring",
    )


# --- by hand ------------------------------------------------------------------------------------


def test_codes_are_appended_so_old_codes_keep_their_meaning():
    assert RECOMPUTES[:6] == (
        "None",
        "Selective",
        "Full",
        "SelectiveOp",
        "Minimal",
        "SaveDotExceptMlp",
    )
    assert RECOMPUTES[RECOMPUTE_QKV_PROJ_OFFLOADED] == "QkvProjOffloaded"
    assert RECOMPUTES[RECOMPUTE_MINIMAL_OFFLOADED] == "MinimalOffloaded"
    # every table indexed by code has a row for each policy
    assert set(SAVED_ELEMENTS) == set(range(len(RECOMPUTES)))
    assert len(REPLICATED_WITHOUT_SP) == len(RECOMPUTES)
    assert set(OFFLOADING) <= set(REBUILDS_LAYER)


@pytest.mark.parametrize(
    ("code", "offloaded"),
    [
        (RECOMPUTE_QKV_PROJ_OFFLOADED, 8 + 2 * 4),  # Q (h), K and V (2 h_kv)
        (RECOMPUTE_MINIMAL_OFFLOADED, 3 * 8 + 2 * 4 + 2 * 16),  # Q, out, wo; K, V; wi_0, wi_1
    ],
)
def test_device_keeps_the_input_and_the_host_the_named_tensors_by_hand(code, offloaded):
    # micro-batch 3, sequence 4: 12 tokens, 2 bytes an element
    stored, _ = activation_bytes_per_layer(TINY, 3, 1, code)
    assert float(stored) == 2 * 12 * 8  # the layer input alone, as Full
    assert float(offloaded_elements(TINY, code)) == offloaded
    assert float(offload_bytes_per_layer(TINY, 3, 1, code)) == 2 * 12 * offloaded
    # tensor 2 and context 2 each halve a rank's share
    assert float(offload_bytes_per_layer(TINY, 3, 2, code, 2)) == 2 * 12 * offloaded / 4
    # one stage of both layers, one micro-batch in flight
    assert float(host_offload_bytes(TINY, 3, 1, 1, 4, code)) == 2 * 2 * 12 * offloaded
    # two stages, 1F1B: the first keeps min(p, m) = 2 micro-batches of its one layer
    assert float(host_offload_bytes(TINY, 3, 1, 2, 4, code)) == 2 * 1 * 2 * 12 * offloaded


def test_the_standard_ffn_offloads_one_input_projection():
    gpt = Transformer(2, 8, 2, 16, 4, ffn_hidden=32, gated_ffn=False)
    assert float(offloaded_elements(gpt, RECOMPUTE_MINIMAL_OFFLOADED)) == 3 * 8 + 2 * 8 + 32


def test_policies_that_keep_everything_in_hbm_offload_nothing():
    for code in range(len(RECOMPUTES)):
        if code not in OFFLOADING:
            assert float(offloaded_elements(TINY, code)) == 0.0
            assert float(host_offload_bytes(TINY, 3, 1, 1, 4, code)) == 0.0


def test_recompute_flops_of_the_offloading_policies():
    model = KNOWN_TRANSFORMERS["llama-3-70b"]
    h, kv = model.hidden, model.kv_hidden
    full = float(R.recompute_flops_per_token_per_layer(model, RECOMPUTE_FULL))
    core = model.attention_flops_per_token(model.sequence_length) / model.layers
    qkv = float(R.recompute_flops_per_token_per_layer(model, RECOMPUTE_QKV_PROJ_OFFLOADED))
    assert qkv == pytest.approx(full - 2 * (h * h + 2 * h * kv))  # all but Q, K and V
    minimal = float(R.recompute_flops_per_token_per_layer(model, RECOMPUTE_MINIMAL_OFFLOADED))
    assert minimal == pytest.approx(core)  # as Minimal: the attention core


def test_tensor_parallel_recompute_skips_the_qkv_input_gather():
    assert float(L.tensor_parallel_collectives_per_layer(RECOMPUTE_FULL)) == 6
    assert float(L.tensor_parallel_collectives_per_layer(RECOMPUTE_QKV_PROJ_OFFLOADED)) == 5.5
    assert float(L.tensor_parallel_collectives_per_layer(RECOMPUTE_MINIMAL_OFFLOADED)) == 4


# --- properties ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    h=st.sampled_from([512, 1024, 4096, 8192]),
    kv_heads=st.sampled_from([1, 2, 8]),
    f_ratio=st.sampled_from([2.5, 3.5, 4.0]),
    gated=st.booleans(),
    tensor=st.sampled_from([1, 2, 4, 8]),
    context=st.sampled_from([1, 2]),
    micro_batch=st.integers(1, 8),
    code=st.sampled_from(OFFLOADING),
)
def test_an_offloading_policy_never_keeps_more_in_hbm_than_minimal(
    h, kv_heads, f_ratio, gated, tensor, context, micro_batch, code
):
    model = Transformer(
        4, h, 8, 32000, 2048, kv_heads=kv_heads, ffn_hidden=int(h * f_ratio), gated_ffn=gated
    )
    offloaded = activation_bytes_per_layer(model, micro_batch, tensor, code, context)[0]
    minimal = activation_bytes_per_layer(model, micro_batch, tensor, RECOMPUTE_MINIMAL, context)[0]
    assert float(offloaded) <= float(minimal)
    # minimal_offloaded moves exactly what minimal keeps but the layer input
    moved = offloaded_elements(model, RECOMPUTE_MINIMAL_OFFLOADED)
    kept = _saved_elements(model, RECOMPUTE_MINIMAL_OFFLOADED)
    assert float(moved + kept) == float(_saved_elements(model, RECOMPUTE_MINIMAL))


@settings(max_examples=60, deadline=None)
@given(
    nbytes=st.floats(0.0, 1e10),
    layer=st.floats(1e-4, 10.0),
    gbps=st.floats(1.0, 200.0),
)
def test_the_copies_are_charged_only_beyond_the_layers_compute(nbytes, layer, gbps):
    link = gbps * GB
    exposed = float(exposed_offload_seconds(nbytes, link, layer))
    transfer = 2.0 * nbytes / link  # out in forward, back in backward
    assert exposed == pytest.approx(max(transfer - layer, 0.0), abs=1e-12)
    assert 0.0 <= exposed <= transfer


def test_a_free_host_link_costs_what_the_policy_computes_and_nothing_more():
    hw = replace(v6e_256(), host_link_bandwidth=np.inf)
    offloaded = micro_batch_parts(LLAMA2_70B_4K, hw, 2, 1, 1, RECOMPUTE_MINIMAL_OFFLOADED)
    minimal = micro_batch_parts(LLAMA2_70B_4K, hw, 2, 1, 1, RECOMPUTE_MINIMAL)
    assert float(offloaded.activation_offload) == 0.0
    assert float(offloaded.total) == pytest.approx(float(minimal.total), rel=1e-12)


def test_a_slow_host_link_exposes_the_copies_beyond_each_layer():
    slow = replace(v6e_256(), host_link_bandwidth=1.0 * GB)
    parts = micro_batch_parts(LLAMA2_70B_4K, slow, 2, 1, 1, RECOMPUTE_QKV_PROJ_OFFLOADED)
    per_layer = float(offload_bytes_per_layer(LLAMA2_70B_4K, 2, 1, RECOMPUTE_QKV_PROJ_OFFLOADED))
    expected = 80 * (2 * per_layer / (1.0 * GB) - float(parts.layer))
    assert float(parts.activation_offload) == pytest.approx(expected)
    free = micro_batch_parts(
        LLAMA2_70B_4K,
        replace(slow, host_link_bandwidth=np.inf),
        2,
        1,
        1,
        RECOMPUTE_QKV_PROJ_OFFLOADED,
    )
    assert float(parts.total) == pytest.approx(float(free.total) + expected)


# --- the published v6e layout ---------------------------------------------------------------------


def test_v6e_host_link_and_dram_are_the_datasheets():
    hw = v6e_256()
    # PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 / 8 bits, per direction
    assert hw.host_link_bandwidth == pytest.approx(63.0e9 * PCIE_EFFICIENCY, rel=1e-3)
    assert hw.host_memory_per_accelerator == 1536 * GIB / 8  # DRAM per host / chips per host


def test_llama2_70b_v6e_256_with_qkv_proj_offloaded_fits():
    """MaxText's llama2_70b_4096 on v6e-256 (per_device_batch_size 2, FSDP over 256 chips,
    sequence 4096, remat qkv_proj_offloaded) plans and fits; minimal without offloading would
    keep Q, K, V, out, wi_0, wi_1 and wo of 80 layers in HBM: XLA recomputes nearly all of that
    to fit (engine.recompute.compiler_remat_share, about 90 % of it in the 31.25 GiB XLA may
    allocate), slower than offloading, which the recipe
    chose."""
    hw = v6e_256()
    offloaded = search_layouts(maxtext_request("QkvProjOffloaded"), hw)
    assert offloaded.fits, offloaded.reason
    chosen = offloaded.chosen
    assert (chosen.tensor, chosen.data, chosen.sharding) == (1, 256, "Full")
    # 80 layers x 8192 tokens x (h + 2 h_kv = 10240) x 2 bytes, one micro-batch in flight
    assert chosen.host_offload_bytes == 80 * 8192 * 10240 * 2
    assert chosen.host_offload_bytes <= hw.host_memory_per_accelerator
    minimal = search_layouts(maxtext_request("Minimal"), hw).chosen
    assert minimal.fits and minimal.compiler_remat > 0.85
    assert minimal.step_seconds > chosen.step_seconds
    # Full keeps as little in HBM; it fits too, and recomputes more
    full = search_layouts(maxtext_request("Full"), hw)
    assert full.fits
    assert chosen.total_bytes == pytest.approx(full.chosen.total_bytes)
    assert chosen.step_seconds < full.chosen.step_seconds


def test_the_host_must_hold_what_is_offloaded():
    hw = replace(v6e_256(), host_memory_per_accelerator=50 * GIB)
    search = search_layouts(maxtext_request("MinimalOffloaded"), hw)  # 102.5 GiB a chip
    assert not search.fits
    assert search.reason is not None
    assert "host memory" in search.reason and "MinimalOffloaded" in search.reason


def test_an_unknown_host_link_is_refused_by_name_and_never_fits():
    assert "tpu-v5p-slice" not in HOST_LINK_GBPS_PER_DIRECTION
    message = offload_refusal("QkvProjOffloaded", "tpu-v5p-slice")
    assert message is not None
    assert "QkvProjOffloaded" in message and "tpu-v5p-slice" in message
    assert offload_refusal("Full", "tpu-v5p-slice") is None
    assert offload_refusal("MinimalOffloaded", "tpu-v6e-slice") is None
    hw = replace(v6e_256(), host_link_bandwidth=0.0)
    assert not search_layouts(maxtext_request("QkvProjOffloaded"), hw).fits


def test_auto_does_not_search_the_offloading_policies():
    grid = layout_grid(replace(maxtext_request("Full"), recompute=None), v6e_256())
    assert set(grid["recompute"].tolist()) == set(SEARCHED_RECOMPUTES)
    assert not set(OFFLOADED_ELEMENTS) & set(SEARCHED_RECOMPUTES)
    assert SHARD_FULL in set(grid["sharding"].tolist())


# --- MaxText's offloaded layer inputs (spec.parallelism.offloadLayerInputs) --------------------

LLAMA31_70B = replace(KNOWN_TRANSFORMERS["llama-3.1-70b"], sequence_length=8192)


def llama31_70b_request() -> LayoutRequest:
    """tpu-recipes' Llama 3.1 70B on v6e-256 (llama3_1_70b_8192: per_device_batch_size 5, FSDP
    over the slice, remat custom with decoder_layer_input, query_proj, key_proj and value_proj
    offloaded: QkvProjOffloaded with the layer inputs offloaded)."""
    return maxtext_request("QkvProjOffloaded", 5, LLAMA31_70B)


def test_offloaded_layer_inputs_leave_hbm_for_the_host_by_hand():
    """Each layer's input, 5 x 8,192 tokens x h 8,192 x 2 bytes, moves from HBM to the host: the
    activations drop and the host bytes rise by 80 of them, and each layer copies one more."""
    hw = v6e_256()
    kept = search_layouts(llama31_70b_request(), hw).chosen
    moved = search_layouts(llama31_70b_request(), replace(hw, offload_layer_inputs=True)).chosen
    one = 5 * 8192 * 8192 * 2
    assert kept.activations_bytes - moved.activations_bytes == pytest.approx(80 * one, rel=1e-9)
    assert moved.host_offload_bytes - kept.host_offload_bytes == pytest.approx(80 * one, rel=1e-9)
    code = RECOMPUTES.index("QkvProjOffloaded")
    plain = offload_bytes_per_layer(LLAMA31_70B, 5, 1, code)
    assert float(offload_bytes_per_layer(LLAMA31_70B, 5, 1, code, layer_inputs=True)) == (
        pytest.approx(float(plain) + one)
    )
    # the published layout fits only with them off the chip (50 GiB of layer inputs a chip)
    assert moved.fits and not kept.fits
    assert moved.step_seconds == pytest.approx(kept.step_seconds, rel=0.02)


def test_xla_shares_the_logits_and_a_rebuilt_layer_pytorch_keeps_both():
    """The loss's logits are freed once the head's backward has run, before the last layer is
    rebuilt: a compiler's buffer assignment (MaxText) peaks at the larger of the two, PyTorch's
    caching allocator (torchtitan's memory rows) at their sum."""
    from ringmaster.engine.llm_memory import activation_bytes_per_layer, memory_per_accelerator

    code = RECOMPUTES.index("Full")
    common = dict(
        tensor=1,
        pipeline=1,
        data=8,
        sharding=SHARD_FULL,
        micro_batch=2,
        micro_batches=1,
        recompute=code,
        allocator_overhead=0.0,
        loss_bytes_per_logit=4.0,
    )
    both = memory_per_accelerator(LLAMA31_70B, **common, shared_peak=False)
    shared = memory_per_accelerator(LLAMA31_70B, **common, shared_peak=True)
    _, working = activation_bytes_per_layer(LLAMA31_70B, 2, 1, code)
    logits = 4.0 * 2 * 8192 * LLAMA31_70B.vocab
    assert float(both.activations - shared.activations) == pytest.approx(
        min(float(working), logits), rel=1e-9
    )
    assert framework("MaxText").compiler_buffers and not framework("PyTorch").compiler_buffers


def test_offloaded_layer_inputs_need_a_known_host_link():
    message = offload_refusal("Full", "tpu-v5p-slice", layer_inputs=True)
    assert message is not None and "offloadLayerInputs" in message and "tpu-v5p-slice" in message
    assert offload_refusal("Full", "tpu-v6e-slice", layer_inputs=True) is None
    hw = replace(v6e_256(), host_link_bandwidth=0.0, offload_layer_inputs=True)
    assert not search_layouts(replace(maxtext_request("Full")), hw).fits
