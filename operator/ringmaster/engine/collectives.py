"""Collectives as NCCL and XLA run them, and the reduction server: vectorised alpha-beta models.

Entry points for other engine modules (tensor parallelism inside a host or slice, data-parallel
gradients across hosts):

* :func:`intra_host_collective` ``(kind, nbytes, ranks, accelerator, ...)``: ``kind`` in
  ``"all-reduce" | "all-gather" | "reduce-scatter"`` among ``ranks`` accelerators of ONE host
  (NVLink / NVSwitch / PCIe) or of ONE TPU slice (ICI). Use it for tensor parallelism.
* :func:`inter_host_collective` ``(kind, nbytes, hosts, per_host, machine, accelerator, ...)``:
  the same collective over ``hosts`` hosts with ``per_host`` accelerators each, as NCCL runs it
  over the hosts' NICs (or a TPU multislice over the data-center network). Use it for the
  data-parallel gradient all-reduce (and FSDP's all-gather / reduce-scatter).

Both return a :class:`CollectiveTime` (seconds, algorithm, protocol, busbw, bottleneck) and
broadcast over numpy arrays of ``nbytes`` (and ``hosts``); ``env`` takes a pod's environment so
``NCCL_ALGO`` / ``NCCL_PROTO`` restrict the choice as they restrict NCCL, ``NCCL_NVLS_ENABLE=0``
removes NVLS and NVLSTree (engine.nccl_settings classifies every other ``NCCL_*`` variable).
A machine type whose NVLink domain spans hosts (GB200 NVL72: ``MachineType.nvlink_domain``) runs
each domain's hosts as one NCCL node (:func:`domain_collective`).

The model of what NCCL runs (:func:`nccl_collective`) follows NCCL's own tuner
(src/graph/tuning.cc): for every algorithm (Ring, Tree, NVLS, NVLSTree) and protocol (LL, LL128,
Simple) time = latency + bytes / bandwidth, with NCCL's latency tables and bandwidth fractions, and
the minimum wins. Bandwidths are the physical ones (achieved NVLink per GPU, the host's NICs
together): a ring's channels cross every host once, so its busbw is the smaller of the GPU's link
and the host's NICs; a tree carries the whole message up and down (2 hosts: half of it, so busbw
up to twice the NICs); NVLS lets the NVSwitch reduce. TPU slices all-reduce over all torus axes at
once (:func:`ici_collective`), as XLA does; multislice adds the DCN (:func:`multislice_allreduce`).

The older functions, one algorithm each in closed form (``ring_allreduce``, ``flat_ring``,
``hierarchical_ring``, ``tree_allreduce``, ``reduction_server``, ``torus_allreduce``), keep their
meaning in :mod:`ringmaster.engine.alpha_beta_collectives`.

Notation (DESIGN.md): n worker hosts, g accelerators per host, N = n * g ranks, M bytes,
bandwidths in bytes/s *achieved* (line rate times efficiency, :mod:`ringmaster.engine.efficiency`).
Bus bandwidth follows nccl-tests: all-reduce ``busbw = algbw * 2(N-1)/N``, all-gather and
reduce-scatter ``busbw = algbw * (N-1)/N``, ``algbw = M / time`` (M the whole array).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ringmaster.engine import efficiency as E
from ringmaster.engine.arrays import as_f64 as _f
from ringmaster.engine.arrays import where
from ringmaster.engine.efficiency import NCCL_BASE_LATENCY
from ringmaster.engine.hardware import XGMI_LINKS_PER_GPU, Accelerator, MachineType

# NCCL's four algorithm codes and the pipeline's steps live in engine.nccl_pipeline; re-exported.
from ringmaster.engine.nccl_pipeline import ALG_NVLS as ALG_NVLS
from ringmaster.engine.nccl_pipeline import ALG_NVLS_TREE as ALG_NVLS_TREE
from ringmaster.engine.nccl_pipeline import ALG_RING as ALG_RING
from ringmaster.engine.nccl_pipeline import ALG_TREE as ALG_TREE
from ringmaster.engine.nccl_pipeline import pipeline_fill as pipeline_fill
from ringmaster.engine.nccl_pipeline import pipeline_step_bytes as pipeline_step_bytes
from ringmaster.engine.nccl_pipeline import ring_fill, scaled_step
from ringmaster.engine.units import US

F64 = NDArray[np.float64]

# What bounds a step or a collective; words in ringmaster.engine.training.
BOTTLENECK_COMPUTE = 0
BOTTLENECK_INTRA = 1  # the intra-host link (NVLink / PCIe)
BOTTLENECK_NIC = 2  # the workers' inter-host NICs
BOTTLENECK_REDUCERS = 3  # the reducers' aggregate bandwidth
BOTTLENECK_LATENCY = 4  # per-step latency (many hops, small messages)
BOTTLENECK_ICI = 5  # the TPU inter-chip interconnect


# =================================================================================================
# What NCCL really runs: algorithms x protocols, NCCL's tuner picks the fastest.
# =================================================================================================

ALL_REDUCE = "all-reduce"
ALL_GATHER = "all-gather"
REDUCE_SCATTER = "reduce-scatter"
KINDS = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)
# All-to-all (mixture-of-experts dispatch and combine): point-to-point, not one of NCCL's
# collective algorithms, so it stays out of KINDS (what the tuner model runs).
ALL_TO_ALL = "all-to-all"
ALL_KINDS = (*KINDS, ALL_TO_ALL)

# Algorithm codes (CollectiveTime.algorithm); names as NCCL_ALGO spells them. NCCL's four
# (ALG_RING .. ALG_NVLS_TREE, 0-3) are engine.nccl_pipeline's.
ALG_ICI = 4  # a TPU slice's torus (XLA)
ALG_REDUCTION_SERVER = 5
ALG_MULTISLICE = 6  # ICI inside slices, DCN between them
ALG_P2P = 7  # NCCL's grouped send / receive (ncclAllToAll)
ALGORITHM_NAMES = {
    ALG_RING: "Ring",
    ALG_TREE: "Tree",
    ALG_NVLS: "NVLS",
    ALG_NVLS_TREE: "NVLSTree",
    ALG_ICI: "ICI",
    ALG_REDUCTION_SERVER: "ReductionServer",
    ALG_MULTISLICE: "ICI+DCN",
    ALG_P2P: "P2P",
}
PROTO_LL = 0
PROTO_LL128 = 1
PROTO_SIMPLE = 2
PROTO_NONE = 3  # not NCCL (ICI, reduction server)
PROTOCOL_NAMES = {PROTO_LL: "LL", PROTO_LL128: "LL128", PROTO_SIMPLE: "Simple", PROTO_NONE: "-"}
_NCCL_ALGOS = {"ring": ALG_RING, "tree": ALG_TREE, "nvls": ALG_NVLS, "nvlstree": ALG_NVLS_TREE}
_NCCL_PROTOS = {"ll": PROTO_LL, "ll128": PROTO_LL128, "simple": PROTO_SIMPLE}
_ALG_KEY = {ALG_RING: "ring", ALG_TREE: "tree", ALG_NVLS: "nvls", ALG_NVLS_TREE: "nvls_tree"}


class CollectiveTime(NamedTuple):
    """One collective over arrays of configurations (all fields broadcast together)."""

    seconds: F64
    algorithm: NDArray[np.int64]  # ALG_*
    protocol: NDArray[np.int64]  # PROTO_*
    bus_bandwidth: F64  # bytes/s, nccl-tests convention; NaN for one rank
    bottleneck: NDArray[np.int64]  # BOTTLENECK_*


def bus_factor(kind: str, ranks: ArrayLike) -> F64:
    """nccl-tests' busbw / algbw: 2(N-1)/N for all-reduce, (N-1)/N for the others (all-to-all:
    1/N of the buffer stays on the rank, nccl-tests doc/PERFORMANCE.md and issue 130)."""
    n = np.maximum(_f(ranks), 1.0)
    if kind == ALL_REDUCE:
        return 2.0 * (n - 1.0) / n
    if kind in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (n - 1.0) / n
    raise ValueError(f"unknown collective {kind!r}; known: {', '.join(ALL_KINDS)}")


def bus_bandwidth_of(kind: str, nbytes: ArrayLike, ranks: ArrayLike, seconds: ArrayLike) -> F64:
    n = _f(ranks)
    t = _f(seconds)
    # Dividing by NaN where undefined (one rank, no time) gives NaN there with no warning.
    busbw: F64 = bus_factor(kind, n) * _f(nbytes) / where((n > 1) & (t > 0), t, np.nan)
    return busbw


def parse_nccl_env(
    env: Mapping[str, str] | None, kind: str = ALL_REDUCE
) -> tuple[set[int], set[int]]:
    """The algorithms and protocols NCCL_ALGO / NCCL_PROTO leave enabled for ``kind``.

    NCCL's syntax (tuning.cc parseList): a comma list, ``^`` to exclude, and optional
    ``function:list`` entries separated by ``;`` (``"ring,tree;allreduce:^tree"``)."""
    if kind == ALL_TO_ALL:  # point-to-point: NCCL_ALGO and NCCL_PROTO choose nothing there
        return set(_NCCL_ALGOS.values()), set(_NCCL_PROTOS.values())
    algos = _parse_list((env or {}).get("NCCL_ALGO"), _NCCL_ALGOS, kind, "NCCL_ALGO")
    protos = _parse_list((env or {}).get("NCCL_PROTO"), _NCCL_PROTOS, kind, "NCCL_PROTO")
    if not nvls_enabled(env):  # NCCL_NVLS_ENABLE=0: no NVLink SHARP, in the host or across
        algos -= {ALG_NVLS, ALG_NVLS_TREE}
    return algos, protos


def nvls_enabled(env: Mapping[str, str] | None) -> bool:
    """False when ``NCCL_NVLS_ENABLE`` turns NVLink SHARP off (NCCL reads it as an integer:
    0 off; unset or 1 on where the hardware has it, 2 on too)."""
    text = (env or {}).get("NCCL_NVLS_ENABLE", "").strip()
    if not text:
        return True
    try:
        return int(text) != 0
    except ValueError:
        raise ValueError(
            f"NCCL_NVLS_ENABLE={text!r}: expected an integer (0 turns NVLS off)"
        ) from None


_FUNCTIONS = {ALL_REDUCE: "allreduce", ALL_GATHER: "allgather", REDUCE_SCATTER: "reducescatter"}


def _parse_list(text: str | None, names: Mapping[str, int], kind: str, var: str) -> set[int]:
    everything = set(names.values())
    if not text or not text.strip():
        return everything
    enabled = set(everything)
    function = _FUNCTIONS[kind]
    for i, entry in enumerate(text.split(";")):
        prefix, _, items = entry.rpartition(":")
        if not prefix and i > 0:
            raise ValueError(f"{var}={text!r}: every entry but the first needs a function prefix")
        if prefix and prefix.strip().lower() != function:
            continue
        items = items.strip()
        exclude = items.startswith("^")
        chosen = set()
        for word in items.lstrip("^").split(","):
            key = word.strip().lower()
            if key in ("collnetdirect", "collnetchain", "pat"):
                continue  # algorithms this model does not run (no CollNet/SHARP switches here)
            if key not in names:
                raise ValueError(
                    f"{var}={text!r}: unknown {word.strip()!r}; known: {', '.join(names)}"
                )
            chosen.add(names[key])
        enabled = everything - chosen if exclude else chosen
    return enabled


@dataclass(frozen=True)
class GpuFabric:
    """What NCCL sees on a GPU host type: achieved bandwidths (bytes/s) and the link kinds.

    Arrays broadcast against the configurations evaluated."""

    intra_bandwidth: ArrayLike  # per GPU per direction, NVLink, xGMI or PCIe
    net_bandwidth: ArrayLike  # the host's NICs together, per direction
    intra_link: str = "nvlink"  # "nvlink", "xgmi" or "pcie" (NCCL's / RCCL's latency row)
    nvls_bandwidth: ArrayLike = 0.0  # NVLS all-reduce algbw; 0 without NVSwitch + Hopper
    arch: str = "ampere"  # NCCL's GPU-generation row
    # What the workers' NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE leave enabled (parse_nccl_env);
    # None: everything. nccl_collective intersects them with its own arguments.
    algorithms: frozenset[int] | None = None
    protocols: frozenset[int] | None = None


def _floor_log2(x: F64) -> F64:
    """floor(log2 x) for x >= 1, via the float's exponent (cheaper than log2 + floor)."""
    _, exponent = np.frexp(np.maximum(x, 1.0))
    return (exponent - 1).astype(np.float64)


