"""CPython's cyclic garbage collector, tuned for a process fed by watch streams.

With CPython's default thresholds (700, 10, 10) the collector took 19% of the operator's CPU in
the scale bench (4.4 of 23.7 s at 400 hosts and 100 gangs, docs/performance.md): a watch event's
decoded body survives the young collections while kopf queues it, so they find survivors to move
up, and each full collection walks every object the process holds (modules, models, numpy, the
indexes). Reference counting frees nearly everything the operator drops; the collector is only
for cycles, which it makes few of, so it can run far less often:

- ``gc.freeze()`` once everything is imported moves those objects to a permanent generation that
  no collection walks (the approach CPython's documentation gives for long-lived processes);
- a young-generation threshold of 50,000 allocations instead of 700, and full collections after
  20 middle ones instead of 10, make collections rarer; each costs about what it did, since what
  dies young is freed by reference counting before any collection sees it.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from ringmaster import metrics

THRESHOLDS = (50_000, 20, 20)

_started: list[float] = [0.0]


def _time_collections(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        seconds = time.perf_counter() - _started[0]
        metrics.GC_PAUSE_SECONDS.labels(str(info["generation"])).inc(seconds)


def tune() -> None:
    """Freeze what exists now, raise the thresholds, and count the collector's time. Call once,
    after the imports, before the watches start."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    if _time_collections not in gc.callbacks:
        gc.callbacks.append(_time_collections)
