"""The training parts of benchmarks/device/measure.py (run through it, never alone): a
plain-PyTorch Llama step in its regimes (autocast, bf16 weights, torch.compile, FP8 with dynamic
tensorwise scaling, full recompute), FP8 linear layers and their scaling passes, and the eager ops
of a Hugging Face Llama block."""

from __future__ import annotations

import json
import statistics
import time
import traceback
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, GIB, fwd_bwd_ms, median_ms, randn
from moe_parts import (
    MOE_TRAIN_CONFIGS,
    TRAIN_MOE_BALANCED_RUNS,
    TRAIN_MOE_COMPILED_RUNS,
    TRAIN_MOE_RUNS,
    MoeFfn,
)
from torch.nn.attention import SDPBackend, sdpa_kernel

# ---- a plain-PyTorch training step ---------------------------------------------------------


class RMSNorm(torch.nn.Module):  # Hugging Face's LlamaRMSNorm: eager, fp32 inside
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        return self.weight * x.to(dtype)


class Block(torch.nn.Module):
    def __init__(self, c: dict[str, int], expand_kv: bool = False) -> None:
        super().__init__()
        h, d = c["hidden"], c["head_dim"]
        self.c = c
        self.expand_kv = expand_kv  # Hugging Face's repeat_kv: K and V copied to every head
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q = torch.nn.Linear(h, c["heads"] * d, bias=False)
        self.k = torch.nn.Linear(h, c["kv_heads"] * d, bias=False)
        self.v = torch.nn.Linear(h, c["kv_heads"] * d, bias=False)
        self.o = torch.nn.Linear(c["heads"] * d, h, bias=False)
        self.moe = MoeFfn(c) if c.get("experts") else None
        if self.moe is None:
            self.gate = torch.nn.Linear(h, c["ffn"], bias=False)
            self.up = torch.nn.Linear(h, c["ffn"], bias=False)
            self.down = torch.nn.Linear(c["ffn"], h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        c = self.c
        b, s, _ = x.shape
        d = c["head_dim"]
        y = self.n1(x)
        q = self.q(y).view(b, s, c["heads"], d).transpose(1, 2)
        k = self.k(y).view(b, s, c["kv_heads"], d).transpose(1, 2)
        v = self.v(y).view(b, s, c["kv_heads"], d).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.expand_kv:
            group = c["heads"] // c["kv_heads"]
            k, v = repeat_kv(k, group), repeat_kv(v, group)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        if self.moe is not None:
            return x + self.moe(y)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    b, heads, s, d = x.shape
    return x[:, :, None].expand(b, heads, group, s, d).reshape(b, heads * group, s, d)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class Model(torch.nn.Module):
    def __init__(self, c: dict[str, int], expand_kv: bool = False) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(c["vocab"], c["hidden"])
        self.blocks = torch.nn.ModuleList(Block(c, expand_kv) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        self.head = torch.nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, tokens: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


class LowPrecisionLayerNorm(torch.nn.Module):  # llm-foundry's LPLayerNorm, no_bias: True
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight.to(x.dtype), None, 1e-5)


class MptBlock(torch.nn.Module):
    """llm-foundry's MPT block (llmfoundry/models/layers/blocks.py MPTBlock, attn_impl flash,
    no_bias, ffn_type mptmlp: GELU over 4 x d_model): fused Wqkv, FlashAttention 2 on the
    (b, s, h, d) views, learned positions in the model, no RoPE."""

    def __init__(self, c: dict[str, int]) -> None:
        super().__init__()
        h = c["hidden"]
        self.c = c
        self.n1, self.n2 = LowPrecisionLayerNorm(h), LowPrecisionLayerNorm(h)
        self.wqkv = torch.nn.Linear(h, 3 * h, bias=False)
        self.out = torch.nn.Linear(h, h, bias=False)
        self.up = torch.nn.Linear(h, c["ffn"], bias=False)
        self.down = torch.nn.Linear(c["ffn"], h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        heads = self.c["heads"]
        qkv = self.wqkv(self.n1(x)).view(b, s, 3, heads, h // heads)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, h))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class MptModel(torch.nn.Module):
    """MPT: learned positions added to the token embedding, the head tied to the embedding."""

    def __init__(self, c: dict[str, int]) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(c["vocab"], c["hidden"])
        self.positions = torch.nn.Embedding(c["max_seq"], c["hidden"])
        self.blocks = torch.nn.ModuleList(MptBlock(c) for _ in range(c["layers"]))
        self.norm = LowPrecisionLayerNorm(c["hidden"])

    def forward(self, tokens: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
        x = self.embed(tokens) + self.positions.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, cos, sin)
        return F.linear(self.norm(x), self.embed.weight)


TRAIN_CONFIGS = {
    "llama-1b": {
        "hidden": 2048,
        "layers": 16,
        "heads": 32,
        "kv_heads": 8,
        "head_dim": 64,
        "ffn": 8192,
        "vocab": 128256,
    },
    "llama-3b": {
        "hidden": 3072,
        "layers": 28,
        "heads": 24,
        "kv_heads": 8,
        "head_dim": 128,
        "ffn": 8192,
        "vocab": 128256,
    },
}
# Llama 3 8B's width (hidden 4096, FFN 14336, 32 / 8 heads of 128) with 8 of its 32 layers: the
# per-GPU shape of torchtitan's and NeMo's Llama-3-8B runs at 8,192 tokens, fitting one GPU.
TRAIN_CONFIGS["llama-8b-8l"] = {
    "hidden": 4096,
    "layers": 8,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn": 14336,
    "vocab": 128256,
}
# llm-foundry's MPT shapes (calibration.llm_training.MPT_SHAPES; vocab 50,368, max_seq_len 2,048
# in its benchmark YAMLs): the H100 table's rows without recompute lean +12 % against the engine.
for _name, (_h, _heads, _layers) in {
    "mpt-760m": (1536, 12, 24),
    "mpt-1b": (2048, 16, 24),
    "mpt-3b": (2560, 20, 32),
}.items():
    TRAIN_CONFIGS[_name] = {
        "arch": "mpt",
        "hidden": _h,
        "layers": _layers,
        "heads": _heads,
        "kv_heads": _heads,
        "head_dim": _h // _heads,
        "ffn": 4 * _h,
        "vocab": 50368,
        "max_seq": 2048,
    }
TRAIN_CONFIGS.update(MOE_TRAIN_CONFIGS)
TRAIN_RUNS = (
    ("llama-1b", 4, 2048),
    ("llama-1b", 2, 4096),
    ("llama-1b", 1, 8192),
    ("llama-3b", 2, 4096),
    ("llama-3b", 8, 1024),
)


def kernel_category(name: str) -> str:
    n = name.lower()
    if "flash" in n or "fmha" in n or "attention" in n or ("cudnn" in n and "sdpa" in n):
        return "attention"
    if "multi_tensor" in n or "adam" in n:
        return "optimizer"
    if any(s in n for s in ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "cublas", "matmul")):
        return "gemm"
    if "softmax" in n or "nll" in n or "cross_entropy" in n:
        return "loss"
    return "other"


# Regimes: autocast = bf16 autocast over fp32 weights (DDP + AMP, Accelerate, HF Trainer);
# bf16 = bf16 weights, no autocast (FSDP's MixedPrecision(param_dtype=bf16) computes so);
# expand_kv = autocast with Hugging Face's repeat_kv before SDPA instead of GQA in the kernel.
TRAIN_VARIANT_RUNS = (
    ("llama-1b", 4, 2048, "bf16"),
    ("llama-1b", 4, 2048, "expand_kv"),
    ("llama-1b", 1, 8192, "bf16"),
    ("llama-3b", 1, 4096, "autocast"),
    ("llama-3b", 1, 4096, "bf16"),
    ("llama-3b", 2, 4096, "bf16"),
)


def measure_train(out: dict[str, Any], runs: Any = TRAIN_RUNS, key: str = "train") -> None:
    import torch._dynamo
    from torch.profiler import ProfilerActivity, profile

    for limit in ("cache_size_limit", "recompile_limit"):  # every block's guard hits at once
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)

    rows: list[dict[str, Any]] = []
    out[key] = {
        "configs": TRAIN_CONFIGS,
        "rows": rows,
        "what": "plain PyTorch: HF-style eager modules, SDPA (GQA in the kernel), "
        "bf16 autocast over fp32 weights, fp32-upcast cross-entropy, AdamW "
        "foreach; wall = host time of the whole step, synchronised",
    }
    for name, batch, seq, *variant in runs:
        try:
            rows.append(train_run(name, batch, seq, profile, ProfilerActivity, *variant))
        except Exception:  # the next configuration still runs
            rows.append(
                {
                    "model": name,
                    "batch": batch,
                    "seq": seq,
                    "failure": traceback.format_exc()[-600:],
                }
            )
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    out[key]["float8"] = FLOAT8.get("implementation")


def train_run(
    name: str, batch: int, seq: int, profile: Any, ProfilerActivity: Any, variant: str = "autocast"
) -> Any:
    c = TRAIN_CONFIGS[name]
    torch.manual_seed(0)
    with torch.device(DEV):  # initialised on the GPU: a few billion weights in seconds
        if c.get("arch") == "mpt":
            model: torch.nn.Module = MptModel(c)
        else:
            model = Model(c, expand_kv=variant == "expand_kv")
    MoeFfn.balanced = variant.endswith("_balanced")
    variant_base = variant.removesuffix("_balanced")
    regime = variant_base.removesuffix("_ckpt")
    bf16_weights = regime in ("bf16", "compile_bf16", "compile_fp8", "eager_fp8")
    if bf16_weights:
        model = model.to(BF16)
    loss_fn = upcast_cross_entropy
    if variant_base.endswith("fp8"):
        float8_training(model.blocks)  # the head stays bf16, as torchtitan's filter keeps it
    if variant_base.endswith("_ckpt"):  # full recompute: each block's forward run again
        for i, block in enumerate(model.blocks):
            model.blocks[i] = Checkpointed(block)
    if variant.startswith("compile"):  # torchtitan: each block compiled, and the loss
        for i, block in enumerate(model.blocks):
            model.blocks[i] = torch.compile(block)
        loss_fn = torch.compile(upcast_cross_entropy)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)  # foreach on CUDA by default
    tokens = torch.randint(0, c["vocab"], (batch, seq + 1), device=DEV)
    d = c["head_dim"]
    cos = torch.randn(1, 1, seq, d, device=DEV, dtype=BF16)
    sin = torch.randn(1, 1, seq, d, device=DEV, dtype=BF16)
    marks: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "wall": []}

    def step(record: bool) -> None:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        t0 = time.perf_counter()
        events[0].record()
        with torch.autocast("cuda", dtype=BF16, enabled=not bf16_weights):
            logits = model(tokens[:, :-1], cos, sin)
        loss = loss_fn(logits, tokens[:, 1:])
        events[1].record()
        loss.backward()
        events[2].record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        events[3].record()
        torch.cuda.synchronize()
        if record:
            marks["wall"].append((time.perf_counter() - t0) * 1e3)
            for i, key in enumerate(("forward", "backward", "optimizer")):
                marks[key].append(events[i].elapsed_time(events[i + 1]))

    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        step(False)
    for _ in range(8):
        step(True)
    row: dict[str, Any] = {
        "model": name,
        "parameters": params,
        "batch": batch,
        "seq": seq,
        "variant": variant,
    }
    for key, values in marks.items():
        row[f"{key}_ms"] = round(statistics.median(values), 3)
    row["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
    if c.get("experts") and MoeFfn.last_counts is not None:  # the last layer's routing
        counts = MoeFfn.last_counts.float()
        row["routed_max_over_mean"] = round(float(counts.max() / counts.mean()), 3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(False)
    categories: dict[str, float] = {}
    names: dict[str, float] = {}
    kernels = 0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
            ms = event.time_range.elapsed_us() / 1e3
            key = kernel_category(event.name)
            categories[key] = categories.get(key, 0.0) + ms
            names[event.name[:90]] = names.get(event.name[:90], 0.0) + ms
    row["kernels"] = kernels
    row["device_ms_by_category"] = {k: round(v, 3) for k, v in sorted(categories.items())}
    top = sorted(names.items(), key=lambda kv: -kv[1])[:25]
    row["top_kernels_ms"] = {k: round(v, 3) for k, v in top}
    return row


class Checkpointed(torch.nn.Module):
    """A block whose activations are recomputed in backward (torch.utils.checkpoint,
    non-reentrant: what torchtitan's and Composer's full activation checkpointing wrap)."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, cos, sin, use_reentrant=False)


def upcast_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


FLOAT8: dict[str, str] = {}


def float8_training(module: torch.nn.Module) -> None:
    """Swap ``module``'s linear layers for FP8 ones with dynamic tensorwise scaling (inputs and
    weights e4m3, output gradients e5m2, three ``torch._scaled_mm`` per layer): torchao's
    ``convert_to_float8_training`` (torchtitan's ``float8``) where torchao is installed, else the
    same recipe written here (:class:`Float8Linear`); which one ran is recorded."""
    try:
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(module)
        import torchao

        FLOAT8["implementation"] = f"torchao {torchao.__version__} convert_to_float8_training"
    except Exception:  # absent, or built for another torch: the same recipe written here
        for parent in list(module.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear:
                    setattr(parent, name, Float8Linear(child.weight))
        FLOAT8["implementation"] = "measure.py Float8Linear (torchao absent)"


E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_float8(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(x scaled into ``dtype``'s range by its amax, the inverse scale)."""
    scale = torch.finfo(dtype).max / x.abs().amax().float().clamp(min=1e-12)
    return (x.float() * scale).clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(
        dtype
    ), scale.reciprocal()


class Float8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x8, sx = to_float8(x, E4M3)
        w8, sw = to_float8(w, E4M3)
        ctx.save_for_backward(x8, sx, w8, sw)
        return torch._scaled_mm(x8, w8.t(), sx, sw, out_dtype=BF16)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        x8, sx, w8, sw = ctx.saved_tensors
        g8, sg = to_float8(g, E5M2)
        dx = torch._scaled_mm(g8, w8.t().contiguous().t(), sg, sw, out_dtype=BF16)
        dw = torch._scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), sg, sx, out_dtype=BF16)
        return dx, dw


