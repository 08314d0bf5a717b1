"""Training: overlap, step time, strategy choice, reducer sizing, cost; hand-computed cases."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import collectives as C
from ringmaster.engine.efficiency import (
    COMPUTE_EFFICIENCY,
    FIRST_BUCKET_BYTES,
    GRADIENT_BUCKET_BYTES,
)
from ringmaster.engine.training import (
    REDUCTION_SERVER,
    RING,
    TrainingInputs,
    choose_strategy,
    gpu_training,
    overlap_timeline,
    predict_training,
    vertex_reducer_count,
)
from ringmaster.engine.units import gbps_to_bytes_per_second

pytestmark = pytest.mark.unit

BERT = TrainingInputs(
    accelerator="nvidia-tesla-a100",
    per_worker=8,
    workers=8,
    parameters=340e6,
    gradient_dtype="fp32",
    compute_seconds_per_step=0.2,
    batch_per_accelerator=32,
)


def _fixed(latency, per_byte):
    """A collective of latency + bytes x per_byte, for hand-computed timelines."""

    def collective(sizes):
        t = latency + sizes * per_byte
        zero = np.zeros(np.shape(t), dtype=np.int64)
        return C.CollectiveTime(t, zero, zero, t * np.nan, zero)

    return collective


B = GRADIENT_BUCKET_BYTES
F = FIRST_BUCKET_BYTES


def test_timeline_keeping_up_exposes_only_the_last_bucket():
    m = F + 3 * B  # first, three full buckets, no partial one
    # each full bucket takes 10 ms, backward 1 s: communication keeps up
    per_byte = 0.01 / B
    out = overlap_timeline(_fixed(0.0, per_byte), m, 1.0)
    assert float(out.exposed_seconds) == pytest.approx(0.01)  # the last bucket, after backward
    assert float(out.communication_seconds) == pytest.approx((F + 3 * B) * per_byte)


def test_timeline_falling_behind_queues_the_buckets():
    m = F + 3 * B
    per_byte = 1.0 / B  # one second per full bucket, backward 0.3 s
    out = overlap_timeline(_fixed(0.0, per_byte), m, 0.3)
    # the first bucket (0.04 s) is done before the first full one is ready at 0.3 x (F+B)/m;
    # from there the three full buckets queue
    ready_first, ready_full = 0.3 * F / m, 0.3 * (F + B) / m
    finish = max(ready_first + (F + 3 * B) * per_byte, ready_full + 3 * B * per_byte)
    assert finish == ready_full + 3.0
    assert float(out.exposed_seconds) == pytest.approx(finish - 0.3)


def test_timeline_partial_last_bucket_and_latency():
    m = F + B + B / 2
    lat = 1e-3
    out = overlap_timeline(_fixed(lat, 0.0), m, 10.0)  # latency-only buckets, long backward
    assert float(out.communication_seconds) == pytest.approx(3 * lat)
    assert float(out.exposed_seconds) == pytest.approx(lat)  # the partial last bucket


def test_timeline_small_model_is_one_bucket_after_backward():
    out = overlap_timeline(_fixed(0.0, 1e-9), F / 2, 5.0)
    assert float(out.exposed_seconds) == pytest.approx(F / 2 * 1e-9)
    assert float(overlap_timeline(_fixed(0.0, 1e-9), 4 * B, 0.0).exposed_seconds) == (
        pytest.approx(4 * B * 1e-9)
    )


def test_single_host_data_parallel_scales_80_to_95_percent():
    # 8 x A100 on NVLink, BERT-large: NVLink hides the all-reduce, but the slowest of 8 ranks
    # and the SMs NCCL takes during overlap still cost (published: 80-95%, not 99.9%)
    p = predict_training(replace(BERT, workers=1))
    assert 0.80 <= p.strategies[RING].scaling_efficiency <= 0.95


def test_vertex_rule_examples():
    g100 = gbps_to_bytes_per_second(100)
    g32 = gbps_to_bytes_per_second(32)
    assert int(vertex_reducer_count(5, g100, g32)) == 16  # Vertex's documented example
    assert int(vertex_reducer_count(8, g100, g32)) == 25
    assert int(vertex_reducer_count(1, g32, g32)) == 1  # exactly equal: no extra reducer


def test_auto_prefers_ring_within_two_percent():
    assert choose_strategy("Auto", 1.0, 0.99) == RING
    assert choose_strategy("Auto", 1.0, 0.97) == REDUCTION_SERVER
    assert choose_strategy("Ring", 1.0, 0.5) == RING
    assert choose_strategy("ReductionServer", 1.0, 2.0) == REDUCTION_SERVER
    assert choose_strategy("Auto", 1.0, None) == RING


def test_compute_bound_job_runs_ring_and_scales_as_its_stragglers_allow():
    job = replace(BERT, parameters=10e6, compute_seconds_per_step=5.0)
    p = predict_training(job)
    ring = p.strategies[RING]
    assert ring.bottleneck == "compute"
    assert ring.exposed_communication_seconds < 0.01
    assert 0.85 < ring.scaling_efficiency < 0.95  # 64 ranks wait for the slowest
    assert p.chosen_strategy == RING  # the reduction server cannot be 2% faster


def test_communication_bound_job_picks_the_reduction_server():
    job = replace(BERT, compute_seconds_per_step=0.001)
    p = predict_training(job)
    ring, rs = p.strategies[RING], p.strategies[REDUCTION_SERVER]
    assert ring.bottleneck.startswith("inter-host NIC, 100 Gbps TCP")
    assert p.chosen_strategy == REDUCTION_SERVER
    # 8 hosts x 8 GPUs: NCCL's ring sends 2*63/64 x M over the NIC, the server M; on 25 MiB
    # buckets the ring's 126 latency steps (and its pipeline fill) add several percent more
    ratio = ring.communication_seconds / rs.communication_seconds
    assert 2 * 63 / 64 <= ratio <= 2 * 63 / 64 * 1.12
    assert rs.reducers == 25 and rs.vertex_reducers == 25
    assert 1 <= rs.cost_optimal_reducers <= 25


def test_too_few_reducers_are_the_bottleneck():
    job = replace(BERT, compute_seconds_per_step=0.001, reducers=4, strategy="ReductionServer")
    rs = predict_training(job).strategies[REDUCTION_SERVER]
    assert rs.bottleneck.startswith("reducers' aggregate bandwidth, 4 x 32 Gbps")
    assert predict_training(job).chosen_strategy == REDUCTION_SERVER


def test_reduction_server_step_gain_grows_with_hosts_and_stays_under_2_to_16_hosts():
    job = replace(BERT, compute_seconds_per_step=0.1855)
    gains = []
    for n in (2, 3, 4, 8, 16):
        p = predict_training(replace(job, workers=n))
        gains.append(p.strategies[RING].step_seconds / p.strategies[REDUCTION_SERVER].step_seconds)
    assert all(b > a for a, b in itertools.pairwise(gains))
    assert gains[-1] < 2.0


def test_one_host_never_gains_from_a_reduction_server():
    p = predict_training(replace(BERT, workers=1))
    assert p.chosen_strategy == RING
    assert p.strategies[REDUCTION_SERVER].step_seconds >= p.strategies[RING].step_seconds


def test_a_shared_pool_gives_a_job_its_share_and_sizing_follows():
    job = replace(BERT, compute_seconds_per_step=0.001, strategy="ReductionServer", reducers=8)
    alone = predict_training(job).strategies[REDUCTION_SERVER]
    shared = predict_training(replace(job, reducer_share=0.5)).strategies[REDUCTION_SERVER]
    assert shared.step_seconds > alone.step_seconds
    assert shared.vertex_reducers == 50 and alone.vertex_reducers == 25  # half the bandwidth
    with pytest.raises(ValueError, match="reducer share"):
        predict_training(replace(job, reducer_share=0.0))


def test_half_of_a_shared_pool_of_2k_reducers_is_k_dedicated_ones_in_time_and_cost():
    job = replace(BERT, compute_seconds_per_step=0.001, strategy="ReductionServer")
    dedicated = predict_training(replace(job, reducers=8)).strategies[REDUCTION_SERVER]
    half = predict_training(replace(job, reducers=16, reducer_share=0.5))
    shared = half.strategies[REDUCTION_SERVER]
    assert shared.step_seconds == pytest.approx(dedicated.step_seconds)
    # The job pays for the half it uses; the jobs sharing the pool pay the rest.
    assert shared.cost_per_hour_usd == pytest.approx(dedicated.cost_per_hour_usd)


def test_nccl_env_forces_the_algorithm_in_the_plan():
    two = replace(BERT, workers=2, compute_seconds_per_step=0.001)
    assert predict_training(two).strategies[RING].algorithm == "Tree"
    forced = predict_training(replace(two, nccl_env=(("NCCL_ALGO", "ring"),)))
    assert forced.strategies[RING].algorithm == "Ring"
    assert any("NCCL_ALGO=ring" in n for n in forced.notes)


def test_cost_includes_reducers_and_per_sample_cost_follows():
    p = predict_training(BERT)
    ring, rs = p.strategies[RING], p.strategies[REDUCTION_SERVER]
    assert ring.cost_per_hour_usd == pytest.approx(8 * 29.38708)
    assert rs.cost_per_hour_usd == pytest.approx(8 * 29.38708 + 25 * 0.566789)
    samples = 64 * 32 / rs.step_seconds
    assert rs.samples_per_second == pytest.approx(samples)
    assert rs.cost_per_1000_samples_usd == pytest.approx(
        rs.cost_per_hour_usd / 3600 / samples * 1000
    )


def test_no_batch_size_means_no_throughput():
    p = predict_training(replace(BERT, batch_per_accelerator=None))
    assert p.strategies[RING].samples_per_second is None
    assert p.strategies[RING].cost_per_1000_samples_usd is None


def test_flops_roofline_uses_the_compute_precision():
    job = replace(BERT, compute_seconds_per_step=None, flops_per_sample=1e12)
    p = predict_training(job)
    assert p.compute_source == "roofline" and p.compute_precision == "bf16"
    assert p.compute_seconds == pytest.approx(1e12 * 32 / (312e12 * COMPUTE_EFFICIENCY))
    tf32 = predict_training(replace(job, compute_precision="tf32"))
    assert tf32.compute_seconds == pytest.approx(2 * p.compute_seconds)
    fp32 = predict_training(replace(job, compute_precision="fp32"))
    assert fp32.compute_seconds == pytest.approx(312 / 19.5 * p.compute_seconds)
    with pytest.raises(ValueError, match="no fp8 units"):
        predict_training(replace(job, compute_precision="fp8"))
    h100 = replace(job, accelerator="nvidia-h100-80gb", compute_precision="fp8")
    assert predict_training(h100).compute_seconds == pytest.approx(
        1e12 * 32 / (1978.9e12 * COMPUTE_EFFICIENCY)
    )
    v100 = predict_training(replace(job, accelerator="nvidia-tesla-v100"))
    assert v100.compute_precision == "fp16"  # no bf16 on Volta


def test_tpu_slice_has_only_ring_and_refuses_a_reduction_server():
    tpu = TrainingInputs(
        accelerator="tpu-v4-podslice",
        per_worker=4,
        workers=4,
        parameters=25.6e6,
        compute_seconds_per_step=0.001,
        batch_per_accelerator=128,
        topology="2x2x4",
    )
    p = predict_training(tpu)
    assert list(p.strategies) == [RING]
    assert p.strategies[RING].algorithm == "ICI"
    assert "ICI torus 2x2x4" in p.strategies[RING].bottleneck
    with pytest.raises(ValueError, match="no reduction server"):
        predict_training(replace(tpu, strategy="ReductionServer"))
    with pytest.raises(ValueError, match="has 16 chips"):
        predict_training(replace(tpu, workers=8))


def test_vectorised_grid_matches_the_scalar_path():
    n = np.arange(1, 33, dtype=float)
    kw = dict(
        per_host=8,
        gradient_bytes=1.36e9,
        compute_seconds=0.2,
        batch_per_accelerator=32.0,
        nic_bandwidth=12e9,
        intra_bandwidth=230e9,
        host_price=29.4,
        reducers=25,
        reducer_bandwidth=3.9e9,
        reducer_price=0.57,
    )
    ring, rs = gpu_training(hosts=n, **kw)
    for i in (0, 7, 31):
        r1, s1 = gpu_training(hosts=float(n[i]), **kw)
        assert float(ring.step_seconds[i]) == float(r1.step_seconds)
        assert float(rs.step_seconds[i]) == float(s1.step_seconds)
    assert np.all(np.diff(ring.step_seconds) >= -1e-12)  # more hosts never speed a step up
    assert ring.bottleneck.dtype == np.int64 and set(np.unique(ring.bottleneck)) <= {
        C.BOTTLENECK_COMPUTE,
        C.BOTTLENECK_NIC,
        C.BOTTLENECK_INTRA,
        C.BOTTLENECK_LATENCY,
    }
