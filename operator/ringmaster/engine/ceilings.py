"""What each accelerator's silicon sustains, per precision: the one place training and serving read.

The engine's first layer (DESIGN.md, "The engine's layers"): ceilings are kernel-level rates,
not framework choices. A step is composed from them by :mod:`ringmaster.engine.step_parts`
(which kernels a framework runs) and :mod:`ringmaster.engine.llm_training` (the layout).

- **Matmuls**: a GEMM whose two narrow dimensions are ``width`` and ``tokens`` reaches
  ``E_p / (1 + K / width + K / tokens)`` of the dense peak at precision ``p`` (tile and wave
  quantisation amortise over the narrow sides), and never more than the **sustained** rate the
  power cap allows once the chip runs GEMMs for seconds (a training step does). Burst (a cold chip,
  the first tens of milliseconds) is higher; serving's short, memory-bound steps run nearer it.
- **Attention kernels** (FlashAttention 2 as PyTorch ships it, cuDNN's fused attention as
  Transformer Engine and PyTorch run it on Hopper, XLA's Splash on TPU): forward and backward
  each reach ``E / (1 + s0 / s + d0 / d)`` of the 16-bit peak at sequence length ``s`` and head
  dimension ``d``, over the causal FLOPs (half the square).
- **Memory-bound kernels** (norms, RoPE, SwiGLU, residual adds, the loss over the vocabulary, the
  optimizer): seconds per element as measured, eager or compiled, scaled to another chip by its
  achieved HBM bandwidth (they stream HBM; nothing else binds them).

The H100 SXM numbers are fitted on the team's own operator measurements
(``calibration/measured/h100-sxm-ops.yaml``: one H100 80GB HBM3 SXM, 700 W, PyTorch 2.11, CUDA
13.0); :mod:`ringmaster.calibration.ceilings` refits every one of them and a test keeps the values
below equal to the fit. A chip without its own measurement carries the H100's fractions of its own
datasheet, and says so (:attr:`Ceilings.evidence`): the plan shows it, never silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.hardware import Accelerator
from ringmaster.engine.units import GB, TERA

MEASURED_H100 = (
    "measured: calibration/measured/h100-sxm-ops.yaml (one H100 SXM 700 W, PyTorch 2.11)"
)
"""The evidence string of every number fitted on the team's H100 measurements."""

# --- the H100 SXM (700 W), fitted on calibration/measured/h100-sxm-ops.yaml ----------------------

# GEMM shape model on the grid's rows with M >= 1024 (216 shapes: qkv / out / gate_up / down of
# hidden 2048-16384 at tp 1, 2, 8), least squares of the log error: E and K per precision.
# Median |error| 8.7 % (bf16), 9.4 % (fp8), 9.3 % (fp8 fast accumulation). K agrees with the 224
# fitted on Megatron-LM's A100 step times before this module existed (an independent check).
H100_GEMM_EFFICIENCY = {"bf16": 0.8114, "fp8": 0.7599, "fp8fast": 0.791}
H100_GEMM_HALF_DIM = {"bf16": 220.0, "fp8": 411.0, "fp8fast": 405.0}
# The power cap: the grid's largest GEMM (32768 x 16384 x 114688) run for seconds. bf16: the
# full-shape calls' median TFLOP/s over both runs (714.4, 698.8); fp8 with fast accumulation: the
# 1024-row slices' median (1362, 1358); fp8 without it scaled by the grid's fp8 / fp8fast ratio on
# its largest shapes. Burst: the first 50 ms after 3 s idle (777.2 / 759.3 bf16, 1510 / 1491 fp8).
H100_SUSTAINED_TFLOPS = {"bf16": 706.6, "fp8": 1289.7, "fp8fast": 1360.0}
H100_BURST_TFLOPS = {"bf16": 768.2, "fp8": 1423.0, "fp8fast": 1500.5}
# Attention, causal, bf16, GQA in the kernel (16,384 tokens a call): E, s0, d0 per kernel and
# direction, fitted on the 36 rows of each (head dim 64 and 128, 8-64 heads, s 1k-32k). Median
# |error|: flash forward 7.2 %, backward 3.4 %; cuDNN forward 5.4 %, backward 3.2 %.
H100_ATTENTION = {
    ("flash2", "forward"): (0.4209, 500.0, 26.0),
    ("flash2", "backward"): (0.4013, 1050.0, 26.0),
    ("cudnn", "forward"): (1.0637, 775.0, 84.0),
    ("cudnn", "backward"): (0.8509, 1875.0, 60.0),
}
# A causal attention call fills the chip by its tiles (calibration/measured/device, the
# step_kernels part, 2026-11-27d): P sequences x H heads x n = ceil(s / 128) query tiles, the
# last n key blocks long, finish no sooner than Graham's list-scheduling bound, the work over
# the SMs plus alpha x the longest tile. H100_ATTENTION's rates were measured at 16,384 tokens a
# call (nearly full), so a call runs at them times its occupancy over that reference's. Fitted
# (calibration.ceilings.fit_attention_occupancy: alpha, and a floor in us a call that the
# engine's large calls do not need) on one lent H100's 36 calls (FlashAttention 2 and cuDNN, 16
# and 32 heads, one prompt of 128-8,192 tokens, two batched ones): 34.0 % -> 4.9 % median
# |error|; checked on a lent H200's 36 (33.6 % -> 5.7 %) and on AIConfigurator's
# prefill-attention tables (median over 12: 29.5 % -> 22.6 %).
ATTENTION_OCCUPANCY = (0.5, 5.0)
ATTENTION_TILE_TOKENS = 128.0
ATTENTION_REFERENCE_TOKENS = 16384.0
ATTENTION_REFERENCE_HEADS = 32.0  # the measured rows' median (8, 32, 64 heads)
# The SMs (AMD: compute units) a chip spreads those tiles over: NVIDIA's V100, T4, A100 and H100
# architecture whitepapers (80, 40, 108, 132 on the SXM parts; the H200 is the H100's die), the
# B200's 148 from its CUDA device properties as published with FlashAttention 3/4's Blackwell
# results, AMD's CDNA 3 white paper (304 CUs on the MI300X and MI325X). A TPU's attention kernels
# do not tile over SMs: its calls run at the measured rate (no occupancy modelled).
ATTENTION_SMS = {
    "nvidia-tesla-v100": 80.0,
    "nvidia-tesla-t4": 40.0,
    "nvidia-tesla-a100": 108.0,
    "nvidia-a100-80gb": 108.0,
    "nvidia-h100-80gb": 132.0,
    "nvidia-h200-141gb": 132.0,
    "nvidia-b200": 148.0,
    "nvidia-gb200": 148.0,
    "amd-mi300x": 304.0,
    "amd-mi325x": 304.0,
}
H100_SMS = 132.0
# A TPU's matrix units are systolic arrays this many multiply-accumulators a side: 128 x 128 on
# v2 to v5p ("An MXU is composed of 128 x 128 multiply-accumulators in a systolic array", Cloud
# TPU system architecture), 256 x 256 on v6e ("Each TensorCore contains two 256x256
# matrix-multiply units", Cloud TPU v6e documentation). Attention's matmuls carry the head
# dimension on one side (Q K^T and dO V^T contract over it; P V, dS K, dS^T Q and P^T dO produce
# it), so an array wider than the head dimension runs them partly empty: head_dim / width of it.
# The attention rates a TPU carries (the H100's kernels' fractions of peak) were checked on
# 128-wide arrays (MaxText on v5e and v5p): a chip runs attention at its fill over theirs
# (:func:`mxu_attention_fill`). Architecture, not fitted; the GEMMs' sides (hidden and FFN widths,
# multiples of 256) fill either array.
TPU_MXU_WIDTH = {
    "tpu-v2": 128.0,
    "tpu-v3-slice": 128.0,
    "tpu-v4-podslice": 128.0,
    "tpu-v5-lite-podslice": 128.0,
    "tpu-v5p-slice": 128.0,
    "tpu-v6e-slice": 256.0,
}
CHECKED_MXU_WIDTH = 128.0


