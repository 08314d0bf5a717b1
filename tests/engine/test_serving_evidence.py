"""The serving evidence matrix (calibration.serving_evidence): accelerator x serving engine x
weight precision, fitted and checked runs apart, one sign for throughputs and latencies, and the
cell an LLM endpoint's plan names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.calibration import serving_evidence as SV
from ringmaster.calibration.llm_serving import CHECKED, LlmPointRow
from ringmaster.calibration.serving_engines import EngineRow
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_serving import LlmServingInputs
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.planning.plans import predict_llm_serving_inputs

pytestmark = pytest.mark.unit


def _cells() -> dict[tuple[str, str, str], SV.Cell]:
    return {(c.generation, c.framework, c.precision): c for c in SV.serving_cells()}


def test_the_matrix_keeps_fitted_and_checked_runs_apart_per_cell():
    cells = _cells()
    h100 = cells[("H100", "TensorRT-LLM", "FP8")]
    assert h100.fitted == 20 and h100.checked > 30  # the perf overview's fitted setups
    assert cells[("A100", "gpt-fast", "BF16")].fitted == 2
    assert cells[("A100", "gpt-fast", "BF16")].checked == 2
    b200 = cells[("B200", "TensorRT-LLM", "FP4")]
    # TensorRT-LLM 1.0's 20 and v0.21's 12 checked; its 72 closed-loop runs fitted (they fit
    # its served NVFP4 GEMMs, calibration.served_fp4)
    closed = [
        r
        for r in CLR.closed_loop_runs()
        if (r.gpu, r.engine, r.precision) == ("B200", "TensorRT-LLM", "FP4")
    ]
    assert len(closed) == 72 and all(r.role == "fitted" for r in closed)
    assert (b200.fitted, b200.checked) == (len(closed), 32)
    # every other closed-loop run is checked
    others = [r for r in CLR.closed_loop_runs() if r.role == "checked"]
    assert {(r.gpu, r.engine, r.precision) for r in others}.isdisjoint(CLR.FITTED_CELLS)
    # one source's 8 offline runs fit vLLM's step fraction there; the other 41 only check it
    mi300x = cells[("MI300X", "vLLM", "FP8")]
    assert (mi300x.fitted, mi300x.checked) == (8, 41)
    # the closed-loop runs are the only checks of vLLM and SGLang on NVIDIA parts
    assert cells[("H100", "vLLM", "FP8")].checked > 30
    assert cells[("H200", "SGLang", "FP8")].checked >= 5
    # a cell no run reaches is absent, so a plan on it is extrapolated
    assert ("H100", "SGLang", "FP8") not in cells


def test_a_latency_promised_sooner_counts_as_promising_more():
    ttft = LlmPointRow("t", "A100-fp16-input128 TTFT ms", 16.0, 8.0, CHECKED)
    assert ttft.is_latency and ttft.error == pytest.approx(-0.5)
    assert ttft.promise_error == pytest.approx(1.0)
    tokens = replace(ttft, quantity="x output tokens/s", published=10.0, predicted=12.0)
    assert tokens.promise_error == pytest.approx(tokens.error) == pytest.approx(0.2)
    static = EngineRow("s", "vLLM", "MI300X", "e2e ms", 100.0, 80.0, scenario="static")
    assert static.error == pytest.approx(-0.2) and static.promise_error == pytest.approx(0.25)
    offline = EngineRow("o", "vLLM", "MI300X", "tokens/s", 100.0, 120.0)
    assert offline.promise_error == pytest.approx(0.2)
    assert EngineRow("n", "vLLM", "MI300X", "tokens/s", 100.0, None).promise_error is None


def test_the_cell_text_names_the_checked_runs_or_says_extrapolated():
    b200 = SV.serving_cell_evidence("nvidia-b200", "TensorRT-LLM", "FP4")
    checked = _cells()[("B200", "TensorRT-LLM", "FP4")].checked
    assert b200.startswith(f"serving cell B200 x TensorRT-LLM x FP4: {checked} checked runs")
    vllm = SV.serving_cell_evidence("nvidia-a100-80gb", "vLLM", "FP8")
    assert vllm.startswith("extrapolated: no checked serving run of vLLM on A100 at FP8")
    assert "vLLM checked on" in vllm and "MI300X FP8" in vllm and "H100 FP8" in vllm
    sglang = SV.serving_cell_evidence("nvidia-h100-80gb", "SGLang", "BF16")
    assert sglang.endswith(")") and "(SGLang checked on H200 FP8: median" in sglang
    h200 = SV.serving_cell_evidence("nvidia-h200-141gb", "vLLM", "FP8")
    assert h200.startswith("serving cell H200 x vLLM x FP8:")


def test_an_engine_no_run_checks_says_so(monkeypatch: pytest.MonkeyPatch):
    others = tuple(c for c in SV.serving_cells() if c.framework != "SGLang")
    monkeypatch.setattr(SV, "serving_cells", lambda: others)
    sglang = SV.serving_cell_evidence("nvidia-h100-80gb", "SGLang", "BF16")
    assert sglang.endswith("(no checked run of SGLang at all)")


def test_the_plan_names_its_cell_after_its_engine():
    model = KNOWN_TRANSFORMERS["llama-3.1-70b"]
    inputs = LlmServingInputs(
        model, "nvidia-h100-80gb", 8, "FP8", 1000, 500, 2.0, 0.05,
        target_requests_per_second=5, engine="TensorRT-LLM",
    )  # fmt: skip
    plan = predict_llm_serving_inputs(inputs, DEFAULT_CATALOG)
    head, cell, _ = plan.evidence.split("; ", 2)
    assert head == "engine TensorRT-LLM (given)"
    assert cell.startswith("serving cell H100 x TensorRT-LLM x FP8:")
    sglang = predict_llm_serving_inputs(replace(inputs, engine="SGLang"), DEFAULT_CATALOG)
    assert sglang.evidence.split("; ")[1].startswith(
        "extrapolated: no checked serving run of SGLang on H100 at FP8"
    )


def test_calibrate_prints_the_matrix_and_its_summary():
    text = SV.render_serving_matrix()
    assert text.startswith("Evidence matrix (serving)")
    rows, med, _ = SV.serving_checked_summary()
    assert rows == sum(c.checked for c in SV.serving_cells())
    assert f"checked rows: {rows}, median |error| {med:.1%}" in text
    assert "MI300X     vLLM" in text  # AMD's generation by name, not the catalog's key
