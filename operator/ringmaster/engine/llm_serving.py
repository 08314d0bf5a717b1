"""LLM serving: one endpoint's plan per replica, from the step model and the batching model.

- The step (weights, paged-attention KV reads, per-sequence costs, prefill chunks) is
  :mod:`ringmaster.engine.llm_step`; the scheduler under Poisson arrivals (slots, token budget,
  chunked prefill, the queue for a slot, TTFT and TPOT quantiles) is
  :mod:`ringmaster.engine.llm_batching`. This module picks the engine's settings and sizes:
- **max-num-seqs and max-num-batched-tokens** are chosen from
  :data:`~ringmaster.engine.llm_batching.MAX_NUM_SEQS_CHOICES` (within what the KV cache holds
  without preempting: a sequence at its p99 lengths) and
  :data:`~ringmaster.engine.llm_batching.MAX_NUM_BATCHED_TOKENS_CHOICES`: the pair whose
  sustainable rate is the highest (the smaller on a tie: a smaller batch has the lower TPOT, a
  smaller budget cuts prompts into smaller chunks that stretch a decode step less).
- **Offline maximum** (no latency target, MLPerf's offline scenario): the most requests/s a
  replica completes with every slot busy, at the settings that give the most (up to the cache at
  mean lengths, preempting as vLLM does); reported always, also when no latency target can be
  met.
- **Load curve**: TTFT and TPOT p50 / p90 / p99 at
  :data:`~ringmaster.engine.llm_batching.CURVE_LOADS`
  of the offline maximum (of the chosen max-num-seqs), and the rate at which each p99 target
  starts to fail.
- **Sustainable rate** = the smallest of the two SLO rates and ``max_utilization`` of the offline
  maximum; replicas = target / that, within min/max. The HPA's per-pod target is that rate.

Precisions: ``BF16``/``FP16`` (2-byte weights), ``FP8`` (1-byte weights, FP8 tensor cores: H100
and later), ``INT4`` (weight-only W4A16, AWQ/GPTQ: 4-bit weights plus one FP16 scale per group of
128, computed in 16-bit), ``FP4`` (NVFP4: 4-bit E2M1 weights and activations with one FP8 scale
per block of 16, on Blackwell's FP4 tensor cores; MXFP4's E8M0 scale per 32 is 3% smaller). The
KV cache is 16-bit, or FP8 when ``kv_cache_precision`` says so (FP4's default).

Mixtures of experts run on their active parameters and stream the experts a step touches
(:mod:`ringmaster.engine.llm_step`); ``expert_parallel`` is 1 or the replica's tensor-parallel
degree (vLLM's ``--enable-expert-parallel``, SGLang's ``--ep-size``), and must divide the
routed experts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from ringmaster.engine import collectives
from ringmaster.engine import llm_batching as batching
from ringmaster.engine.ceilings import Ceilings, ceilings_for
from ringmaster.engine.checkpoint_formats import checkpoint_note
from ringmaster.engine.expert_dispatch import (
    DEFAULT_DISPATCHER,
    Dispatcher,
    dispatcher_named,
    exchanges_tokens,
)
from ringmaster.engine.hardware import (
    DEFAULT_CATALOG,
    Catalog,
    Host,
)
from ringmaster.engine.llm_batching import Lengths
from ringmaster.engine.llm_serving_fit import (
    COMPUTE_PRECISION,
    DEFAULT_KV_PRECISION,
    INT4_GROUP_SIZE,
    KV_BYTES,
    KV_CACHE_PRECISIONS,
    MXFP4_BLOCK,
    NVFP4_BLOCK,
    PRECISIONS,
    UNITS_WORDS,
    WEIGHT_BYTES,
    does_not_fit,
)
from ringmaster.engine.llm_static import StaticReplica
from ringmaster.engine.llm_step import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    HBM_RESERVE_FRACTION,
    LLM_COMPUTE_EFFICIENCY,
    LLM_FP8_COMPUTE_EFFICIENCY,
    LLM_KV_READ_EFFICIENCY,
    LLM_KV_SEQUENCE_TOKENS,
    LLM_MEMORY_EFFICIENCY,
    LLM_SEQUENCE_OVERHEAD_SECONDS,
    LLM_STEP_OVERHEAD_SECONDS,
    ReplicaSpan,
    ServingTerms,
    StepConstants,
    decode_gemm_seconds_per_token,
    expert_fraction_read,
    kv_bytes_per_token_per_accelerator,
    prefill_seconds,
    serving_terms,
    step_seconds,
    weights_bytes_per_accelerator,
    weights_read_seconds,
)
from ringmaster.engine.profiled import (
    ceilings_hbm_ratio,
    ceilings_matmul_ratio,
    measured_words,
    profiled_ceilings,
)
from ringmaster.engine.serving_engines import (
    DEFAULT_SERVING_ENGINE,
    prefill_attention_evidence,
    serving_engine,
    serving_evidence,
)
from ringmaster.engine.serving_hosts import host_share, replica_hosts
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GB

__all__ = [
    "COMPUTE_PRECISION",
    "DEFAULT_KV_PRECISION",
    "HBM_RESERVE_FRACTION",
    "INT4_GROUP_SIZE",
    "KV_BYTES",
    "KV_CACHE_PRECISIONS",
    "LLM_COMPUTE_EFFICIENCY",
    "LLM_FP8_COMPUTE_EFFICIENCY",
    "LLM_KV_READ_EFFICIENCY",
    "LLM_KV_SEQUENCE_TOKENS",
    "LLM_MEMORY_EFFICIENCY",
    "LLM_SEQUENCE_OVERHEAD_SECONDS",
    "LLM_STEP_OVERHEAD_SECONDS",
    "MXFP4_BLOCK",
    "NVFP4_BLOCK",
    "PRECISIONS",
    "WEIGHT_BYTES",
    "Layout",
    "LlmServingInputs",
    "LlmServingPrediction",
    "LoadCurvePoint",
    "ServingTerms",
    "StepConstants",
    "choose_layouts",
    "kv_bytes_per_token_per_accelerator",
    "predict_llm_serving",
    "prefill_seconds",
    "serving_terms",
    "step_seconds",
]

# Choices of (budget, batch) searched in full after the coarse look (the rest cannot win).
_REFINE = 3
# What binds the sustainable rate (the constraint) ...
BINDS_TTFT = 0
BINDS_TPOT = 1
BINDS_KV_CACHE = 2
BINDS_UTILIZATION = 3
BINDING_WORDS = ("TTFT target", "TPOT target", "KV cache capacity", "utilization headroom")


@dataclass(frozen=True)
class LlmServingInputs:
    model: Transformer
    accelerator: str
    per_replica: int  # accelerators of one replica (tensor x pipeline)
    precision: str  # PRECISIONS
    input_tokens_mean: float
    output_tokens_mean: float
    ttft_p99_seconds: float
    tpot_p99_seconds: float
    target_requests_per_second: float | None = None
    target_output_tokens_per_second: float | None = None
    kv_cache_precision: str | None = None  # default: DEFAULT_KV_PRECISION[precision]
    input_tokens_p99: float | None = None  # default: the mean
    output_tokens_p99: float | None = None
    max_utilization: float = 0.85
    replicas: int | None = None
    min_replicas: int = 1
    max_replicas: int | None = None
    machine_type: str | None = None
    model_name: str | None = None
    max_num_seqs: int | None = None  # default: chosen (see the module's docstring)
    max_num_batched_tokens: int | None = None  # default: chosen
    hosts_per_replica: int | None = None  # default: Catalog.replica_hosts
    tensor_parallel: int | None = None  # default: chosen (choose_layouts)
    pipeline_parallel: int | None = None
    # 1 (default), or the tensor degree: whole experts sharded over the replica's tensor ranks;
    # with attention_data above 1, the whole replica (wide EP)
    expert_parallel: int | None = None
    attention_data: int | None = None  # attention data-parallel groups (default 1)
    redundant_experts: int = 0  # redundant expert copies (EPLB)
    expert_dispatch: str | None = None  # expert_dispatch.DISPATCHERS; default AllToAll
    two_batch_overlap: bool = False  # the dispatch beside the other micro-batch's compute
    max_batch_size: int | None = None  # caps max_num_seqs (spec.maxBatchSize); default: none
    static_batching: bool = False  # spec.batching Static (engine.llm_static)
    engine: str = DEFAULT_SERVING_ENGINE  # serving_engines.SERVING_ENGINES
    engine_source: str = ""  # how the engine was chosen (spec.engine, the image, the default)
    # "both": an aggregated replica; "prefill" / "decode": one side of a disaggregated endpoint
    # (engine.llm_disaggregation): a decode replica computes no prompt, its KV arrives whole.
    phase: str = "both"


@dataclass(frozen=True)
class Layout:
    """A replica's tensor x pipeline split over ``hosts`` hosts of ``per_host`` accelerators."""

    tensor: int
    pipeline: int
    hosts: int
    per_host: int
    attention_data: int = 1  # groups of ``tensor`` with their own sequences (wide EP)

    @property
    def tensor_hosts(self) -> int:
        return max(1, math.ceil(self.tensor / self.per_host))

    def words(self) -> str:
        if self.attention_data > 1:
            where = "on one host" if self.hosts == 1 else f"across {self.hosts} hosts"
            return (
                f"attention DP {self.attention_data} x TP {self.tensor}, EP "
                f"{self.attention_data * self.tensor} {where}"
            )
        if self.hosts == 1:
            inside = f"TP {self.tensor}" + (f" x PP {self.pipeline}" if self.pipeline > 1 else "")
            return f"{inside} on one host"
        if self.tensor_hosts > 1:
            tp = f"TP {self.tensor} across {self.tensor_hosts} hosts on the fabric"
        else:
            tp = f"TP {self.tensor} inside each host"
        return tp + (f" x PP {self.pipeline} across hosts" if self.pipeline > 1 else "")


