"""LLM training layouts: step time, and memory, fit and speed over arrays of layouts.

A layout is tensor (t) x context (c) x pipeline (p) x data (d) parallelism with a sharding of
the data-parallel part (None = DDP, Optimizer = ZeRO-1, Gradients = ZeRO-2, Full = ZeRO-3 /
FSDP, over the d c ranks that hold the same weights), a micro-batch size b (m = global batch /
(d x b) micro-batches per step), an activation-recompute policy (RECOMPUTES) and virtual
pipeline stages v. Pipeline stages hold ceil(L / p) layers, the first and the last at most one
fewer (:func:`ringmaster.engine.llm_memory.valid_pipeline`). :func:`evaluate_layouts`
evaluates numpy arrays of layouts at once; the search for the best layout of a request is
:mod:`ringmaster.engine.llm_layout_search`.

Memory per accelerator is :mod:`ringmaster.engine.llm_memory`; the names and codes of the
choices a layout makes, :mod:`ringmaster.engine.llm_layout_names`.

Step time: each micro-batch costs its busiest stage's matmul FLOPs at each matmul's peak (FP8
recipes) x its GEMM-shape efficiency (:func:`gemm_efficiency`), the HBM time of its memory-bound
(elementwise) kernels, its tensor-parallel collectives, its context-parallel K/V passes not
hidden behind the attention core, and its pipeline sends; a 1F1B pipeline takes
``(m + (p - 1) / v)`` such slots (the bubble is (p - 1) / (m v) of the work); the data-parallel
gradient reduction (or reduce-scatter + all-gather under sharding) is then added, less what
overlaps with computation.

Every collective goes through the small adapters ``_tensor_parallel_seconds``,
``_context_parallel_seconds``, ``_pipeline_send_seconds`` and ``_data_parallel_seconds``, so a
new network model changes one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives as C
from ringmaster.engine.activation_offload import (
    host_offload_bytes,
    layer_offload,
    offloaded_layers_off_device,
    unknown_host_link,
)
from ringmaster.engine.alpha_beta_collectives import (
    reduction_server,
    ring_allreduce,
    torus_allreduce,
)
from ringmaster.engine.context_parallel import (
    context_parallel_passes,
    context_parallel_seconds,
    kv_bytes_per_layer,
)
from ringmaster.engine.efficiency import (
    NETWORK_HOP_LATENCY,
    OVERLAP_INTERFERENCE,
    RING_PREFERENCE_TOLERANCE,
)
from ringmaster.engine.expert_dispatch import DEFAULT_DISPATCHER, Dispatcher
from ringmaster.engine.frameworks import moe_sync_paid

# The pool a layout runs on (engine.layout_hardware), re-exported: the layout model's API.
from ringmaster.engine.layout_hardware import (
    GEMM_STEP_FIT as GEMM_STEP_FIT,
)
from ringmaster.engine.layout_hardware import (
    LayoutHardware as LayoutHardware,
)
from ringmaster.engine.layout_hardware import (
    layout_hardware as layout_hardware,
)
from ringmaster.engine.layout_hardware import (
    on_nvlink_domain as on_nvlink_domain,
)
from ringmaster.engine.layout_hardware import (
    step_fit as step_fit,
)
from ringmaster.engine.llm_layout_names import (
    AUTO,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    REDUCTION_SERVER,
    RING,
    SHARD_FULL,
    SHARD_NONE,
    STRATEGY_REDUCTION_SERVER,
)
from ringmaster.engine.llm_memory import (
    BYTES_ACTIVATION,
    BYTES_GATHER,
    MemoryArrays,
    activation_bytes_per_layer,
    loss_bytes_per_logit,
    memory_per_accelerator,
    stage_layers,
    stage_parameters,
    weight_bytes,
)
from ringmaster.engine.moe_training import (
    OVERLAP_DUALPIPE,
    OVERLAP_NONE,
    dualpipe_bubble,
    dualpipe_runs,
    expert_all_to_all_seconds,
    exposed_all_to_all,
    moe_all_to_all_bytes,
    moe_all_to_alls,
    routed_load,
    unpaired_share,
)
from ringmaster.engine.recompute import (
    busiest_rank_parameters_per_layer,
    compiler_remat_share,
    mix_with_full,
    partial_recompute,
    recompute_flops_per_token_per_layer,
    recomputed_layer_share,
)
from ringmaster.engine.step_parts import MicroBatchParts, micro_batch_parts, optimizer_seconds
from ringmaster.engine.training import (
    exposed_communication,
)
from ringmaster.engine.transformer import Transformer

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

# --- constants, each with its source --------------------------------------------------------


# Tensor-parallel collectives per layer (Korthikanti et al. 2022, section 4.2.2): with sequence
# parallelism two all-gathers and two reduce-scatters in the forward pass, the same in the
# backward pass: the traffic of 4 all-reduces of s b h activations per layer per micro-batch.
# Full recompute runs the forward pass, and its 2, again. QkvProjOffloaded reruns it but for the
# QKV projections, whose input all-gather (half an all-reduce) it skips: 1.5.
TP_ALLREDUCES_PER_LAYER = 4
TP_ALLREDUCES_RECOMPUTE = 2
TP_ALLREDUCES_RECOMPUTE_BUT_QKV = TP_ALLREDUCES_RECOMPUTE - 0.5


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


# --- compute ------------------------------------------------------------------------------------


def matmul_efficiency(
    model: Transformer,
    hw: LayoutHardware,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    context: ArrayLike = 1,
) -> F64:
    """The fraction of peak a layer's linear layers reach (:func:`gemm_efficiency` at width
    h / t and the micro-batch's tokens on a rank)."""
    tokens = _f(micro_batch) * model.sequence_length / _f(context)
    return gemm_efficiency(hw, model.hidden / _f(tensor), tokens)


