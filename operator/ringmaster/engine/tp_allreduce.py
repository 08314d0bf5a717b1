"""The tensor-parallel all-reduce each serving engine runs inside a host, by chip and GPU count.

Serving engines do not all-reduce a decode step's activations through NCCL: vLLM and SGLang run
their own custom all-reduce (one-shot or two-shot kernels over NVLink peer memory, captured in
the step's CUDA graph), TensorRT-LLM its AllReduce plugin. At the sizes a step moves (a batch of
1-512 tokens x hidden 4k-16k, 16 KiB-16 MiB) they cost a few microseconds at the smallest and
grow faster with the bytes than NCCL's bandwidth at gigabytes suggests. NVIDIA's AIConfigurator
measured them per chip, engine and GPU count (its ``custom_allreduce_perf`` tables; the subset in
calibration/measured/aiconfigurator.json): each is fitted here as

    t(bytes) = floor + bytes / rate

over a decode step's sizes, 8K-8M bf16 elements (least squares of the log error,
calibration.aiconfigurator.fit_allreduce), and a prompt token's bytes at the rate the curve
reaches at a prefill chunk's sizes (16M-64M elements), where the engines switch to
bandwidth-bound kernels: the step charges its decode tokens and its prompt tokens each at their
own rate (engine.llm_step.ServingTerms). The decode fit is a secant through the switch from
one-shot to two-shot kernels: its median |error| is 2-34 % on its own rows (largest at 8 GPUs,
where the switch is sharpest), against 17-97 % for NCCL's LL-ring latency model the step used
before for every engine, which stays for a chip, engine or GPU count without a measurement (AMD
parts, TPUs, PCIe hosts).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

AIC_ALLREDUCE_SOURCE = (
    "ai-dynamo/aiconfigurator @ 095f58a5, custom_allreduce_perf (vLLM 0.19.0 / 0.14.0 on the"
    " A100, SGLang 0.5.10, TensorRT-LLM 1.3.0rc20 / 1.0.0 on the A100)"
)
# The serving engine's name (engine.serving_engines) -> AIConfigurator's.
ENGINE_KEYS = {"vLLM": "vllm", "SGLang": "sglang", "TensorRT-LLM": "trtllm"}

# (accelerator, engine, GPUs) -> (floor us, decode rate GB/s, prompt rate GB/s):
# calibration.aiconfigurator.derive_engine_allreduce refits every entry; a test keeps them equal.
ENGINE_ALLREDUCE: dict[tuple[str, str, int], tuple[float, float, float]] = {
    ("nvidia-a100-80gb", "sglang", 2): (5.3, 180.6, 191.4),
    ("nvidia-a100-80gb", "sglang", 4): (6.4, 103.7, 142.4),
    ("nvidia-a100-80gb", "sglang", 8): (8.7, 93.7, 125.6),
    ("nvidia-a100-80gb", "trtllm", 2): (4.3, 100.9, 191.0),
    ("nvidia-a100-80gb", "trtllm", 4): (5.7, 69.7, 142.1),
    ("nvidia-a100-80gb", "trtllm", 8): (9.5, 50.4, 124.7),
    ("nvidia-a100-80gb", "vllm", 2): (4.9, 151.5, 191.5),
    ("nvidia-a100-80gb", "vllm", 4): (6.1, 91.1, 142.8),
    ("nvidia-a100-80gb", "vllm", 8): (8.2, 81.5, 125.2),
    ("nvidia-b200", "sglang", 2): (7.3, 203.6, 514.3),
    ("nvidia-b200", "sglang", 4): (8.2, 136.8, 430.0),
    ("nvidia-b200", "sglang", 8): (10.8, 115.9, 455.0),
    ("nvidia-b200", "trtllm", 2): (4.8, 513.3, 512.9),
    ("nvidia-b200", "trtllm", 4): (5.1, 219.3, 404.7),
    ("nvidia-b200", "trtllm", 8): (6.1, 142.0, 417.9),
    ("nvidia-b200", "vllm", 2): (7.2, 209.4, 523.6),
    ("nvidia-b200", "vllm", 4): (8.7, 209.4, 412.6),
    ("nvidia-b200", "vllm", 8): (11.7, 278.8, 357.2),
    ("nvidia-gb200", "sglang", 2): (7.3, 201.8, 500.3),
    ("nvidia-gb200", "sglang", 4): (8.2, 131.9, 423.6),
    ("nvidia-gb200", "trtllm", 2): (4.3, 503.9, 499.5),
    ("nvidia-gb200", "trtllm", 4): (4.7, 209.4, 411.7),
    ("nvidia-gb200", "vllm", 2): (4.5, 172.4, 203.8),
    ("nvidia-gb200", "vllm", 4): (5.7, 194.4, 360.8),
    ("nvidia-h100-80gb", "sglang", 2): (4.4, 254.2, 306.3),
    ("nvidia-h100-80gb", "sglang", 4): (5.2, 160.1, 228.3),
    ("nvidia-h100-80gb", "sglang", 8): (7.1, 135.6, 265.8),
    ("nvidia-h100-80gb", "trtllm", 2): (2.7, 261.4, 306.2),
    ("nvidia-h100-80gb", "trtllm", 4): (3.3, 125.9, 227.4),
    ("nvidia-h100-80gb", "trtllm", 8): (4.3, 82.3, 266.0),
    ("nvidia-h100-80gb", "vllm", 2): (4.2, 231.8, 324.9),
    ("nvidia-h100-80gb", "vllm", 4): (5.1, 161.6, 227.9),
    ("nvidia-h100-80gb", "vllm", 8): (6.5, 170.8, 255.1),
    ("nvidia-h200-141gb", "sglang", 2): (4.4, 256.6, 307.7),
    ("nvidia-h200-141gb", "sglang", 4): (5.1, 166.2, 229.9),
    ("nvidia-h200-141gb", "sglang", 8): (6.9, 139.4, 279.0),
    ("nvidia-h200-141gb", "trtllm", 2): (2.7, 284.0, 309.6),
    ("nvidia-h200-141gb", "trtllm", 4): (3.3, 136.8, 227.0),
    ("nvidia-h200-141gb", "trtllm", 8): (4.4, 87.8, 273.5),
    ("nvidia-h200-141gb", "vllm", 2): (4.3, 240.5, 315.3),
    ("nvidia-h200-141gb", "vllm", 4): (5.2, 170.8, 229.4),
    ("nvidia-h200-141gb", "vllm", 8): (6.5, 183.9, 256.1),
}


def measured_allreduce(accelerator: str, engine: str) -> bool:
    """Whether any GPU count of ``engine``'s all-reduce was measured on the chip."""
    key = ENGINE_KEYS.get(engine, engine)
    return any(a == accelerator and e == key for a, e, _ in ENGINE_ALLREDUCE)


