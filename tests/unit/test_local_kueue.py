"""The local Kueue's configuration, webhook rewriting and certificates (no cluster needed)."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path

from cryptography import x509

from ringmaster.localcluster.kueue import (
    CA_NAME,
    CONVERTED_CRDS,
    TRAINING_JOB_FRAMEWORK,
    configuration,
    kueue_certificates,
    webhook_configurations,
    with_conversion_webhook,
)

BASE_URL = "https://127.0.0.1:40000"


def _webhook(name: str, group: str, path: str) -> dict[str, object]:
    return {
        "name": name,
        "clientConfig": {
            "service": {"name": "webhook-service", "namespace": "system", "path": path}
        },
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "resources": ["x"]}],
        "failurePolicy": "Fail",
    }


def test_configuration_registers_trainingjob_and_stays_on_loopback() -> None:
    config = configuration(40000, 40001, Path("/tmp/certs"))
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["integrations"]["externalFrameworks"] == [TRAINING_JOB_FRAMEWORK]
    assert TRAINING_JOB_FRAMEWORK.split(".") == ["TrainingJob", "v1alpha1", "ringmaster", "dev"]
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 40000, "certDir": "/tmp/certs"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:40001"
    assert config["metrics"]["bindAddress"] == "0"
    assert config["internalCertManagement"]["enable"] is True


def test_only_kueue_group_webhooks_are_registered_at_the_local_url() -> None:
    manifests = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [
                _webhook("vpod.kb.io", "", "/validate--v1-pod"),
                _webhook("vworkload.kb.io", "kueue.x-k8s.io", "/validate-workload"),
            ],
        }
    ]
    [config] = webhook_configurations(manifests, BASE_URL, b"CA")
    assert config["metadata"] == {"name": "kueue-validating-webhook-configuration"}
    [webhook] = config["webhooks"]
    assert webhook["name"] == "vworkload.kb.io"
    assert webhook["clientConfig"] == {
        "url": BASE_URL + "/validate-workload",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    # The input is left as it was (the cached manifest is reused at the next start).
    assert "service" in manifests[0]["webhooks"][1]["clientConfig"]  # type: ignore[index]


def test_conversion_webhook_only_on_the_crds_kueue_injects() -> None:
    for name, converted in [(CONVERTED_CRDS[0], True), ("resourceflavors.kueue.x-k8s.io", False)]:
        crd = with_conversion_webhook({"metadata": {"name": name}, "spec": {}}, BASE_URL, b"CA")
        assert ("conversion" in crd["spec"]) is converted
        if converted:
            assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == (
                BASE_URL + "/convert"
            )


def test_serving_certificate_is_valid_for_the_service_and_loopback() -> None:
    certs = kueue_certificates()
    ca = x509.load_pem_x509_certificate(certs.ca_cert)
    server = x509.load_pem_x509_certificate(certs.cert)
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["kueue-webhook-service.kueue-system.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    ca_names = ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ca_names.get_values_for_type(x509.DNSName) == [CA_NAME]
    # cert-controller parses both keys as PKCS#1.
    assert certs.key.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    assert certs.ca_key.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
