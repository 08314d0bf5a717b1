"""PoolProfile on the real control plane (issue 47): the measurement run is admitted on idle hosts
only and gives them back to a gang at once; its pods post results with their projected tokens
(the test posts what the payload posts: no GPU here); status, node labels and plans follow; a
flagged host is avoided; forged and bad results are refused; a deleted profile takes only its
own pods with it."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringmaster.manifests.profiling import DEGRADED_LABEL, audience
from ringmaster.manifests.training import pinned_host
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_progress import reporting_operator, token_for  # noqa: F401 (a fixture)
from tests.e2e.test_trainingjob import events_of, training_job, wait_phase, worker_pods

pytestmark = pytest.mark.e2e

POOL = "a100-ultragpu-8g"  # 4 hosts of 8 x A100 80GB (a2-ultragpu-8g)
H100_POOL = "h100-highgpu-8g"  # 2 hosts


def profile(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "PoolProfile",
        "metadata": {"name": name},
        "spec": {"pool": pool, "image": "pytorch/pytorch:2.5.1-cuda12.4", "quick": True, **spec},
    }


def a100_80gb_job(name: str, workers: int) -> dict[str, Any]:
    manifest = training_job(
        name, workers, machine_type="a2-ultragpu-8g", exit_code=0, run_for="600s"
    )
    manifest["spec"]["accelerator"]["type"] = "nvidia-a100-80gb"
    return manifest


def h100_job(name: str, workers: int) -> dict[str, Any]:
    manifest = training_job(
        name, workers, machine_type="a3-highgpu-8g", exit_code=0, run_for="600s"
    )
    manifest["spec"]["accelerator"]["type"] = "nvidia-h100-80gb"
    return manifest


def get(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.get_json("poolprofile", name, "-n", ns)


def status(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return get(cluster, ns, name).get("status") or {}


def run_pods(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    pods = cluster.get_json("pods", "-n", ns, "-l", f"ringmaster.dev/poolprofile={name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def through(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods let through the admission gate (pinned to a host)."""
    return [p for p in pods if not p["spec"].get("schedulingGates")]


def result(node: str, bf16: float = 280.0, **extra: Any) -> dict[str, Any]:
    """What the payload posts for one A100 80GB host (figures of the right size, not measured)."""
    body = {
        "version": 1,
        "node": node,
        "device": {
            "name": "NVIDIA A100-SXM4-80GB",
            "count": 8,
            "memoryBytes": 85899345920,
            "powerLimitWatts": 400.0,
            "torch": "2.5.1",
        },
        "gemm": [
            {
                "precision": "bf16",
                "m": 8192,
                "n": 8192,
                "k": 8192,
                "seconds": 0.0041,
                "tflops": bf16 - 8,
            },
        ],
        "sustainedTflops": {"bf16": bf16},
        "burstTflops": {"bf16": bf16 * 1.03},
        "hbmGBps": 1750.0,
    }
    return body | extra


def post(
    url: str, ns: str, name: str, token: Path | None, body: Any, cert: Path
) -> tuple[int, str]:
    path = f"/apis/ringmaster.dev/v1alpha1/namespaces/{ns}/poolprofiles/{name}/results"
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token.read_text()}"
    request = urllib.request.Request(url + path, json.dumps(body).encode(), headers, method="POST")
    context = ssl.create_default_context(cafile=str(cert))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def unflagged(cluster: Cluster) -> Iterator[None]:
    """Node labels outlive namespaces: no later test may find a host flagged by this one."""
    yield
    cluster.kubectl("label", "nodes", "--all", f"{DEGRADED_LABEL}-", check=False)
    cluster.kubectl("taint", "nodes", "--all", f"{DEGRADED_LABEL}-", check=False)


