"""The ceilings a profiled pool is planned on (PoolProfile, issue 47): what the pool's own hosts
measured, in the schema of :mod:`ringmaster.engine.ceilings` (one place, read by training and
serving).

A PoolProfile's payload measures, on each host, sustained and burst GEMM rates, GEMMs by shape,
attention kernels, a device-to-device copy and one step of a small reference transformer, and
across the hosts NCCL's all-reduce and all-to-all (``profiling/results.py`` is the schema;
``profiling/aggregate.py`` takes the pool's median of each into a :class:`PoolSummary`). Here the
medians become the pool's :class:`~ringmaster.engine.ceilings.Ceilings`
(:func:`profiled_ceilings`):

- **sustained and burst GEMM rate** per precision: the measured medians (fp16 stands for the
  16-bit rate where a chip has no bf16; the payload's fp8 is ``torch._scaled_mm`` without fast
  accumulation, its default, and fp8 with fast accumulation keeps the base's ratio to it);
- **GEMM shape efficiency E** per precision: refit on the measured shapes of training size
  (``M >= 1024``, as :mod:`ringmaster.calibration.ceilings` fits the H100) with the base's K
  kept, least squares of the log error (closed form: the mean log ratio);
- **attention E** per (kernel, direction): the base's E times measured / modelled at the measured
  points (their geometric mean, the same least squares), s0 and d0 kept;
- **HBM**: ``hbm_scale`` from the measured copy rate (the H100's is ``H100_COPY_GBPS``), which
  scales every memory-bound kernel, the loss and the optimizer as for any other chip;
- everything not measured stays the base's, with the base's evidence; what was measured says
  ``profiled on pool NAME, YYYY-MM-DD`` in :attr:`Ceilings.evidence`.

The fabric (:func:`profiled_nic_bandwidth`): the cross-host all-reduce's bus bandwidth at the
largest size becomes the layout's achieved NIC bandwidth per host, by inverting the engine's own
NCCL model (its docstring says why that and not a plain ratio).

Not modelled from a profile: the reference step (a check on the pool, compared across hosts, not
an input: its model is not the job's), the all-to-all (MoE dispatch keeps the catalog's fabric),
the memory-bound kernels' own shapes (scaled by HBM as for any chip), and jobs without
``spec.model.architecture`` (their compute comes from the spec, not from ceilings).

Nothing here knows Kubernetes or pydantic (the engine's rule): the summary's types are plain
dataclasses, built by ``profiling/aggregate.py`` from HostResults or from a PoolProfile's status.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ringmaster.engine import collectives as C
from ringmaster.engine.ceilings import (
    H100_BURST_TFLOPS,
    H100_COPY_GBPS,
    H100_DATASHEET_HBM_GBPS,
    H100_PEAK_TFLOPS,
    Ceilings,
    hbm_ratio,
    matmul_ratio,
)
from ringmaster.engine.hardware import Accelerator, MachineType
from ringmaster.engine.units import GB, GIB, TERA

# GEMMs of training size: the shape model's E is refit on rows with at least this many tokens
# (calibration.ceilings.GEMM_MIN_TOKENS; a test keeps the two equal). Decode-size GEMMs sit on a
# launch floor the shape model does not describe.
PROFILE_GEMM_MIN_TOKENS = 1024
# The fabric: an all-reduce smaller than this is latency-bound (NCCL's base latency and the
# pipeline fill are a tenth of the time or more below 64 MiB on 2-16 hosts), so its bus
# bandwidth says little about the NICs.
NIC_MIN_BYTES = 64 * 1024 * 1024
# A measured bus bandwidth within this of what the links inside the host allow (the engine's
# model with unlimited NICs) did not run into the NICs: they are at least that fast, no more is
# known, and the catalog's figure stays.
NIC_UNRESOLVED = 0.02
_NIC_SEARCH = (1e6, 1e15)  # bytes/s, the bisection's bracket (8 Mbps to 8 Pbps)


# --- what a pool measured: plain data (profiling/aggregate.py builds it) ------------------------


@dataclass(frozen=True)
class GemmRate:
    """The pool's median rate of one GEMM shape: y (m x n) = x (m x k) @ W^T."""

    precision: str  # bf16, fp16 or fp8
    m: int
    n: int
    k: int
    tflops: float
    hosts: int = 1  # the hosts whose values the median is of


