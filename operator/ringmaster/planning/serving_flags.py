"""The serving engine's command-line flags in an InferenceEndpoint's pod template, sorted into
what the plan does with them.

An LLM plan chooses some of the server's settings itself (tensor and pipeline degrees,
max-num-seqs, the token budget, the context length, the KV cache's dtype) and hands them to the
server as ``RINGMASTER_*`` variables (manifests.inference.serving_env); for everything else it
assumes the engine's defaults (engine.serving_engines: the memory split, CUDA graphs, no prefix
cache hits, no speculative decoding). A flag in the template that sets one of them otherwise makes
the server run other than the plan says, without a word. So every flag on the server's command
line lands in exactly one of:

* **planned**: a setting the plan chooses. Passing the plan's variable
  (``$RINGMASTER_MAX_NUM_SEQS``, ``${...}`` or ``$(...)``), or any ``RINGMASTER_*`` variable the
  operator sets, is what the plan expects; a literal equal to the plan's value too. A literal
  that differs is a **conflict**, named with the plan's value and the variable to pass instead;
* **described by the spec**: what a spec field already states (``--quantization`` and
  ``--dtype``: spec.precision; the expert-parallel and wide-EP switches: spec.parallelism);
* **no effect on performance**: the model's name and path, ports and hosts, logging, API keys,
  the tokenizer and chat template, tool and reasoning parsers, download and load options, seeds;
* the engine's **memory split** (vLLM's ``--gpu-memory-utilization``, SGLang's
  ``--mem-fraction-static``, TensorRT-LLM's ``--kv_cache_free_gpu_memory_fraction``): its
  default is what the plan sizes the KV cache on; another value is not modelled;
* **not modelled**: every other flag (``--enforce-eager``, prefix caching, speculative decoding,
  multi-step scheduling, another attention backend...): it may change performance and the plan
  assumes the engine's default, so it is named.

A command line whose server the module does not recognise (a custom entrypoint, a non-LLM server)
is left alone: nothing can be said about its flags. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringmaster.engine.serving_engines import ENGINES
from ringmaster.manifests.inference import (
    ATTENTION_DATA_PARALLEL_ENV,
    EXPERT_PARALLEL_ENV,
    GROUP_SIZE_ENV,
    KV_CACHE_DTYPE_ENV,
    LEADER_ADDRESS_ENV,
    MAX_MODEL_LEN_ENV,
    MAX_NUM_BATCHED_TOKENS_ENV,
    MAX_NUM_SEQS_ENV,
    NODE_RANK_ENV,
    PIPELINE_PARALLEL_ENV,
    TENSOR_PARALLEL_ENV,
)
from ringmaster.planning.command_line import (
    command_words,
    options,
    program_words,
    referenced,
    same,
)

# How each engine's server is started: the tokens that begin its command line.
ENTRYPOINTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "vLLM": (
        ("vllm", "serve"),
        ("-m", "vllm.entrypoints.openai.api_server"),
        ("-m", "vllm.entrypoints.api_server"),
    ),
    "SGLang": (("-m", "sglang.launch_server"), ("sglang", "serve")),
    "TensorRT-LLM": (("trtllm-serve", "serve"), ("trtllm-serve",)),
}

# Settings the plan chooses: flag -> the variable that carries the plan's value.
PLANNED: dict[str, dict[str, str]] = {
    "vLLM": {
        "--tensor-parallel-size": TENSOR_PARALLEL_ENV,
        "-tp": TENSOR_PARALLEL_ENV,
        "--pipeline-parallel-size": PIPELINE_PARALLEL_ENV,
        "-pp": PIPELINE_PARALLEL_ENV,
        "--data-parallel-size": ATTENTION_DATA_PARALLEL_ENV,
        "--max-num-seqs": MAX_NUM_SEQS_ENV,
        "--max-num-batched-tokens": MAX_NUM_BATCHED_TOKENS_ENV,
        "--max-model-len": MAX_MODEL_LEN_ENV,
        "--kv-cache-dtype": KV_CACHE_DTYPE_ENV,
    },
    "SGLang": {
        "--tp-size": TENSOR_PARALLEL_ENV,
        "--tp": TENSOR_PARALLEL_ENV,
        "--tensor-parallel-size": TENSOR_PARALLEL_ENV,
        "--pp-size": PIPELINE_PARALLEL_ENV,
        "--dp-size": ATTENTION_DATA_PARALLEL_ENV,
        "--ep-size": EXPERT_PARALLEL_ENV,
        "--max-running-requests": MAX_NUM_SEQS_ENV,
        "--chunked-prefill-size": MAX_NUM_BATCHED_TOKENS_ENV,
        "--context-length": MAX_MODEL_LEN_ENV,
        "--kv-cache-dtype": KV_CACHE_DTYPE_ENV,
        "--nnodes": GROUP_SIZE_ENV,
        "--node-rank": NODE_RANK_ENV,
        "--dist-init-addr": LEADER_ADDRESS_ENV,
    },
    "TensorRT-LLM": {
        "--tp_size": TENSOR_PARALLEL_ENV,
        "--pp_size": PIPELINE_PARALLEL_ENV,
        "--ep_size": EXPERT_PARALLEL_ENV,
        "--max_batch_size": MAX_NUM_SEQS_ENV,
        "--max_num_tokens": MAX_NUM_BATCHED_TOKENS_ENV,
        "--max_seq_len": MAX_MODEL_LEN_ENV,
    },
}

# What a spec field states already (its plan is that field's).
DESCRIBED: dict[str, dict[str, str]] = {
    "vLLM": {
        "--quantization": "spec.precision",
        "-q": "spec.precision",
        "--dtype": "spec.precision",
        "--enable-expert-parallel": "spec.parallelism",
        "--all2all-backend": "spec.parallelism",
        "--enable-dbo": "spec.parallelism",
        "--kv-transfer-config": "spec.disaggregation",
    },
    "SGLang": {
        "--quantization": "spec.precision",
        "--dtype": "spec.precision",
        "--enable-dp-attention": "spec.parallelism",
        "--enable-ep-moe": "spec.parallelism",
        "--moe-a2a-backend": "spec.parallelism",
        "--enable-deepep-moe": "spec.parallelism",
        "--enable-two-batch-overlap": "spec.parallelism",
        "--ep-num-redundant-experts": "spec.parallelism",
        "--disaggregation-mode": "spec.disaggregation",
        "--disaggregation-transfer-backend": "spec.disaggregation",
    },
    "TensorRT-LLM": {},
}

# No effect on the step: naming, serving the API, logging, loading, tokenizing, parsing output;
# and turning the prefix cache off, which the plan assumes already (it counts no cache hits).
NO_EFFECT: dict[str, frozenset[str]] = {
    "vLLM": frozenset(
        {
            "--no-enable-prefix-caching",
            "--model",
            "--port",
            "--host",
            "--served-model-name",
            "--tokenizer",
            "--tokenizer-mode",
            "--revision",
            "--tokenizer-revision",
            "--code-revision",
            "--trust-remote-code",
            "--download-dir",
            "--load-format",
            "--api-key",
            "--disable-log-requests",
            "--enable-log-requests",
            "--disable-log-stats",
            "--uvicorn-log-level",
            "--max-log-len",
            "--chat-template",
            "--response-role",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "--reasoning-parser",
            "--seed",
            "--distributed-executor-backend",
            "--ssl-keyfile",
            "--ssl-certfile",
            "--root-path",
            "--allowed-origins",
            "--hf-token",
            "--generation-config",
            "--disable-fastapi-docs",
        }
    ),
    "SGLang": frozenset(
        {
            "--disable-radix-cache",
            "--model-path",
            "--model",
            "--port",
            "--host",
            "--served-model-name",
            "--tokenizer-path",
            "--tokenizer-mode",
            "--revision",
            "--trust-remote-code",
            "--download-dir",
            "--load-format",
            "--api-key",
            "--log-level",
            "--log-requests",
            "--enable-metrics",
            "--chat-template",
            "--tool-call-parser",
            "--reasoning-parser",
            "--random-seed",
        }
    ),
    "TensorRT-LLM": frozenset(
        {
            "--host",
            "--port",
            "--log_level",
            "--tokenizer",
            "--trust_remote_code",
            "--reasoning_parser",
        }
    ),
}

# The engine's memory split and the flag that sets it (engine.serving_engines.ServingEngine).
MEMORY_FLAGS = {
    "vLLM": "--gpu-memory-utilization",
    "SGLang": "--mem-fraction-static",
    "TensorRT-LLM": "--kv_cache_free_gpu_memory_fraction",
}

# Flags that take no value (a switch): the token after one is not its value.
SWITCHES = frozenset(
    {
        "--trust-remote-code",
        "--trust_remote_code",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--enable-auto-tool-choice",
        "--enable-expert-parallel",
        "--enable-dbo",
        "--enable-dp-attention",
        "--enable-ep-moe",
        "--enable-deepep-moe",
        "--enable-two-batch-overlap",
        "--enable-metrics",
        "--log-requests",
        "--disable-fastapi-docs",
        "--enforce-eager",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--disable-radix-cache",
        "--disable-cuda-graph",
        "--enable-torch-compile",
        "--disable-custom-all-reduce",
    }
)


@dataclass(frozen=True)
class Conflict:
    flag: str
    value: str
    planned: str  # the plan's value
    variable: str  # the variable that carries it

    def describe(self) -> str:
        return (
            f"{self.flag} {self.value} where the plan sized {self.planned} (pass ${self.variable})"
        )


@dataclass(frozen=True)
class ServingFlags:
    """A server command line's flags by what the plan does with them."""

    engine: str
    conflicts: tuple[Conflict, ...]
    not_modelled: tuple[str, ...]  # "--flag" or "--flag value", as written
    memory: str | None  # the memory split set to a value other than the engine's default

    def ignored_message(self) -> str:
        parts = []
        if self.memory is not None:
            default = ENGINES[self.engine]
            share = default.free_memory_fraction or default.memory_fraction
            parts.append(f"{self.memory} (the plan sizes the KV cache on {self.engine}'s {share})")
        parts.extend(self.not_modelled)
        return (
            f"{self.engine} flags the plan does not model, planned on the engine's defaults: "
            + ", ".join(parts)
        )

    def conflict_message(self) -> str:
        return (
            f"{self.engine} flags that set what the plan chooses, to another value: "
            + "; ".join(c.describe() for c in self.conflicts)
        )


