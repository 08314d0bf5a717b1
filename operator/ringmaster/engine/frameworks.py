"""What each training framework runs on the silicon: its kernels, its loss, its optimizer.

The engine's second layer (DESIGN.md): the same layout on the same chip steps at different speeds
under Megatron-Core and under plain PyTorch FSDP, because one fuses its norms, RoPE, SwiGLU and
loss into single kernels and runs cuDNN's attention, and the other launches each op from Python.
:mod:`ringmaster.engine.step_parts` composes the step from a :class:`Framework` and the chip's
:mod:`ringmaster.engine.ceilings`.

Each profile states what the framework's default configuration runs, with where that is said:

- **Megatron** (Megatron-Core, NeMo): Transformer Engine layers: fused RMSNorm / LayerNorm,
  fused RoPE (``apply_rope_fusion``), fused SwiGLU (``bias_swiglu_fusion``), TE's attention (cuDNN
  fused attention on Hopper and newer; FlashAttention 2 on Ampere), the fused vocab-parallel
  cross-entropy (``cross_entropy_loss_fusion``, on in NeMo 2's performance recipes), a fused Adam
  over fp32 masters (the distributed optimizer: shards the fp32 state, copies bf16 weights back),
  and gradient accumulation fused into the weight-gradient GEMM
  (``gradient_accumulation_fusion``: no separate add per micro-batch).
- **Torchtitan**: eager PyTorch modules (``torchtitan/models/llama3``), SDPA attention (PyTorch's
  FlashAttention 2 kernel), the loss on fp32-upcast logits (``cross_entropy(pred.float(), ...)``),
  AdamW ``implementation = "fused"`` (its job config default), FSDP2 with bf16 parameters gathered
  from fp32 shards (no separate copy-back); ``compile`` (``[compile] enable``) off by default.
- **MaxText**: JAX/XLA: every elementwise op fused by XLA into its neighbours, the loss fused,
  optax's AdamW compiled into the step; attention through XLA's Splash (TPU) or cuDNN (GPU).
- **DeepSpeed**: Hugging Face modeling code run eagerly (its LlamaRMSNorm composed of ops,
  rotate_half RoPE: ``HF_EAGER``, with bf16 weights), ``flash_attention_2``, fp32-upcast loss,
  DeepSpeed's FusedAdam (multi-tensor, one launch per chunk), fp32 masters copied back to bf16.
- **LLMFoundry** (MosaicML's llm-foundry on Composer, MPT and Hugging Face models): Composer's
  FSDP (full or grad-op sharding, ``MixedPrecision`` DEFAULT: fp32 shards, bf16 compute, fp32
  gradient reduction), the model's modules run eagerly (MPT: ``low_precision_layernorm``, GELU,
  a fused ``Wqkv``), FlashAttention 2 (``attn_impl: flash``), the loss fused over the logits
  (``loss_fn: fused_crossentropy``, flash-attn's cross-entropy kernel), Composer's
  ``DecoupledAdamW`` (a loop of single-tensor ops over the flat parameters: foreach-like in its
  passes over the state), no copy-back (FSDP casts on the gather). torch.compile where the run
  sets ``compile_config``. Its published tables (scripts/train/benchmarking) ran the 2023 stack:
  Triton's pre-MLIR attention, never measured here; its rate is fitted on the A100-80GB table
  and checked on the others (engine.ceilings.TRITON_FLASH_ATTENTION_RATIO).
- **PyTorch** (plain FSDP / DDP, Hugging Face Accelerate): Hugging Face's modules run eagerly
  (``HF_EAGER``): unsharded (DDP, one GPU) under bf16 autocast over fp32 weights, sharded (FSDP's
  ``MixedPrecision(param_dtype=bf16)``) with bf16 weights; SDPA, fp32-upcast loss,
  ``torch.optim.AdamW`` whose CUDA default is ``foreach``. SDPA dispatches to cuDNN's fused
  attention on Hopper and newer (FlashAttention 2 on Ampere): measured, PyTorch 2.11's profiler
  names ``cudnn_generated_fort_native_sdpa_sm90_flash_fprop / _bprop`` as the attention kernels of
  a plain training step on one H100 and one H200 (calibration/measured/device, train.json). The
  default when a job names no framework and its image names none either (nothing fused).

What a recomputing policy runs again also differs. PyTorch's non-reentrant checkpoint (FSDP's
``checkpoint_wrapper`` default) stops recomputing once every tensor the backward saved is
rebuilt (torch/utils/checkpoint.py, ``set_checkpoint_early_stop``: "By default, non-reentrant
checkpoint stops recomputation as soon as it has computed all needed Tensors"; the default since
pytorch/pytorch #96866, March 2023, first released in 2.1), and JAX drops from a rematerialised
forward what no residual needs (``jax.checkpoint``'s partial evaluation keeps only the
residuals' producers): neither runs a block's last linear layer again, the FFN's output
projection, whose output only the residual add takes (engine.recompute). Megatron-Core's and
DeepSpeed's checkpoint functions (reentrant) rerun the whole block, and torchtitan turns early
stop off by default since pytorch/torchtitan #1580 (2025-08-29,
``activation_checkpoint.early_stop = False``; earlier torchtitan ran PyTorch's default, on). The
PyTorch profile assumes FSDP's wrapper; Hugging Face Trainer's ``gradient_checkpointing`` passes
``use_reentrant=True`` unless told otherwise, which reruns the whole block: such a job states
``recomputeStopsEarly: false``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

FRAMEWORKS = ("Megatron", "Torchtitan", "MaxText", "DeepSpeed", "LLMFoundry", "PyTorch")
DEFAULT_GPU_FRAMEWORK = "PyTorch"
DEFAULT_TPU_FRAMEWORK = "MaxText"
ATTENTION_KERNELS = ("FlashAttention2", "cuDNN")
# "Triton": Triton's pre-MLIR FlashAttention, which llm-foundry's published 2023 tables ran
# (engine.ceilings.TRITON_FLASH_ATTENTION_RATIO); the calibration names it, a job cannot.
_KERNEL_KEY = {"FlashAttention2": "flash2", "cuDNN": "cudnn", "Triton": "triton"}

# Host time per kernel an eager PyTorch stack spends in Python, the dispatcher and the launch: the
# GPU idles when a layer's kernels finish faster than the host issues them. Assumed (no point
# isolates it): 8 us, the order of PyTorch's per-op eager overhead on a server CPU. Kernels per
# layer, forward + backward, counted from the modules as each framework runs them: a Llama block
# eager is about 70 (norms, projections, RoPE's view / multiply / cast, SDPA, SwiGLU's silu and
# multiply, adds, and their backward ops); Inductor fuses it to about 25; Transformer Engine's
# fused modules to about 30.
HOST_SECONDS_PER_KERNEL = 8e-6
# Hugging Face's modeling code run eagerly (its LlamaRMSNorm, rotate_half RoPE, the attention
# output's transpose copy), in the regime the layout's sharding implies (Framework).
HF_EAGER = "hf_eager"
KERNELS_PER_LAYER = {"eager": 70, "compiled": 25, "fused": 30}

# Megatron-Core's CUDA graphs (--cuda-graph-impl; spec.framework.cudaGraph): "None" (eager),
# "Layers" (Transformer Engine's per-layer graphs of the scopes a recipe names: attention, the
# MoE router and its preprocessing) or "FullIteration" (the whole forward and backward replayed
# as one graph, which needs static shapes: a mixture of experts' per-rank expert capacity).
CUDA_GRAPHS = ("None", "Layers", "FullIteration")
FULL_ITERATION = "FullIteration"
# Exposed host time per dropless MoE layer per micro-batch under Megatron-Core outside a
# full-iteration CUDA graph, forward and backward. A dropless layer reads its tokens-per-expert
# counts back to the host for the grouped GEMMs' sizes and the dispatcher's buffers
# (megatron/core/transformer/moe/token_dispatcher.py: cuda_dtoh_point, cuda_sync_point, .item()),
# a stream synchronisation a layer, after which the host issues the layer's remaining kernels
# behind the GPU instead of ahead of it: a fixed cost a layer and micro-batch, whatever its
# tokens (Megatron-Bridge's Qwen3-30B-A3B at 26.04.01 leaves 3.9-4.7 ms a layer beyond the GPU's
# work at one, four and four 4,096-token sequences a micro-batch on H100, B200 and GB200).
# Fitted (calibration.moe.moe_sync_fit: the mean of the sync each row implies) on those three
# rows and on the measured eager step of Megatron-Bridge docs/training/cuda-graphs.md @ 067f987d
# (H100, EP 16 over two hosts); leaving either source out moves it to 3.2 or 4.3 ms. Checked on
# the other releases and models (calibration/moe_points.yaml). A full-iteration graph
# (Megatron-Bridge 26.06's GB200 recipes) or experts padded to capacity take it away: 0.
MEGATRON_MOE_SYNC_SECONDS = 4.07e-3
# torchtitan's expert-parallel dispatchers read the counts back too, a MoE layer and forward:
# the all-to-all's splits (torchtitan/models/common/token_dispatcher.py @ b5bcd76c6,
# "this would incur a device-to-host sync", input_splits.tolist()) and DeepEP's compact layout
# (torchtitan/distributed/deepep/deepep.py, do_cpu_sync=True: "host sync, so this path is NOT
# cudagraph-able"). Not measured for torchtitan: Megatron-Core's fitted cost, carried (the
# plan's evidence says so); checked on torchtitan's two B200 Qwen3-30B-A3B runs.
TORCHTITAN_MOE_SYNC_SECONDS = MEGATRON_MOE_SYNC_SECONDS
# The share of the exchange's ideal hiding that Megatron-Core's batch-level expert overlap
# (--overlap-moe-expert-parallel-comm: spec.parallelism.expertOverlap OneFOneB, one micro-batch's
# dispatch and combine behind another's layer) realises in Megatron-Bridge's published runs. The
# engine's overlap would hide 80-85 % of each exchange on those runs; each run's throughput lies
# where none of it is hidden (the implied share -0.13..+0.40 over 14 runs of seven releases, H100
# without graphs and GB200 under full-iteration graphs, Qwen3-30B-A3B, Qwen3-235B-A22B and
# DeepSeek-V3). Fitted (calibration.moe.overlap_realised_fit: the median of the share its runs
# imply, clamped to [0, 1]) on 26.06's three GB200 runs; checked on 26.02, 26.02.01, 26.04,
# 26.04.01, 26.06.01 and 26.08. Why it hides nothing is not measured here (the dispatcher's
# SMs beside the GEMMs, the split schedule's own waits); DeepSeek's DualPipe realises its own
# (DeepSeek-V3's H800 run) and keeps 1.
MEGATRON_ONE_F_ONE_B_REALISED = 0.0


@dataclass(frozen=True)
class Framework:
    """A framework's kernels, as the step composition needs them."""

    name: str
    attention: str  # "cudnn" | "flash2" (ceilings' kernel keys) on Hopper and newer
    attention_ampere: str  # the kernel on Ampere and older
    memory_bound: str  # "fused" | "compiled" | "eager"
    loss: str  # "compiled" | "eager_upcast" | "eager_fp32" (ceilings' loss keys)
    optimizer: str  # "adamw_fused" | "adamw_foreach"
    fused_grad_accumulation: bool  # fp32 main grads accumulated inside the wgrad GEMM
    copies_weights_back: bool  # fp32 masters copied to bf16 weights after the update
    host_launched: bool  # PyTorch from Python: the host can bind a short layer
    compiled: bool = False
    # Unsharded (DDP, one GPU), bf16 autocast runs over fp32 weights: the residual stream stays
    # fp32 and every linear layer casts its input and weight (engine.ceilings.H100_HF_EAGER_PS).
    # Sharded (FSDP's MixedPrecision(param_dtype=bf16)) the weights are bf16 during compute.
    autocast_unsharded: bool = False
    # On a TPU slice, the tensor-parallel collectives run beside the matmuls they feed (XLA's
    # async collective fusion and collective matmul: MaxText's configs/v5e/*.sh set
    # LIBTPU_INIT_ARGS --xla_tpu_enable_async_collective_fusion=true ...
    # --xla_tpu_overlap_compute_collective_tc=true, maxtext @ 76bd53b0f), so only what exceeds
    # the micro-batch's GEMMs is on the critical path.
    overlaps_tensor_parallel_on_tpu: bool = False
    # The loss is one fused kernel that keeps the bf16 logits only (llm-foundry's
    # fused_crossentropy: engine.llm_memory.BYTES_LOSS_PER_LOGIT_FUSED), not an fp32 copy.
    fused_loss_memory: bool = False
    # FP8 training's scaling (amax, cast, transpose of each linear layer's operands) as this
    # framework runs it: "fused" (Transformer Engine's cast-transpose kernels; XLA's fusions),
    # "compiled" (torchao's float8 under torch.compile), "eager" (torchao's ops one by one).
    # step_parts.FP8_CAST_BYTES_PER_ELEMENT prices each.
    fp8_casts: str = "fused"
    # FP8 weights cast once a step and kept across its micro-batches (Megatron passes TE's
    # is_first_microbatch); otherwise every micro-batch casts every weight again.
    caches_fp8_weights: bool = False
    # Recompute stops once backward's saved tensors are rebuilt (the module's docstring):
    # the FFN's output projection, whose output only the residual add takes, is not run again.
    recompute_stops_early: bool = False
    # The interleaved pipeline schedule overlaps its sends with compute by default (Megatron-LM's
    # --no-overlap-p2p-communication turns it off, and it is forced off without virtual stages;
    # NeMo-Framework-Launcher 24.07's llama2_70b.yaml sets overlap_p2p_comm: true, as
    # Megatron-Bridge's recipes do). The step does not model it (planning.layouts says so).
    overlaps_pipeline_sends: bool = False
    # Exposed host seconds a dropless MoE layer adds a micro-batch (MEGATRON_MOE_SYNC_SECONDS
    # under Megatron-Core outside a full-iteration graph; torchtitan's expert-parallel
    # dispatchers carry it; 0 for the others, which read no counts back).
    moe_sync_seconds: float = 0.0
    # Whether the sync is paid without expert parallelism too: Megatron-Core's dispatchers read
    # the tokens per expert back at every degree; torchtitan's local dispatcher keeps them on the
    # device (torch._grouped_mm takes device offsets) and syncs only to size its all-to-alls.
    moe_sync_without_expert_parallel: bool = True
    # The share of the ideal hiding a batch-level expert overlap (OneFOneB) realises: 1 where
    # unmeasured; Megatron-Core's MEGATRON_ONE_F_ONE_B_REALISED.
    one_f_one_b_realised: float = 1.0
    cuda_graph: str = "None"  # CUDA_GRAPHS (Megatron-Core only)
    # The compiler rematerialises under memory pressure: XLA's HloRematerialization pass
    # (openxla/xla xla/hlo/transforms/simplifiers/hlo_rematerialization.h: "rematerializes
    # instructions to reduce peak memory use" to a memory limit, the chip's HBM on TPU) recomputes
    # saved values rather than failing, so a remat policy whose saved tensors overflow the chip
    # still runs, slower (engine.recompute.compiler_remat_share). PyTorch's stacks fail instead.
    compiler_remat: bool = False
    # The compiler assigns the step's buffers by liveness (XLA's buffer assignment over its heap
    # simulator): tensors never live at once share memory, so the loss's logits (freed once the
    # head's backward ran) and a rebuilt layer's working set (made after) peak as the larger of
    # the two. PyTorch's caching allocator keeps freed blocks reserved: its stacks count both
    # (torchtitan's published memory rows, calibration.llm_training, fit the sum).
    compiler_buffers: bool = False
    # The all-reduce of the gradient shards across replica groups (a multislice job's slices over
    # DCN; hybrid sharding's groups over the NICs) runs behind backward like the rest of the
    # data-parallel reduction (PyTorch FSDP2's and Megatron's per-bucket hooks: assumed, no
    # published hybrid-sharded PyTorch run is held), or after it, on the step's critical path.
    # MaxText: after, on two published scaling tables: its v5e multislice table
    # (calibration.multislice: the MFU kept from one slice, mean |error| 7.7 % -> 5.0 %, the
    # largest 21.1 % -> 14.0 %, hidden -> exposed) and its A3 Llama 2 7B table over 1-16 VMs of
    # H100s (GPUDirect-TCPX: 2-16 VMs +36..+48 % hidden, +4..+15 % exposed).
    hides_cross_replica_reduction: bool = True
    # Whether the bucketed data-parallel reduction (sharding None, Optimizer, Gradients) runs
    # behind backward when the job does not say (spec.parallelism.overlapGradientReduction):
    # DDP's hooks always; Megatron-Bridge's and NeMo's recipes pass --overlap-grad-reduce
    # (Megatron-LM's own lines are read for it: planning.training_flags); DeepSpeed's ZeRO-1 and
    # -2 do not (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig.overlap_comm_valid: an
    # unset overlap_comm is stage == 3). Full sharding prefetches layer by layer whatever this says.
    overlaps_gradient_reduction: bool = True

    def attention_kernel(self, nccl_arch: str) -> str:
        return self.attention if nccl_arch in ("hopper", "blackwell") else self.attention_ampere

    @property
    def host_kernels_per_layer(self) -> int:
        key = "eager" if self.memory_bound == HF_EAGER else self.memory_bound
        return KERNELS_PER_LAYER[key] if self.host_launched else 0


