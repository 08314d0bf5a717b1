"""What a gang's placement in its pool costs its step, and what ``spec.placement.topology: Auto``
decides from it (issue 43, docs/topology.md).

For a gang of several GPU hosts, the step of the plan's own choice (the layout the search picked,
or the data-parallel job's chosen strategy) under each placement admission can give it:

* ``Packed``: every host in one block, every tensor-parallel group that spans hosts inside one
  NVLink clique: the plan's own step;
* ``PackedInBlocks``: several blocks (the free hosts force them), each group of consecutive
  ranks still inside one: the data-parallel reduction crosses the spine, the groups do not;
* ``Spread``: dealt over the blocks one host at a time, as a topology-blind scheduler deals them
  (:func:`ringmaster.placement.topology.spread_hosts`): every group crosses;
* where the hosts' NVLink domain spans several of them (GB200 NVL72) and a tensor-parallel group
  spans trays: the same three with the groups split over NVLink cliques (``TensorOverNICs``,
  ...): their all-reduces over the trays' NICs.

Every step comes from the engine: :func:`ringmaster.engine.placement_cost.step_under_placement`
for a layout; for a data-parallel job, :func:`ringmaster.engine.training.predict_training` again
with the hosts' NIC rate over the spine's oversubscription (a spread ring's every link crosses;
a reduction server's traffic is charged the same, its reducers' own blocks not being modelled).
The model charges any number of blocks above one alike (engine.placement_cost), so two stand for
"several".

Auto requires the block level when ``Spread`` loses more than
:data:`~ringmaster.engine.placement_cost.DEFAULT_LOSS_THRESHOLD_PERCENT`, and the NVLink clique
level when ``TensorOverNICs`` does; it prefers otherwise. Computed once per plan, which the
operator caches: the admission cycle only reads the verdict.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from ringmaster.api.trainingjob import PlacementPlan, PlacementStep
from ringmaster.engine import collectives as C
from ringmaster.engine.hardware import Catalog, MachineType
from ringmaster.engine.placement_cost import (
    DEFAULT_LOSS_THRESHOLD_PERCENT,
    DEFAULT_SPINE_OVERSUBSCRIPTION,
    PlacementShape,
    auto_requires,
    loss_percent,
    step_under_placement,
)
from ringmaster.engine.training import (
    REDUCTION_SERVER,
    TrainingInputs,
    TrainingPrediction,
    predict_training,
)
from ringmaster.planning.layouts import LayoutPlan

PACKED, PACKED_IN_BLOCKS, SPREAD = "Packed", "PackedInBlocks", "Spread"
TENSOR_OVER_NICS = "TensorOverNICs"
# The same placements with each tensor-parallel group split over NVLink cliques.
OVER_NICS = {
    PACKED: TENSOR_OVER_NICS,
    PACKED_IN_BLOCKS: f"{PACKED_IN_BLOCKS}{TENSOR_OVER_NICS}",
    SPREAD: f"{SPREAD}{TENSOR_OVER_NICS}",
}
# What each placement is, as the engine describes one (blocks=2: "several", see the docstring).
SHAPES = {
    PACKED: PlacementShape(),
    PACKED_IN_BLOCKS: PlacementShape(blocks=2),
    SPREAD: PlacementShape(blocks=2, groups_cross_blocks=True),
}
# spec.placement.topology's words for a level's verdict (the API's TopologyRequirement).
REQUIRED, PREFERRED = "Required", "Preferred"


@dataclass(frozen=True)
class PlacementRow:
    placement: str
    step_seconds: float
    loss_percent: float  # against Packed


@dataclass(frozen=True)
class PlacementTable:
    """The step under each placement, and what Auto decides from it."""

    rows: tuple[PlacementRow, ...]
    spine_oversubscription: float
    tensor_group_hosts: int = 1
    """Hosts per tensor-parallel group; above 1 it spans trays of an NVLink domain."""
    threshold_percent: float = DEFAULT_LOSS_THRESHOLD_PERCENT

    def row(self, name: str) -> PlacementRow | None:
        return next((r for r in self.rows if r.placement == name), None)

    @property
    def block(self) -> str:
        """Auto's choice for the block level."""
        spread = self.row(SPREAD)
        lost = spread.loss_percent if spread else 0.0
        return REQUIRED if auto_requires(lost, self.threshold_percent) else PREFERRED

    @property
    def nvlink_clique(self) -> str | None:
        """Auto's choice for each tensor-parallel group's NVLink clique; None: none spans."""
        split = self.row(TENSOR_OVER_NICS)
        if split is None:
            return None
        return REQUIRED if auto_requires(split.loss_percent, self.threshold_percent) else PREFERRED

    def to_status(self) -> PlacementPlan:
        return PlacementPlan(
            steps=[
                PlacementStep(
                    placement=r.placement,
                    step_seconds=_sig(r.step_seconds),
                    loss_percent=_sig(r.loss_percent, 3),
                )
                for r in self.rows
            ],
            spine_oversubscription=self.spine_oversubscription,
            loss_threshold_percent=self.threshold_percent,
            block=self.block,
            nvlink_clique=self.nvlink_clique,
            tensor_group_hosts=self.tensor_group_hosts if self.tensor_group_hosts > 1 else None,
        )

    def to_json(self) -> dict[str, Any]:
        """``ringmaster plan -o json``'s ``placement`` key (status.plan.placement's shape)."""
        return self.to_status().to_k8s()


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def placement_of(shape: PlacementShape, available: Collection[str]) -> str:
    """The name of the placement ``shape`` is (an admitted gang's hosts), among ``available``
    (a plan's rows): a data-parallel job has no groups, so any blocks above one are Spread."""
    if shape.blocks <= 1:
        name = PACKED
    elif shape.groups_cross_blocks or PACKED_IN_BLOCKS not in available:
        name = SPREAD
    else:
        name = PACKED_IN_BLOCKS
    split = OVER_NICS[name]
    return split if not shape.nvlink_intact and split in available else name


