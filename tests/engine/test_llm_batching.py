"""Continuous batching: the fast queue model (engine.llm_batching) against the seeded discrete-event
simulation of vLLM v1's scheduler (llm_scheduler_reference.py), and the load curve's properties.

Stated tolerance of the fast model against the reference at 50, 80, 95 and 99% of the model's
offline maximum, no preemption (max-num-seqs within the cache, as the plans choose it), for a
small batch (32 slots) and a realistic one (256 slots, where the count runs in the hundreds):

- offline maximum: within 6%;
- TPOT mean within 20% and p99 within 30% (at 95% with hundreds of slots the model is low by up
  to 0.75x: the bursts of prompts that slow a request's steps are skewed beyond what the
  amplified lumps say);
- TTFT mean and p99 within 25% up to 80% load;
- TTFT mean and p99 between 0.3x and 2.5x at 95% and 99%: there the wait for a slot dominates,
  which goes as 1 / (lambda_max - lambda), so that a 1% error in the offline maximum moves it
  by a factor two at 99%; and the reference itself moves by that much from seed to seed (two
  seeds of 12,000-20,000 requests are pooled). With hundreds of slots at 95% the model is low
  (0.3x): the count's right tail, skewed by the prompts' bursts, reaches c more often than the
  chain says.

Where the cache, not max-num-seqs, bounds the batch, vLLM preempts and recomputes; the fast model
has no recompute and is optimistic there (TTFT p99 down to 0.4x at 90% load): the plans keep
max-num-seqs within the cache at p99 lengths so that they do not run there.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from tests.engine.llm_scheduler_reference import simulate

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
LLAMA3_8B = KNOWN_TRANSFORMERS["llama-3-8b"]
REQUESTS = 2500


def _terms(n_in: float, n_out: float) -> S.ServingTerms:
    return S.serving_terms(
        LLAMA3_8B, H100, 1, H100.peak("fp8"), 1.0, 1.0, n_in, n_out, compute_precision="fp8"
    )


# (name, max_num_seqs, max_num_batched_tokens, input lengths, output lengths)
CASES = {
    "chat, 32 slots": (32, 2048, B.Lengths(256, 768), B.Lengths(96, 288)),
    "chat, 256 slots (hundreds run)": (256, 8192, B.Lengths(512, 1536), B.Lengths(128, 384)),
}
# load -> (requests, seeds pooled): near capacity the reference needs long runs to settle.
LOADS = {0.5: (4000, (1,)), 0.8: (6000, (1,)), 0.95: (12000, (1, 2)), 0.99: (20000, (1, 2))}
# load -> (TTFT mean and p99 ratio bounds, TPOT mean rel, TPOT p99 rel); see the docstring.
TOLERANCE = {
    0.5: ((0.75, 1.25), 0.2, 0.3),
    0.8: ((0.75, 1.25), 0.2, 0.3),
    0.95: ((0.3, 2.5), 0.2, 0.3),
    0.99: ((0.3, 2.5), 0.2, 0.3),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    seqs, budget, lengths_in, lengths_out = CASES[request.param]
    terms = _terms(lengths_in.mean, lengths_out.mean)
    cap = B.capacity(terms, seqs, budget, lengths_out.cv, input_lengths=lengths_in)
    runs = {}
    for load, (requests, seeds) in LOADS.items():
        pooled = [
            simulate(
                terms,
                load * float(cap.rate),
                lengths_in,
                lengths_out,
                max_num_seqs=seqs,
                max_num_batched_tokens=budget,
                kv_cache_tokens=10**8,
                requests=requests,
                seed=seed,
            )
            for seed in seeds
        ]
        runs[load] = (
            np.concatenate([r.ttft for r in pooled]),
            np.concatenate([r.tpot for r in pooled]),
        )
    return terms, cap, budget, lengths_in, lengths_out, runs


def test_the_reference_is_seeded_and_serves_every_request():
    terms = _terms(256, 96)
    lengths = B.Lengths(256, 768), B.Lengths(96, 288)
    a = simulate(
        terms,
        20.0,
        *lengths,
        max_num_seqs=32,
        max_num_batched_tokens=2048,
        kv_cache_tokens=10**6,
        requests=400,
        seed=3,
    )
    b = simulate(
        terms,
        20.0,
        *lengths,
        max_num_seqs=32,
        max_num_batched_tokens=2048,
        kv_cache_tokens=10**6,
        requests=400,
        seed=3,
    )
    assert np.array_equal(a.ttft, b.ttft) and np.array_equal(a.tpot, b.tpot)
    assert len(a.ttft) == 360  # 400 less the 10% warm-up
    assert (a.ttft > 0).all() and (a.tpot > 0).all()


def test_offline_maximum_agrees_with_the_reference():
    for seqs, budget, lengths_in, lengths_out in CASES.values():
        terms = _terms(lengths_in.mean, lengths_out.mean)
        cap = B.capacity(terms, seqs, budget, lengths_out.cv, input_lengths=lengths_in)
        run = simulate(
            terms,
            1.0,
            lengths_in,
            lengths_out,
            max_num_seqs=seqs,
            max_num_batched_tokens=budget,
            kv_cache_tokens=10**7,
            requests=REQUESTS,
            offline=True,
        )
        # everything arrives at once: the measured 90% over the whole run
        assert float(cap.rate) == pytest.approx(run.throughput / 0.9, rel=0.06)


def test_fast_model_agrees_with_the_reference_at_50_80_95_and_99_percent_load(case):
    terms, cap, budget, lengths_in, lengths_out, runs = case
    for load, (ttft, tpot) in runs.items():
        fast = B.load_points(terms, cap, load * float(cap.rate), lengths_in, lengths_out, budget)
        (low, high), tpot_mean, tpot_p99 = TOLERANCE[load]
        assert fast.ttft_mean is not None and fast.tpot_mean is not None
        for model, reference in (
            (fast.ttft_mean, np.mean(ttft)),
            (fast.ttft[0.99], np.quantile(ttft, 0.99)),
        ):
            assert low <= float(model) / reference <= high, (load, float(model), reference)
        assert float(fast.tpot_mean) == pytest.approx(np.mean(tpot), rel=tpot_mean), load
        assert float(fast.tpot[0.99]) == pytest.approx(np.quantile(tpot, 0.99), rel=tpot_p99), load


def test_the_running_count_follows_the_reference():
    """The chain's law of the running count (about the fixed point, spread by the prompts'
    bursts) against the time the reference spends at each count."""
    seqs, budget, lengths_in, lengths_out = CASES["chat, 256 slots (hundreds run)"]
    terms = _terms(lengths_in.mean, lengths_out.mean)
    cap = B.capacity(terms, seqs, budget, lengths_out.cv, input_lengths=lengths_in)
    rate = 0.8 * float(cap.rate)
    run = simulate(
        terms,
        rate,
        lengths_in,
        lengths_out,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        kv_cache_tokens=10**8,
        requests=6000,
        seed=1,
    )
    point = B.load_points(terms, cap, rate, lengths_in, lengths_out, budget)
    occ = B.occupancy(terms, cap, rate, point.running, point.step)
    share = run.running_seconds / run.running_seconds.sum()
    counts = np.arange(share.size)
    assert float(occ.mean) == pytest.approx(float(np.sum(counts * share)), rel=0.1)
    cdf = np.cumsum(share)
    for q in (0.1, 0.5, 0.9, 0.99):
        reference = float(np.searchsorted(cdf, q))
        assert float(B.count_quantile(occ, q)) == pytest.approx(reference, rel=0.15), q


def test_preemption_happens_in_the_reference_when_the_cache_binds():
    terms = _terms(256, 96)
    lengths_in, lengths_out = B.Lengths(256, 768), B.Lengths(96, 288)
    cache = 30 * (256 + 48 + 8)  # about 30 mean sequences; max-num-seqs 256 never binds
    terms_small = terms._replace(kv_cache_tokens=np.float64(cache))
    cap = B.capacity(terms_small, 256, 2048, lengths_out.cv, input_lengths=lengths_in)
    assert int(cap.binds) == B.CAPACITY_KV_CACHE and 20 <= float(cap.slots) <= 30
    run = simulate(
        terms_small,
        0.9 * float(cap.rate),
        lengths_in,
        lengths_out,
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        kv_cache_tokens=cache,
        requests=REQUESTS,
        seed=1,
    )
    assert run.preemptions > 0
    fast = B.load_points(terms_small, cap, 0.9 * float(cap.rate), lengths_in, lengths_out, 2048)
    # the fast model has no recompute: optimistic here, within the stated bound
    assert 0.4 <= float(fast.ttft[0.99]) / run.ttft_q(0.99) <= 1.2
    assert float(fast.tpot[0.99]) == pytest.approx(run.tpot_q(0.99), rel=0.25)


# --- properties of the load curve -----------------------------------------------------------


def test_p99_ttft_and_tpot_never_fall_as_the_load_rises():
    for seqs in (16, 64, 256):
        for n_in, n_out in ((128, 128), (1000, 1000), (2048, 128), (128, 2048)):
            terms = _terms(n_in, n_out)
            lin, lout = B.Lengths(n_in, 3 * n_in), B.Lengths(n_out, 2 * n_out)
            cap = B.capacity(terms, seqs, 8192, lout.cv, input_lengths=lin)
            rates = np.linspace(0.01, 0.99, 99) * float(cap.rate)
            point = B.load_points(terms, cap, rates, lin, lout)
            for values in (point.ttft[0.99], point.tpot[0.99]):
                assert np.all(np.diff(values) >= -1e-12 * values[1:]), (seqs, n_in, n_out)
            assert np.all(point.ttft[0.99] >= point.ttft[0.5])
            assert np.all(point.tpot[0.99] >= point.tpot[0.5] - 1e-15)


def test_saturation_throughput_never_rises_with_longer_outputs():
    for seqs in (8, 64, 512):
        previous = np.inf
        for n_out in (16, 64, 256, 1024, 4096):
            terms = _terms(512, n_out)
            rate = float(
                B.capacity(terms, seqs, 8192, 0.5, input_lengths=B.Lengths(512, 1024)).rate
            )
            assert rate <= previous
            previous = rate


def test_prefill_lumps_cost_more_than_their_mean_when_steps_stream_weights():
    terms = _terms(1024, 128)
    lengths = B.Lengths(1024, 1024)
    lumpy = float(B.expected_step(terms, 16, 0.2, lengths, 8000))
    smooth = float(S.step_seconds(terms, 16, 0.2 * 1024))
    assert lumpy > 1.2 * smooth  # a whole prompt in one step of five, not a fifth in each
    many = float(B.expected_step(terms, 16, 50.0, lengths, 8000))
    assert many == pytest.approx(float(S.step_seconds(terms, 16, 8000)), rel=1e-6)  # the room


# --- properties, over configurations drawn by hypothesis --------------------------------------

_lengths = st.tuples(st.sampled_from((32, 128, 512, 2048)), st.sampled_from((1.0, 2.0, 4.0)))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seqs=st.sampled_from(B.MAX_NUM_SEQS_CHOICES),
    budget=st.sampled_from(B.MAX_NUM_BATCHED_TOKENS_CHOICES),
    prompt=_lengths,
    output=_lengths,
    loads=st.lists(st.floats(0.01, 0.999), min_size=2, max_size=6),
)
def test_a_higher_rate_never_lowers_p99_and_latency_is_finite_below_the_offline_maximum(
    seqs, budget, prompt, output, loads
):
    lengths_in = B.Lengths(prompt[0], prompt[0] * prompt[1])
    lengths_out = B.Lengths(output[0], output[0] * output[1])
    terms = _terms(lengths_in.mean, lengths_out.mean)
    cap = B.capacity(terms, seqs, budget, lengths_out.cv, input_lengths=lengths_in)
    assume(float(cap.rate) > 0.0)
    rates = np.sort(np.array(loads)) * float(cap.rate)
    point = B.load_points(terms, cap, rates, lengths_in, lengths_out, budget)
    for values in (point.ttft[0.99], point.tpot[0.99]):
        assert np.all(np.isfinite(values)) and np.all(values > 0.0)
        assert np.all(np.diff(values) >= -1e-9 * values[1:]), (rates, values)
