"""A pool's results together: the median of every measurement, the hosts that fall short of it,
and the comparison with the catalog (pure: no Kubernetes, no I/O).

- :func:`summarize`: HostResults (one per host, profiling/results.py) -> :class:`PoolSummary`.
- :func:`summary_json`: the summary as ``status.measured`` of a PoolProfile (camelCase, numbers
  to 4 significant digits), each median beside the catalog's figure for the same quantity.
- :func:`measurement_from_status` / :func:`measurement_from_object`: a PoolProfile's status (or
  the whole object, as ``kubectl get poolprofile -o yaml`` prints it) back into the
  :class:`~ringmaster.engine.profiled.PoolMeasurement` the engine plans the pool on: the one
  parser, used by the controller and by ``ringmaster plan --profile``.
- :func:`measurement_from_results`: HostResults straight into a PoolMeasurement (``ringmaster
  plan --profile results.json --profile-machine-type ...``).

**Flagging** (docs/pool-profiles.md, "Hosts that fall short"): a host is flagged on a measurement
when its figure is below the pool's median of that figure by more than ``threshold`` (default
DEGRADED_THRESHOLD, 10 %). Each per-host figure is already a median of several points, never one
row: the sustained and burst GEMM rate (medians of many calls the payload takes), the HBM copy
rate, the reference step's tokens/s, and for the GEMM shapes and each attention kernel and
direction the host's median, over the shapes, of its rate over the pool's median at that shape
(``gemm.bf16``, ``attention.flash2.forward``): the team's own H100 measurements spread 1.4-1.6 %
run to run on GEMMs at the median, but 22 % on single rows when the power cap oscillates
(calibration/measured/h100-sxm-ops.yaml, ``method.caveats``). Collectives are the pool's, not a
host's, and flag no one. A median needs MIN_HOSTS_TO_FLAG hosts: with two, the median is their
mean, which a slow host pulls halfway towards itself, so neither is 10 % below it until one is 19 %
below the other; a pool (or a measurement) with fewer hosts flags no one and the summary says so.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from statistics import median
from typing import Any

from ringmaster.engine.ceilings import H100_COPY_GBPS, Ceilings
from ringmaster.engine.hardware import Catalog, UnknownHardwareError
from ringmaster.engine.profiled import (
    HBM_KEY,
    REFERENCE_KEY,
    AttentionRate,
    BusRate,
    Flag,
    GemmRate,
    PoolMeasurement,
    PoolSummary,
    attention_grid_key,
    burst_key,
    gemm_grid_key,
    sustained_key,
)
from ringmaster.engine.units import TERA
from ringmaster.profiling.results import HostResult, ResultRefused, parse_result

DEGRADED_THRESHOLD = 0.10
"""A host this far below its pool's median on any measurement is flagged (the module's
docstring and docs/pool-profiles.md say why 10 %)."""
MIN_HOSTS_TO_FLAG = 3
# status.measured lists at most this many flagged (and failed) hosts, and names at most this many
# measurements per host: 256 entries of ~300 bytes stay well under etcd's 1.5 MiB per object.
MAX_STATUS_HOSTS = 256
MAX_STATUS_MEASUREMENTS = 32
API_VERSION = "ringmaster.dev/v1alpha1"
KIND = "PoolProfile"
RELATIVE = "x the pool's median per shape"
UNITS = {"gemm": "TFLOP/s", HBM_KEY: "GB/s", REFERENCE_KEY: "tokens/s"}

__all__ = [
    "DEGRADED_THRESHOLD",
    "MIN_HOSTS_TO_FLAG",
    "AttentionRate",
    "BusRate",
    "Flag",
    "GemmRate",
    "PoolMeasurement",
    "PoolSummary",
    "ProfileError",
    "flag_reasons",
    "measurement_from_object",
    "measurement_from_results",
    "measurement_from_status",
    "measurements_from_document",
    "summarize",
    "summary_json",
]


class ProfileError(ValueError):
    """A PoolProfile status or file the engine cannot plan on; the message names the field."""


# --- summarize -----------------------------------------------------------------------------------


def _median_of(values: Iterable[float]) -> float:
    return float(median(values))


def summarize(
    results: Mapping[str, HostResult], threshold: float = DEGRADED_THRESHOLD
) -> PoolSummary:
    """The pool's medians over its hosts (``results`` keyed by node), the hosts below them by
    more than ``threshold`` (with their numbers), and the hosts whose payload failed, apart."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold {threshold}: expected a fraction in (0, 1)")
    failures = {node: r.failure for node, r in sorted(results.items()) if r.failure is not None}
    hosts = {node: r for node, r in sorted(results.items()) if r.failure is None}

    # Per host first (a host that repeats a point counts once, at its own median), then the pool.
    sustained = _per_host(hosts, lambda r: r.sustained_tflops.items())
    burst = _per_host(hosts, lambda r: r.burst_tflops.items())
    gemm = _per_host(hosts, lambda r: (((g.precision, g.m, g.n, g.k), g.tflops) for g in r.gemm))
    attention = _per_host(
        hosts,
        lambda r: (
            ((a.kernel, a.direction, a.sequence, a.head_dim, a.heads), a.tflops)
            for a in r.attention
        ),
    )
    hbm = {n: r.hbm_gbps for n, r in hosts.items() if r.hbm_gbps is not None}
    reference = {
        n: r.reference_step.tokens / r.reference_step.seconds
        for n, r in hosts.items()
        if r.reference_step is not None
    }
    buses = _per_host(
        hosts,
        lambda r: (((c.op, c.bytes, c.ranks, c.hosts), c.bus_gbps) for c in r.collectives),
    )

    def pooled(per: Mapping[str, Mapping[Any, float]]) -> dict[Any, list[float]]:
        out: dict[Any, list[float]] = {}
        for values in per.values():
            for key, value in values.items():
                out.setdefault(key, []).append(value)
        return out

    gemm_pool = {k: (_median_of(v), len(v)) for k, v in pooled(gemm).items()}
    attention_pool = {k: (_median_of(v), len(v)) for k, v in pooled(attention).items()}
    parameters = Counter(
        r.reference_step.parameters for r in hosts.values() if r.reference_step is not None
    )
    summary = PoolSummary(
        hosts=len(hosts),
        nodes=tuple(hosts),
        sustained_tflops={p: _median_of(v) for p, v in sorted(pooled(sustained).items())},
        burst_tflops={p: _median_of(v) for p, v in sorted(pooled(burst).items())},
        gemm=tuple(
            GemmRate(p, m, n, k, value, count)
            for (p, m, n, k), (value, count) in sorted(gemm_pool.items())
        ),
        attention=tuple(
            AttentionRate(kernel, direction, s, d, h, value, count)
            for (kernel, direction, s, d, h), (value, count) in sorted(attention_pool.items())
        ),
        hbm_gbps=_median_of(hbm.values()) if hbm else None,
        reference_tokens_per_second=_median_of(reference.values()) if reference else None,
        reference_parameters=parameters.most_common(1)[0][0] if parameters else None,
        collectives=tuple(
            BusRate(op, b, ranks, h, _median_of(v))
            for (op, b, ranks, h), v in sorted(pooled(buses).items())
        ),
        failures=failures,
        threshold=threshold,
    )

    # The per-host figures compared: each one number per host.
    figures: dict[str, tuple[dict[str, float], str]] = {}
    for p in sorted({p for v in sustained.values() for p in v}):
        figures[sustained_key(p)] = (_column(sustained, p), UNITS["gemm"])
    for p in sorted({p for v in burst.values() for p in v}):
        figures[burst_key(p)] = (_column(burst, p), UNITS["gemm"])
    for p in sorted({key[0] for v in gemm.values() for key in v}):
        grid = _relative(gemm, gemm_pool, lambda key, p=p: key[0] == p)
        figures[gemm_grid_key(p)] = (grid, RELATIVE)
    for kernel, direction in sorted({key[:2] for v in attention.values() for key in v}):
        grid = _relative(
            attention, attention_pool, lambda key, kd=(kernel, direction): key[:2] == kd
        )
        figures[attention_grid_key(kernel, direction)] = (grid, RELATIVE)
    figures[HBM_KEY] = (hbm, UNITS[HBM_KEY])
    figures[REFERENCE_KEY] = (reference, UNITS[REFERENCE_KEY])

    flagged: list[Flag] = []
    for key, (values, unit) in figures.items():
        if len(values) < MIN_HOSTS_TO_FLAG:
            continue
        middle = _median_of(values.values())
        for node, value in values.items():
            if middle > 0 and value < middle * (1.0 - threshold):
                flagged.append(Flag(node, key, value, middle, unit))
    flagged.sort(key=lambda f: (f.node, f.measurement))
    return _with_note(summary, tuple(flagged), figures)


