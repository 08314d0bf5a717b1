"""Prefill / decode disaggregation: an LLM endpoint served by two sets of replicas, one that
computes prompts and one that generates, handing each request's KV cache over the fabric
(vLLM's NixlConnector / MooncakeConnector, SGLang's ``--disaggregation-mode``, llm-d, Dynamo).

Each side is a replica of the one serving model (:mod:`ringmaster.engine.llm_serving`), run on
its own phase of the work:

- **the prefill side** computes each prompt and its first token (vLLM's prefill instance runs
  the request with ``max_tokens=1``): the serving model with one output token, held to its
  share of the TTFT target, with no TPOT target (it generates nothing further);
- **the decode side** generates: the serving model with the prompt's FLOPs taken out
  (``phase="decode"``: the prompt's KV cache arrives whole and joins the next step), each
  request still holding its whole context in the cache; TPOT is the decode side's alone;
- **the KV transfer** in between: the prompt's cache, ``kv bytes per token x prompt tokens``,
  from the prefill replica's accelerators to the decode replica's, each tensor rank over its own
  NIC share (GPUDirect RDMA), or over NVLink where one NVLink domain holds both replicas (a
  GB200 NVL72 rack). Its time is ``latency + bytes / (efficiency x link)``, both constants fitted
  on Mooncake's measured vLLM transfers (calibration.kv_transfer).

A request's TTFT is the prefill side's (queueing and compute at its load), the transfer, and
the decode side's wait for a place in its batch and first step. p99s do not add exactly; their
sum bounds the p99 of the sum from above, so the sizing is on the safe side. The TTFT target,
less the p99 transfer, is split between the two sides: the engine tries a few splits
(:data:`PREFILL_TTFT_SHARES`) and the replica sizes of each side, and keeps the cheapest plan
that meets both targets.

``Auto`` (the endpoint's ``spec.disaggregation.mode``) sets this plan against the aggregated one
and keeps the cheaper that meets the targets (on a tie, aggregated: one workload, no transfer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from ringmaster.engine.checkpoint_formats import checkpoint_bytes
from ringmaster.engine.hardware import DEFAULT_CATALOG, Catalog, Host
from ringmaster.engine.llm_serving import (
    DEFAULT_KV_PRECISION,
    KV_BYTES,
    WEIGHT_BYTES,
    LlmServingInputs,
    LlmServingPrediction,
    predict_llm_serving,
)
from ringmaster.engine.serving_hosts import replica_hosts
from ringmaster.engine.units import GB

# KV transfer: t = latency + bytes / (efficiency x link line rate). Fitted (least squares on
# relative error) on the nine transfers of Mooncake's vLLM v1 P/D benchmark, Qwen3-8B TP8 to
# TP8 on H800 hosts with 8 x ConnectX-7 RoCE (about 200 GB/s line rate), 20 MB to 4.5 GiB
# (kvcache-ai/Mooncake docs/source/performance/vllm/vllm-v1-pd-performance.md at 3b5a594;
# calibration/kv_transfer_points.yaml; ``ringmaster calibrate`` shows the fit's errors). The
# fit is RDMA's: a TCP host or an NVLink domain uses it too, and the plan says so.
KV_TRANSFER_LATENCY_SECONDS = 3.943e-4
KV_TRANSFER_EFFICIENCY = 0.7304
# The shares of the TTFT target (less the transfer) the prefill side may take; the decode side
# gets the rest. Its wait is a step or a few, so most of the target goes to the prompts.
PREFILL_TTFT_SHARES = (0.7, 0.9)
# A prefill replica generates one token and has no TPOT target: a bound no step reaches.
NO_TPOT_TARGET_SECONDS = 1e3
# A decode replica's scheduler budget counts the tokens it computes, one per sequence: a
# prompt whose KV cache arrived costs none. So the budget does not bound its intake.
DECODE_BATCHED_TOKENS = 65536
BACKENDS = ("NIXL", "Mooncake")
AGGREGATED, DISAGGREGATED = "Aggregated", "Disaggregated"


@dataclass(frozen=True)
class SideChoice:
    """What the spec fixes of one side (None: the engine chooses)."""

    per_replica: int | None = None
    tensor_parallel: int | None = None
    expert_parallel: int | None = None
    replicas: int | None = None


@dataclass(frozen=True)
class DisaggregationInputs:
    serving: LlmServingInputs  # the endpoint as one aggregated replica would serve it
    prefill: SideChoice = SideChoice()
    decode: SideChoice = SideChoice()
    backend: str = "NIXL"


@dataclass(frozen=True)
class KvTransfer:
    bytes_mean: float  # one request's prompt cache, at the mean prompt
    bytes_p99: float
    seconds_mean: float
    seconds_p99: float
    link_bytes_per_second: float  # line rate between one prefill and one decode replica
    link: str  # in words
    evidence: str  # what the transfer's constants rest on


@dataclass(frozen=True)
class DisaggregatedPrediction:
    feasible: bool
    reason: str | None
    prefill: LlmServingPrediction
    decode: LlmServingPrediction
    transfer: KvTransfer
    prefill_ttft_share: float  # of the TTFT target less the p99 transfer
    ttft_p99_seconds: float | None  # prefill + transfer + decode p99s at the sized replicas
    tpot_p99_seconds: float | None
    cost_per_hour_usd: float

    @property
    def transfer_share_of_ttft(self) -> float | None:
        if not self.ttft_p99_seconds:
            return None
        return self.transfer.seconds_p99 / self.ttft_p99_seconds

    def words(self) -> str:
        p, d = self.prefill, self.decode
        return (
            f"{p.replicas} prefill x {_accelerators(p)} + {d.replicas} decode x "
            f"{_accelerators(d)} at ${self.cost_per_hour_usd:,.2f}/h"
        )


@dataclass(frozen=True)
class DisaggregationChoice:
    """Aggregated against disaggregated, and which the endpoint runs."""

    chosen: str  # AGGREGATED or DISAGGREGATED
    why: str
    aggregated: LlmServingPrediction
    disaggregated: DisaggregatedPrediction | None


def _accelerators(p: LlmServingPrediction) -> int:
    return p.tensor_parallel * p.pipeline_parallel


def transfer_seconds(
    nbytes: ArrayLike,
    link_bytes_per_second: ArrayLike,
    latency: float = KV_TRANSFER_LATENCY_SECONDS,
    efficiency: float = KV_TRANSFER_EFFICIENCY,
) -> np.ndarray:
    """One request's KV cache over a link of the given line rate (bytes/s)."""
    return latency + np.asarray(nbytes, dtype=np.float64) / (
        efficiency * np.asarray(link_bytes_per_second, dtype=np.float64)
    )


