"""`ringmaster cluster down` stops every process of its cluster, however it was started, and
none of another cluster's (issue 45, defect 8): a process belongs to the cluster whose directory
its command line names."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringmaster.localcluster.cluster import (
    Process,
    names_path_in,
    processes_in,
    running_processes,
    stop_processes,
)

pytestmark = pytest.mark.unit

CLUSTERS = Path("/home/u/.cache/ringmaster/kwok/clusters")
RM = CLUSTERS / "rm"


def apiserver(directory: Path, *extra: str) -> tuple[bytes, ...]:
    """A kube-apiserver command line as kwokctl's binary runtime writes it."""
    argv = [
        "/cache/bin/kube-1.36.1/kube-apiserver",
        "--etcd-prefix=/registry",
        "--etcd-servers=http://127.0.0.1:32765",
        "--secure-port=32766",
        f"--client-ca-file={directory}/pki/ca.crt",
        f"--tls-cert-file={directory}/pki/admin.crt",
        f"--tls-private-key-file={directory}/pki/admin.key",
        *extra,
    ]
    return tuple(a.encode() for a in argv)


def test_a_component_names_its_cluster_directory_in_a_flag_value():
    assert names_path_in(apiserver(RM), RM)
    etcd = (b"/bin/etcd", b"--data-dir", str(RM / "etcd").encode(), b"--name=node0")
    assert names_path_in(etcd, RM)
    listed = (b"/bin/kwok", b"--config=/etc/a.yaml," + str(RM / "kwok.yaml").encode())
    assert names_path_in(listed, RM)
    assert names_path_in((b"/bin/x", str(RM).encode()), RM)
    assert names_path_in((b"/bin/x", f"--dir={RM}/".encode()), RM)


def test_a_sibling_cluster_whose_name_starts_the_same_is_not_this_one():
    assert not names_path_in(apiserver(CLUSTERS / "rm-helper3"), RM)
    assert not names_path_in(apiserver(CLUSTERS / "rm2"), RM)
    assert not names_path_in(apiserver(RM), CLUSTERS / "r")


def test_a_path_that_contains_the_directory_deeper_or_the_program_itself_is_not_in_it():
    assert not names_path_in((b"/bin/x", f"--out=/backup{RM}/pki".encode()), RM)
    # The program's own path is not an argument: a binary kept in the directory proves nothing.
    assert not names_path_in((str(RM / "bin" / "tool").encode(), b"--verbose"), RM)


def test_only_the_processes_of_the_cluster_are_picked_and_zombies_are_none():
    processes = [
        Process(10, apiserver(RM)),  # started by kwokctl
        Process(11, apiserver(RM, "--v=2")),  # restarted by hand, another pid and flags
        Process(12, apiserver(CLUSTERS / "rm-2")),  # the cluster beside it
        Process(13, (b"",)),  # a zombie: no command line
        Process(14, (b"/usr/bin/vim", b"/tmp/notes")),
    ]
    assert [p.pid for p in processes_in(RM, processes)] == [10, 11]
    assert processes_in(RM, processes)[0].name == "kube-apiserver"


def sleeper(*args: str, ignore_term: bool = False) -> subprocess.Popen[bytes]:
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('up', flush=True)\ntime.sleep(120)\n"
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"up\n"
    return process


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_stopping_a_cluster_ends_its_processes_and_spares_the_cluster_beside_it(tmp_path):
    mine, beside = tmp_path / "rm", tmp_path / "rm-2"
    started = sleeper(f"--kubeconfig={mine}/kubeconfig.yaml")
    stubborn = sleeper("--data-dir", str(mine / "etcd"), ignore_term=True)
    other = sleeper(f"--kubeconfig={beside}/kubeconfig.yaml")
    try:
        begun = time.monotonic()
        found = stop_processes(mine, grace_seconds=1.0)
        assert {p.pid for p in found} == {started.pid, stubborn.pid}
        assert started.wait(5) == -signal.SIGTERM
        assert stubborn.wait(5) == -signal.SIGKILL  # after the grace, not before
        assert time.monotonic() - begun >= 1.0
        assert other.poll() is None
        assert processes_in(mine, running_processes()) == []
        assert [p.pid for p in processes_in(beside, running_processes())] == [other.pid]
    finally:
        for process in (started, stubborn, other):
            process.kill()
            process.wait()


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_stopping_returns_only_once_a_killed_process_has_exited(tmp_path, monkeypatch):
    """A SIGKILLed kube-apiserver keeps its command line, and its ports, until the kernel has
    torn it down (a moment on a loaded machine): stop_processes waits for that, so `down` ends
    with nothing of the cluster left (stop 62's CI found a kube-apiserver still there). The
    teardown is drawn out here: the process reads as running for 0.5 s after it has gone."""
    from ringmaster.localcluster import cluster

    mine = tmp_path / "rm"
    stubborn = sleeper("--data-dir", str(mine / "etcd"), ignore_term=True)
    real_still_runs = cluster._still_runs
    gone_at: list[float] = []

    def slow_to_exit(process: Process) -> bool:
        if real_still_runs(process):
            return True
        gone_at.append(gone_at[0] if gone_at else time.monotonic())
        return time.monotonic() - gone_at[0] < 0.5

    monkeypatch.setattr(cluster, "_still_runs", slow_to_exit)
    try:
        stop_processes(mine, grace_seconds=0.2)
        assert gone_at and time.monotonic() - gone_at[0] >= 0.5
        assert stubborn.wait(5) == -signal.SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()
