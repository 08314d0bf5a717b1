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
import re
import statistics
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ringmaster import llm_calibration
from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine.hardware import DEFAULT_CATALOG, MachineType
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

# nccl-tests reports busbw for its largest messages; the points say "large messages" (8 GiB where
# nccl-tests issues 149/178 show the plateau), ">= 2 GiB" (H100) and ">= 128 MiB" (GCP TCP).
LARGE_MESSAGE_BYTES = 8.0 * GIB
# ResNet-50: "about 4.1 GMACs per image" (the MLPerf points' setup); 1 MAC = 2 operations.
RESNET50_OPERATIONS = 2 * 4.1e9
# MLPerf "offline" has no latency bound: the batch is as large as throughput wants. The engine's
# throughput b / t(b) at this batch is within 0.1% of its limit b -> infinity.
OFFLINE_BATCH = 8192
# The goal the issue sets for the checked points.
GOAL_MEDIAN = 0.10
GOAL_MAX = 0.25

FITTED = "fitted"  # a constant was derived from this figure: agreement is by construction
CHECKED = "checked"  # nothing was fitted on it: the honest test of the model
BOUND = "bound"  # the published figure must not exceed the model's bound
DECISION = "decision"  # a rule or a choice, exact
VERBATIM = "verbatim"  # a constant copied from a source (not a measurement)
OUT_OF_REACH = "out of reach"  # no prediction here; the note says why
NETWORK_MODEL = "network"
LLM_SERVING_MODEL = "llm serving"


@dataclass(frozen=True)
class Row:
    id: str
    quantity: str
    published: float | None
    predicted: float | None
    error: float | None  # relative, (predicted - published) / published; 0 inside a range
    tolerance: float
    status: str  # FITTED, CHECKED, BOUND, DECISION, VERBATIM, OUT_OF_REACH
    note: str = ""
    model: str = "network"  # NETWORK_MODEL (OWN_SECTIONS) or LLM_SERVING_MODEL

    @property
    def how(self) -> str:  # the older name of the column
        return self.status

    @property
    def ok(self) -> bool:
        return self.error is None or abs(self.error) <= self.tolerance


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


SECTIONS = ("collectives", "reduction_server", "inference")


def _by_id(points: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
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
    h100 = _point(points, "h100-nvlink-8gpu-allreduce")
    h100_line = float(hw["nvidia-h100-80gb"]["nvlink_GBps_per_direction"])
    nvls = float(h100["busbw_GBps"]["nvls"]) / (2 * 7 / 8) / h100_line
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
        "NVLS_EFFICIENCY": nvls,
        "COMPUTE_EFFICIENCY": compute,
        "INFERENCE_OVERHEAD_SECONDS": single * 1e-3 - one_image,
        "NCCL_BASE_LATENCY": float(lat["base"]) * 1e-6,
        "NVLINK_HOP_LATENCY": float(lat["nvlink_hop"]) * 1e-6,
        "PCIE_HOP_LATENCY": float(lat["pcie_hop"]) * 1e-6,
        # network_hop: superseded by NCCL's current tuning.cc (14 us), see efficiency.py.
    }


def _rel(predicted: float, published: float) -> float:
    return (predicted - published) / published


def _in_range(predicted: float, low: float, high: float) -> float:
    """0 inside [low, high], else the relative error to the nearer end."""
    if low <= predicted <= high:
        return 0.0
    return _rel(predicted, low if predicted < low else high)


def _network(name: str, gbps_per_nic: float, nics: int, transport: str) -> MachineType:
    """A host described only by its network (the points' clusters are not catalog machines)."""
    return MachineType(
        name=name,
        vcpus=0,
        nic_bandwidth=gbps_to_bytes_per_second(gbps_per_nic * nics),
        price_per_hour=0.0,
        source="the calibration point's setup",
        nics=nics,
        transport=transport,  # type: ignore[arg-type]
    )


def _busbw(t: C.CollectiveTime) -> float:
    return float(np.ravel(t.bus_bandwidth)[0])


