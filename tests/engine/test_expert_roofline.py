"""Serving a mixture of experts with the routed experts on a roofline of their own (issue 42):
their grouped GEMMs are kernels apart from the dense ones, each bound by its own compute or its
own weights, at the experts' own GEMM shape."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_prefill_queue as Q
from ringmaster.engine import llm_step as S
from ringmaster.engine.ceilings import H100_GEMM_HALF_DIM
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

H200 = DEFAULT_CATALOG.accelerator("nvidia-h200-141gb")
MIXTRAL = KNOWN_TRANSFORMERS["mixtral-8x7b"]
LLAMA = KNOWN_TRANSFORMERS["llama-3-8b"]


def _terms(model, tp=8, ep=1, disaggregated_decode=False):  # type: ignore[no-untyped-def]
    t = S.serving_terms(
        model, H200, tp, H200.peak("fp8"), 1.0, 1.0, 1000.0, 1000.0,
        compute_precision="fp8", expert_parallel=ep,
    )  # fmt: skip
    if disaggregated_decode:
        t = t._replace(prompt_compute=np.zeros_like(t.prompt_compute))
    return t


def test_the_expert_shape_ratio_by_hand_for_mixtral_sliced_eight_ways() -> None:
    """Mixtral's experts (14,336 wide) sliced 8 ways: gate + up (K 4096, N 3584) and down
    (K 1792, N 4096); their FLOP-weighted narrow side against the dense GEMMs' (decode_gemm_width),
    through the H100's measured FP8 half-dimension K_p = 411."""
    h, f = 4096.0, 14336.0 / 8
    up, down = (h, 2 * f), (f, h)
    flops = up[0] * up[1] + down[0] * down[1]
    width = flops / (up[0] * up[1] / min(up) + down[0] * down[1] / min(down))
    dense = float(S.decode_gemm_width(MIXTRAL, 8))
    k = H100_GEMM_HALF_DIM["fp8"]
    expected = (1 + k / dense) / (1 + k / width)
    assert float(S.expert_shape_ratio(MIXTRAL, 8, 1, "fp8")) == pytest.approx(expected)
    # whole experts (expert parallelism) are wider than slices: a higher rate
    assert float(S.expert_shape_ratio(MIXTRAL, 8, 8, "fp8")) > expected
    assert float(S.expert_shape_ratio(LLAMA, 8, 1, "fp8")) == 1.0


def test_the_expert_flops_leave_the_dense_term_at_the_shape_ratios_rate() -> None:
    t = _terms(MIXTRAL)
    ratio = float(S.expert_shape_ratio(MIXTRAL, 8, 1, "fp8"))
    routed = 2.0 * MIXTRAL.moe_layers * MIXTRAL.active_experts * MIXTRAL.expert_parameters
    dense_seconds_per_flop = float(t.gemm_per_token) / (2.0 * MIXTRAL.matmul_parameters - routed)
    expert_seconds_per_flop = float(t.expert_gemm_per_token) / routed
    assert expert_seconds_per_flop == pytest.approx(dense_seconds_per_flop / ratio)
    assert float(_terms(LLAMA).expert_gemm_per_token) == 0.0


@pytest.mark.parametrize("n", [1.0, 16.0, 256.0, 4096.0])
def test_a_step_is_the_sum_of_the_two_rooflines_by_hand(n: float) -> None:
    t = _terms(MIXTRAL)
    p = 512.0
    dense = max(n * float(t.gemm_per_token) + p * float(t.prefill_gemm_per_token),
                float(t.weights_read))  # fmt: skip
    touched = float(S.expert_fraction_read(t.expert_miss_per_token, n + p))
    experts = max((n + p) * float(t.expert_gemm_per_token),
                  float(t.expert_weights_read) * touched)  # fmt: skip
    rest = float(S.step_seconds(_no_gemms(t), n, p))
    assert float(S.step_seconds(t, n, p)) == pytest.approx(rest + dense + experts, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 8192.0), st.floats(0.0, 8192.0))
def test_two_rooflines_are_never_faster_than_one(n: float, p: float) -> None:
    """Property: the dense and the expert kernels each bound by their own limit never take less
    than one roofline over their sums (max(a, c) + max(b, d) >= max(a + b, c + d))."""
    t = _terms(MIXTRAL)
    split = float(S.step_seconds(t, n, p))
    joint_gemm = max(
        n * float(t.gemm_per_token) + p * float(t.prefill_gemm_per_token)
        + (n + p) * float(t.expert_gemm_per_token),
        float(S.weights_read_seconds(t, n + p)),
    )  # fmt: skip
    assert split - float(S.step_seconds(_no_gemms(t), n, p)) >= joint_gemm * (1 - 1e-12)


def _no_gemms(t: S.ServingTerms) -> S.ServingTerms:
    zero = np.zeros(())
    return t._replace(
        gemm_per_token=zero,
        prefill_gemm_per_token=zero,
        weights_read=zero,
        expert_weights_read=zero,
        expert_gemm_per_token=zero,
    )


@pytest.mark.parametrize("decode_side", [False, True])
def test_the_chains_step_is_the_engines_step_for_a_mixture(decode_side: bool) -> None:
    """llm_prefill_queue.StepShape keeps step_seconds' two rooflines (a decode side's prompts
    join without compute)."""
    t = _terms(MIXTRAL, disaggregated_decode=decode_side)
    for running, tokens in ((4, 300), (200, 4000), (1500, 0)):
        shape = Q.step_shape(t, running, 700.0)
        expected = S.step_seconds(t, running, tokens, prompt_length=700.0)
        assert float(shape.at(tokens)) == pytest.approx(float(expected), rel=1e-12)


def test_the_closed_form_step_solves_the_two_roofline_step() -> None:
    """The batching model's starting point bounds the step from below (it streams one token's
    experts), for a mixture as for a dense model."""
    t = _terms(MIXTRAL)
    h = 1001.0
    for lam in (0.5, 5.0, 20.0):
        tau = float(B._closed_form_step(t, np.asarray(lam), np.asarray(h)))
        n = lam * h * tau
        prompts = lam * tau * float(t.input_tokens)
        step = float(S.step_seconds(t, n, prompts, prompt_length=float(t.input_tokens)))
        assert tau <= step * (1 + 1e-9)
