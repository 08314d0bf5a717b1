"""Every efficiency and latency constant of the engine, with where its value comes from.

Calibrated constants are derived from the published points in ../shared/calibration/points.yaml
(a copy ships in ``calibration/points.yaml``); ``ringmaster.calibration.derive_constants``
recomputes each one from the points and a test checks that the values below match it, so a
constant cannot drift from its evidence. Constants with no published point are marked
*assumed* or *borrowed* and say why; docs/engine.md tabulates all of them.
"""

from __future__ import annotations

from ringmaster.engine.units import MIB, US

# --- links -------------------------------------------------------------------------------------

# Achieved fraction of NVLink line rate for a large all-reduce. Calibrated: 8 x A100 on NVLink
# reach busbw 230 GB/s of a 300 GB/s per-direction line rate at 8 GiB (nccl-tests issues 149,
# 175), which still carries the ring's fill at the link's rate (RING_FILL_LINK_STEPS steps,
# 0.14 ms of 65 ms): without it 230.4 GB/s.
NVLINK_EFFICIENCY = 0.7680  # = 8 GiB x 1.75 / (8 GiB x 1.75 / 230 GB/s - fill) / 300

# Achieved fraction of a host NIC's line rate for a large inter-host all-reduce. Calibrated as the
# mean of three published ratios: 12.2 / 12.5 GB/s on 100 Gbps NICs (nccl-tests issue 29) and
# 30.6 and 31.4 of 32 Gbps over TCP on GCP (nccl issue 209): 0.976, 0.956, 0.981 -> 0.971.
NIC_EFFICIENCY = 0.971

# PCIe (T4, P4 hosts): no published point; borrowed from NVLink (both are serial point-to-point
# links whose packet and encoding overheads cost about a quarter of line rate).
PCIE_EFFICIENCY = NVLINK_EFFICIENCY

# TPU ICI: no published point; borrowed from NVLink, the nearest chip-to-chip link measured.
ICI_EFFICIENCY = NVLINK_EFFICIENCY

# AMD Infinity Fabric (xGMI) under RCCL: achieved fraction of a GPU's xGMI line rate (7 links x
# 64 GB/s = 448 GB/s per direction on the 8-GPU mesh) for a large ring all-reduce. Fitted on
# 8 x MI300X (Azure ND MI300X v5, RCCL 2.22.3, all_reduce_perf in place): busbw 316.82 GB/s at
# 8 GiB (Azure/AI-benchmarking-guide Azure_Results/ND_MI300X_v5_results.md, as in the
# yosoyjay fork @ a8263ef), less the ring's fill at the link's rate (RING_FILL_LINK_STEPS, 0.1
# ms of 47.4 ms) -> 0.7084; the 8 MiB - 4 GiB sizes of the same run are checked
# (calibration.collectives, calibration.link_fill). AMD's own figure agrees: about 48 of 64 GB/s
# per link usable (0.75; ROCm blogs, "Understanding RCCL Bandwidth and xGMI Performance on AMD
# Instinct MI300X", 2025).
XGMI_EFFICIENCY = 0.7084  # = 8 GiB x 1.75 / (8 GiB x 1.75 / 316.82 GB/s - fill) / 448

# NVLink SHARP (NVLS): the NVSwitch reduces, so each GPU sends and receives the message once and
# algbw = achieved fraction x NVLink line rate. Fitted on 8 x H100: busbw 480 GB/s = algbw 274.3
# x 2(8-1)/8, of a 450 GB/s line rate (nccl-tests issue 212, nccl issue 1455), at 4 GiB less
# NVLS's pipeline fill (a 128 KiB chunk: 0.23 ms of 15.7 ms) -> 0.6188; the 5-,
# 6- and 7-GPU figures of the same thread are checked, not fitted. NCCL's own model
# (tuning.cc nvlsEfficiency) says 0.85 of its per-channel estimate for Hopper.
NVLS_EFFICIENCY = 0.6188  # = 4 GiB / (4 GiB x 1.75 / 480 GB/s - fill) / 450

