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
from device_common import DEV, GIB, graphed, median_ms, randn, rotated_gemm_us, rotation
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


# ---- the mixed step: decodes and a prompt chunk in one step (chunked prefill) ---------------

# (decodes, prompt chunk) pairs at one context; 0 decodes or 0 prompt tokens: the pure steps.
MIXED_BATCHES = (16, 64, 128, 256)
MIXED_CHUNKS = (256, 512, 1024, 2048)
MIXED_CONTEXT = 1024
# A second width: one tensor-parallel rank of Llama-3.1-70B at TP 4 (hidden 8192, 16 / 2 heads,
# FFN 7168 a rank), 20 of its 80 layers (the step is per layer; fewer layers keep the call short).
LLAMA_70B_TP4_RANK = {
    "hidden": 8192,
    "layers": 20,
    "heads": 16,
    "kv_heads": 2,
    "head_dim": 128,
    "ffn": 7168,
    "vocab": 32064,
}


def measure_serving_mixed(out: dict[str, Any], make_model: Any, backend_for: Any) -> None:
    """Chunked prefill's step: ``decodes`` sequences at MIXED_CONTEXT and a ``chunk``-token
    prompt flattened into one token set, so every GEMM runs M = decodes + chunk (vLLM V1's and
    SGLang's mixed batch), attention split (decode attention over the caches, causal attention
    over the chunk); beside the decode-only and chunk-only steps of the same shapes. Fused
    elementwise kernels, one CUDA graph a step."""
    ops = FusedOps()
    out["serving_mixed"] = {
        "what": "one step of `decodes` sequences (context tokens each) and one `chunk`-token "
        "prompt in one flattened token set: GEMMs at M = decodes + chunk, decode attention over "
        "the caches and causal attention over the chunk, LM head over the decodes and the "
        "chunk's last token; fused elementwise groups (torch.compile), one CUDA graph a step",
        "models": {},
    }
    for name, config, batches, chunks in (
        ("llama-3.1-8b", None, MIXED_BATCHES, MIXED_CHUNKS),
        ("llama-3.1-70b-tp4-rank-20-layers", LLAMA_70B_TP4_RANK, (64, 256), (512, 2048)),
    ):
        model = make_model(config)
        rows: list[dict[str, Any]] = []
        out["serving_mixed"]["models"][name] = {"model": model.c, "rows": rows}
        configs = [(b, 0) for b in batches] + [(0, p) for p in chunks]
        configs += [(b, p) for b in batches for p in chunks]
        for decodes, chunk in configs:
            try:
                rows.append(mixed_row(model, ops, decodes, chunk, backend_for))
            except Exception:
                rows.append(
                    {"decodes": decodes, "chunk": chunk, "failure": traceback.format_exc()[-800:]}
                )
            print(name, json.dumps(rows[-1]), flush=True)
            torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()


def mixed_row(model: Any, ops: FusedOps, decodes: int, chunk: int, backend_for: Any) -> Any:
    c = model.c
    d, nh, nkv = c["head_dim"], c["heads"], c["kv_heads"]
    context = MIXED_CONTEXT
    tokens = decodes + chunk
    caches = [
        (randn(decodes, nkv, context, d), randn(decodes, nkv, context, d))
        for _ in range(c["layers"] if decodes else 0)
    ]
    ids = torch.randint(0, c["vocab"], (1, tokens), device=DEV)
    cos, sin = randn(1, 1, tokens, d), randn(1, 1, tokens, d)
    # the rows the LM head reads: every decode and the chunk's last token
    heads_at = torch.tensor(
        list(range(decodes)) + ([tokens - 1] if chunk else []), device=DEV, dtype=torch.long
    )
    decode_backend = (
        backend_for(randn(decodes, nh, 1, d), caches[0][0], caches[0][1], False)
        if decodes
        else None
    )
    prompt_backend = (
        backend_for(randn(1, nh, chunk, d), randn(1, nkv, chunk, d), randn(1, nkv, chunk, d), True)
        if chunk
        else None
    )

    def attend(i: int, q: Any, k: Any, v: Any) -> Any:
        parts = []
        if decodes:
            kc, vc = caches[i]
            # (1, heads, decodes, d) -> (decodes, heads, 1, d): one query per sequence
            kc[:, :, -1:].copy_(k[0, :, :decodes].transpose(0, 1).unsqueeze(2))
            vc[:, :, -1:].copy_(v[0, :, :decodes].transpose(0, 1).unsqueeze(2))
            qd = q[0, :, :decodes].transpose(0, 1).unsqueeze(2)
            with sdpa_kernel(decode_backend):
                o = F.scaled_dot_product_attention(qd, kc, vc, enable_gqa=True)
            parts.append(o.squeeze(2).transpose(0, 1).unsqueeze(0))
        if chunk:
            with sdpa_kernel(prompt_backend):
                parts.append(
                    F.scaled_dot_product_attention(
                        q[:, :, decodes:],
                        k[:, :, decodes:],
                        v[:, :, decodes:],
                        is_causal=True,
                        enable_gqa=True,
                    )
                )
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def step() -> Any:
        y = fused_forward(model, ops, model.embed[ids], attend, cos, sin)
        return (y[0, heads_at] @ model.head.t()).argmax(-1)

    row: dict[str, Any] = {"decodes": decodes, "chunk": chunk, "context": context}
    with torch.no_grad():
        row["ms"] = round(median_ms(graphed(step), reps=20), 4)
        row["eager"] = categories(step)
    return row


