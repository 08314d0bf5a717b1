"""The local control plane for end-to-end tests, brought up once per session (per worker).

Like controller-runtime's envtest: set RINGMASTER_E2E_KUBECONFIG to use a cluster that is
already running (it is then neither created nor deleted); otherwise the fixture builds the
binaries if needed (hack/cluster-tools.sh), creates the kwok cluster `ringmaster-e2e`, and deletes
it at the end unless RINGMASTER_E2E_KEEP=1. RINGMASTER_E2E_CLUSTER names the cluster, so runs
in parallel do not share one.

Under pytest-xdist (`make test`: ``-n auto --dist loadfile``, tests/conftest.py) each worker
owns a cluster of its own, named after it (`ringmaster-e2e-gw0`, `ringmaster-e2e-gw1`, ...),
with its own session operator and, when a test asks, its own Kueue and LeaderWorkerSet: a
worker's files run one after another on it, as the whole suite did on one cluster without xdist.
A running cluster (RINGMASTER_E2E_KUBECONFIG) cannot be shared by workers: ``-n auto`` then runs
no worker, and an explicit ``-n 2`` or more is refused (``-n 0`` or ``-n 1`` works).

A cluster this fixture did not leave behind on purpose (RINGMASTER_E2E_KEEP=1 marks it kept) is
a crashed or killed run's: it is created anew, not reused with that run's objects in it. The
first worker also deletes such clusters of workers that this run does not have.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringmaster.localcluster.cluster import Binaries, LocalCluster, kubeconfig_path
from ringmaster.localcluster.gie import LocalInferenceExtension
from ringmaster.localcluster.kueue import LocalKueue
from ringmaster.localcluster.lws import LocalLeaderWorkerSet
from tests.e2e.kube import Cluster, OperatorProcess

REPO = Path(__file__).resolve().parents[2]
# Parallel runs (two checkouts, two engineers) each set their own name.
E2E_CLUSTER_BASE = os.environ.get("RINGMASTER_E2E_CLUSTER", "ringmaster-e2e")
# pytest-xdist's worker (gw0, gw1, ...): each has a cluster of its own.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
E2E_CLUSTER_NAME = f"{E2E_CLUSTER_BASE}-{XDIST_WORKER}" if XDIST_WORKER else E2E_CLUSTER_BASE
# In a cluster's directory: RINGMASTER_E2E_KEEP=1 left it up on purpose, and it may be reused.
KEPT_MARKER = ".e2e-kept"
# In a cluster's directory: the xdist run (PYTEST_XDIST_TESTRUNUID) whose worker made it.
RUN_MARKER = ".e2e-run"
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
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
        if workers > 1:
            pytest.fail(
                f"RINGMASTER_E2E_KUBECONFIG names one running cluster, and {workers} workers "
                "would share it: run with -n 0 (`-n auto` does so by itself)"
            )
        yield Cluster(Path(existing), binaries.path("kubectl"), bin_dir)
        return
    if XDIST_WORKER == "gw0":
        _delete_other_runs_workers(binaries)
    local = LocalCluster(binaries, E2E_CLUSTER_NAME)
    kept = local.kubeconfig.parent / KEPT_MARKER
    # The session owns its cluster: one left broken, or left by a run that crashed (with its
    # objects, its operator's leftovers, its Kueue's webhooks), is made anew.
    if local.exists() and not (kept.exists() and local.is_healthy()):
        _delete(local)
    local.up()
    kept.unlink(missing_ok=True)
    (local.kubeconfig.parent / RUN_MARKER).write_text(os.environ.get("PYTEST_XDIST_TESTRUNUID", ""))
    try:
        yield Cluster(local.kubeconfig, binaries.path("kubectl"), bin_dir)
    finally:
        if os.environ.get("RINGMASTER_E2E_KEEP") == "1":
            kept.touch()
        else:
            local.down()


def _delete(local: LocalCluster) -> None:
    """Delete a cluster an earlier run left, with the Kueue and LeaderWorkerSet it ran."""
    LocalKueue(local).down()
    LocalLeaderWorkerSet(local).down()
    local.down()


def _delete_other_runs_workers(binaries: Binaries) -> None:
    """Delete the clusters that workers of earlier runs left and no worker of this run owns
    (`-gw5` after a run with more workers, or the cluster of a worker xdist started in place of
    one that crashed), unless kept on purpose. A worker of this run that xdist started in place
    of a crashed one has a name above the count too: its cluster, marked with this run's id,
    stays."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    clusters = kubeconfig_path(E2E_CLUSTER_BASE).parent.parent
    pattern = re.compile(re.escape(E2E_CLUSTER_BASE) + r"-gw(\d+)")
    for directory in sorted(clusters.glob(f"{E2E_CLUSTER_BASE}-gw*")):
        match = pattern.fullmatch(directory.name)
        if not match or int(match[1]) < count or (directory / KEPT_MARKER).exists():
            continue
        marker = directory / RUN_MARKER
        if marker.exists() and marker.read_text() == run:
            continue
        _delete(LocalCluster(binaries, directory.name))


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
OPERATOR_LOG_TAIL = 6000  # characters of its log a failed test shows


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


@contextlib.contextmanager
def session_operator_paused(config: pytest.Config) -> Iterator[None]:
    """The session's operator, if an earlier test started it, stopped for the block and started
    again afterwards. Two standalone operators on one cluster would both act on the same jobs."""
    process = config.stash.get(SESSION_OPERATOR, None)
    if process is None or process.process is None:
        yield
        return
    process.stop()
    try:
        yield
    finally:
        process.start()


@pytest.fixture
def no_session_operator(request: pytest.FixtureRequest) -> Iterator[None]:
    """No operator of the session acts during the test (session_operator_paused): a test that
    runs operators of its own, or writes status as the operator does, would see the session's
    write its own over it (the order dependency of test_admission.py)."""
    with session_operator_paused(request.config):
        yield


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


@pytest.fixture(scope="session")
def gie(cluster: Cluster) -> Cluster:
    """The Gateway API Inference Extension's CRDs (InferencePool, InferenceObjective, ...),
    installed once per session and left there: no process runs for them, and applying them again
    changes nothing. Skipped only when they are absent and RINGMASTER_E2E_REQUIRE_GIE is unset
    (hack/cluster-tools.sh copies them, so CI installs them for real)."""
    if not LocalInferenceExtension.available(cluster.bin_dir):
        reason = f"no Inference Extension CRDs in {cluster.bin_dir} (hack/cluster-tools.sh gie)"
        if os.environ.get("RINGMASTER_E2E_REQUIRE_GIE"):
            pytest.fail(reason + ", and RINGMASTER_E2E_REQUIRE_GIE is set")
        pytest.skip(reason)
    binaries = Binaries.locate(str(cluster.bin_dir))
    local = LocalCluster(binaries, cluster.kubeconfig.parent.name)
    assert local.kubeconfig == cluster.kubeconfig, "installs into a `ringmaster cluster` only"
    LocalInferenceExtension(local).up()
    return cluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keep each phase's report on the test item, so fixtures can tell a failed test; a failed
    test that ran the operator shows its log's tail (before any fixture's clean-up)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    process = getattr(item, "funcargs", {}).get("operator")
    if report.when == "call" and report.failed and isinstance(process, OperatorProcess):
        tail = process.log_path.read_text(errors="replace")[-OPERATOR_LOG_TAIL:]
        report.sections.append(("operator log", tail))
    return report
