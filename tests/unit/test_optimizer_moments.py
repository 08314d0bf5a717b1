"""``spec.model.optimizerMomentsDType`` and ``gradientDType`` in an LLM layout.

Adam's moments in bf16 under Megatron-Core's precision-aware optimizer
(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16: Megatron-Bridge's
DeepSeek recipes, the DeepSeek-V3 report section 3.3.2): the optimizer state is 8 bytes a
parameter beside the fp32 master, not 12, and the optimizer step moves 20 bytes a parameter, not
28; the plan, its status and the workers' env say so, the launcher's literals are held to it, and
the API refuses it outside Megatron. The gradients in bf16 (Megatron-Core's main_grads_dtype,
torchtitan's mixed_precision_reduce) halve the gradient buffer and the data-parallel reduction's
bytes (a layout read them as fp32 before, whatever gradientDType said)."""

from __future__ import annotations

from typing import Any

import pytest

from ringmaster.api import parse_manifest
from ringmaster.engine.llm_memory import BYTES_OPTIMIZER, MOMENT_BYTES, optimizer_state_bytes
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.training_flags import classify
from tests.unit.test_llm_layouts import fixed_layout_job, refusals

pytestmark = pytest.mark.unit


def _job(
    moments: str | None, framework: str = "Megatron", gradients: str | None = None
) -> dict[str, Any]:
    doc = fixed_layout_job(framework)  # one layout, so that both plans run the same one
    if moments is not None:
        doc["spec"]["model"]["optimizerMomentsDType"] = moments
    if gradients is not None:
        doc["spec"]["model"]["gradientDType"] = gradients
    return doc


def _plan(moments: str | None, gradients: str | None = None):
    plan = plan_training(parse_manifest(_job(moments, gradients=gradients)).spec)
    assert plan.layout is not None
    return plan


def test_bf16_moments_hold_two_thirds_of_the_optimizer_state() -> None:
    assert optimizer_state_bytes(MOMENT_BYTES["fp32"]) == BYTES_OPTIMIZER == 12.0
    assert optimizer_state_bytes(MOMENT_BYTES["bf16"]) == 8.0
    bf16, fp32 = _plan("bf16").layout.chosen, _plan(None).layout.chosen
    assert bf16.optimizer_bytes == pytest.approx(fp32.optimizer_bytes * 8.0 / 12.0, rel=1e-9)
    assert bf16.total_bytes < fp32.total_bytes
    for part in ("weights_bytes", "gradients_bytes", "activations_bytes"):
        assert getattr(bf16, part) == pytest.approx(getattr(fp32, part), rel=1e-12)
    # the optimizer step moves 20 bytes a parameter where the measured AdamW moved 28
    assert bf16.optimizer_seconds < fp32.optimizer_seconds
    assert bf16.optimizer_seconds > fp32.optimizer_seconds * 20.0 / 28.0 * 0.99


def test_the_plan_states_it_and_passes_it() -> None:
    bf16, fp32 = _plan("bf16"), _plan(None)
    status = layout_status(bf16.layout)
    assert status["optimizerMomentsDType"] == "bf16"
    assert layout_status(fp32.layout)["optimizerMomentsDType"] == "fp32"
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_OPTIMIZER_MOMENTS_DTYPE"] == "bf16"
    assert any(n.startswith("optimizerMomentsDType bf16") for n in bf16.prediction.notes)
    assert not any(n.startswith("optimizerMomentsDType") for n in fp32.prediction.notes)
    # Megatron-LM's literals are held to the plan's
    words = ["torchrun", "pretrain_gpt.py", "--use-precision-aware-optimizer"]
    for literal, conflicts in (("bf16", []), ("fp32", ["--exp-avg-dtype", "--exp-avg-sq-dtype"])):
        flags = classify(
            [*words, "--exp-avg-dtype", literal, "--exp-avg-sq-dtype", literal], [], env
        )
        assert flags is not None and [c.setting for c in flags.conflicts] == conflicts


def test_the_api_takes_bf16_on_megatron_only() -> None:
    assert refusals(_job("bf16")) == ([], [])
    assert refusals(_job("fp32", "Torchtitan")) == ([], [])
    with pytest.raises(ValueError, match=r"precision-aware optimizer \(--exp-avg-dtype bf16\)"):
        parse_manifest(_job("bf16", "Torchtitan"))
    doc = _job("fp16")
    with pytest.raises(ValueError, match="optimizerMomentsDType"):
        parse_manifest(doc)


def test_bf16_gradients_halve_the_gradient_buffer_and_its_reduction() -> None:
    bf16, fp32 = _plan(None, "bf16"), _plan(None)
    b, f = bf16.layout.chosen, fp32.layout.chosen
    assert b.gradients_bytes == pytest.approx(f.gradients_bytes / 2.0, rel=1e-9)
    for part in ("weights_bytes", "optimizer_bytes", "activations_bytes"):
        assert getattr(b, part) == pytest.approx(getattr(f, part), rel=1e-12)
    # the reduction strategies' gradient bytes (ring or reduction server) are half as many
    assert bf16.prediction.gradient_bytes == pytest.approx(
        fp32.prediction.gradient_bytes / 2.0, rel=1e-9
    )
    # the reduce-scatter moves half the bytes; the weights' all-gather is unchanged
    assert b.data_parallel_seconds < f.data_parallel_seconds
    assert b.step_seconds < f.step_seconds
