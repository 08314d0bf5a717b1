"""The simulated accelerator node pools of the local cluster: pure builders of kwok Node objects.

Each node carries the labels, taints and allocatable that the same machine carries on GKE, so the
real kube-scheduler places pods on them exactly as it would in production.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ringmaster.api import is_tpu
from ringmaster.placement import labels as L

ZONE = "us-central1-a"
POD_CAPACITY = 110  # the kubelet's default --max-pods


@dataclass(frozen=True)
class PoolTemplate:
    """One node pool: a machine shape and how many of it the local cluster starts with."""

    name: str
    instance_type: str
    vcpus: int
    memory_gib: int
    default_size: int
    accelerator: str | None = None
    accelerators_per_node: int = 0
    gpu_product: str | None = None  # what GPU Feature Discovery would report
    tpu_topology: str | None = None
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_tpu(self) -> bool:
        return self.accelerator is not None and is_tpu(self.accelerator)

    @property
    def accelerator_resource(self) -> str | None:
        if self.accelerator is None:
            return None
        return L.accelerator_resource(self.accelerator)


# Machine shapes from the GCE machine-type documentation (A2, A3, A4, N1, E2, TPU ct4p, ct5lp)
# as of 2026.
POOLS: tuple[PoolTemplate, ...] = (
    PoolTemplate(
        name="a100-highgpu-8g",
        instance_type="a2-highgpu-8g",
        vcpus=96,
        memory_gib=680,
        default_size=8,
        accelerator="nvidia-tesla-a100",
        accelerators_per_node=8,
        gpu_product="NVIDIA-A100-SXM4-40GB",
    ),
    PoolTemplate(
        name="a100-megagpu-16g",
        instance_type="a2-megagpu-16g",
        vcpus=96,
        memory_gib=1360,
        default_size=2,
        accelerator="nvidia-tesla-a100",
        accelerators_per_node=16,
        gpu_product="NVIDIA-A100-SXM4-40GB",
    ),
    PoolTemplate(
        name="t4-serving",
        instance_type="n1-standard-8",
        vcpus=8,
        memory_gib=30,
        default_size=8,
        accelerator="nvidia-tesla-t4",
        accelerators_per_node=1,
        gpu_product="Tesla-T4",
    ),
    # LLM training (issue 12): H100 hosts for the FSDP fine-tune, A100 80GB hosts for the 70B
    # layout search, a TPU v5e 2x4 slice (8 chips on 2 hosts of 4). LLM serving (issue 16) uses
    # the H100 and A100 80GB pools too.
    PoolTemplate(
        name="h100-highgpu-8g",
        instance_type="a3-highgpu-8g",
        vcpus=208,
        memory_gib=1872,
        default_size=2,
        accelerator="nvidia-h100-80gb",
        accelerators_per_node=8,
        gpu_product="NVIDIA-H100-80GB-HBM3",
    ),
    PoolTemplate(
        name="a100-ultragpu-8g",
        instance_type="a2-ultragpu-8g",
        vcpus=96,
        memory_gib=1360,
        default_size=4,
        accelerator="nvidia-a100-80gb",
        accelerators_per_node=8,
        gpu_product="NVIDIA-A100-SXM4-80GB",
    ),
    PoolTemplate(
        name="tpu-v5e-2x4",
        instance_type="ct5lp-hightpu-4t",
        vcpus=112,
        memory_gib=192,
        default_size=2,
        accelerator="tpu-v5-lite-podslice",
        accelerators_per_node=4,
        tpu_topology="2x4",
    ),
    # TPU multislice (issue 32): a second v5e 2x4 slice pool, so a 2-slice job runs with one
    # slice per pool (each GKE multi-host TPU node pool is one slice).
    PoolTemplate(
        name="tpu-v5e-2x4-b",
        instance_type="ct5lp-hightpu-4t",
        vcpus=112,
        memory_gib=192,
        default_size=2,
        accelerator="tpu-v5-lite-podslice",
        accelerators_per_node=4,
        tpu_topology="2x4",
    ),
    # The multislice examples' slices, not started by default (64 and 16 hosts each: `ringmaster
    # cluster up --pool tpu-v5e-16x16-a=64 ...`): v5e 16x16 (256 chips, 64 ct5lp-hightpu-4t
    # hosts) and v5p 4x4x4 (64 chips, 16 ct5p-hightpu-4t hosts: 208 vCPUs, 448 GB), shapes from
    # the Cloud TPU v5e and v5p pages.
    *(
        PoolTemplate(
            name=f"tpu-v5e-16x16-{suffix}",
            instance_type="ct5lp-hightpu-4t",
            vcpus=112,
            memory_gib=192,
            default_size=0,
            accelerator="tpu-v5-lite-podslice",
            accelerators_per_node=4,
            tpu_topology="16x16",
        )
        for suffix in "ab"
    ),
    *(
        PoolTemplate(
            name=f"tpu-v5p-4x4x4-{suffix}",
            instance_type="ct5p-hightpu-4t",
            vcpus=208,
            memory_gib=448,
            default_size=0,
            accelerator="tpu-v5p-slice",
            accelerators_per_node=4,
            tpu_topology="4x4x4",
        )
        for suffix in "abcd"
    ),
    # A 2x2x4 TPU v4 slice: 16 chips on 4 hosts of 4 chips each.
    PoolTemplate(
        name="tpu-v4-2x2x4",
        instance_type="ct4p-hightpu-4t",
        vcpus=240,
        memory_gib=407,
        default_size=4,
        accelerator="tpu-v4-podslice",
        accelerators_per_node=4,
        tpu_topology="2x2x4",
    ),
    # Issue 15: one pool of each GPU the catalog gained, two hosts so a 2-host gang can run.
    # Shapes from the GCE "GPU machine types" page (A3 Ultra, A4): 224 vCPUs; 2,952 GB and
    # 3,968 GB of memory; GPU Feature Discovery reports the product as nvidia-smi names it.
    PoolTemplate(
        name="h200-ultragpu-8g",
        instance_type="a3-ultragpu-8g",
        vcpus=224,
        memory_gib=2749,  # 2,952 GB
        default_size=2,
        accelerator="nvidia-h200-141gb",
        accelerators_per_node=8,
        gpu_product="NVIDIA-H200",
    ),
    PoolTemplate(
        name="b200-highgpu-8g",
        instance_type="a4-highgpu-8g",
        vcpus=224,
        memory_gib=3695,  # 3,968 GB
        default_size=2,
        accelerator="nvidia-b200",
        accelerators_per_node=8,
        gpu_product="NVIDIA-B200",
    ),
    # Reducers: Vertex AI's documented reduction-server machine (32 Gbps egress).
    PoolTemplate(
        name="reducers",
        instance_type="n1-highcpu-16",
        vcpus=16,
        memory_gib=14,
        default_size=32,
    ),
    PoolTemplate(
        name="default-pool",
        instance_type="e2-standard-4",
        vcpus=4,
        memory_gib=16,
        default_size=2,
    ),
)

POOLS_BY_NAME = {p.name: p for p in POOLS}


def node_labels(pool: PoolTemplate, node_name: str) -> dict[str, str]:
    labels = {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        L.GKE_NODEPOOL: pool.name,
        L.INSTANCE_TYPE: pool.instance_type,
        L.ZONE: ZONE,
    }
    if pool.accelerator and pool.is_tpu:
        labels[L.GKE_TPU_ACCELERATOR] = pool.accelerator
        if pool.tpu_topology:
            labels[L.GKE_TPU_TOPOLOGY] = pool.tpu_topology
    elif pool.accelerator:
        labels[L.GKE_ACCELERATOR] = pool.accelerator
        if pool.gpu_product:
            labels[L.GFD_GPU_PRODUCT] = pool.gpu_product
        labels[L.GFD_GPU_COUNT] = str(pool.accelerators_per_node)
    labels.update(pool.extra_labels)
    return labels


def node_resources(pool: PoolTemplate) -> dict[str, str]:
    """Allocatable resources; GKE reserves a slice of CPU and memory for the system."""
    resources = {
        "cpu": f"{pool.vcpus * 1000 - 500}m",
        "memory": f"{int(pool.memory_gib * 0.92 * 1024)}Mi",
        "ephemeral-storage": "100Gi",
        "pods": str(POD_CAPACITY),
    }
    if pool.accelerator_resource:
        resources[pool.accelerator_resource] = str(pool.accelerators_per_node)
    return resources


def node_manifest(pool: PoolTemplate, index: int) -> dict[str, Any]:
    name = f"{pool.name}-{index:04d}"
    taints = []
    if pool.accelerator_resource:
        taint = {"key": pool.accelerator_resource, "value": "present", "effect": "NoSchedule"}
        taints.append(taint)
    resources = node_resources(pool)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(pool, name),
            # kwok's controller manages the nodes that carry this annotation.
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "allocatable": resources,
            "capacity": resources,
        },
    }


def check_pool_names(names: Iterable[str]) -> None:
    unknown = set(names) - set(POOLS_BY_NAME)
    if unknown:
        raise ValueError(
            f"unknown node pool(s) {sorted(unknown)}; known: {', '.join(POOLS_BY_NAME)}"
        )


def node_list(sizes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """A v1 List of every node, pool sizes defaulting to each pool's default_size."""
    sizes = dict(sizes or {})
    check_pool_names(sizes)
    items = [
        node_manifest(pool, i)
        for pool in POOLS
        for i in range(sizes.get(pool.name, pool.default_size))
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def parse_sizes(pairs: Iterable[str]) -> dict[str, int]:
    """Parse `pool=count` arguments."""
    sizes: dict[str, int] = {}
    for pair in pairs:
        name, sep, count = pair.partition("=")
        if not sep or not count.isdigit():
            raise ValueError(f"expected POOL=COUNT, got {pair!r}")
        sizes[name] = int(count)
    check_pool_names(sizes)
    return sizes
