"""`ringmaster plan FILE [-o table|json] [--sweep FIELD=RANGE] [--plot FILE.png] [--profile FILE]`

Reads the YAML a user applies (one or more documents) and prints what the operator would decide,
with no cluster: the dry run of the operator's decision. Bad input prints one line naming the
field and exits with status 2; never a traceback.

JSON (``-o json``): one object per document (a list when the file holds several). TrainingJob:
``kind, name, chosenStrategy, strategies{Ring, ReductionServer}`` (each with stepSeconds,
communicationSeconds, samplesPerSecond, busBandwidthGBps, bottleneck, costPerHourUSD; the
reduction server also reducers, reducerMachineType, costOptimalReducers). InferenceEndpoint:
``kind, name, replicas, batchSize, perReplicaRequestsPerSecond, p99LatencyMilliseconds,
bottleneck, costPerHourUSD``. Both also ``warnings``: implausible but valid inputs, each
``{field, reason, message}`` (planning/plausibility.py), also printed under the table. Further keys
may be added; these never change meaning.

``--sweep`` JSON: ``{kind, name, sweep: {field, points}}``; an LLM endpoint's points are each the
plan's own JSON at that value (with its ``warnings``), or ``{FIELD: value, error}`` where the API
or the engine refuses the spec there (planning/sweep.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ringmaster.api import TrainingPlan
from ringmaster.api.manifest import KubectlYamlLoader
from ringmaster.engine.hardware import Catalog
from ringmaster.planning import render
from ringmaster.planning.alternatives import plan_candidates, render_choices
from ringmaster.planning.catalog import choose_pool_profiles, with_pool_profiles
from ringmaster.planning.layouts import layout_json
from ringmaster.planning.multislice import render_slice_scaling, slice_scaling
from ringmaster.planning.placement import render_placement
from ringmaster.planning.plans import (
    InferenceReport,
    LlmInferenceReport,
    PlanError,
    TrainingReport,
    _sig,
    _strategy_json,
    active_catalog,
    inference_inputs,
    plan_inference,
    plan_training,
    training_inputs,
)
from ringmaster.planning.plausibility import Implausible, inference_warnings, training_warnings
from ringmaster.planning.sweep import (
    LayoutPoint,
    LlmEndpointPoint,
    Sweep,
    parse_sweep,
    sweep_inference,
    sweep_layouts,
    sweep_llm_endpoint,
    sweep_training,
)

EXIT_USAGE = 2
EXIT_INTERNAL = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="manifest(s) to plan; - reads stdin")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--sweep",
        metavar="FIELD=RANGE",
        help="one plan per value, e.g. workers=1..64, reducers=1..32, "
        "targetRequestsPerSecond=1000,2000,4000, batchSizePerAccelerator=8..256*2",
    )
    parser.add_argument("--plot", metavar="FILE.png", help="draw the sweep (needs matplotlib)")
    parser.add_argument(
        "--jobs-sharing-pool",
        metavar="N",
        type=int,
        default=1,
        help="plan a job that names a shared ReductionServerPool as one of N jobs running on it "
        "at once (it gets 1/N of the reducers' bandwidth, as the operator plans it)",
    )
    parser.add_argument(
        "--cluster-calibration",
        metavar="FILE",
        help="the operator's calibration ConfigMap (kubectl get cm ringmaster-calibration -o "
        "yaml) or its calibration.json: show each training plan with the correction the "
        "operator would apply beside it (docs/progress.md)",
    )
    parser.add_argument(
        "--catalog",
        metavar="FILE",
        help="a hardware catalog file, YAML or JSON, added to the built-in catalog "
        "(docs/catalog.md; default: $RINGMASTER_CATALOG)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        action="append",
        help="plan a profiled pool on what was measured there (docs/pool-profiles.md): a "
        "PoolProfile (kubectl get poolprofile NAME -o yaml; a List of them works too), or its "
        "pods' results as a JSON/YAML list with --profile-machine-type; may repeat",
    )
    parser.add_argument(
        "--profile-machine-type",
        metavar="MACHINE_TYPE",
        help="the machine type of the hosts a --profile results list was measured on",
    )


class UsageError(Exception):
    """A bad-input error; the message is the one line the user sees."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def read_input(path: str) -> tuple[str, str]:
    """(text, source) of a manifest file, ``-`` for stdin; UsageError where it cannot be read."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a manifest file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


def _plans(text: str, source: str, catalog: Catalog, jobs_sharing_pool: int = 1) -> list[Any]:
    # pydantic only when planning
    from ringmaster.api import InferenceEndpointSpec, ManifestError, TrainingJobSpec, load_manifests

    try:
        manifests = load_manifests(text, source=source)
    except ManifestError as exc:
        raise UsageError(str(exc)) from None
    if not manifests:
        raise UsageError(f"{source}: no TrainingJob or InferenceEndpoint documents")
    out: list[Any] = []
    for m in manifests:
        if isinstance(m.spec, TrainingJobSpec):
            settings = m.spec.communication.reduction_server
            shared = settings is not None and settings.pool_name is not None
            share = 1.0 / jobs_sharing_pool if shared else 1.0
            report = plan_training(
                m.spec, name=m.name, namespace=m.namespace, catalog=catalog, reducer_share=share
            )
            if m.spec.accelerator.alternatives:
                ranking = plan_candidates(m.spec, _status_planner(catalog, share))
                report = replace(report, accelerators=ranking)
            out.append((m, report))
        elif isinstance(m.spec, InferenceEndpointSpec):
            out.append(
                (m, plan_inference(m.spec, name=m.name, namespace=m.namespace, catalog=catalog))
            )
        else:
            out.append((m, None))
    return out


def _status_planner(catalog: Catalog, share: float) -> Callable[[Any], TrainingPlan]:
    """A TrainingJob spec -> its status.plan, as the operator plans it (for the alternatives)."""

    def plan(spec: Any) -> TrainingPlan:
        return plan_training(spec, catalog=catalog, reducer_share=share).to_status()

    return plan


def _pool_json(m: Any, catalog: Catalog) -> dict[str, Any]:
    machine = catalog.machine(m.spec.machine_type)
    replicas = m.spec.replicas
    gbps = machine.nic_bandwidth * 8 / 1e9
    return {
        "kind": m.kind,
        "name": m.name,
        "replicas": replicas,
        "machineType": machine.name,
        "aggregateBandwidthGbps": None if replicas is None else _sig(replicas * gbps),
        "costPerHourUSD": None if replicas is None else _sig(replicas * machine.price_per_hour),
    }


def _pool_text(m: Any, catalog: Catalog) -> str:
    d = _pool_json(m, catalog)
    if d["replicas"] is None:
        return (
            f"ReductionServerPool {m.name}: {d['machineType']} reducers, sized by the jobs that "
            "name it (see their plans)"
        )
    return (
        f"ReductionServerPool {m.name}: {d['replicas']} x {d['machineType']}, "
        f"{d['aggregateBandwidthGbps']:g} Gbps aggregate, {render.money(d['costPerHourUSD'])}/hour"
    )


def _sweep_output(
    plans: list[Any], sweep: Sweep, catalog: Catalog, fmt: str, plot: str | None
) -> str:
    targets = [(m, p) for m, p in plans if p is not None]
    if len(targets) != 1:
        raise UsageError("--sweep: the file must hold exactly one TrainingJob or InferenceEndpoint")
    m, plan = targets[0]
    if isinstance(plan, LlmInferenceReport):
        epoints = sweep_llm_endpoint(m.spec, m.name, sweep, catalog)
        if plot:
            _plot_llm_endpoint(plot, m.name, sweep.field, epoints)
        if fmt == "json":
            return _sweep_json(m, sweep, [_llm_point_json(sweep.field, pt) for pt in epoints])
        return render.render_llm_endpoint_sweep(m.name, sweep.field, epoints)
    if isinstance(plan, TrainingReport) and plan.layout is not None:
        lpoints = sweep_layouts(m.spec, sweep, catalog)
        if plot:
            _plot_layouts(plot, m.name, sweep.field, lpoints)
        if fmt == "json":
            return _sweep_json(m, sweep, [_layout_point_json(sweep.field, pt) for pt in lpoints])
        return render.render_layout_sweep(m.name, sweep.field, lpoints)
    if isinstance(plan, TrainingReport):
        reducer_side = plan.prediction.strategies.get("ReductionServer")
        share = (reducer_side.reducer_share if reducer_side else None) or 1.0
        inputs = training_inputs(m.spec, reducer_share=share)
        tpoints = sweep_training(inputs, sweep, catalog)
        if plot:
            _plot_training(plot, m.name, sweep.field, tpoints)
        if fmt == "json":
            return _sweep_json(
                m,
                sweep,
                [
                    {
                        sweep.field: v,
                        "chosenStrategy": p.chosen_strategy,
                        "strategies": {k: _strategy_json(s) for k, s in p.strategies.items()},
                    }
                    for v, p in tpoints
                ],
            )
        return render.render_training_sweep(m.name, sweep.field, tpoints)
    ipoints = sweep_inference(inference_inputs(m.spec), sweep, catalog)
    if plot:
        _plot_inference(plot, m.name, sweep.field, ipoints)
    if fmt == "json":
        pts = []
        for v, p in ipoints:
            d = InferenceReport(m.name, m.namespace, str(m.spec.precision), p).to_json()
            pts.append({sweep.field: v, **{k: d[k] for k in list(d)[2:]}})
        return _sweep_json(m, sweep, pts)
    return render.render_inference_sweep(m.name, sweep.field, ipoints)


def _sweep_json(m: Any, sweep: Sweep, points: list[dict[str, Any]]) -> str:
    return json.dumps(
        {"kind": m.kind, "name": m.name, "sweep": {"field": sweep.field, "points": points}},
        indent=2,
    )


def _llm_point_json(field: str, pt: LlmEndpointPoint) -> dict[str, Any]:
    if pt.report is None:
        return {field: pt.value, "error": pt.error}
    return {
        field: pt.value,
        **_without_identity(pt.report.to_json()),
        "warnings": [w.to_json() for w in pt.warnings],
    }


def _without_identity(plan: dict[str, Any]) -> dict[str, Any]:
    """A plan's JSON without the keys every point of a sweep shares (kind, name, namespace)."""
    return {k: v for k, v in plan.items() if k not in ("kind", "name", "namespace")}


