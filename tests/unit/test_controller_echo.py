"""A controller does not reconcile an object again for the watch event of its own status write."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from ringmaster.controllers.base import Controller

pytestmark = pytest.mark.unit


class Widgets(Controller):
    kind = "Widget"
    plural = "widgets"
    index = "widgets"


def test_the_echo_of_our_own_status_write_is_not_reconciled_again():
    controller = Widgets(SimpleNamespace(contact=0.0))  # type: ignore[arg-type]
    key = ("ml", "w")
    controller.written[key] = ("41", {"phase": "Running"}, time.monotonic())
    controller.object_changed(key, "41")  # the version our patch produced: nothing new
    assert controller.queue.queued() == 0
    controller.object_changed(key, "42")  # anything after it (a spec edit, a deletion)
    assert controller.queue.queued() == 1


def test_an_object_we_never_wrote_is_reconciled_on_every_event():
    controller = Widgets(SimpleNamespace(contact=0.0))  # type: ignore[arg-type]
    controller.object_changed(("ml", "w"), "7")
    controller.object_changed(("ml", "v"), None)
    assert controller.queue.queued() == 2
