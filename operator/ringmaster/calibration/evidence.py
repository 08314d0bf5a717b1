"""The evidence behind a training verdict: accelerator generation x framework x precision.

Every published training row the engine is held against (calibration.llm_training: Megatron-LM
SC'21, torchtitan's A100 table, MaxText on v5e, NeMo's DGX H100 tables; calibration.multislice;
the plain-PyTorch steps measured on the lent H100 and H200, calibration.device_steps) falls in one
cell; a cell counts its fitted rows (a constant was set on them) and its checked rows
(only compared) with their median |error|. :func:`cell_evidence` is what ``plan`` and
``status.plan.evidence`` show for a prediction: its cell, or ``extrapolated: no checked run of
<framework> on <accelerator>`` with the nearest cells that do exist. The H100's operator ceilings
are a separate line: they are measured kernels, not steps.

Leave-one-source-out (:func:`leave_one_source_out`): each step-level fitted constant is refitted
without the source it was fitted on and that source's rows are predicted: the honest estimate of
the error on runs the engine has not seen. Where a constant has a single source the refit falls
back to what the engine does without it (the H100's measured fractions carried over: factor 1).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from statistics import median

from ringmaster.calibration import llm_training as T
from ringmaster.calibration.device_steps import DeviceRow, device_rows
from ringmaster.calibration.multislice import multislice_report
from ringmaster.calibration.points import CHECKED
from ringmaster.engine import llm_training as L

_GENERATIONS = (
    ("a100", "A100"),
    ("h100", "H100"),
    ("h200", "H200"),
    ("gb200", "GB200"),
    ("b200", "B200"),
    ("v100", "V100"),
    ("tpu-v4", "TPU v4"),
    ("tpu-v5-lite", "TPU v5e"),
    ("tpu-v5p", "TPU v5p"),
    ("tpu-v6e", "TPU v6e"),
    ("mi300x", "MI300X"),
    ("mi325x", "MI325X"),
)


def generation(accelerator: str) -> str:
    """The generation a catalog accelerator belongs to (cells are per generation)."""
    for hint, name in _GENERATIONS:
        if hint in accelerator:
            return name
    return accelerator


@dataclass(frozen=True)
class CellRow:
    source: str
    generation: str
    framework: str
    precision: str
    role: str  # fitted | checked
    error: float


def throughput_error(row: DeviceRow) -> float:
    """A measured step's error in the matrix's sign (+ = the engine promises more): the device
    rows compare times (predicted / measured - 1), the published ones tokens per second."""
    return row.measured / row.predicted - 1.0


@dataclass(frozen=True)
class Cell:
    generation: str
    framework: str
    precision: str
    fitted: int
    checked: int
    checked_median: float | None  # median |error| of the checked rows
    # Their signed median (+ = the engine promises more than ran): a cell whose rows lean one way
    # by more than HELD_OUT_SIGNED_GOAL is a systematic error, not scatter (issue 41's goal).
    checked_signed: float | None = None

    @property
    def leans(self) -> bool:
        """LEAN_MIN_ROWS checked rows or more whose signed median is beyond HELD_OUT_SIGNED_GOAL:
        the engine errs one way there, which scatter cannot excuse."""
        return (
            self.checked >= LEAN_MIN_ROWS
            and self.checked_signed is not None
            and abs(self.checked_signed) > HELD_OUT_SIGNED_GOAL
        )

    def table_row(self, column: int) -> str:
        """The cell as the matrices print it, its second column ``column`` wide."""
        err = f"{self.checked_median:.1%}" if self.checked_median is not None else "-"
        signed = f"{self.checked_signed:+.1%}" if self.checked_signed is not None else "-"
        return (
            f"{self.generation:<10} {self.framework:<{column}} {self.precision:<9}"
            f" {self.fitted:>6} {self.checked:>7} {err:>14} {signed:>8}"
            + ("  !" if self.leans else "")
        )

    def describe(self) -> str:
        """The cell as a plan's evidence states it: its checked runs' median |error| and signed
        median, and which way it leans where it does (a plan there is off that way, not only
        that far)."""
        where = f"{self.generation} x {self.framework} x {self.precision}"
        if not self.checked:
            return f"{where}: {self.fitted} fitted runs, none checked"
        runs = "run" if self.checked == 1 else "runs"
        text = f"{where}: {self.checked} checked {runs}, median |error| {self.checked_median:.1%}"
        if self.checked_signed is not None:
            text += f", signed median {self.checked_signed:+.1%}"
            if self.leans:
                way = "more" if self.checked_signed > 0 else "less"
                text += f" (a lean: the engine promised {way} than these runs delivered)"
        return text + (f", {self.fitted} fitted" if self.fitted else "")


def _training_rows() -> list[CellRow]:
    points = T.training_points_for_report()
    rows: list[CellRow] = []
    for size, pub, pred in T._megatron(points, L.GEMM_STEP_FIT["ampere"]):
        role = "fitted" if size in T.FITTED_MEGATRON else "checked"
        rows.append(
            CellRow("megatron-sc21-table1", "A100", "Megatron", "bf16", role, pred / pub - 1)
        )
    for _, pub, pred in T._torchtitan(points, L.GEMM_STEP_FIT["ampere"]):
        rows.append(
            CellRow("torchtitan-a100-fsdp", "A100", "Torchtitan", "bf16", "checked", pred / pub - 1)
        )
    for size, pub, pred in T._maxtext(points, L.GEMM_STEP_FIT["tpu"]):
        role = "fitted" if size in T.FITTED_MAXTEXT else "checked"
        rows.append(CellRow("maxtext-v5e", "TPU v5e", "MaxText", "bf16", role, pred / pub - 1))
    for _, pub, pred, _ in T.maxtext_v5p():
        rows.append(CellRow("maxtext-v5p", "TPU v5p", "MaxText", "bf16", "checked", pred / pub - 1))
    # The published layouts' throughput rows, each planned once (calibration.llm_training).
    measured = {r.id: r for r in T.throughput_report()}
    for row in T.training_points()["published_layouts"]:
        if str(row["id"]) not in measured:
            continue
        rows.append(
            CellRow(
                str(row["id"]).split("-")[0],
                generation(str(row["accelerator"])),
                T.published_framework(row),
                str(row["precision"]),
                measured[str(row["id"])].role,
                measured[str(row["id"])].error,
            )
        )
    for m in multislice_report():
        if m.quantity == "MFU":
            rows.append(
                CellRow("maxtext-multislice", "TPU v5e", "MaxText", "bf16", "checked", m.error)
            )
    for d in device_rows():  # whole steps (or forward + backward) measured on the lent GPUs
        if d.group.startswith("training"):
            rows.append(
                CellRow(
                    d.source,
                    generation(d.accelerator),
                    d.framework,
                    d.precision,
                    "checked",
                    throughput_error(d),
                )
            )
    return rows


@lru_cache(maxsize=1)
def training_cells() -> tuple[Cell, ...]:
    grouped: dict[tuple[str, str, str], list[CellRow]] = defaultdict(list)
    for row in _training_rows():
        grouped[(row.generation, row.framework, row.precision)].append(row)
    cells = []
    for (gen, fw, precision), rows in sorted(grouped.items()):
        checked = [r.error for r in rows if r.role == "checked"]
        cells.append(
            Cell(
                gen,
                fw,
                precision,
                sum(r.role == "fitted" for r in rows),
                len(checked),
                median(abs(e) for e in checked) if checked else None,
                median(checked) if checked else None,
            )
        )
    return tuple(cells)


def cells_json(cells: tuple[Cell, ...]) -> str:
    """A matrix's cells as their stored file holds them."""
    return json.dumps([asdict(c) for c in cells], indent=1) + "\n"


