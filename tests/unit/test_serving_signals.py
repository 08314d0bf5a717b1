"""Parsing a model server's /metrics and windowing two scrapes (planning/serving_signals.py).

The fixtures are exposition text as each server emits it. The metric names, HELP strings, labels
and bucket bounds are the servers' own (vLLM: vllm/v1/metrics/loggers.py; SGLang:
python/sglang/srt/metrics/collector.py; llm-d-inference-sim: pkg/llm-d-inference-sim/metrics.go
and pkg/common/utils.go), laid out as the clients print them: the Python client (vLLM, SGLang)
with sorted labels, float values, `_total` counters and their `_created` gauges, buckets then
`_count` then `_sum`; the Go client (the simulator) with integer-looking values, `le` last,
`_sum` then `_count`. The counts are chosen so that the figures below can be checked by hand.
Families the parser does not read are left out.
"""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ringmaster.planning.serving_signals import (
    Dialect,
    LatencyHistogram,
    MetricsParseError,
    ServerSample,
    histogram_quantile,
    parse_metrics,
    window,
)

pytestmark = pytest.mark.unit

# vLLM 0.11 (V1 engine) with --data-parallel-size 2: one series per engine.
VLLM_DP2 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama3-8b"} 12.0
vllm:num_requests_running{engine="1",model_name="llama3-8b"} 10.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama3-8b"} 3.0
vllm:num_requests_waiting{engine="1",model_name="llama3-8b"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama3-8b"} 0.62
vllm:kv_cache_usage_perc{engine="1",model_name="llama3-8b"} 0.48
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama3-8b"} 1.2e+06
vllm:prompt_tokens_total{engine="1",model_name="llama3-8b"} 900000.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="llama3-8b"} 1.7632e+09
vllm:prompt_tokens_created{engine="1",model_name="llama3-8b"} 1.7632e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama3-8b"} 96000.0
vllm:generation_tokens_total{engine="1",model_name="llama3-8b"} 72000.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="llama3-8b"} 1.7632e+09
vllm:generation_tokens_created{engine="1",model_name="llama3-8b"} 1.7632e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama3-8b"} 380.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="llama3-8b"} 18.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="llama3-8b"} 2.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="llama3-8b"} 290.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="llama3-8b"} 9.0
vllm:request_success_total{engine="1",finished_reason="abort",model_name="llama3-8b"} 1.0
# HELP vllm:request_success_created Count of successfully processed requests.
# TYPE vllm:request_success_created gauge
vllm:request_success_created{engine="0",finished_reason="stop",model_name="llama3-8b"} 1.7632e+09
vllm:request_success_created{engine="0",finished_reason="length",model_name="llama3-8b"} 1.7632e+09
vllm:request_success_created{engine="0",finished_reason="abort",model_name="llama3-8b"} 1.7632e+09
vllm:request_success_created{engine="1",finished_reason="stop",model_name="llama3-8b"} 1.7632e+09
vllm:request_success_created{engine="1",finished_reason="length",model_name="llama3-8b"} 1.7632e+09
vllm:request_success_created{engine="1",finished_reason="abort",model_name="llama3-8b"} 1.7632e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.005",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.06",model_name="llama3-8b"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.08",model_name="llama3-8b"} 60.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="llama3-8b"} 150.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="llama3-8b"} 330.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="llama3-8b"} 380.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.75",model_name="llama3-8b"} 392.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="llama3-8b"} 396.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="2.5",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="5.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="7.5",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="10.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="20.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="40.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="80.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="160.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="640.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="2560.0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="llama3-8b"} 400.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="llama3-8b"} 61.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.001",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.005",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.01",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.02",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.04",model_name="llama3-8b"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.06",model_name="llama3-8b"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.08",model_name="llama3-8b"} 40.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="llama3-8b"} 120.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.25",model_name="llama3-8b"} 250.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="llama3-8b"} 285.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.75",model_name="llama3-8b"} 295.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="llama3-8b"} 298.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="2.5",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="5.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="7.5",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="10.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="20.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="40.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="80.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="160.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="640.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="2560.0",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="llama3-8b"} 300.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="llama3-8b"} 44.1
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="llama3-8b"} 1.7632e+09
vllm:time_to_first_token_seconds_created{engine="1",model_name="llama3-8b"} 1.7632e+09
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="llama3-8b"} 0.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="llama3-8b"} 60000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05",model_name="llama3-8b"} 90000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.075",model_name="llama3-8b"} 95000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1",model_name="llama3-8b"} 95900.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.15",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.2",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.3",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.4",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.5",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.75",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="1.0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="2.5",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="5.0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="7.5",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="10.0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="20.0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="40.0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="80.0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="llama3-8b"} 96000.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="llama3-8b"} 2304.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.01",model_name="llama3-8b"} 0.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.025",model_name="llama3-8b"} 50000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.05",model_name="llama3-8b"} 70000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.075",model_name="llama3-8b"} 71500.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.1",model_name="llama3-8b"} 71900.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.15",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.2",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.3",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.4",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.5",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.75",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="1.0",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="2.5",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="5.0",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="7.5",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="10.0",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="20.0",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="40.0",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="80.0",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_bucket{engine="1",le="+Inf",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_count{engine="1",model_name="llama3-8b"} 72000.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="llama3-8b"} 1620.0
# HELP vllm:inter_token_latency_seconds_created Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds_created gauge
vllm:inter_token_latency_seconds_created{engine="0",model_name="llama3-8b"} 1.7632e+09
vllm:inter_token_latency_seconds_created{engine="1",model_name="llama3-8b"} 1.7632e+09
"""

# SGLang with --enable-dp-attention, DP 2 (each rank's scheduler logs; dp_rank tells them apart).
SGLANG_DP2 = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 7.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="1"} 5.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="1"} 0.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 0.4
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="1"} 0.6
# HELP sglang:num_decode_prealloc_queue_reqs The number of requests in the decode prealloc queue.
# TYPE sglang:num_decode_prealloc_queue_reqs gauge
sglang:num_decode_prealloc_queue_reqs{dp_rank="0",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 0.0
sglang:num_decode_prealloc_queue_reqs{dp_rank="1",engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="1"} 0.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen3-8b"} 750000.0
# HELP sglang:prompt_tokens_created Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_created gauge
sglang:prompt_tokens_created{model_name="qwen3-8b"} 1.7632e+09
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen3-8b"} 300000.0
# HELP sglang:generation_tokens_created Number of generation tokens processed.
# TYPE sglang:generation_tokens_created gauge
sglang:generation_tokens_created{model_name="qwen3-8b"} 1.7632e+09
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="qwen3-8b"} 1500.0
# HELP sglang:num_requests_created Number of requests processed.
# TYPE sglang:num_requests_created gauge
sglang:num_requests_created{model_name="qwen3-8b"} 1.7632e+09
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen3-8b"} 300.0
sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="qwen3-8b"} 900.0
sglang:time_to_first_token_seconds_bucket{le="0.4",model_name="qwen3-8b"} 1350.0
sglang:time_to_first_token_seconds_bucket{le="0.6",model_name="qwen3-8b"} 1450.0
sglang:time_to_first_token_seconds_bucket{le="0.8",model_name="qwen3-8b"} 1490.0
sglang:time_to_first_token_seconds_bucket{le="1.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="2.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="4.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="6.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="8.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="10.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="20.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="40.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="60.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="80.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="100.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="200.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="400.0",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_count{model_name="qwen3-8b"} 1500.0
sglang:time_to_first_token_seconds_sum{model_name="qwen3-8b"} 330.0
# HELP sglang:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds_created gauge
sglang:time_to_first_token_seconds_created{model_name="qwen3-8b"} 1.7632e+09
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.002",model_name="qwen3-8b"} 0.0
sglang:inter_token_latency_seconds_bucket{le="0.004",model_name="qwen3-8b"} 0.0
sglang:inter_token_latency_seconds_bucket{le="0.006",model_name="qwen3-8b"} 0.0
sglang:inter_token_latency_seconds_bucket{le="0.008",model_name="qwen3-8b"} 120000.0
sglang:inter_token_latency_seconds_bucket{le="0.01",model_name="qwen3-8b"} 250000.0
sglang:inter_token_latency_seconds_bucket{le="0.015",model_name="qwen3-8b"} 290000.0
sglang:inter_token_latency_seconds_bucket{le="0.02",model_name="qwen3-8b"} 298000.0
sglang:inter_token_latency_seconds_bucket{le="0.025",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.03",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.035",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.04",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.06",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.08",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.1",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.2",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.4",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.6",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="0.8",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="1.0",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="2.0",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="4.0",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="6.0",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="8.0",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_count{model_name="qwen3-8b"} 298500.0
sglang:inter_token_latency_seconds_sum{model_name="qwen3-8b"} 2700.0
# HELP sglang:inter_token_latency_seconds_created Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds_created gauge
sglang:inter_token_latency_seconds_created{model_name="qwen3-8b"} 1.7632e+09
"""  # noqa: E501

