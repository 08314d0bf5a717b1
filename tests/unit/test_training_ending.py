"""A job whose pods go because the job or its namespace is being deleted ends quietly."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.training_world import TrainingWorld, job, pods_of, spec

pytestmark = pytest.mark.unit


def running_job(world: TrainingWorld):
    admitted = world.decide(job(spec()))
    running = world.decide(job(spec(), admitted.status), pods_of(admitted))
    assert running.status.phase == "Running"
    return admitted, running


def terminating(pods):
    return [dataclasses.replace(p, terminating=True) for p in pods]


def test_pods_going_with_their_namespace_are_not_lost_workers():
    world = TrainingWorld()
    admitted, running = running_job(world)
    ending = dataclasses.replace(job(spec(), running.status), ending=True)
    for pods in (terminating(pods_of(admitted)), []):
        decision = world.decide(ending, pods)
        assert decision.status == running.status  # no restart, no attempt spent
        assert decision.status.restarts in (None, 0)
        assert decision.create == [] and decision.delete == [] and decision.apply == []
        assert decision.events == []
        assert decision.release and world.snapshot.promised(("ml", "bert")) is None


def test_the_same_pods_going_without_a_deletion_restart_the_gang():
    world = TrainingWorld()
    admitted, running = running_job(world)
    decision = world.decide(job(spec(), running.status), terminating(pods_of(admitted)))
    assert decision.status.restarts == 1
    assert [e.reason for e in decision.events] == ["Restarted"]


def test_a_waiting_job_in_a_terminating_namespace_creates_nothing():
    world = TrainingWorld()
    ending = dataclasses.replace(job(spec()), ending=True)
    decision = world.decide(ending)
    assert decision.create == [] and decision.events == [] and decision.waiting is None
