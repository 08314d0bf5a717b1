"""The prompts' backlog of a continuously batching server, step by step, as a Markov chain.

A step serves the prompt tokens waiting at its start, up to the room its decodes leave in the
token budget; the prompts that arrive while it runs wait for the next one. A long step (many
prompts) lets many arrive, so the next is long too: the step's length is autocorrelated, and
its spread is the arrivals' noise amplified by that feedback. Taking a step's prompts as Poisson
about their mean (independent steps) misses it: against the seeded reference of vLLM's scheduler
(tests/engine/llm_scheduler_reference.py) that put the mean step 20% short at 80% load where
prompts are three quarters of the work, the offline maximum 8% high where outputs are short,
and TTFT p99 at a quarter of the reference's.

The chain's state is the backlog at a step's start in units of the mean prompt (of several
where a step brings many: unit_scale), ``0 .. STATES - 1`` (the last takes the tail). From
backlog ``b`` a step serves ``min(b u, room)`` tokens and lasts ``S_b = step(n, served)``;
``carry_b + A`` units wait at the next step's start (a fractional carry split between its two
grid neighbours, which keeps its mean). ``A`` is compound Poisson: ``Poisson(lambda S_b)``
prompts (or a fixed mean a step, saturated), each of the endpoint's log-normal length on the
unit grid, so a long prompt that holds the budget for several steps is in the chain as it is in
the scheduler. The stationary distribution comes from one small linear solve per configuration.

TTFT of a request that lands in a step of backlog ``b`` (arrivals land in long steps more often:
weights ``pi_b S_b``): the rest of that step, ``(1 - U) S_b``; the next step, which carries the
carry, everything that arrived during this one and its own prompt; and, when what is ahead of
it and its own prompt pass that step's room, the full steps that serve the rest. Each state's
TTFT is taken as normal with the parts' means and variances added; the quantile is that of the
mixture over states.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.llm_step import (
    ServingTerms,
    decode_gemm_seconds_per_token,
    expert_fraction_read,
    host_seconds,
)
from ringmaster.engine.tp_allreduce import curve_seconds

F64 = NDArray[np.float64]

# Backlog states (0 .. STATES - 1 units of mean prompts, unit_scale); the last absorbs the
# tail. 24 units are several steps of a chunked budget: the reference's backlog stays inside
# them to 95% load. (16 gave the same latencies to a part in a hundred and a plan a third
# faster, but moved the serving fit's two per-sequence costs, which the published table does
# not resolve apart: 0 tokens and 1.3 us against 68 tokens and 0.)
STATES = 24
# Prompts a step lets in: 0 .. ARRIVALS - 1, the last absorbing the Poisson tail.
ARRIVALS = 12
_B = np.arange(STATES, dtype=np.float64)
_K = np.arange(ARRIVALS, dtype=np.float64)
_LOG_FACTORIAL = np.array([math.lgamma(k + 1.0) for k in range(ARRIVALS)])
# Units of arrivals ahead of a request in its step that the TTFT's extra steps resolve.
AHEAD = 8
# The quantile's bisection: 30 halvings of a bracket a few step lengths wide.
_BISECTIONS = 30


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


@lru_cache(maxsize=32)
def prompt_units(sigma: float) -> NDArray[np.float64]:
    """(ARRIVALS, STATES): the units that k prompts bring, k = 0 .. ARRIVALS - 1, for log-normal
    lengths of mean 1 (unit) and log-sd ``sigma``; each length split between its two neighbours
    on the grid (the mean kept), mass beyond the grid on its last point."""
    one: F64
    if sigma == 0.0:
        one = np.zeros(STATES)
        one[1] = 1.0
    else:
        # the length's distribution at fine quantiles, then onto the grid
        normal = NormalDist()
        z = np.array([normal.inv_cdf((i + 0.5) / 400.0) for i in range(400)])
        x = np.exp(sigma * z - 0.5 * sigma * sigma)
        x = x / np.mean(x)
        low = np.minimum(np.floor(x).astype(np.int64), STATES - 1)
        frac = np.where(low < STATES - 1, x - low, 0.0)
        spread = np.bincount(low, weights=1.0 - frac, minlength=STATES)
        spread += np.bincount(np.minimum(low + 1, STATES - 1), weights=frac, minlength=STATES)
        one = _f(spread[:STATES] / 400.0)
    table = np.zeros((ARRIVALS, STATES))
    table[0, 0] = 1.0
    for k in range(1, ARRIVALS):
        conv = np.convolve(table[k - 1], one)
        conv[STATES - 1] += conv[STATES:].sum()
        table[k] = conv[:STATES]
    table.setflags(write=False)
    return table


def arrivals_pmf(mean_prompts: ArrayLike, sigma: float, scale: ArrayLike = 1.0) -> F64:
    """P(A = 0 .. STATES - 1 units) on a trailing axis: Poisson(``mean_prompts``) prompts of
    log-normal length (log-sd ``sigma``), compounded, in units of ``scale`` mean prompts. At
    scale 1 exactly (a few prompts a step, each one's length on the grid); where many prompts
    come a step (scale > 1) their sum is near normal (its mean and variance, on the grid)."""
    mu = np.maximum(_f(mean_prompts), 1e-300)
    m = np.broadcast_to(_f(scale), mu.shape)
    flat_mu, flat_m = mu.reshape(-1), m.reshape(-1)
    out = np.empty((flat_mu.size, STATES))
    few = flat_m <= 1.0  # each element takes one branch: the other is not computed
    if np.any(few):
        part = flat_mu[few][:, None]
        counts = np.exp(_K * np.log(part) - part - _LOG_FACTORIAL)
        counts[:, -1] = np.maximum(1.0 - np.sum(counts[:, :-1], axis=-1), 0.0)
        out[few] = counts @ prompt_units(round(float(sigma), 4))
    if not np.all(few):
        many = ~few
        part, units = flat_mu[many][:, None], flat_m[many][:, None]
        mean = part / units
        sd = np.sqrt(part * math.exp(sigma * sigma)) / units  # E[len^2] / mean^2 = e^sigma^2
        cdf = normal_cdf((np.arange(STATES + 1) - 0.5 - mean) / np.maximum(sd, 1e-9))
        cdf[:, 0] = 0.0
        cdf[:, -1] = 1.0
        out[many] = np.diff(cdf, axis=-1)
    return _f(out.reshape((*mu.shape, STATES)))


def unit_scale(prompts_per_step: ArrayLike) -> F64:
    """Mean prompts per backlog unit: 1 where a step carries a few prompts, else a power of two
    near a quarter of them, so that the backlog's grid spans several steps' arrivals."""
    per = np.maximum(_f(prompts_per_step), 1e-12)
    return _f(np.where(per < 4.0, 1.0, 2.0 ** np.round(np.log2(per / 4.0))))


class StepShape(NamedTuple):
    """A step with ``n`` decodes and ``p`` prompt tokens: ``a + b p + max(c + d p, W) +
    max(e (n + p + tile x touched(n + p)), W_e(n + p)) + AR(n + p)`` (engine.llm_step
    .step_seconds, with its parts gathered once per configuration: the dense GEMMs' roofline, the
    routed experts' and the engine's measured all-reduce curve)."""

    a: F64
    b: F64
    c: F64
    d: F64
    weights: F64
    experts: F64
    miss: F64
    n: F64
    expert_gemm: F64 = np.zeros(())  # e: one token's routed-expert GEMMs
    prompt_compute: F64 = np.ones(())  # a prompt token's share of computing it (terms')
    expert_tile: F64 = np.zeros(())  # the experts' tile padding in tokens (terms')
    # the engine's measured all-reduce over the step's tokens (terms' allreduce_curve fields)
    allreduce_curve: F64 = np.zeros(())
    allreduce_exponent: F64 = np.ones(())
    allreduce_tokens: F64 = np.full((), np.inf)
    allreduce_beyond: F64 = np.zeros(())
    # the host's loop (terms' host_per_request): a step is at least its requests' host time
    host_per_request: F64 = np.zeros(())
    prompt_length: F64 = np.ones(())

    def at(self, p: ArrayLike) -> F64:
        p = _f(p)
        dense = np.maximum(self.c + self.d * p, self.weights)
        if np.any(self.allreduce_curve):
            dense = dense + curve_seconds(
                self.allreduce_curve,
                self.allreduce_exponent,
                self.allreduce_tokens,
                self.allreduce_beyond,
                self.n + p * self.prompt_compute,
            )
        if np.any(self.experts):
            tokens = self.n + p * self.prompt_compute
            touched = expert_fraction_read(self.miss, tokens)
            computed = self.expert_gemm * (tokens + self.expert_tile * touched)
            dense = dense + np.maximum(computed, self.experts * touched)
        step = self.a + self.b * p + dense
        if np.any(self.host_per_request):
            host = host_seconds(
                self.host_per_request, self.n, p * self.prompt_compute, self.prompt_length
            )
            step = np.maximum(step, host)
        return _f(step)


def step_shape(terms: ServingTerms, n: ArrayLike, prompt_length: ArrayLike) -> StepShape:
    """The parts of step_seconds at ``n`` decodes (each at the terms' mean context), arrays
    broadcast; keep in step with engine.llm_step.step_seconds (a test checks they agree)."""
    t = terms
    n = _f(n)
    per_sequence = (
        t.sequence_overhead
        + t.allreduce_per_token
        + t.context_tokens * t.kv_read_per_token
        + t.kv_read_per_sequence
        + t.elementwise_per_token
    )
    return StepShape(
        a=_f(t.overhead + t.allreduce_base + n * per_sequence),
        b=_f(
            (
                t.allreduce_per_token
                + 0.5 * _f(prompt_length) * t.prefill_attention_per_context
                + t.elementwise_per_token
            )
            * t.prompt_compute
        ),
        c=_f(n * decode_gemm_seconds_per_token(t, n)),
        d=_f(t.prefill_gemm_per_token * t.prompt_compute),
        weights=_f(t.weights_read),
        experts=_f(t.expert_weights_read),
        miss=_f(t.expert_miss_per_token),
        n=n,
        expert_gemm=_f(t.expert_gemm_per_token),
        expert_tile=_f(t.expert_tile_tokens),
        prompt_compute=_f(t.prompt_compute),
        allreduce_curve=_f(t.allreduce_curve),
        allreduce_exponent=_f(t.allreduce_exponent),
        allreduce_tokens=_f(t.allreduce_curve_tokens),
        allreduce_beyond=_f(t.allreduce_beyond_per_token),
        host_per_request=_f(t.host_per_request),
        prompt_length=_f(prompt_length),
    )


def _trailing(shape: StepShape, axes: int) -> StepShape:
    index = (...,) + (None,) * axes
    return StepShape(*(np.asarray(x)[index] for x in shape))


class PrefillChain(NamedTuple):
    """The backlog chain's stationary state; per-state arrays have a trailing STATES axis."""

    unit: F64  # tokens per backlog unit (scale x the mean prompt)
    scale: F64  # mean prompts per unit
    step: F64  # S_b
    stationary: F64  # pi_b, per step
    mean: F64  # E[S] per step
    variance: F64  # Var[S] per step
    carry: F64  # units left waiting after the step
    prompts: F64  # mean prompts arriving during the step


def solve(
    shape: StepShape,
    rate: ArrayLike,
    room: ArrayLike,
    input_mean: float,
    input_sigma: float,
    per_step: ArrayLike | None = None,
    scale: ArrayLike = 1.0,
) -> PrefillChain:
    """The chain for steps of ``shape`` and ``rate`` arrivals per second, arrays broadcast; see
    the module's docstring. ``per_step``: prompts per step whatever the step's length instead
    (a saturated replica admits as many as its slots free, a step's worth). ``scale``: mean
    prompts per backlog unit (unit_scale of the prompts a step brings)."""
    m = _f(scale)
    unit = _f(input_mean * m)
    space = np.maximum(_f(room), 1.0)[..., None]
    served = np.minimum(_B * unit[..., None], space)
    step = _trailing(shape, 1).at(served)
    if per_step is None:
        prompts = _f(rate)[..., None] * step
    else:
        prompts = np.broadcast_to(_f(per_step)[..., None], step.shape)
    carry = _B - served / unit[..., None]
    pmf = arrivals_pmf(prompts, input_sigma, m[..., None])  # (..., b, a)
    low = np.floor(carry).astype(np.int64)
    frac = carry - low
    # P[b, j] = (1 - frac_b) pmf_b[j - low_b] + frac_b pmf_b[j - low_b - 1]: one gather on the
    # pmf padded with STATES zeros in front; the last column takes what the grid cannot hold.
    padded = np.concatenate([np.zeros(pmf.shape), pmf], axis=-1)
    earlier = np.concatenate([np.zeros((*pmf.shape[:-1], 1)), padded[..., :-1]], axis=-1)
    blended = (1.0 - frac)[..., None] * padded + frac[..., None] * earlier
    index = np.arange(STATES) - low[..., None] + STATES  # (..., b, j), >= 1
    move = np.take_along_axis(blended, index, axis=-1)
    move[..., -1] = np.maximum(1.0 - np.sum(move[..., :-1], axis=-1), 0.0)
    # pi (P - I) = 0 with sum(pi) = 1: the transposed system with its last row replaced.
    system = np.swapaxes(move, -1, -2) - np.eye(STATES)
    system[..., -1, :] = 1.0
    rhs = np.zeros(system.shape[:-1])
    rhs[..., -1] = 1.0
    pi = np.linalg.solve(system, rhs[..., None])[..., 0]
    pi = np.maximum(pi, 0.0)
    pi = pi / np.sum(pi, axis=-1, keepdims=True)
    mean = np.sum(pi * step, axis=-1)
    variance = np.maximum(np.sum(pi * step * step, axis=-1) - mean * mean, 0.0)
    unit, m = np.broadcast_arrays(unit, m)
    shape_out = np.broadcast_shapes(unit.shape, mean.shape)
    return PrefillChain(
        np.broadcast_to(unit, shape_out),
        np.broadcast_to(m, shape_out),
        step,
        pi,
        mean,
        variance,
        carry,
        prompts,
    )


class TtftParts(NamedTuple):
    """Per component (state): the TTFT's mean and variance, and the weight of arrivals there."""

    weight: F64
    mean: F64
    variance: F64


def ttft_parts(
    shape: StepShape,
    chain: PrefillChain,
    room: ArrayLike,
    input_sigma: float,
    own_lengths: F64,
    own_weights: F64,
) -> TtftParts:
    """What a request that lands in each state waits for its first token (module docstring),
    one component per state and length of its own prompt (``own_lengths`` / ``own_weights``:
    nodes of its distribution that resolve the tail, engine.llm_batching.tail_nodes); the
    components on a trailing axis of STATES x nodes."""
    space = np.maximum(_f(room), 1.0)[..., None]
    step = chain.step
    weight = chain.stationary * step
    weight = weight / np.maximum(np.sum(weight, axis=-1, keepdims=True), 1e-300)
    # The rest of this step: (1 - U) S_b.
    residual_mean, residual_var = 0.5 * step, step * step / 12.0
    # The next step: the carry, this step's arrivals (compound Poisson) and its own prompt, at
    # the mean prompt; its own length moves it along the step's slope below.
    pmf = arrivals_pmf(chain.prompts, input_sigma, chain.scale[..., None])  # (..., b, a units)
    own = float(np.sum(own_lengths * own_weights))
    unit = chain.unit[..., None]
    tokens = (chain.carry[..., None] + _B) * unit[..., None] + own
    nxt = _trailing(shape, 2).at(np.minimum(tokens, space[..., None]))
    next_mean = np.sum(pmf * nxt, axis=-1)
    next_var = np.maximum(np.sum(pmf * nxt * nxt, axis=-1) - next_mean**2, 0.0)
    # The tokens ahead of it in the next step: the carry and the units of this step's arrivals
    # that came before it (compound Poisson of half the step's, up to AHEAD - 1 units); with its
    # own prompt, what passes the room takes more steps: whole ones at the room, and a last one
    # with the rest (a step however few its tokens).
    typical = (chain.carry + chain.prompts / chain.scale[..., None]) * unit
    by_node = _trailing(shape, 2)
    lengths = _f(own_lengths)
    moved = by_node.at(np.minimum(typical[..., None] + lengths, space[..., None])) - by_node.at(
        np.minimum(typical[..., None] + own, space[..., None])
    )
    before = arrivals_pmf(0.5 * chain.prompts, input_sigma, chain.scale[..., None])[..., :AHEAD]
    before[..., -1] += np.maximum(1.0 - np.sum(before, axis=-1), 0.0)
    ahead = (chain.carry[..., None] + _B[:AHEAD]) * unit[..., None]  # (..., b, a)
    beyond = np.maximum(
        ahead[..., None, :] + lengths[:, None] - space[..., None, None], 0.0
    )  # (..., b, node, a)
    whole = np.floor(beyond / space[..., None, None])
    rest = beyond - whole * space[..., None, None]
    later = _trailing(shape, 3)
    extra = whole * later.at(space[..., None, None]) + np.where(rest > 0.0, later.at(rest), 0.0)
    chance = before[..., None, :]
    extra_mean = np.sum(chance * extra, axis=-1)
    extra_var = np.maximum(np.sum(chance * extra * extra, axis=-1) - extra_mean**2, 0.0)
    extra = extra_mean
    mean = (residual_mean + next_mean)[..., None] + moved + extra
    variance = (residual_var + next_var)[..., None] + extra_var
    components = (*mean.shape[:-2], -1)
    return TtftParts(
        np.reshape(weight[..., None] * _f(own_weights), components),
        np.reshape(mean, components),
        np.reshape(variance, components),
    )


# Components a quantile keeps: the heaviest (the rest of a backlog chain's states hold next to no
# mass at the loads a plan runs at).
_KEPT = 1000


def mixture_quantile(parts: TtftParts, q: float) -> F64:
    """The ``q`` quantile of the mixture of normals (each at least 0) over the trailing axis:
    bisection on the mixture's CDF over its _KEPT heaviest components, vectorised."""
    if parts.weight.shape[-1] > _KEPT:
        top = np.argpartition(parts.weight, -_KEPT, axis=-1)[..., -_KEPT:]
        parts = TtftParts(*(np.take_along_axis(np.asarray(x), top, axis=-1) for x in parts))
    sd = np.sqrt(np.maximum(parts.variance, 1e-300))
    lo = np.maximum(np.min(parts.mean - 6.0 * sd, axis=-1), 0.0)
    hi = np.max(parts.mean + 6.0 * sd, axis=-1)
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        z = (mid[..., None] - parts.mean) / sd
        cdf = np.sum(parts.weight * normal_cdf(z), axis=-1)
        below = cdf < q
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return _f(0.5 * (lo + hi))


def normal_cdf(x: F64) -> F64:
    """Phi(x), vectorised (Abramowitz and Stegun 7.1.26 on erf: |error| < 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    tail = 0.5 * poly * np.exp(-z * z)
    return np.where(x >= 0.0, 1.0 - tail, tail)
