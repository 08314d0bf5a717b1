"""The progress report a worker posts, and what the operator accepts of it.

The body is JSON, camelCase as the Kubernetes API is; everything but ``step`` is optional:

    {"step": 1200, "totalSteps": 10000, "stepSeconds": 0.84,
     "ranks": [{"rank": 0, "host": "node-a", "stepSeconds": 0.84}, ...],
     "tokensPerSecond": 412000.0, "samplesPerSecond": 96.0, "time": "2025-01-01T12:00:00Z"}

``stepSeconds`` is the reporter's recent step time (rank 0 for the gang); ``ranks`` carries one
time per rank (or per host) when the script measures them, which is what finds a straggler.
Bounds keep one bad or hostile body from costing memory or writing nonsense into status.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

MAX_RANKS = 4096
MAX_HOST_NAME = 253  # a DNS name
MAX_BODY_BYTES = 1536 * 1024
"""The largest report the schema admits, 4096 ranks each with a 253-character host name, is
about 1.2 MiB of JSON (a rank's keys and numbers add ~60 bytes): refuse more. 256 KiB, the
bound before, refused 4096-rank reports from hosts with GKE-length names."""
MAX_STEP_SECONDS = 7 * 24 * 3600.0
"""A step longer than a week is a unit error (milliseconds sent as seconds), not a step."""
FUTURE_SKEW_SECONDS = 300.0
"""A report stamped this far after the operator's clock is refused (clocks drift; not by 5 min)."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _finite(value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


class RankTiming(_Model):
    """One rank's (or host's) recent step time."""

    rank: int = Field(ge=0, le=1_000_000)
    host: str | None = Field(default=None, min_length=1, max_length=MAX_HOST_NAME)
    step_seconds: float = Field(gt=0, le=MAX_STEP_SECONDS)

    _check = field_validator("step_seconds")(_finite)


class ProgressReport(_Model):
    """One progress report from a job's worker."""

    step: int = Field(ge=0, le=10**12)
    total_steps: int | None = Field(default=None, ge=1, le=10**12)
    step_seconds: float | None = Field(default=None, gt=0, le=MAX_STEP_SECONDS)
    ranks: list[RankTiming] | None = Field(default=None, max_length=MAX_RANKS)
    tokens_per_second: float | None = Field(default=None, ge=0, le=1e15)
    samples_per_second: float | None = Field(default=None, ge=0, le=1e12)
    time: dt.datetime | None = None

    _check = field_validator("step_seconds", "tokens_per_second", "samples_per_second")(_finite)

    @field_validator("time")
    @classmethod
    def _aware(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must carry a time zone (RFC 3339, e.g. 2025-01-01T12:00:00Z)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ProgressReport:
        if self.total_steps is not None and self.step > self.total_steps:
            raise ValueError(f"step {self.step} is beyond totalSteps {self.total_steps}")
        if self.ranks is not None and len({r.rank for r in self.ranks}) != len(self.ranks):
            raise ValueError("ranks: each rank at most once")
        return self

    def reporter_step_seconds(self) -> float | None:
        """The gang's step time as this report gives it: its own figure, else the slowest rank
        (a synchronous step waits for the last rank)."""
        if self.step_seconds is not None:
            return self.step_seconds
        if self.ranks:
            return max(r.step_seconds for r in self.ranks)
        return None


class ReportRefused(ValueError):
    """A body the endpoint answers with 400: the message says what is wrong."""


def parse_report(body: bytes, now: dt.datetime) -> ProgressReport:
    """The report in ``body``, stamped with ``now`` when it carries no time; ReportRefused with
    a message for the client otherwise."""
    if len(body) > MAX_BODY_BYTES:
        raise ReportRefused(f"body of {len(body)} bytes is over {MAX_BODY_BYTES}")
    try:
        report = ProgressReport.model_validate_json(body)
    except ValidationError as error:
        raise ReportRefused(_describe(error)) from None
    if report.time is None:
        return report.model_copy(update={"time": now})
    if (report.time - now).total_seconds() > FUTURE_SKEW_SECONDS:
        raise ReportRefused(f"time {report.time.isoformat()} is in the future")
    return report


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "body"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def report_json(report: ProgressReport) -> dict[str, Any]:
    return report.model_dump(mode="json", by_alias=True, exclude_none=True)
