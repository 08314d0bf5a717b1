"""`ringmaster bench FILE --concurrency N --requests M [--input-tokens I --output-tokens O]
[--compare RESULT.json] [-o table|json]`

What a benchmark harness's closed loop should measure against one replica of an LLM
InferenceEndpoint as Ringmaster deploys it: ``N`` clients, each sending its next request when its
last is answered (aiperf and genai-perf ``--concurrency``, vLLM's ``bench serve
--max-concurrency``, SGLang's ``bench_serving --max-concurrency``), ``M`` requests in all, at
fixed lengths (the spec's means, or the harness's ``--input-tokens`` / ``--output-tokens``). The
replica is the plan's: its layout, engine, and the launcher flags the operator sets
(RINGMASTER_MAX_NUM_SEQS, RINGMASTER_MAX_NUM_BATCHED_TOKENS), for the spec's lengths.

The harness's clients start together, so a run measures the steady loop in most of its requests
and its starting wave (every client's first prompt at once) in one of ``M / N``
(engine.llm_closed_loop): the mean TTFT, and its tail above all, depend on the run's length.
Harnesses that wait for their warm-up's answers before they measure (aiperf does) start the
measured requests so; ``--requests`` counts the measured ones.

``--compare`` reads what the harness wrote (aiperf's ``profile_export_aiperf.json``, or the JSON
of ``vllm bench serve --save-result`` / ``sglang.bench_serving``) and prints predicted / measured
- 1 beside each figure; a run at another concurrency or request count is refused by name.

JSON (``-o json``): ``{kind, name, concurrency, requests, inputTokens, outputTokens, replica,
predicted: {ttftMeanMs, ttftP90Ms, ttftP99Ms, steadyTtftMs, tpotMeanMs, requestsPerSecond,
outputTokensPerSecond, running, slots}, measured?, error?, evidence}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_closed_loop as CL
from ringmaster.engine.hardware import Catalog
from ringmaster.engine.llm_serving import LlmServingPrediction
from ringmaster.planning.plans import (
    PlanError,
    active_catalog,
    llm_serving_inputs,
    predict_llm_serving_inputs,
)

EXIT_USAGE = 2
EXIT_INTERNAL = 1

# Figures a harness reports, in the order the table prints them: (key, words).
FIGURES = (
    ("ttft_mean_ms", "TTFT mean (ms)"),
    ("ttft_p90_ms", "TTFT p90 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("tpot_mean_ms", "TPOT mean (ms)"),
    ("requests_per_second", "requests/s"),
    ("output_tokens_per_second", "output tokens/s"),
)


class BenchError(Exception):
    """Bad input to the bench: one line naming what is wrong."""


@dataclass(frozen=True)
class BenchPrediction:
    name: str
    concurrency: int
    requests: int
    input_tokens: float
    output_tokens: float
    replica: str  # the replica in words: accelerators, layout, engine, precision, flags
    loop: CL.ClosedLoop
    slots: int  # the most sequences that run at once (max-num-seqs or the KV cache)
    evidence: str

    def figures(self) -> dict[str, float]:
        loop = self.loop
        return {
            "ttft_mean_ms": loop.ttft * 1e3,
            "ttft_p90_ms": loop.ttft_p90 * 1e3,
            "ttft_p99_ms": loop.ttft_p99 * 1e3,
            "tpot_mean_ms": loop.tpot * 1e3,
            "requests_per_second": loop.requests_per_second,
            "output_tokens_per_second": loop.requests_per_second * self.output_tokens,
        }


@dataclass(frozen=True)
class MeasuredRun:
    """What a harness wrote: its figures (FIGURES' keys; those it reports) and its load."""

    source: str
    figures: dict[str, float]
    concurrency: int | None
    requests: int | None


def _replica_words(found: LlmServingPrediction, accelerator: str) -> str:
    layout = f"TP{found.tensor_parallel}" + (
        f" x PP{found.pipeline_parallel}" if found.pipeline_parallel > 1 else ""
    )
    count = found.tensor_parallel * found.pipeline_parallel * found.attention_data_parallel
    return (
        f"{count} x {accelerator}, {layout}, {found.engine}, {found.precision}, "
        f"--max-num-seqs {found.max_num_seqs}, --max-num-batched-tokens "
        f"{found.max_num_batched_tokens}"
    )


def bench(
    spec: Any,
    name: str,
    concurrency: int,
    requests: int,
    catalog: Catalog,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> BenchPrediction:
    """The closed loop of ``concurrency`` clients and ``requests`` requests against one replica
    of the LLM endpoint ``spec`` as its plan deploys it, at the spec's mean lengths or the given
    ones."""
    if getattr(spec.model, "architecture", None) is None:
        raise BenchError(
            "spec.model.architecture: the bench models an LLM endpoint's steps; this endpoint "
            "has no architecture"
        )
    if concurrency < 1:
        raise BenchError("--concurrency: give 1 client or more")
    if requests < concurrency:
        raise BenchError(
            f"--requests {requests} is fewer than the {concurrency} clients: each client sends "
            "one request or more"
        )
    planned = llm_serving_inputs(spec)
    found = predict_llm_serving_inputs(planned, catalog)
    if not found.feasible and found.max_num_seqs == 0:
        raise BenchError(f"no replica of this endpoint runs: {found.reason}")
    n_in = float(input_tokens) if input_tokens is not None else planned.input_tokens_mean
    n_out = float(output_tokens) if output_tokens is not None else planned.output_tokens_mean
    # The replica the operator deploys (its layout and flags, sized for the spec's lengths), its
    # step at the harness's lengths.
    at_lengths = replace(
        planned,
        input_tokens_mean=n_in,
        output_tokens_mean=n_out,
        input_tokens_p99=n_in,
        output_tokens_p99=n_out,
        max_num_seqs=found.max_num_seqs,
        max_num_batched_tokens=found.max_num_batched_tokens,
        tensor_parallel=found.tensor_parallel,
        pipeline_parallel=found.pipeline_parallel,
        hosts_per_replica=found.hosts_per_replica,
    )
    run = predict_llm_serving_inputs(at_lengths, catalog) if at_lengths != planned else found
    terms = run.replica_terms
    if terms is None:
        raise BenchError(
            f"the harness's requests ({n_in:,.0f} + {n_out:,.0f} tokens) do not run on this "
            f"endpoint's replica: {run.reason}"
        )
    budget = float(found.max_num_batched_tokens)
    cap = B.capacity(
        terms, float(found.max_num_seqs), budget, 0.0, input_lengths=B.Lengths(n_in, n_in)
    )
    slots = max(int(float(cap.slots)), 1)
    loop = CL.closed_loop(terms, concurrency, slots, budget, requests / concurrency)
    return BenchPrediction(
        name=name,
        concurrency=concurrency,
        requests=requests,
        input_tokens=n_in,
        output_tokens=n_out,
        replica=_replica_words(found, planned.accelerator),
        loop=loop,
        slots=slots,
        evidence=found.evidence,
    )


# --- what a harness wrote --------------------------------------------------------------------

_TO_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}


def _aiperf(data: dict[str, Any], source: str) -> MeasuredRun:
    """aiperf's (genai-perf's) profile_export_aiperf.json: a metric a key, its statistics
    (avg, p90, p99) and unit inside."""

    def stat(key: str, name: str, per_ms: bool = True) -> float | None:
        metric = data.get(key)
        if not isinstance(metric, dict) or name not in metric:
            return None
        scale = _TO_MS.get(str(metric.get("unit", "ms")), 1.0) if per_ms else 1.0
        return float(metric[name]) * scale

    figures = {
        "ttft_mean_ms": stat("time_to_first_token", "avg"),
        "ttft_p90_ms": stat("time_to_first_token", "p90"),
        "ttft_p99_ms": stat("time_to_first_token", "p99"),
        "tpot_mean_ms": stat("inter_token_latency", "avg"),
        "requests_per_second": stat("request_throughput", "avg", per_ms=False),
        "output_tokens_per_second": stat("output_token_throughput", "avg", per_ms=False),
    }
    count = data.get("request_count")
    requests = count.get("avg") if isinstance(count, dict) else count
    loadgen = (data.get("input_config") or {}).get("loadgen") or {}
    concurrency = loadgen.get("concurrency")
    return MeasuredRun(
        source=source,
        figures={k: v for k, v in figures.items() if v is not None},
        concurrency=int(concurrency) if concurrency else None,
        requests=int(requests) if requests else None,
    )


def _flat(data: dict[str, Any], source: str) -> MeasuredRun:
    """vLLM's `bench serve --save-result` and SGLang's bench_serving: flat keys."""
    keys = {
        "ttft_mean_ms": "mean_ttft_ms",
        "ttft_p90_ms": "p90_ttft_ms",
        "ttft_p99_ms": "p99_ttft_ms",
        "tpot_mean_ms": "mean_tpot_ms",
        "requests_per_second": "request_throughput",
        "output_tokens_per_second": "output_throughput",
    }
    figures = {k: float(data[v]) for k, v in keys.items() if data.get(v) is not None}
    concurrency = data.get("max_concurrency")
    requests = data.get("completed", data.get("num_prompts"))
    return MeasuredRun(
        source=source,
        figures=figures,
        concurrency=int(concurrency) if concurrency else None,
        requests=int(requests) if requests else None,
    )


def read_result(path: str) -> MeasuredRun:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"--compare {path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # sglang.bench_serving appends a line a run: the last is the latest
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            data = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict):
        raise BenchError(f"--compare {path}: not a harness's JSON result (an object)")
    if "time_to_first_token" in data:
        run = _aiperf(data, path)
    elif "mean_ttft_ms" in data:
        run = _flat(data, path)
    else:
        raise BenchError(
            f"--compare {path}: neither aiperf's profile_export_aiperf.json nor a vLLM / SGLang "
            "bench result (no time_to_first_token, no mean_ttft_ms)"
        )
    if not run.figures:
        raise BenchError(f"--compare {path}: no figure the bench predicts")
    return run


