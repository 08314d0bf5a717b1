"""What a model server says about its own load: one scrape of its ``/metrics`` as a
:class:`ServerSample`, and two scrapes as a :class:`ServerWindow` (rates and latency quantiles).

The autoscaler (:mod:`ringmaster.planning.signal_scaling`) decides on these. Pure: text in,
frozen dataclasses out; no I/O.

The metric names were read from each server's source (not from its documentation):

- **vLLM** V1 engine, ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger.__init__``, read at
  v0.10 and at the 0.11/0.12 line). Every series has the labels ``model_name`` and ``engine``
  (the data-parallel engine index), so one server with DP > 1 has one series per engine:

  - gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
    ``vllm:kv_cache_usage_perc`` (0..1, "1 means 100 percent usage"); up to 0.10 also
    ``vllm:gpu_cache_usage_perc`` ("DEPRECATED: Use vllm:kv_cache_usage_perc", removed since);
  - counters ``vllm:request_success`` (labels + ``finished_reason``: stop, length, abort),
    ``vllm:prompt_tokens``, ``vllm:generation_tokens``; the Python client exposes each as
    ``<name>_total`` (and a ``<name>_created`` gauge);
  - histograms ``vllm:time_to_first_token_seconds`` and, per output token,
    ``vllm:inter_token_latency_seconds`` (since 0.11) or ``vllm:time_per_output_token_seconds``
    (up to 0.10; from 0.11 hidden behind ``--show-hidden-metrics-for-version`` and fed the same
    inter-token latencies). ``vllm:request_time_per_output_token_seconds`` is one value per
    request, not per token, and is not read.

- **SGLang**, ``python/sglang/srt/metrics/collector.py``: ``SchedulerMetricsCollector`` (labels
  ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``, and ``dp_rank`` under data-parallel
  attention; ``python/sglang/srt/managers/scheduler_metrics_mixin.py``) has the gauges
  ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, ``sglang:token_usage`` (used / total
  KV-cache tokens, 0..1) and, for PD disaggregation, ``sglang:num_decode_prealloc_queue_reqs``
  (requests waiting for KV room on a decode server, counted here as waiting);
  ``TokenizerMetricsCollector`` (label ``model_name``) has the counters
  ``sglang:num_requests_total`` (incremented per finished request),
  ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total`` and the histograms
  ``sglang:time_to_first_token_seconds`` and ``sglang:inter_token_latency_seconds`` (older
  releases: ``sglang:time_per_output_token_seconds``). Only tensor-parallel rank 0 records
  scheduler metrics unless ``--enable-metrics-for-all-schedulers``
  (``python/sglang/srt/server_args.py``).

- **llm-d inference simulator** (github.com/llm-d/llm-d-inference-sim),
  ``pkg/llm-d-inference-sim/metrics.go``: the vLLM names ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:request_success_total``
  (labels ``model_name``, ``finish_reason``), ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``, ``vllm:time_to_first_token_seconds``,
  ``vllm:time_per_output_token_seconds`` and ``vllm:inter_token_latency_seconds``, labelled
  ``model_name`` only (no ``engine``), which is how the dialect is told from vLLM's.

Label sets of one server are summed (data-parallel engines, finish reasons), except those that
differ only in a rank label (``tp_rank``, ``pp_rank``, ``moe_ep_rank``): ranks of one model
instance report the same batch, so their series are the same figure and the largest is kept.
KV-cache usage is averaged over engines, as vLLM's own aggregated log line does
(``AggregatedLoggingStatLogger.aggregate_scheduler_stats``). A metric the server does not expose
is ``None``; a body that is not Prometheus text raises :class:`MetricsParseError`.

Windowed quantiles follow Prometheus ``histogram_quantile`` (``promql/quantile.go``,
``bucketQuantile``): linear interpolation inside the bucket that holds the rank, 0 as the lower
bound of the first bucket, and the highest finite bound when the rank falls in the +Inf bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.parser import text_string_to_metric_families


class MetricsParseError(ValueError):
    """The body of a ``/metrics`` response is not Prometheus text exposition format."""


class Dialect(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    LLM_D_SIM = "llm-d-inference-sim"
    UNKNOWN = "unknown"


# Candidates per figure, first found wins (the vLLM and SGLang names never collide).
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
# Added to the waiting figure when present (SGLang PD decode servers: waiting for KV room).
WAITING_EXTRA = ("sglang:num_decode_prealloc_queue_reqs",)
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
# Counters by base name: exposed as <base>_total, or bare <base> by some exporters.
REQUESTS_FINISHED = ("vllm:request_success", "sglang:num_requests")
PROMPT_TOKENS = ("vllm:prompt_tokens", "sglang:prompt_tokens")
GENERATION_TOKENS = ("vllm:generation_tokens", "sglang:generation_tokens")
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
TPOT = (
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:time_per_output_token_seconds",
)

# Labels that tell apart ranks of one model instance, whose series repeat the same figure.
RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})


@dataclass(frozen=True)
class LatencyHistogram:
    """A Prometheus histogram: cumulative counts per upper bound (ascending, the last +Inf when
    the server exposes it), the sum of the observations and their count."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, self.bounds, self.cumulative)

    def since(self, older: LatencyHistogram | None) -> LatencyHistogram | None:
        """The observations made after ``older``: bucket-wise differences. A histogram that went
        down (the server restarted) or changed its buckets counts from zero: ``self`` itself.
        ``None`` when there is no ``older`` to subtract."""
        if older is None:
            return None
        if older.bounds != self.bounds or self.count < older.count:
            return self
        diffs = tuple(n - o for n, o in zip(self.cumulative, older.cumulative, strict=True))
        if any(d < 0 for d in diffs):
            return self
        return LatencyHistogram(
            self.bounds, diffs, max(0.0, self.sum - older.sum), self.count - older.count
        )


