"""The TrainingJob state machine: one function per phase, from a snapshot of the world.

Pure: no I/O, no clock (``now`` is an argument), no kopf. The kopf shell (trainingjob.py) reads
the job and its pods, calls :func:`reconcile_training`, and applies the :class:`Decision`. Whether
and where a waiting gang starts is not decided here: the admission cycle
(:mod:`ringmaster.admission.cycle`) decides it for all waiting jobs at once and hands the job its
verdict; this machine records the verdict in status and acts on it.

Phases (``status.phase``): finished (Succeeded, Failed), suspended, waiting (Pending, no admission
for the current attempt), admitted (admission recorded, pods being created or reducers
starting), running, and restarting (a worker failed or went: the gang goes, a new attempt waits).
The admission is written to ``status.admission`` before any pod is created, so a restarted
operator finds it in the API.

What every phase works on (the world, the decision, the step) is in training_step.py; a waiting
gang's plan, options and recorded admission in training_admission.py; the path of jobs Kueue
admits in training_kueue.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from ringmaster.admission.cycle import Admit, GangOption, Wait, WaitingGang, promise_for
from ringmaster.admission.pools import candidate_pools
from ringmaster.admission.snapshot import PoolSummary
from ringmaster.api import TrainingJobStatus, WorkerCounts
from ringmaster.api.trainingjob import Admission
from ringmaster.controllers.reporting import Conditions
from ringmaster.controllers.training_admission import (
    _option,
    _placement,
    _plan,
    _record_admission,
    _reducer_problem,
    _reducer_settings,
    _reducers_in_use,
    _slice_pools,
    _slices_option,
    _uses_reducers,
)
from ringmaster.controllers.training_alternatives import (
    admitted_choices,
    adopted_accelerator,
    alternative_options,
    flag_through_kueue,
)
from ringmaster.controllers.training_alternatives import (
    waiting_message as alternatives_waiting_message,
)
from ringmaster.controllers.training_kueue import (
    _kueue_placement,
    _kueue_queue,
    _kueue_rank_placement,
    _kueue_report,
    _kueue_stopped,
    _kueue_topology,
    _kueue_waiting,
    _own_workload,
)
from ringmaster.controllers.training_step import (
    ADMITTED,
    COMPLETE,
    DOES_NOT_FIT,
    FAILED,
    FAILED_CONDITION,
    FINISHED,
    PENDING,
    PLAN_FAILED,
    REDUCERS_CONDITION,
    REQUEUED,
    RESTARTED,
    RUNNING,
    SCHEDULABLE,
    SOON_SECONDS,
    SUCCEEDED,
    SUSPENDED,
    SUSPENDED_CONDITION,
    WAITING_FOR_ADMISSION,
    Decision,
    JobView,
    Planner,
    WorkerPod,
    World,
    _Step,
    _wait,
)
from ringmaster.manifests.reduction import owned_reducer_pool
from ringmaster.manifests.training import PoolPlacement, rendezvous_service, worker_pod
from ringmaster.placement.pools import NoPool
from ringmaster.planning.alternatives import Ranking


def reconcile_training(
    job: JobView,
    pods: Sequence[WorkerPod],
    world: World,
    now: dt.datetime,
    planner: Planner,
) -> Decision:
    status = job.status.model_copy(deep=True)
    status.observed_generation = job.generation
    decision = Decision(status=status)
    step = _Step(job, world, now, planner, decision, Conditions(status, job.generation, now))
    if job.ending:
        _ending(step)
        return decision
    if status.phase in FINISHED:
        _finished(step)
    elif job.spec.run_policy.suspend:
        _suspended(step, pods)
    else:
        _resumed(step)
        _active(step, pods)
    if status.phase in FINISHED:
        _settle_finished(step)
    if world.kueue is not None:
        _kueue_report(step, pods)
    _phase_and_schedulable_agree(step)
    step.conditions.stamp()
    return decision


def _phase_and_schedulable_agree(step: _Step) -> None:
    """Every status written says one thing of the gang's room: a gang that waits (Pending) is
    not Schedulable=True Admitted, one that holds its room (Admitted, Running) is
    Schedulable=True. The paths that send a gang back to Pending say why (a restart, a requeue,
    a wait); this catches any that does not, so that no write contradicts itself (issue 45: a
    multislice job seen Pending and Admitted at once across an operator restart)."""
    status = step.status
    schedulable = step.conditions.get(SCHEDULABLE)
    holds = schedulable is not None and schedulable.status == "True"
    if status.phase == PENDING and holds:
        attempt = gang_attempt(status)
        step.conditions.set(
            SCHEDULABLE,
            "False",
            WAITING_FOR_ADMISSION,
            f"attempt {attempt} of the gang waits for admission",
        )
    elif status.phase in (ADMITTED, RUNNING) and not holds:
        pool = status.admission.pool if status.admission else status.pool
        message = f"gang of {step.spec.workers} workers admitted on pool {pool}"
        step.conditions.set(SCHEDULABLE, "True", "Admitted", message)


def _settle_finished(step: _Step) -> None:
    """A finished job's conditions agree with its phase: a gang that ran was schedulable, even
    if a later edit (or an older operator) left Schedulable=False on it."""
    status = step.status
    schedulable = step.conditions.get(SCHEDULABLE)
    ran = status.admission is not None or status.start_time is not None
    if ran and status.pool and (schedulable is None or schedulable.status != "True"):
        step.conditions.set(SCHEDULABLE, "True", "Admitted", f"the gang ran on pool {status.pool}")


# ---------------------------------------------------------------- ending, finished, suspended


def _ending(step: _Step) -> None:
    """The job (or its namespace) is being deleted: its pods going is the deletion, not lost
    workers. A quiet end: no restart, no attempt spent, nothing created (a terminating
    namespace refuses it), no Event; the status stays as it was and the room is let go."""
    step.decision.status = step.job.status.model_copy(deep=True)
    step.decision.release = True


def _finished(step: _Step) -> None:
    """Nothing runs again; only the TTL is left to honour."""
    decision, status = step.decision, step.status
    decision.release = True
    ttl = step.spec.run_policy.ttl_seconds_after_finished
    if ttl is not None and status.completion_time is not None:
        remaining = (status.completion_time - step.now).total_seconds() + ttl
        if remaining <= 0:
            decision.delete_job = True
        else:
            decision.requeue_after = remaining


def _suspended(step: _Step, pods: Sequence[WorkerPod]) -> None:
    status = step.status
    step.decision.delete = [p.name for p in pods if not p.terminating]
    step.decision.release = True
    status.admission = None  # a resumed job is admitted again
    status.workers = None
    _release_reducers(step)
    # A suspended gang holds no room: Schedulable says so, not the admission it had.
    step.conditions.set(
        SCHEDULABLE, "False", SUSPENDED, "runPolicy.suspend is true: the gang holds no room"
    )
    if pods:
        # Suspended means no worker exists, and a suspension can be lifted only once the job is
        # Suspended (the CRD's rule): so a resume never finds the old gang's pods still listed
        # and takes them for its own (seen: a quick resume adopted them on the old pool).
        step.conditions.set(
            SUSPENDED_CONDITION,
            "True",
            "Suspending",
            f"runPolicy.suspend is true: {len(pods)} workers are being deleted",
        )
        step.decision.requeue_after = SOON_SECONDS
        return
    if status.phase != SUSPENDED:
        step.event("Normal", "Suspended", "job suspended: workers deleted")
    status.phase = SUSPENDED
    step.conditions.set(SUSPENDED_CONDITION, "True", "Suspended", "runPolicy.suspend is true")


def _resumed(step: _Step) -> None:
    suspended = step.conditions.get(SUSPENDED_CONDITION)
    if suspended is not None and suspended.status == "True":
        step.conditions.set(SUSPENDED_CONDITION, "False", "Resumed", "runPolicy.suspend is false")
        step.event("Normal", "Resumed", "job resumed: admitting the gang again")
        step.status.phase = PENDING


def _finish(step: _Step, live: Sequence[WorkerPod], phase: str, reason: str, message: str) -> None:
    status, decision = step.status, step.decision
    status.phase = phase
    status.completion_time = step.now
    condition = COMPLETE if phase == SUCCEEDED else FAILED_CONDITION
    step.conditions.set(condition, "True", reason, message)
    if phase == FAILED:
        decision.delete = [p.name for p in live if p.phase not in FINISHED]
    decision.create = []
    decision.release = True
    step.event("Normal" if phase == SUCCEEDED else "Warning", reason, message)
    ttl = step.spec.run_policy.ttl_seconds_after_finished
    decision.requeue_after = float(ttl) if ttl is not None else None


# ---------------------------------------------------------------- the gang's attempts


def gang_attempt(status: TrainingJobStatus) -> int:
    """The gang attempt that runs or waits: every restart makes a new one, whether it spent an
    attempt of the backoff limit (restarts) or not (requeues)."""
    return (status.restarts or 0) + (status.requeues or 0)


def _active(step: _Step, pods: Sequence[WorkerPod]) -> None:
    status, decision = step.status, step.decision
    attempt = gang_attempt(status)
    if _kueue_queue(step) is not None:
        view = _own_workload(step)
        if view is None or not view.runs:
            if _kueue_stopped(step, pods, view):
                _waiting(step, attempt)
            return
    live = [p for p in pods if not p.terminating]
    current = {p.rank: p for p in live if p.attempt == attempt}
    stale = [p for p in live if p.attempt != attempt]
    decision.delete += [p.name for p in stale]
    admission = (
        status.admission if status.admission and status.admission.attempt == attempt else None
    )
    if admission is None and current:
        admission = _adopt(step, current, attempt)
        if admission is None:
            return
    if admission is None:
        if stale or any(p.terminating for p in pods):
            # The previous gang is still going away (its pods have the same names).
            status.phase = PENDING
            decision.requeue_after = SOON_SECONDS
            return
        admission = _waiting(step, attempt)
        if admission is None:
            _release_reducers(step)  # a gang that waits holds no reducers either
            return
    _admitted(step, admission, current, live)


def _adopt(step: _Step, current: Mapping[int, WorkerPod], attempt: int) -> Admission | None:
    """Pods of this attempt exist with no admission on record (an operator older than the
    record, or a record lost in a race): a whole gang is adopted as admitted where it is; a
    partial one is released, since nothing says its room was ever checked."""
    pool = step.status.pool or next((p.pool for p in current.values() if p.pool), None)
    # A job with alternatives: the gang's shape is that of the accelerator its pool has.
    accelerator, workers = adopted_accelerator(step, pool)
    if len(current) >= workers and pool is not None:
        slices = step.spec.accelerator.slices
        per_slice = workers // slices
        # A multislice gang: each slice where its first worker's nodeSelector put it.
        slice_pools = [
            current[s * per_slice].pool if s * per_slice in current else None for s in range(slices)
        ]
        admission = Admission(
            pool=slice_pools[0] or pool if slices > 1 else pool,
            time=step.now,
            attempt=attempt,
            slice_pools=[p or pool for p in slice_pools] if slices > 1 else None,
            accelerator=accelerator,
        )
        step.status.admission = admission
        message = f"gang of {workers} workers adopted on pool {pool}"
        if step.conditions.transition(SCHEDULABLE, "True", "Admitted", message):
            step.event("Normal", "Admitted", message)
        return admission
    step.decision.delete += [p.name for p in current.values()]
    step.status.phase = PENDING
    step.decision.requeue_after = SOON_SECONDS
    return None


def _waiting(step: _Step, attempt: int) -> Admission | None:
    """No admission for this attempt: plan, join the admission queue, and act on the cycle's
    verdict. Returns the admission when the verdict admits the gang now."""
    spec, status, job = step.spec, step.status, step.job
    status.phase = PENDING
    status.workers = None
    if step.world.hardware is not None:
        # No pool, plan or pod for hardware the catalog does not define: wait for the catalog.
        _wait(step, *step.world.hardware)
        return None
    if spec.accelerator.alternatives and _kueue_queue(step) is None:
        found = alternative_options(step, attempt)
        return _queue(step, found.options, attempt, found.ranking) if found else None
    candidates = candidate_pools(
        step.world.pools,
        spec.accelerator.type,
        spec.accelerator.per_worker,
        spec.machine_type,
        spec.accelerator.topology,
        current=status.pool,
    )
    if isinstance(candidates, NoPool):
        _wait(step, candidates.reason, candidates.message)
        return None
    settings, reducer_pool_name, reducers = _reducer_settings(step)
    failed = _plan(step, candidates[0], reducers)
    if failed:
        # A refusal stops what it refuses: no admission, no pod, no reducer for a job the
        # engine cannot plan (ringmaster plan refuses the same file).
        _wait(step, PLAN_FAILED, failed)
        return None
    if status.plan is not None and status.plan.fits is False:
        # The model fits no layout on this pool's accelerators: wait, say why, create nothing.
        _wait(step, DOES_NOT_FIT, status.plan.reason or "the model does not fit in memory")
        return None
    uses_reducers = _uses_reducers(status.plan)
    status.reduction_server_pool = reducer_pool_name if uses_reducers else None
    if uses_reducers and settings.pool_name is not None:
        # A shared pool is sized by its jobs (this one included, through reductionServerPool)
        # and holds its own hosts: the job joins the queue once the pool serves.
        problem = _reducer_problem(settings.pool_name, reducers, job.namespace)
        if problem is not None:
            _wait(step, *problem)
            step.decision.requeue_after = SOON_SECONDS
            return None
    if _kueue_queue(step) is not None:
        flag_through_kueue(step)
        return _kueue_waiting(step, candidates, attempt)
    options = (
        (_slices_option(step, candidates, attempt),)
        if spec.accelerator.slices > 1
        else tuple(_option(step, pool, attempt) for pool in candidates)
    )
    return _queue(step, options, attempt)


def _queue(
    step: _Step, options: tuple[GangOption, ...], attempt: int, ranking: Ranking | None = None
) -> Admission | None:
    """Join the admission queue with ``options`` (best first) and act on the cycle's verdict.
    ``ranking``: a job with accelerator alternatives, the accelerators its options run on."""
    spec, job = step.job.spec, step.job
    schedulable = step.conditions.get(SCHEDULABLE)
    waiting_since = (
        schedulable.last_transition_time
        if schedulable is not None and schedulable.status == "False"
        else step.now
    )
    gang = WaitingGang(
        key=job.key,
        created=job.created or step.now,
        queue=spec.accelerator.type,
        options=options,
        priority_class=spec.template.priority_class_name,
        attempt=attempt,
        waiting_since=waiting_since,
    )
    verdict = step.world.verdict
    if isinstance(verdict, Admit):
        chosen = next((o for o in gang.options if o == verdict.option), None)
        if chosen is not None:
            choices, why = (
                admitted_choices(ranking, chosen, verdict.considered, step.now)
                if ranking is not None and chosen.accelerator
                else (None, "")
            )
            return _record_admission(
                step,
                chosen,
                attempt,
                hosts=verdict.hosts,
                pools=verdict.pools,
                blocks=verdict.blocks,
                placed=verdict.shape,
                accelerators=choices,
                chosen_why=why,
            )
        # The job changed since the cycle decided: the verdict no longer applies.
    elif isinstance(verdict, Wait):
        message = verdict.message
        if ranking is not None:
            message = alternatives_waiting_message(message, ranking)
        _wait(step, verdict.reason, message)
    step.decision.waiting = gang
    return None


# ---------------------------------------------------------------- admitted, running, restarting


def _admitted(
    step: _Step, admission: Admission, current: Mapping[int, WorkerPod], live: Sequence[WorkerPod]
) -> None:
    spec, status, decision, job = step.spec, step.status, step.decision, step.job
    attempt = admission.attempt
    status.pool = admission.pool
    pool = step.world.pools.get(admission.pool)
    settings, reducer_pool_name, reducers = _reducer_settings(step)
    unplanned = _plan(step, pool, _reducers_in_use(reducers, current))
    if unplanned and not current:
        # Admitted, then the engine could no longer plan it (a new catalog) before any worker
        # existed: nothing is created for a job without a plan; it waits with the reason.
        status.admission = None
        decision.release = True
        _release_reducers(step)
        _wait(step, PLAN_FAILED, unplanned)
        return
    uses_reducers = _uses_reducers(status.plan)
    status.reduction_server_pool = reducer_pool_name if uses_reducers else None
    schedulable = step.conditions.get(SCHEDULABLE)
    if schedulable is None or schedulable.status != "True":
        message = f"gang of {spec.workers} workers admitted on pool {admission.pool}"
        if step.conditions.transition(SCHEDULABLE, "True", "Admitted", message):
            step.event("Normal", "Admitted", message)

    # The room stays held until every pod is seen (idempotent; recovers it after a restart).
    # Held already for this attempt on this pool: kept as it is, not recomputed (rendering a
    # worker pod and planning again on every look of every admitted job).
    held = step.world.held
    hosts = _hosts(admission, spec.workers)
    slice_pools = _slice_pools(admission)
    if (
        held is not None
        and held.attempt == attempt
        and held.pool == admission.pool
        and held.pools == slice_pools
        and held.workers == spec.workers
        and held.hosts == hosts
    ):
        decision.promise = held
    elif pool is not None:
        option = _option(step, pool, attempt)
        if slice_pools:
            known = [step.world.pools[p] for p in slice_pools if p in step.world.pools]
            option = _slices_option(step, known or [pool], attempt)
        decision.promise = promise_for(job.key, attempt, option, hosts, slice_pools)

    # A failed worker fails the gang: restart all of it, or give up at the backoff limit.
    failed = sorted((p for p in current.values() if p.phase == "Failed"), key=lambda p: p.rank)
    lost = status.phase == RUNNING and len(current) < spec.workers
    if failed or lost:
        _restart(step, failed, current, live, attempt)
        return
    gone = _host_lost(step, hosts, current)
    if gone:
        # A host chosen for a worker that has not started went away or was taken: the gang's
        # pods are pinned, so it starts again elsewhere, as when a running worker's host dies.
        _restart(step, [], current, live, attempt, what=gone, infrastructure=True)
        return
    if len(current) == spec.workers and all(p.phase == "Succeeded" for p in current.values()):
        _finish(step, live, SUCCEEDED, "Completed", f"all {spec.workers} workers succeeded")
        return
    deadline = spec.run_policy.active_deadline_seconds
    started = status.start_time
    if (
        deadline is not None
        and started is not None
        and (step.now - started).total_seconds() >= deadline
    ):
        message = f"ran longer than activeDeadlineSeconds ({deadline})"
        _finish(step, live, FAILED, "DeadlineExceeded", message)
        return

    endpoints: tuple[str, ...] = ()
    if uses_reducers:
        if settings.pool_name is None:
            wanted = settings.replicas or (status.plan.reducers_wanted if status.plan else 1) or 1
            decision.apply.append(owned_reducer_pool(job.name, settings, wanted))
        problem = _reducer_problem(settings.pool_name, reducers, job.namespace)
        if problem is not None and reducers is not None and current:
            # A shared pool grows when another job starts on it; workers that still reach every
            # reducer they were started with have lost none.
            used = {e for p in current.values() for e in p.reducer_endpoints}
            if used and used <= set(reducers.endpoints):
                problem = None
        if problem is None:
            ready = reducers.ready if reducers else 0
            message = f"{ready} reducers of pool {reducer_pool_name} ready"
            step.conditions.set(REDUCERS_CONDITION, "True", "ReducersReady", message)
            endpoints = reducers.endpoints if reducers else ()
        else:
            changed = step.conditions.transition(REDUCERS_CONDITION, "False", *problem)
            if changed and status.phase == RUNNING:
                # Workers keep running (a reducer restarts in seconds); the user should know.
                step.event("Warning", "ReducersLost", problem[1])
            if not current:
                status.phase = ADMITTED  # the workers start once their reducers serve
                decision.requeue_after = SOON_SECONDS
                return

    placements = _slice_placements(step, admission, pool)
    missing = [r for r in range(spec.workers) if r not in current]
    if missing:
        # Admitted: create what is not there yet (all of it, or what a crash kept us from).
        # The layout (tensor, pipeline, data...) reaches the workers as environment variables.
        layout = status.plan.to_k8s() if status.plan else None
        topology = _kueue_topology(step)
        decision.create = [
            worker_pod(
                job.name,
                job.namespace,
                spec,
                _kueue_rank_placement(
                    step, topology, placements[rank * len(placements) // spec.workers], rank
                ),
                rank,
                attempt,
                endpoints,
                layout,
                host=hosts[rank] if hosts else None,
            )
            for rank in missing
        ]
    elif all(p.node for p in current.values()):
        # The rendezvous Service once the whole gang is bound, not with its pods: kube-scheduler
        # spreads every pod a Service selects over hosts and zones (at 2000 hosts the same pods
        # bound 1.7x slower with their Services than without), and the endpoint controllers
        # follow each pod from its creation. A worker that starts first retries the lookup of
        # its peers' names. It outlives the gang's attempts; the shell creates it once.
        decision.create = [rendezvous_service(job.name)]
    counts = _counts(list(current.values()), spec.workers)
    status.workers = WorkerCounts(**counts)
    if counts["running"] == spec.workers:
        if status.phase != RUNNING:
            step.event("Normal", "Running", f"all {spec.workers} workers run")
        status.phase = RUNNING
        status.start_time = status.start_time or step.now
        if deadline is not None:
            decision.requeue_after = deadline - (step.now - status.start_time).total_seconds()
    else:
        status.phase = ADMITTED
        decision.requeue_after = SOON_SECONDS


def _slice_placements(
    step: _Step, admission: Admission, pool: PoolSummary | None
) -> list[PoolPlacement]:
    """Where each slice's workers go (one placement for a one-slice gang): slice s on the pool
    admission gave it, with the node labels of the Kueue flavor its pod set was given."""
    pools = _slice_pools(admission)
    if not pools:
        return [_kueue_placement(step, _placement(step, admission.pool, pool))]
    return [
        _kueue_placement(step, _placement(step, name, step.world.pools.get(name)), slice_id)
        for slice_id, name in enumerate(pools)
    ]


def _hosts(admission: Admission, workers: int) -> tuple[str, ...]:
    """The admission's host per rank, or () when it named none (or not one per worker)."""
    hosts = tuple(admission.hosts or ())
    return hosts if len(hosts) == workers else ()


