"""The hardware catalog: accelerators, host machine types, their links and their prices.

Every figure carries its source and date in a comment beside it. Accelerator keys are the values
GKE puts in the ``cloud.google.com/gke-accelerator`` / ``gke-tpu-accelerator`` node labels, so a
node pool's labels name catalog entries directly. Throughputs are *dense* datasheet peaks (no
structured sparsity); links are per direction. Users add or override entries without code changes
through a catalog file or the chart's catalog ConfigMap, which ``ringmaster.planning.catalog``
validates and merges into a new :class:`Catalog`; see docs/catalog.md for the format.

Sources used below, abbreviated:
  [points]  ../shared/calibration/points.yaml, section ``hardware`` (datasheet figures).
  [A100-DS] NVIDIA A100 Tensor Core GPU datasheet (2020, rev. 2021).
  [H100-DS] NVIDIA H100 Tensor Core GPU datasheet (2022, SXM5 column, dense).
  [V100-DS] NVIDIA Tesla V100 datasheet (2017/2018, SXM2 column).
  [T4-DS]   NVIDIA T4 datasheet (2018).
  [P4-DS]   NVIDIA Tesla P4 datasheet (2016).
  [TPU-CACM] Jouppi et al., "A Domain-Specific Supercomputer for Training Deep Neural Networks",
            CACM 63(7), 2020: TPU v2/v3 HBM bandwidth and ICI link rates.
  [TPU-DOCS] Cloud TPU system-architecture pages (v4, v5e), as read in 2024.
  [GCE-NET] Compute Engine "Network bandwidth" page, 2024: N1 default egress is 2 Gbps per vCPU,
            capped at 32 Gbps; A2 machines 24/32/50/100 Gbps for 1/2/4/8+ GPUs.
  [GCE-PRICE] Google Cloud on-demand price list, us-central1 (us-central2 for TPU v4), 2024;
            N1 from its per-vCPU (0.031611 USD/h) and per-GB (0.004237 USD/h) rates.
  [GCE-GPU-NET] Compute Engine "GPU machine types" and "Maximize GPU network bandwidth" pages,
            2024/2025: a3-highgpu-8g 4 x 200 Gbps GPU NICs with GPUDirect-TCPX, a3-megagpu-8g
            8 x 200 Gbps with GPUDirect-TCPXO, a3-ultragpu-8g and a4-highgpu-8g 8 x 400 Gbps
            ConnectX-7 with GPUDirect-RDMA (RoCE); A2 / N1 GPU traffic over gVNIC TCP.
  [H200-DS] NVIDIA H200 Tensor Core GPU datasheet (2024, SXM, dense).
  [B200-DS] NVIDIA HGX B200 datasheet (2024; per-GPU dense figures = the 8-GPU board's sparse
            figures / 16).
  [TPU-V5P] Cloud TPU v5p documentation (2024): 459 bf16 TFLOPS, 95 GB HBM at 2,765 GB/s,
            4,800 Gbps of ICI per chip over 6 links, 3-D torus of up to 8,960 chips.
  [TPU-V6E] Cloud TPU v6e (Trillium) documentation (2024): 918 bf16 TFLOPS, 32 GB HBM at
            1,640 GB/s, 3,584 Gbps of ICI per chip over 4 links, 2-D torus of 256 chips.
  [EC2-ACC] Amazon EC2 accelerated computing instance types page, 2024: p4d.24xlarge and
            p4de.24xlarge 8 x A100 (40 / 80 GB) with 4 x 100 Gbps EFA, 96 vCPUs; p5.48xlarge
            8 x H100 with 32 x 100 Gbps EFA (v2), 192 vCPUs; all on NVSwitch.
  [EC2-PRICE] Amazon EC2 On-Demand pricing, us-east-1, Linux, 2024 (before the June 2025 P4 / P5
            price cut): p4d.24xlarge 32.7726, p4de.24xlarge 40.9657, p5.48xlarge 98.32 USD/h;
            check the current price list and override them through the catalog.
  [SMI]     The device memory nvidia-smi reports (``memory.total``): H100 80GB HBM3 81559 MiB,
            H200 143771 MiB, B200 183359 MiB, GB200 189471 MiB, A100-SXM4 80GB 81920 MiB,
            A100-SXM4 40GB 40960 MiB (nvidia-smi tables quoted in public repositories' setup
            notes and logs, 2024-26); AMD Instinct MI300X 196288 MiB (rocm-smi's "VRAM Total
            Memory (B): 205822885888", quoted alike).
            A datasheet's "80 GB" is 80 GiB of HBM stacks less what the driver keeps, not
            80 x 10^9 bytes: read as decimal, an H100 holds 74.5 GiB and the engine refused
            layouts that ran (issue 36). Parts without such a figure keep the datasheet's GB.
  [XLA-HBM] A TPU's memory as XLA may allocate it (jax ``Device.memory_stats()["bytes_limit"]``,
            the "of N G hbm" of XLA:TPU's out-of-memory message), the TPU's [SMI]: the runtime's
            own share is already outside it (openxla/xla docs/errors/error_1000.md: "a small
            portion of memory is reserved for XLA Runtime internals"). v5p 95.74 GiB (MaxText
            docs/guides/monitoring_and_debugging/understand_logs_and_metrics.md @ e591f30c, a
            v5p-8's "Using (GB) 44.63 / 95.74"); v6e 33,550,237,696 bytes = 31,996 MiB
            (vllm-project/vllm pull request 16211, 2025-04-25: a Google engineer's usage stats
            on one v6e, "gpu_memory_per_device": 33550237696, read through torch_xla); v5e
            15.75 GiB (XLA:TPU's "Used 28.59G of 15.75G hbm" on a v5e-8, m-cahill/tunix-rt
            ProjectFiles/Milestones/Phase3/M38_summary.md @ 1583ca29). The v4 and older keep
            the datasheet's GB: no device-reported figure found.
  [NCCL]    NVIDIA/nccl src/graph/tuning.cc (commit 5067397, 2026): NVLS needs Hopper or newer
            on an NVSwitch host; the LL/LL128 tables are indexed by GPU generation.
  [GB200-NVL72] NVIDIA GB200 NVL72 product page and datasheet (2024-25): per rack of 72 GPUs
            FP4 1,440 / FP8 720 / FP16-BF16 360 / TF32 180 PFLOPS with sparsity (dense = half),
            up to 13.4 TB HBM3e (186 GB per GPU) at 576 TB/s (8 TB/s per GPU), NVLink 130 TB/s
            (1.8 TB/s per GPU, 900 GB/s per direction); 18 compute trays of 4 GPUs, one NVLink
            domain. The NVLink Switch system reaches 576 GPUs in one domain (NVIDIA NVLink page).
  [BW-BRIEF] NVIDIA Blackwell architecture technical brief (2024), GB200 column (1,200 W), dense:
            FP32 90, TF32 1,250, FP16/BF16 2,500, FP8/INT8 5,000, FP4 10,000 TFLOPS (tabulated
            at glennklockwood.com/garden/processors/B200).
  [GCE-A4X] Compute Engine "Networking and GPU machines" page (2025): A4X (GB200) machine types
            have 4 x ConnectX-7 NICs, 1,600 Gbps for GPU-to-GPU traffic (GPUDirect RDMA over
            RoCE), plus 2 Titanium NICs; a4x-highgpu-4g: 4 GPUs, 140 vCPUs, in NVL72 racks of
            18 VMs. No on-demand list price is published (reservations only): the catalog price is
            assumed (see the machine's comment).
  [MI300X-DS] AMD Instinct MI300X data sheet and product page (2023-24;
            www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html, data sheet
            www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/
            amd-instinct-mi300x-data-sheet.pdf): 192 GB HBM3 at 5.3 TB/s; dense (no sparsity)
            FP16 / BF16 1,307.4, FP8 2,614.9, INT8 2,614.9, TF32 653.7, FP32 matrix 163.4 TFLOPS;
            7 AMD Infinity Fabric links of 128 GB/s (both directions) each, 896 GB/s in all.
  [MI325X-DS] AMD Instinct MI325X data sheet and product page (2024;
            www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html): the MI300X's
            compute (dense FP16 / BF16 1,307.4, FP8 / INT8 2,614.9, TF32 653.7, FP32 163.4
            TFLOPS), 256 GB HBM3E at 6 TB/s, the same 7 x 128 GB/s Infinity Fabric links; a
            drop-in for the MI300X platform (AMD's 8-OAM universal baseboard).
  [ROCM-XGMI] "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X", ROCm
            blogs, 2025-03-02 (rocm.blogs.amd.com/software-tools-optimization/mi300x-rccl-xgmi/
            README.html): each MI300X of an 8-GPU platform is linked to its seven peers by xGMI, a
            fully connected mesh; 64 GB/s per link and direction, about 48 GB/s of it usable (CRC
            and protocol). So 7 x 64 = 448 GB/s per GPU and direction.
  [ND-MI300X] Azure "ND MI300X v5 size series" (learn.microsoft.com/azure/virtual-machines/sizes/
            gpu-accelerated/ndmi300xv5-series, 2024): Standard_ND96isr_MI300X_v5, 8 x MI300X,
            96 vCPUs (4th Gen Xeon), 8 x 400 Gb/s NVIDIA Quantum-2 CX7 InfiniBand, one per GPU,
            GPUDirect RDMA. No on-demand price was found in a stored source: assumed (see the
            machine's comment).
  [EFA-GEN] AWS EFA generations (EC2 "Elastic Fabric Adapter" page, 2024-25): p4d / p4de EFA v1,
            p5 EFA v2, p5en EFA v3, p6-b200 EFA v4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ringmaster.engine.units import GB, MIB, TERA, gbps_to_bytes_per_second

if TYPE_CHECKING:  # engine.profiled imports this module
    from ringmaster.engine.profiled import PoolMeasurement

Kind = Literal["gpu", "tpu"]
# How a host's accelerators talk: NVLink (with NVSwitch on HGX hosts), PCIe, AMD Infinity Fabric
# (xGMI: on AMD's 8-GPU OAM platforms a fully connected mesh, one link from each GPU to each of
# the seven others, no switch), or a TPU's ICI.
IntraLink = Literal["nvlink", "pcie", "xgmi", "ici"]
# xGMI links per GPU on AMD's 8-GPU OAM platforms (MI300X / MI325X: 7, one to each peer,
# [ROCM-XGMI]); a collective among g of the host's GPUs uses the g - 1 links between them.
XGMI_LINKS_PER_GPU = 7
# How GPU traffic leaves a host: kernel TCP through gVNIC (every byte bounced through host memory
# by CPU threads), Google's GPUDirect-TCPX / TCPXO (GPU memory straight to the NIC, TCP), RDMA
# (InfiniBand or RoCE, GPUDirect-RDMA), AWS's Elastic Fabric Adapter (EFA: the SRD protocol
# through libfabric and the aws-ofi-nccl plugin, GPUDirect on p4d / p5), or a TPU host's
# data-center network (multislice).
Transport = Literal["tcp", "tcpx", "tcpxo", "rdma", "efa", "dcn"]
TRANSPORTS = ("tcp", "tcpx", "tcpxo", "rdma", "efa", "dcn")
# NCCL's tuning tables are indexed by GPU generation (tuning.cc: Volta, Ampere, Hopper, Blackwell;
# anything older than Ampere, T4 and P4 included, uses the Volta row). "cdna3": AMD MI300X /
# MI325X under RCCL (NCCL's fork for ROCm: ring and tree, no NVLS); the engine borrows NCCL's
# Ampere rows for it (efficiency.py says where).
NcclArch = Literal["volta", "ampere", "hopper", "blackwell", "cdna3", ""]
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8", "fp4")


class UnknownHardwareError(LookupError):
    """A name that is not in the catalog; the message lists the known names."""

    def __init__(self, what: str, name: str, known: Iterable[str]) -> None:
        self.what = what
        self.name = name
        self.known = sorted(known)
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(self.known)}")

    def __str__(self) -> str:  # LookupError would add quotes around the message
        return str(self.args[0])


class UnsupportedReplicaError(UnknownHardwareError):
    """A serving replica no host shape of the catalog builds; the message has the numbers."""

    def __init__(self, message: str) -> None:
        LookupError.__init__(self, message)
        self.what, self.name, self.known = "replica shape", "", []


class CatalogOverrideError(ValueError):
    """An override entry that cannot be applied (unknown field, wrong type, missing field)."""


@dataclass(frozen=True)
class Accelerator:
    """One accelerator chip (GPU or TPU chip)."""

    name: str
    kind: Kind
    peak_flops: Mapping[str, float]  # precision -> dense FLOP/s (int8: op/s, 1 MAC = 2 ops)
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    intra_link: IntraLink
    intra_bandwidth: float  # bytes/s per accelerator, per direction, to its host peers
    # USD per accelerator-hour when billed per chip (attached GPUs, TPU chips); None when the
    # price is bundled in the machine type (A2, A3).
    price_per_hour: float | None = None
    # TPU ICI: bytes/s per link per direction; an axis is a wrapped ring (torus) when it is at
    # least ici_wrap_axis long and the slice has at least ici_wrap_chips chips.
    ici_link_bandwidth: float = 0.0
    ici_wrap_axis: int = 0
    ici_wrap_chips: int = 0
    source: str = ""
    # True when the accelerator sits on an NVSwitch host and NCCL can run NVLink SHARP (NVLS):
    # Hopper or newer SXM parts ([NCCL] nvlsEfficiency is 0 for Volta and Ampere).
    nvswitch: bool = False
    nccl_arch: NcclArch = ""
    # TPU slices: axes of the slice topology (2 for "4x4", 3 for "2x2x4"); 0 for GPUs.
    topology_dims: int = 0

    def peak(self, precision: str) -> float:
        """Dense peak at ``precision``, falling back as the hardware does (see ``effective``)."""
        return self.peak_flops[self.effective_precision(precision)]

    def effective_precision(self, precision: str) -> str:
        """The precision the chip actually computes ``precision`` at.

        A missing entry falls back: fp32 -> tf32 is *not* implied (TF32 changes numerics), but a
        TPU has no FP32 matrix unit and XLA's default matmul precision runs fp32 through the bf16
        MXU; fp16 without fast fp16 (P4) and int8 without int8 units fall back to fp32.
        """
        p = precision.lower()
        if p in self.peak_flops:
            return p
        if self.kind == "tpu" and "bf16" in self.peak_flops:
            return "bf16"
        if p in ("fp16", "bf16") and "fp16" in self.peak_flops:
            return "fp16"
        return "fp32"

    def serving_peak(self, precision: str) -> tuple[float, str]:
        """The fastest rate at which a model quantised to ``precision`` can run, and the
        precision of those kernels: an inference compiler (TensorRT, XLA) runs each layer in
        the fastest precision at least as wide as the model's, so INT8 on a V100 (DP4A, 62.8
        TOPS) runs on the FP16 tensor cores (125)."""
        order = ("int8", "fp16", "bf16", "tf32", "fp32")
        p = self.effective_precision(precision)
        wider = order[order.index(p) :] if p in order else (p,)
        rates = [(self.peak_flops[q], q) for q in wider if q in self.peak_flops]
        return max(rates) if rates else (self.peak(p), p)

    def supports(self, precision: str) -> bool:
        return precision.lower() in self.peak_flops


@dataclass(frozen=True)
class MachineType:
    """A host: vCPUs, NIC, price; A2/A3/TPU hosts bundle their accelerators."""

    name: str
    vcpus: int
    nic_bandwidth: float  # bytes/s per direction (egress cap)
    price_per_hour: float  # USD/h, including bundled accelerators
    accelerator: str | None = None  # bundled accelerator key
    accelerator_count: int = 0
    source: str = ""
    nics: int = 1  # NICs that carry GPU traffic; nic_bandwidth is their sum
    transport: Transport = "tcp"
    # GPUs in one NVLink domain when it spans several hosts (a GB200 NVL72 rack: 72, hosts of 4,
    # NCCL's multi-node NVLink); 0: the domain is the host (its accelerator_count).
    nvlink_domain: int = 0
    # AWS EFA's generation (1: p4d / p4de, 2: p5, 3: p5en, 4: p6) [EFA-GEN]; 0 where not EFA.
    efa_generation: int = 0
    # The spine's oversubscription between topology blocks for these hosts (engine.
    # placement_cost): None where no one states it; no cloud publishes it, so the built-in
    # catalog states none and plans use DEFAULT_SPINE_OVERSUBSCRIPTION (1.0, non-blocking). A
    # cluster sets its own fabric's figure in a catalog file (spineOversubscription).
    spine_oversubscription: float | None = None

    @property
    def nic_gbps(self) -> float:
        """Line rate of one NIC, Gbps."""
        return self.nic_bandwidth * 8.0 / 1e9 / max(self.nics, 1)

    @property
    def domain_accelerators(self) -> int:
        """GPUs that reach each other over NVLink: the NVLink domain, or else the host."""
        return self.nvlink_domain or self.accelerator_count


@dataclass(frozen=True)
class Host:
    """A resolved worker or replica host: a machine with g accelerators."""

    machine: MachineType
    accelerator: Accelerator
    count: int

    @property
    def price_per_hour(self) -> float:
        extra = 0.0
        if self.machine.accelerator is None and self.accelerator.price_per_hour is not None:
            extra = self.count * self.accelerator.price_per_hour
        return self.machine.price_per_hour + extra

    @property
    def nic_bandwidth(self) -> float:
        return self.machine.nic_bandwidth


def _acc(
    name: str,
    kind: Kind,
    tflops: Mapping[str, float],
    memory_gb: float,
    memory_gbps: float,
    link: IntraLink,
    link_gbps: float,
    price: float | None,
    source: str,
    device_mib: float | None = None,
    **extra: Any,
) -> Accelerator:
    """``device_mib``: the memory the device reports ([SMI]); else the datasheet's GB."""
    return Accelerator(
        name=name,
        kind=kind,
        peak_flops={k: v * TERA for k, v in tflops.items()},
        memory_bytes=memory_gb * GB if device_mib is None else device_mib * MIB,
        memory_bandwidth=memory_gbps * GB,
        intra_link=link,
        intra_bandwidth=link_gbps * GB,
        price_per_hour=price,
        source=source,
        **extra,
    )


