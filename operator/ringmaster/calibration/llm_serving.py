"""The LLM-serving constants against published points (fitted and checked apart).

Two sets of points:

- the ``llm_inference`` section of the shared points file (gpt-fast batch-1 decode, TensorRT-LLM's
  batch-1 TTFT, TensorRT-LLM 0.6's static-batching table);
- ``llm_serving_points.yaml`` beside this module: TensorRT-LLM 1.0's in-flight-batching
  throughput table (perf-overview.md), Llama-3.1-8B, Llama-3.3-70B and Llama-3.1-405B in FP8 on
  H100 and H200, ten input/output mixes each, offline (every request queued at once).

Six constants of :mod:`ringmaster.engine.llm_step` are fitted, each on a named subset:

- ``LLM_MEMORY_EFFICIENCY`` and ``LLM_STEP_OVERHEAD_SECONDS`` (of a 32-layer model): gpt-fast's
  batch-1 decode of Llama-2-7B on A100-80GB at TP1 and TP2 (two equations, two unknowns);
- ``LLM_COMPUTE_EFFICIENCY``: TensorRT-LLM's batch-1 TTFT of LLaMA-7B with a 2,048-token prompt on
  A100 in FP16 (the most compute-bound point);
- ``LLM_FP8_COMPUTE_EFFICIENCY``, ``LLM_KV_SEQUENCE_TOKENS`` and
  ``LLM_SEQUENCE_OVERHEAD_SECONDS``: least squares of the log error over :data:`FIT_SETUPS` of the
  throughput table (Llama-3.1-8B on H100 and H200, Llama-3.3-70B on two H100s: 30 rows), through
  the batching model's offline maximum with the settings trtllm-bench picks (:func:`trtllm_bench`),
  each step's decode attention TensorRT-LLM's own as AIConfigurator measured it per chip
  (engine.serving_engines.ENGINE_DECODE_ATTENTION). ``LLM_KV_READ_EFFICIENCY``, the KV read of an
  engine or chip without such a table, is the H100's measured FlashAttention fraction, not a fit.

Everything else is *checked*: gpt-fast TP4 and TP8, the other three TTFT points, the static table,
and the throughput table's other setups (Llama-3.3-70B on one H200, Llama-3.1-405B on eight H100s
and eight H200s: 30 rows that no constant saw).

Reading of the points: "A100-SXM" is the 80 GB part; the H100 FP8 rows of the static table run an
FP8 KV cache; LLaMA-7B has Llama-2-7B's shape; Llama-3.1-8B / 3.3-70B have Llama-3-8B's / 70B's
shape with a 131,072-token context; the ModelOpt FP8 checkpoints carry an FP8 KV cache.

Pure: takes the parsed points (mappings), no I/O but reading the packaged points file;
``ringmaster calibrate`` prints it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ringmaster.calibration.points import read_yaml
from ringmaster.engine import ceilings as CE
from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG, Accelerator
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

LLAMA_7B: Transformer = KNOWN_TRANSFORMERS["llama-2-7b"]
MODELS: dict[str, Transformer] = {
    "llama-3.1-8b": replace(KNOWN_TRANSFORMERS["llama-3-8b"], sequence_length=131072),
    "llama-3.3-70b": replace(KNOWN_TRANSFORMERS["llama-3-70b"], sequence_length=131072),
    "llama-3.1-405b": KNOWN_TRANSFORMERS["llama-3.1-405b"],
    "llama-4-maverick": KNOWN_TRANSFORMERS["llama-4-maverick"],
    "llama-4-scout": KNOWN_TRANSFORMERS["llama-4-scout"],
    "qwen3-235b-a22b": KNOWN_TRANSFORMERS["qwen3-235b-a22b"],
    "qwen3-30b-a3b": KNOWN_TRANSFORMERS["qwen3-30b-a3b"],
}
GPUS = {
    "A100-SXM": "nvidia-a100-80gb",
    "A100": "nvidia-a100-80gb",
    "H100-SXM": "nvidia-h100-80gb",
    "H100": "nvidia-h100-80gb",
    "H200": "nvidia-h200-141gb",
    "B200": "nvidia-b200",
    "GB200": "nvidia-gb200",
}
SERVING_POINTS = Path(__file__).resolve().parent / "llm_serving_points.yaml"
# gpt-fast's benchmark: a 5-token prompt and 200 generated tokens (its README's generate.py run).
GPT_FAST_PROMPT = 5
GPT_FAST_OUTPUT = 200
GPT_FAST_FIT = ("llama2-7b-tp1", "llama2-7b-tp2")
GPT_FAST_ACCELERATOR = "nvidia-a100-80gb"  # its README's table: A100 80GB
GPT_FAST_ENGINE = "gpt-fast"  # PyTorch with torch.compile, not a serving engine an endpoint names
TTFT_FIT = "A100-fp16-input2048"
# The throughput table's setups the four batching constants are fitted on (model, GPU, TP).
FIT_SETUPS = (
    ("llama-3.1-8b", "H100", 1),
    ("llama-3.1-8b", "H200", 1),
    ("llama-3.3-70b", "H100", 2),
)
FITTED, CHECKED = "fitted", "checked"
# What the rows are held to: a fitted closed-form point is reproduced; a row of a least-squares
# fit and a checked row within the largest error the model shows on the published set (the
# static table's b768 row, and 405B's 2048/128 on H200: see docs/engine.md).
FITTED_TOLERANCE = 0.01
CHECKED_TOLERANCE = 0.75
# trtllm-bench's settings (tensorrt_llm/bench/build/tuning.py, calc_engine_setting and
# finetune_setting): the KV cache gets 0.95 of the memory left after the weights, a request
# reserves input + output tokens (the C++ runtime's GUARANTEED_NO_EVICT capacity scheduler), and
# max_batch_size / max_num_tokens come from that bound, rounded up.
TRTLLM_KV_FRACTION = 0.95
# The engine every TensorRT-LLM row ran on (its own all-reduce kernel: engine.tp_allreduce).
TRTLLM = "TensorRT-LLM"
_GIB = 1024.0**3


@dataclass(frozen=True)
class LlmPointRow:
    id: str
    quantity: str
    published: float
    predicted: float
    role: str  # FITTED or CHECKED
    tolerance_override: float | None = None
    # The serving evidence matrix's cell (calibration.serving_evidence): the catalog accelerator,
    # the serving engine and the weights' precision the row ran.
    accelerator: str = ""
    engine: str = TRTLLM
    precision: str = "FP8"
    # The model is a mixture of experts: the evidence matrix keeps its rows apart from the dense
    # ones (calibration.serving_evidence), whose step they do not check.
    moe: bool = False

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published

    @property
    def is_latency(self) -> bool:
        """A time (TTFT) rather than a throughput: its + error promises less, not more."""
        return self.quantity.endswith(" ms")

    @property
    def promise_error(self) -> float:
        """The error in the evidence matrix's sign: + where the engine promises more than ran
        (a throughput predicted higher, a latency predicted shorter)."""
        return self.published / self.predicted - 1.0 if self.is_latency else self.error

    @property
    def tolerance(self) -> float:
        if self.tolerance_override is not None:
            return self.tolerance_override
        return FITTED_TOLERANCE if self.role == FITTED else CHECKED_TOLERANCE


def _section(points: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(p["id"]): p for p in points.get("llm_inference") or []}


@cache
def serving_points() -> dict[str, Any]:
    data: dict[str, Any] = read_yaml(SERVING_POINTS)
    return data


def _constants(values: Mapping[str, float]) -> S.StepConstants:
    return S.StepConstants(
        compute_efficiency=values["LLM_COMPUTE_EFFICIENCY"],
        fp8_compute_efficiency=values["LLM_FP8_COMPUTE_EFFICIENCY"],
        memory_efficiency=values["LLM_MEMORY_EFFICIENCY"],
        step_overhead=values["LLM_STEP_OVERHEAD_SECONDS"],
        kv_read_efficiency=values["LLM_KV_READ_EFFICIENCY"],
        kv_sequence_tokens=values["LLM_KV_SEQUENCE_TOKENS"],
        sequence_overhead=values["LLM_SEQUENCE_OVERHEAD_SECONDS"],
        measured_decode=S.MEASURED_DECODE,
    )


def _terms(
    model: Transformer,
    acc: Accelerator,
    tp: int,
    precision: str,
    kv: str,
    n_in: float,
    n_out: float,
    constants: Mapping[str, float],
    serving_engine: str | None = TRTLLM,
    step_fraction: float | None = None,
    expert_parallel: int = 1,
    attention_data: int = 1,
) -> S.ServingTerms:
    """The step's terms as the calibration rows ran: TensorRT-LLM's (its all-reduce) unless
    ``serving_engine`` says otherwise (gpt-fast: None, PyTorch's NCCL); ``step_fraction``: the
    engine's on the chip (None: engine.serving_engines.ENGINE_STEP_FRACTION's); a mixture of
    experts' ``expert_parallel`` and ``attention_data`` as engine.llm_step.serving_terms has
    them."""
    compute = L.COMPUTE_PRECISION[precision]
    return S.serving_terms(
        model,
        acc,
        tp,
        acc.peak(compute),
        L.WEIGHT_BYTES[precision],
        L.KV_BYTES[kv],
        n_in,
        n_out,
        compute_precision=compute,
        constants=_constants(constants),
        serving_engine=serving_engine,
        step_fraction=step_fraction,
        expert_parallel=expert_parallel,
        attention_data=attention_data,
    )


def _decode_seconds(tp: int, constants: Mapping[str, float]) -> float:
    acc = DEFAULT_CATALOG.accelerator(GPT_FAST_ACCELERATOR)
    terms = _terms(
        LLAMA_7B, acc, tp, "BF16", "BF16", GPT_FAST_PROMPT, GPT_FAST_OUTPUT, constants, None
    )
    return float(S.step_seconds(terms, 1.0, 0.0))


def _ttft_seconds(key: str, constants: Mapping[str, float]) -> float:
    gpu, precision, prompt = key.split("-")
    acc = DEFAULT_CATALOG.accelerator(GPUS[gpu])
    p = precision.upper()
    n = float(prompt.removeprefix("input"))
    terms = _terms(LLAMA_7B, acc, 1, p, L.DEFAULT_KV_PRECISION[p], n, 1.0, constants)
    return float(S.prefill_seconds(terms, n))


def _static_batch_tokens_per_second(
    row: Mapping[str, Any],
    constants: Mapping[str, float],
    model: Transformer = LLAMA_7B,
    tp: int = 1,
) -> float:
    """TensorRT-LLM 0.6's static batching: the batch's prompts in one step, then output - 1
    decode steps of the whole batch; output tokens/s of the whole replica of ``tp`` GPUs."""
    acc = DEFAULT_CATALOG.accelerator(GPUS[str(row["gpu"])])
    p = str(row["precision"]).upper()
    b, n_in, n_out = float(row["batch"]), float(row["input"]), float(row["output"])
    terms = _terms(model, acc, tp, p, L.DEFAULT_KV_PRECISION[p], n_in, n_out, constants)
    prefill = S.step_seconds(terms, 0.0, b * n_in, prompt_length=n_in)
    seconds = float(prefill) + (n_out - 1.0) * float(S.step_seconds(terms, b, 0.0))
    return b * n_out / seconds


STATIC_SECTION = "trtllm_v0_6_static_batches"
FIRST_TOKEN_SECTION = "trtllm_v0_5_first_token"
# The bound the long-output Llama 2 70B rows of TensorRT-LLM 0.6.1's static table are held to:
# an honest "out of reach" (llm_serving_rows says why).
GQA_LONG_DECODE_TOLERANCE = 1.25


def static_batch_rows(
    constants: Mapping[str, float], data: Mapping[str, Any] | None = None
) -> list[LlmPointRow]:
    """TensorRT-LLM 0.6.1's static-batching rows beyond LLaMA 7B at TP1, and its batch-1 first
    tokens of Llama 2 70B at TP4 (llm_serving_points.yaml): checked only."""
    points = data or serving_points()
    table = points.get(STATIC_SECTION) or {}
    rows: list[LlmPointRow] = []
    for setup in table.get("setups", []):
        model, tp = KNOWN_TRANSFORMERS[str(setup["model"])], int(setup["tp"])
        for b, n_in, n_out, per_gpu in setup["rows"]:
            row = {"gpu": table["gpu"], "precision": table["precision"]}
            row |= {"batch": b, "input": n_in, "output": n_out}
            predicted = _static_batch_tokens_per_second(row, constants, model, tp) / tp
            # Llama 2 70B's long outputs (a mean context of 1.2-3k tokens, 8 query heads to a
            # KV head) are published at 0.47x the model's rate. A decode attention that read
            # each KV head once per query head (no sharing across the group) would put both at
            # -14 %: the gap lies between full sharing and none. TensorRT-LLM 1.0's 70B rows
            # (its XQA kernel shares a group's K/V) are within +21 %. docs/engine.md.
            grouped_long = model.heads > model.kv_heads and n_out >= 2048
            rows.append(
                LlmPointRow(
                    "trtllm-v0.6-static",
                    f"{setup['model']} H100 FP8 TP{tp} {n_in}/{n_out} b{b} output tokens/s/GPU",
                    float(per_gpu),
                    predicted,
                    CHECKED,
                    GQA_LONG_DECODE_TOLERANCE if grouped_long else None,
                    accelerator=GPUS[str(table["gpu"])],
                    precision=str(table["precision"]).upper(),
                )
            )
    first = points.get(FIRST_TOKEN_SECTION) or {}
    for setup in first.get("setups", []):
        model, tp = KNOWN_TRANSFORMERS[str(setup["model"])], int(setup["tp"])
        acc = DEFAULT_CATALOG.accelerator(GPUS[str(setup["gpu"])])
        p = str(setup["precision"]).upper()
        for n_in, ttft_ms in setup["rows"]:
            n = float(n_in)
            terms = _terms(model, acc, tp, p, L.DEFAULT_KV_PRECISION[p], n, 1.0, constants)
            rows.append(
                LlmPointRow(
                    "trtllm-v0.5-first-token",
                    f"{setup['model']} {setup['gpu']} {p} TP{tp} input{n_in} TTFT ms",
                    float(ttft_ms),
                    float(S.prefill_seconds(terms, n)) * 1e3,
                    CHECKED,
                    accelerator=acc.name,
                    precision=p,
                )
            )
    return rows


def trtllm_bench(
    model: Transformer, acc: Accelerator, tp: int, isl: int, osl: int, weight_bytes: float = 1.0
) -> tuple[int, int]:
    """max_batch_size and max_num_tokens as trtllm-bench sets them (FP8 KV cache; FP8 weights
    unless ``weight_bytes`` says otherwise)."""
    kv_heads = max(tp, model.kv_heads)
    per_token = 2.0 * model.layers * kv_heads * model.head_dim * 1.0 / _GIB
    available = acc.memory_bytes / _GIB * tp - model.parameters * weight_bytes / _GIB
    requests = available * TRTLLM_KV_FRACTION / (per_token * (isl + osl))
    raw_bs = min(requests, 4096.0)
    raw_tokens = min(raw_bs * (1.0 + isl / osl), 32768.0)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return bs, tokens


@dataclass(frozen=True)
class ThroughputRow:
    model: str
    gpu: str
    tp: int
    input: int
    output: int
    published: float  # output tokens/s of the replica
    precision: str = "FP8"  # the weights' (the KV cache is FP8)
    requests: float = math.inf  # the run's request count (trtllm-bench's $num_requests)

    @property
    def setup(self) -> tuple[str, str, int]:
        return (self.model, self.gpu, self.tp)

    @property
    def quantity(self) -> str:
        return f"{self.model} {self.gpu} TP{self.tp} {self.input}/{self.output} output tokens/s"


def throughput_rows(
    data: Mapping[str, Any] | None = None, section: str = "trtllm_perf_overview"
) -> list[ThroughputRow]:
    table = (data or serving_points()).get(section)
    if table is None:
        return []
    requests = {(int(i), int(o)): float(n) for i, o, n in table.get("requests", [])}
    return [
        ThroughputRow(
            str(s["model"]),
            str(s["gpu"]),
            int(s["tp"]),
            int(i),
            int(o),
            float(v),
            str(s.get("precision", table.get("precision", "FP8"))),
            requests.get((int(i), int(o)), math.inf),
        )
        for s in table["setups"]
        for i, o, v in s["rows"]
    ]


# The MoE and FP4 rows of the same table (a later version of it): checked only, never fitted.
MOE_FP4_SECTION = "trtllm_perf_overview_moe_fp4"
# TensorRT-LLM 1.0's Blackwell NVFP4 columns and its Maverick FP8 ones (the fitted table's page).
V1_BLACKWELL_SECTION = "trtllm_perf_overview_v1_blackwell"
V1_FP4_ID = "trtllm-1.0-perf-overview-fp4"
V1_MAVERICK_ID = "trtllm-1.0-perf-overview-maverick"
# The same page's other mixture-of-experts columns (Llama 4 Scout, Qwen3 235B-A22B and 30B-A3B,
# Maverick in NVFP4): checked only, never fitted.
V1_MOE_SECTION = "trtllm_perf_overview_v1_moe"
V1_MOE_ID = "trtllm-1.0-perf-overview-moe"
# The bound the Maverick rows are held to (an honest "out of reach", see llm_serving_rows).
MAVERICK_TOLERANCE = 2.0
# The bound 1.0's other MoE columns are held to, about the largest error they show, reported
# rather than refitted: their one-GPU rows (Qwen3-30B-A3B, Scout on one B200 / GB200) run at what
# the host's scheduler loop allows, not the GPU's step (the same Blackwell GPU under GB200's Grace
# CPU runs Qwen3-30B-A3B's 128/128 at 0.61 of B200's x86 host, Scout's at 0.79); the loop is
# modelled where measured (Grace, engine.serving_engines.HOST_SECONDS_PER_REQUEST), not on the
# B200's x86 host (its Qwen3-30B-A3B 128/128 row +202 %); the multi-GPU columns turn on an
# expert-parallel degree the page leaves out.
V1_MOE_TOLERANCE = 2.1


def offline_tokens_per_second(
    row: ThroughputRow,
    constants: Mapping[str, float],
    build: tuple[int, int] | None = None,
    requests: float | None = None,
    kv_fraction: float = TRTLLM_KV_FRACTION,
) -> float:
    """The batching model's offline run with trtllm-bench's settings: max_batch_size and
    max_num_tokens from the lengths the engine was built for (``build``: the row's own unless
    given), the run's ``requests`` (the row's own unless given) over its makespan
    (engine.llm_batching.offline_run: waves of the slots), the KV cache at ``kv_fraction`` of the
    memory the weights leave."""
    model = MODELS[row.model]
    acc = DEFAULT_CATALOG.accelerator(GPUS[row.gpu])
    w = L.WEIGHT_BYTES[row.precision]
    terms = _terms(model, acc, row.tp, row.precision, "FP8", row.input, row.output, constants)
    free = kv_fraction * (acc.memory_bytes - model.parameters * w / row.tp)
    terms = terms._replace(kv_cache_tokens=np.floor(free / terms.kv_bytes_per_token))
    built_in, built_out = build or (row.input, row.output)
    bs, tokens = trtllm_bench(model, acc, row.tp, built_in, built_out, w)
    n = row.requests if requests is None else requests
    fixed = B.Lengths(row.input, row.input)
    rate = B.offline_run(terms, n, bs, tokens, reserve_whole=True, input_lengths=fixed)
    return float(rate) * row.output


# --- the fit -------------------------------------------------------------------------------------

_BATCHING = (
    "LLM_FP8_COMPUTE_EFFICIENCY",
    "LLM_KV_READ_EFFICIENCY",
    "LLM_KV_SEQUENCE_TOKENS",
    "LLM_SEQUENCE_OVERHEAD_SECONDS",
)


def _unpack(x: np.ndarray, memory_efficiency: float) -> dict[str, float]:
    """Unbounded coordinates -> constants within their physical ranges: efficiencies in (0, 1)
    (the KV read's at most the weights'), token and time costs positive."""
    return {
        "LLM_FP8_COMPUTE_EFFICIENCY": 1.0 / (1.0 + math.exp(-x[0])),
        "LLM_KV_READ_EFFICIENCY": memory_efficiency / (1.0 + math.exp(-x[1])),
        "LLM_KV_SEQUENCE_TOKENS": math.exp(x[2]),
        "LLM_SEQUENCE_OVERHEAD_SECONDS": math.exp(x[3]) * 1e-6,
    }


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, iterations: int) -> np.ndarray:
    """The textbook simplex (reflect 1, expand 2, contract 1/2, shrink 1/2); deterministic."""
    n = len(x0)
    simplex = [x0] + [x0 + 0.5 * np.eye(n)[i] for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        centre = np.mean(simplex[:-1], axis=0)
        reflected = centre + (centre - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centre + 2.0 * (centre - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (simplex[-1] - centre)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (p - simplex[0]) for p in simplex]
                values = [f(p) for p in simplex]
    return np.asarray(simplex[int(np.argmin(values))], dtype=np.float64)


_FIT_ITERATIONS = 160
_FIT_START = np.array([0.0, 0.5, math.log(16.0), math.log(2.0)])


def _measured_decode() -> dict[str, float]:
    """The two fractions the measured decode step takes from engine.ceilings, not from a fit:
    the GEMMs' weight streaming (bf16 rows) and the decode attention's KV read."""
    return {
        "LLM_MEMORY_EFFICIENCY": CE.H100_DECODE_GEMM["bf16"][0],
        "LLM_KV_READ_EFFICIENCY": CE.H100_DECODE_ATTENTION[CE.DECODE_ATTENTION_KERNEL][0],
    }


def _unpack_measured(x: np.ndarray) -> dict[str, float]:
    """As :func:`_unpack` without the KV read (measured): the other three coordinates."""
    return {
        "LLM_FP8_COMPUTE_EFFICIENCY": 1.0 / (1.0 + math.exp(-x[0])),
        "LLM_KV_SEQUENCE_TOKENS": math.exp(x[1]),
        "LLM_SEQUENCE_OVERHEAD_SECONDS": math.exp(x[2]) * 1e-6,
    }


def derive_llm_constants(
    points: Mapping[str, Any], serving: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """The fitted constants (and the measured KV read), recomputed from their named points
    (module docstring). The closed-form ones and the least-squares ones depend on each other
    only through the tiny KV read of gpt-fast's batch-1 decode: two passes settle them."""
    pts = _section(points)
    rows = [r for r in throughput_rows(serving) if r.setup in FIT_SETUPS]
    values = {
        "LLM_COMPUTE_EFFICIENCY": 1.0,
        "LLM_MEMORY_EFFICIENCY": 1.0,
        "LLM_STEP_OVERHEAD_SECONDS": 0.0,
        **_unpack(_FIT_START, 1.0),
    }
    if S.MEASURED_DECODE:
        values |= _measured_decode()
        start = _FIT_START[[0, 2, 3]]
        for _ in range(2):
            values |= _closed_form_measured(pts, values)

            def loss_measured(x: np.ndarray, known: Mapping[str, float] = dict(values)) -> float:
                trial = {**known, **_unpack_measured(x)}
                return sum(
                    math.log(offline_tokens_per_second(r, trial) / r.published) ** 2 for r in rows
                )

            values |= _unpack_measured(_nelder_mead(loss_measured, start, _FIT_ITERATIONS))
        return values
    # The KV read of an engine and chip without a measured decode attention: the H100's
    # measured FlashAttention fraction (every fitted row runs TensorRT-LLM's own, measured:
    # engine.serving_engines.ENGINE_DECODE_ATTENTION, so no fit could see it).
    values["LLM_KV_READ_EFFICIENCY"] = _measured_decode()["LLM_KV_READ_EFFICIENCY"]
    start = _FIT_START[[0, 2, 3]]
    for _ in range(2):
        values |= _closed_form(pts, values)

        def loss(x: np.ndarray, known: Mapping[str, float] = dict(values)) -> float:
            trial = {**known, **_unpack_measured(x)}
            return sum(
                math.log(offline_tokens_per_second(r, trial) / r.published) ** 2 for r in rows
            )

        values |= _unpack_measured(_nelder_mead(loss, start, _FIT_ITERATIONS))
    return values


