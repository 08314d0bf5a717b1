"""Scraping model servers' /metrics (controllers/serving_metrics.py) from real HTTP servers.

Each "pod" is an aiohttp server on 127.0.0.1 (an ephemeral port) serving the vLLM and SGLang
exposition text of tests/unit/test_serving_signals.py, or misbehaving: slow, 500, HTML, too big.
The scraper's clock is the ``now`` each test passes, so windows are exact; only the timeout and
the concurrency cases take real time (a fraction of a second each).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from ringmaster.controllers.serving_metrics import (
    Observation,
    ServerMetricsScraper,
    metrics_url,
)
from ringmaster.planning.serving_signals import Dialect
from tests.unit.test_serving_signals import SGLANG_DP2, VLLM_DP2

pytestmark = pytest.mark.unit

PATH = "/metrics"
KEY = ("ml", "llama", "unified")
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def bump(text: str, series: str, value: str) -> str:
    """``text`` with the one sample line of ``series`` (name and labels) set to ``value``."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(series + " ")]
    assert len(hits) == 1, series
    lines[hits[0]] = f"{series} {value}\n"
    return "".join(lines)


def vllm_later() -> str:
    """VLLM_DP2 ten seconds on: 80 more requests finished (50 + 30) and 24000 more output tokens
    (16000 + 8000); the histograms and gauges unchanged."""
    text = VLLM_DP2
    reason = 'vllm:request_success_total{engine="%s",finished_reason="stop",model_name="llama3-8b"}'
    text = bump(text, reason % "0", "430.0")  # 380 before
    text = bump(text, reason % "1", "320.0")  # 290 before
    tokens = 'vllm:generation_tokens_total{engine="%s",model_name="llama3-8b"}'
    text = bump(text, tokens % "0", "112000.0")  # 96000 before
    return bump(text, tokens % "1", "80000.0")  # 72000 before


def sglang_later() -> str:
    """SGLANG_DP2 ten seconds on: 120 more requests, 60000 more prompt tokens, rank 0 runs 9."""
    text = bump(SGLANG_DP2, 'sglang:num_requests_total{model_name="qwen3-8b"}', "1620.0")
    text = bump(text, 'sglang:prompt_tokens_total{model_name="qwen3-8b"}', "810000.0")
    running = (
        'sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="qwen3-8b",'
        'pp_rank="0",tp_rank="0"}'
    )
    return bump(text, running, "9.0")


class Pod:
    """One model server: what it answers is changed between scrapes by the test."""

    def __init__(
        self,
        body: str | bytes = VLLM_DP2,
        *,
        status: int = 200,
        delay: float = 0.0,
        chunked: bool = False,
    ) -> None:
        self.body = body
        self.status = status
        self.delay = delay
        self.chunked = chunked
        self.hits = 0
        self.address = ""
        self._release: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        if self.delay:
            assert self._release is not None
            with contextlib.suppress(TimeoutError):  # released early when the test ends
                await asyncio.wait_for(self._release.wait(), self.delay)
        body = self.body.encode() if isinstance(self.body, str) else self.body
        headers = {"Content-Type": PROMETHEUS_TEXT}
        if not self.chunked:
            return web.Response(status=self.status, body=body, headers=headers)
        response = web.StreamResponse(status=self.status, headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):  # the client may stop reading at its limit
            for i in range(0, len(body), 8192):
                await response.write(body[i : i + 8192])
            await response.write_eof()
        return response

    async def start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.address = f"127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        assert self._release is not None and self._runner is not None
        self._release.set()
        await self._runner.cleanup()


@contextlib.asynccontextmanager
async def serving(*pods: Pod) -> AsyncIterator[None]:
    await asyncio.gather(*(p.start() for p in pods))
    try:
        yield
    finally:
        await asyncio.gather(*(p.stop() for p in pods))


