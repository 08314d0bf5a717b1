"""The serving evidence matrix: accelerator generation x serving engine x weight precision, with
the fitted and checked published runs in each cell and the checked rows' errors (issue 46).

Its rows are the LLM serving table's (calibration.llm_serving: gpt-fast and TensorRT-LLM's own
tables, fitted and checked), the serving engines' runs (calibration.serving_engines: vLLM,
SGLang and TensorRT-LLM from many sources: checked, but the rows that fit vLLM's step
fraction on the MI300X) and the closed-loop runs' TPOT (calibration.closed_loop_runs:
AIConfigurator's measured vLLM, SGLang and TensorRT-LLM runs on the H100, H200 and B200;
checked, but TensorRT-LLM's B200 FP4 runs). Every error is in one sign, + where the
engine promises more than ran: a throughput predicted higher, a latency predicted shorter.
:func:`serving_cell_evidence` is what an LLM endpoint's plan states: its cell and the cell's
checked error, or that no checked run of its engine on its accelerator at its precision exists.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from statistics import median

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.calibration import llm_serving as LC
from ringmaster.calibration import serving_engines as SE
from ringmaster.calibration.evidence import (
    HELD_OUT_MEDIAN_GOAL,
    HELD_OUT_SIGNED_GOAL,
    LEAN_MIN_ROWS,
    Cell,
    generation,
)
from ringmaster.calibration.llm_training import training_points_for_report


@dataclass(frozen=True)
class ServingRow:
    source: str
    generation: str
    engine: str
    precision: str
    role: str  # fitted | checked
    error: float  # predicted / published - 1 of the row's own quantity
    promise: float  # the same in the matrix's sign: + = the engine promises more


def serving_rows() -> list[ServingRow]:
    """Every serving row with a prediction, in the matrix's terms."""
    rows = [
        ServingRow(
            r.id,
            generation(r.accelerator),
            r.engine,
            r.precision,
            r.role,
            r.error,
            r.promise_error,
        )
        for r in LC.llm_serving_rows(training_points_for_report())
    ]
    for e in SE.engine_rows():
        if e.error is None or e.promise_error is None:  # out of reach: nothing to compare
            continue
        accelerator = SE.ACCELERATORS.get(e.accelerator, e.accelerator)
        rows.append(
            ServingRow(
                e.id,
                generation(accelerator),
                e.engine,
                e.precision,
                e.role,
                e.error,
                e.promise_error,
            )
        )
    for run in CLR.closed_loop_runs():  # a TPOT is a latency: shorter predicted promises more
        rows.append(
            ServingRow(
                run.id,
                generation(run.accelerator),
                run.engine,
                run.precision,
                run.role,
                run.tpot_error,
                -run.tpot_error,
            )
        )
    return rows


@lru_cache(maxsize=1)
def serving_cells() -> tuple[Cell, ...]:
    """The cells: a cell's median |error| is over its rows' own quantities (a latency's error is
    its time's), its signed median in the matrix's sign."""
    grouped: dict[tuple[str, str, str], list[ServingRow]] = defaultdict(list)
    for row in serving_rows():
        grouped[(row.generation, row.engine, row.precision)].append(row)
    cells = []
    for (gen, engine, precision), rows in sorted(grouped.items()):
        checked = [r for r in rows if r.role == "checked"]
        cells.append(
            Cell(
                gen,
                engine,
                precision,
                sum(r.role == "fitted" for r in rows),
                len(checked),
                median(abs(r.error) for r in checked) if checked else None,
                median(r.promise for r in checked) if checked else None,
            )
        )
    return tuple(cells)


def serving_cell_evidence(accelerator: str, engine: str, precision: str) -> str:
    """What an LLM endpoint's prediction for ``engine`` on ``accelerator`` with ``precision``
    weights rests on: its cell's checked runs, or "extrapolated" and where the engine was
    checked instead."""
    gen = generation(accelerator)
    cells = serving_cells()
    for cell in cells:
        if (cell.generation, cell.framework, cell.precision) == (gen, engine, precision):
            if cell.checked:
                return f"serving cell {cell.describe()}, signed median {cell.checked_signed:+.1%}"
            break
    nearest = [c for c in cells if c.framework == engine and c.checked]
    near = "; ".join(
        f"{c.generation} {c.precision}: median {c.checked_median:.1%}" for c in nearest
    )
    tail = f" ({engine} checked on {near})" if near else f" (no checked run of {engine} at all)"
    return f"extrapolated: no checked serving run of {engine} on {gen} at {precision}{tail}"


def serving_checked_summary() -> tuple[int, float, float]:
    """(rows, median |error|, signed median) over every checked serving row."""
    checked = [r for r in serving_rows() if r.role == "checked"]
    if not checked:
        return 0, 0.0, 0.0
    return len(checked), median(abs(r.error) for r in checked), median(r.promise for r in checked)


def render_serving_matrix() -> str:
    """The serving matrix as ``ringmaster calibrate`` prints it."""
    lines = [
        "Evidence matrix (serving): accelerator x serving engine x weight precision; fitted /"
        " checked rows, the checked median |error| and signed median (+ = the engine promises"
        " more: a throughput higher, a latency shorter)",
        f"{'accelerator':<10} {'engine':<13} {'precision':<9} {'fitted':>6} {'checked':>7}"
        f" {'median |error|':>14} {'signed':>8}",
    ]
    lines.extend(c.table_row(13) for c in serving_cells())
    rows, med, signed_all = serving_checked_summary()
    lines.append(
        f"checked rows: {rows}, median |error| {med:.1%} (goal <= {HELD_OUT_MEDIAN_GOAL:.0%}),"
        f" signed median {signed_all:+.1%}; '!': a cell of {LEAN_MIN_ROWS} checked rows or more"
        f" whose signed median is beyond +-{HELD_OUT_SIGNED_GOAL:.0%}. Every other cell is"
        " extrapolated, and an endpoint's plan says so (status.plan.evidence)."
    )
    return "\n".join(lines)