@dataclass(frozen=True)
class AttentionRate:
    """The pool's median rate of one causal attention call (bf16)."""

    kernel: str  # flash2, cudnn, efficient, math
    direction: str  # forward, backward
    sequence: int
    head_dim: int
    heads: int
    tflops: float
    hosts: int = 1


@dataclass(frozen=True)
class BusRate:
    """NCCL's bus bandwidth (nccl-tests' busbw) of one collective over the profiled hosts."""

    op: str  # all_reduce, all_to_all, all_gather, reduce_scatter
    bytes: int
    ranks: int
    hosts: int
    bus_gbps: float


@dataclass(frozen=True)
class Flag:
    """A host below its pool's median by more than the threshold on one measurement."""

    node: str
    measurement: str  # a measurement key (gemm.sustained.bf16, hbm, gemm.bf16, ...)
    value: float
    median: float
    unit: str

    @property
    def shortfall(self) -> float:
        """How far below the median, as a fraction of it (0.2: 20 % below)."""
        return 1.0 - self.value / self.median if self.median > 0 else 0.0


@dataclass(frozen=True)
class PoolSummary:
    """A pool's results together: the median over its hosts of every measurement, the hosts that
    fall short of it, and the hosts whose payload could not run."""

    hosts: int = 0  # hosts with a result that measured something
    nodes: tuple[str, ...] = ()  # their names (empty when read back from a status)
    sustained_tflops: Mapping[str, float] = field(default_factory=dict)
    burst_tflops: Mapping[str, float] = field(default_factory=dict)
    gemm: tuple[GemmRate, ...] = ()
    attention: tuple[AttentionRate, ...] = ()
    hbm_gbps: float | None = None
    reference_tokens_per_second: float | None = None
    reference_parameters: int | None = None
    collectives: tuple[BusRate, ...] = ()
    flagged: tuple[Flag, ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)  # node -> the payload's error
    threshold: float = 0.10
    note: str = ""

    @property
    def flagged_hosts(self) -> tuple[str, ...]:
        return tuple(sorted({f.node for f in self.flagged}))

    def medians(self) -> dict[str, float]:
        """Every measurement's median by its key (units: TFLOP/s, GB/s, tokens/s)."""
        out: dict[str, float] = {}
        for p, v in self.sustained_tflops.items():
            out[sustained_key(p)] = v
        for p, v in self.burst_tflops.items():
            out[burst_key(p)] = v
        for g in self.gemm:
            out[gemm_point_key(g.precision, g.m, g.n, g.k)] = g.tflops
        for a in self.attention:
            key = attention_point_key(a.kernel, a.direction, a.sequence, a.head_dim, a.heads)
            out[key] = a.tflops
        if self.hbm_gbps is not None:
            out[HBM_KEY] = self.hbm_gbps
        if self.reference_tokens_per_second is not None:
            out[REFERENCE_KEY] = self.reference_tokens_per_second
        for c in self.collectives:
            out[collective_key(c.op, c.bytes, c.ranks, c.hosts)] = c.bus_gbps
        return out


HBM_KEY = "hbm"
REFERENCE_KEY = "referenceStep"


def sustained_key(precision: str) -> str:
    return f"gemm.sustained.{precision}"


def burst_key(precision: str) -> str:
    return f"gemm.burst.{precision}"


def gemm_grid_key(precision: str) -> str:
    """A host's GEMM shapes together (its median ratio to the pool's median per shape)."""
    return f"gemm.{precision}"


def gemm_point_key(precision: str, m: int, n: int, k: int) -> str:
    return f"gemm.{precision}.{m}x{n}x{k}"


def attention_grid_key(kernel: str, direction: str) -> str:
    return f"attention.{kernel}.{direction}"


