"""The loop on the real control plane: workers report progress with their projected token, the
API server vouches for it (TokenReview), and status, columns, conditions, metrics, expected
starts and the cluster calibration follow (docs/progress.md)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ringmaster import progress
from ringmaster.localcluster.ports import free_port
from ringmaster.manifests.progress import audience
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import (
    A100_POOL,
    condition,
    events_of,
    job,
    pool_size,
    training_job,
    wait_phase,
)

pytestmark = pytest.mark.e2e

CALIBRATION = "ringmaster-calibration"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, as the chart's would be for the operator's Service."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=ringmaster", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def reporting_operator(
    cluster: Cluster,
    crds_installed: Cluster,
    quiet_namespace: str,
    no_session_operator: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[OperatorProcess, str, Path]]:
    """An operator serving the progress endpoint over TLS, its calibration in a ConfigMap of
    the test's namespace, expected starts re-estimated every second."""
    cert, key = self_signed(tmp_path)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    monkeypatch.setenv("RINGMASTER_START_ESTIMATE_SECONDS", "1")
    process = OperatorProcess(
        cluster.kubeconfig,
        tmp_path / "operator.log",
        (
            "--progress-port", str(port),
            "--progress-url", url,
            "--progress-tls-cert", str(cert),
            "--progress-tls-key", str(key),
            "--progress-tls-ca", str(cert),
            "--calibration-configmap", f"{quiet_namespace}/{CALIBRATION}",
        ),
    )  # fmt: skip
    process.start()
    try:
        yield process, url, cert
    finally:
        process.stop()


def long_job(name: str, workers: int, steps: int | None = None, run_for: str = "600s") -> Any:
    manifest = training_job(name, workers, exit_code=0, run_for=run_for)
    if steps is not None:
        manifest["spec"]["steps"] = steps
    return manifest


def token_for(cluster: Cluster, ns: str, pod: str, for_audience: str | None, path: Path) -> Path:
    """A token as the kubelet projects it: the pod's ServiceAccount, bound to the pod, with
    the audience asked for (none: the API server's own)."""
    uid = cluster.get_json("pod", pod, "-n", ns)["metadata"]["uid"]
    args = ["create", "token", "default", "-n", ns, "--bound-object-kind", "Pod"]
    args += ["--bound-object-name", pod, "--bound-object-uid", uid]
    if for_audience:
        args += ["--audience", for_audience]
    path.write_text(cluster.kubectl(*args).stdout.strip())
    return path


def reporter(url: str, ns: str, name: str, token: Path, cert: Path) -> progress.Reporter:
    endpoint = f"{url}/apis/ringmaster.dev/v1alpha1/namespaces/{ns}/trainingjobs/{name}/progress"
    return progress.Reporter(endpoint, str(token), interval=0, ca_pem=cert.read_text())


def post(sender: progress.Reporter, step: int, **figures: Any) -> int | None:
    sender.report(step, **figures)
    sender.flush()
    return sender.last_status


def predicted(cluster: Cluster, ns: str, name: str) -> float:
    plan = job(cluster, ns, name)["status"]["plan"]
    return float(plan.get("calibratedStepSeconds") or plan["stepSeconds"])


