"""Extract the closed-loop serving runs that calibration/measured/aiconfigurator_silicon.csv holds.

AIConfigurator (ai-dynamo/aiconfigurator, Apache-2.0) keeps a sample of serving runs its team
measured on real GPUs (aic-core/src/aiconfigurator_core/systems/silicon_sample.csv): an engine
(vLLM, SGLang, TensorRT-LLM) serving one model on one system at fixed input and output lengths
under a closed loop of ``silicon_concurrency`` clients, with the run's TTFT and TPOT in
milliseconds. This script reads it from a git checkout at one commit and keeps the aggregated
(not disaggregated) runs of the dense models and chips the engine knows by name: Llama 3.1 8B and
70B on the H100, H200 and B200. The rest (mixture-of-experts models, Qwen3-32B, disaggregated
deployments, B300 / GB300) is left out, so the file stays small.

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
}
SYSTEMS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}
ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
COLUMNS = (
    "id",
    "engine",
    "version",
    "gpu",
    "model",
    "weights",
    "tp",
    "input",
    "output",
    "concurrency",
    "ttft_ms",
    "tpot_ms",
)


def rows(text: str) -> list[dict[str, str]]:
    kept = []
    for r in csv.DictReader(io.StringIO(text)):
        if r["mode"] != "agg" or r["model_path"] not in MODELS or r["system"] not in SYSTEMS:
            continue
        if int(r["pp_size"] or 1) != 1:
            continue
        found = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
        if found is None:
            continue
        kept.append(
            {
                "id": r["id"],
                "engine": ENGINES[r["backend"]],
                "version": r["backend_version"] or "unstated",
                "gpu": SYSTEMS[r["system"]],
                "model": MODELS[r["model_path"]],
                # An empty precision is the checkpoint's own: bf16.
                "weights": (r["precision"] or "bf16").lower(),
                "tp": r["tp_size"],
                "input": r["isl"],
                "output": r["osl"],
                "concurrency": found[1],
                "ttft_ms": f"{float(r['silicon_ttft_ms']):.4f}",
                "tpot_ms": f"{float(r['silicon_tpot_ms']):.4f}",
            }
        )
    return sorted(kept, key=lambda r: r["id"])


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
