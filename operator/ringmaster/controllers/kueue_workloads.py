"""The kopf shell of the Kueue integration: watch Kueue's objects, wake the jobs they concern.

Registered by ``ringmaster run`` unless ``--kueue=off`` (the chart passes it when
``kueue.enabled`` is false, and grants no Kueue RBAC then) or the operator may not watch Kueue's
objects (:func:`missing_permission`). Registered, the handlers still need
no Kueue to start: kopf watches a resource only while its CRD is served, and follows CRDs coming
and going (its resource observer), so Workloads are watched from the moment Kueue is installed.
Whether Kueue is there is read from the Workload CRD itself (an index over CRDs): a labelled job
is Kueue's to admit exactly while that CRD is served at v1beta2.

kopf re-reads the API's discovery once per CRD event, but a CRD reports Established before
discovery lists it (kube-rs#951): when Kueue's CRDs are installed while the operator runs and the
group's last CRD event comes first, kopf would never watch Workloads and a labelled job would wait
for an admission it cannot see. :class:`DiscoveryFollower` re-reads the group until kopf does.

The protocol is in admission/kueue.py; the phase functions in training_lifecycle.py (the Kueue
path in training_kueue.py); the TrainingJob controller (trainingjob.py) applies their writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from typing import Any

import kopf
from kopf._cogs.clients import scanning
from kopf._cogs.structs.references import Insights, Resource
from kopf._core.reactor import observation

from ringmaster.admission.kueue import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    TOPOLOGY_PLURAL,
    WORKLOAD_CRD,
    WORKLOAD_PLURAL,
    Flavor,
    topology_levels,
)
from ringmaster.api import GROUP
from ringmaster.controllers.base import snapshot
from ringmaster.controllers.trainingjob import _controller

CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
KUEUE_ENV = "RINGMASTER_KUEUE"  # auto (default) or off
# What the handlers below watch of Kueue.
KUEUE_RESOURCES = frozenset(
    {WORKLOAD_PLURAL, "resourceflavors", "workloadpriorityclasses", TOPOLOGY_PLURAL}
)

log = logging.getLogger(__name__)


def owner_job(meta: Mapping[str, Any]) -> str | None:
    """The TrainingJob that controls a Workload, if one does."""
    for ref in meta.get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "TrainingJob"
            and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")
        ):
            return str(ref["name"])
    return None


def workload_crd_served(body: Mapping[str, Any]) -> bool:
    """The Workload CRD is Established and serves the version Ringmaster writes."""
    versions = (body.get("spec") or {}).get("versions") or []
    served = any(v.get("name") == KUEUE_VERSION and v.get("served") for v in versions)
    conditions = (body.get("status") or {}).get("conditions") or []
    established = any(
        c.get("type") == "Established" and c.get("status") == "True" for c in conditions
    )
    return served and established


def ringmaster_kueue_workloads(
    namespace: str | None, meta: kopf.Meta, body: kopf.Body, **_: Any
) -> dict[Hashable, Any]:
    job = owner_job(meta)
    return {(namespace or "", job): snapshot(body)} if job else {}


def ringmaster_kueue_flavors(name: str, body: kopf.Body, **_: Any) -> dict[str, Flavor]:
    return {name: Flavor.from_object(body)}


def ringmaster_kueue_topologies(name: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {name: topology_levels(body)}


def ringmaster_kueue_priority_classes(name: str, body: kopf.Body, **_: Any) -> dict[str, int]:
    return {name: int(body.get("value") or 0)}


def ringmaster_kueue_crd(body: kopf.Body, **_: Any) -> dict[str, bool]:
    return {WORKLOAD_CRD: True} if workload_crd_served(body) else {}


async def workload_changed(namespace: str | None, meta: kopf.Meta, **kwargs: Any) -> None:
    job = owner_job(meta)
    if job is not None:
        _controller(kwargs).queue.add((namespace or "", job))


Scan = Callable[[], Awaitable[Collection[Resource]]]


class DiscoveryFollower:
    """Re-reads an API group (Kueue's by default; LeaderWorkerSet's for the InferenceEndpoint
    controller) until kopf watches every resource of it the handlers need.

    kopf's own observer does the same on each CRD event; this only adds the re-reads that the
    discovery lag makes necessary, at ``interval`` for at most ``patience`` seconds (the API's
    discovery catches up within a second or two; after that, the next CRD event or a restart)."""

    def __init__(
        self,
        insights: Insights,
        registry: kopf.OperatorRegistry,
        settings: kopf.OperatorSettings,
        *,
        interval: float = 0.5,
        patience: float = 60.0,
        scan: Scan | None = None,
        group: str = KUEUE_GROUP,
        resources: frozenset[str] = KUEUE_RESOURCES,
        name: str = "Kueue",
    ) -> None:
        self.group = group
        self.resources = resources
        self.name = name
        self.insights = insights
        self.registry = registry
        self.settings = settings
        self.interval = interval
        self.patience = patience
        self._scan = scan or self._read_discovery
        self._task: asyncio.Task[bool] | None = None

    def unwatched(self) -> set[str]:
        """The group's resources kopf does not index or watch yet."""
        live = {r.plural for r in self.insights.indexed_resources if r.group == self.group} & {
            r.plural for r in self.insights.watched_resources if r.group == self.group
        }
        return set(self.resources - live)

    def follow(self) -> None:
        """Start following (once at a time) if something is not watched yet."""
        if self.unwatched() and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self.until_watched())

    async def until_watched(self) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.patience
        while self.unwatched():
            if loop.time() >= deadline:
                log.warning(
                    "%s's CRDs are served but discovery does not list %s after %.0f s: what "
                    "needs them waits until it does (or the operator restarts)",
                    self.name,
                    ", ".join(sorted(self.unwatched())),
                    self.patience,
                )
                return False
            await asyncio.sleep(self.interval)
            try:
                resources = await self._scan()
            except Exception as error:  # the API is away: try again at the next interval
                log.debug("re-reading discovery of %s failed: %s", self.group, error)
                continue
            async with self.insights.revised:
                observation.revise_resources(
                    resources=resources,
                    insights=self.insights,
                    registry=self.registry,
                    group=self.group,
                )
                await self.insights.backbone.fill(resources=resources)
                self.insights.revised.notify_all()
        log.info("%s's resources are watched", self.name)
        return True

    async def _read_discovery(self) -> Collection[Resource]:
        return await scanning.scan_resources(
            groups={self.group}, settings=self.settings, logger=log
        )