def mxu_attention_fill(width: float, head_dim: float) -> float:
    """Attention's rate on ``width``-wide matrix units over its rate on the 128-wide ones its
    carried rates were checked on: the share of the array a head dimension fills, relative."""
    return min(1.0, head_dim / width) / min(1.0, head_dim / CHECKED_MXU_WIDTH)


OCCUPANCY_MEASURED_CHIPS = frozenset({"nvidia-h100-80gb", "nvidia-h200-141gb"})

# Memory-bound kernels, forward + backward, picoseconds per element (the median over hidden
# 2048-16384 of the measured ps_per_element). Elements: rmsnorm and the residual add T h, RoPE
# T (h + h_kv), SwiGLU T f. The residual add is forward only (its backward passes through), so a
# layer's two adds count twice more for the gradients' adds at the forks.
H100_ELEMENTWISE_PS = {
    "eager": {"rmsnorm": 7.168, "rope": 16.43, "swiglu": 9.204, "residual_add": 2.264},
    "compiled": {"rmsnorm": 4.918, "rope": 14.01, "swiglu": 5.291, "residual_add": 2.039},
}
# Hugging Face's modeling code run eagerly (plain PyTorch, DeepSpeed: LlamaRMSNorm composed of
# pow / mean / rsqrt / multiplies in fp32, rotate_half RoPE with a cat, the attention output's
# transpose copy), forward + backward, picoseconds per element (the median over hidden
# 2048-4096, T = 8192), measured on a lent H100 (calibration/measured/device/2026-11-26b-h100,
# ops.json) per regime. autocast: bf16 autocast over fp32 weights (DDP with AMP, Accelerate, the
# HF Trainer): the residual stream is fp32, every linear layer casts its input and its weight
# (per parameter) to bf16; bf16: bf16 weights (FSDP's MixedPrecision(param_dtype=bf16), DeepSpeed
# with bf16 on). fork_add: the add that sums a tensor's gradients where it feeds two ops.
H100_HF_EAGER_PS = {
    "autocast": {
        "rmsnorm": 46.826,
        "residual_add": 6.285,
        "fork_add": 4.081,
        "cast": 5.347,
        "weight_cast": 5.12,
        "rope": 28.308,
        "swiglu": 9.28,
        "transpose": 6.508,
    },
    "bf16": {
        "rmsnorm": 53.413,
        "residual_add": 3.283,
        "fork_add": 2.11,
        "rope": 28.308,
        "swiglu": 9.28,
        "transpose": 6.508,
    },
}
MEASURED_HF_OPS = (
    "measured: calibration/measured/device/2026-11-26b-h100/ops.json (one H100 SXM 700 W,"
    " PyTorch 2.11)"
)
# A fused kernel (Transformer Engine's norms, fused RoPE and SwiGLU; XLA's fusions) moves each
# tensor once: the minimum bytes per element (rmsnorm 10, RoPE 8, SwiGLU 16, add 6: the file's
# byte columns) at the streaming rate Inductor's SwiGLU reaches (3,024 GB/s, the median of its
# forward + backward rows). Assumed, not measured: no fused TE kernel was timed.
H100_STREAM_GBPS = 3024.0
FUSED_BYTES_PER_ELEMENT = {"rmsnorm": 10.0, "rope": 8.0, "swiglu": 16.0, "residual_add": 6.0}
# Their forwards alone (each tensor read or written once, bf16): RMSNorm reads x and writes y (4),
# RoPE reads and writes q and k (4), SwiGLU reads gate and up and writes their product (6 per
# product element; a GELU reads and writes one, 4), the residual add reads two and writes one (6):
# what an inference step's fused kernels move per token (engine.llm_step).
FUSED_FORWARD_BYTES_PER_ELEMENT = {
    "rmsnorm": 4.0,
    "rope": 4.0,
    "swiglu": 6.0,
    "gelu": 4.0,
    "residual_add": 6.0,
}
# Cross-entropy over the vocabulary, forward + backward, picoseconds per logit (8,192 tokens;
# median over vocab 32k-152k). eager_upcast: bf16 logits cast to fp32 first (torchtitan, Hugging
# Face); eager_fp32: fp32 logits; compiled: Inductor's fused kernel (any dtype).
H100_LOSS_PS_PER_LOGIT = {"eager_upcast": 16.955, "eager_fp32": 11.965, "compiled": 2.84}
# Optimizer and its bookkeeping, picoseconds per parameter (median over 0.1-2 B parameters):
# AdamW fused (one kernel over all tensors) and foreach (PyTorch's default on CUDA); a gradient
# accumulated into fp32 main grads; the bf16 copy of fp32 masters; zeroing the fp32 grads.
H100_OPTIMIZER_PS_PER_PARAMETER = {
    "adamw_fused": 10.555,
    "adamw_foreach": 29.795,
    "grad_accumulate": 4.755,
    "copy_back": 2.268,
    "zero_grads": 1.547,
}
# Achieved HBM: a device-to-device copy of 16 GiB, bytes read + written / time (3,034 GB/s of the
# datasheet's 3,350): what scales the memory-bound kernels to other chips.
H100_COPY_GBPS = 3034.0
H100_DATASHEET_HBM_GBPS = 3350.0
H100_PEAK_TFLOPS = {"bf16": 989.4, "fp8": 1978.9}

