"""A TrainingJob admitted by a real Kueue with Topology Aware Scheduling (issue 43): where the
job's pool has a TAS flavor (a ResourceFlavor with spec.topologyName, its Topology naming the
GKE block level), the operator writes the job's topology verdict into the Workload's worker pod
set: ``topologyRequest`` and the pod template annotation Kueue's integrations use; Kueue admits it
on the TAS flavor and the gang runs. Auto on a non-blocking spine prefers the block; Required
requires it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from ringmaster.admission.kueue import (
    PODSET_PREFERRED_TOPOLOGY,
    PODSET_REQUIRED_TOPOLOGY,
    QUEUE_NAME_LABEL,
    TAS_POD_ANNOTATIONS,
    rank_domains,
)
from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.manifests.naming import RANK_LABEL, TRAINING_JOB_LABEL
from ringmaster.placement.labels import GKE_NODEPOOL, GPU_RESOURCE
from ringmaster.placement.topology import GKE_BLOCK
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_kueue import kueue_diagnosis, workload_of
from tests.e2e.test_topology import POOL, blocks_now, gang, relabel_blocks
from tests.e2e.test_trainingjob import condition, wait_phase

pytestmark = pytest.mark.e2e

HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture
def tas_queue(
    kueue: LocalKueue, cluster: Cluster, quiet_namespace: str
) -> Iterator[dict[str, str]]:
    """The pool's hosts in two GKE blocks; a Topology of (block, host); a TAS ResourceFlavor on
    the pool; a ClusterQueue with quota for both hosts of a block; a LocalQueue ``team``."""
    own = blocks_now(cluster)
    # Each job needs a whole block of two hosts: wait until no other test's pod (a namespace
    # still going away, whose pods kwok has not finished) holds a host of the pool.
    wait_for(
        lambda: not pods_on(cluster, set(own)),
        timeout=180,
        what=f"the {POOL} hosts free of other tests' pods",
    )
    block = {name: f"b{i // 2}" for i, name in enumerate(sorted(own))}
    relabel_blocks(cluster, block)
    suffix = uuid.uuid4().hex[:6]
    topology, flavor, cluster_queue = f"blocks-{suffix}", f"tas-{suffix}", f"tas-{suffix}"
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": GKE_BLOCK}, {"nodeLabel": HOSTNAME}]},
        }
    )
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {GKE_NODEPOOL: POOL}, "topologyName": topology},
        }
    )
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [{"name": GPU_RESOURCE, "nominalQuota": 32}],
                            }
                        ],
                    }
                ],
            },
        }
    )
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team"},
            "spec": {"clusterQueue": cluster_queue},
        },
        quiet_namespace,
    )
    wait_for(
        lambda: (
            (c := condition(cluster.get_json("clusterqueue", cluster_queue), "Active"))
            and c["status"] == "True"
        ),
        timeout=60,
        what=f"ClusterQueue {cluster_queue} Active",
    )
    try:
        yield block
    finally:
        cluster.kubectl("delete", "trainingjobs", "--all", "-n", quiet_namespace, check=False)
        cluster.kubectl("delete", "workloads", "--all", "-n", quiet_namespace, check=False)
        cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)
        cluster.kubectl("delete", "topology", topology, "--wait=false", check=False)
        relabel_blocks(cluster, own)  # the pool's own blocks (localcluster/pools.py)


def pods_on(cluster: Cluster, hosts: set[str]) -> list[str]:
    """The pods not finished that are bound to any of ``hosts``, as namespace/name."""
    pods = cluster.get_json("pods", "-A")["items"]
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in pods
        if p["spec"].get("nodeName") in hosts
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


def labelled(name: str, topology: str | None = None) -> dict[str, Any]:
    manifest = gang(name, 2, topology)
    manifest["metadata"]["labels"] = {QUEUE_NAME_LABEL: "team"}
    return manifest


def blocks_of(assignment: dict[str, Any], block_of_host: dict[str, str]) -> set[str]:
    """The blocks a pod set's topology assignment puts its pods in. Kueue writes the assignment
    by levels, and may omit the levels above the lowest (hostnames are unique), so the block is
    read from the host through the test's own labelling."""
    return {
        domain.get(GKE_BLOCK) or block_of_host[domain[HOSTNAME]]
        for domain in assigned_domains(assignment)
    }


