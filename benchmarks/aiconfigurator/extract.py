"""Extract the operator measurements that calibration/measured/aiconfigurator.json holds.

NVIDIA's AIConfigurator (ai-dynamo/aiconfigurator, Apache-2.0) ships per-operator performance
databases per GPU, serving engine and version: GEMMs by shape and dtype, decode attention by
batch and context, prefill attention by length, measured by its collector (collector/<engine>/
collect_gemm.py, collect_attn.py) and stored as parquet under
aic-core/src/aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/. This script reads
them from a git checkout at one commit and writes the subset the engine's ceilings are checked
(and, for chips without a measurement of the team's own, fitted) on: the shapes a dense model's
serving step runs, bf16, fp8 and (on Blackwell) NVFP4, and the engines' fused MoE ops (moe_perf:
every expert shape the collector ran, at a few token counts), and nothing else, so the file
stays small.

It needs pyarrow (not a Ringmaster dependency; the JSON it writes is what the project reads):

    pip install pyarrow
    python benchmarks/aiconfigurator/extract.py /path/to/aiconfigurator.git <commit>

Latencies are milliseconds in the source; the file stores microseconds.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DATA = "aic-core/src/aiconfigurator_core/systems/data"
OUT = (
    Path(__file__).resolve().parents[2]
    / "operator/ringmaster/calibration/measured/aiconfigurator.json"
)
# AIConfigurator's system name -> the catalog's accelerator.
SYSTEMS = {
    "a100_sxm": "nvidia-a100-80gb",
    "h100_sxm": "nvidia-h100-80gb",
    "h200_sxm": "nvidia-h200-141gb",
    "b200_sxm": "nvidia-b200",
    "gb200": "nvidia-gb200",
}
# One version per engine and system: vLLM's the same on every Hopper and Blackwell system (so a
# chip over the H100 compares one collector and one engine build); the A100's only vLLM table is
# 0.14.0, which the H100 also has (its pair).
VERSIONS = {
    ("vllm", "a100_sxm"): "0.14.0",
    ("vllm", "h100_sxm"): "0.19.0",
    ("vllm", "h200_sxm"): "0.19.0",
    ("vllm", "b200_sxm"): "0.19.0",
    ("vllm", "gb200"): "0.19.0",
    ("sglang", "a100_sxm"): "0.5.10",
    ("sglang", "h100_sxm"): "0.5.10",
    ("sglang", "h200_sxm"): "0.5.10",
    ("sglang", "b200_sxm"): "0.5.10",
    ("sglang", "gb200"): "0.5.10",
    ("trtllm", "a100_sxm"): "1.0.0",
    ("trtllm", "h100_sxm"): "1.3.0rc20",
    ("trtllm", "h200_sxm"): "1.3.0rc20",
    ("trtllm", "b200_sxm"): "1.3.0rc20",
    ("trtllm", "gb200"): "1.3.0rc20",
}
PAIR_VERSIONS = {("vllm", "h100_sxm", "0.14.0")}  # the A100's vLLM pair
DECODE_M = (1, 4, 16, 32, 64, 128, 256, 512, 1024)
PREFILL_M = (2048, 8192)
WIDTHS = (1024, 2048, 4096, 8192, 16384)
DECODE_BATCH = (1, 8, 32, 128, 512)
DECODE_CONTEXT = (1024, 4096, 16384)
PREFILL_LENGTH = (1024, 2048, 4096, 8192, 16384)
HEADS = ((8, 1), (32, 8), (64, 8))  # (query heads, KV heads) a GPU holds: 70B at TP8, 8B, 70B
# NVFP4 (E2M1 with an E4M3 scale per 16) on the chips that have FP4 tensor cores
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
# The serving engines' tensor-parallel all-reduce (custom one/two-shot kernels, CUDA-graph
# captured as the engines run them), bf16 elements: a decode step's activations (batch 1-512 x
# hidden 4k-16k) and a prefill chunk's (up to 8k tokens x 8k).
ALLREDUCE_ELEMENTS = tuple(2**e for e in range(13, 27))  # 8K .. 64M elements
ALLREDUCE_KERNELS = ("vLLM_custom_graph", "SGLang_CustomAllReduce_graph", "TRTLLM")
# A MoE layer's routed experts as the engine runs them (its fused MoE op: routing, permutation,
# the grouped GEMMs, the weighted sum), whole or sliced over eight tensor-parallel ranks (no expert
# parallelism), under the power-law routing AIConfigurator models serving with (alpha 1.01),
# gated experts only; the fastest of the engine's kernels for each shape (what its dispatch picks).
MOE_TOKENS = (1, 16, 64, 256, 1024, 4096, 16384)
MOE_TP = (1, 8)  # a whole expert a rank, and sliced eight ways
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "fp4"}
MOE_DISTRIBUTION = "power_law_1.01"
# gpt-oss's experts as each engine runs its MXFP4 checkpoint on each chip, stored as the table's
# MoE dtype "mxfp4" (16-bit activations) or "mxfp4_mxfp8" (MXFP8 activations): (version, AIC
# moe_dtype). vLLM: the 0.24.0 collector's tables, which run vLLM's own backend selection as
# serving does (collector/vllm/collect_moe.py) and name it: OpenAI's Triton MXFP4 experts on
# Hopper, FlashInfer's TRT-LLM MXFP4 x BF16 experts on Blackwell (0.19.0's "vllm_mxfp4_moe" on
# the B200 is 3-4x slower than either and names no backend). TensorRT-LLM: its deployment guide
# for GPT-OSS (1.2.0rc2.post2 on): MXFP8 activations on the TRTLLM MoE backend on Blackwell,
# BF16 activations on Hopper. Each table holds gpt-oss's two expert shapes (120b, 20b) and few
# others, so every token count it ran is kept (MOE_TOKENS thins the other tables).
GPT_OSS_MOE = {
    ("vllm", "h100_sxm"): ("0.24.0", "w4a16_mxfp4"),
    ("vllm", "h200_sxm"): ("0.24.0", "w4a16_mxfp4"),
    ("vllm", "b200_sxm"): ("0.24.0", "w4a16_mxfp4"),
    ("vllm", "gb200"): ("0.24.0", "w4a16_mxfp4"),
    ("trtllm", "h100_sxm"): ("1.3.0rc20", "w4a16_mxfp4"),
    ("trtllm", "h200_sxm"): ("1.3.0rc20", "w4a16_mxfp4"),
    ("trtllm", "b200_sxm"): ("1.3.0rc20", "w4a8_mxfp4_mxfp8"),
    ("trtllm", "gb200"): ("1.3.0rc20", "w4a8_mxfp4_mxfp8"),
}
GPT_OSS_MOE_DTYPES = {"w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8"}
# What an FP8 GEMM's dynamic activation scale costs over a static one (quantize/<engine>/<version>/
# computescale_perf.parquet: the engine's dynamic quantisation minus its static one, by m and
# k). The collector's FP8 GEMMs quantise dynamically (collector/trtllm/collect_gemm.py: "the
# collected fp8 GEMM includes the compute-scale overhead"); a checkpoint with calibrated scales
# does not pay it. The table at the GEMM's own version where there is one, else the nearest
# newer one of the engine on the system.
COMPUTE_SCALE_FALLBACK = {"vllm": ("0.22.0", "0.24.0"), "sglang": ("0.5.14",), "trtllm": ()}


def _table(repo: str, commit: str, path: str) -> list[dict[str, Any]] | None:
    import pyarrow.parquet as pq  # type: ignore[import-not-found]

    shown = subprocess.run(
        ["git", "--git-dir", repo, "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    if shown.returncode != 0:
        return None
    rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(shown.stdout)).to_pylist()
    return rows


def _gemm(rows: list[dict[str, Any]]) -> list[list[Any]]:
    keep = []
    for r in rows:
        dtype = GEMM_DTYPES.get(r["gemm_dtype"])
        if dtype is None or r["n"] not in WIDTHS or r["k"] not in WIDTHS:
            continue
        if r["m"] in DECODE_M or r["m"] in PREFILL_M:
            keep.append([dtype, r["m"], r["n"], r["k"], round(r["latency"] * 1e3, 3)])
    return sorted(keep)


def _heads_ok(r: dict[str, Any], kv_cache: str = "bfloat16") -> bool:
    return (
        (r["num_heads"], r["num_key_value_heads"]) in HEADS
        and r["head_dim"] == 128
        and r.get("window_size", 0) == 0
        and r["kv_cache_dtype"] == kv_cache
        and r["attn_dtype"] == "bfloat16"
    )


def _decode_attention(rows: list[dict[str, Any]], kv_cache: str = "bfloat16") -> list[list[Any]]:
    # the collector's ``step`` is the tokens already cached; the query is one more
    keep = [
        [r["kernel_source"], r["batch_size"], r["step"] + 1, r["num_heads"],
         r["num_key_value_heads"], 128, round(r["latency"] * 1e3, 3)]
        for r in rows
        if _heads_ok(r, kv_cache)
        and r["batch_size"] in DECODE_BATCH
        and r["step"] + 1 in DECODE_CONTEXT
    ]  # fmt: skip
    return sorted(keep)


def _prefill_attention(rows: list[dict[str, Any]]) -> list[list[Any]]:
    keep = [
        [r["kernel_source"], r["batch_size"], r["isl"], r["num_heads"],
         r["num_key_value_heads"], 128, round(r["latency"] * 1e3, 3)]
        for r in rows
        if _heads_ok(r) and r["batch_size"] == 1 and r["isl"] in PREFILL_LENGTH
    ]  # fmt: skip
    return sorted(keep)


def _allreduce(rows: list[dict[str, Any]]) -> list[list[Any]]:
    keep = [
        [r["kernel_source"], r["num_gpus"], r["message_size"], round(r["latency"] * 1e3, 3)]
        for r in rows
        if r["kernel_source"] in ALLREDUCE_KERNELS
        and r["message_size"] in ALLREDUCE_ELEMENTS
        and r["num_gpus"] in (2, 4, 8)
    ]
    return sorted(keep)


def _moe(rows: list[dict[str, Any]], gpt_oss: str | None = None) -> list[list[Any]]:
    """The fastest kernel per shape and token count; ``gpt_oss``: the AIC moe_dtype of gpt-oss's
    own op (GPT_OSS_MOE), whose rows are the only ones kept, at every token count."""
    best: dict[tuple[Any, ...], float] = {}
    for r in rows:
        if gpt_oss is None:
            dtype = MOE_DTYPES.get(r["moe_dtype"])
            tokens_ok = r["num_tokens"] in MOE_TOKENS
        else:
            dtype = GPT_OSS_MOE_DTYPES[gpt_oss] if r["moe_dtype"] == gpt_oss else None
            tokens_ok = True
        if (
            dtype is None
            or r["moe_ep_size"] != 1
            or r["moe_tp_size"] not in MOE_TP
            or r["distribution"] != MOE_DISTRIBUTION
            or "nongated" in r["kernel_source"]
            or not tokens_ok
        ):
            continue
        key = (dtype, r["num_tokens"], r["hidden_size"], r["inter_size"], r["num_experts"],
               r["topk"], r["moe_tp_size"])  # fmt: skip
        us = round(r["latency"] * 1e3, 3)
        best[key] = min(best.get(key, us), us)
    return sorted([*key, us] for key, us in best.items())


def _compute_scale(rows: list[dict[str, Any]]) -> list[list[Any]]:
    keep = [
        [r["m"], r["k"], round(r["latency"] * 1e3, 3)]
        for r in rows
        if r["quant_dtype"] == "fp8"
        and (r["m"] in DECODE_M or r["m"] in PREFILL_M)
        and r["k"] in WIDTHS
    ]
    return sorted(keep)


def _compute_scale_table(
    repo: str, commit: str, system: str, engine: str, version: str
) -> tuple[str, list[dict[str, Any]]] | None:
    for v in (version, *COMPUTE_SCALE_FALLBACK[engine]):
        path = f"{DATA}/{system}/quantize/{engine}/{v}/computescale_perf.parquet"
        rows = _table(repo, commit, path)
        if rows:
            return v, rows
    return None


DECODE_COLUMNS = ["kernel", "batch", "context", "heads", "kv_heads", "head_dim", "us"]


def extract(repo: str, commit: str) -> dict[str, Any]:
    tables: list[dict[str, Any]] = []
    wanted = [(e, s, v) for (e, s), v in VERSIONS.items()] + sorted(PAIR_VERSIONS)
    for engine, system, version in wanted:
        gemm = _table(repo, commit, f"{DATA}/{system}/gemm/{engine}/{version}/gemm_perf.parquet")
        attention = f"{DATA}/{system}/attention/{engine}/{version}"
        decode = _table(repo, commit, f"{attention}/generation_attention_perf.parquet")
        prefill = _table(repo, commit, f"{attention}/context_attention_perf.parquet")
        allreduce = _table(
            repo, commit, f"{DATA}/{system}/comm/{engine}/{version}/custom_allreduce_perf.parquet"
        )
        moe = _table(repo, commit, f"{DATA}/{system}/moe/{engine}/{version}/moe_perf.parquet")
        if gemm is None and decode is None:
            print(f"skipped {system} {engine} {version}: no table at {commit}", file=sys.stderr)
            continue
        some = (gemm or decode or [{}])[0]
        scale = _compute_scale_table(repo, commit, system, engine, version)
        mxfp4 = GPT_OSS_MOE.get((engine, system))
        mxfp4_rows = []
        if mxfp4 is not None and (engine, system, version) not in PAIR_VERSIONS:
            own = _table(repo, commit, f"{DATA}/{system}/moe/{engine}/{mxfp4[0]}/moe_perf.parquet")
            mxfp4_rows = _moe(own or [], gpt_oss=mxfp4[1])
        tables.append(
            {
                "system": system,
                "accelerator": SYSTEMS[system],
                "engine": engine,
                "version": version,
                "device": some.get("device", ""),
                "gemm": _gemm(gemm or []),
                "decode_attention": _decode_attention(decode or []),
                # the same with an FP8 (e4m3) KV cache, bf16 queries
                "decode_attention_fp8": _decode_attention(decode or [], "fp8"),
                "prefill_attention": _prefill_attention(prefill or []),
                "allreduce": _allreduce(allreduce or []),
                "moe": []
                if (engine, system, version) in PAIR_VERSIONS
                else _moe(moe or []) + mxfp4_rows,
                # the version gpt-oss's own MoE rows (dtype mxfp4 / mxfp4_mxfp8) come from
                "moe_mxfp4_version": mxfp4[0] if mxfp4_rows and mxfp4 else None,
                "compute_scale_version": scale[0] if scale else None,
                "compute_scale": _compute_scale(scale[1]) if scale else [],
            }
        )
    return {
        "source": f"ai-dynamo/aiconfigurator @ {commit}, {DATA}/<system>/<op>/<engine>/<version>",
        "license": "Apache-2.0",
        "columns": {
            "gemm": ["dtype", "m", "n", "k", "us"],
            "decode_attention": DECODE_COLUMNS,
            "decode_attention_fp8": DECODE_COLUMNS,
            "prefill_attention": [
                "kernel",
                "batch",
                "length",
                "heads",
                "kv_heads",
                "head_dim",
                "us",
            ],
            "moe": ["dtype", "tokens", "hidden", "inter", "experts", "topk", "tp", "us"],
            "compute_scale": ["m", "k", "us"],
        },
        "tables": tables,
    }


def main() -> None:
    repo, commit = sys.argv[1], sys.argv[2]
    data = extract(repo, commit)
    text = json.dumps(data, separators=(",", ":"))
    # one table's section a line, so a diff reads
    text = text.replace(',{"system"', ',\n{"system"')
    OUT.write_text(text + "\n")
    rows = sum(len(t[k]) for t in data["tables"] for k in data["columns"])
    print(f"wrote {OUT} ({len(data['tables'])} tables, {rows} rows, {len(text) // 1024} KiB)")


if __name__ == "__main__":
    main()
