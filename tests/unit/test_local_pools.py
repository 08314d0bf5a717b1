"""The simulated node pools and the kind config carry labels that placement recognises."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.localcluster.cluster import pool_summary
from ringmaster.localcluster.pools import (
    BLOCK_HOSTS,
    NVL72_TRAYS,
    POOLS,
    POOLS_BY_NAME,
    node_list,
    node_manifest,
    parse_sizes,
)
from ringmaster.placement import labels as L
from ringmaster.placement.topology import (
    GKE_BLOCK,
    GKE_SUBBLOCK,
    NVLINK_CLIQUE,
    choose_hosts,
    node_topology,
    topologies,
)

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p.name)
def test_node_identity_round_trips_through_placement(pool):
    node = node_manifest(pool, 0)
    identity = L.pool_identity(node["metadata"]["labels"])
    assert identity.pool == pool.name
    assert identity.instance_type == pool.instance_type
    assert identity.accelerator == pool.accelerator
    assert identity.tpu_topology == pool.tpu_topology


def test_accelerator_nodes_are_tainted_and_advertise_their_devices():
    gpu = node_manifest(POOLS_BY_NAME["a100-highgpu-8g"], 3)
    tpu = node_manifest(POOLS_BY_NAME["tpu-v4-2x2x4"], 0)
    cpu = node_manifest(POOLS_BY_NAME["reducers"], 0)
    assert gpu["metadata"]["name"] == "a100-highgpu-8g-0003"
    assert gpu["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert tpu["spec"]["taints"][0]["key"] == "google.com/tpu"
    assert tpu["status"]["allocatable"]["google.com/tpu"] == "4"
    assert "taints" not in cpu["spec"]
    assert not {"nvidia.com/gpu", "google.com/tpu"} & set(cpu["status"]["allocatable"])


def test_pool_sizes_are_parameters():
    nodes = node_list({"a100-highgpu-8g": 1000, "reducers": 0})["items"]
    names = [n["metadata"]["name"] for n in nodes]
    assert sum(n.startswith("a100-highgpu-8g-") for n in names) == 1000
    assert not any(n.startswith("reducers-") for n in names)
    assert len(set(names)) == len(names)
    assert (
        sum(n.startswith("tpu-v4-2x2x4-") for n in names)
        == POOLS_BY_NAME["tpu-v4-2x2x4"].default_size
    )


@pytest.mark.parametrize("bad", ["a100-highgpu-8g", "a100-highgpu-8g=x", "nosuchpool=3"])
def test_bad_pool_sizes_are_refused(bad):
    with pytest.raises(ValueError):
        parse_sizes([bad])


def test_pool_summary_counts_ready_nodes():
    nodes = node_list({"a100-highgpu-8g": 2, "reducers": 1})["items"]
    nodes[0]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    rows = {r["pool"]: r for r in pool_summary(nodes)}
    assert rows["a100-highgpu-8g"]["nodes"] == 2
    assert rows["a100-highgpu-8g"]["ready"] == 1
    assert rows["a100-highgpu-8g"]["acceleratorsPerNode"] == 8
    assert rows["reducers"]["accelerator"] == ""


def test_kind_config_workers_carry_recognised_pool_labels():
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    assert workers
    known = {p.name: p for p in POOLS}
    seen_accelerators = set()
    for worker in workers:
        labels = worker["labels"]
        assert set(labels) <= L.RECOGNISED_LABELS, set(labels) - L.RECOGNISED_LABELS
        identity = L.pool_identity(labels)
        assert identity.pool and identity.instance_type
        if identity.accelerator:
            seen_accelerators.add(identity.accelerator)
        # A pool that also exists locally must describe the same machine.
        if identity.pool in known:
            assert known[identity.pool].instance_type == identity.instance_type
            assert known[identity.pool].accelerator == identity.accelerator
        # Accelerator nodes must be tainted like GKE taints them.
        if identity.accelerator:
            patch = yaml.safe_load(worker["kubeadmConfigPatches"][0])
            taint_keys = {t["key"] for t in patch["nodeRegistration"]["taints"]}
            assert taint_keys & set(L.ACCELERATOR_TAINT_KEYS)
    assert {"nvidia-tesla-a100", "tpu-v4-podslice", "nvidia-tesla-t4"} <= seen_accelerators


def test_gpu_feature_discovery_labels_alone_identify_the_accelerator():
    identity = L.pool_identity({L.GFD_GPU_PRODUCT: "NVIDIA-A100-SXM4-40GB"})
    assert identity.accelerator == "nvidia-tesla-a100"
    assert identity.pool is None


def test_a_cluster_with_an_exited_component_is_not_healthy(tmp_path, monkeypatch):
    """kwokctl does not restart a component that exits; `cluster up` must notice and recreate."""
    import os
    import subprocess

    from ringmaster.localcluster.cluster import Binaries, LocalCluster

    monkeypatch.setenv("RINGMASTER_CACHE_DIR", str(tmp_path))
    cluster = LocalCluster(Binaries(tmp_path), "probe")
    pids = cluster.kubeconfig.parent / "pids"
    pids.mkdir(parents=True)
    assert not cluster.components_alive()  # nothing started
    (pids / "etcd.pid").write_text(str(os.getpid()))
    assert cluster.components_alive()
    exited = subprocess.Popen(["true"])
    exited.wait()
    (pids / "kube-controller-manager.pid").write_text(str(exited.pid))
    assert not cluster.components_alive()


@pytest.mark.parametrize("pool", [p for p in POOLS if p.accelerator], ids=lambda p: p.name)
def test_every_accelerator_pool_is_one_the_built_in_catalog_can_place(pool):
    from ringmaster.engine.hardware import DEFAULT_CATALOG
    from ringmaster.planning.catalog import hardware_problem

    assert hardware_problem(DEFAULT_CATALOG, pool.accelerator, pool.accelerators_per_node) is None
    host = DEFAULT_CATALOG.host(pool.accelerator, pool.accelerators_per_node, pool.instance_type)
    assert host.machine.vcpus == pool.vcpus or host.machine.accelerator is None, pool.name


def test_kwoks_pod_workers_are_set_with_every_parallelism_kwok_needs():
    """A KwokConfiguration replaces kwok's defaults: a zero node lease parallelism makes kwok
    exit and leaves every node NotReady."""
    import yaml

    from ringmaster.localcluster.cluster import kwok_configuration

    document = yaml.safe_load(kwok_configuration(32))
    assert document["kind"] == "KwokConfiguration"
    options = document["options"]
    assert options["podPlayStageParallelism"] == 32
    assert options["nodePlayStageParallelism"] > 0 and options["nodeLeaseParallelism"] > 0


def test_cluster_up_names_the_component_that_is_gone_and_deletes_nothing_unasked(
    tmp_path, monkeypatch
):
    """A cluster that exists is never deleted by `cluster up` without --recreate; one whose
    component exited is reported by component, and one restarted by hand counts as running."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from ringmaster.localcluster.cluster import Binaries, ClusterError, LocalCluster

    monkeypatch.setenv("RINGMASTER_CACHE_DIR", str(tmp_path))
    cluster = LocalCluster(Binaries(tmp_path), "probe")
    pids = cluster.kubeconfig.parent / "pids"
    pids.mkdir(parents=True)
    cluster.kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    exited = subprocess.Popen(["true"])
    exited.wait()
    (pids / "kube-scheduler.pid").write_text(str(exited.pid))
    answers = subprocess.CompletedProcess([], 0)
    monkeypatch.setattr(cluster, "kubectl", lambda *a, **k: answers)
    deleted: list[bool] = []

    def down() -> None:
        deleted.append(True)
        cluster.kubeconfig.unlink()

    monkeypatch.setattr(cluster, "down", down)
    monkeypatch.setattr(cluster, "_create", lambda *_: None)
    monkeypatch.setattr(cluster, "apply_nodes", lambda *_: None)
    with pytest.raises(ClusterError, match=r"kube-scheduler is not running .*--recreate"):
        cluster.up({})
    assert deleted == []
    # Restarted by hand: another pid, this cluster's files on its command line.
    again = subprocess.Popen(
        [
            "kube-scheduler",
            "-c",
            "import time; time.sleep(30)",
            f"--kubeconfig={cluster.kubeconfig}",
        ],
        executable=sys.executable,
    )
    try:
        cmdline = Path(f"/proc/{again.pid}/cmdline")
        for _ in range(100):  # until the child has exec'd under its new name
            if cmdline.read_bytes().startswith(b"kube-scheduler"):
                break
            time.sleep(0.02)
        assert cluster.component_problems() == []
        cluster.up({})
        assert deleted == []
    finally:
        again.kill()
        again.wait()
    # Asked: deleted and created anew.
    cluster.up({}, recreate=True)
    assert deleted == [True]