# --- the decode step (serving), fitted on the same file ------------------------------------------

# GEMMs at decode batches: the grid's rows with M = 1, 8, 32, 128, 512 (360 rows a precision: 72
# shapes, qkv / out / gate_up / down of hidden 2048-16384 at tp 1, 2, 8). One call takes
# ``floor + max(weight bytes / (f_w x HBM datasheet), FLOPs / (E_d / (1 + K_p / width) x peak))``:
# at small M it streams the weights (nothing else binds), at a few hundred rows it turns
# compute-bound at the shape model's width term (K_p = H100_GEMM_HALF_DIM) with its own E_d (the
# token term of the M >= 1024 model does not describe small M: it would put M = 128 28 % high).
# Least squares of the log error over a grid of (floor, f_w, E_d). Value: (f_w, floor in
# microseconds, E_d). Median |error| 3.7 % (bf16), 3.3 % (fp8), 3.2 % (fp8 fast accumulation),
# largest 23-29 % (the wave-quantised M = 128-512 rows of the widest shapes). f_w (0.84 of 3,350
# GB/s) is the fraction gpt-fast's batch-1 decode gave before it was measured (0.8419).
H100_DECODE_GEMM = {
    "bf16": (0.84, 7.0, 0.8),
    "fp8": (0.84, 6.9, 0.74),
    "fp8fast": (0.845, 6.9, 0.78),
}
# Decode attention (one query token a sequence, GQA 32 / 8 heads, head dim 128, bf16 KV, batch
# 1-256, context 512-32k: 20 rows a kernel, mode gqa): one call takes ``floor + KV bytes /
# (f_kv x HBM datasheet)``, so the achieved fraction ``f_kv x bytes / (bytes + floor x f_kv x
# HBM)`` grows with batch x context (a per-sequence term fits at zero tokens: the bytes decide).
# Value: (f_kv, floor in microseconds). FlashAttention 2 (what vLLM's flash backend runs):
# median |error| 4.0 %, largest 14.1 % (batch 1, context 8k); cuDNN: 1.0 %, largest 20.9 %
# (batch 1, context 512). The rows are contiguous KV (no block table): a paged kernel is no
# faster, so f_kv is the bound a serving engine reads at.
H100_DECODE_ATTENTION = {"flash2": (0.8, 13.3), "cudnn": (0.925, 10.1)}
# The kernel serving's decode attention runs (vLLM's FLASH_ATTN backend, FlashAttention's
# decode path), and the GEMM calls of one layer (QKV, output, gate + up, down).
DECODE_ATTENTION_KERNEL = "flash2"
DECODE_GEMMS_PER_LAYER = 4
# The smallest device times measured (CUDA-graph-like, no launch gaps): a GEMM 5.8-6.1 us (tp 8,
# hidden 2048, M <= 32), a decode attention 11.1 us (cuDNN, batch 1, context 512): the fitted
# floors above sit 0.9-2.2 us above them (each floor is the intercept of its whole fit).


# --- other chips: published ratios to the H100, same source and method -----------------------

# Maximum achievable matmul (burst, best of a shape sweep, torch.mm) as a fraction of each chip's
# dense peak, over the H100 SXM's in the same table (stas00/ml-engineering
# compute/accelerator/README.md @ 744d01e, "Maximum Achievable Matmul FLOPS"; H100 0.803 bf16,
# 0.709 fp8): the H100's measured GEMM model (shape, power cap) is scaled by it. One source and one
# method for every chip, so the ratio holds what the absolute figures do not (the H100's own MAMF
# is a burst figure above its measured sustained rate). calibration.ceilings refits them from
# calibration/ceilings_points.yaml.
PUBLISHED_MATMUL_RATIO: dict[tuple[str, str], float] = {
    ("nvidia-tesla-a100", "bf16"): 1.0825,
    ("nvidia-a100-80gb", "bf16"): 1.0825,
    # The H200: measured, not published. The PoolProfile payload's burst GEMM (the first 50 ms,
    # the kind of figure the table's are) on a lent H200 over a lent H100, same method and day
    # (calibration/measured/device; calibration.ceilings.MEASURED_PAIRS). Its power cap is
    # MEASURED_SUSTAINED_RATIO's.
    ("nvidia-h200-141gb", "bf16"): 0.9943,
    ("nvidia-h200-141gb", "fp8"): 1.0084,
    ("nvidia-b200", "bf16"): 0.9658,
    ("nvidia-b200", "fp8"): 1.0762,
    ("nvidia-gb200", "bf16"): 0.9076,
    ("nvidia-gb200", "fp8"): 1.0202,
    # AMD: the same table's bf16 rows (torch.mm, TunableOp); FP8 as bf16 x AMD's own FP8 / BF16
    # ratio of maximum achievable FLOPS (ROCm/rocm-blogs measuring-max-achievable-flops part 2).
    ("amd-mi300x", "bf16"): 0.6367,
    ("amd-mi300x", "fp8"): 0.6484,
    ("amd-mi325x", "bf16"): 0.7476,
    ("amd-mi325x", "fp8"): 0.7631,
}
# Achieved HBM (BabelStream triad on Azure's ND v4 / v5 machines, Azure/AI-benchmarking-guide
# Azure_Results/*_results.md @ 8fd0): each chip's fraction of its datasheet over the H100's
# (0.887), applied to the H100's measured copy fraction.
PUBLISHED_HBM_RATIO: dict[str, float] = {
    "nvidia-a100-80gb": 0.9404,
    "nvidia-h200-141gb": 0.9859,  # measured: the payload's copy on the lent H200 over the H100's
    "amd-mi300x": 0.8726,
}
# FlashAttention 2 is tuned for Ampere: forward + backward, causal, head dim 128, 16k tokens, it
# reaches 189 of the A100's 312 TFLOP/s and 328 of the H100's 989.4 (Dao-AILab/flash-attention
# assets/flash2_a100_fwd_bwd_benchmark.png and flash2_h100_fwd_bwd_benchmark.png @ 0251105): on
# Ampere its fraction of peak is this multiple of the H100's measured one.
FLASH2_AMPERE_RATIO = 1.8273
# Triton's pre-MLIR FlashAttention (flash_attn_triton under the triton-pre-mlir fork, llm-foundry's
# attn_impl: triton through 2023): its rate as a fraction of FlashAttention 2's on the same chip,
# forward and backward alike. Never measured here; fitted (calibration.llm_training.
# fit_triton_attention) on llm-foundry's A100-80GB MPT table, whose runs used it, with every other
# part of the step composed; checked on its A100-40GB and H100 tables. FlashAttention 2's paper
# (Dao 2023, section 4.1) puts FlashAttention 2 1.3-2.5x faster than "FlashAttention in Triton":
# 0.4-0.77 of its rate, which the fit lands inside. A kernel for the calibration's rows (a job
# cannot name it: llm-foundry runs FlashAttention 2 today).
TRITON_FLASH_ATTENTION_RATIO = 0.647


