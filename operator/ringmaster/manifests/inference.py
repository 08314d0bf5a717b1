"""An InferenceEndpoint's model-server Deployment, its Service and its optional HPA.

Pure builders. The pod template depends only on the user's template, the accelerator, the port
and the pool: nothing the engine decides for a target rate (batch size, replica count) goes into
it, so a new target or precision changes the replica count and never rolls the pods that keep
serving. An LLM endpoint's pods also get the serving engine's settings the sizing assumed
(:func:`serving_env`); they follow from the architecture, the accelerators, the token lengths
and the TPOT target, never from the target rate, so a new target still rolls no pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringmaster.api import InferenceEndpointSpec
from ringmaster.engine.expert_dispatch import DEFAULT_DISPATCHER
from ringmaster.engine.serving_engines import kv_cache_dtype_value
from ringmaster.manifests.naming import ADMISSION_GATE, ROLE_LABEL, common_labels, dns_label
from ringmaster.manifests.training import pinned_to

INFERENCE_ENDPOINT_LABEL = "ringmaster.dev/inferenceendpoint"
SERVER_ROLE = "server"
CONTAINER_NAME = "server"
PORT_NAME = "http"
CLUSTER_DOMAIN = "svc.cluster.local"
# The per-pod metric the HPA reads besides CPU, as a metrics adapter (prometheus-adapter, the
# Stackdriver adapter) serves it from the model server's request counter. Its target is the
# engine's per-replica rate within the latency target: the HPA keeps each replica at the load
# the plan was sized for.
REQUESTS_PER_SECOND_METRIC = "requests_per_second"
# The same for LLM endpoints whose target is in generated tokens (vLLM's and TensorRT-LLM's
# generation-token counters, as a rate).
OUTPUT_TOKENS_PER_SECOND_METRIC = "output_tokens_per_second"
# An LLM endpoint's model-server settings, as the sizing assumed them: vLLM's
# --tensor-parallel-size, --max-num-seqs, --max-model-len and --max-num-batched-tokens
# (TensorRT-LLM: tp_size, max_batch_size, max_seq_len, max_num_tokens). Pass them through in
# the container's command (README).
TENSOR_PARALLEL_ENV = "RINGMASTER_TENSOR_PARALLEL"
# A replica's layout across hosts (README: vLLM's --pipeline-parallel-size and its Ray / mp
# multi-node launch, SGLang's --pp-size, --ep-size, --nnodes, --node-rank, --dist-init-addr).
PIPELINE_PARALLEL_ENV = "RINGMASTER_PIPELINE_PARALLEL"
EXPERT_PARALLEL_ENV = "RINGMASTER_EXPERT_PARALLEL"
# Wide expert parallelism (README, "Serving engines"): SGLang's --enable-dp-attention --dp-size,
# --ep-num-redundant-experts, --moe-a2a-backend; vLLM's --data-parallel-size, --eplb-config,
# --all2all-backend. Set only where the plan has them (absent: 1, 0, AllToAll), so that no
# running endpoint's pods change for them.
ATTENTION_DATA_PARALLEL_ENV = "RINGMASTER_ATTENTION_DATA_PARALLEL"
REDUNDANT_EXPERTS_ENV = "RINGMASTER_REDUNDANT_EXPERTS"
EXPERT_DISPATCH_ENV = "RINGMASTER_EXPERT_DISPATCH"
TWO_BATCH_OVERLAP_ENV = "RINGMASTER_TWO_BATCH_OVERLAP"  # "1" where the plan overlaps
GROUP_SIZE_ENV = "RINGMASTER_GROUP_SIZE"  # hosts (pods) of one replica
LEADER_ADDRESS_ENV = "RINGMASTER_LEADER_ADDRESS"  # the group's leader pod, by DNS name
NODE_RANK_ENV = "RINGMASTER_NODE_RANK"  # this pod's index in its group (the leader is 0)
MAX_NUM_SEQS_ENV = "RINGMASTER_MAX_NUM_SEQS"
MAX_MODEL_LEN_ENV = "RINGMASTER_MAX_MODEL_LEN"
MAX_NUM_BATCHED_TOKENS_ENV = "RINGMASTER_MAX_NUM_BATCHED_TOKENS"
# "Static" for spec.batching: Static (TensorRT-LLM's static batching); absent for continuous
# batching, every engine's default (so that no running endpoint's pods change for it).
BATCHING_ENV = "RINGMASTER_BATCHING"
# The serving engine the plan was made for (spec.engine, or inferred): a launcher picks its flags
# by it (README, "Serving engines").
SERVING_ENGINE_ENV = "RINGMASTER_SERVING_ENGINE"
# The KV cache's dtype the sizing assumed (status.plan.kvCachePrecision), as the engine's
# --kv-cache-dtype takes it: "fp8" (SGLang: "fp8_e4m3") or "auto". vLLM and SGLang default to
# "auto", a 16-bit cache, whatever the weights: a server that is not told runs twice the cache
# bytes an FP8 plan counted on.
KV_CACHE_DTYPE_ENV = "RINGMASTER_KV_CACHE_DTYPE"
# LeaderWorkerSet (sigs.k8s.io/lws, api/leaderworkerset/v1): a replica across hosts is one group
# of `size` pods, pod 0 its leader; the variables its pod webhook injects into every container;
# the label of a pod's index in its group.
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
# An HPA needs at least one replica (below that it stops scaling: HPAScaleToZero is alpha).
HPA_MIN_REPLICAS_FLOOR = 1


@dataclass(frozen=True)
class ServingPlacement:
    """The pool the replicas run on, in the terms a pod spec needs."""

    pool: str
    node_selector: dict[str, str]
    accelerator_resource: str  # nvidia.com/gpu or google.com/tpu


def object_name(endpoint: str) -> str:
    """The Deployment, Service and HPA share one name: a DNS label, as a Service name must be."""
    return dns_label(endpoint)


# LeaderWorkerSet creates a headless Service named after the LeaderWorkerSet, through which its
# leader address (LWS_LEADER_ADDRESS) resolves; it skips that Service when one of the name
# exists. So the set is named apart from the endpoint's own Service, which keeps the endpoint's
# name (and URL) whether its replicas span hosts or not.
GROUP_SET_SUFFIX = "-group"


def workload_name(endpoint: str, kind: str = "Deployment") -> str:
    """The name of the workload that runs the replicas: the Deployment has the endpoint's name,
    the LeaderWorkerSet ``<endpoint>-group`` (its pods ``<endpoint>-group-<i>[-<j>]``)."""
    return dns_label(endpoint, GROUP_SET_SUFFIX) if kind == LWS_KIND else object_name(endpoint)


def selector_labels(endpoint: str) -> dict[str, str]:
    # A label value is at most 63 characters; dns_label keeps long names distinct.
    return {INFERENCE_ENDPOINT_LABEL: dns_label(endpoint), ROLE_LABEL: SERVER_ROLE}


def selector_string(endpoint: str) -> str:
    """The selector as the scale subresource and `kubectl get -l` take it."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(endpoint).items()))


