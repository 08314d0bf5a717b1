"""A PoolProfile's runs (controllers/profile_lifecycle.py): started, waited for, ended by results,
by pods ending or by the timeout, started again after a yield or an operator restart."""

from __future__ import annotations

import datetime as dt

import pytest

from ringmaster.api.poolprofile import PoolProfileSpec, PoolProfileStatus
from ringmaster.controllers.profile_lifecycle import (
    PoolFacts,
    RunPods,
    decide,
    finish,
    invalid_spec,
)
from ringmaster.profiling.results import parse_result

pytestmark = pytest.mark.unit
NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
POOL = PoolFacts("h100-a", "nvidia-h100-80gb", "a3-highgpu-8g", 8, 4, {"pool": "h100-a"})
SPEC = PoolProfileSpec.model_validate({"pool": "h100-a", "image": "pytorch:2.5", "hosts": 2})


def result(node: str, bf16: float = 700.0):
    device = {"name": "H100", "count": 8, "memoryBytes": 85 * 2**30, "torch": "2.5"}
    return parse_result(
        {"version": 1, "node": node, "device": device, "sustainedTflops": {"bf16": bf16}}
    )


def step(status, pods=None, results=None, now=NOW, tracked=True, spec=SPEC, pool=POOL):
    pods = pods or RunPods()
    return decide(spec, status, 1, pool, ["h100-a"], pods, results or {}, now, tracked)


def test_a_new_profile_starts_run_one_on_a_sample_of_the_pool():
    d = step(PoolProfileStatus())
    assert (d.start_run, d.hosts, d.status.run, d.status.run_hosts) == (1, 2, 1, 2)
    assert d.status.phase == "Pending"
    assert d.status.conditions[0].reason == "WaitingForIdleHosts"
    assert d.status.machine_type == "a3-highgpu-8g"


def test_an_unknown_pool_is_a_condition_with_the_pools_there_are():
    d = decide(SPEC, PoolProfileStatus(), 1, None, ["a100-x", "t4-y"], RunPods(), {}, NOW, True)
    assert d.start_run is None
    [c] = d.status.conditions
    assert (
        c.reason == "PoolNotFound"
        and "no node pool named h100-a (pools: a100-x, t4-y)" in c.message
    )


def test_the_run_ends_when_every_host_reported():
    status = step(PoolProfileStatus()).status
    pods = RunPods({0: "Running", 1: "Running"}, {0: "n0", 1: "n1"}, all_seen=True)
    d = step(status, pods, {"n0": result("n0")})
    assert not d.finished and d.status.phase == "Measuring"
    d = step(d.status, pods, {"n0": result("n0"), "n1": result("n1")})
    assert d.finished and d.delete_run == 1


def test_pods_gone_before_they_all_reported_start_the_run_again():
    status = step(PoolProfileStatus()).status
    d = step(status, RunPods({0: "Running"}, {0: "n0"}, all_seen=True), {})
    assert d.start_run == 2 and d.delete_run == 1
    assert "its hosts were given back" in d.events[0][2]


def test_a_run_the_operator_lost_track_of_starts_again():
    status = step(PoolProfileStatus()).status
    d = step(status, RunPods({0: "Running", 1: "Running"}), tracked=False)
    assert d.start_run == 2 and "the operator restarted" in d.events[0][2]


def test_the_timeout_ends_a_run_with_what_arrived():
    status = step(PoolProfileStatus()).status
    pods = RunPods({0: "Running", 1: "Gated"}, {0: "n0"}, all_seen=True)
    late = NOW + dt.timedelta(seconds=SPEC.timeout_seconds)
    assert step(status, pods, {"n0": result("n0")}, now=late).finished


def test_a_finished_run_records_hosts_flags_and_a_failure_by_its_message():
    status = step(PoolProfileStatus()).status
    events = finish(
        status, 1, {"n0": result("n0")}, {0: "n0", 1: "n1"}, {}, {"x": 1}, 700.0, 706.6, NOW
    )
    assert status.phase == "Profiled" and status.hosts_profiled == 1
    assert [h.result for h in status.hosts] == ["Reported", "Missing"]
    assert "no result from n1" in events[0][2]
    failed = parse_result({"version": 1, "node": "n0", "failure": "PyTorch is not importable"})
    status = step(PoolProfileStatus()).status
    finish(status, 1, {"n0": failed}, {0: "n0"}, {}, None, None, None, NOW)
    assert status.phase == "Failed"
    assert status.conditions[0].reason == "PayloadFailed"
    assert "PyTorch is not importable" in status.conditions[0].message


def test_a_profiled_pool_is_measured_again_after_the_interval_only():
    spec = SPEC.model_copy(update={"reprofile_interval_hours": 24})
    started = NOW - dt.timedelta(minutes=10)
    status = PoolProfileStatus(
        run=1, phase="Profiled", profiled_at=NOW, run_started_at=started, run_ended_at=NOW
    )
    assert step(status, spec=spec, now=NOW + dt.timedelta(hours=23)).start_run is None
    assert step(status, spec=spec, now=NOW + dt.timedelta(hours=24)).start_run == 2
    assert step(status, now=NOW + dt.timedelta(days=400)).start_run is None


def test_a_re_profile_run_is_followed_while_the_pool_stays_planned_on_the_last_profile():
    spec = SPEC.model_copy(update={"reprofile_interval_hours": 1})
    started = NOW - dt.timedelta(minutes=10)
    status = PoolProfileStatus(
        run=1, phase="Profiled", profiled_at=NOW, run_started_at=started, run_ended_at=NOW
    )
    later = NOW + dt.timedelta(hours=1)
    d = step(status, spec=spec, now=later)
    assert d.start_run == 2 and d.status.phase == "Profiled"
    pods = RunPods({0: "Running", 1: "Running"}, {0: "n0", 1: "n1"}, all_seen=True)
    d = step(d.status, pods, {"n0": result("n0"), "n1": result("n1")}, now=later, spec=spec)
    assert d.finished and d.start_run is None


def test_hosts_below_the_pool_are_a_condition_naming_each_and_why():
    status = step(PoolProfileStatus()).status
    results = {"n0": result("n0"), "n1": result("n1", 520.0)}
    flagged = {"n1": "gemm.sustained.bf16 26% below the pool's median"}
    finish(status, 1, results, {0: "n0", 1: "n1"}, flagged, {}, 700.0, 706.6, NOW)
    [c] = [c for c in status.conditions if c.type == "HostsDegraded"]
    assert (c.status, c.reason) == ("True", "BelowPool")
    assert "n1: gemm.sustained.bf16 26% below" in c.message
    assert status.flagged_hosts == ["n1"] and status.flagged == 1
    assert [h.degraded for h in status.hosts] == [False, True]
    finish(status, 1, results, {0: "n0", 1: "n1"}, {}, {}, 700.0, 706.6, NOW)
    [c] = [c for c in status.conditions if c.type == "HostsDegraded"]
    assert (c.status, c.reason) == ("False", "NoneBelowPool")


def test_a_spec_the_model_refuses_is_a_condition_not_a_run():
    status = invalid_spec(PoolProfileStatus(), 3, "measurements: unknown", NOW)
    [c] = status.conditions
    assert (c.status, c.reason, c.message) == ("False", "InvalidSpec", "measurements: unknown")
    assert status.observed_generation == 3 and status.run == 0
