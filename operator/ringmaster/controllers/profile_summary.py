"""A finished PoolProfile run summarized for status (profiling/aggregate.py), and the profiled
pools installed for every plan (engine/profiled.py, planning/catalog.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringmaster.controllers.catalog import catalog_changed
from ringmaster.controllers.profile_lifecycle import PoolFacts
from ringmaster.engine.ceilings import ceilings_for
from ringmaster.engine.profiled import HBM_KEY, REFERENCE_KEY
from ringmaster.planning import active_catalog
from ringmaster.planning.catalog import install_pool_profiles
from ringmaster.profiling.aggregate import (
    ProfileError,
    flag_reasons,
    measurement_from_status,
    summarize,
    summary_json,
)
from ringmaster.profiling.results import HostResult

log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass(frozen=True)
class RunSummary:
    flagged: dict[str, str]  # node -> why, one line
    measured: dict[str, Any]  # status.measured
    sustained_bf16: float | None  # the pool's median host, TFLOP/s
    catalog_sustained_bf16: float | None
    headline: dict[str, float]  # the metrics' measurements (HEADLINE)


def summarize_run(
    pool: PoolFacts, results: Mapping[str, HostResult], threshold: float
) -> RunSummary:
    summary = summarize(results, threshold)
    try:
        ceilings = ceilings_for(active_catalog().accelerator(pool.accelerator or ""))
    except LookupError:  # an accelerator the catalog lacks: measured, nothing to compare with
        ceilings = None
    catalog = ceilings.sustained_flops.get("bf16") if ceilings else None
    return RunSummary(
        flagged=flag_reasons(summary),
        measured=summary_json(summary, ceilings),
        sustained_bf16=_round(summary.sustained_tflops.get("bf16")),
        catalog_sustained_bf16=_round(catalog / 1e12) if catalog else None,
        headline={k: v for k, v in summary.medians().items() if _headline(k)},
    )


def _headline(key: str) -> bool:
    """The measurements exported as metrics: the pool's rates, not its per-shape points (their
    label values would be unbounded)."""
    return key.startswith(("gemm.sustained.", "gemm.burst.")) or key in (HBM_KEY, REFERENCE_KEY)


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def install_measurements(profiles: Mapping[Key, tuple[str, Mapping[str, Any]]]) -> None:
    """Plan every profiled pool on its profile (``profiles``: PoolProfile -> (pool, status));
    when that changes anything, every TrainingJob and InferenceEndpoint is planned again."""
    measurements = []
    for (namespace, name), (pool, status) in sorted(profiles.items()):
        try:
            where = f"PoolProfile {namespace}/{name} status"
            measurements.append(measurement_from_status(pool, status, where=where))
        except ProfileError as error:
            log.warning("not planning on %s/%s: %s", namespace, name, error)
    if install_pool_profiles(measurements):
        catalog_changed()