# NVLS on Blackwell (NVLink 5, 900 GB/s per direction): the NVSwitch trays of a GB200 NVL72 rack
# reduce for all 72 GPUs of the domain (multi-node NVLink). Fitted on one full-rack run: 72 x
# GB200, busbw 839.16 GB/s = algbw 425.49 at 4 GiB (coreweave/nccl-tests pull request 43, the
# NVL72 Slurm example's output, 2025-02), less NVLS's pipeline fill (0.23 ms of 10.1 ms) ->
# 0.4783 of the 900 GB/s line rate. Hopper's fraction (0.62) would put it 29 % high. Checked on
# 8 x B200 (one HGX host, "830+" GB/s busbw, nccl issue 1807), calibration.collectives.
NVLS_EFFICIENCY_BLACKWELL = 0.4783  # = 4 GiB / (4 GiB x 142/72 / 839.16 GB/s - fill) / 900

# NVLSTree (several NVSwitch hosts): NVLS reduces inside each host while a tree crosses the
# network, and the in-host phases do not reach what one host's NVLS reaches alone (NCCL gives
# the network's proxies and the tree's channels part of the NVLS channels: tuning.cc
# (nChannels - 1) / nChannels and the per-channel NVLSTree caps). Fitted as the ratio of a
# two-host NVLSTree algbw to one host's NVLS algbw, on 2 x 8 H100 with 8 x 400 Gbps RoCE: busbw
# 430 GB/s = algbw 229.3 (x 2(16-1)/16) against 480 / 1.75 = 274.3 on one host (nccl issue 1221,
# NCCL 2.19), both algbw without their pipeline fill. Checked on 2 x p5.48xlarge
# (calibration.collectives).
NVLS_TREE_SHARE = 0.8288  # = (430 / 1.875 less fill) / (480 / 1.75 less fill)

# AWS Elastic Fabric Adapter: achieved fraction of the EFAs' line rate for NCCL through the
# aws-ofi-nccl plugin (SRD over libfabric, GPUDirect), by EFA generation (MachineType
# .efa_generation). Generation 1 (p4d / p4de) is fitted on today's software: the two-host run of
# 2 x p4de.24xlarge (4 x 100 Gbps EFA = 50 GB/s), aws-ofi-nccl 1.8.1 and NCCL 2.20.3
# (aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md, commit
# 88c2e71b, 2024-04-19): NCCL's Tree on two hosts carries M over each host's EFAs, busbw 76.79
# and 78.33 GB/s at 1 and 2 GiB = algbw 40.95 and 41.78, less the tree's pipeline fill, over
# 50 GB/s x NCCL_TREE_FRACTION -> 0.924. The 2021 software (NCCL 2.9.9, nccl issue 527) reached
# 0.62 on the same EFAs: those rows are kept, out of reach (calibration.collectives).
EFA_EFFICIENCY = 0.9241  # = mean(40.95, 41.78 GB/s algbw without fill) / (50 GB/s x 0.92)
# Later generations (p5 EFA v2, p5en v3, p6 v4): no NIC-bound published run was found (the
# 2 x p5 run is bound by NVLSTree's in-host phases, so it bounds the fraction from below at
# 0.65): assumed the generation-1 fraction under the same software, checked on 2 x p5.
EFA_EFFICIENCY_BY_GENERATION: dict[int, float] = {1: EFA_EFFICIENCY}


def efa_efficiency(generation: int) -> float:
    """EFA's achieved fraction of line rate for ``generation`` (EFA_EFFICIENCY where the
    generation has no fit of its own)."""
    return EFA_EFFICIENCY_BY_GENERATION.get(generation, EFA_EFFICIENCY)


