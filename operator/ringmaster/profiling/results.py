"""The result a PoolProfile's measurement pod posts, and what the operator accepts of it.

    POST /apis/ringmaster.dev/v1alpha1/namespaces/{namespace}/poolprofiles/{name}/results
    Authorization: Bearer <the pod's projected token, audience ringmaster.dev/poolprofiles/NS/NAME>

The body is JSON, camelCase as the Kubernetes API is. One host's result (every pod measures the
host it runs on; rank 0 also posts the pool's collectives)::

    {"version": 1, "node": "gpu-node-7", "time": "2026-11-26T01:00:00Z",
     "device": {"name": "NVIDIA H100 80GB HBM3", "count": 8, "memoryBytes": 85520809984,
                "powerLimitWatts": 700.0, "driver": "580.159.04", "torch": "2.11.0+cu130",
                "cuda": "13.0"},
     "gemm": [{"precision": "bf16", "m": 8192, "n": 8192, "k": 8192, "seconds": 0.0016,
               "tflops": 687.2}, ...],
     "sustainedTflops": {"bf16": 702.5, "fp8": 1281.0},
     "burstTflops": {"bf16": 771.0, "fp8": 1419.0},
     "attention": [{"kernel": "flash2", "direction": "forward", "sequence": 4096, "headDim": 128,
                    "heads": 32, "tflops": 331.0}, ...],
     "hbmGBps": 3010.0,
     "referenceStep": {"parameters": 124000000, "tokens": 16384, "seconds": 0.081},
     "collectives": [{"op": "all_reduce", "bytes": 1073741824, "ranks": 16, "hosts": 2,
                      "busGBps": 41.2}, ...],
     "skipped": ["fp8: this GPU has no FP8 tensor cores"],
     "failure": null}

Rates are what was achieved, in the units the engine's ceilings use: TFLOP/s (dense FLOPs, 2 M N K
for a GEMM, causal FLOPs for attention), GB/s of HBM counting bytes read plus written (a
device-to-device copy, as ``calibration/measured/h100-sxm-ops.yaml`` counts it), NCCL's bus
bandwidth for collectives (nccl-tests' busbw). ``failure`` is set, and nothing else measured,
when the payload could not run at all (no PyTorch in the image, no GPU visible): the operator
surfaces it as a condition.

Bounds keep a bad or hostile body from writing nonsense into status: a rate beyond any chip of
2026 (20,000 TFLOP/s, 20,000 GB/s of HBM, 5,000 GB/s of bus bandwidth) is refused, not stored.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

RESULT_VERSION = 1
MAX_NODE_NAME = 253  # a DNS name
MAX_POINTS = 512
MAX_BODY_BYTES = 512 * 1024
"""The largest result the schema admits (512 points of each list, ~100 bytes each) is well under
this; refuse more before reading it."""
MAX_TFLOPS = 20_000.0  # above a B200's dense FP4 (10 PFLOP/s) with room; more is a unit error
MAX_HBM_GBPS = 20_000.0  # a B200 reaches 8,000 GB/s on its datasheet
MAX_BUS_GBPS = 5_000.0  # NVLink 5 is 900 GB/s per direction per GPU
FUTURE_SKEW_SECONDS = 300.0

Precision = Literal["bf16", "fp16", "fp8"]
"""GEMM precisions the payload measures (fp16 where a chip has no bf16, e.g. a T4)."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


class DeviceInfo(_Model):
    """What the host's accelerators say they are (torch.cuda and nvidia-smi / amd-smi)."""

    name: str = Field(min_length=1, max_length=128)
    count: int = Field(ge=1, le=128)
    memory_bytes: int = Field(ge=0, le=2**44)
    power_limit_watts: float | None = Field(default=None, gt=0, le=5000)
    driver: str | None = Field(default=None, max_length=64)
    torch: str = Field(min_length=1, max_length=64)
    cuda: str | None = Field(default=None, max_length=32)

    _check = field_validator("power_limit_watts")(_finite)


class GemmPoint(_Model):
    """One GEMM shape: y (m x n) = x (m x k) @ W^T, its median time and rate."""

    precision: Precision
    m: int = Field(ge=1, le=2**20)
    n: int = Field(ge=1, le=2**20)
    k: int = Field(ge=1, le=2**20)
    seconds: float = Field(gt=0, le=60)
    tflops: float = Field(gt=0, le=MAX_TFLOPS)

    _check = field_validator("seconds", "tflops")(_finite)


