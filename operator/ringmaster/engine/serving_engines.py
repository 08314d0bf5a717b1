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

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.ceilings import Ceilings
from ringmaster.engine.tp_allreduce import ENGINE_KEYS, engine_allreduce, measured_allreduce

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
    # The KV cache's dtype when nothing names one, with FP8 weights: vLLM's and SGLang's
    # --kv-cache-dtype "auto" is the model's activation dtype (vllm/config.py CacheConfig
    # .cache_dtype: "If auto, will use model data type"; sglang server_args kv_cache_dtype), a
    # 16-bit cache; trtllm-bench forces an FP8 cache with FP8 weights (tensorrt_llm/bench/build/
    # build.py: "If the quantization is NVFP4 or FP8, force the KV cache dtype to FP8").
    default_fp8_kv_cache: bool = False
    # --kv-cache-dtype's value for an FP8 (e4m3) cache: vLLM and TensorRT-LLM take "fp8",
    # SGLang only "fp8_e4m3" / "fp8_e5m2" (sglang/srt/server_args.py); "auto" is 16-bit in all.
    fp8_kv_cache_value: str = "fp8"
    # Whether a step carries the running decodes and a prompt chunk together (vLLM V1's chunked
    # prefill, TensorRT-LLM's in-flight batching), or a prompt batch runs as a forward pass of
    # its own while the decodes wait: SGLang's default (server_args.py: enable_mixed_chunk =
    # False; managers/scheduler.py, Scheduler.run_step: a new prefill batch runs alone, first,
    # and mixes with the running batch only under --enable-mixed-chunk).
    mixes_prompts_with_decodes: bool = True

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
        fp8_kv_cache_value="fp8_e4m3",
        mixes_prompts_with_decodes=False,
    ),
    "TensorRT-LLM": ServingEngine(
        "TensorRT-LLM",
        memory_fraction=0.90,
        free_memory_fraction=0.90,
        max_num_seqs_flag="--max_batch_size",
        budget_flag="--max_num_tokens",
        tensor_parallel_flag="--tp_size",
        fitted_on_own_runs=True,
        default_fp8_kv_cache=True,
    ),
}

# Each engine's FP8 GEMMs at decode batches, over its own bf16 ones on the chip: (the fraction
# of their weight-streaming rate they keep, the microseconds a call costs more), fitted on the
# weight-bound rows (M <= 64) of NVIDIA AIConfigurator's operator databases (ai-dynamo/
# aiconfigurator @ 095f58a5: vLLM 0.19.0, SGLang 0.5.10, TensorRT-LLM 1.3.0rc20; calibration.
# aiconfigurator.derive_engine_fp8_decode refits every entry, a test keeps them equal), as a
# checkpoint with static (calibrated) activation scales runs them: the collector quantises FP8
# activations dynamically, and the measured cost of computing the scale (AIConfigurator's
# compute-scale tables: TensorRT-LLM 7.3-8.7 us a call at decode batches, vLLM 0.7-1.2, SGLang 0)
# is taken off each row first (calibration.aiconfigurator.static_fp8_gemms), as AIConfigurator
# does for its fp8_static mode. What stays is the static quantising pass: 2.0-2.7 us a call more
# under TensorRT-LLM at the bf16 rate, 0-2.8 us under vLLM and SGLang at 0.72-0.95 of it. The
# serving step's weight streaming (engine.llm_step.serving_terms) is fitted on bf16 and carries
# this to FP8 weights; an engine or chip without a table (AMD parts) is charged the bf16 GEMMs'.
ENGINE_FP8_DECODE_GEMM: dict[tuple[str, str], tuple[float, float]] = {
    ("nvidia-b200", "sglang"): (0.783, 2.5),
    ("nvidia-b200", "trtllm"): (0.959, 2.7),
    ("nvidia-b200", "vllm"): (0.753, 1.5),
    ("nvidia-gb200", "sglang"): (0.791, 2.8),
    ("nvidia-gb200", "trtllm"): (1.0, 2.4),
    ("nvidia-gb200", "vllm"): (0.744, 1.3),
    ("nvidia-h100-80gb", "sglang"): (0.83, 2.7),
    ("nvidia-h100-80gb", "trtllm"): (0.982, 2.2),
    ("nvidia-h100-80gb", "vllm"): (0.952, 0.6),
    ("nvidia-h200-141gb", "sglang"): (0.72, 2.0),
    ("nvidia-h200-141gb", "trtllm"): (0.994, 2.0),
    ("nvidia-h200-141gb", "vllm"): (0.911, 0.0),
}

