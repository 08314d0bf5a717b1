"""LLM serving: prefill, decode, the KV cache and continuous batching, per replica.

A replica is one host with ``tp`` accelerators running one model with tensor parallelism
(Megatron-style: every matrix split ``tp`` ways, two all-reduces of the activations per layer).
Notation: P_m the matmul parameters (every layer's and the LM head's), w the bytes per weight,
k the KV-cache bytes per token per accelerator, c the mean context a decoding sequence attends
to (prompt + half its output), e_c / e_m the compute and HBM efficiencies, O the per-step
overhead. Each formula is stated once, here:

- **Prefill** of n prompt tokens (a step that carries only them):
  ``O + max(n x (2 P_layers + attention over n/2) / (tp x peak x e_c), P_m w / (tp x HBM x e_m))
  + 2 L all-reduces of n x hidden activations``; the LM head runs on the last token only.
- **Decode step** for N running sequences plus p prompt tokens piggy-backed on the same step:
  ``O + 2 L all-reduces of (N + p) x hidden + max(compute of N decode tokens and p prompt
  tokens, (P_m w + N c k_total) / (tp x HBM x e_m))``: the weights are read once per step, each
  sequence's cache once. Tensor parallelism divides the weights, the KV heads (a KV head is never
  split: ``ceil(kv_heads / tp)`` per accelerator) and the FLOPs.
- **Chunked prefill**: prompts are not a separate phase but tokens of the same steps as the
  decodes (Sarathi-Serve, vLLM's chunked prefill), so at a replica's arrival rate lambda each step
  carries p = lambda x input_mean x tau prompt tokens. While the step is bound by HBM bandwidth
  those tokens are nearly free; once compute binds they stretch every step (the prefill
  interference on TPOT). Chunking spreads a prompt over steps without changing its total work, so
  the model uses the per-second averages, not per-step spikes.
- **Continuous batching, steady state**: a sequence decodes for output_mean steps, so by Little's
  law N = lambda x output_mean x tau; with tau = step(N, p) both branches of the roofline are
  linear in tau and the fixed point is closed-form (:func:`steady_state`). Sequences never queue
  for decode (admission is per step), so the number running is Poisson (an M/G/infinity system)
  and its 99th percentile N99 ~ N + z sqrt(N) (normal approximation, z = 2.326).
- **TPOT p99** = the step time at N99 sequences. **TTFT p99** = one step (a new prompt joins at
  the next step boundary) + the step that carries a p99 prompt with the running decodes + the
  p99 wait behind other prompts (prompts are served first-come, first-served: M/D/1 with service
  input_mean prompt tokens of compute, the tail law of :mod:`ringmaster.engine.inference`).
- **KV cache**: the HBM left after the weights and :data:`HBM_RESERVE_FRACTION` holds the cache;
  a sequence needs input_mean + output_mean tokens of it at its end, which bounds the sequences
  that run at once (:attr:`LlmServingPrediction.max_concurrent_sequences`).
- **Sustainable rate**: the largest lambda whose N99 fits the cache, whose TPOT and TTFT p99 meet
  their targets, and which stays within ``max_utilization`` of the saturation rate (the rate at
  which the mean batch fills the KV cache); replicas = target / that, within min/max.

Precisions: ``BF16``/``FP16`` (2-byte weights), ``FP8`` (1-byte weights, FP8 tensor cores: H100
and later), ``INT4`` (weight-only W4A16, AWQ/GPTQ: 4-bit weights plus one FP16 scale per group of
128, computed in 16-bit). The KV cache is 16-bit, or FP8 when ``kv_cache_precision`` says so.
The constants are fitted on named published points and checked on the rest
(:mod:`ringmaster.calibration.llm_serving`, ``ringmaster calibrate``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives
from ringmaster.engine.efficiency import NVLINK_EFFICIENCY, PCIE_EFFICIENCY
from ringmaster.engine.hardware import DEFAULT_CATALOG, Accelerator, Catalog, UnknownHardwareError
from ringmaster.engine.inference import tail_wait
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GB, US

F64 = NDArray[np.float64]

# --- constants ------------------------------------------------------------------------------------

# Sustained fraction of the dense tensor peak in prefill and in compute-bound decode. Fitted on
# one point, TensorRT-LLM's batch-1 time to first token of LLaMA-7B with a 2,048-token prompt on
# A100 in FP16, 133 ms (trtllm-batch1-ttft-7b: the most compute-bound point published); checked
# on the other TTFT points and the throughput table (calibration.llm_serving.report).
LLM_COMPUTE_EFFICIENCY = 0.672
# Achieved fraction of HBM bandwidth when a decode step streams the weights and KV cache, and the
# fixed cost of one step (kernel launches, sampling, scheduling). Fitted together on two points:
# gpt-fast's batch-1 decode of Llama-2-7B in BF16 on A100-80GB at TP1 (104.9 tokens/s) and TP2
# (168.8); checked at TP4 and TP8.
LLM_MEMORY_EFFICIENCY = 0.792
LLM_STEP_OVERHEAD_SECONDS = 1.312e-3
# HBM kept out of the weights and the KV cache (activations, CUDA context, NCCL buffers, the
# allocator's fragmentation): vLLM's default gpu_memory_utilization is 0.9 (vllm/config.py,
# CacheConfig), i.e. 10% reserved.
HBM_RESERVE_FRACTION = 0.10
# NCCL's tuning model for small messages, which tensor-parallel activations are (a few MB at
# most): ring algorithm, LL protocol (nccl src/graph/tuning.cc: baseLat ring LL 6.6 us, hwLat
# ring LL 0.6 us on NVLink, 1.0 us on PCIe).
TP_ALLREDUCE_BASE_LATENCY = 6.6 * US
TP_HOP_LATENCY = {"nvlink": 0.6 * US, "pcie": 1.0 * US, "ici": 0.6 * US}  # ICI: borrowed NVLink
_LINK_EFFICIENCY = {"nvlink": NVLINK_EFFICIENCY, "pcie": PCIE_EFFICIENCY, "ici": NVLINK_EFFICIENCY}
# Activations travel in 16-bit whatever the weights are (FP8 and W4A16 kernels emit BF16/FP16).
ACTIVATION_BYTES = 2.0
# AWQ's and GPTQ's default group size: one FP16 scale per 128 weights (AWQ, Lin et al. 2024).
INT4_GROUP_SIZE = 128
# z of the 99th percentile of the standard normal (the Poisson concurrency's tail).
_Z99 = 2.3263478740408408
_BISECTION_STEPS = 20  # the rate to 1e-6 of its bracket: below any figure printed
_GRID_POINTS, _GRID_ROUNDS = 63, 4  # one configuration: 64^-4 = 6e-8

PRECISIONS = ("BF16", "FP16", "FP8", "INT4")
KV_CACHE_PRECISIONS = ("BF16", "FP16", "FP8")
WEIGHT_BYTES: dict[str, float] = {
    "BF16": 2.0,
    "FP16": 2.0,
    "FP8": 1.0,
    "INT4": 0.5 + 2.0 / INT4_GROUP_SIZE,
}
# The precision the matrix units compute in: W4A16 dequantises to 16-bit.
COMPUTE_PRECISION = {"BF16": "bf16", "FP16": "fp16", "FP8": "fp8", "INT4": "bf16"}
KV_BYTES = {"BF16": 2.0, "FP16": 2.0, "FP8": 1.0}
# The KV cache's default precision for each weight precision: the activations' precision.
DEFAULT_KV_PRECISION = {"BF16": "BF16", "FP16": "FP16", "FP8": "FP8", "INT4": "FP16"}

# What binds the sustainable rate (the constraint) ...
BINDS_TTFT = 0
BINDS_TPOT = 1
BINDS_KV_CACHE = 2
BINDS_UTILIZATION = 3
BINDING_WORDS = ("TTFT target", "TPOT target", "KV cache capacity", "utilization headroom")


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def _tensor_parallel_allreduce_seconds(
    nbytes: ArrayLike, ranks: ArrayLike, accelerator: Accelerator
) -> F64:
    """One all-reduce of ``nbytes`` over the replica's ``ranks`` accelerators on their host link.
    The only call into the collective model: switching it is a one-place change."""
    link = accelerator.intra_link
    bandwidth = accelerator.intra_bandwidth * _LINK_EFFICIENCY[link]
    ring = collectives.ring_allreduce(
        nbytes, ranks, bandwidth, TP_HOP_LATENCY[link], TP_ALLREDUCE_BASE_LATENCY
    )
    return ring.seconds


# --- the vectorised core ------------------------------------------------------------------------


class ServingTerms(NamedTuple):
    """Per-replica costs, in seconds, that the steady state combines (arrays broadcast)."""

    overhead: F64  # O: fixed cost of a step
    allreduce_base: F64  # 2 L all-reduces of no bytes (latency)
    allreduce_per_token: F64  # their bandwidth cost per token in the step
    weights_read: F64  # reading the weights once (per accelerator, at achieved HBM)
    kv_read_per_sequence: F64  # reading one sequence's mean context from the cache
    decode_compute_per_token: F64  # one decode token's FLOPs at the mean context
    prefill_compute_per_token: F64  # one prompt token's FLOPs (mean prompt, causal attention)
    output_tokens: F64  # output_mean
    input_tokens: F64  # input_mean
    max_sequences: F64  # KV-cache capacity in sequences of input_mean + output_mean tokens


def serving_terms(
    model: Transformer,
    accelerator: Accelerator,
    tp: ArrayLike,
    peak_flops: ArrayLike,
    weight_bytes_per_parameter: ArrayLike,
    kv_bytes_per_element: ArrayLike,
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    memory_bandwidth: ArrayLike | None = None,
    memory_bytes: ArrayLike | None = None,
    *,
    compute_efficiency: float = LLM_COMPUTE_EFFICIENCY,
    memory_efficiency: float = LLM_MEMORY_EFFICIENCY,
    step_overhead: float = LLM_STEP_OVERHEAD_SECONDS,
) -> ServingTerms:
    """The costs of one replica of ``tp`` accelerators (every argument but the model may be an
    array: one call evaluates a grid of configurations)."""
    g = _f(tp)
    n_in = _f(input_tokens)
    n_out = _f(output_tokens)
    hbm = _f(accelerator.memory_bandwidth if memory_bandwidth is None else memory_bandwidth)
    capacity = _f(accelerator.memory_bytes if memory_bytes is None else memory_bytes)
    rate = _f(peak_flops) * g * compute_efficiency
    w = _f(weight_bytes_per_parameter)
    achieved_hbm = hbm * memory_efficiency
    context = n_in + 0.5 * n_out
    kv_heads = np.ceil(model.kv_heads / g)  # a KV head is replicated, never split
    kv_per_token = 2.0 * model.layers * kv_heads * model.head_dim * _f(kv_bytes_per_element)
    two_l = 2.0 * model.layers
    one_token = ACTIVATION_BYTES * model.hidden
    base = two_l * _tensor_parallel_allreduce_seconds(0.0, g, accelerator)
    per_token = two_l * _tensor_parallel_allreduce_seconds(one_token, g, accelerator) - base
    layer_flops = 2.0 * model.layers * model.parameters_per_layer
    attention = model.attention_flops_per_token(1.0)  # linear in the context
    free = capacity * (1.0 - HBM_RESERVE_FRACTION) - model.parameters * w / g
    return ServingTerms(
        overhead=np.full_like(g, step_overhead),
        allreduce_base=base,
        allreduce_per_token=per_token,
        weights_read=model.matmul_parameters * w / g / achieved_hbm,
        kv_read_per_sequence=context * kv_per_token / achieved_hbm,
        decode_compute_per_token=(2.0 * model.matmul_parameters + attention * context) / rate,
        prefill_compute_per_token=(
            layer_flops
            + 2.0 * model.vocab * model.hidden / np.maximum(n_in, 1.0)
            + attention * 0.5 * n_in
        )
        / rate,
        output_tokens=n_out,
        input_tokens=n_in,
        max_sequences=np.floor(np.maximum(free, 0.0) / (kv_per_token * (n_in + n_out))),
    )


def kv_bytes_per_token_per_accelerator(model: Transformer, tp: int, kv_bytes: float) -> float:
    """2 x layers x ceil(kv_heads / tp) x head_dim x bytes: one token's cache on one accelerator."""
    return 2.0 * model.layers * math.ceil(model.kv_heads / tp) * model.head_dim * kv_bytes


