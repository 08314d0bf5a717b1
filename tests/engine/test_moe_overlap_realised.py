"""Megatron-Core's batch-level expert overlap (``expertOverlap: OneFOneB``,
--overlap-moe-expert-parallel-comm) as Megatron-Bridge's published runs realise it
(engine.frameworks.MEGATRON_ONE_F_ONE_B_REALISED): their throughputs lie where none of the
exchange is hidden, the engine's ideal overlap put them 11-28 % fast."""

from __future__ import annotations

import statistics

import pytest

from ringmaster.calibration.moe import (
    OVERLAP_FIT,
    implied_overlap_share,
    overlap_realised_fit,
    overlap_runs,
    predicted_tokens_per_gpu,
)
from ringmaster.engine.frameworks import MEGATRON_ONE_F_ONE_B_REALISED, framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.moe_training import (
    OVERLAP_DUALPIPE,
    OVERLAP_INTERFERENCE,
    OVERLAP_ONE_F_ONE_B,
    exposed_all_to_all,
)

pytestmark = pytest.mark.unit


def _error(point: dict, realised: float | None = None) -> float:
    predicted = predicted_tokens_per_gpu(point, DEFAULT_CATALOG, one_f_one_b_realised=realised)
    return predicted / float(point["published_tokens_per_second_per_gpu"]) - 1.0


def test_the_constant_is_its_fit_on_one_release() -> None:
    fitted, rows = overlap_realised_fit()
    assert (fitted, rows) == (MEGATRON_ONE_F_ONE_B_REALISED, 3)
    assert framework("Megatron").one_f_one_b_realised == MEGATRON_ONE_F_ONE_B_REALISED
    assert framework("Torchtitan").one_f_one_b_realised == 1.0  # not measured: the ideal


def test_the_other_releases_check_it() -> None:
    checked = [p for p in overlap_runs() if p.get("fit") != OVERLAP_FIT]
    releases = {p["source"].split(", ")[1] for p in checked}
    assert releases >= {"26.02", "26.02.01", "26.04", "26.04.01", "26.06.01", "26.08"}
    assert {p["accelerator"] for p in checked} == {"nvidia-h100-80gb", "nvidia-gb200"}
    now = [_error(p) for p in checked]
    ideal = [_error(p, 1.0) for p in checked]
    assert statistics.median(abs(e) for e in now) < 0.05  # 2.1 %
    assert abs(statistics.median(now)) < 0.02  # +0.5 %: no lean
    assert statistics.median(ideal) > 0.15  # the ideal hiding: +22 %, every one fast
    shares = sorted(implied_overlap_share(p, DEFAULT_CATALOG) for p in checked)
    assert abs(statistics.median(shares)) < 0.1  # each release implies about none


def test_an_unrealised_overlap_hides_nothing_and_dualpipe_keeps_its_own() -> None:
    a2a, shared, layer = 3.0, 1.0, 10.0
    none = exposed_all_to_all(a2a, shared, layer, OVERLAP_ONE_F_ONE_B, 0.0, 0.0)
    assert float(none) == pytest.approx(a2a)  # Megatron-Core runs no shared-expert overlap then
    ideal = exposed_all_to_all(a2a, shared, layer, OVERLAP_ONE_F_ONE_B, 0.0, 1.0)
    assert float(ideal) == pytest.approx(OVERLAP_INTERFERENCE * a2a)
    dual = exposed_all_to_all(a2a, shared, layer, OVERLAP_DUALPIPE, 0.0, 0.0)
    assert float(dual) == pytest.approx(OVERLAP_INTERFERENCE * a2a)


def test_a_plan_under_it_says_so() -> None:
    from pathlib import Path

    import yaml

    from ringmaster.api import parse_manifest
    from ringmaster.planning import plan_training

    examples = Path(__file__).parents[2] / "examples"
    doc = yaml.safe_load((examples / "trainingjob-qwen3-30b-a3b-h100.yaml").read_text())
    doc["spec"]["parallelism"]["expertOverlap"] = "OneFOneB"
    doc["spec"]["parallelism"]["pipeline"] = 1
    plan = plan_training(parse_manifest(doc).spec)
    assert any(
        n.startswith("expertOverlap OneFOneB: Megatron's published runs realise 0%")
        for n in plan.prediction.notes
    )
    doc["spec"]["parallelism"]["expertOverlap"] = "None"
    plain = plan_training(parse_manifest(doc).spec)
    assert not any(n.startswith("expertOverlap") for n in plain.prediction.notes)
