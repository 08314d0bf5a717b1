"""A checkpoint that ships its routed experts in MXFP4 and the rest in BF16 (gpt-oss,
engine.checkpoint_formats): its bytes, its step's ops and what its plan says."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

import pytest

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.engine import llm_step as S
from ringmaster.engine.checkpoint_formats import (
    BF16_WEIGHT_BYTES,
    MXFP4_WEIGHT_BYTES,
    checkpoint_note,
    checkpoint_weights,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_serving import LlmServingInputs, predict_llm_serving
from ringmaster.engine.llm_serving_fit import WEIGHT_BYTES
from ringmaster.engine.moe_op import W4A16_MOE_TILE_ROWS
from ringmaster.engine.serving_engines import ENGINE_MOE
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.engine.units import GIB

pytestmark = pytest.mark.unit

GPT_OSS = KNOWN_TRANSFORMERS["gpt-oss-120b"]


def test_only_a_four_bit_precision_serves_the_checkpoint_as_it_ships():
    for precision in ("INT4", "FP4"):
        split = checkpoint_weights(GPT_OSS, WEIGHT_BYTES[precision])
        assert split.mxfp4_experts
        assert float(split.dense_bytes) == BF16_WEIGHT_BYTES
        assert float(split.expert_bytes) == MXFP4_WEIGHT_BYTES == pytest.approx(4.25 / 8)
    # 8 bits or more: a requantised checkpoint, every weight at the precision
    fp8 = checkpoint_weights(GPT_OSS, WEIGHT_BYTES["FP8"])
    assert not fp8.mxfp4_experts and float(fp8.dense_bytes) == float(fp8.expert_bytes) == 1.0
    # a model that ships uniform weights keeps them uniform at INT4
    llama = checkpoint_weights(KNOWN_TRANSFORMERS["llama-3.1-70b"], WEIGHT_BYTES["INT4"])
    assert not llama.mxfp4_experts
    assert float(llama.dense_bytes) == float(llama.expert_bytes) == WEIGHT_BYTES["INT4"]


@pytest.mark.parametrize(("name", "gib"), [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)])
def test_the_weights_a_gpu_holds_are_the_published_checkpoints(name: str, gib: float):
    """The gpt-oss model card (arXiv 2508.10925, table 1): checkpoint sizes 60.8 GiB and
    12.8 GiB; every weight at INT4's 4.125 bits would be 56.4 GiB and 10.6 GiB."""
    model = KNOWN_TRANSFORMERS[name]
    held = float(S.weights_bytes_per_accelerator(model, WEIGHT_BYTES["INT4"], 1)) / GIB
    assert held == pytest.approx(gib, rel=0.01)
    uniform = replace(model, mxfp4_experts=False)
    assert float(S.weights_bytes_per_accelerator(uniform, WEIGHT_BYTES["INT4"], 1)) / GIB < (
        0.94 * gib
    )


def _terms(model, accelerator: str, precision: str, engine: str) -> S.ServingTerms:
    acc = DEFAULT_CATALOG.accelerator(accelerator)
    compute = "bf16" if precision == "INT4" else "fp4"
    return S.serving_terms(
        model, acc, 1, acc.peak(compute), WEIGHT_BYTES[precision], 2.0, 1024.0, 1024.0,
        compute_precision=compute, serving_engine=engine,
    )  # fmt: skip


def test_the_step_streams_bf16_dense_weights_and_runs_the_engines_mxfp4_op():
    uniform = replace(GPT_OSS, mxfp4_experts=False)
    own = _terms(GPT_OSS, "nvidia-h200-141gb", "INT4", "vLLM")
    flat = _terms(uniform, "nvidia-h200-141gb", "INT4", "vLLM")
    # the dense weights at BF16's 2 bytes, not INT4's 4.125 bits; the experts at MXFP4's 4.25
    assert float(own.weights_read / flat.weights_read) == pytest.approx(
        BF16_WEIGHT_BYTES / WEIGHT_BYTES["INT4"]
    )
    per_expert = GPT_OSS.experts / GPT_OSS.active_experts
    tile = ENGINE_MOE[("nvidia-h200-141gb", "vllm", "mxfp4")][4]
    assert float(own.expert_tile_tokens) == pytest.approx(tile * per_expert)
    assert float(flat.expert_tile_tokens) == pytest.approx(W4A16_MOE_TILE_ROWS * per_expert)
    # FP4 on the B200: the dense GEMMs still BF16 (the BF16 peak, not FP4's)
    b200 = _terms(GPT_OSS, "nvidia-b200", "FP4", "TensorRT-LLM")
    b200_fp4 = _terms(replace(GPT_OSS, mxfp4_experts=False), "nvidia-b200", "FP4", "TensorRT-LLM")
    assert float(b200.prefill_gemm_per_token) > 2.0 * float(b200_fp4.prefill_gemm_per_token)


