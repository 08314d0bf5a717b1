"""LLM training beside its published points: the ``llm_training`` section of points.yaml and
this package's llm_training_points.yaml (memory figures, layouts that published runs used).

Four constants are fitted, each on a named subset, and every other row is only checked:

- ``LLM_MATMUL_EFFICIENCY`` (E) and ``LLM_GEMM_HALF_DIM`` (K) of the GEMM-shape model on
  :data:`FITTED_MEGATRON` (alternate rows of Megatron-LM SC'21 Table 1; K on
  :data:`HALF_DIM_GRID`, E fitted at each K, the pair with the least RMS log error). Checked:
  the other Table 1 rows and every torchtitan A100 row.
- ``LLM_MATMUL_EFFICIENCY_TPU`` on :data:`FITTED_MAXTEXT` (MaxText 16B on a v5e-256 slice).
  Checked: the other MaxText rows.
- ``ALLOCATOR_OVERHEAD`` on the ``role: fitted`` memory rows (torchtitan's Llama 3.1 8B FSDP
  runs on 8 and 128 H100, eager). Checked: the other torchtitan memory rows.

:func:`derive_llm_constants` recomputes them from the points (a test keeps the values in
engine.llm_training and engine.llm_memory equal to it); :func:`llm_report` gives one row per
published figure; ``ringmaster calibrate`` prints :func:`render_llm_section` after its own table.
:func:`published_layout_search` plans each published layout (a test asserts every one fits).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ringmaster.calibration.points import read_yaml
from ringmaster.engine import llm_training as L
from ringmaster.engine import recompute as R
from ringmaster.engine.efficiency import NIC_EFFICIENCY
from ringmaster.engine.frameworks import framework as framework_profile
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.jax_runtime import jax_hardware
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    RECOMPUTES,
    RING,
    SHARD_FULL,
    SHARD_NONE,
    SHARDINGS,
)
from ringmaster.engine.llm_layout_search import Layout, LayoutRequest, LayoutSearch, search_layouts
from ringmaster.engine.llm_memory import (
    ALLOCATOR_OVERHEAD,
    FRAMEWORK_RESERVE_BYTES,
    memory_per_accelerator,
    weight_bytes,
)
from ringmaster.engine.recompute import remat_percent
from ringmaster.engine.training import _wrapped as tpu_wrapped_axes
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer
from ringmaster.engine.units import GB, GIB, gbps_to_bytes_per_second

# Rows whose published figure sets a constant; every other row is a check.
# Alternate rows of Table 1 across its range of widths (h / t from 1,024 to 2,560), so the
# checked rows interleave with them.
FITTED_MEGATRON = (1.7, 7.5, 39.1, 145.6, 529.6)  # params_billion
FITTED_MAXTEXT = (16,)  # params_billion

# A row is "ok" within this error: the 14% that the engine's one compute constant leaves between
# its own fitted points (engine.efficiency.COMPUTE_EFFICIENCY), rounded up.
TOLERANCE = 0.15

# Megatron-LM SC'21 setup (Narayanan et al., section 5): Selene DGX A100 80 GB nodes, 8 GPUs on
# NVSwitch, 8 x 200 Gbps HDR InfiniBand per node; GPT with vocabulary 51,200 and sequence 2,048;
# activation recomputation in every run (their FLOPs formula, eq. 3, counts it: 96 B s l h^2).
SELENE_NIC_GBPS = 8 * 200
MEGATRON_VOCAB = 51200
MEGATRON_SEQUENCE = 2048
# The interleaved schedule of Table 1's pipelined runs: --num-layers-per-virtual-pipeline-stage
# in Megatron-LM's examples/sc21/run_table_1.sh (the 39B and 1T runs are not interleaved).
MEGATRON_LAYERS_PER_VIRTUAL_STAGE = {76.1: 5, 145.6: 5, 310.1: 3, 529.6: 1}
# torchtitan's A100 table names no network: assumed a DGX-A100-class cluster like Selene.
TORCHTITAN_NIC_GBPS = SELENE_NIC_GBPS
TORCHTITAN_MODELS = {
    "llama3-8b": KNOWN_TRANSFORMERS["llama-3-8b"],
    "llama3-70b": KNOWN_TRANSFORMERS["llama-3-70b"],
    "llama2-13b": KNOWN_TRANSFORMERS["llama-2-13b"],
    "llama2-70b": KNOWN_TRANSFORMERS["llama-2-70b"],
}


def maxtext_scales(params_billion: int) -> tuple[int, int, int, int]:
    """(emb, heads, mlp, layers) of MaxText's ``global_parameter_scale`` model: base.yml's emb
    2048, 16 heads of 128, MLP 7168 and 16 layers, each doubled in turn as the scale doubles
    (MaxText/pyconfig.py get_individual_scales: of log2(scale) = 3 b + r, heads and MLP double
    b + (r > 0) times, emb b + (r > 1), layers b)."""
    if params_billion < 1 or params_billion & (params_billion - 1):
        raise ValueError(f"global_parameter_scale {params_billion}: a power of 2")
    base, rem = divmod(params_billion.bit_length() - 1, 3)
    wide = base + int(rem > 0)
    return 2048 << (base + int(rem > 1)), 16 << wide, 7168 << wide, 16 << base


def maxtext_model(params_billion: int) -> Transformer:
    """MaxText's ``global_parameter_scale`` models (:func:`maxtext_scales`, gated SiLU,
    vocabulary 32,000). Where MaxText's attention is wider (heads x 128) than the model
    width (scales 16, 128 and 1024: twice), engine.transformer ties them, so the surplus
    attention weights are moved into the FFN: the same parameters and matmul FLOPs,
    attention-core FLOPs counted at the model width (a 3% under-count of the step's FLOPs at
    16B)."""
    emb, heads, mlp, layers = maxtext_scales(params_billion)
    width = heads * 128
    surplus = 4 * emb * width - 4 * emb * emb  # Q, K, V, O at the attention width
    return Transformer(
        layers=layers,
        hidden=emb,
        heads=emb // 128,
        vocab=32000,
        sequence_length=2048,
        ffn_hidden=mlp + surplus // (3 * emb),
        gated_ffn=True,
    )


# llm-foundry's MPT models (scripts/train/yamls/pretrain/mpt-<size>.yaml at b2a43a147, the commit
# of its H100 tables): (d_model, n_heads, n_layers); every one has expansion_ratio 4 (a GELU FFN of
# 4 d_model), vocabulary 50,368, the LM head tied to the embedding, and learned positions
# (learned_pos_emb: max_seq_len x d_model more weights, which the engine does not count: at most
# 10% of the 1b's at 65,536 tokens, a lookup with no FLOPs).
MPT_SHAPES = {
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
    "70b": (8192, 64, 80),
}
MPT_VOCAB = 50368


def mpt_model(size: str, seq: int) -> Transformer:
    d_model, heads, layers = MPT_SHAPES[size]
    return mpt_transformer(d_model, heads, layers, MPT_VOCAB, seq)


def mpt_transformer(d_model: int, heads: int, layers: int, vocab: int, seq: int) -> Transformer:
    """llm-foundry's MPT: GELU FFN of 4 x d_model, learned positions, the head tied."""
    return Transformer(layers, d_model, heads, vocab, seq, tied_embeddings=True)


