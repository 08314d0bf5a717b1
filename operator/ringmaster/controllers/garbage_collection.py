"""CPython's cyclic garbage collector, tuned for a process fed by watch streams.

With CPython's default thresholds (700, 10, 10) the collector took 19% of the operator's CPU in
the scale bench (4.4 of 23.7 s at 400 hosts and 100 gangs, docs/performance.md): a watch event's
decoded body survives the young collections while kopf queues it, and each full collection walked
every object the process holds (modules, models, numpy, the indexes), 0.2 s each. Reference
counting frees nearly everything the operator drops; the collector is only for cycles, which it
makes few of, so it can run far less often:

- ``gc.freeze()`` once everything is imported moves those objects to a permanent generation that
  no collection walks;
- a young-generation threshold of 50,000 allocations instead of 700, and 20 instead of 10 for the
  older two, make collections rarer.

Same bench after (with the batched pod events of trainingjob.py): 1.6 of 15.7 s (young
collections 203 instead of 1273, middle 17 instead of 115, full 1 instead of 10);
``ringmaster_gc_pause_seconds_total`` keeps it in view.
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
