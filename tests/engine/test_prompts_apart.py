"""SGLang's default scheduler runs a prompt batch as a forward pass of its own, the decodes
waiting (serving_engines.ServingEngine.mixes_prompts_with_decodes, llm_step.step_seconds)."""

from __future__ import annotations

from statistics import median

import numpy as np
import pytest

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.engine import llm_closed_loop as CL
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.serving_engines import (
    ENGINES,
    prompts_run_apart,
    serving_engine,
    serving_evidence,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

H200 = DEFAULT_CATALOG.accelerator("nvidia-h200-141gb")
MODEL = KNOWN_TRANSFORMERS["llama-3.1-8b"]


def _terms(engine: str | None) -> S.ServingTerms:
    return S.serving_terms(
        MODEL, H200, 1, H200.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
        compute_precision="fp8", serving_engine=engine,
    )  # fmt: skip


def test_only_sglang_runs_its_prompts_apart():
    assert [e for e in ENGINES if prompts_run_apart(e)] == ["SGLang"]
    assert not prompts_run_apart(None)  # the default engine, vLLM, mixes them
    assert float(_terms("SGLang").prompts_apart) == 1.0
    assert float(_terms("vLLM").prompts_apart) == 0.0
    said = "prompt batches run as forward passes of their own"
    assert said in serving_evidence(serving_engine("SGLang"), H200.name)
    assert said not in serving_evidence(serving_engine("vLLM"), H200.name)


def test_a_step_with_prompts_is_two_passes_by_hand():
    """Apart: the decodes' pass plus the prompts' pass, each streaming the weights and paying
    the fixed costs; together (the same terms, mixed): one pass, never longer."""
    apart = _terms("SGLang")
    together = apart._replace(prompts_apart=np.zeros(()))
    n, p = 64.0, 2048.0
    decodes = float(S.step_seconds(together, n, 0.0))
    prompts = float(S.step_seconds(together, 0.0, p))
    assert float(S.step_seconds(apart, n, p)) == pytest.approx(decodes + prompts)
    assert float(S.step_seconds(together, n, p)) < decodes + prompts
    # a step of decodes alone, or of a prompt alone, is the same pass either way
    assert float(S.step_seconds(apart, n, 0.0)) == pytest.approx(decodes)
    assert float(S.step_seconds(apart, 0.0, p)) == pytest.approx(prompts)
    assert float(S.prefill_seconds(apart, p)) == pytest.approx(
        float(S.prefill_seconds(together, p))
    )
    # an empty step keeps the one pass's fixed cost
    assert float(S.step_seconds(apart, 0.0, 0.0)) == float(S.step_seconds(together, 0.0, 0.0))


def test_a_grid_of_terms_mixes_and_separates_per_element():
    apart = _terms("SGLang")
    grid = apart._replace(prompts_apart=np.array([0.0, 1.0]))
    steps = S.step_seconds(grid, 32.0, 1024.0)
    assert steps[0] == pytest.approx(
        float(S.step_seconds(grid._replace(prompts_apart=0.0), 32.0, 1024.0))
    )
    assert steps[1] == pytest.approx(float(S.step_seconds(apart, 32.0, 1024.0)))
    assert steps[1] > steps[0]


def test_sglangs_closed_loop_tpot_holds_its_prompt_passes():
    """In a closed loop the decodes wait out each prompt batch: SGLang's mean step is longer
    than the same terms mixed, and its measured runs (H200, 46) sit closer: TPOT 15.3 %
    median |error| (signed -15.2 %) mixed, 10.7 % (-6.8 %) apart; 10.2 % (-7.7 %) with each
    prompt in the steps that carry it (engine.llm_closed_loop.mean_step); 10.3 % (-8.1 %) since
    the serving constants' fit takes its runs' request counts in waves (FP8 GEMMs 0.5898)."""
    apart = _terms("SGLang")
    together = apart._replace(prompts_apart=np.zeros(()))
    budget = float(S.DEFAULT_MAX_NUM_BATCHED_TOKENS)
    assert (
        CL.closed_loop(apart, 128, 512, budget).tpot
        > CL.closed_loop(together, 128, 512, budget).tpot
    )
    runs = [r for r in CLR.llama_runs() if r.engine == "SGLang"]
    assert len(runs) == 46
    assert median(abs(r.tpot_error) for r in runs) < 0.12
    assert abs(median(r.tpot_error for r in runs)) < 0.09
