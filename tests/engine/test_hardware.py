import pytest

from ringmaster.engine.hardware import (
    DEFAULT_CATALOG,
    CatalogOverrideError,
    UnknownHardwareError,
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


def test_every_accelerator_has_host_shapes_on_machines_that_carry_it():
    for name, acc in DEFAULT_CATALOG.accelerators.items():
        shapes = DEFAULT_CATALOG.host_shapes(name)
        assert shapes, name
        for count in shapes:
            host = DEFAULT_CATALOG.host(name, count)
            assert host.machine.accelerator in (None, name)
        # GKE's naming: TPU names start with "tpu" and take a 2-D or 3-D slice topology.
        assert (acc.kind == "tpu") == name.startswith("tpu"), name
        assert acc.topology_dims in ((2, 3) if acc.kind == "tpu" else (0,)), name


def test_the_issue_15_entries_are_built_in():
    assert DEFAULT_CATALOG.default_machine("nvidia-h200-141gb", 8).name == "a3-ultragpu-8g"
    assert DEFAULT_CATALOG.default_machine("nvidia-b200", 8).name == "a4-highgpu-8g"
    assert DEFAULT_CATALOG.host_shapes("tpu-v5p-slice") == (4,)
    assert DEFAULT_CATALOG.host_shapes("tpu-v6e-slice") == (1, 4, 8)
    assert DEFAULT_CATALOG.accelerator("tpu-v5p-slice").topology_dims == 3
    assert DEFAULT_CATALOG.accelerator("tpu-v6e-slice").topology_dims == 2


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
