"""The kopf shell of the PoolProfile controller (profile_lifecycle decides): the run's pods, the
results the endpoint accepts (progress_server.py), the flagged hosts' labels, and the pool's
measurement installed for every plan (engine/profiled.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import kopf
from pydantic import ValidationError

from ringmaster import metrics
from ringmaster.api import GROUP, VERSION
from ringmaster.api.poolprofile import PoolProfilePhase, PoolProfileSpec, PoolProfileStatus
from ringmaster.controllers.base import Controller, Key, as_body, snapshot
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.profile_lifecycle import (
    PoolFacts,
    RunPods,
    decide,
    finish,
    invalid_spec,
)
from ringmaster.controllers.training_observer import PROGRESS_CA_ENV, PROGRESS_URL_ENV
from ringmaster.manifests import profiling as M
from ringmaster.manifests.naming import ATTEMPT_ANNOTATION, ROLE_LABEL
from ringmaster.placement.labels import accelerator_resource
from ringmaster.profiling.results import HostResult

log = logging.getLogger(__name__)

PLURAL = "poolprofiles"
INDEX = "ringmaster_pool_profiles"
POD_INDEX = "ringmaster_profiler_pods"


@kopf.index(GROUP, VERSION, PLURAL)
def ringmaster_pool_profiles(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Key, Any]:
    return {(namespace or "", name): snapshot(body)}


@kopf.index("pods", labels={ROLE_LABEL: M.PROFILER_ROLE, M.POOL_PROFILE_LABEL: kopf.PRESENT})
def ringmaster_profiler_pods(
    name: str,
    namespace: str | None,
    labels: kopf.Labels,
    annotations: kopf.Annotations,
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    **_: Any,
) -> dict[Hashable, tuple[str, int, int, str, str | None]]:
    """(name, run, rank, phase, node) of each measurement pod, by (namespace, profile)."""
    run = int(annotations.get(ATTEMPT_ANNOTATION, "0") or 0)
    rank = int(name.rsplit("-", 1)[-1])
    gated = any(g.get("name") for g in spec.get("schedulingGates") or ())
    phase = "Gated" if gated else str(status.get("phase") or "Pending")
    if meta.get("deletionTimestamp"):
        phase = "Deleting"
    key = (namespace or "", labels[M.POOL_PROFILE_LABEL])
    return {key: (name, run, rank, phase, spec.get("nodeName"))}


class PoolProfileController(Controller):
    kind = "PoolProfile"
    plural = PLURAL
    index = INDEX
    workers = 2

    def __init__(self, api: KubeApi) -> None:
        super().__init__(api)
        self.results: dict[tuple[Key, int], dict[str, HostResult]] = {}
        self.tracked: set[tuple[Key, int]] = set()  # runs this process collects results of
        self.all_seen: set[tuple[Key, int]] = set()
        self.installed: dict[Key, Any] = {}  # profile -> its PoolMeasurement, planned on

    # ------------------------------------------------------------ the endpoint's side

    def profile_exists(self, key: Key) -> bool:
        return bool(self.indexes) and bool(self.objects().get(key))

    def pods_of(self, key: Key) -> set[str]:
        """The pods of the profile's current run (only they may post)."""
        run = self._run_of(key)
        return {name for name, r, *_ in self._pods(key) if r == run}

    def accept(self, key: Key, pod: str, result: HostResult) -> None:
        run = self._run_of(key)
        self.results.setdefault((key, run), {})[result.node] = result
        self.queue.add(key)

    def _run_of(self, key: Key) -> int:
        store = self.objects().get(key) if self.indexes else None
        body = next(iter(store)) if store else {}
        current = self.current_status(key, body) if body else {}
        return int(current.get("run") or 0)

    def _pods(self, key: Key) -> list[tuple[str, int, int, str, str | None]]:
        return list(self.indexes.get(POD_INDEX, {}).get(key, []))

    # ------------------------------------------------------------ reconcile

    async def reconcile_object(
        self, namespace: str, name: str, body: dict[str, Any], current: dict[str, Any]
    ) -> float | None:
        key = (namespace, name)
        status = PoolProfileStatus.model_validate(current)
        generation = int(body["metadata"].get("generation", 1))
        try:
            spec = PoolProfileSpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            # The schema and CEL admit only what the model does: this is a version skew.
            message = str(error)[:1000]
            invalid = invalid_spec(status, generation, message, dt.datetime.now(dt.UTC))
            await self.write_status(namespace, name, current, invalid.to_k8s())
            self.post(body, "Warning", "InvalidSpec", message)
            return None
        pool, pools = self._pool(spec.pool)
        if pool is None and not pools:
            return 2.0  # no node seen yet (the operator is starting): no verdict on the pool
        run = status.run
        pods = [p for p in self._pods(key) if p[1] == run and p[3] != "Deleting"]
        if status.run_hosts and len(pods) >= status.run_hosts:
            self.all_seen.add((key, run))
        run_pods = RunPods(
            phases={rank: phase for _, _, rank, phase, _ in pods},
            nodes={rank: node for _, _, rank, _, node in pods if node},
            all_seen=(key, run) in self.all_seen,
        )
        results = self.results.get((key, run), {})
        now = dt.datetime.now(dt.UTC)
        # A changed spec (taintDegraded turned on or off) applies to the hosts flagged already.
        relabel = status.phase == PoolProfilePhase.PROFILED and status.observed_generation not in (
            None,
            generation,
        )
        decision = decide(
            spec,
            status,
            generation,
            pool,
            pools,
            run_pods,
            results,
            now,
            (key, run) in self.tracked,
        )
        new = decision.status
        if decision.finished and pool is not None:
            events = await self._finish(key, spec, new, generation, results, run_pods, pool, now)
            decision.events += events
        if decision.delete_run is not None:
            await self._delete_run(key, decision.delete_run)
        if decision.start_run is not None and pool is not None:
            await self._start_run(body, spec, pool, decision.start_run, decision.hosts)
        if relabel and not decision.finished:
            flagged = {h.node: h.message or "" for h in new.hosts if h.degraded}
            await self._label_hosts(key, spec, new, flagged)
        await self.write_status(namespace, name, current, new.to_k8s())
        for type_, reason, message in decision.events:
            self.post(body, type_, reason, message)
        self._install(key, new)
        return decision.requeue_after

    def _pool(self, name: str) -> tuple[PoolFacts | None, list[str]]:
        from ringmaster.controllers import trainingjob

        controller = trainingjob.CONTROLLER
        if controller is None:
            return None, []
        pools = controller.snapshot.pools()
        summary = pools.get(name)
        if summary is None:
            return None, sorted(pools)
        return (
            PoolFacts(
                name=name,
                accelerator=summary.identity.accelerator,
                machine_type=summary.identity.instance_type,
                per_host=summary.accelerators_per_node,
                nodes=summary.nodes,
                node_selector=dict(summary.node_selector),
            ),
            sorted(pools),
        )

    async def _start_run(
        self, body: dict[str, Any], spec: PoolProfileSpec, pool: PoolFacts, run: int, hosts: int
    ) -> None:
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        ca_file = os.environ.get(PROGRESS_CA_ENV)
        ca = Path(ca_file).read_text() if ca_file else None
        await self.api.apply(namespace, M.payload_configmap(namespace, ca))
        service = M.rendezvous_service(name, namespace)
        kopf.append_owner_reference(service, owner=as_body(body))
        await self.api.apply(namespace, service)
        assert pool.accelerator is not None
        self.tracked.add(((namespace, name), run))
        for rank in range(hosts):
            pod = M.measurement_pod(
                profile=name,
                namespace=namespace,
                run=run,
                rank=rank,
                hosts=hosts,
                image=spec.image,
                node_selector=dict(pool.node_selector),
                accelerator_resource=accelerator_resource(pool.accelerator),
                per_host=pool.per_host,
                measurements=list(spec.measurements),
                quick=spec.quick,
                results_url=os.environ.get(PROGRESS_URL_ENV),
                ca=bool(ca),
            )
            kopf.append_owner_reference(pod, owner=as_body(body))
            await self.api.create(namespace, pod)

    async def _delete_run(self, key: Key, run: int) -> None:
        names = [p[0] for p in self._pods(key) if p[1] <= run and p[3] != "Deleting"]
        await asyncio.gather(
            *(self.api.delete_object(key[0], "Pod", pod, grace_seconds=0) for pod in names)
        )
        for old in [k for k in self.results if k[0] == key and k[1] < run]:
            del self.results[old]

    async def _finish(
        self,
        key: Key,
        spec: PoolProfileSpec,
        status: PoolProfileStatus,
        generation: int,
        results: Mapping[str, HostResult],
        pods: RunPods,
        pool: PoolFacts,
        now: dt.datetime,
    ) -> list[tuple[str, str, str]]:
        from ringmaster.controllers.profile_summary import summarize_run

        summary = summarize_run(pool, results, spec.degraded_threshold_percent / 100.0)
        events = finish(
            status,
            generation,
            results,
            pods.nodes,
            summary.flagged,
            summary.measured,
            summary.sustained_bf16,
            summary.catalog_sustained_bf16,
            now,
        )
        await self._label_hosts(key, spec, status, summary.flagged)
        metrics_for(key, spec.pool, summary)
        return events

    async def _label_hosts(
        self, key: Key, spec: PoolProfileSpec, status: PoolProfileStatus, flagged: Mapping[str, str]
    ) -> None:
        """Flag the hosts below the pool, and lift the flag of measured hosts that are not."""
        measured = {h.node for h in status.hosts if h.result == "Reported"}
        for node in sorted(measured):
            bad = node in flagged
            labels = {M.DEGRADED_LABEL: "true" if bad else None}
            note = f"{key[0]}/{key[1]}: {flagged[node]}" if bad else None
            patch: dict[str, Any] = {
                "metadata": {"labels": labels, "annotations": {M.DEGRADED_SINCE_ANNOTATION: note}}
            }
            try:
                if spec.taint_degraded or not bad:
                    await self.api.set_degraded_taint(node, bad and spec.taint_degraded)
                await self.api.patch_node(node, patch)
            except Exception as error:  # the next run labels again; the status names the host
                log.warning("could not label node %s: %s", node, error)

    def _install(self, key: Key, status: PoolProfileStatus) -> None:
        """Plan the pool on the profile (or no longer, when it has none)."""
        from ringmaster.controllers.profile_summary import install_measurements

        measurement = status.measured if status.phase == PoolProfilePhase.PROFILED else None
        if self.installed.get(key) == (measurement, status.profiled_at):
            return
        self.installed[key] = (measurement, status.profiled_at)
        install_measurements(self._measurements())

    def _measurements(self) -> dict[Key, Any]:
        out = {}
        for key, store in self.objects().items():
            for body in store:
                status = self.current_status(key, body)
                if status.get("phase") == PoolProfilePhase.PROFILED and status.get("measured"):
                    out[key] = (body.get("spec") or {}).get("pool"), status
        return out

    def forget(self, key: Key) -> None:
        for stale in [k for k in self.results if k[0] == key]:
            del self.results[stale]
        self.tracked = {k for k in self.tracked if k[0] != key}
        self.all_seen = {k for k in self.all_seen if k[0] != key}
        if self.installed.pop(key, None) is not None:
            from ringmaster.controllers.profile_summary import install_measurements

            install_measurements(self._measurements())
        with contextlib.suppress(KeyError):
            metrics.POOL_PROFILE_FLAGGED.remove(*key)
        forget_metrics(key)


