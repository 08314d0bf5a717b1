"""Collectives in closed form, one algorithm each: vectorised alpha-beta models.

Each takes the bandwidths and latencies it runs on directly and returns a :class:`Collective`
(seconds, their bandwidth and latency parts, the bottleneck): a ring of p peers
(:func:`ring_allreduce`), NCCL's ring through every rank (:func:`flat_ring`), a ring inside
then across hosts (:func:`hierarchical_ring`), a double binary tree across hosts
(:func:`tree_allreduce`), the reduction server (:func:`reduction_server`) and a TPU slice's torus
one axis after another (:func:`torus_allreduce`). The model of what NCCL's tuner runs, on a
host's fabric, is :mod:`ringmaster.engine.collectives`.

Notation (DESIGN.md): n worker hosts, g accelerators per host, N = n * g ranks, M bytes,
bandwidths in bytes/s *achieved* (line rate times efficiency, :mod:`ringmaster.engine.efficiency`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.arrays import as_f64 as _f
from ringmaster.engine.arrays import where
from ringmaster.engine.collectives import (
    BOTTLENECK_ICI,
    BOTTLENECK_INTRA,
    BOTTLENECK_LATENCY,
    BOTTLENECK_NIC,
    BOTTLENECK_REDUCERS,
)
from ringmaster.engine.efficiency import NCCL_BASE_LATENCY

F64 = NDArray[np.float64]


class Collective(NamedTuple):
    seconds: F64
    bandwidth_seconds: F64
    latency_seconds: F64
    bottleneck: NDArray[np.int64]


def _ring_factor(peers: F64) -> F64:
    """2(p-1)/p: the bytes each rank sends per byte all-reduced by a ring of p peers."""
    return 2.0 * (peers - 1.0) / np.maximum(peers, 1.0)


def bus_bandwidth(nbytes: ArrayLike, ranks: ArrayLike, seconds: ArrayLike) -> F64:
    """nccl-tests bus bandwidth (bytes/s); NaN where there is nothing to measure (one rank)."""
    n = _f(ranks)
    t = _f(seconds)
    with np.errstate(divide="ignore", invalid="ignore"):
        busbw = _ring_factor(n) * _f(nbytes) / t
    return where((n > 1) & (t > 0), busbw, np.nan)


def ring_allreduce(
    nbytes: ArrayLike,
    peers: ArrayLike,
    bandwidth: ArrayLike,
    hop_latency: ArrayLike,
    base_latency: ArrayLike = NCCL_BASE_LATENCY,
) -> Collective:
    """A ring of p peers on links of ``bandwidth``: 2(p-1)/p * M / B + base + 2(p-1) * alpha."""
    p = _f(peers)
    active = p > 1
    bw = where(active, _ring_factor(p) * _f(nbytes) / _f(bandwidth), 0.0)
    lat = where(active, _f(base_latency) + 2.0 * (p - 1.0) * _f(hop_latency), 0.0)
    code = where(bw >= lat, BOTTLENECK_INTRA, BOTTLENECK_LATENCY)
    return Collective(bw + lat, bw, lat, np.asarray(code, dtype=np.int64))


def flat_ring(
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    nic_bandwidth: ArrayLike,
    intra_bandwidth: ArrayLike,
    intra_hop_latency: ArrayLike,
    network_hop_latency: ArrayLike,
) -> Collective:
    """NCCL's ring through all N ranks: each NIC carries 2(N-1)/N * M, every step is paced by the
    slowest link of the ring, and across hosts every step pays the network hop."""
    n = _f(hosts)
    g = _f(per_host)
    ranks = n * g
    multi = n > 1
    nic = _f(nic_bandwidth)
    intra = _f(intra_bandwidth)
    link = where(multi, where(g > 1, np.minimum(nic, intra), nic), intra)
    hop = where(multi, _f(network_hop_latency), _f(intra_hop_latency))
    ring = ring_allreduce(nbytes, ranks, link, hop)
    link_code = where(multi & ((g <= 1) | (nic <= intra)), BOTTLENECK_NIC, BOTTLENECK_INTRA)
    code = where(ring.bandwidth_seconds >= ring.latency_seconds, link_code, BOTTLENECK_LATENCY)
    return Collective(ring.seconds, ring.bandwidth_seconds, ring.latency_seconds, code)


def _intra_phases(
    nbytes: F64, per_host: F64, intra_bandwidth: F64, intra_hop_latency: F64
) -> tuple[F64, F64]:
    """Reduce-scatter then all-gather inside each host: 2(g-1)/g * M / B_intra in all, plus one
    base latency and g-1 hops per phase."""
    active = per_host > 1
    bw = where(active, _ring_factor(per_host) * nbytes / intra_bandwidth, 0.0)
    lat = where(active, 2.0 * NCCL_BASE_LATENCY + 2.0 * (per_host - 1.0) * intra_hop_latency, 0.0)
    return bw, lat


def hierarchical_ring(
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    nic_bandwidth: ArrayLike,
    intra_bandwidth: ArrayLike,
    intra_hop_latency: ArrayLike,
    network_hop_latency: ArrayLike,
) -> Collective:
    """Reduce-scatter inside the host, ring across hosts on the NIC (g rings of M/g share it, so
    2(n-1)/n * M per NIC), all-gather inside the host. The phases stream chunk by chunk (as NCCL
    pipelines its steps), so the slower of the intra-host and the NIC traffic sets the pace;
    latencies add."""
    m = _f(nbytes)
    n = _f(hosts)
    intra_bw, intra_lat = _intra_phases(m, _f(per_host), _f(intra_bandwidth), _f(intra_hop_latency))
    inter = ring_allreduce(m, n, nic_bandwidth, network_hop_latency)
    bw = np.maximum(intra_bw, inter.bandwidth_seconds)
    lat = intra_lat + inter.latency_seconds
    code = where(inter.bandwidth_seconds >= intra_bw, BOTTLENECK_NIC, BOTTLENECK_INTRA)
    code = where(bw >= lat, code, BOTTLENECK_LATENCY)
    return Collective(bw + lat, bw, lat, np.asarray(code, dtype=np.int64))


def tree_allreduce(
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    nic_bandwidth: ArrayLike,
    intra_bandwidth: ArrayLike,
    intra_hop_latency: ArrayLike,
    network_hop_latency: ArrayLike,
) -> Collective:
    """NCCL's double binary tree across hosts (after the same intra-host phases as the
    hierarchical ring, pipelined with them): each NIC sends and receives 2M (M reduced up, M
    broadcast down) but only 2*ceil(log2 n) network hops. Infinite for one host (NCCL uses the
    ring there)."""
    m = _f(nbytes)
    n = _f(hosts)
    intra_bw, intra_lat = _intra_phases(m, _f(per_host), _f(intra_bandwidth), _f(intra_hop_latency))
    multi = n > 1
    depth = np.ceil(np.log2(np.maximum(n, 1.0)))
    inter_bw = 2.0 * m / _f(nic_bandwidth)
    inter_lat = NCCL_BASE_LATENCY + 2.0 * depth * _f(network_hop_latency)
    bw = where(multi, np.maximum(intra_bw, inter_bw), np.inf)
    lat = where(multi, intra_lat + inter_lat, np.inf)
    code = where(inter_bw >= intra_bw, BOTTLENECK_NIC, BOTTLENECK_INTRA)
    code = where(bw >= lat, code, BOTTLENECK_LATENCY)
    return Collective(bw + lat, bw, lat, np.asarray(code, dtype=np.int64))


def reduction_server(
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    nic_bandwidth: ArrayLike,
    intra_bandwidth: ArrayLike,
    intra_hop_latency: ArrayLike,
    network_hop_latency: ArrayLike,
    reducers: ArrayLike,
    reducer_bandwidth: ArrayLike,
) -> Collective:
    """Vertex AI Reduction Server / BytePS: after the intra-host phases each host sends M to the
    reducers and receives M back; the k reducers together carry n*M each way. The inter-host
    time is max(M / B_net, n*M / (k*B_r)), plus a push and a pull hop. Partitions stream through
    the intra-host and network phases (BytePS pipelines them), so the slower phase sets the
    pace. Infinite for k = 0."""
    m = _f(nbytes)
    n = _f(hosts)
    k = _f(reducers)
    intra_bw, intra_lat = _intra_phases(m, _f(per_host), _f(intra_bandwidth), _f(intra_hop_latency))
    worker_side = m / _f(nic_bandwidth)
    with np.errstate(divide="ignore"):
        reducer_side = where(k > 0, n * m / (k * _f(reducer_bandwidth)), np.inf)
    inter_bw = np.maximum(worker_side, reducer_side)
    inter_lat = NCCL_BASE_LATENCY + 2.0 * _f(network_hop_latency)
    bw = np.maximum(intra_bw, inter_bw)
    lat = intra_lat + inter_lat
    code = where(reducer_side > worker_side, BOTTLENECK_REDUCERS, BOTTLENECK_NIC)
    code = where(inter_bw >= intra_bw, code, BOTTLENECK_INTRA)
    code = where(bw >= lat, code, BOTTLENECK_LATENCY)
    return Collective(bw + lat, bw, lat, np.asarray(code, dtype=np.int64))


def torus_allreduce(
    nbytes: ArrayLike,
    axes: tuple[ArrayLike, ArrayLike, ArrayLike],
    link_bandwidth: ArrayLike,
    wrapped: tuple[ArrayLike, ArrayLike, ArrayLike],
    hop_latency: ArrayLike,
) -> Collective:
    """All-reduce over a TPU slice's ICI: reduce-scatter then all-gather along each axis in turn
    (the data shrinks by the axis length after each), wrapped axes first.

    On an axis of p chips a wrapped axis (torus) runs two rings in opposite directions, so each
    phase takes (p-1)/p * m / (2B); an open axis (mesh) embeds one ring, (p-1)/p * m / B.
    With equal axes the sum telescopes to 2(N-1)/N * M / (f*B), the ring bound over N chips.
    ``axes`` are axis lengths (1 for an absent axis), ``wrapped`` booleans per axis.
    """
    m = _f(nbytes)
    p = np.stack(np.broadcast_arrays(*(_f(a) for a in axes)))
    f = where(np.stack(np.broadcast_arrays(*(np.asarray(w) for w in wrapped))), 2.0, 1.0)
    p, f = np.broadcast_arrays(p, f)
    order = np.argsort(-f, axis=0, kind="stable")  # wrapped (faster) axes while data is largest
    p = np.take_along_axis(p, order, axis=0)
    f = np.take_along_axis(f, order, axis=0)
    b = _f(link_bandwidth)
    remaining = np.ones_like(p[0])
    bw = np.zeros_like(p[0])
    steps = np.zeros_like(p[0])
    for d in range(p.shape[0]):
        bw = bw + 2.0 * (p[d] - 1.0) / p[d] * remaining / f[d]
        remaining = remaining / p[d]
        steps = steps + 2.0 * (p[d] - 1.0)
    bw = bw * m / b
    chips = np.prod(p, axis=0)
    lat = where(chips > 1, NCCL_BASE_LATENCY + steps * _f(hop_latency), 0.0)
    code = where(bw >= lat, BOTTLENECK_ICI, BOTTLENECK_LATENCY)
    return Collective(bw + lat, bw, lat, np.asarray(code, dtype=np.int64))
