"""Several operator replicas with kopf peering: exactly one works, and it does work."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import events_of, training_job, wait_phase

REPO = Path(__file__).resolve().parents[2]


def test_two_peered_replicas_reconcile_once(
    operator: OperatorProcess, crds_installed: Cluster, quiet_namespace: str, tmp_path: Path
):
    cluster, ns = crds_installed, quiet_namespace
    operator.stop()  # the session's standalone operator would reconcile this job too
    cluster.kubectl(
        "apply",
        "--server-side",
        "-f",
        str(REPO / "charts/ringmaster/crds/kopf-peerings.kopf.dev.yaml"),
    )
    cluster.kubectl("wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev")
    peering = f"ringmaster-test-{uuid.uuid4().hex[:6]}"
    cluster.apply(
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": peering}}
    )
    replicas = [
        OperatorProcess(
            cluster.kubeconfig, tmp_path / f"replica-{i}.log", extra_args=("--peering", peering)
        )
        for i in range(2)
    ]
    try:
        for replica in replicas:
            replica.start()
        cluster.apply(training_job("peered", 1), ns)
        # With equal priorities kopf pauses every replica and nothing would happen here.
        wait_phase(cluster, ns, "peered", "Running", timeout=90)
        wait_for(lambda: "Running" in events_of(cluster, ns, "peered"), what="the Running event")
        # Two active replicas would each post the decision's Events.
        assert events_of(cluster, ns, "peered").count("Admitted") == 1
        peers = cluster.get_json("clusterkopfpeering", peering)["status"]
        assert len(peers) == 2  # both replicas are registered; one of them is active
    finally:
        for replica in replicas:
            replica.stop()
        cluster.kubectl("delete", "clusterkopfpeering", peering, check=False)
        operator.start()
