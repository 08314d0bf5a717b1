"""The H100 SXM ceilings (engine.ceilings), refitted from the team's operator measurements.

``calibration/measured/h100-sxm-ops.yaml`` is a copy of ``../shared/calibration/measured/`` (one
H100 80GB HBM3 SXM at 700 W, PyTorch 2.11, CUDA 13.0, two runs on two machines): GEMMs by shape
and precision, a sustained GEMM, attention forward and backward, memory-bound kernels eager and
compiled, cross-entropy, AdamW. Every H100 constant of :mod:`ringmaster.engine.ceilings` is
recomputed here (``derive_ceiling_constants``; a test keeps the engine's values equal to it), and
``ceilings_report`` holds each measured operator against the composed prediction: the fitted
rows' errors, per group, for ``ringmaster calibrate``.

Fits are least squares of the log error (a ratio error, the same weight for a 10 us and a 10 ms
kernel); the one- and two-parameter shapes are solved by a grid over the shape parameters with
the scale in closed form (the mean log ratio), so no optimiser library is needed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

import numpy as np

from ringmaster.calibration.points import read_yaml
from ringmaster.engine import ceilings as CE

MEASURED_H100 = Path(__file__).with_name("measured") / "h100-sxm-ops.yaml"
GEMM_MIN_TOKENS = 1024  # training-size GEMMs; decode-size ones are serving's (a launch floor)


@lru_cache(maxsize=1)
def measured_h100() -> dict[str, Any]:
    data: dict[str, Any] = read_yaml(MEASURED_H100)
    return data


def _rows(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(zip(section["columns"], row, strict=True)) for row in section["rows"]]


def _fit_scale(y: np.ndarray, shape: np.ndarray) -> tuple[float, float]:
    """(scale, sum of squared log errors) of y ~ scale x shape."""
    log_scale = float(np.mean(np.log(y) - np.log(shape)))
    residual = np.log(shape) + log_scale - np.log(y)
    return float(np.exp(log_scale)), float(np.sum(residual**2))


def _grid_fit(
    y: np.ndarray, shape_of: Callable[..., np.ndarray], grids: Sequence[Iterable[float]]
) -> tuple[float, tuple[float, ...]]:
    best: tuple[float, float, tuple[float, ...]] | None = None
    grid: np.ndarray = np.array(np.meshgrid(*grids)).reshape(len(grids), -1).T
    for params in grid:
        scale, sse = _fit_scale(y, shape_of(*params))
        if best is None or sse < best[1]:
            best = (scale, sse, tuple(float(p) for p in params))
    assert best is not None
    return best[0], best[2]


def gemm_rows() -> list[dict[str, Any]]:
    return [r for r in _rows(measured_h100()["gemm"]) if r["M"] >= GEMM_MIN_TOKENS]


def fit_gemm(precision: str) -> tuple[float, float]:
    """(E, K) of E / (1 + K / min(N, K_inner) + K / M) at the precision's dense peak."""
    rows = gemm_rows()
    peak = CE.H100_PEAK_TFLOPS["fp8" if precision.startswith("fp8") else "bf16"]
    y = np.array([r[f"{precision}_tflops"] for r in rows]) / peak
    m = np.array([r["M"] for r in rows], float)
    width = np.array([min(r["N"], r["K"]) for r in rows], float)
    e, (k,) = _grid_fit(y, lambda k: 1.0 / (1.0 + k / width + k / m), [np.arange(1.0, 1001.0)])
    return round(e, 4), k


DECODE_GEMM_MAX_TOKENS = 512  # decode batches: the grid's M = 1, 8, 32, 128, 512
_WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8fast": 1.0}


def decode_gemm_rows() -> list[dict[str, Any]]:
    return [r for r in _rows(measured_h100()["gemm"]) if r["M"] <= DECODE_GEMM_MAX_TOKENS]


def _log_grid_fit(
    measured: np.ndarray, predict: Callable[..., np.ndarray], grids: Sequence[np.ndarray]
) -> tuple[float, ...]:
    """The grid point (one value per grid) of least squared log error: ``predict`` takes the
    first grid's values as a column (broadcast over it) and the others' as scalars."""
    best: tuple[float, tuple[float, ...]] | None = None
    first, *rest = grids
    for others in np.array(np.meshgrid(*rest)).reshape(len(rest), -1).T:
        sse = np.sum(np.log(predict(first[:, None], *others) / measured) ** 2, axis=-1)
        i = int(np.argmin(sse))
        if best is None or sse[i] < best[0]:
            best = (float(sse[i]), (float(first[i]), *(float(o) for o in others)))
    assert best is not None
    return best[1]


def _decode_gemm_arrays(precision: str) -> tuple[np.ndarray, ...]:
    rows = decode_gemm_rows()
    seconds = np.array([(r[f"{precision}_us_r1"] + r[f"{precision}_us_r2"]) / 2e6 for r in rows])
    weights = np.array([r["K"] * r["N"] * _WEIGHT_BYTES[precision] for r in rows])
    flops = np.array([2.0 * r["M"] * r["K"] * r["N"] for r in rows])
    width = np.array([min(r["K"], r["N"]) for r in rows], float)
    return seconds, weights, flops, width


