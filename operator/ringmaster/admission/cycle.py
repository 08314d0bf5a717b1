"""The admission cycle: one ordered pass over the waiting gangs, from one snapshot.

As in Kueue's scheduler: the gangs are taken in order (PriorityClass value, then creation time);
each is checked against the room left by the gangs admitted before it in the same pass (so two
gangs are never admitted into the same room), and gets a decision: :class:`Admit` on a pool, or
:class:`Wait` with a reason and the numbers. All or nothing: a gang's workers and its own
reducers fit together, or nothing of it starts.

Queueing rule (an operator setting, ``ringmaster run --queueing``):

- ``BestEffortFIFO`` (default): a gang that does not fit does not stop smaller ones behind it
  from starting, so free room is used. So that a large gang is not passed over forever, once it
  has waited ``bypass_limit_seconds`` it holds its accelerator type: gangs behind it in the
  order (same or lower priority) wait until it has started. Kueue's BestEffortFIFO has no such
  bound (it leaves starvation to preemption); a gang here can be delayed at most that long by
  later gangs, then for as long as the running ones take to free room.
- ``StrictFIFO``: the first gang of an accelerator type that does not fit holds every gang behind
  it of that type (a strict queue per accelerator type; other types are not held).

No preemption of gangs: a waiting high-priority gang does not evict running ones (Kueue does
that, with its preemption policies, for clusters that need it). The one exception is a
PoolProfile's measurement run, which takes idle hosts only and gives them back at once to a gang
that needs them (:mod:`ringmaster.admission.profiles`, :class:`Yield`).

Inside a pool whose hosts carry topology labels (GKE blocks, AWS network-node layers, the NVLink
clique), a gang of whole-host workers is packed into the fewest blocks the free hosts allow, and
one that requires its level (``spec.placement.topology: Required``, or Auto where the engine's
plan found spreading too slow: the option carries the verdict, computed with the plan) waits
for one block to hold it, or for NVLink cliques to hold its tensor-parallel groups
(:func:`topology_short`, :mod:`ringmaster.placement.topology`).

A gang that may run on several accelerators (``spec.accelerator.alternatives``) has one option
per pool of each, best first by the job's objective: the first that fits now is admitted, and
the Admit says why not the others (:mod:`ringmaster.admission.alternatives`).

Ringmaster's own serving replicas (an InferenceEndpoint's pods) wait at an admission scheduling
gate and take their room through the same pass, before the gangs, oldest first: each gets a
named host with room that no admitted gang was promised (:class:`Grant`), or stays gated with
the numbers (:class:`Hold`). So kube-scheduler is never free to give one a host a gang holds.
The pods of a replica across hosts (one LeaderWorkerSet group) are admitted whole: every pod a
host of its own from the same pass, or every pod held; a partial group never starts. A
PoolProfile's run comes last in the pass, in the idle hosts nobody else took or waits for.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum

from ringmaster.admission.alternatives import (
    Considered,
    alternatives_waiting_message,
    considered,
    hold,
    open_options,
)
from ringmaster.admission.profiles import ProfileContest, Yield, grant_profile_pods, yields_for
from ringmaster.admission.snapshot import (
    UNLIMITED,
    ClusterSnapshot,
    Key,
    PodFacts,
    PoolSummary,
    Promise,
    Shape,
    copies_that_fit,
)
from ringmaster.engine.placement_cost import PlacementShape
from ringmaster.manifests.profiling import DEGRADED_LABEL
from ringmaster.placement.topology import (
    NVLINK_CLIQUE,
    REQUIRED,
    DomainCount,
    Topology,
    block_key,
    choose_hosts,
    describe_domains,
    describe_hosts,
    free_domains,
    level_name,
)


class QueueingRule(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


# How long later gangs may start ahead of one that does not fit (BestEffortFIFO). Five minutes:
# longer than most gangs take to start, shorter than most training runs.
DEFAULT_BYPASS_LIMIT_SECONDS = 300.0


@dataclass(frozen=True)
class QueueingSettings:
    rule: QueueingRule = QueueingRule.BEST_EFFORT_FIFO
    bypass_limit_seconds: float = DEFAULT_BYPASS_LIMIT_SECONDS


@dataclass(frozen=True)
class ReducerNeed:
    """The job's own reducers: `count` hosts of `machine`, for reducer pool `pool`."""

    machine: str
    count: int
    pool: Key