# llm-d-inference-sim, one scrape; 20 s later SIM_NEWER, and SIM_RESTARTED after a restart.
SIM_OLDER = """\
# HELP vllm:generation_tokens_total Total number of generated tokens.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="tiny"} 25000
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.01"} 0
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.025"} 20000
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.05"} 24000
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.075"} 24800
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.1"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.15"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.2"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.3"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.4"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.5"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.75"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="1"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="2.5"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="5"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="7.5"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="10"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="20"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="40"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="80"} 24900
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="+Inf"} 24900
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 498
vllm:inter_token_latency_seconds_count{model_name="tiny"} 24900
# HELP vllm:kv_cache_usage_perc Prometheus metric for the fraction of KV-cache blocks currently in use (from 0 to 1).
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="tiny"} 0.25
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="tiny"} 4
# HELP vllm:num_requests_waiting Prometheus metric for the number of queued requests.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="tiny"} 0
# HELP vllm:prompt_tokens_total Total number of prompt tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="tiny"} 50000
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finish_reason="length",model_name="tiny"} 10
vllm:request_success_total{finish_reason="stop",model_name="tiny"} 90
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.01"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.025"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.05"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.075"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.1"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.15"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.2"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.3"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.4"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.5"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="0.75"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="1"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="2.5"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="5"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="7.5"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="10"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="20"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="40"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="80"} 24900
vllm:time_per_output_token_seconds_bucket{model_name="tiny",le="+Inf"} 24900
vllm:time_per_output_token_seconds_sum{model_name="tiny"} 99.6
vllm:time_per_output_token_seconds_count{model_name="tiny"} 24900
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.001"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.005"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.01"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.02"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.04"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.06"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.08"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.1"} 20
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.25"} 70
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.5"} 95
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.75"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="1"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2.5"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="5"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="7.5"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="10"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="20"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="40"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="80"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="160"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="640"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2560"} 100
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"} 100
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 21.5
vllm:time_to_first_token_seconds_count{model_name="tiny"} 100
"""  # noqa: E501