def nvls_efficiency(arch: str) -> float:
    """NVLS's achieved fraction of the NVLink line rate by NCCL GPU generation: Blackwell's
    fitted on an NVL72 rack, Hopper's on an HGX H100 host."""
    return NVLS_EFFICIENCY_BLACKWELL if arch == "blackwell" else NVLS_EFFICIENCY


# What kernel TCP loses when several GPUs share one gVNIC: NCCL's socket transport bounces every
# byte through host memory with a few CPU threads and flows (NCCL_SOCKET_NTHREADS x
# NCCL_NSOCKS_PERTHREAD), so 8 GPUs on one NIC reach a fraction of what one GPU's flows reach.
# Fitted on 4 GCP VMs x 8 V100 on 32 Gbps (NCCL 2.4.7, 128 MiB+): busbw 22.2 / 22.4 / 22.9 Gbps,
# a ring bound by the NIC, so 22.5 / (32 x NIC_EFFICIENCY) (nccl issue 209, cswinter's table);
# the 2 x 8 row of the same table is checked (calibration.collectives). GPUDirect-TCPX / TCPXO
# and RDMA move GPU memory to the NIC directly and do not pay it.
TCP_SHARED_NIC_EFFICIENCY = 0.724  # = mean(22.2, 22.4, 22.9) / (32 x 0.971)

# GPUDirect-TCPX / TCPXO keep NIC_EFFICIENCY. Checked, not fitted: a published 2 x a3-megagpu-8g
# run (TCPXO, GCP's NCCL profile: Ring / Tree, Simple) moves algbw 185.3 GB/s of 200 on the
# margin (4 -> 8 GiB), so TCPXO reaches at least 0.93 of line rate; the engine's tree is bound by
# NVLink there, so the run bounds the NIC fraction rather than measuring it
# (calibration.collectives, lessizzmore/create-a3mega-ztan-fork ztan-NCCL-test-result).

# --- latencies (alpha) -------------------------------------------------------------------------

# NCCL's tuning model, ring algorithm, Simple protocol (nccl src/graph/tuning.cc): a fixed base
# per collective plus a latency per step that depends on the link the step crosses.
NCCL_BASE_LATENCY = 8.4 * US
NVLINK_HOP_LATENCY = 3.4 * US
PCIE_HOP_LATENCY = 5.7 * US
# The network hop of ring/Simple: 14 us in NCCL's current tuning.cc (commit 5067397, 2026); the
# calibration point quotes 9.6 us from an older NCCL. The current table wins (NCCL_HW_LATENCY_US).
NETWORK_HOP_LATENCY = 14.0 * US
# TPU ICI hop: no published point; borrowed from NVLink's hop.
ICI_HOP_LATENCY = NVLINK_HOP_LATENCY
# xGMI hop under RCCL: no published small-size point; borrowed from NVLink's hop (both are
# point-to-point GPU links with a proxy-free peer-to-peer transport).
XGMI_HOP_LATENCY = NVLINK_HOP_LATENCY
# All-to-all (ncclAllToAll, grouped send / receive): each further peer adds a p2p step. No
# published small-size alltoall_perf table was found to fit it on; borrowed from NVLink's ring
# step (the same proxy-and-flag handshake per peer), and checked in calibration.moe.
ALLTOALL_PEER_LATENCY = NVLINK_HOP_LATENCY


def intra_hop_latency(link: str) -> float:
    """One NCCL (RCCL) step across a host's GPU link: NVLink, xGMI, else PCIe."""
    return {"nvlink": NVLINK_HOP_LATENCY, "xgmi": XGMI_HOP_LATENCY}.get(link, PCIE_HOP_LATENCY)


# A data-center-network hop between TPU slices (multislice): no published point; borrowed from
# NCCL's network hop (both are TCP through a host NIC).
DCN_HOP_LATENCY = NETWORK_HOP_LATENCY

