"""The accelerator chosen per job on the real control plane (issue 43, item 5): a job whose
primary accelerator is the H100 and whose alternative is the A100 40GB starts, while the H100
pool is full, on the A100 pool: with the layout the engine planned there, the A100's pod
resources and node selector, and status saying why not the H100."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kube import Cluster
from tests.e2e.test_admission import load_example
from tests.e2e.test_topology import busy_pod
from tests.e2e.test_trainingjob import job, wait_phase, worker_pods

pytestmark = pytest.mark.e2e

EXAMPLE = "alternatives/trainingjob-llama3-8b-h100-or-a100.yaml"
H100, H100_POOL = "nvidia-h100-80gb", "h100-highgpu-8g"  # 2 hosts of 8 x H100
A100, A100_POOL = "nvidia-tesla-a100", "a100-megagpu-16g"  # 2 hosts of 16 x A100 40GB
NODEPOOL = "cloud.google.com/gke-nodepool"


def pool_hosts(cluster: Cluster, pool: str) -> list[str]:
    nodes = cluster.get_json("nodes", "-l", f"{NODEPOOL}={pool}")["items"]
    return sorted(n["metadata"]["name"] for n in nodes)


def simulated(manifest: dict[str, Any]) -> dict[str, Any]:
    """The example, its workers run by the local cluster's simulated hosts for a while."""
    annotations = {"sim.ringmaster.dev/exit-code": "0", "sim.ringmaster.dev/run-for": "600s"}
    manifest["spec"]["template"]["metadata"] = {"annotations": annotations}
    return manifest


def test_a_job_starts_on_its_alternative_when_the_primary_pool_is_full(
    operator: Any, cluster: Cluster, quiet_namespace: str
) -> None:
    ns = quiet_namespace
    for i, host in enumerate(pool_hosts(cluster, H100_POOL)):
        cluster.apply(busy_pod(f"busy-{i}", host), ns)
    manifest = simulated(load_example(EXAMPLE))
    name = manifest["metadata"]["name"]
    cluster.apply(manifest, ns)
    wait_phase(cluster, ns, name, "Running", timeout=90)

    status = job(cluster, ns, name)["status"]
    admission = status["admission"]
    assert (admission["accelerator"], admission["pool"]) == (A100, A100_POOL)
    assert (admission["workers"], admission["perWorker"]) == (1, 16)
    rows = {row["accelerator"]: row for row in admission["accelerators"]}
    assert list(rows) == [H100, A100, "nvidia-a100-80gb"]  # EarliestFinish: best first
    assert rows[A100]["chosen"] and not rows[H100]["chosen"]
    assert rows[H100]["why"].startswith("cannot start now: ")
    assert f"pool {H100_POOL}; 0 fit now" in rows[H100]["why"]
    assert rows["nvidia-a100-80gb"]["why"].startswith("finishes later")
    # The plan is the A100's: its own layout (the H100's differs), under the same global batch.
    plan = status["plan"]
    assert plan["machineType"] == "a2-megagpu-16g"
    assert plan["layout"] == rows[A100]["layout"] != rows[H100]["layout"]
    assert plan["globalBatchSize"] == 32

    [pod] = worker_pods(cluster, ns, name)
    assert pod["spec"]["nodeSelector"][NODEPOOL] == A100_POOL
    assert pod["spec"]["nodeName"] in pool_hosts(cluster, A100_POOL)
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "16"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["WORLD_SIZE"], env["NPROC_PER_NODE"]) == ("1", "16")
    assert env["RINGMASTER_DATA_PARALLEL"] == str(plan["data"])
    assert env["RINGMASTER_CONTEXT_PARALLEL"] == str(plan["context"])
    assert env["RINGMASTER_GLOBAL_BATCH_SIZE"] == "32"
