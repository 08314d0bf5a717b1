"""The pods at Ringmaster's admission gate, as the admission pass decides them: serving replicas
and PoolProfile measurement pods let through (Grant: the gate lifted, pinned to the host), held
(Hold: an Event on the pod says why, once per message), or, for a measurement pod, made to give
its host back to a gang (Yield: deleted at once, an Event on its PoolProfile says why).

The API calls run in the background: a cycle decides for every pod at once and never waits on
the API server; the snapshot takes a granted pod's room at once (ClusterSnapshot.grant).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from ringmaster.admission.cycle import Grant, Hold, ServingVerdict
from ringmaster.admission.profiles import Yield
from ringmaster.admission.snapshot import ClusterSnapshot, Key
from ringmaster.api.base import API_VERSION
from ringmaster.controllers.kubeapi import KubeApi
from ringmaster.manifests.inference import gate_lifted
from ringmaster.manifests.naming import ADMISSION_GATE

log = logging.getLogger(__name__)

# A pod whose gate could not be lifted keeps the room of its grant this long before it is gated
# again and granted anew (doubling per failure): the API refused or did not answer, and granting
# it again at once would retry at the cycle's pace.
GATE_RETRY_SECONDS = (1.0, 30.0)


class AdmissionGate:
    def __init__(self, api: KubeApi, snapshot: ClusterSnapshot, wake: Callable[[], None]) -> None:
        self.api = api
        self.snapshot = snapshot
        self.wake = wake
        self._held_pods: dict[Key, str] = {}  # pods at the gate -> the Hold last posted
        self._failures: dict[Key, int] = {}
        self._yielded: set[Key] = set()  # measurement pods being deleted for a gang
        self._tasks: set[asyncio.Task[None]] = set()

    def serve(self, verdict: ServingVerdict) -> None:
        """Granted: the room is taken at once and the gate lifted in the background; held: an
        Event on the pod says why (once per message); yielded: the pod is deleted."""
        if isinstance(verdict, Yield):
            if verdict.pod not in self._yielded:
                self._yielded.add(verdict.pod)
                self._background(self._give_back(verdict))
            return
        if isinstance(verdict, Hold):
            if self._held_pods.get(verdict.pod) != verdict.message:
                self._held_pods[verdict.pod] = verdict.message
                self._background(self._post_hold(verdict))
            return
        self._held_pods.pop(verdict.pod, None)
        self.snapshot.grant(verdict.pod, verdict.host)
        self._background(self._lift_gate(verdict))

    def forget(self, pod: Key) -> None:
        """The pod is gone."""
        self._held_pods.pop(pod, None)
        self._failures.pop(pod, None)
        self._yielded.discard(pod)

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _background(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _give_back(self, verdict: Yield) -> None:
        namespace, name = verdict.pod
        try:
            await self.api.delete_object(namespace, "Pod", name, grace_seconds=0)
        except Exception as error:  # the next cycle decides the same and tries again
            self._yielded.discard(verdict.pod)
            log.warning("could not delete measurement pod %s/%s: %s", namespace, name, error)
            return
        profile = {
            "apiVersion": API_VERSION,
            "kind": "PoolProfile",
            "metadata": {"namespace": verdict.profile[0], "name": verdict.profile[1]},
        }
        try:
            await self.api.post_event_about(
                profile, "Normal", "YieldedToGang", f"pod {name} {verdict.message}"
            )
        except Exception as error:  # a report, not state
            log.debug("could not post the yield of pod %s/%s: %s", namespace, name, error)

    async def _lift_gate(self, grant: Grant) -> None:
        namespace, name = grant.pod
        try:
            await self.api.patch_object(namespace, "Pod", name, gate_lifted(grant.host))
            self._failures.pop(grant.pod, None)
            return
        except ApiException as error:
            if error.status == 404:
                return  # gone: its DELETED event takes it out of the snapshot
            if error.status in (409, 422) and await self._already_through(grant):
                # An earlier grant lifted it (pinned elsewhere: a gated pod's affinity cannot
                # change once the gate is gone); its next watch event tells the snapshot.
                self._failures.pop(grant.pod, None)
                return
            log.warning("could not lift the admission gate of pod %s/%s: %s", *grant.pod, error)
        except Exception:
            log.exception("could not lift the admission gate of pod %s/%s", *grant.pod)
        failures = self._failures.get(grant.pod, 0) + 1
        self._failures[grant.pod] = failures
        first, most = GATE_RETRY_SECONDS
        await asyncio.sleep(min(most, first * 2 ** (failures - 1)))
        self.snapshot.ungrant(grant.pod)
        self.wake()

    async def _already_through(self, grant: Grant) -> bool:
        """Whether the pod no longer carries the admission gate (or is gone)."""
        try:
            pod = await self.api.get_pod(*grant.pod)
        except Exception:  # not knowing is not through: the caller retries
            return False
        gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
        return pod is None or all(g.get("name") != ADMISSION_GATE for g in gates)

    async def _post_hold(self, hold: Hold) -> None:
        namespace, name = hold.pod
        metadata = {"namespace": namespace, "name": name}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
        try:
            await self.api.post_event_about(pod, "Normal", "WaitingForRoom", hold.message)
        except Exception as error:  # a report, not state: the next Hold posts again
            self._held_pods.pop(hold.pod, None)
            log.debug("could not post the hold of pod %s/%s: %s", namespace, name, error)
