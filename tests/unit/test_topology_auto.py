"""Issue 43: ``spec.placement.topology: Auto`` asks the engine. The plan carries the step of the
job's own layout (or all-reduce) under each placement (planning/placement.py); Auto requires a
level whose spread placement loses more than the threshold, prefers it otherwise; the waiting
message carries the numbers and status.admission the step of the placement taken."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from ringmaster.admission.cycle import (
    TOPOLOGY_UNAVAILABLE,
    Admit,
    GangOption,
    QueueingSettings,
    Wait,
    WaitingGang,
    admission_pass,
)
from ringmaster.admission.snapshot import ClusterSnapshot, NodeFacts, shape
from ringmaster.api import TrainingJobSpec, TrainingPlan, load_manifests
from ringmaster.api.trainingjob import PlacementPlan, PlacementStep
from ringmaster.controllers.training_admission import topology_demand
from ringmaster.engine.hardware import DEFAULT_CATALOG, Catalog
from ringmaster.engine.placement_cost import (
    DEFAULT_LOSS_THRESHOLD_PERCENT,
    DEFAULT_SPINE_OVERSUBSCRIPTION,
    PlacementShape,
)
from ringmaster.localcluster.pools import POOLS_BY_NAME, node_manifest
from ringmaster.placement.pools import node_from_object
from ringmaster.placement.topology import GKE_BLOCK, NVLINK_CLIQUE
from ringmaster.planning import plan_training
from ringmaster.planning.catalog import apply_catalog, parse_catalog
from ringmaster.planning.placement import (
    PACKED,
    PACKED_IN_BLOCKS,
    SPREAD,
    TENSOR_OVER_NICS,
    placement_of,
)
from tests.unit.training_world import (
    NOW,
    REDUCER_REQUEST,
    TrainingWorld,
    bound_pod,
    job,
    spec,
    untopologised_node_objects,
)

pytestmark = pytest.mark.unit
POOL = "a100-highgpu-8g"
GB200_POOL = "gb200-nvl72"

NVL72_JOB = """
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: llama70b-nvl72}
spec:
  workers: 36
  accelerator: {type: nvidia-gb200, perWorker: 4}
  model:
    architecture: {layers: 80, hiddenSize: 8192, attentionHeads: 64, kvHeads: 8,
                   ffnHiddenSize: 28672, ffnType: Gated, vocabSize: 32000, sequenceLength: 4096}
  parallelism: {tensor: Auto, pipeline: 1, sharding: None, globalBatchSize: 288}
  communication: {strategy: Ring}
  template: {image: nvcr.io/nvidia/nemo:24.07}
"""


def ring(workers: int) -> TrainingJobSpec:
    """A data-parallel job of ``workers`` A100 hosts that all-reduces in a ring (no reducers)."""
    return spec(workers=workers, communication={"strategy": "Ring"})


def catalog_with_spine(oversubscription: float) -> Catalog:
    text = f"machineTypes: {{a2-highgpu-8g: {{spineOversubscription: {oversubscription}}}}}"
    return apply_catalog(DEFAULT_CATALOG, parse_catalog(text))


def planner_on(catalog: Catalog):  # type: ignore[no-untyped-def]
    """The operator's planner (trainingjob.status_plan) over ``catalog``."""

    def plan(the_spec: Any, machine_type: str | None, reducers: Any = None) -> TrainingPlan:
        return plan_training(the_spec, machine_type=machine_type, catalog=catalog).to_status()

    return plan


def nvl72_spec() -> TrainingJobSpec:
    (m,) = load_manifests(NVL72_JOB, source="test")
    assert isinstance(m.spec, TrainingJobSpec)
    return m.spec


