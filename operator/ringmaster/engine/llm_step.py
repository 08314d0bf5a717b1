"""One step of an LLM serving engine: the decode step at any batch and context, and the prompt
(prefill) tokens that chunked prefill puts in the same step.

A replica is ``tp`` accelerators running one model with tensor parallelism (Megatron-style: every
matrix split ``tp`` ways, two all-reduces of the activations per layer). A step carries ``n``
decoding sequences whose contexts sum to ``C`` tokens and ``p`` prompt tokens. Its time is stated
once, here, as the sum of the kernels a step runs one after another:

``step = O + o_seq n + 2 L all-reduces of (n + p) x hidden``
``     + max((n + p_gemm) x 2 P_m / (tp x peak x e_c), P_m w / (tp x HBM x e_w))``   (the GEMMs)
``     + (C + n c0) x k / (HBM x e_kv)``                              (decode attention)
``     + p x attention FLOPs at half the prompt / (tp x attention rate)`` (prefill attention)

- **The GEMMs** (QKV, output, FFN, LM head) stream the weights once per step and multiply every
  token of the step: a roofline of their own. At batch 1 they are weight streaming; at a few
  hundred tokens (the ridge: peak / HBM FLOPs per byte) they turn compute-bound.
- **Decode attention** is a separate kernel (paged attention: vLLM's, FlashInfer's, TensorRT-LLM's
  XQA) that reads each running sequence's KV cache through its block table. It reads at its own
  efficiency ``e_kv``, not the weights': many small, scattered blocks per sequence instead of one
  large matrix. Its cost per sequence is ``(c + c0) k``: the context's bytes plus a fixed
  ``c0`` tokens' worth per sequence (the kernel's per-sequence work: block-table walk, a partial
  last block, the split-K reduction), so the achieved bandwidth ``e_kv c / (c + c0)`` grows with
  the context and short contexts read slowly.
- **Per-sequence step costs** ``o_seq`` grow with the batch: scheduling, sampling, the block
  tables' update and copy to the device, detokenisation; ``O`` is the fixed cost of a step
  (launches, synchronisation), per layer: ``O = O_32 x layers / 32``.
- **Prefill attention** runs a FlashAttention-class kernel at its own measured rate
  (engine.ceilings' forward attention at the prompt's length and head width: cuDNN's on Hopper
  and newer, FlashAttention 2's on Ampere; serving_engines.prefill_attention_kernel), below the
  GEMMs' (on the H100 at a 2k prompt 0.52 of the bf16 peak against the GEMMs' 0.70).
- **Prefill-chunk interference**: the prompt tokens of a step join the decode tokens in the GEMMs
  (free while those stream weights, a full cost once compute binds) and add their own attention
  kernel, which does not overlap the decode attention.
- **The all-reduces** of a serving engine measured on the chip (engine.tp_allreduce) cost their
  floor, then a concave curve in the step's tokens, decode and prompt (one message a layer
  carries them all, and a larger message runs at a better rate: step_allreduce_seconds); NCCL's
  model elsewhere is linear, a prompt token at a decode token's cost.

**A replica across hosts** (``tp x pp`` accelerators, vLLM's and SGLang's multi-node serving):

- tensor parallelism over more accelerators than one host has runs its all-reduces on the
  fabric: each is NCCL's collective over ``ceil(tp / per_host)`` hosts
  (:func:`ringmaster.engine.collectives.nccl_collective`, the network model the training engine
  uses), not the host's NVLink ring; at a few KB per all-reduce it is latency-bound, and a step
  pays ``2 L`` of them;
- ``pp`` pipeline stages split the layers; the scheduler keeps ``pp`` micro-batches in flight
  (vLLM's virtual engines), so in one round every running sequence advances one token through
  every stage: the round streams each stage's weights once per micro-batch (``W / tp`` per
  accelerator, as a ``tp``-way replica), reads the KV cache of ``L / pp`` layers, divides the
  decode GEMM FLOPs ``pp`` ways, and adds ``pp`` activation sends between stages (across hosts
  when the stages are, over the host's NIC share); the cache holds ``pp`` times the tokens of a
  ``tp``-way replica's, less the weights. Prompt tokens are divided ``pp`` ways too (under load
  the stages prefill different micro-batches at once), which is right for throughput; a lone
  prompt on an idle replica crosses the stages in turn, so the model's idle TTFT of a pipelined
  replica is optimistic by up to ``(pp - 1) / pp`` of its prefill compute (docs/engine.md, "Out
  of reach").

Mixture of experts (:mod:`ringmaster.engine.transformer`): the GEMMs' FLOPs are the ACTIVE
parameters' (``P_m`` = attention, dense FFNs, shared experts, router, top-k routed experts, LM
head), while the weights a step streams are the dense parts plus the routed experts its tokens
touch. With ``E`` routed experts, top-``k`` and ``B = n + p`` tokens in the step, routed
uniformly and independently, an expert is missed by every token with probability
``(1 - k/E)^B``, so the expected distinct experts read per MoE layer are
``E (1 - (1 - k/E)^B)``: ``k`` at batch 1, nearly ``E`` at a batch of a few times ``E / k``.
Uniform routing is what the load-balancing loss trains for (Switch Transformer, Fedus et al.
2021, eq. 4: minimised at a uniform dispatch; DeepSeek-V3's auxiliary-loss-free bias balancing,
the V3 report section 2.1.2) and the expected-coverage formula is the classic occupancy result
(Feller, An Introduction to Probability Theory, vol. 1, ch. II.11). Skewed routing reads fewer
distinct experts at a given batch: the model is an upper bound on the step there.

Every weight stays resident (memory follows all the parameters, sharded over the replica's
accelerators). Expert parallelism (``ep`` > 1, vLLM's ``--enable-expert-parallel``: EP spans the
replica's tensor-parallel ranks) shards whole experts instead of slicing each: the bytes per
accelerator are the same. Under attention data parallelism (or with DeepEP asked) the MoE
layers' reduction becomes a dispatch and a combine all-to-all of the step's tokens x top-k x
hidden (:func:`ringmaster.engine.collectives.intra_host_collective`, NVLink), folded into the
step's collective terms; with attention tensor-parallel every rank already holds the step's
tokens, runs its own experts on them, and the partial sums are all-reduced as sliced experts'
are (vllm-project/vllm vllm/model_executor/layers/fused_moe/config.py @ 002d6073,
``FusedMoEParallelConfig.use_all2all_kernels``: EP and dp_size > 1; NVIDIA/TensorRT-LLM
tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py @ 000a01de,
``reducescatter_or_allreduce``: an all-reduce without attention DP).

Multi-head latent attention caches one latent of ``kv_lora_rank + qk_rope_head_dim`` per token
per layer (DeepSeek-V3; vLLM's MLA backend), whole on every tensor-parallel rank (vLLM's MLA
replicates the latent over TP: every rank's heads read all of it), in capacity and in the
decode attention's reads.

The constants carry their sources below; the fitted ones are recomputed from their named points by
:mod:`ringmaster.calibration.llm_serving` (fitted and checked apart, ``ringmaster calibrate``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives
from ringmaster.engine.ceilings import (
    CHIP_DECODE_TERMS,
    DECODE_ATTENTION_KERNEL,
    DECODE_GEMMS_PER_LAYER,
    H100_DATASHEET_HBM_GBPS,
    H100_DECODE_ATTENTION,
    H100_DECODE_GEMM,
    H100_GEMM_HALF_DIM,
    H100_STREAM_GBPS,
    Ceilings,
    ceilings_for,
    hbm_ratio,
    matmul_ratio,
)
from ringmaster.engine.checkpoint_formats import checkpoint_weights
from ringmaster.engine.efficiency import (
    NETWORK_HOP_LATENCY,
)
from ringmaster.engine.expert_dispatch import (
    DEFAULT_DISPATCHER,
    Dispatcher,
    DispatchKernels,
    ExpertGroup,
    dispatch_combine_seconds,
    exchanges_tokens,
)
from ringmaster.engine.expert_slices import expert_gemm_width
from ringmaster.engine.hardware import Accelerator, MachineType
from ringmaster.engine.moe_op import (
    ACTIVATION_BYTES,
    expert_slot_ratio,
    moe_step_terms,
)
from ringmaster.engine.profiled import ceilings_hbm_ratio, ceilings_matmul_ratio
from ringmaster.engine.serving_engines import (
    ENGINE_GEMM_BAND_TOKENS,
    engine_gemm_rate,
    engine_kv_read_fraction,
    engine_step_fraction,
    host_seconds_per_request,
    prefill_attention_kernel,
    prompts_run_apart,
    quantized_decode_gemm,
)
from ringmaster.engine.step_parts import fused_forward_elementwise_bytes, with_windowed_layers
from ringmaster.engine.tp_allreduce import (
    CURVE_TOP_BYTES,
    LINK_EFFICIENCY,
    MIB,
    TP_HOP_LATENCY,
    cross_host_allreduce_seconds,
    curve_seconds,
    engine_allreduce_terms,
    nccl_tp_allreduce_seconds,
)
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GB, US

F64 = NDArray[np.float64]

# --- constants ------------------------------------------------------------------------------------

# Every fraction below is the H100's: a point on another chip is evaluated with that chip's
# published ratio to the H100 (engine.ceilings.matmul_ratio / hbm_ratio: the A100's maximum
# achievable matmul 1.0825 x the H100's fraction, its triad bandwidth 0.9404 x), so the same
# constants serve every chip and the ceilings stay in one place for training and serving.

# Sustained fraction of the dense 16-bit tensor peak in prefill and compute-bound GEMMs. Fitted on
# one point, TensorRT-LLM's batch-1 time to first token of LLaMA-7B with a 2,048-token prompt on
# A100 in FP16, 133 ms (trtllm-batch1-ttft-7b: the most compute-bound point published), with the
# prompt's attention at its own kernel's measured rate (FlashAttention 2 on the A100).
LLM_COMPUTE_EFFICIENCY = 0.6653
# The same for FP8 GEMMs, as a fraction of the FP8 peak (twice the 16-bit one): FP8 kernels reach
# a lower fraction of their doubled peak (per-tensor scaling, the BF16 epilogue); the prompt's
# attention stays 16-bit, at its kernel's rate. Fitted with the two fitted constants below, by
# least squares of the log error, on TensorRT-LLM 1.0's in-flight-batching throughput table
# (docs/source/performance/perf-overview.md: Llama-3.1-8B on one H100 and one H200, Llama-3.3-70B
# on two H100s, ten mixes each); checked on
# its other setups (70B on one H200, 405B on eight H100s and eight H200s) and on TensorRT-LLM's
# FP8 TTFT of LLaMA-7B (36 ms for 2,048 tokens: -13%).
LLM_FP8_COMPUTE_EFFICIENCY = 0.5898
# Achieved fraction of HBM bandwidth when the GEMMs stream the weights, and the fixed cost of one
# step (kernel launches, synchronisation) of a 32-layer model. Fitted together on two points:
# gpt-fast's batch-1 decode of Llama-2-7B (32 layers) in BF16 on A100-80GB at TP1 (104.9
# tokens/s) and TP2 (168.8); checked at TP4 and TP8. The launches are per layer, so a model of L
# layers pays L / 32 of it (405B's 126 layers: 5.2 ms a step): with it, the checked 405B rows of
# the throughput table fall from +55% worst to +43%.
LLM_MEMORY_EFFICIENCY = 0.8459
LLM_STEP_OVERHEAD_SECONDS = 1.3110e-3
OVERHEAD_FIT_LAYERS = 32
# Paged decode attention: its achieved fraction of HBM bandwidth, the fixed work per sequence in
# tokens of context, and the host's cost per running sequence per step. The fraction is
# measured, not fitted: each serving engine's own decode attention per chip and KV dtype where
# AIConfigurator's tables have it (engine.serving_engines.ENGINE_DECODE_ATTENTION: TensorRT-LLM
# on the H100 reads an FP8 cache at 0.86 of HBM, vLLM at 0.75), else the H100's measured
# FlashAttention fraction (engine.ceilings.H100_DECODE_ATTENTION). The other two are fitted with
# LLM_FP8_COMPUTE_EFFICIENCY on the throughput table, through the batching model's offline
# run (engine.llm_batching: the prompts' backlog chain; the page's request count in waves of the
# slots, offline_run), each step's all-reduces, FP8 GEMMs and decode attention TensorRT-LLM's
# own: the fixed work lands at 85 tokens of context a sequence (103 while the runs were taken for
# the offline maximum, 43 while the FP8 GEMMs were charged the dynamic activation scale the
# table's static checkpoints never compute, 33 while a step's prompt tokens all-reduced apart from
# its decode tokens; 0 while prompts' attention ran at the FP8 GEMMs' rate), the host's cost on
# its bound, zero: TensorRT-LLM's C++ runtime shows no per-sequence host cost the table
# resolves. A Python-scheduled engine
# (vLLM) pays more (its v0.6 release notes: the GPU idled a third of the time on CPU overheads)
# that no published table isolates: docs/engine.md, "Out of reach".
LLM_KV_READ_EFFICIENCY = H100_DECODE_ATTENTION[DECODE_ATTENTION_KERNEL][0]
LLM_KV_SEQUENCE_TOKENS = 84.63
LLM_SEQUENCE_OVERHEAD_SECONDS = 0.0
# The decode step composed from the H100's measured decode terms (engine.ceilings,
# H100_DECODE_GEMM / H100_DECODE_ATTENTION): weights streamed at 0.84 of HBM through GEMMs at
# the step's batch (their decode rate E_d / (1 + K_p / width)), the KV read at FlashAttention's
# 0.80 and a floor per kernel (4 GEMMs and one attention a layer: 1.3 ms for 32 layers, what
# LLM_STEP_OVERHEAD_SECONDS was fitted to). Off: with it the serving constants refit by
# calibration.llm_serving (the overhead lands on its bound 0, KV_SEQUENCE_TOKENS at 224.5,
# FP8 compute 0.4486) and the checked serving rows move from 25.4 % median |error| (+8.6 %
# signed) to 34.3 % (+23.4 %): the measured decode-batch GEMM rate (0.72-0.78 of peak) is far
# above what the published tables' large batches reach through the fitted FP8 fraction. With the
# decode GEMMs' compute kept at the fitted fraction (the weights, KV and floors measured) the
# checked rows are at 26.5 % (+9.3 %): no better either. docs: issue 46, part 5.
MEASURED_DECODE = False
# vLLM's KV-cache block: 16 tokens (vllm/config CacheConfig block_size default). A sequence holds
# whole blocks, so half a block more than its tokens on average.
KV_BLOCK_TOKENS = 16


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def pipeline_send_seconds(
    nbytes: ArrayLike,
    tp: int,
    across_hosts: bool,
    accelerator: Accelerator,
    nic_share: float,
) -> F64:
    """One micro-batch's activations from one stage to the next: each of the ``tp`` ranks sends
    its ``1 / tp`` (Megatron's scatter-gather, vLLM's PP send), over its share of the host's NICs
    when the stages are on different hosts (a network hop, NETWORK_HOP_LATENCY), else over the
    host's link."""
    per_rank = _f(nbytes) / tp
    if across_hosts:
        return per_rank / nic_share + NETWORK_HOP_LATENCY
    link = accelerator.intra_link
    bandwidth = accelerator.intra_bandwidth * LINK_EFFICIENCY[link]
    return per_rank / bandwidth + TP_HOP_LATENCY[link]


