"""A serving replica across hosts: its hosts from the catalog, the layouts the engine weighs,
and the physics that separates them (cross-host all-reduces, pipeline sends, the KV cache)."""

from __future__ import annotations

import pytest

from ringmaster.calibration.llm_serving import KNOWN_TRANSFORMERS
from ringmaster.engine.hardware import DEFAULT_CATALOG, UnknownHardwareError
from ringmaster.engine.llm_serving import LlmServingInputs, predict_llm_serving

pytestmark = pytest.mark.unit

LLAMA_405B = KNOWN_TRANSFORMERS["llama-3.1-405b"]
H100 = "nvidia-h100-80gb"


def inputs(**changes: object) -> LlmServingInputs:
    base: dict[str, object] = dict(
        model=LLAMA_405B,
        accelerator=H100,
        per_replica=16,
        precision="BF16",
        input_tokens_mean=1024.0,
        output_tokens_mean=256.0,
        ttft_p99_seconds=3.0,
        tpot_p99_seconds=0.1,
        target_output_tokens_per_second=5000.0,
    )
    return LlmServingInputs(**{**base, **changes})  # type: ignore[arg-type]


def test_a_replica_of_two_host_shapes_spans_two_hosts() -> None:
    assert DEFAULT_CATALOG.replica_hosts(H100, 16) == (8, 2)
    assert DEFAULT_CATALOG.replica_hosts(H100, 8) == (8, 1)
    assert DEFAULT_CATALOG.replica_hosts(H100, 16, hosts=2) == (8, 2)


def test_a_replica_the_catalog_cannot_build_names_the_shapes_it_has() -> None:
    h200 = "nvidia-h200-141gb"
    with pytest.raises(UnknownHardwareError, match=r"12 x nvidia-h200-141gb .* comes 8 per host"):
        DEFAULT_CATALOG.replica_hosts(h200, 12)
    with pytest.raises(UnknownHardwareError, match=r"over 4 hosts is 4 per host"):
        DEFAULT_CATALOG.replica_hosts(h200, 16, hosts=4)
    # H100 also comes 4 to a host (a3-highgpu-4g): 12 is three of those.
    assert DEFAULT_CATALOG.replica_hosts(H100, 12) == (4, 3)


def test_auto_puts_405b_bf16_tp_inside_hosts_and_pp_across_them_and_says_why() -> None:
    plan = predict_llm_serving(inputs())
    assert (plan.tensor_parallel, plan.pipeline_parallel, plan.hosts_per_replica) == (8, 2, 2)
    assert plan.layout.startswith("TP 8 inside each host x PP 2 across hosts; chosen over TP 16")
    assert plan.feasible
    # Two hosts' price per replica.
    one_host = DEFAULT_CATALOG.host(H100, 8).price_per_hour
    assert plan.price_per_replica_hour_usd == pytest.approx(2 * one_host)


def test_tensor_parallelism_across_hosts_pays_its_all_reduces_on_the_fabric() -> None:
    across = predict_llm_serving(inputs(tensor_parallel=16))
    pipelined = predict_llm_serving(inputs(tensor_parallel=8, pipeline_parallel=2))
    assert across.layout.startswith("TP 16 across 2 hosts on the fabric")
    # 252 latency-bound all-reduces a step over the NICs: the pipeline serves far more.
    assert pipelined.offline_output_tokens_per_second > 2 * across.offline_output_tokens_per_second


def test_pipeline_stages_hold_twice_the_kv_cache_of_tp16_with_eight_kv_heads() -> None:
    # Llama 3.1 405B has 8 KV heads: TP 16 replicates each on two ranks, while two stages of
    # TP 8 each keep half the layers' cache.
    across = predict_llm_serving(inputs(tensor_parallel=16))
    pipelined = predict_llm_serving(inputs(pipeline_parallel=2))
    assert pipelined.max_concurrent_sequences >= 1.9 * across.max_concurrent_sequences
    assert pipelined.kv_cache_bytes_per_token == across.kv_cache_bytes_per_token


def test_a_pipeline_trades_latency_for_throughput_on_one_host() -> None:
    # NVIDIA's H200 comparison (Llama 3.1 405B FP8, TP 8 vs PP 8): TP is faster per token,
    # PP serves more at full load (calibration.llm_serving checks the ratios).
    common = dict(accelerator="nvidia-h200-141gb", per_replica=8, precision="FP8")
    common |= dict(input_tokens_mean=2048.0, output_tokens_mean=128.0, ttft_p99_seconds=60.0)
    common |= dict(tpot_p99_seconds=10.0)
    tp = predict_llm_serving(inputs(**common, tensor_parallel=8))
    pp = predict_llm_serving(inputs(**common, pipeline_parallel=8))
    assert pp.offline_output_tokens_per_second > tp.offline_output_tokens_per_second
    assert pp.load_curve[0].tpot_p50_seconds > 3 * tp.load_curve[0].tpot_p50_seconds


