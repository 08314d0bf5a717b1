"""The LLM-serving engine's speed (issue 16): a vectorised sweep of endpoint configurations and
one LLM endpoint's plan. Printed by benchmarks/bench_engine.py (`make bench-engine`); goals:
llm_inference_evaluations_per_second >= 200,000, one LLM endpoint plan < 2 ms. Figures only: no
assertion on time (the machine is shared).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_serving import (
    LlmServingInputs,
    predict_llm_serving,
    serving_terms,
    sustainable_rate,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

SIZE = 200_000
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

    def sweep() -> None:
        terms = serving_terms(model, h100, tp, h100.peak("fp8"), 1.0, 1.0, n_in, n_out)
        sustainable_rate(terms, 2.0 * n_in, ttft, tpot, 0.85)

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
        f"llm_inference_evaluations_per_second: {SIZE / seconds:,.0f}",
        f"one_llm_endpoint_plan_ms (engine): {plan * 1e3:.3f}",
        f"one_llm_endpoint_plan_ms (plan_inference from a parsed spec): {spec_plan}",
    ]


if __name__ == "__main__":
    print("\n".join(llm_figures()))