def attention_point_key(
    kernel: str, direction: str, sequence: int, head_dim: int, heads: int
) -> str:
    return f"attention.{kernel}.{direction}.s{sequence}.d{head_dim}.h{heads}"


def collective_key(op: str, nbytes: int, ranks: int, hosts: int) -> str:
    return f"collective.{op}.{nbytes}B.{ranks}ranks.{hosts}hosts"


@dataclass(frozen=True)
class PoolMeasurement:
    """One PoolProfile's result: the pool, what it runs, when, and what it measured."""

    pool: str
    machine_type: str
    accelerator: str  # the catalog's name (nvidia-h100-80gb), as the pool's nodes are labelled
    profiled_at: dt.datetime
    summary: PoolSummary
    # Other profiled pools of the same machine type and accelerator, faster than this one
    # (planning.catalog plans them all on the slowest: conservative); named in the evidence.
    alongside: tuple[str, ...] = ()

    @property
    def date(self) -> str:
        when = self.profiled_at
        if when.tzinfo is not None:
            when = when.astimezone(dt.UTC)
        return when.strftime("%Y-%m-%d")

    @property
    def evidence(self) -> str:
        """``profiled on pool h100-a, 2026-11-26``: what every profiled figure says."""
        return f"profiled on pool {self.pool}, {self.date}"

    @property
    def evidence_long(self) -> str:
        """The evidence, with the faster pools of the same hardware it stands for."""
        if not self.alongside:
            return self.evidence
        others = ", ".join(self.alongside)
        return (
            f"{self.evidence} (the slowest of the profiled pools of {self.machine_type}: also "
            f"{others})"
        )


# --- the ceilings ------------------------------------------------------------------------------


def _peak_key(key: str) -> str:
    if key == "fp4":
        return "fp4"
    return "fp8" if key.startswith("fp8") else "bf16"


def _by_key(rates: Mapping[str, float]) -> dict[str, float]:
    """Measured precisions as the ceilings' keys: bf16 (fp16 where no bf16 was measured), fp8."""
    out: dict[str, float] = {}
    sixteen = rates.get("bf16", rates.get("fp16"))
    if sixteen is not None:
        out["bf16"] = sixteen
    if "fp8" in rates:
        out["fp8"] = rates["fp8"]
    return out


def _gemm_points(summary: PoolSummary) -> dict[str, list[GemmRate]]:
    """The measured GEMM shapes by the ceilings' key (bf16 rows, else fp16 rows, as the 16-bit)."""
    by: dict[str, list[GemmRate]] = {}
    for p in summary.gemm:
        by.setdefault(p.precision, []).append(p)
    out: dict[str, list[GemmRate]] = {}
    sixteen = by.get("bf16") or by.get("fp16")
    if sixteen:
        out["bf16"] = sixteen
    if by.get("fp8"):
        out["fp8"] = by["fp8"]
    return out


def refit_gemm_efficiency(points: Sequence[GemmRate], peak_flops: float, half_dim: float) -> float:
    """E of ``E / (1 + K / min(n, k) + K / m)`` at ``peak_flops`` on the training-size ``points``
    with K = ``half_dim`` given: least squares of the log error, whose solution is the mean log
    ratio of measured to shape. K is kept, not fitted: a profile's grid is a few shapes (the
    payload's quick grid a handful), too few to tell E from K (both lower the small shapes'
    rate), while the base's K is fitted on 216 shapes (calibration.ceilings) and agrees with an
    independent fit on A100 steps. NaN when no point is of training size."""
    rows = [p for p in points if p.m >= PROFILE_GEMM_MIN_TOKENS]
    if not rows:
        return math.nan
    y = np.array([p.tflops * TERA for p in rows]) / peak_flops
    m = np.array([p.m for p in rows], dtype=np.float64)
    width = np.array([min(p.n, p.k) for p in rows], dtype=np.float64)
    shape = 1.0 / (1.0 + half_dim / width + half_dim / m)
    return float(np.exp(np.mean(np.log(y) - np.log(shape))))


