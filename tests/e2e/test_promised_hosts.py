"""Hosts admission promised to a gang, on the real control plane (issue 34).

- The operator's own serving replicas never take a promised host: a TrainingJob that needs the
  whole T4 pool and the T4 InferenceEndpoint example, applied together, round after round in
  fresh namespaces: no job fails, no attempt is charged, and each side runs or waits with numbers.
- A host lost to a foreign pod before the worker started restarts the gang at no attempt.
- A job the engine cannot plan creates nothing; suspend releases the job's own reducers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import condition, job, pool_size, training_job, worker_pods

REPO = Path(__file__).resolve().parents[2]
T4_POOL = "t4-serving"
T4_ENDPOINT = REPO / "examples" / "inferenceendpoint-resnet50-int8-t4.yaml"
A100_POOL = "a100-highgpu-8g"
GATE = "ringmaster.dev/admission"
RACE_ROUNDS = int(os.environ.get("RINGMASTER_E2E_RACE_ROUNDS", "10"))


def t4_gang(workers: int) -> dict[str, Any]:
    body = training_job("t4-gang", workers, per_worker=1, machine_type=None, backoffLimit=0)
    body["spec"]["accelerator"]["type"] = "nvidia-tesla-t4"
    return body


def serving_pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return cluster.get_json("pods", "-n", ns, "-l", "ringmaster.dev/role=server")["items"]


def gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])


def pod_events(cluster: Cluster, ns: str, reason: str) -> list[dict[str, Any]]:
    items = cluster.get_json("events", "-n", ns, "--field-selector", f"reason={reason}")["items"]
    return list(items)


def assert_no_attempt_charged(body: dict[str, Any]) -> None:
    status = body.get("status") or {}
    assert status.get("phase") != "Failed", status
    assert not status.get("restarts"), status
    assert not status.get("requeues"), status  # its hosts were lost to nobody


def settled(cluster: Cluster, ns: str) -> str | None:
    """'gang' when the gang runs and every replica waits at its gate with why; 'serving' when
    the replicas run and the gang waits with the numbers; 'both' when they share the pool."""
    gang = job(cluster, ns, "t4-gang")
    assert_no_attempt_charged(gang)
    pods = serving_pods(cluster, ns)
    if not pods:
        return None
    waiting = [p for p in pods if gated(p)]
    bound = [p for p in pods if p["spec"].get("nodeName")]
    if len(waiting) + len(bound) < len(pods):
        return None  # a replica between its gate and its node
    phase = (gang.get("status") or {}).get("phase")
    if phase == "Running":
        hosts = set(gang["status"]["admission"]["hosts"])
        # No replica on a host the gang holds, ever.
        assert not {p["spec"]["nodeName"] for p in bound} & hosts
        held = {e["involvedObject"]["name"] for e in pod_events(cluster, ns, "WaitingForRoom")}
        if {p["metadata"]["name"] for p in waiting} <= held:
            return "gang" if not bound else "both"
        return None
    schedulable = condition(gang, "Schedulable")
    if phase == "Pending" and schedulable and schedulable["reason"] == "InsufficientCapacity":
        assert "fit now" in schedulable["message"], schedulable
        if not waiting:
            return "serving"
    return None


@pytest.fixture
def round_namespace(cluster: Cluster) -> Iterator[Any]:
    """Fresh namespaces, each gone (its pods with it) before the next round starts."""
    made: list[str] = []

    def new() -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        cluster.kubectl("create", "namespace", name)
        made.append(name)
        return name

    yield new
    for name in made:
        cluster.kubectl("delete", "namespace", name, "--timeout=120s", check=False)


def test_a_gang_and_the_operators_own_serving_pods_never_share_a_promised_host(
    operator: OperatorProcess, cluster: Cluster, round_namespace: Any
):
    hosts = pool_size(cluster, T4_POOL)
    together = yaml.safe_dump_all([t4_gang(hosts), yaml.safe_load(T4_ENDPOINT.read_text())])
    outcomes = []
    for _ in range(RACE_ROUNDS):
        ns = round_namespace()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=together)  # one apply, as seen
        outcome = wait_for(
            lambda ns=ns: settled(cluster, ns), timeout=60, what=f"the race in {ns} to settle"
        )
        time.sleep(2)  # and it stays so: nothing restarts or fails a moment later
        assert settled(cluster, ns) == outcome
        outcomes.append(outcome)
        cluster.kubectl("delete", "namespace", ns, "--timeout=120s")
    print(f"\nrace outcomes over {RACE_ROUNDS} rounds: {outcomes}")


@contextlib.contextmanager
def scheduler_paused(cluster: Cluster) -> Iterator[None]:
    """kube-scheduler of the local cluster stopped (SIGSTOP) for the block: pods stay unbound."""
    pid_file = cluster.kubeconfig.parent / "pids" / "kube-scheduler.pid"
    if not pid_file.exists():
        pytest.skip("needs the local cluster's kube-scheduler process (ringmaster cluster)")
    pid = int(pid_file.read_text().strip())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_foreign_pod_on_a_named_host_restarts_the_gang_with_no_attempt_spent(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    body = training_job("squeezed", 2, backoffLimit=0)
    with scheduler_paused(cluster):
        cluster.apply(body, ns)
        first = wait_for(
            lambda: (job(cluster, ns, "squeezed").get("status") or {}).get("admission"),
            what="the gang's admission",
        )
        wait_for(lambda: len(worker_pods(cluster, ns, "squeezed")) == 2, what="its pods")
        taken = first["hosts"][1]
        # Someone else's pod, bound straight to worker 1's host (no scheduler involved).
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "squatter"},
                "spec": {
                    "nodeName": taken,
                    "containers": [
                        {
                            "name": "c",
                            "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
            ns,
        )
        requeued = wait_for(
            lambda: (job(cluster, ns, "squeezed").get("status") or {}).get("requeues"),
            what="the gang to be requeued",
        )
        assert requeued == 1
    wait_for(
        lambda: (job(cluster, ns, "squeezed").get("status") or {}).get("phase") == "Running",
        timeout=60,
        what="the next attempt to run",
    )
    status = job(cluster, ns, "squeezed")["status"]
    assert not status.get("restarts") and status["admission"]["attempt"] == 1
    assert taken not in status["admission"]["hosts"]
    reasons = [e["reason"] for e in pod_events(cluster, ns, "Requeued")]
    assert reasons == ["Requeued"]
    assert not pod_events(cluster, ns, "Restarted")
    pods = worker_pods(cluster, ns, "squeezed")
    assert {p["metadata"]["annotations"]["ringmaster.dev/attempt"] for p in pods} == {"1"}


def test_a_job_the_engine_cannot_plan_creates_nothing(
    operator: OperatorProcess, cluster: Cluster, namespace: str
):
    ns = namespace
    body = training_job("no-layout", 2, machine_type=None)
    spec = body["spec"]
    spec["accelerator"] = {"type": "nvidia-h100-80gb", "perWorker": 8}
    spec["model"] = {
        # 30 heads, 3 layers, 2,050 tokens: tensor 1 or 2 (heads and the host's 8), pipeline at
        # most 2 (uneven stages still hold a layer each side), context 1 (2 x context must divide
        # the sequence and the GPUs), so at least 4 data-parallel replicas, and no layout splits a
        # global batch of 97 (prime) among them.
        "architecture": {
            "layers": 3,
            "hiddenSize": 3840,
            "attentionHeads": 30,
            "sequenceLength": 2050,
            "vocabSize": 32000,
        }
    }
    spec["parallelism"] = {"globalBatchSize": 97}
    spec.pop("communication")
    cluster.apply(body, ns)
    schedulable = wait_for(
        lambda: condition(job(cluster, ns, "no-layout"), "Schedulable"),
        what="a Schedulable condition",
    )
    assert (schedulable["status"], schedulable["reason"]) == ("False", "PlanFailed")
    assert "no layout divides" in schedulable["message"]
    time.sleep(3)  # nothing follows a moment later either
    status = job(cluster, ns, "no-layout")["status"]
    assert status["phase"] == "Pending" and not status.get("admission")
    assert worker_pods(cluster, ns, "no-layout") == []
    assert condition(job(cluster, ns, "no-layout"), "Planned")["reason"] == "PlanFailed"


def test_suspend_releases_the_jobs_own_reducers_and_resume_brings_them_back(
    operator: OperatorProcess, cluster: Cluster, namespace: str
):
    ns = namespace
    body = training_job("rs", 2)
    body["spec"]["communication"] = {
        "strategy": "ReductionServer",
        "reductionServer": {"replicas": 3},
    }
    cluster.apply(body, ns)

    def reducer_pods() -> list[dict[str, Any]]:
        items = cluster.get_json("pods", "-n", ns, "-l", "ringmaster.dev/role=reducer")["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    wait_for(
        lambda: job(cluster, ns, "rs").get("status", {}).get("phase") == "Running",
        timeout=90,
        what="the job to run with its reducers",
    )
    assert len(reducer_pods()) == 3
    cluster.kubectl(
        "patch",
        "trainingjob",
        "rs",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": true}}}',
    )
    wait_for(
        lambda: job(cluster, ns, "rs").get("status", {}).get("phase") == "Suspended",
        what="the job to be Suspended",
    )
    wait_for(lambda: not reducer_pods(), timeout=60, what="its reducers to go")
    schedulable = condition(job(cluster, ns, "rs"), "Schedulable")
    assert (schedulable["status"], schedulable["reason"]) == ("False", "Suspended")
    pool = cluster.get_json("reductionserverpool", "rs-reducers", "-n", ns)
    assert pool["spec"]["replicas"] == 0
    cluster.kubectl(
        "patch",
        "trainingjob",
        "rs",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": false}}}',
    )
    wait_for(
        lambda: job(cluster, ns, "rs").get("status", {}).get("phase") == "Running",
        timeout=90,
        what="the resumed job to run",
    )
    assert len(reducer_pods()) == 3