# --- NCCL's tuner (nvidia/nccl src/graph/tuning.cc, commit 5067397), copied verbatim --------------
# Algorithm x protocol, protocols in NCCL's order (LL, LL128, Simple), microseconds.
NCCL_BASE_LATENCY_US: dict[str, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0),
    "nvls_tree": (0.0, 0.0, 0.0),
}
NCCL_HW_LATENCY_US: dict[str, dict[str, tuple[float, float, float]]] = {
    "nvlink": {
        "tree": (0.6, 1.25, 4.0),
        "ring": (0.6, 1.9, 3.4),
        "nvls": (0.0, 0.0, 25.0),
        "nvls_tree": (0.0, 0.0, 25.0),
    },
    # RCCL over xGMI: no table of its own is modelled; NVLink's ring and tree rows borrowed (RCCL
    # keeps NCCL's tuner), and no NVLS (RCCL has no NVLS algorithm: NCCL_ALGO=NVLS does not exist).
    "xgmi": {
        "tree": (0.6, 1.25, 4.0),
        "ring": (0.6, 1.9, 3.4),
        "nvls": (0.0, 0.0, 0.0),
        "nvls_tree": (0.0, 0.0, 0.0),
    },
    "pcie": {
        "tree": (1.0, 1.9, 4.0),
        "ring": (1.0, 2.5, 5.7),
        "nvls": (0.0, 0.0, 0.0),
        "nvls_tree": (0.0, 0.0, 0.0),
    },
    "net": {
        "tree": (5.0, 8.5, 14.0),
        "ring": (2.7, 4.0, 14.0),
        "nvls": (0.0, 0.0, 18.0),
        "nvls_tree": (0.0, 0.0, 20.9),
    },
}
# llMaxBws, GB/s: one host by GPU generation; several hosts by CPU (Intel row; 2 hosts, more).
# "cdna3" (MI300X / MI325X under RCCL): borrowed from NCCL's Ampere row (no RCCL figure modelled).
NCCL_LL_MAX_BW_ONE_HOST_GBPS = {
    "volta": 39.0,
    "ampere": 87.7,
    "hopper": 141.0,
    "blackwell": 282.0,
    "cdna3": 87.7,
}
NCCL_LL_MAX_BW_TWO_HOSTS_GBPS = 39.0
NCCL_LL_MAX_BW_MANY_HOSTS_GBPS = 20.4
# "Various model refinements": LL moves 8 bytes of data per 16 (half), LL128 120 of 128; the tree
# all-reduce reaches 0.92 of its link; tree LL is 1/3.8 of it.
NCCL_RING_LL_FRACTION = 0.5
NCCL_RING_LL128_FRACTION = 0.92
NCCL_TREE_FRACTION = 0.92
NCCL_TREE_LL_FRACTION = 1.0 / 3.8
NCCL_TREE_LL128_FRACTION = 120.0 / 128.0
# getNetOverhead: 1 us per network step on Intel hosts, three times that for Simple.
NCCL_NET_OVERHEAD_US = 1.0
# "Plateau effect of ring": multi-host ring/Simple all-reduce latency x1.4 (Ampere and newer),
# x1.9 (older), once each channel's share per rank reaches 64 bytes.
NCCL_RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4, "cdna3": 1.4}
# Channels NCCL opens (for the plateau threshold only). Assumed: 16, typical of 8-GPU hosts.
NCCL_ASSUMED_CHANNELS = 16
# treeCorrectionFactor[protocol][log2(bytes / 64)] for 64 B .. 256 MiB: trees are slower than
# their model at medium sizes.
NCCL_TREE_CORRECTION: tuple[tuple[float, ...], ...] = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5,
     0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6,
     0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5,
     0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)  # fmt: skip

