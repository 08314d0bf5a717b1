"""Admission packs a gang by its pool's topology labels (issue 43): one block when one holds it,
the fewest blocks otherwise, and a gang that requires one block waits with the numbers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.admission.cycle import (
    TOPOLOGY_UNAVAILABLE,
    Admit,
    GangOption,
    QueueingSettings,
    Wait,
    WaitingGang,
    admission_pass,
)
from ringmaster.admission.snapshot import ClusterSnapshot, NodeFacts, shape
from ringmaster.placement.pools import node_from_object
from ringmaster.placement.topology import GKE_BLOCK, NVLINK_CLIQUE, blocks_forced, node_topology
from tests.unit.training_world import (
    NOW,
    REDUCER_REQUEST,
    bound_pod,
    untopologised_node_objects,
)

pytestmark = pytest.mark.unit
POOL = "a100-highgpu-8g"
GPU8 = shape({"nvidia.com/gpu": Decimal(8)})
SETTINGS = QueueingSettings()


def nodes(blocks: list[int], label: str = GKE_BLOCK) -> list[NodeFacts]:
    """len(blocks) hosts of the A100 pool, host i in block blocks[i] (the pool's own blocks
    dropped)."""
    objects = untopologised_node_objects({POOL: len(blocks)})
    for obj, block in zip(objects, blocks, strict=True):
        obj["metadata"]["labels"][label] = f"b{block}"
    return [NodeFacts.from_node(node_from_object(o)) for o in objects]


def clique_labels(facts: NodeFacts) -> dict[str, str]:
    return {"topology.kubernetes.io/zone": "us-central1-a", NVLINK_CLIQUE: "b1"}


def host(i: int) -> str:
    return f"{POOL}-{i:04d}"


def gang(workers: int, topology: str = "Preferred", groups: tuple[int, ...] = ()) -> WaitingGang:
    option = GangOption(
        POOL, GPU8, workers, False, "nvidia.com/gpu", 8, topology=topology, groups=groups
    )
    return WaitingGang(("ml", "llama"), NOW, "nvidia-tesla-a100", (option,))


def decide(snapshot: ClusterSnapshot, g: WaitingGang):
    [verdict] = admission_pass(snapshot, [g], SETTINGS, NOW)[1]
    return verdict


def test_the_labels_are_read_into_the_snapshot():
    [facts] = nodes([3])
    assert facts.topology.value(GKE_BLOCK) == "b3"
    [clique] = nodes([1], label=NVLINK_CLIQUE)
    assert clique.topology == node_topology(dict(clique_labels(clique)))


def test_a_gang_lands_in_one_block_when_one_is_free():
    # Blocks b0 (hosts 0-3) and b1 (hosts 4-7); two hosts of b0 busy.
    snap = ClusterSnapshot.rebuilt(
        REDUCER_REQUEST,
        nodes([0, 0, 0, 0, 1, 1, 1, 1]),
        [bound_pod("a", host(0)), bound_pod("b", host(1))],
    )
    verdict = decide(snap, gang(4))
    assert isinstance(verdict, Admit)
    assert sorted(verdict.hosts) == [host(i) for i in (4, 5, 6, 7)] and verdict.blocks == ("b1",)


def test_required_waits_with_the_numbers_and_preferred_spreads():
    snap = ClusterSnapshot.rebuilt(
        REDUCER_REQUEST,
        nodes([0, 0, 0, 0, 1, 1, 1, 1]),
        [bound_pod("a", host(0)), bound_pod("b", host(4))],
    )
    wait = decide(snap, gang(4, "Required"))
    assert isinstance(wait, Wait) and wait.reason == TOPOLOGY_UNAVAILABLE
    assert "needs 4 hosts of pool a100-highgpu-8g in one block" in wait.message
    assert "block b0: 3 free, b1: 3" in wait.message
    spread = decide(snap, gang(4, "Preferred"))
    assert isinstance(spread, Admit) and spread.blocks == ("b0", "b1")
    # Without topology labels nothing changes: admitted anywhere.
    plain = ClusterSnapshot.rebuilt(REDUCER_REQUEST, nodes([0] * 8, label="unrelated"), [])
    assert isinstance(decide(plain, gang(4, "Required")), Admit)


def test_tensor_groups_spanning_trays_stay_inside_one_nvlink_clique():
    # Four trays in clique c0 (one busy), four in c1: a gang of 4 trays whose TP groups span 2
    # trays gets them in pairs inside one clique.
    snap = ClusterSnapshot.rebuilt(
        REDUCER_REQUEST,
        nodes([0, 0, 0, 0, 1, 1, 1, 1], label=NVLINK_CLIQUE),
        [bound_pod("a", host(0))],
    )
    verdict = decide(snap, gang(4, groups=(2,)))
    assert isinstance(verdict, Admit)
    cliques = [int(verdict.hosts[r].rsplit("-", 1)[1]) // 4 for r in range(4)]
    assert cliques[0] == cliques[1] and cliques[2] == cliques[3]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=4, max_size=24),
    st.data(),
)
def test_an_admitted_gang_never_spans_more_blocks_than_the_free_hosts_force(blocks, data):
    facts = nodes(blocks)
    busy = data.draw(st.sets(st.integers(0, len(blocks) - 1), max_size=len(blocks) - 1))
    pods = [bound_pod(f"p{i}", host(i)) for i in sorted(busy)]
    snap = ClusterSnapshot.rebuilt(REDUCER_REQUEST, facts, pods)
    free = {f.name: f.topology for f in facts if int(f.name.rsplit("-", 1)[1]) not in busy}
    workers = data.draw(st.integers(1, len(free)))
    verdict = decide(snap, gang(workers))
    assert isinstance(verdict, Admit)
    assert len(verdict.blocks) == blocks_forced(free, workers)