@dataclass(frozen=True)
class GangOption:
    """The gang as it would run on one pool."""

    pool: str
    worker: Shape  # one worker pod's requests
    workers: int
    one_per_node: bool  # TPU slices: one worker per host
    accelerator_resource: str
    per_worker: int
    reducers: ReducerNeed | None = None
    slices: int = 1
    """TPU multislice: the workers split into this many slices of ``workers / slices`` hosts,
    each on its own pool of ``pools`` (all of them, or none)."""
    pools: tuple[str, ...] = ()
    """Multislice only: the pools (slice node pools) any slice may take, best first."""
    slice_shape: str = ""
    """Multislice only: what one slice is, for people (``tpu-v5-lite-podslice 16x16``)."""
    topology: str = "Preferred"
    """Required: the gang waits until one block of the pool holds it whole; Preferred: packed
    into the fewest blocks the free hosts allow (placement/topology.py). Auto is resolved by the
    shell before the cycle sees it (from the plan: status.plan.placement)."""
    groups: tuple[int, ...] = ()
    """Hosts per tensor / expert group, heaviest first, that the packing keeps in one NVLink
    clique (a GB200 NVL72 domain) where hosts carry cliques."""
    cliques: str = "Preferred"
    """Required: the gang waits until every ``groups[0]`` group of hosts can have an NVLink
    clique of its own; Preferred: inside cliques where the free hosts allow."""
    topology_why: str = ""
    """Why the block level is required, for the waiting message (Auto's numbers)."""
    cliques_why: str = ""
    """Why the cliques are required, for the waiting message (Auto's numbers)."""
    auto: bool = False
    """The engine required the levels (spec.placement.topology: Auto): a level none of the
    pool's domains could hold the gang in even with every host free is preferred instead, so
    that the gang does not wait for ever."""
    accelerator: str = ""
    """The accelerator this option runs the gang on, where the job names alternatives
    (admission/alternatives.py): the options then come best first by the job's objective."""

    @property
    def hosts_per_slice(self) -> int:
        return self.workers // self.slices


@dataclass(frozen=True)
class Wait:
    key: Key
    reason: str
    message: str


@dataclass(frozen=True)
class Admit:
    key: Key
    option: GangOption
    hosts: tuple[str, ...] = ()
    """The host of each worker by rank (the pods are pinned there), or () for none."""
    pools: tuple[str, ...] = ()
    """Multislice: the pool of each slice, by slice id (slice s holds ranks s x hosts per slice
    up to the next slice's first)."""
    blocks: tuple[str, ...] = ()
    """The topology blocks the hosts are in (placement/topology.py), where the pool has them."""
    shape: PlacementShape | None = None
    """The hosts as the engine describes a placement (engine.placement_cost), where the pool
    has topology labels: what the admission's predicted step is read for."""
    considered: Considered = ()
    """A gang with alternatives: every other option, with why it was not taken ("" where it
    had room too)."""

    @property
    def pool(self) -> str:
        return self.pools[0] if self.pools else self.option.pool


Verdict = Admit | Wait


@dataclass(frozen=True)
class Grant:
    """A serving pod let through its admission gate, pinned to `host` (None: it requests no
    room, or names no pool admission knows, and goes where kube-scheduler puts it)."""

    pod: Key
    host: str | None


@dataclass(frozen=True)
class Hold:
    """A serving pod that stays at its admission gate: no host of its pool has room for it now
    that is not promised to an admitted gang."""

    pod: Key
    message: str


ServingVerdict = Grant | Hold | Yield
"""What a pass decides for single pods: serving replicas and PoolProfile measurement pods at the
gate (Grant, Hold), and measurement pods that give their hosts back to a gang (Yield)."""


@dataclass(frozen=True)
class WaitingGang:
    """A job waiting for admission."""

    key: Key
    created: dt.datetime
    queue: str  # what it competes for: its accelerator type
    options: tuple[GangOption, ...]  # the pools that can take it, best first
    priority_class: str | None = None
    attempt: int = 0  # the gang attempt (status.restarts) that waits
    waiting_since: dt.datetime | None = None  # None: it starts waiting now
    blocked: Wait | None = None  # a reason no room can fix (no pool, reducers not ready)


def promise_for(
    key: Key,
    attempt: int,
    option: GangOption,
    hosts: tuple[str, ...] = (),
    pools: tuple[str, ...] = (),
) -> Promise:
    """The room an admitted gang holds until its pods are seen (on `hosts`, when named; a
    multislice gang's on the pool of each slice, `pools`)."""
    need = option.reducers
    return Promise(
        job=key,
        pool=pools[0] if pools else option.pool,
        pools=pools if len(pools) > 1 else (),
        attempt=attempt,
        worker=option.worker,
        workers=option.workers,
        reducer_pool=need.pool if need else None,
        reducer_machine=need.machine if need else None,
        reducers=need.count if need else 0,
        hosts=hosts,
    )


# ---------------------------------------------------------------- the room one cycle works on