# 1 / NCCL's tree correction by frexp exponent of bytes / 64 (log2 + 1); 1 outside its
# 64 B .. 256 MiB range (columns 0 and 24). NCCL applies the factors for log2 = 0..22.
_INVERSE_TREE_CORRECTION = 1.0 / np.hstack(
    [np.ones((3, 1)), np.asarray(E.NCCL_TREE_CORRECTION)[:, :23], np.ones((3, 1))]
)


def nccl_collective(
    kind: str,
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    fabric: GpuFabric,
    *,
    algorithms: set[int] | None = None,
    protocols: set[int] | None = None,
    with_busbw: bool = True,
) -> CollectiveTime:
    """The collective NCCL runs: every enabled (algorithm, protocol) timed as latency + bytes /
    bandwidth, the fastest chosen (NCCL's tuner; tuning.cc). Infinite when nothing is enabled.
    ``with_busbw=False`` leaves bus_bandwidth NaN (sweeps that do not need it)."""
    m = _f(nbytes)
    n = _f(hosts)
    g = _f(per_host)
    ranks = n * g
    multi = n > 1
    intra = _f(fabric.intra_bandwidth)
    net = _f(fabric.net_bandwidth)
    nvls_bw = _f(fabric.nvls_bandwidth)
    link = fabric.intra_link if fabric.intra_link in ("nvlink", "xgmi", "pcie") else "pcie"
    arch = fabric.arch or "volta"
    algos = {ALG_RING, ALG_TREE, ALG_NVLS, ALG_NVLS_TREE} if algorithms is None else algorithms
    protos = {PROTO_LL, PROTO_LL128, PROTO_SIMPLE} if protocols is None else protocols
    if fabric.algorithms is not None:
        algos = algos & fabric.algorithms
    if fabric.protocols is not None:
        protos = protos & fabric.protocols
    # LL128 needs NVLink between the GPUs (tuning.cc: typeIntra <= PATH_NVB); RCCL's LL128 on xGMI
    # depends on its build and version and is left out.
    if link != "nvlink":
        protos = protos - {PROTO_LL128}
    all_reduce = kind == ALL_REDUCE
    factor = bus_factor(kind, ranks)
    any_multi = bool(multi.any())
    one_host_ll = E.NCCL_LL_MAX_BW_ONE_HOST_GBPS.get(arch, E.NCCL_LL_MAX_BW_ONE_HOST_GBPS["volta"])
    if any_multi:
        many = where(n <= 2, E.NCCL_LL_MAX_BW_TWO_HOSTS_GBPS, E.NCCL_LL_MAX_BW_MANY_HOSTS_GBPS)
        ll_max = where(multi, many, one_host_ll) * 1e9
    else:
        ll_max = np.asarray(one_host_ll * 1e9)
    net_lat = E.NCCL_HW_LATENCY_US["net"]
    intra_lat = E.NCCL_HW_LATENCY_US[link]
    shape = np.broadcast(m, n, g, intra, net, nvls_bw).shape
    picker = _Picker(m, shape)
    fill_scale = E.PIPELINE_FILL_SECONDS_PER_STEP_BYTE

    # --- Ring: one ring per channel through all N ranks, crossing every host once, so its busbw
    # is the smaller of the GPU's link and the host's NICs together.
    if ALG_RING in algos:
        ring_bus = where(multi, where(g > 1, np.minimum(intra, net), net), intra)
        ring_code = where(multi & ((g <= 1) | (net <= intra)), BOTTLENECK_NIC, BOTTLENECK_INTRA)
        per_step = 2.0 if all_reduce else 1.0
        inter_steps = where(multi, per_step * (n - 1.0), 0.0)
        intra_steps = per_step * (ranks - 1.0) - inter_steps
        simple_per_byte = factor / ring_bus  # per configuration; times the sizes below
        simple_fill = ring_fill(m, n, g, intra, link)  # engine.nccl_pipeline's policy
        for p in sorted(protos):
            if p == PROTO_LL:
                per_byte = factor / np.minimum(ll_max, ring_bus * E.NCCL_RING_LL_FRACTION)
            elif p == PROTO_LL128:
                per_byte = simple_per_byte / E.NCCL_RING_LL128_FRACTION
            else:
                per_byte = simple_per_byte
            overhead = E.NCCL_NET_OVERHEAD_US * (3.0 if p == PROTO_SIMPLE else 1.0)
            own = intra_lat["ring"][p]
            step_intra = where(multi, max(own, overhead), own) if any_multi else own
            # With one GPU per host NCCL charges the tree's network latency (ppn == 1).
            step_net = where(g > 1, net_lat["ring"][p], net_lat["tree"][p])
            lat_us = (
                E.NCCL_BASE_LATENCY_US["ring"][p]
                + intra_steps * step_intra
                + inter_steps * step_net
            )
            if p == PROTO_SIMPLE and all_reduce and any_multi:
                # "Plateau effect of ring": once each channel's share per rank reaches 64 bytes.
                threshold = where(multi, 64.0 * E.NCCL_ASSUMED_CHANNELS * ranks, np.inf)
                raised = lat_us * E.NCCL_RING_PLATEAU.get(arch, 1.9)
                lat_us = where(m >= threshold, raised, lat_us)
            fill = simple_fill if p == PROTO_SIMPLE else None
            picker.offer(ALG_RING, p, lat_us * US, per_byte, ring_code, fill)

    # --- Tree (all-reduce, several hosts): a chain inside each host, a double binary tree across.
    # Each GPU's link carries the message up and down (2M); each host's NICs carry 2M, or M when
    # there are only 2 hosts (each is root of one tree and leaf of the other).
    if all_reduce and ALG_TREE in algos and any_multi:
        net_share = where(n <= 2, 1.0, 2.0)
        intra_side = where(g > 1, 2.0 / intra, 0.0)
        net_side = net_share / net
        per_byte = np.maximum(intra_side, net_side) / E.NCCL_TREE_FRACTION
        code = where(net_side >= intra_side, BOTTLENECK_NIC, BOTTLENECK_INTRA)
        # frexp's exponent of bytes / 64 is log2 + 1: column 0 (below 64 B) and 24 (from 512 MiB)
        # are 1, columns 1..23 NCCL's factors for log2 = 0..22.
        _, exponent = np.frexp(m * (1.0 / 64.0))
        idx = np.minimum(np.maximum(exponent, 0), 24)  # np.clip costs 10x on small arrays
        depth = _floor_log2(n)
        for p in sorted(protos):
            if p == PROTO_LL:
                seconds_per_byte = np.maximum(per_byte / E.NCCL_TREE_LL_FRACTION, 2.0 / ll_max)
            elif p == PROTO_LL128:
                seconds_per_byte = per_byte / E.NCCL_TREE_LL128_FRACTION
            else:
                seconds_per_byte = per_byte
            corrected = _INVERSE_TREE_CORRECTION[p][idx] * seconds_per_byte
            lat_us = E.NCCL_BASE_LATENCY_US["tree"][p] + 2.0 * (
                (g - 1.0) * intra_lat["tree"][p] + depth * net_lat["tree"][p]
            )
            lat = where(multi, lat_us * US, np.inf)
            fill = scaled_step(ALG_TREE, m, n, g, fill_scale) if p == PROTO_SIMPLE else None
            picker.offer(ALG_TREE, p, lat, corrected, code, fill)

    # --- NVLS: the NVSwitch reduces (Hopper+ on NVSwitch, Simple only, all-reduce here).
    has_nvls = (nvls_bw > 0) & (g > 1)
    if all_reduce and PROTO_SIMPLE in protos and has_nvls.any():
        safe = where(nvls_bw > 0, nvls_bw, 1.0)
        if ALG_NVLS in algos:  # one host (multi-host NVLS needs CollNet, not modelled)
            nvls_lat = E.NCCL_HW_LATENCY_US["nvlink"]["nvls"][PROTO_SIMPLE] * US
            picker.offer(
                ALG_NVLS,
                PROTO_SIMPLE,
                where(has_nvls & ~multi, nvls_lat, np.inf),
                1.0 / safe,
                np.int64(BOTTLENECK_INTRA),
                scaled_step(ALG_NVLS, m, n, g, fill_scale),
            )
        if ALG_NVLS_TREE in algos and any_multi:  # NVLS inside hosts, trees across them
            # The in-host NVLS phases reach NVLS_TREE_SHARE of one host's NVLS rate when the
            # network's tree runs through the same channels (the two-host ceiling).
            intra_side = 1.0 / (safe * E.NVLS_TREE_SHARE)
            net_side = where(n <= 2, 1.0, 2.0) / net
            lat_us = (
                E.NCCL_HW_LATENCY_US["nvlink"]["nvls_tree"][PROTO_SIMPLE]
                + 2.0 * _floor_log2(n) * net_lat["nvls_tree"][PROTO_SIMPLE]
            )
            code = where(net_side >= intra_side, BOTTLENECK_NIC, BOTTLENECK_INTRA)
            picker.offer(
                ALG_NVLS_TREE,
                PROTO_SIMPLE,
                where(has_nvls & multi, lat_us * US, np.inf),
                np.maximum(intra_side, net_side),
                code,
                scaled_step(ALG_NVLS_TREE, m, n, g, fill_scale),
            )
    return picker.result(kind, m, ranks, with_busbw)


