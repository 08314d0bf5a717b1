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


class TransformerArchitecture(SpecModel):
    """A decoder-only transformer (GPT, Llama, Mistral, ...), as its config.json describes it."""

    type: Literal["Transformer"] = "Transformer"
    """The architecture family; only ``Transformer`` (decoder-only) today."""
    layers: Int = Field(ge=1, le=1024)
    """Transformer layers (``num_hidden_layers``)."""
    hidden_size: Int = Field(ge=1, le=262144)
    """Model width (``hidden_size``)."""
    attention_heads: Int = Field(ge=1, le=4096)
    """Query heads (``num_attention_heads``); must divide hiddenSize."""
    kv_heads: Int | None = Field(default=None, ge=1, le=4096)
    """Key/value heads (``num_key_value_heads``): fewer than attentionHeads is grouped-query
    attention; must divide attentionHeads. Default: attentionHeads."""
    ffn_hidden_size: Int | None = Field(default=None, ge=1, le=1048576)
    """Width of the feed-forward layer (``intermediate_size``). Default: 4 x hiddenSize."""
    ffn_type: FfnType = "Standard"
    """``Gated`` (SwiGLU, as Llama: three matrices) or ``Standard`` (GELU, as GPT: two)."""
    vocab_size: Int = Field(ge=1, le=4194304)
    """Vocabulary size (``vocab_size``)."""
    sequence_length: Int = Field(ge=1, le=4194304)
    """Tokens per sequence: the training sequence length, or the longest context served."""
    tied_embeddings: bool = False
    """The output layer reuses the input embedding (``tie_word_embeddings``)."""

    cel_rules = (
        Rule(
            cel="self.hiddenSize % self.attentionHeads == 0",
            message="hiddenSize must be divisible by attentionHeads",
            field_path=".attentionHeads",
            check=lambda s: s.hidden_size % s.attention_heads == 0,
            message_expression=(
                "'hiddenSize %d must be divisible by attentionHeads %d'"
                ".format([self.hiddenSize, self.attentionHeads])"
            ),
            message_for=lambda s: (
                f"hiddenSize {s.hidden_size} must be divisible by attentionHeads "
                f"{s.attention_heads}"
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
    )

    @property
    def effective_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.attention_heads

    @property
    def effective_ffn_hidden_size(self) -> int:
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size


def architecture_parameters(arch: TransformerArchitecture) -> int:
    """The parameter count the architecture implies (twin of engine.transformer's)."""
    h = arch.hidden_size
    kv = arch.effective_kv_heads * (h // arch.attention_heads)
    ffn_matrices = 3 if arch.ffn_type == "Gated" else 2
    per_layer = 2 * h * h + 2 * h * kv + ffn_matrices * h * arch.effective_ffn_hidden_size + 2 * h
    embeddings = arch.vocab_size * h * (1 if arch.tied_embeddings else 2)
    return arch.layers * per_layer + embeddings + h


def cel_architecture_parameters(path: str) -> str:
    """A CEL expression (an int) for :func:`architecture_parameters` of the architecture at
    ``path`` (e.g. ``self.architecture``), for rules of the model that holds it. CRD defaulting
    has filled ``ffnType`` and ``tiedEmbeddings`` by the time rules run."""
    a = path
    kv_heads = f"(has({a}.kvHeads) ? {a}.kvHeads : {a}.attentionHeads)"
    ffn = f"(has({a}.ffnHiddenSize) ? {a}.ffnHiddenSize : 4 * {a}.hiddenSize)"
    matrices = f"({a}.ffnType == 'Gated' ? 3 : 2)"
    kv = f"{kv_heads} * ({a}.hiddenSize / {a}.attentionHeads)"
    per_layer = (
        f"2 * {a}.hiddenSize * {a}.hiddenSize + 2 * {a}.hiddenSize * {kv}"
        f" + {matrices} * {a}.hiddenSize * {ffn} + 2 * {a}.hiddenSize"
    )
    embeddings = f"{a}.vocabSize * {a}.hiddenSize * ({a}.tiedEmbeddings ? 1 : 2)"
    return f"({a}.layers * ({per_layer}) + {embeddings} + {a}.hiddenSize)"
