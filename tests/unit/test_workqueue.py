from __future__ import annotations

import asyncio

import pytest

from ringmaster.controllers.workqueue import WorkQueue

pytestmark = pytest.mark.unit


def test_duplicates_collapse_and_a_key_never_runs_twice_at_once():
    calls: list[str] = []
    running: set[str] = set()
    overlaps = 0

    async def reconcile(key):
        nonlocal overlaps
        overlaps += key in running
        running.add(key)
        calls.append(key)
        await asyncio.sleep(0.02)
        running.discard(key)
        return None

    async def scenario():
        queue = WorkQueue(reconcile, workers=4)
        queue.start()
        for _ in range(10):
            queue.add("a")
        queue.add("b")
        await asyncio.sleep(0.005)
        queue.add("a")  # changed while being reconciled: must run once more, afterwards
        await asyncio.sleep(0.01)
        await queue.drained()
        await queue.stop()

    asyncio.run(scenario())
    assert overlaps == 0
    assert sorted(calls) == ["a", "a", "b"]


def test_requeue_after_and_retry_after_an_error():
    calls: list[str] = []

    async def reconcile(key):
        calls.append(key)
        if key == "boom" and calls.count("boom") == 1:
            raise RuntimeError("transient")
        return 0.05 if calls.count(key) < 3 and key == "tick" else None

    async def scenario():
        queue = WorkQueue(reconcile, workers=2, retry_seconds=0.05)
        queue.start()
        queue.add("tick")
        queue.add("boom")
        await asyncio.sleep(0.4)
        await queue.stop()

    asyncio.run(scenario())
    assert calls.count("tick") == 3
    assert calls.count("boom") == 2


def _recorder(calls: list[str], gate: asyncio.Event | None = None):
    async def reconcile(key):
        calls.append(key)
        if gate is not None and key == "busy":
            await gate.wait()
        return None

    return reconcile


def test_an_urgent_key_runs_before_every_ordinary_key_queued_before_it():
    calls: list[str] = []

    async def scenario():
        queue = WorkQueue(_recorder(calls), workers=1)
        for key in ("a", "b", "c"):
            queue.add(key)
        queue.add("admitted", urgent=True)
        queue.add("d")
        queue.start()
        await queue.drained()
        await queue.stop()

    asyncio.run(scenario())
    assert calls == ["admitted", "a", "b", "c", "d"]


def test_a_waiting_key_added_again_as_urgent_moves_to_the_front_once():
    calls: list[str] = []

    async def scenario():
        queue = WorkQueue(_recorder(calls), workers=1)
        for key in ("a", "b", "admitted", "c"):
            queue.add(key)
        queue.add("admitted", urgent=True)
        queue.add("admitted", urgent=True)  # already in front: nothing changes
        queue.add("admitted")  # an ordinary add does not send it back
        assert queue.queued() == 4
        queue.start()
        await queue.drained()
        await queue.stop()

    asyncio.run(scenario())
    assert calls == ["admitted", "a", "b", "c"]


def test_urgent_keys_keep_their_order_among_themselves():
    calls: list[str] = []

    async def scenario():
        queue = WorkQueue(_recorder(calls), workers=1)
        queue.add("a")
        for key in ("first", "second", "third"):
            queue.add(key, urgent=True)
        queue.start()
        await queue.drained()
        await queue.stop()

    asyncio.run(scenario())
    assert calls == ["first", "second", "third", "a"]


def test_an_urgent_key_being_reconciled_runs_again_from_the_front():
    calls: list[str] = []
    gate = asyncio.Event()

    async def scenario():
        queue = WorkQueue(_recorder(calls, gate), workers=1)
        queue.start()
        queue.add("busy")
        await asyncio.sleep(0.01)  # "busy" is being reconciled, and stays so until the gate
        queue.add("a")
        queue.add("b")
        queue.add("busy", urgent=True)  # changed meanwhile: again, ahead of a and b
        gate.set()
        await asyncio.sleep(0.01)
        await queue.drained()
        await queue.stop()

    asyncio.run(scenario())
    assert calls == ["busy", "busy", "a", "b"]
