"""Every calibrated constant of :mod:`ringmaster.engine.efficiency`, recomputed from the published
points, so a test keeps the constants in the code equal to what the evidence gives."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from ringmaster.calibration.collectives import (
    FABRIC_POINTS,
    efa_efficiency,
    nvls_blackwell_efficiency,
    nvls_plateau_algbw,
    nvls_tree_share,
    pipeline_fill_per_step_byte,
    tcp_shared_nic_efficiency,
    xgmi_efficiency,
)
from ringmaster.calibration.link_fill import link_ring_efficiency, ring_fill_link_steps
from ringmaster.calibration.points import (
    RESNET50_OPERATIONS,
    load_points,
    point_by_id,
)
from ringmaster.engine.units import GIB


def derive_constants(points: Mapping[str, Any]) -> dict[str, float]:
    """Each calibrated constant of engine.efficiency, recomputed from the published points."""
    hw = points["hardware"]
    fabric = load_points(FABRIC_POINTS)
    fill = pipeline_fill_per_step_byte(fabric)
    # NVLink: 8 x A100 busbw at 8 GiB (LARGE_MESSAGE_BYTES, where its row evaluates), less the
    # ring's fill at the link's rate, over the line rate.
    nvlink_line = float(hw["nvidia-tesla-a100"]["nvlink_GBps_per_direction"]) * 1e9
    nvlink_bus = float(point_by_id(points, "a100-nvlink-8gpu-allreduce")["busbw_GBps"]) * 1e9
    size = 8 * GIB
    ring_steps = ring_fill_link_steps(fabric)
    nvlink = link_ring_efficiency(size, nvlink_bus, nvlink_line, ring_steps)
    one_nic = float(point_by_id(points, "one-100g-nic-internode-allreduce")["busbw_GBps"]) / 12.5
    gcp = [float(v) / 32.0 for v in point_by_id(points, "gcp-32gbe-tcp-2x1gpu")["busbw_Gbps"]]
    nic = statistics.mean([one_nic, *gcp])
    h100_line = float(hw["nvidia-h100-80gb"]["nvlink_GBps_per_direction"])
    nvls = nvls_plateau_algbw(points, fill) / (h100_line * 1e9)
    t4 = float(point_by_id(points, "mlperf-v0.7-t4-resnet50-offline")["samples_per_second"])
    a100 = float(point_by_id(points, "mlperf-v0.7-a100-sxm-resnet50-offline")["samples_per_second"])
    eff_t4 = t4 * RESNET50_OPERATIONS / (float(hw["nvidia-tesla-t4"]["int8_tops"]) * 1e12)
    eff_a100 = a100 * RESNET50_OPERATIONS / (float(hw["nvidia-tesla-a100"]["int8_tops"]) * 1e12)
    compute = math.sqrt(eff_t4 * eff_a100)
    single = float(point_by_id(points, "mlperf-v0.7-a100-sxm-resnet50-singlestream")["latency_ms"])
    one_image = RESNET50_OPERATIONS / (float(hw["nvidia-tesla-a100"]["int8_tops"]) * 1e12 * compute)
    lat = point_by_id(points, "nccl-latency-constants")["values_us"]
    return {
        "NVLINK_EFFICIENCY": nvlink,
        "NIC_EFFICIENCY": nic,
        "NVLS_EFFICIENCY": nvls,
        "NVLS_EFFICIENCY_BLACKWELL": nvls_blackwell_efficiency(fabric, fill),
        "XGMI_EFFICIENCY": xgmi_efficiency(fabric, ring_steps),
        "RING_FILL_LINK_STEPS": ring_steps,
        "EFA_EFFICIENCY": efa_efficiency(fabric, fill),
        "NVLS_TREE_SHARE": nvls_tree_share(fabric, points, fill),
        "TCP_SHARED_NIC_EFFICIENCY": tcp_shared_nic_efficiency(fabric, nic),
        "PIPELINE_FILL_SECONDS_PER_STEP_BYTE": fill,
        "COMPUTE_EFFICIENCY": compute,
        "INFERENCE_OVERHEAD_SECONDS": single * 1e-3 - one_image,
        "NCCL_BASE_LATENCY": float(lat["base"]) * 1e-6,
        "NVLINK_HOP_LATENCY": float(lat["nvlink_hop"]) * 1e-6,
        "PCIE_HOP_LATENCY": float(lat["pcie_hop"]) * 1e-6,
        # network_hop: superseded by NCCL's current tuning.cc (14 us), see efficiency.py.
    }
