"""MaxText's one-hot embedding lookup (``spec.parallelism.iotaEmbed``, MaxText's
``use_iota_embed``, which its TPU scripts and tpu-recipes' recipes set): the lookup runs as a
[tokens, V] x [V, h] matmul and the table's gradient as another, 4 V h FLOPs a token among the
step's GEMMs on the first stage. The plan, its status and the workers' env carry it, the
launcher's literal is held to it, and the API refuses it outside MaxText (tests/e2e/
bad_input.yaml checks the CRD's CEL rule alike)."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest

from ringmaster.api import parse_manifest
from ringmaster.engine import layout_hardware as LH
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTES, SHARD_FULL
from ringmaster.engine.step_parts import _gemm_seconds, micro_batch_parts
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.training_flags import IOTA_EMBED, classify
from tests.unit.test_maxtext_memory_options import llama31, v6e_job

pytestmark = pytest.mark.unit

# at the 8,192 tokens tpu-recipes' v6e recipes train it on
LLAMA31_8B = replace(KNOWN_TRANSFORMERS["llama-3.1-8b"], sequence_length=8192)


def _v6e_hardware(iota: bool) -> LH.LayoutHardware:
    host = DEFAULT_CATALOG.host("tpu-v6e-slice", 4)
    hw = LH.layout_hardware(host, 4, DEFAULT_CATALOG, slice_axes=(4, 4, 1))
    return replace(hw, iota_embed=iota)


def _parts(iota: bool, pipeline: int = 1, model=LLAMA31_8B):
    return micro_batch_parts(
        model,
        _v6e_hardware(iota),
        micro_batch=3,
        tensor=1,
        pipeline=pipeline,
        recompute=RECOMPUTES.index("Full"),
        sharding=SHARD_FULL,
    )


def test_the_lookup_adds_two_gemms_over_the_vocabulary_to_the_step() -> None:
    on, off = _parts(True), _parts(False)
    tokens = 3.0 * LLAMA31_8B.sequence_length
    flops = 2.0 * LLAMA31_8B.vocab * LLAMA31_8B.hidden * tokens  # forward; the gradient alike
    hw = _v6e_hardware(True).with_precision("bf16")
    expected = float(_gemm_seconds(hw, flops, flops, LLAMA31_8B.hidden, tokens))
    assert float(on.gemm - off.gemm) == pytest.approx(expected, rel=1e-9)
    # nothing else moves: the lookup is GEMM work alone
    for part in ("attention", "memory_bound", "loss", "host_gap"):
        assert float(getattr(on, part)) == pytest.approx(float(getattr(off, part)), rel=1e-12)
    # 4 V h FLOPs a token at a GEMM's rate: 2-6 % of Llama 3.1 8B's 6 N
    share = float((on.gemm - off.gemm) / off.gemm)
    assert 0.02 < share < 0.06


def test_under_a_pipeline_the_lookup_sits_on_the_first_stage() -> None:
    """The lookup runs where the embedding table is: the first stage. It costs the step only
    where it makes that stage the busiest."""
    lookup = float(_parts(True).gemm - _parts(False).gemm)

    def added(layers: int, pipeline: int) -> float:
        model = replace(LLAMA31_8B, layers=layers)
        on, off = _parts(True, pipeline, model), _parts(False, pipeline, model)
        return float(on.total - off.total)

    # 3 layers on 2 stages: the first holds 2 and the lookup, the last 1 with the head and the
    # loss; the first becomes the busiest, by less than the lookup (the last was busier than a
    # bare 2 layers)
    assert 0.0 < added(3, 2) < lookup
    # 1 and 1: the lookup is lighter than the head and the loss; the last stays the busiest
    assert added(2, 2) == 0.0
    # a deep pipeline's middle stages outweigh the first with its lookup
    assert added(32, 8) == 0.0


JOB = v6e_job(
    "llama31-8b-v6e-16",
    4,
    "4x4",
    llama31("llama-3.1-8b", 32, 4096, 32, 14336),
    microBatchSize=3,
    globalBatchSize=48,
    activationRecompute="Full",
    iotaEmbed=True,
)


def _plan(iota: bool):
    doc = copy.deepcopy(JOB)
    doc["spec"]["parallelism"]["iotaEmbed"] = iota
    return plan_training(parse_manifest(doc).spec)


def test_the_plan_prices_states_and_passes_it() -> None:
    on, off = _plan(True), _plan(False)
    assert on.layout is not None and off.layout is not None
    assert on.layout.chosen.gemm_seconds > off.layout.chosen.gemm_seconds
    assert on.layout.chosen.step_seconds > off.layout.chosen.step_seconds
    status = layout_status(on.layout)
    assert status["iotaEmbed"] is True and layout_status(off.layout)["iotaEmbed"] is False
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_IOTA_EMBED"] == "true"
    assert any(n.startswith("iotaEmbed:") for n in on.prediction.notes)
    assert not any(n.startswith("iotaEmbed:") for n in off.prediction.notes)


def test_the_api_refuses_it_outside_maxtext() -> None:
    doc = copy.deepcopy(JOB)
    doc["spec"]["accelerator"] = {"type": "nvidia-h100-80gb", "perWorker": 8}
    doc["spec"]["workers"] = 2
    doc["spec"]["framework"] = {"name": "Torchtitan"}
    with pytest.raises(ValueError, match=r"use_iota_embed: set framework\.name MaxText"):
        parse_manifest(doc)
    doc["spec"]["parallelism"]["iotaEmbed"] = False
    parse_manifest(doc)  # false is every framework's default


def test_the_launchers_literal_is_held_to_the_spec() -> None:
    for literal, planned, conflicts in (
        ("true", "true", []),
        ("false", "false", []),
        ("true", "false", ["use_iota_embed"]),
        ("False", "true", ["use_iota_embed"]),
    ):
        run = classify(
            ["python3", "-m", "MaxText.train"],
            ["MaxText/configs/base.yml", f"use_iota_embed={literal}"],
            {},
            None,
            {IOTA_EMBED: planned},
        )
        assert run is not None and [c.setting for c in run.conflicts] == conflicts
        if conflicts:
            assert "set spec.parallelism.iotaEmbed" in run.conflict_message()
    assert np.isfinite(float(_parts(True).total))
