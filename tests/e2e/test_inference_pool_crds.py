"""The Gateway API Inference Extension's objects, as the builders make them
(manifests/inference_pool.py), against the real CRDs of the pinned release (GIE_VERSION in
tools/versions.env; `ringmaster cluster up --gie`, the `gie` fixture): the apiserver accepts what
the builders make, stores it as built (every default written out), and refuses a broken field
by name. The unit tests (tests/unit/test_inference_pool_manifests.py) check a structural copy of
the same schemas; these check the schemas themselves, CEL rules included.

Objects go through the kubernetes client with fieldValidation=Strict, so a field the CRD does
not know is refused rather than silently pruned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ringmaster.manifests.inference_pool import (
    INFERENCE_OBJECTIVE_CRD,
    INFERENCE_OBJECTIVE_GROUP,
    INFERENCE_OBJECTIVE_KIND,
    INFERENCE_OBJECTIVE_PLURAL,
    INFERENCE_OBJECTIVE_VERSION,
    INFERENCE_POOL_CRD,
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_KIND,
    INFERENCE_POOL_PLURAL,
    INFERENCE_POOL_VERSION,
    EndpointPicker,
    inference_objective,
    inference_pool,
)
from tests.e2e.kube import Cluster

SERVER_LABELS = {"ringmaster.dev/inferenceendpoint": "llama", "ringmaster.dev/role": "server"}
POOL = (INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION, INFERENCE_POOL_PLURAL)
OBJECTIVE = (INFERENCE_OBJECTIVE_GROUP, INFERENCE_OBJECTIVE_VERSION, INFERENCE_OBJECTIVE_PLURAL)


@pytest.fixture(scope="module")
def custom_objects(gie: Cluster) -> Iterator[client.CustomObjectsApi]:
    api_client = config.new_client_from_config(str(gie.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield client.CustomObjectsApi(api_client)
    finally:
        api_client.close()


def create(
    api: client.CustomObjectsApi,
    resource: tuple[str, str, str],
    namespace: str,
    body: dict[str, Any],
) -> dict[str, Any]:
    group, version, plural = resource
    created = api.create_namespaced_custom_object(
        group, version, namespace, plural, body, field_validation="Strict"
    )
    return cast(dict[str, Any], created)


def refusal(create_it: Callable[[], object]) -> tuple[int, str]:
    """The apiserver's status code and message for a request it must refuse."""
    with pytest.raises(ApiException) as raised:
        create_it()
    error = raised.value
    return error.status, json.loads(error.body or "{}").get("message", str(error))


def a_pool(namespace: str, **overrides: Any) -> dict[str, Any]:
    return inference_pool(
        overrides.pop("name", "llama"),
        namespace,
        SERVER_LABELS,
        8000,
        EndpointPicker(service="llama-epp", port=9002),
        **overrides,
    )


def test_the_crds_serve_the_apis_the_builders_name(gie: Cluster) -> None:
    for crd_name, group, version, kind, plural in (
        (
            INFERENCE_POOL_CRD,
            INFERENCE_POOL_GROUP,
            INFERENCE_POOL_VERSION,
            INFERENCE_POOL_KIND,
            INFERENCE_POOL_PLURAL,
        ),
        (
            INFERENCE_OBJECTIVE_CRD,
            INFERENCE_OBJECTIVE_GROUP,
            INFERENCE_OBJECTIVE_VERSION,
            INFERENCE_OBJECTIVE_KIND,
            INFERENCE_OBJECTIVE_PLURAL,
        ),
    ):
        crd = gie.get_json("crd", crd_name)
        assert crd["spec"]["group"] == group
        assert crd["spec"]["names"]["kind"] == kind
        assert crd["spec"]["names"]["plural"] == plural
        assert crd["spec"]["scope"] == "Namespaced"
        assert version in [v["name"] for v in crd["spec"]["versions"] if v["served"]]
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True", crd_name


def test_a_built_pool_and_objective_are_accepted_and_stored_as_built(
    gie: Cluster, namespace: str, custom_objects: client.CustomObjectsApi
) -> None:
    # A real owner: the garbage collector deletes an object whose owners are all gone.
    gie.kubectl("create", "configmap", "llama-owner", "-n", namespace)
    owner = gie.get_json("configmap", "llama-owner", "-n", namespace)["metadata"]
    owner_reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pool = a_pool(namespace, owner=owner_reference, labels={"team": "llm"})
    stored = create(custom_objects, POOL, namespace, pool)
    assert stored["spec"] == pool["spec"]  # nothing defaulted: the builder wrote it all out
    assert stored["metadata"]["ownerReferences"] == [owner_reference]
    assert stored["metadata"]["labels"] == pool["metadata"]["labels"]

    for name, priority in (("llama-interactive", 10), ("llama-batch", -5), ("llama-plain", None)):
        objective = inference_objective(name, namespace, "llama", priority)
        stored = create(custom_objects, OBJECTIVE, namespace, objective)
        assert stored["spec"] == objective["spec"], name


@pytest.mark.parametrize(
    ("mutate", "status", "fields"),
    [
        pytest.param(
            lambda spec: spec.update(targetPorts=[]),
            422,
            ["spec.targetPorts", "at least 1 items"],
            id="no-target-port",
        ),
        pytest.param(
            lambda spec: spec["endpointPickerRef"].update(failureMode="Sometimes"),
            422,
            ["spec.endpointPickerRef.failureMode", '"Sometimes"'],
            id="bad-failure-mode",
        ),
        pytest.param(
            lambda spec: spec.pop("endpointPickerRef"),
            422,
            ["spec.endpointPickerRef", "Required value"],
            id="no-endpoint-picker",
        ),
        pytest.param(
            lambda spec: spec.update(targetPorts=[{"number": 8000}, {"number": 8000}]),
            422,
            ["spec.targetPorts", "port number must be unique"],
            id="duplicate-port",
        ),
        pytest.param(
            lambda spec: spec["endpointPickerRef"].pop("port"),
            422,
            ["spec.endpointPickerRef", "port is required when kind is 'Service'"],
            id="picker-service-without-port",
        ),
        pytest.param(
            lambda spec: spec["selector"].update(matchLabels={}),
            422,
            ["spec.selector.matchLabels"],
            id="selects-nothing",
        ),
        pytest.param(
            lambda spec: spec.update(targetPort=8000),
            400,
            ['unknown field "spec.targetPort"'],
            id="unknown-field",
        ),
    ],
)
def test_a_broken_pool_is_refused_naming_its_field(
    gie: Cluster,
    namespace: str,
    custom_objects: client.CustomObjectsApi,
    mutate: Callable[[dict[str, Any]], None],
    status: int,
    fields: list[str],
) -> None:
    """``status``: 422 Invalid from the schema and its CEL rules, 400 BadRequest from strict
    field validation (the request does not decode into an InferencePool)."""
    pool = a_pool(namespace)
    mutate(pool["spec"])  # one mistake in what the builder made
    refused_with, message = refusal(lambda: create(custom_objects, POOL, namespace, pool))
    assert refused_with == status, message
    for field in fields:
        assert field in message, message


def test_an_objective_without_its_pool_is_refused(
    gie: Cluster, namespace: str, custom_objects: client.CustomObjectsApi
) -> None:
    objective = inference_objective("orphan", namespace, "llama", 1)
    del objective["spec"]["poolRef"]
    status, message = refusal(lambda: create(custom_objects, OBJECTIVE, namespace, objective))
    assert status == 422, message
    assert "spec.poolRef" in message and "Required value" in message, message
