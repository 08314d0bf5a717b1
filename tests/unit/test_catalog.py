"""The catalog document format, the merge of its layers, and what a catalog can place
(planning/catalog.py), plus the operator's view of its ConfigMap (controllers/catalog.py's pure
CatalogState). No cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringmaster.controllers.catalog import CatalogState, parse_reference
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.units import GB, TERA, gbps_to_bytes_per_second
from ringmaster.planning import active_catalog
from ringmaster.planning.catalog import (
    CatalogError,
    apply_catalog,
    hardware_problem,
    install_catalog,
    load_catalog,
    parse_catalog,
)

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
L4_EXAMPLE = EXAMPLES / "catalog" / "nvidia-l4.yaml"


def merged(text: str):
    return apply_catalog(DEFAULT_CATALOG, parse_catalog(text, where="cm"), where="cm")


def test_the_l4_example_adds_an_accelerator_and_its_host_shapes() -> None:
    catalog = load_catalog(L4_EXAMPLE)
    l4 = catalog.accelerator("nvidia-l4")
    assert (l4.kind, l4.intra_link, l4.nccl_arch) == ("gpu", "pcie", "ampere")
    assert l4.peak("bf16") == 121 * TERA and l4.memory_bytes == 24 * GB
    # Host shapes come from the machine types that carry it: no defaultMachines needed.
    assert catalog.host_shapes("nvidia-l4") == (1, 2, 4, 8)
    host = catalog.host("nvidia-l4", 4)
    assert host.machine.name == "g2-standard-48"
    assert host.nic_bandwidth == gbps_to_bytes_per_second(50)
    assert "nvidia-l4" not in DEFAULT_CATALOG.accelerators  # the built-in one is untouched


def test_an_existing_entry_changes_only_the_fields_given() -> None:
    catalog = merged(
        """
        machineTypes:
          a2-highgpu-8g: {nicGbps: 200, pricePerHourUSD: 20}
        accelerators:
          nvidia-tesla-a100: {peakTFLOPS: {int8: 700}}
        """
    )
    machine = catalog.machine("a2-highgpu-8g")
    assert machine.nic_bandwidth == gbps_to_bytes_per_second(200)
    assert machine.price_per_hour == 20
    assert machine.vcpus == DEFAULT_CATALOG.machine("a2-highgpu-8g").vcpus  # kept
    a100 = catalog.accelerator("nvidia-tesla-a100")
    assert a100.peak("int8") == 700 * TERA
    assert a100.peak("fp16") == 312 * TERA  # precisions merge, not replace
    base = DEFAULT_CATALOG.machine("a2-highgpu-8g")
    assert base.nic_bandwidth == gbps_to_bytes_per_second(100)


def test_later_layers_win_field_by_field() -> None:
    """Built-in, then the file, then the ConfigMap: the last one to name a field sets it."""
    file_layer = load_catalog(L4_EXAMPLE)
    configmap = apply_catalog(
        file_layer,
        parse_catalog(
            "machineTypes: {g2-standard-8: {pricePerHourUSD: 0.70}}\n"
            "defaultMachines: {nvidia-tesla-t4: {1: n1-standard-4}}\n"
        ),
    )
    assert configmap.machine("g2-standard-8").price_per_hour == 0.70
    assert configmap.machine("g2-standard-8").nic_bandwidth == gbps_to_bytes_per_second(16)
    assert configmap.default_machine("nvidia-tesla-t4", 1).name == "n1-standard-4"
    assert configmap.host_shapes("nvidia-tesla-t4") == (1, 2, 4)


def test_a_new_tpu_needs_its_topology_and_interconnect() -> None:
    with pytest.raises(CatalogError, match="tpu7x: a new accelerator needs topologyDims"):
        merged(
            """
            accelerators:
              tpu7x: {kind: tpu, peakTFLOPS: {bf16: 2307}, memoryGB: 192,
                      memoryBandwidthGBps: 7370, intraLink: ici, intraBandwidthGBps: 150}
            """
        )
    catalog = merged(
        """
        accelerators:
          tpu7x: {kind: tpu, peakTFLOPS: {bf16: 2307}, memoryGB: 192, memoryBandwidthGBps: 7370,
                  intraLink: ici, intraBandwidthGBps: 150, iciLinkGBps: 150, topologyDims: 3,
                  source: "an example"}
        machineTypes:
          tpu7x-standard-4t: {vcpus: 224, nicGbps: 200, pricePerHourUSD: 40,
                              accelerator: tpu7x, acceleratorCount: 4, transport: dcn}
        """
    )
    assert catalog.host_shapes("tpu7x") == (4,)
    assert hardware_problem(catalog, "tpu7x", 4, "2x2x2") is None
    assert hardware_problem(catalog, "tpu7x", 4, "4x4")[0] == "UnsupportedTopology"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "machineTypes: {a2-highgpu-8g: {nicGbs: 1}}",
            r"machineTypes\.a2-highgpu-8g\.nicGbs: unknown",
        ),
        (
            "machineTypes: {x-1: {vcpus: 4}}",
            "x-1: a new machine type needs nicGbps, pricePerHourUSD",
        ),
        ("machineTypes: {n1-highcpu-16: {nicGbps: fast}}", r"n1-highcpu-16\.nicGbps: Input should"),
        ("accelerators: {nvidia-x: {peakTFLOPS: {fp64: 1}}}", r"nvidia-x\.peakTFLOPS\.fp64"),
        ("accelerators: {nvidia-l4: {kind: gpu}}", "nvidia-l4: a new accelerator needs peakTFLOPS"),
        (
            "accelerators: {nvidia-t4: {memoryGB: -1}}",
            r"nvidia-t4\.memoryGB: Input should be greater",
        ),
        ("accelerators: {Bad_Name: {kind: gpu}}", "Bad_Name: not an accelerator name"),
        ("gpus: {}", "gpus: unknown field"),
        ("[1, 2]", "expected a map"),
        ("a: [", "invalid YAML"),
        (
            "accelerators: {nvidia-t4: {memoryGB: 16}}\naccelerators: {}",
            'invalid YAML: mapping key "accelerators" already defined at line 1',
        ),
        ("defaultMachines: {nvidia-tesla-a100: {8: a2-highgpu-4g}}", "a2-highgpu-4g carries 4 x"),
        ("defaultMachines: {nvidia-tesla-a100: {8: nowhere-1}}", "nowhere-1 is not in the catalog"),
        ("defaultMachines: {nvidia-x: {8: a2-highgpu-8g}}", "nvidia-x is not in the catalog"),
        (
            "machineTypes: {g9-1: {vcpus: 1, nicGbps: 1, pricePerHourUSD: 1, accelerator: nope}}",
            r"g9-1\.accelerator: nope is not in the catalog; known: amd-mi300x, amd-mi325x, "
            "nvidia-a100-80gb",
        ),
        (
            "accelerators: {tpu-x: {kind: gpu, peakTFLOPS: {bf16: 1}, memoryGB: 1,"
            " memoryBandwidthGBps: 1, intraLink: ici, intraBandwidthGBps: 1}}",
            r"tpu-x\.kind: gpu, but TPU accelerator names start with 'tpu'",
        ),
        (
            "accelerators: {nvidia-x: {kind: gpu, peakTFLOPS: {bf16: 1}, memoryGB: 1,"
            " memoryBandwidthGBps: 1, intraLink: pcie, intraBandwidthGBps: 1}}",
            "nvidia-x: no host shape: add a machine type with accelerator: nvidia-x",
        ),
    ],
)
def test_a_bad_document_names_the_entry_and_field(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=f"^cm: .*{message}"):
        apply_catalog(DEFAULT_CATALOG, parse_catalog(text, where="cm"), where="cm")


def test_the_format_knows_every_precision_the_engine_does() -> None:
    from typing import get_args

    from ringmaster.engine.hardware import PRECISIONS
    from ringmaster.planning.catalog import Precision

    assert set(get_args(Precision)) == set(PRECISIONS)


def test_json_and_an_empty_document_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"machineTypes": {"n1-highcpu-16": {"pricePerHourUSD": 9}}}))
    assert load_catalog(path).machine("n1-highcpu-16").price_per_hour == 9
    assert merged("").accelerators == DEFAULT_CATALOG.accelerators
    assert load_catalog(None) is DEFAULT_CATALOG
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "missing.yaml")


def test_hardware_problem_names_the_known_accelerators_and_how_to_add_one() -> None:
    reason, message = hardware_problem(DEFAULT_CATALOG, "nvidia-l4", 1)
    assert reason == "UnknownAccelerator"
    assert "nvidia-h200-141gb" in message and "tpu-v6e-slice" in message
    assert "catalog ConfigMap" in message and "docs/catalog.md" in message
    reason, message = hardware_problem(DEFAULT_CATALOG, "nvidia-tesla-a100", 3)
    assert reason == "UnsupportedHostShape" and "1, 2, 4, 8, 16" in message
    reason, message = hardware_problem(DEFAULT_CATALOG, "tpu-v4-podslice", 4, "4x4")
    assert reason == "UnsupportedTopology" and "AxBxC" in message
    assert hardware_problem(DEFAULT_CATALOG, "nvidia-b200", 8) is None
    assert hardware_problem(DEFAULT_CATALOG, "tpu-v5p-slice", 4, "2x2x4") is None


def _configmap(version: str, text: str) -> dict:
    return {"metadata": {"resourceVersion": version}, "data": {"catalog.yaml": text}}


def test_the_operator_keeps_the_last_good_catalog_when_its_configmap_turns_bad() -> None:
    state = CatalogState(base=DEFAULT_CATALOG, where="ns/cm", catalog=DEFAULT_CATALOG)
    assert state.observe(None)  # first look: absent, the base
    assert state.catalog is DEFAULT_CATALOG
    assert not state.observe(None)  # nothing new
    assert state.observe(_configmap("1", L4_EXAMPLE.read_text()))
    good = state.catalog
    assert "nvidia-l4" in good.accelerators and state.rejection is None
    assert state.observe(_configmap("2", "accelerators: {nvidia-l4: {memoryGB: lots}}"))
    assert state.catalog is good  # kept
    assert state.rejection is not None
    assert "ConfigMap ns/cm key catalog.yaml: accelerators.nvidia-l4.memoryGB" in (
        state.rejection.error
    )
    assert not state.observe(_configmap("2", "ignored: the same version"))
    assert state.observe(_configmap("3", ""))  # fixed (emptied): the base again
    assert state.rejection is None and "nvidia-l4" not in state.catalog.accelerators
    assert state.observe(None) and state.catalog is DEFAULT_CATALOG  # deleted


def test_an_installed_catalog_is_what_plans_use() -> None:
    catalog = load_catalog(L4_EXAMPLE)
    install_catalog(catalog)
    try:
        assert active_catalog() is catalog
        assert active_catalog(str(L4_EXAMPLE)) is not catalog  # an explicit file still wins
    finally:
        install_catalog(None)
    assert "nvidia-l4" not in active_catalog().accelerators


def test_configmap_reference() -> None:
    assert parse_reference("ringmaster-system/ringmaster-catalog") == (
        "ringmaster-system",
        "ringmaster-catalog",
    )
    for bad in ("catalog", "/x", "x/", "a/b/c"):
        with pytest.raises(ValueError, match="NAMESPACE/NAME"):
            parse_reference(bad)


def test_docs_catalog_lists_the_built_in_catalog() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "catalog.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in text.splitlines()
        if line.startswith("| `") and line.split("|")[2].strip() in ("GPU", "TPU")
    }
    assert set(rows) == set(DEFAULT_CATALOG.accelerators)
    for name, line in rows.items():
        shapes = ", ".join(
            f"{count} ({machine})"
            for count, machine in sorted(DEFAULT_CATALOG.default_machines[name].items())
        )
        assert f"| {shapes} |" in line, name
