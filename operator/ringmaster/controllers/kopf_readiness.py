"""kopf's readiness gate, kept from sticking shut when a watcher stops before its first listing.

kopf (1.45) holds every handler until every indexed resource is listed: each watcher of an
indexed resource adds a toggle, off, to the operator-wide ``operator_indexed`` set, and drops it
once its listing is over (queueing.watcher, on ``Bookmark.LISTED``); each object a watcher meets
before the operator was first ready gets one too, dropped once its worker has indexed it
(processing.process_resource_event). The handlers of an object wait until the whole set is on.

A watcher stopped before its listing is over never drops its toggle: orchestration's
terminate_redundancies cancels the task and forgets the key, not the toggle. That happens when a
group's resources are revised out and back in, which CRDs installed while the operator runs
cause: kopf re-reads the group's discovery once per CRD event, concurrently, and a read taken
before the API listed a resource can land after one that listed it (the discovery lag,
kueue_workloads.DiscoveryFollower). From then on the set is never on again, and every object
that is new to a watcher started after that (every Workload of a Kueue installed while the
operator ran) is indexed once and never handled: its index entry stays at its first version and
no handler wakes the job it concerns. The CI runs that timed out in tests/e2e/test_kueue.py saw
exactly that: a Workload that Kueue admitted in 0.3 s, and a job that waited for Kueue to
consider it for 90 s.

:func:`install` wraps kopf's watcher and worker so that each drops its own toggle when it ends,
however it ends (dropping is idempotent: ToggleSet.drop_toggle discards). A watcher that is
replaced starts with a new toggle of its own, so readiness still waits for the new listing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kopf._cogs.aiokits.aiotoggles import Toggle, ToggleSet
from kopf._core.reactor import queueing

_WRAPPED = "_ringmaster_drops_its_toggle"


def releasing(original: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """``original`` (kopf's watcher or worker), dropping its readiness toggle when it ends."""
    if getattr(original, _WRAPPED, False):
        return original

    async def wrapped(
        *,
        operator_indexed: ToggleSet | None = None,
        resource_indexed: Toggle | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            await original(
                operator_indexed=operator_indexed, resource_indexed=resource_indexed, **kwargs
            )
        finally:
            if operator_indexed is not None and resource_indexed is not None:
                await operator_indexed.drop_toggle(resource_indexed)

    setattr(wrapped, _WRAPPED, True)
    wrapped.__name__ = getattr(original, "__name__", "wrapped")
    wrapped.__doc__ = original.__doc__
    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapped


def install() -> None:
    """Wrap kopf's watcher and worker (once; before kopf.run). orchestration calls
    ``queueing.watcher`` and the watcher calls ``worker`` through the module's namespace, so
    both pick the wrapped ones up."""
    queueing.watcher = releasing(queueing.watcher)  # type: ignore[assignment]
    queueing.worker = releasing(queueing.worker)  # type: ignore[assignment]
