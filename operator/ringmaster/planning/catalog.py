"""The hardware catalog a cluster extends: its file format, how layers merge, what it can place.

The engine ships a built-in catalog (``engine/hardware.py``, every figure with its source). A
cluster adds accelerators and machine types, or corrects figures and prices, with no code or CRD
change, in a YAML or JSON document of the format below: a file (``ringmaster plan --catalog``,
``$RINGMASTER_CATALOG``) or the chart's catalog ConfigMap, which the operator re-reads while it
runs (``controllers/catalog.py``). docs/catalog.md is the user's page.

Merging, one rule: layers apply in order (built-in, then the file, then the ConfigMap); an entry
names an accelerator, machine type or host shape; an existing entry's given fields replace the
earlier values (``peakTFLOPS`` merges by precision), the fields left out keep them; a new entry
needs every required field. A new accelerator's host shapes come from ``defaultMachines``, or else
from the machine types that carry it (``accelerator`` + ``acceleratorCount``). A document that
fails any check changes nothing: the error names the entry and field.

Also here: :func:`hardware_problem`, why a job's accelerator, host shape or topology cannot be
placed with a given catalog (the ``UnknownAccelerator`` condition), the catalog the operator
currently uses (:func:`install_catalog`, :func:`installed_catalog`), and the pools' own profiles
plans use over it (:func:`install_pool_profiles`, :func:`with_pool_profiles`; PoolProfile,
docs/pool-profiles.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ringmaster.api import ACCELERATOR_NAME_PATTERN, is_tpu, topology_dims
from ringmaster.api.common import MACHINE_TYPE
from ringmaster.engine.hardware import (
    DEFAULT_CATALOG,
    Accelerator,
    Catalog,
    MachineType,
    UnknownHardwareError,
)
from ringmaster.engine.profiled import PoolMeasurement, slowest
from ringmaster.engine.serving_hosts import replica_hosts
from ringmaster.engine.units import GB, TERA, gbps_to_bytes_per_second

__all__ = [
    "HOW_TO_ADD",
    "AcceleratorEntry",
    "Catalog",
    "CatalogError",
    "CatalogFile",
    "MachineTypeEntry",
    "apply_catalog",
    "choose_pool_profiles",
    "hardware_problem",
    "install_catalog",
    "install_pool_profiles",
    "installed_catalog",
    "installed_pool_profiles",
    "load_catalog",
    "parse_catalog",
    "with_pool_profiles",
]

# The engine's precisions, spelled out for the schema (a test keeps the two equal).
Precision = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8", "fp4"]

# Where to tell a user to add an entry (docs/catalog.md has the format and an example).
HOW_TO_ADD = (
    "add it to the operator's hardware catalog (the chart's catalog ConfigMap, values "
    "catalog.overrides; docs/catalog.md): an accelerators entry and a machine type that carries it"
)


# The most accelerators one host's own NVLink / NVSwitch joins: 16 (a2-megagpu-16g, HGX-2). A
# machine type with more must say which NVLink domain its GPUs share (nvlinkDomain).
MAX_HOST_ACCELERATORS = 16
# The largest NVLink domain NVIDIA's NVLink Switch system builds: 576 GPUs (NVLink 5, NVIDIA's
# NVLink and NVLink Switch page, 2024).
MAX_NVLINK_DOMAIN = 576
# The largest spine oversubscription a catalog may state: fabrics are built from 1:1 (NVIDIA's
# reference designs) to a few to one (3:1 is a common enterprise leaf-spine ratio); 16:1 only
# guards against a figure typed as a percentage or a bandwidth.
MAX_SPINE_OVERSUBSCRIPTION = 16.0


class CatalogError(ValueError):
    """A catalog document that cannot be applied; the message names the entry and field."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class AcceleratorEntry(_Entry):
    """One accelerator chip, in the units datasheets quote. Required for a new one: kind,
    peakTFLOPS, memoryGB, memoryBandwidthGBps, intraLink, intraBandwidthGBps (a TPU also
    topologyDims and iciLinkGBps)."""

    kind: Literal["gpu", "tpu"] | None = None
    peak_tflops: dict[Precision, float] | None = Field(default=None, alias="peakTFLOPS")
    """Dense peak per precision, TFLOPS (int8: TOPS); no structured sparsity."""
    memory_gb: float | None = Field(default=None, alias="memoryGB", gt=0)
    memory_bandwidth_gbps: float | None = Field(default=None, alias="memoryBandwidthGBps", gt=0)
    """HBM bandwidth, GB/s."""
    intra_link: Literal["nvlink", "pcie", "xgmi", "ici"] | None = Field(
        default=None, alias="intraLink"
    )
    """How the accelerators of one host talk: NVLink, PCIe, AMD Infinity Fabric (xGMI, a fully
    connected mesh of 7 links per GPU), or a TPU's ICI."""
    intra_bandwidth_gbps: float | None = Field(default=None, alias="intraBandwidthGBps", gt=0)
    """Per accelerator and direction, to its host peers, GB/s."""
    price_per_hour_usd: float | None = Field(default=None, alias="pricePerHourUSD", ge=0)
    """Per accelerator-hour when billed per chip; leave out when the machine price includes it."""
    ici_link_gbps: float | None = Field(default=None, alias="iciLinkGBps", ge=0)
    """TPU: bytes per link and direction, GB/s."""
    ici_wrap_axis: int | None = Field(default=None, alias="iciWrapAxis", ge=0)
    ici_wrap_chips: int | None = Field(default=None, alias="iciWrapChips", ge=0)
    topology_dims: Literal[2, 3] | None = Field(default=None, alias="topologyDims")
    """TPU: axes of a slice topology (2 for "4x4", 3 for "2x2x4")."""
    nvswitch: bool | None = None
    """GPU on an NVSwitch host where NCCL can run NVLS (Hopper or newer SXM)."""
    nccl_arch: Literal["volta", "ampere", "hopper", "blackwell", "cdna3"] | None = Field(
        default=None, alias="ncclArch"
    )
    source: str | None = None
    """Where the figures come from (datasheet, date): every entry should say."""


