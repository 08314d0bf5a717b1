"""Objects this process has just created that its watch has not shown yet (client-go's
ControllerExpectations, as the ReplicaSet and Job controllers keep them).

An admitted gang's reconcile creates its pods (and, once they are bound, its Service); the next
look at the job (its own pods' events bring one at once) reads the pods from kopf's index, which
lags the creates by a watch round trip, and would create the same objects again. The scale
bench counted 251 such POSTs refused with 409 among the 651 pod creates of 50 gangs, and 95
Service POSTs: 40% more writes in the API server's queue, in front of the next gang's pods. A
creation is expected until the watch shows the object (``observed``: from then on the index
answers) or EXPECT_SECONDS have passed, so a pod lost before any watch event showed it is
created again after that. What no watch shows (the Service) stays expected while its owner
lives.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from ringmaster.manifests.naming import ATTEMPT_ANNOTATION

# Longer than a watch event takes to arrive under load: at 2000 hosts the watch ran more than
# 10 s behind in the burst, and 266 pods were POSTed a second time after a 10 s expectation ran
# out. Seen pods end their expectation at once, so this only bounds how long a pod lost before
# any watch event showed it waits to be created again.
EXPECT_SECONDS = 60.0


# Kinds no watch of the operator shows: created once, they stay expected until their owner is
# forgotten (they go with it, through their owner reference), so a look never POSTs them again.
UNWATCHED = frozenset({"Service"})


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """Kind, name and attempt: a gang's next attempt reuses its pod names."""
    metadata = obj.get("metadata") or {}
    attempt = (metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    return (str(obj.get("kind")), str(metadata.get("name")), attempt)


class CreateExpectations:
    def __init__(
        self, ttl: float = EXPECT_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._created: dict[Hashable, dict[tuple[str, str, str | None], float]] = {}

    def still_to_create(
        self, owner: Hashable, objects: Iterable[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The objects not created by this process in the last ``ttl`` seconds."""
        now = self.clock()
        created = self._created.get(owner)
        if created:
            for key in [
                k for k, at in created.items() if k[0] not in UNWATCHED and now - at >= self.ttl
            ]:
                del created[key]
            if not created:
                del self._created[owner]
        if not created:
            return list(objects)
        return [obj for obj in objects if identity(obj) not in created]

    def created(self, owner: Hashable, objects: Iterable[dict[str, Any]]) -> None:
        """They exist now (created, or found existing)."""
        now = self.clock()
        mine = self._created.setdefault(owner, {})
        for obj in objects:
            mine[identity(obj)] = now

    def observed(self, owner: Hashable, obj: Mapping[str, Any]) -> None:
        """The watch shows it: the index answers for it from now on."""
        created = self._created.get(owner)
        if created is not None:
            created.pop(identity(obj), None)
            if not created:
                del self._created[owner]

    def forget(self, owner: Hashable) -> None:
        self._created.pop(owner, None)