def placement_table(
    inputs: TrainingInputs,
    prediction: TrainingPrediction,
    layout: LayoutPlan | None,
    catalog: Catalog,
) -> PlacementTable | None:
    """The step under each placement for a gang of several GPU hosts; None for one host, a TPU
    slice (its ICI topology is chosen whole) or hardware the catalog does not know."""
    if inputs.workers < 2 or inputs.slices > 1:
        return None
    machine = catalog.machines.get(prediction.machine_type)
    accelerator = catalog.accelerators.get(prediction.accelerator)
    if machine is None or accelerator is None or accelerator.kind != "gpu":
        return None
    over = machine.spine_oversubscription or DEFAULT_SPINE_OVERSUBSCRIPTION
    if layout is not None:
        return _layout_table(inputs, layout, machine, over)
    return _data_parallel_table(inputs, prediction, catalog, over)


def _layout_table(
    inputs: TrainingInputs, layout: LayoutPlan, machine: MachineType, over: float
) -> PlacementTable | None:
    model, hw, chosen = layout.model, layout.hardware, layout.chosen
    if model is None:
        return None
    # The hosts network_hardware folded into one NCCL node (an NVL72 domain's trays).
    k = 1
    if machine.nvlink_domain > inputs.per_worker:
        k = int(C.hosts_per_domain(machine, inputs.workers))
    group_hosts = -(-chosen.tensor // inputs.per_worker)
    names = [PACKED, PACKED_IN_BLOCKS, SPREAD]
    if k > 1 and group_hosts > 1:
        names += [OVER_NICS[n] for n in (PACKED, PACKED_IN_BLOCKS, SPREAD)]

    def step(name: str) -> float:
        base = next(n for n, split in OVER_NICS.items() if name in (n, split))
        shape = replace(SHAPES[base], nvlink_intact=name == base)
        under = step_under_placement(
            model,
            hw,
            chosen,
            layout.global_batch,
            shape,
            oversubscription=over,
            hosts_per_domain=k,
        )
        return under.step_seconds

    steps = {name: step(name) for name in names}
    return _table(steps, over, group_hosts if k > 1 else 1)


def _data_parallel_table(
    inputs: TrainingInputs, prediction: TrainingPrediction, catalog: Catalog, over: float
) -> PlacementTable:
    chosen = prediction.chosen_strategy
    packed = prediction.strategies[chosen].step_seconds
    spread = packed
    if over != 1.0:
        machine = catalog.machine(prediction.machine_type)
        slow = replace(machine, nic_bandwidth=machine.nic_bandwidth / over)
        across = replace(catalog, machines={**catalog.machines, machine.name: slow})
        rs = prediction.strategies.get(REDUCTION_SERVER)
        again = replace(
            inputs,
            machine_type=machine.name,
            reducers=rs.reducers if rs is not None else inputs.reducers,
        )
        spread = predict_training(again, across).strategies[chosen].step_seconds
    return _table({PACKED: packed, SPREAD: spread}, over, 1)


def _table(steps: dict[str, float], over: float, group_hosts: int) -> PlacementTable:
    packed = steps[PACKED]
    rows = tuple(
        PlacementRow(name, seconds, loss_percent(packed, seconds))
        for name, seconds in steps.items()
    )
    return PlacementTable(rows, over, group_hosts)


# --- `ringmaster plan`'s table ------------------------------------------------------------------

_WORDS = {
    PACKED: "packed into one block",
    PACKED_IN_BLOCKS: "packed over several blocks",
    SPREAD: "spread over blocks",
    TENSOR_OVER_NICS: "TP split over NVLink cliques (over NICs)",
    OVER_NICS[PACKED_IN_BLOCKS]: "several blocks, TP over NICs",
    OVER_NICS[SPREAD]: "spread over blocks, TP over NICs",
}


# The rows `ringmaster plan` prints (status.plan.placement and -o json have them all).
_SHOWN = (PACKED, SPREAD, TENSOR_OVER_NICS)


def render_placement(table: PlacementTable) -> str:
    """The placements as a table, and what Auto picks (``ringmaster plan``)."""
    from ringmaster.planning.render import table as text_table

    shown = [r for r in table.rows if r.placement in _SHOWN]
    several, spread = table.row(PACKED_IN_BLOCKS), table.row(SPREAD)
    # Between packed and spread: shown only where it is neither.
    if (
        several is not None
        and spread is not None
        and several.step_seconds not in (shown[0].step_seconds, spread.step_seconds)
    ):
        shown.insert(1, several)
    words = dict(_WORDS)
    if table.row(TENSOR_OVER_NICS) is not None:
        words[PACKED] = "packed: one block, TP in one NVLink clique"
    rows = [
        (
            words.get(r.placement, r.placement),
            r.placement,
            f"{r.step_seconds:.4g}",
            f"{r.loss_percent:+.1f}%",
        )
        for r in shown
    ]
    lines = [
        f"placement in the pool (spine oversubscription {table.spine_oversubscription:g}; "
        f"Auto requires a level that loses more than {table.threshold_percent:g} %):",
        text_table(("placement", "name", "step s", "loss"), rows, right={2, 3}),
    ]
    spread = table.row(SPREAD)
    lost = spread.loss_percent if spread else 0.0
    picks = [
        f"{'require' if table.block == REQUIRED else 'prefer'} one block "
        f"(spread loses {lost:.1f} %)"
    ]
    split = table.row(TENSOR_OVER_NICS)
    if split is not None:
        picks.append(
            f"{'require' if table.nvlink_clique == REQUIRED else 'prefer'} each TP group of "
            f"{table.tensor_group_hosts} hosts in one NVLink clique "
            f"(split, it loses {split.loss_percent:.1f} %)"
        )
    lines.append("Auto: " + "; ".join(picks))
    return "\n".join(lines)
