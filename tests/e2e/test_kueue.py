"""TrainingJobs admitted by a real Kueue: the operator (as in the other e2e files) creates each
labelled job's Workload, runs the gang only once Kueue admits it, on the flavor's nodes, reports
PodsReady and Finished, and on preemption stops the gang, keeps the job and runs it again when
Kueue readmits it. Kueue's controller manager is the real one (the `kueue` fixture)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ringmaster.admission.kueue import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.placement.labels import GKE_NODEPOOL, GPU_RESOURCE
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import (
    A100_POOL,
    condition,
    events_of,
    job,
    phase,
    training_job,
    wait_phase,
    worker_pods,
)

GANG_GPUS = 2 * 8  # one 2 x 8-GPU gang


def labelled(name: str, queue: str, priority_class: str | None = None) -> dict[str, Any]:
    manifest = training_job(name, 2)
    labels = {QUEUE_NAME_LABEL: queue}
    if priority_class:
        labels[PRIORITY_CLASS_LABEL] = priority_class
    manifest["metadata"]["labels"] = labels
    return manifest


def workload_of(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    uid = job(cluster, ns, name)["metadata"]["uid"]
    items = cluster.get_json("workloads", "-n", ns)["items"]
    return next(
        (
            w
            for w in items
            if any(
                r["uid"] == uid and r.get("controller") for r in w["metadata"]["ownerReferences"]
            )
        ),
        None,
    )


def kueue_diagnosis(cluster: Cluster, ns: str, kueue: LocalKueue | None = None) -> str:
    """What a failed Kueue test needs to be read: each TrainingJob's phase and conditions, each
    Workload's conditions and admission, the namespace's Events in order (the operator's and
    Kueue's decisions), the bound pods, Kueue's lines about the namespace. Taken before the
    test's own clean-up deletes them."""
    lines = []
    for kind, plural, shown in (
        ("TrainingJob", "trainingjobs", "phase"),
        ("Workload", "workloads", "admission"),
    ):
        for item in cluster.get_json(plural, "-n", ns)["items"]:
            status = item.get("status") or {}
            lines.append(f"{kind} {item['metadata']['name']}: {status.get(shown)}")
            lines += [
                f"  {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
                for c in status.get("conditions") or []
            ]
    events = cluster.get_json("events", "-n", ns)["items"]
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        what = event["involvedObject"]
        lines.append(
            f"event {event.get('lastTimestamp') or event.get('eventTime')} {what['kind']}/"
            f"{what['name']} {event.get('reason')}: {event.get('message')}"
        )
    for pod in cluster.get_json("pods", "-A")["items"]:
        if pod["spec"].get("nodeName"):
            meta = pod["metadata"]
            state = "deleting" if meta.get("deletionTimestamp") else pod["status"].get("phase")
            where = pod["spec"]["nodeName"]
            lines.append(f"pod {meta['namespace']}/{meta['name']} on {where}: {state}")
    if kueue is not None:
        # Kueue's lines about the namespace's objects, and its errors; not its start-up chatter.
        said = kueue.log_file.read_text(errors="replace").splitlines()
        lines += ["Kueue's log:"]
        lines += [line for line in said if ns in line or '"level":"error"' in line][-40:]
    return "\n".join(lines)


def workload_condition(cluster: Cluster, ns: str, name: str, kind: str) -> dict[str, Any] | None:
    workload = workload_of(cluster, ns, name)
    return condition(workload, kind) if workload else None


def finish(cluster: Cluster, ns: str, name: str) -> None:
    """The gang's containers exit 0 (the local cluster's pod-exit stage)."""
    for pod in worker_pods(cluster, ns, name):
        cluster.kubectl(
            "annotate", "pod", "-n", ns, pod["metadata"]["name"], "sim.ringmaster.dev/exit-code=0"
        )


def live_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in worker_pods(cluster, ns, name) if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture
def gpu_queue(kueue: LocalKueue, cluster: Cluster, quiet_namespace: str) -> Iterator[str]:
    """A ResourceFlavor on the A100 pool, a ClusterQueue with quota for one 2 x 8-GPU gang that
    preempts lower priorities, a LocalQueue in the test's namespace, two WorkloadPriorityClasses."""
    suffix = uuid.uuid4().hex[:6]
    flavor, cluster_queue = f"a100-{suffix}", f"gpus-{suffix}"
    low, high = f"low-{suffix}", f"high-{suffix}"
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {GKE_NODEPOOL: A100_POOL}},
        }
    )
    for name, value in ((low, 100), (high, 1000)):
        cluster.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [{"name": GPU_RESOURCE, "nominalQuota": GANG_GPUS}],
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
        yield f"{flavor} {low} {high}"
    finally:
        cluster.kubectl("delete", "trainingjobs", "--all", "-n", quiet_namespace, check=False)
        cluster.kubectl("delete", "workloads", "--all", "-n", quiet_namespace, check=False)
        cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)
        cluster.kubectl("delete", "workloadpriorityclass", low, high, check=False)