def fit_decode_gemm(precision: str) -> tuple[float, float, float]:
    """(f_w, floor us, E_d) of floor + max(W / (f_w HBM), F / (E_d / (1 + K_p / width) peak))
    on the GEMM rows at decode batches (engine.ceilings.H100_DECODE_GEMM)."""
    seconds, weights, flops, width = _decode_gemm_arrays(precision)
    peak = CE.H100_PEAK_TFLOPS["fp8" if precision.startswith("fp8") else "bf16"] * 1e12
    return _fit_decode_gemm_terms(
        seconds, weights, flops, width, CE.H100_DATASHEET_HBM_GBPS * 1e9, peak, precision
    )


def _fit_decode_gemm_terms(
    seconds: np.ndarray,
    weights: np.ndarray,
    flops: np.ndarray,
    width: np.ndarray,
    hbm: float,
    peak: float,
    precision: str,
) -> tuple[float, float, float]:
    """(f_w, floor us, E_d) of decode-batch GEMM rows on a chip of datasheet ``hbm`` and
    ``peak`` (the H100's shape term K_p)."""
    shape = peak / (1.0 + CE.H100_GEMM_HALF_DIM[precision] / width)

    def predict(floor_us: np.ndarray, f_w: float, e_d: float) -> np.ndarray:
        return floor_us * 1e-6 + np.maximum(weights / (f_w * hbm), flops / (e_d * shape))

    floor, f_w, e_d = _log_grid_fit(
        seconds,
        predict,
        [
            np.round(np.arange(0.0, 10.01, 0.1), 1),
            np.round(np.arange(0.5, 1.0001, 0.005), 3),
            np.round(np.arange(0.3, 1.2001, 0.01), 2),
        ],
    )
    return round(f_w, 4), round(floor, 1), round(e_d, 2)


def decode_attention_rows(backend: str) -> list[dict[str, Any]]:
    return [
        r
        for r in _rows(measured_h100()["decode_attention"])
        if r["backend"] == backend and r["mode"] == "gqa"
    ]


def fit_decode_attention(kernel: str) -> tuple[float, float]:
    """(f_kv, floor us) of floor + KV bytes / (f_kv HBM) on the decode attention rows."""
    rows = decode_attention_rows(ATTENTION_BACKEND[kernel])
    seconds = np.array([(r["us_r1"] + r["us_r2"]) / 2e6 for r in rows])
    kv_bytes = np.array([r["kv_bytes"] for r in rows], float)
    return _fit_decode_attention_terms(seconds, kv_bytes, CE.H100_DATASHEET_HBM_GBPS * 1e9, 0.5)


def _fit_decode_attention_terms(
    seconds: np.ndarray, kv_bytes: np.ndarray, hbm: float, lowest_f_kv: float
) -> tuple[float, float]:
    """(f_kv, floor us) of decode attention rows on a chip of datasheet ``hbm``, f_kv searched
    from ``lowest_f_kv`` up."""

    def predict(floor_us: np.ndarray, f_kv: float) -> np.ndarray:
        return floor_us * 1e-6 + kv_bytes / (f_kv * hbm)

    floor, f_kv = _log_grid_fit(
        seconds,
        predict,
        [
            np.round(np.arange(0.0, 20.01, 0.1), 1),
            np.round(np.arange(lowest_f_kv, 1.0001, 0.0025), 4),
        ],
    )
    return round(f_kv, 4), round(floor, 1)


def fit_device_decode(folder: str) -> tuple[tuple[float, float, float], tuple[float, float]]:
    """((f_w, floor us, E_d) of the bf16 decode GEMMs, (f_kv, floor us) of FlashAttention's
    decode attention) fitted on a lent chip's decode_ops.json the way the H100's are fitted on
    its file (fractions of that chip's datasheet HBM; the H100's shape term K_p)."""
    from ringmaster.engine.hardware import DEFAULT_CATALOG

    data = json.loads((DEVICE_DIR / folder / "decode_ops.json").read_text())["decode_ops"]
    chip = json.loads((DEVICE_DIR / folder / "payload.json").read_text())["device"]["name"]
    acc = DEFAULT_CATALOG.accelerator({"NVIDIA H200": "nvidia-h200-141gb"}[chip])
    gemm = data["gemm"]
    gemm_terms = _fit_decode_gemm_terms(
        np.array([r["us"] * 1e-6 for r in gemm]),
        np.array([2.0 * r["n"] * r["k"] for r in gemm]),
        np.array([2.0 * r["m"] * r["n"] * r["k"] for r in gemm]),
        np.array([min(r["n"], r["k"]) for r in gemm], float),
        acc.memory_bandwidth,
        acc.peak("bf16"),
        "bf16",
    )
    attention = [r for r in data["attention"] if r["backend"] == "FLASH_ATTENTION"]
    # the H200's KV read sits far below the H100's (bound by the SMs): searched from 0.3
    attention_terms = _fit_decode_attention_terms(
        np.array([r["us"] * 1e-6 for r in attention]),
        np.array([r["kv_bytes"] for r in attention], float),
        acc.memory_bandwidth,
        0.3,
    )
    return gemm_terms, attention_terms


def _sustained_phases() -> dict[str, list[dict[str, Any]]]:
    s = measured_h100()["gemm_sustained"]
    return {"r1": s["r1"], "r2": s["r2"]}


