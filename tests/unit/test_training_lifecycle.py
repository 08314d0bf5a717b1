"""The TrainingJob state machine on snapshots of a world of simulated node pools."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from ringmaster.api import TrainingJobSpec, TrainingJobStatus, find_condition
from ringmaster.controllers.training_lifecycle import (
    Capacity,
    JobView,
    Unschedulable,
    WorkerPod,
    choose_pool,
    reconcile_training,
)
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list
from ringmaster.placement.pools import discover_pools, node_from_object, used_by_node

pytestmark = pytest.mark.unit
NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)


def planner(spec, machine_type, reducers=None):
    return {
        "strategy": "Ring",
        "stepSeconds": 0.5,
        "bottleneck": "compute",
        "machineType": machine_type,
    }


def spec(workers=4, per_worker=8, accelerator="nvidia-tesla-a100", topology=None, **extra):
    hardware = {"type": accelerator, "perWorker": per_worker}
    if topology:
        hardware["topology"] = topology
    body = {
        "workers": workers,
        "accelerator": hardware,
        "model": {
            "parameters": 340_000_000,
            "computeSecondsPerStep": 0.3,
            "batchSizePerAccelerator": 32,
        },
        "template": {"image": "trainer:1"},
        **extra,
    }
    return TrainingJobSpec.model_validate(body)


def world(sizes=None, bound=()):
    """Only the pools named (4 A100 8-GPU hosts and a TPU v4 2x2x4 slice by default)."""
    counts = dict.fromkeys(POOLS_BY_NAME, 0)
    counts.update(sizes or {"a100-highgpu-8g": 4, "tpu-v4-2x2x4": 4})
    objects = node_list(counts)["items"]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    pools = discover_pools(node_from_object(o) for o in objects)
    return Capacity(pools=pools, used=used_by_node(bound))


def job(the_spec, status=None, name="bert"):
    return JobView(name, "ml", 1, the_spec, status or TrainingJobStatus())


def pods_of(decision, phase="Running", node="a100-highgpu-8g-0000", attempt=0):
    return [
        WorkerPod(
            o["metadata"]["name"],
            int(o["metadata"]["labels"]["ringmaster.dev/rank"]),
            attempt,
            phase,
            node,
            False,
        )
        for o in decision.create
        if o["kind"] == "Pod"
    ]


def test_a_gang_that_fits_is_admitted_whole():
    decision = reconcile_training(job(spec()), [], world(), NOW, planner)
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == [f"bert-worker-{r}" for r in range(4)]
    assert any(o["kind"] == "Service" for o in decision.create)
    assert decision.status.phase == "Admitted"
    assert decision.status.pool == "a100-highgpu-8g"
    assert decision.admitted_pool == "a100-highgpu-8g"
    assert find_condition(decision.status.conditions, "Schedulable").status == "True"
    assert decision.status.plan.machine_type == "a2-highgpu-8g"
    assert {e.reason for e in decision.events} >= {"Admitted", "StrategyChosen"}
    pod = pods[2]
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "a100-highgpu-8g"}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "4" and env["NPROC_PER_NODE"] == "8"
    assert env["MASTER_ADDR"].startswith("worker-0.bert.ml.svc")


def test_a_gang_too_big_for_free_capacity_waits_without_creating_anything():
    busy = [
        {
            "spec": {
                "nodeName": "a100-highgpu-8g-0000",
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
            "status": {"phase": "Running"},
        }
    ]
    decision = reconcile_training(job(spec()), [], world(bound=busy), NOW, planner)
    assert decision.create == []
    assert decision.status.phase == "Pending"
    condition = find_condition(decision.status.conditions, "Schedulable")
    assert (condition.status, condition.reason) == ("False", "InsufficientCapacity")
    assert "3 fit now" in condition.message


def test_two_competing_jobs_cannot_both_take_half_a_pool():
    first = reconcile_training(job(spec(workers=3), name="a"), [], world(), NOW, planner)
    assert first.status.phase == "Admitted"
    promised = [{"nvidia.com/gpu": Decimal(8)}] * 3
    base = world()
    capacity = Capacity(base.pools, base.used, {"a100-highgpu-8g": promised})
    second = reconcile_training(job(spec(workers=3), name="b"), [], capacity, NOW, planner)
    assert second.create == []
    assert second.status.phase == "Pending"


def test_a_failed_worker_restarts_the_whole_gang_then_fails_at_the_backoff_limit():
    the_spec = spec(runPolicy={"backoffLimit": 1})
    admitted = reconcile_training(job(the_spec), [], world(), NOW, planner)
    pods = pods_of(admitted)
    pods[1] = WorkerPod(pods[1].name, 1, 0, "Failed", "n", False, "exit code 137 (Error)")
    restart = reconcile_training(job(the_spec, admitted.status), pods, world(), NOW, planner)
    assert sorted(restart.delete) == sorted(p.name for p in pods)
    assert restart.status.restarts == 1
    assert any(e.reason == "Restarted" and "exit code 137" in e.message for e in restart.events)
    # The next attempt's pods carry attempt 1; the old ones must be gone before it is admitted.
    readmitted = reconcile_training(job(the_spec, restart.status), [], world(), NOW, planner)
    assert all(
        o["metadata"]["annotations"]["ringmaster.dev/attempt"] == "1"
        for o in readmitted.create
        if o["kind"] == "Pod"
    )
    pods = pods_of(readmitted, attempt=1)
    pods[0] = WorkerPod(pods[0].name, 0, 1, "Failed", "n", False, "exit code 1 (Error)")
    failed = reconcile_training(job(the_spec, readmitted.status), pods, world(), NOW, planner)
    assert failed.status.phase == "Failed"
    assert find_condition(failed.status.conditions, "Failed").reason == "BackoffLimitExceeded"
    assert sorted(failed.delete) == sorted(p.name for p in pods[1:])


def test_running_then_succeeded_then_deleted_after_its_ttl():
    the_spec = spec(runPolicy={"ttlSecondsAfterFinished": 60})
    admitted = reconcile_training(job(the_spec), [], world(), NOW, planner)
    running = reconcile_training(
        job(the_spec, admitted.status), pods_of(admitted), world(), NOW, planner
    )
    assert running.status.phase == "Running"
    assert running.status.start_time == NOW
    assert running.status.workers.running == 4
    done = reconcile_training(
        job(the_spec, running.status), pods_of(admitted, "Succeeded"), world(), NOW, planner
    )
    assert done.status.phase == "Succeeded"
    assert done.status.completion_time == NOW
    later = reconcile_training(
        job(the_spec, done.status), [], world(), NOW + dt.timedelta(seconds=30), planner
    )
    assert not later.delete_job and later.requeue_after == pytest.approx(30)
    expired = reconcile_training(
        job(the_spec, done.status), [], world(), NOW + dt.timedelta(seconds=61), planner
    )
    assert expired.delete_job


def test_active_deadline_fails_a_job_that_runs_too_long():
    the_spec = spec(runPolicy={"activeDeadlineSeconds": 600})
    admitted = reconcile_training(job(the_spec), [], world(), NOW, planner)
    running = reconcile_training(
        job(the_spec, admitted.status), pods_of(admitted), world(), NOW, planner
    )
    late = reconcile_training(
        job(the_spec, running.status),
        pods_of(admitted),
        world(),
        NOW + dt.timedelta(seconds=601),
        planner,
    )
    assert late.status.phase == "Failed"
    assert find_condition(late.status.conditions, "Failed").reason == "DeadlineExceeded"
    assert len(late.delete) == 4


def test_suspend_deletes_the_pods_and_resume_admits_again():
    admitted = reconcile_training(job(spec()), [], world(), NOW, planner)
    suspended_spec = spec(runPolicy={"suspend": True})
    suspended = reconcile_training(
        job(suspended_spec, admitted.status), pods_of(admitted), world(), NOW, planner
    )
    assert suspended.status.phase == "Suspended" and len(suspended.delete) == 4
    resumed = reconcile_training(job(spec(), suspended.status), [], world(), NOW, planner)
    assert resumed.status.phase == "Admitted"
    assert find_condition(resumed.status.conditions, "Suspended").status == "False"


def test_pods_missing_after_a_crash_are_created_without_duplicating_the_rest():
    admitted = reconcile_training(job(spec()), [], world(), NOW, planner)
    partial = pods_of(admitted)[:2]
    again = reconcile_training(job(spec(), admitted.status), partial, world(), NOW, planner)
    assert [o["metadata"]["name"] for o in again.create] == ["bert-worker-2", "bert-worker-3"]


def test_a_second_pool_of_the_same_accelerator_takes_the_gang_when_the_first_is_full():
    busy = [
        {
            "spec": {
                "nodeName": "a100-highgpu-8g-0000",
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
            "status": {"phase": "Running"},
        }
    ]
    capacity = world({"a100-highgpu-8g": 4, "a100-megagpu-16g": 2}, bound=busy)
    decision = reconcile_training(job(spec()), [], capacity, NOW, planner)
    assert decision.status.pool == "a100-megagpu-16g"
    assert decision.status.plan.machine_type == "a2-megagpu-16g"


@pytest.mark.parametrize(
    ("the_spec", "reason"),
    [
        (spec(accelerator="nvidia-tesla-v100"), "NoMatchingPool"),
        (spec(workers=1, per_worker=16), "NoMatchingPool"),
        (spec(2, 4, "tpu-v4-podslice", topology="2x2x2"), "TopologyMismatch"),
    ],
)
def test_jobs_no_pool_can_take_wait_with_a_reason(the_spec, reason):
    assert isinstance(choose_pool(the_spec, world()), Unschedulable)
    decision = reconcile_training(job(the_spec), [], world(), NOW, planner)
    assert decision.create == []
    assert find_condition(decision.status.conditions, "Schedulable").reason == reason


def test_tpu_jobs_get_one_worker_per_host_and_worker_hostnames():
    tpu = spec(4, 4, "tpu-v4-podslice", topology="2x2x4")
    decision = reconcile_training(job(tpu), [], world(), NOW, planner)
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert len(pods) == 4
    env = {e["name"]: e["value"] for e in pods[3]["spec"]["containers"][0]["env"]}
    assert env["TPU_WORKER_ID"] == "3"
    assert len(env["TPU_WORKER_HOSTNAMES"].split(",")) == 4
    assert pods[0]["spec"]["tolerations"][0]["key"] == "google.com/tpu"
