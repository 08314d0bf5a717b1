"""Mixture of experts: the all-to-all (dispatch / combine) model and whole MoE training steps
beside published figures (``moe_points.yaml`` next to this module, each with its source). The
all-to-all rows are checked: the all-to-all model adds no fitted constant (it reuses the NVLink
and NIC efficiencies fitted on all-reduce points), so they test the physics, not a fit. The
training rows are checked but for those ``role: fitted``, on which :func:`moe_sync_fit` fits
engine.frameworks.MEGATRON_MOE_SYNC_SECONDS (a dropless layer's exposed host sync); a test
keeps the constant equal to the fit.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ringmaster.calibration.points import CHECKED, FITTED, Row, load_points, relative_error
from ringmaster.engine import collectives as C
from ringmaster.engine import expert_dispatch as X
from ringmaster.engine import llm_training as L
from ringmaster.engine.efficiency import NIC_EFFICIENCY
from ringmaster.engine.frameworks import DEFAULT_GPU_FRAMEWORK, MEGATRON_ONE_F_ONE_B_REALISED
from ringmaster.engine.frameworks import framework as framework_profile
from ringmaster.engine.hardware import DEFAULT_CATALOG, Accelerator, Catalog, Host, MachineType
from ringmaster.engine.llm_layout_search import LayoutRequest, search_layouts
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.engine.units import GB, gbps_to_bytes_per_second

MOE_POINTS = Path(__file__).resolve().parent / "moe_points.yaml"
MOE_MODEL = "moe"
# Checked rows are held to the network model's goal for its largest error.
TOLERANCE = 0.25
# H800 (NVIDIA H800 SXM5 product brief): the H100's chip with NVLink cut to 8 links, 400 GB/s
# bidirectional = 200 GB/s per direction; DeepSeek's hosts carry one CX7 400 Gb/s IB NIC per GPU
# (DeepSeek-V3 technical report, section 3.1; DeepEP docs/legacy.md).
H800_NVLINK_GBPS = 200.0
H800_HOST_NIC_GBPS = 8 * 400.0


def _hardware(name: str, catalog: Catalog) -> tuple[Accelerator, MachineType]:
    if name == "h800":
        h100 = catalog.accelerator("nvidia-h100-80gb")
        acc = replace(h100, name="h800", intra_bandwidth=H800_NVLINK_GBPS * GB)
        machine = replace(
            catalog.machine("a3-ultragpu-8g"),
            name="h800-8x-cx7",
            accelerator="h800",
            nic_bandwidth=gbps_to_bytes_per_second(H800_HOST_NIC_GBPS),
            transport="rdma",
        )
        return acc, machine
    acc = catalog.accelerator(name)
    host = catalog.host(name, 8)
    return acc, host.machine


def predicted_GBps(point: dict[str, Any], catalog: Catalog) -> float:
    """The model's figure for the point's quantity: nccl-tests busbw; the NVLink or RDMA bytes
    per GPU per second (DeepEP's "bottleneck bandwidth"); or the buffer per second (DeepEP V2's
    "logical bandwidth")."""
    acc, machine = _hardware(point["accelerator"], catalog)
    hosts, g = int(point["hosts"]), int(point["per_host"])
    ranks = hosts * g
    if "bytes" in point:
        nbytes = float(point["bytes"])
    else:  # each token goes to top_k experts, spread evenly over the ranks
        nbytes = float(point["tokens"]) * float(point["top_k"]) * float(point["token_bytes"])
    if hosts == 1:
        t = C.intra_host_collective(C.ALL_TO_ALL, nbytes, g, acc)
    else:
        t = C.inter_host_collective(C.ALL_TO_ALL, nbytes, hosts, g, machine, acc)
    seconds = float(t.seconds)
    quantity = point["quantity"]
    if quantity == "busbw":
        return float(t.bus_bandwidth) / 1e9
    if quantity == "nvlink":
        return nbytes * (g - 1) / ranks / seconds / 1e9
    if quantity == "rdma":
        return nbytes * (ranks - g) / ranks / seconds / 1e9
    if quantity == "logical":
        return nbytes / seconds / 1e9
    raise ValueError(f"{point['id']}: unknown quantity {quantity!r}")


def predicted_low_latency_us(point: dict[str, Any], catalog: Catalog) -> float:
    """One DeepEP low-latency dispatch or combine, as serving's wide expert parallelism costs
    it (engine.expert_dispatch: a copy per expert, every peer written at once)."""
    acc, machine = _hardware(point["accelerator"], catalog)
    group = X.ExpertGroup(int(point["ranks"]), int(point["per_host"]), acc, machine)
    top_k = float(point["top_k"])
    nbytes = float(point["tokens"]) * top_k * float(point["token_bytes"])
    return float(X.exchange_seconds(nbytes, group, top_k, peers_in_turn=False)) * 1e6


def moe_rows(catalog: Catalog | None = None, points: dict[str, Any] | None = None) -> list[Row]:
    catalog = catalog or DEFAULT_CATALOG
    data = points if points is not None else load_points(MOE_POINTS)
    # (the points' section, the quantity, the published figure's key, the model, the tolerance)
    sections: tuple[tuple[str, str, str, Callable[[dict[str, Any], Catalog], float], float], ...]
    sections = (
        ("all_to_all", "all-to-all {quantity} GB/s", "published_GBps", predicted_GBps, TOLERANCE),
        (
            "low_latency",
            "DeepEP low-latency exchange us",
            "published_us",
            predicted_low_latency_us,
            TOLERANCE,
        ),
        (
            "training",
            "MoE training tokens/s per GPU",
            "published_tokens_per_second_per_gpu",
            predicted_tokens_per_gpu,
            TRAINING_TOLERANCE,
        ),
    )
    rows = []
    for section, quantity, key, predict, tolerance in sections:
        for point in data.get(section, []):
            predicted = predict(point, catalog)
            published = float(point[key])
            rows.append(
                Row(
                    point["id"],
                    quantity.format(quantity=point.get("quantity", "")),
                    published,
                    predicted,
                    relative_error(predicted, published),
                    float(point.get("tolerance", tolerance)),
                    point.get("role", CHECKED),
                    point.get("note", "") or point["source"],
                    model=MOE_MODEL,
                )
            )
    return rows


# The training rows state their errors; they are not held to the network model's goal: the
# step they check composes every term of the layout model (DeepSeek-V3's row with its DualPipe
# schedule, engine.moe_training), not the all-to-all alone.
TRAINING_TOLERANCE = 0.6


def predicted_tokens_per_gpu(
    point: dict[str, Any],
    catalog: Catalog,
    moe_sync_seconds: float | None = None,
    one_f_one_b_realised: float | None = None,
) -> float:
    """Tokens per second per GPU of the run's own layout, as the layout engine predicts it: the
    run's micro-batch and virtual stages where it states them, its hosts' NIC where it names one
    (``nic_gbps``), an NVLink domain of several hosts (GB200 NVL72) as one NCCL node as a job's
    plan has it, recompute ``Auto`` (unstated) searched, Megatron-Core's CUDA graphs
    (``cuda_graph``) and the router's forced balance (``force_balanced``) where the run states
    them. ``moe_sync_seconds``: the framework's MoE host sync in place of its own where it has
    one (the fit); ``one_f_one_b_realised``: the share of OneFOneB's hiding realised in place of
    the framework's (the overlap fit)."""
    per_host = int(point.get("per_host", 8))
    if point["accelerator"] == "h800":
        acc, machine = _hardware(point["accelerator"], catalog)
        host = Host(machine=machine, accelerator=acc, count=per_host)
    else:
        host = catalog.host(point["accelerator"], per_host)
    hosts = int(point["hosts"])
    model = replace(KNOWN_TRANSFORMERS[point["model"]], sequence_length=point["sequence_length"])
    profile = framework_profile(
        point.get("framework", DEFAULT_GPU_FRAMEWORK),
        compiled=bool(point.get("compile", False)),
        cuda_graph=point.get("cuda_graph"),
    )
    if moe_sync_seconds is not None and profile.moe_sync_seconds:  # not under a full graph
        profile = replace(profile, moe_sync_seconds=moe_sync_seconds)
    if one_f_one_b_realised is not None:
        profile = replace(profile, one_f_one_b_realised=one_f_one_b_realised)
    hw = L.layout_hardware(
        host, hosts, catalog, compute_precision=point["compute_precision"], framework=profile
    )
    if "nic_gbps" in point:
        hw = replace(
            hw, nic_bandwidth=gbps_to_bytes_per_second(float(point["nic_gbps"])) * NIC_EFFICIENCY
        )
    hw, _ = L.on_nvlink_domain(hw, host.machine)
    if "optimizer_moments" in point:  # Adam's moments' dtype, where the run states it
        hw = replace(hw, optimizer_moments=str(point["optimizer_moments"]))
    recompute = point["recompute"]
    micro_batch = point.get("micro_batch")
    request = LayoutRequest(
        model,
        int(point["global_batch"]),
        tensor=int(point["tensor"]),
        pipeline=int(point["pipeline"]),
        context=int(point["context"]),
        expert=int(point["expert"]),
        sharding=point["sharding"],
        micro_batch=None if micro_batch is None else int(micro_batch),
        recompute=None if recompute == "Auto" else recompute,
        expert_overlap=str(point.get("expert_overlap", "None")),
        expert_dispatch=str(point.get("expert_dispatch", "AllToAll")),
        virtual_stages=int(point.get("virtual", 1)),
        # Forced balance (Megatron-Core's --moe-router-force-load-balancing, which benchmarks
        # set): every expert takes the mean, the load a capacity factor of 1 bounds it to.
        capacity_factor=1.0 if point.get("force_balanced") else None,
    )
    layout = search_layouts(request, hw).chosen
    return layout.tokens_per_second / (hosts * host.count)


