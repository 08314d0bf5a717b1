"""Every TrainingJob example is admitted on an empty local cluster: a worker that asks more than
a node of its pool has (the v5e example asked 180Gi of a node with 176 GiB allocatable) would
wait forever in `make demo`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ringmaster.api import TrainingJobSpec, topology_chips
from ringmaster.controllers.training_step import ReducerPool
from ringmaster.controllers.trainingjob import status_plan
from ringmaster.localcluster.pools import POOLS_BY_NAME
from tests.unit.training_world import TrainingWorld, job

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def slice_hosts(pool) -> int:
    if not pool.tpu_topology:
        return 0
    return topology_chips(pool.tpu_topology) // pool.accelerators_per_node


TRAINING = sorted(
    p for p in EXAMPLES.glob("*.yaml") if yaml.safe_load(p.read_text()).get("kind") == "TrainingJob"
)


@pytest.mark.parametrize("path", TRAINING, ids=lambda p: p.stem)
def test_a_training_example_is_admitted_on_an_empty_local_cluster(path):
    spec = TrainingJobSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
    # A TPU pool is one slice: as many hosts as its topology has chips per host (a v5e 16x16
    # pool starts empty in the local cluster but is 64 hosts on GKE).
    sizes = {
        name: max(pool.default_size, 8, slice_hosts(pool)) for name, pool in POOLS_BY_NAME.items()
    }
    world = TrainingWorld(sizes)
    settings = spec.communication.reduction_server
    shared = settings.pool_name if settings else None
    endpoints = tuple(f"r-{i}:5000" for i in range(16))
    pools = {shared: ReducerPool(shared, 16, 16, endpoints, "n1-highcpu-16")} if shared else {}
    decision = world.decide(job(spec), [], pools, planner=lambda s, m, r=None: status_plan(s, m, r))
    schedulable = [c for c in decision.status.conditions if c.type == "Schedulable"]
    assert decision.status.phase == "Admitted", [(c.reason, c.message) for c in schedulable]


ENDPOINTS = sorted(
    p
    for p in EXAMPLES.glob("*.yaml")
    if yaml.safe_load(p.read_text()).get("kind") == "InferenceEndpoint"
)


@pytest.mark.parametrize("path", ENDPOINTS, ids=lambda p: p.stem)
def test_an_endpoint_example_meets_its_target_within_its_replicas(path):
    """An example whose plan misses its target within maxReplicas is Degraded, and `make demo`
    waits for it to its timeout (the DeepSeek-R1 example's 20,000 tokens/s once the MoE layers
    ran as the engines run them)."""
    from ringmaster.api import InferenceEndpointSpec
    from ringmaster.planning import plan_inference

    spec = InferenceEndpointSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
    plan = plan_inference(spec).to_json()
    assert plan["feasible"], plan.get("reason")