class MachineTypeEntry(_Entry):
    """One host machine type. Required for a new one: vcpus, nicGbps, pricePerHourUSD."""

    vcpus: int | None = Field(default=None, ge=1)
    nic_gbps: float | None = Field(default=None, alias="nicGbps", gt=0)
    """The host's network for accelerator traffic, all its NICs together, Gbps."""
    nics: int | None = Field(default=None, ge=1)
    """NICs that carry accelerator traffic (8 on a3-ultragpu-8g)."""
    transport: Literal["tcp", "tcpx", "tcpxo", "rdma", "efa", "dcn"] | None = None
    price_per_hour_usd: float | None = Field(default=None, alias="pricePerHourUSD", ge=0)
    """USD per hour, bundled accelerators included."""
    accelerator: str | None = None
    """The accelerator the machine carries (A2, A3, A4, G2, TPU hosts); none for N1 with
    attached GPUs."""
    accelerator_count: int | None = Field(
        default=None, alias="acceleratorCount", ge=1, le=MAX_NVLINK_DOMAIN
    )
    """Accelerators of one host (node): at most MAX_HOST_ACCELERATORS where the NVLink domain
    is the host, at most ``nvlinkDomain`` (and a divisor of it) where it spans hosts."""
    nvlink_domain: int | None = Field(
        default=None, alias="nvlinkDomain", ge=2, le=MAX_NVLINK_DOMAIN
    )
    """GPUs in one NVLink domain when it spans several hosts (a GB200 NVL72 rack of 4-GPU
    trays: 72); left out, the domain is the host."""
    efa_generation: int | None = Field(default=None, alias="efaGeneration", ge=1, le=4)
    """AWS EFA's generation (1: p4d / p4de, 2: p5, 3: p5en, 4: p6), for ``transport: efa``."""
    spine_oversubscription: float | None = Field(
        default=None, alias="spineOversubscription", ge=1.0, le=MAX_SPINE_OVERSUBSCRIPTION
    )
    """The oversubscription of the fabric between topology blocks (GKE blocks, AWS
    network-node layer 1) these hosts sit in: 1 non-blocking, 2 for 2:1, as your fabric states
    it. Left out: 1 (no cloud publishes it), so spreading a gang over blocks costs nothing in
    the model (docs/topology.md)."""
    source: str | None = None


