"""Every condition describes the current generation, and a finished job's conditions agree
with its phase (issue 14, item 2)."""

from __future__ import annotations

import pytest

from ringmaster.api import TrainingJobStatus, find_condition, set_condition
from ringmaster.controllers.training_step import JobView
from tests.unit.test_inference_lifecycle import condition, decide
from tests.unit.test_inference_llm import LLAMA_70B_INT4, LLM_SIZES, spec_of
from tests.unit.training_world import NOW, TrainingWorld, job, pods_of, spec

pytestmark = pytest.mark.unit


def at_generation(the_job: JobView, generation: int) -> JobView:
    return JobView(the_job.name, the_job.namespace, generation, the_job.spec, the_job.status, NOW)


def stale_unschedulable(status: TrainingJobStatus) -> TrainingJobStatus:
    """What an edit used to leave behind: Schedulable=False NoMatchingPool of generation 1."""
    stale = status.model_copy(deep=True)
    stale.conditions = set_condition(
        stale.conditions, "Schedulable", "False", "NoMatchingPool", "no pool", 1, NOW
    )
    return stale


def test_a_job_that_succeeds_with_a_stale_unschedulable_condition_ends_schedulable():
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    running = world.decide(job(spec(), admitted.status), pods_of(admitted))
    done = world.decide(
        at_generation(job(spec(), stale_unschedulable(running.status)), 3),
        pods_of(admitted, "Succeeded"),
    )
    assert done.status.phase == "Succeeded"
    schedulable = find_condition(done.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.reason) == ("True", "Admitted")
    assert {c.observed_generation for c in done.status.conditions} == {3}


def test_a_finished_job_read_with_stale_conditions_is_corrected_on_its_next_look():
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    done = world.decide(job(spec(), admitted.status), pods_of(admitted, "Succeeded"))
    assert done.status.phase == "Succeeded"
    later = world.decide(at_generation(job(spec(), stale_unschedulable(done.status)), 4))
    assert find_condition(later.status.conditions, "Schedulable").status == "True"
    assert {c.observed_generation for c in later.status.conditions} == {4}
    assert later.events == []


def test_a_job_that_never_ran_keeps_its_reason_when_it_fails():
    # Not admitted, so Schedulable=False is the truth; only a gang that ran is corrected.
    world = TrainingWorld()
    status = stale_unschedulable(TrainingJobStatus(phase="Failed"))
    decision = world.decide(at_generation(job(spec(), status), 2))
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert (schedulable.status, schedulable.observed_generation) == ("False", 2)


def test_an_endpoint_no_replica_can_hold_carries_the_current_generation():
    spec_ = spec_of(LLAMA_70B_INT4, precision="BF16")
    first = decide(spec_, sizes=LLM_SIZES)
    again = decide(spec_, first.status, sizes=LLM_SIZES, generation=5)
    assert condition(again, "Ready").reason == "ModelDoesNotFit"
    assert {c.observed_generation for c in again.status.conditions} == {5}