@dataclass(frozen=True)
class LlmRow:
    id: str
    setup: str
    quantity: str
    published: float
    predicted: float
    role: str  # "fitted" or "checked"

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published

    @property
    def ok(self) -> bool:
        return abs(self.error) <= TOLERANCE


def _gpu(
    acc: str,
    gpus: int,
    nic_gbps: float,
    fit: float,
    framework: str,
    recompute_stops_early: bool | None = None,
) -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host(acc, 8)
    profile = framework_profile(framework, recompute_stops_early=recompute_stops_early)
    hw = L.layout_hardware(host, gpus // 8, DEFAULT_CATALOG, framework=profile)
    return replace(
        hw, nic_bandwidth=gbps_to_bytes_per_second(nic_gbps) * NIC_EFFICIENCY, step_fit=fit
    )


def _tpu_v5e_256(fit: float) -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host("tpu-v5-lite-podslice", 4)
    hw = L.layout_hardware(
        host, 64, DEFAULT_CATALOG, slice_axes=(16, 16, 1), wrapped=(True, True, False)
    )
    # configs/v5e/{16b,32b,64b,128b}.sh run use_iota_embed=true (as every MaxText script the
    # points name: maxtext @ 76bd53b0f)
    return replace(hw, step_fit=fit, iota_embed=True)


def _one(model: Transformer, hw: L.LayoutHardware, **layout: Any) -> L.LayoutArrays:
    global_batch = layout.pop("global_batch")
    return L.evaluate_layouts(model, hw, global_batch=global_batch, **layout)


def _megatron(points: Mapping[str, Any], fit: float) -> list[tuple[float, float, float]]:
    """(params_billion, published, predicted TFLOP/s per GPU) per Table 1 row; predicted counts
    FLOPs as the paper does (model FLOPs + full recompute)."""
    point = point_by_id(points, "megatron-sc21-table1")
    out = []
    for values in point["rows"]:
        r = dict(zip(point["columns"], values, strict=True))
        model = Transformer(
            int(r["layers"]), int(r["hidden"]), int(r["heads"]), MEGATRON_VOCAB, MEGATRON_SEQUENCE
        )
        hw = _gpu("nvidia-a100-80gb", int(r["gpus"]), SELENE_NIC_GBPS, fit, "Megatron")
        size = float(r["params_billion"])
        virtual = 1
        if size in MEGATRON_LAYERS_PER_VIRTUAL_STAGE:
            virtual = int(r["layers"]) // int(r["pp"]) // MEGATRON_LAYERS_PER_VIRTUAL_STAGE[size]
        a = _one(
            model,
            hw,
            virtual_stages=virtual,
            tensor=int(r["tp"]),
            pipeline=int(r["pp"]),
            sharding=SHARD_NONE,
            micro_batch=int(r["micro_batch"]),
            recompute=RECOMPUTE_FULL,
            global_batch=int(r["global_batch"]),
            strategy=RING,
            flash_attention=False,  # 2021: attention scores materialised (FlashAttention: 2022)
            sequence_parallel=False,  # 2021: norms and dropouts whole on every TP rank (SP: 2022)
        )
        flops = float(R.hardware_flops_per_token(model, RECOMPUTE_FULL))
        predicted = flops * float(a.tokens_per_second) / int(r["gpus"]) / 1e12
        out.append((float(r["params_billion"]), float(r["tflops_per_gpu"]), predicted))
    return out


_RECOMPUTE = {
    "none": RECOMPUTE_NONE,
    "selective": RECOMPUTE_SELECTIVE,
    "full": RECOMPUTE_FULL,
}


def _torchtitan(points: Mapping[str, Any], fit: float) -> list[tuple[str, float, float]]:
    """(model, published MFU, predicted MFU) on 64 x A100-80GB with FSDP full sharding. The
    table (docs/performance.md, April 2024) predates torchtitan's early_stop switch (#1580,
    2025-08-29, off by default): its full AC ran PyTorch's default, recompute stopping early."""
    out = []
    for r in point_by_id(points, "torchtitan-a100-fsdp")["rows"]:
        model = replace(TORCHTITAN_MODELS[r["model"]], sequence_length=int(r["seq"]))
        hw = _gpu("nvidia-a100-80gb", 64, TORCHTITAN_NIC_GBPS, fit, "Torchtitan", True)
        b = int(r["local_batch"])
        a = _one(
            model,
            hw,
            tensor=1,
            pipeline=1,
            sharding=SHARD_FULL,
            micro_batch=b,
            recompute=_RECOMPUTE[r["activation_checkpointing"]],
            global_batch=64 * b,
            strategy=RING,
        )
        out.append((str(r["model"]), float(r["mfu"]), float(a.mfu)))
    return out


def _maxtext(points: Mapping[str, Any], fit: float) -> list[tuple[float, float, float]]:
    """(params_billion, published MFU, predicted MFU) on one v5e-256 slice, FSDP over all
    chips, full rematerialisation; the 128B row runs tensor 16 x FSDP 16. Every row ran
    ``remat_policy=full``: the README's table was published at maxtext 76bd53b0f (2023-12-15)
    with configs/v5e/{16b,32b,64b,128b}.sh all at full, and has not changed since; 128b.sh moved
    to minimal_offloaded in 125139c29 (2024-02-23, "up from 106 TFLOP/s"), after the table."""
    out = []
    for r in point_by_id(points, "maxtext-v5e")["rows"]:
        size = int(r["params_billion"])
        model = maxtext_model(size)
        tensor = 16 if size == 128 else 1
        b = int(r["per_device_batch"])
        a = _one(
            model,
            _tpu_v5e_256(fit),
            tensor=tensor,
            pipeline=1,
            sharding=SHARD_FULL,
            micro_batch=b * tensor,
            recompute=RECOMPUTE_FULL,
            global_batch=256 * b,
        )
        out.append((float(size), float(r["mfu"]), float(a.mfu)))
    return out


# The v5p slices of MaxText's scale table: chips -> the slice's axes (v5p-128 is 4x4x4).
V5P_SLICE_AXES = {
    64: (4, 4, 4),
    128: (4, 4, 8),
    256: (4, 8, 8),
    512: (8, 8, 8),
    1024: (8, 8, 16),
    2048: (8, 16, 16),
}


def maxtext_v5p(fit: float | None = None) -> list[tuple[str, float, float, float]]:
    """(row label, published MFU, predicted MFU, XLA's rematerialised share) of MaxText's v5p
    scale table (llm_training_points.yaml ``maxtext_v5p``): one slice, FSDP over the chips that
    the tensor degree leaves, the config's micro-batch and remat policy, under MaxText (XLA
    recomputes what a policy would keep beyond the chip)."""
    host = DEFAULT_CATALOG.host("tpu-v5p-slice", 4)
    out = []
    for size, chips, batch, tensor, recompute, mfu in training_points()["maxtext_v5p"]["rows"]:
        axes = V5P_SLICE_AXES[int(chips)]
        hw = L.layout_hardware(
            host,
            int(chips) // host.count,
            DEFAULT_CATALOG,
            slice_axes=axes,
            wrapped=tpu_wrapped_axes(host.accelerator, axes),
            framework=framework_profile("MaxText"),
        )
        hw = replace(hw, iota_embed=True)  # configs/v5p/<size>b.sh: use_iota_embed=true
        if fit is not None:
            hw = replace(hw, step_fit=fit)
        a = _one(
            maxtext_model(int(size)),
            hw,
            tensor=int(tensor),
            pipeline=1,
            sharding=SHARD_FULL,
            micro_batch=int(batch) * int(tensor),
            recompute=RECOMPUTES.index(str(recompute)),
            global_batch=int(chips) * int(batch),
        )
        label = f"{size}B on {chips} chips, {recompute}"
        predicted, remat = (float(x) for x in (a.mfu, a.compiler_remat))
        out.append((label, float(mfu), predicted, remat))
    return out


def point_by_id(points: Mapping[str, Any], pid: str) -> dict[str, Any]:
    for point in points.get("llm_training") or []:
        if point.get("id") == pid:
            return dict(point)
    raise KeyError(f"llm_training point {pid!r}")


def _fit(ratio: Callable[[float], float], ceiling: float = 1.0) -> float:
    """The factor at which the geometric mean of predicted / published is 1: predicted
    throughput grows with the factor, nearly in proportion (sub-linearly where other parts of
    the step or communication bind), so e <- e / ratio(e) converges in a few steps."""
    e = 0.5
    for _ in range(30):
        r = ratio(e)
        if abs(r - 1.0) < 1e-7:
            break
        e = min(e / r, ceiling)
    return round(e, 3)


def _geomean(pairs: Sequence[tuple[float, float]]) -> float:
    return math.exp(statistics.fmean(math.log(p / q) for q, p in pairs))


# A step fit is a factor on the chip's GEMM rate; the H100-carried fractions are below the
# A100's own, so it may exceed 1, never its datasheet peak over the carried fraction.
STEP_FIT_CEILING = 1.0 / 0.7


def fit_ampere_step(points: Mapping[str, Any]) -> float:
    """GEMM_STEP_FIT["ampere"]: Megatron-LM SC'21's fitted Table 1 rows, the rest of the step
    composed from the ceilings (Megatron's fused kernels, materialised attention scores)."""

    def ratio(e: float) -> float:
        return _geomean(
            [(pub, pred) for size, pub, pred in _megatron(points, e) if size in FITTED_MEGATRON]
        )

    return _fit(ratio, STEP_FIT_CEILING)


def derive_llm_constants(points: Mapping[str, Any]) -> dict[str, Any]:
    """GEMM_STEP_FIT (Ampere, TPU), ALLOCATOR_OVERHEAD and TRITON_FLASH_ATTENTION_RATIO from their
    fitted rows."""

    def tpu(e: float) -> float:
        rows = [(pub, pred) for k, pub, pred in _maxtext(points, e) if k in FITTED_MAXTEXT]
        return _geomean(rows)

    return {
        "GEMM_STEP_FIT": {"ampere": fit_ampere_step(points), "tpu": _fit(tpu, STEP_FIT_CEILING)},
        "ALLOCATOR_OVERHEAD": _fit_overhead(training_points()["memory"]),
        "TRITON_FLASH_ATTENTION_RATIO": fit_triton_attention(),
    }


def llm_report(points: Mapping[str, Any]) -> list[LlmRow]:
    """Every llm_training row: published, predicted with the engine's constants, fitted or not."""
    rows = []
    for size, pub, pred in _megatron(points, L.GEMM_STEP_FIT["ampere"]):
        rows.append(
            LlmRow(
                "megatron-sc21-table1",
                f"GPT {size:g}B",
                "TFLOP/s per GPU",
                pub,
                pred,
                "fitted" if size in FITTED_MEGATRON else "checked",
            )
        )
    for name, pub, pred in _torchtitan(points, L.GEMM_STEP_FIT["ampere"]):
        rows.append(LlmRow("torchtitan-a100-fsdp", name, "MFU", pub, pred, "checked"))
    for size, pub, pred in _maxtext(points, L.GEMM_STEP_FIT["tpu"]):
        role = "fitted" if size in FITTED_MAXTEXT else "checked"
        rows.append(LlmRow("maxtext-v5e", f"{size:g}B", "MFU", pub, pred, role))
    for label, pub, pred, remat in maxtext_v5p():
        setup = f"{label} + XLA remat {remat_percent(remat)} %" if remat > 0 else label
        rows.append(LlmRow("maxtext-v5p", setup, "MFU", pub, pred, "checked"))
    rows.extend(memory_report())
    rows.extend(throughput_report())
    return rows


def _figure(x: float) -> str:
    """Four significant digits; thousands with separators (16,934 rather than 1.693e+04)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def render_llm_section(points: Mapping[str, Any], where: object = "the points file") -> str:
    """The LLM training table for ``ringmaster calibrate``."""
    if not points.get("llm_training"):
        return f"LLM training: {where} has no llm_training section (see ../shared/calibration)"
    rows = llm_report(points)
    header = ("point", "setup", "quantity", "published", "predicted", "error", "role", "")
    body = [
        (
            r.id,
            r.setup,
            r.quantity,
            _figure(r.published),
            _figure(r.predicted),
            f"{r.error:+.1%}",
            r.role,
            "ok" if r.ok else "OUT",
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    lines = ["LLM training (fitted rows set a constant; checked rows only compare):"]
    for line in [header, *body]:
        cells = [
            c.rjust(w) if i in (3, 4, 5) else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    checked = [r for r in rows if r.role == "checked"]
    bad = sum(not r.ok for r in checked)
    lines.append(
        f"{len(checked) - bad} of {len(checked)} checked rows within {TOLERANCE:.0%}; "
        f"mean |error| of checked rows {statistics.fmean(abs(r.error) for r in checked):.1%}"
    )
    return "\n".join(lines)


# --- memory per GPU as frameworks report it ----------------------------------------------------

LLM_TRAINING_POINTS = Path(__file__).resolve().parent / "llm_training_points.yaml"
MEMORY_MODELS = {
    "llama-3.1-8b": KNOWN_TRANSFORMERS["llama-3.1-8b"],
    "llama-3.1-70b": KNOWN_TRANSFORMERS["llama-3.1-70b"],
    "llama-3.1-405b": KNOWN_TRANSFORMERS["llama-3.1-405b"],
}


def training_points(path: Path = LLM_TRAINING_POINTS) -> dict[str, Any]:
    """The package's own LLM training points (memory figures, layouts that ran)."""
    data = read_yaml(path)
    return dict(data or {})


# torchtitan's FSDP2: fp32 parameters, a bf16 copy kept only where it keeps them gathered.
TORCHTITAN = framework_profile("Torchtitan")


def _memory_predicted(row: Mapping[str, Any], overhead: float) -> float:
    """GiB the caching allocator holds at peak for a torchtitan memory row: the engine's total
    less the runtime outside the allocator (FRAMEWORK_RESERVE_BYTES)."""
    model = replace(MEMORY_MODELS[str(row["model"])], sequence_length=int(row["seq"]))
    t, p, c = int(row["tensor"]), int(row["pipeline"]), int(row["context"])
    d = int(row["gpus"]) // (t * p * c)
    local = int(row["local_batch"])
    micro = 1 if p > 1 else local  # torchtitan's pipeline micro-batch is 1 sequence
    sharding = SHARDINGS.index(str(row.get("sharding", "Full")))
    mem = memory_per_accelerator(
        model,
        tensor=t,
        pipeline=p,
        data=d,
        sharding=sharding,
        micro_batch=micro,
        micro_batches=local // micro,
        recompute=RECOMPUTES.index(str(row["recompute"])),
        context=c,
        allocator_overhead=overhead,
        bf16_weight_bytes=weight_bytes(TORCHTITAN, sharding),
    )
    return (float(mem.total) - FRAMEWORK_RESERVE_BYTES) / GIB


def _fit_overhead(rows: Sequence[Mapping[str, Any]]) -> float:
    """ALLOCATOR_OVERHEAD at which the fitted rows' geometric-mean ratio is 1 (bisection)."""
    fitted = [r for r in rows if r["role"] == "fitted"]
    lo, hi = 0.0, 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _geomean([(float(r["gib"]), _memory_predicted(r, mid)) for r in fitted]) < 1.0:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 3)


