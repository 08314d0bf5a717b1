"""``spec.parallelism.offloadLayerInputs``: MaxText's ``decoder_layer_input: offload`` (its custom
remat policy, which tpu-recipes' v6e recipes set). A TrainingJob that states it plans with the
layer inputs in host memory (the published Llama 3.1 70B v6e-256 layout then fits), its status
and the workers' env carry it, the text plan names it, and the API refuses it outside MaxText
(tests/e2e/bad_input.yaml's row checks the CRD's CEL rule alike)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.render import render_training

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

JOB: dict[str, Any] = {
    "apiVersion": "ringmaster.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "llama31-70b-v6e-256"},
    "spec": {
        "workers": 64,
        "accelerator": {"type": "tpu-v6e-slice", "perWorker": 4, "topology": "16x16"},
        "framework": {"name": "MaxText"},
        "model": {
            "name": "llama-3.1-70b",
            "architecture": {
                "layers": 80,
                "hiddenSize": 8192,
                "attentionHeads": 64,
                "kvHeads": 8,
                "ffnHiddenSize": 28672,
                "ffnType": "Gated",
                "vocabSize": 128256,
                "sequenceLength": 8192,
            },
        },
        "parallelism": {
            "tensor": 1,
            "pipeline": 1,
            "context": 1,
            "sharding": "Full",
            "microBatchSize": 5,
            "globalBatchSize": 1280,
            "activationRecompute": "QkvProjOffloaded",
            "offloadLayerInputs": True,
        },
        "template": {"image": "maxtext:latest"},
    },
}


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
