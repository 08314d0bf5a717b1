"""The node labels, taints and extended resources that identify accelerator node pools.

These are the names real clusters already carry, so Ringmaster needs no extra labelling on GKE,
on clusters running NVIDIA GPU Feature Discovery or AMD's GPU device plugin with its node labeller;
the `ringmaster.dev/*` keys are fallbacks for clusters that have none of them (kind, bare metal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ringmaster.api import is_tpu

# GKE (cloud.google.com/*) and well-known Kubernetes labels.
GKE_NODEPOOL = "cloud.google.com/gke-nodepool"
# AKS names a node's pool so (Azure's ND MI300X v5 / ND H100 v5 node pools).
AKS_NODEPOOL = "kubernetes.azure.com/agentpool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY = "cloud.google.com/gke-tpu-topology"
ZONE = "topology.kubernetes.io/zone"
# NVIDIA GPU Feature Discovery.
GFD_GPU_PRODUCT = "nvidia.com/gpu.product"
GFD_GPU_COUNT = "nvidia.com/gpu.count"
# AMD's GPU node labeller (ROCm/k8s-device-plugin, also run by the AMD GPU Operator): the GPU's
# PCI device ID, e.g. amd.com/gpu.device-id=74a1 on MI300X.
AMD_GPU_DEVICE_ID = "amd.com/gpu.device-id"
# Fallbacks for clusters without cloud labels; the same meaning as the GKE key beside them.
RINGMASTER_POOL = "ringmaster.dev/pool"  # GKE_NODEPOOL
RINGMASTER_INSTANCE_TYPE = "ringmaster.dev/instance-type"  # INSTANCE_TYPE
RINGMASTER_ACCELERATOR = "ringmaster.dev/accelerator"  # GKE_ACCELERATOR / GKE_TPU_ACCELERATOR
RINGMASTER_TPU_TOPOLOGY = "ringmaster.dev/tpu-topology"  # GKE_TPU_TOPOLOGY

# Extended resources and the taints that accelerator pools carry (AMD's device plugin advertises
# amd.com/gpu; pools that taint their AMD nodes use the same key, as NVIDIA's do).
GPU_RESOURCE = "nvidia.com/gpu"
AMD_GPU_RESOURCE = "amd.com/gpu"
TPU_RESOURCE = "google.com/tpu"
ACCELERATOR_TAINT_KEYS = (GPU_RESOURCE, AMD_GPU_RESOURCE, TPU_RESOURCE)
# Catalog names of AMD accelerators start so (amd-mi300x, amd-mi325x): they take amd.com/gpu.
AMD_PREFIX = "amd-"

# In order of preference: the first label present names the pool / machine / accelerator.
POOL_NAME_KEYS = (GKE_NODEPOOL, AKS_NODEPOOL, RINGMASTER_POOL)
INSTANCE_TYPE_KEYS = (INSTANCE_TYPE, RINGMASTER_INSTANCE_TYPE)
ACCELERATOR_KEYS = (GKE_TPU_ACCELERATOR, GKE_ACCELERATOR, RINGMASTER_ACCELERATOR)
TPU_TOPOLOGY_KEYS = (GKE_TPU_TOPOLOGY, RINGMASTER_TPU_TOPOLOGY)

RECOGNISED_LABELS = frozenset(
    POOL_NAME_KEYS
    + INSTANCE_TYPE_KEYS
    + ACCELERATOR_KEYS
    + TPU_TOPOLOGY_KEYS
    + (GFD_GPU_PRODUCT, GFD_GPU_COUNT, AMD_GPU_DEVICE_ID, ZONE)
)

# GPU Feature Discovery reports the product name, not the GKE accelerator key.
GFD_PRODUCT_TO_ACCELERATOR = {
    "NVIDIA-A100-SXM4-40GB": "nvidia-tesla-a100",
    "NVIDIA-A100-SXM4-80GB": "nvidia-a100-80gb",
    "NVIDIA-H100-80GB-HBM3": "nvidia-h100-80gb",
    "NVIDIA-H200": "nvidia-h200-141gb",
    "NVIDIA-B200": "nvidia-b200",
    "Tesla-V100-SXM2-16GB": "nvidia-tesla-v100",
    "Tesla-T4": "nvidia-tesla-t4",
    "Tesla-P4": "nvidia-tesla-p4",
}
# AMD's node labeller reports the PCI device ID (the amdgpu driver's ID table): MI300X 74a1, its
# SR-IOV virtual function 74b5 (Azure ND MI300X v5 exposes VFs), MI325X 74a5.
AMD_DEVICE_ID_TO_ACCELERATOR = {
    "74a1": "amd-mi300x",
    "74b5": "amd-mi300x",
    "74a5": "amd-mi325x",
}


def accelerator_resource(accelerator: str) -> str:
    """The extended resource a pod requests for ``accelerator``: google.com/tpu for a TPU,
    amd.com/gpu for an AMD GPU, nvidia.com/gpu otherwise."""
    if is_tpu(accelerator):
        return TPU_RESOURCE
    return AMD_GPU_RESOURCE if accelerator.startswith(AMD_PREFIX) else GPU_RESOURCE


@dataclass(frozen=True)
class PoolIdentity:
    """What a node's labels say about the pool it belongs to."""

    pool: str | None
    instance_type: str | None
    accelerator: str | None
    tpu_topology: str | None

    @property
    def is_tpu(self) -> bool:
        return self.accelerator is not None and is_tpu(self.accelerator)


def _first(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    return next((labels[k] for k in keys if labels.get(k)), None)


def pool_identity(labels: Mapping[str, str]) -> PoolIdentity:
    """Read a node's pool identity from whichever of the recognised labels it carries."""
    accelerator = _first(labels, ACCELERATOR_KEYS)
    if accelerator is None and labels.get(GFD_GPU_PRODUCT):
        accelerator = GFD_PRODUCT_TO_ACCELERATOR.get(labels[GFD_GPU_PRODUCT])
    if accelerator is None and labels.get(AMD_GPU_DEVICE_ID):
        accelerator = AMD_DEVICE_ID_TO_ACCELERATOR.get(labels[AMD_GPU_DEVICE_ID].lower())
    return PoolIdentity(
        pool=_first(labels, POOL_NAME_KEYS),
        instance_type=_first(labels, INSTANCE_TYPE_KEYS),
        accelerator=accelerator,
        tpu_topology=_first(labels, TPU_TOPOLOGY_KEYS),
    )