def _machine(
    name: str,
    vcpus: int,
    nic_gbps: float,
    price: float,
    source: str,
    accelerator: str | None = None,
    count: int = 0,
    nics: int = 1,
    transport: Transport = "tcp",
    **extra: Any,
) -> MachineType:
    return MachineType(
        name=name,
        vcpus=vcpus,
        nic_bandwidth=gbps_to_bytes_per_second(nic_gbps),
        price_per_hour=price,
        accelerator=accelerator,
        accelerator_count=count,
        source=source,
        nics=nics,
        transport=transport,
        **extra,
    )


_ACCELERATORS: tuple[Accelerator, ...] = (
    _acc(
        "nvidia-tesla-a100",
        "gpu",
        # [points]/[A100-DS] 2020: dense TF32 156, FP16/BF16 312, INT8 624, FP32 19.5.
        {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "int8": 624},
        40,  # [points] 40 GB HBM2
        1555,  # [points] 1,555 GB/s
        "nvlink",
        300,  # [points] 12 NVLink3 links x 25 GB/s per direction
        None,  # bundled in a2-highgpu-*
        "[A100-DS] 2020, [points]",
        nccl_arch="ampere",  # HGX A100 has NVSwitch, but NVLS needs Hopper ([NCCL])
        device_mib=40960,  # [SMI]
    ),
    _acc(
        "nvidia-a100-80gb",
        "gpu",
        # [points]/[A100-DS] 2021 (80 GB SXM): same tensor cores as the 40 GB part.
        {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "int8": 624},
        80,  # [points]
        2039,  # [points] HBM2e 2,039 GB/s
        "nvlink",
        300,  # [A100-DS] NVLink3, as the 40 GB part
        None,  # bundled in a2-ultragpu-*
        "[A100-DS] 2021, [points]",
        nccl_arch="ampere",
        device_mib=81920,  # [SMI]
    ),
    _acc(
        "nvidia-h100-80gb",
        "gpu",
        # [H100-DS] 2022, SXM5 dense: FP32 67, TF32 494.7, FP16/BF16 989.4, INT8 1,978.9,
        # FP8 1,978.9 (the datasheet's 3,958 with sparsity, halved; [points] fp8_tflops 1979).
        {"fp32": 67, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "int8": 1978.9, "fp8": 1978.9},
        80,  # [H100-DS]
        3350,  # [H100-DS] HBM3 3.35 TB/s
        "nvlink",
        450,  # [H100-DS] NVLink4 900 GB/s bidirectional = 450 per direction
        None,  # bundled in a3-highgpu-* / a3-megagpu-*
        "[H100-DS] 2022",
        nvswitch=True,  # HGX H100: 4 NVSwitch chips, NVLS ([NCCL])
        nccl_arch="hopper",
        device_mib=81559,  # [SMI]
    ),
    _acc(
        "nvidia-h200-141gb",
        "gpu",
        # [points]/[H200-DS] 2024: the H100's tensor cores, more and faster HBM.
        {"fp32": 67, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9, "int8": 1978.9},
        141,  # [points] 141 GB HBM3e
        4800,  # [points] 4.8 TB/s
        "nvlink",
        450,  # [points] NVLink4, 450 GB/s per direction
        None,  # bundled in a3-ultragpu-8g
        "[H200-DS] 2024, [points]",
        nvswitch=True,
        nccl_arch="hopper",
        device_mib=143771,  # [SMI]
    ),
    _acc(
        "nvidia-b200",
        "gpu",
        # [points]/[B200-DS] 2024, dense: BF16/FP16 2,250, FP8/INT8 4,500, TF32 1,100, FP32 75;
        # FP4 9,000 ([B200-DS]: 144 PFLOPS FP4 with sparsity for the 8-GPU board = 18 per GPU
        # sparse, 9 dense; NVFP4 and MXFP4 run on the same units).
        {
            "fp32": 75,
            "tf32": 1100,
            "fp16": 2250,
            "bf16": 2250,
            "fp8": 4500,
            "int8": 4500,
            "fp4": 9000,
        },
        180,  # [points] 180 GB HBM3e
        8000,  # [points] 8 TB/s
        "nvlink",
        900,  # [points] NVLink5, 900 GB/s per direction
        None,  # bundled in a4-highgpu-8g
        "[B200-DS] 2024, [points]",
        nvswitch=True,
        nccl_arch="blackwell",
        device_mib=183359,  # [SMI]
    ),
    _acc(
        "nvidia-gb200",
        "gpu",
        # [BW-BRIEF] GB200 column, dense (= [GB200-NVL72]'s rack figures with sparsity / 72 / 2:
        # BF16 360 PF -> 2.5 PF per GPU, FP8 720 -> 5, FP4 1,440 -> 10, TF32 180 -> 1.25).
        {
            "fp32": 90,
            "tf32": 1250,
            "fp16": 2500,
            "bf16": 2500,
            "fp8": 5000,
            "int8": 5000,
            "fp4": 10000,
        },
        186,  # [GB200-NVL72] 13.4 TB / 72 (the Blackwell brief's 192 GB are the HBM stacks)
        8000,  # [GB200-NVL72] 576 TB/s / 72
        "nvlink",
        900,  # [GB200-NVL72] NVLink5 1.8 TB/s bidirectional = 900 GB/s per direction
        None,  # bundled in a4x-highgpu-4g
        "[GB200-NVL72] 2025, [BW-BRIEF] 2024",
        nvswitch=True,  # NVLink Switch trays: NVLS across the whole rack (multi-node NVLink)
        nccl_arch="blackwell",
        device_mib=189471,  # [SMI] "NVIDIA GB200, 189471 MiB" (nvidia-smi on GB200 trays, 2025)
    ),
    _acc(
        "amd-mi300x",
        "gpu",
        # [MI300X-DS] dense: FP16 / BF16 1,307.4, FP8 2,614.9 (OCP FP8: E4M3FNUZ / E5M2FNUZ),
        # INT8 2,614.9, TF32 653.7, FP32 (matrix) 163.4.
        {
            "fp32": 163.4,
            "tf32": 653.7,
            "fp16": 1307.4,
            "bf16": 1307.4,
            "fp8": 2614.9,
            "int8": 2614.9,
        },
        192,  # [MI300X-DS] 192 GB HBM3
        5300,  # [MI300X-DS] 5.3 TB/s
        "xgmi",
        448,  # [MI300X-DS]/[ROCM-XGMI] 7 xGMI links x 64 GB/s per direction
        None,  # bundled in Standard_ND96isr_MI300X_v5
        "[MI300X-DS] 2023-24, [ROCM-XGMI] 2025",
        nccl_arch="cdna3",  # RCCL: ring and tree over the xGMI mesh, no NVLS (no switch)
        device_mib=196288,  # [SMI] rocm-smi "VRAM Total Memory (B): 205822885888"
    ),
    _acc(
        "amd-mi325x",
        "gpu",
        # [MI325X-DS] dense: the MI300X's compute.
        {
            "fp32": 163.4,
            "tf32": 653.7,
            "fp16": 1307.4,
            "bf16": 1307.4,
            "fp8": 2614.9,
            "int8": 2614.9,
        },
        256,  # [MI325X-DS] 256 GB HBM3E
        6000,  # [MI325X-DS] 6 TB/s
        "xgmi",
        448,  # [MI325X-DS] the MI300X's 7 x 128 GB/s links: 448 GB/s per direction
        None,  # bundled in amd-mi325x-oam-8
        "[MI325X-DS] 2024, [ROCM-XGMI] 2025",
        nccl_arch="cdna3",
        device_mib=256 * 1024,  # ROCm's GPU specifications table: 256 GiB (no rocm-smi figure)
    ),
    _acc(
        "nvidia-tesla-v100",
        "gpu",
        # [V100-DS] 2018 SXM2: FP32 15.7, tensor FP16 125; INT8 via DP4A = 4 x FP32 = 62.8.
        {"fp32": 15.7, "fp16": 125, "int8": 62.8},
        16,  # [V100-DS] 16 GB HBM2
        900,  # [V100-DS] 900 GB/s
        "nvlink",
        150,  # [V100-DS] NVLink2 300 GB/s bidirectional (6 links) = 150 per direction
        2.48,  # [GCE-PRICE] 2024: attached V100, USD per GPU-hour
        "[V100-DS] 2018, [GCE-PRICE] 2024",
        nccl_arch="volta",
    ),
    _acc(
        "nvidia-tesla-t4",
        "gpu",
        # [points]/[T4-DS] 2018: FP32 8.1, FP16 65, INT8 130.
        {"fp32": 8.1, "fp16": 65, "int8": 130},
        16,  # [points]
        320,  # [points] 320 GB/s GDDR6
        "pcie",
        15.75,  # PCIe Gen3 x16 per direction (PCI-SIG 3.0 spec: 8 GT/s x 16 x 128/130 / 8)
        0.35,  # [GCE-PRICE] 2024: attached T4, USD per GPU-hour
        "[T4-DS] 2018, [points], [GCE-PRICE] 2024",
        nccl_arch="volta",  # Turing: NCCL's tables use the Volta row below compute capability 8
    ),
    _acc(
        "nvidia-tesla-p4",
        "gpu",
        # [points]/[P4-DS] 2016: FP32 5.5, INT8 21.8; no fast FP16 (GP104 FP16 is 1/64 rate).
        {"fp32": 5.5, "int8": 21.8},
        8,  # [points]
        192,  # [points] 192 GB/s GDDR5
        "pcie",
        15.75,  # PCIe Gen3 x16 per direction (PCI-SIG 3.0)
        0.60,  # [GCE-PRICE] 2024: attached P4, USD per GPU-hour
        "[P4-DS] 2016, [points], [GCE-PRICE] 2024",
        nccl_arch="volta",
    ),
    _acc(
        "tpu-v2",
        "tpu",
        {"bf16": 45},  # [points] board of 4 chips = 180 TFLOPS -> 45 per chip
        16,  # [points] 64 GB per board of 4 chips
        700,  # [TPU-CACM] 2020: 700 GB/s per chip
        "ici",
        62,  # [TPU-CACM] ICI 496 Gbit/s per link = 62 GB/s
        6.50 / 4,  # [points] 6.50 USD per board-hour (2018) / 4 chips
        "[points], [TPU-CACM] 2020",
        ici_link_bandwidth=62 * GB,  # [TPU-CACM] 496 Gbit/s per link
        ici_wrap_axis=16,  # [TPU-CACM] a v2 pod is a 16x16 2D torus; smaller slices are meshes
        ici_wrap_chips=256,
        topology_dims=2,  # [TPU-CACM] 2-D torus
    ),
    _acc(
        "tpu-v3-slice",
        "tpu",
        {"bf16": 123},  # [points] 123 bf16 TFLOPS per chip
        32,  # [points]
        900,  # [points] 900 GB/s
        "ici",
        82,  # [TPU-CACM] ICI 656 Gbit/s per link = 82 GB/s
        2.00,  # [GCE-PRICE] v3-8 (4 chips) 8.00 USD/h, 2024 -> 2.00 per chip-hour
        "[points], [TPU-CACM] 2020, [GCE-PRICE] 2024",
        ici_link_bandwidth=82 * GB,
        ici_wrap_axis=32,  # [points] a v3 pod is 1,024 chips, a 32x32 2D torus
        ici_wrap_chips=1024,
        topology_dims=2,  # [TPU-CACM] 2-D torus
    ),
    _acc(
        "tpu-v4-podslice",
        "tpu",
        {"bf16": 275, "int8": 275},  # [points] 275 bf16; [TPU-DOCS] int8 at the same rate
        32,  # [points]
        1200,  # [points] 1,200 GB/s
        "ici",
        50,  # [TPU-DOCS] 2,400 Gbps of ICI per chip over 6 links = 50 GB/s per link
        3.22,  # [GCE-PRICE] 2024, us-central2: 3.22 USD per chip-hour
        "[points], [TPU-DOCS] 2024, [GCE-PRICE] 2024",
        ici_link_bandwidth=50 * GB,
        ici_wrap_axis=4,  # [TPU-DOCS] v4 slices of 64+ chips (4x4x4 cubes) close into tori
        ici_wrap_chips=64,
        topology_dims=3,  # [TPU-DOCS] 3-D torus (AxBxC topologies)
    ),
    _acc(
        "tpu-v5-lite-podslice",
        "tpu",
        {"bf16": 197, "int8": 393},  # [points] 197 bf16, 393 int8 per chip
        16,  # [points]
        819,  # [points] 819 GB/s
        "ici",
        50,  # [points] 400 GB/s bidirectional over 4 links = 50 GB/s per link per direction
        1.20,  # [GCE-PRICE] 2024: 1.20 USD per chip-hour
        "[points], [TPU-DOCS] 2024, [GCE-PRICE] 2024, [XLA-HBM]",
        device_mib=15.75 * 1024,  # [XLA-HBM]
        ici_link_bandwidth=50 * GB,
        ici_wrap_axis=16,  # [TPU-DOCS] a v5e pod is 16x16; only the full pod wraps
        ici_wrap_chips=256,
        topology_dims=2,  # [TPU-DOCS] 2-D (AxB topologies)
    ),
    _acc(
        "tpu-v5p-slice",
        "tpu",
        {"bf16": 459, "int8": 918},  # [TPU-V5P]/[points] 459 bf16; int8 twice that
        95,  # [TPU-V5P]
        2765,  # [TPU-V5P]
        "ici",
        100,  # [TPU-V5P] 4,800 Gbps per chip / 6 links = 800 Gbps = 100 GB/s per link
        4.20,  # [GCE-PRICE] 2024: 4.20 USD per chip-hour
        "[TPU-V5P] 2024, [points], [GCE-PRICE] 2024, [XLA-HBM]",
        device_mib=95.74 * 1024,  # [XLA-HBM]
        ici_link_bandwidth=100 * GB,
        ici_wrap_axis=4,  # [TPU-V5P] like v4: slices of whole 4x4x4 cubes close into tori
        ici_wrap_chips=64,
        topology_dims=3,  # [TPU-V5P] 3-D torus
    ),
    _acc(
        "tpu-v6e-slice",
        "tpu",
        {"bf16": 918, "int8": 1836},  # [TPU-V6E]/[points]
        32,  # [TPU-V6E]
        1640,  # [TPU-V6E]
        "ici",
        112,  # [TPU-V6E] 3,584 Gbps per chip / 4 links = 896 Gbps = 112 GB/s per link
        2.70,  # [GCE-PRICE] 2025: 2.70 USD per chip-hour
        "[TPU-V6E] 2024, [points], [GCE-PRICE] 2025, [XLA-HBM]",
        device_mib=31996,  # [XLA-HBM]
        ici_link_bandwidth=112 * GB,
        ici_wrap_axis=16,  # [TPU-V6E] a v6e pod is 16x16; only the full pod wraps
        ici_wrap_chips=256,
        topology_dims=2,  # [TPU-V6E] 2-D torus
    ),
)

