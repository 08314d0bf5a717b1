"""Context parallelism (ring attention) on an LLM training layout: the K and V a layer's ring
passes, how many passes a micro-batch makes, and one pass's time on the layout's links."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ringmaster.engine import collectives as C
from ringmaster.engine.arrays import F64, as_f64
from ringmaster.engine.llm_layout_names import RECOMPUTE_NONE, RECOMPUTE_SELECTIVE_OP
from ringmaster.engine.llm_memory import BYTES_ACTIVATION
from ringmaster.engine.transformer import Transformer

if TYPE_CHECKING:
    from ringmaster.engine.layout_hardware import LayoutHardware

# Context parallelism (ring attention: Megatron-LM's context_parallel, torchtitan's CP): each
# rank holds s / c tokens and passes its K and V around the ring, c - 1 chunks per pass, the
# traffic of an all-gather of the sequence's K and V; backward passes K, V and their gradients
# again (a reduce-scatter more): 3 all-gather-equivalents per layer per micro-batch (4 under
# Full recompute), overlapped with the attention core's blocks (Liu et al. 2023, "Ring
# Attention"; Megatron-Core docs, context_parallel).
CP_KV_PASSES = 3
CP_KV_PASSES_RECOMPUTE = 1


def kv_bytes_per_layer(model: Transformer, micro_batch: ArrayLike, tensor: ArrayLike) -> F64:
    """A layer's K and V for the whole sequence on one tensor-parallel rank (bf16): what a
    context-parallel ring passes around. Fewer KV heads than t are replicated, one per rank."""
    width = np.maximum(model.kv_hidden / as_f64(tensor), float(model.head_dim))
    return as_f64(2.0 * BYTES_ACTIVATION * model.sequence_length * as_f64(micro_batch) * width)


def context_parallel_passes(recompute: ArrayLike) -> F64:
    """All-gather equivalents of a layer's K and V per micro-batch: CP_KV_PASSES, plus
    CP_KV_PASSES_RECOMPUTE where the attention core's forward is repeated."""
    again = np.isin(np.asarray(recompute), (RECOMPUTE_NONE, RECOMPUTE_SELECTIVE_OP))
    return as_f64(CP_KV_PASSES + np.where(again, 0, CP_KV_PASSES_RECOMPUTE))


def context_parallel_seconds(nbytes: F64, tensor: F64, context: F64, hw: LayoutHardware) -> F64:
    """One all-gather of ``nbytes`` over the c context-parallel ranks (adjacent to the tensor
    ranks, as Megatron-LM and torchtitan order them): on NVLink while t c fits in a host, else
    across hosts with the group's share of the NIC (what NCCL runs, engine.collectives); over
    the slice's ICI on a TPU."""
    if hw.kind == "tpu":
        one = (context - 1.0) / context * nbytes / hw.intra_bandwidth
        return as_f64(np.where(context > 1, one + (context - 1.0) * hw.intra_hop_latency, 0.0))
    g = float(hw.per_host)
    per_host = np.clip(g / tensor, 1.0, context)
    hosts = context / per_host
    nic = hw.nic_bandwidth / (g / per_host)
    coll = C.nccl_collective(
        C.ALL_GATHER, nbytes, hosts, per_host, hw.fabric(nic), with_busbw=False
    )
    return as_f64(np.where(context > 1, coll.seconds, 0.0))