# --- NCCL's pipeline: chunk sizes (enqueue.cc calcCollChunking) and the fill they cost ---------
# A collective streams each channel's share in steps of a fixed buffer slot: NCCL_STEPS slots per
# connection (src/include/device.h NCCL_STEPS 8) of the Simple protocol's buffer (src/init.cc
# DEFAULT_BUFFSIZE 4 MiB), so a 512 KiB step. The ring all-reduce moves chunks of
# ALLREDUCE_CHUNKSTEPS = NCCL_STEPS / 2 steps (src/include/collectives.h) and a loop holds
# nChannels x nRanks chunks (enqueue.cc: loopSize = nChannels x nchunksPerLoop x chunkSize); below
# one loop each chunk (and so each step) is the message's share. The tree's chunk is one step. NVLS
# and NVLSTree use their own small chunks (src/transport/nvls.cc NVLS_CHUNKSIZE 128 KiB; the tree's
# at most 64 KiB on 4+ hosts), halved for small messages (enqueue.cc, the concurrentOps rules).
NCCL_STEPS = 8
NCCL_SIMPLE_BUFFER_BYTES = 4 * MIB
NCCL_STEP_BYTES = NCCL_SIMPLE_BUFFER_BYTES / NCCL_STEPS
NCCL_RING_CHUNK_STEPS = NCCL_STEPS // 2
NCCL_NVLS_CHUNK_BYTES = 128 * 1024
NCCL_NVLS_TREE_CHUNK_BYTES_MANY_HOSTS = 64 * 1024

# Pipeline fill: the first step of a collective crosses every stage of the pipeline (GPU chain,
# proxies, NICs) before the last stage is busy, and the last step drains through them; NCCL's own
# tuner leaves it out ("waiting for proper chunk modeling", tuning.cc). Through the network each
# channel moves its step at about the same rate whatever the NICs' sum (a channel's step crosses
# one 100 Gbps EFA NIC on 2 x p4de and on 2 x p5 alike), so the fill is a time proportional to
# the step: seconds per byte of step, charged on collectives across hosts and on NVLS's chunks
# (a ring inside one NVLink / xGMI domain pays RING_FILL_LINK_STEPS instead). Fitted on one
# published by-size curve, 2 x p4de.24xlarge (NCCL's Tree, 512 KiB steps): the line through its
# two largest sizes meets M = 0 at 1.03 ms, less the model's latency
# (aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md). Checked on
# GPUDirect-TCPXO, 2 x p5's NVLSTree chunks and Azure's 8 x H100 / H200 NVLS curves
# (calibration.collectives, calibration.link_fill).
PIPELINE_FILL_SECONDS_PER_STEP_BYTE = 1.7845e-9  # = 0.936 ms / 512 KiB

# A ring inside one NVLink or xGMI domain has no proxy or NIC in its pipeline: its fill is a few
# of its steps, each at the link's per-channel rate (achieved link bandwidth / channels), so it
# shrinks as links get faster (engine.nccl_pipeline). Fitted on one published by-size curve,
# 8 x A100 on NVLink 3 (Azure's ND A100 v4, NCCL 2.18.5): the least-squares line through its
# full-step sizes (256 MiB - 8 GiB) meets M = 0 at 0.17 ms; less the engine's latency, that is
# this many steps at the run's own plateau (232 GB/s / 16 channels): 0.14 ms, against the 0.94
# ms the network's fill charged. Checked on 8 x MI300X xGMI (RCCL) and on the curve's other
# sizes (calibration.link_fill).
RING_FILL_LINK_STEPS = 3.178  # steps; 0.144 ms on the A100's 233 GB/s, 0.096 ms on an H100's

# --- compute -----------------------------------------------------------------------------------

# Sustained fraction of the dense datasheet peak. Calibrated on the MLPerf Inference v0.7
# ResNet-50 offline results, where the batch is unbounded and throughput -> peak * eff / FLOPs:
# T4 INT8 6,035.57 img/s x 8.2 GFLOP / 130 TOPS = 0.381; A100 37,479.5 x 8.2 / 624 = 0.493;
# the geometric mean 0.433 leaves each point within 14%. Used for training too (the points hold
# no training figure); a measured ``computeSecondsPerStep`` replaces it.
COMPUTE_EFFICIENCY = 0.433