def _layout_point_json(field: str, pt: LayoutPoint) -> dict[str, Any]:
    out: dict[str, Any] = {field: pt.value, "accelerators": pt.accelerators}
    if pt.report is None or pt.report.layout is None:
        return {**out, "error": pt.error}
    c = pt.report.layout.chosen
    cost = pt.report.chosen.cost_per_hour_usd
    return {
        **out,
        "layout": layout_json(pt.report.layout)["layout"],
        "fits": pt.report.layout.search.fits,
        "chosenStrategy": pt.report.chosen_strategy,
        "stepSeconds": _sig(c.step_seconds),
        "tokensPerSecond": _sig(c.tokens_per_second),
        "mfu": _sig(c.mfu, 4),
        "costPerHourUSD": _sig(cost),
        "costPerMillionTokensUSD": _sig(render.per_million_tokens(cost, c.tokens_per_second)),
    }


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'ringmaster[plot]'") from None
    return plt


def _plot_training(path: str, name: str, field: str, points: list[Any]) -> None:
    plt = _pyplot()
    xs = [v for v, _ in points]
    has_batch = points[0][1].strategies["Ring"].samples_per_second is not None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for strategy in ("Ring", "ReductionServer"):
        ys = [
            (s.samples_per_second if has_batch else s.step_seconds)
            for _, p in points
            if (s := p.strategies.get(strategy)) is not None
        ]
        if len(ys) == len(xs):
            ax.plot(xs, ys, marker="o", markersize=3, label=strategy)
    ax.set_xlabel(field)
    ax.set_ylabel("samples per second" if has_batch else "step seconds")
    ax.set_title(f"TrainingJob {name}: predicted {'throughput' if has_batch else 'step time'}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    _save(fig, plt, path)


def _plot_layouts(path: str, name: str, field: str, points: list[LayoutPoint]) -> None:
    """Tokens/s and MFU (top), $/hour and $ per million tokens (bottom) against the accelerator
    count, each point labelled with the layout chosen there."""
    plt = _pyplot()
    planned = [pt for pt in points if pt.report is not None and pt.report.layout is not None]
    xs = [pt.accelerators for pt in planned]
    layouts = [pt.report.layout.chosen for pt in planned]  # type: ignore[union-attr]
    costs = [pt.report.chosen.cost_per_hour_usd for pt in planned]  # type: ignore[union-attr]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    top.plot(xs, [c.tokens_per_second for c in layouts], marker="o", markersize=3)
    top.set_ylabel("tokens per second")
    mfu = top.twinx()
    mfu.plot(xs, [100 * c.mfu for c in layouts], color="tab:orange", marker=".", markersize=3)
    mfu.set_ylabel("MFU %", color="tab:orange")
    for x, c in zip(xs, layouts, strict=True):
        top.annotate(c.name, (x, c.tokens_per_second), fontsize=6, rotation=45)
    unfit = [(x, c.tokens_per_second) for x, c in zip(xs, layouts, strict=True) if not c.fits]
    if unfit:
        top.scatter(*zip(*unfit, strict=True), marker="x", color="tab:red", label="does not fit")
        top.legend(loc="lower right")
    bottom.plot(
        xs,
        [
            render.per_million_tokens(k, c.tokens_per_second)
            for k, c in zip(costs, layouts, strict=True)
        ],
        marker="o",
        markersize=3,
        label="$ per million tokens",
    )
    bottom.set_ylabel("$ per million tokens")
    hourly = bottom.twinx()
    hourly.plot(xs, costs, color="tab:green", marker=".", markersize=3)
    hourly.set_ylabel("$ per hour", color="tab:green")
    bottom.set_xlabel(f"accelerators ({field} swept)")
    top.set_title(f"TrainingJob {name}: predicted throughput and cost, layout planned per point")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    _save(fig, plt, path)


def _plot_inference(path: str, name: str, field: str, points: list[Any]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([v for v, _ in points], [p.replicas for _, p in points], marker="o", markersize=3)
    ax.set_xlabel(field)
    ax.set_ylabel("replicas")
    ax.set_title(f"InferenceEndpoint {name}: replicas for the target")
    ax.grid(True, alpha=0.3)
    _save(fig, plt, path)


def _plot_llm_endpoint(path: str, name: str, field: str, points: list[LlmEndpointPoint]) -> None:
    """Replicas (top) and $/hour with $ per million tokens at the target (bottom) against the
    swept field, from each point's plan as the endpoint runs (disaggregated or not); points
    without a plan are left out."""
    plt = _pyplot()
    planned = [(pt, pt.report.to_json()) for pt in points if pt.report is not None]
    xs = [pt.value for pt, _ in planned]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(xs, [plan["replicas"] for _, plan in planned], marker="o")
    top.set_ylabel("replicas")
    bottom.plot(xs, [plan["costPerHourUSD"] for _, plan in planned], marker="o")
    bottom.set_ylabel("$ per hour")
    per_token = bottom.twinx()
    per_token.plot(
        xs,
        [
            render.per_million_tokens(plan["costPerHourUSD"], pt.target_output_tokens_per_second)
            if plan["feasible"] and pt.target_output_tokens_per_second
            else None
            for pt, plan in planned
        ],
        color="tab:green",
        marker=".",
    )
    per_token.set_ylabel("$ per million tokens at the target", color="tab:green")
    bottom.set_xlabel(field)
    top.set_title(f"InferenceEndpoint {name}: planned whole at each {field}", fontsize=9)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    _save(fig, plt, path)


def _plot_load_curve(path: str, plan: LlmInferenceReport) -> None:
    """TTFT and TPOT (p50, p99) against the arrival rate per replica, each with its p99 target
    line, the sustainable rate and the offline maximum."""
    p = plan.prediction
    if not p.load_curve:
        raise UsageError(f"--plot: {plan.name}: no load curve (the model does not fit: {p.reason})")
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharex=True)
    rates = [c.requests_per_second for c in p.load_curve]
    panels = (
        (
            "TTFT",
            plan.ttft_target_seconds,
            [c.ttft_p50_seconds for c in p.load_curve],
            [c.ttft_p99_seconds for c in p.load_curve],
        ),
        (
            "TPOT",
            plan.tpot_target_seconds,
            [c.tpot_p50_seconds for c in p.load_curve],
            [c.tpot_p99_seconds for c in p.load_curve],
        ),
    )
    for ax, (what, target, p50, p99) in zip(axes, panels, strict=True):
        ax.plot(rates, [v * 1e3 for v in p99], marker="o", markersize=3, label=f"{what} p99")
        ax.plot(rates, [v * 1e3 for v in p50], marker=".", markersize=3, label=f"{what} p50")
        if target is not None:
            ax.axhline(target * 1e3, color="red", linestyle="--", label=f"{what} p99 target")
        if p.requests_per_second_per_replica > 0:
            ax.axvline(
                p.requests_per_second_per_replica,
                color="green",
                linestyle=":",
                label="sustainable rate (HPA target)",
            )
        ax.axvline(
            p.saturation_requests_per_second, color="gray", linestyle=":", label="offline maximum"
        )
        ax.set_yscale("log")
        ax.set_xlabel("requests/s per replica")
        ax.set_ylabel(f"{what} ms")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"InferenceEndpoint {plan.name}: load curve per replica (max-num-seqs {p.max_num_seqs})"
    )
    _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str) -> None:
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise UsageError(f"--plot: {path}: cannot write: {exc.strerror}") from None
    finally:
        plt.close(fig)