def _server_flags(engine: str, words: list[str], command_given: bool) -> list[str] | None:
    """The words after the engine's entrypoint up to the end of its command (None: no server of
    this engine starts here). Without a command, args alone are the image entrypoint's flags."""

    def starts(w: list[str], i: int) -> int:
        for entry in ENTRYPOINTS[engine]:
            if tuple(w[i : i + len(entry)]) == entry:
                return len(entry)
        return 0

    found = program_words(words, starts)
    if found is None and not command_given and words and words[0].startswith("--"):
        return words
    return found


# A variable the plan leaves out of the env where its value is the one it would carry.
_ABSENT_MEANS = {ATTENTION_DATA_PARALLEL_ENV: "1"}


def _agrees(variable: str, value: str, planned: str) -> bool:
    """A literal that sets what the plan set: the same number or word; for the KV cache any of
    the engines' names of a one-byte FP8 cache (fp8, fp8_e4m3, fp8_e5m2) is the plan's FP8."""
    if variable == KV_CACHE_DTYPE_ENV:
        value, planned = value.strip().lower(), planned.strip().lower()
        if value.startswith("fp8") and planned.startswith("fp8"):
            return True
    return same(value, planned)


def started_engine(command: Sequence[str] | None, args: Sequence[str] | None) -> str | None:
    """The engine whose server the command line starts (by its entrypoint), else None."""
    words = command_words(command, args)
    for engine in ENTRYPOINTS:
        if _server_flags(engine, words, True) is not None:
            return engine
    return None


