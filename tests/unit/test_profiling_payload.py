"""The PoolProfile measurement payload on CPU: its statistics and formulas on hand-computed
cases, the result it builds against the operator's schema, its failure path run as the pod runs
it (no PyTorch here), its posting against a real local HTTP(S) server, its GPU orchestration
against a fake torch whose CUDA events read a scripted clock, and that it imports nothing the
user's image may lack."""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ringmaster.profiling import payload, results
from ringmaster.profiling.results import parse_result

pytestmark = pytest.mark.unit

PAYLOAD = Path(payload.__file__)
NOW = dt.datetime(2026, 11, 26, 1, 0, tzinfo=dt.UTC)
MIB, GIB = 1 << 20, 1 << 30


# ---- Statistics and formulas ------------------------------------------------------------------


def test_the_median_of_event_timings_is_in_seconds() -> None:
    assert payload.median_seconds([3.0, 1.0, 2.0]) == pytest.approx(0.002)
    assert payload.median_seconds([4.0, 1.0, 2.0, 3.0]) == pytest.approx(0.0025)
    with pytest.raises(ValueError):
        payload.median_seconds([])


def test_rotation_sets_cycle_four_l2s_of_distinct_operands() -> None:
    h100_l2 = 50 * MIB
    assert payload.rotation_sets(GIB, h100_l2) == 1  # far beyond L2: no rotation
    assert payload.rotation_sets(8 * MIB, h100_l2) == 25  # 200 MiB / 8 MiB
    assert payload.rotation_sets(7 * MIB, h100_l2) == 29  # ceil(200 / 7)
    assert payload.rotation_sets(MIB, h100_l2) == 48  # 200 sets, capped
    assert payload.rotation_sets(16 * MIB, 0) == 16  # L2 unknown: 64 MiB assumed
    # M=1024 of Llama 3 8B's qkv in bf16: x 8 MiB + W 48 MiB + y 12 MiB = 68 MiB -> 3 sets.
    operands = payload.gemm_operand_bytes("bf16", 1024, 6144, 4096)
    assert operands == 68 * MIB
    assert payload.rotation_sets(operands, h100_l2) == 3
    # fp8 operands are one byte, the bf16 output two: 4 + 24 + 12 MiB.
    assert payload.gemm_operand_bytes("float8_e4m3fn", 1024, 6144, 4096) == 40 * MIB
    with pytest.raises(ValueError):
        payload.rotation_sets(0, h100_l2)


def test_gemm_flops_and_rate() -> None:
    assert payload.gemm_flops(2, 3, 4) == 48
    flops = payload.gemm_flops(8192, 8192, 8192)
    assert flops == 1_099_511_627_776
    point = payload.gemm_point("bf16", 8192, 8192, 8192, 0.0016)
    assert point == {
        "precision": "bf16",
        "m": 8192,
        "n": 8192,
        "k": 8192,
        "seconds": 0.0016,
        "tflops": 687.2,  # results.py's example: 1.0995e12 / 1.6 ms
    }


def test_causal_attention_flops_and_the_backward_factor() -> None:
    # 32 heads, s = 4096, d = 128: 2 matmuls x 2 s^2 d x heads = 2.749e11, half of it causal.
    forward = payload.attention_flops(1, 32, 4096, 128, "forward")
    assert forward == 4 * 32 * 4096**2 * 128 / 2 == 137_438_953_472
    assert payload.attention_flops(1, 32, 4096, 128, "backward") == 2.5 * forward
    assert payload.attention_flops(4, 32, 4096, 128, "forward", causal=False) == 8 * forward
    point = payload.attention_point("flash2", "forward", 4096, 32, 128, 4, 0.01)
    assert point["tflops"] == pytest.approx(4 * forward / 0.01 / 1e12, rel=1e-3)
    assert point["headDim"] == 128 and point["heads"] == 32
    with pytest.raises(ValueError):
        payload.attention_flops(1, 1, 1, 8, "sideways")


def test_hbm_copy_counts_read_plus_written() -> None:
    # The calibration's H100 row: a 1 GiB copy in 0.7147 ms is 3,004 GB/s read + written.
    assert payload.copy_gbps(GIB, 0.7147e-3) == pytest.approx(3004.7, abs=0.1)
    assert payload.copy_gbps(500_000_000, 1.0) == 1.0


