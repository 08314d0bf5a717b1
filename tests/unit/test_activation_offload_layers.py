"""``spec.parallelism.activationOffloadLayers``: Megatron-LM's CPU offloading of N layers'
activations (--cpu-offloading-num-layers). The offloaded layers leave the device but one, the
host holds them, their copies cost only what the layers' compute does not hide; Megatron-Core's
own limits (one stage, no recompute, fewer than the model's layers) are refused at the API and
kept out of the search; an accelerator without a host-link figure is refused by name."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from ringmaster.api import parse_manifest
from ringmaster.engine.activation_offload import layer_offload
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RECOMPUTE_NONE
from ringmaster.engine.llm_memory import activation_bytes_per_layer
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.training_flags import classify
from tests.unit.test_llm_layouts import AUTO, load, refusals
from tests.unit.test_recompute_layers import H100, LLAMA3_8B, evaluate_8b

pytestmark = pytest.mark.unit


def _evaluate(offload: int | None, hw=H100, pipeline: int = 1, recompute: int = RECOMPUTE_NONE):
    return evaluate_8b(recompute, offload_layers=offload, hw=hw, pipeline=pipeline)


def _stored() -> float:
    stored, _ = activation_bytes_per_layer(LLAMA3_8B, 1, 1, RECOMPUTE_NONE, fp8=False)
    return float(stored)


def test_offloaded_layers_leave_the_device_but_one_and_the_host_holds_them() -> None:
    kept, off = _evaluate(None), _evaluate(8)
    assert float(kept.memory.activations[0] - off.memory.activations[0]) == pytest.approx(
        7 * _stored(), rel=1e-9
    )
    assert float(off.host_offload_bytes[0]) == pytest.approx(8 * _stored(), rel=1e-9)
    assert bool(off.fits[0])


def test_the_copies_cost_what_the_layers_compute_does_not_hide() -> None:
    # An 8B layer's 1.1 GB crosses PCIe Gen5 twice in about 47 ms, more than its compute:
    # exposed; over a link 100x faster the compute hides it.
    fast = replace(H100, host_link_bandwidth=H100.host_link_bandwidth * 100)
    assert float(_evaluate(8, fast).activation_offload_seconds[0]) == 0.0
    none, pcie = _evaluate(None), _evaluate(8)
    exposed = float(pcie.activation_offload_seconds[0])
    assert exposed > 0.0
    assert float(pcie.compute_seconds[0]) == pytest.approx(
        float(none.compute_seconds[0]) + exposed, rel=1e-9
    )
    # Twice the layers, twice the exposed copies.
    assert float(_evaluate(16).activation_offload_seconds[0]) == pytest.approx(2 * exposed)


def test_one_layers_copies_are_twice_its_bytes_over_the_link_less_its_compute() -> None:
    host, exposed = layer_offload(4, 2e9, 100e9, 0.015)
    assert float(host) == 8e9
    assert float(exposed) == pytest.approx(4 * (2 * 2e9 / 100e9 - 0.015))


def test_megatron_cores_limits_do_not_fit() -> None:
    assert not bool(_evaluate(8, pipeline=2).fits[0])
    assert not bool(_evaluate(8, recompute=RECOMPUTE_FULL).fits[0])
    assert not bool(_evaluate(8, replace(H100, host_link_bandwidth=0.0)).fits[0])


def megatron_job(**parallelism: Any) -> dict[str, Any]:
    doc = copy.deepcopy(load(AUTO))
    doc["spec"]["framework"] = {"name": "Megatron"}
    doc["spec"]["parallelism"] = {
        "tensor": 8,
        "globalBatchSize": 128,
        "activationOffloadLayers": 20,
        **parallelism,
    }
    return doc


def test_the_api_takes_it_on_megatron_and_the_plan_runs_one_stage_without_recompute() -> None:
    assert refusals(megatron_job()) == ([], [])
    plan = plan_training(parse_manifest(megatron_job()).spec)
    assert plan.layout is not None
    chosen = plan.layout.chosen
    assert (chosen.pipeline, chosen.recompute, chosen.offload_layers) == (1, "None", 20)
    status = layout_status(plan.layout)
    assert status["activationOffloadLayers"] == 20
    assert status["hostOffloadBytesPerAccelerator"] > 0
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_ACTIVATION_OFFLOAD_LAYERS"] == "20"
    words = ["torchrun", "pretrain_gpt.py", "--cpu-offloading"]
    other = classify([*words, "--cpu-offloading-num-layers", "10"], [], env)
    assert other is not None
    assert [(c.setting, c.planned) for c in other.conflicts] == [
        ("--cpu-offloading-num-layers", "20")
    ]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"pipeline": 2}, "pipeline 1 and activationRecompute None"),
        ({"activationRecompute": "Full"}, "pipeline 1 and activationRecompute None"),
        ({"activationOffloadLayers": 80}, "fewer than model.architecture.layers"),
        ({"framework": "Torchtitan"}, "set framework.name Megatron"),
    ],
)
def test_the_api_refuses_what_megatron_core_refuses(change: dict[str, Any], words: str) -> None:
    doc = megatron_job()
    if "framework" in change:
        doc["spec"]["framework"] = {"name": change.pop("framework")}
    doc["spec"]["parallelism"].update(change)
    crd, python = refusals(doc)
    path = "spec.parallelism.activationOffloadLayers"
    assert any(p == path and words in m for _, p, m in crd), crd
    assert any(p.endswith("activationOffloadLayers") and words in m for p, m in python), python


def test_an_accelerator_without_a_host_link_figure_is_refused_by_name() -> None:
    doc = megatron_job()
    doc["spec"]["accelerator"] = {"type": "amd-mi300x", "perWorker": 8}
    with pytest.raises(ValueError, match=r"activationOffloadLayers .* no host-link bandwidth"):
        plan_training(parse_manifest(doc).spec)
