"""The progress endpoint's answers, with a fake TokenReview and a real aiohttp server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import ClientSession, web

from ringmaster.controllers.progress_server import (
    REPORT_BURST,
    ProgressEndpoint,
    TokenBucket,
    make_app,
    ssl_context,
)
from ringmaster.manifests.progress import audience, progress_path
from ringmaster.observe.reports import MAX_BODY_BYTES

JOB = ("team", "bert")


class FakeApi:
    """The API server's TokenReview: tokens are "<namespace>:<pod>:<audience>"."""

    def __init__(self) -> None:
        self.reviews = 0
        self.down = False

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        self.reviews += 1
        if self.down:
            raise ConnectionError("connection refused")
        namespace, pod, token_audience = token.split(":", 2)
        if token_audience not in audiences:
            return {"authenticated": False, "error": "token audiences is invalid"}
        return {
            "authenticated": True,
            "audiences": [token_audience],
            "user": {
                "username": f"system:serviceaccount:{namespace}:default",
                "extra": {"authentication.kubernetes.io/pod-name": [pod]} if pod else {},
            },
        }


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


async def exchange(
    requests: list[tuple[tuple[str, str], str | None, Any]], clock: Clock | None = None
) -> tuple[list[tuple[int, dict[str, Any], dict[str, str]]], list[Any], FakeApi]:
    api, accepted = FakeApi(), []
    endpoint = ProgressEndpoint(
        api,
        job_exists=lambda key: key in (JOB, ("team", "other")),
        workers_of=lambda key: {f"{key[1]}-worker-0", f"{key[1]}-worker-1"},
        accept=lambda key, report: accepted.append((key, report)),
        clock=clock or Clock(),
    )
    runner = web.AppRunner(make_app(endpoint))  # the operator's own app
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    answers = []
    async with ClientSession() as session:
        for key, token, body in requests:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            url = f"http://127.0.0.1:{port}{progress_path(*key)}"
            async with session.post(url, data=data, headers=headers) as answer:
                answers.append((answer.status, await answer.json(), dict(answer.headers)))
    await runner.cleanup()
    return answers, accepted, api


def token(pod: str = "bert-worker-0", job: tuple[str, str] = JOB, namespace: str = "team") -> str:
    return f"{namespace}:{pod}:{audience(*job)}"


def run(*requests: tuple[tuple[str, str], str | None, Any]) -> tuple[list[Any], list[Any], FakeApi]:
    return asyncio.run(exchange(list(requests)))


def test_a_workers_report_is_accepted_and_handed_over() -> None:
    answers, accepted, _ = run((JOB, token(), {"step": 10, "totalSteps": 100, "stepSeconds": 1.5}))
    assert answers[0][0] == 202
    assert accepted[0][0] == JOB and accepted[0][1].step_seconds == 1.5


@pytest.mark.parametrize(
    ("key", "credential", "code", "reason"),
    [
        (JOB, None, 401, "NoToken"),
        (JOB, token(job=("team", "other"), pod="other-worker-0"), 401, "TokenRefused"),
        (JOB, "team:bert-worker-0:https://kubernetes.default.svc", 401, "TokenRefused"),
        (JOB, token(pod="intruder"), 403, "NotAWorker"),
        (JOB, token(pod=""), 403, "NotAPodToken"),
        (JOB, token(namespace="elsewhere"), 403, "NotAPodToken"),
        (("team", "missing"), token(job=("team", "missing")), 404, "NotFound"),
    ],
)
def test_foreign_or_missing_credentials_are_refused_with_a_clear_code(
    key: tuple[str, str], credential: str | None, code: int, reason: str
) -> None:
    answers, accepted, _ = run((key, credential, {"step": 1}))
    assert (answers[0][0], answers[0][1]["reason"]) == (code, reason)
    assert accepted == []


def test_a_bad_body_is_a_400_saying_what_is_wrong_and_a_huge_one_a_413() -> None:
    answers, accepted, _ = run(
        (JOB, token(), {"step": 5, "totalSteps": 2}),
        (JOB, token(), b"{not json"),
        (JOB, token(), b"x" * (MAX_BODY_BYTES + 10)),
    )
    assert answers[0][0] == 400 and "beyond totalSteps" in answers[0][1]["message"]
    assert answers[1][0] == 400
    assert answers[2][0] == 413
    assert accepted == []


def test_a_job_over_its_rate_gets_429_with_retry_after_and_reviews_are_cached() -> None:
    requests = [(JOB, token(), {"step": i}) for i in range(REPORT_BURST + 2)]
    answers, _, api = run(*requests)
    codes = [a[0] for a in answers]
    assert codes[:REPORT_BURST] == [202] * REPORT_BURST
    assert codes[REPORT_BURST:] == [429, 429]
    assert int(answers[-1][2]["Retry-After"]) >= 1
    assert api.reviews == 1  # one TokenReview for the same token
    # another job has its own budget
    other = run(
        (("team", "other"), token(pod="other-worker-1", job=("team", "other")), {"step": 1})
    )
    assert other[0][0][0] == 202


def test_an_api_server_that_cannot_be_asked_is_a_503() -> None:
    async def scenario() -> int:
        api = FakeApi()
        api.down = True
        endpoint = ProgressEndpoint(api, lambda k: True, lambda k: set(), lambda k, r: None)
        with pytest.raises(Exception) as refusal:
            await endpoint._review(token(), audience(*JOB))
        return refusal.value.code  # type: ignore[attr-defined,no-any-return]

    assert asyncio.run(scenario()) == 503


def test_the_token_bucket_refills_at_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock)
    assert bucket.take() == 0 and bucket.take() == 0
    assert bucket.take() == pytest.approx(1.0)
    clock.now += 1.0
    assert bucket.take() == 0


def test_plain_http_only_when_asked_for_by_name() -> None:
    with pytest.raises(ValueError, match="certificate"):
        ssl_context(None, None, insecure=False)
    assert ssl_context(None, None, insecure=True) is None
