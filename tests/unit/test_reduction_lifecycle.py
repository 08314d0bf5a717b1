"""The ReductionServerPool state machine, and how a TrainingJob uses its reducers."""

from __future__ import annotations

import datetime as dt

import pytest

from ringmaster.admission.snapshot import PodFacts
from ringmaster.api import (
    ReductionServerPoolSpec,
    ReductionServerPoolStatus,
    TrainingJobSpec,
    TrainingJobStatus,
    TrainingPlan,
    find_condition,
)
from ringmaster.controllers.reduction_lifecycle import (
    BoundJob,
    PoolView,
    ReducerPods,
    reconcile_reduction_pool,
)
from ringmaster.controllers.training_step import JobView, ReducerPool, WorkerPod
from tests.unit.training_world import REDUCER_REQUEST, TrainingWorld

pytestmark = pytest.mark.unit
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def pool(replicas=None, max_replicas=64, grace=300, status=None):
    spec = {"image": "reducer:1", "maxReplicas": max_replicas, "scaleDownGracePeriodSeconds": grace}
    if replicas is not None:
        spec["replicas"] = replicas
    return PoolView(
        "shared",
        "ml",
        1,
        ReductionServerPoolSpec.model_validate(spec),
        status or ReductionServerPoolStatus(),
    )


def statefulset_replicas(decision):
    return next(o for o in decision.apply if o["kind"] == "StatefulSet")["spec"]["replicas"]


def test_a_fixed_pool_has_its_replicas_whatever_the_jobs():
    decision = reconcile_reduction_pool(
        pool(replicas=4), [BoundJob("a", 25)], ReducerPods(), 32.0, NOW
    )
    assert statefulset_replicas(decision) == 4 and decision.status.replicas == 4


def test_a_sized_pool_serves_its_largest_job_within_max_replicas():
    jobs = [BoundJob("small", 8), BoundJob("large", 25), BoundJob("no-plan-yet", None)]
    decision = reconcile_reduction_pool(pool(), jobs, ReducerPods(), 32.0, NOW)
    assert decision.status.replicas == 25
    assert decision.status.bound_jobs == ["large", "no-plan-yet", "small"]
    capped = reconcile_reduction_pool(pool(max_replicas=16), jobs, ReducerPods(), 32.0, NOW)
    assert capped.status.replicas == 16


def test_an_unused_sized_pool_keeps_its_reducers_for_the_grace_period_then_scales_to_zero():
    busy = reconcile_reduction_pool(pool(), [BoundJob("a", 10)], ReducerPods(), 32.0, NOW)
    idle = reconcile_reduction_pool(pool(status=busy.status), [], ReducerPods(), 32.0, NOW)
    assert idle.status.replicas == 10 and idle.status.idle_since == NOW
    assert idle.requeue_after == pytest.approx(300)
    later = NOW + dt.timedelta(seconds=301)
    gone = reconcile_reduction_pool(pool(status=idle.status), [], ReducerPods(), 32.0, later)
    assert gone.status.replicas == 0 and statefulset_replicas(gone) == 0
    assert any(e.reason == "Resized" and "10 -> 0" in e.message for e in gone.events)
    # A job coming back within the grace period finds the reducers and clears the idle mark.
    back = reconcile_reduction_pool(
        pool(status=idle.status), [BoundJob("b", 10)], ReducerPods(), 32.0, NOW
    )
    assert back.status.idle_since is None and back.status.replicas == 10


def test_status_lists_ready_reducers_their_bandwidth_and_why_others_wait():
    pods = ReducerPods(ready_ordinals=(0, 2, 3), unschedulable=2)
    decision = reconcile_reduction_pool(pool(replicas=5), [BoundJob("a", 5)], pods, 32.0, NOW)
    status = decision.status
    assert status.ready_replicas == 3
    assert status.aggregate_bandwidth_gbps == pytest.approx(96.0)
    assert status.endpoints[1] == "shared-2.shared.ml.svc.cluster.local:5000"
    ready = find_condition(status.conditions, "Ready")
    assert (ready.status, ready.reason) == ("False", "Unschedulable")
    assert "2 cannot be scheduled" in ready.message and "n1-highcpu-16" in ready.message
    assert [e.reason for e in decision.events] == ["Unschedulable"]
    sts = next(o for o in decision.apply if o["kind"] == "StatefulSet")
    assert sts["spec"]["template"]["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "n1-highcpu-16"
    }


