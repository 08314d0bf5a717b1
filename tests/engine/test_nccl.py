"""NCCL's algorithms and protocols (tuning.cc) against hand-computed cases, and the entry points
other modules call (intra_host_collective, inter_host_collective)."""

import numpy as np
import pytest

from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine.alpha_beta_collectives import torus_allreduce
from ringmaster.engine.hardware import DEFAULT_CATALOG as CAT
from ringmaster.engine.units import GIB, MIB

pytestmark = pytest.mark.unit

US = 1e-6
INTRA = 200e9  # achieved NVLink per GPU
NET = 10e9  # achieved NICs per host
FABRIC = C.GpuFabric(intra_bandwidth=INTRA, net_bandwidth=NET, intra_link="nvlink", arch="ampere")
RING_ONLY = {C.ALG_RING}
# The pipeline fill of a Simple collective: seconds per byte of one channel's step; a full step
# is NCCL's 512 KiB (4 MiB buffer / 8 steps), NVLS's chunk 128 KiB, NVLSTree's 64 KiB on 4+ hosts.
K = E.PIPELINE_FILL_SECONDS_PER_STEP_BYTE
STEP = 512 * 1024
# a one-host ring's fill: RING_FILL_LINK_STEPS full steps at the link's per-channel rate
LINK_FILL = E.RING_FILL_LINK_STEPS * E.NCCL_ASSUMED_CHANNELS * STEP / INTRA


def one(kind, m, n, g, fabric=FABRIC, algorithms=None, protocols=None):
    t = C.nccl_collective(kind, m, n, g, fabric, algorithms=algorithms, protocols=protocols)
    return (
        float(t.seconds),
        C.ALGORITHM_NAMES[int(t.algorithm)],
        C.PROTOCOL_NAMES[int(t.protocol)],
        float(t.bus_bandwidth),
    )


def test_ring_simple_one_host_hand_computed():
    m = 1 * GIB
    t, alg, proto, busbw = one(C.ALL_REDUCE, m, 1, 8, protocols={C.PROTO_SIMPLE})
    lat = 8.4 + 14 * 3.4  # base + 2(N-1) NVLink steps, tuning.cc ring/Simple
    assert (alg, proto) == ("Ring", "Simple")
    # 1 GiB fills every channel's 512 KiB step (16 channels x 8 ranks x 4-step chunks = 256 MiB)
    assert t == pytest.approx(lat * US + 2 * 7 / 8 * m / INTRA + LINK_FILL)
    assert busbw == pytest.approx(2 * 7 / 8 * m / t)


def test_ring_ll_is_half_the_bandwidth_and_capped_by_ll_max():
    m = 64 * 1024
    t, _, proto, _ = one(C.ALL_REDUCE, m, 1, 8, algorithms=RING_ONLY, protocols={C.PROTO_LL})
    bus = min(87.7e9, INTRA * 0.5)  # Ampere one-host llMaxBw 87.7 GB/s
    assert proto == "LL"
    assert t == pytest.approx((6.6 + 14 * 0.6) * US + 2 * 7 / 8 * m / bus)


def test_ring_ll128_is_092_of_simple():
    m = 4 * MIB
    t, _, proto, _ = one(C.ALL_REDUCE, m, 1, 8, algorithms=RING_ONLY, protocols={C.PROTO_LL128})
    assert proto == "LL128"
    assert t == pytest.approx((14.0 + 14 * 1.9) * US + 2 * 7 / 8 * m / (INTRA * 0.92))


def test_protocol_follows_size_small_ll_then_ll128_then_simple():
    sizes = np.array([8.0, 64 * 1024, 8 * MIB, 1 * GIB])
    t = C.nccl_collective(C.ALL_REDUCE, sizes, 1, 8, FABRIC)
    assert [C.PROTOCOL_NAMES[int(p)] for p in t.protocol] == ["LL", "LL", "LL128", "Simple"]
    assert set(t.algorithm) == {C.ALG_RING}  # one host, no NVSwitch reduction: ring only