def test_expert_parallelism_reaches_the_plan_and_a_dense_model_refuses_it() -> None:
    moe = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]
    plan = predict_llm_serving(inputs(model=moe, per_replica=8, expert_parallel=8))
    assert plan.expert_parallel == 8 and plan.feasible, plan.reason
    with pytest.raises(ValueError, match="needs a mixture of experts"):
        predict_llm_serving(inputs(expert_parallel=8))


def test_a_replica_on_one_host_keeps_its_single_host_figures() -> None:
    model = KNOWN_TRANSFORMERS["llama-3-70b"]
    plain = predict_llm_serving(inputs(model=model, per_replica=8))
    named = predict_llm_serving(inputs(model=model, per_replica=8, tensor_parallel=8))
    assert (plain.tensor_parallel, plain.pipeline_parallel, plain.hosts_per_replica) == (8, 1, 1)
    assert plain.output_tokens_per_second_per_replica == named.output_tokens_per_second_per_replica


# --- the step's all-reduce across hosts (issue 42) ------------------------------------------------


def _span_terms(accelerator: str, per_host: int, tp: int, machine_name: str, domain: int = -1):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from ringmaster.engine import collectives
    from ringmaster.engine.llm_step import ReplicaSpan, serving_terms

    host = DEFAULT_CATALOG.host(accelerator, per_host, machine_name)
    machine = host.machine if domain < 0 else replace(host.machine, nvlink_domain=domain)
    acc = host.accelerator
    fabric = collectives.gpu_fabric(acc, machine, per_host)
    span = ReplicaSpan(per_host, 1, fabric, float(fabric.net_bandwidth) / per_host, machine)
    terms = serving_terms(LLAMA_405B, acc, tp, acc.peak("bf16"), 2.0, 2.0, 1024.0, 256.0, span=span)
    return terms, fabric, machine, acc


def test_tp_across_hosts_is_charged_at_the_steps_message_not_one_tokens() -> None:
    """At STEP_COLLECTIVE_TOKENS the terms are exactly the collective model's all-reduce of the
    step's bytes, every layer twice; at the 1,670 tokens of a loaded step they stay within the
    collective's own figure (the secant lies under the concave curve, the base carries the
    latency), where one token's slope times the tokens was several times it."""
    from ringmaster.engine.llm_step import STEP_COLLECTIVE_TOKENS
    from ringmaster.engine.tp_allreduce import cross_host_allreduce_seconds

    terms, fabric, machine, acc = _span_terms(H100, 8, 16, "a3-megagpu-8g")
    layers = 2.0 * LLAMA_405B.layers
    one_token = 2.0 * LLAMA_405B.hidden

    def collective(tokens: float) -> float:
        return float(cross_host_allreduce_seconds(one_token * tokens, 16, 8, fabric, machine, acc))

    at_step = float(terms.allreduce_base) + STEP_COLLECTIVE_TOKENS * float(
        terms.allreduce_per_token
    )
    assert at_step == pytest.approx(layers * collective(STEP_COLLECTIVE_TOKENS), rel=1e-9)
    loaded = float(terms.allreduce_base) + 1670.0 * float(terms.allreduce_per_token)
    assert loaded == pytest.approx(layers * collective(1670.0), rel=0.25)
    one_token_slope = collective(1.0) - collective(0.0)
    assert 1670.0 * one_token_slope > 2.0 * collective(1670.0)


def test_nvlink_between_hosts_is_never_slower_than_their_nics() -> None:
    """Property: the same TP 8 replica over two 4-GPU GB200 trays costs no more per step when
    the trays share an NVLink domain than when the domain is each tray alone."""
    shared, *_ = _span_terms("nvidia-gb200", 4, 8, "a4x-highgpu-4g")
    alone, *_ = _span_terms("nvidia-gb200", 4, 8, "a4x-highgpu-4g", domain=0)
    for tokens in (1.0, 16.0, 256.0, 1024.0, 4096.0, 16384.0):
        nvlink = float(shared.allreduce_base) + tokens * float(shared.allreduce_per_token)
        nics = float(alone.allreduce_base) + tokens * float(alone.allreduce_per_token)
        assert nvlink <= nics, tokens
    assert float(shared.allreduce_per_token) < float(alone.allreduce_per_token)
