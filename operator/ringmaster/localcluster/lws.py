"""LeaderWorkerSet's controller manager as a process against the local cluster
(`ringmaster cluster up --lws`).

The binary, its CRDs and its webhook configurations come from LeaderWorkerSet's Go module at the
version pinned in tools/versions.env (hack/cluster-tools.sh copies them into the bin directory);
nothing is fetched at run time. As for Kueue (kueue.py, whose certificates and process handling
this follows):

- LeaderWorkerSet's cert rotator stays on (internalCertManagement, its default): we hand it, in
  its Secret, a certificate valid for the webhook Service's DNS name and for 127.0.0.1, so it
  keeps ours and injects the CA into its two webhook configurations.
- The apiserver reaches the webhooks at https://127.0.0.1:PORT (a `url` client config). The pod
  webhooks carry the objectSelector LeaderWorkerSet's own kustomization adds
  (config/webhook/*-patch.yaml): only pods of a LeaderWorkerSet go through them, so stopping the
  process never blocks another pod.
- The webhooks matter here: the pod webhook gives each pod its group labels (group index,
  worker index, group key) and LWS_LEADER_ADDRESS / LWS_GROUP_SIZE / LWS_WORKER_INDEX, which
  the endpoint's pods and the operator's admission of whole groups read.
- The namespace its rotator and its manager work in comes from the Configuration's
  leaderElection.resourceNamespace (pkg/config): lws-system, as in its install.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ringmaster.localcluster.cluster import ClusterError, LocalCluster
from ringmaster.localcluster.kueue import ServingCertificates
from ringmaster.localcluster.ports import free_port

NAMESPACE = "lws-system"
# Names LeaderWorkerSet's cert rotator derives its work from (api/config/v1alpha1/defaults.go,
# pkg/cert/cert.go, v0.9).
WEBHOOK_SERVICE = "lws-webhook-service"
WEBHOOK_SECRET = "lws-webhook-server-cert"
WEBHOOK_CONFIGURATION_PREFIX = "lws-"  # kustomize's namePrefix in its config/default
CA_NAME = "lws-ca"
CA_ORGANIZATION = "lws"
POD_WEBHOOKS = ("/mutate--v1-pod", "/validate--v1-pod")
LWS_POD_SELECTOR = {
    "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
}
BINARY = "lws"


def _log(message: str) -> None:
    print(f"[lws] {message}", file=sys.stderr, flush=True)


def configuration(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """LeaderWorkerSet's Configuration (config.lws.x-k8s.io/v1alpha1) for one local manager."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        # One manager, no standby (as Kueue's, kueue.py); the namespace its rotator uses.
        "leaderElection": {"leaderElect": False, "resourceNamespace": NAMESPACE},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # "0" turns the metrics server off: it would listen on :8443 on every interface.
        "metrics": {"bindAddress": "0"},
    }


def webhook_configurations(
    manifests: Iterable[Mapping[str, Any]], base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """LeaderWorkerSet's webhook configurations, called at `base_url`, its pod webhooks limited
    to its own pods."""
    bundle = base64.b64encode(ca_pem).decode()
    result = []
    for manifest in manifests:
        document = copy.deepcopy(dict(manifest))
        document["metadata"] = {"name": WEBHOOK_CONFIGURATION_PREFIX + manifest["metadata"]["name"]}
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url + path, "caBundle": bundle}
            if path in POD_WEBHOOKS:
                webhook["objectSelector"] = copy.deepcopy(LWS_POD_SELECTOR)
        result.append(document)
    return result


