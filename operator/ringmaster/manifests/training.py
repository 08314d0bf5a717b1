"""A TrainingJob's worker pods and its headless rendezvous Service."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringmaster.api import TrainingJobSpec
from ringmaster.manifests.naming import (
    ATTEMPT_ANNOTATION,
    RANK_LABEL,
    ROLE_LABEL,
    SLICE_LABEL,
    TRAINING_JOB_LABEL,
    common_labels,
    rendezvous_service_name,
    worker_hostname,
    worker_pod_name,
)

MASTER_PORT = 29500  # torch.distributed's default rendezvous port
# The multislice coordinator's port: the one Ray's TPU support gives JAX's megascale runtime
# (ray-project/ray, python/ray/util/tpu.py, get_tpu_coordinator_env_vars: "8081").
MEGASCALE_PORT = 8081
CLUSTER_DOMAIN = "svc.cluster.local"


@dataclass(frozen=True)
class PoolPlacement:
    """Where the gang goes: what placement decided, in the terms a pod spec needs."""

    pool: str
    node_selector: dict[str, str]
    accelerator_resource: str  # nvidia.com/gpu or google.com/tpu
    machine_type: str | None = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    """Beyond the accelerator's own: a Kueue ResourceFlavor's (admission/kueue.py)."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """The pod annotations placement adds: Kueue's topology request, on a pod that Kueue's
    Topology Aware Scheduling placed (admission/kueue.py)."""


def pinned_to(host: str) -> dict[str, Any]:
    """The node affinity that pins a pod to one host by name. A metadata.name matchField is the
    one form kube-scheduler narrows its search by (its NodeAffinity PreFilter, as for DaemonSet
    pods): the pod is checked against that host, not against every node of the pool."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [host]}]}
                ]
            }
        }
    }


def pinned_host(pod_spec: Mapping[str, Any]) -> str | None:
    """The host a pod is pinned to by :func:`pinned_to`, or None (any other affinity)."""
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1:
        return None
    term = fields[0]
    values = term.get("values") or []
    if term.get("key") == "metadata.name" and term.get("operator") == "In" and len(values) == 1:
        return str(values[0])
    return None


def selector_labels(job: str) -> dict[str, str]:
    return {TRAINING_JOB_LABEL: job, ROLE_LABEL: "worker"}