class CatalogFile(_Entry):
    """A catalog document: up to three maps, each keyed by name."""

    accelerators: dict[str, AcceleratorEntry] = Field(default_factory=dict)
    machine_types: dict[str, MachineTypeEntry] = Field(default_factory=dict, alias="machineTypes")
    default_machines: dict[str, dict[int, str]] = Field(
        default_factory=dict, alias="defaultMachines"
    )
    """Host shapes: accelerator -> {accelerators per host: the machine type GKE gives it}."""


_ACC_REQUIRED = (
    "kind",
    "peak_tflops",
    "memory_gb",
    "memory_bandwidth_gbps",
    "intra_link",
    "intra_bandwidth_gbps",
)
_TPU_REQUIRED = ("topology_dims", "ici_link_gbps")
_MACHINE_REQUIRED = ("vcpus", "nic_gbps", "price_per_hour_usd")
_ALIASES = {
    name: (field.alias or name)
    for model in (AcceleratorEntry, MachineTypeEntry)
    for name, field in model.model_fields.items()
}


def parse_catalog(text: str, *, where: str = "catalog") -> CatalogFile:
    """Validate a catalog document (YAML or JSON); errors name the entry and field."""
    import yaml  # deferred: the engine and the API import fast without it

    from ringmaster.api.manifest import KubectlYamlLoader

    try:
        data = yaml.load(text, Loader=KubectlYamlLoader)  # two equal keys: refused, not merged
    except yaml.YAMLError as exc:
        raise CatalogError(f"{where}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: expected a map (accelerators, machineTypes, defaultMachines)")
    try:
        return CatalogFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            first["msg"] = "unknown field (docs/catalog.md lists the fields)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise CatalogError(f"{where}: {path}: {first['msg']}{more}") from None


def _given(entry: BaseModel) -> dict[str, Any]:
    return {k: v for k, v in entry.model_dump().items() if v is not None}


def _accelerator(name: str, fields: Mapping[str, Any], base: Accelerator | None) -> Accelerator:
    values: dict[str, Any] = {}
    scaled = {
        "memory_gb": ("memory_bytes", GB),
        "memory_bandwidth_gbps": ("memory_bandwidth", GB),
        "intra_bandwidth_gbps": ("intra_bandwidth", GB),
        "ici_link_gbps": ("ici_link_bandwidth", GB),
        "price_per_hour_usd": ("price_per_hour", 1.0),
    }
    for key, value in fields.items():
        if key == "peak_tflops":
            flops = {p: v * TERA for p, v in value.items()}
            values["peak_flops"] = {**(base.peak_flops if base else {}), **flops}
        elif key in scaled:
            attr, scale = scaled[key]
            values[attr] = value * scale
        else:
            values[key] = value
    return replace(base, **values) if base else Accelerator(name=name, **values)


def _machine(name: str, fields: Mapping[str, Any], base: MachineType | None) -> MachineType:
    values: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "nic_gbps":
            values["nic_bandwidth"] = gbps_to_bytes_per_second(value)
        elif key == "price_per_hour_usd":
            values["price_per_hour"] = value
        else:
            values[key] = value
    return replace(base, **values) if base else MachineType(name=name, **values)


def _missing(where: str, fields: Mapping[str, Any], required: tuple[str, ...], what: str) -> None:
    missing = [_ALIASES[k] for k in required if k not in fields]
    if missing:
        raise CatalogError(f"{where}: a new {what} needs {', '.join(missing)}")


