"""The kopf shell of the InferenceEndpoint controller: read, decide (inference_lifecycle), apply,
report.

kopf watches InferenceEndpoints, their Deployments and HPAs, and keeps them in indexes, so no
reconcile lists the cluster; watch events only put keys on a work queue, whose workers reconcile
one endpoint at a time from the indexes. No kopf change handler, timer or daemon: those store
progress in the object or add a finalizer, and an endpoint needs neither (its Deployment, Service
and HPA carry ownerReferences, so the garbage collector removes them with it).

Objects are server-side applied (field manager "ringmaster"): an unchanged object is not
rewritten, and fields other managers own (an HPA's replica count) are left alone. The controller
also remembers what it last applied, so a resync or a status-only event costs no API call.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import functools
import json
import logging
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._cogs.structs.references import Insights
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from ringmaster import metrics
from ringmaster.api import GROUP, VERSION, InferenceEndpointSpec, InferenceEndpointStatus
from ringmaster.controllers import cluster_state
from ringmaster.controllers.autoscaling_source import uses_server_metrics
from ringmaster.controllers.base import Controller, Key, as_body, snapshot
from ringmaster.controllers.catalog import on_catalog_change, serving_hardware_problem
from ringmaster.controllers.inference_lifecycle import (
    REPLICAS_MANAGER,
    Decision,
    DeploymentView,
    EndpointView,
    Planner,
    invalid_spec,
    reconcile_inference,
    refused_apply,
)
from ringmaster.controllers.inference_routing import InferenceExtension
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.kueue_workloads import DiscoveryFollower
from ringmaster.controllers.server_metrics_autoscaler import (
    SCRAPE_INTERVAL_SECONDS,
    ServerMetricsAutoscaler,
)
from ringmaster.manifests.disaggregated import SIDE_NAMES, side_name
from ringmaster.manifests.inference import (
    INFERENCE_ENDPOINT_LABEL,
    LWS_KIND,
    object_name,
    workload_name,
)
from ringmaster.manifests.inference_pool import (
    INFERENCE_OBJECTIVE_CRD,
    INFERENCE_OBJECTIVE_VERSION,
    INFERENCE_POOL_CRD,
    INFERENCE_POOL_VERSION,
)
from ringmaster.manifests.naming import MANAGED_BY, OPERATOR
from ringmaster.planning.plans import PlanError

logger = logging.getLogger(__name__)
PLURAL = "inferenceendpoints"
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_CRD = f"{LWS_PLURAL}.{LWS_GROUP}"
LWS_ENABLED = False  # register_leader_worker_set
KIND = "InferenceEndpoint"
# What was applied is applied again after this long, even unchanged (someone edited it).
REASSERT_SECONDS = 300.0
# An object the API server refuses (a Service of the name owned by someone else) is tried again
# after this long; meanwhile the endpoint says why.
REFUSED_RETRY_SECONDS = 30.0
OWNED: dict[str, Any] = {
    MANAGED_BY: OPERATOR,
    INFERENCE_ENDPOINT_LABEL: kopf.PRESENT,
}


def _owner(meta: Mapping[str, Any]) -> str | None:
    """The InferenceEndpoint that owns an object (its controller ownerReference)."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
            return str(ref["name"])
    return None


def _applied_key(kind: str, name: str) -> str:
    """What was applied, per object: an endpoint runs two workloads of a kind when split."""
    return f"{kind}/{name}"


def side_names(endpoint: str) -> frozenset[str]:
    """The names a disaggregated endpoint's side workloads take (either kind)."""
    return frozenset(
        side_name(endpoint, side, kind) for side in SIDE_NAMES for kind in ("Deployment", LWS_KIND)
    )


def crd_served(body: Mapping[str, Any], version: str) -> bool:
    """A CRD is Established and serves ``version``."""
    versions = (body.get("spec") or {}).get("versions") or []
    served = any(v.get("name") == version and v.get("served") for v in versions)
    conditions = (body.get("status") or {}).get("conditions") or []
    established = any(
        c.get("type") == "Established" and c.get("status") == "True" for c in conditions
    )
    return served and established


def plan(spec: InferenceEndpointSpec) -> dict[str, Any]:
    """The engine's plan for the spec. Cached: an endpoint is reconciled on every look (its
    pods' events among them), the plan is a pure function of the spec and the catalog, and an
    LLM plan with its alternatives takes 0.05-0.15 s of the event loop (the prompts' backlog
    chain, issue 46); a catalog change clears it (InferenceController.catalog_changed)."""
    return copy.deepcopy(_cached_plan(spec.model_dump_json(by_alias=True)))


