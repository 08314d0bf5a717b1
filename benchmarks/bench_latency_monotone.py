"""Latency at load never falls as the rate rises (issue 46, item 3): every example LLM endpoint
(examples/inferenceendpoint-*.yaml with an architecture), under each serving engine, at every
layout the engine weighs and every (max-num-batched-tokens, max-num-seqs) configuration its
sizing evaluates, on a grid of rates up to just below the offline maximum. A series is one
configuration's TTFT or TPOT at one quantile (p50, p90, p99) over the rates; it is non-monotone
when a value falls by more than a part in 1e9 from one rate to the next. Prints the count of
series, the non-monotone ones and the worst relative fall. Run: ``python benchmarks/
bench_latency_monotone.py`` (about a minute); the test suite runs a smaller sweep of the same
(tests/engine/test_latency_fixed_point.py).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ringmaster.api import InferenceEndpointSpec
from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_serving as L
from ringmaster.engine.serving_engines import SERVING_ENGINES
from ringmaster.planning.plans import llm_serving_inputs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# Loads (fractions of the offline maximum) the series run over.
LOADS = np.concatenate([np.linspace(0.005, 0.95, 190), 1.0 - np.geomspace(0.05, 1e-4, 60)])
TOLERANCE = 1e-9


@dataclass
class Configs:
    name: str
    terms: L.ServingTerms
    cap: B.Capacity
    budgets: np.ndarray
    in_lengths: B.Lengths
    out_lengths: B.Lengths


def example_inputs() -> list[tuple[str, L.LlmServingInputs]]:
    out = []
    for path in sorted(EXAMPLES.glob("inferenceendpoint-*.yaml")):
        doc = yaml.safe_load(path.read_text())
        spec = doc["spec"]
        if "architecture" not in spec.get("model", {}):
            continue
        out.append((path.stem, llm_serving_inputs(InferenceEndpointSpec.model_validate(spec))))
    return out


def replicas_of(inputs: L.LlmServingInputs) -> list[Any]:
    """Every _Replica the sizing builds for ``inputs`` (one per layout)."""
    seen: list[Any] = []
    original = L._Replica

    class Recording(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self)

    L._Replica = Recording  # type: ignore[misc]
    try:
        L.predict_llm_serving(inputs)
    finally:
        L._Replica = original  # type: ignore[misc]
    return seen


def configurations(engines: tuple[str, ...] = SERVING_ENGINES) -> list[Configs]:
    out = []
    for name, inputs in example_inputs():
        for engine in engines:
            for i, replica in enumerate(replicas_of(replace(inputs, engine=engine))):
                shape = replica.seqs.shape
                terms = L.ServingTerms(*(np.broadcast_to(x, shape) for x in replica.terms))
                cap = B.Capacity._make(np.broadcast_to(x, shape) for x in replica.cap)
                out.append(
                    Configs(
                        f"{name}/{engine}/layout{i}",
                        terms,
                        cap,
                        replica.budgets,
                        replica.in_lengths,
                        replica.out_lengths,
                    )
                )
    return out


def sweep(configs: list[Configs], loads: np.ndarray = LOADS) -> tuple[int, int, float, list[str]]:
    """(series, non-monotone series, worst relative fall, a few of the worst's names)."""
    series = bad = 0
    worst = 0.0
    names: list[tuple[float, str]] = []
    for c in configs:
        live = np.asarray(c.cap.rate) > 0.0
        if not live.any():
            continue
        terms = L.ServingTerms(*(np.asarray(x)[live][:, None] for x in c.terms))
        cap = B.Capacity._make(np.asarray(x)[live][:, None] for x in c.cap)
        rates = cap.rate * loads
        point = B.load_points(
            terms, cap, rates, c.in_lengths, c.out_lengths, c.budgets[live][:, None]
        )
        seqs = np.asarray(c.cap.slots)[live]
        for metric, values in (("ttft", point.ttft), ("tpot", point.tpot)):
            for q, v in values.items():
                v = np.asarray(v)
                fall = -np.diff(v, axis=-1) / np.maximum(v[:, :-1], 1e-300)
                drop = np.max(np.where(np.isfinite(fall), fall, 0.0), axis=-1)
                series += v.shape[0]
                hit = drop > TOLERANCE
                bad += int(np.sum(hit))
                worst = max(worst, float(np.max(drop)))
                for j in np.flatnonzero(hit):
                    names.append(
                        (float(drop[j]), f"{c.name} slots {seqs[j]:.0f} {metric} p{q * 100:g}")
                    )
    names.sort(reverse=True)
    return series, bad, worst, [f"{n} (-{d:.1%})" for d, n in names[:8]]


def main() -> int:
    start = time.perf_counter()
    configs = configurations()
    series, bad, worst, names = sweep(configs)
    seconds = time.perf_counter() - start
    print(f"latency_monotone_series            {series}")
    print(f"latency_monotone_rates_per_series  {LOADS.size}")
    print(f"latency_non_monotone_series        {bad}")
    print(f"latency_worst_fall                 {worst:.2%}")
    for n in names:
        print(f"  {n}")
    print(f"latency_monotone_sweep_seconds     {seconds:.1f}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
