"""What every API model shares: the group and version, camelCase aliases, strictness, and CEL
rules that live next to the model they constrain.

A :class:`Rule` is written once and used twice: the CRD generator copies its CEL expression into
the schema's ``x-kubernetes-validations`` (the apiserver enforces it at admission), and the
model's validator runs its Python twin, so ``parse_manifest`` refuses exactly what the apiserver
refuses, with the same message, at the same field path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

GROUP = "ringmaster.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


def whole_number(value: Any) -> Any:
    """8.0 -> 8. The apiserver takes a whole-valued JSON number as an integer (YAML ``3.4e8``
    is one), so parse_manifest must too; 8.5, "8" and true stay errors."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(whole_number)]
"""An integer field of a spec: strict, except that whole-valued numbers count as integers."""

RuleReason = Literal[
    "FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"
]

# The error type pydantic reports for a failed rule; manifest.py turns it into a field path.
RULE_ERROR_TYPE = "ringmaster_rule"


@dataclass(frozen=True)
class Rule:
    """A cross-field rule: a CEL expression for the apiserver and its Python twin.

    ``field_path`` (CEL's ``fieldPath``, relative to the model, e.g. ``.perWorker``) is where the
    error is reported, so both the apiserver and ``parse_manifest`` name the offending field.
    Transition rules (those that read ``oldSelf``) run only on update: ``check_update`` gets the
    old and the new model. A rule on a whole object (a :class:`~ringmaster.api.resource.Resource`'s
    ``rules``, at the schema's root, where CEL also sees ``status``) gets :class:`StoredObject` s.
    """

    cel: str
    message: str
    field_path: str | None = None
    reason: RuleReason | None = None
    check: Callable[[Any], bool] | None = None
    check_update: Callable[[Any, Any], bool] | None = None
    message_expression: str | None = None
    """CEL building a message from the object (``messageExpression``); ``message`` remains the
    fallback. Its Python twin is ``message_for``."""
    message_for: Callable[[Any], str] | None = None

    def message_about(self, model: Any) -> str:
        return self.message_for(model) if self.message_for is not None else self.message

    @property
    def is_transition(self) -> bool:
        return "oldSelf" in self.cel

    def to_crd(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.cel, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class StoredObject:
    """What a rule on a whole object sees in Python: the validated spec and the stored status.

    On an update of the main resource the apiserver keeps the stored status (the ``status``
    subresource is the only way to write it), so old and new carry the same status."""

    spec: Any
    status: Any


def _add_cel_rules(schema: dict[str, Any], cls: type[Any]) -> None:
    rules: tuple[Rule, ...] = getattr(cls, "cel_rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.to_crd() for rule in rules]


class ApiModel(BaseModel):
    """camelCase on the wire (``perWorker``), snake_case in Python (``per_worker``)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        json_schema_extra=_add_cel_rules,
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = ()

    def to_k8s(self) -> dict[str, Any]:
        """The object as it goes to the apiserver: camelCase, JSON types, unset fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SpecModel(ApiModel):
    """A part of a spec: the user's. Unknown fields and loose types are errors, as they are for
    the apiserver under kubectl's default strict field validation ("8" is not an integer)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="after")
    def _check_cel_rules(self) -> Self:
        for rule in type(self).cel_rules:
            if rule.check is not None and not rule.check(self):
                raise PydanticCustomError(
                    RULE_ERROR_TYPE,
                    "{message}",
                    {"message": rule.message_about(self), "field_path": rule.field_path or ""},
                )
        return self


class StatusModel(ApiModel):
    """A part of a status: the operator's. Lenient on read (fields an older or newer operator
    wrote are ignored), so a status read back from the cluster always parses."""

    model_config = ConfigDict(extra="ignore")
