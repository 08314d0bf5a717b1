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