# ---- the TrainingJob side


def rs_planner(spec, machine_type, reducers=None):
    count = reducers.replicas if reducers else 25
    return TrainingPlan(
        strategy="ReductionServer",
        step_seconds=0.19,
        bottleneck="compute",
        reducers=count,
        reducers_wanted=25,
        machine_type=machine_type,
    )


def job(pool_name=None, status=None, run_policy=None):
    communication = {"strategy": "ReductionServer"}
    if pool_name:
        communication["reductionServer"] = {"poolName": pool_name}
    spec = TrainingJobSpec.model_validate(
        {
            "workers": 2,
            "accelerator": {"type": "nvidia-tesla-a100", "perWorker": 8},
            "model": {
                "parameters": 340_000_000,
                "computeSecondsPerStep": 0.3,
                "batchSizePerAccelerator": 32,
            },
            "communication": communication,
            "template": {"image": "trainer:1"},
            "runPolicy": run_policy or {},
        }
    )
    return JobView("bert", "ml", 1, spec, status or TrainingJobStatus(), NOW)


def world(free_reducer_hosts=32, a100_hosts=4):
    """4 A100 hosts and the 32 CPU hosts of the reducer pool, some taken by other reducers."""
    taken = [
        PodFacts("other", f"r-{i}", (), node=f"reducers-{i:04d}", reducer_pool=("other", "x"))
        for i in range(32 - free_reducer_hosts)
    ]
    return TrainingWorld({"a100-highgpu-8g": a100_hosts, "reducers": 32}, pods=taken)


ENDPOINTS = tuple(f"r-{i}.r.ml.svc.cluster.local:5000" for i in range(25))


def test_a_job_without_a_pool_is_admitted_with_its_reducers_and_starts_when_they_serve():
    the_world = world()
    assert the_world.snapshot.free_reducer_hosts("n1-highcpu-16") == 32
    first = the_world.decide(job(), planner=rs_planner)
    owned = [o for o in first.apply if o["kind"] == "ReductionServerPool"]
    assert owned[0]["metadata"]["name"] == "bert-reducers"
    assert owned[0]["spec"]["replicas"] == 25
    # Workers and reducers are one gang: both are held, no worker starts before its reducers.
    assert first.create == [] and first.status.phase == "Admitted"
    assert first.status.admission.pool == "a100-highgpu-8g"
    assert first.promise.workers == 2 and first.promise.reducers == 25
    assert the_world.snapshot.free_reducer_hosts("n1-highcpu-16") == 7
    ready_condition = find_condition(first.status.conditions, "ReductionServerReady")
    assert ready_condition.reason == "ReducersNotReady"
    starting = {
        "bert-reducers": ReducerPool("bert-reducers", 25, 11, ENDPOINTS[:11], "n1-highcpu-16")
    }
    waiting = the_world.decide(job(status=first.status), [], starting, planner=rs_planner)
    assert waiting.create == []
    assert "11/25" in find_condition(waiting.status.conditions, "ReductionServerReady").message
    assert not any(e.reason == "ReducersNotReady" for e in waiting.events)  # progress, quietly
    ready = {"bert-reducers": ReducerPool("bert-reducers", 25, 25, ENDPOINTS, "n1-highcpu-16")}
    admitted = the_world.decide(job(status=waiting.status), [], ready, planner=rs_planner)
    pods = [o for o in admitted.create if o["kind"] == "Pod"]
    assert len(pods) == 2
    env = {e["name"]: e["value"] for e in pods[1]["spec"]["containers"][0]["env"]}
    assert env["RINGMASTER_REDUCTION_SERVERS"].split(",") == list(ENDPOINTS)
    assert env["DMLC_NUM_SERVER"] == "25" and env["DMLC_WORKER_ID"] == "1"
    assert admitted.status.reduction_server_pool == "bert-reducers"


