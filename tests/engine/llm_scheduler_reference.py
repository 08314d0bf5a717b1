"""The reference for continuous batching: a seeded discrete-event simulation of vLLM v1's scheduler
(vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``) driving the engine's own step time.

Per step, as vLLM v1 does it:

1. the running requests, in admission order, each get their next tokens within the token budget
   (one while decoding, the rest of the prompt or a chunk of it while prefilling); a request that
   needs a KV block when none is free preempts the last running request (its blocks freed, back
   to the head of the waiting queue, recomputed from its prompt and the tokens it has generated);
2. if nothing was preempted, waiting requests are admitted first come, first served while the
   budget lasts, fewer than ``max_num_seqs`` run and the cache has blocks for their chunk;
3. the step takes ``step_seconds`` of the engine for its decodes (their real contexts) and its
   prompt chunks (their real attention spans); a request whose prompt completes emits its first
   token at the end of the step, a decoding request one more.

TTFT is first token minus arrival; TPOT is (last token - first token) / (output - 1), per request,
as vLLM's benchmark_serving and MLPerf define them. Poisson arrivals; lengths from the endpoint's
distributions (``Lengths.sample``). The first 10% of requests are a warm-up and not measured.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ringmaster.engine.llm_batching import Lengths
from ringmaster.engine.llm_step import KV_BLOCK_TOKENS, ServingTerms, step_seconds


@dataclass
class _Request:
    arrival: float
    prompt: int
    output: int
    computed: int = 0  # tokens whose KV is in the cache
    generated: int = 0
    blocks: int = 0
    first_token: float | None = None
    finish: float | None = None

    @property
    def tokens(self) -> int:
        return self.prompt + self.generated


@dataclass
class SimulationResult:
    ttft: np.ndarray
    tpot: np.ndarray
    throughput: float  # completed requests / s over the measured window
    preemptions: int
    mean_running: float
    steps: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def ttft_q(self, q: float) -> float:
        return float(np.quantile(self.ttft, q))

    def tpot_q(self, q: float) -> float:
        return float(np.quantile(self.tpot, q))


def _blocks(tokens: int) -> int:
    return -(-tokens // KV_BLOCK_TOKENS)


def simulate(
    terms: ServingTerms,
    rate: float,
    input_lengths: Lengths,
    output_lengths: Lengths,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    kv_cache_tokens: int,
    requests: int = 3000,
    seed: int = 0,
    offline: bool = False,
) -> SimulationResult:
    """Serve ``requests`` Poisson arrivals at ``rate`` (all at time 0 when ``offline``)."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, requests) if not offline else np.zeros(requests)
    arrivals = np.cumsum(gaps)
    prompts = input_lengths.sample(rng, requests)
    outputs = np.maximum(output_lengths.sample(rng, requests), 1)
    total_blocks = kv_cache_tokens // KV_BLOCK_TOKENS
    pending = deque(
        _Request(float(a), int(i), int(o))
        for a, i, o in zip(arrivals, prompts, outputs, strict=True)
    )
    everyone = list(pending)
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    free = total_blocks
    now = 0.0
    preemptions = 0
    steps = 0
    running_time = 0.0
    elapsed = 0.0
    while pending or waiting or running:
        while pending and pending[0].arrival <= now:
            waiting.append(pending.popleft())
        if not waiting and not running:
            now = pending[0].arrival
            continue
        budget = max_num_batched_tokens
        scheduled: list[tuple[_Request, int]] = []
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            new = min(req.tokens - req.computed, budget)
            need = _blocks(req.computed + new) - req.blocks
            while need > free:
                victim = running.pop()
                preemptions += 1
                preempted = True
                free += victim.blocks
                victim.blocks = 0
                victim.computed = 0
                scheduled = [(r, k) for r, k in scheduled if r is not victim]
                waiting.appendleft(victim)
                if victim is req:
                    break
            if req not in running:
                break
            free -= need
            req.blocks += need
            scheduled.append((req, new))
            budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < max_num_seqs:
                req = waiting[0]
                new = min(req.tokens - req.computed, budget)
                need = _blocks(req.computed + new) - req.blocks
                if need > free:
                    break
                waiting.popleft()
                free -= need
                req.blocks += need
                running.append(req)
                scheduled.append((req, new))
                budget -= new
        if not scheduled:  # nothing fits: wait for the next arrival (cannot happen with room)
            if not pending:
                raise RuntimeError("the cache cannot hold one request")
            now = max(now, pending[0].arrival)
            continue
        decodes = [(r, k) for r, k in scheduled if r.computed >= r.prompt and k == 1]
        chunks = [(r, k) for r, k in scheduled if not (r.computed >= r.prompt and k == 1)]
        n = len(decodes)
        context = float(sum(r.computed + 1 for r, _ in decodes))
        p = float(sum(k for _, k in chunks))
        span = sum(k * (r.computed + 0.5 * k) for r, k in chunks)
        length = 2.0 * span / p if p else 0.0
        dt = float(step_seconds(terms, n, p, context_tokens=context, prompt_length=length))
        running_time += len(running) * dt
        elapsed += dt
        now += dt
        steps += 1
        for req, k in scheduled:
            req.computed += k
            if req.computed == req.tokens:
                req.generated += 1
                if req.first_token is None:
                    req.first_token = now
                if req.generated >= req.output:
                    req.finish = now
                    free += req.blocks
                    req.blocks = 0
                    running.remove(req)
    measured = everyone[requests // 10 :]
    ttft = np.array([r.first_token - r.arrival for r in measured])
    tpot = np.array([(r.finish - r.first_token) / (r.output - 1) for r in measured if r.output > 1])
    first = measured[0].arrival
    last = max(r.finish for r in measured)
    return SimulationResult(
        ttft=ttft,
        tpot=tpot,
        throughput=len(measured) / (last - first) if last > first else float("inf"),
        preemptions=preemptions,
        mean_running=running_time / elapsed if elapsed else 0.0,
        steps=steps,
    )
