"""What every Ringmaster controller does the same way around its pure decision function.

kopf watches feed indexes; watch events put keys on a work queue; a worker reconciles one key at
a time from the indexes, writes status with the kubernetes client and posts Events. Subclasses
name their kind and implement `reconcile_object`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar, cast

import kopf

from ringmaster import metrics
from ringmaster.controllers.kubeapi import KubeApi, namespace_terminating
from ringmaster.controllers.reachability import REACHABILITY
from ringmaster.controllers.reporting import Event
from ringmaster.controllers.workqueue import WorkQueue

Key = tuple[str, str]
# How long our last status write may run ahead of the watch.
WRITTEN_SECONDS = 30.0
# Objects that are not finished are looked at again this often, even without an event of theirs.
RESYNC_SECONDS = 5.0

# Children get their owner through kopf.append_owner_reference, not kopf.adopt: adopt also copies
# the owner's labels onto the child and its pod template, and a label such as
# ringmaster.dev/trainingjob on a job's reducers would make them look like its workers.


def as_body(snapshot: dict[str, Any]) -> kopf.Body:
    """kopf's posting and adoption need only apiVersion, kind and metadata, which a snapshot has."""
    return cast(kopf.Body, snapshot)


def snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """A plain, detached copy of a kopf body (the watch replaces bodies; indexes keep ours)."""
    copy: dict[str, Any] = json.loads(json.dumps(dict(body), default=str))
    return copy


def merge_patch(current: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``new``: ``new`` with an
    explicit null for every key it no longer has, at every depth. A status is written with
    None fields left out, and a merge patch leaves an absent key as it was: without the nulls a
    cleared field (a suspended job's ``admission``) stays on the server and is read back."""
    patch: dict[str, Any] = dict(new)
    for key, before in current.items():
        if key not in new:
            patch[key] = None
        elif isinstance(before, Mapping) and isinstance(new[key], Mapping):
            patch[key] = merge_patch(before, new[key])
    return patch


class Controller:
    kind: ClassVar[str]
    plural: ClassVar[str]
    index: ClassVar[str]  # the kopf index holding the kind's objects by (namespace, name)
    workers: ClassVar[int] = 4  # keys reconciled at once (each key by one worker at a time)

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.queue = WorkQueue(
            self.reconcile,
            workers=self.workers,
            name=self.kind,
            contact=lambda: api.contact,
            unreachable=lambda key, error: REACHABILITY.requeued(self.kind, key, error),
        )
        REACHABILITY.register(self.kind, self.queue.add)
        self.indexes: Mapping[str, Any] = {}
        # The status we last wrote and the resourceVersion our write produced. The operator is
        # the only writer of status, so until the watch brings that version back, our write is
        # newer than what the index holds; deciding from the index would repeat Events.
        self.written: dict[Key, tuple[str, dict[str, Any], float]] = {}
        self.resync_task: asyncio.Task[None] | None = None

    def bind(self, kwargs: Mapping[str, Any]) -> None:
        """On the first watch event: keep references to kopf's live indexes (handed to every
        handler as keyword args) and start the workers. Started from a handler, not from the
        startup activity, so they inherit the context that kopf.event() posts Events through."""
        if not self.indexes:
            self.indexes = {k: v for k, v in kwargs.items() if k.startswith("ringmaster_")}
            self.queue.start()
            self.resync_task = asyncio.create_task(self.resync())

    async def stop(self) -> None:
        if self.resync_task is not None:
            self.resync_task.cancel()
        await self.queue.stop()

    def objects(self) -> Any:
        return self.indexes[self.index]

    async def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        store = self.objects().get((namespace, name))
        if not store:
            self.written.pop((namespace, name), None)
            self.forget((namespace, name))
            return None
        body = next(iter(store))
        with metrics.RECONCILE_SECONDS.labels(self.kind).time():
            try:
                return await self.reconcile_object(
                    namespace, name, body, self.current_status((namespace, name), body)
                )
            except Exception as error:
                if namespace_terminating(error):
                    # The namespace refuses new objects: it is going, and the object with it.
                    return None
                metrics.RECONCILE_ERRORS.labels(self.kind, type(error).__name__).inc()
                raise

    async def reconcile_object(
        self, namespace: str, name: str, body: dict[str, Any], status: dict[str, Any]
    ) -> float | None:
        raise NotImplementedError

    def forget(self, key: Key) -> None:
        """The object is gone: drop what the controller remembers of it."""

    def current_status(self, key: Key, body: dict[str, Any]) -> dict[str, Any]:
        written = self.written.get(key)
        if written is None:
            return body.get("status") or {}
        version, status, since = written
        if version == body["metadata"].get("resourceVersion") or (
            time.monotonic() - since > WRITTEN_SECONDS
        ):
            del self.written[key]  # the watch has caught up (or a relist skipped our version)
            return body.get("status") or {}
        return status

    async def write_status(
        self, namespace: str, name: str, current: dict[str, Any], new: dict[str, Any]
    ) -> None:
        if new == current:
            return
        version = await self.api.patch_status(
            self.plural, namespace, name, merge_patch(current, new)
        )
        if version is not None:
            self.written[(namespace, name)] = (version, new, time.monotonic())

    def object_changed(self, key: Key, version: str | None) -> None:
        """A watch event of the kind: reconcile the object, unless the event only brings back
        the status our own last write produced (the reconcile that wrote it decided from
        everything that version holds; any other change has another version)."""
        written = self.written.get(key)
        if written is not None and version is not None and written[0] == version:
            return
        self.queue.add(key)

    def post(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        kopf.event(as_body(body), type=type_, reason=reason, message=message)

    async def announce(self, body: dict[str, Any], events: Sequence[Event]) -> None:
        """Post Events that announce what the status is about to record, before that status is
        written. kopf.event() (``post``) only queues an Event: a process killed just after its
        status write lost the Event, and the status, once written, never asks for it again (the
        chaos test saw jobs finish without their Admitted Event). Posted first, a kill in
        between repeats an Event at worst, and never loses one. A look's Events (a new job's
        StrategyChosen and Admitted) go out together: one round trip before the status, not one
        each; each takes its time before the first is sent, so their times keep their order."""
        await asyncio.gather(
            *(
                self.api.post_event_about(
                    body, event.type, event.reason, event.message, name=event.name
                )
                for event in events
            )
        )

    def is_settled(self, body: dict[str, Any]) -> bool:
        """Objects that need no periodic look (finished jobs)."""
        return False

    def resync_filter(self) -> Callable[[dict[str, Any]], bool]:
        """Built once per resync tick: which unsettled objects are worth a look now."""
        return lambda body: True

    async def resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            if self.queue.outage.ongoing:
                continue  # the API is away: the backoff of the keys that failed paces the retries
            worth_a_look = self.resync_filter()
            for key, store in self.objects().items():
                bodies = list(store)
                if any(not self.is_settled(b) and worth_a_look(b) for b in bodies):
                    self.queue.add(key)
            self.after_resync()

    def after_resync(self) -> None:
        """Hook: refresh gauges."""