def memory_report(points: Mapping[str, Any] | None = None) -> list[LlmRow]:
    """Every memory row: published GiB beside the engine's, fitted or checked."""
    rows = (points or training_points())["memory"]
    out = []
    for r in rows:
        notes = [k for k in ("compile", "float8") if r.get(k)]
        setup = (
            f"{r['model']} {r['gpus']} GPUs TP{r['tensor']} CP{r['context']} PP{r['pipeline']}"
            f" s{r['seq']} b{r['local_batch']} {r['recompute']}"
            + (f" ({'+'.join(notes)})" if notes else "")
        )
        predicted = _memory_predicted(r, ALLOCATOR_OVERHEAD)
        out.append(
            LlmRow(str(r["id"]), setup, "GiB per GPU", float(r["gib"]), predicted, str(r["role"]))
        )
    return out


# --- layouts that published runs used ----------------------------------------------------------


def _layout_model(row: Mapping[str, Any]) -> Transformer:
    spec = row["model"]
    seq = int(row["seq"])
    if isinstance(spec, Mapping):  # a shape the catalog does not name (ChatGLM3-6B)
        return Transformer(
            int(spec["layers"]),
            int(spec["hidden"]),
            int(spec["heads"]),
            int(spec["vocab"]),
            seq,
            kv_heads=int(spec.get("kv_heads", 0)),
            ffn_hidden=int(spec.get("ffn_hidden", 0)),
            gated_ffn=bool(spec.get("gated_ffn", False)),
        )
    name = str(spec)
    if name.startswith("mpt-"):
        return mpt_model(name.removeprefix("mpt-"), seq)
    if name.startswith("maxtext-"):
        return replace(
            maxtext_model(int(name.removeprefix("maxtext-").removesuffix("b"))), sequence_length=seq
        )
    return replace(KNOWN_TRANSFORMERS[name], sequence_length=seq)


