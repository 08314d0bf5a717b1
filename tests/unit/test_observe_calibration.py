"""The cluster calibration's statistics, and the expected start of waiting jobs."""

from __future__ import annotations

import datetime as dt

import pytest

from ringmaster.observe.calibration import (
    MAX_AGE,
    MAX_JOBS,
    MIN_JOBS,
    ClusterCalibration,
    Observation,
)
from ringmaster.observe.start_time import MAX_QUEUE, Holder, Queued, expected_starts

NOW = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)
MACHINE = "a2-highgpu-8g"


def seen(ratio: float, job: str, days_ago: float = 0, machine: str = MACHINE) -> Observation:
    when = (NOW - dt.timedelta(days=days_ago)).isoformat()
    return Observation(machine, "llm", ratio, job, when)


def calibrated(*ratios: float) -> ClusterCalibration:
    calibration = ClusterCalibration()
    for i, ratio in enumerate(ratios):
        assert calibration.record(seen(ratio, f"ns/j{i}/uid"), NOW)
    return calibration


def test_no_correction_from_fewer_than_min_jobs() -> None:
    assert calibrated(*[1.2] * (MIN_JOBS - 1)).correction(MACHINE, "llm", NOW) is None


def test_the_correction_is_the_median_so_one_odd_job_does_not_swing_it() -> None:
    correction = calibrated(1.1, 1.12, 1.15, 9.0).correction(MACHINE, "llm", NOW)
    assert correction is not None
    assert correction.factor == pytest.approx(1.135)
    assert correction.describe() == f"x1.14 from 4 jobs observed on {MACHINE}"


def test_corrections_are_per_machine_type_and_kind() -> None:
    calibration = calibrated(1.3, 1.3, 1.3)
    assert calibration.correction("a3-highgpu-8g", "llm", NOW) is None
    assert calibration.correction(MACHINE, "data-parallel", NOW) is None


def test_a_job_counts_once_and_absurd_ratios_are_refused() -> None:
    calibration = calibrated(1.0)
    assert not calibration.record(seen(1.0, "ns/j0/uid"), NOW)
    assert not calibration.record(seen(50.0, "ns/other/uid"), NOW)
    assert not calibration.record(seen(0.01, "ns/other2/uid"), NOW)
    assert len(calibration.observations) == 1


def test_old_jobs_age_out_and_each_group_is_bounded() -> None:
    calibration = ClusterCalibration()
    old = MAX_AGE.days + 1
    for i in range(MIN_JOBS):
        calibration.observations.append(seen(2.0, f"ns/old{i}/u", days_ago=old))
    assert calibration.correction(MACHINE, "llm", NOW) is None
    for i in range(MAX_JOBS + 10):
        calibration.record(
            seen(1.0 + i / 1000, f"ns/new{i}/u", days_ago=(MAX_JOBS + 10 - i) / 100), NOW
        )
    assert len(calibration.observations) == MAX_JOBS
    assert all(o.job.startswith("ns/new") for o in calibration.observations)
    # the newest were kept
    assert max(o.ratio for o in calibration.observations) == pytest.approx(
        1.0 + (MAX_JOBS + 9) / 1000
    )


def test_the_stored_form_round_trips_and_a_config_map_reads_the_same() -> None:
    calibration = calibrated(1.1, 1.2, 1.3)
    again = ClusterCalibration.from_json(calibration.to_json())
    assert again == calibration
    config_map = {"kind": "ConfigMap", "data": {"calibration.json": calibration.to_json()}}
    assert ClusterCalibration.from_config_map_or_file(config_map) == calibration
    with pytest.raises(ValueError, match="version"):
        ClusterCalibration.from_json('{"observations": []}')
    with pytest.raises(ValueError, match="bad observation"):
        ClusterCalibration.from_json('{"version": 1, "observations": [{"ratio": 1}]}')


# ------------------------------------------------------------------ expected start


def later(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


def test_a_job_behind_a_running_one_starts_at_its_eta() -> None:
    estimates = expected_starts(
        {"pool": 0},
        [Holder("ns/running", "pool", 16, later(600))],
        [Queued("ns/waiting", ("pool",), 16, 300.0)],
        NOW,
    )
    assert estimates["ns/waiting"].time == later(600)
    assert estimates["ns/waiting"].pool == "pool"


def test_the_admission_order_is_replayed_jobs_ahead_hold_their_predicted_time() -> None:
    estimates = expected_starts(
        {"pool": 8},
        [Holder("ns/running", "pool", 8, later(100))],
        [
            Queued("ns/first", ("pool",), 16, 1000.0),
            Queued("ns/second", ("pool",), 16, 10.0),
            Queued("ns/small", ("pool",), 8, 50.0),  # backfills before the first: it fits now
        ],
        NOW,
    )
    assert estimates["ns/first"].time == later(100)
    assert estimates["ns/second"].time == later(1100)
    small = estimates["ns/small"]
    assert small.now and small.time is None  # no time that moves with the clock
    assert small.message().startswith("any moment on pool pool")


def test_a_backfill_that_would_delay_a_job_ahead_is_not_taken() -> None:
    estimates = expected_starts(
        {"pool": 8},
        [Holder("ns/running", "pool", 8, later(100))],
        [Queued("ns/first", ("pool",), 16, 1000.0), Queued("ns/long", ("pool",), 8, 500.0)],
        NOW,
    )
    # "long" fits now, but would still hold its 8 when "first" needs all 16 at t=100.
    assert estimates["ns/long"].time == later(1100)


def test_the_earliest_of_the_candidate_pools_wins() -> None:
    estimates = expected_starts(
        {"a": 0, "b": 0},
        [Holder("ns/x", "a", 8, later(500)), Holder("ns/y", "b", 8, later(200))],
        [Queued("ns/w", ("a", "b"), 8, None)],
        NOW,
    )
    assert (estimates["ns/w"].time, estimates["ns/w"].pool) == (later(200), "b")


def test_unknown_with_the_reason_when_a_running_job_has_no_end() -> None:
    estimates = expected_starts(
        {"pool": 0},
        [Holder("ns/mystery", "pool", 16, None)],
        [Queued("ns/waiting", ("pool",), 16, 100.0), Queued("ns/next", ("pool",), 16, 1.0)],
        NOW,
    )
    waiting = estimates["ns/waiting"]
    assert waiting.time is None
    assert "ns/mystery" in waiting.reason and "spec.steps" in waiting.reason
    assert waiting.message().startswith("unknown: ")


def test_a_job_ahead_without_steps_holds_its_room_for_good() -> None:
    estimates = expected_starts(
        {"pool": 16},
        [],
        [Queued("ns/endless", ("pool",), 16, None), Queued("ns/after", ("pool",), 16, 10.0)],
        NOW,
    )
    assert estimates["ns/endless"].now
    assert estimates["ns/after"].time is None
    assert "ns/endless" in estimates["ns/after"].reason


def test_too_big_for_its_pools_and_too_far_back_in_the_queue_are_unknown() -> None:
    estimates = expected_starts({"pool": 8}, [], [Queued("ns/huge", ("pool",), 64, 1.0)], NOW)
    assert "fewer accelerators" in estimates["ns/huge"].reason
    queue = [Queued(f"ns/j{i}", ("pool",), 0, 1.0) for i in range(MAX_QUEUE + 1)]
    assert expected_starts({"pool": 8}, [], queue, NOW)[f"ns/j{MAX_QUEUE}"].time is None