# vLLM v1's defaults for an OpenAI-compatible server on a large-memory GPU
# (vllm/engine/arg_utils.py, EngineArgs._set_default_args: max_num_batched_tokens 8192 for the
# API server on H100-class GPUs): the batching model's budget, and the prompt tokens one
# attention call holds under load (a step's prompts go through one variable-length call).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
# The step size at which a replica across hosts is charged its tensor-parallel all-reduces:
# vLLM's smallest chunked-prefill budget among those the engine weighs (llm_batching), about a
# decode batch of a few hundred sequences plus a prompt chunk.
STEP_COLLECTIVE_TOKENS = 1024.0


class ReplicaSpan(NamedTuple):
    """How a replica's ``tp x pp`` accelerators sit on hosts of ``per_host`` accelerators; the
    fabric and NIC share are the hosts' (collectives.gpu_fabric)."""

    per_host: int
    pipeline: int = 1
    fabric: collectives.GpuFabric | None = None
    nic_share: float = 0.0  # NIC bytes/s per accelerator (the host's NICs over per_host)
    machine: MachineType | None = None  # the hosts' (an NVLink domain across them, if any)

    def tensor_hosts(self, tp: int) -> int:
        return max(1, math.ceil(tp / self.per_host))

    def stages_across_hosts(self, tp: int) -> bool:
        return self.pipeline > 1 and tp * self.pipeline > self.per_host