def classify(
    engine: str,
    command: Sequence[str] | None,
    args: Sequence[str] | None,
    planned_env: Mapping[str, str],
) -> ServingFlags | None:
    """The flags ``engine``'s server is started with, against the plan's variables
    (``planned_env``: manifests.inference.serving_env of the plan; empty where the plan's
    settings are its sides', a disaggregated endpoint's, and literals are not held to one
    value). None where no server of ``engine`` is recognised on the command line."""
    if engine not in ENTRYPOINTS:
        return None
    flags = _server_flags(engine, command_words(command, args), command is not None)
    if flags is None:
        return None
    conflicts: list[Conflict] = []
    not_modelled: list[str] = []
    memory: str | None = None
    planned, described, harmless = PLANNED[engine], DESCRIBED[engine], NO_EFFECT[engine]
    profile = ENGINES[engine]
    default_share = profile.free_memory_fraction or profile.memory_fraction
    for name, value in options(flags, SWITCHES):
        if name in harmless or name in described:
            continue
        reference = referenced(value)
        if reference is not None and reference.startswith("RINGMASTER_"):
            continue  # the operator's own variable: the plan's value
        if name in planned:
            variable = planned[name]
            plan_value = planned_env.get(variable, _ABSENT_MEANS.get(variable))
            if not planned_env or plan_value is None:
                continue  # no value of the plan's to hold it to (a disaggregated endpoint's sides)
            if value is not None and _agrees(variable, value, plan_value):
                continue
            conflicts.append(Conflict(name, value or "", plan_value, variable))
            continue
        if name == MEMORY_FLAGS[engine]:
            if value is not None and reference is None and same(value, str(default_share)):
                continue
            memory = f"{name} {value}" if value is not None else name
            continue
        not_modelled.append(f"{name} {value}" if value is not None else name)
    return ServingFlags(engine, tuple(conflicts), tuple(not_modelled), memory)


