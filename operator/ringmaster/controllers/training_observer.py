"""The TrainingJob controller's side of the loop: what the workers report becomes status.

- :meth:`TrainingObserver.accept` keeps a job's reports (the endpoint, progress_server.py,
  hands them over) and asks for a look at the job;
- :meth:`TrainingObserver.annotate` is called on every look, with the state machine's decision:
  it writes ``status.progress``, the ``PredictionDrift`` and ``Degraded`` conditions (Events on
  their transitions), the cluster's correction beside the plan, a waiting job's expected start,
  and records a finished job's observed-to-predicted ratio in the cluster calibration;
- the calibration lives in the operator's own ConfigMap (:class:`CalibrationStore`), read at
  start and written, debounced, when a job adds to it;
- expected starts are re-estimated for all waiting jobs at once after a change; a job's new
  time alone is written at most every START_ESTIMATE_SECONDS (as the waiting numbers are), and
  the jobs whose estimate moved are looked at again.

The rules themselves are pure (ringmaster.observe); this module only feeds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from ringmaster import metrics
from ringmaster.admission.cycle import WaitingGang, admission_order
from ringmaster.admission.snapshot import ClusterSnapshot, Key
from ringmaster.api import TrainingJobSpec, TrainingJobStatus, TrainingPlan, TrainingProgress
from ringmaster.controllers.reporting import Conditions, Event
from ringmaster.controllers.training_step import Decision
from ringmaster.manifests.naming import ROLE_LABEL
from ringmaster.manifests.progress import with_progress_reporting
from ringmaster.observe.calibration import DATA_KEY, ClusterCalibration, Observation, workload_kind
from ringmaster.observe.drift import MIN_DRIFT_SAMPLES, degraded_message, judge_drift, stragglers
from ringmaster.observe.reports import ProgressReport
from ringmaster.observe.start_time import Holder, Queued, StartEstimate, expected_starts
from ringmaster.observe.steps import StepWindow, progress_figures
from ringmaster.placement.labels import ACCELERATOR_TAINT_KEYS

log = logging.getLogger(__name__)

DRIFT, DEGRADED = "PredictionDrift", "Degraded"
RUNNING_PHASES = ("Admitted", "Running")
CALIBRATION_CONFIGMAP_ENV = "RINGMASTER_CALIBRATION_CONFIGMAP"
"""namespace/name of the operator's calibration ConfigMap; unset: kept in memory only."""
PROGRESS_URL_ENV = "RINGMASTER_PROGRESS_URL"
"""The endpoint's base URL as the pods reach it; unset: pods get no reporting env or token."""
PROGRESS_CA_ENV = "RINGMASTER_PROGRESS_CA_FILE"
"""A PEM file with the CA of the endpoint's certificate, handed to the pods (their env)."""
START_ESTIMATE_ENV = "RINGMASTER_START_ESTIMATE_SECONDS"
START_ESTIMATE_SECONDS = 30.0
"""A waiting job's expected start moves (same pool and reason, a new time) at most this often:
the waiting numbers' pace (trainingjob.WAIT_REFRESH_SECONDS), for the same reason (every waiting
job would be rewritten on each running job's report otherwise)."""
CALIBRATION_WRITE_SECONDS = 10.0
"""Finished jobs' ratios reach the ConfigMap at most this often (one write for a burst)."""