_BASE = {
    "Megatron": Framework(
        "Megatron",
        "cudnn",
        "flash2",
        "fused",
        "compiled",
        "adamw_fused",
        True,
        True,
        True,
        caches_fp8_weights=True,
        overlaps_pipeline_sends=True,
        moe_sync_seconds=MEGATRON_MOE_SYNC_SECONDS,
        one_f_one_b_realised=MEGATRON_ONE_F_ONE_B_REALISED,
    ),
    "Torchtitan": Framework(
        "Torchtitan",
        "flash2",
        "flash2",
        "eager",
        "eager_upcast",
        "adamw_fused",
        False,
        False,
        True,
        fp8_casts="eager",
        moe_sync_seconds=TORCHTITAN_MOE_SYNC_SECONDS,
        moe_sync_without_expert_parallel=False,
    ),
    "MaxText": Framework(
        "MaxText",
        "cudnn",
        "cudnn",
        "fused",
        "compiled",
        "adamw_fused",
        True,
        False,
        False,
        overlaps_tensor_parallel_on_tpu=True,
        recompute_stops_early=True,
        compiler_remat=True,
        compiler_buffers=True,
        hides_cross_replica_reduction=False,
        # XLA fuses the cross-entropy into the reductions over the logits: what is live at its
        # peak is the logits and their gradient, not an fp32 copy of them. MaxText's published
        # Llama 3.1 8B runs on v6e (AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-
        # MaxText, 32,768 tokens x 128,256 logits a chip on a 32 GB chip) bound it at about 6.4
        # bytes a logit; the fused kernel's 4 (bf16 logits and gradient) is taken.
        fused_loss_memory=True,
    ),
    "DeepSpeed": Framework(
        "DeepSpeed",
        "flash2",
        "flash2",
        HF_EAGER,
        "eager_upcast",
        "adamw_fused",
        False,
        True,
        True,
        overlaps_gradient_reduction=False,
    ),
    "LLMFoundry": Framework(
        "LLMFoundry",
        "flash2",
        "flash2",
        "eager",
        "compiled",
        "adamw_foreach",
        False,
        False,
        True,
        fused_loss_memory=True,
        recompute_stops_early=True,
    ),
    "PyTorch": Framework(
        "PyTorch",
        "cudnn",
        "flash2",
        HF_EAGER,
        "eager_upcast",
        "adamw_foreach",
        False,
        False,
        True,
        autocast_unsharded=True,
        fp8_casts="eager",
        recompute_stops_early=True,
    ),
}
COMPILABLE = ("Torchtitan", "DeepSpeed", "LLMFoundry", "PyTorch")
# Where recompute's early stop is a setting (PyTorch's non-reentrant checkpoint); MaxText's XLA
# always drops what no residual needs, Megatron's and DeepSpeed's reentrant checkpoints never do.
EARLY_STOP_SETTABLE = ("Torchtitan", "LLMFoundry", "PyTorch")