def transfer_link(
    host: Host, prefill_accelerators: int, decode_accelerators: int
) -> tuple[float, str, str]:
    """(line rate in bytes/s, words, evidence) between a prefill and a decode replica: each
    tensor rank moves its shard of the cache, so the link is the narrower side's accelerators'
    NVLink (one NVLink domain holding both replicas) or their share of the hosts' NICs."""
    machine, acc = host.machine, host.accelerator
    ranks = min(prefill_accelerators, decode_accelerators)
    domain = machine.nvlink_domain
    if domain and prefill_accelerators + decode_accelerators <= domain:
        rate = float(acc.intra_bandwidth) * ranks
        return (
            rate,
            f"NVLink inside the {domain}-GPU domain, {ranks} x {acc.intra_bandwidth / GB:g} GB/s",
            "KV transfer over NVLink at the RDMA fit's efficiency (fitted on RoCE, "
            "calibration.kv_transfer)",
        )
    per_accelerator = machine.nic_bandwidth / max(machine.accelerator_count, 1)
    rate = per_accelerator * ranks
    over = "GPUDirect RDMA" if machine.transport == "rdma" else "TCP"
    evidence = "KV transfer fitted on Mooncake's vLLM RDMA transfers (calibration.kv_transfer)"
    # Mooncake's transfer engine is "about 2.4x and 4.6x faster than the TCP protocol" on 4 x 200
    # and 8 x 400 Gbps RoCE (kvcache-ai/Mooncake README.md at 3b5a594): TCP at 22-42% of RDMA.
    if machine.transport != "rdma":
        evidence += (
            f"; {machine.name}'s NICs carry TCP, slower than the RDMA fit (Mooncake measured "
            "its TCP path at 20-40 % of RDMA's)"
        )
    return (
        rate,
        f"{over}, {ranks} x {per_accelerator / GB:g} GB/s of {machine.name}'s NICs",
        (evidence),
    )


def kv_transfer(
    inputs: LlmServingInputs,
    catalog: Catalog,
    prefill_accelerators: int,
    decode_accelerators: int,
) -> KvTransfer:
    """The KV cache a request hands from prefill to decode, and its time at the mean and p99
    prompt."""
    precision = (
        inputs.kv_cache_precision or DEFAULT_KV_PRECISION[inputs.precision.upper()]
    ).upper()
    kv = KV_BYTES[precision]
    prompt_p99 = inputs.input_tokens_p99 or inputs.input_tokens_mean
    per_host, _ = replica_hosts(
        catalog,
        inputs.accelerator,
        max(prefill_accelerators, decode_accelerators),
        None,
        inputs.machine_type,
    )
    host = catalog.host(inputs.accelerator, per_host, inputs.machine_type)
    rate, link, evidence = transfer_link(host, prefill_accelerators, decode_accelerators)
    # a prompt's cache: every token in a full layer, a sliding window's last ones in its layers
    mean = float(inputs.model.kv_cache_bytes(inputs.input_tokens_mean, kv))
    p99 = float(inputs.model.kv_cache_bytes(prompt_p99, kv))
    return KvTransfer(
        bytes_mean=mean,
        bytes_p99=p99,
        seconds_mean=float(transfer_seconds(mean, rate)),
        seconds_p99=float(transfer_seconds(p99, rate)),
        link_bytes_per_second=rate,
        link=link,
        evidence=evidence,
    )


