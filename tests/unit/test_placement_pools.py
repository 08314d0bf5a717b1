"""Pool discovery, free capacity and gang fit, on node objects like the local cluster's."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list, node_manifest
from ringmaster.placement.pools import (
    discover_pools,
    gang_fits,
    node_from_object,
    pod_requests,
    used_by_node,
)

pytestmark = pytest.mark.unit
READY = [{"type": "Ready", "status": "True"}]
EIGHT_GPUS = {"nvidia.com/gpu": Decimal(8)}


def ready_nodes(sizes):
    objects = node_list(sizes)["items"]
    for obj in objects:
        obj["status"]["conditions"] = READY
    return [node_from_object(o) for o in objects]


def bound_pod(node, gpus, phase="Running"):
    return {
        "spec": {
            "nodeName": node,
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "2"}}}
            ],
        },
        "status": {"phase": phase},
    }


def test_pools_are_discovered_from_labels_with_their_shape():
    pools = discover_pools(ready_nodes({"a100-highgpu-8g": 3, "tpu-v4-2x2x4": 4}))
    a100 = pools["a100-highgpu-8g"]
    assert len(a100.nodes) == 3
    assert a100.identity.accelerator == "nvidia-tesla-a100"
    assert a100.accelerators_per_node == 8
    assert a100.accelerator_resource == "nvidia.com/gpu"
    assert a100.node_selector() == {"cloud.google.com/gke-nodepool": "a100-highgpu-8g"}
    tpu = pools["tpu-v4-2x2x4"]
    assert tpu.accelerator_resource == "google.com/tpu"
    assert tpu.identity.tpu_topology == "2x2x4"
    assert pools["reducers"].accelerator_resource is None


def test_nodes_without_a_pool_label_form_no_pool():
    obj = node_manifest(POOLS_BY_NAME["reducers"], 0)
    del obj["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
    assert discover_pools([node_from_object(obj)]) == {}


def test_requests_count_limits_of_extended_resources_and_the_largest_init_container():
    pod = {
        "spec": {
            "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
        }
    }
    assert pod_requests(pod) == {
        "nvidia.com/gpu": Decimal(4),
        "cpu": Decimal(4),
        "memory": Decimal(1024**3),
    }


def test_a_gang_fits_only_when_every_worker_fits():
    pool = discover_pools(ready_nodes({"a100-highgpu-8g": 4}))["a100-highgpu-8g"]
    assert gang_fits(pool, {}, EIGHT_GPUS, 4).fits
    # One node half used: only 3 whole-node workers remain.
    used = used_by_node([bound_pod("a100-highgpu-8g-0000", 4)])
    fit = gang_fits(pool, used, EIGHT_GPUS, 4)
    assert not fit.fits and fit.available == 3
    # 4-GPU workers: one slot on the half-used node, two on each of the other three.
    assert gang_fits(pool, used, {"nvidia.com/gpu": Decimal(4)}, 7).fits
    assert not gang_fits(pool, used, {"nvidia.com/gpu": Decimal(4)}, 8).fits


def test_finished_pods_and_cordoned_nodes():
    objects = node_list({"a100-highgpu-8g": 2})["items"]
    objects[0]["status"]["conditions"] = READY
    objects[1]["status"]["conditions"] = READY
    objects[1]["spec"]["unschedulable"] = True
    pool = discover_pools([node_from_object(o) for o in objects])["a100-highgpu-8g"]
    done = used_by_node([bound_pod("a100-highgpu-8g-0000", 8, phase="Succeeded")])
    assert gang_fits(pool, done, EIGHT_GPUS, 1).fits
    assert not gang_fits(pool, done, EIGHT_GPUS, 2).fits


def test_promised_pods_of_admitted_gangs_are_not_counted_twice():
    pool = discover_pools(ready_nodes({"a100-highgpu-8g": 4}))["a100-highgpu-8g"]
    first = [EIGHT_GPUS] * 3  # admitted, not yet bound
    assert gang_fits(pool, {}, EIGHT_GPUS, 1, promised=first).fits
    assert not gang_fits(pool, {}, EIGHT_GPUS, 2, promised=first).fits


def test_one_worker_per_host_for_tpu_slices():
    pool = discover_pools(ready_nodes({"tpu-v4-2x2x4": 4}))["tpu-v4-2x2x4"]
    two_chips = {"google.com/tpu": Decimal(2)}
    assert gang_fits(pool, {}, two_chips, 8).fits
    assert not gang_fits(pool, {}, two_chips, 8, one_per_node=True).fits
    assert gang_fits(pool, {}, two_chips, 4, one_per_node=True).fits


def test_a_cpu_pool_fits_no_gpu_pod():
    pool = discover_pools(ready_nodes({"reducers": 4}))["reducers"]
    assert gang_fits(pool, {}, EIGHT_GPUS, 1).available == 0
