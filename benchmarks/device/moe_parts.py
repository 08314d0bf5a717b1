"""The mixture-of-experts parts of benchmarks/device/measure.py (run through it, never alone):
torchtitan's MoE layer (MoeFfn, which train_parts' Llama block takes for its FFN), the MoE shapes
and step runs train_parts times, and the layer's routing ops apart, eager and compiled."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from device_common import BF16, DEV, fwd_bwd_ms, median_ms


class MoeFfn(torch.nn.Module):
    """torchtitan's MoE layer on one GPU (torchtitan/models/common/moe.py and token_dispatcher.py
    @ b5bcd76c6, LocalTokenDispatcher: no expert parallelism): the router's gate in fp32, softmax
    scores, top-k, the routed copies argsorted by expert and gathered, three torch._grouped_mm
    calls over the experts' offsets (gate and up, SiLU and their product, down) on bf16 copies of
    the expert weights, the scores applied in fp32 and the copies scatter_add-ed back under
    deterministic algorithms (torchtitan.ops.scatter_add). No shared expert; the routing counts
    land in the row (``routed_max_over_mean``)."""

    last_counts: torch.Tensor | None = None
    # torchtitan's _debug_force_load_balance: round-robin expert ids, exactly balanced (what a
    # trained, load-balanced router approaches; a random router's counts are skewed)
    balanced = False

    def __init__(self, c: dict[str, int]) -> None:
        super().__init__()
        h, e, f = c["hidden"], c["experts"], c["expert_ffn"]
        self.top_k = c["top_k"]
        self.router = torch.nn.Linear(h, e, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(e, f, h) * 0.02)
        self.w3 = torch.nn.Parameter(torch.randn(e, f, h) * 0.02)
        self.w2 = torch.nn.Parameter(torch.randn(e, h, f) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        x = x.reshape(b * s, h)
        with torch.autocast("cuda", enabled=False):
            scores = F.linear(x.float(), self.router.weight.float())
        scores = F.softmax(scores, dim=-1)
        _, ids = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        if MoeFfn.balanced:
            ids = torch.arange(ids.numel(), device=ids.device).view_as(ids) % scores.shape[-1]
        top = scores.gather(-1, ids)
        counts = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, ids, True).sum(0)
        MoeFfn.last_counts = counts.detach()
        order = torch.argsort(ids.view(-1), stable=True)
        top_sorted = top.view(-1)[order]
        tokens = order // self.top_k
        routed = x[tokens].bfloat16()
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        grouped = partial(torch._grouped_mm, offs=offsets)
        mid = F.silu(grouped(routed, self.w1.bfloat16().transpose(-2, -1)))
        mid = mid * grouped(routed, self.w3.bfloat16().transpose(-2, -1))
        y = grouped(mid, self.w2.bfloat16().transpose(-2, -1))
        y = (y.float() * top_sorted[:, None]).to(x.dtype)
        torch.use_deterministic_algorithms(True)
        try:
            out = torch.zeros_like(x).scatter_add(0, tokens[:, None].expand(-1, h), y)
        finally:
            torch.use_deterministic_algorithms(False)
        return out.view(b, s, h)


# Mixture-of-experts shapes with a few of their layers (torchtitan's MoE layer, MoeFfn): the
# published config.json widths, fewer layers so that fp32 weights and AdamW fit one H200.
# Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json: 48 layers, 128 experts, top-8, moe 768; its
# per-head q/k norms left out), Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1: 32 layers, 8 experts,
# top-2, 14,336), OLMoE-1B-7B (allenai/OLMoE-1B-7B-0924: 16 layers, 64 experts, top-8, 1,024).
MOE_TRAIN_CONFIGS: dict[str, dict[str, int]] = {}
for _name, _shape in {
    "qwen3-30b-a3b-4l": (2048, 4, 32, 4, 128, 128, 8, 768, 151936),
    "mixtral-8x7b-2l": (4096, 2, 32, 8, 128, 8, 2, 14336, 32000),
    "olmoe-1b-7b-8l": (2048, 8, 16, 16, 128, 64, 8, 1024, 50304),
}.items():
    _h, _layers, _heads, _kv, _d, _experts, _top_k, _expert_ffn, _vocab = _shape
    MOE_TRAIN_CONFIGS[_name] = {
        "hidden": _h,
        "layers": _layers,
        "heads": _heads,
        "kv_heads": _kv,
        "head_dim": _d,
        "ffn": _expert_ffn,
        "experts": _experts,
        "top_k": _top_k,
        "expert_ffn": _expert_ffn,
        "vocab": _vocab,
    }

# MoE steps on one GPU, eager: bf16 weights as torchtitan's FSDP computes (forward + backward
# compared), and autocast over fp32 weights (AdamW over every expert's fp32 state: the whole step).
TRAIN_MOE_RUNS = (
    ("qwen3-30b-a3b-4l", 2, 4096, "bf16"),
    ("qwen3-30b-a3b-4l", 2, 4096, "autocast"),
    ("mixtral-8x7b-2l", 1, 8192, "bf16"),
    ("olmoe-1b-7b-8l", 4, 2048, "bf16"),
    ("qwen3-30b-a3b-4l", 8, 1024, "bf16"),
    ("mixtral-8x7b-2l", 2, 4096, "autocast"),
    ("olmoe-1b-7b-8l", 4, 2048, "autocast"),
    ("qwen3-30b-a3b-4l", 1, 8192, "bf16"),
)
# The same blocks and loss torch.compile-d, as torchtitan compiles them (its own part: a compile
# that runs past the part's limit loses only these rows).
TRAIN_MOE_COMPILED_RUNS = (
    ("qwen3-30b-a3b-4l", 2, 4096, "compile_bf16"),
    ("mixtral-8x7b-2l", 1, 8192, "compile_bf16"),
)


# The same with torchtitan's forced load balance (the random router sends Qwen3's and OLMoE's
# busiest expert 4-7x the mean; Mixtral's 8 experts 1.1x).
TRAIN_MOE_BALANCED_RUNS = (
    ("qwen3-30b-a3b-4l", 2, 4096, "bf16_balanced"),
    ("qwen3-30b-a3b-4l", 2, 4096, "autocast_balanced"),
    ("olmoe-1b-7b-8l", 4, 2048, "bf16_balanced"),
    ("qwen3-30b-a3b-4l", 1, 8192, "bf16_balanced"),
    ("mixtral-8x7b-2l", 1, 8192, "bf16_balanced"),
    ("olmoe-1b-7b-8l", 4, 2048, "autocast_balanced"),
    ("qwen3-30b-a3b-4l", 2, 4096, "compile_bf16_balanced"),
    ("olmoe-1b-7b-8l", 4, 2048, "compile_bf16_balanced"),
)


def measure_moe_ops(out: dict[str, Any]) -> None:
    """A MoE layer's eager ops apart (MoeFfn's, bf16 weights, T = 8,192 tokens), forward and
    forward + backward: the router (fp32 gate, softmax, top-k, the scores gathered), the routing
    sort (argsort and counts, no gradient), the dispatch gather, the combine (scores in fp32,
    scatter_add deterministic as torchtitan runs it, and atomic), the three grouped GEMMs, and
    the whole layer."""
    rows: list[dict[str, Any]] = []
    out["moe_ops"] = {"rows": rows, "what": "fwd and fwd+bwd ms, autograd.grad w.r.t. inputs"}
    for model in ("qwen3-30b-a3b-4l", "olmoe-1b-7b-8l", "mixtral-8x7b-2l"):
        _moe_ops(model, rows)
        torch.cuda.empty_cache()


def measure_moe_ops_autocast(out: dict[str, Any]) -> None:
    """The same eager ops under bf16 autocast over fp32 weights (DDP with AMP, Accelerate, the
    Hugging Face Trainer): the residual stream in fp32, so the dispatch gathers fp32 rows before
    their bf16 cast and the combine scatters fp32; the whole layer under autocast."""
    rows: list[dict[str, Any]] = []
    out["moe_ops_autocast"] = {"rows": rows, "what": "as moe_ops, the residual stream in fp32"}
    for model in ("qwen3-30b-a3b-4l", "olmoe-1b-7b-8l", "mixtral-8x7b-2l"):
        _moe_ops(model, rows, residual=torch.float32)
        torch.cuda.empty_cache()


def measure_moe_ops_compiled(out: dict[str, Any]) -> None:
    """The same ops each torch.compile-d (Inductor's kernels, as a compiled torchtitan block
    runs its routing), the whole layer too."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 64
    rows: list[dict[str, Any]] = []
    out["moe_ops_compiled"] = {"rows": rows, "what": "as moe_ops, each op torch.compile-d"}
    for model in ("qwen3-30b-a3b-4l", "olmoe-1b-7b-8l", "mixtral-8x7b-2l"):
        _moe_ops(model, rows, compiled=True)
        torch.cuda.empty_cache()


