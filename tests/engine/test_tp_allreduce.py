"""The serving engines' own tensor-parallel all-reduce (engine.tp_allreduce): concave curves
fitted on AIConfigurator's measurements, used by the step per engine, NCCL's model elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from ringmaster.calibration import aiconfigurator as A
from ringmaster.engine import llm_step as S
from ringmaster.engine import tp_allreduce as T
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
MIB = 2.0**20


def test_every_engine_curve_is_the_one_its_table_gives():
    assert A.derive_engine_allreduce() == T.ENGINE_ALLREDUCE


def test_one_all_reduce_by_hand():
    floor_us, at_mib_us, exponent, prompt_gbps = T.ENGINE_ALLREDUCE[
        ("nvidia-h100-80gb", "trtllm", 8)
    ]
    seconds = T.tensor_parallel_allreduce_seconds(2 * MIB, 8, H100, "TensorRT-LLM")
    assert float(seconds) == pytest.approx((floor_us + at_mib_us * 2.0**exponent) * 1e-6)
    prompt, measured = T.engine_allreduce_seconds(
        2 * MIB, 8, "nvidia-h100-80gb", "TensorRT-LLM", prompt=True
    )
    assert bool(measured)
    assert float(prompt) == pytest.approx(floor_us * 1e-6 + 2 * MIB / (prompt_gbps * 1e9))
    # beyond the largest measured message the curve goes on at the prompt rate
    top = T.CURVE_TOP_BYTES
    beyond = T.tensor_parallel_allreduce_seconds(top + 64 * MIB, 8, H100, "TensorRT-LLM")
    at_top = T.tensor_parallel_allreduce_seconds(top, 8, H100, "TensorRT-LLM")
    assert float(beyond - at_top) == pytest.approx(64 * MIB / (prompt_gbps * 1e9))


def test_the_curve_holds_at_both_ends_where_one_decode_rate_did_not():
    """8 H100s under TensorRT-LLM, measured (AIConfigurator): 3.6 us at 16 KiB, 575 us at 128
    MiB. A floor and one rate fitted on the decode sizes was 194 % high at 128 MiB."""
    nbytes, seconds = A._allreduce_rows(A.table("nvidia-h100-80gb", "trtllm"), 8)
    predicted, _ = T.engine_allreduce_seconds(nbytes, 8, "nvidia-h100-80gb", "TensorRT-LLM")
    errors = predicted / seconds - 1.0
    assert np.max(np.abs(errors)) < 0.2
    assert np.median(np.abs(errors)) < 0.1
    # concave: the rate per byte grows with the message
    assert T.ENGINE_ALLREDUCE[("nvidia-h100-80gb", "trtllm", 8)][2] < 0.8


def test_a_larger_batch_all_reduces_each_token_for_less():
    """One message a layer carries the step's tokens, decode and prompt: on the engine's concave
    curve a token costs less in a bigger step, and the step's all-reduce equals the curve's
    per-layer message at all its tokens times the layers."""
    model = KNOWN_TRANSFORMERS["llama-3.1-70b"]
    t = S.serving_terms(
        model, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
        compute_precision="fp8", serving_engine="TensorRT-LLM",
    )  # fmt: skip
    per_token = [float(S.step_allreduce_seconds(t, n, 0.0)) / n for n in (16.0, 256.0, 2048.0)]
    assert per_token[0] > per_token[1] > per_token[2]
    one_token = S.ACTIVATION_BYTES * model.hidden
    for n, p in ((16.0, 0.0), (256.0, 0.0), (64.0, 2048.0), (0.0, 128.0), (2048.0, 8192.0)):
        message = T.tensor_parallel_allreduce_seconds((n + p) * one_token, 8, H100, "TensorRT-LLM")
        whole = float(t.allreduce_base) + float(S.step_allreduce_seconds(t, n, p))
        assert whole == pytest.approx(2.0 * model.layers * float(message), rel=1e-9)
    # NCCL's model (no engine kernel measured) stays linear in the tokens
    nccl = S.serving_terms(
        model, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
        compute_precision="fp8", serving_engine=None,
    )  # fmt: skip
    assert float(S.step_allreduce_seconds(nccl, 512.0, 100.0)) == pytest.approx(
        612.0 * float(nccl.allreduce_per_token)
    )


def test_the_closed_form_keeps_a_lower_bound_per_token():
    model = KNOWN_TRANSFORMERS["llama-3.1-70b"]
    t = S.serving_terms(
        model, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
        compute_precision="fp8", serving_engine="TensorRT-LLM",
    )  # fmt: skip
    floor = float(S.allreduce_curve_floor_per_token(t))
    assert floor > 0.0
    for n in (1.0, 64.0, 4096.0, 1e5):
        assert float(S.step_allreduce_seconds(t, n, 0.0)) / n >= floor * (1.0 - 1e-12)


def test_without_a_measured_kernel_the_step_keeps_nccls_model():
    mi300x = DEFAULT_CATALOG.accelerator("amd-mi300x")
    for acc, engine, ranks in ((mi300x, "vLLM", 8), (H100, None, 8), (H100, "vLLM", 16)):
        got = T.tensor_parallel_allreduce_seconds(MIB, ranks, acc, engine)
        assert float(got) == pytest.approx(float(T.nccl_tp_allreduce_seconds(MIB, ranks, acc)))


def test_an_array_of_tensor_degrees_mixes_measured_and_modelled():
    ranks = np.array([2.0, 8.0, 16.0])
    got = T.tensor_parallel_allreduce_seconds(MIB, ranks, H100, "vLLM")
    for i, r in enumerate(ranks):
        assert got[i] == pytest.approx(
            float(T.tensor_parallel_allreduce_seconds(MIB, r, H100, "vLLM"))
        )


def test_the_engine_is_an_input_of_the_step():
    """The same replica under two engines: different all-reduces, so different steps (a test
    that fails if the serving engine is ignored)."""
    model = KNOWN_TRANSFORMERS["llama-3.1-70b"]

    def terms(engine: str | None) -> S.ServingTerms:
        return S.serving_terms(
            model, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
            compute_precision="fp8", serving_engine=engine,
        )  # fmt: skip

    vllm, trtllm, nccl = terms("vLLM"), terms("TensorRT-LLM"), terms(None)
    assert float(trtllm.allreduce_base) < float(vllm.allreduce_base) < float(nccl.allreduce_base)
    assert float(S.step_seconds(trtllm, 256.0, 0.0)) != float(S.step_seconds(vllm, 256.0, 0.0))
    # NCCL's model has no prompt rate of its own: a prompt token costs what a decode token does
    assert float(S.step_allreduce_seconds(nccl, 0.0, 100.0)) == pytest.approx(
        float(S.step_allreduce_seconds(nccl, 100.0, 0.0))
    )


def test_a_prompt_chunk_shares_the_decode_batchs_message():
    """A prefill chunk's tokens ride the layer's one message with the decode tokens: a short
    prompt alone costs the curve at its size (a 128-token prompt at 8 H100s is 2 MiB, 35 us a
    message measured), not a chunk's bandwidth-bound rate (8 us), and a chunk added to a batch
    costs what the larger message costs more."""
    model = KNOWN_TRANSFORMERS["llama-3.1-70b"]
    t = S.serving_terms(
        model, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
        compute_precision="fp8", serving_engine="TensorRT-LLM",
    )  # fmt: skip
    layers = 2.0 * model.layers
    one_token = S.ACTIVATION_BYTES * model.hidden
    alone = float(t.allreduce_base + S.step_allreduce_seconds(t, 0.0, 128.0)) / layers
    prompt_gbps = T.ENGINE_ALLREDUCE[("nvidia-h100-80gb", "trtllm", 8)][3]
    assert alone > 3.0 * 128 * one_token / (prompt_gbps * 1e9)
    both = S.step_seconds(t, 64.0, 2048.0) - S.step_seconds(t, 64.0, 0.0)
    no_reduce = t._replace(allreduce_curve=np.zeros(()), allreduce_beyond_per_token=np.zeros(()))
    without = S.step_seconds(no_reduce, 64.0, 2048.0) - S.step_seconds(no_reduce, 64.0, 0.0)
    grown = S.step_allreduce_seconds(t, 64.0, 2048.0) - S.step_allreduce_seconds(t, 64.0, 0.0)
    assert float(both - without) == pytest.approx(float(grown))
    assert float(grown) > 0.0


def test_the_engine_kernels_beat_nccls_model_on_their_own_curves():
    """On every H100 / H200 curve at 2 and 4 GPUs the fitted engine kernel is closer than NCCL's
    LL-ring model (15-65 % median |error| there); the 0.14.0 vLLM curve checks the 0.19.0 fit."""
    checks: dict[tuple[str, int], dict[str, float]] = {}
    for label, gpus, role, errors in A.allreduce_checks():
        checks.setdefault((label, gpus), {})[role] = float(np.median(np.abs(errors)))
    for (label, gpus), by_role in checks.items():
        if label.split()[0] in ("h100_sxm", "h200_sxm") and gpus in (2, 4):
            engine = by_role.get("fitted", by_role.get("checked"))
            assert engine is not None and engine < by_role["NCCL model"], (label, gpus)
    assert any(role == "checked" for _, _, role, _ in A.allreduce_checks())


def test_the_plan_says_where_its_all_reduce_was_not_measured():
    """The engine's kernel is measured at some GPU counts only (TensorRT-LLM on the GB200 at 2
    and 4): at another count, or across hosts, the step runs NCCL's model and the evidence says
    so for the replica's own degree, not for the chip."""
    from ringmaster.engine.serving_engines import serving_engine, serving_evidence

    trt = serving_engine("TensorRT-LLM")
    at4 = serving_evidence(trt, "nvidia-gb200", 4)
    assert "its tensor-parallel all-reduce, " in at4 and "NCCL" not in at4
    at8 = serving_evidence(trt, "nvidia-gb200", 8)
    assert "no TensorRT-LLM kernel measured at 8 GPUs on nvidia-gb200" in at8
    assert "tensor-parallel all-reduce, " not in at8
    assert "all-reduce" not in serving_evidence(trt, "nvidia-gb200", 1)
    across = serving_evidence(trt, "nvidia-h100-80gb", 8, across_hosts=True)
    assert "all-reduce across hosts NCCL's" in across
    assert "tensor-parallel all-reduce, " not in across
