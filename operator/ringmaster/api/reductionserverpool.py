"""ReductionServerPool: CPU-only pods that sum gradients for TrainingJob workers (the Vertex AI
Reduction Server / BytePS design), shared by the jobs that name it."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum

from pydantic import Field

from ringmaster.api.base import Int, Rule, SpecModel, StatusModel
from ringmaster.api.common import Condition, MachineType, conditions_field
from ringmaster.api.resource import AGE, PrinterColumn, Resource, condition_reason

DEFAULT_MACHINE_TYPE = "n1-highcpu-16"


class ReductionServerPoolSpec(SpecModel):
    """The desired reducer pool."""

    replicas: Int | None = Field(default=None, ge=0, le=512)
    """Fixed reducer count (also set by ``kubectl scale``). Omitted: sized by the jobs that use
    the pool, up to maxReplicas."""
    max_replicas: Int = Field(default=64, ge=1, le=512)
    """Upper bound of the sized reducer count."""
    machine_type: MachineType = DEFAULT_MACHINE_TYPE
    """Machine type of the reducer hosts (CPU only; its NIC bandwidth sets a reducer's speed)."""
    image: str = Field(min_length=1, max_length=512)
    """Container image of the reducer."""
    port: Int = Field(default=5000, ge=1, le=65535)
    """Port reducers listen on."""
    scale_down_grace_period_seconds: Int = Field(default=300, ge=0, le=86400)
    """How long reducers no job needs any more are kept before the pool shrinks (a job that
    restarts finds them still there)."""

    cel_rules = (
        Rule(
            cel="!has(self.replicas) || self.replicas <= self.maxReplicas",
            message="replicas must not exceed maxReplicas",
            field_path=".replicas",
            check=lambda s: s.replicas is None or s.replicas <= s.max_replicas,
        ),
    )


class ReductionServerPoolPhase(StrEnum):
    """Values of ``status.phase``."""

    PENDING = "Pending"
    READY = "Ready"
    SCALING = "Scaling"
    IDLE = "Idle"  # no job uses the pool; reducers kept for scaleDownGracePeriodSeconds


class ReductionServerPoolStatus(StatusModel):
    """What the operator observed and decided. Written only by the operator."""

    observed_generation: int | None = None
    phase: str | None = None
    """One of :class:`ReductionServerPoolPhase`."""
    conditions: list[Condition] = conditions_field()
    replicas: int | None = None
    """Desired reducers (the scale subresource's status.replicas)."""
    ready_replicas: int | None = None
    selector: str | None = None
    """Label selector of the reducer pods, as a string (for the scale subresource)."""
    endpoints: list[str] = Field(default_factory=list, max_length=512)
    """``host:port`` of each ready reducer, for the workers."""
    aggregate_bandwidth_gbps: float | None = None
    """Predicted network bandwidth of all ready reducers together (Gbit/s)."""
    bound_jobs: list[str] = Field(default_factory=list, max_length=1024)
    """TrainingJobs that use the pool."""
    running_jobs: list[str] = Field(default_factory=list, max_length=1024)
    """The bound TrainingJobs whose gangs run now (Admitted or Running): they divide the
    reducers' bandwidth, so each is planned with ``1 / len(runningJobs)`` of it (a job about to
    start counts itself in)."""
    idle_since: dt.datetime | None = None
    """When the last job stopped using the pool (sized pools shrink to zero a grace period
    later)."""


REDUCTION_SERVER_POOL = Resource(
    kind="ReductionServerPool",
    plural="reductionserverpools",
    short_name="rsp",
    description="CPU-only reducer pods that sum gradients for the TrainingJobs that use the "
    "pool (the reduction server design), sized by those jobs unless replicas is fixed.",
    spec=ReductionServerPoolSpec,
    status=ReductionServerPoolStatus,
    phases=ReductionServerPoolPhase,
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase"),
        PrinterColumn(
            "Reason",
            "string",
            condition_reason("Ready"),
            "Why the pool is (not) ready: the Ready condition's reason",
        ),
        PrinterColumn("Replicas", "integer", ".status.replicas", "Desired reducers"),
        PrinterColumn("Ready", "integer", ".status.readyReplicas", "Ready reducers"),
        PrinterColumn(
            "Bandwidth-Gbps",
            "number",
            ".status.aggregateBandwidthGbps",
            "Predicted aggregate bandwidth of the ready reducers",
        ),
        PrinterColumn("Machine", "string", ".spec.machineType", "Reducer machine type", priority=1),
        AGE,
    ),
    scale=True,
)