MEASURED_PAIR_CHIPS = frozenset({"nvidia-h200-141gb"})
"""Chips whose ratios above were measured beside an H100 (calibration.ceilings.MEASURED_PAIRS)."""
# Their sustained (power-capped) GEMM rate over the H100's, measured the same way: the H200 holds
# 3 % less than the H100 under the same 700 W (its larger HBM draws more of the budget), where its
# burst rate is the H100's. The power cap of a measured pair scales by this, not by the burst.
# The decode step's terms measured on the lent H200 itself (calibration.ceilings
# .fit_device_decode on calibration/measured/device/2026-11-26-h200/decode_ops.json, fractions of
# its own 4,800 GB/s): bf16 GEMMs at M = 1-512 (f_w, floor us, E_d) and FlashAttention's decode
# attention (f_kv, floor us). The KV read reaches 0.60 of the H200's HBM, not the H100's 0.80
# scaled by the HBM ratio: at large batch the kernel is bound by the SMs (2.6-2.8 TB/s on both
# chips). FP8 GEMMs and cuDNN's decode attention are carried from the H100.
# The A100, B200 and GB200, never measured here: the H100's fractions times the chip's over the
# H100's in NVIDIA AIConfigurator's vLLM databases (one collector and vLLM build on both chips;
# calibration.aiconfigurator.ratio_decode_terms, on calibration/measured/aiconfigurator.json),
# the H100's floors carried. On the H200 the method gives f_w 0.835, E_d 0.85 and f_kv 0.70
# against the lent one's 0.845, 0.85 and 0.6025: FlashAttention 3 (vLLM's kernel) loses less of
# the H100's rate on the H200 than FlashAttention 2 does.
CHIP_DECODE_TERMS: dict[str, dict[str, tuple[float, ...]]] = {
    "nvidia-h200-141gb": {"bf16": (0.845, 4.9, 0.85), "flash2": (0.6025, 9.1)},
    "nvidia-a100-80gb": {"bf16": (0.672, 7.0, 0.73), "flash2": (0.7027, 13.3)},
    "nvidia-b200": {"bf16": (0.7945, 7.0, 0.7), "flash2": (0.8579, 13.3)},
    "nvidia-gb200": {"bf16": (0.7995, 7.0, 0.66), "flash2": (0.8022, 13.3)},
}
AIC_DECODE_CHIPS = frozenset({"nvidia-a100-80gb", "nvidia-b200", "nvidia-gb200"})
"""Chips whose CHIP_DECODE_TERMS come from AIConfigurator's databases, not a lent GPU."""
AIC_SOURCE = "ai-dynamo/aiconfigurator @ 095f58a5, its vLLM operator databases"
# A MoE layer's grouped expert GEMM (torch._grouped_mm over a rank's local experts) streams their
# weights no faster than this on Hopper, whatever the HBM: the lent H100 and H200 streamed the
# same shapes at 2.0-2.8 TB/s alike, though the H200 has 1.43x the HBM (its dense decode GEMMs
# reach 0.845 of it, 4.1 TB/s), so the kernel is bound by its SMs there. Fitted on the H100: the
# median rate of its weight-bound calls (32 tokens an expert or fewer, 100 us or more, so the
# floor is negligible; calibration.device_steps.fit_grouped_stream_cap); the H200 (the same 132
# SMs and clocks) carries it, and its 50 measured calls check it. Other chips run other kernels:
# no cap, their decode GEMMs' streaming fraction alone (said in their evidence).
GROUPED_STREAM_CAP_GBPS = 2614.0
GROUPED_STREAM_CAP_CHIPS = ("nvidia-h100-80gb", "nvidia-h200-141gb")
# FP8 grouped GEMMs are priced by the FP8 decode terms under the bf16 cap; torch's rowwise FP8
# kernel (torch._scaled_grouped_mm, torchao's float8 MoE path) ran slower than that on a lent
# H200 (calibration/measured/device/2026-11-30-h200/grouped_fp8.json, 50 calls: -21.5 % at the
# median, most at 512+ tokens an expert, 0.44-0.69 of the FP8 peak; streaming 1.9-2.7 TB/s by
# the expert's size). Checked, not fitted: Transformer Engine's and DeepGEMM's grouped FP8
# kernels, which the published FP8 MoE runs use, were not measured.
GROUPED_FP8_CHECK = (
    "torch._scaled_grouped_mm ran 21 % slower on a lent H200, checked: "
    "calibration/measured/device/2026-11-30-h200"
)
MEASURED_SUSTAINED_RATIO: dict[tuple[str, str], float] = {
    ("nvidia-h200-141gb", "bf16"): 0.9715,
    ("nvidia-h200-141gb", "fp8"): 0.9741,
}
# Published sustained matmul over the H100's, as fractions of each chip's peak: Azure's
# AI-benchmarking-guide runs cuBLASLt FP8 at m = n = k = 16384 after 10,000 warm-up iterations on
# every chip (Azure_Results/ND_*_results.md; calibration.ceilings.SUSTAINED_ROWS), so each chip
# sits at its power cap: the GB200 held 2,695 of 5,000 TFLOP/s (0.54) where the H100 held 1,377
# of 1,979 (0.70), though its burst fraction is the H100's (MAMF 0.72 against 0.71). Its whole
# table is flat from 4096^3 up (2,579-2,710), a cap, not a kernel. The same method reads the
# H200's power cap within 2 % of the lent pair's measurement (0.992 against 0.974). The B200 (the
# same GPU on 1,000 W, against the GB200's 1,200 W) has no such row: it carries the GB200's drop
# from burst to sustained (0.759) on its own burst ratio, and its evidence says so
# (CARRIED_SUSTAINED). BF16 has no sustained row on Blackwell: its cap scales by the burst ratio.
PUBLISHED_SUSTAINED_RATIO: dict[tuple[str, str], float] = {
    ("nvidia-gb200", "fp8"): 0.7744,
    ("nvidia-b200", "fp8"): 0.8169,
}
CARRIED_SUSTAINED = {"nvidia-b200": "nvidia-gb200"}
SUSTAINED_SOURCE = "Azure/AI-benchmarking-guide cuBLASLt FP8 16384^3 after 10,000 warm-ups"


