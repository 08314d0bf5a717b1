"""A serving step's MoE layers as the engine's own fused MoE op runs them (serving_engines
.ENGINE_MOE, fitted on AIConfigurator's measured tables: calibration.aic_moe): the routed
experts' streaming fraction of the HBM, their FLOPs' fraction of the peak at the expert slice's
GEMM shape (engine.expert_slices), the M tile each touched expert pads its rows to, and a fixed
part a layer that grows with the experts a rank holds. Without a table (a chip or engine it was
not measured on, or a profiled pool's ceilings) the experts keep the dense decode terms the
step carries. engine.llm_step.serving_terms reads :func:`moe_step_terms`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.checkpoint_formats import MXFP4_EXPERTS
from ringmaster.engine.expert_slices import expert_gemm_width, expert_shape_factor
from ringmaster.engine.hardware import Accelerator
from ringmaster.engine.serving_engines import engine_moe
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import US

F64 = NDArray[np.float64]
# Activations travel in 16-bit whatever the weights are (FP8 and W4A16 kernels emit BF16/FP16).
ACTIVATION_BYTES = 2.0
# The M tile of a MoE op with 4-bit weights under 16-bit math (W4A16): Marlin's MoE kernel takes
# the first of 8, 16, 32, 48, 64 rows with tokens x top-k / experts / rows < 0.9, 8 at decode
# batches (vllm-project/vllm vllm/model_executor/layers/fused_moe/fused_marlin_moe.py @ 129ab7c6).
# The engines' measured MoE tables (serving_engines.ENGINE_MOE) are 16-bit, FP8 and FP4 kernels
# tiled at 32-128 rows; a W4A16 step keeps their floor and fractions, at this tile.
W4A16_MOE_TILE_ROWS = 8.0


class MoeStepTerms(NamedTuple):
    expert_rate: F64  # FLOP/s the replica's ranks run the routed experts' FLOPs at
    expert_hbm: F64  # bytes/s the touched experts stream at
    floor_seconds: float  # the op's fixed part, every MoE layer of a step
    tile_tokens: float  # the M tiles' padding, in tokens of k experts at full touch


def expert_slot_ratio(model: Transformer, redundant_experts: int) -> float:
    """Expert slots (routed experts plus redundant copies) over the routed experts."""
    return (model.experts + redundant_experts) / model.experts if model.experts else 1.0


def moe_step_terms(
    model: Transformer,
    accelerator: Accelerator,
    tp: F64,
    *,
    peak_flops: ArrayLike,
    fraction: ArrayLike,
    hbm: F64,
    weight_bytes: ArrayLike,
    compute_precision: str,
    mxfp4_experts: bool,
    serving_engine: str | None,
    measured: bool,
    expert_parallel: int,
    redundant_experts: int,
    carried_rate: F64,
    carried_hbm: F64,
) -> MoeStepTerms:
    """The routed experts' terms on ``tp`` ranks: the engine's measured op where it has one on
    the chip (``measured``: no profiled pool's ceilings in its place), else ``carried_rate`` and
    ``carried_hbm`` (the dense decode terms at the experts' shape) with no floor and no tile.
    ``mxfp4_experts``: a checkpoint's MXFP4 experts (engine.checkpoint_formats) on the engine's
    MXFP4 op; 4-bit weights under 16-bit math on the 16-bit op's table tile at Marlin's rows."""
    key = MXFP4_EXPERTS if mxfp4_experts else compute_precision
    op = (
        engine_moe(accelerator.name, serving_engine, key)
        if model.experts > 1 and measured
        else None
    )
    if op is None:
        return MoeStepTerms(carried_rate, carried_hbm, 0.0, 0.0)
    (floor_us, per_expert_us, f_s, e_m, tile_rows), dtype = op
    w4a16 = compute_precision in ("bf16", "fp16") and bool(
        np.all(np.asarray(weight_bytes) < ACTIVATION_BYTES)
    )
    if w4a16 and dtype == "bf16":  # 4-bit weights on the 16-bit op's table
        tile_rows = W4A16_MOE_TILE_ROWS
    # the op's math at its activations' peak (MXFP8 activations: the FP8 units)
    peak = accelerator.peak("fp8") if dtype == "mxfp4_mxfp8" else peak_flops
    slices = tp if expert_parallel == 1 else np.ones_like(tp)  # experts sliced, or whole
    width = expert_gemm_width(model.hidden, model.expert_ffn_hidden, slices, model.gated_ffn)
    rate = np.asarray(peak, dtype=np.float64) * tp * e_m * np.asarray(fraction, dtype=np.float64)
    slots = expert_slot_ratio(model, redundant_experts)
    # the experts one rank holds: all of them sliced, or its share under expert parallelism
    local_experts = model.experts * slots / expert_parallel
    return MoeStepTerms(
        rate * expert_shape_factor(width, dtype),
        hbm * f_s,
        float(model.moe_layers * (floor_us + per_expert_us * local_experts) * US),
        float(tile_rows * model.experts * slots / model.active_experts),
    )
