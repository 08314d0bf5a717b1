"""Issue 41, part 4: a TrainingJob's NCCL_* env reaches the plan: modelled ones change it, harmless
ones are listed, the others are flagged by name; a GB200 NVL72 job plans on one NVLink domain."""

from __future__ import annotations

import pytest

from ringmaster.api import load_manifests
from ringmaster.planning import plan_training, training_warnings

JOB = """
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: dp}
spec:
  workers: 1
  accelerator: {type: nvidia-h100-80gb, perWorker: 8}
  machineType: a3-megagpu-8g
  model: {parameters: 7000000000, computeSecondsPerStep: 1.0, batchSizePerAccelerator: 4}
  communication: {strategy: Ring}
  template:
    image: busybox
    env: ENV
"""

LLM = """
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: llama70b-nvl72}
spec:
  workers: WORKERS
  accelerator: {type: nvidia-gb200, perWorker: 4}
  model:
    architecture: {layers: 80, hiddenSize: 8192, attentionHeads: 64, kvHeads: 8,
                   ffnHiddenSize: 28672, ffnType: Gated, vocabSize: 32000, sequenceLength: 4096}
  parallelism: {tensor: Auto, pipeline: Auto, globalBatchSize: 288}
  template:
    image: nvcr.io/nvidia/nemo:24.07
    env: ENV
"""


def _plan(text: str, env: dict[str, str], **fields: str):  # type: ignore[no-untyped-def]
    items = ", ".join(f"{{name: {k}, value: '{v}'}}" for k, v in env.items())
    text = text.replace("ENV", f"[{items}]")
    for k, v in fields.items():
        text = text.replace(k, v)
    (m,) = load_manifests(text, source="test")
    report = plan_training(m.spec, name=m.name)
    return m.spec, report


def test_nvls_enable_0_changes_the_training_plan() -> None:
    _, on = _plan(JOB, {})
    _, off = _plan(JOB, {"NCCL_NVLS_ENABLE": "0"})
    ring_on = on.prediction.strategies["Ring"]
    ring_off = off.prediction.strategies["Ring"]
    assert (ring_on.algorithm, ring_off.algorithm) == ("NVLS", "Ring")
    assert ring_off.communication_seconds > ring_on.communication_seconds
    assert any("NCCL_NVLS_ENABLE=0" in n for n in off.prediction.notes)


def test_an_unknown_nccl_variable_is_flagged_by_name_and_debug_is_listed() -> None:
    spec, report = _plan(JOB, {"NCCL_FOO": "1", "NCCL_DEBUG": "INFO"})
    warnings = training_warnings(spec, report)
    flagged = [w for w in warnings if w.reason == "NcclSettingIgnored"]
    assert len(flagged) == 1 and "NCCL_FOO" in flagged[0].message
    assert flagged[0].field == "spec.template.env"
    assert "NCCL_DEBUG" not in flagged[0].message
    assert any("NCCL_DEBUG" in n and "no effect" in n for n in report.prediction.notes)


def test_a_bad_nccl_value_is_refused_by_name() -> None:
    from ringmaster.planning import PlanError

    with pytest.raises(PlanError, match="NCCL_NVLS_ENABLE"):
        _plan(JOB, {"NCCL_NVLS_ENABLE": "maybe"})


def test_a_gb200_nvl72_job_plans_on_its_nvlink_domain() -> None:
    _, report = _plan(LLM, {"NCCL_DEBUG": "INFO"}, WORKERS="18")
    assert report.layout is not None and report.layout.search.fits
    assert any("NVLink domain" in n for n in report.prediction.notes)
    assert report.prediction.machine_type == "a4x-highgpu-4g"
    # tensor parallelism may span the domain's hosts: the hardware's "host" is the domain
    assert report.layout.hardware.per_host == 72 and report.layout.hardware.hosts == 1