def sustained_and_burst() -> tuple[dict[str, float], dict[str, float]]:
    """Power-capped and cold-start TFLOP/s of the largest GEMM (see engine.ceilings)."""
    runs = _sustained_phases()

    def phase(name: str, key: str) -> float:
        return float(np.mean([p[key] for r in runs.values() for p in r if p["phase"] == name]))

    bf16_full, fp8_chunks = (
        "bf16 full shape, continuing",
        "fp8 fast-accum chunked 1024 rows, after 3 s idle",
    )
    bf16_chunks = "bf16 chunked 1024 rows, after 3 s idle"
    largest = [r for r in _rows(measured_h100()["gemm"]) if r["M"] == 32768 and r["tp"] == 1]
    slow_accumulation = float(np.median([r["fp8_tflops"] / r["fp8fast_tflops"] for r in largest]))
    sustained = {
        "bf16": phase(bf16_full, "median_call_tflops"),
        "fp8fast": phase(fp8_chunks, "median_call_tflops"),
    }
    sustained["fp8"] = sustained["fp8fast"] * slow_accumulation
    burst = {
        "bf16": phase(bf16_chunks, "first_50ms_tflops"),
        "fp8fast": phase(fp8_chunks, "first_50ms_tflops"),
    }
    burst["fp8"] = burst["fp8fast"] * slow_accumulation
    return (
        {k: round(v, 1) for k, v in sustained.items()},
        {k: round(v, 1) for k, v in burst.items()},
    )


def attention_rows(backend: str) -> list[dict[str, Any]]:
    return [
        r
        for r in _rows(measured_h100()["attention"])
        if r["backend"] == backend and r["kv_mode"] == "enable_gqa"
    ]


ATTENTION_COLUMN = {"forward": "fwd_tflops", "backward": "bwd_tflops_by_difference"}
ATTENTION_BACKEND = {"flash2": "flash", "cudnn": "cudnn"}


def fit_attention(kernel: str, direction: str) -> tuple[float, float, float]:
    """(E, s0, d0) of E / (1 + s0 / s + d0 / d) at the bf16 peak."""
    rows = attention_rows(ATTENTION_BACKEND[kernel])
    y = np.array([r[ATTENTION_COLUMN[direction]] for r in rows]) / CE.H100_PEAK_TFLOPS["bf16"]
    s = np.array([r["s"] for r in rows], float)
    d = np.array([r["d"] for r in rows], float)
    e, (s0, d0) = _grid_fit(
        y,
        lambda s0, d0: 1.0 / (1.0 + s0 / s + d0 / d),
        [np.arange(0.0, 3001.0, 25.0), np.arange(0.0, 201.0, 2.0)],
    )
    return round(e, 4), s0, d0


OCCUPANCY_FIT_SOURCE = "2026-11-27d-h100"  # the lent H100's step_kernels: fitted
OCCUPANCY_CHECK_SOURCE = "2026-11-27d-h200"  # the lent H200's: checked
_SDPA_KERNEL = {"FLASH_ATTENTION": "flash2", "CUDNN_ATTENTION": "cudnn"}


def _lent_chip_ceilings(source: str) -> CE.Ceilings:
    """The ceilings of the chip a measured folder (``<date>-<chip>``) ran on."""
    from ringmaster.calibration.device_steps import DEVICE_DIR, _accelerator
    from ringmaster.engine.hardware import DEFAULT_CATALOG

    return CE.ceilings_for(DEFAULT_CATALOG.accelerator(_accelerator(DEVICE_DIR / source)))


def _step_kernels(source: str, kind: str) -> list[dict[str, Any]]:
    """The step_kernels part's measured ``kind`` rows (gemm, attention) of ``source``."""
    from ringmaster.calibration.device_steps import DEVICE_DIR, _load

    data = _load(DEVICE_DIR / source, "step_kernels")
    return [r for r in ([] if data is None else data[kind]) if "us" in r]


def prompt_attention_rows(source: str) -> list[dict[str, Any]]:
    """One causal attention call alone (the step_kernels part): batch, heads, s, us."""
    return _step_kernels(source, "attention")


def predicted_attention_us(
    ce: CE.Ceilings, row: Mapping[str, Any], alpha: float, floor_us: float
) -> float:
    """A measured call's time by the ceilings' rate times its occupancy at ``alpha``, plus a
    floor: Ceilings.attention_occupancy's law with its coefficient set."""
    kernel = _SDPA_KERNEL[row["backend"]]
    s, batch, heads = float(row["s"]), float(row["batch"]), float(row["heads"])
    flops = 4.0 * batch * s * s * heads * 128 / 2.0
    filled = float(ce.attention_occupancy(batch, heads, s, alpha))
    return floor_us + flops / (float(ce.attention_flops(kernel, "forward", s, 128)) * filled) * 1e6


