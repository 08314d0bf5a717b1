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
