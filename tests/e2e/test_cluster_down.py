"""`ringmaster cluster down` is total (issue 45, defect 8): a kube-apiserver restarted by hand
(as test_resilience.py restarts one, and as an operator of the cluster would) is stopped with
the rest, and a second cluster beside it lives on. Two control planes of their own, without
nodes: the session's cluster is not touched."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringmaster.localcluster.cluster import CONTROL_PLANE_WAIT_SECONDS, Binaries, LocalCluster
from tests.e2e.kube import wait_for

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="restarts a component from /proc"
)


def binaries() -> Binaries:
    directory = (
        os.environ.get("RINGMASTER_BIN_DIR")
        or subprocess.run(
            ["bash", str(REPO / "hack" / "cluster-tools.sh")],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return Binaries.locate(directory)


@pytest.fixture
def two_clusters() -> Iterator[tuple[LocalCluster, LocalCluster]]:
    base = os.environ.get("RINGMASTER_E2E_CLUSTER", "ringmaster-e2e")
    suffix = uuid.uuid4().hex[:4]
    found = binaries()
    # The second one's name starts with the first one's: a match by prefix would take it too.
    first = LocalCluster(found, f"{base}-down-{suffix}")
    second = LocalCluster(found, f"{base}-down-{suffix}-2")
    try:
        for cluster in (first, second):
            cluster._create(CONTROL_PLANE_WAIT_SECONDS)  # the control plane alone, no nodes
        yield first, second
    finally:
        for cluster in (first, second):
            if cluster.exists() or processes_of(cluster):
                cluster.down()
            for pid in processes_of(cluster):  # what a down without the fix leaves
                os.kill(pid, signal.SIGKILL)


def processes_of(cluster: LocalCluster) -> dict[int, str]:
    """The running processes (pid: program) that name a file of the cluster's directory, found
    here independently of the code under test."""
    directory = str(cluster.kubeconfig.parent)
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").rstrip("\0").split("\0")
        except OSError:
            continue
        values = [v for arg in argv[1:] for v in arg.split("=")]
        if argv[0] and any(v == directory or v.startswith(directory + "/") for v in values):
            found[int(cmdline.parent.name)] = Path(argv[0]).name
    return found


def running(pid: int) -> bool:
    """The process has not finished exiting. Not its empty command line, nor its main thread a
    zombie: a killed process's memory goes first and its main thread may be a zombie while its
    other threads still exit, the files (its listening socket) closing with the last of them,
    and a restart at that moment found the port still bound (runs of the suite on 5 workers).
    Exited: gone, or nothing left of it but its zombie main thread."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # that thread has just gone
        if state != "Z":
            return True
    return False


def restart_apiserver_by_hand(cluster: LocalCluster) -> int:
    """Stop the cluster's kube-apiserver and start it again with the command line and directory
    kwokctl gave it, as a person would (kwokctl's pid file is left as it was). Its pid."""
    pid_file = cluster.kubeconfig.parent / "pids" / "kube-apiserver.pid"
    pid = int(pid_file.read_text().strip())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    cwd = os.readlink(f"/proc/{pid}/cwd")
    # Killed: a stopped one would keep its watches, and the process, for up to a minute.
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not running(pid), 30, what="it to stop")
    log_path = cluster.kubeconfig.parent / "logs" / "kube-apiserver.log"
    log = log_path.open("ab")
    restarted = subprocess.Popen(
        argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_for(cluster.answers, 90, interval=1, what="the restarted kube-apiserver to answer")
    except AssertionError as error:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise AssertionError("\n".join([str(error), *tail])) from None
    return restarted.pid


def test_down_stops_a_component_restarted_by_hand_and_spares_the_cluster_beside_it(
    two_clusters: tuple[LocalCluster, LocalCluster],
) -> None:
    first, second = two_clusters
    assert first.is_healthy() and second.is_healthy()
    second_before = processes_of(second)
    assert {"etcd", "kube-apiserver"} <= set(second_before.values())
    restarted = restart_apiserver_by_hand(first)
    assert processes_of(first).get(restarted) == "kube-apiserver"

    begun = time.monotonic()
    first.down()
    print(f"down took {time.monotonic() - begun:.1f} s")
    assert processes_of(first) == {}
    assert not first.kubeconfig.parent.exists()

    # The cluster beside it, whose name starts with the first one's, lost nothing.
    assert processes_of(second) == second_before
    assert second.is_healthy()
    second.down()
    assert processes_of(second) == {}
