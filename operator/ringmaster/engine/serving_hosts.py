"""A serving replica's hosts on a machine type the endpoint names (``spec.machineType``).

Without a machine type a replica is built from the catalog's host shapes
(:meth:`~ringmaster.engine.hardware.Catalog.replica_hosts`: one host of exactly perReplica, or
the fewest hosts of the largest shape that divides it). A named machine type of ``g`` bundled
accelerators builds it as it runs there:

- ``perReplica <= g``: one host, of which the replica takes ``perReplica`` accelerators (one H200
  of an 8-GPU a3-ultragpu-8g): replicas pack on the host, so a replica pays its share of the
  host's price, ``perReplica / g`` (:func:`host_share`), and its share of the host's NICs;
- ``perReplica`` a multiple of ``g``: ``perReplica / g`` whole hosts (a LeaderWorkerSet group);
- anything else (or ``hostsPerReplica`` that leaves a part of a host on several hosts): refused
  with the numbers, as the catalog's shapes are.

A machine type that attaches its accelerators (``accelerator`` unset: an N1 VM with T4s) has no
fixed count; its replica is built from the catalog's shapes as without a machine type.
"""

from __future__ import annotations

from ringmaster.engine.hardware import (
    Catalog,
    Host,
    UnknownHardwareError,
    UnsupportedReplicaError,
)


def machines_with(catalog: Catalog, accelerator: str) -> list[str]:
    """The catalog's machine types that carry ``accelerator``, each with its count."""
    return sorted(
        f"{m.name} ({m.accelerator_count} x {accelerator})"
        for m in catalog.machines.values()
        if m.accelerator == accelerator
    )


def replica_hosts(
    catalog: Catalog,
    accelerator: str,
    per_replica: int,
    hosts: int | None = None,
    machine_type: str | None = None,
) -> tuple[int, int]:
    """(accelerators per host, hosts) of a replica (see the module's docstring). Raises
    UnknownHardwareError for a machine type the catalog lacks (naming those that carry the
    accelerator) and UnsupportedReplicaError for a replica its hosts cannot build."""
    if machine_type is None:
        return catalog.replica_hosts(accelerator, per_replica, hosts)
    if machine_type not in catalog.machines:
        carrying = machines_with(catalog, accelerator)
        raise UnknownHardwareError("machine type", machine_type, carrying or catalog.machines)
    machine = catalog.machine(machine_type)
    if machine.accelerator is None or machine.accelerator_count <= 0:
        return catalog.replica_hosts(accelerator, per_replica, hosts)
    g = machine.accelerator_count
    of = f"{machine_type} has {g} x {machine.accelerator} per host"
    if hosts is None:
        hosts = 1 if per_replica <= g else per_replica // g
    if per_replica % hosts:
        raise UnsupportedReplicaError(
            f"{per_replica} accelerators over {hosts} hosts is no whole number per host ({of})"
        )
    per_host = per_replica // hosts
    if hosts == 1 and per_host <= g:
        return per_host, 1
    if per_host == g:
        return g, hosts
    raise UnsupportedReplicaError(
        f"{per_replica} x {accelerator} over {hosts} hosts is {per_host} per host; {of}: a "
        f"replica takes at most one host ({g} or fewer) or whole hosts (a multiple of {g})"
    )


def host_share(host: Host) -> float:
    """The part of ``host`` a replica of ``host.count`` accelerators pays for: the count over the
    machine's bundled accelerators (1 for a whole host and for machines that attach them)."""
    machine = host.machine
    if machine.accelerator is None or machine.accelerator_count <= host.count:
        return 1.0
    return host.count / machine.accelerator_count