class Float8Linear(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = Float8Matmul.apply(x.reshape(-1, x.shape[-1]), self.weight)
        return y.view(*x.shape[:-1], -1)


# Linear layers of Llama 3 8B (in, out): fused QKV, output, gate + up, down; at 8,192 tokens
# (one micro-batch of torchtitan's and NeMo's runs) and 2,048.
FP8_LINEAR_SHAPES = (
    (8192, 4096, 1024),
    (8192, 4096, 6144),
    (8192, 4096, 4096),
    (8192, 4096, 28672),
    (8192, 14336, 4096),
    (2048, 4096, 6144),
    (2048, 14336, 4096),
)


def measure_fp8_linear(out: dict[str, Any]) -> None:
    """One linear layer's forward + backward (gradients of input and weight) in bf16, in FP8
    (tensorwise dynamic scaling) eager and compiled, and the FP8 layer's three GEMMs alone on
    operands cast and transposed beforehand: what the casts, amaxes and transposes cost."""
    rows: list[dict[str, Any]] = []
    out["fp8_linear"] = {
        "rows": rows,
        "what": "ms of one fwd+bwd (autograd.grad w.r.t. input and weight), bf16 inputs; "
        "gemms_only = the three torch._scaled_mm (fwd e4m3 x e4m3, dgrad e5m2 x e4m3, "
        "wgrad e5m2 x e4m3) on pre-cast, pre-transposed operands",
    }
    for tokens, k, n in FP8_LINEAR_SHAPES:
        row: dict[str, Any] = {"tokens": tokens, "in": k, "out": n}
        try:
            row.update(fp8_linear_row(tokens, k, n))
        except Exception:
            row["failure"] = traceback.format_exc()[-600:]
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()


def fp8_linear_row(tokens: int, k: int, n: int) -> dict[str, Any]:
    row: dict[str, Any] = {}
    one = torch.ones((), device=DEV)
    x = randn(tokens, k).requires_grad_()
    lin = torch.nn.Linear(k, n, bias=False, device=DEV, dtype=BF16)
    grad = randn(tokens, n)

    def fwd_bwd(mod: Any) -> Any:
        return lambda: torch.autograd.grad(mod(x), [x, *mod.parameters()], grad)

    row["bf16_ms"] = round(median_ms(fwd_bwd(lin)), 4)
    f8 = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False, device=DEV, dtype=BF16))
    float8_training(f8)
    row["fp8_eager_ms"] = round(median_ms(fwd_bwd(f8)), 4)
    row["fp8_compiled_ms"] = round(median_ms(fwd_bwd(torch.compile(f8))), 4)
    x8, w8, g8 = x.detach().to(E4M3), lin.weight.detach().to(E4M3), grad.to(E5M2)
    wt8, xt8, gt8 = w8.t().contiguous(), x8.t().contiguous(), g8.t().contiguous()

    def gemms() -> None:
        torch._scaled_mm(x8, w8.t(), one, one, out_dtype=BF16)
        torch._scaled_mm(g8, wt8.t(), one, one, out_dtype=BF16)
        torch._scaled_mm(gt8, xt8.t(), one, one, out_dtype=BF16)

    row["gemms_only_ms"] = round(median_ms(gemms), 4)
    flops = 6.0 * tokens * k * n
    row["gemms_only_tflops"] = round(flops / row["gemms_only_ms"] / 1e9, 1)
    row["bf16_tflops"] = round(flops / row["bf16_ms"] / 1e9, 1)
    row["implementation"] = FLOAT8.get("implementation")
    return row


