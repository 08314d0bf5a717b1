"""A TrainingJob admitted through Kueue's protocol for external job types: the Workload it maps
to, the flavor-to-pod mapping, eviction, PodsReady, Finished and suspension. Pure: the
TrainingJob state machine (training_lifecycle.py, its Kueue path in training_kueue.py) with a
KueueWorld, and admission/kueue.py."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from ringmaster.admission import kueue
from ringmaster.admission.kueue import Flavor, FlavorProblem
from ringmaster.api import TrainingJobStatus, TrainingPlan, find_condition
from ringmaster.controllers.training_lifecycle import reconcile_training
from ringmaster.controllers.training_step import Decision, JobView, KueueWorld, WorkerPod, World
from ringmaster.placement.pools import node_from_object
from tests.unit.training_world import NOW, TrainingWorld, node_objects, ring_planner, spec

pytestmark = pytest.mark.unit

UID = "6f1c0d2e-0000-4000-8000-000000000001"
QUEUE = "team-a"
A100 = "a100-highgpu-8g"
NODEPOOL = "cloud.google.com/gke-nodepool"
SPOT = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
FLAVORS = {
    "a100": Flavor({NODEPOOL: A100}, (SPOT,)),
    "tpu": Flavor({NODEPOOL: "tpu-v4-2x2x4"}),
    "any-a100": Flavor({"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}),
}
WORKLOAD = kueue.workload_name("bert", UID)


def pool_labels(pool: str) -> dict[str, str]:
    """Labels every node of the pool carries, from the local cluster's simulated nodes."""
    nodes = [node_from_object(o) for o in node_objects({A100: 2, "tpu-v4-2x2x4": 2})]
    members = [n.labels for n in nodes if n.identity.pool == pool]
    return {k: v for k, v in members[0].items() if all(m.get(k) == v for m in members[1:])}


def labelled_job(status=None, labels=None, **extra) -> JobView:
    the_labels = {kueue.QUEUE_NAME_LABEL: QUEUE} if labels is None else labels
    return JobView(
        "bert",
        "ml",
        1,
        spec(**extra),
        status or TrainingJobStatus(),
        NOW,
        uid=UID,
        labels=the_labels,
    )


def decide(
    job: JobView,
    workloads=(),
    pods=(),
    planner=ring_planner,
    now=NOW,
    **world_extra: Any,
) -> Decision:
    world = TrainingWorld()
    the_kueue = KueueWorld(
        workloads=list(workloads),
        flavors=world_extra.pop("flavors", FLAVORS),
        pool_labels=pool_labels,
        **world_extra,
    )
    return reconcile_training(
        job, list(pods), World(world.snapshot.pools(), {}, kueue=the_kueue), now, planner
    )


def created_workload(decision: Decision) -> dict[str, Any]:
    [write] = [w for w in decision.workload if w.action == "create"]
    return copy.deepcopy(dict(write.body or {}))


def owned(workload: dict[str, Any]) -> dict[str, Any]:
    """The Workload as the API serves it: with its controller owner reference and a version."""
    body = copy.deepcopy(workload)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "ringmaster.dev/v1alpha1",
            "kind": "TrainingJob",
            "name": "bert",
            "uid": UID,
            "controller": True,
        }
    ]
    body["metadata"].update(resourceVersion="41", generation=1)
    body.setdefault("status", {})
    return body


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-21T11:00:00Z",
    }


def admitted(workload: dict[str, Any], flavor: str = "a100") -> dict[str, Any]:
    body = owned(workload)
    body["status"] = {
        "conditions": [
            condition(
                "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpus"
            ),
            condition("Admitted", "True", "Admitted", "The workload is admitted"),
        ],
        "admission": {
            "clusterQueue": "gpus",
            "podSetAssignments": [
                {"name": "workers", "flavors": {"nvidia.com/gpu": flavor}, "count": 4}
            ],
        },
    }
    return body


def evicted(body: dict[str, Any], reason: str = "Preempted") -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["status"]["conditions"].append(
        condition("Evicted", "True", reason, "Preempted to accommodate a workload (UID: x)")
    )
    return body


def first_workload() -> dict[str, Any]:
    return created_workload(decide(labelled_job()))


def running_pods(decision: Decision, phase: str = "Running", attempt: int = 0) -> list[WorkerPod]:
    return [
        WorkerPod(
            o["metadata"]["name"],
            int(o["metadata"]["labels"]["ringmaster.dev/rank"]),
            attempt,
            phase,
            "a100-highgpu-8g-0000",
            False,
            pool=A100,
        )
        for o in decision.create
        if o["kind"] == "Pod"
    ]


