"""From a pydantic model to a structural OpenAPI v3 schema, as a CRD needs it.

pydantic writes JSON Schema (2020-12); the apiserver wants OpenAPI v3.0 in its structural form:
every node typed, no ``$ref``, no ``anyOf`` except the int-or-string pattern, no
``additionalProperties: false`` (unknown fields are pruned, or refused under strict field
validation). This module does exactly that translation and nothing else; everything the CRD
says comes from the models.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

# Keys a structural schema node may carry (anything else pydantic emits, e.g. title, is dropped).
_KEEP = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "anyOf",
    "properties",
    "additionalProperties",
    "items",
    "required",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
)


# Keys pydantic writes that mean nothing to the apiserver.
_DROP = {"title"}


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (camelCase property names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a ``$ref`` (or pydantic's ``allOf: [{$ref}]``), keeping the referring node's own
    keys (a field's description and default win over the model's)."""
    node = dict(node)
    if "allOf" in node and len(node["allOf"]) == 1:
        node.update(node.pop("allOf")[0])
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").split("/")[-1]])
        target.update(node)
        node = target
    return node


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        # Optional[X] is anyOf [X, null]: absent in Kubernetes, never null.
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"not structural: a union of {branches}")
        outer = {k: v for k, v in node.items() if k != "default" or v is not None}
        node = _resolve(branches[0], defs)
        node.update(outer)
    if node.get("default", 0) is None:
        del node["default"]
    if "const" in node:
        # A one-value Literal (``type: Transformer``): OpenAPI 3.0 has no const; a one-value enum.
        node["enum"] = [node.pop("const")]

    # pydantic leaves a constraint it applies around a validator function (``Int | None``) in its
    # own words; say it in JSON Schema's.
    for raw, bound, strict_bound in (
        ("ge", "minimum", False),
        ("le", "maximum", False),
        ("gt", "minimum", True),
        ("lt", "maximum", True),
    ):
        if raw in node:
            node[bound] = node.pop(raw)
            if strict_bound:
                node["exclusiveMinimum" if bound == "minimum" else "exclusiveMaximum"] = True
    # JSON Schema's numeric exclusive bounds are OpenAPI 3.0's booleans.
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(exclusive), int | float) and not isinstance(node[exclusive], bool):
            node[bound] = node[exclusive]
            node[exclusive] = True

    if "properties" in node:
        node["type"] = "object"
        node["properties"] = {k: _convert(v, defs) for k, v in node["properties"].items()}
        extra = node.pop("additionalProperties", False)
        if extra is True:
            # A model with extra="allow" (an engine plan): keep what it does not declare.
            node["x-kubernetes-preserve-unknown-fields"] = True
    elif node.get("type") == "object":
        values = node.get("additionalProperties", True)
        if values is True or values == {}:
            node.pop("additionalProperties", None)
            node["x-kubernetes-preserve-unknown-fields"] = True
        else:
            node["additionalProperties"] = _convert(values, defs)
    if node.get("type") == "array":
        node["items"] = _convert(node["items"], defs)
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        raise ValueError(f"not structural: no type in {node}")

    unknown = set(node) - set(_KEEP) - _DROP
    if unknown:
        # Dropping a key silently could drop a constraint the Python model enforces.
        raise ValueError(f"cannot express {sorted(unknown)} in a CRD schema: {node}")
    out = {k: node[k] for k in _KEEP if k in node}
    if "description" in out:
        # One line, with Markdown backticks (docstrings use reST's double ones).
        out["description"] = " ".join(out["description"].split()).replace("``", "`")
    return out
