"""Parallelism refused at `kubectl apply`, not at planning: an InferenceEndpoint's tensor,
pipeline and expert degrees (each rule's CEL, evaluated offline from crds/, and its Python twin
give the same message at the same field), what passes them the serving planner plans, and the
TrainingJob global-batch refusal's arithmetic."""

from __future__ import annotations

import copy
import functools
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import ManifestError, parse_manifest
from ringmaster.engine.llm_serving import LlmServingInputs
from ringmaster.planning import PlanError, plan_inference
from ringmaster.planning.plans import (
    active_catalog,
    llm_serving_inputs,
    predict_llm_serving_inputs,
)
from tests.unit.test_api_bad_input import offline_admit

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MIXTRAL = "inferenceendpoint-mixtral-8x7b-h100.yaml"  # 8 experts, 32 layers, 32 heads
LLAMA = "inferenceendpoint-llama3-70b-a100-tp4.yaml"  # dense, 80 layers, 64 heads
FSDP = "trainingjob-llama3-8b-fsdp-h100.yaml"  # 2 x 8 H100, tensor 1, pipeline 1


@functools.cache
def _example(name: str) -> dict[str, Any]:
    """An example parsed once (the serving grid builds 900 endpoints from two files)."""
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return loaded


def endpoint(
    base: str = MIXTRAL, per_replica: int | None = None, hosts: int | None = None, **par: int
) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(_example(base))
    accelerator = doc["spec"]["accelerator"]
    if per_replica is not None:
        accelerator["perReplica"] = per_replica
    if hosts is not None:
        accelerator["hostsPerReplica"] = hosts
    if par:
        doc["spec"]["parallelism"] = par
    return doc


def verdicts(doc: dict[str, Any]) -> tuple[dict[str, set[str]], dict[str, str]]:
    """The CEL refusals (field -> messages) of the CRD, offline, and parse_manifest's."""
    crd: dict[str, set[str]] = {}
    for layer, path, message in offline_admit(doc):
        assert layer == "cel", (layer, path, message)
        crd.setdefault(path, set()).add(message)
    try:
        parse_manifest(doc)
        python: dict[str, str] = {}
    except ManifestError as exc:
        python = {e.path: e.message for e in exc.errors}
    return crd, python


# --- each rule, refused ------------------------------------------------------------------------

REFUSED = [
    pytest.param(
        endpoint(per_replica=16, expert=16),
        "spec.parallelism.expert",
        "expert 16 does not divide the 8 expert slots (model.architecture.experts + "
        "parallelism.redundantExperts)",
        id="expert-not-dividing-the-experts",
    ),
    pytest.param(
        endpoint(per_replica=16, hosts=2, tensor=16, expert=16),
        "spec.parallelism.expert",
        "expert 16 does not divide the 8 expert slots (model.architecture.experts + "
        "parallelism.redundantExperts)",
        id="expert-not-dividing-the-experts-across-hosts",
    ),
    pytest.param(
        endpoint(LLAMA, expert=4),
        "spec.parallelism.expert",
        "expert 4 needs a mixture of experts (model.architecture.experts); a dense model takes "
        "expert 1",
        id="expert-on-a-dense-model",
    ),
    pytest.param(
        endpoint(per_replica=8, tensor=4, expert=8),
        "spec.parallelism.expert",
        "expert 8 must be 1 or the tensor-parallel degree 4 (parallelism.tensor, else perReplica "
        "/ parallelism.pipeline, else perReplica): expert parallelism spans the tensor-parallel "
        "ranks",
        id="expert-not-the-given-tensor-degree",
    ),
    pytest.param(
        endpoint(per_replica=8, pipeline=4, expert=4),
        "spec.parallelism.expert",
        "expert 4 must be 1 or the tensor-parallel degree 2 (parallelism.tensor, else perReplica "
        "/ parallelism.pipeline, else perReplica): expert parallelism spans the tensor-parallel "
        "ranks",
        id="expert-not-perReplica-over-pipeline",
    ),
    pytest.param(
        endpoint(per_replica=16, expert=8),
        "spec.parallelism.expert",
        "expert 8 must be 1 or the tensor-parallel degree 16 (parallelism.tensor, else "
        "perReplica / parallelism.pipeline, else perReplica): expert parallelism spans the "
        "tensor-parallel ranks",
        id="expert-not-perReplica-with-the-layout-left-to-the-engine",
    ),
    pytest.param(
        endpoint(LLAMA, tensor=8),
        "spec.parallelism.tensor",
        "tensor 8 does not divide perReplica 4",
        id="tensor-not-dividing-perReplica",
    ),
    pytest.param(
        endpoint(per_replica=8, pipeline=3),
        "spec.parallelism.pipeline",
        "pipeline 3 does not divide perReplica 8",
        id="pipeline-not-dividing-perReplica",
    ),
    pytest.param(
        endpoint(LLAMA, tensor=4, pipeline=2),
        "spec.parallelism",
        "tensor 4 x pipeline 2 is 8 accelerators, not perReplica 4",
        id="tensor-times-pipeline-not-perReplica",
    ),
    pytest.param(
        endpoint(per_replica=64, pipeline=64),
        "spec.parallelism.pipeline",
        "pipeline 64: more stages than the 32 layers (model.architecture.layers)",
        id="pipeline-above-the-layers",
    ),
    pytest.param(
        endpoint(per_replica=64, tensor=1),
        "spec.parallelism.tensor",
        "tensor 1 leaves perReplica 64 / tensor = 64 pipeline stages, more than the 32 layers "
        "(model.architecture.layers)",
        id="tensor-leaving-more-stages-than-layers",
    ),
]