def status_patch(decision: Decision) -> dict[str, Any]:
    [write] = [w for w in decision.workload if w.action == "status"]
    return dict(write.body or {})


# ---------------------------------------------------------------- names and priority


def test_workload_names_are_kueues_own():
    # Kueue's own vectors (pkg/controller/jobframework/workload_names_test.go, v0.19.2).
    assert kueue.workload_name("name", "uid", kind="Job", group="batch") == "job-name-ef3a1"
    long = "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-architect-validation-checked-approved-by-legal-and-ops-dept"  # noqa: E501
    name = kueue.workload_name(long, "uid", kind="Job", group="batch")
    assert len(name) == 253 and name.endswith("-approved-by-l-218b8")
    assert (
        WORKLOAD.startswith("trainingjob-bert-") and len(WORKLOAD) == len("trainingjob-bert-") + 5
    )


def test_priority_follows_kueues_order_of_sources():
    classes = {"high": (1000, False), "normal": (10, True)}
    by_label = kueue.workload_priority(
        {kueue.PRIORITY_CLASS_LABEL: "urgent"}, "high", {"urgent": 5000}, classes
    )
    assert by_label == kueue.WorkloadPriority(
        5000, {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "urgent"}
    )
    by_pods = kueue.workload_priority({}, "high", {}, classes)
    assert by_pods.value == 1000 and by_pods.ref["kind"] == "PriorityClass"
    assert kueue.workload_priority({}, None, {}, classes).ref["name"] == "normal"
    assert kueue.workload_priority({}, None, {}, {}) == kueue.WorkloadPriority(0)
    missing = kueue.workload_priority({kueue.PRIORITY_CLASS_LABEL: "nope"}, None, {}, classes)
    assert isinstance(missing, kueue.PriorityProblem)
    assert missing.reason == "PriorityClassNotFound" and "nope" in missing.message


# ---------------------------------------------------------------- the Workload a job maps to


def test_a_labelled_job_is_planned_then_gets_a_workload_and_nothing_else():
    decision = decide(labelled_job())
    workload = created_workload(decision)
    assert decision.create == [] and decision.waiting is None and decision.promise is None
    assert decision.status.phase == "Pending" and decision.status.plan.strategy == "Ring"
    meta = workload["metadata"]
    assert meta["name"] == WORKLOAD and meta["namespace"] == "ml"
    assert meta["labels"][kueue.JOB_UID_LABEL] == UID
    assert workload["spec"]["queueName"] == QUEUE and workload["spec"]["priority"] == 0
    [workers] = workload["spec"]["podSets"]
    assert workers["name"] == "workers" and workers["count"] == 4
    pod = workers["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    # Ringmaster's pool choice reaches Kueue as a required node affinity over its candidates.
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": NODEPOOL, "operator": "In", "values": [A100]}]}
        ]
    }
    assert "nodeSelector" not in pod
    assert set(workers["template"]) == {"metadata", "spec"}
    assert set(workers["template"]["metadata"]) <= {"labels", "annotations"}
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.reason) == ("False", "QueuedInKueue")
    assert f"LocalQueue {QUEUE}" in schedulable.message and WORKLOAD in schedulable.message


def test_the_workload_counts_the_jobs_own_reducers_as_a_second_pod_set():
    def reduction_server(the_spec, machine_type, reducers=None):
        return TrainingPlan(
            strategy="ReductionServer",
            step_seconds=0.4,
            bottleneck="network",
            machine_type=machine_type,
            reducers_wanted=6,
        )

    workload = created_workload(decide(labelled_job(workers=2), planner=reduction_server))
    workers, reducers = workload["spec"]["podSets"]
    assert (workers["name"], workers["count"]) == ("workers", 2)
    assert (reducers["name"], reducers["count"]) == ("reducers", 6)
    [container] = reducers["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert reducers["template"]["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "n1-highcpu-16"
    }


def test_a_workload_priority_class_label_sets_the_workloads_priority():
    labels = {kueue.QUEUE_NAME_LABEL: QUEUE, kueue.PRIORITY_CLASS_LABEL: "urgent"}
    decision = decide(labelled_job(labels=labels), workload_priority_classes={"urgent": 9000})
    workload = created_workload(decision)
    assert workload["spec"]["priority"] == 9000
    assert workload["spec"]["priorityClassRef"]["name"] == "urgent"
    missing = decide(labelled_job(labels=labels))
    assert not missing.workload
    schedulable = find_condition(missing.status.conditions, "Schedulable")
    assert schedulable.reason == "PriorityClassNotFound"


