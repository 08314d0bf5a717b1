"""The TrainingJob state machine's path for jobs Kueue admits (admission/kueue.py has the
protocol; controllers/kueue_workloads.py the Workload writes).

Pure, as training_lifecycle.py: a labelled job's Workload kept in step with it, the pool its
admitted flavor selects (one per slice of a multislice job), a gang stopped when Kueue has not
admitted it or evicted it, and what Kueue learns back (PodsReady, Finished, suspension).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ringmaster.admission import kueue
from ringmaster.admission.kueue import WorkloadView, WorkloadWrite
from ringmaster.admission.snapshot import PoolSummary
from ringmaster.api.reductionserverpool import ReductionServerPoolSpec
from ringmaster.api.trainingjob import Admission
from ringmaster.controllers.training_admission import (
    _groups,
    _option,
    _placement,
    _pool_plan,
    _record_admission,
    _reducer_settings,
    _slices_option,
    _uses_reducers,
    topology_demand,
)
from ringmaster.controllers.training_step import (
    COMPLETE,
    FAILED_CONDITION,
    FINISHED,
    PENDING,
    SOON_SECONDS,
    SUCCEEDED,
    WorkerPod,
    _Step,
    _wait,
)
from ringmaster.manifests.naming import MANAGED_BY, OPERATOR, TRAINING_JOB_LABEL
from ringmaster.manifests.reduction import owned_reducer_pool, reducer_statefulset
from ringmaster.manifests.training import PoolPlacement, worker_pod
from ringmaster.placement.topology import AUTO, NVLINK_CLIQUE

QUEUED_IN_KUEUE = "QueuedInKueue"


def _kueue_queue(step: _Step) -> str | None:
    """The LocalQueue of a job that Kueue admits (labelled, and Kueue installed), or None."""
    return kueue.queue_name(step.job.labels) if step.world.kueue is not None else None


def _own_workload(step: _Step) -> WorkloadView | None:
    world = step.world.kueue
    if world is None:
        return None
    body = next((w for w in world.workloads if kueue.owned_by(w, step.job.uid)), None)
    return kueue.read_workload(body) if body is not None else None


def _kueue_detail(view: WorkloadView | None) -> str:
    if view is None:
        return "creating its Workload"
    if view.evicted is not None:
        evicted = view.evicted
        return f"evicted ({evicted.reason}: {evicted.message}); waiting to be admitted again"
    return view.pending_message()


def _queued(step: _Step, view: WorkloadView | None, detail: str) -> None:
    name = view.name if view else kueue.workload_name(step.job.name, step.job.uid)
    queue = _kueue_queue(step)
    _wait(step, QUEUED_IN_KUEUE, f"queued in Kueue LocalQueue {queue} (Workload {name}): {detail}")


def _kueue_stopped(step: _Step, pods: Sequence[WorkerPod], view: WorkloadView | None) -> bool:
    """Kueue has not admitted the job, or has evicted it: no gang may run. One that runs is
    stopped whole (no attempt spent: the job did nothing wrong), then the job waits in Kueue.
    Returns whether no pod is left, so the job waits (the caller's _waiting) now."""
    status, decision = step.status, step.decision
    live = [p for p in pods if not p.terminating]
    if live or status.admission is not None:
        decision.delete += [p.name for p in live]
        if view is not None and view.evicted is not None:
            evicted = view.evicted
            step.event(
                "Warning",
                "Evicted",
                f"Kueue evicted Workload {view.name} ({evicted.reason}: {evicted.message}): the "
                "gang is stopped and waits to be admitted again (no restart counted)",
            )
        else:
            step.event("Normal", "Stopped", "the gang is stopped: its Workload is not admitted")
        settings, name, _reducers = _reducer_settings(step)
        if settings.pool_name is None and status.reduction_server_pool == name:
            # The reducers' quota goes back with the workers': the job's own pool scales to 0.
            decision.apply.append(owned_reducer_pool(step.job.name, settings, 0))
    status.admission = None
    status.workers = None
    decision.release = True
    if pods:
        status.phase = PENDING
        _queued(step, view, f"{_kueue_detail(view)}; {len(pods)} workers are being deleted")
        decision.requeue_after = SOON_SECONDS
        return False
    return True


def _kueue_pod_sets(step: _Step, pool: PoolSummary, attempt: int) -> list[kueue.PodSet]:
    """The job's pods as Kueue counts them: the workers, and the job's own reducers if the plan
    uses them (a shared ReductionServerPool is not the job's to count)."""
    spec, job, plan = step.spec, step.job, step.status.plan
    layout = plan.to_k8s() if plan else None
    placement = _placement(step, pool.name, pool)
    pod_sets = []
    first = 0
    topology = _worker_topology(step, pool)
    for name, count in kueue.worker_pod_sets(spec.workers, spec.accelerator.slices):
        worker = worker_pod(job.name, job.namespace, spec, placement, first, attempt, (), layout)
        pod_sets.append(kueue.PodSet(name, count, worker, topology))
        first += count
    settings, _name, _reducers = _reducer_settings(step)
    if _uses_reducers(plan) and settings.pool_name is None:
        wanted = settings.replicas or (plan.reducers_wanted if plan else None) or 1
        owned = owned_reducer_pool(job.name, settings, wanted)
        pool_spec = ReductionServerPoolSpec.model_validate(owned["spec"])
        reducers = reducer_statefulset(owned["metadata"]["name"], pool_spec, wanted)
        pod_sets.append(kueue.PodSet(kueue.REDUCERS_POD_SET, wanted, reducers["spec"]["template"]))
    return pod_sets


def _worker_topology(step: _Step, pool: PoolSummary) -> kueue.TopologyRequest | None:
    """The workers' topology request to Kueue: the job's verdict (spec.placement.topology, Auto
    resolved from the plan as for Ringmaster's own admission) for the levels of the pool that
    Kueue's Topology Aware Scheduling has for it; None for a multislice job (its slices are
    whole TPU slices) or a pool without such levels."""
    world, spec = step.world.kueue, step.spec
    if world is None or spec.accelerator.slices > 1 or not pool.levels:
        return None
    plan = _pool_plan(step, pool)
    demand = topology_demand(spec.placement.topology if spec.placement else AUTO, plan)
    groups = _groups(plan, spec.accelerator.per_worker)
    levels = kueue.tas_levels([world.pool_labels(pool.name)], world.flavors, world.topologies)
    return kueue.topology_request(
        pool.levels, demand.block, demand.cliques, groups[0] if groups else 1, levels, NVLINK_CLIQUE
    )


def _kueue_waiting(
    step: _Step, candidates: Sequence[PoolSummary], attempt: int
) -> Admission | None:
    """A planned job that Kueue admits: keep its Workload in step with it and wait for Kueue;
    once admitted, take the pool the flavor selects. Returns the admission when it starts now."""
    world, job, spec = step.world.kueue, step.job, step.spec
    queue = _kueue_queue(step)
    assert world is not None and queue is not None
    priority = kueue.workload_priority(
        job.labels,
        spec.template.priority_class_name,
        world.workload_priority_classes,
        world.priority_classes,
    )
    if isinstance(priority, kueue.PriorityProblem):
        _wait(step, priority.reason, priority.message)
        return None
    desired = kueue.build_workload(
        job=job.name,
        namespace=job.namespace,
        uid=job.uid,
        queue=queue,
        pod_sets=_kueue_pod_sets(step, candidates[0], attempt),
        priority=priority,
        pools=[dict(p.node_selector) for p in candidates],
        labels={MANAGED_BY: OPERATOR, TRAINING_JOB_LABEL: job.name},
    )
    view = _own_workload(step)
    decision = step.decision
    if view is None:
        decision.workload.append(WorkloadWrite("create", desired["metadata"]["name"], desired))
        _queued(step, None, "creating its Workload")
        return None
    if view.finished is not None:
        finished = view.finished
        _wait(
            step,
            "WorkloadFinished",
            f"Workload {view.name} is Finished ({finished.reason}: {finished.message}): "
            "delete the Workload to queue the job again",
        )
        return None
    current = view.body.get("spec") or {}
    new_shape = kueue.quota_shape(current) != kueue.quota_shape(desired["spec"])
    new_priority = kueue.priority_shape(current) != kueue.priority_shape(desired["spec"])
    new_topology = kueue.topology_shape(current) != kueue.topology_shape(desired["spec"])
    if (new_shape or new_priority or new_topology) and not view.quota_reserved:
        fields = ("queueName", "podSets", "priority", "priorityClassRef")
        patch = {"spec": {k: desired["spec"].get(k) for k in fields}}
        decision.workload.append(WorkloadWrite("patch", view.name, patch))
        _queued(step, view, "its Workload is brought in step with the job")
        return None
    if new_shape:
        # Kueue reserved quota for another shape (counts, resources, queue): a new Workload.
        decision.workload.append(WorkloadWrite("delete", view.name))
        _queued(step, view, "the job changed since Kueue admitted it: a new Workload follows")
        return None
    if not view.runs:
        _queued(step, view, _kueue_detail(view))
        return None
    if spec.accelerator.slices > 1:
        return _kueue_slices_admitted(step, view, candidates, attempt)
    placement = kueue.flavor_placement(view, kueue.WORKERS_POD_SET, world.flavors)
    if isinstance(placement, kueue.FlavorProblem):
        _wait(step, placement.reason, placement.message)
        return None
    chosen = kueue.pool_for_flavor(
        [(p.name, world.pool_labels(p.name)) for p in candidates], placement
    )
    if isinstance(chosen, kueue.FlavorProblem):
        _wait(step, chosen.reason, chosen.message)
        return None
    pool = next(p for p in candidates if p.name == chosen)
    by = f" by Kueue (ClusterQueue {view.cluster_queue}, {placement.describe()})"
    return _record_admission(step, _option(step, pool, attempt), attempt, by)


def _kueue_slices_admitted(
    step: _Step, view: WorkloadView, candidates: Sequence[PoolSummary], attempt: int
) -> Admission | None:
    """Kueue admitted a multislice job: each slice takes a distinct pool its pod set's flavor
    selects (Kueue counts quota, not which node pool holds a slice)."""
    world, spec = step.world.kueue, step.spec
    assert world is not None
    taken: list[str] = []
    described = []
    for name, _count in kueue.worker_pod_sets(spec.workers, spec.accelerator.slices):
        placement = kueue.flavor_placement(view, name, world.flavors)
        if isinstance(placement, kueue.FlavorProblem):
            _wait(step, placement.reason, placement.message)
            return None
        free = [(p.name, world.pool_labels(p.name)) for p in candidates if p.name not in taken]
        chosen = kueue.pool_for_flavor(free, placement)
        if isinstance(chosen, kueue.FlavorProblem):
            _wait(
                step,
                "InsufficientSliceFlavors",
                f"pod set {name}: {chosen.message} (each slice needs a pool of its own; "
                f"taken: {', '.join(taken) or 'none'})",
            )
            return None
        taken.append(chosen)
        described.append(placement.describe())
    option = _slices_option(step, candidates, attempt)
    flavors = ", ".join(sorted(set(described)))
    by = f" by Kueue (ClusterQueue {view.cluster_queue}, {flavors})"
    return _record_admission(step, option, attempt, by, pools=tuple(taken))


def _kueue_placement(
    step: _Step, placement: PoolPlacement, slice_id: int | None = None
) -> PoolPlacement:
    """The pool's placement with the admitted flavor's node labels and tolerations added (a
    multislice job's slice: its own pod set's flavor)."""
    world = step.world.kueue
    view = _own_workload(step) if _kueue_queue(step) is not None else None
    if world is None or view is None or not view.runs:
        return placement
    pod_set = kueue.WORKERS_POD_SET
    if slice_id is not None:
        sets = kueue.worker_pod_sets(step.spec.workers, step.spec.accelerator.slices)
        pod_set = sets[slice_id][0] if len(sets) > 1 else pod_set
    flavor = kueue.flavor_placement(view, pod_set, world.flavors)
    if isinstance(flavor, kueue.FlavorProblem):
        return placement
    merged = kueue.merged_placement(placement.node_selector, flavor)
    if isinstance(merged, kueue.FlavorProblem):
        return placement
    return replace(placement, node_selector=merged, tolerations=flavor.tolerations)


def _kueue_topology(step: _Step) -> WorkloadView | None:
    """The job's Workload where Kueue runs it with a topology assignment (read once a step, not
    once a worker), else None."""
    view = _own_workload(step) if _kueue_queue(step) is not None else None
    return view if view is not None and view.runs and view.domains else None


def _kueue_rank_placement(
    step: _Step, view: WorkloadView | None, placement: PoolPlacement, rank: int
) -> PoolPlacement:
    """Worker ``rank``'s placement where Kueue placed its pod set by topology (``view``, from
    :func:`_kueue_topology`): the node labels of its rank's domain added (over the pool's, as
    Kueue's TopologyUngater sets them) and the pod set's topology annotations. Unchanged where
    Kueue gave no topology assignment."""
    if view is None:
        return placement
    pod_set, index = kueue.pod_set_of_rank(step.spec.workers, step.spec.accelerator.slices, rank)
    domains = view.domains.get(pod_set, ())
    if index >= len(domains):
        return placement
    return replace(
        placement,
        node_selector={**placement.node_selector, **domains[index]},
        annotations={**placement.annotations, **kueue.tas_pod_annotations(view, pod_set)},
    )


def _kueue_report(step: _Step, pods: Sequence[WorkerPod]) -> None:
    """What Kueue learns from the job: PodsReady, Finished, the quota given back after an
    eviction once no pod is left, and spec.active following runPolicy.suspend."""
    view = _own_workload(step)
    if view is None:
        return
    status, decision = step.status, step.decision
    if any(w.action == "delete" for w in decision.workload):
        return  # a new Workload follows: nothing to tell this one
    if _kueue_queue(step) is None:
        # The label was taken off: Ringmaster admits the job now; the Workload would hold quota.
        decision.workload.append(WorkloadWrite("delete", view.name))
        return
    edit = kueue.StatusEdit(view, step.now)
    if status.phase in FINISHED:
        kind = COMPLETE if status.phase == SUCCEEDED else FAILED_CONDITION
        condition = step.conditions.get(kind)
        message = condition.message if condition is not None else status.phase
        kueue.report_finished(edit, status.phase == SUCCEEDED, message)
    elif view.evicted is not None and not pods:
        kueue.release_after_eviction(edit)
    elif view.runs:
        counts = status.workers
        ready = counts is not None and counts.running + counts.succeeded >= step.spec.workers
        kueue.report_pods_ready(edit, ready)
    patch = edit.patch()
    if patch is not None:
        # First: it carries the resourceVersion read, which a spec patch would move.
        decision.workload.insert(0, WorkloadWrite("status", view.name, patch))
    suspended = step.spec.run_policy.suspend and status.phase not in FINISHED
    if suspended and view.active:
        deactivate = {
            "metadata": {"annotations": {kueue.SUSPENDED_ANNOTATION: "true"}},
            "spec": {"active": False},
        }
        decision.workload.append(WorkloadWrite("patch", view.name, deactivate))
    elif not suspended and not view.active and view.deactivated_by_suspend:
        activate = {
            "metadata": {"annotations": {kueue.SUSPENDED_ANNOTATION: None}},
            "spec": {"active": True},
        }
        decision.workload.append(WorkloadWrite("patch", view.name, activate))