# The same for each engine's NVFP4 GEMMs on Blackwell (calibration.aiconfigurator
# .derive_engine_fp8_decode("fp4")): at decode batches they stream their 0.5625-byte weights at
# half the bf16 rate per byte, so an FP4 step at small batch is 1.1-1.2x faster than FP8's, not
# the 1.8x its bytes promise.
ENGINE_FP4_DECODE_GEMM: dict[tuple[str, str], tuple[float, float]] = {
    ("nvidia-b200", "sglang"): (0.522, 2.4),
    ("nvidia-b200", "trtllm"): (0.51, 7.0),
    ("nvidia-b200", "vllm"): (0.562, 3.0),
    ("nvidia-gb200", "sglang"): (0.497, 2.2),
    ("nvidia-gb200", "trtllm"): (0.526, 6.6),
    ("nvidia-gb200", "vllm"): (0.561, 2.7),
}

# TensorRT-LLM's NVFP4 GEMMs as it serves them. Its NVFP4 linear layers take their kernel from
# TensorRT-LLM's AutoTuner, which trtllm-serve and trtllm-bench run at warm-up; outside a tuning
# pass a shape the tuner never profiled runs the fallback kernel (tensorrt_llm/_torch/autotuner.py,
# AutoTuner.choose_one: runners[0], tactic -1). AIConfigurator's collector times its GEMMs outside
# one (collector/trtllm/collect_gemm.py @ 095f58a5 calls Linear.forward; its MoE collector tunes),
# so ENGINE_FP4_DECODE_GEMM's TensorRT-LLM entries are that fallback: they put an FP4 step above
# FP8's at every tensor parallelism, where the engine's measured runs have it 0.82x at TP1. These
# are fitted instead (calibration.served_fp4.fit_served_fp4_decode) on the ratio of the FP4 runs'
# TPOT to the FP8 runs' at the same tensor parallelism, lengths and clients in AIConfigurator's
# closed-loop B200 sample (calibration.closed_loop_runs): what the two steps share (attention,
# all-reduce, the host) cancels, the GEMMs' streaming (TP1) and cost a call (TP8) stay. vLLM's
# table already gives its runs' ratio (0.86 against 0.79 at TP1, within 2 % from TP2). The GB200
# carries the B200's: the same die and kernels, and no closed-loop run of its own.
SERVED_FP4_DECODE_GEMM: dict[tuple[str, str], tuple[float, float]] = {
    ("nvidia-b200", "trtllm"): (0.78, 5.3),
    ("nvidia-gb200", "trtllm"): (0.78, 5.3),
}
SERVED_FP4_FITTED_ON = "nvidia-b200"
# The same for its NVFP4 GEMMs at prompt chunks: ENGINE_GEMM_RATE's TensorRT-LLM FP4 entries come
# from that fallback kernel too. The prompt ratio is fitted (calibration.served_fp4) on the FP4 /
# FP8 TTFT ratio of the closed-loop B200 runs with 8,192-token prompts that wait for no slot:
# their first token is mostly the prompt's GEMMs (the clients' starting wave modelled with them,
# engine.llm_closed_loop), and what else it holds (attention, the request's path) is the same at
# both weights. The decode ratio stays the table's (the TPOT pairs fit the decode GEMMs'
# streaming and cost a call above).
SERVED_FP4_GEMM_RATE: dict[tuple[str, str, str], tuple[float, float]] = {
    ("nvidia-b200", "trtllm", "fp4"): (0.474, 0.754),
    ("nvidia-gb200", "trtllm", "fp4"): (0.442, 0.754),
}

