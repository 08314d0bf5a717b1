"""A TrainingJob gang's plan, its options for the admission cycle and its admission recorded.

Pure, as training_lifecycle.py (the phases that call these): the plan for a pool's machine type
(status.plan, Planned, StrategyChosen), the job's reducers as it sees them, the gang on one pool
or over a multislice's pools (:class:`GangOption`), and an admission written to status with the
Events that announce it (:func:`admission_announcements`, posted again after a restart).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ringmaster.admission.cycle import GangOption, ReducerNeed, promise_for
from ringmaster.admission.snapshot import PoolSummary, shape
from ringmaster.api import TrainingJobSpec, TrainingJobStatus, TrainingPlan, find_condition
from ringmaster.api.alternatives import AcceleratorChoice
from ringmaster.api.trainingjob import Admission, ReductionServerSettings
from ringmaster.controllers.reporting import Event, plan_warnings, report_plausibility
from ringmaster.controllers.training_step import (
    ADMITTED,
    PLAN_FAILED,
    PLANNED,
    REDUCTION_SERVER,
    SCHEDULABLE,
    ReducerPool,
    WorkerPod,
    _Step,
    accelerator_resource,
)
from ringmaster.engine.placement_cost import DEFAULT_LOSS_THRESHOLD_PERCENT, PlacementShape
from ringmaster.manifests.naming import owned_reducer_pool_name
from ringmaster.manifests.training import PoolPlacement, worker_pod
from ringmaster.placement.labels import GKE_NODEPOOL, TPU_RESOURCE
from ringmaster.placement.pools import pod_requests
from ringmaster.placement.topology import AUTO, PREFERRED, REQUIRED, loss_words
from ringmaster.planning.placement import PACKED, SPREAD, TENSOR_OVER_NICS, placement_of


def _plan(
    step: _Step,
    pool: PoolSummary | None,
    reducers: ReducerPool | None,
    spec: TrainingJobSpec | None = None,
) -> str:
    """status.plan for the pool's machine type (the job on ``spec``'s accelerator: by default
    the one it runs on), the Planned condition and StrategyChosen. Returns why the engine could
    not plan the job ("" when it did)."""
    status = step.status
    previous = status.plan.strategy if status.plan else None
    machine = pool.identity.instance_type if pool else None
    try:
        status.plan = step.planner(spec or step.spec, machine, reducers)
    except ValueError as error:
        # No plan: a waiting job waits with the reason (_waiting); a gang that runs already
        # keeps running, without a prediction.
        status.plan = None
        step.conditions.set(PLANNED, "False", PLAN_FAILED, str(error))
        return str(error)
    plan = status.plan
    step.conditions.set(PLANNED, "True", "Planned", f"strategy {plan.strategy}")
    step.decision.events += report_plausibility(step.conditions, plan_warnings(plan))
    if plan.strategy != previous and plan.fits is not False:
        step.decision.events.append(strategy_announcement(step.job.name, step.job.uid, plan))
    return ""


def _strategy_message(plan: TrainingPlan) -> str:
    return (
        f"{plan.strategy}: predicted {plan.step_seconds or 0:.3g} s/step, "
        f"bottleneck {plan.bottleneck}"
    )


def strategy_announcement(name: str, uid: str, plan: TrainingPlan) -> Event:
    """The StrategyChosen Event of the strategy `plan` gives the job, named after the job and
    that strategy. It is decided when the strategy on record (status.plan, as the API has it)
    changes, and posted again by an operator that finds an admission on record it may not have
    announced (admission_announcements); posted any number of times, by any process, the API
    keeps one per strategy the job was given. (So a job that goes back to a strategy it had
    before is not told again: that Event is there already.)"""
    identity = hashlib.sha256(f"{uid}/{plan.strategy}".encode()).hexdigest()[:12]
    # An Event's name is a DNS subdomain of at most 253 characters.
    return Event(
        "Normal", "StrategyChosen", _strategy_message(plan), f"{name[:200]}.strategy-{identity}"
    )


def _reducer_settings(step: _Step) -> tuple[ReductionServerSettings, str, ReducerPool | None]:
    """The job's reducer settings, its pool's name, and the pool as this job sees it: a shared
    pool's bandwidth is divided among the jobs running on it (the job's own pool is all its)."""
    settings = step.spec.communication.reduction_server or ReductionServerSettings()
    name = settings.pool_name or owned_reducer_pool_name(step.job.name)
    pool = step.world.reducer_pools.get(name)
    if pool is not None and settings.pool_name is not None:
        pool = replace(pool, share=pool.share_for(step.job.name))
    return settings, name, pool


def _reducers_in_use(
    reducers: ReducerPool | None, current: Mapping[int, WorkerPod]
) -> ReducerPool | None:
    """The pool as running workers use it: the reducers they were started with that still serve
    (a pool grown for another job adds none to them; a lost or scaled-away one takes one away)."""
    used = {e for p in current.values() for e in p.reducer_endpoints}
    if reducers is None or not used:
        return reducers
    serving = len(used & set(reducers.endpoints))
    return replace(reducers, replicas=serving, ready=serving) if serving else reducers


def _uses_reducers(plan: TrainingPlan | None) -> bool:
    return plan is not None and plan.strategy == REDUCTION_SERVER


def _reducer_problem(
    shared: str | None, reducers: ReducerPool | None, namespace: str
) -> tuple[str, str] | None:
    """Why the job's reducers cannot serve it yet (reason, message), or None when they can."""
    if reducers is None:
        if shared:
            return (
                "ReductionServerPoolNotFound",
                f"ReductionServerPool {shared} does not exist in namespace {namespace}",
            )
        return "ReducersNotReady", "creating the job's reduction server pool"
    if reducers.replicas == 0 or reducers.ready < reducers.replicas:
        detail = reducers.message or f"{reducers.ready}/{reducers.replicas} ready"
        return "ReducersNotReady", f"reducers of pool {reducers.name}: {detail}"
    return None


