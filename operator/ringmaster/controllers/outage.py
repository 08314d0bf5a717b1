"""What a controller does while the kube-apiserver cannot be reached: one warning per outage,
retries with capped exponential backoff and jitter, one summary line when the API is back.

Pure: the clock and the random draw are arguments. The work queue (workqueue.py) holds one
:class:`Outage` per controller and asks :func:`is_unreachable` which errors are an outage rather
than a bug (a bug still gets its traceback). The process as a whole keeps one :class:`ApiOutage`
(reachability.py): kopf's watches and every controller feed it, and it says once when the API
went away and once, when it answers again, how long it was away and what was requeued.
"""

from __future__ import annotations

import http.client
from collections.abc import Hashable
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

# The API server answers with these while it starts or its etcd is away.
_UNAVAILABLE = frozenset({0, 500, 502, 503, 504})
# Errors of the connection itself (refused, reset, timed out, cut mid-answer).
_TRANSPORT = (Urllib3Error, ConnectionError, TimeoutError, http.client.HTTPException)


def is_unreachable(error: BaseException) -> bool:
    """The API cannot be reached or cannot serve (connection refused or reset, timeouts,
    502/503/504, 500 while etcd is away); not an answer about the object."""
    if isinstance(error, ApiException):
        return error.status in _UNAVAILABLE or error.status is None
    return isinstance(error, _TRANSPORT)


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (1-based): base * factor**(n-1), capped, then scaled by a jitter in
    [1 - jitter, 1] so that many keys and several controllers do not retry in step. The cap
    bounds how long after the API is back the last key waits."""

    base: float = 0.5
    factor: float = 2.0
    cap: float = 10.0
    jitter: float = 0.5

    def delay(self, retry: int, draw: float) -> float:
        """`draw` is uniform in [0, 1)."""
        raw = min(self.cap, self.base * self.factor ** max(retry - 1, 0))
        return raw * (1.0 - self.jitter * draw)


@dataclass(frozen=True)
class Failure:
    first: bool  # the first failure of this outage: worth one warning
    delay: float  # seconds before this key is tried again


class Outage:
    """One controller's view of the API's availability."""

    def __init__(self, backoff: Backoff | None = None) -> None:
        self.backoff = backoff or Backoff()
        self.since: float | None = None
        self.retries = 0

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, now: float, draw: float) -> Failure:
        first = self.since is None
        if first:
            self.since = now
            self.retries = 0
        self.retries += 1
        return Failure(first, self.backoff.delay(self.retries, draw))

    def succeeded(self, now: float, contact: float) -> str | None:
        """A reconcile went through: the summary line if the API answered (`contact`, the time
        of its last answer) since the outage began, else None (a reconcile that wrote nothing
        proves nothing about the API)."""
        if self.since is None or contact < self.since:
            return None
        summary = (
            f"the Kubernetes API is reachable again after {now - self.since:.0f} s "
            f"({self.retries} retries)"
        )
        self.since = None
        self.retries = 0
        return summary


# Keys listed by name in the summary, per controller (the rest are counted).
LISTED_KEYS = 5


class ApiOutage:
    """The operator's own account of one outage of the API, across its controllers and kopf's
    watches: when it began, how often kopf retried its watches, which keys each controller
    requeued because of it. A controller's :class:`Outage` ends with its next reconcile that
    reaches the API; this one ends when the API answers a probe, whether or not any reconcile
    was due (an idle operator, whose only contact with the API is its watches, says so too)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.watch_retries = 0
        self.requeued: dict[str, set[Hashable]] = {}

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, now: float) -> bool:
        """Something could not reach the API; True for the first failure of an outage."""
        if self.since is not None:
            return False
        self.since = now
        return True

    def watch_retry(self, now: float) -> bool:
        """kopf retries a watch (or list) request that could not reach the API."""
        self.watch_retries += 1
        return self.failed(now)

    def requeue(self, now: float, controller: str, key: Hashable) -> bool:
        """A controller's reconcile of `key` could not reach the API: retried with backoff."""
        self.requeued.setdefault(controller, set()).add(key)
        return self.failed(now)

    def back(self, now: float) -> tuple[str, dict[str, set[Hashable]]] | None:
        """The API answered: the summary line and the keys requeued meanwhile (by controller),
        and the outage is over; None when there was none."""
        if self.since is None:
            return None
        requeued = self.requeued
        parts = []
        for controller in sorted(requeued):
            keys = sorted(key_name(k) for k in requeued[controller])
            named = ", ".join(keys[:LISTED_KEYS])
            more = f" and {len(keys) - LISTED_KEYS} more" if len(keys) > LISTED_KEYS else ""
            parts.append(f"{controller} {len(keys)} ({named}{more})")
        summary = (
            f"the Kubernetes API is back after {now - self.since:.1f} s away; requeued meanwhile: "
            f"{'; '.join(parts) or 'nothing'}; watch requests retried: {self.watch_retries}"
        )
        self.since = None
        self.watch_retries = 0
        self.requeued = {}
        return summary, requeued


def key_name(key: Hashable) -> str:
    """A work queue's key as a person reads it: (namespace, name) as namespace/name."""
    if isinstance(key, tuple):
        return "/".join(str(part) for part in key)
    return str(key)


def capped_backoffs(
    first: float = 0.25, cap: float = 1.0, total: float = 60.0
) -> tuple[float, ...]:
    """kopf's delays between the attempts of one request (settings.networking.error_backoffs):
    doubling from `first` up to `cap`, as many as fit in `total` seconds, after which kopf gives
    the request up (a watch starts it again at once). kopf's default (1, 1, 2, 3, 5, 8, 13, 21)
    spaces a watch's reconnection attempts up to 21 s apart while the API is away, and the
    operator learns of the objects created once it is back only at the next attempt: 7 to 21 s
    after it was ready in issue 45's runs. Capped at a second, a watch is back within a second
    of the API, for one connection attempt a second per watched kind while it is away."""
    delays: list[float] = []
    delay = first
    while sum(delays) < total:
        delays.append(delay)
        delay = min(cap, delay * 2)
    return tuple(delays)
