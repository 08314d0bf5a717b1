"""Ringmaster against NVIDIA's AIConfigurator on the published serving runs both can state.

AIConfigurator (PyPI ``aiconfigurator``, the peer issue 46 names) composes a serving step from
its measured operator databases. This benchmark runs its CLI (``aiconfigurator cli estimate``) on
every checked row of calibration/serving_engine_points.yaml that it can express: TensorRT-LLM on
NVIDIA parts, a fixed batch (``static``: one batch run to completion, the published end-to-end
latency) or an offline run (``agg`` at the concurrency trtllm-bench would pick, the published
output tokens/s). MI300X rows are out of its reach (no AMD system in its databases). It prints
both errors per row and their medians. It is not part of the suite: it needs the package and
several seconds a row.

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    PYTHONPATH=operator python benchmarks/aiconfigurator/compare.py \
        --aic /tmp/aic/bin/aiconfigurator

``--nvfp4`` runs the LLM serving table's NVFP4 rows on the B200 and GB200 instead (TensorRT-LLM
1.0's and v0.21's perf-overview, offline at trtllm-bench's batch).

Model configs are written from Ringmaster's catalog (engine.transformer) into a temporary folder
(AIConfigurator reads a Hugging Face config.json; nothing is downloaded).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

import yaml

from ringmaster.calibration import llm_serving as LC
from ringmaster.calibration import serving_engines as SE
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "GB200": "gb200"}
# AIConfigurator's GEMM quantisation per weight precision of the rows
GEMM_QUANT = {"FP8": "fp8", "FP4": "nvfp4"}


def _config(model: Transformer) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": model.hidden,
        "intermediate_size": model.ffn_hidden or 4 * model.hidden,
        "num_hidden_layers": model.layers,
        "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads or model.heads,
        "head_dim": model.head_dim or model.hidden // model.heads,
        "vocab_size": model.vocab,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def _run(aic: str, folder: Path, point: dict[str, Any], mode: str, batch: int) -> dict[str, float]:
    w = point["workload"]
    quant = GEMM_QUANT[point.get("precision", "FP8")]
    args = [
        aic, "cli", "estimate", "--model-path", str(folder), "--system", SYSTEMS[point["gpu"]],
        "--backend", "trtllm", "--estimate-mode", mode, "--isl", str(w["input"]),
        "--osl", str(w["output"]), "--batch-size", str(batch), "--tp-size", str(point["tp"]),
        "--gemm-quant-mode", quant, "--kvcache-quant-mode", "fp8",
    ]  # fmt: skip
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    figures = {}
    for name, key in (("Request Latency", "latency_ms"), ("tokens/s", "tokens_per_s")):
        found = re.search(rf"^\s*{re.escape(name)}:\s*([\d,\.]+)", out, re.MULTILINE)
        if found:
            figures[key] = float(found.group(1).replace(",", ""))
    return figures


def _largest_batch_that_fits(aic: str, folder: Path, point: dict[str, Any], batch: int) -> float:
    """AIConfigurator's offline tokens/s at trtllm-bench's max batch, halved until its memory
    model holds it (it refuses a batch whose KV cache does not fit)."""
    while batch >= 1:
        try:
            return _run(aic, folder, point, "agg", batch)["tokens_per_s"]
        except subprocess.CalledProcessError:
            batch //= 2
    raise RuntimeError(f"{point['id']}: no batch fits in AIConfigurator's memory model")


def compare(aic: str) -> list[dict[str, Any]]:
    rows = []
    ours = {r.id: r for r in SE.engine_rows() if r.predicted is not None}
    with tempfile.TemporaryDirectory() as tmp:
        for point in SE.engine_points():
            if point["engine"] != "TensorRT-LLM" or point["gpu"] not in SYSTEMS:
                continue
            if point["id"] not in ours or point["model"] not in KNOWN_TRANSFORMERS:
                continue
            model = KNOWN_TRANSFORMERS[point["model"]]
            folder = Path(tmp) / point["model"]
            folder.mkdir(exist_ok=True)
            (folder / "config.json").write_text(json.dumps(_config(model)))
            mine = ours[point["id"]]
            if point["scenario"] == "static":
                got = _run(aic, folder, point, "static", int(point["batch"]))
                theirs = got["latency_ms"]
            else:
                acc = DEFAULT_CATALOG.accelerator(LC.GPUS[point["gpu"]])
                w = point["workload"]
                bs, _ = LC.trtllm_bench(
                    model, acc, int(point["tp"]), w["input"], w["output"], LC.L.WEIGHT_BYTES["FP8"]
                )
                theirs = _largest_batch_that_fits(aic, folder, point, int(bs))
            published = float(mine.published)
            rows.append(
                {
                    "point": point["id"],
                    "published": published,
                    "ringmaster": float(mine.predicted or 0.0),
                    "aiconfigurator": theirs,
                    "ringmaster_error": float(mine.predicted or 0.0) / published - 1.0,
                    "aiconfigurator_error": theirs / published - 1.0,
                }
            )
    return rows


def compare_nvfp4(aic: str) -> list[dict[str, Any]]:
    """The LLM serving table's NVFP4 rows on the B200 and GB200 (TensorRT-LLM 1.0's and v0.21's
    perf-overview, dense Llama models: calibration/llm_serving_points.yaml), offline at
    trtllm-bench's batch as the serving-engine rows are."""
    rows = []
    # the two tables share their setups' names: a row is its source's and its quantity
    ours = {(r.id, r.quantity): r for r in LC.llm_serving_rows(_points())}
    sections = (
        (LC.V1_BLACKWELL_SECTION, LC.V1_FP4_ID),
        (LC.MOE_FP4_SECTION, "trtllm-perf-overview-moe-fp4"),
    )
    with tempfile.TemporaryDirectory() as tmp:
        for section, source in sections:
            for t in LC.throughput_rows(None, section):
                mine = ours.get((source, f"{t.quantity} ({t.precision})"))
                if t.precision != "FP4" or mine is None:
                    continue
                model = LC.MODELS[t.model]
                folder = Path(tmp) / t.model
                folder.mkdir(exist_ok=True)
                (folder / "config.json").write_text(json.dumps(_config(model)))
                point = {
                    "id": f"{mine.id} {t.model} {t.gpu} TP{t.tp} {t.input}/{t.output}",
                    "gpu": t.gpu,
                    "tp": t.tp,
                    "precision": t.precision,
                    "workload": {"input": t.input, "output": t.output},
                }
                acc = DEFAULT_CATALOG.accelerator(LC.GPUS[t.gpu])
                bs, _ = LC.trtllm_bench(
                    model, acc, t.tp, t.input, t.output, LC.L.WEIGHT_BYTES[t.precision]
                )
                theirs = _largest_batch_that_fits(aic, folder, point, int(bs))
                rows.append(
                    {
                        "point": point["id"],
                        "published": t.published,
                        "ringmaster": mine.predicted,
                        "aiconfigurator": theirs,
                        "ringmaster_error": mine.error,
                        "aiconfigurator_error": theirs / t.published - 1.0,
                    }
                )
    return rows