# The engines' own environment variables, by prefix, and those of them with no effect on the
# step (logging, where the server listens, caches and config directories, usage statistics,
# timeouts): any other one may change how the engine runs (VLLM_USE_V1, VLLM_ATTENTION_BACKEND,
# SGLANG_* kernels' switches...) and is named, as a flag would be.
ENGINE_ENV_PREFIXES = {
    "vLLM": ("VLLM_",),
    "SGLang": ("SGLANG_", "SGL_"),
    "TensorRT-LLM": ("TLLM_", "TRTLLM_"),
}
ENGINE_ENV_NO_EFFECT = frozenset(
    {
        "VLLM_LOGGING_LEVEL",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGGING_PREFIX",
        "VLLM_HOST_IP",
        "VLLM_PORT",
        "VLLM_RPC_BASE_PATH",
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "VLLM_API_KEY",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_USAGE_SOURCE",
        "VLLM_ENGINE_ITERATION_TIMEOUT_S",
        "VLLM_RPC_TIMEOUT",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "SGLANG_LOG_LEVEL",
        "TLLM_LOG_LEVEL",
    }
)


def engine_env_not_modelled(engine: str, names: Sequence[str]) -> tuple[str, ...]:
    """The engine's own variables among ``names`` that may change how it runs (sorted)."""
    prefixes = ENGINE_ENV_PREFIXES.get(engine, ())
    return tuple(
        sorted(n for n in set(names) if n.startswith(prefixes) and n not in ENGINE_ENV_NO_EFFECT)
    )
