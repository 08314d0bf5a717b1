"""TrainingJob's spec.parallelism: the layout of an LLM's training over the job's accelerators
(tensor, context, pipeline, data, expert, sharding, micro-batch, recompute), each a number or
``Auto`` for the engine to choose, and the rules that refuse a layout no search can repair, each
CEL rule with its Python twin."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from ringmaster.api.accelerators import cel_is_tpu, is_tpu
from ringmaster.api.base import Int, Rule, SpecModel, whole_number

AUTO: Literal["Auto"] = "Auto"


def _int_or_auto(value: Any) -> int | str:
    value = whole_number(value)
    if isinstance(value, bool):
        raise ValueError('must be a positive integer or "Auto"')
    if isinstance(value, int):
        if not 1 <= value <= 4096:
            raise ValueError("must be between 1 and 4096")
        return value
    if value != AUTO:
        raise ValueError('must be a positive integer or "Auto"')
    return AUTO


IntOrAuto = Annotated[
    int | str,
    BeforeValidator(_int_or_auto),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^Auto$",
            "minimum": 1,
            "maximum": 4096,
        }
    ),
]
"""A degree of parallelism: a positive integer, or ``Auto`` for the engine to choose."""

Sharding = Literal["Auto", "None", "Optimizer", "Gradients", "Full"]
Recompute = Literal[
    "Auto",
    "None",
    "Selective",
    "Full",
    "SelectiveOp",
    "Minimal",
    "SaveDotExceptMlp",
    "QkvProjOffloaded",
    "MinimalOffloaded",
    "SaveDotExceptMlpwi",
    "MinimalWithContext",
]
ExpertOverlap = Literal["None", "OneFOneB", "DualPipe"]
# How tokens reach their experts (engine.expert_dispatch): NCCL's all-to-all or DeepEP's kernels.
ExpertDispatch = Literal["AllToAll", "DeepEP"]


class Parallelism(SpecModel):
    """How the model is split over the job's accelerators. Every field left out (or ``Auto``)
    is chosen by the engine: the fastest layout that fits in memory (``parallelism: {}`` is a
    full search). The data-parallel degree is what remains: workers x perWorker / (tensor x
    context x pipeline)."""

    tensor: IntOrAuto = AUTO
    """Tensor (Megatron) parallelism: within a host (a divisor of perWorker on GPUs), over
    NVLink or ICI; must divide architecture.attentionHeads."""
    pipeline: IntOrAuto = AUTO
    """Pipeline stages (1F1B schedule): each holds ceil(layers / pipeline) layers but the first
    and the last, which share what the others leave, down to none (Llama 3 405B: 126 layers
    over 16 stages, the first and the last of 7; DeepSeek-V3: 61 over 16, of 3 and 2)."""
    sharding: Sharding = AUTO
    """Sharding of the data-parallel replicas: ``None`` (DDP), ``Optimizer`` (ZeRO-1),
    ``Gradients`` (ZeRO-2), ``Full`` (ZeRO-3 / FSDP full shard)."""
    micro_batch_size: IntOrAuto = AUTO
    """Sequences per micro-batch."""
    global_batch_size: Int | None = Field(default=None, ge=1, le=16777216)
    """Sequences per step over all replicas (tokens: x architecture.sequenceLength); gradient
    accumulation follows. Default: batchSizePerAccelerator x accelerators."""
    activation_recompute: Recompute = AUTO
    """What is recomputed in backward instead of kept (README, "LLM training layouts", maps each
    to its launcher's flag): ``None`` (FlashAttention, nothing recomputed), ``Selective``
    (Megatron-LM's: the attention core), ``Full`` (every layer from its input),
    ``SelectiveOp`` (torchtitan's op-level selective AC), ``Minimal``, ``SaveDotExceptMlp`` and
    ``SaveDotExceptMlpwi`` (MaxText's remat policies ``minimal``, ``save_dot_except_mlp`` and
    ``save_dot_except_mlpwi``, which also keeps the FFN's output projection),
    ``MinimalWithContext`` (MaxText's ``minimal_with_context``, once ``minimal_flash``: Minimal's
    projections and the attention's output, so the attention core is not rerun),
    ``QkvProjOffloaded``
    (MaxText's ``qkv_proj_offloaded``: Q, K and V go to the host's pinned memory, the rest of
    the layer is recomputed) and ``MinimalOffloaded`` (MaxText's ``minimal_offloaded``: every
    projection's output goes to host memory, the attention core is recomputed); with both only
    the layer input stays in HBM, and the plan reports ``hostOffloadBytesPerAccelerator`` and
    the copies' exposed time (``stepPartsSeconds.activationOffload``). ``Auto`` searches None,
    Selective and Full."""
    recompute_layers: int | None = Field(default=None, ge=1, le=1024)
    """With activationRecompute ``Full``: recompute only this many layers of each model chunk
    (a pipeline stage's, or each virtual stage's under interleaving), the rest keep every
    activation, as ``None`` does: Megatron-LM's --recompute-num-layers with --recompute-method
    block (Megatron-Bridge's recompute_num_layers). Megatron only; passed to workers as
    RINGMASTER_RECOMPUTE_LAYERS. Left out: every layer."""
    activation_offload_layers: int | None = Field(default=None, ge=1, le=1023)
    """Offload this many layers' activations to host memory in forward and bring them back in
    backward, the copies beside the next layers' compute: Megatron-LM's --cpu-offloading
    --cpu-offloading-num-layers N (activations only; Megatron-Bridge's cpu_offloading_num_layers,
    which its GB200 Llama 3 70B FP8 recipe sets to 40). Megatron only, on one pipeline stage
    without recompute (Megatron-Core refuses it otherwise), fewer than the model's layers. The
    plan reports ``hostOffloadBytesPerAccelerator`` and the copies' exposed time
    (``stepPartsSeconds.activationOffload``); passed to workers as
    RINGMASTER_ACTIVATION_OFFLOAD_LAYERS."""
    offload_layer_inputs: bool = False
    """Offload every layer's input to host memory beside what activationRecompute keeps or
    offloads: MaxText's ``decoder_layer_input: offload`` (its ``remat_policy=custom``, which
    tpu-recipes' v6e recipes set with the query, key and value projections offloaded:
    QkvProjOffloaded with this). MaxText only. The layer inputs leave HBM for the host's DRAM
    (``hostOffloadBytesPerAccelerator``) and cross the host link beside each layer's compute
    (``stepPartsSeconds.activationOffload``); passed to workers as
    RINGMASTER_OFFLOAD_LAYER_INPUTS."""
    vocab_tiling: int | None = Field(default=None, ge=1, le=4096)
    """Compute the loss in this many chunks of the tokens: MaxText's ``num_vocab_tiling``, which
    tpu-recipes' Gemma 3 recipes set to 16 (a 262k vocabulary's logits would not fit a v6e
    chip). The logits' memory divides by it; each chunk's logits and loss are computed again in
    backward (MaxText's custom VJP), one more forward of the LM head. MaxText only; MaxText
    requires it to divide a chip's micro-batch tokens. Passed to workers as
    RINGMASTER_VOCAB_TILING. Left out: 1."""
    iota_embed: bool = False
    """Look the tokens' embeddings up as a one-hot matmul on the matrix units: MaxText's
    ``use_iota_embed``, which its TPU scripts and tpu-recipes' v5e, v5p and v6e recipes set (a
    gather is slow on a TPU). Its forward and the table's gradient are two GEMMs over the
    vocabulary, 4 x vocabulary x hidden FLOPs a token on the first stage
    (``stepPartsSeconds.gemm``), where a gather moves one row. MaxText only; passed to workers
    as RINGMASTER_IOTA_EMBED. Left out: false, MaxText's default."""
    context: IntOrAuto = AUTO
    """Context parallelism (ring attention: Megatron-LM's context_parallel_size, torchtitan's
    CP): each of the c ranks holds sequenceLength / c tokens of every sequence, dividing the
    activations; 2 x context must divide architecture.sequenceLength."""
    virtual_pipeline_stages: Int = Field(default=1, ge=1, le=64)
    """Interleaved 1F1B: model chunks per pipeline stage (1 = plain 1F1B)."""
    expert: IntOrAuto = AUTO
    """Expert parallelism for a mixture of experts (architecture.experts): the routed experts
    are split over this many ranks, as Megatron-Core's expert_model_parallel_size is, so the
    data-parallel degree (and the global batch's rule) stay as they are. Must divide
    architecture.experts; expert x expertTensor must divide a pipeline stage's ranks
    (accelerators / pipeline). ``Auto`` searches it (1 for a dense model)."""
    expert_tensor: IntOrAuto = AUTO
    """The ranks each routed expert is split over (Megatron-Core's expert_tensor_parallel_size,
    whose default is the tensor degree). Below the tensor degree the stage's ranks are
    regrouped for the expert layers (MoE parallel folding: Qwen3-235B's tensor 2, expert 32,
    expertTensor 1). Must divide architecture.expertFfnHiddenSize. ``Auto`` searches the tensor
    degree and 1; a dense model takes Auto or 1."""
    expert_overlap: ExpertOverlap = "None"
    """How a mixture of experts' dispatch / combine all-to-alls overlap another micro-batch's
    compute: ``None`` (on the critical path, the shared experts' compute beside them:
    Megatron-Core's default), ``OneFOneB`` (Megatron-Core's --overlap-moe-expert-parallel-comm:
    in 1F1B's steady state one micro-batch's forward runs beside another's backward, each one's
    all-to-alls behind the other's compute; needs expert > 1, pipeline 1 or
    virtualPipelineStages > 1, and no Full recompute; Megatron-Bridge's published runs realise
    none of that hiding, and the plan prices it so) or ``DualPipe`` (DeepSeek-V3's
    bidirectional pipeline: the same overlap, a bubble of (pipeline/2 - 1)(F&B + B - 3W) and
    two stages' weights per rank; needs an even pipeline and virtualPipelineStages 1). A dense
    model takes None."""
    tensor_overlap: bool = False
    """Overlap the tensor-parallel collectives with the GEMMs they feed or drain (Transformer
    Engine's userbuffers: Megatron-Core's --tp-comm-overlap, NeMo's and Megatron-Bridge's
    tp_comm_overlap; torchtitan's --parallelism.enable_async_tensor_parallel). The plan then
    charges one chunk in ``tensor`` of each collective, and what exceeds the micro-batch's
    GEMMs, instead of the whole of it. Needs ``tensor`` above 1 to change anything."""
    overlap_gradient_reduction: bool | None = None
    """Whether the data-parallel reduction of the gradients runs behind backward, bucket by
    bucket as backward produces them (PyTorch DDP's hooks; Megatron-Core's --overlap-grad-reduce
    with --overlap-param-gather, which Megatron-Bridge's and NeMo's recipes set; DeepSpeed's
    overlap_comm), or, ``false``, after the last micro-batch's backward on the step's critical
    path, with the distributed optimizer's gather of the updated weights after the step
    (Megatron-LM's own default without those switches). Left out: the framework's default,
    true but for DeepSpeed, whose ZeRO-1 and -2 leave overlap_comm off. It applies to sharding
    None, Optimizer and Gradients: FSDP's and ZeRO-3's (Full) gathers and reductions run layer
    by layer (``false`` with sharding Full is refused; under Auto the plan says which applies).
    Passed to workers as RINGMASTER_OVERLAP_GRAD_REDUCE, ``true`` or empty:
    ``${RINGMASTER_OVERLAP_GRAD_REDUCE:+--overlap-grad-reduce --overlap-param-gather}`` passes
    Megatron-LM's switches only when on."""
    expert_capacity_factor: float | None = Field(default=None, gt=0, le=64)
    """Token dropping (Megatron-Core's --moe-expert-capacity-factor): each expert takes at most
    ceil(factor x tokens x activeExperts / experts) of a rank's tokens, the rest are dropped.
    Omitted: dropless. Only for a mixture of experts."""
    expert_pad_to_capacity: bool = False
    """With expertCapacityFactor: pad every expert's input to its capacity
    (--moe-pad-expert-input-to-capacity), so each expert computes and receives exactly
    capacity tokens."""
    pipeline_layout: str | None = Field(
        default=None, min_length=1, max_length=1024, pattern=r"^[EtmL|()*0-9, ]+$"
    )
    """The pipeline's stages written out, in Megatron-Core's --pipeline-model-parallel-layout
    syntax: ``E`` the embedding, ``t`` a decoder layer, ``m`` an MTP module, ``L`` the loss,
    ``|`` between stages, ``x*n`` and ``(...)*n`` repeat (DeepSeek-V3 on 16 ranks:
    ``Et*3|(tt|)*29,m|L``). Its stages are pipeline x virtualPipelineStages, chunk i on rank
    i mod pipeline; it must place every layer and MTP module once, the embedding first and the
    loss last (Megatron's checks: a plan that breaks one fails, naming it). Needs pipeline set;
    the plan costs each rank's layers as written. Passed as RINGMASTER_PIPELINE_LAYOUT."""
    data_replicas: IntOrAuto = 1
    """Hybrid sharding (HSDP) on GPUs: the data-parallel ranks form this many replica groups,
    ZeRO / FSDP sharding spans one group's ranks (data / dataReplicas), and the groups
    all-reduce their gradient shards over the hosts' NICs: torchtitan's
    --parallelism.data_parallel_replicate_degree, PyTorch FSDP's HYBRID_SHARD (one group a
    host), MaxText's dcn_data_parallelism over GPU hosts (with ici_fsdp_parallelism inside
    one). Each chip then holds and updates its group's shard, not the whole job's. Must divide
    the data-parallel degree (a layout whose degree it does not divide is not searched) and
    the accelerators; changes nothing with sharding None. A TPU job's slices replicate
    already (accelerator.slices): TPUs take 1. ``Auto`` lets the search choose between none
    and one group a host, the faster that fits (1 on a TPU or one host). Passed to workers as
    RINGMASTER_DATA_REPLICAS."""
    expert_dispatch: ExpertDispatch = "AllToAll"
    """How a mixture of experts' tokens reach their experts: ``AllToAll`` (Megatron-Core's
    alltoall token dispatcher: NCCL all-to-alls of bf16 activations, a copy per expert) or
    ``DeepEP`` (Megatron-Core's flex dispatcher with DeepEP, --moe-token-dispatcher-type flex;
    DeepSeek-V3's own kernels): the dispatch and the combine's gradient in FP8, one network
    copy per destination host forwarded over NVLink inside it, no per-peer latency. A dense
    model takes AllToAll. Passed to workers as RINGMASTER_EXPERT_DISPATCH."""


_T = "self.parallelism.tensor"
_P = "self.parallelism.pipeline"
_C = "self.parallelism.context"
_E = "self.parallelism.expert"
_ETP = "self.parallelism.expertTensor"
_OVERLAP = "self.parallelism.expertOverlap"
_CF = "self.parallelism.expertCapacityFactor"
_DISPATCH = "self.parallelism.expertDispatch"
_LAYOUT = "self.parallelism.pipelineLayout"
_VPP = "self.parallelism.virtualPipelineStages"
_REC = "self.parallelism.activationRecompute"
_REC_LAYERS = "self.parallelism.recomputeLayers"
_OFFLOAD_LAYERS = "self.parallelism.activationOffloadLayers"
_ARCH = "self.model.architecture"


def _auto(v: Any) -> bool:
    return bool(v == AUTO)


def pipeline_stages_layers(layers: int, pipeline: int) -> bool:
    """Whether ``pipeline`` stages hold ``layers``: ceil(layers / pipeline) each but the first
    and the last, which share what is left, down to none each (twin of
    engine.llm_memory.valid_pipeline; a test keeps them equal)."""
    if pipeline < 1 or pipeline > layers:
        return False
    if pipeline == 1:
        return True
    per_stage = -(-layers // pipeline)
    return per_stage * pipeline - layers <= 2 * per_stage


def _degree(v: int | str) -> int:
    return 1 if v == AUTO else int(v)


def _cel_degree(path: str) -> str:
    return f"(string({path}) == 'Auto' ? 1 : int({path}))"


_CEL_PARALLEL = f"has(self.parallelism) && has({_ARCH})"

# A layout fixed in tensor, context, pipeline and global batch that splits no batch: each
# data-parallel replica runs a whole number of micro-batches per step, so the global batch is a
# multiple of micro-batch x data-parallel degree, accelerators / (tensor x context x pipeline)
# (the engine's own rule, which no layout search can repair; with microBatchSize Auto, of the
# data-parallel degree alone). With context Auto the search may take every remaining accelerator
# for context (data 1), so only the micro-batch must divide. Checked only when the fixed degrees
# divide the accelerators (the rules above report that). Expert parallelism is not a factor here:
# Megatron-Core carves the expert ranks out of data x context, and every one of them still runs
# its own micro-batches, so the data-parallel degree stays accelerators / (t c p).
_MB = "self.parallelism.microBatchSize"
_ACCELERATORS = "self.workers * self.accelerator.perWorker"
_CEL_MODEL_DEGREE = f"(int({_T}) * {_cel_degree(_C)} * int({_P}))"
_CEL_DATA = f"(string({_C}) == 'Auto' ? 1 : ({_ACCELERATORS}) / {_CEL_MODEL_DEGREE})"
_CEL_MB = f"(string({_MB}) == 'Auto' ? 1 : int({_MB}))"
_CEL_BATCH_DIVIDES = (
    "!has(self.parallelism) || !has(self.parallelism.globalBatchSize)"
    f" || string({_T}) == 'Auto' || string({_P}) == 'Auto'"
    f" || ({_ACCELERATORS}) % {_CEL_MODEL_DEGREE} != 0"
    f" || self.parallelism.globalBatchSize % ({_CEL_MB} * {_CEL_DATA}) == 0"
)


# The refusal shows the arithmetic that fails, in each of the three cases that can fail (with
# context and micro-batch both Auto the batch need only be whole).
_GBS = "self.parallelism.globalBatchSize"
_CEL_FIXED_DATA = f"({_ACCELERATORS}) / {_CEL_MODEL_DEGREE}"  # context is not Auto here
_CEL_SPLIT_ARGS = f"{_CEL_FIXED_DATA}, {_ACCELERATORS}, int({_T}), int({_C}), int({_P})"
_CEL_BATCH_MESSAGE = (
    f"string({_C}) == 'Auto' ? 'global batch %d is not a multiple of micro-batch %d (context"
    " Auto: the engine may give context all the accelerators tensor x pipeline leave, so"
    f" data-parallel may be 1)'.format([{_GBS}, {_CEL_MB}])"
    f" : (string({_MB}) == 'Auto' ? 'global batch %d is not a multiple of data-parallel %d ="
    " %d accelerators / (tensor %d x context %d x pipeline %d), whatever micro-batch the engine"
    f" picks'.format([{_GBS}, {_CEL_SPLIT_ARGS}])"
    " : 'global batch %d is not a multiple of micro-batch %d x data-parallel %d = %d"
    " (data-parallel %d = %d accelerators / (tensor %d x context %d x pipeline %d))'"
    f".format([{_GBS}, {_CEL_MB}, {_CEL_FIXED_DATA}, {_CEL_MB} * {_CEL_FIXED_DATA},"
    f" {_CEL_SPLIT_ARGS}]))"
)


def _batch_message(s: Any) -> str:
    """Twin of ``_CEL_BATCH_MESSAGE``."""
    p = s.parallelism
    head = f"global batch {p.global_batch_size} is not a multiple of"
    if _auto(p.context):
        return (
            f"{head} micro-batch {_degree(p.micro_batch_size)} (context Auto: the engine may give "
            "context all the accelerators tensor x pipeline leave, so data-parallel may be 1)"
        )
    data = _data_degree(s)
    split = (
        f"{data} = {s.workers * s.accelerator.per_worker} accelerators / (tensor {p.tensor} x "
        f"context {p.context} x pipeline {p.pipeline})"
    )
    if _auto(p.micro_batch_size):
        return f"{head} data-parallel {split}, whatever micro-batch the engine picks"
    micro = int(p.micro_batch_size)
    return (
        f"{head} micro-batch {micro} x data-parallel {data} = {micro * data} (data-parallel "
        f"{split})"
    )


def _model_degree(p: Any) -> int:
    return int(p.tensor) * _degree(p.context) * int(p.pipeline)


def _data_degree(s: Any) -> int:
    p = s.parallelism
    if _auto(p.context):
        return 1
    return int(s.workers * s.accelerator.per_worker // _model_degree(p))


def _batch_divides(s: Any) -> bool:
    p = s.parallelism
    if p is None or p.global_batch_size is None:
        return True
    if _auto(p.tensor) or _auto(p.pipeline):
        return True
    if (s.workers * s.accelerator.per_worker) % _model_degree(p):
        return True
    return bool(p.global_batch_size % (_degree(p.micro_batch_size) * _data_degree(s)) == 0)


_ACC_IS_TPU = cel_is_tpu("self.accelerator.type")

_CEL_IS_MOE = f"(has({_ARCH}.experts) && {_ARCH}.experts > 1)"


def _is_moe(s: Any) -> bool:
    arch = s.model.architecture
    return arch is not None and arch.experts is not None and arch.experts > 1


def _overlap(s: Any) -> str:
    return "None" if s.parallelism is None else str(s.parallelism.expert_overlap)


def _cel_overlap_is(name: str) -> str:
    return f"has(self.parallelism) && has({_OVERLAP}) && {_OVERLAP} == '{name}'"


def _framework_only(
    name: str,
    field: str,
    attribute: str,
    flag: str,
    guard: str,
    unset_cel: str | None = None,
    unset: Any = lambda v: v is None,
) -> Rule:
    """``parallelism.<field>`` is framework ``name``'s setting (``flag``, named with its owner:
    "MaxText's num_vocab_tiling"): refused unless the spec names that framework or the field
    holds its default. ``guard``: the CEL that exempts a spec the rule does not apply to;
    ``unset_cel`` (of the field) and ``unset`` (of its value): a value as good as absent."""
    default = "" if unset_cel is None else f" || {unset_cel.format(f'self.parallelism.{field}')}"
    return Rule(
        cel=(
            f"{guard} || !has(self.parallelism.{field}){default}"
            f" || (has(self.framework) && self.framework.name == '{name}')"
        ),
        message=f"parallelism.{field} is {flag}: set framework.name {name}",
        field_path=f".parallelism.{field}",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or unset(getattr(s.parallelism, attribute))
            or (s.framework is not None and s.framework.name == name)
        ),
    )


def _megatron_only(field: str, attribute: str, flag: str) -> Rule:
    """``parallelism.<field>`` is a Megatron-LM setting (``flag``): refused unless the spec names
    framework Megatron."""
    return _framework_only(
        "Megatron", field, attribute, f"Megatron-LM's {flag}", f"!({_CEL_PARALLEL})"
    )


# Full recompute limited to some layers: Megatron-LM's block method, which no other launcher has.
RECOMPUTE_LAYERS_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"!({_CEL_PARALLEL}) || !has({_REC_LAYERS}) || (has({_REC}) && {_REC} == 'Full')",
        message="parallelism.recomputeLayers limits Full recompute to some layers: set "
        "activationRecompute Full",
        field_path=".parallelism.recomputeLayers",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or s.parallelism.recompute_layers is None
            or s.parallelism.activation_recompute == "Full"
        ),
    ),
    _megatron_only("recomputeLayers", "recompute_layers", "--recompute-num-layers (block method)"),
)

# Megatron-Core's CPU offloading: its TransformerConfig refuses it with pipeline parallelism,
# with any recompute, and for as many layers as the model has (transformer_config.py
# __post_init__).
ACTIVATION_OFFLOAD_RULES: tuple[Rule, ...] = (
    _megatron_only(
        "activationOffloadLayers", "activation_offload_layers", "--cpu-offloading-num-layers"
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || !has({_OFFLOAD_LAYERS}) || ((!has({_REC}) || {_REC} == 'Auto'"
            f" || {_REC} == 'None') && (string({_P}) == 'Auto' || int({_P}) == 1))"
        ),
        message="parallelism.activationOffloadLayers runs on one pipeline stage without recompute"
        " (Megatron-Core refuses it otherwise): pipeline 1 and activationRecompute None",
        field_path=".parallelism.activationOffloadLayers",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or s.parallelism.activation_offload_layers is None
            or (
                s.parallelism.activation_recompute in (AUTO, "None")
                and (_auto(s.parallelism.pipeline) or int(s.parallelism.pipeline) == 1)
            )
        ),
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || !has({_OFFLOAD_LAYERS}) || {_OFFLOAD_LAYERS} < {_ARCH}.layers"
        ),
        message="parallelism.activationOffloadLayers must be fewer than model.architecture.layers"
        " (Megatron-Core keeps the last layer on the device)",
        field_path=".parallelism.activationOffloadLayers",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or s.parallelism.activation_offload_layers is None
            or s.parallelism.activation_offload_layers < s.model.architecture.layers
        ),
    ),
)


def _maxtext_only(field: str, attribute: str, flag: str, unset_cel: str, unset: Any) -> Rule:
    """``parallelism.<field>`` is a MaxText setting (``flag``), as good as absent at its default."""
    return _framework_only(
        "MaxText", field, attribute, f"MaxText's {flag}", "!has(self.parallelism)", unset_cel, unset
    )


# MaxText's decoder_layer_input offload: its custom remat policy's name for the scanned layer's
# input (MaxText src/maxtext/layers/decoders.py, checkpoint_name(inputs, "decoder_layer_input")),
# its vocabulary tiling (num_vocab_tiling, src/maxtext/configs/base.yml) and its one-hot
# embedding lookup (use_iota_embed, src/maxtext/layers/embeddings.py).
LAYER_INPUT_OFFLOAD_RULE = _maxtext_only(
    "offloadLayerInputs",
    "offload_layer_inputs",
    "decoder_layer_input offload (its custom remat policy)",
    "!{}",
    lambda v: not v,
)
VOCAB_TILING_RULE = _maxtext_only(
    "vocabTiling", "vocab_tiling", "num_vocab_tiling", "{} == 1", lambda v: v in (None, 1)
)
IOTA_EMBED_RULE = _maxtext_only("iotaEmbed", "iota_embed", "use_iota_embed", "!{}", lambda v: not v)

# The reduction after backward is a bucketed reduction's setting (DDP, Megatron's distributed
# optimizer, ZeRO-1 / -2); FSDP's and ZeRO-3's run layer by layer, prefetched.
_GRAD_OVERLAP = "self.parallelism.overlapGradientReduction"
GRADIENT_OVERLAP_RULE = Rule(
    cel=(
        f"!has(self.parallelism) || !has({_GRAD_OVERLAP}) || {_GRAD_OVERLAP}"
        " || !has(self.parallelism.sharding) || self.parallelism.sharding != 'Full'"
    ),
    message="parallelism.overlapGradientReduction false is the bucketed reduction's setting "
    "(Megatron-LM without --overlap-grad-reduce, DeepSpeed ZeRO-1 / -2's overlap_comm false): "
    "sharding Full (FSDP, ZeRO-3) gathers and reduces layer by layer; set sharding None, "
    "Optimizer, Gradients or Auto",
    field_path=".parallelism.overlapGradientReduction",
    reason="FieldValueForbidden",
    check=lambda s: (
        s.parallelism is None
        or s.parallelism.overlap_gradient_reduction is not False
        or s.parallelism.sharding != "Full"
    ),
)

# The mixture-of-experts training features (issue 42): the all-to-all overlap schedules and token
# dropping, each refused where the launcher would refuse it. OneFOneB's preconditions are
# Megatron-Core's (megatron/core/transformer/transformer_config.py, __post_init__ under
# overlap_moe_expert_parallel_comm, NVIDIA/Megatron-LM @ d98e8a6: expert_model_parallel_size > 1,
# virtual_pipeline_model_parallel_size set when pipeline > 1 (a virtual size of 1 is unset by
# arguments.py), recompute_granularity != 'full'); DualPipe's are the DualPipe library's
# (deepseek-ai/DualPipe dualpipe/dualpipe.py @ 3da1bbe: num_ranks % 2 == 0; one model chunk per
# direction, so no interleaving).
MOE_FEATURE_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"!({_CEL_PARALLEL}) || !has({_OVERLAP}) || {_OVERLAP} == 'None' || {_CEL_IS_MOE}",
        message="parallelism.expertOverlap overlaps a mixture of experts' all-to-alls: a dense "
        "model (no model.architecture.experts) takes None",
        field_path=".parallelism.expertOverlap",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or _overlap(s) == "None"
            or _is_moe(s)
        ),
    ),
    Rule(
        cel=f"!({_CEL_PARALLEL}) || !has({_LAYOUT}) || (has({_P}) && {_P} != 'Auto')",
        message="parallelism.pipelineLayout writes out the stages of a fixed pipeline: set "
        "parallelism.pipeline (its stages are pipeline x virtualPipelineStages)",
        field_path=".parallelism.pipelineLayout",
        check=lambda s: (
            s.parallelism is None
            or s.parallelism.pipeline_layout is None
            or s.parallelism.pipeline != AUTO
        ),
    ),
    Rule(
        cel=f"!({_CEL_PARALLEL}) || !has({_DISPATCH}) || {_DISPATCH} == 'AllToAll' || "
        f"{_CEL_IS_MOE}",
        message="parallelism.expertDispatch moves a mixture of experts' tokens: a dense model "
        "(no model.architecture.experts) takes AllToAll",
        field_path=".parallelism.expertDispatch",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or s.parallelism.expert_dispatch == "AllToAll"
            or _is_moe(s)
        ),
    ),
    Rule(
        cel=f"!({_CEL_PARALLEL}) || !has({_CF}) || {_CEL_IS_MOE}",
        message="parallelism.expertCapacityFactor caps the tokens each routed expert takes: a "
        "dense model (no model.architecture.experts) has none",
        field_path=".parallelism.expertCapacityFactor",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or s.parallelism.expert_capacity_factor is None
            or _is_moe(s)
        ),
    ),
    Rule(
        cel=(
            "!has(self.parallelism) || !has(self.parallelism.expertPadToCapacity)"
            f" || !self.parallelism.expertPadToCapacity || has({_CF})"
        ),
        message="parallelism.expertPadToCapacity needs expertCapacityFactor (a dropless "
        "mixture has no capacity to pad to)",
        field_path=".parallelism.expertPadToCapacity",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or not s.parallelism.expert_pad_to_capacity
            or s.parallelism.expert_capacity_factor is not None
        ),
    ),
    Rule(
        cel=f"!({_cel_overlap_is('OneFOneB')}) || string({_E}) == 'Auto' || int({_E}) > 1",
        message="parallelism.expertOverlap OneFOneB overlaps expert-parallel all-to-alls: it "
        "needs expert > 1 (Megatron-Core asserts it)",
        field_path=".parallelism.expertOverlap",
        check=lambda s: (
            _overlap(s) != "OneFOneB"
            or _auto(s.parallelism.expert)
            or int(s.parallelism.expert) > 1
        ),
    ),
    Rule(
        cel=(
            f"!({_cel_overlap_is('OneFOneB')}) || string({_P}) == 'Auto' || int({_P}) == 1"
            f" || (has({_VPP}) && {_VPP} > 1)"
        ),
        message="parallelism.expertOverlap OneFOneB with pipeline > 1 needs "
        "virtualPipelineStages > 1 (Megatron-Core pairs the micro-batches of the interleaved "
        "schedule only)",
        field_path=".parallelism.expertOverlap",
        check=lambda s: (
            _overlap(s) != "OneFOneB"
            or _auto(s.parallelism.pipeline)
            or int(s.parallelism.pipeline) == 1
            or s.parallelism.virtual_pipeline_stages > 1
        ),
    ),
    Rule(
        cel=f"!({_cel_overlap_is('OneFOneB')}) || !has({_REC}) || {_REC} != 'Full'",
        message="parallelism.expertOverlap OneFOneB cannot run with activationRecompute Full "
        "(Megatron-Core asserts it)",
        field_path=".parallelism.expertOverlap",
        check=lambda s: _overlap(s) != "OneFOneB" or s.parallelism.activation_recompute != "Full",
    ),
    Rule(
        cel=(
            f"!({_cel_overlap_is('DualPipe')}) || ((string({_P}) == 'Auto' || int({_P}) % 2 == 0)"
            f" && (!has({_VPP}) || {_VPP} == 1))"
        ),
        message="parallelism.expertOverlap DualPipe needs an even pipeline and "
        "virtualPipelineStages 1 (its two directions pair stage i with stage pipeline - 1 - i)",
        field_path=".parallelism.expertOverlap",
        check=lambda s: (
            _overlap(s) != "DualPipe"
            or (
                (_auto(s.parallelism.pipeline) or int(s.parallelism.pipeline) % 2 == 0)
                and s.parallelism.virtual_pipeline_stages == 1
            )
        ),
    ),
)

