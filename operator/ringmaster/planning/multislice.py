"""TPU multislice in ``ringmaster plan``: the job at 1, 2, ... N slices (weak scaling: each slice
keeps its share of the work, as MaxText's multislice runs keep the per-device batch), with the
step, throughput, cost per unit of work and the part of the step the DCN adds; and which slice
count is fastest and which cheapest per unit of work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringmaster.engine.hardware import Catalog
from ringmaster.planning.plans import PlanError, TrainingReport, plan_training, weak_scaled


@dataclass(frozen=True)
class SlicePoint:
    slices: int
    step_seconds: float
    work_per_second: float  # tokens/s with an architecture, samples/s without
    cost_per_hour: float
    dcn_share: float | None

    @property
    def cost_per_million(self) -> float:
        """USD per million tokens (or samples)."""
        return self.cost_per_hour / 3600.0 / self.work_per_second * 1e6


def _throughput(report: TrainingReport) -> float:
    layout = report.layout
    if layout is not None:
        return float(layout.chosen.tokens_per_second)
    return float(report.chosen.samples_per_second or 0.0)


def slice_scaling(
    spec: Any, catalog: Catalog, machine_type: str | None = None
) -> list[SlicePoint | str]:
    """The job at every slice count from 1 to spec.accelerator.slices (a count no layout fits is
    its reason instead)."""
    out: list[SlicePoint | str] = []
    for n in range(1, spec.accelerator.slices + 1):
        try:
            report = plan_training(weak_scaled(spec, n), machine_type, catalog=catalog)
        except PlanError as exc:
            out.append(f"{n} slices: {exc}")
            continue
        chosen = report.chosen
        out.append(
            SlicePoint(
                n,
                chosen.step_seconds,
                _throughput(report),
                chosen.cost_per_hour_usd,
                report.dcn_share,
            )
        )
    return out


def render_slice_scaling(points: list[SlicePoint | str], unit: str) -> str:
    rows = [p for p in points if isinstance(p, SlicePoint)]
    lines = [
        "multislice scaling (each slice keeps its share of the work):",
        f"  slices  step s  {unit + '/s':>12}  speedup  efficiency  DCN share  $/hour  $/M {unit}",
    ]
    base = rows[0] if rows and rows[0].slices == 1 else None
    for p in rows:
        speedup = p.work_per_second / base.work_per_second if base else float("nan")
        lines.append(
            f"  {p.slices:>6}  {p.step_seconds:>6.4g}  {p.work_per_second:>12,.0f}  "
            f"{speedup:>6.2f}x  {speedup / p.slices:>10.1%}  "
            f"{(p.dcn_share or 0.0):>9.1%}  ${p.cost_per_hour:,.2f}  ${p.cost_per_million:.4g}"
        )
    lines += [f"  {p}" for p in points if isinstance(p, str)]
    if rows:
        fastest = max(rows, key=lambda p: p.work_per_second)
        cheapest = min(rows, key=lambda p: p.cost_per_million)
        lines.append(
            f"  fastest: {fastest.slices} slices; cheapest per {unit.rstrip('s')}: "
            f"{cheapest.slices} slices"
        )
    return "\n".join(lines)