def read_cells(path: Path) -> tuple[Cell, ...]:
    return tuple(Cell(**c) for c in json.loads(path.read_text(encoding="utf-8")))


# The training cells as training_cells() computes them (it plans every published layout, ~0.5 s),
# for plans to read; written by write_stored_training_cells(), kept equal by
# tests/engine/test_step_parts.py.
STORED_TRAINING_CELLS = Path(__file__).with_name("training_cells.json")


@lru_cache(maxsize=1)
def stored_training_cells() -> tuple[Cell, ...]:
    return read_cells(STORED_TRAINING_CELLS)


def write_stored_training_cells() -> None:
    """Rewrite STORED_TRAINING_CELLS from the live cells, after a change to the engine or its
    rows."""
    STORED_TRAINING_CELLS.write_text(cells_json(training_cells()), encoding="utf-8")


def cell_evidence(
    accelerator: str, framework: str, precision: str, cells: tuple[Cell, ...] | None = None
) -> str:
    """What a prediction for ``framework`` on ``accelerator`` at ``precision`` rests on, read
    from ``cells`` (the stored ones by default)."""
    gen = generation(accelerator)
    if cells is None:
        cells = stored_training_cells()
    for cell in cells:
        if (cell.generation, cell.framework, cell.precision) == (gen, framework, precision):
            if cell.checked:
                return cell.describe()
            break
    nearest = [c for c in cells if c.framework == framework and c.checked]
    near = "; ".join(
        f"{c.generation} {c.precision}: median {c.checked_median:.1%}" for c in nearest
    )
    tail = (
        f" ({framework} checked on {near})" if near else f" (no checked run of {framework} at all)"
    )
    return f"extrapolated: no checked run of {framework} on {gen} at {precision}{tail}"