def _warnings(m: Any, plan: Any, catalog: Catalog) -> list[Implausible]:
    if isinstance(plan, TrainingReport):
        return training_warnings(m.spec, plan, catalog)
    if isinstance(plan, InferenceReport | LlmInferenceReport):
        return inference_warnings(m.spec, plan, catalog)
    return []


def _calibration(path: str | None) -> Any:
    """The cluster calibration from a file, or None."""
    if path is None:
        return None
    import yaml

    from ringmaster.observe.calibration import ClusterCalibration

    text, source = read_input(path)
    try:
        return ClusterCalibration.from_config_map_or_file(yaml.load(text, Loader=KubectlYamlLoader))
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"{source}: not a cluster calibration: {exc}") from None


def _corrected(m: Any, plan: Any, calibration: Any) -> dict[str, Any] | None:
    """The correction the operator would apply to a training plan, beside it, never instead."""
    if calibration is None or not isinstance(plan, TrainingReport):
        return None
    import datetime as dt

    from ringmaster.observe.calibration import workload_kind

    status = plan.to_status()
    kind = workload_kind(m.spec.model.architecture is not None)
    correction = calibration.correction(status.machine_type, kind, dt.datetime.now(dt.UTC))
    if correction is None or not status.step_seconds:
        return {"calibration": f"none for {status.machine_type} ({kind})"}
    return {
        "calibratedStepSeconds": round(status.step_seconds * correction.factor, 6),
        "calibration": correction.describe(),
    }


