"""Status and the operator's log stay true when a namespace is deleted under a running job and
when the kube-apiserver goes away for a while (issue 14, items 5 and 6)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_reductionserver import shared_pool
from tests.e2e.test_trainingjob import events_of, job, phase, training_job

# The kube-apiserver is killed for this long. kopf's default retry schedule tried a lost watch
# again 1, 2, 4, 7, 12, 20, 33 and 54 s after it failed: the API back at about 23 s (20 s and
# its start), the operator saw a job created then at the attempt of 33 s (9.4 s after the API
# was ready; issue 45 saw 7-21 s).
OUTAGE_SECONDS = 20
# How soon after the API is ready again a job created then is admitted (measured: 0.4 s).
ADMITTED_AFTER_OUTAGE_SECONDS = 5.0


def operator_log(process: OperatorProcess, since: int = 0) -> str:
    """The session operator's log (one operator per cluster: a second one would act on the
    same jobs), from an offset taken at the start of a test."""
    return process.log_path.read_text(errors="replace")[since:]


def running_job(cluster: Cluster, ns: str, name: str) -> None:
    # A worker that runs far longer than the test: only a restart or deletion ends it.
    cluster.apply(training_job(name, 2, exit_code=0, run_for="1h"), namespace=ns)
    wait_for(lambda: phase(cluster, ns, name) == "Running", 60, what=f"{name} Running")


def worker_uids(cluster: Cluster, ns: str, name: str) -> set[str]:
    pods = cluster.get_json("pods", "-n", ns, "-l", f"ringmaster.dev/trainingjob={name}")
    return {p["metadata"]["uid"] for p in pods["items"]}


def test_deleting_a_namespace_does_not_restart_its_gangs(
    operator: OperatorProcess, cluster: Cluster
) -> None:
    log_before = len(operator_log(operator))
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    running_job(cluster, ns, "doomed")
    # Foreground deletion of the job keeps it (with a deletionTimestamp) until its pods are gone:
    # the other way pods go under a live job without any worker failing.
    other = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", other)
    try:
        running_job(cluster, other, "deleted")
        cluster.kubectl(
            "delete", "trainingjob", "deleted", "-n", other, "--cascade=foreground", "--wait=false"
        )
        cluster.kubectl("delete", "namespace", ns, "--wait=false")
        # Events of the job being deleted, read while it still exists.
        seen: set[str] = set()

        restarts: set[int] = set()

        def gone() -> bool:
            for namespace_, name in ((other, "deleted"), (ns, "doomed")):
                result = cluster.kubectl(
                    "get", "trainingjob", name, "-n", namespace_, "-o", "json", check=False
                )
                if result.returncode == 0 and result.stdout.strip():
                    status = json.loads(result.stdout).get("status") or {}
                    restarts.add(int(status.get("restarts") or 0))
                    seen.update(events_of(cluster, namespace_, name))
                    return False
            return True

        wait_for(gone, 90, interval=1, what="both jobs gone")
        wait_for(
            lambda: cluster.kubectl("get", "namespace", ns, check=False).returncode != 0,
            120,
            interval=1,
            what=f"namespace {ns} gone",
        )
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
    log = operator_log(operator, log_before)
    assert "Restarted" not in seen, seen
    assert restarts <= {0}, restarts  # no backoff attempt spent
    assert "restarting the gang" not in log, log[-3000:]
    assert "being terminated" not in log, log[-3000:]
    assert "Traceback" not in log, log[-5000:]


def _apiserver(cluster: Cluster) -> tuple[Path, list[str], Path]:
    pid_file = cluster.kubeconfig.parent / "pids" / "kube-apiserver.pid"
    pid = int(pid_file.read_text().strip())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    return pid_file, [a.decode() for a in argv], Path(os.readlink(f"/proc/{pid}/cwd"))


def _api_ready(cluster: Cluster) -> bool:
    return cluster.kubectl("get", "--raw", "/readyz", check=False).returncode == 0


@pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="restarts the apiserver from /proc"
)
def test_an_api_outage_costs_one_warning_and_no_restart(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
) -> None:
    ns = quiet_namespace
    pid_file = cluster.kubeconfig.parent / "pids" / "kube-apiserver.pid"
    if not pid_file.exists():
        pytest.skip("the cluster's kube-apiserver is not a local process (kwokctl binary runtime)")
    running_job(cluster, ns, "steady")
    # A reducer pool is looked at every few seconds and applies its StatefulSet each time: the
    # controller that flooded the log in the outage this test replays.
    cluster.apply(shared_pool("reducers", replicas=1), namespace=ns)
    wait_for(
        lambda: (
            cluster.get_json("reductionserverpool", "reducers", "-n", ns)
            .get("status", {})
            .get("readyReplicas")
        ),
        60,
        what="the reducer pool ready",
    )
    before = worker_uids(cluster, ns, "steady")
    log_before = len(operator_log(operator))

    # Kill the kube-apiserver process (kwokctl has no per-component stop), then start it again
    # with the very command line and directory kwokctl gave it. Killed, not stopped: a stopped
    # one stops listening at once but keeps its watches open, and serving events from its cache,
    # for up to a minute, so the operator's watches would not notice an outage this short.
    pid_file, argv, cwd = _apiserver(cluster)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    stopped_at = time.monotonic()
    wait_for(lambda: not _api_ready(cluster), 30, what="the kube-apiserver to stop")
    try:
        while time.monotonic() - stopped_at < OUTAGE_SECONDS:
            assert operator.process is not None and operator.process.poll() is None
            time.sleep(1)
    finally:
        log_file = (cluster.kubeconfig.parent / "logs" / "kube-apiserver.log").open("ab")
        restarted = subprocess.Popen(
            argv, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        pid_file.write_text(str(restarted.pid))
    wait_for(lambda: _api_ready(cluster), 90, interval=0.2, what="the kube-apiserver back")
    back_at = time.monotonic()

    # The same operator process admits a job created right after the outage, within seconds:
    # its watches reconnect at once (not on kopf's default retry schedule, which left 7-21 s).
    cluster.apply(training_job("after", 1, exit_code=0, run_for="1h"), namespace=ns)
    wait_for(
        lambda: "admission" in (job(cluster, ns, "after").get("status") or {}),
        90,
        interval=0.2,
        what="a job admitted after",
    )
    admitted_after = time.monotonic() - back_at
    print(f"admitted {admitted_after:.1f} s after the kube-apiserver was ready again")
    assert admitted_after < ADMITTED_AFTER_OUTAGE_SECONDS, admitted_after
    wait_for(lambda: phase(cluster, ns, "after") == "Running", 90, what="the job running")
    assert worker_uids(cluster, ns, "steady") == before  # no gang was restarted
    assert phase(cluster, ns, "steady") == "Running"
    assert "Restarted" not in events_of(cluster, ns, "steady")

    # The operator's own account: one warning when the API went, one line when it is back
    # (how long it was away, what was requeued), whether or not a reconcile was due.
    wait_for(
        lambda: "is back after" in operator_log(operator, log_before),
        10,
        what="the operator's summary of the outage",
    )
    summary = next(
        line for line in operator_log(operator, log_before).splitlines() if "is back after" in line
    )
    print(summary)
    away = float(summary.split("is back after ")[1].split(" s away")[0])
    assert OUTAGE_SECONDS <= away < OUTAGE_SECONDS + 60, summary
    assert "ReductionServerPool 1 (" in summary, summary  # its applies failed meanwhile
    # Each controller that failed retries and says the API is back.
    wait_for(
        lambda: "reachable again" in operator_log(operator, log_before),
        30,
        what="the controllers' summary lines",
    )
    log = operator_log(operator, log_before)
    assert "Traceback" not in log, log[-5000:]
    lines = [line for line in log.splitlines() if "/healthz" not in line]
    assert len([line for line in lines if "cannot be reached" in line]) == 1, log[-5000:]
    assert len([line for line in lines if "is back after" in line]) == 1, log[-5000:]
    unreachable = [line for line in lines if "API is unreachable" in line]
    # One warning per controller at most (the three controllers each may notice it).
    assert len(unreachable) <= 3, unreachable
    # No flood: kopf's retries of its watches (one a second per watched kind) are counted in
    # the summary, not logged; a warning and a summary per controller, not a line per retry.
    assert not [line for line in lines if "Request attempt" in line], log[-5000:]
    assert len(lines) < 40, log[-5000:]