_A2 = "[GCE-NET] 2024, [GCE-PRICE] 2024"
_N1 = "[GCE-NET] 2024 (2 Gbps/vCPU, max 32), [GCE-PRICE] 2024 (vCPU + memory rates)"
# Prices of the 8-GPU A3 Mega/Ultra and A4 shapes: approximate on-demand us-central1 list prices
# (2025); check the current price list and override them through the catalog.
_A3 = "[GCE-GPU-NET] 2025, [GCE-PRICE] 2025 (approximate on-demand, us-central1)"
_EC2 = "[EC2-ACC] 2024, [EC2-PRICE] 2024 (on-demand, us-east-1)"
_TPU_HOST = "host price = chips x chip price [GCE-PRICE] 2024; ICI carries the gradients"

_MACHINES: tuple[MachineType, ...] = (
    # A2 with A100 40 GB: egress [GCE-NET]/[points] 24/32/50/100 Gbps; prices [GCE-PRICE] 2024.
    # A2 and N1 GPU traffic is kernel TCP through one gVNIC ([GCE-GPU-NET]).
    _machine("a2-highgpu-1g", 12, 24, 3.673385, _A2, "nvidia-tesla-a100", 1),
    _machine("a2-highgpu-2g", 24, 32, 7.346770, _A2, "nvidia-tesla-a100", 2),
    _machine("a2-highgpu-4g", 48, 50, 14.693540, _A2, "nvidia-tesla-a100", 4),
    _machine("a2-highgpu-8g", 96, 100, 29.387080, _A2, "nvidia-tesla-a100", 8),
    _machine("a2-megagpu-16g", 96, 100, 55.739504, _A2, "nvidia-tesla-a100", 16),
    # A2 ultra with A100 80 GB: same egress steps [GCE-NET]; prices [GCE-PRICE] 2024.
    _machine("a2-ultragpu-1g", 12, 24, 5.068795, _A2, "nvidia-a100-80gb", 1),
    _machine("a2-ultragpu-2g", 24, 32, 10.137590, _A2, "nvidia-a100-80gb", 2),
    _machine("a2-ultragpu-4g", 48, 50, 20.275180, _A2, "nvidia-a100-80gb", 4),
    _machine("a2-ultragpu-8g", 96, 100, 40.550360, _A2, "nvidia-a100-80gb", 8),
    # A3 high with H100: [GCE-NET] 2024 25/50/100 Gbps for 1/2/4 GPUs, 8g 4 x 200 Gbps
    # GPUDirect-TCPX NICs for GPU traffic; price of 8g [GCE-PRICE] 2024, smaller shapes prorated.
    _machine("a3-highgpu-1g", 26, 25, 88.253716 / 8, _A2 + ", prorated", "nvidia-h100-80gb", 1),
    _machine("a3-highgpu-2g", 52, 50, 88.253716 / 4, _A2 + ", prorated", "nvidia-h100-80gb", 2),
    _machine("a3-highgpu-4g", 104, 100, 88.253716 / 2, _A2 + ", prorated", "nvidia-h100-80gb", 4),
    _machine(
        "a3-highgpu-8g", 208, 800, 88.253716, _A3, "nvidia-h100-80gb", 8, nics=4, transport="tcpx"
    ),
    # [GCE-GPU-NET]: 8 x 200 Gbps with GPUDirect-TCPXO; price [GCE-PRICE] 2025.
    _machine(
        "a3-megagpu-8g", 208, 1600, 101.7, _A3, "nvidia-h100-80gb", 8, nics=8, transport="tcpxo"
    ),
    # [GCE-GPU-NET]: 8 x 400 Gbps ConnectX-7, GPUDirect-RDMA over RoCE; price [GCE-PRICE] 2025.
    _machine(
        "a3-ultragpu-8g", 224, 3200, 84.8, _A3, "nvidia-h200-141gb", 8, nics=8, transport="rdma"
    ),
    _machine("a4-highgpu-8g", 224, 3200, 120.0, _A3, "nvidia-b200", 8, nics=8, transport="rdma"),
    # [GCE-A4X]: a GB200 NVL72 rack is 18 of these VMs (4 GPUs each) in one 72-GPU NVLink domain;
    # 4 x 400 Gbps ConnectX-7 (RoCE) per VM between racks. Price: none published on demand;
    # assumed half of a4-highgpu-8g's (the same B200 silicon per GPU): override it through the
    # catalog with the price you pay.
    _machine(
        "a4x-highgpu-4g",
        140,
        1600,
        120.0 / 2,
        "[GCE-A4X] 2025; price assumed (a4-highgpu-8g's per GPU)",
        "nvidia-gb200",
        4,
        nics=4,
        transport="rdma",
        nvlink_domain=72,
    ),
    # AWS hosts ([EC2-ACC], [EC2-PRICE]); GPU traffic over EFA. Not GKE defaults: a job names
    # them with spec.machineType.
    _machine(
        "p4d.24xlarge",
        96,
        400,
        32.7726,
        _EC2,
        "nvidia-tesla-a100",
        8,
        nics=4,
        transport="efa",
        efa_generation=1,
    ),
    _machine(
        "p4de.24xlarge",
        96,
        400,
        40.9657,
        _EC2,
        "nvidia-a100-80gb",
        8,
        nics=4,
        transport="efa",
        efa_generation=1,
    ),
    _machine(
        "p5.48xlarge",
        192,
        3200,
        98.32,
        _EC2,
        "nvidia-h100-80gb",
        8,
        nics=32,
        transport="efa",
        efa_generation=2,
    ),
    # AMD hosts, RCCL over the xGMI mesh inside, RDMA over one 400 Gb/s NIC per GPU between hosts.
    # Not GKE shapes: a job names them with spec.machineType, or the pool's instance-type label
    # (AKS: node.kubernetes.io/instance-type) does. [ND-MI300X]: 8 x 400 Gb/s InfiniBand NDR.
    # Price: Azure's on-demand rate was not found in a stored source; assumed 6.00 USD per
    # GPU-hour (the rate Oracle announced for its BM.GPU.MI300X.8, 2024): override it through the
    # catalog with the price you pay.
    _machine(
        "Standard_ND96isr_MI300X_v5",
        96,
        3200,
        8 * 6.00,
        "[ND-MI300X] 2024; price assumed (6.00 USD per GPU-hour)",
        "amd-mi300x",
        8,
        nics=8,
        transport="rdma",
    ),
    # A generic 8 x MI325X OAM server (AMD's universal baseboard, as Dell / Supermicro / Gigabyte
    # build it), one 400 Gb/s RDMA NIC (InfiniBand or RoCE) per GPU as on the MI300X platforms;
    # 2 x 64-core EPYC (256 vCPUs) assumed. No list price: assumed the MI300X host's per GPU;
    # override it through the catalog.
    _machine(
        "amd-mi325x-oam-8",
        256,
        3200,
        8 * 6.00,
        "[MI325X-DS] 2024 (8-GPU platform); NICs, vCPUs and price assumed",
        "amd-mi325x",
        8,
        nics=8,
        transport="rdma",
    ),
    # N1 reducer hosts: [points] n1-highcpu-16 32 Gbps (Vertex AI Reduction Server notebook).
    _machine("n1-highcpu-16", 16, 32, 0.566789, _N1),  # 16 vCPU, 14.4 GB
    _machine("n1-highcpu-32", 32, 32, 1.133578, _N1),  # 32 vCPU, 28.8 GB
    _machine("n1-highcpu-64", 64, 32, 2.267156, _N1),  # 64 vCPU, 57.6 GB
    # N1 hosts for attached T4/V100/P4 (GPU price added per GPU from the accelerator entry).
    _machine("n1-standard-4", 4, 8, 0.189999, _N1),  # 4 vCPU, 15 GB
    _machine("n1-standard-8", 8, 16, 0.379998, _N1),  # 8 vCPU, 30 GB
    _machine("n1-standard-16", 16, 32, 0.759996, _N1),  # 16 vCPU, 60 GB
    _machine("n1-standard-32", 32, 32, 1.519992, _N1),  # 32 vCPU, 120 GB
    _machine("n1-standard-64", 64, 32, 3.039984, _N1),  # 64 vCPU, 240 GB
    # TPU hosts: 4 chips per host (v2-8, ct3p, ct4p), 1/4/8 for v5e (ct5lp); the NIC figure is
    # the host's data-center network (DCN): a slice's gradients travel over ICI, a multislice
    # job's across slices over this NIC ("dcn": NIC_EFFICIENCY of line rate).
    # [points] v5e host: 8 chips with 2 x 100 Gbps NICs; others assumed 100 Gbps.
    _machine("tpu-v2-host", 96, 100, 6.50, _TPU_HOST + " ([points] 2018)", "tpu-v2", 4),
    _machine("ct3p-hightpu-4t", 96, 100, 4 * 2.00, _TPU_HOST, "tpu-v3-slice", 4),
    _machine("ct4p-hightpu-4t", 240, 100, 4 * 3.22, _TPU_HOST, "tpu-v4-podslice", 4, 1, "dcn"),
    _machine("ct5lp-hightpu-1t", 24, 50, 1.20, _TPU_HOST, "tpu-v5-lite-podslice", 1, 1, "dcn"),
    _machine(
        "ct5lp-hightpu-4t", 112, 100, 4 * 1.20, _TPU_HOST, "tpu-v5-lite-podslice", 4, 1, "dcn"
    ),
    _machine(
        "ct5lp-hightpu-8t", 224, 200, 8 * 1.20, _TPU_HOST, "tpu-v5-lite-podslice", 8, 2, "dcn"
    ),
    # v5p / v6e hosts; the NIC is the data-center network (DCN) a multislice job crosses between
    # slices. [TPU-V5P]/[TPU-V6E] give host network totals, not per chip: 200 Gbps per v5p and
    # 1-/4-chip v6e host, 4 x 100 Gbps per 8-chip v6e host (assumed to be the figures in force).
    _machine("ct5p-hightpu-4t", 208, 200, 4 * 4.20, _TPU_HOST, "tpu-v5p-slice", 4, 1, "dcn"),
    _machine("ct6e-standard-1t", 44, 200, 2.70, _TPU_HOST, "tpu-v6e-slice", 1, 1, "dcn"),
    _machine("ct6e-standard-4t", 180, 200, 4 * 2.70, _TPU_HOST, "tpu-v6e-slice", 4, 1, "dcn"),
    _machine("ct6e-standard-8t", 180, 400, 8 * 2.70, _TPU_HOST, "tpu-v6e-slice", 8, 4, "dcn"),
)