def _host_lost(step: _Step, hosts: tuple[str, ...], current: Mapping[int, WorkerPod]) -> str:
    """Why a worker not bound yet cannot start on the host admission pinned it to, or ""."""
    for rank, host in enumerate(hosts):
        pod = current.get(rank)
        if pod is not None and pod.node:
            continue
        problem = step.world.host_problems.get(host)
        if problem:
            return f"{problem} before worker {rank} started there"
    return ""


def _restart(
    step: _Step,
    failed: Sequence[WorkerPod],
    current: Mapping[int, WorkerPod],
    live: Sequence[WorkerPod],
    attempt: int,
    what: str = "",
    infrastructure: bool = False,
) -> None:
    """The gang goes whole (every pod of the attempt, with its own reducers) and a new attempt
    waits for admission. A worker's failure spends an attempt of runPolicy.backoffLimit; a host
    lost before its worker started (``infrastructure``) is no fault of the job and spends none
    (status.requeues, as Kueue's evictions)."""
    spec, status, decision = step.spec, step.status, step.decision
    what = what or (
        f"worker {failed[0].rank} failed ({failed[0].exit_detail or 'Failed'})"
        if failed
        else f"{spec.workers - len(current)} worker pod(s) disappeared"
    )
    limit = spec.run_policy.backoff_limit
    spent = status.restarts or 0
    if not infrastructure and spent >= limit:
        _finish(step, live, FAILED, "BackoffLimitExceeded", f"{what}; backoffLimit {limit} reached")
        return
    decision.delete += [p.name for p in live if p.name not in decision.delete]
    decision.promise = None
    decision.release = True
    status.admission = None  # the next attempt is admitted anew
    status.phase = PENDING
    status.workers = None
    _release_reducers(step)
    if infrastructure:
        status.requeues = (status.requeues or 0) + 1
        reason = REQUEUED
        step.event(
            "Warning",
            REQUEUED,
            f"{what}; the gang starts again elsewhere, no attempt spent ({spent}/{limit} used, "
            f"{status.requeues} requeued)",
        )
    else:
        status.restarts = spent + 1
        reason = RESTARTED
        step.event("Warning", RESTARTED, f"{what}; restarting the gang ({spent + 1}/{limit})")
    # The room the gang had is let go with it: Schedulable says so until the new attempt's
    # admission (which announces itself again), not the admission that ended.
    step.conditions.set(
        SCHEDULABLE,
        "False",
        reason,
        f"{what}; attempt {gang_attempt(status)} of the gang waits for admission",
    )
    decision.requeue_after = SOON_SECONDS


def _release_reducers(step: _Step) -> None:
    """A gang that does not run holds none of its own reducers: its ReductionServerPool scales
    to zero (and back at its next admission). A shared pool is sized by its jobs."""
    settings, _name, reducers = _reducer_settings(step)
    if settings.pool_name is None and reducers is not None and reducers.replicas > 0:
        step.decision.apply.append(owned_reducer_pool(step.job.name, settings, 0))


def _counts(pods: Sequence[WorkerPod], workers: int) -> dict[str, int]:
    counts = {"total": workers, "pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    for pod in pods:
        key = pod.phase.lower()
        if key in counts and key != "total":
            counts[key] += 1
    return counts