def object_labels(endpoint: str) -> dict[str, str]:
    return {**common_labels("inference-server"), **selector_labels(endpoint)}


def endpoint_url(endpoint: str, namespace: str, port: int) -> str:
    return f"http://{object_name(endpoint)}.{namespace}.{CLUSTER_DOMAIN}:{port}"


def serving_env(plan: Mapping[str, Any]) -> dict[str, str]:
    """The model server's settings from an LLM plan (``ringmaster plan -o json``); none for
    other endpoints."""
    if plan.get("maxNumSeqs") is None:
        return {}
    hosts = int(plan.get("hostsPerReplica") or 1)
    group = (
        {
            GROUP_SIZE_ENV: str(hosts),
            # LeaderWorkerSet's own variables, which its webhook puts first in the container's
            # env, so that these references expand (a $(VAR) sees only the entries above it).
            LEADER_ADDRESS_ENV: f"$({LWS_LEADER_ADDRESS})",
            NODE_RANK_ENV: f"$({LWS_WORKER_INDEX})",
        }
        if hosts > 1
        else {}
    )
    return {
        TENSOR_PARALLEL_ENV: str(plan["tensorParallel"]),
        PIPELINE_PARALLEL_ENV: str(plan.get("pipelineParallel") or 1),
        EXPERT_PARALLEL_ENV: str(plan.get("expertParallel") or 1),
        **_wide_expert_env(plan),
        **group,
        MAX_NUM_SEQS_ENV: str(plan["maxNumSeqs"]),
        MAX_MODEL_LEN_ENV: str(plan["maxModelLen"]),
        **({BATCHING_ENV: "Static"} if plan.get("batching") == "Static" else {}),
        **({SERVING_ENGINE_ENV: str(plan["engine"])} if plan.get("engine") else {}),
        KV_CACHE_DTYPE_ENV: kv_cache_dtype_value(plan.get("engine"), plan.get("kvCachePrecision")),
        **(
            {MAX_NUM_BATCHED_TOKENS_ENV: str(plan["maxNumBatchedTokens"])}
            if plan.get("maxNumBatchedTokens")
            else {}
        ),
    }