# The machine GKE gives an accelerator type and per-host count when the spec names none.
_DEFAULT_MACHINES: dict[str, dict[int, str]] = {
    "nvidia-tesla-a100": {
        1: "a2-highgpu-1g",
        2: "a2-highgpu-2g",
        4: "a2-highgpu-4g",
        8: "a2-highgpu-8g",
        16: "a2-megagpu-16g",
    },
    "nvidia-a100-80gb": {
        1: "a2-ultragpu-1g",
        2: "a2-ultragpu-2g",
        4: "a2-ultragpu-4g",
        8: "a2-ultragpu-8g",
    },
    "nvidia-h100-80gb": {
        1: "a3-highgpu-1g",
        2: "a3-highgpu-2g",
        4: "a3-highgpu-4g",
        8: "a3-highgpu-8g",
    },
    "nvidia-h200-141gb": {8: "a3-ultragpu-8g"},
    "nvidia-b200": {8: "a4-highgpu-8g"},
    "nvidia-gb200": {4: "a4x-highgpu-4g"},
    "amd-mi300x": {8: "Standard_ND96isr_MI300X_v5"},
    "amd-mi325x": {8: "amd-mi325x-oam-8"},
    # Attached GPUs: 8 vCPUs per GPU, the usual GKE sizing for data loading.
    "nvidia-tesla-v100": {
        1: "n1-standard-8",
        2: "n1-standard-16",
        4: "n1-standard-32",
        8: "n1-standard-64",
    },
    "nvidia-tesla-t4": {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"},
    "nvidia-tesla-p4": {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"},
    "tpu-v2": {4: "tpu-v2-host"},
    "tpu-v3-slice": {4: "ct3p-hightpu-4t"},
    "tpu-v4-podslice": {4: "ct4p-hightpu-4t"},
    "tpu-v5-lite-podslice": {1: "ct5lp-hightpu-1t", 4: "ct5lp-hightpu-4t", 8: "ct5lp-hightpu-8t"},
    "tpu-v5p-slice": {4: "ct5p-hightpu-4t"},
    "tpu-v6e-slice": {1: "ct6e-standard-1t", 4: "ct6e-standard-4t", 8: "ct6e-standard-8t"},
}


@dataclass(frozen=True)
class Catalog:
    """Accelerators and machine types by name; immutable, cheap to copy with overrides."""

    accelerators: Mapping[str, Accelerator]
    machines: Mapping[str, MachineType]
    default_machines: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    # PoolProfile measurements by (machine type, accelerator): plans on such hosts use the
    # profiled ceilings (engine.profiled). Composed over the catalog's layers by
    # planning.catalog.with_pool_profiles; empty: every pool on the catalog's figures.
    profiles: Mapping[tuple[str, str], PoolMeasurement] = field(default_factory=dict)

    def accelerator(self, name: str) -> Accelerator:
        try:
            return self.accelerators[name]
        except KeyError:
            raise UnknownHardwareError("accelerator", name, self.accelerators) from None

    def machine(self, name: str) -> MachineType:
        try:
            return self.machines[name]
        except KeyError:
            raise UnknownHardwareError("machine type", name, self.machines) from None

    def default_machine(self, accelerator: str, count: int) -> MachineType:
        """The machine type a node pool of ``count`` x ``accelerator`` per host runs on."""
        self.accelerator(accelerator)
        shapes = self.default_machines.get(accelerator, {})
        if count not in shapes:
            known = ", ".join(str(c) for c in sorted(shapes)) or "none"
            raise UnknownHardwareError(
                f"host shape for {accelerator} (accelerators per host; known: {known})",
                str(count),
                [],
            )
        return self.machine(shapes[count])

    def host_shapes(self, accelerator: str) -> tuple[int, ...]:
        """Accelerators per host that ``accelerator`` comes in: the counts of its default
        machines (8 for a2-highgpu-8g, 16 for a2-megagpu-16g)."""
        return tuple(sorted(self.default_machines.get(accelerator, {})))

    def replica_hosts(
        self, accelerator: str, per_replica: int, hosts: int | None = None
    ) -> tuple[int, int]:
        """(accelerators per host, hosts) of a serving replica of ``per_replica`` accelerators:
        ``hosts`` of them when given (each a host shape), else one host when ``per_replica`` is a
        host shape, else the fewest hosts of the largest shape that divides it. Raises
        UnknownHardwareError with the shapes the catalog has."""
        shapes = self.host_shapes(accelerator)
        listed = ", ".join(map(str, shapes)) or "no host shape"
        if hosts is not None:
            if per_replica % hosts == 0 and per_replica // hosts in shapes:
                return per_replica // hosts, hosts
            raise UnsupportedReplicaError(
                f"{per_replica} x {accelerator} over {hosts} hosts is "
                f"{per_replica / hosts:g} per host; {accelerator} comes {listed} per host in "
                "the catalog"
            )
        if per_replica in shapes:
            return per_replica, 1
        for shape in sorted(shapes, reverse=True):
            if per_replica % shape == 0:
                return shape, per_replica // shape
        raise UnsupportedReplicaError(
            f"{per_replica} x {accelerator} is no whole number of hosts: {accelerator} comes "
            f"{listed} per host in the catalog (perReplica a multiple of one)"
        )

    def profile(self, host: Host) -> PoolMeasurement | None:
        """The profile a plan on ``host`` uses: its machine type's, if measured on the same
        accelerator; None: the catalog's figures."""
        return self.profiles.get((host.machine.name, host.accelerator.name))

    def host(self, accelerator: str, count: int, machine_type: str | None = None) -> Host:
        """Resolve a worker host; an explicit machine type must fit ``count`` accelerators."""
        acc = self.accelerator(accelerator)
        machine = (
            self.default_machine(accelerator, count)
            if machine_type is None
            else self.machine(machine_type)
        )
        if machine.accelerator is not None and machine.accelerator != accelerator:
            raise CatalogOverrideError(
                f"machine type {machine.name} carries {machine.accelerator}, not {accelerator}"
            )
        if machine.accelerator is not None and count > machine.accelerator_count:
            raise CatalogOverrideError(
                f"machine type {machine.name} has {machine.accelerator_count} x "
                f"{machine.accelerator}, fewer than the {count} asked for"
            )
        return Host(machine=machine, accelerator=acc, count=count)


DEFAULT_CATALOG = Catalog(
    accelerators={a.name: a for a in _ACCELERATORS},
    machines={m.name: m for m in _MACHINES},
    default_machines=_DEFAULT_MACHINES,
)
