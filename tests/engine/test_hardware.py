import json

import pytest

from ringmaster.engine.hardware import (
    DEFAULT_CATALOG,
    CatalogOverrideError,
    UnknownHardwareError,
    load_catalog,
    parse_overrides,
)
from ringmaster.engine.units import GB, TERA, gbps_to_bytes_per_second

pytestmark = pytest.mark.unit


def test_unknown_accelerator_lists_the_known_ones():
    with pytest.raises(UnknownHardwareError) as err:
        DEFAULT_CATALOG.accelerator("nvidia-tesla-k80")
    msg = str(err.value)
    assert "nvidia-tesla-k80" in msg
    for known in ("nvidia-tesla-a100", "nvidia-tesla-t4", "tpu-v4-podslice"):
        assert known in msg


def test_unknown_machine_and_host_shape_fail_with_the_known_ones():
    with pytest.raises(UnknownHardwareError, match="a2-highgpu-8g"):
        DEFAULT_CATALOG.machine("a2-highgpu-3g")
    with pytest.raises(UnknownHardwareError, match="known: 1, 2, 4, 8, 16"):
        DEFAULT_CATALOG.default_machine("nvidia-tesla-a100", 3)


def test_catalog_keys_are_the_api_accelerator_types():
    api = pytest.importorskip("ringmaster.api")
    assert set(DEFAULT_CATALOG.accelerators) == set(api.ACCELERATOR_TYPES)
    for acc, shapes in api.HOST_SHAPES.items():
        for count in shapes:
            DEFAULT_CATALOG.host(acc, count)  # every shape the API admits has a machine


def test_every_entry_names_its_source():
    for a in DEFAULT_CATALOG.accelerators.values():
        assert a.source, a.name
    for m in DEFAULT_CATALOG.machines.values():
        assert m.source, m.name


def test_figures_match_the_published_datasheet_points(points):
    hw = points["hardware"]
    a100 = DEFAULT_CATALOG.accelerator("nvidia-tesla-a100")
    assert a100.peak("fp16") == hw["nvidia-tesla-a100"]["fp16_tflops"] * TERA
    assert a100.peak("int8") == hw["nvidia-tesla-a100"]["int8_tops"] * TERA
    assert a100.memory_bandwidth == hw["nvidia-tesla-a100"]["hbm_GBps"] * GB
    assert a100.intra_bandwidth == hw["nvidia-tesla-a100"]["nvlink_GBps_per_direction"] * GB
    assert DEFAULT_CATALOG.accelerator("nvidia-a100-80gb").memory_bandwidth == 2039 * GB
    t4 = DEFAULT_CATALOG.accelerator("nvidia-tesla-t4")
    assert t4.peak("int8") == hw["nvidia-tesla-t4"]["int8_tops"] * TERA
    assert t4.memory_bandwidth == hw["nvidia-tesla-t4"]["memory_GBps"] * GB
    assert DEFAULT_CATALOG.accelerator("tpu-v4-podslice").peak("bf16") == 275 * TERA
    assert DEFAULT_CATALOG.accelerator("tpu-v5-lite-podslice").peak("int8") == 393 * TERA
    for machine, gbps in (("n1-highcpu-16", 32), ("a2-highgpu-8g", 100), ("a2-megagpu-16g", 100)):
        assert DEFAULT_CATALOG.machine(machine).nic_bandwidth == gbps_to_bytes_per_second(gbps)


def test_precision_fallbacks():
    p4 = DEFAULT_CATALOG.accelerator("nvidia-tesla-p4")
    assert not p4.supports("fp16")
    assert p4.effective_precision("fp16") == "fp32"  # no fast fp16 on GP104
    tpu = DEFAULT_CATALOG.accelerator("tpu-v4-podslice")
    assert tpu.effective_precision("fp32") == "bf16"  # XLA's default matmul precision


def test_attached_gpu_price_adds_to_the_machine():
    host = DEFAULT_CATALOG.host("nvidia-tesla-t4", 2)
    assert host.machine.name == "n1-standard-16"
    assert host.price_per_hour == pytest.approx(0.759996 + 2 * 0.35)
    bundled = DEFAULT_CATALOG.host("nvidia-tesla-a100", 8)
    assert bundled.price_per_hour == pytest.approx(29.38708)


def test_explicit_machine_must_carry_the_accelerator():
    with pytest.raises(CatalogOverrideError, match="carries nvidia-tesla-a100"):
        DEFAULT_CATALOG.host("nvidia-h100-80gb", 8, "a2-highgpu-8g")
    with pytest.raises(CatalogOverrideError, match="fewer than the 8"):
        DEFAULT_CATALOG.host("nvidia-tesla-a100", 8, "a2-highgpu-4g")


def test_overrides_change_and_add_entries_without_touching_the_default():
    cat = DEFAULT_CATALOG.with_overrides(
        {
            "machineTypes": {
                "a2-highgpu-8g": {"nicGbps": 200, "pricePerHourUSD": 20},
                "my-reducer": {"vcpus": 32, "nicGbps": 50, "pricePerHourUSD": 1.0},
            },
            "accelerators": {"nvidia-tesla-a100": {"peakTFLOPS": {"int8": 700}}},
        }
    )
    assert cat.machine("a2-highgpu-8g").nic_bandwidth == gbps_to_bytes_per_second(200)
    assert cat.machine("my-reducer").price_per_hour == 1.0
    a100 = cat.accelerator("nvidia-tesla-a100")
    assert a100.peak("int8") == 700 * TERA
    assert a100.peak("fp16") == 312 * TERA  # merged, not replaced
    assert DEFAULT_CATALOG.machine("a2-highgpu-8g").nic_bandwidth == gbps_to_bytes_per_second(100)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"machineTypes": {"a2-highgpu-8g": {"nicGbs": 1}}}, "a2-highgpu-8g.nicGbs: unknown field"),
        ({"machineTypes": {"x": {"vcpus": 4}}}, "needs nicGbps, pricePerHourUSD"),
        ({"machineTypes": {"n1-highcpu-16": {"nicGbps": "fast"}}}, "expected a non-negative"),
        ({"accelerators": {"x": {"peakTFLOPS": {"fp64": 1}}}}, "unknown precision 'fp64'"),
        ({"gpus": {}}, "gpus: unknown section"),
    ],
)
def test_bad_overrides_name_the_field(data, message):
    with pytest.raises(CatalogOverrideError, match=message):
        DEFAULT_CATALOG.with_overrides(data)


def test_load_catalog_reads_yaml_and_json(tmp_path):
    y = tmp_path / "catalog.yaml"
    y.write_text("machineTypes:\n  n1-highcpu-16:\n    nicGbps: 16\n")
    assert load_catalog(y).machine("n1-highcpu-16").nic_bandwidth == gbps_to_bytes_per_second(16)
    j = tmp_path / "catalog.json"
    j.write_text(json.dumps({"machineTypes": {"n1-highcpu-16": {"pricePerHourUSD": 9}}}))
    assert load_catalog(j).machine("n1-highcpu-16").price_per_hour == 9
    assert load_catalog(None) is DEFAULT_CATALOG
    with pytest.raises(CatalogOverrideError, match="cannot read"):
        load_catalog(tmp_path / "missing.yaml")
    with pytest.raises(CatalogOverrideError, match="invalid YAML"):
        parse_overrides("a: [")