def step_seconds(terms: ServingTerms, sequences: ArrayLike, prompt_tokens: ArrayLike) -> F64:
    """One step that decodes ``sequences`` and prefills ``prompt_tokens`` alongside."""
    n = _f(sequences)
    p = _f(prompt_tokens)
    compute = n * terms.decode_compute_per_token + p * terms.prefill_compute_per_token
    memory = terms.weights_read + n * terms.kv_read_per_sequence
    return (
        terms.overhead
        + terms.allreduce_base
        + (n + p) * terms.allreduce_per_token
        + np.maximum(compute, memory)
    )


def prefill_seconds(terms: ServingTerms, prompt_tokens: ArrayLike) -> F64:
    """A step carrying one prompt and nothing else: its TTFT on an idle replica."""
    return step_seconds(terms, 0.0, prompt_tokens)


def largest_batch_within(terms: ServingTerms, step_target: float) -> int:
    """The most sequences one decode step serves within ``step_target``, at most the cache's
    bound and at least 1. The step is linear in the batch on each roofline branch and must meet
    the target on both: closed form."""
    fixed = float(terms.overhead + terms.allreduce_base)
    ar = float(terms.allreduce_per_token)
    compute = (step_target - fixed) / (ar + float(terms.decode_compute_per_token))
    memory = (step_target - fixed - float(terms.weights_read)) / (
        ar + float(terms.kv_read_per_sequence)
    )
    largest = math.floor(min(compute, memory, float(terms.max_sequences)) + 1e-9)
    return max(1, largest)