def _collectives(points: Mapping[str, Any]) -> list[Row]:
    rows: list[Row] = []
    cat = DEFAULT_CATALOG
    a100 = cat.accelerator("nvidia-tesla-a100")
    h100 = cat.accelerator("nvidia-h100-80gb")
    big = LARGE_MESSAGE_BYTES

    p = _point(points, "a100-nvlink-8gpu-allreduce")
    busbw = _busbw(C.intra_host_collective(C.ALL_REDUCE, big, 8, a100)) / 1e9
    pub = float(p["busbw_GBps"])
    rows.append(
        Row(
            p["id"],
            "busbw GB/s, 8 GiB",
            pub,
            busbw,
            _rel(busbw, pub),
            0.02,
            FITTED,
            "NVLINK_EFFICIENCY",
        )
    )

    p = _point(points, "one-100g-nic-internode-allreduce")
    ib = _network("1 x 100 Gbps RDMA", 100, 1, "rdma")
    busbw = _busbw(C.inter_host_collective(C.ALL_REDUCE, big, 2, 1, ib, a100)) / 1e9
    pub = float(p["busbw_GBps"])
    rows.append(
        Row(
            p["id"],
            "busbw GB/s, 2 x 1 GPU",
            pub,
            busbw,
            _rel(busbw, pub),
            0.05,
            FITTED,
            "NIC_EFFICIENCY (mean of three ratios)",
        )
    )

    gcp = _network("32 Gbps gVNIC", 32, 1, "tcp")
    v100 = cat.accelerator("nvidia-tesla-v100")
    p = _point(points, "gcp-32gbe-tcp-2x1gpu")
    low, high = (float(v) for v in p["busbw_Gbps"])
    busbw = _busbw(C.inter_host_collective(C.ALL_REDUCE, big, 2, 1, gcp, v100)) * 8 / 1e9
    rows.append(
        Row(
            p["id"],
            "busbw Gbps, 2 x 1 GPU",
            (low + high) / 2,
            busbw,
            _in_range(busbw, low, high),
            0.05,
            FITTED,
            "NIC_EFFICIENCY",
        )
    )

    p = _point(points, "gcp-32gbe-tcp-4x1gpu")
    values = [float(v) for v in p["busbw_Gbps"]]
    busbw = _busbw(C.inter_host_collective(C.ALL_REDUCE, 1.0 * GIB, 4, 1, gcp, v100)) * 8 / 1e9
    rows.append(
        Row(
            p["id"],
            "busbw Gbps, 4 x 1 GPU, 1 GiB",
            statistics.mean(values),
            busbw,
            _in_range(busbw, min(values), max(values)),
            GOAL_MAX,
            CHECKED,
            "ring over 4 hosts; the tree (2x) applies to 2 hosts only",
        )
    )

    p = _point(points, "h100-nvlink-8gpu-allreduce")
    ring_only = {"NCCL_ALGO": "ring"}
    busbw = _busbw(C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100, env=ring_only)) / 1e9
    pub = float(p["busbw_GBps"]["ring"])
    rows.append(
        Row(
            p["id"],
            "ring busbw GB/s, 8 GPUs",
            pub,
            busbw,
            _rel(busbw, pub),
            GOAL_MAX,
            CHECKED,
            "A100's NVLink efficiency on NVLink 4",
        )
    )
    nvls = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100)
    busbw = _busbw(nvls) / 1e9
    pub = float(p["busbw_GBps"]["nvls"])
    rows.append(
        Row(
            p["id"],
            "NVLS busbw GB/s, 8 GPUs",
            pub,
            busbw,
            _rel(busbw, pub),
            0.02,
            FITTED,
            "NVLS_EFFICIENCY",
        )
    )
    chosen = C.ALGORITHM_NAMES[int(np.ravel(nvls.algorithm)[0])]
    rows.append(
        Row(
            p["id"],
            f"algorithm at 4 GiB: {chosen} (NCCL: NVLS)",
            1.0,
            1.0 if chosen == "NVLS" else 0.0,
            0.0 if chosen == "NVLS" else -1.0,
            0.0,
            DECISION,
            "NVLS is NCCL's default on NVSwitch H100",
        )
    )
    match = re.search(r"NVLS ([\d /]+) for ([\d /]+) GPUs", str(p.get("note", "")))
    if match:
        figures = [float(x) for x in match.group(1).split("/")]
        gpus = [int(x) for x in match.group(2).split("/")]
        for count, pub in zip(gpus, figures, strict=True):
            if count == 8:
                continue  # the fitted figure
            t = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, count, h100)
            busbw = _busbw(t) / 1e9
            rows.append(
                Row(
                    p["id"],
                    f"NVLS busbw GB/s, {count} GPUs",
                    pub,
                    busbw,
                    _rel(busbw, pub),
                    GOAL_MAX,
                    CHECKED,
                    "from the point's note",
                )
            )

    p = _point(points, "a100-nvlink-8gpu-allreduce-by-size")
    low, high = (float(v) for v in p["busbw_GBps"]["le_1GiB"])
    busbw = _busbw(C.intra_host_collective(C.ALL_REDUCE, 1.0 * GIB, 8, a100)) / 1e9
    rows.append(
        Row(
            p["id"],
            "busbw GB/s, 1 GiB",
            (low + high) / 2,
            busbw,
            _in_range(busbw, low, high),
            GOAL_MAX,
            CHECKED,
            "alpha-beta reaches the plateau sooner than NCCL's pipeline does",
        )
    )
    pub = float(p["busbw_GBps"]["ge_8GiB"])
    busbw = _busbw(C.intra_host_collective(C.ALL_REDUCE, 8.0 * GIB, 8, a100)) / 1e9
    rows.append(
        Row(
            p["id"],
            "busbw GB/s, 8 GiB",
            pub,
            busbw,
            _rel(busbw, pub),
            0.02,
            FITTED,
            "the figure NVLINK_EFFICIENCY is fitted on",
        )
    )

    p = _point(points, "a100-3node-4xhdr-allreduce")
    hdr = _network("4 x 200 Gbps HDR InfiniBand", 200, 4, "rdma")
    t = C.inter_host_collective(C.ALL_REDUCE, big, 3, 8, hdr, a100)
    busbw = _busbw(t) / 1e9
    alg = C.ALGORITHM_NAMES[int(np.ravel(t.algorithm)[0])]
    for key in ("average", "peak"):
        pub = float(p["busbw_GBps"][key])
        rows.append(
            Row(
                p["id"],
                f"busbw GB/s ({key}), {alg}",
                pub,
                busbw,
                _rel(busbw, pub),
                GOAL_MAX,
                CHECKED,
                "ring: busbw = the host's NICs",
            )
        )

    p = _point(points, "nccl-latency-constants")
    used = {
        "base": E.NCCL_BASE_LATENCY_US["ring"][C.PROTO_SIMPLE],
        "nvlink_hop": E.NCCL_HW_LATENCY_US["nvlink"]["ring"][C.PROTO_SIMPLE],
        "pcie_hop": E.NCCL_HW_LATENCY_US["pcie"]["ring"][C.PROTO_SIMPLE],
        "network_hop": E.NCCL_HW_LATENCY_US["net"]["ring"][C.PROTO_SIMPLE],
    }
    for key, value in p["values_us"].items():
        ours = used[key]
        same = abs(ours - float(value)) < 1e-9
        note = "" if same else "superseded: NCCL's current tuning.cc says 14 us (older NCCL 9.6)"
        err = _rel(ours, float(value))
        rows.append(
            Row(
                p["id"],
                f"{key} us",
                float(value),
                ours,
                err,
                1e-9 if same else abs(err),
                VERBATIM,
                note,
            )
        )
    return rows


