"""Issue 41, part 4: NVLink domains larger than a host (GB200 NVL72), EFA by generation, and every
NCCL_* setting modelled, listed as harmless, or flagged by name."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine import nccl_settings
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.units import GIB
from ringmaster.planning.catalog import CatalogError, apply_catalog, parse_catalog

CAT = DEFAULT_CATALOG
GB200 = CAT.accelerator("nvidia-gb200")
A4X = CAT.machine("a4x-highgpu-4g")


def _busbw(t: C.CollectiveTime) -> float:
    return float(np.ravel(t.bus_bandwidth)[0])


# --- GB200 NVL72: one NVLink domain of 18 hosts ---------------------------------------------------


def test_gb200_catalog_entries_carry_their_datasheet_figures() -> None:
    assert GB200.peak("bf16") == pytest.approx(2.5e15)  # 360 PFLOPS sparse per rack / 72 / 2
    assert GB200.peak("fp8") == pytest.approx(5e15)
    assert GB200.peak("fp4") == pytest.approx(10e15)
    assert GB200.intra_bandwidth == pytest.approx(900e9)  # NVLink 5 per direction
    assert A4X.accelerator_count == 4 and A4X.nvlink_domain == 72
    assert A4X.domain_accelerators == 72
    assert CAT.machine("a4-highgpu-8g").domain_accelerators == 8  # the host is the domain


def test_nvl72_all_reduce_on_72_gpus_runs_at_nvlink_rate_not_the_nics() -> None:
    t = C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 18, 4, A4X, GB200)
    busbw = _busbw(t)
    assert int(np.ravel(t.algorithm)[0]) == C.ALG_NVLS
    per_gpu_nic = A4X.nic_bandwidth / 4
    assert busbw > 10 * per_gpu_nic  # 50 GB/s of NIC per GPU: far above what the NICs carry
    # NVLS on 72 GPUs: algbw = NVLS_EFFICIENCY_BLACKWELL x 900 GB/s, less the pipeline fill
    algbw = 4 * GIB / float(np.ravel(t.seconds)[0])
    assert algbw == pytest.approx(E.NVLS_EFFICIENCY_BLACKWELL * 900e9, rel=0.05)


def test_the_same_hosts_without_the_domain_are_bound_by_their_nics() -> None:
    alone = replace(A4X, nvlink_domain=0)
    rack = _busbw(C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 18, 4, A4X, GB200))
    hosts = C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 18, 4, alone, GB200)
    assert int(np.ravel(hosts.bottleneck)[0]) == C.BOTTLENECK_NIC
    assert _busbw(hosts) < rack / 2


def test_across_two_racks_nccl_runs_the_nic_fabric_between_domains() -> None:
    one = C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 18, 4, A4X, GB200)
    two = C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 36, 4, A4X, GB200)
    assert int(np.ravel(two.algorithm)[0]) == C.ALG_NVLS_TREE  # NVLS inside, a tree across
    assert _busbw(two) < _busbw(one)
    # between NVL4 partitions the NICs bind (nccl issue 1801's setup): NIC-bound ring
    nvl4 = replace(A4X, nvlink_domain=4)
    env = {"NCCL_NVLS_ENABLE": "0"}
    t = C.inter_host_collective(C.ALL_REDUCE, 16 * GIB, 3, 4, nvl4, GB200, env=env)
    assert int(np.ravel(t.bottleneck)[0]) == C.BOTTLENECK_NIC
    assert _busbw(t) == pytest.approx(A4X.nic_bandwidth * E.NIC_EFFICIENCY, rel=0.05)


def test_hosts_per_domain_groups_a_job_into_equal_domains() -> None:
    k = C.hosts_per_domain(A4X, np.array([1, 2, 18, 20, 36, 17]))
    assert list(k) == [1, 2, 18, 10, 18, 17]
    assert float(C.hosts_per_domain(CAT.machine("a4-highgpu-8g"), 4)) == 1


def test_a_catalog_accepts_a_72_gpu_domain_and_refuses_a_64_gpu_host_without_one() -> None:
    doc = """
machineTypes:
  nvl72-rack: {vcpus: 2592, nicGbps: 28800, pricePerHourUSD: 1, accelerator: nvidia-gb200,
               acceleratorCount: 72, nvlinkDomain: 72}
  nvl36-tray: {vcpus: 72, nicGbps: 1600, pricePerHourUSD: 1, accelerator: nvidia-gb200,
               acceleratorCount: 4, nvlinkDomain: 36}
