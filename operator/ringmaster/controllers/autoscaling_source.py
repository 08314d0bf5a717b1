"""Who scales an InferenceEndpoint (spec.autoscaling): nobody, an HPA, or the operator on the
servers' own metrics (server_metrics_autoscaler); and the condition that says what the latter
decided last. Pure: the lifecycle and the shell share it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ringmaster.api import InferenceEndpointSpec
from ringmaster.controllers.reporting import Conditions

UNIFIED = "unified"  # an aggregated endpoint's one set of replicas (signal_scaling.Side)
AUTOSCALING_CONDITION = "Autoscaling"
NO_SIGNAL = "NoSignal"


@dataclass(frozen=True)
class SideScaling:
    """One side's (or the whole endpoint's) count from the autoscaler's last decision, and why."""

    replicas: int
    reason: str  # signal_scaling.Reason
    message: str
    errors: str = ""  # the scrape's failures in words


def uses_hpa(spec: InferenceEndpointSpec) -> bool:
    return spec.autoscaling.enabled and spec.autoscaling.source == "HPA"


def uses_server_metrics(spec: InferenceEndpointSpec) -> bool:
    return spec.autoscaling.enabled and spec.autoscaling.source == "ServerMetrics"


def scaling_condition(
    conditions: Conditions, spec: InferenceEndpointSpec, scaled: Mapping[str, SideScaling]
) -> None:
    """Autoscaling: what the server-metrics autoscaler decided last, per side (False while no
    server answers: the count holds); absent when it is not the endpoint's source."""
    if not uses_server_metrics(spec):
        conditions.remove(AUTOSCALING_CONDITION)
        return
    if not scaled:
        conditions.set(
            AUTOSCALING_CONDITION,
            "Unknown",
            "Waiting",
            "the servers' metrics have not been read yet: the engine's count runs",
        )
        return
    parts = []
    for side, s in scaled.items():
        what = "" if side == UNIFIED else f"{side}: "
        parts.append(f"{what}{s.replicas} replicas, {s.reason}: {s.message}")
        if s.errors:
            parts[-1] += f" ({s.errors})"
    silent = all(s.reason == NO_SIGNAL for s in scaled.values())
    reasons = sorted({s.reason for s in scaled.values()})
    conditions.set(
        AUTOSCALING_CONDITION,
        "False" if silent else "True",
        NO_SIGNAL if silent else (reasons[0] if len(reasons) == 1 else "Scaled"),
        "; ".join(parts)[:1024],
    )
