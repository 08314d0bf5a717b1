"""What a TrainingJob trains and with which framework: ``spec.model`` and ``spec.framework``, the
figures and the kernels the performance engine composes the step from."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ringmaster.api.architecture import (
    TransformerArchitecture,
    architecture_parameters,
    cel_architecture_parameters,
)
from ringmaster.api.base import Int, Rule, SpecModel
from ringmaster.api.quantity import Count

GradientDType = Literal["fp32", "bf16", "fp16"]
OptimizerMomentsDType = Literal["fp32", "bf16"]
ParameterDType = Literal["fp32", "bf16"]
# The frameworks whose parameters may themselves be bf16, with no fp32 copy: MaxText's
# weight_dtype bfloat16 and plain PyTorch's model.to(torch.bfloat16) (a test keeps the CEL's
# list equal).
BF16_PARAMETER_FRAMEWORKS = ("MaxText", "PyTorch")
ComputePrecision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4"]
Fp8Recipe = Literal["Linear", "AllMatmuls"]
FrameworkName = Literal["Megatron", "Torchtitan", "MaxText", "DeepSpeed", "LLMFoundry", "PyTorch"]
# The frameworks torch.compile applies to (engine.frameworks.COMPILABLE; a test keeps them equal).
COMPILABLE_FRAMEWORKS = ("Torchtitan", "DeepSpeed", "LLMFoundry", "PyTorch")
# The frameworks whose recompute early stop is a setting (engine.frameworks.EARLY_STOP_SETTABLE).
EARLY_STOP_FRAMEWORKS = ("Torchtitan", "LLMFoundry", "PyTorch")
AttentionKernel = Literal["FlashAttention2", "cuDNN"]
# Megatron-Core's CUDA graphs (engine.frameworks.CUDA_GRAPHS; a test keeps them equal).
CudaGraph = Literal["None", "Layers", "FullIteration"]

# A given parameter count must be within this fraction of the one an architecture implies.
PARAMETERS_TOLERANCE_PERCENT = 3
_DERIVED = cel_architecture_parameters("self.architecture")


def _parameters_agree(s: Any) -> bool:
    if s.architecture is None or s.parameters is None:
        return True
    given = int(s.parameters) * 100
    derived = architecture_parameters(s.architecture)
    tol = PARAMETERS_TOLERANCE_PERCENT
    return derived * (100 - tol) <= given <= derived * (100 + tol)


class TrainingFramework(SpecModel):
    """The training framework the workers run: the engine composes the step from the kernels it
    runs (docs/engine.md, "The step as each framework runs it")."""

    name: FrameworkName
    """``Megatron`` (Megatron-Core / NeMo: Transformer Engine's fused kernels and cuDNN
    attention), ``Torchtitan``, ``MaxText`` (JAX / XLA), ``DeepSpeed`` (Hugging Face modeling code
    under DeepSpeed), ``LLMFoundry`` (MosaicML's llm-foundry on Composer's FSDP) or ``PyTorch``
    (plain FSDP / DDP, Hugging Face Accelerate). Left out (no ``spec.framework``): the one the
    pod template's image names, else ``PyTorch`` on GPUs and ``MaxText`` on TPUs; the plan says
    which."""
    compile: bool = False
    """``torch.compile`` on (Torchtitan, DeepSpeed, LLMFoundry and PyTorch only): Inductor fuses
    the norms, RoPE, activations and the loss."""
    attention_kernel: AttentionKernel | None = None
    """The attention kernel, where the job picks one; left out: the framework's default
    (cuDNN under Megatron and MaxText on Hopper and newer, FlashAttention 2 otherwise)."""
    recompute_stops_early: bool | None = None
    """Whether activation recompute stops once the tensors backward saved are rebuilt, so the
    FFN's output projection is not run again (PyTorch's non-reentrant checkpoint, 2.1 and later:
    ``torch.utils.checkpoint.set_checkpoint_early_stop``; torchtitan's
    ``activation_checkpoint.early_stop``). Torchtitan, LLMFoundry and PyTorch only; left out:
    the framework's default (on for LLMFoundry and PyTorch, off for Torchtitan since its
    2025-08 release; MaxText's XLA always drops it, Megatron's and DeepSpeed's reentrant
    checkpoints always rerun it). Hugging Face Trainer's ``gradient_checkpointing`` is
    reentrant unless told otherwise: ``false`` for it."""
    cuda_graph: CudaGraph | None = None
    """Megatron-Core's CUDA graphs (Megatron only): ``None`` (eager, Megatron-Core's default),
    ``Layers`` (Transformer Engine's per-layer graphs of the scopes a recipe names:
    ``--cuda-graph-impl transformer_engine``) or ``FullIteration`` (the whole forward and
    backward replayed as one graph: ``--cuda-graph-impl full_iteration``, a mixture of experts'
    experts padded to a per-rank capacity). Outside a full iteration a dropless MoE layer's host
    sync costs each layer and micro-batch about 4 ms (engine.frameworks.
    MEGATRON_MOE_SYNC_SECONDS, fitted on Megatron-Bridge's runs); the plan names it."""

    cel_rules = (
        Rule(
            cel=(f"!has(self.recomputeStopsEarly) || self.name in {list(EARLY_STOP_FRAMEWORKS)}"),
            message=(
                "recomputeStopsEarly applies to "
                f"{', '.join(EARLY_STOP_FRAMEWORKS[:-1])} and {EARLY_STOP_FRAMEWORKS[-1]} only"
            ),
            field_path=".recomputeStopsEarly",
            check=lambda f: f.recompute_stops_early is None or f.name in EARLY_STOP_FRAMEWORKS,
        ),
        Rule(
            cel="!has(self.cudaGraph) || self.name == 'Megatron'",
            message="cudaGraph (Megatron-Core's CUDA graphs) applies to Megatron only",
            field_path=".cudaGraph",
            check=lambda f: f.cuda_graph is None or f.name == "Megatron",
        ),
        Rule(
            cel=f"!self.compile || self.name in {list(COMPILABLE_FRAMEWORKS)}",
            message=(
                f"compile (torch.compile) applies to {', '.join(COMPILABLE_FRAMEWORKS[:-1])}"
                f" and {COMPILABLE_FRAMEWORKS[-1]} only"
            ),
            field_path=".compile",
            check=lambda f: not f.compile or f.name in COMPILABLE_FRAMEWORKS,
        ),
    )


class TrainingModel(SpecModel):
    """What is trained: the figures the performance engine needs."""

    name: str | None = Field(default=None, max_length=128)
    """Free-form model name, for people (``bert-large``)."""
    parameters: Count | None = None
    """Number of parameters: an integer or ``"340M"``, ``"1.3B"`` (K, M, G/B, T). Derived from
    the architecture when one is given (a given count must then agree within 3%)."""
    architecture: TransformerArchitecture | None = None
    """A transformer's shape: with it the engine derives parameters and FLOPs per token and
    plans memory and the tensor / pipeline / data-parallel layout (spec.parallelism)."""
    gradient_dtype: GradientDType | None = Field(default=None, alias="gradientDType")
    """Element type of the gradients that are all-reduced: with an architecture, also what the
    gradient buffer holds a parameter (fp32: 4 bytes, every framework's default; bf16:
    Megatron-Core's main_grads_dtype / grad_reduce_in_bf16, torchtitan's
    mixed_precision_reduce). Left out: fp32, or bf16 with parameterDType bf16."""
    optimizer_moments_dtype: OptimizerMomentsDType | None = Field(
        default=None, alias="optimizerMomentsDType"
    )
    """Element type of Adam's first and second moments: ``fp32`` (every framework's default)
    or ``bf16``, Megatron-Core's precision-aware optimizer (``--use-precision-aware-optimizer
    --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``, which Megatron-Bridge's DeepSeek recipes
    set; the DeepSeek-V3 report, section 3.3.2): 8 bytes of optimizer state a parameter beside
    the fp32 master instead of 12, and an optimizer step that moves 20 bytes a parameter
    instead of 28. ``bf16`` with framework Megatron only. Left out: fp32, or bf16 with
    parameterDType bf16. Passed to workers as RINGMASTER_OPTIMIZER_MOMENTS_DTYPE."""
    parameter_dtype: ParameterDType = Field(default="fp32", alias="parameterDType")
    """Element type of the parameters the optimizer updates: ``fp32`` (every framework's
    default: fp32 parameters cast to bf16 for compute, or fp32 masters beside the bf16 weights)
    or ``bf16``, no fp32 copy at all: MaxText's ``weight_dtype: bfloat16`` (tpu-recipes'
    Llama 3.1 70B on a v6e-32, its Mixtral 8x22B and DeepSeek-V3 configs) and plain PyTorch's
    ``model.to(torch.bfloat16)``. The gradients and Adam's moments take the parameters' dtype
    then (MaxText's mu_dtype and nu inherit weight_dtype; PyTorch's AdamW keeps its states in
    the parameters' dtype; the gradients of bf16 parameters are bf16): 8 bytes a parameter of
    state instead of 16, and an optimizer step that moves 14 bytes a parameter instead of 28.
    ``bf16`` with framework MaxText or PyTorch, gradientDType and optimizerMomentsDType left out
    or bf16. Passed to workers as RINGMASTER_PARAMETER_DTYPE."""
    compute_seconds_per_step: float | None = Field(default=None, gt=0, le=86400)
    """Measured forward+backward time of one step on one worker (give this or flopsPerSample)."""
    flops_per_sample: Count | None = None
    """Training FLOPs per sample (forward + backward, about 6 x parameters per token); give this
    or computeSecondsPerStep."""
    batch_size_per_accelerator: Int | None = Field(default=None, ge=1, le=65536)
    """Samples per accelerator per step; may be left out when parallelism.globalBatchSize is
    given (it is then derived)."""
    compute_precision: ComputePrecision | None = None
    """Precision the matrix math runs in, for the flopsPerSample roofline (``fp32``, ``tf32``,
    ``bf16``, ``fp16``, ``fp8``, ``fp4``); omitted: ``bf16`` where the hardware has it, else
    ``fp16``, else ``fp32``. ``fp4`` is NVFP4 as Transformer Engine trains it (its
    NVFP4BlockScaling recipe; Megatron-LM's --fp4-format e2m1 --fp4-recipe nvfp4): the linear
    layers' forward, data-gradient and weight-gradient GEMMs in FP4, none kept in bf16 (the
    default of Megatron-Bridge and of its NVFP4 recipes; NVIDIA's accuracy recipe, arXiv
    2509.25149, keeps about 16 % in bf16, which the engine does not state), on chips with FP4
    tensor cores (B200, GB200). A precision the accelerator lacks (fp8 on an A100, fp4
    on an H100) is reported on the job."""
    fp8_recipe: Fp8Recipe | None = None
    """With computePrecision ``fp8`` and an architecture, which matmuls run in FP8: ``Linear``
    (the default: the layers' linear layers, as Transformer Engine's default recipe and
    torchtitan's Float8 on nn.Linear; the attention core and the LM head stay bf16) or
    ``AllMatmuls`` (the attention core too, as Transformer Engine's FP8 attention)."""

    @property
    def gradient_element_type(self) -> str:
        """The gradients' dtype as the job runs them: bf16 parameters have bf16 gradients."""
        return "bf16" if self.parameter_dtype == "bf16" else str(self.gradient_dtype or "fp32")

    @property
    def moment_element_type(self) -> str:
        """Adam's moments' dtype as the job keeps them: bf16 parameters' moments are bf16."""
        if self.parameter_dtype == "bf16":
            return "bf16"
        return str(self.optimizer_moments_dtype or "fp32")

    cel_rules = (
        Rule(
            cel=(
                "!has(self.fp8Recipe)"
                " || (has(self.computePrecision) && self.computePrecision == 'fp8')"
            ),
            message="fp8Recipe needs computePrecision: fp8",
            field_path=".fp8Recipe",
            reason="FieldValueForbidden",
            check=lambda s: s.fp8_recipe is None or s.compute_precision == "fp8",
        ),
        Rule(
            cel=(
                "has(self.architecture)"
                " || has(self.computeSecondsPerStep) != has(self.flopsPerSample)"
            ),
            message="give exactly one of computeSecondsPerStep and flopsPerSample",
            field_path=".computeSecondsPerStep",
            check=lambda s: (
                s.architecture is not None
                or (s.compute_seconds_per_step is None) != (s.flops_per_sample is None)
            ),
        ),
        Rule(
            cel=(
                "!has(self.architecture) || !has(self.computeSecondsPerStep)"
                " || !has(self.flopsPerSample)"
            ),
            message="give at most one of computeSecondsPerStep and flopsPerSample (with an "
            "architecture, FLOPs are derived)",
            field_path=".flopsPerSample",
            reason="FieldValueForbidden",
            check=lambda s: (
                s.architecture is None
                or s.compute_seconds_per_step is None
                or s.flops_per_sample is None
            ),
        ),
        Rule(
            cel="has(self.parameters) || has(self.architecture)",
            message="give parameters, or an architecture to derive them from",
            field_path=".parameters",
            reason="FieldValueRequired",
            check=lambda s: s.parameters is not None or s.architecture is not None,
        ),
        Rule(
            # A suffixed string ("70B") is checked by the operator, which can parse it.
            cel=(
                "!has(self.architecture) || !has(self.parameters)"
                " || type(self.parameters) == string"
                f" || (self.parameters * 100 >= {_DERIVED} * {100 - PARAMETERS_TOLERANCE_PERCENT}"
                f" && self.parameters * 100 <= {_DERIVED} * {100 + PARAMETERS_TOLERANCE_PERCENT})"
            ),
            message="parameters must agree with the architecture's derived count within 3%",
            field_path=".parameters",
            check=_parameters_agree,
            message_expression=(
                "'parameters %d differs by more than 3%% from %d, the count the architecture"
                f" implies'.format([self.parameters, {_DERIVED}])"
            ),
            message_for=lambda s: (
                f"parameters {s.parameters} differs by more than 3% from "
                f"{architecture_parameters(s.architecture)}, the count the architecture implies"
            ),
        ),
    )
