"""What an operator of the platform reads: `kubectl get` says why each resource is where it is
(the REASON column of tj, ie and rsp), and `ringmaster cluster pools` needs nothing but the
cluster's kubeconfig."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ringmaster.localcluster.cluster import kubeconfig_path
from tests.e2e.conftest import E2E_CLUSTER_NAME, REPO
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_admission import load_example

# kind's short name, the example, and the condition its REASON column reads.
KINDS = [
    ("tj", "trainingjob-bert-large-auto.yaml", "Schedulable"),
    ("ie", "inferenceendpoint-resnet50-int8-t4.yaml", "Ready"),
    ("rsp", "reductionserverpool-shared.yaml", "Ready"),
]


def column(cluster: Cluster, short: str, ns: str, name: str, title: str) -> str:
    header, *rows = cluster.kubectl("get", short, "-n", ns).stdout.splitlines()
    row = next(r for r in rows if r.split()[0] == name)
    titles = header.split()
    assert titles[:3] == ["NAME", "PHASE", "REASON"], header
    return row.split()[titles.index(title)]


@pytest.mark.parametrize(("short", "example", "condition"), KINDS, ids=[k[0] for k in KINDS])
def test_the_reason_column_shows_the_main_conditions_reason(
    operator: OperatorProcess,
    cluster: Cluster,
    quiet_namespace: str,
    short: str,
    example: str,
    condition: str,
) -> None:
    """What the operator really writes: the column and the condition say the same."""
    doc = load_example(example)
    if short == "tj":
        doc["spec"]["machineType"] = "a2-highgpu-4g"  # no such pool: it waits, and says why
    cluster.apply(doc, quiet_namespace)
    name = doc["metadata"]["name"]

    def reason_shown() -> tuple[str, str] | None:
        obj = cluster.get_json(short, name, "-n", quiet_namespace)
        conditions = obj.get("status", {}).get("conditions", [])
        reason = next((c["reason"] for c in conditions if c["type"] == condition), None)
        if reason is None:
            return None
        shown = column(cluster, short, quiet_namespace, name, "REASON")
        other = {c["reason"] for c in conditions if c["type"] != condition} - {reason}
        assert shown not in other, (shown, conditions)  # never another condition's reason
        return (shown, reason) if shown == reason else None

    _, reason = wait_for(reason_shown, timeout=60, what=f"the {condition} reason of {name}")
    if short == "tj":
        assert reason == "NoMatchingPool"


def test_cluster_pools_lists_the_pools_without_control_plane_binaries(cluster: Cluster) -> None:
    if cluster.kubeconfig.resolve() != kubeconfig_path(E2E_CLUSTER_NAME).resolve():
        pytest.skip("the test cluster is not the one `ringmaster cluster` knows by name")
    env = {k: v for k, v in os.environ.items() if k != "RINGMASTER_BIN_DIR"}
    env["PATH"] = os.path.dirname(sys.executable)  # no kubectl on the PATH either
    result = subprocess.run(
        [sys.executable, "-m", "ringmaster", "cluster", "pools", "--name", E2E_CLUSTER_NAME],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:2] == ["POOL", "INSTANCE"]
    by_pool = {r.split()[0]: r.split() for r in rows}
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    a100 = [
        n
        for n in nodes
        if n["metadata"]["labels"].get("cloud.google.com/gke-nodepool") == "a100-highgpu-8g"
    ]
    assert by_pool["a100-highgpu-8g"][-2:] == [str(len(a100)), str(len(a100))]  # nodes, ready


def test_the_charts_network_policy_is_accepted_by_the_apiserver(
    cluster: Cluster, namespace: str
) -> None:
    """The rendered NetworkPolicy (every optional part on) is a valid object to a real
    apiserver, not only well-formed YAML."""
    values = {
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
            "apiServer": {"cidrs": ["172.18.0.2/32"], "ports": [6443]},
        }
    }
    rendered = subprocess.run(
        [
            str(cluster.bin_dir / "helm"),
            "template",
            "rm",
            str(REPO / "charts" / "ringmaster"),
            "--namespace",
            namespace,
            "--set-json",
            f"networkPolicy={json.dumps(values['networkPolicy'])}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (policy,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "NetworkPolicy"]
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(policy)
    )
    stored = json.loads(result.stdout)["spec"]
    assert stored["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert stored["egress"][0]["to"] == [{"ipBlock": {"cidr": "172.18.0.2/32"}}]
