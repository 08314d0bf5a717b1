"""The in-pod client and the Hugging Face callback, against a local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ringmaster import progress


class Endpoint:
    def __init__(self) -> None:
        self.received: list[tuple[str, str, dict[str, Any]]] = []
        self.answer = 202
        self.arrived = threading.Event()


@pytest.fixture
def endpoint() -> Iterator[tuple[Endpoint, str]]:
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.received.append((self.path, self.headers["Authorization"], body))
            self.send_response(state.answer)
            self.end_headers()
            state.arrived.set()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/apis/x/progress"
    server.shutdown()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("the-token\n")
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_report_is_posted_with_the_token_and_the_measured_step_time(
    endpoint: tuple[Endpoint, str], token: Path
) -> None:
    state, url = endpoint
    clock = Clock()
    reporter = progress.Reporter(url, str(token), interval=10, clock=clock)
    reporter.report(10, total_steps=100)
    assert state.arrived.wait(5)
    clock.now += 20  # 10 steps in 20 s
    state.arrived.clear()
    reporter.report(20, total_steps=100, tokens_per_second=5.0)
    assert state.arrived.wait(5)
    path, authorization, body = state.received[-1]
    assert path == "/apis/x/progress" and authorization == "Bearer the-token"
    assert body["step"] == 20 and body["totalSteps"] == 100
    assert body["stepSeconds"] == 2.0 and body["tokensPerSecond"] == 5.0
    assert body["time"].endswith("Z")
    assert reporter.last_status == 202


def test_reports_within_the_interval_are_held_and_the_latest_is_flushed(
    endpoint: tuple[Endpoint, str], token: Path
) -> None:
    state, url = endpoint
    clock = Clock()
    reporter = progress.Reporter(url, str(token), interval=15, clock=clock)
    reporter.report(1)
    assert state.arrived.wait(5)
    for step in range(2, 50):
        clock.now += 0.1
        reporter.report(step)
    assert len(state.received) == 1
    reporter.flush()
    assert [b["step"] for _, _, b in state.received] == [1, 49]


def test_refusals_and_a_dead_endpoint_never_raise_into_the_loop(
    endpoint: tuple[Endpoint, str], token: Path
) -> None:
    state, url = endpoint
    state.answer = 429
    reporter = progress.Reporter(url, str(token), interval=0)
    reporter.report(1)
    reporter.flush()
    assert state.arrived.wait(5)
    dead = progress.Reporter("http://127.0.0.1:9/none", str(token), interval=0)
    dead.report(1)
    dead.flush()
    assert dead.last_status is None and dead.failures >= 1
    missing = progress.Reporter(url, "/no/such/token", interval=0)
    missing.report(1)
    missing.flush()  # no token file: dropped quietly
    progress.Reporter(url, str(token)).report("not a step")  # type: ignore[arg-type]


def test_outside_a_ringmaster_pod_report_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.URL_ENV, raising=False)
    monkeypatch.setattr(progress, "_DEFAULT", None)
    progress.report(5, total_steps=10)
    assert progress.default_reporter().enabled is False
    assert progress.default_reporter().thread is None


def test_the_trainer_callback_reports_rank_zeros_steps_and_flushes_at_the_end(
    endpoint: tuple[Endpoint, str], token: Path
) -> None:
    state, url = endpoint
    reporter = progress.Reporter(url, str(token), interval=3600)
    hooks = progress._TrainerHooks(reporter)
    control = object()
    args = SimpleNamespace()
    other_rank = SimpleNamespace(global_step=3, max_steps=10, is_world_process_zero=False)
    assert hooks.on_step_end(args, other_rank, control) is control
    assert reporter.pending is None
    for step in (1, 2, 3):
        rank0 = SimpleNamespace(global_step=step, max_steps=10, is_world_process_zero=True)
        hooks.on_step_end(args, rank0, control)
        assert state.arrived.wait(5)  # the first is sent at once, the others held
    assert hooks.on_train_end(args, rank0, control) is control
    steps = [b["step"] for _, _, b in state.received]
    assert steps == [1, 3] and state.received[-1][2]["totalSteps"] == 10


def test_the_callback_needs_transformers_only_when_made() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            progress.HuggingFaceCallback()
    else:  # pragma: no cover - transformers is not a dependency
        assert hasattr(progress.HuggingFaceCallback(), "on_step_end")