def check_load(predicted: BenchPrediction, measured: MeasuredRun) -> None:
    """A run at another load than the one predicted is refused by name."""
    if measured.concurrency is not None and measured.concurrency != predicted.concurrency:
        raise BenchError(
            f"--concurrency {predicted.concurrency}, but {measured.source} ran "
            f"{measured.concurrency} clients"
        )
    if measured.requests is not None and measured.requests != predicted.requests:
        raise BenchError(
            f"--requests {predicted.requests}, but {measured.source} measured "
            f"{measured.requests} requests"
        )


# --- output ------------------------------------------------------------------------------------


def _errors(predicted: dict[str, float], measured: MeasuredRun | None) -> dict[str, float]:
    if measured is None:
        return {}
    return {
        k: predicted[k] / v - 1.0
        for k, v in measured.figures.items()
        if k in predicted and v > 0 and math.isfinite(v)
    }


def render_table(p: BenchPrediction, measured: MeasuredRun | None = None) -> str:
    figures = p.figures()
    errors = _errors(figures, measured)
    rounds = p.requests / p.concurrency
    lines = [
        f"InferenceEndpoint {p.name}: one replica ({p.replica})",
        f"closed loop: {p.concurrency} clients, {p.requests} requests ({rounds:.3g} a client, "
        f"starting together), {p.input_tokens:,.0f} / {p.output_tokens:,.0f} tokens",
        f"{'':<18}{'predicted':>12}" + (f"{'measured':>12}{'error':>9}" if measured else ""),
    ]
    for key, words in FIGURES:
        row = f"{words:<18}{figures[key]:>12,.4g}"
        if measured is not None:
            got = measured.figures.get(key)
            row += f"{got:>12,.4g}" if got is not None else f"{'-':>12}"
            row += f"{100 * errors[key]:>+8.1f}%" if key in errors else f"{'':>9}"
        lines.append(row)
    loop = p.loop
    waits = loop.waiting_seconds > 0.0
    lines.append(
        f"running: {loop.running:,.0f} of {p.slots:,} slots"
        + (f"; {p.concurrency - loop.running:,.0f} clients wait for one" if waits else "")
        + f"; the steady loop's TTFT {loop.steady_ttft * 1e3:,.4g} ms, the starting wave's "
        f"{loop.wave_ttft * 1e3:,.4g} ms (one request in {rounds:.3g})"
    )
    lines.append(f"evidence: {p.evidence}")
    return "\n".join(lines)