SIM_NEWER = """\
# HELP vllm:generation_tokens_total Total number of generated tokens.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="tiny"} 65000
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.01"} 0
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.025"} 50000
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.05"} 60000
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.075"} 63000
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.1"} 64500
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.15"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.2"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.3"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.4"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.5"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.75"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="1"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="2.5"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="5"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="7.5"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="10"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="20"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="40"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="80"} 64700
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="+Inf"} 64700
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 1294
vllm:inter_token_latency_seconds_count{model_name="tiny"} 64700
# HELP vllm:kv_cache_usage_perc Prometheus metric for the fraction of KV-cache blocks currently in use (from 0 to 1).
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="tiny"} 0.5
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="tiny"} 9
# HELP vllm:num_requests_waiting Prometheus metric for the number of queued requests.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="tiny"} 3
# HELP vllm:prompt_tokens_total Total number of prompt tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="tiny"} 130000
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finish_reason="length",model_name="tiny"} 30
vllm:request_success_total{finish_reason="stop",model_name="tiny"} 270
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.001"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.005"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.01"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.02"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.04"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.06"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.08"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.1"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.25"} 150
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.5"} 240
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.75"} 280
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="1"} 296
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2.5"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="5"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="7.5"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="10"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="20"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="40"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="80"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="160"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="640"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2560"} 300
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"} 300
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 98
vllm:time_to_first_token_seconds_count{model_name="tiny"} 300
"""  # noqa: E501

