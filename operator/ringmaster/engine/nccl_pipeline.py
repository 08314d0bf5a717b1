"""NCCL's pipeline: the bytes one channel moves per step, and the time a collective loses
filling and draining that pipeline (which NCCL's own tuner leaves out, "waiting for proper chunk
modeling", tuning.cc).

Two fills, by what the pipeline runs through (efficiency.py names the constants' sources):

* through the network (a ring or tree across hosts: GPU chain, proxies, NICs) and NVLS's
  NVSwitch chunks: PIPELINE_FILL_SECONDS_PER_STEP_BYTE x the step, fitted on 2 x p4de's tree
  and checked on 2 x p5's NVLSTree chunks (both 100 Gbps EFA NICs) and 8 x H100 / H200 NVLS;
* a ring inside one NVLink or xGMI domain: RING_FILL_LINK_STEPS steps, each at the link's
  per-channel rate (the GPU's achieved link bandwidth over the channels), fitted on 8 x A100
  NVLink and checked on 8 x MI300X xGMI. A 2-GPU tensor-parallel ring on NVLink pays about a
  tenth of a millisecond, not the network's 0.94 ms.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import efficiency as E
from ringmaster.engine.arrays import as_f64 as _f
from ringmaster.engine.arrays import where

F64 = NDArray[np.float64]

# NCCL's algorithms (CollectiveTime.algorithm codes; engine.collectives names them).
ALG_RING = 0
ALG_TREE = 1
ALG_NVLS = 2
ALG_NVLS_TREE = 3
# Links whose one-domain rings pay the link-rate fill (measured: NVLink, xGMI). PCIe hosts keep
# the network's per-byte fill: no by-size PCIe curve is held (borrowed, said in efficiency.py).
LINK_FILL_LINKS = ("nvlink", "xgmi")


# enqueue.cc calcCollChunking: NVLS and NVLSTree halve their chunk while the message is small
# against concurrentOps (channels x NVLS heads) x chunk. Unrolled, the chunk is a step function of
# bytes / concurrentOps: NVLS 16 KiB below 2 x 32 KiB, 32 KiB below 8 x 64 KiB, 64 KiB below
# 64 x 128 KiB, else 128 KiB; NVLSTree (from at most 128 KiB) 32 KiB below 1 x 64 KiB, 64 KiB
# below 4 x 128 KiB, else 128 KiB.
_NVLS_CHUNK_EDGES = np.array([2.0 * 32768, 8.0 * 65536, 64.0 * 131072])
_NVLS_CHUNKS = np.array([16384.0, 32768.0, 65536.0, 131072.0])
_NVLS_TREE_CHUNK_EDGES = np.array([1.0 * 65536, 4.0 * 131072])
_NVLS_TREE_CHUNKS = np.array([32768.0, 65536.0, 131072.0])


def scaled_step(alg: int, m: F64, hosts: F64, per_host: F64, scale: float) -> F64:
    """``scale`` x :func:`pipeline_step_bytes`, with the scale folded into the constants (this
    runs once per algorithm in every layout search)."""
    channels = float(E.NCCL_ASSUMED_CHANNELS)
    full = scale * E.NCCL_STEP_BYTES
    if alg == ALG_RING:
        ranks = hosts * per_host
        if ranks.ndim == 0 or ranks.size < m.size:  # divide the smaller array
            share = m * (scale / (channels * E.NCCL_RING_CHUNK_STEPS) / ranks)
        else:
            share = m * (scale / (channels * E.NCCL_RING_CHUNK_STEPS)) / ranks
        return np.minimum(share, full)
    if alg == ALG_TREE:
        return np.minimum(m * (scale / channels), full)
    per_op = m * (1.0 / (channels * per_host))
    if alg == ALG_NVLS:
        step: F64 = (scale * _NVLS_CHUNKS)[np.searchsorted(_NVLS_CHUNK_EDGES, per_op, "right")]
        return step
    if alg == ALG_NVLS_TREE:
        tree = (scale * _NVLS_TREE_CHUNKS)[np.searchsorted(_NVLS_TREE_CHUNK_EDGES, per_op, "right")]
        if np.any(hosts >= 4):  # NVLS_TREE_MAX_CHUNKSIZE: 64 KiB on 4 or more hosts
            tree = np.where(hosts >= 4, np.minimum(tree, scale * 65536.0), tree)
        return tree
    raise ValueError(f"no NCCL pipeline for algorithm {alg}")


def pipeline_step_bytes(
    alg: int,
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    nvls_tree_chunk: float | None = None,
) -> F64:
    """The bytes one channel moves per pipeline step of a Simple-protocol ``alg`` collective
    (NCCL's chunking, enqueue.cc; efficiency.py names each constant): a 512 KiB step for the ring
    and the tree, NVLS's chunks for NVLS and NVLSTree. Below one loop of the channels the step is
    the message's share, so it grows with the message up to a full step. ``nvls_tree_chunk``
    replays another NCCL's NVLSTree chunk (NCCL 2.20 started from the 512 KiB step; since 2.21
    from NVLS_CHUNKSIZE), with enqueue.cc's four halving rules."""
    m, n, g = _f(nbytes), _f(hosts), _f(per_host)
    if alg != ALG_NVLS_TREE or nvls_tree_chunk is None:
        return scaled_step(alg, m, n, g, 1.0)
    concurrent = float(E.NCCL_ASSUMED_CHANNELS) * g
    chunk = np.broadcast_to(np.float64(nvls_tree_chunk), np.broadcast(m, concurrent).shape)
    for factor, smaller in ((32.0, 262144.0), (16.0, 131072.0), (4.0, 65536.0), (1.0, 32768.0)):
        chunk = np.where((m < factor * concurrent * chunk) & (chunk > smaller), smaller, chunk)
    return np.where(n >= 4, np.minimum(chunk, 65536.0), chunk)