@pytest.mark.parametrize(("doc", "field", "message"), REFUSED)
def test_a_serving_parallelism_rule_refuses_at_apply_and_in_python_alike(
    doc: dict[str, Any], field: str, message: str
) -> None:
    crd, python = verdicts(doc)
    assert message in crd.get(field, set()), crd
    assert python == {field: message}
    with pytest.raises(ManifestError, match=field):
        parse_manifest(doc)


def test_the_issue_case_names_the_field_not_spec() -> None:
    # 45/5: expert 16 on an 8-expert model was accepted, then Failed PlanFailed naming "spec".
    crd, _ = verdicts(endpoint(per_replica=16, expert=16))
    assert set(crd) == {"spec.parallelism.expert"}


def test_a_degree_that_does_not_divide_perReplica_is_reported_once() -> None:
    # The rules that read the tensor-parallel degree wait for tensor and pipeline to divide
    # perReplica (in CEL, 8 / 40 would be a tensor degree of 0: a modulus by zero).
    crd, python = verdicts(endpoint(per_replica=8, pipeline=40, expert=8))
    assert set(crd) == {"spec.parallelism.pipeline"}, crd
    assert set(python) == {"spec.parallelism.pipeline"}


# --- and accepted --------------------------------------------------------------------------

ACCEPTED = [
    pytest.param(endpoint(per_replica=8, expert=8), id="expert-perReplica-on-one-host"),
    pytest.param(endpoint(per_replica=8, expert=1), id="expert-1"),
    pytest.param(endpoint(per_replica=8, tensor=4, expert=4), id="expert-the-tensor-degree"),
    pytest.param(endpoint(per_replica=8, pipeline=4, expert=2), id="expert-perReplica/pipeline"),
    pytest.param(endpoint(per_replica=16, tensor=8, expert=8), id="expert-8-tp8-pp2-two-hosts"),
    pytest.param(endpoint(LLAMA, expert=1), id="dense-model-expert-1"),
    pytest.param(endpoint(per_replica=32, tensor=1, pipeline=32), id="pipeline-all-the-layers"),
    pytest.param(endpoint(per_replica=32, tensor=1), id="tensor-leaving-32-stages-for-32-layers"),
]


@pytest.mark.parametrize("doc", ACCEPTED)
def test_valid_serving_parallelism_is_accepted_by_both(doc: dict[str, Any]) -> None:
    assert verdicts(doc) == ({}, {})


