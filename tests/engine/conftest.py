from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def points() -> dict:
    """The published calibration points (a copy of ../shared/calibration/points.yaml)."""
    return yaml.safe_load((DATA / "points.yaml").read_text())
