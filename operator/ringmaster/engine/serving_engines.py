"""What each LLM serving engine runs: its memory split, its scheduler's defaults, its launcher
flags, and which of the engine's constants were fitted on its own published runs.

The step (engine.llm_step) and the scheduler (engine.llm_batching) are the same for every engine;
an engine changes the inputs they are evaluated with:

- **the KV cache's share of HBM**: vLLM preallocates ``gpu_memory_utilization`` (0.9, vllm
  CacheConfig) of the device for weights, activations and cache; SGLang ``mem_fraction_static``
  (0.88 on 80 GB parts, sglang ServerArgs' default for their memory size); TensorRT-LLM gives the
  cache ``kv_cache_free_gpu_mem_fraction`` (0.9, KvCacheConfig) of what is free after the weights
  are loaded;
- **scheduler defaults** the plan starts from when the endpoint fixes none (the sizing then picks
  max-num-seqs and the token budget itself and hands them to the server through the env);
- **launcher flags** the server takes them as (README, "Serving engines");
- **evidence**: the fitted step constants (engine.llm_step) are TensorRT-LLM's (its perf-overview
  table) on the H100; an engine without fitted rows of its own carries them, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringmaster.engine.tp_allreduce import measured_allreduce

SERVING_ENGINES = ("vLLM", "SGLang", "TensorRT-LLM")
DEFAULT_SERVING_ENGINE = "vLLM"


@dataclass(frozen=True)
class ServingEngine:
    name: str
    memory_fraction: float  # of HBM for weights + cache (vLLM, SGLang)
    free_memory_fraction: float  # of HBM left after the weights, for the cache (TensorRT-LLM)
    max_num_seqs_flag: str
    budget_flag: str
    tensor_parallel_flag: str
    fitted_on_own_runs: bool  # engine.llm_step's constants fitted on this engine's published runs

    def kv_memory_fraction(self, capacity: float, weights: float) -> float:
        """The share of each accelerator's HBM for weights + cache (llm_step.serving_terms's
        ``kv_memory_fraction``): TensorRT-LLM's fraction is of the memory free after the weights,
        the others' of the whole device."""
        if self.free_memory_fraction > 0.0 and capacity > 0.0:
            return (weights + self.free_memory_fraction * (capacity - weights)) / capacity
        return self.memory_fraction


ENGINES = {
    "vLLM": ServingEngine(
        "vLLM",
        memory_fraction=0.90,
        free_memory_fraction=0.0,
        max_num_seqs_flag="--max-num-seqs",
        budget_flag="--max-num-batched-tokens",
        tensor_parallel_flag="--tensor-parallel-size",
        fitted_on_own_runs=False,
    ),
    "SGLang": ServingEngine(
        "SGLang",
        memory_fraction=0.88,
        free_memory_fraction=0.0,
        max_num_seqs_flag="--max-running-requests",
        budget_flag="--chunked-prefill-size",
        tensor_parallel_flag="--tp-size",
        fitted_on_own_runs=False,
    ),
    "TensorRT-LLM": ServingEngine(
        "TensorRT-LLM",
        memory_fraction=0.90,
        free_memory_fraction=0.90,
        max_num_seqs_flag="--max_batch_size",
        budget_flag="--max_num_tokens",
        tensor_parallel_flag="--tp_size",
        fitted_on_own_runs=True,
    ),
}

_IMAGE_HINTS = (
    ("sglang", "SGLang"),
    ("tensorrt", "TensorRT-LLM"),
    ("trtllm", "TensorRT-LLM"),
    ("tritonserver", "TensorRT-LLM"),
    ("vllm", "vLLM"),
)


def serving_engine(name: str) -> ServingEngine:
    if name not in ENGINES:
        raise ValueError(f"serving engine {name!r}: expected one of {', '.join(SERVING_ENGINES)}")
    return ENGINES[name]


def infer_serving_engine(image: str | None) -> tuple[str, str]:
    """(engine, why) for an endpoint that names none: the image's hint, else the default."""
    lowered = (image or "").lower()
    for hint, name in _IMAGE_HINTS:
        if hint in lowered:
            return name, f"from the image {image}"
    return DEFAULT_SERVING_ENGINE, "the default (spec.engine not set)"


def serving_evidence(engine: ServingEngine, accelerator: str) -> str:
    """What a serving prediction's step constants rest on, for the plan."""
    fitted = "fitted on TensorRT-LLM's published H100 / H200 runs"
    chip = (
        ""
        if accelerator in ("nvidia-h100-80gb", "nvidia-h200-141gb")
        else (f"; {accelerator} scaled by its published ratios to the H100 where they exist")
    )
    reduce = (
        f"; its tensor-parallel all-reduce {engine.name}'s own kernel measured on {accelerator}"
        " (AIConfigurator's database)"
        if measured_allreduce(accelerator, engine.name)
        else f"; its tensor-parallel all-reduce NCCL's formula (no {engine.name} kernel measured"
        f" on {accelerator})"
    )
    if engine.fitted_on_own_runs:
        return f"{engine.name}: step constants {fitted}{chip}{reduce}"
    return (
        f"extrapolated: no fitted run of {engine.name}; its step carries the constants {fitted}"
        f"{chip}{reduce}"
    )
