"""Issue 43: network topology from node labels, free domains, and hosts packed by topology."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine.placement_cost import PlacementShape
from ringmaster.placement.labels import ZONE
from ringmaster.placement.topology import (
    AUTO,
    AWS_LAYER_1,
    AWS_LAYER_2,
    AWS_LAYER_3,
    DEFAULT_LOSS_THRESHOLD_PERCENT,
    GKE_BLOCK,
    GKE_HOST,
    GKE_SUBBLOCK,
    NVLINK_CLIQUE,
    PREFERRED,
    REQUIRED,
    Topology,
    blocks_forced,
    choose_hosts,
    describe_domains,
    free_domains,
    node_topology,
    smallest_level,
    spread_hosts,
    topologies,
    topology_verdict,
)

pytestmark = pytest.mark.unit


def gke(block: str, subblock: str, host: str, zone: str = "us-central1-a") -> dict[str, str]:
    return {ZONE: zone, GKE_BLOCK: block, GKE_SUBBLOCK: subblock, GKE_HOST: host}


def cluster(blocks: Mapping[str, int], subblock_size: int = 4) -> dict[str, Topology]:
    """Free hosts: ``blocks`` name -> free hosts, in subblocks of ``subblock_size``."""
    nodes = []
    for block, count in blocks.items():
        for i in range(count):
            sub = f"{block}-s{i // subblock_size}"
            nodes.append((f"{block}-n{i:02d}", gke(block, sub, f"{block}-h{i:02d}")))
    return topologies(nodes)


# --- levels from each label family --------------------------------------------------------------


def test_gke_levels_outermost_first() -> None:
    t = node_topology(gke("b1", "b1-s0", "h7"))
    assert t.path == (
        (ZONE, "us-central1-a"),
        (GKE_BLOCK, "b1"),
        (GKE_SUBBLOCK, "b1-s0"),
        (GKE_HOST, "h7"),
    )
    assert t.clique is None


def test_aws_network_node_layers() -> None:
    labels = {AWS_LAYER_1: "nn-1", AWS_LAYER_2: "nn-2", AWS_LAYER_3: "nn-3"}
    t = node_topology(labels)
    assert t.keys == (AWS_LAYER_1, AWS_LAYER_2, AWS_LAYER_3)
    assert t.value(AWS_LAYER_3) == "nn-3"


def test_nvlink_clique_is_its_own_domain() -> None:
    t = node_topology({GKE_BLOCK: "b1", NVLINK_CLIQUE: "cluster-uuid.3"})
    assert t.clique == "cluster-uuid.3"
    assert NVLINK_CLIQUE not in t.keys


def test_user_levels_replace_the_families() -> None:
    labels = {"example.com/row": "r2", "example.com/rack": "k5", GKE_BLOCK: "b1"}
    t = node_topology(labels, ("example.com/row", "example.com/rack", "example.com/pdu"))
    assert t.path == (
        ("example.com/row", "r2"),
        ("example.com/rack", "k5"),
        ("example.com/pdu", ""),
    )


def test_zone_alone_and_no_labels() -> None:
    assert node_topology({ZONE: "z"}).path == ((ZONE, "z"),)
    assert node_topology({}).path == ()


# --- domains of free hosts ----------------------------------------------------------------------


def test_domains_of_free_hosts_most_free_first() -> None:
    free = cluster({"b1": 12, "b2": 9, "b3": 7})
    domains = free_domains(free, GKE_BLOCK)
    assert [(d.name, d.free) for d in domains] == [("b1", 12), ("b2", 9), ("b3", 7)]
    assert describe_domains(domains, GKE_BLOCK) == "block b1: 12 free, b2: 9, b3: 7"


def test_a_missing_label_is_a_domain_of_its_own() -> None:
    free = topologies([("a", {GKE_BLOCK: ""}), ("b", {GKE_BLOCK: ""}), ("c", {GKE_BLOCK: "b"})])
    assert sorted(d.free for d in free_domains(free, GKE_BLOCK)) == [1, 1, 1]


def test_smallest_level_holding_n() -> None:
    free = cluster({"b1": 12, "b2": 9, "b3": 7})  # subblocks of 4
    assert smallest_level(free, 1) == GKE_HOST
    assert smallest_level(free, 4) == GKE_SUBBLOCK
    assert smallest_level(free, 10) == GKE_BLOCK
    assert smallest_level(free, 20) == ZONE
    assert smallest_level(free, 29) is None


# --- choosing hosts -----------------------------------------------------------------------------


def test_packs_into_one_block_when_one_is_free() -> None:
    free = cluster({"b1": 12, "b2": 20, "b3": 17, "b4": 30})
    choice = choose_hosts(free, 16)
    assert choice is not None
    assert choice.blocks == 1
    # best fit: the smallest block that holds the gang, the big one stays free
    assert choice.domains[GKE_BLOCK] == (("us-central1-a", "b3"),)
    assert len(set(choice.hosts)) == 16
    assert choice.shape() == PlacementShape(blocks=1)


def test_packs_into_the_fewest_blocks_otherwise() -> None:
    free = cluster({"b1": 12, "b2": 9, "b3": 7, "b4": 3})
    choice = choose_hosts(free, 16)
    assert choice is not None
    assert choice.blocks == 2
    assert {d[-1] for d in choice.domains[GKE_BLOCK]} == {
        "b1",
        "b3",
    }  # 12 + the smallest that completes it
    spread = spread_hosts(free, 16)
    assert spread is not None and spread.blocks == 4


def test_ranks_run_domain_by_domain() -> None:
    free = cluster({"b1": 12, "b2": 9})
    choice = choose_hosts(free, 16)
    assert choice is not None
    blocks = [h.split("-")[0] for h in choice.hosts]
    assert blocks == ["b1"] * 12 + ["b2"] * 4


def test_groups_kept_inside_blocks_when_that_costs_no_block() -> None:
    free = cluster({"b1": 7, "b2": 7, "b3": 7})
    choice = choose_hosts(free, 12, groups=(2,))
    assert choice is not None
    assert choice.blocks == 2 and choice.groups_in_block == (True,)
    plain = choose_hosts(free, 12)
    assert plain is not None and plain.groups_in_block == ()  # no groups asked for


def test_not_enough_free_hosts() -> None:
    assert choose_hosts(cluster({"b1": 3}), 4) is None
    assert spread_hosts(cluster({"b1": 3}), 4) is None


def test_deterministic() -> None:
    free = cluster({"b1": 12, "b2": 9, "b3": 7, "b4": 9})
    shuffled = dict(reversed(list(free.items())))
    assert choose_hosts(free, 20, (2,)) == choose_hosts(shuffled, 20, (2,))
    assert spread_hosts(free, 20) == spread_hosts(shuffled, 20)


def _nvl72(racks: Mapping[str, int]) -> dict[str, Topology]:
    """GB200 trays (4 GPUs each): rack name -> free trays, one clique per rack."""
    nodes = []
    for rack, trays in racks.items():
        for i in range(trays):
            labels = {
                GKE_BLOCK: "b1",
                GKE_SUBBLOCK: rack,
                GKE_HOST: f"{rack}-t{i:02d}",
                NVLINK_CLIQUE: f"uuid.{rack}",
            }
            nodes.append((f"{rack}-t{i:02d}", labels))
    return topologies(nodes)


def test_nvl72_tensor_groups_of_8_gpus_stay_inside_one_clique() -> None:
    # TP 8 over trays of 4 GPUs: groups of 2 trays. Racks with odd free trays: a plain fill
    # would pair the last tray of one rack with the first of the next.
    free = _nvl72({"r1": 5, "r2": 7, "r3": 3})
    choice = choose_hosts(free, 12, groups=(2,))
    assert choice is not None and choice.nvlink_intact
    clique = {h: free[h].clique for h in choice.hosts}
    for i in range(0, 12, 2):
        assert clique[choice.hosts[i]] == clique[choice.hosts[i + 1]]
    blind = spread_hosts(free, 12)
    assert blind is not None
    assert not _pairs_share_cliques(free, blind.hosts, 2)


def _pairs_share_cliques(free: Mapping[str, Topology], hosts: tuple[str, ...], size: int) -> bool:
    return all(
        len({free[h].clique for h in hosts[i : i + size]}) == 1 for i in range(0, len(hosts), size)
    )


def test_nvl72_placed_anyway_when_cliques_cannot_hold_the_groups() -> None:
    free = _nvl72({"r1": 3, "r2": 3, "r3": 3})  # one pair of trays per rack
    fits = choose_hosts(free, 6, groups=(2,))
    assert fits is not None and fits.nvlink_intact and len(fits.cliques) == 3
    short = choose_hosts(free, 8, groups=(2,))  # a fourth pair has no rack
    assert short is not None and len(short.hosts) == 8
    assert not short.nvlink_intact
    assert short.shape().nvlink_intact is False


# --- property: never more blocks than the free hosts force --------------------------------------

BLOCKS = st.lists(st.integers(min_value=0, max_value=24), min_size=1, max_size=12)


def _greedy_bound(sizes: list[int], needed: int) -> int:
    total = count = 0
    for s in sorted(sizes, reverse=True):
        if total >= needed:
            break
        total += s
        count += 1
    return count


@settings(max_examples=150, deadline=None)
@given(sizes=BLOCKS, data=st.data())
def test_packing_never_spans_more_blocks_than_forced(sizes: list[int], data: st.DataObject) -> None:
    blocks = {f"b{i:02d}": n for i, n in enumerate(sizes) if n > 0}
    total = sum(blocks.values())
    if total == 0:
        return
    needed = data.draw(st.integers(min_value=1, max_value=total))
    group = data.draw(st.sampled_from([1, 2, 4]))
    free = cluster(blocks, subblock_size=data.draw(st.integers(min_value=1, max_value=8)))
    choice = choose_hosts(free, needed, groups=(group,) if group > 1 else ())
    assert choice is not None
    assert len(choice.hosts) == needed == len(set(choice.hosts))
    assert set(choice.hosts) <= set(free)
    bound = _greedy_bound(list(blocks.values()), needed)
    assert choice.blocks == bound == blocks_forced(free, needed)
    spread = spread_hosts(free, needed)
    assert spread is not None and spread.blocks >= choice.blocks


# --- the verdict --------------------------------------------------------------------------------


def test_auto_requires_above_the_threshold_with_the_numbers() -> None:
    free = cluster({"b1": 12, "b2": 9, "b3": 7})
    v = topology_verdict(
        2.04, 2.41, AUTO, hosts=16, level=GKE_BLOCK, domains=free_domains(free, GKE_BLOCK)
    )
    assert v.require and v.decision == "Require"
    assert round(v.loss_percent) == 18
    assert v.message.startswith(
        "needs 16 hosts in one block: blocks have 12, 9, 7 free; "
        "spread over blocks the step is 18 % slower"
    )


def test_auto_prefers_below_the_threshold() -> None:
    v = topology_verdict(1.0, 1.0 + DEFAULT_LOSS_THRESHOLD_PERCENT / 100 / 2, AUTO)
    assert not v.require and v.message.startswith("prefers")


def test_required_and_preferred_are_the_jobs_word() -> None:
    assert topology_verdict(1.0, 1.0, REQUIRED).require
    assert not topology_verdict(1.0, 3.0, PREFERRED).require
    with pytest.raises(ValueError, match="topology policy"):
        topology_verdict(1.0, 1.0, "Sometimes")