class StepConstants(NamedTuple):
    """The fitted constants of a step, passed explicitly so calibration can refit them."""

    compute_efficiency: float = LLM_COMPUTE_EFFICIENCY
    fp8_compute_efficiency: float = LLM_FP8_COMPUTE_EFFICIENCY
    memory_efficiency: float = LLM_MEMORY_EFFICIENCY
    step_overhead: float = LLM_STEP_OVERHEAD_SECONDS
    kv_read_efficiency: float = LLM_KV_READ_EFFICIENCY
    kv_sequence_tokens: float = LLM_KV_SEQUENCE_TOKENS
    sequence_overhead: float = LLM_SEQUENCE_OVERHEAD_SECONDS
    # The decode step from the H100's measured decode terms (engine.ceilings: the GEMMs'
    # weight streaming, their decode-batch rate and floor, the KV read and its floor); False:
    # from ``memory_efficiency`` and ``kv_read_efficiency`` alone (the step before they were
    # measured).
    measured_decode: bool = MEASURED_DECODE


DEFAULT_CONSTANTS = StepConstants()


class ServingTerms(NamedTuple):
    """Per-replica costs, in seconds, of one step's parts (arrays broadcast)."""

    overhead: F64  # O: fixed cost of a step
    sequence_overhead: F64  # o_seq: host cost per running sequence
    allreduce_base: F64  # the step's collectives with no bytes (latency): TP all-reduces, EP a2a
    allreduce_per_token: F64  # their bandwidth cost per token in the step
    weights_read: F64  # the GEMMs streaming the dense weights once (per accelerator)
    gemm_per_token: F64  # one decode token's GEMM FLOPs
    prefill_gemm_per_token: F64  # one prompt token's GEMM FLOPs (LM head on the last token only)
    prefill_attention_per_context: F64  # one prompt token's attention per token it attends to
    kv_read_per_token: F64  # one token of context read by decode attention
    kv_read_per_sequence: F64  # the per-sequence fixed part (c0 tokens)
    context_tokens: F64  # mean context of a decoding sequence: input + half the output
    output_tokens: F64  # output mean
    input_tokens: F64  # input mean
    kv_cache_tokens: F64  # tokens the replica's KV cache holds
    kv_bytes_per_token: F64  # one token's cache on one accelerator
    # Mixture of experts: streaming every routed expert once (per accelerator; 0 for a dense
    # model), and the chance one token leaves a given expert unread, 1 - k/E.
    expert_weights_read: F64 = np.zeros(())
    expert_miss_per_token: F64 = np.ones(())
    # Mixture of experts: one token's routed-expert GEMM FLOPs, at the experts' own GEMM shape
    # (a kernel apart, with its own roofline against the experts it streams); 0 for a dense
    # model, whose GEMMs are all in gemm_per_token.
    expert_gemm_per_token: F64 = np.zeros(())
    # What a prompt token costs a step, as a share of computing it: 1 on a replica that
    # prefills; 0 on the decode side of a disaggregated endpoint, where the prompt's KV cache
    # arrives computed (engine.llm_disaggregation) and the request only joins the batch.
    prompt_compute: F64 = np.ones(())
    # The memory-bound kernels one token (decode or prompt) runs through the layers: norms,
    # residual adds, the FFN's activation, RoPE, as fused kernels move them at the chip's
    # streaming rate (engine.step_parts.fused_forward_elementwise_bytes).
    elementwise_per_token: F64 = np.zeros(())
    # A decode token's GEMM FLOPs at the batch where the GEMMs run as fast as a prompt chunk's
    # (a named engine's measured ratios on Blackwell, serving_engines.ENGINE_GEMM_RATE); NaN:
    # no faster than gemm_per_token at any batch. decode_gemm_seconds_per_token reads both.
    gemm_per_token_large_batch: F64 = np.full((), np.nan)
    attention_groups: F64 = np.ones(())  # the step's decodes split among this many groups
    # A MoE layer's M tiles: each routed expert a step touches computes its token rows padded by
    # m0 rows (an engine's fused MoE op measured on the chip, serving_engines.ENGINE_MOE), in
    # tokens of k experts at full touch: m0 x E / k; 0: no padding.
    expert_tile_tokens: F64 = np.zeros(())
    # The engine's measured all-reduce (engine.tp_allreduce) over a step's tokens, decode and
    # prompt alike (one message a layer carries them all): concave, curve x tokens ** exponent up
    # to curve_tokens tokens, then allreduce_beyond_per_token a token more (the prompt rate); 0
    # where the step's all-reduce is NCCL's, linear in allreduce_per_token.
    allreduce_curve: F64 = np.zeros(())
    allreduce_exponent: F64 = np.ones(())
    allreduce_curve_tokens: F64 = np.full((), np.inf)
    allreduce_beyond_per_token: F64 = np.zeros(())
    # 1 where the engine runs a step's prompt tokens as a forward pass of their own after the
    # decodes' (SGLang's default, serving_engines.prompts_run_apart): each pass streams the
    # weights and pays the fixed costs; 0 where one pass carries both (vLLM, TensorRT-LLM).
    prompts_apart: F64 = np.zeros(())
    # The host's seconds a request in the step costs (the engine's scheduler loop on the host's
    # CPU, serving_engines.HOST_SECONDS_PER_REQUEST), which an overlapping scheduler runs beside
    # the GPU: the step is the longer of the two; 0 where not measured.
    host_per_request: F64 = np.zeros(())