def sustained_ratio(accelerator: str, precision: str, burst: float) -> float:
    """The chip's power-capped matmul fraction of peak over the H100's: measured beside an H100,
    else published (PUBLISHED_SUSTAINED_RATIO), else its ``burst`` ratio."""
    key = (accelerator, precision)
    return MEASURED_SUSTAINED_RATIO.get(key, PUBLISHED_SUSTAINED_RATIO.get(key, burst))


def matmul_ratio(accelerator: str, precision: str) -> float:
    """The chip's published matmul fraction of its own peak over the H100's, at ``precision``'s
    tensor-core rate (1 where none is published: the H100's fraction carried over). FP4 is over
    the H100's FP8: measured where MEASURED_FP4_MATMUL_RATIO has the chip, else FP8's carried."""
    key = "fp8" if precision in ("fp8", "fp4") else "bf16"
    carried = PUBLISHED_MATMUL_RATIO.get((accelerator, key), 1.0)
    if precision == "fp4":
        return MEASURED_FP4_MATMUL_RATIO.get(accelerator, carried)
    return carried


def hbm_ratio(accelerator: str) -> float:
    """The chip's published achieved-HBM fraction of its datasheet over the H100's (1 where none
    is published)."""
    return PUBLISHED_HBM_RATIO.get(accelerator, 1.0)