class CalibrationStore:
    """The cluster calibration and its ConfigMap."""

    def __init__(self, api: Any, reference: str | None) -> None:
        self.api = api
        self.reference = reference
        self.calibration = ClusterCalibration()
        self.dirty = asyncio.Event()
        self.loaded = False

    async def load(self) -> None:
        if self.reference is None:
            self.loaded = True
            return
        namespace, name = self.reference.split("/", 1)
        found = await self.api.get_config_map(namespace, name)
        if found is not None:
            text = (found.get("data") or {}).get(DATA_KEY)
            if text:
                try:
                    self.calibration = ClusterCalibration.from_json(text)
                except ValueError as error:
                    # Kept as it is (a person may be fixing it); new jobs start a fresh record
                    # in memory, written over it only when one finishes.
                    log.warning("calibration ConfigMap %s unreadable: %s", self.reference, error)
        self.loaded = True

    def record(self, observation: Observation, now: dt.datetime) -> None:
        if self.calibration.record(observation, now):
            log.info(
                "calibration: %s ran x%.3f of its prediction on %s (%s)",
                observation.job,
                observation.ratio,
                observation.machine_type,
                observation.kind,
            )
            self.dirty.set()

    async def writer(self) -> None:
        while True:
            await self.dirty.wait()
            await asyncio.sleep(CALIBRATION_WRITE_SECONDS)
            self.dirty.clear()
            if self.reference is None:
                continue
            try:
                await self.api.put_config_map(
                    *self.reference.split("/", 1), {DATA_KEY: self.calibration.to_json()}
                )
            except Exception:
                log.exception("could not write the calibration ConfigMap; retrying")
                self.dirty.set()