def _closed_form_measured(pts: Mapping[str, Any], values: Mapping[str, float]) -> dict[str, float]:
    """The measured decode step's closed-form constants: the step overhead (what the measured
    kernels leave of gpt-fast's batch-1 decode at TP1 and TP2: their mean, least squares in
    seconds, one unknown on two points) and the compute efficiency (the TTFT point)."""
    rates = pts["gpt-fast-batch1-decode"]["tokens_per_s"]
    acc = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
    raw = {**values, "LLM_STEP_OVERHEAD_SECONDS": 0.0}
    left = []
    for key in GPT_FAST_FIT:
        tp = int(key.rsplit("tp", 1)[1])
        terms = _terms(
            LLAMA_7B, acc, tp, "BF16", "BF16", GPT_FAST_PROMPT, GPT_FAST_OUTPUT, raw, None
        )
        left.append(1.0 / float(rates[key]) - float(S.step_seconds(terms, 1.0, 0.0)))
    # Bounded at zero (a step costs no less than its kernels): the measured floors account for
    # the whole fixed cost, and the unbounded solution sits 82 us (6 % of them) below it.
    overhead = max(0.0, float(np.mean(left)) * S.OVERHEAD_FIT_LAYERS / LLAMA_7B.layers)
    fitted = {**values, "LLM_STEP_OVERHEAD_SECONDS": overhead, "LLM_COMPUTE_EFFICIENCY": 1.0}
    return {
        "LLM_COMPUTE_EFFICIENCY": _ttft_compute_efficiency(pts, fitted),
        "LLM_STEP_OVERHEAD_SECONDS": overhead,
    }


