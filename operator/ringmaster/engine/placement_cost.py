"""What a placement costs a chosen LLM layout: its step time packed by topology against spread.

Admission chooses the hosts of a gang (:mod:`ringmaster.placement.topology`); this module says
what the choice is worth, in the engine's units, from plain numbers (no import of placement/).

A placement is described by three facts (:class:`PlacementShape`):

* ``blocks``: how many blocks (racks behind one switch: GKE's ``gce-topology-block``, AWS's
  network-node layer 1) the gang's hosts, and so its data-parallel ring, span;
* ``groups_cross_blocks``: whether a tensor / context / expert / pipeline group whose ranks
  span hosts has hosts in two blocks (the packed chooser keeps them in one; a spread placement
  does not);
* ``nvlink_intact``: whether every group that spans hosts of an NVLink domain larger than a host
  (GB200 NVL72: trays of 4 GPUs in a 72-GPU domain, ``nvidia.com/gpu.clique``) has all its hosts
  in one domain. The layout was planned with such hosts folded into one NCCL node
  (:func:`ringmaster.planning.layouts.network_hardware`, ``hosts_per_domain`` of them); a group
  split over two domains runs its collectives over the trays' NICs instead.

The model (every collective through the engine's own functions, :mod:`ringmaster.engine.collectives`
and :func:`ringmaster.engine.llm_training.evaluate_layouts`; nothing is re-derived here):

* inside a block a host's collectives run at its NIC rate (``hw.nic_bandwidth``, achieved);
* a collective whose group crosses blocks runs its inter-host part at the NIC rate divided by
  the spine's ``oversubscription``: the share of a block's uplinks one host gets when every host
  of the block sends across them at once. That is what a spread gang does: its ranks alternate
  between blocks, so every link of its rings and trees, and most of its all-to-all traffic,
  crosses the spine, and other jobs' traffic shares the uplinks. For a ring whose ranks run
  block by block on an idle spine it is pessimistic (only the few links between blocks cross);
  the packed placement's loss figure is therefore an upper bound where the packed gang still
  spans several blocks;
* no extra latency is charged for the spine's switch hops (a few microseconds per collective:
  below the resolution of a step);
* the step is re-composed from the layout's parts exactly as
  :func:`ringmaster.engine.llm_training.evaluate_layouts` composes it (compute, tensor /
  context / expert parallel collectives and pipeline sends per micro-batch, the 1F1B bubble on
  all of them, the exposed data-parallel reduction, the optimizer), each communication part
  taken from an evaluation on the hardware that part sees under the placement.

The spine's oversubscription: neither Google Cloud (GKE blocks, ``gce-topology-block``) nor AWS
(``topology.k8s.aws/network-node-layer-*``) publishes the oversubscription between blocks, and
NVIDIA's reference designs are non-blocking (1:1). So :data:`DEFAULT_SPINE_OVERSUBSCRIPTION` is
1.0, no penalty across blocks: an explicit parameter to set from your own fabric's figure. With
the default only the NVLink-domain term moves the step.

Not modelled: contention with other jobs beyond the oversubscription factor, the zone level
(a gang across zones is not admitted as one ring here), adaptive routing, TPU slices (their
topology is the slice's ICI, chosen whole) and the reduction server's reducers' own placement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ringmaster.engine import collectives as C
from ringmaster.engine import llm_training as L
from ringmaster.engine.llm_layout_names import RECOMPUTES
from ringmaster.engine.llm_layout_search import Layout, evaluate_layout
from ringmaster.engine.llm_memory import BYTES_ACTIVATION, stage_layers
from ringmaster.engine.transformer import Transformer

# Assumption (no public figure, see the module's docstring): no penalty between blocks unless
# the caller or the catalog says otherwise (a machine type's ``spineOversubscription``).
DEFAULT_SPINE_OVERSUBSCRIPTION = 1.0

# ``spec.placement.topology: Auto`` requires a level (waits for it) when spreading over it makes
# the step slower than this, in percent of the packed step. A policy choice, not a measurement:
# above the collective model's checked error on the NIC side (3 %, docs/engine.md: the packed and
# spread steps differ only in their network terms, so the compute's own error cancels), so a
# required level rests on a difference the engine resolves; and low enough that a gang losing a
# twentieth of every step for its whole run waits for a block instead. The one place it is set.
DEFAULT_LOSS_THRESHOLD_PERCENT = 5.0


def auto_requires(loss: float, threshold: float = DEFAULT_LOSS_THRESHOLD_PERCENT) -> bool:
    """Whether ``Auto`` requires a level whose spread placement loses ``loss`` percent."""
    return loss > threshold


@dataclass(frozen=True)
class PlacementShape:
    """Where a gang's hosts are, as the step time depends on it (module docstring)."""

    blocks: int = 1
    groups_cross_blocks: bool = False
    nvlink_intact: bool = True

    def __post_init__(self) -> None:
        if self.blocks < 1:
            raise ValueError(f"a placement spans at least one block, not {self.blocks}")