def _target_requests(inputs: LlmServingInputs) -> float:
    if inputs.target_output_tokens_per_second is not None:
        return inputs.target_output_tokens_per_second / inputs.output_tokens_mean
    return float(inputs.target_requests_per_second or 0.0)


def side_sizes(inputs: LlmServingInputs, catalog: Catalog, given: int | None) -> list[int]:
    """The replica sizes the engine weighs for a side: the spec's; else the aggregated
    replica's, the smallest power of two whose HBM holds the weights with room for a cache,
    twice that, and a whole host (a side across hosts is named in the spec)."""
    if given is not None:
        return [given]
    acc = catalog.accelerator(inputs.accelerator)
    host_max = max(
        (m.accelerator_count for m in catalog.machines.values() if m.accelerator == acc.name),
        default=inputs.per_replica,
    )
    weights = checkpoint_bytes(inputs.model, WEIGHT_BYTES[inputs.precision.upper()])
    # Weights in at most 3/4 of the HBM: the rest for the cache and the reserve.
    smallest = 1
    while smallest < host_max and weights > 0.75 * acc.memory_bytes * smallest:
        smallest *= 2
    sizes = {inputs.per_replica, smallest, min(2 * smallest, host_max), host_max}
    heads = inputs.model.heads
    return sorted(g for g in sizes if heads % g == 0 or g == inputs.per_replica)


def _side_inputs(
    inputs: LlmServingInputs, choice: SideChoice, per_replica: int, phase: str, ttft: float
) -> LlmServingInputs:
    common = dict(
        per_replica=per_replica,
        tensor_parallel=choice.tensor_parallel,
        pipeline_parallel=None,
        expert_parallel=choice.expert_parallel,
        replicas=choice.replicas,
        hosts_per_replica=None,
        target_requests_per_second=_target_requests(inputs),
        target_output_tokens_per_second=None,
        ttft_p99_seconds=ttft,
        phase=phase,
        max_num_seqs=None,
    )
    if phase == "prefill":
        return replace(
            inputs,
            output_tokens_mean=1.0,
            output_tokens_p99=1.0,
            tpot_p99_seconds=NO_TPOT_TARGET_SECONDS,
            **common,  # type: ignore[arg-type]
        )
    return replace(
        inputs,
        max_num_batched_tokens=DECODE_BATCHED_TOKENS,
        **common,  # type: ignore[arg-type]
    )


def predict_disaggregated(
    inputs: DisaggregationInputs, catalog: Catalog = DEFAULT_CATALOG
) -> DisaggregatedPrediction:
    """The cheapest disaggregated plan that meets the endpoint's targets (or, when none does,
    the one nearest to: the fewest sides failing, then the cheapest). Each side is sized for its
    share of the TTFT target less the transfer between two replicas of its own size; a pair of
    sizes is then held to the whole target with the transfer between them."""
    serving = inputs.serving
    if serving.static_batching:
        raise ValueError(
            "disaggregation needs continuous batching: batching Static runs one batch to its end"
        )
    target = serving.ttft_p99_seconds
    sides: dict[str, dict[tuple[int, float], LlmServingPrediction]] = {"prefill": {}, "decode": {}}
    for phase, choice in (("prefill", inputs.prefill), ("decode", inputs.decode)):
        for g in side_sizes(serving, catalog, choice.per_replica):
            budget = target - kv_transfer(serving, catalog, g, g).seconds_p99
            if budget <= 0.0:
                continue
            for share in PREFILL_TTFT_SHARES:
                own = share if phase == "prefill" else 1.0 - share
                sides[phase][(g, share)] = predict_llm_serving(
                    _side_inputs(serving, choice, g, phase, own * budget), catalog
                )
    best: tuple[tuple[int, float, float], DisaggregatedPrediction] | None = None
    for (g_p, share), prefill in sides["prefill"].items():
        for (g_d, other), decode in sides["decode"].items():
            if other != share:
                continue
            transfer = kv_transfer(serving, catalog, g_p, g_d)
            found = _combine(prefill, decode, transfer, share, target)
            failing = len((found.reason or "").split("; ")) if found.reason else 0
            rank = (failing, found.cost_per_hour_usd, -(found.ttft_p99_seconds or 0.0))
            if best is None or rank < best[0]:
                best = (rank, found)
    if best is None:
        g = max(side_sizes(serving, catalog, inputs.prefill.per_replica))
        transfer = kv_transfer(serving, catalog, g, g)
        raise ValueError(
            f"the KV transfer alone takes {transfer.seconds_p99 * 1e3:,.1f} ms at the p99 prompt "
            f"({transfer.bytes_p99 / GB:,.2f} GB over {transfer.link}), over the TTFT target "
            f"{target * 1e3:,.0f} ms: disaggregation cannot meet it"
        )
    return best[1]


