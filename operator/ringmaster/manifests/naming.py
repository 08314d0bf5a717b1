"""Deterministic object names and the labels every operator-created object carries.

Names are derived only from the owner's name, so a restarted operator computes the same names and
finds (rather than duplicates) what it created before.
"""

from __future__ import annotations

import hashlib

MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "app.kubernetes.io/part-of"
OPERATOR = "ringmaster"
TRAINING_JOB_LABEL = "ringmaster.dev/trainingjob"
REDUCTION_POOL_LABEL = "ringmaster.dev/reductionserverpool"
ROLE_LABEL = "ringmaster.dev/role"
RANK_LABEL = "ringmaster.dev/rank"
SLICE_LABEL = "ringmaster.dev/slice"  # a multislice job's worker: its slice id
ATTEMPT_ANNOTATION = "ringmaster.dev/attempt"
# The scheduling gate (spec.schedulingGates) on an InferenceEndpoint's pods: kube-scheduler leaves
# a gated pod alone until the operator's admission cycle grants it a host (pinned by node
# affinity) and removes the gate, so no serving pod takes a host promised to a gang.
ADMISSION_GATE = "ringmaster.dev/admission"


_DNS_LABEL_MAX = 63


def dns_label(name: str, suffix: str = "") -> str:
    """`name` + `suffix` as a DNS-1035 label (Service names, hostnames): at most 63 characters,
    a letter first, no dots. Names that do not fit are cut and given a short hash of the whole
    name, so two long names stay distinct."""
    cleaned = name.replace(".", "-")
    candidate = cleaned + suffix
    if cleaned == name and len(candidate) <= _DNS_LABEL_MAX and candidate[:1].isalpha():
        return candidate
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    stem = cleaned[: _DNS_LABEL_MAX - len(suffix) - len(digest) - 3].strip("-")
    prefix = "" if stem[:1].isalpha() else "r-"
    return f"{prefix}{stem}-{digest}{suffix}"


def common_labels(component: str) -> dict[str, str]:
    return {MANAGED_BY: OPERATOR, PART_OF: OPERATOR, "app.kubernetes.io/component": component}


def worker_pod_name(job: str, rank: int) -> str:
    return f"{job}-worker-{rank}"


def worker_hostname(rank: int) -> str:
    return f"worker-{rank}"


def rendezvous_service_name(job: str) -> str:
    return dns_label(job)


def owned_reducer_pool_name(job: str) -> str:
    """The ReductionServerPool a job creates for itself when it names no shared pool."""
    return f"{job}-reducers"


def reducer_set_name(pool: str) -> str:
    """The StatefulSet (and headless Service) of a pool: a DNS label, as pod hostnames are."""
    return dns_label(pool)