def a100_world(blocks: list[int], busy: list[int]) -> TrainingWorld:
    """Hosts of the A100 pool, host i in block b<blocks[i]>, the hosts in ``busy`` taken."""
    world = TrainingWorld({"tpu-v4-2x2x4": 0})
    objects = untopologised_node_objects({POOL: len(blocks)})
    for obj, block in zip(objects, blocks, strict=True):
        obj["metadata"]["labels"][GKE_BLOCK] = f"b{block}"
    facts = [NodeFacts.from_node(node_from_object(o)) for o in objects]
    pods = [bound_pod(f"p{i}", facts[i].name) for i in busy]
    world.snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, facts, pods)
    return world


def gb200_trays(cliques: list[int]) -> list[NodeFacts]:
    """GB200 NVL72 trays (a4x-highgpu-4g, 4 GPUs), tray i in NVLink clique c<cliques[i]>."""
    objects = untopologised_node_objects({POOL: len(cliques)})
    for i, (obj, clique) in enumerate(zip(objects, cliques, strict=True)):
        name = f"{GB200_POOL}-{i:04d}"
        labels = obj["metadata"]["labels"]
        obj["metadata"]["name"] = labels["kubernetes.io/hostname"] = name
        labels["cloud.google.com/gke-nodepool"] = GB200_POOL
        labels["node.kubernetes.io/instance-type"] = "a4x-highgpu-4g"
        labels["cloud.google.com/gke-accelerator"] = "nvidia-gb200"
        labels["nvidia.com/gpu.count"] = "4"
        labels.pop("nvidia.com/gpu.product", None)
        labels[NVLINK_CLIQUE] = f"c{clique}"
        for kind in ("allocatable", "capacity"):
            obj["status"][kind]["nvidia.com/gpu"] = "4"
    return [NodeFacts.from_node(node_from_object(o)) for o in objects]


# --- the plan: the step per placement, and Auto's choice -----------------------------------------


def test_a_data_parallel_job_stays_preferred_on_a_non_blocking_spine() -> None:
    report = plan_training(spec(workers=4), machine_type="a2-highgpu-8g")
    table = report.placement
    assert table is not None and table.spine_oversubscription == DEFAULT_SPINE_OVERSUBSCRIPTION
    assert table.row(SPREAD).step_seconds == table.row(PACKED).step_seconds  # type: ignore[union-attr]
    assert table.block == "Preferred" and table.nvlink_clique is None
    placement = report.to_status().placement
    assert placement is not None and placement.block == "Preferred"
    assert placement.spine_oversubscription == 1.0  # the catalog states none: the default
    assert topology_demand("Auto", report.to_status()).block == "Preferred"


def test_a_spine_oversubscription_from_the_catalog_makes_auto_require_a_block() -> None:
    report = plan_training(
        spec(workers=4), machine_type="a2-highgpu-8g", catalog=catalog_with_spine(2.0)
    )
    table = report.placement
    assert table is not None and table.spine_oversubscription == 2.0
    spread = table.row(SPREAD)
    assert spread is not None and spread.loss_percent > DEFAULT_LOSS_THRESHOLD_PERCENT
    assert table.block == "Required"
    demand = topology_demand("Auto", report.to_status())
    assert demand.block == "Required" and demand.auto
    assert "spread over blocks the step is" in demand.block_why
    assert f"above the {DEFAULT_LOSS_THRESHOLD_PERCENT:g} % threshold" in demand.block_why
    # The user's word stands: Preferred never waits, whatever the engine says.
    assert topology_demand("Preferred", report.to_status()).block == "Preferred"
    assert topology_demand("Required", None).block == "Required"


def test_an_nvl72_tensor_group_over_trays_makes_auto_require_its_clique() -> None:
    report = plan_training(nvl72_spec())
    assert report.layout is not None and report.layout.chosen.tensor == 8  # 2 trays of 4
    table = report.placement
    assert table is not None and table.tensor_group_hosts == 2
    split = table.row(TENSOR_OVER_NICS)
    assert split is not None and split.loss_percent > DEFAULT_LOSS_THRESHOLD_PERCENT
    assert table.nvlink_clique == "Required"
    assert table.block == "Preferred"  # non-blocking spine: blocks cost nothing
    demand = topology_demand("Auto", report.to_status())
    assert (demand.block, demand.cliques) == ("Preferred", "Required")
    assert "split over cliques" in demand.cliques_why


