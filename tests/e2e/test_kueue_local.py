"""A real Kueue (its controller manager, built from its Go module) against the local cluster.

The groundwork of TrainingJob's Kueue integration: Workloads are created here directly, as a job
integration creates them, so what is checked is Kueue's side of the protocol on our pools: quota
on the A100 flavor admits one 2 x 8-GPU gang, queues the second with Kueue's own message, and
admits it when the first reports Finished.

Kueue runs once per session (the `kueue` fixture in conftest.py, shared with test_kueue.py).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.localcluster.pools import POOLS
from ringmaster.placement.labels import GKE_NODEPOOL, GPU_RESOURCE
from tests.e2e.kube import Cluster, wait_for

A100 = next(p for p in POOLS if p.name == "a100-highgpu-8g")
GANG_PODS = 2


def workload(name: str, queue: str) -> dict[str, Any]:
    """A Workload as a job integration writes it: one pod set, the gang's pods and their GPUs."""
    gpus = str(A100.accelerators_per_node)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "workers",
                    "count": GANG_PODS,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": "trainer",
                                    "resources": {
                                        "requests": {GPU_RESOURCE: gpus},
                                        "limits": {GPU_RESOURCE: gpus},
                                    },
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def test_quota_admits_one_gang_and_queues_the_next(
    kueue: LocalKueue, cluster: Cluster, namespace: str
) -> None:
    start = time.monotonic()
    suffix = uuid.uuid4().hex[:6]
    flavor, cluster_queue = f"a100-{suffix}", f"gpus-{suffix}"
    gang_gpus = GANG_PODS * A100.accelerators_per_node
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {GKE_NODEPOOL: A100.name}},
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
                                "resources": [{"name": GPU_RESOURCE, "nominalQuota": gang_gpus}],
                            }
                        ],
                    }
                ],
            },
        }
    )
    try:
        cluster.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team"},
                "spec": {"clusterQueue": cluster_queue},
            },
            namespace,
        )
        # Kueue's webhooks are called: its own validation refuses a negative quota at apply.
        refused = cluster.kubectl(
            "apply", "-f", "-", check=False,
            input=json.dumps({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                "metadata": {"name": f"bad-{suffix}"},
                "spec": {"resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": [
                    {"name": flavor, "resources": [{"name": GPU_RESOURCE, "nominalQuota": -1}]},
                ]}]},
            }),
        )  # fmt: skip
        assert 'admission webhook "vclusterqueue.kb.io" denied' in refused.stderr, refused
        wait_for(
            lambda: (
                (cq := cluster.get_json("clusterqueue", cluster_queue))
                and (c := condition(cq, "Active"))
                and c["status"] == "True"
            ),
            timeout=60,
            what=f"ClusterQueue {cluster_queue} Active",
        )

        cluster.apply(workload("first", "team"), namespace)
        first = wait_for(
            lambda: (
                (w := cluster.get_json("workload", "first", "-n", namespace))
                and (c := condition(w, "Admitted"))
                and c["status"] == "True"
                and w
            ),
            timeout=60,
            what="the first Workload Admitted",
        )
        admission = first["status"]["admission"]
        assert admission["clusterQueue"] == cluster_queue
        [assignment] = admission["podSetAssignments"]
        assert assignment["name"] == "workers"
        assert assignment["count"] == GANG_PODS
        assert assignment["flavors"] == {GPU_RESOURCE: flavor}
        assert assignment["resourceUsage"][GPU_RESOURCE] == str(gang_gpus)

        cluster.apply(workload("second", "team"), namespace)
        pending = wait_for(
            lambda: (
                (w := cluster.get_json("workload", "second", "-n", namespace))
                and (c := condition(w, "QuotaReserved"))
                and c["status"] == "False"
                and c
            ),
            timeout=60,
            what="the second Workload pending with Kueue's reason",
        )
        assert pending["reason"] == "Pending"
        assert "insufficient unused quota" in pending["message"], pending["message"]
        assert GPU_RESOURCE in pending["message"]
        assert "admission" not in cluster.get_json("workload", "second", "-n", namespace).get(
            "status", {}
        )

        # The first gang ends: its integration reports Finished, as Kueue's jobframework does.
        finished = {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "the gang completed",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        cluster.kubectl(
            "patch", "workload", "first", "-n", namespace, "--subresource=status",
            "--type=json", "-p",
            json.dumps([{"op": "add", "path": "/status/conditions/-", "value": finished}]),
        )  # fmt: skip
        second = wait_for(
            lambda: (
                (w := cluster.get_json("workload", "second", "-n", namespace))
                and (c := condition(w, "Admitted"))
                and c["status"] == "True"
                and w
            ),
            timeout=60,
            what="the second Workload Admitted once the first finished",
        )
        assert second["status"]["admission"]["podSetAssignments"][0]["flavors"] == {
            GPU_RESOURCE: flavor
        }
        # The ClusterQueue's status catches up with the admission: one gang's GPUs in use.
        wait_for(
            lambda: (
                cluster.get_json("clusterqueue", cluster_queue)["status"]["flavorsUsage"][0]
                == {
                    "name": flavor,
                    "resources": [{"name": GPU_RESOURCE, "total": str(gang_gpus), "borrowed": "0"}],
                }
            ),
            timeout=30,
            what="the ClusterQueue's flavorsUsage at one gang",
        )
        print(f"Kueue protocol test: {time.monotonic() - start:.1f}s")
    finally:
        cluster.kubectl("delete", "workloads", "--all", "-n", namespace, check=False)
        cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)