@lru_cache(maxsize=1)
def context_parallel_runs() -> tuple[tuple[str, str, float], ...]:
    """The checked published runs that split the sequence (context above 1): (framework,
    accelerator generation, error in the matrix's sign) each. A feature's own evidence beside
    its cell's: these runs lean one way."""
    measured = {r.id: r for r in T.throughput_report()}
    return tuple(
        (
            T.published_framework(row),
            generation(str(row["accelerator"])),
            measured[str(row["id"])].error,
        )
        for row in T.training_points()["published_layouts"]
        if int(row.get("context", 1)) > 1
        and str(row["id"]) in measured
        and measured[str(row["id"])].role == "checked"
    )


def context_parallel_evidence() -> str:
    """What a context-parallel prediction rests on, beyond its cell: the checked runs with
    context parallelism (whose frameworks and chips they are), their median |error| and signed
    median (+ = the engine promises more)."""
    runs = context_parallel_runs()
    if not runs:
        return "context parallelism: no checked run"
    errors = [e for _, _, e in runs]
    frameworks = ", ".join(sorted({f for f, _, _ in runs}))
    chips = ", ".join(sorted({g for _, g, _ in runs}))
    return (
        f"context parallelism: {len(runs)} checked runs ({frameworks} on {chips}), median "
        f"|error| {median(abs(e) for e in errors):.1%}, signed median {median(errors):+.1%}"
    )


@lru_cache(maxsize=8)
def moe_training_evidence(framework: str | None = None) -> str:
    """What a mixture of experts' training prediction rests on, beyond its cell (whose rows are
    dense models): the checked whole MoE steps and the checked expert exchanges
    (calibration.moe), with their errors; with ``framework``, that framework's own checked MoE
    steps, or that it has none (the others' are not its evidence). The packaged points' (a plan
    states it: computed once a framework)."""
    from ringmaster.calibration.moe import MOE_POINTS, moe_rows
    from ringmaster.calibration.points import load_points
    from ringmaster.engine.frameworks import DEFAULT_GPU_FRAMEWORK

    frameworks = {  # each training row's framework, as calibration.moe predicts it
        p["id"]: str(p.get("framework", DEFAULT_GPU_FRAMEWORK))
        for p in load_points(MOE_POINTS).get("training", [])
    }
    errors: dict[str, float] = {}
    exchanges: list[float] = []
    for r in moe_rows():
        if r.error is None or r.status != CHECKED:
            continue
        if r.quantity.startswith("MoE training"):
            errors[r.id] = r.error
        else:
            exchanges.append(r.error)
    worst = max(errors, key=lambda k: abs(errors[k]), default="")
    step_words = (
        f"{len(errors)} checked whole MoE steps, median |error| "
        f"{median(abs(e) for e in errors.values()):.1%}, signed median "
        f"{median(errors.values()):+.1%}, largest {worst} {errors[worst]:+.1%}"
        " (calibration/moe_points.yaml)"
        if errors
        else "no checked whole MoE step"
    )
    if framework is not None:
        own = [e for k, e in errors.items() if frameworks.get(k) == framework]
        step_words += (
            f", {framework}'s {len(own)}: median |error| {median(abs(e) for e in own):.1%}, "
            f"signed median {median(own):+.1%}"
            if own
            else f", none of them {framework}'s (extrapolated for {framework})"
        )
    exchange_words = (
        f"{len(exchanges)} checked expert exchanges (all-to-all, DeepEP), median |error| "
        f"{median(abs(e) for e in exchanges):.1%}"
        if exchanges
        else "no checked expert exchange"
    )
    return f"mixture of experts: the cells hold dense models only; {step_words}; {exchange_words}"