def test_a_workers_report_moves_status_columns_conditions_and_metrics(
    reporting_operator: tuple[OperatorProcess, str, Path],
    cluster: Cluster,
    quiet_namespace: str,
    tmp_path: Path,
) -> None:
    operator, url, cert = reporting_operator
    ns = quiet_namespace
    cluster.apply(long_job("watched", 2, steps=1000), ns)
    cluster.apply(long_job("neighbour", 1), ns)
    wait_phase(cluster, ns, "watched", "Running")
    wait_phase(cluster, ns, "neighbour", "Running")
    pod = cluster.get_json("pod", "watched-worker-0", "-n", ns)
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "ringmaster-progress-token"]
    token_source = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token_source["audience"] == audience(ns, "watched")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["RINGMASTER_PROGRESS_URL"].startswith(url)
    assert env["RINGMASTER_PROGRESS_CA_PEM"] == cert.read_text()

    # Before any report, spec.steps and the prediction give an ETA.
    before = wait_for(lambda: job(cluster, ns, "watched")["status"].get("progress"), what="ETA")
    assert before["totalSteps"] == 1000 and before.get("eta")

    good = token_for(cluster, ns, "watched-worker-0", audience(ns, "watched"), tmp_path / "t1")
    sender = reporter(url, ns, "watched", good, cert)
    slow = 3 * predicted(cluster, ns, "watched")
    hosts = [
        p["spec"]["nodeName"] for p in (pod, cluster.get_json("pod", "watched-worker-1", "-n", ns))
    ]
    ranks = [
        {"rank": 0, "host": hosts[0], "stepSeconds": slow},
        {"rank": 1, "host": hosts[1], "stepSeconds": 2 * slow},
    ]
    for step in range(100, 700, 100):
        assert post(sender, step, total_steps=1000, step_seconds=slow, ranks=ranks) == 202

    def reported() -> dict[str, Any] | None:
        status = job(cluster, ns, "watched")["status"]
        drift = condition({"status": status}, "PredictionDrift")
        return status if drift and drift["status"] == "True" else None

    status = wait_for(reported, timeout=30, what="PredictionDrift on the watched job")
    figures = status["progress"]
    assert figures["step"] == 600 and figures["percent"] == 60.0
    assert figures["observedStepSeconds"] == pytest.approx(slow, rel=1e-3)
    assert figures["ratio"] == pytest.approx(3.0, rel=1e-2)
    assert condition({"status": status}, "PredictionDrift")["reason"] == "SlowerThanPredicted"
    degraded = condition({"status": status}, "Degraded")
    assert degraded["status"] == "True" and hosts[1] in degraded["message"]
    wait_for(
        lambda: {"PredictionDrift", "Stragglers"} <= set(events_of(cluster, ns, "watched")),
        what="the PredictionDrift and Stragglers Events",
    )
    table = cluster.kubectl("get", "tj", "watched", "-n", ns).stdout.split("\n")
    header, row = table[0].split(), table[1].split()
    columns = dict(zip(header, row, strict=False))
    assert columns["PROGRESS"] == "60" and columns["RATIO"].startswith("3")
    assert columns["ETA"].startswith(str(dt.datetime.now(dt.UTC).year))
    metrics = operator.metrics()
    labels = f'{{name="watched",namespace="{ns}"}}'
    assert float(_sample(metrics, f"ringmaster_prediction_ratio{labels}")) == pytest.approx(
        3.0, rel=1e-2
    )
    assert float(_sample(metrics, f"ringmaster_observed_step_seconds{labels}")) == pytest.approx(
        slow
    )

    # Refused: a token for another job, one without the job's audience, and one of a pod that
    # is not this job's worker (even with this job's audience).
    other = token_for(cluster, ns, "neighbour-worker-0", audience(ns, "neighbour"), tmp_path / "t2")
    plain = token_for(cluster, ns, "watched-worker-0", None, tmp_path / "t3")
    foreign = token_for(cluster, ns, "neighbour-worker-0", audience(ns, "watched"), tmp_path / "t4")
    assert post(reporter(url, ns, "watched", other, cert), 700) == 401
    assert post(reporter(url, ns, "watched", plain, cert), 700) == 401
    assert post(reporter(url, ns, "watched", foreign, cert), 700) == 403
    assert post(reporter(url, ns, "nobody", good, cert), 700) == 404
    assert job(cluster, ns, "watched")["status"]["progress"]["step"] == 600
    assert _sample(operator.metrics(), 'ringmaster_progress_reports_total{code="403"}') == "1.0"


def _sample(metrics: str, series: str) -> str:
    return next(line.split()[-1] for line in metrics.splitlines() if line.startswith(series + " "))


