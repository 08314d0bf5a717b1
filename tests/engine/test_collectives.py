"""Each collective model against hand-computed cases, including the limits."""

import numpy as np
import pytest

from ringmaster.engine import collectives as C
from ringmaster.engine.alpha_beta_collectives import (
    bus_bandwidth,
    flat_ring,
    hierarchical_ring,
    reduction_server,
    ring_allreduce,
    torus_allreduce,
    tree_allreduce,
)
from ringmaster.engine.efficiency import NCCL_BASE_LATENCY as BASE

pytestmark = pytest.mark.unit

M = 1e9  # 1 GB of gradients
NIC = 10e9  # 10 GB/s achieved
INTRA = 200e9
HOP_I, HOP_N = 3e-6, 10e-6


def test_ring_hand_computed():
    t = ring_allreduce(M, 8, 100e9, 2e-6)
    assert float(t.bandwidth_seconds) == pytest.approx(2 * 7 / 8 * M / 100e9)  # 0.0175 s
    assert float(t.latency_seconds) == pytest.approx(BASE + 2 * 7 * 2e-6)
    assert float(t.seconds) == pytest.approx(0.0175 + BASE + 28e-6)


def test_one_peer_costs_nothing():
    assert float(ring_allreduce(M, 1, 1e9, 1e-6).seconds) == 0.0
    one = hierarchical_ring(M, 1, 1, NIC, INTRA, HOP_I, HOP_N)
    assert float(one.seconds) == 0.0


def test_bus_bandwidth_follows_nccl_tests():
    # algbw = M / t; busbw = algbw * 2(n-1)/n
    assert float(bus_bandwidth(M, 8, 0.01)) == pytest.approx(M / 0.01 * 2 * 7 / 8)
    assert np.isnan(bus_bandwidth(M, 1, 0.01))
    # A pure-bandwidth ring's busbw is its link bandwidth whatever the ring size.
    for p in (2, 8, 64):
        ring = ring_allreduce(M, p, 50e9, 0.0, base_latency=0.0)
        assert float(bus_bandwidth(M, p, ring.seconds)) == pytest.approx(50e9)


def test_flat_ring_is_paced_by_the_nic_across_hosts():
    t = flat_ring(M, 4, 8, NIC, INTRA, HOP_I, HOP_N)
    n_ranks = 32
    assert float(t.bandwidth_seconds) == pytest.approx(2 * 31 / 32 * M / NIC)
    assert float(t.latency_seconds) == pytest.approx(BASE + 2 * (n_ranks - 1) * HOP_N)
    assert int(t.bottleneck) == C.BOTTLENECK_NIC


def test_hierarchical_ring_one_host_is_the_intra_ring():
    t = hierarchical_ring(M, 1, 8, NIC, INTRA, HOP_I, HOP_N)
    assert float(t.bandwidth_seconds) == pytest.approx(2 * 7 / 8 * M / INTRA)
    assert int(t.bottleneck) == C.BOTTLENECK_INTRA


def test_hierarchical_ring_across_hosts_carries_2_n_minus_1_over_n_per_nic():
    t = hierarchical_ring(M, 4, 8, NIC, INTRA, HOP_I, HOP_N)
    assert float(t.bandwidth_seconds) == pytest.approx(2 * 3 / 4 * M / NIC)
    assert float(t.latency_seconds) == pytest.approx(3 * BASE + 2 * 7 * HOP_I + 2 * 3 * HOP_N)


def test_tree_pays_2m_but_only_log_hops():
    t = tree_allreduce(M, 64, 1, NIC, INTRA, HOP_I, HOP_N)
    assert float(t.bandwidth_seconds) == pytest.approx(2 * M / NIC)
    assert float(t.latency_seconds) == pytest.approx(BASE + 2 * 6 * HOP_N)
    assert np.isinf(tree_allreduce(M, 1, 8, NIC, INTRA, HOP_I, HOP_N).seconds)


def test_reduction_server_below_and_above_the_bandwidth_rule():
    n, b_r = 8, 4e9  # the rule wants k * 4 >= 8 * 10 -> k >= 20
    few = reduction_server(M, n, 1, NIC, INTRA, HOP_I, HOP_N, 10, b_r)
    assert float(few.bandwidth_seconds) == pytest.approx(n * M / (10 * b_r))  # reducers bind
    assert int(few.bottleneck) == C.BOTTLENECK_REDUCERS
    enough = reduction_server(M, n, 1, NIC, INTRA, HOP_I, HOP_N, 20, b_r)
    assert float(enough.bandwidth_seconds) == pytest.approx(M / NIC)  # each NIC sends M once
    assert int(enough.bottleneck) == C.BOTTLENECK_NIC
    more = reduction_server(M, n, 1, NIC, INTRA, HOP_I, HOP_N, 40, b_r)
    assert float(more.seconds) == pytest.approx(float(enough.seconds))  # no gain past the rule
    assert float(enough.latency_seconds) == pytest.approx(BASE + 2 * HOP_N)
    assert np.isinf(reduction_server(M, n, 1, NIC, INTRA, HOP_I, HOP_N, 0, b_r).seconds)


def test_reduction_server_halves_the_ring_when_reducers_keep_up():
    n = 16
    ring = hierarchical_ring(M, n, 1, NIC, INTRA, 0.0, 0.0)
    rs = reduction_server(M, n, 1, NIC, INTRA, 0.0, 0.0, 1000, NIC)
    assert float(ring.bandwidth_seconds / rs.bandwidth_seconds) == pytest.approx(2 * (n - 1) / n)


def test_torus_equal_wrapped_axes_telescope_to_the_ring_bound():
    b = 50e9
    t = torus_allreduce(M, (4, 4, 4), b, (True, True, True), 0.0)
    assert float(t.bandwidth_seconds) == pytest.approx(2 * 63 / 64 * M / (2 * b))


def test_torus_open_axes_hand_computed():
    b = 50e9
    t = torus_allreduce(M, (2, 2, 4), b, (False, False, False), 1e-6)
    # axis 2: (1/2)M, then axis 2 on M/2: (1/2)(M/2), then axis 4 on M/4: (3/4)(M/4), times 2
    expected = 2 * (0.5 + 0.25 + 0.1875) * M / b
    assert float(t.bandwidth_seconds) == pytest.approx(expected)
    assert float(t.latency_seconds) == pytest.approx(BASE + 2 * (1 + 1 + 3) * 1e-6)
    assert int(t.bottleneck) == C.BOTTLENECK_ICI


def test_torus_puts_wrapped_axes_first():
    b = 50e9
    mixed = torus_allreduce(M, (8, 16, 1), b, (False, True, False), 0.0)
    # wrapped 16 first on M at 2b, then open 8 on M/16 at b
    expected = 2 * (15 / 16 * M / (2 * b) + 7 / 8 * (M / 16) / b)
    assert float(mixed.bandwidth_seconds) == pytest.approx(expected)


def test_vectorised_matches_scalar():
    n = np.array([1, 2, 4, 8, 16])
    k = np.array([1, 5, 10, 20, 40])
    vec = reduction_server(M, n, 8, NIC, INTRA, HOP_I, HOP_N, k, 4e9)
    for i in range(5):
        one = reduction_server(M, int(n[i]), 8, NIC, INTRA, HOP_I, HOP_N, int(k[i]), 4e9)
        assert float(vec.seconds[i]) == float(one.seconds)
