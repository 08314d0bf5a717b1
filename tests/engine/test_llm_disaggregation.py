"""Prefill / decode disaggregation (engine.llm_disaggregation): the KV transfer by hand, the
decode side's step without the prompt's compute, the search and the Auto choice, and the
transfer constants against their fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.calibration.kv_transfer import fit_transfer, kv_transfer_rows
from ringmaster.engine import llm_disaggregation as D
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_serving import LlmServingInputs, predict_llm_serving
from ringmaster.engine.llm_step import prefill_seconds, step_seconds
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

LLAMA_70B = KNOWN_TRANSFORMERS["llama-3.1-70b"]
LONG_PROMPTS = LlmServingInputs(
    model=LLAMA_70B,
    accelerator="nvidia-h100-80gb",
    per_replica=4,
    precision="FP8",
    input_tokens_mean=8000,
    output_tokens_mean=200,
    ttft_p99_seconds=1.0,
    tpot_p99_seconds=0.02,
    target_requests_per_second=4.0,
    max_replicas=16,
    machine_type="a3-megagpu-8g",
)


def test_transfer_seconds_by_hand() -> None:
    # 1 GB over 100 GB/s of line rate: latency + 1e9 / (efficiency x 1e11).
    expected = D.KV_TRANSFER_LATENCY_SECONDS + 1e9 / (D.KV_TRANSFER_EFFICIENCY * 1e11)
    assert float(D.transfer_seconds(1e9, 1e11)) == pytest.approx(expected, rel=1e-12)


def test_kv_transfer_bytes_are_the_prompts_cache() -> None:
    # Llama-3.1-70B, FP8 cache: 2 x 80 layers x 8 KV heads x 128 x 1 byte = 163,840 B/token.
    t = D.kv_transfer(LONG_PROMPTS, DEFAULT_CATALOG, 8, 2)
    assert t.bytes_mean == pytest.approx(163_840 * 8000)
    # a3-megagpu-8g: 8 x 200 Gb/s = 200 GB/s over 8 GPUs; the narrower side's 2 ranks move it.
    assert t.link_bytes_per_second == pytest.approx(2 * 25e9)
    assert t.seconds_p99 == pytest.approx(float(D.transfer_seconds(t.bytes_p99, 50e9)))


def test_transfer_constants_are_their_fit() -> None:
    fit = fit_transfer()
    assert pytest.approx(fit.latency_seconds, rel=1e-3) == D.KV_TRANSFER_LATENCY_SECONDS
    assert pytest.approx(fit.efficiency, rel=1e-3) == D.KV_TRANSFER_EFFICIENCY
    rows = kv_transfer_rows()
    assert rows and all(r.ok for r in rows)


def test_nvlink_domain_carries_the_transfer_when_both_replicas_fit() -> None:
    nvl72 = DEFAULT_CATALOG.host("nvidia-gb200", 4)
    rate, link, _ = D.transfer_link(nvl72, 8, 8)
    assert "NVLink" in link
    assert rate == pytest.approx(8 * nvl72.accelerator.intra_bandwidth)
    h100 = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8, "a3-megagpu-8g")
    assert "NVLink" not in D.transfer_link(h100, 8, 8)[1]


def test_decode_side_step_carries_no_prompt_compute() -> None:
    decode = replace(LONG_PROMPTS, phase="decode")
    both = predict_llm_serving(LONG_PROMPTS)
    side = predict_llm_serving(decode)
    assert side.feasible and both.feasible
    # The prompts' FLOPs gone, a decode replica serves more requests than one that prefills.
    assert side.requests_per_second_per_replica > both.requests_per_second_per_replica
    # A step's prompt tokens cost nothing once prompt_compute is 0, and all they cost at 1.
    terms = _terms(decode)
    assert float(step_seconds(terms, 16.0, 8000.0)) == pytest.approx(
        float(step_seconds(terms, 16.0, 0.0))
    )
    full = _terms(LONG_PROMPTS)
    assert float(prefill_seconds(full, 8000.0)) > 10 * float(prefill_seconds(terms, 8000.0))


def _terms(inputs: LlmServingInputs):  # type: ignore[no-untyped-def]
    from ringmaster.engine import collectives
    from ringmaster.engine.llm_step import ReplicaSpan, serving_terms

    host = DEFAULT_CATALOG.host(inputs.accelerator, 4, inputs.machine_type)
    acc = host.accelerator
    terms = serving_terms(
        inputs.model,
        acc,
        4,
        acc.peak("fp8"),
        1.0,
        1.0,
        inputs.input_tokens_mean,
        inputs.output_tokens_mean,
        compute_precision="fp8",
        span=ReplicaSpan(8, 1, collectives.gpu_fabric(acc, host.machine, 8), 0.0),
    )
    if inputs.phase == "decode":
        terms = terms._replace(prompt_compute=np.zeros(()))
    return terms


def test_long_prompts_under_tight_tpot_run_disaggregated() -> None:
    aggregated = predict_llm_serving(LONG_PROMPTS)
    choice = D.choose("Auto", aggregated, D.DisaggregationInputs(LONG_PROMPTS))
    split = choice.disaggregated
    assert split is not None and split.feasible
    assert choice.chosen == D.DISAGGREGATED
    assert split.cost_per_hour_usd < aggregated.cost_per_hour_usd
    # The sides' p99s add up to within the TTFT target; TPOT is the decode side's.
    assert split.ttft_p99_seconds is not None
    assert split.ttft_p99_seconds <= LONG_PROMPTS.ttft_p99_seconds
    assert split.tpot_p99_seconds == split.decode.tpot_p99_seconds
    assert split.tpot_p99_seconds is not None
    assert split.tpot_p99_seconds <= LONG_PROMPTS.tpot_p99_seconds
    assert split.ttft_p99_seconds == pytest.approx(
        split.prefill.ttft_p99_seconds + split.transfer.seconds_p99 + split.decode.ttft_p99_seconds
    )
    # The prefill side generates one token: no decode batch of its own to speak of.
    assert split.prefill.max_num_seqs <= split.decode.max_num_seqs


def test_short_prompts_loose_tpot_stay_aggregated_in_auto() -> None:
    chat = replace(
        LONG_PROMPTS,
        input_tokens_mean=256,
        output_tokens_mean=256,
        tpot_p99_seconds=0.1,
        ttft_p99_seconds=2.0,
        per_replica=2,
    )
    aggregated = predict_llm_serving(chat)
    choice = D.choose("Auto", aggregated, D.DisaggregationInputs(chat))
    assert choice.chosen == D.AGGREGATED
    assert "aggregated" in choice.why


def test_on_refuses_a_target_the_transfer_alone_misses() -> None:
    tight = replace(LONG_PROMPTS, ttft_p99_seconds=0.01, machine_type="a3-highgpu-8g")
    aggregated = predict_llm_serving(replace(tight, ttft_p99_seconds=1.0))
    with pytest.raises(ValueError, match="KV transfer alone"):
        D.choose("Disaggregated", aggregated, D.DisaggregationInputs(tight))


def test_faster_fabric_never_makes_ttft_worse() -> None:
    """Property: the same sides on hosts with faster NICs hand the cache over no slower, so the
    endpoint's TTFT p99 with those sides is no higher; and the plan the engine sizes on the
    faster fabric still meets the target."""
    fixed = D.DisaggregationInputs(
        LONG_PROMPTS, D.SideChoice(per_replica=8), D.SideChoice(per_replica=2)
    )
    base = DEFAULT_CATALOG.machine("a3-megagpu-8g")
    slow_split = None
    for gbps in (400, 800, 1600, 3200, 6400):
        machine = replace(base, nic_bandwidth=gbps * 1e9 / 8)
        catalog = replace(
            DEFAULT_CATALOG, machines={**DEFAULT_CATALOG.machines, base.name: machine}
        )
        split = D.predict_disaggregated(fixed, catalog)
        assert split.feasible and split.ttft_p99_seconds is not None
        assert split.ttft_p99_seconds <= LONG_PROMPTS.ttft_p99_seconds
        if slow_split is not None:
            assert split.transfer.seconds_p99 < slow_split.transfer.seconds_p99
            same_sides = D._combine(
                slow_split.prefill,
                slow_split.decode,
                split.transfer,
                slow_split.prefill_ttft_share,
                LONG_PROMPTS.ttft_p99_seconds,
            )
            assert same_sides.ttft_p99_seconds is not None
            assert slow_split.ttft_p99_seconds is not None
            assert same_sides.ttft_p99_seconds < slow_split.ttft_p99_seconds
        slow_split = split


def test_a_side_too_small_for_the_target_says_so_naming_its_field() -> None:
    fixed = D.DisaggregationInputs(
        LONG_PROMPTS, D.SideChoice(per_replica=8, replicas=1), D.SideChoice(per_replica=2)
    )
    split = D.predict_disaggregated(fixed)
    assert not split.feasible and split.reason is not None
    assert "prefill side: disaggregation.prefill.replicas 1 x" in split.reason
    assert "prompts/s" in split.reason and "TPOT" not in split.reason.split(";")[0]