def _attention_scale(base: Ceilings, points: Sequence[AttentionRate]) -> float:
    """Measured / modelled at the points, their geometric mean (least squares of the log)."""
    measured = np.array([p.tflops * TERA for p in points])
    modelled = np.array(
        [float(base.attention_flops(p.kernel, p.direction, p.sequence, p.head_dim)) for p in points]
    )
    return float(np.exp(np.mean(np.log(measured / modelled))))


def _set_rate(table: dict[str, float], key: str, value: float, base: Mapping[str, float]) -> None:
    """``table[key] = value``; fp8 also carries fp8 with fast accumulation at the base's ratio."""
    if key == "fp8" and "fp8fast" in base and base.get("fp8"):
        table["fp8fast"] = value * base["fp8fast"] / base["fp8"]
    table[key] = value


def profiled_ceilings(base: Ceilings, measured: PoolMeasurement) -> Ceilings:
    """``base`` with what ``measured`` measured in place of the catalog's (the module's
    docstring lists each quantity); the same schema, so training and serving read it as any
    chip's. Precisions the base has no peak for are ignored (the catalog says the chip cannot)."""
    s = measured.summary
    ev = measured.evidence
    sustained = dict(base.sustained_flops)
    burst = dict(base.burst_flops)
    efficiency = dict(base.gemm_efficiency)
    for key, rate in _by_key(s.sustained_tflops).items():
        if key in base.sustained_flops:
            _set_rate(sustained, key, rate * TERA, base.sustained_flops)
    for key, rate in _by_key(s.burst_tflops).items():
        if key in base.burst_flops:
            _set_rate(burst, key, rate * TERA, base.burst_flops)
    for key, value in sustained.items():  # a burst is never below what the chip sustains
        if key in burst:
            burst[key] = max(burst[key], value)
    for key, points in _gemm_points(s).items():
        if key not in base.gemm_efficiency or _peak_key(key) not in base.peak_flops:
            continue
        e = refit_gemm_efficiency(points, base.peak_flops[_peak_key(key)], base.gemm_half_dim[key])
        if math.isfinite(e):
            _set_rate(efficiency, key, e, base.gemm_efficiency)

    attention = dict(base.attention)
    for (kernel, direction), (e, s0, d0) in base.attention.items():
        calls = [p for p in s.attention if (p.kernel, p.direction) == (kernel, direction)]
        if calls:
            attention[(kernel, direction)] = (e * _attention_scale(base, calls), s0, d0)

    hbm_scale = base.hbm_scale
    if s.hbm_gbps is not None and s.hbm_gbps > 0:
        hbm_scale = H100_COPY_GBPS / s.hbm_gbps

    evidence = dict(base.evidence)
    done = measured_quantities(base, s)
    precisions = tuple(sorted({_peak_key(k) for k in base.peak_flops} & {"bf16", "fp8"}))
    if done.gemm:
        evidence["matmul"] = (
            ev
            if done.gemm == precisions
            else f"{ev} ({', '.join(done.gemm)}); the rest {base.evidence.get('matmul', '')}"
        )
    if done.attention:
        kernels = ", ".join(f"{k} {d}" for k, d in done.attention)
        evidence["attention"] = (
            ev
            if len(done.attention) == len(base.attention)
            else f"{ev} ({kernels}); the rest {base.evidence.get('attention', '')}"
        )
    if done.hbm_gbps is not None:
        evidence["memory-bound"] = ev
    evidence["profile"] = measured.evidence_long
    return replace(
        base,
        gemm_efficiency=efficiency,
        sustained_flops=sustained,
        burst_flops=burst,
        attention=attention,
        hbm_scale=hbm_scale,
        evidence=evidence,
    )


class Measured(NamedTuple):
    """What a profile measured that the ceilings read (their keys)."""

    gemm: tuple[str, ...]  # bf16, fp8: a rate or a training-size shape measured
    attention: tuple[tuple[str, str], ...]  # (kernel, direction) the ceilings have
    hbm_gbps: float | None


