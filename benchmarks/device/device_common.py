"""What benchmarks/device's parts share: the device, dtypes, event timing, CUDA graphs."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

DEV = "cuda"
BF16 = torch.bfloat16
GIB = 1 << 30


def median_ms(fn: Any, reps: int = 20, warmup: int = 3) -> float:
    """Median device milliseconds of ``fn`` (events between calls)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    marks[0].record()
    for i in range(reps):
        fn()
        marks[i + 1].record()
    torch.cuda.synchronize()
    return statistics.median(marks[i].elapsed_time(marks[i + 1]) for i in range(reps))


def graphed(fn: Any) -> Any:
    """``fn`` captured once in a CUDA graph; returns the replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def randn(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(*shape, device=DEV, dtype=dtype)


def rotation(nbytes: int, l2: int) -> int:
    """Operand sets a graph rotates through so that ``nbytes`` a call is read past the L2."""
    return max(1, min(48, math.ceil(4 * l2 / max(nbytes, 1))))


def rotated_gemm_us(n: int, k: int, m: int, l2: int) -> tuple[float, int]:
    """(us per call, sets): y = x W^T in bf16 at M = ``m`` over rotated operand sets, one graph."""
    sets = rotation(2 * (n * k + m * k + m * n), l2)
    ws = [randn(n, k) for _ in range(sets)]
    xs = [randn(m, k) for _ in range(sets)]

    def calls() -> None:
        for w, x in zip(ws, xs, strict=True):
            torch.mm(x, w.t())

    return median_ms(graphed(calls), reps=10) / sets * 1e3, sets


def fwd_bwd_ms(fn: Any, inputs: list[torch.Tensor], reps: int = 10) -> tuple[float, float]:
    """(forward ms, forward + backward ms) of ``fn(*inputs)``, gradients w.r.t. every input."""

    def forward() -> Any:
        return fn(*inputs)

    out = forward()
    grad = torch.randn_like(out)

    def both() -> None:
        torch.autograd.grad(fn(*inputs), inputs, grad)

    return median_ms(forward, reps), median_ms(both, reps)
