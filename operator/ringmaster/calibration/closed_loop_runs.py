"""Closed-loop serving runs measured on real GPUs, held against the engine (checked; TensorRT-LLM's
B200 FP4 runs fit its served NVFP4 GEMMs, FITTED_CELLS).

``measured/aiconfigurator_silicon.csv`` is the part of AIConfigurator's silicon sample
(ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/silicon_sample.csv @
095f58a51c4ca8e61b66ec108d86f223f8d559ce, Apache-2.0; benchmarks/aiconfigurator/silicon.py writes
it) that the engine can state: vLLM, SGLang and TensorRT-LLM serving Llama 3.1 8B and 70B on one
H100, H200 or B200 replica (tensor parallelism 1-8), at fixed input and output lengths, under a
closed loop of 4-512 clients; each run's TTFT and TPOT in milliseconds, as the AIConfigurator team
measured them (the sample does not say whether they are means or medians; AIConfigurator compares
its own predictions with them as they stand). They are the only runs of vLLM and SGLang on NVIDIA
parts the project holds.

Each run is the engine's step (engine.llm_step: the engine's terms as a plan has them, the run's
weights, the cache its engine defaults to) in a closed loop (engine.llm_closed_loop) with the
cache the engine's memory fraction leaves, the default token budget and no max-num-seqs below the
concurrency (4-512 clients; every engine's default cap is above). TPOT is the loop's mean step,
the steps that carry a prompt among those that do not, and every run's enters the serving
evidence matrix: the sample's TPOT is a mean. Where the prompts make the mean step 1.5-5x the
step of the decodes alone (93 of TensorRT-LLM's H100 runs, short answers behind 1,024-4,096-token
prompts) the model's mean step holds them at 6.1 % median |error| (+3.3 %); a median inter-token
gap would be the decodes' step there, which is 50 % short. TTFT is reported apart: the run's mean,
the loop's steady state and its starting wave (the clients' first prompts at once,
engine.llm_closed_loop.starting_wave) in one of SAMPLE_ROUNDS requests. The sample states neither
its harness's requests per client nor its warm-up; SAMPLE_ROUNDS is fitted on one cell's TTFTs (vLLM
on the H200, FITTED_TTFT_CELL) and checked on the rest. What the runs still carry beyond the model
(the median milliseconds) is the request's path outside the engine's steps (HTTP, tokenising,
admission), not in the model.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import median

from ringmaster.calibration import serving_engines as SE
from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_closed_loop as CL
from ringmaster.engine import llm_step as S
from ringmaster.engine.serving_engines import serving_engine

RUNS = Path(__file__).resolve().parent / "measured" / "aiconfigurator_silicon.csv"
SOURCE = (
    "ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/systems/silicon_sample.csv "
    "@ 095f58a5"
)
# (gpu, engine, weights) of the runs a constant is fitted on: TensorRT-LLM's FP4 runs on the B200
# fit its served NVFP4 GEMMs (calibration.served_fp4), as their TPOT over the FP8 runs'.
FITTED_CELLS = frozenset({("B200", "TensorRT-LLM", "FP4")})
# The models those fits (FITTED_CELLS, SAMPLE_ROUNDS, calibration.served_fp4) were made on: Llama
# 3.1 8B and 70B, the sample's first extract. Every other model's runs (Qwen3-32B and the
# mixtures of experts, taken in on 2026-11-29) are checked only, in every cell.
FIT_MODELS = frozenset({"llama-3.1-8b", "llama-3.1-70b"})
# The requests a client sends in a run, over which the starting wave's extra wait spreads: fitted
# on FITTED_TTFT_CELL's TTFTs (fit_sample_rounds; a test keeps it equal to its fit), as the rounds
# at which their predicted / measured TTFT has a median of 1. AIConfigurator's own aiperf template
# sends 20 a client after 2 a client of warm-up (src/aiconfigurator/generator/config/
# backend_templates/benchmark/bench_run.sh.j2 @ 095f58a5; aiperf waits for the warm-up's answers
# before it measures, ai-dynamo/aiperf docs/tutorials/warmup.md @ 13992dbd): whether the sample ran
# about 9 rounds, or 20 whose starting wave took two rounds to break up, it cannot tell.
SAMPLE_ROUNDS = 9.02
FITTED_TTFT_CELL = ("H200", "vLLM", "FP8")


@dataclass(frozen=True)
class ClosedLoopRun:
    id: str
    engine: str
    version: str
    gpu: str  # the serving tables' name: H100, H200, B200
    model: str
    precision: str  # the weights': FP8, BF16, FP4
    tp: int
    attention_dp: int  # attention data-parallel groups of tp ranks (1: none)
    ep: int  # expert-parallel degree (1: the experts sliced over the ranks, or a dense model)
    input: int
    output: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    predicted_ttft_ms: float
    predicted_tpot_ms: float
    waits_for_slot: bool  # more clients than the model's slots: TTFT holds a queue
    prompt_share: float  # the mean step over a step of its decodes alone, - 1
    steady_ttft_ms: float  # the loop's steady state's TTFT (no starting wave)
    wave_ttft_ms: float  # the mean TTFT of the clients' first requests, which start together

    @property
    def moe(self) -> bool:
        """A mixture of experts' run (a cell of its own in the serving evidence matrix)."""
        return SE.MODELS[self.model].is_moe

    @property
    def cell(self) -> tuple[str, str, str]:
        return (self.gpu, self.engine, self.precision)

    @property
    def role(self) -> str:
        """fitted where a constant was fitted on the run (FITTED_CELLS, FIT_MODELS), else
        checked."""
        fitted = self.cell in FITTED_CELLS and self.model in FIT_MODELS
        return "fitted" if fitted else "checked"

    @property
    def ttft_role(self) -> str:
        """fitted in FITTED_TTFT_CELL (SAMPLE_ROUNDS) and where the TPOT is, else checked."""
        fitted = self.cell == FITTED_TTFT_CELL and self.model in FIT_MODELS
        return "fitted" if fitted else self.role

    def ttft_at(self, rounds: float) -> float:
        """The predicted TTFT (ms) of a run of ``rounds`` requests a client."""
        return CL.run_mean(self.steady_ttft_ms, self.wave_ttft_ms, rounds)

    @property
    def steady_ttft_error(self) -> float:
        return self.steady_ttft_ms / self.ttft_ms - 1.0

    @property
    def tpot_error(self) -> float:
        return self.predicted_tpot_ms / self.tpot_ms - 1.0

    @property
    def ttft_error(self) -> float:
        return self.predicted_ttft_ms / self.ttft_ms - 1.0

    @property
    def latency_error(self) -> float:
        """A request's whole latency, TTFT + (output - 1) x TPOT, predicted / measured - 1: what
        no harness's split between the first token and the rest moves."""
        tail = self.output - 1
        predicted = self.predicted_ttft_ms + tail * self.predicted_tpot_ms
        return predicted / (self.ttft_ms + tail * self.tpot_ms) - 1.0

    @property
    def ttft_beyond_model_ms(self) -> float:
        """What the measured TTFT holds beyond the model's."""
        return self.ttft_ms - self.predicted_ttft_ms

    @property
    def accelerator(self) -> str:
        return SE.ACCELERATORS[self.gpu]


