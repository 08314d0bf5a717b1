"""NVIDIA AIConfigurator's operator databases: the ceilings checked per chip and serving engine,
and the decode terms of the chips the team never measured.

``calibration/measured/aiconfigurator.json`` is a subset of the per-operator databases that
AIConfigurator (ai-dynamo/aiconfigurator, Apache-2.0) ships for each GPU, serving engine and
engine version, at the commit the file names: GEMMs at decode and prefill batches (bf16, fp8),
decode attention by batch and context (bf16 and FP8 caches), prefill attention by length, the
engines' all-reduce and their fused MoE ops (fitted in calibration.aic_moe), for the A100, H100,
H200, B200 and GB200 under vLLM, SGLang and TensorRT-LLM
(``benchmarks/aiconfigurator/extract.py`` writes it from the parquet tables).

Three uses, kept apart:

- **Fitted**: the decode step's terms of the chips with no measurement of the team's own (the
  A100, B200, GB200). The bf16 decode GEMMs' (f_w, floor, E_d) and the decode attention's (f_kv,
  floor) are fitted on the chip's vLLM table and on the H100's table of the same vLLM version,
  the way the H100's own terms are fitted on its file, and the chip's terms are the H100's
  measured ones times the chip-over-H100 ratio: one collector, one engine build, so the ratio
  holds what the absolute figures may not (AIConfigurator times with CUDA graphs over many
  calls, which reads lower floors than the team's measurement; its H100 decode attention is
  vLLM's FlashAttention 3, the team's FlashAttention 2). The H200, which has a measurement of
  its own, checks the method (``ratio_check``).
- **Fitted, per serving engine**: each engine's tensor-parallel all-reduce
  (``derive_engine_allreduce``, engine.tp_allreduce), its FP8 GEMMs at decode batches over its
  own bf16 ones (``derive_engine_fp8_decode``) and its decode attention per KV-cache dtype
  (``derive_engine_decode_attention``, both engine.serving_engines); the H100's vLLM 0.14.0
  tables, not fitted, check the 0.19.0 fits.
- **Checked**: every chip's ceilings against every table (``check_rows``): the H100's fitted
  model against a second lab's H100, the H200's lent-GPU terms against a second H200, and the
  published ratios that carry the A100, B200 and GB200.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from ringmaster.calibration.ceilings import _fit_decode_attention_terms, _fit_decode_gemm_terms
from ringmaster.engine import ceilings as CE
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.serving_engines import (
    ENGINE_DECODE_ATTENTION,
    ENGINE_GEMM_RATE,
    SERVED_FP4_GEMM_RATE,
)
from ringmaster.engine.tp_allreduce import MIB, engine_allreduce_seconds, nccl_tp_allreduce_seconds

AIC_FILE = Path(__file__).with_name("measured") / "aiconfigurator.json"
DECODE_MAX_M = 512  # the GEMM rows at decode batches; larger ones are prefill's
PREFILL_MIN_M = 2048
# A weight's bytes per GEMM dtype (NVFP4: 4 bits and one E4M3 scale per 16)
GEMM_WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16.0}
FIT_ENGINE = "vllm"
# The H100 table each chip's vLLM table is paired with (the same vLLM version).
PAIR_VERSION = {
    "nvidia-a100-80gb": "0.14.0",
    "nvidia-b200": "0.19.0",
    "nvidia-gb200": "0.19.0",
    "nvidia-h200-141gb": "0.19.0",
}
FITTED_CHIPS = ("nvidia-a100-80gb", "nvidia-b200", "nvidia-gb200")
H100 = "nvidia-h100-80gb"


@dataclass(frozen=True)
class AicTable:
    """One system x engine x version's rows (arrays, seconds)."""

    system: str
    accelerator: str
    engine: str
    version: str
    gemm_dtype: np.ndarray
    gemm_mnk: np.ndarray  # (rows, 3)
    gemm_seconds: np.ndarray
    decode_kernel: np.ndarray
    decode: np.ndarray  # batch, context, heads, kv_heads, head_dim
    decode_seconds: np.ndarray
    prefill_kernel: np.ndarray
    prefill: np.ndarray  # batch, length, heads, kv_heads, head_dim
    prefill_seconds: np.ndarray
    allreduce: np.ndarray  # (rows, 2): GPUs, bytes (bf16 elements x 2)
    allreduce_seconds: np.ndarray
    # decode attention over an FP8 (e4m3) KV cache: batch, context, heads, kv_heads, head_dim
    decode_fp8: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    decode_fp8_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rejected: tuple[tuple[str, int], ...] = ()  # (op, rows) faster than the datasheet allows
    # the engine version whose dynamic-scale cost was taken off the FP8 GEMMs (static_fp8_gemms)
    compute_scale_version: str | None = None

    @property
    def label(self) -> str:
        return f"{self.system} {self.engine} {self.version}"


@lru_cache(maxsize=1)
def aic_data() -> dict[str, Any]:
    """calibration/measured/aiconfigurator.json, parsed once."""
    data: dict[str, Any] = json.loads(AIC_FILE.read_text())
    return data


def source() -> str:
    return str(aic_data()["source"])