def test_one_host_and_tpu_slices_have_no_placement_table() -> None:
    assert plan_training(spec(workers=1)).placement is None
    tpu = spec(workers=4, per_worker=4, accelerator="tpu-v4-podslice", topology="2x2x4")
    assert plan_training(tpu).placement is None
    assert topology_demand("Auto", None).block == "Preferred"


def test_an_admitted_placement_is_named_after_the_plans_rows() -> None:
    llm = {PACKED, PACKED_IN_BLOCKS, SPREAD, TENSOR_OVER_NICS}
    assert placement_of(PlacementShape(), llm) == PACKED
    assert placement_of(PlacementShape(blocks=3), llm) == PACKED_IN_BLOCKS
    assert placement_of(PlacementShape(blocks=3, groups_cross_blocks=True), llm) == SPREAD
    assert placement_of(PlacementShape(nvlink_intact=False), llm) == TENSOR_OVER_NICS
    # A data-parallel job has no groups: several blocks are spread.
    assert placement_of(PlacementShape(blocks=2), {PACKED, SPREAD}) == SPREAD


# --- admission: Auto required waits with the numbers, records the step taken -----------------


def test_auto_required_by_the_engine_waits_for_a_block_with_the_numbers() -> None:
    # Blocks b0 (hosts 0-3), b1 (4-7), b2 (8-9): one busy host in each of b0 and b1.
    world = a100_world([0, 0, 0, 0, 1, 1, 1, 1, 2, 2], busy=[0, 4])
    planner = planner_on(catalog_with_spine(2.0))
    decision = world.decide(job(ring(4)), planner=planner)
    assert decision.status.phase == "Pending"
    [cond] = [c for c in decision.status.conditions if c.type == "Schedulable"]
    assert cond.reason == TOPOLOGY_UNAVAILABLE
    assert "needs 4 hosts of pool a100-highgpu-8g in one block" in cond.message
    assert "block b0: 3 free, b1: 3, b2: 2" in cond.message
    assert "spread over blocks the step is" in cond.message and "% slower" in cond.message
    assert "spec.placement.topology: Auto" in cond.message
    # The same job on a non-blocking spine is admitted over two blocks, and says what it costs.
    admitted = world.decide(job(ring(4)), planner=planner_on(DEFAULT_CATALOG))
    admission = admitted.status.admission
    assert admission is not None and admission.blocks and len(admission.blocks) == 2
    plan = admitted.status.plan
    assert plan is not None and plan.placement is not None
    assert admission.placement == SPREAD
    assert admission.predicted_step_seconds == plan.placement.steps[0].step_seconds


def test_auto_required_is_admitted_in_one_block_and_records_the_packed_step() -> None:
    world = a100_world([0, 0, 0, 0, 1, 1, 1, 1], busy=[0])
    decision = world.decide(job(ring(4)), planner=planner_on(catalog_with_spine(2.0)))
    admission = decision.status.admission
    assert admission is not None and admission.blocks == ["b1"]
    plan = decision.status.plan
    assert plan is not None and plan.placement is not None and plan.placement.block == "Required"
    assert admission.placement == PACKED
    assert admission.predicted_step_seconds == pytest.approx(plan.step_seconds, rel=1e-5)


def test_auto_does_not_wait_for_a_block_no_block_of_the_pool_could_hold() -> None:
    # Six workers, blocks of four: Auto packs into the fewest blocks instead of waiting forever.
    world = a100_world([0, 0, 0, 0, 1, 1, 1, 1], busy=[])
    decision = world.decide(job(ring(6)), planner=planner_on(catalog_with_spine(2.0)))
    admission = decision.status.admission
    assert admission is not None and admission.blocks == ["b0", "b1"]