def _moe_ops(
    model: str,
    rows: list[dict[str, Any]],
    tokens: int = 8192,
    compiled: bool = False,
    residual: torch.dtype = BF16,
) -> None:
    def add(op: str, fn: Any, inputs: list[torch.Tensor], fwd_only: bool = False) -> None:
        if compiled:
            fn = torch.compile(fn)
        if fwd_only:
            fwd, both = median_ms(lambda: fn(*inputs), 10), float("nan")
        else:
            fwd, both = fwd_bwd_ms(fn, inputs)
        rows.append(
            {"op": op, "model": model, "fwd_ms": round(fwd, 4), "fwdbwd_ms": round(both, 4)}
        )
        print(json.dumps(rows[-1]), flush=True)

    c = MOE_TRAIN_CONFIGS[model]
    h, e, k = c["hidden"], c["experts"], c["top_k"]
    torch.manual_seed(0)
    moe = MoeFfn(c).to(DEV).to(residual)  # fp32 weights under autocast
    x = torch.randn(tokens, h, device=DEV, dtype=residual).requires_grad_()

    def router(x: torch.Tensor, wr: torch.Tensor) -> torch.Tensor:
        scores = F.softmax(F.linear(x.float(), wr.float()), dim=-1)
        _, ids = torch.topk(scores, k=k, dim=-1, sorted=False)
        return scores.gather(-1, ids)

    add("router", router, [x, moe.router.weight])
    ids = torch.randint(0, e, (tokens, k), device=DEV)

    def sort(ids: torch.Tensor) -> torch.Tensor:
        counts = torch.zeros(tokens, e, device=DEV, dtype=torch.bool)
        counts = counts.scatter_(-1, ids, True).sum(0)
        return torch.argsort(ids.view(-1), stable=True) // k + counts.sum()

    add("sort", sort, [ids], fwd_only=True)
    order = torch.argsort(ids.view(-1), stable=True) // k
    add("dispatch", lambda x: x[order].bfloat16(), [x])  # MoeFfn's; the cast a no-op in bf16
    y = torch.randn(tokens * k, h, device=DEV, dtype=BF16).requires_grad_()
    top = torch.rand(tokens * k, device=DEV).requires_grad_()
    index = order[:, None].expand(-1, h)

    def combine(y: torch.Tensor, top: torch.Tensor, deterministic: bool = True) -> Any:
        scaled = (y.float() * top[:, None]).to(residual)
        torch.use_deterministic_algorithms(deterministic)
        try:
            out = torch.zeros(tokens, h, device=DEV, dtype=residual)
            return out.scatter_add(0, index, scaled)
        finally:
            torch.use_deterministic_algorithms(False)

    add("combine", combine, [y, top])
    add("combine_atomic", partial(combine, deterministic=False), [y, top])
    offsets = torch.cumsum(torch.full((e,), tokens * k // e, device=DEV), 0, dtype=torch.int32)
    routed = torch.randn(tokens * k, h, device=DEV, dtype=BF16).requires_grad_()

    def experts(routed: torch.Tensor, w1: Any, w3: Any, w2: Any) -> torch.Tensor:
        grouped = partial(torch._grouped_mm, offs=offsets)
        mid = F.silu(grouped(routed, w1.transpose(-2, -1)))
        return grouped(mid * grouped(routed, w3.transpose(-2, -1)), w2.transpose(-2, -1))

    weights = [w.detach().to(BF16).requires_grad_() for w in (moe.w1, moe.w3, moe.w2)]
    add("experts", experts, [routed, *weights])
    MoeFfn.balanced = True

    def layer(xs: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=BF16, enabled=residual != BF16):
            return moe(xs)

    add("layer_balanced", layer, [x.view(1, tokens, h), *moe.parameters()])
    MoeFfn.balanced = False


MOE_PARTS: dict[str, Any] = {
    "moe_ops": measure_moe_ops,
    "moe_ops_autocast": measure_moe_ops_autocast,
    "moe_ops_compiled": measure_moe_ops_compiled,
}