# Compiled and FP8 steps (bf16 weights as FSDP computes with; fwd + bwd is what compares):
# torchtitan's recipe on one GPU: each block compiled, the loss compiled, torchao's float8.
TRAIN_COMPILED_RUNS = (
    ("llama-8b-8l", 1, 8192, "compile_bf16"),
    ("llama-8b-8l", 1, 8192, "compile_fp8"),
    ("llama-8b-8l", 1, 8192, "bf16"),
    ("llama-1b", 4, 2048, "compile_bf16"),
    ("llama-1b", 4, 2048, "compile_fp8"),
    ("llama-8b-8l", 2, 4096, "compile_fp8"),
)


# The same at 2,048 tokens a sequence (where published H100 runs step slowest against plans).
TRAIN_SHORT_RUNS = (
    ("llama-8b-8l", 4, 2048, "compile_bf16"),
    ("llama-8b-8l", 4, 2048, "compile_fp8"),
    ("llama-8b-8l", 4, 2048, "bf16"),
    ("llama-3b", 2, 4096, "compile_bf16"),
    ("llama-3b", 2, 4096, "compile_fp8"),
)


# FP8 without torch.compile: the scaling's ops one by one (checks the eager cast figure).
TRAIN_EAGER_FP8_RUNS = (
    ("llama-8b-8l", 4, 2048, "eager_fp8"),
    ("llama-1b", 4, 2048, "eager_fp8"),
    ("llama-3b", 2, 4096, "eager_fp8"),
)