# --- NVL72: each tensor-parallel group in one NVLink clique ---------------------------------------


def nvl72_gang(cliques: str = "Required", auto: bool = True) -> WaitingGang:
    worker = shape({"nvidia.com/gpu": Decimal(4)})
    option = GangOption(
        GB200_POOL,
        worker,
        36,
        False,
        "nvidia.com/gpu",
        4,
        groups=(2,),
        cliques=cliques,
        cliques_why="split over cliques, its all-reduces over the NICs, the step is 51 % slower",
        auto=auto,
    )
    return WaitingGang(("ml", "llama"), NOW, "nvidia-gb200", (option,))


def decide(snapshot: ClusterSnapshot, gang: WaitingGang) -> Admit | Wait:
    [verdict] = admission_pass(snapshot, [gang], QueueingSettings(), NOW)[1]
    return verdict


def test_nvl72_groups_wait_for_cliques_that_hold_them_whole() -> None:
    # Cliques c0, c1 of 20 trays, c2 of 3; three trays busy in each of c0 and c1: 37 free, but
    # the free trays hold only 8 + 8 + 1 = 17 of the 18 groups of 2 inside a clique.
    trays = gb200_trays([0] * 20 + [1] * 20 + [2] * 3)
    busy = [bound_pod(f"p{i}", trays[i].name, gpus=4) for i in (0, 1, 2, 20, 21, 22)]
    snap = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, busy)
    wait = decide(snap, nvl72_gang())
    assert isinstance(wait, Wait) and wait.reason == TOPOLOGY_UNAVAILABLE
    assert "needs its 18 tensor-parallel groups of 2 hosts" in wait.message
    assert (
        "room for 17" in wait.message and "NVLink clique c0: 17 free, c1: 17, c2: 3" in wait.message
    )
    assert "51 % slower" in wait.message
    # Preferred: admitted now, some groups split.
    assert isinstance(decide(snap, nvl72_gang("Preferred")), Admit)
    # One tray of c0 freed: 18 groups fit, every group inside one clique.
    free_one = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, busy[1:])
    admit = decide(free_one, nvl72_gang())
    assert isinstance(admit, Admit) and admit.shape is not None and admit.shape.nvlink_intact
    clique = {t.name: t.topology.clique for t in trays}
    pairs = [admit.hosts[i : i + 2] for i in range(0, 36, 2)]
    assert all(clique[a] == clique[b] for a, b in pairs)


def test_nvl72_auto_admits_when_the_cliques_could_never_hold_the_groups() -> None:
    # Nineteen cliques of 2 trays and one tray alone: 18 groups fit only if every tray is free;
    # with trays of 3-tray cliques (1 group each) only 12 would ever fit.
    trays = gb200_trays([i // 3 for i in range(36)] + [99])
    snap = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, [])
    assert isinstance(decide(snap, nvl72_gang()), Admit)
    required = decide(snap, nvl72_gang(auto=False))
    assert isinstance(required, Wait) and "spec.placement.topology: Required" in required.message


def test_nvl72_job_through_the_state_machine_requires_its_cliques() -> None:
    """The real plan of the NVL72 job, on trays labelled with their clique: Auto waits for the
    cliques; admitted, status.admission records the packed step."""
    trays = gb200_trays([0] * 20 + [1] * 20 + [2] * 3)
    world = TrainingWorld({"tpu-v4-2x2x4": 0})
    busy = [bound_pod(f"p{i}", trays[i].name, gpus=4) for i in (0, 1, 2, 20, 21, 22)]
    world.snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, busy)
    planner = planner_on(DEFAULT_CATALOG)
    the_job = job(nvl72_spec(), name="llama70b-nvl72")
    decision = world.decide(the_job, planner=planner)
    [cond] = [c for c in decision.status.conditions if c.type == "Schedulable"]
    assert cond.reason == TOPOLOGY_UNAVAILABLE and "inside one NVLink clique" in cond.message
    assert "% slower" in cond.message and "spec.placement.topology: Auto" in cond.message
    world.snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, busy[1:])
    admitted = world.decide(the_job, planner=planner)
    admission = admitted.status.admission
    assert admission is not None and admission.placement == PACKED
    plan = admitted.status.plan
    assert plan is not None and plan.placement is not None
    assert plan.placement.nvlink_clique == "Required"
    assert admission.predicted_step_seconds == pytest.approx(plan.step_seconds, rel=1e-5)