def test_ring_across_hosts_multi_gpu_is_paced_by_the_nics_and_pays_network_steps():
    m = 1 * GIB
    t, _alg, _, busbw = one(C.ALL_REDUCE, m, 4, 8, algorithms=RING_ONLY, protocols={2})
    n_ranks, inter = 32, 2 * 3
    intra_steps = 2 * (n_ranks - 1) - inter
    lat = 8.4 + intra_steps * max(3.4, 3 * 1.0) + inter * 14.0
    lat *= 1.4  # plateau: m / (16 channels x 32 ranks) >= 64
    assert t == pytest.approx(lat * US + 2 * 31 / 32 * m / NET + K * STEP)
    assert busbw == pytest.approx(NET, rel=0.01)  # ring busbw = the host's NICs


def test_tree_two_hosts_carries_half_so_busbw_nearly_doubles():
    m = 1 * GIB
    ring = one(C.ALL_REDUCE, m, 2, 8, algorithms=RING_ONLY, protocols={2})
    tree = one(C.ALL_REDUCE, m, 2, 8, algorithms={C.ALG_TREE}, protocols={2})
    assert tree[1] == "Tree"
    lat = 8.4 + 2 * (7 * 4.0 + 1 * 14.0)
    assert tree[0] == pytest.approx(lat * US + m / (NET * 0.92) + K * STEP)  # M per NIC
    assert tree[3] / NET == pytest.approx(2 * 15 / 16 * 0.92, rel=0.01)  # "up to 2x the NIC"
    best = one(C.ALL_REDUCE, m, 2, 8)
    assert best[1] == "Tree"  # NCCL picks the tree on 2 hosts
    assert best[0] < ring[0]


def test_tree_many_hosts_carries_2m_and_loses_to_the_ring_on_large_messages():
    m = 1 * GIB
    tree = one(C.ALL_REDUCE, m, 16, 8, algorithms={C.ALG_TREE}, protocols={2})
    lat = 8.4 + 2 * (7 * 4.0 + 4 * 14.0)
    assert tree[0] == pytest.approx(lat * US + 2 * m / (NET * 0.92) + K * STEP)
    assert one(C.ALL_REDUCE, m, 16, 8)[1] == "Ring"
    # and wins on small ones (log2 hops against 2(n-1))
    assert one(C.ALL_REDUCE, 64 * 1024, 16, 8)[1] == "Tree"


def test_tree_correction_slows_medium_sizes():
    m = 4 * MIB  # log2(4 MiB / 64) = 16 -> Simple factor 0.7
    t = one(C.ALL_REDUCE, m, 8, 1, algorithms={C.ALG_TREE}, protocols={C.PROTO_SIMPLE})[0]
    lat = 8.4 + 2 * 3 * 14.0
    # each of 16 channels holds 256 KiB of the 4 MiB: less than a full step
    assert t == pytest.approx(lat * US + 2 * m / (NET * 0.92) / 0.7 + K * m / 16)


def test_nvls_single_host_hand_computed():
    fabric = C.GpuFabric(INTRA, NET, "nvlink", nvls_bandwidth=270e9, arch="hopper")
    m = 4 * GIB
    t, alg, proto, busbw = one(C.ALL_REDUCE, m, 1, 8, fabric)
    assert (alg, proto) == ("NVLS", "Simple")
    assert t == pytest.approx(25 * US + m / 270e9 + K * 128 * 1024)
    assert busbw == pytest.approx(2 * 7 / 8 * m / t)
    # NVLS is for all-reduce here; all-gather runs the ring
    assert one(C.ALL_GATHER, m, 1, 8, fabric)[1] == "Ring"


def test_nvls_tree_across_hosts():
    fabric = C.GpuFabric(INTRA, NET, "nvlink", nvls_bandwidth=270e9, arch="hopper")
    m = 1 * GIB
    t, alg, _, _ = one(C.ALL_REDUCE, m, 4, 8, fabric, algorithms={C.ALG_NVLS_TREE})
    assert alg == "NVLSTree"
    assert t == pytest.approx((25 + 2 * 2 * 20.9) * US + 2 * m / NET + K * 64 * 1024)