def _wide_expert_env(plan: Mapping[str, Any]) -> dict[str, str]:
    env = {}
    if int(plan.get("attentionDataParallel") or 1) > 1:
        env[ATTENTION_DATA_PARALLEL_ENV] = str(plan["attentionDataParallel"])
    if plan.get("redundantExperts"):
        env[REDUNDANT_EXPERTS_ENV] = str(plan["redundantExperts"])
    if plan.get("expertDispatch") not in (None, DEFAULT_DISPATCHER):
        env[EXPERT_DISPATCH_ENV] = str(plan["expertDispatch"])
    if plan.get("twoBatchOverlap"):
        env[TWO_BATCH_OVERLAP_ENV] = "1"
    return env


def _container(
    spec: InferenceEndpointSpec,
    placement: ServingPlacement,
    env: Mapping[str, str],
    accelerators: int,
) -> dict[str, Any]:
    template = spec.template
    resources = template.resources.to_k8s() if template.resources else {}
    devices = str(accelerators)
    # Extended resources are requested through limits (requests default to them).
    resources["limits"] = {**resources.get("limits", {}), placement.accelerator_resource: devices}
    if "requests" in resources:
        resources["requests"][placement.accelerator_resource] = devices
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": template.image,
        "ports": [{"name": PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}],
        "resources": resources,
        # Traffic only once the server accepts connections (a model takes a while to load).
        "readinessProbe": {
            "tcpSocket": {"port": PORT_NAME},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
    }
    own = [{"name": k, "value": v} for k, v in env.items()]
    users = [e.to_k8s() for e in template.env or []]
    if own or users:
        # The operator's first, so a user's entry of the same name (listed later) wins.
        container["env"] = own + users
    for field in ("command", "args"):
        if getattr(template, field):
            container[field] = list(getattr(template, field))
    if template.image_pull_policy:
        container["imagePullPolicy"] = template.image_pull_policy
    return container


