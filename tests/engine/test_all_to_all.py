"""All-to-all (mixture-of-experts dispatch and combine): bytes per rank, the fabric that bounds
it, the nccl-tests table and --compare, and the published figures of calibration.moe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ringmaster.calibration.moe import moe_rows
from ringmaster.cli import main
from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine.hardware import DEFAULT_CATALOG

pytestmark = pytest.mark.unit

H100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
A3_ULTRA = DEFAULT_CATALOG.machine("a3-ultragpu-8g")  # 8 x 400 Gbps RDMA
H200 = DEFAULT_CATALOG.accelerator("nvidia-h200-141gb")
GIB = 1024**3


def test_inside_a_host_each_gpu_sends_seven_eighths_over_nvlink() -> None:
    t = C.intra_host_collective(C.ALL_TO_ALL, 8 * GIB, 8, H100)
    nvlink = H100.intra_bandwidth * E.NVLINK_EFFICIENCY
    bandwidth_seconds = 8 * GIB * 7 / 8 / nvlink
    latency = E.NCCL_BASE_LATENCY + E.NVLINK_HOP_LATENCY + 6 * E.ALLTOALL_PEER_LATENCY
    assert float(t.seconds) == pytest.approx(bandwidth_seconds + latency, rel=1e-9)
    # busbw = algbw x 7/8: the link's achieved rate (nccl-tests: no NVLS for all-to-all).
    assert float(t.bus_bandwidth) == pytest.approx(nvlink, rel=0.002)
    assert C.ALGORITHM_NAMES[int(t.algorithm)] == "P2P"


def test_across_two_hosts_busbw_is_twice_a_gpus_nic_share() -> None:
    # nccl-tests issue 130: on 2 nodes, half the traffic leaves the host, so busbw = 2 x the
    # network bandwidth per GPU (x 15/16 for the ranks' own share).
    t = C.inter_host_collective(C.ALL_TO_ALL, 8 * GIB, 2, 8, A3_ULTRA, H200)
    per_gpu_nic = A3_ULTRA.nic_bandwidth * E.NIC_EFFICIENCY / 8
    assert float(t.bus_bandwidth) == pytest.approx(2 * per_gpu_nic * 15 / 16, rel=0.002)
    assert int(t.bottleneck) == C.BOTTLENECK_NIC


def test_more_hosts_tend_to_one_nic_share_and_more_peers_cost_latency() -> None:
    hosts = np.array([2, 4, 8, 32])
    t = C.inter_host_collective(C.ALL_TO_ALL, 8 * GIB, hosts, 8, A3_ULTRA, H200)
    busbw = t.bus_bandwidth
    assert np.all(np.diff(busbw) < 0)
    per_gpu_nic = A3_ULTRA.nic_bandwidth * E.NIC_EFFICIENCY / 8
    assert busbw[-1] == pytest.approx(per_gpu_nic * 32 / 31 * 255 / 256, rel=0.01)
    small = C.inter_host_collective(C.ALL_TO_ALL, 8, hosts, 8, A3_ULTRA, H200)
    assert np.all(np.diff(small.seconds) > 0)
    assert np.all(small.bottleneck == C.BOTTLENECK_LATENCY)


def test_a_slower_transport_slows_the_cross_host_part_only() -> None:
    tcpx = DEFAULT_CATALOG.machine("a3-highgpu-8g")  # 4 x 200 Gbps GPUDirect-TCPX
    slow = C.inter_host_collective(C.ALL_TO_ALL, GIB, 2, 8, tcpx, H100)
    fast = C.inter_host_collective(C.ALL_TO_ALL, GIB, 2, 8, A3_ULTRA, H100)
    assert float(slow.seconds) > 3 * float(fast.seconds)
    one_host = C.intra_host_collective(C.ALL_TO_ALL, GIB, 8, H100)
    assert float(one_host.seconds) < float(fast.seconds)


def test_tpu_all_to_all_is_bound_by_the_bisection() -> None:
    v5p = DEFAULT_CATALOG.accelerator("tpu-v5p-slice")
    link = v5p.ici_link_bandwidth * E.ICI_EFFICIENCY
    line = C.intra_host_collective(C.ALL_TO_ALL, GIB, 4, v5p, topology=(4, 1, 1))
    # 4 chips on an open line: M x 4 / 4 over one link each way.
    assert float(line.seconds) == pytest.approx(GIB / link, rel=0.01)
    cube = C.intra_host_collective(C.ALL_TO_ALL, GIB, 64, v5p, topology=(4, 4, 4))
    assert float(cube.seconds) < 4 * float(line.seconds)


def test_nccl_algo_does_not_apply_to_all_to_all() -> None:
    algos, protos = C.parse_nccl_env({"NCCL_ALGO": "allreduce:ring"}, C.ALL_TO_ALL)
    assert algos and protos


def test_cli_prints_the_alltoall_perf_table(capsys) -> None:
    code = main(
        [
            "collective",
            "all-to-all",
            "--machine-type",
            "a3-ultragpu-8g",
            "--hosts",
            "2",
            "--min-bytes",
            "1M",
            "--max-bytes",
            "1G",
            "-o",
            "json",
        ]
    )
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows) == 11
    for r in rows:
        assert r["busbwGBps"] == pytest.approx(r["algbwGBps"] * 15 / 16, rel=1e-4)
        assert r["algorithm"] == "P2P"


# A log in alltoall_perf's format (the numbers written for this test, not a published run).
ALLTOALL_LOG = Path(__file__).parents[1] / "unit" / "data" / "alltoall_perf_2x8_synthetic.txt"


def test_compare_reads_an_alltoall_perf_log(capsys) -> None:
    log = ALLTOALL_LOG
    code = main(
        ["collective", "--machine-type", "a3-ultragpu-8g", "--hosts", "2", "--compare", str(log)]
    )
    out = capsys.readouterr().out
    assert "all-to-all on 2 x a3-ultragpu-8g" in out
    assert "P2P/Simple" in out
    assert "within" in out and code == 0


def test_published_all_to_all_figures_are_checked_within_tolerance() -> None:
    """The bandwidth rows (nccl-tests, DeepEP's normal kernels) to the network model's goal,
    a median under 10 %; DeepEP's low-latency rows (a latency at 128 tokens a rank, the
    serving exchange of engine.expert_dispatch) under 15 %; every row within its tolerance."""
    rows = moe_rows()
    assert len(rows) >= 21
    # only the training rows that fit engine.frameworks.MEGATRON_MOE_SYNC_SECONDS are fitted
    assert all(r.status == "checked" or r.quantity.startswith("MoE training") for r in rows)

    def median(kind: str) -> float:
        errors = sorted(abs(r.error) for r in rows if kind in r.quantity and r.error is not None)
        return errors[len(errors) // 2]

    assert median("GB/s") < 0.10
    assert median("low-latency") < 0.15
    assert all(r.ok for r in rows)
