"""`ringmaster calibrate`: the engine beside the published measurements it is calibrated on.

For each point of ../shared/calibration/points.yaml (or --points FILE; a copy ships in the
package as ``ringmaster/engine/points.yaml``) it prints the published figure, the engine's
prediction for the same setup, the relative error and the tolerance the tests hold it to.
:func:`derive_constants` recomputes every calibrated constant of
:mod:`ringmaster.engine.efficiency` from the points, so a test can check that the constants in
the code are the ones the evidence gives.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ringmaster import llm_calibration
from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.inference import batch_latency
from ringmaster.engine.llm_calibration import llm_serving_rows, summary_line
from ringmaster.engine.training import vertex_reducer_count
from ringmaster.engine.units import GIB, gbps_to_bytes_per_second

EXIT_USAGE = 2
PACKAGED_POINTS = Path(__file__).resolve().parent / "engine" / "points.yaml"
# ../shared/calibration/points.yaml relative to the repository root (operator/ringmaster/..).
SHARED_POINTS = (
    Path(__file__).resolve().parents[2].parent / "shared" / "calibration" / "points.yaml"
)

# nccl-tests reports busbw for its largest messages; 1 GiB makes the latency term negligible
# (< 1% of the time) as in the published runs.
LARGE_MESSAGE_BYTES = 1.0 * GIB
# ResNet-50: "about 4.1 GMACs per image" (the MLPerf points' setup); 1 MAC = 2 operations.
RESNET50_OPERATIONS = 2 * 4.1e9
# MLPerf "offline" has no latency bound: the batch is as large as throughput wants. The engine's
# throughput b / t(b) at this batch is within 0.1% of its limit b -> infinity.
OFFLINE_BATCH = 8192
# nccl-tests issue 29 and nccl issue 209 ran one GPU per host on two hosts.
TWO_HOSTS = 2


@dataclass(frozen=True)
class Row:
    id: str
    quantity: str
    published: float
    predicted: float
    error: float  # relative, (predicted - published) / published; 0 inside a published range
    tolerance: float
    how: str  # "predicted", "bound" (published must not exceed the model's bound), "verbatim"

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.tolerance


class PointsError(ValueError):
    pass


def load_points(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PointsError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PointsError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise PointsError(f"{path}: expected a map with collectives, reduction_server, inference")
    return data


def _by_id(points: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for section in ("collectives", "reduction_server", "inference"):
        for point in points.get(section) or []:
            out[str(point["id"])] = point
    return out


def _point(points: Mapping[str, Any], pid: str) -> dict[str, Any]:
    try:
        return _by_id(points)[pid]
    except KeyError:
        raise PointsError(f"points file has no point with id {pid!r}") from None


def derive_constants(points: Mapping[str, Any]) -> dict[str, float]:
    """Each calibrated constant of engine.efficiency, recomputed from the published points."""
    hw = points["hardware"]
    nvlink_line = float(hw["nvidia-tesla-a100"]["nvlink_GBps_per_direction"])
    nvlink = float(_point(points, "a100-nvlink-8gpu-allreduce")["busbw_GBps"]) / nvlink_line
    one_nic = float(_point(points, "one-100g-nic-internode-allreduce")["busbw_GBps"]) / 12.5
    gcp = [float(v) / 32.0 for v in _point(points, "gcp-32gbe-tcp-2x1gpu")["busbw_Gbps"]]
    nic = statistics.mean([one_nic, *gcp])
    t4 = float(_point(points, "mlperf-v0.7-t4-resnet50-offline")["samples_per_second"])
    a100 = float(_point(points, "mlperf-v0.7-a100-sxm-resnet50-offline")["samples_per_second"])
    eff_t4 = t4 * RESNET50_OPERATIONS / (float(hw["nvidia-tesla-t4"]["int8_tops"]) * 1e12)
    eff_a100 = a100 * RESNET50_OPERATIONS / (float(hw["nvidia-tesla-a100"]["int8_tops"]) * 1e12)
    compute = math.sqrt(eff_t4 * eff_a100)
    single = float(_point(points, "mlperf-v0.7-a100-sxm-resnet50-singlestream")["latency_ms"])
    one_image = RESNET50_OPERATIONS / (float(hw["nvidia-tesla-a100"]["int8_tops"]) * 1e12 * compute)
    lat = _point(points, "nccl-latency-constants")["values_us"]
    return {
        "NVLINK_EFFICIENCY": nvlink,
        "NIC_EFFICIENCY": nic,
        "COMPUTE_EFFICIENCY": compute,
        "INFERENCE_OVERHEAD_SECONDS": single * 1e-3 - one_image,
        "NCCL_BASE_LATENCY": float(lat["base"]) * 1e-6,
        "NVLINK_HOP_LATENCY": float(lat["nvlink_hop"]) * 1e-6,
        "PCIE_HOP_LATENCY": float(lat["pcie_hop"]) * 1e-6,
        "NETWORK_HOP_LATENCY": float(lat["network_hop"]) * 1e-6,
    }


def _rel(predicted: float, published: float) -> float:
    return (predicted - published) / published


def _two_host_busbw(nic_gbps: float) -> float:
    """busbw (bytes/s) of a 2 x 1 GPU all-reduce over one NIC each, as the engine predicts it."""
    nic = gbps_to_bytes_per_second(nic_gbps) * E.NIC_EFFICIENCY
    coll = C.flat_ring(
        LARGE_MESSAGE_BYTES, TWO_HOSTS, 1, nic, nic, E.NVLINK_HOP_LATENCY, E.NETWORK_HOP_LATENCY
    )
    return float(C.bus_bandwidth(LARGE_MESSAGE_BYTES, TWO_HOSTS, coll.seconds))


def report(points: Mapping[str, Any]) -> list[Row]:
    """One row per published figure: the engine's prediction for the same setup."""
    rows: list[Row] = []
    a100 = DEFAULT_CATALOG.accelerator("nvidia-tesla-a100")
    t4 = DEFAULT_CATALOG.accelerator("nvidia-tesla-t4")

    # 8 x A100 on NVLink: one ring of 8 peers inside the host.
    p = _point(points, "a100-nvlink-8gpu-allreduce")
    ring = C.ring_allreduce(
        LARGE_MESSAGE_BYTES, 8, a100.intra_bandwidth * E.NVLINK_EFFICIENCY, E.NVLINK_HOP_LATENCY
    )
    busbw = float(C.bus_bandwidth(LARGE_MESSAGE_BYTES, 8, ring.seconds)) / 1e9
    pub = float(p["busbw_GBps"])
    rows.append(Row(p["id"], "busbw GB/s", pub, busbw, _rel(busbw, pub), 0.05, "predicted"))

    p = _point(points, "one-100g-nic-internode-allreduce")
    busbw = _two_host_busbw(100) / 1e9
    pub = float(p["busbw_GBps"])
    rows.append(Row(p["id"], "busbw GB/s", pub, busbw, _rel(busbw, pub), 0.05, "predicted"))

    p = _point(points, "gcp-32gbe-tcp-2x1gpu")
    low, high = (float(v) for v in p["busbw_Gbps"])
    busbw = _two_host_busbw(32) * 8 / 1e9
    err = 0.0 if low <= busbw <= high else _rel(busbw, low if busbw < low else high)
    rows.append(Row(p["id"], "busbw Gbps", (low + high) / 2, busbw, err, 0.05, "predicted"))

    p = _point(points, "nccl-latency-constants")
    used = {
        "base": E.NCCL_BASE_LATENCY,
        "nvlink_hop": E.NVLINK_HOP_LATENCY,
        "pcie_hop": E.PCIE_HOP_LATENCY,
        "network_hop": E.NETWORK_HOP_LATENCY,
    }
    for key, value in p["values_us"].items():
        ours = used[key] * 1e6
        rows.append(
            Row(p["id"], f"{key} us", float(value), ours, _rel(ours, value), 1e-9, "verbatim")
        )

    # Vertex's example: 5 hosts at 100 Gbps need 16 reducers of 32 Gbps.
    p = _point(points, "vertex-sizing-rule")
    reducer = DEFAULT_CATALOG.machine("n1-highcpu-16")
    host = DEFAULT_CATALOG.machine("a2-highgpu-8g")
    k = int(vertex_reducer_count(5, host.nic_bandwidth, reducer.nic_bandwidth))
    rows.append(Row(p["id"], "reducers for 5 x 100 Gbps", 16, k, _rel(k, 16), 0.0, "predicted"))

    # Communication-bound gain with ample reducers: ring time / reduction-server time.
    p = _point(points, "theoretical-gain")
    n = 8
    nic = host.nic_bandwidth * E.NIC_EFFICIENCY
    args = (LARGE_MESSAGE_BYTES, n, 1, nic, nic, E.NVLINK_HOP_LATENCY, E.NETWORK_HOP_LATENCY)
    rs = C.reduction_server(*args, 64, reducer.nic_bandwidth * E.NIC_EFFICIENCY)
    gain = float(C.hierarchical_ring(*args).seconds / rs.seconds)
    bound = 2 * (n - 1) / n
    rows.append(Row(p["id"], "gain, 8 hosts", bound, gain, _rel(gain, bound), 0.02, "predicted"))

    # BytePS: 8 hosts x 8 V100, 20 Gbps, against Horovod's ring through all 64 GPUs. The point
    # gives no compute time, so the engine can only bound the gain (communication-bound, no
    # overlap): the published gains must not exceed that bound.
    p = _point(points, "byteps-vs-allreduce-20g")
    v100 = DEFAULT_CATALOG.accelerator("nvidia-tesla-v100")
    nic = gbps_to_bytes_per_second(20) * E.NIC_EFFICIENCY
    intra = v100.intra_bandwidth * E.NVLINK_EFFICIENCY
    args = (LARGE_MESSAGE_BYTES, 8, 8, nic, intra, E.NVLINK_HOP_LATENCY, E.NETWORK_HOP_LATENCY)
    flat = C.flat_ring(*args)
    rs = C.reduction_server(*args, 64, nic)
    gain_bound = float(flat.seconds / rs.seconds) - 1.0
    for model, gain_pub in p["gain"].items():
        err = max(0.0, _rel(float(gain_pub), gain_bound))
        rows.append(
            Row(p["id"], f"{model} gain <= bound", float(gain_pub), gain_bound, err, 0.05, "bound")
        )

    for pid, acc in (
        ("mlperf-v0.7-t4-resnet50-offline", t4),
        ("mlperf-v0.7-a100-sxm-resnet50-offline", a100),
    ):
        p = _point(points, pid)
        lat = batch_latency(
            OFFLINE_BATCH, RESNET50_OPERATIONS, 25.6e6, acc.peak("int8"), acc.memory_bandwidth
        )
        ips = OFFLINE_BATCH / float(lat.seconds)
        pub = float(p["samples_per_second"])
        rows.append(Row(pid, "images/s", pub, ips, _rel(ips, pub), 0.15, "predicted"))

    p = _point(points, "mlperf-v0.7-a100-sxm-resnet50-singlestream")
    lat = batch_latency(1, RESNET50_OPERATIONS, 25.6e6, a100.peak("int8"), a100.memory_bandwidth)
    ms = float(lat.seconds) * 1e3
    pub = float(p["latency_ms"])
    rows.append(Row(p["id"], "latency ms", pub, ms, _rel(ms, pub), 0.05, "predicted"))
    rows += [
        Row(r.id, r.quantity, r.published, r.predicted, r.error, r.tolerance, r.role)
        for r in llm_serving_rows(points)
    ]
    return rows