SIM_RESTARTED = """\
# HELP vllm:generation_tokens_total Total number of generated tokens.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="tiny"} 10000
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.01"} 0
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.025"} 9000
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.05"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.075"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.1"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.15"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.2"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.3"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.4"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.5"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="0.75"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="1"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="2.5"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="5"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="7.5"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="10"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="20"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="40"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="80"} 9960
vllm:inter_token_latency_seconds_bucket{model_name="tiny",le="+Inf"} 9960
vllm:inter_token_latency_seconds_sum{model_name="tiny"} 209
vllm:inter_token_latency_seconds_count{model_name="tiny"} 9960
# HELP vllm:kv_cache_usage_perc Prometheus metric for the fraction of KV-cache blocks currently in use (from 0 to 1).
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="tiny"} 0.1
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="tiny"} 2
# HELP vllm:num_requests_waiting Prometheus metric for the number of queued requests.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="tiny"} 0
# HELP vllm:prompt_tokens_total Total number of prompt tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="tiny"} 20000
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finish_reason="length",model_name="tiny"} 4
vllm:request_success_total{finish_reason="stop",model_name="tiny"} 36
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.001"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.005"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.01"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.02"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.04"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.06"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.08"} 0
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.1"} 30
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.25"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.5"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="0.75"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="1"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2.5"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="5"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="7.5"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="10"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="20"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="40"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="80"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="160"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="640"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="2560"} 40
vllm:time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"} 40
vllm:time_to_first_token_seconds_sum{model_name="tiny"} 4.9
vllm:time_to_first_token_seconds_count{model_name="tiny"} 40
"""  # noqa: E501

