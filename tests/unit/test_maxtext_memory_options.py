"""MaxText's memory options that tpu-recipes' v6e recipes set. ``spec.parallelism.
offloadLayerInputs`` (``decoder_layer_input: offload``, its custom remat policy): a TrainingJob
that states it plans with the layer inputs in host memory (the published Llama 3.1 70B v6e-256
layout then fits). ``spec.parallelism.vocabTiling`` (``num_vocab_tiling``): the logits' memory
divides by it and the LM head runs its forward again in backward (the published Gemma 3 12B
v6e-256 layout then fits). Their status and the workers' env carry them, the plan names them,
and the API refuses them outside MaxText (tests/e2e/bad_input.yaml's rows check the CRD's CEL
rules alike)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.engine.llm_layout_names import RECOMPUTES
from ringmaster.engine.llm_memory import activation_bytes_per_layer
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.render import render_training

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def v6e_job(
    name: str, workers: int, topology: str, model: dict[str, Any], **parallelism: Any
) -> dict[str, Any]:
    """A MaxText TrainingJob on a v6e slice of ``workers`` four-chip hosts: FSDP over the slice
    (tensor, pipeline and context 1), ``parallelism`` the rest of tpu-recipes' layout."""
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "accelerator": {"type": "tpu-v6e-slice", "perWorker": 4, "topology": topology},
            "framework": {"name": "MaxText"},
            "model": model,
            "parallelism": {
                "tensor": 1,
                "pipeline": 1,
                "context": 1,
                "sharding": "Full",
                **parallelism,
            },
            "template": {"image": "maxtext:latest"},
        },
    }


def llama31(name: str, layers: int, hidden: int, heads: int, ffn: int) -> dict[str, Any]:
    """A Llama 3.1 model at tpu-recipes' 8,192 tokens (8 KV heads, its 128,256 vocabulary)."""
    return {
        "name": name,
        "architecture": {
            "layers": layers,
            "hiddenSize": hidden,
            "attentionHeads": heads,
            "kvHeads": 8,
            "ffnHiddenSize": ffn,
            "ffnType": "Gated",
            "vocabSize": 128256,
            "sequenceLength": 8192,
        },
    }


JOB = v6e_job(
    "llama31-70b-v6e-256",
    64,
    "16x16",
    llama31("llama-3.1-70b", 80, 8192, 64, 28672),
    microBatchSize=5,
    globalBatchSize=1280,
    activationRecompute="QkvProjOffloaded",
    offloadLayerInputs=True,
)


def _plan(offload: bool):
    doc = copy.deepcopy(JOB)
    doc["spec"]["parallelism"]["offloadLayerInputs"] = offload
    return plan_training(parse_manifest(doc).spec)


def test_the_published_v6e_layout_fits_with_its_layer_inputs_on_the_host() -> None:
    moved, kept = _plan(True), _plan(False)
    assert moved.layout is not None and kept.layout is not None
    assert moved.layout.search.fits and not kept.layout.search.fits
    status = layout_status(moved.layout)
    assert status["offloadLayerInputs"] is True
    assert layout_status(kept.layout)["offloadLayerInputs"] is False
    # 80 layers x (the layer input h + Q, K, V: 8,192 + 2,048) x 40,960 tokens x 2 bytes
    assert status["hostOffloadBytesPerAccelerator"] == pytest.approx(
        80 * (8192 + 8192 + 2 * 1024) * 40960 * 2, rel=1e-3
    )
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_OFFLOAD_LAYER_INPUTS"] == "true"
    text = render_training(moved)
    assert "every layer's input too" in text


def test_the_api_refuses_it_outside_maxtext() -> None:
    doc = yaml.safe_load((EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml").read_text())
    doc["spec"]["parallelism"]["offloadLayerInputs"] = True
    with pytest.raises(Exception, match="offloadLayerInputs"):
        parse_manifest(doc)
    doc["spec"]["parallelism"]["offloadLayerInputs"] = False
    parse_manifest(doc)  # false is every framework's default


GEMMA3 = v6e_job(
    "gemma3-12b-v6e-256",
    64,
    "16x16",
    {"name": "gemma-3-12b"},
    microBatchSize=1,
    globalBatchSize=256,
    activationRecompute="Full",
    vocabTiling=16,
)


def _gemma3(tiles: int | None):
    doc = copy.deepcopy(GEMMA3)
    doc["spec"]["model"]["architecture"] = {
        "layers": 48,
        "hiddenSize": 3840,
        "attentionHeads": 16,
        "kvHeads": 8,
        "headDim": 256,
        "ffnHiddenSize": 15360,
        "ffnType": "Gated",
        "vocabSize": 262208,
        "sequenceLength": 32768,
        "tiedEmbeddings": True,
        "slidingWindow": {"size": 1024, "fullAttentionEvery": 6},
    }
    if tiles is None:
        del doc["spec"]["parallelism"]["vocabTiling"]
    else:
        doc["spec"]["parallelism"]["vocabTiling"] = tiles
    return plan_training(parse_manifest(doc).spec)


def test_vocab_tiling_divides_the_logits_and_runs_the_head_again() -> None:
    tiled, whole = _gemma3(16), _gemma3(None)
    assert tiled.layout is not None and whole.layout is not None
    assert tiled.layout.search.fits and not whole.layout.search.fits
    t, w = tiled.layout.chosen, whole.layout.chosen
    # the fused loss's 4 bytes a logit, 32,768 tokens x 262,208 on each chip, now in 16 chunks;
    # under XLA the logits share one buffer with a rebuilt layer's working set (the larger peaks)
    logits = 4.0 * 32768 * 262208
    model = tiled.layout.model
    _, working = activation_bytes_per_layer(model, 1, 1, RECOMPUTES.index("Full"))
    peak_whole, peak_tiled = max(float(working), logits), max(float(working), logits / 16)
    assert w.activations_bytes - t.activations_bytes == pytest.approx(
        peak_whole - peak_tiled, rel=1e-6
    )
    # one more forward of the head: a third more of its GEMMs' FLOPs, and the loss's forward again
    head = 2.0 * 262208 * 3840 * 32768
    assert t.gemm_seconds > w.gemm_seconds and t.loss_seconds > w.loss_seconds
    extra = (t.gemm_seconds - w.gemm_seconds) * 918e12
    assert head * 0.5 < extra < head * 2.0  # at a GEMM rate between half and twice the peak
    status = layout_status(tiled.layout)
    assert status["vocabTiling"] == 16 and layout_status(whole.layout)["vocabTiling"] == 1
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_VOCAB_TILING"] == "16"
    assert any("vocabTiling 16" in n for n in tiled.prediction.notes)
