"""Helpers for end-to-end tests: a kubectl bound to the test cluster, and polling."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringmaster.localcluster.pools import POOLS_BY_NAME, node_manifest
from ringmaster.localcluster.ports import free_port
from ringmaster.localcluster.readiness import node_is_ready

# Run before the operator's own program, in its process: on Linux the operator is sent SIGTERM
# when the test process that started it ends (the parent-death signal survives the exec), so a
# test worker that crashes or is killed leaves no operator behind. One left behind would retry
# against its cluster's kubeconfig, which the next run's worker of the same name writes anew:
# a second operator on that run's cluster. (Linux sends it when the thread that started the
# operator ends: start operators from the test's own thread, as every test does.)
WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit('the test process that started the operator has ended')\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


@dataclass
class Cluster:
    kubeconfig: Path
    kubectl_binary: str
    bin_dir: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.kubectl_binary, "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        body = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", input=body)


def wait_for(
    condition: Callable[[], Any], timeout: float = 60, interval: float = 0.5, what: str = ""
) -> Any:
    """Poll until condition() returns something truthy; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}: {last!r}")


@contextmanager
def pool_grown_to(cluster: Cluster, pool_name: str, hosts: int, label: str) -> Iterator[None]:
    """The pool with `hosts` Ready nodes (the session's cluster has its default), the extra ones
    deleted after. A node just created has no status yet, so readiness reads it as not Ready."""
    pool = POOLS_BY_NAME[pool_name]
    extra = [node_manifest(pool, i) for i in range(pool.default_size, hosts)]
    for node in extra:
        cluster.apply(node)

    def ready_hosts() -> int:
        nodes = cluster.get_json("nodes", "-l", f"{label}={pool_name}")["items"]
        return sum(node_is_ready(n) for n in nodes)

    wait_for(lambda: ready_hosts() >= hosts, what=f"{hosts} Ready {pool_name} nodes")
    try:
        yield
    finally:
        for node in extra:
            cluster.kubectl("delete", "node", node["metadata"]["name"], "--wait=false", check=False)


class OperatorProcess:
    """`ringmaster run` as a real process against the test cluster; restartable mid-test."""

    def __init__(self, kubeconfig: Path, log_path: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.extra_args = extra_args
        self.log_path = log_path
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import os
        import sys
        import urllib.request

        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        log = self.log_path.open("ab")
        launcher = ["-c", WITH_PARENT, str(os.getpid())] if sys.platform == "linux" else []
        self.process = subprocess.Popen(
            [
                sys.executable,
                *launcher,
                "-m",
                "ringmaster",
                "run",
                "--metrics-port",
                str(self.metrics_port),
                "--liveness",
                f"http://127.0.0.1:{self.health_port}/healthz",
                *self.extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def healthy() -> bool:
            assert self.process is not None and self.process.poll() is None, (
                f"operator exited; see {self.log_path}"
            )
            try:
                url = f"http://127.0.0.1:{self.health_port}/healthz"
                with urllib.request.urlopen(url, timeout=1) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(healthy, timeout=60, what="the operator's liveness probe")

    def stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def metrics(self) -> str:
        import urllib.request

        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
