"""A controller manager run as a process beside the local cluster, its webhooks called by the
apiserver at https://127.0.0.1:PORT: what Kueue (kueue.py) and LeaderWorkerSet (lws.py) share.

Each subclass names its component (the binary, and the ``<component>-crds`` folder and
``<component>-webhooks.yaml`` that hack/cluster-tools.sh copies beside it), its namespace, its
webhook Secret and configuration prefix, and supplies its Configuration, its certificates and
how its CRDs and webhook configurations are rewritten for the local apiserver. Start-up,
readiness, the pid check and shutdown are one piece here.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ringmaster.localcluster.certificates import ServingCertificates
from ringmaster.localcluster.cluster import ClusterError, LocalCluster
from ringmaster.localcluster.ports import free_port


class WebhookManager:
    """Install a manager's CRDs and webhooks into a local cluster and run it beside it."""

    TITLE: ClassVar[str]  # in messages: "Kueue", "LeaderWorkerSet"
    COMPONENT: ClassVar[str]  # the binary's name, and its folders'
    NAMESPACE: ClassVar[str]
    WEBHOOK_SECRET: ClassVar[str]
    WEBHOOK_CONFIGURATION_PREFIX: ClassVar[str]  # kustomize's namePrefix in its config/default

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.directory = cluster.binaries.directory
        self.workdir = cluster.kubeconfig.parent / self.COMPONENT
        self.pid_file = self.workdir / f"{self.COMPONENT}.pid"
        self.log_file = self.workdir / f"{self.COMPONENT}.log"
        self.cert_dir = self.workdir / "certs"

    # --- what each manager supplies

    def new_certificates(self) -> ServingCertificates:
        raise NotImplementedError

    def configuration(self, webhook_port: int, health_port: int) -> dict[str, Any]:
        raise NotImplementedError

    def crds(self, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
        """Its CRDs as the local apiserver should hold them."""
        return [yaml.safe_load(p.read_text()) for p in self.crd_paths()]

    def webhook_configurations(
        self, manifests: Iterable[Mapping[str, Any]], base_url: str, ca_pem: bytes
    ) -> list[dict[str, Any]]:
        raise NotImplementedError

    # --- shared

    def log(self, message: str) -> None:
        print(f"[{self.COMPONENT}] {message}", file=sys.stderr, flush=True)

    @classmethod
    def available(cls, bin_dir: Path) -> bool:
        return (bin_dir / cls.COMPONENT).exists() and (bin_dir / f"{cls.COMPONENT}-crds").is_dir()

    def crd_paths(self) -> list[Path]:
        return sorted((self.directory / f"{self.COMPONENT}-crds").glob("*.yaml"))

    def pid(self) -> int | None:
        """The manager's pid if it runs (checked against its command line: pids get reused)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except (OSError, ValueError):
            return None
        return pid if Path(cmdline.decode()).name == self.COMPONENT else None

    def start(self, wait_seconds: int, missing: str) -> tuple[int, float]:
        """Install its objects, start it and wait until it is ready: (pid, seconds it took).
        ``missing``: what to say where the binary is not built."""
        if not self.available(self.directory):
            raise ClusterError(f"no {self.TITLE} in {self.directory}: {missing}")
        if not self.cluster.is_healthy():
            raise ClusterError(f"cluster {self.cluster.name!r} is not up: `ringmaster cluster up`")
        if self.pid() is not None:
            self.down()
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = ServingCertificates.load(self.cert_dir)
        if certs is None:
            certs = self.new_certificates()
            self.cert_dir.mkdir(parents=True, exist_ok=True)
            for name, data in certs.as_files().items():
                (self.cert_dir / name).write_bytes(data)
                os.chmod(self.cert_dir / name, 0o600)
        webhook_port, health_port = free_port(), free_port()
        base_url = f"https://127.0.0.1:{webhook_port}"
        self._install(base_url, certs)
        config = self.workdir / "configuration.yaml"
        config.write_text(
            yaml.safe_dump(self.configuration(webhook_port, health_port)), encoding="utf-8"
        )
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        start = time.monotonic()
        with self.log_file.open("ab") as log:
            process = subprocess.Popen(
                [str(self.directory / self.COMPONENT), f"--config={config}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.workdir,
                start_new_session=True,  # outlives `ringmaster cluster`, like kwokctl's components
            )
        self.pid_file.write_text(str(process.pid), encoding="utf-8")
        readyz = f"http://127.0.0.1:{health_port}/readyz"
        deadline = start + wait_seconds
        while True:
            if process.poll() is not None:
                raise ClusterError(
                    f"{self.TITLE} exited ({process.returncode}) before it was ready: "
                    f"{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(readyz, timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.down()
                raise ClusterError(
                    f"{self.TITLE} not ready after {wait_seconds}s: {self.log_tail()}"
                )
            time.sleep(0.25)
        return process.pid, time.monotonic() - start

    def _install(self, base_url: str, certs: ServingCertificates) -> None:
        crds = self.crds(base_url, certs.ca_cert)
        webhooks = self.directory / f"{self.COMPONENT}-webhooks.yaml"
        manifests = list(yaml.safe_load_all(webhooks.read_text()))
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": self.WEBHOOK_SECRET, "namespace": self.NAMESPACE},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in certs.as_files().items()},
        }
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.NAMESPACE}}
        objects = [
            *crds,
            namespace,
            secret,
            *self.webhook_configurations(manifests, base_url, certs.ca_cert),
        ]
        self.log(f"installing {self.TITLE}'s {len(crds)} CRDs and webhooks (at {base_url})")
        self.cluster.apply_objects(objects)
        self.cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            *(f"crd/{c['metadata']['name']}" for c in crds),
        )  # fmt: skip
        self.wait_served(crds)

    def wait_served(self, crds: Iterable[Mapping[str, Any]], seconds: float = 120.0) -> None:
        """Until the apiserver lists every CRD's objects. Established is not served: the
        apiserver answers 429 "storage is (re)initializing" until its watch cache for the new
        resource is filled, which on a loaded machine has taken over a minute; a controller
        that starts watching then backs off, and what waits on it waits longer still."""
        names = [f"{c['spec']['names']['plural']}.{c['spec']['group']}" for c in crds]
        deadline = time.monotonic() + seconds
        while True:
            pending = [
                n
                for n in names
                if self.cluster.kubectl(
                    "get", n, "-A", "-o", "name", "--request-timeout=10s", check=False
                ).returncode
                != 0
            ]
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{self.TITLE}'s CRDs are established but the apiserver does not list "
                    f"{', '.join(pending)} after {seconds:.0f} s"
                )
            time.sleep(0.5)

    def down(self) -> None:
        """Stop the manager and unregister its webhooks (they fail closed: with the manager
        gone, they would refuse every write they guard). CRDs and objects stay."""
        pid = self.pid()
        if pid is not None:
            self.log(f"stopping {self.TITLE} (pid {pid})")
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            if self.pid() is not None:
                os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        if self.cluster.is_healthy():
            for kind in ("mutating", "validating"):
                self.cluster.kubectl(
                    "delete",
                    f"{kind}webhookconfiguration",
                    f"{self.WEBHOOK_CONFIGURATION_PREFIX}{kind}-webhook-configuration",
                    "--ignore-not-found",
                )

    @staticmethod
    def rss_mib(pid: int) -> float:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