class _Picker:
    """Keeps the fastest candidate seen so far, element by element: its time, its index, its
    link and whether it is latency-bound. Blends are arithmetic, in place, on int8 and bool
    arrays: several times faster than ``np.where`` or ``np.choose`` on large arrays."""

    def __init__(self, nbytes: F64, shape: tuple[int, ...]) -> None:
        self.m = nbytes
        self.shape = shape
        self.seconds: F64 | None = None
        self.index: NDArray[np.int8] = np.zeros(shape, dtype=np.int8)
        self.code: NDArray[np.int8] = np.zeros(shape, dtype=np.int8)
        self.latency_bound: NDArray[np.bool_] = np.zeros(shape, dtype=bool)
        self.fill: F64 | None = None  # the chosen candidate's pipeline fill, once one has any
        self.algs: list[int] = []
        self.protos: list[int] = []

    def offer(
        self,
        alg: int,
        proto: int,
        lat: ArrayLike,
        per_byte: ArrayLike,
        code: ArrayLike,
        fill: ArrayLike | None = None,
    ) -> None:
        """A candidate taking ``lat + nbytes * per_byte`` seconds by NCCL's tuner, bounded by
        ``code``, and ``fill`` more in fact: the pipeline fill NCCL's tuner does not see, so it
        is added to the chosen candidate's time without changing the choice."""
        bw = np.multiply(self.m, per_byte)
        bound = np.greater_equal(lat, bw)
        if isinstance(bw, np.ndarray) and bw.shape == self.shape:
            t = np.add(bw, lat, out=bw)  # in place: no new array
        else:
            t = np.add(bw, lat)
        i = len(self.algs)
        self.algs.append(alg)
        self.protos.append(proto)
        code8 = np.asarray(code, dtype=np.int8)
        if self.seconds is None:
            self.seconds = np.empty(self.shape)
            self.seconds[...] = t
            self.index[...] = 0
            self.code[...] = code8
            self.latency_bound[...] = bound
            if fill is not None:
                self.fill = np.empty(self.shape)
                self.fill[...] = fill
            return
        better = np.less(t, self.seconds)
        if fill is not None or self.fill is not None:
            if self.fill is None:
                self.fill = np.zeros(self.shape)
            np.copyto(self.fill, 0.0 if fill is None else fill, where=better)
        np.minimum(self.seconds, t, out=self.seconds)
        b8 = better.view(np.int8)
        step = np.subtract(np.int8(i), self.index)
        step *= b8
        self.index += step
        step = np.subtract(code8, self.code)
        step *= b8
        self.code += step
        self.latency_bound &= ~better
        self.latency_bound |= bound & better

    def result(self, kind: str, m: F64, ranks: F64, with_busbw: bool) -> CollectiveTime:
        shape = self.shape
        if self.seconds is None:
            inf = np.full(shape, np.inf)
            none = np.full(shape, -1, dtype=np.int64)
            return CollectiveTime(inf, none, none, np.full(shape, np.nan), none)
        seconds = self.seconds if self.fill is None else self.seconds + self.fill
        alone = ranks <= 1
        if alone.any():
            seconds = where(alone, 0.0, seconds)
        alg = np.asarray(self.algs, dtype=np.int64)[self.index]
        proto = np.asarray(self.protos, dtype=np.int64)[self.index]
        code = self.code.astype(np.int64)
        code[self.latency_bound] = BOTTLENECK_LATENCY
        busbw = bus_bandwidth_of(kind, m, ranks, seconds) if with_busbw else np.asarray(np.nan)
        return CollectiveTime(seconds, alg, proto, busbw, code)


