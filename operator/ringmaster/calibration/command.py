"""`ringmaster calibrate`: the engine beside the published measurements it is calibrated on.

For each point of ../shared/calibration/points.yaml (or --points FILE; a copy ships in the
package as ``ringmaster/calibration/points.yaml``) it prints the published figure, the engine's
prediction for the same setup, the relative error and the tolerance the tests hold it to, family
by family, fitted rows apart from checked ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ringmaster.calibration import evidence, llm_training
from ringmaster.calibration.aic_moe import render_moe_section
from ringmaster.calibration.aiconfigurator import render_section as render_aiconfigurator_section
from ringmaster.calibration.ceilings import render_ceilings_section
from ringmaster.calibration.closed_loop_runs import (
    render_closed_loop_section,
    render_more_models_section,
)
from ringmaster.calibration.collectives import collective_rows
from ringmaster.calibration.device_steps import render_device_section
from ringmaster.calibration.kv_transfer import KV_TRANSFER_MODEL, kv_transfer_rows
from ringmaster.calibration.llm_serving import (
    llm_serving_rows,
    render_checked_sources,
    summary_line,
)
from ringmaster.calibration.moe import MOE_MODEL, moe_rows
from ringmaster.calibration.multislice import render_multislice_section
from ringmaster.calibration.points import (
    CHECKED,
    EXIT_USAGE,
    FITTED,
    GOAL_MAX,
    GOAL_MEDIAN,
    LLM_SERVING_MODEL,
    NETWORK_MODEL,
    PACKAGED_POINTS,
    SHARED_POINTS,
    PointsError,
    Row,
    load_points,
)
from ringmaster.calibration.reduction_server import reduction_server_rows
from ringmaster.calibration.served_fp4 import render_served_fp4_section
from ringmaster.calibration.serving import serving_rows
from ringmaster.calibration.serving_engines import render_serving_engines_section
from ringmaster.calibration.serving_evidence import render_serving_matrix

# The data-parallel and network model's own points: the checked-error goal applies to these. The
# LLM serving rows (calibration.llm_serving, in the same table) and the LLM training section
# (calibration.llm_training, printed after it) state their own checked errors.
OWN_SECTIONS = ("collectives", "reduction_server", "inference")


def report(points: Mapping[str, Any]) -> list[Row]:
    """One row per published figure: the engine's prediction for the same setup, and whether a
    constant was fitted on it or it only checks the model. The ``llm_inference`` points come
    from the LLM serving model; the ``llm_training`` points have their own section
    (:func:`ringmaster.llm_training.render_llm_section`)."""
    rows = collective_rows(points) + reduction_server_rows(points) + serving_rows(points)
    rows += [
        Row(
            r.id,
            r.quantity,
            r.published,
            r.predicted,
            r.error,
            r.tolerance,
            r.role,
            "LLM serving model",
            model=LLM_SERVING_MODEL,
        )
        for r in llm_serving_rows(points)
    ]
    # Mixture-of-experts all-to-all: its own points file (calibration/moe_points.yaml).
    rows += moe_rows()
    # Prefill -> decode KV transfers (disaggregated serving): calibration/kv_transfer_points.yaml.
    rows += kv_transfer_rows()
    return rows


def kv_transfer_summary_line(rows: list[Row]) -> str:
    mine = [r for r in rows if r.model == KV_TRANSFER_MODEL and r.error is not None]
    fitted = [abs(r.error or 0.0) for r in mine if r.status != CHECKED]
    checked = [abs(r.error or 0.0) for r in mine if r.status == CHECKED]
    if not fitted and not checked:
        return "KV transfer: no points"
    line = (
        f"KV transfer (disaggregated serving): {len(fitted)} fitted points, median |error| "
        f"{statistics.median(fitted):.1%}, largest {max(fitted):.1%}; "
    )
    if not checked:
        return line + "0 checked: no published transfer is held out yet"
    return line + (
        f"{len(checked)} checked, median {statistics.median(checked):.1%}, largest "
        f"{max(checked):.1%}"
    )


def moe_summary_line(rows: list[Row]) -> str:
    """The MoE points: the all-to-alls and whole training steps checked, and the training rows
    that fit the dropless layers' host sync (engine.frameworks.MEGATRON_MOE_SYNC_SECONDS)."""
    moe = [(r.status, abs(r.error)) for r in rows if r.model == MOE_MODEL and r.error is not None]
    errors = [e for status, e in moe if status != FITTED]
    fitted = [e for status, e in moe if status == FITTED]
    if not errors:
        return "mixture of experts: no points"
    fit_words = (
        f"{len(fitted)} fitted (error median {statistics.median(fitted):.1%})"
        if fitted
        else "0 fitted"
    )
    return (
        f"mixture of experts (all-to-all, training steps): {len(errors)} checked points, "
        f"{fit_words}; checked median |error| {statistics.median(errors):.1%}, largest "
        f"{max(errors):.1%}"
    )