def _calibration_line(corrected: dict[str, Any] | None, plan: Any) -> list[str]:
    if corrected is None:
        return []
    if "calibratedStepSeconds" not in corrected:
        return [f"cluster calibration: {corrected['calibration']}"]
    step = plan.to_status().step_seconds
    return [
        f"cluster calibration: {corrected['calibratedStepSeconds']:.4g} s/step "
        f"({corrected['calibration']}); uncorrected {step:.4g} s/step"
    ]


def _render(plans: list[Any], catalog: Catalog, fmt: str, calibration: Any = None) -> str:
    if fmt == "json":
        docs = [
            _pool_json(m, catalog)
            if plan is None
            else {
                **plan.to_json(),
                "warnings": [w.to_json() for w in _warnings(m, plan, catalog)],
                **({"clusterCalibration": c} if (c := _corrected(m, plan, calibration)) else {}),
            }
            for m, plan in plans
        ]
        return json.dumps(docs[0] if len(docs) == 1 else docs, indent=2)
    blocks = []
    for m, plan in plans:
        if isinstance(plan, TrainingReport):
            block = render.render_training(plan)
            if plan.slices > 1:
                unit = "tokens" if plan.layout is not None else "samples"
                scaling = slice_scaling(m.spec, catalog)
                block += "\n" + render_slice_scaling(scaling, unit)
            if plan.placement is not None:
                block += "\n" + render_placement(plan.placement)
            if plan.accelerators is not None:
                block += "\n" + render_choices(plan.accelerators)
        elif isinstance(plan, InferenceReport):
            block = render.render_inference(plan)
        elif isinstance(plan, LlmInferenceReport):
            block = render.render_llm_inference(plan)
        else:
            block = _pool_text(m, catalog)
        warnings = [f"warning: {w}" for w in _warnings(m, plan, catalog)]
        corrected = _calibration_line(_corrected(m, plan, calibration), plan)
        blocks.append("\n".join([block, *corrected, *warnings]))
    return "\n\n".join(blocks)


