"""TensorRT-LLM's NVFP4 decode GEMMs as it serves them (engine.serving_engines
.SERVED_FP4_DECODE_GEMM, calibration.served_fp4): its operator table is the autotuner's fallback
kernel, the served terms are fitted on the closed-loop runs' FP4 / FP8 TPOT ratio."""

from __future__ import annotations

import pytest

from ringmaster.calibration import served_fp4 as F
from ringmaster.engine import serving_engines as E

pytestmark = pytest.mark.unit

B200, GB200 = ("nvidia-b200", "trtllm"), ("nvidia-gb200", "trtllm")
B200_FP4 = ("nvidia-b200", "trtllm", "fp4")


def test_the_stored_terms_are_what_the_fits_give_from_the_table():
    """Both fits from the operator table's fallback entries, alternated: the stored terms (the
    fit is what sets them, a refit keeps them)."""
    decode, prompt = F.fit_served_fp4()
    assert decode == E.SERVED_FP4_DECODE_GEMM[B200]
    assert prompt == E.SERVED_FP4_GEMM_RATE[B200_FP4][1]
    # the decode GEMMs' two terms give every tensor parallelism's TPOT ratio; the prompt's one
    # ratio the first tokens'
    assert F.misfit(*decode) < 0.04 and F.prompt_misfit(prompt) < 0.05


def test_the_served_kernels_beat_the_fallback_the_table_timed():
    table, served = E.ENGINE_FP4_DECODE_GEMM[B200], E.SERVED_FP4_DECODE_GEMM[B200]
    # a tuned kernel streams no slower and costs no more a call than the fallback
    assert served[0] > table[0] and served[1] < table[1]
    # and it reads the runs: the table puts FP4 above FP8 at every tensor parallelism
    assert F.misfit(*table) > 5 * F.misfit(*served)
    measured = F.ratios_by_tp(*served)
    fallback = F.ratios_by_tp(*table)
    assert set(measured) == {1, 2, 4, 8}
    for tp, (ratio, predicted) in measured.items():
        assert predicted == pytest.approx(ratio, rel=0.03), tp
        assert fallback[tp][1] > 1.1 * ratio, tp
    # the runs' signature: FP4 faster where its weights dominate, slower where calls do
    assert measured[1][0] < 0.9 and measured[8][0] > 1.0


def test_the_served_prompt_gemms_beat_the_fallback_and_read_the_first_tokens():
    table = E.ENGINE_GEMM_RATE[B200_FP4]
    served = E.SERVED_FP4_GEMM_RATE[B200_FP4]
    assert served[0] == table[0]  # the decode band's ratio stays the table's
    assert served[1] > table[1]
    assert F.prompt_misfit(table[1], E.ENGINE_FP4_DECODE_GEMM[B200]) > 3 * F.prompt_misfit(
        served[1]
    )
    measured = F.prompt_ratios_by_tp(served[1])
    assert set(measured) == {1, 2, 4, 8}
    for tp, (ratio, predicted) in measured.items():
        assert predicted == pytest.approx(ratio, rel=0.07), tp
    # the pairs: long prompts, no slot to wait for, FP4's first token sooner
    pairs = F.prompt_pairs()
    assert len(pairs) >= 20
    assert all(int(p.fp4["input"]) >= F.PROMPT_PAIR_MIN_INPUT and p.measured < 1.0 for p in pairs)


def test_the_pairs_match_the_same_run_at_the_two_weights():
    pairs = F.run_pairs()
    assert len(pairs) >= 50
    for p in pairs:
        assert p.fp4["weights"] == "fp4" and p.fp4["engine"] == "TensorRT-LLM"
        assert p.fp4["gpu"] == "B200" and p.tp == int(p.fp4["tp"])
        assert 0.6 < p.measured < 1.3 and p.fp8_predicted_ms > 0


def test_the_gb200_carries_the_b200s_and_the_plan_says_which():
    assert E.SERVED_FP4_DECODE_GEMM[GB200] == E.SERVED_FP4_DECODE_GEMM[B200]
    served = E.quantized_decode_gemm("nvidia-b200", "TensorRT-LLM", "fp4")
    assert served == (E.SERVED_FP4_DECODE_GEMM[B200][0], E.SERVED_FP4_DECODE_GEMM[B200][1] * 1e-6)
    # other engines keep their own tables
    vllm = E.quantized_decode_gemm("nvidia-b200", "vLLM", "fp4")
    table = E.ENGINE_FP4_DECODE_GEMM[("nvidia-b200", "vllm")]
    assert vllm == (table[0], table[1] * 1e-6)
    b200 = E.serving_evidence(E.serving_engine("TensorRT-LLM"), "nvidia-b200", 8)
    gb200 = E.serving_evidence(E.serving_engine("TensorRT-LLM"), "nvidia-gb200", 8)
    assert "autotuned at warm-up" in b200 and "carried" not in b200.split("FP4 decode")[1][:120]
    assert "carried from the nvidia-b200's" in gb200
    assert "autotuned" not in E.serving_evidence(E.serving_engine("vLLM"), "nvidia-b200", 8)


def test_calibrate_names_the_fit_and_its_checks():
    from ringmaster.calibration.evidence import render_leave_one_out

    text = render_leave_one_out()
    assert "SERVED_FP4_DECODE_GEMM, SERVED_FP4_GEMM_RATE" in text
    section = F.render_served_fp4_section()
    assert "fallback kernel" in section and "TP8 1.04" in section