def fit_attention_occupancy(backend: str | None = None) -> tuple[float, float]:
    """(alpha, floor us) of engine.ceilings.ATTENTION_OCCUPANCY: least squares of the log error
    over the lent H100's calls (grid: alpha by 0.05, the floor by 0.5 us); ``backend``: on that
    SDPA backend's calls alone."""
    from ringmaster.engine.hardware import DEFAULT_CATALOG

    ce = CE.ceilings_for(DEFAULT_CATALOG.accelerator("nvidia-h100-80gb"))
    rows = [
        r
        for r in prompt_attention_rows(OCCUPANCY_FIT_SOURCE)
        if backend is None or r["backend"] == backend
    ]
    measured = np.array([r["us"] for r in rows])
    best: tuple[float, float, float] | None = None
    for alpha in np.round(np.arange(0.0, 2.0001, 0.05), 2):
        for floor in np.round(np.arange(0.0, 10.001, 0.5), 1):
            predicted = np.array([predicted_attention_us(ce, r, alpha, floor) for r in rows])
            sse = float(np.sum(np.log(predicted / measured) ** 2))
            if best is None or sse < best[0]:
                best = (sse, float(alpha), float(floor))
    assert best is not None
    return best[1], best[2]


def occupancy_leave_one_kernel_out() -> list[tuple[str, float, float, int, float]]:
    """(kernel left out, fitted alpha, refit alpha, rows, median |error|): the occupancy refit
    on the other kernel's H100 calls alone predicts the left-out kernel's calls on both chips."""
    alpha, _ = CE.ATTENTION_OCCUPANCY
    out = []
    pairs = (("FLASH_ATTENTION", "CUDNN_ATTENTION"), ("CUDNN_ATTENTION", "FLASH_ATTENTION"))
    for left, kept in pairs:
        refit, floor = fit_attention_occupancy(kept)
        errors = [
            e
            for source in (OCCUPANCY_FIT_SOURCE, OCCUPANCY_CHECK_SOURCE)
            for r, e in zip(
                prompt_attention_rows(source),
                occupancy_errors(source, refit, floor),
                strict=True,
            )
            if r["backend"] == left
        ]
        out.append((_SDPA_KERNEL[left], alpha, refit, len(errors), median(abs(e) for e in errors)))
    return out


def occupancy_errors(source: str, alpha: float, floor_us: float) -> list[float]:
    """predicted / measured - 1 of ``source``'s calls (its own chip's ceilings)."""
    ce = _lent_chip_ceilings(source)
    return [
        predicted_attention_us(ce, r, alpha, floor_us) / r["us"] - 1.0
        for r in prompt_attention_rows(source)
    ]


def elementwise_ps() -> dict[str, dict[str, float]]:
    """Median forward + backward picoseconds per element, per mode and op (the residual add's
    forward only: its backward passes through)."""
    rows = _rows(measured_h100()["memory_bound"])
    out: dict[str, dict[str, float]] = {}
    for mode in ("eager", "compiled"):
        out[mode] = {}
        for op in ("rmsnorm", "rope", "swiglu", "residual_add"):
            col = "fwd_ps_per_element" if op == "residual_add" else "fwdbwd_ps_per_element"
            out[mode][op] = round(
                median(r[col] for r in rows if r["op"] == op and r["mode"] == mode), 3
            )
    return out


MEASURED_HF_OPS = Path(__file__).with_name("measured") / "device" / "2026-11-26b-h100" / "ops.json"
# The ops of a Hugging Face Llama block per regime (ops.json's names): under autocast over fp32
# weights the residual stream is fp32 (norms in fp32, adds of fp32 and a bf16 branch, a cast
# before every linear layer and of every weight); with bf16 weights all of it is bf16.
HF_EAGER_OPS = {
    "autocast": {
        "rmsnorm": "hf_rmsnorm_fp32",
        "residual_add": "residual_add_fp32_bf16",
        "fork_add": "residual_add_fp32",
        "cast": "cast_fp32_to_bf16",
        "weight_cast": "weight_cast_fp32_to_bf16",
    },
    "bf16": {
        "rmsnorm": "hf_rmsnorm_bf16",
        "residual_add": "residual_add_bf16",
        "fork_add": "residual_add_bf16",
    },
}
HF_EAGER_COMMON_OPS = {"rope": "hf_rope_bf16", "swiglu": "swiglu_bf16",
                       "transpose": "transpose_reshape_bf16"}  # fmt: skip


def hf_eager_ps() -> dict[str, dict[str, float]]:
    """Median picoseconds per element (per parameter for weight casts) over hidden 2048-4096 of
    each op of a Hugging Face Llama block, forward + backward; ``fork_add`` is the add that sums
    a tensor's gradients where it feeds two ops (an add's forward alone)."""
    rows = json.loads(MEASURED_HF_OPS.read_text())["ops"]["rows"]

    def ps(name: str, forward_only: bool = False) -> float:
        chosen = [r for r in rows if r["op"] == name]
        if forward_only:
            return round(float(median(r["fwd_ms"] * 1e9 / r["elements"] for r in chosen)), 3)
        return round(float(median(r["ps_per_element"] for r in chosen)), 3)

    out: dict[str, dict[str, float]] = {}
    for regime, ops in HF_EAGER_OPS.items():
        names = {**ops, **HF_EAGER_COMMON_OPS}
        out[regime] = {op: ps(name, op == "fork_add") for op, name in names.items()}
    return out


def stream_gbps() -> float:
    rows = _rows(measured_h100()["memory_bound"])
    return float(
        round(
            median(
                r["fwdbwd_GBps"] for r in rows if r["op"] == "swiglu" and r["mode"] == "compiled"
            ),
            0,
        )
    )


