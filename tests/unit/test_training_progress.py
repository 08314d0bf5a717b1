"""TrainingJob shell pacing: the urgent lane for new jobs, how often worker counts are written."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from ringmaster.admission.cycle import QueueingSettings
from ringmaster.controllers.trainingjob import PROGRESS_SECONDS, TrainingController
from tests.unit.training_world import TrainingWorld, job, pods_of, ring_planner, spec

pytestmark = pytest.mark.unit
KEY = ("ml", "bert")


def looks():
    """The decisions of three looks at an admitted gang: one pod running, two, then all four."""
    world = TrainingWorld()
    admitted = world.decide(job(spec()))
    pods = pods_of(admitted, phase="Pending")
    current = admitted.status
    out = []
    for running in (1, 2, 4):
        now_pods = [replace(p, phase="Running") if p.rank < running else p for p in pods]
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