def _per_host(hosts: Mapping[str, HostResult], items: Any) -> dict[str, dict[Any, float]]:
    """node -> {point: the host's median at that point}."""
    out: dict[str, dict[Any, float]] = {}
    for node, result in hosts.items():
        seen: dict[Any, list[float]] = {}
        for key, value in items(result):
            seen.setdefault(key, []).append(float(value))
        if seen:
            out[node] = {key: _median_of(values) for key, values in seen.items()}
    return out


def _column(per: Mapping[str, Mapping[Any, float]], key: Any) -> dict[str, float]:
    return {node: values[key] for node, values in per.items() if key in values}


def _relative(
    per: Mapping[str, Mapping[Any, float]],
    pool: Mapping[Any, tuple[float, int]],
    chosen: Any,
) -> dict[str, float]:
    """Each host's median, over its points of a grid measured on MIN_HOSTS_TO_FLAG hosts or
    more, of its rate over the pool's median there (1: a typical host)."""
    out: dict[str, float] = {}
    for node, values in per.items():
        ratios = [
            value / pool[key][0]
            for key, value in values.items()
            if chosen(key) and pool[key][1] >= MIN_HOSTS_TO_FLAG and pool[key][0] > 0
        ]
        if ratios:
            out[node] = _median_of(ratios)
    return out


