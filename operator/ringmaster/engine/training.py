"""Data-parallel training: step time, throughput, strategy choice, reducer sizing, cost.

step = compute + the gradient communication that the backward pass does not hide, modelled as a
timeline (:func:`overlap_timeline`): gradients become ready bucket by bucket through backward
(PyTorch DDP: the first bucket 1 MiB, then 25 MiB), each bucket's all-reduce starts when it is
ready and queues behind the previous one, and what remains after backward ends is exposed.
Each bucket's all-reduce is what NCCL runs for its size (:func:`collectives.nccl_collective`), so
small buckets pay NCCL's latencies, and the last bucket can never hide.

Two layers: :func:`gpu_training` and :func:`tpu_training` evaluate numpy arrays of
configurations at once (achieved bandwidths in, arrays out); :func:`predict_training` resolves one
configuration from the catalog, calls the same functions with it and adds words and choices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives as C
from ringmaster.engine import nccl_settings
from ringmaster.engine.arrays import as_f64 as _f
from ringmaster.engine.arrays import blocked, joint_shape, where
from ringmaster.engine.efficiency import (
    BACKWARD_FRACTION,
    COMPUTE_EFFICIENCY,
    COMPUTE_JITTER_CV,
    FIRST_BUCKET_BYTES,
    GRADIENT_BUCKET_BYTES,
    ICI_EFFICIENCY,
    ICI_HOP_LATENCY,
    NIC_EFFICIENCY,
    OVERLAP_INTERFERENCE,
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
# spec.model.computePrecision; omitted: the fastest 16-bit format the chip has (bf16, else fp16,
# else fp32), the mixed-precision norm for the models this operator targets.
COMPUTE_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


class StrategyArrays(NamedTuple):
    """One strategy evaluated over an array of configurations. The arrays broadcast together;
    one that does not vary over the configurations may be 0-d."""

    step_seconds: F64
    communication_seconds: F64  # all buckets' collectives, hidden or not
    exposed_seconds: F64  # the part backward does not hide
    samples_per_second: F64  # NaN without a batch size
    bus_bandwidth: F64  # bytes/s, nccl-tests convention; NaN for one rank
    bottleneck: I64  # collectives.BOTTLENECK_*: compute, or the communication's when it is larger
    communication_bottleneck: I64  # what bounds the collectives themselves
    cost_per_hour: F64  # USD, workers plus reducers
    cost_per_1000_samples: F64  # USD; NaN without a batch size
    scaling_efficiency: F64  # throughput per accelerator against one accelerator alone
    algorithm: I64  # collectives.ALG_* of the largest bucket
    protocol: I64  # collectives.PROTO_* of the largest bucket


def exposed_communication(
    communication_seconds: ArrayLike, compute_seconds: ArrayLike, gradient_bytes: ArrayLike
) -> F64:
    """The older scalar overlap, kept for callers that have one collective time and no
    per-bucket model (engine.llm_training's data-parallel part): all buckets but the last hide
    behind backward. The data-parallel model itself uses :func:`overlap_timeline`; switching is
    passing the collective as a function of the bucket size."""
    comm = _f(communication_seconds)
    m = _f(gradient_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        last_bucket = where(m > 0, np.minimum(1.0, GRADIENT_BUCKET_BYTES / m), 1.0)
    hideable = comm * (1.0 - last_bucket)
    hidden = np.minimum(hideable, BACKWARD_FRACTION * _f(compute_seconds))
    return comm - hidden


class Overlap(NamedTuple):
    exposed_seconds: F64
    communication_seconds: F64
    largest_bucket: C.CollectiveTime  # the collective of the largest bucket (25 MiB or all)


def overlap_timeline(
    collective: Callable[[F64], C.CollectiveTime],
    gradient_bytes: ArrayLike,
    backward_seconds: ArrayLike,
    bucket_bytes: float = GRADIENT_BUCKET_BYTES,
    first_bucket_bytes: float = FIRST_BUCKET_BYTES,
    shape: tuple[int, ...] = (),
) -> Overlap:
    """Exposed communication of DDP's bucketed all-reduce, in closed form.

    Buckets: the first of ``first_bucket_bytes``, then full buckets, then a partial last one;
    gradients are produced at a steady rate over ``backward_seconds``, so bucket i is ready at
    T x (bytes up to i) / M. Each collective starts when its bucket is ready and the previous one
    has finished, so the last finishes at max_i(ready_i + the collectives from i on). Within the
    equal middle buckets that maximum is at one end, so four candidates suffice. ``collective``
    maps an array of bucket sizes to their times; it is called once on the three sizes stacked
    (axis 0) over ``shape``, the broadcast shape of the configurations it closes over."""
    m = _f(gradient_bytes)
    t_bwd = _f(backward_seconds)
    shape = joint_shape(shape, m.shape, t_bwd.shape)
    first = np.minimum(first_bucket_bytes, m)
    rest = m - first
    full = np.floor(rest / bucket_bytes)
    last = rest - full * bucket_bytes
    sizes = np.empty((3, *shape))
    sizes[0] = first
    sizes[1] = bucket_bytes
    sizes[2] = np.maximum(last, 1.0)
    times = collective(sizes)
    t = (
        times.seconds
        if times.seconds.shape == sizes.shape
        else np.broadcast_to(times.seconds, sizes.shape)
    )
    c_first = t[0]
    c_full = where(full > 0, t[1], 0.0)
    c_last = where(last > 0, t[2], 0.0)
    total = c_first + full * c_full + c_last
    # Backward seconds per gradient byte; below one byte there is nothing to time.
    rate = t_bwd / np.maximum(m, 1.0)
    finish = rate * first + total
    finish = np.maximum(
        finish, where(full > 0, rate * (first + bucket_bytes) + full * c_full + c_last, 0.0)
    )
    finish = np.maximum(
        finish, where(full > 0, rate * (first + full * bucket_bytes) + c_full + c_last, 0.0)
    )
    finish = np.maximum(finish, t_bwd + c_last)
    exposed = np.maximum(finish - t_bwd, 0.0)
    # The largest bucket's collective names the algorithm: a full bucket if any, else the first.
    use_full = full > 0
    use_last = ~use_full & (last > first)

    # With one gradient size (a single plan) the largest bucket is the same row everywhere.
    row = None if use_full.ndim else (1 if use_full else 2 if use_last else 0)

    def at(a: NDArray[np.generic]) -> NDArray[np.generic]:
        if a.ndim == 0 or not any(a.strides):  # the same value everywhere (a broadcast scalar)
            return np.asarray(a.flat[0])
        if row is not None:
            if a.ndim < sizes.ndim:  # does not vary with the bucket size
                return a
            return a[row if a.shape[0] > 1 else 0]  # type: ignore[no-any-return]
        arr = a if a.shape == sizes.shape else np.broadcast_to(a, sizes.shape)
        out: NDArray[np.generic] = where(use_full, arr[1], where(use_last, arr[2], arr[0]))
        return out

    largest = C.CollectiveTime(
        seconds=np.asarray(at(times.seconds), dtype=np.float64),
        algorithm=np.asarray(at(times.algorithm), dtype=np.int64),
        protocol=np.asarray(at(times.protocol), dtype=np.int64),
        bus_bandwidth=np.asarray(np.nan),
        bottleneck=np.asarray(at(times.bottleneck), dtype=np.int64),
    )
    return Overlap(exposed, total, largest)


def _slowest_of(ranks: F64) -> F64:
    """The expected slowest of N ranks' compute, as a multiple of one rank's:
    1 + cv x sqrt(2 ln N) (COMPUTE_JITTER_CV)."""
    return 1.0 + COMPUTE_JITTER_CV * np.sqrt(2.0 * np.log(np.maximum(ranks, 1.0)))


def _finish(
    overlap: Overlap,
    *,
    kind_ranks: F64,
    gradient_bytes: F64,
    compute: F64,
    batch: F64,
    cost_per_hour: F64,
    slowest: F64 | None = None,
) -> StrategyArrays:
    exposed = overlap.exposed_seconds
    hidden = overlap.communication_seconds - exposed
    if slowest is None:
        slowest = _slowest_of(kind_ranks)
    # The slowest of N ranks sets the pace, and hidden collectives still take SMs from backward.
    step = compute * slowest + exposed + OVERLAP_INTERFERENCE * np.minimum(hidden, compute)
    with np.errstate(divide="ignore", invalid="ignore"):
        sps = where(step > 0, kind_ranks * batch / step, np.nan)
        per_1000 = cost_per_hour / 3600.0 / sps * 1000.0
        scaling = where(step > 0, compute / step, 1.0)
        busbw = C.bus_bandwidth_of(
            C.ALL_REDUCE, gradient_bytes, kind_ranks, overlap.communication_seconds
        )
    largest = overlap.largest_bucket
    bottleneck = where(step - exposed >= exposed, C.BOTTLENECK_COMPUTE, largest.bottleneck)
    return StrategyArrays(
        step_seconds=step,
        communication_seconds=overlap.communication_seconds,
        exposed_seconds=exposed,
        samples_per_second=sps,
        bus_bandwidth=busbw,
        bottleneck=np.asarray(bottleneck, dtype=np.int64),
        communication_bottleneck=largest.bottleneck,
        cost_per_hour=np.asarray(cost_per_hour, dtype=np.float64),
        cost_per_1000_samples=per_1000,
        scaling_efficiency=scaling,
        algorithm=largest.algorithm,
        protocol=largest.protocol,
    )


@blocked
def gpu_training(
    *,
    hosts: ArrayLike,
    per_host: ArrayLike,
    gradient_bytes: ArrayLike,
    compute_seconds: ArrayLike,
    batch_per_accelerator: ArrayLike,
    nic_bandwidth: ArrayLike,
    intra_bandwidth: ArrayLike,
    host_price: ArrayLike,
    reducers: ArrayLike,
    reducer_bandwidth: ArrayLike,
    reducer_price: ArrayLike,
    intra_link: str = "nvlink",
    nvls_bandwidth: ArrayLike = 0.0,
    arch: str = "ampere",
    algorithms: set[int] | None = None,
    protocols: set[int] | None = None,
) -> tuple[StrategyArrays, StrategyArrays]:
    """Ring (what NCCL runs) and reduction server for GPU workers, over arrays of configurations.

    Bandwidths are *achieved* bytes/s: ``nic_bandwidth`` the host's NICs together,
    ``intra_bandwidth`` per GPU, ``reducer_bandwidth`` what one reducer takes in
    (:func:`collectives.reducer_bandwidth`, shared-pool share included). ``batch_per_accelerator``
    may be NaN (no throughput then). Returns (ring, reduction_server). Large sweeps are evaluated
    in cache-sized blocks (:func:`engine.arrays.blocked`)."""
    n = _f(hosts)
    g = _f(per_host)
    m = _f(gradient_bytes)
    compute = _f(compute_seconds)
    batch = _f(batch_per_accelerator)
    ranks = n * g
    slowest = _slowest_of(ranks)  # shared by both strategies
    backward = BACKWARD_FRACTION * compute
    intra = _f(intra_bandwidth)
    net = _f(nic_bandwidth)
    nvls = _f(nvls_bandwidth)
    fabric = C.GpuFabric(
        intra_bandwidth=intra,
        net_bandwidth=net,
        intra_link=intra_link,
        nvls_bandwidth=nvls,
        arch=arch,
    )

    def ring_of(sizes: F64) -> C.CollectiveTime:
        return C.nccl_collective(
            C.ALL_REDUCE,
            sizes,
            n,
            g,
            fabric,
            algorithms=algorithms,
            protocols=protocols,
            with_busbw=False,
        )

    host_cost = n * _f(host_price)
    # The ring does not depend on the reducers: its shape leaves their axes out.
    ring_shape = joint_shape(
        n.shape,
        g.shape,
        m.shape,
        compute.shape,
        batch.shape,
        intra.shape,
        net.shape,
        nvls.shape,
        host_cost.shape,
    )
    ring = _finish(
        overlap_timeline(ring_of, m, backward, shape=ring_shape),
        kind_ranks=ranks,
        slowest=slowest,
        gradient_bytes=m,
        compute=compute,
        batch=batch,
        cost_per_hour=host_cost,
    )
    k = _f(reducers)
    rate = _f(reducer_bandwidth)
    rs_cost = host_cost + k * _f(reducer_price)

    def rs_of(sizes: F64) -> C.CollectiveTime:
        return C.reduction_server_collective(sizes, n, g, fabric, k, rate, with_busbw=False)

    rs = _finish(
        overlap_timeline(
            rs_of, m, backward, shape=joint_shape(ring_shape, rs_cost.shape, rate.shape)
        ),
        kind_ranks=ranks,
        slowest=slowest,
        gradient_bytes=m,
        compute=compute,
        batch=batch,
        cost_per_hour=rs_cost,
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
    slices: ArrayLike = 1,
    chips_per_host: ArrayLike = 4,
    dcn_bandwidth: ArrayLike = 1.0,
) -> StrategyArrays:
    """A TPU slice: gradients all-reduced over the ICI torus, all axes at once (no reduction
    server there), overlapped with backward bucket by bucket as on GPUs. Several slices
    (multislice): each bucket is reduce-scattered inside the slice, all-reduced across slices
    over the hosts' data-center NICs and all-gathered (:func:`C.multislice_allreduce`), still
    behind backward, as XLA overlaps MaxText's cross-slice gradient reduction."""
    m = _f(gradient_bytes)
    compute = _f(compute_seconds)
    chips = _f(axes[0]) * _f(axes[1]) * _f(axes[2])

    def ici_of(sizes: F64) -> C.CollectiveTime:
        inside = C.ici_collective(
            C.ALL_REDUCE, sizes, axes, wrapped, link_bandwidth, ICI_HOP_LATENCY
        )
        return C.multislice_allreduce(sizes, slices, inside, chips, chips_per_host, dcn_bandwidth)

    return _finish(
        overlap_timeline(ici_of, m, BACKWARD_FRACTION * compute, shape=np.shape(chips)),
        kind_ranks=chips * _f(slices),
        gradient_bytes=m,
        compute=compute,
        batch=_f(batch_per_accelerator),
        cost_per_hour=_f(hosts) * _f(host_price),
    )


def vertex_reducer_count(
    hosts: ArrayLike, nic_bandwidth: ArrayLike, reducer_bandwidth: ArrayLike
) -> NDArray[np.int64]:
    """Vertex AI's rule: the fewest reducers whose aggregate bandwidth is at least the workers'
    aggregate (5 hosts x 100 Gbps over 32 Gbps reducers -> 16). Nominal rates, as Vertex states it;
    a shared pool's reducers count with the share of their bandwidth the job gets.
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
    # None: bf16 where the chip has it, else fp16, else fp32 (default_compute_precision).
    compute_precision: str | None = None
    # The part of the reducers' bandwidth this job gets: 1 for dedicated reducers, 1 / (jobs bound
    # to a shared ReductionServerPool that run at once) for a pool. Planner and controller pass it.
    reducer_share: float = 1.0
    # The workers' environment as (name, value) pairs: NCCL_ALGO / NCCL_PROTO restrict NCCL.
    nccl_env: tuple[tuple[str, str], ...] = ()
    # The workers' XLA_* variables (engine.jax_runtime: JAX's memory pool, XLA's remat pass).
    xla_env: tuple[tuple[str, str], ...] = ()
    # TPU multislice: slices of `topology`, workers / slices hosts each, joined over DCN.
    slices: int = 1


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
    protocol: str | None = None  # NCCL's protocol for the largest bucket (LL, LL128, Simple)
    reducer_share: float | None = None


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
    compute_precision: str | None = None  # the precision the roofline used


def default_compute_precision(acc: Accelerator) -> str:
    """bf16 where the chip has it, else fp16, else fp32: mixed precision as frameworks run it."""
    for precision in ("bf16", "fp16"):
        if acc.supports(precision):
            return precision
    return "fp32"


def resolve_compute_precision(acc: Accelerator, requested: str | None) -> str:
    """The precision a training step computes in on ``acc``: ``requested``
    (``spec.model.computePrecision``) or :func:`default_compute_precision`. A precision the chip
    lacks is an error, not a silent fallback: fp8 on an A100 or tf32 on a V100 would be a
    different job."""
    precision = (requested or default_compute_precision(acc)).lower()
    if precision not in COMPUTE_PRECISIONS:
        known = ", ".join(COMPUTE_PRECISIONS)
        raise ValueError(f"model.computePrecision: unknown {precision!r}; known: {known}")
    if not acc.supports(precision):
        if acc.kind == "tpu" and precision == "fp32":
            return "bf16"  # XLA runs fp32 matmuls through the bf16 MXU by default
        has = ", ".join(p for p in COMPUTE_PRECISIONS if acc.supports(p))
        raise ValueError(
            f"model.computePrecision: {acc.name} has no {precision} units (has: {has})"
        )
    return precision


def compute_seconds_per_step(
    inputs: TrainingInputs, acc: Accelerator
) -> tuple[float, str, str | None]:
    """The measured step if given, else FLOPs x batch at the sustained peak of the compute
    precision (``computePrecision``, default :func:`default_compute_precision`). Returns
    (seconds, source, precision). A precision the chip lacks is an error, not a silent fallback:
    fp8 on an A100 or tf32 on a V100 would be a different job."""
    if inputs.compute_seconds_per_step is not None:
        return float(inputs.compute_seconds_per_step), "measured", None
    if inputs.flops_per_sample is None:
        return 0.0, "none", None
    if inputs.batch_per_accelerator is None:
        raise ValueError("model.batchSizePerAccelerator is needed with model.flopsPerSample")
    precision = resolve_compute_precision(acc, inputs.compute_precision)
    peak = acc.peak(precision) * COMPUTE_EFFICIENCY
    return inputs.flops_per_sample * inputs.batch_per_accelerator / peak, "roofline", precision


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
        machine = host.machine
        nics = (
            f"{machine.nics} x {machine.nic_gbps:g}"
            if machine.nics > 1
            else f"{machine.nic_gbps:g}"
        )
        return f"inter-host NIC, {nics} Gbps {machine.transport.upper()}"
    if code == C.BOTTLENECK_REDUCERS:
        return f"reducers' aggregate bandwidth, {k} x {reducer_gbps:g} Gbps"
    if code == C.BOTTLENECK_INTRA:
        link = {"nvlink": "NVLink", "xgmi": "xGMI (Infinity Fabric)"}.get(acc.intra_link, "PCIe")
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
    return float(a.item(i) if a.size > 1 else a.item())


def _prediction(
    name: str,
    arrays: StrategyArrays,
    i: int,
    compute: float,
    words: str,
    **extra: int | str | float | None,
) -> StrategyPrediction:
    def val(a: F64) -> float:
        return _at(a, i)

    def opt(a: F64) -> float | None:
        v = val(a)
        return None if math.isnan(v) else v

    busbw = opt(arrays.bus_bandwidth)
    alg = int(_at(arrays.algorithm, i))
    proto = int(_at(arrays.protocol, i))
    return StrategyPrediction(
        name=name,
        algorithm=C.ALGORITHM_NAMES.get(alg, "none"),
        protocol=C.PROTOCOL_NAMES[proto] if proto != C.PROTO_NONE else None,
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
    compute, source, precision = compute_seconds_per_step(inputs, acc)
    batch = np.nan if inputs.batch_per_accelerator is None else float(inputs.batch_per_accelerator)
    notes: list[str] = []
    if source == "none":
        notes.append("no computeSecondsPerStep or flopsPerSample: communication only")

    if acc.kind == "tpu":
        return _predict_tpu(inputs, host, m, compute, source, batch, notes, precision)

    if inputs.strategy == REDUCTION_SERVER and inputs.workers == 1:
        notes.append("one worker: a reduction server only adds a network round trip")
    if not 0.0 < inputs.reducer_share <= 1.0:
        raise ValueError("reducer share must be in (0, 1]")
    env = dict(inputs.nccl_env)
    algorithms, protocols = C.parse_nccl_env(env)
    fabric = C.gpu_fabric(acc, host.machine, inputs.per_worker)
    if host.machine.transport == "tcp" and inputs.per_worker > 1:
        notes.append(
            f"{inputs.per_worker} GPUs share {host.machine.name}'s TCP NIC (no GPUDirect): "
            f"NCCL's sockets reach about {float(C.network_efficiency('tcp', 8)):.0%} of its "
            "line rate"
        )
    notes += nccl_settings.classify(env).notes()
    # An NVLink domain of several hosts (GB200 NVL72): its hosts run as one NCCL node.
    group = 1
    if host.machine.nvlink_domain > inputs.per_worker:
        group = int(C.hosts_per_domain(host.machine, inputs.workers))
        if group > 1:
            notes.append(
                f"{group} hosts share one NVLink domain ({host.machine.nvlink_domain} GPUs): "
                "NVLink between them, their NICs together to other domains"
            )
    reducer = catalog.machine(inputs.reducer_machine_type)
    share = inputs.reducer_share
    rule = int(
        vertex_reducer_count(inputs.workers, host.nic_bandwidth, reducer.nic_bandwidth * share)
    )
    # Candidate reducer counts 1..max(rule, given): beyond the rule more reducers add cost only.
    top = max(rule, inputs.reducers or 0)
    k = np.arange(1, top + 1, dtype=np.float64)
    rate = C.reducer_bandwidth(
        reducer.nic_bandwidth * NIC_EFFICIENCY, reducer.vcpus, inputs.gradient_dtype.lower(), share
    )
    ring, rs = gpu_training(
        hosts=inputs.workers // group,
        per_host=inputs.per_worker * group,
        gradient_bytes=m,
        compute_seconds=compute,
        batch_per_accelerator=batch,
        nic_bandwidth=_f(fabric.net_bandwidth) * group,
        intra_bandwidth=fabric.intra_bandwidth,
        host_price=host.price_per_hour * group,
        reducers=k,
        reducer_bandwidth=rate,
        # A job pays for the part of a shared pool it uses: the jobs that share it pay the rest.
        reducer_price=reducer.price_per_hour * share,
        intra_link=fabric.intra_link,
        nvls_bandwidth=fabric.nvls_bandwidth,
        arch=fabric.arch,
        algorithms=algorithms,
        protocols=protocols,
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
        reducer_share=share,
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
        compute_precision=precision,
    )


def slice_shape(inputs: TrainingInputs) -> tuple[int, int, int]:
    """The slice's axes: from the topology, else a line of all chips (the conservative shape)."""
    slices = max(inputs.slices, 1)
    if inputs.topology:
        axes = parse_topology(inputs.topology)
        chips = axes[0] * axes[1] * axes[2]
        if chips * slices != inputs.workers * inputs.per_worker:
            of = f" (x {slices} slices = {chips * slices})" if slices > 1 else ""
            raise ValueError(
                f"topology {inputs.topology} has {chips} chips{of} but workers x perWorker = "
                f"{inputs.workers} x {inputs.per_worker} = {inputs.workers * inputs.per_worker}"
            )
        return axes
    return inputs.workers * inputs.per_worker // slices, 1, 1


def dcn_bandwidth(host: Host) -> float:
    """A TPU host's achieved data-center-network bandwidth, bytes/s: its NIC (the catalog's
    machine entry, with its source) at the network's achieved fraction. What a multislice job's
    cross-slice traffic gets per host."""
    return float(host.nic_bandwidth * C.network_efficiency(host.machine.transport, 1))


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
    precision: str | None,
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
        slices=max(inputs.slices, 1),
        chips_per_host=inputs.per_worker,
        dcn_bandwidth=dcn_bandwidth(host),
    )
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
        compute_precision=precision,
    )


def _with_topology(inputs: TrainingInputs, axes: tuple[int, int, int]) -> TrainingInputs:
    from dataclasses import replace

    shape = "x".join(str(a) for a in axes if a > 1) or "1"
    return replace(inputs, topology=shape)
