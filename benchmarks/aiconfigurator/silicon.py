"""Extract the closed-loop serving runs that calibration/measured/aiconfigurator_silicon.csv holds.

AIConfigurator (ai-dynamo/aiconfigurator, Apache-2.0) keeps a sample of serving runs its team
measured on real GPUs (aic-core/src/aiconfigurator_core/systems/silicon_sample.csv): an engine
(vLLM, SGLang, TensorRT-LLM) serving one model on one system at fixed input and output lengths
under a closed loop of ``silicon_concurrency`` clients, with the run's TTFT and TPOT in
milliseconds. This script reads it from a git checkout at one commit and keeps the aggregated
(not disaggregated) runs on one host of the chips the engine knows by name (H100, H200, B200) of
the models its catalog holds: Llama 3.1 8B and 70B, Qwen3-32B, and the mixtures of experts
Qwen3-235B-A22B, DeepSeek-V3 / R1 (one architecture), gpt-oss-120b and Kimi K2.5 (Kimi K2's
text model under a vision encoder the runs do not use), at the layouts the engine can state
(``layout``). Left out, so the file stays small and every run is one the engine can express:
disaggregated deployments, B300 / GB200 / GB300, more than 8 GPUs, pipeline parallelism, experts
both sliced and sharded (MoE TP and EP both above 1), Kimi K2.5's INT4 checkpoint (its routed
experts INT4, the rest BF16: two weight precisions in one model), and MiniMax-M2.5, GLM-5 and
Qwen3.5 (not in the catalog; Qwen3.5's linear-attention layers are not modelled), and
nvidia/Qwen3-32B-NVFP4's one B200 run (416 clients of 15,500-token contexts: 845 GB of FP8 cache
on two GPUs of 180 GB, so it ran on what the sample does not state, prefix reuse or offload). A
run the sample lists more than once (the same measurement under two ids) is kept once.

    python benchmarks/aiconfigurator/silicon.py /path/to/aiconfigurator.git <commit>
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from pathlib import Path

SAMPLE = "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv"
OUT = (
    Path(__file__).resolve().parents[2]
    / "operator/ringmaster/calibration/measured/aiconfigurator_silicon.csv"
)
MODELS = {
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "moonshotai/Kimi-K2.5": "kimi-k2",
}
MIXTURES = {"qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b", "kimi-k2"}
SYSTEMS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}
HOPPER = {"H100", "H200"}
ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
HOST_GPUS = 8
COLUMNS = (
    "id",
    "engine",
    "version",
    "gpu",
    "model",
    "weights",
    "tp",
    "attention_dp",
    "ep",
    "input",
    "output",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
)


def _size(value: str) -> int:
    """A degree as the sample writes it: blank or 0 where it does not apply (1)."""
    return max(int(value or 1), 1)


def layout(r: dict[str, str], model: str) -> tuple[int, int] | None:
    """(attention data-parallel groups, expert-parallel degree) of a run in the engine's terms,
    or None where the engine cannot state it. The sample's agg runs are ``tp_size`` ranks of
    attention in each of ``attention_dp_size`` groups, the experts over the same ranks as
    ``moe_tp_size`` x ``moe_ep_size``: sliced experts (EP 1) or whole ones over every rank."""
    tp, dp = _size(r["tp_size"]), _size(r["attention_dp_size"])
    moe_tp, moe_ep = _size(r["moe_tp_size"]), _size(r["moe_ep_size"])
    if tp * dp > HOST_GPUS or _size(r["pp_size"]) != 1:
        return None
    if model not in MIXTURES:
        return (1, 1) if dp == 1 else None
    if moe_tp * moe_ep != tp * dp:
        return None
    if moe_ep == 1:
        return (1, 1) if dp == 1 else None
    return (dp, moe_ep) if moe_tp == 1 else None


def weights(r: dict[str, str], gpu: str) -> str:
    """The weights' precision: an empty one is the checkpoint's own (bf16); 4-bit weights on a
    Hopper chip (gpt-oss's MXFP4) run against 16-bit activations (no FP4 units): int4, the
    engine's W4A16."""
    precision = (r["precision"] or "bf16").lower()
    return "int4" if precision == "fp4" and gpu in HOPPER else precision


def rows(text: str) -> list[dict[str, str]]:
    kept = []
    for r in csv.DictReader(io.StringIO(text)):
        if r["mode"] != "agg" or r["model_path"] not in MODELS or r["system"] not in SYSTEMS:
            continue
        model = MODELS[r["model_path"]]
        if model == "kimi-k2" and r["precision"].lower() == "int4":
            continue
        shape = layout(r, model)
        found = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
        if shape is None or found is None:
            continue
        gpu = SYSTEMS[r["system"]]
        kept.append(
            {
                "id": r["id"],
                "engine": ENGINES[r["backend"]],
                "version": r["backend_version"] or "unstated",
                "gpu": gpu,
                "model": model,
                "weights": weights(r, gpu),
                "tp": r["tp_size"],
                "attention_dp": str(shape[0]),
                "ep": str(shape[1]),
                "input": r["isl"],
                "output": r["osl"],
                "concurrency": found[1],
                "ttft_ms": f"{float(r['silicon_ttft_ms']):.4f}",
                "tpot_ms": f"{float(r['silicon_tpot_ms']):.4f}",
            }
        )
    # The sample lists some runs more than once (DeepSeek-V3 and R1 paths, two database dumps):
    # one of each, its first id, so that no measurement counts twice.
    unique: dict[tuple[str, ...], dict[str, str]] = {}
    for run in sorted(kept, key=lambda r: r["id"]):
        unique.setdefault(tuple(v for k, v in run.items() if k != "id"), run)
    return sorted(unique.values(), key=lambda r: r["id"])


def main(repo: str, commit: str) -> None:
    text = subprocess.run(
        ["git", "--git-dir", repo, "show", f"{commit}:{SAMPLE}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kept = rows(text)
    with OUT.open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept)
    print(f"{len(kept)} runs -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
