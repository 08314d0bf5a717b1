"""The few Kubernetes API calls the controllers make, with the kubernetes client.

kopf watches and indexes; writes go through here, from worker threads so the event loop never
blocks. Every write is idempotent: create tolerates AlreadyExists, delete tolerates NotFound.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from ringmaster import metrics
from ringmaster.api import GROUP, VERSION
from ringmaster.controllers.outage import is_unreachable

T = TypeVar("T")
log = logging.getLogger(__name__)

# An Event's message is cut to this, as kopf.event() cuts it (the API refuses longer ones).
MAX_EVENT_MESSAGE = 1024


def load_config() -> None:
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]


FIELD_MANAGER = "ringmaster"
# Threads (and pooled connections) for one controller's API calls. A call spends its time
# waiting on the API server, not on this process's CPU; asyncio's shared default pool has
# min(32, cores + 4) threads, 6 on 2 cores, and an admitted gang alone makes 10 calls at once
# (its status, its Service, 8 pods) while other jobs' status writes wait for the same threads.
# As many as the TrainingJob controller's workers, so none waits for a thread.
API_THREADS = 32

# Where each kind the operator applies lives in the REST API: (path prefix, plural).
_PATHS = {
    "Service": ("/api/v1", "services"),
    "Pod": ("/api/v1", "pods"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
    "LeaderWorkerSet": ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    "InferencePool": ("/apis/inference.networking.k8s.io/v1", "inferencepools"),
    "InferenceObjective": ("/apis/inference.networking.x-k8s.io/v1alpha2", "inferenceobjectives"),
    "ReductionServerPool": (f"/apis/{GROUP}/{VERSION}", "reductionserverpools"),
}


def namespace_terminating(error: BaseException) -> bool:
    """The API refused a create because the namespace is being deleted (403 Forbidden, or 409
    from some paths): nothing to retry."""
    return (
        isinstance(error, ApiException)
        and error.status in (403, 409)
        and "being terminated" in str(error.body or error.reason or "")
    )


class KubeApi:
    def __init__(self, threads: int = API_THREADS) -> None:
        configuration = kubernetes.client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = threads
        client = kubernetes.client.ApiClient(configuration)
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="kubeapi")
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        # When the API last answered (any answer, errors about an object included): the work
        # queue ends an outage only on a real contact, not on a reconcile that wrote nothing.
        self.contact = 0.0

    async def _call(self, call: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one API call in a worker thread; ``call`` names it in the latency metric."""
        started = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(
                self._executor, functools.partial(fn, *args, **kwargs)
            )
        except Exception as error:
            if not is_unreachable(error):
                self.contact = time.monotonic()
            raise
        finally:
            metrics.API_REQUEST_SECONDS.labels(call).observe(time.monotonic() - started)
        self.contact = time.monotonic()
        return result

    async def create(self, namespace: str, obj: dict[str, Any]) -> bool:
        """Create a Pod or Service; False when it already exists (a previous run made it).
        The answer is not parsed: the client's typed models cost milliseconds of the event
        loop's interpreter lock per pod, and nothing reads the created object."""
        prefix, plural = _PATHS[obj["kind"]]
        try:
            await self._call(
                f"create {obj['kind']}",
                self._request,
                "POST",
                f"{prefix}/namespaces/{namespace}/{plural}",
                obj,
            )
        except ApiException as error:
            if error.status == 409:
                return False
            if namespace_terminating(error):
                return False  # the namespace is going away, and the owner with it
            raise
        return True

    async def post_event_about(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str, name: str = ""
    ) -> None:
        """Create a core v1 Event about an object and wait for the API to have it (kopf.event()
        only queues one, posted moments later). Shaped as kopf's, so `kubectl describe` shows
        both alike. An unreachable API or a terminating namespace raises, as for any write; any
        other refusal is logged and skipped: an Event is a report, not state. A named Event that
        exists already was posted before (by this process or the one before it): nothing to do."""
        import kopf

        posting = kopf.OperatorSettings().posting
        metadata = involved["metadata"]
        namespace = metadata["namespace"]
        now = dt.datetime.now(dt.UTC).isoformat()
        if len(message) > MAX_EVENT_MESSAGE:
            half = MAX_EVENT_MESSAGE // 2 - 2
            message = f"{message[:half]}...{message[-half:]}"
        event = {
            "metadata": (
                {"namespace": namespace, "name": name}
                if name
                else {"namespace": namespace, "generateName": posting.event_name_prefix}
            ),
            "type": type_,
            "reason": reason,
            "message": message,
            "action": reason,
            "reportingComponent": posting.reporting_component,
            "reportingInstance": posting.reporting_instance,
            "source": {"component": posting.reporting_component},
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "name": metadata["name"],
                "namespace": namespace,
                "uid": metadata.get("uid"),
            },
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": now,
        }
        try:
            await self.post_event(namespace, event)
        except ApiException as error:
            if is_unreachable(error) or namespace_terminating(error):
                raise
            if name and error.status == 409:
                return  # posted already
            log.warning(
                "could not post the %s Event of %s/%s: %s",
                reason,
                namespace,
                metadata["name"],
                error.reason,
            )

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One ConfigMap as a plain dict, or None when it does not exist."""
        try:
            found = await self._call(
                "get ConfigMap", self.core.read_namespaced_config_map, name, namespace
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        plain: dict[str, Any] = self.core.api_client.sanitize_for_serialization(found)
        return plain

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Pod as a plain dict, or None when it does not exist."""
        try:
            found = await self._call("get Pod", self.core.read_namespaced_pod, name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        plain: dict[str, Any] = self.core.api_client.sanitize_for_serialization(found)
        return plain

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The namespace's pods with these labels (a label selector string), as plain dicts."""

        def call() -> list[dict[str, Any]]:
            path = f"/api/v1/namespaces/{namespace}/pods"
            data = self._request("GET", path, {}, [("labelSelector", selector)])
            return cast(list[dict[str, Any]], json.loads(data).get("items") or [])

        return await self._call("list Pods", call)

    async def put_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Create or replace a ConfigMap's data (the operator's own state, such as the cluster
        calibration), by server-side apply: no read first, no conflict with itself."""
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
        await self.apply(namespace, obj)

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """A TokenReview's status: whether the API server issued ``token`` for one of
        ``audiences``, and to whom (a pod-bound token names its pod in ``user.extra``)."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences},
        }
        path = "/apis/authentication.k8s.io/v1/tokenreviews"
        data = await self._call("create TokenReview", self._request, "POST", path, review)
        status: dict[str, Any] = json.loads(data).get("status") or {}
        return status

    async def post_event(self, namespace: str, event: dict[str, Any]) -> None:
        """Create a core v1 Event (for objects kopf does not watch, where kopf.event cannot)."""
        # The answer is not parsed, as for pods: the typed V1Event cost the interpreter lock.
        path = f"/api/v1/namespaces/{namespace}/events"
        await self._call("create Event", self._request, "POST", path, event)

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> str | None:
        """Merge-patch the status subresource; the object's new resourceVersion, or None when
        the object is gone."""
        try:
            updated = await self._call(
                f"patch {plural}/status",
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                {"status": status},
            )
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile: nothing to report on
                raise
            return None
        return str(cast(dict[str, Any], updated)["metadata"]["resourceVersion"])

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        """Delete one of Ringmaster's own objects; gone already is fine."""
        await self.delete_custom_object(GROUP, VERSION, plural, namespace, name)

    async def create_custom(
        self, group: str, version: str, plural: str, namespace: str, obj: dict[str, Any]
    ) -> bool:
        """Create a namespaced custom object (a Kueue Workload); False when it exists."""
        try:
            await self._call(
                f"create {plural}",
                self.custom.create_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                obj,
            )
        except ApiException as error:
            if error.status == 409 or namespace_terminating(error):
                return False
            raise
        return True

    async def patch_custom(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        status: bool = False,
    ) -> None:
        """Merge-patch a namespaced custom object or its status; gone already is fine. A patch
        that names metadata.resourceVersion fails with 409 if the object moved on."""
        method = (
            self.custom.patch_namespaced_custom_object_status
            if status
            else self.custom.patch_namespaced_custom_object
        )
        try:
            what = f"patch {plural}/status" if status else f"patch {plural}"
            await self._call(what, method, group, version, namespace, plural, name, patch)
        except ApiException as error:
            if error.status != 404:
                raise

    async def delete_custom_object(
        self, group: str, version: str, plural: str, namespace: str, name: str
    ) -> None:
        try:
            await self._call(
                f"delete {plural}",
                self.custom.delete_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
                body=kubernetes.client.V1DeleteOptions(propagation_policy="Background"),
            )
        except ApiException as error:
            if error.status != 404:
                raise

    async def apply(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (field manager "ringmaster", conflicts forced: the operator owns the
        fields it sets). Only the fields in `obj` are claimed, so another writer's fields (an
        HPA's replicas, a user's labels) are left alone and an unchanged object is not rewritten.
        """
        return await self.apply_as(namespace, obj, FIELD_MANAGER)

    async def apply_as(
        self, namespace: str, obj: dict[str, Any], field_manager: str
    ) -> dict[str, Any]:
        """Server-side apply as another field manager (conflicts forced): for a field the
        operator keeps while its main manager lets go of it (an apply that leaves a field out
        deletes it when no other manager owns it). An InferenceEndpoint hands its Deployment's
        replicas to an HPA this way."""
        prefix, plural = _PATHS[obj["kind"]]
        path = f"{prefix}/namespaces/{namespace}/{plural}/{obj['metadata']['name']}"
        query = [("fieldManager", field_manager), ("force", "true")]

        def call() -> dict[str, Any]:
            data = self._request("PATCH", path, obj, query, "application/apply-patch+yaml")
            return cast(dict[str, Any], json.loads(data))

        return await self._call(f"apply {obj['kind']}", call)

    async def patch_object(
        self, namespace: str, kind: str, name: str, patch: dict[str, Any]
    ) -> None:
        """Strategic-merge-patch one object of a kind in _PATHS; ApiException when refused (404
        included: the caller decides whether gone is fine)."""
        prefix, plural = _PATHS[kind]
        path = f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        content_type = "application/strategic-merge-patch+json"
        await self._call(f"patch {kind}", self._request, "PATCH", path, patch, None, content_type)

    async def delete_object(
        self, namespace: str, kind: str, name: str, grace_seconds: int | None = None
    ) -> None:
        """Delete one object of a kind in _PATHS (background propagation); gone already is fine.
        ``grace_seconds``: the pod's termination grace period, overriding its own."""
        prefix, plural = _PATHS[kind]
        path = f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        await self._call(f"delete {kind}", self._request, "DELETE", path, body, ok=(404,))

    async def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        """Strategic-merge-patch a Node (labels, taints); ApiException when refused."""
        path = f"/api/v1/nodes/{name}"
        content_type = "application/strategic-merge-patch+json"
        await self._call("patch Node", self._request, "PATCH", path, patch, None, content_type)

    async def set_degraded_taint(self, name: str, on: bool) -> None:
        """Add or remove the NoSchedule taint ringmaster.dev/degraded on a Node. A Node's taints
        are replaced whole by a patch: read, change ours, write with the read version (a
        conflict is the caller's to retry)."""
        from ringmaster.manifests.profiling import DEGRADED_LABEL

        def call() -> None:
            node = json.loads(self._request("GET", f"/api/v1/nodes/{name}", {}))
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != DEGRADED_LABEL]
            if on:
                taints.append({"key": DEGRADED_LABEL, "value": "true", "effect": "NoSchedule"})
            if taints == (node["spec"].get("taints") or []):
                return
            version = node["metadata"]["resourceVersion"]
            patch = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
            self._request(
                "PATCH", f"/api/v1/nodes/{name}", patch, None, "application/merge-patch+json"
            )

        await self._call("taint Node", call)

    async def ready(self, timeout: float = 2.0) -> bool:
        """The API server answers /readyz with 200: it serves, and its storage with it (the
        probe that ends an outage, reachability.py)."""

        def get() -> bool:
            client = self.core.api_client
            method, url, headers, _body, _ = client.param_serialize(
                method="GET", resource_path="/readyz", auth_settings=["BearerToken"]
            )
            response = client.call_api(method, url, header_params=headers, _request_timeout=timeout)
            response.read()
            return bool(response.status == 200)

        return await self._call("get /readyz", get)

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any],
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (),
    ) -> bytes:
        """One REST call with the client's connection and credentials, its answer unparsed;
        ApiException on an error status other than those in `ok`. Runs in a worker thread."""
        client = self.core.api_client
        method, url, headers, serialized, _ = client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(method, url, header_params=headers, body=serialized)
        response.read()
        if response.status not in ok and not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        return bytes(response.data)
