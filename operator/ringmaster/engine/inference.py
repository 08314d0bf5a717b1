"""Model serving: roofline latency of a batch, queueing under load, batch and replica sizing.

Latency of one batch of b requests (roofline, DESIGN.md):

    t(b) = O + max(b * c, M),  c = FLOPs / (peak_p * COMPUTE_EFFICIENCY),
                               M = weight_bytes_p / (HBM * MEMORY_EFFICIENCY)

where p is the precision (weights are 4, 2 or 1 bytes; the peak is the chip's rate at p) and O
the per-batch overhead. A replica delivers at most B / t(B) requests per second, B the largest
batch it forms (``maxBatchSize``).

**Greedy dynamic batching** (what Triton, TorchServe and TF Serving do without a timeout): when
the model is free it takes every waiting request, up to B, as one batch. Poisson arrivals at
lambda per second (many independent clients). The model, checked against a seeded discrete-event
simulation of exactly this batcher within 20% across batch limits and loads
(tests/engine/test_dynamic_batching.py):

- the typical batch is the fixed point k = lambda t(k), in [1, B]: the requests that arrive
  while one batch runs form the next; on each roofline branch t is linear in k, so
  k = max(lambda (O + M), lambda O / (1 - lambda c)) in closed form;
- batch sizes fluctuate: m = lambda t(k) arrivals per batch are Poisson, and a compute-bound
  batch that runs longer collects more arrivals (an AR(1) chain of slope r = lambda dt/dk), so
  the p99 batch is k99 = m + z sqrt(m / (1 - r^2)) (normal tail), in [1, B];
- a request waits for the batch in progress (busy a fraction u = lambda t(k) / k of the time,
  the wait uniform over it: p99 wait t(k99)(1 - 0.01/u)+) and then runs in its own batch t(k99);
- near capacity the queue outgrows one batch: the M/D/1 tail of the full-batch server (service
  t(B)/B per request, Kingman's exponential tail as in :func:`tail_wait`) beyond one batch.

    p99(lambda) = t(k99) (1 - 0.01/u)+ + t(k99) + (W99_MD1(t(B)/B, lambda t(B)/B) - t(B))+

A replica is sized for the highest lambda with p99 <= target and lambda <= max_utilisation x
B / t(B): the endpoint's headroom (``spec.slo.maxUtilizationPercent``, docs/engine.md), which
covers the engine's own throughput error, not queueing (the p99 model does that).

:func:`p99_latency` and :func:`max_rate_within` are the earlier fixed-batch M/D/1 model (every
batch of size b, service t(b)/b per request): conservative by 1.3-6x against the simulation,
kept for the vectorised benchmark and for comparison in the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.arrays import as_f64 as _f
from ringmaster.engine.arrays import joint_shape, maximum, minimum, where
from ringmaster.engine.efficiency import (
    COMPUTE_EFFICIENCY,
    INFERENCE_OVERHEAD_SECONDS,
    LATENCY_PERCENTILE,
    MAX_SERVING_UTILISATION,
    MEMORY_EFFICIENCY,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG, Catalog
from ringmaster.engine.units import DTYPE_BYTES

F64 = NDArray[np.float64]

PRECISIONS = ("FP32", "FP16", "INT8")
# ln(1 / (1 - percentile)): the tail factor of the exponential waiting-time law.
_TAIL = math.log(1.0 / (1.0 - LATENCY_PERCENTILE))
_BISECTION_STEPS = 40  # the utilisation to 1e-12: far below any figure we print
_TINY = 1e-300  # a floor for denominators whose result is discarded where it would be 0

BOTTLENECK_COMPUTE = 0
BOTTLENECK_MEMORY = 1
BOTTLENECK_OVERHEAD = 2


class BatchLatency(NamedTuple):
    seconds: F64
    compute_seconds: F64
    memory_seconds: F64
    bottleneck: NDArray[np.int64]


def batch_latency(
    batch: ArrayLike,
    flops_per_request: ArrayLike,
    weight_bytes: ArrayLike,
    peak_flops: ArrayLike,
    memory_bandwidth: ArrayLike,
    overhead_seconds: ArrayLike = INFERENCE_OVERHEAD_SECONDS,
) -> BatchLatency:
    """Roofline latency of one batch (seconds), and which term binds."""
    compute = _f(batch) * _f(flops_per_request) / (_f(peak_flops) * COMPUTE_EFFICIENCY)
    memory = _f(weight_bytes) / (_f(memory_bandwidth) * MEMORY_EFFICIENCY)
    work = maximum(compute, memory)
    overhead = _f(overhead_seconds)
    code = where(compute >= memory, BOTTLENECK_COMPUTE, BOTTLENECK_MEMORY)
    code = where(overhead > work, BOTTLENECK_OVERHEAD, code)
    return BatchLatency(overhead + work, compute, memory, np.asarray(code, dtype=np.int64))


def p99_latency(batch: ArrayLike, batch_seconds: ArrayLike, arrival_rate: ArrayLike) -> F64:
    """Latency percentile (LATENCY_PERCENTILE) of a replica at ``arrival_rate`` requests/s;
    infinite when the replica cannot keep up (rho >= 1)."""
    b = _f(batch)
    t = _f(batch_seconds)
    s = t / b
    rho = _f(arrival_rate) * s
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = s / (2.0 * (1.0 - rho)) * maximum(0.0, _TAIL + np.log(maximum(rho, 1e-300)))
    return where(rho < 1.0, t + wait, np.inf)


def tail_wait(service_seconds: ArrayLike, utilisation: ArrayLike) -> F64:
    """The LATENCY_PERCENTILE of the wait in an M/D/1 queue of deterministic service ``s`` at
    utilisation rho: s / (2(1 - rho)) * ln(100 rho)+ (module docstring); infinite at rho >= 1."""
    s = _f(service_seconds)
    rho = _f(utilisation)
    # 1 - rho floored: at rho >= 1 the value is discarded, and nothing divides by zero (cheaper
    # than silencing numpy's warnings, which a bisection pays at every step).
    headroom = maximum(1.0 - rho, _TINY)
    wait = s / (2.0 * headroom) * maximum(0.0, _TAIL + np.log(maximum(rho, 1e-300)))
    return where(rho < 1.0, wait, np.inf)


def max_rate_within(batch: ArrayLike, batch_seconds: ArrayLike, latency_target: ArrayLike) -> F64:
    """The highest arrival rate a replica serves with p99 <= target and utilisation <=
    MAX_SERVING_UTILISATION; 0 where even an idle replica misses the target. p99 rises with
    the rate, so a bisection on the utilisation finds it (vectorised)."""
    b = _f(batch)
    t = _f(batch_seconds)
    s = t / b
    budget = _f(latency_target) - t
    rho_floor = math.exp(-_TAIL)  # below this the tail term is zero
    lo = np.full(np.broadcast_shapes(b.shape, t.shape, budget.shape), rho_floor)
    hi = np.full_like(lo, MAX_SERVING_UTILISATION)

    def wait(rho: F64) -> F64:
        return s / (2.0 * (1.0 - rho)) * (_TAIL + np.log(rho))

    feasible_at_cap = wait(hi) <= budget
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = wait(mid) <= budget
        lo = where(ok, mid, lo)
        hi = where(ok, hi, mid)
    rho = where(feasible_at_cap, MAX_SERVING_UTILISATION, lo)
    return where(budget >= 0.0, rho / s, 0.0)


# --- greedy dynamic batching --------------------------------------------------------------------

# The endpoint's default headroom (spec.slo.maxUtilizationPercent): docs/engine.md says why.
DEFAULT_MAX_UTILISATION = 0.85
# z of the LATENCY_PERCENTILE of the standard normal (the batch-size fluctuation's tail).
_Z = NormalDist().inv_cdf(LATENCY_PERCENTILE)
_MAX_CHAIN_SLOPE = 0.95  # bounds 1 / (1 - r^2) where the chain is close to unstable


class GreedyBatching(NamedTuple):
    p99_seconds: F64  # infinite at or beyond capacity
    batch: F64  # the typical batch k
    batch_p99: F64  # k99
    batch_seconds: F64  # t(k)


class _Replica(NamedTuple):
    """What greedy batching needs of a replica, independent of the arrival rate."""

    per_request: F64  # c: compute seconds per request in a batch
    weights: F64  # M: seconds to stream the weights once
    overhead: F64  # O
    max_batch: F64  # B
    full_service: F64  # t(B) / B: seconds per request of a full batch


def _replica(
    max_batch: ArrayLike,
    flops_per_request: ArrayLike,
    weight_bytes: ArrayLike,
    peak_flops: ArrayLike,
    memory_bandwidth: ArrayLike,
    overhead_seconds: ArrayLike = INFERENCE_OVERHEAD_SECONDS,
) -> _Replica:
    one = batch_latency(1.0, flops_per_request, weight_bytes, peak_flops, memory_bandwidth)
    c, m_w, o, big = one.compute_seconds, one.memory_seconds, _f(overhead_seconds), _f(max_batch)
    return _Replica(c, m_w, o, big, (o + maximum(big * c, m_w)) / big)


def greedy_batching(
    rate: ArrayLike,
    max_batch: ArrayLike,
    flops_per_request: ArrayLike,
    weight_bytes: ArrayLike,
    peak_flops: ArrayLike,
    memory_bandwidth: ArrayLike,
    overhead_seconds: ArrayLike = INFERENCE_OVERHEAD_SECONDS,
) -> GreedyBatching:
    """The p99 latency of a replica with a greedy dynamic batcher (the module's docstring)."""
    replica = _replica(
        max_batch, flops_per_request, weight_bytes, peak_flops, memory_bandwidth, overhead_seconds
    )
    return _greedy(_f(rate), replica)


def _greedy(lam: F64, replica: _Replica) -> GreedyBatching:
    c, m_w, o, big, service = replica

    def t(k: F64) -> F64:
        return o + maximum(k * c, m_w)  # type: ignore[no-any-return]

    slope = lam * c
    # Floored denominators: where they would be 0 the value is discarded (no warnings to silence).
    compute_k = where(slope < 1.0, lam * o / maximum(1.0 - slope, _TINY), np.inf)
    k = minimum(maximum(maximum(lam * (o + m_w), compute_k), 1.0), big)
    tk = t(k)
    arrivals = lam * tk
    r = where(k * c >= m_w, minimum(slope, _MAX_CHAIN_SLOPE), 0.0)
    k99 = minimum(maximum(arrivals + _Z * np.sqrt(arrivals / (1.0 - r * r)), 1.0), big)
    t99 = t(k99)
    busy = minimum(1.0, lam * tk / k)
    in_progress = t99 * maximum(0.0, 1.0 - (1.0 - LATENCY_PERCENTILE) / maximum(busy, _TINY))
    queue = tail_wait(service, lam * service)
    p99 = where(lam * service < 1.0, maximum(in_progress, queue) + t99, np.inf)
    return GreedyBatching(p99, k, k99, tk)


def greedy_max_rate(
    latency_target: ArrayLike,
    max_batch: ArrayLike,
    flops_per_request: ArrayLike,
    weight_bytes: ArrayLike,
    peak_flops: ArrayLike,
    memory_bandwidth: ArrayLike,
    max_utilisation: ArrayLike = DEFAULT_MAX_UTILISATION,
) -> F64:
    """The highest rate whose greedy-batching p99 meets the target, at most max_utilisation of
    the capacity B / t(B); 0 where even one request alone misses it (a vectorised bisection:
    the p99 rises with the rate)."""
    args = (flops_per_request, weight_bytes, peak_flops, memory_bandwidth)
    replica = _replica(max_batch, *args)
    capacity = replica.max_batch / batch_latency(replica.max_batch, *args).seconds
    target = _f(latency_target)
    shape = joint_shape(capacity.shape, target.shape)
    hi = _f(np.broadcast_to(_f(max_utilisation) * capacity, shape).copy())
    lo = np.zeros_like(hi)
    whole = _greedy(hi, replica).p99_seconds <= target
    alone = batch_latency(1.0, *args).seconds <= target
    if (whole | ~alone).all():  # the cap binds, or nothing meets the target: no search
        return where(alone, hi, 0.0)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = _greedy(mid, replica).p99_seconds <= target
        lo = where(ok, mid, lo)
        hi = where(ok, hi, mid)
    return where(alone, where(whole, hi, lo), 0.0)


# --- the scalar path -----------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceInputs:
    accelerator: str
    per_replica: int
    parameters: float
    flops_per_request: float
    precision: str
    target_requests_per_second: float
    latency_p99_seconds: float
    max_batch_size: int = 1
    replicas: int | None = None
    min_replicas: int = 1
    max_replicas: int | None = None
    machine_type: str | None = None
    max_utilisation: float = DEFAULT_MAX_UTILISATION  # the endpoint's headroom


@dataclass(frozen=True)
class InferencePrediction:
    replicas: int
    batch_size: int  # the typical batch the greedy batcher forms at the sized rate
    per_replica_requests_per_second: float  # sustainable within the latency target
    per_replica_capacity: float  # B / t(B): the ceiling with no latency target
    batch_seconds: float
    p99_latency_seconds: float | None  # at target / replicas; None when overloaded
    bottleneck: str
    cost_per_hour_usd: float
    machine_type: str
    feasible: bool
    reason: str | None  # why the target cannot be met, with numbers
    replicas_needed: int | None  # before min/max bounds; None when no batch meets the target
    notes: tuple[str, ...] = field(default_factory=tuple)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def predict_inference(
    inputs: InferenceInputs, catalog: Catalog = DEFAULT_CATALOG
) -> InferencePrediction:
    """Batch size, replica count, p99 and cost for one InferenceEndpoint."""
    precision = inputs.precision.upper()
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {inputs.precision!r}; known: {', '.join(PRECISIONS)}")
    host = catalog.host(inputs.accelerator, inputs.per_replica, inputs.machine_type)
    acc = host.accelerator
    notes: list[str] = []
    rate, used = acc.serving_peak(precision.lower())
    if used != precision.lower():
        notes.append(f"{acc.name} runs {precision} fastest on its {used.upper()} units")
    weight_bytes = inputs.parameters * DTYPE_BYTES[precision.lower()]
    g = inputs.per_replica
    peak = rate * g
    bandwidth = acc.memory_bandwidth * g
    args = (inputs.flops_per_request, weight_bytes, peak, bandwidth)
    big = float(max(1, inputs.max_batch_size))
    rate = float(greedy_max_rate(inputs.latency_p99_seconds, big, *args, inputs.max_utilisation))
    at_rate = greedy_batching(rate, big, *args)
    batch = max(1, round(float(at_rate.batch)))  # the typical batch at the sized rate
    lat = batch_latency(float(batch), *args)
    t = float(lat.seconds)
    capacity = big / float(batch_latency(big, *args).seconds)
    one_request = float(batch_latency(1.0, *args).seconds)
    target = inputs.target_requests_per_second
    reason: str | None = None
    if weight_bytes > acc.memory_bytes * g:
        reason = (
            f"weights need {weight_bytes / 1e9:.3g} GB at {precision}, more than the "
            f"{acc.memory_bytes * g / 1e9:.3g} GB of {g} x {acc.name}"
        )
    needed: int | None
    if rate <= 0.0:
        needed = None
        reason = reason or (
            f"p99 target {_ms(inputs.latency_p99_seconds)} is below the "
            f"{_ms(one_request)} one request takes on {g} x {acc.name} at {precision}"
        )
    else:
        needed = max(1, math.ceil(target / rate - 1e-9))
    if inputs.replicas is not None:
        replicas = inputs.replicas
    else:
        replicas = max(inputs.min_replicas, needed if needed is not None else inputs.min_replicas)
        if inputs.max_replicas is not None:
            replicas = min(replicas, inputs.max_replicas)
    if reason is None and needed is not None and replicas < needed:
        bound = "replicas" if inputs.replicas is not None else "maxReplicas"
        reason = (
            f"{bound} {replicas} x {rate:,.0f} req/s = {replicas * rate:,.0f} req/s within "
            f"p99 {_ms(inputs.latency_p99_seconds)}, below the target {target:,.0f} req/s "
            f"({needed} needed)"
        )
    if replicas <= 0:
        p99 = math.inf
        reason = reason or f"replicas is 0: nothing serves the target {target:,.0f} req/s"
    else:
        p99 = float(greedy_batching(target / replicas, big, *args).p99_seconds)
    unit = "TOPS" if used == "int8" else "TFLOPS"
    words = {
        BOTTLENECK_COMPUTE: f"compute, {used.upper()} {peak / 1e12:g} {unit}",
        BOTTLENECK_MEMORY: f"memory bandwidth, {bandwidth / 1e9:g} GB/s",
        BOTTLENECK_OVERHEAD: "per-batch overhead (launches, copies)",
    }[int(lat.bottleneck)]
    return InferencePrediction(
        replicas=replicas,
        batch_size=batch,
        per_replica_requests_per_second=rate,
        per_replica_capacity=capacity,
        batch_seconds=t,
        p99_latency_seconds=None if math.isinf(p99) else p99,
        bottleneck=words,
        cost_per_hour_usd=replicas * host.price_per_hour,
        machine_type=host.machine.name,
        feasible=reason is None,
        reason=reason,
        replicas_needed=needed,
        notes=tuple(notes),
    )
