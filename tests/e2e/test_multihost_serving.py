"""Replicas across hosts on the real control plane and the real LeaderWorkerSet controller
(built from its Go module by hack/cluster-tools.sh, run by `ringmaster cluster up --lws`):
without LeaderWorkerSet a two-host endpoint waits and creates nothing; with it, it becomes one
LeaderWorkerSet whose groups the operator's admission lets through whole, each pod on a host of
its own of the H100 pool; scaling adds a whole group; deleting the endpoint removes everything."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.localcluster.cluster import Binaries, LocalCluster
from ringmaster.localcluster.lws import LocalLeaderWorkerSet
from tests.e2e.kube import Cluster, OperatorProcess, pool_grown_to, wait_for
from tests.e2e.test_inferenceendpoint import condition, events_of, patch_spec, status

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "inferenceendpoint-llama31-405b-bf16-2x-h100.yaml"
POOL = "h100-highgpu-8g"
POOL_LABEL = "cloud.google.com/gke-nodepool"
SELECTOR = "ringmaster.dev/inferenceendpoint"
NAME = "llama405"
GROUP_SET = f"{NAME}-group"  # the LeaderWorkerSet, named apart from the endpoint's Service
# Two groups of two hosts need four H100 hosts: the session's cluster has the pool's default.
HOSTS = 4


@pytest.fixture
def h100_hosts(cluster: Cluster) -> Iterator[None]:
    with pool_grown_to(cluster, POOL, HOSTS, POOL_LABEL):
        yield


def local_lws(cluster: Cluster) -> LocalLeaderWorkerSet:
    if not LocalLeaderWorkerSet.available(cluster.bin_dir):
        reason = f"no LeaderWorkerSet in {cluster.bin_dir} (hack/cluster-tools.sh builds it)"
        if os.environ.get("RINGMASTER_E2E_REQUIRE_LWS") or os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    local = LocalCluster(Binaries.locate(str(cluster.bin_dir)), cluster.kubeconfig.parent.name)
    assert local.kubeconfig == cluster.kubeconfig, "LeaderWorkerSet runs beside a cluster only"
    return LocalLeaderWorkerSet(local)


def restart_after_uninstall(operator: OperatorProcess) -> None:
    """Deleting LeaderWorkerSet's CRDs while the operator watches them ends the operator: kopf
    makes a watch error fatal (kopf #509) and leaves the restart to the Deployment, after which
    it starts without the API (docs/install.md). The session's operator is restarted here as the
    Deployment would, so the tests after this one find it running."""
    operator.stop()
    operator.start()


def group_pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    pods = cluster.get_json("pods", "-n", ns, "-l", f"{SELECTOR}={NAME}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def running_on_distinct_hosts(cluster: Cluster, ns: str, count: int) -> list[dict[str, Any]]:
    pods = group_pods(cluster, ns)
    placed = [
        p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
    ]
    if len(pods) != count or len(placed) != count:
        return []
    return pods


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def controllers_of(obj: dict[str, Any]) -> list[str]:
    return [
        f"{r['kind']}/{r['name']}"
        for r in obj["metadata"].get("ownerReferences") or []
        if r.get("controller")
    ]


def assert_services_apart(cluster: Cluster, ns: str, name: str = NAME) -> None:
    """The endpoint's ClusterIP Service (the endpoint its controller) and LeaderWorkerSet's
    headless Service of the set (the set its controller), each under its own name."""
    ours = cluster.get_json("service", name, "-n", ns)
    assert controllers_of(ours) == [f"InferenceEndpoint/{name}"]
    assert ours["spec"]["type"] == "ClusterIP" and ours["spec"]["clusterIP"] != "None"
    # LeaderWorkerSet's controller makes its Service on its own reconcile, which may come after
    # the pods are Ready (kwok readies them at once), so wait for it rather than race it.
    wait_for(
        lambda: (
            cluster.kubectl("get", "service", f"{name}-group", "-n", ns, check=False).returncode
            == 0
        ),
        timeout=60,
        what=f"LeaderWorkerSet's headless Service {name}-group",
    )
    theirs = cluster.get_json("service", f"{name}-group", "-n", ns)
    assert controllers_of(theirs) == [f"LeaderWorkerSet/{name}-group"]
    assert theirs["spec"]["clusterIP"] == "None"


def test_a_two_host_endpoint_waits_for_leader_worker_set_then_runs_as_groups(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str, h100_hosts: None
) -> None:
    ns = quiet_namespace
    lws = local_lws(cluster)
    lws.down(uninstall=True)  # the cluster as if LeaderWorkerSet were never there
    restart_after_uninstall(operator)
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = NAME
    body["spec"]["replicas"] = 1
    cluster.apply(body, ns)

    # Without LeaderWorkerSet: a clear reason, an Event, and nothing created.
    def waiting() -> bool:
        ready = condition({"status": status(cluster, ns, NAME)}, "Ready")
        return bool(ready and ready["reason"] == "LeaderWorkerSetNotInstalled")

    wait_for(waiting, what=f"{NAME} waiting for LeaderWorkerSet ({status(cluster, ns, NAME)})")
    assert status(cluster, ns, NAME)["phase"] == "Pending"
    # The Event goes out after the status that records it (kopf posts Events from a queue).
    wait_for(
        lambda: any(
            e["reason"] == "LeaderWorkerSetNotInstalled" for e in events_of(cluster, ns, NAME)
        ),
        timeout=30,
        what="the LeaderWorkerSetNotInstalled Event",
    )
    assert cluster.get_json("deployments", "-n", ns)["items"] == []
    assert group_pods(cluster, ns) == []

    lws.up()
    try:
        # One LeaderWorkerSet of groups of two, its pods admitted whole, a host each.
        pods = wait_for(
            lambda: running_on_distinct_hosts(cluster, ns, 2),
            timeout=120,
            what=f"one group of two running pods ({operator.log_path})",
        )
        group = cluster.get_json("leaderworkersets", GROUP_SET, "-n", ns)
        assert group["spec"]["replicas"] == 1
        assert group["spec"]["leaderWorkerTemplate"]["size"] == 2
        assert cluster.get_json("deployments", "-n", ns)["items"] == []
        hosts = {p["spec"]["nodeName"] for p in pods}
        assert len(hosts) == 2
        pools = {cluster.get_json("node", h)["metadata"]["labels"][POOL_LABEL] for h in hosts}
        assert pools == {POOL}
        for pod in pods:
            env = env_of(pod)
            assert env["RINGMASTER_TENSOR_PARALLEL"] == "8"
            assert env["RINGMASTER_PIPELINE_PARALLEL"] == "2"
            assert env["RINGMASTER_EXPERT_PARALLEL"] == "1"
            assert env["RINGMASTER_GROUP_SIZE"] == "2"
            assert env["RINGMASTER_LEADER_ADDRESS"] == "$(LWS_LEADER_ADDRESS)"
            # LeaderWorkerSet's webhook put its own variables first, so the references expand.
            assert list(env)[:3] == ["LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"]
            # The leader's address resolves through LeaderWorkerSet's own headless Service.
            assert env["LWS_LEADER_ADDRESS"].startswith(f"{GROUP_SET}-0.{GROUP_SET}.{ns}")
            assert not pod["spec"].get("schedulingGates")
        # Ready from the group's readiness (its leader's probe); one replica where the engine
        # asks for four keeps the endpoint Degraded with CapacityMet=False and the numbers.
        wait_for(
            lambda: (
                status(cluster, ns, NAME).get("readyReplicas") == 1
                and (condition({"status": status(cluster, ns, NAME)}, "Ready") or {}).get("reason")
                == "ReplicasReady"
            ),
            timeout=90,
            what=f"{NAME} Ready with one group ({status(cluster, ns, NAME)})",
        )
        assert_services_apart(cluster, ns)
        capacity = condition({"status": status(cluster, ns, NAME)}, "CapacityMet")
        assert capacity is not None and capacity["reason"] == "TooFewReplicas"
        assert status(cluster, ns, NAME)["plan"]["layout"].startswith(
            "TP 8 inside each host x PP 2 across hosts"
        )

        # Scaling adds a whole group: four pods, four hosts.
        patch_spec(cluster, ns, NAME, '{"spec": {"replicas": 2}}')
        pods = wait_for(
            lambda: running_on_distinct_hosts(cluster, ns, 4),
            timeout=120,
            what="two groups of two running pods",
        )
        assert len({p["spec"]["nodeName"] for p in pods}) == 4
        wait_for(
            lambda: status(cluster, ns, NAME).get("readyReplicas") == 2,
            timeout=90,
            what=f"{NAME} with two ready groups ({status(cluster, ns, NAME)})",
        )

        # Deleting the endpoint removes the LeaderWorkerSet, its groups and the Service.
        cluster.kubectl("delete", "inferenceendpoint", NAME, "-n", ns)
        wait_for(
            lambda: (
                not cluster.get_json("leaderworkersets", "-n", ns)["items"]
                and not group_pods(cluster, ns)
            ),
            timeout=120,
            what="the LeaderWorkerSet and its pods gone",
        )
    finally:
        lws.down(uninstall=True)
        restart_after_uninstall(operator)


@pytest.fixture(scope="module")
def leader_worker_set(cluster: Cluster, operator: OperatorProcess) -> Iterator[None]:
    """LeaderWorkerSet running for the tests below (once: each start and uninstall costs tens
    of seconds); uninstalled afterwards, with the session's operator restarted as its
    Deployment would be (restart_after_uninstall)."""
    lws = local_lws(cluster)
    lws.up()
    try:
        yield
    finally:
        lws.down(uninstall=True)
        restart_after_uninstall(operator)


def one_host(body: dict[str, Any]) -> dict[str, Any]:
    """The 405B endpoint on one host of 8 H100: FP8 weights, TP 8."""
    spec = body["spec"]
    spec["accelerator"]["perReplica"] = 8
    spec["precision"] = "FP8"
    return body


ROUNDS = 20


def test_the_endpoints_service_and_leader_worker_sets_never_share_a_name(
    operator: OperatorProcess, cluster: Cluster, leader_worker_set: None, h100_hosts: None
) -> None:
    """The create race of issue 45: in fresh namespaces, whichever of the operator and
    LeaderWorkerSet's controller creates its Service first, both Services exist under their own
    names with their own controllers, and every endpoint has a status (none is refused)."""
    namespaces = [f"svc-{i}-{os.getpid() % 10000}" for i in range(ROUNDS)]
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = NAME
    body["spec"]["replicas"] = 1
    try:
        for ns in namespaces:
            cluster.kubectl("create", "namespace", ns)
            cluster.apply(body, ns)

        def settled(ns: str) -> bool:
            services = {
                s["metadata"]["name"] for s in cluster.get_json("services", "-n", ns)["items"]
            }
            return services == {NAME, GROUP_SET} and bool(status(cluster, ns, NAME).get("plan"))

        for ns in namespaces:
            wait_for(lambda ns=ns: settled(ns), timeout=60, what=f"both Services in {ns}")
            assert_services_apart(cluster, ns)
            ready = condition({"status": status(cluster, ns, NAME)}, "Ready")
            assert ready is not None and ready["reason"] != "ApplyRefused", ready
        assert "Only one reference can have Controller" not in operator.log_path.read_text()
    finally:
        for ns in namespaces:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_an_endpoint_moves_from_one_host_to_groups_and_back_keeping_its_service(
    operator: OperatorProcess,
    cluster: Cluster,
    quiet_namespace: str,
    leader_worker_set: None,
    h100_hosts: None,
) -> None:
    ns = quiet_namespace
    body = one_host(yaml.safe_load(EXAMPLE.read_text()))
    body["metadata"]["name"] = NAME
    body["spec"]["replicas"] = 1
    cluster.apply(body, ns)

    def serving(kind: str) -> bool:
        s = status(cluster, ns, NAME)
        ready = condition({"status": s}, "Ready") or {}
        workloads = {
            "Deployment": cluster.get_json("deployments", "-n", ns)["items"],
            "LeaderWorkerSet": cluster.get_json("leaderworkersets", "-n", ns)["items"],
        }
        others = [w for k, w in workloads.items() if k != kind and w]
        return ready.get("reason") == "ReplicasReady" and bool(workloads[kind]) and not others

    wait_for(lambda: serving("Deployment"), timeout=120, what=f"one host ({operator.log_path})")
    uid = cluster.get_json("service", NAME, "-n", ns)["metadata"]["uid"]
    assert status(cluster, ns, NAME)["plan"]["hostsPerReplica"] == 1

    patch_spec(
        cluster, ns, NAME, '{"spec": {"accelerator": {"perReplica": 16}, "precision": "BF16"}}'
    )
    wait_for(lambda: serving("LeaderWorkerSet"), timeout=120, what="groups of two hosts")
    assert_services_apart(cluster, ns)
    service = cluster.get_json("service", NAME, "-n", ns)
    assert service["metadata"]["uid"] == uid  # the same Service throughout: clients keep it
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"

    patch_spec(
        cluster, ns, NAME, '{"spec": {"accelerator": {"perReplica": 8}, "precision": "FP8"}}'
    )
    wait_for(lambda: serving("Deployment"), timeout=120, what="back on one host")
    service = cluster.get_json("service", NAME, "-n", ns)
    assert service["metadata"]["uid"] == uid
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in service["spec"]["selector"]
    wait_for(
        lambda: not cluster.kubectl("get", "service", GROUP_SET, "-n", ns, check=False).stdout,
        timeout=60,
        what="LeaderWorkerSet's headless Service gone with the set",
    )


WIDE_EP = REPO / "examples" / "inferenceendpoint-deepseek-r1-wide-ep-h200.yaml"
WIDE_POOL = "h200-ultragpu-8g"  # two hosts by default: one group of two


def test_a_wide_expert_parallel_endpoint_runs_as_one_group_with_its_layout_in_the_env(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str, leader_worker_set: None
) -> None:
    """Issue 42: DeepSeek-R1 with attention data parallelism 16 and its experts over both
    hosts (DeepEP) becomes one LeaderWorkerSet group of two pods, one a host of the H200 pool,
    each told the layout it was planned with."""
    ns = quiet_namespace
    body = yaml.safe_load(WIDE_EP.read_text())
    name = body["metadata"]["name"]
    cluster.apply(body, ns)
    selector = f"{SELECTOR}={name}"

    def group() -> list[dict[str, Any]]:
        pods = cluster.get_json("pods", "-n", ns, "-l", selector)["items"]
        running = [
            p for p in pods if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
        ]
        return pods if len(pods) == 2 and len(running) == 2 else []

    pods = wait_for(group, timeout=120, what=f"one group of two running pods ({operator.log_path})")
    lws_set = cluster.get_json("leaderworkersets", f"{name}-group", "-n", ns)
    assert lws_set["spec"]["leaderWorkerTemplate"]["size"] == 2
    hosts = {p["spec"]["nodeName"] for p in pods}
    assert len(hosts) == 2
    pools = {cluster.get_json("node", h)["metadata"]["labels"][POOL_LABEL] for h in hosts}
    assert pools == {WIDE_POOL}
    for pod in pods:
        env = env_of(pod)
        assert env["RINGMASTER_TENSOR_PARALLEL"] == "1"
        assert env["RINGMASTER_ATTENTION_DATA_PARALLEL"] == "16"
        assert env["RINGMASTER_EXPERT_PARALLEL"] == "16"
        assert env["RINGMASTER_EXPERT_DISPATCH"] == "DeepEP"
        assert env["RINGMASTER_SERVING_ENGINE"] == "SGLang"
        assert env["RINGMASTER_GROUP_SIZE"] == "2"
        assert int(env["RINGMASTER_MAX_NUM_SEQS"]) > 2048  # the 16 groups' batches together
    plan = status(cluster, ns, name)["plan"]
    assert plan["layout"].startswith("attention DP 16 x TP 1, EP 16 across 2 hosts")
    assert (plan["attentionDataParallel"], plan["expertParallel"]) == (16, 16)
    assert plan["expertDispatch"] == "DeepEP"
    cluster.kubectl("delete", "inferenceendpoint", name, "-n", ns)
    wait_for(
        lambda: not cluster.get_json("pods", "-n", ns, "-l", selector)["items"],
        timeout=120,
        what="the group's pods gone",
    )


def test_a_replica_shape_the_pool_cannot_build_waits_and_creates_nothing(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str, leader_worker_set: None
) -> None:
    """12 x H100 is planned as 3 hosts of 4 (a3-highgpu-4g); the cluster's H100 pool has hosts
    of 8: the endpoint waits UnsupportedHostShape and creates no set, Service or pod."""
    ns = quiet_namespace
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = NAME
    body["spec"]["accelerator"]["perReplica"] = 12
    body["spec"]["parallelism"] = {"tensor": 4, "pipeline": 3}
    cluster.apply(body, ns)

    def waiting() -> dict[str, Any] | None:
        ready = condition({"status": status(cluster, ns, NAME)}, "Ready")
        return ready if ready and ready["reason"] == "UnsupportedHostShape" else None

    ready = wait_for(waiting, what=f"{NAME} UnsupportedHostShape ({status(cluster, ns, NAME)})")
    assert "3 hosts x 4 nvidia-h100-80gb" in ready["message"]
    # kopf posts Events after the status write that carries the condition.
    wait_for(
        lambda: any(e["reason"] == "UnsupportedHostShape" for e in events_of(cluster, ns, NAME)),
        timeout=30,
        what="the UnsupportedHostShape Event",
    )
    for kind in ("leaderworkersets", "deployments", "services", "pods"):
        assert cluster.get_json(kind, "-n", ns)["items"] == [], kind
