"""A model's architecture, shared by TrainingJob and InferenceEndpoint (spec.model.architecture).

With an architecture the engine derives the parameter count, FLOPs per token, weight and KV-cache
bytes (ringmaster.engine.transformer holds the formulas; :func:`architecture_parameters` and
:func:`cel_architecture_parameters` are their twins here, for validation at ``kubectl apply``,
since this package imports nothing else of ringmaster; a test keeps the three equal).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ringmaster.api.base import Int, Rule, SpecModel

FfnType = Literal["Standard", "Gated"]
AttentionType = Literal["Standard", "MultiHeadLatent"]


class LatentAttention(SpecModel):
    """Multi-head latent attention (DeepSeek-V2 / V3, Kimi K2), in its config.json's names:
    keys and values are rebuilt from one compressed latent per token, which is what the KV
    cache holds (kvLoraRank + qkRopeHeadDim per layer)."""

    kv_lora_rank: Int = Field(ge=1, le=65536)
    """Width of the compressed KV latent (``kv_lora_rank``, 512 in DeepSeek-V3)."""
    q_lora_rank: Int | None = Field(default=None, ge=1, le=65536)
    """Width of the query bottleneck (``q_lora_rank``, 1536); omitted: queries are projected
    directly (DeepSeek-V2-Lite)."""
    qk_rope_head_dim: Int = Field(ge=1, le=4096)
    """The rotary part of each head's query and key (``qk_rope_head_dim``, 64)."""
    qk_nope_head_dim: Int = Field(ge=1, le=4096)
    """The non-rotary part of each head's query and key (``qk_nope_head_dim``, 128)."""
    v_head_dim: Int = Field(ge=1, le=4096)
    """Each head's value width (``v_head_dim``, 128)."""


class SlidingWindow(SpecModel):
    """Sliding-window attention, in one shape for the models that use it: a windowed layer's
    query attends to the last ``size`` tokens only, and every ``fullAttentionEvery``-th layer (the
    last of each group) attends to the whole context. Mistral 7B v0.1: size 4096, every layer
    windowed (fullAttentionEvery omitted); gpt-oss: 128 and 2 (``layer_types`` alternates from a
    windowed layer 0); Gemma 2: 4096 and 2; Gemma 3: 1024 and 6 (``sliding_window_pattern``)."""

    size: Int = Field(ge=1, le=16777216)
    """Tokens a windowed layer attends to (``sliding_window``)."""
    full_attention_every: Int | None = Field(default=None, ge=2, le=1024)
    """Every this-many-th layer attends to the whole context, the others to the window (at
    least 2: 1 would be no window). Omitted: every layer is windowed."""


