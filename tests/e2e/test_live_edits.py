"""Editing a live TrainingJob on the real apiserver, with the operator running it.

The edit that orphaned a running job (issue 14: a machineType edit turned it Pending with
NoMatchingPool while its pods ran on) is refused at admission with a message naming the field;
the job keeps its pods and its phase. The ways that are allowed still work: the same edit
together with runPolicy.suspend, and any edit of a job that waits. `kubectl get tj` shows why a
job waits (the REASON column) without `-o yaml`.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import (
    A100_POOL,
    condition,
    job,
    phase,
    pools_of,
    training_job,
    wait_phase,
    worker_pods,
)

MEGA_POOL = "a100-megagpu-16g"  # 2 hosts of 16 A100s in the local cluster


def patch(cluster: Cluster, ns: str, name: str, spec: dict[str, Any]) -> Any:
    return cluster.kubectl(
        "patch", "tj", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": spec}), check=False
    )


def reason_column(cluster: Cluster, ns: str, name: str) -> str:
    """The REASON cell of the job's row in `kubectl get tj`."""
    header, *rows = cluster.kubectl("get", "tj", "-n", ns).stdout.splitlines()
    row = next(r for r in rows if r.split()[0] == name)
    return row.split()[header.split().index("REASON")]


def running_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in worker_pods(cluster, ns, name) if p["status"].get("phase") == "Running"]


def test_a_running_jobs_machine_type_edit_is_refused_and_it_keeps_its_pods(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
) -> None:
    ns, name = quiet_namespace, "edit-running"
    cluster.apply(training_job(name, 2), ns)
    wait_phase(cluster, ns, name, "Running")
    before = sorted(p["metadata"]["name"] for p in worker_pods(cluster, ns, name))
    assert reason_column(cluster, ns, name) == "Admitted"

    # kubectl patch, and kubectl apply as a GitOps tool would: both refused, naming the field.
    refused = patch(cluster, ns, name, {"machineType": "a2-megagpu-16g"})
    assert refused.returncode != 0, refused.stdout
    assert "spec.machineType" in refused.stderr
    assert "cannot change while the gang is admitted or running" in refused.stderr
    assert "runPolicy.suspend: true" in refused.stderr
    edited = training_job(name, 2, machine_type="a2-megagpu-16g")
    applied = cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(edited), check=False)
    assert applied.returncode != 0 and "spec.machineType" in applied.stderr
    for shape in ({"workers": 3}, {"template": {"image": "trainer:2"}}):
        result = patch(cluster, ns, name, shape)
        assert result.returncode != 0 and f"spec.{next(iter(shape))}" in result.stderr

    # Nothing changed: same spec, same pods, still Running on its pool.
    stored = job(cluster, ns, name)
    assert stored["spec"]["machineType"] == "a2-highgpu-8g" and stored["spec"]["workers"] == 2
    assert stored["status"]["phase"] == "Running" and stored["status"]["pool"] == A100_POOL
    assert sorted(p["metadata"]["name"] for p in worker_pods(cluster, ns, name)) == before
    assert condition(stored, "Schedulable")["status"] == "True"

    # runPolicy may change at any time.
    assert patch(cluster, ns, name, {"runPolicy": {"backoffLimit": 5}}).returncode == 0

    # The way to move it: suspend in the same update; resume, and the next gang takes the edit.
    moved = patch(
        cluster, ns, name, {"machineType": "a2-megagpu-16g", "runPolicy": {"suspend": True}}
    )
    assert moved.returncode == 0, moved.stderr
    wait_phase(cluster, ns, name, "Suspended")
    wait_for(lambda: not worker_pods(cluster, ns, name), timeout=60, what="the workers to go")
    assert patch(cluster, ns, name, {"runPolicy": {"suspend": False}}).returncode == 0
    wait_phase(cluster, ns, name, "Running", timeout=90)
    pods = running_pods(cluster, ns, name)
    assert len(pods) == 2 and pools_of(cluster, pods) == {MEGA_POOL}
    assert job(cluster, ns, name)["status"]["pool"] == MEGA_POOL


def test_a_waiting_job_is_fixed_by_editing_it_and_kubectl_get_says_why_it_waits(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
) -> None:
    ns, name = quiet_namespace, "edit-pending"
    # A machine type no pool of the local cluster has.
    cluster.apply(training_job(name, 1, machine_type="a2-highgpu-4g"), ns)
    wait_for(
        lambda: reason_column(cluster, ns, name) == "NoMatchingPool",
        timeout=60,
        what="REASON NoMatchingPool in kubectl get tj",
    )
    assert phase(cluster, ns, name) == "Pending"
    wide = cluster.kubectl("get", "tj", "-n", ns, "-o", "wide").stdout
    assert "REASON" in wide.splitlines()[0] and "NoMatchingPool" in wide

    fixed = patch(cluster, ns, name, {"machineType": "a2-highgpu-8g"})
    assert fixed.returncode == 0, fixed.stderr
    wait_phase(cluster, ns, name, "Running", timeout=90)
    assert reason_column(cluster, ns, name) == "Admitted"
    assert len(running_pods(cluster, ns, name)) == 1