def choose_layouts(inputs: LlmServingInputs, per_host: int, hosts: int) -> list[Layout]:
    """The layouts the engine weighs for a replica: the spec's when it names tensor or pipeline;
    on one host, tensor parallelism over all of it (vLLM's default); across hosts, tensor
    parallelism inside each host with one pipeline stage per host (vLLM's and SGLang's advice for
    multi-node serving) and tensor parallelism over every accelerator on the fabric. Layouts
    whose tensor degree does not divide the heads, or is not the expert-parallel degree (EP > 1
    spans the tensor-parallel ranks), are left out, unless none is left (its plan says why)."""
    g = inputs.per_replica
    dp = inputs.attention_data or 1
    if dp > 1:
        return [Layout(inputs.tensor_parallel or g // dp, 1, hosts, per_host, dp)]
    if inputs.tensor_parallel is not None or inputs.pipeline_parallel is not None:
        tp = inputs.tensor_parallel or g // (inputs.pipeline_parallel or 1)
        return [Layout(tp, max(1, g // tp), hosts, per_host)]
    if hosts == 1:
        return [Layout(g, 1, 1, per_host)]
    options = [Layout(per_host, hosts, hosts, per_host), Layout(g, 1, hosts, per_host)]
    ep = inputs.expert_parallel or 1
    usable = [o for o in options if inputs.model.heads % o.tensor == 0 and ep in (1, o.tensor)]
    return usable or options[:1]


@dataclass(frozen=True)
class LoadCurvePoint:
    """The replica at one arrival rate: TTFT and TPOT quantiles, in seconds."""

    load: float  # of the offline maximum
    requests_per_second: float
    output_tokens_per_second: float
    ttft_p50_seconds: float
    ttft_p90_seconds: float
    ttft_p99_seconds: float
    tpot_p50_seconds: float
    tpot_p90_seconds: float
    tpot_p99_seconds: float


@dataclass(frozen=True)
class LlmServingPrediction:
    replicas: int
    replicas_needed: int | None  # before min/max; None when nothing meets the targets
    feasible: bool
    reason: str | None
    requests_per_second_per_replica: float  # sustainable at the SLO
    output_tokens_per_second_per_replica: float
    saturation_requests_per_second: float  # the offline maximum at the chosen max-num-seqs
    ttft_p99_seconds: float | None  # at target / replicas
    tpot_p99_seconds: float | None
    max_concurrent_sequences: int  # the KV cache's bound
    max_num_seqs: int  # the batch the sizing assumes
    max_model_len: int  # the longest sequence served (architecture, bounded by the cache)
    kv_cache_bytes_per_token: float  # the whole replica's, at the KV precision
    weights_bytes_per_accelerator: float
    tensor_parallel: int
    binding: str  # the constraint that bounds the rate (BINDING_WORDS), "" when infeasible
    bottleneck: str  # the resource, in words, for tables
    cost_per_hour_usd: float
    machine_type: str
    precision: str
    kv_cache_precision: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The offline maximum per replica (no latency target): always set when the model fits.
    offline_requests_per_second: float = 0.0
    offline_output_tokens_per_second: float = 0.0
    offline_max_num_seqs: int = 0
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    # The rates at which each p99 target starts to fail (None: it holds up to the offline max).
    ttft_slo_rate: float | None = None
    tpot_slo_rate: float | None = None
    load_curve: tuple[LoadCurvePoint, ...] = ()
    # What fits in maxReplicas (or spec.replicas): their sustainable output.
    max_replicas: int | None = None
    price_per_replica_hour_usd: float = 0.0
    pipeline_parallel: int = 1
    expert_parallel: int = 1
    attention_data_parallel: int = 1
    redundant_experts: int = 0
    expert_dispatch: str = ""  # a mixture of experts' dispatcher; "" for a dense model
    two_batch_overlap: bool = False
    hosts_per_replica: int = 1
    layout: str = ""  # the layout in words and why it was chosen
    max_batch_size: int | None = None  # the cap the plan honoured (inputs.max_batch_size)
    batching: str = "Continuous"  # or "Static"
    engine: str = DEFAULT_SERVING_ENGINE
    evidence: str = ""  # what the step's constants rest on (serving_engines.serving_evidence)
    # Mixture of experts: the routed experts a decode step at the chosen batch reads per MoE
    # layer (uniform routing; 0 for a dense model).
    experts_read_per_step: float = 0.0
    # The chosen replica's step terms, for what is asked of it beyond the plan (planning.bench)
    replica_terms: ServingTerms | None = field(default=None, repr=False, compare=False)

    @property
    def max_replicas_output_tokens_per_second(self) -> float | None:
        if self.max_replicas is None:
            return None
        return self.max_replicas * self.output_tokens_per_second_per_replica


def _ms(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1.0 else f"{seconds * 1e3:.3g} ms"


class _Replica:
    """One replica's evaluation at every (max-num-batched-tokens, max-num-seqs) choice, and the
    chosen one (the highest sustainable rate; the smaller batch and budget on a tie)."""

    def __init__(
        self,
        terms: ServingTerms,
        inputs: LlmServingInputs,
        in_lengths: Lengths,
        out_lengths: Lengths,
        cache_tokens: float,
    ) -> None:
        # Under attention data parallelism every group schedules its own batch and budget
        # (one scheduler per DP rank in SGLang and vLLM): the replica's choices are theirs x
        # the groups. A spec's figures are the replica's.
        groups = float(inputs.attention_data or 1)
        if inputs.max_num_batched_tokens is not None:
            budgets = [float(inputs.max_num_batched_tokens)]
        else:
            budgets = [groups * b for b in batching.MAX_NUM_BATCHED_TOKENS_CHOICES]
        # Sized for SLOs within the cache at p99 lengths (no preemption); the offline maximum
        # may fill it at mean lengths, preempting as vLLM does.
        safe = max(1.0, cache_tokens / (in_lengths.p99 + out_lengths.p99))
        full = max(1.0, cache_tokens / float(batching.live_tokens(terms, out_lengths.cv)))
        if inputs.max_num_seqs is not None:
            seqs = [float(inputs.max_num_seqs)]
        else:
            seqs = sorted(
                {
                    *(groups * c for c in batching.MAX_NUM_SEQS_CHOICES if groups * c < full),
                    float(math.floor(safe)),
                    float(math.floor(full)),
                }
            )
        if inputs.max_batch_size is not None:  # spec.maxBatchSize caps the running batch
            seqs = sorted({min(s, float(inputs.max_batch_size)) for s in seqs})
        grid_b, grid_s = np.meshgrid(np.array(budgets), np.array(seqs), indexing="ij")
        grid_s = np.minimum(grid_s, np.floor(grid_b / 2.0))  # decodes leave room for prompts
        self.budgets, self.seqs = grid_b.ravel(), grid_s.ravel()
        t = ServingTerms(*(np.asarray(x)[..., None] for x in terms))
        self.terms = terms
        self.cap = batching.capacity(
            t, self.seqs, self.budgets, out_lengths.cv, input_lengths=in_lengths
        )
        offline = np.asarray(self.cap.rate, dtype=np.float64)
        headroom = inputs.max_utilization * offline
        within = self.seqs <= max(math.floor(safe), 1) if inputs.max_num_seqs is None else True
        within = np.broadcast_to(within, self.seqs.shape)
        targets = (inputs.ttft_p99_seconds, inputs.tpot_p99_seconds)
        # A coarse look at every choice, then the full search on the few that can still win.
        coarse = batching.largest_rates_within(
            t, self.cap, in_lengths, out_lengths, *targets, self.budgets, grid=8, rounds=1
        )
        low = np.minimum(np.minimum(coarse.ttft, coarse.tpot), headroom)
        high = np.minimum(np.minimum(coarse.ttft_above, coarse.tpot_above), headroom)
        low, high = np.where(within, low, 0.0), np.where(within, high, 0.0)
        keep = np.flatnonzero(high >= max(float(np.max(low)), 1e-300) * (1.0 - 1e-12))
        keep = keep[np.argsort(-high[keep])][:_REFINE]
        if keep.size == 0:
            keep = np.array([int(np.argmax(np.where(within, offline, -1.0)))])
        sub_terms = ServingTerms(*(np.broadcast_to(x, self.seqs.shape)[keep] for x in t))
        sub_cap = batching.Capacity._make(
            np.broadcast_to(x, self.seqs.shape)[keep] for x in self.cap
        )
        fine = batching.largest_rates_within(
            sub_terms, sub_cap, in_lengths, out_lengths, *targets, self.budgets[keep], grid=16
        )
        shape = self.seqs.shape
        ttft = np.where(coarse.ttft_meets_all, np.inf, coarse.ttft)
        tpot = np.where(coarse.tpot_meets_all, np.inf, coarse.tpot)
        ttft[keep] = np.where(fine.ttft_meets_all, np.inf, fine.ttft)
        tpot[keep] = np.where(fine.tpot_meets_all, np.inf, fine.tpot)
        self.ttft_rate = np.broadcast_to(ttft, shape)
        self.tpot_rate = np.broadcast_to(tpot, shape)
        limits = np.stack([self.ttft_rate, self.tpot_rate, headroom])
        sustainable = np.where(within, np.min(limits, axis=0), 0.0)
        self.sustainable = sustainable
        best = float(np.max(sustainable))
        order = np.lexsort((self.budgets, self.seqs))  # smaller batch, then smaller budget
        if best > 0:
            good = order[sustainable[order] >= best * 0.999]
            pick = int(good[0])
        else:
            pick = int(np.argmax(np.where(within, offline, -1.0)))
        self.pick = pick
        self.best_offline = int(np.argmax(offline))
        # The offline maximum over every batch up to the largest considered (each budget), not
        # only the grid's: a server may run fewer sequences than its cap, so a larger cap never
        # lowers it (past the budget's sweet spot more decodes crowd the prompts' chunks out).
        dense = offline_batches(float(np.max(self.seqs)))
        dense_b, dense_s = np.meshgrid(np.array(budgets), dense, indexing="ij")
        dense_s = np.minimum(dense_s, np.floor(dense_b / 2.0))
        dense_cap = batching.capacity(
            t, dense_s.ravel(), dense_b.ravel(), out_lengths.cv, input_lengths=in_lengths
        )
        dense_rate = np.broadcast_to(np.asarray(dense_cap.rate, dtype=np.float64), dense_s.size)
        at = int(np.argmax(dense_rate))
        self.offline_best_rate = max(float(dense_rate[at]), float(offline[self.best_offline]))
        self.offline_best_seqs = (
            int(dense_s.ravel()[at])
            if float(dense_rate[at]) >= float(offline[self.best_offline])
            else int(self.seqs[self.best_offline])
        )
        self.limit_index = int(np.argmin(limits[:, pick]))
        self.in_lengths, self.out_lengths = in_lengths, out_lengths

    def at(self, index: int) -> tuple[ServingTerms, batching.Capacity]:
        shape = self.seqs.shape
        cap = batching.Capacity._make(np.broadcast_to(x, shape)[index] for x in self.cap)
        return self.terms, cap

    def points(self, rates: np.ndarray) -> batching.LoadPoint:
        terms, cap = self.at(self.pick)
        return batching.load_points(
            terms, cap, rates, self.in_lengths, self.out_lengths, self.budgets[self.pick]
        )


def offline_batches(largest: float) -> np.ndarray:
    """The running batches the offline maximum is searched over: every one up to 64, then 4%
    apart (the rate is flat to within a percent over that spacing near its peak), and the
    largest."""
    small = np.arange(1.0, min(64.0, largest) + 1.0)
    if largest <= 64.0:
        return small
    steps = math.ceil(math.log(largest / 64.0) / math.log(1.04))
    grown = np.unique(np.floor(64.0 * 1.04 ** np.arange(1, steps + 1)))
    return np.concatenate([small, grown[grown < largest], [largest]])


def _curve(replica: _Replica | StaticReplica, out_mean: float) -> tuple[LoadCurvePoint, ...]:
    offline = float(np.asarray(replica.cap.rate)[replica.pick])
    if offline <= 0.0:
        return ()
    loads = np.array(batching.CURVE_LOADS)
    at = replica.points(loads * offline)
    return tuple(
        LoadCurvePoint(
            load=float(load),
            requests_per_second=float(load * offline),
            output_tokens_per_second=float(load * offline * out_mean),
            ttft_p50_seconds=float(at.ttft[0.5][i]),
            ttft_p90_seconds=float(at.ttft[0.9][i]),
            ttft_p99_seconds=float(at.ttft[0.99][i]),
            tpot_p50_seconds=float(at.tpot[0.5][i]),
            tpot_p90_seconds=float(at.tpot[0.9][i]),
            tpot_p99_seconds=float(at.tpot[0.99][i]),
        )
        for i, load in enumerate(loads)
    )


def predict_llm_serving(
    inputs: LlmServingInputs, catalog: Catalog = DEFAULT_CATALOG
) -> LlmServingPrediction:
    """Replicas, throughput (sustainable and offline), the load curve, TTFT / TPOT p99 and the
    KV-cache figures for one LLM endpoint; for a replica across hosts, for each layout the
    engine weighs (:func:`choose_layouts`), the one that serves the target with the fewest
    replicas (then the most output per replica), named with why."""
    per_host, hosts = replica_hosts(
        catalog,
        inputs.accelerator,
        inputs.per_replica,
        inputs.hosts_per_replica,
        inputs.machine_type,
    )
    host = catalog.host(inputs.accelerator, per_host, inputs.machine_type)
    fabric = collectives.gpu_fabric(host.accelerator, host.machine, per_host)
    nic_share = float(np.asarray(fabric.net_bandwidth)) / per_host
    results = [
        _predict_layout(inputs, catalog, layout, fabric, nic_share)
        for layout in choose_layouts(inputs, per_host, hosts)
    ]

    def rank(p: LlmServingPrediction) -> tuple[bool, float, float, float]:
        needed = math.inf if p.replicas_needed is None else float(p.replicas_needed)
        offline = -p.offline_output_tokens_per_second
        return (not p.feasible, needed, -p.output_tokens_per_second_per_replica, offline)

    best = min(results, key=rank)
    words = _layout_words(best)
    others = [p for p in results if p is not best]
    if others:
        words += (
            "; chosen over "
            + "; ".join(f"{_layout_words(o)}: {_rate_words(o)}" for o in others)
            + f" (it: {_rate_words(best)})"
        )
    return replace(best, layout=words)


def _layout_words(p: LlmServingPrediction) -> str:
    dp = p.attention_data_parallel
    layout = Layout(
        p.tensor_parallel,
        p.pipeline_parallel,
        p.hosts_per_replica,
        p.tensor_parallel * p.pipeline_parallel * dp // p.hosts_per_replica,
        dp,
    )
    return layout.words()


def _rate_words(p: LlmServingPrediction) -> str:
    if not p.feasible and p.replicas_needed is None:
        return "cannot serve the targets" if p.max_num_seqs else "does not fit"
    return (
        f"{p.output_tokens_per_second_per_replica:,.0f} output tokens/s per replica within the "
        f"targets, {p.max_concurrent_sequences:,} sequences in its KV cache"
    )


def _expert_degree(inputs: LlmServingInputs, model: Transformer, tp: int, dp: int) -> int:
    """The expert-parallel degree: the spec's, else the whole replica under attention data
    parallelism, else 1; refused (ValueError) where the API's rules would refuse it."""
    wide = dp > 1
    ep = inputs.expert_parallel or (tp * dp if wide else 1)
    if not model.is_moe:
        asked = {
            "attention data parallelism": wide,
            "expert parallelism": ep != 1,
            "redundant experts": inputs.redundant_experts > 0,
        }
        for what, given in asked.items():
            if given:
                raise ValueError(f"{what} needs a mixture of experts (experts > 0)")
    if inputs.two_batch_overlap and not wide:
        raise ValueError("two-batch overlap needs attention data parallelism above 1")
    if wide and ep != tp * dp:
        raise ValueError(
            f"expert parallelism {ep} must be the replica's {tp * dp} accelerators under "
            f"attention data parallelism {dp} (the experts spread over every rank)"
        )
    if not wide and ep not in (1, tp):
        raise ValueError(
            f"expert parallelism {ep} must be 1 or the replica's tensor degree {tp} (EP spans "
            "the tensor-parallel ranks, as vLLM's --enable-expert-parallel)"
        )
    slots = model.experts + inputs.redundant_experts
    if ep > 1 and slots % ep:
        raise ValueError(
            f"expert parallelism {ep} must divide the {slots} expert slots (experts + "
            "redundant experts)"
        )
    return ep


def _dispatcher(inputs: LlmServingInputs, model: Transformer) -> Dispatcher:
    given = dispatcher_named(inputs.expert_dispatch or DEFAULT_DISPATCHER)
    if inputs.expert_dispatch is not None and not model.is_moe:
        raise ValueError("expertDispatch needs a mixture of experts (experts > 0)")
    return given


class _ServingPool(NamedTuple):
    ceilings: Ceilings | None  # a profiled pool's (None: the catalog's published ratios)
    evidence: str  # "; profiled on pool ..." or ""
    note: str


def _profiled_serving(catalog: Catalog, host: Host, precision: str) -> _ServingPool:
    """The ceilings a replica on ``host`` is served on: a PoolProfile's where the catalog
    carries one for its machine type and accelerator (issue 47, engine.profiled), with the
    plan's evidence and a note of what it changes. The replica's fabric stays the catalog's
    (serving's cross-host collectives are latency-bound)."""
    measured = catalog.profile(host)
    if measured is None:
        return _ServingPool(None, "", "")
    acc = host.accelerator
    base = ceilings_for(acc)
    profiled = profiled_ceilings(base, measured)
    compute = ceilings_matmul_ratio(profiled, acc.name, precision) / ceilings_matmul_ratio(
        base, acc.name, precision
    )
    memory = ceilings_hbm_ratio(profiled, acc.name, acc.memory_bandwidth) / ceilings_hbm_ratio(
        base, acc.name, acc.memory_bandwidth
    )
    what = ", ".join(measured_words(base, measured)) or "nothing serving reads"
    return _ServingPool(
        profiled,
        f"; {measured.evidence_long}: {what}",
        f"{measured.evidence_long}: GEMMs at {compute:.3g}x, HBM at {memory:.3g}x the catalog's",
    )


def _predict_layout(
    inputs: LlmServingInputs,
    catalog: Catalog,
    layout: Layout,
    fabric: collectives.GpuFabric,
    nic_share: float,
) -> LlmServingPrediction:
    """:func:`predict_llm_serving` for one layout."""
    precision = inputs.precision.upper()
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision: {inputs.precision!r} is not an LLM precision; known: "
            f"{', '.join(PRECISIONS)}"
        )
    kv_precision = (inputs.kv_cache_precision or DEFAULT_KV_PRECISION[precision]).upper()
    if kv_precision not in KV_CACHE_PRECISIONS:
        raise ValueError(
            f"kvCachePrecision: {kv_precision!r}; known: {', '.join(KV_CACHE_PRECISIONS)}"
        )
    host = catalog.host(inputs.accelerator, layout.per_host, inputs.machine_type)
    acc = host.accelerator
    model = inputs.model
    tp, pp, dp = layout.tensor, layout.pipeline, layout.attention_data
    accelerators = tp * pp * dp
    price = host.price_per_hour * host_share(host) * layout.hosts
    span = ReplicaSpan(layout.per_host, pp, fabric, nic_share, host.machine)
    w = WEIGHT_BYTES[precision]
    kv = KV_BYTES[kv_precision]
    in_mean, out_mean = inputs.input_tokens_mean, inputs.output_tokens_mean
    in_p99 = inputs.input_tokens_p99 or in_mean
    out_p99 = inputs.output_tokens_p99 or out_mean
    in_lengths, out_lengths = Lengths(in_mean, in_p99), Lengths(out_mean, out_p99)
    longest = in_p99 + out_p99
    notes: list[str] = []
    reason: str | None = None
    compute = COMPUTE_PRECISION[precision]
    for p, what in ((compute, "weights"), ("fp8" if kv_precision == "FP8" else compute, "")):
        if p in UNITS_WORDS and not acc.supports(p) and reason is None:
            field_name = "precision" if what else "kvCachePrecision"
            instead = (
                "BF16" if not what else ("FP8 or INT4" if acc.supports("fp8") else "BF16 or INT4")
            )
            reason = (
                f"{field_name} {p.upper()} needs {UNITS_WORDS[p]}; {acc.name} has none: "
                f"use {instead}"
            )
    if reason is None and model.heads % tp:
        reason = (
            f"tensor parallelism {tp} must divide the {model.heads} attention heads "
            f"(perReplica {inputs.per_replica}, {layout.words()})"
        )
    if reason is None and pp > model.layers:
        reason = f"{pp} pipeline stages exceed the model's {model.layers} layers"
    ep = _expert_degree(inputs, model, tp, dp)
    dispatcher = _dispatcher(inputs, model)
    if ep > 1 and not exchanges_tokens(ep, dp, dispatcher):
        asked = inputs.expert_dispatch
        notes.append(
            f"expert parallelism {ep} under tensor-parallel attention: every rank holds the "
            "step's tokens and all-reduces its experts' partial sums, as sliced experts do; no "
            "dispatch or combine"
            + (
                f" (expertDispatch {asked} applies under attention data parallelism)"
                if asked
                else ""
            )
        )
    checkpoint = checkpoint_note(model, float(w), inputs.engine, acc.name)
    if checkpoint:
        notes.append(checkpoint)
    usable = reason is None or compute not in UNITS_WORDS
    peak = acc.peak(compute) if usable else acc.peak("bf16")
    weights_per_acc = float(
        weights_bytes_per_accelerator(model, w, tp, pp, dp, inputs.redundant_experts)
    )
    # the whole replica's cache per token of a mean sequence (less than every layer's where a
    # sliding window holds only its last tokens)
    served = in_mean + out_mean
    kv_total = float(model.kv_cache_bytes(served, kv)) / served
    profile = serving_engine(inputs.engine)
    pool = _profiled_serving(catalog, host, compute if usable else "bf16")
    if pool.note:
        notes.append(pool.note)
    terms = serving_terms(
        model,
        acc,
        tp,
        peak,
        w,
        kv,
        in_mean,
        out_mean,
        kv_memory_fraction=profile.kv_memory_fraction(acc.memory_bytes, weights_per_acc),
        compute_precision=compute if usable else "bf16",
        span=span if (pp > 1 or layout.tensor_hosts > 1 or layout.hosts > 1) else None,
        expert_parallel=ep,
        ceilings=pool.ceilings,
        attention_data=dp,
        redundant_experts=inputs.redundant_experts,
        dispatcher=dispatcher,
        # DeepEP's normal kernels where the steps are prompts, its low-latency ones otherwise
        dispatch_kernels="normal" if inputs.phase == "prefill" else "low_latency",
        two_batch_overlap=inputs.two_batch_overlap,
        serving_engine=inputs.engine,
    )
    if inputs.phase == "decode":
        # The prompt's KV cache arrives over the fabric (the prefill side computed it): the
        # step carries no prompt FLOPs; a request still holds its whole context in the cache.
        terms = terms._replace(prompt_compute=np.zeros_like(terms.prompt_compute))
    cache_tokens = int(terms.kv_cache_tokens)
    # A sequence lives in one attention group's cache.
    max_model_len = min(model.sequence_length, cache_tokens // dp)
    max_sequences = int(cache_tokens // max(1.0, in_mean + out_mean))
    if reason is None and max_model_len < longest:
        reason = does_not_fit(
            inputs.model,
            inputs.model_name,
            inputs.precision,
            acc,
            catalog,
            longest,
            kv,
            layout.tensor,
            layout.pipeline,
        )
    if reason is None and longest > model.sequence_length:
        reason = (
            f"a p99 request of {longest:,.0f} tokens (input + output) is longer than the "
            f"architecture's sequenceLength {model.sequence_length:,}"
        )
    ttft_t, tpot_t = inputs.ttft_p99_seconds, inputs.tpot_p99_seconds
    if inputs.target_output_tokens_per_second is not None:
        target = inputs.target_output_tokens_per_second / out_mean
        target_words = f"{inputs.target_output_tokens_per_second:,.0f} output tokens/s"
    else:
        target = float(inputs.target_requests_per_second or 0.0)
        target_words = f"{target:,.4g} req/s"
    bound_replicas = inputs.replicas if inputs.replicas is not None else inputs.max_replicas
    common = dict(
        max_concurrent_sequences=max_sequences,
        max_model_len=max_model_len,
        kv_cache_bytes_per_token=kv_total,
        weights_bytes_per_accelerator=weights_per_acc,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        hosts_per_replica=layout.hosts,
        machine_type=host.machine.name,
        precision=precision,
        kv_cache_precision=kv_precision,
        max_replicas=bound_replicas,
        price_per_replica_hour_usd=price,
        expert_parallel=ep,
        attention_data_parallel=dp,
        redundant_experts=inputs.redundant_experts,
        expert_dispatch=dispatcher if model.is_moe else "",
        two_batch_overlap=inputs.two_batch_overlap,
        max_batch_size=inputs.max_batch_size,
        batching="Static" if inputs.static_batching else "Continuous",
        engine=profile.name,
        evidence=(
            f"engine {profile.name} ({inputs.engine_source or 'given'}); "
            + serving_evidence(profile, acc.name, tp, across_hosts=layout.tensor_hosts > 1)
            + prefill_attention_evidence(
                ceilings_for(acc) if pool.ceilings is None else pool.ceilings, acc.nccl_arch
            )
            + pool.evidence
        ),
    )
    if reason is not None:  # nothing runs: no throughput to speak of
        replicas = inputs.replicas if inputs.replicas is not None else inputs.min_replicas
        return LlmServingPrediction(
            replicas=replicas,
            replicas_needed=None,
            feasible=False,
            reason=reason,
            requests_per_second_per_replica=0.0,
            output_tokens_per_second_per_replica=0.0,
            saturation_requests_per_second=0.0,
            ttft_p99_seconds=None,
            tpot_p99_seconds=None,
            max_num_seqs=0,
            binding="",
            bottleneck="infeasible",
            cost_per_hour_usd=max(replicas, 0) * price,
            notes=tuple(notes),
            max_num_batched_tokens=inputs.max_num_batched_tokens or 0,
            **common,  # type: ignore[arg-type]
        )

    schedule = StaticReplica if inputs.static_batching else _Replica
    replica = schedule(terms, inputs, in_lengths, out_lengths, float(cache_tokens))
    pick = replica.pick
    offline = np.asarray(replica.cap.rate, dtype=np.float64)
    saturation = float(offline[pick])
    best_offline = float(
        getattr(replica, "offline_best_rate", None) or offline[replica.best_offline]
    )
    rate = float(replica.sustainable[pick])
    max_num_seqs = int(replica.seqs[pick])
    budget = int(replica.budgets[pick])
    ttft_rate = float(replica.ttft_rate[pick])
    tpot_rate = float(replica.tpot_rate[pick])
    ttft_all = not math.isfinite(ttft_rate)
    tpot_all = not math.isfinite(tpot_rate)
    capacity_binds = int(np.asarray(replica.cap.binds)[pick])
    curve = _curve(replica, out_mean)
    if rate <= 0.0:
        idle = replica.points(np.array([saturation * 1e-3]))
        idle_ttft, idle_tpot = float(idle.ttft[0.99][0]), float(idle.tpot[0.99][0])
        where = f"({accelerators} x {acc.name}, {layout.words()}, {precision})"
        if idle_ttft > ttft_t:
            reason = (
                f"TTFT p99 target {_ms(ttft_t)} is below the {_ms(idle_ttft)} a "
                f"{in_p99:,.0f}-token prompt takes on an idle replica {where}"
            )
        elif idle_tpot > tpot_t:
            reason = (
                f"TPOT p99 target {_ms(tpot_t)} is below the {_ms(idle_tpot)} a decode step "
                f"takes on an idle replica {where}"
            )
        else:
            reason = f"no rate meets the targets on {accelerators} x {acc.name} at {precision}"
        reason += (
            f"; offline it serves {best_offline * out_mean:,.0f} output tokens/s "
            f"({best_offline:,.3g} req/s) per replica with no latency target"
        )

    needed: int | None = None if rate <= 0.0 else max(1, math.ceil(target / rate - 1e-9))
    if inputs.replicas is not None:
        replicas = inputs.replicas
    else:
        replicas = max(inputs.min_replicas, needed if needed is not None else inputs.min_replicas)
        if inputs.max_replicas is not None:
            replicas = min(replicas, inputs.max_replicas)
    if reason is None and needed is not None and replicas < needed:
        bound = "replicas" if inputs.replicas is not None else "maxReplicas"
        if inputs.phase == "prefill":  # a prefill side: prompts, and no TPOT to hold
            reason = (
                f"{bound} {replicas} x {rate:,.3g} prompts/s = {replicas * rate:,.3g} prompts/s "
                f"within TTFT p99 {_ms(ttft_t)}, below the target {target_words} ({needed} "
                f"needed; offline maximum {best_offline:,.3g} prompts/s per replica)"
            )
        else:
            reason = (
                f"{bound} {replicas} x {rate * out_mean:,.0f} output tokens/s = "
                f"{replicas * rate * out_mean:,.0f} output tokens/s within TTFT p99 "
                f"{_ms(ttft_t)} and TPOT p99 {_ms(tpot_t)}, below the target {target_words} "
                f"({needed} needed; offline maximum {best_offline * out_mean:,.0f} output "
                "tokens/s per replica)"
            )
    ttft: float | None = None
    tpot: float | None = None
    if replicas > 0 and rate > 0.0:
        at = replica.points(np.array([target / replicas]))
        if math.isfinite(float(at.ttft[0.99][0])):
            ttft, tpot = float(at.ttft[0.99][0]), float(at.tpot[0.99][0])
    if replicas <= 0:
        reason = reason or f"replicas is 0: nothing serves the target {target_words}"
    binding = replica.limit_index  # 0 TTFT, 1 TPOT, 2 utilization
    if binding == 2 and capacity_binds == batching.CAPACITY_KV_CACHE:
        binding = BINDS_KV_CACHE
    elif binding == 2:
        binding = BINDS_UTILIZATION
    step = float(np.asarray(replica.cap.step)[pick])
    running = float(np.asarray(replica.cap.slots)[pick])
    gemm_compute = running * float(
        decode_gemm_seconds_per_token(terms, running) + terms.expert_gemm_per_token
    )
    experts_read = model.experts * float(
        expert_fraction_read(terms.expert_miss_per_token, max(running, 1.0))
    )
    resource = (
        f"compute, {compute.upper()} {peak * accelerators / 1e12:g} TFLOPS"
        if gemm_compute > float(weights_read_seconds(terms, max(running, 1.0)))
        else f"HBM bandwidth in decode, {acc.memory_bandwidth * accelerators / GB:g} GB/s"
    )
    del step
    if rate <= 0.0:
        bottleneck = "infeasible"
        binding_words = ""
    else:
        binding_words = BINDING_WORDS[binding]
        bottleneck = {
            BINDS_TTFT: f"TTFT target (compute in prefill, {compute.upper()})",
            BINDS_TPOT: f"TPOT target ({resource})",
            BINDS_KV_CACHE: f"KV cache capacity ({max_num_seqs:,} sequences)",
            BINDS_UTILIZATION: f"utilization headroom ({resource})",
        }[binding]
    return LlmServingPrediction(
        replicas=replicas,
        replicas_needed=needed,
        feasible=reason is None,
        reason=reason,
        requests_per_second_per_replica=rate,
        output_tokens_per_second_per_replica=rate * out_mean,
        saturation_requests_per_second=saturation,
        ttft_p99_seconds=ttft,
        tpot_p99_seconds=tpot,
        max_num_seqs=max_num_seqs,
        binding=binding_words,
        bottleneck=bottleneck,
        cost_per_hour_usd=max(replicas, 0) * price,
        notes=tuple(notes),
        offline_requests_per_second=best_offline,
        offline_output_tokens_per_second=best_offline * out_mean,
        offline_max_num_seqs=int(
            getattr(replica, "offline_best_seqs", None) or replica.seqs[replica.best_offline]
        ),
        ttft_slo_rate=None if ttft_all else ttft_rate,
        tpot_slo_rate=None if tpot_all else tpot_rate,
        load_curve=curve,
        max_num_batched_tokens=budget,
        experts_read_per_step=experts_read,
        replica_terms=terms,
        **common,  # type: ignore[arg-type]
    )
