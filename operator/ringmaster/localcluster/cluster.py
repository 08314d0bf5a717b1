"""Bring the local control plane up and down: kwokctl's binary runtime, our node pools, our stages.

No container runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok's
controller run as processes built from their Go modules (hack/cluster-tools.sh), and kwok plays
the kubelet of every node.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ringmaster.localcluster.pools import POOLS, PoolTemplate, node_list
from ringmaster.localcluster.ports import free_port
from ringmaster.localcluster.readiness import NodesNotReady, list_nodes, wait_for_ready_nodes

DEFAULT_NAME = "ringmaster"
# kwokctl's wait for the control plane itself (etcd, apiserver, controllers): no node involved.
CONTROL_PLANE_WAIT_SECONDS = 180
# One controller-manager and one scheduler need no leader election, and with it they exit when a
# loaded machine delays a lease renewal (nothing restarts them here): seen under the scale bench.
KWOKCTL_CONFIGURATION = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - {key: leader-elect, value: "false"}
- name: kube-scheduler
  extraArgs:
  - {key: leader-elect, value: "false"}
"""
# The components' ports, in kwokctl's options. Left to kwokctl, they count down from 32767 and
# two clusters created at once (the test suite's workers) get the same ones: ours come from the
# machine-wide allocator (ports.py) instead.
KWOKCTL_PORT_OPTIONS = (
    "etcdPort",
    "etcdPeerPort",
    "kubeApiserverPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)


def kwokctl_configuration(ports: Mapping[str, int]) -> str:
    """KWOKCTL_CONFIGURATION with the components' ports given (KWOKCTL_PORT_OPTIONS)."""
    options = "".join(f"  {key}: {port}\n" for key, port in ports.items())
    return f"{KWOKCTL_CONFIGURATION}options:\n{options}"


def kwok_configuration(pod_workers: int) -> str:
    """kwok's own settings with `pod_workers` goroutines playing pod stages (kwok's default: 4,
    for every node of the cluster, where a real cluster has a kubelet per node). A
    KwokConfiguration document replaces kwok's defaults rather than merging into them: the
    node lease and node stage workers must be given too (kwok's defaults, 4), or kwok exits with
    "node leases parallelism must be greater than 0" and every node stays NotReady."""
    return (
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\n"
        "kind: KwokConfiguration\n"
        "options:\n"
        f"  podPlayStageParallelism: {pod_workers}\n"
        "  nodePlayStageParallelism: 4\n"
        "  nodeLeaseParallelism: 4\n"
    )


COMPONENT_BINARIES = {
    "--etcd-binary": "etcd",
    "--kube-apiserver-binary": "kube-apiserver",
    "--kube-controller-manager-binary": "kube-controller-manager",
    "--kube-scheduler-binary": "kube-scheduler",
    "--kwok-controller-binary": "kwok",
}


class ClusterError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("RINGMASTER_CACHE_DIR", Path.home() / ".cache" / "ringmaster"))


def kwok_workdir() -> Path:
    return cache_dir() / "kwok"


def kubeconfig_path(name: str = DEFAULT_NAME) -> Path:
    return kwok_workdir() / "clusters" / name / "kubeconfig.yaml"


