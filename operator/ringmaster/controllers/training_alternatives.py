"""A waiting TrainingJob that names accelerator alternatives (``spec.accelerator.alternatives``,
docs/topology.md "The accelerator chosen per job").

Pure, as training_lifecycle.py (whose ``_waiting`` calls these). Each accelerator the job names
is planned on its first candidate pool (planning/alternatives.py puts the job there: workers,
layout, batch split); they are ranked by ``spec.placement.objective``; the gang joins the
admission queue with one option per pool of each accelerator, best first, and the cycle admits
the first that can start now (admission/alternatives.py). ``status.plan`` is the best
accelerator's plan while the job waits, and the admitted one's once it runs (training_step's
``_Step.spec`` follows ``status.admission.accelerator``). ``status.admission.accelerators``
records every accelerator with its numbers, the one chosen, and why not the others.

Through Kueue the job is queued on its primary accelerator only: Kueue's own fungibility (one
ResourceFlavor per alternative) is not used yet, and the condition
``AcceleratorAlternatives=False NotOfferedThroughKueue`` says so.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ringmaster.admission.alternatives import Considered
from ringmaster.admission.cycle import GangOption
from ringmaster.admission.pools import candidate_pools
from ringmaster.admission.snapshot import PoolSummary
from ringmaster.api.alternatives import AcceleratorChoice
from ringmaster.controllers.training_admission import (
    _option,
    _plan,
    _reducer_problem,
    _reducer_settings,
    _uses_reducers,
)
from ringmaster.controllers.training_step import (
    DOES_NOT_FIT,
    PLAN_FAILED,
    PLANNED,
    SOON_SECONDS,
    _Step,
    _wait,
)
from ringmaster.placement.pools import NoPool
from ringmaster.planning.alternatives import (
    Planned,
    Ranking,
    candidates,
    choice,
    objective_of,
    rank,
    spec_on,
    steps_left,
)

ALTERNATIVES_CONDITION = "AcceleratorAlternatives"
NOT_OFFERED_THROUGH_KUEUE = "NotOfferedThroughKueue"


@dataclass(frozen=True)
class AlternativeOptions:
    """The gang's options, best first, and the ranking they come from."""

    options: tuple[GangOption, ...]
    ranking: Ranking


def alternative_options(step: _Step, attempt: int) -> AlternativeOptions | None:
    """Plan the job on each of its accelerators and rank them; None when none can take it (the
    job then waits with the primary's reason and every accelerator's words)."""
    spec, status = step.job.spec, step.status
    settings, reducer_pool_name, reducers = _reducer_settings(step)
    rows: list[Planned] = []
    pools_of: dict[str, list[PoolSummary]] = {}
    for candidate in candidates(spec):
        on = candidate.spec
        if on is None:
            rows.append(Planned(candidate, None, candidate.problem, PLAN_FAILED))
            continue
        acc = on.accelerator
        pools = candidate_pools(
            step.world.pools,
            acc.type,
            acc.per_worker,
            on.machine_type,
            acc.topology,
            current=status.pool,
        )
        if isinstance(pools, NoPool):
            rows.append(Planned(candidate, None, pools.message, pools.reason))
            continue
        try:
            plan = step.planner(on, pools[0].identity.instance_type, reducers)
        except ValueError as error:
            rows.append(Planned(candidate, None, str(error), PLAN_FAILED))
            continue
        if plan.fits is False:
            why = plan.reason or "the model does not fit in memory"
            rows.append(Planned(candidate, None, why, DOES_NOT_FIT))
            continue
        rows.append(Planned(candidate, plan))
        pools_of[candidate.accelerator] = pools
    ranking = rank(rows, objective_of(spec), steps_left(spec, status.progress))
    planned = [r for r in ranking.rows if r.accelerator in pools_of]
    if not planned:
        first = rows[0]  # the primary's reason: what the job waits for before anything else
        message = "no accelerator it may run on can take it: " + "; ".join(
            f"{r.accelerator} ({r.candidate.field}): {r.problem}" for r in rows
        )
        if first.reason == PLAN_FAILED:
            status.plan = None
            step.conditions.set(PLANNED, "False", PLAN_FAILED, message[:4096])
        _wait(step, first.reason, message)
        return None
    best = planned[0]
    # status.plan is the best accelerator's while the job waits: what it runs if it starts there.
    _plan(step, pools_of[best.accelerator][0], reducers, best.candidate.spec)
    uses_reducers = _uses_reducers(status.plan)
    status.reduction_server_pool = reducer_pool_name if uses_reducers else None
    if uses_reducers and settings.pool_name is not None:
        problem = _reducer_problem(settings.pool_name, reducers, step.job.namespace)
        if problem is not None:
            _wait(step, *problem)
            step.decision.requeue_after = SOON_SECONDS
            return None
    options = tuple(
        _option(step, pool, attempt, row.candidate.spec)
        for row in planned
        for pool in pools_of[row.accelerator]
    )
    return AlternativeOptions(options, ranking)


