"""Whole steps measured on the lent GPUs, held against the engine: checked points, never fitted.

``calibration/measured/device/<date>-<chip>/`` holds what ``benchmarks/device/run.sh`` measured
on one H100 SXM and one H200 (PyTorch 2.11, CUDA 13.0; the folder's README). No constant is set
on these rows; each is the engine's prediction for the same work against its measured time:

- **training**: a plain-PyTorch step of 1B and 3B Llama shapes on one GPU (eager modules, SDPA,
  bf16 autocast over fp32 weights, fp32-upcast loss, foreach AdamW), against
  :func:`ringmaster.engine.llm_training.evaluate_layouts` for framework ``PyTorch``: the whole step
  and its parts (GEMMs, attention, the memory-bound rest with the loss, the optimizer; the
  profiler's device time per kernel category);
- **decode**: a Llama-3.1-8B decode step replayed from one CUDA graph, batch 1-256 x context
  1k-4k, against the decode step composed from the ceilings (the GEMMs' weight streaming and
  decode rate, the KV read, a floor per kernel) with no serving engine's host costs (a graph has
  none);
- **prefill**: the same model's forward over one prompt, against the engine's idle TTFT;
- **grouped-gemm**: a MoE layer's expert GEMMs as ``torch._grouped_mm`` runs them over a rank's
  local experts (8-2,048 tokens an expert), against the engine's grouped-GEMM call.

The measured steps run kernels a serving engine fuses (PyTorch's separate norms, RoPE and SwiGLU
ops): the decode rows bound the engine's kernel floor from above, and the rendering says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

import numpy as np

from ringmaster.calibration.llm_training import mpt_transformer
from ringmaster.engine import llm_step as S
from ringmaster.engine import llm_training as L
from ringmaster.engine.ceilings import DECODE_GEMMS_PER_LAYER, ceilings_for
from ringmaster.engine.frameworks import framework as framework_profile
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RECOMPUTE_NONE, SHARD_NONE
from ringmaster.engine.moe_routing import (
    MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT,
    MOE_EAGER_BYTES_PER_ELEMENT,
)
from ringmaster.engine.step_parts import ce_stream_bytes_per_s
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer

DEVICE_DIR = Path(__file__).with_name("measured") / "device"
CHIPS = {"h100": "nvidia-h100-80gb", "h200": "nvidia-h200-141gb"}
# The decode step as kernels alone: no serving engine's fixed or per-sequence host cost.
KERNELS_ONLY = S.StepConstants(
    measured_decode=True, step_overhead=0.0, sequence_overhead=0.0, kv_sequence_tokens=0.0
)


@dataclass(frozen=True)
class DeviceRow:
    source: str  # the measured folder, e.g. 2026-11-26-h100
    group: str  # training | decode | prefill
    setup: str
    accelerator: str
    measured: float  # seconds
    predicted: float
    parts: tuple[tuple[str, float, float], ...] = ()  # (part, measured s, predicted s)
    precision: str = "bf16"  # what the linear layers compute in
    role: str = "checked"  # "fitted" where a constant is fitted on the row
    framework: str = "PyTorch"  # the profile a training row is held against

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def _folders() -> list[Path]:
    return sorted(p for p in DEVICE_DIR.iterdir() if p.is_dir() and p.name.split("-")[-1] in CHIPS)


def _accelerator(folder: Path) -> str:
    """The catalog accelerator a measured folder (``<date>-<chip>``) ran on."""
    return CHIPS[folder.name.split("-")[-1]]


def _load(folder: Path, part: str) -> dict[str, Any] | None:
    path = folder / f"{part}.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data.get(part)


def _scalar(x: Any) -> float:
    return float(np.ravel(x)[0])


def training_model(config: dict[str, Any], sequence: int) -> Transformer:
    """The measured script's Llama shape (untied embeddings, gated FFN, GQA), or its MPT shape
    (``arch: mpt``: llm-foundry's, calibration.llm_training.mpt_transformer)."""
    if config.get("arch") == "mpt":
        return mpt_transformer(
            config["hidden"], config["heads"], config["layers"], config["vocab"], sequence
        )
    return Transformer(
        config["layers"],
        config["hidden"],
        config["heads"],
        config["vocab"],
        sequence,
        kv_heads=config["kv_heads"],
        ffn_hidden=config["ffn"],
        gated_ffn=True,
        head_dim=config["head_dim"],
        experts=config.get("experts", 0),
        active_experts=config.get("top_k", 0),
        expert_ffn_hidden=config.get("expert_ffn", 0),
    )


def one_gpu(
    accelerator: str,
    framework: str = "PyTorch",
    *,
    autocast: bool = True,
    compiled: bool = False,
    precision: str = "bf16",
    loss: str | None = None,
) -> L.LayoutHardware:
    """One GPU of ``accelerator``'s 8-GPU host; ``autocast``: False for bf16 weights (the
    measured script's ``bf16`` regime: the model cast to bf16, no autocast); ``compiled``:
    torch.compile on; ``precision``: what the linear layers compute in."""
    host = DEFAULT_CATALOG.host(accelerator, 8)
    profile = framework_profile(framework, compiled=compiled)
    profile = replace(profile, autocast_unsharded=profile.autocast_unsharded and autocast)
    if loss is not None:  # the loss the measured script ran, where the profile's differs
        profile = replace(profile, loss=loss)
    hw = L.layout_hardware(host, 1, DEFAULT_CATALOG, framework=profile)
    return replace(hw, per_host=1).with_precision(precision)


# The measured script's regimes: (bf16 weights, torch.compile, precision). autocast and
# expand_kv run under autocast over fp32 weights; the rest with the model cast to bf16.
VARIANTS = {
    "autocast": (False, False, "bf16"),
    "expand_kv": (False, False, "bf16"),
    "bf16": (True, False, "bf16"),
    "compile_bf16": (True, True, "bf16"),
    "compile_fp8": (True, True, "fp8"),
    "eager_fp8": (True, False, "fp8"),
}
# measure.py's parts that time training steps; a variant ending in _ckpt recomputes each block.
TRAINING_PARTS = (
    "train",
    "train_variants",
    "train_compiled",
    "train_short",
    "train_eager_fp8",
    "train_recompute",
    "train_mpt",
    "train_moe",
    "train_moe_compiled",
    "train_moe_balanced",
)


# A compiled FP8 call of one linear layer costs the host about 1 ms whatever its size (0.97 ms
# for 0.17 ms of GEMMs at 1,024 wide, 0.97-1.08 ms at 2,048 tokens): rows whose GEMMs take less
# than half of that, or that have fewer tokens than the measured steps' micro-batch (8,192),
# time the host, not the casts, and are left out of the fit.
FP8_CAST_FIT_TOKENS = 8192
FP8_CAST_FIT_MIN_GEMM_MS = 0.5


def fp8_cast_points() -> list[tuple[str, dict[str, float]]]:
    """(folder, row) of every measured FP8 linear layer (benchmarks/device fp8_linear)."""
    points = []
    for folder in _folders():
        data = _load(folder, "fp8_linear")
        if data is not None:
            points += [(folder.name, r) for r in data["rows"] if "failure" not in r]
    return points


def fp8_cast_bytes(row: dict[str, float], mode: str) -> float:
    """What a measured FP8 layer spent beyond its three GEMMs, per element of (input + output
    gradient + weight), as bytes at the H100's streaming rate; ``mode``: compiled | eager."""
    elements = row["tokens"] * (row["in"] + row["out"]) + row["in"] * row["out"]
    extra_s = (row[f"fp8_{mode}_ms"] - row["gemms_only_ms"]) / 1e3
    return extra_s / elements * ce_stream_bytes_per_s()


def fp8_cast_fit_rows() -> list[dict[str, float]]:
    return [
        r
        for _, r in fp8_cast_points()
        if r["tokens"] >= FP8_CAST_FIT_TOKENS and r["gemms_only_ms"] >= FP8_CAST_FIT_MIN_GEMM_MS
    ]


def fit_fp8_cast_bytes() -> dict[str, float]:
    """step_parts.FP8_CAST_BYTES_PER_ELEMENT's measured modes: the median over the fit rows."""
    rows = fp8_cast_fit_rows()
    return {mode: median(fp8_cast_bytes(r, mode) for r in rows) for mode in ("compiled", "eager")}


def _training_rows(folder: Path) -> list[DeviceRow]:
    rows = []
    for part in TRAINING_PARTS:
        data = _load(folder, part)
        if data is not None:
            rows += [_training_row(folder, data, r) for r in data["rows"] if "failure" not in r]
    return rows  # a failed run (out of memory on the 80 GB part) measured nothing


def _training_row(folder: Path, data: dict[str, Any], r: dict[str, Any]) -> DeviceRow:
    """One measured step against the engine's. The regimes with bf16 weights ran their AdamW
    on bf16 parameters and states, which no framework profile models (FSDP and DeepSpeed keep
    fp32 ones): their rows compare forward + backward only."""
    acc = _accelerator(folder)
    variant = str(r.get("variant", "autocast")).removesuffix("_balanced")
    bf16_weights, compiled, precision = VARIANTS[variant.removesuffix("_ckpt")]
    recompute = RECOMPUTE_FULL if variant.endswith("_ckpt") else RECOMPUTE_NONE
    config = data["configs"][r["model"]]
    # llm-foundry's MPT as its profile runs it, with the loss the script ran (PyTorch's
    # cross-entropy on fp32-upcast logits, compiled where the step is; llm-foundry's tables
    # ran flash-attn's fused kernel, which the script cannot import)
    framework = "LLMFoundry" if config.get("arch") == "mpt" else "PyTorch"
    loss = ("compiled" if compiled else "eager_upcast") if framework == "LLMFoundry" else None
    hw = one_gpu(
        acc,
        framework,
        autocast=not bf16_weights,
        compiled=compiled,
        precision=precision,
        loss=loss,
    )
    model = training_model(config, int(r["seq"]))
    a = L.evaluate_layouts(
        model,
        hw,
        tensor=1,
        pipeline=1,
        sharding=SHARD_NONE,
        micro_batch=int(r["batch"]),
        recompute=recompute,
        global_batch=int(r["batch"]),
    )
    by = r["device_ms_by_category"]
    parts: tuple[tuple[str, float, float], ...] = (
        ("gemm", by.get("gemm", 0.0) / 1e3, _scalar(a.gemm_seconds)),
        ("attention", by.get("attention", 0.0) / 1e3, _scalar(a.attention_seconds)),
        (
            "memory-bound + loss",
            (by.get("other", 0.0) + by.get("loss", 0.0)) / 1e3,
            _scalar(a.memory_bound_seconds) + _scalar(a.loss_seconds),
        ),
        ("optimizer", by.get("optimizer", 0.0) / 1e3, _scalar(a.optimizer_seconds)),
    )
    measured, predicted = float(r["wall_ms"]) / 1e3, _scalar(a.step_seconds)
    group = "training"
    if bf16_weights:
        group = "training-fwd-bwd"
        measured -= float(r["optimizer_ms"]) / 1e3
        predicted -= _scalar(a.optimizer_seconds)
        parts = parts[:-1]
    return DeviceRow(
        folder.name,
        group,
        f"{r['model']} b{r['batch']} s{r['seq']} {framework} "
        f"{'' if compiled else 'eager '}{variant}",
        acc,
        measured,
        predicted,
        parts,
        precision,
        framework=framework,
    )


def _serving_terms(acc: str, constants: S.StepConstants) -> S.ServingTerms:
    model = KNOWN_TRANSFORMERS["llama-3.1-8b"]
    a = DEFAULT_CATALOG.accelerator(acc)
    return S.serving_terms(model, a, 1, a.peak("bf16"), 2.0, 2.0, 1024, 1, constants=constants)


def _decode_rows(folder: Path) -> list[DeviceRow]:
    data = _load(folder, "decode")
    if data is None:
        return []
    acc = _accelerator(folder)
    terms = _serving_terms(acc, KERNELS_ONLY)
    rows = []
    for r in data["rows"]:
        n, context = int(r["batch"]), int(r["context"])
        predicted = _scalar(S.step_seconds(terms, n, 0.0, context_tokens=n * context))
        rows.append(
            DeviceRow(
                folder.name,
                "decode",
                f"llama-3.1-8b decode b{n} ctx{context}",
                acc,
                float(r["ms"]) / 1e3,
                predicted,
            )
        )
    return rows


def _prefill_terms(acc: str, prompt: int, batch: int = 1) -> S.ServingTerms:
    """The serving step's terms for ``batch`` prompts of ``prompt`` tokens in one attention
    call, with the kernel the measured script ran (SDPA's FlashAttention 2)."""
    model = KNOWN_TRANSFORMERS["llama-3.1-8b"]
    a = DEFAULT_CATALOG.accelerator(acc)
    return S.serving_terms(
        model,
        a,
        1,
        a.peak("bf16"),
        2.0,
        2.0,
        prompt,
        1,
        prefill_attention="flash2",
        attention_prompts=batch,
    )


def _prefill_predicted(acc: str, batch: int, prompt: int) -> tuple[float, dict[str, float]]:
    """The engine's time for ``batch`` prompts of ``prompt`` tokens in one forward (the GEMMs
    see every token, each prompt's attention its own square), and its GEMM and attention parts."""
    terms = _prefill_terms(acc, prompt, batch)
    tokens = batch * prompt
    whole = _scalar(S.step_seconds(terms, 0.0, tokens, prompt_length=prompt))
    gemm = max(tokens * _scalar(terms.prefill_gemm_per_token), _scalar(terms.weights_read))
    attention = tokens * 0.5 * prompt * _scalar(terms.prefill_attention_per_context)
    return whole, {"gemm": gemm, "attention": attention}


def _prefill_rows(folder: Path) -> list[DeviceRow]:
    data = _load(folder, "prefill")
    if data is None:
        return []
    acc = _accelerator(folder)
    rows = []
    for r in data["rows"]:
        b, prompt = int(r["batch"]), int(r["prompt"])
        predicted, _ = _prefill_predicted(acc, b, prompt)
        rows.append(
            DeviceRow(
                folder.name,
                "prefill",
                f"llama-3.1-8b prefill b{b} s{prompt}",
                acc,
                float(r["graph_ms"]) / 1e3,
                predicted,
            )
        )
    return rows


def _decode_predicted(acc: str, batch: int, context: int) -> tuple[float, dict[str, float]]:
    """The kernels-only decode step (as _decode_rows) and its GEMM and attention parts, each
    with its kernels' floors: the mixed step's with no chunk."""
    return _mixed_predicted(acc, "llama-3.1-8b", batch, 0, context)


def _with_parts(
    predicted: dict[str, float], whole: float, measured: dict[str, float], measured_whole: float
) -> tuple[tuple[str, float, float], ...]:
    """(part, measured s, predicted s) for the GEMMs, the attention and the rest; the measured
    parts are one profiled eager call's device time, the rest is the graph's time less them."""
    gemm, attention = measured.get("gemm", 0.0) / 1e3, measured.get("attention", 0.0) / 1e3
    rest = predicted["gemm"] + predicted["attention"]
    return (
        ("gemm", gemm, predicted["gemm"]),
        ("attention", attention, predicted["attention"]),
        ("rest", measured_whole - gemm - attention, whole - rest),
    )


def _serving_fused_rows(folder: Path) -> list[DeviceRow]:
    """The serving_fused part: the decode and prefill steps with their norms, RoPE, SwiGLU and
    residual adds fused (what a serving engine runs: the engine's step checked on its own terms)
    and the same steps unfused, on the same machine (the decode and prefill groups)."""
    data = _load(folder, "serving_fused")
    if data is None:
        return []
    acc = _accelerator(folder)
    rows = []
    predictors = {"decode": _decode_predicted, "prefill": _prefill_predicted}
    for kind, predict in predictors.items():
        for r in data[kind]:
            if "fused_ms" not in r:
                continue
            b, n = int(r["batch"]), int(r["context" if kind == "decode" else "prompt"])
            whole, parts = predict(acc, b, n)
            setup = f"llama-3.1-8b {kind} b{b} {'ctx' if kind == 'decode' else 's'}{n}"
            for variant in ("fused", "unfused"):
                group = kind if variant == "unfused" else f"{kind}-fused"
                measured = r[f"{variant}_ms"], r[f"{variant}_eager"]
                rows.append(_step_row(folder, group, setup, acc, measured, whole, parts))
    return rows


def _step_row(
    folder: Path,
    group: str,
    setup: str,
    acc: str,
    measured: tuple[float, dict[str, Any]],
    whole: float,
    parts: dict[str, float],
) -> DeviceRow:
    """A whole step's row: ``measured`` is its graph's ms and its profiled eager call."""
    seconds = float(measured[0]) / 1e3
    categories = measured[1]["device_ms_by_category"]
    return DeviceRow(
        folder.name,
        group,
        setup,
        acc,
        seconds,
        whole,
        _with_parts(parts, whole, categories, seconds),
    )


# The serving_mixed part's models: the engine's transformer, its layers as measured, and the
# tensor-parallel degree whose one rank the measured shapes are (its all-reduces not run).
MIXED_MODELS = {
    "llama-3.1-8b": ("llama-3.1-8b", None, 1),
    "llama-3.1-70b-tp4-rank-20-layers": ("llama-3.1-70b", 20, 4),
}


def _mixed_model(name: str) -> tuple[Transformer, int]:
    key, layers, tp = MIXED_MODELS[name]
    model = KNOWN_TRANSFORMERS[key]
    return (model if layers is None else replace(model, layers=layers)), tp


def _mixed_predicted(
    acc: str, name: str, decodes: int, chunk: int, context: int
) -> tuple[float, dict[str, float]]:
    """The kernels-only step of ``decodes`` sequences at ``context`` tokens and one ``chunk``-
    token prompt (its attention at FlashAttention 2's rate, the kernel that ran; one rank's
    shapes, no all-reduce), and its GEMM and attention parts with their floors."""
    model, tp = _mixed_model(name)
    a = DEFAULT_CATALOG.accelerator(acc)
    terms = S.serving_terms(
        model,
        a,
        tp,
        a.peak("bf16"),
        2.0,
        2.0,
        chunk or context,
        1,
        constants=KERNELS_ONLY,
        prefill_attention="flash2",
        attention_prompts=1,  # the one chunk
    )
    none = np.zeros(())
    terms = terms._replace(
        allreduce_base=none,
        allreduce_per_token=none,
        allreduce_curve=none,
        allreduce_beyond_per_token=none,
    )
    n, p = float(decodes), float(chunk)
    whole = _scalar(
        S.step_seconds(terms, n, p, context_tokens=n * context, prompt_length=max(p, 1.0))
    )
    ce = ceilings_for(a)
    gemm_floor = ce.decode_gemm["bf16"][1] * 1e-6 * DECODE_GEMMS_PER_LAYER * model.layers
    attention_floor = ce.decode_attention["flash2"][1] * 1e-6 * model.layers if decodes else 0.0
    gemm = (
        max(
            n * _scalar(S.decode_gemm_seconds_per_token(terms, n))
            + p * _scalar(terms.prefill_gemm_per_token),
            _scalar(terms.weights_read),
        )
        + gemm_floor
    )
    attention = (
        n * context * _scalar(terms.kv_read_per_token)
        + attention_floor
        + p * 0.5 * p * _scalar(terms.prefill_attention_per_context)
    )
    return whole, {"gemm": gemm, "attention": attention}


def _serving_mixed_rows(folder: Path) -> list[DeviceRow]:
    """The serving_mixed part (chunked prefill's step: decodes and a prompt chunk in one
    flattened token set, fused elementwise kernels, one CUDA graph): the decode-only rows join
    decode-fused, the chunk-only ones prefill-fused, the mixed ones are mixed-fused."""
    data = _load(folder, "serving_mixed")
    if data is None:
        return []
    acc = _accelerator(folder)
    rows = []
    for name, measured_model in data["models"].items():
        for r in measured_model["rows"]:
            if "ms" not in r:
                continue
            n, p, context = int(r["decodes"]), int(r["chunk"]), int(r["context"])
            whole, parts = _mixed_predicted(acc, name, n, p, context)
            if n and p:
                group, setup = "mixed-fused", f"{name} b{n} ctx{context} + chunk {p}"
            elif n:
                group, setup = "decode-fused", f"{name} decode b{n} ctx{context} (flattened)"
            else:
                group, setup = "prefill-fused", f"{name} chunk {p} (flattened)"
            rows.append(_step_row(folder, group, setup, acc, (r["ms"], r["eager"]), whole, parts))
    return rows


def mixed_sharing(source: str) -> list[tuple[str, float, float]]:
    """(setup, measured, predicted) of each mixed step over its decode-only and chunk-only
    steps' sum, from ``source``'s rows: what sharing one step's GEMMs saves, as measured and as
    the engine's one roofline over the step's tokens gives it."""
    by = {r.setup: r for r in device_rows() if r.source == source}
    out = []
    for setup, r in by.items():
        if r.group != "mixed-fused":
            continue
        head, chunk = setup.split(" + chunk ")
        name, batch, context = head.split(" ")
        decode = by[f"{name} decode {batch} {context} (flattened)"]
        prompt = by[f"{name} chunk {chunk} (flattened)"]
        out.append(
            (
                setup,
                r.measured / (decode.measured + prompt.measured),
                r.predicted / (decode.predicted + prompt.predicted),
            )
        )
    return out


def prompt_gemm_fractions(source: str) -> list[tuple[str, int, float]]:
    """(model, chunk tokens, fraction of the bf16 peak) the chunk-only steps' GEMMs reached in
    ``source`` (their profiled device time): the step's GEMM rate by its token count."""
    data = _load(DEVICE_DIR / source, "serving_mixed")
    if data is None:
        return []
    peak = DEFAULT_CATALOG.accelerator(_accelerator(DEVICE_DIR / source)).peak("bf16")
    out = []
    for name, measured_model in data["models"].items():
        model, tp = _mixed_model(name)
        for r in measured_model["rows"]:
            if "ms" not in r or r["decodes"] or not r["chunk"]:
                continue
            p = int(r["chunk"])
            # every layer's GEMMs over the chunk, the LM head over its last token
            flops = 2.0 * p * (model.matmul_parameters - model.vocab * model.hidden) / tp
            flops += 2.0 * model.vocab * model.hidden / tp
            seconds = r["eager"]["device_ms_by_category"]["gemm"] / 1e3
            out.append((name, p, flops / seconds / peak))
    return out


def _grouped_rows(folder: Path) -> list[DeviceRow]:
    """MoE expert GEMMs (``torch._grouped_mm`` over a rank's local experts, bf16) against the
    engine's grouped-GEMM call (Ceilings.grouped_gemm_seconds: the local experts' weights
    streamed under the grouped kernel's cap, or the FLOPs at the decode-batch rate of the
    expert's width, and a floor). The H100's rows fit the cap (fit_grouped_stream_cap); the
    H200's check it."""
    acc = _accelerator(folder)
    ce = ceilings_for(DEFAULT_CATALOG.accelerator(acc))
    rows = []
    # (part, the time's key, group, precision the engine prices, bytes a weight)
    for part, key, group, precision, weight_bytes in (
        ("grouped", "grouped_us", "grouped-gemm", "bf16", 2.0),
        ("grouped_fp8", "bf16_us", "grouped-gemm", "bf16", 2.0),
        ("grouped_fp8", "fp8_us", "grouped-gemm-fp8", "fp8fast", 1.0),
    ):
        data = _load(folder, part)
        for r in [] if data is None else data["rows"]:
            if key not in r:
                continue
            n, k, e, m = int(r["n"]), int(r["k"]), int(r["experts"]), int(r["tokens_per_expert"])
            width = k if r["gemm"] == "down" else n / 2  # the expert's FFN width
            flops = 2.0 * m * e * n * k
            predicted = _scalar(
                ce.grouped_gemm_seconds(precision, weight_bytes * e * n * k, flops, width)
            )
            rows.append(
                DeviceRow(
                    folder.name,
                    group,
                    f"{r['model']} {r['gemm']} {e} experts x {m} tokens",
                    acc,
                    float(r[key]) * 1e-6,
                    predicted,
                    precision="fp8" if weight_bytes == 1.0 else "bf16",
                    role="fitted" if folder.name == GROUPED_FIT_FOLDER else "checked",
                )
            )
    return rows


# The grouped calls whose time is the weights' streaming: few tokens an expert (the FLOPs far
# below the decode rate) and long enough that the floor (about 5 us) is under 5 %.
GROUPED_WEIGHT_BOUND_TOKENS = 32
GROUPED_WEIGHT_BOUND_MIN_US = 100.0


# The measured grouped calls the cap is fitted on (the lent H100's); the others check it.
GROUPED_FIT_FOLDER = "2026-11-26-h100"


def grouped_stream_rates(folder: str) -> list[float]:
    """Bytes/s at which the grouped calls measured in ``folder`` streamed their experts'
    weights, over the weight-bound ones."""
    data = _load(DEVICE_DIR / folder, "grouped")
    rows = [] if data is None else data["rows"]
    return [
        2.0 * r["experts"] * r["n"] * r["k"] / (r["grouped_us"] * 1e-6)
        for r in rows
        if "grouped_us" in r
        and r["tokens_per_expert"] <= GROUPED_WEIGHT_BOUND_TOKENS
        and r["grouped_us"] >= GROUPED_WEIGHT_BOUND_MIN_US
    ]


def fit_grouped_stream_cap() -> float:
    """engine.ceilings.GROUPED_STREAM_CAP_GBPS: the median over the H100's weight-bound calls."""
    return median(grouped_stream_rates(GROUPED_FIT_FOLDER)) / 1e9


# The MoE widths the routing's bytes are fitted on (engine.moe_routing); the other measured
# width checks them.
MOE_ROUTING_FIT_MODELS = ("qwen3-30b-a3b-4l", "olmoe-1b-7b-8l")
MOE_OPS_TOKENS = 8192  # benchmarks/device/moe_parts.py _moe_ops


class MoeOpTerms(NamedTuple):
    model: str
    routed_s: float  # eager: dispatch + combine; compiled: the layer less its grouped GEMMs
    token_s: float  # eager: router + sort; compiled: 0 (inside the layer's)
    routed_elements: float  # tokens x top-k x hidden
    token_elements: float  # tokens x hidden


def moe_op_terms(folder: Path, kind: str) -> list[MoeOpTerms]:
    """Each width's MoE routing measured in ``folder``, forward + backward (the sort has none):
    ``eager`` from its ops apart (moe_ops), ``compiled`` as the compiled layer less its compiled
    grouped GEMMs (moe_ops_compiled: Inductor fuses across the ops of one graph)."""
    data = _load(folder, "moe_ops" if kind == "eager" else "moe_ops_compiled")
    configs = _load(folder, "train_moe")
    if data is None or configs is None:
        return []
    out = []
    for model in dict.fromkeys(r["model"] for r in data["rows"]):
        op = {r["op"]: r for r in data["rows"] if r["model"] == model}
        c = configs["configs"][model]
        if kind == "eager":
            routed = (op["dispatch"]["fwdbwd_ms"] + op["combine"]["fwdbwd_ms"]) / 1e3
            token = (op["router"]["fwdbwd_ms"] + op["sort"]["fwd_ms"]) / 1e3
        else:
            routed = (op["layer_balanced"]["fwdbwd_ms"] - op["experts"]["fwdbwd_ms"]) / 1e3
            token = 0.0
        elements = MOE_OPS_TOKENS * c["hidden"]
        out.append(MoeOpTerms(model, routed, token, elements * c["top_k"], elements))
    return out


def _h200_stream_bytes_per_s() -> float:
    """The lent H200's streaming rate: H100_STREAM_GBPS over its HBM scale."""
    ce = ceilings_for(DEFAULT_CATALOG.accelerator(CHIPS["h200"]))
    return ce_stream_bytes_per_s() / ce.hbm_scale


def _fit_width_terms(kind: str) -> list[MoeOpTerms]:
    """The routing ``kind``'s measured terms of the widths it is fitted on."""
    return [
        t
        for folder in _folders()
        for t in moe_op_terms(folder, kind)
        if t.model in MOE_ROUTING_FIT_MODELS
    ]


def _term_bytes(t: MoeOpTerms, term: str) -> float:
    """One width's ``term`` (routed | token) as bytes per element at the H200's streaming
    rate."""
    seconds, elements = (
        (t.routed_s, t.routed_elements) if term == "routed" else (t.token_s, t.token_elements)
    )
    return seconds / elements * _h200_stream_bytes_per_s()


def _terms_of(kind: str) -> tuple[str, ...]:
    return ("routed", "token") if kind == "eager" else ("routed",)


def fit_moe_routing_bytes(kind: str) -> dict[str, float]:
    """engine.moe_routing's measured bytes (``kind``: eager | compiled): the median over the fit
    widths of each term's seconds per element at the lent H200's streaming rate."""
    terms = _fit_width_terms(kind)
    return {term: round(median(_term_bytes(t, term) for t in terms), 2) for term in _terms_of(kind)}


def moe_routing_leave_one_width_out() -> list[tuple[str, str, float, float, int, float]]:
    """Each fit width left out of each routing fit: (constant, the width, fitted, refitted on
    the other width, 1 row, that width's |error| under the refit), per term."""
    out = []
    for kind, constant in (
        ("eager", "MOE_EAGER_BYTES_PER_ELEMENT"),
        ("compiled", "MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT"),
    ):
        terms = _fit_width_terms(kind)
        whole = fit_moe_routing_bytes(kind)
        for term in _terms_of(kind):
            name = constant if kind == "compiled" else f'{constant}["{term}"]'
            for left in terms:
                (other,) = [t for t in terms if t.model != left.model]
                refit, own = _term_bytes(other, term), _term_bytes(left, term)
                source = f"{left.model} ops, lent H200"
                out.append((name, source, whole[term], refit, 1, abs(refit / own - 1)))
    return out


def _moe_ops_rows(folder: Path) -> list[DeviceRow]:
    """Each width's MoE routing, eager and compiled, against engine.moe_routing's bytes."""
    acc = _accelerator(folder)
    per_byte = ceilings_for(DEFAULT_CATALOG.accelerator(acc)).hbm_scale / ce_stream_bytes_per_s()
    bytes_per = {
        "eager": MOE_EAGER_BYTES_PER_ELEMENT,
        "compiled": {"routed": MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT, "token": 0.0},
    }
    what = {
        "eager": "router + sort + dispatch + combine",
        "compiled": "compiled layer less its grouped GEMMs",
    }
    rows = []
    for kind in ("eager", "compiled"):
        b = bytes_per[kind]
        for t in moe_op_terms(folder, kind):
            predicted = (b["routed"] * t.routed_elements + b["token"] * t.token_elements) * per_byte
            rows.append(
                DeviceRow(
                    folder.name,
                    f"moe-routing-{kind}",
                    f"{t.model} {MOE_OPS_TOKENS} tokens {what[kind]}",
                    acc,
                    t.routed_s + t.token_s,
                    predicted,
                    role="fitted" if t.model in MOE_ROUTING_FIT_MODELS else "checked",
                )
            )
    return rows


@lru_cache(maxsize=1)
def device_rows() -> tuple[DeviceRow, ...]:
    rows: list[DeviceRow] = []
    for folder in _folders():
        rows += _training_rows(folder) + _decode_rows(folder) + _prefill_rows(folder)
        rows += _grouped_rows(folder) + _serving_fused_rows(folder)
        rows += _serving_mixed_rows(folder) + _moe_ops_rows(folder)
    return tuple(rows)


def group_summary(rows: list[DeviceRow]) -> tuple[float, float, float, float]:
    """(median |error|, signed median, smallest, largest error) of ``rows``."""
    errors = [r.error for r in rows]
    return median(abs(e) for e in errors), median(errors), min(errors), max(errors)


def _mixed_lines(sources: list[str]) -> list[str]:
    """What sharing a step's GEMMs saves (measured against the engine), and the step's GEMM rate
    by its chunk's tokens, per serving_mixed source."""
    lines = []
    for source in sources:
        sharing = mixed_sharing(source)
        gap = [p / m - 1.0 for _, m, p in sharing]
        fractions = ", ".join(
            f"{p} {f:.2f}" for name, p, f in prompt_gemm_fractions(source) if name == "llama-3.1-8b"
        )
        lines.append(
            f"  mixed step {source}: decodes + a chunk over the two steps alone, measured "
            f"{min(m for _, m, _ in sharing):.2f}-{max(m for _, m, _ in sharing):.2f}, the "
            f"engine {min(p for *_, p in sharing):.2f}-{max(p for *_, p in sharing):.2f} "
            f"(median {median(gap):+.1%}: one roofline over the step's tokens shares more than "
            f"the GEMMs do near the ridge); chunk-only GEMMs, tokens fraction-of-peak: "
            f"{fractions} (the engine's prompt rate: one fitted fraction at any chunk, "
            f"{S.LLM_COMPUTE_EFFICIENCY:.2f} of the bf16 peak)"
        )
    return lines


def interference_ratios(source: str) -> list[tuple[str, float, float]]:
    """(case, burst, sustained): what a layer's attention adds beside its GEMMs over what it
    takes alone (the interference part: (both - GEMMs) / attention, at each clock)."""
    data = _load(DEVICE_DIR / source, "interference")
    out = []
    for r in [] if data is None else data["rows"]:
        if "both_ms" not in r:
            continue
        case = f"{r['kind']} {r['sequences']} x {r['tokens']}"
        ratios = [
            (r[f"both{c}_ms"] - r[f"gemms{c}_ms"]) / r[f"attention{c}_ms"]
            for c in ("", "_sustained")
        ]
        out.append((case, ratios[0], ratios[1]))
    return out


def _interference_lines() -> list[str]:
    lines = []
    for folder in _folders():
        ratios = interference_ratios(folder.name)
        if ratios:
            text = ", ".join(f"{case} {b:.2f} / {s:.2f}" for case, b, s in ratios)
            lines.append(
                f"  attention beside the GEMMs {folder.name} (a layer's both - GEMMs over the "
                f"attention alone, burst / sustained): {text}"
            )
    return lines


def _moe_lines(rows: tuple[DeviceRow, ...]) -> list[str]:
    """The eager routing's fit, and the MoE steps by how their routing ran."""
    moe = [r for r in rows if r.group.startswith("training") and r.setup.split()[0] in MOE_MODELS]
    if not moe:
        return []
    eager, compiled = fit_moe_routing_bytes("eager"), fit_moe_routing_bytes("compiled")
    out = [
        f"MoE routing (torchtitan's layer; fitted on {' and '.join(MOE_ROUTING_FIT_MODELS)}): "
        f"eager ops {eager['routed']:.1f} bytes per routed element and {eager['token']:.1f} per "
        f"token x hidden, compiled {compiled['routed']:.1f} per routed element; "
        "engine.moe_routing"
    ]
    for label, chosen in (
        ("eager", [r for r in moe if " eager " in r.setup]),
        ("compiled", [r for r in moe if " eager " not in r.setup]),
    ):
        if chosen:
            med, signed, low, high = group_summary(chosen)
            out.append(
                f"  MoE steps on one GPU, {label}: {len(chosen)} at {med:.1%} ({signed:+.1%}, "
                f"{low:+.1%}..{high:+.1%})"
            )
    return out


# The measured MoE shapes (benchmarks/device/moe_parts.py MOE_TRAIN_CONFIGS).
MOE_MODELS = ("qwen3-30b-a3b-4l", "mixtral-8x7b-2l", "olmoe-1b-7b-8l")


def render_device_section() -> str:
    rows = device_rows()
    lines = [
        "Measured on the lent GPUs (calibration/measured/device; checked, but the H100's grouped "
        "GEMMs, which fit the grouped kernel's streaming cap, and the H200's MoE routing of two "
        "widths, which fits the routing's bytes): predicted / measured - 1",
        f"{'group':<20} {'source':<16} {'role':<7} {'rows':>4} {'median |err|':>12} "
        f"{'signed':>8} {'range':>17}",
    ]
    for group, source, role in sorted({(r.group, r.source, r.role) for r in rows}):
        chosen = [r for r in rows if (r.group, r.source, r.role) == (group, source, role)]
        med, signed, low, high = group_summary(chosen)
        lines.append(
            f"{group:<20} {source:<16} {role:<7} {len(chosen):>4} {med:>12.1%} "
            f"{signed:>+8.1%} {low:>+8.1%}..{high:>+7.1%}"
        )
    keys = sorted({(r.group, r.source) for r in rows})
    lines.append("Parts (device time by kernel category, summed over the rows):")
    for group, source in keys:
        if not (group.startswith("training") or group.endswith("-fused")):
            continue
        chosen = [r for r in rows if (r.group, r.source) == (group, source)]
        totals: dict[str, list[float]] = {}
        for r in chosen:
            for name, measured, predicted in r.parts:
                pair = totals.setdefault(name, [0.0, 0.0])
                pair[0] += measured
                pair[1] += predicted
        text = ", ".join(f"{k} {p / m - 1:+.0%}" for k, (m, p) in totals.items() if m > 0)
        lines.append(f"  {group} {source}: {text}")
    lines.append(
        "training-fwd-bwd: bf16 weights without autocast (compiled: each block and the loss "
        "torch.compile-d; fp8: tensorwise dynamic scaling); forward + backward only (its AdamW ran "
        "on bf16 states, which no framework profile models)."
    )
    lines += _mixed_lines(sorted({r.source for r in rows if r.group == "mixed-fused"}))
    lines += _interference_lines()
    lines += _moe_lines(rows)
    fit = fit_fp8_cast_bytes()
    fit_rows = fp8_cast_fit_rows()
    if fit_rows:
        spread = [fp8_cast_bytes(r, "compiled") for r in fit_rows]
        lines.append(
            f"FP8 scaling casts (fitted, {len(fit_rows)} linear layers at "
            f"{FP8_CAST_FIT_TOKENS} tokens): compiled {fit['compiled']:.2f} bytes/element "
            f"({min(spread):.2f}-{max(spread):.2f}), eager {fit['eager']:.1f}; "
            "engine.step_parts.FP8_CAST_BYTES_PER_ELEMENT"
        )
    lines.append(
        "The decode and prefill rows are a graph of PyTorch's separate kernels (norms, RoPE, "
        "SwiGLU, residual adds) that a serving engine fuses, so they bound the engine's step from "
        "above; the -fused rows (serving_fused, 2026-11-27) run the same steps with those fused "
        "by torch.compile, the GEMMs and SDPA's FlashAttention 2 unchanged: the engine's step "
        "checked on what a serving engine runs (its prompt's attention at FlashAttention 2's "
        "measured rate, the kernel that ran)."
    )
    return "\n".join(lines)


__all__ = ["DeviceRow", "device_rows", "group_summary", "render_device_section"]
