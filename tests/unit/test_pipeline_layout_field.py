"""spec.parallelism.pipelineLayout through the API, the plan and the workers' env."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ringmaster.api import parse_manifest
from ringmaster.manifests.training import layout_env
from ringmaster.planning.layouts import layout_request
from tests.unit.test_moe_training_fields import verdicts
from tests.unit.test_published_moe_layouts import deepseek_job

pytestmark = pytest.mark.unit

RECIPE = "Et*3|(tt|)*29,m|L"


def _deepseek(**parallelism: Any) -> dict[str, Any]:
    doc = deepseek_job(16, 256)
    doc["spec"]["model"]["architecture"]["mtpLayers"] = 1
    doc["spec"]["parallelism"].update(parallelism)
    return doc


def test_a_layout_needs_a_fixed_pipeline_in_the_crd_and_its_twin() -> None:
    doc = _deepseek(pipelineLayout=RECIPE, pipeline="Auto")
    crd, python = verdicts(doc)
    field = "spec.parallelism.pipelineLayout"
    assert field in crd and crd[field] == python[field], (crd, python)
    assert any("set parallelism.pipeline" in m for m in crd[field])


def test_the_schema_refuses_what_no_layout_spells() -> None:
    crd, _ = verdicts(_deepseek(pipelineLayout="Et*3|x|L"))
    assert "spec.parallelism.pipelineLayout" in crd


def test_the_request_carries_the_split_and_the_workers_get_the_layout() -> None:
    spec = parse_manifest(copy.deepcopy(_deepseek(pipelineLayout=RECIPE))).spec  # type: ignore[union-attr]
    request = layout_request(spec)
    split = request.model.stage_split
    assert split is not None and (split.first, split.middle, split.last) == (5, 4, 2)
    assert request.virtual_stages == 2
    env = {e["name"]: e["value"] for e in layout_env({"tensor": 1, "pipelineLayout": RECIPE})}
    assert env["RINGMASTER_PIPELINE_LAYOUT"] == RECIPE
    plain = {e["name"]: e["value"] for e in layout_env({"tensor": 1})}
    assert plain["RINGMASTER_PIPELINE_LAYOUT"] == ""  # ${VAR:+...} drops the flag


def test_a_layout_that_misplaces_a_layer_fails_the_plan_naming_it() -> None:
    spec = parse_manifest(copy.deepcopy(_deepseek(pipelineLayout="Et*2|(tt|)*29,m|L"))).spec  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"spec\.parallelism\.pipelineLayout places 60 decoder"):
        layout_request(spec)
    spec = parse_manifest(
        copy.deepcopy(_deepseek(pipelineLayout=RECIPE, virtualPipelineStages=4))
    ).spec  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="virtualPipelineStages is 4"):
        layout_request(spec)
