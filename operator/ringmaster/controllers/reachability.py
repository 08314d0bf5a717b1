"""The operator's own account of a Kubernetes API outage, for the whole process (outage.py's
:class:`ApiOutage`), and its end seen as soon as the API is back.

- kopf's watches: kopf logs each retry of a watch request at ERROR, for every watched kind, for
  as long as the API is away (hundreds of lines an outage with kopf's retry schedule capped at a
  second, settings.py). :class:`KopfRetries`, a filter on kopf's watch logger, takes the retries
  that are the API being away (connection refused, reset or cut, 5xx) out of the log and counts
  them as the outage instead.
- the controllers: a reconcile that failed because the API is away (workqueue.py) names its key.
- the end: while an outage lasts, and only then, /readyz is asked every PROBE_SECONDS; its first
  200 ends it: one line says how long the API was away and what was requeued, and the requeued
  keys are looked at again at once rather than at the end of their backoff (up to 10 s later).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import kopf

from ringmaster.controllers.outage import ApiOutage, key_name

log = logging.getLogger(__name__)

PROBE_SECONDS = 0.5
# The logger kopf's watch and list requests log their retries on.
KOPF_WATCH_LOGGER = "kopf._cogs.clients.watching"
# kopf's words for a retry ("Request attempt #3/62 failed; will retry: GET ... -> Error(...)")
# when the error is the API being away: aiohttp's connection errors, timeouts and 5xx answers
# (APIServerError). Never 403 (an answer about this operator's rights), which kopf keeps
# logging as it does.
_AWAY = re.compile(
    r"failed; will retry: .* -> (ClientConnectorError|ClientConnectionError|"
    r"ServerDisconnectedError|ClientOSError|ClientPayloadError|ConnectionResetError|"
    r"ConnectionRefusedError|TimeoutError|APIServerError|APITooManyRequestsError)\("
)
# 429 "storage is (re)initializing" is an API server starting: part of an outage's end (also
# for a few seconds after /readyz says ready, while the custom resources' storage starts), but
# no outage by itself (kopf meets it at the operator's start, just after CRDs are installed).
_STARTING = "APITooManyRequestsError"
SETTLING_SECONDS = 30.0

Probe = Callable[[], Awaitable[bool]]


class Reachability:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.outage = ApiOutage()
        self._clock = clock
        self._retry: dict[str, Callable[[Hashable], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._ended_at: float | None = None

    def register(self, controller: str, retry: Callable[[Hashable], None]) -> None:
        """A controller's work queue: its keys requeued during an outage are added to it again
        when the API is back."""
        self._retry[controller] = retry

    def requeued(self, controller: str, key: Hashable, error: BaseException) -> None:
        if self.outage.requeue(self._clock(), controller, key):
            self._began(f"{controller} {key_name(key)}: {type(error).__name__}")

    def watch_retry(self, error: str) -> None:
        if self.outage.watch_retry(self._clock()):
            self._began(f"kopf's watch requests: {error}")

    def settling(self) -> bool:
        """The API came back from an outage moments ago (SETTLING_SECONDS)."""
        ended = self._ended_at
        return ended is not None and self._clock() - ended < SETTLING_SECONDS

    def _began(self, what: str) -> None:
        log.warning(
            "the Kubernetes API cannot be reached (%s); the operator retries quietly and "
            "reports when it is back",
            what,
        )
        loop, wake = self._loop, self._wake
        if loop is None or wake is None or loop.is_closed():
            return  # not started: the outage is reported when it is
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            wake.set()
        else:
            loop.call_soon_threadsafe(wake.set)

    def start(self, probe: Probe, interval: float = PROBE_SECONDS) -> None:
        """In the event loop: watch for the end of each outage."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if self.outage.ongoing:
            self._wake.set()
        self._task = asyncio.create_task(self._run(probe, interval))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = self._loop = self._wake = None

    async def _run(self, probe: Probe, interval: float) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.outage.ongoing:
                if await _answers(probe):
                    self.back()
                    break
                await asyncio.sleep(interval)

    def back(self) -> None:
        """The API answered: the summary, and the requeued keys looked at again now."""
        ended = self.outage.back(self._clock())
        if ended is None:
            return
        self._ended_at = self._clock()
        summary, requeued = ended
        log.info("%s", summary)
        for controller, keys in requeued.items():
            retry = self._retry.get(controller)
            if retry is not None:
                for key in keys:
                    retry(key)


async def _answers(probe: Probe) -> bool:
    try:
        return await probe()
    except Exception:  # the probe says no by failing as much as by answering False
        return False


class KopfRetries(logging.Filter):
    """Keeps kopf's retries of watch requests that could not reach the API out of the log and
    counts them in the process's outage; every other record passes."""

    def __init__(self, reachability: Reachability) -> None:
        super().__init__()
        self.reachability = reachability

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        found = _AWAY.search(record.getMessage())
        if found is None:
            return True
        if found.group(1) == _STARTING and not self.reachability.outage.ongoing:
            return not self.reachability.settling()
        self.reachability.watch_retry(found.group(1))
        return False


REACHABILITY = Reachability()


@kopf.on.startup()
async def start_reachability(**_: Any) -> None:
    from ringmaster.controllers.kubeapi import KubeApi

    watch_logger = logging.getLogger(KOPF_WATCH_LOGGER)
    if not any(isinstance(f, KopfRetries) for f in watch_logger.filters):
        watch_logger.addFilter(KopfRetries(REACHABILITY))
    REACHABILITY.start(KubeApi(threads=1).ready)


@kopf.on.cleanup()
async def stop_reachability(**_: Any) -> None:
    await REACHABILITY.stop()
