"""Reduction servers on the real control plane: reducer pools on the CPU node pool, sized by the
bandwidth rule, wired into the workers, scaled, and refused room."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import (
    condition,
    events_of,
    job,
    phase,
    pool_size,
    pools_of,
    training_job,
    wait_phase,
    worker_pods,
)

REPO = Path(__file__).resolve().parents[2]
CPU_POOL = "reducers"  # 32 n1-highcpu-16 hosts in the local cluster


def reducer_job(name: str, workers: int, pool: str | None = None) -> dict[str, Any]:
    manifest = training_job(name, workers)
    communication: dict[str, Any] = {"strategy": "ReductionServer"}
    if pool:
        communication["reductionServer"] = {"poolName": pool}
    manifest["spec"]["communication"] = communication
    return manifest


def shared_pool(name: str, replicas: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "reducer:1", "scaleDownGracePeriodSeconds": 30}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "ReductionServerPool",
        "metadata": {"name": name},
        "spec": spec,
    }


def reducer_pods(cluster: Cluster, ns: str, pool: str) -> list[dict[str, Any]]:
    return cluster.get_json("pods", "-n", ns, "-l", f"ringmaster.dev/reductionserverpool={pool}")[
        "items"
    ]


def rsp(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get_json("reductionserverpool", name, "-n", ns)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_auto_picks_reducers_for_a_communication_bound_job_and_they_go_with_it(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    example = REPO / "examples" / "trainingjob-bert-large-auto.yaml"
    cluster.kubectl("apply", "-n", ns, "-f", str(example))
    name = cluster.get_json("-f", str(example), "-n", ns)["metadata"]["name"]
    wait_phase(cluster, ns, name, "Running", timeout=90)
    status = job(cluster, ns, name)["status"]
    assert status["plan"]["strategy"] == "ReductionServer"
    alternatives = status["plan"]["alternatives"]
    assert alternatives["ReductionServer"] < alternatives["Ring"]
    pool = status["reductionServerPool"]
    owned = rsp(cluster, ns, pool)
    assert owned["metadata"]["ownerReferences"][0]["name"] == name
    # Sized by the bandwidth rule, which the plan reports; every reducer on its own CPU host.
    wanted = status["plan"]["reducersWanted"]
    assert owned["status"]["replicas"] == wanted == status["plan"]["reducers"]
    reducers = reducer_pods(cluster, ns, pool)
    assert len(reducers) == wanted
    assert pools_of(cluster, reducers) == {CPU_POOL}
    assert len({p["spec"]["nodeName"] for p in reducers}) == wanted
    assert owned["status"]["aggregateBandwidthGbps"] >= 8 * 100  # the workers' aggregate
    # Workers know where the reducers are.
    worker_env = env_of(worker_pods(cluster, ns, name)[0])
    assert worker_env["RINGMASTER_REDUCTION_SERVERS"].split(",") == owned["status"]["endpoints"]
    assert worker_env["DMLC_NUM_SERVER"] == str(wanted)

    cluster.kubectl("delete", "trainingjob", name, "-n", ns)
    wait_for(
        lambda: not cluster.get_json("pods,statefulsets,reductionserverpools", "-n", ns)["items"],
        timeout=90,
        what="the job's workers, pool and reducers to be collected",
    )


def test_a_shared_pool_is_divided_among_its_running_jobs_and_scaling_it_replans_them(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    cluster.apply(shared_pool("shared"), ns)
    cluster.apply(reducer_job("big", 4, pool="shared"), ns)
    cluster.apply(reducer_job("small", 2, pool="shared"), ns)
    wait_phase(cluster, ns, "big", "Running", timeout=90)
    wait_phase(cluster, ns, "small", "Running", timeout=90)

    def settled() -> tuple[dict[str, Any], dict[str, Any]] | None:
        # Both run at once: each is planned with half the pool, and the pool is sized for that.
        plans = {n: job(cluster, ns, n)["status"]["plan"] for n in ("big", "small")}
        pool = rsp(cluster, ns, "shared")
        if any(p.get("reducerShare") != 0.5 for p in plans.values()):
            return None
        if pool["status"].get("replicas") != plans["big"]["reducersWanted"]:
            return None
        return plans, pool

    plans, pool = wait_for(settled, timeout=60, what="both jobs planned at half the pool")
    wanted = {n: p["reducersWanted"] for n, p in plans.items()}
    assert wanted["big"] > wanted["small"]
    assert sorted(pool["status"]["boundJobs"]) == ["big", "small"]
    assert sorted(pool["status"]["runningJobs"]) == ["big", "small"]
    before = job(cluster, ns, "big")["status"]["plan"]

    # A lost reducer: the jobs say so and keep running; the StatefulSet replaces it as soon as
    # a host is free. Cordoning the free CPU hosts keeps it lost long enough to be seen.
    reducers = reducer_pods(cluster, ns, "shared")
    busy = {p["spec"]["nodeName"] for p in reducers[1:]}
    cpu_nodes = cluster.get_json("nodes", "-l", f"cloud.google.com/gke-nodepool={CPU_POOL}")
    free = [n["metadata"]["name"] for n in cpu_nodes["items"] if n["metadata"]["name"] not in busy]
    cluster.kubectl("cordon", *free)
    try:
        cluster.kubectl("delete", "pod", reducers[0]["metadata"]["name"], "-n", ns)
        lost = wait_for(
            lambda: (
                (c := condition(job(cluster, ns, "big"), "ReductionServerReady"))
                and c["status"] == "False"
                and c
            ),
            timeout=30,
            what="big to report its lost reducer",
        )
        assert lost["reason"] == "ReducersNotReady"
        assert "ReducersLost" in events_of(cluster, ns, "big")
        assert phase(cluster, ns, "big") == "Running" and len(worker_pods(cluster, ns, "big")) == 4
    finally:
        cluster.kubectl("uncordon", *free)
    wait_for(
        lambda: condition(job(cluster, ns, "big"), "ReductionServerReady")["status"] == "True",
        timeout=60,
        what="big's reducers ready again",
    )

    cluster.kubectl("scale", "reductionserverpool/shared", "-n", ns, "--replicas=2")

    def replanned() -> dict[str, Any] | None:
        plan = job(cluster, ns, "big")["status"]["plan"]
        return plan if plan["reducers"] == 2 else None

    after = wait_for(replanned, timeout=60, what="big's plan to use 2 reducers")
    assert rsp(cluster, ns, "shared")["spec"]["replicas"] == 2
    assert after["stepSeconds"] > before["stepSeconds"]  # too few reducers cost time
    wait_for(
        lambda: len(reducer_pods(cluster, ns, "shared")) == 2,
        timeout=60,
        what="the pool to shrink to 2 reducers",
    )


def test_a_pool_with_no_room_on_its_cpu_nodes_leaves_the_job_waiting_and_says_why(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    hosts = pool_size(cluster, CPU_POOL)
    cluster.apply(shared_pool("too-big", replicas=hosts + 8), ns)  # one reducer per host
    cluster.apply(reducer_job("starved", 2, pool="too-big"), ns)

    def unschedulable() -> dict[str, Any] | None:
        ready = condition(rsp(cluster, ns, "too-big"), "Ready")
        return ready if ready and ready["reason"] == "Unschedulable" else None

    ready = wait_for(unschedulable, timeout=90, what="the pool to report Unschedulable")
    assert "cannot be scheduled" in ready["message"]
    schedulable = wait_for(
        lambda: (
            (c := condition(job(cluster, ns, "starved"), "Schedulable"))
            and c["reason"] == "ReducersNotReady"
            and "cannot be scheduled" in c["message"]
            and c
        ),
        timeout=60,
        what="the job to wait for its reducers",
    )
    assert schedulable["status"] == "False"
    assert phase(cluster, ns, "starved") == "Pending"
    assert worker_pods(cluster, ns, "starved") == []
    # Shrinking the pool to what fits lets the job start.
    patch = json.dumps({"spec": {"replicas": hosts // 2}})
    cluster.kubectl(
        "patch", "reductionserverpool", "too-big", "-n", ns, "--type=merge", "-p", patch
    )
    wait_phase(cluster, ns, "starved", "Running", timeout=90)
