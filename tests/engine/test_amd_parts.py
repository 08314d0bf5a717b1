"""AMD Instinct MI300X / MI325X: the catalog entries and their sources, RCCL's all-reduce over the
xGMI mesh (ring and tree at XGMI_EFFICIENCY, never NVLS), a TrainingJob and an LLM endpoint
planned on them, and a pool of MI300X nodes found from AMD's labels whose pods ask for
amd.com/gpu."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from ringmaster.api.manifest import parse_manifest
from ringmaster.calibration.collectives import FABRIC_POINTS, xgmi_efficiency, xgmi_rows
from ringmaster.calibration.points import FITTED, load_points
from ringmaster.controllers.training_step import accelerator_resource
from ringmaster.engine import collectives as C
from ringmaster.engine import efficiency as E
from ringmaster.engine.hardware import DEFAULT_CATALOG, XGMI_LINKS_PER_GPU
from ringmaster.engine.units import GIB
from ringmaster.manifests.training import PoolPlacement, worker_pod
from ringmaster.placement.labels import AMD_GPU_RESOURCE, pool_identity
from ringmaster.placement.pools import discover_pools, node_from_object
from ringmaster.planning import plan_inference, plan_training

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
AMD = ("amd-mi300x", "amd-mi325x")


def example(name: str, accelerator: dict[str, Any]) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    doc["spec"]["accelerator"] = copy.deepcopy(accelerator)
    return doc


# --- the catalog ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", AMD)
def test_amd_parts_are_in_the_catalog_with_their_datasheet(name: str) -> None:
    acc = DEFAULT_CATALOG.accelerator(name)
    tag = "[MI300X-DS]" if name == "amd-mi300x" else "[MI325X-DS]"
    assert tag in acc.source and "[ROCM-XGMI]" in acc.source
    # Dense datasheet peaks: the two share CDNA 3's compute.
    assert acc.peak("bf16") == pytest.approx(1307.4e12)
    assert acc.peak("fp8") == acc.peak("int8") == pytest.approx(2614.9e12)
    assert acc.peak("fp32") == pytest.approx(163.4e12)
    assert acc.intra_link == "xgmi" and acc.nccl_arch == "cdna3" and not acc.nvswitch
    assert acc.intra_bandwidth == pytest.approx(XGMI_LINKS_PER_GPU * 64e9)  # 7 x 64 GB/s
    host = DEFAULT_CATALOG.host(name, 8)
    assert host.machine.transport == "rdma" and host.machine.nics == 8
    assert host.machine.nic_gbps == pytest.approx(400.0)
    assert host.machine.source


def test_mi325x_carries_more_and_faster_memory_than_mi300x() -> None:
    mi300x, mi325x = (DEFAULT_CATALOG.accelerator(n) for n in AMD)
    assert mi300x.memory_bandwidth == pytest.approx(5.3e12)
    assert mi325x.memory_bandwidth == pytest.approx(6.0e12)
    assert mi300x.memory_bytes == pytest.approx(205822885888)  # rocm-smi's VRAM total
    assert mi325x.memory_bytes > mi300x.memory_bytes


def test_the_azure_host_is_the_default_mi300x_machine() -> None:
    machine = DEFAULT_CATALOG.default_machine("amd-mi300x", 8)
    assert machine.name == "Standard_ND96isr_MI300X_v5" and machine.accelerator_count == 8
    assert "assumed" in machine.source  # no published on-demand price found


# --- RCCL over xGMI ----------------------------------------------------------------------------


def test_an_8_gpu_all_reduce_runs_a_ring_over_xgmi_at_its_efficiency_and_no_nvls() -> None:
    mi300x = DEFAULT_CATALOG.accelerator("amd-mi300x")
    assert C.nvls_bandwidth(mi300x) == 0.0
    t = C.intra_host_collective(C.ALL_REDUCE, 8 * GIB, 8, mi300x)
    assert C.ALGORITHM_NAMES[int(t.algorithm)] == "Ring"
    line = 448e9 * E.XGMI_EFFICIENCY
    busbw = float(t.bus_bandwidth)
    assert 0.97 * line < busbw < line  # the line rate at the fitted efficiency, less fill
    # NCCL_ALGO=NVLS leaves RCCL nothing to run here: no such algorithm on AMD.
    nvls = C.intra_host_collective(C.ALL_REDUCE, 8 * GIB, 8, mi300x, env={"NCCL_ALGO": "NVLS"})
    assert np.isinf(float(nvls.seconds))


def test_fewer_gpus_of_the_mesh_use_only_the_links_between_them() -> None:
    mi300x = DEFAULT_CATALOG.accelerator("amd-mi300x")
    per_link = mi300x.intra_bandwidth / XGMI_LINKS_PER_GPU
    assert C.link_bandwidth(mi300x, [2, 4, 8]) == pytest.approx(
        [per_link, 3 * per_link, 7 * per_link]
    )
    four = float(C.intra_host_collective(C.ALL_REDUCE, 8 * GIB, 4, mi300x).bus_bandwidth)
    eight = float(C.intra_host_collective(C.ALL_REDUCE, 8 * GIB, 8, mi300x).bus_bandwidth)
    assert four == pytest.approx(eight * 3 / 7, rel=0.02)
    h100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")  # a switch: every GPU at full rate
    assert C.link_bandwidth(h100, 4) == pytest.approx(h100.intra_bandwidth)


def test_xgmi_efficiency_is_its_fit_on_the_published_rccl_run() -> None:
    fabric = load_points(FABRIC_POINTS)
    assert xgmi_efficiency(fabric, E.RING_FILL_LINK_STEPS) == pytest.approx(
        E.XGMI_EFFICIENCY, abs=1e-4
    )
    rows = xgmi_rows(fabric)
    fitted = [r for r in rows if r.status == FITTED]
    assert len(fitted) == 1 and abs(fitted[0].error or 0.0) <= fitted[0].tolerance
    checked = [r for r in rows if r.error is not None]
    assert all(abs(r.error or 0.0) <= r.tolerance for r in checked)


# --- planning -------------------------------------------------------------------------------------


def test_a_training_job_on_mi300x_plans_on_the_azure_host() -> None:
    doc = example("trainingjob-llama3-8b-fsdp-h100.yaml", {"type": "amd-mi300x", "perWorker": 8})
    report = plan_training(parse_manifest(doc).spec).to_json()  # type: ignore[arg-type]
    assert report["machineType"] == "Standard_ND96isr_MI300X_v5"
    assert report["fits"] and report["strategies"]["Ring"]["stepSeconds"] > 0
    assert report["strategies"]["Ring"]["costPerHourUSD"] == pytest.approx(2 * 8 * 6.00)


def test_an_llm_endpoint_on_mi300x_plans_tensor_parallel_over_xgmi() -> None:
    doc = example(
        "inferenceendpoint-llama3-70b-a100-tp4.yaml", {"type": "amd-mi300x", "perReplica": 8}
    )
    plan = plan_inference(parse_manifest(doc).spec).to_json()  # type: ignore[arg-type]
    assert plan["feasible"] and plan["tensorParallel"] == 8 and plan["replicas"] >= 1
    assert plan["machineType"] == "Standard_ND96isr_MI300X_v5"
    assert plan["outputTokensPerSecondPerReplica"] > 0


# --- node pools -----------------------------------------------------------------------------------


def mi300x_node(name: str) -> dict[str, Any]:
    """An AKS node of an ND MI300X v5 pool as AMD's device plugin and node labeller label it."""
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.azure.com/agentpool": "mi300x",
                "node.kubernetes.io/instance-type": "Standard_ND96isr_MI300X_v5",
                "amd.com/gpu.device-id": "74b5",  # the MI300X's SR-IOV function, as Azure exposes
            },
        },
        "status": {
            "allocatable": {"amd.com/gpu": "8", "cpu": "96", "memory": "1800Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_pool_of_mi300x_nodes_is_found_from_amd_labels() -> None:
    pools = discover_pools(node_from_object(mi300x_node(f"aks-mi300x-{i}")) for i in range(2))
    pool = pools["mi300x"]
    assert pool.identity.accelerator == "amd-mi300x"
    assert pool.identity.instance_type == "Standard_ND96isr_MI300X_v5"
    assert pool.accelerators_per_node == 8 and pool.accelerator_resource == AMD_GPU_RESOURCE
    assert pool.node_selector() == {"kubernetes.azure.com/agentpool": "mi300x"}
    assert pool_identity({"amd.com/gpu.device-id": "74a5"}).accelerator == "amd-mi325x"


def test_mi300x_worker_pods_request_and_tolerate_amd_gpus() -> None:
    doc = example("trainingjob-llama3-8b-fsdp-h100.yaml", {"type": "amd-mi300x", "perWorker": 8})
    spec = parse_manifest(doc).spec
    resource = accelerator_resource(spec)  # type: ignore[arg-type]
    assert resource == "amd.com/gpu"
    placement = PoolPlacement("mi300x", {"kubernetes.azure.com/agentpool": "mi300x"}, resource)
    pod = worker_pod("llama", "default", spec, placement, 0, 0)  # type: ignore[arg-type]
    container = pod["spec"]["containers"][0]
    assert str(container["resources"]["limits"]["amd.com/gpu"]) == "8"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]
