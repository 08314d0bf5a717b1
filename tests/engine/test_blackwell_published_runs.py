"""Megatron Bridge's published B200 / GB200 / H100 runs (25.11 container, FP8 current scaling) as
checked rows: the Blackwell cells of the evidence matrix rest on them, and a GB200 run is planned
on its NVLink domain as a job is."""

from __future__ import annotations

import pytest

from ringmaster.calibration import llm_training as T
from ringmaster.calibration.evidence import cell_evidence, training_cells

pytestmark = pytest.mark.unit


def mbridge_rows() -> list[dict]:
    rows = T.training_points()["published_layouts"]
    return [dict(r) for r in rows if str(r["id"]).startswith("mbridge2511-")]


def test_the_rows_are_checked_and_named_by_their_source():
    rows = mbridge_rows()
    assert len(rows) == 8
    assert {r["accelerator"] for r in rows} == {"nvidia-b200", "nvidia-gb200", "nvidia-h100-80gb"}
    assert all("role" not in r or r["role"] == "checked" for r in rows)
    report = {r.id: r for r in T.throughput_report()}
    assert all(report[r["id"]].role == "checked" for r in rows)


def test_the_blackwell_cells_are_no_longer_extrapolated():
    cells = {(c.generation, c.framework, c.precision): c for c in training_cells()}
    # GB200: the 25.11 container's three rows and the 26.02 container's two with the same recipes
    for gen, n in (("B200", 2), ("GB200", 5)):
        cell = cells[(gen, "Megatron", "fp8")]
        assert (cell.fitted, cell.checked) == (0, n)
        said = cell_evidence(f"nvidia-{gen.lower()}", "Megatron", "fp8")
        assert said.startswith(f"{gen} x Megatron x fp8: {n} checked runs")


def test_a_gb200_run_is_planned_on_its_nvlink_domain(monkeypatch):
    """Eight GB200 are two 4-GPU trays of one NVL72 rack: one NCCL node of 8, as a job's plan
    has it (engine.llm_training.on_nvlink_domain), not two hosts over their NICs: its gradients
    reduce over NVLink, over twice as fast."""
    from ringmaster.engine import llm_training as L

    (row,) = [r for r in mbridge_rows() if r["id"] == "mbridge2511-gb200-llama3-8b"]
    domain = T.published_layout_search(row, T.published_nic_gbps(row)).chosen
    monkeypatch.setattr(L, "on_nvlink_domain", lambda hw, machine: (hw, 1))
    over_nics = T.published_layout_search(row, T.published_nic_gbps(row)).chosen
    assert domain.data_parallel_seconds * 2 < over_nics.data_parallel_seconds


def test_megatron_bridges_nvfp4_runs_check_the_fp4_ceiling(monkeypatch):
    """The 26.02 summary's two NVFP4 pre-training runs on DGX-GB200 (checked): the first
    published NVFP4 training in the points. With the NVFP4 ceiling taken from each engine's GEMMs
    as served and no layer kept in bf16 (Megatron-Bridge's default), the engine is 27-31 % short
    of them (the rest is the tensor-parallel rings, see docs/llm-training.md); with the autotuner
    fallback's median and the accuracy recipe's 16 % of bf16 layers it was 11 % shorter still."""
    from ringmaster.engine import ceilings as CE
    from ringmaster.engine import step_parts as SP

    rows = [r for r in T.training_points()["published_layouts"] if r["id"].endswith("-nvfp4")]
    assert {r["id"] for r in rows} == {
        "mbridge2602-gb200-llama3-70b-nvfp4",
        "mbridge2602-gb200-llama31-405b-nvfp4",
    }
    assert all(r["precision"] == "fp4" and not r.get("tensor_overlap") for r in rows)

    def predicted() -> dict[str, float]:
        return {r.id: r.predicted for r in T.throughput_report() if r.id.endswith("-nvfp4")}

    now = predicted()
    for r in rows:
        assert -0.35 < now[r["id"]] / r["tokens_per_s_per_gpu"] - 1.0 < 0.0
    monkeypatch.setitem(CE.MEASURED_FP4_MATMUL_RATIO, "nvidia-gb200", 0.662)
    monkeypatch.setattr(SP, "NVFP4_BF16_LINEAR_SHARE", 0.16)
    before = predicted()
    assert all(before[k] < 0.9 * now[k] for k in now)
    cell = {(c.generation, c.framework, c.precision): c for c in training_cells()}
    assert (
        cell[("GB200", "Megatron", "fp4")].fitted,
        cell[("GB200", "Megatron", "fp4")].checked,
    ) == (0, 2)