def _combine(
    prefill: LlmServingPrediction,
    decode: LlmServingPrediction,
    transfer: KvTransfer,
    share: float,
    target: float,
) -> DisaggregatedPrediction:
    reasons = [
        f"{side} side: {_side_field(side, p.reason)}"
        for side, p in (("prefill", prefill), ("decode", decode))
        if p.reason
    ]
    ttft = None
    if prefill.ttft_p99_seconds is not None and decode.ttft_p99_seconds is not None:
        ttft = prefill.ttft_p99_seconds + transfer.seconds_p99 + decode.ttft_p99_seconds
        if ttft > target * (1.0 + 1e-9):
            reasons.append(
                f"TTFT p99 {ttft * 1e3:,.0f} ms (prefill {prefill.ttft_p99_seconds * 1e3:,.0f} + "
                f"transfer {transfer.seconds_p99 * 1e3:,.1f} + decode "
                f"{decode.ttft_p99_seconds * 1e3:,.0f}) is over the target {target * 1e3:,.0f} ms"
            )
    return DisaggregatedPrediction(
        feasible=not reasons,
        reason="; ".join(reasons) or None,
        prefill=prefill,
        decode=decode,
        transfer=transfer,
        prefill_ttft_share=share,
        ttft_p99_seconds=ttft,
        tpot_p99_seconds=decode.tpot_p99_seconds,
        cost_per_hour_usd=prefill.cost_per_hour_usd + decode.cost_per_hour_usd,
    )


def _side_field(side: str, reason: str) -> str:
    """The serving model names spec.replicas; a side's count is its own field."""
    if reason.startswith("replicas "):
        return f"disaggregation.{side}.replicas " + reason[len("replicas ") :]
    return reason


def choose(
    mode: str,
    aggregated: LlmServingPrediction,
    inputs: DisaggregationInputs,
    catalog: Catalog = DEFAULT_CATALOG,
) -> DisaggregationChoice:
    """``Disaggregated``: disaggregated; ``Auto``: the cheaper plan that meets the targets
    (aggregated on a tie, or when neither does), with why. (``Aggregated`` plans nothing more:
    the caller does not ask.)"""
    try:
        split = predict_disaggregated(inputs, catalog)
    except ValueError as exc:
        if mode == "Disaggregated":
            raise
        return DisaggregationChoice(AGGREGATED, f"disaggregated: {exc}", aggregated, None)
    if mode == "Disaggregated":
        return DisaggregationChoice(
            DISAGGREGATED, "spec.disaggregation.mode Disaggregated", aggregated, split
        )
    agg_words = (
        f"{aggregated.replicas} aggregated x {_accelerators(aggregated)} at "
        f"${aggregated.cost_per_hour_usd:,.2f}/h"
    )
    if split.feasible and (
        not aggregated.feasible or split.cost_per_hour_usd < aggregated.cost_per_hour_usd
    ):
        why = f"disaggregated {split.words()} meets the targets" + (
            f" for less than {agg_words}"
            if aggregated.feasible
            else f"; aggregated cannot ({aggregated.reason})"
        )
        return DisaggregationChoice(DISAGGREGATED, why, aggregated, split)
    if aggregated.feasible:
        why = f"aggregated {agg_words} " + (
            f"costs no more than disaggregated {split.words()}"
            if split.feasible
            else f"meets the targets; disaggregated does not ({split.reason})"
        )
    else:
        why = "neither meets the targets; aggregated kept (one workload, no transfer)"
    return DisaggregationChoice(AGGREGATED, why, aggregated, split)


__all__ = [
    "AGGREGATED",
    "BACKENDS",
    "DISAGGREGATED",
    "DisaggregatedPrediction",
    "DisaggregationChoice",
    "DisaggregationInputs",
    "KvTransfer",
    "SideChoice",
    "choose",
    "kv_transfer",
    "predict_disaggregated",
    "transfer_seconds",
]