# (accelerator, engine, precision) -> (decode, prompt): each engine's GEMM rate on a Blackwell
# chip, as its fraction of the chip's peak at the precision over its fraction of the H100's (FP4
# over the H100's FP8, which has no FP4 units), the median over the served shapes (narrow side
# 4,096 and up) at decode batches (M 256-1,024) and at prompt chunks (M 2,048-8,192). Fitted on
# NVIDIA AIConfigurator's operator databases (ai-dynamo/aiconfigurator @ 095f58a5: vLLM 0.19.0,
# SGLang 0.5.10, TensorRT-LLM 1.3.0rc20 on the B200, GB200 and H100; calibration.aiconfigurator
# .derive_engine_gemm_rate refits every entry, a test keeps them equal). The serving step's
# GEMM efficiency is fitted on TensorRT-LLM's H100 / H200 runs; on these chips a named engine's
# decode tokens and prompt tokens run at it times these ratios, in place of the published
# maximum-achievable-matmul ratio (engine.ceilings.PUBLISHED_MATMUL_RATIO: 1.08 for the B200's
# FP8, where every engine's table reads 0.52-0.87). Blackwell needs larger batches than Hopper
# to fill its tensor cores (the decode ratios sit below the prompt ones), and NVFP4 runs at
# 0.5-0.8 of the H100's FP8 fraction of a twice-higher peak: 1.4-1.9x the engine's own FP8 under
# TensorRT-LLM and SGLang (2.2-2.7x under vLLM 0.19.0, whose FP8 GEMMs on Blackwell reach about
# 0.6 of the others' fraction).
# The batch each ratio stands for: the geometric centres of its band (M 256-1,024 and
# 2,048-8,192). A step of ``n`` decodes runs its decode GEMMs at the decode ratio up to the first,
# at the prompt ratio from the second, between them by log n (engine.llm_step
# .decode_gemm_seconds_per_token): thousands of decodes fill Blackwell's tensor cores as a
# prompt chunk does.
ENGINE_GEMM_BAND_TOKENS = (512.0, 4096.0)
ENGINE_GEMM_RATE: dict[tuple[str, str, str], tuple[float, float]] = {
    ("nvidia-b200", "sglang", "bf16"): (0.788, 0.88),
    ("nvidia-b200", "sglang", "fp4"): (0.549, 0.804),
    ("nvidia-b200", "sglang", "fp8"): (0.711, 0.827),
    ("nvidia-b200", "trtllm", "bf16"): (0.812, 0.87),
    ("nvidia-b200", "trtllm", "fp4"): (0.474, 0.553),
    ("nvidia-b200", "trtllm", "fp8"): (0.783, 0.877),
    ("nvidia-b200", "vllm", "bf16"): (0.838, 0.866),
    ("nvidia-b200", "vllm", "fp4"): (0.561, 0.69),
    ("nvidia-b200", "vllm", "fp8"): (0.529, 0.532),
    ("nvidia-gb200", "sglang", "bf16"): (0.783, 0.868),
    ("nvidia-gb200", "sglang", "fp4"): (0.481, 0.788),
    ("nvidia-gb200", "sglang", "fp8"): (0.687, 0.813),
    ("nvidia-gb200", "trtllm", "bf16"): (0.759, 0.797),
    ("nvidia-gb200", "trtllm", "fp4"): (0.442, 0.532),
    ("nvidia-gb200", "trtllm", "fp8"): (0.716, 0.765),
    ("nvidia-gb200", "vllm", "bf16"): (0.784, 0.855),
    ("nvidia-gb200", "vllm", "fp4"): (0.516, 0.662),
    ("nvidia-gb200", "vllm", "fp8"): (0.499, 0.517),
}

# (accelerator, engine, KV-cache dtype) -> (f_kv, floor us): each engine's decode attention as
# floor + KV bytes read / (f_kv x the chip's datasheet HBM), fitted on AIConfigurator's measured
# tables (calibration.aiconfigurator.derive_engine_decode_attention refits every entry; a test
# keeps them equal). The serving step reads the KV cache at f_kv of the chip's own HBM (its floor
# sits in the step's fixed cost); an engine or chip without a table reads at the H100's measured
# FlashAttention fraction (engine.ceilings.H100_DECODE_ATTENTION).
ENGINE_DECODE_ATTENTION: dict[tuple[str, str, str], tuple[float, float]] = {
    ("nvidia-a100-80gb", "sglang", "bf16"): (0.455, 20.0),
    ("nvidia-a100-80gb", "trtllm", "bf16"): (0.875, 18.2),
    ("nvidia-a100-80gb", "vllm", "bf16"): (0.74, 20.0),
    ("nvidia-b200", "sglang", "bf16"): (0.94, 8.4),
    ("nvidia-b200", "sglang", "fp8"): (0.945, 8.4),
    ("nvidia-b200", "trtllm", "bf16"): (0.915, 11.2),
    ("nvidia-b200", "trtllm", "fp8"): (0.89, 11.2),
    ("nvidia-b200", "vllm", "bf16"): (0.96, 7.6),
    ("nvidia-b200", "vllm", "fp8"): (0.955, 7.9),
    ("nvidia-gb200", "sglang", "bf16"): (0.995, 9.6),
    ("nvidia-gb200", "sglang", "fp8"): (0.99, 9.5),
    ("nvidia-gb200", "trtllm", "bf16"): (0.94, 11.6),
    ("nvidia-gb200", "trtllm", "fp8"): (0.935, 12.1),
    ("nvidia-gb200", "vllm", "bf16"): (0.9, 8.0),
    ("nvidia-gb200", "vllm", "fp8"): (1.0, 8.3),
    ("nvidia-h100-80gb", "sglang", "bf16"): (0.905, 11.8),
    ("nvidia-h100-80gb", "sglang", "fp8"): (0.815, 12.3),
    ("nvidia-h100-80gb", "trtllm", "bf16"): (0.83, 13.1),
    ("nvidia-h100-80gb", "trtllm", "fp8"): (0.86, 8.7),
    ("nvidia-h100-80gb", "vllm", "bf16"): (0.9, 10.4),
    ("nvidia-h100-80gb", "vllm", "fp8"): (0.75, 11.2),
    ("nvidia-h200-141gb", "sglang", "bf16"): (0.885, 12.5),
    ("nvidia-h200-141gb", "sglang", "fp8"): (0.67, 12.7),
    ("nvidia-h200-141gb", "trtllm", "bf16"): (0.76, 14.3),
    ("nvidia-h200-141gb", "trtllm", "fp8"): (0.785, 9.2),
    ("nvidia-h200-141gb", "vllm", "bf16"): (0.785, 12.5),
    ("nvidia-h200-141gb", "vllm", "fp8"): (0.53, 14.1),
}


