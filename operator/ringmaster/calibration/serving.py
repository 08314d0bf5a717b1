"""Serving (non-LLM): MLPerf ResNet-50 offline throughput and single-stream latency beside the
roofline batch-latency model (``inference`` section of points.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringmaster.calibration.points import (
    FITTED,
    OFFLINE_BATCH,
    RESNET50_OPERATIONS,
    Row,
    point_by_id,
    relative_error,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.inference import batch_latency


def serving_rows(points: Mapping[str, Any]) -> list[Row]:
    rows: list[Row] = []
    a100 = DEFAULT_CATALOG.accelerator("nvidia-tesla-a100")
    t4 = DEFAULT_CATALOG.accelerator("nvidia-tesla-t4")
    for pid, acc in (
        ("mlperf-v0.7-t4-resnet50-offline", t4),
        ("mlperf-v0.7-a100-sxm-resnet50-offline", a100),
    ):
        p = point_by_id(points, pid)
        lat = batch_latency(
            OFFLINE_BATCH, RESNET50_OPERATIONS, 25.6e6, acc.peak("int8"), acc.memory_bandwidth
        )
        ips = OFFLINE_BATCH / float(lat.seconds)
        pub = float(p["samples_per_second"])
        rows.append(
            Row(
                pid,
                "images/s",
                pub,
                ips,
                relative_error(ips, pub),
                0.15,
                FITTED,
                "COMPUTE_EFFICIENCY (geometric mean of the two)",
            )
        )

    p = point_by_id(points, "mlperf-v0.7-a100-sxm-resnet50-singlestream")
    lat = batch_latency(1, RESNET50_OPERATIONS, 25.6e6, a100.peak("int8"), a100.memory_bandwidth)
    ms = float(lat.seconds) * 1e3
    pub = float(p["latency_ms"])
    rows.append(
        Row(
            p["id"],
            "latency ms",
            pub,
            ms,
            relative_error(ms, pub),
            0.05,
            FITTED,
            "INFERENCE_OVERHEAD_SECONDS",
        )
    )
    return rows