def pipeline_fill(
    alg: int,
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    intra_bandwidth: ArrayLike | None = None,
    link: str = "nvlink",
) -> F64:
    """Seconds a Simple-protocol collective loses filling and draining its pipeline. A ring given
    its ``intra_bandwidth`` (the GPU's achieved ``link`` bytes/s) pays :func:`ring_fill`;
    everything else PIPELINE_FILL_SECONDS_PER_STEP_BYTE x :func:`pipeline_step_bytes`."""
    m, n, g = _f(nbytes), _f(hosts), _f(per_host)
    if alg == ALG_RING and intra_bandwidth is not None:
        return ring_fill(m, n, g, intra_bandwidth, link)
    return scaled_step(alg, m, n, g, E.PIPELINE_FILL_SECONDS_PER_STEP_BYTE)


def ring_fill(m: F64, hosts: F64, per_host: F64, intra_bandwidth: ArrayLike, link: str) -> F64:
    """Which fill a ring pays: inside one NVLink / xGMI domain (``hosts`` 1) at its link's rate
    (:func:`link_ring_fill`), across hosts or on other links the network's per step byte."""
    if link not in LINK_FILL_LINKS:
        return scaled_step(ALG_RING, m, hosts, per_host, E.PIPELINE_FILL_SECONDS_PER_STEP_BYTE)
    inside = link_ring_fill(m, hosts, per_host, intra_bandwidth)
    if not np.any(hosts > 1):
        return inside
    network = scaled_step(ALG_RING, m, hosts, per_host, E.PIPELINE_FILL_SECONDS_PER_STEP_BYTE)
    return where(hosts > 1, network, inside)


def link_ring_fill(m: F64, hosts: F64, per_host: F64, intra_bandwidth: ArrayLike) -> F64:
    """A one-domain ring's fill: RING_FILL_LINK_STEPS steps, each at the link's per-channel rate
    (``intra_bandwidth`` / NCCL_ASSUMED_CHANNELS). Below a full step the step is each rank's
    chunk of one loop (bytes / (ranks x channels)), whole: a one-loop ring moves its chunks as
    they come, not in quarter-chunk steps, so its fill reaches a full step at 64 MiB on 8 ranks
    (Azure's 8 x A100 ring pays 0.09-0.15 ms from 16 MiB; the quarter-chunk step put 0.02)."""
    ranks = hosts * per_host
    chunk = np.minimum(m / (ranks * float(E.NCCL_ASSUMED_CHANNELS)), float(E.NCCL_STEP_BYTES))
    per_byte = E.RING_FILL_LINK_STEPS * float(E.NCCL_ASSUMED_CHANNELS) / _f(intra_bandwidth)
    fill: F64 = chunk * per_byte
    return fill
