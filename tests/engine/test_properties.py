"""Properties that must hold for every configuration (hypothesis)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.engine import collectives as C
from ringmaster.engine.alpha_beta_collectives import ring_allreduce
from ringmaster.engine.hardware import DEFAULT_CATALOG as CAT
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


def _train(n, g, m, c, nic, intra, k, b_r):
    return gpu_training(
        hosts=n,
        per_host=g,
        gradient_bytes=m,
        compute_seconds=c,
        batch_per_accelerator=32.0,
        nic_bandwidth=nic,
        intra_bandwidth=intra,
        host_price=10.0,
        reducers=k,
        reducer_bandwidth=b_r,
        reducer_price=0.5,
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
        assert 0.0 <= float(s.scaling_efficiency) <= 1.0


@FAST
@given(
    st.integers(2, 32),
    per_host,
    st.floats(1e9, 1e11),
    st.floats(1e8, 1e10),
    st.floats(1.0, 100.0),
    st.floats(1e8, 1e10),
)
def test_reduction_server_gain_stays_under_two(n, g, m, nic, intra_over_nic, b_r):
    # On large messages (latency within 3% of the time) the server sends M per NIC where NCCL's
    # ring sends 2(N-1)/N M (its tree on 2 hosts, M / 0.92): the bandwidth gain is below 2.
    fabric = C.GpuFabric(nic * intra_over_nic, nic, "nvlink")
    ring = float(C.nccl_collective(C.ALL_REDUCE, m, n, g, fabric).seconds)
    rs = float(C.reduction_server_collective(m, n, g, fabric, 10 * n, b_r).seconds)
    ranks = n * g
    assert ring / rs <= 2 * (ranks - 1) / ranks * 1.03


def test_reduction_server_gain_grows_with_hosts():
    fabric = C.GpuFabric(230e9, 12e9, "nvlink")
    m = 1e10
    gains = [
        float(C.nccl_collective(C.ALL_REDUCE, m, n, 8, fabric).seconds)
        / float(C.reduction_server_collective(m, n, 8, fabric, 64 * n, 4e9).seconds)
        for n in (2, 3, 4, 8, 16, 32)
    ]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(gains))
    assert gains[-1] < 2.0


@FAST
@given(hosts, per_host, nbytes, bandwidth, bandwidth, st.sampled_from(list(C.KINDS)))
def test_busbw_never_above_the_slowest_link(n, g, m, nic, intra, kind):
    # Ring busbw is bounded by min(link, NICs); the 2-host tree reaches at most 2x the NICs
    # (half the message crosses); more hosts, at most the NICs.
    fabric = C.GpuFabric(intra, nic, "nvlink")
    t = C.nccl_collective(kind, m, n, g, fabric)
    busbw = float(t.bus_bandwidth)
    if n * g == 1:
        assert np.isnan(busbw)
        return
    ranks = n * g
    if n == 1:
        limit = intra
    elif g == 1:
        limit = nic  # ring: the NIC; a 2-host tree of single GPUs: 2(N-1)/N x NIC = NIC
    else:
        limit = min(intra, nic)
        if n == 2 and kind == C.ALL_REDUCE:  # the tree sends half across: up to 2x the NICs
            limit = max(limit, 2 * (ranks - 1) / ranks * min(intra / 2, nic))
    assert busbw <= 2 * nic * (1 + 1e-9) or n == 1
    assert busbw <= intra * (1 + 1e-9) or g == 1
    assert busbw <= limit * (1 + 1e-9)


@FAST
@given(
    st.integers(1, 64),
    st.sampled_from([1, 2, 4, 8]),
    nbytes,
    st.sampled_from(sorted(CAT.accelerators)),
)
def test_nvls_only_where_nvswitch_exists(n, g, m, name):
    acc = CAT.accelerator(name)
    if acc.kind == "tpu":
        return
    machine = CAT.machine("a3-highgpu-8g")
    t = (
        C.inter_host_collective(C.ALL_REDUCE, m, n, g, machine, acc)
        if n > 1
        else (C.intra_host_collective(C.ALL_REDUCE, m, g, acc))
    )
    if int(t.algorithm) in (C.ALG_NVLS, C.ALG_NVLS_TREE):
        assert acc.nvswitch and acc.nccl_arch in ("hopper", "blackwell") and g > 1


@FAST
@given(
    st.floats(1e9, 1e10),
    st.integers(1, 64),
    st.floats(0.01, 1.0),
    st.sampled_from(["fp32", "bf16", "fp16"]),
)
def test_a_shared_pool_is_never_faster_than_alone(nic, vcpus, share, dtype):
    alone = float(C.reducer_bandwidth(nic, vcpus, dtype))
    shared = float(C.reducer_bandwidth(nic, vcpus, dtype, share))
    assert shared <= alone
    fabric = C.GpuFabric(200e9, 12e9, "nvlink")
    t_alone = float(C.reduction_server_collective(1e9, 8, 8, fabric, 8, alone).seconds)
    t_shared = float(C.reduction_server_collective(1e9, 8, 8, fabric, 8, shared).seconds)
    assert t_shared >= t_alone


@FAST
@given(st.integers(2, 512), nbytes, bandwidth, st.floats(1.01, 10))
def test_ring_time_grows_with_message_and_falls_with_bandwidth(p, m, b, factor):
    t = float(ring_allreduce(m, p, b, 5e-6).seconds)
    assert float(ring_allreduce(m * factor, p, b, 5e-6).seconds) > t
    assert float(ring_allreduce(m, p, b * factor, 5e-6).seconds) < t


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
