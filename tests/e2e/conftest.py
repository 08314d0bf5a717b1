"""The local control plane for end-to-end tests, brought up once per session.

Like controller-runtime's envtest: set RINGMASTER_E2E_KUBECONFIG to use a cluster that is
already running (it is then neither created nor deleted); otherwise the fixture builds the
binaries if needed (hack/cluster-tools.sh), creates the kwok cluster `ringmaster-e2e`, and deletes
it at the end unless RINGMASTER_E2E_KEEP=1. RINGMASTER_E2E_CLUSTER names the cluster, so runs
in parallel do not share one.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringmaster.localcluster.cluster import Binaries, LocalCluster
from ringmaster.localcluster.kueue import LocalKueue
from tests.e2e.kube import Cluster, OperatorProcess

REPO = Path(__file__).resolve().parents[2]
# Parallel runs (two checkouts, two engineers) each set their own name.
E2E_CLUSTER_NAME = os.environ.get("RINGMASTER_E2E_CLUSTER", "ringmaster-e2e")
# The session operator's hardware catalog ConfigMap, as the chart sets it (absent: built-in).
E2E_CATALOG_CONFIGMAP = ("default", "ringmaster-e2e-catalog")


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
    # The session owns its cluster: one left broken by an earlier run is made anew.
    local.up(recreate=local.exists() and not local.is_healthy())
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


# The session's operator once a test has asked for it: tests that must have no operator acting
# (they write status as the operator would, or run operators of their own) stop it for a while.
SESSION_OPERATOR = pytest.StashKey[OperatorProcess]()


@pytest.fixture(scope="session")
def operator(
    crds_installed: Cluster,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """The operator, running as its own process for the whole session (its log is kept in the
    session's temporary directory, printed on failure by the tests that need it)."""
    process = OperatorProcess(
        crds_installed.kubeconfig,
        tmp_path_factory.mktemp("operator") / "operator.log",
        ("--catalog-configmap", "/".join(E2E_CATALOG_CONFIGMAP)),
    )
    process.start()
    request.config.stash[SESSION_OPERATOR] = process
    try:
        yield process
    finally:
        del request.config.stash[SESSION_OPERATOR]
        process.stop()


@pytest.fixture
def no_session_operator(request: pytest.FixtureRequest) -> Iterator[None]:
    """No operator of the session acts during the test: the session's one, if an earlier test
    started it, is stopped and started again afterwards. Two standalone operators on one
    cluster would both act on the same jobs; and a test that writes status as the operator does
    would see the operator write its own over it (the order dependency of test_admission.py)."""
    process = request.config.stash.get(SESSION_OPERATOR, None)
    if process is None or process.process is None:
        yield
        return
    process.stop()
    try:
        yield
    finally:
        process.start()


@pytest.fixture
def quiet_namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace that is completely gone before the next test starts, so tests that
    measure a pool's free capacity never see another test's pods."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--timeout=120s", check=False)


@pytest.fixture(scope="session")
def kueue(cluster: Cluster) -> Iterator[LocalKueue]:
    """Kueue's controller manager beside the local cluster, once per session. Skipped only when
    its binary is absent and RINGMASTER_E2E_REQUIRE_KUEUE is unset (hack/cluster-tools.sh builds
    it, so CI runs it for real)."""
    if not LocalKueue.available(cluster.bin_dir):
        reason = f"no Kueue in {cluster.bin_dir} (hack/cluster-tools.sh builds it)"
        if os.environ.get("RINGMASTER_E2E_REQUIRE_KUEUE"):
            pytest.fail(reason + ", and RINGMASTER_E2E_REQUIRE_KUEUE is set")
        pytest.skip(reason)
    binaries = Binaries.locate(str(cluster.bin_dir))
    local = LocalCluster(binaries, cluster.kubeconfig.parent.name)
    assert local.kubeconfig == cluster.kubeconfig, "Kueue runs beside a `ringmaster cluster` only"
    kueue = LocalKueue(local)
    status = kueue.up()
    print(f"\nKueue ready in {status.start_seconds:.1f}s, RSS {status.rss_mib:.0f} MiB")
    try:
        yield kueue
    finally:
        pid = kueue.pid()
        if pid is not None:
            print(f"Kueue RSS at the end: {kueue.rss_mib(pid):.0f} MiB")
        kueue.down()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keep each phase's report on the test item, so fixtures can tell a failed test."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