def gemm_efficiency(hw: LayoutHardware, width: ArrayLike, tokens: ArrayLike) -> F64:
    """Achieved fraction of ``hw.peak_flops`` of a GEMM whose narrow sides are ``width`` and
    ``tokens``: the chip's ceilings (shape model under the sustained cap) x the step fit;
    non-decreasing in both."""
    rate = hw.ceilings.gemm_flops(hw.compute_precision, width, tokens) * hw.step_fit
    return _f(rate / hw.peak_flops)


def stage_flops_per_micro_batch(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    recompute: ArrayLike,
    context: ArrayLike = 1,
) -> F64:
    """FLOPs one accelerator of the busiest stage does for one micro-batch, forward + backward +
    recompute (with the LM head when the last stage is the busiest)."""
    stages = stage_layers(model, pipeline)
    tokens = _f(micro_batch) * model.sequence_length / (_f(context) * _f(tensor))
    per_layer = 3.0 * (
        2.0 * busiest_rank_parameters_per_layer(model)
        + model.attention_flops_per_token(model.sequence_length) / model.layers
    ) + recompute_flops_per_token_per_layer(model, recompute)
    head = 3.0 * 2.0 * model.vocab * model.hidden * model.head_passes  # and the MTP modules'
    return _f(tokens * np.maximum(stages.middle * per_layer, stages.last * per_layer + head))


def pipeline_bubble_fraction(
    pipeline: ArrayLike, micro_batches: ArrayLike, virtual_stages: ArrayLike = 1
) -> F64:
    """Idle time of a 1F1B pipeline relative to its work: (p - 1) / (m v) (Narayanan et al.
    SC'21, sections 2.2.1 and 2.2.2)."""
    return (_f(pipeline) - 1.0) / (_f(micro_batches) * _f(virtual_stages))


# --- communication: the one adapter onto the network model ------------------------------------


def tensor_parallel_collectives_per_layer(recompute: ArrayLike, stops_early: bool = False) -> F64:
    """All-reduce equivalents per layer per micro-batch: TP_ALLREDUCES_PER_LAYER, plus
    TP_ALLREDUCES_RECOMPUTE under Full recompute (TP_ALLREDUCES_RECOMPUTE_BUT_QKV under
    QkvProjOffloaded), one fewer where the recompute ``stops_early`` (the FFN's output
    projection, and the all-reduce of its row-parallel output, are not rerun)."""
    r = np.asarray(recompute)
    again = np.where(r == RECOMPUTE_QKV_PROJ_OFFLOADED, TP_ALLREDUCES_RECOMPUTE_BUT_QKV, 0.0)
    again = np.where(r == RECOMPUTE_FULL, TP_ALLREDUCES_RECOMPUTE, again)
    if stops_early:
        again = np.maximum(again - 1.0, 0.0)
    return _f(TP_ALLREDUCES_PER_LAYER + again)


def exposed_tensor_parallel_seconds(
    collectives: ArrayLike, gemms: ArrayLike, tensor: ArrayLike
) -> F64:
    """What a micro-batch's tensor-parallel collectives leave on the critical path when each is
    overlapped with the GEMM it feeds or drains (Transformer Engine's userbuffers: Megatron-Core's
    --tp-comm-overlap, NeMo's ub_tp_comm_overlap; torchtitan's async TP): the transfers run
    chunk by chunk over the t ranks beside the GEMM's chunks, so one chunk in t stays exposed,
    and what the GEMMs cannot cover (collectives longer than the micro-batch's GEMMs) more."""
    comm, t = _f(collectives), np.maximum(_f(tensor), 1.0)
    hidden = np.where(t > 1.0, np.maximum(comm - _f(gemms), comm / t), comm)
    return _f(hidden)