def measured_quantities(base: Ceilings, summary: PoolSummary) -> Measured:
    gemm = set(_by_key(summary.sustained_tflops)) | set(_by_key(summary.burst_tflops))
    gemm &= set(base.sustained_flops)
    for key, points in _gemm_points(summary).items():
        usable = key in base.gemm_efficiency and _peak_key(key) in base.peak_flops
        if usable and any(p.m >= PROFILE_GEMM_MIN_TOKENS for p in points):
            gemm.add(key)
    kernels = {(p.kernel, p.direction) for p in summary.attention} & set(base.attention)
    hbm = summary.hbm_gbps if summary.hbm_gbps is not None and summary.hbm_gbps > 0 else None
    return Measured(tuple(sorted(gemm)), tuple(sorted(kernels)), hbm)


# --- the fabric --------------------------------------------------------------------------------


class FabricFit(NamedTuple):
    """The achieved NIC bandwidth per host a profile implies (None: the catalog's), and why
    (where it comes from, or why the catalog's stays)."""

    nic_bandwidth: float | None
    words: str


def profiled_nic_bandwidth(
    summary: PoolSummary, accelerator: Accelerator, machine: MachineType
) -> FabricFit:
    """The layout's achieved NIC bandwidth (``LayoutHardware.nic_bandwidth``) from the profile's
    all-reduce across hosts, or None where the profile cannot tell it.

    What ``nic_bandwidth`` means: the host's NICs together, achieved, per direction (line rate x
    the transport's efficiency); every collective across hosts divides it among the groups that
    share the host (llm_training's ``_data_parallel_seconds``: ``nic / groups``) and hands it to
    :func:`ringmaster.engine.collectives.nccl_collective` as ``GpuFabric.net_bandwidth``.

    How a measured busbw maps to it: not one ratio. A ring's channels cross each host boundary
    once, each on its own NIC, so a ring's busbw is bounded by the host's NICs together (not the
    per-GPU share); on two hosts NCCL's tree and NVLS tree carry only half the message across,
    reaching up to twice the NICs; small messages are latency-bound. So the profile's point is
    put through the engine's own NCCL model (the algorithm and protocol its tuner picks, the
    host's NVLink and NVLS as the catalog has them), and the NIC bandwidth at which the model
    gives the measured busbw is found by bisection (busbw never falls as the NICs grow). Plans on
    the pool then reproduce the measured all-reduce, and scale to other sizes and host counts as
    the model does.

    The point used: the cross-host all-reduce over the most hosts, at its largest size (at least
    NIC_MIN_BYTES). The catalog's figure stays (and the words say why) where the profile spanned
    one host, measured no large all-reduce, ran over an NVLink domain wider than a host (GB200
    NVL72: NVLink, not the NICs, between trays), or reached what the host's own links allow
    (NIC_UNRESOLVED): then the NICs did not bind and are at least that fast."""
    points = [
        c
        for c in summary.collectives
        if c.op == "all_reduce" and c.hosts > 1 and c.ranks % c.hosts == 0
    ]
    if accelerator.kind != "gpu":
        return FabricFit(None, "NIC as the catalog (no NCCL fabric on this accelerator)")
    if not points:
        return FabricFit(None, "NIC as the catalog (no all-reduce across hosts measured)")
    best = max(points, key=lambda c: (c.hosts, c.bytes))
    per_host = best.ranks // best.hosts
    if machine.nvlink_domain > per_host:
        return FabricFit(
            None,
            f"NIC as the catalog (the all-reduce ran inside {machine.name}'s "
            f"{machine.nvlink_domain}-GPU NVLink domain)",
        )
    if best.bytes < NIC_MIN_BYTES:
        return FabricFit(
            None,
            f"NIC as the catalog (the largest all-reduce, {best.bytes / GIB:.3g} GiB, is "
            "latency-bound)",
        )
    fabric = C.gpu_fabric(accelerator, machine, per_host)
    nic = _nic_for_bus_bandwidth(
        float(best.bytes),
        float(best.hosts),
        float(per_host),
        best.bus_gbps * GB,
        float(np.asarray(fabric.intra_bandwidth)),
        fabric.intra_link,
        float(np.asarray(fabric.nvls_bandwidth)),
        fabric.arch,
    )
    where = (
        f"all-reduce busbw {best.bus_gbps:.4g} GB/s over {best.hosts} hosts x {per_host} at "
        f"{best.bytes / GIB:.3g} GiB"
    )
    if nic is None:
        return FabricFit(None, f"NIC as the catalog ({where}: bound by the links inside a host)")
    return FabricFit(nic, f"from the {where}")


