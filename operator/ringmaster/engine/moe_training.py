"""A mixture of experts in training: the dispatch / combine all-to-alls, how much of them a
schedule hides, token dropping (a capacity factor) and DualPipe's pipeline.

:mod:`ringmaster.engine.llm_training` composes these terms into a layout's step:

- **load**: the busiest expert-parallel rank's routed tokens over the mean
  (:func:`routed_load`): MOE_LOAD_IMBALANCE dropless, at most the capacity factor with token
  dropping, exactly the capacity factor when every expert's input is padded to capacity;
- **all-to-alls**: MOE_ALL_TO_ALLS per MoE layer per micro-batch, each of
  :func:`moe_all_to_all_bytes` per rank;
- **overlap** (:func:`exposed_all_to_all`): ``None`` leaves them on the critical path beside the
  shared experts' compute; ``OneFOneB`` and ``DualPipe`` hide a paired micro-batch's all-to-alls
  behind the other's compute, all but the schedule's unpaired chunks (:func:`unpaired_share`);
- **DualPipe's pipeline** (:func:`dualpipe_bubble`): a shorter bubble for two stages' weights
  per rank and one more micro-batch in flight (engine.llm_memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives as C
from ringmaster.engine.efficiency import OVERLAP_INTERFERENCE
from ringmaster.engine.expert_dispatch import (
    DEFAULT_DISPATCHER,
    Dispatcher,
    deepep_bytes_scale,
    deepep_network_share,
    peer_latency,
)
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RECOMPUTE_QKV_PROJ_OFFLOADED
from ringmaster.engine.transformer import Transformer

if TYPE_CHECKING:
    from ringmaster.engine.layout_hardware import LayoutHardware

F64 = NDArray[np.float64]

# Dispatch and combine are two all-to-alls per MoE layer per micro-batch in forward and two more
# in backward (their gradients: dispatch's backward is a combine, and the reverse; DeepEP's
# README, "The backward pass of MoE dispatch is actually a combine"), two more where the layer's
# forward is recomputed (Full).
MOE_ALL_TO_ALLS = 4
MOE_ALL_TO_ALLS_RECOMPUTE = 2
# The busiest expert-parallel rank sets the pace: with a capacity factor the most tokens a rank's
# experts take is capacity x the mean. 1.25 is Switch Transformer's training capacity factor
# (Fedus et al. 2022, JMLR, section 2.2 and Table 1's 1.25) and GShard's expert capacity bound;
# dropless training with auxiliary-loss balancing (Megatron-Core's default) sits near it.
# Applied to the routed experts' FLOPs and to the all-to-all bytes. Not fitted.
MOE_LOAD_IMBALANCE = 1.25
# Dispatched tokens travel in bf16 (Megatron-Core's alltoall dispatcher; DeepEP's FP8 dispatch
# is an option the engine does not assume).
BYTES_DISPATCH = 2.0

# spec.parallelism.expertOverlap, as the layout arrays code it.
EXPERT_OVERLAPS = ("None", "OneFOneB", "DualPipe")
OVERLAP_NONE, OVERLAP_ONE_F_ONE_B, OVERLAP_DUALPIPE = EXPERT_OVERLAPS

# DualPipe's bubble is (PP/2 - 1)(F&B + B - 3W) (DeepSeek-V3 technical report, arXiv 2412.19437,
# Table 2; deepseek-ai/DualPipe README.md @ 3da1bbe) with B a full backward chunk and W its
# weight-gradient half. A layer's backward is twice its forward and the weight gradient half of
# the backward (Narayanan et al. SC'21, section 3.5: forward 2, backward 4 of the 6 FLOPs per
# parameter and token; the weight gradient 2 of those 4): B = 2/3 and W = 1/3 of a micro-batch's
# compute on a stage, so B - 3W = -1/3 of it.
BACKWARD_SHARE = 2.0 / 3.0
WEIGHT_GRADIENT_SHARE = 1.0 / 3.0


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def routed_load(
    capacity_factor: float | None = None,
    pad_to_capacity: bool = False,
    expert: ArrayLike | None = None,
) -> F64:
    """The tokens the busiest expert-parallel rank's experts take, over the mean
    (tokens x top-k / experts each). Dropless: MOE_LOAD_IMBALANCE. With a capacity factor each
    expert takes at most ceil(factor x tokens x top-k / experts) of a rank's tokens and drops
    the rest (Megatron-Core moe_utils.get_capacity and apply_router_token_dropping, NVIDIA/
    Megatron-LM @ d98e8a6), so the busiest takes min(MOE_LOAD_IMBALANCE, factor) x the mean;
    padded to capacity (--moe-pad-expert-input-to-capacity) every expert takes exactly the
    factor x the mean, dropped or not. ``expert``: the expert-parallel degree (None: more than
    one rank). At ``expert`` = 1 one rank holds every expert and runs every routed token,
    whatever their spread: the mean (a skewed router changes the grouped GEMM's shapes, not its
    FLOPs: +5-14 % on the experts' GEMMs of a lent H200's steps at 1.1-7x the mean on the
    busiest expert, calibration/measured/device/2026-11-30-h200)."""
    e = np.asarray(2.0 if expert is None else expert, dtype=np.float64)
    if pad_to_capacity and capacity_factor is not None:
        return np.full(e.shape, float(capacity_factor))
    busiest = (
        MOE_LOAD_IMBALANCE
        if capacity_factor is None
        else min(MOE_LOAD_IMBALANCE, float(capacity_factor))
    )
    return _f(np.where(e > 1, busiest, 1.0))


def moe_all_to_all_bytes(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    context: ArrayLike,
    load: ArrayLike = MOE_LOAD_IMBALANCE,
) -> F64:
    """One rank's buffer in one dispatch (or combine): its share of the micro-batch's tokens
    (sequence-parallel over t, split over c), each sent to top-k experts, hidden wide in bf16,
    times ``load`` (:func:`routed_load`: the busiest rank receives the most; padded to capacity,
    every rank sends and receives its experts' full capacity)."""
    tokens = _f(micro_batch) * model.sequence_length / (_f(context) * _f(tensor))
    per_token = model.active_experts * model.hidden * BYTES_DISPATCH
    return _f(tokens * per_token * _f(load))


def expert_all_to_all_seconds(
    nbytes: F64,
    tensor: F64,
    context: F64,
    expert: F64,
    hw: LayoutHardware,
    expert_tensor: F64 | None = None,
    dispatcher: Dispatcher = DEFAULT_DISPATCHER,
    model: Transformer | None = None,
) -> F64:
    """One all-to-all of ``nbytes`` per rank (16-bit) over the e expert-parallel ranks, the
    mean of a layer's four (forward dispatch and combine, their gradients). They sit at a
    stride of t c (Megatron-Core orders tp-cp-ep-dp-pp), so g / (t c) of them share a host:
    NVLink while t c e fits in a host, else across hosts with the group's share of the NICs
    (engine.collectives.nccl_all_to_all); over the slice's ICI on a TPU (one line of e chips).
    Folded (an expert tensor degree etp below t: the expert mesh is etp-ep-edp) the stride is
    etp. ``dispatcher`` DeepEP (Megatron-Core's flex dispatcher, DeepSeek-V3's own kernels):
    the dispatch and the combine's gradient in FP8, the others in BF16 (deepep_bytes_scale),
    one network copy per destination host and no per-peer latency (engine.expert_dispatch)."""
    if hw.kind == "tpu":
        coll = C.ici_all_to_all(
            nbytes,
            (expert, 1.0, 1.0),
            (False, False, False),
            hw.intra_bandwidth,
            hw.intra_hop_latency,
        )
        return _f(np.where(expert > 1, coll.seconds, 0.0))
    g = float(hw.per_host)
    stride = tensor * context
    if expert_tensor is not None:
        stride = np.where(expert_tensor < tensor, expert_tensor, stride)
    per_host = np.clip(g / stride, 1.0, expert)
    hosts = expert / per_host
    nic = hw.nic_bandwidth / (g / per_host)
    deepep = dispatcher == "DeepEP" and model is not None
    if deepep:
        assert model is not None
        nbytes = nbytes * deepep_bytes_scale(model.hidden)
        nic = nic / deepep_network_share(float(model.active_experts), hosts, expert, per_host)
    seconds = C.nccl_all_to_all(nbytes, hosts, per_host, hw.fabric(nic), with_busbw=False).seconds
    if deepep:
        seconds = seconds - peer_latency(expert)
    return _f(np.where(expert > 1, seconds, 0.0))


def moe_all_to_alls(recompute: ArrayLike) -> F64:
    """All-to-alls per MoE layer per micro-batch: MOE_ALL_TO_ALLS, and
    MOE_ALL_TO_ALLS_RECOMPUTE more where the layer's FFN forward is recomputed with its
    dispatch and combine (Full; QkvProjOffloaded, which keeps only Q, K and V)."""
    full = np.isin(np.asarray(recompute), (RECOMPUTE_FULL, RECOMPUTE_QKV_PROJ_OFFLOADED))
    return _f(MOE_ALL_TO_ALLS + np.where(full, MOE_ALL_TO_ALLS_RECOMPUTE, 0))


def unpaired_share(
    overlap: str, pipeline: ArrayLike, virtual_stages: ArrayLike, micro_batches: ArrayLike
) -> F64:
    """The share of a stage's forward and backward chunks that no chunk of another micro-batch
    runs beside, so their all-to-alls stay exposed. OneFOneB (Megatron-Core's combined 1F1B)
    pairs a forward with a backward only in the steady state: without a pipeline the first
    forward and the last backward run alone (schedules.py, combined_1f1b_schedule_for_no_
    pipelining); interleaved, the first stage's warm-up forwards, 2 (p - 1) + (v - 1) p + 1 of
    its m v chunks (get_pp_rank_microbatches with microbatch_group_size_per_vp_stage = p, one
    more for the overlap), and as many cool-down backwards. DualPipe's warm-up and cool-down are
    its bubble (:func:`dualpipe_bubble`): none here. ``None``: every chunk (1)."""
    p, v, m = _f(pipeline), _f(virtual_stages), _f(micro_batches)
    if overlap == OVERLAP_NONE:
        return _f(np.ones(np.broadcast(p, v, m).shape))
    if overlap == OVERLAP_DUALPIPE:
        return _f(np.zeros(np.broadcast(p, v, m).shape))
    warmup = np.where(p > 1, 2.0 * (p - 1.0) + (v - 1.0) * p + 1.0, 1.0)
    return _f(np.minimum(warmup / (m * v), 1.0))


def exposed_all_to_all(
    all_to_all: ArrayLike,
    shared_compute: ArrayLike,
    layer_compute: ArrayLike,
    overlap: str,
    unpaired: ArrayLike,
    realised: float = 1.0,
) -> F64:
    """Exposed all-to-all seconds per MoE layer per micro-batch, of ``all_to_all`` in all.
    ``None``: the shared experts' compute runs beside them (--moe-shared-expert-overlap), so
    max(0, all_to_all - shared_compute). With a batch-level overlap a paired chunk's all-to-alls
    hide behind the other micro-batch's whole layer (``layer_compute``, forward + backward), so
    max(0, all_to_all - layer_compute); an unpaired chunk's stay exposed in full (Megatron-Core
    computes the shared experts before the dispatch under the overlap: fine_grained_callables.py,
    and asserts moe_shared_expert_overlap off). What hides still takes its kernels' SMs from the
    compute beside it, OVERLAP_INTERFERENCE of the hidden seconds, as the data-parallel
    collectives' do (DeepSeek-V3's report, section 3.2.1: its all-to-all kernels run on 20 of the
    H800's 132 SMs; DeepEP's Buffer defaults to 20). ``realised``: the share of that hiding the
    schedule realises under OneFOneB (engine.frameworks.MEGATRON_ONE_F_ONE_B_REALISED);
    DualPipe's is whole."""
    a2a, shared, layer = _f(all_to_all), _f(shared_compute), _f(layer_compute)
    if overlap == OVERLAP_NONE:
        hidden = np.minimum(a2a, shared)
        return _f(a2a - hidden + OVERLAP_INTERFERENCE * hidden)
    u = _f(unpaired)
    share = realised if overlap == OVERLAP_ONE_F_ONE_B else 1.0
    hidden = share * (1.0 - u) * np.minimum(a2a, layer)
    return _f(a2a - hidden + OVERLAP_INTERFERENCE * hidden)


def dualpipe_bubble(slot: ArrayLike, compute: ArrayLike, pipeline: ArrayLike) -> F64:
    """DualPipe's bubble on a stage, (p/2 - 1)(F&B + B - 3W): F&B is one paired micro-batch's
    slot (its compute and what the overlap leaves exposed), B - 3W = (BACKWARD_SHARE - 3
    WEIGHT_GRADIENT_SHARE) x its compute."""
    p = _f(pipeline)
    per_chunk = _f(slot) + (BACKWARD_SHARE - 3.0 * WEIGHT_GRADIENT_SHARE) * _f(compute)
    return _f(np.maximum(p / 2.0 - 1.0, 0.0) * np.maximum(per_chunk, 0.0))


def dualpipe_runs(pipeline: ArrayLike, micro_batches: ArrayLike) -> NDArray[np.bool_]:
    """Whether DualPipe schedules ``micro_batches`` over ``pipeline`` ranks: an even number of
    ranks and an even number of micro-batches, at least two per rank (deepseek-ai/DualPipe
    dualpipe/dualpipe.py @ 3da1bbe: num_ranks % 2 == 0, num_chunks % 2 == 0 and
    num_chunks >= num_ranks * 2)."""
    p, m = np.asarray(pipeline), np.asarray(micro_batches)
    mi = np.round(m).astype(np.int64)
    return np.asarray((p % 2 == 0) & (mi % 2 == 0) & (m >= 2 * p), dtype=np.bool_)
