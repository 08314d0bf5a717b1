"""Tables for `ringmaster plan -o table`: aligned columns, units, the bottleneck, the cost."""

from __future__ import annotations

from collections.abc import Sequence

from ringmaster.engine.frameworks import moe_sync_paid, moe_sync_source
from ringmaster.engine.inference import InferencePrediction
from ringmaster.engine.llm_serving import LlmServingPrediction
from ringmaster.engine.training import REDUCTION_SERVER, RING, TrainingPrediction
from ringmaster.planning.layouts import LayoutPlan
from ringmaster.planning.plans import (
    InferenceReport,
    LlmInferenceReport,
    TrainingReport,
    gradient_all_reduce,
)
from ringmaster.planning.sweep import LayoutPoint, LlmEndpointPoint


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """Columns padded to their widest cell; numeric columns (``right``) right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"${x:,.2f}" if x >= 1 else f"${x:.4g}"


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.3g} MB"


def render_training(plan: TrainingReport) -> str:
    if plan.layout is not None:
        return render_llm_training(plan, plan.layout)
    p = plan.prediction
    src = {
        "measured": "computeSecondsPerStep",
        "roofline": "flopsPerSample roofline",
        "architecture": "the architecture's FLOPs, with the layout",
    }.get(p.compute_source, "none given")
    if p.compute_precision:
        src += f", {p.compute_precision}"
    lines = [
        f"TrainingJob {plan.name}: {p.workers} x {p.machine_type} "
        f"({p.per_worker} x {p.accelerator} each), gradients {_size(p.gradient_bytes)}, "
        f"compute {p.compute_seconds:.4g} s/step ({src})",
    ]
    header = (
        "strategy",
        "algorithm",
        "step s",
        "comm s",
        "exposed s",
        "samples/s",
        "scaling",
        "busbw GB/s",
        "$/hour",
        "$/1k samples",
        "bottleneck",
    )
    rows = []
    for name, s in p.strategies.items():
        mark = " *" if name == p.chosen_strategy else ""
        rows.append(
            (
                name + mark,
                s.algorithm + (f"/{s.protocol}" if s.protocol else ""),
                num(s.step_seconds),
                num(s.communication_seconds),
                num(s.exposed_communication_seconds),
                num(s.samples_per_second, ",.0f"),
                f"{s.scaling_efficiency:.0%}",
                num(s.bus_bandwidth_gbps, ".3g"),
                money(s.cost_per_hour_usd),
                money(s.cost_per_1000_samples_usd),
                s.bottleneck,
            )
        )
    lines.append(table(header, rows, right=set(range(2, 10))))
    rs = p.strategies.get(REDUCTION_SERVER)
    if rs is not None:
        share = (
            ""
            if not rs.reducer_share or rs.reducer_share >= 1
            else (f", {rs.reducer_share:.0%} of a shared pool")
        )
        lines.append(
            f"reducers: {rs.reducers} x {rs.reducer_machine_type} "
            f"(Vertex rule: {rs.vertex_reducers}; cheapest per sample: {rs.cost_optimal_reducers}"
            f"{share})"
        )
    lines.append(_choice(p))
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def per_million_tokens(cost_per_hour: float, tokens_per_second: float) -> float | None:
    """USD per million tokens trained at ``tokens_per_second`` on hardware costing
    ``cost_per_hour``."""
    if tokens_per_second <= 0:
        return None
    return cost_per_hour / 3600.0 / tokens_per_second * 1e6


def _data_parallel(layout: LayoutPlan) -> str:
    """How the layout's replicas combine gradients, in words."""
    c = layout.chosen
    if c.data <= 1:
        return "none (one replica, DP 1)"
    if not gradient_all_reduce(c):
        return f"reduce-scatter + all-gather over {c.data} replicas (sharding Full)"
    return f"gradient all-reduce over {c.data} replicas (sharding {c.sharding})"


