"""TensorRT-LLM's NVFP4 GEMMs as it serves them (engine.serving_engines.SERVED_FP4_DECODE_GEMM,
SERVED_FP4_GEMM_RATE), fitted on AIConfigurator's closed-loop B200 runs.

AIConfigurator's operator table for TensorRT-LLM's NVFP4 GEMMs was timed outside the engine's
autotuner, on its fallback kernel (the comment at SERVED_FP4_DECODE_GEMM says where). The closed-
loop sample (calibration.closed_loop_runs) holds the same model served at FP4 and at FP8 weights on
the same B200s, tensor parallelism, lengths and clients. The ratio of the two TPOTs keeps what the
weights change (the dense GEMMs: their streaming rate and their cost a call) and cancels what the
steps share (attention over the FP8 cache both engines keep, the all-reduce, the host's gaps), so
the two decode terms are fitted on it: the streaming rate where the weights dominate (TP1), the
cost a call where they are small (TP8). Its prompt GEMMs come from the same fallback table, and
their ratio is fitted alike on the ratio of the two TTFTs where 8,192-token prompts make the first
token and neither run waits for a slot. The two fits alternate until neither moves (each reads a
little of the other). The fit's runs are the fitted rows of their cell in the serving evidence
matrix (closed_loop_runs.FITTED_CELLS); TensorRT-LLM 1.0's NVFP4 performance tables, its MoE NVFP4
rows and the GB200's runs stay checked.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from statistics import median

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.engine import serving_engines as E

ACCELERATOR = E.SERVED_FP4_FITTED_ON
KEY = (ACCELERATOR, "trtllm")
RATE_KEY = (ACCELERATOR, "trtllm", "fp4")
GPU, ENGINE = "B200", "TensorRT-LLM"
# The resolution the constants are kept at (the searches' last step): the decode GEMMs' streaming
# ratio and us a call; the prompt GEMMs' ratio (ENGINE_GEMM_RATE's).
RESOLUTION = (0.01, 0.1)
PROMPT_RESOLUTION = 0.001
# The prompts whose first token the prompt's GEMMs make (the sample's longest are 8,192 tokens).
PROMPT_PAIR_MIN_INPUT = 4096


@dataclass(frozen=True)
class RunPair:
    """An FP4 run and the FP8 run at its tensor parallelism, lengths and clients."""

    fp4: dict[str, str]  # the FP4 run's row (closed_loop_runs.RUNS)
    tp: int
    measured: float  # the FP4 run's TPOT (TTFT) over the FP8 run's
    fp8_predicted_ms: float  # the FP8 run's TPOT (TTFT) as the engine has it: no FP4 term in it


def _pairs(metric: str, keep: Callable[[CLR.ClosedLoopRun], bool]) -> tuple[RunPair, ...]:
    """The matched FP4 / FP8 runs of TensorRT-LLM on the B200 that both pass ``keep``, by their
    ``metric`` ("tpot" or "ttft")."""
    kept = {r.id: r for r in CLR.closed_loop_runs() if keep(r)}
    rows = [
        r
        for r in CLR.run_rows()
        if r["gpu"] == GPU and r["engine"] == ENGINE and r["model"] in CLR.FIT_MODELS
    ]

    def key(r: dict[str, str]) -> tuple[str, str, str, str, str]:
        return (r["model"], r["tp"], r["input"], r["output"], r["concurrency"])

    fp8 = {key(r): r for r in rows if r["weights"] == "fp8" and r["id"] in kept}
    pairs = []
    for r in rows:
        other = fp8.get(key(r))
        if r["weights"] != "fp4" or other is None or r["id"] not in kept:
            continue
        pairs.append(
            RunPair(
                fp4=r,
                tp=int(r["tp"]),
                measured=float(r[f"{metric}_ms"]) / float(other[f"{metric}_ms"]),
                fp8_predicted_ms=float(getattr(kept[other["id"]], f"predicted_{metric}_ms")),
            )
        )
    return tuple(pairs)


@cache
def run_pairs() -> tuple[RunPair, ...]:
    """Every matched pair's TPOTs."""
    return _pairs("tpot", lambda r: True)


