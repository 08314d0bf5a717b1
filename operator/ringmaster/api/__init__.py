"""The API of Ringmaster (group ``ringmaster.dev``, version ``v1alpha1``): pydantic models of
each resource's spec and status, the single source of truth from which the CRDs are generated.

This package imports nothing else from ringmaster.
"""

from ringmaster.api.accelerators import (
    ACCELERATOR_NAME_PATTERN,
    TOPOLOGY_PATTERN,
    AcceleratorType,
    is_tpu,
    topology_chips,
    topology_dims,
)
from ringmaster.api.architecture import TransformerArchitecture
from ringmaster.api.base import API_VERSION, GROUP, VERSION, Rule
from ringmaster.api.common import (
    Condition,
    EnvVar,
    PodMetadata,
    PodTemplate,
    ResourceRequirements,
    find_condition,
    set_condition,
)
from ringmaster.api.inferenceendpoint import (
    INFERENCE_ENDPOINT,
    Autoscaling,
    InferenceAccelerator,
    InferenceEndpointSpec,
    InferenceModel,
    KvCachePrecision,
    Precision,
    ServingParallelism,
    Slo,
    TokenLengths,
)
from ringmaster.api.inferenceendpoint_status import (
    InferenceEndpointPhase,
    InferenceEndpointStatus,
    InferencePlan,
)
from ringmaster.api.manifest import (
    RESOURCES,
    FieldError,
    ManifestError,
    ParsedManifest,
    load_manifests,
    parse_manifest,
    validate_update,
)
from ringmaster.api.parallelism import Parallelism
from ringmaster.api.poolprofile import (
    POOL_PROFILE,
    PoolProfilePhase,
    PoolProfileSpec,
    PoolProfileStatus,
)
from ringmaster.api.quantity import format_count, parse_count
from ringmaster.api.reductionserverpool import (
    REDUCTION_SERVER_POOL,
    ReductionServerPoolPhase,
    ReductionServerPoolSpec,
    ReductionServerPoolStatus,
)
from ringmaster.api.resource import Resource
from ringmaster.api.training_model import GradientDType, TrainingModel
from ringmaster.api.trainingjob import (
    DEFAULT_REDUCER_MACHINE_TYPE,
    TRAINING_JOB,
    Communication,
    ReductionServerSettings,
    RunPolicy,
    Strategy,
    TrainingAccelerator,
    TrainingJobPhase,
    TrainingJobSpec,
    TrainingJobStatus,
    TrainingPlan,
    TrainingProgress,
    WorkerCounts,
)

__all__ = [
    "ACCELERATOR_NAME_PATTERN",
    "API_VERSION",
    "DEFAULT_REDUCER_MACHINE_TYPE",
    "GROUP",
    "INFERENCE_ENDPOINT",
    "POOL_PROFILE",
    "REDUCTION_SERVER_POOL",
    "RESOURCES",
    "TOPOLOGY_PATTERN",
    "TRAINING_JOB",
    "VERSION",
    "AcceleratorType",
    "Autoscaling",
    "Communication",
    "Condition",
    "EnvVar",
    "FieldError",
    "GradientDType",
    "InferenceAccelerator",
    "InferenceEndpointPhase",
    "InferenceEndpointSpec",
    "InferenceEndpointStatus",
    "InferenceModel",
    "InferencePlan",
    "KvCachePrecision",
    "ManifestError",
    "Parallelism",
    "ParsedManifest",
    "PodMetadata",
    "PodTemplate",
    "PoolProfilePhase",
    "PoolProfileSpec",
    "PoolProfileStatus",
    "Precision",
    "ReductionServerPoolPhase",
    "ReductionServerPoolSpec",
    "ReductionServerPoolStatus",
    "ReductionServerSettings",
    "Resource",
    "ResourceRequirements",
    "Rule",
    "RunPolicy",
    "ServingParallelism",
    "Slo",
    "Strategy",
    "TokenLengths",
    "TrainingAccelerator",
    "TrainingJobPhase",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "TrainingModel",
    "TrainingPlan",
    "TrainingProgress",
    "TransformerArchitecture",
    "WorkerCounts",
    "find_condition",
    "format_count",
    "is_tpu",
    "load_manifests",
    "parse_count",
    "parse_manifest",
    "set_condition",
    "topology_chips",
    "topology_dims",
    "validate_update",
]
