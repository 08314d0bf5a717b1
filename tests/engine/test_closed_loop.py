"""A closed loop of clients against one replica (engine.llm_closed_loop), and the measured
closed-loop runs it is held against (calibration.closed_loop_runs)."""

from __future__ import annotations

import itertools
import math
from statistics import median

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.calibration import serving_evidence as SV
from ringmaster.engine import llm_closed_loop as CL
from ringmaster.engine import llm_step as S
from ringmaster.engine.llm_batching import Lengths

pytestmark = pytest.mark.unit

BUDGET = float(S.DEFAULT_MAX_NUM_BATCHED_TOKENS)


def terms(n_in: int = 1024, n_out: int = 1024, gpu: str = "H100", tp: int = 4) -> S.ServingTerms:
    row = {
        "model": "llama-3.1-70b",
        "gpu": gpu,
        "weights": "fp8",
        "engine": "vLLM",
        "tp": str(tp),
        "input": str(n_in),
        "output": str(n_out),
    }
    built, _, _, _ = CLR.SE._terms(CLR._point(row))
    return built


def test_one_client_waits_for_nothing_and_keeps_littles_law():
    t = terms()
    one = CL.closed_loop(t, 1, 100, BUDGET)
    assert one.waiting_seconds == 0.0 and one.running == 1
    cycle = one.ttft + (float(t.output_tokens) - 1.0) * one.step
    assert one.requests_per_second * cycle == pytest.approx(1.0, rel=1e-6)
    # alone, its decodes share no step with a prompt (its own made its first token)
    assert one.tpot == pytest.approx(one.decode_only_step, rel=1e-9)
    assert one.tpot == pytest.approx(float(S.step_seconds(t, 1.0, 0.0)), rel=0.05)
    assert one.step > one.tpot  # the mean step counts the step that carries its prompt
    # the first token: half a step under way, then the whole prompt in one step
    assert one.ttft > float(S.step_seconds(t, 0.0, 1024.0))


@settings(max_examples=25, deadline=None)
@given(
    clients=st.integers(1, 256),
    n_in=st.sampled_from([128, 1024, 4096, 8192]),
    n_out=st.sampled_from([2, 128, 1024, 8192]),
)
def test_littles_law_holds_at_every_load(clients: int, n_in: int, n_out: int):
    t = terms(n_in, n_out)
    loop = CL.closed_loop(t, clients, 1_000, BUDGET)
    in_system = loop.requests_per_second * (loop.ttft + (n_out - 1.0) * loop.step)
    assert in_system == pytest.approx(clients, rel=1e-5)
    assert loop.decode_only_step * (1 - 1e-9) <= loop.tpot <= loop.step * (1 + 1e-9)
    assert 0.0 <= loop.decoding <= loop.running == clients
    assert loop.prompt_tokens_per_step <= BUDGET + 1e-6 or n_in > BUDGET


def test_more_clients_never_shorten_a_step_nor_lower_the_throughput():
    t = terms()
    loops = [CL.closed_loop(t, c, 10_000, BUDGET) for c in (1, 2, 4, 8, 16, 64, 256)]
    for a, b in itertools.pairwise(loops):
        assert b.tpot >= a.tpot * (1 - 1e-9)
        assert b.requests_per_second >= a.requests_per_second * (1 - 1e-9)


def test_clients_beyond_the_slots_wait_for_one():
    t = terms()
    full = CL.closed_loop(t, 32, 32, BUDGET)
    over = CL.closed_loop(t, 64, 32, BUDGET)
    assert full.waiting_seconds == 0.0 and over.waiting_seconds > 0.0
    assert over.requests_per_second == pytest.approx(full.requests_per_second, rel=1e-9)
    assert over.waiting_seconds == pytest.approx(32 / full.requests_per_second, rel=1e-9)
    assert over.tpot == pytest.approx(full.tpot, rel=1e-9)


def test_a_small_budget_queues_the_prompts():
    """Prompts of 8,192 tokens from 128 clients with 128-token answers: the budget's prompt
    tokens a step bound the requests a second, and the queue lands in TTFT."""
    t = terms(8192, 128)
    wide = CL.closed_loop(t, 128, 1_000, 1e9)
    narrow = CL.closed_loop(t, 128, 1_000, 2048.0)
    assert narrow.prompt_tokens_per_step <= 2048.0 * (1 + 1e-9)
    assert narrow.requests_per_second < wide.requests_per_second
    assert narrow.ttft > wide.ttft


def test_nonsense_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        CL.closed_loop(terms(), 0, 10, BUDGET)
    with pytest.raises(ValueError, match="at least 1"):
        CL.closed_loop(terms(), 4, 10, 0.0)


def test_every_measured_run_is_read_and_predicted():
    runs = CLR.closed_loop_runs()
    assert len(runs) == 685
    assert {r.engine for r in runs} == {"vLLM", "SGLang", "TensorRT-LLM"}
    assert {r.gpu for r in runs} == {"H100", "H200", "B200"}
    assert {r.precision for r in runs} == {"FP8", "BF16", "FP4"}
    for r in runs:
        assert math.isfinite(r.predicted_tpot_ms) and r.predicted_tpot_ms > 0
        assert math.isfinite(r.predicted_ttft_ms) and r.predicted_ttft_ms > 0
        assert 4 <= r.concurrency <= 512 and r.tp in (1, 2, 4, 8)