# Issue 41's held-out goals, against which the checked rows are summarised: the median |error| of
# all of them, and no cell's signed median beyond +-5 % (no systematic optimism or pessimism).
HELD_OUT_MEDIAN_GOAL = 0.10
HELD_OUT_SIGNED_GOAL = 0.05
# A cell's signed median is read as a lean only over this many checked rows (one row is a case).
LEAN_MIN_ROWS = 3


def leaning_cells() -> tuple[Cell, ...]:
    """The cells of LEAN_MIN_ROWS checked rows or more whose signed median is beyond
    HELD_OUT_SIGNED_GOAL: where the engine errs one way, which scatter cannot excuse."""
    return tuple(c for c in training_cells() if c.leans)


def checked_summary() -> tuple[int, float, float]:
    """(rows, median |error|, signed median) over every checked training row."""
    errors = [r.error for r in _training_rows() if r.role == "checked"]
    if not errors:
        return 0, 0.0, 0.0
    return len(errors), median(abs(e) for e in errors), median(errors)


def render_evidence_matrix() -> str:
    """The matrix as ``ringmaster calibrate`` prints it."""
    lines = [
        "Evidence matrix (training): accelerator x framework x precision; fitted / checked rows, "
        "the checked median |error| and signed median (+ = the engine promises more)",
        f"{'accelerator':<10} {'framework':<11} {'precision':<9} {'fitted':>6} {'checked':>7}"
        f" {'median |error|':>14} {'signed':>8}",
    ]
    lines.extend(c.table_row(11) for c in training_cells())
    rows, med, signed_all = checked_summary()
    lines.append(
        f"checked rows: {rows}, median |error| {med:.1%} (goal <= {HELD_OUT_MEDIAN_GOAL:.0%}),"
        f" signed median {signed_all:+.1%}; '!': a cell of {LEAN_MIN_ROWS} checked rows or more"
        f" whose signed median is beyond +-{HELD_OUT_SIGNED_GOAL:.0%}"
    )
    lines.append(
        f"By feature: {context_parallel_evidence()} (a context-parallel plan states it beside "
        f"its cell); {moe_training_evidence()} (a mixture of experts' plan states it beside its "
        "cell)"
    )
    lines.append(
        "Every other cell is extrapolated: the plan says so (status.plan.evidence). Operator "
        "ceilings: H100 SXM measured (calibration/measured/h100-sxm-ops.yaml); the H200 scales it "
        "by its ratios measured beside an H100 (calibration/measured/device); A100, B200, "
        "GB200, MI300X and MI325X by published ratios (calibration/ceilings_points.yaml); "
        "other chips "
        "carry the H100's fractions of their own datasheet."
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class LeaveOneOut:
    constant: str
    source: str
    fitted: float
    refitted: float
    rows: int
    median_error: float  # median |error| of the source's rows under the refit


def leave_one_source_out() -> list[LeaveOneOut]:
    """Each step-level fitted constant without its source: the source's rows predicted by the
    engine as it would be without them (single-source fits fall back to factor 1)."""
    points = T.training_points_for_report()
    fits = (
        ('GEMM_STEP_FIT["ampere"]', "megatron-sc21-table1", "ampere", T._megatron),
        (
            'GEMM_STEP_FIT["ampere"] (its checked source)',
            "torchtitan-a100-fsdp",
            "ampere",
            T._torchtitan,
        ),
        (
            'GEMM_STEP_FIT["ampere"] (its checked source)',
            T.FLAGPERF_A800,
            "ampere",
            T.flagperf_a800,
        ),
        ('GEMM_STEP_FIT["tpu"]', "maxtext-v5e", "tpu", T._maxtext),
        (
            'GEMM_STEP_FIT["tpu"] (its checked source)',
            "maxtext-v5p",
            "tpu",
            lambda _, fit: [(label, pub, pred) for label, pub, pred, _ in T.maxtext_v5p(fit)],
        ),
    )
    out = []
    for constant, source, family, report in fits:
        rows = report(points, 1.0)  # the engine without the fit: the carried fractions
        errors = [abs(pred / pub - 1) for _, pub, pred in rows]
        fitted = L.GEMM_STEP_FIT[family]
        out.append(LeaveOneOut(constant, source, fitted, 1.0, len(rows), median(errors)))
    return out


def _fp4_engine_fits() -> list[LeaveOneOut]:
    """engine.ceilings.MEASURED_FP4_MATMUL_RATIO, a median over three engines' tables: each
    engine left out, its NVFP4 prompt GEMMs predicted by the other two."""
    from ringmaster.calibration.aiconfigurator import fp4_leave_one_engine_out

    return [
        LeaveOneOut(
            f'MEASURED_FP4_MATMUL_RATIO["{chip.removeprefix("nvidia-")}"]',
            f"AIConfigurator {engine} NVFP4 GEMMs",
            fitted,
            refit,
            rows,
            error,
        )
        for chip, engine, fitted, refit, rows, error in fp4_leave_one_engine_out()
    ]


def _occupancy_kernel_fits() -> list[LeaveOneOut]:
    """engine.ceilings.ATTENTION_OCCUPANCY, fitted on two kernels' calls: each kernel left out,
    its calls on both lent chips predicted by the other kernel's fit."""
    from ringmaster.calibration.ceilings import occupancy_leave_one_kernel_out

    names = {"flash2": "FlashAttention 2", "cudnn": "cuDNN"}  # the kernel left out
    return [
        LeaveOneOut(
            "ATTENTION_OCCUPANCY (alpha)",
            f"{names[kernel]} calls, lent H100 + H200",
            fitted,
            refit,
            rows,
            error,
        )
        for kernel, fitted, refit, rows, error in occupancy_leave_one_kernel_out()
    ]


def _moe_sync_fits() -> list[LeaveOneOut]:
    """engine.frameworks.MEGATRON_MOE_SYNC_SECONDS (ms here), fitted on two sources: each left
    out, its rows predicted with the other's fit (calibration.moe.moe_sync_leave_one_out)."""
    from ringmaster.calibration.moe import moe_sync_leave_one_out

    return [
        LeaveOneOut(
            "MEGATRON_MOE_SYNC_SECONDS (ms)", source, fitted * 1e3, refit * 1e3, rows, error
        )
        for source, fitted, refit, rows, error in moe_sync_leave_one_out()
    ]


def _moe_routing_fits() -> list[LeaveOneOut]:
    """engine.moe_routing's measured bytes, fitted on two widths' ops on a lent H200: each width
    left out, its ops predicted with the other's fit."""
    from ringmaster.calibration.device_steps import moe_routing_leave_one_width_out

    return [LeaveOneOut(*row) for row in moe_routing_leave_one_width_out()]


def _overlap_fits() -> list[LeaveOneOut]:
    """engine.frameworks.MEGATRON_ONE_F_ONE_B_REALISED, fitted on one release: without it the
    schedule's ideal hiding (1), its rows and the checked releases' predicted with it."""
    from ringmaster.calibration.moe import overlap_leave_one_out

    return [
        LeaveOneOut("MEGATRON_ONE_F_ONE_B_REALISED", source, fitted, refit, rows, error)
        for source, fitted, refit, rows, error in overlap_leave_one_out()
    ]


def _two_source_fits() -> list[LeaveOneOut]:
    """Constants of engine.efficiency fitted as a mean over two sources: each source left out,
    the other alone sets the constant, and the left-out source's rows are predicted with it."""
    from ringmaster.calibration.points import RESNET50_OPERATIONS, point_by_id

    points = T.training_points_for_report()
    hw = points["hardware"]
    out = []
    one_nic = float(point_by_id(points, "one-100g-nic-internode-allreduce")["busbw_GBps"]) / 12.5
    gcp = [float(v) / 32.0 for v in point_by_id(points, "gcp-32gbe-tcp-2x1gpu")["busbw_Gbps"]]
    fitted = (one_nic + sum(gcp)) / (1 + len(gcp))
    without_29 = sum(gcp) / len(gcp)
    out.append(
        LeaveOneOut(
            "NIC_EFFICIENCY",
            "nccl-tests issue 29",
            fitted,
            without_29,
            1,
            abs(without_29 / one_nic - 1),
        )
    )
    out.append(
        LeaveOneOut(
            "NIC_EFFICIENCY",
            "nccl issue 209 (GCP TCP)",
            fitted,
            one_nic,
            len(gcp),
            median(abs(one_nic / g - 1) for g in gcp),
        )
    )
    eff = {}
    for system, acc in (("t4", "nvidia-tesla-t4"), ("a100-sxm", "nvidia-tesla-a100")):
        rate = float(
            point_by_id(points, f"mlperf-v0.7-{system}-resnet50-offline")["samples_per_second"]
        )
        eff[system] = rate * RESNET50_OPERATIONS / (float(hw[acc]["int8_tops"]) * 1e12)
    both = (eff["t4"] * eff["a100-sxm"]) ** 0.5
    for left, other in (("t4", "a100-sxm"), ("a100-sxm", "t4")):
        out.append(
            LeaveOneOut(
                "COMPUTE_EFFICIENCY",
                f"MLPerf v0.7 {left} ResNet-50 offline",
                both,
                eff[other],
                1,
                abs(eff[other] / eff[left] - 1),
            )
        )
    return out


# Fitted on a single source each: leaving it out leaves nothing to refit from (the engine would
# fall back to an assumed value), so their held-out error is unknown and said to be.
SINGLE_SOURCE = (
    ("NVLINK_EFFICIENCY", "nccl-tests issues 149/175 (8 x A100 NVLink)"),
    ("NVLS_EFFICIENCY", "nccl-tests issue 212 / nccl issue 1455 (8 x H100)"),
    ("NVLS_TREE_SHARE", "nccl issue 1221 (2 x 8 H100 RoCE)"),
    ("NVLS_EFFICIENCY_BLACKWELL", "coreweave/nccl-tests pull request 43 (one GB200 NVL72)"),
    ("XGMI_EFFICIENCY", "Azure AI-benchmarking-guide (8 x MI300X, RCCL)"),
    ("EFA_EFFICIENCY", "awsome-distributed-training (2 x p4de, aws-ofi-nccl 1.8.1)"),
    ("TCP_SHARED_NIC_EFFICIENCY", "nccl issue 209 (4 x 8 V100)"),
    ("PIPELINE_FILL_SECONDS_PER_STEP_BYTE", "awsome-distributed-training (2 x p4de)"),
    ("RING_FILL_LINK_STEPS", "Azure AI-benchmarking-guide (8 x A100 NVLink ring by size)"),
    ("INFERENCE_OVERHEAD_SECONDS", "MLPerf v0.7 A100 single-stream"),
    ("ALLOCATOR_OVERHEAD", "torchtitan docs/performance.md (H100 memory)"),
    (
        "TRITON_FLASH_ATTENTION_RATIO",
        "llm-foundry's A100-80GB MPT table (checked on its A100-40GB and H100 tables)",
    ),
    ("H100 ceilings (engine.ceilings)", "calibration/measured/h100-sxm-ops.yaml"),
    (
        "FP8_CAST_BYTES_PER_ELEMENT",
        "one FP8 linear layer on a lent H100 (device/2026-11-26c-h100 fp8_linear.json; checked "
        "on that machine's FP8 steps)",
    ),
    ("LLM serving constants", "TensorRT-LLM perf overview, gpt-fast, TensorRT-LLM TTFT"),
    (
        "SAMPLE_ROUNDS",
        "AIConfigurator's closed-loop sample, its vLLM H200 runs' TTFTs (checked on its other "
        "cells; the sample's harness, not the engine)",
    ),
    (
        "HOST_SECONDS_PER_REQUEST (engine.serving_engines)",
        "NVIDIA/TensorRT-LLM pull request #10273: host_step_time a step at 1,536 requests on a"
        " GB200's Grace (measured, not fitted; checked on TensorRT-LLM 1.0's GB200 MoE columns;"
        " x86 hosts and other engines' loops not modelled)",
    ),
    (
        "CHIP_DECODE_TERMS (A100, B200, GB200)",
        "AIConfigurator's vLLM operator databases, each chip over the H100 (the method checked on"
        " the H200's lent measurement)",
    ),
    (
        "ENGINE_ALLREDUCE (engine.tp_allreduce)",
        "AIConfigurator's all-reduce tables, one curve per chip x engine x GPU count on its own"
        " table (vLLM 0.14.0's H100 table checks vLLM 0.19.0's)",
    ),
    (
        "ENGINE_STEP_FRACTION (engine.serving_engines)",
        "vLLM 0.10.0 on 8 x MI300X, ROCm/vllm docs/dev-docker/README.md @ 040de12 (each other"
        " source's MI300X runs alone refit it within 0.03: the serving engines' section)",
    ),
    (
        "ENGINE_FP8_DECODE_GEMM (engine.serving_engines)",
        "AIConfigurator's GEMM tables, weight-bound rows, each engine's FP8 over its own bf16",
    ),
    (
        "ENGINE_DECODE_ATTENTION (engine.serving_engines)",
        "AIConfigurator's decode-attention tables, one curve per chip x engine x KV dtype (vLLM"
        " 0.14.0's H100 tables check vLLM 0.19.0's)",
    ),
    (
        "ENGINE_GEMM_RATE (engine.serving_engines)",
        "AIConfigurator's GEMM tables, each engine's Blackwell fraction of peak over its H100 one"
        " (its own engine's only; MEASURED_FP4_MATMUL_RATIO, their median, is left out above);"
        " TensorRT-LLM's NVFP4 entries replaced as served (below)",
    ),
    (
        "SERVED_FP4_DECODE_GEMM, SERVED_FP4_GEMM_RATE (engine.serving_engines)",
        "AIConfigurator's closed-loop B200 runs, TensorRT-LLM's FP4 over FP8 TPOT and TTFT"
        " (calibration.served_fp4); checked on TensorRT-LLM 1.0's and v0.21's NVFP4 runs on the"
        " B200 and GB200 (the GB200 carries the B200's)",
    ),
)


def render_leave_one_out() -> str:
    lines = [
        "Leave one source out (step-level fits): refit without the source, predict its rows",
        f"{'constant':<46} {'source':<40} {'fitted':>7} {'refit':>7} {'rows':>5}"
        f" {'median |error|':>15}",
    ]
    rows = [*leave_one_source_out(), *_two_source_fits(), *_fp4_engine_fits()]
    rows += [*_occupancy_kernel_fits(), *_moe_sync_fits(), *_overlap_fits()]
    for r in [*rows, *_moe_routing_fits()]:
        lines.append(
            f"{r.constant:<46} {r.source:<40} {r.fitted:>7.3f} {r.refitted:>7.3f} {r.rows:>5}"
            f" {r.median_error:>15.1%}"
        )
    lines.append("Single-source fits (no refit without their source; held-out error unknown):")
    lines.extend(f"  {name}: {source}" for name, source in SINGLE_SOURCE)
    return "\n".join(lines)


def collective_evidence(name: str, kind: str, link: str, arch: str, nvls: bool) -> str:
    """What the collectives inside a host or NVLink domain of ``name`` rest on (its ``kind``,
    ``link``, NCCL ``arch`` and whether NVLS runs), naming every constant the chip carries from
    another (the NVLink fraction and the ring's fill are fitted on A100s)."""
    if kind == "tpu":
        return "collectives: ICI at NVLink's fraction (borrowed: no published ICI curve)"
    if link == "xgmi":
        return (
            "collectives: xGMI fitted on 8 x MI300X under RCCL (Azure); a ring's fill at the "
            "link's rate carried from 8 x A100 NVLink (checked on 8 x MI300X)"
        )
    if link != "nvlink":
        return (
            "collectives: PCIe at NVLink's fraction and the network's fill a step "
            "(borrowed: no published PCIe curve)"
        )
    carried = "" if arch == "ampere" else f"carried to {name}; "
    text = (
        f"collectives: NVLink and a ring's fill fitted on 8 x A100 ({carried}the fill checked on "
        "4 x GB200, 8 x MI300X)"
    )
    if nvls and arch == "hopper":
        text += "; NVLS fitted on 8 x H100 (checked on 8 x H200)"
    elif nvls and arch == "blackwell":
        text += "; NVLS fitted on one GB200 NVL72 rack (checked on 8 x B200)"
    return text
