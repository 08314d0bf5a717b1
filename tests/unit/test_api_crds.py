"""The generated CRDs: in sync with the models, structural, and within CEL's cost rules."""

from __future__ import annotations

import filecmp
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from ringmaster.api import GROUP, RESOURCES, VERSION
from ringmaster.api.crdgen import write_crds
from ringmaster.api.crds import all_crds
from ringmaster.api.reference import render_reference
from ringmaster.cli import main as cli_main

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"


def test_crds_directory_is_what_the_models_generate(tmp_path: Path) -> None:
    # The exact call the pre-stop hook makes; byte-identical files, nothing more, nothing less.
    assert cli_main(["crds", "--output-dir", str(tmp_path)]) == 0
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted(p.name for p in CRD_DIR.iterdir()), "crds/ has other files"
    _, mismatch, errors = filecmp.cmpfiles(tmp_path, CRD_DIR, generated, shallow=False)
    assert not mismatch and not errors, (
        f"crds/ drifted from the models: run `make crds` ({mismatch})"
    )


def test_generation_is_deterministic(tmp_path: Path) -> None:
    write_crds(tmp_path / "a")
    write_crds(tmp_path / "b")
    for name in all_crds():
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_api_reference_is_what_the_models_generate() -> None:
    assert (REPO / "docs" / "api.md").read_text() == render_reference(), (
        "docs/api.md drifted: run `ringmaster crds --reference docs/api.md`"
    )


def crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def root_schema(crd: dict[str, Any]) -> dict[str, Any]:
    [version] = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_schema_is_structural(crd: dict[str, Any]) -> None:
    """The apiserver's structural-schema rules, as far as our generator could break them."""
    for path, node in nodes(root_schema(crd)):
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        assert "$ref" not in node and "allOf" not in node and "oneOf" not in node, path
        assert "type" in node or int_or_string, f"{path}: no type"
        if "anyOf" in node:
            assert int_or_string and node["anyOf"] == [{"type": "integer"}, {"type": "string"}], (
                path
            )
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert "nullable" not in node and "title" not in node, path
        if node.get("type") == "array":
            assert "items" in node, path


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_spec_strings_and_lists_are_bounded_for_cel_cost(crd: dict[str, Any]) -> None:
    spec = root_schema(crd)["properties"]["spec"]
    for path, node in nodes(spec, "spec"):
        if node.get("type") == "string":
            assert "maxLength" in node or "enum" in node, f"{path}: unbounded string"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path}: unbounded list"
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, f"{path}: unbounded map"


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_every_cel_rule_parses_and_its_field_path_exists(crd: dict[str, Any]) -> None:
    env = celpy.Environment()
    count = 0
    for path, node in nodes(root_schema(crd)):
        for rule in node.get("x-kubernetes-validations", []):
            env.compile(rule["rule"])  # raises CELParseError
            count += 1
            assert rule["message"], path
            target = node
            for part in rule.get("fieldPath", "").split(".")[1:]:
                target = target["properties"][part]
    assert count > 0


@pytest.mark.parametrize("resource", list(RESOURCES.values()), ids=lambda r: r.kind)
def test_names_subresources_and_printer_columns(resource: Any) -> None:
    crd = yaml.safe_load((CRD_DIR / f"{resource.plural}.{GROUP}.yaml").read_text())
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{resource.plural}.{GROUP}"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == [resource.short_name]
    assert spec["names"]["categories"] == ["ringmaster", "ml"]
    [version] = spec["versions"]
    assert version["name"] == VERSION and version["served"] and version["storage"]
    assert "status" in version["subresources"]
    schema = root_schema(crd)
    if resource.scale:
        scale = version["subresources"]["scale"]
        assert scale == {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
        assert schema["properties"]["spec"]["properties"]["replicas"]["type"] == "integer"
        assert schema["properties"]["status"]["properties"]["selector"]["type"] == "string"
    # Every column reads a field the schema declares (a typo would show an empty column forever).
    for column in version["additionalPrinterColumns"]:
        node = schema
        # ".status.conditions[?(@.type=="Ready")].reason": a field, or a list item by a key.
        steps = re.findall(r'\.(\w+)(\[\?\(@\.(\w+)=="\w+"\)\])?', column["jsonPath"])
        assert "".join(f".{f}{flt}" for f, flt, _ in steps) == column["jsonPath"], column
        for part, item_filter, key in steps:
            if part == "creationTimestamp":
                break
            node = node["properties"][part]
            if item_filter:  # a filter on a list-map key picks one item
                assert node["x-kubernetes-list-map-keys"] == [key], column
                node = node["items"]
        else:
            kinds = {"string": "string", "integer": "integer", "number": "number", "date": "string"}
            assert node.get("type") == kinds[column["type"]], column


def test_the_short_names_are_tj_rsp_ie_ppf() -> None:
    assert {r.short_name for r in RESOURCES.values()} == {"tj", "rsp", "ie", "ppf"}


def test_status_conditions_have_the_kubernetes_shape() -> None:
    for crd in crds():
        conditions = root_schema(crd)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        item = conditions["items"]
        assert set(item["properties"]) == {
            "type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"
        }  # fmt: skip
        assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
        assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
