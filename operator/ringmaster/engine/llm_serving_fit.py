"""The weight and KV-cache precisions a serving replica can hold, their bytes, and whether a
model's weights and one sequence fit a replica's accelerators (and, where they do not, what
would: more accelerators a replica, or smaller weights). engine.llm_serving sizes replicas with
them; the reasons are what a plan's ``DoesNotFit`` says.
"""

from __future__ import annotations

from ringmaster.engine.checkpoint_formats import checkpoint_bytes
from ringmaster.engine.hardware import Accelerator, Catalog, UnknownHardwareError
from ringmaster.engine.llm_step import HBM_RESERVE_FRACTION, kv_bytes_per_token_per_accelerator
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GIB

# AWQ's and GPTQ's default group size: one FP16 scale per 128 weights (AWQ, Lin et al. 2024).
INT4_GROUP_SIZE = 128

# NVFP4's block: 16 E2M1 values share one FP8 (E4M3) scale (NVIDIA's "Introducing NVFP4" blog,
# 2025, and TensorRT Model Optimizer's NVFP4 format; the per-tensor FP32 scale is negligible).
# MXFP4 (OCP Microscaling spec v1.0, 2023): 32 values share one 8-bit E8M0 scale.
NVFP4_BLOCK = 16
MXFP4_BLOCK = 32

PRECISIONS = ("BF16", "FP16", "FP8", "INT4", "FP4")
KV_CACHE_PRECISIONS = ("BF16", "FP16", "FP8")
WEIGHT_BYTES: dict[str, float] = {
    "BF16": 2.0,
    "FP16": 2.0,
    "FP8": 1.0,
    "INT4": 0.5 + 2.0 / INT4_GROUP_SIZE,
    "FP4": 0.5 + 1.0 / NVFP4_BLOCK,
}
# The precision the matrix units compute in: W4A16 dequantises to 16-bit.
COMPUTE_PRECISION = {"BF16": "bf16", "FP16": "fp16", "FP8": "fp8", "INT4": "bf16", "FP4": "fp4"}
KV_BYTES = {"BF16": 2.0, "FP16": 2.0, "FP8": 1.0}
# The KV cache's default precision for each weight precision: the activations' precision (FP4
# engines keep an FP8 cache: TensorRT-LLM's NVFP4 checkpoints quantise the KV cache to FP8).
DEFAULT_KV_PRECISION = {"BF16": "BF16", "FP16": "FP16", "FP8": "FP8", "INT4": "FP16", "FP4": "FP8"}
# The tensor cores each low precision needs, in words for the reasons.
UNITS_WORDS = {
    "fp8": "FP8 tensor cores (H100 and later)",
    "fp4": "FP4 tensor cores (Blackwell: B200, GB200)",
}


def _gb(nbytes: float) -> str:
    return f"{nbytes / GIB:.3g} GiB"


def _params(n: float) -> str:
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def fits(
    model: Transformer,
    acc: Accelerator,
    tp: int,
    w: float,
    tokens: float,
    kv: float,
    pp: int = 1,
) -> bool:
    free = acc.memory_bytes * (1.0 - HBM_RESERVE_FRACTION) - checkpoint_bytes(model, w) / (tp * pp)
    return free >= kv_bytes_per_token_per_accelerator(model, tp, kv, pp, tokens) * tokens


def host_shapes(catalog: Catalog, accelerator: str) -> list[int]:
    shapes = []
    for count in (1, 2, 4, 8, 16):
        try:
            catalog.default_machine(accelerator, count)
        except UnknownHardwareError:
            continue
        shapes.append(count)
    return shapes


def does_not_fit(
    model: Transformer,
    name: str | None,
    precision: str,
    acc: Accelerator,
    catalog: Catalog,
    tokens: float,
    kv: float,
    tp: int,
    pp: int,
) -> str:
    """Why the weights (and one sequence) do not fit, with the numbers and what would."""
    need = checkpoint_bytes(model, WEIGHT_BYTES[precision])
    name = name or _params(model.parameters)
    g = tp * pp
    have = f"{g} x {acc.name} have" if g > 1 else f"one {acc.name} has"
    text = (
        f"{name} in {precision} needs {_gb(need)} of weights; {have} {_gb(acc.memory_bytes * g)}"
        f" ({HBM_RESERVE_FRACTION:.0%} reserved)"
    )
    if need / g <= acc.memory_bytes * (1.0 - HBM_RESERVE_FRACTION):
        text += f" and no room left for one sequence of {tokens:,.0f} tokens"
    shapes = host_shapes(catalog, acc.name)
    largest = max(shapes, default=1)
    bigger = [*shapes, *(largest * k for k in (2, 3, 4, 6, 8))]
    options = [
        f"perReplica: {n}" + (f" ({n // largest} hosts)" if n > largest else "")
        for n in bigger
        if n > g
        and model.heads % min(n, largest) == 0
        and fits(
            model,
            acc,
            min(n, largest),
            WEIGHT_BYTES[precision],
            tokens,
            kv,
            max(1, n // largest),
        )
    ][:1]
    for other in ("FP8", "FP4", "INT4"):
        smaller = WEIGHT_BYTES[other] < WEIGHT_BYTES[precision]
        units = COMPUTE_PRECISION[other]
        runs = units not in UNITS_WORDS or acc.supports(units)
        if smaller and runs and fits(model, acc, tp, WEIGHT_BYTES[other], tokens, kv, pp):
            options.append(other)
            break
    if options:
        text += "; use " + " or ".join(options)
    return text
