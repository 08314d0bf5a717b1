"""A published checkpoint's weights by part, where they are not all at one precision.

gpt-oss ships its routed experts in MXFP4 (4-bit E2M1 values, an 8-bit E8M0 scale per 32: 4.25
bits a weight, OCP Microscaling Formats v1.0) and every other weight in BF16: attention, router,
embeddings and LM head (openai/gpt-oss-120b config.json, quantization_config: quant_method
mxfp4, modules_to_not_convert self_attn, router, embed_tokens, lm_head; "MXFP4 quantization of
the MoE weights", the gpt-oss model card, arXiv 2508.10925). Served at a 4-bit precision (INT4 on
Hopper, where the engines dequantise it to 16-bit math; FP4 on Blackwell) the engines run the
checkpoint as it is: the dense GEMMs in BF16 from BF16 weights, the experts on the engine's own
MXFP4 MoE op (serving_engines.ENGINE_MOE's mxfp4 tables). At 8 bits or more the checkpoint is a
requantised one, every weight at the precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.serving_engines import (
    CARRIED_ENGINE_MOE,
    DEFAULT_SERVING_ENGINE,
    engine_moe,
)
from ringmaster.engine.tp_allreduce import ENGINE_KEYS
from ringmaster.engine.transformer import Transformer

# MXFP4: 4-bit values and an 8-bit scale per 32 values (OCP Microscaling Formats v1.0, 2023).
MXFP4_WEIGHT_BYTES = 4.25 / 8.0
# A BF16 weight.
BF16_WEIGHT_BYTES = 2.0
# The MoE op's dtype key (serving_engines.ENGINE_MOE) of MXFP4 experts.
MXFP4_EXPERTS = "mxfp4"


@dataclass(frozen=True)
class CheckpointWeights:
    """Bytes of a dense (attention, router, embedding) weight and of a routed expert's, and
    whether the experts run the engine's MXFP4 op with the dense GEMMs in BF16."""

    dense_bytes: NDArray[np.float64]
    expert_bytes: NDArray[np.float64]
    mxfp4_experts: bool


def checkpoint_weights(model: Transformer, weight_bytes: ArrayLike) -> CheckpointWeights:
    """The weights' bytes by part of ``model`` served at ``weight_bytes`` a weight: its
    checkpoint's own split where the precision is 4-bit and the model ships MXFP4 experts
    (Transformer.mxfp4_experts), else ``weight_bytes`` for every weight."""
    w = np.asarray(weight_bytes, dtype=np.float64)
    if model.mxfp4_experts and bool(np.all(w < 1.0)):
        return CheckpointWeights(
            np.full_like(w, BF16_WEIGHT_BYTES), np.full_like(w, MXFP4_WEIGHT_BYTES), True
        )
    return CheckpointWeights(w, w, False)


def checkpoint_bytes(model: Transformer, weight_bytes: float) -> float:
    """The whole checkpoint's bytes served at ``weight_bytes`` a weight (its own split where it
    applies): what a replica must hold."""
    split = checkpoint_weights(model, weight_bytes)
    routed = float(model.routed_expert_parameters)
    dense = float(model.parameters) - routed
    return float(dense * split.dense_bytes + routed * split.expert_bytes)


def checkpoint_note(
    model: Transformer, weight_bytes: float, engine: str | None, accelerator: str
) -> str | None:
    """What a plan says where the checkpoint's own split applies (which MoE op its experts run
    on), else None."""
    if not checkpoint_weights(model, weight_bytes).mxfp4_experts:
        return None
    found = engine_moe(accelerator, engine, MXFP4_EXPERTS)
    name = engine or DEFAULT_SERVING_ENGINE
    carried = CARRIED_ENGINE_MOE.get((ENGINE_KEYS.get(name, name), found[1])) if found else None
    if found is not None and found[1] != "bf16":
        activations = "MXFP8" if found[1] == "mxfp4_mxfp8" else "16-bit"
        op = f"{name}'s MXFP4 MoE op under {activations} activations, " + (
            f"as its gpt-oss recipe runs it on the chip: carried from {carried}'s, measured on"
            f" {accelerator} (the same kernels; AIConfigurator's database)"
            if carried
            else f"measured on {accelerator} (AIConfigurator's database)"
        )
    else:
        op = (
            f"extrapolated: no MXFP4 MoE op of {name} measured on {accelerator}; its 16-bit op's"
            " terms at a W4A16 kernel's tile"
        )
    return (
        "checkpoint as it ships: routed experts in MXFP4 (4.25 bits a weight) on "
        f"{op}; every other weight in BF16, its GEMMs in BF16"
    )
