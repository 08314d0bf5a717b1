"""The operator's own account of an API outage (issue 45, defect 6): kopf's watches retry within
a second of the API's return, their retries are counted rather than logged, and one line says
when the API is back, how long it was away and what was requeued; the requeued keys are looked
at again at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from ringmaster.controllers import settings
from ringmaster.controllers.outage import ApiOutage, capped_backoffs
from ringmaster.controllers.reachability import (
    KOPF_WATCH_LOGGER,
    SETTLING_SECONDS,
    KopfRetries,
    Reachability,
)
from ringmaster.controllers.workqueue import WorkQueue

pytestmark = pytest.mark.unit

KOPF_DEFAULT = (1, 1, 2, 3, 5, 8, 13, 21)
WATCH = "GET https://127.0.0.1:6443/apis/ringmaster.dev/v1alpha1/trainingjobs?watch=true"


def attempts(backoffs) -> list[float]:
    """When each attempt of a request that keeps failing is made, from its first one."""
    times, at = [0.0], 0.0
    for delay in backoffs:
        at += delay
        times.append(at)
    return times


def seen_after_return(backoffs, back_at: float) -> float:
    """How long after the API is back a watch that failed at 0 tries again."""
    return min(t for t in attempts(backoffs) if t >= back_at) - back_at


def test_a_lost_watch_tries_again_within_a_second_where_kopf_waited_up_to_21_s():
    ours = capped_backoffs()
    assert max(ours) == 1.0 and ours[0] < 1.0
    # As long in all as kopf's default before a request is given up (a watch starts again).
    assert sum(ours) >= sum(KOPF_DEFAULT)
    for back_at in (5.0, 13.5, 22.5, 34.0, 50.0):
        assert seen_after_return(ours, back_at) <= 1.0
    # What issue 45 saw: the API back at 22.5 s, kopf's next attempt at 33 s.
    assert seen_after_return(KOPF_DEFAULT, 22.5) == 10.5


def test_the_operator_settings_cap_kopf_s_retries():
    operator_settings = kopf.OperatorSettings()
    settings.configure(settings=operator_settings)
    assert operator_settings.networking.error_backoffs == capped_backoffs()


def test_an_api_outage_is_one_start_and_one_summary_of_what_was_requeued():
    outage = ApiOutage()
    assert outage.back(5.0) is None  # no outage, nothing to say
    assert outage.watch_retry(100.0) is True  # the first failure: worth one warning
    assert outage.watch_retry(100.5) is False
    assert outage.requeue(101.0, "TrainingJob", ("ml", "bert")) is False
    outage.requeue(102.0, "TrainingJob", ("ml", "bert"))  # once per key
    for i in range(7):
        outage.requeue(103.0, "ReductionServerPool", ("ml", f"pool-{i}"))
    summary, requeued = outage.back(123.4) or ("", {})
    assert summary == (
        "the Kubernetes API is back after 23.4 s away; requeued meanwhile: ReductionServerPool 7 "
        "(ml/pool-0, ml/pool-1, ml/pool-2, ml/pool-3, ml/pool-4 and 2 more); TrainingJob 1 "
        "(ml/bert); watch requests retried: 2"
    )
    assert requeued["TrainingJob"] == {("ml", "bert")} and len(requeued["ReductionServerPool"]) == 7
    assert not outage.ongoing and outage.back(130.0) is None
    assert outage.requeue(200.0, "TrainingJob", ("ml", "x")) is True  # the next one warns again


def record(message: str, level: int = logging.ERROR, name: str = KOPF_WATCH_LOGGER):
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_kopf_s_retries_of_an_unreachable_api_are_counted_not_logged(caplog):
    reachability = Reachability(clock=lambda: 10.0)
    retries = KopfRetries(reachability)
    refused = (
        f"Request attempt #3/62 failed; will retry: {WATCH} -> ClientConnectorError("
        "ConnectionKey(host='127.0.0.1', port=6443), ConnectionRefusedError(111, 'refused'))"
    )
    starting = (
        f"Request attempt #1/62 failed; will retry: {WATCH} -> APITooManyRequestsError("
        "'storage is (re)initializing', {'kind': 'Status'})"
    )
    forbidden = f"Request attempt #1/62 failed; will retry: {WATCH} -> APIForbiddenError('no')"
    escalated = f"Request attempt #62/62 failed; escalating: {WATCH} -> APIServerError('x')"
    # A 429 of an API server that starts, with no outage: kopf says so as it does.
    assert retries.filter(record(starting)) is True
    with caplog.at_level(logging.WARNING, logger="ringmaster"):
        assert retries.filter(record(refused)) is False
        assert retries.filter(record(refused)) is False
        assert retries.filter(record(starting)) is False  # during an outage: part of its end
    warnings = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
    assert len(warnings) == 1 and "ClientConnectorError" in warnings[0]
    assert reachability.outage.watch_retries == 3
    # What is not the API being away passes: a refusal, an escalation, a lower level.
    assert retries.filter(record(forbidden)) is True
    assert retries.filter(record(escalated)) is True
    assert retries.filter(record("Request attempt #2/62: GET x", logging.DEBUG)) is True
    # Back: the custom resources' storage may still be starting for a few seconds (no new
    # outage, no line); long after, a 429 is kopf's to report again.
    reachability.back()
    assert not reachability.outage.ongoing
    assert retries.filter(record(starting)) is False and not reachability.outage.ongoing
    reachability._clock = lambda: 10.0 + SETTLING_SECONDS
    assert retries.filter(record(starting)) is True


def test_the_end_of_an_outage_is_probed_and_the_requeued_keys_are_looked_at_again(caplog):
    answers = iter([False, False, True])
    retried: list[Hashable] = []
    probes = {"n": 0}

    async def probe() -> bool:
        probes["n"] += 1
        answer = next(answers)
        if not answer and probes["n"] == 2:
            raise ConnectionRefusedError  # a probe that fails says no as well
        return answer

    async def scenario() -> None:
        clock = {"now": 50.0}
        reachability = Reachability(clock=lambda: clock["now"])
        reachability.register("TrainingJob", retried.append)
        reachability.start(probe, interval=0.01)
        await asyncio.sleep(0.05)
        assert probes["n"] == 0  # nothing probed while no outage is known
        reachability.requeued("TrainingJob", ("ml", "bert"), ApiException(status=503))
        clock["now"] = 62.0
        for _ in range(200):
            if not reachability.outage.ongoing:
                break
            await asyncio.sleep(0.01)
        await reachability.stop()

    with caplog.at_level(logging.INFO, logger="ringmaster"):
        asyncio.run(scenario())
    assert probes["n"] == 3
    assert retried == [("ml", "bert")]
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("ringmaster")]
    assert len(lines) == 2, lines
    assert "cannot be reached (TrainingJob ml/bert: ApiException)" in lines[0]
    assert lines[1].startswith("the Kubernetes API is back after 12.0 s away; requeued meanwhile")


def test_the_work_queue_names_each_key_requeued_because_the_api_is_away():
    told: list[tuple[Hashable, str]] = []

    async def reconcile(key: Hashable) -> float | None:
        if key == "down":
            raise ApiException(status=503)
        raise KeyError("a bug, not an outage")

    async def scenario() -> None:
        queue = WorkQueue(
            reconcile, workers=1, unreachable=lambda key, error: told.append((key, str(error)))
        )
        queue.start()
        queue.add("down")
        queue.add("bug")
        await asyncio.sleep(0.1)
        await queue.stop()

    logging.getLogger("ringmaster.controllers.workqueue").disabled = True
    try:
        asyncio.run(scenario())
    finally:
        logging.getLogger("ringmaster.controllers.workqueue").disabled = False
    assert [key for key, _ in told] == ["down"]
