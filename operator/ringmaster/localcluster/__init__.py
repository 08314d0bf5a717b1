"""`ringmaster cluster`: a local Kubernetes control plane with simulated accelerator node pools.

ringmaster cluster up [--pool a100-highgpu-8g=64 ...]   create (or resize) the cluster
ringmaster cluster up --kueue                           ... and run Kueue beside it (kueue.py)
ringmaster cluster pools                                 the node pools and their readiness
ringmaster cluster kubeconfig                            print the kubeconfig's path
ringmaster cluster down                                  delete it
"""

from __future__ import annotations

import argparse
import sys

from ringmaster.localcluster.cluster import (
    DEFAULT_NAME,
    Binaries,
    ClusterError,
    LocalCluster,
    kubeconfig_path,
    show_pools,
)
from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.localcluster.pools import POOLS, parse_sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "pools and default sizes: " + ", ".join(
        f"{p.name}={p.default_size}" for p in POOLS
    )
    parser.add_argument("action", choices=["up", "down", "pools", "kubeconfig"])
    parser.add_argument("--name", default=DEFAULT_NAME, help="cluster name (default %(default)s)")
    parser.add_argument(
        "--bin-dir", help="control-plane binaries (default $RINGMASTER_BIN_DIR; see `make tools`)"
    )
    parser.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="POOL=COUNT",
        help="node count of a pool, repeatable (the scale bench asks for thousands)",
    )
    parser.add_argument("--kueue", action="store_true", help="up: also run Kueue (tools/kueue)")


def run(args: argparse.Namespace) -> int:
    if args.action == "kubeconfig":
        print(kubeconfig_path(args.name))
        return 0
    try:
        sizes = parse_sizes(args.pool)
        cluster = LocalCluster(Binaries.locate(args.bin_dir), args.name)
        if args.action == "up":
            cluster.up(sizes)
            if args.kueue:
                LocalKueue(cluster).up()
            print(show_pools(cluster))
        elif args.action == "pools":
            print(show_pools(cluster))
        else:
            LocalKueue(cluster).down()
            cluster.down()
    except (ClusterError, ValueError) as error:
        print(f"ringmaster cluster: {error}", file=sys.stderr)
        return 2
    return 0
