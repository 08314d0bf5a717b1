"""LLM training layouts: the search for the best layout of a request.

:func:`search_layouts` enumerates every valid layout of a request (:func:`layout_grid`),
evaluates them in one call (:func:`ringmaster.engine.llm_training.evaluate_layouts`), and picks
the fastest that fits (cheaper on ties), with the best alternatives and why each lost; when none
fits, the levers that shrink the dominant memory term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ringmaster.engine.expert_dispatch import DEFAULT_DISPATCHER, dispatcher_named
from ringmaster.engine.llm_layout_names import (
    AUTO,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    RECOMPUTES,
    REDUCTION_SERVER,
    RING,
    SHARD_FULL,
    SHARD_NONE,
    SHARDINGS,
    STRATEGY_REDUCTION_SERVER,
)
from ringmaster.engine.llm_memory import (
    memory_per_accelerator,
    valid_pipeline,
    weight_bytes,
)
from ringmaster.engine.llm_training import (
    I64,
    LayoutArrays,
    LayoutHardware,
    evaluate_layouts,
    hardware_memory_terms,
)
from ringmaster.engine.moe_training import (
    OVERLAP_DUALPIPE,
    OVERLAP_NONE,
    OVERLAP_ONE_F_ONE_B,
    dualpipe_runs,
)
from ringmaster.engine.recompute import remat_percent
from ringmaster.engine.transformer import Transformer
from ringmaster.engine.units import GIB

# The recompute policies ``Auto`` searches: the first three of RECOMPUTES, which every launcher
# has.
SEARCHED_RECOMPUTES = (RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL)

# How many alternatives a search reports.
ALTERNATIVES = 5

# Context-parallel degrees ``Auto`` tries: powers of two up to this (Llama 3 405B's longest
# context ran CP 16: Dubey et al. 2024, section 3.3.2).
MAX_CONTEXT_PARALLEL = 32


@dataclass(frozen=True)
class LayoutRequest:
    """What the user fixed (an int or a name) and what the search chooses (None = Auto)."""

    model: Transformer
    global_batch: int  # sequences per step
    tensor: int | None = None
    pipeline: int | None = None
    sharding: str | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    virtual_stages: int = 1
    strategy: str = AUTO  # the data-parallel part: Auto, Ring, ReductionServer
    context: int | None = None
    expert: int | None = None  # expert parallelism (a mixture of experts; dense: 1)
    # The ranks each routed expert is split over (Megatron-Core's expert_tensor_parallel_size);
    # None searches the tensor degree (its default) and 1 (MoE parallel folding).
    expert_tensor: int | None = None
    # A mixture of experts' all-to-all overlap schedule and token dropping
    # (engine.moe_training: EXPERT_OVERLAPS, routed_load).
    expert_overlap: str = OVERLAP_NONE
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    expert_dispatch: str = DEFAULT_DISPATCHER  # engine.expert_dispatch.DISPATCHERS
    # Full recompute of that many layers of each model chunk (Megatron-LM's
    # --recompute-num-layers, block method); None: every layer. Only with recompute Full.
    recompute_layers: int | None = None
    # Megatron's CPU offloading of that many layers' activations (--cpu-offloading-num-layers):
    # one stage, no recompute (engine.activation_offload.layer_offload).
    offload_layers: int | None = None


@dataclass(frozen=True)
class Layout:
    """One evaluated layout, as plain numbers."""

    tensor: int
    pipeline: int
    data: int
    sharding: str
    micro_batch: int
    micro_batches: int
    recompute: str
    virtual_stages: int
    fits: bool
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    reserve_bytes: float
    total_bytes: float
    capacity_bytes: float
    step_seconds: float
    compute_seconds: float
    tensor_parallel_seconds: float
    pipeline_send_seconds: float
    bubble_seconds: float
    data_parallel_seconds: float
    exposed_data_parallel_seconds: float
    tokens_per_second: float
    mfu: float
    strategy: str
    cost_per_hour: float
    context: int = 1
    context_parallel_seconds: float = 0.0
    expert: int = 1
    expert_parallel_seconds: float = 0.0
    gemm_seconds: float = 0.0
    attention_seconds: float = 0.0
    memory_bound_seconds: float = 0.0
    loss_seconds: float = 0.0
    host_gap_seconds: float = 0.0
    optimizer_seconds: float = 0.0
    overlap_interference_seconds: float = 0.0  # what hidden DP collectives take from the compute
    expert_tensor: int = 0  # 0: the tensor degree
    expert_overlap: str = OVERLAP_NONE
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    expert_dispatch: str = DEFAULT_DISPATCHER
    # Offloaded activations (engine.activation_offload): exposed copy seconds per step, and the
    # host bytes per accelerator with the host's share (inf: not stated, unchecked).
    activation_offload_seconds: float = 0.0
    host_offload_bytes: float = 0.0
    host_capacity_bytes: float = float("inf")
    recompute_layers: int | None = None  # Full recompute of that many layers a chunk
    offload_layers: int | None = None  # Megatron's CPU offloading of that many layers
    # The share of what the policy saves beyond Full that the compiler (XLA) recomputes to fit
    # (engine.recompute.compiler_remat_share).
    compiler_remat: float = 0.0

    @property
    def recompute_policy(self) -> str:
        """The recompute policy as the plan names it: ``Full (5 layers a chunk)`` where Full
        recompute is limited to some layers; ``Minimal + XLA remat 15 %`` where the compiler
        recomputes that share of what the policy keeps beyond Full, to fit."""
        if self.compiler_remat > 0.0:
            return f"{self.recompute} + XLA remat {remat_percent(self.compiler_remat)} %"
        if self.recompute_layers is None:
            return self.recompute
        layers = "layer" if self.recompute_layers == 1 else "layers"
        return f"{self.recompute} ({self.recompute_layers} {layers} a chunk)"

    @property
    def expert_tensor_degree(self) -> int:
        return self.expert_tensor or self.tensor

    @property
    def name(self) -> str:
        """``TP8 PP4 DP32`` (``TP8 CP2 PP4 DP16`` with context parallelism, ``TP1 EP8 PP16
        DP128`` with expert parallelism: EP is carved out of DP, which keeps its count; ``TP2
        EP32 ETP1 PP8 DP16`` where an expert is split over fewer ranks than the tensor degree,
        MoE parallel folding), as ``kubectl get tj -o wide`` shows it."""
        cp = f" CP{self.context}" if self.context > 1 else ""
        ep = f" EP{self.expert}" if self.expert > 1 else ""
        if self.expert > 1 and self.expert_tensor_degree != self.tensor:
            ep += f" ETP{self.expert_tensor_degree}"
        return f"TP{self.tensor}{cp}{ep} PP{self.pipeline} DP{self.data}"

    def describe(self) -> str:
        v = f" x {self.virtual_stages} virtual" if self.virtual_stages > 1 else ""
        cp = f" x context {self.context}" if self.context > 1 else ""
        ep = f", expert {self.expert} (of data x context)" if self.expert > 1 else ""
        if self.expert > 1 and self.expert_tensor_degree != self.tensor:
            ep = (
                f", expert {self.expert} x expert tensor {self.expert_tensor_degree} (folded "
                "over the stage's ranks)"
            )
        moe = ""
        if self.expert_overlap != OVERLAP_NONE:
            moe += f", all-to-all overlap {self.expert_overlap}"
        if self.expert_dispatch != DEFAULT_DISPATCHER:
            moe += f", {self.expert_dispatch} dispatch"
        if self.capacity_factor is not None:
            padded = ", padded" if self.pad_to_capacity else ""
            moe += f", capacity factor {self.capacity_factor:g}{padded}"
        if self.offload_layers:
            moe += f", {self.offload_layers} layers' activations offloaded to the host"
        return (
            f"tensor {self.tensor}{cp} x pipeline {self.pipeline}{v} x data {self.data}{ep}, "
            f"sharding {self.sharding}, micro-batch {self.micro_batch}, recompute "
            f"{self.recompute_policy}{moe}"
        )


@dataclass(frozen=True)
class Alternative:
    layout: Layout
    why: str  # "slower by 12%" or "does not fit by 3.2 GiB"


@dataclass(frozen=True)
class LayoutSearch:
    chosen: Layout  # the fastest that fits; when none fits, the one closest to fitting
    fits: bool
    reason: str | None  # when nothing fits: the numbers and what to try
    alternatives: tuple[Alternative, ...]
    evaluated: int  # layouts evaluated
    arrays: LayoutArrays = field(repr=False)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _powers_of_two_dividing(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        if n % k == 0:
            out.append(k)
        k *= 2
    return out


def valid_context(sequence_length: int, context: int) -> bool:
    """Whether a sequence splits over ``context`` ranks: load-balanced causal ring attention
    cuts it into 2c chunks, two per rank (Megatron-LM's and torchtitan's CP), so 2c | s."""
    return context == 1 or (context >= 1 and sequence_length % (2 * context) == 0)


def valid_expert(
    model: Transformer, data_context: int, expert: int, tensor: int = 1, expert_tensor: int = 0
) -> bool:
    """Whether ``expert`` ranks, each expert split over ``expert_tensor`` (0: the tensor
    degree), split the experts: e divides the routed experts (Megatron-Core:
    num_moe_experts % expert_model_parallel_size == 0) and e x etp the stage's t x d x c ranks
    (MoE parallel folding; with etp = t, e divides the data x context ranks as before); an
    expert split etp ways needs etp to divide its FFN width; a dense model takes only 1."""
    etp = expert_tensor or tensor
    if expert < 1 or etp < 1 or (tensor * data_context) % (expert * etp):
        return False
    if expert == 1:
        return etp == tensor
    if model.expert_ffn_hidden % etp:
        return False
    return model.experts > 0 and model.experts % expert == 0


def expert_degrees(
    model: Transformer,
    data_context: int,
    fixed: int | None,
    tensor: int = 1,
    fixed_tensor: int | None = None,
) -> list[tuple[int, int]]:
    """(expert, expert tensor) pairs to try: the fixed ones where valid, else every valid expert
    degree, each at the tensor degree (Megatron-Core's default) and at 1 (folded)."""
    if not model.is_moe:
        return [(1, tensor)] if fixed in (None, 1) else []
    experts = [fixed] if fixed is not None else _divisors(tensor * data_context)
    etps = [fixed_tensor] if fixed_tensor is not None else sorted({tensor, 1}, reverse=True)
    return [
        (e, etp)
        for e in experts
        for etp in etps
        if valid_expert(model, data_context, e, tensor, etp)
    ]


def layout_grid(request: LayoutRequest, hw: LayoutHardware) -> dict[str, I64]:
    """Every valid layout of the request: heads divisible by t (and t within a host: a divisor of
    the host's accelerators, or of the slice's first axis on a TPU), p stages of the layers
    (:func:`valid_pipeline`), c a power of two (up to MAX_CONTEXT_PARALLEL) splitting the
    sequence (:func:`valid_context`), accelerators by t p c, the global batch by d b;
    micro-batches are powers of two; ``Auto`` recompute tries SEARCHED_RECOMPUTES."""
    model = request.model
    n = hw.accelerators
    host_span = hw.per_host if hw.kind == "gpu" else hw.slice_axes[0]
    tensors = (
        [request.tensor]
        if request.tensor is not None
        else [t for t in _divisors(host_span) if model.heads % t == 0]
    )
    pipelines = (
        [request.pipeline]
        if request.pipeline is not None
        else [p for p in _divisors(n) if valid_pipeline(model.layers, p)]
    )
    contexts = (
        [request.context]
        if request.context is not None
        else [
            c
            for c in _powers_of_two_dividing(min(n, MAX_CONTEXT_PARALLEL))
            if valid_context(model.sequence_length, c)
        ]
    )
    shardings = (
        [SHARDINGS.index(request.sharding)]
        if request.sharding is not None
        else list(range(len(SHARDINGS)))
    )
    recomputes = (
        [RECOMPUTES.index(request.recompute)]
        if request.recompute is not None
        else list(SEARCHED_RECOMPUTES)
    )
    if request.offload_layers:  # Megatron-Core offloads on one stage, without recompute
        pipelines = [p for p in pipelines if p == 1]
        recomputes = [r for r in recomputes if r == RECOMPUTE_NONE]
    overlap = request.expert_overlap
    if overlap == OVERLAP_ONE_F_ONE_B:
        # Megatron-Core's preconditions (api.parallelism.MOE_FEATURE_RULES): no Full recompute,
        # pipeline 1 or interleaved, expert > 1 (below).
        recomputes = [r for r in recomputes if r != RECOMPUTE_FULL]
        if request.virtual_stages == 1:
            pipelines = [p for p in pipelines if p == 1]
    if overlap == OVERLAP_DUALPIPE:
        pipelines = [p for p in pipelines if p % 2 == 0]
    rows: list[tuple[int, int, int, int, int, int, int, int]] = []
    for t in tensors:
        for p in pipelines:
            for c in contexts:
                # Multislice: tensor, pipeline and context stay inside one slice.
                if (n // hw.slices) % (t * p * c):
                    continue
                d = n // (t * p * c)
                if request.global_batch % d or d % hw.data_replicas:
                    continue
                per_replica = request.global_batch // d
                micro = (
                    [request.micro_batch]
                    if request.micro_batch is not None
                    else _powers_of_two_dividing(per_replica)
                )
                pairs = expert_degrees(model, d * c, request.expert, t, request.expert_tensor)
                if overlap == OVERLAP_ONE_F_ONE_B:
                    pairs = [(ep, etp) for ep, etp in pairs if ep > 1]
                for ep, etp in pairs:
                    for b in micro:
                        if per_replica % b:
                            continue
                        if overlap == OVERLAP_DUALPIPE and not dualpipe_runs(p, per_replica // b):
                            continue
                        for s in shardings if d * c > 1 else [SHARD_NONE]:
                            for r in recomputes:
                                rows.append((t, p, s, b, r, c, ep, etp))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 8)
    return {
        "tensor": arr[:, 0],
        "pipeline": arr[:, 1],
        "sharding": arr[:, 2],
        "micro_batch": arr[:, 3],
        "recompute": arr[:, 4],
        "context": arr[:, 5],
        "expert": arr[:, 6],
        "expert_tensor": arr[:, 7],
    }


def evaluate_grid(request: LayoutRequest, hw: LayoutHardware, grid: dict[str, I64]) -> LayoutArrays:
    """:func:`evaluate_layouts` over a :func:`layout_grid`."""
    return evaluate_layouts(
        request.model,
        hw,
        tensor=grid["tensor"],
        pipeline=grid["pipeline"],
        sharding=grid["sharding"],
        micro_batch=grid["micro_batch"],
        recompute=grid["recompute"],
        context=grid["context"],
        expert=grid["expert"],
        expert_tensor=grid["expert_tensor"],
        global_batch=request.global_batch,
        virtual_stages=request.virtual_stages,
        strategy=request.strategy,
        expert_overlap=request.expert_overlap,
        capacity_factor=request.capacity_factor,
        pad_to_capacity=request.pad_to_capacity,
        expert_dispatch=dispatcher_named(request.expert_dispatch),
        recompute_layers=request.recompute_layers,
        offload_layers=request.offload_layers,
    )


def _layout(
    a: LayoutArrays, i: int, capacity: float, host_capacity: float = float("inf")
) -> Layout:
    mem = a.memory
    return Layout(
        tensor=int(a.tensor[i]),
        pipeline=int(a.pipeline[i]),
        data=int(a.data[i]),
        sharding=SHARDINGS[int(a.sharding[i])],
        micro_batch=int(a.micro_batch[i]),
        micro_batches=int(a.micro_batches[i]),
        recompute=RECOMPUTES[int(a.recompute[i])],
        virtual_stages=int(a.virtual_stages[i]),
        fits=bool(a.fits[i]),
        weights_bytes=float(mem.weights[i]),
        gradients_bytes=float(mem.gradients[i]),
        optimizer_bytes=float(mem.optimizer[i]),
        activations_bytes=float(mem.activations[i]),
        reserve_bytes=float(mem.reserve[i]),
        total_bytes=float(mem.total[i]),
        capacity_bytes=capacity,
        step_seconds=float(a.step_seconds[i]),
        compute_seconds=float(a.compute_seconds[i]),
        tensor_parallel_seconds=float(a.tensor_parallel_seconds[i]),
        pipeline_send_seconds=float(a.pipeline_send_seconds[i]),
        bubble_seconds=float(a.bubble_seconds[i]),
        data_parallel_seconds=float(a.data_parallel_seconds[i]),
        exposed_data_parallel_seconds=float(a.exposed_data_parallel_seconds[i]),
        tokens_per_second=float(a.tokens_per_second[i]),
        mfu=float(a.mfu[i]),
        strategy=REDUCTION_SERVER if int(a.strategy[i]) == STRATEGY_REDUCTION_SERVER else RING,
        cost_per_hour=float(a.cost_per_hour[i]),
        context=int(a.context[i]),
        context_parallel_seconds=float(a.context_parallel_seconds[i]),
        expert=int(a.expert[i]),
        expert_parallel_seconds=float(a.expert_parallel_seconds[i]),
        gemm_seconds=float(a.gemm_seconds[i]),
        attention_seconds=float(a.attention_seconds[i]),
        memory_bound_seconds=float(a.memory_bound_seconds[i]),
        loss_seconds=float(a.loss_seconds[i]),
        host_gap_seconds=float(a.host_gap_seconds[i]),
        optimizer_seconds=float(a.optimizer_seconds[i]),
        overlap_interference_seconds=float(a.overlap_interference_seconds[i]),
        expert_tensor=int(a.expert_tensor[i]),
        expert_overlap=a.expert_overlap,
        capacity_factor=a.capacity_factor,
        pad_to_capacity=a.pad_to_capacity,
        expert_dispatch=a.expert_dispatch,
        activation_offload_seconds=float(a.activation_offload_seconds[i]),
        host_offload_bytes=float(a.host_offload_bytes[i]),
        host_capacity_bytes=host_capacity,
        recompute_layers=a.recompute_layers,
        offload_layers=a.offload_layers,
        compiler_remat=float(a.compiler_remat[i]),
    )


def evaluate_layout(
    model: Transformer,
    hw: LayoutHardware,
    layout: Layout,
    global_batch: int,
    strategy: str | None = None,
) -> LayoutArrays:
    """``layout`` evaluated again on ``hw`` (one row of evaluate_layouts), at its own strategy
    or ``strategy``."""
    return evaluate_layouts(
        model,
        hw,
        tensor=np.array([layout.tensor]),
        pipeline=np.array([layout.pipeline]),
        sharding=np.array([SHARDINGS.index(layout.sharding)]),
        micro_batch=np.array([layout.micro_batch]),
        recompute=np.array([RECOMPUTES.index(layout.recompute)]),
        context=np.array([layout.context]),
        expert=np.array([layout.expert]),
        expert_tensor=np.array([layout.expert_tensor_degree]),
        global_batch=global_batch,
        virtual_stages=layout.virtual_stages,
        strategy=layout.strategy if strategy is None else strategy,
        expert_overlap=layout.expert_overlap,
        capacity_factor=layout.capacity_factor,
        pad_to_capacity=layout.pad_to_capacity,
        expert_dispatch=dispatcher_named(layout.expert_dispatch),
        recompute_layers=layout.recompute_layers,
        offload_layers=layout.offload_layers,
    )


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


class NoLayoutError(ValueError):
    """The request admits no layout at all (nothing divides); the message names the numbers."""


def search_layouts(request: LayoutRequest, hw: LayoutHardware) -> LayoutSearch:
    """Evaluate every valid layout and choose: the fastest that fits, cheaper on ties (then the
    one with the most memory to spare)."""
    grid = layout_grid(request, hw)
    if grid["tensor"].size == 0:
        raise NoLayoutError(_no_layout_message(request, hw))
    a = evaluate_grid(request, hw, grid)
    cap = hw.memory_bytes
    fitting = np.flatnonzero(a.fits)
    # A policy the search picks is one the launcher can run as stated: where the recompute is
    # left to it, layouts that fit only by the compiler's rematerialisation (XLA recomputing what
    # the policy would keep, an unplanned recompute it may refuse far over the limit: openxla
    # docs/errors/error_1000.md, "Aborting compilation early") yield to any that fit on their own.
    on_their_own = np.flatnonzero(a.fits & (a.compiler_remat == 0))
    if request.recompute is None and on_their_own.size:
        fitting = on_their_own
    if fitting.size:
        order = fitting[
            np.lexsort(
                (
                    a.memory.total[fitting],
                    a.cost_per_hour[fitting] * a.step_seconds[fitting],
                    np.round(a.step_seconds[fitting], 12),
                )
            )
        ]
        best = int(order[0])
        chosen = _layout(a, best, cap, hw.host_memory_per_accelerator)
        reason = None
    else:
        best = int(np.argmin(a.memory.total))
        chosen = _layout(a, best, cap, hw.host_memory_per_accelerator)
        reason = _does_not_fit(chosen, hw, request)
    return LayoutSearch(
        chosen=chosen,
        fits=bool(fitting.size),
        reason=reason,
        alternatives=_alternatives(a, best, cap),
        evaluated=int(a.step_seconds.size),
        arrays=a,
    )


def _alternatives(a: LayoutArrays, best: int, cap: float) -> tuple[Alternative, ...]:
    """The best layout of each other (tensor, context, pipeline, sharding): the fastest that
    fits, else the closest to fitting; fitting ones first by step time, then the rest by their
    overshoot."""
    key = (
        a.expert_tensor * 100_000_000_000_000
        + a.expert * 100_000_000_000
        + a.tensor * 100_000_000
        + a.context * 100_000
        + a.pipeline * 10
        + a.sharding
    ).astype(np.int64)
    chosen_key = key[best]
    chosen_step = float(a.step_seconds[best])
    picks: list[int] = []
    for k in np.unique(key):
        if k == chosen_key:
            continue
        members = np.flatnonzero(key == k)
        fit = members[a.fits[members]]
        if fit.size:
            picks.append(int(fit[np.argmin(a.step_seconds[fit])]))
        else:
            picks.append(int(members[np.argmin(a.memory.total[members])]))
    picks.sort(key=lambda i: (not a.fits[i], a.step_seconds[i] if a.fits[i] else a.memory.total[i]))
    out = []
    for i in picks[:ALTERNATIVES]:
        layout = _layout(a, i, cap)
        if layout.fits:
            slower = layout.step_seconds / chosen_step - 1.0
            why = f"slower by {slower:.1%}" if slower > 0 else "as fast, costs more or spares less"
        elif layout.total_bytes <= cap:  # HBM holds it; the host cannot hold what it offloads
            why = f"offloads {_gib(layout.host_offload_bytes)}, beyond the host's share"
        else:
            why = f"does not fit by {_gib(layout.total_bytes - cap)}"
        out.append(Alternative(layout, why))
    return tuple(out)


def _single(request: LayoutRequest, hw: LayoutHardware, layout: Layout, **change: int) -> float:
    """Memory per accelerator of ``layout`` with some of its fields changed."""
    fields = {
        "tensor": layout.tensor,
        "pipeline": layout.pipeline,
        "context": layout.context,
        "micro_batch": layout.micro_batch,
        "recompute": RECOMPUTES.index(layout.recompute),
        "sharding": SHARDINGS.index(layout.sharding),
        "expert": layout.expert,
        **change,
    }
    d = hw.accelerators / (fields["tensor"] * fields["pipeline"] * fields["context"])
    mem = memory_per_accelerator(
        request.model,
        tensor=fields["tensor"],
        pipeline=fields["pipeline"],
        micro_batch=fields["micro_batch"],
        micro_batches=request.global_batch / (d * fields["micro_batch"]),
        recompute=fields["recompute"],
        virtual_stages=layout.virtual_stages,
        context=fields["context"],
        fp8=hw.compute_precision in ("fp8", "fp4"),
        expert=fields["expert"],
        dual_pipe=request.expert_overlap == OVERLAP_DUALPIPE,
        **hardware_memory_terms(hw, d, fields["sharding"]),
        # a folded expert degree stays; the default one follows the tensor degree
        expert_tensor=change.get(
            "expert_tensor",
            layout.expert_tensor_degree if layout.expert_tensor_degree != layout.tensor else None,
        ),
    )
    return float(mem.total)


def _levers(request: LayoutRequest, hw: LayoutHardware, closest: Layout) -> list[str]:
    """What shrinks the dominant term, each with the memory it leaves: activations shrink with
    recompute, context parallelism and the micro-batch; weights, gradients and optimizer state
    with sharding, tensor and pipeline parallelism. Of each lever's settings that divide, the
    smallest step that fits is named, else the one that shrinks the most."""
    model = request.model
    n = hw.accelerators
    t, p, c = closest.tensor, closest.pipeline, closest.context

    def divides(tt: int, pp: int, cc: int) -> bool:
        return n % (tt * pp * cc) == 0 and request.global_batch % (n // (tt * pp * cc)) == 0

    host_span = hw.per_host if hw.kind == "gpu" else hw.slice_axes[0]
    steps = max(1, MAX_CONTEXT_PARALLEL.bit_length())
    recompute: list[tuple[str, dict[str, int]]] = []
    if closest.recompute != "Full":
        recompute.append(("activationRecompute: Full", {"recompute": RECOMPUTE_FULL}))
    contexts = [
        (f"context: {c * 2**k}", {"context": c * 2**k})
        for k in range(1, steps)
        if valid_context(model.sequence_length, c * 2**k) and divides(t, p, c * 2**k)
    ]
    micro = [("microBatchSize: 1", {"micro_batch": 1})] if closest.micro_batch > 1 else []
    sharding = (
        [("sharding: Full", {"sharding": SHARD_FULL})]
        if closest.sharding != "Full" and closest.data * c > 1
        else []
    )
    tensors = [
        (f"tensor: {q}", {"tensor": q})
        for q in _divisors(host_span)
        if q > t and model.heads % q == 0 and divides(q, p, c)
    ]
    pipelines = [
        (f"pipeline: {q}", {"pipeline": q})
        for q in _divisors(n)
        if q > p and valid_pipeline(model.layers, q) and divides(t, q, c)
    ]
    experts = [
        (f"expert: {q}", {"expert": q, "expert_tensor": etp})
        for q, etp in expert_degrees(model, closest.data * c, None, t)
        if q > closest.expert and etp == closest.expert_tensor_degree
    ]
    state = closest.weights_bytes + closest.gradients_bytes + closest.optimizer_bytes
    activation_levers = [recompute, contexts, micro]
    state_levers = [experts, sharding, tensors, pipelines]
    levers = (
        activation_levers + state_levers
        if closest.activations_bytes >= state
        else state_levers + activation_levers
    )
    tips = []
    for options in levers:
        tried = [(text, _single(request, hw, closest, **change)) for text, change in options]
        useful = [(text, after) for text, after in tried if after < closest.total_bytes]
        if not useful:
            continue
        fitting = [(text, after) for text, after in useful if after <= hw.memory_bytes]
        text, after = fitting[0] if fitting else min(useful, key=lambda x: x[1])
        tips.append(f"{text} ({_gib(after)})")
    return tips[:3]


def _does_not_fit(closest: Layout, hw: LayoutHardware, request: LayoutRequest) -> str:
    """The numbers, the dominant term, and the levers that shrink it."""
    if closest.total_bytes <= hw.memory_bytes:  # HBM holds it: the host's DRAM does not
        return (
            f"recompute {closest.recompute} offloads {_gib(closest.host_offload_bytes)} of "
            f"activations per accelerator to host memory with tensor {closest.tensor} x "
            f"pipeline {closest.pipeline}, micro-batch {closest.micro_batch}; the host has "
            f"{_gib(hw.host_memory_per_accelerator)} per {hw.accelerator}; try a smaller "
            "microBatchSize or another activationRecompute"
        )
    state = closest.weights_bytes + closest.gradients_bytes + closest.optimizer_bytes
    dominant = (
        "activations" if closest.activations_bytes >= state else "weights, gradients and optimizer"
    )
    cp = f" x context {closest.context}" if closest.context > 1 else ""
    cp += f" (expert {closest.expert})" if closest.expert > 1 else ""
    text = (
        f"needs {_gib(closest.total_bytes)} per accelerator with tensor {closest.tensor}{cp} x "
        f"pipeline {closest.pipeline} (sharding {closest.sharding}, recompute "
        f"{closest.recompute}, micro-batch {closest.micro_batch}: weights "
        f"{_gib(closest.weights_bytes)}, gradients {_gib(closest.gradients_bytes)}, optimizer "
        f"{_gib(closest.optimizer_bytes)}, activations {_gib(closest.activations_bytes)}, "
        f"reserve {_gib(closest.reserve_bytes)}); {hw.accelerator} has "
        f"{_gib(hw.memory_bytes)}; {dominant} dominate"
    )
    tips = _levers(request, hw, closest)
    if not tips:
        kept = float(weight_bytes(hw.framework, SHARD_FULL))
        state = hw.optimizer_state_bytes
        model_state = request.model.parameters * (kept + hw.gradient_bytes + state)
        needed = math.ceil(model_state / max(hw.memory_bytes - hw.runtime_reserve_bytes, 1.0))
        tips.append(
            f"more accelerators: weights, gradients and optimizer state alone are "
            f"{_gib(model_state)}, at least {needed} x {_gib(hw.memory_bytes)} fully sharded"
        )
    return f"{text}; try {' or '.join(tips)}"


def _no_layout_message(request: LayoutRequest, hw: LayoutHardware) -> str:
    m = request.model
    n = hw.accelerators
    parts = [
        f"no layout divides: {n} accelerators, {m.heads} attention heads, {m.layers} layers,"
        f" sequence {m.sequence_length},"
    ]
    parts.append(f"global batch {request.global_batch}")
    if request.tensor is not None:
        parts.append(f"with tensor {request.tensor}")
    if request.pipeline is not None:
        parts.append(f"pipeline {request.pipeline}")
    if request.context is not None:
        parts.append(f"context {request.context}")
    if request.micro_batch is not None:
        parts.append(f"micro-batch {request.micro_batch}")
    if request.expert is not None:
        parts.append(f"expert {request.expert} ({m.experts} experts)")
    if hw.data_replicas > 1:
        parts.append(f"dataReplicas {hw.data_replicas}")
    schedule = ""
    if request.expert_overlap == OVERLAP_DUALPIPE:
        schedule = (
            "; DualPipe needs an even pipeline and an even number of micro-batches, at least"
            " two per pipeline rank"
        )
    elif request.expert_overlap == OVERLAP_ONE_F_ONE_B:
        schedule = (
            "; OneFOneB needs expert > 1, no Full recompute, and pipeline 1 unless"
            " virtualPipelineStages > 1"
        )
    return (
        " ".join(parts)
        + " (heads must divide by tensor; pipeline stages hold ceil(layers / pipeline) layers,"
        " the first and last share the rest; the sequence by 2 x context; accelerators by"
        " tensor x context x pipeline; the global batch by data x micro-batch; expert must"
        f" divide the experts and data x context; data by dataReplicas{schedule})"
    )
