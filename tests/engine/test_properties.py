"""Properties that must hold for every configuration (hypothesis)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import collectives as C
from ringmaster.engine.inference import batch_latency, max_rate_within, p99_latency
from ringmaster.engine.training import gpu_training

pytestmark = pytest.mark.unit

hosts = st.integers(1, 512)
per_host = st.sampled_from([1, 2, 4, 8, 16])
nbytes = st.floats(1e3, 1e11)
bandwidth = st.floats(1e8, 1e12)
compute = st.floats(0.0, 10.0)
reducers = st.integers(1, 512)
FAST = settings(max_examples=150, deadline=None)


def _train(n, g, m, c, nic, intra, k, b_r, hop=3.4e-6):
    return gpu_training(
        hosts=n,
        per_host=g,
        gradient_bytes=m,
        compute_seconds=c,
        batch_per_accelerator=32.0,
        nic_bandwidth=nic,
        intra_bandwidth=intra,
        intra_hop_latency=hop,
        host_price=10.0,
        reducers=k,
        reducer_bandwidth=b_r,
        reducer_price=0.5,
        network_hop_latency=hop if hop == 0.0 else 9.6e-6,
    )


@FAST
@given(
    hosts, per_host, nbytes, compute, bandwidth, bandwidth, reducers, bandwidth, st.floats(1.01, 10)
)
def test_faster_links_never_slow_a_step(n, g, m, c, nic, intra, k, b_r, factor):
    ring, rs = _train(n, g, m, c, nic, intra, k, b_r)
    for more in (
        _train(n, g, m, c, nic * factor, intra, k, b_r),
        _train(n, g, m, c, nic, intra * factor, k, b_r),
        _train(n, g, m, c, nic, intra, k, b_r * factor),
    ):
        assert float(more[0].step_seconds) <= float(ring.step_seconds) * (1 + 1e-12)
        assert float(more[1].step_seconds) <= float(rs.step_seconds) * (1 + 1e-12)


@FAST
@given(hosts, per_host, nbytes, compute, bandwidth, bandwidth, reducers, bandwidth)
def test_never_faster_than_the_compute_floor(n, g, m, c, nic, intra, k, b_r):
    for s in _train(n, g, m, c, nic, intra, k, b_r):
        assert float(s.step_seconds) >= c
        assert float(s.samples_per_second) <= n * g * 32.0 / c if c > 0 else True


@FAST
@given(hosts, per_host, nbytes, compute, bandwidth, bandwidth, reducers, bandwidth)
def test_reduction_server_gain_never_above_2_n_minus_1_over_n(n, g, m, c, nic, intra, k, b_r):
    # The bound is about bandwidth: with per-hop latencies at zero (the fixed NCCL base is the
    # same for both), neither the all-reduce nor the step gains more than 2(n-1)/n.
    ring, rs = _train(n, g, m, c, nic, intra, k, b_r, hop=0.0)
    bound = max(1.0, 2 * (n - 1) / n) * (1 + 1e-9)
    args = (m, n, g, nic, intra, 0.0, 0.0)
    best_ring = min(
        float(C.flat_ring(*args).seconds),
        float(C.hierarchical_ring(*args).seconds),
        float(C.tree_allreduce(*args).seconds),
    )
    rs_comm = float(C.reduction_server(*args, k, b_r).seconds)
    assert best_ring / rs_comm <= bound
    assert float(ring.step_seconds) / float(rs.step_seconds) <= bound


@FAST
@given(st.integers(2, 512), nbytes, bandwidth, st.floats(1.01, 10))
def test_ring_time_grows_with_message_and_falls_with_bandwidth(p, m, b, factor):
    t = float(C.ring_allreduce(m, p, b, 5e-6).seconds)
    assert float(C.ring_allreduce(m * factor, p, b, 5e-6).seconds) > t
    assert float(C.ring_allreduce(m, p, b * factor, 5e-6).seconds) < t


@FAST
@given(
    st.integers(1, 1024),
    st.floats(1e6, 1e13),
    st.floats(1e5, 1e11),
    st.floats(1e12, 2e15),
    st.floats(1e11, 4e12),
    st.floats(1e-4, 1.0),
)
def test_serving_rate_within_target_meets_the_target(b, flops, weights, peak, hbm, target):
    t = float(batch_latency(b, flops, weights, peak, hbm).seconds)
    rate = float(max_rate_within(b, t, target))
    if t > target:
        assert rate == 0.0
    else:
        assert rate > 0.0
        assert float(p99_latency(b, t, rate)) <= target * (1 + 1e-9)
        # and latency rises with load
        assert float(p99_latency(b, t, rate * 0.5)) <= float(p99_latency(b, t, rate))


def test_vectorised_grid_has_no_nans_where_inputs_are_valid():
    rng = np.random.default_rng(0)
    size = 10_000
    ring, rs = _train(
        rng.integers(1, 256, size).astype(float),
        rng.choice([1, 2, 4, 8], size).astype(float),
        rng.uniform(1e6, 1e10, size),
        rng.uniform(0, 1, size),
        rng.uniform(1e9, 5e10, size),
        rng.uniform(1e10, 5e11, size),
        rng.integers(1, 64, size).astype(float),
        rng.uniform(1e9, 1e10, size),
    )
    for s in (ring, rs):
        assert np.isfinite(s.step_seconds).all()
        assert (s.step_seconds > 0).all()
