"""A ReductionServerPool's reducers: a StatefulSet (stable names, replaced when lost, scaled by
one field) behind a headless Service, on the CPU nodes of the pool's machine type; and the pool a
TrainingJob creates for itself."""

from __future__ import annotations

from typing import Any

from ringmaster.api import GROUP, VERSION, ReductionServerPoolSpec
from ringmaster.api.trainingjob import ReductionServerSettings
from ringmaster.manifests.naming import (
    REDUCTION_POOL_LABEL,
    ROLE_LABEL,
    common_labels,
    owned_reducer_pool_name,
    reducer_set_name,
)
from ringmaster.placement.labels import INSTANCE_TYPE

CLUSTER_DOMAIN = "svc.cluster.local"
# What a reducer asks of its host: little CPU and memory (it needs the host's NIC, which
# anti-affinity gives it: one reducer per host).
REDUCER_REQUESTS = {"cpu": "1", "memory": "1Gi"}


def reducer_selector(pool: str) -> dict[str, str]:
    return {REDUCTION_POOL_LABEL: pool, ROLE_LABEL: "reducer"}


def selector_string(pool: str) -> str:
    return ",".join(f"{k}={v}" for k, v in reducer_selector(pool).items())


def reducer_endpoint(pool: str, namespace: str, port: int, ordinal: int) -> str:
    name = reducer_set_name(pool)
    return f"{name}-{ordinal}.{name}.{namespace}.{CLUSTER_DOMAIN}:{port}"


def reducer_service(pool: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": reducer_set_name(pool),
            "labels": {**common_labels("reducer"), REDUCTION_POOL_LABEL: pool},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": reducer_selector(pool),
            "ports": [{"name": "reduction", "port": port, "targetPort": port}],
        },
    }


def reducer_statefulset(pool: str, spec: ReductionServerPoolSpec, replicas: int) -> dict[str, Any]:
    labels = {**common_labels("reducer"), **reducer_selector(pool)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": reducer_set_name(pool), "labels": labels},
        "spec": {
            "replicas": replicas,
            "serviceName": reducer_set_name(pool),
            # Reducers are interchangeable peers: start and stop them all at once.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": reducer_selector(pool)},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "enableServiceLinks": False,
                    # A reducer's speed is its host's NIC: one reducer per host.
                    "nodeSelector": {INSTANCE_TYPE: spec.machine_type},
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "labelSelector": {"matchLabels": {ROLE_LABEL: "reducer"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "reducer",
                            "image": spec.image,
                            "ports": [{"name": "reduction", "containerPort": spec.port}],
                            "env": [{"name": "RINGMASTER_REDUCER_PORT", "value": str(spec.port)}],
                            "resources": {"requests": dict(REDUCER_REQUESTS)},
                        }
                    ],
                },
            },
        },
    }


def owned_reducer_pool(
    job: str, settings: ReductionServerSettings, replicas: int
) -> dict[str, Any]:
    """The pool a job creates when it names none: fixed size, owned by (and deleted with) it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ReductionServerPool",
        "metadata": {
            "name": owned_reducer_pool_name(job),
            "labels": common_labels("reducer-pool"),
        },
        "spec": {
            "replicas": replicas,
            "maxReplicas": max(replicas, 1),
            "machineType": settings.machine_type,
            "image": settings.image,
            "scaleDownGracePeriodSeconds": 0,
        },
    }