def _shaped(a: NDArray[Any], shape: tuple[int, ...]) -> NDArray[Any]:
    return a if a.shape == shape else np.broadcast_to(a, shape)


# --- TPU: ICI inside a slice, DCN between slices --------------------------------------------------


def _torus(
    axes: tuple[ArrayLike, ArrayLike, ArrayLike], wrapped: tuple[ArrayLike, ArrayLike, ArrayLike]
) -> tuple[F64, F64]:
    """A slice's axes stacked (p) with their links per chip-pair, 2 where wrapped (f)."""
    p = np.stack(np.broadcast_arrays(*(_f(a) for a in axes)))
    f = where(np.stack(np.broadcast_arrays(*(np.asarray(w) for w in wrapped))), 2.0, 1.0)
    p, f = np.broadcast_arrays(p, f)
    return p, f


def _ici_time(kind: str, m: F64, chips: F64, bw: F64, lat: F64) -> CollectiveTime:
    """An ICI collective's time from its bandwidth and latency terms, bound by the larger."""
    code = np.asarray(where(bw >= lat, BOTTLENECK_ICI, BOTTLENECK_LATENCY), dtype=np.int64)
    seconds = bw + lat
    shape = seconds.shape
    return CollectiveTime(
        seconds=seconds,
        algorithm=np.full(shape, ALG_ICI, dtype=np.int64),
        protocol=np.full(shape, PROTO_NONE, dtype=np.int64),
        bus_bandwidth=bus_bandwidth_of(kind, m, chips, seconds),
        bottleneck=code,
    )


