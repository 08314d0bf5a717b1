"""A decoder-only transformer, described by its shape: parameters, FLOPs, weight and KV-cache
bytes. Shared by LLM training (layouts, memory) and LLM serving (prefill, decode, KV cache).

Conventions (stated once, used everywhere):

- Matrix-multiply FLOPs are 2 per multiply-accumulate. A token's forward pass through a weight
  matrix of P parameters costs 2P FLOPs; the input embedding is a table look-up (0 FLOPs), the
  output projection (the "LM head") is a matmul.
- Attention's own FLOPs (scores QK^T and the weighted sum AV, which have no parameters) cost
  4 x context x (heads x head_dim) per layer per token in the forward pass, counting the whole
  context as PaLM (Chowdhery et al. 2022, appendix B), Megatron-LM (Narayanan et al. SC'21, eq. 3)
  and torchtitan's MFU count do. A causal kernel that skips masked blocks does about half of that
  during training and prefill; callers that model such kernels pass the mean context.
- Sliding-window attention (Mistral 7B v0.1, Gemma 2 / 3, gpt-oss): a windowed layer's query
  attends to at most ``sliding_window`` keys. Over a causal sequence of S tokens (x uniform in
  [0, S], attending to min(x, w)) its mean is w - w^2 / (2S) keys where a full layer's is S / 2;
  the whole-context count above is twice each layer's causal mean, so a windowed layer counts
  2w - w^2 / S (S where w >= S), and the causal kernel's half is its real work either way.
- Multi-token prediction (DeepSeek-V3 report, arXiv 2412.19437, section 2.2): each MTP module is
  a projection of 2h x h, three norms and one transformer block, sharing the embedding and the
  LM head; it is trained (another head and loss pass per module) and not served by default.
- Training costs a forward and a backward pass, backward twice the forward (Kaplan et al. 2020):
  3 x forward FLOPs per token; activation recompute adds forward work (see the training engine).
- Biases are ignored (Llama has none; GPT's are < 0.1% of the weights); norms carry one weight
  vector each (RMSNorm), two per layer plus a final one.

Shapes of published models are in :data:`KNOWN_TRANSFORMERS`, each with its source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.pipeline_layout import StageSplit

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2, Liu et al. 2024, section 2.1; DeepSeek-V3's
    config.json names): K and V are rebuilt from one compressed latent of ``kv_lora_rank``
    per token, plus a shared rotary key of ``qk_rope_head_dim``; queries go through a rank
    ``q_lora_rank`` bottleneck (0: a direct projection, as DeepSeek-V2-Lite). Each head's query
    and key are ``qk_nope_head_dim + qk_rope_head_dim`` wide, its value ``v_head_dim``."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.q_lora_rank < 0:
            raise ValueError(f"q_lora_rank must be 0 or positive, got {self.q_lora_rank}")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def parameters(self, hidden: int, heads: int) -> int:
        """W_q (or W_qa, W_qb), W_kva (latent and rotary key), W_kvb (keys' non-rotary part and
        values from the latent), W_o. The two latent RMSNorms' vectors (q_lora_rank +
        kv_lora_rank) are left out, as every norm but the layer's two."""
        if self.q_lora_rank:
            q = hidden * self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        else:
            q = hidden * heads * self.qk_head_dim
        kv_a = hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        o = heads * self.v_head_dim * hidden
        return q + kv_a + kv_b + o