def histogram_quantile(
    q: float, bounds: tuple[float, ...], cumulative: tuple[float, ...]
) -> float | None:
    """Prometheus ``histogram_quantile`` on one histogram (``bucketQuantile`` in
    ``promql/quantile.go``); ``None`` where Prometheus gives NaN (no +Inf bucket, fewer than two
    buckets, no observations)."""
    if math.isnan(q) or not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    if len(bounds) != len(cumulative) or len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    counts = list(cumulative)
    for i in range(1, len(counts)):  # ensureMonotonic
        counts[i] = max(counts[i], counts[i - 1])
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(counts) - 1) if counts[i] >= rank), len(counts) - 1)
    if b == len(counts) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count)


@dataclass(frozen=True)
class ServerSample:
    """One scrape of one server (one replica, all its engines). Counters are cumulative since
    the server started; ``None``: the server does not expose the figure."""

    dialect: Dialect
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # fraction of the KV cache in use, 0..1
    requests_finished: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    ttft: LatencyHistogram | None = None  # seconds, one observation per request
    tpot: LatencyHistogram | None = None  # seconds, one observation per output token


@dataclass(frozen=True)
class ServerWindow:
    """One server over the interval between two samples: rates from counter differences,
    quantiles from histogram differences, and the newer sample's gauges."""

    seconds: float
    dialect: Dialect
    requests_running: float | None
    requests_waiting: float | None
    kv_cache_usage: float | None
    requests_per_second: float | None
    prompt_tokens_per_second: float | None
    output_tokens_per_second: float | None
    ttft_p50_seconds: float | None
    ttft_p99_seconds: float | None
    tpot_p50_seconds: float | None
    tpot_p99_seconds: float | None
    ttft_observations: float  # in the window (0 when unknown)
    tpot_observations: float
    restarted: bool  # a counter went down between the samples: the server restarted

    @property
    def in_flight(self) -> float | None:
        """Requests on the server: running plus waiting (``None`` when neither is known)."""
        if self.requests_running is None and self.requests_waiting is None:
            return None
        return (self.requests_running or 0.0) + (self.requests_waiting or 0.0)

    @property
    def has_signal(self) -> bool:
        return self.requests_per_second is not None or self.in_flight is not None


# --- parsing ---------------------------------------------------------------------------------

Series = dict[str, list[tuple[Mapping[str, str], float]]]