def loss_ps() -> dict[str, float]:
    rows = _rows(measured_h100()["cross_entropy"])

    def med(mode: str, variant: str | None = None) -> float:
        values = [
            float(r["fwdbwd_ps_per_logit"])
            for r in rows
            if r["mode"] == mode and (variant is None or r["variant"] == variant)
        ]
        return round(median(values), 3)

    return {
        "eager_upcast": med("eager", "bf16_upcast"),
        "eager_fp32": med("eager", "fp32"),
        "compiled": med("compiled", "bf16_upcast"),
    }


def optimizer_ps() -> dict[str, float]:
    rows = _rows(measured_h100()["optimizer"])

    def med(item: str) -> float:
        values = [float(r["s_per_billion_params"]) for r in rows if r["item"] == item]
        return round(median(values) * 1000, 3)

    return {
        "adamw_fused": med("adamw_fused"),
        "adamw_foreach": med("adamw_foreach"),
        "grad_accumulate": med("grad_accumulate_foreach"),
        "copy_back": med("copy_back_foreach"),
        "zero_grads": med("zero_fp32_grads_foreach"),
    }


def copy_gbps() -> float:
    rows = _rows(measured_h100()["hbm"])
    return float(round(max(r["copy_GBps_read_plus_write"] for r in rows), 0))


def derive_ceiling_constants() -> dict[str, Any]:
    """Every H100 constant of engine.ceilings, from the measurements."""
    gemm = {p: fit_gemm(p) for p in ("bf16", "fp8", "fp8fast")}
    sustained, burst = sustained_and_burst()
    return {
        "H100_GEMM_EFFICIENCY": {p: v[0] for p, v in gemm.items()},
        "H100_GEMM_HALF_DIM": {p: v[1] for p, v in gemm.items()},
        "H100_SUSTAINED_TFLOPS": sustained,
        "H100_BURST_TFLOPS": burst,
        "H100_ATTENTION": {
            (k, d): fit_attention(k, d)
            for k in ("flash2", "cudnn")
            for d in ("forward", "backward")
        },
        "H100_ELEMENTWISE_PS": elementwise_ps(),
        "H100_HF_EAGER_PS": hf_eager_ps(),
        "H100_STREAM_GBPS": stream_gbps(),
        "H100_LOSS_PS_PER_LOGIT": loss_ps(),
        "H100_OPTIMIZER_PS_PER_PARAMETER": optimizer_ps(),
        "H100_COPY_GBPS": copy_gbps(),
        "H100_DECODE_GEMM": {p: fit_decode_gemm(p) for p in ("bf16", "fp8", "fp8fast")},
        "H100_DECODE_ATTENTION": {k: fit_decode_attention(k) for k in ("flash2", "cudnn")},
        "ATTENTION_OCCUPANCY": fit_attention_occupancy(),
    }


class OperatorRow(NamedTuple):
    group: str
    setup: str
    measured: float  # seconds
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def operator_rows() -> list[OperatorRow]:
    """Every measured H100 operator against the engine's ceilings (all fitted rows: the file is
    the H100's fitting set). GEMMs of the grid at the burst cap (each shape runs briefly)."""
    from ringmaster.engine.ceilings import ceilings_for
    from ringmaster.engine.hardware import DEFAULT_CATALOG

    ce = ceilings_for(DEFAULT_CATALOG.accelerator("nvidia-h100-80gb"))
    rows: list[OperatorRow] = []
    for r in gemm_rows():
        flops = 2.0 * r["M"] * r["K"] * r["N"]
        for p in ("bf16", "fp8", "fp8fast"):
            rate = float(ce.gemm_flops(p, min(r["N"], r["K"]), r["M"], sustained=False))
            measured = flops / (r[f"{p}_tflops"] * 1e12)
            rows.append(
                OperatorRow(
                    f"gemm {p}",
                    f"{r['layer']} h{r['hidden']} tp{r['tp']} M{r['M']}",
                    measured,
                    flops / rate,
                )
            )
    for kernel, backend in ATTENTION_BACKEND.items():
        for r in attention_rows(backend):
            for direction, col in ATTENTION_COLUMN.items():
                work = r["fwd_flops"] * (2.5 if direction == "backward" else 1.0)
                measured = work / (r[col] * 1e12)
                rate = float(ce.attention_flops(kernel, direction, r["s"], r["d"]))
                rows.append(
                    OperatorRow(
                        f"attention {kernel} {direction}",
                        f"d{r['d']} H{r['H']} s{r['s']}",
                        measured,
                        work / rate,
                    )
                )
    for r in decode_gemm_rows():
        for p in ("bf16", "fp8", "fp8fast"):
            gemm_seconds = ce.decode_gemm_seconds(
                p,
                r["K"] * r["N"] * _WEIGHT_BYTES[p],
                2.0 * r["M"] * r["K"] * r["N"],
                min(r["K"], r["N"]),
            )
            rows.append(
                OperatorRow(
                    f"decode gemm {p}",
                    f"{r['layer']} h{r['hidden']} tp{r['tp']} M{r['M']}",
                    (r[f"{p}_us_r1"] + r[f"{p}_us_r2"]) / 2e6,
                    float(gemm_seconds),
                )
            )
    for kernel, backend in ATTENTION_BACKEND.items():
        for r in decode_attention_rows(backend):
            rows.append(
                OperatorRow(
                    f"decode attention {kernel}",
                    f"b{r['batch']} ctx{r['context']}",
                    (r["us_r1"] + r["us_r2"]) / 2e6,
                    float(ce.kv_read_seconds(kernel, r["kv_bytes"])),
                )
            )
    for r in _rows(measured_h100()["memory_bound"]):
        forward_only = r["op"] == "residual_add"
        us = (
            (r["fwd_us_r1"] + r["fwd_us_r2"]) / 2
            if forward_only
            else (r["fwdbwd_us_r1"] + r["fwdbwd_us_r2"]) / 2
        )
        predicted = ce.elementwise_seconds(r["mode"], r["op"], r["elements"])
        rows.append(
            OperatorRow(
                f"memory-bound {r['mode']}", f"{r['op']} h{r['hidden']}", us * 1e-6, predicted
            )
        )
    variant_mode = {"bf16_upcast": "eager_upcast", "fp32": "eager_fp32"}
    for r in _rows(measured_h100()["cross_entropy"]):
        mode = "compiled" if r["mode"] == "compiled" else variant_mode.get(r["variant"])
        if mode is None or (r["mode"] == "compiled" and r["variant"] != "bf16_upcast"):
            continue
        ms = [x for x in (r["fwdbwd_ms_r1"], r["fwdbwd_ms_r2"]) if x is not None]
        rows.append(
            OperatorRow(
                "loss",
                f"{r['mode']} {r['variant']} V{r['vocab']}",
                float(np.mean(ms)) * 1e-3,
                float(ce.loss_seconds(mode, r["vocab"] * r["tokens"])),
            )
        )
    items = {
        "adamw_fused": "adamw_fused",
        "adamw_foreach": "adamw_foreach",
        "grad_accumulate_foreach": "grad_accumulate",
        "copy_back_foreach": "copy_back",
        "zero_fp32_grads_foreach": "zero_grads",
    }
    for r in _rows(measured_h100()["optimizer"]):
        if r["item"] in items:
            rows.append(
                OperatorRow(
                    "optimizer",
                    f"{r['item']} {r['params'] / 1e9:g}B",
                    (r["ms_r1"] + r["ms_r2"]) / 2e3,
                    ce.optimizer_seconds(items[r["item"]], r["params"]),
                )
            )
    return rows


