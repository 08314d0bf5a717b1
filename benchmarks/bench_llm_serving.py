"""The LLM-serving engine's speed (issues 16 and 30): a vectorised sweep of endpoint
configurations through the sizing path (the step model, the offline maximum, the p99 SLO rates
of the batching model) and one LLM endpoint's plan with its load curve. Printed by
benchmarks/bench_engine.py (`make bench-engine`). The goals issues 16 and 30 set for the closed
form (>= 200,000 configuration x rate points a second, one plan with its load curve < 5 ms) are
out of reach of the prompts' backlog chain (issue 46: a 24-state Markov chain per point, which
brought TTFT p99 from 0.27-3.5x of the reference to 0.79-0.96x below 80% load): about 5,000
points a second, one plan about 50 ms on 2 shared cores. Figures only: no assertion on time (the
machine is shared).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ringmaster.engine import llm_batching as B
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_serving import (
    LlmServingInputs,
    predict_llm_serving,
    serving_terms,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

SIZE = 2_000
BLOCK = 500  # configurations per vectorised call (bounds the arrays' memory)
ROOT = Path(__file__).resolve().parents[1]


def _best(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _median_call(fn: Callable[[], object], calls: int = 200) -> float:
    fn()
    samples = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def llm_figures() -> list[str]:
    """One sweep: Llama-3-8B on H100 in FP8 over random token mixes, tensor-parallel degrees and
    TTFT / TPOT targets; the sustainable rate and what binds, per configuration."""
    rng = np.random.default_rng(16)
    h100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
    model = KNOWN_TRANSFORMERS["llama-3-8b"]
    n_in = rng.uniform(64, 4096, SIZE)
    n_out = rng.uniform(16, 2048, SIZE)
    tp = rng.choice([1.0, 2.0, 4.0, 8.0], SIZE)
    ttft = rng.uniform(0.1, 2.0, SIZE)
    tpot = rng.uniform(0.01, 0.1, SIZE)

    lengths_in, lengths_out = B.Lengths(512, 2048), B.Lengths(256, 1024)
    points = 0

    def sweep() -> None:
        nonlocal points
        points = 0
        for lo in range(0, SIZE, BLOCK):
            part = slice(lo, lo + BLOCK)
            terms = serving_terms(
                model,
                h100,
                tp[part],
                h100.peak("fp8"),
                1.0,
                1.0,
                n_in[part],
                n_out[part],
                compute_precision="fp8",
            )
            cap = B.capacity(terms, 256.0, 8192, lengths_out.cv, input_lengths=lengths_in)
            B.largest_rates_within(
                terms, cap, lengths_in, lengths_out, ttft[part], tpot[part], 8192
            )
            # a 24-rate grid both targets share, then one of 24 rates per target
            points += BLOCK * (24 + 2 * 24)

    seconds = _best(sweep)
    inputs = LlmServingInputs(
        model=model,
        accelerator="nvidia-h100-80gb",
        per_replica=1,
        precision="FP8",
        input_tokens_mean=512,
        output_tokens_mean=256,
        input_tokens_p99=2048,
        ttft_p99_seconds=0.3,
        tpot_p99_seconds=0.025,
        target_requests_per_second=150,
        max_replicas=8,
    )
    plan = _median_call(lambda: predict_llm_serving(inputs))
    spec_plan = "n/a"
    try:  # through the API layer, from the example's manifest
        import yaml

        from ringmaster.api import parse_manifest
        from ringmaster.planning import plan_inference

        path = ROOT / "examples" / "inferenceendpoint-llama3-8b-fp8-h100.yaml"
        spec = parse_manifest(yaml.safe_load(path.read_text())).spec
        spec_plan = f"{_median_call(lambda: plan_inference(spec)) * 1e3:.3f}"
    except Exception as exc:  # the benchmark reports; it does not fail
        spec_plan = f"n/a ({type(exc).__name__})"
    return [
        f"llm_inference_evaluations_per_second: {points / seconds:,.0f} (configuration x rate "
        f"points of the batching model; {SIZE / seconds:,.0f} configurations sized per second)",
        f"one_llm_endpoint_plan_with_load_curve_ms (engine): {plan * 1e3:.3f}",
        f"one_llm_endpoint_plan_ms (plan_inference from a parsed spec): {spec_plan}",
    ]


if __name__ == "__main__":
    print("\n".join(llm_figures()))