def test_bus_bandwidth_is_nccl_tests_busbw() -> None:
    assert payload.bus_factor("all_reduce", 16) == 2 * 15 / 16
    assert payload.bus_factor("all_to_all", 16) == 15 / 16
    assert payload.bus_factor("all_reduce", 2) == 1.0
    assert payload.bus_factor("all_reduce", 1) == 0.0
    # 1 GiB all-reduced over 16 ranks in 50 ms: algbw 21.47 GB/s, busbw x 1.875 = 40.27.
    assert payload.bus_gbps("all_reduce", GIB, 0.05, 16) == pytest.approx(40.265, abs=1e-3)
    assert payload.bus_gbps("all_to_all", GIB, 0.05, 16) == pytest.approx(20.133, abs=1e-3)
    point = payload.collective_point("all_to_all", 1_000_000_000, 8, 2, 0.1)
    assert point == {"op": "all_to_all", "bytes": 10**9, "ranks": 8, "hosts": 2, "busGBps": 8.75}
    with pytest.raises(ValueError):
        payload.bus_factor("broadcast", 8)


def test_sustained_is_the_last_half_and_burst_the_first_50_ms() -> None:
    # 1 TFLOP per call: 8 calls of 5 ms (200 TFLOP/s, the first 40 ms), then 60 calls of 6 ms
    # (166.7 TFLOP/s) under the power cap. The run lasts 400 ms; its last half is 6 ms calls.
    durations = [0.005] * 8 + [0.006] * 60
    sustained, burst = payload.sustained_and_burst(durations, 1e12)
    assert burst == pytest.approx(200.0)  # calls ending by 50 ms: 8 fast and 1 slow
    assert sustained == pytest.approx(1e12 / 0.006 / 1e12)
    # The clock drops mid-way: the last half sees only the slow calls.
    durations = [0.001] * 100 + [0.002] * 100 + [0.0025] * 100  # 550 ms, half at 275 ms
    sustained, burst = payload.sustained_and_burst(durations, 1e12)
    assert burst == pytest.approx(1000.0)
    assert sustained == pytest.approx(400.0)  # every call from 275 ms on is 2.5 ms
    # A first call longer than the window is the burst alone; one call is both.
    assert payload.sustained_and_burst([0.1, 0.05, 0.05], 1e12)[1] == pytest.approx(10.0)
    assert payload.sustained_and_burst([0.5], 1e12) == (2.0, 2.0)
    with pytest.raises(ValueError):
        payload.sustained_and_burst([0.01, 0.0], 1e12)


def test_the_grids() -> None:
    full, quick = payload.gemm_shapes(False), payload.gemm_shapes(True)
    assert len(full) == 2 * 4 * 3 and len(quick) == 4 * 2 and set(quick) <= set(full)
    # Llama 3 8B and 70B's layers: qkv 6144 / 10240, gate_up 28672 / 57344, down K 14336 / 28672.
    assert {(1024, 6144, 4096), (16384, 57344, 8192), (4096, 8192, 28672)} <= set(full)
    assert all(d % 16 == 0 for shape in full for d in shape)  # _scaled_mm's requirement
    assert {m for m, _, _ in full} == {1024, 4096, 16384}
    assert payload.collective_sizes(False) == [MIB * 4**i for i in range(7)]
    assert payload.collective_sizes(False)[-1] == 4 * GIB
    assert payload.collective_sizes(True)[-1] == 64 * MIB
    assert payload.collective_iterations(MIB) == 20 and payload.collective_iterations(GIB) == 5
    assert payload.attention_sequences(True) == (2048, 4096)
    assert all(payload.budget(q).reps >= 20 for q in (True, False))


def test_the_reference_transformer_has_about_110m_parameters() -> None:
    # 32768 x 768 embedding (tied) + 12 x (4 x 768^2 + 2 x 768 x 3072 + 4 x 768) + 2 x 768
    assert payload.reference_parameters(payload.ReferenceConfig()) == 110_138_880


def test_the_plan_comes_from_the_env() -> None:
    plan = payload.plan_from_env({})
    assert plan.measurements == payload.MEASUREMENTS and not plan.quick and not plan.notes
    plan = payload.plan_from_env(
        {payload.MEASUREMENTS_ENV: " hbm, GEMM,,Bogus ", payload.QUICK_ENV: "1"}
    )
    assert plan.measurements == ("Gemm", "Hbm") and plan.quick
    assert plan.notes and "'Bogus'" in plan.notes[0]
    assert not payload.plan_from_env({payload.QUICK_ENV: "0"}).quick
    assert payload.plan_from_env({payload.QUICK_ENV: "true"}).quick