def step_allreduce_seconds(terms: ServingTerms, decodes: ArrayLike, prompts: ArrayLike) -> F64:
    """The all-reduces' per-token part of a step of ``decodes`` decode tokens and ``prompts``
    computed prompt tokens: NCCL's (or an exchange's) linear parts, and the engine's curve over
    all of them."""
    t = terms
    n, p = _f(decodes), _f(prompts)
    curve = curve_seconds(
        t.allreduce_curve,
        t.allreduce_exponent,
        t.allreduce_curve_tokens,
        t.allreduce_beyond_per_token,
        n + p,
    )
    return _f((n + p) * t.allreduce_per_token + curve)


def allreduce_curve_floor_per_token(terms: ServingTerms) -> F64:
    """The least per-token cost of the engine's curve at any step's tokens (a lower bound): its
    average at its end, or a token's beyond it, whichever is less."""
    t = terms
    with np.errstate(invalid="ignore", divide="ignore"):
        at_end = np.where(
            t.allreduce_curve > 0.0,
            t.allreduce_curve * t.allreduce_curve_tokens ** (t.allreduce_exponent - 1.0),
            0.0,
        )
    return _f(
        np.where(t.allreduce_curve > 0.0, np.minimum(at_end, t.allreduce_beyond_per_token), 0.0)
    )


def decode_gemm_width(model: Transformer, tp: ArrayLike, ffn_width: float | None = None) -> F64:
    """The narrow side of a layer's GEMMs under ``tp``-way tensor parallelism, as one width:
    ``1 / width`` averaged over the four GEMMs (QKV and gate + up split N, output and down split
    K) weighted by their FLOPs, so that ``1 + K_p / width`` is the FLOP-weighted mean of each
    GEMM's shape term (engine.ceilings.Ceilings.decode_gemm_seconds). The FFN at ``ffn_width``
    (default: the dense layers' FFN, or a mixture's dense part: dense_ffn_width)."""
    g = _f(tp)
    h = float(model.hidden)
    q = float(model.heads * model.head_dim)
    qkv_n = float((model.heads + 2 * model.kv_heads) * model.head_dim)
    ffn = float(dense_ffn_width(model) if ffn_width is None else ffn_width)
    up_n = (2.0 if model.gated_ffn else 1.0) * ffn
    gemms = ((h, qkv_n / g), (q / g, h), (h, up_n / g), (ffn / g, h))  # (K, N) per rank
    flops = sum(k * n for k, n in gemms)
    inverse = sum(k * n / np.minimum(k, n) for k, n in gemms) / flops
    return _f(1.0 / inverse)


def compute_efficiency_for(compute_precision: ArrayLike, constants: StepConstants) -> F64:
    """``e_c`` of the precision the matrix units compute in ("fp8", "fp4" or a 16-bit one), on
    the H100. FP4 (Blackwell's NVFP4 GEMMs) starts from the FP8 fraction: the chip's measured
    FP4 ratio to the H100's FP8 (engine.ceilings.matmul_ratio, serving_engines.ENGINE_GEMM_RATE)
    carries it to the FP4 peak. No published FP4 serving row is fitted (docs/engine.md)."""
    low = np.isin(np.asarray(compute_precision), ("fp8", "fp4"))
    return np.where(low, constants.fp8_compute_efficiency, constants.compute_efficiency)


def expert_fraction_read(miss_per_token: ArrayLike, tokens: ArrayLike) -> F64:
    """The expected share of a MoE layer's routed experts that ``tokens`` tokens touch, uniform
    routing: ``1 - (1 - k/E)^B`` (see the module's docstring). A step carries one token at
    least; a single expert of top-1 (miss 0) is always read, as the dense FFN it is."""
    return 1.0 - _f(miss_per_token) ** np.maximum(_f(tokens), 1.0)


def weights_read_seconds(terms: ServingTerms, tokens: ArrayLike) -> F64:
    """The weights a step of ``tokens`` tokens streams: the dense parts and the experts touched."""
    return terms.weights_read + expert_read_seconds(terms, tokens)


def expert_compute_seconds(terms: ServingTerms, tokens: ArrayLike) -> F64:
    """The routed experts' FLOPs of a step of ``tokens`` tokens, each touched expert's rows
    padded to its tile (0 for a dense model)."""
    touched = expert_fraction_read(terms.expert_miss_per_token, tokens)
    return terms.expert_gemm_per_token * (_f(tokens) + terms.expert_tile_tokens * touched)


def expert_read_seconds(terms: ServingTerms, tokens: ArrayLike) -> F64:
    """The routed experts a step of ``tokens`` tokens touches, streamed (0 for a dense model)."""
    return terms.expert_weights_read * expert_fraction_read(terms.expert_miss_per_token, tokens)


def dense_ffn_width(model: Transformer) -> float:
    """The FFN width of a layer's dense GEMMs: the dense FFN's; in a mixture of experts whose
    MoE layers are the most, their shared experts' together (without shared experts, the dense
    layers' FFN, else one expert's width)."""
    if not model.is_moe:
        return float(model.ffn_hidden)
    if model.shared_experts and model.moe_layers >= model.dense_layers:
        return float(model.expert_ffn_hidden * model.shared_experts)
    return float(model.ffn_hidden if model.dense_layers else model.expert_ffn_hidden)


def expert_shape_ratio(model: Transformer, tp: ArrayLike, expert_parallel: int, key: str) -> F64:
    """The routed experts' GEMM rate over the dense GEMMs' at the same fitted efficiency: the
    measured shape term 1 / (1 + K_p / width) (engine.ceilings.H100_GEMM_HALF_DIM, fitted on the
    H100's GEMM grid) at the experts' narrow side over the one at the dense layers' (the
    attention and dense or shared FFN GEMMs of decode_gemm_width). An expert is sliced ``tp``
    ways without expert parallelism, whole with it. 1 for a dense model."""
    if not model.is_moe:
        return np.ones(np.shape(tp))
    g = _f(tp)
    split = g if expert_parallel == 1 else np.ones_like(g)
    width = expert_gemm_width(model.hidden, model.expert_ffn_hidden, split, model.gated_ffn)
    dense = decode_gemm_width(model, g)
    half = H100_GEMM_HALF_DIM[key]
    ratio: F64 = (1.0 + half / dense) / (1.0 + half / width)
    return ratio


