"""What the inference controller reads of the cluster: pools, and what bound pods have taken."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from ringmaster.controllers.cluster_state import (
    indexed_pod,
    pod_facts,
    pod_index_key,
    pools_and_usage,
    ringmaster_pods,
    worker_pods,
)
from ringmaster.manifests.naming import MANAGED_BY, OPERATOR, ROLE_LABEL, TRAINING_JOB_LABEL
from ringmaster.manifests.training import pinned_host, pinned_to
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
        "ringmaster_pods": {("ml", p["metadata"]["name"], None): [indexed_pod(p)] for p in pods},
    }
    pools, used = pools_and_usage(indexes)
    assert set(pools) == {"a100-highgpu-8g"}
    assert used == {
        first: {"nvidia.com/gpu": Decimal(6)},
        second: {"nvidia.com/gpu": Decimal(8)},
    }


def worker(name: str, job: str, node: str | None) -> dict:
    body = pod(name, node, "8")
    body["metadata"]["labels"] = {
        MANAGED_BY: OPERATOR,
        ROLE_LABEL: "worker",
        TRAINING_JOB_LABEL: job,
    }
    return body


def test_one_pod_index_serves_admission_and_each_jobs_workers():
    """A job's workers are filed under the job's key (its look reads them there); every pod,
    worker or not, counts in the nodes' usage once."""
    nodes = [node_from_object(n) for n in node_objects({"a100-highgpu-8g": 2})]
    first, second = (n.name for n in nodes)
    bodies = [worker("a-0", "a", first), worker("a-1", "a", second), pod("a", second, "0")]
    indexes = {"ringmaster_nodes": {n.name: [n] for n in nodes}, "ringmaster_pods": {}}
    for body in bodies:
        ((key, entry),) = asyncio.run(ringmaster_pods(body=body)).items()
        assert key == pod_index_key(entry.facts)
        indexes["ringmaster_pods"].setdefault(key, []).append(entry)
    # A pod named like the job is not one of its workers.
    assert set(indexes["ringmaster_pods"]) == {("ml", "a"), ("ml", "a", None)}
    assert [w.name for w in worker_pods(indexes, ("ml", "a"))] == ["a-0", "a-1"]
    assert worker_pods(indexes, ("ml", "b")) == []
    assert indexed_pod(bodies[2]).worker is None
    _, used = pools_and_usage(indexes)
    assert used == {first: {"nvidia.com/gpu": Decimal(8)}, second: {"nvidia.com/gpu": Decimal(8)}}


def test_a_pod_version_is_parsed_once_and_a_new_version_again():
    """The index and the event handler share one parse of the same version; a new version
    (another resourceVersion, or another pod) is parsed anew."""
    body = worker("a-0", "a", "node-1")
    body["metadata"].update(uid="u-1", resourceVersion="7")
    first = indexed_pod(body)
    assert indexed_pod(body) is first
    finished = {**body, "status": {"phase": "Succeeded"}}
    finished["metadata"] = {**body["metadata"], "resourceVersion": "8"}
    again = indexed_pod(finished)
    assert again is not first and not again.facts.active
    other = {**finished, "metadata": {**finished["metadata"], "uid": "u-2", "name": "a-1"}}
    assert indexed_pod(other).facts.name == "a-1"


def test_a_pod_pinned_by_name_is_headed_to_that_host_and_no_other_affinity_counts():
    pinned = pod("w", None, "8")
    pinned["spec"]["affinity"] = pinned_to("h-7")
    assert pod_facts(pinned).pinned == "h-7" and pod_facts(pinned).host == "h-7"
    assert pinned_host(pinned["spec"]) == "h-7"
    # Two hosts, a label expression, or a second term: not a pin to one host.
    term = pinned["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    term["nodeSelectorTerms"][0]["matchFields"][0]["values"] = ["h-7", "h-8"]
    assert pod_facts(pinned).pinned is None
    term["nodeSelectorTerms"] = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    ]
    assert pod_facts(pinned).pinned is None
    assert pod_facts(pod("free", None, "8")).pinned is None
