"""Each serving engine's decode attention per chip and KV-cache dtype (engine.serving_engines
.ENGINE_DECODE_ATTENTION): fitted on AIConfigurator's databases, read by the serving step in place
of one KV-read fraction fitted on TensorRT-LLM and carried to every engine."""

from __future__ import annotations

import numpy as np
import pytest

from ringmaster.calibration import aiconfigurator as A
from ringmaster.engine import ceilings as CE
from ringmaster.engine import llm_step as S
from ringmaster.engine import serving_engines as E
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

H200 = DEFAULT_CATALOG.accelerator("nvidia-h200-141gb")
A100 = DEFAULT_CATALOG.accelerator("nvidia-a100-80gb")
MODEL = KNOWN_TRANSFORMERS["llama-3.1-8b"]


def _terms(acc, kv_bytes: float, engine: str | None) -> S.ServingTerms:
    return S.serving_terms(
        MODEL, acc, 1, acc.peak("bf16"), 2.0, kv_bytes, 1024.0, 1024.0, serving_engine=engine
    )


def test_every_engines_decode_attention_is_the_one_its_table_gives():
    assert A.derive_engine_decode_attention() == E.ENGINE_DECODE_ATTENTION


def test_the_fits_hold_their_own_tables_and_check_another_vllm_version():
    checks = A.decode_attention_checks()
    fitted = [float(np.median(np.abs(e))) for _, _, role, _, e in checks if role == "fitted"]
    checked = [float(np.median(np.abs(e))) for _, _, role, _, e in checks if role == "checked"]
    assert len(fitted) == 27 and np.median(fitted) < 0.10
    # vLLM 0.14.0 on the H100, which no fit saw, by vLLM 0.19.0's terms
    assert len(checked) == 2 and max(checked) < 0.15


def test_the_step_reads_the_kv_cache_at_the_engines_measured_rate():
    # vLLM 0.19 reads an FP8 cache on the H200 at 0.53 of its HBM, TensorRT-LLM at 0.785: the
    # same cache costs vLLM's step half as much again.
    bytes_per_token = float(_terms(H200, 1.0, None).kv_read_per_token) * (
        H200.memory_bandwidth * S.LLM_KV_READ_EFFICIENCY * CE.hbm_ratio(H200.name)
    )
    for engine, key in (("vLLM", "vllm"), ("TensorRT-LLM", "trtllm"), ("SGLang", "sglang")):
        f_kv = E.ENGINE_DECODE_ATTENTION[(H200.name, key, "fp8")][0]
        terms = _terms(H200, 1.0, engine)
        assert float(terms.kv_read_per_token) == pytest.approx(
            bytes_per_token / (H200.memory_bandwidth * f_kv)
        )
    vllm, trtllm = (float(_terms(H200, 1.0, e).kv_read_per_token) for e in ("vLLM", "TensorRT-LLM"))
    assert vllm / trtllm == pytest.approx(0.785 / 0.53, rel=1e-9)
    # a 16-bit cache takes the engine's bf16 row
    assert float(_terms(H200, 2.0, "vLLM").kv_read_per_token) == pytest.approx(
        2.0 * bytes_per_token / (H200.memory_bandwidth * 0.785)
    )


def test_without_a_measured_table_the_h100s_flashattention_fraction_is_read():
    assert CE.H100_DECODE_ATTENTION[CE.DECODE_ATTENTION_KERNEL][0] == S.LLM_KV_READ_EFFICIENCY
    # AIConfigurator has no FP8-cache table on the A100: the measured fraction, not a guess.
    assert E.engine_kv_read_fraction(A100.name, "vLLM", 1.0) is None
    assert E.engine_kv_read_fraction(A100.name, "vLLM", 2.0) == pytest.approx(0.74)
    assert E.engine_kv_read_fraction(H200.name, None, 1.0) is None
    default = _terms(A100, 1.0, "vLLM")
    assert float(default.kv_read_per_token) == pytest.approx(
        float(_terms(A100, 1.0, None).kv_read_per_token)
    )


def test_calibrate_names_each_engine_table_among_its_single_source_fits():
    # each is fitted on one database and only its vLLM 0.14.0 table checks it: calibrate must
    # say its held-out error is unknown, as for every other single-source constant
    from ringmaster.calibration.evidence import SINGLE_SOURCE, render_leave_one_out

    named = {name.split(" ")[0] for name, _ in SINGLE_SOURCE}
    assert {"ENGINE_ALLREDUCE", "ENGINE_FP8_DECODE_GEMM", "ENGINE_DECODE_ATTENTION"} <= named
    assert "ENGINE_DECODE_ATTENTION (engine.serving_engines)" in render_leave_one_out()
