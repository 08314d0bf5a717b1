"""A rate-free work queue of object keys, in the manner of client-go's workqueue.

Level-triggered reconciliation needs three guarantees, which this gives: a key queued many times
is reconciled once; a key is never reconciled by two workers at once; and a key that changes while
it is being reconciled is reconciled again afterwards.

Two lanes: a key added with ``urgent=True`` (a job the admission cycle has just admitted, or a
new job whose first look puts it in the admission queue) is taken before every key of the
ordinary lane, so a gang whose room is held starts without waiting behind the status-only
reconciles its neighbours' pod events queue. A key already waiting in the ordinary lane moves to
the front; one being reconciled runs again next, from the front. Within a lane the order is
first in, first out.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable

from ringmaster.controllers.outage import Outage, is_unreachable

log = logging.getLogger(__name__)

Reconciler = Callable[[Hashable], Awaitable[float | None]]
"""Reconcile one key; return seconds after which to look again, or None."""


class WorkQueue:
    def __init__(
        self,
        reconcile: Reconciler,
        workers: int = 4,
        retry_seconds: float = 5.0,
        name: str = "controller",
        contact: Callable[[], float] = time.monotonic,
        unreachable: Callable[[Hashable, BaseException], None] | None = None,
    ):
        self._reconcile = reconcile
        self.name = name
        self.outage = Outage()
        self._contact = contact  # when the API last answered
        # Told of each key requeued because the API is away (reachability.py's account).
        self._unreachable = unreachable
        self._workers = workers
        self._retry_seconds = retry_seconds
        self._front: deque[Hashable] = deque()  # the urgent lane
        self._back: deque[Hashable] = deque()  # the ordinary lane
        self._ready = asyncio.Semaphore(0)  # one count per queued key, whichever lane
        self._queued: set[Hashable] = set()
        self._urgent: set[Hashable] = set()  # queued (or dirty) keys that go first
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def add(self, key: Hashable, after: float = 0.0, urgent: bool = False) -> None:
        if after > 0:
            loop = asyncio.get_running_loop()
            existing = self._timers.get(key)
            when = loop.time() + after
            if existing is not None and existing.when() <= when:
                return  # an earlier wake-up is already set
            if existing is not None:
                existing.cancel()
            self._timers[key] = loop.call_at(when, self._fire, key)
            return
        if key in self._active:
            self._dirty.add(key)
            if urgent:
                self._urgent.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            if urgent:
                self._urgent.add(key)
                self._front.append(key)
            else:
                self._back.append(key)
            self._ready.release()
        elif urgent and key not in self._urgent:
            self._urgent.add(key)
            self._back.remove(key)  # O(queued), and only when a waiting key is promoted
            self._front.append(key)

    def queued(self) -> int:
        return len(self._queued)

    def _take(self) -> Hashable:
        key = self._front.popleft() if self._front else self._back.popleft()
        self._queued.discard(key)
        self._urgent.discard(key)
        return key

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    async def stop(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def drained(self) -> None:
        """Wait until nothing is queued or running (for tests)."""
        while self._queued or self._active:
            await asyncio.sleep(0.01)

    async def _work(self) -> None:
        while True:
            await self._ready.acquire()
            key = self._take()
            self._active.add(key)
            again: float | None
            try:
                again = await self._reconcile(key)
                summary = self.outage.succeeded(time.monotonic(), self._contact())
                if summary:
                    log.info("%s: %s", self.name, summary)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if is_unreachable(error):
                    # An outage, not a bug: one warning, then quiet retries with backoff.
                    failure = self.outage.failed(time.monotonic(), random.random())
                    if self._unreachable is not None:
                        self._unreachable(key, error)
                    if failure.first:
                        log.warning(
                            "%s: the Kubernetes API is unreachable (%s: %s); retrying with "
                            "backoff, quietly until it is back",
                            self.name,
                            type(error).__name__,
                            str(error).splitlines()[0][:200] if str(error) else "",
                        )
                    again = failure.delay
                else:
                    log.exception(
                        "reconciling %s failed; retrying in %ss", key, self._retry_seconds
                    )
                    again = self._retry_seconds
            finally:
                self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                urgent = key in self._urgent
                self._urgent.discard(key)
                self.add(key, urgent=urgent)
            elif again is not None:
                self.add(key, after=max(again, 0.05))
