"""The TrainingJob state machine, with the admission cycle deciding, on simulated node pools."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from ringmaster.api import find_condition
from ringmaster.manifests.training import pinned_host
from tests.unit.training_world import (
    NOW,
    TrainingWorld,
    bound_pod,
    job,
    nodes,
    pods_of,
    ring_planner,
    spec,
)

pytestmark = pytest.mark.unit


def busy(*nodes: str) -> list:
    return [bound_pod(f"busy-{n}", n) for n in nodes]


def test_the_rendezvous_service_comes_once_the_whole_gang_is_bound():
    """Not with the pods: kube-scheduler spreads every pod a Service selects, which slowed the
    binding of 2000 pods 1.7x at 2000 hosts."""
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    pending = pods_of(admitted, phase="Pending", node=None)
    some_bound = [replace(p, node="a100-highgpu-8g-0000") if p.rank < 3 else p for p in pending]
    assert world.decide(job(spec(), admitted.status), some_bound).create == []
    bound = [replace(p, node="a100-highgpu-8g-0000") for p in pending]
    [service] = world.decide(job(spec(), admitted.status), bound).create
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"]["ringmaster.dev/trainingjob"] == "bert"
    running = world.decide(job(spec(), admitted.status), pods_of(admitted))
    assert [o["kind"] for o in running.create] == ["Service"]  # the shell creates it once


def test_a_gang_that_fits_is_admitted_whole_and_recorded_before_its_pods():
    world = TrainingWorld()
    decision = world.decide(job(spec()))
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == [f"bert-worker-{r}" for r in range(4)]
    # The rendezvous Service waits for the gang to be bound (see the next test).
    assert not any(o["kind"] == "Service" for o in decision.create)
    assert decision.status.phase == "Admitted"
    assert decision.status.pool == "a100-highgpu-8g"
    admission = decision.status.admission
    assert (admission.pool, admission.time, admission.attempt) == ("a100-highgpu-8g", NOW, 0)
    assert decision.promise.pool == "a100-highgpu-8g" and decision.promise.workers == 4
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
    world = TrainingWorld(pods=busy("a100-highgpu-8g-0000"))
    decision = world.decide(job(spec()))
    assert decision.create == [] and decision.promise is None
    assert decision.status.phase == "Pending" and decision.status.admission is None
    assert decision.waiting is not None  # in the admission queue
    condition = find_condition(decision.status.conditions, "Schedulable")
    assert (condition.status, condition.reason) == ("False", "InsufficientCapacity")
    assert condition.message.endswith("3 fit now")


def test_two_competing_jobs_cannot_both_take_half_a_pool():
    world = TrainingWorld()
    first = world.decide(job(spec(workers=3), name="a"))
    assert first.status.phase == "Admitted"
    # The first gang's pods are not seen yet: its promise holds their room.
    second = world.decide(job(spec(workers=3), name="b"))
    assert second.create == [] and second.status.phase == "Pending"


def test_a_restart_of_the_operator_recovers_the_admission_from_status():
    world = TrainingWorld()
    admitted = world.decide(job(spec(workers=3), name="a"))
    fresh = TrainingWorld()  # a new process: empty memory, same cluster, nothing created yet
    again = fresh.decide(job(spec(workers=3), admitted.status, name="a"))
    assert [o["metadata"]["name"] for o in again.create if o["kind"] == "Pod"] == [
        f"a-worker-{r}" for r in range(3)
    ]
    assert again.status.admission == admitted.status.admission
    assert fresh.snapshot.promised(("ml", "a")) is not None
    other = fresh.decide(job(spec(workers=3), name="b"))
    assert other.status.phase == "Pending"


def test_a_failed_worker_restarts_the_whole_gang_then_fails_at_the_backoff_limit():
    world = TrainingWorld()
    the_spec = spec(runPolicy={"backoffLimit": 1})
    admitted = world.decide(job(the_spec))
    pods = pods_of(admitted)
    pods[1] = type(pods[1])(pods[1].name, 1, 0, "Failed", "n", False, "exit code 137 (Error)")
    restart = world.decide(job(the_spec, admitted.status), pods)
    assert sorted(restart.delete) == sorted(p.name for p in pods)
    assert restart.status.restarts == 1 and restart.status.admission is None
    assert restart.release and world.snapshot.promised(("ml", "bert")) is None
    assert any(e.reason == "Restarted" and "exit code 137" in e.message for e in restart.events)
    # The next attempt's pods carry attempt 1; the old ones must be gone before it is admitted.
    readmitted = world.decide(job(the_spec, restart.status))
    assert readmitted.status.admission.attempt == 1
    assert all(
        o["metadata"]["annotations"]["ringmaster.dev/attempt"] == "1"
        for o in readmitted.create
        if o["kind"] == "Pod"
    )
    pods = pods_of(readmitted, attempt=1)
    pods[0] = type(pods[0])(pods[0].name, 0, 1, "Failed", "n", False, "exit code 1 (Error)")
    failed = world.decide(job(the_spec, readmitted.status), pods)
    assert failed.status.phase == "Failed"
    assert find_condition(failed.status.conditions, "Failed").reason == "BackoffLimitExceeded"
    assert sorted(failed.delete) == sorted(p.name for p in pods[1:])


def test_running_then_succeeded_then_deleted_after_its_ttl():
    world = TrainingWorld()
    the_spec = spec(runPolicy={"ttlSecondsAfterFinished": 60})
    admitted = world.decide(job(the_spec))
    running = world.decide(job(the_spec, admitted.status), pods_of(admitted))
    assert running.status.phase == "Running"
    assert running.status.start_time == NOW
    assert running.status.workers.running == 4
    done = world.decide(job(the_spec, running.status), pods_of(admitted, "Succeeded"))
    assert done.status.phase == "Succeeded" and done.release
    assert done.status.completion_time == NOW
    later = world.decide(job(the_spec, done.status), [], now=NOW + dt.timedelta(seconds=30))
    assert not later.delete_job and later.requeue_after == pytest.approx(30)
    expired = world.decide(job(the_spec, done.status), [], now=NOW + dt.timedelta(seconds=61))
    assert expired.delete_job


def test_conditions_carry_the_current_generation():
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    edited = job(spec(), admitted.status)
    edited = type(edited)(edited.name, edited.namespace, 7, edited.spec, edited.status, NOW)
    running = world.decide(edited, pods_of(admitted))
    assert {c.observed_generation for c in running.status.conditions} == {7}


def test_active_deadline_fails_a_job_that_runs_too_long():
    world = TrainingWorld()
    the_spec = spec(runPolicy={"activeDeadlineSeconds": 600})
    admitted = world.decide(job(the_spec))
    running = world.decide(job(the_spec, admitted.status), pods_of(admitted))
    late = world.decide(
        job(the_spec, running.status), pods_of(admitted), now=NOW + dt.timedelta(seconds=601)
    )
    assert late.status.phase == "Failed"
    assert find_condition(late.status.conditions, "Failed").reason == "DeadlineExceeded"
    assert len(late.delete) == 4


def test_suspend_deletes_the_pods_and_resume_admits_again():
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    suspended = world.decide(job(spec(runPolicy={"suspend": True}), admitted.status))
    assert suspended.status.phase == "Suspended" and suspended.status.admission is None
    suspending = world.decide(
        job(spec(runPolicy={"suspend": True}), admitted.status), pods_of(admitted)
    )
    assert len(suspending.delete) == 4 and suspending.release
    # Not Suspended while a worker is listed: a resume could take the old gang for its own.
    assert suspending.status.phase != "Suspended" and suspending.status.admission is None
    reason = find_condition(suspending.status.conditions, "Suspended").reason
    assert reason == "Suspending" and suspending.requeue_after
    suspended = world.decide(job(spec(runPolicy={"suspend": True}), suspending.status))
    assert suspended.status.phase == "Suspended"
    resumed = world.decide(job(spec(), suspended.status))
    assert resumed.status.phase == "Admitted"
    assert find_condition(resumed.status.conditions, "Suspended").status == "False"


def test_pods_missing_after_a_crash_are_created_without_duplicating_the_rest():
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    partial = pods_of(admitted)[:2]
    again = world.decide(job(spec(), admitted.status), partial)
    created = [o["metadata"]["name"] for o in again.create if o["kind"] == "Pod"]
    assert created == ["bert-worker-2", "bert-worker-3"]


def test_a_whole_gang_without_a_record_is_adopted_and_a_partial_one_released():
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    pods = [
        type(p)(p.name, p.rank, 0, "Running", "n", False, None, "a100-highgpu-8g")
        for p in pods_of(admitted)
    ]
    adopted = world.decide(job(spec()), pods)
    assert adopted.status.admission.pool == "a100-highgpu-8g"
    assert [o["kind"] for o in adopted.create] == ["Service"]  # bound: its Service (once)
    released = world.decide(job(spec()), pods[:2])
    assert sorted(released.delete) == [p.name for p in pods[:2]]
    assert released.status.phase == "Pending" and released.create == []


def test_a_second_pool_of_the_same_accelerator_takes_the_gang_when_the_first_is_full():
    world = TrainingWorld(
        {"a100-highgpu-8g": 4, "a100-megagpu-16g": 2}, pods=busy("a100-highgpu-8g-0000")
    )
    decision = world.decide(job(spec()))
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
    decision = TrainingWorld().decide(job(the_spec))
    assert decision.create == [] and decision.waiting is None
    assert find_condition(decision.status.conditions, "Schedulable").reason == reason
    assert [e.type for e in decision.events if e.reason == reason] == ["Warning"]


def test_tpu_jobs_get_one_worker_per_host_and_worker_hostnames():
    tpu = spec(4, 4, "tpu-v4-podslice", topology="2x2x4")
    decision = TrainingWorld().decide(job(tpu))
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert len(pods) == 4
    env = {e["name"]: e["value"] for e in pods[3]["spec"]["containers"][0]["env"]}
    assert env["TPU_WORKER_ID"] == "3"
    assert len(env["TPU_WORKER_HOSTNAMES"].split(",")) == 4
    assert pods[0]["spec"]["tolerations"][0]["key"] == "google.com/tpu"


def test_the_priority_class_reaches_the_pods():
    the_spec = spec(template={"image": "trainer:1", "priorityClassName": "research"})
    world = TrainingWorld()
    world.snapshot.set_priority_class("research", 100)
    decision = world.decide(job(the_spec))
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert {p["spec"]["priorityClassName"] for p in pods} == {"research"}


def test_an_admitted_job_keeps_the_room_held_for_it_without_recomputing_it():
    world = TrainingWorld()
    admitted = world.decide(job(spec(workers=3), name="a"))
    held = world.snapshot.promised(("ml", "a"))
    assert held is not None and held == admitted.promise
    calls: list[str | None] = []

    def counting_planner(the_spec, machine_type, reducers=None):
        calls.append(machine_type)
        return ring_planner(the_spec, machine_type, reducers)

    again = world.decide(job(spec(workers=3), admitted.status, name="a"), planner=counting_planner)
    assert again.promise is held  # the snapshot's own promise, not a new one
    assert len(calls) == 1  # status.plan only: no second plan for the gang's option
    # A held promise of another attempt (or pool, or size) is not this gang's: recomputed.
    world.snapshot.promise(replace(held, attempt=held.attempt + 1))
    calls.clear()
    third = world.decide(job(spec(workers=3), admitted.status, name="a"), planner=counting_planner)
    assert third.promise == held and len(calls) == 2


def test_an_accelerator_the_catalog_lacks_waits_with_unknown_accelerator_until_it_is_added():
    from pathlib import Path

    from ringmaster.admission.snapshot import NodeFacts
    from ringmaster.localcluster.pools import PoolTemplate, node_manifest
    from ringmaster.placement.pools import node_from_object
    from ringmaster.planning.catalog import load_catalog

    l4 = PoolTemplate("l4", "g2-standard-24", 24, 96, 2, "nvidia-l4", 2, "NVIDIA-L4")
    world = TrainingWorld()
    for i in range(2):
        node = node_manifest(l4, i)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        world.snapshot.set_node(NodeFacts.from_node(node_from_object(node)))
    the_job = job(spec(workers=2, per_worker=2, accelerator="nvidia-l4"))
    decision = world.decide(the_job)
    assert decision.create == [] and decision.waiting is None and decision.promise is None
    assert decision.status.phase == "Pending" and decision.status.plan is None
    condition = find_condition(decision.status.conditions, "Schedulable")
    assert (condition.status, condition.reason) == ("False", "UnknownAccelerator")
    assert "nvidia-b200" in condition.message and "catalog ConfigMap" in condition.message
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "UnknownAccelerator")]
    # Looked at again with nothing changed: no second Event.
    again = world.decide(job(the_job.spec, decision.status))
    assert again.events == []
    # The catalog gains the accelerator: the same job is admitted on the L4 pool.
    example = Path(__file__).resolve().parents[2] / "examples" / "catalog" / "nvidia-l4.yaml"
    admitted = world.decide(job(the_job.spec, decision.status), catalog=load_catalog(example))
    assert admitted.status.phase == "Admitted" and admitted.status.pool == "l4"
    assert len([o for o in admitted.create if o["kind"] == "Pod"]) == 2


@pytest.mark.parametrize(
    ("hardware", "reason"),
    [
        ({"per_worker": 3}, "UnsupportedHostShape"),
        (
            {"accelerator": "tpu-v4-podslice", "per_worker": 4, "topology": "4x4"},
            "UnsupportedTopology",
        ),
    ],
)
def test_a_host_shape_or_topology_the_catalog_lacks_waits_with_its_reason(hardware, reason):
    workers = 4
    decision = TrainingWorld().decide(job(spec(workers=workers, **hardware)))
    condition = find_condition(decision.status.conditions, "Schedulable")
    assert (condition.status, condition.reason) == ("False", reason)
    assert decision.create == [] and [e.reason for e in decision.events] == [reason]


def pinned_host_of(pod: dict) -> str | None:
    return pinned_host(pod["spec"])


def test_each_worker_is_pinned_to_the_host_its_admission_recorded():
    world = TrainingWorld(pods=busy("a100-highgpu-8g-0001"))
    decision = world.decide(job(spec(workers=3)))
    hosts = decision.status.admission.hosts
    assert len(hosts) == 3 and "a100-highgpu-8g-0001" not in hosts and len(set(hosts)) == 3
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert [pinned_host_of(p) for p in pods] == hosts
    assert decision.promise.hosts == tuple(hosts)
    # The pool's nodeSelector stays: the pin narrows it to one host.
    assert pods[0]["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "a100-highgpu-8g"}
    # A restarted operator creates the missing pods on the same hosts and holds the same ones.
    fresh = TrainingWorld(pods=busy("a100-highgpu-8g-0001"))
    again = fresh.decide(job(spec(workers=3), decision.status), pods_of(decision)[:1])
    assert [pinned_host_of(p) for p in again.create if p["kind"] == "Pod"] == hosts[1:]
    assert fresh.snapshot.promised(("ml", "bert")).hosts == tuple(hosts)


def _lose(world: TrainingWorld, host: str, how: str) -> None:
    """The host goes away, is cordoned, or a foreign pod takes its room."""
    if how == "deleted":
        world.snapshot.remove_node(host)
    elif how == "cordoned":
        node = next(n for n in nodes({"a100-highgpu-8g": 6}) if n.name == host)
        world.snapshot.set_node(replace(node, schedulable=False))
    else:
        world.snapshot.set_pod(bound_pod("squatter", host, gpus=8, namespace="someone-else"))


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("deleted", "is gone"),
        ("cordoned", "is cordoned or not Ready"),
        ("taken", "has no room left for it (other pods took it)"),
    ],
)
def test_a_host_lost_before_its_worker_started_restarts_the_gang_with_no_attempt_spent(how, why):
    world = TrainingWorld({"a100-highgpu-8g": 6})
    # backoffLimit 0: a worker failure would fail the job; the infrastructure's must not.
    the_spec = spec(workers=2, runPolicy={"backoffLimit": 0})
    admitted = world.decide(job(the_spec))
    hosts = admitted.status.admission.hosts
    started = [
        replace(p, node=hosts[p.rank]) if p.rank == 0 else replace(p, node=None)
        for p in pods_of(admitted, phase="Pending")
    ]
    world.create_pods(admitted, bind_to=[hosts[0], None])
    assert world.decide(job(the_spec, admitted.status), started).delete == []
    _lose(world, hosts[1], how)  # the host of worker 1 is lost before it is bound
    restart = world.decide(job(the_spec, admitted.status), started)
    # The attempt's pods go together, the bound one with the unbound one.
    assert sorted(restart.delete) == sorted(p.name for p in started)
    assert restart.status.phase == "Pending" and restart.status.admission is None
    assert not restart.status.restarts and restart.status.requeues == 1
    assert find_condition(restart.status.conditions, "Failed") is None
    [event] = [e for e in restart.events if e.reason == "Requeued"]
    assert f"host {hosts[1]} {why} before worker 1 started there" in event.message
    assert "no attempt spent (0/0 used" in event.message
    assert not [e for e in restart.events if e.reason == "Restarted"]
    # The next attempt is a new one (its pods carry attempt 1) and avoids the lost host.
    readmitted = world.decide(job(the_spec, restart.status))
    assert readmitted.status.admission.attempt == 1
    assert hosts[1] not in readmitted.status.admission.hosts
    assert {
        o["metadata"]["annotations"]["ringmaster.dev/attempt"]
        for o in readmitted.create
        if o["kind"] == "Pod"
    } == {"1"}
    # A worker that fails still spends an attempt: with backoffLimit 0 the job fails.
    pods = pods_of(readmitted, attempt=1)
    pods[0] = replace(pods[0], phase="Failed", exit_detail="exit code 1 (Error)")
    failed = world.decide(job(the_spec, readmitted.status), pods)
    assert failed.status.phase == "Failed"
    assert find_condition(failed.status.conditions, "Failed").reason == "BackoffLimitExceeded"


def test_a_host_lost_under_a_bound_worker_is_left_to_the_worker_failing():
    world = TrainingWorld({"a100-highgpu-8g": 4})
    admitted = world.decide(job(spec(workers=2)))
    hosts = admitted.status.admission.hosts
    running = [replace(p, node=hosts[p.rank]) for p in pods_of(admitted)]
    world.create_pods(admitted, bind_to=hosts)
    world.snapshot.set_node(
        replace(
            next(n for n in nodes({"a100-highgpu-8g": 4}) if n.name == hosts[0]), schedulable=False
        )
    )  # cordoned under a running worker: the worker runs on
    decision = world.decide(job(spec(workers=2), admitted.status), running)
    assert decision.delete == [] and decision.status.phase == "Running"


def failing_planner(spec, machine_type, reducers=None):
    raise ValueError("no layout divides: 16 accelerators, global batch 100 with micro-batch 3")


def test_a_job_the_engine_cannot_plan_waits_with_the_reason_and_creates_nothing():
    world = TrainingWorld()
    decision = world.decide(job(spec(workers=2)), planner=failing_planner)
    assert decision.create == [] and decision.apply == [] and decision.promise is None
    assert decision.status.phase == "Pending" and decision.status.admission is None
    assert world.snapshot.promised(("ml", "bert")) is None
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.reason) == ("False", "PlanFailed")
    assert "no layout divides" in schedulable.message
    planned = find_condition(decision.status.conditions, "Planned")
    assert (planned.status, planned.reason) == ("False", "PlanFailed")
    # One Warning, not one per condition.
    assert [e.reason for e in decision.events] == ["PlanFailed"]
    # Admitted before a new catalog made it unplannable, and no worker exists yet: it goes back
    # to waiting rather than creating workers without a plan.
    admitted = world.decide(job(spec(workers=2)))
    assert admitted.status.phase == "Admitted"
    world.snapshot.release(("ml", "bert"))
    again = world.decide(job(spec(workers=2), admitted.status), planner=failing_planner)
    assert again.create == [] and again.status.admission is None
    assert find_condition(again.status.conditions, "Schedulable").reason == "PlanFailed"
