"""The contracts between the engine, the controllers and status are typed and declared."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import yaml

import ringmaster.api as api
import ringmaster.planning as planning
from ringmaster.api import TrainingJobSpec, TrainingPlan
from ringmaster.api.base import StatusModel
from ringmaster.planning import plan_training

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def classes(package) -> dict[str, type]:
    found: dict[str, type] = {}
    for module in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"{package.__name__}.{module.name}")
        for name, value in vars(loaded).items():
            if inspect.isclass(value) and value.__module__ == loaded.__name__:
                found[name] = value
    return found


def test_no_class_name_is_both_an_api_model_and_a_planning_class():
    assert not set(classes(api)) & set(classes(planning))


def test_status_models_declare_every_field_they_carry():
    models = [c for c in classes(api).values() if issubclass(c, StatusModel)]
    assert TrainingPlan in models
    for model in models:
        assert model.model_config.get("extra") != "allow", model.__name__


@pytest.mark.parametrize("reducers", [None, 3])
def test_the_status_plan_keeps_every_key_the_planner_gives(reducers):
    """What status carries is exactly what the typed plan holds: nothing dropped on the way."""
    doc = yaml.safe_load((EXAMPLES / "trainingjob-bert-large-auto.yaml").read_text())
    spec = TrainingJobSpec.model_validate(doc["spec"])
    plan = plan_training(spec, "a2-highgpu-8g", reducers).to_status()
    round_trip = TrainingPlan.model_validate(plan.to_k8s())
    assert round_trip == plan
    assert plan.reducers_wanted is not None and plan.alternatives
    if plan.strategy == "ReductionServer":
        assert plan.reducers is not None
