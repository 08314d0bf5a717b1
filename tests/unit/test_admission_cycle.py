"""The admission cycle: order, priority, queueing rules, all-or-nothing gangs."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

import pytest

from ringmaster.admission.cycle import (
    Admit,
    GangOption,
    QueueingRule,
    QueueingSettings,
    ReducerNeed,
    Room,
    Wait,
    WaitingGang,
    promise_for,
)
from ringmaster.admission.snapshot import shape
from tests.unit.training_world import GPU8, NOW, TrainingWorld, bound_pod, nodes

pytestmark = pytest.mark.unit
POOL = "a100-highgpu-8g"
STRICT = QueueingSettings(QueueingRule.STRICT_FIFO)
BEST_EFFORT = QueueingSettings(QueueingRule.BEST_EFFORT_FIFO, bypass_limit_seconds=300)


def gang(name, workers, age_seconds=0.0, priority_class=None, waited=0.0, reducers=None):
    option = GangOption(POOL, GPU8, workers, False, "nvidia.com/gpu", 8, reducers)
    return WaitingGang(
        key=("ml", name),
        created=NOW - dt.timedelta(seconds=age_seconds),
        queue="nvidia-tesla-a100",
        options=(option,),
        priority_class=priority_class,
        waiting_since=NOW - dt.timedelta(seconds=waited),
    )


def outcome(verdicts):
    return {v.key[1]: ("admit" if isinstance(v, Admit) else v.reason) for v in verdicts}


def test_older_gangs_go_first_and_two_never_share_the_same_room():
    world = TrainingWorld({POOL: 8})
    verdicts = world.cycle([gang("young", 6, 10), gang("old", 6, 20)])
    assert [v.key[1] for v in verdicts] == ["old", "young"]
    assert outcome(verdicts) == {"old": "admit", "young": "InsufficientCapacity"}
    assert verdicts[1].message.endswith("2 fit now")


def test_a_higher_priority_class_goes_before_older_gangs_and_a_missing_one_is_said():
    world = TrainingWorld({POOL: 8})
    world.snapshot.set_priority_class("urgent", 1000)
    verdicts = world.cycle(
        [gang("old", 6, 100), gang("urgent", 6, 1, "urgent"), gang("typo", 1, 200, "urgnet")]
    )
    assert outcome(verdicts) == {
        "urgent": "admit",
        "old": "InsufficientCapacity",
        "typo": "PriorityClassNotFound",
    }
    world.snapshot.set_priority_class("batch", -10, global_default=True)
    # Without a class, the global default applies: below a class of value 0.
    world.snapshot.set_priority_class("zero", 0)
    verdicts = world.cycle([gang("plain", 8, 100), gang("zero", 8, 1, "zero")])
    assert outcome(verdicts) == {"zero": "admit", "plain": "InsufficientCapacity"}


def test_best_effort_lets_a_small_gang_pass_a_large_one_strict_does_not():
    world = TrainingWorld(
        {POOL: 8}, pods=[bound_pod(f"busy-{i}", f"{POOL}-{i:04d}") for i in range(4)]
    )
    waiting = [gang("large", 6, 20), gang("small", 2, 10)]
    assert outcome(world.cycle(waiting)) == {"large": "InsufficientCapacity", "small": "admit"}
    world.settings = STRICT
    assert outcome(world.cycle(waiting)) == {
        "large": "InsufficientCapacity",
        "small": "QueuedBehind",
    }


def test_best_effort_stops_passing_a_gang_that_waited_past_the_bypass_limit():
    world = TrainingWorld(
        {POOL: 8}, pods=[bound_pod(f"busy-{i}", f"{POOL}-{i:04d}") for i in range(4)]
    )
    world.settings = BEST_EFFORT
    fresh = [gang("large", 6, 400, waited=299), gang("small", 2, 10)]
    assert outcome(world.cycle(fresh))["small"] == "admit"
    starving = [gang("large", 6, 400, waited=300), gang("small", 2, 10)]
    verdicts = world.cycle(starving)
    assert outcome(verdicts) == {"large": "InsufficientCapacity", "small": "QueuedBehind"}
    assert "ml/large starts first" in verdicts[1].message
    # A higher priority still goes first: the hold is over gangs behind it in the order.
    world.snapshot.set_priority_class("urgent", 1000)
    urgent = [*starving[:1], gang("urgent", 2, 1, "urgent")]
    assert outcome(world.cycle(urgent))["urgent"] == "admit"


def test_a_held_queue_holds_only_its_accelerator_type():
    world = TrainingWorld({POOL: 2, "tpu-v4-2x2x4": 4})
    world.settings = STRICT
    tpu = WaitingGang(
        key=("ml", "tpu"),
        created=NOW,
        queue="tpu-v4-podslice",
        options=(
            GangOption(
                "tpu-v4-2x2x4",
                shape({"google.com/tpu": Decimal(4)}),
                4,
                True,
                "google.com/tpu",
                4,
            ),
        ),
    )
    assert outcome(world.cycle([gang("large", 6, 20), tpu])) == {
        "large": "InsufficientCapacity",
        "tpu": "admit",
    }


def test_reducers_are_part_of_the_gang_all_or_nothing():
    world = TrainingWorld({POOL: 8, "reducers": 10})
    need = ReducerNeed("n1-highcpu-16", 6, ("ml", "a-reducers"))
    other = ReducerNeed("n1-highcpu-16", 6, ("ml", "b-reducers"))
    verdicts = world.cycle([gang("a", 2, 20, reducers=need), gang("b", 2, 10, reducers=other)])
    assert outcome(verdicts) == {"a": "admit", "b": "InsufficientReducerCapacity"}
    assert verdicts[1].message == "needs 6 free n1-highcpu-16 hosts for its reducers; 4 free"


def test_the_cycle_takes_the_first_pool_where_the_gang_fits():
    world = TrainingWorld({POOL: 2, "a100-megagpu-16g": 2})
    big = GangOption("a100-megagpu-16g", GPU8, 4, False, "nvidia.com/gpu", 8)
    first = GangOption(POOL, GPU8, 4, False, "nvidia.com/gpu", 8)
    choice = WaitingGang(("ml", "a"), NOW, "nvidia-tesla-a100", (first, big))
    (verdict,) = world.cycle([choice])
    assert isinstance(verdict, Admit) and verdict.pool == "a100-megagpu-16g"
    (later,) = world.cycle([WaitingGang(("ml", "b"), NOW, "nvidia-tesla-a100", (first,))])
    assert isinstance(later, Wait)
    assert later.message.endswith("2 fit now (too small: 2 fit on its 2 hosts even empty)")


def test_the_room_packs_tightest_nodes_first_and_keeps_whole_hosts_whole():
    half = shape({"nvidia.com/gpu": Decimal(4)})
    room = Room({shape({"nvidia.com/gpu": Decimal(8)}): 2, half: 1})
    assert room.take(half, 1) == 1  # on the half-free host, not a whole one
    assert room.count(GPU8, 10, False) == 2
    assert room.take(half, 3) == 3
    assert room.count(GPU8, 10, False) == 0 and room.count(half, 10, False) == 1


def test_a_worker_no_node_could_hold_says_so_and_never_holds_its_queue():
    world = TrainingWorld({POOL: 8})
    world.settings = STRICT
    node = next(iter(world.snapshot.node_sizes(POOL)))
    memory = dict(node)["memory"]
    huge = shape({"nvidia.com/gpu": Decimal(8), "memory": memory + (1 << 30)})
    oversized = WaitingGang(
        ("ml", "oversized"),
        NOW - dt.timedelta(seconds=60),
        "nvidia-tesla-a100",
        (GangOption(POOL, huge, 1, False, "nvidia.com/gpu", 8),),
    )
    verdicts = world.cycle([oversized, gang("behind", 2, 10)])
    assert outcome(verdicts) == {"oversized": "WorkerLargerThanNode", "behind": "admit"}
    message = verdicts[0].message
    gib = memory / (1 << 30)
    assert f"memory {gib + 1:.4g}Gi > {gib:.4g}Gi" in message and POOL in message
    assert "nvidia.com/gpu" not in message  # only what exceeds the node is named
    # Busy nodes are not "too small": the same worker, fitting an empty node, just waits.
    fits = shape({"nvidia.com/gpu": Decimal(8), "memory": memory})
    busy = TrainingWorld({POOL: 1}, pods=[bound_pod("busy", f"{POOL}-0000")])
    waiting = WaitingGang(
        ("ml", "w"),
        NOW,
        "nvidia-tesla-a100",
        (GangOption(POOL, fits, 1, False, "nvidia.com/gpu", 8),),
    )
    assert outcome(busy.cycle([waiting])) == {"w": "InsufficientCapacity"}


def test_a_pool_with_no_nodes_yet_is_not_too_small():
    world = TrainingWorld({POOL: 0})
    assert outcome(world.cycle([gang("a", 1)])) == {"a": "InsufficientCapacity"}


def test_an_admitted_gang_gets_a_named_host_per_worker_and_no_two_gangs_share_one():
    world = TrainingWorld({POOL: 8}, pods=[bound_pod("busy", f"{POOL}-0003")])
    verdicts = world.cycle([gang("a", 3, 20), gang("b", 4, 10)])
    assert outcome(verdicts) == {"a": "admit", "b": "admit"}
    a, b = verdicts[0].hosts, verdicts[1].hosts
    assert len(a) == 3 and len(b) == 4 and len(set(a + b)) == 7
    assert f"{POOL}-0003" not in a + b  # the busy host
    # The next cycle sees the promises on those hosts: nothing is left for a third gang.
    world.snapshot.promise(promise_for(("ml", "a"), 0, verdicts[0].option, a))
    world.snapshot.promise(promise_for(("ml", "b"), 0, verdicts[1].option, b))
    assert outcome(world.cycle([gang("c", 1)])) == {"c": "InsufficientCapacity"}
    world.snapshot.release(("ml", "b"))
    (again,) = world.cycle([gang("c", 4)])
    assert set(again.hosts) == set(b)


def test_workers_smaller_than_a_host_are_placed_tightest_first_by_name():
    half = shape({"nvidia.com/gpu": Decimal(4)})
    world = TrainingWorld({POOL: 3}, pods=[bound_pod("half", f"{POOL}-0001", gpus=4)])
    option = GangOption(POOL, half, 3, False, "nvidia.com/gpu", 4)
    (verdict,) = world.cycle([WaitingGang(("ml", "a"), NOW, "nvidia-tesla-a100", (option,))])
    # The half-free host first, then two workers on one whole host: one host stays whole.
    assert verdict.hosts[0] == f"{POOL}-0001"
    assert len(set(verdict.hosts[1:])) == 1 and verdict.hosts[1] != f"{POOL}-0001"


def test_a_room_without_names_still_counts_and_names_no_host():
    room = Room({GPU8: 2})
    assert room.place(GPU8, 2) == (2, ["", ""])


def test_the_waiting_message_names_every_pool_considered_and_why_each_cannot_take_it():
    world = TrainingWorld({POOL: 4, "a100-megagpu-16g": 2})
    for node in nodes({POOL: 4}):
        world.snapshot.set_node(replace(node, schedulable=False))  # the first pool is cordoned
    world.snapshot.set_pod(bound_pod("big", "a100-megagpu-16g-0000", gpus=16))
    options = tuple(
        GangOption(pool, GPU8, 3, False, "nvidia.com/gpu", 8) for pool in (POOL, "a100-megagpu-16g")
    )
    (wait,) = world.cycle([WaitingGang(("ml", "a"), NOW, "nvidia-tesla-a100", options)])
    assert isinstance(wait, Wait) and wait.reason == "InsufficientCapacity"
    assert wait.message == (
        "needs 3 workers x 8 nvidia.com/gpu on one of 2 pools; "
        f"pool {POOL}: 0 fit now (cordoned or not Ready: 0 of 4 hosts schedulable); "
        "pool a100-megagpu-16g: 2 fit now (full)"
    )
    # Once the big pod is gone the second pool holds 4: the gang is admitted there.
    world.snapshot.remove_pod(("other", "big"))
    (admit,) = world.cycle([WaitingGang(("ml", "a"), NOW, "nvidia-tesla-a100", options)])
    assert isinstance(admit, Admit) and admit.pool == "a100-megagpu-16g"
    # A pool too small even empty says so.
    (small,) = world.cycle(
        [
            WaitingGang(
                ("ml", "b"),
                NOW,
                "nvidia-tesla-a100",
                tuple(replace(o, workers=9) for o in options),
            )
        ]
    )
    assert "pool a100-megagpu-16g: 4 fit now (too small: 4 fit on its 2 hosts even empty)" in (
        small.message
    )