def test_the_snapshot_knows_each_pools_levels_and_domain_sizes() -> None:
    trays = gb200_trays([0, 0, 0, 1])
    snap = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, [])
    assert snap.pools()[GB200_POOL].levels == (NVLINK_CLIQUE,)
    assert sorted(snap.domain_sizes(GB200_POOL, NVLINK_CLIQUE)) == [1, 3]
    snap.remove_node(trays[3].name)
    assert snap.domain_sizes(GB200_POOL, NVLINK_CLIQUE) == [3]
    world = a100_world([0, 0, 1], busy=[])
    assert world.snapshot.pools()[POOL].levels == (GKE_BLOCK,)
    assert sorted(world.snapshot.domain_sizes(POOL, GKE_BLOCK)) == [1, 2]


def test_placement_plan_round_trips_through_status() -> None:
    plan = TrainingPlan(
        placement=PlacementPlan(
            steps=[PlacementStep(placement=PACKED, step_seconds=2.04, loss_percent=0.0)],
            block="Required",
        )
    )
    again = TrainingPlan.model_validate(plan.to_k8s())
    assert again.placement is not None and again.placement.block == "Required"
    assert plan.to_k8s()["placement"]["steps"][0] == {
        "placement": "Packed",
        "stepSeconds": 2.04,
        "lossPercent": 0.0,
    }


def test_the_local_gb200_pool_as_labelled_keeps_tensor_groups_inside_a_rack() -> None:
    """The trays as `ringmaster cluster up --pool gb200-nvl72=22` labels them (racks of 18,
    localcluster/pools.py), trays 16-21 only; the e2e's job (Llama-3-70B, TP8 over 2 trays): with
    trays 16 and 18 busy it waits for a clique; with 18 free it gets the second rack's 18-21."""
    pool = POOLS_BY_NAME[GB200_POOL]
    objects = [node_manifest(pool, i) for i in range(16, 22)]
    for obj in objects:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    trays = [NodeFacts.from_node(node_from_object(o)) for o in objects]
    name = {i: f"{GB200_POOL}-{i:04d}" for i in range(16, 22)}
    text = NVL72_JOB.replace("workers: 36", "workers: 4").replace(
        "globalBatchSize: 288", "globalBatchSize: 16"
    )
    (manifest,) = load_manifests(text, source="test")
    assert isinstance(manifest.spec, TrainingJobSpec)
    the_job = job(manifest.spec, name="tp-over-trays")
    world = TrainingWorld({"tpu-v4-2x2x4": 0})
    busy = [bound_pod(f"busy-{i}", name[i], gpus=4) for i in (16, 18)]
    world.snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, busy)
    planner = planner_on(DEFAULT_CATALOG)
    waiting = world.decide(the_job, planner=planner)
    [cond] = [c for c in waiting.status.conditions if c.type == "Schedulable"]
    assert cond.reason == TOPOLOGY_UNAVAILABLE, cond.message
    assert "tensor-parallel groups of 2 hosts" in cond.message and "NVLink clique" in cond.message
    world.snapshot = ClusterSnapshot.rebuilt(REDUCER_REQUEST, trays, busy[:1])
    admitted = world.decide(the_job, planner=planner)
    admission = admitted.status.admission
    assert admission is not None and admission.placement == PACKED
    assert admission.hosts == [name[i] for i in range(18, 22)]