def kv_elements_per_token_per_accelerator(
    model: Transformer, tp: ArrayLike, context: ArrayLike | None = None
) -> F64:
    """One token's cache elements on one accelerator of ``tp``: K and V of its share of the KV
    heads (a KV head is replicated, never split), or MLA's whole latent on every rank; in a
    sequence of ``context`` tokens, a sliding-window layer holds only its window's
    (Transformer.kv_cache_layers: the mean over the sequence's tokens; None: every layer)."""
    layers = _f(model.layers) if context is None else model.kv_cache_layers(context)
    if model.latent_attention is not None:
        return layers * float(model.kv_cache_elements_per_token_per_layer) + 0.0 * _f(tp)
    return 2.0 * layers * np.ceil(model.kv_heads / _f(tp)) * model.head_dim


def weights_bytes_per_accelerator(
    model: Transformer,
    weight_bytes_per_parameter: ArrayLike,
    tp: ArrayLike,
    pipeline: int = 1,
    attention_data: int = 1,
    redundant_experts: int = 0,
) -> F64:
    """The weights one accelerator holds: everything over ``tp x pipeline``; under attention
    data parallelism the dense parts over each group's ``tp`` and the routed experts, with
    their redundant copies, over all ``tp x attention_data`` ranks."""
    split = checkpoint_weights(model, weight_bytes_per_parameter)
    g = _f(tp)
    routed = float(model.routed_expert_parameters)
    slots = expert_slot_ratio(model, redundant_experts)
    dense = float(model.parameters) - routed
    experts = routed * slots / (g * attention_data) * split.expert_bytes
    return (dense / g * split.dense_bytes + experts) / pipeline


