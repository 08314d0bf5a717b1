"""The decode step's measured terms (issue 46, part 5): GEMMs at decode batches, the KV read by
batch and context, the per-kernel floors, fitted on the H100 measurements, and the step composed
from them (engine.llm_step, StepConstants.measured_decode)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.calibration import ceilings as CC
from ringmaster.engine import ceilings as CE
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
A100 = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
CEIL = CE.ceilings_for(H100)
HBM = CE.H100_DATASHEET_HBM_GBPS * 1e9
LLAMA_8B = KNOWN_TRANSFORMERS["llama-3-8b"]
MEASURED = S.StepConstants(measured_decode=True)


def test_decode_constants_are_the_fit_of_the_measurements():
    for p in ("bf16", "fp8", "fp8fast"):
        assert CE.H100_DECODE_GEMM[p] == CC.fit_decode_gemm(p), p
    for kernel in ("flash2", "cudnn"):
        assert CE.H100_DECODE_ATTENTION[kernel] == CC.fit_decode_attention(kernel), kernel


def test_the_fits_errors_are_the_ones_the_module_states():
    errors: dict[str, list[float]] = {}
    for row in CC.operator_rows():
        if row.group.startswith("decode"):
            errors.setdefault(row.group, []).append(abs(row.error))
    stated = {
        "decode gemm bf16": 0.037,
        "decode gemm fp8": 0.033,
        "decode gemm fp8fast": 0.032,
        "decode attention flash2": 0.040,
        "decode attention cudnn": 0.010,
    }
    for group, value in stated.items():
        assert float(np.median(errors[group])) == pytest.approx(value, abs=0.0015), group


def test_a_gemm_at_batch_one_is_bounded_by_its_weight_bytes():
    # gate_up of hidden 4096 at tp 1 (K 4096, N 28672), M = 1, bf16: 86.37 us measured
    k, n = 4096, 28672
    weights = 2.0 * k * n
    seconds = float(CEIL.decode_gemm_seconds("bf16", weights, 2.0 * k * n, min(k, n)))
    assert seconds >= weights / HBM  # never faster than the datasheet's HBM
    f_w, floor_us, _ = CE.H100_DECODE_GEMM["bf16"]
    assert seconds == pytest.approx(floor_us * 1e-6 + weights / (f_w * HBM))  # weights bind
    assert seconds == pytest.approx(86.37e-6, rel=0.05)
    # more rows stream the same weights: no slower until the FLOPs bind
    at_8 = float(CEIL.decode_gemm_seconds("bf16", weights, 16.0 * k * n, min(k, n)))
    assert at_8 == pytest.approx(seconds)


def test_the_kv_read_at_a_measured_point_reproduces_its_row():
    # FlashAttention, batch 32, context 2048: 268,435,456 bytes in 106.9 us (2,512 GB/s)
    row = next(
        r for r in CC.decode_attention_rows("flash") if r["batch"] == 32 and r["context"] == 2048
    )
    measured = row["kv_bytes"] / ((row["us_r1"] + row["us_r2"]) / 2e6) / HBM
    predicted = float(CEIL.kv_read_efficiency("flash2", row["kv_bytes"]))
    assert predicted == pytest.approx(measured, rel=0.07)  # the row's fit error is 6.1 %
    # the fraction grows with the bytes a call reads, towards f_kv, never past it
    small, large = CEIL.kv_read_efficiency("flash2", [1e6, 1e10])
    assert small < predicted < large < CE.H100_DECODE_ATTENTION["flash2"][0]


def test_other_chips_carry_the_h100_fractions_by_their_hbm_ratio():
    """A chip with no decode terms of its own (measured or from AIConfigurator's databases)
    carries the H100's, scaled by its published HBM ratio."""
    mi300x = DEFAULT_CATALOG.accelerator("amd-mi300x")
    assert mi300x.name not in CE.CHIP_DECODE_TERMS
    other = CE.ceilings_for(mi300x)
    f_kv, floor = CE.H100_DECODE_ATTENTION["flash2"]
    assert other.decode_attention["flash2"] == pytest.approx(
        (f_kv * CE.hbm_ratio(mi300x.name), floor)
    )
    assert other.decode_gemm["bf16"][0] == pytest.approx(
        CE.H100_DECODE_GEMM["bf16"][0] * CE.hbm_ratio(mi300x.name)
    )
    assert other.evidence["decode"].startswith("extrapolated:")
    assert "HBM ratio" in other.evidence["decode"]
    assert CEIL.evidence["decode"].startswith("measured:")
    # the A100's come from AIConfigurator's vLLM tables, and say so
    assert CE.ceilings_for(A100).evidence["decode"].startswith("published:")


def _terms(constants: S.StepConstants, accelerator=H100, tp: int = 1) -> S.ServingTerms:
    return S.serving_terms(
        LLAMA_8B,
        accelerator,
        tp,
        accelerator.peak("bf16"),
        2.0,
        2.0,
        1024.0,
        256.0,
        constants=constants,
    )


def test_the_measured_step_pays_each_kernels_floor_and_streams_at_the_measured_fraction():
    terms = _terms(MEASURED)
    f_w, gemm_floor, _ = CE.H100_DECODE_GEMM["bf16"]
    f_kv, attention_floor = CE.H100_DECODE_ATTENTION["flash2"]
    floors = LLAMA_8B.layers * (4 * gemm_floor + attention_floor) * 1e-6
    expected = S.LLM_STEP_OVERHEAD_SECONDS * LLAMA_8B.layers / 32 + floors
    assert float(terms.overhead) == pytest.approx(expected)
    assert float(terms.kv_read_per_token) == pytest.approx(
        float(terms.kv_bytes_per_token) / (HBM * f_kv)
    )
    legacy = _terms(S.StepConstants(measured_decode=False))
    # the weights: the same bytes at the measured fraction instead of the fitted one
    ratio = float(legacy.weights_read) / float(terms.weights_read)
    assert ratio == pytest.approx(f_w / S.LLM_MEMORY_EFFICIENCY)


def test_the_default_step_is_the_fitted_one_until_the_switch():
    # the measured step is not the default: it makes the checked serving rows worse (llm_step)
    assert S.MEASURED_DECODE is False
    assert S.DEFAULT_CONSTANTS.measured_decode is False


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 512),
    extra=st.integers(1, 256),
    context=st.floats(16.0, 32768.0),
    more=st.floats(1.0, 8192.0),
    measured=st.booleans(),
    tp=st.sampled_from([1, 2, 8]),
)
def test_the_step_never_shortens_with_batch_or_context(n, extra, context, more, measured, tp):
    terms = _terms(S.StepConstants(measured_decode=measured), tp=tp)
    step = float(S.step_seconds(terms, n, 0.0, n * context))
    assert float(S.step_seconds(terms, n + extra, 0.0, (n + extra) * context)) >= step
    assert float(S.step_seconds(terms, n, 0.0, n * (context + more))) >= step


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 512),
    extra=st.integers(1, 256),
    context=st.floats(16.0, 32768.0),
    measured=st.booleans(),
    accelerator=st.sampled_from([H100, A100]),
)
def test_per_token_time_never_grows_with_batch(n, extra, context, measured, accelerator):
    """At a fixed context a sequence, a step is fixed costs (floors, overhead, the weights while
    they bind) plus costs linear in the batch (KV, FLOPs once they bind): its time per token
    never grows with the batch, and never falls below the per-sequence part."""
    terms = _terms(S.StepConstants(measured_decode=measured), accelerator)
    per_token = float(S.step_seconds(terms, n, 0.0, n * context)) / n
    larger = float(S.step_seconds(terms, n + extra, 0.0, (n + extra) * context)) / (n + extra)
    assert larger <= per_token * (1.0 + 1e-12)
    floor = context * float(terms.kv_read_per_token) + float(terms.gemm_per_token)
    assert larger >= floor
