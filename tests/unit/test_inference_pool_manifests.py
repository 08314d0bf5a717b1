"""The Gateway API Inference Extension's builders (manifests/inference_pool.py), checked against a
structural copy of the pinned CRDs' schemas (no cluster, no cache).

POOL_SPEC and OBJECTIVE_SPEC below are the ``spec`` schemas of the v1.5.0 CRDs
(config/crd/bases/inference.networking.k8s.io_inferencepools.yaml and
inference.networking.x-k8s.io_inferenceobjectives.yaml of sigs.k8s.io/gateway-api-inference-
extension, GIE_VERSION in tools/versions.env) without their descriptions; their two CEL rules
are written out in :func:`pool_rule_violations`. The apiserver's own validation against the
real CRDs is tests/e2e/test_inference_pool_crds.py; refresh these copies when the pin moves.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ringmaster.manifests.inference_pool import (
    APP_PROTOCOL_H2C,
    FAIL_CLOSE,
    FAIL_OPEN,
    INFERENCE_OBJECTIVE_API_VERSION,
    INFERENCE_OBJECTIVE_CRD,
    INFERENCE_OBJECTIVE_GROUP,
    INFERENCE_OBJECTIVE_KIND,
    INFERENCE_OBJECTIVE_PLURAL,
    INFERENCE_OBJECTIVE_VERSION,
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_CRD,
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_KIND,
    INFERENCE_POOL_PLURAL,
    INFERENCE_POOL_VERSION,
    EndpointPicker,
    inference_objective,
    inference_pool,
)
from ringmaster.manifests.naming import MANAGED_BY, OPERATOR

GROUP_PATTERN = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KIND_PATTERN = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
PORT = {
    "type": "object",
    "required": ["number"],
    "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}},
}
GROUP = {"type": "string", "maxLength": 253, "pattern": GROUP_PATTERN}
KIND = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": KIND_PATTERN}
NAME = {"type": "string", "minLength": 1, "maxLength": 253}

POOL_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["endpointPickerRef", "selector", "targetPorts"],
    "properties": {
        "appProtocol": {"type": "string", "enum": ["http", "kubernetes.io/h2c"]},
        "endpointPickerRef": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "failureMode": {"type": "string", "enum": ["FailOpen", "FailClose"]},
                "group": {**GROUP, "minLength": 0},
                "kind": KIND,
                "name": NAME,
                "port": PORT,
            },
        },
        "selector": {
            "type": "object",
            "required": ["matchLabels"],
            "properties": {
                "matchLabels": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 64,
                    "additionalProperties": {
                        "type": "string",
                        "minLength": 0,
                        "maxLength": 63,
                        "pattern": LABEL_VALUE_PATTERN,
                    },
                }
            },
        },
        "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "items": PORT},
    },
}
# The CRD's defaults: the builder writes each out (so a read-back equals what it built).
POOL_DEFAULTS = {
    ("appProtocol",): "http",
    ("endpointPickerRef", "group"): "",
    ("endpointPickerRef", "kind"): "Service",
    ("endpointPickerRef", "failureMode"): "FailClose",
}

OBJECTIVE_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["poolRef"],
    "properties": {
        "poolRef": {
            "type": "object",
            "required": ["name"],
            "properties": {"group": GROUP, "kind": KIND, "name": NAME},
        },
        "priority": {"type": "integer"},
    },
}
OBJECTIVE_DEFAULTS = {
    ("poolRef", "group"): "inference.networking.k8s.io",
    ("poolRef", "kind"): "InferencePool",
}

TYPES: dict[str, Any] = {  # not dict[str, type]: mypy would narrow `value` to object
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
}


def out_of_bounds(count: int, schema: dict[str, Any], low: str, high: str) -> bool:
    return count < schema.get(low, 0) or count > schema.get(high, count)


def schema_violations(value: Any, schema: dict[str, Any], path: str = "spec") -> list[str]:
    """What a structural schema (the subset of OpenAPI v3 these CRDs use) refuses in ``value``,
    each as "path: why". Unknown fields count: the apiserver would prune them silently (or
    refuse them, with fieldValidation=Strict), and a misspelt field is a bug either way."""
    expected = schema["type"]
    # bool is an int to Python, never an integer to the apiserver.
    if not isinstance(value, TYPES[expected]) or (
        expected == "integer" and isinstance(value, bool)
    ):
        return [f"{path}: {value!r} is not {expected}"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: {value} < {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        problems.append(f"{path}: {value} > {schema['maximum']}")
    if expected == "string":
        if out_of_bounds(len(value), schema, "minLength", "maxLength"):
            problems.append(f"{path}: length {len(value)} out of bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if expected == "array":
        if out_of_bounds(len(value), schema, "minItems", "maxItems"):
            problems.append(f"{path}: {len(value)} items out of bounds")
        for i, item in enumerate(value):
            problems += schema_violations(item, schema["items"], f"{path}[{i}]")
    if expected == "object":
        if out_of_bounds(len(value), schema, "minProperties", "maxProperties"):
            problems.append(f"{path}: {len(value)} properties out of bounds")
        problems += [
            f"{path}.{key}: required" for key in schema.get("required", ()) if key not in value
        ]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                problems += schema_violations(item, properties[key], f"{path}.{key}")
            elif "additionalProperties" in schema:
                problems += schema_violations(item, schema["additionalProperties"], f"{path}.{key}")
            else:
                problems.append(f"{path}.{key}: unknown field")
    return problems


def pool_rule_violations(spec: dict[str, Any]) -> list[str]:
    """The pool CRD's two CEL rules (x-kubernetes-validations)."""
    problems = []
    numbers = [p["number"] for p in spec.get("targetPorts", [])]
    if len(set(numbers)) != len(numbers):
        problems.append("spec.targetPorts: port number must be unique")
    picker = spec.get("endpointPickerRef")  # the rule is on the field: none without it
    if picker is not None and picker.get("kind", "Service") == "Service" and "port" not in picker:
        problems.append("spec.endpointPickerRef: port is required when kind is 'Service'")
    return problems


