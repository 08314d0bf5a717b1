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
sizing uses, stated once here and checked against the simulation from 10% to 99% load
(tests/engine/test_latency_fixed_point.py states the agreement):

- **Slots.** A replica runs at most ``c = min(S, K / m)`` sequences, ``K`` the cache's tokens and
  ``m`` the tokens a running sequence holds on average: its prompt, half its output weighted by
  how long it runs (``out (1 + cv^2) / 2``) and half a block (vLLM allocates blocks as a sequence
  grows); the whole ``input + output`` where the engine reserves a sequence's cache on admission
  (TensorRT-LLM's GUARANTEED_NO_EVICT). A step finds a sequence length-biased too: its decode
  context is ``in + out (1 + cv^2) / 2``.
- **The step** carries the running decodes and the prompt tokens waiting at its start, up to the
  room the decodes leave in the budget; what arrives while it runs waits for the next. That
  backlog is a Markov chain over steps (engine.llm_prefill_queue): a long step lets more prompts
  in, so the next is long too. It gives the mean step, its spread, and the TTFT of a request by
  the backlog it lands in.
- **Offline throughput** (no latency bound): all ``c`` slots run; each slot holds a request for
  ``h = out - 1 + max(1, in / (T - c))`` steps, a step admits the ``c / h`` prompts the last one
  freed, and the chain gives the mean step ``tau``: ``lambda_max = c / (h tau)``; if
  ``c + c in / h`` exceeds the budget the budget binds and ``c = T h / (h + in)``.
- **Mean state at a rate lambda**: ``N = lambda h tau`` in the slots (Little's law), the chain at
  ``N (h - 1) / h`` decodes and Poisson arrivals at ``lambda``, ``tau`` its mean step: a fixed
  point in ``tau`` (secant), never past the saturated step (beyond it the slots' queue takes the
  excess).
- **Waiting for a slot** (:func:`slot_wait`): the count in the slots as a diffusion whose
  completions ``N / (h tau(N))`` follow the step as the count grows, over-dispersed by the
  prompts' feedback (peakedness ``(1 + u^2 cv_in^2) / (1 - u)^2``, ``u`` the prompts' share of
  the work); above the slots an exponential queue.
- **TTFT** = the wait for a slot + the backlog chain's TTFT (the rest of the step under way, the
  step that carries its prompt with what is ahead of it, and the steps its prompt's remainder
  takes), as a mixture over the chain's states and its own prompt's length (nodes that resolve
  the long tail); the quantile of base + wait is the wait's where it has mass there.
- **TPOT** of a request is its life's steps over its decode tokens: the mean step, plus the
  stretch of a life (the prompts that arrive in it lengthen its steps, amplified by ``1 /
  (1 - u)``: variance ``k x per_token^2 lambda tau E[in^2] / (1 - u)^2`` over ``k`` steps) at
  output lengths that resolve the short end, plus the longer steps of a crowd (the count's
  quantile, capped at the slots).

Everything is closed-form and vectorised: one call evaluates every rate (and configuration) of
a grid at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import llm_prefill_queue as prefill_queue
from ringmaster.engine.llm_step import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    KV_BLOCK_TOKENS,
    ServingTerms,
    allreduce_curve_floor_per_token,
    expert_read_seconds,
)

F64 = NDArray[np.float64]

# vLLM v1's default token budget: engine.llm_step.DEFAULT_MAX_NUM_BATCHED_TOKENS (a prompt's
# attention call is priced at what a full budget fills). The plan sizes max_num_seqs itself.
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


def decode_context_terms(terms: ServingTerms, output_cv: ArrayLike) -> ServingTerms:
    """The terms with a running sequence's context length-biased: a step finds a sequence with
    probability proportional to how long it runs, so its output so far is ``out (1 + cv^2) / 2``
    on average, not ``out / 2`` (equal for fixed lengths)."""
    grow = 0.5 * terms.output_tokens * (1.0 + _f(output_cv) ** 2)
    return terms._replace(context_tokens=terms.input_tokens + grow)


