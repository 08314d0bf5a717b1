"""The accelerator chosen per job (issue 43, item 5): the job as it would run on each accelerator
it names (``spec.accelerator`` and ``spec.accelerator.alternatives``), and their ranking by
``spec.placement.objective``. Pure: no cluster, no clock.

Each alternative is the same job on other hardware, planned again by the engine: its workers
(stated, else as many accelerators in all as the primary's, in whole hosts), its layout (the
degrees searched again, the job's sharding and recompute kept) and its batch split, under the
primary's global batch (the optimisation the job runs is the same on any accelerator; only how
it is split changes). A job without an architecture is data-parallel on every accelerator: the
global batch must split evenly over the alternative's accelerators.

Ranking, best first, every candidate starting now (the admission cycle admits only a gang that
starts now, so their expected starts are equal):

- ``EarliestFinish``: the run, steps left x the predicted step there;
- ``LowestCost``: the run's hours x the plan's cost per hour (the catalog's price of the
  workers' machines, and the reducers');
- without a step count, the step time (or the cost of one step) ranks them, and the words say so;
- ties, and accelerators the engine could not plan, keep the order the spec names them in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ringmaster.api import TrainingJobSpec, TrainingPlan, TrainingProgress, topology_chips
from ringmaster.api.alternatives import AcceleratorAlternative, AcceleratorChoice

EARLIEST_FINISH = "EarliestFinish"
LOWEST_COST = "LowestCost"
PRIMARY_FIELD = "spec.accelerator"
SECONDS_PER_HOUR = 3600.0


def alternatives_field(index: int) -> str:
    return f"spec.accelerator.alternatives[{index}]"


@dataclass(frozen=True)
class Candidate:
    """The job on one accelerator: the spec it runs with there, or why it cannot be put there."""

    field: str
    """Where the spec names it: ``spec.accelerator`` or ``spec.accelerator.alternatives[i]``."""
    accelerator: str
    spec: TrainingJobSpec | None
    problem: str = ""


def objective_of(spec: TrainingJobSpec) -> str:
    return spec.placement.objective if spec.placement is not None else EARLIEST_FINISH


def global_batch(spec: TrainingJobSpec) -> int:
    """The job's global batch, as the layout planner reads it (planning.layouts.layout_request):
    ``parallelism.globalBatchSize``, else batchSizePerAccelerator (1 if absent) x accelerators."""
    par = spec.parallelism
    if par is not None and par.global_batch_size is not None:
        return int(par.global_batch_size)
    per = spec.model.batch_size_per_accelerator or 1
    return per * spec.workers * spec.accelerator.per_worker


def _shape(spec: TrainingJobSpec, alt: AcceleratorAlternative) -> tuple[int, int]:
    """(workers, perWorker) of the job on ``alt``."""
    per_worker = alt.per_worker or spec.accelerator.per_worker
    if alt.topology is not None:
        chips = topology_chips(alt.topology)
        if chips % per_worker:
            raise ValueError(
                f"topology {alt.topology} has {chips} chips, not a multiple of perWorker "
                f"{per_worker}"
            )
        return chips // per_worker, per_worker
    if alt.workers is not None:
        return alt.workers, per_worker
    accelerators = spec.workers * spec.accelerator.per_worker
    return math.ceil(accelerators / per_worker), per_worker


def spec_on(spec: TrainingJobSpec, accelerator: str | None) -> TrainingJobSpec:
    """The spec the job runs with on ``accelerator`` (None or the primary's type: the spec
    itself). Raises ValueError, naming the alternative, when the job cannot be put there."""
    if accelerator is None or accelerator == spec.accelerator.type:
        return spec
    found = [
        (i, a) for i, a in enumerate(spec.accelerator.alternatives or []) if a.type == accelerator
    ]
    if not found:
        raise ValueError(f"{PRIMARY_FIELD}: {accelerator} is not one of the job's accelerators")
    index, alt = found[0]
    where = alternatives_field(index)
    try:
        workers, per_worker = _shape(spec, alt)
        data = _data_on(spec, alt, workers, per_worker)
        return TrainingJobSpec.model_validate_json(json.dumps(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first.get("loc", ()))
        raise ValueError(f"{where}: the job does not fit it: {path}: {first['msg']}") from None
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _data_on(
    spec: TrainingJobSpec, alt: AcceleratorAlternative, workers: int, per_worker: int
) -> dict[str, Any]:
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    batch = global_batch(spec)
    data["workers"] = workers
    accelerator: dict[str, Any] = {"type": alt.type, "perWorker": per_worker}
    if alt.topology is not None:
        accelerator["topology"] = alt.topology
    data["accelerator"] = accelerator
    data.pop("machineType", None)
    if alt.machine_type is not None:
        data["machineType"] = alt.machine_type
    model = data["model"]
    if spec.model.architecture is not None:
        given = data.get("parallelism")
        # The degrees are searched again on the alternative (its hosts' shape differs); what the
        # job's launcher does whatever the hardware (sharding, recompute) is kept. A job without
        # parallelism stays plain data-parallel, its batch split searched (micro-batches).
        kept = (
            {k: given[k] for k in ("sharding", "activationRecompute") if k in given}
            if given is not None
            else {"tensor": 1, "pipeline": 1, "context": 1, "expert": 1, "sharding": "None"}
        )
        data["parallelism"] = {**kept, "globalBatchSize": batch}
        model.pop("batchSizePerAccelerator", None)
        return data
    accelerators = workers * per_worker
    if batch % accelerators:
        raise ValueError(
            f"the global batch of {batch} samples (batchSizePerAccelerator x the primary's "
            f"accelerators) does not split evenly over {accelerators} x {alt.type}"
        )
    model["batchSizePerAccelerator"] = batch // accelerators
    return data


def candidates(spec: TrainingJobSpec) -> list[Candidate]:
    """The job on its primary accelerator, then on each alternative, in the spec's order."""
    out = [Candidate(PRIMARY_FIELD, spec.accelerator.type, spec)]
    for index, alt in enumerate(spec.accelerator.alternatives or []):
        try:
            out.append(Candidate(alternatives_field(index), alt.type, spec_on(spec, alt.type)))
        except ValueError as exc:
            out.append(Candidate(alternatives_field(index), alt.type, None, str(exc)))
    return out


