#!/usr/bin/env python3
"""A PoolProfile's measurement payload: what this host's GPUs sustain, posted to the operator.

    python3 /ringmaster/payload.py            # measure, post the result
    python3 /ringmaster/payload.py --dry-run  # measure, print the result's JSON instead

The operator mounts this one file from a ConfigMap into the user's own image (any image with
Python 3.8+, PyTorch and NCCL: the job's training image), one pod per host. It imports only the
standard library at module level and PyTorch inside the functions that measure, so that an image
without PyTorch still gets a result that says so (``failure``) rather than a traceback. It never
imports ringmaster, pydantic or numpy: the image may have none of them. The result is
``ringmaster.profiling.results.HostResult`` (camelCase JSON, ``version`` 1).

Measured on device 0 (docs/pool-profile-payload.md has the details):

- ``Gemm``: y (M x N) = x (M x K) @ W^T over Llama-style layer shapes (qkv, out, gate_up, down
  of hidden 4096 and 8192; M 1,024-16,384 tokens) in bf16 (fp16 on chips without it) and fp8
  (``torch._scaled_mm``, tensor-wise scales, compute capability 8.9+). Each point: the median
  of >= 20 CUDA-event-timed calls after warm-up, rotating operand sets so that small problems do
  not run from L2. Then an 8192^3 GEMM back to back for seconds after idle: ``burstTflops`` is
  the median rate over its first ~50 ms, ``sustainedTflops`` over its last half.
- ``Attention``: causal bf16 ``scaled_dot_product_attention``, forward and backward, backend
  forced (FLASH_ATTENTION -> flash2, CUDNN_ATTENTION -> cudnn), head dim 128, 32 heads.
- ``Hbm``: a device-to-device copy of 1-4 GiB; GB/s counts bytes read plus written (GB = 1e9).
- ``Step``: one training step (forward, backward, fused AdamW) of a ~110M-parameter transformer.

Across hosts (``AllReduce``, ``AllToAll``), only when WORLD_SIZE > 1. The pod's env counts
hosts: WORLD_SIZE = pods (one per host), RANK = this pod's index, MASTER_ADDR and MASTER_PORT =
pod 0's. The payload spawns one process per local GPU (torch.multiprocessing, NCCL), global rank
RANK x local GPUs + local rank (every host must see as many GPUs), and measures nccl-tests'
busbw from 1 MiB to 4 GiB. Only RANK 0's result carries ``collectives``.

Env: NODE_NAME, RINGMASTER_PROFILE_MEASUREMENTS (comma list; default all),
RINGMASTER_PROFILE_QUICK=1 (a much smaller grid), RINGMASTER_PROFILE_RESULTS_URL,
RINGMASTER_PROFILE_TOKEN_FILE (a projected ServiceAccount token, re-read on every attempt),
RINGMASTER_PROFILE_CA_FILE (the endpoint's CA bundle, for https).

Exit status: 0 a result was posted (printed, with --dry-run); 1 the result posted (printed) says
``failure``; 2 it could not be posted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import email.utils
import http.client
import json
import math
import os
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    Json: TypeAlias = dict[str, Any]

RESULT_VERSION = 1
UTC = dt.timezone.utc  # noqa: UP017 (not dt.UTC: the payload runs on the image's Python, 3.8+)
MEASUREMENTS = ("Gemm", "Attention", "Hbm", "Step", "AllReduce", "AllToAll")
COLLECTIVE_OPS = {"AllReduce": "all_reduce", "AllToAll": "all_to_all"}

NODE_ENV = "NODE_NAME"
MEASUREMENTS_ENV = "RINGMASTER_PROFILE_MEASUREMENTS"
QUICK_ENV = "RINGMASTER_PROFILE_QUICK"
URL_ENV = "RINGMASTER_PROFILE_RESULTS_URL"
TOKEN_FILE_ENV = "RINGMASTER_PROFILE_TOKEN_FILE"
CA_FILE_ENV = "RINGMASTER_PROFILE_CA_FILE"

# The schema's bounds (ringmaster.profiling.results; a test checks they agree): what lies beyond
# them the operator refuses, so it goes to ``skipped`` here rather than failing the whole post.
MAX_TFLOPS = 20_000.0
MAX_HBM_GBPS = 20_000.0
MAX_BUS_GBPS = 5_000.0
MAX_POINTS = 512
MAX_SKIPPED = 64
MAX_SKIPPED_CHARS = 512
MAX_FAILURE_CHARS = 2048
MAX_NODE_NAME = 253

MIB = 1 << 20
GIB = 1 << 30
DEFAULT_L2_BYTES = 64 * MIB  # when torch does not say (L2_cache_size)
L2_CYCLE_FACTOR = 4  # distinct operands cycled before one is reused: 4x L2
MAX_ROTATION_SETS = 48
BURST_SECONDS = 0.05
POST_DEADLINE_SECONDS = 300.0
POST_TIMEOUT_SECONDS = 30.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
DEVICE = "cuda"  # "cpu" (and gloo) only to check this code on a CPU build of PyTorch
COLLECTIVE_TIMEOUT_SECONDS = 1800  # hosts start (pull the image) and measure at their own pace

NO_TORCH = (
    "PyTorch is not importable in this image ({error}): use an image with PyTorch and NCCL, "
    "such as the job's training image"
)


def say(message: str) -> None:
    """Progress, to stderr (stdout carries only the result, for --dry-run)."""
    stamp = time.strftime("%H:%M:%S")
    print(f"[ringmaster-profile {stamp}] {message}", file=sys.stderr, flush=True)


# ---- Statistics and formulas ------------------------------------------------------------------


def median_seconds(elapsed_ms: Iterable[float]) -> float:
    """The median of CUDA event timings (``Event.elapsed_time`` is in ms), in seconds."""
    values = [float(v) for v in elapsed_ms]
    if not values:
        raise ValueError("no timings")
    return statistics.median(values) / 1e3


def rotation_sets(
    operand_bytes: int,
    l2_bytes: int,
    factor: int = L2_CYCLE_FACTOR,
    max_sets: int = MAX_ROTATION_SETS,
) -> int:
    """How many independent operand sets to cycle through so that a call's operands have left
    L2 since their last use: enough to cover ``factor`` x L2 (DEFAULT_L2_BYTES when unknown),
    at most ``max_sets``, at least one (a problem that large needs no rotation)."""
    if operand_bytes <= 0:
        raise ValueError("operand_bytes must be positive")
    l2 = l2_bytes if l2_bytes > 0 else DEFAULT_L2_BYTES
    return max(1, min(max_sets, math.ceil(factor * l2 / operand_bytes)))


def gemm_flops(m: int, n: int, k: int) -> int:
    """Dense FLOPs of (m x k) @ (k x n): a multiply and an add per term."""
    return 2 * m * n * k


def attention_flops(
    batch: int, heads: int, sequence: int, head_dim: int, direction: str, causal: bool = True
) -> float:
    """One attention call: forward is 2 matmuls of 2 s^2 d per head, half of it when causal;
    backward is 2.5x forward (FlashAttention's convention: 5 matmuls to the forward's 2)."""
    forward = 4.0 * batch * heads * sequence * sequence * head_dim / (2 if causal else 1)
    if direction == "forward":
        return forward
    if direction == "backward":
        return 2.5 * forward
    raise ValueError(f"direction {direction!r} is neither forward nor backward")


def tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12


def copy_gbps(nbytes: int, seconds: float) -> float:
    """HBM bandwidth of a device-to-device copy: bytes read plus written (2 x size), GB = 1e9."""
    return 2 * nbytes / seconds / 1e9


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw (its doc/PERFORMANCE.md)."""
    if ranks < 1:
        raise ValueError("ranks must be at least 1")
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op in ("all_to_all", "all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    raise ValueError(f"no busbw formula for {op!r}")


def bus_gbps(op: str, nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth: algbw (bytes / time, GB = 1e9) x the op's factor."""
    return nbytes / seconds / 1e9 * bus_factor(op, ranks)


def sustained_and_burst(
    durations: Sequence[float], flops_per_call: float, burst_seconds: float = BURST_SECONDS
) -> tuple[float, float]:
    """(sustained, burst) TFLOP/s of one GEMM run back to back after idle, from each call's
    seconds in order. Burst: the median rate of the calls that end within the first
    ``burst_seconds`` (at least the first call). Sustained: the median rate of the calls that
    start in the last half of the run."""
    if not durations or any(d <= 0 for d in durations):
        raise ValueError("every call must take some time")
    total = sum(durations)
    burst: list[float] = []
    sustained: list[float] = []
    start = 0.0
    for duration in durations:
        rate = tflops(flops_per_call, duration)
        if start + duration <= burst_seconds or not burst:
            burst.append(rate)
        if start >= total / 2:
            sustained.append(rate)
        start += duration
    if not sustained:  # a single call longer than half the run
        sustained = [tflops(flops_per_call, durations[-1])]
    return statistics.median(sustained), statistics.median(burst)


def significant(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


# ---- What is measured -------------------------------------------------------------------------


def layer_shapes(hidden: int, kv: int = 1024, ffn_factor: float = 3.5) -> list[tuple[int, int]]:
    """(N, K) of a Llama-style layer's qkv, out, gate_up and down GEMMs: 8 KV heads of 128 and a
    gated FFN of 3.5 h (hidden 4096 and 8192 are Llama 3 8B's and 70B's)."""
    ffn = int(hidden * ffn_factor)
    return [(hidden + 2 * kv, hidden), (hidden, hidden), (2 * ffn, hidden), (hidden, ffn)]


def gemm_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """(M, N, K) of the GEMM grid: every layer GEMM of each hidden size at each token count."""
    hiddens = (4096,) if quick else (4096, 8192)
    tokens = (1024, 4096) if quick else (1024, 4096, 16384)
    return [(m, n, k) for h in hiddens for n, k in layer_shapes(h) for m in tokens]


SUSTAIN_SHAPE = (8192, 8192, 8192)
"""Run back to back for sustained and burst: compute-bound and ~1.5 ms on an H100, so that the
50 ms burst window holds dozens of calls (the grid's largest, ~20 ms, would hold two)."""

ATTENTION_TOKENS = 16384  # batch x sequence of each call
ATTENTION_HEADS = 32
ATTENTION_HEAD_DIM = 128


def attention_sequences(quick: bool) -> tuple[int, ...]:
    return (2048, 4096) if quick else (2048, 4096, 8192, 16384)


def collective_sizes(quick: bool) -> list[int]:
    """Bytes per rank: powers of 4 from 1 MiB to 4 GiB (quick: to 64 MiB)."""
    return [MIB * 4**i for i in range((3 if quick else 6) + 1)]


def collective_iterations(nbytes: int) -> int:
    return 20 if nbytes <= 256 * MIB else 5


@dataclass(frozen=True)
class Budget:
    reps: int  # timed calls of each GEMM, attention and copy point (>= 20)
    warmup: int
    sustain_seconds: float
    idle_seconds: float
    step_batch: int
    step_reps: int


def budget(quick: bool) -> Budget:
    return Budget(20, 2, 1.0, 0.5, 2, 5) if quick else Budget(25, 3, 5.0, 2.0, 8, 20)


@dataclass(frozen=True)
class Plan:
    measurements: tuple[str, ...]
    quick: bool
    notes: tuple[str, ...] = ()  # unknown names, for ``skipped``


def plan_from_env(env: Mapping[str, str]) -> Plan:
    """The measurements RINGMASTER_PROFILE_MEASUREMENTS names (any case; none: all), in their
    canonical order, and RINGMASTER_PROFILE_QUICK."""
    text = env.get(MEASUREMENTS_ENV, "").strip()
    quick = env.get(QUICK_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    if not text:
        return Plan(MEASUREMENTS, quick)
    known = {name.lower(): name for name in MEASUREMENTS}
    chosen, notes = set(), []
    for word in filter(None, (w.strip() for w in text.split(","))):
        if word.lower() in known:
            chosen.add(known[word.lower()])
        else:
            notes.append(f"unknown measurement {word!r} (known: {', '.join(MEASUREMENTS)})")
    return Plan(tuple(m for m in MEASUREMENTS if m in chosen), quick, tuple(notes))


# ---- The result (ringmaster.profiling.results' schema) ----------------------------------------


def gemm_point(precision: str, m: int, n: int, k: int, seconds: float) -> Json:
    rate = tflops(gemm_flops(m, n, k), seconds)
    return {"precision": precision, "m": m, "n": n, "k": k, "seconds": significant(seconds, 6),
            "tflops": significant(rate)}  # fmt: skip


def attention_point(
    kernel: str,
    direction: str,
    sequence: int,
    heads: int,
    head_dim: int,
    batch: int,
    seconds: float,
) -> Json:
    rate = tflops(attention_flops(batch, heads, sequence, head_dim, direction), seconds)
    return {"kernel": kernel, "direction": direction, "sequence": sequence, "headDim": head_dim,
            "heads": heads, "tflops": significant(rate)}  # fmt: skip


def collective_point(op: str, nbytes: int, ranks: int, hosts: int, seconds: float) -> Json:
    rate = bus_gbps(op, nbytes, seconds, ranks)
    return {"op": op, "bytes": nbytes, "ranks": ranks, "hosts": hosts,
            "busGBps": significant(rate)}  # fmt: skip


def reference_step(parameters: int, tokens: int, seconds: float) -> Json:
    return {"parameters": parameters, "tokens": tokens, "seconds": significant(seconds, 6)}


def _rate_ok(value: Any, upper: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= upper


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_result(
    node: str,
    device: Mapping[str, Any] | None,
    *,
    gemm: Iterable[Mapping[str, Any]] = (),
    sustained: Mapping[str, float] | None = None,
    burst: Mapping[str, float] | None = None,
    attention: Iterable[Mapping[str, Any]] = (),
    hbm_gbps: float | None = None,
    step: Mapping[str, Any] | None = None,
    collectives: Iterable[Mapping[str, Any]] = (),
    skipped: Iterable[str] = (),
    failure: str | None = None,
    now: dt.datetime | None = None,
) -> Json:
    """One host's result as the operator accepts it: a rate outside the schema's bounds (a
    timing gone wrong) is left out and named in ``skipped``, a failed result carries nothing
    measured and no device, strings are clipped to the schema's lengths."""
    notes = [str(s) for s in skipped]

    def keep(points: Iterable[Mapping[str, Any]], key: str, upper: float) -> list[Json]:
        kept = []
        for point in points:
            if _rate_ok(point.get(key), upper):
                kept.append(dict(point))
            else:
                notes.append(f"left out {dict(point)}: {key} is not in (0, {upper:g}]")
        return kept[:MAX_POINTS]

    def rates(values: Mapping[str, float] | None, what: str) -> dict[str, float]:
        kept = {}
        for precision, rate in (values or {}).items():
            if _rate_ok(rate, MAX_TFLOPS):
                kept[precision] = significant(rate)
            else:
                notes.append(f"left out {what} {precision}: {rate} is not in (0, {MAX_TFLOPS:g}]")
        return kept

    failed = failure is not None
    result: Json = {
        "version": RESULT_VERSION,
        "node": _clip(node or "unknown", MAX_NODE_NAME),
        "time": (now or dt.datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": None if failed or device is None else dict(device),
        "gemm": [] if failed else keep(gemm, "tflops", MAX_TFLOPS),
        "sustainedTflops": {} if failed else rates(sustained, "sustainedTflops"),
        "burstTflops": {} if failed else rates(burst, "burstTflops"),
        "attention": [] if failed else keep(attention, "tflops", MAX_TFLOPS),
        "hbmGBps": None,
        "referenceStep": None if failed or step is None else dict(step),
        "collectives": [] if failed else keep(collectives, "busGBps", MAX_BUS_GBPS),
        "skipped": [],
        "failure": _clip(failure or "failed", MAX_FAILURE_CHARS) if failed else None,
    }
    if hbm_gbps is not None and not failed:
        if _rate_ok(hbm_gbps, MAX_HBM_GBPS):
            result["hbmGBps"] = significant(hbm_gbps)
        else:
            notes.append(f"left out hbm: {hbm_gbps} GB/s is not in (0, {MAX_HBM_GBPS:g}]")
    result["skipped"] = [_clip(n, MAX_SKIPPED_CHARS) for n in notes if n][:MAX_SKIPPED]
    return result


def parse_nvidia_smi(text: str) -> tuple[float | None, str | None]:
    """(power limit in W, driver) from ``nvidia-smi --query-gpu=power.limit,driver_version
    --format=csv,noheader,nounits``'s first line; None for what says [N/A] or nothing."""
    lines = [line for line in text.splitlines() if line.strip()]
    fields = [f.strip() for f in lines[0].split(",")] if lines else []
    power: float | None = None
    with contextlib.suppress(IndexError, ValueError):
        value = float(fields[0])
        power = value if math.isfinite(value) and 0 < value <= 5000 else None
    driver = fields[1][:64] if len(fields) > 1 and fields[1] and fields[1][0] != "[" else None
    return power, driver


def nvidia_smi(run: Callable[..., Any] = subprocess.run) -> tuple[float | None, str | None]:
    """The power limit and driver of the pod's first GPU; (None, None) without nvidia-smi."""
    command = "nvidia-smi --query-gpu=power.limit,driver_version --format=csv,noheader,nounits"
    try:
        answer = run([*command.split(), "-i", "0"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return parse_nvidia_smi(answer.stdout) if answer.returncode == 0 else (None, None)


# ---- Posting ----------------------------------------------------------------------------------


def retry_after_seconds(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Retry-After as seconds: a number of seconds or an HTTP date; None if absent or unread."""
    if not value or not value.strip():
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value.strip()))
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or dt.datetime.now(UTC))).total_seconds())


def backoff_seconds(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """1, 2, 4, ... up to 30 s after the 1st, 2nd, 3rd... failure, less up to half of it at
    random (so that a pool's pods do not all come back at once)."""
    return min(30.0, 2.0 ** max(0, attempt - 1)) * (0.5 + 0.5 * rng())


def read_token(path: str | None) -> str | None:
    if not path:
        return None
    with open(path, encoding="ascii") as handle:  # re-read each time: the kubelet rotates it
        return handle.read().strip()


def post_result(
    url: str,
    body: bytes,
    token_file: str | None,
    ca_file: str | None = None,
    *,
    deadline_seconds: float = POST_DEADLINE_SECONDS,
    timeout: float = POST_TIMEOUT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
    log: Callable[[str], None] = say,
) -> bool:
    """POST the result; True once the operator accepts it. 429, 5xx, connection errors and an
    unreadable token file are retried with backoff (Retry-After when the server gives one) for
    ``deadline_seconds``; any other refusal (400, 401, 403, 404...) ends it at once, printing
    the server's message."""
    try:
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    except (OSError, ssl.SSLError) as error:
        log(f"cannot read the CA bundle {ca_file}: {error}")
        return False
    started, attempt = clock(), 0
    while True:
        attempt += 1
        wait: float | None = None
        try:
            token = read_token(token_file)
        except OSError as error:
            problem = f"cannot read the token file {token_file}: {error}"
        else:
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
                    log(f"result posted to {url}: {answer.status}")
                    return True
            except urllib.error.HTTPError as error:
                message = error.read(2048).decode("utf-8", "replace").strip()
                problem = f"{error.code} {error.reason}: {message}"
                if error.code not in RETRY_STATUSES:
                    log(f"the operator refused the result ({problem}); not retrying")
                    return False
                wait = retry_after_seconds(error.headers.get("Retry-After"))
            except (OSError, http.client.HTTPException) as error:  # URLError is an OSError
                problem = f"{type(error).__name__}: {error}"
        left = deadline_seconds - (clock() - started)
        if left <= 0:
            log(f"giving up posting after {attempt} attempts: {problem}")
            return False
        delay = min(left, wait if wait is not None else backoff_seconds(attempt, rng))
        log(f"posting failed ({problem}); again in {delay:.1f} s")
        sleep(delay)


# ---- Measuring on the GPU (PyTorch imported here, never at module level) ----------------------


def import_torch() -> Any:
    import torch

    return torch


def device_info(torch: Any, smi: Callable[[], tuple[Any, Any]] = nvidia_smi) -> Json:
    power, driver = smi()
    build = torch.version.cuda or getattr(torch.version, "hip", None)
    return {
        "name": _clip(str(torch.cuda.get_device_name(0)) or "unknown", 128),
        "count": min(128, int(torch.cuda.device_count())),
        "memoryBytes": min(2**44, int(torch.cuda.get_device_properties(0).total_memory)),
        "powerLimitWatts": power,
        "driver": driver,
        "torch": _clip(str(torch.__version__), 64),
        "cuda": _clip(str(build), 32) if build else None,
    }


def no_gpu_message(torch: Any, env: Mapping[str, str]) -> str:
    hip = getattr(torch.version, "hip", None)
    build = f"built for ROCm {hip}" if hip else f"built for CUDA {torch.version.cuda}"
    return (
        f"no GPU is visible to PyTorch {torch.__version__} (torch.cuda.is_available() is False; "
        f"{build if hip or torch.version.cuda else 'a CPU-only build'}; "
        f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r}): the pod needs the pool's "
        "GPUs (nvidia.com/gpu) and an image whose PyTorch is built for them"
    )


def time_calls(
    torch: Any,
    call: Callable[[int], Any],
    reps: int,
    warmup: int,
    setup: Callable[[int], Any] | None = None,
) -> list[float]:
    """Each call's milliseconds (a CUDA event before and after), after ``warmup`` untimed calls.
    ``setup(i)``, untimed, runs before call i (the forward before a timed backward). A short
    GPU spin queued first keeps the timed calls back to back: device time, not launch gaps."""
    for i in range(warmup):
        if setup:
            setup(i)
        call(i)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    with contextlib.suppress(Exception):
        torch.cuda._sleep(20_000_000)  # ~10-20 ms
    for i in range(reps):
        if setup:
            setup(i)
        starts[i].record()
        call(i)
        ends[i].record()
    torch.cuda.synchronize()
    return [starts[i].elapsed_time(ends[i]) for i in range(reps)]


def precisions(torch: Any) -> tuple[str, str | None, str | None]:
    """(the 16-bit precision, the fp8 dtype's name or None, why not fp8)."""
    major, minor = torch.cuda.get_device_capability(0)
    hip = getattr(torch.version, "hip", None)
    half = "bf16" if hip or major >= 8 else "fp16"
    fp8 = "float8_e4m3fnuz" if hip else "float8_e4m3fn"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, fp8):
        return half, None, f"fp8: PyTorch {torch.__version__} has no _scaled_mm or {fp8}"
    needed = (9, 4) if hip else (8, 9)
    if (major, minor) < needed:
        why = (f"fp8: this GPU (compute capability {major}.{minor}) has no FP8 tensor cores "
               f"(needs {needed[0]}.{needed[1]} or later)")  # fmt: skip
        return half, None, why
    return half, fp8, None


def gemm_operand_bytes(precision: str, m: int, n: int, k: int) -> int:
    """x and W in the precision, y in 16 bits."""
    return (m * k + n * k) * (1 if precision.startswith("float8") else 2) + m * n * 2


def gemm_call(
    torch: Any, precision: str, m: int, n: int, k: int, sets: int
) -> Callable[[int], None]:
    """y = x @ W^T on operand set i % sets: torch.mm in bf16/fp16; torch._scaled_mm in fp8,
    tensor-wise scales of 1, bf16 out, W^T the column-major operand it needs."""
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    operands = []
    for _ in range(sets):
        if half is not None:
            x, w, y = (torch.randn(shape, device=DEVICE, dtype=half)
                       for shape in ((m, k), (n, k), (m, n)))  # fmt: skip
            operands.append((x, w, y))
        else:
            fp8, bf16 = getattr(torch, precision), torch.bfloat16
            x, w = (torch.randn(shape, device=DEVICE, dtype=bf16).to(fp8)
                    for shape in ((m, k), (n, k)))  # fmt: skip
            operands.append((x, w, None))
    one = torch.ones((), device=DEVICE, dtype=torch.float32)

    def call(i: int) -> None:
        x, w, y = operands[i % sets]
        if y is not None:
            torch.mm(x, w.t(), out=y)
        else:
            torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    return call


def _label(precision: str) -> str:
    return "fp8" if precision.startswith("float8") else precision


def measure_gemm(torch: Any, quick: bool, out: Json) -> None:
    plan = budget(quick)
    half, fp8, why_not = precisions(torch)
    if why_not:
        out["skipped"].append(why_not)
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
    for precision in [half] + ([fp8] if fp8 else []):
        label = _label(precision)
        for m, n, k in gemm_shapes(quick):
            try:
                sets = rotation_sets(gemm_operand_bytes(precision, m, n, k), l2)
                call = gemm_call(torch, precision, m, n, k, sets)
                ms = time_calls(torch, call, plan.reps, plan.warmup)
                out["gemm"].append(gemm_point(label, m, n, k, median_seconds(ms)))
            except Exception as error:
                _skip(torch, out, f"gemm {label} {m}x{n}x{k}", error)
        try:
            sustained, burst = measure_sustain(torch, precision, plan)
            out["sustained"][label], out["burst"][label] = sustained, burst
            say(f"{label}: burst {burst:.1f}, sustained {sustained:.1f} TFLOP/s")
        except Exception as error:
            _skip(torch, out, f"sustained {label}", error)


def measure_sustain(torch: Any, precision: str, plan: Budget) -> tuple[float, float]:
    """SUSTAIN_SHAPE back to back for ``plan.sustain_seconds`` after ``plan.idle_seconds`` of
    idle: (sustained, burst) TFLOP/s from a chain of events, one between consecutive calls."""
    m, n, k = SUSTAIN_SHAPE
    call = gemm_call(torch, precision, m, n, k, 1)
    probe = median_seconds(time_calls(torch, call, 5, 2))
    calls = max(40, min(100_000, math.ceil(plan.sustain_seconds / probe)))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    torch.cuda.synchronize()
    time.sleep(plan.idle_seconds)  # the clocks and the power come back
    with contextlib.suppress(Exception):
        torch.cuda._sleep(20_000_000)  # then the calls run back to back from the first
    events[0].record()
    for i in range(calls):
        call(i)
        events[i + 1].record()
    torch.cuda.synchronize()
    durations = [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(calls)]
    return sustained_and_burst(durations, gemm_flops(m, n, k))


def measure_attention(torch: Any, quick: bool, out: Json) -> None:
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as error:
        _skip(torch, out, "attention (torch.nn.attention, PyTorch 2.3+)", error)
        return
    plan, heads, dim = budget(quick), ATTENTION_HEADS, ATTENTION_HEAD_DIM
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for kernel, name in (("flash2", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION")):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            out["skipped"].append(f"attention {kernel}: PyTorch {torch.__version__} has no {name}")
            continue
        for sequence in attention_sequences(quick):
            batch = max(1, ATTENTION_TOKENS // sequence)
            shape = (batch, heads, sequence, dim)
            try:
                q, k, v, grad = (torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
                                 for _ in range(4))  # fmt: skip
                qkv = [t.requires_grad_() for t in (q, k, v)]
                held: list[Any] = []

                def forward(i: int, qkv: Any = qkv, held: Any = held) -> None:
                    held[:] = [sdpa(*qkv, is_causal=True)]

                def backward(i: int, qkv: Any = qkv, held: Any = held, grad: Any = grad) -> None:
                    torch.autograd.grad(held.pop(), qkv, grad)  # no .grad to accumulate into

                for direction in ("forward", "backward"):
                    with sdpa_kernel(backend), torch.set_grad_enabled(direction == "backward"):
                        if direction == "forward":
                            ms = time_calls(torch, forward, plan.reps, plan.warmup)
                        else:
                            ms = time_calls(torch, backward, plan.reps, plan.warmup, forward)
                    seconds = median_seconds(ms)
                    point = attention_point(kernel, direction, sequence, heads, dim, batch, seconds)
                    out["attention"].append(point)
            except Exception as error:
                _skip(torch, out, f"attention {kernel} sequence {sequence}", error)


def measure_hbm(torch: Any, quick: bool, out: Json) -> None:
    plan, size = budget(quick), (1 if quick else 4) * GIB
    try:
        free, _ = torch.cuda.mem_get_info(0)
        while size > 256 * MIB and 2.5 * size > free:
            size //= 2
        src = torch.empty(size, dtype=torch.uint8, device=DEVICE).fill_(7)
        dst = torch.empty_like(src)
        ms = time_calls(torch, lambda i: dst.copy_(src), plan.reps, plan.warmup)
        out["hbm_gbps"] = copy_gbps(size, median_seconds(ms))
        say(f"hbm: {out['hbm_gbps']:.0f} GB/s (a {size / GIB:g} GiB copy)")
    except Exception as error:
        _skip(torch, out, "hbm", error)


@dataclass(frozen=True)
class ReferenceConfig:
    """The reference transformer: GPT-2 small's width and depth, a 32k vocabulary, tied
    embeddings, no biases, causal SDPA attention (~110M parameters)."""

    vocab: int = 32768
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    ffn: int = 3072
    sequence: int = 2048


def reference_parameters(c: ReferenceConfig) -> int:
    """Its parameters: the embedding (tied with the head); per layer qkv, out, up and down and
    two LayerNorms (weight and bias); the final LayerNorm."""
    per_layer = 4 * c.hidden * c.hidden + 2 * c.hidden * c.ffn + 4 * c.hidden
    return c.vocab * c.hidden + c.layers * per_layer + 2 * c.hidden


def reference_model(torch: Any, c: ReferenceConfig) -> Any:
    nn, F = torch.nn, torch.nn.functional
    module: Any = nn.Module

    class Block(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(c.hidden), nn.LayerNorm(c.hidden)
            self.qkv = nn.Linear(c.hidden, 3 * c.hidden, bias=False)
            self.out = nn.Linear(c.hidden, c.hidden, bias=False)
            self.up = nn.Linear(c.hidden, c.ffn, bias=False)
            self.down = nn.Linear(c.ffn, c.hidden, bias=False)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, s, 3, c.heads, c.hidden // c.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, s, c.hidden))
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    class Model(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(c.vocab, c.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(c.layers))
            self.norm = nn.LayerNorm(c.hidden)

        def forward(self, tokens: Any) -> Any:
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return F.linear(self.norm(x), self.embed.weight)

    return Model()


def measure_step(torch: Any, quick: bool, out: Json) -> None:
    """The reference transformer's training step: autocast to bf16 (fp16), fused AdamW."""
    plan, c = budget(quick), ReferenceConfig()
    try:
        dtype = torch.bfloat16 if precisions(torch)[0] == "bf16" else torch.float16
        model = reference_model(torch, c).to(DEVICE)
        try:
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        except (TypeError, RuntimeError) as error:
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            out["skipped"].append(f"step: fused AdamW unavailable ({error}); the default used")
        tokens, targets = (torch.randint(0, c.vocab, (plan.step_batch, c.sequence), device=DEVICE)
                           for _ in range(2))  # fmt: skip
        cross_entropy = torch.nn.functional.cross_entropy

        def step(i: int) -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(DEVICE, dtype=dtype):
                logits = model(tokens)
            cross_entropy(logits.float().view(-1, c.vocab), targets.view(-1)).backward()
            optimizer.step()

        ms = time_calls(torch, step, plan.step_reps, 3)
        parameters = sum(int(p.numel()) for p in model.parameters())
        out["step"] = reference_step(parameters, plan.step_batch * c.sequence, median_seconds(ms))
        say(f"step: {parameters / 1e6:.0f}M parameters, {out['step']['seconds']} s")
    except Exception as error:
        _skip(torch, out, "step", error)


def _skip(torch: Any, out: Json, label: str, error: BaseException) -> None:
    first = (str(error).strip().splitlines() or [""])[0]
    note = f"{label}: {type(error).__name__}: {first}"
    out["skipped"].append(note)
    say(f"skipped {note}")
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---- Collectives: one process per local GPU, all GPUs of all the profiled hosts ---------------


def collective_spec(env: Mapping[str, str], local: int, ops: Sequence[str], quick: bool) -> Json:
    """What each spawned rank needs, from the pod's env (which counts hosts, see the top)."""
    hosts, host_rank = int(env["WORLD_SIZE"]), int(env.get("RANK") or "0")
    if not 0 <= host_rank < hosts:
        raise ValueError(f"RANK {host_rank} is not in [0, WORLD_SIZE {hosts})")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            raise ValueError(f"{name} is not set")
    return {"hosts": hosts, "host_rank": host_rank, "local": local, "ops": list(ops),
            "sizes": collective_sizes(quick), "warmup": 2 if quick else 5,
            "master_addr": env["MASTER_ADDR"], "master_port": env["MASTER_PORT"]}  # fmt: skip


def _collective_worker(local_rank: int, spec: Json, out_path: str) -> None:
    """One rank: each op at each size; its time is the slowest rank's (nccl-tests' way: the
    mean of ``collective_iterations`` back-to-back calls after warm-up)."""
    import torch
    import torch.distributed as dist

    world = spec["hosts"] * spec["local"]
    rank = spec["host_rank"] * spec["local"] + local_rank
    os.environ.update(MASTER_ADDR=spec["master_addr"], MASTER_PORT=str(spec["master_port"]),
                      RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(spec["local"]))  # fmt: skip
    torch.cuda.set_device(local_rank)
    timeout = dt.timedelta(seconds=COLLECTIVE_TIMEOUT_SECONDS)
    backend = "nccl" if DEVICE == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
    points, skipped = [], []
    flag = torch.ones(1, device=DEVICE)
    for op in spec["ops"]:
        for nbytes in spec["sizes"]:
            count = nbytes // 4 // world * world  # fp32; all_to_all splits it evenly
            buffers: list[Any] = []
            try:
                buffers = [torch.ones(count, device=DEVICE) for _ in range(2)]
                flag.fill_(1)
            except Exception:
                buffers = []
                flag.fill_(0)
                torch.cuda.empty_cache()
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # every rank runs it, or none
            if flag.item() < 1:
                skipped.append(f"{op} {count * 4} bytes: a rank could not allocate its buffers")
                continue
            src, dst = buffers

            def run(src: Any = src, dst: Any = dst, op: str = op) -> None:
                if op == "all_reduce":
                    dist.all_reduce(src)
                else:
                    dist.all_to_all_single(dst, src)

            for _ in range(spec["warmup"]):
                run()
            iterations = collective_iterations(nbytes)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iterations):
                run()
            end.record()
            torch.cuda.synchronize()
            seconds = torch.tensor([start.elapsed_time(end) / 1e3 / iterations], device=DEVICE)
            dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
            point = collective_point(op, count * 4, world, spec["hosts"], float(seconds.item()))
            points.append(point)
            if rank == 0:
                say(f"{op} {count * 4} bytes: busbw {point['busGBps']} GB/s")
            del buffers, src, dst, run
            torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump({"points": points, "skipped": skipped}, handle)


def measure_collectives(torch: Any, env: Mapping[str, str], plan: Plan, out: Json) -> None:
    ops = [COLLECTIVE_OPS[m] for m in plan.measurements if m in COLLECTIVE_OPS]
    try:
        spec = collective_spec(env, int(torch.cuda.device_count()), ops, plan.quick)
    except (KeyError, ValueError) as error:
        out["skipped"].append(f"collectives: {error}")
        return
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    say(f"collectives: {spec['hosts']} hosts x {spec['local']} GPUs, {', '.join(ops)}")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "collectives.json")
        try:
            import torch.multiprocessing as mp

            mp.spawn(_collective_worker, args=(spec, path), nprocs=spec["local"], join=True)
            if spec["host_rank"] == 0:
                with open(path, encoding="utf-8") as handle:
                    found = json.load(handle)
                out["collectives"].extend(found["points"])
                out["skipped"].extend(found["skipped"])
        except Exception as error:
            _skip(torch, out, "collectives", error)


# ---- The whole run ----------------------------------------------------------------------------


def collect(
    env: Mapping[str, str],
    importer: Callable[[], Any] = import_torch,
    smi: Callable[[], tuple[Any, Any]] = nvidia_smi,
) -> Json:
    """Measure this host as ``env`` says; the result (with ``failure`` when it cannot)."""
    node = env.get(NODE_ENV) or socket.gethostname()
    plan = plan_from_env(env)
    try:
        torch = importer()
    except Exception as error:  # ImportError, or an OSError from a broken CUDA library
        why = NO_TORCH.format(error=f"{type(error).__name__}: {error}")
        return build_result(node, None, failure=why)
    try:
        visible = bool(torch.cuda.is_available()) and int(torch.cuda.device_count()) > 0
    except Exception as error:
        return build_result(node, None, failure=f"CUDA does not start in PyTorch: {error}")
    if not visible:
        return build_result(node, None, failure=no_gpu_message(torch, env))
    torch.cuda.set_device(0)
    device = device_info(torch, smi)
    say(f"{node}: {device['count']} x {device['name']}, PyTorch {device['torch']}")
    out: Json = {"gemm": [], "sustained": {}, "burst": {}, "attention": [], "hbm_gbps": None,
                 "step": None, "collectives": [], "skipped": list(plan.notes)}  # fmt: skip
    local = {"Hbm": measure_hbm, "Gemm": measure_gemm, "Attention": measure_attention,
             "Step": measure_step}  # fmt: skip
    for name, measure in local.items():
        if name in plan.measurements:
            say(f"measuring {name}")
            measure(torch, plan.quick, out)
    wants = any(m in COLLECTIVE_OPS for m in plan.measurements)
    if wants and int(env.get("WORLD_SIZE") or "1") > 1:
        measure_collectives(torch, env, plan, out)  # only host 0 keeps the points
    return build_result(node, device, **out)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure this host for a PoolProfile.")
    parser.add_argument("--dry-run", action="store_true", help="print the result, do not post")
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    try:
        result = collect(env)
    except Exception as error:  # a bug here, or an image we did not foresee: say so, still
        why = f"the payload stopped: {type(error).__name__}: {error}"
        result = build_result(env.get(NODE_ENV) or socket.gethostname(), None, failure=why)
    failed = result["failure"] is not None
    if failed:
        say(f"failure: {result['failure']}")
    if args.dry_run:
        print(json.dumps(result, indent=1))
        return 1 if failed else 0
    body = json.dumps(result, separators=(",", ":"))
    url = env.get(URL_ENV)
    if not url:
        print(body)
        say(f"{URL_ENV} is not set: the result is printed above, not posted (--dry-run does so)")
        return 2
    if not post_result(url, body.encode(), env.get(TOKEN_FILE_ENV), env.get(CA_FILE_ENV) or None):
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
