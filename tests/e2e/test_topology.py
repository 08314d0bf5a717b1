"""Topology inside a pool on the real control plane (issue 43): a gang is packed into one block
of its pool when one holds it; one that requires a block waits, with the free hosts per block;
one that prefers it is admitted spread; and status.admission names the blocks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ringmaster.placement.topology import GKE_BLOCK
from tests.e2e.kube import Cluster, wait_for
from tests.e2e.test_trainingjob import condition, job, training_job, wait_phase, worker_pods

pytestmark = pytest.mark.e2e

POOL = "a100-ultragpu-8g"  # 4 hosts of 8 x A100 80GB


def hosts(cluster: Cluster) -> list[str]:
    selector = f"cloud.google.com/gke-nodepool={POOL}"
    return sorted(n["metadata"]["name"] for n in cluster.get_json("nodes", "-l", selector)["items"])


@pytest.fixture
def two_blocks(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The pool's first two hosts in block b0, the other two in b1 (as GKE labels them)."""
    names = hosts(cluster)
    block = {name: f"b{i // 2}" for i, name in enumerate(names)}
    for name, value in block.items():
        cluster.kubectl("label", "node", name, f"{GKE_BLOCK}={value}", "--overwrite")
    yield block
    cluster.kubectl("label", "node", *names, f"{GKE_BLOCK}-", check=False)


def gang(name: str, workers: int, topology: str | None = None) -> dict[str, Any]:
    manifest = training_job(
        name, workers, machine_type="a2-ultragpu-8g", exit_code=0, run_for="600s"
    )
    manifest["spec"]["accelerator"]["type"] = "nvidia-a100-80gb"
    if topology:
        manifest["spec"]["placement"] = {"topology": topology}
    return manifest


def busy_pod(name: str, node: str) -> dict[str, Any]:
    """A user's pod bound to one host, taking all its GPUs."""
    limits = {"nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "busy:1", "resources": {"limits": limits}}],
        },
    }


def too_big_waits(cluster: Cluster, ns: str) -> dict[str, Any]:
    """A 3-host gang that requires one block of 2 hosts: its waiting condition. The operator
    sees the fixture's labels a moment after they are set (its node watch): a gang decided
    before that was admitted without them, and is tried again."""
    for _ in range(10):
        cluster.apply(gang("too-big", 3, "Required"), ns)
        decided = wait_for(
            lambda: (
                (c := condition(job(cluster, ns, "too-big"), "Schedulable"))
                and c["reason"] in ("TopologyUnavailable", "Admitted")
                and c
            ),
            timeout=60,
            what="the 3-host gang decided",
        )
        if decided["reason"] == "TopologyUnavailable":
            return decided
        cluster.kubectl("delete", "trainingjob", "too-big", "-n", ns, "--wait=true")
        wait_for(lambda: not worker_pods(cluster, ns, "too-big"), timeout=60, what="pods gone")
    raise AssertionError("the operator never saw the pool's blocks")


def blocks_of(cluster: Cluster, ns: str, name: str, block: dict[str, str]) -> set[str]:
    return {block[p["spec"]["nodeName"]] for p in worker_pods(cluster, ns, name)}


def test_a_gang_is_packed_into_one_block_and_a_required_block_is_waited_for(
    operator: Any, cluster: Cluster, quiet_namespace: str, two_blocks: dict[str, str]
) -> None:
    ns = quiet_namespace
    # A gang no block can hold, required in one: it waits, with the blocks' numbers.
    waiting = too_big_waits(cluster, ns)
    assert "needs 3 hosts of pool a100-ultragpu-8g in one block" in waiting["message"]
    assert "block b0: 2 free, b1: 2" in waiting["message"]
    cluster.kubectl("delete", "trainingjob", "too-big", "-n", ns, "--wait=true")
    cluster.apply(gang("packed", 2), ns)
    wait_phase(cluster, ns, "packed", "Running", timeout=60)
    assert len(blocks_of(cluster, ns, "packed", two_blocks)) == 1
    admission = job(cluster, ns, "packed")["status"]["admission"]
    assert admission["blocks"] == sorted(blocks_of(cluster, ns, "packed", two_blocks))
    cluster.kubectl("delete", "trainingjob", "packed", "-n", ns, "--wait=true")
    wait_for(lambda: not worker_pods(cluster, ns, "packed"), timeout=60, what="its pods gone")

    # One host of each block busy: 1 free in each.
    names = hosts(cluster)
    cluster.apply(busy_pod("busy-b0", names[0]), ns)
    cluster.apply(busy_pod("busy-b1", names[2]), ns)
    cluster.apply(gang("required", 2, "Required"), ns)
    waiting = wait_for(
        lambda: (
            (c := condition(job(cluster, ns, "required"), "Schedulable"))
            and c["reason"] == "TopologyUnavailable"
            and c
        ),
        timeout=60,
        what="the Required gang to wait for a block",
    )
    assert "needs 2 hosts of pool a100-ultragpu-8g in one block" in waiting["message"]
    assert "b0: 1 free, b1: 1" in waiting["message"]
    cluster.apply(gang("preferred", 2, "Preferred"), ns)
    wait_phase(cluster, ns, "preferred", "Running", timeout=60)
    assert blocks_of(cluster, ns, "preferred", two_blocks) == {"b0", "b1"}
    # Room in one block again: the Required gang goes there.
    cluster.kubectl("delete", "trainingjob", "preferred", "-n", ns, "--wait=true")
    cluster.kubectl("delete", "pod", "busy-b1", "-n", ns, "--grace-period=0", "--wait=true")
    wait_phase(cluster, ns, "required", "Running", timeout=90)
    assert blocks_of(cluster, ns, "required", two_blocks) == {"b1"}
