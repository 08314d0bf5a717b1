"""Kueue installed while the operator runs: its CRDs report Established before the API's discovery
lists them, so kopf's one re-read per CRD event can miss Workloads for good (the CI run where a
labelled job waited 90 s for an admission the operator never saw). The follower re-reads the
group until kopf watches every Kueue resource the handlers need."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

import kopf
import pytest
from kopf._cogs.structs.references import Insights, Resource
from kopf._core.reactor import observation

from ringmaster.admission.kueue import KUEUE_GROUP, KUEUE_VERSION
from ringmaster.controllers import kueue_workloads
from ringmaster.controllers.kueue_workloads import KUEUE_RESOURCES, DiscoveryFollower, register

VERBS = frozenset({"get", "list", "watch", "patch", "create", "delete", "update"})


def kueue_resource(plural: str) -> Resource:
    return Resource(
        KUEUE_GROUP, KUEUE_VERSION, plural, kind=plural.title(), namespaced=True, verbs=VERBS
    )


def discovery_that_lags(reads_before_listed: int) -> tuple[list[int], object]:
    """A discovery read that lists none of Kueue's resources for the first reads."""
    reads: list[int] = []

    async def scan() -> Collection[Resource]:
        reads.append(1)
        if len(reads) <= reads_before_listed:
            return []
        return [kueue_resource(plural) for plural in sorted(KUEUE_RESOURCES)]

    return reads, scan


@pytest.fixture
def kueue_registry(monkeypatch: pytest.MonkeyPatch) -> kopf.OperatorRegistry:
    monkeypatch.setattr(kueue_workloads, "_follower", None)
    registry = kopf.OperatorRegistry()
    register(registry)
    return registry


def test_kopfs_one_read_before_discovery_catches_up_leaves_kueue_unwatched(
    kueue_registry: kopf.OperatorRegistry,
) -> None:
    insights = Insights()
    # What kopf's observer does on the group's last CRD event, while discovery still lags.
    observation.revise_resources(
        resources=[], insights=insights, registry=kueue_registry, group=KUEUE_GROUP
    )
    follower = DiscoveryFollower(insights, kueue_registry, kopf.OperatorSettings())
    assert follower.unwatched() == set(KUEUE_RESOURCES)


def test_the_follower_reads_again_until_kopf_watches_every_kueue_resource(
    kueue_registry: kopf.OperatorRegistry,
) -> None:
    insights = Insights()
    reads, scan = discovery_that_lags(reads_before_listed=3)
    follower = DiscoveryFollower(
        insights, kueue_registry, kopf.OperatorSettings(), interval=0.001, scan=scan
    )

    assert asyncio.run(follower.until_watched()) is True
    assert len(reads) == 4
    assert follower.unwatched() == set()
    watched = {r.plural for r in insights.watched_resources if r.group == KUEUE_GROUP}
    indexed = {r.plural for r in insights.indexed_resources if r.group == KUEUE_GROUP}
    assert watched == indexed == set(KUEUE_RESOURCES)


def test_the_follower_reads_nothing_when_kopf_already_watches_kueue(
    kueue_registry: kopf.OperatorRegistry,
) -> None:
    insights = Insights()
    observation.revise_resources(
        resources=[kueue_resource(p) for p in KUEUE_RESOURCES],
        insights=insights,
        registry=kueue_registry,
        group=KUEUE_GROUP,
    )
    reads, scan = discovery_that_lags(reads_before_listed=0)
    follower = DiscoveryFollower(insights, kueue_registry, kopf.OperatorSettings(), scan=scan)

    async def follow_once() -> None:
        follower.follow()
        await asyncio.sleep(0)

    asyncio.run(follow_once())
    assert reads == []


def test_the_follower_gives_up_with_a_warning_when_discovery_never_lists_kueue(
    kueue_registry: kopf.OperatorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    insights = Insights()
    reads, scan = discovery_that_lags(reads_before_listed=10**6)
    follower = DiscoveryFollower(
        insights, kueue_registry, kopf.OperatorSettings(), interval=0.001, patience=0.05, scan=scan
    )
    with caplog.at_level(logging.WARNING):
        assert asyncio.run(follower.until_watched()) is False
    assert reads
    assert (
        "discovery does not list resourceflavors, topologies, workloadpriorityclasses, workloads"
        in (caplog.text)
    )


def test_register_with_kopfs_insights_sets_up_the_follower(
    kueue_registry: kopf.OperatorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    insights = Insights()
    register(kopf.OperatorRegistry(), insights=insights, settings=kopf.OperatorSettings())
    assert kueue_workloads._follower is not None
    assert kueue_workloads._follower.insights is insights
