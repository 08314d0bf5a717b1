"""Static batching: a replica that prefills a batch together and decodes it to its end.

``spec.batching: Static`` (TensorRT-LLM's static batching, and the fixed-batch benchmark runs
published for every engine) runs a batch of ``b`` requests as one unit: their prompts in one
prefill, then decode steps of the whole batch until its longest sequence has finished (a
finished sequence keeps its slot and is padded), and only then the next batch. The step is
:mod:`ringmaster.engine.llm_step`'s; what differs from continuous batching
(:mod:`ringmaster.engine.llm_batching`) is the schedule:

- **A batch of b** reserves each sequence's whole cache (prompt + output at p99), so
  ``b <= K / (in_p99 + out_p99)``; it runs ``n(b)`` decode steps, the expected longest of ``b``
  outputs, taken as the output length's ``b / (b + 1)`` quantile and at least its mean (the mean
  itself for the fixed lengths benchmarks use); its time is
  ``D(b) = prefill(b x in) + (n(b) - 1) x step(b, context in + n(b) / 2)``.
- **Offline maximum**: ``b / D(b)`` requests/s, ``b x out / D(b)`` output tokens/s: batch x
  output tokens / (prefill + output x the decode step at that batch).
- **At a rate lambda**: the server starts a batch of what waits, up to ``B``; a batch collects
  the arrivals during the one before it, so it holds ``x = min(B, max(1, lambda D(x)))``
  (solved by iteration; ``D`` grows with ``x``), and the server is busy ``u = min(1, lambda
  D(x) / x)`` of the time. **TPOT** is the decode step of the request's batch: ``x`` at the
  mean, ``x + z_q sqrt(x)`` (Poisson arrivals per batch, at most ``B``) at quantile ``q``.
  **TTFT** = the rest of the batch in flight (uniform over ``D(x)`` while busy) + the full
  batches ahead when more than ``B`` wait + its batch's prefill. The batches ahead are a
  reflected random walk gaining Poisson(lambda D(B)) requests and losing ``B`` per batch: its
  diffusion limit is exponential with rate ``2 (1 - rho) / rho`` requests (rho = lambda /
  lambda_max), each ``B`` of them one more ``D(B)``. The quantile of the sum adds the parts'
  means and the root of the sum of their squared excesses (as :mod:`llm_batching` does).
  Finite below the offline maximum, infinite at and above it.
- **Sizing**: the batch cap ``B`` is chosen as max-num-seqs is for continuous batching (the
  highest rate within both p99 targets and the utilisation headroom; the smaller on a tie),
  from :data:`~ringmaster.engine.llm_batching.MAX_NUM_SEQS_CHOICES` and the cache's bound, at
  most ``spec.maxBatchSize``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import llm_batching as batching
from ringmaster.engine.llm_batching import Capacity, Lengths, LoadPoint, _z
from ringmaster.engine.llm_step import ServingTerms, step_seconds

if TYPE_CHECKING:
    from ringmaster.engine.llm_serving import LlmServingInputs

F64 = NDArray[np.float64]

# Rounds of the batch-size fixed point; rates per grid of the search for each SLO rate (two
# grids: the rate is found to 1 / _GRID^2 of the offline maximum).
_FIXED_POINT_ROUNDS = 60
_GRID = 48


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


@lru_cache(maxsize=1)
def _z_table() -> tuple[F64, F64]:
    """The normal quantile z(1 - p) on a log grid of tail probabilities p, for interpolation."""
    tails = np.geomspace(1e-9, 0.5, 400)
    return np.log(tails), np.array([_z(1.0 - p) for p in tails])


def _longest_output(output: Lengths, batch: ArrayLike) -> F64:
    """The expected longest output of ``batch`` requests: the ``b / (b + 1)`` quantile of the
    length distribution, at least its mean."""
    b = np.maximum(_f(batch), 1.0)
    s = output.sigma
    if s == 0.0:
        return np.broadcast_to(_f(output.mean), b.shape).copy()
    log_tails, z_values = _z_table()
    z = np.interp(np.log(1.0 / (b + 1.0)), log_tails, z_values)
    return np.maximum(output.mean * np.exp(-0.5 * s * s + z * s), output.mean)


class StaticBatch:
    """A batch of ``batch`` requests (arrays broadcast): its decode steps, prefill, decode step,
    whole duration and the rate it serves at."""

    def __init__(
        self, terms: ServingTerms, batch: ArrayLike, inputs: Lengths, outputs: Lengths
    ) -> None:
        b = np.maximum(_f(batch), 1.0)
        self.batch = b
        self.steps = _longest_output(outputs, b)
        self.prefill = _f(step_seconds(terms, 0.0, b * inputs.mean, prompt_length=inputs.mean))
        context = b * (inputs.mean + 0.5 * self.steps)
        self.decode = _f(step_seconds(terms, b, 0.0, context_tokens=context))
        self.seconds = self.prefill + np.maximum(self.steps - 1.0, 0.0) * self.decode
        self.rate = b / self.seconds


def offline_output_tokens_per_second(
    terms: ServingTerms, batch: ArrayLike, inputs: Lengths, outputs: Lengths
) -> F64:
    """batch x output tokens / (prefill + output x the decode step at that batch)."""
    return StaticBatch(terms, batch, inputs, outputs).rate * outputs.mean


def load_points(
    terms: ServingTerms,
    cap_batch: ArrayLike,
    rate: ArrayLike,
    inputs: Lengths,
    outputs: Lengths,
    quantiles: tuple[float, ...] = batching.QUANTILES,
) -> LoadPoint:
    """TTFT and TPOT quantiles at each arrival ``rate`` for a static batch of at most
    ``cap_batch`` (see the module's docstring); infinite at and beyond the offline maximum."""
    lam = _f(rate)
    cap = np.maximum(_f(cap_batch), 1.0)
    full = StaticBatch(terms, cap, inputs, outputs)
    rho = lam / full.rate
    stable = rho < 1.0
    x = np.ones(np.broadcast(lam, cap).shape)
    for _ in range(_FIXED_POINT_ROUNDS):
        x = np.clip(lam * StaticBatch(terms, x, inputs, outputs).seconds, 1.0, cap)
    mine = StaticBatch(terms, x, inputs, outputs)
    busy = np.clip(lam * mine.seconds / x, 1e-12, 1.0)
    safe_rho = np.clip(rho, 1e-12, 1.0 - 1e-12)
    theta = 2.0 * (1.0 - safe_rho) / safe_rho  # per request of the batches-ahead queue
    ahead_mean = full.seconds / (theta * cap)
    residual_mean = 0.5 * busy * mine.seconds
    ttft: dict[float, F64] = {}
    tpot: dict[float, F64] = {}
    for q in quantiles:
        x_q = np.minimum(cap, x + _z(q) * np.sqrt(x))
        own = inputs.quantile(q) - inputs.mean
        prefill_q = _f(step_seconds(terms, 0.0, x_q * inputs.mean + own, prompt_length=inputs.mean))
        residual_q = mine.seconds * np.maximum(0.0, 1.0 - (1.0 - q) / busy)
        ahead_q = full.seconds * math.log(1.0 / (1.0 - q)) / (theta * cap)
        mean = residual_mean + ahead_mean + mine.prefill
        excess = np.sqrt(
            (residual_q - residual_mean) ** 2
            + (ahead_q - ahead_mean) ** 2
            + (prefill_q - mine.prefill) ** 2
        )
        ttft[q] = np.where(stable, mean + excess, np.inf)
        batch_q = StaticBatch(terms, x_q, inputs, outputs)
        tpot[q] = np.where(stable, batch_q.decode, np.inf)
    unstable = np.where(stable, 0.0, np.inf)
    return LoadPoint(lam, rho, x + unstable, mine.decode + unstable, busy, ttft, tpot)


def _largest_rates(
    terms: ServingTerms,
    batches: F64,
    top: F64,
    targets: tuple[float, float],
    inputs: Lengths,
    outputs: Lengths,
) -> list[tuple[F64, NDArray[np.bool_]]]:
    """For TTFT and TPOT p99: the largest rate below ``top`` (per batch cap) that meets its
    target, and whether it holds right up to ``top``. Both p99s rise with the rate: a grid of
    rates, then a grid in the bracket it leaves, each evaluated for every batch at once."""
    grid = np.arange(1.0, _GRID + 1.0) / _GRID * (1.0 - 1e-6)

    def p99(rates: F64, metric: str) -> F64:
        point = load_points(terms, batches[:, None], rates, inputs, outputs, quantiles=(0.99,))
        return np.asarray(getattr(point, metric)[0.99], dtype=np.float64)

    rates = top[:, None] * grid
    first = load_points(terms, batches[:, None], rates, inputs, outputs, quantiles=(0.99,))
    out = []
    for metric, target, values in zip(
        ("ttft", "tpot"), targets, (first.ttft[0.99], first.tpot[0.99]), strict=True
    ):
        good = np.cumprod(values <= target, axis=-1)  # the good prefix
        count = np.sum(good, axis=-1)
        meets_all = count == _GRID
        lo = np.where(count > 0, rates[np.arange(len(top)), np.maximum(count - 1, 0)], 0.0)
        hi = rates[np.arange(len(top)), np.minimum(count, _GRID - 1)]
        fine = lo[:, None] + (hi - lo)[:, None] * np.arange(1.0, _GRID + 1.0) / _GRID
        better = np.cumprod(p99(fine, metric) <= target, axis=-1)
        more = np.sum(better, axis=-1)
        lo = np.where(more > 0, fine[np.arange(len(top)), np.maximum(more - 1, 0)], lo)
        out.append((np.where(meets_all, top, lo), meets_all))
    return out


def _batches_up_to(limit: float) -> F64:
    """Every batch size from 1 to ``limit`` (past 4096, 2048 more on a log scale)."""
    dense = np.arange(1.0, min(limit, 4096.0) + 1.0)
    if limit <= 4096.0:
        return dense
    return np.unique(np.concatenate([dense, np.floor(np.geomspace(4096.0, limit, 2048))]))


class StaticReplica:
    """One replica under static batching at every candidate batch cap, and the chosen one: the
    same interface as :class:`ringmaster.engine.llm_serving._Replica`."""

    def __init__(
        self,
        terms: ServingTerms,
        inputs: LlmServingInputs,
        in_lengths: Lengths,
        out_lengths: Lengths,
        cache_tokens: float,
    ) -> None:
        bound = max(1.0, math.floor(cache_tokens / (in_lengths.p99 + out_lengths.p99)))
        if inputs.max_num_seqs is not None:
            choices = {min(float(inputs.max_num_seqs), bound)}
        else:
            choices = {float(c) for c in batching.MAX_NUM_SEQS_CHOICES if c < bound} | {bound}
        limit = bound
        if inputs.max_batch_size is not None:  # spec.maxBatchSize caps the batch
            limit = min(bound, float(inputs.max_batch_size))
            choices = {min(c, limit) for c in choices}
        if inputs.max_num_seqs is None:
            # The batch of the most requests/s at most the cap: a longer batch waits longer for
            # its longest sequence, so the most is not always the largest batch.
            every = _batches_up_to(limit)
            best = every[int(np.argmax(StaticBatch(terms, every, in_lengths, out_lengths).rate))]
            choices.add(float(best))
        self.seqs = np.array(sorted(choices))
        self.budgets = np.ceil(self.seqs * in_lengths.p99)  # the batch's prefill, in one step
        self.terms = terms
        self.in_lengths, self.out_lengths = in_lengths, out_lengths
        batch = StaticBatch(terms, self.seqs, in_lengths, out_lengths)
        binds = np.where(
            self.seqs >= bound, batching.CAPACITY_KV_CACHE, batching.CAPACITY_MAX_NUM_SEQS
        )
        self.cap = Capacity(
            self.seqs,
            batch.rate,
            batch.decode,
            batch.steps,
            self.seqs * in_lengths.mean / np.maximum(batch.steps, 1.0),
            np.full(self.seqs.shape, bound),
            binds.astype(np.int64),
        )
        offline = batch.rate
        headroom = inputs.max_utilization * offline
        targets = (inputs.ttft_p99_seconds, inputs.tpot_p99_seconds)
        found = _largest_rates(terms, self.seqs, offline, targets, in_lengths, out_lengths)
        self.ttft_rate, self.tpot_rate = (np.where(all_, np.inf, r) for r, all_ in found)
        limits = np.stack([self.ttft_rate, self.tpot_rate, headroom])
        self.sustainable = np.min(limits, axis=0)
        best = float(np.max(self.sustainable))
        if best > 0:
            self.pick = int(np.flatnonzero(self.sustainable >= best * 0.999)[0])  # smaller batch
        else:
            self.pick = int(np.argmax(offline))
        self.best_offline = int(np.argmax(offline))
        self.limit_index = int(np.argmin(limits[:, self.pick]))

    def points(self, rates: np.ndarray) -> LoadPoint:
        return load_points(
            self.terms, self.seqs[self.pick], rates, self.in_lengths, self.out_lengths
        )