def test_expert_over_a_two_host_replica_is_planned_as_tensor_parallelism_over_it() -> None:
    # 16 experts, perReplica 16 on 8-GPU hosts, layout left to the engine: the expert degree is
    # the tensor-parallel degree, so the engine keeps TP 16 across both hosts (before, it also
    # weighed TP 8 x PP 2 and refused the whole plan: "spec: expert parallelism 16 must be 1 or
    # the replica's tensor degree 8").
    doc = endpoint(per_replica=16, expert=16)
    doc["spec"]["model"]["architecture"]["experts"] = 16
    assert verdicts(doc) == ({}, {})
    prediction = plan_inference(parse_manifest(doc).spec).prediction
    assert (prediction.tensor_parallel, prediction.pipeline_parallel) == (16, 1)
    assert (prediction.expert_parallel, prediction.hosts_per_replica) == (16, 2)


def test_what_the_api_accepts_the_serving_planner_plans() -> None:
    """Over a grid of layouts: an endpoint parse_manifest accepts is planned without a
    PlanError, unless the catalog lacks the hardware (a host shape: the operator's to judge)."""
    planned = 0
    catalog = active_catalog()
    seen: set[LlmServingInputs] = set()
    grid = itertools.product(
        (2, 8, 16), (None, 2), (None, 1, 2, 8, 16), (None, 1, 2), (None, 1, 2, 8, 16), (16, None)
    )
    for per_replica, hosts, tensor, pipeline, expert, experts in grid:
        given = {"tensor": tensor, "pipeline": pipeline, "expert": expert}
        doc = endpoint(
            per_replica=per_replica,
            hosts=hosts,
            **{k: v for k, v in given.items() if v is not None},
        )
        arch = doc["spec"]["model"]["architecture"]
        if experts is None:
            del arch["experts"], arch["activeExperts"]
        try:
            manifest = parse_manifest(copy.deepcopy(doc))
        except ManifestError:
            continue
        # The engine's plan of the layout (what plan_inference runs before the alternatives an
        # infeasible plan searches), once per distinct engine input: the grid repeats some.
        inputs = llm_serving_inputs(manifest.spec)
        planned += 1
        if inputs in seen:
            continue
        seen.add(inputs)
        try:
            predict_llm_serving_inputs(inputs, catalog)
        except PlanError as exc:
            assert str(exc).startswith("spec.accelerator."), (doc["spec"], exc)
    assert planned > 50


# --- TrainingJob: the global batch's arithmetic ------------------------------------------


def job(**par: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / FSDP).read_text())
    doc["spec"]["parallelism"].update(par)
    return doc


@pytest.mark.parametrize(
    ("par", "message"),
    [
        (
            {"microBatchSize": 3, "globalBatchSize": 100},
            "global batch 100 is not a multiple of micro-batch 3 x data-parallel 16 = 48 "
            "(data-parallel 16 = 16 accelerators / (tensor 1 x context 1 x pipeline 1))",
        ),
        (
            {"tensor": 2, "context": 2, "microBatchSize": 2, "globalBatchSize": 12},
            "global batch 12 is not a multiple of micro-batch 2 x data-parallel 4 = 8 "
            "(data-parallel 4 = 16 accelerators / (tensor 2 x context 2 x pipeline 1))",
        ),
        (
            {"microBatchSize": "Auto", "globalBatchSize": 100},
            "global batch 100 is not a multiple of data-parallel 16 = 16 accelerators / "
            "(tensor 1 x context 1 x pipeline 1), whatever micro-batch the engine picks",
        ),
        (
            {"context": "Auto", "microBatchSize": 3, "globalBatchSize": 100},
            "global batch 100 is not a multiple of micro-batch 3 (context Auto: the engine may "
            "give context all the accelerators tensor x pipeline leave, so data-parallel may "
            "be 1)",
        ),
    ],
)
def test_the_global_batch_refusal_shows_the_real_arithmetic(
    par: dict[str, Any], message: str
) -> None:
    crd, python = verdicts(job(**par))
    assert crd == {"spec.parallelism.globalBatchSize": {message}}
    assert python == {"spec.parallelism.globalBatchSize": message}
    assert "..." not in message