@lru_cache(maxsize=256)
def _nic_for_bus_bandwidth(
    nbytes: float,
    hosts: float,
    per_host: float,
    bus_bandwidth: float,
    intra: float,
    intra_link: str,
    nvls: float,
    arch: str,
) -> float | None:
    def bus(net: float) -> float:
        fabric = C.GpuFabric(
            intra_bandwidth=intra,
            net_bandwidth=net,
            intra_link=intra_link,
            nvls_bandwidth=nvls,
            arch=arch,
        )
        return float(C.nccl_collective(C.ALL_REDUCE, nbytes, hosts, per_host, fabric).bus_bandwidth)

    lo, hi = _NIC_SEARCH
    if bus_bandwidth >= bus(hi) * (1.0 - NIC_UNRESOLVED):
        return None
    if bus_bandwidth <= bus(lo):
        return lo
    while hi / lo > 1.0 + 1e-6:
        mid = math.sqrt(lo * hi)
        if bus(mid) < bus_bandwidth:
            lo = mid
        else:
            hi = mid
    return hi


# --- what layout_hardware and serving read ------------------------------------------------------


@dataclass(frozen=True)
class ProfiledPool:
    """What a layout on a profiled pool runs on in place of the catalog's."""

    ceilings: Ceilings
    step_fit: float
    step_fit_source: str
    attention_derate: float
    nic_bandwidth: float
    evidence: str


def profiled_pool(
    base: Ceilings,
    measured: PoolMeasurement,
    accelerator: Accelerator,
    machine: MachineType,
    nic_bandwidth: float,
    step_fit: tuple[float, str, float],
) -> ProfiledPool:
    """The profiled ceilings, step fit, attention derate and NIC of a layout on the pool, from
    the catalog's (``base``, ``nic_bandwidth``, ``step_fit``: llm_training.step_fit's triple).

    The GEMM step fit (fitted on a chip's published steps where the chip has no operator
    measurement) does not apply to a pool whose GEMMs were measured: 1, its source the profile.
    The attention derate (the power cap's toll on attention measured at burst clocks) becomes
    the pool's own sustained / burst bf16 GEMM ratio where the profile measured attention and
    both rates (its attention timed as the team's H100 rows were: short calls, burst clocks)
    and that toll is the larger; a smaller one is not credited (conservative: a low burst
    reading, the first 50 ms of a cold chip, would otherwise speed up attention measured over
    many calls), so a profile measuring slower never plans a faster step."""
    ceilings = profiled_ceilings(base, measured)
    s = measured.summary
    done = measured_quantities(base, s)
    fit, source, derate = step_fit
    if done.gemm:
        fit, source = 1.0, measured.evidence
    sixteen_s = _by_key(s.sustained_tflops).get("bf16")
    sixteen_b = _by_key(s.burst_tflops).get("bf16")
    if done.attention and sixteen_s and sixteen_b:
        derate = min(derate, sixteen_s / sixteen_b)
    fabric = profiled_nic_bandwidth(s, accelerator, machine)
    nic = fabric.nic_bandwidth if fabric.nic_bandwidth is not None else nic_bandwidth
    what = measured_words(base, measured)
    words = fabric.words
    if fabric.nic_bandwidth is not None:
        words = (
            f"NIC {nic / GB:.4g} GB/s per host (catalog {nic_bandwidth / GB:.4g}; {fabric.words})"
        )
    evidence = f"{measured.evidence_long}: {', '.join([*what, words])}"
    return ProfiledPool(ceilings, fit, source, derate, nic, evidence)


