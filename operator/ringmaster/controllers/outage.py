"""What a controller does while the kube-apiserver cannot be reached: one warning per outage,
retries with capped exponential backoff and jitter, one summary line when the API is back.

Pure: the clock and the random draw are arguments. The work queue (workqueue.py) holds one
:class:`Outage` per controller and asks :func:`is_unreachable` which errors are an outage rather
than a bug (a bug still gets its traceback).
"""

from __future__ import annotations

import http.client
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
