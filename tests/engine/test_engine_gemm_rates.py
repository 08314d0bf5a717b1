"""The serving engines' GEMM rates on Blackwell (engine.serving_engines.ENGINE_GEMM_RATE) and the
chips' NVFP4 ceilings (engine.ceilings.MEASURED_FP4_MATMUL_RATIO): fitted on AIConfigurator's
operator databases, read by the serving step and the ceilings."""

from __future__ import annotations

from itertools import pairwise

import pytest

from ringmaster.calibration import aiconfigurator as A
from ringmaster.engine import ceilings as CE
from ringmaster.engine import llm_step as S
from ringmaster.engine import serving_engines as E
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

B200 = DEFAULT_CATALOG.accelerator("nvidia-b200")
H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
MODEL = KNOWN_TRANSFORMERS["llama-3.1-70b"]
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}


def _terms(acc, precision: str, engine: str | None, tp: int = 1) -> S.ServingTerms:
    return S.serving_terms(
        MODEL, acc, tp, acc.peak(precision), WEIGHT_BYTES[precision], 1.0, 1000.0, 1000.0,
        compute_precision=precision, serving_engine=engine,
    )  # fmt: skip


def test_every_engines_gemm_rate_is_the_one_its_tables_give():
    assert A.derive_engine_gemm_rate() == E.ENGINE_GEMM_RATE


def test_the_fp4_ceiling_is_the_one_the_tables_give():
    assert A.derive_fp4_matmul_ratio() == CE.MEASURED_FP4_MATMUL_RATIO


def test_the_h100_over_itself_is_one():
    """The method: an engine's H100 table over itself gives 1 at both bands."""
    for engine, version in (("trtllm", "1.3.0rc20"), ("sglang", "0.5.10"), ("vllm", "0.19.0")):
        t = A.table(A.H100, engine, version)
        for p in ("bf16", "fp8"):
            for band in (A.DECODE_BAND_M, A.PREFILL_BAND_M):
                assert A.gemm_fraction_ratio(t, p, band) == 1.0, (engine, p)
        assert A.gemm_fraction_ratio(t, "fp4", A.DECODE_BAND_M) is None  # no FP4 units


@pytest.mark.parametrize(
    ("engine", "ratios"),
    [
        ("vLLM", E.ENGINE_GEMM_RATE[("nvidia-b200", "vllm", "fp4")]),
        # TensorRT-LLM's as served: its table is the autotuner's fallback (SERVED_FP4_GEMM_RATE)
        ("TensorRT-LLM", E.SERVED_FP4_GEMM_RATE[("nvidia-b200", "trtllm", "fp4")]),
    ],
)
def test_the_step_runs_decode_and_prompt_tokens_at_the_engines_own_ratios_by_hand(engine, ratios):
    decode, prompt = ratios
    assert E.engine_gemm_rate("nvidia-b200", engine, "fp4") == ratios
    t = _terms(B200, "fp4", engine)
    e_c = float(S.compute_efficiency_for("fp4", S.DEFAULT_CONSTANTS))
    assert e_c == S.DEFAULT_CONSTANTS.fp8_compute_efficiency  # FP4 starts from the FP8 fraction
    flops = 2.0 * MODEL.matmul_parameters
    assert float(t.gemm_per_token) == pytest.approx(flops / (B200.peak("fp4") * e_c * decode))
    layer = 2.0 * MODEL.active_layer_parameters + 2.0 * MODEL.vocab * MODEL.hidden / 1000.0
    assert float(t.prefill_gemm_per_token) == pytest.approx(
        layer / (B200.peak("fp4") * e_c * prompt)
    )