# --- topology labels (issue 43) ------------------------------------------------------------------


def test_gpu_hosts_fill_blocks_in_order_and_keep_their_labels_when_a_pool_grows():
    pool = POOLS_BY_NAME["a100-highgpu-8g"]
    assert pool.block_hosts == BLOCK_HOSTS == 16
    small = node_list({pool.name: 8})["items"]
    grown = node_list({pool.name: 40})["items"]
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in grown}
    blocks = [labels[f"{pool.name}-{i:04d}"][GKE_BLOCK] for i in range(40)]
    assert blocks == ["b0"] * 16 + ["b1"] * 16 + ["b2"] * 8
    # a resize adds hosts; the hosts there keep their blocks (the labels follow the index)
    assert all(labels[n["metadata"]["name"]] == n["metadata"]["labels"] for n in small)
    assert GKE_SUBBLOCK not in labels[f"{pool.name}-0000"]
    assert NVLINK_CLIQUE not in labels[f"{pool.name}-0000"]


@pytest.mark.parametrize("name", ["t4-serving", "tpu-v4-2x2x4", "reducers", "default-pool"])
def test_pools_without_a_topology_carry_none(name):
    labels = node_manifest(POOLS_BY_NAME[name], 0)["metadata"]["labels"]
    assert not {GKE_BLOCK, GKE_SUBBLOCK, NVLINK_CLIQUE} & set(labels)
    assert not node_topology(labels).packable