class TransformerArchitecture(SpecModel):
    """A decoder-only transformer (GPT, Llama, Mistral, ...), as its config.json describes it;
    with ``experts``, a mixture of experts (Mixtral, DeepSeek-V3, Qwen3-MoE, Llama 4, gpt-oss,
    Kimi K2)."""

    type: Literal["Transformer"] = "Transformer"
    """The architecture family; only ``Transformer`` (decoder-only) today."""
    layers: Int = Field(ge=1, le=1024)
    """Transformer layers (``num_hidden_layers``)."""
    hidden_size: Int = Field(ge=1, le=262144)
    """Model width (``hidden_size``)."""
    attention_heads: Int = Field(ge=1, le=4096)
    """Query heads (``num_attention_heads``); must divide hiddenSize unless headDim is given."""
    kv_heads: Int | None = Field(default=None, ge=1, le=4096)
    """Key/value heads (``num_key_value_heads``): fewer than attentionHeads is grouped-query
    attention; must divide attentionHeads. Default: attentionHeads."""
    head_dim: Int | None = Field(default=None, ge=1, le=4096)
    """Width of a head (``head_dim``) where it is not hiddenSize / attentionHeads (Qwen3: 128
    with hiddenSize 4096 and 64 heads; gpt-oss: 64). Default: hiddenSize / attentionHeads."""
    attention_type: AttentionType = "Standard"
    """``Standard`` (multi-head, grouped-query or multi-query by kvHeads) or
    ``MultiHeadLatent`` (DeepSeek's MLA: give latentAttention)."""
    latent_attention: LatentAttention | None = None
    """The dimensions of multi-head latent attention; required with attentionType
    ``MultiHeadLatent``, and only then."""
    ffn_hidden_size: Int | None = Field(default=None, ge=1, le=1048576)
    """Width of the dense layers' feed-forward (``intermediate_size``; Llama 4's
    ``intermediate_size_mlp``). Default: 4 x hiddenSize."""
    ffn_type: FfnType = "Standard"
    """``Gated`` (SwiGLU, as Llama: three matrices) or ``Standard`` (GELU, as GPT: two); the
    experts have the same."""
    vocab_size: Int = Field(ge=1, le=4194304)
    """Vocabulary size (``vocab_size``)."""
    sequence_length: Int = Field(ge=1, le=16777216)
    """Tokens per sequence: the training sequence length, or the longest context served (up
    to 16Mi: Llama 4 Scout serves 10M)."""
    tied_embeddings: bool = False
    """The output layer reuses the input embedding (``tie_word_embeddings``)."""
    experts: Int | None = Field(default=None, ge=1, le=4096)
    """Routed experts per MoE layer (``n_routed_experts``, ``num_experts``,
    ``num_local_experts``): a mixture of experts. Omitted: a dense model."""
    active_experts: Int | None = Field(default=None, ge=1, le=4096)
    """Routed experts each token runs, top-k (``num_experts_per_tok``); required with
    experts, at most experts."""
    shared_experts: Int | None = Field(default=None, ge=0, le=64)
    """Experts every token runs beside the routed ones (``n_shared_experts``; Llama 4: 1), each
    expertFfnHiddenSize wide. Default: 0."""
    expert_ffn_hidden_size: Int | None = Field(default=None, ge=1, le=1048576)
    """Width of an expert's feed-forward (``moe_intermediate_size``; Mixtral's and gpt-oss's
    ``intermediate_size``). Default: ffnHiddenSize."""
    first_dense_layers: Int | None = Field(default=None, ge=0, le=1024)
    """Leading layers with a dense feed-forward (DeepSeek-V3's ``first_k_dense_replace``: 3).
    Default: 0."""
    moe_layer_frequency: Int | None = Field(default=None, ge=1, le=1024)
    """Of the layers after the first dense ones, every this-many-th is MoE, the last of each
    group, the others dense (Llama 4 Maverick's ``interleave_moe_layer_step``: 2). Default: 1,
    every layer."""
    sliding_window: SlidingWindow | None = None
    """Sliding-window attention (gpt-oss, Mistral 7B v0.1, Gemma 2 and 3): fewer attention
    FLOPs per token and, where the serving engine frees what falls out of the window (vLLM's
    hybrid KV cache manager), a smaller KV cache. Omitted: every layer attends to all tokens."""
    expert_weights: Literal["MXFP4"] | None = None
    """The format the checkpoint ships its routed experts in, where it differs from the other
    weights: ``MXFP4`` (gpt-oss: config.json's quantization_config quant_method mxfp4, its
    attention, router, embeddings and LM head in BF16). At precision INT4 (Hopper) or FP4
    (Blackwell) the plan serves the checkpoint as it ships: the experts at 4.25 bits a weight
    on the engine's MXFP4 MoE op, every other weight in BF16 with BF16 GEMMs. Omitted: every
    weight at the endpoint's precision."""
    mtp_layers: Int | None = Field(default=None, ge=0, le=16)
    """Multi-token-prediction modules trained beside the model (DeepSeek-V3's
    ``num_nextn_predict_layers``: 1; Megatron-Core's ``--mtp-num-layers``), each one transformer
    block of the last layer's kind, a 2h x h projection and another pass of the shared LM head
    and loss, on the last pipeline stage. Training only: not in the model's parameter count (the
    671B DeepSeek-V3 states leaves its 11.5B MTP module out), nor in what serving loads (vLLM
    loads them only as a speculative-decoding draft). Default: 0."""

    cel_rules = (
        Rule(
            cel=(
                "has(self.headDim) || self.attentionType == 'MultiHeadLatent'"
                " || self.hiddenSize % self.attentionHeads == 0"
            ),
            message="hiddenSize must be divisible by attentionHeads (or give headDim)",
            field_path=".attentionHeads",
            check=lambda s: (
                s.head_dim is not None
                or s.attention_type == "MultiHeadLatent"
                or s.hidden_size % s.attention_heads == 0
            ),
            message_expression=(
                "'hiddenSize %d must be divisible by attentionHeads %d (or give headDim)'"
                ".format([self.hiddenSize, self.attentionHeads])"
            ),
            message_for=lambda s: (
                f"hiddenSize {s.hidden_size} must be divisible by attentionHeads "
                f"{s.attention_heads} (or give headDim)"
            ),
        ),
        Rule(
            cel="!has(self.kvHeads) || self.attentionHeads % self.kvHeads == 0",
            message="kvHeads must divide attentionHeads",
            field_path=".kvHeads",
            check=lambda s: s.kv_heads is None or s.attention_heads % s.kv_heads == 0,
            message_expression=(
                "'kvHeads %d must divide attentionHeads %d'"
                ".format([self.kvHeads, self.attentionHeads])"
            ),
            message_for=lambda s: (
                f"kvHeads {s.kv_heads} must divide attentionHeads {s.attention_heads}"
            ),
        ),
        Rule(
            cel="(self.attentionType == 'MultiHeadLatent') == has(self.latentAttention)",
            message="latentAttention is required with attentionType MultiHeadLatent, and only "
            "used with it",
            field_path=".latentAttention",
            check=lambda s: (
                (s.attention_type == "MultiHeadLatent") == (s.latent_attention is not None)
            ),
        ),
        Rule(
            cel="!has(self.latentAttention) || (!has(self.kvHeads) && !has(self.headDim))",
            message="kvHeads and headDim do not apply to multi-head latent attention (its "
            "latentAttention dimensions say it all)",
            field_path=".latentAttention",
            reason="FieldValueForbidden",
            check=lambda s: (
                s.latent_attention is None or (s.kv_heads is None and s.head_dim is None)
            ),
        ),
        Rule(
            cel="has(self.experts) == has(self.activeExperts)",
            message="experts and activeExperts go together (a mixture of experts needs both)",
            field_path=".activeExperts",
            check=lambda s: (s.experts is None) == (s.active_experts is None),
        ),
        Rule(
            cel=(
                "!has(self.experts) || !has(self.activeExperts)"
                " || self.activeExperts <= self.experts"
            ),
            message="activeExperts must be at most experts",
            field_path=".activeExperts",
            check=lambda s: (
                s.experts is None or s.active_experts is None or s.active_experts <= s.experts
            ),
            message_expression=(
                "'activeExperts %d must be at most experts %d'"
                ".format([self.activeExperts, self.experts])"
            ),
            message_for=lambda s: (
                f"activeExperts {s.active_experts} must be at most experts {s.experts}"
            ),
        ),
        Rule(
            cel=(
                "has(self.experts) || (!has(self.sharedExperts) && !has(self.expertFfnHiddenSize)"
                " && !has(self.firstDenseLayers) && !has(self.moeLayerFrequency)"
                " && !has(self.expertWeights))"
            ),
            message="sharedExperts, expertFfnHiddenSize, firstDenseLayers, "
            "moeLayerFrequency and expertWeights need experts",
            field_path=".experts",
            reason="FieldValueRequired",
            check=lambda s: (
                s.experts is not None
                or (
                    s.shared_experts is None
                    and s.expert_ffn_hidden_size is None
                    and s.first_dense_layers is None
                    and s.moe_layer_frequency is None
                    and s.expert_weights is None
                )
            ),
        ),
        Rule(
            cel=(
                "!has(self.experts) || (self.layers - (has(self.firstDenseLayers) ?"
                " self.firstDenseLayers : 0)) >= (has(self.moeLayerFrequency) ?"
                " self.moeLayerFrequency : 1)"
            ),
            message="firstDenseLayers and moeLayerFrequency leave no MoE layer",
            field_path=".firstDenseLayers",
            check=lambda s: (
                s.experts is None
                or s.layers - (s.first_dense_layers or 0) >= (s.moe_layer_frequency or 1)
            ),
        ),
        Rule(
            cel=(
                "!has(self.slidingWindow) || !has(self.slidingWindow.fullAttentionEvery)"
                " || self.slidingWindow.fullAttentionEvery <= self.layers"
            ),
            message="slidingWindow.fullAttentionEvery must be at most layers (leave it out for "
            "a window on every layer)",
            field_path=".slidingWindow.fullAttentionEvery",
            check=lambda s: (
                s.sliding_window is None
                or s.sliding_window.full_attention_every is None
                or s.sliding_window.full_attention_every <= s.layers
            ),
            message_expression=(
                "'slidingWindow.fullAttentionEvery %d must be at most layers %d (leave it out"
                " for a window on every layer)'"
                ".format([self.slidingWindow.fullAttentionEvery, self.layers])"
            ),
            message_for=lambda s: (
                f"slidingWindow.fullAttentionEvery {s.sliding_window.full_attention_every} must"
                f" be at most layers {s.layers} (leave it out for a window on every layer)"
            ),
        ),
    )

    @property
    def effective_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.attention_heads

    @property
    def effective_ffn_hidden_size(self) -> int:
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size

    @property
    def effective_head_dim(self) -> int:
        return (
            self.head_dim if self.head_dim is not None else self.hidden_size // self.attention_heads
        )

    @property
    def effective_expert_ffn_hidden_size(self) -> int:
        if self.expert_ffn_hidden_size is not None:
            return self.expert_ffn_hidden_size
        return self.effective_ffn_hidden_size

    @property
    def moe_layers(self) -> int:
        """Layers whose feed-forward is experts (twin of engine.transformer's)."""
        if self.experts is None:
            return 0
        return (self.layers - (self.first_dense_layers or 0)) // (self.moe_layer_frequency or 1)


