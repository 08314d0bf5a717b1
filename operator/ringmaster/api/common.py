"""Pieces shared by the three resources: the pod template and status conditions."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from ringmaster.api.base import Int, SpecModel, StatusModel
from ringmaster.api.quantity import IntOrString

# Kubernetes names: a DNS-1123 label (pods, services) and a DNS-1123 subdomain (most objects).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# GCE machine type names: a2-highgpu-8g, n1-highcpu-16, ct4p-hightpu-4t.
MACHINE_TYPE = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"

MachineType = Annotated[str, Field(pattern=MACHINE_TYPE, max_length=63)]


class EnvVar(SpecModel):
    """An environment variable of the main container (as in a Pod's ``env``)."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str | None = Field(default=None, max_length=32768)
    value_from: dict[str, Any] | None = None
    """A Pod ``valueFrom`` source (secretKeyRef, configMapKeyRef, fieldRef...), passed through."""


class ResourceRequirements(SpecModel):
    """CPU and memory of the main container. Accelerators are added by the operator from
    ``spec.accelerator``; do not request them here."""

    # Map keys are not constrained: a structural schema cannot say anything about them, and
    # parse_manifest must not refuse what the apiserver accepts.
    requests: dict[str, IntOrString] | None = Field(default=None, max_length=16)
    limits: dict[str, IntOrString] | None = Field(default=None, max_length=16)


class PodMetadata(SpecModel):
    """Labels and annotations copied onto every pod."""

    labels: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(
        default=None, max_length=64
    )
    annotations: dict[str, Annotated[str, Field(max_length=65536)]] | None = Field(
        default=None, max_length=64
    )


class PodTemplate(SpecModel):
    """The main container of every pod the operator creates for this resource. The operator
    adds the node selector, tolerations, accelerator requests and its own environment."""

    metadata: PodMetadata | None = None
    image: str = Field(min_length=1, max_length=512)
    """Container image (required)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=256)
    env: list[EnvVar] | None = Field(
        default=None,
        max_length=128,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    resources: ResourceRequirements | None = None
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    """A PriorityClass for the pods; for a TrainingJob it also orders admission (higher value
    first, then older jobs). Omitted: the cluster's globalDefault class, or 0."""

    @field_validator("env")
    @classmethod
    def _unique_env_names(cls, env: list[EnvVar] | None) -> list[EnvVar] | None:
        # env is a list-map keyed by name: the apiserver refuses a repeated name.
        names = [e.name for e in env or []]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"Duplicate value: name {', '.join(repeated)}")
        return env


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    """A condition in the shape of ``metav1.Condition`` (the Kubernetes API conventions)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    """CamelCase kind of condition, e.g. ``Ready``, ``Schedulable``, ``Planned``."""
    status: ConditionStatus
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    """CamelCase, machine-readable reason for the last transition."""
    message: str = Field(default="", max_length=32768)
    """Human-readable details."""
    last_transition_time: dt.datetime
    """When ``status`` last changed (not when the condition was last written)."""
    observed_generation: Int | None = Field(default=None, ge=0)
    """The ``metadata.generation`` the condition was computed from."""


def set_condition(
    conditions: list[Condition],
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: dt.datetime | None = None,
) -> list[Condition]:
    """A new list with condition ``type`` set; ``lastTransitionTime`` moves only when the status
    changes (as the API conventions ask), and the order of the other conditions is kept."""
    now = now or dt.datetime.now(dt.UTC).replace(microsecond=0)
    previous = next((c for c in conditions if c.type == type), None)
    changed_at = (
        previous.last_transition_time if previous is not None and previous.status == status else now
    )
    new = Condition(
        type=type,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=changed_at,
        observed_generation=observed_generation,
    )
    if previous is None:
        return [*conditions, new]
    return [new if c.type == type else c for c in conditions]


def find_condition(conditions: list[Condition], type: str) -> Condition | None:
    return next((c for c in conditions if c.type == type), None)


def conditions_field() -> Any:
    """The ``conditions`` field of a status: a list keyed by ``type`` (server-side apply merges
    by type)."""
    return Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
