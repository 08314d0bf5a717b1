"""One controller's reaction to an unreachable API: one warning, capped jittered backoff,
one summary line."""

from __future__ import annotations

import asyncio
import logging

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError

from ringmaster.controllers.outage import Backoff, Outage, is_unreachable
from ringmaster.controllers.workqueue import WorkQueue

pytestmark = pytest.mark.unit


def test_the_backoff_doubles_up_to_its_cap_and_jitter_only_shortens_it():
    backoff = Backoff(base=0.5, factor=2, cap=15, jitter=0.5)
    assert [backoff.delay(n, 0.0) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 15, 15]
    assert Backoff().delay(100, 0.0) == 10  # the default cap: back within 10 s of the API
    assert backoff.delay(3, 0.999) == pytest.approx(1.0, abs=0.01)
    assert all(0.25 <= backoff.delay(n, d) <= 15 for n in range(1, 30) for d in (0, 0.5, 0.99))


def test_an_outage_is_one_first_failure_and_one_summary():
    outage = Outage(Backoff(base=1, cap=4, jitter=0))
    failures = [outage.failed(100.0 + i, 0.3) for i in range(5)]
    assert [f.first for f in failures] == [True, False, False, False, False]
    assert [f.delay for f in failures] == [1, 2, 4, 4, 4]
    # A reconcile that made no call proves nothing: the API last answered before the outage.
    assert outage.succeeded(110.0, contact=99.0) is None and outage.ongoing
    summary = outage.succeeded(131.0, contact=130.0)
    assert summary == "the Kubernetes API is reachable again after 31 s (5 retries)"
    assert not outage.ongoing and outage.succeeded(140.0, contact=139.0) is None
    assert outage.failed(150.0, 0.0).first  # the next outage warns again


def test_connection_errors_and_unavailable_answers_are_outages_other_errors_are_not():
    refused = MaxRetryError(None, "/api", NewConnectionError(None, "Connection refused"))
    assert is_unreachable(refused) and is_unreachable(ConnectionRefusedError())
    assert is_unreachable(ApiException(status=503)) and is_unreachable(ApiException(status=0))
    assert not is_unreachable(ApiException(status=422)) and not is_unreachable(KeyError("x"))


def test_the_work_queue_warns_once_per_outage_and_logs_no_traceback(caplog):
    calls = {"n": 0}
    contact = {"at": 0.0}

    async def reconcile(key):
        calls["n"] += 1
        if calls["n"] <= 4:
            raise MaxRetryError(None, "/apis", NewConnectionError(None, "Connection refused"))
        import time

        contact["at"] = time.monotonic()
        return None

    async def run():
        queue = WorkQueue(reconcile, workers=1, name="Test", contact=lambda: contact["at"])
        queue.outage.backoff = Backoff(base=0.01, cap=0.05)
        queue.start()
        queue.add("k")
        for _ in range(400):
            await asyncio.sleep(0.01)
            if calls["n"] >= 5 and not queue.outage.ongoing:
                break
        await queue.stop()

    with caplog.at_level(logging.INFO, logger="ringmaster.controllers.workqueue"):
        asyncio.run(run())
    records = [r for r in caplog.records if r.name == "ringmaster.controllers.workqueue"]
    assert calls["n"] == 5
    assert [r.levelname for r in records] == ["WARNING", "INFO"]
    assert "unreachable" in records[0].getMessage()
    assert "reachable again" in records[1].getMessage() and "(4 retries)" in records[1].getMessage()
    assert all(r.exc_info is None for r in records)
