"""TensorRT-LLM's NVFP4 decode GEMMs as it serves them (engine.serving_engines
.SERVED_FP4_DECODE_GEMM), fitted on AIConfigurator's closed-loop B200 runs.

AIConfigurator's operator table for TensorRT-LLM's NVFP4 GEMMs was timed outside the engine's
autotuner, on its fallback kernel (the comment at SERVED_FP4_DECODE_GEMM says where). The closed-
loop sample (calibration.closed_loop_runs) holds the same model served at FP4 and at FP8 weights on
the same B200s, tensor parallelism, lengths and clients. The ratio of the two TPOTs keeps what the
weights change (the dense GEMMs: their streaming rate and their cost a call) and cancels what the
steps share (attention over the FP8 cache both engines keep, the all-reduce, the host's gaps), so
the two GEMM terms are fitted on it: the streaming rate where the weights dominate (TP1), the cost
a call where they are small (TP8). The fit's runs are the fitted rows of their cell in the serving
evidence matrix (closed_loop_runs.FITTED_CELLS); TensorRT-LLM 1.0's NVFP4 performance tables, its
MoE NVFP4 rows and the GB200's runs stay checked.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from statistics import median

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.engine import serving_engines as E

ACCELERATOR = E.SERVED_FP4_FITTED_ON
KEY = (ACCELERATOR, "trtllm")
GPU, ENGINE = "B200", "TensorRT-LLM"
# The resolution the constants are kept at (and the fit's last step): streaming ratio, us a call.
RESOLUTION = (0.01, 0.1)


@dataclass(frozen=True)
class RunPair:
    """An FP4 run and the FP8 run at its tensor parallelism, lengths and clients."""

    fp4: dict[str, str]  # the FP4 run's row (closed_loop_runs.RUNS)
    tp: int
    measured: float  # the FP4 run's TPOT over the FP8 run's
    fp8_predicted_ms: float  # the FP8 run's TPOT as the engine has it (no FP4 term in it)


@cache
def run_pairs() -> tuple[RunPair, ...]:
    """The matched FP4 / FP8 runs of TensorRT-LLM on the B200 whose TPOTs both enter the
    evidence (ClosedLoopRun.tpot_judged)."""
    judged = {r.id: r for r in CLR.closed_loop_runs() if r.tpot_judged}
    with CLR.RUNS.open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["gpu"] == GPU and r["engine"] == ENGINE]

    def key(r: dict[str, str]) -> tuple[str, str, str, str, str]:
        return (r["model"], r["tp"], r["input"], r["output"], r["concurrency"])

    fp8 = {key(r): r for r in rows if r["weights"] == "fp8" and r["id"] in judged}
    pairs = []
    for r in rows:
        other = fp8.get(key(r))
        if r["weights"] != "fp4" or other is None or r["id"] not in judged:
            continue
        pairs.append(
            RunPair(
                fp4=r,
                tp=int(r["tp"]),
                measured=float(r["tpot_ms"]) / float(other["tpot_ms"]),
                fp8_predicted_ms=judged[other["id"]].predicted_tpot_ms,
            )
        )
    return tuple(pairs)


@contextmanager
def _served(stream: float, extra_us: float) -> Iterator[None]:
    """SERVED_FP4_DECODE_GEMM's fitted entry at (stream, extra_us) for the block."""
    saved = E.SERVED_FP4_DECODE_GEMM.get(KEY)
    E.SERVED_FP4_DECODE_GEMM[KEY] = (stream, extra_us)
    try:
        yield
    finally:
        if saved is None:
            del E.SERVED_FP4_DECODE_GEMM[KEY]
        else:
            E.SERVED_FP4_DECODE_GEMM[KEY] = saved


def predicted_ratios(stream: float, extra_us: float) -> list[float]:
    """Each pair's FP4 TPOT over its FP8 one as the engine has them at (stream, extra_us)."""
    with _served(stream, extra_us):
        return [CLR.predict(p.fp4).tpot * 1e3 / p.fp8_predicted_ms for p in run_pairs()]


def misfit(stream: float, extra_us: float) -> float:
    """Root mean square of log(predicted ratio / measured ratio) over the pairs."""
    logs = [
        math.log(pred / p.measured)
        for pred, p in zip(predicted_ratios(stream, extra_us), run_pairs(), strict=True)
    ]
    return math.sqrt(sum(x * x for x in logs) / len(logs))


def fit_served_fp4_decode(start: tuple[float, float] | None = None) -> tuple[float, float]:
    """(streaming ratio, us a call) minimising ``misfit``: a pattern search from ``start`` (the
    operator table's fallback entry unless given), its steps halved down to RESOLUTION, each
    coordinate kept on its grid."""
    stream, extra = start or E.ENGINE_FP4_DECODE_GEMM[KEY]
    steps = [RESOLUTION[0] * 8, RESOLUTION[1] * 8]
    best = misfit(stream, extra)
    while True:
        moved = False
        for axis in (0, 1):
            for sign in (1.0, -1.0):
                point = [stream, extra]
                point[axis] = round(point[axis] + sign * steps[axis], 3)
                if point[0] <= 0.0 or point[1] < 0.0:
                    continue
                value = misfit(*point)
                if value < best:
                    best, (stream, extra), moved = value, point, True
        if not moved:
            if steps[0] <= RESOLUTION[0] + 1e-9:
                return round(stream, 2), round(extra, 1)
            steps = [steps[0] / 2, steps[1] / 2]


def ratios_by_tp(stream: float, extra_us: float) -> dict[int, tuple[float, float]]:
    """Tensor parallelism -> (measured, predicted) median FP4 / FP8 TPOT ratio."""
    by: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for pred, p in zip(predicted_ratios(stream, extra_us), run_pairs(), strict=True):
        by[p.tp].append((p.measured, pred))
    return {tp: (median(m for m, _ in v), median(x for _, x in v)) for tp, v in sorted(by.items())}


def render_served_fp4_section() -> str:
    """calibrate's account of the fit: the fallback table's ratios against the served ones."""
    table = E.ENGINE_FP4_DECODE_GEMM[KEY]
    served = E.SERVED_FP4_DECODE_GEMM[KEY]
    before, after = ratios_by_tp(*table), ratios_by_tp(*served)
    by_tp = ", ".join(
        f"TP{tp} {m:.2f} (table {before[tp][1]:.2f}, served {after[tp][1]:.2f})"
        for tp, (m, _) in before.items()
    )
    return (
        f"TensorRT-LLM's NVFP4 decode GEMMs as served on the {ACCELERATOR} (engine.serving_engines"
        f".SERVED_FP4_DECODE_GEMM): its operator table is the autotuner's fallback kernel "
        f"(streaming {table[0]:g} of the bf16 rate, {table[1]:g} us a call more); fitted on "
        f"{len(run_pairs())} closed-loop FP4 / FP8 run pairs ({CLR.SOURCE}): streaming "
        f"{served[0]:g}, {served[1]:g} us a call, misfit {100 * misfit(*served):.1f}% "
        f"(table {100 * misfit(*table):.1f}%). FP4 TPOT over FP8, median by tensor parallelism, "
        f"measured (predicted): {by_tp}. The GB200 carries the B200's."
    )
