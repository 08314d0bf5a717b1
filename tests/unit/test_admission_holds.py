"""How the TrainingJob controller counts pods that admission has promised: each exactly once."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from ringmaster.controllers.trainingjob import TrainingController
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_list
from ringmaster.placement.pools import node_from_object

pytestmark = pytest.mark.unit
GPU8 = {"nvidia.com/gpu": Decimal(8)}
POOL = "a100-highgpu-8g"


def controller(seen_unbound: int, seen_bound: int) -> TrainingController:
    """Job ns/a was admitted with 4 workers; the watch shows some of its pods so far."""
    objects = node_list(dict.fromkeys(POOLS_BY_NAME, 0) | {POOL: 8})["items"]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    nodes = {o["metadata"]["name"]: [node_from_object(o)] for o in objects}
    bound_nodes = sorted(nodes)[:seen_bound]
    ctl = TrainingController.__new__(TrainingController)  # no API client, no queue needed
    ctl.ledger = {}
    ctl.reducers_asked = {}
    ctl.indexes = {
        "ringmaster_nodes": nodes,
        "ringmaster_pod_usage": {n: [GPU8] for n in bound_nodes},
        "ringmaster_worker_pods": {
            ("job", "ns", "a"): [object()] * (seen_unbound + seen_bound),
            ("promised", POOL): [(("ns", "a"), GPU8)] * seen_unbound,
        },
        "ringmaster_reducer_pods": {},
        "ringmaster_reduction_pools": {},
    }
    ctl.ledger[("ns", "a")] = (POOL, [GPU8] * 4, time.monotonic())
    return ctl


@pytest.mark.parametrize(("unbound", "bound"), [(0, 0), (1, 0), (2, 1), (0, 3)])
def test_a_promised_pod_counts_once_whether_decided_created_or_bound(unbound, bound):
    ctl = controller(unbound, bound)
    capacity = ctl.capacity(("ns", "b"))
    promised = len(capacity.promised.get(POOL, []))
    used = sum(1 for requests in capacity.used.values() if requests)
    assert promised + used == 4
    assert ("ns", "a") in ctl.ledger  # not all its pods are seen yet: the hold stays


def test_the_hold_ends_when_every_pod_is_seen_and_never_counts_for_its_own_job():
    ctl = controller(2, 2)
    assert len(ctl.capacity(("ns", "b")).promised[POOL]) == 2  # the two unbound ones
    assert ("ns", "a") not in ctl.ledger
    fresh = controller(0, 0)
    assert fresh.capacity(("ns", "a")).promised.get(POOL, []) == []
