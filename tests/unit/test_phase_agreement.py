"""A TrainingJob's status never contradicts itself (issue 45, defect 7c: a multislice job seen
Pending with Schedulable=True Admitted across an operator restart): a gang that waits is not
Schedulable=True, one that holds its room (Admitted, Running) is, at every status the decision
function writes. A gang restart kept the Schedulable=True Admitted of the attempt that ended
while the job went back to Pending, until the admission cycle's next word."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ringmaster.api import TrainingJobStatus, find_condition
from ringmaster.controllers.training_step import Decision, WorkerPod
from tests.unit.test_multislice import POOL_A, POOL_B, two_slices, world
from tests.unit.training_world import TrainingWorld, job, pods_of, spec

pytestmark = pytest.mark.unit


def schedulable(status: TrainingJobStatus) -> tuple[str, str] | None:
    condition = find_condition(status.conditions, "Schedulable")
    return (condition.status, condition.reason) if condition else None


def agrees(decision: Decision) -> bool:
    status = decision.status
    said = schedulable(status)
    if status.phase == "Pending":
        return said is None or said[0] == "False"
    if status.phase in ("Admitted", "Running"):
        return said is not None and said[0] == "True"
    return True


def failed(pods: list[WorkerPod], rank: int) -> list[WorkerPod]:
    return [
        replace(p, phase="Failed", exit_detail="exit code 3 (Error)") if p.rank == rank else p
        for p in pods
    ]


def going(pods: list[WorkerPod]) -> list[WorkerPod]:
    return [replace(p, terminating=True) for p in pods]


def test_a_multislice_gang_restarted_across_an_operator_restart_never_says_pending_and_admitted():
    w = world()
    the_spec = two_slices()
    admitted = w.decide(job(the_spec))
    hosts = admitted.status.admission.hosts
    assert admitted.status.admission.slice_pools == [POOL_A, POOL_B]
    running = [replace(p, node=hosts[p.rank]) for p in pods_of(admitted)]
    w.create_pods(admitted, bind_to=hosts)
    looks = [admitted, w.decide(job(the_spec, admitted.status), running)]
    assert looks[-1].status.phase == "Running"

    # The operator is killed; a worker of the second slice fails meanwhile. The operator that
    # starts (a snapshot rebuilt from the cluster) restarts every slice.
    fresh = world()
    fresh.create_pods(admitted, bind_to=hosts)
    restart = fresh.decide(job(the_spec, looks[-1].status), failed(running, 3))
    looks.append(restart)
    assert restart.status.phase == "Pending" and restart.status.restarts == 1
    assert schedulable(restart.status) == ("False", "Restarted")
    message = find_condition(restart.status.conditions, "Schedulable").message
    assert (
        message
        == "worker 3 failed (exit code 3 (Error)); attempt 1 of the gang waits for admission"
    )
    # Its pods go away, and the operator is restarted again while they do.
    again = world()
    looks.append(again.decide(job(the_spec, restart.status), going(failed(running, 3))))
    assert looks[-1].status.phase == "Pending" and looks[-1].create == []
    # Gone: the next attempt is admitted on both slices, and says so (its own Admitted Event).
    readmitted = again.decide(job(the_spec, looks[-1].status))
    looks.append(readmitted)
    assert readmitted.status.phase == "Admitted" and readmitted.status.admission.attempt == 1
    assert schedulable(readmitted.status) == ("True", "Admitted")
    assert "Admitted" in {e.reason for e in readmitted.events}
    assert [agrees(d) for d in looks] == [True] * len(looks)


def test_a_gang_requeued_for_a_lost_host_waits_with_schedulable_false_requeued():
    w = TrainingWorld({"a100-highgpu-8g": 6})
    the_spec = spec(workers=2)
    admitted = w.decide(job(the_spec))
    hosts = admitted.status.admission.hosts
    unbound = [replace(p, node=None, phase="Pending") for p in pods_of(admitted)]
    w.create_pods(admitted)
    w.snapshot.remove_node(hosts[1])
    requeued = w.decide(job(the_spec, admitted.status), unbound)
    assert requeued.status.phase == "Pending" and requeued.status.requeues == 1
    assert schedulable(requeued.status) == ("False", "Requeued")
    assert agrees(requeued)


def test_a_partial_gang_found_without_an_admission_on_record_is_no_admitted_pending_job():
    w = TrainingWorld()
    the_spec = spec(workers=4)
    admitted = w.decide(job(the_spec))
    # Two of four workers, and a status that lost its admission but kept its condition.
    lost = admitted.status.model_copy(update={"admission": None, "phase": "Admitted"})
    partial = w.decide(job(the_spec, lost), pods_of(admitted)[:2])
    assert partial.status.phase == "Pending" and len(partial.delete) == 2
    assert schedulable(partial.status) == ("False", "WaitingForAdmission")


def test_a_job_on_record_as_admitted_without_schedulable_true_is_corrected():
    w = TrainingWorld()
    admitted = w.decide(job(spec(workers=2)))
    stale = admitted.status.model_copy(update={"conditions": []})
    again = w.decide(job(spec(workers=2), stale), pods_of(admitted, phase="Pending"))
    assert again.status.phase == "Admitted" and schedulable(again.status) == ("True", "Admitted")


@pytest.mark.parametrize("backoff_limit", [0, 1, 3])
def test_every_look_of_a_job_that_fails_until_its_limit_agrees(backoff_limit):
    w = TrainingWorld()
    the_spec = spec(workers=2, runPolicy={"backoffLimit": backoff_limit})
    decision = w.decide(job(the_spec))
    looks = [decision]
    for attempt in range(backoff_limit + 1):
        pods = pods_of(decision, attempt=attempt)
        looks.append(w.decide(job(the_spec, decision.status), pods))
        decision = w.decide(job(the_spec, looks[-1].status), failed(pods, 0))
        looks.append(decision)
        if decision.status.phase == "Failed":
            break
        looks.append(w.decide(job(the_spec, decision.status), going(pods)))
        decision = w.decide(job(the_spec, looks[-1].status))
        looks.append(decision)
    assert decision.status.phase == "Failed"
    assert schedulable(decision.status) == ("True", "Admitted")  # it ran: it was schedulable
    assert all(agrees(d) for d in looks), [(d.status.phase, schedulable(d.status)) for d in looks]