def render_ceilings_section() -> str:
    """Per group of operators: rows, median |error|, share within 10 %, largest."""
    groups: dict[str, list[float]] = {}
    for row in operator_rows():
        groups.setdefault(row.group, []).append(abs(row.error))
    lines = [
        "H100 SXM operator ceilings (fitted on calibration/measured/h100-sxm-ops.yaml; every row "
        "fitted):",
        f"  {'group':<30} {'rows':>5} {'median |error|':>15} {'within 10%':>11} {'largest':>8}",
    ]
    for group, errors in groups.items():
        within = sum(e <= 0.10 for e in errors) / len(errors)
        lines.append(
            f"  {group:<30} {len(errors):>5} {median(errors):>15.1%} {within:>11.0%}"
            f" {max(errors):>8.1%}"
        )
    return "\n".join(lines + occupancy_lines() + ridge_lines() + sustained_lines())


def sustained_lines() -> list[str]:
    """The published power caps (engine.ceilings.PUBLISHED_SUSTAINED_RATIO) beside the burst
    ratios, and the method's check on the lent H200."""
    chip, azure, measured, burst = sustained_check()
    lines = [
        "Power caps of other chips: sustained matmul over the H100's (fractions of each peak), "
        f"{CE.SUSTAINED_SOURCE}; the burst ratio (MAMF) beside it"
    ]
    for (acc, precision), ratio in CE.PUBLISHED_SUSTAINED_RATIO.items():
        carried = CE.CARRIED_SUSTAINED.get(acc)
        how = f"carried: {carried}'s drop from burst" if carried else "fitted: its Azure row"
        burst_ratio = CE.PUBLISHED_MATMUL_RATIO[(acc, precision)]
        lines.append(
            f"  {acc:<18} {precision:<5} sustained {ratio:.3f}, burst {burst_ratio:.3f} ({how})"
        )
    lines.append(
        f"  {chip:<18} fp8   checked: the Azure rows read {azure:.3f}, the lent pair measured "
        f"{measured:.3f} sustained ({azure / measured - 1:+.1%}); its burst {burst:.3f}"
    )
    return lines


def occupancy_lines() -> list[str]:
    """ATTENTION_OCCUPANCY's fit and check (median |error| with and without it)."""
    alpha, floor = CE.ATTENTION_OCCUPANCY
    lines = [
        f"Attention occupancy (engine.ceilings.ATTENTION_OCCUPANCY: alpha {alpha}, floor "
        f"{floor} us a call): one causal call alone, 128-8,192 tokens, 1-16 sequences, 16 and "
        "32 heads, FlashAttention 2 and cuDNN; predicted / measured - 1"
    ]
    for source, role in ((OCCUPANCY_FIT_SOURCE, "fitted"), (OCCUPANCY_CHECK_SOURCE, "checked")):
        with_it = occupancy_errors(source, alpha, floor)
        without = occupancy_errors(source, 0.0, 0.0)
        lines.append(
            f"  {source:<18} {role:<8} {len(with_it):>3} calls: median |error| "
            f"{median(abs(e) for e in with_it):.1%} (signed {median(with_it):+.1%}); at the "
            f"measured rates alone {median(abs(e) for e in without):.1%} "
            f"({median(without):+.1%})"
        )
    return lines


