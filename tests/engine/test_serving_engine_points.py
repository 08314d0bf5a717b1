"""Published runs of each serving engine, held against the model: every row checked, evaluated
where the model can state it, and out of reach with its reason where it cannot."""

from __future__ import annotations

import pytest

from ringmaster.calibration import serving_engines as SE
from ringmaster.calibration.serving_engines import (
    engine_points,
    engine_rows,
    render_serving_engines_section,
    static_residual_slopes,
)
from ringmaster.engine.serving_engines import (
    ENGINES,
    infer_serving_engine,
    kv_cache_dtype_value,
    serving_engine,
    serving_evidence,
)

pytestmark = pytest.mark.unit

ROCM_70B_128_4096 = "vllm-rocm-20250112-llama31-70b-mi300x-tp8-128-4096"


def test_every_point_names_its_primary_source_and_engine():
    for point in engine_points():
        assert point["source"] and point["engine"] in ENGINES, point["id"]


def test_rows_are_evaluated_or_out_of_reach_with_a_reason():
    rows = engine_rows()
    evaluated = [r for r in rows if r.predicted is not None]
    assert any(r.engine == "TensorRT-LLM" and r.accelerator == "H100" for r in evaluated)
    assert all(r.reason for r in rows if r.predicted is None)
    assert all(r.predicted > 0 for r in evaluated)
    assert "median" in render_serving_engines_section()


def test_static_series_report_what_the_step_lacks_per_sequence():
    """Each engine's fixed-batch series at two or more batches gives the per-sequence step cost
    the model misses; the section prints it and the signed median per scenario."""
    slopes = dict(static_residual_slopes())
    assert any(k.startswith("vLLM 0.10.0 llama-3.1-70b MI300X 128/2048") for k in slopes)
    assert any(k.startswith("TensorRT-LLM 0.16.0 llama-3.1-405b H100") for k in slopes)
    # a single-batch series has no slope: the bs128 2048/2048 rows stand alone
    assert not any(k.endswith("2048/2048") for k in slopes)
    section = render_serving_engines_section()
    assert "us a sequence a step" in section and "signed median" in section
    offline = [r for r in engine_rows() if r.scenario == "offline" and r.error is not None]
    static = [r for r in engine_rows() if r.scenario == "static" and r.error is not None]
    assert offline and static


def test_engine_profiles_and_evidence():
    assert serving_engine("SGLang").kv_memory_fraction(80e9, 16e9) == 0.88
    trt = serving_engine("TensorRT-LLM")
    assert trt.kv_memory_fraction(80e9, 16e9) == pytest.approx((16e9 + 0.9 * 64e9) / 80e9)
    assert serving_evidence(trt, "nvidia-h100-80gb").startswith("TensorRT-LLM: step constants")
    assert serving_evidence(serving_engine("vLLM"), "amd-mi300x").startswith("extrapolated:")
    # the kernels' evidence: the engine's own measured ones, or NCCL's formula
    b200 = serving_evidence(serving_engine("vLLM"), "nvidia-b200")
    assert (
        "all-reduce, FP8 decode GEMMs, FP4 decode GEMMs, GEMM rates at decode and prompt batches,"
        " decode attention vLLM's own kernels measured"
    ) in b200
    mi300x = serving_evidence(serving_engine("vLLM"), "amd-mi300x")
    assert "NCCL's formula" in mi300x and "own kernels" not in mi300x
    assert infer_serving_engine("lmsysorg/sglang:v0.4")[0] == "SGLang"
    assert infer_serving_engine("nvcr.io/nvidia/tritonserver:24.08-trtllm")[0] == "TensorRT-LLM"
    assert infer_serving_engine("my/server:1")[0] == "vLLM"
    with pytest.raises(ValueError, match="serving engine 'TGI'"):
        serving_engine("TGI")


def test_a_cache_the_source_does_not_name_is_the_engines_default():
    # vLLM's and SGLang's --kv-cache-dtype "auto" is the activations' 16 bits whatever the
    # weights; trtllm-bench forces FP8 with FP8 weights.
    assert not serving_engine("vLLM").default_fp8_kv_cache
    assert not serving_engine("SGLang").default_fp8_kv_cache
    assert serving_engine("TensorRT-LLM").default_fp8_kv_cache
    [unknown] = [p for p in SE.engine_points() if p["id"] == ROCM_70B_128_4096]
    assert unknown["kv_cache"] == "unknown" and unknown["weights"] == "fp8"
    terms, _, _, _ = SE._terms(unknown)
    stated = {**unknown, "kv_cache": "fp8"}
    fp8_terms, _, _, _ = SE._terms(stated)
    assert float(terms.kv_bytes_per_token) == pytest.approx(
        2.0 * float(fp8_terms.kv_bytes_per_token)
    )


def test_the_server_is_told_the_cache_the_plan_counted_on():
    assert kv_cache_dtype_value("vLLM", "FP8") == "fp8"
    assert kv_cache_dtype_value("SGLang", "FP8") == "fp8_e4m3"  # SGLang takes no bare "fp8"
    assert kv_cache_dtype_value("TensorRT-LLM", "FP8") == "fp8"
    assert kv_cache_dtype_value("vLLM", "BF16") == kv_cache_dtype_value(None, "FP16") == "auto"
