"""The serving step with its elementwise kernels fused, beside the same step unfused.

``decode`` and ``prefill`` (measure.py) run PyTorch's separate norm, RoPE, SwiGLU and residual
kernels, which a serving engine fuses (vLLM's ``fused_add_rms_norm``, ``rotary_embedding``,
``silu_and_mul``): those rows bound the engine's composed step from above. ``serving_fused``
times the same Llama-3.1-8B step both ways on one machine, the fused one with each elementwise
group ``torch.compile``-d into one kernel (a residual add with the next norm; the QKV split with
RoPE; SiLU with the gate product), the GEMMs (cuBLAS) and attention (SDPA) as they were, all
replayed from one CUDA graph. One profiled eager call of the fused step sorts its kernels' device
time into GEMM, attention and the rest, so the engine's parts can be held against each.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

import torch
import torch.nn.functional as F
from device_common import DEV, GIB, graphed, median_ms, randn
from torch.nn.attention import sdpa_kernel

EPS = 1e-5


def add_rms_norm(h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor) -> Any:
    h = h + delta
    return h, F.rms_norm(h, (h.shape[-1],), w, EPS)


def rms_norm(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(h, (h.shape[-1],), w, EPS)


def split_rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, nh: int, nkv: int) -> Any:
    b, t, _ = qkv.shape
    d = cos.shape[-1]
    q, k, v = qkv.split([nh * d, nkv * d, nkv * d], dim=-1)

    def rope(x: torch.Tensor) -> torch.Tensor:
        half = d // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    q = rope(q.view(b, t, nh, d).transpose(1, 2))
    k = rope(k.view(b, t, nkv, d).transpose(1, 2))
    return q, k, v.view(b, t, nkv, d).transpose(1, 2)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


class FusedOps:
    """The elementwise groups, compiled once per shape (Inductor: one kernel each, or two)."""

    def __init__(self) -> None:
        import torch._dynamo

        for limit in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 256)
        # dynamic=None: static for the first shape, one dynamic recompile once shapes change
        self.add_rms_norm = torch.compile(add_rms_norm, fullgraph=True)
        self.rms_norm = torch.compile(rms_norm, fullgraph=True)
        self.split_rope = torch.compile(split_rope, fullgraph=True)
        self.silu_mul = torch.compile(silu_mul, fullgraph=True)


def fused_forward(model: Any, ops: FusedOps, x: torch.Tensor, attend: Any, cos: Any, sin: Any):
    """The model's layers with fused elementwise groups; returns the final normed hidden state."""
    c = model.c
    b, t, _ = x.shape
    d, nh, nkv = c["head_dim"], c["heads"], c["kv_heads"]
    delta = None
    for i, w in enumerate(model.layers):
        x, y = (
            (x, ops.rms_norm(x, w["n1"])) if delta is None else ops.add_rms_norm(x, delta, w["n1"])
        )
        q, k, v = ops.split_rope(y @ w["wqkv"].t(), cos, sin, nh, nkv)
        a = attend(i, q, k, v).transpose(1, 2).reshape(b, t, nh * d)
        x, y = ops.add_rms_norm(x, a @ w["wo"].t(), w["n2"])
        delta = ops.silu_mul(y @ w["wgu"].t()) @ w["wd"].t()
    return ops.add_rms_norm(x, delta, model.norm)[1]


def categories(fn: Any) -> dict[str, Any]:
    """One profiled call: device ms per kernel category and the kernel count."""
    from torch.profiler import ProfilerActivity, profile
    from train_parts import kernel_category

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    by: dict[str, float] = {}
    kernels = 0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
            key = kernel_category(event.name)
            by[key] = by.get(key, 0.0) + event.time_range.elapsed_us() / 1e3
    return {"kernels": kernels, "device_ms_by_category": {k: round(v, 4) for k, v in by.items()}}


DECODE_CONFIGS = (
    (1, 1024),
    (8, 1024),
    (32, 1024),
    (64, 1024),
    (128, 1024),
    (256, 1024),
    (1, 4096),
    (32, 4096),
    (64, 4096),
    (128, 4096),
)
PREFILL_CONFIGS = ((1, 128), (1, 512), (1, 2048), (1, 8192), (4, 2048), (8, 1024))