def render_table(rows: list[Row]) -> str:
    header = ("point", "quantity", "published", "predicted", "error", "tolerance", "")
    body = [
        (
            r.id,
            r.quantity,
            f"{r.published:,.4g}",
            f"{r.predicted:,.4g}",
            f"{r.error:+.1%}",
            ("bound " if r.how == "bound" else "") + f"{r.tolerance:.0%}",
            "ok" if r.ok else "OUT",
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    right = {2, 3, 4, 5}
    lines = []
    for line in [header, *body]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--points",
        type=Path,
        default=None,
        help=f"published points (default: {SHARED_POINTS}, else the copy in the package)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    path: Path = args.points or (SHARED_POINTS if SHARED_POINTS.exists() else PACKAGED_POINTS)
    try:
        rows = report(load_points(path))
    except PointsError as exc:
        print(f"ringmaster calibrate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KeyError, TypeError, ValueError) as exc:
        print(f"ringmaster calibrate: {path}: missing or malformed field {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "json":
        out = [{**asdict(r), "ok": r.ok} for r in rows]
        print(json.dumps({"points": str(path), "rows": out}, indent=2))
    else:
        print(f"calibration points: {path}")
        print(render_table(rows))
        print(summary_line(load_points(path)) or "llm_inference: no points in this file")
        bad = sum(not r.ok for r in rows)
        print(f"{len(rows) - bad} of {len(rows)} within tolerance")
        print("\n" + llm_calibration.render_llm_section(load_points(path), path))
    return 0 if all(r.ok for r in rows) else 1
