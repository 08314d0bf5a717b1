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
    assert len(CLR.llama_runs()) == 685 and len(runs) == 1852
    # a measurement the sample lists under two ids is one run
    measured = {tuple(v for k, v in row.items() if k != "id") for row in CLR.run_rows()}
    assert len(measured) == len(runs)
    assert {r.engine for r in runs} == {"vLLM", "SGLang", "TensorRT-LLM"}
    assert {r.gpu for r in runs} == {"H100", "H200", "B200"}
    assert {r.precision for r in runs} == {"FP8", "BF16", "FP4", "INT4"}
    for r in runs:
        assert math.isfinite(r.predicted_tpot_ms) and r.predicted_tpot_ms > 0
        assert math.isfinite(r.predicted_ttft_ms) and r.predicted_ttft_ms > 0
        assert 1 <= r.concurrency <= 512 and r.tp * r.attention_dp in (1, 2, 4, 8)
        # the experts over every rank, or sliced (EP 1); a dense model has none
        assert r.ep in (1, r.tp * r.attention_dp) and (r.moe or r.ep == r.attention_dp == 1)


def test_the_other_models_runs_are_checked_only_and_fit_nothing():
    """Qwen3-32B and the mixtures of experts (taken in 2026-11-29) check the engine; the fits on
    these runs (FITTED_CELLS, SAMPLE_ROUNDS, the served FP4 GEMMs) keep Llama 3.1's alone."""
    others = [r for r in CLR.closed_loop_runs() if r.model not in CLR.FIT_MODELS]
    assert {r.model for r in others} == {
        "qwen3-32b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b", "kimi-k2"
    }  # fmt: skip
    assert {r.role for r in others} == {r.ttft_role for r in others} == {"checked"}
    assert any(r.cell in CLR.FITTED_CELLS for r in others)  # a fitted cell's other models
    assert any(r.attention_dp > 1 for r in others) and any(r.ep > 1 for r in others)
    text = CLR.render_more_models_section()
    assert "qwen3-235b-a22b H100  TensorRT-LLM  FP8     TP8 EP8" in text
    assert "mixture of experts: " in text.splitlines()[-1]
    assert "a request's latency" in text.splitlines()[-1]
    # SGLang's Qwen3-32B runs: TPOT 35 % long, TTFT 85 % short, a request's latency within 3 %
    sglang = [r for r in others if (r.model, r.engine, r.tp) == ("qwen3-32b", "SGLang", 2)]
    assert median(r.tpot_error for r in sglang) > 0.3 > -0.8 > median(r.ttft_error for r in sglang)
    assert abs(median(r.latency_error for r in sglang)) < 0.03


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
        for r in CLR.llama_runs()
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


def test_the_starting_wave_takes_the_ttfts_growth_with_the_clients():
    """Beyond the steady state alone, the measured TTFT grows with the clients: tens of
    milliseconds at 4, hundreds at 64 and more. With the clients' starting wave in one of
    SAMPLE_ROUNDS requests, what is left stays under 60 ms up to 64 clients."""
    steady = CLR.ttft_residual_by_clients(steady=True)
    run = CLR.ttft_residual_by_clients()
    assert list(steady) == sorted(steady) and min(steady) == 4 and max(steady) >= 64
    assert steady[4] < 60.0 < 200.0 < steady[max(steady)]
    assert steady[max(steady)] > 5 * steady[4]
    assert all(abs(run[c]) < 60.0 for c in run if c <= 64)
    assert all(run[c] < 0.5 * steady[c] for c in run if c >= 8)


def test_the_sample_rounds_are_their_fit_and_hold_the_cells_they_were_not_fitted_on():
    """SAMPLE_ROUNDS is what fit_sample_rounds gives on vLLM's H200 runs. Checked: vLLM's H100
    runs within 15 % (the steady state alone: 45 % short), TensorRT-LLM's H200 and B200 FP8 runs
    within 25 % (65-70 % short alone)."""
    assert CLR.fit_sample_rounds() == pytest.approx(CLR.SAMPLE_ROUNDS, abs=0.005)
    runs = CLR.llama_runs()

    def cell(gpu: str, engine: str, precision: str) -> list[CLR.ClosedLoopRun]:
        return [r for r in runs if (r.gpu, r.engine, r.precision) == (gpu, engine, precision)]

    for gpu, engine, bound in (
        ("H100", "vLLM", 0.15),
        ("H200", "TensorRT-LLM", 0.25),
        ("B200", "TensorRT-LLM", 0.25),
    ):
        rows = cell(gpu, engine, "FP8")
        assert {r.ttft_role for r in rows} == {"checked"}
        assert median(abs(r.ttft_error) for r in rows) < bound
        assert median(abs(r.steady_ttft_error) for r in rows) > 0.4
    fitted = cell(*CLR.FITTED_TTFT_CELL[:2], CLR.FITTED_TTFT_CELL[2])
    assert {r.ttft_role for r in fitted} == {"fitted"}


def test_a_run_of_more_rounds_is_nearer_the_steady_state():
    t = terms(1024, 1024)
    steady = CL.closed_loop(t, 32, 10_000, BUDGET)
    one = CL.closed_loop(t, 32, 10_000, BUDGET, rounds=1)
    ten = CL.closed_loop(t, 32, 10_000, BUDGET, rounds=10)
    assert steady.ttft == steady.steady_ttft and one.ttft == pytest.approx(one.wave_ttft)
    assert steady.ttft < ten.ttft < one.ttft
    assert ten.ttft == pytest.approx(steady.ttft + (one.ttft - steady.ttft) / 10)
    assert ten.tpot == steady.tpot and ten.requests_per_second == steady.requests_per_second
    with pytest.raises(ValueError, match="rounds"):
        CL.closed_loop(t, 32, 10_000, BUDGET, rounds=0.5)


