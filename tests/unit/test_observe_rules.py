"""The loop's pure rules: reports, observed step time, ETA, drift, stragglers."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ringmaster.observe.drift import (
    DRIFT_TOLERANCE,
    MIN_DRIFT_SAMPLES,
    degraded_message,
    judge_drift,
    stragglers,
)
from ringmaster.observe.reports import (
    MAX_BODY_BYTES,
    ProgressReport,
    RankTiming,
    ReportRefused,
    parse_report,
)
from ringmaster.observe.steps import WINDOW_SAMPLES, StepWindow, progress_figures

NOW = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


# ------------------------------------------------------------------ reports


def test_a_report_parses_camel_case_and_is_stamped_with_the_receipt_time() -> None:
    report = parse_report(body(step=10, totalSteps=100, stepSeconds=0.5), NOW)
    assert (report.step, report.total_steps, report.step_seconds) == (10, 100, 0.5)
    assert report.time == NOW


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"totalSteps": 5}, "step"),
        ({"step": -1}, "step"),
        ({"step": 7, "totalSteps": 5}, "beyond totalSteps"),
        ({"step": 1, "stepSeconds": 0}, "stepSeconds"),
        ({"step": 1, "stepSeconds": 10**9}, "stepSeconds"),
        ({"step": 1, "bogus": 1}, "bogus"),
        ({"step": 1, "time": "2025-01-01T12:00:00"}, "time zone"),
        ({"step": 1, "time": "2025-01-01T13:00:00Z"}, "future"),
        (
            {"step": 1, "ranks": [{"rank": 0, "stepSeconds": 1}, {"rank": 0, "stepSeconds": 2}]},
            "each rank at most once",
        ),
    ],
)
def test_bad_reports_are_refused_with_what_is_wrong(
    fields: dict[str, object], complaint: str
) -> None:
    with pytest.raises(ReportRefused, match=complaint):
        parse_report(body(**fields), NOW)


def test_non_finite_numbers_and_oversized_bodies_are_refused() -> None:
    with pytest.raises(ReportRefused):
        parse_report(b'{"step": 1, "stepSeconds": NaN}', NOW)
    with pytest.raises(ReportRefused, match="over"):
        parse_report(b" " * (MAX_BODY_BYTES + 1), NOW)
    with pytest.raises(ReportRefused):
        parse_report(b"not json", NOW)


def test_the_gang_step_time_is_the_slowest_rank_when_no_figure_is_given() -> None:
    report = ProgressReport(
        step=1,
        ranks=[RankTiming(rank=0, step_seconds=1.0), RankTiming(rank=1, step_seconds=1.3)],
    )
    assert report.reporter_step_seconds() == 1.3


# ------------------------------------------------------------------ the window


def at(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


def test_observed_step_time_is_the_median_so_a_checkpoint_step_does_not_move_it() -> None:
    window = StepWindow()
    for i, seconds in enumerate([1.0, 1.1, 0.9, 60.0, 1.0]):
        window.add(ProgressReport(step=i, step_seconds=seconds, time=at(i)))
    assert window.observed_step_seconds() == 1.0


def test_the_window_keeps_only_the_latest_reports() -> None:
    window = StepWindow()
    for i in range(WINDOW_SAMPLES):
        window.add(ProgressReport(step=i, step_seconds=1.0, time=at(i)))
    for i in range(WINDOW_SAMPLES):
        window.add(ProgressReport(step=100 + i, step_seconds=2.0, time=at(100 + i)))
    assert window.observed_step_seconds() == 2.0
    assert len(window) == WINDOW_SAMPLES


def test_a_report_without_step_seconds_gives_one_from_steps_and_time() -> None:
    window = StepWindow()
    window.add(ProgressReport(step=100, time=at(0)))
    assert window.observed_step_seconds() is None
    window.add(ProgressReport(step=150, time=at(100)))
    assert window.observed_step_seconds() == 2.0


# ------------------------------------------------------------------ figures and ETA


def test_eta_counts_the_remaining_steps_at_the_observed_time_from_the_last_report() -> None:
    figures = progress_figures(step=250, total_steps=1000, observed=2.0, predicted=1.6, since=NOW)
    assert figures.percent == 25.0
    assert figures.ratio == 1.25
    assert figures.remaining_seconds == 1500.0
    assert figures.eta == at(1500)


def test_before_any_report_the_eta_uses_the_prediction_from_the_start() -> None:
    figures = progress_figures(step=None, total_steps=100, observed=None, predicted=3.0, since=NOW)
    assert figures.eta == at(300)
    assert figures.ratio is None and figures.percent is None


def test_without_total_steps_there_is_no_eta() -> None:
    figures = progress_figures(step=5, total_steps=None, observed=1.0, predicted=1.0, since=NOW)
    assert figures.eta is None and figures.percent is None


# ------------------------------------------------------------------ drift


def test_drift_is_judged_only_beyond_the_tolerance_and_after_warm_up() -> None:
    slow = 1.0 * (1 + DRIFT_TOLERANCE) * 1.01
    assert judge_drift(slow, 1.0, MIN_DRIFT_SAMPLES - 1) is None
    assert judge_drift(1.2, 1.0, MIN_DRIFT_SAMPLES) is None
    drift = judge_drift(slow, 1.0, MIN_DRIFT_SAMPLES)
    assert drift is not None and drift.slower
    fast = judge_drift(0.7, 1.0, MIN_DRIFT_SAMPLES)
    assert fast is not None and not fast.slower


def test_a_drift_clears_only_well_inside_the_band() -> None:
    # x1.22: inside the band, but not inside 80 % of it: a flagged job stays flagged.
    assert judge_drift(1.22, 1.0, 10) is None
    assert judge_drift(1.22, 1.0, 10, drifting=True) is not None
    assert judge_drift(1.1, 1.0, 10, drifting=True) is None


def test_the_likely_cause_follows_the_plans_larger_share() -> None:
    network = judge_drift(2.0, 1.0, 10, compute_seconds=0.3, communication_seconds=0.7)
    compute = judge_drift(2.0, 1.0, 10, compute_seconds=0.8, communication_seconds=0.2)
    assert network is not None and "network slower than modelled" in network.message()
    assert "communication as 70%" in network.message()
    assert compute is not None and "FLOP rate" in compute.message()
    assert "2 s against 1 s predicted (x2.00" in compute.message()


# ------------------------------------------------------------------ stragglers


def timings(*seconds: float, hosts: bool = True) -> list[RankTiming]:
    return [
        RankTiming(rank=i, host=f"host-{i}" if hosts else None, step_seconds=s)
        for i, s in enumerate(seconds)
    ]


def test_a_host_well_above_the_gang_median_is_a_straggler() -> None:
    found = stragglers(timings(1.0, 1.02, 0.98, 1.5))
    assert [s.where for s in found] == ["host-3"]
    assert "host-3 1.5 s" in degraded_message(found)


def test_ordinary_jitter_is_no_straggler_and_one_host_has_no_median() -> None:
    assert stragglers(timings(1.0, 1.1, 0.95, 1.15)) == []
    assert stragglers(timings(5.0)) == []


def test_a_host_counts_by_its_slowest_rank_and_ranks_stand_alone_without_hosts() -> None:
    ranks = [
        RankTiming(rank=0, host="a", step_seconds=1.0),
        RankTiming(rank=1, host="a", step_seconds=1.0),
        RankTiming(rank=2, host="b", step_seconds=1.0),
        RankTiming(rank=3, host="b", step_seconds=2.0),
        RankTiming(rank=4, host="c", step_seconds=1.0),
    ]
    assert [s.where for s in stragglers(ranks)] == ["b"]
    assert [s.where for s in stragglers(timings(1, 1, 3, hosts=False))] == ["rank 2"]
