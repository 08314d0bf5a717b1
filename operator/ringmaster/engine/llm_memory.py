"""LLM training layouts: memory per accelerator.

Memory per accelerator (bytes), on the fullest of the first, a middle and the last stage:

- model state: BYTES_WEIGHTS + BYTES_GRADIENTS + BYTES_OPTIMIZER per parameter of the stage's
  shard (parameters / t, the stage's layers), each divided by d c as the sharding shards it;
- activations per layer per micro-batch: the tensors the recompute policy keeps
  (SAVED_ELEMENTS, counted as Korthikanti et al. 2022, "Reducing Activation Recomputation in
  Large Transformer Models", section 4, with FlashAttention keeping no s x s scores and no
  dropout masks), 2 bytes each (FP8 linear layers keep their inputs at 1), x s b / c tokens,
  / t (sequence parallelism); a policy that rebuilds layers also holds one layer's working set.
  The first stage of a 1F1B pipeline keeps min(p, m) micro-batches in flight, times
  (1 + (p - 1) / (p v)) when interleaved (ibid. section 4.2.3); the last stage also holds the
  loss's BYTES_LOSS_PER_LOGIT x s b V / (t c);
- the reserve: FRAMEWORK_RESERVE_BYTES (runtime outside the allocator) and ALLOCATOR_OVERHEAD
  (the caching allocator's slack over the activations).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.frameworks import Framework
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_FULL,
    RECOMPUTE_MINIMAL,
    RECOMPUTE_MINIMAL_OFFLOADED,
    RECOMPUTE_MINIMAL_WITH_CONTEXT,
    RECOMPUTE_NONE,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLP,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLPWI,
    RECOMPUTE_SELECTIVE,
    RECOMPUTE_SELECTIVE_OP,
    RECOMPUTES,
    SHARD_FULL,
    SHARD_GRADIENTS,
    SHARD_OPTIMIZER,
)
from ringmaster.engine.recompute import partial_recompute
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GIB

F64 = NDArray[np.float64]

# --- constants, each with its source --------------------------------------------------------


# Bytes per parameter of mixed-precision Adam, as Megatron-LM's distributed-optimizer table
# states them for bf16 parameters with fp32 gradients (docs/source/api-guide/dist_optimizer.md,
# "18 bytes" non-distributed): bf16 weights 2; fp32 gradient accumulation buffer 4
# (accumulate_allreduce_grads_in_fp32; torchtitan's FSDP2 reduce dtype is fp32 too); fp32 master
# weights 4 + Adam's first and second moments 4 + 4 = 12 (ZeRO, Rajbhandari et al. 2020, section
# 3.1: K = 12).
BYTES_WEIGHTS = 2.0
BYTES_GRADIENTS = 4.0
BYTES_OPTIMIZER = 12.0
# Adam's two moments, fp32 each in those 12; Megatron-Core's precision-aware optimizer keeps them
# in bf16 (--exp-avg-dtype / --exp-avg-sq-dtype bf16: Megatron-Bridge's DeepSeek recipes, the
# DeepSeek-V3 report section 3.3.2) beside the fp32 master: 8 bytes (optimizer_state_bytes).
BYTES_MOMENT_FP32 = 4.0
MOMENT_BYTES = {"fp32": BYTES_MOMENT_FP32, "bf16": 2.0}  # spec.model.optimizerMomentsDType
# The parameter (or master) the optimizer updates: fp32 in those 12, bf16 where the parameters
# are bf16 with no fp32 copy (spec.model.parameterDType: MaxText's weight_dtype bfloat16).
BYTES_PARAMETER_FP32 = 4.0
PARAMETER_BYTES = {"fp32": BYTES_PARAMETER_FP32, "bf16": 2.0}
# Those 18 are the state of an optimizer that keeps fp32 masters beside the bf16 weights it
# computes with and copies them back after each update (Megatron-LM's and DeepSpeed's
# mixed-precision optimizers: Framework.copies_weights_back). Where the parameters are the fp32
# copy, cast to bf16 layer by layer as they are computed with or gathered (PyTorch FSDP2's
# MixedPrecisionPolicy(param_dtype=bf16): torchtitan; FSDP1's MixedPrecision: llm-foundry;
# autocast over fp32 weights; MaxText's weight_dtype float32), the fp32 parameter and Adam's
# moments are BYTES_OPTIMIZER's 12, and a bf16 copy stays only where the framework keeps the
# gathered weights between forward and backward (:func:`weight_bytes`): 16 bytes with the
# gradient under full sharding or none, not 18.
# Bytes of a stored activation element (bf16).
BYTES_ACTIVATION = 2.0
# Bytes per logit at the loss's peak, on the last stage: the fp32 logits the cross-entropy
# works on (4: Korthikanti et al. 2022, section 4.3) and, as its backward begins, their fp32
# gradient (4) and the bf16 gradient handed back to the LM head (2). Counted, not fitted.
BYTES_LOSS_PER_LOGIT = 10.0
# The same where the loss is one fused kernel over the bf16 logits (flash-attn's cross-entropy,
# which llm-foundry's loss_fn fused_crossentropy runs: flash_attn/losses/cross_entropy.py at
# v1.0.9 saves the logits, their log-sum-exp and the labels, and its backward writes a new bf16
# gradient): the logits (2) and their gradient (2); the fp32 values stay in registers. Counted.
BYTES_LOSS_PER_LOGIT_FUSED = 4.0
# Bytes per parameter all-gathered under sharding (the bf16 working copy); the gradients are
# reduce-scattered or all-reduced at their own bytes (LayoutHardware.gradient_bytes: fp32 as
# BYTES_GRADIENTS unless the job states bf16).
BYTES_GATHER = BYTES_WEIGHTS

# Full sharding gathers a layer's weights just before use and prefetches the next one (PyTorch
# FSDP's default BackwardPrefetch.BACKWARD_PRE and FSDP2's implicit prefetch of one layer):
# two layers' unsharded bf16 weights are resident at once.
FSDP_RESIDENT_LAYERS = 2

# What each recompute policy keeps for backward, per layer and token, in elements of width h
# (the model), h_kv (K or V) and f (the FFN), tensor by tensor as the frameworks save them; no
# dropout (today's LLM recipes use none), so no masks:
#   None: the layer input, the attention norm's output (the QKV input), Q, K, V, the attention
#     output (FlashAttention keeps it and the softmax statistics, never the s x s scores: Dao
#     et al. 2022), the residual after attention, the MLP norm's output, and gate, up and their
#     product (gated; GeLU's input and output in a standard FFN): 6h + 2h_kv + 3f (2f). With
#     the dropout masks and materialised scores this is Korthikanti et al. 2022's
#     s b h (34 + 5 a s / h) (section 4.1).
#   Selective (Megatron-LM): the same; the attention core it recomputes keeps nothing more
#     under FlashAttention (without it, None also keeps the scores: 5 a s^2 b bytes).
#   Full: the layer input alone (plus one layer's working set while it is recomputed).
#   SelectiveOp (torchtitan distributed/activation_checkpoint.py: _save_list, every other
#     matmul): the input, the outputs of wq, wv, w1, w2 and of attention: 4h + h_kv + f.
#   Minimal (MaxText checkpoint_dots_with_no_batch_dims): the input and every projection's
#     output (Q, K, V, out, wi_0, wi_1, wo): 4h + 2h_kv + 2f (gated; f standard).
#   SaveDotExceptMlp (MaxText): the input, Q, K, V and the attention projection: 3h + 2h_kv.
#   SaveDotExceptMlpwi (MaxText): those and the FFN's output projection (mlpwo): 4h + 2h_kv.
#   MinimalWithContext (MaxText minimal_with_context, once minimal_flash: Minimal's dots and the
#     attention's output, named "context"): 5h + 2h_kv + 2f (gated; f standard).
#   QkvProjOffloaded and MinimalOffloaded (MaxText save_and_offload_only_these_names with
#     names_which_can_be_saved=[]: maxtext_utils.get_save_and_offload_names): in HBM only the
#     scanned layer's input, as Full; what they name goes to host memory
#     (engine.activation_offload.OFFLOADED_ELEMENTS).
SAVED_ELEMENTS: dict[int, tuple[int, int, int, int]] = {  # (h, h_kv, f gated, f standard)
    RECOMPUTE_NONE: (6, 2, 3, 2),
    RECOMPUTE_SELECTIVE: (6, 2, 3, 2),
    RECOMPUTE_FULL: (1, 0, 0, 0),
    RECOMPUTE_SELECTIVE_OP: (4, 1, 1, 1),
    RECOMPUTE_MINIMAL: (4, 2, 2, 1),
    RECOMPUTE_SAVE_DOT_EXCEPT_MLP: (3, 2, 0, 0),
    RECOMPUTE_QKV_PROJ_OFFLOADED: (1, 0, 0, 0),
    RECOMPUTE_MINIMAL_OFFLOADED: (1, 0, 0, 0),
    RECOMPUTE_SAVE_DOT_EXCEPT_MLPWI: (4, 2, 0, 0),
    RECOMPUTE_MINIMAL_WITH_CONTEXT: (5, 2, 2, 1),
}
# With FP8 linear layers, Transformer Engine keeps each linear layer's input for the weight
# gradient as its FP8 cast (transformer_engine.pytorch.module.linear / layernorm_linear /
# layernorm_mlp save the casts, not the bf16 tensors): of what None and Selective keep, the QKV,
# attention-projection and FFN inputs, 3h + f elements, at 1 byte.
FP8_SAVED_LINEAR_INPUTS = (3, 1)  # (h, f)
BYTES_FP8 = 1.0
# Of those h-wide tensors, the ones outside the tensor-parallel regions (the layer input, the
# norms' inputs and outputs: Korthikanti et al. 2022, Table 2's 10 s b h of "tensor parallel"
# without dropout masks), whole on every rank without sequence parallelism. The offloading
# policies keep the input alone in HBM, as Full.
REPLICATED_WITHOUT_SP = (4, 4, 1, 2, 1, 1, 1, 1, 1, 1)
# Policies that rebuild a layer during backward, so that layer's working set is resident then.
REBUILDS_LAYER = (
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE_OP,
    RECOMPUTE_MINIMAL,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLP,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLPWI,
    RECOMPUTE_MINIMAL_WITH_CONTEXT,  # the norms and the activation it does not keep
    # Both rebuild in backward what they neither keep nor offload (QkvProjOffloaded the layer
    # but Q, K and V; MinimalOffloaded the attention core), with the fetched tensors back in HBM.
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTE_MINIMAL_OFFLOADED,
)

# The runtime outside PyTorch's caching allocator: the CUDA context with its kernels and the
# cuBLAS workspaces (about 0.5-0.8 GiB on H100 with CUDA 12 lazy loading) and NCCL's buffers
# (NCCL_BUFFSIZE 4 MiB per channel and peer, for the TP, DP, PP and CP communicators). Assumed,
# not calibrated: frameworks' memory figures (torch.cuda.max_memory_reserved) leave it out.
# A GPU's: on a TPU the memory the catalog holds is what XLA may allocate (engine.hardware,
# [XLA-HBM]), its runtime's share already outside it, so none is reserved there
# (layout_hardware.LayoutHardware.runtime_reserve_bytes).
FRAMEWORK_RESERVE_BYTES = 2.0 * GIB

# The caching allocator's slack over the activations it churns through (blocks split and
# cached between micro-batches, PyTorch's CUDA caching allocator): a fraction of the activation
# bytes. Model state lives in a few long-lived buffers and adds none. Calibrated
# (ringmaster.calibration.llm_training, fitted on torchtitan's Llama 3.1 8B FSDP rows on 8 and
# 128 H100, the published memory figures of a plain eager run); a test keeps it equal to the fit.
ALLOCATOR_OVERHEAD = 0.25
# What the allocator still needs beyond the live tensors when memory runs short: when a request
# fails, PyTorch's caching allocator frees the blocks it caches and retries before it reports
# out-of-memory, so the slack that ALLOCATOR_OVERHEAD measures (reserved memory in runs with room
# to spare) is not a requirement. Whether a layout fits is judged at the limit: near zero there
# (issue 41's H100 measurement: "allocator slack about 10 % of activations, near zero close to
# the limit"), and at most 9.9% in every one of llm-foundry's 183 published runs on 8-128
# A100 / H100 (the tightest: MPT-1B at 2,048 tokens, micro-batch 10 on 32 A100-40GB; the engine's
# activations with the fused loss, its states and FRAMEWORK_RESERVE_BYTES), 36 of which would not
# fit with ALLOCATOR_OVERHEAD. Plans count memory at the limit; the calibration's memory rows
# compare reserved memory with ALLOCATOR_OVERHEAD.
ALLOCATOR_SLACK_AT_LIMIT = 0.0


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def valid_pipeline(layers: int, pipeline: int) -> bool:
    """Whether ``pipeline`` stages can hold ``layers``: each holds ceil(layers / p) layers but
    the first and the last, which hold what is left between them, down to none (an
    embedding-only first stage, a loss-only last one): Megatron-LM's
    --decoder-first/last-pipeline-num-layers and its pipeline layouts. Llama 3 405B ran 126
    layers over 16 stages with the first and the last one short (Dubey et al. 2024, section
    3.3.2); DeepSeek-V3's 61 layers run over 16 stages (Megatron-Core's DeepSeek-V3 recipe)."""
    if pipeline < 1 or pipeline > layers:
        return False
    if pipeline == 1:
        return True
    per_stage = -(-layers // pipeline)
    return per_stage * pipeline - layers <= 2 * per_stage


class StageLayers(NamedTuple):
    first: F64
    middle: F64  # every stage but the first and the last: ceil(layers / p), the busiest
    last: F64


def stage_layers(model: Transformer, pipeline: ArrayLike) -> StageLayers:
    """Layers per stage (:func:`valid_pipeline`): the layers the middle stages leave go to the
    first and the last, the last giving up the odd one (it also runs the LM head and the
    loss). The last also runs the MTP modules' blocks, each counted as one of the model's layers
    (Megatron-Core's default placement: mtp_on_this_rank, the last pipeline stage)."""
    p = _f(pipeline)
    per_stage = np.ceil(model.layers / p)
    missing = per_stage * p - model.layers
    last = per_stage - np.ceil(missing / 2.0) + model.mtp_layers
    first = np.where(p > 1, per_stage - np.floor(missing / 2.0), last)
    split = model.stage_split
    if split is not None:  # a written layout, at the degree it was written for
        # The engine costs the middle stages as the busiest short of the last: where a layout
        # gives the first rank more layers than any middle one, the middle takes its count
        # (the middle stages' memory is then an upper bound).
        written = p == split.pipeline
        first = np.where(written, split.first, first)
        per_stage = np.where(written, max(split.middle, split.first), per_stage)
        last = np.where(written, split.last, last)
    return StageLayers(_f(first), _f(per_stage), _f(last))


class StageParameters(NamedTuple):
    first: F64  # parameters held by one accelerator of the first pipeline stage
    last: F64  # ... of the last stage (the same stage when p = 1)
    layer: F64  # parameters of one layer's shard (per / t)
    middle: F64 = np.zeros(())  # ... of a stage between them (0 when p <= 2)


def routed_expert_parameters_per_layer(model: Transformer) -> float:
    """A layer's routed experts, the mean over the layers (what expert parallelism shards)."""
    return model.routed_expert_parameters / model.layers


def stage_parameters(
    model: Transformer,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    expert: ArrayLike = 1,
    expert_tensor: ArrayLike | None = None,
) -> StageParameters:
    """Parameters per accelerator: the stage's layers / t (their routed experts / (etp e): expert
    parallelism splits the experts e ways and each expert etp ways, Megatron-Core's
    expert_tensor_parallel_size, by default (None) the tensor degree); the embedding on the
    first stage, the LM head (a copy of a tied embedding, as Megatron-LM keeps one) and the
    final norm on the last. Norm vectors
    are counted as split by t too (they are < 0.1% of a layer). A MoE model's layers are
    counted at their mean (DeepSeek-V3's three dense layers are spread over the stages)."""
    t = _f(tensor)
    p = _f(pipeline)
    stages = stage_layers(model, p)
    routed = routed_expert_parameters_per_layer(model)
    etp = t if expert_tensor is None else _f(expert_tensor)
    layer = (model.parameters_per_layer - routed) / t + routed / (_f(expert) * etp)
    table = float(model.vocab * model.hidden)
    head = np.where((p > 1) | (not model.tied_embeddings), table, 0.0)
    last = stages.last * layer + head / t + model.hidden
    first = np.where(p > 1, stages.first * layer + table / t, last + table / t)
    middle = np.where(p > 2, stages.middle * layer, 0.0)
    return StageParameters(_f(first), _f(last), _f(layer), _f(middle))


def _saved_elements(model: Transformer, recompute: ArrayLike) -> F64:
    """Elements per token per layer that ``recompute`` keeps (SAVED_ELEMENTS)."""
    r = np.asarray(recompute)
    table = np.array([SAVED_ELEMENTS[k] for k in range(len(RECOMPUTES))], dtype=np.float64)
    row = table[r]
    f = np.where(model.gated_ffn, row[..., 2], row[..., 3])
    return _f(row[..., 0] * model.hidden + row[..., 1] * model.kv_hidden + f * model.ffn_hidden)


def layer_input_bytes(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    context: ArrayLike = 1,
    sequence_parallel: bool = True,
) -> F64:
    """One layer's input per micro-batch on a rank (bf16, h wide): split over the tensor ranks
    under sequence parallelism, whole on each without it (one of REPLICATED_WITHOUT_SP's)."""
    tokens = _f(micro_batch) * model.sequence_length / _f(context)
    split = _f(tensor) if sequence_parallel else _f(1.0)
    return _f(BYTES_ACTIVATION * model.hidden * tokens / split)


def activation_bytes_per_layer(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    recompute: ArrayLike,
    context: ArrayLike = 1,
    flash_attention: bool = True,
    sequence_parallel: bool = True,
    fp8: bool = False,
) -> tuple[F64, F64]:
    """(stored per layer per micro-batch, one layer's full working set), bytes per accelerator.

    SAVED_ELEMENTS of the policy x 2 bytes x the rank's tokens s b / c, divided by t (sequence
    parallelism splits every term under TP: Korthikanti et al. 2022, section 4.2.2; context
    parallelism splits the sequence). Without sequence parallelism (Megatron-LM before 2022)
    the tensors outside the tensor-parallel regions (REPLICATED_WITHOUT_SP) are whole on every
    rank. Without FlashAttention, None also keeps the attention scores, 5 a s^2 b / (t c) (ibid.
    4.1: softmax output 2, dropout mask 1, dropout output 2). With FP8 linear layers (``fp8``)
    the four linear layers' inputs that None and Selective keep (FP8_SAVED_LINEAR_INPUTS) are
    kept as their FP8 casts, 1 byte each.
    """
    t = _f(tensor)
    c = _f(context)
    r = np.asarray(recompute)
    tokens = _f(micro_batch) * model.sequence_length / c
    h = float(model.hidden)
    replicated = np.zeros(()) if sequence_parallel else np.asarray(REPLICATED_WITHOUT_SP)
    extra = (1.0 - 1.0 / t) * BYTES_ACTIVATION * h * tokens  # one replicated h-wide tensor
    stored = BYTES_ACTIVATION * _saved_elements(model, r) * tokens / t
    working = BYTES_ACTIVATION * _saved_elements(model, RECOMPUTE_NONE) * tokens / t
    if not sequence_parallel:
        stored = stored + replicated[r] * extra
        working = working + replicated[RECOMPUTE_NONE] * extra
    if fp8:
        saved = FP8_SAVED_LINEAR_INPUTS[0] * h + FP8_SAVED_LINEAR_INPUTS[1] * model.ffn_hidden
        cut = (BYTES_ACTIVATION - BYTES_FP8) * saved * tokens / t
        stored = stored - np.where(np.isin(r, (RECOMPUTE_NONE, RECOMPUTE_SELECTIVE)), cut, 0.0)
        working = working - cut
    if not flash_attention:
        scores = 5.0 * model.heads * model.sequence_length * tokens / t
        working = working + scores
        stored = stored + np.where(r == RECOMPUTE_NONE, scores, 0.0)
    return _f(stored), _f(working)


class MemoryArrays(NamedTuple):
    """Bytes per accelerator on the fullest pipeline stage, by term. ``reserve`` is the runtime
    (FRAMEWORK_RESERVE_BYTES) and the allocator's slack (ALLOCATOR_OVERHEAD)."""

    weights: F64
    gradients: F64
    optimizer: F64
    activations: F64
    reserve: F64
    total: F64


def optimizer_state_bytes(
    moment_bytes: float = BYTES_MOMENT_FP32, parameter_bytes: float = BYTES_PARAMETER_FP32
) -> float:
    """Optimizer state a parameter: the master (the parameter itself where it is the copy the
    optimizer updates) and Adam's two moments of ``moment_bytes`` each (BYTES_OPTIMIZER at
    fp32)."""
    return parameter_bytes + 2.0 * moment_bytes


def weight_bytes(framework: Framework, sharding: ArrayLike) -> F64:
    """The bf16 weights a rank holds for compute, per parameter, beside the fp32 parameters or
    masters of BYTES_OPTIMIZER: always under an optimizer that copies its masters back
    (Megatron-LM, DeepSpeed); under one whose parameters are the fp32 copy only where it keeps
    them gathered between forward and backward (Optimizer and Gradients sharding: FSDP's
    SHARD_GRAD_OP, torchtitan's pipeline stages), not under Full (its gathers are transient,
    FSDP_RESIDENT_LAYERS) nor without sharding (the fp32 parameters are the weights, autocast
    casting them)."""
    shard = np.asarray(sharding)
    if framework.copies_weights_back:
        return _f(np.full(np.shape(shard), BYTES_WEIGHTS))
    kept = (shard == SHARD_OPTIMIZER) | (shard == SHARD_GRADIENTS)
    return _f(np.where(kept, BYTES_WEIGHTS, 0.0))


def loss_bytes_per_logit(framework: Framework) -> float:
    """The loss's peak bytes per logit under ``framework``: one fused kernel keeps the bf16 logits
    only; an eager loss works on an fp32 copy."""
    return BYTES_LOSS_PER_LOGIT_FUSED if framework.fused_loss_memory else BYTES_LOSS_PER_LOGIT


def memory_per_accelerator(
    model: Transformer,
    *,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    data: ArrayLike,
    sharding: ArrayLike,
    micro_batch: ArrayLike,
    micro_batches: ArrayLike,
    recompute: ArrayLike,
    virtual_stages: ArrayLike = 1,
    context: ArrayLike = 1,
    flash_attention: bool = True,
    sequence_parallel: bool = True,
    allocator_overhead: float = ALLOCATOR_OVERHEAD,
    fp8: bool = False,
    expert: ArrayLike = 1,
    expert_tensor: ArrayLike | None = None,
    dual_pipe: bool = False,
    loss_bytes_per_logit: float = BYTES_LOSS_PER_LOGIT,
    recomputed_share: ArrayLike = 1.0,
    layers_off_device: float = 0.0,
    runtime_reserve: float = FRAMEWORK_RESERVE_BYTES,
    bf16_weight_bytes: ArrayLike = BYTES_WEIGHTS,
    layer_inputs_on_host: bool = False,
    shared_peak: bool = False,
    optimizer_bytes: float = BYTES_OPTIMIZER,
    gradient_bytes: float = BYTES_GRADIENTS,
) -> MemoryArrays:
    """Weights, gradients, optimizer state, activations and the reserve per accelerator, on the
    fullest of the first, a middle and the last pipeline stage. Context-parallel ranks hold the
    same weights: the sharding spans data x context ranks (Megatron-LM's data-context group,
    torchtitan's FSDP mesh with CP). Routed experts are split over the e expert-parallel ranks
    (carved out of data x context, as Megatron-Core does), so their sharding spans the d c / e
    ranks that hold the same experts (its expert-data-parallel group). ``expert_tensor``: each
    expert split etp ways (None: the tensor degree; MoE parallel folding: the stage's t c d ranks
    regrouped as etp x e x the expert-data-parallel t c d / (etp e)). ``dual_pipe``: DeepSeek's
    DualPipe, whose rank i holds stages i and p - 1 - i (2x the parameters) with p + 1
    micro-batches' activations in flight (DeepSeek-V3 technical report, arXiv 2412.19437,
    Table 2; deepseek-ai/DualPipe README.md @ 3da1bbe). ``loss_bytes_per_logit``: the loss's
    peak bytes per logit (BYTES_LOSS_PER_LOGIT eager, BYTES_LOSS_PER_LOGIT_FUSED fused).
    ``recomputed_share``: under Full recompute, the share of the layers that recompute (the rest
    keep what None keeps: engine.recompute.recomputed_layer_share). ``layers_off_device``: the
    first stage's layers whose activations Megatron's CPU offloading keeps in host memory
    (engine.activation_offload.offloaded_layers_off_device). ``runtime_reserve``: the memory
    the runtime holds outside the framework's allocations (FRAMEWORK_RESERVE_BYTES on a GPU).
    ``bf16_weight_bytes``: per parameter, the framework's at the sharding (:func:`weight_bytes`).
    ``data``: the ranks the sharding spans (a multislice job's ranks inside one slice).
    ``layer_inputs_on_host``: every layer's input is offloaded to host memory (MaxText's
    ``decoder_layer_input: offload``), out of what the policy keeps in HBM
    (engine.activation_offload.layer_input_bytes). ``shared_peak``: the framework's buffers
    are assigned by liveness at compile time (Framework.compiler_buffers), so the logits, freed
    once the head's backward has run, and a rebuilt layer's working set, made after, share
    memory: the peak holds the larger, not both. ``optimizer_bytes``: optimizer state a
    parameter (:func:`optimizer_state_bytes`: BYTES_OPTIMIZER with fp32 moments);
    ``gradient_bytes``: the gradient buffer's a parameter (BYTES_GRADIENTS in fp32)."""
    t, p, d, c, e = _f(tensor), _f(pipeline), _f(data), _f(context), _f(expert)
    etp = t if expert_tensor is None else _f(expert_tensor)
    shard = np.asarray(sharding)
    m, v = _f(micro_batches), _f(virtual_stages)
    params = stage_parameters(model, t, p, e, etp)
    stages = stage_layers(model, p)
    expert_layer = routed_expert_parameters_per_layer(model) / (etp * e)
    dc = d * c
    edc = np.maximum(t * dc / (etp * e), 1.0)
    weights_div = np.where(shard >= SHARD_FULL, dc, 1.0)
    grads_div = np.where(shard >= SHARD_GRADIENTS, dc, 1.0)
    optim_div = np.where(shard >= SHARD_OPTIMIZER, dc, 1.0)
    expert_weights_div = np.where(shard >= SHARD_FULL, edc, 1.0)
    expert_grads_div = np.where(shard >= SHARD_GRADIENTS, edc, 1.0)
    expert_optim_div = np.where(shard >= SHARD_OPTIMIZER, edc, 1.0)
    gathered = np.where(
        (shard >= SHARD_FULL) & (dc > 1), FSDP_RESIDENT_LAYERS * params.layer * BYTES_GATHER, 0.0
    )

    rec = np.asarray(recompute)
    stored, working = activation_bytes_per_layer(
        model, micro_batch, t, rec, c, flash_attention, sequence_parallel, fp8
    )
    # Layers left out of a partial Full recompute keep None's set, which ``working`` is.
    stored = partial_recompute(rec, recomputed_share, stored, working)
    if layer_inputs_on_host:
        stored = stored - layer_input_bytes(model, micro_batch, t, c, sequence_parallel)
    # A policy that rebuilds layers holds one layer's working set while it does.
    transient = np.where(np.isin(rec, REBUILDS_LAYER), working, 0.0)
    # 1F1B: the first stage keeps min(p, m) micro-batches in flight, the second one fewer;
    # interleaving adds (p - 1) / (p v) (Korthikanti et al. 2022, section 4.2.3).
    interleave = np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)
    logits = (  # one set per head pass: the model's and each MTP module's loss
        loss_bytes_per_logit * model.sequence_length * _f(micro_batch) * model.vocab / (t * c)
    ) * model.head_passes
    # The loss's logits and a rebuilt layer's working set are never live at once: a static
    # buffer assignment shares them; PyTorch's caching allocator keeps both reserved
    # (torchtitan's memory rows fit the sum: calibration.llm_training).
    peak = np.maximum(transient, logits) if shared_peak else transient + logits
    act_first = (stages.first - layers_off_device) * stored * np.minimum(
        p, m
    ) * interleave + np.where(p > 1, transient, peak)
    act_middle = np.where(
        p > 2, stages.middle * stored * np.minimum(p - 1.0, m) * interleave + transient, 0.0
    )
    # With one stage the first is the last: the offloaded layers are off the device there too.
    act_last = (stages.last - np.where(p > 1, 0.0, layers_off_device)) * stored + peak

    bf16 = _f(bf16_weight_bytes)

    def state(n: F64, layers: F64) -> tuple[F64, F64, F64]:
        x = layers * expert_layer  # routed experts: their own sharding group
        dense = n - x
        w = dense * bf16 / weights_div + x * bf16 / expert_weights_div
        g = dense * gradient_bytes / grads_div + x * gradient_bytes / expert_grads_div
        o = dense * optimizer_bytes / optim_div + x * optimizer_bytes / expert_optim_div
        return w + gathered, g, o

    w1, g1, o1 = state(params.first, stages.first)
    w2, g2, o2 = state(params.middle, np.where(p > 2, stages.middle, 0.0))
    w3, g3, o3 = state(params.last, stages.last)
    if dual_pipe:
        # The first rank holds the first and the last stage, a middle rank two middle ones; the
        # p + 1 micro-batches in flight are chunks of the rank's two stages alike.
        in_flight = np.minimum(p + 1.0, m)
        edge = 0.5 * (stages.first + stages.last) * stored * in_flight + transient + logits
        inner = stages.middle * stored * in_flight + transient
        w1, g1, o1, act_first = w1 + w3, g1 + g3, o1 + o3, edge
        w2, g2, o2, act_middle = 2.0 * w2, 2.0 * g2, 2.0 * o2, np.where(p > 2, inner, 0.0)
        w3, g3, o3, act_last = w1, g1, o1, edge
    totals = np.stack(
        np.broadcast_arrays(
            w1 + g1 + o1 + act_first * (1.0 + allocator_overhead),
            np.where(p > 2, w2 + g2 + o2 + act_middle * (1.0 + allocator_overhead), 0.0),
            w3 + g3 + o3 + act_last * (1.0 + allocator_overhead),
        )
    )
    pick = np.argmax(totals, axis=0)

    def choose(a: F64, b: F64, z: F64) -> F64:
        return _f(np.choose(pick, np.broadcast_arrays(a, b, z)))

    weights = choose(w1, w2, w3)
    gradients = choose(g1, g2, g3)
    optimizer = choose(o1, o2, o3)
    activations = choose(act_first, act_middle, act_last)
    reserve = activations * allocator_overhead + runtime_reserve
    total = weights + gradients + optimizer + activations + reserve
    return MemoryArrays(weights, gradients, optimizer, activations, reserve, total)
