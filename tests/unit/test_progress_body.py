"""The progress endpoint reads a report's whole body, however it arrives (issue 45, defect 2).

The real server (``progress_server.serve``) on 127.0.0.1, and bodies written from a raw socket
in several pieces with pauses between them, with a Content-Length or chunked: a body that
arrives in pieces must be read whole up to the limit, and one over it refused with 413 whether
or not it declares its length, after reading at most the limit and a byte. Every refusal is
counted in ``ringmaster_progress_reports_refused_total``. Then the project's own client
(``ringmaster.progress.Reporter``) sends the largest report it may: 4096 ranks.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from ringmaster import progress
from ringmaster.controllers import progress_server
from ringmaster.controllers.progress_server import ProgressEndpoint, serve
from ringmaster.manifests.progress import progress_path
from ringmaster.observe.reports import MAX_BODY_BYTES, MAX_RANKS, ProgressReport
from tests.unit.test_progress_endpoint import JOB, FakeApi, token

PIECES = 6
PAUSE_SECONDS = 0.02
REFUSED = "ringmaster_progress_reports_refused_total"


def report_of(ranks: int, size: int | None = None) -> bytes:
    """A valid report with ``ranks`` rank timings (short host names: ~54 B a rank), padded
    with trailing white space (valid JSON) to ``size`` bytes when given."""
    body = json.dumps(
        {
            "step": 10,
            "stepSeconds": 0.84,
            "ranks": [
                {"rank": r, "host": f"n{r // 8}", "stepSeconds": round(0.84 + r * 1e-4, 4)}
                for r in range(ranks)
            ],
        }
    ).encode()
    if size is not None:
        assert len(body) <= size
        body += b" " * (size - len(body))
    return body


def refused(reason: str, code: int, key: tuple[str, str] = JOB) -> float:
    labels = {"namespace": key[0], "name": key[1], "code": str(code), "reason": reason}
    return REGISTRY.get_sample_value(REFUSED, labels) or 0.0


class Server:
    """The endpoint served as the operator serves it, with a fake TokenReview and a clock
    that moves 100 s a call (no 429 in the way of many reports)."""

    def __init__(self) -> None:
        self.accepted: list[ProgressReport] = []
        ticks = itertools.count(step=100.0)
        self.endpoint = ProgressEndpoint(
            FakeApi(),
            job_exists=lambda key: key == JOB,
            workers_of=lambda key: {"bert-worker-0"},
            accept=lambda key, report: self.accepted.append(report),
            clock=lambda: next(ticks),
        )
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> Server:
        self.runner = await serve(self.endpoint, 0, None, host="127.0.0.1")
        self.port = self.runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await progress_server.stop(self.runner)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{progress_path(*JOB)}"


def pieces(data: bytes, count: int = PIECES) -> list[bytes]:
    size = -(-len(data) // count)
    return [data[i : i + size] for i in range(0, len(data), size)]


def chunked(data: bytes) -> list[bytes]:
    """``data`` as HTTP/1.1 chunks, the stream cut across chunk boundaries too."""
    frames = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in pieces(data, 4 * PIECES))
    return pieces(frames + b"0\r\n\r\n")


async def post(
    server: Server,
    head: dict[str, str],
    parts: list[bytes],
    pause: float = PAUSE_SECONDS,
) -> tuple[int, dict[str, Any]]:
    """POST from a raw socket: the head, then ``parts`` with a pause before each; the answer
    is read while the body is still being written (a 413 may come before it ends)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    headers = {
        "Host": f"127.0.0.1:{server.port}",
        "Authorization": f"Bearer {token()}",
        "Content-Type": "application/json",
        "Connection": "close",
        **head,
    }
    lines = [f"POST {progress_path(*JOB)} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def send() -> None:
        for part in parts:
            await asyncio.sleep(pause)
            writer.write(part)
            await writer.drain()

    sending = asyncio.create_task(send())
    try:
        status = int((await asyncio.wait_for(reader.readline(), 30)).split()[1])
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        sending.cancel()
        # The server may answer and close before the whole (refused) body is sent.
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await sending
        writer.close()
    return status, json.loads(answer.split(b"\r\n\r\n", 1)[1])


def run(scenario: Callable[[Server], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with Server() as server:
            return await scenario(server)

    return asyncio.run(main())


SIZES = {
    "54 KB": report_of(1020),
    "220 KB, 4096 ranks": report_of(MAX_RANKS),
    "the limit exactly": report_of(MAX_RANKS, size=MAX_BODY_BYTES),
}


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("size", list(SIZES))
def test_a_body_that_arrives_in_pieces_is_read_whole(size: str, framing: str) -> None:
    body = SIZES[size]
    head, parts = (
        ({"Content-Length": str(len(body))}, pieces(body))
        if framing == "content-length"
        else ({"Transfer-Encoding": "chunked"}, chunked(body))
    )

    async def scenario(server: Server) -> tuple[int, dict[str, Any], list[ProgressReport]]:
        status, answer = await post(server, head, parts)
        return status, answer, server.accepted

    status, answer, accepted = run(scenario)
    assert status == 202, answer
    assert len(accepted) == 1 and accepted[0].ranks is not None
    assert len(accepted[0].ranks) == (1020 if size == "54 KB" else MAX_RANKS)


@pytest.mark.parametrize(
    "body",
    [b"x" * (MAX_BODY_BYTES + 1), b"x" * (5 * 1024 * 1024)],
    ids=["the limit and a byte", "5 MiB"],
)
def test_a_chunked_body_over_the_limit_is_a_413_and_counted(body: bytes) -> None:
    before = refused("TooLarge", 413)

    async def scenario(server: Server) -> tuple[int, dict[str, Any]]:
        return await post(server, {"Transfer-Encoding": "chunked"}, chunked(body), pause=0.005)

    status, answer = run(scenario)
    assert (status, answer["reason"]) == (413, "TooLarge")
    assert refused("TooLarge", 413) == before + 1


def test_a_content_length_over_the_limit_is_refused_before_the_body_is_sent() -> None:
    before = refused("TooLarge", 413)

    async def scenario(server: Server) -> tuple[int, dict[str, Any]]:
        # The head only: the answer must not wait for a body it is refusing.
        return await post(server, {"Content-Length": str(5 * 1024 * 1024)}, [])

    status, answer = run(scenario)
    assert (status, answer["reason"]) == (413, "TooLarge")
    assert refused("TooLarge", 413) == before + 1


def test_the_body_is_read_up_to_the_limit_and_a_byte_not_further() -> None:
    """A 5 MiB body is refused having held at most MAX_BODY_BYTES + 1 bytes of it."""

    class Content:
        def __init__(self) -> None:
            self.left, self.given = 5 * 1024 * 1024, 0

        async def read(self, n: int = -1) -> bytes:
            size = min(self.left, 100_000 if n < 0 else min(n, 100_000))
            self.left -= size
            self.given += size
            return b"x" * size

    class Request:
        content = Content()

    with pytest.raises(progress_server.Refusal) as refusal:
        asyncio.run(progress_server.read_body(Request()))  # type: ignore[arg-type]
    assert refusal.value.code == 413
    assert Request.content.given == MAX_BODY_BYTES + 1


def test_every_refusal_is_counted_and_the_log_says_how_many_since_its_last_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ticks = [0.0]
    endpoint = ProgressEndpoint(
        FakeApi(), lambda key: key == JOB, lambda key: set(), lambda k, r: None, lambda: ticks[0]
    )
    before = refused("NotAWorker", 403)
    stranger = refused("NotFound", 404, ("", ""))
    refusal = progress_server.Refusal(403, "NotAWorker", "pod x is not a worker")
    caplog.set_level(logging.WARNING, logger=progress_server.__name__)
    for _ in range(5):
        endpoint._refuse(JOB, refusal)
    ticks[0] += progress_server.LOG_EVERY_SECONDS
    endpoint._refuse(JOB, refusal)
    # A URL naming no TrainingJob is counted without its names (they are anyone's to choose).
    endpoint._refuse(("team", "nope"), progress_server.Refusal(404, "NotFound", "no such job"))

    assert refused("NotAWorker", 403) == before + 6
    assert refused("NotFound", 404, ("", "")) == stranger + 1
    warnings = [r.getMessage() for r in caplog.records if "NotAWorker" in r.getMessage()]
    assert len(warnings) == 2
    assert "4 more refused since the last warning" in warnings[1]


def test_the_projects_client_sends_a_4096_rank_report(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token())
    ranks = json.loads(report_of(MAX_RANKS))["ranks"]

    async def scenario(server: Server) -> list[int | None]:
        def send() -> list[int | None]:
            statuses = []
            for step in range(1, 6):
                reporter = progress.Reporter(server.url, str(token_file), interval=0)
                reporter.report(step, ranks=ranks, step_seconds=0.84)
                reporter.flush()
                statuses.append(reporter.last_status)
            return statuses

        return await asyncio.to_thread(send)

    assert run(scenario) == [202] * 5


def test_the_largest_report_the_schema_admits_is_under_the_body_limit() -> None:
    # 4096 ranks, each from a host with the longest DNS name: valid, so it must not be a 413.
    from ringmaster.observe.reports import MAX_HOST_NAME, parse_report

    body = json.dumps(
        {
            "step": 123456789,
            "stepSeconds": 0.123456789,
            "ranks": [
                {"rank": r, "host": f"{r:06d}".ljust(MAX_HOST_NAME, "h"), "stepSeconds": 0.84321}
                for r in range(MAX_RANKS)
            ],
        }
    ).encode()
    assert len(body) <= MAX_BODY_BYTES, len(body)
    assert len(parse_report(body, dt.datetime.now(dt.UTC)).ranks or []) == MAX_RANKS