def parse_metrics(body: str | bytes) -> ServerSample:
    """One ``/metrics`` body as a :class:`ServerSample`. Raises :class:`MetricsParseError` when
    the body is not Prometheus text (an HTML error page, JSON, a truncated line)."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MetricsParseError(f"the metrics body is not UTF-8: {e}") from e
    series: Series = {}
    try:
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                series.setdefault(s.name, []).append((s.labels, float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise MetricsParseError(f"not Prometheus text exposition format: {e}") from e
    waiting = _gauge(series, WAITING)
    extra = _gauge(series, WAITING_EXTRA)
    if waiting is not None and extra is not None:
        waiting += extra
    return ServerSample(
        dialect=_dialect(series),
        requests_running=_gauge(series, RUNNING),
        requests_waiting=waiting,
        kv_cache_usage=_gauge(series, KV_CACHE_USAGE, mean=True),
        requests_finished=_counter(series, REQUESTS_FINISHED),
        prompt_tokens=_counter(series, PROMPT_TOKENS),
        generation_tokens=_counter(series, GENERATION_TOKENS),
        ttft=_histogram(series, TTFT),
        tpot=_histogram(series, TPOT),
    )


def _dialect(series: Series) -> Dialect:
    if any(n.startswith("sglang:") for n in series):
        return Dialect.SGLANG
    vllm = [n for n in series if n.startswith("vllm:")]
    if not vllm:
        return Dialect.UNKNOWN
    # vLLM V1 labels every series with its engine index; the simulator does not.
    engine = any("engine" in labels for n in vllm for labels, _ in series[n])
    return Dialect.VLLM if engine else Dialect.LLM_D_SIM


def _combine(
    samples: Iterable[tuple[Mapping[str, str], float]], *, mean: bool = False
) -> float | None:
    """Sum (or mean) over the label sets of one server, ranks of one instance counted once."""
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, value in samples:
        if not math.isfinite(value):
            continue
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in RANK_LABELS))
        groups[key] = max(groups.get(key, value), value)
    if not groups:
        return None
    total = math.fsum(groups.values())
    return total / len(groups) if mean else total


def _gauge(series: Series, names: tuple[str, ...], *, mean: bool = False) -> float | None:
    for name in names:
        if name in series:
            value = _combine(series[name], mean=mean)
            if value is not None:
                return value
    return None


def _counter(series: Series, bases: tuple[str, ...]) -> float | None:
    for base in bases:
        for name in (f"{base}_total", base):
            if name in series:
                value = _combine(series[name])
                if value is not None:
                    return value
    return None


def _histogram(series: Series, names: tuple[str, ...]) -> LatencyHistogram | None:
    for name in names:
        buckets = series.get(f"{name}_bucket")
        if not buckets:
            continue
        by_bound: dict[float, list[tuple[Mapping[str, str], float]]] = {}
        for labels, value in buckets:
            try:
                bound = float(labels["le"])
            except (KeyError, ValueError):
                continue
            rest = {k: v for k, v in labels.items() if k != "le"}
            by_bound.setdefault(bound, []).append((rest, value))
        if not by_bound:
            continue
        bounds = tuple(sorted(by_bound))
        cumulative = tuple(_combine(by_bound[b]) or 0.0 for b in bounds)
        count = _combine(series.get(f"{name}_count", []))
        if count is None:
            count = cumulative[-1] if math.isinf(bounds[-1]) else 0.0
        total = _combine(series.get(f"{name}_sum", [])) or 0.0
        return LatencyHistogram(bounds, cumulative, total, count)
    return None


# --- windows ---------------------------------------------------------------------------------


def _rate(older: float | None, newer: float | None, seconds: float) -> tuple[float | None, bool]:
    """Per-second increase of a counter and whether it was reset (newer below older: the
    server restarted, so everything it counted since is the increase)."""
    if older is None or newer is None:
        return None, False
    if newer < older:
        return newer / seconds, True
    return (newer - older) / seconds, False


def window(older: ServerSample, newer: ServerSample, seconds: float) -> ServerWindow:
    """The interval of ``seconds`` between two samples of one server."""
    if not seconds > 0 or not math.isfinite(seconds):
        raise ValueError(f"a window needs a positive duration, got {seconds}")
    rps, r1 = _rate(older.requests_finished, newer.requests_finished, seconds)
    pps, r2 = _rate(older.prompt_tokens, newer.prompt_tokens, seconds)
    ops, r3 = _rate(older.generation_tokens, newer.generation_tokens, seconds)
    ttft = newer.ttft.since(older.ttft) if newer.ttft is not None else None
    tpot = newer.tpot.since(older.tpot) if newer.tpot is not None else None
    reset = r1 or r2 or r3
    reset = reset or (ttft is not None and ttft is newer.ttft)
    reset = reset or (tpot is not None and tpot is newer.tpot)

    def q(h: LatencyHistogram | None, p: float) -> float | None:
        return None if h is None else h.quantile(p)

    return ServerWindow(
        seconds=seconds,
        dialect=newer.dialect,
        requests_running=newer.requests_running,
        requests_waiting=newer.requests_waiting,
        kv_cache_usage=newer.kv_cache_usage,
        requests_per_second=rps,
        prompt_tokens_per_second=pps,
        output_tokens_per_second=ops,
        ttft_p50_seconds=q(ttft, 0.5),
        ttft_p99_seconds=q(ttft, 0.99),
        tpot_p50_seconds=q(tpot, 0.5),
        tpot_p99_seconds=q(tpot, 0.99),
        ttft_observations=0.0 if ttft is None else ttft.count,
        tpot_observations=0.0 if tpot is None else tpot.count,
        restarted=reset,
    )