def run(scenario: Callable[[ServerMetricsScraper], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        scraper = ServerMetricsScraper(**options)
        try:
            return await scenario(scraper)
        finally:
            await scraper.close()

    return asyncio.run(main())


def targets(**pods: Pod) -> list[tuple[str, str]]:
    return [(name, pod.address) for name, pod in pods.items()]


def free_address() -> str:
    """An address nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_two_scrapes_ten_seconds_apart_give_the_rates() -> None:
    vllm, sglang = Pod(VLLM_DP2), Pod(SGLANG_DP2)

    async def scenario(scraper: ServerMetricsScraper) -> None:
        async with serving(vllm, sglang):
            first = await scraper.observe(KEY, targets(v=vllm, s=sglang), PATH, 100.0)
            # Seen for the first time: no window yet, but the samples (and their gauges) are.
            assert first.windows == {"v": None, "s": None} and first.errors == {}
            assert first.samples["v"].dialect is Dialect.VLLM
            assert first.samples["s"].requests_running == 12
            vllm.body, sglang.body = vllm_later(), sglang_later()
            second = await scraper.observe(KEY, targets(v=vllm, s=sglang), PATH, 110.0)
        assert list(second.windows) == ["v", "s"]  # the targets' order, for decide()
        v, s = second.windows["v"], second.windows["s"]
        assert v is not None and s is not None
        assert v.seconds == s.seconds == 10.0
        assert v.dialect is Dialect.VLLM and not v.restarted
        assert v.requests_per_second == pytest.approx(8.0)  # (50 + 30) / 10
        assert v.output_tokens_per_second == pytest.approx(2400.0)  # (16000 + 8000) / 10
        assert v.prompt_tokens_per_second == 0.0
        assert v.in_flight == 26  # 22 running + 4 waiting, the newer sample's gauges
        assert s.dialect is Dialect.SGLANG and not s.restarted
        assert s.requests_per_second == pytest.approx(12.0)  # (1620 - 1500) / 10
        assert s.prompt_tokens_per_second == pytest.approx(6000.0)  # 60000 / 10
        assert s.requests_running == 14  # 9 + 5
        assert second.answered == 2 and second.describe() == "2 of 2 pods answered"
        assert (vllm.hits, sglang.hits) == (2, 2)

    run(scenario)


def test_a_restarted_server_counts_from_zero() -> None:
    pod = Pod(vllm_later())

    async def scenario(scraper: ServerMetricsScraper) -> None:
        async with serving(pod):
            await scraper.observe(KEY, targets(v=pod), PATH, 0.0)
            pod.body = bump(
                VLLM_DP2,
                'vllm:generation_tokens_total{engine="0",model_name="llama3-8b"}',
                "1000.0",
            )
            w = (await scraper.observe(KEY, targets(v=pod), PATH, 10.0)).windows["v"]
        assert w is not None and w.restarted
        assert w.output_tokens_per_second == pytest.approx((1000 + 72000) / 10)

    run(scenario)


def test_a_timeout_fails_that_pod_only_and_keeps_its_last_sample() -> None:
    fast, slow = Pod(VLLM_DP2), Pod(SGLANG_DP2)

    async def scenario(scraper: ServerMetricsScraper) -> None:
        async with serving(fast, slow):
            pods = targets(fast=fast, slow=slow)
            await scraper.observe(KEY, pods, PATH, 0.0)
            slow.delay = 30.0  # released when the test ends
            fast.body = vllm_later()
            started = time.monotonic()
            late = await scraper.observe(KEY, pods, PATH, 10.0)
            assert time.monotonic() - started < 5.0  # the 1 s timeout, not the 30 s sleep
            assert late.windows["slow"] is None and "slow" not in late.samples
            assert late.errors == {"slow": "timeout after 1 s"}
            fresh = late.windows["fast"]
            assert fresh is not None and fresh.requests_per_second == pytest.approx(8.0)
            assert late.describe() == "1 of 2 pods answered; slow: timeout after 1 s"
            assert scraper.remembered(KEY) == {"fast", "slow"}
            # Answering again, the slow pod's window runs from its last answer, 20 s before.
            slow.delay, slow.body = 0.0, sglang_later()
            back = (await scraper.observe(KEY, pods, PATH, 20.0)).windows["slow"]
        assert back is not None and back.seconds == 20.0
        assert back.requests_per_second == pytest.approx(6.0)  # 120 / 20

    # 1 s, not 0.2: on a loaded CI machine (5 workers on 2 cores) the pod's answer after its
    # delay is lifted took longer than 0.2 s once (2026-11-29) and the last window was lost
    run(scenario, timeout=1.0)


@pytest.mark.parametrize(
    ("pod", "error"),
    [
        (Pod("Internal Server Error", status=500), "HTTP 500 Internal Server Error"),
        (Pod("Service Unavailable", status=503), "HTTP 503 Service Unavailable"),
        (
            Pod("<html><head><title>Not Found</title></head><body>Not Found</body></html>"),
            "parse error: ",
        ),
        (Pod(b"\xff\xfe\x00v\x00l"), "parse error: the metrics body is not UTF-8"),
        (Pod("# padding\n" * 2000 + VLLM_DP2), "is over the 16 KiB limit"),  # Content-Length
        (Pod("# padding\n" * 2000 + VLLM_DP2, chunked=True), "body over the 16 KiB limit"),
    ],
    ids=["500", "503", "html", "not-utf8", "oversize", "oversize-chunked"],
)
def test_a_failed_target_is_a_line_and_the_others_answer(pod: Pod, error: str) -> None:
    good = Pod(SGLANG_DP2)

    async def scenario(scraper: ServerMetricsScraper) -> Observation:
        async with serving(pod, good):
            return await scraper.observe(KEY, targets(bad=pod, good=good), PATH, 0.0)

    observation = run(scenario, max_body_bytes=16 * 1024)
    assert observation.windows == {"bad": None, "good": None}
    assert list(observation.samples) == ["good"]
    assert list(observation.errors) == ["bad"] and error in observation.errors["bad"]
    assert len(observation.errors["bad"]) <= 200


def test_a_body_at_the_limit_is_read_whole() -> None:
    exact = Pod(VLLM_DP2, chunked=True)

    async def scenario(scraper: ServerMetricsScraper) -> Observation:
        async with serving(exact):
            return await scraper.observe(KEY, targets(p=exact), PATH, 0.0)

    observation = run(scenario, max_body_bytes=len(VLLM_DP2.encode()))
    assert observation.errors == {} and observation.samples["p"].requests_finished == 700


def test_nothing_listening_and_a_bad_address_are_errors() -> None:
    async def scenario(scraper: ServerMetricsScraper) -> Observation:
        pods = [("gone", free_address()), ("odd", "10.0.0.7"), ("ipv6", "fd00::7:")]
        return await scraper.observe(KEY, pods, PATH, 0.0)

    observation = run(scenario)
    assert observation.errors["gone"] == "connection refused"
    assert observation.errors["odd"] == "address '10.0.0.7' is not ip:port"
    assert "is not ip:port" in observation.errors["ipv6"]
    assert observation.answered == 0 and observation.describe().startswith("0 of 3 pods")


def test_a_pod_gone_from_the_targets_is_forgotten() -> None:
    a, b = Pod(VLLM_DP2), Pod(SGLANG_DP2)

    async def scenario(scraper: ServerMetricsScraper) -> None:
        async with serving(a, b):
            await scraper.observe(KEY, targets(a=a, b=b), PATH, 0.0)
            assert scraper.remembered(KEY) == {"a", "b"}
            only_a = await scraper.observe(KEY, targets(a=a), PATH, 10.0)
            assert list(only_a.windows) == ["a"] and only_a.windows["a"] is not None
            assert scraper.remembered(KEY) == {"a"}
            # b is back (another pod under the name): first seen again, no window.
            again = await scraper.observe(KEY, targets(a=a, b=b), PATH, 20.0)
            assert again.windows["b"] is None and again.windows["a"] is not None
            # A pod that answers at another address is a new pod under the old name.
            moved = await scraper.observe(KEY, [("a", b.address), ("b", b.address)], PATH, 30.0)
            assert moved.windows["a"] is None and moved.windows["b"] is not None
            # Other endpoints are their own; forget() and no targets drop an endpoint.
            other = ("ml", "llama", "decode")
            await scraper.observe(other, targets(a=a), PATH, 30.0)
            scraper.forget(KEY)
            assert scraper.remembered(KEY) == frozenset()
            assert scraper.remembered(other) == {"a"}
            assert (await scraper.observe(KEY, targets(a=a), PATH, 40.0)).windows["a"] is None
            empty = await scraper.observe(other, [], PATH, 40.0)
            assert empty.windows == {} and scraper.remembered(other) == frozenset()

    run(scenario)


def test_windows_need_time_to_pass_and_may_be_capped() -> None:
    pod = Pod(VLLM_DP2)

    async def scenario(scraper: ServerMetricsScraper) -> None:
        async with serving(pod):
            pods = targets(p=pod)
            await scraper.observe(KEY, pods, PATH, 0.0)
            assert (await scraper.observe(KEY, pods, PATH, 0.0)).windows["p"] is None
            assert (await scraper.observe(KEY, pods, PATH, 90.0)).windows["p"] is None  # > 60 s
            w = (await scraper.observe(KEY, pods, PATH, 120.0)).windows["p"]
            assert w is not None and w.seconds == 30.0

    run(scenario, max_window_seconds=60.0)


def test_targets_are_scraped_at_once() -> None:
    pods = [Pod(VLLM_DP2 if i % 2 else SGLANG_DP2, delay=0.3) for i in range(20)]

    async def scenario(scraper: ServerMetricsScraper) -> tuple[Observation, float]:
        async with serving(*pods):
            started = time.monotonic()
            observation = await scraper.observe(
                KEY, [(f"pod-{i}", p.address) for i, p in enumerate(pods)], PATH, 0.0
            )
            return observation, time.monotonic() - started

    observation, seconds = run(scenario)
    assert observation.errors == {} and observation.answered == 20
    assert seconds < 3.0  # 20 x 0.3 s = 6 s one after the other


def test_the_session_is_opened_lazily_and_again_after_close() -> None:
    pod = Pod(VLLM_DP2)

    async def scenario(scraper: ServerMetricsScraper) -> None:
        await scraper.close()  # nothing opened yet: nothing to do
        async with serving(pod):
            await scraper.observe(KEY, targets(p=pod), PATH, 0.0)
            await scraper.close()
            w = (await scraper.observe(KEY, targets(p=pod), PATH, 10.0)).windows["p"]
        assert w is not None  # the memory outlives the session

    run(scenario)


def test_metrics_url() -> None:
    assert metrics_url("10.1.2.3:8000", "/metrics") == "http://10.1.2.3:8000/metrics"
    assert metrics_url("10.1.2.3:8000", "metrics") == "http://10.1.2.3:8000/metrics"
    assert metrics_url("fd00::1:8000", "/metrics") == "http://[fd00::1]:8000/metrics"
    assert metrics_url("[fd00::1]:8000", "/metrics") == "http://[fd00::1]:8000/metrics"
    for bad in ("10.1.2.3", ":8000", "10.1.2.3:http", "10.1.2.3:0", "10.1.2.3:70000"):
        with pytest.raises(ValueError, match="is not ip:port"):
            metrics_url(bad, "/metrics")


def test_bad_settings_and_clock() -> None:
    for options in ({"timeout": 0}, {"max_body_bytes": 0}, {"max_window_seconds": -1.0}):
        with pytest.raises(ValueError):
            ServerMetricsScraper(**options)

    async def scenario(scraper: ServerMetricsScraper) -> None:
        with pytest.raises(ValueError, match="finite"):
            await scraper.observe(KEY, [], PATH, float("nan"))

    run(scenario)