class LocalLeaderWorkerSet:
    """Install LeaderWorkerSet's CRDs and webhooks into a local cluster and run its manager."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.directory = cluster.binaries.directory
        self.workdir = cluster.kubeconfig.parent / "lws"
        self.pid_file = self.workdir / "lws.pid"
        self.log_file = self.workdir / "lws.log"
        self.cert_dir = self.workdir / "certs"

    @staticmethod
    def available(bin_dir: Path) -> bool:
        return (bin_dir / BINARY).exists() and (bin_dir / "lws-crds").is_dir()

    def pid(self) -> int | None:
        """The manager's pid if it runs (checked against its command line: pids get reused)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except (OSError, ValueError):
            return None
        return pid if Path(cmdline.decode()).name == BINARY else None

    def up(self, wait_seconds: int = 180) -> int:
        """Start it and wait until it is ready; returns its pid."""
        if not self.available(self.directory):
            raise ClusterError(
                f"no LeaderWorkerSet in {self.directory}: hack/cluster-tools.sh builds it "
                "(tools/lws)"
            )
        if not self.cluster.is_healthy():
            raise ClusterError(f"cluster {self.cluster.name!r} is not up: `ringmaster cluster up`")
        if self.pid() is not None:
            self.down()
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = ServingCertificates.load(self.cert_dir)
        if certs is None:
            certs = ServingCertificates.generate(
                CA_NAME, CA_ORGANIZATION, f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
            )
            self.cert_dir.mkdir(parents=True, exist_ok=True)
            for name, data in certs.as_files().items():
                (self.cert_dir / name).write_bytes(data)
                os.chmod(self.cert_dir / name, 0o600)
        webhook_port, health_port = free_port(), free_port()
        base_url = f"https://127.0.0.1:{webhook_port}"
        self._install(base_url, certs)
        config = self.workdir / "configuration.yaml"
        config.write_text(
            yaml.safe_dump(configuration(webhook_port, health_port, self.cert_dir)),
            encoding="utf-8",
        )
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))
        start = time.monotonic()
        with self.log_file.open("ab") as log:
            process = subprocess.Popen(
                [str(self.directory / BINARY), f"--config={config}"],
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
                    f"LeaderWorkerSet exited ({process.returncode}) before it was ready: "
                    f"{self._log_tail()}"
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
                    f"LeaderWorkerSet not ready after {wait_seconds}s: {self._log_tail()}"
                )
            time.sleep(0.25)
        _log(
            f"LeaderWorkerSet ready in {time.monotonic() - start:.1f}s (pid {process.pid}); "
            f"log: {self.log_file}"
        )
        return process.pid

    def _install(self, base_url: str, certs: ServingCertificates) -> None:
        crds = [
            yaml.safe_load(p.read_text()) for p in sorted((self.directory / "lws-crds").glob("*"))
        ]
        manifests = list(yaml.safe_load_all((self.directory / "lws-webhooks.yaml").read_text()))
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in certs.as_files().items()},
        }
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        objects = [
            *crds,
            namespace,
            secret,
            *webhook_configurations(manifests, base_url, certs.ca_cert),
        ]
        _log(f"installing LeaderWorkerSet's {len(crds)} CRDs and webhooks (at {base_url})")
        self.cluster.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=ringmaster-cluster",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )
        self.cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            *(f"crd/{c['metadata']['name']}" for c in crds),
        )  # fmt: skip

    def down(self, uninstall: bool = False) -> None:
        """Stop the manager and unregister its webhooks (they fail closed: with it gone, they
        would refuse every LeaderWorkerSet write and every LeaderWorkerSet pod). ``uninstall``
        also deletes its CRDs (and so every LeaderWorkerSet): the cluster as if it never ran."""
        pid = self.pid()
        if pid is not None:
            _log(f"stopping LeaderWorkerSet (pid {pid})")
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
                    f"{WEBHOOK_CONFIGURATION_PREFIX}{kind}-webhook-configuration",
                    "--ignore-not-found",
                )
            if uninstall and (self.directory / "lws-crds").is_dir():
                for path in sorted((self.directory / "lws-crds").glob("*")):
                    name = yaml.safe_load(path.read_text())["metadata"]["name"]
                    self.cluster.kubectl("delete", "crd", name, "--ignore-not-found")

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