def _implied_sync_seconds(point: dict[str, Any], catalog: Catalog) -> float:
    """The MoE host sync a row implies: the seconds a layer and micro-batch at which the engine
    predicts the row's published throughput (bisection: more sync, fewer tokens)."""
    published = float(point["published_tokens_per_second_per_gpu"])
    low, high = 0.0, 0.05
    for _ in range(40):
        mid = 0.5 * (low + high)
        if predicted_tokens_per_gpu(point, catalog, mid) > published:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def _implied_syncs(data: dict[str, Any], catalog: Catalog) -> list[tuple[dict[str, Any], float]]:
    """Each ``role: fitted`` training row of the sync (no other ``fit``) with the sync it
    implies (computed once a row)."""
    rows = [p for p in data.get("training", []) if p.get("role") == FITTED and "fit" not in p]
    return [(p, _implied_sync_seconds(p, catalog)) for p in rows]


# The rows that fit engine.frameworks.MEGATRON_ONE_F_ONE_B_REALISED: ``fit: expert_overlap``.
OVERLAP_FIT = "expert_overlap"


def implied_overlap_share(point: dict[str, Any], catalog: Catalog) -> float:
    """The share of OneFOneB's ideal hiding a run realises: where its published step lies between
    the engine's step with none of the hiding (0) and with all of it (1); the step is linear in
    it at the run's layout."""
    step = {
        share: 1.0 / predicted_tokens_per_gpu(point, catalog, one_f_one_b_realised=share)
        for share in (0.0, 1.0)
    }
    published = 1.0 / float(point["published_tokens_per_second_per_gpu"])
    return (step[0.0] - published) / (step[0.0] - step[1.0])


