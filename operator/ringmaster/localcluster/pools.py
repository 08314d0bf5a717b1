"""The simulated accelerator node pools of the local cluster: pure builders of kwok Node objects.

Each node carries the labels, taints and allocatable that the same machine carries on GKE, so the
real kube-scheduler places pods on them exactly as it would in production.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringmaster.api import is_tpu
from ringmaster.placement import labels as L
from ringmaster.placement.topology import GKE_BLOCK, GKE_SUBBLOCK, NVLINK_CLIQUE

ZONE = "us-central1-a"
POD_CAPACITY = 110  # the kubelet's default --max-pods

# Topology (issue 43). Google Cloud's AI Hypercomputer terminology: a block is a collection of
# sub-blocks behind a non-blocking fabric, a sub-block the hosts of one physical rack, and for
# A4X (GB200) a sub-block is one NVLink domain of 18 VMs (72 GPUs). GKE labels such nodes with
# cloud.google.com/gce-topology-block / -subblock (placement/topology.py reads them).
#
# How many hosts a block holds is not published. 16 is the small end of issue 43's "blocks of
# 16-32 hosts": a pool of its default size (8 hosts at most) sits in one block, as a small
# reservation would, and a pool sized up (`ringmaster cluster up --pool a100-highgpu-8g=64`)
# spans blocks, so admission has blocks to pack a gang into.
BLOCK_HOSTS = 16
# NVIDIA GB200 NVL72: 18 compute trays of 4 GPUs in one NVLink domain (hardware.py, [GB200-NVL72]
# and [GCE-A4X]); a tray is one a4x-highgpu-4g VM.
NVL72_TRAYS = 18
# GB200 racks per block: not published either; 4 NVL72 racks (72 trays, 288 GPUs) make a block
# of the same order as the 8-GPU pools' (16 hosts, 128 GPUs) while a pool of one or two racks,
# as the e2e tests start, stays in one block.
NVL72_RACKS_PER_BLOCK = 4
# The NVLink clique's value as GPU Feature Discovery writes it: "<cluster UUID>.<clique id>".
# One made-up UUID for the whole local cluster: only equality between hosts matters.
LOCAL_NVLINK_CLUSTER = "6f1c0b7e-4b1d-4c43-9a43-000000000043"


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
    block_hosts: int = 0
    """Hosts per GKE topology block, by host index (0: no topology labels)."""
    subblock_hosts: int = 0
    """Hosts per sub-block (a rack) inside a block (0: no sub-block label)."""
    nvlink_domain_hosts: int = 0
    """Hosts per NVLink clique (a GB200 NVL72 rack: 18 trays; 0: the NVLink domain is the host)."""

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
        block_hosts=BLOCK_HOSTS,
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
        block_hosts=BLOCK_HOSTS,
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
        block_hosts=BLOCK_HOSTS,
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
        block_hosts=BLOCK_HOSTS,
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
        block_hosts=BLOCK_HOSTS,
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
        block_hosts=BLOCK_HOSTS,
    ),
    # Issue 43: GB200 NVL72 trays ([GCE-A4X]: a4x-highgpu-4g, 4 GPUs, 140 vCPUs, 884 GB), in
    # racks of 18 that are each one NVLink domain and one sub-block. Not started by default (a
    # rack is 18 hosts): `ringmaster cluster up --pool gb200-nvl72=36` for two racks.
    PoolTemplate(
        name="gb200-nvl72",
        instance_type="a4x-highgpu-4g",
        vcpus=140,
        memory_gib=823,  # 884 GB
        default_size=0,
        accelerator="nvidia-gb200",
        accelerators_per_node=4,
        gpu_product="NVIDIA-GB200",
        block_hosts=NVL72_TRAYS * NVL72_RACKS_PER_BLOCK,
        subblock_hosts=NVL72_TRAYS,
        nvlink_domain_hosts=NVL72_TRAYS,
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


def topology_labels(pool: PoolTemplate, index: int) -> dict[str, str]:
    """The topology labels of the pool's host number ``index`` (from 0): hosts in order fill
    block b0, then b1, ...; inside a block, sub-blocks s0, s1, ...; NVLink cliques likewise. So
    a pool resized with `--pool NAME=N` keeps every existing host's labels."""
    labels: dict[str, str] = {}
    if pool.block_hosts:
        labels[GKE_BLOCK] = f"b{index // pool.block_hosts}"
        if pool.subblock_hosts:
            # a sub-block's value is unique only inside its block, as GKE's are
            labels[GKE_SUBBLOCK] = f"s{index % pool.block_hosts // pool.subblock_hosts}"
    if pool.nvlink_domain_hosts:
        labels[NVLINK_CLIQUE] = f"{LOCAL_NVLINK_CLUSTER}.{index // pool.nvlink_domain_hosts}"
    return labels


def node_labels(pool: PoolTemplate, node_name: str, index: int) -> dict[str, str]:
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
    labels.update(topology_labels(pool, index))
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
            "labels": node_labels(pool, name, index),
            # kwok's controller manages the nodes that carry this annotation.
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "allocatable": resources,
            "capacity": resources,
        },
    }


def check_pool_names(names: Iterable[str], known: Iterable[str] = POOLS_BY_NAME) -> None:
    unknown = set(names) - set(known)
    if unknown:
        raise ValueError(f"unknown node pool(s) {sorted(unknown)}; known: {', '.join(known)}")


def node_list(
    sizes: Mapping[str, int] | None = None, pools: Sequence[PoolTemplate] = POOLS
) -> dict[str, Any]:
    """A v1 List of every node, pool sizes defaulting to each pool's default_size. ``pools``:
    other definitions of the pools (the scale bench's blocks of another size)."""
    sizes = dict(sizes or {})
    check_pool_names(sizes, [p.name for p in pools])
    items = [
        node_manifest(pool, i)
        for pool in pools
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
