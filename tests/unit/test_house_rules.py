"""The brief's house rules that a file listing can check: no module over 1,000 lines, and no
package named ``operator`` (it would shadow Python's standard module)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 1000


def tracked_python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).exists()]


def test_no_module_is_over_a_thousand_lines():
    files = tracked_python_files()
    assert len(files) > 100  # the listing found the tree
    long = {
        str(path.relative_to(ROOT)): n
        for path in files
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_package_is_named_operator():
    packages = {path.parent.name for path in tracked_python_files() if path.name == "__init__.py"}
    assert "operator" not in packages