def ici_collective(
    kind: str,
    nbytes: ArrayLike,
    axes: tuple[ArrayLike, ArrayLike, ArrayLike],
    wrapped: tuple[ArrayLike, ArrayLike, ArrayLike],
    link_bandwidth: ArrayLike,
    hop_latency: ArrayLike,
) -> CollectiveTime:
    """A collective over a TPU slice's torus, all axes at once (XLA splits the array so that every
    axis's links work together), not one axis after another.

    Each chip must send busfactor(N) x M bytes over its links: sum over axes of f x B, with f = 2
    on a wrapped axis (two counter-rotating rings) and 1 on an open one; and no axis can carry
    less than its share when reduced last, 2(p-1)/N x M / (f x B) for an all-reduce. The slower
    of the two bounds is the time."""
    m = _f(nbytes)
    p, f = _torus(axes, wrapped)
    b = _f(link_bandwidth)
    chips = np.prod(p, axis=0)
    capacity = np.sum(where(p > 1, f, 0.0), axis=0) * b
    per_axis = np.max((p - 1.0) / np.maximum(chips, 1.0) / f, axis=0) / b
    passes = 2.0 if kind == ALL_REDUCE else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = np.maximum(bus_factor(kind, chips) * m / capacity, passes * per_axis * m)
    bw = where(chips > 1, bw, 0.0)
    steps = passes * np.sum(p - 1.0, axis=0)
    lat = where(chips > 1, NCCL_BASE_LATENCY + steps * _f(hop_latency), 0.0)
    return _ici_time(kind, m, chips, bw, lat)


def dcn_allreduce_seconds(
    bytes_per_host: ArrayLike,
    slices: ArrayLike,
    dcn_bandwidth: ArrayLike,
    dcn_hop_latency: ArrayLike = E.DCN_HOP_LATENCY,
) -> F64:
    """The DCN part of a multislice all-reduce: a ring over ``slices`` slices, each host sending
    and receiving 2(S-1)/S of the ``bytes_per_host`` its chips hold (after the reduce-scatter
    inside the slice) over its data-center NIC, plus 2(S-1) hops; 0 for one slice."""
    s = _f(slices)
    with np.errstate(divide="ignore", invalid="ignore"):
        dcn = 2.0 * (s - 1.0) / s * _f(bytes_per_host) / _f(dcn_bandwidth)
        lat = NCCL_BASE_LATENCY + 2.0 * (s - 1.0) * _f(dcn_hop_latency)
    return where(s > 1, dcn + lat, 0.0)


def multislice_allreduce(
    nbytes: ArrayLike,
    slices: ArrayLike,
    slice_time: CollectiveTime,
    chips_per_slice: ArrayLike,
    chips_per_host: ArrayLike,
    dcn_bandwidth: ArrayLike,
    dcn_hop_latency: ArrayLike = E.DCN_HOP_LATENCY,
) -> CollectiveTime:
    """Data parallelism across TPU slices: reduce-scatter inside each slice (ICI), all-reduce of
    each chip's 1/chips shard across slices over the hosts' data-center NICs (a ring of slices:
    each host carries 2(S-1)/S of its chips' shards), all-gather inside the slice. ``slice_time``
    is the all-reduce inside one slice (its reduce-scatter plus all-gather)."""
    m = _f(nbytes)
    s = _f(slices)
    shard_per_host = m * _f(chips_per_host) / _f(chips_per_slice)
    dcn = dcn_allreduce_seconds(shard_per_host, s, dcn_bandwidth, dcn_hop_latency)
    seconds = slice_time.seconds + dcn
    ranks = s * _f(chips_per_slice)
    code = where(dcn > slice_time.seconds, BOTTLENECK_NIC, slice_time.bottleneck)
    alg = np.asarray(where(s > 1, ALG_MULTISLICE, slice_time.algorithm), dtype=np.int64)
    return CollectiveTime(
        seconds=seconds,
        algorithm=alg,
        protocol=np.broadcast_to(slice_time.protocol, seconds.shape).astype(np.int64),
        bus_bandwidth=bus_bandwidth_of(ALL_REDUCE, m, ranks, seconds),
        bottleneck=np.asarray(code, dtype=np.int64),
    )


# --- all-to-all: mixture-of-experts dispatch and combine ------------------------------------------


