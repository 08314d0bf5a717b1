"""The serving model held against published runs of each serving engine (serving_engine_points).

The step's constants are TensorRT-LLM's, fitted in calibration.llm_serving. One constant is fitted
here, on the rows marked ``fit: ENGINE_STEP_FRACTION``: what vLLM's batch reaches on the MI300X of
the rates carried to it (engine.serving_engines.ENGINE_STEP_FRACTION), on one source's offline
runs (:func:`fit_engine_step_fraction`); every other row is CHECKED. A row is evaluated when the
model can state it: fixed input and
output lengths (``dataset: random``), a model and an accelerator the catalog has; the others
(ShareGPT or MLPerf's OpenOrca length distributions, MoE serving with disaggregation) are listed
with the reason they are out of reach. Two scenarios:

- **offline**: every request queued at once; the batching model's offline maximum with the
  engine's settings (the row's max-num-seqs / token budget / memory fraction where it states
  them, else the engine's defaults; TensorRT-LLM rows with trtllm-bench's own choices);
- **static**: a fixed batch prefilled together and decoded to its last token (vLLM's
  benchmark_latency, TensorRT-LLM's emulated static batching): end-to-end latency = the batch's
  prefill + (output - 1) decode steps of the whole batch.

The rows say per engine and accelerator how far the model is off a run it never saw: the
serving half of the evidence matrix (``render_serving_engines_section``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from ringmaster.calibration import llm_serving as LC
from ringmaster.calibration.points import read_yaml
from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG, UnknownHardwareError
from ringmaster.engine.serving_engines import serving_engine
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

ENGINE_POINTS = Path(__file__).resolve().parent / "serving_engine_points.yaml"
CHECKED_TOLERANCE = 0.75  # as calibration.llm_serving's checked rows
MODELS: dict[str, Transformer] = {
    **LC.MODELS,
    "llama-3.1-70b": replace(KNOWN_TRANSFORMERS["llama-3-70b"], sequence_length=131072),
    # the closed-loop sample's other models (calibration.closed_loop_runs)
    **{
        name: KNOWN_TRANSFORMERS[name]
        for name in ("qwen3-32b", "deepseek-v3", "gpt-oss-120b", "kimi-k2")
    },
}
ACCELERATORS = {
    **LC.GPUS,
    "MI300X": "amd-mi300x",
    "MI325X": "amd-mi325x",
}
PRECISION = {"fp8": "FP8", "bf16": "BF16", "fp16": "FP16", "fp4": "FP4", "int4": "INT4"}


@cache
def engine_points() -> list[dict[str, Any]]:
    data: dict[str, Any] = read_yaml(ENGINE_POINTS)
    return list(data["points"])


@dataclass(frozen=True)
class EngineRow:
    id: str
    engine: str
    accelerator: str
    quantity: str
    published: float
    predicted: float | None  # None: out of reach (``reason``)
    reason: str = ""
    scenario: str = "offline"
    precision: str = "FP8"  # the weights'
    role: str = "checked"  # fitted: the row sets ENGINE_STEP_FRACTION
    moe: bool = False  # a mixture of experts (the evidence matrix keeps it apart)

    @property
    def promise_error(self) -> float | None:
        """The error in the evidence matrix's sign: + where the engine promises more than ran
        (offline tokens/s predicted higher; a fixed batch's latency predicted shorter)."""
        if self.predicted is None:
            return None
        if self.scenario == "static":
            return self.published / self.predicted - 1.0
        return self.error

    @property
    def error(self) -> float | None:
        if self.predicted is None:
            return None
        return self.predicted / self.published - 1.0

    @property
    def ok(self) -> bool:
        return self.error is None or abs(self.error) <= CHECKED_TOLERANCE


def _out_of_reach(point: dict[str, Any]) -> str:
    workload = point.get("workload") or {}
    if workload.get("dataset") != "random":
        return f"lengths from the {workload.get('dataset')} distribution, not stated as numbers"
    if point["scenario"] not in ("offline", "static"):
        return f"scenario {point['scenario']}: the lengths' distribution is not stated"
    if point["model"] not in MODELS:
        return f"model {point['model']} is not one the engine knows by name"
    if point["gpu"] not in ACCELERATORS:
        return f"accelerator {point['gpu']} is not in the catalog"
    try:
        DEFAULT_CATALOG.accelerator(ACCELERATORS[point["gpu"]])
    except UnknownHardwareError:
        return f"accelerator {ACCELERATORS[point['gpu']]} is not in the catalog yet"
    return ""


def _terms(
    point: dict[str, Any], step_fraction: float | None = None
) -> tuple[S.ServingTerms, Any, Transformer, str]:
    model = MODELS[point["model"]]
    acc = DEFAULT_CATALOG.accelerator(ACCELERATORS[point["gpu"]])
    precision = PRECISION.get(str(point["weights"]).lower(), "FP8")
    # A cache the source does not name is the engine's default for the weights (vLLM and SGLang:
    # the activations' 16 bits; trtllm-bench: FP8 with FP8 weights), as the harness ran it.
    stated = str(point.get("kv_cache")).lower()
    fp8_default = serving_engine(str(point["engine"])).default_fp8_kv_cache
    kv = (
        "FP8"
        if precision in ("FP8", "FP4")
        and (stated == "fp8" or (stated == "unknown" and fp8_default))
        else "BF16"
    )
    workload = point["workload"]
    terms = LC._terms(
        model,
        acc,
        int(point["tp"]),
        precision,
        kv,
        float(workload["input"]),
        float(workload["output"]),
        LC.engine_constants(),
        str(point["engine"]),
        step_fraction,
        expert_parallel=int(point.get("ep", 1)),
        attention_data=int(point.get("attention_dp", 1)),
    )
    return terms, acc, model, precision


def weights_per_accelerator(
    model: Transformer, precision: str, tp: int, attention_data: int = 1
) -> float:
    """One accelerator's weights: a mixture of experts' dense parts over each attention group's
    ``tp``, its routed experts over all ``tp x attention_data`` ranks."""
    w = L.WEIGHT_BYTES[precision]
    return float(S.weights_bytes_per_accelerator(model, w, tp, 1, attention_data))


def with_cache(
    terms: S.ServingTerms,
    acc: Any,
    model: Transformer,
    precision: str,
    tp: int,
    share: float,
    attention_data: int = 1,
) -> S.ServingTerms:
    """The terms with the KV cache that ``share`` of each accelerator's HBM leaves beside the
    weights (the run's engine's memory fraction)."""
    free = share * acc.memory_bytes - weights_per_accelerator(model, precision, tp, attention_data)
    return terms._replace(
        kv_cache_tokens=np.floor(max(free, 0.0) / float(terms.kv_bytes_per_token))
    )


def _offline(point: dict[str, Any], step_fraction: float | None = None) -> float:
    workload = point["workload"]
    n_in, n_out = int(workload["input"]), int(workload["output"])
    if point["engine"] == "TensorRT-LLM":
        # Llama 3.1 70B and 3.3 70B share one architecture (LC.MODELS names the latter).
        name = "llama-3.3-70b" if point["model"] == "llama-3.1-70b" else point["model"]
        row = LC.ThroughputRow(name, point["gpu"], int(point["tp"]), n_in, n_out, 0.0, "FP8")
        settings = point.get("settings") or {}
        built = settings.get("engine_built_for")  # trtllm-bench build --dataset's lengths
        return LC.offline_tokens_per_second(
            row,
            LC.engine_constants(),
            build=(int(built["input"]), int(built["output"])) if built else None,
            requests=float(workload.get("requests", np.inf)),
            kv_fraction=float(
                settings.get("kv_cache_free_gpu_mem_fraction", LC.TRTLLM_KV_FRACTION)
            ),
        )
    terms, acc, model, precision = _terms(point, step_fraction)
    profile = serving_engine(point["engine"])
    settings = point.get("settings") or {}
    share = float(settings.get("gpu_memory_utilization", profile.memory_fraction))
    terms = with_cache(terms, acc, model, precision, int(point["tp"]), share)
    # an offline run of N prompts: its output over its makespan (waves of the slots)
    prompts = float(settings.get("num_prompts", workload.get("requests", np.inf)))
    seqs = float(settings.get("max_num_seqs", 256))
    budget = float(settings.get("max_num_batched_tokens", S.DEFAULT_MAX_NUM_BATCHED_TOKENS))
    fixed = B.Lengths(n_in, n_in)
    return float(B.offline_run(terms, prompts, seqs, budget, input_lengths=fixed)) * n_out


def _static_latency(point: dict[str, Any], step_fraction: float | None = None) -> float:
    terms, _, _, _ = _terms(point, step_fraction)
    workload = point["workload"]
    b, n_in, n_out = float(point["batch"]), float(workload["input"]), float(workload["output"])
    prefill = float(S.step_seconds(terms, 0.0, b * n_in, prompt_length=n_in))
    return (prefill + (n_out - 1.0) * float(S.step_seconds(terms, b, 0.0))) * 1e3


def static_residual_slopes() -> list[tuple[str, float]]:
    """Per series of fixed batches (one engine, version, model, accelerator and lengths at two or
    more batch sizes): how much faster than the model the published decode step grows with the
    batch, in seconds per sequence per step (least squares through the smallest batch). The
    prefill is the model's in both. What the rows isolate and no term of the step explains yet
    (issue 46): the KV read, the GEMMs and the all-reduces grow far less."""
    series: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for p in engine_points():
        figures = p.get("figures") or {}
        if p["scenario"] != "static" or "e2e_latency_ms" not in figures or _out_of_reach(p):
            continue
        w = p["workload"]
        version = str(p["version"]).split(" ")[0]
        lengths = f"{w['input']}/{w['output']}"
        key: tuple[str, ...] = (str(p["engine"]), version, str(p["model"]), str(p["gpu"]), lengths)
        terms, _, _, _ = _terms(p)
        b, n_in, n_out = float(p["batch"]), float(w["input"]), float(w["output"])
        prefill = float(S.step_seconds(terms, 0.0, b * n_in, prompt_length=n_in))
        published = (float(figures["e2e_latency_ms"]) * 1e-3 - prefill) / (n_out - 1.0)
        modelled = float(S.step_seconds(terms, b, 0.0))
        series[key].append((b, published - modelled))
    out = []
    for key, points in sorted(series.items()):
        if len(points) < 2:
            continue
        points.sort()
        b0, r0 = points[0]
        db = np.array([b - b0 for b, _ in points[1:]])
        dr = np.array([r - r0 for _, r in points[1:]])
        out.append((" ".join(key), float(db @ dr / (db @ db))))
    return out


FIT_MARK = "ENGINE_STEP_FRACTION"


def _prediction(point: dict[str, Any], step_fraction: float | None = None) -> float:
    if point["scenario"] == "static":
        return _static_latency(point, step_fraction)
    return _offline(point, step_fraction)


def _published(point: dict[str, Any]) -> float:
    figures = point.get("figures") or {}
    key = "e2e_latency_ms" if point["scenario"] == "static" else "output_tokens_per_s"
    return float(figures[key])


def fitted_points(accelerator: str = "MI300X", engine: str = "vLLM") -> list[dict[str, Any]]:
    """The rows that set the engine's step fraction on the chip (``fit: ENGINE_STEP_FRACTION``)."""
    return [
        p
        for p in engine_points()
        if p.get("fit") == FIT_MARK and p["gpu"] == accelerator and p["engine"] == engine
    ]


@cache
def fit_engine_step_fraction(accelerator: str = "MI300X", engine: str = "vLLM") -> float:
    """ENGINE_STEP_FRACTION[chip, engine]: :func:`fit_step_fraction` over its fitted rows."""
    points = fitted_points(accelerator, engine)
    if not points:
        raise ValueError(f"no row of {engine} on {accelerator} is marked fit: {FIT_MARK}")
    return fit_step_fraction(points)


@cache
def source_refits(
    accelerator: str = "MI300X", engine: str = "vLLM"
) -> tuple[tuple[str, int, float], ...]:
    """(source, rows, fraction) refitted on each source's offline rows of the engine on the chip
    alone: how far the fitted source's fraction is from what each other source would give."""
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in engine_points():
        if (
            p["gpu"] == accelerator
            and p["engine"] == engine
            and p["scenario"] == "offline"
            and not _out_of_reach(p)
            and (p.get("figures") or {}).get("output_tokens_per_s")
        ):
            by_source[str(p["source"]).split(" @")[0].split(" (")[0]].append(p)
    return tuple((source, len(rows), fit_step_fraction(rows)) for source, rows in by_source.items())


def fit_step_fraction(points: list[dict[str, Any]]) -> float:
    """The step fraction that fits ``points``: least squares of the log error, by golden-section
    search on 0.2-1.0 (the error is unimodal in the fraction: every part it scales grows the
    step), to three decimals."""

    def loss(fraction: float) -> float:
        return float(sum(np.log(_prediction(p, fraction) / _published(p)) ** 2 for p in points))

    lo, hi = 0.2, 1.0
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = loss(a), loss(b)
    while hi - lo > 1e-4:
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = loss(b)
    return round(0.5 * (lo + hi), 3)


def engine_rows() -> list[EngineRow]:
    rows = []
    for p in engine_points():
        figures = p.get("figures") or {}
        static = p["scenario"] == "static"
        published = figures.get("e2e_latency_ms") if static else figures.get("output_tokens_per_s")
        if published is None:
            continue
        quantity = (
            f"{p['model']} TP{p['tp']} batch {p.get('batch')} e2e ms"
            if static
            else f"{p['model']} TP{p['tp']} {p['workload'].get('input')}/"
            f"{p['workload'].get('output')} output tokens/s"
        )
        reason = _out_of_reach(p)
        predicted = None if reason else (_static_latency(p) if static else _offline(p))
        rows.append(
            EngineRow(
                p["id"],
                p["engine"],
                p["gpu"],
                quantity,
                float(published),
                predicted,
                reason,
                str(p["scenario"]),
                PRECISION.get(str(p["weights"]).lower(), "FP8"),
                "fitted" if p.get("fit") == FIT_MARK else "checked",
                p["model"] in MODELS and MODELS[p["model"]].is_moe,
            )
        )
    return rows


def render_serving_engines_section() -> str:
    rows = engine_rows()
    lines = [
        "Serving engines (serving_engine_points.yaml; rows marked fitted set vLLM's"
        f" ENGINE_STEP_FRACTION on the MI300X, {fit_engine_step_fraction()} by the fit; every"
        " other row checked):",
        f"{'point':<58} {'engine':<13} {'gpu':<7} {'quantity':<40} {'published':>10}"
        f" {'predicted':>10} {'error':>8}  role",
    ]
    for r in rows:
        if r.predicted is None:
            continue
        lines.append(
            f"{r.id[:58]:<58} {r.engine:<13} {r.accelerator:<7} {r.quantity[:40]:<40}"
            f" {r.published:>10,.0f} {r.predicted:>10,.0f} {r.error:>+8.1%}  {r.role}"
        )
    fitted = [abs(r.error) for r in rows if r.error is not None and r.role == "fitted"]
    if fitted:
        lines.append(
            f"fitted rows: {len(fitted)}, median |error| {median(fitted):.1%}"
            f" (largest {max(fitted):.1%}); the fraction refitted on each source's offline rows"
            " alone: " + ", ".join(f"{src} ({n} rows) {f:.3f}" for src, n, f in source_refits())
        )
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    signed: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r.error is not None and r.role == "checked":
            cells[(r.engine, r.accelerator)].append(abs(r.error))
            signed[(r.engine, r.accelerator, r.scenario)].append(r.error)
    lines.append("by engine x accelerator: checked rows, median |error|")
    for (engine, gpu), errors in sorted(cells.items()):
        lines.append(f"  {engine:<13} {gpu:<7} {len(errors):>3} rows  median {median(errors):.1%}")
    lines.append(
        "by scenario, signed median (offline: output tokens/s, + = the model promises more;"
        " static: a fixed batch's latency, - = the model promises it sooner)"
    )
    for (engine, gpu, scenario), errors in sorted(signed.items()):
        lines.append(
            f"  {engine:<13} {gpu:<7} {scenario:<8} {len(errors):>3} rows"
            f"  signed median {median(errors):+.1%}"
        )
    residuals = static_residual_slopes()
    if residuals:
        lines.append(
            "static batches, what the step lacks per running sequence (the published latency's"
            " growth with the batch beyond the model's, per decode step):"
        )
        for series, slope in residuals:
            lines.append(f"  {series:<58} {slope * 1e6:>6.0f} us a sequence a step")
    reach: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.predicted is None:
            reach[r.reason] += 1
    for reason, count in sorted(reach.items()):
        lines.append(f"  out of reach ({count} rows): {reason}")
    return "\n".join(lines)