# The same steps with and without full recompute: what recomputing a block's forward costs,
# which the published runs cannot separate from the rest (docs/llm-training.md).
TRAIN_RECOMPUTE_RUNS = (
    ("llama-8b-8l", 4, 2048, "bf16_ckpt"),
    ("llama-8b-8l", 4, 2048, "compile_bf16_ckpt"),
    ("llama-1b", 4, 2048, "bf16_ckpt"),
    ("llama-3b", 2, 4096, "bf16_ckpt"),
    ("llama-3b", 2, 4096, "bf16"),
)


def measure_fp8_cast(out: dict[str, Any]) -> None:
    """FP8's scaling passes alone, compiled as Inductor fuses them: a tensor's amax, the scaled
    cast to e4m3, and the cast with its transpose (the backward's operand), per element."""
    rows: list[dict[str, Any]] = []
    out["fp8_cast"] = {"rows": rows, "what": "ms of one compiled call on a bf16 tensor"}

    def amax_cast(x: torch.Tensor) -> Any:
        return to_float8(x, E4M3)

    def amax_cast_transpose(x: torch.Tensor) -> Any:
        x8, s = to_float8(x, E4M3)
        return x8, x8.t().contiguous(), s

    def cast_given_scale(x: torch.Tensor) -> Any:  # delayed scaling: the scale known beforehand
        return (x.float() * 448.0).clamp(-448.0, 448.0).to(E4M3)

    def cast_transpose_given_scale(x: torch.Tensor) -> Any:
        x8 = (x.float() * 448.0).clamp(-448.0, 448.0).to(E4M3)
        return x8, x8.t().contiguous()

    fns = {
        "amax_cast": amax_cast,
        "amax_cast_transpose": amax_cast_transpose,
        "cast": cast_given_scale,
        "cast_transpose": cast_transpose_given_scale,
    }
    for rows_, cols in ((8192, 4096), (8192, 14336), (8192, 28672), (4096, 4096)):
        x = randn(rows_, cols)
        for name, fn in fns.items():
            compiled = torch.compile(fn)
            ms = median_ms(lambda c=compiled, x=x: c(x))
            rows.append(
                {
                    "op": name,
                    "elements": rows_ * cols,
                    "ms": round(ms, 4),
                    "ps_per_element": round(ms * 1e9 / (rows_ * cols), 3),
                }
            )
            print(json.dumps(rows[-1]), flush=True)