def checked_errors(rows: list[Row]) -> list[float]:
    """|error| of the checked rows of this model's own points (OWN_SECTIONS)."""
    return [
        abs(r.error)
        for r in rows
        if r.status == CHECKED and r.error is not None and r.model == NETWORK_MODEL
    ]


def summary(rows: list[Row]) -> tuple[float, float, int]:
    """Median and largest absolute error of the checked rows, and how many there are."""
    errors = checked_errors(rows)
    if not errors:
        return 0.0, 0.0, 0
    return statistics.median(errors), max(errors), len(errors)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4g}"


def render_table(rows: list[Row]) -> str:
    header = ("point", "quantity", "published", "predicted", "error", "status", "", "note")
    body = [
        (
            r.id,
            r.quantity,
            _num(r.published),
            _num(r.predicted),
            "-" if r.error is None else f"{r.error:+.1%}",
            r.status,
            "ok" if r.ok else "OUT",
            r.note,
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    right = {2, 3, 4}
    lines = []
    for line in [header, *body]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    median, largest, count = summary(rows)
    lines.append(
        f"collectives, reduction server, inference: {count} checked points; median |error| "
        f"{median:.1%} (goal < {GOAL_MEDIAN:.0%}), largest {largest:.1%} (goal <= {GOAL_MAX:.0%})"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--points",
        type=Path,
        default=None,
        help=f"published points (default: {SHARED_POINTS}, else the copy in the package)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    path: Path = args.points or (SHARED_POINTS if SHARED_POINTS.exists() else PACKAGED_POINTS)
    try:
        rows = report(load_points(path))
    except PointsError as exc:
        print(f"ringmaster calibrate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KeyError, TypeError, ValueError) as exc:
        print(f"ringmaster calibrate: {path}: missing or malformed field {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "json":
        out = [{**asdict(r), "ok": r.ok} for r in rows]
        median, largest, count = summary(rows)
        checked = {"count": count, "medianAbsError": median, "maxAbsError": largest}
        print(json.dumps({"points": str(path), "rows": out, "checked": checked}, indent=2))
    else:
        print(f"calibration points: {path}")
        print(render_table(rows))
        print(summary_line(load_points(path)) or "llm_inference: no points in this file")
        sources = render_checked_sources(load_points(path))
        if sources:
            print(sources)
        print(moe_summary_line(rows))
        print(kv_transfer_summary_line(rows))
        bad = sum(not r.ok for r in rows)
        print(f"{len(rows) - bad} of {len(rows)} within tolerance")
        print("\n" + llm_training.render_llm_section(load_points(path), path))
        print("\n" + render_multislice_section())
        print("\n" + render_ceilings_section())
        print("\n" + render_aiconfigurator_section())
        print("\n" + render_moe_section())
        print("\n" + render_serving_engines_section())
        print("\n" + render_closed_loop_section())
        print("\n" + render_more_models_section())
        print("\n" + render_served_fp4_section())
        print("\n" + render_device_section())
        print("\n" + evidence.render_evidence_matrix())
        print("\n" + render_serving_matrix())
        print("\n" + evidence.render_leave_one_out())
    return 0 if all(r.ok for r in rows) else 1