@dataclass(frozen=True)
class Ceilings:
    """One accelerator's ceilings at every precision it has, and where each comes from."""

    accelerator: str
    peak_flops: Mapping[str, float]  # the datasheet's dense peaks (FLOP/s)
    gemm_efficiency: Mapping[str, float]  # E_p of the shape model
    gemm_half_dim: Mapping[str, float]  # K_p
    sustained_flops: Mapping[str, float]  # the power-capped GEMM rate, FLOP/s
    burst_flops: Mapping[str, float]
    attention: Mapping[tuple[str, str], tuple[float, float, float]]
    hbm_scale: float  # H100's achieved HBM / this chip's: multiplies every memory-bound time
    evidence: Mapping[str, str] = field(default_factory=dict)  # quantity -> its evidence
    # The decode step (serving): (f_w, floor us, E_d) per GEMM precision and (f_kv, floor us)
    # per attention kernel, f as fractions of ``memory_bandwidth`` (the datasheet's, bytes/s).
    decode_gemm: Mapping[str, tuple[float, float, float]] = field(
        default_factory=lambda: dict(H100_DECODE_GEMM)
    )
    decode_attention: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: dict(H100_DECODE_ATTENTION)
    )
    memory_bandwidth: float = H100_DATASHEET_HBM_GBPS * GB
    # The grouped expert GEMM's streaming ceiling, bytes/s (None: the decode GEMMs' fraction).
    grouped_stream_cap: float | None = None
    # where attention's tiles run (ATTENTION_SMS); None: no occupancy modelled (a TPU)
    sms: float | None = H100_SMS
    # a TPU's matrix-unit width (TPU_MXU_WIDTH); None: a GPU
    mxu_width: float | None = None

    def gemm_flops(
        self, precision: str, width: ArrayLike, tokens: ArrayLike, *, sustained: bool = True
    ) -> NDArray[np.float64]:
        """Achieved FLOP/s of a GEMM of narrow sides ``width`` and ``tokens`` (numpy-friendly)."""
        p = _gemm_key(precision)
        e, k = self.gemm_efficiency[p], self.gemm_half_dim[p]
        shape = e / (1.0 + k / np.asarray(width, float) + k / np.asarray(tokens, float))
        rate = shape * self.peak_flops[_peak_key(p)]
        cap = (self.sustained_flops if sustained else self.burst_flops)[p]
        return np.asarray(np.minimum(rate, cap), dtype=np.float64)

    def attention_flops(
        self, kernel: str, direction: str, sequence: ArrayLike, head_dim: float
    ) -> NDArray[np.float64]:
        """Achieved FLOP/s (causal FLOPs) of an attention kernel at 16-bit."""
        if kernel == "triton":  # Triton's pre-MLIR FlashAttention: FlashAttention 2's shape
            e, s0, d0 = self.attention[("flash2", direction)]
            e = e * TRITON_FLASH_ATTENTION_RATIO
        else:
            e, s0, d0 = self.attention[(kernel, direction)]
        s = np.asarray(sequence, dtype=np.float64)
        fill = 1.0 if self.mxu_width is None else mxu_attention_fill(self.mxu_width, head_dim)
        return np.asarray(
            e / (1.0 + s0 / s + d0 / float(head_dim)) * self.peak_flops["bf16"] * fill,
            dtype=np.float64,
        )

    def attention_occupancy(
        self,
        sequences: ArrayLike,
        heads: ArrayLike,
        sequence: ArrayLike,
        alpha: float | None = None,
    ) -> NDArray[np.float64]:
        """A causal attention call of ``sequences`` x ``heads`` (a rank's) x ``sequence``
        tokens: its rate over the measured rates' (ATTENTION_OCCUPANCY), which were fitted on
        calls of ATTENTION_REFERENCE_TOKENS at every head count at once (referred to
        ATTENTION_REFERENCE_HEADS): below 1 where the call's tiles leave SMs idle. ``alpha``:
        the law's coefficient (None: ATTENTION_OCCUPANCY's; calibration refits it)."""
        alpha = ATTENTION_OCCUPANCY[0] if alpha is None else alpha
        s = np.maximum(np.asarray(sequence, float), 1.0)
        if self.sms is None:
            return np.ones(np.broadcast(s, sequences, heads).shape)
        sms = self.sms
        blocks = np.ceil(s / ATTENTION_TILE_TOKENS) + 1.0  # n + 1: twice the mean tile's work

        def stretch(tiles: ArrayLike) -> NDArray[np.float64]:
            """Graham's bound over the ideal: 1 + alpha x the longest tile / the work an SM."""
            return np.asarray(1.0 + alpha * sms * 2.0 / (np.asarray(tiles) * blocks))

        reference = np.maximum(ATTENTION_REFERENCE_TOKENS / s, 1.0) * ATTENTION_REFERENCE_HEADS
        calls = np.asarray(sequences, float) * np.asarray(heads, float)
        return np.asarray(stretch(reference) / stretch(calls), dtype=np.float64)

    def decode_gemm_seconds(
        self,
        precision: str,
        weight_bytes: ArrayLike,
        flops: ArrayLike,
        width: ArrayLike,
        stream_bytes_per_s: float | None = None,
    ) -> NDArray[np.float64]:
        """One GEMM call at a decode batch: its floor, then the weights streamed (at the decode
        GEMMs' fraction of the HBM, or ``stream_bytes_per_s``) or the FLOPs at the decode rate
        of its narrow side ``width``, whichever binds."""
        p = _gemm_key(precision)
        f_w, floor_us, e_d = self.decode_gemm[p]
        rate = (
            e_d
            / (1.0 + self.gemm_half_dim[p] / np.asarray(width, float))
            * self.peak_flops[_peak_key(p)]
        )
        if stream_bytes_per_s is None:
            stream_bytes_per_s = f_w * self.memory_bandwidth
        stream = np.asarray(weight_bytes, float) / stream_bytes_per_s
        return np.asarray(
            floor_us * 1e-6 + np.maximum(stream, np.asarray(flops, float) / rate), dtype=np.float64
        )

    def grouped_stream_bytes_per_s(self, precision: str) -> float:
        """How fast a grouped expert GEMM streams its experts' weights: the decode GEMMs'
        fraction of the HBM, under the grouped kernel's own cap where one is measured."""
        rate = self.decode_gemm[_gemm_key(precision)][0] * self.memory_bandwidth
        return rate if self.grouped_stream_cap is None else min(rate, self.grouped_stream_cap)

    def grouped_gemm_seconds(
        self, precision: str, weight_bytes: ArrayLike, flops: ArrayLike, width: ArrayLike
    ) -> NDArray[np.float64]:
        """One grouped expert GEMM call: a decode GEMM streaming at the grouped kernel's rate."""
        return self.decode_gemm_seconds(
            precision, weight_bytes, flops, width, self.grouped_stream_bytes_per_s(precision)
        )

    def kv_read_seconds(self, kernel: str, kv_bytes: ArrayLike) -> NDArray[np.float64]:
        """One decode-attention call reading ``kv_bytes`` of KV cache."""
        f_kv, floor_us = self.decode_attention[kernel]
        return np.asarray(
            floor_us * 1e-6 + np.asarray(kv_bytes, float) / (f_kv * self.memory_bandwidth),
            dtype=np.float64,
        )

    def kv_read_efficiency(self, kernel: str, kv_bytes: ArrayLike) -> NDArray[np.float64]:
        """The achieved fraction of the datasheet's HBM of one decode-attention call: it grows
        with the bytes a call reads (batch x context) towards ``f_kv``."""
        seconds = self.kv_read_seconds(kernel, kv_bytes)
        return np.asarray(
            np.asarray(kv_bytes, float) / (seconds * self.memory_bandwidth), dtype=np.float64
        )

    def elementwise_seconds(self, mode: str, op: str, elements: float) -> float:
        """Seconds of ``elements`` through one memory-bound op, eager, compiled or fused, or
        Hugging Face's eager module in a regime (``hf_autocast``, ``hf_bf16``:
        H100_HF_EAGER_PS)."""
        if mode.startswith("hf_"):
            seconds = H100_HF_EAGER_PS[mode[3:]][op] * 1e-12
        elif mode == "fused":
            seconds = FUSED_BYTES_PER_ELEMENT[op] / (H100_STREAM_GBPS * GB)
        else:
            seconds = H100_ELEMENTWISE_PS[mode][op] * 1e-12
        return seconds * elements * self.hbm_scale

    def loss_seconds(self, mode: str, logits: ArrayLike) -> NDArray[np.float64]:
        """Cross-entropy forward + backward over ``logits`` logits."""
        return (
            np.asarray(H100_LOSS_PS_PER_LOGIT[mode] * 1e-12 * np.asarray(logits, dtype=np.float64))
            * self.hbm_scale
        )

    def optimizer_seconds(self, item: str, parameters: float) -> float:
        """One optimizer-side pass (``item``) over ``parameters``."""
        return H100_OPTIMIZER_PS_PER_PARAMETER[item] * 1e-12 * parameters * self.hbm_scale


def _gemm_key(precision: str) -> str:
    return precision if precision in ("fp8", "fp8fast", "fp4") else "bf16"


def _peak_key(gemm_key: str) -> str:
    if gemm_key == "fp4":
        return "fp4"
    return "fp8" if gemm_key.startswith("fp8") else "bf16"