def _default_lengths(terms: ServingTerms, input_lengths: Lengths | None) -> Lengths:
    if input_lengths is not None:
        return input_lengths
    mean = float(np.mean(terms.input_tokens))
    return Lengths(mean, mean)


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
    input_lengths = _default_lengths(terms, input_lengths)
    c = np.minimum(_f(max_num_seqs), kv_slots)
    binds = np.where(_f(max_num_seqs) <= kv_slots, CAPACITY_MAX_NUM_SEQS, CAPACITY_KV_CACHE)
    n_in, n_out = terms.input_tokens, terms.output_tokens
    h = hold_steps(n_out, n_in, budget, c)
    over = c + c * n_in / h > budget
    c_budget = budget * h / (h + n_in)
    binds = np.where(over, CAPACITY_TOKEN_BUDGET, binds)
    c = np.where(over, c_budget, c)
    c = np.maximum(c, 0.0)
    per_step = np.where(h > 0, c / np.maximum(h, 1e-9), 0.0)
    p = per_step * n_in
    # Saturated, a step admits the prompts of the slots the last one freed (c / h a step,
    # whatever its length); they queue for the budget as at any load.
    decoding = c * np.maximum(h - 1.0, 0.0) / np.maximum(h, 1.0)
    shape = prefill_queue.step_shape(
        decode_context_terms(terms, output_cv), decoding, prompt_span(input_lengths)
    )
    chain = prefill_queue.solve(
        shape,
        0.0,
        budget - decoding,
        input_lengths.mean,
        input_lengths.sigma,
        per_step=per_step,
        scale=prefill_queue.unit_scale(per_step),
    )
    tau = chain.mean
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(c >= 1.0, c / (h * tau), 0.0)
    return Capacity(c, rate, tau, h, p, kv_slots, binds.astype(np.int64))