def _points() -> dict[str, Any]:
    from ringmaster import calibration

    path = calibration.SHARED_POINTS
    if not path.exists():
        path = calibration.PACKAGED_POINTS
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", default="aiconfigurator", help="the aiconfigurator executable")
    parser.add_argument(
        "--nvfp4",
        action="store_true",
        help="the LLM serving table's NVFP4 rows on the B200 and GB200 instead",
    )
    args = parser.parse_args()
    rows = compare_nvfp4(args.aic) if args.nvfp4 else compare(args.aic)
    print(f"{'point':<58} {'published':>10} {'Ringmaster':>11} {'AIConfigurator':>15}")
    for r in rows:
        print(
            f"{r['point']:<58} {r['published']:>10,.0f} {r['ringmaster_error']:>+10.1%}"
            f" {r['aiconfigurator_error']:>+14.1%}"
        )
    for key in ("ringmaster_error", "aiconfigurator_error"):
        errors = [abs(r[key]) for r in rows]
        print(f"{key}: median |error| {median(errors):.1%} over {len(rows)} rows")
    closer = sum(abs(r["ringmaster_error"]) < abs(r["aiconfigurator_error"]) for r in rows)
    print(f"Ringmaster closer on {closer} of {len(rows)}")


if __name__ == "__main__":
    main()
