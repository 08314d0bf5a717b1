"""Node pools from node objects, their free capacity, and whether a gang of pods fits.

Pure functions over plain Kubernetes dicts (as kopf's indexes hold them), so the controllers can
decide without I/O and the tests need no cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from kubernetes.utils.quantity import parse_quantity

from ringmaster.placement.labels import (
    ACCELERATOR_TAINT_KEYS,
    POOL_NAME_KEYS,
    PoolIdentity,
    accelerator_resource,
    pool_identity,
)

Resources = Mapping[str, Decimal]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Node:
    name: str
    identity: PoolIdentity
    allocatable: Resources
    labels: Mapping[str, str]
    schedulable: bool  # Ready and not cordoned

    @property
    def accelerators(self) -> int:
        return int(
            next((self.allocatable[k] for k in ACCELERATOR_TAINT_KEYS if k in self.allocatable), 0)
        )


@dataclass(frozen=True)
class NodePool:
    """Nodes that share a pool label (or, lacking one, a machine shape)."""

    name: str
    identity: PoolIdentity
    nodes: tuple[Node, ...] = field(default=())

    @property
    def accelerators_per_node(self) -> int:
        return max((n.accelerators for n in self.nodes), default=0)

    @property
    def accelerator_resource(self) -> str | None:
        if self.identity.accelerator is None:
            return None
        return accelerator_resource(self.identity.accelerator)

    def node_selector(self) -> dict[str, str]:
        """The label that selects exactly this pool's nodes (the one discovery grouped them by)."""
        labels = self.nodes[0].labels
        key = next(k for k in POOL_NAME_KEYS if labels.get(k) == self.name)
        return {key: self.name}


def parse_resources(raw: Mapping[str, Any] | None) -> dict[str, Decimal]:
    return {
        name: Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
        for name, value in (raw or {}).items()
    }


def node_from_object(obj: Mapping[str, Any]) -> Node:
    metadata = obj.get("metadata", {})
    status = obj.get("status", {})
    labels = metadata.get("labels") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return Node(
        name=metadata["name"],
        identity=pool_identity(labels),
        allocatable=parse_resources(status.get("allocatable")),
        labels=labels,
        schedulable=ready and not (obj.get("spec") or {}).get("unschedulable", False),
    )


def discover_pools(nodes: Iterable[Node]) -> dict[str, NodePool]:
    """Group nodes into pools by their pool label; nodes without one are not a pool."""
    grouped: dict[str, list[Node]] = {}
    for node in nodes:
        if node.identity.pool:
            grouped.setdefault(node.identity.pool, []).append(node)
    return {
        name: NodePool(name, members[0].identity, tuple(sorted(members, key=lambda n: n.name)))
        for name, members in sorted(grouped.items())
    }


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What the scheduler counts for a pod: the sum over containers, at least any init container
    (requests default to limits for extended resources, which have no separate request)."""
    spec = pod.get("spec") or {}

    def container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        merged = parse_resources(resources.get("limits"))
        merged.update(parse_resources(resources.get("requests")))
        return merged

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    return total


def used_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Decimal]]:
    """Requests of the non-terminal pods bound to each node."""
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        bucket = used.setdefault(node_name, {})
        for name, value in pod_requests(pod).items():
            bucket[name] = bucket.get(name, Decimal(0)) + value
    return used


def pods_that_fit(free: Mapping[str, Decimal], request: Mapping[str, Decimal]) -> int:
    """How many copies of `request` fit in `free` (a resource the node lacks fits none)."""
    counts = [
        int(free.get(name, Decimal(0)) // amount) for name, amount in request.items() if amount > 0
    ]
    return max(0, min(counts)) if counts else 0


@dataclass(frozen=True)
class GangFit:
    fits: bool
    available: int  # how many of the gang's pods the pool can take now (at most `wanted`)
    wanted: int


def _subtract(free: dict[str, Decimal], request: Mapping[str, Decimal]) -> None:
    for name, amount in request.items():
        free[name] = free.get(name, Decimal(0)) - amount


def gang_fits(
    pool: NodePool,
    used: Mapping[str, Mapping[str, Decimal]],
    request: Mapping[str, Decimal],
    count: int,
    *,
    promised: Iterable[Mapping[str, Decimal]] = (),
    one_per_node: bool = False,
) -> GangFit:
    """Whether `count` pods of `request` fit on the pool's schedulable nodes right now (an
    InferenceEndpoint's pool preference; TrainingJob gangs are admitted by
    ringmaster.admission.cycle.check_gang, from the admission snapshot).

    `promised` are the requests of pods of already-admitted gangs that the scheduler has not bound
    yet: they are packed first (first fit, as the scheduler would find room for them), so two jobs
    admitted back to back never both count the same free accelerators.
    """
    wanted = [(name, amount) for name, amount in request.items() if amount > 0]
    free: dict[str, dict[str, Decimal]] = {}
    for node in pool.nodes:
        if node.schedulable:
            taken = used.get(node.name, {})
            # Only the requested resources matter; this runs over every node of a pool.
            free[node.name] = {
                name: node.allocatable.get(name, Decimal(0)) - taken.get(name, Decimal(0))
                for name, _ in wanted
            }
    for pending in promised:
        target = next((n for n, f in free.items() if pods_that_fit(f, pending) >= 1), None)
        if target is not None:
            _subtract(free[target], pending)
    available = 0
    for node_free in free.values():
        fit = min(
            (int(node_free.get(name, Decimal(0)) // amount) for name, amount in wanted), default=0
        )
        fit = max(fit, 0)
        available += min(fit, 1) if one_per_node else fit
        if available >= count and not one_per_node:
            break  # enough: the rest of a large pool need not be looked at
    return GangFit(fits=available >= count, available=min(available, count), wanted=count)


@dataclass(frozen=True)
class NoPool:
    """Why no pool can take a workload: a condition reason and a message for people."""

    reason: str  # NoMatchingPool, TopologyMismatch
    message: str


class _PoolIdentity(Protocol):
    @property
    def accelerator(self) -> str | None: ...


class _AcceleratorPool(Protocol):
    """What the filter reads of a pool: a NodePool here, the admission snapshot's summary."""

    @property
    def identity(self) -> _PoolIdentity: ...

    @property
    def accelerators_per_node(self) -> int: ...


PoolT = TypeVar("PoolT", bound=_AcceleratorPool)


def accelerator_pools(
    pools: Mapping[str, PoolT], accelerator: str, per_host: int, field: str
) -> list[PoolT] | NoPool:
    """The pools of this accelerator whose hosts carry at least `per_host` of it (`field` names
    the spec field asking for them, for the message). The one such filter: serving ranks these
    pools, admission narrows them by machine type and topology."""
    same_type = [p for p in pools.values() if p.identity.accelerator == accelerator]
    if not same_type:
        known = sorted({a for p in pools.values() if (a := p.identity.accelerator)})
        return NoPool(
            "NoMatchingPool",
            f"no node pool has {accelerator} nodes (pools have: {', '.join(known) or 'none'})",
        )
    big_enough = [p for p in same_type if p.accelerators_per_node >= per_host]
    if not big_enough:
        largest = max(p.accelerators_per_node for p in same_type)
        return NoPool(
            "NoMatchingPool",
            f"{field} is {per_host} but {accelerator} nodes have at most {largest} each",
        )
    return big_enough