# Which part of an alternative a hardware problem is about (planning.catalog.hardware_problem's
# reasons).
_PROBLEM_FIELD = {
    "UnknownAccelerator": "type",
    "UnsupportedHostShape": "perWorker",
    "UnsupportedTopology": "topology",
}

HardwareCheck = Callable[[str, int, str | None], tuple[str, str] | None]


def alternatives_hardware_problem(
    spec: TrainingJobSpec, check: HardwareCheck
) -> tuple[str, str] | None:
    """The first alternative the catalog cannot place (reason, message naming the field), or
    None. ``check`` is planning.catalog.hardware_problem on the operator's catalog."""
    for candidate in candidates(spec)[1:]:
        if candidate.spec is None:
            continue  # its row says why (planning, not the catalog)
        acc = candidate.spec.accelerator
        problem = check(acc.type, acc.per_worker, acc.topology)
        if problem is not None:
            reason, message = problem
            field = f"{candidate.field}.{_PROBLEM_FIELD.get(reason, 'type')}"
            return reason, f"{field}: {message}"
    return None


def steps_left(spec: TrainingJobSpec, progress: TrainingProgress | None) -> int | None:
    """The steps the job still has to run: a report's totalSteps (else spec.steps) less the
    step reported; None without a step count."""
    total = (progress.total_steps if progress is not None else None) or spec.steps
    if not total:
        return None
    done = (progress.step if progress is not None else None) or 0
    return max(int(total) - int(done), 0)


# ---------------------------------------------------------------- ranking


