"""What every controller needs to know of the cluster: its nodes and what pods have taken of them.

kopf indexes (in-memory caches fed by watches) that all controllers share; kopf hands every index
to every handler as a keyword argument, and a controller keeps the mapping (see bind()).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import kopf

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