@functools.lru_cache(maxsize=1024)
def _cached_plan(spec_json: str) -> dict[str, Any]:
    from ringmaster.planning import inference_warnings, plan_inference

    spec = InferenceEndpointSpec.model_validate_json(spec_json)
    report = plan_inference(spec)
    return {**report.to_json(), "warnings": [str(w) for w in inference_warnings(spec, report)]}


# ---------------------------------------------------------------- indexes (fed by kopf's watches)


@kopf.index(GROUP, VERSION, PLURAL)
def ringmaster_inferenceendpoints(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", name): snapshot(body)}


@kopf.index("apps", "v1", "deployments", labels=OWNED)
def ringmaster_inference_deployments(
    namespace: str | None, meta: kopf.Meta, body: kopf.Body, **_: Any
) -> dict[Key, DeploymentView]:
    owner = _owner(meta)
    return {(namespace or "", owner): DeploymentView.from_object(body)} if owner else {}


def ringmaster_inference_groups(
    namespace: str | None, meta: kopf.Meta, body: kopf.Body, **_: Any
) -> dict[Key, DeploymentView]:
    """The endpoints' LeaderWorkerSets (watched by kopf only while their CRD is served)."""
    owner = _owner(meta)
    return {(namespace or "", owner): DeploymentView.from_object(body)} if owner else {}


@kopf.index(*CRDS, field="metadata.name", value=LWS_CRD)
def ringmaster_lws_crd(body: kopf.Body, **_: Any) -> dict[str, bool]:
    """Whether the LeaderWorkerSet API is served (its CRD Established at v1)."""
    return {"served": crd_served(body, LWS_VERSION)}


@kopf.index(*CRDS, field="metadata.name", value=INFERENCE_POOL_CRD)
def ringmaster_inference_pool_crd(body: kopf.Body, **_: Any) -> dict[str, bool]:
    """Whether the Inference Extension's InferencePool (v1) is served."""
    return {"served": crd_served(body, INFERENCE_POOL_VERSION)}


@kopf.index(*CRDS, field="metadata.name", value=INFERENCE_OBJECTIVE_CRD)
def ringmaster_inference_objective_crd(body: kopf.Body, **_: Any) -> dict[str, bool]:
    """Whether the Inference Extension's InferenceObjective (v1alpha2) is served."""
    return {"served": crd_served(body, INFERENCE_OBJECTIVE_VERSION)}


@kopf.index("autoscaling", "v2", "horizontalpodautoscalers", labels=OWNED)
def ringmaster_inference_autoscalers(
    namespace: str | None, meta: kopf.Meta, **_: Any
) -> dict[Key, bool]:
    owner = _owner(meta)
    return {(namespace or "", owner): True} if owner else {}


# ---------------------------------------------------------------- the controller


class ApplyRefused(Exception):
    """The API server refused to apply one of the endpoint's objects (409, 422)."""

    def __init__(self, kind: str, name: str, error: ApiException) -> None:
        try:
            message = str(json.loads(error.body or "{}").get("message") or error.reason)
        except (TypeError, ValueError):
            message = str(error.reason)
        super().__init__(f"{kind} {name}: {message}")
        self.kind, self.name, self.message = kind, name, message


@dataclass(frozen=True)
class Applied:
    fingerprint: str
    generation: int
    at: float


class InferenceController(Controller):
    kind = KIND
    plural = PLURAL
    index = "ringmaster_inferenceendpoints"

    def __init__(self, api: KubeApi, planner: Planner) -> None:
        super().__init__(api)
        self.planner = planner
        # Per endpoint, per kind: what we last applied and the generation it produced.
        self.applied: dict[Key, dict[str, Applied]] = {}
        # spec.autoscaling.source ServerMetrics: the servers' metrics, read every interval.
        self.autoscaler = ServerMetricsAutoscaler(api.list_pods)
        self.autoscale_task: asyncio.Task[None] | None = None

    def bind(self, kwargs: Mapping[str, Any]) -> None:
        started = bool(self.indexes)
        super().bind(kwargs)
        if not started and self.indexes:
            self.autoscale_task = asyncio.create_task(self.autoscale_forever())

    async def stop(self) -> None:
        if self.autoscale_task is not None:
            self.autoscale_task.cancel()
        await self.autoscaler.close()
        await super().stop()

    async def autoscale_forever(self) -> None:
        while True:
            await asyncio.sleep(SCRAPE_INTERVAL_SECONDS)
            try:
                await self.autoscale_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the autoscaler: the next one runs
                logger.exception("server-metrics autoscaling round failed")

    async def autoscale_once(self) -> None:
        """One round: every endpoint scaled on its servers' metrics is scraped and decided; a
        changed count queues its reconcile (which applies it)."""
        for key, store in list(self.objects().items()):
            body = next(iter(store), None)
            if body is None:
                continue
            namespace, name = key
            try:
                spec = InferenceEndpointSpec.model_validate(body.get("spec") or {})
                current = InferenceEndpointStatus.model_validate(self.current_status(key, body))
            except ValidationError:
                continue  # the reconcile says what is wrong with it
            if not uses_server_metrics(spec):
                if self.autoscaler.scaled(namespace, name):
                    self.autoscaler.forget(namespace, name)
                    self.queue.add(key)
                continue
            try:
                planned = self.planner(spec)
            except PlanError:
                continue
            if await self.autoscaler.tick(namespace, name, spec, current, planned):
                self.queue.add(key)

    def catalog_changed(self) -> None:
        """A new hardware catalog: every endpoint is planned and placed again."""
        _cached_plan.cache_clear()
        if self.indexes:
            for key in list(self.objects()):
                self.queue.add(key)

    def _all(self, index: str, key: Hashable) -> list[Any]:
        indexed = self.indexes.get(index)
        store = indexed.get(key) if indexed is not None else None
        return list(store) if store else []

    def _first(self, index: str, key: Hashable) -> Any:
        indexed = self.indexes.get(index)
        store = indexed.get(key) if indexed is not None else None
        return next(iter(store), None) if store else None

    async def reconcile_object(
        self, namespace: str, name: str, body: dict[str, Any], current: dict[str, Any]
    ) -> float | None:
        key = (namespace, name)
        status = InferenceEndpointStatus.model_validate(current)
        generation = int(body["metadata"].get("generation", 1))
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        deployments = self._all("ringmaster_inference_deployments", key)
        deployment = next((d for d in deployments if d.name in ("", object_name(name))), None)
        group = await self._current_group(namespace, name)
        side_workloads = {
            view.name: view
            for view in [*deployments, *self._all("ringmaster_inference_groups", key)]
            if view.name in side_names(name)
        }
        lws_installed = LWS_ENABLED and bool(self._first("ringmaster_lws_crd", "served"))
        autoscaler_present = bool(self._first("ringmaster_inference_autoscalers", key))
        extension = InferenceExtension(
            pools=bool(self._first("ringmaster_inference_pool_crd", "served")),
            objectives=bool(self._first("ringmaster_inference_objective_crd", "served")),
        )
        try:
            spec = InferenceEndpointSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            # The CRD admits what the models admit; this catches a CRD older than the operator.
            message = "; ".join(
                f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()
            )[:1000]
            decision = invalid_spec(status, generation, message, now)
        else:
            pools, used = cluster_state.pools_and_usage(self.indexes)
            decision = reconcile_inference(
                EndpointView(name, namespace, generation, spec, status),
                deployment,
                autoscaler_present,
                pools,
                used,
                self.planner,
                now,
                serving_hardware_problem(
                    spec.accelerator.type,
                    spec.accelerator.per_replica,
                    spec.accelerator.hosts_per_replica,
                    spec.machine_type,
                ),
                group,
                lws_installed,
                side_workloads,
                extension,
                self.autoscaler.scaled(namespace, name),
            )
        try:
            await self._apply(
                namespace,
                name,
                body,
                current,
                decision,
                deployment,
                group,
                autoscaler_present,
                side_workloads,
            )
        except ApiException as error:
            if error.status == 403 and "being terminated" in str(error.body):
                return None  # the namespace is going away, and the endpoint with it
            raise
        except ApplyRefused as refused:
            # Not a crash loop: the endpoint says which object the API server refused and why.
            decision = refused_apply(decision, refused.kind, refused.name, refused.message, now)
            await self.write_status(namespace, name, current, decision.status.to_k8s())
            for event in decision.events:
                self.post(body, event.type, event.reason, event.message)
            self._observe(namespace, name, decision)
            return REFUSED_RETRY_SECONDS
        self._observe(namespace, name, decision)
        return None

    async def _current_group(self, namespace: str, name: str) -> DeploymentView | None:
        """The endpoint's LeaderWorkerSet under its current name. One under another name was
        made by an older operator (it shared the endpoint's name, and so its headless Service
        the endpoint's Service): it goes, and the replicas move to the set of the new name."""
        indexed = self.indexes.get("ringmaster_inference_groups")
        views = list(indexed.get((namespace, name)) or []) if indexed is not None else []
        wanted = workload_name(name, LWS_KIND)
        for view in views:
            if view.name and view.name != wanted and view.name not in side_names(name):
                logger.info(
                    "%s/%s: deleting LeaderWorkerSet %s (renamed %s)",
                    namespace,
                    name,
                    view.name,
                    wanted,
                )
                await self.api.delete_object(namespace, LWS_KIND, view.name)
        return next((v for v in views if v.name in ("", wanted)), None)

    def _needs_apply(
        self,
        key: Key,
        obj: dict[str, Any],
        fingerprint: str,
        workloads: Mapping[str, DeploymentView],
        autoscaler_present: bool,
    ) -> bool:
        last = self.applied.get(key, {}).get(_applied_key(obj["kind"], obj["metadata"]["name"]))
        if last is None or last.fingerprint != fingerprint:
            return True
        if time.monotonic() - last.at > REASSERT_SECONDS:
            return True
        if obj["kind"] in ("Deployment", LWS_KIND):
            # Gone, or its spec changed since our apply (an edit, or the HPA's scaling).
            view = workloads.get(obj["metadata"]["name"])
            return view is None or view.generation != last.generation
        if obj["kind"] == "HorizontalPodAutoscaler":
            return not autoscaler_present
        return False

    async def _apply(
        self,
        namespace: str,
        name: str,
        body: dict[str, Any],
        current_status: dict[str, Any],
        decision: Decision,
        deployment: DeploymentView | None,
        group: DeploymentView | None,
        autoscaler_present: bool,
        side_workloads: Mapping[str, DeploymentView],
    ) -> None:
        key = (namespace, name)
        workloads = {
            v.name or workload_name(name, kind): v
            for v, kind in ((deployment, "Deployment"), (group, LWS_KIND))
            if v is not None
        } | dict(side_workloads)
        for obj in decision.apply:
            # Not kopf.adopt: it would also copy the endpoint's own labels onto the children
            # and into the pod template, so relabelling an endpoint would roll its pods.
            kopf.append_owner_reference(obj, owner=as_body(body))
            fingerprint = json.dumps(obj, sort_keys=True)
            if self._needs_apply(key, obj, fingerprint, workloads, autoscaler_present):
                try:
                    result = await self.api.apply(namespace, obj)
                except ApiException as error:
                    if error.status not in (409, 422):
                        raise
                    raise ApplyRefused(obj["kind"], obj["metadata"]["name"], error) from error
                generation = int((result.get("metadata") or {}).get("generation") or 0)
                self.applied.setdefault(key, {})[
                    _applied_key(obj["kind"], obj["metadata"]["name"])
                ] = Applied(fingerprint, generation, time.monotonic())
        if decision.hold_replicas is not None:
            await self.api.apply_as(namespace, decision.hold_replicas, REPLICAS_MANAGER)
        if decision.delete_workload is not None:
            kind = decision.delete_workload
            await self.api.delete_object(namespace, kind, workload_name(name, kind))
            self.applied.get(key, {}).pop(_applied_key(kind, workload_name(name, kind)), None)
        for kind, other in decision.delete_objects:
            await self.api.delete_object(namespace, kind, other)
            self.applied.get(key, {}).pop(_applied_key(kind, other), None)
        if decision.delete_autoscaler:
            await self.api.delete_object(namespace, "HorizontalPodAutoscaler", object_name(name))
            self.applied.get(key, {}).pop(
                _applied_key("HorizontalPodAutoscaler", object_name(name)), None
            )
        await self.write_status(namespace, name, current_status, decision.status.to_k8s())
        for event in decision.events:
            self.post(body, event.type, event.reason, event.message)

    def _observe(self, namespace: str, name: str, decision: Decision) -> None:
        status = decision.status
        metrics.INFERENCE_REPLICAS.labels(namespace, name, "desired").set(status.replicas or 0)
        metrics.INFERENCE_REPLICAS.labels(namespace, name, "ready").set(status.ready_replicas or 0)
        metrics.INFERENCE_TARGET_RPS.labels(namespace, name).set(
            decision.target_requests_per_second
        )
        capacity = status.plan.capacity_requests_per_second if status.plan else None
        metrics.INFERENCE_CAPACITY_RPS.labels(namespace, name).set(capacity or 0.0)

    def forget(self, key: Key) -> None:
        self.applied.pop(key, None)
        self.autoscaler.forget(*key)
        for state in ("desired", "ready"):
            with contextlib.suppress(KeyError):
                metrics.INFERENCE_REPLICAS.remove(*key, state)
        for gauge in (metrics.INFERENCE_TARGET_RPS, metrics.INFERENCE_CAPACITY_RPS):
            with contextlib.suppress(KeyError):
                gauge.remove(*key)


CONTROLLER: InferenceController | None = None


def controller() -> InferenceController:
    assert CONTROLLER is not None, "the InferenceEndpoint controller starts in the startup handler"
    return CONTROLLER


@kopf.on.startup()
async def start_inference_controller(**_: Any) -> None:
    global CONTROLLER
    CONTROLLER = InferenceController(KubeApi(), plan)
    on_catalog_change(CONTROLLER.catalog_changed)


@kopf.on.cleanup()
async def stop_inference_controller(**_: Any) -> None:
    if CONTROLLER is not None:
        await CONTROLLER.stop()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def inferenceendpoint_changed(namespace: str | None, name: str, **kwargs: Any) -> None:
    ctl = controller()
    ctl.bind(kwargs)
    ctl.queue.add((namespace or "", name))


_lws_follower: DiscoveryFollower | None = None
LWS_ENV = "RINGMASTER_LWS"  # auto (default) or off: the chart's lws.enabled


def register_leader_worker_set(insights: Insights, settings: kopf.OperatorSettings) -> None:
    """Watch the endpoints' LeaderWorkerSets (``ringmaster run`` calls it unless LeaderWorkerSet
    is off or the operator may not watch them: a refused watch would hold every index). With the
    ``insights`` and ``settings`` kopf.run is given, LeaderWorkerSet installed while the
    operator runs is watched through the discovery lag (kueue_workloads.DiscoveryFollower).
    Not registered, a multi-host endpoint waits with LeaderWorkerSetNotInstalled."""
    global _lws_follower, LWS_ENABLED
    LWS_ENABLED = True
    kopf.index(LWS_GROUP, LWS_VERSION, LWS_PLURAL, labels=OWNED)(ringmaster_inference_groups)
    kopf.on.event(LWS_GROUP, LWS_VERSION, LWS_PLURAL, labels=OWNED)(inference_child_changed)
    _lws_follower = DiscoveryFollower(
        insights,
        kopf.get_default_registry(),
        settings,
        group=LWS_GROUP,
        resources=frozenset({LWS_PLURAL}),
        name="LeaderWorkerSet",
    )


def missing_lws_permission() -> str | None:
    """Which LeaderWorkerSet right the operator's identity lacks (list, watch, create, patch,
    delete), asked once at start with SelfSubjectAccessReviews; None when it has them all."""
    import kubernetes

    api = kubernetes.client.AuthorizationV1Api()
    for verb in ("list", "watch", "create", "patch", "delete"):
        attributes = kubernetes.client.V1ResourceAttributes(
            group=LWS_GROUP, resource=LWS_PLURAL, verb=verb
        )
        review = kubernetes.client.V1SelfSubjectAccessReview(
            spec=kubernetes.client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
        )
        try:
            answer = api.create_self_subject_access_review(review)
        except Exception as error:  # the API is away: do not guess
            return f"{verb} {LWS_PLURAL} (the access review failed: {error})"
        if answer.status is None or not answer.status.allowed:
            return f"{verb} {LWS_GROUP} {LWS_PLURAL}"
    return None


@kopf.on.event(*CRDS, field="metadata.name", value=LWS_CRD)
async def lws_crd_changed(body: kopf.Body, **kwargs: Any) -> None:
    """LeaderWorkerSet installed or removed: every endpoint is looked at again (those that
    waited for it start)."""
    if _lws_follower is not None and crd_served(body, LWS_VERSION):
        _lws_follower.follow()
    ctl = controller()
    ctl.bind(kwargs)
    ctl.catalog_changed()


@kopf.on.event(*CRDS, field="metadata.name", value=INFERENCE_POOL_CRD)
@kopf.on.event(*CRDS, field="metadata.name", value=INFERENCE_OBJECTIVE_CRD)
async def inference_extension_crd_changed(**kwargs: Any) -> None:
    """The Inference Extension installed or removed: every endpoint is looked at again (its
    pools created, or its condition saying why not)."""
    ctl = controller()
    ctl.bind(kwargs)
    ctl.catalog_changed()


@kopf.on.event("apps", "v1", "deployments", labels=OWNED)
@kopf.on.event("autoscaling", "v2", "horizontalpodautoscalers", labels=OWNED)
async def inference_child_changed(namespace: str | None, meta: kopf.Meta, **kwargs: Any) -> None:
    owner = _owner(meta)
    if owner:
        ctl = controller()
        ctl.bind(kwargs)
        ctl.queue.add((namespace or "", owner))
