"""The admission snapshot: each pod counted once, and incremental updates equal a rebuild."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.admission.cycle import CycleView
from ringmaster.admission.snapshot import ClusterSnapshot, NodeFacts, PodFacts, Promise, shape
from ringmaster.placement.labels import PoolIdentity
from tests.unit.training_world import GPU8, REDUCER_REQUEST, nodes

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


def pod_facts_(name, node, pool, gpus, cpu, active, terminating, role, attempt) -> PodFacts:
    requests = {"nvidia.com/gpu": Decimal(gpus), "cpu": Decimal(cpu)}
    return PodFacts(
        "ns",
        name,
        shape(requests),
        node=node,
        active=active,
        terminating=terminating,
        pool=pool,
        machine="n1-highcpu-16" if role == "reducer" else None,
        job=("ns", "j") if role == "worker" else None,
        attempt=attempt,
        reducer_pool=("ns", "r") if role == "reducer" else None,
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
    st.sampled_from(["worker", "reducer", "other"]),
    st.integers(0, 1),
)

events_st = st.lists(
    st.one_of(
        st.tuples(st.just("node"), nodes_st),
        st.tuples(st.just("node-gone"), st.sampled_from(NODE_NAMES)),
        st.tuples(st.just("pod"), pods_st),
        st.tuples(st.just("pod-gone"), st.sampled_from(POD_NAMES)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events_st)
def test_incremental_updates_equal_a_rebuild_from_the_final_objects(events):
    live = ClusterSnapshot(REDUCER_REQUEST)
    final_nodes: dict[str, NodeFacts] = {}
    final_pods: dict[tuple[str, str], PodFacts] = {}
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
        else:
            live.remove_pod(("ns", value))
            final_pods.pop(("ns", value), None)
    rebuilt = ClusterSnapshot.rebuilt(REDUCER_REQUEST, final_nodes.values(), final_pods.values())
    assert live.state() == rebuilt.state()
    for pool in POOLS:
        assert sorted(live.headed_to(pool)) == sorted(rebuilt.headed_to(pool))
    assert live.free_reducer_hosts("n1-highcpu-16") == rebuilt.free_reducer_hosts("n1-highcpu-16")