def _log(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Binaries:
    """The directory that hack/cluster-tools.sh prints: every binary, plus kwok's default stages."""

    directory: Path

    @classmethod
    def locate(cls, explicit: str | None = None) -> Binaries:
        directory = explicit or os.environ.get("RINGMASTER_BIN_DIR")
        if not directory:
            raise ClusterError(
                "no control-plane binaries: pass --bin-dir or set RINGMASTER_BIN_DIR to the "
                "directory that `hack/cluster-tools.sh` prints (`make tools` builds them)"
            )
        binaries = cls(Path(directory))
        needed = [*COMPONENT_BINARIES.values(), "kwokctl", "kubectl"]
        missing = [b for b in needed if not binaries.has(b)]
        if missing:
            raise ClusterError(f"{directory} lacks {', '.join(missing)}: run hack/cluster-tools.sh")
        return binaries

    def has(self, name: str) -> bool:
        return (self.directory / name).exists()

    def path(self, name: str) -> str:
        return str((self.directory / name).resolve())

    @functools.cache  # noqa: B019 - one Binaries per process; the answer never changes
    def kube_version(self) -> str:
        out = subprocess.run(
            [self.path("kube-apiserver"), "--version"], capture_output=True, text=True, check=True
        ).stdout  # "Kubernetes v1.36.1"
        return out.split()[-1]

    def stage_files(self) -> list[Path]:
        defaults = sorted((self.directory / "kwok-stages").glob("*.yaml"))
        if not defaults:
            raise ClusterError(f"no kwok stages in {self.directory}: rerun hack/cluster-tools.sh")
        ours = resources.files("ringmaster.localcluster") / "stages"
        return defaults + [Path(str(p)) for p in ours.iterdir() if p.name.endswith(".yaml")]


class LocalCluster:
    def __init__(
        self, binaries: Binaries, name: str = DEFAULT_NAME, kwok_pod_workers: int | None = None
    ) -> None:
        self.binaries = binaries
        self.name = name
        self.kwok_pod_workers = kwok_pod_workers  # None: kwok's default (4)
        self.kubeconfig = kubeconfig_path(name)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(kwok_workdir())
        env["PATH"] = f"{self.binaries.directory}{os.pathsep}{env.get('PATH', '')}"
        # kwokctl takes these two from the environment only (no flags in kwok 0.8).
        env["KWOK_KUBE_VERSION"] = self.binaries.kube_version()
        env["KWOK_KUBECTL_BINARY"] = self.binaries.path("kubectl")
        return env

    def kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binaries.path("kwokctl"), "-v=WARN", "--name", self.name, *args],
            env=self._env(),
            text=True,
            check=check,
        )

    def apply_objects(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply of the cluster's own add-ons (CRDs, webhooks, their Secrets) as
        one List, owned by the ``ringmaster-cluster`` field manager."""
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=ringmaster-cluster",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.binaries.path("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            env=self._env(),
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def exists(self) -> bool:
        return self.kubeconfig.exists()

    def component_problems(self) -> list[str]:
        """Each component kwokctl started that no longer runs, by name. kwokctl does not restart
        them, as a kubelet would restart a static pod, so one that exited leaves a broken
        cluster. One restarted by hand runs under another pid: a process of that name with this
        cluster's directory on its command line counts as running."""
        directory = self.kubeconfig.parent
        pid_files = sorted((directory / "pids").glob("*.pid"))
        if not pid_files:
            return [f"no component was started (no pid file in {directory / 'pids'})"]
        problems = []
        running: set[str] | None = None
        for pid_file in pid_files:
            try:
                os.kill(int(pid_file.read_text().strip()), 0)
                continue
            except (OSError, ValueError):
                pass
            if running is None:
                running = _processes_of(directory)
            if pid_file.stem not in running:
                problems.append(f"{pid_file.stem} is not running (the pid in {pid_file} is gone)")
        return problems

    def components_alive(self) -> bool:
        return not self.component_problems()

    def answers(self) -> bool:
        return self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0

    def is_healthy(self) -> bool:
        return self.exists() and self.components_alive() and self.answers()

    def up(
        self,
        pool_sizes: Mapping[str, int] | None = None,
        wait_seconds: float | None = None,
        recreate: bool = False,
        pools: Sequence[PoolTemplate] = POOLS,
    ) -> None:
        """Create the cluster (or reuse the one there) and its nodes; ``wait_seconds`` limits the
        wait for the nodes to be Ready (default: grows with the node count). A cluster that
        exists is deleted only when ``recreate`` asks for it: one that is broken (a component
        gone, the API server not answering) is reported, by component, and left as it is.
        ``pools``: the pools' definitions (default: the local cluster's own)."""
        nodes = node_list(pool_sizes, pools)
        if recreate and self.exists():
            _log(f"recreating cluster {self.name!r} (--recreate): every object in it goes")
            self.down()
        if not self.exists():
            self._create(CONTROL_PLANE_WAIT_SECONDS)
        else:
            problems = self.component_problems()
            if not self.answers():
                problems.append("its API server does not answer /readyz")
            if problems:
                raise ClusterError(
                    f"cluster {self.name!r} exists but {'; '.join(problems)}: start what is "
                    f"missing, or `ringmaster cluster up --name {self.name} --recreate` to "
                    "delete it (and every object in it) and create it anew"
                )
            _log(f"cluster {self.name!r} is already up ({self.kubeconfig})")
        self.apply_nodes(nodes, wait_seconds)

    def _create(self, wait_seconds: int) -> None:
        version = self.binaries.kube_version()
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "kwokctl-stages.yaml"
            ports = {key: free_port() for key in KWOKCTL_PORT_OPTIONS}
            documents = [kwokctl_configuration(ports)] + [
                p.read_text() for p in self.binaries.stage_files()
            ]
            if self.kwok_pod_workers is not None:
                documents.append(kwok_configuration(self.kwok_pod_workers))
            config.write_text("\n---\n".join(documents), encoding="utf-8")
            flags = [f"{flag}={self.binaries.path(b)}" for flag, b in COMPONENT_BINARIES.items()]
            _log(f"creating cluster {self.name!r} (Kubernetes {version}, kwok binary runtime)")
            start = time.monotonic()
            self.kwokctl(
                "create",
                "cluster",
                "--runtime=binary",
                *flags,
                f"--config={config}",
                # RBAC on, as in every real cluster: least-privilege tests need it.
                "--kube-authorization=true",
                # Keep the user's ~/.kube/config untouched; our kubeconfig is the cluster's own.
                "--kubeconfig=",
                f"--wait={wait_seconds}s",
            )
        _log(f"control plane up in {time.monotonic() - start:.0f}s; kubeconfig: {self.kubeconfig}")

    def apply_nodes(self, nodes: Mapping[str, object], wait_seconds: float | None = None) -> None:
        items = nodes["items"]
        assert isinstance(items, list)
        _log(f"applying {len(items)} simulated nodes")
        start = time.monotonic()
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(nodes)
        )
        _log(f"applied in {time.monotonic() - start:.0f}s; waiting for them to be Ready")
        names = [str(n["metadata"]["name"]) for n in items]
        try:
            wait_for_ready_nodes(self.kubeconfig, names, wait_seconds, log=_log)
        except NodesNotReady as error:
            raise ClusterError(str(error)) from None

    def down(self) -> None:
        _log(f"deleting cluster {self.name!r}")
        with tempfile.TemporaryDirectory() as tmp:
            # kwokctl removes the cluster's context from this file; keep ~/.kube/config untouched.
            scratch = Path(tmp) / "kubeconfig"
            scratch.write_text("apiVersion: v1\nkind: Config\n", encoding="utf-8")
            self.kwokctl("delete", "cluster", f"--kubeconfig={scratch}", check=False)
        # kwokctl stops the pid in each component's pid file, and only that one: a component
        # restarted by hand (or whose pid file went) runs on, bound to ports and files of a
        # cluster that is gone. Every process that still names this cluster's directory is one
        # of its components, however it was started.
        stop_processes(self.kubeconfig.parent)
        # kwokctl leaves the workdir when a component is already gone; make `down` total.
        shutil.rmtree(self.kubeconfig.parent, ignore_errors=True)