def test_a_pending_workload_shows_kueues_message_and_writes_nothing():
    body = owned(first_workload())
    message = "couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu in flavor a100, 16 more needed"  # noqa: E501
    body["status"]["conditions"] = [condition("QuotaReserved", "False", "Pending", message)]
    decision = decide(labelled_job(), [body])
    assert decision.workload == [] and decision.create == []
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert schedulable.reason == "QueuedInKueue" and schedulable.message.endswith(message)


def test_a_job_that_changes_shape_while_queued_updates_its_workload():
    body = owned(first_workload())
    decision = decide(labelled_job(workers=2), [body])
    [write] = decision.workload
    assert write.action == "patch" and write.name == WORKLOAD
    assert write.body["spec"]["podSets"][0]["count"] == 2
    # With quota reserved for the old shape, Kueue forbids the change: a new Workload.
    decision = decide(labelled_job(workers=2), [admitted(first_workload())])
    assert [w.action for w in decision.workload] == ["delete"]
    assert decision.create == []


# ---------------------------------------------------------------- admission: flavors to pods


def test_admission_creates_the_gang_on_the_flavors_nodes_with_its_tolerations():
    decision = decide(labelled_job(), [admitted(first_workload())])
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert len(pods) == 4
    assert decision.status.admission.pool == A100 and decision.status.phase == "Admitted"
    assert decision.promise is not None and decision.waiting is None
    for pod in pods:
        assert pod["spec"]["nodeSelector"] == {NODEPOOL: A100}
        assert SPOT in pod["spec"]["tolerations"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "spec"
        ]["tolerations"]
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert schedulable.status == "True" and "by Kueue (ClusterQueue gpus, flavor a100" in (
        schedulable.message
    )
    # PodsReady: not yet.
    patch = status_patch(decision)
    assert patch["metadata"] == {"resourceVersion": "41"}
    ready = next(c for c in patch["status"]["conditions"] if c["type"] == "PodsReady")
    assert (ready["status"], ready["reason"]) == ("False", "WaitForStart")


def test_a_flavor_by_accelerator_label_adds_its_labels_to_the_pool_selector():
    decision = decide(labelled_job(), [admitted(first_workload(), flavor="any-a100")])
    pod = next(o for o in decision.create if o["kind"] == "Pod")
    assert pod["spec"]["nodeSelector"] == {
        NODEPOOL: A100,
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
    }


def test_a_flavor_that_selects_none_of_the_jobs_pools_is_reported_not_run():
    decision = decide(labelled_job(), [admitted(first_workload(), flavor="tpu")])
    assert decision.create == [] and decision.status.admission is None
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert schedulable.reason == "FlavorMismatch"
    assert "tpu-v4-2x2x4" in schedulable.message and A100 in schedulable.message
    assert any(e.type == "Warning" and e.reason == "FlavorMismatch" for e in decision.events)
    gone = decide(labelled_job(), [admitted(first_workload(), flavor="gone")])
    assert find_condition(gone.status.conditions, "Schedulable").reason == (
        "ResourceFlavorNotFound"
    )