def apply_catalog(base: Catalog, doc: CatalogFile, *, where: str = "catalog") -> Catalog:
    """``base`` with the document's entries added or changed (the merge rule above)."""
    accelerators = dict(base.accelerators)
    for name, entry in doc.accelerators.items():
        at = f"{where}: accelerators.{name}"
        if re.fullmatch(ACCELERATOR_NAME_PATTERN, name) is None or len(name) > 63:
            raise CatalogError(
                f"{at}: not an accelerator name as GKE labels nodes (lower-case words joined by "
                "dashes, e.g. nvidia-l4, tpu-v6e-slice)"
            )
        fields = _given(entry)
        if name not in accelerators:
            tpu = fields.get("kind") == "tpu"
            _missing(at, fields, _ACC_REQUIRED + (_TPU_REQUIRED if tpu else ()), "accelerator")
        accelerators[name] = _accelerator(name, fields, accelerators.get(name))
        acc = accelerators[name]
        if (acc.kind == "tpu") != is_tpu(name):
            raise CatalogError(
                f"{at}.kind: {acc.kind}, but TPU accelerator names start with 'tpu' and GPU "
                "names do not (as GKE names them)"
            )
    machines = dict(base.machines)
    for name, mentry in doc.machine_types.items():
        at = f"{where}: machineTypes.{name}"
        if re.fullmatch(MACHINE_TYPE, name) is None:
            raise CatalogError(f"{at}: not a machine type name (e.g. a3-ultragpu-8g)")
        fields = _given(mentry)
        if name not in machines:
            _missing(at, fields, _MACHINE_REQUIRED, "machine type")
        machines[name] = _machine(name, fields, machines.get(name))
        machine = machines[name]
        if machine.accelerator is not None and machine.accelerator not in accelerators:
            raise CatalogError(
                f"{at}.accelerator: {machine.accelerator} is not in the catalog; known: "
                + ", ".join(sorted(accelerators))
            )
        if machine.accelerator is not None and machine.accelerator_count < 1:
            raise CatalogError(f"{at}: a machine with an accelerator needs acceleratorCount")
        _check_domain(at, machine)
    defaults = {k: dict(v) for k, v in base.default_machines.items()}
    for acc_name in doc.accelerators:
        if acc_name not in base.accelerators and acc_name not in doc.default_machines:
            defaults[acc_name] = _carried_shapes(f"{where}: accelerators.{acc_name}", acc_name, doc)
    for acc_name, shapes in doc.default_machines.items():
        for count, machine_name in shapes.items():
            _check_shape(where, acc_name, count, machine_name, accelerators, machines)
            defaults.setdefault(acc_name, {})[count] = machine_name
    return Catalog(accelerators, machines, defaults)


def _check_domain(at: str, machine: MachineType) -> None:
    """The acceleratorCount limit follows from the NVLink domain: a host's own NVLink joins at
    most MAX_HOST_ACCELERATORS; a domain larger than a host holds whole hosts."""
    count, domain = machine.accelerator_count, machine.nvlink_domain
    if domain:
        if count < 1 or domain % count:
            raise CatalogError(
                f"{at}.nvlinkDomain: {domain} GPUs is no whole number of hosts of "
                f"acceleratorCount {count}"
            )
    elif count > MAX_HOST_ACCELERATORS:
        raise CatalogError(
            f"{at}.acceleratorCount: {count} accelerators on one host is more than one host's "
            f"NVLink joins ({MAX_HOST_ACCELERATORS}); a host that is part of a larger NVLink "
            "domain says so with nvlinkDomain (a GB200 NVL72 tray: acceleratorCount 4, "
            "nvlinkDomain 72)"
        )


