"""A closed loop of clients against one replica: ``concurrency`` clients, each sending its next
request as soon as the last one's answer is complete (the ``--concurrency`` of benchmark harnesses:
aiperf and genai-perf, vLLM's ``benchmark_serving --max-concurrency``, ``sglang.bench_serving
--max-concurrency``). The replica batches continuously with chunked prefill: every step decodes
one token of each running sequence and prefills prompt tokens up to the token budget beside them
(engine.llm_step.step_seconds, in one forward pass or, for an engine that runs prompts apart,
two).

Mean-value analysis at fixed lengths (input ``i``, output ``o``):

- ``R = min(concurrency, slots)`` requests run; the others wait for a slot, first come first
  served (the scheduler's queue): a client's wait is ``(concurrency - R) / X``.
- A running request spends ``T_first`` until its first token: half a step for the step under way
  to end, then its prompt in chunks of what the budget leaves beside the decodes, each chunk a
  step that carries it whole (the prompt is not spread over the other steps: that is what a
  request's first token waits for). Then ``o - 1`` decode steps of the mean step ``tau``.
- Little's law on the slots: ``X = R / (T_first + (o - 1) tau)`` requests a second; the steps
  carry ``X (o - 1) tau`` decodes and ``X i tau`` prompt tokens a step on average, which set
  ``tau``.
- A prompt rides in the steps that carry it (:func:`mean_step`): whole where the budget leaves
  room for it, so a fraction ``X i tau / i`` of the steps carry one and the rest none, and
  ``tau`` is the mixture of the two steps, not one step at the mean prompt tokens (the step is
  convex in its tokens past the ridge: the mixture is the longer). The fixed point in ``tau``
  is found by regula falsi (iterating it oscillates where prompts are most of the work).
- The budget bounds the prompt tokens a step takes: where ``X i tau`` would pass what the
  budget leaves beside the decodes, prompts queue for it, ``X`` is the budget's
  ``(budget - decodes) / (i tau)`` and the queue lengthens ``T_first`` to what Little's law
  leaves of ``R / X``.
- ``TPOT`` is the mean of the steps a request decodes in: they carry the other ``R - 1``
  requests' prompts, not its own (that step makes its first token); ``TTFT = wait + T_first``.
  The steps that carry no prompt are shorter (``decode_only_step``): a median inter-token gap
  is theirs. AIConfigurator's closed-loop runs, whose prompts make the mean step up to 5x the
  decodes' alone, hold to the mean (calibration.closed_loop_runs).

A harness's clients start together (aiperf waits for its warm-up's answers before the measured
requests begin): their first prompts reach an idle replica at once, and the k-th waits for the
k - 1 before it (:func:`starting_wave`, through the same steps). Equal lengths would keep such
waves for good (every request of a wave ends in the same step); any spread in the lengths or the
clients' round trips breaks them up within a round or so (the seeded reference scheduler with a
1 % spread: tests/engine/test_closed_loop.py), after which the loop is the steady state above.
A run of ``rounds`` requests a client therefore measures the starting wave in one ``rounds``-th
of its requests and the steady state in the rest.

What a request costs outside the steps (the HTTP server, tokenising, the admission into the
engine's loop) is not in it: calibration.closed_loop_runs prints what the measured TTFTs carry
beyond the model's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ringmaster.engine import llm_step as S

# Rounds of the fixed point's search (at most; it settles to this relative error within a
# dozen at every measured run); the decodes and the request rate at a given step settle
# together in a few rounds.
ROUNDS = 60
TOLERANCE = 1e-6
DECODE_ROUNDS = 2


class ClosedLoop(NamedTuple):
    ttft: float  # seconds: the run's mean (steady_ttft, and wave_ttft in one round of ``rounds``)
    tpot: float  # seconds per output token after the first (the mean step of a request's decodes)
    step: float  # the mean step over every step
    requests_per_second: float
    running: float  # R: requests in slots
    decoding: float  # the mean step's decodes
    prompt_tokens_per_step: float  # the mean step's prompt tokens
    waiting_seconds: float  # the slot's wait, part of ttft
    decode_only_step: float  # the mean step's decodes alone: a step that carries no prompt
    steady_ttft: float  # seconds: the steady state's, the slot's wait, then the first token
    wave_ttft: float  # seconds: the mean over the clients' first requests, which start together
    # seconds: the run's TTFT quantiles, its requests' first tokens (one ``rounds``-th in the
    # starting wave, the rest at the steady state's); the steady state's without ``rounds``
    ttft_p50: float = 0.0
    ttft_p90: float = 0.0
    ttft_p99: float = 0.0


StepAt = Callable[[float, float], float]
"""(decodes, prompt tokens) -> seconds: a step of the loop's terms at those counts."""