def test_flavor_placement_merges_flavors_as_kueue_does():
    body = admitted(first_workload())
    body["status"]["admission"]["podSetAssignments"][0]["flavors"] = {
        "nvidia.com/gpu": "a100",
        "cpu": "any-a100",
    }
    view = kueue.read_workload(body)
    placement = kueue.flavor_placement(view, "workers", FLAVORS)
    assert placement.flavors == ("any-a100", "a100")  # by resource name, each once
    assert dict(placement.node_labels) == {
        NODEPOOL: A100,
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
    }
    conflict = kueue.merged_placement({NODEPOOL: "other"}, placement)
    assert isinstance(conflict, FlavorProblem) and "gke-nodepool" in conflict.message
    clash = {"a": Flavor({NODEPOOL: "x"}), "b": Flavor({NODEPOOL: "y"})}
    body["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"cpu": "a", "memory": "b"}
    assert isinstance(
        kueue.flavor_placement(kueue.read_workload(body), "workers", clash), FlavorProblem
    )


# ---------------------------------------------------------------- running, finished


def _running(body: dict[str, Any]) -> tuple[Decision, list[WorkerPod]]:
    start = decide(labelled_job(), [body])
    pods = running_pods(start)
    later = decide(labelled_job(start.status), [body], pods)
    return later, pods


def test_pods_ready_is_reported_when_every_worker_runs():
    decision, _pods = _running(admitted(first_workload()))
    assert decision.status.phase == "Running"
    ready = next(
        c for c in status_patch(decision)["status"]["conditions"] if c["type"] == "PodsReady"
    )
    assert (ready["status"], ready["reason"]) == ("True", "Started")


def test_a_finished_job_finishes_its_workload():
    body = admitted(first_workload())
    running, pods = _running(body)
    done = [WorkerPod(p.name, p.rank, 0, "Succeeded", p.node, False, pool=A100) for p in pods]
    decision = decide(labelled_job(running.status), [body], done)
    assert decision.status.phase == "Succeeded"
    finished = next(
        c for c in status_patch(decision)["status"]["conditions"] if c["type"] == "Finished"
    )
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    # Already finished: nothing more to write.
    body["status"]["conditions"].append(condition("Finished", "True", "Succeeded"))
    assert decide(labelled_job(decision.status), [body], done).workload == []


# ---------------------------------------------------------------- eviction and suspension


def test_an_evicted_gang_stops_whole_without_spending_an_attempt_then_gives_the_quota_back():
    body = admitted(first_workload())
    running, pods = _running(body)
    restarts = running.status.restarts
    gone = evicted(body)
    stopping = decide(labelled_job(running.status), [gone], pods)
    assert sorted(stopping.delete) == sorted(p.name for p in pods)
    assert stopping.status.admission is None and stopping.status.restarts == restarts
    assert stopping.status.phase == "Pending" and stopping.create == []
    assert stopping.release and stopping.promise is None and stopping.waiting is None
    assert any(e.reason == "Evicted" and e.type == "Warning" for e in stopping.events)
    schedulable = find_condition(stopping.status.conditions, "Schedulable")
    assert schedulable.reason == "QueuedInKueue" and "evicted (Preempted" in schedulable.message
    # Pods still there: the quota is not given back yet.
    assert not [w for w in stopping.workload if w.action == "status"]
    terminating = [WorkerPod(p.name, p.rank, 0, "Running", p.node, True, pool=A100) for p in pods]
    assert not [
        w
        for w in decide(labelled_job(stopping.status), [gone], terminating).workload
        if w.action == "status"
    ]
    # No pod left: Requeued, QuotaReserved=False, no admission, Admitted=False, as Kueue's own.
    released = decide(labelled_job(stopping.status), [gone], [])
    patch = status_patch(released)
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert patch["status"]["admission"] is None
    assert (conditions["Requeued"]["status"], conditions["Requeued"]["reason"]) == (
        "True",
        "Preempted",
    )
    assert (conditions["QuotaReserved"]["status"], conditions["QuotaReserved"]["reason"]) == (
        "False",
        "Pending",
    )
    assert conditions["Admitted"]["status"] == "False"
    assert not any(e.reason == "Evicted" for e in released.events)  # said once
    assert released.status.restarts == restarts and released.create == []


def test_an_eviction_for_pods_ready_timeout_leaves_the_requeue_to_kueues_backoff():
    body = evicted(admitted(first_workload()), reason="PodsReadyTimeout")
    patch = status_patch(decide(labelled_job(), [body], []))
    requeued = next(c for c in patch["status"]["conditions"] if c["type"] == "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")


def test_readmission_after_eviction_runs_the_same_attempt_again():
    body = admitted(first_workload())
    running, _pods = _running(body)
    stopped = decide(labelled_job(running.status), [evicted(body)], [])
    again = decide(labelled_job(stopped.status), [body], [])
    assert len([o for o in again.create if o["kind"] == "Pod"]) == 4
    assert again.status.admission.attempt == 0
    assert not again.status.restarts and not stopped.status.restarts


def test_suspend_deactivates_the_workload_and_resume_activates_it_again():
    body = admitted(first_workload())
    running, pods = _running(body)
    suspended_job = labelled_job(running.status, runPolicy={"suspend": True})
    decision = decide(suspended_job, [body], pods)
    assert sorted(decision.delete) == sorted(p.name for p in pods)
    [patch] = [w for w in decision.workload if w.action == "patch"]
    assert patch.body == {
        "metadata": {"annotations": {kueue.SUSPENDED_ANNOTATION: "true"}},
        "spec": {"active": False},
    }
    # Kueue evicts the deactivated Workload; once no pod is left, the quota goes back.
    inactive = evicted(body, reason="Deactivated")
    inactive["spec"]["active"] = False
    inactive["metadata"]["annotations"] = {kueue.SUSPENDED_ANNOTATION: "true"}
    gone = decide(labelled_job(decision.status, runPolicy={"suspend": True}), [inactive], [])
    assert gone.status.phase == "Suspended"
    requeued = next(
        c for c in status_patch(gone)["status"]["conditions"] if c["type"] == "Requeued"
    )
    assert (requeued["status"], requeued["reason"]) == ("False", "Deactivated")
    resumed = decide(labelled_job(gone.status), [inactive], [])
    [activate] = [w for w in resumed.workload if w.action == "patch"]
    assert activate.body["spec"] == {"active": True}
    # Kueue deactivated it on its own: Ringmaster does not undo that.
    inactive["metadata"]["annotations"] = {}
    assert not [
        w for w in decide(labelled_job(gone.status), [inactive], []).workload if w.action == "patch"
    ]


# ---------------------------------------------------------------- without Kueue or the label


def test_without_kueue_installed_a_labelled_job_is_admitted_as_today():
    world = TrainingWorld()
    decision = world.decide(labelled_job())
    assert decision.workload == []
    assert len([o for o in decision.create if o["kind"] == "Pod"]) == 4


def test_without_the_label_the_job_joins_ringmasters_own_queue_and_a_stale_workload_goes():
    decision = decide(labelled_job(labels={}))
    assert decision.workload == [] and decision.waiting is not None
    stale = decide(labelled_job(labels={}), [owned(first_workload())])
    assert [w.action for w in stale.workload] == ["delete"]


def test_a_workload_of_an_earlier_job_of_the_same_name_is_not_this_jobs():
    other = owned(first_workload())
    other["metadata"]["ownerReferences"][0]["uid"] = "another"
    decision = decide(labelled_job(), [other])
    assert [w.action for w in decision.workload] == ["create"]


def test_status_edit_moves_the_transition_time_only_when_the_status_changes():
    body = admitted(first_workload())
    later = NOW + dt.timedelta(minutes=5)
    edit = kueue.StatusEdit(kueue.read_workload(body), later)
    edit.set("QuotaReserved", "True", "QuotaReserved", "new words")
    kept = edit.find("QuotaReserved")
    assert kept["lastTransitionTime"] == "2026-11-21T11:00:00Z" and kept["message"] == "new words"
    edit.set("QuotaReserved", "False", "Pending", "gone")
    assert edit.find("QuotaReserved")["lastTransitionTime"] == "2026-11-21T12:05:00Z"
    assert kueue.StatusEdit(kueue.read_workload(body), later).patch() is None


# ---------------------------------------------------------------- the shell's view of Kueue


def test_workloads_are_indexed_by_the_training_job_that_controls_them():
    from ringmaster.controllers.kueue_workloads import owner_job, ringmaster_kueue_workloads

    body = owned(first_workload())
    assert owner_job(body["metadata"]) == "bert"
    assert set(ringmaster_kueue_workloads("ml", body["metadata"], body)) == {("ml", "bert")}
    for change in (
        {"controller": False},
        {"kind": "Job"},
        {"apiVersion": "batch/v1"},
    ):
        other = copy.deepcopy(body)
        other["metadata"]["ownerReferences"][0].update(change)
        assert owner_job(other["metadata"]) is None
        assert ringmaster_kueue_workloads("ml", other["metadata"], other) == {}


def test_kueue_counts_as_installed_only_while_its_workload_crd_serves_v1beta2():
    from ringmaster.controllers.kueue_workloads import workload_crd_served

    crd = {
        "metadata": {"name": "workloads.kueue.x-k8s.io"},
        "spec": {
            "versions": [{"name": "v1beta1", "served": True}, {"name": "v1beta2", "served": True}]
        },
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }
    assert workload_crd_served(crd)
    not_yet = copy.deepcopy(crd)
    not_yet["status"]["conditions"][0]["status"] = "False"
    assert not workload_crd_served(not_yet)
    older = copy.deepcopy(crd)
    older["spec"]["versions"] = [{"name": "v1beta1", "served": True}]
    assert not workload_crd_served(older)