# (accelerator, engine, MoE weight dtype) -> (floor us, per-expert us, f_s, e_m, m0): the engine's
# fused MoE op for one layer's routed experts (router top-k, permutation, grouped GEMMs, weighted
# sum) as floor + per-expert x the experts the rank holds + max(touched experts' weights / (f_s x
# HBM), (tokens x k + m0 x touched experts) rows' FLOPs / (e_m x shape x peak)): each touched
# expert's rows padded by an M tile of m0, shape the expert slice's (engine.expert_slices), fitted
# on AIConfigurator's measured MoE tables
# (calibration.aic_moe.derive_engine_moe refits every entry; a test keeps them equal). Without it
# a MoE layer streamed its experts at the dense decode GEMMs' fraction, ran their FLOPs at the
# dense GEMMs' rate and had no floor: 13-75 % short.
ENGINE_MOE: dict[tuple[str, str, str], tuple[float, float, float, float, float]] = {
    ("nvidia-a100-80gb", "sglang", "bf16"): (37.0, 0.0, 0.83, 0.5, 64.0),
    ("nvidia-a100-80gb", "trtllm", "bf16"): (54.0, 0.1, 0.9, 0.53, 64.0),
    ("nvidia-a100-80gb", "vllm", "bf16"): (18.0, 0.02, 0.8, 0.47, 64.0),
    ("nvidia-b200", "sglang", "bf16"): (39.0, 0.0, 0.78, 0.25, 64.0),
    ("nvidia-b200", "sglang", "fp4"): (25.0, 0.12, 1.0, 0.15, 32.0),
    ("nvidia-b200", "sglang", "fp8_block"): (40.0, 0.0, 0.67, 0.22, 64.0),
    ("nvidia-b200", "trtllm", "bf16"): (31.0, 0.0, 0.95, 0.53, 128.0),
    ("nvidia-b200", "trtllm", "fp4"): (9.0, 0.04, 1.0, 0.48, 128.0),
    ("nvidia-b200", "trtllm", "fp8"): (34.0, 0.0, 0.9, 0.31, 64.0),
    ("nvidia-b200", "trtllm", "fp8_block"): (32.0, 0.32, 0.84, 0.37, 64.0),
    ("nvidia-b200", "trtllm", "mxfp4_mxfp8"): (22.0, 0.0, 0.93, 0.46, 64.0),
    ("nvidia-b200", "vllm", "bf16"): (24.0, 0.0, 0.87, 0.42, 128.0),
    ("nvidia-b200", "vllm", "fp4"): (21.0, 0.0, 0.85, 0.31, 64.0),
    ("nvidia-b200", "vllm", "fp8"): (28.0, 0.0, 0.81, 0.25, 64.0),
    ("nvidia-b200", "vllm", "fp8_block"): (39.0, 0.0, 0.68, 0.1, 16.0),
    ("nvidia-b200", "vllm", "mxfp4"): (14.0, 0.04, 0.45, 0.21, 32.0),
    ("nvidia-b200", "vllm", "mxfp4_mxfp8"): (22.0, 0.0, 0.93, 0.46, 64.0),
    ("nvidia-gb200", "sglang", "bf16"): (41.0, 0.0, 0.82, 0.23, 64.0),
    ("nvidia-gb200", "sglang", "fp4"): (25.0, 0.1, 1.0, 0.14, 32.0),
    ("nvidia-gb200", "sglang", "fp8_block"): (44.0, 0.0, 0.71, 0.21, 64.0),
    ("nvidia-gb200", "trtllm", "bf16"): (25.0, 0.02, 0.98, 0.52, 128.0),
    ("nvidia-gb200", "trtllm", "fp4"): (9.0, 0.04, 1.0, 0.46, 128.0),
    ("nvidia-gb200", "trtllm", "fp8"): (29.0, 0.02, 0.93, 0.32, 64.0),
    ("nvidia-gb200", "trtllm", "fp8_block"): (32.0, 0.32, 0.88, 0.35, 64.0),
    ("nvidia-gb200", "trtllm", "mxfp4_mxfp8"): (17.0, 0.0, 0.97, 0.45, 64.0),
    ("nvidia-gb200", "vllm", "bf16"): (22.0, 0.0, 0.9, 0.4, 128.0),
    ("nvidia-gb200", "vllm", "fp4"): (21.0, 0.0, 0.89, 0.29, 64.0),
    ("nvidia-gb200", "vllm", "fp8"): (29.0, 0.0, 0.84, 0.25, 64.0),
    ("nvidia-gb200", "vllm", "fp8_block"): (36.0, 0.0, 0.79, 0.11, 32.0),
    ("nvidia-gb200", "vllm", "mxfp4"): (13.0, 0.04, 0.46, 0.2, 32.0),
    ("nvidia-gb200", "vllm", "mxfp4_mxfp8"): (17.0, 0.0, 0.97, 0.45, 64.0),
    ("nvidia-h100-80gb", "sglang", "bf16"): (30.0, 0.0, 0.86, 0.33, 64.0),
    ("nvidia-h100-80gb", "sglang", "fp8_block"): (38.0, 0.02, 0.91, 0.38, 64.0),
    ("nvidia-h100-80gb", "trtllm", "bf16"): (31.0, 0.0, 0.77, 0.42, 64.0),
    ("nvidia-h100-80gb", "trtllm", "fp8"): (26.0, 0.0, 0.83, 0.5, 128.0),
    ("nvidia-h100-80gb", "trtllm", "fp8_block"): (22.0, 0.24, 0.97, 0.21, 32.0),
    ("nvidia-h100-80gb", "vllm", "bf16"): (22.0, 0.0, 0.9, 0.45, 64.0),
    ("nvidia-h100-80gb", "vllm", "fp8"): (29.0, 0.0, 0.92, 0.4, 64.0),
    ("nvidia-h100-80gb", "vllm", "fp8_block"): (41.0, 0.0, 0.9, 0.3, 32.0),
    ("nvidia-h100-80gb", "vllm", "mxfp4"): (33.0, 0.02, 0.82, 0.39, 32.0),
    ("nvidia-h200-141gb", "sglang", "bf16"): (25.0, 0.02, 0.83, 0.37, 64.0),
    ("nvidia-h200-141gb", "sglang", "fp8_block"): (40.0, 0.02, 0.81, 0.35, 32.0),
    ("nvidia-h200-141gb", "trtllm", "bf16"): (34.0, 0.0, 0.83, 0.48, 64.0),
    ("nvidia-h200-141gb", "trtllm", "fp8"): (30.0, 0.0, 0.96, 0.48, 64.0),
    ("nvidia-h200-141gb", "trtllm", "fp8_block"): (24.0, 0.24, 0.96, 0.25, 32.0),
    ("nvidia-h200-141gb", "trtllm", "mxfp4"): (73.0, 0.0, 0.75, 0.32, 16.0),
    ("nvidia-h200-141gb", "vllm", "bf16"): (24.0, 0.0, 0.96, 0.47, 64.0),
    ("nvidia-h200-141gb", "vllm", "fp8"): (26.0, 0.0, 0.93, 0.45, 64.0),
    ("nvidia-h200-141gb", "vllm", "fp8_block"): (39.0, 0.0, 0.9, 0.31, 32.0),
    ("nvidia-h200-141gb", "vllm", "mxfp4"): (32.0, 0.02, 0.59, 0.4, 32.0),
}
# FP8 MoE checkpoints as published (DeepSeek-V3 / R1, Kimi-K2, Qwen3, GLM) scale their weights in
# 128 x 128 blocks: an engine's block-scaled kernel where it has one, else its per-tensor one.
# (engine key, MoE dtype) whose op on a chip is another engine's measured one: vLLM's GPT-OSS
# recipe runs its MXFP4 experts under MXFP8 activations on Blackwell
# (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: vllm-project/recipes OpenAI/GPT-OSS.md @ 00143a1a),
# FlashInfer's trtllm_fp4_block_scale_moe, the TRT-LLM-gen kernels TensorRT-LLM's TRTLLM MoE
# backend runs; AIConfigurator measured vLLM's default MXFP4 x BF16 path only, so the op is
# TensorRT-LLM's (calibration.aic_moe copies its fit, the plan says so).
CARRIED_ENGINE_MOE: dict[tuple[str, str], str] = {("vllm", "mxfp4_mxfp8"): "trtllm"}
# gpt-oss's MXFP4 experts (engine.checkpoint_formats): under MXFP8 activations where the engine
# runs them so on the chip (TensorRT-LLM on Blackwell), else under 16-bit ones; without either
# measured, the engine's 16-bit op at a W4A16 kernel's tile (moe_op.W4A16_MOE_TILE_ROWS).
MOE_DTYPE_ORDER = {
    "fp8": ("fp8_block", "fp8"),
    "fp4": ("fp4",),
    "bf16": ("bf16",),
    "mxfp4": ("mxfp4_mxfp8", "mxfp4", "bf16"),
}