@cache
def prompt_pairs() -> tuple[RunPair, ...]:
    """The pairs whose first token the prompt makes: PROMPT_PAIR_MIN_INPUT tokens or more, and
    no slot to wait for (a queue's wait is the decodes')."""
    return _pairs("ttft", lambda r: r.input >= PROMPT_PAIR_MIN_INPUT and not r.waits_for_slot)


@contextmanager
def _served(
    stream: float | None = None, extra_us: float | None = None, prompt: float | None = None
) -> Iterator[None]:
    """The fitted entries at the values given (None: as stored) for the block."""
    decode = E.SERVED_FP4_DECODE_GEMM[KEY]
    rate = E.SERVED_FP4_GEMM_RATE[RATE_KEY]
    E.SERVED_FP4_DECODE_GEMM[KEY] = (
        decode[0] if stream is None else stream,
        decode[1] if extra_us is None else extra_us,
    )
    E.SERVED_FP4_GEMM_RATE[RATE_KEY] = (rate[0], rate[1] if prompt is None else prompt)
    try:
        yield
    finally:
        E.SERVED_FP4_DECODE_GEMM[KEY], E.SERVED_FP4_GEMM_RATE[RATE_KEY] = decode, rate


def predicted_ratios(stream: float, extra_us: float, prompt: float | None = None) -> list[float]:
    """Each TPOT pair's FP4 TPOT over its FP8 one as the engine has them."""
    with _served(stream, extra_us, prompt):
        return [CLR.predict(p.fp4).tpot * 1e3 / p.fp8_predicted_ms for p in run_pairs()]


def predicted_prompt_ratios(
    prompt: float, decode: tuple[float, float] | None = None
) -> list[float]:
    """Each prompt pair's FP4 TTFT over its FP8 one at the prompt ratio ``prompt``."""
    stream, extra = decode if decode is not None else (None, None)
    with _served(stream, extra, prompt):
        return [CLR.predict(p.fp4).ttft * 1e3 / p.fp8_predicted_ms for p in prompt_pairs()]


def _rms_log(predicted: list[float], pairs: tuple[RunPair, ...]) -> float:
    """Root mean square of log(predicted ratio / measured ratio)."""
    logs = [math.log(x / p.measured) for x, p in zip(predicted, pairs, strict=True)]
    return math.sqrt(sum(x * x for x in logs) / len(logs))


def misfit(stream: float, extra_us: float, prompt: float | None = None) -> float:
    """The TPOT pairs' misfit at the decode terms (stream, extra_us)."""
    return _rms_log(predicted_ratios(stream, extra_us, prompt), run_pairs())


def prompt_misfit(prompt: float, decode: tuple[float, float] | None = None) -> float:
    """The TTFT pairs' misfit at the prompt ratio ``prompt``."""
    return _rms_log(predicted_prompt_ratios(prompt, decode), prompt_pairs())


def _pattern_search(
    objective: Callable[[list[float]], float], start: list[float], resolution: list[float]
) -> list[float]:
    """A compass search from ``start``: steps of 8 x ``resolution`` halved down to it, every
    coordinate kept positive."""
    point, steps = list(start), [8.0 * r for r in resolution]
    best = objective(point)
    while True:
        moved = False
        for axis in range(len(point)):
            for sign in (1.0, -1.0):
                trial = list(point)
                trial[axis] = round(trial[axis] + sign * steps[axis], 4)
                if trial[axis] <= 0.0:
                    continue
                value = objective(trial)
                if value < best:
                    best, point, moved = value, trial, True
        if not moved:
            if steps[0] <= resolution[0] + 1e-9:
                return point
            steps = [s / 2.0 for s in steps]


def fit_served_fp4_decode(
    start: tuple[float, float] | None = None, prompt: float | None = None
) -> tuple[float, float]:
    """(streaming ratio, us a call) minimising ``misfit`` at the prompt ratio ``prompt`` (None:
    the stored one), from ``start`` (the operator table's fallback entry unless given)."""
    first = list(start or E.ENGINE_FP4_DECODE_GEMM[KEY])
    found = _pattern_search(lambda x: misfit(x[0], x[1], prompt), first, list(RESOLUTION))
    return round(found[0], 2), round(found[1], 1)


