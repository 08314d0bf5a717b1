"""What an activation-recompute policy runs again in backward, as FLOPs per token.

Each policy (engine.llm_layout_names.RECOMPUTES) repeats part of a layer's forward; how much also
depends on the framework's checkpoint (engine.frameworks: ``Framework.recompute_stops_early``).
PyTorch's non-reentrant checkpoint (2.1 and later) and JAX's rematerialisation rebuild only what
backward saved, so the FFN's output projection, whose output only the residual add takes, is
not run again; Megatron-Core's and DeepSpeed's reentrant checkpoint functions rerun the whole
forward. Measured on a lent H200 (docs/llm-training.md, "Full recompute on the H200").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ringmaster.engine.arrays import F64, as_f64
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_FULL,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLP,
    RECOMPUTE_SELECTIVE_OP,
    RECOMPUTES,
)
from ringmaster.engine.moe_training import MOE_LOAD_IMBALANCE
from ringmaster.engine.transformer import Transformer


def recompute_flops_per_token_per_layer(
    model: Transformer,
    recompute: ArrayLike,
    load: ArrayLike = MOE_LOAD_IMBALANCE,
    stops_early: bool = False,
) -> F64:
    """Forward FLOPs a policy repeats in backward, per token per layer: Full the whole layer;
    Selective and Minimal the attention core (Korthikanti et al. 2022, section 5: 2.7% of the
    FLOPs for GPT-3 175B); SelectiveOp the matmuls it did not save (wk, wo and the FFN's third:
    w3 gated, w2 standard); SaveDotExceptMlp the FFN and the core; SaveDotExceptMlpwi the
    FFN's input projections (gate and up; the one of a standard FFN) and the core;
    QkvProjOffloaded the whole layer but the Q, K and V projections (fetched back from the
    host); MinimalOffloaded, as Minimal, the core; MinimalWithContext nothing of the matmuls
    (it keeps the attention's output, so the core is not rerun: only the norms and the
    activation, memory-bound kernels the step's elementwise part prices). ``load``: the
    busiest expert-parallel rank's routed tokens over the mean
    (engine.moe_training.routed_load). ``stops_early``: the framework's recompute stops once
    backward's saved tensors are rebuilt
    (Framework.recompute_stops_early), so a policy that reruns the FFN's output projection does
    not (:func:`unneeded_recompute_flops_per_token`)."""
    r = np.asarray(recompute)
    h, kv, f = float(model.hidden), float(model.kv_hidden), float(model.ffn_hidden)
    core = model.attention_flops_per_token(model.sequence_length) / model.layers
    full = 2.0 * busiest_rank_parameters_per_layer(model, load) + core
    # The Q, K and V projections: the attention's weights but the output projection's.
    qkv = model.attention_parameters_per_layer - model.hidden * model.heads * model.v_head_dim
    per_policy = [
        0.0,
        core,
        full,
        2.0 * (h * kv + h * h + h * f),
        core,
        2.0 * model.ffn_parameters_per_layer + core,
        full - 2.0 * qkv,
        core,
        2.0 * model.ffn_parameters_per_layer * ffn_input_share(model) + core,
        0.0,
    ]
    # ``full`` carries the load's shape (one per expert-parallel degree): pick per element.
    shape = np.broadcast_shapes(r.shape, np.shape(full))
    again = as_f64(
        np.choose(
            np.broadcast_to(r, shape), [np.broadcast_to(as_f64(v), shape) for v in per_policy]
        )
    )
    return again - early_stop_skip(model, r) if stops_early else again


def ffn_input_share(model: Transformer) -> float:
    """The FFN's input projections' share of its weights: gate and up of three (gated), the
    first of two (standard)."""
    return 2.0 / 3.0 if model.gated_ffn else 0.5


def early_stop_skip(model: Transformer, recompute: ArrayLike) -> F64:
    """FLOPs per token per layer that a recompute stopping early does not rerun under each
    policy: :func:`unneeded_recompute_flops_per_token` where the policy reruns the FFN's output
    projection (RERUNS_FFN_OUTPUT; SelectiveOp's w2 on a standard FFN), else 0."""
    policies = np.arange(len(RECOMPUTES))
    reruns = np.isin(policies, RERUNS_FFN_OUTPUT) | (
        (policies == RECOMPUTE_SELECTIVE_OP) & (not model.gated_ffn)
    )
    skip = np.where(reruns, unneeded_recompute_flops_per_token(model), 0.0)
    return as_f64(skip[np.asarray(recompute)])


# The policies whose recompute reruns the FFN's output projection (SelectiveOp too on a
# standard FFN: its recomputed third matmul is w2).
RERUNS_FFN_OUTPUT = (RECOMPUTE_FULL, RECOMPUTE_SAVE_DOT_EXCEPT_MLP, RECOMPUTE_QKV_PROJ_OFFLOADED)


def unneeded_recompute_flops_per_token(model: Transformer) -> float:
    """FLOPs per token per layer (mean over layers) of what no backward needs rebuilt: the
    FFN's output projection, whose output only the residual add takes (it saves nothing), of
    the dense layers and of a MoE layer's shared experts. A routed expert's output is saved by
    the weighted combine of the experts' outputs, so the routed ones are rerun."""
    dense = 2.0 * model.hidden * model.ffn_hidden * model.dense_layers
    shared = 2.0 * model.hidden * model.expert_ffn_hidden * model.shared_experts * model.moe_layers
    return (dense + shared) / model.layers


def busiest_rank_parameters_per_layer(
    model: Transformer, load: ArrayLike = MOE_LOAD_IMBALANCE
) -> F64 | float:
    """The weights a token multiplies through in a layer (the active ones, mean over layers),
    with the routed experts' share scaled by ``load`` (MOE_LOAD_IMBALANCE dropless; a capacity
    factor bounds it: engine.moe_training.routed_load): the busiest expert-parallel rank's work
    per token. A dense model's parameters_per_layer."""
    if model.experts <= 1:  # dense, or one expert: nothing to balance
        return model.parameters_per_layer
    routed = model.moe_layers * model.active_experts * model.expert_parameters / model.layers
    return model.active_parameters_per_layer + (as_f64(load) - 1.0) * routed


def recompute_flops_per_token(model: Transformer, recompute: ArrayLike) -> F64:
    """Extra forward FLOPs per token, every layer's (``recompute_flops_per_token_per_layer``)."""
    return model.layers * recompute_flops_per_token_per_layer(model, recompute)


def hardware_flops_per_token(model: Transformer, recompute: ArrayLike) -> F64:
    """Model FLOPs (6N + attention, Transformer.training_flops_per_token) plus recompute's."""
    return model.training_flops_per_token() + recompute_flops_per_token(model, recompute)


def recomputed_layer_share(
    recompute_layers: ArrayLike, layers: int, pipeline: ArrayLike, virtual_stages: ArrayLike
) -> F64:
    """The share of a model chunk's layers that Full recompute rebuilds when it is limited to
    ``recompute_layers`` of them: Megatron-LM's --recompute-method block with
    --recompute-num-layers N (megatron/core/transformer/transformer_block.py
    ``_checkpointed_forward``: the first N layers of each chunk, a pipeline stage's or, under
    interleaving, each virtual stage's, recompute; the rest keep every activation). 1 where N
    covers the chunk."""
    chunk = layers / (as_f64(pipeline) * as_f64(virtual_stages))
    return as_f64(np.minimum(as_f64(recompute_layers) / np.maximum(chunk, 1.0), 1.0))


def partial_recompute(
    recompute: ArrayLike, share: ArrayLike, recomputing: ArrayLike, keeping: ArrayLike
) -> F64:
    """A per-layer quantity under Full recompute limited to a ``share`` of the layers: those
    weigh ``recomputing`` (Full's value), the rest ``keeping`` (None's); any other policy keeps
    its own value."""
    s = as_f64(share)
    mixed = s * as_f64(recomputing) + (1.0 - s) * as_f64(keeping)
    return as_f64(np.where(np.asarray(recompute) == RECOMPUTE_FULL, mixed, recomputing))


def compiler_remat_share(
    total: ArrayLike,
    activations: ArrayLike,
    full_activations: ArrayLike,
    capacity: ArrayLike,
    allocator_overhead: float = 0.0,
) -> F64:
    """The share of what a recompute policy saves beyond Full's that a rematerialising compiler
    (Framework.compiler_remat: XLA's HloRematerialization) recomputes so that the step fits:
    the bytes over ``capacity`` over the bytes the policy keeps beyond Full (``activations`` -
    ``full_activations``, with the allocator's slack on them), 0 where the policy fits, at most 1
    (Full itself; a layout that overflows even then does not fit). XLA picks the values it
    recomputes by cost per byte freed, the cheapest first; the share prices them at the
    policy's mean (a saved projection costs about 2 h FLOPs an element to rebuild, the FFN's
    output projection 2 f), so it overstates the cost a little where the cheap ones suffice."""
    room = (as_f64(activations) - as_f64(full_activations)) * (1.0 + allocator_overhead)
    excess = as_f64(total) - as_f64(capacity)
    share = np.where((excess > 0.0) & (room > 0.0), excess / np.where(room > 0.0, room, 1.0), 0.0)
    return as_f64(np.clip(share, 0.0, 1.0))


def remat_percent(share: float) -> str:
    """A compiler's rematerialised share as the plan prints it: whole percent, ``<1`` for a
    share that rounds to none but is not."""
    text = f"{share * 100:.0f}"
    return "<1" if share > 0.0 and text == "0" else text


def mix_with_full(share: ArrayLike, policy: ArrayLike, full: ArrayLike) -> F64:
    """A per-layer quantity where ``share`` of a policy's surplus over Full is recomputed:
    the policy's value moved that far towards Full's."""
    s = as_f64(share)
    return as_f64((1.0 - s) * as_f64(policy) + s * as_f64(full))