def engine_moe(
    accelerator: str, engine: str | None, compute_precision: str
) -> tuple[tuple[float, float, float, float, float], str] | None:
    """((floor us, per-expert us, f_s, e_m, m0), table dtype) of ``engine``'s MoE op on the
    chip at the weights' precision (16-bit as bf16; "mxfp4": a checkpoint's MXFP4 experts), or
    None where it was not measured (ENGINE_MOE)."""
    if engine is None:
        return None
    key = ENGINE_KEYS.get(engine, engine)
    precision = "bf16" if compute_precision in ("bf16", "fp16") else compute_precision
    for dtype in MOE_DTYPE_ORDER.get(precision, ()):
        terms = ENGINE_MOE.get((accelerator, key, dtype))
        if terms is not None:
            return terms, dtype
    return None


# (accelerator, engine) -> the fraction of the rates the step carries to a chip without an operator
# database of its own (the H100's measured terms scaled by the chip's published ratios) that the
# engine's decode step reaches there: one fraction for everything that grows with the step's batch
# (the GEMMs' tokens, the KV read, the fused elementwise kernels, the all-reduce's bytes), fitted on
# the engine's own published offline runs on the chip (calibration.serving_engines
# .fit_engine_step_fraction refits it; a test keeps it equal) and checked on other sources' runs.
# The step's floors (the weights streamed once, launches, the all-reduce's latency) keep the
# carried rates: the published batch-1 latencies agree with them. vLLM on the MI300X (ROCm builds,
# TP1 and TP8 alike) runs its batch at 0.613 of the rates carried from the H100.
ENGINE_STEP_FRACTION: dict[tuple[str, str], float] = {
    ("amd-mi300x", "vllm"): 0.613,
}
# Where no run of its own exists: the same CDNA3 silicon and ROCm kernels (hipBLASLt, RCCL)
# carry the fitted entry, and the plan's evidence says so.
ENGINE_STEP_FRACTION_CARRIED: dict[tuple[str, str], tuple[str, str]] = {
    ("amd-mi325x", "vllm"): ("amd-mi300x", "vllm"),
    ("amd-mi300x", "sglang"): ("amd-mi300x", "vllm"),
    ("amd-mi325x", "sglang"): ("amd-mi300x", "vllm"),
}


