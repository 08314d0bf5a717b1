"""A named engine's batch-proportional step parts at its fitted fraction of the carried rates
(engine.serving_engines.ENGINE_STEP_FRACTION): vLLM on the MI300X, carried to the MI325X and to
SGLang there, and nowhere else."""

import numpy as np
import pytest

from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_step as S
from ringmaster.engine.ceilings import ceilings_for
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.serving_engines import ENGINE_STEP_FRACTION, engine_step_fraction
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

MI300X = DEFAULT_CATALOG.accelerator("amd-mi300x")
LLAMA3_70B = KNOWN_TRANSFORMERS["llama-3-70b"]
SCALED = (
    "gemm_per_token",
    "kv_read_per_token",
    "kv_read_per_sequence",
    "elementwise_per_token",
    "allreduce_per_token",
)
KEPT = ("overhead", "allreduce_base", "weights_read", "prefill_gemm_per_token", "kv_cache_tokens")


def _terms(engine: str | None, step_fraction: float | None = None, **kwargs) -> S.ServingTerms:
    return S.serving_terms(
        LLAMA3_70B,
        MI300X,
        8,
        MI300X.peak("FP8"),
        L.WEIGHT_BYTES["FP8"],
        L.KV_BYTES["BF16"],
        128.0,
        2048.0,
        compute_precision="fp8",
        serving_engine=engine,
        step_fraction=step_fraction,
        **kwargs,
    )


def test_vllm_on_the_mi300x_runs_its_batch_parts_at_the_fraction():
    fraction = ENGINE_STEP_FRACTION[("amd-mi300x", "vllm")]
    own, carried = _terms("vLLM"), _terms("vLLM", step_fraction=1.0)
    for name in SCALED:
        assert float(getattr(own, name)) == pytest.approx(
            float(getattr(carried, name)) / fraction, rel=1e-9
        ), name
    for name in KEPT:
        assert float(getattr(own, name)) == pytest.approx(float(getattr(carried, name))), name
    # so the batch-1 step barely moves and a large batch's grows by nearly 1 / fraction
    one = float(S.step_seconds(own, 1.0, 0.0)) / float(S.step_seconds(carried, 1.0, 0.0))
    many = float(S.step_seconds(own, 2048.0, 0.0)) / float(S.step_seconds(carried, 2048.0, 0.0))
    assert one < 1.1 and many > 1.35


def test_the_fraction_is_carried_or_absent_as_the_table_says():
    assert engine_step_fraction("amd-mi300x", "vLLM") == (
        ENGINE_STEP_FRACTION[("amd-mi300x", "vllm")],
        None,
    )
    assert engine_step_fraction("amd-mi325x", "vLLM")[1] == ("amd-mi300x", "vllm")
    assert engine_step_fraction("amd-mi300x", "SGLang")[1] == ("amd-mi300x", "vllm")
    assert engine_step_fraction("nvidia-h100-80gb", "vLLM") == (1.0, None)
    assert engine_step_fraction("amd-mi300x", None) == (1.0, None)
    # NCCL's formula with no engine, or a profiled pool's own ceilings: the carried rates
    none = _terms(None)
    assert float(none.gemm_per_token) == pytest.approx(float(_terms(None, 1.0).gemm_per_token))
    profiled = _terms("vLLM", ceilings=ceilings_for(MI300X))
    assert float(profiled.kv_read_per_token) == pytest.approx(
        float(_terms("vLLM", 1.0, ceilings=ceilings_for(MI300X)).kv_read_per_token)
    )


def test_a_lower_fraction_never_shortens_a_step():
    batches = np.array([1.0, 16.0, 256.0, 2048.0])
    previous = None
    for fraction in (1.0, 0.8, 0.6, 0.4):
        step = S.step_seconds(_terms("vLLM", fraction), batches, 0.0)
        if previous is not None:
            assert np.all(step >= previous)
        previous = step