# vllm/v1/metrics/loggers.py (PrometheusStatLogger); the simulator's pkg/common/utils.go too
VLLM_TTFT_BOUNDS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25)
VLLM_TTFT_BOUNDS += (0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BOUNDS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
VLLM_ITL_BOUNDS += (0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


def test_vllm_sums_engines_and_averages_the_kv_cache() -> None:
    s = parse_metrics(VLLM_DP2)
    assert s.dialect is Dialect.VLLM
    assert s.requests_running == 22  # 12 + 10
    assert s.requests_waiting == 4  # 3 + 1
    assert s.kv_cache_usage == pytest.approx(0.55)  # mean of 0.62 and 0.48
    assert s.requests_finished == 700  # every finished_reason of both engines, abort included
    assert s.prompt_tokens == 2.1e6
    assert s.generation_tokens == 168000
    assert s.ttft is not None and s.tpot is not None
    assert s.ttft.bounds == (*VLLM_TTFT_BOUNDS, math.inf)
    assert s.ttft.count == 700 and s.ttft.sum == pytest.approx(105.6)
    # Both engines' buckets summed: 687 at 0.75 s, 694 at 1 s; rank 0.99 x 700 = 693.
    assert s.ttft.quantile(0.99) == pytest.approx(0.75 + 0.25 * 6 / 7)
    # Per output token: the inter-token latency (rank 166320 between 160000 and 166500).
    assert s.tpot.bounds == (*VLLM_ITL_BOUNDS, math.inf)
    assert s.tpot.count == 168000
    assert s.tpot.quantile(0.99) == pytest.approx(0.05 + 0.025 * 6320 / 6500)


def test_sglang_sums_data_parallel_ranks() -> None:
    s = parse_metrics(SGLANG_DP2)
    assert s.dialect is Dialect.SGLANG
    assert s.requests_running == 12
    assert s.requests_waiting == 2  # queue 2 + 0, nothing in the decode prealloc queue
    assert s.kv_cache_usage == pytest.approx(0.5)
    assert s.requests_finished == 1500
    assert s.prompt_tokens == 750000 and s.generation_tokens == 300000
    assert s.ttft is not None and s.ttft.count == 1500
    assert s.ttft.quantile(0.5) == pytest.approx(0.1 + 0.1 * 450 / 600)
    assert s.tpot is not None and s.tpot.count == 298500


def test_sglang_ranks_of_one_instance_are_one_figure() -> None:
    # --enable-metrics-for-all-schedulers with TP 2: both tensor-parallel ranks log the batch.
    body = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 7.0
sglang:num_running_reqs{engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="1"} 7.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 0.3
sglang:token_usage{engine_type="unified",model_name="qwen3-8b",pp_rank="0",tp_rank="1"} 0.3
"""
    s = parse_metrics(body)
    assert s.requests_running == 7
    assert s.kv_cache_usage == pytest.approx(0.3)


def test_sglang_decode_server_counts_its_prealloc_queue_as_waiting() -> None:
    body = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="decode",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:num_decode_prealloc_queue_reqs The number of requests in the decode prealloc queue.
# TYPE sglang:num_decode_prealloc_queue_reqs gauge
sglang:num_decode_prealloc_queue_reqs{engine_type="decode",model_name="qwen3-8b",pp_rank="0",tp_rank="0"} 4.0
"""  # noqa: E501
    assert parse_metrics(body).requests_waiting == 5


def test_sglang_older_time_per_output_token_name() -> None:
    # Releases before the inter-token latency histogram called it time_per_output_token.
    older = SGLANG_DP2.replace("sglang:inter_token_latency", "sglang:time_per_output_token")
    s = parse_metrics(older)
    assert s.tpot is not None and s.tpot.count == 298500


def test_simulator_dialect_and_inter_token_latency_first() -> None:
    s = parse_metrics(SIM_OLDER)
    assert s.dialect is Dialect.LLM_D_SIM  # vLLM names, no engine label
    assert (s.requests_running, s.requests_waiting, s.kv_cache_usage) == (4, 0, 0.25)
    assert s.requests_finished == 100  # stop 90 + length 10
    assert (s.prompt_tokens, s.generation_tokens) == (50000, 25000)
    # Both per-token histograms are there; the inter-token one is read (its p99 is above the
    # 10 ms under which the fixture put every time_per_output_token observation).
    assert s.tpot is not None and s.tpot.count == 24900
    assert s.tpot.quantile(0.99) == pytest.approx(0.05 + 0.025 * 651 / 800)


def test_window_rates_and_quantiles_by_hand() -> None:
    w = window(parse_metrics(SIM_OLDER), parse_metrics(SIM_NEWER), 20.0)
    assert not w.restarted
    assert w.requests_per_second == pytest.approx(10.0)  # (300 - 100) / 20
    assert w.output_tokens_per_second == pytest.approx(2000.0)  # (65000 - 25000) / 20
    assert w.prompt_tokens_per_second == pytest.approx(4000.0)
    assert (w.requests_running, w.requests_waiting, w.kv_cache_usage) == (9, 3, 0.5)
    assert w.in_flight == 12
    # TTFT in the window, bucket by bucket: 20 at 0.1 s, 80 at 0.25, 145 at 0.5, 180 at 0.75,
    # 196 at 1, 200 at 2.5. p99: rank 198 lies in (1, 2.5], 2 of its 4.
    assert w.ttft_observations == 200
    assert w.ttft_p99_seconds == pytest.approx(1.0 + 1.5 * 2 / 4)
    # p50: rank 100 lies in (0.25, 0.5], 20 of its 65.
    assert w.ttft_p50_seconds == pytest.approx(0.25 + 0.25 * 20 / 65)
    # Inter-token: 30000 at 25 ms, 36000 at 50, 38200 at 75, 39600 at 100, 39800 at 150 ms.
    assert w.tpot_observations == 39800
    assert w.tpot_p99_seconds == pytest.approx(0.075 + 0.025 * (39402 - 38200) / 1400)
    assert w.tpot_p50_seconds == pytest.approx(0.01 + 0.015 * 19900 / 30000)


def test_window_after_a_restart_counts_from_zero() -> None:
    w = window(parse_metrics(SIM_NEWER), parse_metrics(SIM_RESTARTED), 20.0)
    assert w.restarted
    assert w.requests_per_second == pytest.approx(2.0)  # 40 since the restart, not 40 - 300
    assert w.output_tokens_per_second == pytest.approx(500.0)
    assert w.prompt_tokens_per_second == pytest.approx(1000.0)
    # The histograms restarted too: the newer one is the window's (30 at 0.1 s, 40 at 0.25 s).
    assert w.ttft_observations == 40
    assert w.ttft_p99_seconds == pytest.approx(0.1 + 0.15 * 9.6 / 10)


def test_one_counter_reset_is_a_restart() -> None:
    older = ServerSample(Dialect.VLLM, requests_finished=100.0, generation_tokens=1000.0)
    newer = ServerSample(Dialect.VLLM, requests_finished=30.0, generation_tokens=1600.0)
    w = window(older, newer, 10.0)
    assert w.restarted
    assert w.requests_per_second == pytest.approx(3.0)  # 30 since the restart
    assert w.output_tokens_per_second == pytest.approx(60.0)
    assert w.prompt_tokens_per_second is None  # neither sample has it


def test_missing_metrics_are_none() -> None:
    body = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama3-8b"} 3.0
"""
    s = parse_metrics(body)
    assert s.dialect is Dialect.VLLM
    assert s.requests_running == 3
    assert s.requests_waiting is None and s.kv_cache_usage is None
    assert s.requests_finished is None and s.prompt_tokens is None
    assert s.generation_tokens is None and s.ttft is None and s.tpot is None
    w = window(s, s, 15.0)
    assert w.has_signal and w.in_flight == 3
    assert w.requests_per_second is None and w.ttft_p99_seconds is None
    assert w.ttft_observations == 0 and not w.restarted


def test_vllm_0_10_names() -> None:
    # 0.10 exposes the deprecated gpu_cache_usage_perc beside kv_cache_usage_perc (the newer
    # wins); 0.9-era servers only the former, and no inter-token histogram.
    both = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="llama3-8b"} 0.8
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama3-8b"} 0.7
"""  # noqa: E501
    assert parse_metrics(both).kv_cache_usage == pytest.approx(0.7)
    old = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="llama3-8b"} 0.8
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="llama3-8b"} 0.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.025",model_name="llama3-8b"} 900.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.05",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.075",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.1",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.15",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.2",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.3",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.4",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.5",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.75",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="1.0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="2.5",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="5.0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="7.5",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="10.0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="20.0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="40.0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="80.0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="llama3-8b"} 1000.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="llama3-8b"} 20.0
"""  # noqa: E501
    s = parse_metrics(old)
    assert s.kv_cache_usage == pytest.approx(0.8)
    assert s.tpot is not None and s.tpot.count == 1000
    assert s.tpot.quantile(0.5) == pytest.approx(0.01 + 0.015 * 500 / 900)


def test_counters_with_and_without_total_and_untyped() -> None:
    body = """\
