"""Continuous batching under Poisson arrivals: the scheduler of a serving engine, as a queue.

The scheduler modelled is vLLM v1's (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``),
which TensorRT-LLM's in-flight batching and SGLang's scheduler resemble:

- every step has a token budget ``T`` (``max_num_batched_tokens``); the running requests are
  served first, one token each while decoding, their next prompt chunk while prefilling;
- the waiting requests are admitted first come, first served while the budget lasts, the running
  count is below ``S`` (``max_num_seqs``) and the KV cache has blocks for their chunk; a prompt
  longer than what is left of the budget is cut (chunked prefill) and continues next step;
- when a running request needs a block and none is free, the last admitted running request is
  preempted: its blocks are freed and it waits again at the head of the queue, to be recomputed.

A seeded discrete-event simulation of exactly this scheduler is the reference (it lives in the
test suite, ``tests/engine/llm_scheduler_reference.py``); this module is the fast method that
sizing uses, stated once here and checked against the simulation from 10% to 95% load:

- **Slots.** A replica runs at most ``c = min(S, K / m)`` sequences, ``K`` the cache's tokens and
  ``m`` the tokens a running sequence holds on average: its prompt, half its output weighted by
  how long it runs (``out (1 + cv^2) / 2``) and half a block (vLLM allocates blocks as a sequence
  grows); the whole ``input + output`` where the engine reserves a sequence's cache on admission
  (TensorRT-LLM's GUARANTEED_NO_EVICT).
- **Offline throughput** (no latency bound): all ``c`` slots run; each slot holds a request for
  ``h = out - 1 + max(1, in / (T - c))`` steps (the first token comes from the prefill step), so
  each step carries ``p = c in / h`` prompt tokens; if ``c + p`` exceeds the budget the budget
  binds and ``c = T h / (h + in)``. Then ``lambda_max = c / (h x step(c, p))`` requests/s.
- **Mean state at a rate lambda**: ``N = lambda h tau`` running (Little's law), ``p = lambda in
  tau`` prompt tokens per step, and ``tau = step(N, p)``; the step is affine in ``tau`` on each
  branch of the GEMM roofline, so the fixed point is closed-form.
- **Waiting for a slot**: an M/G/c queue of ``c`` slots served at the saturated speed, with load
  ``rho = lambda / lambda_max``. The probability of waiting is Halfin and Whitt's (Operations
  Research 29(3), 1981) ``1 / (1 + beta Phi(beta) / phi(beta))`` with ``beta = sqrt(c) (1 - rho)
  / sqrt(rho)``; the wait of those who wait is exponential with rate ``(lambda_max - lambda) x
  2 / (1 + cv_h^2)`` (the M/M/c tail, scaled for the hold time's variability as Allen and
  Cunneen's approximation does).
- **TTFT** = the wait for a slot + the rest of the step under way (uniform in ``[0, tau]``) + the
  steps that carry the prompt's chunks with the other prompts ahead of it. Its quantile adds the
  three parts' means and the root of the sum of their squared excesses at the quantile (the
  quantile of a sum of independent parts, to second order).
- **TPOT** of a request is the mean step over its decode: the running count it sees is Poisson
  about ``N`` (M/G/infinity), averaged over its own lifetime, which shrinks the deviations by
  ``sqrt(2/3)`` (the triangular autocorrelation of an M/D/infinity count over one service time),
  and pinned at ``c`` for the share of time the queue is not empty.

Everything is closed-form and vectorised: one call evaluates every rate (and configuration) of
a grid at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.llm_step import (
    KV_BLOCK_TOKENS,
    ServingTerms,
    expert_fraction_read,
    step_seconds,
    weights_read_seconds,
)

F64 = NDArray[np.float64]

# vLLM v1's defaults for an OpenAI-compatible server on a large-memory GPU
# (vllm/engine/arg_utils.py, EngineArgs._set_default_args: max_num_batched_tokens 8192 for the
# API server on H100-class GPUs). The plan sizes max_num_seqs itself.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# The token budgets the plan chooses from: vLLM's default and two that cut long prompts into
# smaller chunks (a smaller chunk stretches the decode steps it shares less: a lower TPOT p99).
MAX_NUM_BATCHED_TOKENS_CHOICES = (1024, 2048, DEFAULT_MAX_NUM_BATCHED_TOKENS)
# The batch sizes the plan chooses max_num_seqs from (CUDA-graph capture sizes are powers of two
# and multiples of 8 in vLLM; the sizing picks the best of these that the cache holds).
MAX_NUM_SEQS_CHOICES = (8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048)
# The loads a load curve shows (fractions of the offline maximum).
CURVE_LOADS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
# The percentiles a curve reports.
QUANTILES = (0.5, 0.9, 0.99)
# The lifetime average of an M/D/infinity count: variance x 2/3 (see the module docstring).
_LIFETIME_SHRINK = math.sqrt(2.0 / 3.0)


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


# --- length distributions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution given by its mean and 99th percentile: log-normal through
    both (deterministic when they are equal). The simulation samples it; the fast method uses its
    mean, its coefficient of variation and its quantiles."""

    mean: float
    p99: float

    @property
    def sigma(self) -> float:
        """sigma of ln(length): ln(p99 / mean) = 2.326 sigma - sigma^2 / 2, the smaller root
        (p99 at most e^2.7 ~ 15 times the mean; beyond that the tail is capped there)."""
        z = _Z[0.99]
        ratio = math.log(max(self.p99, self.mean) / self.mean)
        return z - math.sqrt(max(z * z - 2.0 * ratio, 0.0))

    @property
    def cv(self) -> float:
        return math.sqrt(math.expm1(self.sigma**2))

    def quantile(self, q: float) -> float:
        s = self.sigma
        return self.mean * math.exp(-0.5 * s * s + _z(q) * s)

    def second_moment_ratio(self) -> float:
        """E[x^2] / E[x]^2 = 1 + cv^2."""
        return 1.0 + self.cv**2

    def sample(self, rng: np.random.Generator, count: int) -> NDArray[np.int64]:
        s = self.sigma
        if s == 0.0:
            return np.full(count, max(1, round(self.mean)), dtype=np.int64)
        x = self.mean * np.exp(rng.normal(-0.5 * s * s, s, count))
        return np.maximum(1, np.rint(x)).astype(np.int64)


_Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.99: 2.3263478740408408}


def _z(q: float) -> float:
    return _Z.get(q) or _normal_quantile(q)


def _normal_quantile(q: float) -> float:
    """Acklam's rational approximation is overkill here: bisection on erf, for rare quantiles."""
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _normal_cdf(x: F64) -> F64:
    """Phi(x), vectorised (Abramowitz and Stegun 7.1.26 on erf: |error| < 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


# --- the scheduler's capacity ---------------------------------------------------------------------


class Capacity(NamedTuple):
    slots: F64  # c: sequences that run at once at saturation
    rate: F64  # lambda_max, requests/s: the offline maximum
    step: F64  # the step at saturation
    hold_steps: F64  # h: steps a request holds a slot
    prompt_tokens: F64  # prompt tokens per step at saturation
    kv_slots: F64  # the cache's bound on slots
    binds: NDArray[np.int64]  # CAPACITY_* : what sets c


CAPACITY_MAX_NUM_SEQS = 0
CAPACITY_KV_CACHE = 1
CAPACITY_TOKEN_BUDGET = 2
CAPACITY_WORDS = ("max-num-seqs", "KV cache", "token budget")


def live_tokens(terms: ServingTerms, output_cv: ArrayLike, reserve_whole: bool = False) -> F64:
    """The cache a running sequence holds on average (see the module's docstring)."""
    if reserve_whole:
        return terms.input_tokens + terms.output_tokens
    grow = 0.5 * terms.output_tokens * (1.0 + _f(output_cv) ** 2)
    return terms.input_tokens + grow + 0.5 * KV_BLOCK_TOKENS


def capacity(
    terms: ServingTerms,
    max_num_seqs: ArrayLike,
    max_num_batched_tokens: ArrayLike = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    output_cv: ArrayLike = 0.0,
    reserve_whole: bool = False,
    input_lengths: Lengths | None = None,
) -> Capacity:
    """The offline maximum of a replica: every slot busy, as many prompt tokens per step as keep
    them busy (see the module's docstring)."""
    budget = _f(max_num_batched_tokens)
    kv_slots = np.floor(terms.kv_cache_tokens / live_tokens(terms, output_cv, reserve_whole))
    if input_lengths is None:
        input_lengths = Lengths(
            float(np.mean(terms.input_tokens)), float(np.mean(terms.input_tokens))
        )
    c = np.minimum(_f(max_num_seqs), kv_slots)
    binds = np.where(_f(max_num_seqs) <= kv_slots, CAPACITY_MAX_NUM_SEQS, CAPACITY_KV_CACHE)
    n_in, n_out = terms.input_tokens, terms.output_tokens
    h = hold_steps(n_out, n_in, budget, c)
    over = c + c * n_in / h > budget
    c_budget = budget * h / (h + n_in)
    binds = np.where(over, CAPACITY_TOKEN_BUDGET, binds)
    c = np.where(over, c_budget, c)
    c = np.maximum(c, 0.0)
    p = np.where(h > 0, c * n_in / np.maximum(h, 1e-9), 0.0)
    tau = expected_step(terms, c, c / np.maximum(h, 1e-9), input_lengths, budget - c)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(c >= 1.0, c / (h * tau), 0.0)
    return Capacity(c, rate, tau, h, p, kv_slots, binds.astype(np.int64))


def hold_steps(n_out: ArrayLike, n_in: ArrayLike, budget: ArrayLike, running: ArrayLike) -> F64:
    """Steps a request holds its slot: its prefill chunks, then out - 1 decode steps."""
    room = np.maximum(_f(budget) - _f(running), 1.0)
    return _f(n_out) - 1.0 + np.maximum(1.0, _f(n_in) / room)


# Prompts per step: 0 .. _MAX_PROMPTS (the last absorbs the Poisson tail); a prompt's length at
# three log-normal nodes (Gauss-Hermite: z = -sqrt 3, 0, sqrt 3 with weights 1/6, 2/3, 1/6).
_MAX_PROMPTS = 4
_NODES = np.array([-math.sqrt(3.0), 0.0, math.sqrt(3.0)])
_NODE_WEIGHTS = np.array([1.0, 4.0, 1.0]) / 6.0
_K = np.arange(_MAX_PROMPTS + 1, dtype=np.float64)
_K_COLUMN = _K[:, None]
_LOG_K_FACTORIAL = np.array([math.lgamma(k + 1.0) for k in range(_MAX_PROMPTS + 1)])


class StepMoments(NamedTuple):
    mean: F64  # E[step]
    residual_mean: F64  # E[step^2] / (2 E[step]): the rest of the step an arrival finds
    longest: F64  # the step of the longest likely lump (for the residual's upper quantiles)
    residual_median: F64
    variance: F64  # of one step


@lru_cache(maxsize=64)
def _prompt_nodes(mean: float, sigma: float) -> NDArray[np.float64]:
    """The length of the prompts of a k-prompt step at the three nodes, (counts, nodes)."""
    s = sigma / np.sqrt(np.maximum(_K, 1.0))[:, None]
    return _f(mean * np.exp(s * _NODES - 0.5 * s * s))


def _lumps(
    terms: ServingTerms,
    running: ArrayLike,
    prompts_per_step: ArrayLike,
    input_lengths: Lengths,
    room: ArrayLike,
) -> tuple[F64, F64]:
    """The step at each (prompt count, length node) and its probability, trailing two axes."""
    n = _f(running)[..., None, None]
    nu = np.maximum(_f(prompts_per_step), 1e-12)[..., None, None]
    space = np.maximum(_f(room), 1.0)[..., None, None]
    length = _prompt_nodes(input_lengths.mean, input_lengths.sigma)
    # A prompt longer than the room left in the budget comes in chunks of that room.
    chunk = np.minimum(length, space)
    chunks = nu * length / chunk
    weight = np.exp(_K_COLUMN * np.log(chunks) - chunks - _LOG_K_FACTORIAL[:, None])
    # The last count takes the rest of the mass.
    weight[..., -1, :] = np.maximum(1.0 - np.sum(weight[..., :-1, :], axis=-2), 0.0)
    weight *= _NODE_WEIGHTS
    p = np.minimum(_K_COLUMN * chunk, space)
    # What the truncations (the last count, the room) leave out spills into the next steps: the
    # steps carry all the prompt tokens on average, nu x mean, as far as the room allows.
    carried = np.sum(p * weight, axis=(-2, -1), keepdims=True)
    p = np.minimum(p + np.maximum(nu * input_lengths.mean - carried, 0.0), space)
    # step_seconds, spelled out once per configuration and broadcast over the nodes.
    t = terms
    per_sequence = (
        t.sequence_overhead
        + t.allreduce_per_token
        + t.context_tokens * t.kv_read_per_token
        + t.kv_read_per_sequence
    )
    base = _f(t.overhead + t.allreduce_base + _f(running) * per_sequence)[..., None, None]
    per_prompt = _f(t.allreduce_per_token + 0.5 * t.input_tokens * t.prefill_attention_per_context)[
        ..., None, None
    ]
    decode = _f(_f(running) * t.gemm_per_token)[..., None, None]
    # The weights streamed: the dense parts and the experts this lump's tokens touch.
    streamed = _f(t.weights_read)[..., None, None] + _f(t.expert_weights_read)[
        ..., None, None
    ] * expert_fraction_read(_f(t.expert_miss_per_token)[..., None, None], n + p)
    gemm = np.maximum(decode + _f(t.prefill_gemm_per_token)[..., None, None] * p, streamed)
    return base + per_prompt * p + gemm, weight


def step_moments(
    terms: ServingTerms,
    running: ArrayLike,
    prompts_per_step: ArrayLike,
    input_lengths: Lengths,
    room: ArrayLike,
) -> StepMoments:
    """The step with ``running`` decodes when whole prompts arrive ``prompts_per_step`` at a time
    on average (Poisson): a step carries k prompts (their chunks up to the ``room`` left in the
    budget), not the mean's fraction of one. The GEMM roofline is convex in the prompt tokens, so
    the lumps cost more than their mean: the prefill-chunk interference. An arrival lands in a
    long step more often than in a short one (the inspection paradox), hence the residual."""
    steps, weight = _lumps(terms, running, prompts_per_step, input_lengths, room)
    mean = np.sum(steps * weight, axis=(-2, -1))
    second = np.sum(steps * steps * weight, axis=(-2, -1))
    biased = steps * weight / mean[..., None, None]  # length-biased: where arrivals land
    likely = np.where(biased > 0.01, steps, 0.0)
    return StepMoments(
        mean,
        0.5 * second / mean,
        np.max(likely, axis=(-2, -1)),
        0.5 * np.sum(steps * biased, axis=(-2, -1)),
        second - mean * mean,
    )


def expected_step(
    terms: ServingTerms,
    running: ArrayLike,
    prompts_per_step: ArrayLike,
    input_lengths: Lengths,
    room: ArrayLike,
) -> F64:
    """The mean of :func:`step_moments`."""
    steps, weight = _lumps(terms, running, prompts_per_step, input_lengths, room)
    return _f(np.sum(steps * weight, axis=(-2, -1)))


# --- the load curve -------------------------------------------------------------------------------


class LoadPoint(NamedTuple):
    """A replica at arrival rates ``rate`` (arrays over rates / configurations)."""

    rate: F64
    load: F64  # rate / lambda_max
    running: F64  # N, mean running sequences
    step: F64  # tau, the mean step
    wait_probability: F64  # P(a request waits for a slot)
    ttft: dict[float, F64]  # quantile -> seconds
    tpot: dict[float, F64]


def _mean_step(terms: ServingTerms, lam: F64, h: F64) -> F64:
    """tau at rate lam (closed form on each GEMM roofline branch; inf where it cannot keep up).
    A mixture of experts streams the experts of one token here (a lower bound: the touched
    experts grow with the step's tokens, which the rounds of :func:`load_points` add)."""
    t = terms
    streamed = weights_read_seconds(t, 1.0)
    fixed = t.overhead + t.allreduce_base
    per_seq = t.sequence_overhead + t.allreduce_per_token + t.context_tokens * t.kv_read_per_token
    per_seq = per_seq + t.kv_read_per_sequence
    per_prompt = t.allreduce_per_token + 0.5 * t.input_tokens * t.prefill_attention_per_context
    linear = lam * (h * per_seq + t.input_tokens * per_prompt)
    compute = linear + lam * (h * t.gemm_per_token + t.input_tokens * t.prefill_gemm_per_token)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau_c = np.where(compute < 1.0, fixed / (1.0 - compute), np.inf)
        tau_m = np.where(linear < 1.0, (fixed + streamed) / (1.0 - linear), np.inf)
    return np.maximum(tau_c, tau_m)


def load_points(
    terms: ServingTerms,
    cap: Capacity,
    rate: ArrayLike,
    input_lengths: Lengths,
    output_lengths: Lengths,
    max_num_batched_tokens: ArrayLike = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    quantiles: tuple[float, ...] = QUANTILES,
) -> LoadPoint:
    """TTFT and TPOT quantiles at each arrival ``rate`` (requests/s per replica); infinite at and
    beyond the offline maximum."""
    lam = _f(rate)
    budget = _f(max_num_batched_tokens)
    c = cap.slots
    h = cap.hold_steps
    rho = np.where(cap.rate > 0.0, lam / np.where(cap.rate > 0.0, cap.rate, 1.0), np.inf)
    stable = rho < 1.0

    def advance(tau: F64) -> F64:  # one round of the fixed point tau = E[step(N(tau), p(tau))]
        safe = np.where(stable & np.isfinite(tau), tau, cap.step)  # unstable points: ignored
        n = np.minimum(lam * h * safe, c)
        return expected_step(terms, n, lam * safe, input_lengths, budget - n)

    # The lumps' correction to the closed-form step: the map is nearly linear, so a secant
    # through two rounds lands on its fixed point, and one more round from there confirms it.
    tau0 = _mean_step(terms, lam, h)
    tau0 = np.where(np.isfinite(tau0), tau0, cap.step)  # past the lump-free model's own limit
    f0 = advance(tau0)
    f1 = advance(f0)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = (f1 - f0) / (f0 - tau0)
        secant = np.where(
            np.isfinite(slope) & (slope < 0.95) & (np.abs(f0 - tau0) > 0.0),
            tau0 + (f0 - tau0) / (1.0 - slope),
            f1,
        )
    tau = advance(np.maximum(secant, tau0))
    n = np.minimum(lam * h * tau, c)
    p = lam * terms.input_tokens * tau

    # Waiting for a slot: Halfin-Whitt's probability, the M/M/c tail scaled for the hold time.
    safe_rho = np.clip(rho, 1e-12, 1.0 - 1e-12)
    beta = np.sqrt(np.maximum(c, 1.0)) * (1.0 - safe_rho) / np.sqrt(safe_rho)
    density = np.exp(-0.5 * np.minimum(beta * beta, 1400.0)) / math.sqrt(2.0 * math.pi)
    p_wait = np.where(stable, density / (density + beta * _normal_cdf(beta)), 1.0)
    cv_h = output_lengths.cv * terms.output_tokens / np.maximum(h, 1.0)
    theta = (cap.rate - lam) * 2.0 / (1.0 + cv_h * cv_h)
    room = np.maximum(budget - n, 1.0)

    def prefill(length: float) -> F64:
        """The steps that carry a prompt of ``length`` with the p prompt tokens around it."""
        chunk = np.minimum(length + p, room)
        steps = np.maximum(1.0, (length + p) / room)
        return steps * step_seconds(terms, n, chunk, prompt_length=length)

    pre_mean = prefill(input_lengths.mean)
    moments = step_moments(terms, n, lam * tau, input_lengths, room)
    ttft: dict[float, F64] = {}
    tpot: dict[float, F64] = {}
    for q in quantiles:
        with np.errstate(divide="ignore", invalid="ignore"):
            wait_q = np.where(
                p_wait > 1.0 - q, np.log(np.maximum(p_wait, 1e-300) / (1.0 - q)) / theta, 0.0
            )
        residual_q = q * moments.longest if q > 0.5 else moments.residual_median
        base_mean = moments.residual_mean + pre_mean
        base_q = base_mean + np.sqrt(
            (residual_q - moments.residual_mean) ** 2
            + (prefill(input_lengths.quantile(q)) - pre_mean) ** 2
        )
        # The quantile of base + wait: the wait's when it has any mass there, else the base's.
        total = np.maximum(base_q, base_mean + wait_q)
        ttft[q] = np.where(stable, total, np.inf)
        spread = _LIFETIME_SHRINK * _z(q) * np.sqrt(n)
        seen = np.where(p_wait >= 1.0 - q, c, np.minimum(n + spread, c))
        crowd = expected_step(terms, seen, lam * tau, input_lengths, budget - seen) - moments.mean
        # The prompts that land in a request's own decode steps: the mean of out - 1 steps.
        lumps = _z(q) * np.sqrt(np.maximum(moments.variance, 0.0) / np.maximum(h - 1.0, 1.0))
        per_token = moments.mean + np.sign(crowd) * np.sqrt(crowd * crowd + lumps * lumps)
        tpot[q] = np.where(stable, per_token, np.inf)
    unstable = np.where(stable, 0.0, np.inf)
    return LoadPoint(lam, rho, n + unstable, tau + unstable, p_wait, ttft, tpot)


# --- the rates that meet the SLOs ----------------------------------------------------------------


class SloRates(NamedTuple):
    ttft: F64  # the largest rate whose TTFT quantile meets its target (0: none; lambda_max: all)
    tpot: F64
    ttft_meets_all: NDArray[np.bool_]  # the target holds right up to lambda_max
    tpot_meets_all: NDArray[np.bool_]
    ttft_above: F64  # the bracket's top: the target fails there (lambda_max when it never does)
    tpot_above: F64


def largest_rates_within(
    terms: ServingTerms,
    cap: Capacity,
    input_lengths: Lengths,
    output_lengths: Lengths,
    ttft_target: ArrayLike,
    tpot_target: ArrayLike,
    max_num_batched_tokens: ArrayLike = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    quantile: float = 0.99,
    grid: int = 24,
    rounds: int = 2,
) -> SloRates:
    """The largest rates below lambda_max whose TTFT and whose TPOT quantile meet their targets,
    each alone. Both quantiles rise with the rate: each round evaluates a grid of rates in the
    current bracket for every configuration of ``terms`` at once (arrays) and keeps the last
    rate that meets the target, so the answer always meets it."""
    top = np.asarray(cap.rate, dtype=np.float64)
    shape = top.shape
    # The first round's grid ends just below lambda_max (where the quantiles are infinite):
    # a target met there is met at every rate. Later rounds split the bracket it leaves.
    first = np.arange(1.0, grid + 1.0) / grid * (1.0 - 1e-6)
    later = np.arange(0.0, grid) / grid
    targets = (np.broadcast_to(_f(ttft_target), shape), np.broadcast_to(_f(tpot_target), shape))
    lo = [np.zeros(shape), np.zeros(shape)]
    hi = [top.copy(), top.copy()]
    meets_all = [np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)]
    for round_ in range(rounds):
        fractions = first if round_ == 0 else later
        if round_ == 0:  # both brackets are (0, lambda_max]: one grid serves both targets
            rates = np.broadcast_to(top[..., None, None] * fractions, (*shape, 2, grid))
            shared = top[..., None, None] * fractions  # (..., 1, grid)
        else:
            low, high = np.stack(lo, axis=-1), np.stack(hi, axis=-1)  # (..., 2): one per target
            rates = low[..., None] + (high - low)[..., None] * fractions  # (..., 2, grid)
            shared = rates
        point = _expand(
            terms,
            cap,
            shared,
            input_lengths,
            output_lengths,
            budget=max_num_batched_tokens,
            q=quantile,
        )
        last_target = 0 if round_ == 0 else 1
        for i, values in enumerate(
            (point.ttft[quantile][..., 0, :], point.tpot[quantile][..., last_target, :])
        ):
            good = values <= targets[i][..., None]
            count = np.sum(np.cumprod(good, axis=-1), axis=-1)  # the good prefix
            if round_ == 0:
                meets_all[i] = count == grid
            row = rates[..., i, :]
            last = np.take_along_axis(row, np.clip(count - 1, 0, grid - 1)[..., None], -1)
            nxt = np.take_along_axis(row, np.clip(count, 0, grid - 1)[..., None], -1)
            lo[i] = np.where(count > 0, last[..., 0], lo[i])
            hi[i] = np.where(count == 0, lo[i], np.where(count < grid, nxt[..., 0], hi[i]))
    all_ttft, all_tpot = meets_all
    return SloRates(lo[0], lo[1], all_ttft, all_tpot, hi[0], hi[1])


def _expand(
    terms: ServingTerms,
    cap: Capacity,
    rates: F64,
    input_lengths: Lengths,
    output_lengths: Lengths,
    *,
    budget: ArrayLike,
    q: float,
) -> LoadPoint:
    """``load_points`` with a trailing axis of rates against configurations of any shape."""
    extra = np.ndim(rates) - np.ndim(cap.rate)
    index = (...,) + (None,) * extra
    t = ServingTerms(*(np.asarray(x)[index] for x in terms))
    c = Capacity._make(np.asarray(x)[index] for x in cap)
    b = np.asarray(budget, dtype=np.float64)[index] if np.ndim(budget) else budget
    return load_points(t, c, rates, input_lengths, output_lengths, b, quantiles=(q,))
