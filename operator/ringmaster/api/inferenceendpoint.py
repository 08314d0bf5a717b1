"""InferenceEndpoint: model-serving replicas on an accelerator pool, sized from a throughput and
latency target."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field

from ringmaster.api.accelerators import (
    CEL_HOST_SHAPES,
    CEL_HOST_SHAPES_TEXT,
    HOST_SHAPES,
    AcceleratorType,
    host_shapes_text,
    shapes_text,
)
from ringmaster.api.base import Int, Rule, SpecModel, StatusModel
from ringmaster.api.common import Condition, PodTemplate, conditions_field
from ringmaster.api.quantity import Count
from ringmaster.api.resource import AGE, PrinterColumn, Resource, condition_reason

Precision = Literal["FP32", "FP16", "INT8"]


class InferenceAccelerator(SpecModel):
    """The accelerators of each serving replica (one host)."""

    type: AcceleratorType
    """Accelerator type as GKE labels nodes."""
    per_replica: Int = Field(default=1, ge=1, le=16)
    """Accelerators per replica; must be a host shape of the type."""

    cel_rules = (
        Rule(
            cel=f"self.perReplica in {CEL_HOST_SHAPES}[self.type]",
            message="perReplica must be a host shape of the accelerator type "
            f"({host_shapes_text()})",
            field_path=".perReplica",
            check=lambda s: s.per_replica in HOST_SHAPES[s.type],
            message_expression=(
                f"'perReplica must be a host shape of ' + self.type + ': ' + "
                f"{CEL_HOST_SHAPES_TEXT}[self.type]"
            ),
            message_for=lambda s: (
                f"perReplica must be a host shape of {s.type}: {shapes_text(s.type)}"
            ),
        ),
    )


class InferenceModel(SpecModel):
    """What is served: the figures the engine's roofline needs."""

    name: str | None = Field(default=None, max_length=128)
    """Free-form model name, for people (``resnet-50``)."""
    parameters: Count
    """Number of parameters: an integer or ``"25.6M"``, ``"7B"`` (K, M, G/B, T)."""
    flops_per_request: Count
    """FLOPs of one request's forward pass (ResNet-50 at 224x224: about ``"8.2G"``)."""


class Slo(SpecModel):
    """The service level the replica count is sized for."""

    target_requests_per_second: float = Field(gt=0, le=10_000_000)
    """Requests per second the endpoint must sustain."""
    latency_p99_milliseconds: float = Field(le=600_000)
    """99th percentile latency target, including batching delay; must be positive."""

    cel_rules = (
        Rule(
            cel="self.latencyP99Milliseconds > 0.0",
            message="latencyP99Milliseconds must be greater than 0",
            field_path=".latencyP99Milliseconds",
            check=lambda s: s.latency_p99_milliseconds > 0,
        ),
    )


class Autoscaling(SpecModel):
    """Optional HorizontalPodAutoscaler on the endpoint's Deployment (an HPA on the endpoint's
    own scale subresource cannot read a count while spec.replicas is unset)."""

    enabled: bool = False
    """True: the operator creates an HPA (autoscaling/v2) between minReplicas and maxReplicas;
    the engine's replica count is then only the starting point."""
    target_cpu_utilization_percentage: Int = Field(
        default=70, ge=1, le=100, alias="targetCPUUtilizationPercentage"
    )


class InferenceEndpointSpec(SpecModel):
    """The desired serving endpoint."""

    accelerator: InferenceAccelerator
    model: InferenceModel
    precision: Precision = "FP16"
    """Arithmetic the model is served in; INT8 needs fewer replicas where the accelerator has
    INT8 throughput (T4, A100)."""
    slo: Slo
    max_batch_size: Int = Field(default=32, ge=1, le=1024)
    """Largest batch the server forms; the engine picks the batch size up to this."""
    replicas: Int | None = Field(default=None, ge=0, le=1000)
    """Fixed replica count, overriding the engine's sizing (also what ``kubectl scale`` sets).
    Omitted: sized from the SLO."""
    min_replicas: Int = Field(default=1, ge=0, le=1000)
    max_replicas: Int = Field(default=10, ge=1, le=1000)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, json_schema_extra={"default": {}})
    port: Int = Field(default=8080, ge=1, le=65535)
    """Port the server listens on; the endpoint's Service exposes it."""
    template: PodTemplate

    cel_rules = (
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="minReplicas must not exceed maxReplicas",
            field_path=".minReplicas",
            check=lambda s: s.min_replicas <= s.max_replicas,
        ),
        Rule(
            cel="!has(self.replicas) || (self.replicas >= self.minReplicas"
            " && self.replicas <= self.maxReplicas)",
            message="replicas must be between minReplicas and maxReplicas",
            field_path=".replicas",
            check=lambda s: s.replicas is None or s.min_replicas <= s.replicas <= s.max_replicas,
        ),
    )


