"""``spec.model.parameterDType``: parameters kept in bf16 with no fp32 copy (MaxText's
``weight_dtype: bfloat16``, plain PyTorch's ``model.to(torch.bfloat16)``), their gradients and
Adam's moments in bf16 with them: 8 bytes of state a parameter, not 16, and an optimizer step that
moves 14 bytes a parameter, not 28. tpu-recipes' Llama 3.1 70B on a v6e-32 ran that way; with
fp32 parameters the engine refused it."""

from __future__ import annotations

from typing import Any

import pytest

from ringmaster.api import parse_manifest
from ringmaster.calibration.llm_training import published_layout_search, training_points
from ringmaster.engine.llm_memory import PARAMETER_BYTES, optimizer_state_bytes
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.training_flags import PARAMETER_DTYPE, classify
from tests.unit.test_llm_layouts import fixed_layout_job, refusals

pytestmark = pytest.mark.unit


def _job(parameters: str | None, framework: str = "PyTorch", **model: str) -> dict[str, Any]:
    doc = fixed_layout_job(framework, recompute="Full")
    doc["spec"]["template"]["args"] = ["sleep 1"]
    if parameters is not None:
        doc["spec"]["model"]["parameterDType"] = parameters
    doc["spec"]["model"].update(model)
    return doc


def _plan(parameters: str | None):
    plan = plan_training(parse_manifest(_job(parameters)).spec)
    assert plan.layout is not None
    return plan


def test_bf16_parameters_halve_the_model_state() -> None:
    assert optimizer_state_bytes() == 12.0
    assert optimizer_state_bytes(2.0, PARAMETER_BYTES["bf16"]) == 6.0  # the parameter, 2 moments
    bf16, fp32 = _plan("bf16").layout.chosen, _plan(None).layout.chosen
    assert bf16.optimizer_bytes == pytest.approx(fp32.optimizer_bytes * 6.0 / 12.0, rel=1e-9)
    assert bf16.gradients_bytes == pytest.approx(fp32.gradients_bytes / 2.0, rel=1e-9)
    assert bf16.weights_bytes == pytest.approx(fp32.weights_bytes, rel=1e-12)
    assert bf16.activations_bytes == pytest.approx(fp32.activations_bytes, rel=1e-12)
    # the optimizer moves 14 bytes a parameter where the measured fp32 AdamW moved 28
    assert bf16.optimizer_seconds < fp32.optimizer_seconds * 0.6
    # and the data-parallel reduction half the gradients' bytes
    assert bf16.data_parallel_seconds < fp32.data_parallel_seconds


def test_tpu_recipes_70b_on_a_v6e_32_fits_only_so() -> None:
    row = next(
        r for r in training_points()["published_layouts"] if r["id"] == "maxtext-v6e-llama31-70b-32"
    )
    assert row["parameter_dtype"] == "bf16"
    assert published_layout_search(row).fits
    fp32 = published_layout_search({k: v for k, v in row.items() if k != "parameter_dtype"})
    assert not fp32.fits


def test_the_plan_states_it_and_passes_it() -> None:
    bf16, fp32 = _plan("bf16"), _plan(None)
    status = layout_status(bf16.layout)
    assert status["parameterDType"] == "bf16"
    assert status["optimizerMomentsDType"] == "bf16"  # the moments take the parameters' dtype
    assert layout_status(fp32.layout)["parameterDType"] == "fp32"
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_PARAMETER_DTYPE"] == "bf16"
    assert any(n.startswith("parameterDType bf16") for n in bf16.prediction.notes)
    assert not any(n.startswith("parameterDType") for n in fp32.prediction.notes)
    # the gradient reduction's strategies price bf16 gradients
    assert bf16.prediction.gradient_bytes == pytest.approx(
        fp32.prediction.gradient_bytes / 2.0, rel=1e-9
    )


def test_the_api_takes_it_on_maxtext_and_pytorch_with_the_rest_inherited() -> None:
    assert refusals(_job("bf16")) == ([], [])
    assert refusals(_job("bf16", gradientDType="bf16")) == ([], [])
    assert refusals(_job("fp32", "Megatron")) == ([], [])
    field = "spec.model.parameterDType"
    for doc in (
        _job("bf16", "Megatron"),  # fp32 masters beside bf16 weights
        _job("bf16", "Torchtitan"),  # FSDP2's fp32 sharded parameters
        _job("bf16", gradientDType="fp32"),  # bf16 parameters' gradients are bf16
        _job("bf16", optimizerMomentsDType="fp32"),
    ):
        crd, python = refusals(doc)
        assert [(kind, path) for kind, path, _ in crd if path == field] == [("cel", field)]
        assert field in [path for path, _ in python]


def test_maxtext_s_weight_dtype_is_held_to_it() -> None:
    words = ["python3", "-m", "MaxText.train", "MaxText/configs/base.yml"]

    def conflicts(line: list[str], stated: str) -> list[str]:
        flags = classify(line, [], {}, {}, {PARAMETER_DTYPE: stated})
        assert flags is not None
        return [f"{c.setting} {c.value}" for c in flags.conflicts]

    assert conflicts([*words, "weight_dtype=bfloat16"], "bf16") == []
    assert conflicts([*words, "weight_dtype=float32"], "fp32") == []
    assert conflicts([*words, "weight_dtype=float32"], "bf16") == ["weight_dtype float32"]
    assert conflicts([*words, "weight_dtype=bfloat16"], "fp32") == ["weight_dtype bfloat16"]
    assert conflicts(words, "bf16") == []  # left to the config file: not read