@dataclass(frozen=True)
class Transformer:
    """The shape of a decoder-only transformer. ``kv_heads < heads`` is grouped-query attention
    (``kv_heads == 1`` is multi-query); a gated FFN (SwiGLU, Llama) has three matrices of
    hidden x ffn_hidden, a standard one (GELU, GPT) two.

    Mixture of experts (GShard, Lepikhin et al. 2020; the config.json names of Mixtral,
    DeepSeek-V3, Qwen3-MoE, Llama 4): with ``experts`` > 0 the FFN of the MoE layers is
    ``experts`` routed experts of width ``expert_ffn_hidden`` (the same gating as the dense FFN),
    of which a token runs ``active_experts`` (top-k), plus ``shared_experts`` every token runs,
    plus a router (hidden x experts). The first ``first_dense_layers`` layers keep the dense
    FFN (DeepSeek-V3's first_k_dense_replace); of the rest, every ``moe_layer_frequency``-th is
    MoE (the last of each group, as Llama 4's interleave_moe_layer_step), the others dense.
    A dense model is ``experts == 0``; one expert of top-1 is the dense model exactly (no
    router: nothing to route)."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    sequence_length: int
    kv_heads: int = 0  # 0: as many as ``heads`` (multi-head attention)
    ffn_hidden: int = 0  # 0: 4 x hidden; the dense layers' FFN width
    gated_ffn: bool = False
    tied_embeddings: bool = False  # the LM head reuses the input embedding's weights
    head_dim: int = 0  # 0: hidden / heads (Qwen3 and gpt-oss set head_dim apart from it)
    experts: int = 0  # routed experts per MoE layer; 0: a dense model
    active_experts: int = 0  # routed experts each token runs (top-k)
    shared_experts: int = 0  # experts every token runs, beside the routed ones
    expert_ffn_hidden: int = 0  # 0: ffn_hidden (Mixtral's experts are its dense FFN's width)
    first_dense_layers: int = 0
    moe_layer_frequency: int = 1
    latent_attention: LatentAttention | None = None  # multi-head latent attention (DeepSeek)
    sliding_window: int = 0  # keys a windowed layer attends to; 0: every layer attends to all
    full_attention_every: int = 0  # with a window, every this-many-th layer is full; 0: none
    mtp_layers: int = 0  # multi-token-prediction modules (DeepSeek-V3's num_nextn_predict_layers)
    # The published checkpoint's routed experts in MXFP4 and every other weight in BF16 (gpt-oss;
    # engine.checkpoint_formats): a 4-bit serving precision runs it as it ships.
    mxfp4_experts: bool = False
    # A pipeline layout's layers per rank, for the pipeline degree it was written for
    # (spec.parallelism.pipelineLayout: engine.pipeline_layout); None: the engine's own split.
    stage_split: StageSplit | None = None

    def __post_init__(self) -> None:
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.expert_ffn_hidden == 0:
            object.__setattr__(self, "expert_ffn_hidden", self.ffn_hidden)
        explicit_head_dim = self.head_dim != 0
        if not explicit_head_dim and self.heads > 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        problems = [
            f"{name} must be positive, got {value}"
            for name, value in (
                ("layers", self.layers),
                ("hidden", self.hidden),
                ("heads", self.heads),
                ("vocab", self.vocab),
                ("sequence_length", self.sequence_length),
                ("kv_heads", self.kv_heads),
                ("ffn_hidden", self.ffn_hidden),
                ("moe_layer_frequency", self.moe_layer_frequency),
            )
            if value <= 0
        ]
        problems += [
            f"{name} must not be negative, got {value}"
            for name, value in (
                ("experts", self.experts),
                ("active_experts", self.active_experts),
                ("shared_experts", self.shared_experts),
                ("first_dense_layers", self.first_dense_layers),
                ("sliding_window", self.sliding_window),
                ("full_attention_every", self.full_attention_every),
                ("mtp_layers", self.mtp_layers),
            )
            if value < 0
        ]
        if not problems and self.full_attention_every and not self.sliding_window:
            problems.append("full_attention_every needs sliding_window")
        if (
            not problems
            and not explicit_head_dim
            and self.latent_attention is None
            and self.hidden % self.heads
        ):
            problems.append(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if not problems and self.heads % self.kv_heads:
            problems.append(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if not problems and self.experts and not 1 <= self.active_experts <= self.experts:
            problems.append(
                f"active_experts {self.active_experts} must be between 1 and experts {self.experts}"
            )
        if not problems and not self.experts and (self.active_experts or self.shared_experts):
            problems.append("active_experts and shared_experts need experts")
        if (
            not problems
            and self.experts
            and self.layers - self.first_dense_layers < self.moe_layer_frequency
        ):
            problems.append(
                f"first_dense_layers {self.first_dense_layers} and moe_layer_frequency "
                f"{self.moe_layer_frequency} leave no MoE layer of {self.layers}"
            )
        if problems:
            raise ValueError("; ".join(problems))

    # --- shape -------------------------------------------------------------------------------

    @property
    def kv_hidden(self) -> int:
        """Width of the K (and of the V) projection: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose FFN is experts: of those after the first dense ones, one in each
        ``moe_layer_frequency``."""
        if not self.experts:
            return 0
        return (self.layers - self.first_dense_layers) // self.moe_layer_frequency

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def windowed_layers(self) -> int:
        """Layers that attend to the last ``sliding_window`` keys only: all of them, or all but
        the last of each ``full_attention_every`` (Hugging Face's layer_types: gpt-oss and Gemma 2
        alternate from a windowed layer 0, Gemma 3's sliding_window_pattern 6 is five of six)."""
        if not self.sliding_window:
            return 0
        if not self.full_attention_every:
            return self.layers
        return self.layers - self.layers // self.full_attention_every

    @property
    def full_attention_layers(self) -> int:
        return self.layers - self.windowed_layers

    @property
    def last_layer_is_moe(self) -> bool:
        """Whether the last layer's FFN is experts (layer i is MoE when i >= first_dense_layers
        and (i - first_dense_layers + 1) is a multiple of moe_layer_frequency)."""
        return (
            self.is_moe and (self.layers - self.first_dense_layers) % self.moe_layer_frequency == 0
        )

    @property
    def last_layer_is_windowed(self) -> bool:
        every = self.full_attention_every
        return bool(self.sliding_window) and (not every or self.layers % every != 0)

    # --- parameters --------------------------------------------------------------------------

    @property
    def attention_parameters_per_layer(self) -> int:
        """Q and O are hidden x (heads x head_dim); K and V are hidden x kv_hidden each; with
        latent attention, :meth:`LatentAttention.parameters`."""
        if self.latent_attention is not None:
            return self.latent_attention.parameters(self.hidden, self.heads)
        q_width = self.heads * self.head_dim
        return 2 * self.hidden * q_width + 2 * self.hidden * self.kv_hidden

    @property
    def ffn_parameters_per_layer(self) -> int:
        """A dense layer's FFN."""
        return (3 if self.gated_ffn else 2) * self.hidden * self.ffn_hidden

    @property
    def expert_parameters(self) -> int:
        """One expert (routed or shared): an FFN of width ``expert_ffn_hidden``."""
        return (3 if self.gated_ffn else 2) * self.hidden * self.expert_ffn_hidden

    @property
    def router_parameters_per_layer(self) -> int:
        """The router of a MoE layer (hidden x experts; none for a single expert)."""
        return self.hidden * self.experts if self.experts > 1 else 0

    @property
    def moe_parameters_per_layer(self) -> int:
        """A MoE layer's FFN: every routed and shared expert, and the router."""
        experts = self.experts + self.shared_experts
        return experts * self.expert_parameters + self.router_parameters_per_layer

    @property
    def active_moe_parameters_per_layer(self) -> int:
        """What one token runs through in a MoE layer's FFN: top-k routed and the shared
        experts, and the router."""
        experts = self.active_experts + self.shared_experts
        return experts * self.expert_parameters + self.router_parameters_per_layer

    @property
    def routed_expert_parameters(self) -> int:
        """Every routed expert of every MoE layer: what expert parallelism shards."""
        return self.moe_layers * self.experts * self.expert_parameters

    @property
    def layer_parameters(self) -> int:
        """Every layer's weights: attention, FFN (dense or experts and router), two norms."""
        common = self.layers * (self.attention_parameters_per_layer + 2 * self.hidden)
        return (
            common
            + self.dense_layers * self.ffn_parameters_per_layer
            + self.moe_layers * self.moe_parameters_per_layer
        )

    @property
    def active_layer_parameters(self) -> int:
        """The layers' weights one token runs through (equal to :attr:`layer_parameters` for a
        dense model)."""
        common = self.layers * (self.attention_parameters_per_layer + 2 * self.hidden)
        return (
            common
            + self.dense_layers * self.ffn_parameters_per_layer
            + self.moe_layers * self.active_moe_parameters_per_layer
        )

    @property
    def parameters_per_layer(self) -> float:
        """A layer's weights, the mean over the layers (exact for a dense model)."""
        return self.layer_parameters / self.layers

    @property
    def active_parameters_per_layer(self) -> float:
        """The weights one token runs through in a layer, the mean over the layers."""
        return self.active_layer_parameters / self.layers

    @property
    def embedding_parameters(self) -> int:
        """The input embedding table (vocab x hidden)."""
        return self.vocab * self.hidden

    @property
    def head_parameters(self) -> int:
        """The LM head's own weights: none when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def parameters(self) -> int:
        """Every weight: layers, embedding, LM head (unless tied), final norm."""
        return (
            self.layer_parameters + self.embedding_parameters + self.head_parameters + self.hidden
        )

    @property
    def active_parameters(self) -> int:
        """The weights one token touches, counting the embedding table as Mistral (Mixtral's
        12.9B), DeepSeek (V3's 37B) and Meta (Llama 4's 17B) count: :attr:`parameters` with
        the routed experts a token does not run left out."""
        return (
            self.active_layer_parameters
            + self.embedding_parameters
            + self.head_parameters
            + self.hidden
        )

    @property
    def matmul_parameters(self) -> int:
        """The weights a token multiplies through: its layers' (top-k and shared experts,
        router) and the LM head's (tied or not); the embedding look-up is not a matmul."""
        return self.active_layer_parameters + self.vocab * self.hidden

    # --- multi-token prediction ---------------------------------------------------------------

    def _mtp_module_parameters(self, moe_ffn: int) -> int:
        """One MTP module given its FFN's weights: a block of the last layer's kind (attention,
        FFN, two norms; Megatron-Core's get_gpt_mtp_block_spec takes the decoder's last layer
        spec), the projection of [norm(h); norm(embedding)] (2h x h, eh_proj) and three norms
        (enorm, hnorm, the final one; Megatron-LM's num_floating_point_operations counts 3h).
        The embedding and the LM head are the main model's (shared, counted there)."""
        h = self.hidden
        ffn = moe_ffn if self.last_layer_is_moe else self.ffn_parameters_per_layer
        block = self.attention_parameters_per_layer + 2 * h + ffn
        return block + 2 * h * h + 3 * h

    @property
    def mtp_parameters(self) -> int:
        """Every MTP module's own weights (DeepSeek-V3's README_WEIGHTS.md: 11.5B unique, the
        shared 0.9B embedding and 0.9B head excluded)."""
        return self.mtp_layers * self._mtp_module_parameters(self.moe_parameters_per_layer)

    @property
    def mtp_active_parameters(self) -> int:
        """The MTP modules' weights one token runs through (top-k and shared experts)."""
        return self.mtp_layers * self._mtp_module_parameters(self.active_moe_parameters_per_layer)

    @property
    def trained_parameters(self) -> int:
        """What training holds (weights, gradients, optimizer state): :attr:`parameters` and the
        MTP modules'. :attr:`parameters` is the main model alone, as publishers count it
        (DeepSeek-V3's 671B) and as a serving engine loads it unless told to draft with the MTP
        modules (vLLM's DeepseekV2ForCausalLM.load_weights skips them; only a speculative
        config with method "deepseek_mtp" loads them, as the draft model)."""
        return self.parameters + self.mtp_parameters

    @property
    def head_passes(self) -> int:
        """LM head and loss passes per training token: the model's and one per MTP module."""
        return 1 + self.mtp_layers

    def mtp_forward_flops_per_token(self) -> float:
        """Forward FLOPs of the MTP modules per training token at the full sequence: each its
        block (the last layer's attention at the whole-context count), its projection and another
        pass of the shared LM head (Megatron-LM's num_floating_point_operations counts the same:
        the block as the last layer's kind, eh_proj, and the logits (mtp_num_layers + 1) times)."""
        if not self.mtp_layers:
            return 0.0
        matmul = self.mtp_active_parameters / self.mtp_layers + self.vocab * self.hidden
        s = float(self.sequence_length)
        keys = float(self._windowed_whole_context(s)) if self.last_layer_is_windowed else s
        core = self._attention_flops_per_key * keys
        return self.mtp_layers * (2.0 * matmul + core)

    # --- FLOPs -------------------------------------------------------------------------------

    @property
    def qk_head_dim(self) -> int:
        """Width of a head's query and key (latent attention: non-rotary + rotary parts)."""
        mla = self.latent_attention
        return mla.qk_head_dim if mla is not None else self.head_dim

    @property
    def v_head_dim(self) -> int:
        mla = self.latent_attention
        return mla.v_head_dim if mla is not None else self.head_dim

    @property
    def _attention_flops_per_key(self) -> float:
        """One layer's forward FLOPs of scores and weighted sum per query per key attended:
        2 x heads x (query-key width + value width), 4 x heads x head_dim for standard attention."""
        return 2.0 * self.heads * (self.qk_head_dim + self.v_head_dim)

    def _windowed_whole_context(self, sequence: ArrayLike) -> F64:
        """A windowed layer's keys per token in the whole-context count over a causal sequence
        of ``sequence`` tokens: twice its causal mean, 2w - w^2 / S, or S where the window covers
        the sequence (the module's docstring)."""
        s = np.asarray(sequence, dtype=np.float64)
        w = float(self.sliding_window)
        return np.where(s > w, 2.0 * w - w * w / np.maximum(s, max(w, 1.0)), s)

    def _whole_context_keys(self, sequence: ArrayLike) -> F64:
        """Keys per token summed over the layers, whole-context count, sequence ``sequence``."""
        s = np.asarray(sequence, dtype=np.float64)
        if not self.windowed_layers:
            return self.layers * s
        windowed = self._windowed_whole_context(s)
        return self.full_attention_layers * s + self.windowed_layers * windowed

    def windowed_attention_share(self, sequence: ArrayLike) -> F64:
        """The windowed layers' share of the attention FLOPs over a causal sequence of
        ``sequence`` tokens (0 without a window)."""
        s = np.asarray(sequence, dtype=np.float64)
        if not self.windowed_layers:
            return np.zeros_like(s)
        windowed = self.windowed_layers * self._windowed_whole_context(s)
        return np.asarray(windowed / self._whole_context_keys(s), dtype=np.float64)

    def attention_flops_per_token(self, context: float) -> float:
        """Forward FLOPs of attention scores and weighted sum per token of a sequence of
        ``context`` tokens, over all layers, in the whole-context count of MFU figures (the
        module's docstring): a full layer counts ``context`` keys, a windowed one 2w - w^2 /
        context; a causal kernel does half of either."""
        return float(self._attention_flops_per_key * self._whole_context_keys(context))

    def dense_attention_flops_per_token(self, context: float) -> float:
        """:meth:`attention_flops_per_token` as a kernel that computes every score and masks
        them does it (eager attention, no FlashAttention): windowed layers at the whole context
        too, since the masked scores are computed all the same."""
        return self._attention_flops_per_key * self.layers * float(context)

    def causal_attention_flops_per_token(self, sequence: ArrayLike) -> F64:
        """Forward FLOPs per token of a kernel that skips masked blocks (FlashAttention) over a
        causal sequence of ``sequence`` tokens (a training sequence, a prompt), the mean over its
        tokens and the sum over the layers: S / 2 keys on a full layer, w - w^2 / (2S) on a
        windowed one (S / 2 where w >= S). Half of :meth:`attention_flops_per_token`."""
        return 0.5 * self._attention_flops_per_key * self._whole_context_keys(sequence)

    def decode_attention_flops_per_token(self, context: ArrayLike) -> F64:
        """Forward FLOPs of one new token attending to ``context`` cached tokens, over all layers:
        ``context`` keys on a full layer, min(context, window) on a windowed one."""
        return self._attention_flops_per_key * self.kv_cache_layer_tokens(context)

    def forward_flops_per_token(self, context: float | None = None) -> float:
        """Forward FLOPs of one token: 2 x matmul parameters + attention over ``context``
        (default: the full sequence, the convention of MFU figures)."""
        ctx = self.sequence_length if context is None else context
        return 2.0 * self.matmul_parameters + self.attention_flops_per_token(ctx)

    def training_flops_per_token(self) -> float:
        """Forward + backward (3 x forward) at the full sequence, no recompute: the "model
        FLOPs" that MFU divides by (6N + 12 L H S per token, as PaLM's appendix B; N the
        active parameters for a mixture of experts), the MTP modules' included as
        Megatron-LM counts them."""
        return 3.0 * (self.forward_flops_per_token() + self.mtp_forward_flops_per_token())

    # --- bytes -------------------------------------------------------------------------------

    def weight_bytes(self, bytes_per_parameter: float) -> float:
        return self.parameters * bytes_per_parameter

    @property
    def kv_cache_elements_per_token_per_layer(self) -> int:
        """What a layer caches per token: K and V (2 x kv_heads x head_dim), or with latent
        attention the compressed latent and the rotary key (kv_lora_rank + qk_rope_head_dim,
        as DeepSeek-V2's section 2.1.2 and vLLM's MLA backend store it)."""
        mla = self.latent_attention
        if mla is not None:
            return mla.kv_lora_rank + mla.qk_rope_head_dim
        return 2 * self.kv_hidden

    def kv_cache_bytes_per_token(self, bytes_per_element: float) -> float:
        """K and V of one token in every layer: 2 x layers x kv_heads x head_dim x bytes (the
        latent and rotary key for latent attention). With a sliding window this is a token's
        cost while the windowed layers still hold it, an upper bound: :meth:`kv_cache_bytes`
        is a sequence's cache at its length."""
        return float(self.layers * self.kv_cache_elements_per_token_per_layer) * bytes_per_element

    def kv_cache_layer_tokens(self, context: ArrayLike) -> F64:
        """Tokens cached over the layers by one sequence of ``context`` tokens: every token in a
        full layer, the last ``sliding_window`` in a windowed one (vLLM V1's hybrid KV cache
        manager frees a windowed layer's blocks that fall out of its window: SlidingWindowManager
        in vllm/v1/core/single_type_kv_cache_manager.py; its block rounding is left out)."""
        c = np.asarray(context, dtype=np.float64)
        if not self.windowed_layers:
            return self.layers * c
        windowed = np.minimum(c, float(self.sliding_window))
        return np.asarray(self.full_attention_layers * c + self.windowed_layers * windowed)

    def kv_cache_layers(self, context: ArrayLike) -> F64:
        """Layers' worth of cache per token of a ``context``-token sequence, the mean over its
        tokens: ``layers`` without a window, fewer once the sequence outgrows it. What replaces
        ``layers`` in a per-token cache size (per accelerator, per pipeline stage)."""
        c = np.asarray(context, dtype=np.float64)
        return self.kv_cache_layer_tokens(c) / np.maximum(c, 1.0)

    def kv_cache_bytes(self, context: ArrayLike, bytes_per_element: float) -> F64:
        """One sequence's cache at ``context`` tokens, every layer: :meth:`kv_cache_layer_tokens`
        x the elements a layer caches per token x bytes."""
        per_layer_token = self.kv_cache_elements_per_token_per_layer * bytes_per_element
        return self.kv_cache_layer_tokens(context) * float(per_layer_token)