def assigned_domains(assignment: dict[str, Any]) -> tuple[Mapping[str, str], ...]:
    topology = assignment.get("topologyAssignment")
    if not topology:
        raise AssertionError(f"Kueue gave no topology assignment: {assignment}")
    return rank_domains(topology)


def assert_on_assigned_hosts(cluster: Cluster, ns: str, job: str, assignment: dict[str, Any]):
    """Each worker pod is bound to the host Kueue assigned its rank and carries the annotation
    that makes it Kueue's TAS pod (else Kueue counts its GPUs twice)."""
    hosts = [d[HOSTNAME] for d in assigned_domains(assignment)]
    pods = cluster.get_json("pods", "-n", ns, "-l", f"{TRAINING_JOB_LABEL}={job}")["items"]
    bound = {int(p["metadata"]["labels"][RANK_LABEL]): p["spec"].get("nodeName") for p in pods}
    assert bound == dict(enumerate(hosts)), (bound, hosts)
    for pod in pods:
        assert set(pod["metadata"]["annotations"]) & set(TAS_POD_ANNOTATIONS), pod["metadata"]


def workers_pod_set(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    workload = wait_for(
        lambda: workload_of(cluster, ns, name), timeout=60, what=f"the Workload of {name}"
    )
    [workers] = [s for s in workload["spec"]["podSets"] if s["name"] == "workers"]
    return workers


def test_kueue_gets_the_topology_verdict_and_admits_on_its_tas_flavor(
    operator: OperatorProcess,
    kueue: LocalKueue,
    cluster: Cluster,
    quiet_namespace: str,
    tas_queue: dict[str, str],
) -> None:
    ns = quiet_namespace
    start = time.monotonic()
    try:
        # The user's Required first: Kueue is asked for one block, and admits it only on a block
        # both of whose hosts its cache sees free. (Auto first could be split over both blocks
        # where Kueue's cache still counts a pod of an earlier test on one host of each, which
        # Preferred allows; then no block would ever be free for Required.)
        cluster.apply(labelled("required", "Required"), ns)
        workers = workers_pod_set(cluster, ns, "required")
        assert workers["topologyRequest"] == {"required": GKE_BLOCK}
        annotations = workers["template"]["metadata"]["annotations"]
        assert annotations[PODSET_REQUIRED_TOPOLOGY] == GKE_BLOCK
        wait_phase(cluster, ns, "required", "Running", timeout=120)
        [required] = workload_of(cluster, ns, "required")["status"]["admission"][
            "podSetAssignments"
        ]
        assert len(blocks_of(required, tas_queue)) == 1, required
        assert_on_assigned_hosts(cluster, ns, "required", required)

        # Auto, on the default non-blocking spine: the engine finds no loss, Kueue is asked to
        # prefer one block: the other one, which is free.
        cluster.apply(labelled("auto"), ns)
        workers = workers_pod_set(cluster, ns, "auto")
        assert workers["topologyRequest"] == {"preferred": GKE_BLOCK}
        annotations = workers["template"]["metadata"]["annotations"]
        assert annotations[PODSET_PREFERRED_TOPOLOGY] == GKE_BLOCK
        wait_phase(cluster, ns, "auto", "Running", timeout=120)
        admission = workload_of(cluster, ns, "auto")["status"]["admission"]
        [assignment] = admission["podSetAssignments"]
        assert assignment.get("topologyAssignment"), assignment  # Kueue placed it by topology
        assert blocks_of(assignment, tas_queue).isdisjoint(blocks_of(required, tas_queue))
        assert_on_assigned_hosts(cluster, ns, "auto", assignment)
        admitted = condition(cluster.get_json("trainingjob", "auto", "-n", ns), "Schedulable")
        assert admitted["status"] == "True" and "by Kueue" in admitted["message"]
        print(f"Kueue TAS TrainingJob test: {time.monotonic() - start:.1f}s")
    except BaseException:
        print(kueue_diagnosis(cluster, ns, kueue))
        raise
