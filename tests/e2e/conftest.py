"""The local control plane for end-to-end tests, brought up once per session.

Like controller-runtime's envtest: set RINGMASTER_E2E_KUBECONFIG to use a cluster that is
already running (it is then neither created nor deleted); otherwise the fixture builds the
binaries if needed (hack/cluster-tools.sh), creates the kwok cluster `ringmaster-e2e`, and deletes
it at the end unless RINGMASTER_E2E_KEEP=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ringmaster.localcluster.cluster import Binaries, LocalCluster

REPO = Path(__file__).resolve().parents[2]
E2E_CLUSTER_NAME = "ringmaster-e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@dataclass
class Cluster:
    kubeconfig: Path
    kubectl_binary: str
    bin_dir: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.kubectl_binary, "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        body = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", input=body)


def wait_for(
    condition: Callable[[], Any], timeout: float = 60, interval: float = 0.5, what: str = ""
) -> Any:
    """Poll until condition() returns something truthy; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}: {last!r}")


def _build_binaries() -> Path:
    result = subprocess.run(
        ["bash", str(REPO / "hack" / "cluster-tools.sh")], stdout=subprocess.PIPE, text=True,
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
