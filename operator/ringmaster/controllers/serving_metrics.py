"""Scraping the model servers' own ``/metrics`` for the signal autoscaler: the I/O in front of
:mod:`ringmaster.planning.serving_signals` (one scrape as a sample, two as a window) and
:mod:`ringmaster.planning.signal_scaling` (the replica count from the windows).

One :class:`ServerMetricsScraper` per operator process. Each interval the caller asks it about
one endpoint side (``key``, e.g. ``(namespace, name, side)``) with the READY model-server pods of
that side as ``(pod name, "ip:port")``::

    observation = await scraper.observe(key, targets, "/metrics", time.monotonic())
    decision = signal_scaling.decide(..., windows=list(observation.windows.values()), ...)

Every target is asked at once (one shared aiohttp session, at most ``max_concurrency`` requests
in flight over all endpoints), each within ``timeout`` seconds (connect, headers and body) and
``max_body_bytes`` of body. The scraper remembers the last sample of each (key, pod) and returns,
per pod, the window since that sample:

- a pod seen for the first time, or whose scrape failed: ``None`` (``decide`` counts it as a
  replica whose load is unknown); a failed scrape keeps the pod's last sample, so its next answer
  gives the window over the whole gap;
- a pod that answers at a new address (recreated under the same name, as StatefulSet and
  LeaderWorkerSet pods are) starts afresh, as does one whose last sample is older than
  ``max_window_seconds`` when that is set;
- a server that restarted at the same address (its counters went down) is the window's
  business: :func:`serving_signals.window` counts from zero and says ``restarted``;
- a pod no longer among the targets is forgotten; :meth:`~ServerMetricsScraper.forget` drops a
  whole endpoint side (call it when the endpoint goes or stops scaling on server metrics).

A target's failure never raises: it is a line in ``Observation.errors`` (``timeout after 2 s``,
``HTTP 503 Service Unavailable``, ``connection refused``, ``body over the 4 MiB limit``,
``parse error: ...``) for the caller's conditions and events. Time comes in as ``now``
(monotonic seconds, one figure for the whole observation); nothing here knows kopf or the
Kubernetes client.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import aiohttp

from ringmaster.planning.serving_signals import (
    MetricsParseError,
    ServerSample,
    ServerWindow,
    parse_metrics,
    window,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 2.0
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_CONCURRENCY = 64
READ_CHUNK_BYTES = 64 * 1024
# A body this large is parsed on a worker thread (the parser is pure Python: a vLLM server with
# eight data-parallel engines exposes a few hundred KB, which would hold the event loop).
PARSE_IN_THREAD_BYTES = 256 * 1024
ERROR_CHARS = 200
# The Prometheus text format, as Prometheus itself asks for it (not OpenMetrics, not protobuf).
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

Target = tuple[str, str]  # (pod name, "ip:port")


@dataclass(frozen=True)
class Observation:
    """One endpoint side at ``now``. ``windows`` has one entry per target pod, in the targets'
    order (``None``: first seen, or the scrape failed); ``samples`` the pods that answered (their
    gauges are usable at once, even without a window); ``errors`` the pods that did not, in
    words."""

    key: Hashable
    now: float
    windows: dict[str, ServerWindow | None]
    samples: dict[str, ServerSample]
    errors: dict[str, str]

    @property
    def answered(self) -> int:
        return len(self.samples)

    def describe(self, most: int = 3) -> str:
        """A line for a condition or an event: ``2 of 3 pods answered; llama-1: timeout after
        2 s`` (at most ``most`` errors named)."""
        text = f"{self.answered} of {len(self.windows)} pods answered"
        named = [f"{pod}: {error}" for pod, error in list(self.errors.items())[:most]]
        if len(self.errors) > most:
            named.append(f"and {len(self.errors) - most} more")
        return "; ".join([text, *named])


@dataclass(frozen=True)
class _Last:
    address: str
    sample: ServerSample
    at: float


class _Failed(Exception):
    """One target's failure, its message the words reported."""