_EXPORTED: dict[Key, set[tuple[str, str]]] = {}  # profile -> (pool, measurement) exported


def metrics_for(key: Key, pool: str, summary: Any) -> None:
    metrics.POOL_PROFILE_FLAGGED.labels(*key).set(len(summary.flagged))
    forget_metrics(key)
    for measurement, value in summary.headline.items():
        metrics.POOL_PROFILE_MEASURED.labels(*key, pool, measurement).set(value)
        _EXPORTED.setdefault(key, set()).add((pool, measurement))


def forget_metrics(key: Key) -> None:
    for labels in _EXPORTED.pop(key, set()):
        with contextlib.suppress(KeyError):
            metrics.POOL_PROFILE_MEASURED.remove(*key, *labels)


CONTROLLER: PoolProfileController | None = None


@kopf.on.startup()
async def start_pool_profile_controller(**_: Any) -> None:
    global CONTROLLER
    CONTROLLER = PoolProfileController(KubeApi())


@kopf.on.cleanup()
async def stop_pool_profile_controller(**_: Any) -> None:
    if CONTROLLER is not None:
        await CONTROLLER.stop()


def _controller(kwargs: Mapping[str, Any]) -> PoolProfileController:
    assert CONTROLLER is not None, "the PoolProfile controller starts at startup"
    CONTROLLER.bind(kwargs)
    return CONTROLLER


@kopf.on.event(GROUP, VERSION, PLURAL)
async def pool_profile_changed(
    namespace: str | None, name: str, body: kopf.Body, **kwargs: Any
) -> None:
    version = (body.get("metadata") or {}).get("resourceVersion")
    _controller(kwargs).object_changed((namespace or "", name), version)


@kopf.on.event("pods", labels={ROLE_LABEL: M.PROFILER_ROLE, M.POOL_PROFILE_LABEL: kopf.PRESENT})
async def profiler_pod_changed(namespace: str | None, labels: kopf.Labels, **kwargs: Any) -> None:
    _controller(kwargs).queue.add((namespace or "", labels[M.POOL_PROFILE_LABEL]))
