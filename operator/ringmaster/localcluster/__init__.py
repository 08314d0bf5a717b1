"""`ringmaster cluster`: a local Kubernetes control plane with simulated accelerator node pools.

ringmaster cluster up [--pool a100-highgpu-8g=64 ...]   create (or resize) the cluster
                      [--wait-seconds S]                 limit of the wait for Ready nodes
ringmaster cluster up --kueue                           ... and run Kueue beside it (kueue.py)
ringmaster cluster up --lws                             ... and LeaderWorkerSet (lws.py)
ringmaster cluster up --gie                             ... and the Gateway API Inference
                                                         Extension's CRDs (gie.py)
ringmaster cluster up --recreate                        delete the cluster there and create it
                                                         anew (never done unasked)
ringmaster cluster pools                                 the node pools and their readiness
                                                         (needs only the cluster's kubeconfig)
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
from ringmaster.localcluster.gie import LocalInferenceExtension
from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.localcluster.lws import LocalLeaderWorkerSet
from ringmaster.localcluster.pools import POOLS, parse_sizes
from ringmaster.localcluster.readiness import BASE_WAIT_SECONDS, WAIT_SECONDS_PER_NODE


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
    parser.add_argument(
        "--lws", action="store_true", help="up: also run LeaderWorkerSet (tools/lws)"
    )
    parser.add_argument(
        "--gie",
        action="store_true",
        help="up: also install the Gateway API Inference Extension's CRDs (tools/gie)",
    )
    parser.add_argument(
        "--recreate",
        action="store_true",
        help="up: delete the cluster of this name, with every object in it, and create it anew "
        "(without it, a cluster that exists is never deleted: a broken one is reported)",
    )
    parser.add_argument(
        "--wait-seconds",
        type=float,
        metavar="SECONDS",
        help="up: how long the nodes may take to be Ready (default: "
        f"{BASE_WAIT_SECONDS:g} s + {WAIT_SECONDS_PER_NODE:g} s per node)",
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "kubeconfig":
        print(kubeconfig_path(args.name))
        return 0
    try:
        sizes = parse_sizes(args.pool)
        if args.action == "pools":  # only reads the API: no control-plane binaries needed
            kubeconfig = kubeconfig_path(args.name)
            if not kubeconfig.exists():
                raise ClusterError(
                    f"no cluster {args.name!r} ({kubeconfig} is missing): "
                    f"`ringmaster cluster up --name {args.name}` creates it"
                )
            print(show_pools(kubeconfig))
            return 0
        cluster = LocalCluster(Binaries.locate(args.bin_dir), args.name)
        if args.action == "up":
            cluster.up(sizes, wait_seconds=args.wait_seconds, recreate=args.recreate)
            if args.kueue:
                LocalKueue(cluster).up()
            if args.lws:
                LocalLeaderWorkerSet(cluster).up()
            if args.gie:
                LocalInferenceExtension(cluster).up()
            print(show_pools(cluster.kubeconfig))
        else:
            LocalKueue(cluster).down()
            LocalLeaderWorkerSet(cluster).down()
            cluster.down()
    except (ClusterError, ValueError) as error:
        print(f"ringmaster cluster: {error}", file=sys.stderr)
        return 2
    return 0