def render_json(p: BenchPrediction, measured: MeasuredRun | None = None) -> str:
    figures = p.figures()
    camel = {
        "ttft_mean_ms": "ttftMeanMs",
        "ttft_p90_ms": "ttftP90Ms",
        "ttft_p99_ms": "ttftP99Ms",
        "tpot_mean_ms": "tpotMeanMs",
        "requests_per_second": "requestsPerSecond",
        "output_tokens_per_second": "outputTokensPerSecond",
    }
    body: dict[str, Any] = {
        "kind": "InferenceEndpoint",
        "name": p.name,
        "concurrency": p.concurrency,
        "requests": p.requests,
        "inputTokens": p.input_tokens,
        "outputTokens": p.output_tokens,
        "replica": p.replica,
        "predicted": {
            **{camel[k]: round(v, 6) for k, v in figures.items()},
            "steadyTtftMs": round(p.loop.steady_ttft * 1e3, 6),
            "running": p.loop.running,
            "slots": p.slots,
        },
        "evidence": p.evidence,
    }
    if measured is not None:
        body["measured"] = {camel[k]: v for k, v in measured.figures.items()}
        body["error"] = {camel[k]: round(v, 6) for k, v in _errors(figures, measured).items()}
    return json.dumps(body, indent=2)


# --- the command -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="an InferenceEndpoint manifest (YAML; '-' for stdin)")
    parser.add_argument("--concurrency", type=int, required=True, help="the harness's clients")
    parser.add_argument(
        "--requests",
        type=int,
        required=True,
        help="the requests it measures (after a warm-up it waits out): its --request-count, "
        "--num-prompts",
    )
    parser.add_argument("--input-tokens", type=int, help="its prompt length (default: inputMean)")
    parser.add_argument("--output-tokens", type=int, help="its answer length (default: outputMean)")
    parser.add_argument(
        "--compare",
        metavar="RESULT.json",
        help="aiperf's profile_export_aiperf.json or a vLLM / SGLang bench result to hold it to",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("--catalog", help="a hardware catalog YAML (default: the built-in one)")


def _endpoint(path: str) -> tuple[Any, str]:
    from ringmaster.api import InferenceEndpointSpec, ManifestError, load_manifests

    if path == "-":
        text, source = sys.stdin.read(), "<stdin>"
    else:
        try:
            text, source = Path(path).read_text(encoding="utf-8"), path
        except OSError as exc:
            raise BenchError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        manifests = load_manifests(text, source=source)
    except ManifestError as exc:
        raise BenchError(str(exc)) from None
    endpoints = [m for m in manifests if isinstance(m.spec, InferenceEndpointSpec)]
    if len(endpoints) != 1:
        raise BenchError(f"{source}: give one InferenceEndpoint ({len(endpoints)} found)")
    return endpoints[0].spec, endpoints[0].name


def run(args: argparse.Namespace) -> int:
    try:
        spec, name = _endpoint(args.file)
        predicted = bench(
            spec,
            name,
            args.concurrency,
            args.requests,
            active_catalog(args.catalog),
            args.input_tokens,
            args.output_tokens,
        )
        measured = read_result(args.compare) if args.compare else None
        if measured is not None:
            check_load(predicted, measured)
        out = (render_json if args.output == "json" else render_table)(predicted, measured)
    except (BenchError, PlanError) as exc:
        print(f"ringmaster bench: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug, not bad input: still one line, and a different status
        print(f"ringmaster bench: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    print(out)
    return 0
