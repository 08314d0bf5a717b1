"""The kopf settings the operator relies on for speed hold only while no change handler exists."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from ringmaster.controllers import (  # noqa: F401  (importing registers the handlers)
    inferenceendpoint,
    reductionserverpool,
    settings,
    trainingjob,
)
from ringmaster.manifests.naming import MANAGED_BY, OPERATOR, ROLE_LABEL, TRAINING_JOB_LABEL

pytestmark = pytest.mark.unit


def test_no_change_handler_timer_or_daemon_needs_a_diff_base():
    registry = kopf.get_default_registry()
    assert registry._changing.get_all_handlers() == []
    assert registry._spawning.get_all_handlers() == []
    assert registry._watching.get_all_handlers(), "the controllers' event handlers registered"


def test_no_diff_base_is_built_or_kept():
    storage = settings.NoDiffBase()
    body = kopf.Body({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch


def test_the_operator_settings_turn_the_diff_base_off():
    operator_settings = kopf.OperatorSettings()
    settings.configure(settings=operator_settings)
    assert isinstance(operator_settings.persistence.diffbase_storage, settings.NoDiffBase)


def handlers_called(plural: str, body: dict[str, Any]) -> set[str]:
    """The index and event handlers kopf calls for an event of this object (the label and field
    filters the operator uses: a value, PRESENT, ABSENT)."""
    registry = kopf.get_default_registry()
    handlers = registry._indexing.get_all_handlers() + registry._watching.get_all_handlers()
    labels = body["metadata"].get("labels") or {}

    def holds(wanted: Any, present: bool, value: Any) -> bool:
        if wanted is kopf.PRESENT:
            return present
        if wanted is kopf.ABSENT:
            return not present
        return present and value == wanted

    def field(path: tuple[str, ...]) -> tuple[bool, Any]:
        value: Any = body
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return False, None
            value = value[part]
        return True, value

    return {
        str(h.id)
        for h in handlers
        if h.selector is not None
        and h.selector.any_name == plural
        and all(holds(v, k in labels, labels.get(k)) for k, v in (h.labels or {}).items())
        and (h.field is None or holds(h.value, *field(tuple(h.field))))
    }


def test_kopf_calls_two_functions_per_worker_pod_or_trainingjob_event():
    """kopf's per-call work (matching, arguments, a logger) costs more than these functions at
    the scale bench's thousands of pod events: one index and one event handler per event."""
    worker = {
        "metadata": {
            "name": "a-worker-0",
            "labels": {MANAGED_BY: OPERATOR, ROLE_LABEL: "worker", TRAINING_JOB_LABEL: "a"},
        }
    }
    assert handlers_called("pods", worker) == {"ringmaster_pods", "pod_changed"}
    job = {"metadata": {"name": "a"}, "status": {"phase": "Running"}}
    assert handlers_called("trainingjobs", job) == {
        "ringmaster_trainingjobs",
        "trainingjob_changed",
    }
    with_reducers = {**job, "status": {"reductionServerPool": "a-reducers"}}
    called = handlers_called("trainingjobs", with_reducers)
    assert any(h.startswith("bound_job_changed") for h in called)
