"""The objects of a PoolProfile's run: the payload's ConfigMap, the rendezvous Service and one
measurement pod per host, each held at the admission gate until a cycle grants the whole run
idle hosts (admission/cycle.py, grant_profile_pods).

The payload (profiling/payload.py, standard library and PyTorch only) is mounted from the
namespace's ConfigMap (PAYLOAD_CONFIGMAP) into the user's image, so no image of Ringmaster's has
to be pulled on a GPU pool.
Results come back as progress reports do (docs/progress.md): a projected ServiceAccount token
whose audience names the profile, posted to the operator's endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import Any

from ringmaster.api.base import GROUP, VERSION
from ringmaster.manifests.naming import (
    ADMISSION_GATE,
    ATTEMPT_ANNOTATION,
    ROLE_LABEL,
    common_labels,
    dns_label,
)
from ringmaster.manifests.progress import TOKEN_SECONDS
from ringmaster.manifests.training import MASTER_PORT

POOL_PROFILE_LABEL = "ringmaster.dev/poolprofile"
PROFILER_ROLE = "profiler"
DEGRADED_LABEL = "ringmaster.dev/degraded"
"""On a host a PoolProfile found below its pool: "true". Admission keeps gangs and serving
replicas off it; a profile's own pods may still run there (to measure it again)."""
DEGRADED_SINCE_ANNOTATION = "ringmaster.dev/degraded-by"
"""Which PoolProfile flagged the host, and why (a label value cannot say it)."""
GROUP_SIZE_ANNOTATION = "ringmaster.dev/profile-hosts"
PAYLOAD_KEY = "payload.py"
CA_KEY = "ca.pem"
PAYLOAD_DIR = "/ringmaster"
TOKEN_DIR = "/var/run/secrets/ringmaster.dev/profile"
TOKEN_FILE = "token"
TOKEN_VOLUME = "ringmaster-profile-token"
PAYLOAD_VOLUME = "ringmaster-profile-payload"
# A measurement killed to give its hosts back loses nothing worth a grace period.
GRACE_SECONDS = 5


def audience(namespace: str, profile: str) -> str:
    return f"{GROUP}/poolprofiles/{namespace}/{profile}"


def results_path(namespace: str, profile: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/poolprofiles/{profile}/results"


def payload_source() -> str:
    """The payload file as the package ships it."""
    return resources.files("ringmaster.profiling").joinpath("payload.py").read_text()


PAYLOAD_CONFIGMAP = "ringmaster-profile-payload"
"""One per namespace, shared by its PoolProfiles (the same file for all): the chart grants patch
on this name only, and no owner: it stays when the profiles go (it holds only the payload)."""


def service_name(profile: str) -> str:
    return dns_label(profile, "-profile")


def pod_name(profile: str, run: int, rank: int) -> str:
    return f"{dns_label(profile)[:40]}-r{run}-{rank}"


def labels(profile: str) -> dict[str, str]:
    return {
        **common_labels("pool-profile"),
        ROLE_LABEL: PROFILER_ROLE,
        POOL_PROFILE_LABEL: profile,
    }


def payload_configmap(namespace: str, ca_pem: str | None) -> dict[str, Any]:
    data = {PAYLOAD_KEY: payload_source()}
    if ca_pem:
        data[CA_KEY] = ca_pem
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PAYLOAD_CONFIGMAP,
            "namespace": namespace,
            "labels": common_labels("pool-profile"),
        },
        "data": data,
    }


def rendezvous_service(profile: str, namespace: str) -> dict[str, Any]:
    """Headless: rank 0's name resolves to its pod, for torch.distributed's rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(profile),
            "namespace": namespace,
            "labels": labels(profile),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {POOL_PROFILE_LABEL: profile, ROLE_LABEL: PROFILER_ROLE},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }


def measurement_pod(
    *,
    profile: str,
    namespace: str,
    run: int,
    rank: int,
    hosts: int,
    image: str,
    node_selector: dict[str, str],
    accelerator_resource: str,
    per_host: int,
    measurements: Sequence[str],
    quick: bool,
    results_url: str | None,
    ca: bool,
) -> dict[str, Any]:
    """Rank ``rank`` of run ``run``: every accelerator of its host, at the admission gate."""
    master = f"{pod_name(profile, run, 0)}.{service_name(profile)}.{namespace}.svc"
    env: list[dict[str, Any]] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "RANK", "value": str(rank)},
        {"name": "WORLD_SIZE", "value": str(hosts)},
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "RINGMASTER_PROFILE_MEASUREMENTS", "value": ",".join(measurements)},
        {"name": "RINGMASTER_PROFILE_QUICK", "value": "1" if quick else "0"},
        {"name": "RINGMASTER_PROFILE_TOKEN_FILE", "value": f"{TOKEN_DIR}/{TOKEN_FILE}"},
    ]
    if results_url:
        url = results_url.rstrip("/") + results_path(namespace, profile)
        env.append({"name": "RINGMASTER_PROFILE_RESULTS_URL", "value": url})
    if ca:
        env.append({"name": "RINGMASTER_PROFILE_CA_FILE", "value": f"{PAYLOAD_DIR}/{CA_KEY}"})
    amount = str(per_host)
    container = {
        "name": "payload",
        "image": image,
        "command": ["python3", f"{PAYLOAD_DIR}/{PAYLOAD_KEY}"],
        "env": env,
        "resources": {
            "limits": {accelerator_resource: amount},
            "requests": {accelerator_resource: amount},
        },
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT}],
        "volumeMounts": [
            {"name": PAYLOAD_VOLUME, "mountPath": PAYLOAD_DIR, "readOnly": True},
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
        ],
    }
    name = pod_name(profile, run, rank)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(profile),
            "annotations": {ATTEMPT_ANNOTATION: str(run), GROUP_SIZE_ANNOTATION: str(hosts)},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "hostname": name,
            "subdomain": service_name(profile),
            "enableServiceLinks": False,
            "nodeSelector": dict(node_selector),
            "schedulingGates": [{"name": ADMISSION_GATE}],
            # The accelerator's taint, and the degraded one: a flagged host is measured again.
            "tolerations": [
                {"key": accelerator_resource, "operator": "Exists", "effect": "NoSchedule"},
                {"key": DEGRADED_LABEL, "operator": "Exists", "effect": "NoSchedule"},
            ],
            "containers": [container],
            "volumes": [
                {"name": PAYLOAD_VOLUME, "configMap": {"name": PAYLOAD_CONFIGMAP}},
                {
                    "name": TOKEN_VOLUME,
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": audience(namespace, profile),
                                    "expirationSeconds": TOKEN_SECONDS,
                                    "path": TOKEN_FILE,
                                }
                            }
                        ]
                    },
                },
            ],
        },
    }
