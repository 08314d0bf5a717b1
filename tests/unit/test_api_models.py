"""The API's Python surface: names other modules code against, counts, manifests, conditions."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import ringmaster.api as api
from ringmaster.api import (
    ManifestError,
    TrainingJobSpec,
    load_manifests,
    parse_count,
    parse_manifest,
    set_condition,
    validate_update,
)
from ringmaster.api.manifest import KubectlYamlLoader
from ringmaster.api.quantity import format_count

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def bert() -> dict:
    doc: dict = yaml.safe_load((EXAMPLES / "trainingjob-bert-large-auto.yaml").read_text())
    return doc


def test_group_version_and_the_names_other_modules_import() -> None:
    assert (api.GROUP, api.VERSION) == ("ringmaster.dev", "v1alpha1")
    for name in (
        "TrainingJobSpec", "TrainingJobStatus", "InferenceEndpointSpec", "InferenceEndpointStatus",
        "ReductionServerPoolSpec", "ReductionServerPoolStatus", "Condition", "parse_manifest",
        "ManifestError", "ACCELERATOR_NAME_PATTERN", "TOPOLOGY_PATTERN", "is_tpu",
    ):  # fmt: skip
        assert hasattr(api, name), name


# GKE's own label values (cloud.google.com/gke-accelerator, gke-tpu-accelerator), as its GPU and
# TPU pages list them, built-in or not: the schema takes every one.
GKE_ACCELERATOR_NAMES = [
    "nvidia-tesla-k80", "nvidia-tesla-p4", "nvidia-tesla-t4", "nvidia-tesla-v100",
    "nvidia-tesla-a100", "nvidia-a100-80gb", "nvidia-l4", "nvidia-h100-80gb",
    "nvidia-h100-mega-80gb", "nvidia-h200-141gb", "nvidia-b200", "nvidia-gb200",
    "nvidia-rtx-pro-6000", "tpu-v4-podslice", "tpu-v5-lite-podslice", "tpu-v5-lite-device",
    "tpu-v5p-slice", "tpu-v6e-slice", "tpu7x",
]  # fmt: skip
NOT_ACCELERATOR_NAMES = [
    "", "NVIDIA-A100", "nvidia_a100", "nvidia a100", "nvidia--a100", "-nvidia", "nvidia-",
    "4090", "nvidia.com/gpu", "a" * 64, "tpu-v4-podslice\n",
]  # fmt: skip


@pytest.mark.parametrize("name", GKE_ACCELERATOR_NAMES)
def test_the_schema_accepts_every_gke_accelerator_label_value(name: str) -> None:
    doc = bert()
    doc["spec"]["accelerator"]["type"] = name
    if api.is_tpu(name):
        doc["spec"]["accelerator"].update(perWorker=4, topology="2x2x4")
        doc["spec"]["workers"] = 4
        doc["spec"].pop("communication", None)
    api.parse_manifest(doc)
    assert re.fullmatch(api.ACCELERATOR_NAME_PATTERN, name)


@pytest.mark.parametrize("name", NOT_ACCELERATOR_NAMES)
def test_the_schema_refuses_what_is_no_label_value(name: str) -> None:
    doc = bert()
    doc["spec"]["accelerator"]["type"] = name
    with pytest.raises(api.ManifestError, match=r"spec\.accelerator\.type"):
        api.parse_manifest(doc)


def test_tpus_are_told_by_gkes_tpu_prefix() -> None:
    assert all(api.is_tpu(n) == n.startswith("tpu") for n in GKE_ACCELERATOR_NAMES)
    assert api.is_tpu("tpu7x") and not api.is_tpu("nvidia-tesla-t4")


@pytest.mark.parametrize(
    ("written", "count"),
    [
        (340000000, 340_000_000),
        ("340000000", 340_000_000),
        ("340M", 340_000_000),
        ("1.3G", 1_300_000_000),
        ("1.3B", 1_300_000_000),
        ("25.6M", 25_600_000),
        ("0.5T", 500_000_000_000),
        ("175B", 175_000_000_000),
        ("8.2G", 8_200_000_000),
        ("1K", 1000),
    ],
)
def test_counts_are_read_as_whole_numbers(written: int | str, count: int) -> None:
    assert parse_count(written) == count


@pytest.mark.parametrize(
    "written", ["340m", "340 M", "1.3b", "0M", "0.0B", "1.2345B", "10000M", "", "M", "-5", 0, -1,
                1.5, True, None, 10**17]
)  # fmt: skip
def test_counts_refuse_what_is_not_a_positive_whole_count(written: object) -> None:
    with pytest.raises(ValueError):
        parse_count(written)


@given(st.integers(min_value=1, max_value=10**15))
def test_format_count_round_trips(count: int) -> None:
    assert parse_count(format_count(count)) == count


def test_parsed_spec_exposes_snake_case_attributes_and_an_int_parameter_count() -> None:
    parsed = parse_manifest(bert())
    assert (parsed.kind, parsed.name, parsed.namespace) == ("TrainingJob", "bert-large-squad", None)
    spec = parsed.spec
    assert isinstance(spec, TrainingJobSpec)
    assert spec.model.parameters == 340_000_000
    assert spec.accelerator.per_worker == 8
    assert spec.communication.strategy == "Auto"
    assert spec.run_policy.suspend is False  # a default
    assert spec.to_k8s()["model"]["gradientDType"] == "fp32"  # camelCase on the way out


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_parses(path: Path) -> None:
    assert load_manifests(path.read_text(), source=path.name)


def test_whole_numbers_are_integers_as_for_the_apiserver() -> None:
    # kubectl reads `3.4e8` and `8.0` as numbers and the apiserver stores them as integers.
    text = (EXAMPLES / "trainingjob-bert-large-auto.yaml").read_text()
    text = text.replace("parameters: 340M", "parameters: 3.4e8").replace(
        "workers: 8", "workers: 8.0"
    )
    [parsed] = load_manifests(text)
    assert isinstance(parsed.spec, TrainingJobSpec)
    assert parsed.spec.model.parameters == 340_000_000
    assert parsed.spec.workers == 8 and isinstance(parsed.spec.workers, int)
    doc = bert()
    doc["spec"]["workers"] = 8.5
    with pytest.raises(ManifestError, match=r"spec\.workers: must be of type integer"):
        parse_manifest(doc)


def test_a_key_given_twice_is_refused_as_kubectl_refuses_it() -> None:
    """PyYAML keeps the last of two equal keys; kubectl refuses the file ("mapping key
    "workers" already defined at line N"), and so does `ringmaster plan` (and the catalog and
    profile files the CLI reads): the first value is never silently dropped. A merge key's
    values may still be overridden."""
    text = (EXAMPLES / "trainingjob-bert-large-auto.yaml").read_text()
    line = 1 + text.splitlines().index("  workers: 8")
    twice = text.replace("  workers: 8\n", "  workers: 8\n  workers: 16\n")
    with pytest.raises(
        ManifestError, match=f'mapping key "workers" already defined at line {line}'
    ):
        load_manifests(twice)
    merged = "base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  a: 3\n"
    assert yaml.load(merged, Loader=KubectlYamlLoader)["x"] == {"a": 3, "b": 2}


def test_error_names_the_field_in_the_manifests_camel_case() -> None:
    doc = bert()
    doc["spec"]["accelerator"]["perWorker"] = 0
    with pytest.raises(ManifestError) as exc:
        parse_manifest(doc)
    assert str(exc.value).endswith("spec.accelerator.perWorker: must be >= 1")


def test_every_offending_field_is_listed() -> None:
    doc = bert()
    doc["spec"]["workers"] = "eight"
    doc["spec"]["model"]["gradientDType"] = "int8"
    doc["apiVersion"] = "ringmaster.dev/v1"
    with pytest.raises(ManifestError) as exc:
        parse_manifest(doc)
    paths = {e.path for e in exc.value.errors}
    assert paths == {"apiVersion", "spec.workers", "spec.model.gradientDType"}
    assert 'supported values: "fp32", "bf16", "fp16"' in str(exc.value)


def test_a_rule_failure_is_reported_at_the_rules_field_path() -> None:
    doc = bert()
    doc["spec"]["accelerator"]["topology"] = "2x2x4"
    with pytest.raises(ManifestError) as exc:
        parse_manifest(doc)
    [error] = exc.value.errors
    assert error.path == "spec.accelerator.topology"
    assert "topology applies only to TPU accelerators" in error.message


def test_snake_case_keys_are_unknown_fields_as_on_the_apiserver() -> None:
    doc = bert()
    doc["spec"]["accelerator"]["per_worker"] = doc["spec"]["accelerator"].pop("perWorker")
    with pytest.raises(ManifestError) as exc:
        parse_manifest(doc)
    assert {e.path for e in exc.value.errors} == {
        "spec.accelerator.per_worker",  # unknown
        "spec.accelerator.perWorker",  # so the real one is missing
    }


def test_python_code_may_build_specs_by_attribute_name() -> None:
    spec = TrainingJobSpec.model_validate(parse_manifest(bert()).spec.model_dump())
    assert spec.accelerator.per_worker == 8
    again = TrainingJobSpec(**parse_manifest(bert()).spec.model_dump(by_alias=False))
    assert again == spec


def test_an_unknown_kind_and_a_missing_name_are_refused() -> None:
    with pytest.raises(ManifestError) as exc:
        parse_manifest({"apiVersion": "ringmaster.dev/v1alpha1", "kind": "Job", "spec": {}})
    assert {e.path for e in exc.value.errors} == {"kind", "metadata.name"}
    with pytest.raises(ManifestError, match="<root>"):
        parse_manifest(["not", "a", "mapping"])


def test_update_rules_apply_only_to_updates() -> None:
    old, new = bert(), bert()
    old["status"] = {"phase": "Running"}
    new["spec"]["workers"] = 16
    parse_manifest(new)  # a fine job on its own
    with pytest.raises(ManifestError, match=r"spec\.workers: workers cannot change while"):
        validate_update(old, new)
    new["spec"]["runPolicy"]["suspend"] = True
    assert validate_update(old, new).spec.workers == 16  # resizing a suspended job is fine
    new["spec"]["accelerator"]["type"] = "nvidia-a100-80gb"
    with pytest.raises(ManifestError, match=r"spec\.accelerator: accelerator is immutable"):
        validate_update(old, new)


def test_set_condition_moves_the_transition_time_only_when_the_status_changes() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    t1 = t0 + dt.timedelta(minutes=5)
    conditions = set_condition([], "Schedulable", "False", "NoCapacity", "gang does not fit", 1, t0)
    conditions = set_condition(conditions, "Ready", "False", "Waiting", now=t0)
    same = set_condition(conditions, "Schedulable", "False", "NoCapacity", "still", 2, t1)
    assert same[0].last_transition_time == t0 and same[0].observed_generation == 2
    assert [c.type for c in same] == ["Schedulable", "Ready"]
    flipped = set_condition(same, "Schedulable", "True", "Placed", "", 2, t1)
    assert flipped[0].last_transition_time == t1
    assert flipped[0].to_k8s()["lastTransitionTime"] == "2026-01-01T00:05:00Z"


def test_status_models_read_what_the_cluster_returns() -> None:
    status = api.TrainingJobStatus.model_validate(
        {
            "phase": "Running",
            "plan": {"strategy": "ReductionServer", "stepSeconds": 0.41, "busBandwidthGBps": 90},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "AllWorkersRunning", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}
            ],
            "someFieldOfANewerOperator": 1,
        }
    )  # fmt: skip
    assert status.plan is not None and status.plan.step_seconds == 0.41
    # The engine's extra figures survive a round trip (plan preserves unknown fields).
    assert status.to_k8s()["plan"]["busBandwidthGBps"] == 90
    assert status.conditions[0].observed_generation == 3
