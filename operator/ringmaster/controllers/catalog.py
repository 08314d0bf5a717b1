"""The operator's hardware catalog, kept in step with its catalog ConfigMap while it runs.

``ringmaster run --catalog-configmap NAMESPACE/NAME`` (the chart always sets it): the operator
reads that one ConfigMap (key ``catalog.yaml``, the format of planning/catalog.py) at start and
then every ``POLL_SECONDS``, and applies a new version with no restart: over the base catalog
(built-in, plus the file $RINGMASTER_CATALOG if set), installed for every plan, and every
TrainingJob and InferenceEndpoint is looked at again, so a job waiting with ``UnknownAccelerator``
is admitted once its accelerator is defined. A deleted ConfigMap leaves the base.

A version that does not validate changes nothing: the last good catalog stays in use, the error
is logged and posted as a Warning Event ``CatalogRejected`` on the ConfigMap (once per version),
and the messages of jobs waiting on an unknown accelerator say the catalog was rejected. A bad
ConfigMap never stops the operator.

Polling one object by name, not a watch: the chart grants ``get`` on that name only (a watch
through kopf would need every ConfigMap of the cluster), and one GET every few seconds costs
the API server nothing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.controllers.outage import is_unreachable
from ringmaster.planning import active_catalog
from ringmaster.planning.catalog import (
    Catalog,
    CatalogError,
    apply_catalog,
    hardware_problem,
    install_catalog,
    parse_catalog,
    replica_hardware_problem,
)

log = logging.getLogger(__name__)

CATALOG_CONFIGMAP_ENV = "RINGMASTER_CATALOG_CONFIGMAP"
CATALOG_KEY = "catalog.yaml"
POLL_SECONDS = 5.0
REJECTED = "CatalogRejected"


@dataclass(frozen=True)
class Rejection:
    where: str  # "ringmaster-system/ringmaster-catalog"
    error: str


@dataclass
class CatalogState:
    """What the operator knows of its ConfigMap; pure (the shell below reads and posts)."""

    base: Catalog
    where: str
    catalog: Catalog
    version: str | None = None  # resourceVersion applied or rejected last; "" while absent
    rejection: Rejection | None = None

    def observe(self, configmap: Mapping[str, Any] | None) -> bool:
        """Take in the ConfigMap as read now (None: it does not exist). True when this is a
        version not seen before (installed, or rejected: ``rejection`` says which)."""
        metadata = (configmap or {}).get("metadata") or {}
        version = str(metadata.get("resourceVersion") or "") if configmap else ""
        if version == self.version:
            return False
        self.version = version
        if configmap is None:
            self.catalog, self.rejection = self.base, None
            return True
        text = ((configmap.get("data") or {}).get(CATALOG_KEY)) or ""
        try:
            where = f"ConfigMap {self.where} key {CATALOG_KEY}"
            self.catalog = apply_catalog(self.base, parse_catalog(text, where=where), where=where)
            self.rejection = None
        except CatalogError as error:
            self.rejection = Rejection(self.where, str(error))
        return True


@dataclass
class CatalogWatcher:
    """The thin shell: read, observe, install, tell the controllers, post the Event."""

    api: KubeApi
    namespace: str
    name: str
    state: CatalogState
    listeners: list[Callable[[], None]] = field(default_factory=list)
    _unreachable: bool = False

    async def poll(self) -> None:
        try:
            configmap = await self.api.get_config_map(self.namespace, self.name)
        except Exception as error:
            if not self._unreachable:
                level = logging.WARNING if is_unreachable(error) else logging.ERROR
                log.log(level, "catalog ConfigMap %s: cannot read it: %s", self.state.where, error)
            self._unreachable = True
            return
        self._unreachable = False
        if not self.state.observe(configmap):
            return
        rejection = self.state.rejection
        if rejection is not None:
            log.error("%s; the last good catalog stays in use", rejection.error)
            if configmap is not None:
                await self._post(configmap, "Warning", REJECTED, rejection.error)
            return
        install_catalog(self.state.catalog)
        log.info(
            "catalog ConfigMap %s %s: %d accelerators, %d machine types",
            self.state.where,
            "applied" if configmap else "absent, built-in catalog",
            len(self.state.catalog.accelerators),
            len(self.state.catalog.machines),
        )
        for listener in self.listeners:
            listener()

    async def _post(self, configmap: Mapping[str, Any], type_: str, reason: str, msg: str) -> None:
        metadata = configmap.get("metadata") or {}
        now = dt.datetime.now(dt.UTC).isoformat()
        event = {
            "metadata": {"generateName": f"{self.name}."},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": self.name,
                "namespace": self.namespace,
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": msg[:1024],
            "source": {"component": "ringmaster"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.api.post_event(self.namespace, event)
        except Exception as error:  # an Event is a courtesy: the log line above has it all
            log.warning("catalog ConfigMap %s: cannot post an Event: %s", self.state.where, error)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.poll()
            except Exception:
                log.exception("catalog ConfigMap %s: poll failed", self.state.where)


WATCHER: CatalogWatcher | None = None
_TASK: asyncio.Task[None] | None = None
# Callbacks run after a new catalog is installed (the controllers' "look at everything again").
_LISTENERS: list[Callable[[], None]] = []


def on_catalog_change(callback: Callable[[], None]) -> None:
    _LISTENERS.append(callback)


def catalog_changed() -> None:
    """What plans rest on changed outside the ConfigMap (a PoolProfile's measurement): every
    listener looks at its objects again."""
    for listener in _LISTENERS:
        listener()


def parse_reference(value: str) -> tuple[str, str]:
    """ "NAMESPACE/NAME" -> (namespace, name)."""
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"expected NAMESPACE/NAME for the catalog ConfigMap, got {value!r}")
    return namespace, name


def job_hardware_problem(
    accelerator: str, per_host: int, topology: str | None = None
) -> tuple[str, str] | None:
    """Why the operator's current catalog cannot place this hardware (reason, message), with a
    word on a rejected ConfigMap when there is one; None when it can."""
    problem = hardware_problem(active_catalog(), accelerator, per_host, topology)
    rejection = WATCHER.state.rejection if WATCHER is not None else None
    if problem is None or rejection is None:
        return problem
    return problem[0], (
        f"{problem[1]}. The catalog ConfigMap {rejection.where} was rejected ({rejection.error}); "
        "the last good catalog is in use"
    )


def serving_hardware_problem(
    accelerator: str,
    per_replica: int,
    hosts: int | None = None,
    machine_type: str | None = None,
) -> tuple[str, str] | None:
    """As :func:`job_hardware_problem`, for a serving replica that may span hosts (on the
    machine type the endpoint names, if any)."""
    problem = replica_hardware_problem(
        active_catalog(), accelerator, per_replica, hosts, machine_type
    )
    rejection = WATCHER.state.rejection if WATCHER is not None else None
    if problem is None or rejection is None:
        return problem
    return problem[0], (
        f"{problem[1]}. The catalog ConfigMap {rejection.where} was rejected ({rejection.error}); "
        "the last good catalog is in use"
    )


async def start(reference: str) -> None:
    """Read the ConfigMap once (before the controllers look at any job), then keep polling."""
    global WATCHER, _TASK
    namespace, name = parse_reference(reference)
    base = active_catalog()
    state = CatalogState(base=base, where=f"{namespace}/{name}", catalog=base)
    WATCHER = CatalogWatcher(KubeApi(), namespace, name, state, _LISTENERS)
    await WATCHER.poll()
    _TASK = asyncio.create_task(WATCHER.run())


@kopf.on.startup()
async def start_catalog_watcher(**_: Any) -> None:
    reference = os.environ.get(CATALOG_CONFIGMAP_ENV)
    if reference:
        await start(reference)


@kopf.on.cleanup()
async def stop_catalog_watcher(**_: Any) -> None:
    global WATCHER
    if _TASK is not None:
        _TASK.cancel()
    WATCHER = None
    install_catalog(None)
