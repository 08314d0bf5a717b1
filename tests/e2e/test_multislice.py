"""TPU multislice on the real control plane: a 2-slice TPU v5e job is admitted on two slice node
pools at once or not at all, and each slice's workers run on their own pool with the environment
JAX's multislice runtime reads."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from typing import Any

from kubernetes import client, config, watch

from ringmaster.admission.kueue import QUEUE_NAME_LABEL
from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.placement.labels import GKE_TPU_ACCELERATOR, GKE_TPU_TOPOLOGY, TPU_RESOURCE
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_kueue import kueue_diagnosis, workload_of
from tests.e2e.test_trainingjob import condition, job, phase, wait_phase, worker_pods

POOL_A, POOL_B = "tpu-v5e-2x4", "tpu-v5e-2x4-b"  # two v5e 2x4 slices of 2 hosts x 4 chips


def two_slice_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "workers": 4,
            "accelerator": {
                "type": "tpu-v5-lite-podslice",
                "perWorker": 4,
                "topology": "2x4",
                "slices": 2,
            },
            "model": {
                "parameters": "340M",
                "computeSecondsPerStep": 0.2,
                "batchSizePerAccelerator": 8,
            },
            "template": {"image": "maxtext:1", "command": ["python3", "-m", "MaxText.train"]},
        },
    }


def pool_nodes(cluster: Cluster, pool: str) -> list[str]:
    nodes = cluster.get_json("nodes", "-l", f"cloud.google.com/gke-nodepool={pool}")
    return sorted(n["metadata"]["name"] for n in nodes["items"])


def pods_on_pools(cluster: Cluster, *pools: str) -> list[str]:
    """Pods not yet finished on the pools' nodes: an earlier test's, still going away, hold the
    slice the next test counts as free (seen under load on a worker's shared cluster)."""
    nodes = {n for pool in pools for n in pool_nodes(cluster, pool)}
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in cluster.get_json("pods", "--all-namespaces")["items"]
        if p["spec"].get("nodeName") in nodes
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_two_slices_wait_for_each_other_then_run_each_on_its_own_pool(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cordoned = pool_nodes(cluster, POOL_B)
    assert cordoned and len(pool_nodes(cluster, POOL_A)) == len(cordoned) == 2
    wait_for(
        lambda: not pods_on_pools(cluster, POOL_A, POOL_B),
        timeout=120,
        interval=1,
        what="earlier tests' pods off both v5e pools",
    )
    for node in cordoned:
        cluster.kubectl("cordon", node)
    try:
        cluster.apply(two_slice_job("llm"), ns)

        def waits_for_slices() -> bool:
            schedulable = condition(job(cluster, ns, "llm"), "Schedulable")
            return schedulable is not None and schedulable["reason"] == "InsufficientSlices"

        wait_for(waits_for_slices, timeout=60, what="llm to wait with InsufficientSlices")
        message = condition(job(cluster, ns, "llm"), "Schedulable")["message"]
        assert message.startswith("needs 2 slices of tpu-v5-lite-podslice 2x4; 1 free"), message
        # All or none: the free slice is not taken, no pod exists, no admission is recorded.
        time.sleep(2)
        assert worker_pods(cluster, ns, "llm") == []
        status = job(cluster, ns, "llm")["status"]
        assert status["phase"] == "Pending" and "admission" not in status
    finally:
        for node in cordoned:
            cluster.kubectl("uncordon", node)

    wait_phase(cluster, ns, "llm", "Running")
    status = job(cluster, ns, "llm")["status"]
    slice_pools = status["admission"]["slicePools"]
    assert sorted(slice_pools) == [POOL_A, POOL_B]
    hosts = status["admission"]["hosts"]
    pods = sorted(
        worker_pods(cluster, ns, "llm"),
        key=lambda p: int(p["metadata"]["labels"]["ringmaster.dev/rank"]),
    )
    assert len(pods) == 4
    coordinator = f"worker-0.llm.{ns}.svc.cluster.local:8081"
    for rank, pod in enumerate(pods):
        slice_id, worker_id = divmod(rank, 2)
        node = cluster.get_json("node", pod["spec"]["nodeName"])
        # Each slice on its own pool, on the host admission named for its rank.
        assert node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == slice_pools[slice_id]
        assert pod["spec"]["nodeName"] == hosts[rank]
        variables = env(pod)
        assert variables["MEGASCALE_SLICE_ID"] == str(slice_id)
        assert variables["MEGASCALE_NUM_SLICES"] == "2"
        assert variables["MEGASCALE_COORDINATOR_ADDRESS"] == coordinator
        assert variables["MEGASCALE_PORT"] == "8081"
        assert variables["TPU_WORKER_ID"] == str(worker_id)
        assert variables["TPU_WORKER_HOSTNAMES"] == ",".join(
            f"worker-{r}.llm.{ns}.svc.cluster.local" for r in (2 * slice_id, 2 * slice_id + 1)
        )
    # One headless Service names every host of every slice.
    wait_for(
        lambda: cluster.kubectl("get", "service", "llm", "-n", ns, check=False).returncode == 0,
        timeout=30,
        what="the headless Service",
    )
    service = cluster.get_json("service", "llm", "-n", ns)
    assert service["spec"]["clusterIP"] == "None"
    assert phase(cluster, ns, "llm") == "Running"


def test_kueue_counts_every_slice_of_a_multislice_job(
    operator: OperatorProcess, kueue: LocalKueue, cluster: Cluster, quiet_namespace: str
):
    """The Workload has a pod set per slice, so Kueue's quota holds both: with quota for one
    slice (8 chips) the job stays queued; with quota for two it runs, one slice per pool."""
    ns, suffix = quiet_namespace, uuid.uuid4().hex[:6]
    flavor, cluster_queue = f"v5e-{suffix}", f"tpus-{suffix}"
    labels = {GKE_TPU_ACCELERATOR: "tpu-v5-lite-podslice", GKE_TPU_TOPOLOGY: "2x4"}
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": labels},
        }
    )

    def queue_with(chips: int) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [TPU_RESOURCE],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [{"name": TPU_RESOURCE, "nominalQuota": chips}],
                            }
                        ],
                    }
                ],
            },
        }

    cluster.apply(queue_with(8))
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "tpus"},
            "spec": {"clusterQueue": cluster_queue},
        },
        ns,
    )
    try:
        manifest = two_slice_job("queued")
        manifest["metadata"]["labels"] = {QUEUE_NAME_LABEL: "tpus"}
        cluster.apply(manifest, ns)
        wait_for(
            lambda: workload_of(cluster, ns, "queued") is not None,
            timeout=60,
            what="the multislice job's Workload",
        )
        workload = workload_of(cluster, ns, "queued")
        assert [(s["name"], s["count"]) for s in workload["spec"]["podSets"]] == [
            ("slice-0", 2),
            ("slice-1", 2),
        ]
        time.sleep(3)  # Kueue had its chance: 16 chips do not fit a quota of 8
        assert "admission" not in (workload_of(cluster, ns, "queued").get("status") or {})
        assert worker_pods(cluster, ns, "queued") == []
        assert condition(job(cluster, ns, "queued"), "Schedulable")["reason"] == "QueuedInKueue"

        cluster.kubectl(
            "patch",
            "clusterqueue",
            cluster_queue,
            "--type=json",
            "-p",
            json.dumps(
                [
                    {
                        "op": "replace",
                        "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
                        "value": 16,
                    }
                ]
            ),
        )
        wait_phase(cluster, ns, "queued", "Running", timeout=90)
        status = job(cluster, ns, "queued")["status"]
        assert sorted(status["admission"]["slicePools"]) == [POOL_A, POOL_B]
        assignments = workload_of(cluster, ns, "queued")["status"]["admission"]["podSetAssignments"]
        assert {a["name"]: a["count"] for a in assignments} == {"slice-0": 2, "slice-1": 2}
    except BaseException:
        print(kueue_diagnosis(cluster, ns, kueue))
        raise
    finally:
        cluster.kubectl("delete", "trainingjobs", "--all", "-n", ns, check=False)
        cluster.kubectl("delete", "workloads", "--all", "-n", ns, check=False)
        cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def test_a_two_slice_gang_restarted_across_an_operator_restart_never_says_pending_and_admitted(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    """Issue 45 (defect 7c): the operator is killed while a two-slice job runs, its workers fail
    meanwhile, and the operator that starts restarts both slices. Every status the job shows,
    from a watch, is Pending with Schedulable=False or Admitted/Running with Schedulable=True
    (the restart used to show Pending with the ended attempt's Schedulable=True Admitted)."""
    ns = quiet_namespace
    manifest = two_slice_job("flaky")
    manifest["spec"]["template"]["metadata"] = {
        "annotations": {"sim.ringmaster.dev/exit-code": "3", "sim.ringmaster.dev/run-for": "8s"}
    }
    manifest["spec"]["runPolicy"] = {"backoffLimit": 1}
    seen: list[tuple[str | None, tuple[str, str] | None]] = []
    stop = threading.Event()

    def watch_job() -> None:
        config.load_kube_config(str(cluster.kubeconfig))
        api = client.CustomObjectsApi()
        while not stop.is_set():
            with contextlib.suppress(Exception):
                for event in watch.Watch().stream(
                    api.list_namespaced_custom_object,
                    "ringmaster.dev",
                    "v1alpha1",
                    ns,
                    "trainingjobs",
                    timeout_seconds=2,
                ):
                    status = event["object"].get("status") or {}
                    said = next(
                        (c for c in status.get("conditions") or [] if c["type"] == "Schedulable"),
                        None,
                    )
                    seen.append(
                        (status.get("phase"), (said["status"], said["reason"]) if said else None)
                    )

    watcher = threading.Thread(target=watch_job, daemon=True)
    watcher.start()
    try:
        cluster.apply(manifest, ns)
        wait_phase(cluster, ns, "flaky", "Running")
        operator.stop(kill=True)
        # The workers fail while no operator runs.
        wait_for(
            lambda: any(
                p["status"].get("phase") == "Failed" for p in worker_pods(cluster, ns, "flaky")
            ),
            60,
            what="a worker failed",
        )
        operator.start()
        wait_phase(cluster, ns, "flaky", "Failed", timeout=90)
        time.sleep(1)
    finally:
        stop.set()
        watcher.join(timeout=10)
        if operator.process is None:
            operator.start()
    status = job(cluster, ns, "flaky")["status"]
    assert status["restarts"] == 1 and condition(job(cluster, ns, "flaky"), "Schedulable")
    contradictions = [
        (phase_, said)
        for phase_, said in seen
        if (phase_ == "Pending" and said and said[0] == "True")
        or (phase_ in ("Admitted", "Running") and (not said or said[0] != "True"))
    ]
    assert not contradictions, seen
    assert ("Pending", ("False", "Restarted")) in seen, seen