def test_nvls_tree_two_hosts_hand_computed_below_one_hosts_nvls_ceiling():
    # Two hosts: the network carries M per host (each host roots one tree), so a fast network
    # leaves the in-host NVLS phases as the limit, at NVLS_TREE_SHARE of one host's NVLS rate.
    nvls = 270e9
    fabric = C.GpuFabric(INTRA, 1e13, "nvlink", nvls_bandwidth=nvls, arch="hopper")
    m = 8 * GIB
    t, alg, _, _ = one(C.ALL_REDUCE, m, 2, 8, fabric, algorithms={C.ALG_NVLS_TREE})
    assert alg == "NVLSTree"
    fill = K * 128 * 1024
    assert t == pytest.approx((25 + 2 * 1 * 20.9) * US + m / (nvls * E.NVLS_TREE_SHARE) + fill)
    one_host = one(C.ALL_REDUCE, m, 1, 8, fabric, algorithms={C.ALG_NVLS})
    assert m / t < m / one_host[0]  # the algbw of two hosts stays under one host's


def test_efa_is_a_transport_with_its_own_fraction():
    a100 = CAT.accelerator("nvidia-tesla-a100")
    p4d = CAT.machine("p4d.24xlarge")
    assert p4d.transport == "efa" and p4d.nics == 4 and p4d.nic_gbps == pytest.approx(100)
    assert CAT.machine("p5.48xlarge").transport == "efa"
    assert float(C.network_efficiency("efa", 8)) == E.EFA_EFFICIENCY
    assert E.EFA_EFFICIENCY < E.NIC_EFFICIENCY  # SRD through libfabric: below RDMA's rate
    # Four hosts run the ring: busbw is the EFAs' achieved rate.
    four = C.inter_host_collective(C.ALL_REDUCE, 8 * GIB, 4, 8, p4d, a100)
    assert C.ALGORITHM_NAMES[int(four.algorithm)] == "Ring"
    assert float(four.bus_bandwidth) == pytest.approx(
        p4d.nic_bandwidth * E.EFA_EFFICIENCY, rel=0.01
    )


def test_all_gather_and_reduce_scatter_move_half_an_all_reduce():
    m = 1 * GIB
    ag = one(C.ALL_GATHER, m, 1, 8, protocols={2})
    rs = one(C.REDUCE_SCATTER, m, 1, 8, protocols={2})
    assert ag[0] == pytest.approx((8.4 + 7 * 3.4) * US + 7 / 8 * m / INTRA + LINK_FILL)
    assert rs[0] == pytest.approx(ag[0])
    assert ag[3] == pytest.approx(7 / 8 * m / ag[0])  # busbw factor (N-1)/N


def test_pcie_has_no_ll128():
    fabric = C.GpuFabric(12e9, NET, "pcie", arch="volta")
    t = C.nccl_collective(C.ALL_REDUCE, 2.0 ** np.arange(3, 34), 1, 4, fabric)
    assert C.PROTO_LL128 not in set(t.protocol)


def test_one_rank_costs_nothing():
    assert one(C.ALL_REDUCE, 1 * GIB, 1, 1)[0] == 0.0


def test_nccl_env_restricts_the_choice():
    assert C.parse_nccl_env({"NCCL_ALGO": "ring"}) == ({C.ALG_RING}, {0, 1, 2})
    algos, protos = C.parse_nccl_env({"NCCL_ALGO": "^tree", "NCCL_PROTO": "Simple"})
    assert C.ALG_TREE not in algos and protos == {C.PROTO_SIMPLE}
    algos, _ = C.parse_nccl_env({"NCCL_ALGO": "ring;allgather:tree"}, C.ALL_REDUCE)
    assert algos == {C.ALG_RING}
    with pytest.raises(ValueError, match="NCCL_ALGO"):
        C.parse_nccl_env({"NCCL_ALGO": "hypercube"})
    forced = one(C.ALL_REDUCE, 1 * GIB, 2, 8, algorithms={C.ALG_RING})
    assert forced[1] == "Ring"


def test_intra_host_entry_point_h100_picks_nvls_and_a100_cannot():
    h100 = CAT.accelerator("nvidia-h100-80gb")
    a100 = CAT.accelerator("nvidia-tesla-a100")
    t = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100)
    assert C.ALGORITHM_NAMES[int(t.algorithm)] == "NVLS"
    assert float(t.bus_bandwidth) / 1e9 == pytest.approx(480, rel=0.01)
    ring = C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, h100, env={"NCCL_ALGO": "ring"})
    assert C.ALGORITHM_NAMES[int(ring.algorithm)] == "Ring"
    assert (
        C.ALGORITHM_NAMES[int(C.intra_host_collective(C.ALL_REDUCE, 4 * GIB, 8, a100).algorithm)]
        == "Ring"
    )