_REPLICAS = "self.parallelism.dataReplicas"
_CEL_REPLICAS_FIXED = _cel_degree(_REPLICAS)  # Auto: 1 here (none fixed)

# Hybrid sharding: the replica groups split the accelerators whole, on GPUs (a TPU's slices are
# its replica groups).
DATA_REPLICAS_RULES: tuple[Rule, ...] = (
    Rule(
        cel=(
            f"!has(self.parallelism) || !has({_REPLICAS}) || {_CEL_REPLICAS_FIXED} == 1"
            f" || ({_ACCELERATORS}) % {_CEL_REPLICAS_FIXED} == 0"
        ),
        message="parallelism.dataReplicas must divide the accelerators (workers x perWorker)",
        field_path=".parallelism.dataReplicas",
        check=lambda s: (
            s.parallelism is None
            or _degree(s.parallelism.data_replicas) == 1
            or (s.workers * s.accelerator.per_worker) % _degree(s.parallelism.data_replicas) == 0
        ),
    ),
    Rule(
        cel=(
            f"!has(self.parallelism) || !has({_REPLICAS}) || {_CEL_REPLICAS_FIXED} == 1"
            f" || !{_ACC_IS_TPU}"
        ),
        message="parallelism.dataReplicas is hybrid sharding over GPU hosts: a TPU job's "
        "slices replicate its states (accelerator.slices); TPUs take 1",
        field_path=".parallelism.dataReplicas",
        reason="FieldValueForbidden",
        check=lambda s: (
            s.parallelism is None
            or _degree(s.parallelism.data_replicas) == 1
            or not is_tpu(s.accelerator.type)
        ),
    ),
)