# ---- the step's kernels near the GEMMs' ridge, and a prompt's attention alone ----------------

KNEE_TOKENS = (64, 128, 192, 256, 320, 384, 448, 512, 768, 1024, 2048)
# (model, hidden, the layer's four GEMMs as (N, K)): the 8B's, and one TP-4 rank of the 70B's
KNEE_SHAPES = (
    ("llama-3.1-8b", {"qkv": (6144, 4096), "out": (4096, 4096), "gate_up": (28672, 4096),
                      "down": (4096, 14336)}),
    ("llama-3.1-70b-tp4-rank", {"qkv": (2560, 8192), "out": (8192, 2048),
                                "gate_up": (14336, 8192), "down": (8192, 7168)}),
)  # fmt: skip
PROMPT_ATTENTION = ((32, 8), (16, 2))  # (query heads, KV heads) a rank: the 8B, a 70B TP-4 rank
PROMPT_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192)


def measure_step_kernels(out: dict[str, Any], backends: Any) -> None:
    """GEMMs at M = 64-2,048 tokens on a layer's four shapes (operand sets rotated past L2, one
    CUDA graph of the calls): where the weights' stream gives way to the tensor cores; and one
    prompt's causal attention alone (batch 1, 128-8,192 tokens) under each SDPA backend, beside
    16,384 tokens a call (the ceilings' measured rows): what a short prompt fills of the chip."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    gemm_rows: list[dict[str, Any]] = []
    attention_rows: list[dict[str, Any]] = []
    out["step_kernels"] = {
        "gemm": gemm_rows,
        "attention": attention_rows,
        "what": "GEMM y = x W^T bf16 (torch.mm), per call from a graph of `sets` rotated calls; "
        "attention: SDPA causal, enable_gqa, bf16, head dim 128, q (b, s, H, d) transposed "
        "views as in Llama code, per call from a graph of `sets` rotated calls",
    }
    for model, shapes in KNEE_SHAPES:
        for name, (n, k) in shapes.items():
            for m in KNEE_TOKENS:
                try:
                    us, sets = rotated_gemm_us(n, k, m, l2)
                    gemm_rows.append(
                        {"model": model, "gemm": name, "m": m, "n": n, "k": k, "sets": sets,
                         "us": round(us, 3)}
                    )  # fmt: skip
                except Exception:
                    failure = traceback.format_exc()[-400:]
                    gemm_rows.append({"model": model, "gemm": name, "m": m, "failure": failure})
        print(model, "gemm rows", len(gemm_rows), flush=True)
    d = 128
    for heads, kv_heads in PROMPT_ATTENTION:
        for backend in backends:
            for batch, s in [(1, s) for s in PROMPT_LENGTHS] + [(8, 2048), (16, 1024)]:
                try:
                    nbytes = 2 * batch * s * d * (2 * heads + 2 * kv_heads)
                    sets = rotation(nbytes, l2)
                    qs = [randn(batch, s, heads, d).transpose(1, 2) for _ in range(sets)]
                    ks = [randn(batch, s, kv_heads, d).transpose(1, 2) for _ in range(sets)]
                    vs = [randn(batch, s, kv_heads, d).transpose(1, 2) for _ in range(sets)]

                    def attend(qs=qs, ks=ks, vs=vs, backend=backend):
                        with sdpa_kernel(backend):
                            for q, k_, v in zip(qs, ks, vs, strict=True):
                                F.scaled_dot_product_attention(
                                    q, k_, v, is_causal=True, enable_gqa=True
                                )

                    us = median_ms(graphed(attend), reps=10) / sets * 1e3
                    flops = 4 * batch * s * s * heads * d / 2
                    attention_rows.append(
                        {"backend": backend.name, "heads": heads, "kv_heads": kv_heads,
                         "batch": batch, "s": s, "sets": sets, "us": round(us, 3),
                         "tflops": round(flops / us / 1e6, 1)}
                    )  # fmt: skip
                    del qs, ks, vs
                except Exception:
                    failure = traceback.format_exc()[-400:]
                    attention_rows.append(
                        {"backend": backend.name, "heads": heads, "batch": batch, "s": s,
                         "failure": failure}
                    )  # fmt: skip
                print(json.dumps(attention_rows[-1]), flush=True)
    torch.cuda.empty_cache()


# ---- attention inside a layer's GEMMs: does it run at its alone rate? ------------------------

INTERFERENCE_LAYERS = 8
INTERFERENCE_CASES = (  # (kind, sequences, tokens a sequence): a prompt's and a decode's call
    ("prompt", 1, 512),
    ("prompt", 1, 2048),
    ("prompt", 1, 8192),
    ("decode", 64, 1024),
    ("decode", 256, 1024),
)


def measure_interference(out: dict[str, Any]) -> None:
    """INTERFERENCE_LAYERS layers of the 8B's shapes, one CUDA graph each way: the attention
    calls alone, the four GEMMs alone (M = the call's query tokens), and both interleaved as a
    layer runs them; each timed for 20 replays after warm-up (burst) and again over 2 s of
    back-to-back replays (sustained). Whether a step's attention runs at its rate alone."""
    rows: list[dict[str, Any]] = []
    out["interference"] = {
        "rows": rows,
        "what": "graphs of INTERFERENCE_LAYERS layers: attention alone, the layer's 4 GEMMs "
        "alone (bf16, M = query tokens), both interleaved; ms per graph, burst (median of 20 "
        "after warm-up) and sustained (median over 2 s of replays)",
    }
    for kind, sequences, tokens in INTERFERENCE_CASES:
        try:
            rows.append(interference_row(kind, sequences, tokens))
        except Exception:
            rows.append({"kind": kind, "tokens": tokens, "failure": traceback.format_exc()[-600:]})
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()


def interference_row(kind: str, sequences: int, tokens: int) -> dict[str, Any]:
    shapes = dict(KNEE_SHAPES)["llama-3.1-8b"]
    heads, kv_heads, d = 32, 8, 128
    causal = kind == "prompt"
    queries = tokens if causal else 1
    m = sequences * queries
    layers = []
    for _ in range(INTERFERENCE_LAYERS):
        q = randn(sequences, queries, heads, d).transpose(1, 2)
        k = randn(sequences, tokens, kv_heads, d).transpose(1, 2)
        v = randn(sequences, tokens, kv_heads, d).transpose(1, 2)
        ws = [randn(n, kk) for n, kk in shapes.values()]
        xs = [randn(m, kk) for _, kk in shapes.values()]
        layers.append((q, k, v, ws, xs))

    def attend(layer: Any) -> None:
        q, k, v, _, _ = layer
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def gemms(layer: Any) -> None:
        for w, x in zip(layer[3], layer[4], strict=True):
            torch.mm(x, w.t())

    def attention_only() -> None:
        for layer in layers:
            attend(layer)

    def gemms_only() -> None:
        for layer in layers:
            gemms(layer)

    def both() -> None:
        for layer in layers:
            gemms(layer)
            attend(layer)

    row: dict[str, Any] = {"kind": kind, "sequences": sequences, "tokens": tokens}
    for name, fn in (("attention", attention_only), ("gemms", gemms_only), ("both", both)):
        replay = graphed(fn)
        row[f"{name}_ms"] = round(median_ms(replay, reps=20), 4)
        row[f"{name}_sustained_ms"] = round(sustained_ms(replay, 2.0), 4)
    return row


def sustained_ms(replay: Any, seconds: float) -> float:
    """Median ms of back-to-back replays over ``seconds`` (the clock under the power cap)."""
    import time

    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 5)
    times.sort()
    return times[len(times) // 2]
