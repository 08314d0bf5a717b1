"""The host's scheduler loop (engine.serving_engines.HOST_SECONDS_PER_REQUEST): TensorRT-LLM's
PyTorch backend runs its loop over a step's requests beside the GPU's step (its overlap
scheduler), so a step takes the longer of the two. Measured on a GB200's Grace host only."""

from __future__ import annotations

from statistics import median

import pytest

from ringmaster.calibration import llm_serving as LC
from ringmaster.calibration.llm_training import training_points_for_report
from ringmaster.engine import llm_prefill_queue as Q
from ringmaster.engine import llm_step as S
from ringmaster.engine import serving_engines as SE
from ringmaster.engine.hardware import DEFAULT_CATALOG

pytestmark = pytest.mark.unit

# TensorRT-LLM pull request #10273: 45.11 ms of host_step_time at 1,536 requests a rank (GB200)
PER_REQUEST = 45.11e-3 / 1536


def _qwen3_on_gb200(n_in: float = 128.0, n_out: float = 2048.0) -> S.ServingTerms:
    acc = DEFAULT_CATALOG.accelerator("nvidia-gb200")
    constants = LC.engine_constants()
    return LC._terms(LC.MODELS["qwen3-30b-a3b"], acc, 1, "FP4", "FP8", n_in, n_out, constants)


def test_the_host_loop_is_measured_on_grace_under_tensorrt_llm_only():
    assert SE.host_seconds_per_request("TensorRT-LLM", "nvidia-gb200") == pytest.approx(PER_REQUEST)
    # an x86 host (DGX B200, H100) and the other engines' loops are not modelled
    assert SE.host_seconds_per_request("TensorRT-LLM", "nvidia-b200") == 0.0
    assert SE.host_seconds_per_request("vLLM", "nvidia-gb200") == 0.0
    assert SE.host_seconds_per_request(None, "nvidia-gb200") == 0.0  # the default engine: vLLM
    assert float(_qwen3_on_gb200().host_per_request) == pytest.approx(PER_REQUEST)


def test_a_step_is_the_longer_of_the_gpu_and_the_hosts_loop():
    terms = _qwen3_on_gb200()
    device_only = terms._replace(host_per_request=terms.host_per_request * 0.0)
    for n in (16.0, 256.0, 4096.0):
        step = float(S.step_seconds(terms, n, 0.0))
        device = float(S.step_seconds(device_only, n, 0.0))
        assert step == pytest.approx(max(device, n * PER_REQUEST), rel=1e-12)
        assert step >= device
    # a small batch: the GPU's step hides the loop; 4,096 requests: the loop is the step
    assert float(S.step_seconds(terms, 16.0, 0.0)) == float(S.step_seconds(device_only, 16.0, 0.0))
    assert float(S.step_seconds(terms, 4096.0, 0.0)) == pytest.approx(4096 * PER_REQUEST)
    # a prompt is a request of the loop too: 8,192 prompt tokens of 128 are 64 of them
    host = S.host_seconds(terms.host_per_request, 4000.0, 8192.0, 128.0)
    assert float(host) == pytest.approx((4000 + 64) * PER_REQUEST)


def test_the_chains_step_keeps_the_hosts_floor():
    terms = _qwen3_on_gb200()
    for running, tokens in ((16.0, 300.0), (3000.0, 2048.0)):
        shape = Q.step_shape(terms, running, 128.0)
        expected = S.step_seconds(terms, running, tokens, prompt_length=128.0)
        assert float(shape.at(tokens)) == pytest.approx(float(expected), rel=1e-12)
    # the second is the host's: the shape must carry it
    assert float(Q.step_shape(terms, 3000.0, 128.0).at(2048.0)) == pytest.approx(
        (3000 + 16) * PER_REQUEST
    )


def test_gb200s_one_gpu_moe_rows_come_closer_and_its_dense_rows_stay(
    monkeypatch: pytest.MonkeyPatch,
):
    """TensorRT-LLM 1.0's one-GPU MoE columns on the GB200 (Qwen3-30B-A3B, Llama 4 Scout) are
    host-bound; its dense NVFP4 columns (Llama 70B / 405B) are not, and do not move. (The MoE
    rows' median |error| 85 % without the loop, 54 % with it, since the MoE op carries its
    expert slice's GEMM shape, engine.expert_slices; 47 % with it before.)"""
    points = training_points_for_report()

    def gb200_rows() -> dict[str, dict[str, float]]:
        rows = LC.llm_serving_rows(points)
        return {
            source: {r.quantity: r.error for r in rows if r.id == source and "GB200" in r.quantity}
            for source in (LC.V1_MOE_ID, LC.V1_FP4_ID)
        }

    with_loop = gb200_rows()
    monkeypatch.setattr(SE, "HOST_SECONDS_PER_REQUEST", {})
    without = gb200_rows()
    moe_with = median(abs(e) for e in with_loop[LC.V1_MOE_ID].values())
    moe_without = median(abs(e) for e in without[LC.V1_MOE_ID].values())
    assert len(with_loop[LC.V1_MOE_ID]) == 20
    assert moe_with < 0.7 * moe_without
    assert with_loop[LC.V1_FP4_ID] == pytest.approx(without[LC.V1_FP4_ID], rel=1e-9)


def test_the_plan_says_where_the_host_loop_bounds_a_step():
    engine = SE.ENGINES["TensorRT-LLM"]
    said = SE.serving_evidence(engine, "nvidia-gb200", 1)
    assert "a step at least its host loop's 29.4 us a request (TensorRT-LLM on grace" in said
    assert "host loop" not in SE.serving_evidence(engine, "nvidia-b200", 1)
    assert "host loop" not in SE.serving_evidence(SE.ENGINES["vLLM"], "nvidia-gb200", 1)
