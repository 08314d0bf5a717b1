"""How a mixture-of-experts layer's tokens reach their experts and come back when the experts
are spread over expert-parallel ranks (serving): the dispatch and the combine, per token of a
step, on the replica's host link or across its hosts.

Two dispatchers:

- ``AllToAll``: NCCL all-to-alls (vLLM's and SGLang's default backends): each token travels as
  16-bit activations to each of its top-k experts' ranks and back
  (:func:`ringmaster.engine.collectives.nccl_all_to_all`, whose model the DeepEP and
  nccl-tests rows of ``calibration/moe_points.yaml`` check).
- ``DeepEP`` (github.com/deepseek-ai/DeepEP; SGLang ``--moe-a2a-backend deepep``, vLLM
  ``--all2all-backend deepep_high_throughput`` / ``deepep_low_latency``): the dispatch in FP8,
  one byte a channel and one 32-bit scale per 128 channels (DeepEP's README: "FP8 dispatching
  and BF16 combining"; its tests cast per token in groups of 128, ``per_token_cast_to_fp8``),
  the combine in BF16. Its *normal* kernels, which prefill runs, send a token across the
  network once per destination host and forward it over NVLink inside that host (docs/
  legacy.md, "Normal kernels with NVLink and RDMA forwarding"); its *low-latency* kernels,
  which decode runs, send a copy to each expert's rank directly ("Low-latency kernels with
  pure RDMA").

Routing is uniform (the load-balancing loss's optimum; engine.llm_step's docstring), so a
token's k experts sit on ``H (1 - (1 - 1/H)^k)`` distinct hosts of ``H`` on average (the same
occupancy result as the experts a step reads), of which its own host is one with probability
``1 - (1 - 1/H)^k`` as well: the expected remote hosts are ``(H - 1)(1 - (1 - 1/H)^k)``.
Where a replica's hosts share one NVLink domain (GB200 NVL72 trays) every byte stays on NVLink
and the network's copies do not arise.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import collectives
from ringmaster.engine.efficiency import ALLTOALL_PEER_LATENCY
from ringmaster.engine.hardware import Accelerator, MachineType

F64 = NDArray[np.float64]

Dispatcher = Literal["AllToAll", "DeepEP"]
DISPATCHERS: tuple[Dispatcher, ...] = ("AllToAll", "DeepEP")
DEFAULT_DISPATCHER: Dispatcher = "AllToAll"
# DeepEP's kernels: "normal" (prefill, per-host deduplication) or "low_latency" (decode).
DispatchKernels = Literal["normal", "low_latency"]

# Activations are 16-bit whatever the weights are (FP8 and W4A16 GEMMs emit BF16).
ACTIVATION_BYTES = 2.0
# DeepEP's FP8 dispatch: e4m3 per channel, an fp32 scale per 128 channels.
FP8_SCALE_GROUP = 128
FP8_SCALE_BYTES = 4.0


def dispatcher_named(name: str) -> Dispatcher:
    """``name`` as a dispatcher (ValueError naming the known ones)."""
    if name not in DISPATCHERS:
        raise ValueError(f"expertDispatch {name!r}; known: {', '.join(DISPATCHERS)}")
    return name


def exchanges_tokens(expert_parallel: int, attention_data: int, dispatcher: Dispatcher) -> bool:
    """Whether an expert-parallel MoE layer dispatches its tokens and combines them: under
    attention data parallelism (each group's own tokens), or with DeepEP asked. With attention
    tensor-parallel every rank holds the step's tokens already: it runs its own experts on them
    and the partial sums are all-reduced, as sliced experts' are (vllm-project/vllm
    vllm/model_executor/layers/fused_moe/config.py @ 002d6073, ``use_all2all_kernels``: EP and
    dp_size > 1; NVIDIA/TensorRT-LLM tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py
    @ 000a01de, ``reducescatter_or_allreduce``: an all-reduce without attention DP)."""
    return expert_parallel > 1 and (attention_data > 1 or dispatcher == "DeepEP")


def dispatch_token_bytes(hidden: int, dispatcher: Dispatcher) -> float:
    """One token's bytes in one dispatch copy."""
    if dispatcher == "DeepEP":
        return float(hidden) + FP8_SCALE_BYTES * float(-(-hidden // FP8_SCALE_GROUP))
    return ACTIVATION_BYTES * float(hidden)


def combine_token_bytes(hidden: int) -> float:
    """One token's bytes in one combine copy: 16-bit for both dispatchers."""
    return ACTIVATION_BYTES * float(hidden)


def remote_host_copies(top_k: ArrayLike, hosts: ArrayLike) -> F64:
    """Expected hosts other than its own that a token's top-k experts sit on (uniform
    routing): ``(H - 1)(1 - (1 - 1/H)^k)``; 0 on one host."""
    h = np.maximum(np.asarray(hosts, dtype=np.float64), 1.0)
    k = np.asarray(top_k, dtype=np.float64)
    return (h - 1.0) * (1.0 - (1.0 - 1.0 / h) ** k)


def deepep_network_share(
    top_k: ArrayLike, hosts: ArrayLike, ranks: ArrayLike, per_host: ArrayLike
) -> F64:
    """DeepEP's normal kernels' network bytes over an all-to-all's: one copy per destination
    host, remote_host_copies(k, H), where the all-to-all sends k (R - g) / R (1 on one host)."""
    h, r, g = np.asarray(hosts, float), np.asarray(ranks, float), np.asarray(per_host, float)
    k = np.asarray(top_k, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = remote_host_copies(k, h) / (k * (r - g) / np.maximum(r, 1.0))
    return np.asarray(np.where(h > 1.0, share, 1.0), dtype=np.float64)


def deepep_bytes_scale(hidden: int) -> float:
    """A layer's four exchanges in training under DeepEP over the same in 16-bit: the forward
    dispatch and the combine's gradient travel in FP8 (DeepSeek-V3 report, arXiv 2412.19437,
    section 3.3.2: activations before the experts' up-projections and activation gradients
    before their down-projections are quantized to FP8 for the dispatch), the combine and the
    dispatch's gradient in BF16."""
    fp8 = dispatch_token_bytes(hidden, "DeepEP")
    return (fp8 + combine_token_bytes(hidden)) / (2.0 * combine_token_bytes(hidden))


def peer_latency(ranks: ArrayLike) -> F64:
    """NCCL's per-peer latency of an all-to-all over ``ranks`` (a send and a receive issued per
    further peer, in turn: collectives.nccl_all_to_all), which DeepEP's kernels do not pay."""
    return np.maximum(np.asarray(ranks, float) - 2.0, 0.0) * ALLTOALL_PEER_LATENCY


@dataclasses.dataclass(frozen=True)
class ExpertGroup:
    """The expert-parallel ranks of a replica: ``ranks`` accelerators, ``per_host`` of them on
    each of its hosts (all of them on one host when ``ranks <= per_host``)."""

    ranks: int
    per_host: int
    accelerator: Accelerator
    machine: MachineType | None = None  # the hosts' (None: one host)

    @property
    def hosts(self) -> int:
        return max(1, -(-self.ranks // self.per_host))


def exchange_seconds(
    buffer_bytes: ArrayLike,
    group: ExpertGroup,
    top_k: float,
    deduplicate_hosts: bool = False,
    peers_in_turn: bool = True,
) -> F64:
    """One dispatch (or combine) of a per-rank buffer of ``buffer_bytes`` (its tokens x top-k
    copies x a copy's bytes) among the group's ranks. ``deduplicate_hosts``: DeepEP's normal
    kernels, whose network bytes are one copy per destination host instead of one per expert
    (the NIC time scales by remote hosts / remote copies; NVLink's is as the all-to-all's).
    ``peers_in_turn``: NCCL issues a send and a receive per peer one after another
    (ALLTOALL_PEER_LATENCY each); DeepEP's kernels write to every peer at once from their SMs
    (False: the base latency and the first hop only)."""
    if group.ranks <= 1:
        return np.zeros(np.shape(buffer_bytes))
    seconds = _all_to_all_seconds(buffer_bytes, group, top_k, deduplicate_hosts)
    if peers_in_turn:
        return seconds
    return seconds - peer_latency(group.ranks)


def _all_to_all_seconds(
    buffer_bytes: ArrayLike, group: ExpertGroup, top_k: float, deduplicate_hosts: bool
) -> F64:
    acc = group.accelerator
    if group.hosts == 1:
        return collectives.intra_host_collective(
            collectives.ALL_TO_ALL, buffer_bytes, group.ranks, acc
        ).seconds
    machine = group.machine
    assert machine is not None, "expert parallelism across hosts needs the hosts' machine"
    if machine.nvlink_domain > group.per_host:  # hosts joined by NVLink (NVL72 trays)
        return collectives.inter_host_collective(
            collectives.ALL_TO_ALL, buffer_bytes, group.hosts, group.per_host, machine, acc
        ).seconds
    fabric = collectives.gpu_fabric(acc, machine, group.per_host)
    if deduplicate_hosts:
        # The all-to-all sends (R - g) / R of each token's k copies over the NICs; DeepEP's
        # normal kernels send remote_host_copies of it.
        dedup = float(deepep_network_share(top_k, group.hosts, group.ranks, group.per_host))
        fabric = dataclasses.replace(
            fabric, net_bandwidth=np.asarray(fabric.net_bandwidth, dtype=np.float64) / dedup
        )
    return collectives.nccl_all_to_all(
        buffer_bytes, group.hosts, group.per_host, fabric, with_busbw=False
    ).seconds


def dispatch_combine_seconds(
    tokens_per_rank: ArrayLike,
    hidden: int,
    top_k: float,
    group: ExpertGroup,
    dispatcher: Dispatcher = DEFAULT_DISPATCHER,
    kernels: DispatchKernels = "low_latency",
) -> F64:
    """One MoE layer's dispatch and combine of ``tokens_per_rank`` tokens on each rank."""
    tokens = np.asarray(tokens_per_rank, dtype=np.float64)
    deepep = dispatcher == "DeepEP"
    dedup = deepep and kernels == "normal"
    out = tokens * top_k * dispatch_token_bytes(hidden, dispatcher)
    back = tokens * top_k * combine_token_bytes(hidden)
    return exchange_seconds(out, group, top_k, dedup, not deepep) + exchange_seconds(
        back, group, top_k, dedup, not deepep
    )


__all__ = [
    "DEFAULT_DISPATCHER",
    "DISPATCHERS",
    "Dispatcher",
    "ExpertGroup",
    "combine_token_bytes",
    "deepep_bytes_scale",
    "deepep_network_share",
    "dispatch_combine_seconds",
    "dispatch_token_bytes",
    "dispatcher_named",
    "exchange_seconds",
    "exchanges_tokens",
    "peer_latency",
    "remote_host_copies",
]