def _attention_parameters(arch: TransformerArchitecture) -> int:
    h, heads = arch.hidden_size, arch.attention_heads
    mla = arch.latent_attention
    if mla is None:
        d = arch.effective_head_dim
        return 2 * h * heads * d + 2 * h * arch.effective_kv_heads * d
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank is not None:
        q = h * mla.q_lora_rank + mla.q_lora_rank * heads * qk
    else:
        q = h * heads * qk
    kv_a = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv_a + kv_b + heads * mla.v_head_dim * h


def _parameters(arch: TransformerArchitecture, routed_experts: int) -> int:
    h = arch.hidden_size
    matrices = 3 if arch.ffn_type == "Gated" else 2
    dense_ffn = matrices * h * arch.effective_ffn_hidden_size
    moe_layers = arch.moe_layers
    experts = arch.experts or 0
    expert = matrices * h * arch.effective_expert_ffn_hidden_size
    router = h * experts if experts > 1 else 0
    moe = (routed_experts + (arch.shared_experts or 0)) * expert + router
    layers = (
        arch.layers * (_attention_parameters(arch) + 2 * h)
        + (arch.layers - moe_layers) * dense_ffn
        + moe_layers * moe
    )
    embeddings = arch.vocab_size * h * (1 if arch.tied_embeddings else 2)
    return layers + embeddings + h