class SteadyState(NamedTuple):
    step_seconds: F64  # tau, mean step time = mean TPOT
    sequences: F64  # N, mean running sequences
    sequences_p99: F64
    tpot_p99: F64
    ttft_p99: F64
    compute_bound: NDArray[np.bool_]  # the mean step is bound by compute (else HBM)


def _mean_step(terms: ServingTerms, lam: F64) -> tuple[F64, F64, F64]:
    """tau (infinite where the replica cannot keep up) and its two roofline branches."""
    fixed = terms.overhead + terms.allreduce_base
    ar = lam * (terms.output_tokens + terms.input_tokens) * terms.allreduce_per_token
    slope_c = ar + lam * (
        terms.output_tokens * terms.decode_compute_per_token
        + terms.input_tokens * terms.prefill_compute_per_token
    )
    slope_m = ar + lam * terms.output_tokens * terms.kv_read_per_sequence
    with np.errstate(divide="ignore", invalid="ignore"):
        tau_c = np.where(slope_c < 1.0, fixed / (1.0 - slope_c), np.inf)
        tau_m = np.where(slope_m < 1.0, (fixed + terms.weights_read) / (1.0 - slope_m), np.inf)
    return np.maximum(tau_c, tau_m), tau_c, tau_m


def _tpot_p99(terms: ServingTerms, lam: F64, tau: F64) -> F64:
    n = lam * terms.output_tokens * tau
    return step_seconds(terms, n + _Z99 * np.sqrt(n), lam * terms.input_tokens * tau)