def test_without_an_engine_table_the_chips_ceiling_ratio_stays():
    """No engine (gpt-fast), or a chip the databases do not fit (the H100 itself): the published
    (or, for FP4, the ceilings' measured) ratio for both kinds of token."""
    for acc, p, engine in ((B200, "fp4", None), (B200, "fp8", None), (H100, "fp8", "vLLM")):
        t = _terms(acc, p, engine)
        e_c = float(S.compute_efficiency_for(p, S.DEFAULT_CONSTANTS))
        rate = acc.peak(p) * e_c * CE.matmul_ratio(acc.name, p)
        assert float(t.gemm_per_token) == pytest.approx(2.0 * MODEL.matmul_parameters / rate)
    assert CE.matmul_ratio("nvidia-b200", "fp4") == CE.MEASURED_FP4_MATMUL_RATIO["nvidia-b200"]


@pytest.mark.parametrize("key", sorted(E.ENGINE_GEMM_RATE))
def test_blackwell_needs_larger_batches_and_no_engine_beats_the_h100s_fraction(key) -> None:
    decode, prompt = E.ENGINE_GEMM_RATE[key]
    assert 0.3 < decode <= prompt + 0.01 < 1.0, key


@pytest.mark.parametrize("chip", sorted(A.GEMM_RATE_CHIPS))
def test_nvfp4_is_faster_than_fp8_on_every_engine(chip: str) -> None:
    acc = DEFAULT_CATALOG.accelerator(chip)
    for engine in ("trtllm", "sglang", "vllm"):
        fp4 = E.ENGINE_GEMM_RATE[(chip, engine, "fp4")]
        fp8 = E.ENGINE_GEMM_RATE[(chip, engine, "fp8")]
        for band in (0, 1):
            assert fp4[band] * acc.peak("fp4") > fp8[band] * acc.peak("fp8"), (engine, band)


@pytest.mark.parametrize("chip", sorted(CE.MEASURED_FP4_MATMUL_RATIO))
def test_the_fp4_ceiling_lies_between_fp8_and_the_peaks_ratio(chip: str) -> None:
    """FP4 is faster than FP8 and never more than the FP4 / FP8 peak ratio faster, at every
    GEMM shape, sustained and burst; the evidence says it was measured."""
    acc = DEFAULT_CATALOG.accelerator(chip)
    ce = CE.ceilings_for(acc)
    peaks = acc.peak("fp4") / acc.peak("fp8")
    for sustained in (True, False):
        for width, tokens in ((1024, 256), (8192, 8192), (16384, 65536)):
            fp4 = ce.gemm_flops("fp4", width, tokens, sustained=sustained)
            fp8 = ce.gemm_flops("fp8", width, tokens, sustained=sustained)
            assert fp8 < fp4 < peaks * fp8
    # measured at 1.40-1.55x FP8 (1.40 on the B200 since TensorRT-LLM's served prompt ratio was
    # refitted on TTFTs that hold the clients' starting wave) where carrying FP8's fraction
    # promised the 2x of the peaks
    assert 1.35 < float(ce.gemm_flops("fp4", 8192, 8192) / ce.gemm_flops("fp8", 8192, 8192)) < 1.55
    assert ce.evidence["matmul-fp4"].startswith("measured: NVFP4")


def test_the_plans_evidence_names_the_engines_gemm_rates_on_blackwell():
    trt = E.ENGINES["TensorRT-LLM"]
    assert "GEMM rates at decode and prompt batches" in E.serving_evidence(trt, "nvidia-b200")
    assert "GEMM rates" not in E.serving_evidence(trt, "nvidia-h100-80gb")


def test_the_calibrate_section_shows_the_rates_and_the_ratio_they_replace():
    text = A.render_section()
    assert "GEMM rates on Blackwell per engine" in text
    assert "nvidia-b200 fp8 1.08" in text
    assert "prefill GEMM fp4" in text