_follower: DiscoveryFollower | None = None


async def workload_crd_changed(body: kopf.Body, **kwargs: Any) -> None:
    if _follower is not None and workload_crd_served(body):
        _follower.follow()
    _controller(kwargs).kueue_changed()


# What the handlers need (the chart's rules with kueue.enabled): without them kopf would retry
# the refused watches forever and, its indexes never filled, run no handler at all.
NEEDED = (
    ("workloads", "list"),
    ("workloads", "watch"),
    ("resourceflavors", "watch"),
    ("workloadpriorityclasses", "watch"),
    (TOPOLOGY_PLURAL, "watch"),
)


def missing_permission(namespaces: Sequence[str]) -> str | None:
    """Which Kueue right the operator's identity lacks (asked once at start, with
    SelfSubjectAccessReviews, which every authenticated user may make), or None. ``namespaces``:
    the exact namespaces watched (workloads are checked in each), empty for all."""
    import kubernetes

    api = kubernetes.client.AuthorizationV1Api()
    for resource, verb in NEEDED:
        scoped = resource == "workloads" and namespaces
        for namespace in namespaces if scoped else [None]:
            attributes = kubernetes.client.V1ResourceAttributes(
                group=KUEUE_GROUP, resource=resource, verb=verb, namespace=namespace
            )
            review = kubernetes.client.V1SelfSubjectAccessReview(
                spec=kubernetes.client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
            )
            try:
                answer = api.create_self_subject_access_review(review)
            except Exception as error:  # the API is away: do not guess
                return f"{verb} {resource} (the access review failed: {error})"
            if answer.status is None or not answer.status.allowed:
                where = f" in namespace {namespace}" if namespace else ""
                return f"{verb} {KUEUE_GROUP} {resource}{where}"
    return None


def register(
    registry: kopf.OperatorRegistry | None = None,
    *,
    insights: Insights | None = None,
    settings: kopf.OperatorSettings | None = None,
) -> None:
    """Add the Kueue handlers to kopf's registry (the default one, before kopf.run). With the
    ``insights`` and ``settings`` kopf.run is given, Kueue installed later is followed through
    the discovery lag (:class:`DiscoveryFollower`)."""
    global _follower
    reg = registry or kopf.get_default_registry()
    if insights is not None and settings is not None:
        _follower = DiscoveryFollower(insights, reg, settings)
    kopf.index(KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PLURAL, registry=reg)(
        ringmaster_kueue_workloads
    )
    kopf.index(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", registry=reg)(
        ringmaster_kueue_flavors
    )
    kopf.index(KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", registry=reg)(
        ringmaster_kueue_priority_classes
    )
    # Topology Aware Scheduling: which levels a flavor's Topology has (admission/kueue.py).
    kopf.index(KUEUE_GROUP, KUEUE_VERSION, TOPOLOGY_PLURAL, registry=reg)(
        ringmaster_kueue_topologies
    )
    kopf.index(*CRDS, field="metadata.name", value=WORKLOAD_CRD, registry=reg)(ringmaster_kueue_crd)
    kopf.on.event(KUEUE_GROUP, KUEUE_VERSION, WORKLOAD_PLURAL, registry=reg)(workload_changed)
    kopf.on.event(*CRDS, field="metadata.name", value=WORKLOAD_CRD, registry=reg)(
        workload_crd_changed
    )