def render_llm_training(plan: TrainingReport, layout: LayoutPlan) -> str:
    """A TrainingJob with an architecture: the layout, then the figures an LLM run is judged by
    (tokens/s, MFU, step time, $ per million tokens). Ring and ReductionServer rows appear only
    where a reduction server could replace a gradient all-reduce; otherwise one row."""
    p = plan.prediction
    c = layout.chosen
    accelerators = p.workers * p.per_worker
    lines = [
        f"TrainingJob {plan.name}: {p.workers} x {p.machine_type} ({p.per_worker} x "
        f"{p.accelerator} each, {accelerators} accelerators), {layout.parameters / 1e9:.3g}B "
        f"parameters, global batch {layout.global_batch} sequences",
        render_layout(layout),
        f"data-parallel: {_data_parallel(layout)}",
    ]
    compare = len(p.strategies) > 1
    header = (
        *(("strategy",) if compare else ()),
        "step s",
        "tokens/s",
        "MFU",
        "DP comm s",
        "DP exposed s",
        "$/hour",
        "$/M tokens",
        "bottleneck",
    )
    rows = []
    for name, s in p.strategies.items():
        # Tokens and MFU scale with 1 / step time from the chosen layout's figures.
        ratio = c.step_seconds / s.step_seconds if s.step_seconds > 0 else 0.0
        mark = " *" if name == p.chosen_strategy else ""
        rows.append(
            (
                *((name + mark,) if compare else ()),
                num(s.step_seconds),
                num(c.tokens_per_second * ratio, ",.0f"),
                f"{c.mfu * ratio:.1%}",
                num(s.communication_seconds, ".3g"),
                num(s.exposed_communication_seconds, ".3g"),
                money(s.cost_per_hour_usd),
                money(per_million_tokens(s.cost_per_hour_usd, c.tokens_per_second * ratio)),
                s.bottleneck,
            )
        )
    first = 1 if compare else 0
    lines.append(table(header, rows, right=set(range(first, first + 7))))
    rs = p.strategies.get(REDUCTION_SERVER)
    if rs is not None:
        lines.append(
            f"reducers: {rs.reducers} x {rs.reducer_machine_type} (Vertex rule: "
            f"{rs.vertex_reducers})"
        )
        lines.append(_choice(p))
    lines.append(render_alternatives(layout))
    # The layout's own note repeats the layout line above.
    lines += [f"note: {n}" for n in p.notes if not n.startswith("layout: ")]
    return "\n".join(line for line in lines if line)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f}"


def render_layout(plan: LayoutPlan) -> str:
    """The layout, its memory per accelerator and where its step time goes."""
    c = plan.chosen
    verdict = "fits" if plan.search.fits else "DOES NOT FIT"
    lines = [
        f"layout: {c.name} ({c.describe()}), {c.micro_batches} micro-batches per step; {verdict} "
        f"({plan.search.evaluated} layouts evaluated)",
        f"memory per accelerator GiB: weights {_gib(c.weights_bytes)}, gradients "
        f"{_gib(c.gradients_bytes)}, optimizer {_gib(c.optimizer_bytes)}, activations "
        f"{_gib(c.activations_bytes)}, reserve {_gib(c.reserve_bytes)} = "
        f"{_gib(c.total_bytes)} of {_gib(c.capacity_bytes)}",
        f"step {c.step_seconds:.4g} s: compute {c.compute_seconds:.4g}, tensor-parallel "
        f"{c.tensor_parallel_seconds:.3g}, bubble {c.bubble_seconds:.3g}, pipeline sends "
        f"{c.pipeline_send_seconds:.3g}, data-parallel exposed "
        f"{c.exposed_data_parallel_seconds:.3g}, overlap interference "
        f"{c.overlap_interference_seconds:.3g}, optimizer {c.optimizer_seconds:.3g}",
        f"compute by part ({plan.framework_label or 'framework'}): GEMMs {c.gemm_seconds:.4g}, "
        f"attention {c.attention_seconds:.3g}, memory-bound {c.memory_bound_seconds:.3g}, loss "
        f"{c.loss_seconds:.3g}, host gaps {c.host_gap_seconds:.3g}"
        + (
            f", activation offload {c.activation_offload_seconds:.3g}"
            if c.host_offload_bytes > 0
            else ""
        ),
    ]
    if c.host_offload_bytes > 0:
        host_room = (
            f" of {_gib(c.host_capacity_bytes)}" if c.host_capacity_bytes != float("inf") else ""
        )
        lines.append(
            f"host memory per accelerator GiB: offloaded activations "
            f"{_gib(c.host_offload_bytes)}{host_room} (recompute {c.recompute}"
            + (", every layer's input too" if plan.hardware.offload_layer_inputs else "")
            + ")"
        )
    model = plan.model
    if model is not None and model.is_moe:
        share = c.expert_parallel_seconds / c.step_seconds if c.step_seconds > 0 else 0.0
        lines.append(
            f"mixture of experts: {model.parameters / 1e9:.4g}B total, "
            f"{model.active_parameters / 1e9:.3g}B active ({model.active_experts} of "
            f"{model.experts} experts{_shared(model.shared_experts)}, {model.moe_layers} MoE "
            f"layers); expert parallel {c.expert}; dispatch/combine all-to-all "
            f"{c.expert_parallel_seconds:.3g} s, {share:.0%} of the step{_moe_sync(plan)}"
        )
    if plan.search.reason:
        lines.append(f"does not fit: {plan.search.reason}")
    return "\n".join(lines)


