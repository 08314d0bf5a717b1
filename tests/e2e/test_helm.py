"""The Helm chart on the real control plane: install, least-privilege RBAC proven by running the
operator on the chart's ServiceAccount token, GitOps stability of the examples, upgrade with
changed values, uninstall.

No container runs here (kwok plays the kubelets), so the chart's own operator pod is scheduled
and reported Running but executes nothing; the operator under test runs out of cluster as a
process, authenticated only by a token of the chart's ServiceAccount. The tests run in file
order: install first, uninstall last.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.controllers.base import RESYNC_SECONDS
from ringmaster.controllers.trainingjob import WAIT_REFRESH_SECONDS
from tests.e2e.conftest import session_operator_paused
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import (
    A100_POOL,
    condition,
    events_of,
    job,
    pools_of,
    training_job,
    wait_phase,
    worker_pods,
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ringmaster"
RELEASE = "rm"
SYSTEM_NS = "ringmaster-system"
FULLNAME = "rm-ringmaster"  # the chart's fullname for release "rm"
SA_USER = f"system:serviceaccount:{SYSTEM_NS}:{FULLNAME}"
RINGMASTER_CRDS = [p.name.removesuffix(".yaml") for p in sorted((REPO / "crds").glob("*.yaml"))]
KOPF_CRDS = ["clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"]
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"


class Helm:
    def __init__(self, cluster: Cluster, home: Path) -> None:
        self.binary = str(cluster.bin_dir / "helm")
        self.kubeconfig = str(cluster.kubeconfig)
        # Its own config, cache and data: no repositories, nothing of the user's.
        self.env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=240,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result


def exists(cluster: Cluster, *args: str) -> bool:
    return cluster.kubectl("get", *args, check=False).returncode == 0


@pytest.fixture(scope="module")
def helm(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(cluster, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def installed(cluster: Cluster, helm: Helm) -> Iterator[dict[str, Any]]:
    """`helm install` with the defaults, timed; uninstalled at the end if a test failed first."""
    before = {crd: exists(cluster, "crd", crd) for crd in RINGMASTER_CRDS + KOPF_CRDS}
    start = time.monotonic()
    result = helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        SYSTEM_NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "120s",
    )
    info = {"stdout": result.stdout, "seconds": time.monotonic() - start, "crds_before": before}
    yield info
    if helm("status", RELEASE, "-n", SYSTEM_NS, check=False).returncode == 0:
        helm("uninstall", RELEASE, "-n", SYSTEM_NS, "--wait", check=False)


@pytest.fixture(scope="module")
def sa_kubeconfig(cluster: Cluster, installed: dict[str, Any], tmp_path_factory) -> Path:
    """A kubeconfig with the admin's server and CA and a token of the chart's ServiceAccount."""
    token = cluster.kubectl(
        "create", "token", FULLNAME, "-n", SYSTEM_NS, "--duration=2h"
    ).stdout.strip()
    admin = json.loads(
        cluster.kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout
    )
    (server,) = admin["clusters"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server["cluster"]}],
        "users": [{"name": "ringmaster", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "ringmaster"}}],
        "current-context": "sa",
    }
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def sa_operator(
    sa_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """`ringmaster run` authenticated only as the chart's ServiceAccount, reading the chart's
    catalog ConfigMap as the Deployment does; the only operator acting meanwhile (the session's,
    started by a file this worker ran before, would race it for the same jobs: a gang Running,
    then restarted under the test's feet)."""
    process = OperatorProcess(
        sa_kubeconfig,
        tmp_path_factory.mktemp("sa-op") / "operator.log",
        ("--catalog-configmap", f"{SYSTEM_NS}/{FULLNAME}-catalog"),
    )
    with session_operator_paused(request.config):
        process.start()
        try:
            yield process
        finally:
            process.stop()


# An HTTP 403, not a log timestamp's milliseconds ("11:42:17,403"): a line whose time ended in
# 403 was taken for a refusal (three e2e tests failed on one, 2026-11-29).
_STATUS_403 = re.compile(r"(?<![,.:\d])403(?!\d)")


def forbidden_lines(log: Path) -> list[str]:
    """Every trace of a refused request in the operator's log (kopf and kubernetes-client)."""
    words = ("forbidden", "not enough permissions")
    return [
        line
        for line in log.read_text().splitlines()
        if any(w in line.lower() for w in words) or _STATUS_403.search(line)
    ]


def test_install_creates_the_crds_and_the_operator_objects(
    cluster: Cluster, helm: Helm, installed: dict[str, Any]
):
    print(f"helm install --wait: {installed['seconds']:.1f}s")
    for crd in RINGMASTER_CRDS + KOPF_CRDS:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=30s")
    if not any(installed["crds_before"].values()):
        # A fresh cluster: Helm created them (from the chart's crds/).
        for crd in RINGMASTER_CRDS:
            labels = cluster.get_json("crd", crd)["metadata"]["labels"]
            assert labels["app.kubernetes.io/part-of"] == "ringmaster"
    deployment = cluster.get_json("deployment", FULLNAME, "-n", SYSTEM_NS)
    assert deployment["status"].get("availableReplicas") == 1  # --wait waited for it
    for kind in ("serviceaccount", "service"):
        assert cluster.get_json(kind, "-n", SYSTEM_NS, "-l", INSTANCE)["items"], kind
    for kind in ("clusterrole", "clusterrolebinding"):
        names = [o["metadata"]["name"] for o in cluster.get_json(kind, "-l", INSTANCE)["items"]]
        assert names == [FULLNAME], (kind, names)
    pod = cluster.get_json("pods", "-n", SYSTEM_NS, "-l", INSTANCE)["items"][0]
    # The apiserver accepted the locked-down pod as rendered (admission would strip nothing).
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert "kubectl apply" in installed["stdout"]  # NOTES.txt: how to try the examples
    status = json.loads(helm("status", RELEASE, "-n", SYSTEM_NS, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"


def test_the_service_account_is_denied_what_it_does_not_need(cluster: Cluster, installed):
    def can(*args: str) -> bool:
        result = cluster.kubectl("auth", "can-i", *args, f"--as={SA_USER}", check=False)
        return result.stdout.strip() == "yes"

    assert can("create", "pods", "-n", "default")
    assert can("patch", "trainingjobs.ringmaster.dev", "--subresource=status", "-n", "default")
    assert can("list", "nodes")
    assert can("get", f"configmaps/{FULLNAME}-catalog", "-n", SYSTEM_NS)  # the catalog only
    # A PoolProfile: its payload ConfigMap by name, and the degraded label on nodes.
    assert can("patch", "configmaps/ringmaster-profile-payload", "-n", "default")
    assert can("patch", "nodes")
    for denied in (
        ("get", "configmaps/someone-elses", "-n", SYSTEM_NS),
        ("list", "configmaps", "-n", SYSTEM_NS),
        ("get", "secrets", "-n", SYSTEM_NS),
        ("list", "secrets", "-A"),
        ("get", "configmaps", "-n", "default"),
        ("patch", "configmaps/someone-elses", "-n", "default"),
        ("get", "configmaps/ringmaster-profile-payload", "-n", "default"),
        ("patch", "trainingjobs.ringmaster.dev", "-n", "default"),  # spec: never
        ("delete", "nodes"),
        ("update", "nodes"),
        ("create", "pods", "--subresource=exec", "-n", "default"),
        ("create", "clusterrolebindings"),
        ("create", "serviceaccounts", "--subresource=token", "-n", SYSTEM_NS),
        ("delete", "customresourcedefinitions"),
        ("update", "pods", "-n", "default"),
    ):
        assert not can(*denied), denied


def test_the_operator_on_the_service_accounts_token_runs_the_trainingjob_flow(
    cluster: Cluster, sa_operator: OperatorProcess, quiet_namespace: str
):
    ns = quiet_namespace
    start = time.monotonic()
    cluster.apply(training_job("rbac", 2), namespace=ns)
    wait_phase(cluster, ns, "rbac", "Running", timeout=90)
    print(f"admitted and Running in {time.monotonic() - start:.1f}s")
    pods = worker_pods(cluster, ns, "rbac")
    assert len(pods) == 2
    assert pools_of(cluster, pods) == {A100_POOL}
    obj = job(cluster, ns, "rbac")
    assert obj["status"]["plan"]["strategy"] == "Ring"
    assert condition(obj, "Schedulable")["status"] == "True"
    assert events_of(cluster, ns, "rbac"), "no Events: posting them was refused?"
    # Ownership with blockOwnerDeletion passed admission; deletion cascades through the GC.
    cluster.kubectl("delete", "trainingjob", "rbac", "-n", ns, "--wait=true", "--timeout=60s")
    wait_for(lambda: not worker_pods(cluster, ns, "rbac"), timeout=60, what="workers collected")
    assert not forbidden_lines(sa_operator.log_path), "\n".join(
        forbidden_lines(sa_operator.log_path)
    )


def test_the_operator_on_the_service_accounts_token_runs_a_pool_profile(
    cluster: Cluster, sa_operator: OperatorProcess, quiet_namespace: str
):
    """A PoolProfile's run under the chart's rights: its payload ConfigMap (created, then patched
    by name), its Service and pods, and their deletion with the profile."""
    ns = quiet_namespace
    profile = {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "PoolProfile",
        "metadata": {"name": "b200"},
        "spec": {"pool": "b200-highgpu-8g", "image": "pytorch:2.5", "quick": True},
    }
    cluster.apply(profile, namespace=ns)

    def run_pods() -> list[dict[str, Any]]:
        selector = "ringmaster.dev/poolprofile=b200"
        return cluster.get_json("pods", "-n", ns, "-l", selector)["items"]

    wait_for(
        lambda: len([p for p in run_pods() if not p["spec"].get("schedulingGates")]) == 2,
        timeout=60,
        what="the run's pods through the admission gate",
    )
    payload = cluster.get_json("configmap", "ringmaster-profile-payload", "-n", ns)
    assert "def main" in payload["data"]["payload.py"]
    cluster.kubectl("delete", "poolprofile", "b200", "-n", ns, "--wait=true", "--timeout=60s")
    wait_for(lambda: not run_pods(), timeout=60, what="the run's pods collected")
    assert not forbidden_lines(sa_operator.log_path), "\n".join(
        forbidden_lines(sa_operator.log_path)
    )


def _example_objects() -> list[tuple[str, str]]:
    out = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((doc["kind"], doc["metadata"]["name"]))
    return out


ACCELERATORS = ("nvidia.com/gpu", "google.com/tpu")


def _accelerator_pods_elsewhere(cluster: Cluster, ns: str) -> list[str]:
    """Pods outside `ns` that hold accelerators: an earlier test's, still going away. While
    they go, the examples that wait for room are admitted one by one, which is the operator
    acting on a changed cluster, not churn."""
    held = []
    for pod in cluster.get_json("pods", "--all-namespaces")["items"]:
        done = pod["status"].get("phase") in ("Succeeded", "Failed")
        if pod["metadata"]["namespace"] == ns or done:
            continue
        limits = [(c.get("resources") or {}).get("limits") or {} for c in pod["spec"]["containers"]]
        if any(name in each for each in limits for name in ACCELERATORS):
            held.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return held


def _pods_in_transition(cluster: Cluster, ns: str) -> list[str]:
    """Pods some component has yet to act on: going away, bound but not started (kwok), or
    neither gated nor judged by the scheduler yet."""
    moving = []
    for pod in cluster.get_json("pods", "-n", ns)["items"]:
        spec, status = pod["spec"], pod.get("status") or {}
        scheduled = {c["type"]: c for c in status.get("conditions") or []}.get("PodScheduled")
        judged = scheduled is not None and scheduled.get("status") == "False"
        pending = status.get("phase", "Pending") == "Pending"
        if (
            pod["metadata"].get("deletionTimestamp")
            or (pending and spec.get("nodeName"))
            or (pending and not spec.get("schedulingGates") and not judged)
        ):
            moving.append(pod["metadata"]["name"])
    return moving


def _pod_versions(cluster: Cluster, ns: str) -> dict[str, str]:
    pods = cluster.get_json("pods", "-n", ns)["items"]
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods}


def _waits_for_room(obj: dict) -> bool:
    """A job the admission queue holds for room: its status carries the capacity it saw."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "Schedulable" and c.get("reason") == "InsufficientCapacity"
        for c in conditions
    )


def _versions(cluster: Cluster, ns: str) -> dict[tuple[str, str], str]:
    return _resource_versions(_objects(cluster, ns))


def _resource_versions(objs: dict[tuple[str, str], dict]) -> dict[tuple[str, str], str]:
    return {key: obj["metadata"]["resourceVersion"] for key, obj in objs.items()}


def _objects(cluster: Cluster, ns: str) -> dict[tuple[str, str], dict]:
    objs = cluster.get_json("-f", str(REPO / "examples"), "-n", ns)["items"]
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def _status_changes(before: dict[tuple[str, str], dict], after: dict[tuple[str, str], dict]) -> str:
    """What the operator rewrote: each changed object's status, before and after."""
    lines = []
    for key, obj in after.items():
        old = before.get(key)
        if old is None or old["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]:
            continue
        lines.append(f"{key}: {json.dumps(old.get('status'), sort_keys=True)}")
        lines.append(f"  -> {json.dumps(obj.get('status'), sort_keys=True)}")
    return "\n".join(lines)


def _without_cluster_evidence(obj: dict) -> str:
    """An object's status without what other jobs of the cluster set: the step calibrated on
    the jobs observed on the same machine type (status.plan.calibration, calibratedStepSeconds)
    moves when those jobs, in other tests' namespaces, come or go, not on an apply of these."""
    status = json.loads(json.dumps(obj.get("status") or {}))
    plan = status.get("plan") or {}
    for field in ("calibration", "calibratedStepSeconds"):
        plan.pop(field, None)
    return json.dumps(status, sort_keys=True)


def test_examples_applied_twice_server_side_cause_no_diff_and_no_churn(
    cluster: Cluster, sa_operator: OperatorProcess, quiet_namespace: str
):
    """What Argo CD and Flux see: after the operator has reacted, a second server-side apply
    of the same manifests changes nothing, `kubectl diff` is empty, and the operator does not
    start writing again."""
    ns = quiet_namespace
    wait_for(
        lambda: not _accelerator_pods_elsewhere(cluster, ns),
        timeout=120,
        interval=1,
        what="earlier tests' accelerator pods gone",
    )
    apply = ("apply", "--server-side", "--field-manager=gitops", "-n", ns, "-f")
    cluster.kubectl(*apply, str(REPO / "examples"))
    assert set(_versions(cluster, ns)) == set(_example_objects())

    def settled(quiet: float = 10.0) -> dict[tuple[str, str], dict]:
        """Wait until no example changes for `quiet` seconds while none of their pods is between
        states (under load the scheduler or kwok can take longer than `quiet` to move a pod,
        and the operator rightly writes the job's status when it moves); the examples then.
        While an example waits for room, its "N fit now" is rewritten at most every
        WAIT_REFRESH_SECONDS, checked on each resync: a pod's move is written up to that late,
        so the pods must have been still that long too."""
        last = _objects(cluster, ns)
        pods = _pod_versions(cluster, ns)
        since = pods_since = time.monotonic()
        refresh = WAIT_REFRESH_SECONDS + RESYNC_SECONDS + 2.0

        def still() -> bool:
            nonlocal last, since, pods, pods_since
            now, now_pods = _objects(cluster, ns), _pod_versions(cluster, ns)
            if _resource_versions(now) != _resource_versions(last) or _pods_in_transition(
                cluster, ns
            ):
                last, since = now, time.monotonic()
            if now_pods != pods:
                pods, pods_since = now_pods, time.monotonic()
            waits = any(_waits_for_room(obj) for obj in now.values())
            return time.monotonic() - since >= quiet and (
                not waits or time.monotonic() - pods_since >= refresh
            )

        wait_for(still, timeout=240, interval=1, what="the operator to settle")
        return last

    start = time.monotonic()
    # Reacted to: each example has a status (phase) from the operator.
    for kind, name in _example_objects():
        wait_for(
            lambda k=kind, n=name: cluster.get_json(k, n, "-n", ns).get("status", {}).get("phase"),
            timeout=90,
            what=f"{kind} {name} to get a phase",
        )
    settled_objects = settled()
    before = _resource_versions(settled_objects)
    print(f"examples reconciled and settled in {time.monotonic() - start:.1f}s")

    second = cluster.kubectl(*apply, str(REPO / "examples"))
    assert "serverside-applied" in second.stdout
    assert _versions(cluster, ns) == before, "the second apply rewrote an object"
    diff = cluster.kubectl(
        "diff",
        "--server-side",
        "--field-manager=gitops",
        "-n",
        ns,
        "-f",
        str(REPO / "examples"),
        check=False,
    )
    assert diff.returncode == 0 and diff.stdout == "", diff.stdout + diff.stderr
    time.sleep(10)  # a reconcile triggered by the second apply would land within this
    after = _objects(cluster, ns)
    rewritten = {
        key
        for key, obj in after.items()
        if obj["metadata"]["resourceVersion"] != before.get(key)
        and _without_cluster_evidence(obj) != _without_cluster_evidence(settled_objects[key])
    }
    assert not rewritten, "the operator wrote again after a no-op apply:\n" + _status_changes(
        settled_objects, after
    )

    # The operator never writes spec or metadata of users' objects: outside the status
    # subresource, only the applier manages fields.
    for kind, name in _example_objects():
        obj = cluster.get_json(kind, name, "-n", ns, "--show-managed-fields")
        managers = obj["metadata"]["managedFields"]
        main = {m["manager"] for m in managers if not m.get("subresource")}
        assert main == {"gitops"}, (kind, name, managers)
    assert not forbidden_lines(sa_operator.log_path)


def test_upgrade_with_changed_values(cluster: Cluster, helm: Helm, installed):
    team = "rm-team-a"
    cluster.kubectl("create", "namespace", team, check=False)
    old = cluster.get_json("deployment", FULLNAME, "-n", SYSTEM_NS)
    overrides = {"machineTypes": {"a2-highgpu-8g": {"pricePerHourUSD": 21.5}}}
    start = time.monotonic()
    helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        SYSTEM_NS,
        "--reuse-values",
        "--set-json",
        "replicaCount=2",
        "--set-json",
        f'watchNamespaces=["{team}"]',
        "--set-json",
        f"catalog={json.dumps({'overrides': overrides})}",
        "--wait",
        "--timeout",
        "120s",
    )
    print(f"helm upgrade --wait: {time.monotonic() - start:.1f}s")
    new = cluster.get_json("deployment", FULLNAME, "-n", SYSTEM_NS)
    args = new["spec"]["template"]["spec"]["containers"][0]["args"]
    assert new["spec"]["replicas"] == 2
    assert f"--namespace={team}" in args and f"--peering={FULLNAME}" in args
    assert new["metadata"]["generation"] > old["metadata"]["generation"]
    catalog = cluster.get_json("configmap", f"{FULLNAME}-catalog", "-n", SYSTEM_NS)
    assert yaml.safe_load(catalog["data"]["catalog.yaml"]) == overrides
    assert exists(cluster, "kopfpeering", FULLNAME, "-n", team)
    # Namespaced rights now come from a RoleBinding in the watched namespace only.
    assert exists(cluster, "rolebinding", FULLNAME, "-n", team)

    def can(*args: str) -> bool:
        result = cluster.kubectl("auth", "can-i", *args, f"--as={SA_USER}", check=False)
        return result.stdout.strip() == "yes"

    assert can("create", "pods", "-n", team)
    assert not can("create", "pods", "-n", "default")
    assert can("list", "nodes")
    assert can("patch", f"kopfpeerings.kopf.dev/{FULLNAME}", "-n", team)
    assert not can("patch", "kopfpeerings.kopf.dev/someone-else", "-n", team)

    # Wrong values are refused before anything changes.
    bad = helm("upgrade", RELEASE, str(CHART), "-n", SYSTEM_NS, "--reuse-values",
               "--set-json", "replicaCount=0", check=False)  # fmt: skip
    assert bad.returncode != 0 and "/replicaCount" in bad.stderr, bad.stderr
    history = json.loads(helm("history", RELEASE, "-n", SYSTEM_NS, "-o", "json").stdout)
    assert [h["status"] for h in history] == ["superseded", "deployed"]


def test_uninstall_leaves_no_operator_objects(cluster: Cluster, helm: Helm, installed):
    start = time.monotonic()
    helm("uninstall", RELEASE, "-n", SYSTEM_NS, "--wait", "--timeout", "120s")
    print(f"helm uninstall --wait: {time.monotonic() - start:.1f}s")
    namespaced = "deployments,replicasets,pods,services,serviceaccounts,configmaps,rolebindings"
    cluster_wide = "clusterroles,clusterrolebindings,clusterkopfpeerings"

    def leftovers() -> list[str]:
        found = cluster.get_json(namespaced + ",kopfpeerings", "-A", "-l", INSTANCE)["items"]
        found += cluster.get_json(cluster_wide, "-l", INSTANCE)["items"]
        return [f"{o['kind']}/{o['metadata']['name']}" for o in found]

    # Except the cluster calibration (helm.sh/resource-policy: keep): what finished jobs taught
    # the engine survives a reinstall, as Helm keeps a PersistentVolumeClaim so marked.
    kept = [f"ConfigMap/{RELEASE}-ringmaster-calibration"]
    wait_for(lambda: leftovers() == kept, timeout=60, what=f"no objects left: {leftovers()}")
    cluster.kubectl("delete", "configmap", f"{RELEASE}-ringmaster-calibration", "-n", SYSTEM_NS)
    # By Helm's rule for crds/, the CRDs (and so every user's objects) stay.
    for crd in RINGMASTER_CRDS:
        assert exists(cluster, "crd", crd)