def nccl_all_to_all(
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    fabric: GpuFabric,
    *,
    with_busbw: bool = True,
) -> CollectiveTime:
    """ncclAllToAll (nccl-tests ``alltoall_perf``) over ``hosts`` hosts of ``per_host`` GPUs: every
    rank sends ``nbytes / R`` to each of the R ranks (``nbytes`` is the per-rank buffer, as the
    log's size column). NCCL runs it as grouped sends and receives, each peer on its own path:

    * the (g-1)/R of the buffer bound for the host's other GPUs crosses the GPU's NVLink (or
      PCIe), at the link's achieved rate (NVLINK_EFFICIENCY: the same Simple-protocol overhead
      nccl-tests shows as the busbw of every non-all-reduce collective on NVLink, issue 212);
    * the (R-g)/R bound for other hosts crosses the host's NICs, shared by its g GPUs (each
      GPU's NIC, or a neighbour's through PXN); the two streams run at once, the slower sets
      the time. So on n hosts the busbw tends to n/(n-1) x a GPU's share of the NICs, as
      nccl-tests issue 130 states (sjeaugey: "2x network bandwidth per GPU" on 2 nodes).

    No NVLS, no tree: nothing is reduced, every byte goes where it is addressed. Latency: a
    base, the first hop (NVLink or network), and ALLTOALL_PEER_LATENCY for every further peer
    (the p2p operations are issued one peer after another)."""
    m = _f(nbytes)
    n = _f(hosts)
    g = _f(per_host)
    ranks = n * g
    multi = n > 1
    intra_share = where(ranks > 0, (g - 1.0) / np.maximum(ranks, 1.0), 0.0)
    inter_share = where(multi, (ranks - g) / np.maximum(ranks, 1.0), 0.0)
    intra = intra_share * m / _f(fabric.intra_bandwidth)
    with np.errstate(divide="ignore", invalid="ignore"):
        inter = where(multi, inter_share * m * g / _f(fabric.net_bandwidth), 0.0)
    bw = np.maximum(intra, inter)
    link = fabric.intra_link if fabric.intra_link in ("nvlink", "xgmi", "pcie") else "pcie"
    first_hop = where(multi, E.NETWORK_HOP_LATENCY, E.intra_hop_latency(link))
    lat = where(
        ranks > 1,
        NCCL_BASE_LATENCY + first_hop + (ranks - 2.0) * E.ALLTOALL_PEER_LATENCY,
        0.0,
    )
    seconds = bw + lat
    code = where(inter >= intra, BOTTLENECK_NIC, BOTTLENECK_INTRA)
    code = np.asarray(where(bw >= lat, code, BOTTLENECK_LATENCY), dtype=np.int64)
    shape = np.broadcast(seconds, code).shape
    return CollectiveTime(
        seconds=np.broadcast_to(seconds, shape),
        algorithm=np.full(shape, ALG_P2P, dtype=np.int64),
        protocol=np.full(shape, PROTO_SIMPLE, dtype=np.int64),
        bus_bandwidth=(
            bus_bandwidth_of(ALL_TO_ALL, m, ranks, seconds) if with_busbw else np.asarray(np.nan)
        ),
        bottleneck=np.broadcast_to(code, shape),
    )


def ici_all_to_all(
    nbytes: ArrayLike,
    axes: tuple[ArrayLike, ArrayLike, ArrayLike],
    wrapped: tuple[ArrayLike, ArrayLike, ArrayLike],
    link_bandwidth: ArrayLike,
    hop_latency: ArrayLike,
) -> CollectiveTime:
    """All-to-all over a TPU slice's torus (XLA's AllToAll), bounded by the bisection: of the N
    chips' buffers of M, N/2 x N/2 x M/N = M N/4 bytes cross the middle of every axis each
    way, over the N/p links of that plane (two per chip-pair on a wrapped axis, f = 2). The
    axes carry their parts at once, so the busiest sets the time: max over axes of
    M p / (4 f B); on one open line of p chips, M p / (4B). Latency: a base and p/2 hops
    along the longest axis (the farthest chip)."""
    m = _f(nbytes)
    p, f = _torus(axes, wrapped)
    b = _f(link_bandwidth)
    chips = np.prod(p, axis=0)
    per_axis = np.max(where(p > 1, p / (4.0 * f), 0.0), axis=0)
    # With a single axis of 2 chips, the whole M/2 crosses the one link: p/(4f) = 1/2.
    bw = where(chips > 1, per_axis * m / b, 0.0)
    far = np.max(np.floor(p / where(f > 1, 2.0, 1.0)), axis=0)
    lat = where(chips > 1, NCCL_BASE_LATENCY + far * _f(hop_latency), 0.0)
    return _ici_time(ALL_TO_ALL, m, chips, bw, lat)


# --- the reduction server, with its machine's limits ----------------------------------------------


def reducer_bandwidth(
    nic_bandwidth: ArrayLike,
    vcpus: ArrayLike,
    gradient_dtype: str = "fp32",
    share: ArrayLike = 1.0,
) -> F64:
    """Bytes/s of gradient one reducer takes in (and sends back), the slowest of: its NIC
    (achieved), its CPUs' summation rate for the dtype, and its CPUs' TCP packet processing (in
    and out, so half of it per direction); times ``share``, the part of a shared pool's bandwidth
    this job gets (1 / the jobs bound to the pool that run at once)."""
    v = _f(vcpus)
    sum_rate = v * E.REDUCER_SUM_BYTES_PER_VCPU.get(
        gradient_dtype, E.REDUCER_SUM_BYTES_PER_VCPU["bf16"]
    )
    tcp_rate = v * E.REDUCER_TCP_BYTES_PER_VCPU / 2.0
    own = np.minimum(np.minimum(_f(nic_bandwidth), sum_rate), tcp_rate)
    return own * np.minimum(np.maximum(_f(share), 0.0), 1.0)  # np.clip: 10x the cost here


