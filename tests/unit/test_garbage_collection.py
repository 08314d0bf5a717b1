"""The operator's collector settings (controllers/garbage_collection.py)."""

from __future__ import annotations

import gc

from prometheus_client import REGISTRY

from ringmaster.controllers import garbage_collection


def paused(generation: int) -> float:
    value = REGISTRY.get_sample_value(
        "ringmaster_gc_pause_seconds_total", {"generation": str(generation)}
    )
    return value or 0.0


def test_tuning_freezes_what_exists_raises_the_thresholds_and_times_each_collection():
    thresholds = gc.get_threshold()
    try:
        garbage_collection.tune()
        assert gc.get_threshold() == garbage_collection.THRESHOLDS
        assert gc.get_freeze_count() > 1000  # every module imported so far
        before = paused(2)
        gc.collect()
        assert paused(2) > before
        garbage_collection.tune()  # twice: still one callback
        assert gc.callbacks.count(garbage_collection._time_collections) == 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        if garbage_collection._time_collections in gc.callbacks:
            gc.callbacks.remove(garbage_collection._time_collections)
