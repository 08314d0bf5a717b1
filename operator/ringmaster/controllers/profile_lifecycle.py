"""A PoolProfile's runs, decided from what is observed (pure; controllers/poolprofile.py acts).

A run: one gated measurement pod per host (manifests/profiling.py), admitted whole on idle hosts
(admission/profiles.py); each pod posts its host's result to the operator's endpoint. The run
ends when every host has posted, when its pods have all ended, or at spec.timeoutSeconds; its
results are summarized (profiling/aggregate.py) into status, hosts that fall short are flagged,
and the pool is planned on the measurement (engine/profiled.py). A run whose pods are deleted
before they all posted (given back to a gang, or deleted by anyone) is started again: its pods
wait at the gate until the pool is idle again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ringmaster.api.common import ConditionStatus, set_condition
from ringmaster.api.poolprofile import (
    HostOutcome,
    PoolProfilePhase,
    PoolProfileSpec,
    PoolProfileStatus,
)
from ringmaster.profiling.results import HostResult

PROFILED = "Profiled"
HOSTS_DEGRADED = "HostsDegraded"  # True: hosts below the pool, labelled ringmaster.dev/degraded


@dataclass(frozen=True)
class PoolFacts:
    """The pool as admission sees it."""

    name: str
    accelerator: str | None
    machine_type: str | None
    per_host: int
    nodes: int
    node_selector: Mapping[str, str]


@dataclass(frozen=True)
class RunPods:
    """The pods of the status's run: by rank, their phase ("Gated", "Pending", "Running",
    "Succeeded", "Failed") and node."""

    phases: Mapping[int, str] = field(default_factory=dict)
    nodes: Mapping[int, str] = field(default_factory=dict)
    all_seen: bool = False  # this process has seen every pod of the run (so fewer means deleted)


@dataclass
class ProfileDecision:
    status: PoolProfileStatus
    start_run: int | None = None  # create the pods of this run (hosts: status.hostsProfiled...)
    hosts: int = 0
    delete_run: int | None = None  # delete the pods of this run
    finished: bool = False  # summarize the run's results now
    events: list[tuple[str, str, str]] = field(default_factory=list)
    requeue_after: float | None = None


def _now_iso(now: dt.datetime) -> dt.datetime:
    return now.replace(microsecond=0)


def decide(
    spec: PoolProfileSpec,
    status: PoolProfileStatus,
    generation: int,
    pool: PoolFacts | None,
    pools: list[str],
    pods: RunPods,
    results: Mapping[str, HostResult],
    now: dt.datetime,
    tracked: bool,
) -> ProfileDecision:
    """What to do next for one PoolProfile. ``tracked``: this process has collected the status's
    run's results since it started (after an operator restart, results posted to the old
    process are lost: the run starts again)."""
    status = status.model_copy(deep=True)
    status.observed_generation = generation
    out = ProfileDecision(status=status)
    if pool is None or not pool.accelerator or pool.per_host < 1:
        known = ", ".join(pools) or "none"
        why = (
            f"no node pool named {spec.pool} (pools: {known})"
            if pool is None
            else f"pool {spec.pool} has no accelerators to measure"
        )
        _condition(status, "False", "PoolNotFound", why, generation, now)
        if status.phase in (None, PoolProfilePhase.PENDING):
            status.phase = PoolProfilePhase.PENDING
        if pods.phases:
            out.delete_run = status.run
        out.requeue_after = 30.0
        return out
    status.machine_type = pool.machine_type
    status.accelerator = pool.accelerator
    running = status.run > 0 and (
        status.run_ended_at is None
        or (status.run_started_at is not None and status.run_ended_at < status.run_started_at)
    )
    if running and not tracked:
        return _new_run(spec, status, pool, out, generation, now, "the operator restarted")
    if running:
        return _during_run(spec, status, pool, pods, results, out, generation, now)
    due = _due(spec, status, now)
    if due is None:
        return _new_run(spec, status, pool, out, generation, now, "first")
    if due <= 0:
        return _new_run(spec, status, pool, out, generation, now, "re-profile")
    out.requeue_after = due
    return out


def _due(spec: PoolProfileSpec, status: PoolProfileStatus, now: dt.datetime) -> float | None:
    """Seconds until the next run (None: there has been none; inf: none is due)."""
    if status.run == 0:
        return None
    if spec.reprofile_interval_hours is None:
        return float("inf")
    last = status.run_ended_at or status.run_started_at or now
    return (last + dt.timedelta(hours=spec.reprofile_interval_hours) - now).total_seconds()


def _new_run(
    spec: PoolProfileSpec,
    status: PoolProfileStatus,
    pool: PoolFacts,
    out: ProfileDecision,
    generation: int,
    now: dt.datetime,
    why: str,
) -> ProfileDecision:
    if status.run:
        out.delete_run = status.run
    status.run += 1
    status.run_started_at = _now_iso(now)
    hosts = _expected_hosts(spec, pool)
    status.run_hosts = hosts
    out.start_run, out.hosts = status.run, hosts
    if status.phase != PoolProfilePhase.PROFILED:
        status.phase = PoolProfilePhase.PENDING
    message = (
        f"run {status.run} ({why}): {hosts} measurement pods wait at the admission gate for "
        f"{hosts} idle hosts of pool {pool.name}"
    )
    if status.profiled_at is None:
        _condition(status, "False", "WaitingForIdleHosts", message, generation, now)
    out.events.append(("Normal", "RunStarted", message))
    out.requeue_after = 5.0
    return out


def _during_run(
    spec: PoolProfileSpec,
    status: PoolProfileStatus,
    pool: PoolFacts,
    pods: RunPods,
    results: Mapping[str, HostResult],
    out: ProfileDecision,
    generation: int,
    now: dt.datetime,
) -> ProfileDecision:
    expected = out.hosts = status.run_hosts or _expected_hosts(spec, pool)
    reported = len(results)
    if pods.all_seen and len(pods.phases) < expected and reported < expected:
        # Pods deleted before they all posted (a gang took the hosts back): again, later.
        return _new_run(spec, status, pool, out, generation, now, "its hosts were given back")
    admitted = [r for r, phase in pods.phases.items() if phase != "Gated"]
    if admitted and status.phase == PoolProfilePhase.PENDING:
        status.phase = PoolProfilePhase.MEASURING
        out.events.append(
            ("Normal", "Measuring", f"run {status.run} measures {len(admitted)} hosts")
        )
    if status.profiled_at is None:
        _condition(
            status,
            "False",
            "Measuring" if admitted else "WaitingForIdleHosts",
            f"run {status.run}: {reported} of {expected} hosts reported",
            generation,
            now,
        )
    ended = all(phase in ("Succeeded", "Failed") for phase in pods.phases.values())
    started = status.run_started_at or now
    timed_out = (now - started).total_seconds() >= spec.timeout_seconds
    if reported >= expected or (pods.phases and ended) or timed_out:
        out.finished = True
        out.delete_run = status.run
        return out
    out.requeue_after = 5.0
    return out


def _expected_hosts(spec: PoolProfileSpec, pool: PoolFacts) -> int:
    return min(spec.hosts or pool.nodes, pool.nodes)


def invalid_spec(
    status: PoolProfileStatus, generation: int, message: str, now: dt.datetime
) -> PoolProfileStatus:
    """A spec the operator's model refuses: the condition says why, nothing runs."""
    status = status.model_copy(deep=True)
    status.observed_generation = generation
    _condition(status, "False", "InvalidSpec", message, generation, now)
    return status


