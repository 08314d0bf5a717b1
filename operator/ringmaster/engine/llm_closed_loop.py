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
- Little's law on the slots: ``X = R / (T_first + (o - 1) tau)`` requests a second; a mean step
  carries ``X (o - 1) tau`` decodes and ``X i tau`` prompt tokens, which set ``tau``: the fixed
  point is iterated (it contracts: a longer step admits the same tokens per request).
- The budget bounds the prompt tokens a step takes: where ``X i tau`` would pass what the
  budget leaves beside the decodes, prompts queue for it, ``X`` is the budget's
  ``(budget - decodes) / (i tau)`` and the queue lengthens ``T_first`` to what Little's law
  leaves of ``R / X``.
- ``TPOT = tau`` (the step a decoding sequence emits a token in, prompts of others included);
  ``TTFT = wait + T_first``. Where the prompts are a large part of the mean step, the steps
  that carry none are shorter (``decode_only_step``): a median inter-token gap is theirs, a mean
  TPOT the mean step's.

What a request costs outside the steps (the HTTP server, tokenising, the admission into the
engine's loop) is not in it: calibration.closed_loop_runs prints what the measured TTFTs carry
beyond the model's.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ringmaster.engine import llm_step as S

# Rounds of the fixed point; it settles to 1e-6 relative within a dozen at every measured row.
ROUNDS = 40
TOLERANCE = 1e-7


class ClosedLoop(NamedTuple):
    ttft: float  # seconds: the slot's wait, then the first token
    tpot: float  # seconds per output token after the first (the mean step)
    requests_per_second: float
    running: float  # R: requests in slots
    decoding: float  # the mean step's decodes
    prompt_tokens_per_step: float  # the mean step's prompt tokens
    waiting_seconds: float  # the slot's wait, part of ttft
    decode_only_step: float  # the mean step's decodes alone: a step that carries no prompt


def first_token_seconds(
    terms: S.ServingTerms, decodes: float, tau: float, prompt: float, budget: float
) -> float:
    """Half a step under way, then the prompt's chunks, each a step of ``decodes`` decodes and
    the chunk (what the budget leaves beside the decodes, at least one token)."""
    chunk = min(prompt, max(budget - decodes, 1.0))
    chunks = math.ceil(prompt / chunk)
    last = prompt - (chunks - 1) * chunk
    context = decodes * float(terms.context_tokens)

    def step(tokens: float) -> float:
        return float(S.step_seconds(terms, decodes, tokens, context, prompt_length=prompt))

    full = (chunks - 1) * step(chunk) if chunks > 1 else 0.0
    return 0.5 * tau + full + step(last)


def closed_loop(
    terms: S.ServingTerms, concurrency: float, slots: float, budget: float
) -> ClosedLoop:
    """The replica's steady state under ``concurrency`` clients at the terms' lengths, with at
    most ``slots`` requests running (max-num-seqs or the KV cache, whichever binds) and a step
    budget of ``budget`` tokens."""
    if concurrency < 1 or slots < 1 or budget < 1:
        raise ValueError("concurrency, slots and budget must each be at least 1")
    prompt = float(terms.input_tokens)
    decode_steps = max(float(terms.output_tokens) - 1.0, 0.0)
    running = min(float(concurrency), math.floor(slots))
    context = float(terms.context_tokens)
    tau = float(S.step_seconds(terms, running, 0.0))
    decodes = running

    def settle(decodes: float, tau: float) -> tuple[float, float]:
        """(requests a second, seconds to the first token) at a step of ``tau``."""
        first = first_token_seconds(terms, decodes, tau, prompt, budget)
        rate = running / (first + decode_steps * tau)
        bound = max(budget - decodes, 1.0) / (prompt * tau)  # the budget's prompts a second
        if rate > bound:
            rate = bound
            first = running / rate - decode_steps * tau
        return rate, first

    for _ in range(ROUNDS):
        rate, first = settle(decodes, tau)
        decodes = min(rate * decode_steps * tau, running)
        prompts = rate * prompt * tau
        new = float(S.step_seconds(terms, decodes, prompts, decodes * context, prompt))
        done = abs(new - tau) <= TOLERANCE * tau
        tau = new
        if done:
            break
    rate, first = settle(decodes, tau)
    waiting = (float(concurrency) - running) / rate
    return ClosedLoop(
        ttft=waiting + first,
        tpot=tau,
        requests_per_second=rate,
        running=running,
        decoding=decodes,
        prompt_tokens_per_step=rate * prompt * tau,
        waiting_seconds=waiting,
        decode_only_step=float(S.step_seconds(terms, decodes, 0.0, decodes * context)),
    )