def ridge_gemm_rows(source: str) -> list[tuple[str, int, float, float]]:
    """(model, M, measured us, the ceilings' decode-batch GEMM model us) of a layer's four
    GEMMs alone at M tokens (the step_kernels part): the curve through the GEMMs' ridge."""
    ce = _lent_chip_ceilings(source)
    rows = _step_kernels(source, "gemm")
    out = []
    for model, m in sorted({(r["model"], r["m"]) for r in rows}):
        layer = [r for r in rows if (r["model"], r["m"]) == (model, m)]
        predicted = 0.0
        for r in layer:
            weights, flops = 2.0 * r["n"] * r["k"], 2.0 * m * r["n"] * r["k"]
            width = min(r["n"], r["k"])
            predicted += float(ce.decode_gemm_seconds("bf16", weights, flops, width)) * 1e6
        out.append((model, m, sum(r["us"] for r in layer), predicted))
    return out


def ridge_lines() -> list[str]:
    lines = [
        "GEMMs through the ridge (a layer's four GEMMs alone at M = 64-2,048, the step_kernels "
        "part): the ceilings' decode-batch model (fitted at M <= 512), predicted / measured - 1"
    ]
    for source in (OCCUPANCY_FIT_SOURCE, OCCUPANCY_CHECK_SOURCE):
        rows = ridge_gemm_rows(source)
        errors = [p / m - 1.0 for _, _, m, p in rows]
        ridge = [p / m - 1.0 for _, n, m, p in rows if 192 <= n <= 384]
        lines.append(
            f"  {source:<18} checked  {len(rows):>3} layers: median |error| "
            f"{median(abs(e) for e in errors):.1%} (signed {median(errors):+.1%}), at M "
            f"192-384 {median(ridge):+.1%}; worst {min(errors):+.0%} (M = 448: cuBLAS picks a "
            "slower kernel there than at 512)"
        )
    return lines


PUBLISHED_CEILINGS = Path(__file__).with_name("ceilings_points.yaml")


@lru_cache(maxsize=1)
def published_ceilings() -> dict[str, dict[str, Any]]:
    return {p["id"]: p for p in read_yaml(PUBLISHED_CEILINGS)["points"]}


def _fraction(pid: str) -> float:
    p = published_ceilings()[pid]
    return float(p["value"]) / float(p["datasheet_peak"])


# The maximum-achievable-matmul rows each ratio is computed from (one table, one method).
MAMF_ROWS = {
    ("nvidia-tesla-a100", "bf16"): "mamf-a100-sxm-bf16",
    ("nvidia-a100-80gb", "bf16"): "mamf-a100-sxm-bf16",
    ("nvidia-h200-141gb", "bf16"): "mamf-h200-sxm-bf16",
    ("nvidia-h200-141gb", "fp8"): "mamf-h200-sxm-fp8",
    ("nvidia-b200", "bf16"): "mamf-b200-sxm-bf16",
    ("nvidia-b200", "fp8"): "mamf-b200-sxm-fp8",
    ("nvidia-gb200", "bf16"): "mamf-gb200-bf16",
    ("nvidia-gb200", "fp8"): "mamf-gb200-fp8",
}
TRIAD_ROWS = {
    "nvidia-a100-80gb": "azure-a100-80gb-hbm-triad",
    "nvidia-h200-141gb": "azure-h200-hbm-triad",
    "amd-mi300x": "azure-mi300x-hbm-triad",
}
# Sustained matmul over the H100's, one method on both (Azure's AI-benchmarking-guide: cuBLASLt
# FP8 at m = n = k = 16384 after 10,000 warm-up iterations, each chip at its power cap): the
# chip's row and the H100's. The power cap of these chips scales by it (engine.ceilings
# .PUBLISHED_SUSTAINED_RATIO), their shape model still by the burst table's ratio.
H100_SUSTAINED_ROW = "azure-h100-fp8-gemm-16384"
SUSTAINED_ROWS = {("nvidia-gb200", "fp8"): ("azure-gb200-fp8-gemm-16384", H100_SUSTAINED_ROW)}
# Chips with no sustained row of their own that carry another's drop from burst to sustained:
# the B200 is the GB200's GPU on a lower power limit (1,000 W against 1,200 W), so its cap
# falls below its burst at least as far; the GB200's measured drop is carried, said so in the
# plan's evidence (engine.ceilings.CARRIED_SUSTAINED).
CARRIED_SUSTAINED_FROM = {("nvidia-b200", "fp8"): "nvidia-gb200"}
# The sustained rows' check: the H200's row of the same table over the H100's, against the
# sustained ratio measured on the lent pair (calibration/measured/device).
SUSTAINED_CHECK_ROW = ("nvidia-h200-141gb", "fp8", "azure-h200-fp8-gemm-16384")
# AMD parts: the MAMF table has their bf16 rows (torch.mm with TunableOp); their FP8 fraction is
# the bf16 one times AMD's own FP8 / BF16 ratio of maximum achievable FLOPS (ROCm blog, measuring
# max achievable FLOPS part 2: hipBLASLt, one method for both precisions).
AMD_ROWS = {
    "amd-mi300x": ("mamf-mi300x-bf16-torch", "amd-maf-mi300x-bf16", "amd-maf-mi300x-fp8"),
    "amd-mi325x": ("mamf-mi325x-bf16-torch", "amd-maf-mi325x-bf16", "amd-maf-mi325x-fp8"),
}
# FlashAttention 2, forward + backward, causal, head dim 128, 16k tokens (the repository's
# benchmark figures): 189 TFLOP/s on the A100 80GB (ceilings_points.yaml) and 328 on the H100
# (the same row's note: "Causal hdim128 16k: 328").
FLASH2_H100_CAUSAL_TFLOPS = 328.0


