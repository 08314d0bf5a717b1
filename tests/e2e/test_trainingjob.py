"""The TrainingJob controller on the real control plane: kube-scheduler places the pods, the
garbage collector cascades deletion, kwok plays the kubelets; the operator runs as a process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.kube import Cluster, OperatorProcess, wait_for

REPO = Path(__file__).resolve().parents[2]
A100_POOL = "a100-highgpu-8g"  # 8 hosts of 8 A100s in the local cluster


def training_job(
    name: str,
    workers: int,
    *,
    per_worker: int = 8,
    machine_type: str | None = "a2-highgpu-8g",
    exit_code: int | None = None,
    run_for: str = "1s",
    **run_policy: Any,
) -> dict[str, Any]:
    template: dict[str, Any] = {"image": "trainer:1", "command": ["python", "train.py"]}
    if exit_code is not None:
        template["metadata"] = {
            "annotations": {
                "sim.ringmaster.dev/exit-code": str(exit_code),
                "sim.ringmaster.dev/run-for": run_for,
            }
        }
    spec: dict[str, Any] = {
        "workers": workers,
        "accelerator": {"type": "nvidia-tesla-a100", "perWorker": per_worker},
        "model": {
            "parameters": "340M",
            "computeSecondsPerStep": 0.2,
            "batchSizePerAccelerator": 32,
        },
        "communication": {"strategy": "Ring"},
        "template": template,
        "runPolicy": run_policy,
    }
    if machine_type:
        spec["machineType"] = machine_type
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def pool_size(cluster: Cluster, pool: str) -> int:
    """Hosts in a pool: the tests work on the default local cluster and on a bigger one."""
    nodes = cluster.get_json("nodes", "-l", f"cloud.google.com/gke-nodepool={pool}")
    return len(nodes["items"])


def job(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get_json("trainingjob", name, "-n", ns)


def phase(cluster: Cluster, ns: str, name: str) -> str | None:
    return job(cluster, ns, name).get("status", {}).get("phase")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next(
        (c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None
    )


def worker_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return cluster.get_json("pods", "-n", ns, "-l", f"ringmaster.dev/trainingjob={name}")["items"]


def wait_phase(cluster: Cluster, ns: str, name: str, wanted: str, timeout: float = 60) -> None:
    wait_for(
        lambda: phase(cluster, ns, name) == wanted,
        timeout=timeout,
        what=f"{name} to be {wanted} (now {phase(cluster, ns, name)})",
    )


def pools_of(cluster: Cluster, pods: list[dict[str, Any]]) -> set[str]:
    nodes = {p["spec"]["nodeName"] for p in pods}
    return {
        cluster.get_json("node", n)["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
        for n in nodes
    }


def events_of(cluster: Cluster, ns: str, name: str) -> list[str]:
    items = cluster.get_json("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")[
        "items"
    ]
    return [e["reason"] for e in items]


def test_examples_run_on_their_pools_with_the_plan_in_status(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    for example in ("trainingjob-bert-large-auto.yaml", "trainingjob-resnet50-tpu-v4.yaml"):
        cluster.kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / example))
    bert = cluster.get_json(
        "-f", str(REPO / "examples" / "trainingjob-bert-large-auto.yaml"), "-n", ns
    )["metadata"]["name"]
    resnet = cluster.get_json(
        "-f", str(REPO / "examples" / "trainingjob-resnet50-tpu-v4.yaml"), "-n", ns
    )["metadata"]["name"]
    wait_phase(cluster, ns, bert, "Running")
    wait_phase(cluster, ns, resnet, "Running")

    bert_pods = worker_pods(cluster, ns, bert)
    assert len(bert_pods) == job(cluster, ns, bert)["spec"]["workers"]
    assert pools_of(cluster, bert_pods) == {A100_POOL}
    assert pools_of(cluster, worker_pods(cluster, ns, resnet)) == {"tpu-v4-2x2x4"}
    # Bound by kube-scheduler, each pod on its own host for whole-host workers: the host the
    # admission named for its rank (the pod is pinned there).
    assert len({p["spec"]["nodeName"] for p in bert_pods}) == len(bert_pods)
    hosts = job(cluster, ns, bert)["status"]["admission"]["hosts"]
    assert {
        int(p["metadata"]["labels"]["ringmaster.dev/rank"]): p["spec"]["nodeName"]
        for p in bert_pods
    } == dict(enumerate(hosts))

    plan = job(cluster, ns, bert)["status"]["plan"]
    assert plan["machineType"] == "a2-highgpu-8g"
    assert plan["stepSeconds"] > 0 and plan["costPerHourUSD"] > 0
    assert set(plan["alternatives"]) == {"Ring", "ReductionServer"}
    assert plan["strategy"] in plan["alternatives"]
    tpu_plan = job(cluster, ns, resnet)["status"]["plan"]
    assert tpu_plan["strategy"] == "Ring" and set(tpu_plan["alternatives"]) == {"Ring"}

    table = cluster.kubectl("get", "tj", "-n", ns, "-o", "wide").stdout
    bert_row = next(line for line in table.splitlines() if line.startswith(bert))
    assert "Running" in bert_row and plan["strategy"] in bert_row
    assert f"{plan['stepSeconds']:g}"[:4] in bert_row
    assert {"Admitted", "StrategyChosen", "Running"} <= set(events_of(cluster, ns, bert))

    metrics = operator.metrics()
    assert f'ringmaster_predicted_step_seconds{{name="{bert}",namespace="{ns}"}}' in metrics


def test_a_job_too_big_for_the_free_capacity_waits_and_is_admitted_when_another_finishes(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    hosts = pool_size(cluster, A100_POOL)
    cluster.apply(training_job("first", hosts, exit_code=0, run_for="10s"), ns)
    wait_phase(cluster, ns, "first", "Running")
    cluster.apply(training_job("second", 2), ns)
    waiting = wait_for(
        lambda: (c := condition(job(cluster, ns, "second"), "Schedulable")) and c,
        what="second's Schedulable condition",
    )
    assert (waiting["status"], waiting["reason"]) == ("False", "InsufficientCapacity")
    assert "0 fit now" in waiting["message"]
    assert phase(cluster, ns, "second") == "Pending"
    assert worker_pods(cluster, ns, "second") == []
    wait_phase(cluster, ns, "first", "Succeeded", timeout=60)
    wait_phase(cluster, ns, "second", "Running", timeout=60)
    assert condition(job(cluster, ns, "second"), "Schedulable")["status"] == "True"


def test_two_competing_gangs_never_split_a_pool(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    each = pool_size(cluster, A100_POOL) * 3 // 4  # two of them cannot both fit
    both = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [training_job("left", each), training_job("right", each)],
    }
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(both))

    def one_running() -> list[str] | None:
        phases = {n: phase(cluster, ns, n) for n in ("left", "right")}
        running = [n for n, p in phases.items() if p == "Running"]
        return running if len(running) == 1 and "Pending" in phases.values() else None

    winner = wait_for(one_running, what="one gang running, the other pending")[0]
    loser = "right" if winner == "left" else "left"
    assert len(worker_pods(cluster, ns, winner)) == each
    assert worker_pods(cluster, ns, loser) == []  # not a single pod of a partial gang
    cluster.kubectl("delete", "trainingjob", winner, "-n", ns)
    wait_phase(cluster, ns, loser, "Running", timeout=90)
    assert len(worker_pods(cluster, ns, loser)) == each


def test_a_failing_worker_restarts_the_gang_until_the_backoff_limit(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(training_job("crashy", 2, exit_code=3, backoffLimit=1), ns)
    wait_phase(cluster, ns, "crashy", "Failed", timeout=90)
    failed = job(cluster, ns, "crashy")
    assert failed["status"]["restarts"] == 1
    reason = condition(failed, "Failed")
    assert reason["reason"] == "BackoffLimitExceeded" and "exit code 3" in reason["message"]
    assert {"Restarted", "BackoffLimitExceeded"} <= set(events_of(cluster, ns, "crashy"))


def test_suspend_deletes_the_workers_and_resume_runs_them_again(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(training_job("pausable", 2), ns)
    wait_phase(cluster, ns, "pausable", "Running")
    patch = json.dumps({"spec": {"runPolicy": {"suspend": True}}})
    cluster.kubectl("patch", "trainingjob", "pausable", "-n", ns, "--type=merge", "-p", patch)
    wait_phase(cluster, ns, "pausable", "Suspended")
    wait_for(lambda: worker_pods(cluster, ns, "pausable") == [], what="workers deleted")
    patch = json.dumps({"spec": {"runPolicy": {"suspend": False}}})
    cluster.kubectl("patch", "trainingjob", "pausable", "-n", ns, "--type=merge", "-p", patch)
    wait_phase(cluster, ns, "pausable", "Running")
    assert len(worker_pods(cluster, ns, "pausable")) == 2


def test_deleting_a_job_removes_everything_it_created(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(training_job("short-lived", 2), ns)
    wait_phase(cluster, ns, "short-lived", "Running")
    owned = cluster.get_json("pods,services", "-n", ns)["items"]
    assert len(owned) == 3
    assert all(o["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob" for o in owned)
    cluster.kubectl("delete", "trainingjob", "short-lived", "-n", ns)
    wait_for(
        lambda: cluster.get_json("pods,services", "-n", ns)["items"] == [],
        what="the garbage collector to remove the pods and the Service",
    )


def test_jobs_no_pool_can_take_wait_with_a_reason(
    operator: OperatorProcess, cluster: Cluster, namespace: str
):
    manifest = training_job("no-such-pool", 1, machine_type=None)
    manifest["spec"]["accelerator"]["type"] = "nvidia-tesla-v100"
    cluster.apply(manifest, namespace)
    schedulable = wait_for(
        lambda: condition(job(cluster, namespace, "no-such-pool"), "Schedulable"),
        what="the Schedulable condition",
    )
    assert (schedulable["status"], schedulable["reason"]) == ("False", "NoMatchingPool")
    assert "nvidia-tesla-v100" in schedulable["message"]
    assert phase(cluster, namespace, "no-such-pool") == "Pending"


def test_a_worker_larger_than_any_node_is_told_so_and_does_not_block_the_queue(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    manifest = training_job("oversized", 1)
    # a2-highgpu-8g nodes have about 680Gi allocatable: no node could ever hold this worker.
    manifest["spec"]["template"]["resources"] = {"requests": {"memory": "4000Gi"}}
    cluster.apply(manifest, ns)
    schedulable = wait_for(
        lambda: (c := condition(job(cluster, ns, "oversized"), "Schedulable")) and c,
        what="the Schedulable condition",
    )
    assert (schedulable["status"], schedulable["reason"]) == ("False", "WorkerLargerThanNode")
    assert "memory 4000Gi >" in schedulable["message"] and A100_POOL in schedulable["message"]
    assert worker_pods(cluster, ns, "oversized") == []
    warnings = cluster.get_json(
        "events", "-n", ns, "--field-selector", "involvedObject.name=oversized,type=Warning"
    )["items"]
    assert [e["reason"] for e in warnings] == ["WorkerLargerThanNode"]
    # It never fits, so it holds nothing: a job behind it on the same pool starts.
    cluster.apply(training_job("behind", 1, exit_code=0, run_for="20s"), ns)
    wait_phase(cluster, ns, "behind", "Running", timeout=60)


def test_an_operator_killed_mid_admission_creates_no_duplicates(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    operator.stop()
    try:
        cluster.apply(training_job("survivor", 6), ns)
        operator.start()
        wait_for(
            lambda: worker_pods(cluster, ns, "survivor"), timeout=30, what="the first worker pod"
        )
        operator.stop(kill=True)  # SIGKILL, possibly half way through creating the gang
    finally:
        operator.start()
    wait_phase(cluster, ns, "survivor", "Running")
    before = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in worker_pods(cluster, ns, "survivor")
    }
    assert sorted(before) == [f"survivor-worker-{r}" for r in range(6)]
    operator.stop()
    operator.start()
    # A restarted operator adopts what runs: same pods, none recreated, none added.
    wait_for(lambda: len(operator.metrics()) > 0, what="metrics after restart")
    after = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in worker_pods(cluster, ns, "survivor")
    }
    assert after == before
    assert job(cluster, ns, "survivor")["status"].get("restarts") in (None, 0)


def test_a_host_cordoned_before_its_worker_started_sends_the_gang_elsewhere(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    """The operator recorded an admission on two named hosts and died before creating the pods;
    meanwhile one host was cordoned. Restarted, it does not leave a pod pinned to a host that
    cannot take it: the gang starts again on other hosts."""
    ns = quiet_namespace
    nodes = cluster.get_json("nodes", "-l", f"cloud.google.com/gke-nodepool={A100_POOL}")
    chosen = sorted(n["metadata"]["name"] for n in nodes["items"])[:2]
    operator.stop()
    try:
        cluster.apply(training_job("moved", 2), ns)
        admission = {"pool": A100_POOL, "time": "2026-11-23T00:00:00Z", "attempt": 0}
        patch = {"status": {"phase": "Admitted", "admission": {**admission, "hosts": chosen}}}
        cluster.kubectl(
            "patch",
            "trainingjob",
            "moved",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(patch),
        )
        cluster.kubectl("cordon", chosen[1])
    finally:
        operator.start()
    try:
        wait_phase(cluster, ns, "moved", "Running")
        status = job(cluster, ns, "moved")["status"]
        # A host lost before its worker started is no fault of the job: no attempt is spent.
        assert status["requeues"] == 1 and not status.get("restarts")
        assert status["admission"]["attempt"] == 1
        assert chosen[1] not in status["admission"]["hosts"]
        bound = {p["spec"]["nodeName"] for p in worker_pods(cluster, ns, "moved")}
        assert bound == set(status["admission"]["hosts"])
        reasons = events_of(cluster, ns, "moved")
        assert "Requeued" in reasons and "Restarted" not in reasons
    finally:
        cluster.kubectl("uncordon", chosen[1])
