"""Chaos for serving, as test_chaos is for training: a multi-host endpoint is scaled, shrunk and
switched between one host and groups of hosts while the operator is killed with SIGKILL, against
the real LeaderWorkerSet controller. After every round the endpoint settles, and then: one
workload kind runs it (never a Deployment and a LeaderWorkerSet both), no object has two
controllers, no pod is left at the admission gate (a group's grant cut short by a kill is
completed), each group's pods sit on hosts of their own, and the status says what runs.

Replay a run with RINGMASTER_SERVING_CHAOS_SEED=<seed> (printed on failure); the rounds are
RINGMASTER_SERVING_CHAOS_ROUNDS (10).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.manifests.naming import ADMISSION_GATE
from tests.e2e.kube import Cluster, OperatorProcess, pool_grown_to, wait_for
from tests.e2e.test_inferenceendpoint import condition, status
from tests.e2e.test_multihost_serving import EXAMPLE, POOL, POOL_LABEL, SELECTOR, local_lws

SEED_ENV = "RINGMASTER_SERVING_CHAOS_SEED"
ROUNDS = int(os.environ.get("RINGMASTER_SERVING_CHAOS_ROUNDS", "10"))
NAME = "chaos405"
HOSTS = 6  # three groups of two hosts, or six one-host replicas at most
SETTLE_SECONDS = 120.0
# (hosts per replica, replicas): the shapes a round moves the endpoint to.
SHAPES = [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]


@pytest.fixture
def seed() -> int:
    return int(os.environ.get(SEED_ENV) or random.randrange(1_000_000))


@pytest.fixture
def six_h100_hosts(cluster: Cluster) -> Iterator[None]:
    with pool_grown_to(cluster, POOL, HOSTS, POOL_LABEL):
        yield


def spec_patch(hosts: int, replicas: int) -> str:
    """405B on one host of 8 H100 in FP8, or on two hosts of 8 in BF16."""
    per_replica, precision = (8, "FP8") if hosts == 1 else (16, "BF16")
    return (
        f'{{"spec": {{"replicas": {replicas}, "precision": "{precision}", '
        f'"accelerator": {{"perReplica": {per_replica}}}}}}}'
    )


def live(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in items if not o["metadata"].get("deletionTimestamp")]


def controllers(obj: dict[str, Any]) -> int:
    return sum(1 for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller"))


def settled(cluster: Cluster, ns: str, hosts: int, replicas: int) -> str | None:
    """None once the endpoint serves `replicas` replicas of `hosts` hosts as it should, else
    what is still off (for the timeout's message)."""
    s = status(cluster, ns, NAME)
    ready = condition({"status": s}, "Ready") or {}
    if ready.get("reason") != "ReplicasReady" or s.get("readyReplicas") != replicas:
        return f"Ready {ready.get('reason')}, {s.get('readyReplicas')}/{replicas} ready"
    if s.get("replicas") != replicas or (s.get("plan") or {}).get("hostsPerReplica") != hosts:
        return f"status says {s.get('replicas')} x {(s.get('plan') or {}).get('hostsPerReplica')}"
    deployments = live(cluster.get_json("deployments", "-n", ns)["items"])
    groups = live(cluster.get_json("leaderworkersets", "-n", ns)["items"])
    if (hosts > 1 and deployments) or (hosts == 1 and groups):
        return "the workload of the other kind is still there"
    pods = live(cluster.get_json("pods", "-n", ns, "-l", f"{SELECTOR}={NAME}")["items"])
    if len(pods) != replicas * hosts:
        return f"{len(pods)} pods, {replicas * hosts} wanted"
    return None


def check_invariants(cluster: Cluster, ns: str, hosts: int) -> None:
    kinds = ("deployments", "leaderworkersets", "services", "statefulsets", "pods", "hpa")
    for kind in kinds:
        for obj in cluster.get_json(kind, "-n", ns)["items"]:
            assert controllers(obj) <= 1, f"{kind} {obj['metadata']['name']} has two controllers"
    pods = live(cluster.get_json("pods", "-n", ns, "-l", f"{SELECTOR}={NAME}")["items"])
    gated = [
        p["metadata"]["name"]
        for p in pods
        if any(g.get("name") == ADMISSION_GATE for g in p["spec"].get("schedulingGates") or [])
    ]
    assert not gated, f"pods left at the admission gate: {gated}"
    if hosts > 1:
        by_group: dict[str, list[str]] = {}
        for pod in pods:
            key = pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-key", "")
            by_group.setdefault(key, []).append(pod["spec"].get("nodeName") or "")
        for key, nodes in by_group.items():
            assert len(nodes) == hosts and all(nodes), f"group {key} is {nodes}"
            assert len(set(nodes)) == hosts, f"group {key} shares a host: {nodes}"
    ours = cluster.get_json("service", NAME, "-n", ns)
    assert ours["spec"]["clusterIP"] != "None"


def test_a_multi_host_endpoint_stays_true_while_the_operator_is_killed(
    crds_installed: Cluster,
    quiet_namespace: str,
    no_session_operator: None,
    six_h100_hosts: None,
    seed: int,
    tmp_path: Path,
) -> None:
    cluster, ns = crds_installed, quiet_namespace
    rng = random.Random(seed)
    lws = local_lws(cluster)
    lws.up()
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log")
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = NAME
    body["spec"]["replicas"] = 1
    history: list[str] = []
    try:
        operator.start()
        cluster.apply(body, ns)
        shape = (2, 1)
        for round_ in range(ROUNDS):
            shape = rng.choice([s for s in SHAPES if s != shape])
            hosts, replicas = shape
            cluster.kubectl(
                "patch", "inferenceendpoint", NAME, "-n", ns, "--type", "merge",
                "-p", spec_patch(hosts, replicas),
            )  # fmt: skip
            for _ in range(rng.randint(1, 2)):
                pause = rng.uniform(0.0, 3.0)
                time.sleep(pause)
                operator.stop(kill=True)
                history.append(f"round {round_}: {replicas} x {hosts} hosts, killed {pause:.2f}s")
                time.sleep(rng.uniform(0.0, 1.0))
                operator.start()
            try:
                wait_for(
                    lambda h=hosts, r=replicas: settled(cluster, ns, h, r) is None,
                    SETTLE_SECONDS,
                    interval=0.5,
                    what=f"{replicas} x {hosts} hosts",
                )
            except AssertionError:
                raise AssertionError(
                    f"(replay: {SEED_ENV}={seed}) round {round_}: "
                    f"{settled(cluster, ns, hosts, replicas)}\n" + "\n".join(history)
                ) from None
            check_invariants(cluster, ns, hosts)
    finally:
        operator.stop()
        lws.down(uninstall=True)
    assert "Only one reference can have Controller" not in operator.log_path.read_text()