# TYPE vllm:request_success counter
vllm:request_success{engine="0",finished_reason="stop",model_name="m"} 5
vllm:generation_tokens_total{engine="0",model_name="m"} 7
"""
    s = parse_metrics(body)
    assert s.requests_finished == 5
    assert s.generation_tokens == 7


def test_a_nan_gauge_is_missing() -> None:
    s = parse_metrics('vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n')
    assert s.kv_cache_usage is None


@pytest.mark.parametrize(
    "body",
    [
        "<html><head><title>404 Not Found</title></head><body>Not Found</body></html>\n",
        '{"object": "error", "message": "Not Found"}\n',
        'vllm:num_requests_running{engine="0",model_name="m" 3.0\n',
        "upstream connect error or disconnect/reset before headers\n",
        b"\xff\xfe\x00v\x00l",
    ],
)
def test_not_prometheus_text_raises(body: str | bytes) -> None:
    with pytest.raises(MetricsParseError):
        parse_metrics(body)
    assert issubclass(MetricsParseError, ValueError)


def test_nothing_known_is_unknown_and_empty() -> None:
    for body in ("", "# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total 1.5\n"):
        s = parse_metrics(body)
        assert s.dialect is Dialect.UNKNOWN
        assert s.requests_running is None and s.ttft is None and s.requests_finished is None


def test_bytes_body() -> None:
    assert parse_metrics(SIM_NEWER.encode()).requests_running == 9


# --- histogram_quantile: Prometheus semantics -------------------------------------------------

BOUNDS = (0.1, 0.5, 1.0, math.inf)


def test_quantile_interpolates_inside_the_bucket() -> None:
    cum = (10.0, 50.0, 90.0, 100.0)
    assert histogram_quantile(0.5, BOUNDS, cum) == pytest.approx(0.5)  # rank 50 ends (0.1, 0.5]
    assert histogram_quantile(0.3, BOUNDS, cum) == pytest.approx(0.1 + 0.4 * 20 / 40)
    assert histogram_quantile(0.05, BOUNDS, cum) == pytest.approx(0.05)  # from 0 in the first
    # In the +Inf bucket: the highest finite bound, as Prometheus answers.
    assert histogram_quantile(0.99, BOUNDS, cum) == 1.0


def test_quantile_edge_cases() -> None:
    assert histogram_quantile(0.5, (0.1, 0.5, 1.0), (1.0, 2.0, 3.0)) is None  # no +Inf
    assert histogram_quantile(0.5, BOUNDS, (0.0, 0.0, 0.0, 0.0)) is None  # no observations
    assert histogram_quantile(0.5, (math.inf,), (5.0,)) is None  # one bucket
    # Not monotonic (a scrape racing an observation): forced up, as ensureMonotonic does.
    assert histogram_quantile(0.5, BOUNDS, (10.0, 8.0, 20.0, 20.0)) == pytest.approx(
        histogram_quantile(0.5, BOUNDS, (10.0, 10.0, 20.0, 20.0))
    )
    with pytest.raises(ValueError):
        histogram_quantile(1.5, BOUNDS, (1.0, 1.0, 1.0, 1.0))


def test_histogram_since() -> None:
    older = LatencyHistogram(BOUNDS, (1.0, 2.0, 3.0, 4.0), 2.0, 4.0)
    newer = LatencyHistogram(BOUNDS, (3.0, 6.0, 7.0, 9.0), 5.0, 9.0)
    d = newer.since(older)
    assert d == LatencyHistogram(BOUNDS, (2.0, 4.0, 4.0, 5.0), 3.0, 5.0)
    assert newer.since(None) is None
    rebucketed = LatencyHistogram((0.2, math.inf), (1.0, 1.0), 0.1, 1.0)
    assert rebucketed.since(older) is rebucketed  # other buckets: a restart
    assert older.since(newer) is older  # went down: a restart


def test_window_needs_a_duration() -> None:
    s = parse_metrics(SIM_OLDER)
    for seconds in (0.0, -5.0, math.nan):
        with pytest.raises(ValueError):
            window(s, s, seconds)


# --- the clients' own output ------------------------------------------------------------------


def test_what_the_python_client_prints_for_vllms_definitions() -> None:
    """The definitions of vllm/v1/metrics/loggers.py, printed by prometheus_client itself."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "running", labels, registry=registry)
    success = Counter(
        "vllm:request_success", "success", [*labels, "finished_reason"], registry=registry
    )
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "ttft",
        labels,
        buckets=VLLM_TTFT_BOUNDS,
        registry=registry,
    )
    for engine, n in (("0", 60), ("1", 40)):
        running.labels("m", engine).set(n / 10)
        success.labels("m", engine, "stop").inc(n)
        for i in range(n):
            ttft.labels("m", engine).observe(0.2 if i else 3.0)  # one slow request per engine
    s = parse_metrics(generate_latest(registry))
    assert s.dialect is Dialect.VLLM
    assert s.requests_running == 10 and s.requests_finished == 100
    assert s.ttft is not None and s.ttft.count == 100 and s.ttft.sum == pytest.approx(25.6)
    # 98 at 0.25 s, 2 in (2.5, 5]: p99 rank 99 is half-way into (2.5, 5].
    assert s.ttft.quantile(0.99) == pytest.approx(3.75)


def test_what_the_python_client_prints_for_sglangs_definitions() -> None:
    """The definitions of python/sglang/srt/metrics/collector.py (TokenizerMetricsCollector)."""
    registry = CollectorRegistry()
    requests = Counter("sglang:num_requests_total", "n", ["model_name"], registry=registry)
    tokens = Counter("sglang:generation_tokens_total", "g", ["model_name"], registry=registry)
    requests.labels("q").inc(12)
    tokens.labels("q").inc(3400)
    s = parse_metrics(generate_latest(registry).decode())
    assert s.dialect is Dialect.SGLANG
    assert (s.requests_finished, s.generation_tokens) == (12, 3400)