def server_deployment(
    endpoint: str,
    namespace: str,
    spec: InferenceEndpointSpec,
    placement: ServingPlacement,
    replicas: int | None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The model-server Deployment. ``replicas`` None leaves the field out, for when another
    field manager (the HPA) owns it: applying it would take the count back."""
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": selector_labels(endpoint)},
        "revisionHistoryLimit": 3,
        "template": _pod_template(
            endpoint, spec, placement, env or {}, spec.accelerator.per_replica
        ),
    }
    if replicas is not None:
        deployment_spec = {"replicas": replicas, **deployment_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": object_name(endpoint),
            "namespace": namespace,
            "labels": object_labels(endpoint),
        },
        "spec": deployment_spec,
    }


def server_leader_worker_set(
    endpoint: str,
    namespace: str,
    spec: InferenceEndpointSpec,
    placement: ServingPlacement,
    replicas: int | None,
    hosts: int,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A replica across ``hosts`` hosts: one LeaderWorkerSet group per replica, its leader and
    workers from spec.template, each pod with one host's share of the accelerators and a host of
    its own (no two of the endpoint's pods on one host: a required pod anti-affinity, so a
    group never stacks on a host even where admission did not pin it). A group is created,
    restarted (RecreateGroupOnPodRestart: a multi-host server cannot lose one rank) and scaled as
    a unit. ``replicas`` None leaves the count to the HPA, as for the Deployment."""
    per_host = spec.accelerator.per_replica // hosts
    template = _pod_template(endpoint, spec, placement, env or {}, per_host)
    template["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": selector_labels(endpoint)},
                    "topologyKey": HOSTNAME_TOPOLOGY,
                }
            ]
        }
    }
    # Readiness from the leader: it serves the group's requests; a worker runs its ranks and
    # listens on no server port, so it carries no readiness probe (LeaderWorkerSet counts a
    # group ready when all its pods are, and a worker's probe would never pass).
    worker = copy.deepcopy(template)
    for container in worker["spec"]["containers"]:
        container.pop("readinessProbe", None)
    lws_spec: dict[str, Any] = {
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": {
            "size": hosts,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": template,
            "workerTemplate": worker,
        },
    }
    if replicas is not None:
        lws_spec = {"replicas": replicas, **lws_spec}
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": {
            "name": workload_name(endpoint, LWS_KIND),
            "namespace": namespace,
            "labels": object_labels(endpoint),
        },
        "spec": lws_spec,
    }