@dataclass(frozen=True)
class Process:
    pid: int
    argv: tuple[bytes, ...]

    @property
    def name(self) -> str:
        return Path(self.argv[0].decode(errors="replace")).name


def names_path_in(argv: Sequence[bytes], directory: Path) -> bool:
    """Whether a command line names `directory`, or a path inside it, as an argument: whole
    (``--data-dir /d/etcd``), as a flag's value (``--client-ca-file=/d/pki/ca.crt``) or as an
    item of a comma-separated list. A sibling whose name starts the same (clusters/rm-2 beside
    clusters/rm) is not inside it, nor is a path that merely contains it (/backup/d)."""
    root = str(directory).rstrip("/").encode()
    for arg in argv[1:]:
        for token in re.split(rb"[=,]", arg):
            if token == root or token.startswith(root + b"/"):
                return True
    return False


def processes_in(directory: Path, processes: Iterable[Process]) -> list[Process]:
    """The processes whose command line names `directory` or a path inside it: the components
    of the cluster that lives there (their kubeconfig, certificates, etcd data and logs are
    all in it). A zombie or a kernel thread (no command line) is none."""
    return [p for p in processes if p.argv and p.argv[0] and names_path_in(p.argv, directory)]


def running_processes() -> list[Process]:
    """Every process this user can see, from Linux's /proc (none elsewhere)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            continue
        found.append(Process(int(cmdline.parent.name), tuple(argv)))
    return found


def _ancestors() -> set[int]:
    """This process and every process above it (not to be stopped, whatever they name)."""
    pids = set()
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the (name) is the ppid
    return pids


def stop_processes(
    directory: Path, grace_seconds: float = 2.0, kill_wait_seconds: float = 15.0
) -> list[Process]:
    """Stop every process of the cluster in `directory` that still runs: SIGTERM, then SIGKILL
    for any left after `grace_seconds`, and return once they have exited (at most
    `kill_wait_seconds` after the SIGKILL). Returns those it found."""
    spared = _ancestors()
    found = [p for p in processes_in(directory, running_processes()) if p.pid not in spared]
    for process in found:
        _log(f"stopping {process.name} (pid {process.pid}), still running after kwokctl")
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
    left = _wait_until_exited(found, grace_seconds)
    for process in left:
        _log(f"killing {process.name} (pid {process.pid}): it ignored SIGTERM")
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    # A killed process keeps its command line (and its ports) until the kernel has torn it
    # down: returning at once let a `down` end with a kube-apiserver still there (stop 62's CI).
    for process in _wait_until_exited(left, kill_wait_seconds):
        _log(
            f"{process.name} (pid {process.pid}) still runs {kill_wait_seconds:.0f} s after SIGKILL"
        )
    return found


def _wait_until_exited(processes: list[Process], seconds: float) -> list[Process]:
    """Wait up to `seconds` for the processes to exit; those still running."""
    deadline = time.monotonic() + seconds
    left = processes
    while left:
        left = [p for p in left if _still_runs(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return left


def _still_runs(process: Process) -> bool:
    """The process runs with the same command line (gone, a zombie, or a reused pid: not)."""
    try:
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return False
    return tuple(argv) == process.argv


def _processes_of(directory: Path) -> set[str]:
    """The program names of running processes whose command line names `directory` (Linux's
    /proc; elsewhere none is found, and only pid files count)."""
    return {p.name for p in processes_in(directory, running_processes())}


def pool_summary(nodes: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """Group node objects by pool: what `ringmaster cluster pools` prints."""
    from ringmaster.placement.labels import ACCELERATOR_TAINT_KEYS, pool_identity

    pools: dict[str, dict[str, object]] = {}
    for node in nodes:
        metadata = node["metadata"]
        status = node.get("status", {})
        assert isinstance(metadata, dict) and isinstance(status, dict)
        identity = pool_identity(metadata.get("labels", {}))
        allocatable = status.get("allocatable", {})
        devices = [int(allocatable[k]) for k in ACCELERATOR_TAINT_KEYS if k in allocatable]
        per_node = devices[0] if devices else 0
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        entry = pools.setdefault(
            identity.pool or "(no pool label)",
            {
                "pool": identity.pool or "(no pool label)",
                "instanceType": identity.instance_type or "",
                "accelerator": identity.accelerator or "",
                "topology": identity.tpu_topology or "",
                "acceleratorsPerNode": per_node,
                "nodes": 0,
                "ready": 0,
            },
        )
        entry["nodes"] = int(str(entry["nodes"])) + 1
        entry["ready"] = int(str(entry["ready"])) + int(ready)
    return sorted(pools.values(), key=lambda e: str(e["pool"]))


def format_pool_summary(rows: Sequence[Mapping[str, object]]) -> str:
    headers = ["POOL", "INSTANCE TYPE", "ACCELERATOR", "TOPOLOGY", "PER NODE", "NODES", "READY"]
    keys = [
        "pool",
        "instanceType",
        "accelerator",
        "topology",
        "acceleratorsPerNode",
        "nodes",
        "ready",
    ]
    table = [headers] + [[str(row[k]) if row[k] != "" else "-" for k in keys] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table
    )


def show_pools(kubeconfig: Path) -> str:
    """The pools of the cluster behind ``kubeconfig``: needs the API only, no binaries."""
    try:
        nodes = list_nodes(kubeconfig)
    except NodesNotReady as error:
        raise ClusterError(str(error)) from None
    return format_pool_summary(pool_summary(nodes))