def measure_serving_fused(out: dict[str, Any], model: Any, backend_for: Any) -> None:
    """``model``: measure.py's Llama of LLAMA_8B; ``backend_for``: its attention_backend."""
    c = model.c
    ops = FusedOps()
    d, nkv = c["head_dim"], c["kv_heads"]
    kv_per_token = 2 * c["layers"] * nkv * d * 2
    decode_rows: list[dict[str, Any]] = []
    prefill_rows: list[dict[str, Any]] = []
    out["serving_fused"] = {
        "model": c,
        "decode": decode_rows,
        "prefill": prefill_rows,
        "what": "Llama-3.1-8B bf16, one CUDA graph a call: unfused = measure.py's decode / "
        "prefill modules; fused = the residual add with the next RMSNorm, the QKV split with "
        "RoPE, SiLU with the gate product, each torch.compile-d "
        "(fullgraph, recompiled as shapes change); "
        "GEMMs and SDPA unchanged; categories from one profiled eager call of each",
    }
    free = torch.cuda.mem_get_info()[0]
    fits = [(b, n) for b, n in DECODE_CONFIGS if b * n * kv_per_token <= free - 8 * GIB]
    measure_rows(
        decode_rows, fits, "context", lambda b, n: decode_row(model, ops, b, n, backend_for)
    )
    measure_rows(
        prefill_rows,
        PREFILL_CONFIGS,
        "prompt",
        lambda b, p: prefill_row(model, ops, b, p, backend_for),
    )


def measure_rows(rows: list[dict[str, Any]], configs: Any, length: str, measure: Any) -> None:
    """One row per (batch, length): a failed configuration leaves its traceback, not a gap."""
    for batch, n in configs:
        try:
            rows.append(measure(batch, n))
        except Exception:
            rows.append({"batch": batch, length: n, "failure": traceback.format_exc()[-800:]})
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()


def decode_row(model: Any, ops: FusedOps, batch: int, context: int, backend_for: Any) -> Any:
    c = model.c
    d, nkv = c["head_dim"], c["kv_heads"]
    caches = [
        (randn(batch, nkv, context, d), randn(batch, nkv, context, d)) for _ in range(c["layers"])
    ]
    tokens = torch.randint(0, c["vocab"], (batch, 1), device=DEV)
    cos, sin = randn(1, 1, 1, d), randn(1, 1, 1, d)
    backend = backend_for(randn(batch, c["heads"], 1, d), caches[0][0], caches[0][1], False)

    def attend(i: int, q: Any, k: Any, v: Any) -> Any:
        kc, vc = caches[i]
        kc[:, :, -1:].copy_(k)  # the new token's K and V into the cache
        vc[:, :, -1:].copy_(v)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)

    def unfused() -> Any:
        x = model.embed[tokens]
        for i, w in enumerate(model.layers):
            x = model.layer(w, x, lambda q, k, v, i=i: attend(i, q, k, v), cos, sin)
        return model.logits(x).argmax(-1)

    def fused() -> Any:
        y = fused_forward(model, ops, model.embed[tokens], attend, cos, sin)
        return (y @ model.head.t()).argmax(-1)

    row: dict[str, Any] = {"batch": batch, "context": context, "attention_backend": backend.name}
    with torch.no_grad():
        row["unfused_ms"] = round(median_ms(graphed(unfused), reps=20), 4)
        row["fused_ms"] = round(median_ms(graphed(fused), reps=20), 4)
        row["fused_eager"] = categories(fused)
        row["unfused_eager"] = categories(unfused)
    return row


def prefill_row(model: Any, ops: FusedOps, batch: int, prompt: int, backend_for: Any) -> Any:
    c = model.c
    d = c["head_dim"]
    tokens = torch.randint(0, c["vocab"], (batch, prompt), device=DEV)
    cos, sin = randn(1, 1, prompt, d), randn(1, 1, prompt, d)
    q0, k0 = randn(batch, c["heads"], prompt, d), randn(batch, c["kv_heads"], prompt, d)
    backend = backend_for(q0, k0, k0, True)
    del q0, k0

    def attend(_: int, q: Any, k: Any, v: Any) -> Any:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def unfused() -> Any:
        x = model.embed[tokens]
        for w in model.layers:
            x = model.layer(w, x, lambda q, k, v: attend(0, q, k, v), cos, sin)
        return model.logits(x[:, -1:]).argmax(-1)

    def fused() -> Any:
        y = fused_forward(model, ops, model.embed[tokens], attend, cos, sin)
        return (y[:, -1:] @ model.head.t()).argmax(-1)

    row: dict[str, Any] = {"batch": batch, "prompt": prompt, "attention_backend": backend.name}
    with torch.no_grad():
        row["unfused_ms"] = round(median_ms(graphed(unfused), reps=10), 4)
        row["fused_ms"] = round(median_ms(graphed(fused), reps=10), 4)
        row["fused_eager"] = categories(fused)
        row["unfused_eager"] = categories(unfused)
    return row
