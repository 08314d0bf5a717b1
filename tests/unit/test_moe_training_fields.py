"""The mixture-of-experts training fields of spec.parallelism (issue 42): expertOverlap,
expertCapacityFactor and expertPadToCapacity, and computePrecision fp4. Each rule is refused by
the CRD's CEL (offline, from crds/) and by its Python twin alike, at the same field; what
passes them reaches the plan and the workers' environment."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import ManifestError, parse_manifest
from ringmaster.manifests.training import layout_env
from ringmaster.planning.layouts import layout_request
from tests.unit.test_api_bad_input import offline_admit

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QWEN = "trainingjob-qwen3-30b-a3b-h100.yaml"  # 128 experts on 8 H100, expert Auto
LLAMA = "trainingjob-llama3-8b-fsdp-h100.yaml"  # dense


def job(base: str = QWEN, **parallelism: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / base).read_text())
    doc["spec"].setdefault("parallelism", {}).update(parallelism)
    return doc


def verdicts(doc: dict[str, Any]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """field -> messages, from the CRD's CEL (offline) and from parse_manifest."""
    crd: dict[str, set[str]] = {}
    for _layer, path, message in offline_admit(copy.deepcopy(doc)):
        crd.setdefault(path, set()).add(message)
    python: dict[str, set[str]] = {}
    try:
        parse_manifest(copy.deepcopy(doc))
    except ManifestError as exc:
        for e in exc.errors:
            python.setdefault(e.path, set()).add(e.message)
    return crd, python


REFUSED = [
    pytest.param(
        job(LLAMA, expertOverlap="OneFOneB"),
        "spec.parallelism.expertOverlap",
        "a dense model (no model.architecture.experts) takes None",
        id="overlap-on-a-dense-model",
    ),
    pytest.param(
        job(LLAMA, expertDispatch="DeepEP"),
        "spec.parallelism.expertDispatch",
        "a dense model (no model.architecture.experts) takes AllToAll",
        id="deepep-on-a-dense-model",
    ),
    pytest.param(
        job(LLAMA, expertCapacityFactor=1.25),
        "spec.parallelism.expertCapacityFactor",
        "a dense model (no model.architecture.experts) has none",
        id="capacity-factor-on-a-dense-model",
    ),
    pytest.param(
        job(expertPadToCapacity=True),
        "spec.parallelism.expertPadToCapacity",
        "needs expertCapacityFactor",
        id="padding-without-a-capacity",
    ),
    pytest.param(
        job(expertOverlap="OneFOneB", expert=1),
        "spec.parallelism.expertOverlap",
        "it needs expert > 1",
        id="one-f-one-b-without-expert-parallelism",
    ),
    pytest.param(
        job(expertOverlap="OneFOneB", pipeline=2),
        "spec.parallelism.expertOverlap",
        "with pipeline > 1 needs virtualPipelineStages > 1",
        id="one-f-one-b-pipelined-without-interleaving",
    ),
    pytest.param(
        job(expertOverlap="OneFOneB", activationRecompute="Full"),
        "spec.parallelism.expertOverlap",
        "cannot run with activationRecompute Full",
        id="one-f-one-b-with-full-recompute",
    ),
    pytest.param(
        job(expertOverlap="DualPipe", pipeline=1),
        "spec.parallelism.expertOverlap",
        "DualPipe needs an even pipeline",
        id="dualpipe-odd-pipeline",
    ),
    pytest.param(
        job(expertOverlap="DualPipe", pipeline=2, virtualPipelineStages=2),
        "spec.parallelism.expertOverlap",
        "DualPipe needs an even pipeline and virtualPipelineStages 1",
        id="dualpipe-interleaved",
    ),
]


@pytest.mark.parametrize(("doc", "field", "words"), REFUSED)
def test_each_rule_is_refused_by_the_crd_and_its_twin_at_the_same_field(
    doc: dict[str, Any], field: str, words: str
) -> None:
    crd, python = verdicts(doc)
    assert field in crd, crd
    assert field in python, python
    assert any(words in m for m in crd[field]), crd[field]
    assert crd[field] == python[field]


ACCEPTED = [
    pytest.param(job(expertOverlap="OneFOneB"), id="one-f-one-b-expert-auto"),
    pytest.param(job(expertOverlap="OneFOneB", expert=8, pipeline=1), id="one-f-one-b-no-pp"),
    pytest.param(
        job(expertOverlap="OneFOneB", pipeline=2, virtualPipelineStages=2),
        id="one-f-one-b-interleaved",
    ),
    pytest.param(job(expertOverlap="DualPipe", pipeline=2), id="dualpipe-even"),
    pytest.param(job(expertOverlap="DualPipe"), id="dualpipe-pipeline-auto"),
    pytest.param(job(expertCapacityFactor=1.0), id="dropping"),
    pytest.param(job(expertCapacityFactor=1.5, expertPadToCapacity=True), id="padded"),
    pytest.param(job(LLAMA, expertOverlap="None"), id="dense-none"),
    pytest.param(job(expertDispatch="DeepEP"), id="deepep"),
    pytest.param(job(LLAMA, expertDispatch="AllToAll"), id="dense-all-to-all"),
]


@pytest.mark.parametrize("doc", ACCEPTED)
def test_what_the_rules_allow_passes_both(doc: dict[str, Any]) -> None:
    crd, python = verdicts(doc)
    assert not crd and not python, (crd, python)


@pytest.mark.parametrize("factor", [0, -1.0])
def test_a_capacity_factor_must_be_positive(factor: float) -> None:
    crd, python = verdicts(job(expertCapacityFactor=factor))
    assert "spec.parallelism.expertCapacityFactor" in crd
    assert python


def test_fp4_is_a_compute_precision_of_the_api() -> None:
    doc = job()
    doc["spec"]["model"]["computePrecision"] = "fp4"
    crd, python = verdicts(doc)
    assert not crd and not python


def test_the_request_carries_the_fields_and_the_workers_get_them() -> None:
    doc = job(expertOverlap="OneFOneB", expertCapacityFactor=1.25, expertPadToCapacity=True)
    spec = parse_manifest(doc).spec  # type: ignore[union-attr]
    request = layout_request(spec)
    assert request.expert_overlap == "OneFOneB"
    assert request.capacity_factor == 1.25 and request.pad_to_capacity
    env = {
        e["name"]: e["value"]
        for e in layout_env(
            {
                "tensor": 1,
                "expertOverlap": "DualPipe",
                "expertCapacityFactor": 1.25,
                "expertPadToCapacity": True,
            }
        )
    }
    assert env["RINGMASTER_EXPERT_OVERLAP"] == "DualPipe"
    assert env["RINGMASTER_EXPERT_CAPACITY_FACTOR"] == "1.25"
    assert env["RINGMASTER_EXPERT_PAD_TO_CAPACITY"] == "true"
    dropless = {e["name"]: e["value"] for e in layout_env({"tensor": 1, "expertOverlap": "None"})}
    assert dropless["RINGMASTER_EXPERT_CAPACITY_FACTOR"] == ""  # ${VAR:+...} drops the flag


def test_the_dispatcher_reaches_the_request_the_plan_and_the_workers() -> None:
    spec = parse_manifest(job(expertDispatch="DeepEP")).spec  # type: ignore[union-attr]
    assert layout_request(spec).expert_dispatch == "DeepEP"
    env = {e["name"]: e["value"] for e in layout_env({"tensor": 1, "expertDispatch": "DeepEP"})}
    assert env["RINGMASTER_EXPERT_DISPATCH"] == "DeepEP"
