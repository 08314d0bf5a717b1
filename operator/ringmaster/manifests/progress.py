"""What a worker pod needs to report its progress (docs/progress.md): a projected
ServiceAccount token whose audience names its job, and the endpoint's URL and the token's path
in its env, as Kubeflow Trainer's progress KEP (kubeflow/trainer, docs/proposals/2779) does it.

The audience is the job's own, so a token proves which job the pod reports for, and is worth
nothing anywhere else: the API server refuses it (its audience is not the API server's), and
the endpoint refuses it for any other job.
"""

from __future__ import annotations

import copy
from typing import Any

from ringmaster.api import GROUP, VERSION

TOKEN_DIR = "/var/run/secrets/ringmaster.dev/progress"
TOKEN_FILE = "token"
VOLUME = "ringmaster-progress-token"
URL_ENV = "RINGMASTER_PROGRESS_URL"
TOKEN_ENV = "RINGMASTER_PROGRESS_TOKEN"
CA_ENV = "RINGMASTER_PROGRESS_CA_PEM"
TOKEN_SECONDS = 3600
"""The kubelet rotates the projected token before it expires (at 80 % of its life); an hour is
the default lifetime of a pod's own API token."""


def audience(namespace: str, job: str) -> str:
    return f"{GROUP}/trainingjobs/{namespace}/{job}"


def progress_path(namespace: str, job: str) -> str:
    """The endpoint's path for one job, shaped like the API's own resource paths."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/trainingjobs/{job}/progress"


def with_progress_reporting(
    pod: dict[str, Any], job: str, base_url: str, ca_pem: str | None = None
) -> dict[str, Any]:
    """A copy of the worker pod with the token volume, mounted in every container, and the env.
    ``base_url`` is the endpoint as the pods reach it (https://ringmaster.ringmaster.svc:8443)."""
    pod = copy.deepcopy(pod)
    namespace = pod["metadata"]["namespace"]
    spec = pod["spec"]
    spec.setdefault("volumes", []).append(
        {
            "name": VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": audience(namespace, job),
                            "expirationSeconds": TOKEN_SECONDS,
                            "path": TOKEN_FILE,
                        }
                    }
                ]
            },
        }
    )
    env = [
        {"name": URL_ENV, "value": base_url.rstrip("/") + progress_path(namespace, job)},
        {"name": TOKEN_ENV, "value": f"{TOKEN_DIR}/{TOKEN_FILE}"},
    ]
    if ca_pem:
        env.append({"name": CA_ENV, "value": ca_pem})
    for container in spec.get("containers") or []:
        container.setdefault("volumeMounts", []).append(
            {"name": VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}
        )
        names = {e["name"] for e in env}
        container["env"] = [e for e in container.get("env") or [] if e.get("name") not in names]
        container["env"] += env
    return pod