def _ttft_compute_efficiency(pts: Mapping[str, Any], fitted: Mapping[str, float]) -> float:
    """e_c from the fitted batch-1 TTFT: the prompt's GEMMs at efficiency 1 (``fitted`` has
    LLM_COMPUTE_EFFICIENCY 1), the rest of its step (its attention at the kernel's measured
    rate among it) as it is."""
    ttft = float(pts["trtllm-batch1-ttft-7b"]["ttft_ms"][TTFT_FIT]) * 1e-3
    gpu, precision, prompt = TTFT_FIT.split("-")
    n = float(prompt.removeprefix("input"))
    p = precision.upper()
    terms = _terms(LLAMA_7B, DEFAULT_CATALOG.accelerator(GPUS[gpu]), 1, p, p, n, 1.0, fitted)
    whole = float(S.prefill_seconds(terms, n))
    gemm = n * float(terms.prefill_gemm_per_token)
    return gemm / (ttft - (whole - gemm))


def _closed_form(pts: Mapping[str, Any], values: Mapping[str, float]) -> dict[str, float]:
    rates = pts["gpt-fast-batch1-decode"]["tokens_per_s"]
    t1, t2 = (1.0 / float(rates[k]) for k in GPT_FAST_FIT)
    acc = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
    raw = {**values, "LLM_MEMORY_EFFICIENCY": 1.0, "LLM_STEP_OVERHEAD_SECONDS": 0.0}
    parts = []
    for tp in (1, 2):
        terms = _terms(
            LLAMA_7B, acc, tp, "BF16", "BF16", GPT_FAST_PROMPT, GPT_FAST_OUTPUT, raw, None
        )
        rest = float(S.step_seconds(terms, 1.0, 0.0)) - float(terms.weights_read)
        parts.append((rest, float(terms.weights_read)))
    (a1, m1), (a2, m2) = parts
    # t_tp - rest_tp = O + m_tp / e  for tp = 1, 2
    efficiency = (m1 - m2) / ((t1 - a1) - (t2 - a2))
    overhead = (t1 - a1) - m1 / efficiency
    fitted = {
        **values,
        "LLM_COMPUTE_EFFICIENCY": 1.0,
        "LLM_MEMORY_EFFICIENCY": efficiency,
        "LLM_STEP_OVERHEAD_SECONDS": overhead,
    }
    return {
        "LLM_COMPUTE_EFFICIENCY": _ttft_compute_efficiency(pts, fitted),
        "LLM_MEMORY_EFFICIENCY": efficiency,
        "LLM_STEP_OVERHEAD_SECONDS": overhead,
    }


