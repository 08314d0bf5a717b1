"""Proof that the local cluster is a real control plane: the real scheduler binds pods by their
extended resources, taints and selectors; CEL admission runs in the apiserver; the garbage
collector in kube-controller-manager follows ownerReferences; kwok plays the kubelet."""

from __future__ import annotations

import json
import uuid

from tests.e2e.kube import Cluster, wait_for

A100_POOL = "a100-highgpu-8g"


def gpu_pod(name: str, gpus: int, annotations: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "nodeSelector": {"cloud.google.com/gke-nodepool": A100_POOL},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "worker",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def pod(cluster: Cluster, namespace: str, name: str) -> dict:
    return cluster.get_json("pod", name, "-n", namespace)


def test_gpu_pod_is_bound_by_the_scheduler_to_an_a100_node_and_runs(cluster, namespace):
    cluster.apply(gpu_pod("trainer", 8), namespace)
    running = wait_for(
        lambda: (p := pod(cluster, namespace, "trainer"))["status"].get("phase") == "Running" and p,
        what="pod trainer Running",
    )
    node = cluster.get_json("node", running["spec"]["nodeName"])
    assert node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == A100_POOL
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    # Bound by kube-scheduler, not by us: the Scheduled condition comes from it.
    scheduled = {c["type"]: c for c in running["status"]["conditions"]}["PodScheduled"]
    assert scheduled["status"] == "True"
    events = cluster.get_json(
        "events", "-n", namespace, "--field-selector", "involvedObject.name=trainer"
    )["items"]
    scheduler_events = [
        e
        for e in events
        if "default-scheduler"
        in (e.get("reportingComponent"), e.get("source", {}).get("component"))
    ]
    assert [e["reason"] for e in scheduler_events] == ["Scheduled"]


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(cluster, namespace):
    cluster.apply(gpu_pod("too-big", 17), namespace)

    def failed_scheduling():
        events = cluster.get_json(
            "events", "-n", namespace, "--field-selector", "involvedObject.name=too-big"
        )["items"]
        return [e for e in events if e["reason"] == "FailedScheduling"]

    events = wait_for(failed_scheduling, what="a FailedScheduling event")
    assert "nvidia.com/gpu" in events[0]["message"]
    status = pod(cluster, namespace, "too-big")["status"]
    assert status["phase"] == "Pending"
    assert not pod(cluster, namespace, "too-big")["spec"].get("nodeName")


def test_crd_cel_rule_rejects_a_bad_object_at_create_time(cluster):
    group = f"cel{uuid.uuid4().hex[:6]}.test.ringmaster.dev"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "min": {"type": "integer"},
                                        "max": {"type": "integer"},
                                    },
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self.min <= self.max",
                                            "message": "min must not exceed max",
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    cluster.apply(crd)
    try:
        cluster.kubectl(
            "wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=30s"
        )

        def create(low: int, high: int):
            obj = {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": f"w{low}-{high}", "namespace": "default"},
                "spec": {"min": low, "max": high},
            }
            return cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)

        # The CRD's REST mapping can take a moment to reach kubectl's discovery.
        good = wait_for(lambda: (r := create(1, 2)).returncode == 0 and r, what="a valid Widget")
        assert good.returncode == 0
        bad = create(3, 2)
        assert bad.returncode != 0
        assert "min must not exceed max" in bad.stderr
    finally:
        cluster.kubectl("delete", "crd", f"widgets.{group}", "--wait=false", check=False)


def test_deleting_an_owner_garbage_collects_what_names_it(cluster, namespace):
    cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    owner = cluster.get_json("configmap", "owner", "-n", namespace)
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": owner["metadata"]["uid"],
                }
            ],
        },
    }
    cluster.apply(child, namespace)
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for(
        lambda: (
            cluster.kubectl("get", "configmap", "child", "-n", namespace, check=False).returncode
            != 0
        ),
        what="the garbage collector to delete the child",
    )


def test_kwok_stage_ends_pods_on_demand(cluster, namespace):
    """The documented way to make a simulated container exit (docs/local-cluster.md)."""
    cluster.apply(gpu_pod("ok", 1, {"sim.ringmaster.dev/exit-code": "0"}), namespace)
    cluster.apply(gpu_pod("crash", 1), namespace)
    wait_for(
        lambda: pod(cluster, namespace, "crash")["status"].get("phase") == "Running",
        what="crash Running",
    )
    cluster.kubectl("annotate", "pod", "crash", "-n", namespace, "sim.ringmaster.dev/exit-code=137")
    succeeded = wait_for(
        lambda: (p := pod(cluster, namespace, "ok"))["status"].get("phase") == "Succeeded" and p,
        what="ok Succeeded",
    )
    failed = wait_for(
        lambda: (p := pod(cluster, namespace, "crash"))["status"].get("phase") == "Failed" and p,
        what="crash Failed",
    )
    assert succeeded["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