def _point(row: dict[str, str]) -> dict[str, object]:
    """The run in calibration.serving_engines' terms (its _terms builds the step)."""
    return {
        "model": row["model"],
        "gpu": row["gpu"],
        "weights": row["weights"],
        "kv_cache": "unknown",
        "engine": row["engine"],
        "tp": int(row["tp"]),
        "ep": int(row.get("ep") or 1),
        "attention_dp": int(row.get("attention_dp") or 1),
        "workload": {"input": int(row["input"]), "output": int(row["output"])},
    }


def predict(row: dict[str, str]) -> CL.ClosedLoop:
    """The closed loop of one run on the engine's step."""
    point = _point(row)
    terms, acc, model, precision = SE._terms(point)
    tp, groups = int(row["tp"]), int(row.get("attention_dp") or 1)
    weights = SE.weights_per_accelerator(model, precision, tp, groups)
    share = serving_engine(row["engine"]).kv_memory_fraction(acc.memory_bytes, weights)
    terms = SE.with_cache(terms, acc, model, precision, tp, share, groups)
    n_in = float(row["input"])
    concurrency = float(row["concurrency"])
    # each attention group schedules its own budget (engine.llm_serving's replica does the same)
    budget = float(S.DEFAULT_MAX_NUM_BATCHED_TOKENS) * groups
    cap = B.capacity(terms, concurrency, budget, 0.0, input_lengths=B.Lengths(n_in, n_in))
    return CL.closed_loop(terms, concurrency, max(float(cap.slots), 1.0), budget, SAMPLE_ROUNDS)