PACKED = PlacementShape()
"""Every host in one block, every group in one NVLink domain: the layout as planned."""


@dataclass(frozen=True)
class StepUnderPlacement:
    """One placement's step, part by part (seconds per step)."""

    step_seconds: float
    compute_seconds: float
    tensor_parallel_seconds: float
    context_parallel_seconds: float
    expert_parallel_seconds: float
    pipeline_send_seconds: float
    bubble_seconds: float
    exposed_data_parallel_seconds: float
    optimizer_seconds: float
    overlap_interference_seconds: float = 0.0  # what the hidden DP collectives take from compute


@dataclass(frozen=True)
class PlacementCost:
    """Packed against spread: the step of each and what spreading loses."""

    packed: StepUnderPlacement
    spread: StepUnderPlacement

    @property
    def packed_step_seconds(self) -> float:
        return self.packed.step_seconds

    @property
    def spread_step_seconds(self) -> float:
        return self.spread.step_seconds

    @property
    def loss_percent(self) -> float:
        """How much slower the spread step is, in percent of the packed one."""
        return loss_percent(self.packed.step_seconds, self.spread.step_seconds)


def loss_percent(packed_step: float, spread_step: float) -> float:
    """(spread - packed) / packed x 100; 0 for a packed step of 0."""
    if packed_step <= 0.0:
        return 0.0
    return (spread_step - packed_step) / packed_step * 100.0


def cross_block_bandwidth(
    nic_bandwidth: float, crosses: bool, oversubscription: float = DEFAULT_SPINE_OVERSUBSCRIPTION
) -> float:
    """A host's achieved inter-host rate for a collective: its NIC inside a block, the NIC over
    the spine's ``oversubscription`` when the collective's group crosses blocks."""
    if oversubscription < 1.0:
        raise ValueError(
            f"oversubscription is at least 1 (1: non-blocking), not {oversubscription}"
        )
    return nic_bandwidth / oversubscription if crosses else nic_bandwidth


def data_parallel_allreduce_seconds(
    nbytes: float,
    hosts: int,
    per_host: int,
    hw: L.LayoutHardware,
    blocks: int = 1,
    oversubscription: float = DEFAULT_SPINE_OVERSUBSCRIPTION,
) -> float:
    """One all-reduce of ``nbytes`` over ``hosts`` hosts of ``per_host`` ranks, as NCCL runs it
    (:func:`ringmaster.engine.collectives.nccl_collective`, with the pod's NCCL_* restrictions
    in ``hw``), the hosts spread over ``blocks`` blocks: the figure the step's data-parallel
    part rests on, for one group."""
    net = cross_block_bandwidth(hw.nic_bandwidth, blocks > 1, oversubscription)
    coll = C.nccl_collective(
        C.ALL_REDUCE, nbytes, float(hosts), float(per_host), hw.fabric(net), with_busbw=False
    )
    return float(coll.seconds)


def unfold_domain(hw: L.LayoutHardware, hosts_per_domain: int) -> L.LayoutHardware:
    """The hardware of the hosts themselves where ``network_hardware`` folded
    ``hosts_per_domain`` of them into one NCCL node (an NVL72 domain's trays): what a group
    split over two domains runs on."""
    k = max(int(hosts_per_domain), 1)
    if k == 1:
        return hw
    return replace(
        hw,
        hosts=hw.hosts * k,
        per_host=hw.per_host // k,
        nic_bandwidth=hw.nic_bandwidth / k,
        host_price=hw.host_price / k,
    )


