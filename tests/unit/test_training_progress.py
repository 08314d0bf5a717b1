"""TrainingJob shell pacing: the urgent lane for new jobs, how often worker counts are written,
a new job's first look written with its verdict."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from ringmaster.admission.cycle import QueueingSettings
from ringmaster.controllers.training_lifecycle import reconcile_training
from ringmaster.controllers.training_step import World
from ringmaster.controllers.trainingjob import PROGRESS_SECONDS, TrainingController
from tests.unit.training_world import NOW, TrainingWorld, job, pods_of, ring_planner, spec

pytestmark = pytest.mark.unit
KEY = ("ml", "bert")


def looks():
    """The decisions of three looks at an admitted gang: one pod running, two, then all four."""
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    pods = pods_of(admitted, phase="Pending", node=None)
    current = admitted.status
    out = []
    for running in (1, 2, 4):
        now_pods = [
            replace(p, phase="Running", node="a100-highgpu-8g-0000") if p.rank < running else p
            for p in pods
        ]
        decision = world.decide(job(spec(), current), now_pods)
        out.append((current.to_k8s(), decision))
        current = decision.status
    return out


def controller() -> TrainingController:
    api = SimpleNamespace(contact=0.0)
    return TrainingController(api, ring_planner, QueueingSettings())  # type: ignore[arg-type]


def test_counts_alone_wait_for_the_progress_interval_then_go():
    (current, one_running), (_, two_running), (before_all, all_running) = looks()
    assert one_running.status.phase == "Admitted" and all_running.status.phase == "Running"
    shell = controller()
    # Nothing written lately: the counts go now.
    assert shell._progress_later(KEY, current, one_running) is None
    shell._status_written_at[KEY] = time.monotonic()
    # Written just now: the next count change waits, and asks to be looked at again in time.
    wait = shell._progress_later(KEY, one_running.status.to_k8s(), two_running)
    assert wait is not None and 0 < wait <= PROGRESS_SECONDS
    # A phase change (Running, with its Event) is never held back.
    assert shell._progress_later(KEY, before_all, all_running) is None
    shell._status_written_at[KEY] = time.monotonic() - PROGRESS_SECONDS
    assert shell._progress_later(KEY, one_running.status.to_k8s(), two_running) is None


def test_an_unchanged_status_is_not_held_back_either():
    (_, one_running), *_ = looks()
    shell = controller()
    shell._status_written_at[KEY] = time.monotonic()
    same = one_running.status.to_k8s()
    assert shell._progress_later(KEY, same, one_running) is None


def test_a_new_job_goes_in_the_urgent_lane_and_a_known_one_does_not():
    shell = controller()
    shell.queue.add(("ml", "starting"))  # a status-only look already queued
    shell.job_event(("ml", "new"), None, "1")
    shell.job_event(("ml", "running"), "Running", "2")
    assert list(shell.queue._front) == [("ml", "new")]
    assert list(shell.queue._back) == [("ml", "starting"), ("ml", "running")]


def first_look_and_verdict():
    """A new job's first look (no verdict yet: it joins the queue), then its look with the
    cycle's verdict, as the shell takes them."""
    world = TrainingWorld()
    the_job = job(spec())
    world_view = World(world.snapshot.pools(), {}, None, None)
    first = reconcile_training(the_job, [], world_view, NOW, ring_planner)
    (verdict,) = world.cycle([first.waiting])
    admitted = reconcile_training(
        the_job, [], replace(world_view, verdict=verdict), NOW, ring_planner
    )
    return first, verdict, admitted


def test_a_new_jobs_first_look_is_written_with_its_verdict_once():
    first, verdict, admitted = first_look_and_verdict()
    assert first.waiting is not None and not first.create
    shell = controller()
    assert shell._skip_first_look_write(KEY, {}, None, first)
    # Once: a second look with still no verdict writes as any other.
    assert not shell._skip_first_look_write(KEY, {}, None, first)
    # The verdict's look carries what the first look would have said, the plan included.
    reasons = [e.reason for e in admitted.events]
    assert reasons[:2] == ["StrategyChosen", "Admitted"]
    assert admitted.status.plan is not None and admitted.create
    assert not shell._skip_first_look_write(("ml", "other"), {}, verdict, admitted)


def test_a_job_with_a_status_writes_its_first_look_of_this_process():
    # After a restart the job is not new: what it says must stay true at once.
    first, _, _ = first_look_and_verdict()
    shell = controller()
    assert not shell._skip_first_look_write(KEY, {"phase": "Pending"}, None, first)
