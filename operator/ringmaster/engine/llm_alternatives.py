"""The nearest feasible alternatives to an LLM endpoint that misses its target, Pareto-ranked.

When a target cannot be met (no rate meets the SLOs, the model does not fit, or more replicas are
needed than ``maxReplicas`` allows), a serving team asks what would work and at what price. The
variants tried, one change each from the spec as written:

- more tensor parallelism (every host shape of the accelerator above ``perReplica`` that divides
  the heads);
- FP8 weights and cache where the chip has FP8 tensor cores (from BF16 / FP16), INT4 otherwise;
- a smaller max-num-seqs (a half and a quarter of the plan's: a lower TPOT per replica);
- a looser TPOT target (x1.5, x2) and a looser TTFT target (x2);
- another accelerator of the catalog, at the same tensor parallelism or the smallest that holds
  the model.

Each variant is planned with no replica bound; the feasible ones are kept when no other is at
least as good on all of (replicas, TTFT p99, TPOT p99, $/hour) and better on one (the Pareto set),
ranked by cost, and each says whether it fits in ``maxReplicas``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringmaster.engine.hardware import DEFAULT_CATALOG, Catalog, UnknownHardwareError
from ringmaster.engine.llm_serving import (
    LlmServingInputs,
    LlmServingPrediction,
    predict_llm_serving,
)

# TP degrees tried (hosts of 1 to 16 accelerators).
_TP = (1, 2, 4, 8, 16)
_LOOSER_TPOT = (1.5, 2.0)
_LOOSER_TTFT = (2.0,)
_FEWER_SEQS = (0.5, 0.25)


@dataclass(frozen=True)
class Alternative:
    change: str  # what differs from the spec, in the spec's words
    replicas: int
    ttft_p99_seconds: float
    tpot_p99_seconds: float
    cost_per_hour_usd: float
    output_tokens_per_second_per_replica: float
    fits_max_replicas: bool | None  # None: the spec sets no maxReplicas


def _variants(
    inputs: LlmServingInputs, plan: LlmServingPrediction, catalog: Catalog
) -> list[tuple[str, LlmServingInputs]]:
    base = replace(inputs, replicas=None, min_replicas=1, max_replicas=None)
    out: list[tuple[str, LlmServingInputs]] = []
    for tp in _TP:
        if tp > inputs.per_replica and inputs.model.heads % tp == 0:
            out.append((f"perReplica: {tp}", replace(base, per_replica=tp, machine_type=None)))
    precision = inputs.precision.upper()
    acc = catalog.accelerator(inputs.accelerator)
    if precision in ("BF16", "FP16"):
        if acc.supports("fp8"):
            out.append(("precision: FP8", replace(base, precision="FP8", kv_cache_precision=None)))
        out.append(("precision: INT4", replace(base, precision="INT4", kv_cache_precision=None)))
    if plan.max_num_seqs > 1:
        for f in _FEWER_SEQS:
            seqs = max(1, int(plan.max_num_seqs * f))
            out.append((f"max-num-seqs {seqs}", replace(base, max_num_seqs=seqs)))
    for f in _LOOSER_TPOT:
        tpot = inputs.tpot_p99_seconds * f
        words = f"timePerOutputTokenP99Milliseconds: {tpot * 1e3:g}"
        out.append((words, replace(base, tpot_p99_seconds=tpot)))
    for f in _LOOSER_TTFT:
        ttft = inputs.ttft_p99_seconds * f
        words = f"timeToFirstTokenP99Milliseconds: {ttft * 1e3:g}"
        out.append((words, replace(base, ttft_p99_seconds=ttft)))
    for other in catalog.accelerators.values():
        if other.name == acc.name or other.kind != acc.kind:
            continue
        for tp in _TP:
            if inputs.model.heads % tp or tp < inputs.per_replica:
                continue
            try:
                catalog.default_machine(other.name, tp)
            except UnknownHardwareError:
                continue
            words = f"accelerator {other.name}" + (f", perReplica: {tp}" if tp > 1 else "")
            variant = replace(base, accelerator=other.name, per_replica=tp, machine_type=None)
            if precision == "FP8" and not other.supports("fp8"):
                variant = replace(variant, precision="BF16", kv_cache_precision=None)
                words += ", precision: BF16"
            out.append((words, variant))
            break  # the smallest shape that exists; a larger one is a perReplica variant of it
    return out


def _dominates(a: Alternative, b: Alternative) -> bool:
    ka = (a.replicas, a.ttft_p99_seconds, a.tpot_p99_seconds, a.cost_per_hour_usd)
    kb = (b.replicas, b.ttft_p99_seconds, b.tpot_p99_seconds, b.cost_per_hour_usd)
    return all(x <= y for x, y in zip(ka, kb, strict=True)) and ka != kb


def pareto_alternatives(
    inputs: LlmServingInputs,
    plan: LlmServingPrediction,
    catalog: Catalog = DEFAULT_CATALOG,
    limit: int = 6,
) -> list[Alternative]:
    """The Pareto set of feasible one-change variants, cheapest first (at most ``limit``)."""
    found: list[Alternative] = []
    for words, variant in _variants(inputs, plan, catalog):
        try:
            p = predict_llm_serving(variant, catalog)
        except (ValueError, LookupError):
            continue
        if not p.feasible or p.ttft_p99_seconds is None or p.tpot_p99_seconds is None:
            continue
        fits = None if inputs.max_replicas is None else p.replicas <= inputs.max_replicas
        found.append(
            Alternative(
                change=words,
                replicas=p.replicas,
                ttft_p99_seconds=p.ttft_p99_seconds,
                tpot_p99_seconds=p.tpot_p99_seconds,
                cost_per_hour_usd=p.cost_per_hour_usd,
                output_tokens_per_second_per_replica=p.output_tokens_per_second_per_replica,
                fits_max_replicas=fits,
            )
        )
    front = [a for a in found if not any(_dominates(b, a) for b in found)]
    front.sort(key=lambda a: (a.cost_per_hour_usd, a.replicas, a.change))
    return front[:limit]