def exposed_tensor_parallel(
    collectives: ArrayLike, gemms: ArrayLike, tensor: ArrayLike, hw: LayoutHardware
) -> F64:
    """A micro-batch's tensor-parallel collectives as the run leaves them on the critical path,
    the one policy the step and a placement's re-pricing share: beside the GEMMs on a TPU whose
    framework overlaps them (Framework.overlaps_tensor_parallel_on_tpu), chunked beside the
    GEMMs with spec.parallelism.tensorOverlap (:func:`exposed_tensor_parallel_seconds`), else
    whole."""
    comm = _f(collectives)
    if hw.kind == "tpu" and hw.framework.overlaps_tensor_parallel_on_tpu:
        return _f(np.maximum(comm - _f(gemms), 0.0))
    if hw.tensor_overlap:
        return exposed_tensor_parallel_seconds(comm, gemms, tensor)
    return comm


def tensor_parallel_bytes_per_layer(
    model: Transformer, micro_batch: ArrayLike, recompute: ArrayLike
) -> F64:
    """All-reduce-equivalent bytes a layer's tensor-parallel group reduces per micro-batch: the
    collectives of :func:`tensor_parallel_collectives_per_layer`, each of s b h bf16 values."""
    one = BYTES_ACTIVATION * model.sequence_length * _f(micro_batch) * model.hidden
    return tensor_parallel_collectives_per_layer(recompute) * one


def _tensor_parallel_seconds(
    one_collective_bytes: F64, collectives: F64, tensor: F64, hw: LayoutHardware
) -> F64:
    """``collectives`` all-reduces of ``one_collective_bytes`` over t peers on the host's NVLink
    (what NCCL's tuner runs there: ring, tree or NVLS, and its protocol) or the slice's ICI: one
    layer's tensor-parallel time per micro-batch."""
    if hw.kind == "tpu":
        bandwidth = hw.intra_bandwidth
        if hw.wrapped[0]:
            bandwidth *= 2.0  # a wrapped ICI axis runs two rings, one each way
        one = ring_allreduce(one_collective_bytes, tensor, bandwidth, hw.intra_hop_latency)
        return _f(collectives * one.seconds)
    nccl = C.nccl_collective(
        C.ALL_REDUCE, one_collective_bytes, 1.0, tensor, hw.fabric(np.inf), with_busbw=False
    )
    return _f(np.where(tensor > 1, collectives * nccl.seconds, 0.0))


def _pipeline_send_seconds(nbytes: F64, tensor: F64, pipeline: F64, hw: LayoutHardware) -> F64:
    """One micro-batch's activation (forward) and gradient (backward) between two stages; each
    of the t ranks sends its 1/t (Megatron's scatter-gather). Across hosts when a host cannot
    hold every stage (GPU), over ICI on a TPU slice."""
    per_rank = nbytes / tensor
    if hw.kind == "tpu":
        one = per_rank / hw.intra_bandwidth + hw.intra_hop_latency
    else:
        cross = tensor * pipeline > hw.per_host
        nic_share = hw.nic_bandwidth / hw.per_host
        one = np.where(
            cross,
            per_rank / nic_share + NETWORK_HOP_LATENCY,
            per_rank / hw.intra_bandwidth + hw.intra_hop_latency,
        )
    return _f(np.where(pipeline > 1, 2.0 * one, 0.0))


class DataParallelComm(NamedTuple):
    seconds: F64  # the whole reduction per step
    strategy: I64  # STRATEGY_*