def _ttft_p99(terms: ServingTerms, lam: F64, tau: F64, input_p99: ArrayLike) -> F64:
    """One step (a prompt joins at the next step boundary) + the step that carries a p99 prompt
    with the running decodes + the p99 wait behind other prompts (M/D/1)."""
    carrying = step_seconds(terms, lam * terms.output_tokens * tau, input_p99)
    service = terms.input_tokens * terms.prefill_compute_per_token
    return tau + carrying + tail_wait(service, lam * service)


def steady_state(terms: ServingTerms, rate: ArrayLike, input_p99: ArrayLike) -> SteadyState:
    """The replica at ``rate`` requests/s (see the module's docstring); infinite where it cannot
    keep up."""
    lam = _f(rate)
    tau, tau_c, tau_m = _mean_step(terms, lam)
    finite = np.isfinite(tau)
    with np.errstate(invalid="ignore"):
        n = lam * terms.output_tokens * tau
        tpot = _tpot_p99(terms, lam, tau)
        ttft = _ttft_p99(terms, lam, tau, input_p99)
    return SteadyState(
        step_seconds=tau,
        sequences=np.where(finite, n, np.inf),
        sequences_p99=np.where(finite, n + _Z99 * np.sqrt(n), np.inf),
        tpot_p99=np.where(finite, tpot, np.inf),
        ttft_p99=np.where(finite, ttft, np.inf),
        compute_bound=tau_c >= tau_m,
    )


