"""spec.maxBatchSize caps an LLM replica's running batch, and spec.batching: Static runs fixed
batches (engine.llm_static): each acts in the plan, against the published fixed-batch rows."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.calibration import llm_serving as LC
from ringmaster.calibration.points import PACKAGED_POINTS, load_points
from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_static as LS
from ringmaster.engine.llm_batching import Lengths
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

LLAMA3_8B = KNOWN_TRANSFORMERS["llama-3-8b"]
CHAT = L.LlmServingInputs(
    model=LLAMA3_8B,
    accelerator="nvidia-h100-80gb",
    per_replica=1,
    precision="FP8",
    input_tokens_mean=512,
    output_tokens_mean=256,
    input_tokens_p99=2048,
    output_tokens_p99=1024,
    ttft_p99_seconds=0.5,
    tpot_p99_seconds=0.03,
    target_requests_per_second=20,
    max_replicas=100,
)


def offline(inputs: L.LlmServingInputs, **changes: object) -> L.LlmServingPrediction:
    return L.predict_llm_serving(replace(inputs, **changes))  # type: ignore[arg-type]


# --- the cap ----------------------------------------------------------------------------------


def test_a_cap_below_what_the_cache_holds_lowers_the_offline_maximum_and_the_plan_reports_it():
    free = offline(CHAT)
    assert free.max_batch_size is None and free.offline_max_num_seqs > 64
    capped = offline(CHAT, max_batch_size=64)
    assert capped.max_batch_size == 64
    assert capped.max_num_seqs <= 64 and capped.offline_max_num_seqs <= 64
    assert capped.offline_output_tokens_per_second < 0.9 * free.offline_output_tokens_per_second
    # Ignored, it would have run the batch the cache allows.
    assert capped.offline_max_num_seqs < free.offline_max_num_seqs


def test_a_cap_above_what_the_cache_holds_changes_nothing():
    free = offline(CHAT)
    roomy = offline(CHAT, max_batch_size=4096)
    assert roomy.offline_output_tokens_per_second == pytest.approx(
        free.offline_output_tokens_per_second
    )
    assert roomy.max_num_seqs == free.max_num_seqs


@settings(max_examples=25, deadline=None)
@given(
    small=st.integers(1, 600),
    extra=st.integers(1, 1500),
    input_mean=st.sampled_from([128, 512, 2048]),
    output_mean=st.sampled_from([128, 256, 2048]),
    spread=st.sampled_from([1.0, 2.0, 4.0]),
    static=st.booleans(),
)
def test_a_larger_cap_never_lowers_the_offline_maximum(
    small, extra, input_mean, output_mean, spread, static
):
    inputs = replace(
        CHAT,
        input_tokens_mean=input_mean,
        output_tokens_mean=output_mean,
        input_tokens_p99=input_mean * spread,
        output_tokens_p99=output_mean * spread,
        static_batching=static,
    )
    low = offline(inputs, max_batch_size=small).offline_output_tokens_per_second
    high = offline(inputs, max_batch_size=small + extra).offline_output_tokens_per_second
    assert high >= low * (1.0 - 1e-9)


# --- static batches ---------------------------------------------------------------------------


def _published_static_rows() -> list[dict[str, object]]:
    section = load_points(PACKAGED_POINTS)["llm_inference"]
    table = next(s for s in section if s["id"] == "trtllm-v0.6-llama7b-throughput")
    return list(table["rows"])


def _row_inputs(row: dict[str, object]) -> L.LlmServingInputs:
    return L.LlmServingInputs(
        model=LC.LLAMA_7B,
        accelerator=LC.GPUS[str(row["gpu"])],
        per_replica=1,
        precision=str(row["precision"]).upper(),
        input_tokens_mean=float(row["input"]),  # type: ignore[arg-type]
        output_tokens_mean=float(row["output"]),  # type: ignore[arg-type]
        ttft_p99_seconds=600.0,
        tpot_p99_seconds=60.0,
        target_requests_per_second=1.0,
        max_batch_size=int(row["batch"]),  # type: ignore[call-overload]
        static_batching=True,
        engine="TensorRT-LLM",  # the table's engine: its own all-reduce and FP8 GEMMs
    )


@pytest.mark.parametrize("row", _published_static_rows(), ids=lambda r: f"{r['gpu']}-b{r['batch']}")
def test_a_static_batch_is_batch_x_output_over_prefill_plus_output_decode_steps(row):
    """TensorRT-LLM 0.6.1's static-batching table (LLaMA-7B, fixed lengths, the batch stated):
    the plan's offline maximum is the calibration's static-batch formula at the published
    batch (where the cache holds it), and within 17% of the published rate (the A100's
    batch-384 row, the farthest: the refit per-sequence KV work, 85 tokens, charges
    its 384 short sequences more than the 43 did)."""
    p = L.predict_llm_serving(_row_inputs(row))
    assert p.batching == "Static" and p.max_batch_size == row["batch"]
    assert p.offline_max_num_seqs <= int(row["batch"])  # type: ignore[call-overload]
    published = float(row["output_tokens_per_s"])  # type: ignore[arg-type]
    assert abs(p.offline_output_tokens_per_second / published - 1.0) < 0.17
    if p.offline_max_num_seqs == row["batch"]:
        formula = LC._static_batch_tokens_per_second(row, LC.engine_constants())
        assert p.offline_output_tokens_per_second == pytest.approx(formula, rel=0.03)


def test_the_batch_runs_to_its_longest_sequence():
    """Fixed lengths: the mean; spread lengths: longer with the batch, never below the mean."""
    fixed = LS._longest_output(Lengths(256.0, 256.0), np.array([1.0, 64.0]))
    assert fixed.tolist() == [256.0, 256.0]
    spread = LS._longest_output(Lengths(256.0, 1024.0), np.array([1.0, 8.0, 64.0, 512.0]))
    assert spread[0] >= 256.0 and np.all(np.diff(spread) > 0.0)
    assert spread[2] == pytest.approx(Lengths(256.0, 1024.0).quantile(64 / 65), rel=1e-3)


def test_static_batching_serves_no_more_than_continuous_at_the_same_cap():
    for cap in (16, 64, 256):
        static = offline(CHAT, max_batch_size=cap, static_batching=True)
        continuous = offline(CHAT, max_batch_size=cap)
        assert (
            static.offline_output_tokens_per_second <= continuous.offline_output_tokens_per_second
        )


def test_static_latency_is_finite_below_the_offline_maximum_and_rises_with_the_rate():
    terms_plan = offline(CHAT, max_batch_size=64, static_batching=True)
    assert terms_plan.load_curve, "a static plan has its load curve"
    ttft = [c.ttft_p99_seconds for c in terms_plan.load_curve]
    tpot = [c.tpot_p99_seconds for c in terms_plan.load_curve]
    assert all(np.isfinite(ttft)) and all(np.isfinite(tpot))
    assert ttft == sorted(ttft) and tpot == sorted(tpot)


def test_a_request_waits_for_the_static_batch_in_flight():
    """Under load a static batch's TTFT p99 is at least most of a batch's time: far above
    continuous batching's at the same cap and rate."""
    static = offline(CHAT, max_batch_size=64, static_batching=True)
    continuous = offline(CHAT, max_batch_size=64)
    half = static.load_curve[4]  # 50% of the static offline maximum
    assert half.load == pytest.approx(0.5)
    rate = half.requests_per_second
    # The continuous replica at the same rate is at a lower load of its larger maximum.
    below = [c for c in continuous.load_curve if c.requests_per_second >= rate]
    assert below and below[0].ttft_p99_seconds < half.ttft_p99_seconds


def test_a_ttft_target_below_the_batch_time_is_met_only_at_a_trickle():
    tight = offline(CHAT, static_batching=True, max_batch_size=64, ttft_p99_seconds=0.3)
    loose = offline(CHAT, static_batching=True, max_batch_size=64, ttft_p99_seconds=600.0)
    assert tight.requests_per_second_per_replica < 0.05 * loose.requests_per_second_per_replica
    assert loose.binding in ("utilization headroom", "KV cache capacity", "TPOT target")
