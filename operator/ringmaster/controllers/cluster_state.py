"""What every controller needs to know of the cluster: its nodes and what pods have taken of them.

kopf indexes (in-memory caches fed by watches) that all controllers share; kopf hands every index
to every handler as a keyword argument, and a controller keeps the mapping (see bind()).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import kopf

from ringmaster.admission.snapshot import PodFacts, shape
from ringmaster.manifests.naming import (
    ATTEMPT_ANNOTATION,
    MANAGED_BY,
    OPERATOR,
    REDUCTION_POOL_LABEL,
    ROLE_LABEL,
    TRAINING_JOB_LABEL,
)
from ringmaster.placement.labels import INSTANCE_TYPE_KEYS, POOL_NAME_KEYS
from ringmaster.placement.pools import (
    TERMINAL_PHASES,
    Node,
    NodePool,
    discover_pools,
    node_from_object,
    pod_requests,
)


@kopf.index("nodes")
def ringmaster_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, Node]:
    return {name: node_from_object(body)}


@kopf.index("pods")
def ringmaster_pod_usage(
    body: kopf.Body, spec: kopf.Spec, status: kopf.Status, **_: Any
) -> dict[str, dict[str, Decimal]]:
    """Requests of every pod bound to a node and not finished: what the nodes have given away.

    An empty mapping, not None, for the others: kopf keeps an object's previous entries when an
    indexing function returns None, so a pod that finished would go on holding its node."""
    node = spec.get("nodeName")
    if not node or status.get("phase") in TERMINAL_PHASES:
        return {}
    return {node: pod_requests(body)}


def pools_and_usage(
    indexes: Mapping[str, Any],
) -> tuple[dict[str, NodePool], dict[str, dict[str, Decimal]]]:
    """The node pools and, per node, the requests of the pods bound to it."""
    nodes = [n for store in indexes["ringmaster_nodes"].values() for n in store]
    used: dict[str, dict[str, Decimal]] = {}
    for node, store in indexes["ringmaster_pod_usage"].items():
        bucket = used.setdefault(node, {})
        for requests in store:
            for resource, amount in requests.items():
                bucket[resource] = bucket.get(resource, Decimal(0)) + amount
    return discover_pools(nodes), used


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """What admission needs of a pod: its requests, where it is or is headed, whose it is."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = metadata.get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    namespace = metadata.get("namespace") or ""
    ours = labels.get(MANAGED_BY) == OPERATOR
    role = labels.get(ROLE_LABEL) if ours else None
    job = labels.get(TRAINING_JOB_LABEL) if role == "worker" else None
    reducer_pool = labels.get(REDUCTION_POOL_LABEL) if role == "reducer" else None
    try:
        attempt = int((metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION, 0))
    except ValueError:
        attempt = 0
    return PodFacts(
        namespace=namespace,
        name=metadata["name"],
        requests=shape(pod_requests(pod)),
        node=spec.get("nodeName") or None,
        active=(pod.get("status") or {}).get("phase") not in TERMINAL_PHASES,
        terminating=bool(metadata.get("deletionTimestamp")),
        pool=next((selector[k] for k in POOL_NAME_KEYS if k in selector), None),
        machine=next((selector[k] for k in INSTANCE_TYPE_KEYS if k in selector), None),
        job=(namespace, job) if job else None,
        attempt=attempt,
        reducer_pool=(namespace, reducer_pool) if reducer_pool else None,
    )


@kopf.index("pods")
def ringmaster_pod_facts(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> Any:
    """Every pod as admission sees it: what the admission snapshot starts from."""
    return {(namespace or "", name): pod_facts(body)}