def rate_at_sequences(terms: ServingTerms, sequences: ArrayLike) -> F64:
    """The rate at which the mean batch is ``sequences``: closed form from N = lambda x out x
    tau on each roofline branch (tau grows with the rate, so the smaller branch rate binds)."""
    fixed = terms.overhead + terms.allreduce_base
    n = _f(sequences)
    out = terms.output_tokens
    ratio = terms.input_tokens / out  # prompt tokens per decode token
    per_seq_c = (
        terms.decode_compute_per_token
        + ratio * terms.prefill_compute_per_token
        + (1.0 + ratio) * terms.allreduce_per_token
    )
    per_seq_m = terms.kv_read_per_sequence + (1.0 + ratio) * terms.allreduce_per_token
    with np.errstate(divide="ignore", invalid="ignore"):
        rate_c = n / (out * (fixed + n * per_seq_c))
        rate_m = n / (out * (fixed + terms.weights_read + n * per_seq_m))
    return np.where(n > 0.0, np.minimum(rate_c, rate_m), 0.0)


def saturation_rate(terms: ServingTerms) -> F64:
    """The rate at which the mean batch fills the KV cache: the most a replica can carry."""
    return rate_at_sequences(terms, np.where(terms.max_sequences >= 1.0, terms.max_sequences, 0.0))


def _p99_fits(terms: ServingTerms) -> F64:
    """The rate whose p99 concurrency N + z sqrt(N) just fits the cache: sqrt(N) is the positive
    root of x^2 + z x - max_sequences."""
    root = 0.5 * (-_Z99 + np.sqrt(_Z99 * _Z99 + 4.0 * np.maximum(terms.max_sequences, 0.0)))
    return rate_at_sequences(terms, np.where(terms.max_sequences >= 1.0, root * root, 0.0))


class SustainableRate(NamedTuple):
    rate: F64  # requests/s per replica
    binding: NDArray[np.int64]  # BINDS_*
    saturation: F64


def sustainable_rate(
    terms: ServingTerms,
    input_p99: ArrayLike,
    ttft_target: ArrayLike,
    tpot_target: ArrayLike,
    max_utilization: ArrayLike,
) -> SustainableRate:
    """The largest rate meeting the TTFT and TPOT p99 targets, with N99 within the KV cache and
    at most ``max_utilization`` of the saturation rate. The last two are closed-form; the
    targets tighten as the rate grows, so a vectorised bracket search finds each limit; the
    smallest limit binds."""
    saturation = saturation_rate(terms)
    fits = _p99_fits(terms)
    cap = _f(max_utilization) * saturation
    ttft = _f(ttft_target)
    tpot = _f(tpot_target)
    prompt_p99 = _f(input_p99)
    shape = np.broadcast_shapes(cap.shape, ttft.shape, tpot.shape, prompt_p99.shape)
    top = np.broadcast_to(np.minimum(fits, cap), shape)

    # The steady state's coefficients, once (the search evaluates them many times). Below the
    # saturation rate both roofline branches have slope < 1, so tau is finite: no guards.
    t = terms
    fixed = t.overhead + t.allreduce_base
    ar = t.allreduce_per_token
    tokens = t.output_tokens + t.input_tokens
    slope_c = (
        tokens * ar
        + t.output_tokens * t.decode_compute_per_token
        + (t.input_tokens * t.prefill_compute_per_token)
    )
    slope_m = tokens * ar + t.output_tokens * t.kv_read_per_sequence
    with_weights = fixed + t.weights_read
    service = t.input_tokens * t.prefill_compute_per_token

    def step(n: F64, p: F64) -> F64:
        compute = n * t.decode_compute_per_token + p * t.prefill_compute_per_token
        return (
            fixed + (n + p) * ar + np.maximum(compute, t.weights_read + n * t.kv_read_per_sequence)
        )

    def tau_of(lam: F64) -> F64:
        return np.maximum(fixed / (1.0 - lam * slope_c), with_weights / (1.0 - lam * slope_m))

    def ttft_ok(lam: F64) -> NDArray[np.bool_]:
        tau = tau_of(lam)
        carrying = step(lam * t.output_tokens * tau, prompt_p99)
        return tau + carrying + tail_wait(service, lam * service) <= ttft

    def tpot_ok(lam: F64) -> NDArray[np.bool_]:
        tau = tau_of(lam)
        n = lam * t.output_tokens * tau
        return step(n + _Z99 * np.sqrt(n), lam * t.input_tokens * tau) <= tpot

    limits = [_largest_ok(ttft_ok, top), _largest_ok(tpot_ok, top)]
    stacked = np.stack([*limits, np.broadcast_to(fits, shape), np.broadcast_to(cap, shape)])
    binding = np.argmin(stacked, axis=0)
    return SustainableRate(np.min(stacked, axis=0), binding.astype(np.int64), saturation)


