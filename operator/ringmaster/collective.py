"""`ringmaster collective`: what nccl-tests should print on given hosts, and a check of a real run.

    ringmaster collective {all-reduce,all-gather,reduce-scatter,all-to-all}
        --machine-type M --hosts N
        [--accelerators-per-host G] [--nic-gbps X] [--min-bytes 8] [--max-bytes 8G]
        [--env NCCL_ALGO=ring] [-o table|json] [--compare LOG]

``--env NAME=VALUE`` takes a pod's NCCL variables: NCCL_ALGO, NCCL_PROTO and NCCL_NVLS_ENABLE
change the prediction; every other NCCL_* variable is listed as having no effect on performance
or as ignored by the engine (engine.nccl_settings), never dropped silently.

Sizes double from ``--min-bytes`` to ``--max-bytes`` and take nccl-tests' binary suffixes (K, M,
G: 1024, 1024^2, 1024^3). For ``all-to-all`` (``alltoall_perf``: mixture-of-experts dispatch and
combine) the size is each rank's buffer, 1/N of it bound for each rank. Per size: time (us),
algbw and busbw (GB/s, 10^9 bytes, nccl-tests' convention) and the algorithm and protocol the
engine expects NCCL (or XLA) to run.

``-o json`` is a stable contract: a list of ``{"bytes", "seconds", "algbwGBps", "busbwGBps",
"algorithm", "protocol"}``; keys may be added, never changed.

``--compare LOG`` reads the text output of a real ``*_perf`` run (nccl-tests), prints measured
beside predicted per size with the error, and a one-line verdict at the largest size; the exit
status is 1 when the measured busbw is more than 25% below the model there (a node pool to look
at), else 0. Bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ringmaster.engine import collectives as C
from ringmaster.engine import nccl_settings
from ringmaster.engine.hardware import (
    Accelerator,
    Catalog,
    CatalogOverrideError,
    MachineType,
    UnknownHardwareError,
)
from ringmaster.engine.units import gbps_to_bytes_per_second
from ringmaster.planning.catalog import CatalogError, load_catalog

EXIT_USAGE = 2
EXIT_BELOW_MODEL = 1
# A measured busbw this far below the model at the largest size makes the check fail.
BELOW_MODEL_LIMIT = 0.25
# Within this of the model the verdict says the hosts perform as expected.
AS_EXPECTED = 0.10
MAX_SIZES = 64
_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_PERF_NAMES = {
    "all_reduce_perf": C.ALL_REDUCE,
    "all_gather_perf": C.ALL_GATHER,
    "reduce_scatter_perf": C.REDUCE_SCATTER,
    "alltoall_perf": C.ALL_TO_ALL,
}


class UsageError(ValueError):
    """Bad input; the message is the one line the user sees."""


def parse_size(text: str) -> int:
    """``8``, ``128K``, ``1M``, ``8G`` -> bytes (binary suffixes, as nccl-tests' -b / -e)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)[bB]?\s*", text)
    if not m:
        raise UsageError(f"size {text!r}: expected a number with an optional K, M or G suffix")
    value = int(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if value < 1:
        raise UsageError(f"size {text!r}: must be at least 1 byte")
    return value


def sizes_between(min_bytes: int, max_bytes: int) -> np.ndarray:
    """min, 2 min, 4 min, ... up to max (as nccl-tests' -f 2)."""
    if max_bytes < min_bytes:
        raise UsageError(f"--max-bytes {max_bytes} is below --min-bytes {min_bytes}")
    out = [min_bytes]
    while out[-1] * 2 <= max_bytes and len(out) < MAX_SIZES:
        out.append(out[-1] * 2)
    return np.asarray(out, dtype=np.float64)


@dataclass(frozen=True)
class Setup:
    kind: str
    machine: MachineType
    accelerator: Accelerator
    hosts: int
    per_host: int
    env: dict[str, str]
    topology: tuple[int, int, int] | None = None
    settings: nccl_settings.NcclSettings = field(default_factory=nccl_settings.NcclSettings)

    @property
    def ranks(self) -> int:
        return self.hosts * self.per_host

    def describe(self) -> str:
        acc = self.accelerator
        if acc.kind == "tpu":
            net = f"ICI {acc.ici_link_bandwidth / 1e9:g} GB/s per link"
        else:
            net = (
                f"{self.machine.nics} x {self.machine.nic_gbps:g} Gbps "
                f"{self.machine.transport.upper()}"
            )
        return (
            f"{self.kind} on {self.hosts} x {self.machine.name} "
            f"({self.per_host} x {acc.name} each, {net})"
        )


def resolve(args: argparse.Namespace, catalog: Catalog) -> Setup:
    """The hosts the flags describe: a machine type, or an accelerator type on its host shape."""
    name = args.machine_type
    per_host = args.accelerators_per_host
    try:
        if name in catalog.machines:
            machine = catalog.machine(name)
            if machine.accelerator is None:
                raise UsageError(
                    f"--machine-type {name} has no accelerators of its own: give the accelerator "
                    "type instead (e.g. --machine-type nvidia-tesla-v100 --accelerators-per-host "
                    "8)"
                )
            accelerator = catalog.accelerator(machine.accelerator)
            per_host = per_host or machine.accelerator_count
            catalog.host(accelerator.name, per_host, machine.name)
        elif name in catalog.accelerators:
            accelerator = catalog.accelerator(name)
            if per_host is None:
                shapes = sorted(catalog.default_machines.get(name, {}))
                per_host = shapes[-1] if shapes else 1
            machine = catalog.host(name, per_host).machine
        else:
            known = sorted([*catalog.machines, *catalog.accelerators])
            raise UsageError(
                f"--machine-type {name!r}: not a machine or accelerator type; known: "
                + ", ".join(known)
            )
    except (UnknownHardwareError, CatalogOverrideError) as exc:
        raise UsageError(f"--accelerators-per-host: {exc}") from None
    if args.nic_gbps is not None:
        if args.nic_gbps <= 0:
            raise UsageError("--nic-gbps must be positive")
        machine = replace(machine, nic_bandwidth=gbps_to_bytes_per_second(args.nic_gbps))
    if args.hosts < 1:
        raise UsageError("--hosts must be at least 1")
    env = {}
    for item in args.env or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE (e.g. NCCL_ALGO=ring)")
        env[key] = value
    topology = None
    if args.topology:
        parts = [int(x) for x in args.topology.lower().split("x") if x.isdigit()]
        if len(parts) not in (2, 3) or "x".join(map(str, parts)) != args.topology.lower():
            raise UsageError(f"--topology {args.topology!r}: expected AxB or AxBxC")
        parts += [1] * (3 - len(parts))
        topology = (parts[0], parts[1], parts[2])
        if accelerator.kind != "tpu":
            raise UsageError("--topology applies to TPU slices only")
    try:
        settings = nccl_settings.classify(env)
    except ValueError as exc:
        raise UsageError(f"--env {exc}") from None
    return Setup(args.kind, machine, accelerator, args.hosts, per_host, env, topology, settings)


def settings_lines(setup: Setup) -> list[str]:
    """What the engine does with each --env NCCL variable (engine.nccl_settings)."""
    lines = setup.settings.notes()
    if setup.settings.ignored:
        lines.append(nccl_settings.ignored_message(setup.settings.ignored))
    return lines


def predict(setup: Setup, sizes: np.ndarray) -> C.CollectiveTime:
    """The collective over all sizes at once (one vectorised call)."""
    acc = setup.accelerator
    try:
        if acc.kind == "tpu":
            chips = setup.ranks
            slice_chips = chips
            if setup.topology is not None:
                slice_chips = setup.topology[0] * setup.topology[1] * setup.topology[2]
                if chips % slice_chips:
                    raise UsageError(
                        f"--hosts x chips per host = {chips} is not a whole number of "
                        f"{slice_chips}-chip slices"
                    )
            if slice_chips == chips:
                return C.intra_host_collective(
                    setup.kind, sizes, chips, acc, topology=setup.topology
                )
            return C.inter_host_collective(
                setup.kind,
                sizes,
                setup.hosts,
                setup.per_host,
                setup.machine,
                acc,
                chips_per_slice=slice_chips,
                slice_topology=setup.topology,
            )
        if setup.hosts == 1:
            return C.intra_host_collective(setup.kind, sizes, setup.per_host, acc, env=setup.env)
        return C.inter_host_collective(
            setup.kind, sizes, setup.hosts, setup.per_host, setup.machine, acc, env=setup.env
        )
    except ValueError as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(str(exc)) from None


def rows(setup: Setup, sizes: np.ndarray) -> list[dict[str, Any]]:
    """The JSON contract: one object per size."""
    t = predict(setup, sizes)
    seconds = np.broadcast_to(t.seconds, sizes.shape)
    busbw = np.broadcast_to(t.bus_bandwidth, sizes.shape)
    alg = np.broadcast_to(t.algorithm, sizes.shape)
    proto = np.broadcast_to(t.protocol, sizes.shape)
    out = []
    for i, size in enumerate(sizes):
        sec = float(seconds[i])
        algbw = size / sec / 1e9 if sec > 0 else None
        bus = float(busbw[i]) / 1e9 if np.isfinite(busbw[i]) else None
        out.append(
            {
                "bytes": int(size),
                "seconds": _sig(sec),
                "algbwGBps": _sig(algbw),
                "busbwGBps": _sig(bus),
                "algorithm": C.ALGORITHM_NAMES.get(int(alg[i]), "none"),
                "protocol": C.PROTOCOL_NAMES.get(int(proto[i]), "-"),
            }
        )
    return out


def _sig(x: float | None, digits: int = 6) -> float | None:
    if x is None or not np.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def _table(header: tuple[str, ...], body: Sequence[tuple[str, ...]], left: set[int]) -> str:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = []
    for row in [header, *body]:
        cells = [
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render(setup: Setup, table: list[dict[str, Any]]) -> str:
    body = [
        (
            str(r["bytes"]),
            _num(None if r["seconds"] is None else r["seconds"] * 1e6, ".2f"),
            _num(r["algbwGBps"], ".2f"),
            _num(r["busbwGBps"], ".2f"),
            r["algorithm"],
            r["protocol"],
        )
        for r in table
    ]
    header = ("size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm", "protocol")
    notes = "".join(f"# {line}\n" for line in settings_lines(setup))
    return f"# predicted {setup.describe()}\n" + notes + _table(header, body, {4, 5})


# --- nccl-tests logs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    bytes: int
    seconds: float
    algbw: float  # GB/s
    busbw: float  # GB/s


def parse_nccl_tests(text: str) -> tuple[str | None, list[Measured]]:
    """The out-of-place columns of an nccl-tests text log, and the collective if the log names it.

    Data lines are ``size count type redop [root] time algbw busbw #wrong time algbw busbw
    #wrong``; the out-of-place time, algbw and busbw are the 8th, 7th and 6th fields from the end
    (the ``root`` column is absent in older versions, ``#wrong`` may be ``N/A``)."""
    kind = None
    found = re.search(
        r"\b(all_reduce_perf|all_gather_perf|reduce_scatter_perf|alltoall_perf)\b", text
    )
    if found:
        kind = _PERF_NAMES[found.group(1)]
    out: list[Measured] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 12 or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        try:
            out.append(
                Measured(
                    int(fields[0]), float(fields[-8]) * 1e-6, float(fields[-7]), float(fields[-6])
                )
            )
        except ValueError:
            continue
    return kind, out


def _hint(setup: Setup) -> str:
    if setup.hosts == 1:
        if setup.accelerator.kind == "tpu":
            return "check the slice's topology and ICI links"
        return "check NVLink / NVSwitch (nvidia-smi topo -m, the fabric manager) and NCCL_P2P_*"
    transport = setup.machine.transport
    return {
        "tcp": "check NIC count, GPUDirect, NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD",
        "tcpx": "check the GPUDirect-TCPX plugin is loaded (NCCL_NET), its NICs and rxdm",
        "tcpxo": "check the GPUDirect-TCPXO plugin is loaded (NCCL_NET), its NICs and rxdm",
        "rdma": "check NIC count (NCCL_IB_HCA), GPUDirect RDMA and the RoCE/IB fabric",
        "efa": "check the aws-ofi-nccl plugin is loaded (NCCL_NET), FI_PROVIDER=efa and the EFAs",
        "dcn": "check the hosts' data-center network",
    }.get(transport, "check NIC count and GPUDirect")


def _human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def compare(setup: Setup, measured: list[Measured]) -> tuple[str, int]:
    """Measured beside predicted per size, then the verdict; and the exit status."""
    sizes = np.asarray([m.bytes for m in measured], dtype=np.float64)
    predicted = rows(setup, sizes)
    body = []
    for m, p in zip(measured, predicted, strict=True):
        pb = p["busbwGBps"]
        err = (m.busbw - pb) / pb if pb else None
        body.append(
            (
                str(m.bytes),
                f"{m.seconds * 1e6:.2f}",
                _num(None if p["seconds"] is None else p["seconds"] * 1e6, ".2f"),
                f"{m.busbw:.2f}",
                _num(pb, ".2f"),
                "-" if err is None else f"{err:+.0%}",
                f"{p['algorithm']}/{p['protocol']}",
            )
        )
    header = (
        "size (B)",
        "measured us",
        "model us",
        "measured busbw",
        "model busbw",
        "error",
        "model algorithm",
    )
    last_m, last_p = measured[-1], predicted[-1]
    where = _human(last_m.bytes)
    status = 0
    if not last_p["busbwGBps"]:
        verdict = f"no bus bandwidth to compare at {where} (one rank)"
    else:
        err = (last_m.busbw - last_p["busbwGBps"]) / last_p["busbwGBps"]
        if abs(err) <= AS_EXPECTED:
            verdict = f"busbw within {abs(err):.0%} of the model at {where}: performs as expected"
        elif err < 0:
            verdict = f"busbw {-err:.0%} below the model at {where}: {_hint(setup)}"
            status = EXIT_BELOW_MODEL if -err > BELOW_MODEL_LIMIT else 0
        else:
            verdict = (
                f"busbw {err:.0%} above the model at {where}: the catalog undersells these hosts "
                "(check --machine-type and --nic-gbps)"
            )
    text = (
        f"# measured vs predicted: {setup.describe()}\n"
        + _table(header, body, {6})
        + f"\nverdict: {verdict}"
    )
    return text, status


# --- the command ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "kind",
        nargs="?",
        choices=C.ALL_KINDS,
        default=None,
        help="the collective (default all-reduce, or the one the --compare log ran)",
    )
    parser.add_argument(
        "--machine-type",
        required=True,
        help="a machine type (a3-highgpu-8g) or an accelerator type (nvidia-tesla-v100)",
    )
    parser.add_argument("--hosts", type=int, required=True, help="hosts taking part")
    parser.add_argument(
        "--accelerators-per-host", type=int, default=None, help="GPUs or TPU chips per host"
    )
    parser.add_argument("--nic-gbps", type=float, default=None, help="override the hosts' NICs")
    parser.add_argument("--min-bytes", default="8", help="smallest size (default 8)")
    parser.add_argument("--max-bytes", default="8G", help="largest size (default 8G)")
    parser.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="NCCL environment, e.g. NCCL_ALGO=ring, NCCL_PROTO=^LL128 or NCCL_NVLS_ENABLE=0 "
        "(repeatable; other NCCL_* variables are listed as no-effect or ignored)",
    )
    parser.add_argument("--topology", help="TPU slice topology (AxB or AxBxC)")
    parser.add_argument("--compare", metavar="LOG", help="an nccl-tests *_perf text log")
    parser.add_argument(
        "--catalog", metavar="FILE", help="a hardware catalog file (docs/catalog.md)"
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _read(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--compare {path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--compare {path}: not a text file") from None


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BrokenPipeError:  # `ringmaster collective ... | head`
        sys.stderr.close()
        return 0


def _run(args: argparse.Namespace) -> int:
    try:
        catalog = load_catalog(args.catalog)
        if args.compare:
            log_kind, measured = parse_nccl_tests(_read(args.compare))
            if not measured:
                raise UsageError(f"--compare {args.compare}: no nccl-tests result lines found")
            if args.kind and log_kind and args.kind != log_kind:
                raise UsageError(f"the log ran {log_kind}, not {args.kind}")
            args.kind = args.kind or log_kind or C.ALL_REDUCE
            setup = resolve(args, catalog)
            if args.output == "json":
                predicted = rows(setup, np.asarray([m.bytes for m in measured], dtype=float))
                out = [
                    {"measured": m.__dict__, "predicted": p}
                    for m, p in zip(measured, predicted, strict=True)
                ]
                print(json.dumps(out, indent=2))
                return 0
            text, status = compare(setup, measured)
            print(text)
            return status
        args.kind = args.kind or C.ALL_REDUCE
        setup = resolve(args, catalog)
        sizes = sizes_between(parse_size(args.min_bytes), parse_size(args.max_bytes))
        table = rows(setup, sizes)
        if args.output == "json" and setup.settings.ignored:  # the JSON list stays a contract
            print(nccl_settings.ignored_message(setup.settings.ignored), file=sys.stderr)
        print(json.dumps(table, indent=2) if args.output == "json" else render(setup, table))
        return 0
    except (UsageError, CatalogError, CatalogOverrideError, UnknownHardwareError) as exc:
        print(f"ringmaster collective: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
