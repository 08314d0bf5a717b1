"""The serving engines' MoE layers, fitted on NVIDIA AIConfigurator's measured MoE operators.

A serving step's MoE layer runs the engine's fused MoE op: the router's top-k, the tokens'
permutation to their experts, the experts' grouped GEMMs (gate and up, the activation, down)
and the weighted sum back. ``calibration/measured/aiconfigurator.json`` holds AIConfigurator's
measurements of that op per chip and engine (``moe``: experts whole or sliced over 8 tensor-
parallel ranks, routing drawn from the power law AIConfigurator serves with, the engine's
fastest kernel per shape; 12-17 expert shapes: Mixtral, Qwen3, DeepSeek-V3, Kimi-K2, Llama 4,
gpt-oss, GLM, MiniMax and others). Each (chip, engine, weight dtype) is fitted, least squares of
the log error, as the step prices a MoE layer (engine.llm_step.step_seconds):

    floor + per_expert x local experts
          + max(touched experts' weights / (f_s x HBM),
                (tokens x k + m0 x touched experts) expert rows' FLOPs / (e_m x shape x peak))

with the touched experts E (1 - (1 - k/E)^tokens) (engine.llm_step.expert_fraction_read), shape
the GEMM shape term of the expert's slice on a rank (engine.expert_slices, the H100 grid's K_p, not
refitted: a slice 8 ways narrow runs its FLOPs slower than the whole expert does): each
expert the step touches computes its rows padded by a tile of m0 rows (16-256), so a grouped
GEMM's efficiency grows with its tokens an expert, as a kernel's M tiles make it; the fixed
part grows with the experts the rank holds (the router's top-k over them, the grouped GEMM's
per-expert offsets and problem sizes: at one token the tables' 8-expert shapes take 30-40 us,
their 256-384-expert ones 85-130 us on the same kernel), 0 where an engine's kernel shows none
(2026-11-29: a floor alone put TensorRT-LLM's block-FP8 op at 70-92 us a layer whatever its
experts, 19-24 % off these tables held out, 11-14 % with the term). What
engine.serving_engines.ENGINE_MOE holds (a test keeps it equal to :func:`derive_engine_moe`).
Without it the step streamed the experts at the dense decode GEMMs' fraction, ran their FLOPs at
the dense GEMMs' rate and had no floor: 13-75 % short of these tables. Each fit is checked by
leaving one expert shape out (refit on the others at the fit's tile, predict its rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import median

import numpy as np

from ringmaster.calibration.aiconfigurator import GEMM_WEIGHT_BYTES, aic_data
from ringmaster.engine.checkpoint_formats import MXFP4_WEIGHT_BYTES
from ringmaster.engine.expert_slices import expert_gemm_width, expert_shape_factor
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_step import expert_fraction_read
from ringmaster.engine.serving_engines import CARRIED_ENGINE_MOE, ENGINE_MOE

# A weight's bytes per MoE dtype: the GEMMs', block-scaled FP8 as FP8 (its scales negligible)
MOE_WEIGHT_BYTES = {
    "bf16": GEMM_WEIGHT_BYTES["bf16"],
    "fp8": GEMM_WEIGHT_BYTES["fp8"],
    "fp8_block": GEMM_WEIGHT_BYTES["fp8"],
    "fp4": GEMM_WEIGHT_BYTES["fp4"],
    # gpt-oss's MXFP4 experts, under 16-bit activations or MXFP8 ones (GPT_OSS_MOE in
    # benchmarks/aiconfigurator/extract.py: the op each engine runs on each chip)
    "mxfp4": MXFP4_WEIGHT_BYTES,
    "mxfp4_mxfp8": MXFP4_WEIGHT_BYTES,
}
# the math's peak: the activations' (MXFP4 weights are dequantised in the kernel under 16-bit
# activations; MXFP8 activations run on the FP8 tensor cores)
MOE_PEAK = {
    "bf16": "BF16",
    "fp8": "FP8",
    "fp8_block": "FP8",
    "fp4": "FP4",
    "mxfp4": "BF16",
    "mxfp4_mxfp8": "FP8",
}
MIN_ROWS = 40  # a (chip, engine, dtype) with fewer rows is not fitted
# The fit's grids: a coarse pass over the whole range, then the fine grid around its best.
FLOORS_US = (0.0, 150.0, 1.0)
PER_EXPERT_US = (0.0, 0.5, 0.02)
STREAM_FRACTIONS = (0.20, 1.0, 0.01)
COMPUTE_FRACTIONS = (0.02, 1.0, 0.01)
COARSE = 5  # grid steps a coarse step spans
TILE_ROWS = (0, 16, 32, 64, 128, 256)  # m0: the grouped kernels' M tiles


@dataclass(frozen=True)
class MoeRows:
    """One chip x engine x dtype's MoE rows: per row, a rank's bytes of all its routed experts,
    the share the tokens touch, its expert FLOPs over the chip's peak, and the measured time."""

    accelerator: str
    engine: str
    dtype: str
    shape: np.ndarray  # (rows, 4): hidden, inter, experts, topk
    stream_bytes: np.ndarray  # the touched experts' weights on one rank
    row_seconds: np.ndarray  # one token row through one expert (its rank's slice) at the peak
    rows: np.ndarray  # tokens x k
    touched: np.ndarray  # the experts the tokens touch
    seconds: np.ndarray

    @property
    def local_experts(self) -> np.ndarray:
        """The experts one rank holds: all of them in these tables (whole or sliced)."""
        return self.shape[:, 2]

    def compute_seconds(self, tile_rows: float) -> np.ndarray:
        return self.row_seconds * (self.rows + tile_rows * self.touched)

    def predicted(
        self,
        floor_us: float,
        per_expert_us: float,
        f_s: float,
        e_m: float,
        tile_rows: float,
        hbm: float,
    ) -> np.ndarray:
        stream = self.stream_bytes / (f_s * hbm)
        fixed = (floor_us + per_expert_us * self.local_experts) * 1e-6
        return fixed + np.maximum(stream, self.compute_seconds(tile_rows) / e_m)

    def subset(self, keep: np.ndarray) -> MoeRows:
        return MoeRows(
            self.accelerator, self.engine, self.dtype, self.shape[keep], self.stream_bytes[keep],
            self.row_seconds[keep], self.rows[keep], self.touched[keep], self.seconds[keep],
        )  # fmt: skip


