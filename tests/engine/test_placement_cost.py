"""Issue 43: what a placement costs a layout's step, packed by topology against spread."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import collectives as C
from ringmaster.engine import llm_training as L
from ringmaster.engine import placement_cost as P
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_search import (
    Layout,
    LayoutRequest,
    evaluate_layout,
    search_layouts,
)
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS, Transformer
from ringmaster.planning.layouts import network_hardware

CAT = DEFAULT_CATALOG
LLAMA_7B = KNOWN_TRANSFORMERS["llama-2-7b"]
LLAMA_70B = KNOWN_TRANSFORMERS["llama-3-70b"]
MIB = 1 << 20
DEFAULT_LOSS = 5.0  # placement.topology.DEFAULT_LOSS_THRESHOLD_PERCENT


def h100(hosts: int) -> L.LayoutHardware:
    return L.layout_hardware(CAT.host("nvidia-h100-80gb", 8), hosts, CAT)


def gb200(trays: int) -> tuple[L.LayoutHardware, int]:
    """The layout hardware of ``trays`` GB200 trays as the planner folds them (NVL72 domains),
    and the trays per folded host."""
    host = CAT.host("nvidia-gb200", 4, "a4x-highgpu-4g")
    hw, _ = network_hardware(L.layout_hardware(host, trays, CAT), host.machine, ())
    return hw, int(C.hosts_per_domain(host.machine, trays))


# --- the data-parallel all-reduce across blocks, by hand ---------------------------------------


@pytest.mark.parametrize("hosts", [2, 4, 16])
@pytest.mark.parametrize("nbytes", [256 * MIB, 1024 * MIB])
def test_ring_allreduce_over_two_blocks_with_oversubscription_2(hosts: int, nbytes: int) -> None:
    """One GPU per host, NCCL held to its ring and the Simple protocol: the time is latency +
    pipeline fill + 2(n-1)/n M / B. Across two blocks at 2:1 the latency and the fill stay, B
    halves: slower by exactly 2(n-1)/n M / B."""
    hw = replace(
        h100(hosts),
        nccl_algorithms=frozenset({C.ALG_RING}),
        nccl_protocols=frozenset({C.PROTO_SIMPLE}),
    )
    inside = P.data_parallel_allreduce_seconds(nbytes, hosts, 1, hw, blocks=1)
    across = P.data_parallel_allreduce_seconds(nbytes, hosts, 1, hw, 2, oversubscription=2.0)
    by_hand = 2.0 * (hosts - 1) / hosts * nbytes / hw.nic_bandwidth
    assert across - inside == pytest.approx(by_hand, rel=1e-9)
    # and the bandwidth term is most of the time at these sizes: the ratio tends to 2
    assert 1.5 < across / inside <= 2.0


def test_no_penalty_inside_a_block_or_without_oversubscription() -> None:
    hw = h100(8)
    one = P.data_parallel_allreduce_seconds(512 * MIB, 8, 1, hw, blocks=1, oversubscription=4.0)
    flat = P.data_parallel_allreduce_seconds(512 * MIB, 8, 1, hw, blocks=3)
    assert one == flat == P.data_parallel_allreduce_seconds(512 * MIB, 8, 1, hw)
    with pytest.raises(ValueError, match="oversubscription"):
        P.cross_block_bandwidth(1e9, True, 0.5)


def test_oversubscription_default_is_no_penalty() -> None:
    assert P.DEFAULT_SPINE_OVERSUBSCRIPTION == 1.0


# --- the step under a placement ------------------------------------------------------------------


def _layout(
    model: Transformer,
    hw: L.LayoutHardware,
    global_batch: int,
    tensor: int | None = None,
    pipeline: int | None = None,
    context: int | None = None,
) -> Layout:
    request = LayoutRequest(
        model=model, global_batch=global_batch, tensor=tensor, pipeline=pipeline, context=context
    )
    return search_layouts(request, hw).chosen


def test_packed_step_is_the_layouts_own() -> None:
    hw = h100(16)
    layout = _layout(LLAMA_7B, hw, 512)
    step = P.step_under_placement(LLAMA_7B, hw, layout, 512, P.PACKED)
    assert step.step_seconds == pytest.approx(layout.step_seconds, rel=1e-12)


def test_spread_data_parallel_step_slower_by_its_exposed_reduction() -> None:
    """A DDP-style 7B layout: only the data-parallel reduction moves between placements (its
    gradients cross the spine at half rate): its exposed part and what its hidden part takes from
    the compute; every other part stays."""
    hw = h100(16)
    layout = _layout(LLAMA_7B, hw, 512, tensor=1, pipeline=1, context=1)
    cost = P.placement_cost(
        LLAMA_7B,
        hw,
        layout,
        512,
        P.PACKED,
        P.PlacementShape(blocks=4, groups_cross_blocks=True),
        oversubscription=2.0,
    )
    packed, spread = cost.packed, cost.spread
    assert spread.compute_seconds == packed.compute_seconds
    assert spread.optimizer_seconds == packed.optimizer_seconds
    assert spread.exposed_data_parallel_seconds > packed.exposed_data_parallel_seconds
    assert spread.overlap_interference_seconds > packed.overlap_interference_seconds
    assert spread.step_seconds - packed.step_seconds == pytest.approx(
        spread.exposed_data_parallel_seconds
        - packed.exposed_data_parallel_seconds
        + spread.overlap_interference_seconds
        - packed.overlap_interference_seconds
    )
    assert cost.loss_percent == pytest.approx(
        (spread.step_seconds / packed.step_seconds - 1.0) * 100.0
    )
    assert cost.loss_percent > 0


def test_nvl72_tensor_group_split_over_domains_falls_to_the_nics() -> None:
    hw, k = gb200(36)  # two NVL72 domains of 18 trays
    layout = _layout(LLAMA_70B, hw, 256, tensor=8)  # TP 8 = 2 trays of 4 GPUs
    split = P.PlacementShape(nvlink_intact=False)
    cost = P.placement_cost(LLAMA_70B, hw, layout, 256, P.PACKED, split, hosts_per_domain=k)
    # the same all-reduces, over two trays' NICs instead of NVLink
    assert cost.spread.tensor_parallel_seconds > 1.5 * cost.packed.tensor_parallel_seconds
    assert cost.loss_percent > DEFAULT_LOSS
    unfolded = P.unfold_domain(hw, k)
    assert (unfolded.hosts, unfolded.per_host) == (36, 4)
    assert unfolded.nic_bandwidth * k == pytest.approx(hw.nic_bandwidth)


def test_tensor_overlap_stays_overlapped_over_the_nics() -> None:
    """A run that overlaps its TP collectives with the GEMMs (spec.parallelism.tensorOverlap)
    keeps them overlapped when its tensor group falls to the trays' NICs: the split placement's
    tensor time is the NIC time exposed as the step exposes it (one chunk in t, or what the
    GEMMs cannot cover), not the NIC time whole."""
    hw, k = gb200(36)
    layout = _layout(LLAMA_70B, hw, 256, tensor=8)
    split = P.PlacementShape(nvlink_intact=False)
    plain = P.placement_cost(LLAMA_70B, hw, layout, 256, P.PACKED, split, hosts_per_domain=k)
    overlapped_hw = replace(hw, tensor_overlap=True)
    overlapped = P.placement_cost(
        LLAMA_70B, overlapped_hw, layout, 256, P.PACKED, split, hosts_per_domain=k
    )
    whole = plain.spread.tensor_parallel_seconds
    base = evaluate_layout(LLAMA_70B, overlapped_hw, layout, 256)
    m = float(base.micro_batches[0])
    gemm_mb = float(base.gemm_seconds[0]) / m
    by_hand = max(whole / m - gemm_mb, whole / m / 8.0) * m
    assert overlapped.spread.tensor_parallel_seconds == pytest.approx(by_hand, rel=1e-9)
    assert overlapped.spread.tensor_parallel_seconds < 0.5 * whole


def test_tensor_group_inside_one_tray_loses_nothing_from_split_domains() -> None:
    hw, k = gb200(36)
    layout = _layout(LLAMA_70B, hw, 256, tensor=4)
    cost = P.placement_cost(
        LLAMA_70B,
        hw,
        layout,
        256,
        P.PACKED,
        P.PlacementShape(nvlink_intact=False),
        hosts_per_domain=k,
    )
    assert cost.spread.tensor_parallel_seconds == pytest.approx(cost.packed.tensor_parallel_seconds)


# --- properties ----------------------------------------------------------------------------------

SHAPES = st.builds(
    P.PlacementShape,
    blocks=st.integers(min_value=1, max_value=8),
    groups_cross_blocks=st.booleans(),
    nvlink_intact=st.booleans(),
)


@settings(max_examples=25, deadline=None)
@given(
    shape=SHAPES,
    oversubscription=st.floats(min_value=1.0, max_value=8.0),
    hosts=st.sampled_from([2, 4, 8]),
    tensor=st.sampled_from([1, 2, 8]),
)
def test_packed_is_never_slower_than_spread(
    shape: P.PlacementShape, oversubscription: float, hosts: int, tensor: int
) -> None:
    hw = h100(hosts)
    layout = _layout(LLAMA_7B, hw, 64 * hosts, tensor=tensor)
    cost = P.placement_cost(
        LLAMA_7B, hw, layout, 64 * hosts, P.PACKED, shape, oversubscription=oversubscription
    )
    assert cost.packed.step_seconds <= cost.spread.step_seconds * (1 + 1e-12)
    assert cost.loss_percent >= -1e-9


@settings(max_examples=25, deadline=None)
@given(
    nbytes=st.floats(min_value=64 * MIB, max_value=4e9),
    trays=st.sampled_from([2, 4, 8, 18]),
)
def test_tensor_group_over_an_nvlink_domain_never_slower_than_over_nics(
    nbytes: float, trays: int
) -> None:
    """The same all-reduce among ``trays`` x 4 GB200 GPUs: inside one NVL72 domain (one NCCL
    node, NVLink) against trays of different domains (the trays' NICs), from 64 MiB.

    Not below: the engine models NCCL's tuner, which inside the domain picks NVLS (Simple) by
    its own estimate and then pays the pipeline fill it does not see; over 2 trays at 8 MiB
    that is 103 us against the trays' tree with LL128 at 94 us. The layout's steps keep the
    order (the property below)."""
    hw, k = gb200(36)
    tray = P.unfold_domain(hw, k)
    inside = C.nccl_collective(
        C.ALL_REDUCE, nbytes, 1.0, 4.0 * trays, hw.fabric(np.inf), with_busbw=False
    ).seconds
    over = C.nccl_collective(
        C.ALL_REDUCE,
        nbytes,
        float(trays),
        4.0,
        tray.fabric(tray.nic_bandwidth),
        with_busbw=False,
    ).seconds
    assert float(inside) <= float(over)


@settings(max_examples=15, deadline=None)
@given(tensor=st.sampled_from([4, 8, 16]), batch=st.sampled_from([128, 256]))
def test_step_with_groups_inside_nvlink_domains_never_slower(tensor: int, batch: int) -> None:
    hw, k = gb200(36)
    layout = _layout(LLAMA_70B, hw, batch, tensor=tensor)
    cost = P.placement_cost(
        LLAMA_70B,
        hw,
        layout,
        batch,
        P.PACKED,
        P.PlacementShape(nvlink_intact=False),
        hosts_per_domain=k,
    )
    assert cost.packed.step_seconds <= cost.spread.step_seconds * (1 + 1e-12)