def test_a_profile_measures_idle_hosts_flags_the_slow_one_and_plans_the_pool_on_it(
    reporting_operator: tuple[OperatorProcess, str, Path],  # noqa: F811
    cluster: Cluster,
    quiet_namespace: str,
    tmp_path: Path,
    unflagged: None,
) -> None:
    operator, url, cert = reporting_operator
    ns = quiet_namespace
    # One host busy: a sample of 3 hosts is measured on the 3 idle ones, never the busy one.
    cluster.apply(a100_80gb_job("busy", 1), ns)
    wait_phase(cluster, ns, "busy", "Running")
    busy_host = worker_pods(cluster, ns, "busy")[0]["spec"]["nodeName"]
    cluster.apply(profile("a100", POOL, hosts=3), ns)
    pods = wait_for(
        lambda: len(through(run_pods(cluster, ns, "a100"))) == 3 and run_pods(cluster, ns, "a100"),
        timeout=60,
        what="the run's 3 pods through the gate",
    )
    hosts = sorted(str(pinned_host(p["spec"])) for p in pods)
    assert busy_host not in hosts and len(set(hosts)) == 3
    wait_for(lambda: status(cluster, ns, "a100").get("phase") == "Measuring", what="Measuring")
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["RINGMASTER_PROFILE_RESULTS_URL"].startswith(url)
    assert env["WORLD_SIZE"] == "3" and env["RINGMASTER_PROFILE_QUICK"] == "1"
    mount = {v["name"]: v for v in pods[0]["spec"]["volumes"]}
    token_source = mount["ringmaster-profile-token"]["projected"]["sources"][0][
        "serviceAccountToken"
    ]
    assert token_source["audience"] == audience(ns, "a100")
    payload = cluster.get_json(
        "configmap", mount["ringmaster-profile-payload"]["configMap"]["name"], "-n", ns
    )
    assert "def main" in payload["data"]["payload.py"]

    by_node = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods}
    tokens = {
        node: token_for(cluster, ns, pod, audience(ns, "a100"), tmp_path / f"{pod}.token")
        for node, pod in by_node.items()
    }
    slow, *fast = sorted(by_node)
    # Refused: no token; a token for another audience; the busy job's worker with the profile's
    # audience (a pod that is not one of the run's); a body that fails validation; a rate out of
    # range. Nothing of them reaches status.
    assert post(url, ns, "a100", None, result(slow), cert)[0] == 401
    other = token_for(cluster, ns, by_node[slow], None, tmp_path / "apiserver.token")
    assert post(url, ns, "a100", other, result(slow), cert)[0] == 401
    busy_pod = worker_pods(cluster, ns, "busy")[0]["metadata"]["name"]
    forged = token_for(cluster, ns, busy_pod, audience(ns, "a100"), tmp_path / "forged.token")
    code, body = post(url, ns, "a100", forged, result(slow), cert)
    assert code == 403 and "is not a measurement pod of the current run" in body
    code, body = post(url, ns, "a100", tokens[slow], {"version": 1, "node": slow}, cert)
    assert code == 400 and "device is required" in body
    code, body = post(url, ns, "a100", tokens[slow], result(slow, bf16=1e9), cert)
    assert code == 400 and "less than or equal to 20000" in body

    # The run's results: one host 25 % below the others on its GEMMs.
    assert post(url, ns, "a100", tokens[slow], result(slow, bf16=210.0), cert)[0] == 202
    for node in fast:
        assert post(url, ns, "a100", tokens[node], result(node), cert)[0] == 202
    done = wait_for(
        lambda: (s := status(cluster, ns, "a100")).get("phase") == "Profiled" and s,
        timeout=30,
        what="Profiled",
    )
    assert done["hostsProfiled"] == 3 and done["flaggedHosts"] == [slow]
    assert done["sustainedBf16Tflops"] == pytest.approx(280.0, rel=0.01)
    node = cluster.get_json("node", slow)
    assert node["metadata"]["labels"].get(DEGRADED_LABEL) == "true"
    assert "ringmaster.dev/degraded-by" in node["metadata"]["annotations"]
    taints = [t["key"] for t in node["spec"].get("taints") or []]
    assert DEGRADED_LABEL not in taints, "no taint unless spec.taintDegraded"
    for other_node in fast:
        assert DEGRADED_LABEL not in cluster.get_json("node", other_node)["metadata"]["labels"]
    wait_for(lambda: not run_pods(cluster, ns, "a100"), what="the run's pods gone")
    # Opting in to the taint later taints the hosts flagged already.
    patch = json.dumps({"spec": {"taintDegraded": True}})
    cluster.kubectl("patch", "poolprofile", "a100", "-n", ns, "--type=merge", "-p", patch)

    def tainted() -> bool:
        taints = cluster.get_json("node", slow)["spec"].get("taints") or []
        return any(t["key"] == DEGRADED_LABEL and t["effect"] == "NoSchedule" for t in taints)

    wait_for(tainted, timeout=30, what="the flagged host tainted")
    # Events go out after the status that records them (kopf posts them from a queue).
    wait_for(lambda: "HostDegraded" in events_of(cluster, ns, "a100"), what="HostDegraded")
    [degraded] = [c for c in done["conditions"] if c["type"] == "HostsDegraded"]
    assert degraded["status"] == "True" and slow in degraded["message"]
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics").read()
    wanted = (  # Prometheus' text format sorts the labels
        'ringmaster_pool_profile_measured{measurement="gemm.sustained.bf16",'
        f'namespace="{ns}",pool="{POOL}",poolprofile="a100"}} 280.0'
    )
    assert wanted in scraped.decode()
    columns = cluster.kubectl("get", "poolprofiles", "-n", ns).stdout
    assert "Profiled" in columns and POOL in columns

    # A plan on the pool names the profile.
    example = (
        Path(__file__).resolve().parents[2] / "examples" / "trainingjob-llama2-70b-auto-a100.yaml"
    )
    cluster.kubectl("apply", "-n", ns, "-f", str(example))
    plan = wait_for(
        lambda: (
            cluster.get_json("trainingjob", "llama2-70b-auto", "-n", ns)
            .get("status", {})
            .get("plan")
        ),
        what="the plan",
    )
    assert f"profiled on pool {POOL}" in plan["evidence"]

    # The flagged host is avoided: with the busy job gone, a 3-host gang runs on the 3 others;
    # the 4-host one waits and says why.
    cluster.kubectl("delete", "trainingjob", "busy", "-n", ns)
    cluster.apply(a100_80gb_job("three", 3), ns)
    wait_phase(cluster, ns, "three", "Running")
    assert slow not in {p["spec"]["nodeName"] for p in worker_pods(cluster, ns, "three")}