@lru_cache(maxsize=1)
def moe_rows() -> tuple[MoeRows, ...]:
    out = []
    for t in aic_data()["tables"]:
        rows = t.get("moe") or []
        acc = DEFAULT_CATALOG.accelerator(t["accelerator"])
        for dtype, w in MOE_WEIGHT_BYTES.items():
            mine = np.array([r[1:] for r in rows if r[0] == dtype], float).reshape(-1, 7)
            if len(mine) < MIN_ROWS or not acc.supports(MOE_PEAK[dtype]):
                continue
            tokens, hidden, inter, experts, topk, tp, us = mine.T
            expert_bytes = 3.0 * hidden * inter / tp * w
            touched = experts * expert_fraction_read(1.0 - topk / experts, tokens)
            row_flops = 2.0 * 3.0 * hidden * inter / tp
            width = expert_gemm_width(hidden, inter, tp)
            out.append(
                MoeRows(
                    t["accelerator"],
                    t["engine"],
                    dtype,
                    np.stack([hidden, inter, experts, topk], axis=1),
                    touched * expert_bytes,
                    # at the peak times the expert slice's shape term (engine.expert_slices)
                    row_flops / (acc.peak(MOE_PEAK[dtype]) * expert_shape_factor(width, dtype)),
                    tokens * topk,
                    touched,
                    us * 1e-6,
                )
            )
    return tuple(out)


def _grid(bounds: tuple[float, float, float], step: float, around: float | None) -> np.ndarray:
    lo, hi, fine = bounds
    if around is not None:
        lo, hi = max(lo, around - COARSE * fine), min(hi, around + COARSE * fine)
    return np.round(np.arange(lo, hi + 1e-9, step), 6)


def _search(
    rows: MoeRows,
    hbm: float,
    tile: float,
    floors: np.ndarray,
    per_expert: np.ndarray,
    fs: np.ndarray,
    es: np.ndarray,
) -> tuple[float, float, float, float, float]:
    """(sse, floor us, per-expert us, f_s, e_m) of the grids with the least squared log error
    at tile ``tile``: every floor, and for each every (per-expert, f_s, e_m) at once."""
    stream = rows.stream_bytes[None, None, :] / (fs[:, None, None] * hbm)
    compute = rows.compute_seconds(tile)[None, None, :] / es[None, :, None]
    body = np.maximum(stream, compute)[None]
    local = per_expert[:, None, None, None] * rows.local_experts[None, None, None, :]
    best = (np.inf, 0.0, 0.0, 1.0, 1.0)
    for floor in floors:
        fixed = (floor + local) * 1e-6
        sse = np.sum(np.log((fixed + body) / rows.seconds) ** 2, axis=-1)
        k, i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
        if sse[k, i, j] < best[0]:
            best = (
                float(sse[k, i, j]),
                float(floor),
                float(per_expert[k]),
                float(fs[i]),
                float(es[j]),
            )
    return best


def fit_moe(
    rows: MoeRows,
    tiles: tuple[float, ...] = TILE_ROWS,
    fine: bool = True,
    per_expert_us: float | None = None,
) -> tuple[float, float, float, float, float]:
    """(floor us, per-expert us, f_s, e_m, m0) with the least squared log error: for each tile
    of ``tiles``, a coarse grid over the whole range (5 us, 0.1 us, 0.05, 0.05), then
    (``fine``) the fine one (1 us, 0.02 us, 0.01, 0.01) within a coarse step of its best;
    ``per_expert_us`` given: held at it."""
    hbm = DEFAULT_CATALOG.accelerator(rows.accelerator).memory_bandwidth
    per = PER_EXPERT_US if per_expert_us is None else (per_expert_us, per_expert_us, 1.0)
    grids = (FLOORS_US, per, STREAM_FRACTIONS, COMPUTE_FRACTIONS)
    best = (np.inf, 0.0, 0.0, 1.0, 1.0, 0.0)
    for tile in tiles:
        found = _search(rows, hbm, tile, *(_grid(g, COARSE * g[2], None) for g in grids))
        if fine:
            found = _search(
                rows, hbm, tile, *(_grid(g, g[2], c) for g, c in zip(grids, found[1:], strict=True))
            )
        if found[0] < best[0]:
            best = (*found, float(tile))
    _, floor, per_expert, f_s, e_m, tile = best
    return round(floor, 1), round(per_expert, 2), round(f_s, 2), round(e_m, 2), tile


