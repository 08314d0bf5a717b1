"""The names of an LLM training layout's choices and the codes the layout arrays hold for them.

Shardings, activation-recompute policies, FP8 recipes and data-parallel strategies, as the
TrainingJob spec names them; in the arrays of :mod:`ringmaster.engine.llm_training` each is the
index of its name.
"""

from __future__ import annotations

AUTO = "Auto"
SHARDINGS = ("None", "Optimizer", "Gradients", "Full")  # codes 0..3, each shards more
# Activation-recompute policies, as the launchers name them (README, "LLM training layouts"):
# None (FlashAttention, nothing recomputed), Selective (Megatron-LM's --recompute-granularity
# selective: the attention core), Full (every layer from its input: Megatron-LM's granularity
# full, torchtitan's mode full, MaxText's remat_policy full), SelectiveOp (torchtitan's op-level
# selective AC), Minimal, SaveDotExceptMlp, SaveDotExceptMlpwi and MinimalWithContext (MaxText's
# remat policies minimal, save_dot_except_mlp, save_dot_except_mlpwi and minimal_with_context,
# once minimal_flash), QkvProjOffloaded and
# MinimalOffloaded (MaxText's qkv_proj_offloaded and minimal_offloaded: what they save goes to
# the host's pinned memory, not HBM; engine.activation_offload). ``Auto`` searches the first
# three, which every launcher has. New policies go at the end, so that the codes already in
# tables and tests keep their meaning.
RECOMPUTES = (
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
)
SHARD_NONE, SHARD_OPTIMIZER, SHARD_GRADIENTS, SHARD_FULL = range(4)
(
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE_OP,
    RECOMPUTE_MINIMAL,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLP,
    RECOMPUTE_QKV_PROJ_OFFLOADED,
    RECOMPUTE_MINIMAL_OFFLOADED,
    RECOMPUTE_SAVE_DOT_EXCEPT_MLPWI,
    RECOMPUTE_MINIMAL_WITH_CONTEXT,
) = range(len(RECOMPUTES))
FP8_RECIPES = ("Linear", "AllMatmuls")  # with computePrecision fp8: what runs in FP8
RING, REDUCTION_SERVER = "Ring", "ReductionServer"
STRATEGY_RING, STRATEGY_REDUCTION_SERVER = 0, 1