class Room:
    """One pool's free room during a cycle: schedulable nodes grouped by free vector, and, once
    a vector is taken from, its nodes by name (so an admitted gang gets named hosts)."""

    def __init__(
        self, vectors: Counter[Shape], names_of: Callable[[Shape], list[str]] | None = None
    ) -> None:
        self.nodes: dict[Shape, int] = dict(vectors)
        self._names_of = names_of
        self._names: dict[Shape, list[str]] = {}  # filled lazily: len == self.nodes[vector]

    def _names_for(self, free: Shape) -> list[str]:
        if free not in self._names:
            count = self.nodes.get(free, 0)
            known = self._names_of(free) if self._names_of else []
            self._names[free] = known if len(known) == count else [""] * count
        return self._names[free]

    def count(self, request: Shape, wanted: int, one_per_node: bool) -> int:
        """How many pods of `request` fit (stops counting at `wanted`)."""
        available = 0
        for free, nodes in self.nodes.items():
            fit = copies_that_fit(dict(free), request)
            available += nodes * (min(fit, 1) if one_per_node else fit)
            if available >= wanted:
                return wanted
        return available

    def take(self, request: Shape, copies: int, one_per_node: bool = False) -> int:
        """Place `copies` pods, tightest nodes first (best fit keeps whole hosts whole, as a
        gang of whole-host workers needs); returns how many were placed."""
        return self.place(request, copies, one_per_node)[0]

    def place(
        self, request: Shape, copies: int, one_per_node: bool = False
    ) -> tuple[int, list[str]]:
        """As :meth:`take`, and the host of each pod placed (none for pods that take no room)."""
        placed = 0
        hosts: list[str] = []
        order = sorted(
            ((copies_that_fit(dict(free), request), free) for free in self.nodes),
            key=lambda item: (item[0], item[1]),
        )
        for fit, free in order:
            if placed >= copies:
                break
            per_node = min(fit, 1) if one_per_node else fit
            if per_node <= 0:
                continue
            if per_node >= UNLIMITED:  # it requests nothing: it takes no room
                return copies, []
            nodes = self.nodes[free]
            full = min(nodes, (copies - placed) // per_node)
            for host in self._move(free, request, per_node, full):
                hosts += [host] * per_node
            placed += full * per_node
            if placed < copies and full < nodes:  # the rest on one more node of this kind
                hosts += self._move(free, request, copies - placed, 1) * (copies - placed)
                placed = copies
        return placed, hosts

    def hosts_fitting(self, request: Shape) -> list[str]:
        """The named hosts with room for one pod of ``request`` (a host of unknown name: none)."""
        hosts: list[str] = []
        for free in list(self.nodes):
            if copies_that_fit(dict(free), request) >= 1:
                hosts += [name for name in self._names_for(free) if name]
        return hosts

    def take_host(self, request: Shape, host: str) -> bool:
        """One pod of ``request`` on the named ``host``; False when it has no room for it."""
        for free in list(self.nodes):
            names = self._names_for(free)
            if host in names and copies_that_fit(dict(free), request) >= 1:
                names.remove(host)
                names.append(host)  # _move takes from the end
                self._move(free, request, 1, 1)
                return True
        return False

    def _move(self, free: Shape, request: Shape, pods: int, nodes: int) -> list[str]:
        """`pods` pods on each of `nodes` nodes of this free room; returns those nodes."""
        if nodes <= 0 or pods <= 0:
            return []
        wanted = dict(request)
        after = tuple((r, amount - pods * wanted.get(r, 0)) for r, amount in free)
        source = self._names_for(free)
        target = self._names_for(after)
        moved = source[len(source) - nodes :]
        del source[len(source) - nodes :]
        target.extend(moved)
        self.nodes[free] -= nodes
        if not self.nodes[free]:
            del self.nodes[free]
            del self._names[free]
        self.nodes[after] = self.nodes.get(after, 0) + nodes
        return moved


class CycleView:
    """The snapshot as one cycle sees it: rooms with what is headed to them packed in first,
    less what this cycle has admitted so far."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self._rooms: dict[str, Room] = {}
        self._reducer_hosts: dict[str, int] = {}

    def room(self, pool: str) -> Room:
        if pool not in self._rooms:
            room = Room(
                self.snapshot.free_vectors(pool),
                lambda free: self.snapshot.nodes_with(pool, free),
            )
            for request, copies in self.snapshot.headed_to(pool):
                room.take(request, copies)  # as the scheduler would find them room
            self._rooms[pool] = room
        return self._rooms[pool]

    def reducer_hosts(self, machine: str) -> int:
        if machine not in self._reducer_hosts:
            self._reducer_hosts[machine] = self.snapshot.free_reducer_hosts(machine)
        return self._reducer_hosts[machine]

    def reducer_hosts_needed(self, option: GangOption) -> int:
        """Hosts the gang's own reducers still need (those already running have theirs)."""
        need = option.reducers
        if need is None:
            return 0
        return max(0, need.count - self.snapshot.reducers_seen(need.pool))

    def topologies(self, option: GangOption) -> dict[str, Topology]:
        """The hosts of the pool with room for a whole worker, by name, with their topology;
        empty when the pool's hosts carry no topology labels or a worker is not a whole host."""
        if not self.snapshot.has_topology(option.pool):
            return {}
        room = self.room(option.pool)
        facts = [self.snapshot.node(h) for h in room.hosts_fitting(option.worker)]
        whole = all(
            f is not None and copies_that_fit(dict(f.allocatable), option.worker) == 1
            for f in facts
        )
        return {f.name: f.topology for f in facts if f is not None} if whole else {}

    def _packed(self, option: GangOption) -> tuple[str, ...]:
        """Hosts by rank packed by topology (the fewest blocks; groups inside a clique), their
        room taken; () where the pool has no topology to pack by."""
        free = self.topologies(option)
        if len(free) < option.workers:
            return ()
        choice = choose_hosts(free, option.workers, option.groups)
        if choice is None:
            return ()
        room = self.room(option.pool)
        for host in choice.hosts:
            taken = room.take_host(option.worker, host)
            assert taken, "a host counted free has room"
        return tuple(choice.hosts)

    def shape_of(self, option: GangOption, hosts: tuple[str, ...]) -> PlacementShape | None:
        """The engine's description of the hosts admitted; None where the pool has no topology
        labels or the hosts are not named."""
        if not hosts or not self.snapshot.has_topology(option.pool):
            return None
        topologies = {h: n.topology for h in hosts if (n := self.snapshot.node(h)) is not None}
        if len(topologies) != len(set(hosts)):
            return None
        return describe_hosts(topologies, hosts, option.groups).shape()

    def blocks_of(self, hosts: tuple[str, ...]) -> tuple[str, ...]:
        """The topology blocks ``hosts`` are in (none where their pool has no blocks)."""
        topologies = [n.topology for h in hosts if (n := self.snapshot.node(h)) is not None]
        key = block_key(tuple(k for t in topologies for k in t.keys))
        return tuple(sorted({t.value(key) or "" for t in topologies} - {""})) if key else ()

    def assume(self, option: GangOption) -> tuple[str, ...]:
        """The gang is admitted: its room is taken for the rest of the cycle. Returns the host
        of each worker by rank, or () when no host is named (workers that request nothing).
        Where the pool's hosts carry topology labels, the hosts are packed by it."""
        packed = () if option.one_per_node else self._packed(option)
        if packed:
            placed, hosts = len(packed), list(packed)
        else:
            placed, hosts = self.room(option.pool).place(
                option.worker, option.workers, option.one_per_node
            )
        if option.reducers is not None:
            machine = option.reducers.machine
            self._reducer_hosts[machine] = self.reducer_hosts(machine) - (
                self.reducer_hosts_needed(option)
            )
        named = placed == option.workers and len(hosts) == placed and all(hosts)
        return tuple(hosts) if named else ()

    def free_slices(self, option: GangOption) -> list[str]:
        """The pools of a multislice gang that can take one whole slice now, best first."""
        per_slice = option.hosts_per_slice
        return [
            pool
            for pool in option.pools
            if self.room(pool).count(option.worker, per_slice, option.one_per_node) >= per_slice
        ]

    def assume_slices(self, option: GangOption, pools: tuple[str, ...]) -> tuple[str, ...]:
        """A multislice gang is admitted on `pools` (one slice each): the room of every slice
        is taken. Returns the host of each worker by rank, or () when not every host is named."""
        hosts: list[str] = []
        for pool in pools:
            placed, named = self.room(pool).place(
                option.worker, option.hosts_per_slice, option.one_per_node
            )
            hosts += named if placed == option.hosts_per_slice else []
        complete = len(hosts) == option.workers and all(hosts)
        return tuple(hosts) if complete else ()


@dataclass(frozen=True)
class GangCheck:
    fits: bool
    reason: str  # InsufficientCapacity, InsufficientReducerCapacity or WorkerLargerThanNode
    message: str
    available: int  # workers that fit now (at most the gang's size)
    why: str = ""  # why the pool cannot take it now beyond being full (cordoned, too small)


WORKER_LARGER_THAN_NODE = "WorkerLargerThanNode"
_BINARY = ("memory", "ephemeral-storage", "hugepages-")


def _amount(resource: str, value: Decimal) -> str:
    if resource.startswith(_BINARY):
        gib = value / (1 << 30)
        return f"{gib:.4g}Gi" if gib >= 1 else f"{value / (1 << 20):.4g}Mi"
    return f"{value.normalize():f}"


def worker_larger_than_nodes(sizes: Counter[Shape], option: GangOption) -> str:
    """Why no node of the pool could hold one worker even empty, or "" when one could (or the
    pool has no nodes yet: it may grow). Such a gang waits for ever: the user must act."""
    if not sizes or any(copies_that_fit(dict(size), option.worker) >= 1 for size in sizes):
        return ""
    largest: dict[str, Decimal] = {}
    for size in sizes:
        for resource, amount in size:
            largest[resource] = max(largest.get(resource, Decimal(0)), amount)
    over = ", ".join(
        f"{name} {_amount(name, amount)} > {_amount(name, largest.get(name, Decimal(0)))}"
        for name, amount in option.worker
        if amount > largest.get(name, Decimal(0))
    )
    return (
        f"a worker requests more than any node of pool {option.pool} has allocatable "
        f"({over}): lower the worker's requests or choose a larger machine type"
    )


def pool_state(view: CycleView, option: GangOption) -> str:
    """Why a pool short of room for the gang is short, when being full is not all of it: its
    hosts cordoned or not Ready, or too few to hold the gang even empty. "" when it is full."""
    sizes = view.snapshot.node_sizes(option.pool)
    hosts = sum(sizes.values())
    schedulable = sum(view.snapshot.free_vectors(option.pool).values())
    degraded = view.snapshot.degraded_hosts(option.pool)
    flagged = f"{degraded} of {hosts} hosts flagged degraded by a PoolProfile ({DEGRADED_LABEL})"
    off = hosts - schedulable - degraded
    if hosts and not schedulable:
        if degraded and not off:
            return f"{flagged}, the others none"
        return f"cordoned or not Ready: 0 of {hosts} hosts schedulable"
    empty = Room(sizes).count(option.worker, option.workers, option.one_per_node)
    if empty < option.workers:
        return f"too small: {empty} fit on its {hosts} hosts even empty"
    parts = [f"{off} of {hosts} hosts cordoned or not Ready"] if off > 0 else []
    parts += [flagged] if degraded else []
    return "full; " + "; ".join(parts) if parts else ""


def waiting_message(option: GangOption, checks: list[tuple[GangOption, GangCheck]]) -> str:
    """What a gang that fits on none of its pools waits for: every pool considered, with its
    room now and why it cannot take the gang (one pool: that pool's own message)."""
    if any(candidate.accelerator for candidate, _ in checks):
        return alternatives_waiting_message(checks, _pool_words)
    if len(checks) == 1:
        return checks[0][1].message
    parts = [f"pool {candidate.pool}: {_pool_words(check)}" for candidate, check in checks]
    return (
        f"needs {option.workers} workers x {option.per_worker} {option.accelerator_resource}"
        f" on one of {len(checks)} pools; " + "; ".join(parts)
    )


def _pool_words(check: GangCheck) -> str:
    """Why one pool does not take the gang, in short."""
    if check.reason == WORKER_LARGER_THAN_NODE:
        return "a worker is larger than any of its hosts"
    if check.reason == "InsufficientCapacity":
        return f"{check.available} fit now" + (f" ({check.why})" if check.why else " (full)")
    return check.message


def check_gang(view: CycleView, option: GangOption) -> GangCheck:
    """THE gang check: all of the gang's workers on the pool, and every one of its own reducers
    on a free host, or nothing."""
    available = view.room(option.pool).count(option.worker, option.workers, option.one_per_node)
    if available < option.workers:
        too_large = worker_larger_than_nodes(view.snapshot.node_sizes(option.pool), option)
        if too_large:
            return GangCheck(False, WORKER_LARGER_THAN_NODE, too_large, 0)
        why = pool_state(view, option)
        return GangCheck(
            False,
            "InsufficientCapacity",
            f"needs {option.workers} workers x {option.per_worker} "
            f"{option.accelerator_resource} on pool {option.pool}; {available} fit now"
            + (f" ({why})" if why else ""),
            available,
            why,
        )
    short = topology_short(view, option)
    if short:
        return GangCheck(False, TOPOLOGY_UNAVAILABLE, short, available)
    hosts = view.reducer_hosts_needed(option)
    if hosts:
        assert option.reducers is not None
        machine = option.reducers.machine
        free = view.reducer_hosts(machine)
        if free < hosts:
            return GangCheck(
                False,
                "InsufficientReducerCapacity",
                f"needs {hosts} free {machine} hosts for its reducers; {max(free, 0)} free",
                available,
            )
    return GangCheck(True, "Admitted", "", available)


TOPOLOGY_UNAVAILABLE = "TopologyUnavailable"


def topology_short(view: CycleView, option: GangOption) -> str:
    """Why a gang that requires its level cannot have it now: the free hosts per domain, with
    the numbers; "" when it can, when it requires none, or the pool has no such level."""
    if REQUIRED not in (option.topology, option.cliques):
        return ""
    free = view.topologies(option)
    if not free:
        return ""
    short = _block_short(view, option, free) if option.topology == REQUIRED else ""
    if not short and option.cliques == REQUIRED:
        short = _cliques_short(view, option, free)
    return short


def _block_short(view: CycleView, option: GangOption, free: Mapping[str, Topology]) -> str:
    """One block for the whole gang."""
    key = block_key(tuple(k for t in free.values() for k in t.keys))
    if key is None:
        return ""
    domains = free_domains(free, key)
    if domains and domains[0].free >= option.workers:
        return ""
    largest = max(view.snapshot.domain_sizes(option.pool, key), default=0)
    if option.auto and largest < option.workers:
        return ""  # no block could ever hold it: Auto packs into the fewest instead
    have = describe_domains(domains, key) if domains else "none free"
    if option.auto:
        return (
            f"needs {option.workers} hosts of pool {option.pool} in one {level_name(key)}; "
            f"{have}; {option.topology_why} (spec.placement.topology: Auto)"
        )
    return (
        f"needs {option.workers} hosts of pool {option.pool} in one {level_name(key)} "
        f"(spec.placement.topology: Required); {have}"
    )


def _cliques_short(view: CycleView, option: GangOption, free: Mapping[str, Topology]) -> str:
    """Every ``groups[0]`` group of hosts (a tensor-parallel group over trays) in an NVLink
    clique of its own: the cliques' free hosts hold that many whole groups."""
    unit = option.groups[0] if option.groups else 1
    if unit <= 1 or option.workers % unit:
        return ""
    per_clique = Counter(t.clique for t in free.values() if t.clique)
    if not per_clique and not view.snapshot.domain_sizes(option.pool, NVLINK_CLIQUE):
        return ""
    needed = option.workers // unit
    room = sum(n // unit for n in per_clique.values())
    if room >= needed:
        return ""
    ever = sum(n // unit for n in view.snapshot.domain_sizes(option.pool, NVLINK_CLIQUE))
    if option.auto and ever < needed:
        return ""  # the cliques could never hold every group: Auto places it as it can
    domains = [
        DomainCount((c,), n) for c, n in sorted(per_clique.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    have = describe_domains(domains, NVLINK_CLIQUE) if domains else "none free"
    why = (
        f"{option.cliques_why} (spec.placement.topology: Auto)"
        if option.auto
        else "spec.placement.topology: Required"
    )
    return (
        f"needs its {needed} tensor-parallel groups of {unit} hosts of pool {option.pool} each "
        f"inside one NVLink clique ({NVLINK_CLIQUE}), room for {room}; {have}; {why}"
    )


INSUFFICIENT_SLICES = "InsufficientSlices"


def check_slices(view: CycleView, option: GangOption) -> tuple[GangCheck, tuple[str, ...]]:
    """THE multislice check: `slices` distinct pools that each take one whole slice now, or
    nothing. Returns the check and the pools chosen (the first free ones, best first)."""
    free = view.free_slices(option)
    if len(free) >= option.slices:
        return GangCheck(True, "Admitted", "", option.workers), tuple(free[: option.slices])
    too_large = worker_larger_than_nodes(view.snapshot.node_sizes(option.pool), option)
    if too_large:
        return GangCheck(False, WORKER_LARGER_THAN_NODE, too_large, 0), ()
    per_slice = option.hosts_per_slice
    busy = []
    for pool in option.pools:
        if pool in free:
            continue
        slice_option = replace(option, pool=pool, workers=per_slice)
        busy.append(f"pool {pool}: {pool_state(view, slice_option) or 'in use'}")
    known = len(option.pools)
    message = (
        f"needs {option.slices} slices of {option.slice_shape}; {len(free)} free"
        f" ({known} pool{'s' if known != 1 else ''} of that type and topology"
        + (f"; {'; '.join(busy)}" if busy else "")
        + ")"
    )
    return GangCheck(False, INSUFFICIENT_SLICES, message, len(free) * per_slice), ()


# ---------------------------------------------------------------- the cycle


def admission_order(
    snapshot: ClusterSnapshot, gangs: Iterable[WaitingGang]
) -> list[tuple[int, WaitingGang]]:
    """(priority, gang), highest priority first, then oldest, then by name."""
    ranked = [(snapshot.priority(g.priority_class), g) for g in gangs]
    return sorted(
        ((p if p is not None else 0, g) for p, g in ranked),
        key=lambda item: (-item[0], item[1].created, item[1].key),
    )


def grant_serving_pods(view: CycleView) -> list[ServingVerdict]:
    """Room for each pod at the admission gate, oldest first, on a named host of its pool. The
    pods of a replica group (a replica across hosts) are decided together, at the place of the
    group's oldest pod: all of them granted hosts of their own in this pass, or all held (a
    group waits whole until every one of its pods is at the gate)."""
    verdicts: list[ServingVerdict] = []
    if not view.snapshot.has_gated():
        return verdicts
    pools = view.snapshot.pools()
    gated = view.snapshot.gated()
    # A PoolProfile's measurement pods come last, in the room everyone else left (profiles.py).
    gated = [pod for pod in gated if pod.profile is None]
    members: dict[Key, list[PodFacts]] = {}
    for pod in gated:
        if pod.group is not None:
            members.setdefault(pod.group, []).append(pod)
    decided: set[Key] = set()
    for pod in gated:
        if pod.group is not None:
            if pod.group not in decided:
                decided.add(pod.group)
                verdicts += _grant_group(view, pools, members[pod.group])
            continue
        if pod.pool is None or not pod.requests:
            verdicts.append(Grant(pod.key, None))
            continue
        if pod.pool not in pools:
            verdicts.append(Hold(pod.key, f"pool {pod.pool} has no nodes"))
            continue
        room = view.room(pod.pool)
        placed, hosts = room.place(pod.requests, 1)
        if placed == 1 and hosts and hosts[0]:
            verdicts.append(Grant(pod.key, hosts[0]))
            continue
        verdicts.append(Hold(pod.key, _no_room(room, pod, 1)))
    return verdicts


def _no_room(room: Room, pod: PodFacts, pods: int) -> str:
    schedulable = sum(room.nodes.values())
    wanted = ", ".join(f"{name} {_amount(name, amount)}" for name, amount in pod.requests)
    if pods == 1:
        return (
            f"no host of pool {pod.pool} has room for it ({wanted}): 0 of {schedulable} "
            f"schedulable hosts, counting the room held for admitted gangs as taken"
        )
    free = room.count(pod.requests, pods, one_per_node=True)
    return (
        f"its replica group needs {pods} hosts of pool {pod.pool} with room for one pod each "
        f"({wanted}); {free} of {schedulable} schedulable hosts have it, counting the room held "
        f"for admitted gangs as taken"
    )


def _grant_group(
    view: CycleView, pools: Mapping[str, PoolSummary], pods: list[PodFacts]
) -> list[ServingVerdict]:
    """One replica group: every pod a host of its own, or every pod held."""
    first = pods[0]
    size = first.group_size
    if len(pods) < size:
        assert first.group is not None
        at_gate = {p.key for p in pods}
        through = [m for m in view.snapshot.group_members(first.group) if m.key not in at_gate]
        if len(pods) + len(through) < size:
            message = (
                f"its replica group has {len(pods)} of its {size} pods at the admission gate; "
                "a group is admitted whole"
            )
            return [Hold(p.key, message) for p in pods]
        # A grant cut short (the operator stopped between its pods' gates): the group was
        # admitted whole, and the pods still at the gate follow onto hosts of their own (a
        # granted pod of a group fills its host, so the room left excludes theirs).
        size = len(pods)
    if first.pool is None or not first.requests:
        return [Grant(p.key, None) for p in pods]
    if first.pool not in pools:
        return [Hold(p.key, f"pool {first.pool} has no nodes") for p in pods]
    room = view.room(first.pool)
    # Counted before anything is taken: a group that does not fit leaves the room as it was.
    if room.count(first.requests, size, one_per_node=True) < size:
        message = _no_room(room, first, size)
        return [Hold(p.key, message) for p in pods]
    placed, hosts = room.place(first.requests, size, one_per_node=True)
    assert placed == size, "counted room is placed"
    if len(hosts) == size and all(hosts):
        return [Grant(p.key, host) for p, host in zip(pods, hosts, strict=True)]
    return [Grant(p.key, None) for p in pods]


def admission_pass(
    snapshot: ClusterSnapshot,
    gangs: Iterable[WaitingGang],
    settings: QueueingSettings,
    now: dt.datetime,
) -> tuple[list[ServingVerdict], list[Verdict]]:
    """One pass: room for the serving pods at the gate first, then a decision for every waiting
    gang in admission order, in the room left. The caller records each Grant
    (:meth:`ClusterSnapshot.grant`) and each Admit (:meth:`ClusterSnapshot.promise`)."""
    view = CycleView(snapshot)
    grants: list[ServingVerdict] = list(grant_serving_pods(view))
    contest = ProfileContest()
    verdicts = _decide_gangs(view, gangs, settings, now, contest)
    if snapshot.has_gated() or contest.yields:
        grants += _profile_verdicts(snapshot, grants, verdicts, contest)
    return grants, verdicts


def _profile_verdicts(
    snapshot: ClusterSnapshot,
    grants: list[ServingVerdict],
    verdicts: list[Verdict],
    contest: ProfileContest,
) -> list[ServingVerdict]:
    """The PoolProfile runs' part of a pass (admission/profiles.py): the runs that yield to a
    waiting gang, then the runs at the gate, in the idle hosts nobody else took or waits for."""
    held = {v.pod for v in grants if isinstance(v, Hold)}
    for pod in snapshot.gated():
        if pod.key in held and pod.pool:
            contest.contested.add(pod.pool)
    contest.taken.update(v.host for v in grants if isinstance(v, Grant) and v.host)
    for verdict in verdicts:
        if isinstance(verdict, Admit):
            if verdict.hosts:
                contest.taken.update(verdict.hosts)
            else:
                contest.contested.update(verdict.pools or (verdict.option.pool,))
    out: list[ServingVerdict] = list(contest.yields.values())
    for key, host, why in grant_profile_pods(snapshot, snapshot.pools(), contest):
        out.append(Hold(key, why) if why else Grant(key, host))
    return out


def admission_cycle(
    snapshot: ClusterSnapshot,
    gangs: Iterable[WaitingGang],
    settings: QueueingSettings,
    now: dt.datetime,
) -> list[Verdict]:
    """A decision for every waiting gang, in admission order (after the serving pods at the gate
    have taken their room: :func:`admission_pass`). The caller applies them in that order and
    records each Admit in the snapshot (:meth:`ClusterSnapshot.promise`)."""
    return admission_pass(snapshot, gangs, settings, now)[1]


def _decide_gangs(
    view: CycleView,
    gangs: Iterable[WaitingGang],
    settings: QueueingSettings,
    now: dt.datetime,
    contest: ProfileContest | None = None,
) -> list[Verdict]:
    snapshot = view.snapshot
    held: dict[str, WaitingGang] = {}  # queue -> the gang that holds it
    verdicts: list[Verdict] = []
    for _priority, gang in admission_order(snapshot, gangs):
        if gang.blocked is not None:
            verdicts.append(gang.blocked)
            continue
        if gang.priority_class is not None and snapshot.priority(gang.priority_class) is None:
            verdicts.append(
                Wait(
                    gang.key,
                    "PriorityClassNotFound",
                    f"PriorityClass {gang.priority_class} (spec.template.priorityClassName) "
                    "does not exist",
                )
            )
            continue
        gang, holder, dropped = open_options(gang, held)
        if holder is not None:
            verdicts.append(
                Wait(
                    gang.key,
                    "QueuedBehind",
                    f"{holder.key[0]}/{holder.key[1]} starts first ({settings.rule} order "
                    f"for {gang.queue})",
                )
            )
            continue
        slices = [o for o in gang.options if o.slices > 1]
        if slices:
            # A multislice gang has one option: any `slices` of its pools.
            check, pools = check_slices(view, slices[0])
            if check.fits:
                hosts = view.assume_slices(slices[0], pools)
                verdicts.append(Admit(gang.key, slices[0], hosts, pools))
                continue
            checks = [(slices[0], check)]
            if contest is not None:
                contest.contested.update(slices[0].pools)
        else:
            checks = [(option, check_gang(view, option)) for option in gang.options]
            chosen = next((option for option, check in checks if check.fits), None)
            if chosen is not None:
                hosts = view.assume(chosen)
                verdicts.append(
                    Admit(
                        gang.key,
                        chosen,
                        hosts,
                        blocks=view.blocks_of(hosts),
                        shape=view.shape_of(chosen, hosts),
                        considered=considered(checks, chosen, dropped),
                    )
                )
                continue
        if contest is not None and not slices:
            for option, check in checks:
                if check.reason == "InsufficientCapacity":
                    yields_for(
                        view.snapshot,
                        gang.key,
                        option.pool,
                        option.workers,
                        check.available,
                        option.worker,
                        option.one_per_node,
                        contest,
                    )
        # Report the first option that could fit once room frees; a gang no node could ever
        # hold says so, and never holds its queue (it would block it for ever).
        could = [check for _, check in checks if check.reason != WORKER_LARGER_THAN_NODE]
        first = could[0] if could else checks[0][1]
        message = waiting_message(checks[0][0], checks) if could else first.message
        verdicts.append(Wait(gang.key, first.reason, message))
        if not could:
            continue
        since = gang.waiting_since or now
        waited = (now - since).total_seconds()
        if settings.rule == QueueingRule.STRICT_FIFO or waited >= settings.bypass_limit_seconds:
            hold(held, gang)
    return verdicts