def _with_note(
    summary: PoolSummary,
    flagged: tuple[Flag, ...],
    figures: Mapping[str, tuple[Mapping[str, float], str]],
) -> PoolSummary:
    n = summary.hosts
    failed = f"; {len(summary.failures)} failed" if summary.failures else ""
    if n < MIN_HOSTS_TO_FLAG:
        note = (
            f"{n} host{'s' if n != 1 else ''} measured{failed}: none flagged, a host is compared "
            f"with the median of at least {MIN_HOSTS_TO_FLAG} (of 2 the median is their mean, "
            "which a slow host pulls halfway towards itself)"
        )
    else:
        thin = sorted(
            k for k, (values, _) in figures.items() if 0 < len(values) < MIN_HOSTS_TO_FLAG
        )
        hosts = {f.node for f in flagged}
        note = (
            f"{n} hosts measured{failed}; {len(hosts)} flagged (below the pool's median by more "
            f"than {summary.threshold:.0%} on a measurement)"
        )
        if thin:
            note += f"; too few hosts to flag on {', '.join(thin)}"
    return replace(summary, flagged=flagged, note=note)


def flag_reasons(summary: PoolSummary) -> dict[str, str]:
    """Each flagged host's reason in one line, for its condition, Event and node annotation:
    ``gemm.sustained.bf16 540.1 TFLOP/s, 18.5% below the pool's median 663 (and 3 more)``."""
    out: dict[str, str] = {}
    for node in summary.flagged_hosts:
        flags = [f for f in summary.flagged if f.node == node]
        worst = max(flags, key=lambda f: (round(f.shortfall, 3), f.unit != RELATIVE))
        more = f" (and {len(flags) - 1} more)" if len(flags) > 1 else ""
        out[node] = (
            f"{worst.measurement} {worst.value:.4g} {worst.unit}, {worst.shortfall:.1%} below "
            f"the pool's median {worst.median:.4g}{more}"
        )
    return out


# --- status.measured -----------------------------------------------------------------------------


