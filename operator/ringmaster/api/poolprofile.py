"""PoolProfile: a measurement gang on a pool's idle hosts, so the engine plans that pool on what
its own hosts sustain, and hosts that fall short of their pool are named and avoided (issue 47).
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any, Literal, get_args

from pydantic import Field, field_validator

from ringmaster.api.base import Int, Rule, SpecModel, StatusModel
from ringmaster.api.common import DNS_LABEL, Condition, conditions_field
from ringmaster.api.resource import AGE, PrinterColumn, Resource, condition_reason

Measurement = Literal["Gemm", "Attention", "Hbm", "Step", "AllReduce", "AllToAll"]
"""What the payload measures (docs/pool-profile-payload.md): GEMM rates by shape, BF16 and FP8,
sustained against burst; causal attention forward and backward (FlashAttention 2, cuDNN); HBM
(a device-to-device copy); one training step of a small reference transformer; the all-reduce
and the all-to-all across the profiled hosts, 1 MiB to 4 GiB."""

ALL_MEASUREMENTS: tuple[Measurement, ...] = get_args(Measurement)
COLLECTIVES = ("AllReduce", "AllToAll")
DEFAULT_DEGRADED_PERCENT = 10


class PoolProfileSpec(SpecModel):
    """The pool to profile and how."""

    pool: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    """The node pool, by the name its nodes' pool label carries (as `kubectl get nodes -L
    cloud.google.com/gke-nodepool` shows it)."""
    image: str = Field(min_length=1, max_length=512)
    """Any image with Python, PyTorch and NCCL (the pool's training image works): the payload is
    mounted into it from a ConfigMap, no image of Ringmaster's is needed."""
    measurements: list[Measurement] = Field(
        default_factory=lambda: list(ALL_MEASUREMENTS),
        min_length=1,
        max_length=len(ALL_MEASUREMENTS),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    """What to measure (default: all)."""
    hosts: Int | None = Field(default=None, ge=1, le=4096)
    """How many of the pool's hosts to measure (a sample, the first idle ones); omitted: all."""
    reprofile_interval_hours: Int | None = Field(default=None, ge=1, le=24 * 365)
    """Measure again this long after the last profile (omitted: once)."""
    degraded_threshold_percent: Int = Field(default=DEFAULT_DEGRADED_PERCENT, ge=2, le=50)
    """A host below the pool's median by more than this on any measurement is flagged
    (docs/pool-profiles.md says why 10 by default)."""
    taint_degraded: bool = False
    """Also taint flagged hosts NoSchedule (ringmaster.dev/degraded). Off by default: the label
    alone keeps Ringmaster's gangs off them; other schedulers see the taint only if asked."""
    quick: bool = False
    """A small grid (minutes less per host): for small pools and tests."""
    timeout_seconds: Int = Field(default=1800, ge=60, le=86400)
    """A run whose hosts have not all reported by then ends with what arrived; the hosts
    without a result are named."""

    cel_rules = (
        Rule(
            cel="!has(self.hosts) || self.hosts >= 2 || (has(self.measurements) && "
            "!self.measurements.exists(m, m == 'AllReduce' || m == 'AllToAll'))",
            message="hosts: 1 measures no collective (AllReduce and AllToAll run across hosts): "
            "set hosts to 2 or more, or list measurements without them",
            field_path=".hosts",
            check=lambda s: (
                s.hosts is None or s.hosts >= 2 or not set(COLLECTIVES) & set(s.measurements)
            ),
        ),
    )

    @field_validator("measurements")
    @classmethod
    def _unique(cls, value: list[Measurement]) -> list[Measurement]:
        # The Python twin of the schema's list-type set (the apiserver refuses a repeat).
        repeated = sorted({m for m in value if value.count(m) > 1})
        if repeated:
            raise ValueError(f"Duplicate value: {', '.join(repeated)}")
        return value


class PoolProfilePhase(StrEnum):
    """Values of ``status.phase``."""

    PENDING = "Pending"  # no run yet (the pool unknown, or none of its hosts idle)
    MEASURING = "Measuring"  # a run's pods are admitted on idle hosts and measure
    PROFILED = "Profiled"  # the last run's results are in status and planned on
    FAILED = "Failed"  # the last run measured nothing (the payload's own error in a condition)


class HostOutcome(StatusModel):
    """One host of the last run."""

    node: str = Field(max_length=253)
    result: str = Field(max_length=16)
    """Reported, Failed or Missing (no result before the run ended)."""
    message: str | None = Field(default=None, max_length=2048)
    sustained_bf16_tflops: float | None = None
    hbm_gbps: float | None = Field(default=None, alias="hbmGBps")
    degraded: bool = False


class PoolProfileStatus(StatusModel):
    """What the operator measured and decided. Written only by the operator."""

    observed_generation: int | None = None
    phase: str | None = None
    """One of :class:`PoolProfilePhase`."""
    conditions: list[Condition] = conditions_field()
    run: int = 0
    """The run under way or last finished (each re-profile is a new run)."""
    run_started_at: dt.datetime | None = None
    run_hosts: int | None = None
    """The hosts the run measures (its pods)."""
    run_ended_at: dt.datetime | None = None
    """When the last run ended (with or without results); before runStartedAt: one runs now."""
    profiled_at: dt.datetime | None = None
    """When the last run with results ended: the date plans on this pool name."""
    machine_type: str | None = None
    accelerator: str | None = None
    hosts_profiled: int | None = None
    hosts: list[HostOutcome] = Field(default_factory=list, max_length=4096)
    flagged_hosts: list[str] = Field(default_factory=list, max_length=4096)
    """Hosts below the pool by more than the threshold, labelled ringmaster.dev/degraded."""
    flagged: int | None = None
    """How many (for the printer column)."""
    measured: dict[str, Any] | None = None
    """The pool's medians against the catalog's figures, and each flagged host's numbers
    (docs/pool-profiles.md)."""
    sustained_bf16_tflops: float | None = None
    catalog_sustained_bf16_tflops: float | None = None


POOL_PROFILE = Resource(
    kind="PoolProfile",
    plural="poolprofiles",
    short_name="ppf",
    description="A measurement of one node pool on its own idle hosts (GEMMs, attention, HBM, a "
    "reference step, collectives): the engine plans the pool on it, and hosts that fall short "
    "of their pool are labelled and avoided.",
    spec=PoolProfileSpec,
    status=PoolProfileStatus,
    phases=PoolProfilePhase,
    printer_columns=(
        PrinterColumn("Pool", "string", ".spec.pool", "The profiled node pool"),
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase"),
        PrinterColumn(
            "Reason", "string", condition_reason("Profiled"), "The Profiled condition's reason"
        ),
        PrinterColumn("Hosts", "integer", ".status.hostsProfiled", "Hosts with a result"),
        PrinterColumn(
            "BF16-TFLOPS",
            "number",
            ".status.sustainedBf16Tflops",
            "Sustained BF16 GEMM rate, the pool's median host",
        ),
        PrinterColumn(
            "Catalog-TFLOPS",
            "number",
            ".status.catalogSustainedBf16Tflops",
            "The same from the catalog's ceilings",
        ),
        PrinterColumn(
            "Flagged", "integer", ".status.flagged", "Hosts below the pool (labelled degraded)"
        ),
        PrinterColumn("Profiled", "date", ".status.profiledAt", "When the last run ended"),
        AGE,
    ),
)