class TrainingObserver:
    def __init__(
        self,
        api: Any,
        requeue: Callable[[Key], None],
        calibration_configmap: str | None = None,
        progress_url: str | None = None,
        ca_pem: str | None = None,
        start_estimate_seconds: float = START_ESTIMATE_SECONDS,
    ) -> None:
        self.requeue = requeue
        self.windows: dict[Key, StepWindow] = {}
        self.store = CalibrationStore(api, calibration_configmap)
        self.progress_url = progress_url
        self.ca_pem = ca_pem
        self.start_estimate_seconds = start_estimate_seconds
        self.starts: dict[Key, StartEstimate] = {}
        # The ETA each admitted or running job's last look decided: the estimate reads these,
        # not the index, which has them only once the status write comes back by the watch.
        self.etas: dict[Key, dt.datetime | None] = {}
        self.starts_changed = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_environment(cls, api: Any, requeue: Callable[[Key], None]) -> TrainingObserver:
        ca_file = os.environ.get(PROGRESS_CA_ENV)
        ca_pem = None
        if ca_file:
            with open(ca_file, encoding="ascii") as handle:
                ca_pem = handle.read()
        return cls(
            api,
            requeue,
            calibration_configmap=os.environ.get(CALIBRATION_CONFIGMAP_ENV) or None,
            progress_url=os.environ.get(PROGRESS_URL_ENV) or None,
            ca_pem=ca_pem,
            start_estimate_seconds=float(
                os.environ.get(START_ESTIMATE_ENV) or START_ESTIMATE_SECONDS
            ),
        )

    def start(self, estimate: Callable[[], dict[Key, StartEstimate]]) -> None:
        self.tasks = [
            asyncio.create_task(self.store.writer()),
            asyncio.create_task(self.start_loop(estimate)),
        ]

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

    # ------------------------------------------------------------ reports in

    def accept(self, key: Key, report: ProgressReport) -> None:
        self.windows.setdefault(key, StepWindow()).add(report)
        self.requeue(key)
        self.starts_changed.set()  # a running job's ETA may have moved

    def forget(self, key: Key) -> None:
        self.windows.pop(key, None)
        self.starts.pop(key, None)
        self.etas.pop(key, None)
        for gauge in (metrics.OBSERVED_STEP_SECONDS, metrics.PREDICTION_RATIO):
            with contextlib.suppress(KeyError):
                gauge.remove(*key)

    # ------------------------------------------------------------ one look

    def annotate(
        self,
        key: Key,
        body: Mapping[str, Any],
        spec: TrainingJobSpec,
        recorded: TrainingJobStatus,
        decision: Decision,
        now: dt.datetime,
    ) -> None:
        status = decision.status
        generation = int((body.get("metadata") or {}).get("generation") or 1)
        uid = str((body.get("metadata") or {}).get("uid") or "")
        self._calibrate_plan(spec, recorded, status, now)
        if status.phase in ("Succeeded", "Failed"):
            if self.etas.pop(key, None) is not None:
                self.starts_changed.set()
            # Finished: the figures stay as they were last seen; a success teaches the engine.
            status.progress = recorded.progress
            status.expected_start_time = status.expected_start = None
            if status.phase == "Succeeded":
                self._learn(key, uid, spec, recorded)
            return
        self._progress(key, spec, recorded, decision, generation, now)
        eta = status.progress.eta if status.progress and status.phase in RUNNING_PHASES else None
        if self.etas.get(key) != eta:
            self.etas[key] = eta
            self.starts_changed.set()
        self._expected_start(key, status)
        if self.progress_url:
            decision.create = [
                with_progress_reporting(obj, key[1], self.progress_url, self.ca_pem)
                if obj.get("kind") == "Pod"
                and (obj["metadata"].get("labels") or {}).get(ROLE_LABEL) == "worker"
                else obj
                for obj in decision.create
            ]

    def _calibrate_plan(
        self,
        spec: TrainingJobSpec,
        recorded: TrainingJobStatus,
        status: TrainingJobStatus,
        now: dt.datetime,
    ) -> None:
        """The correction beside the plan. A gang that runs keeps the correction it started
        with, so what it is held against does not move under it."""
        plan = status.plan
        if plan is None or plan.step_seconds is None:
            return
        before = recorded.plan
        if (
            status.phase in (*RUNNING_PHASES, "Succeeded", "Failed")
            and before is not None
            and before.step_seconds == plan.step_seconds
        ):
            plan.calibrated_step_seconds = before.calibrated_step_seconds
            plan.calibration = before.calibration
            return
        kind = workload_kind(spec.model.architecture is not None)
        correction = self.store.calibration.correction(plan.machine_type, kind, now)
        if correction is None:
            plan.calibrated_step_seconds = plan.calibration = None
        else:
            plan.calibrated_step_seconds = round(plan.step_seconds * correction.factor, 6)
            plan.calibration = correction.describe()

    def _progress(
        self,
        key: Key,
        spec: TrainingJobSpec,
        recorded: TrainingJobStatus,
        decision: Decision,
        generation: int,
        now: dt.datetime,
    ) -> None:
        status = decision.status
        window = self.windows.get(key)
        last = window.last if window is not None else None
        before = recorded.progress or TrainingProgress()
        plan = status.plan
        predicted = _predicted(plan)
        observed = window.observed_step_seconds() if window else None
        observed = observed if observed is not None else before.observed_step_seconds
        step = last.step if last is not None else before.step
        total = (last.total_steps if last is not None else None) or before.total_steps
        total = total or spec.steps
        running = status.phase in RUNNING_PHASES
        since = last.time if last is not None else before.last_report_time or status.start_time
        if step is None and observed is None and total is None:
            status.progress = None
            return
        figures = progress_figures(
            step=step,
            total_steps=total,
            observed=observed,
            predicted=predicted,
            since=since if running else None,
        )
        status.progress = TrainingProgress(
            step=figures.step,
            total_steps=figures.total_steps,
            percent=figures.percent,
            observed_step_seconds=_round(figures.observed_step_seconds),
            predicted_step_seconds=_round(figures.predicted_step_seconds),
            ratio=figures.ratio,
            tokens_per_second=(
                last.tokens_per_second if last is not None else before.tokens_per_second
            ),
            samples_per_second=(
                last.samples_per_second if last is not None else before.samples_per_second
            ),
            eta=figures.eta,
            last_report_time=last.time if last is not None else before.last_report_time,
        )
        if observed is not None:
            metrics.OBSERVED_STEP_SECONDS.labels(*key).set(observed)
            if figures.ratio is not None:
                metrics.PREDICTION_RATIO.labels(*key).set(figures.ratio)
        if running and window is not None:
            self._judge(decision, window, predicted, generation, now)

    def _judge(
        self,
        decision: Decision,
        window: StepWindow,
        predicted: float | None,
        generation: int,
        now: dt.datetime,
    ) -> None:
        status, plan = decision.status, decision.status.plan
        conditions = Conditions(status, generation, now)
        flagged = conditions.get(DRIFT)
        was_drifting = flagged is not None and flagged.status == "True"
        observed = window.observed_step_seconds()
        drift = judge_drift(
            observed,
            predicted,
            len(window),
            compute_seconds=plan.compute_seconds if plan else None,
            communication_seconds=plan.communication_seconds if plan else None,
            drifting=was_drifting,
        )
        if drift is not None:
            reason = "SlowerThanPredicted" if drift.slower else "FasterThanPredicted"
            message = drift.message()
            if conditions.transition(DRIFT, "True", reason, message):
                decision.events.append(
                    Event("Warning" if drift.slower else "Normal", DRIFT, message)
                )
        elif observed and predicted and len(window) >= MIN_DRIFT_SAMPLES:
            message = (
                f"observed step {observed:.4g} s against {predicted:.4g} s predicted "
                f"(x{observed / predicted:.2f}): within the tolerance"
            )
            conditions.set(DRIFT, "False", "AsPredicted", message)
            if was_drifting:
                decision.events.append(Event("Normal", "PredictionDriftCleared", message))
        found = stragglers(list(window.ranks.values()))
        if found:
            message = degraded_message(found)
            if conditions.transition(DEGRADED, "True", "Stragglers", message):
                decision.events.append(Event("Warning", "Stragglers", message))
        elif (
            window.ranks
            and conditions.get(DEGRADED) is not None
            and conditions.transition(DEGRADED, "False", "NoStragglers", "no host stands out")
        ):
            decision.events.append(Event("Normal", "StragglersCleared", "no host stands out"))

    def _expected_start(self, key: Key, status: TrainingJobStatus) -> None:
        estimate = self.starts.get(key) if status.phase in (None, "Pending") else None
        if estimate is None or status.admission is not None:
            status.expected_start_time = status.expected_start = None
            return
        status.expected_start_time = estimate.time
        status.expected_start = estimate.message()[:1024]

    def _learn(
        self, key: Key, uid: str, spec: TrainingJobSpec, recorded: TrainingJobStatus
    ) -> None:
        plan, progress = recorded.plan, recorded.progress
        if plan is None or not plan.step_seconds or not plan.machine_type:
            return
        if progress is None or not progress.observed_step_seconds:
            return
        when = recorded.completion_time or progress.last_report_time
        stamp = (when or dt.datetime.now(dt.UTC)).isoformat()
        self.store.record(
            Observation(
                machine_type=plan.machine_type,
                kind=workload_kind(spec.model.architecture is not None),
                ratio=round(progress.observed_step_seconds / plan.step_seconds, 4),
                job=f"{key[0]}/{key[1]}/{uid}",
                time=stamp,
            ),
            dt.datetime.now(dt.UTC),
        )

    # ------------------------------------------------------------ expected starts

    async def start_loop(self, estimate: Callable[[], dict[Key, StartEstimate]]) -> None:
        """Re-estimate soon after something changed (a burst of changes makes one estimate). A
        new kind of answer (a pool, a reason, known or not) is written at once; a new time
        alone at most every start_estimate_seconds per job, as the waiting numbers are."""
        loop = asyncio.get_running_loop()
        written_at: dict[Key, float] = {}
        while True:
            await self.starts_changed.wait()
            await asyncio.sleep(ESTIMATE_BATCH_SECONDS)
            self.starts_changed.clear()
            try:
                fresh = estimate()
            except Exception:
                log.exception("expected start estimate failed; the next change runs another")
                continue
            now, tick = dt.datetime.now(dt.UTC), loop.time()
            kept: dict[Key, StartEstimate] = {}
            later: list[float] = []
            for key, new in fresh.items():
                old = self.starts.get(key)
                new = _settled(old, new, now)
                if old is not None and new != old and _same_kind(old, new):
                    wait = written_at.get(key, float("-inf")) + self.start_estimate_seconds - tick
                    if wait > 0:
                        new = old
                        later.append(wait)
                kept[key] = new
            moved = {
                k for k in kept.keys() | self.starts.keys() if kept.get(k) != self.starts.get(k)
            }
            self.starts = kept
            for key in moved:
                written_at[key] = tick
                self.requeue(key)
            for key in set(written_at) - set(kept):
                del written_at[key]
            if later:
                loop.call_later(min(later), self.starts_changed.set)