def _sig(x: float, digits: int = 4) -> float:
    """``x`` to 4 significant digits (stable JSON, no float noise)."""
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def _compare(measured: float, catalog: float | None) -> dict[str, float]:
    out = {"measured": _sig(measured)}
    if catalog is not None and catalog > 0:
        out["catalog"] = _sig(catalog)
        out["ratio"] = _sig(measured / catalog)
    return out


def _gemm_key(precision: str) -> str:
    return "fp8" if precision == "fp8" else "bf16"


def _flag_json(f: Flag) -> dict[str, Any]:
    return {
        "measurement": f.measurement,
        "value": _sig(f.value),
        "median": _sig(f.median),
        "shortfall": _sig(f.shortfall),
        "unit": f.unit,
    }


def summary_json(summary: PoolSummary, catalog: Ceilings | None) -> dict[str, Any]:
    """``status.measured``: the pool's medians, each beside the catalog's figure for the same
    quantity and their ratio where ``catalog`` (the pool's accelerator's ceilings_for) is given,
    the flagged hosts with their numbers, the failed hosts apart. camelCase keys, numbers to 4
    significant digits. The catalog's figures: the sustained and burst GEMM rate per precision
    (fp16 compared with the 16-bit ceiling), each GEMM shape at the shape model capped at the
    burst rate (a short call), each attention point at ``Ceilings.attention_flops``, and the
    HBM copy rate (the H100's measured copy rate scaled as ceilings_for does: H100_COPY_GBPS /
    hbm_scale). Flagged hosts: one entry each, worst first, with the measurement it falls
    shortest on and its numbers, and every measurement it is below on (``below``); at most
    MAX_STATUS_HOSTS flagged and as many failed hosts are listed (``notListed`` counts the
    rest), so a large pool's status stays far below etcd's object size limit."""
    gemm: dict[str, Any] = {}
    for name, rates, table in (
        ("sustainedTFLOPS", summary.sustained_tflops, catalog.sustained_flops if catalog else {}),
        ("burstTFLOPS", summary.burst_tflops, catalog.burst_flops if catalog else {}),
    ):
        if rates:
            gemm[name] = {
                p: _compare(v, table[_gemm_key(p)] / TERA if _gemm_key(p) in table else None)
                for p, v in rates.items()
            }
    if summary.gemm:
        shapes = []
        for g in summary.gemm:
            row: dict[str, Any] = {
                "precision": g.precision,
                "m": g.m,
                "n": g.n,
                "k": g.k,
                "hosts": g.hosts,
                "tflops": _sig(g.tflops),
            }
            key = _gemm_key(g.precision)
            if catalog is not None and key in catalog.gemm_efficiency:
                modelled = float(catalog.gemm_flops(key, min(g.n, g.k), g.m, sustained=False))
                row["catalogTFLOPS"] = _sig(modelled / TERA)
                row["ratio"] = _sig(g.tflops * TERA / modelled)
            shapes.append(row)
        gemm["shapes"] = shapes
    out: dict[str, Any] = {
        "hosts": summary.hosts,
        "threshold": summary.threshold,
        "note": summary.note,
    }
    if gemm:
        out["gemm"] = gemm
    if summary.attention:
        rows = []
        for a in summary.attention:
            row = {
                "kernel": a.kernel,
                "direction": a.direction,
                "sequence": a.sequence,
                "headDim": a.head_dim,
                "heads": a.heads,
                "hosts": a.hosts,
                "tflops": _sig(a.tflops),
            }
            if catalog is not None and (a.kernel, a.direction) in catalog.attention:
                modelled = float(
                    catalog.attention_flops(a.kernel, a.direction, a.sequence, a.head_dim)
                )
                row["catalogTFLOPS"] = _sig(modelled / TERA)
                row["ratio"] = _sig(a.tflops * TERA / modelled)
            rows.append(row)
        out["attention"] = rows
    if summary.hbm_gbps is not None:
        hbm = H100_COPY_GBPS / catalog.hbm_scale if catalog is not None else None
        out["hbmGBps"] = _compare(summary.hbm_gbps, hbm)
    if summary.reference_tokens_per_second is not None:
        out["referenceStep"] = {
            "tokensPerSecond": _sig(summary.reference_tokens_per_second),
            **(
                {"parameters": summary.reference_parameters} if summary.reference_parameters else {}
            ),
        }
    if summary.collectives:
        out["collectives"] = [
            {
                "op": c.op,
                "bytes": c.bytes,
                "ranks": c.ranks,
                "hosts": c.hosts,
                "busGBps": _sig(c.bus_gbps),
            }
            for c in summary.collectives
        ]
    worst: dict[str, list[Flag]] = {}
    for f in summary.flagged:
        worst.setdefault(f.node, []).append(f)
    listed = sorted(worst.items(), key=lambda kv: -max(f.shortfall for f in kv[1]))
    out["flagged"] = [
        {
            "node": node,
            # the worst; on a tie (to 3 digits) one in its own units rather than a ratio
            **_flag_json(max(flags, key=lambda f: (round(f.shortfall, 3), f.unit != RELATIVE))),
            "below": sorted(f.measurement for f in flags)[:MAX_STATUS_MEASUREMENTS],
        }
        for node, flags in listed[:MAX_STATUS_HOSTS]
    ]
    failures = sorted(summary.failures.items())
    out["failures"] = [{"node": n, "message": m[:256]} for n, m in failures[:MAX_STATUS_HOSTS]]
    unlisted = max(0, len(listed) - MAX_STATUS_HOSTS) + max(0, len(failures) - MAX_STATUS_HOSTS)
    if unlisted:
        out["notListed"] = unlisted
    return out


