"""A closed loop of clients against one replica (engine.llm_closed_loop), and the measured
closed-loop runs it is held against (calibration.closed_loop_runs)."""

from __future__ import annotations

import itertools
import math

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
    cycle = one.ttft + (float(t.output_tokens) - 1.0) * one.tpot
    assert one.requests_per_second * cycle == pytest.approx(1.0, rel=1e-6)
    # alone, a decode step is the batch-of-one step with its own prompt's share beside it
    assert one.decode_only_step <= one.tpot
    assert one.tpot == pytest.approx(float(S.step_seconds(t, 1.0, 0.0)), rel=0.05)
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
    in_system = loop.requests_per_second * (loop.ttft + (n_out - 1.0) * loop.tpot)
    assert in_system == pytest.approx(clients, rel=1e-5)
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


def test_only_the_tpots_the_statistic_does_not_decide_enter_the_matrix():
    runs = CLR.closed_loop_runs()
    judged = {r.id for r in runs if r.tpot_judged}
    assert 0 < len(judged) < len(runs)
    for r in runs:
        assert r.tpot_judged == (r.prompt_share <= CLR.AMBIGUOUS_PROMPT_SHARE)
    in_matrix = {row.source for row in SV.serving_rows() if row.source in {r.id for r in runs}}
    assert in_matrix == judged
    matrix = {row.source: row for row in SV.serving_rows()}
    some = next(r for r in runs if r.tpot_judged)
    assert matrix[some.id].promise == pytest.approx(-some.tpot_error)  # a latency's sign


def test_calibrate_prints_the_runs_by_cell_with_the_ttft_beyond_the_model():
    text = CLR.render_closed_loop_section()
    assert text.startswith("Closed-loop runs measured by AIConfigurator's team")
    assert "silicon_sample.csv @ 095f58a5" in text
    assert "H100       vLLM          FP8" in text and "TTFT residual" in text
    assert "TPOT judged on" in text and "largest TPOT error:" in text
    assert "TTFT beyond the model by clients" in text


def test_the_ttft_beyond_the_model_grows_with_the_clients():
    """What the runs carry beyond the model's TTFT is no fixed cost a request: a few tens of
    milliseconds at 4 clients, hundreds at 64 and more (the waves of equal-length clients)."""
    growth = CLR.ttft_residual_by_clients()
    assert list(growth) == sorted(growth) and min(growth) == 4 and max(growth) >= 64
    assert growth[4] < 60.0 < 200.0 < growth[max(growth)]
    assert growth[max(growth)] > 5 * growth[4]


@pytest.mark.parametrize(("clients", "n_in", "n_out"), [(16, 1024, 1024), (64, 1024, 1024)])
def test_the_mean_step_agrees_with_the_seeded_simulation_of_the_loop(
    clients: int, n_in: int, n_out: int
):
    """The reference scheduler (tests/engine/llm_scheduler_reference.py, vLLM v1's, on the same
    step) run as the closed loop: clients start together and each sends its next request when
    its last one ends. TPOT agrees with the mean-value model where decodes make the steps; TTFT
    does not, and the test says by how much: equal-length requests that start together finish
    together, so their prompts come in waves the mean-value model spreads out."""
    from tests.engine.llm_scheduler_reference import simulate

    t = terms(n_in, n_out)
    model = CL.closed_loop(t, clients, 10_000, BUDGET)
    sim = simulate(
        t,
        1.0,
        Lengths(n_in, n_in),
        Lengths(n_out, n_out),
        max_num_seqs=1024,
        max_num_batched_tokens=int(BUDGET),
        kv_cache_tokens=1_000_000,
        requests=4 * clients,
        warmup=0.25,
        concurrency=clients,
    )
    assert float(sim.tpot.mean()) == pytest.approx(model.tpot, rel=0.08)
    assert float(sim.ttft.mean()) > 2.0 * model.ttft  # the waves' prompts wait for each other
