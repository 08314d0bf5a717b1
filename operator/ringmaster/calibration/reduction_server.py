"""The reduction server: Vertex's sizing rule and the published gains over all-reduce
(``reduction_server`` section of points.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ringmaster.calibration.collectives import network_host
from ringmaster.calibration.points import (
    BOUND,
    CHECKED,
    DECISION,
    Row,
    point_by_id,
    relative_error,
)
from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.training import vertex_reducer_count
from ringmaster.engine.units import GIB


def reduction_server_rows(points: Mapping[str, Any]) -> list[Row]:
    rows: list[Row] = []
    cat = DEFAULT_CATALOG
    # Vertex's example: 5 hosts at 100 Gbps need 16 reducers of 32 Gbps.
    p = point_by_id(points, "vertex-sizing-rule")
    reducer = cat.machine("n1-highcpu-16")
    host = cat.machine("a2-highgpu-8g")
    k = int(vertex_reducer_count(5, host.nic_bandwidth, reducer.nic_bandwidth))
    rows.append(
        Row(p["id"], "reducers for 5 x 100 Gbps", 16, k, relative_error(k, 16), 0.0, DECISION)
    )

    # Communication-bound gain with ample reducers: what NCCL runs / the reduction server.
    p = point_by_id(points, "theoretical-gain")
    a100 = cat.accelerator("nvidia-tesla-a100")
    n = 8
    rdma = network_host("100 Gbps RDMA", 100, 1, "rdma")
    ring = C.inter_host_collective(C.ALL_REDUCE, 1.0 * GIB, n, 1, rdma, a100)
    fabric = C.gpu_fabric(a100, rdma, 1)
    rate = C.reducer_bandwidth(rdma.nic_bandwidth * E.NIC_EFFICIENCY, 64, "fp32")
    rs = C.reduction_server_collective(1.0 * GIB, n, 1, fabric, 64, rate)
    gain = float(np.ravel(ring.seconds)[0] / np.ravel(rs.seconds)[0])
    bound = 2 * (n - 1) / n
    rows.append(
        Row(
            p["id"],
            "gain, 8 hosts x 1 GPU",
            bound,
            gain,
            relative_error(gain, bound),
            0.02,
            CHECKED,
            "ring 2(n-1)/n x M per NIC against M",
        )
    )

    # BytePS: 8 hosts x 8 V100, 20 Gbps TCP, against Horovod's NCCL all-reduce. The point gives no
    # compute time, so the engine can only bound the gain (communication-bound, no overlap).
    p = point_by_id(points, "byteps-vs-allreduce-20g")
    v100 = cat.accelerator("nvidia-tesla-v100")
    tcp20 = network_host("20 Gbps TCP", 20, 1, "tcp")
    ring = C.inter_host_collective(C.ALL_REDUCE, 1.0 * GIB, 8, 8, tcp20, v100)
    fabric = C.gpu_fabric(v100, tcp20, 8)
    rate = C.reducer_bandwidth(tcp20.nic_bandwidth * E.NIC_EFFICIENCY, 64, "fp32")
    rs = C.reduction_server_collective(1.0 * GIB, 8, 8, fabric, 64, rate)
    gain_bound = float(np.ravel(ring.seconds)[0] / np.ravel(rs.seconds)[0]) - 1.0
    for model, gain_pub in p["gain"].items():
        err = max(0.0, relative_error(float(gain_pub), gain_bound))
        rows.append(
            Row(p["id"], f"{model} gain <= bound", float(gain_pub), gain_bound, err, 0.05, BOUND)
        )
    return rows