class InferenceEndpointPhase(StrEnum):
    """Values of ``status.phase``."""

    PENDING = "Pending"  # accepted, not planned or placed yet
    PROGRESSING = "Progressing"  # replicas being created or replaced
    READY = "Ready"  # all desired replicas ready
    DEGRADED = "Degraded"  # fewer ready replicas than desired, or the SLO cannot be met
    FAILED = "Failed"


class InferencePlan(StatusModel):
    """The engine's sizing. Fields not listed here are kept (the engine may report more)."""

    model_config = ConfigDict(extra="allow")

    batch_size: int | None = None
    """Batch size chosen (at most maxBatchSize)."""
    per_replica_requests_per_second: float | None = None
    """Predicted throughput of one replica within the latency target."""
    capacity_requests_per_second: float | None = None
    """Predicted throughput of all desired replicas."""
    latency_p99_milliseconds: float | None = None
    """Predicted p99 latency at the target rate."""
    replicas: int | None = None
    """Replicas the engine asks for (before minReplicas/maxReplicas and spec.replicas)."""
    bottleneck: str | None = None
    """``compute`` or ``memory`` (roofline), or ``latency``."""
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")


class InferenceEndpointStatus(StatusModel):
    """What the operator observed and decided. Written only by the operator."""

    observed_generation: int | None = None
    phase: str | None = None
    """One of :class:`InferenceEndpointPhase`."""
    conditions: list[Condition] = conditions_field()
    plan: InferencePlan | None = None
    replicas: int | None = None
    """Desired replicas (the scale subresource's status.replicas)."""
    ready_replicas: int | None = None
    selector: str | None = None
    """Label selector of the replicas' pods, as a string (for the scale subresource and HPA)."""
    url: str | None = None
    """In-cluster URL of the endpoint's Service."""
    pool: str | None = None
    """The node pool the replicas run on."""


INFERENCE_ENDPOINT = Resource(
    kind="InferenceEndpoint",
    plural="inferenceendpoints",
    short_name="ie",
    description="Model-serving replicas on an accelerator pool, sized by the operator's "
    "performance model to meet a throughput and p99 latency target.",
    spec=InferenceEndpointSpec,
    status=InferenceEndpointStatus,
    phases=InferenceEndpointPhase,
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase"),
        PrinterColumn(
            "Reason",
            "string",
            condition_reason("Ready"),
            "Why the endpoint is (not) ready: the Ready condition's reason",
        ),
        PrinterColumn("Replicas", "integer", ".status.replicas", "Desired replicas"),
        PrinterColumn("Ready", "integer", ".status.readyReplicas", "Ready replicas"),
        PrinterColumn(
            "Capacity-RPS",
            "number",
            ".status.plan.capacityRequestsPerSecond",
            "Predicted requests per second of the desired replicas",
        ),
        PrinterColumn(
            "Target-RPS", "number", ".spec.slo.targetRequestsPerSecond", "Target requests/second"
        ),
        PrinterColumn("Accelerator", "string", ".spec.accelerator.type", "Accelerator type"),
        PrinterColumn("Precision", "string", ".spec.precision", "Serving precision", priority=1),
        PrinterColumn(
            "P99-ms",
            "number",
            ".status.plan.latencyP99Milliseconds",
            "Predicted p99 latency",
            priority=1,
        ),
        PrinterColumn("URL", "string", ".status.url", "In-cluster URL", priority=1),
        AGE,
    ),
    scale=True,
)
