"""Inference: roofline, queueing, batch and replica sizing."""

import math
from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine.efficiency import (
    COMPUTE_EFFICIENCY,
    INFERENCE_OVERHEAD_SECONDS,
    MAX_SERVING_UTILISATION,
    MEMORY_EFFICIENCY,
)
from ringmaster.engine.inference import (
    BOTTLENECK_COMPUTE,
    BOTTLENECK_MEMORY,
    InferenceInputs,
    batch_latency,
    max_rate_within,
    p99_latency,
    predict_inference,
)

pytestmark = pytest.mark.unit

RESNET_T4 = InferenceInputs(
    accelerator="nvidia-tesla-t4",
    per_replica=1,
    parameters=25.6e6,
    flops_per_request=8.2e9,
    precision="INT8",
    target_requests_per_second=4000,
    latency_p99_seconds=0.025,
    max_batch_size=64,
    min_replicas=1,
    max_replicas=100,
)


def test_roofline_compute_bound_and_memory_bound():
    c = batch_latency(64, 1e9, 1e6, 100e12, 1e12)
    assert float(c.seconds) == pytest.approx(
        INFERENCE_OVERHEAD_SECONDS + 64 * 1e9 / (100e12 * COMPUTE_EFFICIENCY)
    )
    assert int(c.bottleneck) == BOTTLENECK_COMPUTE
    m = batch_latency(1, 1e6, 10e9, 100e12, 1e12)  # 10 GB of weights, tiny compute
    assert float(m.seconds) == pytest.approx(
        INFERENCE_OVERHEAD_SECONDS + 10e9 / (1e12 * MEMORY_EFFICIENCY)
    )
    assert int(m.bottleneck) == BOTTLENECK_MEMORY


def test_p99_limits():
    t, b = 0.010, 8
    assert float(p99_latency(b, t, 0.0)) == pytest.approx(t)  # idle: just the batch
    assert math.isinf(float(p99_latency(b, t, b / t)))  # rho = 1
    # hand-computed at rho = 0.5: s = t/b; wait = s / (2 * 0.5) * ln(100 * 0.5)
    s = t / b
    assert float(p99_latency(b, t, 0.5 / s)) == pytest.approx(t + s * math.log(50))


def test_max_rate_meets_the_target_and_caps_utilisation():
    b = np.arange(1, 65, dtype=float)
    t = 0.001 + b * 0.0002
    rate = max_rate_within(b, t, 0.02)
    ok = rate > 0
    assert np.all(p99_latency(b[ok], t[ok], rate[ok]) <= 0.02 + 1e-9)
    assert np.all(rate * t / b <= MAX_SERVING_UTILISATION + 1e-12)
    assert float(max_rate_within(1, 0.03, 0.02)) == 0.0  # one request already too slow


def test_int8_needs_fewer_replicas_than_fp16_than_fp32():
    for acc in ("nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-a100"):
        job = replace(RESNET_T4, accelerator=acc, target_requests_per_second=1e5, max_replicas=1000)
        r = {
            p: predict_inference(replace(job, precision=p)).replicas
            for p in ("INT8", "FP16", "FP32")
        }
        # V100 has no INT8 tensor cores: INT8 runs no faster than FP16 there, never slower
        assert r["INT8"] <= r["FP16"] < r["FP32"], (acc, r)
        if acc != "nvidia-tesla-v100":
            assert r["INT8"] < r["FP16"], (acc, r)


def test_t4_example_is_sized_with_numbers_that_add_up():
    p = predict_inference(RESNET_T4)
    assert p.feasible and p.reason is None
    assert p.replicas == math.ceil(4000 / p.per_replica_requests_per_second)
    assert p.p99_latency_seconds <= 0.025
    assert 1 <= p.batch_size <= 64
    assert p.cost_per_hour_usd == pytest.approx(p.replicas * (0.379998 + 0.35))


def test_impossible_latency_target_says_so_with_numbers():
    p = predict_inference(replace(RESNET_T4, latency_p99_seconds=0.0001))
    assert not p.feasible
    assert "p99 target 0.1 ms is below" in p.reason and "nvidia-tesla-t4" in p.reason


def test_max_replicas_bound_is_reported():
    p = predict_inference(replace(RESNET_T4, target_requests_per_second=1e6, max_replicas=4))
    assert p.replicas == 4 and not p.feasible
    assert "maxReplicas 4" in p.reason and "1,000,000" in p.reason
    assert p.replicas_needed > 4


def test_min_and_fixed_replicas():
    low = predict_inference(replace(RESNET_T4, target_requests_per_second=10, min_replicas=3))
    assert low.replicas == 3 and low.feasible
    fixed = predict_inference(replace(RESNET_T4, replicas=7))
    assert fixed.replicas == 7
    off = predict_inference(replace(RESNET_T4, replicas=0))
    assert not off.feasible and off.p99_latency_seconds is None


def test_weights_that_do_not_fit_are_reported():
    p = predict_inference(replace(RESNET_T4, parameters=70e9, precision="FP16"))
    assert not p.feasible and "more than the 16 GB" in p.reason
