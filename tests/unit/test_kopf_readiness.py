"""kopf's operator-wide readiness gate after a watcher of an indexed resource stops before its
first listing (controllers/kopf_readiness.py): kopf's own orchestration spawns the watcher (the
resource revised in), then terminates it (revised out, as a discovery read that lags does); the
real watcher and worker are stood in for by ones that never list and never finish."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.structs.references import Insights, Resource
from kopf._core.engines import peering
from kopf._core.reactor import orchestration, queueing

from ringmaster.controllers import kopf_readiness

WORKLOADS = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "workloads",
    kind="Workload",
    namespaced=True,
    verbs=frozenset({"list", "watch"}),
)


async def never_lists(**_: Any) -> None:
    """A watcher whose first listing never ends (the API answers 429 while it initialises)."""
    await asyncio.Event().wait()


async def processor(**_: Any) -> None:
    return None


@pytest.fixture
def kopf_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """kopf's queueing module with the stand-in watcher; both names restored afterwards."""
    monkeypatch.setattr(queueing, "watcher", never_lists)
    monkeypatch.setattr(queueing, "worker", queueing.worker)
    yield


async def spawn_then_revise_out(insights: Insights) -> aiotoggles.ToggleSet:
    ensemble = orchestration.Ensemble(
        peering_missing=await aiotoggles.ToggleSet(any).make_toggle(),
        operator_paused=aiotoggles.ToggleSet(any),
        operator_indexed=aiotoggles.ToggleSet(all),
    )
    settings = kopf.OperatorSettings()
    identity = peering.Identity("test")

    async def adjust() -> None:
        """One pass of kopf's orchestrator over the insights as they stand."""
        await orchestration.adjust_tasks(
            processor=processor,
            insights=insights,
            settings=settings,
            identity=identity,
            ensemble=ensemble,
        )

    insights.namespaces.add(None)
    insights.indexed_resources.add(WORKLOADS)
    insights.watched_resources.add(WORKLOADS)
    await adjust()
    assert ensemble.watcher_tasks and not ensemble.operator_indexed.is_on()
    # A discovery read that does not list Workloads yet: the resource is revised out.
    insights.indexed_resources.discard(WORKLOADS)
    insights.watched_resources.discard(WORKLOADS)
    await adjust()
    await asyncio.sleep(0)
    assert not ensemble.watcher_tasks
    return ensemble.operator_indexed


def test_kopf_alone_keeps_a_stopped_watchers_toggle_and_holds_every_handler(
    kopf_modules: None,
) -> None:
    """The defect the module works around (if kopf fixes it, this fails: drop the workaround)."""
    indexed = asyncio.run(spawn_then_revise_out(Insights()))
    assert not indexed.is_on()
    assert [t.name for t in indexed] == [f"{WORKLOADS}@None"]


def test_a_stopped_watcher_drops_its_toggle_once_installed(kopf_modules: None) -> None:
    kopf_readiness.install()
    assert getattr(queueing.watcher, "_ringmaster_drops_its_toggle", False)
    indexed = asyncio.run(spawn_then_revise_out(Insights()))
    assert indexed.is_on() and len(indexed) == 0


def test_install_wraps_once(kopf_modules: None) -> None:
    kopf_readiness.install()
    watcher, worker = queueing.watcher, queueing.worker
    kopf_readiness.install()
    assert (queueing.watcher, queueing.worker) == (watcher, worker)


def test_a_cancelled_worker_drops_the_toggle_of_its_object() -> None:
    """An object met before the operator was first ready holds readiness until its worker has
    indexed it; a worker cancelled first (its watcher stopped) drops it all the same."""

    async def scenario() -> tuple[bool, bool]:
        indexed = aiotoggles.ToggleSet(all)
        toggle = await indexed.make_toggle(name="an object")
        started = asyncio.Event()

        async def waits(**_: Any) -> None:
            started.set()
            await asyncio.Event().wait()

        task = asyncio.create_task(
            kopf_readiness.releasing(waits)(operator_indexed=indexed, resource_indexed=toggle)
        )
        await started.wait()
        before = indexed.is_on()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return before, indexed.is_on()

    assert asyncio.run(scenario()) == (False, True)


def test_a_worker_that_finishes_drops_nothing_twice() -> None:
    """Processing drops the toggle after indexing; the wrapper's drop after it changes nothing,
    and another object's toggle stays."""

    async def scenario() -> list[str | None]:
        indexed = aiotoggles.ToggleSet(all)
        mine = await indexed.make_toggle(name="mine")
        await indexed.make_toggle(name="another object")

        async def processes(
            operator_indexed: aiotoggles.ToggleSet, resource_indexed: aiotoggles.Toggle
        ) -> None:
            await operator_indexed.drop_toggle(resource_indexed)

        await kopf_readiness.releasing(processes)(operator_indexed=indexed, resource_indexed=mine)
        return [t.name for t in indexed]

    assert asyncio.run(scenario()) == ["another object"]


def test_kopfs_watcher_and_worker_still_take_the_toggles_the_wrapper_passes():
    """The wrapper passes ``operator_indexed`` and ``resource_indexed`` by name to kopf's own
    watcher and worker (kopf>=1.37 in pyproject): a kopf that renames them fails here, not in a
    running operator."""
    import inspect

    for original in (queueing.watcher, queueing.worker):
        original = getattr(original, "__wrapped__", original)
        params = inspect.signature(original).parameters
        for name in ("operator_indexed", "resource_indexed"):
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (original, name)