def _data_parallel_seconds(
    nbytes: F64,
    tensor: F64,
    pipeline: F64,
    data: F64,
    hw: LayoutHardware,
    strategy: str,
    reducible: ArrayLike = True,
) -> DataParallelComm:
    """The data-parallel group's reduction of ``nbytes`` (all-reduce-equivalent) per rank.

    GPU: a group has max(1, g / (t p)) ranks per host; every group of a host runs at once, so
    each gets its share of the NIC (and of the reducers). Ring: what NCCL's tuner runs (its
    ring, tree or NVLS-tree, and protocol); ``Auto`` takes the reduction server when more than
    RING_PREFERENCE_TOLERANCE faster, and only where ``reducible`` (gradients all-reduced: full
    sharding reduce-scatters them, which a reduction server does not serve). TPU: the slice's
    torus with t carved out of its first axis.
    """
    if hw.kind == "tpu":
        ax0, ax1, ax2 = hw.slice_axes
        first = np.maximum(ax0 / (tensor * pipeline), 1.0)
        data = data / hw.slices  # the ranks inside one slice (multislice: the rest over DCN)
        line = data
        shaped = np.isclose(first * ax1 * ax2, data)
        a0 = np.where(shaped, first, line)
        a1 = np.where(shaped, float(ax1), 1.0)
        a2 = np.where(shaped, float(ax2), 1.0)
        w0 = np.where(shaped & (a0 == ax0), hw.wrapped[0], False)
        coll = torus_allreduce(
            nbytes,
            (a0, a1, a2),
            hw.intra_bandwidth,
            (w0, hw.wrapped[1], hw.wrapped[2]),
            hw.intra_hop_latency,
        )
        seconds = _f(coll.seconds)
        return DataParallelComm(seconds, np.zeros(np.shape(seconds), np.int64))
    g = float(hw.per_host)
    tp = tensor * pipeline
    per_host = np.where((tp <= g) & (np.mod(g, tp) == 0), np.maximum(g / tp, 1.0), 1.0)
    per_host = np.minimum(per_host, data)
    hosts = data / per_host
    groups = g / per_host
    nic = hw.nic_bandwidth / groups
    args = (nbytes, hosts, per_host, nic, hw.intra_bandwidth, hw.intra_hop_latency)
    ring = C.nccl_collective(
        C.ALL_REDUCE, nbytes, hosts, per_host, hw.fabric(nic), with_busbw=False
    ).seconds
    ring = np.where(data > 1, ring, 0.0)
    if hw.reducers <= 0 or strategy == RING:
        return DataParallelComm(_f(ring), np.zeros(np.shape(ring), np.int64))
    rs = reduction_server(
        *args,
        NETWORK_HOP_LATENCY,
        hw.reducers,
        hw.reducer_bandwidth / groups,
    ).seconds
    rs = np.where((hosts > 1) & np.asarray(reducible), rs, np.inf)
    if strategy == REDUCTION_SERVER:
        use = np.isfinite(rs)
    else:
        use = rs < ring * (1.0 - RING_PREFERENCE_TOLERANCE)
    return DataParallelComm(_f(np.where(use, rs, ring)), use.astype(np.int64))


def hardware_memory_terms(
    hw: LayoutHardware, data: ArrayLike, sharding: ArrayLike
) -> dict[str, Any]:
    """The arguments of memory_per_accelerator that the hardware and its framework fix: the
    ranks the sharding spans of ``data`` (one slice's or replica group's), the allocator's slack
    at the limit, the runtime's reserve, the loss's bytes a logit, the bf16 weights kept at
    ``sharding``, the layer inputs offloaded and whether buffers are assigned by liveness (the one
    place a layout's memory reads them)."""
    return {
        "data": hw.sharded_data_ranks(data),
        "sharding": sharding,
        "allocator_overhead": hw.allocator_overhead,
        "runtime_reserve": hw.runtime_reserve_bytes,
        "loss_bytes_per_logit": loss_bytes_per_logit(hw.framework) / hw.vocab_tiles,
        "bf16_weight_bytes": weight_bytes(hw.framework, sharding),
        "layer_inputs_on_host": hw.offload_layer_inputs,
        "shared_peak": hw.framework.compiler_buffers,
        "optimizer_bytes": hw.optimizer_state_bytes,
        "gradient_bytes": hw.gradient_bytes,
    }


def hybrid_replica_seconds(
    nbytes: ArrayLike, tensor: ArrayLike, pipeline: ArrayLike, data: ArrayLike, hw: LayoutHardware
) -> F64:
    """The cross-group part of a GPU job's hybrid-sharded gradient reduction of ``nbytes`` per
    rank over ``data`` ranks (LayoutHardware.data_replicas groups of ``data / R``): after the
    reduce-scatter inside its group each rank holds nbytes / (data / R) and all-reduces it with
    its R - 1 counterparts, one in each other group, every rank of a host at once (the groups'
    ranks are contiguous, so two counterparts are t x data / R ranks apart: across hosts once a
    group fills one). 0 without replicas, and on a TPU (its slices: multislice_dcn_seconds)."""
    replicas = float(hw.data_replicas)
    if replicas <= 1.0 or hw.kind == "tpu":
        return np.zeros(np.shape(_f(nbytes) * _f(data)))
    inner = np.maximum(_f(data) / replicas, 1.0)
    apart = _f(tensor) * inner
    counterparts = np.full(np.shape(apart), replicas)
    return _data_parallel_seconds(_f(nbytes) / inner, apart, _f(pipeline), counterparts, hw, RING)[
        0
    ]


def multislice_dcn_seconds(nbytes: ArrayLike, data: ArrayLike, hw: LayoutHardware) -> F64:
    """The cross-slice part of a multislice job's gradient reduction of ``nbytes`` per rank over
    ``data`` ranks (``data / slices`` in each slice): after the reduce-scatter inside the slice
    each chip holds nbytes / (data / slices), and each host's chips' shards go round the ring of
    slices over its DCN NIC (:func:`C.dcn_allreduce_seconds`). 0 for one slice."""
    if hw.slices <= 1:
        return np.zeros(np.shape(_f(nbytes) * _f(data)))
    inner = np.maximum(_f(data) / hw.slices, 1.0)
    per_host = _f(nbytes) / inner * hw.per_host
    return _f(C.dcn_allreduce_seconds(per_host, hw.slices, hw.dcn_bandwidth))