def test_inter_host_entry_point_tcp_sharing_costs_its_fraction():
    a100 = CAT.accelerator("nvidia-tesla-a100")
    a2 = CAT.machine("a2-highgpu-8g")
    one_gpu = C.inter_host_collective(C.ALL_REDUCE, 1 * GIB, 4, 1, a2, a100)
    eight = C.inter_host_collective(C.ALL_REDUCE, 1 * GIB, 4, 8, a2, a100)
    nic = a2.nic_bandwidth * E.NIC_EFFICIENCY
    assert float(one_gpu.bus_bandwidth) == pytest.approx(nic, rel=0.02)
    assert float(eight.bus_bandwidth) == pytest.approx(nic * E.TCP_SHARED_NIC_EFFICIENCY, rel=0.02)


def test_tpu_all_axes_at_once_is_faster_than_one_after_another():
    v4 = CAT.accelerator("tpu-v4-podslice")
    m = 1 * GIB
    at_once = C.intra_host_collective(C.ALL_REDUCE, m, 64, v4, topology=(4, 4, 4))
    sequential = torus_allreduce(
        m, (4, 4, 4), v4.ici_link_bandwidth * E.ICI_EFFICIENCY, (True,) * 3, E.ICI_HOP_LATENCY
    )
    b = v4.ici_link_bandwidth * E.ICI_EFFICIENCY
    expected_bw = 2 * 63 / 64 * m / (6 * b)  # 3 wrapped axes, 2 rings each
    assert float(at_once.seconds) == pytest.approx(
        expected_bw + E.NCCL_BASE_LATENCY + 2 * 9 * E.ICI_HOP_LATENCY
    )
    assert float(sequential.seconds) / float(at_once.seconds) > 2.5


def test_ici_per_axis_bound_when_one_axis_dominates():
    m = 1 * GIB
    t = C.ici_collective(C.ALL_REDUCE, m, (16, 2, 1), (False, False, False), 50e9, 0.0)
    aggregate = 2 * 31 / 32 * m / (2 * 50e9)
    per_axis = 2 * 15 / 32 * m / 50e9
    assert float(t.seconds) == pytest.approx(max(aggregate, per_axis) + E.NCCL_BASE_LATENCY)


def test_multislice_adds_the_dcn_ring_of_shards():
    v5p = CAT.accelerator("tpu-v5p-slice")
    host = CAT.machine("ct5p-hightpu-4t")
    m = 1 * GIB
    inside = C.intra_host_collective(C.ALL_REDUCE, m, 64, v5p, topology=(4, 4, 4))
    two = C.inter_host_collective(
        C.ALL_REDUCE, m, 32, 4, host, v5p, chips_per_slice=64, slice_topology=(4, 4, 4)
    )
    dcn = 2 * 1 / 2 * m * 4 / 64 / (host.nic_bandwidth * E.NIC_EFFICIENCY)
    lat = E.NCCL_BASE_LATENCY + 2 * E.DCN_HOP_LATENCY
    assert float(two.seconds) == pytest.approx(float(inside.seconds) + dcn + lat)
    assert C.ALGORITHM_NAMES[int(two.algorithm)] == "ICI+DCN"


def test_reducer_limits_cpu_sum_and_share():
    nic = 4e9
    assert float(C.reducer_bandwidth(nic, 16, "fp32")) == pytest.approx(nic)  # NIC-bound
    # two vCPUs cannot sum bf16 at NIC speed: 2 x 1 GB/s
    assert float(C.reducer_bandwidth(nic, 2, "bf16")) == pytest.approx(
        min(2 * E.REDUCER_SUM_BYTES_PER_VCPU["bf16"], 2 * E.REDUCER_TCP_BYTES_PER_VCPU / 2)
    )
    assert float(C.reducer_bandwidth(nic, 16, "fp32", share=0.25)) == pytest.approx(nic / 4)


