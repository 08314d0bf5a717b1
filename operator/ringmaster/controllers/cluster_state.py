"""What every controller needs to know of the cluster: its nodes and what pods have taken of them.

kopf indexes (in-memory caches fed by watches) that all controllers share; kopf hands every index
to every handler as a keyword argument, and a controller keeps the mapping (see bind()).

The indexing functions are coroutines although they never await: kopf runs a plain function in
its thread pool, one hand-off per function per watch event, and at thousands of pod events those
hand-offs cost more than the functions (a few microseconds each, run on the event loop).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import kopf

from ringmaster.admission.snapshot import PodFacts, shape
from ringmaster.controllers.training_step import WorkerPod
from ringmaster.manifests.inference import (
    INFERENCE_ENDPOINT_LABEL,
    LWS_GROUP_KEY_LABEL,
    LWS_SIZE_ANNOTATION,
)
from ringmaster.manifests.naming import (
    ADMISSION_GATE,
    ATTEMPT_ANNOTATION,
    MANAGED_BY,
    OPERATOR,
    REDUCTION_POOL_LABEL,
    ROLE_LABEL,
    TRAINING_JOB_LABEL,
)
from ringmaster.manifests.profiling import GROUP_SIZE_ANNOTATION, POOL_PROFILE_LABEL, PROFILER_ROLE
from ringmaster.manifests.training import pinned_host
from ringmaster.placement.labels import INSTANCE_TYPE_KEYS, POOL_NAME_KEYS
from ringmaster.placement.pools import (
    TERMINAL_PHASES,
    Node,
    NodePool,
    discover_pools,
    node_from_object,
    pod_requests,
)

# The well-known label every kubelet sets to its node's hostname (the node's name on GKE and kwok).
HOSTNAME_LABEL = "kubernetes.io/hostname"


@kopf.index("nodes")
async def ringmaster_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, Node]:
    return {name: node_from_object(body)}


def pools_and_usage(
    indexes: Mapping[str, Any],
) -> tuple[dict[str, NodePool], dict[str, dict[str, Decimal]]]:
    """The node pools and, per node, the requests of the pods bound to it and not finished
    (from the pod facts admission keeps: one index per pod event less to feed)."""
    nodes = [n for store in indexes["ringmaster_nodes"].values() for n in store]
    used: dict[str, dict[str, Decimal]] = {}
    for store in indexes[POD_INDEX].values():
        for entry in store:
            facts = entry.facts
            if facts.node and facts.active:
                bucket = used.setdefault(facts.node, {})
                for resource, amount in facts.requests:
                    bucket[resource] = bucket.get(resource, Decimal(0)) + amount
    return discover_pools(nodes), used


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """What admission needs of a pod: its requests, where it is or is headed, whose it is."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = metadata.get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    namespace = metadata.get("namespace") or ""
    ours = labels.get(MANAGED_BY) == OPERATOR
    role = labels.get(ROLE_LABEL) if ours else None
    job = labels.get(TRAINING_JOB_LABEL) if role == "worker" else None
    reducer_pool = labels.get(REDUCTION_POOL_LABEL) if role == "reducer" else None
    try:
        attempt = int((metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION, 0))
    except ValueError:
        attempt = 0
    return PodFacts(
        namespace=namespace,
        name=metadata["name"],
        requests=shape(pod_requests(pod)),
        node=spec.get("nodeName") or None,
        # Pinned by node affinity (admission's pin, or anyone's) or by the hostname label.
        pinned=pinned_host(spec) or selector.get(HOSTNAME_LABEL),
        active=(pod.get("status") or {}).get("phase") not in TERMINAL_PHASES,
        terminating=bool(metadata.get("deletionTimestamp")),
        pool=next((selector[k] for k in POOL_NAME_KEYS if k in selector), None),
        machine=next((selector[k] for k in INSTANCE_TYPE_KEYS if k in selector), None),
        job=(namespace, job) if job else None,
        attempt=attempt,
        reducer_pool=(namespace, reducer_pool) if reducer_pool else None,
        gated=any(g.get("name") == ADMISSION_GATE for g in spec.get("schedulingGates") or ()),
        **(
            _profile_run(metadata, labels, namespace, attempt)
            if role == PROFILER_ROLE
            else _replica_group(metadata, labels, namespace)
        ),
    )


def _profile_run(
    metadata: Mapping[str, Any], labels: Mapping[str, str], namespace: str, run: int
) -> dict[str, Any]:
    """A PoolProfile's measurement pod: its profile, and its run as a group admitted whole."""
    profile = labels.get(POOL_PROFILE_LABEL)
    if not profile:
        return {}
    try:
        size = int((metadata.get("annotations") or {}).get(GROUP_SIZE_ANNOTATION, 1))
    except ValueError:
        size = 1
    return {
        "profile": (namespace, profile),
        "group": (namespace, f"poolprofile/{profile}/{run}"),
        "group_size": max(size, 1),
    }


def _replica_group(
    metadata: Mapping[str, Any], labels: Mapping[str, str], namespace: str
) -> dict[str, Any]:
    """A serving pod of a replica across hosts: its LeaderWorkerSet group (the group-key label
    that LeaderWorkerSet's webhook gives every pod of a group) and the group's size."""
    key = labels.get(LWS_GROUP_KEY_LABEL)
    if not key or INFERENCE_ENDPOINT_LABEL not in labels:
        return {}
    try:
        size = int((metadata.get("annotations") or {}).get(LWS_SIZE_ANNOTATION, 1))
    except ValueError:
        size = 1
    return {"group": (namespace, key), "group_size": max(size, 1)}


POD_INDEX = "ringmaster_pods"


@dataclass(frozen=True, slots=True)
class IndexedPod:
    """One pod as the operator keeps it: what admission needs of it and, for a TrainingJob's
    worker, what the job's state machine needs."""

    facts: PodFacts
    worker: WorkerPod | None = None


def pod_index_key(facts: PodFacts) -> Hashable:
    """A worker pod is filed under its job's key, (namespace, job), which the job's look reads;
    any other pod under (namespace, name, None), which no job key equals."""
    return facts.job if facts.job is not None else (facts.namespace, facts.name, None)


# The last pod version parsed: kopf hands each pod event to the index and then to the event
# handler, and both read the same facts of the same version.
_last_parsed: list[tuple[tuple[str, str], IndexedPod]] = []


def indexed_pod(body: Mapping[str, Any]) -> IndexedPod:
    metadata = body["metadata"]
    version = (str(metadata.get("uid", "")), str(metadata.get("resourceVersion", "")))
    if version[1] and _last_parsed and _last_parsed[0][0] == version:
        return _last_parsed[0][1]
    facts = pod_facts(body)
    entry = IndexedPod(facts, WorkerPod.from_object(body) if facts.job is not None else None)
    if version[1]:
        _last_parsed[:] = [(version, entry)]
    return entry


def worker_pods(indexes: Mapping[str, Any], job: Hashable) -> list[WorkerPod]:
    """The job's worker pods, as the watch last showed them."""
    return [e.worker for e in indexes[POD_INDEX].get(job, ()) if e.worker is not None]


@kopf.index("pods")
async def ringmaster_pods(body: kopf.Body, **_: Any) -> dict[Hashable, IndexedPod]:
    """Every pod: what the admission snapshot starts from, and each job's workers. One index
    for both: kopf's work per index per pod event (matching, arguments, a logger) cost more
    than the function itself at the scale bench's thousands of pod events."""
    entry = indexed_pod(body)
    return {pod_index_key(entry.facts): entry}