def reduction_server_collective(
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: ArrayLike,
    fabric: GpuFabric,
    reducers: ArrayLike,
    reducer_rate: ArrayLike,
    *,
    with_busbw: bool = True,
) -> CollectiveTime:
    """Vertex AI Reduction Server / BytePS: the gradient is partitioned evenly over the k
    reducers; each host reduces inside itself (NCCL reduce-scatter / NVLS), sends M to the
    reducers and gets M back; the reducers together carry n x M each way at ``reducer_rate`` each
    (:func:`reducer_bandwidth`). Partitions stream through the phases, so the slowest sets the
    pace; latencies add. Infinite for k = 0."""
    m = _f(nbytes)
    n = _f(hosts)
    g = _f(per_host)
    k = _f(reducers)
    # The in-host phases of large partitions: NCCL's ring with the Simple protocol inside the
    # host (2(g-1)/g x M over the GPU's link), or NVLS where the NVSwitch reduces.
    ring_per_byte = 2.0 * (g - 1.0) / np.maximum(g, 1.0) / _f(fabric.intra_bandwidth)
    nvls = _f(fabric.nvls_bandwidth)
    per_byte = where(
        nvls > 0, np.minimum(ring_per_byte, 1.0 / where(nvls > 0, nvls, 1.0)), ring_per_byte
    )
    hop = E.NCCL_HW_LATENCY_US.get(fabric.intra_link, E.NCCL_HW_LATENCY_US["pcie"])
    # reduce-scatter and all-gather inside the host: a base and g-1 steps each
    intra_lat = (
        where(
            g > 1,
            2.0
            * (
                E.NCCL_BASE_LATENCY_US["ring"][PROTO_SIMPLE] + (g - 1.0) * hop["ring"][PROTO_SIMPLE]
            ),
            0.0,
        )
        * US
    )
    intra_per_byte = where(g > 1, per_byte, 0.0)
    worker_per_byte = 1.0 / _f(fabric.net_bandwidth)
    with np.errstate(divide="ignore"):
        reducer_per_byte = where(k > 0, n / (k * _f(reducer_rate)), np.inf)
    # Every phase moves bytes in proportion to M: the slowest per-byte rate sets the pace, and
    # which one it is does not depend on M (so the codes are computed per configuration).
    inter_per_byte = np.maximum(worker_per_byte, reducer_per_byte)
    slowest = np.maximum(intra_per_byte, inter_per_byte)
    lat = intra_lat + NCCL_BASE_LATENCY + 2.0 * E.NETWORK_HOP_LATENCY
    bw = m * slowest
    seconds = bw + lat
    code = where(reducer_per_byte > worker_per_byte, BOTTLENECK_REDUCERS, BOTTLENECK_NIC)
    code = where(inter_per_byte >= intra_per_byte, code, BOTTLENECK_INTRA)
    code = np.asarray(where(bw >= lat, code, BOTTLENECK_LATENCY), dtype=np.int64)
    return CollectiveTime(
        seconds=seconds,
        algorithm=np.asarray(ALG_REDUCTION_SERVER, dtype=np.int64),
        protocol=np.asarray(PROTO_NONE, dtype=np.int64),
        bus_bandwidth=(
            bus_bandwidth_of(ALL_REDUCE, m, n * g, seconds) if with_busbw else np.asarray(np.nan)
        ),
        bottleneck=code,
    )


# --- the catalog's hardware as fabrics: the functions other modules call --------------------------


def link_efficiency(intra_link: str) -> float:
    return {
        "nvlink": E.NVLINK_EFFICIENCY,
        "pcie": E.PCIE_EFFICIENCY,
        "xgmi": E.XGMI_EFFICIENCY,
        "ici": E.ICI_EFFICIENCY,
    }[intra_link]


def link_bandwidth(accelerator: Accelerator, peers: ArrayLike) -> F64:
    """Line rate (bytes/s per direction) a GPU's collective among ``peers`` GPUs of one host
    reaches: the accelerator's intra_bandwidth on a switched fabric (NVSwitch, PCIe); on an xGMI
    mesh (one link from each GPU to each of the seven others, no switch) only the links to the
    other GPUs of the collective carry it: min(peers - 1, 7) of the 7 (RCCL's rings over 4 of an
    8-GPU host's MI300X use the 3 links between them)."""
    if accelerator.intra_link != "xgmi":
        return np.asarray(accelerator.intra_bandwidth, dtype=np.float64)
    links = np.clip(_f(peers) - 1.0, 1.0, float(XGMI_LINKS_PER_GPU))
    return accelerator.intra_bandwidth * links / XGMI_LINKS_PER_GPU


def network_efficiency(transport: str, per_host: ArrayLike, efa_generation: int = 0) -> F64:
    """Achieved fraction of a host's NIC line rate: NIC_EFFICIENCY, for kernel TCP shared by
    several GPUs the socket transport's loss on top (TCP_SHARED_NIC_EFFICIENCY), and AWS EFA's
    own by generation (efficiency.efa_efficiency). GPUDirect-TCPX / TCPXO keep NIC_EFFICIENCY
    (a published TCPXO run bounds it from below; no TCPX run was found)."""
    g = _f(per_host)
    if transport == "tcp":
        return where(g > 1, E.NIC_EFFICIENCY * E.TCP_SHARED_NIC_EFFICIENCY, E.NIC_EFFICIENCY)
    if transport == "efa":
        return np.full(g.shape, E.efa_efficiency(efa_generation))
    return np.full(g.shape, E.NIC_EFFICIENCY)


def nvls_bandwidth(accelerator: Accelerator) -> float:
    """NVLS's achieved all-reduce algbw (bytes/s) on ``accelerator``'s NVSwitch: its NVLink line
    rate times the generation's NVLS efficiency; 0 without NVSwitch + Hopper or later."""
    if not (accelerator.nvswitch and accelerator.nccl_arch in ("hopper", "blackwell")):
        return 0.0
    return accelerator.intra_bandwidth * E.nvls_efficiency(accelerator.nccl_arch)


def gpu_fabric(
    accelerator: Accelerator, machine: MachineType, per_host: ArrayLike = 8
) -> GpuFabric:
    """The achieved bandwidths NCCL gets on ``machine`` with ``per_host`` GPUs in use."""
    efficiency = network_efficiency(machine.transport, per_host, machine.efa_generation)
    return GpuFabric(
        intra_bandwidth=link_bandwidth(accelerator, per_host)
        * link_efficiency(accelerator.intra_link),
        net_bandwidth=machine.nic_bandwidth * efficiency,
        intra_link=accelerator.intra_link,
        nvls_bandwidth=nvls_bandwidth(accelerator),
        arch=accelerator.nccl_arch or "volta",
    )


# --- NVLink domains larger than a host (GB200 / GB300 NVL72, NVL36) -------------------------------


