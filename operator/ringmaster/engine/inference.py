"""Model serving: roofline latency of a batch, queueing under load, batch and replica sizing.

Latency of one batch of b requests (roofline, DESIGN.md):

    t(b) = overhead + max(b * FLOPs / (peak_p * COMPUTE_EFFICIENCY),
                          weight_bytes_p / (HBM * MEMORY_EFFICIENCY))

where p is the precision (weights are 4, 2 or 1 bytes; the peak is the chip's rate at p).
A replica that serves batches of b delivers at most b / t(b) requests per second.

Queueing model: **M/D/1 at the request level**. Requests from many independent clients arrive as
a Poisson stream (the M); a batch of fixed shape runs the same kernels every time, so service is
deterministic (the D): a replica behaves as one server that spends t(b)/b per request and hands a
request back when its batch completes. Waiting time: the Pollaczek-Khinchine mean for M/D/1,
W = rho * s / (2(1 - rho)) with s = t(b)/b, and the exponential tail P(W > x) = rho*exp(-x*rho/W)
(Kingman's heavy-traffic law; exact as rho -> 1). So

    p99(b, lambda) = t(b) + s / (2(1 - rho)) * ln(100 * rho)+,   rho = lambda * s.

Why this and not M/M/1: exponential service would double the queueing delay of a deterministic
server; why not a full bulk-service model: it needs the batching timeout, which the API does not
expose. The approximation is conservative at low load, where a real dynamic batcher runs smaller,
faster batches than b. A replica is also never sized above MAX_SERVING_UTILISATION.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

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

BOTTLENECK_COMPUTE = 0
BOTTLENECK_MEMORY = 1
BOTTLENECK_OVERHEAD = 2


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


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
    work = np.maximum(compute, memory)
    overhead = _f(overhead_seconds)
    code = np.where(compute >= memory, BOTTLENECK_COMPUTE, BOTTLENECK_MEMORY)
    code = np.where(overhead > work, BOTTLENECK_OVERHEAD, code)
    return BatchLatency(overhead + work, compute, memory, code.astype(np.int64))


def p99_latency(batch: ArrayLike, batch_seconds: ArrayLike, arrival_rate: ArrayLike) -> F64:
    """Latency percentile (LATENCY_PERCENTILE) of a replica at ``arrival_rate`` requests/s;
    infinite when the replica cannot keep up (rho >= 1)."""
    b = _f(batch)
    t = _f(batch_seconds)
    s = t / b
    rho = _f(arrival_rate) * s
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = s / (2.0 * (1.0 - rho)) * np.maximum(0.0, _TAIL + np.log(np.maximum(rho, 1e-300)))
    return np.where(rho < 1.0, t + wait, np.inf)


def tail_wait(service_seconds: ArrayLike, utilisation: ArrayLike) -> F64:
    """The LATENCY_PERCENTILE of the wait in an M/D/1 queue of deterministic service ``s`` at
    utilisation rho: s / (2(1 - rho)) * ln(100 rho)+ (module docstring); infinite at rho >= 1."""
    s = _f(service_seconds)
    rho = _f(utilisation)
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = s / (2.0 * (1.0 - rho)) * np.maximum(0.0, _TAIL + np.log(np.maximum(rho, 1e-300)))
    return np.where(rho < 1.0, wait, np.inf)


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
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    rho = np.where(feasible_at_cap, MAX_SERVING_UTILISATION, lo)
    return np.where(budget >= 0.0, rho / s, 0.0)


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


@dataclass(frozen=True)
class InferencePrediction:
    replicas: int
    batch_size: int
    per_replica_requests_per_second: float  # sustainable within the latency target
    per_replica_capacity: float  # b / t(b): the ceiling with no latency target
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
    batches = np.arange(1, max(1, inputs.max_batch_size) + 1, dtype=np.float64)
    lat = batch_latency(batches, inputs.flops_per_request, weight_bytes, peak, bandwidth)
    rates = max_rate_within(batches, lat.seconds, inputs.latency_p99_seconds)
    best = int(np.argmax(rates))  # first maximum: the smallest batch that achieves it
    rate = float(rates[best])
    t = float(lat.seconds[best])
    capacity = float(batches[best]) / t
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
            f"{_ms(float(lat.seconds[0]))} one request takes on {g} x {acc.name} at {precision}"
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
        p99 = float(p99_latency(batches[best], t, target / replicas))
    unit = "TOPS" if used == "int8" else "TFLOPS"
    words = {
        BOTTLENECK_COMPUTE: f"compute, {used.upper()} {peak / 1e12:g} {unit}",
        BOTTLENECK_MEMORY: f"memory bandwidth, {bandwidth / 1e9:g} GB/s",
        BOTTLENECK_OVERHEAD: "per-batch overhead (launches, copies)",
    }[int(lat.bottleneck[best])]
    return InferencePrediction(
        replicas=replicas,
        batch_size=int(batches[best]),
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