def test_the_fp4_ceiling_is_left_out_one_engine_at_a_time():
    """Its held-out error: each engine's NVFP4 prompt GEMMs predicted by the other two engines'
    median (the kernels differ by engine, so the error is the estimate on an engine not seen).
    TensorRT-LLM enters the others' refits as it serves (its table is the autotuner's fallback
    kernel), and is not held to that table itself."""
    rows = A.fp4_leave_one_engine_out()
    assert {(chip, engine) for chip, engine, *_ in rows} == {
        (chip, engine) for chip in A.GEMM_RATE_CHIPS for engine in ("vllm", "sglang")
    }
    for chip, _, fitted, refit, count, error in rows:
        assert fitted == CE.MEASURED_FP4_MATMUL_RATIO[chip]
        assert refit != fitted and count > 10 and 0.0 < error < 0.25


def test_the_fp4_ceiling_takes_tensorrt_llm_as_it_serves():
    """The median holds TensorRT-LLM's served NVFP4 prompt ratio, not its table's fallback: with
    the fallback it would be vLLM's (0.69 on the B200)."""
    served = E.SERVED_FP4_GEMM_RATE[("nvidia-b200", "trtllm", "fp4")][1]
    table = E.ENGINE_GEMM_RATE[("nvidia-b200", "trtllm", "fp4")][1]
    assert table < 0.6 < served
    assert CE.MEASURED_FP4_MATMUL_RATIO["nvidia-b200"] == served
    with_table = A._fp4_medians(A.derive_engine_gemm_rate())
    assert with_table["nvidia-b200"] < CE.MEASURED_FP4_MATMUL_RATIO["nvidia-b200"] - 0.05
    from ringmaster.calibration.evidence import render_leave_one_out

    assert 'MEASURED_FP4_MATMUL_RATIO["b200"]' in render_leave_one_out()


def test_the_bands_stand_for_their_geometric_centres():
    low, high = E.ENGINE_GEMM_BAND_TOKENS
    assert low == pytest.approx((min(A.DECODE_BAND_M) * max(A.DECODE_BAND_M)) ** 0.5)
    assert high == pytest.approx((min(A.PREFILL_BAND_M) * max(A.PREFILL_BAND_M)) ** 0.5)


def test_thousands_of_decodes_run_at_the_prompt_bands_rate_by_hand():
    """A step's decode GEMMs are one M: at 512 decodes or fewer the decode band's rate, from
    4,096 the prompt band's, between them the rate by log n; a chip without the engine's table
    has one rate at every batch."""
    decode, prompt = E.engine_gemm_rate("nvidia-b200", "TensorRT-LLM", "fp4")
    t = _terms(B200, "fp4", "TensorRT-LLM")
    small = float(t.gemm_per_token)
    assert float(t.gemm_per_token_large_batch) == pytest.approx(small * decode / prompt)
    per = [float(S.decode_gemm_seconds_per_token(t, n)) for n in (1, 256, 512, 1448, 4096, 9000)]
    assert per[0] == per[1] == per[2] == pytest.approx(small)
    assert per[4] == per[5] == pytest.approx(small * decode / prompt)
    middle = 1.0 / (0.5 / small + 0.5 / (small * decode / prompt))
    assert per[3] == pytest.approx(middle, rel=1e-3)
    assert all(a >= b for a, b in pairwise(per))
    # the step charges it: its GEMMs at 4,096 decodes (compute-bound) at the prompt band's rate
    rest = t._replace(
        gemm_per_token=t.gemm_per_token * 0.0,
        gemm_per_token_large_batch=t.gemm_per_token_large_batch * 0.0,
        weights_read=t.weights_read * 0.0,
    )
    assert 4096 * per[4] > float(t.weights_read)
    gemms = float(S.step_seconds(t, 4096.0, 0.0)) - float(S.step_seconds(rest, 4096.0, 0.0))
    assert gemms == pytest.approx(4096 * per[4])
    h100 = _terms(H100, "fp8", "TensorRT-LLM")
    assert float(S.decode_gemm_seconds_per_token(h100, 8192)) == float(h100.gemm_per_token)
