"""The serving engine's flags in an InferenceEndpoint's pod template (planning.serving_flags):
each lands where the plan says, our examples are clean, and what contradicts the plan or is not
modelled is named, with its value."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.manifests.inference import serving_env
from ringmaster.planning import plan_inference
from ringmaster.planning.command_line import command_words
from ringmaster.planning.serving_flags import classify

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLANNED = {
    "RINGMASTER_TENSOR_PARALLEL": "2",
    "RINGMASTER_PIPELINE_PARALLEL": "1",
    "RINGMASTER_MAX_NUM_SEQS": "256",
    "RINGMASTER_MAX_NUM_BATCHED_TOKENS": "2048",
    "RINGMASTER_MAX_MODEL_LEN": "8192",
    "RINGMASTER_KV_CACHE_DTYPE": "fp8",
}


def vllm(flags: str) -> list[str]:
    return [f"exec vllm serve meta-llama/Llama-3.1-8B --port 8000 {flags}"]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("inferenceendpoint-*.yaml")))
def test_every_llm_example_names_its_server_and_passes_only_what_the_plan_sets(name: str):
    m = parse_manifest(yaml.safe_load((EXAMPLES / name).read_text()))
    plan = plan_inference(m.spec).to_json()
    if not plan.get("engine"):
        return  # not an LLM endpoint: no engine flags to read
    flags = classify(
        plan["engine"], m.spec.template.command, m.spec.template.args, serving_env(plan)
    )
    assert flags is not None, "the example's server is not recognised"
    assert (flags.conflicts, flags.not_modelled, flags.memory) == ((), (), None)


def test_the_plans_variables_and_equal_literals_agree_and_other_literals_conflict():
    ok = classify(
        "vLLM",
        ["sh", "-c"],
        vllm(
            "--tensor-parallel-size=${RINGMASTER_TENSOR_PARALLEL}"
            " --max-num-seqs $(RINGMASTER_MAX_NUM_SEQS)"
            " --max-num-batched-tokens 2048 --kv-cache-dtype FP8 --gpu-memory-utilization 0.90"
        ),
        PLANNED,
    )
    assert ok is not None and (ok.conflicts, ok.not_modelled, ok.memory) == ((), (), None)
    bad = classify("vLLM", ["sh", "-c"], vllm("--max-num-seqs 512 -tp 4"), PLANNED)
    assert bad is not None
    assert [(c.flag, c.value, c.planned, c.variable) for c in bad.conflicts] == [
        ("--max-num-seqs", "512", "256", "RINGMASTER_MAX_NUM_SEQS"),
        ("-tp", "4", "2", "RINGMASTER_TENSOR_PARALLEL"),
    ]
    assert "--max-num-seqs 512 where the plan sized 256 (pass $RINGMASTER_MAX_NUM_SEQS)" in (
        bad.conflict_message()
    )


def test_what_the_plan_does_not_model_is_named_with_its_value_and_the_harmless_is_not():
    flags = classify(
        "vLLM",
        ["sh", "-c"],
        vllm(
            "--enforce-eager --trust-remote-code --served-model-name x --seed 3"
            " --num-scheduler-steps 8 --enable-prefix-caching --no-enable-prefix-caching"
            " --quantization fp8 --gpu-memory-utilization 0.95"
        ),
        PLANNED,
    )
    assert flags is not None
    # a switch does not take the next flag as its value
    assert flags.not_modelled == (
        "--enforce-eager",
        "--num-scheduler-steps 8",
        "--enable-prefix-caching",
    )
    assert flags.memory == "--gpu-memory-utilization 0.95"
    message = flags.ignored_message()
    assert "--gpu-memory-utilization 0.95 (the plan sizes the KV cache on vLLM's 0.9)" in message
    assert "--seed" not in message and "--trust-remote-code" not in message


def test_each_engine_is_read_by_its_own_entrypoint_and_flag_names():
    sglang = classify(
        "SGLang",
        ["python3", "-m", "sglang.launch_server"],
        [
            "--model-path",
            "m",
            "--max-running-requests",
            "64",
            "--disable-radix-cache",
            "--mem-fraction-static",
            "0.88",
            "--enable-torch-compile",
        ],
        PLANNED,
    )
    assert sglang is not None and sglang.memory is None
    assert [c.flag for c in sglang.conflicts] == ["--max-running-requests"]
    assert sglang.not_modelled == ("--enable-torch-compile",)
    trt = classify(
        "TensorRT-LLM",
        ["trtllm-serve", "meta-llama/Llama-3.1-8B"],
        ["--max_batch_size", "256", "--max_num_tokens", "4096", "--backend", "pytorch"],
        PLANNED,
    )
    assert trt is not None
    assert [c.flag for c in trt.conflicts] == ["--max_num_tokens"]
    assert trt.not_modelled == ("--backend pytorch",)
    # another engine's server on the line is not this engine's
    assert classify("SGLang", ["sh", "-c"], vllm("--enforce-eager"), PLANNED) is None


def test_a_server_is_read_inside_a_script_to_its_end_and_an_unknown_one_is_left_alone():
    script = [
        'if [ "$RINGMASTER_NODE_RANK" = 0 ]; then ray start --head --port=6379 && exec vllm serve'
        " m --max-num-seqs $RINGMASTER_MAX_NUM_SEQS; else exec ray start --block --verbose; fi"
    ]
    words = command_words(["sh", "-c"], script)
    assert "$RINGMASTER_MAX_NUM_SEQS" in words and ";" in words
    flags = classify("vLLM", ["sh", "-c"], script, PLANNED)
    assert flags is not None and flags.not_modelled == ()  # ray's flags are not the server's
    assert classify("vLLM", ["/srv/run.sh"], ["--enforce-eager"], PLANNED) is None
    # no command: the args are the image's entrypoint's (vllm/vllm-openai's api_server)
    image = classify("vLLM", None, ["--model", "m", "--enforce-eager"], PLANNED)
    assert image is not None and image.not_modelled == ("--enforce-eager",)


def test_any_name_of_a_one_byte_fp8_cache_is_the_plans_fp8() -> None:
    flags = classify("vLLM", ["sh", "-c"], vllm("--kv-cache-dtype fp8_e4m3"), PLANNED)
    assert flags is not None and flags.conflicts == ()
    auto = classify("vLLM", ["sh", "-c"], vllm("--kv-cache-dtype auto"), PLANNED)
    assert auto is not None and [c.value for c in auto.conflicts] == ["auto"]


def test_without_the_plans_values_literals_are_not_held_to_any() -> None:
    # a disaggregated endpoint's sides run settings of their own (planning.plausibility passes
    # no values then); what the plan does not model is still named
    flags = classify("vLLM", ["sh", "-c"], vllm("--max-num-seqs 64 --enforce-eager"), {})
    assert (
        flags is not None and flags.conflicts == () and flags.not_modelled == ("--enforce-eager",)
    )
    # the plan leaves attention data parallelism out of the env where it is 1
    dp = classify("vLLM", ["sh", "-c"], vllm("--data-parallel-size 4"), PLANNED)
    assert dp is not None and [(c.value, c.planned) for c in dp.conflicts] == [("4", "1")]
