"""docs/api.md, generated from the same schemas as the CRDs (``ringmaster crds --reference``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ringmaster.api.accelerators import ACCELERATOR_NAME_PATTERN
from ringmaster.api.base import API_VERSION
from ringmaster.api.manifest import RESOURCES
from ringmaster.api.quantity import SUFFIXES
from ringmaster.api.resource import CATEGORIES, Resource
from ringmaster.api.schema import openapi_schema

INTRO = f"""\
# API reference: `{API_VERSION}`

Generated from the pydantic models in `operator/ringmaster/api/` by
`ringmaster crds --reference docs/api.md` (as are the CRDs in `crds/`); do not edit by hand.
What the API refuses, with examples, is in [bad-input.md](bad-input.md).

All three kinds are namespaced, have a `status` subresource (written only by the operator) and
belong to the categories {", ".join(f"`{c}`" for c in CATEGORIES)} (`kubectl get ringmaster`).
Field names are camelCase in manifests; the Python models (`ringmaster.api`) use snake_case
attributes for the same fields.

## Counts: `"340M"` parameters

`model.parameters`, `model.flopsPerSample` and `model.flopsPerRequest` take an integer or a string
with a decimal suffix: {", ".join(f"`{k}` = 10^{len(str(v)) - 1}" for k, v in SUFFIXES.items())}
(`B` for billion, as model cards write "7B"; `G` is the same). Up to four integer digits and three
decimals before the suffix: `340M`, `1.3B`, `25.6M`, `0.5T`. Lower case is refused (`m` is milli
in Kubernetes quantities). The operator reads them as whole numbers.

## Accelerators

`accelerator.type` takes the values GKE puts in the node labels `cloud.google.com/gke-accelerator`
and `cloud.google.com/gke-tpu-accelerator`: any name of that form (`{ACCELERATOR_NAME_PATTERN}`,
at most 63 characters), so a new accelerator needs no CRD change. Names starting with `tpu` are
TPUs: they need a `topology` (chips per axis of the slice, `AxB` or `AxBxC`) and
`workers x perWorker` must equal its chips. Which names, host shapes (`perWorker`,
`perReplica`) and topologies the operator knows is its hardware catalog's: the built-in entries
and the chart's catalog ConfigMap, listed in [catalog.md](catalog.md). A job naming an accelerator
or host shape the catalog lacks waits with `Schedulable=False`, reason `UnknownAccelerator` or
`UnsupportedHostShape`.
"""


def render_reference() -> str:
    lines = [INTRO.rstrip("\n")]
    for resource in RESOURCES.values():
        lines += ["", *_resource_section(resource)]
    return "\n".join(lines) + "\n"


def _resource_section(r: Resource) -> Iterator[str]:
    spec, status = openapi_schema(r.spec), openapi_schema(r.status)
    yield f"## {r.kind} (`{r.short_name}`)"
    yield ""
    yield r.description
    yield ""
    yield f"`kubectl get {r.short_name}` columns (`-o wide` adds the ones marked wide):"
    yield ""
    yield "| column | from | |"
    yield "|---|---|---|"
    for c in r.printer_columns:
        yield f"| {c.name} | `{c.json_path}` | {c.description}{' (wide)' if c.priority else ''} |"
    if r.scale:
        yield ""
        yield (
            "Scale subresource: `kubectl scale` and a HorizontalPodAutoscaler set `spec.replicas`; "
            "the operator reports `status.replicas` and `status.selector`."
        )
    yield ""
    yield f"### {r.kind} `spec`"
    yield ""
    yield from _field_table(spec)
    root = {"x-kubernetes-validations": [rule.to_crd() for rule in r.rules]}
    rules = list(_rules(root, "")) + list(_rules(spec, "spec"))
    if rules:
        yield ""
        yield f"### {r.kind} rules (CEL, checked by the apiserver and by `parse_manifest`)"
        yield ""
        yield "| field | rule | on |"
        yield "|---|---|---|"
        yield from rules
    if r.spec_changes:
        yield ""
        yield f"### {r.kind}: editing a live object"
        yield ""
        yield (
            "What `kubectl apply` / `edit` / `patch` may change once the object exists; the "
            "apiserver refuses the rest (the rules above):"
        )
        yield ""
        yield "| field | may change | why |"
        yield "|---|---|---|"
        for change in r.spec_changes:
            yield f"| `spec.{change.field}` | {change.when} | {change.why} |"
    yield ""
    yield f"### {r.kind} `status` (written by the operator)"
    yield ""
    yield (
        "Conditions follow `metav1.Condition` (type, status, reason, message, "
        "lastTransitionTime, observedGeneration) and are merged by `type`; `observedGeneration` "
        "says which `metadata.generation` the status describes. `phase` is one of: "
        + ", ".join(f"`{p.value}`" for p in r.phases)
        + "."
    )
    yield ""
    yield from _field_table(status)


def _walk(
    node: dict[str, Any], path: str, required: bool
) -> Iterator[tuple[str, dict[str, Any], bool]]:
    for name, child in node.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        is_required = name in node.get("required", [])
        yield child_path, child, is_required
        if child.get("type") == "object":
            yield from _walk(child, child_path, is_required)
        elif child.get("type") == "array" and child["items"].get("type") == "object":
            yield from _walk(child["items"], child_path + "[]", False)


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = str(node.get("type"))
    if kind == "array":
        return f"[]{_type(node['items'])}"
    if kind == "object" and "additionalProperties" in node:
        return f"map[string]{_type(node['additionalProperties'])}"
    return kind


def _constraints(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append(" \\| ".join(f"`{v}`" for v in node["enum"]))
    if "minimum" in node:
        parts.append(f"{'>' if node.get('exclusiveMinimum') else '>='} {node['minimum']}")
    if "maximum" in node:
        parts.append(f"<= {node['maximum']}")
    if "maxLength" in node:
        parts.append(f"at most {node['maxLength']} chars")
    if "maxItems" in node:
        parts.append(f"at most {node['maxItems']} items")
    if "maxProperties" in node:
        parts.append(f"at most {node['maxProperties']} entries")
    return ", ".join(parts)


def _field_table(schema: dict[str, Any]) -> Iterator[str]:
    yield "| field | type | required | default | allowed | description |"
    yield "|---|---|---|---|---|---|"
    for path, node, required in _walk(schema, "", True):
        default = node.get("default")
        default_text = "" if default is None else f"`{_json(default)}`"
        description = node.get("description", "").replace("|", "\\|")
        yield (
            f"| `{path}` | {_type(node)} | {'yes' if required else ''} | {default_text} | "
            f"{_constraints(node)} | {description} |"
        )


def _rules(node: dict[str, Any], path: str) -> Iterator[str]:
    for rule in node.get("x-kubernetes-validations", []):
        where = (path + rule.get("fieldPath", "")).lstrip(".")
        when = "update" if "oldSelf" in rule["rule"] else "create, update"
        yield f"| `{where}` | {rule['message']} | {when} |"
    for name, child in node.get("properties", {}).items():
        yield from _rules(child, f"{path}.{name}")
        if child.get("type") == "array":
            yield from _rules(child["items"], f"{path}.{name}[]")


def _json(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value == {}:
        return "{}"
    return str(value)
