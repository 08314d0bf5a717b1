"""A training launcher's layout flags read against the plan's layout (planning.training_flags):
the examples pass the plan's variables; a literal other than the plan's, or an overlap switch the
plan does not model, is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.training_flags import EARLY_STOP, TENSOR_OVERLAP, classify

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LAYOUT = {
    "RINGMASTER_TENSOR_PARALLEL": "4",
    "RINGMASTER_PIPELINE_PARALLEL": "2",
    "RINGMASTER_CONTEXT_PARALLEL": "1",
    "RINGMASTER_MICRO_BATCH_SIZE": "1",
    "RINGMASTER_GLOBAL_BATCH_SIZE": "128",
}
TORCHRUN = "torchrun --nnodes=$PET_NNODES --nproc-per-node=8"


@pytest.mark.parametrize(
    ("name", "launcher"),
    [
        ("trainingjob-llama2-70b-auto-a100.yaml", "Megatron-LM"),
        ("trainingjob-qwen3-30b-a3b-h100.yaml", "Megatron-LM"),
        ("trainingjob-llama3-8b-fsdp-h100.yaml", "torchtitan"),
        ("trainingjob-maxtext-tpu-v5e.yaml", "MaxText"),
        ("trainingjob-maxtext-32b-multislice-v5e.yaml", "MaxText"),
    ],
)
def test_the_layout_examples_launch_what_the_plan_chose(name: str, launcher: str) -> None:
    m = parse_manifest(yaml.safe_load((EXAMPLES / name).read_text()))
    plan = plan_training(m.spec)
    assert plan.layout is not None
    planned = {e["name"]: e["value"] for e in layout_env(layout_status(plan.layout))}
    flags = classify(m.spec.template.command, m.spec.template.args, planned)
    assert flags is not None and flags.launcher == launcher
    assert (flags.conflicts, flags.not_modelled) == ((), ())


def test_megatron_literals_are_checked_through_the_scripts_variables_and_the_env() -> None:
    script = (
        f"TP=$RINGMASTER_TENSOR_PARALLEL; PP=2; {TORCHRUN} pretrain_gpt.py"
        " --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP"
        " --micro-batch-size $MB --global-batch-size 256 --context-parallel-size $UNSET"
        " --tp-comm-overlap --sequence-parallel --overlap-p2p-communication"
    )
    off = {TENSOR_OVERLAP: "false"}
    flags = classify(["bash", "-c"], [script], LAYOUT, {"MB": "2"}, off)
    assert flags is not None and flags.launcher == "Megatron-LM"
    assert [(c.setting, c.value, c.planned) for c in flags.conflicts] == [
        ("--micro-batch-size", "2", "1"),
        ("--global-batch-size", "256", "128"),
        ("--tp-comm-overlap", "(a bare switch)", "false"),
    ]
    assert "--global-batch-size 256 where the plan chose 128 (pass" in flags.conflict_message()
    assert "set spec.parallelism.tensorOverlap: true" in flags.conflict_message()
    assert [name for name, _ in flags.not_modelled] == ["--overlap-p2p-communication"]
    assert "pipeline's sends as exposed" in flags.ignored_message()
    # the spec stating the overlap: the switch agrees (and --tp-comm-overlap took no value)
    on = classify(["bash", "-c"], [script], LAYOUT, {"MB": "2"}, {TENSOR_OVERLAP: "true"})
    assert on is not None and [c.setting for c in on.conflicts] == [
        "--micro-batch-size",
        "--global-batch-size",
    ]


def test_nemo_overrides_torchtitans_spellings_and_maxtexts_fill_value() -> None:
    nemo = classify(
        ["python3", "megatron_gpt_pretraining.py"],
        [
            "model.tensor_model_parallel_size=8",
            "model.ub_tp_comm_overlap=True",
            "model.overlap_p2p_comm=false",
            "trainer.num_nodes=4",
        ],
        LAYOUT,
        None,
        {TENSOR_OVERLAP: "false"},
    )
    assert nemo is not None and nemo.launcher == "NeMo / Megatron-Bridge"
    assert [c.setting for c in nemo.conflicts] == [
        "model.tensor_model_parallel_size",
        "model.ub_tp_comm_overlap",
    ]
    assert [name for name, _ in nemo.not_modelled] == []  # overlap_p2p_comm=false
    titan = classify(
        ["bash", "-c"],
        [
            f"{TORCHRUN} -m torchtitan.train --parallelism.tensor-parallel-degree 2"
            " --parallelism.enable_async_tensor_parallel"
        ],
        LAYOUT,
        None,
        {TENSOR_OVERLAP: "true"},
    )
    assert titan is not None and [c.setting for c in titan.conflicts] == [
        "--parallelism.tensor-parallel-degree"
    ]
    assert titan.not_modelled == ()
    maxtext = classify(
        ["python3", "MaxText/train.py"],
        ["MaxText/configs/base.yml", "ici_tensor_parallelism=-1", "ici_context_parallelism=2"],
        LAYOUT,
    )
    assert maxtext is not None and [c.setting for c in maxtext.conflicts] == [
        "ici_context_parallelism"
    ]
    # MaxText's num_vocab_tiling is held to the plan's vocabTiling (RINGMASTER_VOCAB_TILING)
    tiled = {**LAYOUT, "RINGMASTER_VOCAB_TILING": "16"}
    for literal, conflicts in (("16", []), ("8", ["num_vocab_tiling"])):
        run = classify(["python3", "-m", "MaxText.train"], [f"num_vocab_tiling={literal}"], tiled)
        assert run is not None and [c.setting for c in run.conflicts] == conflicts


def test_an_unknown_launcher_is_left_alone() -> None:
    assert classify(["torchrun"], ["--nproc-per-node=8", "train.py", "--tp", "8"], LAYOUT) is None
    # a command line without a layout override is not a NeMo launch
    assert classify(["python3", "run.py"], ["trainer.max_steps=10"], LAYOUT) is None


def test_a_recompute_policy_is_read_in_the_launchers_own_words() -> None:
    layout = {**LAYOUT, "RINGMASTER_ACTIVATION_RECOMPUTE": "Full"}
    maxtext = classify(
        ["python3", "MaxText/train.py"],
        ["MaxText/configs/base.yml", "remat_policy=full"],
        layout,
    )
    assert maxtext is not None and maxtext.conflicts == ()
    # MaxText's save_dot_except_mlpwi is its own policy, not save_dot_except_mlp's
    mlpwi = classify(
        ["python3", "MaxText/train.py"],
        ["base.yml", "remat_policy=save_dot_except_mlpwi"],
        {**LAYOUT, "RINGMASTER_ACTIVATION_RECOMPUTE": "SaveDotExceptMlpwi"},
    )
    assert mlpwi is not None and mlpwi.conflicts == ()
    other = classify(
        ["python3", "MaxText/train.py"], ["base.yml", "remat_policy=save_qkv_proj"], layout
    )
    assert other is not None
    assert [(c.setting, c.value, c.planned) for c in other.conflicts] == [
        ("remat_policy", "save_qkv_proj", "Full")
    ]
    megatron = classify(
        ["bash", "-c"],
        [f"{TORCHRUN} pretrain_gpt.py --recompute-granularity selective"],
        {**LAYOUT, "RINGMASTER_ACTIVATION_RECOMPUTE": "None"},
    )
    assert megatron is not None
    assert [c.describe() for c in megatron.conflicts] == [
        "--recompute-granularity selective where the plan chose None"
        " (pass $RINGMASTER_ACTIVATION_RECOMPUTE)"
    ]


def test_torchruns_world_is_held_to_the_gangs_pods_and_accelerators() -> None:
    from ringmaster.planning.training_flags import torchrun_world

    ok = torchrun_world(
        ["torchrun"],
        ["--nproc-per-node=$PET_NPROC_PER_NODE", "--nnodes", "1:4", "train.py", "--nnodes", "9"],
        8,
        2,
    )
    assert ok == ()  # the operator's variable, an elastic range, and the program's own flags
    assert torchrun_world(["torchrun"], ["--nproc_per_node", "gpu", "train.py"], 8, 2) == ()
    bad = torchrun_world(
        ["bash", "-c"],
        ["N=4; torchrun --standalone --nproc-per-node $N --nnodes=3 -m torchtitan.train"],
        8,
        2,
    )
    assert [c.describe() for c in bad] == [
        "torchrun --nproc-per-node 4 where each worker pod has 8 accelerators"
        " (pass $PET_NPROC_PER_NODE)",
        "torchrun --nnodes 3 where the gang has 2 worker pods (pass $PET_NNODES)",
    ]
    assert torchrun_world(["python3"], ["train.py", "--nproc-per-node", "4"], 8, 2) == ()


def test_nemo_overrides_are_read_after_any_step_of_the_script() -> None:
    flags = classify(
        ["bash", "-c"],
        [
            "cd /opt/NeMo && python3 examples/nlp/megatron_gpt_pretraining.py"
            " model.pipeline_model_parallel_size=4"
        ],
        LAYOUT,
    )
    assert flags is not None and [c.setting for c in flags.conflicts] == [
        "model.pipeline_model_parallel_size"
    ]


def test_a_launcher_that_trains_in_fp8_or_fp4_says_so() -> None:
    megatron = classify(
        ["bash", "-c"], [f"{TORCHRUN} pretrain_gpt.py --bf16 --fp8-format hybrid"], LAYOUT
    )
    assert megatron is not None and megatron.precision == ("--fp8-format hybrid", "fp8")
    fp4 = classify(["bash", "-c"], [f"{TORCHRUN} pretrain_gpt.py --fp4-format e2m1"], LAYOUT)
    assert fp4 is not None and fp4.precision == ("--fp4-format e2m1", "fp4")
    titan = classify(
        ["bash", "-c"], [f"{TORCHRUN} -m torchtitan.train --model.converters=float8"], LAYOUT
    )
    assert titan is not None and titan.precision == ("--model.converters float8", "fp8")
    plain = classify(["bash", "-c"], [f"{TORCHRUN} pretrain_gpt.py --bf16"], LAYOUT)
    assert plain is not None and plain.precision is None


def test_torchtitans_recompute_early_stop_must_agree_with_spec_framework() -> None:
    """torchtitan's --activation_checkpoint.early_stop changes what Full recompute reruns: a
    literal against spec.framework.recomputeStopsEarly (the plan's step) is named with the
    setting to state; one that agrees, or a plan that assumed nothing, passes."""
    base = f"{TORCHRUN} -m torchtitan.train --activation_checkpoint.mode full"
    assumed_off = {EARLY_STOP: "false"}
    for switch in ("--activation_checkpoint.early_stop", "--activation-checkpoint.early-stop true"):
        flags = classify(["bash", "-c"], [f"{base} {switch}"], LAYOUT, None, assumed_off)
        assert flags is not None and len(flags.conflicts) == 1, switch
        message = flags.conflict_message()
        assert "where spec.framework.recomputeStopsEarly is false" in message
        assert "set spec.framework.recomputeStopsEarly: true" in message
    for switch in (
        "--activation_checkpoint.early_stop false",
        "--activation_checkpoint.no_early_stop",
    ):
        flags = classify(["bash", "-c"], [f"{base} {switch}"], LAYOUT, None, assumed_off)
        assert flags is not None and flags.conflicts == (), switch
    on = classify(
        ["bash", "-c"],
        [f"{base} --activation_checkpoint.early_stop"],
        LAYOUT,
        None,
        {EARLY_STOP: "true"},
    )
    assert on is not None and on.conflicts == ()
    unknown = classify(["bash", "-c"], [f"{base} --activation_checkpoint.early_stop"], LAYOUT)
    assert unknown is not None and unknown.conflicts == ()