def offline_run(
    terms: ServingTerms,
    prompts: ArrayLike,
    max_num_seqs: ArrayLike,
    max_num_batched_tokens: ArrayLike = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    reserve_whole: bool = False,
    input_lengths: Lengths | None = None,
) -> F64:
    """The rate, requests/s, of an offline run of ``prompts`` requests of one length queued at
    once (a benchmark harness's num_prompts / num_requests): their count over the run's makespan,
    which is what such a harness reports. Requests of one length move through the slots in
    waves: ``k = floor(N / c)`` full waves at the offline maximum's pace (``c / lambda_max``
    each), then the ``r = N - k c`` left as a wave of their own at the pace ``r`` slots keep (a
    smaller batch runs its steps faster, but where the weights' stream sets the step, not ``c /
    r`` times faster); an unbounded run is the offline maximum."""
    n = _f(prompts)
    full = capacity(terms, max_num_seqs, max_num_batched_tokens, 0.0, reserve_whole, input_lengths)
    finite = np.isfinite(n)
    slots = np.maximum(full.slots, 1.0)
    waves = np.where(finite, np.floor(n / slots), 0.0)
    rest = np.where(finite, n - waves * slots, 0.0)
    last = capacity(
        terms,
        np.minimum(_f(max_num_seqs), np.maximum(rest, 1.0)),
        max_num_batched_tokens,
        0.0,
        reserve_whole,
        input_lengths,
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        makespan = waves * slots / full.rate + np.where(rest >= 1.0, rest / last.rate, 0.0)
        rate = np.where(finite & (makespan > 0.0), n / makespan, full.rate)
    # a remainder under one request (slots need not be whole) is no wave of its own
    return _f(np.where(full.rate > 0.0, np.minimum(rate, full.rate), 0.0))


def hold_steps(n_out: ArrayLike, n_in: ArrayLike, budget: ArrayLike, running: ArrayLike) -> F64:
    """Steps a request holds its slot: its prefill chunks, then out - 1 decode steps."""
    room = np.maximum(_f(budget) - _f(running), 1.0)
    return _f(n_out) - 1.0 + np.maximum(1.0, _f(n_in) / room)


def mean_step(
    terms: ServingTerms,
    running: ArrayLike,
    rate: ArrayLike,
    input_lengths: Lengths,
    room: ArrayLike,
    scale: ArrayLike = 1.0,
) -> F64:
    """The mean step with ``running`` decodes and prompts arriving at ``rate`` per second
    (the backlog chain of engine.llm_prefill_queue; ``scale`` mean prompts a backlog unit)."""
    shape = prefill_queue.step_shape(terms, running, prompt_span(input_lengths))
    chain = prefill_queue.solve(
        shape, rate, room, input_lengths.mean, input_lengths.sigma, scale=scale
    )
    return _f(chain.mean)


def prompt_span(lengths: Lengths) -> float:
    """The prompt length a prompt token's attention sees on average: a token sits in a long
    prompt more often, ``E[in^2] / E[in]`` (the step charges half of it, causal)."""
    return lengths.mean * lengths.second_moment_ratio()


# A prompt's own length by bins of its distribution, for TTFT's tail: the p99 of a TTFT is a long
# prompt's more often than a long queue's at moderate load. An output's by bins of its short end,
# for TPOT's: a request of a few tokens averages a few steps, and one long step shows in it.
LONG_TAIL_BINS = (0.0, 0.6, 0.9, 0.98, 1.0)
SHORT_TAIL_BINS = (0.0, 0.02, 0.1, 0.4, 1.0)


def tail_nodes(lengths: Lengths, bins: tuple[float, ...] = LONG_TAIL_BINS) -> tuple[F64, F64]:
    """The length's conditional mean in each of ``bins`` (probabilities; log-normal:
    ``E[X | a < Z < b] = mean (Phi(b - sigma) - Phi(a - sigma)) / (Phi(b) - Phi(a))``) and the
    bins' weights; the means keep the distribution's mean."""
    s = lengths.sigma
    z = [(-math.inf if p == 0.0 else math.inf if p == 1.0 else _normal_quantile(p)) for p in bins]
    phi = [0.5 * math.erfc(-x / math.sqrt(2.0)) for x in z]
    shifted = [0.5 * math.erfc(-(x - s) / math.sqrt(2.0)) for x in z]
    weights = np.diff(phi)
    values = lengths.mean * np.diff(shifted) / weights
    return _f(values), _f(weights)


# Points of the count's density below the slots (the diffusion's body, integrated on a grid).
_COUNT_GRID = 48


def slot_wait(
    lam: ArrayLike,
    offline_rate: ArrayLike,
    slots: ArrayLike,
    hold: ArrayLike,
    occupied: ArrayLike,
    peakedness: ArrayLike,
    queue_variability: ArrayLike,
    step_at: Callable[[F64], F64],
) -> tuple[F64, F64]:
    """P(a request waits for a slot) and the rate of its wait's exponential tail.

    The count N of occupied slots as a diffusion: drift ``lam - f(N)``, completions ``f(N) =
    N / (hold x tau(N))`` (``step_at``: the mean step with N sequences in the slots, on a
    trailing axis of counts; ``offline_rate`` above the slots) and infinitesimal variance
    ``2 z f(N)``, ``z`` the count's peakedness. ``f`` need not rise to the slots: past the
    budget's sweet spot more decodes crowd the prompts out, and a replica whose completions peak
    below its slots seldom fills them.
    Its density is ``exp(int (lam - f) / (z f)) / f``: with a step that does not grow, the gamma
    of mean ``occupied`` and variance ``z x occupied`` (skewed: bursts of arrivals pile up); with
    a step that grows with the batch, a crowd is served more slowly and its tail is heavier. Above
    the slots a step admits what the last one freed, whatever its length, so the prompts'
    feedback behind ``z`` is cut: the queue is exponential with variance ``lam x
    queue_variability`` (Allen and Cunneen: arrivals' 1 + the hold's squared CV), joined to the
    body where ``variance x density`` is continuous. With Poisson counts and a fixed step this is
    Halfin and Whitt's M/M/c limit (Operations Research 29(3), 1981)."""
    lam, top, c = _f(lam), _f(offline_rate), _f(slots)
    h, r = _f(hold), _f(occupied)
    z = np.maximum(_f(peakedness), 1e-6)
    sd = np.sqrt(np.maximum(r * z, 1e-12))
    low = np.clip(r - 8.0 * sd, 0.5, np.maximum(c - 1e-6, 0.5))
    grid = low[..., None] + (c - low)[..., None] * np.linspace(0.0, 1.0, _COUNT_GRID)
    step = np.maximum(step_at(grid), 1e-12)
    rate_out = np.maximum(grid / (h[..., None] * step), 1e-12)
    kappa = (lam[..., None] - rate_out) / (z[..., None] * rate_out)
    width = (c - low)[..., None] / (_COUNT_GRID - 1)
    integral = np.concatenate(
        [
            np.zeros((*np.shape(kappa)[:-1], 1)),
            np.cumsum(0.5 * (kappa[..., 1:] + kappa[..., :-1]), axis=-1),
        ],
        axis=-1,
    )
    log_density = integral * width - np.log(rate_out)
    peak = np.max(log_density, axis=-1, keepdims=True)
    density = np.exp(log_density - peak)
    body = np.sum(0.5 * (density[..., 1:] + density[..., :-1]), axis=-1) * width[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        spare = top - lam
        tail = np.where(spare > 0.0, density[..., -1] * z * top / spare, np.inf)
        p_wait = np.where(np.isfinite(tail), tail / (body + tail), 1.0)
        # the queue's exponential decay per waiting request, and so per second of wait
        decay = 2.0 * spare / (lam * np.maximum(_f(queue_variability), 1e-6))
        theta = np.where(spare > 0.0, decay * top, 0.0)
    return p_wait, theta


# --- the load curve -------------------------------------------------------------------------------


class LoadPoint(NamedTuple):
    """A replica at arrival rates ``rate`` (arrays over rates / configurations)."""

    rate: F64
    load: F64  # rate / lambda_max
    running: F64  # N, mean sequences in the slots (Little's law: rate x hold x step)
    step: F64  # tau, the mean step
    wait_probability: F64  # P(a request waits for a slot)
    ttft: dict[float, F64]  # quantile -> seconds
    tpot: dict[float, F64]


def _closed_form_step(terms: ServingTerms, lam: F64, h: F64) -> F64:
    """tau at rate lam with every step at the mean prompt tokens (closed form on each GEMM
    roofline branch; inf where it cannot keep up): the fixed point's starting point, a lower
    bound (prompts come whole, and a step's cost is convex in them)."""
    t = terms
    fixed = t.overhead + t.allreduce_base
    # a token's all-reduce on the engine's curve at its cheapest: the bound stays a lower one
    curve = allreduce_curve_floor_per_token(t)
    per_seq = t.sequence_overhead + t.allreduce_per_token + curve
    per_seq = per_seq + t.context_tokens * t.kv_read_per_token
    per_seq = per_seq + t.kv_read_per_sequence + t.elementwise_per_token
    per_prompt = (
        t.allreduce_per_token
        + curve
        + 0.5 * t.input_tokens * t.prefill_attention_per_context
        + t.elementwise_per_token
    )
    computed = t.input_tokens * t.prompt_compute  # the prompt tokens a replica computes
    linear = lam * (h * per_seq + computed * per_prompt)
    # a decode token at its cheapest (the largest batch's rate): the bound stays a lower one
    decode = np.fmin(t.gemm_per_token, t.gemm_per_token_large_batch)
    dense = lam * (h * decode + computed * t.prefill_gemm_per_token)
    experts = lam * (h + computed) * t.expert_gemm_per_token
    # Each roofline (the dense GEMMs', the routed experts') on its compute or its weights'
    # branch: tau = fixed + linear tau + the two, a max of increasing lines, so its fixed point
    # is the largest of the four branches' (the least of weights streamed: one token's).
    tau = np.zeros(np.broadcast(fixed, linear, dense, experts).shape)
    for dense_slope, dense_bytes in ((dense, 0.0), (0.0, t.weights_read)):
        for expert_slope, expert_bytes in ((experts, 0.0), (0.0, expert_read_seconds(t, 1.0))):
            slope = linear + dense_slope + expert_slope
            with np.errstate(divide="ignore", invalid="ignore"):
                branch = np.where(
                    slope < 1.0, (fixed + dense_bytes + expert_bytes) / (1.0 - slope), np.inf
                )
            tau = np.maximum(tau, branch)
    return tau


# Secant rounds after the first where the step's fixed point is still missed (load_points).
FIXED_POINT_ROUNDS = 8


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
    terms = decode_context_terms(terms, output_lengths.cv)
    lam = _f(rate)
    budget = _f(max_num_batched_tokens)
    c = cap.slots
    h = cap.hold_steps
    rho = np.where(cap.rate > 0.0, lam / np.where(cap.rate > 0.0, cap.rate, 1.0), np.inf)
    stable = rho < 1.0
    decode_share = np.maximum(h - 1.0, 0.0) / np.maximum(h, 1.0)

    def decoding(tau: F64) -> F64:
        return np.minimum(lam * h * tau, c) * decode_share

    span = prompt_span(input_lengths)
    sigma = input_lengths.sigma
    # the backlog's unit: the saturated replica's prompts a step (more never come a step)
    scale = prefill_queue.unit_scale(c / np.maximum(h, 1.0))

    def chain_at(tau: F64) -> tuple[prefill_queue.StepShape, prefill_queue.PrefillChain]:
        safe = np.where(stable & np.isfinite(tau), tau, cap.step)  # unstable points: ignored
        n = decoding(safe)
        shape = prefill_queue.step_shape(terms, n, span)
        chain = prefill_queue.solve(shape, lam, budget - n, input_lengths.mean, sigma, scale=scale)
        return shape, chain

    # tau depends on itself only through the decodes' count: the map is nearly linear, so a
    # secant through two rounds lands on its fixed point; the chain is taken there.
    tau0 = _closed_form_step(terms, lam, h)
    tau0 = np.where(np.isfinite(tau0), np.minimum(tau0, cap.step), cap.step)
    f0 = chain_at(tau0)[1].mean
    f1 = chain_at(f0)[1].mean
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = (f1 - f0) / (f0 - tau0)
        secant = np.where(
            np.isfinite(slope) & (slope < 0.95) & (np.abs(f0 - tau0) > 0.0),
            tau0 + (f0 - tau0) / (1.0 - slope),
            f1,
        )
    secant = np.maximum(secant, tau0)
    shape, chain = chain_at(secant)
    # Near the offline maximum with a budget the decodes nearly fill, the map's slope nears 1
    # and bends (fewer tokens of room for prompts, a longer backlog): one secant can land far
    # from the fixed point, on either side, and a higher rate then reports a shorter step. Where
    # it missed by more than a part in a thousand (most configurations: nowhere), the fixed
    # point is bracketed by the points seen and the saturated step, and found by regula falsi
    # (Illinois: the retained end's weight halved), which cannot leave the bracket.
    fs = chain.mean
    off = stable & np.isfinite(fs) & (np.abs(fs - secant) > 1e-3 * secant)
    if np.any(off):
        top = np.maximum(cap.step, tau0)
        lo, g_lo = tau0, f0 - tau0
        hi, g_hi = top, np.full_like(top, -np.inf)
        for x, g in ((f0, f1 - f0), (secant, fs - secant)):
            rise = (g > 0.0) & (x > lo)
            lo, g_lo = np.where(rise, x, lo), np.where(rise, g, g_lo)
            fall = (g <= 0.0) & (x < hi)
            hi, g_hi = np.where(fall, x, hi), np.where(fall, g, g_hi)
        unknown = off & ~np.isfinite(g_hi)
        if np.any(unknown):  # the saturated step's side of the map
            g_top = chain_at(top)[1].mean - top
            g_hi = np.where(unknown, np.minimum(g_top, 0.0), g_hi)
        kept = np.zeros(np.shape(lo))  # +1: lo kept last round, -1: hi
        for _ in range(FIXED_POINT_ROUNDS):
            with np.errstate(divide="ignore", invalid="ignore"):
                guess = np.where(g_lo > g_hi, (lo * g_hi - hi * g_lo) / (g_hi - g_lo), hi)
            guess = np.where(np.isfinite(guess), np.clip(guess, lo, hi), hi)
            # An element whose bracket is empty (the map jumps over its fixed point there) and
            # whose step was taken at its guess already would take the same step every round.
            off = off & ~((hi <= lo) & (guess == secant))
            if not np.any(off):
                break
            secant = np.where(off, guess, secant)
            shape, chain = chain_at(secant)
            g = chain.mean - secant
            off = off & (np.abs(g) > 1e-3 * secant)
            if not np.any(off):
                break
            rise = g > 0.0
            lo, g_lo = np.where(rise, secant, lo), np.where(rise, g, g_lo)
            hi, g_hi = np.where(rise, hi, secant), np.where(rise, g_hi, g)
            # an end kept twice running has its weight halved (Illinois)
            g_hi = np.where(rise & (kept > 0), 0.5 * g_hi, g_hi)
            g_lo = np.where(~rise & (kept < 0), 0.5 * g_lo, g_lo)
            kept = np.where(rise, 1.0, -1.0)
    # Below the offline maximum the slots' queue, not a longer step, takes the excess: a step
    # is never longer than the saturated one (then every slot is busy).
    tau = np.minimum(secant, cap.step)
    occupied = lam * h * tau  # requests in the slots (Little's law)
    n = decoding(secant)  # the decodes the chain was solved at
    room = np.maximum(budget - n, 1.0)

    # How a request's life of h steps stretches: every prompt that arrives in it is served in it,
    # and lengthens the steps that let more arrive (the prompts' share u of the work amplifies
    # their noise by 1 / (1 - u)); a short life sees its few steps' own spread.
    empty = shape.at(0.0)
    per_token = (shape.at(room) - empty) / room
    u = np.minimum(lam * input_lengths.mean * per_token, 0.99)
    second = input_lengths.mean**2 * input_lengths.second_moment_ratio()
    stretch = per_token**2 * lam * tau * second / (1.0 - u) ** 2  # per step of a long life

    def life_variance(steps: ArrayLike, stretch: ArrayLike) -> F64:
        """A life of k steps: k x the long-window variance a step. A short life's own few steps
        vary less (k^2 Var S would bound it), but that bound falls where a full budget makes
        the steps alike near the offline maximum: the long-window figure, conservative for a
        few-token request and rising with the rate, is kept."""
        return _f(steps) * _f(stretch)[..., None]

    # Waiting for a slot: the count of occupied slots as a diffusion (slot_wait). Its
    # peakedness: a life's arrivals A and its length T feed each other (A = lam T + noise,
    # T = T0 + (u / lam) A + the prompts' length noise), so A = (lam T0 + noise) / (1 - u) and
    # Var A / E A = (1 + u^2 cv_in^2) / (1 - u)^2 (1 for a Poisson count: no prompts' share).
    peakedness = (1.0 + u * u * input_lengths.cv**2) / (1.0 - u) ** 2
    cv_h = output_lengths.cv * terms.output_tokens / np.maximum(h, 1.0)
    grown = prefill_queue.step_shape(terms, n + 1.0, span).at(0.0)
    # The mean step with N in the slots: the mean-field step (N (h - 1) / h decodes, N / h
    # prompts a step), scaled to the chain's at the mean count and to the saturated one at the
    # slots, the scale interpolated between them.
    grid_terms = ServingTerms(*(_f(x)[..., None] for x in terms))

    def mean_field(count: F64) -> F64:
        field = prefill_queue.step_shape(grid_terms, count * decode_share[..., None], span)
        per_step = count / np.maximum(h, 1.0)[..., None] * input_lengths.mean
        return field.at(np.minimum(per_step, np.maximum(budget[..., None] - count, 1.0)))

    ends = np.stack(np.broadcast_arrays(np.minimum(occupied, c), c), axis=-1)
    scale = np.stack(np.broadcast_arrays(tau, cap.step), axis=-1)
    scale = scale / np.maximum(mean_field(ends), 1e-12)

    def step_at(count: F64) -> F64:
        share = (count - ends[..., :1]) / np.maximum(ends[..., 1:] - ends[..., :1], 1e-9)
        share = np.clip(share, 0.0, 1.0)
        return _f(mean_field(count) * (scale[..., :1] + share * (scale[..., 1:] - scale[..., :1])))

    p_wait, theta = slot_wait(lam, cap.rate, c, h, occupied, peakedness, 1.0 + cv_h * cv_h, step_at)
    p_wait = np.where(stable, p_wait, 1.0)

    parts = prefill_queue.ttft_parts(shape, chain, room, sigma, *tail_nodes(input_lengths))
    base_mean = np.sum(parts.weight * parts.mean, axis=-1)
    # TPOT: a request's decode steps over its life, at three output lengths.
    output_nodes, output_weights = tail_nodes(output_lengths, SHORT_TAIL_BINS)
    outputs = np.maximum(output_nodes - 1.0, 1.0)
    # (With every slot busy the feedback is cut and the reference's TPOT p99 can even fall near
    # the offline maximum; the stretch is kept there, a conservative TPOT that never falls.)
    life = life_variance(outputs, stretch)
    nodes = (*np.shape(chain.mean), outputs.size)
    tpot_parts = prefill_queue.TtftParts(
        np.broadcast_to(output_weights, nodes),
        np.broadcast_to(chain.mean[..., None], nodes),
        np.broadcast_to(life / outputs**2, nodes),
    )
    ttft: dict[float, F64] = {}
    tpot: dict[float, F64] = {}
    for q in quantiles:
        with np.errstate(divide="ignore", invalid="ignore"):
            wait_q = np.where(
                p_wait > 1.0 - q, np.log(np.maximum(p_wait, 1e-300) / (1.0 - q)) / theta, 0.0
            )
        base_q = prefill_queue.mixture_quantile(parts, q)
        # The quantile of base + wait: the wait's when it has any mass there, else the base's.
        total = np.maximum(base_q, base_mean + wait_q)
        ttft[q] = np.where(stable, total, np.inf)
        # A request that lives while more run than on average decodes in longer steps.
        seen = np.minimum(n + _LIFETIME_SHRINK * _z(q) * np.sqrt(peakedness * n), c * decode_share)
        crowd = (seen - n) * (grown - empty)
        life_q = prefill_queue.mixture_quantile(tpot_parts, q) - chain.mean
        # Added, not in quadrature: the count's excursion and a life's stretch come from the same
        # bursts of prompts; and their sum rises with the rate where the count is pinned at the
        # slots (the step at the count a request sees, min(n + spread, c), never falls).
        per_token_q = chain.mean + crowd + life_q
        tpot[q] = np.where(stable, per_token_q, np.inf)
    unstable = np.where(stable, 0.0, np.inf)
    running = np.minimum(occupied, c)
    return LoadPoint(lam, rho, running + unstable, tau + unstable, p_wait, ttft, tpot)


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
