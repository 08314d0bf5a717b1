"""The tensor-parallel all-reduce each serving engine runs inside a host, by chip and GPU count.

Serving engines do not all-reduce a decode step's activations through NCCL: vLLM and SGLang run
their own custom all-reduce (one-shot or two-shot kernels over NVLink peer memory, captured in
the step's CUDA graph), TensorRT-LLM its AllReduce plugin. At the sizes a step moves (a batch of
1-4,000 tokens x hidden 4k-16k, 16 KiB-128 MiB) they cost a few microseconds at the smallest and
their rate per byte grows with the message: the engines switch from one-shot to two-shot to
bandwidth-bound kernels as it grows (at 8 H100s under TensorRT-LLM, 37 GB/s a byte more at
16-256 KiB, 266 GB/s at 32-128 MiB). NVIDIA's AIConfigurator measured them per chip, engine and
GPU count (its ``custom_allreduce_perf`` tables, 16 KiB-128 MiB; the subset in
calibration/measured/aiconfigurator.json): each curve is fitted here as

    t(bytes) = floor + t_MiB (bytes / 1 MiB) ** exponent

over all its sizes (least squares of the log error, calibration.aiconfigurator.fit_allreduce):
concave, one exponent per curve (0.59-1: 0.7-1 at 2 GPUs, 0.59-0.9 at 8, where the switch is
widest; lower on Blackwell than on Hopper). Beyond the largest measured message it goes on at the
prompt rate, the curve's slope at a prefill chunk's sizes (32-128 MiB). A step's decode and
prompt tokens share one message a layer: the step charges them on the curve at their sum
(engine.llm_step.step_allreduce_seconds). The curve's median |error| is 2-20 % on its own
rows; the affine one it replaces (a floor and one rate fitted on the decode sizes, charged at
every size) was off by 14-36 % in median at 8 GPUs and by up to 194 % at 128 MiB; NCCL's LL-ring
latency model, which the step used before for every engine, by 13-70 %. That model stays for a
chip, engine or GPU count without a measurement (AMD parts, TPUs, PCIe hosts).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives
from ringmaster.engine.alpha_beta_collectives import ring_allreduce
from ringmaster.engine.efficiency import NVLINK_EFFICIENCY, PCIE_EFFICIENCY, XGMI_EFFICIENCY
from ringmaster.engine.hardware import Accelerator, MachineType
from ringmaster.engine.units import US

AIC_ALLREDUCE_SOURCE = (
    "ai-dynamo/aiconfigurator @ 095f58a5, custom_allreduce_perf (vLLM 0.19.0 / 0.14.0 on the"
    " A100, SGLang 0.5.10, TensorRT-LLM 1.3.0rc20 / 1.0.0 on the A100)"
)
# The serving engine's name (engine.serving_engines) -> AIConfigurator's.
ENGINE_KEYS = {"vLLM": "vllm", "SGLang": "sglang", "TensorRT-LLM": "trtllm"}

MIB = 2.0**20
# The largest message AIConfigurator measured (64 Mi bf16 elements): the curve's end; beyond
# it a message grows at the prompt rate.
CURVE_TOP_BYTES = 128.0 * MIB

# NCCL's tuning model for small messages, which tensor-parallel activations are (a few MB at
# most): ring algorithm, LL protocol (nccl src/graph/tuning.cc: baseLat ring LL 6.6 us, hwLat
# ring LL 0.6 us on NVLink, 1.0 us on PCIe).
TP_ALLREDUCE_BASE_LATENCY = 6.6 * US
# ICI and xGMI (RCCL keeps NCCL's tuner): NVLink's hop borrowed.
TP_HOP_LATENCY = {"nvlink": 0.6 * US, "pcie": 1.0 * US, "ici": 0.6 * US, "xgmi": 0.6 * US}
LINK_EFFICIENCY = {
    "nvlink": NVLINK_EFFICIENCY,
    "pcie": PCIE_EFFICIENCY,
    "ici": NVLINK_EFFICIENCY,
    "xgmi": XGMI_EFFICIENCY,
}

# (accelerator, engine, GPUs) -> (floor us, us at 1 MiB above the floor, exponent, prompt rate
# GB/s): calibration.aiconfigurator.derive_engine_allreduce refits every entry; a test keeps
# them equal.
ENGINE_ALLREDUCE: dict[tuple[str, str, int], tuple[float, float, float, float]] = {
    ("nvidia-a100-80gb", "sglang", 2): (5.3, 5.94, 1.0, 191.4),
    ("nvidia-a100-80gb", "sglang", 4): (5.9, 11.94, 0.91, 142.4),
    ("nvidia-a100-80gb", "sglang", 8): (7.8, 14.29, 0.895, 125.6),
    ("nvidia-a100-80gb", "trtllm", 2): (3.9, 12.02, 0.86, 191.0),
    ("nvidia-a100-80gb", "trtllm", 4): (4.7, 18.71, 0.82, 142.1),
    ("nvidia-a100-80gb", "trtllm", 8): (5.3, 34.59, 0.69, 124.7),
    ("nvidia-a100-80gb", "vllm", 2): (4.9, 6.59, 1.0, 191.5),
    ("nvidia-a100-80gb", "vllm", 4): (5.6, 13.24, 0.895, 142.8),
    ("nvidia-a100-80gb", "vllm", 8): (7.2, 16.18, 0.875, 125.2),
    ("nvidia-b200", "sglang", 2): (6.1, 8.28, 0.71, 514.3),
    ("nvidia-b200", "sglang", 4): (5.9, 13.9, 0.645, 430.0),
    ("nvidia-b200", "sglang", 8): (5.7, 21.78, 0.585, 455.0),
    ("nvidia-b200", "trtllm", 2): (4.7, 2.21, 1.0, 512.9),
    ("nvidia-b200", "trtllm", 4): (4.7, 5.86, 0.86, 404.7),
    ("nvidia-b200", "trtllm", 8): (4.7, 11.86, 0.73, 417.9),
    ("nvidia-b200", "vllm", 2): (5.9, 8.51, 0.7, 523.6),
    ("nvidia-b200", "vllm", 4): (6.9, 9.57, 0.72, 412.6),
    ("nvidia-b200", "vllm", 8): (10.0, 7.31, 0.78, 357.2),
    ("nvidia-gb200", "sglang", 2): (6.2, 8.39, 0.705, 500.3),
    ("nvidia-gb200", "sglang", 4): (5.7, 14.69, 0.635, 423.6),
    ("nvidia-gb200", "trtllm", 2): (4.2, 2.26, 1.0, 499.5),
    ("nvidia-gb200", "trtllm", 4): (4.3, 6.19, 0.85, 411.7),
    ("nvidia-gb200", "vllm", 2): (4.5, 6.07, 0.99, 203.8),
    ("nvidia-gb200", "vllm", 4): (4.9, 7.67, 0.795, 360.8),
    ("nvidia-h100-80gb", "sglang", 2): (4.4, 4.18, 0.985, 306.3),
    ("nvidia-h100-80gb", "sglang", 4): (4.7, 8.28, 0.875, 228.3),
    ("nvidia-h100-80gb", "sglang", 8): (5.6, 12.27, 0.78, 265.8),
    ("nvidia-h100-80gb", "trtllm", 2): (2.7, 3.98, 1.0, 306.2),
    ("nvidia-h100-80gb", "trtllm", 4): (2.7, 10.54, 0.83, 227.4),
    ("nvidia-h100-80gb", "trtllm", 8): (1.9, 20.61, 0.665, 266.0),
    ("nvidia-h100-80gb", "vllm", 2): (4.1, 4.7, 0.97, 324.9),
    ("nvidia-h100-80gb", "vllm", 4): (4.7, 8.11, 0.88, 227.9),
    ("nvidia-h100-80gb", "vllm", 8): (5.7, 8.69, 0.85, 255.1),
    ("nvidia-h200-141gb", "sglang", 2): (4.4, 4.12, 0.985, 307.7),
    ("nvidia-h200-141gb", "sglang", 4): (4.8, 7.52, 0.9, 229.9),
    ("nvidia-h200-141gb", "sglang", 8): (5.6, 11.61, 0.795, 279.0),
    ("nvidia-h200-141gb", "trtllm", 2): (2.6, 3.82, 1.0, 309.6),
    ("nvidia-h200-141gb", "trtllm", 4): (2.8, 9.51, 0.85, 227.0),
    ("nvidia-h200-141gb", "trtllm", 8): (2.0, 19.91, 0.665, 273.5),
    ("nvidia-h200-141gb", "vllm", 2): (4.2, 4.51, 0.97, 315.3),
    ("nvidia-h200-141gb", "vllm", 4): (4.8, 7.41, 0.9, 229.4),
    ("nvidia-h200-141gb", "vllm", 8): (5.9, 7.52, 0.88, 256.1),
}


class AllreduceCurve(NamedTuple):
    """One engine's all-reduce on one chip at one GPU count, in seconds and bytes."""

    floor: float  # seconds at no bytes
    at_mib: float  # seconds above the floor at 1 MiB
    exponent: float
    prompt_rate: float  # bytes/s: the slope at a prefill chunk's sizes and beyond the curve