def server_workload(
    endpoint: str,
    namespace: str,
    spec: InferenceEndpointSpec,
    placement: ServingPlacement,
    replicas: int | None,
    hosts: int,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The workload that runs the replicas: a Deployment of one pod per replica on one host, or
    a LeaderWorkerSet of one group of ``hosts`` pods per replica across hosts."""
    if hosts > 1:
        return server_leader_worker_set(endpoint, namespace, spec, placement, replicas, hosts, env)
    return server_deployment(endpoint, namespace, spec, placement, replicas, env)


def _pod_template(
    endpoint: str,
    spec: InferenceEndpointSpec,
    placement: ServingPlacement,
    env: Mapping[str, str],
    accelerators: int,
) -> dict[str, Any]:
    """One model-server pod: the user's template, the pool's selector and tolerations,
    ``accelerators`` of the pool's kind, behind the operator's admission gate."""
    user_meta = spec.template.metadata
    pod_labels = {
        **(user_meta.labels if user_meta and user_meta.labels else {}),
        **object_labels(endpoint),
    }
    pod_metadata: dict[str, Any] = {"labels": pod_labels}
    if user_meta and user_meta.annotations:
        pod_metadata["annotations"] = dict(user_meta.annotations)
    template: dict[str, Any] = {
        "metadata": pod_metadata,
        "spec": {
            "enableServiceLinks": False,
            # Each replica waits for the operator's admission to grant it a host that no
            # gang was promised (docs/architecture.md: who may take a promised host).
            "schedulingGates": [{"name": ADMISSION_GATE}],
            "nodeSelector": dict(placement.node_selector),
            "tolerations": [
                {
                    "key": placement.accelerator_resource,
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            "containers": [_container(spec, placement, env, accelerators)],
        },
    }
    if spec.template.priority_class_name:
        template["spec"]["priorityClassName"] = spec.template.priority_class_name
    return template


def gate_lifted(host: str | None) -> dict[str, Any]:
    """The strategic-merge patch that lets a replica through its admission gate, pinned to the
    host admission granted it (None: anywhere). Both are allowed on a gated pod (Kubernetes
    1.30+: a gated pod's node affinity may be set when it has none, and a gate removed)."""
    spec: dict[str, Any] = {"schedulingGates": [{"name": ADMISSION_GATE, "$patch": "delete"}]}
    if host is not None:
        spec["affinity"] = pinned_to(host)
    return {"spec": spec}


def replicas_only(
    endpoint: str, namespace: str, replicas: int, kind: str = "Deployment"
) -> dict[str, Any]:
    """The Deployment's (or LeaderWorkerSet's) replica count alone: what a second field manager
    applies to hold the count while the main apply leaves it out (see the controller's hand-over
    to the HPA)."""
    return {
        "apiVersion": LWS_API_VERSION if kind == LWS_KIND else "apps/v1",
        "kind": kind,
        "metadata": {"name": workload_name(endpoint, kind), "namespace": namespace},
        "spec": {"replicas": replicas},
    }


def server_service(
    endpoint: str,
    namespace: str,
    spec: InferenceEndpointSpec,
    groups: bool = False,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterIP Service in front of the ready replicas (``selector``: of some of them, a
    disaggregated endpoint's decode side); of replicas across hosts (``groups``), in front of
    each group's leader, which serves the group's requests."""
    selector = dict(selector or selector_labels(endpoint))
    if groups:
        selector = {**selector, LWS_WORKER_INDEX_LABEL: "0"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": object_name(endpoint),
            "namespace": namespace,
            "labels": object_labels(endpoint),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": spec.port,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def per_replica_rate_quantity(rate: float) -> str | None:
    """The HPA's per-pod target as a Kubernetes quantity: whole units from 100 up (within 1%),
    thousandths below (an LLM replica sustains a few requests/s: 2.93 must not become 2); None
    when there is no rate to target."""
    if rate >= 100.0:
        return str(int(rate))
    milli = int(rate * 1000.0)
    return f"{milli}m" if milli > 0 else None


def autoscaler(
    endpoint: str,
    namespace: str,
    spec: InferenceEndpointSpec,
    per_replica_rate: float | None,
    metric: str = REQUESTS_PER_SECOND_METRIC,
    kind: str = "Deployment",
) -> dict[str, Any]:
    """An autoscaling/v2 HPA on the Deployment, between minReplicas and maxReplicas.

    It targets the Deployment, not the endpoint's scale subresource: an HPA does nothing while
    its target's spec.replicas is 0, which is what the endpoint's scale reports when the engine
    sizes it (spec.replicas unset). Two metrics: the engine's per-replica rate at the SLO, in
    requests/s or, for a target in output tokens/s, in output tokens/s (left out when the
    latency target admits none), and the CPU utilisation the spec asks for; the HPA follows the
    larger recommendation.
    """
    metrics: list[dict[str, Any]] = []
    rate = per_replica_rate_quantity(per_replica_rate or 0.0)
    if rate is not None:
        metrics.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": metric},
                    "target": {"type": "AverageValue", "averageValue": rate},
                },
            }
        )
    metrics.append(
        {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {
                    "type": "Utilization",
                    "averageUtilization": spec.autoscaling.target_cpu_utilization_percentage,
                },
            },
        }
    )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": object_name(endpoint),
            "namespace": namespace,
            "labels": object_labels(endpoint),
        },
        "spec": {
            "scaleTargetRef": {
                "apiVersion": LWS_API_VERSION if kind == LWS_KIND else "apps/v1",
                "kind": kind,
                "name": workload_name(endpoint, kind),
            },
            "minReplicas": max(spec.min_replicas, HPA_MIN_REPLICAS_FLOOR),
            "maxReplicas": spec.max_replicas,
            "metrics": metrics,
        },
    }
