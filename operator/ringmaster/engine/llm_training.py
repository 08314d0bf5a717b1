"""LLM training layouts: memory per accelerator, step time, and the search for the best layout.

A layout is tensor (t) x pipeline (p) x data (d) parallelism with a sharding of the data-parallel
part (None = DDP, Optimizer = ZeRO-1, Gradients = ZeRO-2, Full = ZeRO-3 / FSDP), a micro-batch
size b (m = global batch / (d x b) micro-batches per step), an activation-recompute setting and
virtual pipeline stages v. :func:`evaluate_layouts` evaluates numpy arrays of layouts at once;
:func:`search_layouts` enumerates every valid layout of a request, evaluates them in one call,
and picks the fastest that fits (cheaper on ties), with the best alternatives and why each lost.

Memory per accelerator (bytes), on the heavier of the first and the last pipeline stage:

- model state: BYTES_WEIGHTS + BYTES_GRADIENTS + BYTES_OPTIMIZER per parameter of the stage's
  shard (parameters / t, the stage's layers), each divided by d as the sharding shards it;
- activations per layer per micro-batch (Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", section 4, with sequence parallelism under TP, so
  every term is divided by t): ``s b h (34 + 5 a s / h) / t`` for a GPT layer; ``Selective``
  drops the attention core's ``5 a s^2 b`` (recomputed, as FlashAttention does); ``Full`` keeps
  only each layer's input ``2 s b h / t`` plus one layer's working set while it is recomputed.
  The first stage of a 1F1B pipeline keeps min(p, m) micro-batches in flight, times
  (1 + (p - 1) / (p v)) when interleaved (ibid. section 4.2.3); the last stage also holds the
  fp32 logits, ``4 s b V / t`` (ibid. section 4.3);
- FRAMEWORK_RESERVE_BYTES (runtime context, communicator buffers, allocator slack).

Step time: each micro-batch costs its stage's FLOPs at peak x LLM_MATMUL_EFFICIENCY, the HBM time
of its memory-bound (elementwise) kernels, its tensor-parallel collectives and its pipeline
sends; a 1F1B pipeline takes ``(m + (p - 1) / v)`` such slots (the bubble is (p - 1) / (m v)
of the work); the data-parallel gradient reduction (or reduce-scatter + all-gather under
sharding) is then added, less what overlaps with computation.

Every collective goes through the small adapters ``_tensor_parallel_seconds``,
``_pipeline_send_seconds`` and ``_data_parallel_seconds``, so a new network model changes one
place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives as C
from ringmaster.engine.efficiency import (
    ICI_EFFICIENCY,
    ICI_HOP_LATENCY,
    MEMORY_EFFICIENCY,
    NETWORK_HOP_LATENCY,
    NIC_EFFICIENCY,
    NVLINK_EFFICIENCY,
    NVLINK_HOP_LATENCY,
    NVLS_EFFICIENCY,
    PCIE_EFFICIENCY,
    PCIE_HOP_LATENCY,
    RING_PREFERENCE_TOLERANCE,
)
from ringmaster.engine.hardware import Catalog, Host
from ringmaster.engine.training import (
    exposed_communication,
    resolve_compute_precision,
    vertex_reducer_count,
)
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GIB

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

# --- names ------------------------------------------------------------------------------------

AUTO = "Auto"
SHARDINGS = ("None", "Optimizer", "Gradients", "Full")  # codes 0..3, each shards more
RECOMPUTES = ("None", "Selective", "Full")  # codes 0..2, each recomputes more
SHARD_NONE, SHARD_OPTIMIZER, SHARD_GRADIENTS, SHARD_FULL = range(4)
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = range(3)
RING, REDUCTION_SERVER = "Ring", "ReductionServer"
STRATEGY_RING, STRATEGY_REDUCTION_SERVER = 0, 1

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
# Bytes of activation elements (bf16) and of the fp32 logits the loss is computed on.
BYTES_ACTIVATION = 2.0
BYTES_LOGITS = 4.0
# Bytes per parameter all-gathered under sharding (the bf16 working copy) and reduce-scattered
# or all-reduced (fp32 gradients, as BYTES_GRADIENTS).
BYTES_GATHER = BYTES_WEIGHTS
BYTES_REDUCE = BYTES_GRADIENTS

# Full sharding gathers a layer's weights just before use and prefetches the next one (PyTorch
# FSDP's default BackwardPrefetch.BACKWARD_PRE and FSDP2's implicit prefetch of one layer):
# two layers' unsharded bf16 weights are resident at once.
FSDP_RESIDENT_LAYERS = 2

# What the runtime keeps outside the model's tensors: the CUDA context with cuBLAS/cuDNN
# workspaces (about 0.5 GiB on A100/H100 with CUDA 12), NCCL's communicator buffers (NCCL_BUFFSIZE
# 4 MiB per channel and peer: a few hundred MiB for TP + DP + PP communicators) and the caching
# allocator's fragmentation. Assumed, not calibrated: no published point isolates it; 3 GiB is
# the headroom Megatron-LM's and torchtitan's memory estimators users leave on 80 GB parts.
FRAMEWORK_RESERVE_BYTES = 3.0 * GIB

# Tensor-parallel collectives per layer (Korthikanti et al. 2022, section 4.2.2): with sequence
# parallelism two all-gathers and two reduce-scatters in the forward pass, the same in the
# backward pass: the traffic of 4 all-reduces of s b h activations per layer per micro-batch.
# Full recompute runs the forward pass, and its 2, again.
TP_ALLREDUCES_PER_LAYER = 4
TP_ALLREDUCES_RECOMPUTE = 2

# Sustained fraction of the dense peak that a transformer's forward and backward matmuls reach
# in a large-scale training step (the memory-bound kernels around them are timed apart, at HBM
# bandwidth: ELEMENTWISE_PASSES). Calibrated (ringmaster.calibration.llm_training, fitted on the
# Megatron SC'21 Table 1 rows with tensor parallelism only, the least communication-bound ones):
# see that module for the fit and for the checked rows; a test keeps this value equal to the fit.
LLM_MATMUL_EFFICIENCY = 0.618

# The same for TPUs (XLA on the MXU, which fuses much of the elementwise work into the matmuls:
# the fitted value is high). Calibrated on the MaxText v5e 16B row (ibid.).
LLM_MATMUL_EFFICIENCY_TPU = 0.903

LINK_EFFICIENCY = {"nvlink": NVLINK_EFFICIENCY, "pcie": PCIE_EFFICIENCY, "ici": ICI_EFFICIENCY}
LINK_HOP_LATENCY = {"nvlink": NVLINK_HOP_LATENCY, "pcie": PCIE_HOP_LATENCY, "ici": ICI_HOP_LATENCY}

# The memory-bound kernels around the matmuls (norms, activation functions, dropout, residual
# adds, rotary embeddings; softmax too where attention scores are materialised) move each stored
# activation about this many times per micro-batch: written and read in the forward pass, its
# gradient written and read in the backward pass. Assumed (no published point isolates it);
# Full recompute runs the forward pass, two more passes, again.
ELEMENTWISE_PASSES = 4
ELEMENTWISE_PASSES_RECOMPUTE = 2

# How many alternatives a search reports.
ALTERNATIVES = 5


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


# --- hardware, as the layout model needs it ----------------------------------------------------


@dataclass(frozen=True)
class LayoutHardware:
    """The pool a layout runs on, in engine units: achieved bandwidths (line rate x efficiency)."""

    kind: str  # "gpu" or "tpu"
    accelerator: str
    hosts: int
    per_host: int
    peak_flops: float  # at the compute precision
    memory_bytes: float
    intra_bandwidth: float  # NVLink / PCIe / ICI link, achieved, bytes/s
    intra_hop_latency: float
    nic_bandwidth: float  # host NIC, achieved, bytes/s
    host_price: float  # USD/h
    efficiency: float
    slice_axes: tuple[int, int, int] = (1, 1, 1)  # TPU slice topology
    wrapped: tuple[bool, bool, bool] = (False, False, False)
    reducers: int = 0  # reduction-server reducers (0: none considered)
    reducer_bandwidth: float = 0.0  # achieved, bytes/s, per reducer
    reducer_price: float = 0.0
    reducer_machine_type: str = ""
    machine_type: str = ""
    memory_bandwidth: float = 0.0  # HBM, achieved, bytes/s (0: elementwise time not modelled)
    # What NCCL sees inside a GPU host (collectives.GpuFabric): the link kind, NVLink SHARP's
    # achieved bandwidth (0 without NVSwitch + Hopper or later) and the GPU generation.
    intra_link: str = "nvlink"
    nvls_bandwidth: float = 0.0
    nccl_arch: str = "ampere"
    compute_precision: str = "bf16"

    @property
    def accelerators(self) -> int:
        return self.hosts * self.per_host


def layout_hardware(
    host: Host,
    hosts: int,
    catalog: Catalog,
    *,
    reducer_machine_type: str | None = None,
    reducers: int | None = None,
    slice_axes: tuple[int, int, int] | None = None,
    wrapped: tuple[bool, bool, bool] = (False, False, False),
    compute_precision: str | None = None,
) -> LayoutHardware:
    """The hardware of ``hosts`` x ``host`` (a reducer machine type adds the reduction-server
    option: ``reducers`` of them, or as many as Vertex AI's bandwidth rule asks).
    ``compute_precision``: ``spec.model.computePrecision`` (default bf16, else fp16)."""
    acc = host.accelerator
    precision = resolve_compute_precision(acc, compute_precision)
    nvls = acc.nvswitch and acc.nccl_arch in ("hopper", "blackwell")
    k, reducer_bw, reducer_price = 0, 0.0, 0.0
    if reducer_machine_type and acc.kind == "gpu" and hosts > 1:
        reducer = catalog.machine(reducer_machine_type)
        rule = int(vertex_reducer_count(hosts, host.nic_bandwidth, reducer.nic_bandwidth))
        k = reducers or rule
        reducer_bw = reducer.nic_bandwidth * NIC_EFFICIENCY
        reducer_price = reducer.price_per_hour
    return LayoutHardware(
        kind=acc.kind,
        accelerator=acc.name,
        hosts=hosts,
        per_host=host.count,
        peak_flops=acc.peak(precision),
        memory_bytes=acc.memory_bytes,
        intra_bandwidth=(acc.ici_link_bandwidth if acc.kind == "tpu" else acc.intra_bandwidth)
        * LINK_EFFICIENCY[acc.intra_link],
        intra_hop_latency=LINK_HOP_LATENCY[acc.intra_link],
        # The transport's achieved rate: kernel TCP shared by the host's GPUs loses more.
        nic_bandwidth=host.nic_bandwidth
        * float(C.network_efficiency(host.machine.transport, host.count)),
        host_price=host.price_per_hour,
        efficiency=LLM_MATMUL_EFFICIENCY_TPU if acc.kind == "tpu" else LLM_MATMUL_EFFICIENCY,
        slice_axes=slice_axes or (hosts * host.count, 1, 1),
        wrapped=wrapped,
        reducers=k,
        reducer_bandwidth=reducer_bw,
        reducer_price=reducer_price,
        reducer_machine_type=reducer_machine_type or "",
        machine_type=host.machine.name,
        memory_bandwidth=acc.memory_bandwidth * MEMORY_EFFICIENCY,
        intra_link=acc.intra_link,
        nvls_bandwidth=acc.intra_bandwidth * NVLS_EFFICIENCY if nvls else 0.0,
        nccl_arch=acc.nccl_arch or "volta",
        compute_precision=precision,
    )


# --- memory ------------------------------------------------------------------------------------


class StageParameters(NamedTuple):
    first: F64  # parameters held by one accelerator of the first pipeline stage
    last: F64  # ... of the last stage (the same stage when p = 1)
    layer: F64  # parameters of one layer's shard (per / t)


def stage_parameters(model: Transformer, tensor: ArrayLike, pipeline: ArrayLike) -> StageParameters:
    """Parameters per accelerator: the stage's layers / t; the embedding on the first stage, the
    LM head (a copy of a tied embedding, as Megatron-LM keeps one) and the final norm on the
    last. Norm vectors are counted as split by t too (they are < 0.1% of a layer)."""
    t = _f(tensor)
    p = _f(pipeline)
    layers = model.layers / p * model.parameters_per_layer / t
    table = float(model.vocab * model.hidden)
    head = np.where((p > 1) | (not model.tied_embeddings), table, 0.0)
    last = layers + head / t + model.hidden
    first = np.where(p > 1, layers + table / t, last + table / t)
    return StageParameters(first, last, model.parameters_per_layer / t)


def activation_bytes_per_layer(
    model: Transformer, micro_batch: ArrayLike, tensor: ArrayLike, recompute: ArrayLike
) -> tuple[F64, F64]:
    """(stored per layer per micro-batch, one layer's full working set), bytes per accelerator.

    Korthikanti et al. 2022, section 4.1, generalised to grouped-query attention and gated FFNs
    by the same accounting (2 bytes per stored bf16 element, 1 per dropout-mask element):
    attention 7 s b h + 4 s b h_kv (input 2, Q 2, K and V 2 h_kv/h each, projection input 2,
    mask 1) + 5 a s^2 b for the core (scores 2, softmax dropout mask 1, its output 2); MLP
    3 s b h (input 2, mask 1) + 4 s b f standard (GeLU input and output) or 6 s b f gated (gate,
    up and their product); two norms' inputs 4 s b h. For GPT (f = 4h, h_kv = h) this is the
    paper's s b h (34 + 5 a s / h). Sequence parallelism divides every term by t.
    """
    t = _f(tensor)
    b = _f(micro_batch)
    s = float(model.sequence_length)
    h = float(model.hidden)
    sb = s * b
    ffn = (6.0 if model.gated_ffn else 4.0) * model.ffn_hidden
    linear = sb * (7.0 * h + 4.0 * model.kv_hidden + 3.0 * h + ffn + 4.0 * h) / t
    core = 5.0 * model.heads * s * sb / t
    r = np.asarray(recompute)
    stored = np.where(
        r == RECOMPUTE_NONE,
        linear + core,
        np.where(r == RECOMPUTE_SELECTIVE, linear, BYTES_ACTIVATION * sb * h / t),
    )
    return stored, linear + core


class MemoryArrays(NamedTuple):
    """Bytes per accelerator on the fuller pipeline stage, by term."""

    weights: F64
    gradients: F64
    optimizer: F64
    activations: F64
    reserve: F64
    total: F64


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
) -> MemoryArrays:
    """Weights, gradients, optimizer state, activations and the reserve per accelerator."""
    t, p, d = _f(tensor), _f(pipeline), _f(data)
    shard = np.asarray(sharding)
    m, v = _f(micro_batches), _f(virtual_stages)
    params = stage_parameters(model, t, p)
    weights_div = np.where(shard >= SHARD_FULL, d, 1.0)
    grads_div = np.where(shard >= SHARD_GRADIENTS, d, 1.0)
    optim_div = np.where(shard >= SHARD_OPTIMIZER, d, 1.0)
    gathered = np.where(
        (shard >= SHARD_FULL) & (d > 1), FSDP_RESIDENT_LAYERS * params.layer * BYTES_GATHER, 0.0
    )

    stored, working = activation_bytes_per_layer(model, micro_batch, t, recompute)
    # Full recompute rebuilds one layer at a time during backward: its working set is resident.
    transient = np.where(np.asarray(recompute) == RECOMPUTE_FULL, working, 0.0)
    layers = model.layers / p
    in_flight = np.minimum(p, m) * np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)
    logits = BYTES_LOGITS * model.sequence_length * _f(micro_batch) * model.vocab / t
    act_first = layers * stored * in_flight + transient + np.where(p > 1, 0.0, logits)
    act_last = layers * stored + transient + logits

    def state(n: F64) -> tuple[F64, F64, F64]:
        w = n * BYTES_WEIGHTS / weights_div + gathered
        return w, n * BYTES_GRADIENTS / grads_div, n * BYTES_OPTIMIZER / optim_div

    w1, g1, o1 = state(params.first)
    w2, g2, o2 = state(params.last)
    first = w1 + g1 + o1 + act_first
    last = w2 + g2 + o2 + act_last
    pick_first = first >= last
    reserve = np.full(np.broadcast(first, last).shape, FRAMEWORK_RESERVE_BYTES)
    weights = np.where(pick_first, w1, w2)
    gradients = np.where(pick_first, g1, g2)
    optimizer = np.where(pick_first, o1, o2)
    activations = np.where(pick_first, act_first, act_last)
    total = weights + gradients + optimizer + activations + reserve
    return MemoryArrays(weights, gradients, optimizer, activations, reserve, total)


# --- compute ------------------------------------------------------------------------------------


def recompute_flops_per_token(model: Transformer, recompute: ArrayLike) -> F64:
    """Extra forward FLOPs per token: Full repeats every layer's forward pass, Selective only the
    attention core (Korthikanti et al. 2022, section 5: 2.7% of the FLOPs for GPT-3 175B)."""
    r = np.asarray(recompute)
    layers_forward = 2.0 * model.layers * model.parameters_per_layer
    core = model.attention_flops_per_token(model.sequence_length)
    return _f(
        np.where(
            r == RECOMPUTE_FULL, layers_forward + core, np.where(r == RECOMPUTE_SELECTIVE, core, 0)
        )
    )


def hardware_flops_per_token(model: Transformer, recompute: ArrayLike) -> F64:
    """Model FLOPs (6N + attention, Transformer.training_flops_per_token) plus recompute's."""
    return model.training_flops_per_token() + recompute_flops_per_token(model, recompute)


def stage_flops_per_micro_batch(
    model: Transformer,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    recompute: ArrayLike,
) -> F64:
    """FLOPs one accelerator of the busiest stage (the last: it adds the LM head) does for one
    micro-batch, forward + backward + recompute."""
    tokens = _f(micro_batch) * model.sequence_length
    layers = 3.0 * (
        2.0 * model.layers * model.parameters_per_layer
        + model.attention_flops_per_token(model.sequence_length)
    )
    head = 3.0 * 2.0 * model.vocab * model.hidden
    per_token = (layers + recompute_flops_per_token(model, recompute)) / _f(pipeline) + head
    return tokens * per_token / _f(tensor)


def pipeline_bubble_fraction(
    pipeline: ArrayLike, micro_batches: ArrayLike, virtual_stages: ArrayLike = 1
) -> F64:
    """Idle time of a 1F1B pipeline relative to its work: (p - 1) / (m v) (Narayanan et al.
    SC'21, sections 2.2.1 and 2.2.2)."""
    return (_f(pipeline) - 1.0) / (_f(micro_batches) * _f(virtual_stages))


def elementwise_seconds(
    model: Transformer,
    hw: LayoutHardware,
    micro_batch: ArrayLike,
    tensor: ArrayLike,
    pipeline: ArrayLike,
    recompute: ArrayLike,
    flash_attention: bool = True,
) -> F64:
    """HBM time of one micro-batch's memory-bound kernels on the busiest stage: the layer's
    activations (Korthikanti's accounting; the attention scores too unless a fused,
    FlashAttention-style kernel keeps them on chip) moved ELEMENTWISE_PASSES times."""
    if hw.memory_bandwidth <= 0:
        return _f(0.0)
    linear, _ = activation_bytes_per_layer(model, micro_batch, tensor, RECOMPUTE_SELECTIVE)
    _, working = activation_bytes_per_layer(model, micro_batch, tensor, RECOMPUTE_NONE)
    traffic = linear if flash_attention else working
    passes = ELEMENTWISE_PASSES + np.where(
        np.asarray(recompute) == RECOMPUTE_FULL, ELEMENTWISE_PASSES_RECOMPUTE, 0
    )
    return _f(model.layers / _f(pipeline) * passes * traffic / hw.memory_bandwidth)


# --- communication: the one adapter onto the network model ------------------------------------


def tensor_parallel_collectives_per_layer(recompute: ArrayLike) -> F64:
    """All-reduce equivalents per layer per micro-batch: TP_ALLREDUCES_PER_LAYER, plus
    TP_ALLREDUCES_RECOMPUTE under Full recompute."""
    full = np.asarray(recompute) == RECOMPUTE_FULL
    return _f(TP_ALLREDUCES_PER_LAYER + np.where(full, TP_ALLREDUCES_RECOMPUTE, 0))


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
        one = C.ring_allreduce(one_collective_bytes, tensor, bandwidth, hw.intra_hop_latency)
        return _f(collectives * one.seconds)
    nccl = C.nccl_collective(
        C.ALL_REDUCE, one_collective_bytes, 1.0, tensor, _fabric(hw, np.inf), with_busbw=False
    )
    return _f(np.where(tensor > 1, collectives * nccl.seconds, 0.0))


def _fabric(hw: LayoutHardware, net_bandwidth: ArrayLike) -> C.GpuFabric:
    """The GPU host as NCCL sees it, with ``net_bandwidth`` of NIC for the group."""
    return C.GpuFabric(
        intra_bandwidth=hw.intra_bandwidth,
        net_bandwidth=net_bandwidth,
        intra_link=hw.intra_link,
        nvls_bandwidth=hw.nvls_bandwidth,
        arch=hw.nccl_arch,
    )


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
        line = data
        shaped = np.isclose(first * ax1 * ax2, data)
        a0 = np.where(shaped, first, line)
        a1 = np.where(shaped, float(ax1), 1.0)
        a2 = np.where(shaped, float(ax2), 1.0)
        w0 = np.where(shaped & (a0 == ax0), hw.wrapped[0], False)
        coll = C.torus_allreduce(
            nbytes,
            (a0, a1, a2),
            hw.intra_bandwidth,
            (w0, hw.wrapped[1], hw.wrapped[2]),
            hw.intra_hop_latency,
        )
        return DataParallelComm(_f(coll.seconds), np.zeros(np.shape(coll.seconds), np.int64))
    g = float(hw.per_host)
    tp = tensor * pipeline
    per_host = np.where((tp <= g) & (np.mod(g, tp) == 0), np.maximum(g / tp, 1.0), 1.0)
    per_host = np.minimum(per_host, data)
    hosts = data / per_host
    groups = g / per_host
    nic = hw.nic_bandwidth / groups
    args = (nbytes, hosts, per_host, nic, hw.intra_bandwidth, hw.intra_hop_latency)
    ring = C.nccl_collective(
        C.ALL_REDUCE, nbytes, hosts, per_host, _fabric(hw, nic), with_busbw=False
    ).seconds
    ring = np.where(data > 1, ring, 0.0)
    if hw.reducers <= 0 or strategy == RING:
        return DataParallelComm(_f(ring), np.zeros(np.shape(ring), np.int64))
    rs = C.reduction_server(
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
) -> LayoutArrays:
    """Memory, fit, step time, tokens/s and MFU of every layout (arrays broadcast together).
    The caller guarantees divisibility (t p | accelerators, d b | global batch)."""
    t = _f(tensor)
    p = _f(pipeline)
    b = _f(micro_batch)
    v = _f(virtual_stages)
    shard = np.asarray(sharding, dtype=np.int64)
    rec = np.asarray(recompute, dtype=np.int64)
    d = hw.accelerators / (t * p)
    m = global_batch / (d * b)
    mem = memory_per_accelerator(
        model,
        tensor=t,
        pipeline=p,
        data=d,
        sharding=shard,
        micro_batch=b,
        micro_batches=m,
        recompute=rec,
        virtual_stages=v,
    )
    fits = mem.total <= hw.memory_bytes

    rate = hw.peak_flops * hw.efficiency
    compute_mb = stage_flops_per_micro_batch(model, b, t, p, rec) / rate
    compute_mb = compute_mb + elementwise_seconds(model, hw, b, t, p, rec, flash_attention)
    layers = model.layers / p
    act_bytes = BYTES_ACTIVATION * model.sequence_length * b * model.hidden
    tp_mb = layers * _tensor_parallel_seconds(
        act_bytes, tensor_parallel_collectives_per_layer(rec), t, hw
    )
    pp_mb = _pipeline_send_seconds(act_bytes, t, p, hw) * v
    slot = compute_mb + tp_mb + pp_mb
    bubble = slot * (p - 1.0) / v
    pipeline_seconds = slot * m + bubble

    params = stage_parameters(model, t, p)
    worst = np.maximum(params.first, params.last)
    # All-reduce-equivalent bytes (an all-gather or a reduce-scatter of X moves half of an
    # all-reduce of X): None all-reduces fp32 gradients; Optimizer / Gradients reduce-scatter
    # them and all-gather bf16 weights; Full also gathers the weights for forward and backward of
    # every micro-batch.
    reduce_bytes = worst * BYTES_REDUCE
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
    dp = _data_parallel_seconds(dp_bytes, t, p, d, hw, strategy, reducible=shard != SHARD_FULL)
    # Unsharded gradients are reduced while the last micro-batch's backward runs (DDP buckets,
    # Megatron's overlap_grad_reduce); full sharding's gathers prefetch behind every layer's
    # compute but the first.
    exposed_bucketed = exposed_communication(dp.seconds, compute_mb, reduce_bytes)
    hideable = dp.seconds * (1.0 - 1.0 / layers)
    exposed_full = dp.seconds - np.minimum(hideable, compute_mb * m)
    exposed = np.where(shard == SHARD_FULL, exposed_full, exposed_bucketed)
    exposed = np.where(d > 1, exposed, 0.0)
    step = pipeline_seconds + exposed
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
        data=i(d),
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
        step_seconds=step,
        tokens_per_second=tokens,
        mfu=mfu,
        strategy=i(dp.strategy),
        cost_per_hour=f(cost),
    )


# --- the search --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutRequest:
    """What the user fixed (an int or a name) and what the search chooses (None = Auto)."""

    model: Transformer
    global_batch: int  # sequences per step
    tensor: int | None = None
    pipeline: int | None = None
    sharding: str | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    virtual_stages: int = 1
    strategy: str = AUTO  # the data-parallel part: Auto, Ring, ReductionServer


@dataclass(frozen=True)
class Layout:
    """One evaluated layout, as plain numbers."""

    tensor: int
    pipeline: int
    data: int
    sharding: str
    micro_batch: int
    micro_batches: int
    recompute: str
    virtual_stages: int
    fits: bool
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    reserve_bytes: float
    total_bytes: float
    capacity_bytes: float
    step_seconds: float
    compute_seconds: float
    tensor_parallel_seconds: float
    pipeline_send_seconds: float
    bubble_seconds: float
    data_parallel_seconds: float
    exposed_data_parallel_seconds: float
    tokens_per_second: float
    mfu: float
    strategy: str
    cost_per_hour: float

    @property
    def name(self) -> str:
        """``TP8 PP4 DP32``, as ``kubectl get tj -o wide`` shows it."""
        return f"TP{self.tensor} PP{self.pipeline} DP{self.data}"

    def describe(self) -> str:
        v = f" x {self.virtual_stages} virtual" if self.virtual_stages > 1 else ""
        return (
            f"tensor {self.tensor} x pipeline {self.pipeline}{v} x data {self.data}, sharding "
            f"{self.sharding}, micro-batch {self.micro_batch}, recompute {self.recompute}"
        )


@dataclass(frozen=True)
class Alternative:
    layout: Layout
    why: str  # "slower by 12%" or "does not fit by 3.2 GiB"


@dataclass(frozen=True)
class LayoutSearch:
    chosen: Layout  # the fastest that fits; when none fits, the one closest to fitting
    fits: bool
    reason: str | None  # when nothing fits: the numbers and what to try
    alternatives: tuple[Alternative, ...]
    evaluated: int  # layouts evaluated
    arrays: LayoutArrays = field(repr=False)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _powers_of_two_dividing(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        if n % k == 0:
            out.append(k)
        k *= 2
    return out


def layout_grid(request: LayoutRequest, hw: LayoutHardware) -> dict[str, I64]:
    """Every valid layout of the request: heads divisible by t (and t within a host: a divisor of
    the host's accelerators, or of the slice's first axis on a TPU), layers by p, accelerators by
    t p, the global batch by d b; micro-batches are powers of two."""
    model = request.model
    n = hw.accelerators
    host_span = hw.per_host if hw.kind == "gpu" else hw.slice_axes[0]
    tensors = (
        [request.tensor]
        if request.tensor is not None
        else [t for t in _divisors(host_span) if model.heads % t == 0]
    )
    pipelines = (
        [request.pipeline]
        if request.pipeline is not None
        else [p for p in _divisors(model.layers) if n % p == 0]
    )
    shardings = (
        [SHARDINGS.index(request.sharding)]
        if request.sharding is not None
        else list(range(len(SHARDINGS)))
    )
    recomputes = (
        [RECOMPUTES.index(request.recompute)]
        if request.recompute is not None
        else list(range(len(RECOMPUTES)))
    )
    rows: list[tuple[int, int, int, int, int]] = []
    for t in tensors:
        for p in pipelines:
            if n % (t * p):
                continue
            d = n // (t * p)
            if request.global_batch % d:
                continue
            per_replica = request.global_batch // d
            micro = (
                [request.micro_batch]
                if request.micro_batch is not None
                else _powers_of_two_dividing(per_replica)
            )
            for b in micro:
                if per_replica % b:
                    continue
                for s in shardings if d > 1 else [SHARD_NONE]:
                    for r in recomputes:
                        rows.append((t, p, s, b, r))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 5)
    return {
        "tensor": arr[:, 0],
        "pipeline": arr[:, 1],
        "sharding": arr[:, 2],
        "micro_batch": arr[:, 3],
        "recompute": arr[:, 4],
    }


def evaluate_grid(request: LayoutRequest, hw: LayoutHardware, grid: dict[str, I64]) -> LayoutArrays:
    """:func:`evaluate_layouts` over a :func:`layout_grid`."""
    return evaluate_layouts(
        request.model,
        hw,
        tensor=grid["tensor"],
        pipeline=grid["pipeline"],
        sharding=grid["sharding"],
        micro_batch=grid["micro_batch"],
        recompute=grid["recompute"],
        global_batch=request.global_batch,
        virtual_stages=request.virtual_stages,
        strategy=request.strategy,
    )


def _layout(a: LayoutArrays, i: int, capacity: float) -> Layout:
    mem = a.memory
    return Layout(
        tensor=int(a.tensor[i]),
        pipeline=int(a.pipeline[i]),
        data=int(a.data[i]),
        sharding=SHARDINGS[int(a.sharding[i])],
        micro_batch=int(a.micro_batch[i]),
        micro_batches=int(a.micro_batches[i]),
        recompute=RECOMPUTES[int(a.recompute[i])],
        virtual_stages=int(a.virtual_stages[i]),
        fits=bool(a.fits[i]),
        weights_bytes=float(mem.weights[i]),
        gradients_bytes=float(mem.gradients[i]),
        optimizer_bytes=float(mem.optimizer[i]),
        activations_bytes=float(mem.activations[i]),
        reserve_bytes=float(mem.reserve[i]),
        total_bytes=float(mem.total[i]),
        capacity_bytes=capacity,
        step_seconds=float(a.step_seconds[i]),
        compute_seconds=float(a.compute_seconds[i]),
        tensor_parallel_seconds=float(a.tensor_parallel_seconds[i]),
        pipeline_send_seconds=float(a.pipeline_send_seconds[i]),
        bubble_seconds=float(a.bubble_seconds[i]),
        data_parallel_seconds=float(a.data_parallel_seconds[i]),
        exposed_data_parallel_seconds=float(a.exposed_data_parallel_seconds[i]),
        tokens_per_second=float(a.tokens_per_second[i]),
        mfu=float(a.mfu[i]),
        strategy=REDUCTION_SERVER if int(a.strategy[i]) == STRATEGY_REDUCTION_SERVER else RING,
        cost_per_hour=float(a.cost_per_hour[i]),
    )


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


class NoLayoutError(ValueError):
    """The request admits no layout at all (nothing divides); the message names the numbers."""


def search_layouts(request: LayoutRequest, hw: LayoutHardware) -> LayoutSearch:
    """Evaluate every valid layout and choose: the fastest that fits, cheaper on ties (then the
    one with the most memory to spare)."""
    grid = layout_grid(request, hw)
    if grid["tensor"].size == 0:
        raise NoLayoutError(_no_layout_message(request, hw))
    a = evaluate_grid(request, hw, grid)
    cap = hw.memory_bytes
    fitting = np.flatnonzero(a.fits)
    if fitting.size:
        order = fitting[
            np.lexsort(
                (
                    a.memory.total[fitting],
                    a.cost_per_hour[fitting] * a.step_seconds[fitting],
                    np.round(a.step_seconds[fitting], 12),
                )
            )
        ]
        best = int(order[0])
        chosen = _layout(a, best, cap)
        reason = None
    else:
        best = int(np.argmin(a.memory.total))
        chosen = _layout(a, best, cap)
        reason = _does_not_fit(chosen, hw, request, a)
    return LayoutSearch(
        chosen=chosen,
        fits=bool(fitting.size),
        reason=reason,
        alternatives=_alternatives(a, best, cap),
        evaluated=int(a.step_seconds.size),
        arrays=a,
    )


def _alternatives(a: LayoutArrays, best: int, cap: float) -> tuple[Alternative, ...]:
    """The best layout of each other (tensor, pipeline, sharding): the fastest that fits, else
    the closest to fitting; fitting ones first by step time, then the rest by their overshoot."""
    key = (a.tensor * 1_000_000 + a.pipeline * 10 + a.sharding).astype(np.int64)
    chosen_key = key[best]
    chosen_step = float(a.step_seconds[best])
    picks: list[int] = []
    for k in np.unique(key):
        if k == chosen_key:
            continue
        members = np.flatnonzero(key == k)
        fit = members[a.fits[members]]
        if fit.size:
            picks.append(int(fit[np.argmin(a.step_seconds[fit])]))
        else:
            picks.append(int(members[np.argmin(a.memory.total[members])]))
    picks.sort(key=lambda i: (not a.fits[i], a.step_seconds[i] if a.fits[i] else a.memory.total[i]))
    out = []
    for i in picks[:ALTERNATIVES]:
        layout = _layout(a, i, cap)
        if layout.fits:
            slower = layout.step_seconds / chosen_step - 1.0
            why = f"slower by {slower:.1%}" if slower > 0 else "as fast, costs more or spares less"
        else:
            why = f"does not fit by {_gib(layout.total_bytes - cap)}"
        out.append(Alternative(layout, why))
    return tuple(out)


def _does_not_fit(
    closest: Layout, hw: LayoutHardware, request: LayoutRequest, a: LayoutArrays
) -> str:
    """The numbers, and what might make it fit."""
    text = (
        f"needs {_gib(closest.total_bytes)} per accelerator with tensor {closest.tensor} x "
        f"pipeline {closest.pipeline} (sharding {closest.sharding}, recompute "
        f"{closest.recompute}, micro-batch {closest.micro_batch}: weights "
        f"{_gib(closest.weights_bytes)}, gradients {_gib(closest.gradients_bytes)}, optimizer "
        f"{_gib(closest.optimizer_bytes)}, activations {_gib(closest.activations_bytes)}); "
        f"{hw.accelerator} has {_gib(hw.memory_bytes)}"
    )
    tips = []
    fixed = {
        "tensor": request.tensor,
        "pipeline": request.pipeline,
        "sharding": request.sharding,
        "activationRecompute": request.recompute,
        "microBatchSize": request.micro_batch,
    }
    if any(v is not None for v in fixed.values()):
        # What the full search would find: the smallest relaxations that fit.
        free = LayoutRequest(
            model=request.model,
            global_batch=request.global_batch,
            virtual_stages=request.virtual_stages,
            strategy=request.strategy,
        )
        grid = layout_grid(free, hw)
        if grid["tensor"].size:
            everything = evaluate_grid(free, hw, grid)
            ok = everything.fits
            if ok.any():
                same_t = ok & (everything.tensor == closest.tensor)
                if same_t.any():
                    p_min = int(everything.pipeline[same_t].min())
                    if p_min > closest.pipeline:
                        tips.append(f"pipeline >= {p_min}")
                full = ok & (everything.sharding == SHARD_FULL)
                same = full & (everything.tensor == closest.tensor)
                same &= everything.pipeline == closest.pipeline
                if same.any() and closest.sharding != "Full":
                    tips.append("sharding: Full")
                if not tips:
                    tips.append("tensor and pipeline: Auto")
    if not tips:
        state = request.model.parameters * (BYTES_WEIGHTS + BYTES_GRADIENTS + BYTES_OPTIMIZER)
        needed = math.ceil(state / max(hw.memory_bytes - FRAMEWORK_RESERVE_BYTES, 1.0))
        tips.append(
            f"more accelerators: weights, gradients and optimizer state alone are "
            f"{_gib(state)}, at least {needed} x {_gib(hw.memory_bytes)} fully sharded"
        )
    return f"{text}; try {' or '.join(tips)}"


def _no_layout_message(request: LayoutRequest, hw: LayoutHardware) -> str:
    m = request.model
    n = hw.accelerators
    parts = [f"no layout divides: {n} accelerators, {m.heads} attention heads, {m.layers} layers,"]
    parts.append(f"global batch {request.global_batch}")
    if request.tensor is not None:
        parts.append(f"with tensor {request.tensor}")
    if request.pipeline is not None:
        parts.append(f"pipeline {request.pipeline}")
    if request.micro_batch is not None:
        parts.append(f"micro-batch {request.micro_batch}")
    return (
        " ".join(parts)
        + " (heads must divide by tensor, layers by pipeline, accelerators by tensor x "
        "pipeline, the global batch by data x micro-batch)"
    )
