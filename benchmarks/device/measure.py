#!/usr/bin/env python3
"""Whole steps and the kernels the PoolProfile payload does not time, on one lent GPU.

    python3 benchmarks/device/measure.py PART OUT.json

PART: decode, prefill, decode_ops, grouped, grouped_fp8 (here), a MoE part (moe_parts.py:
MOE_PARTS) or a training part (train_parts.py: TRAINING_PARTS); their helpers are in
device_common.py.

Run by benchmarks/device/run.sh on the device machine (never in CI: it needs a GPU). Each part
writes its own JSON, so one that fails leaves the others' figures. Every time is the median of
CUDA-event-timed calls after warm-up; short calls are replayed from a CUDA graph so the host's
launch gaps are not in them (what a serving engine's graphs see).

- ``decode``: one decode step of a Llama-3.1-8B shape (32 layers, hidden 4096, 32 / 8 heads of
  128, FFN 14336, vocab 128256), bf16, contiguous KV cache, SDPA's decode attention, replayed from
  one CUDA graph, batch 1-256 x context 1k-4k: the check of the serving engine's decode step.
- ``prefill``: the same model's forward over one prompt of 128-8192 tokens (causal SDPA).
- ``serving_fused``: the decode and prefill steps again, beside the same steps with their norms,
  RoPE, SwiGLU and residual adds fused as a serving engine runs them (serving_parts.py).
- ``serving_mixed``: chunked prefill's step, decodes and a prompt chunk in one flattened token
  set (GEMMs at M = decodes + chunk), beside the decode-only and chunk-only steps
  (serving_parts.py).
- ``step_kernels``: GEMMs at M = 64-2,048 on the 8B's and a 70B TP-4 rank's layer shapes (the
  ridge between the weights' stream and the tensor cores), and one prompt's causal attention
  alone at 128-8,192 tokens under FlashAttention 2 and cuDNN (serving_parts.py).
- ``interference``: a prompt's and a decode's attention calls alone, the layer's GEMMs alone
  and both interleaved, at burst and sustained clocks (serving_parts.py).
- ``decode_ops``: the decode step's kernels alone: GEMMs at M = 1-512 (operand sets rotated past
  L2) and decode attention by batch x context (fits the decode ceilings of a chip).
- ``grouped``: an MoE layer's expert GEMMs as ``torch._grouped_mm`` runs them (one kernel over
  the local experts), against one dense GEMM of all the tokens and a loop of per-expert GEMMs,
  at 8-2048 tokens per expert, for DeepSeek-V3, Qwen3-235B, Mixtral 8x7B and gpt-oss-120b shapes.
- ``fp8_linear``: one linear layer of Llama 3 8B's widths forward + backward in bf16 and in FP8
  with dynamic tensorwise scaling (torchao's, else the same recipe here), eager and compiled,
  against its three FP8 GEMMs on operands cast beforehand: what FP8's casts cost.
- ``train_compiled``: the ``train`` model with bf16 weights, torchtitan's recipe on one GPU
  (each block and the loss ``torch.compile``-d, torchao's float8 on the blocks' linear layers).
- ``train``: a plain-PyTorch training step (eager modules written as Hugging Face's Llama is,
  SDPA, bf16 autocast over fp32 weights, fp32-upcast loss, ``torch.optim.AdamW`` foreach) of
  1B and 3B Llama shapes; one profiled step sorts the kernels' device time into GEMM, attention,
  loss, optimizer and the rest, and counts the kernels, against the wall time.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, GIB, graphed, median_ms, randn, rotated_gemm_us, rotation
from moe_parts import MOE_PARTS
from serving_parts import (
    measure_interference,
    measure_serving_fused,
    measure_serving_mixed,
    measure_step_kernels,
)
from torch.nn.attention import SDPBackend, sdpa_kernel
from train_parts import TRAINING_PARTS

LLAMA_8B = {
    "hidden": 4096,
    "layers": 32,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn": 14336,
    "vocab": 128256,
}


def attention_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Any:
    """The first SDPA backend that runs these shapes with GQA: flash, cuDNN, efficient."""
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
    ):
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            torch.cuda.synchronize()
            return backend
        except Exception:  # the next backend is tried
            continue
    return SDPBackend.MATH


# ---- decode and prefill: a Llama-3.1-8B-shaped model ---------------------------------------


class Llama:
    def __init__(self, c: dict[str, int]) -> None:
        self.c = c
        h, d, f = c["hidden"], c["head_dim"], c["ffn"]
        qkv = (c["heads"] + 2 * c["kv_heads"]) * d
        self.layers = [
            {
                "wqkv": randn(qkv, h) * 0.02,
                "wo": randn(h, c["heads"] * d) * 0.02,
                "wgu": randn(2 * f, h) * 0.02,
                "wd": randn(h, f) * 0.02,
                "n1": torch.ones(h, device=DEV, dtype=BF16),
                "n2": torch.ones(h, device=DEV, dtype=BF16),
            }
            for _ in range(c["layers"])
        ]
        self.embed = randn(c["vocab"], h) * 0.02
        self.head = randn(c["vocab"], h) * 0.02
        self.norm = torch.ones(h, device=DEV, dtype=BF16)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def layer(self, w: dict[str, torch.Tensor], x: torch.Tensor, attend: Any, cos: Any, sin: Any):
        c = self.c
        b, t, h = x.shape
        d, nh, nkv = c["head_dim"], c["heads"], c["kv_heads"]
        y = F.rms_norm(x, (h,), w["n1"], 1e-5)
        qkv = y @ w["wqkv"].t()
        q, k, v = qkv.split([nh * d, nkv * d, nkv * d], dim=-1)
        q = self.rope(q.view(b, t, nh, d).transpose(1, 2), cos, sin)
        k = self.rope(k.view(b, t, nkv, d).transpose(1, 2), cos, sin)
        v = v.view(b, t, nkv, d).transpose(1, 2)
        a = attend(q, k, v).transpose(1, 2).reshape(b, t, nh * d)
        x = x + a @ w["wo"].t()
        y = F.rms_norm(x, (h,), w["n2"], 1e-5)
        g, u = (y @ w["wgu"].t()).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ w["wd"].t()

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.norm, 1e-5) @ self.head.t()


def measure_decode(out: dict[str, Any]) -> None:
    c = LLAMA_8B
    model = Llama(c)
    d, nkv = c["head_dim"], c["kv_heads"]
    kv_per_token = 2 * c["layers"] * nkv * d * 2
    free = torch.cuda.mem_get_info()[0]
    rows: list[dict[str, Any]] = []
    out["decode"] = {"model": c, "rows": rows}
    for context in (1024, 2048, 4096):
        for batch in (1, 8, 32, 64, 128, 256):
            if batch * context * kv_per_token > free - 8 * GIB:
                continue
            caches = [
                (randn(batch, nkv, context, d), randn(batch, nkv, context, d))
                for _ in range(c["layers"])
            ]
            tokens = torch.randint(0, c["vocab"], (batch, 1), device=DEV)
            cos, sin = randn(1, 1, 1, d), randn(1, 1, 1, d)
            q0 = randn(batch, c["heads"], 1, d)
            backend = attention_backend(q0, caches[0][0], caches[0][1], causal=False)

            def step(tokens=tokens, caches=caches, backend=backend, cos=cos, sin=sin):
                x = model.embed[tokens]
                for w, (kc, vc) in zip(model.layers, caches, strict=True):

                    def attend(q, k, v, kc=kc, vc=vc):
                        kc[:, :, -1:].copy_(k)  # the new token's K and V into the cache
                        vc[:, :, -1:].copy_(v)
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)

                    x = model.layer(w, x, attend, cos, sin)
                return model.logits(x).argmax(-1)

            replay = graphed(step)
            ms = median_ms(replay, reps=20)
            rows.append(
                {
                    "batch": batch,
                    "context": context,
                    "ms": round(ms, 4),
                    "kv_gib": round(batch * context * kv_per_token / GIB, 3),
                    "attention_backend": backend.name,
                }
            )
            print(f"decode b={batch} ctx={context} {ms:.3f} ms ({backend.name})", flush=True)
            del caches, replay
            torch.cuda.empty_cache()
    weights = sum(t.numel() for w in model.layers for t in w.values()) + 2 * model.embed.numel()
    out["decode"].update(
        {
            "parameters": weights,
            "what": "one decode step (graph replay), bf16, contiguous KV of "
            "`context` tokens per sequence, lm_head and argmax included",
        }
    )


def measure_prefill(out: dict[str, Any]) -> None:
    c = LLAMA_8B
    model = Llama(c)
    d = c["head_dim"]
    rows: list[dict[str, Any]] = []
    out["prefill"] = {
        "model": c,
        "rows": rows,
        "what": "forward over the prompt (causal SDPA), logits of its last token",
    }
    for batch, prompt in (
        (1, 128),
        (1, 512),
        (1, 1024),
        (1, 2048),
        (1, 4096),
        (1, 8192),
        (4, 2048),
        (8, 1024),
    ):
        tokens = torch.randint(0, c["vocab"], (batch, prompt), device=DEV)
        cos, sin = randn(1, 1, prompt, d), randn(1, 1, prompt, d)
        q0 = randn(batch, c["heads"], prompt, d)
        k0 = randn(batch, c["kv_heads"], prompt, d)
        backend = attention_backend(q0, k0, k0, causal=True)

        def attend(q, k, v, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        def forward(tokens=tokens, cos=cos, sin=sin, attend=attend):
            x = model.embed[tokens]
            for w in model.layers:
                x = model.layer(w, x, attend, cos, sin)
            return model.logits(x[:, -1:]).argmax(-1)  # the first output token's logits only

        with torch.no_grad():
            eager = median_ms(forward, reps=10)
            replay = graphed(forward)
            graph = median_ms(replay, reps=10)
        rows.append(
            {
                "batch": batch,
                "prompt": prompt,
                "eager_ms": round(eager, 4),
                "graph_ms": round(graph, 4),
                "attention_backend": backend.name,
            }
        )
        print(f"prefill b={batch} s={prompt} eager {eager:.3f} graph {graph:.3f} ms", flush=True)
        del replay
        torch.cuda.empty_cache()


def measure_decode_ops(out: dict[str, Any]) -> None:
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    gemm_rows: list[dict[str, Any]] = []
    attention_rows: list[dict[str, Any]] = []
    out["decode_ops"] = {
        "gemm": gemm_rows,
        "attention": attention_rows,
        "what": "per call, from a graph of `sets` rotated calls; GEMM y = x W^T "
        "bf16; attention: 32 query / 8 KV heads of 128, one query token",
    }
    for hidden in (4096, 8192):
        ffn = int(hidden * 3.5)
        shapes = {
            "qkv": (hidden + 2048, hidden),
            "out": (hidden, hidden),
            "gate_up": (2 * ffn, hidden),
            "down": (hidden, ffn),
        }
        for name, (n, k) in shapes.items():
            for m in (1, 8, 32, 128, 512):
                us, sets = rotated_gemm_us(n, k, m, l2)
                gemm_rows.append(
                    {
                        "hidden": hidden,
                        "gemm": name,
                        "m": m,
                        "n": n,
                        "k": k,
                        "sets": sets,
                        "us": round(us, 3),
                    }
                )
    for batch in (1, 8, 32, 128, 256):
        for context in (1024, 4096, 16384):
            kv_bytes = 2 * batch * 8 * context * 128 * 2
            if kv_bytes > 40 * GIB:
                continue
            sets = rotation(kv_bytes, l2)
            qs = [randn(batch, 32, 1, 128) for _ in range(sets)]
            ks = [randn(batch, 8, context, 128) for _ in range(sets)]
            vs = [randn(batch, 8, context, 128) for _ in range(sets)]
            backend = attention_backend(qs[0], ks[0], vs[0], causal=False)

            def calls(qs=qs, ks=ks, vs=vs, backend=backend):
                with sdpa_kernel(backend):
                    for q, k, v in zip(qs, ks, vs, strict=True):
                        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

            ms = median_ms(graphed(calls), reps=10) / sets
            attention_rows.append(
                {
                    "batch": batch,
                    "context": context,
                    "sets": sets,
                    "us": round(ms * 1e3, 3),
                    "kv_bytes": kv_bytes,
                    "GBps": round(kv_bytes / (ms * 1e-3) / 1e9, 1),
                    "backend": backend.name,
                }
            )
            del qs, ks, vs
            torch.cuda.empty_cache()


MOE_SHAPES = {
    # name: (hidden, expert ffn, experts per rank)
    "deepseek-v3-ep32": (7168, 2048, 8),
    "deepseek-v3-ep8": (7168, 2048, 32),
    "qwen3-235b-ep16": (4096, 1536, 8),
    "mixtral-8x7b-ep1": (4096, 14336, 8),
    "gpt-oss-120b-ep4": (2880, 2880, 32),
}


class GroupedCase(NamedTuple):
    row: dict[str, Any]  # the case's identity: model, gemm, experts, tokens_per_expert, n, k
    w: torch.Tensor  # [E, N, K] expert weights, bf16
    x: torch.Tensor  # [E x tokens an expert, K] routed tokens, bf16
    offs: torch.Tensor  # the experts' end offsets, int32
    flops: int


def grouped_cases() -> Iterator[GroupedCase]:
    """Every MOE_SHAPES expert GEMM (gate + up, down) at 8-2,048 tokens an expert, equal tokens
    each (up to 8 GiB of activations)."""
    for name, (hidden, ffn, experts) in MOE_SHAPES.items():
        for gemm, (n, k) in (("gate_up", (2 * ffn, hidden)), ("down", (hidden, ffn))):
            w = randn(experts, n, k)
            for per_expert in (8, 32, 128, 512, 2048):
                tokens = per_expert * experts
                if tokens * max(n, k) * 2 > 8 * GIB:
                    continue
                offs = torch.arange(1, experts + 1, device=DEV, dtype=torch.int32) * per_expert
                row: dict[str, Any] = {
                    "model": name,
                    "gemm": gemm,
                    "experts": experts,
                    "tokens_per_expert": per_expert,
                    "n": n,
                    "k": k,
                }
                yield GroupedCase(row, w, randn(tokens, k), offs, 2 * tokens * n * k)
            del w
            torch.cuda.empty_cache()


def timed(row: dict[str, Any], key: str, call: Any, flops: int) -> None:
    """``row``'s ``key``_us and ``key``_tflops: ``call`` replayed from one CUDA graph."""
    us = median_ms(graphed(call), 10) * 1e3
    row[f"{key}_us"] = round(us, 3)
    row[f"{key}_tflops"] = round(flops / (us * 1e-6) / 1e12, 1)