# --- one evaluation over arrays of layouts -----------------------------------------------------


class LayoutArrays(NamedTuple):
    tensor: I64
    pipeline: I64
    data: I64
    sharding: I64
    micro_batch: I64
    micro_batches: I64
    recompute: I64
    virtual_stages: I64
    memory: MemoryArrays
    fits: NDArray[np.bool_]
    compute_seconds: F64  # every micro-batch's FLOPs at the sustained rate (no bubble)
    tensor_parallel_seconds: F64
    pipeline_send_seconds: F64
    bubble_seconds: F64
    data_parallel_seconds: F64  # the whole reduction
    exposed_data_parallel_seconds: F64
    step_seconds: F64
    tokens_per_second: F64
    mfu: F64
    strategy: I64
    cost_per_hour: F64
    context: I64 = np.ones(1, np.int64)
    context_parallel_seconds: F64 = np.zeros(1)  # exposed ring-attention K/V passes, per step
    expert: I64 = np.ones(1, np.int64)
    expert_parallel_seconds: F64 = np.zeros(1)  # exposed dispatch / combine all-to-alls, per step
    # The compute's parts, per step (engine.step_parts; their sum is compute_seconds), and the
    # optimizer step after the last micro-batch.
    gemm_seconds: F64 = np.zeros(1)
    attention_seconds: F64 = np.zeros(1)
    memory_bound_seconds: F64 = np.zeros(1)
    loss_seconds: F64 = np.zeros(1)
    host_gap_seconds: F64 = np.zeros(1)
    optimizer_seconds: F64 = np.zeros(1)
    expert_tensor: I64 = np.zeros(1, np.int64)  # the ranks each routed expert is split over
    # What the hidden data-parallel collectives take from the compute (OVERLAP_INTERFERENCE).
    overlap_interference_seconds: F64 = np.zeros(1)
    # Offloaded activations (engine.activation_offload): the copies' exposed seconds per step
    # (a part of compute_seconds) and the host bytes per accelerator at the peak.
    activation_offload_seconds: F64 = np.zeros(1)
    host_offload_bytes: F64 = np.zeros(1)
    # The request's mixture-of-experts schedule and token dropping (engine.moe_training).
    expert_overlap: str = OVERLAP_NONE
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    expert_dispatch: str = DEFAULT_DISPATCHER
    recompute_layers: int | None = None  # Full recompute of that many layers a chunk (None: all)
    offload_layers: int | None = None  # Megatron's CPU offloading of that many layers
    # The share of the policy's surplus over Full a rematerialising compiler recomputes to fit
    # (engine.recompute.compiler_remat_share; 0: none).
    compiler_remat: F64 = np.zeros(())


