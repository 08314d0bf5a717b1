"""Network topology from node labels, and which free hosts a gang gets: packed or spread.

Pure functions over node labels and host names (no I/O), for admission to call per gang.

**Levels.** Clusters carry their network position as node labels, outermost first:

* ``topology.kubernetes.io/zone``;
* GKE (A3 Ultra, A4, A4X, TPU): ``cloud.google.com/gce-topology-block`` (hosts behind one
  fabric layer), ``-subblock`` (a rack behind its top-of-rack switch), ``-host`` (the physical
  host), as GKE's "topology-aware scheduling" pages and Kueue's TAS examples name them;
* AWS (EC2 instance topology, ``DescribeInstanceTopology``): ``topology.k8s.aws/network-node-
  layer-1`` (the farthest network node), ``-2``, ``-3`` (the node the instance connects to);
  layer 1 plays the block's part, 2 the subblock's, 3 the host's switch;
* levels a user names (a list of label keys, outermost first) instead of both families.

The NVLink domain is another kind of domain: NVIDIA's GPU Feature Discovery labels each host of
a multi-node NVLink system (GB200 NVL72) with ``nvidia.com/gpu.clique`` (``<cluster UUID>.<clique
id>``); hosts with the same value share NVLink. A tensor- or expert-parallel group that spans
hosts runs on NVLink only when all its hosts are in one clique.

**Choosing hosts.** :func:`choose_hosts` packs a gang of ``hosts_needed`` hosts (one worker per
host) into the fewest domains at every level, outermost first: the fewest zones, then inside
them the fewest blocks, and so on down. At each level a gang that fits one domain takes the
smallest domain that holds it (best fit: the big domains stay free for big gangs); one that does
not takes domains largest first (the fewest that hold it) and the last one the smallest that
completes it. Where cliques exist, the gang's heaviest groups (``groups[0]`` hosts, its TP / EP
groups across trays) are placed as units inside one clique each. Hosts come back by rank:
consecutive ranks in one domain, so the layout's groups of consecutive ranks (tensor, context,
expert, then pipeline and data parallel, in Megatron's order) stay in the smallest domains.
:func:`spread_hosts` is the comparison: what a topology-blind scheduler gives, hosts dealt
round-robin over the blocks.

Deterministic: every tie broken by sorted names. Cost: O(hosts log hosts) per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ringmaster.engine.placement_cost import (
    DEFAULT_LOSS_THRESHOLD_PERCENT,
    PlacementShape,
    auto_requires,
    loss_percent,
)
from ringmaster.placement.labels import ZONE

GKE_BLOCK = "cloud.google.com/gce-topology-block"
GKE_SUBBLOCK = "cloud.google.com/gce-topology-subblock"
GKE_HOST = "cloud.google.com/gce-topology-host"
AWS_LAYER_1 = "topology.k8s.aws/network-node-layer-1"
AWS_LAYER_2 = "topology.k8s.aws/network-node-layer-2"
AWS_LAYER_3 = "topology.k8s.aws/network-node-layer-3"
NVLINK_CLIQUE = "nvidia.com/gpu.clique"

GKE_LEVELS = (GKE_BLOCK, GKE_SUBBLOCK, GKE_HOST)
AWS_LEVELS = (AWS_LAYER_1, AWS_LAYER_2, AWS_LAYER_3)
# What a level is called in messages ("needs 16 hosts in one block").
LEVEL_NAMES = {
    ZONE: "zone",
    GKE_BLOCK: "block",
    GKE_SUBBLOCK: "subblock",
    GKE_HOST: "host",
    AWS_LAYER_1: "block",
    AWS_LAYER_2: "subblock",
    AWS_LAYER_3: "host",
    NVLINK_CLIQUE: "NVLink clique",
}
# The level whose crossing is the spine (engine.placement_cost's "blocks").
BLOCK_KEYS = frozenset({GKE_BLOCK, AWS_LAYER_1})


def level_name(key: str) -> str:
    """A level's word for messages: block, subblock, ...; a user's label key as it is."""
    return LEVEL_NAMES.get(key, key)


def topology_levels(labels: Mapping[str, str], user_levels: Sequence[str] = ()) -> tuple[str, ...]:
    """The level keys that apply to a node with ``labels``, outermost first: ``user_levels``
    when given (all of them, present or not: one pool, one list), else the zone (when present)
    and the GKE family, or else the AWS family, when the node carries any of its keys."""
    if user_levels:
        return tuple(user_levels)
    zone = (ZONE,) if labels.get(ZONE) else ()
    for family in (GKE_LEVELS, AWS_LEVELS):
        if any(labels.get(k) for k in family):
            return zone + family
    return zone


@dataclass(frozen=True)
class Topology:
    """A node's place in the network: (level key, value) outermost first ("" where a level's
    label is missing), and its NVLink clique (None: the NVLink domain is the host)."""

    path: tuple[tuple[str, str], ...] = ()
    clique: str | None = None

    def value(self, key: str) -> str | None:
        return next((v for k, v in self.path if k == key), None)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.path)

    @property
    def packable(self) -> bool:
        """A block level or an NVLink clique to pack a gang by (a zone alone is shared by a
        whole pool)."""
        return self.clique is not None or block_key(self.keys) is not None


def node_topology(labels: Mapping[str, str], user_levels: Sequence[str] = ()) -> Topology:
    """A node's :class:`Topology` from its labels (:func:`topology_levels`)."""
    keys = topology_levels(labels, user_levels)
    return Topology(
        path=tuple((k, labels.get(k, "")) for k in keys),
        clique=labels.get(NVLINK_CLIQUE) or None,
    )


