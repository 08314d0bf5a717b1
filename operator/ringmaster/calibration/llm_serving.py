"""The LLM-serving constants against the ``llm_inference`` points (fitted and checked apart).

Three constants of :mod:`ringmaster.engine.llm_serving` are fitted, each on a named subset:

- ``LLM_MEMORY_EFFICIENCY`` and ``LLM_STEP_OVERHEAD_SECONDS``: gpt-fast's batch-1 decode of
  Llama-2-7B on A100-80GB at TP1 and TP2 (two equations, two unknowns: the step is
  overhead + all-reduces + weights / (tp x HBM x efficiency));
- ``LLM_COMPUTE_EFFICIENCY``: TensorRT-LLM's batch-1 TTFT of LLaMA-7B with a 2,048-token prompt on
  A100 in FP16 (the most compute-bound point).

Every other point is *checked*, not fitted: gpt-fast TP4 and TP8, the other three TTFT points and
all six rows of the TensorRT-LLM throughput table. That table is static batching (a batch of B
requests is prefilled in one step, then decoded for ``output`` steps, and the next batch waits),
which the engine's own prefill and decode-step functions reproduce directly; it is a check of the
step model, not of continuous batching, which no published point isolates.

Hardware reading of the points: "A100-SXM" is the 80 GB part (batch 384 x 256 tokens of FP16
cache does not fit the 40 GB one) and the H100 FP8 rows run an FP8 KV cache (batch 768 x 256
tokens of FP16 cache would not fit in 80 GB). LLaMA-7B has Llama-2-7B's shape.

Pure: takes the parsed points file (a mapping), no I/O; ``ringmaster calibrate`` prints it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringmaster.engine import llm_serving as L
from ringmaster.engine.hardware import DEFAULT_CATALOG, Accelerator
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

LLAMA_7B: Transformer = KNOWN_TRANSFORMERS["llama-2-7b"]
GPUS = {
    "A100-SXM": "nvidia-a100-80gb",
    "A100": "nvidia-a100-80gb",
    "H100-SXM": "nvidia-h100-80gb",
    "H100": "nvidia-h100-80gb",
}
# gpt-fast's benchmark: a 5-token prompt and 200 generated tokens (its README's generate.py run).
GPT_FAST_PROMPT = 5
GPT_FAST_OUTPUT = 200
GPT_FAST_FIT = ("llama2-7b-tp1", "llama2-7b-tp2")
TTFT_FIT = "A100-fp16-input2048"
FITTED, CHECKED = "fitted", "checked"
# What the rows are held to: a fitted point is reproduced; a checked point within the largest
# error the model shows on the published set (the static-batching row at batch 768: the step
# model has no cost that grows with the batch beyond the roofline's).
FITTED_TOLERANCE = 0.01
CHECKED_TOLERANCE = 0.55


@dataclass(frozen=True)
class LlmPointRow:
    id: str
    quantity: str
    published: float
    predicted: float
    role: str  # FITTED or CHECKED

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published

    @property
    def tolerance(self) -> float:
        return FITTED_TOLERANCE if self.role == FITTED else CHECKED_TOLERANCE


def _section(points: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(p["id"]): p for p in points.get("llm_inference") or []}


def _terms(
    acc: Accelerator,
    tp: int,
    precision: str,
    kv: str,
    n_in: float,
    n_out: float,
    constants: Mapping[str, float],
) -> L.ServingTerms:
    return L.serving_terms(
        LLAMA_7B,
        acc,
        tp,
        acc.peak(L.COMPUTE_PRECISION[precision]),
        L.WEIGHT_BYTES[precision],
        L.KV_BYTES[kv],
        n_in,
        n_out,
        compute_efficiency=constants["LLM_COMPUTE_EFFICIENCY"],
        memory_efficiency=constants["LLM_MEMORY_EFFICIENCY"],
        step_overhead=constants["LLM_STEP_OVERHEAD_SECONDS"],
    )


def _decode_seconds(tp: int, constants: Mapping[str, float]) -> float:
    acc = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
    terms = _terms(acc, tp, "BF16", "BF16", GPT_FAST_PROMPT, GPT_FAST_OUTPUT, constants)
    return float(L.step_seconds(terms, 1.0, 0.0))


def _ttft_seconds(key: str, constants: Mapping[str, float]) -> float:
    gpu, precision, prompt = key.split("-")
    acc = DEFAULT_CATALOG.accelerator(GPUS[gpu])
    p = precision.upper()
    n = float(prompt.removeprefix("input"))
    terms = _terms(acc, 1, p, L.DEFAULT_KV_PRECISION[p], n, 1.0, constants)
    return float(L.prefill_seconds(terms, n))


def _static_batch_tokens_per_second(
    row: Mapping[str, Any], constants: Mapping[str, float]
) -> float:
    acc = DEFAULT_CATALOG.accelerator(GPUS[str(row["gpu"])])
    p = str(row["precision"]).upper()
    b, n_in, n_out = float(row["batch"]), float(row["input"]), float(row["output"])
    terms = _terms(acc, 1, p, L.DEFAULT_KV_PRECISION[p], n_in, n_out, constants)
    seconds = float(L.prefill_seconds(terms, b * n_in)) + (n_out - 1.0) * float(
        L.step_seconds(terms, b, 0.0)
    )
    return b * n_out / seconds


def derive_llm_constants(points: Mapping[str, Any]) -> dict[str, float]:
    """The three fitted constants, recomputed from their named points."""
    pts = _section(points)
    rates = pts["gpt-fast-batch1-decode"]["tokens_per_s"]
    t1, t2 = (1.0 / float(rates[k]) for k in GPT_FAST_FIT)
    # Raw terms: efficiency 1 and no overhead, so step = allreduces + weights_raw / efficiency.
    raw = {
        "LLM_COMPUTE_EFFICIENCY": 1.0,
        "LLM_MEMORY_EFFICIENCY": 1.0,
        "LLM_STEP_OVERHEAD_SECONDS": 0.0,
    }
    acc = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
    parts = []
    for tp in (1, 2):
        terms = _terms(acc, tp, "BF16", "BF16", GPT_FAST_PROMPT, GPT_FAST_OUTPUT, raw)
        comm = float(terms.allreduce_base + terms.allreduce_per_token)
        parts.append((comm, float(terms.weights_read + terms.kv_read_per_sequence)))
    (a1, m1), (a2, m2) = parts
    # t_tp - a_tp = O + m_tp / e  for tp = 1, 2
    efficiency = (m1 - m2) / ((t1 - a1) - (t2 - a2))
    overhead = (t1 - a1) - m1 / efficiency
    ttft = float(pts["trtllm-batch1-ttft-7b"]["ttft_ms"][TTFT_FIT]) * 1e-3
    gpu, precision, prompt = TTFT_FIT.split("-")
    n = float(prompt.removeprefix("input"))
    fitted = {
        "LLM_COMPUTE_EFFICIENCY": 1.0,
        "LLM_MEMORY_EFFICIENCY": efficiency,
        "LLM_STEP_OVERHEAD_SECONDS": overhead,
    }
    terms = _terms(
        DEFAULT_CATALOG.accelerator(GPUS[gpu]),
        1,
        precision.upper(),
        precision.upper(),
        n,
        1.0,
        fitted,
    )
    compute_raw = float(n * terms.prefill_compute_per_token)
    comm = float(terms.allreduce_base + n * terms.allreduce_per_token)
    fitted["LLM_COMPUTE_EFFICIENCY"] = compute_raw / (ttft - overhead - comm)
    return fitted


def engine_constants() -> dict[str, float]:
    return {
        "LLM_COMPUTE_EFFICIENCY": L.LLM_COMPUTE_EFFICIENCY,
        "LLM_MEMORY_EFFICIENCY": L.LLM_MEMORY_EFFICIENCY,
        "LLM_STEP_OVERHEAD_SECONDS": L.LLM_STEP_OVERHEAD_SECONDS,
    }


def llm_serving_rows(
    points: Mapping[str, Any], constants: Mapping[str, float] | None = None
) -> list[LlmPointRow]:
    """Every ``llm_inference`` point: published, predicted (with the engine's constants), and
    whether the point was fitted or is a check. Empty when the file has no such section."""
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
    """One line for ``ringmaster calibrate``: the checked LLM-serving points' errors."""
    rows = llm_serving_rows(points)
    if not rows:
        return None
    median, largest = checked_error_summary(rows)
    checked = sum(r.role == CHECKED for r in rows)
    return (
        f"llm_inference: {len(rows) - checked} points fitted, {checked} checked; checked error "
        f"median {median:.1%}, largest {largest:.1%}"
    )
