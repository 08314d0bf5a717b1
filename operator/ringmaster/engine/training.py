"""Data-parallel training: step time, throughput, strategy choice, reducer sizing, cost.

step = compute + the part of the gradient all-reduce that backward computation does not hide.
Gradients are reduced in buckets while backward runs (GRADIENT_BUCKET_BYTES); everything but the
last bucket can hide behind the backward pass (BACKWARD_FRACTION of compute), so

    exposed = comm - min(comm * (1 - min(1, bucket / M)), BACKWARD_FRACTION * compute).

Two layers: :func:`gpu_training` and :func:`tpu_training` evaluate numpy arrays of
configurations at once (achieved bandwidths in, arrays out); :func:`predict_training` resolves one
configuration from the catalog, calls the same functions with it and adds words and choices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives as C
from ringmaster.engine.efficiency import (
    BACKWARD_FRACTION,
    COMPUTE_EFFICIENCY,
    GRADIENT_BUCKET_BYTES,
    ICI_EFFICIENCY,
    ICI_HOP_LATENCY,
    NETWORK_HOP_LATENCY,
    NIC_EFFICIENCY,
    NVLINK_EFFICIENCY,
    NVLINK_HOP_LATENCY,
    PCIE_EFFICIENCY,
    PCIE_HOP_LATENCY,
    RING_PREFERENCE_TOLERANCE,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG, Accelerator, Catalog, Host
from ringmaster.engine.units import DTYPE_BYTES, bytes_per_second_to_gbps

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

RING = "Ring"
REDUCTION_SERVER = "ReductionServer"
AUTO = "Auto"
STRATEGIES = (AUTO, RING, REDUCTION_SERVER)
DEFAULT_REDUCER_MACHINE = "n1-highcpu-16"  # Vertex AI's documented reducer machine
# The API names the gradients' dtype, not the compute precision: training is assumed to run in
# mixed precision (fp16/bf16 tensor cores), the norm for the models this operator targets.
TRAINING_COMPUTE_PRECISION = "fp16"

# Which all-reduce algorithm a strategy ran (``StrategyArrays.algorithm``).
ALGORITHM_FLAT_RING = 0
ALGORITHM_HIERARCHICAL_RING = 1
ALGORITHM_TREE = 2
ALGORITHM_REDUCTION_SERVER = 3
ALGORITHM_TORUS = 4
ALGORITHM_NAMES = {
    ALGORITHM_FLAT_RING: "flat ring",
    ALGORITHM_HIERARCHICAL_RING: "hierarchical ring",
    ALGORITHM_TREE: "tree",
    ALGORITHM_REDUCTION_SERVER: "reduction server",
    ALGORITHM_TORUS: "ICI torus",
}

LINK_EFFICIENCY = {"nvlink": NVLINK_EFFICIENCY, "pcie": PCIE_EFFICIENCY, "ici": ICI_EFFICIENCY}
LINK_HOP_LATENCY = {"nvlink": NVLINK_HOP_LATENCY, "pcie": PCIE_HOP_LATENCY, "ici": ICI_HOP_LATENCY}


class StrategyArrays(NamedTuple):
    """One strategy evaluated over an array of configurations (all arrays broadcast together)."""

    step_seconds: F64
    communication_seconds: F64  # the whole all-reduce, hidden or not
    exposed_seconds: F64  # the part backward does not hide
    samples_per_second: F64  # NaN without a batch size
    bus_bandwidth: F64  # bytes/s, nccl-tests convention; NaN for one rank
    bottleneck: I64  # collectives.BOTTLENECK_*: compute, or the communication's when it is larger
    communication_bottleneck: I64  # what bounds the all-reduce itself
    cost_per_hour: F64  # USD, workers plus reducers
    cost_per_1000_samples: F64  # USD; NaN without a batch size
    scaling_efficiency: F64  # throughput per host against one host (same per-host shape)
    algorithm: I64  # ALGORITHM_*


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def exposed_communication(
    communication_seconds: ArrayLike, compute_seconds: ArrayLike, gradient_bytes: ArrayLike
) -> F64:
    """The communication left after hiding behind backward (all buckets but the last)."""
    comm = _f(communication_seconds)
    m = _f(gradient_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        last_bucket = np.where(m > 0, np.minimum(1.0, GRADIENT_BUCKET_BYTES / m), 1.0)
    hideable = comm * (1.0 - last_bucket)
    hidden = np.minimum(hideable, BACKWARD_FRACTION * _f(compute_seconds))
    return comm - hidden


def _finish(
    coll: C.Collective,
    *,
    ranks: F64,
    gradient_bytes: F64,
    compute: F64,
    batch: F64,
    cost_per_hour: F64,
    single_host_step: F64 | None,
    algorithm: ArrayLike,
) -> StrategyArrays:
    exposed = exposed_communication(coll.seconds, compute, gradient_bytes)
    step = compute + exposed
    with np.errstate(divide="ignore", invalid="ignore"):
        sps = np.where(step > 0, ranks * batch / step, np.nan)
        per_1000 = cost_per_hour / 3600.0 / sps * 1000.0
        scaling = single_host_step / step if single_host_step is not None else np.ones_like(step)
    bottleneck = np.where(compute >= exposed, C.BOTTLENECK_COMPUTE, coll.bottleneck)
    shape = np.broadcast_shapes(step.shape, np.shape(algorithm))
    return StrategyArrays(
        step_seconds=step,
        communication_seconds=coll.seconds,
        exposed_seconds=exposed,
        samples_per_second=sps,
        bus_bandwidth=C.bus_bandwidth(gradient_bytes, ranks, coll.seconds),
        bottleneck=bottleneck.astype(np.int64),
        communication_bottleneck=coll.bottleneck,
        cost_per_hour=np.broadcast_to(cost_per_hour, step.shape).astype(np.float64),
        cost_per_1000_samples=per_1000,
        scaling_efficiency=scaling,
        algorithm=np.broadcast_to(np.asarray(algorithm, dtype=np.int64), shape),
    )


def _best_ring(
    m: F64, n: F64, g: F64, nic: F64, intra: F64, intra_hop: F64, net_hop: F64
) -> tuple[C.Collective, I64]:
    """The fastest of NCCL's algorithms (flat ring, tree) and the hierarchical ring."""
    args = (m, n, g, nic, intra, intra_hop, net_hop)
    candidates = (C.flat_ring(*args), C.hierarchical_ring(*args), C.tree_allreduce(*args))
    times = np.stack(np.broadcast_arrays(*(c.seconds for c in candidates)))
    choice = np.argmin(times, axis=0)

    def pick(i: int) -> F64:
        chosen = np.choose(choice, np.broadcast_arrays(*(c[i] for c in candidates)))
        return np.asarray(chosen, dtype=np.float64)

    coll = C.Collective(pick(0), pick(1), pick(2), pick(3).astype(np.int64))
    return coll, choice.astype(np.int64)  # ALGORITHM_* codes 0..2 follow the candidates' order