def pool_violations(pool: dict[str, Any]) -> list[str]:
    return schema_violations(pool["spec"], POOL_SPEC) + pool_rule_violations(pool["spec"])


def at(document: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


PICKER = EndpointPicker(service="llama-epp", port=9002)
SERVER_LABELS = {"ringmaster.dev/inferenceendpoint": "llama", "ringmaster.dev/role": "server"}
OWNER = {
    "apiVersion": "ringmaster.dev/v1alpha1",
    "kind": "InferenceEndpoint",
    "name": "llama",
    "uid": "0b5c7c4e-1111-2222-3333-444455556666",
    "controller": True,
    "blockOwnerDeletion": True,
}


def a_pool(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "name": "llama",
        "namespace": "serving",
        "match_labels": SERVER_LABELS,
        "target_port": 8000,
        "endpoint_picker": PICKER,
        **overrides,
    }
    return inference_pool(**arguments)


def test_constants_name_the_served_apis() -> None:
    assert INFERENCE_POOL_API_VERSION == "inference.networking.k8s.io/v1"
    assert (INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION) == ("inference.networking.k8s.io", "v1")
    assert (INFERENCE_POOL_KIND, INFERENCE_POOL_PLURAL) == ("InferencePool", "inferencepools")
    assert INFERENCE_POOL_CRD == "inferencepools.inference.networking.k8s.io"
    assert INFERENCE_OBJECTIVE_API_VERSION == "inference.networking.x-k8s.io/v1alpha2"
    assert (INFERENCE_OBJECTIVE_GROUP, INFERENCE_OBJECTIVE_VERSION) == (
        "inference.networking.x-k8s.io",
        "v1alpha2",
    )
    assert INFERENCE_OBJECTIVE_KIND == "InferenceObjective"
    assert INFERENCE_OBJECTIVE_PLURAL == "inferenceobjectives"
    assert INFERENCE_OBJECTIVE_CRD == "inferenceobjectives.inference.networking.x-k8s.io"


def test_a_pool_fits_the_crd_schema_and_names_its_pods_port_and_picker() -> None:
    pool = a_pool()
    assert pool_violations(pool) == []
    assert pool["apiVersion"] == INFERENCE_POOL_API_VERSION
    assert pool["kind"] == "InferencePool"
    assert pool["metadata"]["name"] == "llama"
    assert pool["metadata"]["namespace"] == "serving"
    assert pool["spec"]["selector"] == {"matchLabels": SERVER_LABELS}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "llama-epp",
        "port": {"number": 9002},
        "failureMode": FAIL_CLOSE,
    }


def test_a_pool_writes_out_every_default_of_the_crd() -> None:
    pool = a_pool()
    for path, default in POOL_DEFAULTS.items():
        assert at(pool["spec"], path) == default, path


def test_a_pool_without_its_endpoint_picker_is_refused_by_the_v1_5_schema() -> None:
    """Why the builder takes the picker as a required argument."""
    pool = a_pool()
    del pool["spec"]["endpointPickerRef"]
    assert pool_violations(pool) == ["spec.endpointPickerRef: required"]
    with pytest.raises(TypeError):
        inference_pool("llama", "serving", SERVER_LABELS, 8000)  # type: ignore[call-arg]


def test_a_pool_fails_open_and_speaks_h2c_when_asked() -> None:
    pool = a_pool(
        endpoint_picker=EndpointPicker("epp", 9002, failure_mode=FAIL_OPEN),
        app_protocol=APP_PROTOCOL_H2C,
    )
    assert pool_violations(pool) == []
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"
    assert pool["spec"]["appProtocol"] == "kubernetes.io/h2c"