def step_under_placement(
    model: Transformer,
    hw: L.LayoutHardware,
    layout: Layout,
    global_batch: int,
    placement: PlacementShape,
    *,
    oversubscription: float = DEFAULT_SPINE_OVERSUBSCRIPTION,
    hosts_per_domain: int = 1,
) -> StepUnderPlacement:
    """The step of ``layout`` (as chosen by the layout search on ``hw``) under ``placement``.
    ``hosts_per_domain``: the hosts ``network_hardware`` folded into each of ``hw``'s hosts
    (``collectives.hosts_per_domain``; 1 where the NVLink domain is the host)."""
    base = _evaluate(model, hw, layout, global_batch)
    on = hw if placement.nvlink_intact else unfold_domain(hw, hosts_per_domain)
    dp_hw = replace(
        on,
        nic_bandwidth=cross_block_bandwidth(
            on.nic_bandwidth, placement.blocks > 1, oversubscription
        ),
    )
    group_hw = replace(
        on,
        nic_bandwidth=cross_block_bandwidth(
            on.nic_bandwidth, placement.groups_cross_blocks, oversubscription
        ),
    )
    moved = on is not hw or oversubscription != 1.0
    dp = _evaluate(model, dp_hw, layout, global_batch) if moved else base
    groups = _evaluate(model, group_hw, layout, global_batch) if moved else base
    tensor = float(groups.tensor_parallel_seconds[0])
    if on.kind == "gpu" and layout.tensor > on.per_host:
        # A tensor group over trays of different NVLink domains: NCCL over the trays' NICs.
        gemm_mb = float(base.gemm_seconds[0] / base.micro_batches[0])
        tensor = _tensor_parallel_over_nics(model, group_hw, layout, gemm_mb)
    compute = float(base.compute_seconds[0])
    context = float(groups.context_parallel_seconds[0])
    expert = float(groups.expert_parallel_seconds[0])
    sends = float(groups.pipeline_send_seconds[0])
    m = float(base.micro_batches[0])
    slot_total = compute + tensor + context + expert + sends  # every micro-batch's slot
    bubble = slot_total / m * (layout.pipeline - 1.0) / layout.virtual_stages
    exposed = float(dp.exposed_data_parallel_seconds[0])
    interference = float(dp.overlap_interference_seconds[0])
    optimizer = float(base.optimizer_seconds[0])
    return StepUnderPlacement(
        step_seconds=slot_total + bubble + exposed + interference + optimizer,
        compute_seconds=compute,
        tensor_parallel_seconds=tensor,
        context_parallel_seconds=context,
        expert_parallel_seconds=expert,
        pipeline_send_seconds=sends,
        bubble_seconds=bubble,
        exposed_data_parallel_seconds=exposed,
        optimizer_seconds=optimizer,
        overlap_interference_seconds=interference,
    )


def placement_cost(
    model: Transformer,
    hw: L.LayoutHardware,
    layout: Layout,
    global_batch: int,
    packed: PlacementShape,
    spread: PlacementShape,
    *,
    oversubscription: float = DEFAULT_SPINE_OVERSUBSCRIPTION,
    hosts_per_domain: int = 1,
) -> PlacementCost:
    """The step packed and spread (:func:`step_under_placement` of each), and the loss."""

    def one(shape: PlacementShape) -> StepUnderPlacement:
        return step_under_placement(
            model,
            hw,
            layout,
            global_batch,
            shape,
            oversubscription=oversubscription,
            hosts_per_domain=hosts_per_domain,
        )

    return PlacementCost(packed=one(packed), spread=one(spread))


# --- the engine's own adapters, at one layout -------------------------------------------------


def _evaluate(
    model: Transformer, hw: L.LayoutHardware, layout: Layout, global_batch: int
) -> L.LayoutArrays:
    return evaluate_layout(model, hw, layout, global_batch)


def _tensor_parallel_over_nics(
    model: Transformer, hw: L.LayoutHardware, layout: Layout, gemm_mb: float
) -> float:
    """The layout's tensor-parallel time per step when its t ranks span t / g hosts that do not
    share NVLink: the same all-reduces (llm_training's count and bytes per layer and
    micro-batch), NCCL across the hosts, each host's NICs wholly the group's (its g GPUs are all
    in the one group), exposed beside ``gemm_mb`` (a micro-batch's GEMMs) as the step exposes
    them (llm_training.exposed_tensor_parallel: spec.parallelism.tensorOverlap)."""
    t, g = float(layout.tensor), float(hw.per_host)
    act_bytes = (
        BYTES_ACTIVATION
        * model.sequence_length
        * layout.micro_batch
        * model.hidden
        / layout.context
    )
    collectives = L.tensor_parallel_collectives_per_layer(
        RECOMPUTES.index(layout.recompute), hw.framework.recompute_stops_early
    )
    one = C.nccl_collective(
        C.ALL_REDUCE, act_bytes, t / g, g, hw.fabric(hw.nic_bandwidth), with_busbw=False
    ).seconds
    layers = stage_layers(model, layout.pipeline).middle
    # What the run overlaps with its GEMMs stays overlapped over the NICs (the step's policy).
    per_micro_batch = L.exposed_tensor_parallel(layers * collectives * one, gemm_mb, t, hw)
    return float(per_micro_batch) * layout.micro_batches
