"""Which pools can take a gang at all, best first (whether it fits now: the cycle decides)."""

from __future__ import annotations

from collections.abc import Mapping

from ringmaster.admission.snapshot import PoolSummary
from ringmaster.placement.pools import NoPool


def candidate_pools(
    pools: Mapping[str, PoolSummary],
    accelerator: str,
    per_worker: int,
    machine_type: str | None = None,
    topology: str | None = None,
    current: str | None = None,
) -> list[PoolSummary] | NoPool:
    """Pools of the accelerator whose hosts carry at least perWorker of it, of the machine type
    and TPU topology asked for. Order: the pool the job already uses; then hosts that match
    perWorker exactly (no stranded accelerators); then by name. The cycle takes the first one
    where the gang fits."""
    same_type = [p for p in pools.values() if p.identity.accelerator == accelerator]
    if not same_type:
        known = sorted({a for p in pools.values() if (a := p.identity.accelerator)})
        return NoPool(
            "NoMatchingPool",
            f"no node pool has {accelerator} nodes (pools have: {', '.join(known) or 'none'})",
        )
    big_enough = [p for p in same_type if p.accelerators_per_node >= per_worker]
    if not big_enough:
        largest = max(p.accelerators_per_node for p in same_type)
        return NoPool(
            "NoMatchingPool",
            f"perWorker is {per_worker} but {accelerator} nodes have at most {largest} each",
        )
    if machine_type:
        big_enough = [p for p in big_enough if p.identity.instance_type == machine_type]
        if not big_enough:
            return NoPool("NoMatchingPool", f"no {accelerator} pool of machine type {machine_type}")
    if topology:
        matching = [p for p in big_enough if p.identity.tpu_topology == topology]
        if not matching:
            seen = ", ".join(f"{p.name}={p.identity.tpu_topology or '-'}" for p in big_enough)
            return NoPool(
                "TopologyMismatch", f"no {accelerator} pool has topology {topology} ({seen})"
            )
        big_enough = matching
    return sorted(
        big_enough,
        key=lambda p: (p.name != current, p.accelerators_per_node != per_worker, p.name),
    )
