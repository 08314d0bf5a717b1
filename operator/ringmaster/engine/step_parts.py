"""The whole training step of one accelerator, part by part, as its framework runs it.

The engine's third layer (DESIGN.md): a micro-batch on the busiest pipeline stage costs

- **GEMMs**: the linear layers' FLOPs (forward at its precision's fast-accumulation rate under
  FP8, backward without: Transformer Engine's and torchao's defaults), recompute's, and the LM
  head's (and MaxText's one-hot embedding lookup on the first stage, ``use_iota_embed``), each at
  the chip's GEMM rate for its shape (:meth:`Ceilings.gemm_flops`), capped by the power-limited
  sustained rate;
- **attention**: the causal core (half the square) forward and backward (2.5 x the forward's
  FLOPs, FlashAttention's count) at the framework's kernel's measured rate for the sequence
  length and head dimension; without a fused kernel (materialised scores: Megatron-LM 2021), as
  batched GEMMs over the full square plus the scores' softmax traffic;
- **memory-bound kernels**: two norms, RoPE (rotary models), the FFN's activation and four residual
  adds (two forward, two gradient adds at the forks), eager, compiled or fused
  (:attr:`Framework.memory_bound`), a recomputing policy's forward share again, FP8's casts;
- **the loss** over the vocabulary (last stage; vocabulary-parallel over the tensor ranks);
- **host gaps**: an eager stack's layer cannot run faster than the host issues its kernels;
  a dropless MoE layer under Megatron-Core adds its host sync's exposed time a micro-batch
  (engine.frameworks.MEGATRON_MOE_SYNC_SECONDS) unless a full-iteration CUDA graph runs it;
- **activation offload**: a policy that offloads activations to host memory (MaxText's
  qkv_proj_offloaded, minimal_offloaded) pays the copies a layer's compute does not hide
  (:mod:`ringmaster.engine.activation_offload`);

and a step adds **the optimizer** over the parameters the rank updates (its data-parallel shard
under ZeRO / FSDP), with its bookkeeping (fp32 gradient accumulation, the bf16 copy-back, zeroing).
Every rate comes from :mod:`ringmaster.engine.ceilings`; every choice from
:mod:`ringmaster.engine.frameworks`. The layout arithmetic around it (pipeline bubble, collectives)
is :mod:`ringmaster.engine.llm_training`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import recompute as R
from ringmaster.engine.activation_offload import exposed_offload_seconds, offload_bytes_per_layer
from ringmaster.engine.frameworks import HF_EAGER, Framework, moe_sync_at
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_MINIMAL_WITH_CONTEXT,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE_OP,
    SHARD_NONE,
)
from ringmaster.engine.llm_memory import (
    BYTES_GRADIENTS,
    BYTES_MOMENT_FP32,
    REBUILDS_LAYER,
    routed_expert_parameters_per_layer,
    stage_layers,
)
from ringmaster.engine.moe_routing import moe_routing_bytes_per_token, routing_kind
from ringmaster.engine.moe_training import MOE_LOAD_IMBALANCE
from ringmaster.engine.transformer import Transformer

if TYPE_CHECKING:
    from ringmaster.engine.ceilings import Ceilings
    from ringmaster.engine.layout_hardware import LayoutHardware

F64 = NDArray[np.float64]

# FlashAttention's backward does 2.5 x the forward's FLOPs (FlashAttention-2 paper, section 4.1:
# the backward has 5 matmuls to the forward's 2); the measured file counts it the same way.
ATTENTION_BACKWARD_FLOPS = 2.5
# The policies that do not run the attention core's forward again: None and SelectiveOp keep its
# inputs and output, MinimalWithContext its output ("context": FlashAttention's backward needs
# its output and statistics, not a second forward).
KEEPS_THE_CORE = (RECOMPUTE_NONE, RECOMPUTE_SELECTIVE_OP, RECOMPUTE_MINIMAL_WITH_CONTEXT)
# The share of a memory-bound kernel's forward + backward time that is its forward (what a
# recomputing policy runs again): the median over the measured eager rmsnorm, RoPE and SwiGLU rows
# of fwd / (fwd + bwd) time is 0.27 / 0.49 / 0.36; 0.35 for all. Measured (h100-sxm-ops.yaml).
ELEMENTWISE_FORWARD_SHARE = 0.35
# FP8 linear layers scale and cast what they multiply: each layer's input and weight forward
# (e4m3), its output gradient backward (e5m2), each after an amax pass, plus the transposes the
# backward GEMMs take. Their cost per element of (input + output gradient + weight), as bytes at
# the streaming rate, by how the framework runs them (Framework.fp8_casts). Measured on a lent
# H100: one linear layer of Llama 3 8B's widths at 8,192 tokens, forward + backward with dynamic
# tensorwise scaling, less its three FP8 GEMMs alone (calibration/measured/device/2026-11-26c-h100
# fp8_linear.json; calibration.device_steps.fit_fp8_cast_bytes, the median of its four rows not
# bound by the host): "compiled" under torch.compile (Inductor fuses amax and cast into their
# neighbours; torchao's recipe, written in measure.py as torchao was not installed), "eager" op by
# op. "fused" (Transformer Engine's cast-transpose kernels, XLA's fusions) is not measured: it
# carries the compiled figure, and the plan's evidence says so (fp8_cast_evidence).
FP8_CAST_BYTES_PER_ELEMENT = {"compiled": 7.59, "eager": 60.8}
FP8_CAST_BYTES_PER_ELEMENT["fused"] = FP8_CAST_BYTES_PER_ELEMENT["compiled"]
# NVFP4 training runs the forward, data-gradient and weight-gradient GEMMs of the linear layers
# in FP4 (Transformer Engine's NVFP4BlockScaling). The share of them a recipe keeps in BF16,
# as a share of every stage's linear FLOPs: none by default. Megatron-Bridge's
# MixedPrecisionConfig leaves first_last_layers_bf16 False with 0 layers at either end in BF16,
# and its NVFP4 performance recipe keeps that (src/megatron/bridge/training/mixed_precision.py
# bf16_with_nvfp4_mixed, scripts/performance/utils/precision.py @ df0289c). NVIDIA's accuracy
# recipe ("Pretraining Large Language Models with NVFP4", arXiv 2509.25149, section 4: the 12B
# model's first two and last eight of 62 blocks, about 16 % of the linear layers) is an option a
# job would set (Megatron-LM's --first-last-layers-bf16); until 2026-11-28 the engine charged it
# to every NVFP4 job. Published, not fitted.
NVFP4_BF16_LINEAR_SHARE = 0.0


class MicroBatchParts(NamedTuple):
    """Seconds one micro-batch spends on one accelerator of the busiest stage, by part."""

    gemm: F64
    attention: F64
    memory_bound: F64
    loss: F64
    host_gap: F64  # host-bound time beyond the GPU's (eager stacks, short layers)
    # One layer's GPU seconds, forward + backward + recompute: what another micro-batch's
    # all-to-alls can hide behind (engine.moe_training.exposed_all_to_all).
    layer: F64 = np.zeros(())
    # Host-memory copies of offloaded activations beyond what the layers' compute hides.
    activation_offload: F64 = np.zeros(())

    @property
    def total(self) -> F64:
        return (
            self.gemm
            + self.attention
            + self.memory_bound
            + self.loss
            + self.host_gap
            + self.activation_offload
        )


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def _linear_flops_per_token_per_layer(
    model: Transformer,
    recompute: ArrayLike,
    load: ArrayLike = MOE_LOAD_IMBALANCE,
    stops_early: bool = False,
) -> tuple[F64, F64]:
    """(forward, backward + recompute) linear-layer FLOPs per token per layer, on the busiest
    expert-parallel rank (recompute.busiest_rank_parameters_per_layer at ``load``);
    ``stops_early``: Framework.recompute_stops_early."""

    forward = 2.0 * R.busiest_rank_parameters_per_layer(model, load)
    r = np.asarray(recompute)
    core = model.attention_flops_per_token(model.sequence_length) / model.layers
    again = R.recompute_flops_per_token_per_layer(model, r, load, stops_early)
    core_again = np.where(np.isin(r, KEEPS_THE_CORE), 0.0, core)
    return _f(forward), _f(2.0 * forward + again - core_again)


def _routed_share(model: Transformer, forward: F64, load: ArrayLike = MOE_LOAD_IMBALANCE) -> F64:
    """The routed experts' share of a layer's linear FLOPs on the busiest expert-parallel rank
    (their ``load`` included); 0 for a dense model. The backward and the recompute are taken in
    the same share (they run the same matrices)."""
    if model.experts <= 1:
        return _f(0.0)
    routed = model.moe_layers * model.active_experts * model.expert_parameters / model.layers
    return _f(2.0 * _f(load) * routed / forward)


def expert_tokens(
    model: Transformer, rank_tokens: ArrayLike, expert: ArrayLike, load: ArrayLike = 1.0
) -> F64:
    """Tokens one local expert's GEMM multiplies in a micro-batch: the ``expert`` ranks of an
    expert-parallel group send it their tokens routed to it, ``top-k / experts`` of each rank's
    (Megatron-Core's grouped GEMM runs each local expert on its own tokens: a GEMM of that M,
    not of the micro-batch's), times ``load`` for the busiest expert (1: the mean;
    engine.moe_training.routed_load: a capacity factor's cap, or its padded capacity)."""
    per_expert = _f(rank_tokens) * _f(expert) * model.active_experts / max(model.experts, 1)
    per_expert = per_expert * _f(load)
    return _f(np.maximum(per_expert, 1.0))


def _core_again(model: Transformer, recompute: ArrayLike) -> F64:
    """1 where the policy recomputes the attention core's forward, else 0."""
    r = np.asarray(recompute)
    return np.where(np.isin(r, KEEPS_THE_CORE), 0.0, 1.0)


def _gemm_seconds(
    hw: LayoutHardware, flops_fwd: F64, flops_bwd: F64, width: ArrayLike, tokens: ArrayLike
) -> F64:
    ce = hw.ceilings
    if hw.compute_precision == "fp8":
        fwd = ce.gemm_flops("fp8fast", width, tokens) * hw.step_fit
        bwd = ce.gemm_flops("fp8", width, tokens) * hw.step_fit
        return _f(flops_fwd / fwd + flops_bwd / bwd)
    if hw.compute_precision == "fp4":
        # fprop, dgrad and wgrad in FP4, NVFP4_BF16_LINEAR_SHARE of them in bf16
        fp4 = ce.gemm_flops("fp4", width, tokens) * hw.step_fit
        bf16 = ce.gemm_flops("bf16", width, tokens) * hw.step_fit
        share = NVFP4_BF16_LINEAR_SHARE
        return _f((flops_fwd + flops_bwd) * ((1.0 - share) / fp4 + share / bf16))
    rate = ce.gemm_flops(hw.compute_precision, width, tokens) * hw.step_fit
    return _f((flops_fwd + flops_bwd) / rate)


def micro_batch_parts(
    model: Transformer,
    hw: LayoutHardware,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    recompute: ArrayLike,
    context: ArrayLike = 1,
    flash_attention: bool = True,
    sequence_parallel: bool = True,
    expert: ArrayLike = 1,
    sharding: ArrayLike = SHARD_NONE,
    expert_tensor: ArrayLike | None = None,
    load: ArrayLike = MOE_LOAD_IMBALANCE,
) -> MicroBatchParts:
    """The parts of one micro-batch on the busiest stage (see the module's docstring).
    ``expert``: the expert-parallel degree of a mixture of experts (the tokens each local
    expert's grouped GEMM receives); ``expert_tensor``: the ranks each expert is split over
    (None: the tensor degree); ``sharding``: the layout's (Hugging Face modules under
    autocast when unsharded, in bf16 when sharded: Framework.autocast_unsharded); ``load``: the
    busiest expert-parallel rank's routed tokens over the mean (engine.moe_training)."""
    fw, ce = hw.framework, hw.ceilings
    t, c = _f(tensor), _f(context)
    rank_tokens = _f(micro_batch) * model.sequence_length / c  # tokens a rank's layers see
    tokens = rank_tokens / t  # per-rank share of the token x width work
    r = np.asarray(recompute)

    # GEMMs of the linear layers; a mixture of experts' routed experts at their own shape.
    fwd, bwd = _linear_flops_per_token_per_layer(model, r, load, fw.recompute_stops_early)
    routed = _routed_share(model, fwd, load)
    # The routed experts' share of backward + recompute is the forward's; what an early stop
    # skips (the dense and shared experts' output projections) comes out of the dense part.
    skipped = R.early_stop_skip(model, r) if fw.recompute_stops_early else 0.0
    routed_bwd = (bwd + skipped) * routed
    dense_fwd, dense_bwd = fwd * (1.0 - routed), bwd - routed_bwd
    linear = _gemm_seconds(
        hw, dense_fwd * tokens, dense_bwd * tokens, model.hidden / t, rank_tokens
    )
    local_expert_weights = _f(0.0)
    if model.experts > 1:
        # An expert split etp ways is etp / t as narrow as a dense layer's share and sees etp / t
        # of the rank's tokens from each expert-parallel peer (below t, the tensor ranks' tokens
        # are dispatched apart): the same FLOPs per rank, at the grouped GEMM's own shape.
        etp = t if expert_tensor is None else _f(expert_tensor)
        local = routed_expert_parameters_per_layer(model) / (_f(expert) * etp)
        local_expert_weights = local
        linear = linear + _grouped_gemm_seconds(
            hw, fwd * routed * tokens, routed_bwd * tokens, model.expert_ffn_hidden / etp, local
        )

    # Attention core.
    full_core = model.attention_flops_per_token(model.sequence_length) / model.layers
    if flash_attention:
        kernel = fw.attention_kernel(hw.nccl_arch)
        causal_fwd = 0.5 * full_core * tokens
        redo = _core_again(model, r)
        # a call holds the micro-batch's sequences, the rank's heads and its share of the
        # sequence: few of them leave SMs idle (Ceilings.attention_occupancy); the backward's
        # key-block tiles count as the forward's query tiles
        filled = ce.attention_occupancy(micro_batch, model.heads / t, model.sequence_length / c)
        fwd_rate = layer_attention_flops(ce, kernel, "forward", model, c) * filled
        bwd_rate = layer_attention_flops(ce, kernel, "backward", model, c) * filled
        derate = hw.attention_derate
        attention = (causal_fwd * (1.0 + redo) / fwd_rate) + (
            ATTENTION_BACKWARD_FLOPS * causal_fwd / bwd_rate
        )
        attention = _f(attention / derate)
    else:
        # Scores computed whole and masked: a sliding window saves nothing here.
        dense_core = model.dense_attention_flops_per_token(model.sequence_length) / model.layers
        flops = dense_core * tokens * (3.0 + _core_again(model, r))
        rate = ce.gemm_flops("bf16", model.head_dim, rank_tokens) * hw.step_fit
        attention = _f(flops / rate)

    # Memory-bound kernels of a layer.
    mode = fw.memory_bound
    sp_tokens = rank_tokens / t if sequence_parallel else rank_tokens
    ffn_width = _activation_width(model) / t
    rope_width = (
        _f(model.heads * model.qk_head_dim + model.kv_hidden) / t if _rotary(model) else _f(0.0)
    )
    head_extra = np.zeros(())  # the last stage's memory-bound work beyond its layers
    if mode == HF_EAGER:
        autocast = fw.autocast_unsharded & (np.asarray(sharding) == SHARD_NONE)
        per_layer_mb, head_extra = _hf_eager_seconds(
            model, hw, autocast, sp_tokens, rank_tokens, t, ffn_width, rope_width
        )
    else:
        norms = 2.0 * ce.elementwise_seconds(mode, "rmsnorm", 1.0) * sp_tokens * model.hidden
        adds = 4.0 * ce.elementwise_seconds(mode, "residual_add", 1.0) * sp_tokens * model.hidden
        rotary = ce.elementwise_seconds(mode, "rope", 1.0) * rank_tokens * rope_width
        activation = ce.elementwise_seconds(mode, "swiglu", 1.0) * rank_tokens * ffn_width
        per_layer_mb = norms + adds + rotary + activation
    if model.experts > 1:  # routing and the tokens' permutation, the MoE layers' share of them
        kind = routing_kind(mode, fw.name)
        moved = moe_routing_bytes_per_token(model, _f(expert) > 1, kind)
        per_layer_mb = per_layer_mb + (model.moe_layers / model.layers) * (
            sp_tokens * moved * ce.hbm_scale / ce_stream_bytes_per_s()
        )
    rebuilds = np.isin(r, REBUILDS_LAYER)
    per_layer_mb = per_layer_mb * (1.0 + np.where(rebuilds, ELEMENTWISE_FORWARD_SHARE, 0.0))
    if not flash_attention:
        # Materialised scores: written, softmaxed, read in forward; their gradient in backward.
        scores = micro_batch_scores_bytes(model, micro_batch, tensor, context)
        per_layer_mb = per_layer_mb + 4.0 * scores * ce.hbm_scale / (ce_stream_bytes_per_s())
    if hw.compute_precision in ("fp8", "fp4"):  # FP4's quantization casts taken as FP8's
        scaled = fp8_scaled_elements_per_layer(
            model, rank_tokens, sp_tokens, t, ffn_width, local_expert_weights, fw
        )
        per_layer_mb = per_layer_mb + FP8_CAST_BYTES_PER_ELEMENT[fw.fp8_casts] * scaled * (
            ce.hbm_scale / ce_stream_bytes_per_s()
        )

    stages = stage_layers(model, pipeline)
    layer_gpu = linear + attention + per_layer_mb
    host_floor = fw.host_kernels_per_layer * hw.host_seconds_per_kernel
    layer_gap = np.maximum(host_floor - layer_gpu, 0.0)
    if model.experts > 1:  # a dropless MoE layer's host sync (engine.frameworks), its share
        synced = moe_sync_at(fw, expert)
        layer_gap = layer_gap + (model.moe_layers / model.layers) * fw.moe_sync_seconds * synced
    offloaded = offload_bytes_per_layer(
        model, micro_batch, tensor, r, context, hw.offload_layer_inputs
    )
    layer_offload = exposed_offload_seconds(offloaded, hw.host_link_bandwidth, layer_gpu)

    # LM head (last stage) and the loss, once more per MTP module (the head is shared).
    head_flops = 2.0 * model.vocab * model.hidden * tokens * model.head_passes
    # Vocabulary tiling (MaxText's num_vocab_tiling) keeps no chunk's logits for backward: its
    # custom VJP computes each chunk's logits and loss again there (maxtext utils/
    # vocabulary_tiling.py), one more forward of the head and of the loss's forward share.
    again = 1.0 if hw.vocab_tiles > 1 else 0.0
    head = _gemm_seconds(
        hw.with_precision("bf16"),
        _f(head_flops * (1.0 + again)),
        _f(2.0 * head_flops),
        np.minimum(model.hidden, model.vocab / t),
        rank_tokens,
    )
    loss = _f(
        ce.loss_seconds(fw.loss, rank_tokens * model.vocab / t)
        * model.head_passes
        * (1.0 + again * ELEMENTWISE_FORWARD_SHARE)
    )

    # MaxText's iota embedding (use_iota_embed) looks the tokens up as a one-hot matmul on the
    # matrix units (layers/embeddings.py, Embed.__call__): [tokens, V] x [V, h] in forward and
    # the table's gradient, [V, tokens] x [tokens, h], in backward (the ids take none), on the
    # first stage, where a gather moves one row a token.
    embed = np.zeros(())
    if hw.iota_embed:
        embed_flops = _f(2.0 * model.vocab * model.hidden * tokens)
        embed = _gemm_seconds(
            hw.with_precision("bf16"),
            embed_flops,
            embed_flops,
            np.minimum(model.hidden, model.vocab / t),
            rank_tokens,
        )
    single = _f(pipeline) <= 1
    layer_stage = layer_gpu + layer_offload
    first = stages.first * layer_stage + embed  # the busiest only with stages apart
    mid = stages.middle * layer_stage
    last = stages.last * layer_stage + head + loss + head_extra + np.where(single, embed, 0.0)
    first_is_busiest = ~single & (first > np.maximum(mid, last))
    last_is_busiest = ~first_is_busiest & (last >= mid)
    n = np.where(
        first_is_busiest, stages.first, np.where(last_is_busiest, stages.last, stages.middle)
    )
    stage_gemm = np.where(last_is_busiest, head + np.where(single, embed, 0.0), 0.0)
    return MicroBatchParts(
        gemm=_f(n * linear + stage_gemm + np.where(first_is_busiest, embed, 0.0)),
        attention=_f(n * attention),
        memory_bound=_f(n * per_layer_mb + np.where(last_is_busiest, head_extra, 0.0)),
        loss=_f(np.where(last_is_busiest, loss, 0.0)),
        host_gap=_f(n * layer_gap),
        layer=_f(layer_gpu),
        activation_offload=_f(n * layer_offload),
    )


# Where a tensor feeds two ops its gradients are summed: per layer the residual stream's two forks,
# the normed input of q, k and v (two adds) and of gate and up (one).
HF_FORK_ADDS = 5.0
# The linear layers whose input autocast casts to bf16 (q, k, v, gate, up; the output and down
# projections take bf16 already).
HF_CAST_INPUTS = 5.0


def ring_attention_flops(
    ce: Ceilings, kernel: str, direction: str, model: Transformer, context: ArrayLike
) -> F64:
    """The attention kernel's rate over a rank's calls under ``context``-way ring attention.

    A kernel's rate was measured on causal calls of s tokens, whose key loop is s / 2 long on
    average: the longer the loop, the better a tile's fixed cost is spread (Ceilings
    .attention_flops). Context parallelism with the head-tail load balance (Transformer
    Engine's AttnFuncWithCPAndKVP2P, PyTorch's context_parallel) runs each rank's s / c queries
    as c calls of equal FLOPs: one causal call on its own s / c tokens, then, per ring step, all
    its queries against half a peer's K/V chunk (s / 2c keys) or its second half of queries
    against a whole chunk (s / c keys); averaged over the ring's ranks, half of the c - 1 steps
    are each. Their key loops are those of causal calls of s / c and 2 s / c tokens: the
    FLOP-weighted harmonic mean of the two rates. At c = 1 the one causal call of s."""
    c = _f(context)
    s, d = model.sequence_length, model.head_dim
    own = (c + 1.0) / (2.0 * c)  # the causal call, and the steps against half a chunk
    rate_own = ce.attention_flops(kernel, direction, s / c, d)
    rate_whole = ce.attention_flops(kernel, direction, 2.0 * s / c, d)
    return _f(1.0 / (own / rate_own + (1.0 - own) / rate_whole))


def layer_attention_flops(
    ce: Ceilings, kernel: str, direction: str, model: Transformer, context: ArrayLike
) -> F64:
    """The kernel's rate over a layer's attention FLOPs, the mean over the model's layers (by
    their FLOPs): a full layer's calls at :func:`ring_attention_flops`, a windowed layer's
    (sliding-window attention) with the window as their key loop, as a causal call of twice the
    window runs it (its mean loop), never longer than the rank's own share of the sequence: a
    short loop spreads a tile's fixed cost over fewer tiles (Ceilings.attention_flops)."""
    full = ring_attention_flops(ce, kernel, direction, model, context)
    own = model.sequence_length / _f(context)
    return with_windowed_layers(ce, kernel, direction, model, model.sequence_length, own, full)


def with_windowed_layers(
    ce: Ceilings,
    kernel: str,
    direction: str,
    model: Transformer,
    sequence: ArrayLike,
    own: ArrayLike,
    full: ArrayLike,
) -> F64:
    """``full`` (the full layers' rate) averaged by FLOPs with the windowed layers' over a causal
    sequence of ``sequence`` tokens: their key loop is the window, as a causal call of twice the
    window has it, never longer than ``own`` (the tokens of a call); ``full`` where the model has
    no window. Training's layers (:func:`layer_attention_flops`) and serving's prompts
    (engine.llm_step) alike."""
    if not model.windowed_layers:
        return _f(full)
    share = model.windowed_attention_share(sequence)
    loop = np.minimum(_f(own), 2.0 * model.sliding_window)
    windowed = ce.attention_flops(kernel, direction, loop, model.head_dim)
    return _f(1.0 / ((1.0 - share) / _f(full) + share / windowed))


def _hf_eager_seconds(
    model: Transformer,
    hw: LayoutHardware,
    autocast: NDArray[np.bool_],
    sp_tokens: F64,
    rank_tokens: F64,
    t: F64,
    ffn_width: F64,
    rope_width: F64,
) -> tuple[F64, F64]:
    """(per layer, last stage's extra) memory-bound seconds of Hugging Face's Llama modules run
    eagerly, forward + backward, at the measured per-element costs of the regime: under autocast
    over fp32 weights the fp32 residual stream's norms and adds, a bf16 cast of every linear
    layer's input and of every weight; with bf16 weights the same modules in bf16. The last stage
    adds the final norm and, under autocast, the LM head's weight cast."""
    ce = hw.ceilings

    def regime(name: str) -> tuple[F64, F64]:
        mode = f"hf_{name}"

        def ps(op: str) -> float:
            return float(ce.elementwise_seconds(mode, op, 1.0))

        h = model.hidden
        norms = 2.0 * ps("rmsnorm") * sp_tokens * h
        adds = (2.0 * ps("residual_add") + HF_FORK_ADDS * ps("fork_add")) * sp_tokens * h
        rotary = ps("rope") * rank_tokens * rope_width
        transpose = ps("transpose") * rank_tokens * model.heads * model.v_head_dim / t
        activation = ps("swiglu") * rank_tokens * ffn_width
        layer = norms + adds + rotary + transpose + activation
        extra = ps("rmsnorm") * sp_tokens * h
        if name == "autocast":
            layer = layer + HF_CAST_INPUTS * ps("cast") * rank_tokens * h
            layer = layer + ps("weight_cast") * model.active_layer_parameters / model.layers / t
            extra = extra + ps("weight_cast") * model.vocab * h / t
        return _f(layer), _f(extra)

    cast_layer, cast_extra = regime("autocast")
    plain_layer, plain_extra = regime("bf16")
    return (
        _f(np.where(autocast, cast_layer, plain_layer)),
        _f(np.where(autocast, cast_extra, plain_extra)),
    )


# A MoE layer's grouped GEMM calls on a micro-batch: gate + up and down forward, and the data
# and weight gradients of each in backward (Megatron-Core's GroupedMLP, one call per matrix for
# all the rank's local experts); the weights are read forward, read again for the data gradients
# and their gradients written: three passes over the local experts' bytes.
GROUPED_GEMM_CALLS = 6.0
GROUPED_WEIGHT_PASSES = 3.0
# An NVFP4 weight: 4 bits and one E4M3 scale per 16 (NVFP4's 16-element micro-blocks, arXiv
# 2509.25149 section 2): 0.5 + 1 / 16 bytes.
NVFP4_BYTES_PER_WEIGHT = 0.5 + 1.0 / 16.0


def _grouped_gemm_seconds(
    hw: LayoutHardware, flops_fwd: F64, flops_bwd: F64, width: ArrayLike, local_parameters: F64
) -> F64:
    """The routed experts' grouped GEMMs of one layer on one rank: each call streams its local
    experts' weights and computes at the decode-batch rate of the expert's width, whichever is
    slower, plus its floor (engine.ceilings.Ceilings.decode_gemm_seconds: fitted on the H100's
    GEMMs at M = 1-512, no token term). A grouped GEMM's M is the few tokens each expert gets,
    where the M >= 1,024 shape model's token term would put it far off: on the lent H100's
    torch._grouped_mm rows (8-2,048 tokens an expert) this model is -1 to -10 % at the median of
    each size, the shape model +46 % to -23 % (calibration.device_steps). The power cap binds
    as for the dense GEMMs."""
    ce = hw.ceilings

    def one(key: str, flops: F64) -> F64:
        e_d = ce.decode_gemm[key][2]
        peak = ce.peak_flops["bf16" if key == "bf16" else key.removesuffix("fast")]
        rate = np.minimum(
            e_d / (1.0 + ce.gemm_half_dim[key] / _f(width)) * peak, ce.sustained_flops[key]
        )
        return _f(flops / (rate * hw.step_fit))

    if hw.compute_precision == "fp8":
        compute = one("fp8fast", flops_fwd) + one("fp8", flops_bwd)
        weight_bytes = 1.0
        _, floor_us, _ = ce.decode_gemm["fp8"]
    elif hw.compute_precision == "fp4":
        share = NVFP4_BF16_LINEAR_SHARE
        flops = flops_fwd + flops_bwd
        compute = one("fp4", flops * (1.0 - share)) + one("bf16", flops * share)
        weight_bytes = (1.0 - share) * NVFP4_BYTES_PER_WEIGHT + share * 2.0
        _, floor_us, _ = ce.decode_gemm["fp4"]
    else:
        compute = one("bf16", flops_fwd + flops_bwd)
        weight_bytes = 2.0
        _, floor_us, _ = ce.decode_gemm["bf16"]
    key = hw.compute_precision if hw.compute_precision in ("fp8", "fp4") else "bf16"
    rate = ce.grouped_stream_bytes_per_s(key)  # under the grouped kernel's cap where measured
    stream = GROUPED_WEIGHT_PASSES * local_parameters * weight_bytes / rate
    return _f(np.maximum(compute, stream) + GROUPED_GEMM_CALLS * floor_us * 1e-6)


def fp8_scaled_elements_per_layer(
    model: Transformer,
    rank_tokens: ArrayLike,
    sp_tokens: ArrayLike,
    tensor: ArrayLike,
    ffn_width: ArrayLike,
    local_expert_weights: ArrayLike,
    fw: Framework,
) -> F64:
    """Elements an FP8 layer scales and casts per micro-batch on one rank: the linear layers'
    inputs (QKV's and the FFN's, hidden wide, cast before sequence parallelism's gather; the
    projection's and the down projection's), their output gradients, and their weights unless
    the framework keeps a step's FP8 weights (Framework.caches_fp8_weights)."""
    t = _f(tensor)
    q_width = model.heads * model.head_dim
    up_width = (2.0 if model.gated_ffn else 1.0) * _f(ffn_width)
    inputs = 2.0 * _f(sp_tokens) * model.hidden + _f(rank_tokens) * (q_width / t + _f(ffn_width))
    gradients = 2.0 * _f(sp_tokens) * model.hidden + _f(rank_tokens) * (
        (q_width + 2.0 * model.kv_hidden) / t + up_width
    )
    if fw.caches_fp8_weights:
        return _f(inputs + gradients)
    dense_ffn = model.ffn_parameters_per_layer / t
    if model.experts > 1:
        moe_share = model.moe_layers / model.layers
        ffn = moe_share * _f(local_expert_weights) + (1.0 - moe_share) * dense_ffn
    else:
        ffn = _f(dense_ffn)
    weights = model.attention_parameters_per_layer / t + ffn
    return _f(inputs + gradients + weights)


def fp8_cast_evidence(fw: Framework) -> str:
    """Where the FP8 scaling casts' cost for ``fw`` comes from (FP8_CAST_BYTES_PER_ELEMENT)."""
    measured = "measured on a lent H100 (calibration/measured/device/2026-11-26c-h100)"
    if fw.fp8_casts == "fused":
        return (
            f"FP8 scaling casts: {fw.name}'s fused kernels not measured; carried from "
            f"torch.compile's tensorwise scaling {measured}"
        )
    return f"FP8 scaling casts: {fw.fp8_casts} tensorwise scaling {measured}"


def fused_forward_elementwise_bytes(model: Transformer, tensor: ArrayLike) -> F64:
    """One token's memory-bound forward through every layer on one of ``tensor`` ranks, as fused
    kernels move it (engine.ceilings.FUSED_FORWARD_BYTES_PER_ELEMENT): two RMSNorms and two
    residual adds over the hidden state (whole on every rank), the FFN's activation over the
    rank's share of its width, RoPE over the rank's share of the queries and keys. What an
    inference engine's norm, activation and rotary kernels cost a token beyond its GEMMs and
    attention."""
    from ringmaster.engine.ceilings import FUSED_FORWARD_BYTES_PER_ELEMENT as B

    t = np.asarray(tensor, dtype=np.float64)
    hidden = (2.0 * B["rmsnorm"] + 2.0 * B["residual_add"]) * model.hidden
    activation = (B["swiglu"] if model.gated_ffn else B["gelu"]) * _activation_width(model) / t
    rope = (
        B["rope"] * (model.heads * model.qk_head_dim + model.kv_hidden) / t
        if _rotary(model)
        else 0.0 * t
    )
    return np.asarray(model.layers * (hidden + activation + rope), dtype=np.float64)


def _rotary(model: Transformer) -> bool:
    """Rotary position embeddings: the gated-FFN (Llama-family) models the engine knows use them;
    GPT-style models (standard FFN) add learned positions once, outside the layers."""
    return model.gated_ffn


def _activation_width(model: Transformer) -> float:
    """The FFN activation's width per token, the mean over layers: the dense FFN's, or the active
    (top-k and shared) experts' of a mixture of experts."""
    if model.experts <= 1:
        return float(model.ffn_hidden)
    moe = model.moe_layers
    active = (model.active_experts + model.shared_experts) * model.expert_ffn_hidden
    return (moe * active + (model.layers - moe) * model.ffn_hidden) / model.layers


def ce_stream_bytes_per_s() -> float:
    from ringmaster.engine.ceilings import H100_STREAM_GBPS
    from ringmaster.engine.units import GB

    return H100_STREAM_GBPS * GB


def micro_batch_scores_bytes(
    model: Transformer, micro_batch: ArrayLike, tensor: ArrayLike, context: ArrayLike
) -> F64:
    """Bytes of one layer's attention scores on a rank (bf16), without a fused kernel."""
    s = model.sequence_length
    return _f(2.0 * _f(micro_batch) * model.heads / _f(tensor) * s * s / _f(context))


# AdamW's bytes a parameter beside its moments, as measured: the fp32 parameter read and written,
# its fp32 gradient read.
ADAM_FIXED_BYTES = 12.0


def optimizer_seconds(
    model: Transformer,
    hw: LayoutHardware,
    rank_parameters: ArrayLike,
    shard_ranks: ArrayLike,
    sharding: ArrayLike,
    micro_batches: ArrayLike,
) -> F64:
    """One step's optimizer on a rank: AdamW over the parameters it updates (its 1 / shard_ranks
    share under any sharding), the fp32 gradient accumulation of every micro-batch after the
    first (unless fused into the GEMM), the bf16 copy-back and zeroing of the fp32 gradients."""
    fw, ce = hw.framework, hw.ceilings
    params = _f(rank_parameters)
    updated = np.where(np.asarray(sharding) == SHARD_NONE, params, params / _f(shard_ranks))
    # The measured AdamW moved 28 bytes a parameter (the fp32 parameter read and written, its
    # gradient read, each fp32 moment read and written): bf16 moments move 20, bf16 parameters
    # with their bf16 gradients and moments 14, in that ratio (derived from the bytes, not
    # measured).
    moved = 2.0 * hw.parameter_bytes + hw.gradient_bytes + 4.0 * hw.optimizer_moment_bytes
    adam = moved / (ADAM_FIXED_BYTES + 4.0 * BYTES_MOMENT_FP32)
    seconds = ce.optimizer_seconds(fw.optimizer, 1.0) * updated * adam
    # the gradient buffer's passes (zeroed, accumulated into), measured on fp32 gradients
    grads = hw.gradient_bytes / BYTES_GRADIENTS
    seconds = seconds + ce.optimizer_seconds("zero_grads", 1.0) * params * grads
    if fw.copies_weights_back:
        seconds = seconds + ce.optimizer_seconds("copy_back", 1.0) * updated
    if not fw.fused_grad_accumulation:
        extra = np.maximum(_f(micro_batches) - 1.0, 0.0)
        seconds = seconds + ce.optimizer_seconds("grad_accumulate", 1.0) * params * extra * grads
    return _f(seconds)