def test_reduction_server_hand_computed():
    m, n, k, rate = 1 * GIB, 8, 10, 4e9
    t = C.reduction_server_collective(m, n, 8, FABRIC, k, rate)
    intra = 2 * 7 / 8 * m / INTRA  # reduce-scatter + all-gather inside the host
    inter = max(m / NET, n * m / (k * rate))
    lat = 2 * (8.4 + 7 * 3.4) * US + E.NCCL_BASE_LATENCY + 2 * E.NETWORK_HOP_LATENCY
    assert float(t.seconds) == pytest.approx(max(intra, inter) + lat)
    assert int(t.bottleneck) == C.BOTTLENECK_REDUCERS


def test_pipeline_step_grows_with_the_message_up_to_a_full_step():
    sizes = 2.0 ** np.arange(10, 36)
    ring = C.pipeline_step_bytes(C.ALG_RING, sizes, 1, 8)
    # below one loop (16 channels x 8 ranks x 4-step chunks) the step is the message's share
    assert ring[0] == pytest.approx(1024 / (16 * 8 * 4))
    assert float(C.pipeline_step_bytes(C.ALG_RING, 256 * MIB, 1, 8)) == STEP
    tree = C.pipeline_step_bytes(C.ALG_TREE, sizes, 2, 8)
    assert float(C.pipeline_step_bytes(C.ALG_TREE, 4 * MIB, 2, 8)) == 4 * MIB / 16
    # NVLS halves its 128 KiB chunk for small messages (enqueue.cc, 16 channels x 8 heads)
    nvls = C.pipeline_step_bytes(C.ALG_NVLS, np.array([1, 16, 256, 1024]) * MIB, 1, 8)
    assert nvls.tolist() == [16384, 32768, 65536, 131072]
    nvls_tree = C.pipeline_step_bytes(C.ALG_NVLS_TREE, np.array([4, 16, 1024]) * MIB, [2, 2, 4], 8)
    assert nvls_tree.tolist() == [32768, 65536, 65536]  # 64 KiB at most on 4+ hosts
    # NCCL 2.20 started NVLSTree from the 512 KiB step: 32x / 16x / 4x / 1x concurrentOps rules
    old = C.pipeline_step_bytes(
        C.ALG_NVLS_TREE, np.array([4, 16, 64, 512, 2048]) * MIB, 2, 8, nvls_tree_chunk=STEP
    )
    assert old.tolist() == [32768, 65536, 131072, 262144, STEP]
    for step in (ring, tree, C.pipeline_step_bytes(C.ALG_NVLS, sizes, 1, 8)):
        assert np.all(np.diff(step) >= 0) and step.max() <= STEP


def test_pipeline_fill_leaves_nccls_choice_alone(monkeypatch):
    sizes = 2.0 ** np.arange(3, 35)
    hosts = np.array([1.0, 2.0, 4.0, 16.0])[:, None]
    h100 = C.GpuFabric(INTRA, NET, "nvlink", nvls_bandwidth=270e9, arch="hopper")
    with_fill = C.nccl_collective(C.ALL_REDUCE, sizes, hosts, 8, h100)
    monkeypatch.setattr(E, "PIPELINE_FILL_SECONDS_PER_STEP_BYTE", 0.0)
    monkeypatch.setattr(E, "RING_FILL_LINK_STEPS", 0.0)
    without = C.nccl_collective(C.ALL_REDUCE, sizes, hosts, 8, h100)
    assert np.array_equal(with_fill.algorithm, without.algorithm)  # NCCL's tuner does not see it
    assert np.array_equal(with_fill.protocol, without.protocol)
    extra = with_fill.seconds - without.seconds
    assert np.all(extra >= 0) and np.all(extra <= K * STEP * (1 + 1e-9))
    simple = with_fill.protocol == C.PROTO_SIMPLE
    assert np.all(extra[~simple] == 0)  # LL / LL128 pay none


def test_mid_size_ramp_8_a100_on_nvlink():
    # Azure's 8 x A100 ring (NCCL 2.18.5): 213.9 GB/s at 256 MiB, 228.1 at 1 GiB, 231.6 at 8 GiB.
    # The ring's fill at the link's rate (0.14 ms) makes the ramp; the network's per-byte fill
    # (0.94 ms a step) put 1 GiB at 208 and 256 MiB at 156.
    a100 = CAT.accelerator("nvidia-tesla-a100")
    t = C.intra_host_collective(C.ALL_REDUCE, np.array([0.25, 1.0, 8.0]) * GIB, 8, a100)
    busbw = t.bus_bandwidth / 1e9
    assert busbw == pytest.approx([213.9, 228.1, 231.6], rel=0.02)


