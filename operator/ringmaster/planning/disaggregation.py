"""An LLM endpoint's plan with prefill / decode disaggregation (spec.disaggregation): the
engine's choice (engine.llm_disaggregation) in the plan's JSON contract, which ``ringmaster
plan``, status.plan and the controller read.

When the endpoint runs disaggregated, the plan's top-level figures are the endpoint's as it runs
(both sides' replicas, cost, TTFT / TPOT p99); its per-replica keys, which describe one
aggregated replica, are left out, and ``disaggregation`` holds each side's. The aggregated plan
it was weighed against is kept under ``disaggregation.aggregated``.
"""

from __future__ import annotations

from typing import Any

from ringmaster.engine.hardware import Catalog
from ringmaster.engine.llm_disaggregation import (
    DISAGGREGATED,
    DisaggregatedPrediction,
    DisaggregationChoice,
    DisaggregationInputs,
    SideChoice,
    choose,
)
from ringmaster.engine.llm_serving import LlmServingInputs, LlmServingPrediction

MS = 1e3
PREFILL, DECODE = "prefill", "decode"
SIDES = (PREFILL, DECODE)
# One aggregated replica's figures: absent from the top of a disaggregated plan.
PER_REPLICA_KEYS = (
    "outputTokensPerSecondPerReplica",
    "perReplicaRequestsPerSecond",
    "capacityRequestsPerSecond",
    "batchSize",
    "maxConcurrentSequences",
    "weightsBytesPerAccelerator",
    "tensorParallel",
    "pipelineParallel",
    "expertParallel",
    "hostsPerReplica",
    "maxNumSeqs",
    "maxNumBatchedTokens",
    "offlineOutputTokensPerSecondPerReplica",
    "offlineRequestsPerSecondPerReplica",
    "offlineMaxNumSeqs",
    "ttftSloRequestsPerSecondPerReplica",
    "tpotSloRequestsPerSecondPerReplica",
    "maxReplicasOutputTokensPerSecond",
    "loadCurve",
)


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else _sig(seconds * MS)


def disaggregation_inputs(spec: Any, serving: LlmServingInputs) -> DisaggregationInputs:
    config = spec.disaggregation

    def side(given: Any) -> SideChoice:
        if given is None:
            return SideChoice()
        return SideChoice(given.per_replica, given.tensor, given.expert, given.replicas)

    return DisaggregationInputs(
        serving, side(config.prefill), side(config.decode), str(config.transfer_backend)
    )


def plan_disaggregation(
    spec: Any, serving: LlmServingInputs, aggregated: LlmServingPrediction, catalog: Catalog
) -> DisaggregationChoice:
    """The engine's choice for the spec's mode (``ValueError``: mode Disaggregated cannot be
    served)."""
    return choose(
        str(spec.disaggregation.mode), aggregated, disaggregation_inputs(spec, serving), catalog
    )


def side_json(p: LlmServingPrediction) -> dict[str, Any]:
    """One side's replicas and the server settings its pods get (manifests.serving_env reads
    the same keys as of an aggregated plan)."""
    return {
        "replicas": p.replicas,
        "replicasNeeded": p.replicas_needed,
        "feasible": p.feasible,
        "reason": p.reason,
        "perReplica": p.tensor_parallel * p.pipeline_parallel,
        "tensorParallel": p.tensor_parallel,
        "pipelineParallel": p.pipeline_parallel,
        "expertParallel": p.expert_parallel,
        "hostsPerReplica": p.hosts_per_replica,
        "machineType": p.machine_type,
        "perReplicaRequestsPerSecond": _sig(p.requests_per_second_per_replica),
        "ttftP99Milliseconds": _ms(p.ttft_p99_seconds),
        "tpotP99Milliseconds": _ms(p.tpot_p99_seconds),
        "costPerHourUSD": _sig(p.cost_per_hour_usd),
        "maxNumSeqs": p.max_num_seqs,
        "maxModelLen": p.max_model_len,
        "maxNumBatchedTokens": p.max_num_batched_tokens,
        "batching": p.batching,
        "engine": p.engine,
        "binding": p.binding or None,
        "layout": p.layout,
        "evidence": p.evidence[:1024] or None,
    }