def gpu_training(
    *,
    hosts: ArrayLike,
    per_host: ArrayLike,
    gradient_bytes: ArrayLike,
    compute_seconds: ArrayLike,
    batch_per_accelerator: ArrayLike,
    nic_bandwidth: ArrayLike,
    intra_bandwidth: ArrayLike,
    intra_hop_latency: ArrayLike,
    host_price: ArrayLike,
    reducers: ArrayLike,
    reducer_bandwidth: ArrayLike,
    reducer_price: ArrayLike,
    network_hop_latency: ArrayLike = NETWORK_HOP_LATENCY,
) -> tuple[StrategyArrays, StrategyArrays]:
    """Ring and reduction server for GPU workers, over arrays of configurations.

    Bandwidths are *achieved* bytes/s (line rate times efficiency); ``batch_per_accelerator``
    may be NaN (no throughput then). Returns (ring, reduction_server).
    """
    n = _f(hosts)
    g = _f(per_host)
    m = _f(gradient_bytes)
    compute = _f(compute_seconds)
    batch = _f(batch_per_accelerator)
    nic = _f(nic_bandwidth)
    intra = _f(intra_bandwidth)
    hop = _f(intra_hop_latency)
    net_hop = _f(network_hop_latency)
    ranks = n * g
    workers_cost = n * _f(host_price)

    # One host of the same shape: the scaling baseline (its all-reduce is intra-host only).
    single_coll, _ = _best_ring(m, np.ones_like(n), g, nic, intra, hop, net_hop)
    single_step = compute + exposed_communication(single_coll.seconds, compute, m)

    ring_coll, ring_alg = _best_ring(m, n, g, nic, intra, hop, net_hop)
    ring = _finish(
        ring_coll,
        ranks=ranks,
        gradient_bytes=m,
        compute=compute,
        batch=batch,
        cost_per_hour=workers_cost,
        single_host_step=single_step,
        algorithm=ring_alg,
    )
    k = _f(reducers)
    rs_coll = C.reduction_server(m, n, g, nic, intra, hop, net_hop, k, _f(reducer_bandwidth))
    rs = _finish(
        rs_coll,
        ranks=ranks,
        gradient_bytes=m,
        compute=compute,
        batch=batch,
        cost_per_hour=workers_cost + k * _f(reducer_price),
        single_host_step=single_step,
        algorithm=ALGORITHM_REDUCTION_SERVER,
    )
    return ring, rs


