"""Which pools can take a gang at all, best first (whether it fits now: the cycle decides)."""

from __future__ import annotations

from collections.abc import Mapping

from ringmaster.admission.snapshot import PoolSummary
from ringmaster.placement.pools import NoPool, accelerator_pools


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
    big_enough = accelerator_pools(pools, accelerator, per_worker, "perWorker")
    if isinstance(big_enough, NoPool):
        return big_enough
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
