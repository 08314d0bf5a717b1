"""A mixture of experts' routing around its experts in training: the router, the tokens' sort
into the experts' order, the dispatch gather and the weighted combine, forward and backward, as
bytes per token entering a MoE layer at the streaming rate (engine.step_parts charges them in
the step's memory-bound part). Three ways to run it, by the framework's memory-bound mode:

- **fused** (Transformer Engine's fused permute, XLA's fusions): each tensor moved once, a lower
  bound (not measured);
- **eager** (torchtitan's modules, plain PyTorch, Hugging Face-style stacks): op by op, as
  torchtitan's local dispatcher composes it, measured apart on a lent H200 (llm-foundry's
  MegaBlocks layer, whose gather and scatter are kernels of its own, is fused);
- **compiled** (torch.compile-d blocks): the same code in Inductor's kernels, measured as the
  whole compiled layer less its grouped GEMMs on the same H200.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine.frameworks import HF_EAGER
from ringmaster.engine.llm_memory import BYTES_ACTIVATION
from ringmaster.engine.transformer import Transformer

if TYPE_CHECKING:
    from ringmaster.engine.frameworks import Framework

F64 = NDArray[np.float64]

# Fused (Megatron-Core's token dispatcher, megatron/core/transformer/moe/moe_utils.py permute /
# unpermute and router.py, NVIDIA/Megatron-LM @ d98e8a6), per token entering a MoE layer:
# - the permutation gathers each token into its k experts' order (read h, write k h, bf16) and
#   the unpermutation sums the k outputs back, weighted by the router's probabilities (read k h,
#   write h); backward runs each the other way: 4 x (k + 1) x h elements of 2 bytes;
# - with expert parallelism the received tokens are sorted by local expert once more
#   (sort_chunks_by_idxs) before the experts and after them: 4 x k x h more (every way);
# - the router's scores, top-k and probabilities over the E experts in fp32, forward and
#   backward: 6 passes of E x 4 bytes.
# All at the streaming rate of a fused kernel (H100_STREAM_GBPS: TE's fused permute, XLA's
# fusions): a lower bound.
MOE_PERMUTE_PASSES = 4.0
MOE_ROUTER_PASSES = 6.0

# Eager (memory-bound modes "eager" and HF_EAGER): op by op, as torchtitan's local dispatcher
# composes it (torchtitan/models/common/moe.py, token_dispatcher.py @ b5bcd76c6): the dispatch
# gathers each routed copy (x[indices], an index_put accumulating its gradient) and the combine
# casts the expert outputs to fp32, scales them by the scores, casts back and scatter_adds them
# (each with its backward). Measured apart on a lent H200
# (calibration/measured/device/2026-11-30-h200/moe_ops.json, 8,192 tokens, forward + backward),
# as bytes at the streaming rate (H100_STREAM_GBPS, the H200's time over its HBM scale):
# "routed" per routed element (tokens x top-k x hidden: dispatch + combine), "token" per token x
# hidden (the fp32 router's gate, softmax and top-k, the argsort and counts). Fitted on
# Qwen3-30B-A3B's and OLMoE-1B-7B's widths (calibration.device_steps.fit_moe_routing_bytes),
# checked on Mixtral 8x7B's and on the whole MoE steps of the same call. About 14x the fused
# bound (Qwen3-30B-A3B: 2.19 MB a token a layer against 0.15): the combine's fp32 round trip
# and scatter_add, the gather's index_put gradient. DeepSpeed's own MoE (einsum dispatch) is
# priced the same, carried (moe_routing_evidence says so).
MOE_EAGER_BYTES_PER_ELEMENT = {"routed": 112.51, "token": 170.84}
# Compiled: the whole MoE layer torch.compile-d less its grouped GEMMs compiled alone
# (calibration/measured/device/2026-11-30-h200/moe_ops_compiled.json; Inductor fuses the
# combine's casts and scale into the scatter and the router's softmax and top-k), per routed
# element; the op-by-op compiles of the same file take twice as long (each op its own graph).
# Fitted on the same two widths, checked on Mixtral's and on the compiled whole steps. About 3x
# the fused bound.
MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT = 27.35

ROUTING_KINDS = ("fused", "eager", "compiled")
# Frameworks whose MoE layer routes through kernels of its own whatever their memory-bound mode:
# llm-foundry's MoE FFNs are MegaBlocks', whose gather and scatter are Triton kernels with the
# scores' weighting in the scatter (databricks/megablocks megablocks/ops/padded_gather.py,
# padded_scatter.py, megablocks/backend/kernels.py): priced at the fused bound, not measured.
OWN_ROUTING_KERNELS = {"LLMFoundry": "MegaBlocks' Triton gather and scatter"}
# The frameworks whose own MoE layer is the measured one (torchtitan's, and plain PyTorch
# running the same code); the others carry it.
MOE_MEASURED_FRAMEWORKS = ("Torchtitan", "PyTorch")
MEASURED_ON = "on a lent H200 (calibration/measured/device/2026-11-30-h200)"


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def routing_kind(memory_bound: str, framework: str = "") -> str:
    """How a framework (its name) with that memory-bound mode (Framework.memory_bound) runs the
    routing: its own kernels where OWN_ROUTING_KERNELS names them, else by the mode."""
    if framework in OWN_ROUTING_KERNELS:
        return "fused"
    if memory_bound in ("eager", HF_EAGER):
        return "eager"
    return "compiled" if memory_bound == "compiled" else "fused"


def moe_routing_bytes_per_token(
    model: Transformer, expert_parallel: ArrayLike, kind: str = "fused"
) -> F64:
    """Bytes one token's routing, permutation and unpermutation move in a MoE layer, forward
    and backward, at the streaming rate (``kind``: ROUTING_KINDS); ``expert_parallel`` adds the
    received tokens' sort by local expert."""
    k, h = float(model.active_experts), float(model.hidden)
    sort = np.where(expert_parallel, MOE_PERMUTE_PASSES * k * h * BYTES_ACTIVATION, 0.0)
    if kind == "eager":
        eager = MOE_EAGER_BYTES_PER_ELEMENT
        return _f(eager["routed"] * k * h + eager["token"] * h + sort)
    if kind == "compiled":
        return _f(MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT * k * h + sort)
    permute = MOE_PERMUTE_PASSES * (k + 1.0) * h * BYTES_ACTIVATION
    router = MOE_ROUTER_PASSES * float(model.experts) * 4.0
    return _f(permute + sort + router)