def step_at(terms: S.ServingTerms) -> StepAt:
    """The terms' step at a count of decodes (each at the terms' context) and prompt tokens of
    the terms' prompt, remembered: the loop asks for the same steps many times."""
    context = float(terms.context_tokens)
    prompt = float(terms.input_tokens)

    @cache
    def step(decodes: float, tokens: float) -> float:
        return float(
            S.step_seconds(terms, decodes, tokens, decodes * context, prompt_length=prompt)
        )

    return step


def first_token_seconds(
    step: StepAt, decodes: float, tau: float, prompt: float, budget: float
) -> float:
    """Half a step under way, then the prompt's chunks, each a step of ``decodes`` decodes and
    the chunk (what the budget leaves beside the decodes, at least one token)."""
    chunk = min(prompt, max(budget - decodes, 1.0))
    chunks = math.ceil(prompt / chunk)
    last = prompt - (chunks - 1) * chunk
    full = (chunks - 1) * step(decodes, chunk) if chunks > 1 else 0.0
    return 0.5 * tau + full + step(decodes, last)


def starting_wave(step: StepAt, clients: int, prompt: float, budget: float) -> NDArray[np.float64]:
    """The first-token times, from their arrival, of ``clients`` prompts that reach an idle
    replica together, first come first served as a scheduler admits them: each step carries the
    decodes of the wave's requests already past their prompt and, in what the budget leaves
    beside them, the next prompts' tokens (a chunk where one does not fit). The k-th prompt's
    first token waits for the k - 1 prompts before it."""
    times = np.empty(clients)
    done, now, left = 0, 0.0, prompt  # left: the tokens of prompt ``done`` not yet computed
    while done < clients:
        room = max(budget - done, 1.0)
        # the steps that carry nothing but chunks of this prompt, all alike: taken at once
        whole = math.ceil(left / room) - 1
        if whole > 0:
            now += whole * step(float(done), room)
            left -= whole * room
        tokens, finished = 0.0, 0
        while done + finished < clients and tokens < room:
            take = min(left, room - tokens)
            tokens += take
            left -= take
            if left > 0.0:
                break
            finished += 1
            left = prompt
        now += step(float(done), tokens)
        times[done : done + finished] = now
        done += finished
    return times


def run_mean(steady: float, wave: float, rounds: float) -> float:
    """A run's mean TTFT: its clients' first requests (one ``rounds``-th of them) at the starting
    wave's mean ``wave``, the rest at the steady state's ``steady``."""
    return steady + (wave - steady) / rounds


def run_quantile(steady: float, wave: NDArray[np.float64], rounds: float, q: float) -> float:
    """The ``q`` quantile of a run's TTFTs: the starting wave's first requests (one ``rounds``-th
    of them, ``wave``) among requests that wait ``steady`` (the steady state's spread is not
    modelled: with fixed lengths its requests wait alike)."""
    times = np.sort(np.append(wave, steady))
    weights = np.full(times.size, 1.0 / (rounds * wave.size))
    weights[np.searchsorted(times, steady)] += 1.0 - 1.0 / rounds
    return float(times[min(int(np.searchsorted(np.cumsum(weights), q)), times.size - 1)])


def mean_step(step: StepAt, decodes: float, prompts: float, prompt: float, budget: float) -> float:
    """The mean step with ``decodes`` decodes and ``prompts`` prompt tokens a step on average.
    A prompt enters the step after its request's slot frees, whole where the budget leaves room
    for it (else in chunks): a fraction of the steps carry it and the rest carry none, so the
    mean is a mixture of the two steps, not one step at the mean prompt tokens. Past the ridge a
    step that carries a prompt is longer than its tokens' share of a step that shares the
    weights' read, so the mixture is the longer (Jensen's inequality on a convex step)."""
    room = max(budget - decodes, 1.0)
    carried = min(max(prompt, prompts), room)
    share = min(prompts / carried, 1.0) if carried > 0.0 else 0.0
    return share * step(decodes, carried) + (1.0 - share) * step(decodes, 0.0)