def _placement(
    step: _Step, pool_name: str, pool: PoolSummary | None, spec: TrainingJobSpec | None = None
) -> PoolPlacement:
    return PoolPlacement(
        pool=pool_name,
        node_selector=dict(pool.node_selector) if pool else {GKE_NODEPOOL: pool_name},
        accelerator_resource=accelerator_resource(spec or step.spec),
        machine_type=pool.identity.instance_type if pool else None,
    )


def _pool_plan(
    step: _Step, pool: PoolSummary | None, spec: TrainingJobSpec | None = None
) -> TrainingPlan | None:
    """The plan on the pool's machine type: status.plan where it is for that machine type (as
    _plan made it, with the reducers the job uses), else the planner's (cached), or None."""
    machine = pool.identity.instance_type if pool else None
    current = step.status.plan
    if current is not None and machine is not None and machine == current.machine_type:
        return current
    _settings, _name, reducers = _reducer_settings(step)
    try:
        return step.planner(spec or step.spec, machine, reducers)
    except ValueError:
        return None


def _option(
    step: _Step, pool: PoolSummary, attempt: int, spec: TrainingJobSpec | None = None
) -> GangOption:
    """The gang on one pool: its workers, its own reducers if the plan there wants them, and
    the topology it requires or prefers there. ``spec``: the job on one of its accelerators
    (planning/alternatives.py; by default the one it runs on)."""
    spec, job = spec or step.spec, step.job
    placement = _placement(step, pool.name, pool, spec)
    one_worker = pod_requests(worker_pod(job.name, job.namespace, spec, placement, 0, attempt))
    settings, name, reducers = _reducer_settings(step)
    plan = None
    need = None
    if settings.pool_name is None:
        try:
            plan = step.planner(spec, pool.identity.instance_type, reducers)
        except ValueError:
            plan = None
        if plan is not None and _uses_reducers(plan):
            wanted = settings.replicas or plan.reducers_wanted or 1
            need = ReducerNeed(settings.machine_type, wanted, (job.namespace, name))
    plan = plan or _pool_plan(step, pool, spec)
    demand = topology_demand(spec.placement.topology if spec.placement else AUTO, plan)
    return GangOption(
        pool=pool.name,
        worker=shape(one_worker),
        workers=spec.workers,
        one_per_node=placement.accelerator_resource == TPU_RESOURCE,
        accelerator_resource=placement.accelerator_resource,
        per_worker=spec.accelerator.per_worker,
        reducers=need,
        topology=demand.block,
        groups=_groups(plan, spec.accelerator.per_worker),
        cliques=demand.cliques,
        topology_why=demand.block_why,
        cliques_why=demand.cliques_why,
        auto=demand.auto,
        accelerator=spec.accelerator.type if step.job.spec.accelerator.alternatives else "",
    )