# Published shapes, for examples, tests and calibration. Llama shapes are the models'
# config.json (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# intermediate_size, vocab_size, max_position_embeddings) as released by Meta; GPT-3 shapes are
# Brown et al. 2020, Table 2.1 (vocabulary 50257, context 2048).
KNOWN_TRANSFORMERS: dict[str, Transformer] = {
    "llama-2-7b": Transformer(32, 4096, 32, 32000, 4096, ffn_hidden=11008, gated_ffn=True),
    "llama-2-13b": Transformer(40, 5120, 40, 32000, 4096, ffn_hidden=13824, gated_ffn=True),
    "llama-2-70b": Transformer(
        80, 8192, 64, 32000, 4096, kv_heads=8, ffn_hidden=28672, gated_ffn=True
    ),
    "llama-3-8b": Transformer(
        32, 4096, 32, 128256, 8192, kv_heads=8, ffn_hidden=14336, gated_ffn=True
    ),
    "llama-3-70b": Transformer(
        80, 8192, 64, 128256, 8192, kv_heads=8, ffn_hidden=28672, gated_ffn=True
    ),
    "llama-3.1-405b": Transformer(
        126, 16384, 128, 128256, 131072, kv_heads=8, ffn_hidden=53248, gated_ffn=True
    ),
    "gpt-3-175b": Transformer(96, 12288, 96, 50257, 2048),
    # Llama 3.1 keeps Llama 3's shapes with a 131,072-token context (config.json).
    "llama-3.1-8b": Transformer(
        32, 4096, 32, 128256, 131072, kv_heads=8, ffn_hidden=14336, gated_ffn=True
    ),
    "llama-3.1-70b": Transformer(
        80, 8192, 64, 128256, 131072, kv_heads=8, ffn_hidden=28672, gated_ffn=True
    ),
    # Nemotron-4 (Parmar et al. 2024, "Nemotron-4 15B Technical Report", Table 1; Nemotron-4
    # 340B Technical Report, Table 1): squared-ReLU FFN (two matrices), GQA with 8 KV heads,
    # vocabulary 256,000, untied embeddings, sequence 4,096.
    "nemotron-4-15b": Transformer(32, 6144, 48, 256000, 4096, kv_heads=8, ffn_hidden=24576),
    "nemotron-4-340b": Transformer(96, 18432, 96, 256000, 4096, kv_heads=8, ffn_hidden=73728),
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5,120, 64 heads of head_dim 128 (apart from
    # hidden / heads), 8 KV heads, SwiGLU 25,600, vocabulary 151,936, 40,960 positions, untied.
    "qwen3-32b": Transformer(
        64,
        5120,
        64,
        151936,
        40960,
        kv_heads=8,
        head_dim=128,
        ffn_hidden=25600,
        gated_ffn=True,
    ),
    # --- mixtures of experts: each model's config.json on Hugging Face (the repository named
    # beside it, file config.json; Llama 4's text_config), in the fields' own names:
    # num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, head_dim,
    # intermediate_size (dense FFN), moe_intermediate_size (an expert; Mixtral's and gpt-oss's
    # experts are intermediate_size wide, Llama 4's dense layers intermediate_size_mlp),
    # n_routed_experts / num_experts / num_local_experts, num_experts_per_tok,
    # n_shared_experts, first_k_dense_replace, moe_layer_freq / interleave_moe_layer_step,
    # vocab_size, max_position_embeddings; MLA: kv_lora_rank, q_lora_rank, qk_rope_head_dim,
    # qk_nope_head_dim, v_head_dim. Biases (gpt-oss), QK-norms (Qwen3) and the latent norms
    # (MLA) are left out, as everywhere here (< 0.05% of the weights).
    # mistralai/Mixtral-8x7B-v0.1: 8 experts of the dense FFN's width, top-2, every layer.
    "mixtral-8x7b": Transformer(
        32,
        4096,
        32,
        32000,
        32768,
        kv_heads=8,
        ffn_hidden=14336,
        gated_ffn=True,
        experts=8,
        active_experts=2,
    ),
    # deepseek-ai/DeepSeek-V3: MLA, 256 routed experts top-8 + 1 shared, the first 3 layers
    # dense; one multi-token-prediction module (num_nextn_predict_layers 1, trained with it:
    # report section 2.2), in mtp_parameters, not in parameters: the report's 671B leaves it
    # out, and the 685B of the Hugging Face files is 671B + its 14B (11.5B its own, and copies
    # of the shared 0.9B embedding and 0.9B head: README_WEIGHTS.md).
    "deepseek-v3": Transformer(
        61,
        7168,
        128,
        129280,
        163840,
        ffn_hidden=18432,
        gated_ffn=True,
        experts=256,
        active_experts=8,
        shared_experts=1,
        expert_ffn_hidden=2048,
        first_dense_layers=3,
        latent_attention=LatentAttention(
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            q_lora_rank=1536,
        ),
        mtp_layers=1,
    ),
    # moonshotai/Kimi-K2-Instruct: DeepSeek-V3's architecture with 64 heads, 384 experts and
    # one dense layer.
    "kimi-k2": Transformer(
        61,
        7168,
        64,
        163840,
        131072,
        ffn_hidden=18432,
        gated_ffn=True,
        experts=384,
        active_experts=8,
        shared_experts=1,
        expert_ffn_hidden=2048,
        first_dense_layers=1,
        latent_attention=LatentAttention(
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            q_lora_rank=1536,
        ),
    ),
    # Qwen/Qwen3-235B-A22B and Qwen/Qwen3-30B-A3B: head_dim 128 apart from hidden / heads,
    # 128 experts top-8, every layer (decoder_sparse_step 1, mlp_only_layers []).
    "qwen3-235b-a22b": Transformer(
        94,
        4096,
        64,
        151936,
        40960,
        kv_heads=4,
        head_dim=128,
        ffn_hidden=12288,
        gated_ffn=True,
        experts=128,
        active_experts=8,
        expert_ffn_hidden=1536,
    ),
    "qwen3-30b-a3b": Transformer(
        48,
        2048,
        32,
        151936,
        40960,
        kv_heads=4,
        head_dim=128,
        ffn_hidden=6144,
        gated_ffn=True,
        experts=128,
        active_experts=8,
        expert_ffn_hidden=768,
    ),
    # google/gemma-3-12b-pt (text_config): 48 layers, hidden 3,840, 16 heads of 256, 8 KV heads,
    # a gated FFN of 15,360 (GeGLU), vocabulary 262,208, tied embeddings, sliding_window 1,024 on
    # five layers of six (sliding_window_pattern 6; MaxText configs/models/gemma3-12b.yml @
    # e591f30c the same, its vocabulary padded to 262,144). Its pre- and post-norms (four a layer)
    # are counted as two.
    "gemma-3-12b": Transformer(
        48,
        3840,
        16,
        262208,
        131072,
        kv_heads=8,
        head_dim=256,
        ffn_hidden=15360,
        gated_ffn=True,
        tied_embeddings=True,
        sliding_window=1024,
        full_attention_every=6,
    ),
    # openai/gpt-oss-120b and openai/gpt-oss-20b: 128 (32) experts of intermediate_size 2880,
    # top-4 (experts_per_token), head_dim 64; sliding_window 128 on every other layer
    # (layer_types alternates sliding_attention, full_attention from layer 0; the gpt-oss model
    # card, arXiv 2508.10925, section 2: "alternating banded window and fully dense patterns").
    "gpt-oss-120b": Transformer(
        36,
        2880,
        64,
        201088,
        131072,
        kv_heads=8,
        head_dim=64,
        ffn_hidden=2880,
        gated_ffn=True,
        experts=128,
        active_experts=4,
        sliding_window=128,
        full_attention_every=2,
        mxfp4_experts=True,
    ),
    "gpt-oss-20b": Transformer(
        24,
        2880,
        64,
        201088,
        131072,
        kv_heads=8,
        head_dim=64,
        ffn_hidden=2880,
        gated_ffn=True,
        experts=32,
        active_experts=4,
        sliding_window=128,
        full_attention_every=2,
        mxfp4_experts=True,
    ),
    # meta-llama/Llama-4-Scout-17B-16E and meta-llama/Llama-4-Maverick-17B-128E (text_config):
    # top-1 of 16 (128) experts + 1 shared expert of intermediate_size 8192; Maverick's
    # interleave_moe_layer_step 2 makes every second layer MoE, the others dense of
    # intermediate_size_mlp 16384.
    "llama-4-scout": Transformer(
        48,
        5120,
        40,
        202048,
        10485760,
        kv_heads=8,
        head_dim=128,
        ffn_hidden=16384,
        gated_ffn=True,
        experts=16,
        active_experts=1,
        shared_experts=1,
        expert_ffn_hidden=8192,
    ),
    "llama-4-maverick": Transformer(
        48,
        5120,
        40,
        202048,
        1048576,
        kv_heads=8,
        head_dim=128,
        ffn_hidden=16384,
        gated_ffn=True,
        experts=128,
        active_experts=1,
        shared_experts=1,
        expert_ffn_hidden=8192,
        moe_layer_frequency=2,
    ),
}
