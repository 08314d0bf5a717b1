"""A plan's warnings (valid but implausible input) become a condition and one Warning Event each."""

from __future__ import annotations

import pytest

from ringmaster.api import TrainingJobStatus, find_condition
from ringmaster.controllers.reporting import Conditions, plan_warnings, report_plausibility
from tests.unit.training_world import NOW, TrainingWorld, job, pods_of, ring_planner, spec

pytestmark = pytest.mark.unit

STEP = "spec.model.parameters: 1e16 parameters predict a step of 1647790 s (longer than a day)"
MEMORY = "spec.model.parameters: needs 160000 TB per worker, beyond any accelerator"


def warned(*warnings: str):
    def planner(the_spec, machine_type, reducers=None):
        plan = ring_planner(the_spec, machine_type, reducers)
        return plan.model_copy(update={"warnings": list(warnings)})

    return planner


def test_each_warning_is_an_event_once_and_the_condition_names_them_all():
    world = TrainingWorld()
    admitted = world.decide(job(spec()), planner=warned(STEP))
    implausible = [e for e in admitted.events if e.reason == "ImplausibleInput"]
    assert [(e.type, e.message) for e in implausible] == [("Warning", STEP)]
    condition = find_condition(admitted.status.conditions, "Plausible")
    assert (condition.status, condition.reason, condition.message) == (
        "False",
        "ImplausibleInput",
        STEP,
    )
    assert admitted.status.phase == "Admitted"  # valid input runs all the same
    # The next look (a restarted operator too: it reads the condition) repeats nothing.
    running = world.decide(job(spec(), admitted.status), pods_of(admitted), planner=warned(STEP))
    assert not [e for e in running.events if e.reason == "ImplausibleInput"]
    # A second warning appears: only it is posted; both are in the condition.
    both = world.decide(
        job(spec(), running.status), pods_of(admitted), planner=warned(STEP, MEMORY)
    )
    assert [e.message for e in both.events if e.reason == "ImplausibleInput"] == [MEMORY]
    assert find_condition(both.status.conditions, "Plausible").message == f"{STEP}; {MEMORY}"
    # The input is fixed: the condition clears, with no Event.
    fixed = world.decide(job(spec(), both.status), pods_of(admitted), planner=warned())
    assert find_condition(fixed.status.conditions, "Plausible").status == "True"
    assert not [e for e in fixed.events if e.reason == "ImplausibleInput"]


def test_a_plan_without_warnings_adds_no_condition():
    status = TrainingJobStatus()
    conditions = Conditions(status, 1, NOW)
    assert report_plausibility(conditions, plan_warnings(ring_planner(spec(), None))) == []
    assert status.conditions == []
    assert plan_warnings(None) == []
    assert plan_warnings(ring_planner(spec(), None).model_copy(update={"warnings": ["x"]})) == ["x"]
