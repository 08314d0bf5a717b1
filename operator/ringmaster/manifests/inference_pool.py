"""The Gateway API Inference Extension's objects: an InferencePool (the model-server pods that a
Gateway's Endpoint Picker routes requests among) and an InferenceObjective (a priority for the
requests that name it, within one pool).

Pure builders: no client, no I/O. Field names, required fields and bounds are those of the release
pinned in tools/versions.env (GIE_VERSION=1.5.0): api/v1/inferencepool_types.go and
apix/v1alpha2/inferenceobjective_types.go of sigs.k8s.io/gateway-api-inference-extension, and the
CRDs generated from them (config/crd/bases), which hack/cluster-tools.sh copies into the bin
directory and `ringmaster cluster up --gie` installs. The builders refuse, with ValueError, what
those CRDs would refuse, so a caller learns it before a request.

The CRDs are not part of every cluster: a controller checks that they are served (the group,
version and plural below, e.g. through the discovery API) before it creates either object.

Every field the CRDs default is written out (appProtocol, the picker's group, kind and
failureMode, the pool reference's group and kind): the object read back then equals the object
built, so comparing the two shows a real change and never the apiserver's defaults.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringmaster.manifests.naming import common_labels

# InferencePool: GA, in the Gateway API's own group (api/v1).
INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_VERSION = "v1"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/{INFERENCE_POOL_VERSION}"
INFERENCE_POOL_KIND = "InferencePool"
INFERENCE_POOL_PLURAL = "inferencepools"
INFERENCE_POOL_CRD = f"{INFERENCE_POOL_PLURAL}.{INFERENCE_POOL_GROUP}"

# InferenceObjective: alpha, in the experimental x-k8s.io group (apix/v1alpha2). GIE v1.6.0
# moved it out of this module (to llm-d/llm-d-router): a cluster may serve InferencePool and
# not this, so a controller checks for each CRD on its own.
INFERENCE_OBJECTIVE_GROUP = "inference.networking.x-k8s.io"
INFERENCE_OBJECTIVE_VERSION = "v1alpha2"
INFERENCE_OBJECTIVE_API_VERSION = f"{INFERENCE_OBJECTIVE_GROUP}/{INFERENCE_OBJECTIVE_VERSION}"
INFERENCE_OBJECTIVE_KIND = "InferenceObjective"
INFERENCE_OBJECTIVE_PLURAL = "inferenceobjectives"
INFERENCE_OBJECTIVE_CRD = f"{INFERENCE_OBJECTIVE_PLURAL}.{INFERENCE_OBJECTIVE_GROUP}"

# endpointPickerRef.failureMode: what the Gateway does while the picker does not answer: send
# the request to an endpoint of its own choosing (FailOpen) or drop it (FailClose, the default).
FAIL_OPEN = "FailOpen"
FAIL_CLOSE = "FailClose"
FAILURE_MODES = (FAIL_OPEN, FAIL_CLOSE)
# spec.appProtocol of the target ports: HTTP/1.1 (the default) or HTTP/2 over cleartext (gRPC).
APP_PROTOCOL_HTTP = "http"
APP_PROTOCOL_H2C = "kubernetes.io/h2c"
APP_PROTOCOLS = (APP_PROTOCOL_HTTP, APP_PROTOCOL_H2C)
# The picker is a Service of the core group (the CRD's defaults); its `port` is then required.
ENDPOINT_PICKER_GROUP = ""
ENDPOINT_PICKER_KIND = "Service"
# The CRD's bounds: a port number, spec.selector.matchLabels' entries.
MIN_PORT, MAX_PORT = 1, 65535
MAX_MATCH_LABELS = 64
# A label value, as the CRD checks each of spec.selector.matchLabels' values (Kubernetes' own rule).
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_LABEL_VALUE_LENGTH = 63

POOL_COMPONENT = "inference-pool"
OBJECTIVE_COMPONENT = "inference-objective"


@dataclass(frozen=True)
class EndpointPicker:
    """The Endpoint Picker (EPP, an Envoy ext-proc server) a pool names: a Service in the pool's
    namespace and its port (the Service's port, not the pods' target port)."""

    service: str
    port: int
    failure_mode: str = FAIL_CLOSE


def _port(number: int, what: str) -> dict[str, int]:
    # bool is an int to Python, and the apiserver would refuse it as a port.
    if isinstance(number, bool) or not isinstance(number, int):
        raise ValueError(f"{what} must be an integer, not {number!r}")
    if not MIN_PORT <= number <= MAX_PORT:
        raise ValueError(f"{what} must be in {MIN_PORT}..{MAX_PORT}, not {number}")
    return {"number": number}


def _metadata(
    name: str,
    namespace: str,
    component: str,
    labels: Mapping[str, str] | None,
    owner: Mapping[str, Any] | None,
) -> dict[str, Any]:
    if not name or not namespace:
        raise ValueError(f"a name and a namespace are required (got {name!r} in {namespace!r})")
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**common_labels(component), **(labels or {})},
    }
    if owner is not None:
        metadata["ownerReferences"] = [copy.deepcopy(dict(owner))]
    return metadata


def inference_pool(
    name: str,
    namespace: str,
    match_labels: Mapping[str, str],
    target_port: int,
    endpoint_picker: EndpointPicker,
    *,
    app_protocol: str = APP_PROTOCOL_HTTP,
    owner: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An InferencePool (inference.networking.k8s.io/v1) of the pods in ``namespace`` that carry
    ``match_labels``, served on ``target_port``, routed by ``endpoint_picker``.

    The endpoint picker is required: at the pinned v1.5.0 the CRD lists ``endpointPickerRef`` in
    spec's ``required`` (with ``selector`` and ``targetPorts``), so the apiserver refuses a pool
    without one; a caller with no picker creates no pool (and says so in a condition). (From
    v1.6.0 the field is optional in the API, but most Gateway implementations still refuse such
    a pool: Accepted=False, reason EndpointPickerRefMissing.)

    ``owner``: an ownerReference (apiVersion, kind, name, uid, ...) so that the garbage
    collector deletes the pool with its owner; ``labels`` go beside the operator's own.
    Raises ValueError for what the CRD refuses: no match labels or more than 64, a value that is
    no label value, a port outside 1..65535, an unknown failure mode or application protocol.
    """
    if not match_labels:
        raise ValueError("an InferencePool selects its pods by at least one label")
    if len(match_labels) > MAX_MATCH_LABELS:
        raise ValueError(f"an InferencePool selects by at most {MAX_MATCH_LABELS} labels")
    for key, value in match_labels.items():
        if len(value) > MAX_LABEL_VALUE_LENGTH or not LABEL_VALUE.fullmatch(value):
            raise ValueError(f"{value!r} (label {key}) is not a label value")
    if not endpoint_picker.service:
        raise ValueError("the endpoint picker's Service name is required")
    failure_mode = endpoint_picker.failure_mode
    if failure_mode not in FAILURE_MODES:
        raise ValueError(f"failure mode {failure_mode!r} is not one of {', '.join(FAILURE_MODES)}")
    if app_protocol not in APP_PROTOCOLS:
        raise ValueError(f"app protocol {app_protocol!r} is not one of {', '.join(APP_PROTOCOLS)}")
    return {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": _metadata(name, namespace, POOL_COMPONENT, labels, owner),
        "spec": {
            "selector": {"matchLabels": dict(match_labels)},
            # One port: a model server listens on one; the CRD takes up to 8 (each a distinct
            # endpoint to the picker), for servers that run several engines per pod.
            "targetPorts": [_port(target_port, "the target port")],
            "appProtocol": app_protocol,
            "endpointPickerRef": {
                "group": ENDPOINT_PICKER_GROUP,
                "kind": ENDPOINT_PICKER_KIND,
                "name": endpoint_picker.service,
                "port": _port(endpoint_picker.port, "the endpoint picker's port"),
                "failureMode": failure_mode,
            },
        },
    }


def inference_objective(
    name: str,
    namespace: str,
    pool: str,
    priority: int | None,
    *,
    owner: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An InferenceObjective (inference.networking.x-k8s.io/v1alpha2) for the requests that name
    it, on the InferencePool ``pool`` of the same namespace (``spec.poolRef``, required).

    ``priority`` (optional in the API, any integer, negative too): under scarcity the picker's
    flow control serves higher priorities first; None leaves it out, which the picker treats as
    0. ``owner`` and ``labels`` as for :func:`inference_pool`.
    """
    if not pool:
        raise ValueError("an InferenceObjective names its InferencePool")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ValueError(f"the priority must be an integer, not {priority!r}")
    spec: dict[str, Any] = {
        "poolRef": {"group": INFERENCE_POOL_GROUP, "kind": INFERENCE_POOL_KIND, "name": pool}
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": INFERENCE_OBJECTIVE_API_VERSION,
        "kind": INFERENCE_OBJECTIVE_KIND,
        "metadata": _metadata(name, namespace, OBJECTIVE_COMPONENT, labels, owner),
        "spec": spec,
    }