def test_gb200_trays_are_in_nvl72_racks_of_18_one_clique_and_subblock_each():
    pool = POOLS_BY_NAME["gb200-nvl72"]
    assert (pool.instance_type, pool.accelerator, pool.accelerators_per_node) == (
        "a4x-highgpu-4g",
        "nvidia-gb200",
        4,
    )
    assert pool.default_size == 0  # 18 hosts a rack: sized with --pool gb200-nvl72=36
    trays = [node_manifest(pool, i)["metadata"]["labels"] for i in range(NVL72_TRAYS * 5)]
    topo = [node_topology(t) for t in trays]
    # a clique per rack of 18 trays, 72 GPUs: what the catalog's a4x-highgpu-4g says
    assert DEFAULT_CATALOG.machine("a4x-highgpu-4g").nvlink_domain == NVL72_TRAYS * 4
    assert len({t.clique for t in topo}) == 5
    assert all(topo[i].clique == topo[i // NVL72_TRAYS * NVL72_TRAYS].clique for i in range(90))
    assert topo[17].clique != topo[18].clique
    # the GCE sub-block is the rack (the NVLink domain); blocks of 4 racks
    assert [t.value(GKE_SUBBLOCK) for t in topo[16:20]] == ["s0", "s0", "s1", "s1"]
    assert {t.value(GKE_BLOCK) for t in topo[:72]} == {"b0"} and topo[72].value(GKE_BLOCK) == "b1"
    assert topo[72].value(GKE_SUBBLOCK) == "s0"
    # GPU Feature Discovery's format: <cluster UUID>.<clique id>
    assert trays[18][NVLINK_CLIQUE].endswith(".1") and len(trays[18][NVLINK_CLIQUE]) <= 63


def test_a_tensor_group_across_trays_is_placed_inside_one_rack():
    """placement.topology reads the pool's labels: a gang of 4 trays in TP groups of 2, tray 16
    busy, gets the 4 trays of the second rack, not 17-20 (which would split a group)."""
    pool = POOLS_BY_NAME["gb200-nvl72"]
    free = topologies(
        (n["metadata"]["name"], n["metadata"]["labels"])
        for n in (node_manifest(pool, i) for i in range(17, 22))
    )
    choice = choose_hosts(free, 4, (2,))
    assert choice is not None and choice.nvlink_intact
    assert choice.hosts == tuple(f"gb200-nvl72-{i:04d}" for i in range(18, 22))


def test_node_list_takes_other_pool_definitions():
    """The scale bench's blocks of another size, or none."""
    pool = POOLS_BY_NAME["a100-highgpu-8g"]
    pools = [replace(pool, block_hosts=32)]
    nodes = node_list({pool.name: 64}, pools)["items"]
    assert {n["metadata"]["labels"][GKE_BLOCK] for n in nodes} == {"b0", "b1"}
    bare = node_list({pool.name: 4}, [replace(pool, block_hosts=0)])["items"]
    assert not any(GKE_BLOCK in n["metadata"]["labels"] for n in bare)
    with pytest.raises(ValueError):
        node_list({"reducers": 1}, pools)
