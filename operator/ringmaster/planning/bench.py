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

JSON (``-o json``): ``{kind, name, load: {concurrency, requests} | {requestRate}, inputTokens,
outputTokens, replica, predicted: {the figures below that the load predicts, running, slots},
measured?, error?, evidence}``; figures: ttftMeanMs, ttftP50Ms, ttftP90Ms, ttftP99Ms,
tpotMeanMs, tpotP50Ms, tpotP99Ms, requestsPerSecond, outputTokensPerSecond.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from ringmaster.calibration.closed_loop_runs import ttft_evidence
from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_closed_loop as CL
from ringmaster.engine.hardware import Catalog
from ringmaster.engine.llm_serving import LlmServingPrediction
from ringmaster.engine.llm_step import ServingTerms
from ringmaster.planning.command import EXIT_INTERNAL, EXIT_USAGE, UsageError, read_input
from ringmaster.planning.plans import (
    PlanError,
    active_catalog,
    llm_serving_inputs,
    predict_llm_serving_inputs,
)

# Figures a harness reports, in the order the table prints them: (key, words).
FIGURES = (
    ("ttft_mean_ms", "TTFT mean (ms)", "ttftMeanMs"),
    ("ttft_p50_ms", "TTFT p50 (ms)", "ttftP50Ms"),
    ("ttft_p90_ms", "TTFT p90 (ms)", "ttftP90Ms"),
    ("ttft_p99_ms", "TTFT p99 (ms)", "ttftP99Ms"),
    ("tpot_mean_ms", "TPOT mean (ms)", "tpotMeanMs"),
    ("tpot_p50_ms", "TPOT p50 (ms)", "tpotP50Ms"),
    ("tpot_p99_ms", "TPOT p99 (ms)", "tpotP99Ms"),
    ("requests_per_second", "requests/s", "requestsPerSecond"),
    ("output_tokens_per_second", "output tokens/s", "outputTokensPerSecond"),
)
CAMEL = {key: camel for key, _, camel in FIGURES}


class BenchError(Exception):
    """Bad input to the bench: one line naming what is wrong."""


@dataclass(frozen=True)
class BenchPrediction:
    name: str
    concurrency: int | None  # a closed loop's clients (None: Poisson arrivals at ``rate``)
    requests: int | None
    rate: float | None  # requests a second, Poisson
    input_tokens: float
    output_tokens: float
    replica: str  # the replica in words: accelerators, layout, engine, precision, flags
    figures: dict[str, float]  # FIGURES' keys: those the load predicts
    running: float  # the mean sequences in the slots
    slots: int  # the most sequences that run at once (max-num-seqs or the KV cache)
    detail: str  # what else the model says of the load
    evidence: str
    loop: CL.ClosedLoop | None = None  # a closed loop's figures in full

    def load_words(self) -> str:
        lengths = f"{self.input_tokens:,.0f} / {self.output_tokens:,.0f} tokens"
        if self.concurrency is not None and self.requests is not None:
            rounds = self.requests / self.concurrency
            return (
                f"closed loop: {self.concurrency} clients, {self.requests} requests ({rounds:.3g} "
                f"a client, starting together), {lengths}"
            )
        return f"Poisson arrivals: {self.rate:,.4g} requests/s, {lengths} (means)"


@dataclass(frozen=True)
class MeasuredRun:
    """What a harness wrote: its figures (FIGURES' keys; those it reports) and its load."""

    source: str
    figures: dict[str, float]
    concurrency: int | None
    requests: int | None
    rate: float | None = None  # Poisson arrivals' requests a second


def _replica_words(found: LlmServingPrediction, accelerator: str) -> str:
    layout = (
        f"TP{found.tensor_parallel}"
        + (f" x PP{found.pipeline_parallel}" if found.pipeline_parallel > 1 else "")
        + (
            f" x DP{found.attention_data_parallel} (attention)"
            if found.attention_data_parallel > 1
            else ""
        )
        + (f", EP{found.expert_parallel}" if found.expert_parallel > 1 else "")
    )
    count = found.tensor_parallel * found.pipeline_parallel * found.attention_data_parallel
    return (
        f"{count} x {accelerator}, {layout}, {found.engine}, {found.precision}, "
        f"--max-num-seqs {found.max_num_seqs}, --max-num-batched-tokens "
        f"{found.max_num_batched_tokens}"
    )


class _Replica(NamedTuple):
    """The planned replica at the harness's lengths."""

    accelerator: str
    found: LlmServingPrediction  # the plan's prediction (its layout and flags)
    terms: ServingTerms  # the replica's step at the harness's lengths
    budget: float  # its --max-num-batched-tokens
    n_in: B.Lengths  # the spec's distributions, or fixed where given
    n_out: B.Lengths
    moe: bool  # a mixture of experts (the closed-loop evidence holds dense runs only)

    def words(self) -> str:
        return _replica_words(self.found, self.accelerator)