def finish(
    status: PoolProfileStatus,
    generation: int,
    results: Mapping[str, HostResult],
    nodes: Mapping[int, str],
    flagged: Mapping[str, str],
    measured: dict[str, Any] | None,
    sustained: float | None,
    catalog_sustained: float | None,
    now: dt.datetime,
) -> list[tuple[str, str, str]]:
    """Record a finished run: hosts, flagged hosts (node -> why), the summary. Events back."""
    outcomes = []
    for node in sorted(set(nodes.values()) | set(results)):
        result = results.get(node)
        if result is None:
            outcomes.append(HostOutcome(node=node, result="Missing", message="no result"))
        elif result.failure:
            outcomes.append(HostOutcome(node=node, result="Failed", message=result.failure))
        else:
            outcomes.append(
                HostOutcome(
                    node=node,
                    result="Reported",
                    sustained_bf16_tflops=result.sustained_tflops.get("bf16"),
                    hbm_gbps=result.hbm_gbps,
                    degraded=node in flagged,
                    message=flagged.get(node),
                )
            )
    status.hosts = outcomes
    status.run_ended_at = _now_iso(now)
    good = [o for o in outcomes if o.result == "Reported"]
    status.hosts_profiled = len(good)
    status.flagged_hosts = sorted(flagged)
    status.flagged = len(flagged)
    events: list[tuple[str, str, str]] = []
    if not good:
        failures = sorted({o.message or "" for o in outcomes if o.result == "Failed"})
        why = "; ".join(failures) or "no host reported before the run ended"
        events.append(("Warning", "ProfileFailed", f"run {status.run}: {why}"))
        if status.profiled_at is not None:
            return events  # the last good profile stays planned on; the Event says why not anew
        status.phase = PoolProfilePhase.FAILED
        reason = "PayloadFailed" if failures else "NoResults"
        _condition(status, "False", reason, why, generation, now)
        return events
    status.phase = PoolProfilePhase.PROFILED
    status.profiled_at = _now_iso(now)
    status.measured = measured
    status.sustained_bf16_tflops = sustained
    status.catalog_sustained_bf16_tflops = catalog_sustained
    missing = [o.node for o in outcomes if o.result != "Reported"]
    message = f"run {status.run}: {len(good)} hosts measured" + (
        f"; no result from {', '.join(missing)}" if missing else ""
    )
    if flagged:
        message += f"; flagged degraded: {', '.join(sorted(flagged))}"
    _condition(status, "True", "Profiled", message, generation, now)
    below = "; ".join(f"{node}: {why}" for node, why in sorted(flagged.items()))
    status.conditions = set_condition(
        status.conditions,
        HOSTS_DEGRADED,
        "True" if flagged else "False",
        "BelowPool" if flagged else "NoneBelowPool",
        below or "no measured host is below the pool's median by more than the threshold",
        generation,
        _now_iso(now),
    )
    events.append(("Normal", "Profiled", message))
    for node, why in sorted(flagged.items()):
        events.append(("Warning", "HostDegraded", f"{node}: {why}"))
    return events


def _condition(
    status: PoolProfileStatus,
    value: ConditionStatus,
    reason: str,
    message: str,
    generation: int,
    now: dt.datetime,
) -> None:
    status.conditions = set_condition(
        status.conditions,
        PROFILED,
        value,
        reason,
        message,
        generation,
        _now_iso(now),
    )