def tpu_training(
    *,
    axes: tuple[ArrayLike, ArrayLike, ArrayLike],
    wrapped: tuple[ArrayLike, ArrayLike, ArrayLike],
    gradient_bytes: ArrayLike,
    compute_seconds: ArrayLike,
    batch_per_accelerator: ArrayLike,
    link_bandwidth: ArrayLike,
    hosts: ArrayLike,
    host_price: ArrayLike,
) -> StrategyArrays:
    """A TPU slice: gradients all-reduced over the ICI torus (no reduction server there)."""
    m = _f(gradient_bytes)
    compute = _f(compute_seconds)
    chips = _f(axes[0]) * _f(axes[1]) * _f(axes[2])
    coll = C.torus_allreduce(m, axes, link_bandwidth, wrapped, ICI_HOP_LATENCY)
    return _finish(
        coll,
        ranks=chips,
        gradient_bytes=m,
        compute=compute,
        batch=_f(batch_per_accelerator),
        cost_per_hour=_f(hosts) * _f(host_price),
        single_host_step=None,  # set by predict_training, which knows the host's shape
        algorithm=ALGORITHM_TORUS,
    )


def vertex_reducer_count(
    hosts: ArrayLike, nic_bandwidth: ArrayLike, reducer_bandwidth: ArrayLike
) -> NDArray[np.int64]:
    """Vertex AI's rule: the fewest reducers whose aggregate bandwidth is at least the workers'
    aggregate (5 hosts x 100 Gbps over 32 Gbps reducers -> 16). Nominal rates, as Vertex states it.
    """
    ratio = _f(hosts) * _f(nic_bandwidth) / _f(reducer_bandwidth)
    return np.maximum(1, np.ceil(ratio - 1e-9)).astype(np.int64)


def choose_strategy(requested: str, ring_step: float, reduction_server_step: float | None) -> str:
    """The strategy the operator runs. Auto takes the reduction server only when it is more than
    RING_PREFERENCE_TOLERANCE faster: within that, the ring needs no extra machines."""
    if requested == RING or reduction_server_step is None:
        return RING
    if requested == REDUCTION_SERVER:
        return REDUCTION_SERVER
    if reduction_server_step < ring_step * (1.0 - RING_PREFERENCE_TOLERANCE):
        return REDUCTION_SERVER
    return RING


# --- the scalar path: one configuration, resolved from the catalog ------------------------------


@dataclass(frozen=True)
class TrainingInputs:
    """One TrainingJob's engine inputs, in engine units (parameters as a count)."""

    accelerator: str
    per_worker: int
    workers: int
    parameters: float
    gradient_dtype: str = "fp32"
    compute_seconds_per_step: float | None = None
    flops_per_sample: float | None = None
    batch_per_accelerator: int | None = None
    machine_type: str | None = None
    strategy: str = AUTO
    reducers: int | None = None
    reducer_machine_type: str = DEFAULT_REDUCER_MACHINE
    topology: str | None = None


@dataclass(frozen=True)
class StrategyPrediction:
    name: str
    algorithm: str
    step_seconds: float
    compute_seconds: float
    communication_seconds: float
    exposed_communication_seconds: float
    samples_per_second: float | None
    bus_bandwidth_gbps: float | None  # GB/s (bytes), as nccl-tests prints it
    bottleneck: str
    cost_per_hour_usd: float
    cost_per_1000_samples_usd: float | None
    scaling_efficiency: float
    reducers: int | None = None
    reducer_machine_type: str | None = None
    vertex_reducers: int | None = None
    cost_optimal_reducers: int | None = None


