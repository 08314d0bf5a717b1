"""The admission snapshot: each pod counted once, and incremental updates equal a rebuild."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.admission.cycle import CycleView
from ringmaster.admission.snapshot import (
    ClusterSnapshot,
    NodeFacts,
    PodFacts,
    Promise,
    copies_that_fit,
    shape,
)
from ringmaster.placement.labels import PoolIdentity
from tests.unit.training_world import GPU8, REDUCER_REQUEST, bound_pod, nodes

pytestmark = pytest.mark.unit
POOL = "a100-highgpu-8g"
JOB = ("ns", "a")


def worker(rank: int, node: str | None = None, attempt: int = 0, phase_active=True) -> PodFacts:
    return PodFacts(
        "ns",
        f"a-worker-{rank}",
        GPU8,
        node=node,
        active=phase_active,
        pool=POOL,
        job=JOB,
        attempt=attempt,
    )


def free_for_others(snapshot: ClusterSnapshot) -> int:
    """Whole 8-GPU hosts a new gang could have."""
    return CycleView(snapshot).room(POOL).count(GPU8, 1000, False)


@pytest.mark.parametrize(("unbound", "bound"), [(0, 0), (1, 0), (2, 1), (0, 3), (2, 2)])
def test_a_promised_pod_counts_once_whether_decided_created_or_bound(unbound, bound):
    """Job a was admitted with 4 workers on 8 hosts; the watch shows some of its pods so far."""
    snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, nodes({POOL: 8}), [])
    snapshot.promise(Promise(JOB, POOL, 0, GPU8, 4))
    hosts = sorted(n.name for n in nodes({POOL: 8}))
    for rank in range(unbound):
        snapshot.set_pod(worker(rank))
    for rank in range(unbound, unbound + bound):
        snapshot.set_pod(worker(rank, hosts[rank]))
    assert free_for_others(snapshot) == 4


def test_a_finished_pod_frees_its_host_and_pods_of_another_attempt_do_not_fill_a_promise():
    hosts = sorted(n.name for n in nodes({POOL: 8}))
    snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, nodes({POOL: 8}), [])
    snapshot.promise(Promise(JOB, POOL, 1, GPU8, 2))
    snapshot.set_pod(worker(0, hosts[0], attempt=0))  # the previous attempt, still running
    assert free_for_others(snapshot) == 5
    snapshot.set_pod(worker(0, hosts[0], attempt=0, phase_active=False))
    assert free_for_others(snapshot) == 6
    snapshot.release(JOB)
    assert free_for_others(snapshot) == 8


def free_hosts(snapshot: ClusterSnapshot) -> set[str]:
    """The hosts with room for a whole 8-GPU worker, by name."""
    return {
        name
        for free in snapshot.free_vectors(POOL)
        if copies_that_fit(dict(free), GPU8) >= 1
        for name in snapshot.nodes_with(POOL, free)
    }


@pytest.mark.parametrize(("unbound", "bound"), [(0, 0), (1, 0), (2, 1), (0, 3), (2, 2)])
def test_a_pinned_gang_holds_its_own_hosts_once_whether_decided_created_or_bound(unbound, bound):
    """Job a was admitted on hosts 2-5 by name; its pods are pinned there and show up unbound,
    then bound: whatever the mix, exactly those four hosts are taken, each once."""
    hosts = sorted(n.name for n in nodes({POOL: 8}))
    snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, nodes({POOL: 8}), [])
    snapshot.promise(Promise(JOB, POOL, 0, GPU8, 4, hosts=tuple(hosts[2:6])))
    for rank in range(unbound):
        snapshot.set_pod(replace(worker(rank), pinned=hosts[2 + rank]))
    for rank in range(unbound, unbound + bound):
        snapshot.set_pod(replace(worker(rank, hosts[2 + rank]), pinned=hosts[2 + rank]))
    assert free_hosts(snapshot) == set(hosts[:2] + hosts[6:])
    assert free_for_others(snapshot) == 4
    assert snapshot.host_problems(hosts) == {}
    snapshot.release(JOB)  # the pods it has hold their hosts; the promise holds no more
    assert free_hosts(snapshot) == set(hosts) - set(hosts[2 : 2 + unbound + bound])


def test_a_pinned_pod_going_away_or_finished_frees_its_host():
    hosts = sorted(n.name for n in nodes({POOL: 2}))
    snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, nodes({POOL: 2}), [])
    pinned = replace(worker(0), pinned=hosts[0])
    snapshot.set_pod(pinned)
    assert free_hosts(snapshot) == {hosts[1]}
    snapshot.set_pod(replace(pinned, terminating=True))
    assert free_hosts(snapshot) == set(hosts)
    snapshot.set_pod(replace(pinned, node=hosts[0], active=False))
    assert free_hosts(snapshot) == set(hosts)


def test_a_host_admission_chose_is_a_problem_once_gone_cordoned_or_taken():
    facts = nodes({POOL: 4})
    hosts = sorted(n.name for n in facts)
    snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, facts, [])
    snapshot.promise(Promise(JOB, POOL, 0, GPU8, 3, hosts=tuple(hosts[:3])))
    assert snapshot.host_problems(hosts) == {}
    snapshot.remove_node(hosts[0])
    snapshot.set_node(replace(next(n for n in facts if n.name == hosts[1]), schedulable=False))
    snapshot.set_pod(bound_pod("intruder", hosts[2]))  # a pod of someone else bound there
    snapshot.set_pod(bound_pod("neighbour", hosts[3]))  # on a host the gang does not use
    problems = snapshot.host_problems(hosts)
    assert problems == {
        hosts[0]: f"host {hosts[0]} is gone",
        hosts[1]: f"host {hosts[1]} is cordoned or not Ready",
        hosts[2]: f"host {hosts[2]} has no room left for it (other pods took it)",
    }


def test_cordoned_and_unready_nodes_offer_no_room():
    facts = nodes({POOL: 3})
    snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, facts, [])
    cordoned = NodeFacts(**{**facts[0].__dict__, "schedulable": False})
    snapshot.set_node(cordoned)
    assert free_for_others(snapshot) == 2
    snapshot.remove_node(facts[1].name)
    assert free_for_others(snapshot) == 1
    assert snapshot.pools()[POOL].nodes == 2  # the cordoned one is still a member


def test_priority_classes_and_the_global_default():
    snapshot = ClusterSnapshot(REDUCER_REQUEST)
    assert snapshot.priority(None) == 0 and snapshot.priority("high") is None
    snapshot.set_priority_class("high", 1000)
    snapshot.set_priority_class("normal", 10, global_default=True)
    assert (snapshot.priority("high"), snapshot.priority(None)) == (1000, 10)
    snapshot.remove_priority_class("normal")
    assert snapshot.priority(None) == 0


# ---------------------------------------------------------------- incremental == rebuilt

NODE_NAMES = [f"n{i}" for i in range(6)]
POD_NAMES = [f"p{i}" for i in range(10)]
POOLS = ["gpu-a", "gpu-b", "cpu"]


def node_facts(name: str, pool: str, gpus: int, schedulable: bool) -> NodeFacts:
    cpu = pool == "cpu"
    identity = PoolIdentity(
        pool, "n1-highcpu-16" if cpu else "a2-highgpu-8g", None if cpu else "a100", None
    )
    allocatable = {"cpu": Decimal(16), "memory": Decimal(64)}
    if not cpu:
        allocatable["nvidia.com/gpu"] = Decimal(gpus)
    return NodeFacts(
        name,
        identity,
        tuple(sorted(allocatable.items())),
        schedulable,
        "cloud.google.com/gke-nodepool",
        0 if cpu else gpus,
    )


nodes_st = st.builds(
    node_facts,
    st.sampled_from(NODE_NAMES),
    st.sampled_from(POOLS),
    st.sampled_from([4, 8]),
    st.booleans(),
)


def pod_facts_(name, node, pool, gpus, cpu, active, terminating, role, attempt, pinned, gated):
    requests = {"nvidia.com/gpu": Decimal(gpus), "cpu": Decimal(cpu)}
    return PodFacts(
        "ns",
        name,
        shape(requests),
        node=node,
        pinned=pinned,
        active=active,
        terminating=terminating,
        pool=pool,
        machine="n1-highcpu-16" if role == "reducer" else None,
        job=("ns", "j") if role == "worker" else None,
        attempt=attempt,
        reducer_pool=("ns", "r") if role == "reducer" else None,
        gated=gated and role == "server",
    )


pods_st = st.builds(
    pod_facts_,
    st.sampled_from(POD_NAMES),
    st.one_of(st.none(), st.sampled_from(NODE_NAMES)),
    st.one_of(st.none(), st.sampled_from(POOLS)),
    st.integers(0, 8),
    st.integers(0, 4),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["worker", "reducer", "server", "other"]),
    st.integers(0, 1),
    st.one_of(st.none(), st.sampled_from(NODE_NAMES)),
    st.booleans(),
)

promises_st = st.builds(
    lambda pool, attempt, gpus, hosts: Promise(
        ("ns", "j"),
        pool,
        attempt,
        shape({"nvidia.com/gpu": Decimal(gpus)}),
        max(len(hosts), 1),
        hosts=tuple(hosts),
    ),
    st.sampled_from(POOLS),
    st.integers(0, 1),
    st.integers(0, 8),
    st.lists(st.sampled_from(NODE_NAMES), max_size=4),
)

events_st = st.lists(
    st.one_of(
        st.tuples(st.just("node"), nodes_st),
        st.tuples(st.just("node-gone"), st.sampled_from(NODE_NAMES)),
        st.tuples(st.just("pod"), pods_st),
        st.tuples(st.just("pod-gone"), st.sampled_from(POD_NAMES)),
        st.tuples(st.just("promise"), promises_st),
        st.tuples(st.just("release"), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events_st)
def test_incremental_updates_equal_a_rebuild_from_the_final_objects(events):
    live = ClusterSnapshot(REDUCER_REQUEST)
    final_nodes: dict[str, NodeFacts] = {}
    final_pods: dict[tuple[str, str], PodFacts] = {}
    final_promise: Promise | None = None
    for kind, value in events:
        if kind == "node":
            live.set_node(value)
            final_nodes[value.name] = value
        elif kind == "node-gone":
            live.remove_node(value)
            final_nodes.pop(value, None)
        elif kind == "pod":
            live.set_pod(value)
            final_pods[value.key] = value
        elif kind == "promise":
            live.promise(value)
            final_promise = value
        elif kind == "release":
            live.release(("ns", "j"))
            final_promise = None
        else:
            live.remove_pod(("ns", value))
            final_pods.pop(("ns", value), None)
    promises = [final_promise] if final_promise else []
    rebuilt = ClusterSnapshot.rebuilt(
        REDUCER_REQUEST, final_nodes.values(), final_pods.values(), promises
    )
    assert live.state() == rebuilt.state()
    for pool in POOLS:
        assert sorted(live.headed_to(pool)) == sorted(rebuilt.headed_to(pool))
    assert live.free_reducer_hosts("n1-highcpu-16") == rebuilt.free_reducer_hosts("n1-highcpu-16")
    assert live.host_problems(NODE_NAMES) == rebuilt.host_problems(NODE_NAMES)
