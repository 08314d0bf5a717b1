"""The order in which the TrainingJob shell applies a decision, which is what makes a kill at any
moment harmless: the Events are in the API before the status that records what they announce,
and the admission is on record before any of its pods exists (the chaos test, tests/e2e/
test_chaos.py, kills the operator between any two of these)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from ringmaster.admission.cycle import QueueingSettings
from ringmaster.controllers.kubeapi import MAX_EVENT_MESSAGE, KubeApi
from ringmaster.controllers.trainingjob import TrainingController
from tests.unit.training_world import TrainingWorld, job, ring_planner, spec

BODY = {
    "apiVersion": "ringmaster.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "bert", "namespace": "ml", "uid": "uid-1", "generation": 1},
}


class RecordingApi:
    """Stands in for KubeApi where only the order of the writes is looked at."""

    contact = 0.0

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def apply(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("apply", obj["kind"]))
        return obj

    async def post_event(self, involved: Any, type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", reason))

    async def patch_status(self, plural: str, namespace: str, name: str, status: Any) -> str:
        self.calls.append(("status", str(status.get("phase"))))
        return "2"

    async def create(self, namespace: str, obj: dict[str, Any]) -> bool:
        self.calls.append(("create", obj["metadata"]["name"]))
        return True

    async def delete_object(self, namespace: str, kind: str, name: str) -> None:
        self.calls.append(("delete", name))


def test_an_admission_is_announced_then_recorded_then_its_pods_created():
    decision = TrainingWorld().decide(job(spec(workers=2)))
    assert {e.reason for e in decision.events} >= {"Admitted", "StrategyChosen"}
    api = RecordingApi()
    controller = TrainingController(api, ring_planner, QueueingSettings())  # type: ignore[arg-type]
    asyncio.run(controller._apply("ml", "bert", dict(BODY), {}, decision))
    kinds = [kind for kind, _ in api.calls]
    status_at = kinds.index("status")
    assert kinds.count("status") == 1
    # Every Event before the status: a kill after the status write loses none of them.
    assert set(kinds[:status_at]) == {"event"}
    assert ("event", "Admitted") in api.calls[:status_at]
    # Every pod after it: a kill mid-gang leaves an admission on record to complete.
    assert set(kinds[status_at + 1 :]) == {"create"}
    assert ("create", "bert-worker-1") in api.calls


def _api_posting(
    monkeypatch: pytest.MonkeyPatch, outcome: Exception | None = None
) -> tuple[KubeApi, list[tuple[str, dict[str, Any]]]]:
    """A KubeApi whose Event creation is recorded (and fails with ``outcome``)."""
    posted: list[tuple[str, dict[str, Any]]] = []

    def create_namespaced_event(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        posted.append((namespace, body))
        if outcome is not None:
            raise outcome
        return body

    api = KubeApi()
    monkeypatch.setattr(api.core, "create_namespaced_event", create_namespaced_event)
    return api, posted


def test_an_event_is_posted_about_the_object_with_a_bounded_message(monkeypatch):
    api, posted = _api_posting(monkeypatch)
    asyncio.run(api.post_event(BODY, "Normal", "Admitted", "x" * 5000))
    [(namespace, event)] = posted
    assert namespace == "ml"
    assert event["involvedObject"] == {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "name": "bert",
        "namespace": "ml",
        "uid": "uid-1",
    }
    assert (event["type"], event["reason"]) == ("Normal", "Admitted")
    assert len(event["message"]) <= MAX_EVENT_MESSAGE


def test_an_event_the_api_refuses_is_skipped_but_an_unreachable_api_is_an_error(monkeypatch):
    api, posted = _api_posting(monkeypatch, ApiException(status=422, reason="Invalid"))
    asyncio.run(api.post_event(BODY, "Normal", "Admitted", "ok"))  # logged, not raised
    assert len(posted) == 1
    api, posted = _api_posting(monkeypatch, ApiException(status=503, reason="Unavailable"))
    with pytest.raises(ApiException):
        asyncio.run(api.post_event(BODY, "Normal", "Admitted", "ok"))