def _carried_shapes(at: str, accelerator: str, doc: CatalogFile) -> dict[int, str]:
    """A new accelerator's host shapes: the machine types of the document that carry it."""
    shapes: dict[int, str] = {}
    for name, entry in sorted(doc.machine_types.items()):
        if entry.accelerator != accelerator or entry.accelerator_count is None:
            continue
        if entry.accelerator_count in shapes:
            raise CatalogError(
                f"{at}: machine types {shapes[entry.accelerator_count]} and {name} both carry "
                f"{entry.accelerator_count}; say which one a pool of that shape runs in "
                f"defaultMachines.{accelerator}"
            )
        shapes[entry.accelerator_count] = name
    if not shapes:
        raise CatalogError(
            f"{at}: no host shape: add a machine type with accelerator: {accelerator} and "
            f"acceleratorCount, or defaultMachines.{accelerator}"
        )
    return shapes


def _check_shape(
    where: str,
    accelerator: str,
    count: int,
    machine_name: str,
    accelerators: Mapping[str, Accelerator],
    machines: Mapping[str, MachineType],
) -> None:
    at = f"{where}: defaultMachines.{accelerator}.{count}"
    if accelerator not in accelerators:
        raise CatalogError(f"{at}: accelerator {accelerator} is not in the catalog")
    if not 1 <= count <= 16:
        raise CatalogError(f"{at}: accelerators per host must be 1 to 16")
    machine = machines.get(machine_name)
    if machine is None:
        raise CatalogError(f"{at}: machine type {machine_name} is not in the catalog")
    if machine.accelerator is not None and (
        machine.accelerator != accelerator or machine.accelerator_count != count
    ):
        raise CatalogError(
            f"{at}: {machine_name} carries {machine.accelerator_count} x {machine.accelerator}"
        )


def load_catalog(path: str | Path | None, base: Catalog = DEFAULT_CATALOG) -> Catalog:
    """``base`` with the catalog file at ``path`` applied (``base`` itself when None)."""
    if path is None:
        return base
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{p}: cannot read: {exc.strerror}") from None
    return apply_catalog(base, parse_catalog(text, where=str(p)), where=str(p))


# ---------------------------------------------------------------- what a job's hardware needs


def hardware_problem(
    catalog: Catalog, accelerator: str, per_host: int, topology: str | None = None
) -> tuple[str, str] | None:
    """Why ``catalog`` cannot place hosts of ``per_host`` x ``accelerator`` (reason, message),
    or None when it can. Reasons: UnknownAccelerator, UnsupportedHostShape, UnsupportedTopology."""
    if accelerator not in catalog.accelerators:
        known = ", ".join(sorted(catalog.accelerators))
        return (
            "UnknownAccelerator",
            f"accelerator {accelerator} is not in the operator's catalog (known: {known}); "
            f"to use it, {HOW_TO_ADD}",
        )
    shapes = catalog.host_shapes(accelerator)
    if per_host not in shapes:
        return (
            "UnsupportedHostShape",
            f"{accelerator} comes {', '.join(map(str, shapes)) or 'in no host shape'} per host "
            f"in the operator's catalog, not {per_host}; a machine type with {per_host} x "
            f"{accelerator} can be added to the catalog (docs/catalog.md)",
        )
    dims = catalog.accelerators[accelerator].topology_dims
    if topology is not None and dims and topology_dims(topology) != dims:
        form = "AxBxC" if dims == 3 else "AxB"
        return (
            "UnsupportedTopology",
            f"{accelerator} slices have {dims}-D topologies ({form}), not {topology}",
        )
    return None