def moe_routing_evidence(fw: Framework) -> str:
    """Where a MoE layer's routing cost for ``fw`` comes from, and its host sync's."""
    kind = routing_kind(fw.memory_bound, fw.name)
    if kind == "fused":
        kernels = OWN_ROUTING_KERNELS.get(fw.name, "fused permutation")
        text = (
            f"MoE routing: {fw.name}'s {kernels} at each tensor's bytes once (not measured: a "
            "lower bound)"
        )
    else:
        carried = (
            "" if fw.name in MOE_MEASURED_FRAMEWORKS else f", carried to {fw.name}'s own layer"
        )
        how = "eager ops" if kind == "eager" else "torch.compile-d layer"
        text = f"MoE routing: torchtitan's {how} measured {MEASURED_ON}{carried}"
    if fw.moe_sync_seconds and not fw.moe_sync_without_expert_parallel:
        text += (
            f"; above one expert-parallel rank, its dispatch's host sync a layer at "
            f"Megatron-Core's fitted {fw.moe_sync_seconds * 1e3:.2f} ms, carried"
        )
    return text


__all__ = [
    "MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT",
    "MOE_EAGER_BYTES_PER_ELEMENT",
    "OWN_ROUTING_KERNELS",
    "ROUTING_KINDS",
    "moe_routing_bytes_per_token",
    "moe_routing_evidence",
    "routing_kind",
]
