"""TPU multislice: slices admitted all or none on distinct pools, each slice's workers placed on
their own pool with the environment JAX's multislice runtime reads, Kueue pod sets per slice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ringmaster.admission import kueue
from ringmaster.admission.cycle import Admit, Wait
from ringmaster.api import TrainingJobSpec
from ringmaster.controllers.training_lifecycle import reconcile_training
from ringmaster.controllers.training_step import World
from ringmaster.manifests.training import MEGASCALE_PORT, slice_of, tpu_env
from tests.unit.training_world import NOW, TrainingWorld, job, pods_of, ring_planner, spec

pytestmark = pytest.mark.unit
V5E = "tpu-v5-lite-podslice"
POOL_A, POOL_B = "tpu-v5e-2x4", "tpu-v5e-2x4-b"


def two_slices():
    one = spec(workers=2, per_worker=4, accelerator=V5E, topology="2x4")
    body = one.model_dump(by_alias=True, exclude_none=True)
    body["workers"] = 4
    body["accelerator"]["slices"] = 2
    return TrainingJobSpec.model_validate(body)


def cycle_for(w, the_job):
    """The admission cycle's verdict on a job, as the shell gets it."""
    waiting = reconcile_training(the_job, [], World(w.snapshot.pools()), NOW, ring_planner).waiting
    return next(v for v in w.cycle([waiting]) if v.key == the_job.key)


def world(a=2, b=2):
    return TrainingWorld({POOL_A: a, POOL_B: b})


def cordon(w, pool):
    for node in list(w.snapshot._nodes.values()):
        if node.identity.pool == pool:
            w.snapshot.set_node(replace(node, schedulable=False))


def env(pod):
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_two_slices_are_admitted_together_each_on_its_own_pool_with_named_hosts():
    w = world()
    decision = w.decide(job(two_slices()))
    admission = decision.status.admission
    assert decision.status.phase == "Admitted"
    assert admission.slice_pools == [POOL_A, POOL_B]
    assert admission.pool == POOL_A
    assert [h.rsplit("-", 1)[0] for h in admission.hosts] == [POOL_A] * 2 + [POOL_B] * 2
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert [p["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] for p in pods] == [
        POOL_A,
        POOL_A,
        POOL_B,
        POOL_B,
    ]
    schedulable = next(c for c in decision.status.conditions if c.type == "Schedulable")
    assert "2 slices of tpu-v5-lite-podslice 2x4 on pools tpu-v5e-2x4, tpu-v5e-2x4-b" in (
        schedulable.message
    )
    # The room of both slices is held: a second 2-slice job finds none.
    other = w.decide(job(two_slices(), name="other"))
    assert other.status.phase == "Pending"
    assert other.create == []


def test_with_one_slice_free_the_job_waits_with_the_numbers_and_creates_nothing():
    w = world()
    cordon(w, POOL_B)
    decision = w.decide(job(two_slices()))
    assert decision.status.phase == "Pending"
    assert decision.create == []
    assert decision.promise is None
    schedulable = next(c for c in decision.status.conditions if c.type == "Schedulable")
    assert schedulable.reason == "InsufficientSlices"
    assert schedulable.message.startswith(
        "needs 2 slices of tpu-v5-lite-podslice 2x4; 1 free (2 pools of that type and topology;"
        " pool tpu-v5e-2x4-b: cordoned or not Ready: 0 of 2 hosts schedulable"
    )


def test_a_pool_with_part_of_its_hosts_taken_is_no_free_slice():
    w = world()
    w.snapshot.set_node(replace(w.snapshot._nodes[f"{POOL_B}-0000"], schedulable=False))
    verdict = cycle_for(w, job(two_slices()))
    assert isinstance(verdict, Wait) and verdict.reason == "InsufficientSlices"
    assert "1 free" in verdict.message


def test_one_pool_never_holds_two_slices_even_when_large_enough():
    w = TrainingWorld({POOL_A: 4, POOL_B: 0})
    verdict = cycle_for(w, job(two_slices()))
    assert isinstance(verdict, Wait) and verdict.reason == "InsufficientSlices"


def test_each_slice_gets_its_own_worker_ids_hostnames_and_the_megascale_variables():
    s = two_slices()
    assert [slice_of(s, r) for r in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    third = tpu_env("llm", "ml", s, 2)
    assert third == {
        "TPU_WORKER_ID": "0",
        "TPU_WORKER_HOSTNAMES": "worker-2.llm.ml.svc.cluster.local,"
        "worker-3.llm.ml.svc.cluster.local",
        "MEGASCALE_COORDINATOR_ADDRESS": f"worker-0.llm.ml.svc.cluster.local:{MEGASCALE_PORT}",
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
        "MEGASCALE_PORT": str(MEGASCALE_PORT),
    }
    # One slice: no MEGASCALE variables, the slice's hosts as before.
    single = spec(workers=2, per_worker=4, accelerator=V5E, topology="2x4")
    assert set(tpu_env("llm", "ml", single, 1)) == {"TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"}


def test_the_created_pods_carry_their_slice_env_and_label():
    decision = world().decide(job(two_slices(), name="llm"))
    pods = [o for o in decision.create if o["kind"] == "Pod"]
    assert [env(p)["MEGASCALE_SLICE_ID"] for p in pods] == ["0", "0", "1", "1"]
    assert [env(p)["TPU_WORKER_ID"] for p in pods] == ["0", "1", "0", "1"]
    assert [env(p)["RANK"] for p in pods] == ["0", "1", "2", "3"]
    assert [p["metadata"]["labels"]["ringmaster.dev/slice"] for p in pods] == ["0", "0", "1", "1"]


def test_a_failed_worker_of_one_slice_restarts_every_slice():
    w = world()
    the_job = job(two_slices())
    admitted = w.decide(the_job)
    pods = pods_of(admitted, node=f"{POOL_A}-0000")
    pods[3] = replace(pods[3], phase="Failed")
    decision = w.decide(job(two_slices(), status=admitted.status), pods)
    assert sorted(decision.delete) == sorted(p.name for p in pods)
    assert decision.status.admission is None
    assert decision.status.restarts == 1


def test_kueue_counts_every_slice_in_a_pod_set_of_its_own():
    assert kueue.worker_pod_sets(8, 1) == [("workers", 8)]
    assert kueue.worker_pod_sets(8, 2) == [("slice-0", 4), ("slice-1", 4)]
    # Past Kueue's 18 pod sets: one set of all the workers, every slice still counted.
    assert kueue.worker_pod_sets(40, 20) == [("workers", 40)]


def test_the_admit_names_the_pools_of_every_slice():
    w = world()
    the_job = job(two_slices())
    verdict = cycle_for(w, the_job)
    assert isinstance(verdict, Admit)
    assert verdict.pools == (POOL_A, POOL_B)
    assert verdict.pool == POOL_A