class AttentionPoint(_Model):
    """One causal attention call (bf16), forward or backward, at ``sequence`` x ``heads``."""

    kernel: Literal["flash2", "cudnn", "efficient", "math"]
    direction: Literal["forward", "backward"]
    sequence: int = Field(ge=1, le=2**22)
    head_dim: int = Field(ge=8, le=1024)
    heads: int = Field(ge=1, le=1024)
    tflops: float = Field(gt=0, le=MAX_TFLOPS)

    _check = field_validator("tflops")(_finite)


class ReferenceStep(_Model):
    """One training step (forward, backward, AdamW) of a small reference transformer."""

    parameters: int = Field(ge=1, le=10**12)
    tokens: int = Field(ge=1, le=10**9)
    seconds: float = Field(gt=0, le=3600)

    _check = field_validator("seconds")(_finite)


class CollectivePoint(_Model):
    """One collective over the profile's ranks (every GPU of the sampled hosts)."""

    op: Literal["all_reduce", "all_to_all", "all_gather", "reduce_scatter"]
    bytes: int = Field(ge=1, le=2**40)
    ranks: int = Field(ge=2, le=1_000_000)
    hosts: int = Field(ge=1, le=100_000)
    bus_gbps: float = Field(gt=0, le=MAX_BUS_GBPS, alias="busGBps")

    _check = field_validator("bus_gbps")(_finite)

    @model_validator(mode="after")
    def _consistent(self) -> CollectivePoint:
        if self.hosts > self.ranks:
            raise ValueError(f"hosts {self.hosts} is more than ranks {self.ranks}")
        return self


class HostResult(_Model):
    """What one measurement pod measured on its host."""

    version: Literal[1]
    node: str = Field(min_length=1, max_length=MAX_NODE_NAME)
    time: dt.datetime | None = None
    device: DeviceInfo | None = None
    gemm: list[GemmPoint] = Field(default_factory=list, max_length=MAX_POINTS)
    sustained_tflops: dict[Precision, float] = Field(default_factory=dict)
    burst_tflops: dict[Precision, float] = Field(default_factory=dict)
    attention: list[AttentionPoint] = Field(default_factory=list, max_length=MAX_POINTS)
    hbm_gbps: float | None = Field(default=None, gt=0, le=MAX_HBM_GBPS, alias="hbmGBps")
    reference_step: ReferenceStep | None = None
    collectives: list[CollectivePoint] = Field(default_factory=list, max_length=MAX_POINTS)
    skipped: list[str] = Field(default_factory=list, max_length=64)
    failure: str | None = Field(default=None, min_length=1, max_length=2048)

    _check = field_validator("hbm_gbps")(_finite)

    @field_validator("sustained_tflops", "burst_tflops")
    @classmethod
    def _rates(cls, value: dict[str, float]) -> dict[str, float]:
        for precision, rate in value.items():
            if not math.isfinite(rate) or not 0 < rate <= MAX_TFLOPS:
                raise ValueError(f"{precision}: {rate} is not a rate in (0, {MAX_TFLOPS:.0f}]")
        return value

    @field_validator("skipped")
    @classmethod
    def _short(cls, value: list[str]) -> list[str]:
        for item in value:
            if not 0 < len(item) <= 512:
                raise ValueError("each entry must be 1-512 characters")
        return value

    @field_validator("time")
    @classmethod
    def _aware(cls, value: dt.datetime | None) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must carry a time zone (RFC 3339, e.g. 2026-01-01T12:00:00Z)")
        return value

    @model_validator(mode="after")
    def _failure_alone(self) -> HostResult:
        measured = (
            self.gemm
            or self.sustained_tflops
            or self.attention
            or self.hbm_gbps is not None
            or self.reference_step is not None
            or self.collectives
        )
        if self.failure is not None and measured:
            raise ValueError("a failed result carries no measurements")
        if self.failure is None and self.device is None:
            raise ValueError("device is required unless failure says why nothing was measured")
        return self


class ResultRefused(ValueError):
    """A body the operator does not accept; the message says why (it goes back as the 400)."""


def parse_result(body: Any, now: dt.datetime | None = None) -> HostResult:
    """Validate one posted result (the request's bytes, or the parsed JSON); ResultRefused names
    the first problem."""
    if isinstance(body, bytes | str):
        if len(body) > MAX_BODY_BYTES:
            raise ResultRefused(f"body of {len(body)} bytes is over {MAX_BODY_BYTES}")
        try:
            body = json.loads(body)
        except ValueError as error:
            raise ResultRefused(f"body: not JSON ({error})") from None
    try:
        result = HostResult.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ResultRefused(f"{where}: {first.get('msg', 'invalid')}") from None
    if result.time is not None:
        now = now or dt.datetime.now(dt.UTC)
        if (result.time - now).total_seconds() > FUTURE_SKEW_SECONDS:
            raise ResultRefused(f"time {result.time.isoformat()} is in the future")
    return result