@cache
def run_rows() -> tuple[dict[str, str], ...]:
    """The sample's rows as RUNS holds them (predict takes one)."""
    with RUNS.open(encoding="utf-8") as f:
        return tuple(csv.DictReader(f))


@cache
def closed_loop_runs() -> tuple[ClosedLoopRun, ...]:
    out = []
    for row in run_rows():
        loop = predict(row)
        if not (math.isfinite(loop.tpot) and math.isfinite(loop.ttft)):
            raise ValueError(f"closed-loop run {row['id']} has no finite prediction")
        out.append(
            ClosedLoopRun(
                id=row["id"],
                engine=row["engine"],
                version=row["version"],
                gpu=row["gpu"],
                model=row["model"],
                precision=SE.PRECISION[row["weights"]],
                tp=int(row["tp"]),
                attention_dp=int(row.get("attention_dp") or 1),
                ep=int(row.get("ep") or 1),
                input=int(row["input"]),
                output=int(row["output"]),
                concurrency=int(row["concurrency"]),
                ttft_ms=float(row["ttft_ms"]),
                tpot_ms=float(row["tpot_ms"]),
                predicted_ttft_ms=loop.ttft * 1e3,
                predicted_tpot_ms=loop.tpot * 1e3,
                waits_for_slot=loop.waiting_seconds > 0.0,
                prompt_share=loop.tpot / loop.decode_only_step - 1.0,
                steady_ttft_ms=loop.steady_ttft * 1e3,
                wave_ttft_ms=loop.wave_ttft * 1e3,
            )
        )
    return tuple(out)


def llama_runs() -> tuple[ClosedLoopRun, ...]:
    """The runs of the models the fits were made on (FIT_MODELS): the sections and residuals
    that describe those fits read these alone."""
    return tuple(r for r in closed_loop_runs() if r.model in FIT_MODELS)


def fit_sample_rounds(runs: tuple[ClosedLoopRun, ...] | None = None) -> float:
    """SAMPLE_ROUNDS: the rounds at which FITTED_TTFT_CELL's runs' predicted / measured TTFTs
    have a median of 1 (a median: the cell also holds runs of 100-token answers from another
    harness that show no starting wave; the predicted TTFT falls as the rounds grow, so
    bisection)."""
    cell = [
        r for r in (runs or llama_runs()) if r.cell == FITTED_TTFT_CELL and r.model in FIT_MODELS
    ]

    def bias(rounds: float) -> float:
        return median(r.ttft_at(rounds) / r.ttft_ms for r in cell) - 1.0

    low, high = 1.0, 1000.0
    if bias(high) > 0.0 or bias(low) < 0.0:
        raise ValueError("no rounds between 1 and 1000 meet the fitted cell's TTFTs")
    for _ in range(80):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if bias(mid) > 0.0 else (low, mid)
    return math.sqrt(low * high)