def _split_json(d: DisaggregatedPrediction) -> dict[str, Any]:
    t = d.transfer
    share = d.transfer_share_of_ttft
    return {
        "feasible": d.feasible,
        "reason": d.reason,
        "ttftP99Milliseconds": _ms(d.ttft_p99_seconds),
        "tpotP99Milliseconds": _ms(d.tpot_p99_seconds),
        "costPerHourUSD": _sig(d.cost_per_hour_usd),
        "prefillTtftShare": d.prefill_ttft_share,
        "kvTransfer": {
            "bytesPerRequest": _sig(t.bytes_mean),
            "bytesP99": _sig(t.bytes_p99),
            "meanMilliseconds": _ms(t.seconds_mean),
            "p99Milliseconds": _ms(t.seconds_p99),
            "shareOfTtft": None if share is None else _sig(share),
            "link": t.link,
            "linkBytesPerSecond": _sig(t.link_bytes_per_second),
            "evidence": t.evidence,
        },
        PREFILL: side_json(d.prefill),
        DECODE: side_json(d.decode),
    }


def disaggregation_json(mode: str, backend: str, choice: DisaggregationChoice) -> dict[str, Any]:
    a = choice.aggregated
    out: dict[str, Any] = {
        "mode": mode,
        "transferBackend": backend,
        "chosen": choice.chosen,
        "why": choice.why[:1024],
        "aggregated": {
            "feasible": a.feasible,
            "reason": a.reason,
            "replicas": a.replicas,
            "perReplica": a.tensor_parallel * a.pipeline_parallel,
            "costPerHourUSD": _sig(a.cost_per_hour_usd),
            "ttftP99Milliseconds": _ms(a.ttft_p99_seconds),
            "tpotP99Milliseconds": _ms(a.tpot_p99_seconds),
        },
    }
    if choice.disaggregated is not None:
        out |= _split_json(choice.disaggregated)
    return out


def apply_choice(
    plan: dict[str, Any], mode: str, backend: str, choice: DisaggregationChoice
) -> dict[str, Any]:
    """The plan JSON with the choice: the aggregated plan unchanged but for the
    ``disaggregation`` key when aggregated runs; the endpoint's figures as it runs when
    disaggregated does."""
    plan = {**plan, "disaggregation": disaggregation_json(mode, backend, choice)}
    split = choice.disaggregated
    if choice.chosen != DISAGGREGATED or split is None:
        return plan
    for key in PER_REPLICA_KEYS:
        plan.pop(key, None)
    p, d = split.prefill, split.decode
    needed = (
        None
        if p.replicas_needed is None or d.replicas_needed is None
        else p.replicas_needed + d.replicas_needed
    )
    plan |= {
        "replicas": p.replicas + d.replicas,
        "replicasNeeded": needed,
        "feasible": split.feasible,
        "reason": split.reason,
        "ttftP99Milliseconds": _ms(split.ttft_p99_seconds),
        "tpotP99Milliseconds": _ms(split.tpot_p99_seconds),
        "costPerHourUSD": _sig(split.cost_per_hour_usd),
        "binding": None,
        "bottleneck": (f"prefill: {p.bottleneck}; decode: {d.bottleneck}"),
        "layout": f"disaggregated: {split.words()}",
        "alternatives": [],
    }
    return plan


def runs_disaggregated(plan: dict[str, Any]) -> bool:
    return (plan.get("disaggregation") or {}).get("chosen") == DISAGGREGATED


__all__ = [
    "DECODE",
    "PREFILL",
    "SIDES",
    "apply_choice",
    "disaggregation_json",
    "plan_disaggregation",
    "runs_disaggregated",
    "side_json",
]