def engine_step_fraction(
    accelerator: str, engine: str | None
) -> tuple[float, tuple[str, str] | None]:
    """(fraction, the chip and engine it was fitted on where it is carried) of the carried rates
    ``engine``'s batch-proportional step parts reach on the chip: 1.0 where none is known."""
    key = (accelerator, ENGINE_KEYS.get(engine or "", engine or ""))
    if key in ENGINE_STEP_FRACTION:
        return ENGINE_STEP_FRACTION[key], None
    source = ENGINE_STEP_FRACTION_CARRIED.get(key)
    if source is not None:
        return ENGINE_STEP_FRACTION[source], source
    return 1.0, None


def engine_kv_read_fraction(
    accelerator: str, engine: str | None, kv_bytes_per_element: ArrayLike
) -> NDArray[np.float64] | None:
    """f_kv of ``engine``'s decode attention on the chip for a cache of ``kv_bytes_per_element``
    (1: FP8, else 16-bit), or None where it was not measured for every dtype asked."""
    if engine is None:
        return None
    key = ENGINE_KEYS.get(engine, engine)
    kv = np.asarray(kv_bytes_per_element, dtype=np.float64)
    fp8 = ENGINE_DECODE_ATTENTION.get((accelerator, key, "fp8"))
    bf16 = ENGINE_DECODE_ATTENTION.get((accelerator, key, "bf16"))
    wants_fp8, wants_bf16 = bool(np.any(kv <= 1.0)), bool(np.any(kv > 1.0))
    if (wants_fp8 and fp8 is None) or (wants_bf16 and bf16 is None):
        return None
    return np.where(kv <= 1.0, fp8[0] if fp8 else np.nan, bf16[0] if bf16 else np.nan)


def prefill_attention_kernel(nccl_arch: str) -> str:
    """The kernel of engine.ceilings whose measured forward rate prices a prompt's attention.
    Every engine runs a FlashAttention-class prefill kernel, never a GEMM-rate one: on Hopper
    and newer a wgmma kernel (vLLM's FlashAttention 3, SGLang's FlashInfer / FlashAttention 3,
    TensorRT-LLM's FMHA), priced at cuDNN's rate measured on the H100 (checked on AIConfigurator's
    prefill-attention tables: vLLM 0.19.0 and SGLang 0.5.10 on the H100 within 9 % by median,
    calibration.aiconfigurator); on Ampere FlashAttention 2's (the A100's published ratio)."""
    return "flash2" if nccl_arch == "ampere" else "cudnn"


def prefill_attention_evidence(ceilings: Ceilings, nccl_arch: str) -> str:
    """Where the rate of a prompt's attention comes from, for the plan's evidence."""
    kernel = prefill_attention_kernel(nccl_arch)
    name = {"cudnn": "cuDNN's", "flash2": "FlashAttention 2's"}[kernel]
    source = ceilings.evidence.get("attention", "engine.ceilings")
    occupancy = ceilings.evidence.get("attention-occupancy")
    filled = f", at what its call fills of the chip ({occupancy})" if occupancy else ""
    return f"; a prompt's attention at {name} forward rate ({source}){filled}"