# The cells whose closed-loop TTFT is out of the model's reach, and why (render_closed_loop_section)
TTFT_OUT_OF_REACH = {
    ("H100", "TensorRT-LLM", "BF16"): "its first tokens wait 80-860 ms at 8 clients where the "
    "steady loop's is 12-113 ms: TensorRT-LLM 1.0.0rc3's own path, not in the model",
    ("H200", "SGLang", "FP8"): "its first tokens wait for what the model does not hold",
}


def ttft_evidence(accelerator: str, engine: str, precision: str, moe: bool = False) -> str:
    """What a closed loop's predicted TTFT rests on for ``engine`` on ``accelerator`` at
    ``precision``: the measured runs' cell (fitted, checked with its errors, or out of reach),
    else that none was measured. A mixture of experts (``moe``) reads its own runs (the
    mixtures of experts'), else is extrapolated from the dense models' and says so first."""
    same = [
        r
        for r in closed_loop_runs()
        if (r.accelerator, r.engine, r.precision) == (accelerator, engine, precision)
    ]
    own = [r for r in same if r.moe == moe]
    rows = own or same
    if not rows:
        kind = "mixture-of-experts " if moe else ""
        return (
            f"closed-loop TTFT: extrapolated, no measured {kind}run of {engine} on {accelerator} "
            f"at {precision} (the starting wave's rounds fitted on vLLM's H200 runs)"
        )
    errors = [r.ttft_error for r in rows]
    cell = rows[0].cell
    kind = "mixture-of-experts runs" if rows[0].moe else "runs"
    figures = (
        f"{len(rows)} {kind} of {engine} on {accelerator} at {precision} (AIConfigurator's "
        f"sample), median |error| {100 * median(abs(e) for e in errors):.1f}%, signed "
        f"{_pct(median(errors))}"
    )
    if moe and not own:
        figures = f"{figures}; dense models only, no mixture of experts"
        if cell not in TTFT_OUT_OF_REACH:
            return f"closed-loop TTFT: extrapolated for a mixture of experts from {figures}"
    if moe and own:
        return f"closed-loop TTFT checked: {figures}"
    if cell in TTFT_OUT_OF_REACH:
        return f"closed-loop TTFT out of reach: {figures}; {TTFT_OUT_OF_REACH[cell]}"
    fitted = cell == FITTED_TTFT_CELL and any(r.model in FIT_MODELS for r in rows)
    role = "fitted (SAMPLE_ROUNDS)" if fitted else "checked"
    return f"closed-loop TTFT {role}: {figures}"


RESIDUAL_CLIENTS_MIN_RUNS = 20  # a client count's residual is shown from this many runs