def engine_constants() -> dict[str, float]:
    return {
        "LLM_COMPUTE_EFFICIENCY": S.LLM_COMPUTE_EFFICIENCY,
        "LLM_FP8_COMPUTE_EFFICIENCY": S.LLM_FP8_COMPUTE_EFFICIENCY,
        "LLM_MEMORY_EFFICIENCY": S.LLM_MEMORY_EFFICIENCY,
        "LLM_STEP_OVERHEAD_SECONDS": S.LLM_STEP_OVERHEAD_SECONDS,
        "LLM_KV_READ_EFFICIENCY": S.LLM_KV_READ_EFFICIENCY,
        "LLM_KV_SEQUENCE_TOKENS": S.LLM_KV_SEQUENCE_TOKENS,
        "LLM_SEQUENCE_OVERHEAD_SECONDS": S.LLM_SEQUENCE_OVERHEAD_SECONDS,
    }


# --- the rows ---------------------------------------------------------------------------------


def llm_serving_rows(
    points: Mapping[str, Any],
    constants: Mapping[str, float] | None = None,
    serving: Mapping[str, Any] | None = None,
) -> list[LlmPointRow]:
    """Every LLM-serving point: published, predicted (with the engine's constants), and whether
    the point was fitted or is a check. Empty when the file has no ``llm_inference`` section."""
    pts = _section(points)
    if not pts:
        return []
    c = dict(constants or engine_constants())
    rows: list[LlmPointRow] = []
    decode = pts["gpt-fast-batch1-decode"]
    for key, value in decode["tokens_per_s"].items():
        tp = int(str(key).rsplit("tp", 1)[1])
        rows.append(
            LlmPointRow(
                decode["id"],
                f"{key} decode tokens/s",
                float(value),
                1.0 / _decode_seconds(tp, c),
                FITTED if key in GPT_FAST_FIT else CHECKED,
                accelerator=GPT_FAST_ACCELERATOR,
                engine=GPT_FAST_ENGINE,
                precision="BF16",
            )
        )
    ttft = pts["trtllm-batch1-ttft-7b"]
    for key, value in ttft["ttft_ms"].items():
        rows.append(
            LlmPointRow(
                ttft["id"],
                f"{key} TTFT ms",
                float(value),
                _ttft_seconds(key, c) * 1e3,
                FITTED if key == TTFT_FIT else CHECKED,
                accelerator=GPUS[key.split("-")[0]],
                precision=key.split("-")[1].upper(),
            )
        )
    table = pts["trtllm-v0.6-llama7b-throughput"]
    for row in table["rows"]:
        what = f"{row['gpu']} {row['precision']} {row['input']}/{row['output']} b{row['batch']}"
        rows.append(
            LlmPointRow(
                table["id"],
                f"{what} output tokens/s",
                float(row["output_tokens_per_s"]),
                _static_batch_tokens_per_second(row, c),
                CHECKED,
                accelerator=GPUS[str(row["gpu"])],
                precision=str(row["precision"]).upper(),
            )
        )
    for r in throughput_rows(serving):
        fitted = r.setup in FIT_SETUPS
        rows.append(
            LlmPointRow(
                "trtllm-1.0-perf-overview",
                r.quantity,
                r.published,
                offline_tokens_per_second(r, c),
                FITTED if fitted else CHECKED,
                # A least-squares row is not reproduced exactly: held like a check.
                CHECKED_TOLERANCE if fitted else None,
                accelerator=GPUS[r.gpu],
                precision=r.precision,
                moe=MODELS[r.model].is_moe,
            )
        )
    rows.extend(static_batch_rows(c, serving))
    for r in throughput_rows(serving, MOE_FP4_SECTION):
        rows.append(
            LlmPointRow(
                "trtllm-perf-overview-moe-fp4",
                f"{r.quantity} ({r.precision})",
                r.published,
                offline_tokens_per_second(r, c),
                CHECKED,
                # Out of the model's reach, stated rather than refitted: Llama-4-Maverick's rows
                # are predicted up to 2.8x the published (the page's own note: Llama 4 below
                # 8,192 tokens regressed; top-1 of 128 experts under TP8 runs 1,024-wide expert
                # GEMMs far below the fitted efficiencies). docs/engine.md, MoE serving.
                MAVERICK_TOLERANCE if r.model == "llama-4-maverick" else None,
                accelerator=GPUS[r.gpu],
                precision=r.precision,
                moe=MODELS[r.model].is_moe,
            )
        )
    for r in throughput_rows(serving, V1_MOE_SECTION):
        rows.append(
            LlmPointRow(
                V1_MOE_ID,
                f"{r.quantity} ({r.precision})",
                r.published,
                offline_tokens_per_second(r, c),
                CHECKED,
                V1_MOE_TOLERANCE,
                accelerator=GPUS[r.gpu],
                precision=r.precision,
                moe=MODELS[r.model].is_moe,
            )
        )
    for r in throughput_rows(serving, V1_BLACKWELL_SECTION):
        maverick = r.model == "llama-4-maverick"
        rows.append(
            LlmPointRow(
                V1_MAVERICK_ID if maverick else V1_FP4_ID,
                f"{r.quantity} ({r.precision})",
                r.published,
                offline_tokens_per_second(r, c),
                CHECKED,
                # The H100 rows run Maverick's 400 GB on 640 GB: docs/engine.md, MoE serving.
                MAVERICK_TOLERANCE if maverick else None,
                accelerator=GPUS[r.gpu],
                precision=r.precision,
                moe=MODELS[r.model].is_moe,
            )
        )
    return rows