def hosts_per_domain(machine: MachineType, hosts: ArrayLike) -> F64:
    """Hosts of a job that share one NVLink domain: the most hosts, at most the domain's, that
    divide ``hosts`` evenly (a job is placed on as few domains as it fills, in equal groups:
    18 x 4-GPU hosts of an NVL72 rack are one domain, 36 are two, 20 are two of 10); 1 where the
    domain is the host. NCCL's multi-node NVLink treats each such group as one node: NVLink
    (NVLS) inside it, the hosts' NICs together between groups."""
    n = _f(hosts)
    per_host = max(machine.accelerator_count, 1)
    most = machine.nvlink_domain // per_host if machine.nvlink_domain > per_host else 1
    k = np.ones(n.shape)
    for size in range(most, 1, -1):
        k = np.where((k == 1.0) & (np.mod(n, size) == 0), float(size), k)
    return k


def domain_collective(
    kind: str,
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: int,
    machine: MachineType,
    accelerator: Accelerator,
    algos: set[int] | None = None,
    protos: set[int] | None = None,
) -> CollectiveTime:
    """``kind`` over ``hosts`` hosts whose NVLink domain spans several of them: groups of
    :func:`hosts_per_domain` hosts run as one NCCL node of their GPUs together (NVLS or NVLink
    ring inside, at NVLink rate even across hosts), their NICs together between groups (Ring /
    Tree / NVLSTree over the fabric)."""
    k = hosts_per_domain(machine, hosts)
    fabric = gpu_fabric(accelerator, machine, per_host)
    grouped = GpuFabric(
        intra_bandwidth=fabric.intra_bandwidth,
        net_bandwidth=_f(fabric.net_bandwidth) * k,
        intra_link=fabric.intra_link,
        nvls_bandwidth=fabric.nvls_bandwidth,
        arch=fabric.arch,
    )
    groups, per_group = _f(hosts) / k, per_host * k
    if kind == ALL_TO_ALL:
        return nccl_all_to_all(nbytes, groups, per_group, grouped)
    return nccl_collective(
        kind, nbytes, groups, per_group, grouped, algorithms=algos, protocols=protos
    )


def _wrapped_axes(accelerator: Accelerator, axes: tuple[int, int, int]) -> tuple[bool, bool, bool]:
    chips = axes[0] * axes[1] * axes[2]
    big = accelerator.ici_wrap_chips > 0 and chips >= accelerator.ici_wrap_chips
    w = [big and a >= accelerator.ici_wrap_axis and a > 2 for a in axes]
    return w[0], w[1], w[2]


def intra_host_collective(
    kind: str,
    nbytes: ArrayLike,
    ranks: int,
    accelerator: Accelerator,
    *,
    topology: tuple[int, int, int] | None = None,
    env: Mapping[str, str] | None = None,
) -> CollectiveTime:
    """``kind`` among ``ranks`` accelerators of one host (NVLink, NVSwitch with NVLS, PCIe), or
    of one TPU slice over ICI (``topology`` = the ranks' axes; default a line of ``ranks``).
    The call for tensor parallelism. ``env``: a pod environment (NCCL_ALGO / NCCL_PROTO)."""
    if accelerator.kind == "tpu":
        axes = topology or (ranks, 1, 1)
        link = accelerator.ici_link_bandwidth * E.ICI_EFFICIENCY
        wrapped = _wrapped_axes(accelerator, axes)
        if kind == ALL_TO_ALL:
            return ici_all_to_all(nbytes, axes, wrapped, link, E.ICI_HOP_LATENCY)
        return ici_collective(kind, nbytes, axes, wrapped, link, E.ICI_HOP_LATENCY)
    bus_factor(kind, ranks)  # validates kind
    fabric = GpuFabric(
        intra_bandwidth=link_bandwidth(accelerator, ranks)
        * link_efficiency(accelerator.intra_link),
        net_bandwidth=np.inf,
        intra_link=accelerator.intra_link,
        nvls_bandwidth=nvls_bandwidth(accelerator),
        arch=accelerator.nccl_arch or "volta",
    )
    if kind == ALL_TO_ALL:
        return nccl_all_to_all(nbytes, 1, ranks, fabric)
    algos, protos = parse_nccl_env(env, kind)
    return nccl_collective(kind, nbytes, 1, ranks, fabric, algorithms=algos, protocols=protos)


def inter_host_collective(
    kind: str,
    nbytes: ArrayLike,
    hosts: ArrayLike,
    per_host: int,
    machine: MachineType,
    accelerator: Accelerator,
    *,
    env: Mapping[str, str] | None = None,
    chips_per_slice: int | None = None,
    slice_topology: tuple[int, int, int] | None = None,
) -> CollectiveTime:
    """``kind`` over ``hosts`` hosts of ``per_host`` accelerators each: NCCL over the hosts' NICs
    (its Ring / Tree / NVLSTree and protocol, as its tuner picks; ``env`` restricts it), or for
    TPUs a multislice all-reduce: ICI inside slices of ``chips_per_slice`` chips (the slice's
    ``slice_topology``), DCN between them. The call for data-parallel gradients."""
    if accelerator.kind == "tpu":
        if kind != ALL_REDUCE:
            raise ValueError(
                f"multislice: only the all-reduce is modelled between TPU slices, not {kind}"
            )
        chips = chips_per_slice or per_host
        axes = slice_topology or (chips, 1, 1)
        inside = intra_host_collective(kind, nbytes, chips, accelerator, topology=axes)
        hosts_f = _f(hosts)
        slices = hosts_f * per_host / chips
        dcn = machine.nic_bandwidth * E.NIC_EFFICIENCY
        return multislice_allreduce(nbytes, slices, inside, chips, per_host, dcn)
    if machine.nvlink_domain > per_host:  # an NVLink domain of several hosts (NVL72)
        bus_factor(kind, per_host)  # validates kind
        algos, protos = parse_nccl_env(env, kind)
        return domain_collective(kind, nbytes, hosts, per_host, machine, accelerator, algos, protos)
    fabric = gpu_fabric(accelerator, machine, per_host)
    if kind == ALL_TO_ALL:
        return nccl_all_to_all(nbytes, hosts, per_host, fabric)
    algos, protos = parse_nccl_env(env, kind)
    return nccl_collective(
        kind, nbytes, hosts, per_host, fabric, algorithms=algos, protocols=protos
    )
