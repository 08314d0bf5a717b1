"""Placement by topology (issue 43): a 512-host gang among 2,000 hosts in 64 blocks.

Run with ``python benchmarks/bench_topology.py``. Prints figures; asserts nothing about time
(the machine is shared). Goal: the packed choice well under 100 ms in process (issue 43 asks
for the whole placement within 1 s).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from ringmaster.placement.topology import (
    GKE_BLOCK,
    GKE_HOST,
    GKE_SUBBLOCK,
    Topology,
    blocks_forced,
    choose_hosts,
    describe_domains,
    free_domains,
    spread_hosts,
    topologies,
)

HOSTS = 2000
BLOCKS = 64
SUBBLOCKS = 2  # per block
GANG = 512
REPEATS = 7


def cluster(seed: int = 43) -> dict[str, Topology]:
    """2,000 hosts in 64 blocks of 2 subblocks; each block busy by a share drawn from 0 to 50%
    (about a quarter of the hosts busy, unevenly)."""
    rng = random.Random(seed)
    busy = [rng.uniform(0.0, 0.5) for _ in range(BLOCKS)]
    free = []
    for i in range(HOSTS):
        block = i * BLOCKS // HOSTS
        sub = (i * BLOCKS * SUBBLOCKS // HOSTS) % SUBBLOCKS
        labels = {
            GKE_BLOCK: f"b{block:02d}",
            GKE_SUBBLOCK: f"b{block:02d}-s{sub}",
            GKE_HOST: f"h{i:04d}",
        }
        if rng.random() >= busy[block]:
            free.append((f"node-{i:04d}", labels))
    return topologies(free)


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    free = cluster()
    print(f"{len(free)} free hosts of {HOSTS} in {BLOCKS} blocks; a gang of {GANG} hosts")
    print(describe_domains(free_domains(free, GKE_BLOCK), GKE_BLOCK))
    for groups in ((), (2,), (2, 8)):
        best, median = timed(partial(choose_hosts, free, GANG, groups))
        choice = choose_hosts(free, GANG, groups)
        assert choice is not None
        print(
            f"choose_hosts groups={groups or '()'}: {best * 1e3:.1f} ms best, "
            f"{median * 1e3:.1f} ms median; {choice.blocks} blocks "
            f"(the free hosts force {blocks_forced(free, GANG)}), "
            f"groups in one block: {choice.groups_in_block}"
        )
    best, median = timed(lambda: spread_hosts(free, GANG))
    spread = spread_hosts(free, GANG)
    assert spread is not None
    print(
        f"spread_hosts: {best * 1e3:.1f} ms best, {median * 1e3:.1f} ms median; "
        f"{spread.blocks} blocks"
    )
    best, median = timed(lambda: cluster())
    print(f"(labels -> topologies for all hosts: {best * 1e3:.1f} ms best)")


if __name__ == "__main__":
    main()