def rendezvous_service(job: str) -> dict[str, Any]:
    """Headless, and publishing not-ready addresses: workers resolve each other while starting."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": rendezvous_service_name(job),
            "labels": {**common_labels("rendezvous"), TRAINING_JOB_LABEL: job},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(job),
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def worker_fqdn(job: str, namespace: str, rank: int) -> str:
    return f"{worker_hostname(rank)}.{rendezvous_service_name(job)}.{namespace}.{CLUSTER_DOMAIN}"


def launcher_env(
    job: str, namespace: str, spec: TrainingJobSpec, rank: int, is_tpu: bool
) -> list[dict[str, str]]:
    """The variables torchrun, Kubeflow-style launchers and JAX on TPU read.

    WORLD_SIZE and RANK count worker pods (Kubeflow PyTorchJob's convention); torchrun's PET_*
    variables carry nodes and processes per node.
    """
    per_worker = spec.accelerator.per_worker
    master = worker_fqdn(job, namespace, 0)
    env = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(spec.workers),
        "RANK": str(rank),
        "NODE_RANK": str(rank),
        "NPROC_PER_NODE": str(per_worker),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(MASTER_PORT),
        "PET_NNODES": str(spec.workers),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": str(per_worker),
    }
    if is_tpu:
        env.update(tpu_env(job, namespace, spec, rank))
    return [{"name": k, "value": v} for k, v in env.items()]


def slice_of(spec: TrainingJobSpec, rank: int) -> tuple[int, int]:
    """(slice id, worker id inside the slice) of a rank: slice s holds ranks s x hosts per
    slice up to the next slice's first (one slice: (0, rank))."""
    per_slice = spec.workers // spec.accelerator.slices
    return rank // per_slice, rank % per_slice


def tpu_env(job: str, namespace: str, spec: TrainingJobSpec, rank: int) -> dict[str, str]:
    """What GKE's TPU webhook gives an Indexed Job's pods, per slice: TPU_WORKER_ID and
    TPU_WORKER_HOSTNAMES (the hosts of the worker's own slice, by worker id); for a multislice
    job also the MEGASCALE_* variables JAX's multislice runtime reads (as JobSet on GKE and Ray's
    TPU support set them): the coordinator (worker 0 of slice 0), the slice count, the worker's
    slice and the coordinator's port. Every host is named by the job's one headless Service."""
    slices = spec.accelerator.slices
    per_slice = spec.workers // slices
    slice_id, worker_id = slice_of(spec, rank)
    first = slice_id * per_slice
    env = {
        "TPU_WORKER_ID": str(worker_id),
        "TPU_WORKER_HOSTNAMES": ",".join(
            worker_fqdn(job, namespace, r) for r in range(first, first + per_slice)
        ),
    }
    if slices > 1:
        env |= {
            "MEGASCALE_COORDINATOR_ADDRESS": f"{worker_fqdn(job, namespace, 0)}:{MEGASCALE_PORT}",
            "MEGASCALE_NUM_SLICES": str(slices),
            "MEGASCALE_SLICE_ID": str(slice_id),
            "MEGASCALE_PORT": str(MEGASCALE_PORT),
        }
    return env


REDUCER_ENDPOINTS_ENV = "RINGMASTER_REDUCTION_SERVERS"
"""The reducers a worker was started with (the controller reads them back from the pod)."""


def reducer_env(spec: TrainingJobSpec, rank: int, reducers: Sequence[str]) -> list[dict[str, str]]:
    """Where the reduction servers are: RINGMASTER_REDUCTION_SERVERS (comma-separated host:port,
    the documented form), and BytePS's DMLC_* variables for plugins of that family, whose first
    server doubles as the scheduler."""
    if not reducers:
        return []
    first_host, _, first_port = reducers[0].rpartition(":")
    env = {
        REDUCER_ENDPOINTS_ENV: ",".join(reducers),
        "RINGMASTER_REDUCTION_SERVER_COUNT": str(len(reducers)),
        "DMLC_ROLE": "worker",
        "DMLC_NUM_SERVER": str(len(reducers)),
        "DMLC_NUM_WORKER": str(spec.workers),
        "DMLC_WORKER_ID": str(rank),
        "DMLC_PS_ROOT_URI": first_host,
        "DMLC_PS_ROOT_PORT": first_port,
    }
    return [{"name": k, "value": v} for k, v in env.items()]


# The layout's variables, from status.plan's keys: a launcher passes them to Megatron-LM, NeMo,
# torchtitan or MaxText flags (README, "LLM training layouts").
LAYOUT_ENV = (
    ("RINGMASTER_TENSOR_PARALLEL", "tensor"),
    ("RINGMASTER_PIPELINE_PARALLEL", "pipeline"),
    ("RINGMASTER_CONTEXT_PARALLEL", "context"),
    ("RINGMASTER_EXPERT_PARALLEL", "expert"),
    ("RINGMASTER_EXPERT_TENSOR_PARALLEL", "expertTensor"),
    ("RINGMASTER_EXPERT_OVERLAP", "expertOverlap"),
    ("RINGMASTER_EXPERT_DISPATCH", "expertDispatch"),
    ("RINGMASTER_EXPERT_CAPACITY_FACTOR", "expertCapacityFactor"),
    ("RINGMASTER_EXPERT_PAD_TO_CAPACITY", "expertPadToCapacity"),
    ("RINGMASTER_DATA_PARALLEL", "data"),
    ("RINGMASTER_DATA_REPLICAS", "dataReplicas"),
    ("RINGMASTER_SHARDING", "sharding"),
    ("RINGMASTER_MICRO_BATCH_SIZE", "microBatchSize"),
    ("RINGMASTER_GLOBAL_BATCH_SIZE", "globalBatchSize"),
    ("RINGMASTER_ACTIVATION_RECOMPUTE", "activationRecompute"),
    ("RINGMASTER_RECOMPUTE_LAYERS", "recomputeLayers"),
    ("RINGMASTER_ACTIVATION_OFFLOAD_LAYERS", "activationOffloadLayers"),
    ("RINGMASTER_OFFLOAD_LAYER_INPUTS", "offloadLayerInputs"),
    ("RINGMASTER_VOCAB_TILING", "vocabTiling"),
    ("RINGMASTER_IOTA_EMBED", "iotaEmbed"),
    ("RINGMASTER_OVERLAP_GRAD_REDUCE", "overlapGradientReduction"),
    ("RINGMASTER_OPTIMIZER_MOMENTS_DTYPE", "optimizerMomentsDType"),
    ("RINGMASTER_PARAMETER_DTYPE", "parameterDType"),
    ("RINGMASTER_VIRTUAL_PIPELINE_STAGES", "virtualPipelineStages"),
    ("RINGMASTER_PIPELINE_LAYOUT", "pipelineLayout"),
    ("RINGMASTER_FRAMEWORK", "framework"),
    ("RINGMASTER_CUDA_GRAPH", "cudaGraph"),
)


# Layout keys a plan may leave out, passed as "" then so that a launcher's
# ${VAR:+--flag $VAR} drops the flag: a dropless mixture of experts has no capacity factor.
OPTIONAL_LAYOUT_KEYS = frozenset(
    {
        "expertOverlap",
        "expertDispatch",
        "expertCapacityFactor",
        "expertPadToCapacity",
        "pipelineLayout",
        "recomputeLayers",
        "activationOffloadLayers",
        "cudaGraph",
    }
)


def _env_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Switches a launcher takes bare: "true", or "" when off, so that its
# ${VAR:+--overlap-grad-reduce --overlap-param-gather} passes them only when on.
SWITCH_LAYOUT_KEYS = frozenset({"overlapGradientReduction"})


def _layout_value(key: str, value: Any) -> str:
    if key in SWITCH_LAYOUT_KEYS:
        return "true" if value else ""
    return _env_value(value)


def layout_env(plan: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """The chosen layout as environment variables; none for a job without an architecture."""
    if not plan or plan.get("tensor") is None:
        return []
    return [
        {"name": name, "value": _layout_value(key, plan.get(key))}
        for name, key in LAYOUT_ENV
        if key in plan or key in OPTIONAL_LAYOUT_KEYS
    ]


def worker_pod(
    job: str,
    namespace: str,
    spec: TrainingJobSpec,
    placement: PoolPlacement,
    rank: int,
    attempt: int,
    reducers: Sequence[str] = (),
    layout: Mapping[str, Any] | None = None,
    host: str | None = None,
) -> dict[str, Any]:
    """Worker `rank` of the gang; pinned to `host` when admission chose the gang's hosts."""
    template = spec.template
    is_tpu = placement.accelerator_resource == "google.com/tpu"
    user_meta = template.metadata
    labels = {
        **(user_meta.labels if user_meta and user_meta.labels else {}),
        **common_labels("worker"),
        **selector_labels(job),
        RANK_LABEL: str(rank),
    }
    if spec.accelerator.slices > 1:
        labels[SLICE_LABEL] = str(slice_of(spec, rank)[0])
    annotations = {
        **(user_meta.annotations if user_meta and user_meta.annotations else {}),
        **placement.annotations,
        ATTEMPT_ANNOTATION: str(attempt),
    }
    resources = template.resources.to_k8s() if template.resources else {}
    devices = str(spec.accelerator.per_worker)
    # Extended resources are requested through limits (requests default to them).
    resources["limits"] = {**resources.get("limits", {}), placement.accelerator_resource: devices}
    if "requests" in resources:
        resources["requests"][placement.accelerator_resource] = devices
    # The user's variables first; ours after them win, so a template cannot break the rendezvous.
    env = [e.to_k8s() for e in template.env or []]
    env += launcher_env(job, namespace, spec, rank, is_tpu)
    env += reducer_env(spec, rank, reducers)
    env += layout_env(layout)
    container: dict[str, Any] = {
        "name": "worker",
        "image": template.image,
        "env": env,
        "resources": resources,
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT}],
    }
    if spec.accelerator.slices > 1:
        container["ports"].append({"name": "megascale", "containerPort": MEGASCALE_PORT})
    for key in ("command", "args"):
        if getattr(template, key):
            container[key] = list(getattr(template, key))
    if template.image_pull_policy:
        container["imagePullPolicy"] = template.image_pull_policy
    tolerations: list[dict[str, Any]] = [
        {"key": placement.accelerator_resource, "operator": "Exists", "effect": "NoSchedule"}
    ]
    tolerations += [dict(t) for t in placement.tolerations if dict(t) not in tolerations]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": worker_pod_name(job, rank),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            # The operator restarts the whole gang; a lone restarted worker would hang the ring.
            "restartPolicy": "Never",
            "hostname": worker_hostname(rank),
            "subdomain": rendezvous_service_name(job),
            "enableServiceLinks": False,
            "nodeSelector": dict(placement.node_selector),
            "tolerations": tolerations,
            "containers": [container],
        },
    }
    if host is not None:
        pod["spec"]["affinity"] = pinned_to(host)
    if template.priority_class_name:
        pod["spec"]["priorityClassName"] = template.priority_class_name
    return pod
