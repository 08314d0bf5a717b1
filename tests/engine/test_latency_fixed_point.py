"""Latency at load (issue 46, item 3): the batching model (engine.llm_batching, with the prompts'
backlog chain of engine.llm_prefill_queue) against the seeded discrete-event reference of vLLM
v1's scheduler (tests/engine/llm_scheduler_reference.py: Poisson arrivals, the endpoint's length
distributions, the engine's step at the running batch and its real contexts, max-num-seqs, the
KV cache's blocks with preemption by recompute, chunked prefill) at 50, 80, 95 and 99% of the
model's offline maximum, for four representative endpoints, and the load curve's properties.

The reference runs twice (seeds 2 and 3), 6,000 requests at 50 and 80% and 15,000 at 95 and 99%,
where the model is held to the median of the two. Model / reference, p99, as measured when this
was written:

=================  =========  =========================  =========================
endpoint           offline    TTFT p99 at 50/80/95/99%   TPOT p99 at 50/80/95/99%
=================  =========  =========================  =========================
8B FP8, 1 x H100    +1.4%     0.82 0.79 2.82 2.19        0.97 0.95 0.79 1.02
70B BF16, A100 TP4  +0.5%     0.94 0.85 1.27 1.95        0.91 0.84 1.22 1.46
70B FP8, H100 TP8   +0.7%     0.96 0.96 1.34 1.81        0.99 0.99 0.98 1.00
  long outputs
8B FP8, short out   +1.4%     0.83 0.83 1.63 2.79        0.75 0.79 1.22 1.63
=================  =========  =========================  =========================

The tolerances below follow what the reference itself can say at each load:

- at 50 and 80% both seeds agree within a few percent, and so must the model: TTFT p99 within
  25%, TPOT p99 within [0.7, 1.25] (a request of a few tokens whose life holds one long prompt
  step is the reference's TPOT p99 there; the model's spread of a short life is 20-25% narrow);
- at 95% the reference's TTFT p99 differs by up to 2.5x between shorter runs (a queue for the
  slots near capacity waits on rare runs of arrivals): the model is held within [0.5, 3.5];
  it is conservative there, because it counts the slots' count as a diffusion whose completion
  rate flattens as the count grows, which reaches the slots more often than the reference does
  where a replica has far more slots than its budget keeps busy (8B: 256);
- at 99% the reference is not in steady state in any run this suite can afford (its TTFT p99
  grows with the run's length: 18 s at 3,000 requests, 20-37 s at 30,000 for the 70B), so the
  model's stationary queue is held within [0.4, 3.5] of it, TPOT within [0.7, 1.75];
- TPOT p99 at 95-99% within [0.7, 1.75]: the model keeps the prompts' amplification of a life's
  stretch where every slot is busy (the reference's TPOT p99 can fall there), so that TPOT never
  falls as the rate rises.

What changed to get here (from 0.27x-3.5x): the prompts' backlog as a Markov chain over steps
(a long step lets more prompts in; the mean step 20% short and TTFT p99 at a quarter without
it), the decode context length-biased (``in + out (1 + cv^2) / 2``), the saturated offline
maximum on the same chain (+8% -> +1.4% for 64-token outputs), the slots' count over-dispersed
by the prompts' feedback (``(1 + u^2 cv^2) / (1 - u)^2``) as a diffusion with its completions
following the step, and the prompt's own length and the shortest outputs resolved in the TTFT and
TPOT mixtures.

The monotone sweep (benchmarks/bench_latency_monotone.py, every example endpoint x engine x
layout x configuration the sizing evaluates, 250 rates up to 99.99% of the offline maximum):
147 of 3,150 series non-monotone, worst fall 0.33% (TTFT p90 where the next step's room clips
a long prompt; TPOT p99 of an 8-slot Mixtral replica as its count reaches the slots); TTFT p99
never falls. It was 782 series and 31% before.
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
REQUESTS = 6000
# At 95 and 99% the slots' queue makes the reference's p99 swing between runs (the 8B chat's
# TTFT p99 at 95%: 0.65 and 0.26 s at 8,000 requests, 0.28 and 0.29 at 15,000): two longer runs.
NEAR_CAPACITY_REQUESTS = 15000
SEEDS = (2, 3)
LOADS = (0.5, 0.8, 0.95, 0.99)
OFFLINE_TOLERANCE = 0.02
# (low, high) bounds on model / reference p99 by load: see the module's docstring.
TTFT_P99_BOUNDS = {0.5: (0.75, 1.25), 0.8: (0.75, 1.25), 0.95: (0.5, 3.5), 0.99: (0.4, 3.5)}
TPOT_P99_BOUNDS = {0.5: (0.7, 1.25), 0.8: (0.7, 1.25), 0.95: (0.7, 1.75), 0.99: (0.7, 1.75)}


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


def _simulate(name: str, rate: float, *, seed: int, warmup: float = 0.1, requests: int = REQUESTS):
    terms, _, seqs, budget, lengths_in, lengths_out = _endpoint(name)
    return simulate(
        terms,
        rate,
        lengths_in,
        lengths_out,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        kv_cache_tokens=int(terms.kv_cache_tokens),
        requests=requests,
        seed=seed,
        warmup=warmup,
    )


class Reference:
    """The reference's runs at one rate, one per seed: quantiles are the median over them."""

    def __init__(self, runs: list) -> None:
        self.runs = runs

    def ttft_q(self, q: float) -> float:
        return float(np.median([run.ttft_q(q) for run in self.runs]))

    def tpot_q(self, q: float) -> float:
        return float(np.median([run.tpot_q(q) for run in self.runs]))