@dataclass(frozen=True)
class TrainingPrediction:
    chosen_strategy: str
    strategies: dict[str, StrategyPrediction]
    machine_type: str
    accelerator: str
    workers: int
    per_worker: int
    gradient_bytes: float
    compute_seconds: float
    compute_source: str  # "measured" (computeSecondsPerStep) or "roofline" (flopsPerSample)
    notes: tuple[str, ...] = field(default_factory=tuple)


def compute_seconds_per_step(inputs: TrainingInputs, acc: Accelerator) -> tuple[float, str]:
    """The measured step if given, else FLOPs x batch at the sustained peak of mixed-precision
    training: the chip's 16-bit tensor rate (bf16/fp16; TPUs bf16), since fp32 *gradients* are
    what AMP all-reduces, not what it computes in. Chips without fast 16-bit math fall back
    to fp32 (see Accelerator.effective_precision)."""
    if inputs.compute_seconds_per_step is not None:
        return float(inputs.compute_seconds_per_step), "measured"
    if inputs.flops_per_sample is None:
        return 0.0, "none"
    if inputs.batch_per_accelerator is None:
        raise ValueError("model.batchSizePerAccelerator is needed with model.flopsPerSample")
    precision = TRAINING_COMPUTE_PRECISION
    if inputs.gradient_dtype.lower() == "bf16" and acc.supports("bf16"):
        precision = "bf16"
    peak = acc.peak(precision) * COMPUTE_EFFICIENCY
    return inputs.flops_per_sample * inputs.batch_per_accelerator / peak, "roofline"


def parse_topology(topology: str) -> tuple[int, int, int]:
    """ "2x2x4" -> (2, 2, 4); a 2-D topology gets a trailing 1."""
    try:
        parts = [int(x) for x in topology.lower().split("x")]
    except ValueError:
        raise ValueError(f"topology {topology!r} is not of the form AxB or AxBxC") from None
    if not 1 <= len(parts) <= 3 or any(p < 1 for p in parts):
        raise ValueError(f"topology {topology!r} is not of the form AxB or AxBxC")
    parts += [1] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def _words(code: int, host: Host, inputs: TrainingInputs, reducer_gbps: float, k: int) -> str:
    acc = host.accelerator
    if code == C.BOTTLENECK_COMPUTE:
        return "compute"
    if code == C.BOTTLENECK_NIC:
        return f"inter-host NIC, {bytes_per_second_to_gbps(host.nic_bandwidth):g} Gbps"
    if code == C.BOTTLENECK_REDUCERS:
        return f"reducers' aggregate bandwidth, {k} x {reducer_gbps:g} Gbps"
    if code == C.BOTTLENECK_INTRA:
        link = "NVLink" if acc.intra_link == "nvlink" else "PCIe"
        return f"intra-host {link}, {acc.intra_bandwidth / 1e9:g} GB/s"
    if code == C.BOTTLENECK_ICI:
        return f"ICI torus {inputs.topology or ''}, {acc.ici_link_bandwidth / 1e9:g} GB/s per link"
    return "all-reduce latency (many small steps)"


# A secondary term is named beside the dominant one when it is at least this share of the step,
# so "compute" never hides a NIC that still costs a quarter of the step.
SECONDARY_SHARE = 0.10


def _describe(
    arrays: StrategyArrays, i: int, host: Host, inputs: TrainingInputs, gbps: float, k: int
) -> str:
    """The bottleneck in words: the dominant term, then the other if it matters."""
    step = _at(arrays.step_seconds, i)
    exposed = _at(arrays.exposed_seconds, i)
    compute = step - exposed
    comm_words = _words(int(_at(arrays.communication_bottleneck, i)), host, inputs, gbps, k)
    if exposed > compute:
        main, other, share = comm_words, "compute", compute / step
    else:
        main, other, share = "compute", comm_words, exposed / step
    if step > 0 and share >= SECONDARY_SHARE:
        return f"{main}; then {other} ({share:.0%} of the step)"
    return main