def replica_hardware_problem(
    catalog: Catalog,
    accelerator: str,
    per_replica: int,
    hosts: int | None = None,
    machine_type: str | None = None,
) -> tuple[str, str] | None:
    """Why ``catalog`` cannot build a serving replica of ``per_replica`` x ``accelerator`` on
    one host or on ``hosts`` hosts (UnknownAccelerator, UnsupportedHostShape), or None. On a
    named ``machine_type`` the replica is built from that machine's hosts (a share of one, or
    whole ones: engine.serving_hosts); a machine type the catalog lacks is the plan's error,
    which names it."""
    if accelerator not in catalog.accelerators:
        return hardware_problem(catalog, accelerator, per_replica)
    if machine_type is not None:
        if machine_type not in catalog.machines:
            return None
        try:
            replica_hosts(catalog, accelerator, per_replica, hosts, machine_type)
        except UnknownHardwareError as exc:
            return "UnsupportedHostShape", f"{exc}; {HOW_TO_ADD_SHAPE}"
        return None
    try:
        per_host, _ = catalog.replica_hosts(accelerator, per_replica, hosts)
    except UnknownHardwareError as exc:
        return "UnsupportedHostShape", f"{exc}; {HOW_TO_ADD_SHAPE}"
    return hardware_problem(catalog, accelerator, per_host)


HOW_TO_ADD_SHAPE = "a machine type of another shape can be added to the catalog (docs/catalog.md)"


# ---------------------------------------------------------------- the operator's catalog

_installed: Catalog | None = None


def install_catalog(catalog: Catalog | None) -> None:
    """Make ``catalog`` the one plans use when none is passed (None: back to the file or the
    built-in). The operator calls this when its catalog ConfigMap changes."""
    global _installed
    _installed = catalog


def installed_catalog() -> Catalog | None:
    return _installed


# ---------------------------------------------------------------- pools' own profiles (issue 47)

_profiles: dict[tuple[str, str], PoolMeasurement] = {}
_composed: tuple[Catalog, Catalog] | None = None  # (a base, it with _profiles): one per change


def choose_pool_profiles(
    measurements: Iterable[PoolMeasurement],
) -> dict[tuple[str, str], PoolMeasurement]:
    """The profile each (machine type, accelerator) is planned on. Several profiled pools of the
    same hardware: the slowest (engine.profiled.slowest: by the reference step, else the
    sustained 16-bit GEMM rate, else HBM), which names the others. Conservative: a job may land
    on any pool of its machine type, and one planned on the fast pool's figures would miss them
    on the slow one."""
    groups: dict[tuple[str, str], list[PoolMeasurement]] = {}
    for m in measurements:
        groups.setdefault((m.machine_type, m.accelerator), []).append(m)
    return {key: slowest(group) for key, group in sorted(groups.items())}


def install_pool_profiles(
    profiles: Mapping[str, PoolMeasurement] | Iterable[PoolMeasurement],
) -> bool:
    """Plan every pool that has one on its PoolProfile's measurement: ``profiles`` are all the
    profiled pools (keyed by anything, e.g. namespace/name, or a plain list); an empty one
    plans every pool on the catalog again. Kept apart from the catalog ConfigMap's layers, and
    composed over them by :func:`with_pool_profiles` (``active_catalog()`` does), so either may
    change without the other. True when the profiles plans use changed: the caller then clears
    its plan caches (the operator runs its catalog-change callbacks)."""
    global _profiles, _composed
    values = profiles.values() if isinstance(profiles, Mapping) else profiles
    chosen = choose_pool_profiles(values)
    if chosen == _profiles:
        return False
    _profiles, _composed = chosen, None
    return True


def installed_pool_profiles() -> Mapping[tuple[str, str], PoolMeasurement]:
    return dict(_profiles)


def with_pool_profiles(
    catalog: Catalog, profiles: Mapping[tuple[str, str], PoolMeasurement] | None = None
) -> Catalog:
    """``catalog`` carrying ``profiles`` (default: the installed ones), and only those, for
    plans to use (``Catalog.profile``); ``catalog`` itself when that is what it carries."""
    global _composed
    if profiles is not None:
        return catalog if catalog.profiles == profiles else replace(catalog, profiles=profiles)
    if catalog.profiles == _profiles:
        return catalog
    if _composed is None or _composed[0] is not catalog:
        _composed = (catalog, replace(catalog, profiles=dict(_profiles)))
    return _composed[1]
