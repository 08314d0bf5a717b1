"""Training: overlap, step time, strategy choice, reducer sizing, cost; hand-computed cases."""

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import collectives as C
from ringmaster.engine.efficiency import BACKWARD_FRACTION, GRADIENT_BUCKET_BYTES
from ringmaster.engine.training import (
    REDUCTION_SERVER,
    RING,
    TrainingInputs,
    choose_strategy,
    exposed_communication,
    gpu_training,
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


def test_exposed_communication_hand_computed():
    m = 4 * GRADIENT_BUCKET_BYTES  # the last of 4 buckets cannot hide
    # plenty of backward: all but the last bucket hides
    assert float(exposed_communication(1.0, 100.0, m)) == pytest.approx(0.25)
    # little backward: only BACKWARD_FRACTION * compute hides
    assert float(exposed_communication(1.0, 0.3, m)) == pytest.approx(1 - BACKWARD_FRACTION * 0.3)
    # a model smaller than a bucket hides nothing
    assert float(exposed_communication(1.0, 100.0, GRADIENT_BUCKET_BYTES / 2)) == 1.0


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


def test_compute_bound_job_runs_ring_at_near_full_scaling():
    job = replace(BERT, parameters=10e6, compute_seconds_per_step=5.0)
    p = predict_training(job)
    ring = p.strategies[RING]
    assert ring.bottleneck == "compute"
    assert ring.step_seconds == pytest.approx(5.0, rel=1e-2)
    assert ring.scaling_efficiency > 0.99
    assert p.chosen_strategy == RING  # the reduction server cannot be 2% faster


def test_communication_bound_job_picks_the_reduction_server():
    job = replace(BERT, compute_seconds_per_step=0.001)
    p = predict_training(job)
    ring, rs = p.strategies[RING], p.strategies[REDUCTION_SERVER]
    assert ring.bottleneck.startswith("inter-host NIC, 100 Gbps")
    assert p.chosen_strategy == REDUCTION_SERVER
    # 8 hosts: ring 2*7/8 = 1.75 x M over the NIC, the server M: close to 1.75x faster
    assert ring.communication_seconds / rs.communication_seconds == pytest.approx(1.75, rel=0.02)
    assert rs.reducers == 25 and rs.vertex_reducers == 25
    assert 1 <= rs.cost_optimal_reducers <= 25


def test_too_few_reducers_are_the_bottleneck():
    job = replace(BERT, compute_seconds_per_step=0.001, reducers=4, strategy="ReductionServer")
    rs = predict_training(job).strategies[REDUCTION_SERVER]
    assert rs.bottleneck.startswith("reducers' aggregate bandwidth, 4 x 32 Gbps")
    assert predict_training(job).chosen_strategy == REDUCTION_SERVER


def test_one_host_never_gains_from_a_reduction_server():
    p = predict_training(replace(BERT, workers=1))
    assert p.chosen_strategy == RING
    assert p.strategies[RING].scaling_efficiency == pytest.approx(1.0)
    assert p.strategies[REDUCTION_SERVER].step_seconds >= p.strategies[RING].step_seconds


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


def test_flops_roofline_uses_the_16_bit_tensor_rate():
    job = replace(BERT, compute_seconds_per_step=None, flops_per_sample=1e12)
    p = predict_training(job)
    assert p.compute_source == "roofline"
    assert p.compute_seconds == pytest.approx(1e12 * 32 / (312e12 * 0.433))


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
    assert p.strategies[RING].algorithm == "ICI torus"
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
        intra_hop_latency=3.4e-6,
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