# FP4 GEMMs (NVFP4 on Blackwell's FP4 tensor cores): the chip's fraction of its FP4 peak over
# the H100's fraction of its FP8 peak (the H100 has no FP4 units), on the H100's measured FP8
# shape model, sustained and burst fractions. Measured in NVIDIA AIConfigurator's operator
# databases (ai-dynamo/aiconfigurator @ 095f58a5): the median over vLLM 0.19.0's, SGLang
# 0.5.10's and TensorRT-LLM 1.3.0rc20's NVFP4 GEMMs at prompt-sized M (2,048-8,192, narrow side
# 4,096 and up) over the same engine's FP8 ones on the H100 with static activation scales (the
# dynamic scale's measured cost taken off: calibration.aiconfigurator.static_fp8_gemms; each side
# then holds one quantising pass of its activations), each engine's as it serves them:
# TensorRT-LLM's table is its autotuner's fallback kernel (0.553 on the B200), so its served
# prompt ratio (engine.serving_engines.SERVED_FP4_GEMM_RATE, 0.754, fitted on its closed-loop
# B200 runs; the GB200 carries it) stands in (calibration.aiconfigurator.derive_fp4_matmul_ratio;
# a test keeps them equal). With the fallback the median was vLLM's 0.69 (B200) / 0.662
# (GB200): Megatron-Bridge's NVFP4 Llama 3 70B / 405B pre-training on GB200s (26.02, checked)
# ran 32-35 % faster than the engine put it there, 27-30 % at 0.771 (the rest was mostly the
# tensor-parallel rings: docs/llm-training.md). 0.754 against the 1.08 FP8 carries on the B200:
# NVFP4 runs 1.4x the chip's FP8, not the 2x its peak promises. No published FP4 GEMM figure
# has a nameable primary source (calibration/ceilings_points.yaml, b200-fp4). A chip without a
# table carries FP8's fractions to its FP4 peak (FP4_CARRIED_EVIDENCE). FP4 is never more than
# fp4 / fp8 peak faster than FP8 either way.
MEASURED_FP4_MATMUL_RATIO: dict[str, float] = {"nvidia-b200": 0.754, "nvidia-gb200": 0.754}
FP4_EVIDENCE = (
    "measured: NVFP4 GEMMs' fraction of the FP4 peak over the H100's FP8 fraction, median of"
    " vLLM, SGLang and TensorRT-LLM (AIConfigurator's operator databases), on the H100's"
    " measured FP8 shape model"
)
FP4_CARRIED_EVIDENCE = "carried from FP8: the chip's FP8 GEMM fractions of peak at its FP4 peak"


def _with_fp4(
    acc_peak_fp4: float, peaks: dict[str, float], table: dict[str, float], fp4_over_fp8: float
) -> None:
    """Adds ``fp4`` to a per-GEMM-key table of FLOP/s: FP8's fraction of its peak times
    ``fp4_over_fp8`` (the FP4 fraction over the FP8 one) at the FP4 peak."""
    table["fp4"] = table["fp8"] / peaks["fp8"] * fp4_over_fp8 * acc_peak_fp4


def _h100_fractions() -> tuple[dict[str, float], dict[str, float]]:
    sustained = {p: v / H100_PEAK_TFLOPS[_peak_key(p)] for p, v in H100_SUSTAINED_TFLOPS.items()}
    burst = {p: v / H100_PEAK_TFLOPS[_peak_key(p)] for p, v in H100_BURST_TFLOPS.items()}
    return sustained, burst


def _occupancy_evidence(acc: Accelerator) -> str:
    """Where a chip's attention occupancy (ATTENTION_OCCUPANCY) comes from."""
    if acc.kind == "tpu":
        return "not modelled: a TPU's attention runs at its measured rate whatever a call's size"
    sms = ATTENTION_SMS.get(acc.name)
    if acc.name in OCCUPANCY_MEASURED_CHIPS:
        return (
            "measured: a call's rate by what its tiles fill of the chip, fitted on a lent H100's "
            "attention calls and checked on a lent H200's (calibration/measured/device)"
        )
    if sms is None:
        return f"extrapolated: the H100's occupancy law and its 132 SMs carried to {acc.name}"
    return f"carried: the lent H100's occupancy law on {acc.name}'s {sms:.0f} SMs"