def _largest_ok(ok: Callable[[F64], NDArray[np.bool_]], top: F64) -> F64:
    """The largest rate in [0, top] where ``ok`` holds (it holds at 0 or nowhere, and fails
    from some rate on); infinite where it holds at ``top`` (this constraint does not bind).
    One configuration: a few rounds of many points; a grid: a bisection of all at once."""
    whole = ok(top)
    lo = np.zeros_like(top)
    hi = np.array(top, dtype=np.float64)
    if top.shape == ():
        fractions = np.arange(1.0, _GRID_POINTS + 1.0) / (_GRID_POINTS + 1.0)
        low, high = 0.0, float(hi)
        for _ in range(_GRID_ROUNDS):
            rates = low + (high - low) * fractions
            count = int(np.count_nonzero(ok(rates)))  # monotone: a good prefix
            low, high = (
                float(rates[count - 1]) if count else low,
                float(rates[count]) if count < _GRID_POINTS else high,
            )
        lo = np.asarray(low)
    else:
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            good = ok(mid)
            lo = np.where(good, mid, lo)
            hi = np.where(good, hi, mid)
    return np.where(whole, np.inf, lo)


# --- the scalar path ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmServingInputs:
    model: Transformer
    accelerator: str
    per_replica: int  # tensor-parallel degree
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


@dataclass(frozen=True)
class LlmServingPrediction:
    replicas: int
    replicas_needed: int | None  # before min/max; None when nothing meets the targets
    feasible: bool
    reason: str | None
    requests_per_second_per_replica: float  # sustainable at the SLO
    output_tokens_per_second_per_replica: float
    saturation_requests_per_second: float  # with no latency target
    ttft_p99_seconds: float | None  # at target / replicas
    tpot_p99_seconds: float | None
    max_concurrent_sequences: int  # the KV cache's bound
    max_num_seqs: int  # the batch the sizing assumes: the largest that meets the TPOT target
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