# ---- The result against the schema ------------------------------------------------------------

DEVICE = {
    "name": "NVIDIA H100 80GB HBM3",
    "count": 8,
    "memoryBytes": 85520809984,
    "powerLimitWatts": 700.0,
    "driver": "580.159.04",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
}


def full_result(**changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "gemm": [
            payload.gemm_point("bf16", 8192, 8192, 8192, 0.0016),
            payload.gemm_point("fp8", 8192, 8192, 8192, 0.00085),
        ],
        "sustained": {"bf16": 702.46, "fp8": 1281.0},
        "burst": {"bf16": 771.0, "fp8": 1419.0},
        "attention": [
            payload.attention_point("flash2", "forward", 4096, 32, 128, 4, 0.0166),
            payload.attention_point("cudnn", "backward", 4096, 32, 128, 4, 0.05),
        ],
        "hbm_gbps": 3010.4,
        "step": payload.reference_step(110_138_880, 16384, 0.081),
        "collectives": [payload.collective_point("all_reduce", GIB, 16, 2, 0.05)],
        "skipped": ["attention cudnn sequence 16384: RuntimeError: no kernel"],
        "now": NOW,
    }
    arguments.update(changes)
    return payload.build_result("gpu-node-7", DEVICE, **arguments)


def test_a_full_result_validates_with_the_operators_schema() -> None:
    built = full_result()
    wire = json.loads(json.dumps(built))  # what goes over the wire
    assert {"hbmGBps", "sustainedTflops", "burstTflops", "referenceStep"} <= set(wire)
    assert "busGBps" in wire["collectives"][0] and "headDim" in wire["attention"][0]
    parsed = parse_result(wire, now=NOW)
    assert parsed.version == 1 and parsed.node == "gpu-node-7"
    assert parsed.time == NOW and parsed.failure is None
    assert parsed.device is not None and parsed.device.power_limit_watts == 700.0
    assert parsed.device.memory_bytes == 85520809984
    assert parsed.hbm_gbps == 3010.0  # four significant figures
    assert parsed.collectives[0].bus_gbps == pytest.approx(40.27)
    assert parsed.sustained_tflops == {"bf16": 702.5, "fp8": 1281.0}
    assert [g.precision for g in parsed.gemm] == ["bf16", "fp8"]
    assert parsed.attention[1].kernel == "cudnn" and parsed.attention[1].head_dim == 128
    assert parsed.reference_step is not None and parsed.reference_step.tokens == 16384
    assert parsed.skipped == ["attention cudnn sequence 16384: RuntimeError: no kernel"]


def test_a_result_with_nothing_but_the_device_validates() -> None:
    built = payload.build_result("n", {**DEVICE, "powerLimitWatts": None, "driver": None}, now=NOW)
    assert parse_result(json.loads(json.dumps(built)), now=NOW).gemm == []


def test_rates_beyond_the_schemas_bounds_are_left_out_and_named() -> None:
    built = full_result(
        gemm=[{**payload.gemm_point("bf16", 16, 16, 16, 1e-12), "tflops": 25_000.0}],
        sustained={"bf16": math.inf, "fp16": 10.0},
        hbm_gbps=-1.0,
        collectives=[
            payload.collective_point("all_reduce", MIB, 8, 1, 1e-3),  # 1.835 GB/s
            payload.collective_point("all_reduce", MIB, 8, 1, 1e-9),  # 1.8 PB/s: a bad timing
        ],
    )
    parsed = parse_result(json.loads(json.dumps(built)), now=NOW)
    assert parsed.gemm == [] and parsed.hbm_gbps is None
    assert parsed.sustained_tflops == {"fp16": 10.0}
    assert [c.bus_gbps for c in parsed.collectives] == [1.835]
    assert sum("left out" in s for s in built["skipped"]) == 4  # gemm, bf16, hbm, collective
    clipped = parse_result(full_result(skipped=["x" * 600] * 70), now=NOW).skipped
    assert len(clipped) == 64 and all(len(s) == 512 for s in clipped)
    notes = full_result(hbm_gbps=0.0, sustained={"bf16": math.nan})["skipped"]
    assert any("hbm" in n for n in notes) and any("sustainedTflops bf16" in n for n in notes)


