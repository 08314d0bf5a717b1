"""What may change in a live TrainingJob: every spec field has a decided rule, and the rules
that read status (no edit of the gang's shape while it is admitted) give the same verdict in
the CRD's CEL (evaluated offline, as the apiserver would) and in validate_update.

The e2e twins: the rows of tests/e2e/bad_input.yaml with a `status`, and
tests/e2e/test_live_edits.py on a job the operator really runs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ringmaster.api import TRAINING_JOB, ManifestError, TrainingJobPhase, validate_update
from ringmaster.api.trainingjob import ADMITTED_PHASES
from tests.e2e.test_admission import load_example
from tests.unit.test_api_bad_input import offline_admit

pytestmark = pytest.mark.unit

# One edit of each top-level spec field, each valid on its own.
EDITS: dict[str, Any] = {
    "workers": ("workers", 4),
    "machineType": ("machineType", "a2-highgpu-8g"),
    "model": ("model.parameters", "1.3B"),
    "communication": ("communication.strategy", "Ring"),
    "template": ("template.image", "pytorch/pytorch:2.4.0"),
    "runPolicy": ("runPolicy.backoffLimit", 5),
    "accelerator": ("accelerator.type", "nvidia-a100-80gb"),
    "parallelism": ("parallelism.tensor", 2),
    "steps": ("steps", 5000),
    "framework": ("framework.name", "Megatron"),
    "placement": ("placement.topology", "Required"),
}
# The example each edit starts from (parallelism needs a model architecture).
BASES = {
    "parallelism": "trainingjob-llama3-8b-fsdp-h100.yaml",
    "framework": "trainingjob-llama3-8b-fsdp-h100.yaml",
}
BERT = "trainingjob-bert-large-auto.yaml"
PHASES = [None, *(p.value for p in TrainingJobPhase)]
SHAPE = [
    "workers",
    "machineType",
    "model",
    "communication",
    "template",
    "parallelism",
    "framework",
]


def job(phase: str | None, example: str = BERT) -> dict[str, Any]:
    doc = load_example(example)
    if phase is not None:
        doc["status"] = {"phase": phase, "pool": "a100-highgpu-8g"}
    return doc


def edited(old: dict[str, Any], field: str, suspend: bool = False) -> dict[str, Any]:
    new = copy.deepcopy(old)
    new.pop("status", None)  # kubectl apply sends no status; the stored one stays
    path, value = EDITS[field]
    *parents, last = path.split(".")
    node = new["spec"]
    for key in parents:
        node = node[key]
    node[last] = value
    if suspend:
        new["spec"]["runPolicy"]["suspend"] = True
    return new


def python_refuses(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    try:
        validate_update(old, new)
    except ManifestError as exc:
        return {e.path for e in exc.errors}
    return set()


def crd_refuses(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    return {path for _, path, _ in offline_admit(new, old)}


def test_every_spec_field_has_a_decided_rule() -> None:
    fields = {info.alias or name for name, info in TRAINING_JOB.spec.model_fields.items()}
    decided = [c.field for c in TRAINING_JOB.spec_changes]
    assert sorted(decided) == sorted(fields), "a spec field without a rule for live edits"
    assert set(EDITS) == fields


def test_the_shape_fields_have_a_root_rule_naming_them() -> None:
    paths = {r.field_path for r in TRAINING_JOB.rules}
    assert paths == {f".spec.{f}" for f in SHAPE} | {".spec.runPolicy.suspend"}
    assert all(r.is_transition and r.check_update is not None for r in TRAINING_JOB.rules)


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("field", SHAPE)
def test_the_gangs_shape_is_fixed_exactly_while_it_is_admitted(field: str, phase: str) -> None:
    old = job(phase, BASES.get(field, BERT))
    new = edited(old, field)
    expected = {f"spec.{field}"} if phase in ADMITTED_PHASES else set()
    assert python_refuses(old, new) == expected
    assert crd_refuses(old, new) == expected


@pytest.mark.parametrize("phase", ADMITTED_PHASES)
@pytest.mark.parametrize("field", SHAPE)
def test_an_update_that_suspends_the_job_may_change_its_shape(field: str, phase: str) -> None:
    old = job(phase, BASES.get(field, BERT))
    new = edited(old, field, suspend=True)
    assert python_refuses(old, new) == set()
    assert crd_refuses(old, new) == set()


@pytest.mark.parametrize("phase", PHASES)
def test_run_policy_changes_at_any_time_and_the_accelerator_never(phase: str) -> None:
    old = job(phase)
    assert python_refuses(old, edited(old, "runPolicy")) == set()
    assert crd_refuses(old, edited(old, "runPolicy")) == set()
    assert python_refuses(old, edited(old, "steps")) == set()
    assert crd_refuses(old, edited(old, "steps")) == set()
    assert python_refuses(old, edited(old, "accelerator")) == {"spec.accelerator"}
    assert "spec.accelerator" in crd_refuses(old, edited(old, "accelerator"))


def test_removing_or_adding_machine_type_while_running_is_a_change() -> None:
    running = job("Running")
    running["spec"]["machineType"] = "a2-highgpu-8g"
    removed = copy.deepcopy(running)
    removed.pop("status")
    del removed["spec"]["machineType"]
    assert python_refuses(running, removed) == {"spec.machineType"}
    assert crd_refuses(running, removed) == {"spec.machineType"}
    same = copy.deepcopy(running)
    same.pop("status")
    assert python_refuses(running, same) == crd_refuses(running, same) == set()


def test_the_message_says_what_to_do() -> None:
    old = job("Running")
    with pytest.raises(ManifestError) as exc:
        validate_update(old, edited(old, "machineType"))
    message = str(exc.value)
    assert "spec.machineType: machineType cannot change while the gang is admitted" in message
    assert "runPolicy.suspend: true" in message
    crd_messages = {m for _, path, m in offline_admit(edited(old, "machineType"), old)}
    assert {e.message for e in exc.value.errors} == crd_messages


@pytest.mark.parametrize("phase", PHASES)
def test_a_suspension_is_lifted_only_once_the_job_is_suspended(phase: str | None) -> None:
    """suspend: true with a new shape, then suspend: false before the operator acted, would leave
    the old gang running under the new shape."""
    old = job(phase)
    old["spec"]["runPolicy"]["suspend"] = True
    resumed = copy.deepcopy(old)
    resumed.pop("status", None)
    resumed["spec"]["runPolicy"]["suspend"] = False
    expected = {"spec.runPolicy.suspend"} if phase in ADMITTED_PHASES else set()
    assert python_refuses(old, resumed) == expected
    assert crd_refuses(old, resumed) == expected
