"""What a recompute policy reruns, by framework (engine.recompute): early stop drops the FFN's
output projection where the framework's checkpoint stops once backward's saved tensors are back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.api.training_model import EARLY_STOP_FRAMEWORKS
from ringmaster.engine import llm_training as L
from ringmaster.engine import recompute as R
from ringmaster.engine.frameworks import EARLY_STOP_SETTABLE, FRAMEWORKS, framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLP,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLPWI,
    RECOMPUTE_SELECTIVE,
    RECOMPUTE_SELECTIVE_OP,
    RECOMPUTES,
    SHARD_FULL,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer
from ringmaster.planning.layouts import recompute_note

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LLAMA = KNOWN_TRANSFORMERS["llama-3.1-8b"]


def _per_layer(model: Transformer, policy: int, early: bool) -> float:
    return float(R.recompute_flops_per_token_per_layer(model, policy, stops_early=early))


def test_early_stop_drops_the_ffn_output_projection_by_hand():
    """Llama 3.1 8B (h 4,096, f 14,336, gated): Full without early stop is the layer's forward,
    2 x (attention's 41.9M + the FFN's 176.2M + the norms' 2 h weights) + the core; with it,
    2 h f less."""
    h, f = 4096, 14336
    full = _per_layer(LLAMA, RECOMPUTE_FULL, False)
    core = LLAMA.attention_flops_per_token(LLAMA.sequence_length) / LLAMA.layers
    weights = 2 * h * 4096 + 2 * h * 1024 + 3 * h * f + 2 * h
    assert full == pytest.approx(2.0 * weights + core)
    assert _per_layer(LLAMA, RECOMPUTE_FULL, True) == pytest.approx(full - 2.0 * h * f)
    for policy in (RECOMPUTE_SAVE_DOT_EXCEPT_MLP, RECOMPUTE_QKV_PROJ_OFFLOADED):
        assert _per_layer(LLAMA, policy, False) - _per_layer(LLAMA, policy, True) == (
            pytest.approx(2.0 * h * f)
        )
    # the core alone, a gated FFN's w3 under SelectiveOp, or its input projections under
    # SaveDotExceptMlpwi (which keeps the output projection's): nothing after them goes unneeded
    for policy in (
        RECOMPUTE_NONE,
        RECOMPUTE_SELECTIVE,
        RECOMPUTE_SELECTIVE_OP,
        RECOMPUTE_SAVE_DOT_EXCEPT_MLPWI,
    ):
        assert _per_layer(LLAMA, policy, True) == _per_layer(LLAMA, policy, False)


def test_a_standard_ffns_selective_op_rerun_of_w2_stops_early():
    """SelectiveOp reruns a standard FFN's w2, its output projection: early stop drops it."""
    gelu = replace(LLAMA, gated_ffn=False)
    drop = _per_layer(gelu, RECOMPUTE_SELECTIVE_OP, False) - _per_layer(
        gelu, RECOMPUTE_SELECTIVE_OP, True
    )
    assert drop == pytest.approx(2.0 * gelu.hidden * gelu.ffn_hidden)


def test_a_mixture_of_experts_reruns_its_routed_experts():
    """The weighted combine saves each routed expert's output, so early stop drops only what
    the residual add alone takes: the dense layers' and the shared experts' output projections."""
    maverick = KNOWN_TRANSFORMERS["llama-4-maverick"]
    h = maverick.hidden
    expected = (
        2.0 * h * maverick.ffn_hidden * maverick.dense_layers
        + 2.0 * h * maverick.expert_ffn_hidden * maverick.shared_experts * maverick.moe_layers
    ) / maverick.layers
    assert R.unneeded_recompute_flops_per_token(maverick) == pytest.approx(expected)
    routed = 2.0 * h * maverick.expert_ffn_hidden * maverick.active_experts
    assert R.unneeded_recompute_flops_per_token(maverick) < expected + routed / 2


def test_early_stop_never_reruns_more_and_saves_one_tensor_parallel_all_reduce():
    policies = np.arange(len(RECOMPUTES))
    early = R.recompute_flops_per_token_per_layer(LLAMA, policies, stops_early=True)
    whole = R.recompute_flops_per_token_per_layer(LLAMA, policies)
    assert np.all(early <= whole) and np.all(early >= 0.0)
    assert float(L.tensor_parallel_collectives_per_layer(RECOMPUTE_FULL)) == (
        L.TP_ALLREDUCES_PER_LAYER + L.TP_ALLREDUCES_RECOMPUTE
    )
    assert float(L.tensor_parallel_collectives_per_layer(RECOMPUTE_FULL, True)) == (
        L.TP_ALLREDUCES_PER_LAYER + L.TP_ALLREDUCES_RECOMPUTE - 1
    )
    assert float(L.tensor_parallel_collectives_per_layer(RECOMPUTE_NONE, True)) == (
        L.TP_ALLREDUCES_PER_LAYER
    )


def test_each_framework_says_what_its_checkpoint_reruns():
    stops = {name: framework(name).recompute_stops_early for name in FRAMEWORKS}
    assert stops == {
        "Megatron": False,  # reentrant CheckpointFunction: the whole forward again
        "DeepSpeed": False,
        "Torchtitan": False,  # activation_checkpoint.early_stop = False since #1580
        "MaxText": True,  # XLA keeps only what a residual needs
        "LLMFoundry": True,  # torch >= 2.1 non-reentrant checkpoint
        "PyTorch": True,
    }
    assert set(EARLY_STOP_SETTABLE) == set(EARLY_STOP_FRAMEWORKS)  # the CEL rule's twin
    assert framework("Torchtitan", recompute_stops_early=True).recompute_stops_early
    assert framework("Megatron", recompute_stops_early=False) == framework("Megatron")
    with pytest.raises(ValueError, match="early stop is a setting of"):
        framework("Megatron", recompute_stops_early=True)
    with pytest.raises(ValueError, match="early stop is a setting of"):
        framework("MaxText", recompute_stops_early=False)


def _step(profile_name: str, early: bool | None) -> float:
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    hw = L.layout_hardware(
        host,
        1,
        DEFAULT_CATALOG,
        framework=framework(profile_name, recompute_stops_early=early),
    )
    a = L.evaluate_layouts(
        LLAMA,
        hw,
        tensor=1,
        pipeline=1,
        sharding=SHARD_FULL,
        micro_batch=1,
        recompute=RECOMPUTE_FULL,
        global_batch=8,
    )
    return float(np.ravel(a.step_seconds)[0])


def test_a_step_that_stops_early_is_shorter_by_the_projection_it_skips():
    """Torchtitan with early stop on (its config) against its default: the step is shorter, by
    less than the skipped projection's share of a Full-recompute layer's GEMMs."""
    whole, early = _step("Torchtitan", None), _step("Torchtitan", True)
    assert early < whole
    assert early > 0.9 * whole


def test_the_spec_states_its_runs_setting_and_the_plan_says_what_applies():
    doc = yaml.safe_load((EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml").read_text())
    doc["spec"]["framework"] = {"name": "Torchtitan", "recomputeStopsEarly": True}
    spec = parse_manifest(doc).spec
    assert spec.framework.recompute_stops_early is True
    doc["spec"]["framework"] = {"name": "Megatron", "recomputeStopsEarly": True}
    with pytest.raises(ValueError, match="recomputeStopsEarly applies to"):
        parse_manifest(doc)
    assert "stops early" in (recompute_note(framework("MaxText"), "Full") or "")
    assert "whole forward" in (recompute_note(framework("Megatron"), "Full") or "")
    assert recompute_note(framework("Megatron"), "Selective") is None


def test_an_early_stop_leaves_the_routed_experts_grouped_gemms_whole(monkeypatch):
    """A mixture of experts' routed experts are rerun under early stop too (their output is
    saved by the weighted combine): the grouped GEMMs' backward + recompute FLOPs are the same
    with it and without; only the dense part loses the shared experts' projection."""
    from ringmaster.engine import step_parts as SP

    seen: list[float] = []
    grouped = SP._grouped_gemm_seconds

    def spy(hw, flops_fwd, flops_bwd, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(float(np.ravel(flops_bwd)[0]))
        return grouped(hw, flops_fwd, flops_bwd, *args, **kwargs)

    monkeypatch.setattr(SP, "_grouped_gemm_seconds", spy)
    maverick = KNOWN_TRANSFORMERS["llama-4-maverick"]
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8)
    parts = []
    for early in (False, True):
        hw = L.layout_hardware(
            host,
            1,
            DEFAULT_CATALOG,
            framework=framework("Torchtitan", recompute_stops_early=early),
        )
        parts.append(SP.micro_batch_parts(maverick, hw, 1, 1, 1, RECOMPUTE_FULL, expert=8))
    assert len(seen) == 2 and seen[0] == pytest.approx(seen[1])
    assert float(np.ravel(parts[1].gemm)[0]) < float(np.ravel(parts[0].gemm)[0])
