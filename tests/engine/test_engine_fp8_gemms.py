"""Each serving engine's FP8 GEMMs at decode batches (engine.serving_engines
.ENGINE_FP8_DECODE_GEMM): fitted on AIConfigurator's databases, charged by the serving step."""

from __future__ import annotations

from statistics import median

import numpy as np
import pytest

from ringmaster.calibration import aiconfigurator as A
from ringmaster.calibration import serving_engines as SE
from ringmaster.engine import llm_step as S
from ringmaster.engine import serving_engines as E
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
MODEL = KNOWN_TRANSFORMERS["llama-3.1-70b"]


def _terms(precision: str, engine: str | None, tp: int = 8) -> S.ServingTerms:
    return S.serving_terms(
        MODEL, H100, tp, H100.peak(precision), 1.0, 1.0, 128.0, 2048.0,
        compute_precision=precision, serving_engine=engine,
    )  # fmt: skip


def test_every_engines_fp8_gemm_is_the_one_its_table_gives():
    assert A.derive_engine_fp8_decode() == E.ENGINE_FP8_DECODE_GEMM


def test_a_stream_fit_recovers_its_own_terms():
    weights = np.array([2e6, 8e6, 32e6, 128e6])
    hbm = 3.35e12
    seconds = 6.5e-6 + weights / (0.72 * hbm)
    assert A.fit_stream(seconds, weights, hbm) == (pytest.approx(0.72), pytest.approx(6.5))


def test_fp8_weights_pay_the_engines_kernel_by_hand():
    stream, extra = E.ENGINE_FP8_DECODE_GEMM[("nvidia-h100-80gb", "trtllm")]
    trt, plain = _terms("fp8", "TensorRT-LLM"), _terms("fp8", None)
    assert float(trt.weights_read) == pytest.approx(float(plain.weights_read) / stream)
    extra_floor = MODEL.layers * S.DECODE_GEMMS_PER_LAYER * extra * 1e-6
    # the all-reduce differs too (TensorRT-LLM's own against NCCL's): compare the overheads
    assert float(trt.overhead) - float(plain.overhead) == pytest.approx(extra_floor)


def test_every_engines_fp4_gemm_is_the_one_its_table_gives():
    assert A.derive_engine_fp8_decode("fp4") == E.ENGINE_FP4_DECODE_GEMM


def test_bf16_gemms_pay_no_kernel_and_fp4_ones_their_own():
    assert float(_terms("bf16", "TensorRT-LLM").weights_read) == float(
        _terms("bf16", None).weights_read
    )
    b200 = DEFAULT_CATALOG.accelerator("nvidia-b200")

    def fp4(engine: str | None) -> S.ServingTerms:
        return S.serving_terms(
            MODEL, b200, 8, b200.peak("fp4"), 0.5625, 1.0, 128.0, 2048.0,
            compute_precision="fp4", serving_engine=engine,
        )  # fmt: skip

    for engine, key in (("vLLM", "vllm"), ("TensorRT-LLM", "trtllm")):
        # vLLM's as its operator table gives it; TensorRT-LLM's as served (its table is the
        # autotuner's fallback kernel: engine.serving_engines.SERVED_FP4_DECODE_GEMM)
        table = E.SERVED_FP4_DECODE_GEMM if key == "trtllm" else E.ENGINE_FP4_DECODE_GEMM
        stream, extra = table[("nvidia-b200", key)]
        assert (stream, extra) != E.ENGINE_FP8_DECODE_GEMM[("nvidia-b200", key)]
        served, plain = fp4(engine), fp4(None)
        assert float(served.weights_read) == pytest.approx(float(plain.weights_read) / stream)
        extra_floor = MODEL.layers * S.DECODE_GEMMS_PER_LAYER * extra * 1e-6
        assert float(served.overhead) - float(plain.overhead) == pytest.approx(extra_floor)
    # NVFP4 streams its weights at about half the bf16 rate a byte in vLLM's table
    assert 0.4 < E.ENGINE_FP4_DECODE_GEMM[("nvidia-b200", "vllm")][0] < 0.65


def test_an_engine_without_a_table_keeps_the_bf16_streaming():
    assert E.quantized_decode_gemm("amd-mi300x", "vLLM") is None
    assert E.quantized_decode_gemm("nvidia-h100-80gb", None) is None


def test_tensorrt_llms_fixed_batches_are_no_longer_promised_a_third_sooner():
    """TensorRT-LLM 0.16's fixed batches on 8 x H100 (checked, no constant saw them): -27 %
    signed median with its FP8 GEMMs charged at the bf16 rate and NCCL's all-reduce, within
    15 % while its FP8 GEMMs were charged the dynamic activation scale a static checkpoint never
    computes (9.6 us a call), -24 % without it: these engines pay a cost per layer a step that
    the model does not hold (docs/engine.md, "Closed-loop runs")."""
    rows = [
        r
        for r in SE.engine_rows()
        if r.engine == "TensorRT-LLM" and r.scenario == "static" and r.error is not None
    ]
    assert len(rows) == 6
    assert abs(median(r.error for r in rows if r.error is not None)) <= 0.25


def test_a_static_checkpoints_fp8_gemm_sheds_the_measured_dynamic_scale_by_hand():
    """static_fp8_gemms takes each FP8 row's compute-scale cost at its (m, k) off, floors it at
    the GEMM's roofline, and leaves other dtypes and unmeasured shapes alone."""
    h100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
    dtype = np.array(["fp8", "fp8", "bf16", "fp8"])
    mnk = np.array([[16, 4096, 4096], [16, 1024, 1024], [16, 4096, 4096], [48, 4096, 4096]], float)
    seconds = np.array([20e-6, 3e-6, 30e-6, 21e-6])
    scale = [[16, 4096, 7.5], [16, 1024, 7.0]]  # no row for m = 48
    out = A.static_fp8_gemms(h100.name, dtype, mnk, seconds, scale)
    assert out[0] == pytest.approx(12.5e-6)
    roofline = max(1024 * 1024 / h100.memory_bandwidth, 2 * 16 * 1024 * 1024 / h100.peak("fp8"))
    assert out[1] == pytest.approx(roofline)  # 3 - 7 us would be faster than the chip
    assert out[2] == seconds[2] and out[3] == seconds[3]
    assert A.static_fp8_gemms(h100.name, dtype, mnk, seconds, []) is seconds


def test_every_fp8_table_had_its_engines_dynamic_scale_taken_off():
    """Every Hopper and Blackwell table with FP8 GEMMs names the compute-scale table it shed:
    TensorRT-LLM's dynamic scale costs 7-9 us a call at decode batches, vLLM's about 1, SGLang's
    nothing; what TensorRT-LLM's FP8 GEMMs still cost more than its bf16 ones (the static
    quantising pass) is a quarter of what the collector's rows held."""
    for t in A.tables():
        if (t.gemm_dtype == "fp8").any():
            assert t.compute_scale_version is not None, t.label
    costs = A.scale_costs()
    for (chip, engine), (_, us) in costs.items():
        low, high = {"trtllm": (7.0, 9.0), "vllm": (0.5, 1.5), "sglang": (0.0, 0.0)}[engine]
        assert low <= us <= high, (chip, engine, us)
    for chip in ("nvidia-h100-80gb", "nvidia-h200-141gb", "nvidia-b200", "nvidia-gb200"):
        assert E.ENGINE_FP8_DECODE_GEMM[(chip, "trtllm")][1] < 3.0