@dataclass(frozen=True)
class TopologyDemand:
    """What a gang requires of its pool's topology levels, and why (for the waiting message)."""

    block: str = PREFERRED
    """Required: one block holds the whole gang."""
    cliques: str = PREFERRED
    """Required: each tensor-parallel group over trays inside one NVLink clique."""
    block_why: str = ""
    cliques_why: str = ""
    auto: bool = False


def topology_demand(policy: str, plan: TrainingPlan | None) -> TopologyDemand:
    """``spec.placement.topology`` resolved: Required and Preferred as the job says; Auto as the
    engine decided in the plan (status.plan.placement: the loss of spreading against the
    threshold, planning/placement.py), computed once with the plan, never per admission pass.
    Without the plan's figures (one host, a TPU slice, no plan) Auto prefers."""
    if policy == REQUIRED:
        return TopologyDemand(REQUIRED, REQUIRED)
    if policy != AUTO:
        return TopologyDemand()
    placement = plan.placement if plan is not None else None
    if placement is None:
        return TopologyDemand(auto=True)
    steps = {s.placement: s.step_seconds for s in placement.steps}
    packed = steps.get(PACKED, 0.0)
    threshold = placement.loss_threshold_percent or DEFAULT_LOSS_THRESHOLD_PERCENT
    block = placement.block or PREFERRED
    cliques = placement.nvlink_clique or PREFERRED
    block_why = cliques_why = ""
    if block == REQUIRED:
        spread = steps.get(SPREAD, packed)
        block_why = loss_words(packed, spread, "spread over blocks", threshold)
    if cliques == REQUIRED:
        split = steps.get(TENSOR_OVER_NICS, packed)
        cliques_why = loss_words(
            packed, split, "split over cliques, its all-reduces over the NICs,", threshold
        )
    return TopologyDemand(block, cliques, block_why, cliques_why, auto=True)