def _moe_sync(plan: LayoutPlan) -> str:
    """The dropless MoE layers' host syncs the step pays (engine.frameworks), if any."""
    c = plan.chosen
    sync = moe_sync_paid(plan.hardware.framework, bool(c.pad_to_capacity), c.expert)
    if not sync:
        return ""
    return (
        f"; a dropless MoE layer's host sync {sync * 1e3:.3g} ms a layer and micro-batch, in the"
        f" host gaps ({moe_sync_source(plan.hardware.framework)})"
    )


def _shared(shared: int) -> str:
    return f" + {shared} shared" if shared else ""


def render_alternatives(plan: LayoutPlan) -> str:
    """The layouts the search set aside, and why (empty when there were none)."""
    if not plan.search.alternatives:
        return ""
    header = ("alternative", "sharding", "micro", "recompute", "step s", "GiB", "why not")
    rows = [
        (
            a.layout.name,
            a.layout.sharding,
            str(a.layout.micro_batch),
            a.layout.recompute,
            num(a.layout.step_seconds),
            _gib(a.layout.total_bytes),
            a.why,
        )
        for a in plan.search.alternatives
    ]
    return table(header, rows, right={2, 4, 5})


def _choice(p: TrainingPrediction) -> str:
    ring = p.strategies[RING]
    rs = p.strategies.get(REDUCTION_SERVER)
    if rs is None:
        return "chosen: Ring (a TPU slice all-reduces over its ICI torus)"
    faster = (ring.step_seconds - rs.step_seconds) / ring.step_seconds
    return f"chosen: {p.chosen_strategy} (reduction server {faster:+.1%} faster than ring)"


def _p99_ms(p: InferencePrediction) -> float | None:
    return None if p.p99_latency_seconds is None else p.p99_latency_seconds * 1e3