def overlap_runs(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The training rows under OneFOneB that check or fit the realised share (GPT-OSS-120B's
    left out: its step is not explained, the rows say why)."""
    data = data if data is not None else load_points(MOE_POINTS)
    return [
        p
        for p in data.get("training", [])
        if p.get("expert_overlap") == "OneFOneB" and p.get("model") != "gpt-oss-120b"
    ]


def overlap_realised_fit(
    points: dict[str, Any] | None = None, catalog: Catalog | None = None
) -> tuple[float, int]:
    """MEGATRON_ONE_F_ONE_B_REALISED from its ``fit: expert_overlap`` rows: the median of the
    share each implies, clamped to [0, 1] (rounded to 0.01), and how many rows."""
    catalog = catalog or DEFAULT_CATALOG
    shares = [
        implied_overlap_share(p, catalog)
        for p in overlap_runs(points)
        if p.get("role") == FITTED and p.get("fit") == OVERLAP_FIT
    ]
    return round(min(max(statistics.median(shares), 0.0), 1.0), 2), len(shares)


def moe_sync_fit(
    points: dict[str, Any] | None = None,
    catalog: Catalog | None = None,
    leave_out: str | None = None,
) -> tuple[float, int]:
    """engine.frameworks.MEGATRON_MOE_SYNC_SECONDS from the ``role: fitted`` training rows: the
    mean of the sync each implies, and how many rows; ``leave_out``: without that source's rows
    (a row's ``fit_source``)."""
    catalog = catalog or DEFAULT_CATALOG
    data = points if points is not None else load_points(MOE_POINTS)
    implied = [s for p, s in _implied_syncs(data, catalog) if p.get("fit_source") != leave_out]
    return statistics.fmean(implied), len(implied)


def moe_sync_leave_one_out(
    points: dict[str, Any] | None = None, catalog: Catalog | None = None
) -> list[tuple[str, float, float, int, float]]:
    """Each source of the fit left out: (source, fitted, refitted, its rows, their median
    |error| under the refit)."""
    catalog = catalog or DEFAULT_CATALOG
    data = points if points is not None else load_points(MOE_POINTS)
    implied = _implied_syncs(data, catalog)
    whole = statistics.fmean(s for _, s in implied)
    out = []
    for source in sorted({p["fit_source"] for p, _ in implied}):
        refit = statistics.fmean(s for p, s in implied if p["fit_source"] != source)
        own = [p for p, _ in implied if p["fit_source"] == source]
        errors = [
            abs(
                predicted_tokens_per_gpu(p, catalog, refit)
                / float(p["published_tokens_per_second_per_gpu"])
                - 1
            )
            for p in own
        ]
        out.append((source, whole, refit, len(own), statistics.median(errors)))
    return out


def overlap_leave_one_out(
    points: dict[str, Any] | None = None, catalog: Catalog | None = None
) -> list[tuple[str, float, float, int, float]]:
    """The overlap fit's one source left out (the schedule's ideal hiding, 1, in its place): its
    rows and the checked ones, (source, fitted, refit, rows, their median |error| under it)."""
    catalog = catalog or DEFAULT_CATALOG
    fitted = MEGATRON_ONE_F_ONE_B_REALISED  # its fit (a test keeps them equal)
    runs = overlap_runs(points)
    out = []
    for label, rows in (
        (
            "Megatron-Bridge 26.06 (OneFOneB)",
            [p for p in runs if p.get("fit") == OVERLAP_FIT],
        ),
        ("its checked runs (26.02-26.08)", [p for p in runs if p.get("fit") != OVERLAP_FIT]),
    ):
        errors = [
            abs(
                predicted_tokens_per_gpu(p, catalog, one_f_one_b_realised=1.0)
                / float(p["published_tokens_per_second_per_gpu"])
                - 1
            )
            for p in rows
        ]
        out.append((label, fitted, 1.0, len(rows), statistics.median(errors)))
    return out
