"""The accelerator chosen per job (issue 43, item 5): the job put on each accelerator it names
(planning/alternatives.py), their ranking by spec.placement.objective with hand-computed
numbers, the admission cycle's options and queues (admission/alternatives.py), and the
TrainingJob state machine admitting the best accelerator that can start now, with status saying
why not the others (controllers/training_alternatives.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from ringmaster.admission.cycle import Admit, QueueingRule, QueueingSettings, Wait
from ringmaster.admission.kueue import QUEUE_NAME_LABEL
from ringmaster.api import ManifestError, TrainingJobSpec, TrainingPlan, find_condition
from ringmaster.api.manifest import parse_manifest
from ringmaster.api.trainingjob import TrainingProgress
from ringmaster.cli import main
from ringmaster.controllers.training_lifecycle import reconcile_training
from ringmaster.controllers.training_step import JobView, KueueWorld, WorkerPod, World
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.observe.start_time import Holder, Queued, expected_starts
from ringmaster.planning.alternatives import (
    Candidate,
    Planned,
    alternatives_hardware_problem,
    candidates,
    rank,
    spec_on,
    steps_left,
)
from ringmaster.planning.catalog import hardware_problem
from tests.unit.training_world import NOW, TrainingWorld, bound_pod, job

pytestmark = pytest.mark.unit

H100 = "nvidia-h100-80gb"  # pool h100-highgpu-8g: 2 hosts of 8 (a3-highgpu-8g)
A100 = "nvidia-tesla-a100"  # pool a100-megagpu-16g: 2 hosts of 16 (a2-megagpu-16g)
SIZES = {"h100-highgpu-8g": 2, "a100-megagpu-16g": 2}

# The fake engine's figures: step seconds and USD per hour of the gang, per accelerator.
STEP = {H100: 1.0, A100: 2.0}
PRICE = {H100: 100.0, A100: 40.0}


def planner(spec: Any, machine_type: str | None, reducers: Any = None) -> TrainingPlan:
    acc = spec.accelerator.type
    return TrainingPlan(
        strategy="Ring",
        step_seconds=STEP[acc],
        cost_per_hour_usd=PRICE[acc],
        bottleneck="compute",
        machine_type=machine_type,
        layout=f"DP{spec.workers * spec.accelerator.per_worker}",
    )


def alternatives_spec(objective="EarliestFinish", steps: int | None = 3600, **extra: Any):
    body: dict[str, Any] = {
        "workers": 2,
        "accelerator": {
            "type": H100,
            "perWorker": 8,
            "alternatives": [{"type": A100, "perWorker": 16}],
        },
        "model": {"parameters": 340_000_000, "flopsPerSample": "6G", "batchSizePerAccelerator": 32},
        "template": {"image": "trainer:1"},
        "placement": {"objective": objective},
        **extra,
    }
    if steps is not None:
        body["steps"] = steps
    return TrainingJobSpec.model_validate(body)


def h100_full() -> list[Any]:
    return [bound_pod(f"busy-{i}", f"h100-highgpu-8g-000{i}") for i in range(2)]


def row(name: str, step: float | None, price: float | None = None) -> Planned:
    plan = None if step is None else TrainingPlan(step_seconds=step, cost_per_hour_usd=price)
    return Planned(Candidate("spec.accelerator", name, None), plan, "" if plan else "no pool")


# ---------------------------------------------------------------- ranking, by hand


def test_earliest_finish_ranks_by_steps_times_the_step_and_lowest_cost_by_hours_times_price():
    # 3600 steps: a 1 h run at 100 USD/h (100 USD) against a 2 h run at 40 USD/h (80 USD).
    fast, cheap = row("fast", 1.0, 100.0), row("cheap", 2.0, 40.0)
    by_finish = rank([cheap, fast], "EarliestFinish", 3600)
    assert [r.accelerator for r in by_finish.rows] == ["fast", "cheap"]
    assert by_finish.worse_than(cheap, fast) == "finishes later: 2 h against 1 h"
    by_cost = rank([fast, cheap], "LowestCost", 3600)
    assert [r.accelerator for r in by_cost.rows] == ["cheap", "fast"]
    assert by_cost.worse_than(fast, cheap) == "costs more: 100 USD against 80"
    assert cheap.cost_usd(3600) == pytest.approx(80.0)


def test_without_a_step_count_the_step_or_the_cost_of_one_step_ranks_them_and_says_so():
    fast, cheap = row("fast", 1.0, 100.0), row("cheap", 2.0, 40.0)
    by_step = rank([cheap, fast], "EarliestFinish", None)
    assert [r.accelerator for r in by_step.rows] == ["fast", "cheap"]
    assert "no step count" in by_step.basis()
    assert by_step.worse_than(cheap, fast) == "slower: 2 s/step against 1"
    # One step: 1 s x 100 USD/h = 0.02778 USD against 2 s x 40 USD/h = 0.02222 USD.
    by_cost = rank([fast, cheap], "LowestCost", None)
    assert [r.accelerator for r in by_cost.rows] == ["cheap", "fast"]
    assert by_cost.worse_than(fast, cheap) == "costs more: 0.02778 USD per step against 0.02222"


def test_ties_keep_the_specs_order_and_unplanned_accelerators_come_last():
    first, unplanned, second = row("first", 1.0), row("none", None), row("second", 1.0)
    ranked = rank([unplanned, first, second], "EarliestFinish", 10)
    assert [r.accelerator for r in ranked.rows] == ["first", "second", "none"]
    assert ranked.planned == (first, second)


def test_the_steps_left_are_a_reports_total_less_the_step_reported():
    spec = alternatives_spec(steps=1000)
    assert steps_left(spec, None) == 1000
    assert steps_left(spec, TrainingProgress(step=400, total_steps=2000)) == 1600
    assert steps_left(alternatives_spec(steps=None), None) is None


# ---------------------------------------------------------------- the job on an alternative


def test_an_alternative_keeps_the_global_batch_over_its_own_workers():
    spec = alternatives_spec()
    on = spec_on(spec, A100)
    # 2 x 8 H100 at 32 samples each: 512 per step; on 1 x 16 A100 the same 512, 32 each.
    assert (on.workers, on.accelerator.per_worker, on.accelerator.type) == (1, 16, A100)
    assert on.model.batch_size_per_accelerator == 32
    assert on.machine_type is None and not on.accelerator.alternatives
    assert spec_on(spec, H100) is spec and spec_on(spec, None) is spec


def test_a_global_batch_that_does_not_split_over_the_alternative_is_its_row_not_an_error():
    spec = alternatives_spec(
        accelerator={
            "type": H100,
            "perWorker": 8,
            "alternatives": [{"type": A100, "perWorker": 16, "workers": 3}],
        }
    )
    [_primary, alternative] = candidates(spec)
    assert alternative.spec is None
    assert alternative.problem.startswith("spec.accelerator.alternatives[0]: the global batch")
    assert "512 samples" in alternative.problem and "48 x nvidia-tesla-a100" in alternative.problem


def test_an_architecture_is_planned_again_under_the_same_global_batch():
    body = {
        "workers": 2,
        "accelerator": {"type": H100, "perWorker": 8, "alternatives": [{"type": A100}]},
        "model": {
            "architecture": {
                "layers": 32,
                "hiddenSize": 4096,
                "attentionHeads": 32,
                "kvHeads": 8,
                "ffnHiddenSize": 14336,
                "ffnType": "Gated",
                "vocabSize": 128256,
                "sequenceLength": 8192,
            }
        },
        "parallelism": {"tensor": 1, "sharding": "Full", "globalBatchSize": 32},
        "template": {"image": "trainer:1"},
    }
    on = spec_on(TrainingJobSpec.model_validate(body), A100)
    # The primary's perWorker (8) and its 16 accelerators: 2 hosts; degrees searched again.
    assert (on.workers, on.accelerator.per_worker) == (2, 8)
    assert on.parallelism is not None
    assert on.parallelism.global_batch_size == 32
    assert (on.parallelism.tensor, on.parallelism.sharding) == ("Auto", "Full")


def test_an_alternative_the_catalog_lacks_is_named_by_its_field():
    spec = alternatives_spec(
        accelerator={"type": H100, "perWorker": 8, "alternatives": [{"type": "nvidia-x9"}]}
    )

    def check(a: str, p: int, t: str | None) -> tuple[str, str] | None:
        return hardware_problem(DEFAULT_CATALOG, a, p, t)

    reason, message = alternatives_hardware_problem(spec, check) or ("", "")
    assert reason == "UnknownAccelerator"
    assert message.startswith("spec.accelerator.alternatives[0].type: accelerator nvidia-x9")
    # The job waits on it, with the condition and a Warning Event naming the field.
    world = TrainingWorld(SIZES)
    decision = reconcile_training(
        job(spec), [], World(world.snapshot.pools(), {}, None, (reason, message)), NOW, planner
    )
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert (schedulable.reason, schedulable.message) == ("UnknownAccelerator", message)
    assert [e.reason for e in decision.events if e.type == "Warning"] == ["UnknownAccelerator"]


# ---------------------------------------------------------------- admission


def test_the_alternative_is_chosen_when_the_primary_has_no_room_with_its_own_pods():
    world = TrainingWorld(SIZES, pods=h100_full())
    decision = world.decide(job(alternatives_spec()), planner=planner)
    admission = decision.status.admission
    assert admission is not None
    assert (admission.accelerator, admission.workers, admission.per_worker) == (A100, 1, 16)
    assert admission.pool == "a100-megagpu-16g"
    # status.plan is the A100's, and the pods are built for it.
    assert decision.status.plan.machine_type == "a2-megagpu-16g"
    [pod] = [o for o in decision.create if o["kind"] == "Pod"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "16"
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == "a100-megagpu-16g"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["WORLD_SIZE"], env["NPROC_PER_NODE"]) == ("1", "16")
    # Why not the others, with the numbers (3600 steps: H100 1 h, A100 2 h at 40 USD/h).
    h100, a100 = admission.accelerators
    assert (h100.accelerator, h100.chosen, h100.run_hours) == (H100, False, 1.0)
    assert h100.why == (
        "cannot start now: needs 2 workers x 8 nvidia.com/gpu on pool h100-highgpu-8g; 0 fit now"
    )
    assert (a100.accelerator, a100.chosen, a100.run_hours, a100.cost_usd) == (A100, True, 2, 80)
    assert a100.predicted_finish == NOW + dt.timedelta(hours=2)
    assert a100.why == (
        f"{A100} chosen by EarliestFinish over 3600 steps: {H100} ranked better but cannot "
        "start now"
    )
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert f"x 16 {A100} admitted on pool a100-megagpu-16g" in schedulable.message
    assert "ranked better but cannot start now" in schedulable.message


def test_with_room_on_both_the_objective_decides():
    finish = TrainingWorld(SIZES).decide(job(alternatives_spec()), planner=planner)
    assert finish.status.admission.accelerator == H100
    h100, a100 = finish.status.admission.accelerators
    assert h100.chosen and h100.predicted_finish == NOW + dt.timedelta(hours=1)
    assert a100.why == "finishes later: 2 h against 1 h (it has room too)"
    assert a100.predicted_finish == NOW + dt.timedelta(hours=2)
    cost = TrainingWorld(SIZES).decide(job(alternatives_spec("LowestCost")), planner=planner)
    assert cost.status.admission.accelerator == A100
    cheapest, dearer = cost.status.admission.accelerators
    assert cheapest.accelerator == A100 and cheapest.chosen
    assert dearer.why == "costs more: 100 USD against 80 (it has room too)"


def test_a_gang_with_no_room_anywhere_waits_with_each_accelerator_and_the_ranking():
    busy = [*h100_full(), *(bound_pod(f"a-{i}", f"a100-megagpu-16g-000{i}", 16) for i in (0, 1))]
    decision = TrainingWorld(SIZES, pods=busy).decide(job(alternatives_spec()), planner=planner)
    assert decision.status.admission is None and decision.status.phase == "Pending"
    schedulable = find_condition(decision.status.conditions, "Schedulable")
    assert schedulable.reason == "InsufficientCapacity"
    assert schedulable.message == (
        "no accelerator it may run on has room for the gang now: "
        f"{H100} (2 workers x 8): pool h100-highgpu-8g: 0 fit now (full) | "
        f"{A100} (1 workers x 16): pool a100-megagpu-16g: 0 fit now (full); "
        f"ranked by EarliestFinish over 3600 steps: {H100} (2 x 8, DP16, 1 s/step, 1 h, "
        f"100 USD); {A100} (1 x 16, DP16, 2 s/step, 2 h, 80 USD)"
    )
    # While it waits, status.plan is the best accelerator's.
    assert decision.status.plan.machine_type == "a3-highgpu-8g"


def test_an_accelerator_without_a_pool_is_skipped_and_the_other_taken():
    world = TrainingWorld({"a100-megagpu-16g": 2})
    decision = world.decide(job(alternatives_spec()), planner=planner)
    assert decision.status.admission.accelerator == A100
    # Unplanned (no pool), the H100 comes last, with why.
    a100, h100 = decision.status.admission.accelerators
    assert a100.chosen and h100.accelerator == H100 and h100.step_seconds is None
    assert h100.why == f"not planned: no node pool has {H100} nodes (pools have: {A100})"


def test_a_job_through_kueue_is_flagged_not_silently_cut_to_its_primary():
    world = TrainingWorld(SIZES)
    spec = alternatives_spec()
    labels = {QUEUE_NAME_LABEL: "team-a"}
    labelled = JobView("bert", "ml", 1, spec, job(spec).status, NOW, uid="u1", labels=labels)
    the_world = World(world.snapshot.pools(), {}, kueue=KueueWorld())
    decision = reconcile_training(labelled, [], the_world, NOW, planner)
    flagged = find_condition(decision.status.conditions, "AcceleratorAlternatives")
    assert (flagged.status, flagged.reason) == ("False", "NotOfferedThroughKueue")
    assert "spec.accelerator.alternatives are not offered through Kueue" in flagged.message
    assert "NotOfferedThroughKueue" in [e.reason for e in decision.events if e.type == "Warning"]


def test_a_held_queue_leaves_the_gang_its_other_accelerators():
    # StrictFIFO: an older H100-only gang that does not fit (4 hosts; the pool has 2) holds the
    # H100 queue; the gang with an A100 alternative starts there instead of waiting behind it,
    # though the H100 pool has room for it.
    world = TrainingWorld(SIZES, settings=QueueingSettings(QueueingRule.STRICT_FIFO))
    h100_only = alternatives_spec(workers=4, accelerator={"type": H100, "perWorker": 8})
    older = NOW - dt.timedelta(hours=1)
    blocker = world.decide(job(h100_only, name="blocker", created=older), planner=planner)
    # Its options as a look at a full cluster makes them (a look here would admit it at once).
    busy = [*h100_full(), *(bound_pod(f"a-{i}", f"a100-megagpu-16g-000{i}", 16) for i in (0, 1))]
    full = TrainingWorld(SIZES, pods=busy)
    mine = full.decide(job(alternatives_spec(), name="mine"), planner=planner)
    assert blocker.waiting is not None and mine.waiting is not None
    verdicts = {v.key: v for v in world.cycle([blocker.waiting, mine.waiting])}
    assert isinstance(verdicts[("ml", "blocker")], Wait)
    admitted = verdicts[("ml", "mine")]
    assert isinstance(admitted, Admit) and admitted.option.accelerator == A100
    [(_, why)] = [(o, w) for o, w in admitted.considered if o.accelerator == H100]
    assert why == f"queued behind ml/blocker, which starts first on {H100}"


def test_the_expected_start_counts_each_pools_own_shape():
    # 16 free on pool a, 8 on pool b; the job needs 32 on a (its primary) or 8 on b.
    queue = [Queued("ml/j", ("a", "b"), 32, 3600.0, (32, 8))]
    estimate = expected_starts({"a": 16, "b": 8}, [], queue, NOW)["ml/j"]
    assert estimate.now and estimate.pool == "b"
    holders = [Holder("ml/other", "b", 8, NOW + dt.timedelta(hours=1))]
    later = expected_starts({"a": 16, "b": 0}, holders, queue, NOW)["ml/j"]
    assert (later.time, later.pool) == (NOW + dt.timedelta(hours=1), "b")


# ---------------------------------------------------------------- bad input, the Python twins


def manifest(accelerator: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = {
        "workers": 2,
        "accelerator": accelerator,
        "model": {"parameters": 340_000_000, "flopsPerSample": "6G", "batchSizePerAccelerator": 32},
        "template": {"image": "trainer:1"},
        **spec,
    }
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "alt"},
        "spec": body,
    }


def refused(doc: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(doc)
    [error] = caught.value.errors
    return error.path, error.message


@pytest.mark.parametrize(
    ("accelerator", "extra", "field", "words"),
    [
        (
            {"type": H100, "perWorker": 8, "alternatives": [{"type": H100}]},
            {},
            "spec.accelerator.alternatives",
            "names the primary accelerator",
        ),
        (
            {"type": H100, "perWorker": 8, "alternatives": [{"type": A100}, {"type": A100}]},
            {},
            "spec.accelerator.alternatives",
            "each accelerator type once",
        ),
        (
            {"type": H100, "perWorker": 8, "alternatives": [{"type": "tpu-v5p-slice"}]},
            {},
            "spec.accelerator.alternatives[0].topology",
            "topology is required",
        ),
        (
            {
                "type": H100,
                "perWorker": 8,
                "alternatives": [{"type": "tpu-v5p-slice", "perWorker": 4, "topology": "2x2x4"}],
            },
            {"communication": {"strategy": "ReductionServer"}},
            "spec.accelerator.alternatives",
            "reduction server",
        ),
    ],
)
def test_bad_alternatives_are_refused_naming_the_field(accelerator, extra, field, words):
    path, message = refused(manifest(accelerator, **extra))
    assert path == field and words in message


def test_a_measured_step_time_cannot_be_carried_to_another_accelerator():
    doc = manifest({"type": H100, "perWorker": 8, "alternatives": [{"type": A100}]})
    doc["spec"]["model"] = {
        "parameters": 340_000_000,
        "computeSecondsPerStep": 0.3,
        "batchSizePerAccelerator": 32,
    }
    path, message = refused(doc)
    assert path == "spec.accelerator.alternatives" and "computeSecondsPerStep" in message


# ---------------------------------------------------------------- ringmaster plan

EXAMPLE = (
    Path(__file__).resolve().parents[2]
    / "examples/alternatives/trainingjob-llama3-8b-h100-or-a100.yaml"
)


def test_plan_prints_the_accelerators_ranked_by_the_objective(capsys):
    assert main(["plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("accelerators (spec.placement.objective") :].splitlines()
    assert "EarliestFinish over 2000 steps" in table[0]
    rows = [line.split()[0] for line in table[2:]]
    assert rows[0] == H100 and set(rows) == {H100, A100, "nvidia-a100-80gb"}
    assert "best by EarliestFinish" in table[2]
    assert all("finishes later" in line for line in table[3:])
    # The A100 40GB is planned again: one host of 16, its own layout, the same global batch.
    a100 = next(line for line in table if line.startswith(A100))
    assert "1 x 16" in a100
    assert main(["plan", str(EXAMPLE), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    choices = {c["accelerator"]: c for c in doc["accelerators"]}
    assert choices[H100]["chosen"] and not choices[A100]["chosen"]
    assert (choices[A100]["workers"], choices[A100]["perWorker"]) == (1, 16)
    assert choices[A100]["machineType"] == "a2-megagpu-16g"
    # run hours = 2000 steps x the step; cost = run hours x the plan's price per hour.
    for c in choices.values():
        assert c["runHours"] == pytest.approx(2000 * c["stepSeconds"] / 3600, rel=1e-3)
        assert c["costUSD"] == pytest.approx(c["runHours"] * c["costPerHourUSD"], rel=2e-3)


def test_a_gang_found_on_an_alternatives_pool_is_adopted_in_that_shape():
    # Its pod exists (an operator older than the record): one worker of 16 on the A100 pool.
    world = TrainingWorld(SIZES)
    node, pool = "a100-megagpu-16g-0000", "a100-megagpu-16g"
    pod = WorkerPod("bert-worker-0", 0, 0, "Running", node, False, pool=pool)
    decision = world.decide(job(alternatives_spec()), [pod], planner=planner)
    admission = decision.status.admission
    assert (admission.accelerator, admission.pool) == (A100, "a100-megagpu-16g")
    assert decision.status.phase == "Running" and decision.status.workers.total == 1