def curve_seconds(
    curve: ArrayLike, exponent: ArrayLike, top: ArrayLike, beyond: ArrayLike, size: ArrayLike
) -> NDArray[np.float64]:
    """A measured curve above its floor at ``size`` (bytes, or a step's tokens with the curve in
    their units): ``curve x size ** exponent`` up to ``top``, then ``beyond`` a unit more."""
    x = np.asarray(size, dtype=np.float64)
    within = np.minimum(x, top)
    above = np.maximum(x - np.asarray(top, dtype=np.float64), 0.0)
    with np.errstate(invalid="ignore"):
        tail = np.where(above > 0.0, above * np.asarray(beyond, dtype=np.float64), 0.0)
    return np.asarray(np.asarray(curve) * within ** np.asarray(exponent) + tail, np.float64)


def measured_allreduce(accelerator: str, engine: str) -> bool:
    """Whether any GPU count of ``engine``'s all-reduce was measured on the chip."""
    key = ENGINE_KEYS.get(engine, engine)
    return any(a == accelerator and e == key for a, e, _ in ENGINE_ALLREDUCE)


def engine_allreduce(accelerator: str, engine: str | None, ranks: int) -> AllreduceCurve | None:
    """``engine``'s all-reduce over ``ranks`` GPUs of the chip, or None where none was
    measured."""
    if engine is None:
        return None
    fit = ENGINE_ALLREDUCE.get((accelerator, ENGINE_KEYS.get(engine, engine), int(ranks)))
    if fit is None:
        return None
    floor_us, at_mib_us, exponent, prompt_gbps = fit
    return AllreduceCurve(floor_us * 1e-6, at_mib_us * 1e-6, exponent, prompt_gbps * 1e9)