def _ms(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1.0 else f"{seconds * 1e3:.3g} ms"


def _gb(nbytes: float) -> str:
    return f"{nbytes / GB:.3g} GB"


def _params(n: float) -> str:
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def _fits(
    model: Transformer, acc: Accelerator, tp: int, w: float, tokens: float, kv: float
) -> bool:
    free = acc.memory_bytes * (1.0 - HBM_RESERVE_FRACTION) - model.parameters * w / tp
    return free >= kv_bytes_per_token_per_accelerator(model, tp, kv) * tokens


def _host_shapes(catalog: Catalog, accelerator: str) -> list[int]:
    shapes = []
    for count in (1, 2, 4, 8, 16):
        try:
            catalog.default_machine(accelerator, count)
        except UnknownHardwareError:
            continue
        shapes.append(count)
    return shapes


def _does_not_fit(
    inputs: LlmServingInputs, acc: Accelerator, catalog: Catalog, tokens: float, kv: float
) -> str:
    """Why the weights (and one sequence) do not fit, with the numbers and what would."""
    model, tp, precision = inputs.model, inputs.per_replica, inputs.precision
    need = model.parameters * WEIGHT_BYTES[precision]
    name = inputs.model_name or _params(model.parameters)
    have = f"{tp} x {acc.name} have" if tp > 1 else f"one {acc.name} has"
    text = (
        f"{name} in {precision} needs {_gb(need)} of weights; {have} {_gb(acc.memory_bytes * tp)}"
        f" ({HBM_RESERVE_FRACTION:.0%} reserved)"
    )
    if need / tp <= acc.memory_bytes * (1.0 - HBM_RESERVE_FRACTION):
        text += f" and no room left for one sequence of {tokens:,.0f} tokens"
    options = [
        f"perReplica: {g}"
        for g in _host_shapes(catalog, acc.name)
        if g > tp
        and model.heads % g == 0
        and _fits(model, acc, g, WEIGHT_BYTES[precision], tokens, kv)
    ][:1]
    for other in ("FP8", "INT4"):
        smaller = WEIGHT_BYTES[other] < WEIGHT_BYTES[precision]
        runs = other != "FP8" or acc.supports("fp8")
        if smaller and runs and _fits(model, acc, tp, WEIGHT_BYTES[other], tokens, kv):
            options.append(other)
            break
    if options:
        text += "; use " + " or ".join(options)
    return text


def predict_llm_serving(
    inputs: LlmServingInputs, catalog: Catalog = DEFAULT_CATALOG
) -> LlmServingPrediction:
    """Replicas, throughput, TTFT / TPOT p99 and the KV-cache figures for one LLM endpoint."""
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
    host = catalog.host(inputs.accelerator, inputs.per_replica, inputs.machine_type)
    acc = host.accelerator
    model = inputs.model
    tp = inputs.per_replica
    w = WEIGHT_BYTES[precision]
    kv = KV_BYTES[kv_precision]
    in_mean, out_mean = inputs.input_tokens_mean, inputs.output_tokens_mean
    in_p99 = inputs.input_tokens_p99 or in_mean
    out_p99 = inputs.output_tokens_p99 or out_mean
    longest = in_p99 + out_p99
    notes: list[str] = []
    reason: str | None = None
    compute = COMPUTE_PRECISION[precision]
    for p, what in ((compute, "weights"), ("fp8" if kv_precision == "FP8" else compute, "")):
        if p == "fp8" and not acc.supports("fp8"):
            field_name = "precision" if what else "kvCachePrecision"
            reason = (
                f"{field_name} FP8 needs FP8 tensor cores (H100 and later); {acc.name} has none:"
                f" use {'BF16 or INT4' if what else 'BF16'}"
            )
    if reason is None and model.heads % tp:
        reason = (
            f"tensor parallelism {tp} must divide the {model.heads} attention heads "
            f"(perReplica {tp})"
        )
    peak = acc.peak(compute) if reason is None or compute != "fp8" else acc.peak("bf16")
    weights_per_acc = model.parameters * w / tp
    kv_total = model.kv_cache_bytes_per_token(kv)
    terms = serving_terms(model, acc, tp, peak, w, kv, in_mean, out_mean)
    kv_acc = kv_bytes_per_token_per_accelerator(model, tp, kv)
    free = acc.memory_bytes * (1.0 - HBM_RESERVE_FRACTION) - weights_per_acc
    cache_tokens = max(0, math.floor(free / kv_acc))
    max_model_len = min(model.sequence_length, cache_tokens)
    if reason is None and max_model_len < longest:
        reason = _does_not_fit(inputs, acc, catalog, longest, kv)
    if reason is None and longest > model.sequence_length:
        reason = (
            f"a p99 request of {longest:,.0f} tokens (input + output) is longer than the "
            f"architecture's sequenceLength {model.sequence_length:,}"
        )
    ttft_t, tpot_t = inputs.ttft_p99_seconds, inputs.tpot_p99_seconds
    limit = sustainable_rate(terms, in_p99, ttft_t, tpot_t, inputs.max_utilization)
    rate = float(limit.rate) if reason is None else 0.0
    saturation = float(limit.saturation)
    binding = int(limit.binding)
    if reason is None and rate <= 0.0:
        idle = steady_state(terms, 0.0, in_p99)
        if float(idle.ttft_p99) > ttft_t:
            reason = (
                f"TTFT p99 target {_ms(ttft_t)} is below the {_ms(float(idle.ttft_p99))} a "
                f"{in_p99:,.0f}-token prompt takes on an idle replica ({tp} x {acc.name}, "
                f"{precision})"
            )
        elif float(idle.tpot_p99) > tpot_t:
            reason = (
                f"TPOT p99 target {_ms(tpot_t)} is below the {_ms(float(idle.tpot_p99))} one "
                f"decode step takes at batch 1 ({tp} x {acc.name}, {precision})"
            )
        else:
            reason = f"no rate meets the targets on {tp} x {acc.name} at {precision}"
    # The batch the sizing assumes: the largest whose step meets the TPOT target, within the cache.
    max_num_seqs = largest_batch_within(terms, tpot_t)

    if inputs.target_output_tokens_per_second is not None:
        target = inputs.target_output_tokens_per_second / out_mean
        target_words = f"{inputs.target_output_tokens_per_second:,.0f} output tokens/s"
    else:
        target = float(inputs.target_requests_per_second or 0.0)
        target_words = f"{target:,.4g} req/s"
    needed: int | None = None if rate <= 0.0 else max(1, math.ceil(target / rate - 1e-9))
    if inputs.replicas is not None:
        replicas = inputs.replicas
    else:
        replicas = max(inputs.min_replicas, needed if needed is not None else inputs.min_replicas)
        if inputs.max_replicas is not None:
            replicas = min(replicas, inputs.max_replicas)
    if reason is None and needed is not None and replicas < needed:
        bound = "replicas" if inputs.replicas is not None else "maxReplicas"
        reason = (
            f"{bound} {replicas} x {rate * out_mean:,.0f} output tokens/s = "
            f"{replicas * rate * out_mean:,.0f} output tokens/s within TTFT p99 {_ms(ttft_t)} "
            f"and TPOT p99 {_ms(tpot_t)}, below the target {target_words} ({needed} needed)"
        )
    ttft: float | None = None
    tpot: float | None = None
    if (replicas > 0 and reason is None) or (replicas > 0 and rate > 0.0):
        at = steady_state(terms, target / replicas, in_p99)
        if math.isfinite(float(at.ttft_p99)):
            ttft, tpot = float(at.ttft_p99), float(at.tpot_p99)
    if replicas <= 0:
        reason = reason or f"replicas is 0: nothing serves the target {target_words}"
    compute_bound = bool(steady_state(terms, max(rate, 1e-9), in_p99).compute_bound)
    if reason is not None:
        bottleneck = "infeasible"
        binding_words = ""
    else:
        binding_words = BINDING_WORDS[binding]
        resource = (
            f"compute, {compute.upper()} {peak * tp / 1e12:g} TFLOPS"
            if compute_bound
            else f"HBM bandwidth in decode, {acc.memory_bandwidth * tp / GB:g} GB/s"
        )
        bottleneck = {
            BINDS_TTFT: f"TTFT target (compute in prefill, {compute.upper()})",
            BINDS_TPOT: f"TPOT target ({resource})",
            BINDS_KV_CACHE: f"KV cache capacity ({int(terms.max_sequences):,} sequences)",
            BINDS_UTILIZATION: f"utilization headroom ({resource})",
        }[binding]
    return LlmServingPrediction(
        replicas=replicas,
        replicas_needed=needed,
        feasible=reason is None,
        reason=reason,
        requests_per_second_per_replica=rate,
        output_tokens_per_second_per_replica=rate * out_mean,
        saturation_requests_per_second=saturation if reason is None else 0.0,
        ttft_p99_seconds=ttft,
        tpot_p99_seconds=tpot,
        max_concurrent_sequences=int(terms.max_sequences),
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        kv_cache_bytes_per_token=kv_total,
        weights_bytes_per_accelerator=weights_per_acc,
        tensor_parallel=tp,
        binding=binding_words,
        bottleneck=bottleneck,
        cost_per_hour_usd=max(replicas, 0) * host.price_per_hour,
        machine_type=host.machine.name,
        precision=precision,
        kv_cache_precision=kv_precision,
        notes=tuple(notes),
    )