def waiting_message(message: str, ranking: Ranking) -> str:
    """The cycle's waiting message, with the ranking's numbers."""
    return f"{message}; {ranking.words()}"


def admitted_choices(
    ranking: Ranking, chosen: GangOption, considered: Considered, now: dt.datetime
) -> tuple[list[AcceleratorChoice], str]:
    """``status.admission.accelerators`` for the option admitted, and the words the Admitted
    condition adds: which accelerator, by what, and why not the better-ranked ones."""
    blocked: dict[str, list[str]] = {}
    with_room: set[str] = set()
    for option, why in considered:
        if why:  # the cycle's words, which name the pool
            blocked.setdefault(option.accelerator, []).append(why)
        else:
            with_room.add(option.accelerator)
    taken = next(r for r in ranking.rows if r.accelerator == chosen.accelerator)
    better = []
    out = []
    for row in ranking.rows:
        entry = choice(ranking, row)
        run = row.run_seconds(ranking.steps)
        finish = now + dt.timedelta(seconds=run) if run is not None else None
        if row is taken:
            entry.chosen, entry.predicted_finish = True, finish
        elif row.plan is None:
            entry.why = f"not planned: {row.problem}"
        elif row.accelerator in blocked and row.accelerator not in with_room:
            if ranking.rows.index(row) < ranking.rows.index(taken):
                better.append(row.accelerator)
                entry.why = "cannot start now: " + " | ".join(blocked[row.accelerator])
            else:
                entry.why = (
                    f"{ranking.worse_than(row, taken)}; cannot start now either: "
                    + " | ".join(blocked[row.accelerator])
                )
        else:
            entry.predicted_finish = finish
            entry.why = f"{ranking.worse_than(row, taken)} (it has room too)"
        if entry.why is not None:
            entry.why = entry.why[:1024]
        out.append(entry)
    words = f"{taken.accelerator} chosen by {ranking.basis()}"
    if better:
        words += f": {', '.join(better)} ranked better but cannot start now"
    else:
        words += ": ranked first"
    for entry in out:
        if entry.chosen:
            entry.why = words[:1024]
    return out, words


def flag_through_kueue(step: _Step) -> None:
    """A job Kueue admits is queued on its primary accelerator only: say so (the condition,
    and a Warning Event when it is first set)."""
    if not step.job.spec.accelerator.alternatives:
        return
    message = (
        "spec.accelerator.alternatives are not offered through Kueue yet: the job is queued "
        f"in Kueue on its primary accelerator, {step.job.spec.accelerator.type}, only (one "
        "ResourceFlavor per alternative, Kueue's own fungibility, is not built)"
    )
    if step.conditions.transition(
        ALTERNATIVES_CONDITION, "False", NOT_OFFERED_THROUGH_KUEUE, message
    ):
        step.event("Warning", NOT_OFFERED_THROUGH_KUEUE, message)


def adopted_accelerator(step: _Step, pool: str | None) -> tuple[str | None, int]:
    """The accelerator of the alternative whose pool a gang's pods were found on (a gang adopted
    without an admission on record; None for the primary's, or none of the job's), and the
    gang's workers there."""
    spec = step.job.spec
    summary = step.world.pools.get(pool) if pool is not None else None
    found = summary.identity.accelerator if summary is not None else None
    if not any(a.type == found for a in spec.accelerator.alternatives or []):
        return None, step.spec.workers
    try:
        return found, spec_on(spec, found).workers
    except ValueError:
        return None, step.spec.workers