def _profiles(paths: list[str] | None, machine_type: str | None, catalog: Catalog) -> Catalog:
    """``catalog`` with the pools of the --profile files planned on their profiles (the
    operator's rule: several pools of one machine type, the slowest)."""
    if not paths:
        if machine_type is not None:
            raise UsageError("--profile-machine-type: give --profile FILE too")
        return catalog
    import yaml

    from ringmaster.profiling.aggregate import ProfileError, measurements_from_document

    measured = []
    for path in paths:
        text, source = read_input(path)
        try:
            data = yaml.load(text, Loader=KubectlYamlLoader)
        except yaml.YAMLError as exc:
            raise UsageError(f"{source}: invalid YAML: {str(exc).splitlines()[0]}") from None
        try:
            measured += measurements_from_document(
                data,
                where=source,
                catalog=catalog,
                machine_type=machine_type,
                pool=Path(source).stem,
            )
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    return with_pool_profiles(catalog, choose_pool_profiles(measured))


def _unused_profiles(plans: list[Any], catalog: Catalog) -> list[str]:
    """One line for each --profile no plan of the file runs on (its machine type differs)."""
    words = json.dumps([plan.to_json() for _, plan in plans if plan is not None])
    return [
        f"ringmaster plan: note: --profile: pool {m.pool} ({m.machine_type}, {m.accelerator}) "
        "is not where any plan here runs; it changes nothing"
        for m in catalog.profiles.values()
        if f"pool {m.pool}," not in words
    ]


