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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ringmaster.localcluster.certificates import ServingCertificates
from ringmaster.localcluster.webhook_manager import WebhookManager

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


class LocalLeaderWorkerSet(WebhookManager):
    """Install LeaderWorkerSet's CRDs and webhooks into a local cluster and run its manager."""

    TITLE = "LeaderWorkerSet"
    COMPONENT = BINARY
    NAMESPACE = NAMESPACE
    WEBHOOK_SECRET = WEBHOOK_SECRET
    WEBHOOK_CONFIGURATION_PREFIX = WEBHOOK_CONFIGURATION_PREFIX

    def new_certificates(self) -> ServingCertificates:
        return ServingCertificates.generate(
            CA_NAME, CA_ORGANIZATION, f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
        )

    def configuration(self, webhook_port: int, health_port: int) -> dict[str, Any]:
        return configuration(webhook_port, health_port, self.cert_dir)

    def webhook_configurations(
        self, manifests: Iterable[Mapping[str, Any]], base_url: str, ca_pem: bytes
    ) -> list[dict[str, Any]]:
        return webhook_configurations(manifests, base_url, ca_pem)

    def up(self, wait_seconds: int = 180) -> int:
        """Start it and wait until it is ready; returns its pid."""
        pid, seconds = self.start(wait_seconds, "hack/cluster-tools.sh builds it (tools/lws)")
        self.log(f"LeaderWorkerSet ready in {seconds:.1f}s (pid {pid}); log: {self.log_file}")
        return pid

    def down(self, uninstall: bool = False) -> None:
        """Stop the manager and unregister its webhooks (they fail closed: with it gone, they
        would refuse every LeaderWorkerSet write and every LeaderWorkerSet pod). ``uninstall``
        also deletes its CRDs (and so every LeaderWorkerSet): the cluster as if it never ran."""
        super().down()
        if uninstall and self.cluster.is_healthy():
            for path in self.crd_paths():
                name = yaml.safe_load(path.read_text())["metadata"]["name"]
                self.cluster.kubectl("delete", "crd", name, "--ignore-not-found")