def measure_grouped(out: dict[str, Any]) -> None:
    rows: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    out["grouped"] = {"rows": rows, "errors": errors}
    for case in grouped_cases():
        row, w, x, offs, flops = case
        experts, n, k = row["experts"], row["n"], row["k"]
        try:
            wt = w.transpose(-2, -1)  # [E, K, N] column-major, what the kernel wants
            timed(
                row, "grouped", lambda x=x, wt=wt, o=offs: torch._grouped_mm(x, wt, offs=o), flops
            )
        except Exception as error:  # recorded, the loop and dense still run
            errors[f"{row['model']}/{row['gemm']}"] = repr(error)[:300]
        xs = x.view(experts, row["tokens_per_expert"], k)

        def loop(xs: torch.Tensor = xs, w: torch.Tensor = w, experts: int = experts) -> None:
            for e in range(experts):
                torch.mm(xs[e], w[e].t())

        timed(row, "loop", loop, flops)
        wide = randn(n, k)
        timed(row, "dense_all_tokens", lambda x=x, wide=wide: torch.mm(x, wide.t()), flops)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out["grouped"]["what"] = (
        "bf16; grouped = torch._grouped_mm over the rank's experts, equal "
        "tokens each; loop = one torch.mm per expert; dense_all_tokens = "
        "one weight of the same shape times all the tokens (the same FLOPs "
        "as one dense GEMM: the bound a grouped kernel could reach)"
    )


