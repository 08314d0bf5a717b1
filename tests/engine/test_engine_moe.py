"""The serving engines' MoE layers (engine.serving_engines.ENGINE_MOE): fitted on AIConfigurator's
measured MoE ops (calibration.aic_moe), priced by the step as floor + max(stream, padded
compute) per MoE layer, and a single expert left the dense FFN it is."""

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.calibration import aic_moe as M
from ringmaster.engine import llm_serving as L
from ringmaster.engine import llm_step as S
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.serving_engines import (
    CARRIED_ENGINE_MOE,
    ENGINE_MOE,
    engine_moe,
    serving_engine,
    serving_evidence,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
QWEN3_30B = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]


def _terms(model, engine, precision="BF16", tp=1) -> S.ServingTerms:
    compute = L.COMPUTE_PRECISION[precision]
    return S.serving_terms(
        model, H100, tp, H100.peak(compute), L.WEIGHT_BYTES[precision], L.KV_BYTES["BF16"],
        1024.0, 1024.0, compute_precision=compute, serving_engine=engine,
    )  # fmt: skip


def test_the_table_is_its_fit():
    assert M.derive_engine_moe() == ENGINE_MOE
    assert len(ENGINE_MOE) >= 40


def test_every_fit_holds_on_shapes_it_did_not_see():
    checks = M.moe_checks()
    # every measured entry is checked; the carried ones are another engine's fit
    assert len(checks) == len(ENGINE_MOE) - sum(
        (key, dtype) in CARRIED_ENGINE_MOE for _, key, dtype in ENGINE_MOE
    )
    assert all(c.fitted < 0.35 and c.held_out < 0.35 for c in checks), [
        c for c in checks if c.fitted >= 0.35 or c.held_out >= 0.35
    ]
    # 15.4 % before an expert slice's shape term (engine.expert_slices), 11.0 % with it
    assert np.median([c.held_out for c in checks]) < 0.12
    assert "held out, median over" in M.render_moe_section()


def test_an_engines_moe_layer_by_hand():
    """Qwen3-30B-A3B on one H100 under vLLM, bf16: the routed experts stream at f_s of the HBM,
    their rows (padded by m0 a touched expert) run at e_m of the peak times the whole expert's
    shape term (1 / (1 + 220 / width), width the FLOP-weighted narrow side of its gate + up
    (2048 x 1536) and down (768 x 2048) GEMMs: 1152), a floor a MoE layer."""
    (floor_us, per_expert_us, f_s, e_m, m0), dtype = engine_moe("nvidia-h100-80gb", "vLLM", "bf16")
    assert dtype == "bf16"
    t = _terms(QWEN3_30B, "vLLM")
    m = QWEN3_30B
    expert = 3 * m.hidden * m.expert_ffn_hidden
    assert (m.hidden, m.expert_ffn_hidden) == (2048, 768)
    width = (2048 * 1536 + 768 * 2048) / (2048 * 1536 / 1536 + 768 * 2048 / 768)
    assert width == 1152.0
    e_m = e_m / (1.0 + 220.0 / width)
    assert float(t.expert_weights_read) == pytest.approx(
        m.moe_layers * m.experts * expert * 2.0 / (f_s * H100.memory_bandwidth)
    )
    assert float(t.expert_gemm_per_token) == pytest.approx(
        2.0 * m.moe_layers * m.active_experts * expert / (H100.peak("bf16") * e_m)
    )
    assert float(t.expert_tile_tokens) == pytest.approx(m0 * m.experts / m.active_experts)
    for n in (1.0, 16.0, 512.0):
        touched = m.experts * (1.0 - (1.0 - m.active_experts / m.experts) ** n)
        layer = max(
            touched * expert * 2.0 / (f_s * H100.memory_bandwidth),
            (n * m.active_experts + m0 * touched) * 2.0 * expert / (H100.peak("bf16") * e_m),
        )
        none = t._replace(expert_weights_read=np.zeros(()), expert_gemm_per_token=np.zeros(()))
        experts = float(S.step_seconds(t, n, 0.0) - S.step_seconds(none, n, 0.0))
        assert experts == pytest.approx(m.moe_layers * layer, rel=1e-9)
    # the floor sits in the step's fixed cost: a profiled pool (no engine table) has none of it
    assert float(t.overhead) >= m.moe_layers * (floor_us + per_expert_us * m.experts) * 1e-6


def test_the_moe_op_s_fixed_part_grows_with_the_experts_a_rank_holds():
    """TensorRT-LLM's block-FP8 op on the H100: floor + per-expert x local experts a layer. Under
    expert parallelism a rank holds 1/ep of them: DeepSeek-V3 at EP 8 pays the floor and 32
    experts' share a layer, sliced over TP 8 all 256; a measured table without the term (vLLM's
    bf16 op, 0 us an expert) keeps one floor."""
    (_, per_expert_us, *_), dtype = engine_moe("nvidia-h100-80gb", "TensorRT-LLM", "fp8")
    assert dtype == "fp8_block" and per_expert_us > 0.2
    v3 = KNOWN_TRANSFORMERS["deepseek-v3"]

    def overhead(ep: int) -> float:
        terms = S.serving_terms(
            v3, H100, 8, H100.peak("fp8"), 1.0, 1.0, 1024.0, 1024.0,
            compute_precision="fp8", serving_engine="TensorRT-LLM", expert_parallel=ep,
        )  # fmt: skip
        return float(terms.overhead)

    assert overhead(1) - overhead(8) == pytest.approx(
        v3.moe_layers * per_expert_us * (256 - 32) * 1e-6, rel=1e-9
    )
    assert engine_moe("nvidia-h100-80gb", "vLLM", "bf16")[0][1] == 0.0


def test_which_table_a_precision_reads():
    assert engine_moe("nvidia-h100-80gb", "vLLM", "fp8")[1] == "fp8_block"  # as checkpoints ship
    assert engine_moe("nvidia-b200", "TensorRT-LLM", "fp4")[1] == "fp4"
    assert engine_moe("nvidia-a100-80gb", "vLLM", "fp8") is None  # no FP8 MoE on the A100
    assert engine_moe("amd-mi300x", "vLLM", "bf16") is None
    assert engine_moe("nvidia-h100-80gb", None, "bf16") is None
    assert "MoE layers" in serving_evidence(serving_engine("SGLang"), "nvidia-h200-141gb")
    assert "MoE layers" not in serving_evidence(serving_engine("vLLM"), "amd-mi300x")


def test_padding_never_lowers_the_experts_cost_and_grows_with_the_tokens():
    t = _terms(QWEN3_30B, "vLLM")
    bare = t._replace(expert_tile_tokens=np.zeros(()))
    tokens = np.array([1.0, 4.0, 64.0, 1024.0, 16384.0])
    padded = S.expert_compute_seconds(t, tokens)
    assert np.all(padded >= S.expert_compute_seconds(bare, tokens))
    assert np.all(np.diff(padded) > 0)
    # the pad is bounded: at most m0 rows for every expert
    assert float(padded[-1] - S.expert_compute_seconds(bare, tokens)[-1]) <= float(
        t.expert_gemm_per_token * t.expert_tile_tokens
    ) * (1 + 1e-12)


def test_a_single_expert_takes_no_moe_op():
    one = replace(KNOWN_TRANSFORMERS["llama-3-8b"], experts=1, active_experts=1)
    t = _terms(one, "vLLM")
    assert float(t.expert_tile_tokens) == 0.0