def ttft_residual_by_clients(steady: bool = False) -> dict[int, float]:
    """Client count -> the median milliseconds the measured TTFT holds beyond the model's (the
    run's, or with ``steady`` the steady state's alone), over the runs that wait for no slot (a
    queue for a slot is in the model), every cell together; the counts with
    RESIDUAL_CLIENTS_MIN_RUNS runs or more."""
    by: dict[int, list[float]] = defaultdict(list)
    for r in llama_runs():
        if not r.waits_for_slot:
            model = r.steady_ttft_ms if steady else r.predicted_ttft_ms
            by[r.concurrency].append(r.ttft_ms - model)
    return {
        c: float(median(v)) for c, v in sorted(by.items()) if len(v) >= RESIDUAL_CLIENTS_MIN_RUNS
    }


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def render_closed_loop_section() -> str:
    runs = llama_runs()
    cells: dict[tuple[str, str, str], list[ClosedLoopRun]] = defaultdict(list)
    for r in runs:
        cells[r.cell].append(r)
    lines = [
        f"Closed-loop runs measured by AIConfigurator's team ({SOURCE}): {len(runs)} runs of "
        "Llama 3.1 8B / 70B on one replica, 4-512 clients; checked, but TensorRT-LLM's B200 FP4 "
        "runs, which fit its served NVFP4 GEMMs (calibration.served_fp4). TPOT: the "
        "engine's mean step in the closed loop (engine.llm_closed_loop), in the serving "
        "evidence matrix. TTFT apart: the run's, the steady state's with the clients' starting "
        f"wave in one of SAMPLE_ROUNDS = {SAMPLE_ROUNDS:g} requests (fitted on "
        f"{' '.join(FITTED_TTFT_CELL)}'s TTFTs: {fit_sample_rounds(runs):.2f}); 'steady': the "
        "steady state's alone; the residual is what the runs carry beyond the run's model, "
        "over the runs that wait for no slot. Error: predicted / measured - 1 (- = the engine "
        "promises it sooner)",
        f"{'accelerator':<11}{'engine':<14}{'weights':<8}{'runs':>5}{'prompts':>8}"
        f"{'TPOT |err|':>12}{'signed':>9}{'TTFT |err|':>12}{'signed':>9}{'steady':>9}"
        f"{'TTFT residual':>15}",
    ]
    for (gpu, engine, precision), rows in sorted(cells.items()):
        tpot = [r.tpot_error for r in rows]
        ttft = [r.ttft_error for r in rows]
        free = [r.ttft_beyond_model_ms for r in rows if not r.waits_for_slot]
        residual = f"{median(free):,.0f} ms" if free else "n/a"
        cell = (gpu, engine, precision)
        roles = [
            name
            for name, held in (
                ("fitted", cell in FITTED_CELLS),
                ("TTFT fitted", cell == FITTED_TTFT_CELL),
            )
            if held
        ]
        lines.append(
            f"{gpu:<11}{engine:<14}{precision:<8}{len(rows):>5}"
            f"{_pct(median(r.prompt_share for r in rows)):>8}"
            f"{100 * median(abs(e) for e in tpot):>11.1f}%{_pct(median(tpot)):>9}"
            f"{100 * median(abs(e) for e in ttft):>11.1f}%{_pct(median(ttft)):>9}"
            f"{100 * median(abs(r.steady_ttft_error) for r in rows):>8.1f}%"
            f"{residual:>15}" + "".join(f"  {role}" for role in roles)
        )
    tpot_all = [r.tpot_error for r in runs if r.role == "checked"]
    ttft_checked = [r.ttft_error for r in runs if r.ttft_role == "checked"]
    lines.append(
        f"prompts: the median run's mean step over its decodes alone, - 1. TPOT of all "
        f"{len(runs)} runs, {len(tpot_all)} of them checked: "
        f"median |error| {100 * median(abs(e) for e in tpot_all):.1f}%, signed "
        f"{_pct(median(tpot_all))}; TTFT of the {len(ttft_checked)} checked: median |error| "
        f"{100 * median(abs(e) for e in ttft_checked):.1f}%, signed "
        f"{_pct(median(ttft_checked))} (the steady state's alone: "
        f"{100 * median(abs(r.steady_ttft_error) for r in runs if r.ttft_role == 'checked'):.1f}%)"
    )
    growth = ", ".join(
        f"{clients}: {ms:,.0f} ms" for clients, ms in ttft_residual_by_clients().items()
    )
    steady = ", ".join(
        f"{clients}: {ms:,.0f} ms" for clients, ms in ttft_residual_by_clients(steady=True).items()
    )
    lines.append(
        "TTFT beyond the model by clients (median over the runs that wait for no slot; "
        f"{RESIDUAL_CLIENTS_MIN_RUNS} runs or more): {growth}; beyond the steady state alone: "
        f"{steady}. The starting wave takes the growth with the clients; what stays is the "
        "request's path outside the steps. Out of reach: "
        + "; ".join(f"{' '.join(c)}: {why}" for c, why in TTFT_OUT_OF_REACH.items())
        + ". SGLang's runs (1,000-8,000-token prompts at 20-512 clients) share a set with 21 "
        "vLLM runs on the H200 that sit above the model, their wave a smaller share of the "
        "run than SAMPLE_ROUNDS gives (another harness: a longer run)"
    )
    worst = max(runs, key=lambda r: abs(r.tpot_error))
    lines.append(
        f"largest TPOT error: {worst.id} ({worst.engine} {worst.gpu} TP{worst.tp} "
        f"{worst.input}/{worst.output} at {worst.concurrency} clients): "
        f"{worst.predicted_tpot_ms:.2f} ms against {worst.tpot_ms:.2f} ({_pct(worst.tpot_error)})"
    )
    return "\n".join(lines)


