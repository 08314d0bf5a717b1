"""The serving evidence matrix: accelerator generation x serving engine x weight precision, with
the fitted and checked published runs in each cell and the checked rows' errors (issue 46).

Its rows are the LLM serving table's (calibration.llm_serving: gpt-fast and TensorRT-LLM's own
tables, fitted and checked), the serving engines' runs (calibration.serving_engines: vLLM,
SGLang and TensorRT-LLM from many sources: checked, but the rows that fit vLLM's step
fraction on the MI300X) and the closed-loop runs' TPOT (calibration.closed_loop_runs:
AIConfigurator's measured vLLM, SGLang and TensorRT-LLM runs on the H100, H200 and B200;
checked, but TensorRT-LLM's B200 FP4 runs). Every error is in one sign, + where the
engine promises more than ran: a throughput predicted higher, a latency predicted shorter.
A mixture of experts' runs sit in cells of their own (the engine named with MOE_SUFFIX): their
step has parts a dense model's has not (the routed experts' grouped GEMMs, the experts' share of
the weights), so a dense cell's error says nothing of them, and theirs would hide a dense cell's.
:func:`serving_cell_evidence` is what an LLM endpoint's plan states: its cell (the MoE one for a
mixture of experts) and the cell's checked error, or that no checked run of its engine on its
accelerator at its precision exists. A plan reads the cells as stored (STORED_SERVING_CELLS, a
test keeps them equal to the live ones), since the live ones predict every closed-loop run (~5 s).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import median

from ringmaster.calibration import closed_loop_runs as CLR
from ringmaster.calibration import llm_serving as LC
from ringmaster.calibration import serving_engines as SE
from ringmaster.calibration.evidence import (
    HELD_OUT_MEDIAN_GOAL,
    HELD_OUT_SIGNED_GOAL,
    LEAN_MIN_ROWS,
    Cell,
    cells_json,
    generation,
    read_cells,
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
    moe: bool = False  # a mixture of experts' run: a cell of its own

    @property
    def cell_engine(self) -> str:
        """The engine as the matrix's column names the row's cell."""
        return engine_column(self.engine, self.moe)


# A mixture of experts' cells: the engine's name with this after it.
MOE_SUFFIX = " (MoE)"
ENGINE_COLUMN = 18  # "TensorRT-LLM (MoE)"


def engine_column(engine: str, moe: bool) -> str:
    return f"{engine}{MOE_SUFFIX}" if moe else engine


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
            r.moe,
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
                e.moe,
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
                run.moe,
            )
        )
    return rows


@lru_cache(maxsize=1)
def serving_cells() -> tuple[Cell, ...]:
    """The cells: a cell's median |error| is over its rows' own quantities (a latency's error is
    its time's), its signed median in the matrix's sign."""
    grouped: dict[tuple[str, str, str], list[ServingRow]] = defaultdict(list)
    for row in serving_rows():
        grouped[(row.generation, row.cell_engine, row.precision)].append(row)
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


# The cells as serving_cells() computes them, written by write_stored_serving_cells()
# (tests/engine/test_serving_evidence.py keeps it equal to them).
STORED_SERVING_CELLS = Path(__file__).with_name("serving_cells.json")


@lru_cache(maxsize=1)
def stored_serving_cells() -> tuple[Cell, ...]:
    """The cells a plan reads: serving_cells() as last written to STORED_SERVING_CELLS."""
    return read_cells(STORED_SERVING_CELLS)


def serving_cell_evidence(
    accelerator: str,
    engine: str,
    precision: str,
    moe: bool = False,
    cells: tuple[Cell, ...] | None = None,
) -> str:
    """What an LLM endpoint's prediction for ``engine`` on ``accelerator`` with ``precision``
    weights rests on: its cell's checked runs (a mixture of experts' ``moe`` cell), or
    "extrapolated" and where the engine (its mixtures of experts) was checked instead; for a
    mixture of experts without a checked run of its own, the dense cell's figures too, named as
    the dense runs' they are. ``cells`` defaults to the stored ones."""
    gen = generation(accelerator)
    column = engine_column(engine, moe)
    if cells is None:
        cells = stored_serving_cells()
    by_key = {(c.generation, c.framework, c.precision): c for c in cells}
    cell = by_key.get((gen, column, precision))
    if cell is not None and cell.checked:
        return f"serving cell {cell.describe()}"
    kind = "mixture-of-experts serving run" if moe else "serving run"
    nearest = [c for c in cells if c.framework == column and c.checked]
    near = "; ".join(
        f"{c.generation} {c.precision}: median {c.checked_median:.1%}" for c in nearest
    )
    what = f"{engine}'s mixtures of experts" if moe else engine
    tail = f" ({what} checked on {near})" if near else f" (no checked run of {what} at all)"
    text = f"extrapolated: no checked {kind} of {engine} on {gen} at {precision}{tail}"
    dense = by_key.get((gen, engine, precision))
    if moe and dense is not None and dense.checked:
        text += (
            f"; its dense cell {dense.describe()} (dense models only: the routed experts' part "
            "of the step is not checked by them)"
        )
    return text


def moe_serving_evidence() -> str:
    """The checked mixture-of-experts serving runs (whose engines and chips), their median
    |error| and signed median: the matrix's MoE cells in one line."""
    rows = [r for r in serving_rows() if r.moe and r.role == "checked"]
    if not rows:
        return "mixture of experts: no checked serving run"
    engines = ", ".join(sorted({r.engine for r in rows}))
    chips = ", ".join(sorted({r.generation for r in rows}))
    return (
        f"mixture of experts: {len(rows)} checked serving runs ({engines} on {chips}), median "
        f"|error| {median(abs(r.error) for r in rows):.1%}, signed median "
        f"{median(r.promise for r in rows):+.1%}"
    )


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
        f"{'accelerator':<10} {'engine':<{ENGINE_COLUMN}} {'precision':<9} {'fitted':>6}"
        f" {'checked':>7}"
        f" {'median |error|':>14} {'signed':>8}",
    ]
    lines.extend(c.table_row(ENGINE_COLUMN) for c in serving_cells())
    rows, med, signed_all = serving_checked_summary()
    lines.append(
        f"checked rows: {rows}, median |error| {med:.1%} (goal <= {HELD_OUT_MEDIAN_GOAL:.0%}),"
        f" signed median {signed_all:+.1%}; '!': a cell of {LEAN_MIN_ROWS} checked rows or more"
        f" whose signed median is beyond +-{HELD_OUT_SIGNED_GOAL:.0%}. Every other cell is"
        " extrapolated, and an endpoint's plan says so (status.plan.evidence)."
    )
    lines.append(
        f"By model: {moe_serving_evidence()}; a mixture of experts' plan states its own cell"
        f" (engine{MOE_SUFFIX}), never a dense one's as its own"
    )
    return "\n".join(lines)


def write_stored_serving_cells() -> None:
    """Rewrite STORED_SERVING_CELLS from the live cells, after a change to the engine or its
    rows."""
    STORED_SERVING_CELLS.write_text(cells_json(serving_cells()), encoding="utf-8")