@dataclass(frozen=True)
class Planned:
    """One candidate as planned: the plan there, or why there is none (with the condition
    reason a job that has nothing better waits with)."""

    candidate: Candidate
    plan: TrainingPlan | None
    problem: str = ""
    reason: str = ""

    @property
    def accelerator(self) -> str:
        return self.candidate.accelerator

    @property
    def step_seconds(self) -> float | None:
        if self.plan is None:
            return None
        return self.plan.calibrated_step_seconds or self.plan.step_seconds

    def run_seconds(self, steps: int | None) -> float | None:
        step = self.step_seconds
        return step * steps if step is not None and steps is not None else None

    def cost_usd(self, steps: int | None) -> float | None:
        run = self.run_seconds(steps)
        price = self.plan.cost_per_hour_usd if self.plan is not None else None
        return run / SECONDS_PER_HOUR * price if run is not None and price is not None else None

    def value(self, objective: str, steps: int | None) -> float | None:
        """What the objective minimises (per step without a step count); None: unranked."""
        step = self.step_seconds
        if step is None:
            return None
        run = step * (steps if steps is not None else 1)
        if objective != LOWEST_COST:
            return run
        price = self.plan.cost_per_hour_usd if self.plan is not None else None
        return run / SECONDS_PER_HOUR * price if price is not None else None


@dataclass(frozen=True)
class Ranking:
    """The candidates best first by the objective, with what ranked them."""

    rows: tuple[Planned, ...]
    objective: str
    steps: int | None

    @property
    def planned(self) -> tuple[Planned, ...]:
        return tuple(r for r in self.rows if self.rank_value(r) is not None)

    def rank_value(self, row: Planned) -> float | None:
        return row.value(self.objective, self.steps)

    def basis(self) -> str:
        """What ranked them, in words."""
        if self.steps is None:
            what = "step time" if self.objective != LOWEST_COST else "cost of one step"
            return f"{self.objective}, by {what} (no step count: spec.steps or a report's)"
        return f"{self.objective} over {self.steps} steps"

    def figures(self, row: Planned) -> str:
        """A candidate's numbers: shape, layout, step, run and cost."""
        spec = row.candidate.spec
        parts = []
        if spec is not None:
            parts.append(f"{spec.workers} x {spec.accelerator.per_worker}")
        if row.plan is not None and row.plan.layout:
            parts.append(row.plan.layout)
        if row.step_seconds is not None:
            parts.append(f"{row.step_seconds:.3g} s/step")
        run = row.run_seconds(self.steps)
        if run is not None:
            parts.append(f"{run / SECONDS_PER_HOUR:.4g} h")
        cost = row.cost_usd(self.steps)
        if cost is not None:
            parts.append(f"{cost:.4g} USD")
        return ", ".join(parts)

    def words(self) -> str:
        """The ranking in one line, for a waiting job's message."""
        ranked = "; ".join(f"{r.accelerator} ({self.figures(r)})" for r in self.planned)
        unplanned = "; ".join(
            f"{r.accelerator} not planned ({r.problem})" for r in self.rows if r not in self.planned
        )
        return f"ranked by {self.basis()}: {ranked or 'none'}" + (
            f"; {unplanned}" if unplanned else ""
        )

    def worse_than(self, row: Planned, chosen: Planned) -> str:
        """Why ``row`` ranks below ``chosen``, with both numbers."""
        mine, theirs = self.rank_value(row), self.rank_value(chosen)
        if mine is None or theirs is None:
            return f"not ranked: {row.problem or 'no price or step'}"
        if self.objective == LOWEST_COST:
            unit = "USD" if self.steps is not None else "USD per step"
            return f"costs more: {mine:.4g} {unit} against {theirs:.4g}"
        if self.steps is None:
            return f"slower: {mine:.3g} s/step against {theirs:.3g}"
        hours = SECONDS_PER_HOUR
        return f"finishes later: {mine / hours:.4g} h against {theirs / hours:.4g} h"


