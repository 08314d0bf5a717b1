"""How the suite runs in parallel (pytest-xdist): `make test` passes
``-n auto --dist loadfile --no-loadscope-reorder``.

Each worker takes whole files, one after another, and the e2e files of a worker run on its own
local cluster with its own operator (tests/e2e/conftest.py): a file that needs a whole cluster
(an API outage, an operator restart, LeaderWorkerSet uninstalled, capacity measured) has it.

- ``-n auto`` is DEFAULT_WORKERS workers (PYTEST_XDIST_AUTO_NUM_WORKERS=N sets another count),
  or none at all when RINGMASTER_E2E_KUBECONFIG names a running cluster: that one cluster cannot
  be shared, so the tests run in this process, one after another, as without xdist.
- The workers take the files slowest first (FILE_SECONDS), so that no long e2e file starts last
  while the others have run out of work: the suite lasts about as long as its slowest worker.
  (``--no-loadscope-reorder`` keeps that order: by default xdist hands out the files with the
  most tests first, which are unit tests, and the long e2e files last.)
"""

from __future__ import annotations

import os
from pathlib import Path

# One BLAS thread per process, set before numpy is imported here or in the workers this process
# starts: the engine's batched solves are small, and OpenBLAS's threads spin on the 2 cores the
# suite's 5 workers share (the serving-planner grid: 47 s of CPU with them, 20 s without).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

# The suite mostly waits (the control plane, the operator, kwok's stages, the namespace
# controller's 5 s before it empties a deleted namespace), so workers overlap the waits until
# the CPU runs out. Measured on 2 cores (whole suite): 4 workers 470-490 s; 5 workers 356-382 s
# in five runs at 80-85 % CPU on average; 6 workers 345 s at 86 %; 8 workers 375 s at 97 %,
# with timing failures. 5 leave headroom for the bursts (every cluster starts at once, the chaos
# tests); each worker's cluster and operators take under 1 GiB.
DEFAULT_WORKERS = 5

# Seconds each slow file took in a fresh-clone CI run with 5 workers on 2 cores (2026-11-26; the
# first file of a worker also waits for its cluster). To refresh: run with `--junitxml=FILE`
# and sum each file's test cases. A file not listed counts as
# UNLISTED_E2E_SECONDS if it is an e2e file, else as a second: those go last, in collection order.
FILE_SECONDS: dict[str, float] = {
    "tests/e2e/test_promised_hosts.py": 185,
    "tests/e2e/test_serving_chaos.py": 184,
    "tests/e2e/test_inferenceendpoint.py": 169,
    "tests/engine/test_llm_serving.py": 165,
    "tests/e2e/test_trainingjob.py": 162,
    "tests/e2e/test_multihost_serving.py": 159,
    "tests/engine/test_latency_fixed_point.py": 156,
    "tests/e2e/test_resilience.py": 112,
    "tests/e2e/test_kueue_topology.py": 109,
    "tests/e2e/test_helm.py": 108,
    "tests/e2e/test_progress.py": 103,
    "tests/e2e/test_chaos.py": 92,
    "tests/unit/test_parallelism_rules.py": 90,
    "tests/e2e/test_admission.py": 86,
    "tests/e2e/test_topology.py": 85,
    "tests/e2e/test_catalog.py": 74,
    "tests/e2e/test_multislice.py": 68,
    "tests/unit/test_api_bad_input.py": 56,
    "tests/e2e/test_disaggregated_serving.py": 90,
    "tests/e2e/test_reductionserver.py": 47,
    "tests/e2e/test_llm_training.py": 45,
    "tests/e2e/test_pool_profile.py": 37,
    "tests/engine/test_llm_batching.py": 36,
    "tests/e2e/test_peering.py": 33,
    "tests/unit/test_disaggregated_endpoints.py": 30,
    "tests/e2e/test_live_edits.py": 28,
    "tests/unit/test_inference_llm.py": 26,
    "tests/e2e/test_operability.py": 26,
    "tests/e2e/test_kueue.py": 25,
    "tests/chart/test_rbac.py": 17,
    "tests/e2e/test_cluster_down.py": 14,
    "tests/unit/test_progress_body.py": 13,
    "tests/e2e/test_accelerator_alternatives.py": 12,
    "tests/chart/test_chart.py": 12,
    "tests/engine/test_llm_disaggregation.py": 11,
    "tests/unit/test_plan_cli.py": 11,
    "tests/e2e/test_control_plane.py": 9,
    "tests/engine/test_profiled_ceilings.py": 9,
    "tests/unit/test_multihost_endpoints.py": 9,
    "tests/engine/test_step_parts.py": 9,
    "tests/chart/test_security.py": 9,
    "tests/unit/test_api_live_edits.py": 9,
    "tests/engine/test_batch_cap.py": 8,
    "tests/unit/test_plausibility.py": 8,
    "tests/engine/test_decode_step.py": 7,
}
UNLISTED_E2E_SECONDS = 30.0


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    if os.environ.get("RINGMASTER_E2E_KUBECONFIG"):
        return 0  # one cluster, already running: the tests share it one after another
    configured = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(configured) if configured else DEFAULT_WORKERS


def _file_seconds(item: pytest.Item, root: Path) -> float:
    path = Path(str(item.fspath))
    try:
        relative = path.relative_to(root).as_posix()
    except ValueError:
        return 1.0
    unlisted = UNLISTED_E2E_SECONDS if relative.startswith("tests/e2e/") else 1.0
    return FILE_SECONDS.get(relative, unlisted)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker, the slowest files first (the order within a file is kept). Every worker
    sorts the same way, as xdist requires; a run without workers keeps the collection order."""
    if not hasattr(config, "workerinput"):
        return
    root = config.rootpath
    items.sort(key=lambda item: -_file_seconds(item, root))  # stable: file order kept