def _reduction_server(points: Mapping[str, Any]) -> list[Row]:
    rows: list[Row] = []
    cat = DEFAULT_CATALOG
    # Vertex's example: 5 hosts at 100 Gbps need 16 reducers of 32 Gbps.
    p = _point(points, "vertex-sizing-rule")
    reducer = cat.machine("n1-highcpu-16")
    host = cat.machine("a2-highgpu-8g")
    k = int(vertex_reducer_count(5, host.nic_bandwidth, reducer.nic_bandwidth))
    rows.append(Row(p["id"], "reducers for 5 x 100 Gbps", 16, k, _rel(k, 16), 0.0, DECISION))

    # Communication-bound gain with ample reducers: what NCCL runs / the reduction server.
    p = _point(points, "theoretical-gain")
    a100 = cat.accelerator("nvidia-tesla-a100")
    n = 8
    rdma = _network("100 Gbps RDMA", 100, 1, "rdma")
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
            _rel(gain, bound),
            0.02,
            CHECKED,
            "ring 2(n-1)/n x M per NIC against M",
        )
    )

    # BytePS: 8 hosts x 8 V100, 20 Gbps TCP, against Horovod's NCCL all-reduce. The point gives no
    # compute time, so the engine can only bound the gain (communication-bound, no overlap).
    p = _point(points, "byteps-vs-allreduce-20g")
    v100 = cat.accelerator("nvidia-tesla-v100")
    tcp20 = _network("20 Gbps TCP", 20, 1, "tcp")
    ring = C.inter_host_collective(C.ALL_REDUCE, 1.0 * GIB, 8, 8, tcp20, v100)
    fabric = C.gpu_fabric(v100, tcp20, 8)
    rate = C.reducer_bandwidth(tcp20.nic_bandwidth * E.NIC_EFFICIENCY, 64, "fp32")
    rs = C.reduction_server_collective(1.0 * GIB, 8, 8, fabric, 64, rate)
    gain_bound = float(np.ravel(ring.seconds)[0] / np.ravel(rs.seconds)[0]) - 1.0
    for model, gain_pub in p["gain"].items():
        err = max(0.0, _rel(float(gain_pub), gain_bound))
        rows.append(
            Row(p["id"], f"{model} gain <= bound", float(gain_pub), gain_bound, err, 0.05, BOUND)
        )
    return rows


