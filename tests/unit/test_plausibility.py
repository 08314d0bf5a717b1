"""Implausible but valid inputs: each check fires on its own, names the field, and stays quiet on
every example; `ringmaster plan` shows them under the table and in `-o json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.cli import main
from ringmaster.planning import plan_inference, plan_training
from ringmaster.planning.plausibility import (
    LARGEST_PUBLISHED_PARAMETERS,
    LONGEST_PLAUSIBLE_STEP_SECONDS,
    inference_warnings,
    training_warnings,
)

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def warnings_of(doc: dict[str, Any]) -> list[Any]:
    m = parse_manifest(doc)
    if m.kind == "TrainingJob":
        return training_warnings(m.spec, plan_training(m.spec))
    return inference_warnings(m.spec, plan_inference(m.spec))


def reasons(doc: dict[str, Any]) -> dict[str, str]:
    return {w.reason: w.field for w in warnings_of(doc)}


@pytest.mark.parametrize(
    "name", sorted(p.name for p in EXAMPLES.glob("*.yaml") if "reductionserverpool" not in p.name)
)
def test_the_examples_are_plausible(name: str) -> None:
    assert warnings_of(example(name)) == []


def test_the_issues_1e16_parameters_raise_all_three_naming_parameters() -> None:
    doc = example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["model"]["parameters"] = 10**16
    found = warnings_of(doc)
    assert {w.reason for w in found} == {
        "ImplausibleParameterCount",
        "ExceedsAcceleratorMemory",
        "ImplausibleStepTime",
    }
    assert {w.field for w in found} == {"spec.model.parameters"}
    assert all(str(w).startswith("spec.model.parameters: ") for w in found)


def test_parameters_beyond_ten_times_the_largest_published_model() -> None:
    doc = example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["model"]["parameters"] = int(LARGEST_PUBLISHED_PARAMETERS * 9)
    assert "ImplausibleParameterCount" not in reasons(doc)
    doc["spec"]["model"]["parameters"] = int(LARGEST_PUBLISHED_PARAMETERS * 11)
    assert "ImplausibleParameterCount" in reasons(doc)
    serving = example("inferenceendpoint-resnet50-int8-t4.yaml")
    serving["spec"]["model"]["parameters"] = "20T"
    assert reasons(serving) == {"ImplausibleParameterCount": "spec.model.parameters"}


def test_memory_is_judged_against_the_whole_gang_not_one_accelerator() -> None:
    # 175B parameters in fp32: 1.4 TB of weights and gradients, far beyond one 40 GB A100, but
    # the 64 A100s of the gang hold 2.56 TB: plausible (sharded, as FSDP or ZeRO-3 would).
    doc = example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["model"]["parameters"] = "175B"
    assert "ExceedsAcceleratorMemory" not in reasons(doc)
    doc["spec"]["workers"] = 2  # 16 A100s: 640 GB
    found = {w.reason: w for w in warnings_of(doc)}
    assert "ExceedsAcceleratorMemory" in found
    assert "16 of the gang" in found["ExceedsAcceleratorMemory"].message
    doc["spec"]["model"]["gradientDType"] = "bf16"  # half the bytes: 700 GB, still too much
    assert "ExceedsAcceleratorMemory" in reasons(doc)


def test_a_step_longer_than_a_day_names_the_input_behind_it() -> None:
    doc = example("trainingjob-bert-large-auto.yaml")
    # Compute-bound: the largest counts the API takes, about 50 days of an A100 per step.
    doc["spec"]["model"]["flopsPerSample"] = 10**16
    doc["spec"]["model"]["batchSizePerAccelerator"] = 65536
    assert reasons(doc)["ImplausibleStepTime"] == "spec.model.flopsPerSample"
    # Measured: the API's bound is a day of compute; with the all-reduce on top, the step is
    # longer than a day, and the measured figure is what to look at.
    del doc["spec"]["model"]["flopsPerSample"]
    doc["spec"]["model"]["computeSecondsPerStep"] = LONGEST_PLAUSIBLE_STEP_SECONDS
    assert reasons(doc)["ImplausibleStepTime"] == "spec.model.computeSecondsPerStep"
    doc["spec"]["model"]["computeSecondsPerStep"] = LONGEST_PLAUSIBLE_STEP_SECONDS * 0.9
    assert "ImplausibleStepTime" not in reasons(doc)


def plan_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str]:
    code = main(["plan", *map(str, args)])
    out, _ = capsys.readouterr()
    return code, out


def test_plan_prints_the_warnings_under_the_table_and_in_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["model"]["parameters"] = 10**16
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out = plan_cli(capsys, path)
    assert code == 0  # valid input: a plan, with warnings
    assert "warning: spec.model.parameters: 1e+16 parameters is more than" in out
    code, out = plan_cli(capsys, path, "-o", "json")
    warnings = json.loads(out)["warnings"]
    assert code == 0 and len(warnings) == 3
    assert all(set(w) == {"field", "reason", "message"} for w in warnings)
    code, out = plan_cli(capsys, EXAMPLES / "trainingjob-bert-large-auto.yaml", "-o", "json")
    assert json.loads(out)["warnings"] == []
    code, out = plan_cli(capsys, EXAMPLES / "trainingjob-bert-large-auto.yaml")
    assert "warning" not in out


def test_a_model_given_by_its_architecture_is_judged_by_the_parameters_it_implies() -> None:
    # Llama-2-70B (about 69e9 parameters from its config) on one host of 8 A100s of 40 GB: its
    # fp32 weights and gradients (about 550 GB) exceed the 320 GB of the gang.
    doc = example("trainingjob-llama2-70b-auto-a100.yaml")
    assert "parameters" not in doc["spec"]["model"]  # implied by the architecture
    assert warnings_of(doc) == []
    doc["spec"]["workers"] = 1
    doc["spec"]["accelerator"]["type"] = "nvidia-tesla-a100"
    found = {w.reason: w.field for w in warnings_of(doc)}
    assert found.get("ExceedsAcceleratorMemory") == "spec.model.architecture"


def test_the_operators_status_plans_carry_the_warnings_to_the_plausible_condition() -> None:
    """The controllers' planners put the warnings in the typed status plan, which the shared
    reporting path turns into Plausible=False and one Warning Event each."""
    import datetime as dt

    from ringmaster.api import TrainingJobStatus
    from ringmaster.controllers import inference_lifecycle, inferenceendpoint, trainingjob
    from ringmaster.controllers.reporting import Conditions, plan_warnings, report_plausibility

    doc = example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["model"]["parameters"] = 10**16
    plan = trainingjob.status_plan(parse_manifest(doc).spec, None, None)
    warnings = plan_warnings(plan)
    assert len(warnings) == 3 and all(w.startswith("spec.model.parameters: ") for w in warnings)
    assert "warnings" in plan.to_k8s()  # declared, so the apiserver keeps it in status
    status = TrainingJobStatus()
    conditions = Conditions(status, 1, dt.datetime.now(dt.UTC))
    events = report_plausibility(conditions, warnings)
    assert len(events) == 3 and all(e.type == "Warning" for e in events)
    assert conditions.get("Plausible").status == "False"

    plausible = example("trainingjob-bert-large-auto.yaml")
    assert plan_warnings(trainingjob.status_plan(parse_manifest(plausible).spec, None, None)) == []

    endpoint = example("inferenceendpoint-resnet50-int8-t4.yaml")
    endpoint["spec"]["model"]["parameters"] = 10**16
    raw = inferenceendpoint.plan(parse_manifest(endpoint).spec)
    typed = inference_lifecycle.status_plan(raw, 1, 4000.0)
    assert [w.split(":")[0] for w in plan_warnings(typed)] == ["spec.model.parameters"]


def test_a_batch_cap_far_below_the_kv_cache_that_costs_replicas_is_named() -> None:
    """The CRD defaulted maxBatchSize to 32 before it capped LLM replicas: an endpoint created
    then is held to 32 sequences without anyone choosing it, and the plan says what it costs."""
    doc = example("inferenceendpoint-llama3-70b-a100-tp4.yaml")
    assert "BatchCapBinds" not in reasons(doc)
    doc["spec"]["maxBatchSize"] = 32
    found = [w for w in warnings_of(doc) if w.reason == "BatchCapBinds"]
    assert len(found) == 1 and found[0].field == "spec.maxBatchSize"
    assert "maxBatchSize 32" in found[0].message and "without the cap" in found[0].message
    doc["spec"]["maxBatchSize"] = 256  # at or above what the engine picks: no cost, no word
    assert "BatchCapBinds" not in reasons(doc)


def test_server_flags_against_the_plan_and_serving_nccl_variables_are_named() -> None:
    doc = example("inferenceendpoint-llama3-8b-fp8-h100.yaml")
    script = doc["spec"]["template"]["args"][0]
    doc["spec"]["template"]["args"] = [
        script.replace("--max-num-seqs $RINGMASTER_MAX_NUM_SEQS", "--max-num-seqs 4096")
        + " --enforce-eager --gpu-memory-utilization 0.95"
    ]
    doc["spec"]["template"]["env"] = [
        {"name": "NCCL_P2P_DISABLE", "value": "1"},
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "NCCL_ALGO", "value": "Ring"},
    ]
    found = {w.reason: w for w in warnings_of(doc)}
    assert {r: w.field for r, w in found.items()} == {
        "ServingFlagConflicts": "spec.template.args",
        "ServingFlagIgnored": "spec.template.args",
        "NcclSettingIgnored": "spec.template.env",
    }
    assert "--max-num-seqs 4096 where the plan sized" in found["ServingFlagConflicts"].message
    ignored = found["ServingFlagIgnored"].message
    assert "--enforce-eager" in ignored and "--gpu-memory-utilization 0.95" in ignored
    # training models NCCL_ALGO; the serving step times the engine's own all-reduce kernel
    nccl = found["NcclSettingIgnored"].message
    assert "NCCL_ALGO" in nccl and "NCCL_P2P_DISABLE" in nccl and "NCCL_DEBUG" not in nccl


def test_the_operators_endpoint_plan_names_a_server_flag_it_does_not_model() -> None:
    """What `kubectl apply` of such an endpoint shows: the operator's status plan carries the
    warning, which becomes Plausible=False with a Warning Event (the shared reporting path)."""
    import datetime as dt

    from ringmaster.api import InferenceEndpointStatus
    from ringmaster.controllers import inference_lifecycle, inferenceendpoint
    from ringmaster.controllers.reporting import Conditions, plan_warnings, report_plausibility

    doc = example("inferenceendpoint-llama3-8b-fp8-h100.yaml")
    doc["spec"]["template"]["args"][0] += " --enforce-eager"
    raw = inferenceendpoint.plan(parse_manifest(doc).spec)
    warnings = plan_warnings(inference_lifecycle.status_plan(raw, 1, 4000.0))
    assert warnings == [
        "spec.template.args: vLLM flags the plan does not model, planned on the engine's"
        " defaults: --enforce-eager"
    ]
    conditions = Conditions(InferenceEndpointStatus(), 1, dt.datetime.now(dt.UTC))
    events = report_plausibility(conditions, warnings)
    assert [e.type for e in events] == ["Warning"]
    assert conditions.get("Plausible").status == "False"


def test_a_launcher_flag_against_the_plans_layout_and_an_overlap_switch_are_named() -> None:
    doc = example("trainingjob-llama2-70b-auto-a100.yaml")
    script = doc["spec"]["template"]["args"][0]
    doc["spec"]["template"]["args"] = [
        script.replace(
            "--tensor-model-parallel-size $RINGMASTER_TENSOR_PARALLEL",
            "--tensor-model-parallel-size 16",
        )
        + " --overlap-p2p-communication"
    ]
    found = {w.reason: w for w in warnings_of(doc)}
    assert {r: w.field for r, w in found.items()} == {
        "LayoutFlagConflicts": "spec.template.args",
        "LayoutFlagIgnored": "spec.template.args",
    }
    assert found["LayoutFlagConflicts"].message.startswith(
        "Megatron-LM settings of the layout set to another value than the plan's:"
        " --tensor-model-parallel-size 16 where the plan chose"
    )
    assert "--overlap-p2p-communication" in found["LayoutFlagIgnored"].message
    # the operator's status plan carries them (to Plausible=False and Warning Events)
    from ringmaster.controllers import trainingjob
    from ringmaster.controllers.reporting import plan_warnings

    carried = plan_warnings(trainingjob.status_plan(parse_manifest(doc).spec, None, None))
    assert [w.split(":")[0] for w in carried] == ["spec.template.args", "spec.template.args"]


def test_a_command_line_that_starts_another_engines_server_is_named() -> None:
    doc = example("inferenceendpoint-llama3-8b-fp8-h100.yaml")
    doc["spec"]["engine"] = "SGLang"  # the template still runs `vllm serve`
    found = warnings_of(doc)
    assert [(w.reason, w.field) for w in found] == [("ServingEngineMismatch", "spec.template.args")]
    assert "starts vLLM's server where the plan is SGLang's (spec.engine)" in found[0].message


def test_torchrun_with_fewer_processes_than_the_pods_accelerators_is_named() -> None:
    doc = example("trainingjob-bert-large-auto.yaml")
    doc["spec"]["template"]["args"][0] = "--nproc-per-node=4"
    found = warnings_of(doc)
    assert [(w.reason, w.field) for w in found] == [("LauncherWorldMismatch", "spec.template.args")]
    assert "--nproc-per-node 4 where each worker pod has 8 accelerators" in found[0].message


def test_the_engines_own_variables_that_change_how_it_runs_are_named() -> None:
    doc = example("inferenceendpoint-llama3-8b-fp8-h100.yaml")
    doc["spec"]["template"]["env"] = [
        {"name": "VLLM_USE_V1", "value": "0"},
        {"name": "VLLM_ATTENTION_BACKEND", "value": "XFORMERS"},
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
        {"name": "SGLANG_TORCH_PROFILER_DIR", "value": "/tmp"},  # not this engine's
    ]
    found = warnings_of(doc)
    assert [(w.reason, w.field) for w in found] == [("ServingEnvIgnored", "spec.template.env")]
    assert found[0].message.endswith(": VLLM_ATTENTION_BACKEND, VLLM_USE_V1")


def test_a_launcher_in_fp8_against_a_bf16_spec_is_named_and_an_fp8_spec_agrees() -> None:
    doc = example("trainingjob-qwen3-30b-a3b-h100.yaml")
    doc["spec"]["template"]["args"][0] += " --fp8-format hybrid"
    found = [w for w in warnings_of(doc) if w.reason == "PrecisionFlagConflicts"]
    assert [w.field for w in found] == ["spec.model.computePrecision"]
    assert "trains in FP8 (--fp8-format hybrid)" in found[0].message
    doc["spec"]["model"]["computePrecision"] = "fp8"
    assert "PrecisionFlagConflicts" not in reasons(doc)