def test_a_run_gives_its_hosts_back_to_a_gang_and_measures_again_when_they_are_idle(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str, unflagged: None
) -> None:
    ns = quiet_namespace
    cluster.apply(profile("h100", H100_POOL), ns)
    wait_for(
        lambda: len(through(run_pods(cluster, ns, "h100"))) == 2, what="the run through the gate"
    )
    first_run = status(cluster, ns, "h100")["run"]
    cluster.apply(h100_job("urgent", 2), ns)
    wait_phase(cluster, ns, "urgent", "Running", timeout=60)
    wait_for(lambda: "YieldedToGang" in events_of(cluster, ns, "h100"), what="YieldedToGang")
    # A new run waits at the gate for idle hosts, and says so on its pods.
    wait_for(lambda: status(cluster, ns, "h100").get("run", 0) > first_run, what="a new run")
    waiting = wait_for(lambda: run_pods(cluster, ns, "h100"), what="the new run's pods")
    assert all(p["spec"].get("schedulingGates") for p in waiting)
    cluster.kubectl("delete", "trainingjob", "urgent", "-n", ns)
    wait_for(
        lambda: len(through(run_pods(cluster, ns, "h100"))) == 2, timeout=60, what="measured again"
    )
    # Deleted mid-run: its pods go with it, nothing else.
    cluster.kubectl("delete", "poolprofile", "h100", "-n", ns)
    wait_for(lambda: not run_pods(cluster, ns, "h100"), timeout=60, what="the run's pods gone")


def test_bad_input_is_a_condition_never_a_crash(
    reporting_operator: tuple[OperatorProcess, str, Path],  # noqa: F811
    cluster: Cluster,
    quiet_namespace: str,
    tmp_path: Path,
    unflagged: None,
) -> None:
    operator, url, cert = reporting_operator
    ns = quiet_namespace
    cluster.apply(profile("nowhere", "no-such-pool"), ns)
    reason = wait_for(
        lambda: next(
            (
                c
                for c in status(cluster, ns, "nowhere").get("conditions", [])
                if c["type"] == "Profiled"
            ),
            None,
        ),
        what="a condition",
    )
    assert reason["reason"] == "PoolNotFound" and "a100-ultragpu-8g" in reason["message"]
    assert not run_pods(cluster, ns, "nowhere")
    # An image without PyTorch: the payload's own error comes back as the profile's condition.
    cluster.apply(profile("no-torch", H100_POOL, hosts=1, measurements=["Gemm"]), ns)
    try:
        [pod] = wait_for(lambda: through(run_pods(cluster, ns, "no-torch")), what="the run's pod")
    except AssertionError as error:
        pods = json.dumps(run_pods(cluster, ns, "no-torch"))[:3000]
        lines = operator.log_path.read_text().splitlines()
        log = "\n".join([line for line in lines if "healthz" not in line][-60:])
        raise AssertionError(
            f"{error}\nstatus: {status(cluster, ns, 'no-torch')}\npods: {pods}\n{log}"
        ) from None
    token = token_for(
        cluster, ns, pod["metadata"]["name"], audience(ns, "no-torch"), tmp_path / "t"
    )
    failure = {
        "version": 1,
        "node": str(pinned_host(pod["spec"])),
        "failure": "PyTorch is not importable in this image (No module named 'torch')",
    }
    assert post(url, ns, "no-torch", token, failure, cert)[0] == 202
    failed = wait_for(
        lambda: (s := status(cluster, ns, "no-torch")).get("phase") == "Failed" and s, what="Failed"
    )
    [condition] = [c for c in failed["conditions"] if c["type"] == "Profiled"]
    assert (
        condition["reason"] == "PayloadFailed"
        and "PyTorch is not importable" in condition["message"]
    )
    assert operator.process is not None and operator.process.poll() is None