def test_promised_reducers_count_once_whether_promised_unbound_or_bound():
    the_world = world()
    the_world.decide(job(), planner=rs_planner)
    snapshot = the_world.snapshot
    assert snapshot.free_reducer_hosts("n1-highcpu-16") == 7
    # Ten reducer pods appear unbound, then five of them are bound: still 25 hosts held.
    for i in range(10):
        snapshot.set_pod(
            PodFacts(
                "ml",
                f"bert-reducers-{i}",
                tuple(sorted((k, v) for k, v in REDUCER_REQUEST.items())),
                machine="n1-highcpu-16",
                reducer_pool=("ml", "bert-reducers"),
            )
        )
    assert snapshot.free_reducer_hosts("n1-highcpu-16") == 7
    for i in range(5):
        snapshot.set_pod(
            PodFacts(
                "ml",
                f"bert-reducers-{i}",
                tuple(sorted((k, v) for k, v in REDUCER_REQUEST.items())),
                node=f"reducers-{i:04d}",
                machine="n1-highcpu-16",
                reducer_pool=("ml", "bert-reducers"),
            )
        )
    assert snapshot.free_reducer_hosts("n1-highcpu-16") == 7


def test_a_named_pool_that_does_not_exist_keeps_the_job_waiting_with_a_reason():
    decision = world().decide(job("shared"), planner=rs_planner)
    assert decision.apply == [] and decision.create == [] and decision.waiting is None
    condition = find_condition(decision.status.conditions, "Schedulable")
    assert condition.reason == "ReductionServerPoolNotFound" and "shared" in condition.message


def test_the_plan_uses_the_pool_that_exists_and_lost_reducers_are_reported_once():
    the_world = world()
    small = {"shared": ReducerPool("shared", 8, 8, ENDPOINTS[:8], "n1-highcpu-16")}
    admitted = the_world.decide(job("shared"), [], small, planner=rs_planner)
    assert admitted.status.plan.reducers == 8
    assert admitted.promise.reducers == 0  # a shared pool holds its own hosts
    running_pods = [
        WorkerPod(o["metadata"]["name"], r, 0, "Running", "n", False)
        for r, o in enumerate(p for p in admitted.create if p["kind"] == "Pod")
    ]
    running = the_world.decide(
        job("shared", admitted.status), running_pods, small, planner=rs_planner
    )
    assert running.status.phase == "Running"
    lost = {"shared": ReducerPool("shared", 8, 5, ENDPOINTS[:5], "n1-highcpu-16")}
    degraded = the_world.decide(
        job("shared", running.status), running_pods, lost, planner=rs_planner
    )
    assert degraded.status.phase == "Running" and degraded.delete == []
    assert find_condition(degraded.status.conditions, "ReductionServerReady").status == "False"
    assert [e.reason for e in degraded.events] == ["ReducersLost"]
    again = the_world.decide(job("shared", degraded.status), running_pods, lost, planner=rs_planner)
    assert again.events == []


@pytest.mark.parametrize(
    ("the_world", "reason"),
    [
        (world(free_reducer_hosts=24), "InsufficientReducerCapacity"),
        (world(a100_hosts=1), "InsufficientCapacity"),
    ],
)
def test_a_job_creates_no_reducers_unless_its_whole_gang_fits(the_world, reason):
    decision = the_world.decide(job(), planner=rs_planner)
    assert decision.apply == [] and decision.create == [] and decision.promise is None
    condition = find_condition(decision.status.conditions, "Schedulable")
    assert (condition.status, condition.reason) == ("False", reason)


# ---- a shared pool's bandwidth, divided among the jobs that run on it at once


def test_a_jobs_share_counts_the_other_running_jobs_and_itself():
    shared = ReducerPool("shared", 8, 8, ENDPOINTS[:8], "n1-highcpu-16", running_jobs=frozenset())
    assert shared.share_for("bert") == 1.0
    two = ReducerPool("shared", 8, 8, (), "n1-highcpu-16", running_jobs=frozenset({"gpt"}))
    assert two.share_for("bert") == pytest.approx(0.5)  # about to start: counts itself in
    assert two.share_for("gpt") == 1.0  # already running alone
    three = ReducerPool("s", 8, 8, (), "n1-highcpu-16", running_jobs=frozenset({"a", "b", "c"}))
    assert three.share_for("a") == pytest.approx(1 / 3)


def share_seen_by(planner_calls):
    def planner(spec, machine_type, reducers=None):
        planner_calls.append(reducers.share if reducers else None)
        return rs_planner(spec, machine_type, reducers)

    return planner