def engine_allreduce(
    accelerator: str, engine: str | None, ranks: int
) -> tuple[float, float, float] | None:
    """(floor seconds, decode bytes/s, prompt bytes/s) of ``engine``'s all-reduce over ``ranks``
    GPUs of the chip, or None where none was measured."""
    if engine is None:
        return None
    fit = ENGINE_ALLREDUCE.get((accelerator, ENGINE_KEYS.get(engine, engine), int(ranks)))
    if fit is None:
        return None
    floor_us, decode_gbps, prompt_gbps = fit
    return floor_us * 1e-6, decode_gbps * 1e9, prompt_gbps * 1e9


def engine_allreduce_seconds(
    nbytes: ArrayLike,
    ranks: ArrayLike,
    accelerator: str,
    engine: str | None,
    *,
    prompt: bool = False,
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """(seconds, measured) of one all-reduce of ``nbytes`` over ``ranks`` GPUs by ``engine``'s
    own kernel, elementwise, at the decode sizes' rate (``prompt``: a prefill chunk's); the
    ``measured`` is False where no fit exists (the seconds are then 0 and the caller's model
    applies)."""
    if engine is None:
        shape = np.broadcast_shapes(np.shape(nbytes), np.shape(ranks))
        return np.zeros(shape), np.zeros(shape, dtype=bool)
    if np.ndim(ranks) == 0:  # one replica size: one lookup
        degree = int(np.asarray(ranks))
        fit = engine_allreduce(accelerator, engine, degree) if degree > 1 else None
        size = np.asarray(nbytes, dtype=np.float64)
        if fit is None:
            return np.zeros(size.shape), np.zeros(size.shape, dtype=bool)
        floor, decode_rate, prompt_rate = fit
        seconds = floor + size / (prompt_rate if prompt else decode_rate)
        return np.asarray(seconds, dtype=np.float64), np.ones(size.shape, dtype=bool)
    size, peers = np.broadcast_arrays(np.asarray(nbytes, float), np.asarray(ranks, float))
    out = np.zeros(size.shape)
    measured = np.zeros(size.shape, dtype=bool)
    for p in np.unique(peers):
        fit = engine_allreduce(accelerator, engine, int(p)) if p > 1 else None
        if fit is None:
            continue
        floor, decode_rate, prompt_rate = fit
        where = peers == p
        out[where] = floor + size[where] / (prompt_rate if prompt else decode_rate)
        measured[where] = True
    return out, measured
