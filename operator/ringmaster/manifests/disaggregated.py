"""The two sides of a disaggregated InferenceEndpoint as workloads: one Deployment (or
LeaderWorkerSet, for a side whose replica spans hosts) per side, built by the endpoint's own
workload builder and told apart by their role.

- **Names**: ``<endpoint>-prefill`` and ``<endpoint>-decode`` (their LeaderWorkerSets
  ``<endpoint>-prefill-group`` ...).
- **Labels**: the endpoint's, plus ``ringmaster.dev/serving-side`` and llm-d's
  ``llm-d.ai/role: prefill | decode``, which llm-d's routing sidecar and the Inference
  Extension's P/D scheduling read (llm-d-inference-sim manifests/disaggregation). The side label
  is in each workload's selector, so the two never claim each other's pods.
- **Env**: the side's engine settings (manifests.inference.serving_env of the side's plan) and
  the KV connector's, in the engines' own terms:

  - ``RINGMASTER_DISAGGREGATION_ROLE``: ``prefill`` or ``decode``;
  - ``RINGMASTER_KV_TRANSFER_CONFIG``: vLLM's ``--kv-transfer-config`` JSON: NixlConnector with
    ``kv_role: kv_both`` (vLLM's NIXL guide), or MooncakeConnector with ``kv_producer`` /
    ``kv_consumer`` (Mooncake's vLLM v1 guide);
  - ``RINGMASTER_DISAGGREGATION_MODE`` and ``RINGMASTER_DISAGGREGATION_TRANSFER_BACKEND``:
    SGLang's ``--disaggregation-mode prefill|decode`` and
    ``--disaggregation-transfer-backend nixl|mooncake``.

The endpoint's Service selects the decode side: its pods take the requests (llm-d's routing
sidecar runs beside them and sends each prompt to a prefill pod first).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ringmaster.api.inferenceendpoint import InferenceEndpointSpec
from ringmaster.manifests.inference import (
    GROUP_SET_SUFFIX,
    LWS_KIND,
    ServingPlacement,
    object_labels,
    selector_labels,
    server_service,
    server_workload,
)
from ringmaster.manifests.naming import dns_label

SIDE_LABEL = "ringmaster.dev/serving-side"
LLM_D_ROLE_LABEL = "llm-d.ai/role"
ROLE_ENV = "RINGMASTER_DISAGGREGATION_ROLE"
KV_TRANSFER_CONFIG_ENV = "RINGMASTER_KV_TRANSFER_CONFIG"
SGLANG_MODE_ENV = "RINGMASTER_DISAGGREGATION_MODE"
SGLANG_BACKEND_ENV = "RINGMASTER_DISAGGREGATION_TRANSFER_BACKEND"
SIDE_NAMES = ("prefill", "decode")


def side_name(endpoint: str, side: str, kind: str = "Deployment") -> str:
    suffix = f"-{side}" + (GROUP_SET_SUFFIX if kind == LWS_KIND else "")
    return dns_label(endpoint, suffix)


def side_labels(endpoint: str, side: str) -> dict[str, str]:
    """The side's pods: the endpoint's selector plus the side and llm-d's role."""
    return {**selector_labels(endpoint), SIDE_LABEL: side, LLM_D_ROLE_LABEL: side}


def kv_transfer_config(backend: str, side: str) -> str:
    """vLLM's --kv-transfer-config for the connector and the side."""
    if backend == "Mooncake":
        role = "kv_producer" if side == "prefill" else "kv_consumer"
        return json.dumps({"kv_connector": "MooncakeConnector", "kv_role": role})
    return json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})


def side_env(serving_env: Mapping[str, str], backend: str, side: str) -> dict[str, str]:
    return {
        **serving_env,
        ROLE_ENV: side,
        KV_TRANSFER_CONFIG_ENV: kv_transfer_config(backend, side),
        SGLANG_MODE_ENV: side,
        SGLANG_BACKEND_ENV: backend.lower(),
    }


def side_spec(spec: InferenceEndpointSpec, per_replica: int) -> InferenceEndpointSpec:
    """The endpoint's spec with the side's accelerators per replica (what the builders and the
    pool's placement read)."""
    accelerator = spec.accelerator.model_copy(
        update={"per_replica": per_replica, "hosts_per_replica": None}
    )
    return spec.model_copy(update={"accelerator": accelerator})


def side_workload(
    endpoint: str,
    namespace: str,
    spec: InferenceEndpointSpec,
    side: str,
    placement: ServingPlacement,
    replicas: int | None,
    hosts: int,
    env: Mapping[str, str],
) -> dict[str, Any]:
    """One side's Deployment (or LeaderWorkerSet): the endpoint's builder, renamed and
    relabelled for the side. ``spec`` is the side's (:func:`side_spec`)."""
    workload = server_workload(endpoint, namespace, spec, placement, replicas, hosts, env)
    kind = workload["kind"]
    labels = side_labels(endpoint, side)
    workload["metadata"]["name"] = side_name(endpoint, side, kind)
    workload["metadata"]["labels"] = {**object_labels(endpoint), **labels}
    if kind == LWS_KIND:
        template = workload["spec"]["leaderWorkerTemplate"]
        for part in ("leaderTemplate", "workerTemplate"):
            template[part]["metadata"]["labels"].update(labels)
    else:
        workload["spec"]["selector"] = {"matchLabels": labels}
        workload["spec"]["template"]["metadata"]["labels"].update(labels)
    return workload


def decode_service(
    endpoint: str, namespace: str, spec: InferenceEndpointSpec, groups: bool
) -> dict[str, Any]:
    """The endpoint's Service in front of the decode side (each group's leader when its
    replicas span hosts)."""
    return server_service(endpoint, namespace, spec, groups, side_labels(endpoint, "decode"))


__all__ = [
    "LLM_D_ROLE_LABEL",
    "SIDE_LABEL",
    "SIDE_NAMES",
    "decode_service",
    "kv_transfer_config",
    "side_env",
    "side_labels",
    "side_name",
    "side_spec",
    "side_workload",
]