def _simulated_loop(
    t: S.ServingTerms,
    clients: int,
    n_in: int,
    n_out: int,
    stagger: float,
    spread: float = 1.0,
    warmup: float = 0.25,
):
    from tests.engine.llm_scheduler_reference import simulate

    return simulate(
        t,
        1.0,
        Lengths(n_in, n_in * spread),
        Lengths(n_out, n_out * spread),
        max_num_seqs=1024,
        max_num_batched_tokens=int(BUDGET),
        kv_cache_tokens=1_000_000,
        requests=8 * clients,
        warmup=warmup,
        concurrency=clients,
        stagger=stagger,
        seed=3,
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


# A p99 2.3 % above the mean: lengths spread by about 1 %.
ONE_PERCENT = 1.0 + 2.3263 * 0.01


@pytest.mark.parametrize(
    ("clients", "n_in", "n_out"),
    [(8, 1024, 1024), (32, 1024, 1024), (64, 1024, 256), (16, 4096, 256)],
)
def test_the_starting_wave_is_the_simulated_loops_first_round(clients: int, n_in: int, n_out: int):
    """The reference scheduler's closed loop, its clients starting together: their first
    requests' mean TTFT is the starting wave's (the k-th prompt waits for the k - 1 before it)."""
    t = terms(n_in, n_out)
    model = CL.closed_loop(t, clients, 10_000, BUDGET)
    sim = _simulated_loop(t, clients, n_in, n_out, 0.0, ONE_PERCENT, warmup=0.0)
    assert float(sim.ttft[:clients].mean()) == pytest.approx(model.wave_ttft, rel=0.1)
    assert model.wave_ttft > 3.0 * model.steady_ttft


@pytest.mark.parametrize("clients", [8, 32])
def test_a_one_percent_spread_breaks_the_wave_up_within_a_round(clients: int):
    """Lengths spread by 1 %: the simulated loop's requests after the first round wait about as
    the steady state has it, so a run of 8 rounds measures the wave in one of 8 (equal lengths
    would keep it for good: the test above)."""
    t = terms(1024, 1024)
    model = CL.closed_loop(t, clients, 10_000, BUDGET, rounds=8)
    sim = _simulated_loop(t, clients, 1024, 1024, 0.0, ONE_PERCENT, warmup=0.0)
    assert float(sim.ttft.mean()) == pytest.approx(model.ttft, rel=0.1)


def test_the_starting_wave_by_hand():
    """Steps of a fixed 10 ms plus 1 us a token. A budget that holds every prompt: one step, one
    first token for all. One prompt a step: each waits for those before it, the decodes riding
    along take their token from the budget."""

    def step(decodes: float, tokens: float) -> float:
        return 0.010 + 1e-6 * (decodes + tokens)

    together = CL.starting_wave(step, 4, 1000.0, 8192.0)
    assert together == pytest.approx([0.014] * 4)
    apart = CL.starting_wave(step, 3, 1000.0, 1000.0)
    # 1: the first prompt whole (11 ms); 2: its decode and 999 of the second's tokens; 3: a
    # decode, the second's last token and 998 of the third's (its first token at 33 ms); 4: two
    # decodes and the third's last 2 tokens.
    assert apart == pytest.approx([0.011, 0.033, 0.033 + 0.010004])


@pytest.mark.parametrize(("clients", "n_out"), [(8, 1024), (32, 1024), (64, 256)])
def test_a_runs_ttft_tail_is_its_starting_wave(clients: int, n_out: int):
    """Eight rounds a client: the slowest tenth of the run's first tokens are the wave's late
    prompts, so its p90 and p99 are the wave's, many times the steady state's (the simulated
    loop's within 5 %)."""
    import numpy as np

    t = terms(1024, n_out)
    model = CL.closed_loop(t, clients, 10_000, BUDGET, rounds=8)
    sim = _simulated_loop(t, clients, 1024, n_out, 0.0, ONE_PERCENT, warmup=0.0)
    assert float(np.quantile(sim.ttft, 0.9)) == pytest.approx(model.ttft_p90, rel=0.05)
    assert float(np.quantile(sim.ttft, 0.99)) == pytest.approx(model.ttft_p99, rel=0.05)
    assert model.ttft_p99 > 5 * model.steady_ttft
    assert model.ttft_p50 == model.steady_ttft  # the wave is one request in 8
    steady = CL.closed_loop(t, clients, 10_000, BUDGET)
    assert steady.ttft_p50 == steady.ttft_p99 == steady.ttft == steady.steady_ttft


def test_a_closed_loops_ttft_names_the_cell_it_rests_on():
    checked = CLR.ttft_evidence("nvidia-h100-80gb", "vLLM", "FP8")
    assert checked.startswith("closed-loop TTFT checked: 45 runs of vLLM on nvidia-h100-80gb")
    fitted = CLR.ttft_evidence("nvidia-h200-141gb", "vLLM", "FP8")
    assert fitted.startswith("closed-loop TTFT fitted (SAMPLE_ROUNDS): 81 runs")
    out = CLR.ttft_evidence("nvidia-h200-141gb", "SGLang", "FP8")
    assert out.startswith("closed-loop TTFT out of reach: 46 runs") and "does not hold" in out
    none = CLR.ttft_evidence("nvidia-a100-80gb", "vLLM", "BF16")
    assert none.startswith("closed-loop TTFT: extrapolated, no measured run of vLLM")
