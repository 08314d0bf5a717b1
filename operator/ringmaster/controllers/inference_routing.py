"""An InferenceEndpoint's InferencePools (spec.routing): the Gateway API Inference Extension's
pools that select its model-server pods and name its endpoint picker, and an InferenceObjective
for its requests' priority. Pure: into the Decision, as inference_lifecycle's phases.

- one pool, named after the endpoint, of every serving pod (both sides when disaggregated:
  llm-d's P/D scheduling picks a prefill and a decode pod from one pool by their role label);
- when disaggregated, one pool per side too (``<endpoint>-prefill``, ``<endpoint>-decode``), of
  that role's pods, for gateways that route each phase to a pool of its own;
- of replicas across hosts, each group's leader only: a worker runs ranks, serves no requests.

Condition ``InferencePool``: True with the pools' names; False, and the plain Service alone,
when the Inference Extension's CRD is not served (InferenceExtensionNotInstalled) or no picker
is named (NoEndpointPicker: the v1 InferencePool requires one). Pools the endpoint no longer
wants (routing Off or gone, a side gone) are deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ringmaster.manifests.disaggregated import SIDE_NAMES, side_labels
from ringmaster.manifests.inference import LWS_WORKER_INDEX_LABEL, selector_labels
from ringmaster.manifests.inference_pool import (
    INFERENCE_OBJECTIVE_KIND,
    INFERENCE_POOL_KIND,
    EndpointPicker,
    inference_objective,
    inference_pool,
)
from ringmaster.manifests.naming import dns_label

if TYPE_CHECKING:
    from ringmaster.controllers.inference_lifecycle import _Step

INFERENCE_POOL_CONDITION = "InferencePool"


@dataclass(frozen=True)
class InferenceExtension:
    """Which of the Inference Extension's APIs the cluster serves."""

    pools: bool = False
    objectives: bool = False


def wanted_pools(
    endpoint: str, disaggregated: bool, leaders_only: Mapping[str, bool]
) -> dict[str, dict[str, str]]:
    """Pool name -> the labels its pods carry. ``leaders_only``: per side (or "" for the
    aggregated replicas), whether its replicas are LeaderWorkerSet groups."""
    leader = {LWS_WORKER_INDEX_LABEL: "0"}
    if not disaggregated:
        labels = selector_labels(endpoint) | (leader if leaders_only.get("") else {})
        return {dns_label(endpoint): labels}
    pools = {dns_label(endpoint): dict(selector_labels(endpoint))}
    if all(leaders_only.get(side) for side in SIDE_NAMES):
        pools[dns_label(endpoint)] |= leader
    for side in SIDE_NAMES:
        labels = side_labels(endpoint, side) | (leader if leaders_only.get(side) else {})
        pools[dns_label(endpoint, f"-{side}")] = labels
    return pools


def route(step: _Step, disaggregated: bool, leaders_only: Mapping[str, bool]) -> None:
    """The endpoint's pools and objective into step.decision, the condition, and the names in
    status.inferencePools."""
    spec, status = step.spec, step.status
    name, namespace = step.endpoint.name, step.endpoint.namespace
    routing = spec.routing
    before = list(step.endpoint.status.inference_pools or [])
    keep: list[str] = []
    if routing is None or routing.inference_pool == "Disabled":
        step.conditions.remove(INFERENCE_POOL_CONDITION)
    elif not step.inference_extension.pools:
        step.conditions.set(
            INFERENCE_POOL_CONDITION,
            "False",
            "InferenceExtensionNotInstalled",
            "the Gateway API Inference Extension's InferencePool "
            "(inference.networking.k8s.io/v1) is not served: the endpoint has its Service "
            "only; install the Inference Extension's CRDs for inference-aware routing",
        )
    elif routing.endpoint_picker is None:
        step.conditions.set(
            INFERENCE_POOL_CONDITION,
            "False",
            "NoEndpointPicker",
            "spec.routing.endpointPicker is not set, and an InferencePool names its endpoint "
            "picker: no pool is created (the endpoint has its Service only)",
        )
    else:
        picker = routing.endpoint_picker
        ref = EndpointPicker(picker.name, picker.port, picker.failure_mode)
        for pool, labels in wanted_pools(name, disaggregated, leaders_only).items():
            step.decision.apply.append(inference_pool(pool, namespace, labels, spec.port, ref))
            keep.append(pool)
        objective = ""
        if step.inference_extension.objectives:
            step.decision.apply.append(
                inference_objective(dns_label(name), namespace, keep[0], routing.priority)
            )
            objective = f"; InferenceObjective {dns_label(name)}" + (
                f" (priority {routing.priority})" if routing.priority is not None else ""
            )
        step.conditions.set(
            INFERENCE_POOL_CONDITION,
            "True",
            "PoolsApplied",
            f"InferencePool {', '.join(keep)} routed by {picker.name}:{picker.port} "
            f"({picker.failure_mode}){objective}",
        )
    for gone in before:
        if gone not in keep:
            step.decision.delete_objects.append((INFERENCE_POOL_KIND, gone))
    if before and not keep and step.inference_extension.objectives:
        step.decision.delete_objects.append((INFERENCE_OBJECTIVE_KIND, dns_label(name)))
    status.inference_pools = keep or None