def _inference(points: Mapping[str, Any]) -> list[Row]:
    rows: list[Row] = []
    a100 = DEFAULT_CATALOG.accelerator("nvidia-tesla-a100")
    t4 = DEFAULT_CATALOG.accelerator("nvidia-tesla-t4")
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
        rows.append(
            Row(
                pid,
                "images/s",
                pub,
                ips,
                _rel(ips, pub),
                0.15,
                FITTED,
                "COMPUTE_EFFICIENCY (geometric mean of the two)",
            )
        )

    p = _point(points, "mlperf-v0.7-a100-sxm-resnet50-singlestream")
    lat = batch_latency(1, RESNET50_OPERATIONS, 25.6e6, a100.peak("int8"), a100.memory_bandwidth)
    ms = float(lat.seconds) * 1e3
    pub = float(p["latency_ms"])
    rows.append(
        Row(
            p["id"],
            "latency ms",
            pub,
            ms,
            _rel(ms, pub),
            0.05,
            FITTED,
            "INFERENCE_OVERHEAD_SECONDS",
        )
    )
    return rows


# The data-parallel and network model's own points: the checked-error goal applies to these. The
# LLM serving rows (engine.llm_calibration, in the same table) and the LLM training section
# (ringmaster.llm_calibration, printed after it) state their own checked errors.
OWN_SECTIONS = ("collectives", "reduction_server", "inference")


def report(points: Mapping[str, Any]) -> list[Row]:
    """One row per published figure: the engine's prediction for the same setup, and whether a
    constant was fitted on it or it only checks the model. The ``llm_inference`` points come
    from the LLM serving model; the ``llm_training`` points have their own section
    (:func:`ringmaster.llm_calibration.render_llm_section`)."""
    rows = _collectives(points) + _reduction_server(points) + _inference(points)
    rows += [
        Row(
            r.id,
            r.quantity,
            r.published,
            r.predicted,
            r.error,
            r.tolerance,
            r.role,
            "LLM serving model",
            model=LLM_SERVING_MODEL,
        )
        for r in llm_serving_rows(points)
    ]
    return rows


def checked_errors(rows: list[Row]) -> list[float]:
    """|error| of the checked rows of this model's own points (OWN_SECTIONS)."""
    return [
        abs(r.error)
        for r in rows
        if r.status == CHECKED and r.error is not None and r.model == NETWORK_MODEL
    ]


def summary(rows: list[Row]) -> tuple[float, float, int]:
    """Median and largest absolute error of the checked rows, and how many there are."""
    errors = checked_errors(rows)
    if not errors:
        return 0.0, 0.0, 0
    return statistics.median(errors), max(errors), len(errors)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4g}"


def render_table(rows: list[Row]) -> str:
    header = ("point", "quantity", "published", "predicted", "error", "status", "", "note")
    body = [
        (
            r.id,
            r.quantity,
            _num(r.published),
            _num(r.predicted),
            "-" if r.error is None else f"{r.error:+.1%}",
            r.status,
            "ok" if r.ok else "OUT",
            r.note,
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    right = {2, 3, 4}
    lines = []
    for line in [header, *body]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    median, largest, count = summary(rows)
    lines.append(
        f"collectives, reduction server, inference: {count} checked points; median |error| "
        f"{median:.1%} (goal < {GOAL_MEDIAN:.0%}), largest {largest:.1%} (goal <= {GOAL_MAX:.0%})"
    )
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
        median, largest, count = summary(rows)
        checked = {"count": count, "medianAbsError": median, "maxAbsError": largest}
        print(json.dumps({"points": str(path), "rows": out, "checked": checked}, indent=2))
    else:
        print(f"calibration points: {path}")
        print(render_table(rows))
        print(summary_line(load_points(path)) or "llm_inference: no points in this file")
        bad = sum(not r.ok for r in rows)
        print(f"{len(rows) - bad} of {len(rows)} within tolerance")
        print("\n" + llm_calibration.render_llm_section(load_points(path), path))
    return 0 if all(r.ok for r in rows) else 1
