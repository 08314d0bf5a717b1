"""The Makefile's tools run as modules of the Python it is given, never as scripts found on PATH.

CI's python3 is a pyenv shim: `python3 -m pip` installs mypy's script, but no shim for it appears on
PATH until `pyenv rehash`, so a bare `mypy` in `make lint` failed there with "command not found"
(stop 62, after 9 s).
"""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOME_PYTHON = "/opt/some/python3.11"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["lint", "format", "install"])
def test_a_target_runs_every_tool_through_the_given_python(target: str) -> None:
    # -n prints the recipe without running it; these targets expand no $(shell ...) builds.
    printed = subprocess.run(
        ["make", "-n", "-C", str(REPO), f"PYTHON={SOME_PYTHON}", target],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commands = [
        line for line in printed.splitlines() if line.strip() and not line.startswith("make")
    ]
    assert commands, printed
    for command in commands:
        assert command.startswith(f"{SOME_PYTHON} -m "), command
