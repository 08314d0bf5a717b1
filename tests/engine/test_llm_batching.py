"""Continuous batching: the fast queue model (engine.llm_batching) against the seeded discrete-event
simulation of vLLM v1's scheduler (llm_scheduler_reference.py), and the load curve's properties.

Stated tolerance of the fast model against the reference, loads 10% to 95% of the offline maximum,
no preemption (max-num-seqs within the cache, as the plans choose it):

- offline maximum: within 6% (within 0.5% when written);
- TPOT p50 within 15%; p99 within 15% up to 80% load, within 35% at 95% (the model keeps the
  prompts' amplification of a life's stretch where every slot is busy: +28% for 48 slots of
  fixed lengths);
- TTFT p99: between 0.6x and 1.7x up to 80%, and up to 2.5x at 95% load, where the queue for a
  slot dominates: the slots' count as an over-dispersed diffusion is conservative there (2.1x
  for 32 slots; test_latency_fixed_point.py states the same on longer runs);
- TTFT p50: between 0.75x and 1.4x up to 80% load (beyond, the median is a few steps either way:
  not stated).

Where the cache, not max-num-seqs, bounds the batch, vLLM preempts and recomputes; the fast model
has no recompute and is optimistic there (TTFT p99 down to 0.4x at 90% load): the plans keep
max-num-seqs within the cache at p99 lengths so that they do not run there.
"""

from __future__ import annotations

import numpy as np
import pytest

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
    "chat, max-num-seqs binds": (32, 2048, B.Lengths(256, 768), B.Lengths(96, 288)),
    "fixed lengths, long prompts": (48, 1024, B.Lengths(512, 512), B.Lengths(64, 64)),
}
LOADS = (0.1, 0.5, 0.8, 0.95)


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    seqs, budget, lengths_in, lengths_out = CASES[request.param]
    terms = _terms(lengths_in.mean, lengths_out.mean)
    cap = B.capacity(terms, seqs, budget, lengths_out.cv, input_lengths=lengths_in)
    runs = {
        load: simulate(
            terms,
            load * float(cap.rate),
            lengths_in,
            lengths_out,
            max_num_seqs=seqs,
            max_num_batched_tokens=budget,
            kv_cache_tokens=10**7,
            requests=REQUESTS,
            seed=7,
        )
        for load in LOADS
    }
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


def test_fast_model_agrees_with_the_reference_from_10_to_95_percent_load(case):
    terms, cap, budget, lengths_in, lengths_out, runs = case
    for load, run in runs.items():
        fast = B.load_points(terms, cap, load * float(cap.rate), lengths_in, lengths_out, budget)
        near = load > 0.8  # the slots' queue: the model is conservative there (docstring)
        for q in (0.5, 0.99):
            tolerance = 0.35 if near and q == 0.99 else 0.15
            assert float(fast.tpot[q]) == pytest.approx(run.tpot_q(q), rel=tolerance), (load, q)
        ratio = float(fast.ttft[0.99]) / run.ttft_q(0.99)
        assert 0.6 <= ratio <= (2.5 if near else 1.7), (load, ratio)
        if load <= 0.8:
            ratio = float(fast.ttft[0.5]) / run.ttft_q(0.5)
            assert 0.75 <= ratio <= 1.4, (load, ratio)


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
    rate = 20.0  # prompts a second: about one step in five carries one
    lumpy = float(B.mean_step(terms, 16, rate, lengths, 8000))
    smooth = float(S.step_seconds(terms, 16, rate * lumpy * 1024))
    assert lumpy > 1.2 * smooth  # a whole prompt in one step of five, not a fifth in each
    # arrivals far beyond what a step can serve: every step is full to the room
    many = float(B.mean_step(terms, 16, 1e5, lengths, 8000))
    assert many == pytest.approx(float(S.step_seconds(terms, 16, 8000)), rel=1e-6)


def test_the_chains_step_is_the_engines_step():
    """llm_prefill_queue.StepShape gathers step_seconds' parts once per configuration."""
    from ringmaster.engine import llm_prefill_queue as Q

    for n_in, n_out, running, tokens in ((512, 128, 16, 300), (128, 2048, 200, 4000)):
        terms = _terms(n_in, n_out)
        shape = Q.step_shape(terms, running, 700.0)
        expected = S.step_seconds(terms, running, tokens, prompt_length=700.0)
        assert float(shape.at(tokens)) == pytest.approx(float(expected), rel=1e-12)


# (input, output, max_num_seqs, budget) of fixed-length offline runs: short and long outputs.
FINITE_RUNS = ((128, 256, 64, 2048), (512, 128, 48, 2048), (128, 512, 256, 8192))


@pytest.mark.parametrize("n_in, n_out, seqs, budget", FINITE_RUNS)
def test_a_finite_offline_run_moves_in_waves_as_the_reference_does(n_in, n_out, seqs, budget):
    """A harness's N prompts of one length (trtllm-bench's num_requests, vLLM's num_prompts):
    whole waves of the slots, then the remainder at its own pace. The offline maximum alone
    promises 15-65 % more than the reference delivers once N is not a whole number of waves."""
    terms = _terms(n_in, n_out)
    lengths_in, lengths_out = B.Lengths(n_in, n_in), B.Lengths(n_out, n_out)
    cap = B.capacity(terms, seqs, budget, 0.0, input_lengths=lengths_in)
    assert float(B.offline_run(terms, np.inf, seqs, budget, input_lengths=lengths_in)) == (
        pytest.approx(float(cap.rate))
    )
    for waves in (0.6, 1.3, 2.2):
        n = round(waves * float(cap.slots))
        run = simulate(
            terms,
            1.0,
            lengths_in,
            lengths_out,
            max_num_seqs=seqs,
            max_num_batched_tokens=budget,
            kv_cache_tokens=10**7,
            requests=n,
            offline=True,
        )
        measured = n / float(np.nanmax(run.finish))
        model = float(B.offline_run(terms, n, seqs, budget, input_lengths=lengths_in))
        assert model == pytest.approx(measured, rel=0.10), (n, model, measured)
        assert model <= float(cap.rate)
        assert float(cap.rate) / measured - 1.0 > 0.15  # the steady state alone is far off