def fit_served_fp4_prompt(
    start: float | None = None, decode: tuple[float, float] | None = None
) -> float:
    """The prompt GEMMs' ratio minimising ``prompt_misfit`` at the decode terms ``decode``
    (None: the stored ones), from ``start`` (the table's ratio unless given)."""
    first = [start or E.ENGINE_GEMM_RATE[RATE_KEY][1]]
    found = _pattern_search(lambda x: prompt_misfit(x[0], decode), first, [PROMPT_RESOLUTION])
    return round(found[0], 3)


def fit_served_fp4() -> tuple[tuple[float, float], float]:
    """Both fits from the operator table's entries, alternated until neither moves."""
    decode: tuple[float, float] = E.ENGINE_FP4_DECODE_GEMM[KEY]
    prompt = E.ENGINE_GEMM_RATE[RATE_KEY][1]
    for _ in range(6):
        new_decode = fit_served_fp4_decode(decode, prompt)
        new_prompt = fit_served_fp4_prompt(prompt, new_decode)
        if (new_decode, new_prompt) == (decode, prompt):
            break
        decode, prompt = new_decode, new_prompt
    return decode, prompt


def _by_tp(predicted: list[float], pairs: tuple[RunPair, ...]) -> dict[int, tuple[float, float]]:
    """Tensor parallelism -> (measured, predicted) median ratio."""
    by: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for x, p in zip(predicted, pairs, strict=True):
        by[p.tp].append((p.measured, x))
    return {tp: (median(m for m, _ in v), median(x for _, x in v)) for tp, v in sorted(by.items())}


def ratios_by_tp(
    stream: float, extra_us: float, prompt: float | None = None
) -> dict[int, tuple[float, float]]:
    """Tensor parallelism -> (measured, predicted) median FP4 / FP8 TPOT ratio."""
    return _by_tp(predicted_ratios(stream, extra_us, prompt), run_pairs())


def prompt_ratios_by_tp(
    prompt: float, decode: tuple[float, float] | None = None
) -> dict[int, tuple[float, float]]:
    """Tensor parallelism -> (measured, predicted) median FP4 / FP8 TTFT ratio."""
    return _by_tp(predicted_prompt_ratios(prompt, decode), prompt_pairs())


def render_served_fp4_section() -> str:
    """calibrate's account of the fits: the fallback table's ratios against the served ones."""
    table, served = E.ENGINE_FP4_DECODE_GEMM[KEY], E.SERVED_FP4_DECODE_GEMM[KEY]
    table_prompt = E.ENGINE_GEMM_RATE[RATE_KEY][1]
    prompt = E.SERVED_FP4_GEMM_RATE[RATE_KEY][1]

    def line(before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]]) -> str:
        return ", ".join(
            f"TP{tp} {m:.2f} (table {before[tp][1]:.2f}, served {after[tp][1]:.2f})"
            for tp, (m, _) in after.items()
        )

    # "table": every term the operator table's, "served": every term fitted
    tpot = line(ratios_by_tp(*table, table_prompt), ratios_by_tp(*served))
    ttft = line(prompt_ratios_by_tp(table_prompt, table), prompt_ratios_by_tp(prompt))
    return (
        f"TensorRT-LLM's NVFP4 GEMMs as served on the {ACCELERATOR} (engine.serving_engines"
        ".SERVED_FP4_DECODE_GEMM, SERVED_FP4_GEMM_RATE): its operator table is the autotuner's "
        f"fallback kernel (decode: streaming {table[0]:g} of the bf16 rate, {table[1]:g} us a "
        f"call more; prompt: {table_prompt:g} of the H100's FP8 fraction); fitted on "
        f"{len(run_pairs())} closed-loop FP4 / FP8 TPOT pairs and {len(prompt_pairs())} TTFT "
        f"pairs of {PROMPT_PAIR_MIN_INPUT:,}+-token prompts ({CLR.SOURCE}): streaming "
        f"{served[0]:g}, {served[1]:g} us a call (misfit {100 * misfit(*served):.1f}%, table "
        f"{100 * misfit(*table, table_prompt):.1f}%), prompt {prompt:g} (misfit "
        f"{100 * prompt_misfit(prompt):.1f}%, table "
        f"{100 * prompt_misfit(table_prompt, table):.1f}%). FP4 over FP8, median by tensor "
        f"parallelism, measured (predicted): TPOT {tpot}; TTFT "
        f"{ttft}. The GB200 carries the B200's."
    )