def ceilings_for(acc: Accelerator) -> Ceilings:
    """The ceilings of ``acc``: measured for the H100 SXM; else the H100's measured model scaled
    by the chip's published ratios where they exist (PUBLISHED_*), else carried as fractions of
    the chip's own datasheet. ``evidence`` names which, per quantity."""
    sustained_frac, burst_frac = _h100_fractions()
    bf16 = acc.peak("bf16") if acc.supports("bf16") or acc.kind == "tpu" else acc.peak("fp16")
    peaks = {"bf16": bf16}
    if acc.supports("fp8"):
        peaks["fp8"] = acc.peak("fp8")
    fp4 = acc.supports("fp4") and "fp8" in peaks
    measured = acc.name == "nvidia-h100-80gb"
    pair = acc.name in MEASURED_PAIR_CHIPS  # measured beside an H100 by the same payload
    carried = f"extrapolated: the H100's measured fractions of peak carried to {acc.name}"
    scale: dict[str, float] = {}
    for p in peaks:
        scale[p] = PUBLISHED_MATMUL_RATIO.get((acc.name, p), 1.0)
    published = [p for p in peaks if (acc.name, p) in PUBLISHED_MATMUL_RATIO]
    matmul_evidence = MEASURED_H100 if measured else carried
    if pair:
        matmul_evidence = (
            f"measured: {acc.name}'s burst and sustained matmul over an H100's, the PoolProfile"
            " payload on both (calibration/measured/device), on the H100's measured shape model"
        )
    elif published and not measured:
        matmul_evidence = (
            f"published: {acc.name}'s maximum achievable matmul ({', '.join(published)}) over the"
            " H100's (stas00/ml-engineering), on the H100's measured shape model and power cap"
        )
    gemm_e = {
        p: e * scale[_peak_key(p)] for p, e in H100_GEMM_EFFICIENCY.items() if _peak_key(p) in peaks
    }
    sustained = {
        p: f * sustained_ratio(acc.name, _peak_key(p), scale[_peak_key(p)]) * peaks[_peak_key(p)]
        for p, f in sustained_frac.items()
        if _peak_key(p) in peaks
    }
    capped = [p for p in peaks if (acc.name, p) in PUBLISHED_SUSTAINED_RATIO]
    if capped and not pair:
        carried_from = CARRIED_SUSTAINED.get(acc.name)
        cap = (
            f"carried from {carried_from}, the same GPU on more power: its drop from burst to"
            f" sustained ({SUSTAINED_SOURCE})"
            if carried_from
            else SUSTAINED_SOURCE
        )
        matmul_evidence += f"; its {', '.join(capped)} power cap: {cap}"
    burst = {
        p: f * scale[_peak_key(p)] * peaks[_peak_key(p)]
        for p, f in burst_frac.items()
        if _peak_key(p) in peaks
    }
    half_dim = dict(H100_GEMM_HALF_DIM)
    # FP4's fraction over FP8's: measured where AIConfigurator has the chip, else 1 (carried)
    fp4_over_fp8 = matmul_ratio(acc.name, "fp4") / scale.get("fp8", 1.0)
    if fp4:
        _with_fp4(acc.peak("fp4"), peaks, sustained, fp4_over_fp8)
        _with_fp4(acc.peak("fp4"), peaks, burst, fp4_over_fp8)
        peaks["fp4"] = acc.peak("fp4")
        gemm_e["fp4"] = gemm_e["fp8"] * fp4_over_fp8
        half_dim["fp4"] = half_dim["fp8"]
    attention = dict(H100_ATTENTION)
    attention_evidence = MEASURED_H100 if measured else carried
    if acc.nccl_arch == "ampere":
        for direction in ("forward", "backward"):
            e, s0, d0 = attention[("flash2", direction)]
            attention[("flash2", direction)] = (e * FLASH2_AMPERE_RATIO, s0, d0)
        attention_evidence = (
            "published: FlashAttention 2 on A100 over H100 (Dao-AILab/flash-attention benchmarks)"
        )
    if acc.kind == "tpu":
        width = TPU_MXU_WIDTH.get(acc.name)
        attention_evidence += (
            f"; on {width:.0f}-wide matrix units (Cloud TPU architecture): the head dimension's"
            f" fill over the 128-wide arrays the rates were checked on"
            if width is not None
            else f"; {acc.name}'s matrix-unit width is not in the catalog: 128 assumed"
        )
    hbm_ratio = PUBLISHED_HBM_RATIO.get(acc.name, 1.0)
    hbm = acc.memory_bandwidth * (H100_COPY_GBPS / H100_DATASHEET_HBM_GBPS) * hbm_ratio
    memory_evidence = MEASURED_H100
    if not measured:
        memory_evidence = (
            f"measured: {acc.name}'s HBM copy over an H100's, the PoolProfile payload on both"
            " (calibration/measured/device); the H100's kernel times scaled by it"
            if pair
            else f"published: {acc.name}'s triad bandwidth over the H100's (Azure "
            "AI-benchmarking-guide)"
            if acc.name in PUBLISHED_HBM_RATIO
            else f"extrapolated: the H100's measured times scaled by HBM bandwidth to {acc.name}"
        )
    decode_gemm = {
        p: (f * hbm_ratio, floor, e * scale[_peak_key(p)])
        for p, (f, floor, e) in H100_DECODE_GEMM.items()
        if _peak_key(p) in peaks
    }
    if fp4:  # the decode-batch terms: FP8's streaming and floor, its E_d at FP4's fraction
        f_w8, floor8, e_d8 = decode_gemm["fp8"]
        decode_gemm["fp4"] = (f_w8, floor8, e_d8 * fp4_over_fp8)
    decode_attention = {
        k: (f * hbm_ratio, floor) for k, (f, floor) in H100_DECODE_ATTENTION.items()
    }
    decode_evidence = MEASURED_H100
    own = CHIP_DECODE_TERMS.get(acc.name, {})
    if "bf16" in own:
        f_w, floor_us, e_d = own["bf16"]
        decode_gemm["bf16"] = (f_w, floor_us, e_d)
    if "flash2" in own:
        f_kv, floor_us = own["flash2"]
        decode_attention["flash2"] = (f_kv, floor_us)
    if own and acc.name in AIC_DECODE_CHIPS:
        decode_evidence = (
            f"published: {acc.name}'s bf16 decode GEMMs and decode attention over an H100's in"
            f" {AIC_SOURCE} (vLLM on both), on the H100's measured terms and floors; FP8 GEMMs"
            " and cuDNN's carried from the H100"
        )
    elif own:
        decode_evidence = (
            f"measured: {acc.name}'s bf16 decode GEMMs and FlashAttention's decode attention on a"
            " lent one (calibration/measured/device); FP8 GEMMs and cuDNN's carried from the H100"
        )
    elif not measured:
        decode_evidence = (
            f"extrapolated: the H100's measured decode GEMM and KV-read fractions (and floors)"
            f" carried to {acc.name}, the fractions scaled by its published HBM ratio"
            f" ({hbm_ratio:.4g}) and matmul ratio"
        )
    return Ceilings(
        accelerator=acc.name,
        peak_flops=peaks,
        gemm_efficiency=gemm_e,
        gemm_half_dim=half_dim,
        sustained_flops=sustained,
        burst_flops=burst,
        attention=attention,
        hbm_scale=(H100_COPY_GBPS * GB) / hbm if hbm > 0 else 1.0,
        evidence={
            "matmul": matmul_evidence,
            "attention": attention_evidence,
            "attention-occupancy": _occupancy_evidence(acc),
            "memory-bound": memory_evidence,
            "decode": decode_evidence,
            **(
                {
                    "matmul-fp4": FP4_EVIDENCE
                    if acc.name in MEASURED_FP4_MATMUL_RATIO
                    else FP4_CARRIED_EVIDENCE
                }
                if fp4
                else {}
            ),
            "grouped-gemm": (
                f"measured: torch._grouped_mm streams experts' weights at most "
                f"{GROUPED_STREAM_CAP_GBPS:,.0f} GB/s (fitted on a lent H100, checked on a lent "
                "H200: calibration/measured/device); FP8 grouped GEMMs carried from the FP8 "
                f"decode terms under that cap ({GROUPED_FP8_CHECK})"
                if acc.name in GROUPED_STREAM_CAP_CHIPS
                else f"extrapolated: no grouped expert GEMM measured on {acc.name}; its decode "
                "GEMMs' streaming fraction"
            ),
        },
        decode_gemm=decode_gemm,
        decode_attention=decode_attention,
        memory_bandwidth=acc.memory_bandwidth,
        grouped_stream_cap=(
            GROUPED_STREAM_CAP_GBPS * GB if acc.name in GROUPED_STREAM_CAP_CHIPS else None
        ),
        sms=None if acc.kind == "tpu" else ATTENTION_SMS.get(acc.name, H100_SMS),
        mxu_width=TPU_MXU_WIDTH.get(acc.name, CHECKED_MXU_WIDTH) if acc.kind == "tpu" else None,
    )


__all__ = ["TERA", "Ceilings", "ceilings_for"]