@lru_cache(maxsize=1)
def derive_engine_moe() -> dict[tuple[str, str, str], tuple[float, float, float, float, float]]:
    """What engine.serving_engines.ENGINE_MOE holds: each measured table's fit, and the ops
    CARRIED_ENGINE_MOE takes from another engine on the same chip."""
    fits = {(r.accelerator, r.engine, r.dtype): fit_moe(r) for r in moe_rows()}
    for (engine, dtype), source in CARRIED_ENGINE_MOE.items():
        for (accelerator, measured, table), terms in list(fits.items()):
            if measured == source and table == dtype:
                fits.setdefault((accelerator, engine, dtype), terms)
    return fits


@dataclass(frozen=True)
class MoeCheck:
    label: str
    rows: int
    shapes: int
    fitted: float  # median |error| of the fit on its own rows
    held_out: float  # median over shapes of the shape's median |error| refitted without it
    worst_held_out: float


@lru_cache(maxsize=1)
def moe_checks() -> tuple[MoeCheck, ...]:
    """Each fit's own error, and each expert shape's predicted by a refit without it."""
    out = []
    for rows in moe_rows():
        hbm = DEFAULT_CATALOG.accelerator(rows.accelerator).memory_bandwidth
        fitted = ENGINE_MOE[(rows.accelerator, rows.engine, rows.dtype)]
        own = np.abs(rows.predicted(*fitted, hbm) / rows.seconds - 1.0)
        shapes = np.unique(rows.shape, axis=0)
        held = []
        for shape in shapes:
            alone = np.all(rows.shape == shape, axis=1)
            if alone.all():
                continue
            # at the fit's tile and per-expert term, as a refit of the rest would hold them
            refit = fit_moe(rows.subset(~alone), (fitted[4],), fine=False, per_expert_us=fitted[1])
            mine = rows.subset(alone)
            held.append(float(np.median(np.abs(mine.predicted(*refit, hbm) / mine.seconds - 1))))
        out.append(
            MoeCheck(
                f"{rows.accelerator} {rows.engine} {rows.dtype}",
                len(rows.seconds),
                len(shapes),
                float(np.median(own)),
                median(held) if held else float("nan"),
                max(held) if held else float("nan"),
            )
        )
    return tuple(out)


def render_moe_section() -> str:
    """The MoE block of ``ringmaster calibrate``: each engine's MoE op fit per chip and dtype."""
    lines = [
        "Serving engines' MoE layers (engine.serving_engines.ENGINE_MOE; AIConfigurator's MoE"
        " tables, power-law routing, experts whole or sliced 8 ways): floor + per-expert x"
        " local experts + max(touched experts' weights / (f_s HBM), (tokens k + m0 touched)"
        " rows' FLOPs / (e_m shape peak)), shape the expert slice's (engine.expert_slices),"
        " fitted per chip x engine x dtype; held out: each expert"
        " shape refitted without it",
        f"{'table':<34} {'floor us':>8} {'/expert':>7} {'f_s':>5} {'e_m':>5} {'m0':>4} {'rows':>5}"
        f" {'shapes':>6} {'fitted':>7} {'held out':>9} {'worst':>7}",
    ]
    # the stored fit (a test keeps ENGINE_MOE equal to derive_engine_moe, a 20 s refit)
    fits = ENGINE_MOE
    for c in moe_checks():
        accelerator, engine, dtype = c.label.split(" ")
        floor, per_expert, f_s, e_m, tile = fits[(accelerator, engine, dtype)]
        lines.append(
            f"{c.label:<34} {floor:>8.0f} {per_expert:>7.2f} {f_s:>5.2f} {e_m:>5.2f} {tile:>4.0f}"
            f" {c.rows:>5}"
            f" {c.shapes:>6} {c.fitted:>7.1%} {c.held_out:>9.1%} {c.worst_held_out:>7.1%}"
        )
    for (engine, dtype), source in sorted(CARRIED_ENGINE_MOE.items()):
        chips = sorted(a for a, e, d in fits if (e, d) == (engine, dtype))
        lines.append(
            f"carried: {engine} {dtype} on {', '.join(chips)} is {source}'s fit on the chip (the"
            " same kernels, engine.serving_engines.CARRIED_ENGINE_MOE)"
        )
    held = [c.held_out for c in moe_checks()]
    lines.append(
        f"held out, median over {len(held)} fits: {median(held):.1%} (before, the step's dense"
        " GEMM terms and no floor put these MoE ops 13-75 % short, docs/engine.md)"
    )
    return "\n".join(lines)
