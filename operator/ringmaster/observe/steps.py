"""Observed step time over a window of reports, and the progress figures status shows.

The observed step time is the median of the last WINDOW_SAMPLES step times reported: a median,
because steps that checkpoint, evaluate or recompile are a few long outliers that a mean would
follow and a median ignores (PyTorch Lightning's and HF Trainer's own speed meters smooth the
same way for the same reason). A report that carries no step time gives one from the steps done
and the time passed since the previous report.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import deque
from dataclasses import dataclass

from ringmaster.observe.reports import MAX_RANKS, ProgressReport, RankTiming

WINDOW_SAMPLES = 20
"""Reports in the median: at the client's default of one report per 15 s, the last 5 minutes."""


@dataclass(frozen=True)
class StepSample:
    time: dt.datetime
    step: int
    seconds: float


class StepWindow:
    """One job's recent reports (kept in the operator's memory; status keeps the figures)."""

    def __init__(self, size: int = WINDOW_SAMPLES) -> None:
        self.samples: deque[StepSample] = deque(maxlen=size)
        self.ranks: dict[int, RankTiming] = {}
        self.last: ProgressReport | None = None

    def add(self, report: ProgressReport) -> None:
        assert report.time is not None, "parse_report stamps every report"
        seconds = report.reporter_step_seconds()
        previous = self.last
        if seconds is None and previous is not None and previous.time is not None:
            steps = report.step - previous.step
            elapsed = (report.time - previous.time).total_seconds()
            if steps > 0 and elapsed > 0:
                seconds = elapsed / steps
        if previous is not None and report.step < previous.step:
            # Restarted from a checkpoint (a new gang attempt): the old attempt's ranks are gone.
            self.ranks.clear()
        if seconds is not None:
            self.samples.append(StepSample(report.time, report.step, seconds))
        for timing in report.ranks or ():
            if timing.rank in self.ranks or len(self.ranks) < MAX_RANKS:
                self.ranks[timing.rank] = timing
        self.last = report

    def observed_step_seconds(self) -> float | None:
        if not self.samples:
            return None
        return statistics.median(s.seconds for s in self.samples)

    def __len__(self) -> int:
        return len(self.samples)


@dataclass(frozen=True)
class ProgressFigures:
    """What status.progress shows (see api TrainingProgress)."""

    step: int | None
    total_steps: int | None
    percent: float | None
    observed_step_seconds: float | None
    predicted_step_seconds: float | None
    ratio: float | None
    eta: dt.datetime | None
    remaining_seconds: float | None


def progress_figures(
    *,
    step: int | None,
    total_steps: int | None,
    observed: float | None,
    predicted: float | None,
    since: dt.datetime | None,
) -> ProgressFigures:
    """Percent, ratio and ETA. ``since`` is when ``step`` was reached (the last report's time,
    or the start time before any report): the ETA counts from there, so it does not move while
    nothing new is known, and a status is not rewritten for the clock alone. The step time is
    the observed one when there is one, else the prediction."""
    percent = None
    if step is not None and total_steps:
        percent = round(min(100.0, 100.0 * step / total_steps), 1)
    ratio = round(observed / predicted, 3) if observed and predicted else None
    per_step = observed or predicted
    eta = remaining = None
    if total_steps is not None and per_step and since is not None:
        remaining = max(0, total_steps - (step or 0)) * per_step
        eta = (since + dt.timedelta(seconds=remaining)).replace(microsecond=0)
    return ProgressFigures(
        step=step,
        total_steps=total_steps,
        percent=percent,
        observed_step_seconds=observed,
        predicted_step_seconds=predicted,
        ratio=ratio,
        eta=eta,
        remaining_seconds=remaining,
    )