def serving_terms(
    model: Transformer,
    accelerator: Accelerator,
    tp: ArrayLike,
    peak_flops: ArrayLike,
    weight_bytes_per_parameter: ArrayLike,
    kv_bytes_per_element: ArrayLike,
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    memory_bandwidth: ArrayLike | None = None,
    memory_bytes: ArrayLike | None = None,
    *,
    compute_precision: str = "bf16",
    kv_memory_fraction: ArrayLike | None = None,
    constants: StepConstants = DEFAULT_CONSTANTS,
    span: ReplicaSpan | None = None,
    expert_parallel: int = 1,
    ceilings: Ceilings | None = None,
    attention_data: int = 1,
    redundant_experts: int = 0,
    dispatcher: Dispatcher = DEFAULT_DISPATCHER,
    dispatch_kernels: DispatchKernels = "low_latency",
    two_batch_overlap: bool = False,
    serving_engine: str | None = None,
    prefill_attention: str | None = None,
    attention_prompts: ArrayLike | None = None,
    step_fraction: float | None = None,
) -> ServingTerms:
    """The costs of one replica of ``tp`` accelerators (every argument but the model may be an
    array: one call evaluates a grid of configurations). ``kv_memory_fraction``: the share of
    each accelerator's HBM left to weights + cache (default 1 - HBM_RESERVE_FRACTION).
    ``span``: a replica of ``tp x span.pipeline`` accelerators over hosts (the module's
    docstring); then ``tp`` is one integer, and a step is one round of the pipeline.
    ``expert_parallel``: 1 (experts sliced by TP) or the replica's ``tp`` (whole experts
    sharded over its ranks; the MoE layers' all-reduce becomes a dispatch and a combine).
    ``ceilings``: a profiled pool's (engine.profiled): its measured matmul and HBM fractions
    replace the chip's published ratios to the H100 (None: the published ones).
    ``attention_data``: groups of ``tp`` that each serve their own sequences with their own KV
    cache, the routed experts (and ``redundant_experts`` copies) over all ``expert_parallel =
    tp x attention_data`` ranks, across the span's hosts: a replica's step is one group's at
    1 / attention_data of the step's tokens, sequences and context, while every group streams
    its dense weights whole (the module's docstring). ``dispatcher`` / ``dispatch_kernels``:
    how tokens reach the experts (engine.expert_dispatch). ``two_batch_overlap``: the step runs
    as two micro-batches, one's dispatch and combine beside the other's compute (SGLang's
    --enable-two-batch-overlap, vLLM's --enable-dbo): each layer costs the larger of its
    compute and its exchange, so the exchange's cost per token is what exceeds a token's
    compute (GEMMs and KV read), its latency what exceeds the step's floors, and each
    micro-batch streams the weights its tokens touch: twice the weights a step.
    ``serving_engine``: the engine's name (engine.serving_engines), whose own tensor-parallel
    all-reduce inside a host (engine.tp_allreduce), FP8 GEMMs and decode attention are used
    where they were measured on the chip; None: NCCL's all-reduce, the fitted GEMMs and the
    H100's measured FlashAttention fraction. ``prefill_attention``: the kernel (engine.ceilings)
    whose rate prices a prompt's attention (None: serving_engines.prefill_attention_kernel).
    ``attention_prompts``: the prompts one attention call holds (None: a full token budget's,
    DEFAULT_MAX_NUM_BATCHED_TOKENS over the mean prompt, one at least). ``step_fraction``: what
    the batch-proportional parts reach of the carried rates (None: the engine's on the chip,
    serving_engines.ENGINE_STEP_FRACTION; 1.0 with a profiled pool's ceilings)."""
    split = checkpoint_weights(model, weight_bytes_per_parameter)
    if split.mxfp4_experts:  # the checkpoint's dense GEMMs in BF16 (engine.checkpoint_formats)
        compute_precision, peak_flops = "bf16", accelerator.peak("bf16")
    g = _f(tp)
    groups = float(attention_data)
    pp = 1 if span is None else span.pipeline
    ranks = int(np.max(g))  # a span's replica has one tensor degree
    n_in = _f(input_tokens)
    n_out = _f(output_tokens)
    hbm = _f(accelerator.memory_bandwidth if memory_bandwidth is None else memory_bandwidth)
    capacity = _f(accelerator.memory_bytes if memory_bytes is None else memory_bytes)
    # The fitted fractions are the H100's (engine.ceilings: one place for training and serving);
    # another chip's published ratio to the H100 scales them.
    if ceilings is None:
        compute_ratio = matmul_ratio(accelerator.name, compute_precision)
        memory_ratio = hbm_ratio(accelerator.name)
    else:  # issue 47: measured on the pool
        compute_ratio = ceilings_matmul_ratio(ceilings, accelerator.name, compute_precision)
        memory_ratio = ceilings_hbm_ratio(ceilings, accelerator.name, accelerator.memory_bandwidth)
    e_c = compute_efficiency_for(compute_precision, constants)
    # A named engine's GEMMs measured on the chip (engine.serving_engines.ENGINE_GEMM_RATE: the
    # Blackwell chips) run decode batches and prompt chunks at their own ratios to the H100.
    own_gemms = (
        engine_gemm_rate(accelerator.name, serving_engine, compute_precision)
        if ceilings is None
        else None
    )
    decode_ratio, prompt_ratio = own_gemms or (compute_ratio, compute_ratio)
    rate = _f(peak_flops) * g * e_c * prompt_ratio
    w = _f(weight_bytes_per_parameter)
    # a stage holds its own layers' cache; a KV head is replicated, never split; a sliding
    # window holds its last tokens only: the cache's size at the served length, its reads at the
    # mean context
    context = n_in + 0.5 * n_out
    kv_bytes = _f(kv_bytes_per_element) / pp
    kv_per_token = kv_elements_per_token_per_accelerator(model, g, n_in + n_out) * kv_bytes
    kv_read_bytes = kv_elements_per_token_per_accelerator(model, g, context) * kv_bytes
    one_token = ACTIVATION_BYTES * model.hidden
    # Where the tokens are exchanged (expert_dispatch.exchanges_tokens), the MoE layers'
    # all-reduce gives way to a dispatch and a combine all-to-all, each rank sending its 1/ep of
    # the step's tokens, k copies each.
    exchanges = exchanges_tokens(expert_parallel, attention_data, dispatcher)
    moe_a2a = model.moe_layers if exchanges else 0
    allreduces = 2.0 * model.layers - moe_a2a
    if span is not None and span.tensor_hosts(ranks) > 1:
        assert span.fabric is not None, "tensor parallelism across hosts needs the hosts' fabric"

        # One all-reduce carries every token of the step: charged at a step's bytes, as a
        # secant from 0 to STEP_COLLECTIVE_TOKENS tokens (its latency in the base), not at one
        # token's, whose LL-protocol slope times thousands of tokens is 5-15x the collective.
        fabric = span.fabric

        def reduce(nbytes: float) -> F64:
            return cross_host_allreduce_seconds(
                nbytes, ranks, span.per_host, fabric, span.machine, accelerator
            )

        zero = reduce(0.0)
        step = reduce(one_token * STEP_COLLECTIVE_TOKENS)
        base = allreduces * zero
        per_token = allreduces * (step - zero) / STEP_COLLECTIVE_TOKENS
        allreduce_curve, allreduce_exponent = np.zeros(()), np.ones(())
        allreduce_curve_tokens, allreduce_beyond = np.full((), np.inf), np.zeros(())
    else:
        # The engine's own kernel where it was measured: its floor and its concave curve in the
        # step's tokens (decode and prompt in one message); else NCCL's ring, linear in them.
        curve = engine_allreduce_terms(g, accelerator.name, serving_engine)
        nccl_base = allreduces * nccl_tp_allreduce_seconds(0.0, g, accelerator)
        nccl_per_token = allreduces * nccl_tp_allreduce_seconds(one_token, g, accelerator)
        base = np.where(curve.measured, allreduces * curve.floor, nccl_base)
        per_token = np.where(curve.measured, 0.0, nccl_per_token - nccl_base)
        # a message carries one group's tokens of one pipeline stage's micro-batch
        messages = groups * pp
        allreduce_curve = np.where(
            curve.measured,
            allreduces * curve.at_mib * (one_token / (messages * MIB)) ** curve.exponent,
            0.0,
        )
        allreduce_exponent = np.where(curve.measured, curve.exponent, 1.0)
        allreduce_curve_tokens = np.where(
            curve.measured, CURVE_TOP_BYTES * messages / one_token, np.inf
        )
        # beyond the curve's last measured message, a token at the prompt rate
        allreduce_beyond = np.where(
            curve.measured, allreduces * one_token / curve.prompt_rate / messages, 0.0
        )
    per_token = per_token / groups  # each group all-reduces its own tokens
    a2a_base: F64 = np.zeros(())
    a2a_per_token: F64 = np.zeros(())
    if moe_a2a:
        # A step's token sits on one rank's share of the dispatch: 1 / ep of it per rank.
        group = ExpertGroup(
            expert_parallel,
            span.per_host if span is not None else expert_parallel,
            accelerator,
            span.machine if span is not None else None,
        )

        def exchange(tokens_per_rank: float) -> F64:
            return moe_a2a * dispatch_combine_seconds(
                tokens_per_rank,
                model.hidden,
                float(model.active_experts),
                group,
                dispatcher,
                dispatch_kernels,
            )

        a2a_base = exchange(0.0)
        a2a_per_token = exchange(1.0 / expert_parallel) - a2a_base
    per_token = per_token / pp  # a round reduces each token's activations once per layer
    if span is not None and pp > 1:
        across = span.stages_across_hosts(ranks)
        send0 = pipeline_send_seconds(0.0, ranks, across, accelerator, span.nic_share)
        send1 = pipeline_send_seconds(one_token, ranks, across, accelerator, span.nic_share)
        base = base + pp * send0  # pp sends on a round's critical path
        per_token = per_token + (send1 - send0)  # every token crosses every boundary once
    slots = expert_slot_ratio(model, redundant_experts)
    routed_experts = float(model.routed_expert_parameters) * slots
    routed_active = float(model.moe_layers * model.active_experts * model.expert_parameters)
    dense_read = model.matmul_parameters - routed_active
    # A token's k experts among the slots (a redundant copy takes a share of its expert's load).
    miss = 1.0 - model.active_experts / (model.experts * slots) if model.experts else 1.0
    gemm_key = "fp8" if compute_precision in ("fp8", "fp4") else "bf16"
    f_w, gemm_floor_us, e_d = H100_DECODE_GEMM[gemm_key]
    f_kv, attention_floor_us = H100_DECODE_ATTENTION[DECODE_ATTENTION_KERNEL]
    if constants.measured_decode:
        # The GEMMs at the step's batch: weights at the measured streaming fraction, tokens at
        # the decode-batch rate of the layer's GEMM width, each call's floor; the KV read at the
        # decode kernel's measured fraction and its floor once a layer. A chip measured on its
        # own, or fitted on a published database (engine.ceilings.CHIP_DECODE_TERMS: the H200;
        # the A100, B200 and GB200) uses its own terms.
        own = CHIP_DECODE_TERMS.get(accelerator.name, {}) if ceilings is None else {}
        if gemm_key in own:
            f_w, gemm_floor_us, e_d = own[gemm_key]
            compute_ratio, weight_ratio = 1.0, 1.0
        else:
            weight_ratio = memory_ratio
        kv_ratio = memory_ratio
        if DECODE_ATTENTION_KERNEL in own:
            f_kv, attention_floor_us = own[DECODE_ATTENTION_KERNEL]
            kv_ratio = 1.0
        weight_hbm = hbm * f_w * weight_ratio
        shape = e_d / (1.0 + H100_GEMM_HALF_DIM[gemm_key] / decode_gemm_width(model, g))
        decode_rate = _f(peak_flops) * g * shape * compute_ratio
        kv_hbm = hbm * f_kv * kv_ratio
        floors = model.layers * (DECODE_GEMMS_PER_LAYER * gemm_floor_us + attention_floor_us)
        floors_seconds = floors * US
    else:
        weight_hbm = hbm * constants.memory_efficiency * memory_ratio
        decode_rate = _f(peak_flops) * g * e_c * decode_ratio
        kv_hbm = hbm * constants.kv_read_efficiency * memory_ratio
        floors_seconds = 0.0
        # The engine's own decode attention where it was measured on the chip, for the cache's
        # dtype (engine.serving_engines.ENGINE_DECODE_ATTENTION); its floor is in the overhead.
        own_kv = engine_kv_read_fraction(accelerator.name, serving_engine, kv_bytes_per_element)
        if own_kv is not None and ceilings is None:
            kv_hbm = hbm * own_kv
    # What the named engine's batch reaches of the carried rates on a chip without operator tables
    # of its own (serving_engines.ENGINE_STEP_FRACTION: vLLM on the MI300X); a profiled pool's
    # ceilings are its own measurement.
    fraction = step_fraction
    if fraction is None:
        own_fraction = engine_step_fraction(accelerator.name, serving_engine)[0]
        fraction = own_fraction if ceilings is None else 1.0
    decode_rate = decode_rate * fraction
    kv_hbm = kv_hbm * fraction
    # The engine's FP8 (NVFP4) GEMMs at decode batches against the bf16 ones the streaming is
    # fitted on (engine.serving_engines.ENGINE_FP8_DECODE_GEMM, ENGINE_FP4_DECODE_GEMM): their
    # streaming rate, and a cost a call more (the activations' quantisation), for each of a
    # layer's dense GEMMs.
    fp8 = (
        quantized_decode_gemm(accelerator.name, serving_engine, compute_precision)
        if compute_precision in ("fp8", "fp4")
        else None
    )
    dense_weight_hbm = weight_hbm
    if fp8 is not None and ceilings is None:
        dense_weight_hbm = weight_hbm * fp8[0]
        floors_seconds = floors_seconds + model.layers * DECODE_GEMMS_PER_LAYER * fp8[1]
    # The routed experts run as grouped GEMMs of their own (vLLM's fused_moe, TensorRT-LLM's MoE
    # plugin, SGLang's DeepGEMM): their FLOPs at the experts' shape, apart from the dense ones.
    routed_flops = 2.0 * routed_active
    expert_rate = decode_rate * expert_shape_ratio(model, g, expert_parallel, gemm_key)
    expert_hbm = weight_hbm
    # The engine's own fused MoE op measured on the chip (engine.moe_op), where it has one.
    moe = moe_step_terms(
        model,
        accelerator,
        g,
        peak_flops=peak_flops,
        fraction=fraction,
        hbm=hbm,
        weight_bytes=w,
        compute_precision=compute_precision,
        mxfp4_experts=split.mxfp4_experts,
        serving_engine=serving_engine,
        measured=ceilings is None,
        expert_parallel=expert_parallel,
        redundant_experts=redundant_experts,
        carried_rate=expert_rate,
        carried_hbm=expert_hbm,
    )
    expert_rate, expert_hbm, tile_tokens = moe.expert_rate, moe.expert_hbm, moe.tile_tokens
    floors_seconds = floors_seconds + moe.floor_seconds
    layer_flops = 2.0 * model.active_layer_parameters - routed_flops  # attention, dense, shared
    # a prompt token's attention per token of its prompt: causal, at the mean prompt (linear in
    # the prompt without a window; a window caps what each token attends to)
    attention = model.causal_attention_flops_per_token(n_in) / (0.5 * np.maximum(n_in, 1.0))
    kernel = prefill_attention or prefill_attention_kernel(accelerator.nccl_arch)
    chip = ceilings_for(accelerator) if ceilings is None else ceilings
    # at the mean prompt's length, heads split over the tensor-parallel ranks, and what the
    # call fills of the chip (Ceilings.attention_occupancy): a step's prompts share one call, a
    # budget's worth under load, one prompt where it is longer (an idle replica's short prompt
    # fills less, but its attention is a sliver of its TTFT)
    prompts = (
        np.maximum(DEFAULT_MAX_NUM_BATCHED_TOKENS / np.maximum(n_in, 1.0), 1.0)
        if attention_prompts is None
        else _f(attention_prompts)
    )
    # a windowed layer's calls (sliding-window attention) loop over the window's keys
    prompt_length = np.maximum(n_in, 1.0)
    kernel_rate = with_windowed_layers(
        chip,
        kernel,
        "forward",
        model,
        prompt_length,
        prompt_length,
        chip.attention_flops(kernel, "forward", prompt_length, model.head_dim),
    )
    attention_rate = kernel_rate * chip.attention_occupancy(prompts, model.heads / g, n_in) * g
    share = 1.0 - HBM_RESERVE_FRACTION if kv_memory_fraction is None else _f(kv_memory_fraction)
    held = weights_bytes_per_accelerator(model, w, g, pp, attention_data, redundant_experts)
    free = capacity * share - held
    gemm_per_token = (2.0 * model.matmul_parameters - routed_flops) / (decode_rate * pp * groups)
    # the same at the prompt band's rate, where a named engine's decode ratio differs from it
    large_batch = (
        gemm_per_token * decode_ratio / prompt_ratio
        if own_gemms is not None and not constants.measured_decode
        else np.full_like(_f(gemm_per_token), np.nan)
    )
    expert_gemm_per_token = routed_flops / (expert_rate * pp * groups)
    kv_read_per_token = kv_read_bytes / kv_hbm / groups
    overhead = constants.step_overhead * model.layers / OVERHEAD_FIT_LAYERS + floors_seconds
    passes = 1.0
    if two_batch_overlap:
        a2a_per_token = np.maximum(
            a2a_per_token - (gemm_per_token + expert_gemm_per_token + context * kv_read_per_token),
            0.0,
        )
        a2a_base = np.maximum(a2a_base - overhead, 0.0)
        passes = 2.0
    base = base + a2a_base
    # the all-reduce's (and exchange's) bytes grow with the batch: at the engine's fraction too
    per_token = (per_token + a2a_per_token / pp) / fraction
    allreduce_curve = allreduce_curve / fraction
    allreduce_beyond = allreduce_beyond / fraction
    # Norms, residual adds, the activation and RoPE: their bytes at the H100's measured streaming
    # rate, scaled to the chip's HBM as the KV read is; each stage runs its share of the layers.
    stream = H100_STREAM_GBPS * GB * hbm / (H100_DATASHEET_HBM_GBPS * GB) * memory_ratio * fraction
    elementwise = fused_forward_elementwise_bytes(model, g) / stream / (pp * groups)
    # Under attention data parallelism each group takes 1 / groups of a step's tokens,
    # sequences and context, and keeps their cache: the replica's costs per token divide.
    return ServingTerms(
        overhead=np.full_like(g, overhead),
        sequence_overhead=np.full_like(g, constants.sequence_overhead / groups),
        allreduce_base=base,
        allreduce_per_token=per_token,
        weights_read=passes * dense_read * split.dense_bytes / g / dense_weight_hbm,
        gemm_per_token=gemm_per_token,
        prefill_gemm_per_token=(
            layer_flops + 2.0 * model.vocab * model.hidden / np.maximum(n_in, 1.0)
        )
        / (rate * pp * groups),
        prefill_attention_per_context=_f(attention / (attention_rate * pp * groups)),
        kv_read_per_token=kv_read_per_token,
        kv_read_per_sequence=constants.kv_sequence_tokens * kv_read_bytes / kv_hbm / groups,
        context_tokens=context,
        output_tokens=n_out,
        input_tokens=n_in,
        kv_cache_tokens=groups * np.floor(np.maximum(free, 0.0) / kv_per_token),
        kv_bytes_per_token=kv_per_token,
        expert_weights_read=passes
        * routed_experts
        * split.expert_bytes
        / (g * groups)
        / expert_hbm,
        expert_miss_per_token=np.full_like(g, miss),
        expert_gemm_per_token=_f(expert_gemm_per_token) + 0.0 * g,
        allreduce_curve=_f(allreduce_curve) + 0.0 * g,
        allreduce_exponent=_f(allreduce_exponent) + 0.0 * g,
        allreduce_curve_tokens=_f(allreduce_curve_tokens) + 0.0 * g,
        allreduce_beyond_per_token=_f(allreduce_beyond) + 0.0 * g,
        elementwise_per_token=_f(elementwise) + 0.0 * g,
        gemm_per_token_large_batch=_f(large_batch) + 0.0 * g,
        attention_groups=np.full_like(g, groups),
        expert_tile_tokens=np.full_like(g, tile_tokens),
        prompts_apart=np.full_like(g, 1.0 if prompts_run_apart(serving_engine) else 0.0),
        # each attention data-parallel group's rank runs its own loop over its share
        host_per_request=np.full_like(
            g, host_seconds_per_request(serving_engine, accelerator.name) / groups
        ),
    )