# Chips measured by the PoolProfile payload on a lent machine, beside a lent H100 measured the
# same way (calibration/measured/device: the same script, driver and PyTorch, one day): their
# ratios to the H100 come from that pair, not from the published tables.
MEASURED_PAIRS = {"nvidia-h200-141gb": ("2026-11-26-h200", "2026-11-26-h100")}
DEVICE_DIR = Path(__file__).with_name("measured") / "device"


def measured_pair_ratios(
    accelerator: str,
) -> tuple[dict[str, float], dict[str, float], float]:
    """({precision: burst matmul ratio}, {precision: sustained matmul ratio}, HBM ratio) of
    ``accelerator`` to the H100, each as fractions of the two chips' own datasheet peaks, from the
    payloads of MEASURED_PAIRS. The burst rate is the published tables' kind (what the shape model
    and short steps scale by); the sustained one the power cap's."""
    from ringmaster.engine.hardware import DEFAULT_CATALOG

    chip, h100 = (
        json.loads((DEVICE_DIR / folder / "payload.json").read_text())
        for folder in MEASURED_PAIRS[accelerator]
    )
    a, b = DEFAULT_CATALOG.accelerator(accelerator), DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")

    def ratios(rate: str) -> dict[str, float]:
        return {
            p: round((chip[rate][p] / (a.peak(p) / 1e12)) / (h100[rate][p] / (b.peak(p) / 1e12)), 4)
            for p in ("bf16", "fp8")
        }

    hbm = (chip["hbmGBps"] * 1e9 / a.memory_bandwidth) / (
        h100["hbmGBps"] * 1e9 / b.memory_bandwidth
    )
    return ratios("burstTflops"), ratios("sustainedTflops"), round(hbm, 4)


def derive_published_ratios() -> dict[str, Any]:
    """PUBLISHED_MATMUL_RATIO, PUBLISHED_HBM_RATIO, FLASH2_AMPERE_RATIO and
    PUBLISHED_SUSTAINED_RATIO of engine.ceilings (a chip of MEASURED_PAIRS: its measured ratios
    instead of the published ones, MEASURED_SUSTAINED_RATIO)."""
    h100 = {"bf16": _fraction("mamf-h100-sxm-bf16"), "fp8": _fraction("mamf-h100-sxm-fp8")}
    matmul = {key: round(_fraction(pid) / h100[key[1]], 4) for key, pid in MAMF_ROWS.items()}
    for acc, (mamf, maf_bf16, maf_fp8) in AMD_ROWS.items():
        matmul[(acc, "bf16")] = round(_fraction(mamf) / h100["bf16"], 4)
        fp8 = _fraction(mamf) * _fraction(maf_fp8) / _fraction(maf_bf16)
        matmul[(acc, "fp8")] = round(fp8 / h100["fp8"], 4)
    triad = _fraction("azure-h100-hbm-triad")
    hbm = {acc: round(_fraction(pid) / triad, 4) for acc, pid in TRIAD_ROWS.items()}
    sustained: dict[tuple[str, str], float] = {}
    for acc in MEASURED_PAIRS:
        burst, capped, hbm[acc] = measured_pair_ratios(acc)
        for precision in burst:
            matmul[(acc, precision)] = burst[precision]
            sustained[(acc, precision)] = capped[precision]
    a100 = _fraction("fa2-a100-80gb-fwdbwd-hdim128-causal")
    flash = round(a100 / (FLASH2_H100_CAUSAL_TFLOPS / CE.H100_PEAK_TFLOPS["bf16"]), 4)
    published_sustained = {
        key: round(_fraction(chip) / _fraction(h100_row), 4)
        for key, (chip, h100_row) in SUSTAINED_ROWS.items()
    }
    for key, source in CARRIED_SUSTAINED_FROM.items():
        drop = published_sustained[(source, key[1])] / matmul[(source, key[1])]
        published_sustained[key] = round(matmul[key] * drop, 4)
    return {
        "PUBLISHED_MATMUL_RATIO": matmul,
        "PUBLISHED_HBM_RATIO": hbm,
        "FLASH2_AMPERE_RATIO": flash,
        "MEASURED_SUSTAINED_RATIO": sustained,
        "PUBLISHED_SUSTAINED_RATIO": published_sustained,
    }


def sustained_check() -> tuple[str, float, float, float]:
    """(chip, the sustained ratio the Azure rows give, the lent pair's measured sustained ratio,
    its measured burst ratio) for SUSTAINED_CHECK_ROW: how far the Azure method reads a power
    cap where both are known."""
    chip, precision, row = SUSTAINED_CHECK_ROW
    azure = _fraction(row) / _fraction(H100_SUSTAINED_ROW)
    burst, capped, _ = measured_pair_ratios(chip)
    return chip, round(azure, 4), capped[precision], burst[precision]
