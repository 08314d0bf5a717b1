"""The local cluster's nodes as the API reports them: one list, and a wait for Ready that scales.

`kubectl wait --for=condition=Ready nodes --all` checks the nodes one after another under one
fixed limit: with 2,000 simulated nodes it timed out at 180 s although every node was Ready
moments later. Here one list and then one watch count the Ready nodes among those applied, with
progress printed, under a limit that grows with the node count (or is given).

Only the kubernetes client and the cluster's kubeconfig are needed: no kubectl, no control-plane
binaries (`ringmaster cluster pools` works without RINGMASTER_BIN_DIR).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# How long a wait for N nodes may take: slack for a loaded machine, plus kwok's per-node work (it
# initialises each node with a status patch). Measured on the 2-core CI machine, 500 nodes were
# all Ready 1 s after their 16 s apply (docs/local-cluster.md, "Waiting for nodes"); the limit
# leaves an order of magnitude of room for a machine busy with other clusters.
BASE_WAIT_SECONDS = 60.0
WAIT_SECONDS_PER_NODE = 0.25
# Progress: a line at least this often while nodes are still coming, and at every tenth.
PROGRESS_EVERY_SECONDS = 10.0


class NodesNotReady(RuntimeError):
    """The limit passed before every applied node was Ready."""


def wait_limit_seconds(node_count: int) -> float:
    """The default limit of a wait for ``node_count`` nodes (grows linearly with the count)."""
    return BASE_WAIT_SECONDS + WAIT_SECONDS_PER_NODE * max(0, node_count)


# Taints the API server puts on a node from its conditions (TaintNodesByCondition) and the node
# lifecycle controller lifts a moment after it sees the node Ready.
CONDITION_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """Ready, and no longer tainted not-ready: until the controller lifts that taint the scheduler
    refuses the node ("untolerated taint"), and the scale bench's first 400 pods took 73 s on
    nodes that were all Ready, against 10 s once the taints were gone."""
    conditions = (node.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    return not any(t.get("key") in CONDITION_TAINTS for t in taints)


@dataclass
class ReadyCount:
    """Which of the expected nodes are Ready, from list items and watch events."""

    expected: frozenset[str]
    ready: set[str] = field(default_factory=set)

    def observe(self, node: Mapping[str, Any], deleted: bool = False) -> None:
        name = (node.get("metadata") or {}).get("name")
        if name not in self.expected:
            return  # another node of the cluster: not ours to wait for
        if node_is_ready(node) and not deleted:
            self.ready.add(name)
        else:
            self.ready.discard(name)

    @property
    def done(self) -> bool:
        return len(self.ready) == len(self.expected)

    def not_ready(self, limit: int = 5) -> list[str]:
        return sorted(self.expected - self.ready)[:limit]

    def summary(self) -> str:
        return f"{len(self.ready)}/{len(self.expected)} nodes Ready"


@dataclass
class Progress:
    """When to print a progress line: every tenth of the nodes, or every few seconds."""

    total: int
    every_seconds: float = PROGRESS_EVERY_SECONDS
    _last_time: float = 0.0
    _last_tenth: int = -1

    def due(self, ready: int, now: float) -> bool:
        tenth = (10 * ready) // self.total if self.total else 10
        if tenth > self._last_tenth or now - self._last_time >= self.every_seconds:
            self._last_tenth, self._last_time = tenth, now
            return True
        return False


def _client(kubeconfig: Path) -> Any:
    import kubernetes

    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    return kubernetes.client.CoreV1Api(api)


def _list(core: Any) -> tuple[list[dict[str, Any]], str]:
    # Raw JSON: deserialising thousands of Node models costs seconds and is not needed.
    response = core.list_node(_preload_content=False)
    body = json.loads(response.data)
    return body["items"], body["metadata"]["resourceVersion"]


def list_nodes(kubeconfig: Path) -> list[dict[str, Any]]:
    """Every node of the cluster, as JSON objects (one request)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return _list(_client(kubeconfig))[0]
    except (ApiException, HTTPError, OSError) as error:
        raise NodesNotReady(f"the cluster does not answer ({kubeconfig}): {error}") from None


def _events(core: Any, resource_version: str, timeout: float) -> Iterator[dict[str, Any]]:
    import kubernetes

    watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
    yield from watch.stream(  # type: ignore[no-untyped-call]
        core.list_node,
        resource_version=resource_version,
        timeout_seconds=max(1, int(timeout)),
        deserialize=False,
    )


def wait_for_ready_nodes(
    kubeconfig: Path,
    names: Collection[str],
    limit_seconds: float | None = None,
    log: Callable[[str], None] = print,
) -> float:
    """Wait until every node in ``names`` is Ready; return the seconds it took.

    One list, then a watch from its resourceVersion (relisting if the watch ends or expires),
    so the cost is one event per node change rather than one request per node. Raises
    :class:`NodesNotReady`, naming some nodes that are not Ready, when ``limit_seconds``
    (default: :func:`wait_limit_seconds`) passes first.
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    limit = wait_limit_seconds(len(names)) if limit_seconds is None else limit_seconds
    count = ReadyCount(frozenset(names))
    progress = Progress(len(names))
    core = _client(kubeconfig)
    start = time.monotonic()
    deadline = start + limit
    while True:
        items, resource_version = _list(core)
        count.ready.clear()
        for node in items:
            count.observe(node)
        if not count.done and progress.due(len(count.ready), time.monotonic()):
            log(f"{count.summary()} ({time.monotonic() - start:.0f}s)")
        try:
            events = (
                () if count.done else _events(core, resource_version, deadline - time.monotonic())
            )
            for event in events:
                if event.get("type") == "ERROR":
                    break  # expired: list again
                count.observe(event["object"], deleted=event.get("type") == "DELETED")
                now = time.monotonic()
                if count.done or now >= deadline:
                    break
                if progress.due(len(count.ready), now):
                    log(f"{count.summary()} ({now - start:.0f}s)")
        except ApiException as error:
            if error.status != 410:  # 410 Gone: the resourceVersion is too old; list again
                raise
        except HTTPError:  # the watch connection broke (a busy apiserver): list again
            time.sleep(1)
        elapsed = time.monotonic() - start
        if count.done:
            log(f"{count.summary()} in {elapsed:.0f}s")
            return elapsed
        if time.monotonic() >= deadline:
            raise NodesNotReady(
                f"{count.summary()} after {elapsed:.0f}s (limit {limit:.0f}s); not Ready: "
                f"{', '.join(count.not_ready())}... (raise the limit with --wait-seconds)"
            )
