"""The kopf settings the operator relies on for speed hold only while no change handler exists."""

from __future__ import annotations

import kopf
import pytest

from ringmaster.controllers import (  # noqa: F401  (importing registers the handlers)
    inferenceendpoint,
    reductionserverpool,
    settings,
    trainingjob,
)

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