"""
    cat = apply_catalog(CAT, parse_catalog(doc))
    assert cat.machine("nvl72-rack").accelerator_count == 72
    assert cat.machine("nvl36-tray").domain_accelerators == 36
    big = "machineTypes:\n  big-host-64g: {vcpus: 1, nicGbps: 1, pricePerHourUSD: 1, "
    with pytest.raises(CatalogError, match=r"acceleratorCount.*nvlinkDomain"):
        apply_catalog(CAT, parse_catalog(big + "accelerator: nvidia-b200, acceleratorCount: 64}"))
    with pytest.raises(CatalogError, match="no whole number of hosts"):
        apply_catalog(
            CAT,
            parse_catalog(big + "accelerator: nvidia-b200, acceleratorCount: 5, nvlinkDomain: 72}"),
        )


# --- EFA by generation ----------------------------------------------------------------------------


def test_efa_generation_selects_its_efficiency(monkeypatch: pytest.MonkeyPatch) -> None:
    p5 = CAT.machine("p5.48xlarge")
    assert p5.efa_generation == 2 and CAT.machine("p4de.24xlarge").efa_generation == 1
    h100 = CAT.accelerator("nvidia-h100-80gb")
    ring = {"NCCL_ALGO": "ring"}
    before = _busbw(C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 4, 8, p5, h100, env=ring))
    monkeypatch.setitem(E.EFA_EFFICIENCY_BY_GENERATION, 2, E.EFA_EFFICIENCY / 2)
    after = _busbw(C.inter_host_collective(C.ALL_REDUCE, 4 * GIB, 4, 8, p5, h100, env=ring))
    assert after < 0.6 * before  # NIC-bound: the generation's fraction sets the busbw
    assert float(C.network_efficiency("efa", 8, 1)) == E.EFA_EFFICIENCY


def test_efa_fraction_is_todays_software_not_2021s() -> None:
    # fitted on 2 x p4de with aws-ofi-nccl 1.8.1: busbw 76.79 GB/s at 1 GiB
    p4de, a100 = CAT.machine("p4de.24xlarge"), CAT.accelerator("nvidia-a100-80gb")
    busbw = _busbw(C.inter_host_collective(C.ALL_REDUCE, GIB, 2, 8, p4de, a100)) / 1e9
    assert busbw == pytest.approx(76.79, rel=0.02)


# --- NCCL settings ------------------------------------------------------------------------------


def test_nvls_enable_0_gives_the_rings_busbw_on_8_h100() -> None:
    h100 = CAT.accelerator("nvidia-h100-80gb")
    nvls = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100)
    off = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100, env={"NCCL_NVLS_ENABLE": "0"})
    ring = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100, env={"NCCL_ALGO": "ring"})
    assert int(np.ravel(nvls.algorithm)[0]) == C.ALG_NVLS
    assert int(np.ravel(off.algorithm)[0]) == C.ALG_RING
    assert _busbw(off) == pytest.approx(_busbw(ring))
    assert _busbw(off) < 0.8 * _busbw(nvls)


def test_nvls_enable_0_removes_nvls_tree_across_hosts() -> None:
    roce = CAT.machine("a3-ultragpu-8g")
    h200 = CAT.accelerator("nvidia-h200-141gb")
    off = C.inter_host_collective(
        C.ALL_REDUCE, 4 * GIB, 2, 8, roce, h200, env={"NCCL_NVLS_ENABLE": "0"}
    )
    assert int(np.ravel(off.algorithm)[0]) not in (C.ALG_NVLS, C.ALG_NVLS_TREE)


def test_every_nccl_variable_lands_in_one_group() -> None:
    env = {
        "NCCL_ALGO": "ring",
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_FASTRAK_NUM_FLOWS": "2",
        "NCCL_FOO": "1",
        "NCCL_MIN_NCHANNELS": "32",
        "PATH": "/bin",
    }
    s = nccl_settings.classify(env)
    assert s.modelled == (("NCCL_ALGO", "ring"),)
    assert s.no_effect == ("NCCL_DEBUG", "NCCL_FASTRAK_NUM_FLOWS", "NCCL_SOCKET_IFNAME")
    assert s.ignored == ("NCCL_FOO", "NCCL_MIN_NCHANNELS")
    notes = " ".join(s.notes())
    assert "NCCL_DEBUG" in notes and "NCCL_FOO" not in notes  # listed, not flagged
    assert "NCCL_FOO" in nccl_settings.ignored_message(s.ignored)


def test_a_bad_modelled_value_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="NCCL_NVLS_ENABLE"):
        nccl_settings.classify({"NCCL_NVLS_ENABLE": "yes"})
    with pytest.raises(ValueError, match="NCCL_ALGO"):
        nccl_settings.classify({"NCCL_ALGO": "bogus"})