def test_every_runs_tpot_enters_the_matrix_in_a_latencys_sign():
    runs = CLR.closed_loop_runs()
    in_matrix = {row.source for row in SV.serving_rows() if row.source in {r.id for r in runs}}
    assert in_matrix == {r.id for r in runs}
    matrix = {row.source: row for row in SV.serving_rows()}
    some = runs[0]
    assert matrix[some.id].promise == pytest.approx(-some.tpot_error)  # a latency's sign


def test_the_sample_s_tpot_is_a_mean_the_prompt_heavy_runs_show_it():
    """TensorRT-LLM's H100 runs with short answers: the prompts make the mean step 1.5-5x the
    decodes' own, so a median inter-token gap (the decodes' step) and a mean TPOT part by that
    much. The mean step, prompts priced in the steps that carry them, holds them (6.1 % median
    over 93 runs); the decodes' step is 50 % short."""
    heavy = [
        r
        for r in CLR.closed_loop_runs()
        if (r.gpu, r.engine) == ("H100", "TensorRT-LLM") and r.prompt_share > 0.5
    ]
    assert len(heavy) >= 90
    # one step at the mean prompt tokens held its own 77 such runs at 9.5 %
    assert median(abs(r.tpot_error) for r in heavy) < 0.075
    decodes_alone = [r.predicted_tpot_ms / (1.0 + r.prompt_share) / r.tpot_ms - 1 for r in heavy]
    assert median(decodes_alone) < -0.45


def test_calibrate_prints_the_runs_by_cell_with_the_ttft_beyond_the_model():
    text = CLR.render_closed_loop_section()
    assert text.startswith("Closed-loop runs measured by AIConfigurator's team")
    assert "silicon_sample.csv @ 095f58a5" in text
    assert "H100       vLLM          FP8" in text and "TTFT residual" in text
    assert "TPOT of all 685 runs" in text and "largest TPOT error:" in text
    assert "prompts" in text.splitlines()[1]
    assert "TTFT beyond the model by clients" in text


def test_the_ttft_beyond_the_model_grows_with_the_clients():
    """What the runs carry beyond the model's TTFT is no fixed cost a request: a few tens of
    milliseconds at 4 clients, hundreds at 64 and more (the waves of equal-length clients)."""
    growth = CLR.ttft_residual_by_clients()
    assert list(growth) == sorted(growth) and min(growth) == 4 and max(growth) >= 64
    assert growth[4] < 60.0 < 200.0 < growth[max(growth)]
    assert growth[max(growth)] > 5 * growth[4]


def _simulated_loop(t: S.ServingTerms, clients: int, n_in: int, n_out: int, stagger: float):
    from tests.engine.llm_scheduler_reference import simulate

    return simulate(
        t,
        1.0,
        Lengths(n_in, n_in),
        Lengths(n_out, n_out),
        max_num_seqs=1024,
        max_num_batched_tokens=int(BUDGET),
        kv_cache_tokens=1_000_000,
        requests=8 * clients,
        warmup=0.25,
        concurrency=clients,
        stagger=stagger,
    )


@pytest.mark.parametrize(
    ("clients", "n_in", "n_out"),
    [(16, 1024, 1024), (64, 1024, 1024), (8, 4096, 256), (16, 4096, 128)],
)
def test_the_loop_agrees_with_the_seeded_simulation_of_it(clients: int, n_in: int, n_out: int):
    """The reference scheduler (tests/engine/llm_scheduler_reference.py, vLLM v1's, on the same
    step) run as the closed loop, its clients' first requests a cycle's share apart (as jitter
    spreads a real loop's): TPOT and TTFT agree with the mean-value model, prompts' steps and
    all."""
    t = terms(n_in, n_out)
    model = CL.closed_loop(t, clients, 10_000, BUDGET)
    sim = _simulated_loop(t, clients, n_in, n_out, 1.0 / model.requests_per_second)
    assert float(sim.tpot.mean()) == pytest.approx(model.tpot, rel=0.05)
    assert float(sim.ttft.mean()) == pytest.approx(model.ttft, rel=0.15)


def test_a_prompt_rides_in_the_steps_that_carry_it_not_spread_over_all():
    """Long prompts, short answers: the steps that carry a 4,096-token prompt are past the ridge
    and the rest are not, so the mean step is the mixture of the two. One step at the mean
    prompt tokens a step (the weights' read shared with the prompts) is 10 % short of the
    simulation; the mixture is within 3 %."""
    t = terms(4096, 256)
    model = CL.closed_loop(t, 8, 10_000, BUDGET)
    sim = float(_simulated_loop(t, 8, 4096, 256, 1.0 / model.requests_per_second).tpot.mean())
    smeared = float(
        S.step_seconds(
            t,
            model.decoding,
            model.prompt_tokens_per_step,
            model.decoding * float(t.context_tokens),
            prompt_length=4096,
        )
    )
    assert model.tpot == pytest.approx(sim, rel=0.03)
    assert smeared < 0.92 * sim
    assert model.decode_only_step < model.tpot < model.step * 1.001


def test_clients_that_start_together_keep_their_prompts_in_waves():
    """Equal-length requests that start together finish together: their prompts come in waves
    that wait for each other, 3-5x the mean-value TTFT, which spreads them out."""
    t = terms(1024, 1024)
    model = CL.closed_loop(t, 16, 10_000, BUDGET)
    sim = _simulated_loop(t, 16, 1024, 1024, 0.0)
    assert float(sim.ttft.mean()) > 3.0 * model.ttft
    assert float(sim.tpot.mean()) == pytest.approx(model.tpot, rel=0.05)
