"""Topology inside a pool on the real control plane (issue 43): a gang is packed into one block
of its pool when one holds it; one that requires a block waits, with the free hosts per block;
one that prefers it is admitted spread; and status.admission names the blocks. On GB200 NVL72
trays labelled as the local cluster labels them (localcluster/pools.py), a job whose
tensor-parallel groups span trays waits for, then gets, trays of one NVLink clique."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from ringmaster.localcluster.pools import POOLS_BY_NAME, node_manifest
from ringmaster.manifests.naming import RANK_LABEL
from ringmaster.placement.topology import GKE_BLOCK, NVLINK_CLIQUE
from tests.e2e.kube import Cluster, wait_for
from tests.e2e.test_trainingjob import condition, job, training_job, wait_phase, worker_pods

pytestmark = pytest.mark.e2e

POOL = "a100-ultragpu-8g"  # 4 hosts of 8 x A100 80GB


def hosts(cluster: Cluster) -> list[str]:
    selector = f"cloud.google.com/gke-nodepool={POOL}"
    return sorted(n["metadata"]["name"] for n in cluster.get_json("nodes", "-l", selector)["items"])


def blocks_now(cluster: Cluster) -> dict[str, str | None]:
    """Each host of the pool and its GKE block label (None: unlabelled)."""
    selector = f"cloud.google.com/gke-nodepool={POOL}"
    nodes = cluster.get_json("nodes", "-l", selector)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(GKE_BLOCK) for n in nodes}


def relabel_blocks(cluster: Cluster, blocks: Mapping[str, str | None]) -> None:
    """Set each host's GKE block label (None: remove it)."""
    for name, value in blocks.items():
        label = f"{GKE_BLOCK}={value}" if value is not None else f"{GKE_BLOCK}-"
        cluster.kubectl("label", "node", name, label, "--overwrite", check=value is not None)


@pytest.fixture
def two_blocks(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The pool's first two hosts in block b0, the other two in b1 (as GKE labels them); the
    pool's own blocks back afterwards. The local pool comes in one block of its 4 hosts
    (localcluster/pools.py: blocks of 16), which would hold every gang here."""
    own = blocks_now(cluster)
    block = {name: f"b{i // 2}" for i, name in enumerate(sorted(own))}
    relabel_blocks(cluster, block)
    try:
        yield block
    finally:
        relabel_blocks(cluster, own)


def gang(name: str, workers: int, topology: str | None = None) -> dict[str, Any]:
    manifest = training_job(
        name, workers, machine_type="a2-ultragpu-8g", exit_code=0, run_for="600s"
    )
    manifest["spec"]["accelerator"]["type"] = "nvidia-a100-80gb"
    if topology:
        manifest["spec"]["placement"] = {"topology": topology}
    return manifest


def busy_pod(name: str, node: str, gpus: int = 8) -> dict[str, Any]:
    """A user's pod bound to one host, taking all its GPUs."""
    limits = {"nvidia.com/gpu": str(gpus)}
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


# --- GB200 NVL72 trays ----------------------------------------------------------------------------

GB200 = POOLS_BY_NAME["gb200-nvl72"]
# Trays 16-21 of the pool as `ringmaster cluster up --pool gb200-nvl72=22` labels them: 16-17 the
# end of the first NVL72 rack (clique .0), 18-21 the start of the second (clique .1).
TRAYS = range(16, 22)


def tray(i: int) -> str:
    return f"{GB200.name}-{i:04d}"


@pytest.fixture
def nvl72_trays(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The GB200 trays above, added to the cluster for this test; name -> NVLink clique."""
    nodes = [node_manifest(GB200, i) for i in TRAYS]
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": nodes})
    names = [n["metadata"]["name"] for n in nodes]
    try:
        cluster.kubectl("wait", "--for=condition=Ready", "node", *names, "--timeout=120s")
        yield {n["metadata"]["name"]: n["metadata"]["labels"][NVLINK_CLIQUE] for n in nodes}
    finally:
        cluster.kubectl("delete", "node", *names, "--wait=false", check=False)


def llama70b_on_trays(name: str) -> dict[str, Any]:
    """Llama-3-70B on 4 trays: the plan's layout is TP8 DP2, each tensor-parallel group over 2
    trays (4 GPUs each), and split over NVLink cliques it is 63 % slower (`ringmaster plan`),
    so Auto requires each group's clique."""
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "workers": 4,
            "accelerator": {"type": "nvidia-gb200", "perWorker": 4},
            "machineType": "a4x-highgpu-4g",
            "model": {
                "architecture": {
                    "layers": 80,
                    "hiddenSize": 8192,
                    "attentionHeads": 64,
                    "kvHeads": 8,
                    "ffnHiddenSize": 28672,
                    "ffnType": "Gated",
                    "vocabSize": 32000,
                    "sequenceLength": 4096,
                }
            },
            "parallelism": {
                "tensor": "Auto",
                "pipeline": 1,
                "sharding": "None",
                "globalBatchSize": 16,
            },
            "communication": {"strategy": "Ring"},
            "template": {
                "image": "nvcr.io/nvidia/nemo:24.07",
                "metadata": {
                    "annotations": {
                        "sim.ringmaster.dev/exit-code": "0",
                        "sim.ringmaster.dev/run-for": "600s",
                    }
                },
            },
        },
    }


