"""Report a training job's progress to the Ringmaster operator, from inside the training loop.

    from ringmaster import progress

    for step in range(total):
        train_step()
        progress.report(step + 1, total_steps=total)

``report()`` returns at once and never raises: it keeps the latest figures and a background
thread sends them at most every ``interval`` seconds (15 by default), with the pod's projected
token, to the URL the operator put in the pod's env (``RINGMASTER_PROGRESS_URL``,
``RINGMASTER_PROGRESS_TOKEN``). Outside a Ringmaster pod it does nothing. The step time is
measured from the calls themselves unless given. Call it from rank 0 (the ``Trainer``
callback below does), or from each host's first rank with ``ranks=`` timings to find
stragglers. Standard library only: no dependency enters the training image.

``ringmaster.progress.HuggingFaceCallback()`` is a ``transformers.TrainerCallback`` that does
the same for a Hugging Face ``Trainer`` (transformers is imported only when it is made).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger(__name__)

URL_ENV = "RINGMASTER_PROGRESS_URL"
TOKEN_ENV = "RINGMASTER_PROGRESS_TOKEN"
CA_ENV = "RINGMASTER_PROGRESS_CA_PEM"
DEFAULT_INTERVAL = 15.0
TIMEOUT_SECONDS = 5.0


class Reporter:
    """Sends the latest report every ``interval`` seconds at most, from a daemon thread."""

    def __init__(
        self,
        url: str | None,
        token_path: str | None,
        interval: float = DEFAULT_INTERVAL,
        ca_pem: str | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        self.url = url
        self.token_path = token_path
        self.interval = interval
        self.clock = clock
        self.context = ssl.create_default_context(cadata=ca_pem) if ca_pem else None
        self.pending: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.sent_at = float("-inf")
        self.previous: tuple[int, float] | None = None  # (step, clock) of the last call
        self.last_status: int | None = None  # the endpoint's last answer, for tests and logs
        self.failures = 0

    @classmethod
    def from_environment(cls, interval: float = DEFAULT_INTERVAL) -> Reporter:
        return cls(
            os.environ.get(URL_ENV),
            os.environ.get(TOKEN_ENV),
            interval,
            os.environ.get(CA_ENV),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.token_path)

    def report(
        self,
        step: int,
        total_steps: int | None = None,
        step_seconds: float | None = None,
        tokens_per_second: float | None = None,
        samples_per_second: float | None = None,
        ranks: list[dict[str, Any]] | None = None,
    ) -> None:
        """Keep the figures for the next send; never raises, never blocks on the network."""
        try:
            if not self.enabled:
                return
            now = self.clock()
            if step_seconds is None and self.previous is not None:
                steps, elapsed = step - self.previous[0], now - self.previous[1]
                if steps > 0 and elapsed > 0:
                    step_seconds = elapsed / steps
            self.previous = (step, now)
            body: dict[str, Any] = {"step": int(step)}
            for name, value in (
                ("totalSteps", total_steps),
                ("stepSeconds", step_seconds),
                ("tokensPerSecond", tokens_per_second),
                ("samplesPerSecond", samples_per_second),
                ("ranks", ranks),
            ):
                if value is not None:
                    body[name] = value
            body["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            with self.lock:
                self.pending = body
            if now - self.sent_at >= self.interval:
                self._start()
                self.wake.set()
        except Exception:  # a report must never stop the training
            log.debug("progress report dropped", exc_info=True)

    def flush(self, timeout: float = TIMEOUT_SECONDS) -> None:
        """Send what is pending now, in the caller's thread (at the end of training)."""
        try:
            self._send_pending(timeout)
        except Exception:
            log.debug("progress flush failed", exc_info=True)

    def _start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(
                target=self._run, name="ringmaster-progress", daemon=True
            )
            self.thread.start()

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            try:
                self._send_pending(TIMEOUT_SECONDS)
            except Exception:
                log.debug("progress send failed", exc_info=True)

    def _send_pending(self, timeout: float) -> None:
        with self.lock:
            body, self.pending = self.pending, None
        if body is None or not self.url or not self.token_path:
            return
        self.sent_at = self.clock()
        with open(self.token_path, encoding="ascii") as handle:  # re-read: the kubelet rotates it
            token = handle.read().strip()
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.context) as answer:
                self.last_status = answer.status
        except urllib.error.HTTPError as error:
            self.last_status = error.code
            self.failures += 1
            if self.failures == 1 or error.code not in (429, 503):
                log.warning("progress report refused (%d): %s", error.code, error.read()[:300])
        except (OSError, urllib.error.URLError) as error:
            self.last_status = None
            self.failures += 1
            if self.failures == 1:
                log.warning("progress endpoint unreachable: %s", error)


_DEFAULT: Reporter | None = None
_DEFAULT_LOCK = threading.Lock()


def default_reporter() -> Reporter:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Reporter.from_environment()
        return _DEFAULT


def report(step: int, total_steps: int | None = None, **figures: Any) -> None:
    """Report progress through the pod's reporter (see the module's docstring)."""
    try:
        default_reporter().report(step, total_steps, **figures)
    except Exception:  # a bad keyword must not stop the training either
        log.debug("progress report dropped", exc_info=True)


def flush() -> None:
    default_reporter().flush()


class _TrainerHooks:
    """The callback's behaviour, apart from transformers: ``TrainerCallback``'s method shape
    (args, state, control, **kwargs), reading ``state.global_step``, ``state.max_steps`` and
    ``state.is_world_process_zero`` as the Trainer sets them."""

    def __init__(self, reporter: Reporter | None = None) -> None:
        self.reporter = reporter

    def _reporter(self) -> Reporter:
        return self.reporter or default_reporter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if getattr(state, "is_world_process_zero", True):
            total = getattr(state, "max_steps", None) or None
            self._reporter().report(int(state.global_step), total_steps=total)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if getattr(state, "is_world_process_zero", True):
            self._reporter().flush()
        return control


def HuggingFaceCallback(reporter: Reporter | None = None) -> Any:
    """A ``transformers.TrainerCallback`` reporting each step: ``Trainer(...,
    callbacks=[HuggingFaceCallback()])``. transformers is imported here, not before."""
    from transformers import TrainerCallback

    class RingmasterProgressCallback(_TrainerHooks, TrainerCallback):  # type: ignore[misc]
        pass

    return RingmasterProgressCallback(reporter)
