"""The Gateway API Inference Extension's CRDs in the local cluster (`ringmaster cluster up --gie`).

The CRDs (InferencePool, inference.networking.k8s.io/v1, and the experimental
inference.networking.x-k8s.io APIs of the same release: InferenceObjective, ...) come from the
extension's Go module at the version pinned in tools/versions.env (GIE_VERSION):
hack/cluster-tools.sh copies them into the bin directory's ``gie-crds``; nothing is fetched at
run time. Unlike Kueue (kueue.py) and LeaderWorkerSet (lws.py) there is no process to run: the
extension's own controller is the Endpoint Picker, a data-plane server beside a Gateway, which
the local cluster has neither. With the CRDs served, the apiserver validates InferencePools and
InferenceObjectives against their schemas, and the operator can create them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ringmaster.localcluster.cluster import ClusterError, LocalCluster

COMPONENT = "gie"
CRD_DIRECTORY = f"{COMPONENT}-crds"  # hack/cluster-tools.sh's copy of config/crd/bases
TITLE = "Gateway API Inference Extension"
# What hack/cluster-tools.sh is asked for, where the CRDs are missing.
MISSING = "`hack/cluster-tools.sh gie` copies them (tools/gie)"


class LocalInferenceExtension:
    """Install the Gateway API Inference Extension's CRDs into a local cluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.directory = cluster.binaries.directory

    @staticmethod
    def available(bin_dir: Path) -> bool:
        return any((bin_dir / CRD_DIRECTORY).glob("*.yaml"))

    def crd_paths(self) -> list[Path]:
        return sorted((self.directory / CRD_DIRECTORY).glob("*.yaml"))

    def crds(self) -> list[dict[str, Any]]:
        return [yaml.safe_load(p.read_text()) for p in self.crd_paths()]

    @staticmethod
    def log(message: str) -> None:
        print(f"[{COMPONENT}] {message}", file=sys.stderr, flush=True)

    def up(self, wait_seconds: int = 60) -> float:
        """Apply the CRDs and wait until each is Established (served); returns the seconds it
        took. Idempotent: a server-side apply of the same CRDs changes nothing, so every caller
        (the CLI, each e2e session) may call it."""
        if not self.available(self.directory):
            raise ClusterError(f"no {TITLE} CRDs in {self.directory / CRD_DIRECTORY}: {MISSING}")
        if not self.cluster.is_healthy():
            raise ClusterError(f"cluster {self.cluster.name!r} is not up: `ringmaster cluster up`")
        start = time.monotonic()
        crds = self.crds()
        self.cluster.apply_objects(crds)
        self.cluster.kubectl(
            "wait", "--for=condition=Established", f"--timeout={wait_seconds}s",
            *(f"crd/{c['metadata']['name']}" for c in crds),
        )  # fmt: skip
        seconds = time.monotonic() - start
        names = ", ".join(c["spec"]["names"]["kind"] for c in crds)
        self.log(f"{TITLE} CRDs established in {seconds:.1f}s: {names}")
        return seconds

    def uninstall(self) -> None:
        """Delete the CRDs, and with them every object of theirs: the cluster as if they were
        never installed. (`ringmaster cluster down` needs none of this: the cluster goes.)"""
        if not self.cluster.is_healthy():
            return
        for crd in self.crds():
            self.cluster.kubectl("delete", "crd", crd["metadata"]["name"], "--ignore-not-found")