def test_kueue_queues_runs_and_preempts_training_jobs(
    operator: OperatorProcess,
    kueue: LocalKueue,
    cluster: Cluster,
    quiet_namespace: str,
    gpu_queue: str,
) -> None:
    ns = quiet_namespace
    flavor, low, high = gpu_queue.split()
    start = time.monotonic()
    try:
        cluster.apply(labelled("first", "team", low), ns)
        wait_phase(cluster, ns, "first", "Running", timeout=90)
        cluster.apply(labelled("second", "team", low), ns)

        # One gang's quota: the second waits in Kueue, with Kueue's own message, and has no pods.
        queued = wait_for(
            lambda: (
                (c := condition(job(cluster, ns, "second"), "Schedulable"))
                and c["reason"] == "QueuedInKueue"
                and "insufficient unused quota" in c["message"]
                and c
            ),
            timeout=60,
            what="the second job QueuedInKueue with Kueue's message",
        )
        assert "LocalQueue team" in queued["message"] and queued["status"] == "False"
        assert worker_pods(cluster, ns, "second") == []
        assert phase(cluster, ns, "second") == "Pending"

        # The first runs on the flavor's nodes, Kueue knows its pods are ready.
        first = workload_of(cluster, ns, "first")
        assert first is not None and first["spec"]["queueName"] == "team"
        [owner] = first["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainingJob", "first", True)
        assert [s["name"] for s in first["spec"]["podSets"]] == ["workers"]
        assert first["spec"]["podSets"][0]["count"] == 2
        assert first["status"]["admission"]["podSetAssignments"][0]["flavors"] == {
            GPU_RESOURCE: flavor
        }
        for pod in worker_pods(cluster, ns, "first"):
            assert pod["spec"]["nodeSelector"][GKE_NODEPOOL] == A100_POOL
        wait_for(
            lambda: (
                (c := workload_condition(cluster, ns, "first", "PodsReady"))
                and c["status"] == "True"
            ),
            timeout=30,
            what="the first Workload PodsReady",
        )

        # The first finishes: its Workload is Finished and the second is admitted and runs.
        finish(cluster, ns, "first")
        wait_phase(cluster, ns, "first", "Succeeded", timeout=60)
        wait_for(
            lambda: (
                (c := workload_condition(cluster, ns, "first", "Finished"))
                and c["status"] == "True"
            ),
            timeout=30,
            what="the first Workload Finished",
        )
        wait_phase(cluster, ns, "second", "Running", timeout=90)
        admitted = condition(job(cluster, ns, "second"), "Schedulable")
        assert admitted["status"] == "True" and "by Kueue" in admitted["message"]

        # A higher priority preempts the second: its pods go, the job stays, no restart is spent.
        cluster.apply(labelled("urgent", "team", high), ns)
        wait_for(
            lambda: (
                (c := condition(job(cluster, ns, "second"), "Schedulable"))
                and c["reason"] == "QueuedInKueue"
                and "Preempted" in c["message"]
            ),
            timeout=90,
            what="the second job evicted by Kueue and queued again",
        )
        wait_for(
            lambda: live_pods(cluster, ns, "second") == [],
            timeout=60,
            what="the preempted gang's pods deleted",
        )
        wait_phase(cluster, ns, "urgent", "Running", timeout=90)
        second = job(cluster, ns, "second")
        assert second["status"]["phase"] == "Pending"
        assert not second["status"].get("restarts")
        assert "Evicted" in events_of(cluster, ns, "second")
        requeued = workload_condition(cluster, ns, "second", "Requeued")
        assert requeued is not None and requeued["reason"] == "Preempted"

        # `kubectl get workloads` shows all three, as Kueue's own columns print them.
        listing = cluster.kubectl("get", "workloads", "-n", ns).stdout
        for name in ("first", "second", "urgent"):
            assert f"trainingjob-{name}-" in listing, listing
        print(listing)

        # The urgent job ends: the preempted one is admitted again and runs.
        finish(cluster, ns, "urgent")
        wait_phase(cluster, ns, "urgent", "Succeeded", timeout=60)
        wait_phase(cluster, ns, "second", "Running", timeout=90)
        assert not job(cluster, ns, "second")["status"].get("restarts")
        print(f"Kueue TrainingJob test: {time.monotonic() - start:.1f}s")
    except BaseException:
        print(kueue_diagnosis(cluster, ns, kueue))
        raise