class ServerMetricsScraper:
    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        max_window_seconds: float | None = None,
    ) -> None:
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        if max_body_bytes < 1 or max_concurrency < 1:
            raise ValueError(f"limits must be positive: {max_body_bytes} B, {max_concurrency}")
        if max_window_seconds is not None and not max_window_seconds > 0:
            raise ValueError(f"max_window_seconds must be positive, got {max_window_seconds}")
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.max_window_seconds = max_window_seconds
        self._slots = asyncio.Semaphore(max_concurrency)
        self._session: aiohttp.ClientSession | None = None
        self._memory: dict[Hashable, dict[str, _Last]] = {}

    async def observe(
        self, key: Hashable, targets: Sequence[Target], path: str, now: float
    ) -> Observation:
        """Scrape every target of ``key`` at once; see the module's docstring. A pod named twice
        is scraped once, at its last address."""
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite number of seconds, got {now}")
        pods = dict(targets)
        if not pods:
            self._memory.pop(key, None)
            return Observation(key, now, {}, {}, {})
        # Updated in place below: an endpoint forgotten during the scrape stays forgotten.
        memory = self._memory.setdefault(key, {})
        session = self._client()
        results = await asyncio.gather(
            *(self._scrape(session, address, path) for address in pods.values())
        )
        kept: dict[str, _Last] = {}
        windows: dict[str, ServerWindow | None] = {}
        samples: dict[str, ServerSample] = {}
        errors: dict[str, str] = {}
        for (pod, address), result in zip(pods.items(), results, strict=True):
            last = memory.get(pod)
            if last is not None and last.address != address:
                last = None  # a new pod under the old name: its counters are not the old one's
            if isinstance(result, str):
                log.debug("scraping %s of %s at %s: %s", pod, key, address, result)
                errors[pod] = result
                windows[pod] = None
                if last is not None:
                    kept[pod] = last
                continue
            samples[pod] = result
            windows[pod] = self._window(last, result, now)
            kept[pod] = _Last(address, result, now)
        memory.clear()
        memory.update(kept)
        return Observation(key, now, windows, samples, errors)

    def forget(self, key: Hashable) -> None:
        """Drop what is remembered of an endpoint side (its next observation starts afresh)."""
        self._memory.pop(key, None)

    def remembered(self, key: Hashable) -> frozenset[str]:
        """The pods of ``key`` with a last sample kept."""
        return frozenset(self._memory.get(key, {}))

    async def close(self) -> None:
        """Close the HTTP session (a later :meth:`observe` opens a new one)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    # --- one target --------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # No limit here: the semaphore bounds the requests, and it is taken before a
                # request's clock starts, so none times out waiting for a connection.
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None),  # asyncio.timeout in _scrape
                trust_env=False,  # pod IPs, never through an HTTP(S)_PROXY
            )
        return self._session

    def _window(self, last: _Last | None, sample: ServerSample, now: float) -> ServerWindow | None:
        if last is None:
            return None
        elapsed = now - last.at
        if not elapsed > 0:
            return None  # the same instant (or a clock that went back): start again from here
        if self.max_window_seconds is not None and elapsed > self.max_window_seconds:
            return None
        return window(last.sample, sample, elapsed)

    async def _scrape(
        self, session: aiohttp.ClientSession, address: str, path: str
    ) -> ServerSample | str:
        """The target's sample, or why there is none, in words. Never raises but to cancel."""
        try:
            url = metrics_url(address, path)
            async with self._slots, asyncio.timeout(self.timeout):
                body = await self._get(session, url)
        except TimeoutError:
            return f"timeout after {self.timeout:g} s"
        except (_Failed, ValueError) as e:
            return _short(str(e))
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, ConnectionRefusedError):
                return "connection refused"
            return _short(f"cannot connect: {e.os_error.strerror or e.os_error}")
        except aiohttp.ServerDisconnectedError:
            return "the server closed the connection"
        except Exception as e:  # one target's failure is a line, never the observation's end
            return _short(f"{type(e).__name__}: {e}")
        try:
            if len(body) > PARSE_IN_THREAD_BYTES:
                return await asyncio.to_thread(parse_metrics, body)
            return parse_metrics(body)
        except MetricsParseError as e:
            return _short(f"parse error: {e}")

    async def _get(self, session: aiohttp.ClientSession, url: str) -> bytes:
        cap = self.max_body_bytes
        async with session.get(url, headers={"Accept": ACCEPT}, allow_redirects=False) as r:
            if not 200 <= r.status < 300:
                raise _Failed(f"HTTP {r.status} {r.reason or ''}".rstrip())
            if r.content_length is not None and r.content_length > cap:
                raise _Failed(f"body of {r.content_length} bytes is over the {_size(cap)} limit")
            chunks: list[bytes] = []
            size = 0
            # Read as it comes (chunked bodies declare no length), decompressed where the server
            # compressed it: the limit is on what would be parsed.
            async for chunk in r.content.iter_chunked(READ_CHUNK_BYTES):
                size += len(chunk)
                if size > cap:
                    raise _Failed(f"body over the {_size(cap)} limit")
                chunks.append(chunk)
            return b"".join(chunks)


def metrics_url(address: str, path: str) -> str:
    """``http://ip:port/path`` for a target's ``"ip:port"`` (an IPv6 address bracketed)."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} is not ip:port")
    if ":" in host:
        host = f"[{host}]"
    if not path.startswith("/"):
        path = "/" + path
    return f"http://{host}:{port}{path}"


def _size(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."