def test_a_failure_carries_no_device_and_no_measurements_and_validates() -> None:
    built = full_result(failure="PyTorch is not importable in this image" + "!" * 3000)
    parsed = parse_result(json.loads(json.dumps(built)), now=NOW)
    assert parsed.device is None and parsed.gemm == [] and parsed.hbm_gbps is None
    assert parsed.reference_step is None and parsed.collectives == []
    assert parsed.failure is not None and len(parsed.failure) == 2048


def test_the_payloads_bounds_are_the_schemas() -> None:
    assert payload.RESULT_VERSION == results.RESULT_VERSION
    assert payload.MAX_TFLOPS == results.MAX_TFLOPS
    assert payload.MAX_HBM_GBPS == results.MAX_HBM_GBPS
    assert payload.MAX_BUS_GBPS == results.MAX_BUS_GBPS
    assert payload.MAX_POINTS == results.MAX_POINTS
    assert payload.MAX_NODE_NAME == results.MAX_NODE_NAME
    fields = results.HostResult.model_fields
    assert _max_length(fields["failure"].metadata) == payload.MAX_FAILURE_CHARS
    assert _max_length(fields["skipped"].metadata) == payload.MAX_SKIPPED
    # Every key the payload writes is a key of the schema, by its camelCase alias.
    aliases = {f.alias or name for name, f in fields.items()}
    assert set(full_result()) == aliases


def _max_length(metadata: list[Any]) -> int:
    return int(next(m.max_length for m in metadata if hasattr(m, "max_length")))


