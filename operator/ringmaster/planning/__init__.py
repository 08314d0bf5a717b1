"""The layer between the API and the engine: plans for TrainingJobs and InferenceEndpoints.

Pure functions the controllers call (:func:`plan_training`, :func:`plan_inference`) and the
`ringmaster plan` command (:mod:`ringmaster.planning.command`).
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

__all__ = [
    "CATALOG_ENV",
    "InferenceReport",
    "LlmInferenceReport",
    "PlanError",
    "TrainingReport",
    "active_catalog",
    "inference_inputs",
    "plan_inference",
    "plan_training",
    "training_inputs",
]