# The host's work a step (TensorRT-LLM's PyTorch backend: its scheduler, the inputs' preparation,
# the sampler's bookkeeping, request by request), which its overlap scheduler runs while the GPU
# runs the step before: a step takes the longer of the two (engine.llm_step.step_seconds). Measured
# on a GB200's Grace CPU: 45.11 ms of "host_step_time" a step at 1,536 running requests a rank
# (GPT-OSS-120B, attention data parallelism 2, max_batch_size 1,536, 3,072 clients, 1k / 1k,
# NVIDIA/TensorRT-LLM pull request #10273, 2025-12-24, the C++ scheduler's figure): 29.4 us a
# request. Only Grace's loop under TensorRT-LLM is measured; an x86 host's (DGX H100 / H200 /
# B200) and vLLM's or SGLang's loops are not modelled, and the plan's evidence says so.
HOST_SECONDS_PER_REQUEST: dict[tuple[str, str], float] = {
    ("TensorRT-LLM", "grace"): 45.11e-3 / 1536
}
# The CPU a chip's hosts carry where it is not an x86 server's: a GB200 tray's Grace.
HOST_CPU = {"nvidia-gb200": "grace"}


def host_cpu(accelerator: str) -> str:
    """The CPU of ``accelerator``'s hosts: HOST_CPU's, else an x86 server's."""
    return HOST_CPU.get(accelerator, "x86")


def host_seconds_per_request(engine: str | None, accelerator: str) -> float:
    """The host's seconds a running request costs a step under ``engine``'s overlap scheduler on
    ``accelerator``'s host (HOST_SECONDS_PER_REQUEST), 0 where not measured."""
    key = (engine or DEFAULT_SERVING_ENGINE, host_cpu(accelerator))
    return HOST_SECONDS_PER_REQUEST.get(key, 0.0)


def prompts_run_apart(engine: str | None) -> bool:
    """Whether ``engine`` runs a prompt batch as a forward pass of its own, the decodes waiting
    (ServingEngine.mixes_prompts_with_decodes); the default engine mixes them."""
    return not ENGINES.get(
        engine or DEFAULT_SERVING_ENGINE, ENGINES[DEFAULT_SERVING_ENGINE]
    ).mixes_prompts_with_decodes


def quantized_decode_gemm(
    accelerator: str, engine: str | None, precision: str = "fp8"
) -> tuple[float, float] | None:
    """(streaming ratio, extra seconds a call) of ``engine``'s FP8 (or ``precision="fp4"``:
    NVFP4) GEMMs at decode batches on the chip over its bf16 ones, or None where not measured."""
    if engine is None:
        return None
    key = (accelerator, ENGINE_KEYS.get(engine, engine))
    if precision == "fp4":
        fit = SERVED_FP4_DECODE_GEMM.get(key) or ENGINE_FP4_DECODE_GEMM.get(key)
    else:
        fit = ENGINE_FP8_DECODE_GEMM.get(key)
    return None if fit is None else (fit[0], fit[1] * 1e-6)


def fp4_gemm_evidence(accelerator: str, engine: str) -> str:
    """How the plan's FP4 decode GEMMs of ``engine`` on the chip were measured."""
    key = (accelerator, ENGINE_KEYS.get(engine, engine))
    if key not in SERVED_FP4_DECODE_GEMM:
        return "FP4 decode GEMMs"
    carried = (
        ""
        if accelerator == SERVED_FP4_FITTED_ON
        else f", carried from the {SERVED_FP4_FITTED_ON}'s"
    )
    return (
        "FP4 decode and prompt GEMMs (as autotuned at warm-up: fitted on AIConfigurator's"
        f" closed-loop FP4 / FP8 TPOTs and TTFTs{carried}; its operator table holds the tuner's"
        " fallback kernel)"
    )


def engine_gemm_rate(
    accelerator: str, engine: str | None, compute_precision: str
) -> tuple[float, float] | None:
    """(decode, prompt) ratios of ``engine``'s GEMM fraction of peak on the chip over the H100's
    at ``compute_precision`` (16-bit as bf16), or None where not measured (ENGINE_GEMM_RATE)."""
    if engine is None:
        return None
    precision = "bf16" if compute_precision in ("bf16", "fp16") else compute_precision
    key = (accelerator, ENGINE_KEYS.get(engine, engine), precision)
    return SERVED_FP4_GEMM_RATE.get(key) or ENGINE_GEMM_RATE.get(key)