def evaluate_layouts(
    model: Transformer,
    hw: LayoutHardware,
    *,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    sharding: ArrayLike,
    micro_batch: ArrayLike,
    recompute: ArrayLike,
    global_batch: int,
    virtual_stages: ArrayLike = 1,
    strategy: str = AUTO,
    flash_attention: bool = True,
    context: ArrayLike = 1,
    sequence_parallel: bool = True,
    expert: ArrayLike = 1,
    expert_tensor: ArrayLike | None = None,
    expert_overlap: str = OVERLAP_NONE,
    capacity_factor: float | None = None,
    pad_to_capacity: bool = False,
    expert_dispatch: Dispatcher = DEFAULT_DISPATCHER,
    recompute_layers: int | None = None,
    offload_layers: int | None = None,
) -> LayoutArrays:
    """Memory, fit, step time, tokens/s and MFU of every layout (arrays broadcast together).
    The caller guarantees divisibility (t p c | accelerators, d b | global batch, c | s,
    e etp | t c d and e | experts). ``expert_tensor`` (etp): the ranks each routed expert is
    split over, None for the tensor degree (Megatron-Core's default); below it, MoE parallel
    folding regroups a stage's t c d ranks as etp x e x expert-data-parallel. A mixture of
    experts' ``expert_overlap`` (engine.moe_training.EXPERT_OVERLAPS), ``capacity_factor`` and
    ``pad_to_capacity`` (token dropping: engine.moe_training.routed_load), its
    ``expert_dispatch`` (engine.moe_training.expert_all_to_all_seconds); a DualPipe layout
    that DualPipe cannot schedule (an odd pipeline, too few micro-batches) does not fit.
    ``recompute_layers``: Full recompute limited to that many layers of each model chunk
    (Megatron-LM's --recompute-method block with --recompute-num-layers: the rest keep
    everything, as None does; engine.recompute.recomputed_layer_share); None: every layer.
    ``offload_layers``: Megatron's CPU offloading of that many layers' activations
    (engine.activation_offload.layer_offload): only a single stage without recompute fits."""
    sync = moe_sync_paid(hw.framework, pad_to_capacity)
    if sync != hw.framework.moe_sync_seconds:
        hw = replace(hw, framework=replace(hw.framework, moe_sync_seconds=sync))
    dual_pipe = expert_overlap == OVERLAP_DUALPIPE
    e = _f(expert)
    load = routed_load(capacity_factor, pad_to_capacity, e)
    t = _f(tensor)
    etp = t if expert_tensor is None else _f(expert_tensor)
    p = _f(pipeline)
    b = _f(micro_batch)
    v = _f(virtual_stages)
    c = _f(context)
    shard = np.asarray(sharding, dtype=np.int64)
    rec = np.asarray(recompute, dtype=np.int64)
    share = (
        _f(1.0)
        if recompute_layers is None
        else recomputed_layer_share(recompute_layers, model.layers, p, v)
    )
    d = hw.accelerators / (t * p * c)
    m = global_batch / (d * b)

    partial = bool(np.any((rec == RECOMPUTE_FULL) & (share < 1.0)))
    kept = np.full_like(rec, RECOMPUTE_NONE)  # what the layers that do not recompute run
    mem_fp8 = hw.compute_precision in ("fp8", "fp4")
    # A rematerialising compiler (XLA) recomputes what its policy saves beyond Full's rather than
    # overflow the chip: that share of the surplus leaves the memory and joins the recompute.
    full = np.full_like(rec, RECOMPUTE_FULL)
    remat = np.zeros(())

    def layer_mix(quantity: Callable[[I64], F64]) -> F64:
        """A per-layer quantity of the policy; under a partial Full recompute, the layers that
        recompute weigh ``share`` and the rest are None's; where a compiler rematerialises,
        moved towards Full's by its share."""
        value = quantity(rec)
        if partial:
            value = partial_recompute(rec, share, value, quantity(kept))
        if remats:
            value = mix_with_full(remat, value, quantity(full))
        return value

    def memory_under(policy: I64) -> MemoryArrays:
        return memory_per_accelerator(
            model,
            tensor=t,
            pipeline=p,
            micro_batch=b,
            micro_batches=m,
            recompute=policy,
            virtual_stages=v,
            context=c,
            flash_attention=flash_attention,
            sequence_parallel=sequence_parallel,
            fp8=mem_fp8,
            expert=e,
            expert_tensor=etp,
            dual_pipe=dual_pipe,
            recomputed_share=share,
            layers_off_device=offloaded_layers_off_device(offload_layers),
            **hardware_memory_terms(hw, d, shard),
        )

    mem = memory_under(rec)
    if hw.framework.compiler_remat:
        full_activations = memory_under(full).activations
        remat = compiler_remat_share(
            mem.total, mem.activations, full_activations, hw.memory_bytes, hw.allocator_overhead
        )
        freed = remat * (mem.activations - full_activations)
        total = mem.total - freed * (1.0 + hw.allocator_overhead)
        mem = mem._replace(
            activations=mem.activations - freed,
            reserve=mem.reserve - freed * hw.allocator_overhead,
            # what the compiler frees is what overflowed: the chip full, not a rounding over it
            total=np.where((remat > 0.0) & (remat < 1.0), hw.memory_bytes, total),
        )
    remats = bool(np.any(remat > 0.0))
    # Offloaded activations live in the host's DRAM, which must hold them too, and cross a host
    # link whose bandwidth must be known.
    host_bytes = host_offload_bytes(model, b, t, p, m, rec, v, c, hw.offload_layer_inputs)
    fits = (mem.total <= hw.memory_bytes) & (host_bytes <= hw.host_memory_per_accelerator)
    fits = fits & ~unknown_host_link(rec, hw.host_link_bandwidth, hw.offload_layer_inputs)
    if dual_pipe:
        fits = fits & dualpipe_runs(p, m)

    def parts_under(policy: I64) -> MicroBatchParts:
        return micro_batch_parts(
            model,
            hw,
            b,
            t,
            p,
            policy,
            c,
            flash_attention,
            sequence_parallel,
            expert=e,
            sharding=shard,
            expert_tensor=etp,
            load=load,
        )

    parts = parts_under(rec)
    if partial:
        parts = MicroBatchParts(
            *(
                partial_recompute(rec, share, a, z)
                for a, z in zip(parts, parts_under(kept), strict=True)
            )
        )
    if remats:
        parts = MicroBatchParts(
            *(mix_with_full(remat, a, z) for a, z in zip(parts, parts_under(full), strict=True))
        )
    if offload_layers:
        kept_set, _ = activation_bytes_per_layer(
            model, b, t, kept, c, flash_attention, sequence_parallel, mem_fp8
        )
        offloaded, copies = layer_offload(
            offload_layers, kept_set, hw.host_link_bandwidth, parts.layer
        )
        host_bytes = host_bytes + offloaded
        parts = parts._replace(activation_offload=parts.activation_offload + copies)
        fits = fits & (p == 1) & (rec == RECOMPUTE_NONE) & (hw.host_link_bandwidth > 0)
        fits = fits & (host_bytes <= hw.host_memory_per_accelerator)
    compute_mb = parts.total
    layers = stage_layers(model, p).middle
    act_bytes = BYTES_ACTIVATION * model.sequence_length * b * model.hidden / c
    tp_mb = layers * _tensor_parallel_seconds(
        act_bytes,
        layer_mix(
            lambda r: tensor_parallel_collectives_per_layer(r, hw.framework.recompute_stops_early)
        ),
        t,
        hw,
    )
    tp_mb = exposed_tensor_parallel(tp_mb, parts.gemm, t, hw)
    # Ring attention overlaps each K/V pass with the attention core's blocks.
    cp_layer = layer_mix(context_parallel_passes) * context_parallel_seconds(
        kv_bytes_per_layer(model, b, t), t, c, hw
    )
    core_layer = (
        3.0
        * model.attention_flops_per_token(model.sequence_length)
        / model.layers
        * b
        * model.sequence_length
        / (c * t)
        / ((hw.attention_peak_flops or hw.peak_flops) * matmul_efficiency(model, hw, b, t, c))
    )
    cp_mb = layers * np.maximum(cp_layer - core_layer, 0.0)
    pp_mb = _pipeline_send_seconds(act_bytes, t, p, hw) * v
    # Dispatch and combine of every MoE layer of the busiest stage. On the critical path: the
    # experts wait for the dispatched tokens and the next layer for the combined ones; the shared
    # experts' compute runs beside them (Megatron-Core's --moe-shared-expert-overlap), or, with a
    # batch-level overlap (OneFOneB, DualPipe), another micro-batch's whole layer does
    # (engine.moe_training.exposed_all_to_all).
    ep_mb = np.zeros(())
    if model.is_moe:
        moe_share = model.moe_layers / model.layers
        a2a_bytes = moe_all_to_all_bytes(model, b, t, c, load)
        a2a = expert_all_to_all_seconds(a2a_bytes, t, c, e, hw, etp, expert_dispatch, model)
        shared_tokens = b * model.sequence_length / (c * t)
        shared = (
            3.0
            * 2.0
            * model.shared_experts
            * model.expert_parameters
            * shared_tokens
            / (hw.peak_flops * matmul_efficiency(model, hw, b, t, c))
        )
        unpaired = unpaired_share(expert_overlap, p, v, m)
        per_layer = exposed_all_to_all(
            layer_mix(moe_all_to_alls) * a2a,
            shared,
            parts.layer,
            expert_overlap,
            unpaired,
            hw.framework.one_f_one_b_realised,
        )
        ep_mb = layers * moe_share * per_layer
    slot = compute_mb + tp_mb + cp_mb + pp_mb + ep_mb
    # DualPipe's bidirectional schedule (engine.moe_training.dualpipe_bubble); 1F1B's otherwise.
    bubble = dualpipe_bubble(slot, compute_mb, p) if dual_pipe else slot * (p - 1.0) / v
    pipeline_seconds = slot * m + bubble

    params = stage_parameters(model, t, p, e)
    worst = np.maximum(np.maximum(params.first, params.last), params.middle)
    if dual_pipe:  # a rank holds stage i and stage p - 1 - i (the first rank: first and last)
        worst = np.maximum(params.first + params.last, 2.0 * params.middle)
    # All-reduce-equivalent bytes (an all-gather or a reduce-scatter of X moves half of an
    # all-reduce of X): None all-reduces the gradients (fp32 unless the job reduces them in
    # bf16: LayoutHardware.gradient_bytes); Optimizer / Gradients reduce-scatter them and
    # all-gather bf16 weights; Full also gathers the weights for forward and backward of every
    # micro-batch. The group is the data x context ranks that hold the same weights.
    reduce_bytes = worst * hw.gradient_bytes
    gather_bytes = worst * BYTES_GATHER
    dp_bytes = np.where(
        shard == SHARD_NONE,
        reduce_bytes,
        np.where(
            shard == SHARD_FULL,
            (reduce_bytes + 2.0 * m * gather_bytes) / 2.0,
            (reduce_bytes + gather_bytes) / 2.0,
        ),
    )
    dc = d * c
    # Hybrid sharding (GPU): the sharded collectives run inside one replica group, whose
    # gradient shards are then all-reduced across the groups; unsharded, one all-reduce of all.
    sharded = shard != SHARD_NONE
    group = np.where(sharded, dc / hw.data_replicas, dc)
    dp = _data_parallel_seconds(dp_bytes, t, p, group, hw, strategy, reducible=shard != SHARD_FULL)
    across = np.where(sharded, hybrid_replica_seconds(reduce_bytes, t, p, dc, hw), 0.0)
    # Multislice (MaxText's dcn_data_parallelism): sharding and gathers stay inside a slice; the
    # gradients are all-reduced across slices over DCN.
    across = across + multislice_dcn_seconds(reduce_bytes, dc, hw)
    # The cross-replica all-reduce hides behind backward like the rest, or not at all where the
    # framework leaves it after backward (Framework.hides_cross_replica_reduction).
    hides = hw.framework.hides_cross_replica_reduction
    hidden_pool = dp.seconds + across if hides else dp.seconds
    # Unsharded gradients are reduced while the last micro-batch's backward runs (DDP buckets,
    # Megatron's overlap_grad_reduce); full sharding's gathers prefetch behind every layer's
    # compute but the first.
    exposed_bucketed = (
        exposed_communication(hidden_pool, compute_mb, reduce_bytes)
        if hw.overlaps_gradient_reduction
        else hidden_pool  # all of it after backward (and the optimizer's gather after the step)
    )
    hideable = hidden_pool * (1.0 - 1.0 / layers)
    exposed_full = hidden_pool - np.minimum(hideable, compute_mb * m)
    exposed = np.where(shard == SHARD_FULL, exposed_full, exposed_bucketed)
    exposed = np.where(dc > 1, exposed, 0.0) + (0.0 if hides else across)
    dp = dp._replace(seconds=dp.seconds + across)
    # each slice of a multislice job updates its own replica of the states
    optimizer = optimizer_seconds(model, hw, worst, hw.sharded_data_ranks(d) * c, shard, m)
    # What hides behind the compute still takes NCCL's SMs (and HBM) from it, as in the
    # data-parallel model (engine.training); a TPU's collectives run on its DMA engines.
    interference = (0.0 if hw.kind == "tpu" else OVERLAP_INTERFERENCE) * (dp.seconds - exposed)
    step = pipeline_seconds + exposed + optimizer + interference
    tokens = global_batch * model.sequence_length / step
    mfu = model.training_flops_per_token() * tokens / (hw.accelerators * hw.peak_flops)
    cost = hw.hosts * hw.host_price + np.where(
        dp.strategy == STRATEGY_REDUCTION_SERVER, hw.reducers * hw.reducer_price, 0.0
    )

    def i(x: ArrayLike) -> I64:
        return np.broadcast_to(np.asarray(x), step.shape).astype(np.int64)

    def f(x: ArrayLike) -> F64:
        return np.broadcast_to(_f(x), step.shape)

    return LayoutArrays(
        tensor=i(t),
        pipeline=i(p),
        data=i(np.round(d)),
        sharding=i(shard),
        micro_batch=i(b),
        micro_batches=i(np.round(m)),
        recompute=i(rec),
        virtual_stages=i(v),
        memory=MemoryArrays(*(f(x) for x in mem)),
        fits=np.broadcast_to(fits, step.shape),
        compute_seconds=f(compute_mb * m),
        tensor_parallel_seconds=f(tp_mb * m),
        pipeline_send_seconds=f(pp_mb * m),
        bubble_seconds=f(bubble),
        data_parallel_seconds=f(dp.seconds),
        exposed_data_parallel_seconds=f(exposed),
        overlap_interference_seconds=f(interference),
        step_seconds=step,
        tokens_per_second=tokens,
        mfu=mfu,
        strategy=i(dp.strategy),
        cost_per_hour=f(cost),
        context=i(c),
        context_parallel_seconds=f(cp_mb * m),
        expert=i(e),
        expert_parallel_seconds=f(ep_mb * m),
        expert_tensor=i(etp),
        gemm_seconds=f(parts.gemm * m),
        attention_seconds=f(parts.attention * m),
        memory_bound_seconds=f(parts.memory_bound * m),
        loss_seconds=f(parts.loss * m),
        host_gap_seconds=f(parts.host_gap * m),
        activation_offload_seconds=f(parts.activation_offload * m),
        host_offload_bytes=f(host_bytes),
        optimizer_seconds=f(optimizer),
        expert_overlap=expert_overlap,
        expert_dispatch=expert_dispatch,
        capacity_factor=capacity_factor,
        pad_to_capacity=pad_to_capacity,
        recompute_layers=recompute_layers,
        offload_layers=offload_layers,
        compiler_remat=f(remat),
    )