def checked_error_summary(rows: list[LlmPointRow]) -> tuple[float, float]:
    """Median and largest absolute relative error of the checked points."""
    errors = [abs(r.error) for r in rows if r.role == CHECKED]
    if not errors:
        return 0.0, 0.0
    return statistics.median(errors), max(errors)


def summary_line(points: Mapping[str, Any]) -> str | None:
    """One line for ``ringmaster calibrate``: the LLM-serving points' errors, fitted and
    checked apart."""
    rows = llm_serving_rows(points)
    if not rows:
        return None
    median, largest = checked_error_summary(rows)
    checked = sum(r.role == CHECKED for r in rows)
    fitted = [abs(r.error) for r in rows if r.role == FITTED]
    return (
        f"llm serving: {len(rows) - checked} points fitted (error median "
        f"{statistics.median(fitted):.1%}), {checked} checked; checked error median "
        f"{median:.1%}, largest {largest:.1%}"
    )


# A source's checked rows lean one way when their signed median is beyond this (issue 46's bound
# on a set's systematic error), over LEAN_MIN_ROWS rows or more.
LEAN_SIGNED_BOUND = 0.05
LEAN_MIN_ROWS = 3


def checked_sources(rows: list[LlmPointRow]) -> list[tuple[str, int, float, float]]:
    """(source, checked rows, median |error|, signed median) per source of checked rows, in the
    order the sources first appear."""
    grouped: dict[str, list[float]] = {}
    for r in rows:
        if r.role == CHECKED:
            grouped.setdefault(r.id, []).append(r.error)
    return [
        (source, len(e), statistics.median(abs(x) for x in e), statistics.median(e))
        for source, e in grouped.items()
    ]


def render_checked_sources(points: Mapping[str, Any]) -> str | None:
    """``ringmaster calibrate``'s lines per source of checked LLM-serving rows: how far and which
    way each set is off (predicted / published - 1: + on a throughput promises more than ran, -
    on a latency promises it sooner)."""
    rows = llm_serving_rows(points)
    if not rows:
        return None
    lines = [
        "llm serving, checked rows by source: rows, median |error|, signed median (throughput:"
        " + promises more than ran; TTFT / latency: - promises it sooner)"
    ]
    for source, count, med, signed in checked_sources(rows):
        lean = count >= LEAN_MIN_ROWS and abs(signed) > LEAN_SIGNED_BOUND
        lines.append(
            f"  {source:<34} {count:>3} rows  {med:>6.1%}  {signed:>+7.1%}"
            + ("  !" if lean else "")
        )
    lines.append(
        f"  '!': {LEAN_MIN_ROWS} rows or more whose signed median is beyond"
        f" +-{LEAN_SIGNED_BOUND:.0%} (a lean, not scatter)"
    )
    return "\n".join(lines)
