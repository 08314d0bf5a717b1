"""The shape of a routed expert's GEMMs, as one narrow-side width (engine.llm_step's
decode_gemm_width for the experts): what an expert sliced over tensor-parallel ranks loses.

A GEMM's rate at a size grows with its narrow side as 1 / (1 + K_p / width) (the shape term,
K_p = engine.ceilings.H100_GEMM_HALF_DIM, fitted on the H100's measured GEMM grid): an expert
sliced 8 ways (DeepSeek-V3's 2,048-wide expert at 256 a rank) has a few N tiles to spread over
the chip's SMs where a whole one has many. The engines' MoE ops measured by AIConfigurator show
it (calibration.aic_moe): at 1,024-16,384 tokens the same expert shape sliced 8 ways runs 2-3x
slower against its FLOPs than whole, which one efficiency a table cannot hold.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.ceilings import H100_GEMM_HALF_DIM

F64 = NDArray[np.float64]
# The half-dimension of a MoE op's math: 16-bit (and W4A16, dequantised to it) at bf16's, 8- and
# 4-bit activations at fp8's (the H100 grid has no FP4 GEMM; Blackwell's FP4 takes FP8's shape).
MOE_GEMM_KEY = {
    "bf16": "bf16",
    "fp16": "bf16",
    "mxfp4": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8",
    "fp4": "fp8",
    "mxfp4_mxfp8": "fp8",
}


def expert_gemm_width(
    hidden: ArrayLike, ffn: ArrayLike, split: ArrayLike, gated: bool = True
) -> F64:
    """The FLOP-weighted narrow side of an expert's gate + up (K hidden, N (2) ffn / split) and
    down (K ffn / split, N hidden) GEMMs on a rank that holds 1 / ``split`` of it."""
    s = np.asarray(split, dtype=np.float64)
    h = np.asarray(hidden, dtype=np.float64)
    f = np.asarray(ffn, dtype=np.float64)
    up_n = (2.0 if gated else 1.0) * f
    gemms = ((h, up_n / s), (f / s, h))
    flops = sum(k * n for k, n in gemms)
    return np.asarray(flops / sum(k * n / np.minimum(k, n) for k, n in gemms), dtype=np.float64)


def expert_shape_factor(width: ArrayLike, dtype: str) -> F64:
    """1 / (1 + K_p / width): the share of its fitted efficiency an expert GEMM of ``width``
    reaches in a MoE op of ``dtype`` (MOE_GEMM_KEY)."""
    half = H100_GEMM_HALF_DIM[MOE_GEMM_KEY.get(dtype, "bf16")]
    return np.asarray(1.0 / (1.0 + half / np.asarray(width, dtype=np.float64)), dtype=np.float64)