def _groups(plan: TrainingPlan | None, per_worker: int) -> tuple[int, ...]:
    """Hosts per tensor-parallel group where one spans hosts (an NVL72 domain's trays)."""
    tensor = (plan.tensor or 1) if plan is not None else 1
    return (-(-tensor // per_worker),) if tensor > per_worker else ()


def _slices_option(step: _Step, pools: Sequence[PoolSummary], attempt: int) -> GangOption:
    """A multislice gang: one option over every pool that can hold one of its slices (the cycle
    takes ``slices`` distinct ones of them, or none)."""
    spec = step.spec
    option = _option(step, pools[0], attempt)
    return replace(
        option,
        slices=spec.accelerator.slices,
        pools=tuple(p.name for p in pools),
        slice_shape=f"{spec.accelerator.type} {spec.accelerator.topology}",
    )


def _slice_pools(admission: Admission) -> tuple[str, ...]:
    """The pool of each slice of a multislice admission; () for one slice."""
    return tuple(admission.slice_pools or ())


def _record_admission(
    step: _Step,
    option: GangOption,
    attempt: int,
    by: str = "",
    hosts: tuple[str, ...] = (),
    pools: tuple[str, ...] = (),
    blocks: tuple[str, ...] = (),
    placed: PlacementShape | None = None,
    accelerators: list[AcceleratorChoice] | None = None,
    chosen_why: str = "",
) -> Admission:
    """``accelerators`` and ``chosen_why``: a job with alternatives, every accelerator it
    could run on and why the option's was taken (training_alternatives.py)."""
    status = step.status
    first = pools[0] if pools else option.pool
    pool = step.world.pools.get(first)
    admission = Admission(
        pool=first,
        time=step.now,
        attempt=attempt,
        hosts=list(hosts) if hosts else None,
        blocks=list(blocks) if blocks else None,
        slice_pools=list(pools) if len(pools) > 1 else None,
    )
    if option.accelerator:
        admission.accelerator = option.accelerator
        admission.workers, admission.per_worker = option.workers, option.per_worker
        admission.accelerators = accelerators
    # On record first: the spec the gang runs with (step.spec) follows the accelerator chosen.
    status.admission = admission
    spec = step.spec
    predicted = _placement_step(_pool_plan(step, pool), placed) if placed else None
    if predicted is not None:
        admission.placement, admission.predicted_step_seconds = predicted
    status.pool = first
    status.phase = ADMITTED
    machine = f" ({pool.identity.instance_type})" if pool and pool.identity.instance_type else ""
    where = f"pool {first}{machine}"
    if len(pools) > 1:
        where = f"{len(pools)} slices of {option.slice_shape} on pools {', '.join(pools)}"
    if blocks:
        where += f", {'block' if len(blocks) == 1 else 'blocks'} {', '.join(blocks)}"
    message = (
        f"gang of {spec.workers} workers x {spec.accelerator.per_worker} "
        f"{spec.accelerator.type} admitted{by} on {where}"
    ) + (f"; {chosen_why}" if chosen_why else "")
    if step.conditions.transition(SCHEDULABLE, "True", "Admitted", message):
        step.event("Normal", "Admitted", message)
    step.decision.promise = promise_for(step.job.key, attempt, option, hosts, pools)
    return admission


def _placement_step(plan: TrainingPlan | None, placed: PlacementShape) -> tuple[str, float] | None:
    """Which of the plan's placements the admitted hosts are, and the step under it."""
    placement = plan.placement if plan is not None else None
    if placement is None or not placement.steps:
        return None
    steps = {s.placement: s.step_seconds for s in placement.steps}
    name = placement_of(placed, steps)
    return (name, steps[name]) if name in steps else None


def admission_announcements(name: str, uid: str, status: TrainingJobStatus) -> list[Event]:
    """The Events that announce the admission `status` records while its phase is Admitted,
    rebuilt from the status alone: Admitted named after the admission (uid, attempt, time),
    StrategyChosen after the strategy (strategy_announcement); whoever posts them, and however
    often, the API keeps one of each. An admitted gang's Events go out
    with its pods, after the status write, one round trip fewer on its path than before it; an
    operator that finds an admission on record it did not announce itself (it was killed in
    between, or the post failed) posts these before anything else, so none is ever lost.
    Empty when the status records no admission in phase Admitted."""
    admission = status.admission
    if status.phase != ADMITTED or admission is None:
        return []
    admitted = f"{uid}/{admission.attempt}/{admission.time.isoformat()}"
    identity = hashlib.sha256(admitted.encode()).hexdigest()[:12]
    prefix = name[:200]  # an Event's name is a DNS subdomain of at most 253 characters
    events = []
    plan = status.plan
    if plan is not None and plan.fits is not False:
        # Named after the strategy, not the admission: a gang restarted with the strategy it
        # had is admitted again without a new StrategyChosen, and an operator started while it
        # is Admitted finds the one posted at its first admission (issue 45).
        events.append(strategy_announcement(name, uid, plan))
    schedulable = find_condition(status.conditions, SCHEDULABLE)
    if schedulable is not None and (schedulable.status, schedulable.reason) == ("True", "Admitted"):
        events.append(
            Event("Normal", "Admitted", schedulable.message, f"{prefix}.admitted-{identity}")
        )
    return events
