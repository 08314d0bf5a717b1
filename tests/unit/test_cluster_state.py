"""What the inference controller reads of the cluster: pools, and what bound pods have taken."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ringmaster.controllers.cluster_state import pod_facts, pools_and_usage
from ringmaster.placement.pools import node_from_object
from tests.unit.training_world import node_objects

pytestmark = pytest.mark.unit


def pod(name: str, node: str | None, gpus: str, phase: str = "Running") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": phase},
    }


def test_usage_counts_bound_unfinished_pods_once_per_node():
    nodes = [node_from_object(n) for n in node_objects({"a100-highgpu-8g": 2})]
    first, second = (n.name for n in nodes)
    pods = [
        pod("a", first, "4"),
        pod("b", first, "2"),
        pod("done", first, "8", phase="Succeeded"),
        pod("unbound", None, "8", phase="Pending"),
        pod("c", second, "8"),
    ]
    indexes = {
        "ringmaster_nodes": {n.name: [n] for n in nodes},
        "ringmaster_pod_facts": {("ml", p["metadata"]["name"]): [pod_facts(p)] for p in pods},
    }
    pools, used = pools_and_usage(indexes)
    assert set(pools) == {"a100-highgpu-8g"}
    assert used == {
        first: {"nvidia.com/gpu": Decimal(6)},
        second: {"nvidia.com/gpu": Decimal(8)},
    }