def test_a_job_on_a_shared_pool_is_planned_with_its_share_and_its_own_pool_with_all_of_it():
    the_world = world()
    calls: list[float | None] = []
    busy = {
        "shared": ReducerPool(
            "shared", 8, 8, ENDPOINTS[:8], "n1-highcpu-16", running_jobs=frozenset({"gpt", "t5"})
        )
    }
    the_world.decide(job("shared"), [], busy, planner=share_seen_by(calls))
    assert calls and calls == pytest.approx([1 / 3] * len(calls))
    calls.clear()
    own = {"bert-reducers": ReducerPool("bert-reducers", 25, 25, ENDPOINTS, "n1-highcpu-16")}
    the_world.decide(job(), [], own, planner=share_seen_by(calls))
    assert calls and calls == [1.0] * len(calls)


def test_the_real_plan_on_a_shared_pool_asks_for_more_reducers_and_says_its_share():
    from ringmaster.controllers.trainingjob import status_plan

    spec = job("shared").spec
    alone = ReducerPool("shared", 0, 0, (), "n1-highcpu-16")
    shared = ReducerPool("shared", 0, 0, (), "n1-highcpu-16", share=0.5)
    plan_alone = status_plan(spec, "a2-highgpu-8g", alone)
    plan_shared = status_plan(spec, "a2-highgpu-8g", shared)
    assert plan_alone.reducer_share is None
    assert plan_shared.reducer_share == pytest.approx(0.5)
    # Each reducer gives this job half its bandwidth: the bandwidth rule asks for twice as many.
    assert plan_shared.reducers_wanted == pytest.approx(2 * plan_alone.reducers_wanted, abs=1)

    # Half of two reducers is slower than both of them, and as fast as all of one.
    def step(count, share):
        pool = ReducerPool("shared", count, count, ENDPOINTS[:count], "n1-highcpu-16", share=share)
        return status_plan(spec, "a2-highgpu-8g", pool).step_seconds

    assert step(2, 0.5) > step(2, 1.0)
    assert step(2, 0.5) == pytest.approx(step(1, 1.0))


def test_the_pool_reports_its_running_jobs_and_is_sized_for_them_at_their_share():
    jobs = [BoundJob("a", 26, running=True), BoundJob("b", 14, running=True), BoundJob("c", 7)]
    decision = reconcile_reduction_pool(pool(), jobs, ReducerPods(), 32.0, NOW)
    assert decision.status.running_jobs == ["a", "b"]
    assert decision.status.bound_jobs == ["a", "b", "c"]
    assert decision.status.replicas == 26


def test_a_shared_pool_growing_for_a_new_job_is_no_lost_reducer():
    the_world = world()
    small = {"shared": ReducerPool("shared", 8, 8, ENDPOINTS[:8], "n1-highcpu-16")}
    admitted = the_world.decide(job("shared"), [], small, planner=rs_planner)
    pods = [o for o in admitted.create if o["kind"] == "Pod"]
    running_pods = [WorkerPod.from_object(p) for p in pods]
    assert {p.reducer_endpoints for p in running_pods} == {ENDPOINTS[:8]}
    running_pods = [
        WorkerPod(p.name, p.rank, p.attempt, "Running", "n", False, reducer_endpoints=ENDPOINTS[:8])
        for p in running_pods
    ]
    running = the_world.decide(job("shared", admitted.status), running_pods, small, rs_planner)
    # Another job starts: the pool grows to 16, 8 of them still starting.
    growing = {
        "shared": ReducerPool(
            "shared",
            16,
            12,
            ENDPOINTS[:12],
            "n1-highcpu-16",
            running_jobs=frozenset({"bert", "gpt"}),
        )
    }
    grown = the_world.decide(job("shared", running.status), running_pods, growing, rs_planner)
    assert find_condition(grown.status.conditions, "ReductionServerReady").status == "True"
    assert not any(e.reason == "ReducersLost" for e in grown.events)
    # One of the 8 it started with goes (another reducer is up): that is a loss.
    lost_one = ENDPOINTS[1:8] + ENDPOINTS[8:13]
    lost = {"shared": ReducerPool("shared", 16, 12, lost_one, "n1-highcpu-16")}
    degraded = the_world.decide(job("shared", grown.status), running_pods, lost, rs_planner)
    assert [e.reason for e in degraded.events] == ["ReducersLost"]