def measure_grouped_fp8(out: dict[str, Any]) -> None:
    """The same expert GEMMs in FP8 (torch._scaled_grouped_mm: E4M3 operands pre-quantised,
    rowwise float32 scales, bf16 out: torchao's float8 MoE training path on Hopper) beside bf16
    torch._grouped_mm, each from one CUDA graph."""
    rows: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    out["grouped_fp8"] = {"rows": rows, "errors": errors}
    e4m3 = torch.float8_e4m3fn
    for case in grouped_cases():
        row, w, x, offs, flops = case
        w8, x8 = w.to(e4m3), x.to(e4m3)
        w_scale = torch.ones(row["experts"], row["n"], device=DEV, dtype=torch.float32)
        x_scale = torch.ones(x.shape[0], device=DEV, dtype=torch.float32)
        for key, call in (
            ("bf16", lambda x=x, w=w, o=offs: torch._grouped_mm(x, w.transpose(-2, -1), offs=o)),
            (
                "fp8",
                lambda a=x8, b=w8, sa=x_scale, sb=w_scale, o=offs: torch._scaled_grouped_mm(
                    a, b.transpose(-2, -1), sa, sb, offs=o, out_dtype=torch.bfloat16
                ),
            ),
        ):
            try:
                timed(row, key, call, flops)
            except Exception as error:  # recorded; the other key still runs
                errors[f"{row['model']}/{row['gemm']}/{key}"] = repr(error)[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)


PARTS = {
    "decode": measure_decode,
    "prefill": measure_prefill,
    "decode_ops": measure_decode_ops,
    "grouped": measure_grouped,
    "grouped_fp8": measure_grouped_fp8,
    "serving_fused": lambda out: measure_serving_fused(out, Llama(LLAMA_8B), attention_backend),
    "serving_mixed": lambda out: measure_serving_mixed(
        out, lambda config: Llama(config or LLAMA_8B), attention_backend
    ),
    "step_kernels": lambda out: measure_step_kernels(
        out, (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION)
    ),
    "interference": measure_interference,
    **TRAINING_PARTS,
    **MOE_PARTS,
}


def main() -> int:
    part, path = sys.argv[1], sys.argv[2]
    props = torch.cuda.get_device_properties(0)
    out: dict[str, Any] = {
        "device": props.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "sms": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        PARTS[part](out)
    except Exception:  # what was measured before the failure is kept
        out["failure"] = traceback.format_exc()[-2000:]
        print(out["failure"], file=sys.stderr, flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
