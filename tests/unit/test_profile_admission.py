"""PoolProfile runs in the admission pass (admission/profiles.py): idle hosts only, last, whole,
and given back to a gang that needs them; flagged hosts kept from gangs (issue 47)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from ringmaster.admission.cycle import (
    Admit,
    GangOption,
    Grant,
    Hold,
    QueueingSettings,
    Wait,
    WaitingGang,
    admission_pass,
)
from ringmaster.admission.profiles import Yield
from ringmaster.admission.snapshot import ClusterSnapshot, PodFacts, shape
from ringmaster.controllers.cluster_state import pod_facts
from ringmaster.manifests.profiling import measurement_pod
from tests.unit.training_world import NOW, REDUCER_REQUEST, bound_pod, nodes

pytestmark = pytest.mark.unit
POOL = "a100-highgpu-8g"
GPU8 = shape({"nvidia.com/gpu": Decimal(8)})
SELECTOR = {"cloud.google.com/gke-nodepool": POOL}
SETTINGS = QueueingSettings()


def run_pods(hosts: int, run: int = 1) -> list[PodFacts]:
    """A run's pods as the operator creates them (the real manifest), parsed as admission does."""
    return [
        pod_facts(
            {
                **measurement_pod(
                    profile="a100",
                    namespace="ops",
                    run=run,
                    rank=rank,
                    hosts=hosts,
                    image="pytorch:2.5",
                    node_selector=SELECTOR,
                    accelerator_resource="nvidia.com/gpu",
                    per_host=8,
                    measurements=["Gemm"],
                    quick=True,
                    results_url="https://ringmaster.ringmaster-system.svc:8443",
                    ca=False,
                ),
                "status": {"phase": "Pending"},
            }
        )
        for rank in range(hosts)
    ]


def world(*pods: PodFacts, degraded: tuple[str, ...] = ()) -> ClusterSnapshot:
    facts = [replace(n, degraded=n.name in degraded) for n in nodes({POOL: 4})]
    return ClusterSnapshot.rebuilt(REDUCER_REQUEST, facts, pods)


def gang(workers: int) -> WaitingGang:
    option = GangOption(POOL, GPU8, workers, False, "nvidia.com/gpu", 8)
    return WaitingGang(("ml", "llama"), NOW, "nvidia-tesla-a100", (option,))


def host(i: int) -> str:
    return f"{POOL}-{i:04d}"


def test_a_run_is_one_gated_group_of_its_profile():
    pods = run_pods(3)
    assert all(p.gated and p.profile == ("ops", "a100") for p in pods)
    assert {p.group for p in pods} == {("ops", "poolprofile/a100/1")}
    assert {p.group_size for p in pods} == {3}


def test_a_run_takes_idle_hosts_only_whole_and_after_the_gangs():
    busy = bound_pod("someone", host(0))
    snap = world(busy, *run_pods(3))
    grants, _ = admission_pass(snap, [], SETTINGS, NOW)
    assert sorted(v.host for v in grants if isinstance(v, Grant)) == [host(1), host(2), host(3)]
    # Four hosts asked, three idle: the whole run waits, with the numbers.
    snap = world(busy, *run_pods(4))
    grants, _ = admission_pass(snap, [], SETTINGS, NOW)
    assert all(isinstance(v, Hold) for v in grants) and len(grants) == 4
    assert "needs 4 idle hosts of pool a100-highgpu-8g" in grants[0].message
    assert "3 idle now" in grants[0].message


def test_a_gang_admitted_in_the_same_pass_keeps_its_hosts_from_the_run():
    snap = world(*run_pods(2))
    grants, verdicts = admission_pass(snap, [gang(3)], SETTINGS, NOW)
    [admit] = verdicts
    assert isinstance(admit, Admit)
    # The gang took 3 of the 4 hosts in this pass: the run (2 hosts) waits whole.
    assert all(isinstance(v, Hold) for v in grants)


def test_no_run_starts_on_a_pool_where_a_gang_waits():
    snap = world(bound_pod("someone", host(0)), *run_pods(1))
    grants, verdicts = admission_pass(snap, [gang(4)], SETTINGS, NOW)
    assert isinstance(verdicts[0], Wait)
    [held] = grants
    assert isinstance(held, Hold) and "waits for room on pool" in held.message


def through(snap: ClusterSnapshot, pods: list[PodFacts], hosts: list[str]) -> None:
    for pod, name in zip(pods, hosts, strict=True):
        snap.set_pod(replace(pod, gated=False, node=name))


def test_a_run_yields_its_hosts_to_a_gang_that_fits_on_them():
    pods = run_pods(2)
    snap = world(*pods)
    through(snap, pods, [host(0), host(1)])
    # 4 workers: 2 fit beside the run, 2 more on its hosts: it yields, the gang waits one cycle.
    grants, verdicts = admission_pass(snap, [gang(4)], SETTINGS, NOW)
    assert isinstance(verdicts[0], Wait)
    yields = [v for v in grants if isinstance(v, Yield)]
    assert sorted(y.pod for y in yields) == sorted(p.key for p in pods)
    assert "ml/llama needs 4 workers there and 2 fit without them" in yields[0].message
    # Its pods gone, the gang is admitted.
    for pod in pods:
        snap.remove_pod(pod.key)
    _, verdicts = admission_pass(snap, [gang(4)], SETTINGS, NOW)
    assert isinstance(verdicts[0], Admit)


def test_a_run_keeps_its_hosts_when_freeing_them_would_not_admit_the_gang():
    pods = run_pods(1)
    snap = world(bound_pod("a", host(1)), bound_pod("b", host(2)), *pods)
    through(snap, pods, [host(0)])
    grants, verdicts = admission_pass(snap, [gang(4)], SETTINGS, NOW)
    assert isinstance(verdicts[0], Wait)
    assert not [v for v in grants if isinstance(v, Yield)]


def test_flagged_hosts_take_no_gang_and_the_wait_says_so_but_a_run_measures_them():
    snap = world(degraded=(host(3),))
    _, verdicts = admission_pass(snap, [gang(4)], SETTINGS, NOW)
    [wait] = verdicts
    assert isinstance(wait, Wait) and "3 fit now" in wait.message
    assert (
        "1 of 4 hosts flagged degraded by a PoolProfile (ringmaster.dev/degraded)" in wait.message
    )
    _, verdicts = admission_pass(snap, [gang(3)], SETTINGS, NOW)
    assert isinstance(verdicts[0], Admit) and host(3) not in verdicts[0].hosts
    snap = world(*run_pods(4), degraded=(host(3),))
    grants, _ = admission_pass(snap, [], SETTINGS, NOW)
    assert sorted(v.host for v in grants if isinstance(v, Grant)) == [host(i) for i in range(4)]
