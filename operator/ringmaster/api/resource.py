"""A kind's description beyond its schema: names, printer columns, subresources."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from ringmaster.api.base import Rule, SpecModel, StatusModel

CATEGORIES = ("ringmaster", "ml")


@dataclass(frozen=True)
class PrinterColumn:
    """One column of ``kubectl get`` (priority 1: only with ``-o wide``)."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str
    priority: int = 0


@dataclass(frozen=True)
class SpecChange:
    """When one top-level field of a spec may change once the object exists, and why: the rule a
    user (or a GitOps tool) meets when editing a live object, stated once and rendered into
    docs/api.md and docs/bad-input.md."""

    field: str
    """The camelCase field of ``spec``."""
    when: str
    """``any time``, ``never``, or the condition under which it may change."""
    why: str


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    short_name: str
    description: str
    spec: type[SpecModel]
    status: type[StatusModel]
    printer_columns: tuple[PrinterColumn, ...]
    phases: type[StrEnum]
    """The values of status.phase, documented (the schema keeps phase a free string)."""
    scale: bool = False
    """A scale subresource on .spec.replicas / .status.replicas / .status.selector."""
    rules: tuple[Rule, ...] = ()
    """Rules on the whole object, at the schema's root: CEL's ``self`` is the object, so a rule
    can read ``status`` (e.g. what may not change while a gang is admitted). Their Python twins
    get :class:`~ringmaster.api.base.StoredObject` s."""
    spec_changes: tuple[SpecChange, ...] = ()
    """What may change in a live object's spec, field by field (documentation; the rules above
    and the models' own ``cel_rules`` enforce it)."""

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


AGE = PrinterColumn(
    "Age", "date", ".metadata.creationTimestamp", "Time since the object was created"
)


def condition_reason(condition_type: str) -> str:
    """The JSONPath of one condition's reason, for a printer column: why a resource is where it
    is (``InsufficientCapacity``, ``NoMatchingPool``) without ``-o yaml`` or events."""
    return f'.status.conditions[?(@.type=="{condition_type}")].reason'