ESTIMATE_BATCH_SECONDS = 0.5
"""Changes come in bursts (a gang's pods, a cycle's verdicts): one estimate after the burst."""


def _same_kind(a: StartEstimate, b: StartEstimate) -> bool:
    return (a.pool, a.reason, a.now, a.time is None) == (b.pool, b.reason, b.now, b.time is None)


START_SLACK_SECONDS = 60.0
START_SLACK_FRACTION = 0.05


def _settled(before: StartEstimate | None, fresh: StartEstimate, now: dt.datetime) -> StartEstimate:
    """The estimate on record when the fresh one is the same but for a little time: starts
    that hang on "now" (a job ahead starting now, a running job past its ETA) move with the
    clock, and a status rewrite every estimate would say nothing new. Within a minute, or 5 %
    of the time still to wait, the old one stays."""
    if before is None or before.time is None or fresh.time is None:
        return fresh
    if (before.pool, before.reason) != (fresh.pool, fresh.reason):
        return fresh
    slack = max(START_SLACK_SECONDS, START_SLACK_FRACTION * (fresh.time - now).total_seconds())
    return before if abs((fresh.time - before.time).total_seconds()) <= slack else fresh


def _predicted(plan: TrainingPlan | None) -> float | None:
    if plan is None:
        return None
    return plan.calibrated_step_seconds or plan.step_seconds


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def accelerators_free(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Free accelerators per pool, from the admission snapshot's free room."""
    free: dict[str, int] = {}
    for pool in snapshot.pools():
        total = Decimal(0)
        for vector, nodes in snapshot.free_vectors(pool).items():
            amounts = dict(vector)
            total += sum(amounts.get(k, 0) for k in ACCELERATOR_TAINT_KEYS) * nodes
        free[pool] = int(total)
    return free


def estimate_starts(
    snapshot: ClusterSnapshot,
    waiting: Mapping[Key, WaitingGang],
    jobs: Mapping[Key, Mapping[str, Any]],
    now: dt.datetime,
    etas: Mapping[Key, dt.datetime | None] | None = None,
) -> dict[Key, StartEstimate]:
    """The inputs of :func:`expected_starts` from the controller's state: the snapshot's free
    room, the admitted and running jobs (status.pool, status.progress.eta), and the waiting
    gangs in admission order."""
    holders = []
    for (namespace, name), body in jobs.items():
        status = body.get("status") or {}
        if status.get("phase") not in RUNNING_PHASES or not status.get("pool"):
            continue
        spec = body.get("spec") or {}
        # The admission's shape where it chose among accelerator alternatives, else the spec's.
        admitted = status.get("admission") or {}
        accelerators = int(admitted.get("workers") or spec.get("workers") or 0) * int(
            admitted.get("perWorker") or (spec.get("accelerator") or {}).get("perWorker") or 0
        )
        if etas is not None and (namespace, name) in etas:
            ends = etas[(namespace, name)]
        else:
            eta = (status.get("progress") or {}).get("eta")
            ends = dt.datetime.fromisoformat(str(eta).replace("Z", "+00:00")) if eta else None
        holders.append(Holder(f"{namespace}/{name}", status["pool"], accelerators, ends))
    queue = []
    keys: dict[str, Key] = {}
    for _priority, gang in admission_order(snapshot, waiting.values()):
        if gang.blocked is not None or not gang.options:
            continue
        body = jobs.get(gang.key) or {}
        steps = (body.get("spec") or {}).get("steps")
        plan = (body.get("status") or {}).get("plan") or {}
        per_step = plan.get("calibratedStepSeconds") or plan.get("stepSeconds")
        option = gang.options[0]
        job = f"{gang.key[0]}/{gang.key[1]}"
        keys[job] = gang.key
        queue.append(
            Queued(
                job,
                tuple(o.pool for o in gang.options),
                option.workers * option.per_worker,
                float(steps) * float(per_step) if steps and per_step else None,
                tuple(o.workers * o.per_worker for o in gang.options)
                if any(o.accelerator for o in gang.options)
                else (),
            )
        )
    estimates = expected_starts(accelerators_free(snapshot), holders, queue, now)
    return {keys[job]: estimate for job, estimate in estimates.items()}