# HBM kept out of the weights and the KV cache (activations, CUDA context, NCCL buffers, the
# allocator's fragmentation): vLLM's default gpu_memory_utilization is 0.9 (vllm/config.py,
# CacheConfig), i.e. 10% reserved.
HBM_RESERVE_FRACTION = 0.10


def kv_bytes_per_token_per_accelerator(
    model: Transformer, tp: int, kv_bytes: float, pipeline: int = 1, context: float | None = None
) -> float:
    """2 x layers / pp x ceil(kv_heads / tp) x head_dim x bytes (MLA: layers / pp x latent x
    bytes): one token's cache on one accelerator (a stage holds its own layers' cache), in a
    sequence of ``context`` tokens where the model has a sliding window."""
    return float(kv_elements_per_token_per_accelerator(model, tp, context)) * kv_bytes / pipeline


def decode_gemm_seconds_per_token(terms: ServingTerms, sequences: ArrayLike) -> F64:
    """One decode token's dense GEMM FLOPs in a step of ``sequences`` decodes: at the decode
    band's rate up to ENGINE_GEMM_BAND_TOKENS[0] decodes a group, at the prompt band's from
    ENGINE_GEMM_BAND_TOKENS[1], between them by log n (the rate, not the time, interpolated)."""
    small = terms.gemm_per_token
    large = np.where(
        np.isnan(terms.gemm_per_token_large_batch), small, terms.gemm_per_token_large_batch
    )
    low, high = ENGINE_GEMM_BAND_TOKENS
    batch = np.maximum(_f(sequences) / terms.attention_groups, 1.0)
    w = np.clip(np.log(batch / low) / math.log(high / low), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = (1.0 - w) / small + w / large
        # one rate at every batch (no engine table) stays exactly the decode band's
        return _f(np.where((small > 0) & (large < small), 1.0 / rate, small))


def step_seconds(
    terms: ServingTerms,
    sequences: ArrayLike,
    prompt_tokens: ArrayLike,
    context_tokens: ArrayLike | None = None,
    prompt_length: ArrayLike | None = None,
) -> F64:
    """One step that decodes ``sequences`` whose contexts sum to ``context_tokens`` (default:
    each at the mean context) and prefills ``prompt_tokens`` of prompts ``prompt_length`` long
    (default: the mean; a causal prompt token attends to half its prompt on average) alongside
    (see the module's docstring). Where the engine runs prompts apart (``terms.prompts_apart``),
    the step is the decodes' pass plus, when there are prompt tokens, the prompts' own."""
    n = _f(sequences)
    p = _f(prompt_tokens) * terms.prompt_compute
    context = n * terms.context_tokens if context_tokens is None else _f(context_tokens)
    length = terms.input_tokens if prompt_length is None else _f(prompt_length)
    together = _forward_pass(terms, n, p, context, length)
    apart = _f(terms.prompts_apart) > 0.0
    if not np.any(apart):
        return together
    zero = np.zeros_like(n)
    decodes = np.where(n > 0.0, _forward_pass(terms, n, zero, context, length), 0.0)
    prompts = np.where(p > 0.0, _forward_pass(terms, zero, p, zero, length), 0.0)
    # an empty step (nothing to run) keeps the one pass's fixed cost, as a mixing engine's
    separate = np.where((n > 0.0) | (p > 0.0), decodes + prompts, together)
    return _f(np.where(apart, separate, together))


def _forward_pass(terms: ServingTerms, n: F64, p: F64, context: F64, length: F64) -> F64:
    """One forward pass over ``n`` decodes (contexts summing to ``context``) and ``p`` computed
    prompt tokens of prompts ``length`` long."""
    # Two rooflines, one per kernel family: the dense GEMMs against the dense weights, the
    # routed experts' grouped GEMMs against the experts the step touches.
    dense = np.maximum(
        n * decode_gemm_seconds_per_token(terms, n) + p * terms.prefill_gemm_per_token,
        terms.weights_read,
    )
    experts = np.maximum(expert_compute_seconds(terms, n + p), expert_read_seconds(terms, n + p))
    gemm = _f(dense + experts)
    device = (
        terms.overhead
        + terms.allreduce_base
        + n * terms.sequence_overhead
        + step_allreduce_seconds(terms, n, p)
        + (n + p) * terms.elementwise_per_token
        + gemm
        + context * terms.kv_read_per_token
        + n * terms.kv_read_per_sequence
        + p * 0.5 * length * terms.prefill_attention_per_context
    )
    return _f(np.maximum(device, host_seconds(terms.host_per_request, n, p, length)))


def host_seconds(
    per_request: ArrayLike, decodes: ArrayLike, prompts: ArrayLike, length: ArrayLike
) -> F64:
    """The host's loop over a step's requests (its decodes and the prompts it carries, each
    ``length`` tokens) at ``per_request`` seconds each (ServingTerms.host_per_request): what an
    overlapping scheduler hides behind the GPU's step up to its length."""
    requests = _f(decodes) + _f(prompts) / np.maximum(_f(length), 1.0)
    return _f(requests * _f(per_request))


def prefill_seconds(terms: ServingTerms, prompt_tokens: ArrayLike) -> F64:
    """A step carrying one prompt and nothing else: its TTFT on an idle replica."""
    return step_seconds(terms, 0.0, prompt_tokens, prompt_length=prompt_tokens)
