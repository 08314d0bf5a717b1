"""A controller manager's CRDs counted as ready only once the apiserver lists their objects
(localcluster.webhook_manager.WebhookManager.wait_served): Established comes first, and on a
loaded machine the apiserver answered 429 "storage is (re)initializing" for over a minute after."""

from __future__ import annotations

import subprocess

import pytest

from ringmaster.localcluster.cluster import ClusterError
from ringmaster.localcluster.kueue import LocalKueue

pytestmark = pytest.mark.unit

CRDS = [
    {"spec": {"group": "kueue.x-k8s.io", "names": {"plural": "workloads"}}},
    {"spec": {"group": "kueue.x-k8s.io", "names": {"plural": "clusterqueues"}}},
]


class Apiserver:
    """kubectl against an apiserver whose workloads storage initialises for ``busy`` reads."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.calls: list[tuple[str, ...]] = []

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        initialising = args[1] == "workloads.kueue.x-k8s.io" and self.busy > 0
        if initialising:
            self.busy -= 1
        return subprocess.CompletedProcess(args, 1 if initialising else 0, "", "")


def manager(apiserver: Apiserver) -> LocalKueue:
    kueue = LocalKueue.__new__(LocalKueue)  # no binaries needed to wait on the apiserver
    kueue.cluster = apiserver  # type: ignore[assignment]
    return kueue


def test_the_crds_count_once_every_resource_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    apiserver = Apiserver(busy=3)
    manager(apiserver).wait_served(CRDS)
    listed = [c[1] for c in apiserver.calls]
    assert listed.count("workloads.kueue.x-k8s.io") == 4  # three 429s, then served
    assert listed[-2:] == ["workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io"]


def test_a_resource_never_served_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    with pytest.raises(ClusterError, match=r"does not list workloads\.kueue\.x-k8s\.io after 0 s"):
        manager(Apiserver(busy=10**9)).wait_served(CRDS, seconds=0.0)