def rank(rows: Sequence[Planned], objective: str, steps: int | None) -> Ranking:
    """Best first by the objective; ties and unranked candidates in the spec's order."""
    order = {id(r): i for i, r in enumerate(rows)}

    def key(row: Planned) -> tuple[bool, float, int]:
        value = row.value(objective, steps)
        return (value is None, value if value is not None else 0.0, order[id(row)])

    return Ranking(tuple(sorted(rows, key=key)), objective, steps)


def choice(ranking: Ranking, row: Planned) -> AcceleratorChoice:
    """A candidate's row of ``status.admission.accelerators`` (without chosen / why)."""
    spec = row.candidate.spec
    run = row.run_seconds(ranking.steps)
    cost = row.cost_usd(ranking.steps)
    plan = row.plan
    return AcceleratorChoice(
        accelerator=row.accelerator,
        per_worker=spec.accelerator.per_worker if spec is not None else None,
        workers=spec.workers if spec is not None else None,
        machine_type=plan.machine_type if plan is not None else None,
        layout=plan.layout if plan is not None else None,
        step_seconds=_sig(row.step_seconds),
        run_hours=_sig(run / SECONDS_PER_HOUR if run is not None else None),
        cost_per_hour_usd=_sig(plan.cost_per_hour_usd if plan is not None else None),
        cost_usd=_sig(cost),
    )


def _sig(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


# ---------------------------------------------------------------- without a cluster (plan)


def plan_candidates(
    spec: TrainingJobSpec, planner: Callable[[TrainingJobSpec], TrainingPlan]
) -> Ranking:
    """Every candidate planned by ``planner`` (which raises ValueError where the engine cannot
    plan it), ranked: what ``ringmaster plan`` shows, no pool or room considered."""
    rows = []
    for candidate in candidates(spec):
        if candidate.spec is None:
            rows.append(Planned(candidate, None, candidate.problem))
            continue
        try:
            plan = planner(candidate.spec)
        except ValueError as exc:
            rows.append(Planned(candidate, None, str(exc)))
            continue
        if plan.fits is False:
            rows.append(Planned(candidate, None, plan.reason or "the model does not fit"))
            continue
        rows.append(Planned(candidate, plan))
    return rank(rows, objective_of(spec), steps_left(spec, None))


def ranked_choices(ranking: Ranking) -> list[AcceleratorChoice]:
    """The rows of a ranking without a cluster: the best, and why each other ranks below it."""
    planned = ranking.planned
    best = planned[0] if planned else None
    out = []
    for row in ranking.rows:
        entry = choice(ranking, row)
        if row is best:
            entry.chosen = True
            entry.why = f"best by {ranking.basis()}"
        elif best is not None and row in planned:
            entry.why = ranking.worse_than(row, best)
        else:
            entry.why = f"not planned: {row.problem}"[:1024]
        out.append(entry)
    return out


def render_choices(ranking: Ranking) -> str:
    """The table ``ringmaster plan`` prints for a job with alternatives."""
    header = (
        f"accelerators (spec.placement.objective: {ranking.basis()}; the best that can start "
        "is admitted):"
    )
    lines = [
        header,
        f"{'accelerator':<22}{'workers':>9}  {'layout':<22}{'step s':>9}{'run h':>9}"
        f"{'cost USD':>11}  why",
    ]
    for entry in ranked_choices(ranking):
        shape = f"{entry.workers} x {entry.per_worker}" if entry.workers else "-"
        lines.append(
            f"{entry.accelerator:<22}{shape:>9}  {entry.layout or '-':<22}"
            f"{_cell(entry.step_seconds, '.3f')}{_cell(entry.run_hours, '.4g')}"
            f"{_cell(entry.cost_usd, '.4g', 11)}  {entry.why or ''}"
        )
    return "\n".join(lines)


def _cell(value: float | None, fmt: str, width: int = 9) -> str:
    return f"{'-' if value is None else format(value, fmt):>{width}}"