# NVIDIA DGX H100: 8 x 400 Gbps InfiniBand (ConnectX-7) per host, the NeMo rows' system.
DGX_H100_NIC_GBPS = 8 * 400


def published_nic_gbps(row: Mapping[str, Any]) -> float | None:
    """A published run's NIC bandwidth per host: its ``nic_gbps`` key, else a DGX H100's; None
    where the row names its machine type (``machine``: the catalog's NICs and transport)."""
    if "machine" in row and "nic_gbps" not in row:
        return None
    return float(row.get("nic_gbps", DGX_H100_NIC_GBPS))


def published_framework(row: Mapping[str, Any]) -> str:
    """The framework a published run used: its ``framework`` key, else its source's (NeMo and
    Megatron-LM rows, Meta's Llama 3 run on its Megatron-style stack: Megatron; torchtitan;
    MaxText)."""
    if "framework" in row:
        return str(row["framework"])
    pid = str(row["id"])
    for prefix, name in (("torchtitan", "Torchtitan"), ("maxtext", "MaxText")):
        if pid.startswith(prefix):
            return name
    return "Megatron"


def published_layout_search(
    row: Mapping[str, Any], nic_gbps: float | None = None, step_fit: float | None = None
) -> LayoutSearch:
    """The search with every field the published run fixed (recompute ``Auto`` where the source
    names none), on the run's accelerators (with ``nic_gbps`` per host where given); ``step_fit``
    in place of the chip's fitted GEMM step fit (the leave-one-source-out refit)."""
    per_host = int(row.get("per_host", 8))
    machine = row.get("machine")
    host = DEFAULT_CATALOG.host(str(row["accelerator"]), per_host, machine and str(machine))
    if "nvlink_gbps" in row:  # the export parts' NVLink (A800, H800): the same chip, fewer links
        acc = replace(host.accelerator, intra_bandwidth=float(row["nvlink_gbps"]) * GB)
        host = replace(host, accelerator=acc)
    hosts = int(row["gpus"]) // per_host
    axes = None
    wrapped = (False, False, False)
    if host.accelerator.kind == "tpu" and "topology" in row:  # the slice the run names: 16x16
        dims = [int(x) for x in str(row["topology"]).split("x")] + [1, 1]
        axes = (dims[0], dims[1], dims[2])
        wrapped = tpu_wrapped_axes(host.accelerator, axes)
    elif host.accelerator.kind == "tpu":
        side = round(int(row["gpus"]) ** (1 / 3))
        axes = (side, side, int(row["gpus"]) // (side * side))
    hw = L.layout_hardware(
        host,
        hosts,
        DEFAULT_CATALOG,
        slice_axes=axes,
        wrapped=wrapped,
        compute_precision=str(row["precision"]),
        framework=framework_profile(
            published_framework(row),
            compiled=bool(row.get("compile", False)),
            attention=row.get("attention"),
            recompute_stops_early=row.get("recompute_stops_early"),
        ),
    )
    if nic_gbps is not None:
        hw = replace(hw, nic_bandwidth=gbps_to_bytes_per_second(nic_gbps) * NIC_EFFICIENCY)
    if step_fit is not None:
        hw = replace(hw, step_fit=step_fit)
    if row.get("tensor_overlap"):  # the run's recipe overlaps its TP collectives
        hw = replace(hw, tensor_overlap=True)
    if row.get("overlap_grad_reduce") is False:  # Megatron-LM without --overlap-grad-reduce
        hw = replace(hw, overlaps_gradient_reduction=False)
    if "data_replicas" in row:  # hybrid sharding: MaxText's dcn_data_parallelism over GPU hosts
        hw = replace(hw, data_replicas=int(row["data_replicas"]))
    if row.get("offload_layer_inputs"):  # MaxText's custom remat: decoder_layer_input offloaded
        hw = replace(hw, offload_layer_inputs=True)
    if "vocab_tiling" in row:  # MaxText's num_vocab_tiling
        hw = replace(hw, vocab_tiles=int(row["vocab_tiling"]))
    if row.get("iota_embed"):  # MaxText's use_iota_embed: the lookup as a one-hot matmul
        hw = replace(hw, iota_embed=True)
    if row.get("parameter_dtype") == "bf16":  # MaxText's weight_dtype bfloat16: no fp32 copy
        hw = replace(hw, parameter_dtype="bf16", optimizer_moments="bf16", gradient_bytes=2.0)
    hw, _ = jax_hardware(hw, {str(k): str(v) for k, v in (row.get("env") or {}).items()})
    # An NVLink domain of several hosts (GB200 NVL72) is one NCCL node, as a job's plan has it.
    hw, _ = L.on_nvlink_domain(hw, host.machine)
    recompute = str(row["recompute"])
    request = LayoutRequest(
        model=_layout_model(row),
        global_batch=int(row["global_batch"]),
        tensor=int(row["tensor"]),
        pipeline=int(row["pipeline"]),
        context=int(row["context"]),
        sharding=str(row["sharding"]),
        micro_batch=int(row["micro_batch"]),
        recompute=None if recompute == "Auto" else recompute,
        recompute_layers=row.get("recompute_layers"),
        offload_layers=row.get("offload_layers"),
        virtual_stages=int(row["virtual"]),
        strategy=RING,
    )
    return search_layouts(request, hw)


def _model_label(row: Mapping[str, Any]) -> str:
    spec = row["model"]
    return str(spec["name"]) if isinstance(spec, Mapping) else str(spec)


FLAGPERF_A800 = "flagperf-mcore-a800"


def flagperf_a800(_: Mapping[str, Any], fit: float) -> list[tuple[str, float, float]]:
    """(row, published, predicted tokens/s per GPU) of FlagPerf's Megatron-Core runs on the A800
    (the A100's chip; llm_training_points.yaml), at GEMM step fit ``fit``: a checked source of
    GEMM_STEP_FIT["ampere"]."""
    out = []
    for r in training_points()["published_layouts"]:
        if str(r["id"]).startswith(FLAGPERF_A800):
            chosen = published_layout_search(r, published_nic_gbps(r), step_fit=fit).chosen
            published = float(r["tokens_per_s_per_gpu"])
            out.append((str(r["id"]), published, chosen.tokens_per_second / int(r["gpus"])))
    return out


def _offload(layout: Layout) -> str:
    return f", {layout.offload_layers} layers offloaded" if layout.offload_layers else ""


def throughput_report(points: Mapping[str, Any] | None = None) -> list[LlmRow]:
    """The published layouts with a published throughput (NeMo on DGX H100, FP8): checked
    only; no constant is fitted on FP8 (E and K come from bf16 A100 rows)."""
    out = []
    for r in (points or training_points())["published_layouts"]:
        if "tokens_per_s_per_gpu" not in r:
            continue
        chosen = published_layout_search(r, published_nic_gbps(r)).chosen
        setup = (
            f"{_model_label(r)} s{r['seq']} {r['gpus']} GPUs TP{r['tensor']} CP{r['context']}"
            f" PP{r['pipeline']} {r['precision']} ({chosen.recompute_policy}{_offload(chosen)})"
        )
        predicted = chosen.tokens_per_second / int(r["gpus"])
        published = float(r["tokens_per_s_per_gpu"])
        role = str(r.get("role", "checked"))
        out.append(LlmRow(str(r["id"]), setup, "tokens/s per GPU", published, predicted, role))
    return out


def foundry_rows(points: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """llm-foundry's published MPT runs (published_layouts with framework LLMFoundry)."""
    rows = (points or training_points())["published_layouts"]
    return [dict(r) for r in rows if r.get("framework") == "LLMFoundry"]


def _foundry_ratio(rows: Sequence[Mapping[str, Any]], triton: float) -> float:
    """Geometric mean of predicted / published over ``rows`` with Triton's attention at
    ``triton`` of FlashAttention 2's rate."""
    from ringmaster.engine import ceilings as CE

    saved = CE.TRITON_FLASH_ATTENTION_RATIO
    CE.TRITON_FLASH_ATTENTION_RATIO = triton
    try:
        pairs = []
        for r in rows:
            chosen = published_layout_search(r, published_nic_gbps(r)).chosen
            pairs.append((float(r["tokens_per_s_per_gpu"]), chosen.tokens_per_second / r["gpus"]))
        return _geomean(pairs)
    finally:
        CE.TRITON_FLASH_ATTENTION_RATIO = saved


def fit_triton_attention(points: Mapping[str, Any] | None = None) -> float:
    """TRITON_FLASH_ATTENTION_RATIO: the rate, as a fraction of FlashAttention 2's, at which the
    fitted llm-foundry rows (role: fitted, its A100-80GB table) are predicted at a geometric-mean
    ratio of 1, every other part of their steps composed as for any job. Bisection: the
    predicted throughput rises with the attention's rate."""
    rows = [r for r in foundry_rows(points) if r.get("role") == "fitted"]
    lo, hi = 0.2, 1.5
    for _ in range(16):  # the bracket to 2e-5, under the 3 decimals kept
        mid = 0.5 * (lo + hi)
        if _foundry_ratio(rows, mid) > 1.0:
            hi = mid
        else:
            lo = mid
    return round(0.5 * (lo + hi), 3)


def training_points_for_report() -> dict[str, Any]:
    """The packaged points (the copy that ships with the operator): what evidence rests on."""
    from ringmaster.calibration.points import PACKAGED_POINTS, load_points

    return load_points(PACKAGED_POINTS)