def _layout_words(r: ClosedLoopRun) -> str:
    if r.attention_dp > 1:
        return f"ADP{r.attention_dp} TP{r.tp} EP{r.ep}"
    return f"TP{r.tp}" + (f" EP{r.ep}" if r.ep > 1 else "")


def render_more_models_section() -> str:
    """The sample's runs of the models the fits were not made on (checked only): Qwen3-32B and
    the mixtures of experts, by model, chip, engine, weights and layout."""
    runs = [r for r in closed_loop_runs() if r.model not in FIT_MODELS]
    groups: dict[tuple[str, str, str, str, str], list[ClosedLoopRun]] = defaultdict(list)
    for r in runs:
        groups[(r.model, r.gpu, r.engine, r.precision, _layout_words(r))].append(r)
    lines = [
        f"Closed-loop runs of the other models in the same sample ({SOURCE}), checked only: "
        f"{len(runs)} runs of Qwen3-32B and the mixtures of experts Qwen3-235B-A22B, "
        "DeepSeek-V3 / R1, gpt-oss-120b and Kimi K2.5 (Kimi K2's text model) on one host, at "
        "each run's layout (attention TP x data-parallel groups, the experts sliced or EP); "
        "gpt-oss's MXFP4 checkpoint is INT4 here on Hopper, FP4 on Blackwell, served as it "
        "ships (engine.checkpoint_formats). TPOT in the serving evidence matrix "
        "(a mixture of experts in its engine's MoE cells); TTFT as above; latency: a request's "
        "whole, TTFT + (output - 1) x TPOT, which no harness's split between the first token and "
        "the rest moves. Error: predicted / measured - 1",
        f"{'model':<16}{'gpu':<6}{'engine':<14}{'weights':<8}{'layout':<16}{'runs':>5}"
        f"{'TPOT |err|':>12}{'signed':>9}{'TTFT |err|':>12}{'signed':>9}{'latency':>9}",
    ]
    for (model, gpu, engine, precision, layout), rows in sorted(groups.items()):
        tpot, ttft, latency = _medians(rows)
        lines.append(
            f"{model:<16}{gpu:<6}{engine:<14}{precision:<8}{layout:<16}{len(rows):>5}"
            f"{100 * tpot[0]:>11.1f}%{_pct(tpot[1]):>9}{100 * ttft[0]:>11.1f}%{_pct(ttft[1]):>9}"
            f"{_pct(latency[1]):>9}"
        )
    for label, keep in (("dense", False), ("mixture of experts", True)):
        chosen = [r for r in runs if r.moe == keep]
        if chosen:
            tpot, ttft, latency = _medians(chosen)
            lines.append(
                f"{label}: {len(chosen)} runs, TPOT median |error| {100 * tpot[0]:.1f}% (signed "
                f"{_pct(tpot[1])}), TTFT {100 * ttft[0]:.1f}% (signed {_pct(ttft[1])}), a "
                f"request's latency {100 * latency[0]:.1f}% (signed {_pct(latency[1])})"
            )
    return "\n".join(lines)


def _medians(
    runs: list[ClosedLoopRun],
) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """(median |error|, signed median) of the runs' TPOT, TTFT and whole latency."""
    out = []
    for errors in (
        [r.tpot_error for r in runs],
        [r.ttft_error for r in runs],
        [r.latency_error for r in runs],
    ):
        out.append((float(median(abs(e) for e in errors)), float(median(errors))))
    return out[0], out[1], out[2]
