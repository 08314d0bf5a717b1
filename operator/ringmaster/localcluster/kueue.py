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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ringmaster.localcluster.certificates import ServingCertificates
from ringmaster.localcluster.webhook_manager import WebhookManager

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
class KueueStatus:
    pid: int
    start_seconds: float
    rss_mib: float


def kueue_certificates() -> ServingCertificates:
    """Certificates for Kueue's webhook Service, under the CA name its rotator checks."""
    return ServingCertificates.generate(CA_NAME, "kueue", f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc")


class LocalKueue(WebhookManager):
    """Install Kueue's CRDs and webhooks into a local cluster and run its manager beside it."""

    TITLE = "Kueue"
    COMPONENT = BINARY
    NAMESPACE = NAMESPACE
    WEBHOOK_SECRET = WEBHOOK_SECRET
    WEBHOOK_CONFIGURATION_PREFIX = WEBHOOK_CONFIGURATION_PREFIX

    def new_certificates(self) -> ServingCertificates:
        return kueue_certificates()

    def configuration(self, webhook_port: int, health_port: int) -> dict[str, Any]:
        return configuration(webhook_port, health_port, self.cert_dir)

    def crds(self, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
        return [
            with_conversion_webhook(yaml.safe_load(p.read_text()), base_url, ca_pem)
            for p in self.crd_paths()
        ]

    def webhook_configurations(
        self, manifests: Iterable[Mapping[str, Any]], base_url: str, ca_pem: bytes
    ) -> list[dict[str, Any]]:
        return webhook_configurations(manifests, base_url, ca_pem)

    def up(self, wait_seconds: int = 180) -> KueueStatus:
        pid, seconds = self.start(wait_seconds, "hack/cluster-tools.sh builds it (tools/kueue)")
        status = KueueStatus(pid, seconds, self.rss_mib(pid))
        self.log(
            f"Kueue ready in {status.start_seconds:.1f}s (pid {status.pid}, "
            f"{status.rss_mib:.0f} MiB); log: {self.log_file}"
        )
        return status
