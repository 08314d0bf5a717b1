"""A kind's description beyond its schema: names, printer columns, subresources."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from ringmaster.api.base import SpecModel, StatusModel

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

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


AGE = PrinterColumn(
    "Age", "date", ".metadata.creationTimestamp", "Time since the object was created"
)
