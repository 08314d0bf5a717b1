"""The local control plane for end-to-end tests, brought up once per session.

Like controller-runtime's envtest: set RINGMASTER_E2E_KUBECONFIG to use a cluster that is
already running (it is then neither created nor deleted); otherwise the fixture builds the
binaries if needed (hack/cluster-tools.sh), creates the kwok cluster `ringmaster-e2e`, and deletes
it at the end unless RINGMASTER_E2E_KEEP=1.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringmaster.localcluster.cluster import Binaries, LocalCluster
from tests.e2e.kube import Cluster

REPO = Path(__file__).resolve().parents[2]
E2E_CLUSTER_NAME = "ringmaster-e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def _build_binaries() -> Path:
    result = subprocess.run(
        ["bash", str(REPO / "hack" / "cluster-tools.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    bin_dir = Path(os.environ.get("RINGMASTER_BIN_DIR") or _build_binaries())
    binaries = Binaries.locate(str(bin_dir))
    existing = os.environ.get("RINGMASTER_E2E_KUBECONFIG")
    if existing:
        yield Cluster(Path(existing), binaries.path("kubectl"), bin_dir)
        return
    local = LocalCluster(binaries, E2E_CLUSTER_NAME)
    local.up()
    try:
        yield Cluster(local.kubeconfig, binaries.path("kubectl"), bin_dir)
    finally:
        if os.environ.get("RINGMASTER_E2E_KEEP") != "1":
            local.down()


@pytest.fixture(scope="session")
def crds_installed(cluster: Cluster) -> Cluster:
    """The project's CRDs (crds/), applied and Established."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    cluster.kubectl(
        "wait", "--for=condition=Established", "-f", str(REPO / "crds"), "--timeout=60s"
    )
    return cluster


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting for it to go)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
