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
- Training costs a forward and a backward pass, backward twice the forward (Kaplan et al. 2020):
  3 x forward FLOPs per token; activation recompute adds forward work (see the training engine).
- Biases are ignored (Llama has none; GPT's are < 0.1% of the weights); norms carry one weight
  vector each (RMSNorm), two per layer plus a final one.

Shapes of published models are in :data:`KNOWN_TRANSFORMERS`, each with its source.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transformer:
    """The shape of a decoder-only transformer. ``kv_heads < heads`` is grouped-query attention
    (``kv_heads == 1`` is multi-query); a gated FFN (SwiGLU, Llama) has three matrices of
    hidden x ffn_hidden, a standard one (GELU, GPT) two."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    sequence_length: int
    kv_heads: int = 0  # 0: as many as ``heads`` (multi-head attention)
    ffn_hidden: int = 0  # 0: 4 x hidden
    gated_ffn: bool = False
    tied_embeddings: bool = False  # the LM head reuses the input embedding's weights

    def __post_init__(self) -> None:
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
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
            )
            if value <= 0
        ]
        if not problems and self.hidden % self.heads:
            problems.append(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if not problems and self.heads % self.kv_heads:
            problems.append(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if problems:
            raise ValueError("; ".join(problems))

    # --- shape -------------------------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of the K (and of the V) projection: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    # --- parameters --------------------------------------------------------------------------

    @property
    def attention_parameters_per_layer(self) -> int:
        """Q and O are hidden x hidden; K and V are hidden x kv_hidden each."""
        return 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_hidden

    @property
    def ffn_parameters_per_layer(self) -> int:
        return (3 if self.gated_ffn else 2) * self.hidden * self.ffn_hidden

    @property
    def parameters_per_layer(self) -> int:
        """Attention, FFN and the layer's two norm vectors."""
        return self.attention_parameters_per_layer + self.ffn_parameters_per_layer + 2 * self.hidden

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
            self.layers * self.parameters_per_layer
            + self.embedding_parameters
            + self.head_parameters
            + self.hidden
        )

    @property
    def matmul_parameters(self) -> int:
        """The weights a token multiplies through: every layer's and the LM head's (tied or not);
        the embedding look-up is not a matmul."""
        return self.layers * self.parameters_per_layer + self.vocab * self.hidden

    # --- FLOPs -------------------------------------------------------------------------------

    def attention_flops_per_token(self, context: float) -> float:
        """Forward FLOPs of attention scores and weighted sum for one token seeing ``context``
        tokens, over all layers: 2 matmuls x 2 FLOPs x context x heads x head_dim."""
        return 4.0 * self.layers * context * self.heads * self.head_dim

    def forward_flops_per_token(self, context: float | None = None) -> float:
        """Forward FLOPs of one token: 2 x matmul parameters + attention over ``context``
        (default: the full sequence, the convention of MFU figures)."""
        ctx = self.sequence_length if context is None else context
        return 2.0 * self.matmul_parameters + self.attention_flops_per_token(ctx)

    def training_flops_per_token(self) -> float:
        """Forward + backward (3 x forward) at the full sequence, no recompute: the "model
        FLOPs" that MFU divides by (6N + 12 L H S per token, as PaLM's appendix B)."""
        return 3.0 * self.forward_flops_per_token()

    # --- bytes -------------------------------------------------------------------------------

    def weight_bytes(self, bytes_per_parameter: float) -> float:
        return self.parameters * bytes_per_parameter

    def kv_cache_bytes_per_token(self, bytes_per_element: float) -> float:
        """K and V of one token in every layer: 2 x layers x kv_heads x head_dim x bytes."""
        return 2.0 * self.layers * self.kv_hidden * bytes_per_element


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
}