def test_the_local_pools_come_labelled_with_their_topology(cluster: Cluster) -> None:
    """GPU pools in GKE blocks of 16 hosts (a default-size pool in one), as placement reads."""
    nodes = cluster.get_json("nodes", "-l", "cloud.google.com/gke-nodepool=a100-highgpu-8g")
    assert {n["metadata"]["labels"].get(GKE_BLOCK) for n in nodes["items"]} == {"b0"}


def test_tensor_groups_over_trays_wait_for_and_land_in_one_nvlink_clique(
    operator: Any, cluster: Cluster, quiet_namespace: str, nvl72_trays: dict[str, str]
) -> None:
    ns = quiet_namespace
    # Trays 16 and 18 busy: 4 trays free (17 | 19, 20, 21), but one group of 2 fits a clique.
    for i in (16, 18):
        cluster.apply(busy_pod(f"busy-{i}", tray(i), gpus=4), ns)
    wait_for(
        lambda: all(
            cluster.get_json("pod", f"busy-{i}", "-n", ns)["status"].get("phase") == "Running"
            for i in (16, 18)
        ),
        timeout=60,
        what="the busy pods Running",
    )
    waiting, decisions = None, []
    for _ in range(5):  # a job decided before the operator saw the trays or pods: again
        cluster.apply(llama70b_on_trays("tp-over-trays"), ns)
        decided = wait_for(
            lambda: (
                (c := condition(job(cluster, ns, "tp-over-trays"), "Schedulable"))
                and c["reason"] in ("TopologyUnavailable", "Admitted")
                and c
            ),
            timeout=90,
            what="the NVL72 job decided",
        )
        if decided["reason"] == "TopologyUnavailable":
            waiting = decided
            break
        decisions.append(decided["message"])
        cluster.kubectl("delete", "trainingjob", "tp-over-trays", "-n", ns, "--wait=true")
        wait_for(
            lambda: not worker_pods(cluster, ns, "tp-over-trays"), timeout=60, what="pods gone"
        )
    assert waiting is not None, f"the operator never saw the trays' cliques: {decisions}"
    assert "tensor-parallel groups of 2 hosts" in waiting["message"]
    assert "NVLink clique" in waiting["message"] and "% slower" in waiting["message"]
    assert "spec.placement.topology: Auto" in waiting["message"]

    # Tray 18 freed: the second rack has 4 free trays, both groups fit inside it. A scheduler
    # blind to cliques would take 17-20 and split the first group over the two racks.
    cluster.kubectl("delete", "pod", "busy-18", "-n", ns, "--grace-period=0", "--wait=true")
    wait_phase(cluster, ns, "tp-over-trays", "Running", timeout=90)
    by_rank = {
        int(p["metadata"]["labels"][RANK_LABEL]): p["spec"]["nodeName"]
        for p in worker_pods(cluster, ns, "tp-over-trays")
    }
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert {by_rank[r] for r in by_rank} == {tray(i) for i in range(18, 22)}
    for first in (0, 2):  # each tensor-parallel group (ranks 0-1, 2-3) in one clique
        assert nvl72_trays[by_rank[first]] == nvl72_trays[by_rank[first + 1]]
    admission = job(cluster, ns, "tp-over-trays")["status"]["admission"]
    assert admission["placement"] == "Packed"
