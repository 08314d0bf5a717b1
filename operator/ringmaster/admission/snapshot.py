"""The cluster as admission sees it: pools, free room per node, and room promised to gangs.

Kept up to date from watch events, one object at a time (O(changed objects), never a rebuild
from all nodes), as Kueue's cache is. Every pod's requests count exactly once:

- bound and not finished: on its node (``used``);
- not bound yet, pinned to a host (admission chose it) and not going away: on that host, as if
  bound (``used``);
- not bound yet, not pinned and not going away: on the pool its nodeSelector names
  (``pending``);
- held at Ringmaster's admission scheduling gate (an InferenceEndpoint's replica): nowhere until
  a cycle grants it a host (:func:`ringmaster.admission.cycle.admission_pass`); from then on
  pinned there, as if bound, whether or not the pod event that shows the grant has come;
- decided but not seen yet: in the :class:`Promise` of its admitted gang, which counts only the
  pods of the gang's attempt that no event has shown: on the hosts the promise names, one worker
  per unseen rank (``reserved``), or, for a promise with no hosts, on its pool (``workers -
  seen``).

A pool's free room is a multiset of free vectors, one per schedulable node ("12 nodes with 8 GPUs
free, 3 with none"): a pod event moves one node from one vector to another, and the gang check
(:func:`ringmaster.admission.cycle.check_gang`) works per distinct vector, not per node. Nodes
of a pool are mostly alike, so a pool of 2,000 hosts is a handful of vectors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ringmaster.manifests.profiling import DEGRADED_LABEL
from ringmaster.placement.labels import POOL_NAME_KEYS, PoolIdentity
from ringmaster.placement.pools import Node
from ringmaster.placement.topology import NVLINK_CLIQUE, Topology, block_domain, node_topology

Key = tuple[str, str]
"""(namespace, name)."""
Shape = tuple[tuple[str, Decimal], ...]
"""Requests (or free room) as a sorted tuple: hashable, so alike pods and nodes group."""
UNLIMITED = 1 << 30  # how many copies of a pod that requests nothing "fit" a node


def shape(requests: Mapping[str, Decimal]) -> Shape:
    """The positive requests, sorted by resource name."""
    return tuple(sorted((name, amount) for name, amount in requests.items() if amount > 0))


def copies_that_fit(free: Mapping[str, Decimal], request: Shape) -> int:
    """How many copies of `request` fit in `free` (a resource the node lacks fits none)."""
    if not request:
        return UNLIMITED
    return max(0, min(int(free.get(name, Decimal(0)) // amount) for name, amount in request))


@dataclass(frozen=True)
class NodeFacts:
    """What admission needs of a node."""

    name: str
    identity: PoolIdentity
    allocatable: Shape
    schedulable: bool  # Ready and not cordoned
    pool_label: str | None  # the label key that names its pool (the pods' nodeSelector)
    accelerators: int
    # Flagged by a PoolProfile (ringmaster.dev/degraded=true): no gang or serving replica is
    # placed on it; a profile's own pods may be, to measure it again.
    degraded: bool = False
    # Where it sits in the network (GKE blocks, AWS network-node layers, the NVLink clique):
    # admission packs a gang's hosts by it (placement/topology.py).
    topology: Topology = field(default_factory=Topology)

    @classmethod
    def from_node(cls, node: Node) -> NodeFacts:
        pool = node.identity.pool
        label = next((k for k in POOL_NAME_KEYS if pool and node.labels.get(k) == pool), None)
        return cls(
            name=node.name,
            identity=node.identity,
            allocatable=tuple(sorted(node.allocatable.items())),
            schedulable=node.schedulable,
            pool_label=label,
            accelerators=node.accelerators,
            degraded=node.labels.get(DEGRADED_LABEL) == "true",
            topology=node_topology(node.labels),
        )


@dataclass(frozen=True)
class PodFacts:
    """What admission needs of a pod (built by the shell from the object and its labels)."""

    namespace: str
    name: str
    requests: Shape
    node: str | None = None  # spec.nodeName once bound
    pinned: str | None = None  # the host its node affinity pins it to (manifests.pinned_to)
    active: bool = True  # not Succeeded or Failed
    terminating: bool = False  # deletionTimestamp set
    pool: str | None = None  # the pool its nodeSelector names
    machine: str | None = None  # the machine type its nodeSelector names (reducers)
    job: Key | None = None  # the TrainingJob whose worker it is
    attempt: int = 0
    reducer_pool: Key | None = None  # the ReductionServerPool whose reducer it is
    gated: bool = False  # held at Ringmaster's admission scheduling gate (a serving replica)
    group: Key | None = None  # the replica group (a LeaderWorkerSet group) it belongs to
    group_size: int = 1  # the pods of its group, all admitted together
    profile: Key | None = None  # the PoolProfile whose measurement pod it is (a group of its run)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def host(self) -> str | None:
        """Where it takes room: its node once bound, the host it is pinned to before."""
        if self.node:
            return self.node
        return None if self.terminating else self.pinned


@dataclass(frozen=True)
class Promise:
    """Room held for an admitted gang until its pods are seen: `workers` pods of `worker` on
    `pool` for the gang's attempt, and `reducers` hosts of `reducer_machine` for its own reducer
    pool (none for a job that uses a shared pool: a shared pool holds its own hosts)."""

    job: Key
    pool: str
    attempt: int
    worker: Shape
    workers: int
    reducer_pool: Key | None = None
    reducer_machine: str | None = None
    reducers: int = 0
    hosts: tuple[str, ...] = ()
    """The host of each worker by rank, when admission chose them (the pods are pinned there)."""
    pools: tuple[str, ...] = ()
    """A multislice gang's pool of each slice (``pool`` is the first); () for one pool."""