_IMAGE_HINTS = (
    ("sglang", "SGLang"),
    ("tensorrt", "TensorRT-LLM"),
    ("trtllm", "TensorRT-LLM"),
    ("tritonserver", "TensorRT-LLM"),
    ("vllm", "vLLM"),
)


def kv_cache_dtype_value(engine: str | None, kv_cache_precision: str | None) -> str:
    """What the server's --kv-cache-dtype takes for the plan's KV cache: the engine's FP8 value,
    or "auto" (the activations' 16 bits) for any other cache."""
    if str(kv_cache_precision or "").upper() != "FP8":
        return "auto"
    return ENGINES.get(
        engine or DEFAULT_SERVING_ENGINE, ENGINES[DEFAULT_SERVING_ENGINE]
    ).fp8_kv_cache_value


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


def serving_evidence(
    engine: ServingEngine,
    accelerator: str,
    tensor_parallel: int | None = None,
    across_hosts: bool = False,
) -> str:
    """What a serving prediction's step constants rest on, for the plan: at the replica's
    ``tensor_parallel`` degree where given (its all-reduce is the engine's measured kernel only
    at a GPU count AIConfigurator measured, inside one host: ``across_hosts`` runs NCCL's)."""
    if tensor_parallel is None:
        reduce_measured = measured_allreduce(accelerator, engine.name)
    else:
        reduce_measured = (
            tensor_parallel > 1
            and not across_hosts
            and engine_allreduce(accelerator, engine.name, tensor_parallel) is not None
        )
    fitted = "fitted on TensorRT-LLM's published H100 / H200 runs"
    chip = (
        ""
        if accelerator in ("nvidia-h100-80gb", "nvidia-h200-141gb")
        else (f"; {accelerator} scaled by its published ratios to the H100 where they exist")
    )
    key = ENGINE_KEYS.get(engine.name, engine.name)
    kernels = [
        name
        for name, measured in (
            ("tensor-parallel all-reduce", reduce_measured),
            (
                "FP8 decode GEMMs (static activation scales, as FP8 checkpoints carry them:"
                " quantising online with dynamic scales costs more a call)",
                quantized_decode_gemm(accelerator, engine.name) is not None,
            ),
            (
                fp4_gemm_evidence(accelerator, engine.name),
                quantized_decode_gemm(accelerator, engine.name, "fp4") is not None,
            ),
            (
                "GEMM rates at decode and prompt batches",
                any(k[:2] == (accelerator, key) for k in ENGINE_GEMM_RATE),
            ),
            (
                "decode attention",
                any((accelerator, key, kv) in ENGINE_DECODE_ATTENTION for kv in ("bf16", "fp8")),
            ),
            ("MoE layers", any(k[:2] == (accelerator, key) for k in ENGINE_MOE)),
        )
        if measured
    ]
    reduce = (
        f"; its {', '.join(kernels)} {engine.name}'s own kernels measured on {accelerator}"
        " (AIConfigurator's database)"
        if kernels
        else ""
    )
    if across_hosts:
        reduce += (
            "; its tensor-parallel all-reduce across hosts NCCL's (over the hosts' NVLink domain"
            " or NICs; the engines' kernels are measured inside one host)"
        )
    elif not reduce_measured and (tensor_parallel is None or tensor_parallel > 1):
        at = f" at {tensor_parallel} GPUs" if tensor_parallel is not None else ""
        reduce += (
            f"; its tensor-parallel all-reduce NCCL's formula (no {engine.name} kernel measured"
            f"{at} on {accelerator})"
        )
    if not engine.mixes_prompts_with_decodes:
        reduce += (
            f"; {engine.name}'s prompt batches run as forward passes of their own, the decodes"
            " waiting (its default: enable_mixed_chunk off)"
        )
    host = host_seconds_per_request(engine.name, accelerator)
    if host > 0.0:
        reduce += (
            f"; a step at least its host loop's {host * 1e6:.3g} us a request ({engine.name} on"
            f" {host_cpu(accelerator)}, measured: NVIDIA/TensorRT-LLM pull request"
            " #10273)"
        )
    fraction, carried = engine_step_fraction(accelerator, engine.name)
    if fraction != 1.0 and carried is not None:
        reduce += (
            f"; its batch-proportional rates x {fraction:g}, carried from {carried[1]} on"
            f" {carried[0]} (no published run of {engine.name} on {accelerator})"
        )
    if engine.fitted_on_own_runs:
        return f"{engine.name}: step constants {fitted}{chip}{reduce}"
    if fraction != 1.0 and carried is None:
        return (
            f"{engine.name} on {accelerator}: its batch-proportional rates x {fraction:g}, fitted"
            f" on its own published runs there (ENGINE_STEP_FRACTION); the other step constants"
            f" carried, {fitted}{chip}{reduce}"
        )
    return (
        f"extrapolated: no fitted run of {engine.name}; its step carries the constants {fitted}"
        f"{chip}{reduce}"
    )