def _split(rows: list[list[Any]], text_columns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not rows:
        return np.array([], str), np.zeros((0, 5)), np.array([], float)
    labels = np.array([r[0] for r in rows], str) if text_columns else np.array([], str)
    values = np.array([r[text_columns:-1] for r in rows], float)
    return labels, values, np.array([r[-1] * 1e-6 for r in rows], float)


def _possible(t: AicTable) -> AicTable:
    """``t`` without the rows that beat the chip's datasheet (a GEMM above its dense peak, a
    prefill attention above the 16-bit peak, a decode attention above the HBM): a collector's
    fault, not a measurement (the H200's vLLM 0.19.0 prefill attention runs at 1.7-13x the
    peak). Counted in ``rejected`` and shown."""
    acc = DEFAULT_CATALOG.accelerator(t.accelerator)
    m, n, k = t.gemm_mnk.T
    peak = np.array([acc.peak(d) if acc.supports(d) else np.inf for d in t.gemm_dtype])
    gemm = 2.0 * m * n * k / t.gemm_seconds <= peak
    decode = _kv_bytes(t.decode) / t.decode_seconds <= acc.memory_bandwidth
    decode_fp8 = _kv_bytes(t.decode_fp8, 1.0) / t.decode_fp8_seconds <= acc.memory_bandwidth
    prefill = _prefill_flops(t.prefill) / t.prefill_seconds <= acc.peak("bf16")
    rejected = tuple(
        (op, int((~keep).sum()))
        for op, keep in (
            ("GEMM", gemm),
            ("decode attention", decode),
            ("decode attention fp8 KV", decode_fp8),
            ("prefill attention", prefill),
        )
        if (~keep).any()
    )
    return replace(
        t,
        gemm_dtype=t.gemm_dtype[gemm], gemm_mnk=t.gemm_mnk[gemm], gemm_seconds=t.gemm_seconds[gemm],
        decode_kernel=t.decode_kernel[decode], decode=t.decode[decode],
        decode_seconds=t.decode_seconds[decode], prefill_kernel=t.prefill_kernel[prefill],
        decode_fp8=t.decode_fp8[decode_fp8], decode_fp8_seconds=t.decode_fp8_seconds[decode_fp8],
        prefill=t.prefill[prefill], prefill_seconds=t.prefill_seconds[prefill], rejected=rejected,
    )  # fmt: skip


def static_fp8_gemms(
    accelerator: str,
    dtype: np.ndarray,
    mnk: np.ndarray,
    seconds: np.ndarray,
    scale_rows: list[list[float]],
) -> np.ndarray:
    """The FP8 GEMMs' seconds as a checkpoint with calibrated (static) activation scales runs
    them. AIConfigurator's collector quantises an FP8 GEMM's activations dynamically, so each
    FP8 row holds the scale's computation too (collector/trtllm/collect_gemm.py); its
    compute-scale table measures that part alone, as the engine's dynamic quantisation minus
    its static one by (m, k) (TensorRT-LLM's 7-9 us a call at decode batches, vLLM's ~1,
    SGLang's 0). Taken off as AIConfigurator does for its ``fp8_static`` mode (its engine's
    operators/gemm.rs), and floored at the GEMM's roofline as there. The published FP8
    checkpoints (ModelOpt's, llm-compressor's FP8 scheme) carry static scales."""
    if not scale_rows:
        return seconds
    acc = DEFAULT_CATALOG.accelerator(accelerator)
    cost = {(int(m), int(k)): us * 1e-6 for m, k, us in scale_rows}
    out = seconds.copy()
    for i in np.flatnonzero(dtype == "fp8"):
        m, n, k = mnk[i]
        extra = cost.get((int(m), int(k)))
        if extra is not None:
            roofline = max(n * k / acc.memory_bandwidth, 2.0 * m * n * k / acc.peak("fp8"))
            out[i] = max(seconds[i] - extra, roofline)
    return out


def scale_costs() -> dict[tuple[str, str], tuple[str, float]]:
    """(accelerator, engine) -> (the compute-scale table's version, its median microseconds a
    call at decode batches, M <= 64), for the tables whose FP8 rows had it taken off."""
    out = {}
    for t in aic_data()["tables"]:
        small = [us for m, _, us in t.get("compute_scale", []) if m <= STREAM_MAX_M]
        if small and (t["accelerator"], t["engine"]) not in out:
            out[(t["accelerator"], t["engine"])] = (
                str(t["compute_scale_version"]),
                float(np.median(small)),
            )
    return out


def _scale_summary() -> str:
    by_engine: dict[str, list[float]] = {}
    versions: dict[str, set[str]] = {}
    for (_, engine), (version, us) in sorted(scale_costs().items()):
        by_engine.setdefault(engine, []).append(us)
        versions.setdefault(engine, set()).add(version)
    return ", ".join(
        f"{engine} {'/'.join(sorted(versions[engine]))} {min(us):.1f}-{max(us):.1f} us a call"
        for engine, us in by_engine.items()
    )


@lru_cache(maxsize=1)
def tables() -> tuple[AicTable, ...]:
    out = []
    for t in aic_data()["tables"]:
        dtype, mnk, gemm_s = _split(t["gemm"], 1)
        gemm_s = static_fp8_gemms(t["accelerator"], dtype, mnk, gemm_s, t.get("compute_scale", []))
        dk, decode, decode_s = _split(t["decode_attention"], 1)
        pk, prefill, prefill_s = _split(t["prefill_attention"], 1)
        _, decode_fp8, decode_fp8_s = _split(t.get("decode_attention_fp8", []), 1)
        reduce = np.array([[r[1], 2.0 * r[2]] for r in t["allreduce"]], float).reshape(-1, 2)
        reduce_s = np.array([r[3] * 1e-6 for r in t["allreduce"]], float)
        raw = AicTable(
            t["system"], t["accelerator"], t["engine"], t["version"],
            dtype, mnk, gemm_s, dk, decode, decode_s, pk, prefill, prefill_s, reduce, reduce_s,
            decode_fp8, decode_fp8_s, (), t.get("compute_scale_version"),
        )  # fmt: skip
        out.append(_possible(raw))
    return tuple(out)


def table(accelerator: str, engine: str, version: str | None = None) -> AicTable:
    for t in tables():
        same = t.accelerator == accelerator and t.engine == engine
        if same and (version is None or t.version == version):
            return t
    raise KeyError(f"no AIConfigurator table for {accelerator} {engine} {version or ''}")


def _decode_gemm(
    t: AicTable, precision: str, max_m: float = DECODE_MAX_M
) -> tuple[np.ndarray, ...]:
    rows = (t.gemm_dtype == precision) & (t.gemm_mnk[:, 0] <= max_m)
    m, n, k = t.gemm_mnk[rows].T
    weight_bytes = n * k * GEMM_WEIGHT_BYTES[precision]
    return t.gemm_seconds[rows], weight_bytes, 2.0 * m * n * k, np.minimum(n, k)


def _kv_bytes(rows: np.ndarray, element_bytes: float = 2.0) -> np.ndarray:
    batch, context, _, kv_heads, head_dim = rows.T
    return np.asarray(2.0 * batch * context * kv_heads * head_dim * element_bytes)  # K and V


def _prefill_flops(rows: np.ndarray) -> np.ndarray:
    batch, length, heads, _, head_dim = rows.T
    return np.asarray(2.0 * batch * length**2 * heads * head_dim)  # causal: half of 4 b s^2 h d


def fit_table_decode(t: AicTable) -> tuple[tuple[float, float, float], tuple[float, float]]:
    """((f_w, floor us, E_d) of the bf16 decode GEMMs, (f_kv, floor us) of the decode attention)
    of one table, fractions of its chip's datasheet HBM (the fit the H100's file gets)."""
    acc = DEFAULT_CATALOG.accelerator(t.accelerator)
    seconds, weights, flops, width = _decode_gemm(t, "bf16")
    gemm = _fit_decode_gemm_terms(
        seconds, weights, flops, width, acc.memory_bandwidth, acc.peak("bf16"), "bf16"
    )
    attention = _fit_decode_attention_terms(
        t.decode_seconds, _kv_bytes(t.decode), acc.memory_bandwidth, 0.3
    )
    return gemm, attention


@lru_cache(maxsize=16)
def _vllm_fit(
    accelerator: str, version: str
) -> tuple[tuple[float, float, float], tuple[float, float]]:
    return fit_table_decode(table(accelerator, FIT_ENGINE, version))


def ratio_decode_terms(accelerator: str) -> dict[str, tuple[float, ...]]:
    """The chip's decode terms: the H100's measured fractions (engine.ceilings.H100_DECODE_GEMM,
    H100_DECODE_ATTENTION) times the chip's vLLM fit over the H100's at the same vLLM version,
    and the H100's measured floors. A floor is a kernel's fixed cost, which a ratio of two
    graph-timed fits does not recover: on the H200 the ratio's floors land 65-75 % above its
    measured ones, the H100's carried 40-46 % (``ratio_check``)."""
    version = PAIR_VERSION[accelerator]
    (cw, _, ce), (ckv, _) = _vllm_fit(accelerator, version)
    (hw, _, he), (hkv, _) = _vllm_fit(H100, version)
    f_w, floor, e_d = CE.H100_DECODE_GEMM["bf16"]
    f_kv, attention_floor = CE.H100_DECODE_ATTENTION[CE.DECODE_ATTENTION_KERNEL]
    return {
        "bf16": (round(f_w * cw / hw, 4), floor, round(e_d * ce / he, 2)),
        CE.DECODE_ATTENTION_KERNEL: (round(f_kv * ckv / hkv, 4), attention_floor),
    }


def derive_chip_decode_terms() -> dict[str, dict[str, tuple[float, ...]]]:
    """What engine.ceilings.CHIP_DECODE_TERMS holds for the chips fitted here."""
    return {acc: ratio_decode_terms(acc) for acc in FITTED_CHIPS}


def ratio_check() -> list[tuple[str, float, float]]:
    """The method on the H200, which has its own measurement: (term, by the ratio, measured)."""
    by_ratio = ratio_decode_terms("nvidia-h200-141gb")
    own = CE.CHIP_DECODE_TERMS["nvidia-h200-141gb"]
    names = {("bf16", 0): "f_w", ("bf16", 2): "E_d", (CE.DECODE_ATTENTION_KERNEL, 0): "f_kv"}
    return [(name, by_ratio[key][i], own[key][i]) for (key, i), name in names.items()]


# --- checks: the engine's ceilings against every table -------------------------------------------


@dataclass(frozen=True)
class OpCheck:
    table: str
    accelerator: str
    engine: str
    op: str
    errors: np.ndarray  # predicted / measured - 1, per row
    role: str  # "fitted" (the table or its H100 pair set a constant) or "checked"

    @property
    def median_abs(self) -> float:
        return float(np.median(np.abs(self.errors)))

    @property
    def signed(self) -> float:
        return float(np.median(self.errors))


def _op_errors(t: AicTable) -> dict[str, np.ndarray]:
    ce = CE.ceilings_for(DEFAULT_CATALOG.accelerator(t.accelerator))
    out: dict[str, np.ndarray] = {}
    for p in ("bf16", "fp8", "fp4"):
        if p not in ce.decode_gemm:
            continue
        seconds, weights, flops, width = _decode_gemm(t, p)
        if len(seconds):
            predicted = ce.decode_gemm_seconds(p, weights, flops, width)
            out[f"decode GEMM {p}"] = predicted / seconds - 1.0
        rows = (t.gemm_dtype == p) & (t.gemm_mnk[:, 0] >= PREFILL_MIN_M)
        if rows.any():
            m, n, k = t.gemm_mnk[rows].T
            rate = ce.gemm_flops(p, np.minimum(n, k), m, sustained=False)
            out[f"prefill GEMM {p}"] = 2.0 * m * n * k / rate / t.gemm_seconds[rows] - 1.0
    if len(t.decode_seconds):
        kernel = CE.DECODE_ATTENTION_KERNEL
        predicted = ce.kv_read_seconds(kernel, _kv_bytes(t.decode))
        out["decode attention"] = predicted / t.decode_seconds - 1.0
    if len(t.prefill_seconds):
        batch, length, heads, head_dim = (
            t.prefill[:, 0],
            t.prefill[:, 1],
            t.prefill[:, 2],
            t.prefill[:, 4],
        )
        flops = _prefill_flops(t.prefill)
        # the call's rate at its own batch and heads (Ceilings.attention_occupancy)
        rate = np.array(
            [
                float(ce.attention_flops("cudnn", "forward", s, d))
                * float(ce.attention_occupancy(b, h, s))
                for b, s, h, d in zip(batch, length, heads, head_dim, strict=True)
            ]
        )
        out["prefill attention"] = flops / rate / t.prefill_seconds - 1.0
    return out


@lru_cache(maxsize=1)
def check_rows() -> tuple[OpCheck, ...]:
    checks = []
    fitted_tables = {(acc, FIT_ENGINE, PAIR_VERSION[acc]) for acc in FITTED_CHIPS} | {
        (H100, FIT_ENGINE, PAIR_VERSION[acc]) for acc in FITTED_CHIPS
    }
    for t in tables():
        for op, errors in _op_errors(t).items():
            fitted = (t.accelerator, t.engine, t.version) in fitted_tables and op in (
                "decode GEMM bf16",
                "decode attention",
            )
            # engine.ceilings.MEASURED_FP4_MATMUL_RATIO: fitted on every engine's prompt rows
            fitted |= op == "prefill GEMM fp4" and t.accelerator in GEMM_RATE_CHIPS
            role = "fitted" if fitted else "checked"
            checks.append(OpCheck(t.label, t.accelerator, t.engine, op, errors, role))
    return tuple(checks)


def render_section() -> str:
    """The AIConfigurator block of ``ringmaster calibrate``."""
    lines = [
        f"AIConfigurator's operator databases ({source()}): the engine's ceilings per chip and"
        " serving engine, predicted / measured - 1. Fitted: the A100's, B200's and GB200's decode"
        " terms (bf16 decode GEMMs, decode attention) by their vLLM table over the H100's, and"
        " the Blackwell chips' FP4 GEMMs (engine.ceilings.MEASURED_FP4_MATMUL_RATIO) by every"
        " engine's prompt-sized rows; every other row checked. Each serving engine's all-reduce"
        " (below), FP8 decode GEMMs (engine.serving_engines.ENGINE_FP8_DECODE_GEMM) and GEMM rates"
        " on Blackwell (ENGINE_GEMM_RATE, below) are fitted on the same tables.",
        "FP8 GEMMs as a checkpoint with static activation scales runs them: each engine's"
        " measured cost of computing a dynamic scale taken off every FP8 row first"
        f" (static_fp8_gemms; {_scale_summary()}).",
        f"{'table':<26} {'op':<18} {'role':<8} {'rows':>5} {'median |err|':>13} {'signed':>8}",
    ]
    for c in check_rows():
        lines.append(
            f"{c.table:<26} {c.op:<18} {c.role:<8} {len(c.errors):>5} {c.median_abs:>12.1%}"
            f" {c.signed:>+8.1%}"
        )
    rejected = [f"{t.label}: {rows} {op}" for t in tables() for op, rows in t.rejected]
    if rejected:
        lines.append("rows faster than the datasheet allows, left out: " + "; ".join(rejected))
    checked = [c for c in check_rows() if c.role == "checked"]
    by_op: dict[str, list[float]] = {}
    for c in checked:
        by_op.setdefault(c.op, []).append(c.median_abs)
    lines.append(
        "checked, median over tables: "
        + ", ".join(f"{op} {median(v):.1%}" for op, v in sorted(by_op.items()))
    )
    h100 = {c.op: c.signed for c in check_rows() if c.table == "h100_sxm vllm 0.19.0"}
    fp8 = [
        c.signed
        for c in check_rows()
        if c.accelerator == H100
        and c.op == "prefill GEMM fp8"
        and (c.accelerator, c.engine, c.table.rsplit(" ", 1)[-1]) != ALLREDUCE_CHECK_TABLE
    ]
    lines.append(
        "The fitted chips' rows carry the H100's own offset from this database (its measured"
        f" decode GEMMs {h100['decode GEMM bf16']:+.1%}, decode attention"
        f" {h100['decode attention']:+.1%} here: CUDA-graph timing over many calls reads lower"
        f" floors; its FP8 prompt GEMMs, which FP4 is stated over, {min(fp8):+.0%} to"
        f" {max(fp8):+.0%} by engine) and its floors: the ratio is fitted, not the absolute time."
    )
    lines.append(
        "Tensor-parallel all-reduce (engine.tp_allreduce), median |error| over 16 KiB-128 MiB by"
        " GPU count: the engine's fitted kernel, then NCCL's LL-ring model"
    )
    by_curve: dict[str, dict[str, list[str]]] = {}
    for label, gpus, role, errors in allreduce_checks():
        kind = "NCCL" if role == "NCCL model" else role
        by_curve.setdefault(label, {}).setdefault(kind, []).append(
            f"{gpus}: {float(np.median(np.abs(errors))):.0%}"
        )
    for label, kinds in by_curve.items():
        parts = "; ".join(f"{kind} {', '.join(v)}" for kind, v in kinds.items())
        lines.append(f"  {label:<26} {parts}")
    lines.append(
        "Decode attention per engine (engine.serving_engines.ENGINE_DECODE_ATTENTION: floor + KV"
        " bytes / (f_kv HBM), the serving step's KV read), f_kv and median |error| by KV dtype;"
        " the H100's vLLM 0.14.0 tables by the 0.19.0 fit"
    )
    for label, kv, role, f_kv, errors in decode_attention_checks():
        worst = float(np.max(np.abs(errors)))
        lines.append(
            f"  {label:<26} {kv:<5} {role:<8} f_kv {f_kv:.3f}"
            f"  {float(np.median(np.abs(errors))):.1%} (largest {worst:.0%})"
        )
    lines.append(
        "GEMM rates on Blackwell per engine (engine.serving_engines.ENGINE_GEMM_RATE): the"
        " engine's fraction of the chip's peak over its fraction of the H100's (FP4 over FP8), at"
        " decode batches / prompt chunks; the published matmul ratio the ceilings carry is "
        + ", ".join(
            f"{chip} {p} {CE.matmul_ratio(chip, p):.3g}"
            for chip in GEMM_RATE_CHIPS
            for p in ("bf16", "fp8")
        )
    )
    by_table: dict[tuple[str, str], list[str]] = {}
    for (chip, engine, p), (decode, prompt) in ENGINE_GEMM_RATE.items():
        by_table.setdefault((chip, engine), []).append(f"{p} {decode:.3f} / {prompt:.3f}")
    for (chip, engine), rates in by_table.items():
        lines.append(f"  {chip:<16} {engine:<7} " + ", ".join(rates))
    lines.append(
        "The method on the H200 (its own terms measured on a lent one): "
        + ", ".join(f"{n} {r:g} by the ratio, {m:g} measured" for n, r, m in ratio_check())
    )
    return "\n".join(lines)


# --- the serving engines' tensor-parallel all-reduce (engine.tp_allreduce) -----------------------

# The table each (chip, engine) pair's all-reduce is fitted on: the vLLM / TensorRT-LLM version
# the decode terms use (0.19.0; the A100's 0.14.0 and 1.0.0, its only ones) and SGLang 0.5.10.
# H100 vLLM 0.14.0 is not fitted: it checks the 0.19.0 fit across vLLM versions.
ALLREDUCE_CHECK_TABLE = ("nvidia-h100-80gb", "vllm", "0.14.0")


def _allreduce_rows(t: AicTable, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    rows = t.allreduce[:, 0] == gpus
    return t.allreduce[rows, 1], t.allreduce_seconds[rows]


PROMPT_MIN_ELEMENTS = 16 * 2**20  # a prefill chunk's message: 2k tokens x 8k and more


def fit_allreduce(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float, float]:
    """(floor us, us at 1 MiB above it, exponent, prompt rate GB/s) of one all-reduce curve:
    floor + t_MiB (bytes / MiB) ** exponent fitted on every size (least squares of the log error
    on a grid, coarse then fine around the coarse best: floor 0-15 us by 0.5 then 0.1, exponent
    0.4-1 by 0.02 then 0.005, t_MiB log-spaced from 1 to 1,000 us by 7 % then 0.7 %), and the
    bandwidth at prefill chunk sizes, where the engine has switched to its bandwidth-bound
    kernel (the least-squares slope of time on bytes)."""
    scaled = nbytes / MIB

    def best(
        floors: np.ndarray, log_mibs: np.ndarray, exponents: np.ndarray
    ) -> tuple[float, float, float]:
        f = floors[:, None, None, None]
        t = np.exp(log_mibs)[None, :, None, None]
        e = exponents[None, None, :, None]
        predicted = (f + t * scaled[None, None, None, :] ** e) * 1e-6
        sse = np.sum(np.log(predicted / seconds) ** 2, axis=-1)
        i, j, k = np.unravel_index(int(np.argmin(sse)), sse.shape)
        return float(floors[i]), float(log_mibs[j]), float(exponents[k])

    coarse_step = np.log(1000.0) / 100
    floor, log_mib, exponent = best(
        np.round(np.arange(0.0, 15.0001, 0.5), 1),
        np.arange(0.0, np.log(1000.0) + 1e-9, coarse_step),
        np.round(np.arange(0.4, 1.0001, 0.02), 3),
    )
    floor, log_mib, exponent = best(
        np.round(np.clip(floor + np.arange(-0.5, 0.5001, 0.1), 0.0, 15.0), 1),
        log_mib + np.linspace(-coarse_step, coarse_step, 21),
        np.round(np.clip(exponent + np.arange(-0.02, 0.02001, 0.005), 0.4, 1.0), 3),
    )
    prompt = nbytes >= 2.0 * PROMPT_MIN_ELEMENTS
    slope = float(np.polyfit(nbytes[prompt], seconds[prompt], 1)[0])
    return floor, round(float(np.exp(log_mib)), 2), exponent, round(1.0 / slope / 1e9, 1)


def _fit_floor_and_rate(
    nbytes: np.ndarray, seconds: np.ndarray, floors_us: np.ndarray, rates: np.ndarray
) -> tuple[int, int]:
    """The indices (floor, rate) of floor + bytes / rate on the grid of floors (us) x rates
    (bytes/s) with the least squared log error, in one array."""
    predicted = floors_us[:, None, None] * 1e-6 + nbytes[None, None, :] / rates[None, :, None]
    sse = np.sum(np.log(predicted / seconds[None, None, :]) ** 2, axis=-1)
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return int(i), int(j)


def _fitting_tables() -> list[AicTable]:
    return [t for t in tables() if (t.accelerator, t.engine, t.version) != ALLREDUCE_CHECK_TABLE]


def derive_engine_allreduce() -> dict[tuple[str, str, int], tuple[float, float, float, float]]:
    """What engine.tp_allreduce.ENGINE_ALLREDUCE holds."""
    out = {}
    for t in _fitting_tables():
        for gpus in (2, 4, 8):
            nbytes, seconds = _allreduce_rows(t, gpus)
            if len(seconds):
                out[(t.accelerator, t.engine, gpus)] = fit_allreduce(nbytes, seconds)
    return out


def allreduce_checks() -> list[tuple[str, int, str, np.ndarray]]:
    """(table, GPUs, role, predicted / measured - 1) of every all-reduce curve at every size:
    the fit's own rows, the vLLM 0.14.0 H100 curve by the 0.19.0 fit, and NCCL's LL-ring model
    (what a step without a measured engine kernel uses) on all of them."""
    out = []
    for t in tables():
        acc = DEFAULT_CATALOG.accelerator(t.accelerator)
        role = (
            "checked" if (t.accelerator, t.engine, t.version) == ALLREDUCE_CHECK_TABLE else "fitted"
        )
        for gpus in (2, 4, 8):
            nbytes, seconds = _allreduce_rows(t, gpus)
            if not len(seconds):
                continue
            predicted, _ = engine_allreduce_seconds(nbytes, gpus, t.accelerator, t.engine)
            out.append((t.label, gpus, role, predicted / seconds - 1.0))
            nccl = nccl_tp_allreduce_seconds(nbytes, gpus, acc)
            out.append((t.label, gpus, "NCCL model", nccl / seconds - 1.0))
    return out


# --- the serving engines' FP8 GEMMs at decode batches (engine.serving_engines) -------------------


STREAM_MAX_M = 64  # decode batches where a GEMM streams its weights (compute is another term)


def fit_stream(seconds: np.ndarray, weight_bytes: np.ndarray, hbm: float) -> tuple[float, float]:
    """(f_w, floor us) of floor + weights / (f_w HBM), least squares of the log error over a grid
    (floor 0-20 us by 0.1, f_w 0.3-1 by 0.005)."""
    floors = np.round(np.arange(0.0, 20.0001, 0.1), 1)
    fractions = np.round(np.arange(0.3, 1.0001, 0.005), 3)
    i, j = _fit_floor_and_rate(weight_bytes, seconds, floors, fractions * hbm)
    return float(fractions[j]), float(floors[i])


def fit_fp8_decode(t: AicTable, precision: str = "fp8") -> tuple[float, float] | None:
    """(streaming ratio, extra floor us) of the engine's FP8 GEMMs at decode batches over its own
    bf16 ones on the chip: f_w(fp8) / f_w(bf16) and floor(fp8) - floor(bf16), each fitted on the
    weight-bound rows (M <= 64) as floor + weights / (f_w HBM) (fit_stream). An engine's FP8 GEMM
    quantises its activations in a kernel of its own first: TensorRT-LLM's cost ~10 us more a
    call than its bf16 ones at the same streaming rate. None where the table has no FP8 rows.
    ``precision="fp4"``: the same for its NVFP4 GEMMs (their weights at 0.5625 bytes)."""
    acc = DEFAULT_CATALOG.accelerator(t.accelerator)
    terms = {}
    for p in ("bf16", precision):
        seconds, weights, _, _ = _decode_gemm(t, p, STREAM_MAX_M)
        if not len(seconds) or not acc.supports(p):
            return None
        terms[p] = fit_stream(seconds, weights, acc.memory_bandwidth)
    (f8, floor8), (f16, floor16) = terms[precision], terms["bf16"]
    return round(f8 / f16, 3), round(floor8 - floor16, 1)


def derive_engine_fp8_decode(precision: str = "fp8") -> dict[tuple[str, str], tuple[float, float]]:
    """What engine.serving_engines.ENGINE_FP8_DECODE_GEMM holds (``precision="fp4"``:
    ENGINE_FP4_DECODE_GEMM)."""
    out = {}
    for t in _fitting_tables():
        fit = fit_fp8_decode(t, precision)
        if fit is not None:
            out[(t.accelerator, t.engine)] = fit
    return out


# --- the serving engines' decode attention (engine.serving_engines) ------------------------------

KV_DTYPES = {"bf16": 2.0, "fp8": 1.0}  # the KV cache's bytes per element


def _decode_attention_rows(t: AicTable, kv: str) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, KV bytes read) of the table's decode attention over a ``kv`` cache."""
    if kv == "fp8":
        return t.decode_fp8_seconds, _kv_bytes(t.decode_fp8, KV_DTYPES[kv])
    return t.decode_seconds, _kv_bytes(t.decode, KV_DTYPES[kv])


def derive_engine_decode_attention() -> dict[tuple[str, str, str], tuple[float, float]]:
    """What engine.serving_engines.ENGINE_DECODE_ATTENTION holds: (f_kv, floor us) of each
    engine's decode attention per chip and KV-cache dtype, floor + KV bytes / (f_kv HBM) on its
    rows (fit_stream: the fraction at most the datasheet's HBM)."""
    out = {}
    for t in _fitting_tables():
        acc = DEFAULT_CATALOG.accelerator(t.accelerator)
        for kv in KV_DTYPES:
            seconds, nbytes = _decode_attention_rows(t, kv)
            if len(seconds):
                out[(t.accelerator, t.engine, kv)] = fit_stream(
                    seconds, nbytes, acc.memory_bandwidth
                )
    return out


def decode_attention_checks() -> list[tuple[str, str, str, float, np.ndarray]]:
    """(table, KV dtype, role, f_kv, predicted / measured - 1) of every decode-attention table
    by its engine's fitted (f_kv, floor); the H100's vLLM 0.14.0 tables, not fitted, by the
    0.19.0 fit."""
    out = []
    for t in tables():
        acc = DEFAULT_CATALOG.accelerator(t.accelerator)
        role = (
            "checked" if (t.accelerator, t.engine, t.version) == ALLREDUCE_CHECK_TABLE else "fitted"
        )
        for kv in KV_DTYPES:
            seconds, nbytes = _decode_attention_rows(t, kv)
            fit = ENGINE_DECODE_ATTENTION.get((t.accelerator, t.engine, kv))
            if not len(seconds) or fit is None:
                continue
            f_kv, floor_us = fit
            predicted = floor_us * 1e-6 + nbytes / (f_kv * acc.memory_bandwidth)
            out.append((t.label, kv, role, f_kv, predicted / seconds - 1.0))
    return out


# --- the serving engines' GEMM rates on the chips never measured here (engine.serving_engines) ---

# Blackwell: no lent GPU measured it and no fitted serving row runs on it, and every engine's
# FP8 table contradicts the published matmul ratio the ceilings carry there (prefill GEMMs
# 37-57 % slower than it predicts, bf16 within 3 %). The A100 (a fitted TTFT row) and the H200
# (a lent one) keep their own evidence.
GEMM_RATE_CHIPS = ("nvidia-b200", "nvidia-gb200")
# The batches a step's GEMMs compute-bind at: decode batches (a few hundred to a thousand
# sequences) and prompt chunks (thousands of tokens).
DECODE_BAND_M = (256, 512, 1024)
PREFILL_BAND_M = (2048, 8192)
# A served model's GEMMs are this wide and wider on their narrow side (8B's hidden at TP 1,
# 70B's at TP 2): the 1,024-2,048-wide shapes leave Blackwell's larger tiles idle and would
# charge every model for them.
GEMM_RATE_MIN_WIDTH = 4096
# The H100 precision a chip's precision is compared with (the H100 has no FP4 units: FP4 is
# stated over its FP8, the fraction the serving constants hold for both).
H100_REFERENCE_PRECISION = {"bf16": "bf16", "fp8": "fp8", "fp4": "fp8"}


def _peak_fractions(
    t: AicTable, precision: str, band: tuple[int, ...]
) -> dict[tuple[int, int, int], float]:
    """(m, n, k) -> the GEMM's achieved fraction of the chip's ``precision`` peak, the rows of
    the band at the served widths."""
    acc = DEFAULT_CATALOG.accelerator(t.accelerator)
    if not acc.supports(precision):
        return {}
    rows = (t.gemm_dtype == precision) & np.isin(t.gemm_mnk[:, 0], band)
    rows &= np.minimum(t.gemm_mnk[:, 1], t.gemm_mnk[:, 2]) >= GEMM_RATE_MIN_WIDTH
    mnk = t.gemm_mnk[rows]
    fractions = 2.0 * np.prod(mnk, axis=1) / t.gemm_seconds[rows] / acc.peak(precision)
    return {(int(m), int(n), int(k)): float(f) for (m, n, k), f in zip(mnk, fractions, strict=True)}


def gemm_fraction_ratio(t: AicTable, precision: str, band: tuple[int, ...]) -> float | None:
    """The median over the band's shapes of the chip's fraction of its ``precision`` peak over
    the H100's fraction of its reference precision's peak, same engine and version (None where
    either table lacks the rows)."""
    h100 = table(H100, t.engine, t.version)
    own = _peak_fractions(t, precision, band)
    ref = _peak_fractions(h100, H100_REFERENCE_PRECISION[precision], band)
    shared = [shape for shape in own if shape in ref]
    if not shared:
        return None
    return round(float(np.median([own[s] / ref[s] for s in shared])), 3)


def derive_engine_gemm_rate() -> dict[tuple[str, str, str], tuple[float, float]]:
    """What engine.serving_engines.ENGINE_GEMM_RATE holds: (decode band, prompt band) ratios of
    each engine's GEMM fraction of peak on each Blackwell chip over its H100 one."""
    out = {}
    for t in _fitting_tables():
        if t.accelerator not in GEMM_RATE_CHIPS:
            continue
        for p in H100_REFERENCE_PRECISION:
            decode = gemm_fraction_ratio(t, p, DECODE_BAND_M)
            prefill = gemm_fraction_ratio(t, p, PREFILL_BAND_M)
            if decode is not None and prefill is not None:
                out[(t.accelerator, t.engine, p)] = (decode, prefill)
    return out


def derive_fp4_matmul_ratio() -> dict[str, float]:
    """What engine.ceilings.MEASURED_FP4_MATMUL_RATIO holds: the chip's NVFP4 fraction of its FP4
    peak over the H100's FP8 fraction of its FP8 peak at prompt-sized GEMMs, the median over the
    three engines (their FP8 kernels differ more than their FP4 ones), each engine's NVFP4 GEMMs
    as it serves them: TensorRT-LLM's table is its autotuner's fallback kernel, so its served
    prompt ratio stands in (served_fp4_prompt_ratios)."""
    return _fp4_medians(_served_fp4_fits())


def served_fp4_prompt_ratios() -> dict[tuple[str, str], float]:
    """(chip, engine) -> the prompt band's NVFP4 ratio the engine serves where its operator table
    is not that (engine.serving_engines.SERVED_FP4_GEMM_RATE: TensorRT-LLM's, fitted on its
    closed-loop B200 runs, the GB200 carrying the B200's)."""
    return {
        (chip, engine): prompt
        for (chip, engine, precision), (_, prompt) in SERVED_FP4_GEMM_RATE.items()
        if precision == "fp4"
    }


def _served_fp4_fits() -> dict[tuple[str, str, str], tuple[float, float]]:
    """derive_engine_gemm_rate's entries, the NVFP4 prompt band as each engine serves it."""
    served = served_fp4_prompt_ratios()
    fits = derive_engine_gemm_rate()
    for (chip, engine, p), (decode, _) in fits.items():
        if p == "fp4" and (chip, engine) in served:
            fits[(chip, engine, p)] = (decode, served[(chip, engine)])
    return fits


def _fp4_medians(fits: dict[tuple[str, str, str], tuple[float, float]]) -> dict[str, float]:
    by_chip: dict[str, list[float]] = {}
    for (chip, _, p), (_, prefill) in fits.items():
        if p == "fp4":
            by_chip.setdefault(chip, []).append(prefill)
    return {chip: round(float(np.median(v)), 3) for chip, v in sorted(by_chip.items())}


def fp4_leave_one_engine_out() -> list[tuple[str, str, float, float, int, float]]:
    """(chip, engine left out, fitted ratio, refit without it, rows, median |error|) of
    MEASURED_FP4_MATMUL_RATIO: the other engines' median sets the ratio, and the left-out engine's
    NVFP4 prompt rows are predicted by it over that engine's own H100 FP8 fraction. An engine
    whose table is not what it serves (TensorRT-LLM's fallback kernel) has no rows to hold the
    refit to: it is left out of the others' refits as it serves, not checked itself."""
    fits = _served_fp4_fits()
    fitted = _fp4_medians(fits)
    served = served_fp4_prompt_ratios()
    out = []
    for t in _fitting_tables():
        if t.accelerator not in fitted or (t.accelerator, t.engine, "fp4") not in fits:
            continue
        if (t.accelerator, t.engine) in served:
            continue
        others = [
            prompt
            for (chip, engine, p), (_, prompt) in fits.items()
            if chip == t.accelerator and p == "fp4" and engine != t.engine
        ]
        refit = float(np.median(others))
        own = _peak_fractions(t, "fp4", PREFILL_BAND_M)
        ref = _peak_fractions(table(H100, t.engine, t.version), "fp8", PREFILL_BAND_M)
        errors = [refit * ref[s] / own[s] - 1.0 for s in own if s in ref]
        out.append(
            (
                t.accelerator,
                t.engine,
                fitted[t.accelerator],
                refit,
                len(errors),
                float(np.median(np.abs(errors))),
            )
        )
    return out