@dataclass(frozen=True)
class PoolSummary:
    """A pool as pool selection sees it."""

    name: str
    identity: PoolIdentity
    accelerators_per_node: int
    node_selector: Mapping[str, str]
    nodes: int
    levels: tuple[str, ...] = ()
    """The topology levels admission packs the pool's hosts by: the block level's label key
    (GKE's block, AWS's network-node layer 1, a user's outermost level) and the NVLink clique
    (``nvidia.com/gpu.clique``), where its hosts carry them."""


def _add(counter: Counter[Any], key: Any, n: int = 1) -> None:
    counter[key] += n
    if counter[key] == 0:
        del counter[key]


def _domains_of(node: NodeFacts) -> list[tuple[str, tuple[str, ...]]]:
    """The block and the NVLink clique a node is in, as (level key, domain)."""
    domains = []
    block = block_domain(node.name, node.topology)
    if block is not None:
        domains.append(block)
    if node.topology.clique:
        domains.append((NVLINK_CLIQUE, (node.topology.clique,)))
    return domains


def _identity_order(identity: PoolIdentity) -> tuple[str, str, str, str]:
    return (
        identity.pool or "",
        identity.instance_type or "",
        identity.accelerator or "",
        identity.tpu_topology or "",
    )


class ClusterSnapshot:
    """Pools, free room and promises, updated one event at a time. Not thread-safe: the shell
    feeds it and runs cycles from one event loop."""

    def __init__(self, reducer_request: Mapping[str, Decimal]) -> None:
        self.reducer_request = shape(reducer_request)
        self.version = 0  # moves on every change: the shell runs a cycle when it moved
        self._nodes: dict[str, NodeFacts] = {}
        self._pods: dict[Key, PodFacts] = {}
        self._used: dict[str, dict[str, Decimal]] = {}
        self._reducers_on: Counter[str] = Counter()
        # What each node contributes now, so an update can take it back: (pool, free vector).
        self._counted: dict[str, tuple[str, Shape]] = {}
        self._reducer_host: dict[str, str] = {}  # node -> machine type, when a reducer fits
        self._free: dict[str, Counter[Shape]] = {}  # pool -> free vector -> schedulable nodes
        # The same nodes by name (insertion-ordered dicts used as sets): a cycle picks hosts.
        self._free_names: dict[str, dict[Shape, dict[str, None]]] = {}
        self._members: dict[str, Counter[tuple[PoolIdentity, str | None, int]]] = {}
        self._sizes: dict[str, Counter[Shape]] = {}  # pool -> allocatable -> nodes (any state)
        self._pending: dict[str, Counter[Shape]] = {}  # pool -> unbound pods' requests
        self._unplaced_reducers: Counter[str] = Counter()  # machine type -> unbound reducers
        self._free_reducer_hosts: Counter[str] = Counter()
        self._seen_workers: Counter[tuple[Key, int]] = Counter()  # (job, attempt) -> pods
        self._seen_reducers: Counter[Key] = Counter()  # reducer pool -> pods
        self._seen_on: Counter[tuple[Key, int, str]] = Counter()  # (job, attempt, host) -> pods
        self._promises: dict[Key, Promise] = {}
        self._promised_on: dict[str, set[Key]] = {}  # host -> jobs whose promise names it
        self._priorities: dict[str, tuple[int, bool]] = {}  # class -> (value, globalDefault)
        self._gated: dict[Key, PodFacts] = {}  # pods at the admission gate
        self._gated_since: dict[Key, int] = {}  # their order of arrival (kept across updates)
        self._arrivals = 0
        self._granted: dict[Key, str] = {}  # gated pods a cycle gave a host, not yet seen ungated
        self._degraded: Counter[str] = Counter()  # pool -> schedulable hosts flagged degraded
        self._packable: Counter[str] = Counter()  # pool -> hosts with a block or NVLink clique
        # pool -> (level key, domain) -> hosts, any state: blocks and NVLink cliques whole.
        self._domains: dict[str, Counter[tuple[str, tuple[str, ...]]]] = {}
        self._profile_pods: set[Key] = set()  # PoolProfile measurement pods (few, looked at often)

    # ------------------------------------------------------------ events

    def set_node(self, node: NodeFacts) -> None:
        old = self._nodes.get(node.name)
        if old == node:
            return
        if old is not None and old.identity.pool:
            self._leave(old)
        self._nodes[node.name] = node
        if node.identity.pool:
            self._members.setdefault(node.identity.pool, Counter())
            _add(self._members[node.identity.pool], self._member(node))
            _add(self._sizes.setdefault(node.identity.pool, Counter()), node.allocatable)
            if node.degraded and node.schedulable:
                _add(self._degraded, node.identity.pool)
            if node.topology.packable:
                _add(self._packable, node.identity.pool)
                domains = self._domains.setdefault(node.identity.pool, Counter())
                for domain in _domains_of(node):
                    _add(domains, domain)
        self._refresh(node.name)
        self.version += 1

    def remove_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is None:
            return
        if old.identity.pool:
            self._leave(old)
        self._refresh(name)
        self.version += 1

    def set_pod(self, pod: PodFacts) -> None:
        granted = self._granted.get(pod.key)
        if granted is not None:
            if pod.gated and not pod.node:
                # A grant is being written: the pod takes its room on that host meanwhile (an
                # event of the pod from before the grant must not give the room back).
                pod = replace(pod, gated=False, pinned=granted)
            else:
                del self._granted[pod.key]
        old = self._pods.get(pod.key)
        if old == pod:
            return
        if old is not None:
            self._count_pod(old, -1)
        self._pods[pod.key] = pod
        if pod.profile is not None:
            self._profile_pods.add(pod.key)
        self._count_pod(pod, 1)
        if pod.key not in self._gated:
            self._gated_since.pop(pod.key, None)
        # A pinned pod's host also moves the promise's reservation there (seen or not).
        hosts = {*((old.host, old.pinned) if old else ()), pod.host, pod.pinned}
        for host in hosts - {None}:
            self._refresh(host)
        self.version += 1

    def grant(self, key: Key, host: str | None) -> None:
        """A cycle let a gated pod through to `host` (None: anywhere, it needs no room): it takes
        the room there from now on."""
        pod = self._pods.get(key)
        if pod is None or not pod.gated:
            return
        if host is None:
            self.set_pod(replace(pod, gated=False))
            return
        self._granted[key] = host
        self.set_pod(pod)

    def ungrant(self, key: Key) -> None:
        """The grant could not be written: the pod is gated again, and holds nothing."""
        host = self._granted.pop(key, None)
        pod = self._pods.get(key)
        if host is not None and pod is not None and not pod.node:
            self.set_pod(replace(pod, gated=True, pinned=None))

    def remove_pod(self, key: Key) -> None:
        self._granted.pop(key, None)
        self._gated_since.pop(key, None)
        self._profile_pods.discard(key)
        old = self._pods.pop(key, None)
        if old is None:
            return
        self._count_pod(old, -1)
        for host in {old.host, old.pinned} - {None}:
            self._refresh(host)  # type: ignore[arg-type]
        self.version += 1

    def set_priority_class(self, name: str, value: int, global_default: bool = False) -> None:
        if self._priorities.get(name) != (value, global_default):
            self._priorities[name] = (value, global_default)
            self.version += 1

    def remove_priority_class(self, name: str) -> None:
        if self._priorities.pop(name, None) is not None:
            self.version += 1

    def promise(self, promise: Promise) -> None:
        """Hold room for an admitted gang (replaces the job's previous promise)."""
        old = self._promises.get(promise.job)
        if old != promise:
            self._promises[promise.job] = promise
            self._place_promise(old, promise)
            self.version += 1

    def release(self, job: Key) -> None:
        """The gang holds nothing beyond its pods any more (finished, suspended, restarting,
        deleted, or its pods could not be created)."""
        old = self._promises.pop(job, None)
        if old is not None:
            self._place_promise(old, None)
            self.version += 1

    # ------------------------------------------------------------ bookkeeping

    def _place_promise(self, old: Promise | None, new: Promise | None) -> None:
        """Move a promise's reservations from the hosts of `old` to those of `new`."""
        if old is not None:
            for host in set(old.hosts):
                jobs = self._promised_on[host]
                jobs.discard(old.job)
                if not jobs:
                    del self._promised_on[host]
        if new is not None:
            for host in set(new.hosts):
                self._promised_on.setdefault(host, set()).add(new.job)
        for host in {*(old.hosts if old else ()), *(new.hosts if new else ())}:
            self._refresh(host)

    def _reserved(self, host: str) -> dict[str, Decimal]:
        """What promises hold on a host: a worker for each rank placed there that no pod of
        the gang's attempt has shown yet."""
        reserved: dict[str, Decimal] = {}
        for job in self._promised_on.get(host, ()):
            promise = self._promises[job]
            unseen = promise.hosts.count(host) - self._seen_on[(job, promise.attempt, host)]
            if unseen <= 0:
                continue
            for name, amount in promise.worker:
                reserved[name] = reserved.get(name, Decimal(0)) + unseen * amount
        return reserved

    def _leave(self, node: NodeFacts) -> None:
        pool = node.identity.pool or ""
        _add(self._members[pool], self._member(node), -1)
        if not self._members[pool]:
            del self._members[pool]
        _add(self._sizes[pool], node.allocatable, -1)
        if not self._sizes[pool]:
            del self._sizes[pool]
        if node.degraded and node.schedulable:
            _add(self._degraded, pool, -1)
            if not self._degraded[pool]:
                del self._degraded[pool]
        if node.topology.packable:
            _add(self._packable, pool, -1)
            if not self._packable[pool]:
                del self._packable[pool]
            for domain in _domains_of(node):
                _add(self._domains[pool], domain, -1)
            if not self._domains[pool]:
                del self._domains[pool]

    @staticmethod
    def _member(node: NodeFacts) -> tuple[PoolIdentity, str | None, int]:
        return (node.identity, node.pool_label, node.accelerators)

    def _count_pod(self, pod: PodFacts, sign: int) -> None:
        if pod.job is not None:
            _add(self._seen_workers, (pod.job, pod.attempt), sign)
            if pod.pinned:
                _add(self._seen_on, (pod.job, pod.attempt, pod.pinned), sign)
        if pod.reducer_pool is not None:
            _add(self._seen_reducers, pod.reducer_pool, sign)
        if not pod.active:
            return
        if pod.gated and not pod.node:
            # Held at the gate: it takes no room until a cycle grants it some.
            if pod.terminating or sign < 0:
                self._gated.pop(pod.key, None)
            else:
                self._gated[pod.key] = pod
                if pod.key not in self._gated_since:
                    self._arrivals += 1
                    self._gated_since[pod.key] = self._arrivals
            return
        if pod.host:
            used = self._used.setdefault(pod.host, {})
            for name, amount in pod.requests:
                used[name] = used.get(name, Decimal(0)) + sign * amount
                if used[name] == 0:
                    del used[name]
            if not used:
                del self._used[pod.host]
            if pod.reducer_pool is not None and pod.node:
                _add(self._reducers_on, pod.node, sign)
        elif not pod.terminating:
            if pod.pool:
                _add(self._pending.setdefault(pod.pool, Counter()), pod.requests, sign)
                if not self._pending[pod.pool]:
                    del self._pending[pod.pool]
            if pod.reducer_pool is not None and pod.machine:
                _add(self._unplaced_reducers, pod.machine, sign)

    def _refresh(self, name: str) -> None:
        """Take back what the node contributed and count what it contributes now."""
        counted = self._counted.pop(name, None)
        if counted is not None:
            pool, free = counted
            _add(self._free[pool], free, -1)
            if not self._free[pool]:
                del self._free[pool]
            names = self._free_names[pool]
            del names[free][name]
            if not names[free]:
                del names[free]
                if not names:
                    del self._free_names[pool]
        machine = self._reducer_host.pop(name, None)
        if machine is not None:
            _add(self._free_reducer_hosts, machine, -1)
        node = self._nodes.get(name)
        if node is None or not node.schedulable or not node.identity.pool or node.degraded:
            return
        used = self._used.get(name, {})
        reserved = self._reserved(name) if name in self._promised_on else {}
        free = tuple(
            (r, amount - used.get(r, Decimal(0)) - reserved.get(r, Decimal(0)))
            for r, amount in node.allocatable
        )
        pool = node.identity.pool
        self._counted[name] = (pool, free)
        _add(self._free.setdefault(pool, Counter()), free)
        self._free_names.setdefault(pool, {}).setdefault(free, {})[name] = None
        # A reducer takes a CPU host to itself (it needs the host's NIC).
        machine = node.identity.instance_type
        if (
            node.identity.accelerator is None
            and machine
            and not self._reducers_on.get(name)
            and copies_that_fit(dict(free), self.reducer_request) >= 1
        ):
            self._reducer_host[name] = machine
            _add(self._free_reducer_hosts, machine)

    # ------------------------------------------------------------ queries

    def pools(self) -> dict[str, PoolSummary]:
        """Every pool with its identity, largest host, node selector and size."""
        out = {}
        for name, members in sorted(self._members.items()):
            identity = min((m[0] for m in members), key=_identity_order)
            labels = {m[1] for m in members if m[1]}
            label = next((k for k in POOL_NAME_KEYS if k in labels), POOL_NAME_KEYS[0])
            out[name] = PoolSummary(
                name=name,
                identity=identity,
                accelerators_per_node=max(m[2] for m in members),
                node_selector={label: name},
                nodes=sum(members.values()),
                levels=self._levels(name),
            )
        return out

    def free_vectors(self, pool: str) -> Counter[Shape]:
        """The pool's schedulable nodes by free room (a copy)."""
        return Counter(self._free.get(pool, {}))

    def nodes_with(self, pool: str, free: Shape) -> list[str]:
        """The names of the pool's schedulable nodes with exactly this free room."""
        return list(self._free_names.get(pool, {}).get(free, ()))

    def host_problems(self, hosts: Iterable[str]) -> dict[str, str]:
        """The hosts of `hosts` that can no longer take what was placed on them, and why."""
        problems = {host: self.host_problem(host) for host in set(hosts)}
        return {host: why for host, why in problems.items() if why}

    def host_problem(self, host: str) -> str | None:
        """Why a host admission chose can no longer take what was placed on it, or None."""
        node = self._nodes.get(host)
        if node is None:
            return f"host {host} is gone"
        if not node.schedulable:
            return f"host {host} is cordoned or not Ready"
        if node.degraded:
            return f"host {host} is flagged degraded ({DEGRADED_LABEL}) by a PoolProfile"
        counted = self._counted.get(host)
        if counted is not None and any(amount < 0 for _, amount in counted[1]):
            return f"host {host} has no room left for it (other pods took it)"
        return None

    def node_sizes(self, pool: str) -> Counter[Shape]:
        """The pool's nodes by allocatable room, whatever their state (a copy): what a worker
        could have on an empty node."""
        return Counter(self._sizes.get(pool, {}))

    def headed_to(self, pool: str) -> Iterator[tuple[Shape, int]]:
        """Requests of pods that will take room in the pool and are not on a node yet: unbound
        pods, and the pods of admitted gangs no event has shown yet."""
        yield from self._pending.get(pool, {}).items()
        for promise in self._promises.values():
            pools = promise.pools or (promise.pool,)
            if pool in pools and not promise.hosts:  # (hosted ones hold their hosts)
                unseen = promise.workers - self._seen_workers[(promise.job, promise.attempt)]
                # A multislice gang's unseen workers, spread over its slices (rounded up).
                share = -(-unseen // len(pools))
                if share > 0:
                    yield promise.worker, share

    def free_reducer_hosts(self, machine: str) -> int:
        """CPU hosts of a machine type with room for a reducer and none on them, less the
        reducers that wait for one (unbound, or promised and not seen)."""
        free = self._free_reducer_hosts[machine] - self._unplaced_reducers[machine]
        for promise in self._promises.values():
            if promise.reducer_machine == machine and promise.reducer_pool is not None:
                free -= max(0, promise.reducers - self._seen_reducers[promise.reducer_pool])
        return free

    def reducers_seen(self, pool: Key) -> int:
        """Pods a reducer pool has (any state): reducers a gang needs no new host for."""
        return self._seen_reducers[pool]

    def has_gated(self) -> bool:
        return bool(self._gated)

    def has_topology(self, pool: str) -> bool:
        """Whether some host of the pool carries a block level or an NVLink clique to pack by."""
        return bool(self._packable[pool])

    def _levels(self, pool: str) -> tuple[str, ...]:
        keys = {key for key, _ in self._domains.get(pool, {})}
        return tuple(sorted(keys - {NVLINK_CLIQUE})) + tuple(keys & {NVLINK_CLIQUE})

    def domain_sizes(self, pool: str, key: str) -> list[int]:
        """The hosts of each of the pool's domains of level ``key`` (a block key or the NVLink
        clique), whatever their state: what a domain could hold once its hosts are free."""
        return [n for (k, _), n in self._domains.get(pool, {}).items() if k == key]

    def degraded_hosts(self, pool: str) -> int:
        """The pool's schedulable hosts a PoolProfile flagged (not counted in its room)."""
        return self._degraded[pool]

    def idle_hosts(self, pool: str) -> list[str]:
        """The pool's schedulable hosts, flagged or not, where nothing runs, nothing is pinned
        and no gang is promised anything: what a PoolProfile may measure."""
        return [
            name
            for name, node in self._nodes.items()
            if node.identity.pool == pool
            and node.schedulable
            and not self._used.get(name)
            and name not in self._promised_on
            and name not in self._granted.values()
        ]

    def node(self, name: str) -> NodeFacts | None:
        return self._nodes.get(name)

    def profile_pods(self, pool: str) -> list[PodFacts]:
        """A PoolProfile's measurement pods that hold room on the pool (through the gate, not
        finished, not going away)."""
        pods = (self._pods[key] for key in self._profile_pods)
        return [
            pod
            for pod in pods
            if pod.active
            and not pod.terminating
            and not pod.gated
            and pod.host is not None
            and (node := self._nodes.get(pod.host)) is not None
            and node.identity.pool == pool
        ]

    def group_members(self, group: Key) -> list[PodFacts]:
        """The live pods of a replica group, at the gate or through it."""
        return [
            pod
            for pod in self._pods.values()
            if pod.group == group and pod.active and not pod.terminating
        ]

    def gated(self) -> list[PodFacts]:
        """Pods held at the admission gate and not granted, oldest first (as they appeared)."""
        return sorted(self._gated.values(), key=lambda pod: self._gated_since[pod.key])

    def promised(self, job: Key) -> Promise | None:
        return self._promises.get(job)

    def priority(self, class_name: str | None) -> int | None:
        """The value of a PriorityClass; with no name, the global default's (0 without one);
        None when the named class does not exist."""
        if class_name is None:
            defaults = [value for value, is_default in self._priorities.values() if is_default]
            return max(defaults, default=0)
        found = self._priorities.get(class_name)
        return found[0] if found else None

    def state(self) -> dict[str, Any]:
        """Everything derived, in a comparable form (tests: incremental == rebuilt)."""
        return {
            "free": {p: dict(c) for p, c in self._free.items()},
            "free_names": {
                p: {v: set(names) for v, names in by.items()} for p, by in self._free_names.items()
            },
            "pending": {p: dict(c) for p, c in self._pending.items()},
            "used": {n: dict(u) for n, u in self._used.items()},
            "pools": self.pools(),
            "sizes": {p: dict(c) for p, c in self._sizes.items()},
            "free_reducer_hosts": dict(self._free_reducer_hosts),
            "unplaced_reducers": dict(self._unplaced_reducers),
            "seen_workers": dict(self._seen_workers),
            "seen_reducers": dict(self._seen_reducers),
            "seen_on": dict(self._seen_on),
            "reducers_on": dict(self._reducers_on),
            "gated": set(self._gated),
            "degraded": dict(self._degraded),
            "packable": dict(self._packable),
            "domains": {p: dict(c) for p, c in self._domains.items()},
        }

    @classmethod
    def rebuilt(
        cls,
        reducer_request: Mapping[str, Decimal],
        nodes: Iterable[NodeFacts],
        pods: Iterable[PodFacts],
        promises: Iterable[Promise] = (),
    ) -> ClusterSnapshot:
        """A snapshot built from whole lists (start-up, and the tests' reference)."""
        snapshot = cls(reducer_request)
        for node in nodes:
            snapshot.set_node(node)
        for pod in pods:
            snapshot.set_pod(pod)
        for promise in promises:
            snapshot.promise(promise)
        return snapshot
