"""Kueue's controller manager as a process against the local cluster (`ringmaster cluster kueue`).

The binary, its CRDs and its webhook configurations come from Kueue's Go module at the version
pinned in tools/versions.env (hack/cluster-tools.sh copies them into the bin directory); nothing
is fetched at run time. What a real installation gets from its Deployment, Service and Secret
volume, this module does on the host:

- Kueue's own cert rotator stays on (internalCertManagement): with it off, Kueue v0.19 reads the
  metrics serving certificate from a fixed /etc/kueue/metrics/certs and exits without one. The
  rotator keeps a certificate that is valid for the name it checks (the webhook Service's DNS
  name), so we hand it one, in its Secret, that is ALSO valid for 127.0.0.1.
- The apiserver reaches the webhooks at https://127.0.0.1:PORT (a `url` client config, as
  controller-runtime's envtest and Kueue's own integration tests do): a local process has no
  Service the apiserver can route to. Only the webhooks of Kueue's own API group are registered
  (ClusterQueue, LocalQueue, Workload, ...): TrainingJob is an external framework with no Kueue
  webhook, and Kueue's Pod/Job/Deployment webhooks would put every pod of the cluster behind a
  process that `kueue down` stops.
- The five CRDs the rotator injects its CA into carry a conversion webhook at the same URL, as
  in Kueue's own install (without one the rotator never reports ready).
"""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ringmaster.localcluster.cluster import ClusterError, LocalCluster
from ringmaster.localcluster.ports import free_port

NAMESPACE = "kueue-system"
# Names Kueue's cert rotator derives its work from (Kueue's defaults, apis/config/v1beta2).
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
WEBHOOK_CONFIGURATION_PREFIX = "kueue-"  # kustomize's namePrefix in Kueue's config/default
CA_NAME = "kueue-ca"  # the rotator checks its CA against this name (pkg/util/cert)
KUEUE_GROUP = "kueue.x-k8s.io"
# The CRDs Kueue's rotator injects its CA into (pkg/util/cert/cert.go, v0.19).
CONVERTED_CRDS = (
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
)
# The Configuration's `integrations.externalFrameworks` form: Kind.version.group.
TRAINING_JOB_FRAMEWORK = "TrainingJob.v1alpha1.ringmaster.dev"
BINARY = "kueue"


def _log(message: str) -> None:
    print(f"[kueue] {message}", file=sys.stderr, flush=True)


def configuration(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for one local manager."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        # One manager, no standby: with election on, a renewal that a loaded machine delays
        # makes it exit, and nothing restarts it here (as with the kube-scheduler, cluster.py).
        "leaderElection": {"leaderElect": False},
        "manageJobsWithoutQueueName": False,
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": WEBHOOK_SECRET,
        },
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # "0" turns the metrics server off: it would listen on :8443 on every interface.
        "metrics": {"bindAddress": "0"},
        # The visibility API is an aggregated apiserver on 0.0.0.0:8082 with an APIService to
        # register; nothing here reads pending workloads through it.
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"externalFrameworks": [TRAINING_JOB_FRAMEWORK]},
    }


def webhook_configurations(
    manifests: Iterable[Mapping[str, Any]], base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, reduced to its own API group, called at `base_url`."""
    bundle = base64.b64encode(ca_pem).decode()
    result = []
    for manifest in manifests:
        document = copy.deepcopy(dict(manifest))
        document["metadata"] = {"name": WEBHOOK_CONFIGURATION_PREFIX + manifest["metadata"]["name"]}
        webhooks = []
        for webhook in document["webhooks"]:
            groups = {g for rule in webhook["rules"] for g in rule["apiGroups"]}
            if groups != {KUEUE_GROUP}:
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url + path, "caBundle": bundle}
            webhooks.append(webhook)
        document["webhooks"] = webhooks
        result.append(document)
    return result


def with_conversion_webhook(crd: Mapping[str, Any], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """A CRD as Kueue's kustomization patches it (config/components/crd/patches), but at a URL."""
    document = copy.deepcopy(dict(crd))
    if document["metadata"]["name"] in CONVERTED_CRDS:
        document["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {
                    "url": base_url + "/convert",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "conversionReviewVersions": ["v1"],
            },
        }
    return document