def test_a_ring_inside_a_host_fills_at_its_links_rate():
    """A one-host ring's fill is RING_FILL_LINK_STEPS steps at the link's per-channel rate: a
    faster link fills sooner, and no NVLink ring pays the network's 0.94 ms step."""
    full = 1.0 * GIB
    fills = {}
    for name in ("nvidia-tesla-a100", "nvidia-h100-80gb", "amd-mi300x"):
        acc = CAT.accelerator(name)
        intra = C.link_bandwidth(acc, 8) * C.link_efficiency(acc.intra_link)
        fills[name] = float(C.pipeline_fill(C.ALG_RING, full, 1, 8, intra))
        steps = E.RING_FILL_LINK_STEPS * STEP * E.NCCL_ASSUMED_CHANNELS / float(intra)
        assert fills[name] == pytest.approx(steps)
    assert fills["nvidia-h100-80gb"] < fills["nvidia-tesla-a100"] < 0.2 * K * STEP
    # across hosts the ring keeps the network's fill, link or not
    assert float(C.pipeline_fill(C.ALG_RING, full, 2, 8, 300e9)) == pytest.approx(K * STEP)
    # a PCIe host keeps it too (no by-size PCIe curve is held)
    t4 = C.GpuFabric(25e9, np.inf, "pcie")
    with_fill = C.nccl_collective(C.ALL_REDUCE, full, 1, 4, t4, protocols={C.PROTO_SIMPLE})
    assert float(with_fill.seconds) > 1.5 * full / 25e9 + 0.9 * K * STEP


def test_two_gpu_tensor_parallel_all_reduce_grows_with_its_message():
    """Two H100s on NVLink: busbw rises with the message up to the link's plateau. Charged the
    network's fill, 64 MiB ran at a sixth of the plateau, below 16 MiB's rate."""
    h100 = CAT.accelerator("nvidia-h100-80gb")
    sizes = 2.0 ** np.arange(22, 31)  # from 4 MiB: Simple's sizes (LL128's own ramp below)
    busbw = C.intra_host_collective(C.ALL_REDUCE, sizes, 2, h100).bus_bandwidth / 1e9
    assert np.all(np.diff(busbw) >= -1e-6)
    assert busbw[sizes == 64 * MIB][0] > 0.6 * busbw[-1]


def test_gcp_gpudirect_transports_keep_the_nic_fraction_and_tcp_pays_its_own():
    assert CAT.machine("a3-megagpu-8g").transport == "tcpxo"
    # a published TCPXO run bounds the fraction from below (calibration.collectives)
    assert float(C.network_efficiency("tcpxo", 8)) == E.NIC_EFFICIENCY >= 185.3 / 200
    assert float(C.network_efficiency("tcpx", 8)) == E.NIC_EFFICIENCY  # no published run yet
    assert float(C.network_efficiency("tcp", 8)) == pytest.approx(
        E.NIC_EFFICIENCY * E.TCP_SHARED_NIC_EFFICIENCY
    )
    assert float(C.network_efficiency("tcp", 1)) == E.NIC_EFFICIENCY


def test_gcp_tcpxo_profile_runs_the_tree_bound_by_nvlink():
    # GCP's TCPXO profile (Ring / Tree, Simple) on 2 x a3-megagpu-8g: the tree carries 2M over
    # each GPU's NVLink and M over each host's NICs, so NVLink binds it (0.92 of half the link)
    a3, h100 = CAT.machine("a3-megagpu-8g"), CAT.accelerator("nvidia-h100-80gb")
    env = {"NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "Simple"}
    t = C.inter_host_collective(C.ALL_REDUCE, 8 * GIB, 2, 8, a3, h100, env=env)
    assert C.ALGORITHM_NAMES[int(t.algorithm)] == "Tree"
    nvlink = h100.intra_bandwidth * E.NVLINK_EFFICIENCY
    algbw = 8 * GIB / float(t.seconds)
    assert algbw == pytest.approx(nvlink / 2 * 0.92, rel=0.03)  # less latency and fill
