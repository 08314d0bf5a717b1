"""Creations expected: a look right after a gang's creates does not repeat them."""

from __future__ import annotations

import pytest

from ringmaster.controllers.expectations import EXPECT_SECONDS, CreateExpectations
from ringmaster.manifests.naming import ATTEMPT_ANNOTATION

pytestmark = pytest.mark.unit
JOB = ("ml", "bert")


def pod(name: str, attempt: int = 0) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {ATTEMPT_ANNOTATION: str(attempt)}},
    }


SERVICE = {"kind": "Service", "metadata": {"name": "bert"}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_what_was_just_created_is_not_created_again_until_the_ttl_passes():
    clock = Clock()
    expect = CreateExpectations(clock=clock)
    gang = [SERVICE, pod("bert-0"), pod("bert-1")]
    assert expect.still_to_create(JOB, gang) == gang
    expect.created(JOB, gang)
    clock.now += 1.0
    # The index shows one pod so far: the look would create the other and the Service again.
    assert expect.still_to_create(JOB, [SERVICE, pod("bert-1")]) == []
    clock.now += EXPECT_SECONDS
    # Still missing after the watch had every chance to show it: lost, so created again.
    assert expect.still_to_create(JOB, [pod("bert-1")]) == [pod("bert-1")]


def test_a_new_attempt_reuses_pod_names_and_is_created_at_once():
    expect = CreateExpectations(clock=Clock())
    expect.created(JOB, [pod("bert-0", attempt=0)])
    assert expect.still_to_create(JOB, [pod("bert-0", attempt=1)]) == [pod("bert-0", attempt=1)]


def test_jobs_are_apart_and_a_forgotten_job_starts_afresh():
    expect = CreateExpectations(clock=Clock())
    expect.created(JOB, [pod("bert-0")])
    other = ("ml", "gpt")
    assert expect.still_to_create(other, [pod("bert-0")]) == [pod("bert-0")]
    expect.forget(JOB)
    assert expect.still_to_create(JOB, [pod("bert-0")]) == [pod("bert-0")]


def test_a_pod_the_watch_showed_ends_its_expectation_at_once():
    clock = Clock()
    expect = CreateExpectations(clock=clock)
    expect.created(JOB, [SERVICE, pod("bert-0"), pod("bert-1")])
    expect.observed(JOB, pod("bert-0"))
    clock.now += 1.0
    # bert-0 seen and then gone (deleted, evicted): the index is right, so the look creates it.
    assert expect.still_to_create(JOB, [pod("bert-0"), pod("bert-1")]) == [pod("bert-0")]
    # Another attempt's pod of the same name ends nothing.
    expect.observed(JOB, pod("bert-1", attempt=1))
    assert expect.still_to_create(JOB, [pod("bert-1")]) == []


def test_a_watch_far_behind_does_not_bring_repeated_creates():
    """At 2000 hosts the watch ran more than 10 s behind the creates in the burst."""
    clock = Clock()
    expect = CreateExpectations(clock=clock)
    expect.created(JOB, [pod("bert-0")])
    clock.now += 30.0
    assert expect.still_to_create(JOB, [pod("bert-0")]) == []


def test_observing_what_was_never_expected_is_harmless():
    expect = CreateExpectations(clock=Clock())
    expect.observed(JOB, pod("bert-0"))
    expect.created(JOB, [pod("bert-0")])
    expect.observed(JOB, pod("bert-0"))
    assert expect.still_to_create(JOB, [pod("bert-0")]) == [pod("bert-0")]


def test_a_service_no_watch_shows_stays_expected_until_its_owner_is_forgotten():
    clock = Clock()
    expect = CreateExpectations(clock=clock)
    expect.created(JOB, [SERVICE])
    clock.now += 10 * EXPECT_SECONDS
    assert expect.still_to_create(JOB, [SERVICE, pod("bert-0")]) == [pod("bert-0")]
    expect.forget(JOB)
    assert expect.still_to_create(JOB, [SERVICE]) == [SERVICE]