def test_a_pool_carries_its_owner_and_the_operators_labels_beside_the_callers() -> None:
    owner = dict(OWNER)
    pool = a_pool(owner=owner, labels={"team": "llm"})
    assert pool["metadata"]["ownerReferences"] == [OWNER]
    owner["name"] = "changed"  # the pool holds a copy
    assert pool["metadata"]["ownerReferences"][0]["name"] == "llama"
    labels = pool["metadata"]["labels"]
    assert labels["team"] == "llm"
    assert labels[MANAGED_BY] == OPERATOR
    assert labels["app.kubernetes.io/component"] == "inference-pool"
    assert "ownerReferences" not in a_pool()["metadata"]


def test_the_selector_is_a_copy_of_the_callers_labels() -> None:
    labels = dict(SERVER_LABELS)
    pool = a_pool(match_labels=labels)
    labels["ringmaster.dev/role"] = "changed"
    assert pool["spec"]["selector"]["matchLabels"] == SERVER_LABELS


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"match_labels": {}}, "at least one label"),
        ({"match_labels": {f"k{i}": "v" for i in range(65)}}, "at most 64"),
        ({"match_labels": {"model": "llama 3"}}, "not a label value"),
        ({"match_labels": {"model": "x" * 64}}, "not a label value"),
        ({"target_port": 0}, "target port must be in 1..65535"),
        ({"target_port": 65536}, "target port must be in 1..65535"),
        ({"target_port": True}, "target port must be an integer"),
        ({"endpoint_picker": EndpointPicker("epp", 0)}, "picker's port must be in"),
        ({"endpoint_picker": EndpointPicker("", 9002)}, "Service name is required"),
        ({"endpoint_picker": EndpointPicker("epp", 9002, "Sometimes")}, "failure mode"),
        ({"app_protocol": "grpc"}, "app protocol"),
        ({"name": ""}, "a name and a namespace"),
        ({"namespace": ""}, "a name and a namespace"),
    ],
)
def test_the_builder_refuses_what_the_crd_refuses(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        a_pool(**overrides)


def test_the_structural_check_refuses_what_the_crd_refuses() -> None:
    """The check above is not vacuous: each mistake of this kind is found, at its field."""
    pool = a_pool()
    pool["spec"]["targetPorts"] = []
    assert pool_violations(pool) == ["spec.targetPorts: 0 items out of bounds"]
    pool = a_pool()
    pool["spec"]["endpointPickerRef"]["failureMode"] = "Sometimes"
    assert pool_violations(pool) == [
        "spec.endpointPickerRef.failureMode: 'Sometimes' not in ['FailOpen', 'FailClose']"
    ]
    pool = a_pool()
    pool["spec"]["targetPort"] = 8000
    assert pool_violations(pool) == ["spec.targetPort: unknown field"]
    pool = a_pool()
    pool["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8000}]
    assert pool_violations(pool) == ["spec.targetPorts: port number must be unique"]
    pool = a_pool()
    del pool["spec"]["endpointPickerRef"]["port"]
    assert pool_violations(pool) == [
        "spec.endpointPickerRef: port is required when kind is 'Service'"
    ]
    pool = a_pool()
    pool["spec"]["selector"]["matchLabels"] = {"model": "llama 3"}
    [problem] = pool_violations(pool)
    assert problem.startswith("spec.selector.matchLabels.model: 'llama 3' does not match")


@pytest.mark.parametrize("priority", [10, 0, -10])
def test_an_objective_fits_the_crd_schema_and_names_its_pool_and_priority(priority: int) -> None:
    objective = inference_objective("llama-interactive", "serving", "llama", priority)
    assert schema_violations(objective["spec"], OBJECTIVE_SPEC) == []
    assert objective["apiVersion"] == INFERENCE_OBJECTIVE_API_VERSION
    assert objective["kind"] == "InferenceObjective"
    assert objective["metadata"]["name"] == "llama-interactive"
    assert objective["metadata"]["namespace"] == "serving"
    assert objective["metadata"]["labels"]["app.kubernetes.io/component"] == "inference-objective"
    assert objective["spec"] == {
        "poolRef": {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": "llama",
        },
        "priority": priority,
    }
    for path, default in OBJECTIVE_DEFAULTS.items():
        assert at(objective["spec"], path) == default, path


def test_an_objective_without_a_priority_leaves_it_to_the_picker() -> None:
    objective = inference_objective("llama-batch", "serving", "llama", None, owner=OWNER)
    assert "priority" not in objective["spec"]
    assert schema_violations(objective["spec"], OBJECTIVE_SPEC) == []
    assert objective["metadata"]["ownerReferences"] == [OWNER]


@pytest.mark.parametrize(
    ("pool", "priority", "message"),
    [("", 1, "names its InferencePool"), ("llama", "high", "integer"), ("llama", True, "integer")],
)
def test_an_objective_refuses_no_pool_and_a_priority_that_is_no_integer(
    pool: str, priority: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        inference_objective("o", "serving", pool, priority)
