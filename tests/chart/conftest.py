"""Chart tests: `helm` renders and lints the chart; no cluster is needed.

helm comes from $RINGMASTER_BIN_DIR, or is built (once, then cached) by hack/cluster-tools.sh,
the same way the e2e tests find kubectl.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ringmaster"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def helm_binary() -> str:
    bin_dir = os.environ.get("RINGMASTER_BIN_DIR")
    if not bin_dir:
        result = subprocess.run(
            ["bash", str(REPO / "hack" / "cluster-tools.sh")],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        bin_dir = result.stdout.strip().splitlines()[-1]
    return str(Path(bin_dir) / "helm")


def set_args(values: dict[str, Any] | None) -> list[str]:
    """Values as one --set-json per top-level key (exact types: no --set string guessing)."""
    import json

    return [a for k, v in (values or {}).items() for a in ("--set-json", f"{k}={json.dumps(v)}")]


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Isolated from the user's helm config and repositories: nothing is read or fetched.
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": "/nonexistent-helm-config",
        "HELM_CACHE_HOME": "/nonexistent-helm-cache",
        "HELM_DATA_HOME": "/nonexistent-helm-data",
    }
    return subprocess.run([helm, *args], capture_output=True, text=True, env=env, timeout=60)


Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def render(helm_binary: str) -> Render:
    """`helm template` of the chart with these values -> its objects (CRDs included)."""

    def _render(values: dict[str, Any] | None = None, namespace: str = "ringmaster-system"):
        result = run_helm(
            helm_binary,
            "template",
            "rm",
            str(CHART),
            "--namespace",
            namespace,
            "--include-crds",
            *set_args(values),
        )
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]

    return _render


def find(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, got {len(matches)}"
    return matches[0]


def kinds(objects: Iterable[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)