def test_running_workers_are_planned_with_the_reducers_they_use_not_the_pool_size():
    the_world = world()
    calls: list[int] = []

    def planner(spec, machine_type, reducers=None):
        calls.append(reducers.replicas if reducers else 0)
        return rs_planner(spec, machine_type, reducers)

    eight = ENDPOINTS[:8]
    pods = [
        WorkerPod(f"bert-{r}", r, 0, "Running", "n", False, reducer_endpoints=eight) for r in (0, 1)
    ]
    status = TrainingJobStatus.model_validate(
        {
            "phase": "Running",
            "pool": "a100-highgpu-8g",
            "admission": {"pool": "a100-highgpu-8g", "time": NOW.isoformat(), "attempt": 0},
        }
    )
    grown = {"shared": ReducerPool("shared", 16, 16, ENDPOINTS[:16], "n1-highcpu-16")}
    the_world.decide(job("shared", status), pods, grown, planner=planner)
    assert calls and set(calls) == {8}  # the 8 it started with, not the pool's 16
    calls.clear()
    shrunk = {"shared": ReducerPool("shared", 2, 2, ENDPOINTS[:2], "n1-highcpu-16")}
    the_world.decide(job("shared", status), pods, shrunk, planner=planner)
    assert calls and set(calls) == {2}  # scaled down: 2 of its 8 still serve


def _owned_replicas(decision) -> list[int]:
    return [o["spec"]["replicas"] for o in decision.apply if o["kind"] == "ReductionServerPool"]


def test_suspend_and_a_restart_release_the_jobs_own_reducers_and_admission_brings_them_back():
    the_world = world()
    ready = {"bert-reducers": ReducerPool("bert-reducers", 25, 25, ENDPOINTS, "n1-highcpu-16")}
    admitted = the_world.decide(job(), [], ready, planner=rs_planner)
    assert _owned_replicas(admitted) == [25] and admitted.status.phase == "Admitted"
    running = [
        WorkerPod(o["metadata"]["name"], rank, 0, "Running", f"a100-highgpu-8g-000{rank}", False)
        for rank, o in enumerate(o for o in admitted.create if o["kind"] == "Pod")
    ]
    # Suspended: the workers go, and so do its reducers (the pool scales to zero).
    suspend = {"suspend": True}
    suspending = the_world.decide(
        job(status=admitted.status, run_policy=suspend), running, ready, planner=rs_planner
    )
    assert sorted(suspending.delete) == sorted(p.name for p in running)
    assert _owned_replicas(suspending) == [0]
    suspended = the_world.decide(
        job(status=suspending.status, run_policy=suspend), [], ready, planner=rs_planner
    )
    assert suspended.status.phase == "Suspended"
    schedulable = find_condition(suspended.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.reason) == ("False", "Suspended")
    # Scaled to zero: nothing more to release while it stays suspended.
    idle = {"bert-reducers": ReducerPool("bert-reducers", 0, 0, (), "n1-highcpu-16")}
    still = the_world.decide(
        job(status=suspended.status, run_policy=suspend), [], idle, planner=rs_planner
    )
    assert _owned_replicas(still) == []
    # Resumed: admitted again, and the pool is asked for its reducers again.
    resumed = the_world.decide(job(status=still.status), [], idle, planner=rs_planner)
    assert resumed.status.phase == "Admitted" and _owned_replicas(resumed) == [25]
    assert find_condition(resumed.status.conditions, "Schedulable").status == "True"
    # A worker fails: the gang restarts and its reducers go with it until the next admission.
    back = the_world.decide(job(status=resumed.status), [], ready, planner=rs_planner)
    pods = [
        WorkerPod(o["metadata"]["name"], rank, 0, "Running", f"a100-highgpu-8g-000{rank}", False)
        for rank, o in enumerate(o for o in back.create if o["kind"] == "Pod")
    ]
    pods[1] = WorkerPod(pods[1].name, 1, 0, "Failed", pods[1].node, False, "exit code 1 (Error)")
    restart = the_world.decide(job(status=back.status), pods, ready, planner=rs_planner)
    assert restart.status.restarts == 1 and _owned_replicas(restart) == [0]
    assert sorted(restart.delete) == sorted(p.name for p in pods)