def measured_words(base: Ceilings, measured: PoolMeasurement) -> list[str]:
    """What a profile replaced, in a few words each (for the plan's evidence)."""
    done = measured_quantities(base, measured.summary)
    words: list[str] = []
    if done.gemm:
        words.append(f"GEMMs {'/'.join(done.gemm)}")
    if done.attention:
        words.append(f"attention {'/'.join(sorted({k for k, _ in done.attention}))}")
    if done.hbm_gbps is not None:
        words.append(f"HBM {done.hbm_gbps:.4g} GB/s")
    return words


def ceilings_matmul_ratio(ceilings: Ceilings, accelerator: str, precision: str) -> float:
    """Serving's matmul ratio (engine.ceilings.matmul_ratio: the chip's matmul fraction of its
    peak over the H100's) read from ``ceilings``: the burst rate's fraction of peak over the
    H100's measured burst fraction (serving's short steps run near burst). For the catalog's
    own ceilings this is the published ratio; for a profiled pool, the measured one. A precision
    the ceilings lack falls back to the published ratio. FP4 is over the H100's FP8."""
    key = precision if precision in ("fp8", "fp4") else "bf16"
    reference = "fp8" if key == "fp4" else key
    rate = ceilings.burst_flops.get(key)
    peak = ceilings.peak_flops.get(_peak_key(key))
    if not rate or not peak:
        return matmul_ratio(accelerator, precision)
    return (rate / peak) / (H100_BURST_TFLOPS[reference] / H100_PEAK_TFLOPS[reference])


def ceilings_hbm_ratio(ceilings: Ceilings, accelerator: str, memory_bandwidth: float) -> float:
    """Serving's HBM ratio (engine.ceilings.hbm_ratio: the chip's achieved fraction of its
    datasheet over the H100's) read from ``ceilings``, whose ``hbm_scale`` is the H100's copy
    rate over the chip's achieved one; ``memory_bandwidth``: the chip's datasheet, bytes/s."""
    if memory_bandwidth <= 0 or ceilings.hbm_scale <= 0:
        return hbm_ratio(accelerator)
    return H100_DATASHEET_HBM_GBPS * GB / (ceilings.hbm_scale * memory_bandwidth)


def slowest(measurements: Iterable[PoolMeasurement]) -> PoolMeasurement:
    """The slowest of several pools' measurements of the same hardware, by the first figure all
    of them measured: the reference step (the whole of a step), else the sustained 16-bit GEMM
    rate, else HBM; ties (or nothing in common) by pool name. It names the others alongside."""
    pools = sorted(measurements, key=lambda m: m.pool)
    if not pools:
        raise ValueError("no measurement to choose from")

    def figure(m: PoolMeasurement, which: str) -> float | None:
        s = m.summary
        if which == REFERENCE_KEY:
            return s.reference_tokens_per_second
        if which == "gemm":
            return _by_key(s.sustained_tflops).get("bf16")
        return s.hbm_gbps

    chosen = pools[0]
    for which in (REFERENCE_KEY, "gemm", HBM_KEY):
        values = [figure(m, which) for m in pools]
        if all(v is not None for v in values):
            chosen = min(zip(pools, values, strict=True), key=lambda pv: pv[1] or 0.0)[0]
            break
    others = tuple(m.pool for m in pools if m is not chosen)
    return replace(chosen, alongside=others) if others else chosen


__all__ = [
    "AttentionRate",
    "BusRate",
    "FabricFit",
    "Flag",
    "GemmRate",
    "PoolMeasurement",
    "PoolSummary",
    "ProfiledPool",
    "ceilings_hbm_ratio",
    "ceilings_matmul_ratio",
    "measured_quantities",
    "measured_words",
    "profiled_ceilings",
    "profiled_nic_bandwidth",
    "profiled_pool",
    "refit_gemm_efficiency",
    "slowest",
]