# The rules on spec.parallelism, which need the spec's workers, accelerator and
# model.architecture: TrainingJobSpec's first rules, in this order.
PARALLELISM_RULES: tuple[Rule, ...] = (
    Rule(
        cel=f"!has(self.parallelism) || has({_ARCH})",
        message="parallelism needs model.architecture (layers and heads to split)",
        field_path=".parallelism",
        reason="FieldValueForbidden",
        check=lambda s: s.parallelism is None or s.model.architecture is not None,
    ),
    Rule(
        cel=(
            "has(self.model.batchSizePerAccelerator)"
            " || (has(self.parallelism) && has(self.parallelism.globalBatchSize))"
        ),
        message="give model.batchSizePerAccelerator, or parallelism.globalBatchSize",
        field_path=".model.batchSizePerAccelerator",
        reason="FieldValueRequired",
        check=lambda s: (
            s.model.batch_size_per_accelerator is not None
            or (s.parallelism is not None and s.parallelism.global_batch_size is not None)
        ),
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || string({_T}) == 'Auto'"
            f" || {_ARCH}.attentionHeads % int({_T}) == 0"
        ),
        message="parallelism.tensor must divide model.architecture.attentionHeads",
        field_path=".parallelism.tensor",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or _auto(s.parallelism.tensor)
            or s.model.architecture.attention_heads % int(s.parallelism.tensor) == 0
        ),
        message_expression=(
            f"'tensor %s does not divide attentionHeads %d'.format([{_T}, {_ARCH}.attentionHeads])"
        ),
        message_for=lambda s: (
            f"tensor {s.parallelism.tensor} does not divide attentionHeads "
            f"{s.model.architecture.attention_heads}"
        ),
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || string({_P}) == 'Auto' || ({_ARCH}.layers >= int({_P})"
            f" && (int({_P}) == 1 || int({_P}) * (({_ARCH}.layers + int({_P}) - 1) / int({_P}))"
            f" - {_ARCH}.layers <= 2 * (({_ARCH}.layers + int({_P}) - 1) / int({_P}))))"
        ),
        message="parallelism.pipeline must stage model.architecture.layers: each stage holds "
        "ceil(layers / pipeline) layers but the first and the last, which share the rest",
        field_path=".parallelism.pipeline",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or _auto(s.parallelism.pipeline)
            or pipeline_stages_layers(s.model.architecture.layers, int(s.parallelism.pipeline))
        ),
        message_expression=(
            "'pipeline %s cannot stage layers %d: each stage holds ceil(layers / pipeline)"
            " layers but the first and the last, which share the rest'"
            f".format([{_P}, {_ARCH}.layers])"
        ),
        message_for=lambda s: (
            f"pipeline {s.parallelism.pipeline} cannot stage layers "
            f"{s.model.architecture.layers}: each stage holds ceil(layers / pipeline) "
            "layers but the first and the last, which share the rest"
        ),
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || string({_C}) == 'Auto' || int({_C}) == 1"
            f" || {_ARCH}.sequenceLength % (2 * int({_C})) == 0"
        ),
        message="2 x parallelism.context must divide model.architecture.sequenceLength",
        field_path=".parallelism.context",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or _auto(s.parallelism.context)
            or int(s.parallelism.context) == 1
            or s.model.architecture.sequence_length % (2 * int(s.parallelism.context)) == 0
        ),
        message_expression=(
            "'context %s: 2 x context must divide sequenceLength %d (ring attention splits"
            f" each sequence in 2 x context chunks)'.format([{_C}, {_ARCH}.sequenceLength])"
        ),
        message_for=lambda s: (
            f"context {s.parallelism.context}: 2 x context must divide sequenceLength "
            f"{s.model.architecture.sequence_length} (ring attention splits each sequence "
            "in 2 x context chunks)"
        ),
    ),
    Rule(
        cel=(
            f"!has(self.parallelism) || string({_C}) == 'Auto'"
            " || (self.workers * self.accelerator.perWorker)"
            f" % ({_cel_degree(_T)} * {_cel_degree(_P)} * int({_C})) == 0"
        ),
        message="tensor x context x pipeline must divide the accelerators (workers x perWorker)",
        field_path=".parallelism.context",
        check=lambda s: (
            s.parallelism is None
            or _auto(s.parallelism.context)
            or (s.workers * s.accelerator.per_worker)
            % (
                _degree(s.parallelism.tensor)
                * _degree(s.parallelism.pipeline)
                * int(s.parallelism.context)
            )
            == 0
        ),
        message_expression=(
            "'tensor %s x context %s x pipeline %s does not divide the %d accelerators"
            f" (workers x perWorker)'.format([{_T}, {_C}, {_P},"
            " self.workers * self.accelerator.perWorker])"
        ),
        message_for=lambda s: (
            f"tensor {s.parallelism.tensor} x context {s.parallelism.context} x pipeline "
            f"{s.parallelism.pipeline} does not divide the "
            f"{s.workers * s.accelerator.per_worker} accelerators (workers x perWorker)"
        ),
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || string({_E}) == 'Auto' || int({_E}) == 1"
            f" || (has({_ARCH}.experts) && {_ARCH}.experts % int({_E}) == 0)"
        ),
        message="parallelism.expert must divide model.architecture.experts (a dense model "
        "takes expert 1)",
        field_path=".parallelism.expert",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or _auto(s.parallelism.expert)
            or int(s.parallelism.expert) == 1
            or (
                s.model.architecture.experts is not None
                and s.model.architecture.experts % int(s.parallelism.expert) == 0
            )
        ),
    ),
    Rule(
        cel=(
            f"!has(self.parallelism) || string({_E}) == 'Auto'"
            " || (self.workers * self.accelerator.perWorker)"
            f" % ({_cel_degree(_P)} * int({_E}) * {_cel_degree(_ETP)}) == 0"
        ),
        message="pipeline x expert x expertTensor must divide the accelerators: the expert "
        "ranks, each expert split expertTensor ways, fill a pipeline stage's ranks",
        field_path=".parallelism.expert",
        check=lambda s: (
            s.parallelism is None
            or _auto(s.parallelism.expert)
            or (s.workers * s.accelerator.per_worker)
            % (
                _degree(s.parallelism.pipeline)
                * int(s.parallelism.expert)
                * _degree(s.parallelism.expert_tensor)
            )
            == 0
        ),
        message_expression=(
            "'expert %s x expertTensor %s x pipeline %s does not divide the %d"
            f" accelerators'.format([{_E}, {_ETP}, {_P},"
            " self.workers * self.accelerator.perWorker])"
        ),
        message_for=lambda s: (
            f"expert {s.parallelism.expert} x expertTensor {s.parallelism.expert_tensor} x "
            f"pipeline {s.parallelism.pipeline} does not divide the "
            f"{s.workers * s.accelerator.per_worker} accelerators"
        ),
    ),
    Rule(
        cel=(
            f"!({_CEL_PARALLEL}) || string({_ETP}) == 'Auto' || int({_ETP}) == 1"
            f" || (has({_ARCH}.experts) && (!has({_ARCH}.expertFfnHiddenSize)"
            f" || {_ARCH}.expertFfnHiddenSize % int({_ETP}) == 0))"
        ),
        message="parallelism.expertTensor must divide model.architecture.expertFfnHiddenSize "
        "(a dense model takes expertTensor 1)",
        field_path=".parallelism.expertTensor",
        check=lambda s: (
            s.parallelism is None
            or s.model.architecture is None
            or _auto(s.parallelism.expert_tensor)
            or int(s.parallelism.expert_tensor) == 1
            or (
                s.model.architecture.experts is not None
                and (
                    s.model.architecture.expert_ffn_hidden_size is None
                    or s.model.architecture.expert_ffn_hidden_size
                    % int(s.parallelism.expert_tensor)
                    == 0
                )
            )
        ),
    ),
    Rule(
        cel=(
            "!has(self.parallelism) || (self.workers * self.accelerator.perWorker)"
            f" % ({_cel_degree(_T)} * {_cel_degree(_P)}) == 0"
        ),
        message="tensor x pipeline must divide the accelerators (workers x perWorker)",
        field_path=".parallelism",
        check=lambda s: (
            s.parallelism is None
            or (s.workers * s.accelerator.per_worker)
            % (_degree(s.parallelism.tensor) * _degree(s.parallelism.pipeline))
            == 0
        ),
        message_expression=(
            "'tensor %s x pipeline %s does not divide the %d accelerators (workers x"
            f" perWorker)'.format([{_T}, {_P}, self.workers * self.accelerator.perWorker])"
        ),
        message_for=lambda s: (
            f"tensor {s.parallelism.tensor} x pipeline {s.parallelism.pipeline} does not "
            f"divide the {s.workers * s.accelerator.per_worker} accelerators "
            "(workers x perWorker)"
        ),
    ),
    Rule(
        cel=_CEL_BATCH_DIVIDES,
        message="parallelism.globalBatchSize must be a multiple of microBatchSize (1 when "
        "Auto) x the data-parallel degree (accelerators / (tensor x context x pipeline); 1 "
        "when context is Auto)",
        field_path=".parallelism.globalBatchSize",
        check=_batch_divides,
        message_expression=_CEL_BATCH_MESSAGE,
        message_for=_batch_message,
    ),
    Rule(
        cel=(
            f"!has(self.parallelism) || {_ACC_IS_TPU}"
            f" || string({_T}) == 'Auto' || self.accelerator.perWorker % int({_T}) == 0"
        ),
        message="parallelism.tensor must divide accelerator.perWorker: tensor parallelism "
        "stays within a host's NVLink",
        field_path=".parallelism.tensor",
        check=lambda s: (
            s.parallelism is None
            or is_tpu(s.accelerator.type)
            or _auto(s.parallelism.tensor)
            or s.accelerator.per_worker % int(s.parallelism.tensor) == 0
        ),
        message_expression=(
            "'tensor %s does not divide perWorker %d: tensor parallelism stays within a host'"
            f".format([{_T}, self.accelerator.perWorker])"
        ),
        message_for=lambda s: (
            f"tensor {s.parallelism.tensor} does not divide perWorker "
            f"{s.accelerator.per_worker}: tensor parallelism stays within a host"
        ),
    ),
    *MOE_FEATURE_RULES,
    *RECOMPUTE_LAYERS_RULES,
    *ACTIVATION_OFFLOAD_RULES,
    LAYER_INPUT_OFFLOAD_RULE,
    VOCAB_TILING_RULE,
    IOTA_EMBED_RULE,
    GRADIENT_OVERLAP_RULE,
    *DATA_REPLICAS_RULES,
)