def test_nvidia_smi_is_read_when_there_and_tolerated_when_not() -> None:
    assert payload.parse_nvidia_smi("700.00, 580.159.04\n700.00, 580.159.04\n") == (
        700.0,
        "580.159.04",
    )
    assert payload.parse_nvidia_smi("[N/A], 535.104.05") == (None, "535.104.05")
    assert payload.parse_nvidia_smi("") == (None, None)
    assert payload.parse_nvidia_smi("garbage") == (None, None)

    def absent(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError("nvidia-smi")

    assert payload.nvidia_smi(absent) == (None, None)
    failing = SimpleNamespace(returncode=9, stdout="700, 1")
    assert payload.nvidia_smi(lambda *a, **k: failing) == (None, None)
    seen: list[list[str]] = []

    def present(command: list[str], **kwargs: Any) -> Any:
        seen.append(command)
        return SimpleNamespace(returncode=0, stdout="400.00, 550.54.15\n")

    assert payload.nvidia_smi(present) == (400.0, "550.54.15")
    assert seen[0][0] == "nvidia-smi" and "--query-gpu=power.limit,driver_version" in seen[0]


# ---- Posting ----------------------------------------------------------------------------------


def test_retry_after_and_backoff() -> None:
    assert payload.retry_after_seconds("3") == 3.0
    assert payload.retry_after_seconds(" 0 ") == 0.0
    assert payload.retry_after_seconds("-5") == 0.0
    assert payload.retry_after_seconds(None) is None
    assert payload.retry_after_seconds("soon") is None
    later = "Thu, 26 Nov 2026 01:00:10 GMT"
    assert payload.retry_after_seconds(later, now=NOW) == 10.0
    assert [payload.backoff_seconds(a, lambda: 1.0) for a in range(1, 8)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
    ]
    assert payload.backoff_seconds(3, lambda: 0.0) == 2.0


class Endpoint:
    """A local operator endpoint that answers from a script: (status, headers, body) each."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        self.received: list[tuple[str, str | None, dict[str, Any]]] = []
        self.on_request: Callable[[], object] = lambda: None


def serve(state: Endpoint, context: Any = None) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.received.append((self.path, self.headers.get("Authorization"), body))
            state.on_request()
            status, headers, text = state.answers.pop(0) if state.answers else (202, {}, b"")
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    scheme = "https" if context is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}/apis/ringmaster.dev/results"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def endpoint() -> Iterator[tuple[Endpoint, str]]:
    state = Endpoint()
    for url in serve(state):
        yield state, url


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("token-1\n")
    return path


class Waits:
    """sleep() and a monotonic clock that the sleeps advance: no test really waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


BODY = json.dumps({"version": 1, "node": "n", "failure": "x"}).encode()


def test_429_with_retry_after_then_202_is_posted_with_the_token_re_read(
    endpoint: tuple[Endpoint, str], token: Path
) -> None:
    state, url = endpoint
    state.answers = [(429, {"Retry-After": "7"}, b"busy"), (503, {}, b"starting"), (202, {}, b"")]
    state.on_request = lambda: token.write_text(f"token-{len(state.received) + 1}")
    waits, lines = Waits(), list[str]()
    posted = payload.post_result(
        url, BODY, str(token), clock=waits.clock, sleep=waits.sleep, rng=lambda: 1.0,
        log=lines.append,
    )  # fmt: skip
    assert posted
    assert waits.slept == [7.0, 2.0]  # Retry-After, then the backoff of a second failure
    assert [auth for _, auth, _ in state.received] == [
        "Bearer token-1",
        "Bearer token-2",
        "Bearer token-3",
    ]
    assert all(body == json.loads(BODY) for _, _, body in state.received)
    assert state.received[0][0] == "/apis/ringmaster.dev/results"
    assert any("429" in line and "busy" in line for line in lines)


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_refusal_is_not_retried_and_its_message_printed(
    endpoint: tuple[Endpoint, str], token: Path, status: int
) -> None:
    state, url = endpoint
    state.answers = [(status, {}, b'{"message": "gemm.0.tflops: must be at most 20000"}')]
    waits, lines = Waits(), list[str]()
    posted = payload.post_result(
        url, BODY, str(token), clock=waits.clock, sleep=waits.sleep, log=lines.append
    )
    assert not posted and len(state.received) == 1 and waits.slept == []
    assert str(status) in lines[-1] and "must be at most 20000" in lines[-1]


def test_an_unreachable_endpoint_is_retried_until_the_deadline(token: Path) -> None:
    waits, lines = Waits(), list[str]()
    posted = payload.post_result(
        "http://127.0.0.1:9/none", BODY, str(token), deadline_seconds=60,
        clock=waits.clock, sleep=waits.sleep, rng=lambda: 1.0, log=lines.append,
    )  # fmt: skip
    assert not posted
    assert waits.slept == [1.0, 2.0, 4.0, 8.0, 16.0, 29.0]  # the last one up to the deadline
    assert "giving up" in lines[-1] and "7 attempts" in lines[-1]


def test_a_missing_token_file_is_retried_too(
    endpoint: tuple[Endpoint, str], tmp_path: Path
) -> None:
    state, url = endpoint
    path = tmp_path / "later"
    waits = Waits()

    def sleep(seconds: float) -> None:
        waits.sleep(seconds)
        path.write_text("mounted")  # the projected token appears

    assert payload.post_result(url, BODY, str(path), clock=waits.clock, sleep=sleep, log=print)
    assert state.received[0][1] == "Bearer mounted"


def test_https_with_the_ca_file(tmp_path: Path) -> None:
    import ssl

    from ringmaster.localcluster.certificates import ServingCertificates

    certs = ServingCertificates.generate("profile-ca", "ringmaster", "localhost")
    for name, data in certs.as_files().items():
        (tmp_path / name).write_bytes(data)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    state = Endpoint()
    token = tmp_path / "token"
    token.write_text("t")
    for url in serve(state, context):
        assert payload.post_result(url, BODY, str(token), str(tmp_path / "ca.crt"), log=print)
        assert state.received[0][1] == "Bearer t"
        waits = Waits()  # without the CA, the server's certificate is not trusted: retried
        assert not payload.post_result(
            url, BODY, str(token), deadline_seconds=1, clock=waits.clock, sleep=waits.sleep,
            log=print,
        )  # fmt: skip
        assert len(state.received) == 1


# ---- The payload as the pod runs it -----------------------------------------------------------


def run_payload(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python3 -S -E payload.py``: no site-packages, no PYTHON* variables: the standard library
    only, whatever is installed here (torch is not importable, as in an image without it)."""
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_NAME": "gpu-node-3", **env}
    return subprocess.run(
        [sys.executable, "-S", "-E", str(PAYLOAD), *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_pytorch_a_dry_run_prints_a_failure_and_exits_non_zero() -> None:
    answer = run_payload("--dry-run", env={})
    assert answer.returncode == 1, answer.stderr
    result = json.loads(answer.stdout)
    assert result["node"] == "gpu-node-3" and result["device"] is None
    assert result["failure"].startswith("PyTorch is not importable in this image")
    assert "No module named 'torch'" in result["failure"]
    assert "PyTorch and NCCL" in result["failure"]
    parsed = parse_result(result)
    assert parsed.failure == result["failure"] and not parsed.gemm
    assert "PyTorch is not importable" in answer.stderr


def test_without_pytorch_the_failure_is_posted_and_the_exit_is_non_zero(
    endpoint: tuple[Endpoint, str], token: Path
) -> None:
    state, url = endpoint
    answer = run_payload(
        env={payload.URL_ENV: url, payload.TOKEN_FILE_ENV: str(token)},
    )
    assert answer.returncode == 1, answer.stderr
    assert answer.stdout == ""
    ((_, authorization, body),) = state.received
    assert authorization == "Bearer token-1"
    failure = parse_result(body).failure
    assert failure is not None and "PyTorch" in failure
    assert "result posted" in answer.stderr


def test_without_an_endpoint_the_result_is_printed_and_the_exit_is_2() -> None:
    answer = run_payload(env={})
    assert answer.returncode == 2
    assert json.loads(answer.stdout)["failure"].startswith("PyTorch")
    assert payload.URL_ENV in answer.stderr


def test_a_refused_post_exits_2(endpoint: tuple[Endpoint, str], token: Path) -> None:
    state, url = endpoint
    state.answers = [(401, {}, b"token for another profile")]
    answer = run_payload(env={payload.URL_ENV: url, payload.TOKEN_FILE_ENV: str(token)})
    assert answer.returncode == 2
    assert "token for another profile" in answer.stderr


def imported(node: ast.AST, into_functions: bool) -> set[str]:
    """The top-level names of the modules ``node`` imports (module level only, unless
    ``into_functions``: the bodies of functions and classes are where lazy imports are)."""
    names: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            names |= {alias.name.split(".")[0] for alias in child.names}
        elif isinstance(child, ast.ImportFrom):
            assert child.level == 0 and child.module, "no relative imports: it runs alone"
            names.add(child.module.split(".")[0])
        deferred = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if into_functions or not deferred:
            names |= imported(child, into_functions)
    return names


def test_the_payload_imports_only_the_standard_library() -> None:
    source = PAYLOAD.read_text(encoding="utf-8")
    tree = ast.parse(source)
    standard = set(sys.stdlib_module_names) | {"__future__"}
    module_level = imported(tree, into_functions=False)
    assert {"json", "ssl", "urllib"} <= module_level <= standard, module_level - standard
    # PyTorch only inside functions; never ringmaster, pydantic or numpy, anywhere.
    assert imported(tree, into_functions=True) - standard == {"torch"}
    assert len(source.splitlines()) < 1000
    ast.parse(source, feature_version=(3, 8))  # the image's Python may be older than ours


def test_the_import_walk_tells_lazy_from_module_level() -> None:
    tree = ast.parse(
        "import os\nif True:\n    from json import dumps\n"
        "def f():\n    import torch\nclass C:\n    import numpy\n"
    )
    assert imported(tree, into_functions=False) == {"os", "json"}
    assert imported(tree, into_functions=True) == {"os", "json", "torch", "numpy"}


# ---- The GPU path's orchestration against a fake torch ----------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0  # seconds of "device time"


class FakeEvent:
    def __init__(self, clock: FakeClock, enable_timing: bool = False) -> None:
        assert enable_timing
        self.clock, self.at = clock, math.nan

    def record(self) -> None:
        self.at = self.clock.now

    def elapsed_time(self, other: FakeEvent) -> float:
        return (other.at - self.at) * 1e3


def fake_torch(capability: tuple[int, int] = (9, 0), gpus: int = 8) -> Any:
    clock = FakeClock()
    props = SimpleNamespace(total_memory=80 * GIB, L2_cache_size=50 * MIB)
    cuda = SimpleNamespace(
        is_available=lambda: gpus > 0,
        device_count=lambda: gpus,
        set_device=lambda i: None,
        get_device_name=lambda i: "NVIDIA H100 80GB HBM3",
        get_device_properties=lambda i: props,
        get_device_capability=lambda i: capability,
        synchronize=lambda: None,
        empty_cache=lambda: None,
        Event=lambda enable_timing=False: FakeEvent(clock, enable_timing),
    )
    version = SimpleNamespace(cuda="12.4" if gpus else None, hip=None)
    return SimpleNamespace(
        cuda=cuda,
        version=version,
        __version__="2.5.1+cu124" if gpus else "2.5.1+cpu",
        _scaled_mm=object(),
        float8_e4m3fn=object(),
        clock=clock,
    )


def test_time_calls_times_each_call_and_not_its_setup_or_warmup() -> None:
    torch = fake_torch()
    calls: list[int] = []

    def call(i: int) -> None:
        calls.append(i)
        torch.clock.now += 0.001 * (i + 1)

    def setup(i: int) -> None:
        torch.clock.now += 1.0  # the untimed forward before a backward

    assert payload.time_calls(torch, call, 3, 2, setup) == pytest.approx([1.0, 2.0, 3.0])
    assert calls == [0, 1, 0, 1, 2]


def test_sustain_reads_burst_and_sustained_from_a_chain_of_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = fake_torch()
    flops = payload.gemm_flops(*payload.SUSTAIN_SHAPE)
    ran: list[int] = []

    def gemm_call(torch_: Any, precision: str, m: int, n: int, k: int, sets: int) -> Any:
        def call(i: int) -> None:  # 1.4 ms while cool, 1.6 ms once 100 calls have run
            ran.append(i)
            torch.clock.now += 0.0014 if len(ran) <= 100 else 0.0016

        return call

    monkeypatch.setattr(payload, "gemm_call", gemm_call)
    plan = payload.Budget(20, 2, 0.5, 0.0, 1, 1)
    sustained, burst = payload.measure_sustain(torch, "bf16", plan)
    # The probe (7 calls at 1.4 ms) sizes the run: ceil(0.5 s / 1.4 ms) = 358 calls.
    assert len(ran) == 7 + 358
    assert burst == pytest.approx(flops / 0.0014 / 1e12)
    assert sustained == pytest.approx(flops / 0.0016 / 1e12)


def test_measure_gemm_skips_fp8_on_an_a100_and_goes_on_past_a_failing_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = fake_torch(capability=(8, 0))
    built: list[tuple[str, int, int, int, int]] = []

    def gemm_call(torch_: Any, precision: str, m: int, n: int, k: int, sets: int) -> Any:
        if (m, n, k) == (4096, 4096, 4096):
            raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
        built.append((precision, m, n, k, sets))
        return lambda i: setattr(torch.clock, "now", torch.clock.now + 1e-3)

    monkeypatch.setattr(payload, "gemm_call", gemm_call)
    monkeypatch.setattr(payload, "budget", lambda quick: payload.Budget(20, 1, 0.1, 0.0, 1, 1))
    out: dict[str, Any] = {"gemm": [], "sustained": {}, "burst": {}, "skipped": []}
    payload.measure_gemm(torch, True, out)
    assert {p for p, *_ in built} == {"bf16"}
    assert len(out["gemm"]) == len(payload.gemm_shapes(True)) - 1
    assert out["skipped"][0].startswith("fp8: this GPU (compute capability 8.0) has no FP8")
    assert out["skipped"][1] == "gemm bf16 4096x4096x4096: RuntimeError: CUDA out of memory."
    assert set(out["sustained"]) == {"bf16"} and set(out["burst"]) == {"bf16"}
    sets = {(m, n, k): s for _, m, n, k, s in built}
    assert sets[(1024, 6144, 4096)] == 3  # 68 MiB of operands against a 50 MiB L2
    assert out["gemm"][0]["seconds"] == 0.001
    result = payload.build_result("n", DEVICE, **out, now=NOW)
    assert len(parse_result(result, now=NOW).gemm) == 7


def test_fp8_runs_on_hopper_and_fp16_stands_in_for_bf16_on_a_t4() -> None:
    assert payload.precisions(fake_torch((9, 0))) == ("bf16", "float8_e4m3fn", None)
    assert payload.precisions(fake_torch((8, 9)))[1] == "float8_e4m3fn"
    half, fp8, why = payload.precisions(fake_torch((7, 5)))
    assert (half, fp8) == ("fp16", None) and why and "7.5" in why


def test_collect_without_a_gpu_fails_with_why() -> None:
    result = payload.collect({"NODE_NAME": "cpu-1"}, importer=lambda: fake_torch(gpus=0))
    failure = parse_result(result).failure
    assert failure is not None and failure.startswith("no GPU is visible to PyTorch 2.5.1+cpu")
    assert "CPU-only build" in failure and result["device"] is None

    def broken() -> Any:
        raise OSError("libcudart.so.12: cannot open shared object file")

    result = payload.collect({"NODE_NAME": "n"}, importer=broken)
    assert "PyTorch is not importable in this image (OSError: libcudart" in result["failure"]


def test_collect_runs_what_the_env_names_and_the_result_validates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    def fake(name: str, key: str, value: Any) -> Callable[..., None]:
        def measure(torch: Any, quick: bool, out: dict[str, Any]) -> None:
            assert quick
            ran.append(name)
            if isinstance(out[key], list):
                out[key].append(value)
            else:
                out[key] = value

        return measure

    monkeypatch.setattr(payload, "measure_hbm", fake("Hbm", "hbm_gbps", 3010.0))
    monkeypatch.setattr(
        payload, "measure_gemm", fake("Gemm", "gemm", payload.gemm_point("bf16", 16, 16, 16, 1e-6))
    )
    monkeypatch.setattr(payload, "measure_step", fake("Step", "step", None))
    collectives: list[str] = []
    monkeypatch.setattr(
        payload, "measure_collectives", lambda torch, env, plan, out: collectives.append("ran")
    )
    env = {
        "NODE_NAME": "gpu-node-1",
        payload.MEASUREMENTS_ENV: "Gemm,Hbm,AllReduce,Nope",
        payload.QUICK_ENV: "1",
    }
    result = payload.collect(env, importer=fake_torch, smi=lambda: (700.0, "580.159.04"))
    assert ran == ["Hbm", "Gemm"] and collectives == []  # one host: no collectives
    parsed = parse_result(result)
    assert parsed.node == "gpu-node-1" and parsed.hbm_gbps == 3010.0 and len(parsed.gemm) == 1
    assert parsed.device is not None and parsed.device.count == 8
    assert parsed.device.cuda == "12.4" and parsed.device.driver == "580.159.04"
    assert any("'Nope'" in s for s in parsed.skipped)
    payload.collect(
        {**env, "WORLD_SIZE": "4", "RANK": "2"}, importer=fake_torch, smi=lambda: (None, None)
    )
    assert collectives == ["ran"]


def test_the_collective_spec_counts_hosts_from_the_pods_env() -> None:
    env = {"WORLD_SIZE": "4", "RANK": "3", "MASTER_ADDR": "p0.profile", "MASTER_PORT": "29500"}
    spec = payload.collective_spec(env, 8, ["all_reduce", "all_to_all"], True)
    assert spec["hosts"] == 4 and spec["host_rank"] == 3 and spec["local"] == 8
    assert spec["sizes"] == payload.collective_sizes(True)
    with pytest.raises(ValueError, match="RANK 4"):
        payload.collective_spec({**env, "RANK": "4"}, 8, ["all_reduce"], True)
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        payload.collective_spec({**env, "MASTER_ADDR": ""}, 8, ["all_reduce"], True)
    out: dict[str, Any] = {"skipped": [], "collectives": []}
    plan = payload.plan_from_env({})
    payload.measure_collectives(fake_torch(), {"WORLD_SIZE": "2"}, plan, out)
    assert out["skipped"] == ["collectives: MASTER_ADDR is not set"]


def test_a_payload_that_stops_still_reports_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def stops(env: Any) -> Any:
        raise KeyError("total_memory")

    monkeypatch.setattr(payload, "collect", stops)
    assert payload.main(["--dry-run"], env={"NODE_NAME": "gpu-node-9"}) == 1
    result = parse_result(json.loads(capsys.readouterr().out))
    assert result.node == "gpu-node-9"
    assert result.failure == "the payload stopped: KeyError: 'total_memory'"


def test_an_unreadable_ca_bundle_is_not_retried(tmp_path: Path) -> None:
    lines: list[str] = []
    missing = str(tmp_path / "ca.crt")
    assert not payload.post_result("https://127.0.0.1:9/x", BODY, None, missing, log=lines.append)
    assert lines and "CA bundle" in lines[0]
