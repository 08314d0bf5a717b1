"""An accelerator the built-in catalog lacks, made placeable by the catalog ConfigMap alone: no
CRD change, no operator restart (docs/catalog.md). A pool of NVIDIA L4 hosts (GCE g2-standard-24,
2 GPUs each) joins the local cluster; a TrainingJob naming nvidia-l4 waits with UnknownAccelerator,
a bad ConfigMap is rejected with an Event while the operator keeps running, and the example entry
(examples/catalog/nvidia-l4.yaml) gets the job admitted and running on the L4 pool."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringmaster.localcluster.pools import PoolTemplate, node_manifest
from tests.e2e.conftest import E2E_CATALOG_CONFIGMAP
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import condition, job, training_job, worker_pods

REPO = Path(__file__).resolve().parents[2]
L4_POOL = PoolTemplate(
    name="e2e-l4-standard-24",
    instance_type="g2-standard-24",
    vcpus=24,
    memory_gib=96,
    default_size=2,
    accelerator="nvidia-l4",
    accelerators_per_node=2,
    gpu_product="NVIDIA-L4",
)
CM_NAMESPACE, CM_NAME = E2E_CATALOG_CONFIGMAP


def catalog_configmap(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CM_NAME, "namespace": CM_NAMESPACE},
        "data": {"catalog.yaml": text},
    }


@pytest.fixture
def l4_pool(crds_installed: Cluster) -> Iterator[list[str]]:
    """Two L4 hosts in the local cluster, and no catalog ConfigMap, for this test only."""
    cluster = crds_installed
    nodes = [node_manifest(L4_POOL, i) for i in range(L4_POOL.default_size)]
    names = [n["metadata"]["name"] for n in nodes]
    cluster.kubectl("delete", "configmap", CM_NAME, "-n", CM_NAMESPACE, "--ignore-not-found")
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": nodes})
    try:
        yield names
    finally:
        cluster.kubectl("delete", "configmap", CM_NAME, "-n", CM_NAMESPACE, "--ignore-not-found")
        cluster.kubectl("delete", "node", *names, "--wait=false", check=False)


def schedulable(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return condition(job(cluster, ns, name), "Schedulable") or {}


def events(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    found = cluster.get_json("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")
    return list(found["items"])


def healthy(process: OperatorProcess) -> bool:
    url = f"http://127.0.0.1:{process.health_port}/healthz"
    with urllib.request.urlopen(url, timeout=5) as response:
        return bool(response.status == 200)


def test_a_catalog_configmap_entry_makes_a_new_accelerator_placeable(
    operator: OperatorProcess, crds_installed: Cluster, quiet_namespace: str, l4_pool: list[str]
) -> None:
    cluster, ns = crds_installed, quiet_namespace
    doc = training_job("l4-finetune", 2, per_worker=2, machine_type=None)
    doc["spec"]["accelerator"] = {"type": "nvidia-l4", "perWorker": 2}
    cluster.apply(doc, ns)  # the schema takes any GKE accelerator name: no CRD change

    # 1. Unknown to the catalog: the job waits, says why and how to fix it, creates nothing.
    wait_for(
        lambda: schedulable(cluster, ns, "l4-finetune").get("reason") == "UnknownAccelerator",
        timeout=60,
        what="Schedulable=False UnknownAccelerator",
    )
    message = schedulable(cluster, ns, "l4-finetune")["message"]
    assert "nvidia-l4 is not in the operator's catalog" in message
    assert "nvidia-h200-141gb" in message and "tpu-v6e-slice" in message  # the known names
    assert "catalog ConfigMap" in message and "docs/catalog.md" in message  # how to add one
    assert job(cluster, ns, "l4-finetune")["status"]["phase"] == "Pending"
    assert any(
        e["reason"] == "UnknownAccelerator" and e["type"] == "Warning"
        for e in events(cluster, ns, "l4-finetune")
    )
    assert worker_pods(cluster, ns, "l4-finetune") == []

    # 2. A bad catalog is rejected: an Event on the ConfigMap, the job's message says so, and
    # the operator keeps running on the last good catalog.
    cluster.apply(catalog_configmap("accelerators:\n  nvidia-l4: {memoryGB: lots}\n"))
    rejected = wait_for(
        lambda: [
            e for e in events(cluster, CM_NAMESPACE, CM_NAME) if e["reason"] == "CatalogRejected"
        ],
        timeout=60,
        what="a CatalogRejected Event on the ConfigMap",
    )
    assert "accelerators.nvidia-l4.memoryGB" in rejected[0]["message"]
    wait_for(
        lambda: "was rejected" in schedulable(cluster, ns, "l4-finetune").get("message", ""),
        timeout=60,
        what="the job's message naming the rejected catalog",
    )
    assert healthy(operator)
    assert worker_pods(cluster, ns, "l4-finetune") == []

    # 3. The example entry: applied live, the job is admitted on the L4 pool and runs.
    text = (REPO / "examples" / "catalog" / "nvidia-l4.yaml").read_text()
    cluster.apply(catalog_configmap(text))
    wait_for(
        lambda: job(cluster, ns, "l4-finetune").get("status", {}).get("phase") == "Running",
        timeout=90,
        what="the L4 job Running",
    )
    status = job(cluster, ns, "l4-finetune")["status"]
    assert status["pool"] == L4_POOL.name
    assert schedulable(cluster, ns, "l4-finetune")["reason"] == "Admitted"
    assert status["plan"]["strategy"] in ("Ring", "ReductionServer")  # the engine planned it
    pods = worker_pods(cluster, ns, "l4-finetune")
    assert len(pods) == 2
    assert {p["spec"]["nodeName"] for p in pods} == set(l4_pool)
    assert all(
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2" for p in pods
    )
    assert healthy(operator)