def test_a_waiting_job_gets_an_expected_start_that_follows_the_running_jobs_reports(
    reporting_operator: tuple[OperatorProcess, str, Path],
    cluster: Cluster,
    quiet_namespace: str,
    tmp_path: Path,
) -> None:
    _, url, cert = reporting_operator
    ns = quiet_namespace
    cluster.apply(long_job("big", pool_size(cluster, A100_POOL)), ns)
    wait_phase(cluster, ns, "big", "Running")
    cluster.apply(long_job("next", 2, steps=100), ns)

    def expected() -> str | None:
        return job(cluster, ns, "next").get("status", {}).get("expectedStart")

    # big has neither spec.steps nor a report: no one can say when it ends.
    unknown = wait_for(lambda: (e := expected()) and e.startswith("unknown") and e, what="unknown")
    assert f"{ns}/big" in unknown and "spec.steps" in unknown
    assert "expectedStartTime" not in job(cluster, ns, "next")["status"]

    token = token_for(cluster, ns, "big-worker-0", audience(ns, "big"), tmp_path / "token")
    sender = reporter(url, ns, "big", token, cert)
    per_step = predicted(cluster, ns, "big")
    assert post(sender, 100, total_steps=1100, step_seconds=per_step) == 202

    def start_time() -> dt.datetime | None:
        stamp = job(cluster, ns, "next")["status"].get("expectedStartTime")
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None

    first = wait_for(start_time, timeout=30, what="an expected start")
    eta = job(cluster, ns, "big")["status"]["progress"]["eta"]
    assert first == dt.datetime.fromisoformat(eta.replace("Z", "+00:00"))
    columns = cluster.kubectl("get", "tj", "next", "-n", ns).stdout
    assert "EXPECTED-START" in columns and str(first.year) in columns.split("\n")[1]

    # big reports ten times slower steps: it ends later, and so next starts later.
    for step in range(200, 800, 100):
        assert post(sender, step, total_steps=1100, step_seconds=10 * per_step) == 202
    later = wait_for(
        lambda: (t := start_time()) and t > first + dt.timedelta(seconds=100 * per_step) and t,
        timeout=30,
        what="the expected start to move later",
    )
    assert later > first


def test_finished_jobs_calibrate_new_plans_and_the_configmap_survives_a_restart(
    reporting_operator: tuple[OperatorProcess, str, Path],
    cluster: Cluster,
    quiet_namespace: str,
    tmp_path: Path,
) -> None:
    operator, url, cert = reporting_operator
    ns = quiet_namespace
    names = [f"done-{i}" for i in range(3)]
    for name in names:
        cluster.apply(long_job(name, 1, run_for="25s"), ns)
    for name in names:
        wait_phase(cluster, ns, name, "Running")
        token = token_for(cluster, ns, f"{name}-worker-0", audience(ns, name), tmp_path / name)
        sender = reporter(url, ns, name, token, cert)
        slow = 1.5 * predicted(cluster, ns, name)
        for step in range(1, 7):
            assert post(sender, step * 10, step_seconds=slow) == 202
    for name in names:
        wait_phase(cluster, ns, name, "Succeeded", timeout=60)

    def stored() -> list[dict[str, Any]]:
        found = cluster.kubectl("get", "configmap", CALIBRATION, "-n", ns, check=False)
        if found.returncode != 0:
            return []
        data = cluster.get_json("configmap", CALIBRATION, "-n", ns)["data"]
        return list(json.loads(data["calibration.json"])["observations"])

    observations = wait_for(lambda: len(stored()) == 3 and stored(), timeout=40, what="3 jobs")
    assert {o["ratio"] for o in observations} == {1.5}
    assert {o["machine_type"] for o in observations} == {"a2-highgpu-8g"}

    operator.stop()
    operator.start()
    assert len(stored()) == 3
    cluster.apply(long_job("after", 1), ns)
    plan = wait_for(
        lambda: (
            (p := job(cluster, ns, "after").get("status", {}).get("plan"))
            and p.get("calibration")
            and p
        ),
        what="the calibrated plan of a new job",
    )
    assert plan["calibration"] == "x1.50 from 3 jobs observed on a2-highgpu-8g"
    assert plan["calibratedStepSeconds"] == pytest.approx(1.5 * plan["stepSeconds"], rel=1e-3)
