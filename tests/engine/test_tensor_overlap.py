"""Tensor-parallel collectives overlapped with their GEMMs (spec.parallelism.tensorOverlap:
Transformer Engine's userbuffers, torchtitan's async TP): one chunk in t stays exposed, and what
the GEMMs cannot cover."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.calibration.llm_training import (
    published_layout_search,
    published_nic_gbps,
    training_points,
)
from ringmaster.engine import llm_training as L
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_NONE, SHARD_NONE
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.planning import plan_training

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_one_chunk_in_t_and_what_the_gemms_cannot_cover_by_hand():
    exposed = L.exposed_tensor_parallel_seconds(
        np.array([10.0, 10.0, 10.0]), np.array([50.0, 4.0, 50.0]), np.array([4, 4, 1])
    )
    assert list(exposed) == [2.5, 6.0, 10.0]  # 10 / 4; 10 - 4; no tensor parallelism


def _step(tensor: int, overlap: bool) -> L.LayoutArrays:
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    hw = replace(L.layout_hardware(host, 2, DEFAULT_CATALOG), tensor_overlap=overlap)
    return L.evaluate_layouts(
        KNOWN_TRANSFORMERS["llama-3-70b"],
        hw,
        tensor=tensor,
        pipeline=2,
        sharding=SHARD_NONE,
        micro_batch=1,
        recompute=RECOMPUTE_NONE,
        global_batch=64,
    )


def test_an_overlapped_layout_is_never_slower_and_tensor_one_is_unchanged():
    exposed, whole = _step(8, True), _step(8, False)
    tp_e, tp_w = _one(exposed.tensor_parallel_seconds), _one(whole.tensor_parallel_seconds)
    assert 0.0 < tp_e <= tp_w / 8 + 1e-12
    assert _one(exposed.step_seconds) < _one(whole.step_seconds)
    one_e, one_w = _step(1, True), _step(1, False)
    assert _one(one_e.step_seconds) == _one(one_w.step_seconds)


def _one(x: object) -> float:
    return float(np.ravel(x)[0])


def test_the_spec_states_it_and_the_plan_says_what_it_changed():
    doc = yaml.safe_load((EXAMPLES / "trainingjob-llama2-70b-auto-a100.yaml").read_text())
    plain = plan_training(parse_manifest(doc).spec)
    doc["spec"]["parallelism"]["tensorOverlap"] = True
    spec = parse_manifest(doc).spec
    assert spec.parallelism.tensor_overlap is True
    overlapped = plan_training(spec)
    assert overlapped.layout is not None and plain.layout is not None
    assert overlapped.layout.hardware.tensor_overlap
    assert overlapped.layout.chosen.step_seconds < plain.layout.chosen.step_seconds
    notes = " ".join(overlapped.prediction.notes)
    assert "overlapped with their GEMMs (parallelism.tensorOverlap)" in notes


# The published runs whose recipes overlap their TP collectives (NeMo-Framework-Launcher 24.07's
# llama2_70b / llama3_70b: ub_tp_comm_overlap true; Megatron-Bridge's Llama recipes, 25.11 and
# the 26.02 rows that share them).
OVERLAPPED = {
    "nemo2407-llama2-70b",
    "nemo2407-llama3-70b",
    "mbridge2511-b200-llama31-405b",
    "mbridge2511-gb200-llama31-405b",
    "mbridge2511-h100-llama3-70b",
    "mbridge2511-h100-llama31-405b",
    "mbridge2602-gb200-llama31-405b",
    "mbridge2602-h100-llama3-70b",
    "mbridge2602-h100-llama31-405b",
}


def test_the_published_rows_that_overlap_are_the_ones_whose_recipes_say_so():
    rows = training_points()["published_layouts"]
    assert {r["id"] for r in rows if r.get("tensor_overlap")} == OVERLAPPED
    row = next(r for r in rows if r["id"] == "nemo2407-llama2-70b")
    search = published_layout_search(row, published_nic_gbps(row))
    assert search.chosen.tensor == 4
    share = search.chosen.tensor_parallel_seconds / search.chosen.step_seconds
    assert share < 0.06  # 17 % of the step charged whole


def _interleaved(framework_name: str, virtual: int) -> dict:
    doc = yaml.safe_load((EXAMPLES / "trainingjob-llama2-70b-auto-a100.yaml").read_text())
    doc["spec"]["parallelism"].update(
        {"tensor": 8, "pipeline": 4, "virtualPipelineStages": virtual}
    )
    doc["spec"]["framework"] = {"name": framework_name}
    return doc


def test_the_plan_says_megatron_overlaps_the_interleaved_sends_it_charges_whole():
    """Megatron-LM overlaps the interleaved schedule's sends by default (overlap_p2p_comm) and
    the step charges them whole: the plan says so, with the seconds it charges; not for plain
    1F1B (Megatron turns the overlap off there) nor for a framework without the overlap."""
    plan = plan_training(parse_manifest(_interleaved("Megatron", 5)).spec)
    assert plan.layout is not None
    chosen = plan.layout.chosen
    assert (chosen.pipeline, chosen.virtual_stages) == (4, 5) and chosen.pipeline_send_seconds > 0
    [note] = [n for n in plan.prediction.notes if n.startswith("pipeline sends charged whole")]
    assert f"({chosen.pipeline_send_seconds:.3g} s a step)" in note
    assert "overlap_p2p_comm" in note
    for framework_name, virtual in (("Megatron", 1), ("Torchtitan", 5)):
        other = plan_training(parse_manifest(_interleaved(framework_name, virtual)).spec)
        assert not [n for n in other.prediction.notes if n.startswith("pipeline sends")]
