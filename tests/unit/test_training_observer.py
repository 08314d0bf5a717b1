"""What each look of a TrainingJob makes of its workers' reports (training_observer.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from ringmaster import metrics
from ringmaster.api import TrainingJobStatus, TrainingPlan, TrainingProgress, find_condition
from ringmaster.controllers.training_observer import DEGRADED, DRIFT, TrainingObserver
from ringmaster.controllers.training_step import Decision
from ringmaster.manifests.progress import TOKEN_DIR, audience, with_progress_reporting
from ringmaster.observe.calibration import MIN_JOBS, Observation
from ringmaster.observe.reports import ProgressReport, RankTiming
from ringmaster.observe.start_time import StartEstimate

from .training_world import NOW, spec

KEY = ("ml", "bert")
BODY = {"metadata": {"name": "bert", "namespace": "ml", "uid": "u-1", "generation": 1}}
MACHINE = "a2-highgpu-8g"


def plan(step: float = 1.0) -> TrainingPlan:
    return TrainingPlan(
        strategy="Ring",
        step_seconds=step,
        compute_seconds=0.8 * step,
        communication_seconds=0.2 * step,
        machine_type=MACHINE,
    )


def running(**fields: Any) -> TrainingJobStatus:
    return TrainingJobStatus(phase="Running", plan=plan(), start_time=NOW, pool="p", **fields)


def observer(**kwargs: Any) -> tuple[TrainingObserver, list[tuple[str, str]]]:
    requeued: list[tuple[str, str]] = []

    async def make() -> TrainingObserver:  # asyncio.Event wants a loop on older Pythons
        return TrainingObserver(api=None, requeue=requeued.append, **kwargs)

    return asyncio.run(make()), requeued


def look(watcher: TrainingObserver, recorded: TrainingJobStatus, the_spec: Any = None) -> Decision:
    decision = Decision(status=recorded.model_copy(deep=True))
    decision.status.plan = plan()  # the planner's fresh plan, as on every look
    watcher.annotate(KEY, BODY, the_spec or spec(), recorded, decision, NOW)
    return decision


def reports(watcher: TrainingObserver, seconds: float, count: int = 6, **extra: Any) -> None:
    for i in range(count):
        watcher.accept(
            KEY,
            ProgressReport(
                step=100 * (i + 1),
                total_steps=1000,
                step_seconds=seconds,
                time=NOW + dt.timedelta(seconds=10 * i),
                **extra,
            ),
        )


def test_progress_shows_observed_against_predicted_and_the_eta() -> None:
    watcher, requeued = observer()
    reports(watcher, seconds=1.1)
    assert requeued == [KEY] * 6
    progress = look(watcher, running()).status.progress
    assert progress is not None
    assert (progress.step, progress.total_steps, progress.percent) == (600, 1000, 60.0)
    assert progress.observed_step_seconds == 1.1 and progress.predicted_step_seconds == 1.0
    assert progress.ratio == 1.1
    assert progress.eta == NOW + dt.timedelta(seconds=50 + 400 * 1.1)
    assert metrics.PREDICTION_RATIO.labels(*KEY)._value.get() == 1.1


def test_spec_steps_give_an_eta_before_the_first_report() -> None:
    watcher, _ = observer()
    progress = look(watcher, running(), spec(steps=3600)).status.progress
    assert progress is not None and progress.step is None
    assert progress.eta == NOW + dt.timedelta(seconds=3600)


def test_a_slow_job_drifts_with_an_event_naming_both_numbers_and_the_cause() -> None:
    watcher, _ = observer()
    reports(watcher, seconds=1.6)
    decision = look(watcher, running())
    condition = find_condition(decision.status.conditions, DRIFT)
    assert condition is not None and condition.status == "True"
    assert condition.reason == "SlowerThanPredicted"
    [event] = [e for e in decision.events if e.reason == DRIFT]
    assert event.type == "Warning"
    assert "1.6 s against 1 s predicted" in event.message and "FLOP rate" in event.message
    # back in line: cleared, with an Event
    watcher.windows.clear()
    reports(watcher, seconds=1.0)
    again = look(watcher, decision.status)
    cleared = find_condition(again.status.conditions, DRIFT)
    assert cleared is not None and cleared.status == "False"
    assert [e.reason for e in again.events] == ["PredictionDriftCleared"]


def test_no_drift_is_judged_during_warm_up() -> None:
    watcher, _ = observer()
    reports(watcher, seconds=5.0, count=2)
    assert find_condition(look(watcher, running()).status.conditions, DRIFT) is None


def test_a_straggling_host_sets_degraded_naming_it() -> None:
    watcher, _ = observer()
    ranks = [RankTiming(rank=i, host=f"host-{i}", step_seconds=1.0) for i in range(3)]
    ranks.append(RankTiming(rank=3, host="host-3", step_seconds=1.5))
    reports(watcher, seconds=1.0, ranks=ranks)
    decision = look(watcher, running())
    condition = find_condition(decision.status.conditions, DEGRADED)
    assert condition is not None and condition.status == "True"
    assert "host-3" in condition.message
    assert any(e.reason == "Stragglers" and "host-3" in e.message for e in decision.events)


def learned(watcher: TrainingObserver, ratio: float = 1.2) -> None:
    for i in range(MIN_JOBS):
        watcher.store.calibration.record(
            Observation(MACHINE, "data-parallel", ratio, f"ml/j{i}/u", NOW.isoformat()), NOW
        )


def test_a_new_plan_gets_the_clusters_correction_beside_the_uncorrected_prediction() -> None:
    watcher, _ = observer()
    learned(watcher)
    pending = look(watcher, TrainingJobStatus(phase="Pending")).status.plan
    assert pending is not None
    assert pending.step_seconds == 1.0 and pending.calibrated_step_seconds == 1.2
    assert pending.calibration == f"x1.20 from {MIN_JOBS} jobs observed on {MACHINE}"


def test_a_running_gang_keeps_the_correction_it_started_with() -> None:
    watcher, _ = observer()
    learned(watcher)
    recorded = running()
    assert recorded.plan is not None
    recorded.plan.calibrated_step_seconds, recorded.plan.calibration = 1.1, "x1.10 from 3"
    kept = look(watcher, recorded).status.plan
    assert kept is not None and kept.calibrated_step_seconds == 1.1
    reports(watcher, seconds=1.1)
    progress = look(watcher, recorded).status.progress
    assert progress is not None and progress.ratio == 1.0  # against the calibrated 1.1


def test_a_succeeded_job_teaches_the_calibration_once() -> None:
    watcher, _ = observer()
    done = TrainingJobStatus(
        phase="Succeeded",
        plan=plan(2.0),
        completion_time=NOW,
        progress=TrainingProgress(observed_step_seconds=2.5),
    )
    look(watcher, done)
    look(watcher, done)
    [seen] = watcher.store.calibration.observations
    assert (seen.machine_type, seen.kind, seen.ratio, seen.job) == (
        MACHINE,
        "data-parallel",
        1.25,
        "ml/bert/u-1",
    )
    assert watcher.store.dirty.is_set()


def test_a_waiting_job_shows_its_expected_start_or_why_it_is_unknown() -> None:
    watcher, _ = observer()
    later = NOW + dt.timedelta(minutes=20)
    watcher.starts[KEY] = StartEstimate(later, "p", "from the running jobs' ETAs")
    status = look(watcher, TrainingJobStatus(phase="Pending")).status
    assert status.expected_start_time == later and "on pool p" in (status.expected_start or "")
    watcher.starts[KEY] = StartEstimate(None, None, "ml/x runs on p with neither ...")
    status = look(watcher, TrainingJobStatus(phase="Pending")).status
    assert status.expected_start_time is None
    assert (status.expected_start or "").startswith("unknown: ml/x")
    assert look(watcher, running()).status.expected_start is None


@pytest.mark.parametrize("url", [None, "https://ringmaster.ringmaster.svc:8443"])
def test_worker_pods_get_the_token_and_url_only_when_the_endpoint_is_served(
    url: str | None,
) -> None:
    watcher, _ = observer(progress_url=url)
    decision = Decision(status=running())
    pod = {
        "kind": "Pod",
        "metadata": {
            "name": "bert-worker-0",
            "namespace": "ml",
            "labels": {"ringmaster.dev/role": "worker"},
        },
        "spec": {"containers": [{"name": "worker", "env": []}]},
    }
    decision.create = [pod]
    watcher.annotate(KEY, BODY, spec(), running(), decision, NOW)
    [made] = decision.create
    assert ("volumes" in made["spec"]) == (url is not None)


def test_the_projected_token_names_the_jobs_audience() -> None:
    pod = {
        "metadata": {"name": "bert-worker-0", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": "worker", "env": [{"name": "RINGMASTER_PROGRESS_URL", "value": "x"}]}
            ]
        },
    }
    made = with_progress_reporting(pod, "bert", "https://op:8443/", ca_pem="PEM")
    [volume] = made["spec"]["volumes"]
    source = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert source["audience"] == audience("ml", "bert") == "ringmaster.dev/trainingjobs/ml/bert"
    env = {e["name"]: e["value"] for e in made["spec"]["containers"][0]["env"]}
    assert env["RINGMASTER_PROGRESS_URL"] == (
        "https://op:8443/apis/ringmaster.dev/v1alpha1/namespaces/ml/trainingjobs/bert/progress"
    )
    assert env["RINGMASTER_PROGRESS_TOKEN"] == f"{TOKEN_DIR}/token"
    assert env["RINGMASTER_PROGRESS_CA_PEM"] == "PEM"
    assert made["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == TOKEN_DIR
    assert "volumes" not in pod["spec"]  # a copy


def test_an_expected_start_that_only_moves_with_the_clock_is_not_rewritten() -> None:
    from ringmaster.controllers.training_observer import _settled

    at = NOW + dt.timedelta(hours=2)
    before = StartEstimate(at, "p", "from the ETAs")
    assert (
        _settled(before, StartEstimate(at + dt.timedelta(seconds=30), "p", "from the ETAs"), NOW)
        is before
    )
    # 5 % of two hours is 6 minutes
    assert (
        _settled(before, StartEstimate(at + dt.timedelta(minutes=5), "p", "from the ETAs"), NOW)
        is before
    )
    moved = StartEstimate(at + dt.timedelta(minutes=10), "p", "from the ETAs")
    assert _settled(before, moved, NOW) is moved
    other_pool = StartEstimate(at, "q", "from the ETAs")
    assert _settled(before, other_pool, NOW) is other_pool