# ---- the eager ops of those regimes, one at a time ------------------------------------------


def measure_ops(out: dict[str, Any]) -> None:
    """Per-element costs of the eager ops of a Llama block under autocast over fp32 weights
    (the residual stream in fp32) and with bf16 weights: T = 8192 tokens, hidden 2048-4096."""
    rows: list[dict[str, Any]] = []
    out["ops"] = {
        "rows": rows,
        "what": "fwd and fwd+bwd ms (autograd.grad w.r.t. every input, weights included); "
        "ps_per_element = fwd+bwd time / elements; Hugging Face's LlamaRMSNorm, "
        "rotate_half RoPE and repeat_kv; autocast's casts as .to(bf16) of an fp32 tensor",
    }
    tokens = 8192

    def add(op: str, hidden: int, elements: int, fn: Any, inputs: list[torch.Tensor]) -> None:
        fwd, both = fwd_bwd_ms(fn, inputs)
        rows.append(
            {
                "op": op,
                "hidden": hidden,
                "elements": elements,
                "fwd_ms": round(fwd, 4),
                "fwdbwd_ms": round(both, 4),
                "ps_per_element": round(both * 1e9 / elements, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    for hidden in (2048, 3072, 4096):
        th = tokens * hidden

        def leaf(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.randn(*shape, device=DEV, dtype=dtype).requires_grad_()

        norm32 = RMSNorm(hidden).to(DEV)
        add(
            "hf_rmsnorm_fp32",
            hidden,
            th,
            lambda x, w, n=norm32: n(x),
            [leaf(tokens, hidden), norm32.weight],
        )
        norm16 = RMSNorm(hidden).to(DEV).to(BF16)
        add(
            "hf_rmsnorm_bf16",
            hidden,
            th,
            lambda x, w, n=norm16: n(x),
            [leaf(tokens, hidden, dtype=BF16), norm16.weight],
        )
        add("cast_fp32_to_bf16", hidden, th, lambda x: x.to(BF16), [leaf(tokens, hidden)])
        add(
            "residual_add_fp32_bf16",
            hidden,
            th,
            lambda x, y: x + y,
            [leaf(tokens, hidden), leaf(tokens, hidden, dtype=BF16)],
        )
        add(
            "residual_add_fp32",
            hidden,
            th,
            lambda x, y: x + y,
            [leaf(tokens, hidden), leaf(tokens, hidden)],
        )
        add(
            "residual_add_bf16",
            hidden,
            th,
            lambda x, y: x + y,
            [leaf(tokens, hidden, dtype=BF16), leaf(tokens, hidden, dtype=BF16)],
        )
        heads, kv, d = hidden // 128, max(hidden // 128 // 4, 1), 128
        cos = torch.randn(1, 1, tokens, d, device=DEV, dtype=BF16)
        sin = torch.randn(1, 1, tokens, d, device=DEV, dtype=BF16)
        add(
            "hf_rope_bf16",
            hidden,
            tokens * heads * d,
            lambda q, cos=cos, sin=sin: rope(q, cos, sin),
            [leaf(1, heads, tokens, d, dtype=BF16)],
        )
        add(
            "repeat_kv_bf16",
            hidden,
            th,
            lambda k, g=heads // kv: repeat_kv(k, g),
            [leaf(1, kv, tokens, d, dtype=BF16)],
        )
        add(
            "transpose_reshape_bf16",
            hidden,
            th,
            lambda a, h=hidden: a.transpose(1, 2).reshape(1, tokens, h),
            [leaf(1, heads, tokens, d, dtype=BF16)],
        )
        ffn = hidden * 4
        add(
            "swiglu_bf16",
            hidden,
            tokens * ffn,
            lambda g, u: F.silu(g) * u,
            [leaf(tokens, ffn, dtype=BF16), leaf(tokens, ffn, dtype=BF16)],
        )
        del norm32, norm16
        torch.cuda.empty_cache()
    params = 1 << 26
    add(
        "weight_cast_fp32_to_bf16",
        0,
        params,
        lambda w: w.to(BF16),
        [torch.randn(params, device=DEV).requires_grad_()],
    )
    for hidden in (2048, 4096):
        embed = torch.nn.Embedding(128256, hidden).to(DEV)
        ids = torch.randint(0, 128256, (tokens,), device=DEV)
        add(
            "embedding_fp32",
            hidden,
            128256 * hidden,
            lambda w, ids=ids: F.embedding(ids, w),
            [embed.weight],
        )
        del embed
        torch.cuda.empty_cache()


# llm-foundry's MPT on one GPU, eager with bf16 weights (FSDP's compute dtype), FlashAttention 2,
# with and without full recompute: the single-GPU part of the H100 table's lean.
TRAIN_MPT_RUNS = (
    ("mpt-1b", 4, 2048, "bf16"),
    ("mpt-1b", 8, 2048, "bf16_ckpt"),
    ("mpt-760m", 8, 2048, "bf16"),
    ("mpt-3b", 2, 2048, "bf16"),
    ("mpt-1b", 4, 2048, "compile_bf16"),
)


# measure.py's training parts: the step's run sets by name, then the single-op parts.
RUN_SETS = {
    "train": TRAIN_RUNS,
    "train_variants": TRAIN_VARIANT_RUNS,
    "train_compiled": TRAIN_COMPILED_RUNS,
    "train_short": TRAIN_SHORT_RUNS,
    "train_eager_fp8": TRAIN_EAGER_FP8_RUNS,
    "train_recompute": TRAIN_RECOMPUTE_RUNS,
    "train_mpt": TRAIN_MPT_RUNS,
    "train_moe": TRAIN_MOE_RUNS,
    "train_moe_compiled": TRAIN_MOE_COMPILED_RUNS,
    "train_moe_balanced": TRAIN_MOE_BALANCED_RUNS,
}
TRAINING_PARTS: dict[str, Any] = {
    **{key: partial(measure_train, runs=runs, key=key) for key, runs in RUN_SETS.items()},
    "ops": measure_ops,
    "fp8_linear": measure_fp8_linear,
    "fp8_cast": measure_fp8_cast,
}
