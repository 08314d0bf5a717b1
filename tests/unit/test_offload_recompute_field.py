"""``spec.parallelism.activationRecompute: QkvProjOffloaded | MinimalOffloaded`` through the API
and ``ringmaster plan``: the CRD (CEL, offline as the apiserver) and parse_manifest accept the
same values and refuse the same misspelling; the plan reports the host bytes and the copies'
exposed time; an accelerator without a host-link figure is refused by name."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.cli import main
from ringmaster.controllers.trainingjob import status_plan
from tests.unit.test_llm_layouts import TPU, load, refusals

pytestmark = pytest.mark.unit


def llama2_70b_v6e_256(recompute: str) -> dict[str, Any]:
    """MaxText's llama2_70b_4096 on one v6e-256 (16x16 on 64 hosts of 4 chips):
    per_device_batch_size 2, FSDP over the 256 chips, sequence 4096."""
    doc = copy.deepcopy(load(TPU))
    doc["metadata"]["name"] = "llama2-70b-v6e"
    spec = doc["spec"]
    spec["workers"] = 64
    spec["accelerator"] = {"type": "tpu-v6e-slice", "perWorker": 4, "topology": "16x16"}
    spec["model"] = {
        "name": "llama2-70b",
        "architecture": {
            "layers": 80,
            "hiddenSize": 8192,
            "attentionHeads": 64,
            "kvHeads": 8,
            "ffnHiddenSize": 28672,
            "ffnType": "Gated",
            "vocabSize": 32000,
            "sequenceLength": 4096,
        },
    }
    spec["parallelism"] = {
        "tensor": 1,
        "pipeline": 1,
        "sharding": "Full",
        "microBatchSize": 2,
        "globalBatchSize": 512,
        "activationRecompute": recompute,
    }
    return doc


def plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any]):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    code = main(["plan", str(path), "-o", "json"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("recompute", ["QkvProjOffloaded", "MinimalOffloaded"])
def test_offloading_policies_pass_both(recompute):
    assert refusals(llama2_70b_v6e_256(recompute)) == ([], [])


def test_a_misspelt_offloading_policy_is_refused_by_both():
    crd, python = refusals(llama2_70b_v6e_256("QkvProjOffload"))
    assert any(path == "spec.parallelism.activationRecompute" for _, path, _ in crd), crd
    assert any(path.endswith("activationRecompute") for path, _ in python), python


def test_plan_reports_host_bytes_and_the_offload_part(tmp_path, capsys):
    code, out, err = plan_json(tmp_path, capsys, llama2_70b_v6e_256("QkvProjOffloaded"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"] is True, doc["reason"]
    assert doc["layout"]["activationRecompute"] == "QkvProjOffloaded"
    # 80 layers x 8192 tokens x (h + 2 h_kv) x 2 bytes
    expected = 80 * 8192 * (8192 + 2 * 1024) * 2
    assert doc["hostOffloadBytesPerAccelerator"] == pytest.approx(
        expected, rel=1e-5
    )  # 6 significant digits
    assert doc["stepPartsSeconds"]["activationOffload"] >= 0.0


def test_plan_of_a_policy_without_offload_reports_no_host_bytes(tmp_path, capsys):
    code, out, err = plan_json(tmp_path, capsys, llama2_70b_v6e_256("Full"))
    assert code == 0, err
    doc = json.loads(out)
    assert "hostOffloadBytesPerAccelerator" not in doc
    assert "activationOffload" not in doc["stepPartsSeconds"]


def test_plan_table_names_the_host_memory(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(llama2_70b_v6e_256("MinimalOffloaded")))
    assert main(["plan", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert "activation offload" in out and "host memory per accelerator GiB" in out


def test_an_accelerator_without_a_host_link_figure_is_refused_by_name(tmp_path, capsys):
    doc = llama2_70b_v6e_256("QkvProjOffloaded")
    doc["spec"]["accelerator"] = {"type": "tpu-v5p-slice", "perWorker": 4, "topology": "4x4x4"}
    doc["spec"]["workers"] = 16
    doc["spec"]["parallelism"]["globalBatchSize"] = 128
    code, out, err = plan_json(tmp_path, capsys, doc)
    text = out + err
    assert code != 0
    assert "QkvProjOffloaded" in text and "tpu-v5p-slice" in text and "host-link" in text


def test_status_plan_carries_the_host_bytes():
    job = parse_manifest(llama2_70b_v6e_256("QkvProjOffloaded"))
    plan = status_plan(job.spec, None, None)
    assert plan.host_offload_bytes_per_accelerator == pytest.approx(
        80 * 8192 * (8192 + 2 * 1024) * 2, rel=1e-5
    )
    assert plan.step_parts_seconds is not None and "activationOffload" in plan.step_parts_seconds
    dumped = plan.model_dump(by_alias=True, exclude_none=True)
    assert "hostOffloadBytesPerAccelerator" in dumped
