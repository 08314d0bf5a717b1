"""The autoscaling decision on the servers' own signals (planning/signal_scaling.py): up at once,
down after the stabilisation period, one event per cool-down, bounds, no signal, the engine's
rate corrected by what the replicas show, and more load never fewer replicas."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.planning.serving_signals import Dialect, ServerWindow
from ringmaster.planning.signal_scaling import (
    DOWN,
    UP,
    EngineCapacity,
    Reason,
    ScalingDecision,
    ScalingMemory,
    ScalingPolicy,
    Side,
    SloTargets,
    decide,
)

pytestmark = pytest.mark.unit

# One replica sustains 2 req/s with 16 sequences running at the SLO (engine figures).
ENGINE = EngineCapacity(requests_per_second=2.0, concurrency=16.0)
TARGETS = SloTargets(ttft_p99_seconds=1.0, tpot_p99_seconds=0.05)
LONG_AGO = ScalingMemory(last_scale_at=0.0, last_direction=UP)
NOW = 10_000.0


def win(
    rps: float | None = None,
    running: float | None = None,
    waiting: float | None = None,
    ttft: float | None = None,
    tpot: float | None = None,
    observations: float = 100.0,
) -> ServerWindow:
    return ServerWindow(
        seconds=30.0,
        dialect=Dialect.VLLM,
        requests_running=running,
        requests_waiting=waiting,
        kv_cache_usage=None,
        requests_per_second=rps,
        prompt_tokens_per_second=None,
        output_tokens_per_second=None,
        ttft_p50_seconds=None if ttft is None else ttft / 3,
        ttft_p99_seconds=ttft,
        tpot_p50_seconds=None if tpot is None else tpot / 2,
        tpot_p99_seconds=tpot,
        ttft_observations=observations if ttft is not None else 0.0,
        tpot_observations=observations * 100 if tpot is not None else 0.0,
        restarted=False,
    )


def run(
    current: int,
    windows: Sequence[ServerWindow | None],
    memory: ScalingMemory = LONG_AGO,
    now: float = NOW,
    lo: int = 1,
    hi: int = 10,
    engine: EngineCapacity = ENGINE,
    targets: SloTargets = TARGETS,
) -> ScalingDecision:
    return decide(
        current=current,
        min_replicas=lo,
        max_replicas=hi,
        engine=engine,
        targets=targets,
        windows=windows,
        memory=memory,
        now=now,
    )


# --- up ----------------------------------------------------------------------------------------


def test_step_load_scales_up_in_one_decision_by_several() -> None:
    # Load stepped up: both replicas saturated, 36 in flight each, TTFT p99 3 s over its 1 s.
    busy = win(rps=2.2, running=16, waiting=20, ttft=3.0, tpot=0.04)
    d = run(2, [busy, busy])
    # rate: 4.4 / 2 -> 3; in flight: 72 / 16 -> 5; latency: 2 + 1. The queue term drives.
    assert (d.replicas, d.reason) == (5, Reason.SCALE_UP_QUEUE)
    assert d.memory.last_scale_at == NOW and d.memory.last_direction == UP
    assert "72 running+waiting" in d.message and "2 -> 5" in d.message


def test_rate_drives_scale_up() -> None:
    d = run(2, [win(rps=3.1, running=4, waiting=0)] * 2)
    assert (d.replicas, d.reason, d.needed) == (4, Reason.SCALE_UP_RATE, 4)  # 6.2 / 2 -> 4
    assert "6.2 req/s" in d.message and "engine 2" in d.message


def test_latency_over_target_with_a_queue_adds_a_replica_and_lowers_the_correction() -> None:
    # 1 req/s each, half the engine's rate, yet TTFT p99 1.8 s: the engine was optimistic.
    slow = win(rps=1.0, running=3, waiting=1, ttft=1.8, tpot=0.03)
    d = run(2, [slow, slow])
    assert d.correction == pytest.approx(0.5)  # observed 1.0 / engine 2.0
    assert d.memory.correction == pytest.approx(0.5)
    # rate at 1 req/s per replica: 2; in flight 8 / 16: 1; latency with a queue: 3.
    assert (d.replicas, d.reason) == (3, Reason.SCALE_UP_LATENCY)
    assert "TTFT p99 1800 ms (target 1000)" in d.message


def test_a_lowered_correction_holds_after_latency_recovers() -> None:
    # After the scale-up the replicas meet their targets at 0.67 req/s: no evidence that they
    # could do more, so the correction stays and the count does not spring back.
    memory = replace(LONG_AGO, correction=0.5)
    calm = win(rps=2 / 3, running=2, waiting=0, ttft=0.4, tpot=0.03)
    d = run(3, [calm] * 3, memory=memory)
    assert d.correction == pytest.approx(0.5)
    assert (d.replicas, d.reason) == (3, Reason.HOLD)


def test_replicas_beating_the_engine_raise_the_correction_halfway() -> None:
    fast = win(rps=3.0, running=6, waiting=0, ttft=0.5, tpot=0.03)
    d = run(5, [fast] * 5)
    assert d.correction == pytest.approx(1.25)  # half-way from 1 to 3.0 / 2.0
    assert (d.replicas, d.reason) == (6, Reason.SCALE_UP_RATE)  # 15 / 2.5 -> 6, not 15 / 2 -> 8
    # Without latency evidence the engine's rate stands.
    assert run(5, [win(rps=3.0, running=6, waiting=0)] * 5).replicas == 8
    # A queue anywhere: no raise (a ramp meets its targets before its queue builds).
    queued = [fast] * 4 + [replace(fast, requests_waiting=1)]
    assert run(5, queued).correction == 1.0


def test_the_correction_is_bounded() -> None:
    crawling = win(rps=0.1, running=16, waiting=30, ttft=9.0)
    assert run(2, [crawling] * 2).correction == 0.25
    memory = replace(LONG_AGO, correction=1.5)
    assert run(2, [win(rps=9.0, running=1, waiting=0, ttft=0.1)] * 2, memory).correction == 1.5


def test_too_few_observations_are_no_latency_evidence() -> None:
    thin = win(rps=1.0, running=3, waiting=1, ttft=1.8, observations=5)
    d = run(2, [thin, thin])
    assert d.correction == 1.0
    assert d.reason is Reason.HOLD


def test_each_side_answers_for_its_own_target() -> None:
    # TPOT over target, TTFT within: the decode side needs a replica, the prefill side does not.
    w = win(rps=1.0, running=3, waiting=2, ttft=0.3, tpot=0.2)
    prefill = run(2, [w, w], targets=TARGETS.for_side(Side.PREFILL))
    decode = run(2, [w, w], targets=TARGETS.for_side(Side.DECODE))
    assert prefill.reason is Reason.HOLD
    assert (decode.replicas, decode.reason) == (3, Reason.SCALE_UP_LATENCY)
    assert TARGETS.for_side(Side.UNIFIED) == TARGETS


# --- cool-down and bounds ----------------------------------------------------------------------


def test_one_scale_event_per_cooldown() -> None:
    first = run(2, [win(rps=3.1, running=4, waiting=0)] * 2, now=1000.0)
    assert first.replicas == 4
    more = [win(rps=3.0, running=4, waiting=0)] * 4  # 12 req/s: 6 needed
    held = run(4, more, memory=first.memory, now=1060.0)
    assert (held.replicas, held.reason) == (4, Reason.COOLING_DOWN)
    assert "last scaled 60 s ago (cool-down 120 s)" in held.message
    later = run(4, more, memory=held.memory, now=1120.0)
    assert (later.replicas, later.reason) == (6, Reason.SCALE_UP_RATE)


def test_max_replicas_caps_and_then_holds() -> None:
    heavy = [win(rps=8.0, running=10, waiting=5)] * 2  # 16 req/s: 8 needed
    d = run(2, heavy, hi=4)
    assert (d.replicas, d.reason, d.needed) == (4, Reason.SCALE_UP_RATE, 8)
    assert "(maxReplicas 4)" in d.message
    at_max = run(4, [win(rps=4.0, running=10, waiting=5)] * 4, hi=4)
    assert (at_max.replicas, at_max.reason) == (4, Reason.AT_MAX_REPLICAS)


def test_min_replicas_floors_a_scale_down() -> None:
    idle = [win(rps=0.0, running=0, waiting=0)] * 3
    memory = LONG_AGO
    for t in range(0, 181, 30):
        d = run(3, idle, memory=memory, now=NOW + t, lo=2)
        memory = d.memory
    assert (d.replicas, d.reason) == (2, Reason.SCALE_DOWN_IDLE)


def test_outside_the_bounds_goes_to_them_at_once() -> None:
    cooling = replace(LONG_AGO, last_scale_at=NOW - 10)
    d = run(12, [None] * 12, memory=cooling, hi=10)
    assert (d.replicas, d.reason) == (10, Reason.OUTSIDE_BOUNDS)
    assert d.memory.last_direction == DOWN
    up = run(0, [], lo=1)
    assert (up.replicas, up.reason) == (1, Reason.OUTSIDE_BOUNDS)
    with pytest.raises(ValueError):
        run(3, [], lo=4, hi=2)


# --- no signal ---------------------------------------------------------------------------------


def test_no_signal_holds() -> None:
    below = replace(LONG_AGO, below_since=NOW - 100, below_peak=2)
    for windows in ([None, None, None], [], [win(), win()]):
        d = run(3, windows, memory=below)
        assert (d.replicas, d.reason) == (3, Reason.NO_SIGNAL)
        assert d.memory.below_since is None  # a gap in the figures is not calm
    unknown = EngineCapacity(requests_per_second=0.0, concurrency=0.0)
    d = run(3, [win(rps=5.0, running=4, waiting=0)] * 3, engine=unknown)
    assert (d.replicas, d.reason) == (3, Reason.NO_SIGNAL)


# --- down --------------------------------------------------------------------------------------


def quiet(rps: float = 0.3) -> ServerWindow:
    return win(rps=rps, running=2, waiting=0, ttft=0.3, tpot=0.02)


def test_load_down_holds_until_the_stabilisation_period_then_scales_down() -> None:
    # 6 replicas, 1.8 req/s and 12 in flight: 2 keep utilisation under 0.7 (1.8 / 1.4, 12 / 11.2).
    memory = LONG_AGO
    decisions = []
    for t in range(0, 181, 30):
        d = run(6, [quiet()] * 6, memory=memory, now=NOW + t)
        decisions.append(d)
        memory = d.memory
    assert [d.replicas for d in decisions[:-1]] == [6] * 6
    assert {d.reason for d in decisions[:-1]} == {Reason.HOLD}
    assert "2 would do, for 90 s of 180 s" in decisions[3].message
    last = decisions[-1]
    assert (last.replicas, last.reason) == (2, Reason.SCALE_DOWN_IDLE)
    assert last.memory.last_direction == DOWN and last.memory.below_since is None


def test_scale_down_goes_to_the_most_the_period_needed() -> None:
    memory = LONG_AGO
    for t in range(0, 181, 30):
        rps = 0.85 if t == 90 else 0.3  # 5.1 req/s once: 4 keep it under 0.7
        d = run(6, [quiet(rps)] * 6, memory=memory, now=NOW + t)
        memory = d.memory
    assert (d.replicas, d.reason) == (4, Reason.SCALE_DOWN_IDLE)


def test_a_blip_restarts_the_period() -> None:
    memory = LONG_AGO
    replicas = []
    for t in range(0, 361, 30):
        rps = 1.5 if t == 90 else 0.3  # 9 req/s at t=90: 6 are needed under 0.7
        d = run(6, [quiet(rps)] * 6, memory=memory, now=NOW + t)
        replicas.append((t, d.replicas))
        memory = d.memory
    downs = [t for t, n in replicas if n < 6]
    assert downs and downs[0] == 300  # 180 s after t=120, the first calm one after the blip


def test_no_scale_down_while_a_replica_is_silent_or_slow() -> None:
    silent = run(6, [quiet()] * 5 + [None], memory=replace(LONG_AGO, below_since=NOW - 500))
    assert (silent.replicas, silent.reason) == (6, Reason.HOLD)
    assert "1 of 6 replicas gave no figures" in silent.message
    assert silent.memory.below_since is None
    slow = [quiet()] * 5 + [win(rps=0.3, running=2, waiting=0, ttft=1.5)]
    d = run(6, slow, memory=replace(LONG_AGO, below_since=NOW - 500))
    assert (d.replicas, d.reason) == (6, Reason.HOLD)
    assert "over its latency target" in d.message


def test_scale_down_waits_for_the_cooldown_too() -> None:
    memory = ScalingMemory(last_scale_at=NOW - 60, last_direction=UP, below_since=NOW - 200)
    d = run(6, [quiet()] * 6, memory=memory)
    assert (d.replicas, d.reason) == (6, Reason.COOLING_DOWN)
    assert d.memory.below_since == NOW - 200  # the period goes on
    d = run(6, [quiet()] * 6, memory=d.memory, now=NOW + 60)
    assert (d.replicas, d.reason) == (2, Reason.SCALE_DOWN_IDLE)


# --- a 30-minute timeline: no flapping ----------------------------------------------------------


def simulate(load: Callable[[float], float], replicas: int, step: float = 15.0) -> list[float]:
    """Decisions every ``step`` seconds for 30 minutes; the replicas share ``load(t)`` req/s
    evenly. Returns the times of the scale events."""
    memory = LONG_AGO
    events = []
    t = 0.0
    while t <= 1800.0:
        per = load(t) / replicas
        windows: list[ServerWindow | None] = [win(rps=per, running=per * 4, waiting=0)] * replicas
        d = decide(
            current=replicas,
            min_replicas=1,
            max_replicas=20,
            engine=ENGINE,
            targets=TARGETS,
            windows=windows,
            memory=memory,
            now=NOW + t,
        )
        if d.replicas != replicas:
            events.append(t)
        replicas, memory = d.replicas, d.memory
        t += step
    return events


def spaced(events: list[float], seconds: float = ScalingPolicy().cooldown_seconds) -> bool:
    return all(b - a >= seconds for a, b in itertools.pairwise(events))


def test_load_alternating_around_the_scale_up_threshold_does_not_flap() -> None:
    # 3 replicas sustain 6 req/s; the load swings 5.7 <-> 6.3 every minute.
    events = simulate(lambda t: 5.7 if int(t // 60) % 2 else 6.3, replicas=3)
    assert spaced(events)
    assert len(events) == 1  # up to 4 once; 4 never fit under 0.7 again, so no way back down


def test_load_alternating_around_the_scale_down_threshold_does_not_flap() -> None:
    # 4 replicas; 4.0 req/s fits 3 under 0.7, 4.4 does not: never 180 s in a row below.
    events = simulate(lambda t: 4.0 if int(t // 60) % 2 else 4.4, replicas=4)
    assert events == []


def test_noisy_load_scales_at_most_once_per_cooldown() -> None:
    rng = random.Random(44)
    noise = {round(t): rng.uniform(0.8, 1.2) for t in range(0, 1816, 15)}

    def load(t: float) -> float:
        return 6.0 * (1 + 0.5 * math.sin(2 * math.pi * t / 900)) * noise[round(t)]

    events = simulate(load, replicas=3)
    assert events  # it does follow the swell
    assert spaced(events)


# --- more load never fewer replicas -------------------------------------------------------------

latency = st.one_of(st.none(), st.floats(0.01, 5.0))
windows_strategy = st.lists(
    st.one_of(
        st.none(),
        st.builds(
            win,
            rps=st.one_of(st.none(), st.floats(0.0, 20.0)),
            running=st.one_of(st.none(), st.floats(0.0, 40.0)),
            waiting=st.one_of(st.none(), st.sampled_from([0.0, 1.0, 5.0, 30.0])),
            ttft=latency,
            tpot=st.one_of(st.none(), st.floats(0.005, 0.2)),
            observations=st.sampled_from([0.0, 5.0, 100.0]),
        ),
    ),
    min_size=0,
    max_size=6,
)
memory_strategy = st.builds(
    ScalingMemory,
    last_scale_at=st.one_of(st.none(), st.floats(NOW - 400, NOW)),
    last_direction=st.sampled_from([None, UP, DOWN]),
    below_since=st.one_of(st.none(), st.floats(NOW - 400, NOW)),
    below_peak=st.integers(0, 10),
    correction=st.floats(0.25, 1.5),
)


def scaled(w: ServerWindow | None, k: float) -> ServerWindow | None:
    if w is None:
        return None
    return replace(
        w,
        requests_per_second=None if w.requests_per_second is None else w.requests_per_second * k,
        requests_running=None if w.requests_running is None else w.requests_running * k,
        requests_waiting=None if w.requests_waiting is None else w.requests_waiting * k,
    )


@settings(max_examples=400, deadline=None)
@given(
    windows=windows_strategy,
    k=st.floats(1.0, 8.0),
    current=st.integers(1, 8),
    lo=st.integers(0, 8),
    extra=st.integers(0, 6),
    memory=memory_strategy,
)
def test_more_load_never_fewer_replicas(
    windows: list[ServerWindow | None],
    k: float,
    current: int,
    lo: int,
    extra: int,
    memory: ScalingMemory,
) -> None:
    lo = min(lo, current)
    hi = current + extra
    base = run(current, windows, memory=memory, lo=lo, hi=hi)
    more = run(current, [scaled(w, k) for w in windows], memory=memory, lo=lo, hi=hi)
    assert more.replicas >= base.replicas, (base, more)


@settings(max_examples=300, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 20.0), min_size=1, max_size=6),
    which=st.integers(0, 5),
    more=st.floats(0.0, 20.0),
    current=st.integers(1, 8),
    memory=memory_strategy,
)
def test_more_rate_on_one_replica_never_fewer_replicas(
    rates: list[float], which: int, more: float, current: int, memory: ScalingMemory
) -> None:
    # Without latency evidence the correction is the memory's, so only the load moves.
    windows: list[ServerWindow | None] = [win(rps=r, running=r * 4, waiting=0) for r in rates]
    i = which % len(rates)
    heavier = list(windows)
    heavier[i] = win(rps=rates[i] + more, running=rates[i] * 4, waiting=0)
    base = run(current, windows, memory=memory, lo=1, hi=12)
    assert run(current, heavier, memory=memory, lo=1, hi=12).replicas >= base.replicas