def architecture_parameters(arch: TransformerArchitecture) -> int:
    """The parameter count the architecture implies (twin of engine.transformer's)."""
    return _parameters(arch, arch.experts or 0)


def architecture_active_parameters(arch: TransformerArchitecture) -> int:
    """The parameters one token touches: the top-k routed experts, not all of them (twin of
    engine.transformer's ``active_parameters``)."""
    return _parameters(arch, arch.active_experts or 0)


def _cel_parameters(path: str, routed: str) -> str:
    a = path
    h = f"{a}.hiddenSize"
    heads = f"{a}.attentionHeads"
    kv_heads = f"(has({a}.kvHeads) ? {a}.kvHeads : {heads})"
    head_dim = f"(has({a}.headDim) ? {a}.headDim : {h} / {heads})"
    standard = f"2 * {h} * {heads} * {head_dim} + 2 * {h} * {kv_heads} * {head_dim}"
    la = f"{a}.latentAttention"
    qk = f"({la}.qkNopeHeadDim + {la}.qkRopeHeadDim)"
    q = (
        f"(has({la}.qLoraRank) ? {h} * {la}.qLoraRank + {la}.qLoraRank * {heads} * {qk}"
        f" : {h} * {heads} * {qk})"
    )
    latent = (
        f"{q} + {h} * ({la}.kvLoraRank + {la}.qkRopeHeadDim)"
        f" + {la}.kvLoraRank * {heads} * ({la}.qkNopeHeadDim + {la}.vHeadDim)"
        f" + {heads} * {la}.vHeadDim * {h}"
    )
    attention = f"(has({a}.latentAttention) ? {latent} : {standard})"
    ffn = f"(has({a}.ffnHiddenSize) ? {a}.ffnHiddenSize : 4 * {h})"
    matrices = f"({a}.ffnType == 'Gated' ? 3 : 2)"
    expert_ffn = f"(has({a}.expertFfnHiddenSize) ? {a}.expertFfnHiddenSize : {ffn})"
    first_dense = f"(has({a}.firstDenseLayers) ? {a}.firstDenseLayers : 0)"
    frequency = f"(has({a}.moeLayerFrequency) ? {a}.moeLayerFrequency : 1)"
    moe_layers = f"(has({a}.experts) ? ({a}.layers - {first_dense}) / {frequency} : 0)"
    shared = f"(has({a}.sharedExperts) ? {a}.sharedExperts : 0)"
    router = f"(has({a}.experts) && {a}.experts > 1 ? {h} * {a}.experts : 0)"
    moe = f"(({routed} + {shared}) * {matrices} * {h} * {expert_ffn} + {router})"
    layers = (
        f"{a}.layers * ({attention} + 2 * {h})"
        f" + ({a}.layers - {moe_layers}) * {matrices} * {h} * {ffn}"
        f" + {moe_layers} * {moe}"
    )
    embeddings = f"{a}.vocabSize * {h} * ({a}.tiedEmbeddings ? 1 : 2)"
    return f"({layers} + {embeddings} + {h})"


def cel_architecture_parameters(path: str) -> str:
    """A CEL expression (an int) for :func:`architecture_parameters` of the architecture at
    ``path`` (e.g. ``self.architecture``), for rules of the model that holds it. CRD defaulting
    has filled ``ffnType``, ``attentionType`` and ``tiedEmbeddings`` by the time rules run."""
    return _cel_parameters(path, f"(has({path}.experts) ? {path}.experts : 0)")


def cel_architecture_active_parameters(path: str) -> str:
    """A CEL expression for :func:`architecture_active_parameters`."""
    return _cel_parameters(path, f"(has({path}.activeExperts) ? {path}.activeExperts : 0)")
