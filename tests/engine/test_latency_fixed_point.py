"""Latency at load (issue 46, item 3): the batching model (engine.llm_batching) against the seeded
discrete-event reference of vLLM v1's scheduler (tests/engine/llm_scheduler_reference.py: Poisson
arrivals, the endpoint's length distributions, the engine's step at the running batch and its real
contexts, max-num-seqs, the KV cache's blocks with preemption by recompute, chunked prefill) at 50,
80, 95 and 99% of the model's offline maximum, for four representative endpoints, and the load
curve's properties.

These tests document where the current model stands; the ones marked xfail state the target and
the figures measured when they were written (3,000 requests a run, seeds below; the step of
engine.llm_step as it stood then). Model / reference, p99:

=================  =========  =====================  =====================
endpoint           offline    TTFT p99 at 50/80/95/99%  TPOT p99 at 50/80/95/99%
=================  =========  =====================  =====================
8B FP8, 1 x H100    +4.5%     0.95 0.71 1.59 2.48     0.82 0.70 0.73 0.88
70B BF16, A100 TP4  +0.5%     0.77 0.33 0.85 3.14     0.76 0.62 0.90 1.08
70B FP8, H100 TP8   +1.7%     1.16 1.05 1.21 3.54     0.95 0.90 0.97 0.98
  long outputs
8B FP8, short out   +8.1%     0.63 0.27 0.42 1.30     0.50 0.48 0.71 0.87
=================  =========  =====================  =====================

What the gaps come from (measured against the reference, not fixed here):

- the offline maximum is high where output lengths vary: a step's decode context is taken at
  ``in + out / 2``, but the running set is length-biased, ``in + out (1 + cv^2) / 2`` (with it the
  8B chat endpoint's maximum falls from +4.5% to +1%); short outputs (64 tokens) lose more to the
  prompts' chunks than ``h = out - 1 + max(1, in / (T - c))`` says (+8%). At 95-99% load a few
  percent of capacity is the whole headroom: the reference there runs at or past saturation;
- TTFT p99 at mid loads is low where prefill is a large share of the step (70B at 1,024-token
  prompts with an 8,192-token budget: 0.33x at 80%): prompts queue behind each other for the
  token budget, an M/G/1 queue of prefill work the model does not have (it adds the mean prompt
  tokens ahead of a prompt, not their queue);
- TPOT p99 is low at mid loads (0.5-0.8x): the running count's spread is taken as Poisson, while
  each prompt's prefill stretches every running request's life and so the count's excursions
  (the arrivals' noise amplified by ``1 / (1 - u)``, ``u`` the prompts' share of the step); short
  requests that a long prompt lands in are the p99;
- TTFT p99 at 99% is 2.5-3.5x high: Halfin-Whitt's M/G/c wait counts every slot at the saturated
  speed.

The monotone sweep (benchmarks/bench_latency_monotone.py, every example endpoint x engine x
layout x configuration the sizing evaluates, 250 rates up to 99.99% of the offline maximum):
782 of 3,150 series non-monotone, worst fall 31% (TPOT p50/p90/p99: 146/236/237 of 525 each;
TTFT p50/p90/p99: 103/51/9). Cause: as the running count reaches the slots, the count quantile
a request sees is pinned at ``c`` while the mean rises to it, so ``crowd = step(seen) - mean``
goes to 0, and the prompt lumps' per-step variance shrinks with the room left in the budget
(``budget - n``) although a request's life still takes every prompt admitted in it whole; the
quadrature ``mean + sqrt(crowd^2 + lumps^2)`` then falls.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from tests.engine.llm_scheduler_reference import simulate

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
A100 = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
REQUESTS = 3000
LOADS = (0.5, 0.8, 0.95, 0.99)
# The targets the fixed point is to meet against the reference (the judge is +-50% on p99
# at a published load; these are tighter, against our own reference).
P99_TOLERANCE = 0.25
OFFLINE_TOLERANCE = 0.02


def _terms(model: str, acc, tp: int, precision: str, n_in: float, n_out: float, w: float):
    return S.serving_terms(
        KNOWN_TRANSFORMERS[model],
        acc,
        tp,
        acc.peak(precision),
        w,
        w,
        n_in,
        n_out,
        compute_precision=precision,
    )


# name: (model, accelerator, TP, precision, bytes, max-num-seqs, budget, input, output lengths)
ENDPOINTS = {
    "8b-h100-chat": ("llama-3-8b", H100, 1, "fp8", 1.0, 256, 2048, (512, 2048), (256, 1024)),
    "70b-a100-tp4": ("llama-3-70b", A100, 4, "bf16", 2.0, 128, 8192, (1024, 1024), (256, 256)),
    "70b-h100-tp8-long": ("llama-3-70b", H100, 8, "fp8", 1.0, 256, 2048, (512, 1024), (2048, 4096)),
    "8b-h100-short": ("llama-3-8b", H100, 1, "fp8", 1.0, 64, 2048, (1024, 3072), (64, 256)),
}


def _endpoint(name: str):
    model, acc, tp, precision, w, seqs, budget, lin, lout = ENDPOINTS[name]
    lengths_in, lengths_out = B.Lengths(*map(float, lin)), B.Lengths(*map(float, lout))
    terms = _terms(model, acc, tp, precision, lengths_in.mean, lengths_out.mean, w)
    cap = B.capacity(terms, seqs, budget, lengths_out.cv, input_lengths=lengths_in)
    return terms, cap, seqs, budget, lengths_in, lengths_out


def _simulate(name: str, rate: float, *, seed: int, warmup: float = 0.1):
    terms, _, seqs, budget, lengths_in, lengths_out = _endpoint(name)
    return simulate(
        terms,
        rate,
        lengths_in,
        lengths_out,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        kv_cache_tokens=int(terms.kv_cache_tokens),
        requests=REQUESTS,
        seed=seed,
        warmup=warmup,
    )


@pytest.fixture(scope="module", params=list(ENDPOINTS))
def measured(request):
    name = request.param
    terms, cap, _, budget, lengths_in, lengths_out = _endpoint(name)
    rows = {}
    for load in LOADS:
        rate = load * float(cap.rate)
        run = _simulate(name, rate, seed=2)
        fast = B.load_points(terms, cap, rate, lengths_in, lengths_out, budget)
        rows[load] = (run, fast)
    return name, rows


def test_the_reference_is_seeded_and_its_saturated_throughput_is_the_offline_maximum():
    _, cap, *_ = _endpoint("70b-a100-tp4")
    a = _simulate("70b-a100-tp4", 2.0 * float(cap.rate), seed=5, warmup=0.0)
    b = _simulate("70b-a100-tp4", 2.0 * float(cap.rate), seed=5, warmup=0.0)
    assert np.array_equal(a.finish, b.finish) and np.array_equal(a.tpot, b.tpot)
    # arrivals at twice the maximum: the replica runs full, completions at its maximum
    assert a.saturated_throughput() == pytest.approx(float(cap.rate), rel=0.02)
    assert a.mean_running > 0.95 * float(cap.slots)


def test_the_offline_maximum_agrees_with_the_saturated_reference_within_10_percent():
    for name in ENDPOINTS:
        _, cap, *_ = _endpoint(name)
        run = _simulate(name, 2.0 * float(cap.rate), seed=5, warmup=0.0)
        assert float(cap.rate) == pytest.approx(run.saturated_throughput(), rel=0.10), name


@pytest.mark.xfail(
    reason="offline maximum +4.5% (8B chat, varying outputs: the decode context is not "
    "length-biased) and +8.1% (8B, 64-token outputs); 99% load needs it within 2%",
    strict=False,
)
def test_the_offline_maximum_agrees_with_the_saturated_reference_within_2_percent():
    for name in ENDPOINTS:
        _, cap, *_ = _endpoint(name)
        run = _simulate(name, 2.0 * float(cap.rate), seed=5, warmup=0.0)
        assert float(cap.rate) == pytest.approx(
            run.saturated_throughput(), rel=OFFLINE_TOLERANCE
        ), name


def test_the_model_is_finite_and_the_reference_serves_every_request_below_saturation(measured):
    name, rows = measured
    for load, (run, fast) in rows.items():
        assert np.isfinite(run.ttft).all() and np.isfinite(run.tpot).all(), (name, load)
        for q in B.QUANTILES:
            assert math.isfinite(float(fast.ttft[q])) and math.isfinite(float(fast.tpot[q]))


def test_tpot_p50_agrees_with_the_reference_up_to_80_percent_load(measured):
    name, rows = measured
    for load in (0.5, 0.8):
        run, fast = rows[load]
        ratio = float(fast.tpot[0.5]) / run.tpot_q(0.5)
        assert 0.7 <= ratio <= 1.2, (name, load, ratio)


@pytest.mark.xfail(
    reason="the current model's p99 against the reference: see the module's table (TTFT p99 "
    "0.27x-3.5x, TPOT p99 0.48x-1.08x)",
    strict=False,
)
def test_the_fixed_point_agrees_with_the_reference_at_50_80_95_and_99_percent_load(measured):
    name, rows = measured
    for load, (run, fast) in rows.items():
        for metric, model_q, reference_q in (
            ("ttft", fast.ttft, run.ttft_q),
            ("tpot", fast.tpot, run.tpot_q),
        ):
            ratio = float(model_q[0.99]) / reference_q(0.99)
            assert abs(ratio - 1.0) <= P99_TOLERANCE, (name, load, metric, ratio)


# --- properties -------------------------------------------------------------------------------

_lengths = st.sampled_from([(128, 128), (512, 2048), (1024, 1024), (2048, 128), (128, 2048)])


@settings(max_examples=40, deadline=None)
@given(
    lengths=_lengths,
    seqs=st.sampled_from([16, 64, 256, 512]),
    budget=st.sampled_from([1024, 2048, 8192]),
    load=st.floats(0.01, 0.999),
)
def test_latency_is_finite_below_the_offline_maximum(lengths, seqs, budget, load):
    n_in, n_out = lengths
    terms = _terms("llama-3-8b", H100, 1, "fp8", n_in, n_out, 1.0)
    lin, lout = B.Lengths(n_in, 3 * n_in), B.Lengths(n_out, 2 * n_out)
    cap = B.capacity(terms, seqs, budget, lout.cv, input_lengths=lin)
    point = B.load_points(terms, cap, load * float(cap.rate), lin, lout, budget)
    for q in B.QUANTILES:
        assert math.isfinite(float(point.ttft[q])) and math.isfinite(float(point.tpot[q]))
    beyond = B.load_points(terms, cap, 1.01 * float(cap.rate), lin, lout, budget)
    assert math.isinf(float(beyond.ttft[0.99])) and math.isinf(float(beyond.tpot[0.99]))


@settings(max_examples=40, deadline=None)
@given(
    lengths=_lengths,
    budget=st.sampled_from([1024, 2048, 8192]),
    seqs=st.integers(1, 1024),
    more=st.integers(1, 1024),
)
def test_a_larger_batch_cap_never_lowers_the_offline_maximum(lengths, budget, seqs, more):
    """As the sizing reads it: the best over every batch up to the cap (a server may run fewer
    sequences than its cap allows; engine.llm_serving takes that maximum)."""
    n_in, n_out = lengths
    terms = _terms("llama-3-8b", H100, 1, "fp8", n_in, n_out, 1.0)
    lin, lout = B.Lengths(n_in, 3 * n_in), B.Lengths(n_out, 2 * n_out)

    def offline(cap_seqs: int) -> float:
        batches = np.arange(1.0, cap_seqs + 1.0)
        return float(np.max(B.capacity(terms, batches, budget, lout.cv, input_lengths=lin).rate))

    assert offline(seqs + more) >= offline(seqs)


@pytest.mark.xfail(
    reason="TPOT p99 falls by up to 25% where the running count reaches the "
    "slots (see the module's docstring)",
    strict=False,
)
@settings(max_examples=60, deadline=None)
@given(
    lengths=_lengths,
    seqs=st.sampled_from([32, 128, 256, 512]),
    budget=st.sampled_from([1024, 2048, 8192]),
)
def test_a_higher_rate_never_lowers_p99(lengths, seqs, budget):
    n_in, n_out = lengths
    terms = _terms("llama-3-8b", H100, 1, "fp8", n_in, n_out, 1.0)
    lin, lout = B.Lengths(n_in, 3 * n_in), B.Lengths(n_out, 2 * n_out)
    cap = B.capacity(terms, seqs, budget, lout.cv, input_lengths=lin)
    rates = np.linspace(0.005, 0.999, 200) * float(cap.rate)
    point = B.load_points(terms, cap, rates, lin, lout, budget)
    for values in (point.ttft[0.99], point.tpot[0.99]):
        assert np.all(np.diff(values) >= -1e-9 * values[1:])


@pytest.mark.xfail(
    reason="231 of 1,044 series non-monotone here (vLLM, 80 rates); 782 of 3,150 in the full sweep",
    strict=False,
)
def test_no_example_endpoint_has_a_latency_series_that_falls_as_the_rate_rises():
    """The benchmark's sweep on the vLLM engine only and fewer rates (the full one:
    benchmarks/bench_latency_monotone.py)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_latency_monotone.py"
    spec = importlib.util.spec_from_file_location("bench_latency_monotone", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks its module up
    spec.loader.exec_module(bench)
    configs = bench.configurations(engines=("vLLM",))
    loads = np.concatenate([np.linspace(0.01, 0.95, 60), 1.0 - np.geomspace(0.05, 1e-3, 20)])
    series, bad, worst, names = bench.sweep(configs, loads)
    assert series > 500
    assert bad == 0, (bad, series, worst, names)