def framework(
    name: str,
    *,
    compiled: bool = False,
    attention: str | None = None,
    recompute_stops_early: bool | None = None,
    cuda_graph: str | None = None,
) -> Framework:
    """The profile of ``name``; ``compiled``: torch.compile on (Inductor fuses the memory-bound
    ops and the loss); ``attention``: an attention kernel the job names (ATTENTION_KERNELS);
    ``recompute_stops_early``: the run's stack where it differs from the profile's current
    default (a published run on an older PyTorch or torchtitan); ``cuda_graph``: Megatron-Core's
    CUDA graphs (CUDA_GRAPHS; a full iteration takes the MoE layers' host syncs away)."""
    if name not in _BASE:
        raise ValueError(f"framework {name!r}: expected one of {', '.join(FRAMEWORKS)}")
    base = _BASE[name]
    if compiled and name not in COMPILABLE:
        raise ValueError(f"framework {name}: compile applies to {', '.join(COMPILABLE)} only")
    if compiled:
        fp8_casts = "compiled" if base.fp8_casts == "eager" else base.fp8_casts
        base = replace(
            base, memory_bound="compiled", loss="compiled", compiled=True, fp8_casts=fp8_casts
        )
    if attention is not None:
        if attention not in _KERNEL_KEY:
            raise ValueError(
                f"attention kernel {attention!r}: expected one of {', '.join(ATTENTION_KERNELS)}"
            )
        key = _KERNEL_KEY[attention]
        base = replace(base, attention=key, attention_ampere=key)
    if recompute_stops_early is not None and recompute_stops_early != base.recompute_stops_early:
        if name not in EARLY_STOP_SETTABLE:
            raise ValueError(
                f"framework {name}: recompute early stop is a setting of "
                f"{', '.join(EARLY_STOP_SETTABLE)} only"
            )
        base = replace(base, recompute_stops_early=recompute_stops_early)
    if cuda_graph is not None and cuda_graph != base.cuda_graph:
        if cuda_graph not in CUDA_GRAPHS:
            raise ValueError(f"cuda graph {cuda_graph!r}: expected one of {', '.join(CUDA_GRAPHS)}")
        if name != "Megatron":
            raise ValueError(f"framework {name}: cudaGraph is a setting of Megatron only")
        sync = 0.0 if cuda_graph == FULL_ITERATION else base.moe_sync_seconds
        base = replace(base, cuda_graph=cuda_graph, moe_sync_seconds=sync)
    return base