# --- back from a status, a file, or results ------------------------------------------------------


class _Reader:
    """Typed reads of a JSON-like dict; errors name the field (``status.measured.hbmGBps``)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, what: str) -> ProfileError:
        return ProfileError(f"{self.where}.{path}: {what}" if path else f"{self.where}: {what}")

    def map(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, "expected a map")
        return value

    def list(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, "expected a list")
        return value

    def number(self, value: Any, path: str, *, positive: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, "expected a number")
        x = float(value)
        if not math.isfinite(x) or (positive and x <= 0):
            raise self.fail(path, "expected a positive number")
        return x

    def integer(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(path, "expected a positive integer")
        return value

    def text(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, "expected a non-empty string")
        return value


def _measured(r: _Reader, measured: Mapping[str, Any]) -> PoolSummary:
    gemm = r.map(measured.get("gemm") or {}, "gemm")
    rates: dict[str, dict[str, float]] = {}
    for name in ("sustainedTFLOPS", "burstTFLOPS"):
        table = r.map(gemm.get(name) or {}, f"gemm.{name}")
        rates[name] = {
            p: r.number(r.map(v, f"gemm.{name}.{p}").get("measured"), f"gemm.{name}.{p}.measured")
            for p, v in table.items()
        }
    shapes = []
    for i, row in enumerate(r.list(gemm.get("shapes"), "gemm.shapes")):
        at = f"gemm.shapes[{i}]"
        row = r.map(row, at)
        shapes.append(
            GemmRate(
                r.text(row.get("precision"), f"{at}.precision"),
                r.integer(row.get("m"), f"{at}.m"),
                r.integer(row.get("n"), f"{at}.n"),
                r.integer(row.get("k"), f"{at}.k"),
                r.number(row.get("tflops"), f"{at}.tflops"),
                int(row.get("hosts") or 1),
            )
        )
    attention = []
    for i, row in enumerate(r.list(measured.get("attention"), "attention")):
        at = f"attention[{i}]"
        row = r.map(row, at)
        attention.append(
            AttentionRate(
                r.text(row.get("kernel"), f"{at}.kernel"),
                r.text(row.get("direction"), f"{at}.direction"),
                r.integer(row.get("sequence"), f"{at}.sequence"),
                r.integer(row.get("headDim"), f"{at}.headDim"),
                r.integer(row.get("heads"), f"{at}.heads"),
                r.number(row.get("tflops"), f"{at}.tflops"),
                int(row.get("hosts") or 1),
            )
        )
    hbm = None
    if measured.get("hbmGBps") is not None:
        hbm = r.number(r.map(measured["hbmGBps"], "hbmGBps").get("measured"), "hbmGBps.measured")
    reference = None
    parameters = None
    if measured.get("referenceStep") is not None:
        step = r.map(measured["referenceStep"], "referenceStep")
        reference = r.number(step.get("tokensPerSecond"), "referenceStep.tokensPerSecond")
        if step.get("parameters") is not None:
            parameters = r.integer(step["parameters"], "referenceStep.parameters")
    collectives = []
    for i, row in enumerate(r.list(measured.get("collectives"), "collectives")):
        at = f"collectives[{i}]"
        row = r.map(row, at)
        collectives.append(
            BusRate(
                r.text(row.get("op"), f"{at}.op"),
                r.integer(row.get("bytes"), f"{at}.bytes"),
                r.integer(row.get("ranks"), f"{at}.ranks"),
                r.integer(row.get("hosts"), f"{at}.hosts"),
                r.number(row.get("busGBps"), f"{at}.busGBps"),
            )
        )
    flagged = []
    for i, row in enumerate(r.list(measured.get("flagged"), "flagged")):
        at = f"flagged[{i}]"
        row = r.map(row, at)
        flagged.append(
            Flag(
                r.text(row.get("node"), f"{at}.node"),
                r.text(row.get("measurement"), f"{at}.measurement"),
                r.number(row.get("value"), f"{at}.value", positive=False),
                r.number(row.get("median"), f"{at}.median"),
                str(row.get("unit") or ""),
            )
        )
    failures = {}
    for i, row in enumerate(r.list(measured.get("failures"), "failures")):
        row = r.map(row, f"failures[{i}]")
        failures[r.text(row.get("node"), f"failures[{i}].node")] = str(row.get("message") or "")
    count = measured.get("hosts")
    threshold = measured.get("threshold", DEGRADED_THRESHOLD)
    return PoolSummary(
        hosts=count if isinstance(count, int) and not isinstance(count, bool) else 0,
        sustained_tflops=rates["sustainedTFLOPS"],
        burst_tflops=rates["burstTFLOPS"],
        gemm=tuple(shapes),
        attention=tuple(attention),
        hbm_gbps=hbm,
        reference_tokens_per_second=reference,
        reference_parameters=parameters,
        collectives=tuple(collectives),
        flagged=tuple(flagged),
        failures=failures,
        threshold=float(threshold) if isinstance(threshold, int | float) else DEGRADED_THRESHOLD,
        note=str(measured.get("note") or ""),
    )


def _when(value: Any, where: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ProfileError(f"{where}: not an RFC 3339 time: {value!r}") from None
    else:
        raise ProfileError(f"{where}: expected an RFC 3339 time (2026-11-26T01:00:00Z)")
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def measurement_from_status(
    pool: str, status: Mapping[str, Any], *, where: str = "status"
) -> PoolMeasurement:
    """The PoolMeasurement of pool ``pool`` from a PoolProfile's ``status`` (camelCase, as
    stored): ``machineType``, ``accelerator`` (the catalog's name), ``profiledAt`` and
    ``measured`` (what :func:`summary_json` wrote). ProfileError names a missing or bad field."""
    r = _Reader(where)
    status = r.map(status, "")
    measured = status.get("measured")
    if not measured:
        raise r.fail("measured", "nothing measured yet (the profile has no results)")
    return PoolMeasurement(
        pool=pool,
        machine_type=r.text(status.get("machineType"), "machineType"),
        accelerator=r.text(status.get("accelerator"), "accelerator"),
        profiled_at=_when(status.get("profiledAt"), f"{where}.profiledAt"),
        summary=_measured(_Reader(f"{where}.measured"), r.map(measured, "measured")),
    )


def measurement_from_object(
    obj: Mapping[str, Any], *, where: str = "PoolProfile"
) -> PoolMeasurement:
    """A whole PoolProfile (apiVersion ringmaster.dev/v1alpha1, kind PoolProfile; ``spec.pool``
    names the pool, ``status`` as :func:`measurement_from_status` reads it)."""
    r = _Reader(where)
    obj = r.map(obj, "")
    if obj.get("kind") != KIND or obj.get("apiVersion") != API_VERSION:
        raise r.fail(
            "kind",
            f"expected apiVersion {API_VERSION}, kind {KIND}; got "
            f"{obj.get('apiVersion')!r}, {obj.get('kind')!r}",
        )
    spec = r.map(obj.get("spec") or {}, "spec")
    pool = r.text(spec.get("pool"), "spec.pool")
    return measurement_from_status(
        pool, r.map(obj.get("status") or {}, "status"), where=f"{where}.status"
    )


def measurement_from_results(
    results: Iterable[Any],
    *,
    pool: str,
    machine_type: str,
    catalog: Catalog,
    threshold: float = DEGRADED_THRESHOLD,
    where: str = "results",
) -> PoolMeasurement:
    """A PoolMeasurement straight from HostResults (bodies as the pods post them, each
    validated as the operator validates it) on ``machine_type`` of ``catalog``, which names the
    accelerator (a machine type without one of its own, N1 with attached GPUs, cannot: give a
    PoolProfile object instead). Profiled at the latest result's time (now, if none says)."""
    try:
        machine = catalog.machine(machine_type)
    except UnknownHardwareError as exc:
        raise ProfileError(f"--profile-machine-type: {exc}") from None
    if machine.accelerator is None:
        raise ProfileError(
            f"--profile-machine-type: {machine_type} carries no accelerator of its own, so the "
            "results do not say which; give a PoolProfile object (status.accelerator) instead"
        )
    parsed: dict[str, HostResult] = {}
    for i, body in enumerate(results):
        try:
            result = parse_result(body)
        except ResultRefused as exc:
            raise ProfileError(f"{where}[{i}]: {exc}") from None
        if result.node in parsed:
            raise ProfileError(f"{where}[{i}]: a second result of node {result.node}")
        parsed[result.node] = result
    if not parsed:
        raise ProfileError(f"{where}: no results")
    times = [r.time for r in parsed.values() if r.time is not None]
    return PoolMeasurement(
        pool=pool,
        machine_type=machine_type,
        accelerator=machine.accelerator,
        profiled_at=max(times) if times else dt.datetime.now(dt.UTC),
        summary=summarize(parsed, threshold),
    )


def measurements_from_document(
    data: Any,
    *,
    where: str,
    catalog: Catalog,
    machine_type: str | None = None,
    pool: str = "results",
) -> list[PoolMeasurement]:
    """What ``ringmaster plan --profile FILE`` reads (YAML or JSON, already parsed): a PoolProfile
    (``kubectl get poolprofile NAME -o yaml``), a List of them (``kubectl get poolprofiles -o
    yaml``), or its pods' results (a list of HostResult bodies, or ``{"results": [...]}``) on
    ``machine_type`` (``--profile-machine-type``) as pool ``pool`` (the CLI: the file's name)."""
    if isinstance(data, Mapping) and data.get("kind") == "List":
        items = data.get("items")
        if not isinstance(items, list) or not items:
            raise ProfileError(f"{where}: a List with no items")
        return [
            measurement_from_object(item, where=f"{where}: items[{i}]")
            for i, item in enumerate(items)
        ]
    if isinstance(data, Mapping) and "kind" in data:
        return [measurement_from_object(data, where=where)]
    results = data.get("results") if isinstance(data, Mapping) else data
    if not isinstance(results, list):
        raise ProfileError(
            f"{where}: expected a PoolProfile (apiVersion {API_VERSION}, kind {KIND}) or a list "
            "of its pods' results"
        )
    if machine_type is None:
        raise ProfileError(
            f"{where}: a list of results does not say its machine type; give "
            "--profile-machine-type (or a PoolProfile object, whose status does)"
        )
    return [
        measurement_from_results(
            results, pool=pool, machine_type=machine_type, catalog=catalog, where=where
        )
    ]