def engine_allreduce_seconds(
    nbytes: ArrayLike,
    ranks: ArrayLike,
    accelerator: str,
    engine: str | None,
    *,
    prompt: bool = False,
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """(seconds, measured) of one all-reduce of ``nbytes`` over ``ranks`` GPUs by ``engine``'s
    own kernel, elementwise, on the measured curve (``prompt``: at a prefill chunk's rate); the
    ``measured`` is False where no fit exists (the seconds are then 0 and the caller's model
    applies)."""
    size, peers = np.broadcast_arrays(np.asarray(nbytes, float), np.asarray(ranks, float))
    t = engine_allreduce_terms(peers, accelerator, engine)
    with np.errstate(divide="ignore", invalid="ignore"):
        above = (
            size / t.prompt_rate
            if prompt
            else curve_seconds(
                t.at_mib * MIB ** (-t.exponent),
                t.exponent,
                CURVE_TOP_BYTES,
                1.0 / t.prompt_rate,
                size,
            )
        )
    return np.where(t.measured, t.floor + above, 0.0), t.measured


class CurveTerms(NamedTuple):
    """AllreduceCurve's fields per element of a GPU-count array (0 where not measured)."""

    floor: NDArray[np.float64]
    at_mib: NDArray[np.float64]
    exponent: NDArray[np.float64]
    prompt_rate: NDArray[np.float64]
    measured: NDArray[np.bool_]


def engine_allreduce_terms(ranks: ArrayLike, accelerator: str, engine: str | None) -> CurveTerms:
    """The measured curve of ``engine``'s all-reduce at each of ``ranks`` (elementwise)."""
    peers = np.asarray(ranks, dtype=np.float64)
    floor, at_mib = np.zeros(peers.shape), np.zeros(peers.shape)
    exponent, prompt_rate = np.ones(peers.shape), np.full(peers.shape, np.inf)
    measured = np.zeros(peers.shape, dtype=bool)
    for p in np.unique(peers):
        fit = engine_allreduce(accelerator, engine, int(p)) if p > 1 else None
        if fit is None:
            continue
        where = peers == p
        floor[where], at_mib[where] = fit.floor, fit.at_mib
        exponent[where], prompt_rate[where] = fit.exponent, fit.prompt_rate
        measured[where] = True
    return CurveTerms(floor, at_mib, exponent, prompt_rate, measured)


def tensor_parallel_allreduce_seconds(
    nbytes: ArrayLike,
    ranks: ArrayLike,
    accelerator: Accelerator,
    serving_engine: str | None = None,
) -> NDArray[np.float64]:
    """One all-reduce of ``nbytes`` over the replica's ``ranks`` accelerators on their host link:
    the serving engine's own kernel where it was measured on the chip (ENGINE_ALLREDUCE),
    else NCCL's small-message ring. The step itself charges the same two models through
    engine_allreduce_terms and nccl_tp_allreduce_seconds (engine.llm_step.serving_terms)."""
    if serving_engine is None:
        return nccl_tp_allreduce_seconds(nbytes, ranks, accelerator)
    seconds, measured = engine_allreduce_seconds(nbytes, ranks, accelerator.name, serving_engine)
    if np.all(measured):
        return seconds
    return np.where(measured, seconds, nccl_tp_allreduce_seconds(nbytes, ranks, accelerator))


def nccl_tp_allreduce_seconds(
    nbytes: ArrayLike, ranks: ArrayLike, accelerator: Accelerator
) -> NDArray[np.float64]:
    """NCCL's ring, LL protocol, over the host link (TP_ALLREDUCE_BASE_LATENCY, TP_HOP_LATENCY)."""
    link = accelerator.intra_link
    # On an xGMI mesh only the links among the ``ranks`` GPUs carry it.
    bandwidth = collectives.link_bandwidth(accelerator, ranks) * LINK_EFFICIENCY[link]
    ring = ring_allreduce(nbytes, ranks, bandwidth, TP_HOP_LATENCY[link], TP_ALLREDUCE_BASE_LATENCY)
    return ring.seconds


def cross_host_allreduce_seconds(
    nbytes: ArrayLike,
    tp: int,
    per_host: int,
    fabric: collectives.GpuFabric,
    machine: MachineType | None = None,
    accelerator: Accelerator | None = None,
) -> NDArray[np.float64]:
    """One all-reduce of ``nbytes`` over ``tp`` ranks that span ``tp / per_host`` hosts: what
    NCCL's tuner runs there (ring, tree, NVLS-tree; LL at small sizes) on the hosts' NICs, or,
    where the hosts share one NVLink domain (``machine.nvlink_domain``: trays of a GB200 NVL72
    rack), over NVLink as one NCCL node (collectives.domain_collective)."""
    hosts = max(1, math.ceil(tp / per_host))
    if (
        machine is not None
        and accelerator is not None
        and machine.nvlink_domain > machine.accelerator_count
    ):
        return collectives.domain_collective(
            collectives.ALL_REDUCE, nbytes, hosts, tp // hosts, machine, accelerator
        ).seconds
    return collectives.nccl_collective(
        collectives.ALL_REDUCE, nbytes, hosts, tp // hosts, fabric, with_busbw=False
    ).seconds