def moe_sync_at(profile: Framework, expert: ArrayLike) -> NDArray[np.bool_]:
    """Whether ``profile``'s MoE host sync is paid at each expert-parallel degree: at every one
    where its dispatchers read the counts back at one rank too
    (Framework.moe_sync_without_expert_parallel), else above one rank only."""
    return np.asarray(np.asarray(expert) > 1) | profile.moe_sync_without_expert_parallel


def moe_sync_paid(profile: Framework, padded: bool, expert: int | None = None) -> float:
    """The dropless MoE layers' host sync a step under ``profile`` pays a layer and micro-batch:
    none where every expert's input is padded to its capacity (``padded``: static shapes), nor
    at a degree where it is not paid (:func:`moe_sync_at`); ``expert`` None: any degree."""
    if padded or (expert is not None and not moe_sync_at(profile, expert)):
        return 0.0
    return profile.moe_sync_seconds


def moe_sync_source(profile: Framework) -> str:
    """Where ``profile``'s MoE host sync comes from, for a plan to say."""
    if profile.moe_sync_without_expert_parallel:
        return (
            "Megatron-Core outside a full-iteration CUDA graph: spec.framework.cudaGraph; fitted"
            " on Megatron-Bridge's runs, engine.frameworks.MEGATRON_MOE_SYNC_SECONDS"
        )
    return (
        f"{profile.name}'s expert-parallel dispatch reads its counts back; Megatron-Core's fitted"
        " cost, carried: engine.frameworks.TORCHTITAN_MOE_SYNC_SECONDS"
    )


# Image names that say which framework a pod runs, for jobs that do not say it themselves.
_IMAGE_HINTS = (
    ("torchtitan", "Torchtitan"),
    ("llm-foundry", "LLMFoundry"),
    ("llmfoundry", "LLMFoundry"),
    ("maxtext", "MaxText"),
    ("nemo", "Megatron"),
    ("megatron", "Megatron"),
    ("deepspeed", "DeepSpeed"),
)


def infer_framework(image: str | None, kind: str) -> tuple[str, str]:
    """(framework, why) for a job that names none: the image's hint, else the default."""
    lowered = (image or "").lower()
    for hint, name in _IMAGE_HINTS:
        if hint in lowered:
            return name, f"from the image {image}"
    default = DEFAULT_TPU_FRAMEWORK if kind == "tpu" else DEFAULT_GPU_FRAMEWORK
    return default, "the default (spec.framework not set)"
