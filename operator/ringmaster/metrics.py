"""Prometheus metrics of the operator (served by `ringmaster run --metrics-port`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_SECONDS = Histogram(
    "ringmaster_reconcile_duration_seconds",
    "Time to reconcile one object (read, decide, apply).",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS = Counter(
    "ringmaster_reconcile_errors_total",
    "Reconciles that failed, by kind and reason.",
    ["kind", "reason"],
)
TRAINING_JOBS = Gauge("ringmaster_trainingjobs", "TrainingJobs by phase.", ["phase"])
ADMISSION_WAIT_SECONDS = Histogram(
    "ringmaster_admission_wait_seconds",
    "Time from a TrainingJob's creation (or its last restart) to the admission of its gang.",
    buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600),
)
ADMISSION_START_SECONDS = Histogram(
    "ringmaster_admission_start_seconds",
    "Time from a gang's admission by a cycle to its reconcile starting (stage=queued) and to "
    "its pods created (stage=created): the operator's share of a gang's start.",
    ["stage"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
API_REQUEST_SECONDS = Histogram(
    "ringmaster_api_request_duration_seconds",
    "Time the operator waited for one of its Kubernetes API calls (writes, and the reads that "
    "are not watches), from the call to its answer, by call (verb and kind): the round trips "
    "an admitted gang's start is made of.",
    ["call"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4),
)
ADMISSION_CYCLE_SECONDS = Histogram(
    "ringmaster_admission_cycle_seconds",
    "Time of one admission cycle over the waiting TrainingJobs.",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
ADMISSION_WAITING = Gauge(
    "ringmaster_admission_waiting", "TrainingJobs in the admission queue (at the last resync)."
)
PREDICTED_STEP_SECONDS = Gauge(
    "ringmaster_predicted_step_seconds",
    "The engine's predicted step time of a TrainingJob, for the strategy it runs with.",
    ["namespace", "name"],
)
PREDICTED_SAMPLES_PER_SECOND = Gauge(
    "ringmaster_predicted_samples_per_second",
    "The engine's predicted training throughput of a TrainingJob.",
    ["namespace", "name"],
)
REDUCERS = Gauge(
    "ringmaster_reducers",
    "Reducers of a ReductionServerPool, desired and ready.",
    ["namespace", "name", "state"],
)
INFERENCE_REPLICAS = Gauge(
    "ringmaster_inference_replicas",
    "Replicas of an InferenceEndpoint: desired (the plan, spec.replicas or the HPA) and ready.",
    ["namespace", "name", "state"],
)
INFERENCE_CAPACITY_RPS = Gauge(
    "ringmaster_inference_predicted_capacity_requests_per_second",
    "The engine's predicted requests per second of an InferenceEndpoint's desired replicas "
    "within its p99 latency target.",
    ["namespace", "name"],
)
INFERENCE_TARGET_RPS = Gauge(
    "ringmaster_inference_target_requests_per_second",
    "An InferenceEndpoint's target requests per second (spec.slo).",
    ["namespace", "name"],
)
GC_PAUSE_SECONDS = Counter(
    "ringmaster_gc_pause_seconds",
    "Time the operator's process spent in CPython's cyclic garbage collector, by generation.",
    ["generation"],
)
OBSERVED_STEP_SECONDS = Gauge(
    "ringmaster_observed_step_seconds",
    "A TrainingJob's observed step time: the median over its workers' latest progress reports.",
    ["namespace", "name"],
)
PREDICTION_RATIO = Gauge(
    "ringmaster_prediction_ratio",
    "A TrainingJob's observed step time over its predicted one (the calibrated prediction "
    "where the cluster's calibration applies).",
    ["namespace", "name"],
)
PROGRESS_REPORTS = Counter(
    "ringmaster_progress_reports_total",
    "Progress reports the endpoint answered, by HTTP status code.",
    ["code"],
)
PROGRESS_REPORTS_REFUSED = Counter(
    "ringmaster_progress_reports_refused_total",
    "Progress reports the endpoint refused, by TrainingJob (namespace and name empty when the "
    "URL names no TrainingJob), HTTP status code and reason (TooLarge, BadReport, BadBody, "
    "NoToken, TokenRefused, NotAPodToken, NotAWorker, NotFound, TooManyReports, TooManyReviews, "
    "ReviewFailed). The log warns once a minute per job, code and reason; this counts them all.",
    ["namespace", "name", "code", "reason"],
)

# --- PoolProfile (docs/pool-profiles.md) ----------------------------------------------------------
POOL_PROFILE_MEASURED = Gauge(
    "ringmaster_pool_profile_measured",
    "A profiled pool's headline measurements, its median host: gemm.sustained.<precision> and "
    "gemm.burst.<precision> (TFLOP/s), hbm (GB/s), referenceStep (tokens/s).",
    ["namespace", "poolprofile", "pool", "measurement"],
)
POOL_PROFILE_FLAGGED = Gauge(
    "ringmaster_pool_profile_flagged_hosts",
    "Hosts the profile's last run found below their pool (labelled ringmaster.dev/degraded).",
    ["namespace", "poolprofile"],
)