def render_inference(plan: InferenceReport) -> str:
    p: InferencePrediction = plan.prediction
    lines = [
        f"InferenceEndpoint {plan.name}: {plan.precision} on {p.machine_type}",
        table(
            (
                "replicas",
                "batch",
                "req/s per replica",
                "capacity/replica",
                "batch ms",
                "p99 ms",
                "$/hour",
                "bottleneck",
            ),
            [
                (
                    str(p.replicas),
                    str(p.batch_size),
                    num(p.per_replica_requests_per_second, ",.0f"),
                    num(p.per_replica_capacity, ",.0f"),
                    num(p.batch_seconds * 1e3, ".3g"),
                    num(
                        None if p.p99_latency_seconds is None else p.p99_latency_seconds * 1e3,
                        ".3g",
                    ),
                    money(p.cost_per_hour_usd),
                    p.bottleneck,
                )
            ],
            right=set(range(7)),
        ),
    ]
    if not p.feasible:
        lines.append(f"target NOT met: {p.reason}")
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def _ms_or_dash(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def _batch_words(p: LlmServingPrediction) -> str:
    """The batch the plan honoured: spec.maxBatchSize's cap and spec.batching."""
    kind = (
        "static batches (spec.batching Static: prefilled together, decoded to the longest)"
        if p.batching == "Static"
        else "continuous batching"
    )
    if p.max_batch_size is None:
        return f"batch: {kind}, up to {p.max_num_seqs} sequences (the engine's choice)"
    binds = (
        "the cap binds"
        if p.max_num_seqs >= p.max_batch_size
        else f"max-num-seqs {p.max_num_seqs} is below it"
    )
    return (
        f"batch: {kind}, capped at maxBatchSize {p.max_batch_size} ({binds}; the KV cache "
        f"holds {p.max_concurrent_sequences:,} sequences at mean lengths)"
    )


def render_llm_inference(plan: LlmInferenceReport) -> str:
    p = plan.prediction
    kv = f"KV cache {p.kv_cache_precision} {p.kv_cache_bytes_per_token / 1e3:,.4g} kB/token"
    tp = f"tensor parallel {p.tensor_parallel}, " if p.tensor_parallel > 1 else ""
    if p.pipeline_parallel > 1:
        tp += f"pipeline {p.pipeline_parallel}, "
    lines = [
        f"InferenceEndpoint {plan.name}: LLM in {p.precision} on {p.machine_type} ({tp}"
        f"weights {_size(p.weights_bytes_per_accelerator)} per accelerator, {kv})",
        *(
            [f"replica of {p.hosts_per_replica} hosts: {p.layout}"]
            if p.hosts_per_replica > 1 or p.pipeline_parallel > 1
            else []
        ),
        table(
            (
                "replicas",
                "req/s per replica",
                "output tok/s per replica",
                "TTFT p99 ms",
                "TPOT p99 ms",
                "max seqs (KV)",
                "max-num-seqs",
                "$/hour",
                "bottleneck",
            ),
            [
                (
                    str(p.replicas),
                    num(p.requests_per_second_per_replica, ",.4g"),
                    num(p.output_tokens_per_second_per_replica, ",.0f"),
                    _ms_or_dash(p.ttft_p99_seconds),
                    _ms_or_dash(p.tpot_p99_seconds),
                    f"{p.max_concurrent_sequences:,}",
                    str(p.max_num_seqs),
                    money(p.cost_per_hour_usd),
                    p.bottleneck,
                )
            ],
            right=set(range(8)),
        ),
    ]
    if p.max_batch_size is not None or p.batching == "Static":
        lines.append(_batch_words(p))
    if p.offline_requests_per_second > 0:
        lines.append(
            f"offline maximum per replica (no latency target): "
            f"{p.offline_output_tokens_per_second:,.0f} output tokens/s, "
            f"{p.offline_requests_per_second:,.4g} req/s (max-num-seqs {p.offline_max_num_seqs})"
        )
        fails = []
        for what, rate in (("TTFT p99", p.ttft_slo_rate), ("TPOT p99", p.tpot_slo_rate)):
            if rate is None:
                fails.append(f"{what} holds to the offline maximum")
            elif rate <= 0.0:
                fails.append(f"{what} fails at any rate")
            else:
                fails.append(f"{what} fails above {rate:,.4g} req/s per replica")
        lines.append(
            "; ".join(fails) + f" (engine settings: max-num-seqs {p.max_num_seqs}, "
            f"max-num-batched-tokens {p.max_num_batched_tokens})"
        )
    if p.load_curve:
        lines.append(
            table(
                (
                    "load",
                    "req/s",
                    "output tok/s",
                    "TTFT p50 ms",
                    "TTFT p99 ms",
                    "TPOT p50 ms",
                    "TPOT p99 ms",
                ),
                [
                    (
                        f"{c.load:.0%}",
                        num(c.requests_per_second, ",.4g"),
                        num(c.output_tokens_per_second, ",.0f"),
                        _ms_or_dash(c.ttft_p50_seconds),
                        _ms_or_dash(c.ttft_p99_seconds) + _over(c.ttft_p99_seconds, plan, "ttft"),
                        _ms_or_dash(c.tpot_p50_seconds),
                        _ms_or_dash(c.tpot_p99_seconds) + _over(c.tpot_p99_seconds, plan, "tpot"),
                    )
                    for c in p.load_curve
                ],
                right=set(range(7)),
            )
        )
    if p.max_replicas is not None and p.output_tokens_per_second_per_replica > 0:
        lines.append(
            f"within maxReplicas {p.max_replicas}: {p.max_replicas} x "
            f"{p.output_tokens_per_second_per_replica:,.0f} = "
            f"{p.max_replicas * p.output_tokens_per_second_per_replica:,.0f} output tokens/s "
            f"({p.max_replicas * p.requests_per_second_per_replica:,.4g} req/s) at the SLOs"
        )
    if not p.feasible:
        lines.append(f"target NOT met: {p.reason}")
    if plan.alternatives:
        lines.append("nearest alternatives that meet the target (Pareto set, cheapest first):")
        lines.append(
            table(
                ("change", "replicas", "TTFT p99 ms", "TPOT p99 ms", "$/hour", "fits maxReplicas"),
                [
                    (
                        a.change,
                        str(a.replicas),
                        _ms_or_dash(a.ttft_p99_seconds),
                        _ms_or_dash(a.tpot_p99_seconds),
                        money(a.cost_per_hour_usd),
                        "-"
                        if a.fits_max_replicas is None
                        else "yes"
                        if a.fits_max_replicas
                        else "no",
                    )
                    for a in plan.alternatives
                ],
                right={1, 2, 3, 4},
            )
        )
    elif not p.feasible:
        lines.append(
            "no single change (TP, precision, max-num-seqs, looser SLO, accelerator) meets it"
        )
    if p.evidence:  # what the numbers rest on, first of all the serving cell (or "extrapolated")
        lines.append(f"evidence: {p.evidence}")
    lines += [f"note: {n}" for n in p.notes]
    if plan.disaggregation is not None:
        from ringmaster.planning.render_disaggregation import render_disaggregation

        lines.append(render_disaggregation(*plan.disaggregation))
    return "\n".join(lines)


def _over(seconds: float, plan: LlmInferenceReport, which: str) -> str:
    """A mark on a load-curve value above its p99 target."""
    target = plan.ttft_target_seconds if which == "ttft" else plan.tpot_target_seconds
    return " !" if target is not None and seconds > target else ""


def render_training_sweep(
    name: str, field: str, points: Sequence[tuple[float, TrainingPrediction]]
) -> str:
    header = [field, "chosen", "ring step s", "ring samples/s", "ring $/1k"]
    has_rs = any(REDUCTION_SERVER in p.strategies for _, p in points)
    if has_rs:
        header += ["rs step s", "rs samples/s", "rs $/1k", "reducers"]
    rows = []
    for v, p in points:
        r = p.strategies[RING]
        row = [
            f"{v:g}",
            p.chosen_strategy,
            num(r.step_seconds),
            num(r.samples_per_second, ",.0f"),
            money(r.cost_per_1000_samples_usd),
        ]
        s = p.strategies.get(REDUCTION_SERVER)
        if has_rs:
            row += (
                [
                    num(s.step_seconds),
                    num(s.samples_per_second, ",.0f"),
                    money(s.cost_per_1000_samples_usd),
                    str(s.reducers),
                ]
                if s
                else ["-"] * 4
            )
        rows.append(row)
    right = set(range(len(header))) - {1}
    return f"TrainingJob {name}: sweep of {field}\n" + table(header, rows, right)


def render_layout_sweep(name: str, field: str, points: Sequence[LayoutPoint]) -> str:
    """One row per size of an LLM training job, with the layout chosen at that size."""
    header = [
        field,
        "accelerators",
        "layout",
        "sharding",
        "recompute",
        "step s",
        "tokens/s",
        "MFU",
        "$/hour",
        "$/M tokens",
        "note",
    ]
    rows = []
    for pt in points:
        head = [f"{pt.value:g}", str(pt.accelerators)]
        if pt.report is None or pt.report.layout is None:
            rows.append([*head, "-", "-", "-", "-", "-", "-", "-", "-", pt.error or ""])
            continue
        c = pt.report.layout.chosen
        cost = pt.report.chosen.cost_per_hour_usd
        note = "" if pt.report.layout.search.fits else "DOES NOT FIT"
        if pt.report.chosen_strategy == REDUCTION_SERVER:
            note = f"reduction server ({pt.report.chosen.reducers} reducers)"
        rows.append(
            [
                *head,
                c.name,
                c.sharding,
                c.recompute,
                num(c.step_seconds),
                num(c.tokens_per_second, ",.0f"),
                f"{c.mfu:.1%}",
                money(cost),
                money(per_million_tokens(cost, c.tokens_per_second)),
                note,
            ]
        )
    right = {0, 1, 5, 6, 7, 8, 9}
    return f"TrainingJob {name}: sweep of {field}, the layout planned at each point\n" + table(
        header, rows, right
    )


def render_inference_sweep(
    name: str, field: str, points: Sequence[tuple[float, InferencePrediction]]
) -> str:
    header = [field, "replicas", "batch", "req/s per replica", "p99 ms", "$/hour", "target met"]
    rows = [
        [
            f"{v:g}",
            str(p.replicas),
            str(p.batch_size),
            num(p.per_replica_requests_per_second, ",.0f"),
            num(_p99_ms(p), ".3g"),
            money(p.cost_per_hour_usd),
            "yes" if p.feasible else "no",
        ]
        for v, p in points
    ]
    return f"InferenceEndpoint {name}: sweep of {field}\n" + table(header, rows, set(range(6)))


def render_llm_endpoint_sweep(name: str, field: str, points: Sequence[LlmEndpointPoint]) -> str:
    """An LLM endpoint planned at every value of ``field`` (planning.sweep.sweep_llm_endpoint):
    the layout, batch and replicas the operator would choose, the output rate per replica at the
    SLO, the p99s at the target, the cost (per million output tokens: over the target's tokens,
    what serving that load costs); or why there is no plan at that value."""
    header = [
        field,
        "layout",
        "max-num-seqs",
        "replicas",
        "tok/s per replica",
        "TTFT p99 ms",
        "TPOT p99 ms",
        "$/hour",
        "$/M tokens at target",
        "target met",
    ]
    rows = []
    for pt in points:
        if pt.report is None:
            rows.append([f"{pt.value:g}", "-", "-", "-", "-", "-", "-", "-", "-", str(pt.error)])
            continue
        # The plan's JSON: the endpoint's figures as it runs, disaggregated where it is
        # (planning.disaggregation.apply_choice), so both read alike.
        plan = pt.report.to_json()
        target = pt.target_output_tokens_per_second
        cost = plan["costPerHourUSD"]
        per_million = per_million_tokens(cost, target) if plan["feasible"] and target else None
        split = plan.get("disaggregation") or {}
        if split.get("chosen") == "Disaggregated":
            pre, dec = split["prefill"], split["decode"]
            layout = (
                f"{pre['replicas']} prefill x {pre['perReplica']} + "
                f"{dec['replicas']} decode x {dec['perReplica']}"
            )
        else:
            layout = f"TP{plan['tensorParallel']} PP{plan['pipelineParallel']}"
        rows.append(
            [
                f"{pt.value:g}",
                layout,
                num(plan.get("batchSize"), "d"),
                str(plan["replicas"]),
                num(plan.get("outputTokensPerSecondPerReplica"), ",.0f"),
                num(plan["ttftP99Milliseconds"], ".3g"),
                num(plan["tpotP99Milliseconds"], ".3g"),
                money(cost),
                money(per_million),
                "yes" if plan["feasible"] else f"no: {plan['reason']}",
            ]
        )
    warned = [f"warning at {field} {pt.value:g}: {w}" for pt in points for w in pt.warnings]
    return "\n".join(
        [
            f"InferenceEndpoint {name}: sweep of {field}, planned whole at each point",
            table(header, rows, {0, 2, 3, 4, 5, 6, 7, 8}),
            *warned,
        ]
    )
