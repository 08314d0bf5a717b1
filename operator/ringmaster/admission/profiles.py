"""PoolProfile measurement runs in the admission pass: idle hosts only, after everyone else, and
given back at once when a gang needs them (issue 47).

A profile's run is a group of gated pods, one per host, admitted whole (its collectives need
every rank). In each pass it comes last, after the serving replicas and the gangs:

- it takes only **idle** hosts: schedulable, nothing running or pinned there, nothing promised
  to a gang, none granted in this pass (a flagged host counts: a profile measures it again);
- it takes none on a pool where a gang or a serving replica waits for room (the room it would
  take is theirs), nor where a gang was admitted in this pass;
- a gang that waits for room on a pool where a run holds hosts, and would fit with those hosts
  empty, makes the run **yield**: its pods are deleted (a measurement loses nothing worth
  keeping a gang waiting), the gang is admitted by the cycle after their deletion, and the
  profile measures again once the pool is idle (controllers/poolprofile.py).

So a profile never delays a gang by more than its pods' deletion, and never holds a host a gang
has been promised.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ringmaster.admission.snapshot import ClusterSnapshot, Key, PodFacts, Shape, copies_that_fit


@dataclass(frozen=True)
class Yield:
    """A measurement pod that must give its host back now (the shell deletes it)."""

    pod: Key
    profile: Key
    message: str


@dataclass
class ProfileContest:
    """What the pass's gangs and serving replicas left for the profiles: pools where someone
    waits for room, hosts taken in this pass, and the runs that must yield."""

    contested: set[str] = field(default_factory=set)
    taken: set[str] = field(default_factory=set)
    yields: dict[Key, Yield] = field(default_factory=dict)


def yields_for(
    snapshot: ClusterSnapshot,
    gang: Key,
    pool: str,
    workers: int,
    available: int,
    worker: Shape,
    one_per_node: bool,
    contest: ProfileContest,
) -> None:
    """A gang short of room on ``pool`` (``available`` of ``workers`` fit): the pool is contested,
    and a run holding hosts there yields when the gang would fit on them empty."""
    contest.contested.add(pool)
    held = snapshot.profile_pods(pool)
    if not held:
        return
    hosts = sorted({pod.host for pod in held if pod.host})
    freed = 0
    for host in hosts:
        node = snapshot.node(host)
        if node is None or node.degraded:
            continue
        fit = copies_that_fit(dict(node.allocatable), worker)
        freed += min(fit, 1) if one_per_node else fit
    if available + freed < workers:
        return
    message = (
        f"gives its {len(hosts)} hosts of pool {pool} back: {gang[0]}/{gang[1]} needs {workers} "
        f"workers there and {available} fit without them"
    )
    for pod in held:
        if pod.profile is not None and pod.key not in contest.yields:
            contest.yields[pod.key] = Yield(pod.key, pod.profile, message)


def grant_profile_pods(
    snapshot: ClusterSnapshot, pools: Iterable[str], contest: ProfileContest
) -> list[tuple[Key, str | None, str]]:
    """(pod, host, "") for each measurement pod granted an idle host, (pod, None, why) for each
    held, runs whole, oldest first. ``pools``: the pools admission knows."""
    known = set(pools)
    runs: dict[Key, list[PodFacts]] = {}
    for pod in snapshot.gated():
        if pod.profile is not None:
            runs.setdefault(pod.group or pod.key, []).append(pod)
    out: list[tuple[Key, str | None, str]] = []
    taken = set(contest.taken)
    for pods in runs.values():
        first = pods[0]
        size = max(first.group_size, 1)
        why = _held(snapshot, first, pods, size, known, contest.contested, taken)
        if why:
            out += [(pod.key, None, why) for pod in pods]
            continue
        idle = _idle_fitting(snapshot, first, taken)
        for pod, host in zip(pods, idle[:size], strict=False):
            taken.add(host)
            out.append((pod.key, host, ""))
    return out


def _held(
    snapshot: ClusterSnapshot,
    first: PodFacts,
    pods: list[PodFacts],
    size: int,
    known: set[str],
    contested: set[str],
    taken: set[str],
) -> str:
    pool = first.pool
    if len(pods) < size:
        return (
            f"its run has {len(pods)} of its {size} pods at the admission gate; a run starts whole"
        )
    if pool is None or pool not in known:
        return f"pool {pool} has no nodes"
    if pool in contested:
        return (
            f"a gang or serving replica waits for room on pool {pool}: a profile measures idle "
            "hosts only, after them"
        )
    idle = _idle_fitting(snapshot, first, taken)
    if len(idle) < size:
        return (
            f"needs {size} idle hosts of pool {pool} (nothing running, nothing promised); "
            f"{len(idle)} idle now"
        )
    return ""


def _idle_fitting(snapshot: ClusterSnapshot, pod: PodFacts, taken: set[str]) -> list[str]:
    assert pod.pool is not None
    out = []
    for host in sorted(snapshot.idle_hosts(pod.pool)):
        node = snapshot.node(host)
        if host in taken or node is None:
            continue
        if copies_that_fit(dict(node.allocatable), pod.requests) >= 1:
            out.append(host)
    return out
