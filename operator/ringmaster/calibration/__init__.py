"""Calibration: the engine beside published measurements, one module per model family.

Every fitted constant of the engine and the published points it came from live here, fitted rows
kept apart from checked ones (``ringmaster calibrate`` prints them all):

- :mod:`.points`            the points file, the accuracy table's row and statuses, error helpers
- :mod:`.constants`         the network and serving constants of ``engine.efficiency``, re-derived
- :mod:`.collectives`       nccl-tests bus bandwidths and NCCL's latencies (the network model)
- :mod:`.reduction_server`  Vertex's sizing rule and the published gains over all-reduce
- :mod:`.serving`           MLPerf ResNet-50 throughput and latency (roofline batching)
- :mod:`.llm_training`      Megatron-LM, torchtitan, MaxText and NeMo throughput, torchtitan memory,
                            and the layouts published runs used (llm_training_points.yaml)
- :mod:`.llm_serving`       LLM decode and prefill (gpt-fast, TensorRT-LLM)
- :mod:`.multislice`        MaxText on 1-32 TPU v5e-256 slices over DCN (multislice_points.yaml)
- :mod:`.command`           ``ringmaster calibrate``

Pure except for :func:`.points.load_points` and the command: no Kubernetes, the engine only read.
"""

from __future__ import annotations

from ringmaster.calibration.command import add_arguments, checked_errors, report, run, summary
from ringmaster.calibration.constants import derive_constants
from ringmaster.calibration.points import (
    BOUND,
    CHECKED,
    DECISION,
    FITTED,
    GOAL_MAX,
    GOAL_MEDIAN,
    LLM_SERVING_MODEL,
    NETWORK_MODEL,
    OUT_OF_REACH,
    PACKAGED_POINTS,
    SECTIONS,
    SHARED_POINTS,
    VERBATIM,
    PointsError,
    Row,
    load_points,
)

__all__ = [
    "BOUND",
    "CHECKED",
    "DECISION",
    "FITTED",
    "GOAL_MAX",
    "GOAL_MEDIAN",
    "LLM_SERVING_MODEL",
    "NETWORK_MODEL",
    "OUT_OF_REACH",
    "PACKAGED_POINTS",
    "SECTIONS",
    "SHARED_POINTS",
    "VERBATIM",
    "PointsError",
    "Row",
    "add_arguments",
    "checked_errors",
    "derive_constants",
    "load_points",
    "report",
    "run",
    "summary",
]