@dataclass(frozen=True)
class ServingCertificates:
    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")

    def as_files(self) -> dict[str, bytes]:
        return dict(zip(self.FILES, (self.ca_cert, self.ca_key, self.cert, self.key), strict=True))

    @classmethod
    def load(cls, directory: Path) -> ServingCertificates | None:
        paths = [directory / f for f in cls.FILES]
        if not all(p.exists() for p in paths):
            return None
        return cls(*(p.read_bytes() for p in paths))

    @classmethod
    def generate(
        cls,
        ca_name: str = CA_NAME,
        organization: str = "kueue",
        service_dns: str = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc",
    ) -> ServingCertificates:
        """A CA and a serving certificate in the shape a cert-controller rotator (Kueue's,
        LeaderWorkerSet's) makes and accepts: RSA keys in PKCS#1, the CA valid for ``ca_name``,
        the server for the webhook Service's DNS name plus 127.0.0.1 (for the apiserver); ten
        years, past the 90-day look-ahead."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        def pem_key(key: rsa.RSAPrivateKey) -> bytes:
            return key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,  # PKCS#1, what the rotator parses
                serialization.NoEncryption(),
            )

        now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        until = now + datetime.timedelta(days=3650)
        ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        ca_subject = x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, ca_name),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            ]
        )
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_subject)
            .issuer_name(ca_subject)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=True,
                    key_cert_sign=True,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service_dns)]))
            .issuer_name(ca_subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName(service_dns),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return cls(
            ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
            ca_key=pem_key(ca_key),
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=pem_key(key),
        )


@dataclass(frozen=True)
class KueueStatus:
    pid: int
    start_seconds: float
    rss_mib: float


class LocalKueue:
    """Install Kueue's CRDs and webhooks into a local cluster and run its manager beside it."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.directory = cluster.binaries.directory
        self.workdir = cluster.kubeconfig.parent / "kueue"
        self.pid_file = self.workdir / "kueue.pid"
        self.log_file = self.workdir / "kueue.log"
        self.cert_dir = self.workdir / "certs"

    @staticmethod
    def available(bin_dir: Path) -> bool:
        return (bin_dir / BINARY).exists() and (bin_dir / "kueue-crds").is_dir()

    def pid(self) -> int | None:
        """The manager's pid if it runs (checked against its command line: pids get reused)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except (OSError, ValueError):
            return None
        return pid if Path(cmdline.decode()).name == BINARY else None

    def up(self, wait_seconds: int = 180) -> KueueStatus:
        if not self.available(self.directory):
            raise ClusterError(
                f"no Kueue in {self.directory}: hack/cluster-tools.sh builds it (tools/kueue)"
            )
        if not self.cluster.is_healthy():
            raise ClusterError(f"cluster {self.cluster.name!r} is not up: `ringmaster cluster up`")
        if self.pid() is not None:
            self.down()
        self.workdir.mkdir(parents=True, exist_ok=True)
        certs = ServingCertificates.load(self.cert_dir)
        if certs is None:
            certs = ServingCertificates.generate()
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
                    f"Kueue exited ({process.returncode}) before it was ready: {self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(readyz, timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.down()
                raise ClusterError(f"Kueue not ready after {wait_seconds}s: {self._log_tail()}")
            time.sleep(0.25)
        status = KueueStatus(process.pid, time.monotonic() - start, self.rss_mib(process.pid))
        _log(
            f"Kueue ready in {status.start_seconds:.1f}s (pid {status.pid}, "
            f"{status.rss_mib:.0f} MiB); log: {self.log_file}"
        )
        return status

    @staticmethod
    def rss_mib(pid: int) -> float:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _install(self, base_url: str, certs: ServingCertificates) -> None:
        crds = [
            with_conversion_webhook(yaml.safe_load(p.read_text()), base_url, certs.ca_cert)
            for p in sorted((self.directory / "kueue-crds").glob("*.yaml"))
        ]
        manifests = list(yaml.safe_load_all((self.directory / "kueue-webhooks.yaml").read_text()))
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
        _log(f"installing Kueue's {len(crds)} CRDs and webhooks (at {base_url})")
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

    def down(self) -> None:
        """Stop the manager and unregister its webhooks (they fail closed: with Kueue gone, they
        would refuse every ClusterQueue, LocalQueue and Workload write). CRDs and objects stay."""
        pid = self.pid()
        if pid is not None:
            _log(f"stopping Kueue (pid {pid})")
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while self.pid() is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            if self.pid() is not None:
                os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        if self.cluster.is_healthy():
            for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
                name = f"{WEBHOOK_CONFIGURATION_PREFIX}{kind.removesuffix('webhookconfiguration')}"
                self.cluster.kubectl(
                    "delete", kind, f"{name}-webhook-configuration", "--ignore-not-found"
                )

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
