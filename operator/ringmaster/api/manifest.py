"""Validation of a whole object as a user writes it (apiVersion, kind, metadata, spec), with the
same verdict as the apiserver: the models carry the schema's types and bounds, and their rules
carry the CRD's CEL. Errors name the field in the manifest's own camelCase path, as the apiserver
does: ``spec.accelerator.perWorker: must be >= 1``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ringmaster.api.base import API_VERSION, RULE_ERROR_TYPE, SpecModel, StatusModel, StoredObject
from ringmaster.api.common import DNS_LABEL, DNS_SUBDOMAIN
from ringmaster.api.inferenceendpoint import INFERENCE_ENDPOINT, InferenceEndpointSpec
from ringmaster.api.poolprofile import POOL_PROFILE, PoolProfileSpec
from ringmaster.api.reductionserverpool import REDUCTION_SERVER_POOL, ReductionServerPoolSpec
from ringmaster.api.resource import Resource
from ringmaster.api.trainingjob import TRAINING_JOB, TrainingJobSpec

RESOURCES: dict[str, Resource] = {
    r.kind: r for r in (TRAINING_JOB, REDUCTION_SERVER_POOL, INFERENCE_ENDPOINT, POOL_PROFILE)
}
"""The kinds of the API, by kind."""

AnySpec = TrainingJobSpec | InferenceEndpointSpec | ReductionServerPoolSpec | PoolProfileSpec

_TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")


@dataclass(frozen=True)
class FieldError:
    path: str
    """Dotted camelCase path from the object's root: ``spec.accelerator.perWorker``."""
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ManifestError(ValueError):
    """A manifest the API refuses; ``errors`` lists every offending field."""

    def __init__(self, errors: Sequence[FieldError], source: str | None = None) -> None:
        self.errors = list(errors)
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + "; ".join(str(e) for e in self.errors))


@dataclass(frozen=True)
class ParsedManifest:
    kind: str
    name: str
    namespace: str | None
    spec: AnySpec
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def resource(self) -> Resource:
        return RESOURCES[self.kind]


def parse_manifest(doc: Any) -> ParsedManifest:
    """Validate one object and return its kind, name, namespace and validated spec.

    Raises :class:`ManifestError` naming every offending field. Only camelCase field names are
    accepted, as in the apiserver (``per_worker`` is an unknown field there).
    """
    if not isinstance(doc, dict):
        raise ManifestError([FieldError("<root>", "must be an object (a YAML mapping)")])
    errors: list[FieldError] = []
    errors += [FieldError(k, "unknown field") for k in doc if k not in _TOP_LEVEL]

    if doc.get("apiVersion") != API_VERSION:
        errors.append(FieldError("apiVersion", f'must be "{API_VERSION}"'))
    kind = doc.get("kind")
    resource = RESOURCES.get(kind) if isinstance(kind, str) else None
    if resource is None:
        supported = ", ".join(f'"{k}"' for k in RESOURCES)
        errors.append(
            FieldError("kind", f"unsupported value {kind!r}: supported values: {supported}")
        )

    name, namespace, metadata = _check_metadata(doc.get("metadata"), errors)

    spec: AnySpec | None = None
    if "spec" not in doc:
        errors.append(FieldError("spec", "Required value"))
    elif resource is not None:
        try:
            spec = _validate_spec(resource.spec, doc["spec"])
        except ValidationError as exc:
            errors += [_field_error(e, prefix=("spec",)) for e in exc.errors()]

    if errors or spec is None or resource is None or name is None:
        raise ManifestError(errors, source=_describe(kind, name))
    return ParsedManifest(resource.kind, name, namespace, spec, metadata)


def validate_update(old: Any, new: Any) -> ParsedManifest:
    """Validate ``new`` as an update of ``old``: everything parse_manifest checks, plus the
    transition rules (the CRD's ``oldSelf`` rules, e.g. an immutable accelerator, and the rules
    that read ``old``'s status, e.g. no machineType edit while the gang is admitted)."""
    before, after = parse_manifest(old), parse_manifest(new)
    if (before.kind, before.name, before.namespace) != (after.kind, after.name, after.namespace):
        raise ManifestError([FieldError("metadata.name", "old and new are different objects")])
    errors = list(_transition_errors(before.spec, after.spec, "spec"))
    # The object's own rules read status: the stored one, on both sides (an update of the main
    # resource cannot change status).
    status = _stored_status(before.resource.status, old)
    old_object, new_object = StoredObject(before.spec, status), StoredObject(after.spec, status)
    for rule in before.resource.rules:
        if rule.check_update is not None and not rule.check_update(old_object, new_object):
            errors.append(FieldError((rule.field_path or "").lstrip("."), rule.message))
    if errors:
        raise ManifestError(errors, source=_describe(after.kind, after.name))
    return after


class KubectlYamlLoader(yaml.SafeLoader):
    """YAML read as kubectl reads it, so `ringmaster plan` sees what the apiserver will:
    PyYAML reads ``3.4e8`` as a string (YAML 1.1 wants ``3.4e+8``), kubectl a number; PyYAML
    keeps the last of two equal keys in a mapping, kubectl refuses the file (``mapping key
    "kind" already defined at line 2``), as this loader does. A merge key's (``<<``) values
    may still be overridden: that is what a merge is for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base constructor says so
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f'mapping key "{key}" already defined at line {first.start_mark.line + 1}',
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


KubectlYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_manifests(text: str, source: str | None = None) -> list[ParsedManifest]:
    """Parse every document of a YAML stream (empty documents are skipped)."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=KubectlYamlLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError([FieldError("<yaml>", str(exc))], source=source) from exc
    parsed = []
    for doc in docs:
        try:
            parsed.append(parse_manifest(doc))
        except ManifestError as exc:
            raise ManifestError(exc.errors, source=source or exc.source) from exc
    return parsed


