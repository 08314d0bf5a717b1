"""The layer between the API and the engine: plans for TrainingJobs and InferenceEndpoints.

Pure functions the controllers call (:func:`plan_training`, :func:`plan_inference`, and on their
plans :func:`training_warnings`, :func:`inference_warnings` for valid but implausible input) and
the `ringmaster plan` command (:mod:`ringmaster.planning.command`).
"""

from ringmaster.planning.plans import (
    CATALOG_ENV,
    InferenceReport,
    LlmInferenceReport,
    PlanError,
    TrainingReport,
    active_catalog,
    inference_inputs,
    plan_inference,
    plan_training,
    training_inputs,
)
from ringmaster.planning.plausibility import Implausible, inference_warnings, training_warnings

__all__ = [
    "CATALOG_ENV",
    "Implausible",
    "InferenceReport",
    "LlmInferenceReport",
    "PlanError",
    "TrainingReport",
    "active_catalog",
    "inference_inputs",
    "inference_warnings",
    "plan_inference",
    "plan_training",
    "training_inputs",
    "training_warnings",
]
