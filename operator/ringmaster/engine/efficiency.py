"""Every efficiency and latency constant of the engine, with where its value comes from.

Calibrated constants are derived from the published points in ../shared/calibration/points.yaml
(a copy ships in ``engine/data/points.yaml``); ``ringmaster.calibration.derive_constants``
recomputes each one from the points and a test checks that the values below match it, so a
constant cannot drift from its evidence. Constants with no published point are marked
*assumed* or *borrowed* and say why; docs/engine.md tabulates all of them.
"""

from __future__ import annotations

from ringmaster.engine.units import MIB, US

# --- links -------------------------------------------------------------------------------------

# Achieved fraction of NVLink line rate for a large all-reduce. Calibrated: 8 x A100 on NVLink
# reach busbw 230 GB/s of a 300 GB/s per-direction line rate (nccl-tests issues 149, 175).
NVLINK_EFFICIENCY = 0.767  # = 230 / 300

# Achieved fraction of a host NIC's line rate for a large inter-host all-reduce. Calibrated as the
# mean of three published ratios: 12.2 / 12.5 GB/s on 100 Gbps NICs (nccl-tests issue 29) and
# 30.6 and 31.4 of 32 Gbps over TCP on GCP (nccl issue 209): 0.976, 0.956, 0.981 -> 0.971.
NIC_EFFICIENCY = 0.971

# PCIe (T4, P4 hosts): no published point; borrowed from NVLink (both are serial point-to-point
# links whose packet and encoding overheads cost about a quarter of line rate).
PCIE_EFFICIENCY = NVLINK_EFFICIENCY

# TPU ICI: no published point; borrowed from NVLink, the nearest chip-to-chip link measured.
ICI_EFFICIENCY = NVLINK_EFFICIENCY

# --- latencies (alpha) -------------------------------------------------------------------------

# NCCL's tuning model, ring algorithm, Simple protocol (nccl src/graph/tuning.cc): a fixed base
# per collective plus a latency per step that depends on the link the step crosses.
NCCL_BASE_LATENCY = 8.4 * US
NVLINK_HOP_LATENCY = 3.4 * US
PCIE_HOP_LATENCY = 5.7 * US
NETWORK_HOP_LATENCY = 9.6 * US
# TPU ICI hop: no published point; borrowed from NVLink's hop.
ICI_HOP_LATENCY = NVLINK_HOP_LATENCY

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
# 64 MiB, behaves alike).
GRADIENT_BUCKET_BYTES = 25 * MIB

# --- strategy choice and serving policy ---------------------------------------------------------

# Auto picks the reduction server only when it is more than 2% faster than the ring (issue 4):
# below that the extra machines and moving parts are not worth it.
RING_PREFERENCE_TOLERANCE = 0.02

# The highest utilisation a serving replica is sized for, whatever the queueing model allows:
# Knative's (and so KServe's) default autoscaling target is 70% of a replica's capacity.
MAX_SERVING_UTILISATION = 0.70

# The percentile the latency objective names.
LATENCY_PERCENTILE = 0.99