def _stored_status(model: type[StatusModel], doc: dict[str, Any]) -> StatusModel:
    """The status of a stored object; one this operator cannot read counts as empty (the
    apiserver judges it by the CRD alone)."""
    try:
        return model.model_validate(doc.get("status") or {})
    except ValidationError:
        return model()


def validate_spec(kind: str, spec: Any) -> AnySpec:
    """``spec`` (camelCase, as applied) of ``kind`` validated as the apiserver would, or a
    ManifestError naming every offending field from ``spec.``: a spec the CLI derives from a
    user's (a sweep's point) is judged as the user's own would be."""
    try:
        return _validate_spec(RESOURCES[kind].spec, spec)
    except ValidationError as exc:
        raise ManifestError([_field_error(e, prefix=("spec",)) for e in exc.errors()]) from None


def _validate_spec(model: type[SpecModel], spec: Any) -> AnySpec:
    # by_name=False: a snake_case key is an unknown field, as it is for the apiserver.
    validated = model.model_validate(spec, by_alias=True, by_name=False)
    assert isinstance(
        validated,
        TrainingJobSpec | InferenceEndpointSpec | ReductionServerPoolSpec | PoolProfileSpec,
    )
    return validated


def _check_metadata(
    metadata: Any, errors: list[FieldError]
) -> tuple[str | None, str | None, dict[str, Any]]:
    if not isinstance(metadata, dict):
        errors.append(FieldError("metadata.name", "Required value"))
        return None, None, {}
    name = metadata.get("name")
    if name is None:
        errors.append(FieldError("metadata.name", "Required value"))
    elif not isinstance(name, str) or len(name) > 253 or not re.match(DNS_SUBDOMAIN, name):
        errors.append(
            FieldError(
                "metadata.name",
                "must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.'; at most 253)",
            )
        )
        name = None
    namespace = metadata.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str) or len(namespace) > 63 or not re.match(DNS_LABEL, namespace)
    ):
        errors.append(FieldError("metadata.namespace", "must be a lowercase RFC 1123 label"))
        namespace = None
    return name, namespace, metadata


def _transition_errors(old: SpecModel, new: SpecModel, path: str) -> Iterable[FieldError]:
    for rule in type(new).cel_rules:
        if rule.check_update is not None and not rule.check_update(old, new):
            yield FieldError(path + (rule.field_path or ""), rule.message)
    for name, info in type(new).model_fields.items():
        old_value, new_value = getattr(old, name), getattr(new, name)
        if isinstance(new_value, SpecModel) and type(old_value) is type(new_value):
            yield from _transition_errors(old_value, new_value, f"{path}.{info.alias or name}")


def _describe(kind: Any, name: str | None) -> str | None:
    if isinstance(kind, str) and name:
        return f"{kind} {name}"
    return None


def _path(loc: Sequence[int | str], prefix: Sequence[str]) -> str:
    out = ".".join(prefix)
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _field_error(error: ErrorDetails, prefix: Sequence[str]) -> FieldError:
    """A pydantic error in the words (and at the path) the apiserver would use."""
    kind, ctx = error["type"], error.get("ctx", {})
    path = _path(error["loc"], prefix)
    if kind == RULE_ERROR_TYPE:
        return FieldError(path + str(ctx.get("field_path", "")), str(ctx["message"]))
    return FieldError(path, _MESSAGES.get(kind, _default_message)(ctx, error))


def _default_message(ctx: dict[str, Any], error: ErrorDetails) -> str:
    return error["msg"]


def _literal(ctx: dict[str, Any], error: ErrorDetails) -> str:
    expected = str(ctx.get("expected", "")).replace("'", '"').replace(" or ", ", ")
    return f"unsupported value {error['input']!r}: supported values: {expected}"


_MESSAGES: dict[str, Any] = {
    "missing": lambda ctx, e: "Required value",
    "extra_forbidden": lambda ctx, e: "unknown field",
    "greater_than_equal": lambda ctx, e: f"must be >= {ctx['ge']}",
    "greater_than": lambda ctx, e: f"must be > {ctx['gt']}",
    "less_than_equal": lambda ctx, e: f"must be <= {ctx['le']}",
    "less_than": lambda ctx, e: f"must be < {ctx['lt']}",
    "literal_error": _literal,
    "string_too_short": lambda ctx, e: (
        "must not be empty"
        if ctx["min_length"] == 1
        else f"must be at least {ctx['min_length']} characters"
    ),
    "string_too_long": lambda ctx, e: f"must be at most {ctx['max_length']} characters",
    "string_pattern_mismatch": lambda ctx, e: f"must match {ctx['pattern']}",
    "too_long": lambda ctx, e: f"must have at most {ctx['max_length']} items",
    "int_type": lambda ctx, e: "must be of type integer",
    "int_from_float": lambda ctx, e: "must be of type integer",
    "float_type": lambda ctx, e: "must be of type number",
    "bool_type": lambda ctx, e: "must be of type boolean",
    "string_type": lambda ctx, e: "must be of type string",
    "model_type": lambda ctx, e: "must be of type object",
    "dict_type": lambda ctx, e: "must be of type object",
    "list_type": lambda ctx, e: "must be of type array",
    "value_error": lambda ctx, e: str(ctx.get("error", e["msg"])),
}