def run(args: argparse.Namespace) -> int:
    try:
        sweep = parse_sweep(args.sweep) if args.sweep else None
        catalog = active_catalog(args.catalog)
        catalog = _profiles(
            getattr(args, "profile", None), getattr(args, "profile_machine_type", None), catalog
        )
        text, source = read_input(args.file)
        if args.jobs_sharing_pool < 1:
            raise UsageError("--jobs-sharing-pool: give a count of 1 or more")
        plans = _plans(text, source, catalog, args.jobs_sharing_pool)
        for line in _unused_profiles(plans, catalog):
            print(line, file=sys.stderr)
        calibration = _calibration(args.cluster_calibration)
        if sweep is not None:
            out = _sweep_output(plans, sweep, catalog, args.output, args.plot)
        else:
            if args.plot:
                llm = [plan for _, plan in plans if isinstance(plan, LlmInferenceReport)]
                if not llm:
                    raise UsageError(
                        "--plot draws a sweep (give --sweep FIELD=RANGE too) or an LLM "
                        "endpoint's load curve"
                    )
                _plot_load_curve(args.plot, llm[0])
            out = _render(plans, catalog, args.output, calibration)
    except (UsageError, PlanError) as exc:
        print(f"ringmaster plan: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug, not bad input: still one line, and a different status
        print(
            f"ringmaster plan: internal error: {type(exc).__name__}: {_one_line(str(exc))}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    try:
        print(out)
    except BrokenPipeError:  # `ringmaster plan ... | head`
        sys.stderr.close()
        return 0
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0