def test_the_plan_says_which_op_the_experts_run_on():
    vllm = checkpoint_note(GPT_OSS, WEIGHT_BYTES["INT4"], "vLLM", "nvidia-h200-141gb")
    assert vllm is not None and "vLLM's MXFP4 MoE op under 16-bit activations" in vllm
    trt = checkpoint_note(GPT_OSS, WEIGHT_BYTES["FP4"], "TensorRT-LLM", "nvidia-b200")
    assert trt is not None and "under MXFP8 activations, measured on nvidia-b200" in trt
    # vLLM's recipe on Blackwell: MXFP8 activations, TensorRT-LLM's op carried (the same kernels)
    vllm_b200 = checkpoint_note(GPT_OSS, WEIGHT_BYTES["FP4"], "vLLM", "nvidia-b200")
    assert vllm_b200 is not None and "under MXFP8 activations" in vllm_b200
    assert "carried from trtllm's, measured on nvidia-b200" in vllm_b200
    sglang = checkpoint_note(GPT_OSS, WEIGHT_BYTES["INT4"], "SGLang", "nvidia-h200-141gb")
    assert sglang is not None and sglang.count("extrapolated: no MXFP4 MoE op of SGLang") == 1
    assert checkpoint_note(GPT_OSS, WEIGHT_BYTES["FP8"], "vLLM", "nvidia-h200-141gb") is None
    inputs = LlmServingInputs(
        GPT_OSS, "nvidia-h200-141gb", 8, "INT4", 1024, 1024, 2.0, 0.05,
        target_requests_per_second=2, engine="vLLM",
    )  # fmt: skip
    plan = predict_llm_serving(inputs, DEFAULT_CATALOG)
    assert any(n.startswith("checkpoint as it ships: routed experts in MXFP4") for n in plan.notes)


def test_gpt_oss_runs_step_as_their_own_op_says():
    """AIConfigurator's measured gpt-oss runs (vLLM, TensorRT-LLM; H100 and H200 at INT4, B200
    at FP4): with every weight at the precision, on the engines' 16-bit MoE op at Marlin's tile
    (Hopper) or their NVFP4 op (Blackwell), the median TPOT errors were -25, -22, -16 % and
    +20, +19 %; on the checkpoint as it ships and the op each engine's gpt-oss guide runs, within
    12 % each."""
    groups: dict[tuple[str, bool], list[float]] = {}
    for r in CLR.closed_loop_runs():
        if r.model == "gpt-oss-120b" and r.precision in ("INT4", "FP4"):
            groups.setdefault((r.engine, r.gpu == "B200"), []).append(r.tpot_error)
    assert set(groups) == {(e, b) for e in ("vLLM", "TensorRT-LLM") for b in (False, True)}
    for key, errors in groups.items():
        assert len(errors) > 50 and abs(median(errors)) < 0.12, key


def test_a_training_plan_names_the_served_checkpoints_format_as_not_its_own():
    """architecture.expertWeights describes a served checkpoint: a TrainingJob that carries it
    (an architecture block copied from its endpoint) is told so, not silently planned."""
    from pathlib import Path

    import yaml

    from ringmaster.api.manifest import parse_manifest
    from ringmaster.planning import plan_training

    example = Path(__file__).resolve().parents[2] / "examples"
    doc = yaml.safe_load((example / "trainingjob-qwen3-30b-a3b-h100.yaml").read_text())
    plain = plan_training(parse_manifest(doc).spec)
    doc["spec"]["model"]["architecture"]["expertWeights"] = "MXFP4"
    marked = plan_training(parse_manifest(doc).spec)
    said = "architecture.expertWeights MXFP4 describes the served checkpoint"
    assert not any(said in n for n in plain.prediction.notes)
    assert any(said in n for n in marked.prediction.notes)


def test_what_a_replica_must_hold_is_the_checkpoint_everywhere_the_plan_asks():
    """The fit check, its refusal and the disaggregated sides' sizes count the checkpoint as it
    ships (60.7 GiB), not every weight at INT4 (56.4 GiB)."""
    from ringmaster.engine.checkpoint_formats import checkpoint_bytes
    from ringmaster.engine.llm_serving_fit import does_not_fit

    assert checkpoint_bytes(GPT_OSS, WEIGHT_BYTES["INT4"]) / GIB == pytest.approx(60.69, abs=0.01)
    a100 = DEFAULT_CATALOG.accelerator("nvidia-tesla-a100")
    said = does_not_fit(GPT_OSS, "gpt-oss-120b", "INT4", a100, DEFAULT_CATALOG, 4096, 2.0, 1, 1)
    assert said.startswith("gpt-oss-120b in INT4 needs 60.7 GiB of weights")
    # at FP8, a requantised checkpoint: every weight a byte
    assert checkpoint_bytes(GPT_OSS, 1.0) == pytest.approx(GPT_OSS.parameters)