def closed_loop(
    terms: S.ServingTerms,
    concurrency: float,
    slots: float,
    budget: float,
    rounds: float | None = None,
) -> ClosedLoop:
    """The replica under ``concurrency`` clients at the terms' lengths, with at most ``slots``
    requests running (max-num-seqs or the KV cache, whichever binds) and a step budget of
    ``budget`` tokens: its steady state, and over a run of ``rounds`` requests a client that
    start together, the run's mean TTFT (None: the steady state's, a run too long for its
    start to show)."""
    if rounds is not None and rounds < 1:
        raise ValueError("rounds must be at least 1")
    if concurrency < 1 or slots < 1 or budget < 1:
        raise ValueError("concurrency, slots and budget must each be at least 1")
    prompt = float(terms.input_tokens)
    decode_steps = max(float(terms.output_tokens) - 1.0, 0.0)
    running = min(float(concurrency), math.floor(slots))
    step = step_at(terms)

    def settle(decodes: float, tau: float) -> tuple[float, float]:
        """(requests a second, seconds to the first token) at a mean step of ``tau``."""
        first = first_token_seconds(step, decodes, tau, prompt, budget)
        rate = running / (first + decode_steps * tau)
        bound = max(budget - decodes, 1.0) / (prompt * tau)  # the budget's prompts a second
        if rate > bound:
            rate = bound
            first = running / rate - decode_steps * tau
        return rate, first

    def state(tau: float) -> tuple[float, float, float]:
        """(decodes a step, requests a second, the mean step they make) at a mean step of
        ``tau``."""
        decodes = running
        for _ in range(DECODE_ROUNDS):
            rate, _ = settle(decodes, tau)
            decodes = min(rate * decode_steps * tau, running)
        rate, _ = settle(decodes, tau)
        return decodes, rate, mean_step(step, decodes, rate * prompt * tau, prompt, budget)

    # The mean step falls as the step it is computed at grows (a longer step admits the same
    # prompts per request), so tau = mean_step(tau) has one root, bracketed by half a step of
    # one decode and twice a step of a full budget; found by regula falsi (Illinois: an end kept
    # twice running has its weight halved), which cannot leave the bracket (iterating the map
    # itself oscillates where prompts are most of the work).
    low = 0.5 * step(1.0, 0.0)
    high = 2.0 * step(running, max(budget, prompt))
    g_low, g_high = state(low)[2] - low, state(high)[2] - high
    tau, side = low, 0
    for _ in range(ROUNDS):
        tau = high - g_high * (high - low) / (g_high - g_low)
        g = state(tau)[2] - tau
        if abs(g) <= TOLERANCE * tau:
            break
        if g > 0.0:
            low, g_low = tau, g
            if side > 0:
                g_high *= 0.5
            side = 1
        else:
            high, g_high = tau, g
            if side < 0:
                g_low *= 0.5
            side = -1
    decodes, rate, _ = state(tau)
    rate, first = settle(decodes, tau)
    waiting = (float(concurrency) - running) / rate
    # A request's decodes run in steps that carry the other requests' prompts, not its own (the
    # step that carries its own makes its first token): their mean is its TPOT.
    others = (running - 1.0) / running
    tpot = mean_step(step, decodes, others * rate * prompt * tau, prompt, budget)
    steady = waiting + first
    # The clients beyond the slots wait for one in the starting wave as they do after it.
    wave_times = waiting + starting_wave(step, int(running), prompt, budget)
    wave = float(wave_times.mean())
    ttft = steady if rounds is None else run_mean(steady, wave, rounds)
    quantiles = (
        (steady, steady, steady)
        if rounds is None
        else tuple(run_quantile(steady, wave_times, rounds, q) for q in (0.5, 0.9, 0.99))
    )
    return ClosedLoop(
        ttft=ttft,
        tpot=tpot,
        step=tau,
        requests_per_second=rate,
        running=running,
        decoding=decodes,
        prompt_tokens_per_step=rate * prompt * tau,
        waiting_seconds=waiting,
        decode_only_step=step(decodes, 0.0),
        steady_ttft=steady,
        wave_ttft=wave,
        ttft_p50=quantiles[0],
        ttft_p90=quantiles[1],
        ttft_p99=quantiles[2],
    )