def _at(a: NDArray[np.generic], i: int) -> float:
    """Element i of a result that may not depend on the swept axis (then it is a scalar)."""
    flat = np.ravel(a)
    return float(flat[i] if flat.size > 1 else flat[0])


def _prediction(
    name: str,
    arrays: StrategyArrays,
    i: int,
    compute: float,
    words: str,
    **extra: int | str | None,
) -> StrategyPrediction:
    def val(a: F64) -> float:
        return _at(a, i)

    def opt(a: F64) -> float | None:
        v = val(a)
        return None if math.isnan(v) else v

    busbw = opt(arrays.bus_bandwidth)
    alg = int(_at(arrays.algorithm, i))
    return StrategyPrediction(
        name=name,
        algorithm=ALGORITHM_NAMES[alg],
        step_seconds=val(arrays.step_seconds),
        compute_seconds=compute,
        communication_seconds=val(arrays.communication_seconds),
        exposed_communication_seconds=val(arrays.exposed_seconds),
        samples_per_second=opt(arrays.samples_per_second),
        bus_bandwidth_gbps=None if busbw is None else busbw / 1e9,
        bottleneck=words,
        cost_per_hour_usd=val(arrays.cost_per_hour),
        cost_per_1000_samples_usd=opt(arrays.cost_per_1000_samples),
        scaling_efficiency=val(arrays.scaling_efficiency),
        **extra,  # type: ignore[arg-type]
    )


def predict_training(
    inputs: TrainingInputs, catalog: Catalog = DEFAULT_CATALOG
) -> TrainingPrediction:
    """What the operator decides for one TrainingJob: both strategies, the choice, the reducers."""
    if inputs.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {inputs.strategy!r}; known: {', '.join(STRATEGIES)}")
    if inputs.workers < 1 or inputs.per_worker < 1:
        raise ValueError("workers and accelerators per worker must be at least 1")
    host = catalog.host(inputs.accelerator, inputs.per_worker, inputs.machine_type)
    acc = host.accelerator
    try:
        m = float(inputs.parameters) * DTYPE_BYTES[inputs.gradient_dtype.lower()]
    except KeyError:
        known = ", ".join(DTYPE_BYTES)
        dtype = inputs.gradient_dtype
        raise ValueError(f"unknown gradient dtype {dtype!r}; known: {known}") from None
    compute, source = compute_seconds_per_step(inputs, acc)
    batch = np.nan if inputs.batch_per_accelerator is None else float(inputs.batch_per_accelerator)
    notes: list[str] = []
    if source == "none":
        notes.append("no computeSecondsPerStep or flopsPerSample: communication only")

    if acc.kind == "tpu":
        return _predict_tpu(inputs, host, m, compute, source, batch, notes)

    if inputs.strategy == REDUCTION_SERVER and inputs.workers == 1:
        notes.append("one worker: a reduction server only adds a network round trip")
    link_eff = LINK_EFFICIENCY[acc.intra_link]
    nic = host.nic_bandwidth * NIC_EFFICIENCY
    intra = acc.intra_bandwidth * link_eff
    hop = LINK_HOP_LATENCY[acc.intra_link]
    reducer = catalog.machine(inputs.reducer_machine_type)
    rule = int(vertex_reducer_count(inputs.workers, host.nic_bandwidth, reducer.nic_bandwidth))
    # Candidate reducer counts 1..max(rule, given): beyond the rule more reducers add cost only.
    top = max(rule, inputs.reducers or 0)
    k = np.arange(1, top + 1, dtype=np.float64)
    ring, rs = gpu_training(
        hosts=inputs.workers,
        per_host=inputs.per_worker,
        gradient_bytes=m,
        compute_seconds=compute,
        batch_per_accelerator=batch,
        nic_bandwidth=nic,
        intra_bandwidth=intra,
        intra_hop_latency=hop,
        host_price=host.price_per_hour,
        reducers=k,
        reducer_bandwidth=reducer.nic_bandwidth * NIC_EFFICIENCY,
        reducer_price=reducer.price_per_hour,
    )
    # Cost per step is proportional to cost per sample and defined without a batch size.
    cost_per_step = rs.cost_per_hour * rs.step_seconds
    optimal = int(np.argmin(cost_per_step)) + 1
    chosen_k = inputs.reducers if inputs.reducers else rule
    i = chosen_k - 1
    reducer_gbps = bytes_per_second_to_gbps(reducer.nic_bandwidth)
    ring_pred = _prediction(RING, ring, 0, compute, _describe(ring, 0, host, inputs, 0, 0))
    rs_pred = _prediction(
        REDUCTION_SERVER,
        rs,
        i,
        compute,
        _describe(rs, i, host, inputs, reducer_gbps, chosen_k),
        reducers=chosen_k,
        reducer_machine_type=reducer.name,
        vertex_reducers=rule,
        cost_optimal_reducers=optimal,
    )
    chosen = choose_strategy(inputs.strategy, ring_pred.step_seconds, rs_pred.step_seconds)
    return TrainingPrediction(
        chosen_strategy=chosen,
        strategies={RING: ring_pred, REDUCTION_SERVER: rs_pred},
        machine_type=host.machine.name,
        accelerator=acc.name,
        workers=inputs.workers,
        per_worker=inputs.per_worker,
        gradient_bytes=m,
        compute_seconds=compute,
        compute_source=source,
        notes=tuple(notes),
    )


