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
        for r in CLR.llama_runs()
        if (r.gpu, r.engine, r.precision) == ("B200", "TensorRT-LLM", "FP4")
    ]
    assert len(closed) == 72 and all(r.role == "fitted" for r in closed)
    assert (b200.fitted, b200.checked) == (len(closed), 32)
    # every other closed-loop run is checked: in a fitted cell, only the other models' runs
    others = [r for r in CLR.closed_loop_runs() if r.role == "checked"]
    assert {r.model for r in others if r.cell in CLR.FITTED_CELLS}.isdisjoint(CLR.FIT_MODELS)
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
    sglang = SV.serving_cell_evidence("nvidia-b200", "SGLang", "FP8")
    assert sglang.startswith("extrapolated: no checked serving run of SGLang on B200 at FP8")
    assert "(SGLang checked on H100 BF16: median" in sglang and "H200 FP8: median" in sglang
    h200 = SV.serving_cell_evidence("nvidia-h200-141gb", "vLLM", "FP8")
    assert h200.startswith("serving cell H200 x vLLM x FP8:")


def test_an_engine_no_run_checks_says_so():
    others = tuple(c for c in SV.serving_cells() if c.framework != "SGLang")
    sglang = SV.serving_cell_evidence("nvidia-h100-80gb", "SGLang", "BF16", cells=others)
    assert sglang.endswith("(no checked run of SGLang at all)")


def test_the_stored_cells_a_plan_reads_are_the_live_ones():
    """A plan reads STORED_SERVING_CELLS (the live cells predict every closed-loop run, ~5 s):
    they must be what the engine and its rows give now."""
    live = SV.serving_cells()
    assert SV.stored_serving_cells() == live, (
        "stale serving_cells.json: run python3 -c 'from ringmaster.calibration.serving_evidence"
        " import write_stored_serving_cells as w; w()'"
    )
    assert (
        SV.cells_json(live) == SV.STORED_SERVING_CELLS.read_text()
    )  # written as the writer writes it


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


def test_a_mixture_of_experts_has_cells_of_its_own():
    """Llama 4 Maverick's TensorRT-LLM rows sit in MoE cells: a dense cell's error is never
    theirs, and an MoE cell holds no dense run."""
    rows = SV.serving_rows()
    v1 = [r for r in rows if r.source == "trtllm-1.0-perf-overview-maverick"]
    assert len(v1) == 17 and all(r.moe for r in v1)
    # v0.21's page mixes Maverick (4 + 7 rows) with dense NVFP4 Llamas under one source
    mixed = [r for r in rows if r.source == "trtllm-perf-overview-moe-fp4"]
    assert sum(r.moe for r in mixed) == 11 and sum(not r.moe for r in mixed) == 12
    # 1.0's other MoE columns: Scout, Qwen3 235B-A22B and 30B-A3B, Maverick in NVFP4
    other = [r for r in rows if r.source == "trtllm-1.0-perf-overview-moe"]
    assert len(other) == 93 and all(r.moe for r in other)
    # the closed-loop sample's mixtures of experts (calibration.closed_loop_runs) besides
    loops = {r.id: r for r in CLR.closed_loop_runs()}
    tables = {r.source for r in rows if r.moe and r.source not in loops}
    assert tables == {v1[0].source, mixed[0].source, other[0].source}
    assert all(r.moe == loops[r.source].moe for r in rows if r.source in loops)
    assert sum(r.moe for r in loops.values()) > 800
    cells = _cells()
    moe = cells[("H100", "TensorRT-LLM (MoE)", "FP8")]
    dense = cells[("H100", "TensorRT-LLM", "FP8")]
    h100 = [r for r in rows if r.generation == "H100" and r.engine == "TensorRT-LLM"]
    assert moe.checked == sum(r.moe and r.precision == "FP8" for r in h100)
    assert dense.checked + dense.fitted == sum(not r.moe and r.precision == "FP8" for r in h100)
    assert "H100       TensorRT-LLM (MoE) FP8" in SV.render_serving_matrix()
    assert "By model: mixture of experts: " in SV.render_serving_matrix()


def test_a_mixture_of_experts_plan_never_quotes_a_dense_cell_as_its_own():
    # the H100 TensorRT-LLM MoE cell is checked: an MoE plan there names it
    moe = SV.serving_cell_evidence("nvidia-h100-80gb", "TensorRT-LLM", "FP8", moe=True)
    assert moe.startswith("serving cell H100 x TensorRT-LLM (MoE) x FP8:")
    # vLLM has no checked MoE run: extrapolated, the dense cell named as dense runs
    vllm = SV.serving_cell_evidence("nvidia-h100-80gb", "vLLM", "FP8", moe=True)
    assert vllm.startswith("extrapolated: no checked mixture-of-experts serving run of vLLM")
    assert "its dense cell H100 x vLLM x FP8:" in vllm and "dense models only" in vllm
    assert SV.serving_cell_evidence("nvidia-h100-80gb", "vLLM", "FP8").startswith(
        "serving cell H100 x vLLM x FP8:"
    )
    # where the engine's MoE runs are elsewhere, they are named
    gb200 = SV.serving_cell_evidence("nvidia-gb200", "TensorRT-LLM", "FP8", moe=True)
    assert "(TensorRT-LLM's mixtures of experts checked on B200 FP4: median" in gb200
    assert "H100 FP8: median" in gb200
    # the plan of a mixture of experts states it
    inputs = LlmServingInputs(
        KNOWN_TRANSFORMERS["mixtral-8x7b"], "nvidia-h100-80gb", 2, "FP8", 1000, 500, 2.0, 0.05,
        target_requests_per_second=5,
    )  # fmt: skip
    plan = predict_llm_serving_inputs(inputs, DEFAULT_CATALOG)
    cell = plan.evidence.split("; ")[1]
    assert cell.startswith("extrapolated: no checked mixture-of-experts serving run of vLLM")


def test_the_closed_loops_are_dense_runs_and_say_so_for_a_mixture_of_experts():
    dense = CLR.ttft_evidence("nvidia-h100-80gb", "vLLM", "FP8")
    assert dense.startswith("closed-loop TTFT checked: 45 runs")
    moe = CLR.ttft_evidence("nvidia-h100-80gb", "vLLM", "FP8", moe=True)
    assert moe.startswith("closed-loop TTFT: extrapolated for a mixture of experts from 45 runs")
    assert "dense models only, no mixture of experts" in moe
    # where the sample holds mixtures of experts (DeepSeek-R1, Qwen3-235B on SGLang), theirs
    own = CLR.ttft_evidence("nvidia-h200-141gb", "SGLang", "FP8", moe=True)
    assert own.startswith("closed-loop TTFT checked: 39 mixture-of-experts runs of SGLang")
    out = CLR.ttft_evidence("nvidia-h200-141gb", "SGLang", "FP8")
    assert out.startswith("closed-loop TTFT out of reach: 46 runs")
    none = CLR.ttft_evidence("nvidia-a100-80gb", "vLLM", "BF16", moe=True)
    assert "no measured mixture-of-experts run of vLLM" in none