# Fixed per-batch overhead of an inference request (kernel launches, host<->device copies,
# framework). Calibrated: MLPerf v0.7 A100 single-stream ResNet-50 p90 latency 0.507 ms minus the
# roofline time of one image at COMPUTE_EFFICIENCY (8.2 GFLOP / (624 TOPS x 0.433) = 0.030 ms).
INFERENCE_OVERHEAD_SECONDS = 0.477e-3

# Achieved fraction of HBM/GDDR bandwidth. Assumed, not calibrated: the three inference points
# are compute-bound. 0.85 is the typical fraction that stream-style kernels reach on HBM2.
MEMORY_EFFICIENCY = 0.85

# --- overlap of communication with backward computation -----------------------------------------

# The backward pass costs about twice the forward pass (Kaplan et al. 2020, "Scaling Laws for
# Neural Language Models": 2N forward + 4N backward FLOPs per token), so 2/3 of a step.
BACKWARD_FRACTION = 2.0 / 3.0

# Gradients are all-reduced in buckets as backward produces them; the last bucket cannot overlap.
# 25 MiB is PyTorch DistributedDataParallel's default bucket_cap_mb (Horovod's fusion buffer,
# 64 MiB, behaves alike); DDP makes the first bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES) so
# that communication starts early.
GRADIENT_BUCKET_BYTES = 25 * MIB
FIRST_BUCKET_BYTES = 1 * MIB

# What overlap costs. NCCL runs one thread block per channel on its own SM, so a collective that
# hides behind backward still takes that share of the SMs (and of HBM bandwidth) from it: 16
# channels on a 108-SM A100 is about 15%. Assumed from NCCL's channel count (NCCL_MIN_NCHANNELS
# docs) and the SM count; no point in points.yaml measures it.
OVERLAP_INTERFERENCE = 0.15

# Synchronous data parallelism waits for the slowest rank every step: with per-step compute
# varying by a coefficient of variation cv, the expected maximum of N ranks is about
# mean x (1 + cv x sqrt(2 ln N)) (extreme value of N normals). cv = 0.03 is assumed, the few
# percent of step-time jitter reported for GPU training (Chen et al. 2016, "Revisiting
# Distributed Synchronous SGD"; Dean & Barroso 2013, "The Tail at Scale"). It is what makes one
# 8-GPU host scale by about 93% rather than 99.9% when NVLink hides the all-reduce.
COMPUTE_JITTER_CV = 0.03

# --- the reduction server's own machine -----------------------------------------------------------

# Bytes of gradient one vCPU sums per second. fp32: an AVX2 add streams two inputs and one output
# at a few GB/s per core; bf16/fp16 have no native CPU arithmetic before AVX512-BF16/FP16, so each
# element is widened, added and narrowed: about 4x slower per byte. Assumed (BytePS
# docs/rationale.md: summation on CPUs is memory-bound; no published rate in points.yaml).
REDUCER_SUM_BYTES_PER_VCPU = {"fp32": 4.0e9, "bf16": 1.0e9, "fp16": 1.0e9}
# Bytes of TCP traffic (in + out) one vCPU moves per second: the kernel's per-packet cost, about
# 10 Gbps per vCPU with segmentation offload. Assumed (a common Linux rule of thumb).
REDUCER_TCP_BYTES_PER_VCPU = 1.25e9

# --- strategy choice and serving policy ---------------------------------------------------------

# Auto picks the reduction server only when it is more than 2% faster than the ring (issue 4):
# below that the extra machines and moving parts are not worth it.
RING_PREFERENCE_TOLERANCE = 0.02

# The highest utilisation a serving replica is sized for, whatever the queueing model allows:
# Knative's (and so KServe's) default autoscaling target is 70% of a replica's capacity.
MAX_SERVING_UTILISATION = 0.70

# The percentile the latency objective names.
LATENCY_PERCENTILE = 0.99