# --- domains of free hosts ----------------------------------------------------------------------


def _domain(host: str, topology: Topology, depth: int) -> tuple[str, ...]:
    """The domain id of ``host`` at level ``depth`` (0 the outermost): its values down to that
    level (a value is unique only inside its parent). A missing label is a domain of its own:
    nothing says the host shares a switch with anyone."""
    path = topology.path
    return tuple((path[i][1] if i < len(path) else "") or f"?{host}" for i in range(depth + 1))


def _depth(free: Mapping[str, Topology], key: str) -> int:
    for topo in free.values():
        if key in topo.keys:
            return topo.keys.index(key)
    raise KeyError(f"no free host has the topology level {key}")


@dataclass(frozen=True)
class DomainCount:
    """A domain of one level and how many free hosts it has."""

    domain: tuple[str, ...]  # values outermost first, down to the level
    free: int

    @property
    def name(self) -> str:
        return self.domain[-1]


def free_domains(free: Mapping[str, Topology], key: str) -> tuple[DomainCount, ...]:
    """The domains of level ``key`` among the free hosts, most free first (then by name)."""
    if not free:
        return ()
    depth = _depth(free, key)
    counts: dict[tuple[str, ...], int] = {}
    for host, topo in free.items():
        d = _domain(host, topo, depth)
        counts[d] = counts.get(d, 0) + 1
    return tuple(
        DomainCount(d, n) for d, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def describe_domains(domains: Sequence[DomainCount], key: str, most: int = 8) -> str:
    """ "block b1: 12 free, b2: 9, b3: 7" (the first ``most``, then how many more)."""
    if not domains:
        return f"no {level_name(key)} has free hosts"
    head = [
        f"{d.name}: {d.free} free" if i == 0 else f"{d.name}: {d.free}"
        for i, d in enumerate(domains[:most])
    ]
    more = f" and {len(domains) - most} more" if len(domains) > most else ""
    return f"{level_name(key)} " + ", ".join(head) + more


def smallest_level(free: Mapping[str, Topology], hosts: int) -> str | None:
    """The innermost level key with a domain that holds ``hosts`` of the free hosts; None when
    no level does (not even the outermost: they are only together across it)."""
    keys = _levels_of(free)
    for key in reversed(keys):
        domains = free_domains(free, key)
        if domains and domains[0].free >= hosts:
            return key
    return None


def _levels_of(free: Mapping[str, Topology]) -> tuple[str, ...]:
    """The level keys of the free hosts (the longest path's; a pool's nodes share them)."""
    return max((t.keys for t in free.values()), key=len, default=())


# --- choosing hosts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostChoice:
    """The hosts a gang gets, by rank, and the domains they are in."""

    hosts: tuple[str, ...]
    domains: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    """Level key -> the domains used, sorted."""
    cliques: tuple[str, ...] = ()
    blocks: int = 1
    """Block-level domains used (GKE block / AWS layer 1; the outermost level below the zone
    for a user's levels); 1 where no such level is labelled."""
    nvlink_intact: bool = True
    """Every heaviest group (``groups[0]`` consecutive ranks) inside one NVLink clique, or no
    cliques, or no such group spans hosts."""
    groups_in_block: tuple[bool, ...] = ()
    """Per entry of ``groups``: every group of that many consecutive ranks inside one block."""

    def shape(self) -> PlacementShape:
        """The engine's description of this placement (engine.placement_cost)."""
        crossing = any(not inside for inside in self.groups_in_block[:1])
        return PlacementShape(
            blocks=self.blocks, groups_cross_blocks=crossing, nvlink_intact=self.nvlink_intact
        )


def block_key(keys: Sequence[str]) -> str | None:
    """The level whose domains are blocks: GKE's block, AWS's layer 1, else the outermost level
    that is not the zone."""
    known = next((k for k in keys if k in BLOCK_KEYS), None)
    if known is not None:
        return known
    return next((k for k in keys if k != ZONE), None)


@dataclass
class _Tree:
    """Free hosts as nested domains: children by value, or at the bottom the units (lists of
    host names, each to be consecutive ranks)."""

    children: dict[str, _Tree] = field(default_factory=dict)
    units: list[tuple[str, ...]] = field(default_factory=list)
    capacity: int = 0  # units below


def _paths(free: Mapping[str, Topology], keys: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every free host's domains down to the innermost level, hosts sorted by name."""
    return {h: _domain(h, free[h], len(keys) - 1) for h in sorted(free)}


def _build(
    free: Mapping[str, Topology],
    paths: Mapping[str, tuple[str, ...]],
    depth: int,
    unit: int,
    use_cliques: bool,
) -> _Tree:
    root = _Tree()
    leaves: dict[tuple[str, ...], dict[str, list[str]]] = {}
    for host, full in paths.items():
        path = full[:depth]
        clique = (free[host].clique or f"?{host}") if use_cliques else ""
        leaves.setdefault(path, {}).setdefault(clique, []).append(host)
    for path, by_clique in leaves.items():
        node = root
        for value in path:
            node = node.children.setdefault(value, _Tree())
        for clique in sorted(by_clique):
            names = by_clique[clique]
            whole = len(names) // unit * unit
            node.units.extend(tuple(names[i : i + unit]) for i in range(0, whole, unit))
    _count(root)
    return root


def _clique_depth(
    free: Mapping[str, Topology], paths: Mapping[str, tuple[str, ...]], depth: int
) -> int:
    """How many levels, outermost first, no clique is split by (a GKE host level splits every
    clique into its trays: the tree stops above it)."""
    while depth > 0:
        seen: dict[str, tuple[str, ...]] = {}
        whole = True
        for host, topo in free.items():
            if topo.clique is None:
                continue
            d = paths[host][:depth]
            if seen.setdefault(topo.clique, d) != d:
                whole = False
                break
        if whole:
            return depth
        depth -= 1
    return 0


def _count(node: _Tree) -> int:
    node.capacity = len(node.units) + sum(_count(c) for c in node.children.values())
    return node.capacity


@dataclass(frozen=True)
class _Plan:
    """Which children of a domain give how many units, and the domains used below it, level by
    level (the first entry: its children used)."""

    takes: tuple[tuple[str, _Tree, int, _Plan], ...]
    counts: tuple[int, ...]


_LEAF = _Plan((), ())


def _plan(node: _Tree, needed: int) -> _Plan:
    """``needed`` units from ``node`` in the fewest children, and below each in the fewest of
    theirs (module docstring). Among children that hold all of it alone, the one whose own plan
    uses the fewest domains level by level, then the smallest, then by name."""
    if not node.children:
        return _LEAF
    kids = sorted(
        ((name, child) for name, child in node.children.items() if child.capacity > 0),
        key=lambda kv: (-kv[1].capacity, kv[0]),
    )
    takes: list[tuple[str, _Tree, int, _Plan]] = []
    if needed >= node.capacity:  # all of it
        takes = [
            (name, child, child.capacity, _plan(child, child.capacity)) for name, child in kids
        ]
    else:
        left, i = needed, 0
        while left > 0:
            # kids[i:] by capacity, largest first: those that hold what is left are a prefix
            fits = [kv for kv in kids[i:] if kv[1].capacity >= left]
            if fits:
                options = [(_plan(child, left), child, name) for name, child in fits]
                sub, child, name = min(options, key=lambda o: (o[0].counts, o[1].capacity, o[2]))
                takes.append((name, child, left, sub))
                left = 0
            else:  # the largest, then go on
                name, child = kids[i]
                takes.append((name, child, child.capacity, _plan(child, child.capacity)))
                left -= child.capacity
                i += 1
    depth = max((len(t[3].counts) for t in takes), default=0)
    below = tuple(sum(t[3].counts[i] for t in takes if i < len(t[3].counts)) for i in range(depth))
    takes.sort(key=lambda t: (-t[2], t[0]))
    return _Plan(tuple(takes), (len(takes), *below))


def _units(node: _Tree, plan: _Plan, needed: int) -> list[tuple[str, ...]]:
    """The units ``plan`` takes, in rank order: domain by domain."""
    if not node.children:
        return node.units[:needed]
    out: list[tuple[str, ...]] = []
    for _, child, take, sub in plan.takes:
        out.extend(_units(child, sub, take))
    return out


def _pick(node: _Tree, needed: int) -> list[tuple[str, ...]]:
    return _units(node, _plan(node, needed), needed)


def choose_hosts(
    free: Mapping[str, Topology], hosts_needed: int, groups: Sequence[int] = ()
) -> HostChoice | None:
    """``hosts_needed`` of the ``free`` hosts (name -> topology), packed (module docstring);
    None when fewer are free.

    ``groups``: hosts per group of consecutive ranks, heaviest first, e.g. (2, 8) for tensor
    groups over 2 trays in pipelines of 8 hosts. Where the hosts carry NVLink cliques,
    ``groups[0]`` hosts go into one clique each (before anything else: NVLink is worth more than
    a block; if the cliques cannot hold the gang so, it is placed without, and
    ``nvlink_intact`` says so). Elsewhere the groups are kept whole, largest first, in the
    innermost domains that can hold them, only where that costs no extra block."""
    if hosts_needed <= 0:
        return HostChoice(hosts=())
    if len(free) < hosts_needed:
        return None
    keys = _levels_of(free)
    paths = _paths(free, keys)
    plain = _pick(_build(free, paths, len(keys), 1, False), hosts_needed)
    unit = groups[0] if groups else 1
    if unit > 1 and hosts_needed % unit == 0 and any(t.clique for t in free.values()):
        tree = _build(free, paths, _clique_depth(free, paths, len(keys)), unit, True)
        if tree.capacity >= hosts_needed // unit:
            picked = _pick(tree, hosts_needed // unit)
            return _describe(free, tuple(h for u in picked for h in u), groups, True, keys)
        return _describe(free, tuple(h for u in plain for h in u), groups, None, keys)
    bk = block_key(keys)
    top = keys.index(bk) + 1 if bk else 0
    fewest = _blocks_of(paths, plain, keys)
    for size in sorted({g for g in groups if g > 1 and hosts_needed % g == 0}, reverse=True):
        for depth in range(len(keys), top - 1, -1):
            tree = _build(free, paths, depth, size, False)
            if tree.capacity < hosts_needed // size:
                continue
            picked = _pick(tree, hosts_needed // size)
            if _blocks_of(paths, picked, keys) <= fewest:
                return _describe(free, tuple(h for u in picked for h in u), groups, None, keys)
            break
    return _describe(free, tuple(h for u in plain for h in u), groups, None, keys)


def _blocks_of(
    paths: Mapping[str, tuple[str, ...]],
    units: Sequence[tuple[str, ...]],
    keys: tuple[str, ...],
) -> int:
    bk = block_key(keys)
    if bk is None:
        return 1
    depth = keys.index(bk) + 1
    return len({paths[h][:depth] for u in units for h in u})


def spread_hosts(free: Mapping[str, Topology], hosts_needed: int) -> HostChoice | None:
    """What a topology-blind scheduler gives: hosts dealt one at a time over the blocks in
    turn (sorted), ranks in that order. None when fewer are free."""
    if len(free) < hosts_needed:
        return None
    keys = _levels_of(free)
    bk = block_key(keys)
    by_block: dict[tuple[str, ...], list[str]] = {}
    depth = keys.index(bk) if bk else -1
    for host in sorted(free):
        d = _domain(host, free[host], depth) if depth >= 0 else ()
        by_block.setdefault(d, []).append(host)
    queues = [by_block[d] for d in sorted(by_block)]
    hosts: list[str] = []
    i = 0
    while len(hosts) < hosts_needed:
        for q in queues:
            if i < len(q) and len(hosts) < hosts_needed:
                hosts.append(q[i])
        i += 1
    return _describe(free, tuple(hosts), (), None, keys)


def _describe(
    free: Mapping[str, Topology],
    hosts: tuple[str, ...],
    groups: Sequence[int],
    intact: bool | None,
    keys: tuple[str, ...],
) -> HostChoice:
    domains = {
        key: tuple(sorted({_domain(h, free[h], depth) for h in hosts}))
        for depth, key in enumerate(keys)
    }
    bk = block_key(keys)
    blocks = len(domains[bk]) if bk else 1
    cliques = tuple(sorted({c for h in hosts if (c := free[h].clique)}))
    if intact is None:  # judge the ranks as they are
        unit = groups[0] if groups else 1
        intact = _groups_inside(hosts, unit, lambda h: free[h].clique or f"?{h}") or not cliques
    depth = keys.index(bk) if bk else -1
    in_block = tuple(
        _groups_inside(hosts, size, lambda h: _domain(h, free[h], depth)) if depth >= 0 else True
        for size in groups
    )
    return HostChoice(
        hosts=hosts,
        domains=domains,
        cliques=cliques,
        blocks=blocks,
        nvlink_intact=intact,
        groups_in_block=in_block,
    )


def _groups_inside(hosts: Sequence[str], size: int, domain_of: Callable[[str], object]) -> bool:
    """Every run of ``size`` consecutive ranks inside one domain (``domain_of`` host -> id)."""
    if size <= 1:
        return True
    for start in range(0, len(hosts), size):
        run = hosts[start : start + size]
        if len({domain_of(h) for h in run}) > 1:
            return False
    return True


def describe_hosts(
    topologies: Mapping[str, Topology], hosts: Sequence[str], groups: Sequence[int] = ()
) -> HostChoice:
    """``hosts`` by rank as a :class:`HostChoice` (its blocks, and whether its ``groups`` stay
    inside blocks and NVLink cliques): what an admitted gang's hosts are, for the engine."""
    return _describe(topologies, tuple(hosts), groups, None, _levels_of(topologies))


def block_domain(host: str, topology: Topology) -> tuple[str, tuple[str, ...]] | None:
    """(block level key, the host's block domain), or None where its levels have no block."""
    key = block_key(topology.keys)
    if key is None:
        return None
    return key, _domain(host, topology, topology.keys.index(key))


def blocks_forced(free: Mapping[str, Topology], hosts_needed: int) -> int:
    """The fewest blocks that hold ``hosts_needed`` of the free hosts: blocks largest first
    until they do (the lower bound any placement meets); 0 when fewer are free."""
    keys = _levels_of(free)
    bk = block_key(keys)
    if len(free) < hosts_needed:
        return 0
    if bk is None:
        return 1
    total, count = 0, 0
    for d in free_domains(free, bk):
        if total >= hosts_needed:
            break
        total += d.free
        count += 1
    return max(count, 1)


def topologies(
    nodes: Iterable[tuple[str, Mapping[str, str]]], user_levels: Sequence[str] = ()
) -> dict[str, Topology]:
    """name -> :class:`Topology` for (name, labels) pairs (a pool's free hosts)."""
    return {name: node_topology(labels, user_levels) for name, labels in nodes}


# --- the verdict: require a level, or prefer it ---------------------------------------------------

REQUIRED, PREFERRED, AUTO = "Required", "Preferred", "Auto"
POLICIES = (REQUIRED, PREFERRED, AUTO)


@dataclass(frozen=True)
class TopologyVerdict:
    """Whether a gang requires its level (waits for it) or prefers it (admitted spread when no
    domain has room), with the numbers."""

    require: bool
    loss_percent: float
    packed_step_seconds: float
    spread_step_seconds: float
    message: str

    @property
    def decision(self) -> str:
        return "Require" if self.require else "Prefer"


def loss_words(
    packed_step: float, spread_step: float, placement: str, threshold: float | None = None
) -> str:
    """ "spread over blocks the step is 18 % slower (2.41 s against 2.04 s), above the 5 %
    threshold": what a placement costs, in a message (the threshold's clause where given)."""
    loss = loss_percent(packed_step, spread_step)
    words = (
        f"{placement} the step is {loss:.0f} % slower "
        f"({spread_step:.3g} s against {packed_step:.3g} s)"
    )
    if threshold is not None:
        above = auto_requires(loss, threshold)
        words += f", above the {threshold:g} % threshold" if above else f", within {threshold:g} %"
    return words


def topology_verdict(
    packed_step: float,
    spread_step: float,
    policy: str = AUTO,
    threshold: float = DEFAULT_LOSS_THRESHOLD_PERCENT,
    *,
    hosts: int | None = None,
    level: str | None = None,
    domains: Sequence[DomainCount] = (),
) -> TopologyVerdict:
    """Required and Preferred as the job says; Auto requires when spreading loses more than
    ``threshold`` percent. ``hosts``, ``level`` (a level key) and ``domains`` (its free
    domains, :func:`free_domains`) word the message: "needs 16 hosts in one block: blocks have
    12, 9, 7 free; spread over blocks the step is 18 % slower (2.41 s against 2.04 s)"."""
    if policy not in POLICIES:
        raise ValueError(f"topology policy {policy!r}: expected one of {', '.join(POLICIES)}")
    loss = loss_percent(packed_step, spread_step)
    require = policy == REQUIRED or (policy == AUTO and auto_requires(loss, threshold))
    word = level_name(level) if level else "domain"
    what = f"{hosts} hosts in one {word}" if hosts is not None else f"one {word}"
    have = ""
    if domains:
        counts = ", ".join(str(d.free) for d in domains[:8])
        more = f" and {len(domains) - 8} more" if len(domains) > 8 else ""
        have = f": {word}s have {counts}{more} free"
    numbers = loss_words(
        packed_step, spread_step, f"spread over {word}s", threshold if policy == AUTO else None
    )
    if require:
        message = f"needs {what}{have}; {numbers}"
    else:
        message = f"prefers {what}{have}; {numbers}; admitted spread when none has room"
    return TopologyVerdict(require, loss, packed_step, spread_step, message)