@pytest.fixture(scope="module", params=list(ENDPOINTS))
def measured(request):
    name = request.param
    terms, cap, _, budget, lengths_in, lengths_out = _endpoint(name)
    rows = {}
    for load in LOADS:
        rate = load * float(cap.rate)
        requests = REQUESTS if load <= 0.8 else NEAR_CAPACITY_REQUESTS
        runs = [_simulate(name, rate, seed=seed, requests=requests) for seed in SEEDS]
        fast = B.load_points(terms, cap, rate, lengths_in, lengths_out, budget)
        rows[load] = (Reference(runs), fast)
    return name, rows


def test_the_reference_is_seeded_and_its_saturated_throughput_is_the_offline_maximum():
    _, cap, *_ = _endpoint("70b-a100-tp4")
    a = _simulate("70b-a100-tp4", 2.0 * float(cap.rate), seed=5, warmup=0.0, requests=3000)
    b = _simulate("70b-a100-tp4", 2.0 * float(cap.rate), seed=5, warmup=0.0, requests=3000)
    assert np.array_equal(a.finish, b.finish) and np.array_equal(a.tpot, b.tpot)
    # arrivals at twice the maximum: the replica runs full, completions at its maximum
    assert a.saturated_throughput() == pytest.approx(float(cap.rate), rel=0.02)
    assert a.mean_running > 0.95 * float(cap.slots)


def test_the_offline_maximum_agrees_with_the_saturated_reference_within_2_percent():
    """+1.4%, +0.5%, +0.7%, +1.4% when written: within the reference's own sampling (3,000
    requests of a log-normal output with cv 0.8 put its mean output 1.5% either way)."""
    for name in ENDPOINTS:
        _, cap, *_ = _endpoint(name)
        run = _simulate(name, 2.0 * float(cap.rate), seed=5, warmup=0.0, requests=3000)
        assert float(cap.rate) == pytest.approx(
            run.saturated_throughput(), rel=OFFLINE_TOLERANCE
        ), name


def test_the_fixed_point_agrees_with_the_reference_at_50_80_95_and_99_percent_load(measured):
    """p99 within the bounds the module's docstring states, load by load; TPOT p50 within 10% up
    to 80% and 20% at 95%; both finite, and the reference serves every request."""
    name, rows = measured
    for load, (reference, fast) in rows.items():
        for run in reference.runs:
            assert np.isfinite(run.ttft).all() and np.isfinite(run.tpot).all(), (name, load)
        for q in B.QUANTILES:
            assert math.isfinite(float(fast.ttft[q])) and math.isfinite(float(fast.tpot[q]))
        for metric, model_q, reference_q, bounds in (
            ("ttft", fast.ttft, reference.ttft_q, TTFT_P99_BOUNDS),
            ("tpot", fast.tpot, reference.tpot_q, TPOT_P99_BOUNDS),
        ):
            ratio = float(model_q[0.99]) / reference_q(0.99)
            low, high = bounds[load]
            assert low <= ratio <= high, (name, load, metric, ratio)
        if load <= 0.95:
            ratio = float(fast.tpot[0.5]) / reference.tpot_q(0.5)
            spread = 0.1 if load <= 0.8 else 0.2
            assert abs(ratio - 1.0) <= spread, (name, load, "tpot p50", ratio)


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


def test_no_example_endpoint_latency_series_falls_by_a_percent_as_the_rate_rises():
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
    # A few series wiggle by under a percent between these coarser rates (0.33% at the
    # benchmark's 250; the module's docstring says where); none of them is a TTFT p99.
    assert worst <= 0.01, (bad, series, worst, names)
    assert not any("ttft p99" in name for name in names), names