def slice_shape(inputs: TrainingInputs) -> tuple[int, int, int]:
    """The slice's axes: from the topology, else a line of all chips (the conservative shape)."""
    if inputs.topology:
        axes = parse_topology(inputs.topology)
        chips = axes[0] * axes[1] * axes[2]
        if chips != inputs.workers * inputs.per_worker:
            raise ValueError(
                f"topology {inputs.topology} has {chips} chips but workers x perWorker = "
                f"{inputs.workers} x {inputs.per_worker} = {inputs.workers * inputs.per_worker}"
            )
        return axes
    return inputs.workers * inputs.per_worker, 1, 1


def _wrapped(acc: Accelerator, axes: tuple[int, int, int]) -> tuple[bool, bool, bool]:
    chips = axes[0] * axes[1] * axes[2]
    big = acc.ici_wrap_chips > 0 and chips >= acc.ici_wrap_chips
    w = [big and a >= acc.ici_wrap_axis and a > 2 for a in axes]
    return w[0], w[1], w[2]


def _predict_tpu(
    inputs: TrainingInputs,
    host: Host,
    m: float,
    compute: float,
    source: str,
    batch: float,
    notes: list[str],
) -> TrainingPrediction:
    acc = host.accelerator
    if inputs.strategy == REDUCTION_SERVER:
        raise ValueError(
            "communication.strategy: a TPU slice all-reduces over ICI; no reduction server"
        )
    axes = slice_shape(inputs)
    link = acc.ici_link_bandwidth * ICI_EFFICIENCY
    ring = tpu_training(
        axes=axes,
        wrapped=_wrapped(acc, axes),
        gradient_bytes=m,
        compute_seconds=compute,
        batch_per_accelerator=batch,
        link_bandwidth=link,
        hosts=inputs.workers,
        host_price=host.price_per_hour,
    )
    # Scaling baseline: one host's chips as a line (its own small slice).
    one = tpu_training(
        axes=(inputs.per_worker, 1, 1),
        wrapped=(False, False, False),
        gradient_bytes=m,
        compute_seconds=compute,
        batch_per_accelerator=batch,
        link_bandwidth=link,
        hosts=1,
        host_price=host.price_per_hour,
    )
    ring = ring._replace(scaling_efficiency=one.step_seconds / ring.step_seconds)
    inputs_topology = inputs if inputs.topology else _with_topology(inputs, axes)
    words = _describe(ring, 0, host, inputs_topology, 0, 0)
    pred = _prediction(RING, ring, 0, compute, words)
    return TrainingPrediction(
        chosen_strategy=RING,
        strategies={RING: pred},
        machine_type=host.machine.name,
        accelerator=acc.name,
        workers=inputs.workers,
        per_worker=inputs.per_worker,
        gradient_bytes=m,
        compute_seconds=compute,
        compute_source=source,
        notes=tuple(notes),
    )


def _with_topology(inputs: TrainingInputs, axes: tuple[int, int, int]) -> TrainingInputs:
    from dataclasses import replace

    shape = "x".join(str(a) for a in axes if a > 1) or "1"
    return replace(inputs, topology=shape)