def _replica(
    spec: Any, catalog: Catalog, input_tokens: int | None, output_tokens: int | None
) -> _Replica:
    """The replica the plan deploys, its step at the harness's lengths."""
    if getattr(spec.model, "architecture", None) is None:
        raise BenchError(
            "spec.model.architecture: the bench models an LLM endpoint's steps; this endpoint "
            "has no architecture"
        )
    disaggregation = getattr(spec, "disaggregation", None)
    if disaggregation is not None and str(disaggregation.mode) != "Aggregated":
        raise BenchError(
            f"spec.disaggregation.mode {disaggregation.mode}: the bench models one aggregated "
            "replica, not prefill and decode sides apart; bench a copy with mode Aggregated"
        )
    if getattr(spec, "batching", None) == "Static":
        raise BenchError(
            "spec.batching Static: the bench models a continuously batching replica; a static "
            "batch's latency is in `ringmaster plan`"
        )
    planned = llm_serving_inputs(spec)
    found = predict_llm_serving_inputs(planned, catalog)
    if not found.feasible and found.max_num_seqs == 0:
        raise BenchError(f"no replica of this endpoint runs: {found.reason}")
    fixed = input_tokens is not None or output_tokens is not None
    n_in = float(input_tokens) if input_tokens is not None else planned.input_tokens_mean
    n_out = float(output_tokens) if output_tokens is not None else planned.output_tokens_mean
    in_p99 = n_in if fixed else (planned.input_tokens_p99 or n_in)
    out_p99 = n_out if fixed else (planned.output_tokens_p99 or n_out)
    # The replica the operator deploys (its layout and flags, sized for the spec's lengths), its
    # step at the harness's lengths.
    at_lengths = replace(
        planned,
        input_tokens_mean=n_in,
        output_tokens_mean=n_out,
        input_tokens_p99=in_p99,
        output_tokens_p99=out_p99,
        max_num_seqs=found.max_num_seqs,
        max_num_batched_tokens=found.max_num_batched_tokens,
        tensor_parallel=found.tensor_parallel,
        pipeline_parallel=found.pipeline_parallel,
        hosts_per_replica=found.hosts_per_replica,
    )
    run = predict_llm_serving_inputs(at_lengths, catalog) if at_lengths != planned else found
    if run.replica_terms is None:
        raise BenchError(
            f"the harness's requests ({n_in:,.0f} + {n_out:,.0f} tokens) do not run on this "
            f"endpoint's replica: {run.reason}"
        )
    return _Replica(
        planned.accelerator,
        found,
        run.replica_terms,
        float(found.max_num_batched_tokens),
        B.Lengths(n_in, in_p99),
        B.Lengths(n_out, out_p99),
        planned.model.is_moe,
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
    ones (fixed: the loop's model holds equal lengths)."""
    if concurrency < 1:
        raise BenchError("--concurrency: give 1 client or more")
    if requests < concurrency:
        raise BenchError(
            f"--requests {requests} is fewer than the {concurrency} clients: each client sends "
            "one request or more"
        )
    r = _replica(spec, catalog, input_tokens, output_tokens)
    terms, budget, n_in, n_out, found = r.terms, r.budget, r.n_in, r.n_out, r.found
    cap = B.capacity(
        terms,
        float(found.max_num_seqs),
        budget,
        0.0,
        input_lengths=B.Lengths(n_in.mean, n_in.mean),
    )
    slots = max(int(float(cap.slots)), 1)
    rounds = requests / concurrency
    loop = CL.closed_loop(terms, concurrency, slots, budget, rounds)
    waits = loop.waiting_seconds > 0.0
    return BenchPrediction(
        name=name,
        concurrency=concurrency,
        requests=requests,
        rate=None,
        input_tokens=n_in.mean,
        output_tokens=n_out.mean,
        replica=r.words(),
        figures={
            "ttft_mean_ms": loop.ttft * 1e3,
            "ttft_p50_ms": loop.ttft_p50 * 1e3,
            "ttft_p90_ms": loop.ttft_p90 * 1e3,
            "ttft_p99_ms": loop.ttft_p99 * 1e3,
            "tpot_mean_ms": loop.tpot * 1e3,
            "requests_per_second": loop.requests_per_second,
            "output_tokens_per_second": loop.requests_per_second * n_out.mean,
        },
        running=loop.running,
        slots=slots,
        detail=(
            f"running: {loop.running:,.0f} of {slots:,} slots"
            + (
                f"; {concurrency - loop.running:,.0f} clients wait for one (the model holds a "
                "whole sequence's cache for a slot; an engine that admits a request on its "
                "prompt's blocks and preempts when the cache fills, as vLLM does, may start "
                "them sooner and pay in recomputed prompts)"
                if waits
                else ""
            )
            + f"; the steady loop's TTFT {loop.steady_ttft * 1e3:,.4g} ms, the starting "
            f"wave's {loop.wave_ttft * 1e3:,.4g} ms (one request in {rounds:.3g})"
        ),
        evidence=f"{ttft_evidence(r.accelerator, found.engine, found.precision, r.moe)}; "
        + found.evidence,
        loop=loop,
    )


def bench_rate(
    spec: Any,
    name: str,
    rate: float,
    catalog: Catalog,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> BenchPrediction:
    """Poisson arrivals at ``rate`` requests a second against one replica of ``spec`` as its
    plan deploys it: the latency fixed point's TTFT and TPOT quantiles (the plan's)."""
    if not (rate > 0.0 and math.isfinite(rate)):
        raise BenchError("--request-rate: give a positive number of requests a second")
    r = _replica(spec, catalog, input_tokens, output_tokens)
    terms, budget, n_in, n_out, found = r.terms, r.budget, r.n_in, r.n_out, r.found
    cap = B.capacity(terms, float(found.max_num_seqs), budget, 0.0, input_lengths=n_in)
    offline = float(cap.rate)
    if rate >= offline:
        raise BenchError(
            f"--request-rate {rate:,.4g} is at or past the replica's offline maximum "
            f"({offline:,.4g} requests/s at these lengths): its queue grows for the whole run"
        )
    at = B.load_points(terms, cap, rate, n_in, n_out, budget)
    figures = {
        "ttft_p50_ms": float(at.ttft[0.5]) * 1e3,
        "ttft_p90_ms": float(at.ttft[0.9]) * 1e3,
        "ttft_p99_ms": float(at.ttft[0.99]) * 1e3,
        "tpot_p50_ms": float(at.tpot[0.5]) * 1e3,
        "tpot_p99_ms": float(at.tpot[0.99]) * 1e3,
        "requests_per_second": rate,
        "output_tokens_per_second": rate * n_out.mean,
    }
    slots = max(int(float(cap.slots)), 1)
    waits = float(at.wait_probability)
    return BenchPrediction(
        name=name,
        concurrency=None,
        requests=None,
        rate=rate,
        input_tokens=n_in.mean,
        output_tokens=n_out.mean,
        replica=r.words(),
        figures=figures,
        running=float(at.running),
        slots=slots,
        detail=(
            f"running: {float(at.running):,.1f} of {slots:,} slots on average, load "
            f"{float(at.load):.0%} of the offline maximum ({offline:,.4g} requests/s); a "
            "request waits for a slot "
            + ("under 0.1 % of the time" if waits < 1e-3 else f"{waits:.1%} of the time")
        ),
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
        "ttft_p50_ms": stat("time_to_first_token", "p50"),
        "ttft_p90_ms": stat("time_to_first_token", "p90"),
        "ttft_p99_ms": stat("time_to_first_token", "p99"),
        "tpot_mean_ms": stat("inter_token_latency", "avg"),
        "tpot_p50_ms": stat("inter_token_latency", "p50"),
        "tpot_p99_ms": stat("inter_token_latency", "p99"),
        "requests_per_second": stat("request_throughput", "avg", per_ms=False),
        "output_tokens_per_second": stat("output_token_throughput", "avg", per_ms=False),
    }
    count = data.get("request_count")
    requests = count.get("avg") if isinstance(count, dict) else count
    loadgen = (data.get("input_config") or {}).get("loadgen") or {}
    concurrency = loadgen.get("concurrency")
    rate = loadgen.get("request_rate")
    return MeasuredRun(
        source=source,
        figures={k: v for k, v in figures.items() if v is not None},
        concurrency=int(concurrency) if concurrency else None,
        requests=int(requests) if requests else None,
        rate=float(rate) if rate else None,
    )


def _flat(data: dict[str, Any], source: str) -> MeasuredRun:
    """vLLM's `bench serve --save-result` and SGLang's bench_serving: flat keys."""
    keys = {
        "ttft_mean_ms": "mean_ttft_ms",
        "ttft_p50_ms": "median_ttft_ms",
        "ttft_p90_ms": "p90_ttft_ms",
        "ttft_p99_ms": "p99_ttft_ms",
        "tpot_mean_ms": "mean_tpot_ms",
        "tpot_p50_ms": "median_tpot_ms",
        "tpot_p99_ms": "p99_tpot_ms",
        "requests_per_second": "request_throughput",
        "output_tokens_per_second": "output_throughput",
    }
    figures = {k: float(data[v]) for k, v in keys.items() if data.get(v) is not None}
    concurrency = data.get("max_concurrency")
    requests = data.get("completed", data.get("num_prompts"))
    rate = data.get("request_rate")
    return MeasuredRun(
        source=source,
        figures=figures,
        concurrency=int(concurrency) if concurrency else None,
        requests=int(requests) if requests else None,
        # vLLM writes "inf" (a string, or JSON's Infinity) for arrivals all at once
        rate=float(rate) if rate and math.isfinite(float(rate)) else None,
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
    if predicted.concurrency is not None:
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
        if measured.concurrency is None and measured.rate is not None:
            raise BenchError(
                f"--concurrency {predicted.concurrency}, but {measured.source} sent Poisson "
                f"arrivals at {measured.rate:,.4g} requests/s: give --request-rate"
            )
    elif predicted.rate is not None:
        if measured.rate is not None and not math.isclose(measured.rate, predicted.rate):
            raise BenchError(
                f"--request-rate {predicted.rate:,.4g}, but {measured.source} sent "
                f"{measured.rate:,.4g} requests/s"
            )
        if measured.concurrency is not None:
            raise BenchError(
                f"--request-rate {predicted.rate:,.4g}, but {measured.source} capped its "
                f"clients at {measured.concurrency}: give --concurrency and --requests"
            )


# --- output ------------------------------------------------------------------------------------


def _errors(predicted: dict[str, float], measured: MeasuredRun | None) -> dict[str, float]:
    """predicted / measured - 1 of each figure both have."""
    if measured is None:
        return {}
    return {
        k: predicted[k] / v - 1.0
        for k, v in measured.figures.items()
        if k in predicted and v > 0 and math.isfinite(v)
    }


def render_table(p: BenchPrediction, measured: MeasuredRun | None = None) -> str:
    errors = _errors(p.figures, measured)
    lines = [
        f"InferenceEndpoint {p.name}: one replica ({p.replica})",
        p.load_words(),
        f"{'':<18}{'predicted':>12}" + (f"{'measured':>12}{'error':>9}" if measured else ""),
    ]
    for key, words, _ in FIGURES:
        if key not in p.figures:
            continue
        row = f"{words:<18}{p.figures[key]:>12,.4g}"
        if measured is not None:
            got = measured.figures.get(key)
            row += f"{got:>12,.4g}" if got is not None else f"{'-':>12}"
            row += f"{100 * errors[key]:>+8.1f}%" if key in errors else f"{'':>9}"
        lines.append(row)
    lines.append(p.detail)
    lines.append(f"evidence: {p.evidence}")
    return "\n".join(lines)


def render_json(p: BenchPrediction, measured: MeasuredRun | None = None) -> str:
    load: dict[str, Any] = (
        {"concurrency": p.concurrency, "requests": p.requests}
        if p.concurrency is not None
        else {"requestRate": p.rate}
    )
    predicted: dict[str, Any] = {CAMEL[k]: round(v, 6) for k, v in p.figures.items()}
    if p.loop is not None:
        predicted["steadyTtftMs"] = round(p.loop.steady_ttft * 1e3, 6)
    body: dict[str, Any] = {
        "kind": "InferenceEndpoint",
        "name": p.name,
        "load": load,
        "inputTokens": p.input_tokens,
        "outputTokens": p.output_tokens,
        "replica": p.replica,
        "predicted": {**predicted, "running": p.running, "slots": p.slots},
        "evidence": p.evidence,
    }
    if measured is not None:
        body["measured"] = {CAMEL[k]: v for k, v in measured.figures.items()}
        body["error"] = {CAMEL[k]: round(v, 6) for k, v in _errors(p.figures, measured).items()}
    return json.dumps(body, indent=2)


# --- the command -------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="an InferenceEndpoint manifest (YAML; '-' for stdin)")
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, help="a closed loop's clients")
    load.add_argument(
        "--request-rate", type=float, help="Poisson arrivals' requests a second (open loop)"
    )
    parser.add_argument(
        "--requests",
        type=int,
        help="with --concurrency: the requests it measures (after a warm-up it waits out): its "
        "--request-count, --num-prompts",
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

    text, source = read_input(path)
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
        catalog = active_catalog(args.catalog)
        lengths = (args.input_tokens, args.output_tokens)
        if args.concurrency is not None:
            if args.requests is None:
                raise BenchError("--concurrency needs --requests: the requests the run measured")
            predicted = bench(spec, name, args.concurrency, args.requests, catalog, *lengths)
        else:
            if args.requests is not None:
                raise BenchError("--requests goes with --concurrency (a closed loop's run)")
            predicted = bench_rate(spec, name, args.request_rate, catalog, *lengths)
        measured = read_result(args.compare) if args.compare else None
        if measured is not None:
            check_load(predicted, measured)
        out = (render_json if args.output == "json" else render_table)(predicted, measured)
    except (BenchError, PlanError, UsageError) as exc:
        print(f"ringmaster bench: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug, not bad input: still one line, and a different status
        print(f"ringmaster bench: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    print(out)
    return 0
