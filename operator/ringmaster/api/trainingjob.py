"""TrainingJob: data-parallel training, N worker hosts with K accelerators each, run as a gang."""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from ringmaster.api.accelerators import (
    TOPOLOGY_PATTERN,
    AcceleratorType,
    cel_is_tpu,
    is_tpu,
    topology_chips,
)
from ringmaster.api.alternatives import (
    ACCELERATOR_ALTERNATIVE_RULES,
    MAX_ALTERNATIVES,
    SPEC_ALTERNATIVE_RULES,
    AcceleratorAlternative,
    AcceleratorChoice,
    Objective,
)
from ringmaster.api.base import Int, Rule, SpecModel, StatusModel, StoredObject
from ringmaster.api.common import Condition, MachineType, PodTemplate, conditions_field
from ringmaster.api.parallelism import PARALLELISM_RULES, Parallelism
from ringmaster.api.resource import AGE, PrinterColumn, Resource, SpecChange, condition_reason
from ringmaster.api.training_model import (
    BF16_PARAMETER_FRAMEWORKS,
    TrainingFramework,
    TrainingModel,
)

DEFAULT_REDUCER_MACHINE_TYPE = "n1-highcpu-16"
# The reducer image Vertex AI documents for its Reduction Server ("Distributed training" docs).
DEFAULT_REDUCER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"

Strategy = Literal["Auto", "Ring", "ReductionServer"]


# The largest published multislice run joined 199 slices of 256 v5e chips (Google Cloud blog,
# "Google Cloud demonstrates the world's largest distributed training job for LLMs across 50000+
# TPU v5e chips", Nov 2023); the bound keeps a typo from asking for thousands of node pools.
MAX_SLICES = 256


class TrainingAccelerator(SpecModel):
    """The accelerators of each worker host. Immutable: a job's hardware is fixed once created."""

    type: AcceleratorType
    """Accelerator type as GKE labels nodes (``cloud.google.com/gke-accelerator`` or
    ``cloud.google.com/gke-tpu-accelerator``): any name of that form; the operator's catalog
    (docs/catalog.md) must define it, or the job waits with reason ``UnknownAccelerator``. Names
    starting with ``tpu`` are TPUs."""
    per_worker: Int = Field(ge=1, le=16)
    """Accelerators per worker host; must be a host shape of the type in the catalog (8 for
    a2-highgpu-8g), or the job waits with reason ``UnsupportedHostShape``."""
    topology: str | None = Field(default=None, max_length=11, pattern=TOPOLOGY_PATTERN)
    """TPU slice topology, chips per axis (``2x2x4`` for v4 and v5p, ``2x4`` for v5e and v6e);
    TPU only. Whether the type takes 2 or 3 axes is the catalog's."""
    slices: Int = Field(default=1, ge=1, le=MAX_SLICES)
    """TPU multislice: the job runs this many slices of ``topology``, each on its own node pool
    (``workers / slices`` hosts per slice), joined over the data-center network (DCN): data
    parallel (or FSDP) across slices, the layout inside each. All slices are admitted together
    or none (reason ``InsufficientSlices``). TPU only; 1 is one slice."""
    alternatives: list[AcceleratorAlternative] | None = Field(
        default=None, min_length=1, max_length=MAX_ALTERNATIVES
    )
    """Other accelerator types the job may run on (docs/topology.md, "The accelerator chosen
    per job"): each is planned again by the engine (its workers, layout and batch split, under
    the same global batch), and admission takes the best by ``spec.placement.objective`` of
    those that can start now. ``status.admission.accelerators`` says which, and why not the
    others. Not offered through Kueue yet (condition ``AcceleratorAlternatives=False``)."""

    cel_rules = (
        Rule(
            cel=f"!{cel_is_tpu('self.type')} || has(self.topology)",
            message="topology is required for a TPU accelerator (e.g. 2x2x4 for tpu-v4-podslice)",
            field_path=".topology",
            reason="FieldValueRequired",
            check=lambda s: not is_tpu(s.type) or s.topology is not None,
        ),
        Rule(
            cel=f"{cel_is_tpu('self.type')} || !has(self.topology)",
            message="topology applies only to TPU accelerators",
            field_path=".topology",
            reason="FieldValueForbidden",
            check=lambda s: is_tpu(s.type) or s.topology is None,
        ),
        Rule(
            cel="!has(self.slices) || self.slices == 1 || has(self.topology)",
            message="slices > 1 needs a TPU topology: multislice joins TPU slices over DCN",
            field_path=".slices",
            reason="FieldValueForbidden",
            check=lambda s: s.slices == 1 or s.topology is not None,
        ),
        Rule(
            cel="self == oldSelf",
            message="accelerator is immutable: create a new TrainingJob to change hardware",
            check_update=lambda old, new: old == new,
        ),
        *ACCELERATOR_ALTERNATIVE_RULES,
    )


def _matches(pattern: str, value: str) -> bool:
    return re.search(pattern, value) is not None


# Chips of a 2-D or 3-D topology in CEL (no fold in CEL, so the product is spelled out).
_ANY_TOPOLOGY = TOPOLOGY_PATTERN
_ACC_IS_TPU = cel_is_tpu("self.accelerator.type")
_CEL_SLICES = "(has(self.accelerator.slices) ? self.accelerator.slices : 1)"
_AXES = "self.accelerator.topology.split('x')"
_CEL_TOPOLOGY_CHIPS = (
    f"({_AXES}.size() == 2 ? int({_AXES}[0]) * int({_AXES}[1])"
    f" : int({_AXES}[0]) * int({_AXES}[1]) * int({_AXES}[2]))"
)


class ReductionServerSettings(SpecModel):
    """Reducers for this job: a dedicated set (``replicas``) or a shared pool (``poolName``)."""

    replicas: Int | None = Field(default=None, ge=1, le=256)
    """Dedicated reducers; omitted: sized by the engine (or by the pool when poolName is set)."""
    machine_type: MachineType = DEFAULT_REDUCER_MACHINE_TYPE
    """Machine type of dedicated reducers (CPU only)."""
    pool_name: str | None = Field(
        default=None, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    """A ReductionServerPool in the job's namespace to use instead of dedicated reducers."""
    image: str = Field(default=DEFAULT_REDUCER_IMAGE, min_length=1, max_length=512)
    """Container image of dedicated reducers (a shared pool names its own)."""

    cel_rules = (
        Rule(
            cel="!(has(self.replicas) && has(self.poolName))",
            message="replicas sizes dedicated reducers; a shared pool (poolName) is sized by the "
            "ReductionServerPool: give one or the other",
            field_path=".replicas",
            reason="FieldValueForbidden",
            check=lambda s: s.replicas is None or s.pool_name is None,
        ),
    )


class Communication(SpecModel):
    """How gradients are summed across workers."""

    strategy: Strategy = "Auto"
    """``Auto`` lets the engine pick the faster of ring all-reduce and a reduction server."""
    reduction_server: ReductionServerSettings | None = None

    cel_rules = (
        Rule(
            cel="!has(self.reductionServer) || self.strategy != 'Ring'",
            message="reductionServer is set but strategy is Ring: use ReductionServer or Auto",
            field_path=".reductionServer",
            reason="FieldValueForbidden",
            check=lambda s: s.reduction_server is None or s.strategy != "Ring",
        ),
    )


class RunPolicy(SpecModel):
    """Lifecycle of the job (the names and meanings of batch/v1 Job's fields)."""

    backoff_limit: Int = Field(default=3, ge=0, le=100)
    """Gang restarts after a worker fails before the job is Failed."""
    active_deadline_seconds: Int | None = Field(default=None, ge=1, le=31536000)
    """Wall-clock limit from start; the job is Failed when it passes."""
    ttl_seconds_after_finished: Int | None = Field(default=None, ge=0, le=31536000)
    """Delete the finished job (and its pods) this long after it ends."""
    suspend: bool = False
    """True: no pods run (existing ones are deleted) and the gang is released; the gang's shape
    (workers, machineType, model, communication, template, parallelism) may change in the same
    update."""


TopologyPolicy = Literal["Auto", "Required", "Preferred"]


class TrainingPlacement(SpecModel):
    """Where in its pool the gang's hosts go (docs/topology.md)."""

    topology: TopologyPolicy = "Auto"
    """Hosts are packed by the pool's topology labels (GKE blocks, AWS network-node layers, the
    NVLink clique): into the fewest blocks the free hosts allow. Required: wait until one block
    holds the whole gang (and each tensor-parallel group over trays one NVLink clique).
    Preferred: packed where possible, spread otherwise. Auto: the engine's choice per level
    (``status.plan.placement``): required where spreading makes the step more than 5 % slower,
    preferred otherwise; and only where one of the pool's domains could hold the gang."""
    objective: Objective = "EarliestFinish"
    """How ``accelerator.alternatives`` are ranked: ``EarliestFinish`` (the shortest run: steps
    x the predicted step there, every candidate starting now) or ``LowestCost`` (run hours x the
    catalog's price per hour of the workers and reducers). Without a step count (``steps``, or
    a report's totalSteps) the step time, or the cost of one step, ranks them."""


class TrainingJobSpec(SpecModel):
    """The desired training run."""

    workers: Int = Field(ge=1, le=2048)
    """Worker hosts (pods), each with ``accelerator.perWorker`` accelerators. Fixed while the gang
    is admitted, like the rest of the gang's shape (docs/api.md: editing a live object)."""
    accelerator: TrainingAccelerator
    machine_type: MachineType | None = None
    """Worker machine type; omitted: derived from the accelerator and perWorker (8 x
    nvidia-tesla-a100 -> a2-highgpu-8g, 16 -> a2-megagpu-16g)."""
    model: TrainingModel
    communication: Communication = Field(
        default_factory=Communication, json_schema_extra={"default": {}}
    )
    parallelism: Parallelism | None = None
    """Tensor / pipeline / sharded data parallelism for a model with an architecture; left out,
    the job is plain data-parallel as before."""
    framework: TrainingFramework | None = None
    """The training framework (its kernels shape the predicted step); left out: inferred from
    the image, else the default (see ``framework.name``)."""
    template: PodTemplate
    placement: TrainingPlacement | None = None
    """Topology within the pool (left out: Auto)."""
    run_policy: RunPolicy = Field(default_factory=RunPolicy, json_schema_extra={"default": {}})
    steps: Int | None = Field(default=None, ge=1, le=10**12)
    """Training steps the job runs, if known: with the predicted step time it gives the job's
    duration and ETA before its first progress report, and lets jobs waiting behind it get an
    expected start time (docs/progress.md). A report's ``totalSteps`` takes over from it."""

    cel_rules = (
        *PARALLELISM_RULES,
        *SPEC_ALTERNATIVE_RULES,
        # Megatron-Core's precision-aware optimizer (--exp-avg-dtype, --exp-avg-sq-dtype bf16).
        Rule(
            cel=(
                "!has(self.model.optimizerMomentsDType)"
                " || self.model.optimizerMomentsDType == 'fp32'"
                " || (has(self.framework) && self.framework.name == 'Megatron')"
            ),
            message="model.optimizerMomentsDType bf16 is Megatron-Core's precision-aware "
            "optimizer (--exp-avg-dtype bf16): set framework.name Megatron",
            field_path=".model.optimizerMomentsDType",
            reason="FieldValueForbidden",
            check=lambda s: (
                s.model.optimizer_moments_dtype in (None, "fp32")
                or (s.framework is not None and s.framework.name == "Megatron")
            ),
        ),
        # Parameters kept in bf16 with no fp32 copy (MaxText's weight_dtype bfloat16, PyTorch's
        # model.to(torch.bfloat16)); their gradients and moments take their dtype.
        Rule(
            cel=(
                "!has(self.model.parameterDType) || self.model.parameterDType == 'fp32'"
                " || (has(self.framework)"
                f" && self.framework.name in {list(BF16_PARAMETER_FRAMEWORKS)})"
            ),
            message="model.parameterDType bf16 (no fp32 copy of the parameters) is MaxText's "
            "weight_dtype bfloat16 or plain PyTorch's bf16 model: set framework.name MaxText or "
            "PyTorch (Megatron and DeepSpeed keep fp32 masters; torchtitan's and llm-foundry's "
            "FSDP keep fp32 parameters)",
            field_path=".model.parameterDType",
            reason="FieldValueForbidden",
            check=lambda s: (
                s.model.parameter_dtype == "fp32"
                or (s.framework is not None and s.framework.name in BF16_PARAMETER_FRAMEWORKS)
            ),
        ),
        Rule(
            cel=(
                "!has(self.model.parameterDType) || self.model.parameterDType == 'fp32'"
                " || ((!has(self.model.gradientDType) || self.model.gradientDType == 'bf16')"
                " && (!has(self.model.optimizerMomentsDType)"
                " || self.model.optimizerMomentsDType == 'bf16'))"
            ),
            message="model.parameterDType bf16: the gradients and Adam's moments are bf16 with "
            "the parameters (MaxText's mu_dtype and nu inherit weight_dtype, PyTorch's AdamW "
            "states take the parameters' dtype): leave gradientDType and optimizerMomentsDType "
            "out",
            field_path=".model.parameterDType",
            reason="FieldValueInvalid",
            check=lambda s: (
                s.model.parameter_dtype == "fp32"
                or (
                    s.model.gradient_dtype in (None, "bf16")
                    and s.model.optimizer_moments_dtype in (None, "bf16")
                )
            ),
        ),
        Rule(
            cel=(
                f"!{_ACC_IS_TPU}"
                " || !has(self.communication) || self.communication.strategy != 'ReductionServer'"
            ),
            message="a TPU slice all-reduces over its own interconnect (ICI): "
            "strategy ReductionServer is for GPU workers only",
            field_path=".communication.strategy",
            check=lambda s: (
                not is_tpu(s.accelerator.type) or s.communication.strategy != "ReductionServer"
            ),
        ),
        Rule(
            cel=(
                f"!{_ACC_IS_TPU}"
                " || !has(self.communication) || !has(self.communication.reductionServer)"
            ),
            message="reductionServer does not apply to a TPU accelerator",
            field_path=".communication.reductionServer",
            reason="FieldValueForbidden",
            check=lambda s: (
                not is_tpu(s.accelerator.type) or s.communication.reduction_server is None
            ),
        ),
        Rule(
            cel=f"!{_ACC_IS_TPU} || !has(self.framework) || self.framework.name == 'MaxText'",
            message="a TPU slice runs MaxText (JAX / XLA): framework.name must be MaxText",
            field_path=".framework.name",
            check=lambda s: (
                not is_tpu(s.accelerator.type)
                or s.framework is None
                or s.framework.name == "MaxText"
            ),
        ),
        Rule(
            cel=f"{_CEL_SLICES} == 1 || self.workers % {_CEL_SLICES} == 0",
            message="workers must be a multiple of accelerator.slices: every slice has the "
            "same hosts",
            field_path=".workers",
            check=lambda s: s.workers % s.accelerator.slices == 0,
            message_expression=(
                f"'workers %d is not a multiple of slices %d'.format([self.workers, {_CEL_SLICES}])"
            ),
            message_for=lambda s: (
                f"workers {s.workers} is not a multiple of slices {s.accelerator.slices}"
            ),
        ),
        Rule(
            # Each slice is one TPU slice: its hosts times chips per host are the topology's chips.
            cel=(
                "!has(self.accelerator.topology)"
                f" || !self.accelerator.topology.matches('{_ANY_TOPOLOGY}')"
                f" || self.workers * self.accelerator.perWorker"
                f" == {_CEL_SLICES} * {_CEL_TOPOLOGY_CHIPS}"
            ),
            message="workers x accelerator.perWorker must equal slices x the chips of the TPU "
            "topology (2x2x4 = 16 chips = 4 workers x 4; 2 slices of it: 8 workers x 4)",
            field_path=".workers",
            check=lambda s: (
                s.accelerator.topology is None
                or not _matches(_ANY_TOPOLOGY, s.accelerator.topology)
                or s.workers * s.accelerator.per_worker
                == s.accelerator.slices * topology_chips(s.accelerator.topology)
            ),
        ),
    )


class TrainingJobPhase(StrEnum):
    """Values of ``status.phase`` (a string in the schema, so the operator can add phases)."""

    PENDING = "Pending"  # not placed yet; Schedulable=False says why (e.g. no room for the gang)
    ADMITTED = "Admitted"  # the whole gang fits on a pool; worker pods are being created
    RUNNING = "Running"
    SUSPENDED = "Suspended"  # runPolicy.suspend: no pods
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


TopologyRequirement = Literal["Required", "Preferred"]


class PlacementStep(StatusModel):
    """One placement of the gang's hosts in its pool, and the engine's step under it."""

    placement: str = Field(max_length=64)
    """``Packed``: one block, every tensor-parallel group inside one NVLink clique (the plan's
    own step). ``PackedInBlocks``: several blocks, each group of consecutive ranks inside one.
    ``Spread``: dealt over the blocks, as a topology-blind scheduler deals hosts. On hosts whose
    NVLink domain spans several (GB200 NVL72), with a tensor-parallel group over trays, the same
    three with the groups split over NVLink cliques: ``TensorOverNICs``,
    ``PackedInBlocksTensorOverNICs``, ``SpreadTensorOverNICs``."""
    step_seconds: float
    loss_percent: float
    """How much slower than ``Packed``, in percent."""


class PlacementPlan(StatusModel):
    """What the placement of a gang of several GPU hosts costs its step, and what
    ``spec.placement.topology: Auto`` decides from it (docs/topology.md)."""

    steps: list[PlacementStep] = Field(default_factory=list, max_length=8)
    spine_oversubscription: float | None = None
    """The oversubscription between blocks the steps assume: the machine type's
    ``spineOversubscription`` in the catalog, else 1 (non-blocking; no cloud publishes one)."""
    loss_threshold_percent: float | None = None
    """Auto requires a level whose spread placement loses more than this."""
    block: TopologyRequirement | None = None
    """Auto's choice for the block level: Required when ``Spread`` loses more than the
    threshold, else Preferred."""
    nvlink_clique: TopologyRequirement | None = None
    """Auto's choice for the NVLink clique (``nvidia.com/gpu.clique``) of each tensor-parallel
    group: Required when ``TensorOverNICs`` loses more than the threshold, else Preferred;
    absent where no group spans hosts of one NVLink domain."""
    tensor_group_hosts: int | None = None
    """Hosts per tensor-parallel group, where one spans hosts (GB200 NVL72 trays)."""


class TrainingPlan(StatusModel):
    """The engine's decision and prediction for the pool the gang runs on. Every field is
    declared: what is not here is not in status (the ReductionServerPool controller reads
    ``reducersWanted`` from it, so that is part of the contract too)."""

    strategy: str | None = None
    """The strategy chosen (``Ring`` or ``ReductionServer``)."""
    algorithm: str | None = None
    """What runs the gradient reduction: NCCL's algorithm (``Ring``, ``Tree``, ``NVLS``,
    ``NVLSTree``), the ICI torus, or the reduction server."""
    protocol: str | None = None
    """NCCL's protocol for the largest gradient bucket (``LL``, ``LL128``, ``Simple``)."""
    compute_precision: str | None = None
    """The precision the step's compute time assumes (``spec.model.computePrecision``)."""
    step_seconds: float | None = None
    """Predicted time of one training step (the engine's, never corrected)."""
    calibrated_step_seconds: float | None = None
    """``stepSeconds`` times this cluster's correction for the machine type and workload kind,
    where finished jobs gave one (docs/progress.md)."""
    calibration: str | None = None
    """Where the correction comes from: "x1.12 from 7 jobs observed on a3-highgpu-8g"."""
    compute_seconds: float | None = None
    communication_seconds: float | None = None
    """Predicted all-reduce time not hidden behind backward computation."""
    samples_per_second: float | None = None
    bus_bandwidth_gbps: float | None = Field(default=None, alias="busBandwidthGBps")
    """Predicted all-reduce bus bandwidth (NCCL's busbw definition), GB/s."""
    bottleneck: str | None = None
    """What limits the step: ``compute``, ``network``, ``reducers``, ``intra-host``..."""
    machine_type: str | None = None
    reducers: int | None = None
    """Reducers used (reduction server only)."""
    reducer_machine_type: str | None = None
    reducer_share: float | None = None
    """The part of a shared ReductionServerPool's bandwidth the plan assumes this job gets
    (1 / the pool's jobs that run at once, this one included); absent for dedicated reducers."""
    reducers_wanted: int | None = None
    """Reducers the bandwidth rule asks for (reducers' aggregate bandwidth >= the workers'):
    what a ReductionServerPool sized by its jobs gives this one."""
    cost_optimal_reducers: int | None = None
    """The reducer count with the lowest predicted cost per sample."""
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")
    """Predicted on-demand cost of workers and reducers."""
    alternatives: dict[str, float] | None = None
    """Predicted step seconds of every strategy considered."""
    # The layout (a model with an architecture): what the engine chose or was given.
    layout: str | None = None
    """The layout in short, ``TP8 PP4 DP32``."""
    tensor: int | None = None
    pipeline: int | None = None
    data: int | None = None
    data_replicas: int | None = None
    """Hybrid sharding's replica groups (``spec.parallelism.dataReplicas``; 1: the sharding
    spans every data-parallel rank)."""
    sharding: str | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    activation_recompute: str | None = None
    recompute_layers: int | None = None
    """Full recompute limited to this many layers of each model chunk
    (``spec.parallelism.recomputeLayers``); absent: every layer."""
    compiler_remat_share: float | None = None
    """MaxText: the share of what ``activationRecompute`` saves beyond Full that XLA recomputes
    so that the step fits the chip (its rematerialisation under the memory limit); absent:
    none."""
    vocab_tiling: int | None = None
    """MaxText's vocabulary tiling (``spec.parallelism.vocabTiling``): the loss in this many
    chunks; 1: none."""
    optimizer_moments_dtype: str | None = Field(default=None, alias="optimizerMomentsDType")
    """Adam's moments' element type (``spec.model.optimizerMomentsDType``): ``fp32`` or
    ``bf16``, in the optimizer state and the optimizer step."""
    parameter_dtype: str | None = Field(default=None, alias="parameterDType")
    """The parameters' element type (``spec.model.parameterDType``): ``fp32`` or ``bf16`` (no
    fp32 copy: the gradients and Adam's moments bf16 with them)."""
    iota_embed: bool | None = None
    """MaxText's one-hot embedding lookup (``spec.parallelism.iotaEmbed``): two GEMMs over the
    vocabulary in the step's GEMMs."""
    overlap_gradient_reduction: bool | None = None
    """Whether the data-parallel reduction runs behind backward
    (``spec.parallelism.overlapGradientReduction``); false: after it, in the step."""
    offload_layer_inputs: bool | None = None
    """MaxText's decoder_layer_input offload (``spec.parallelism.offloadLayerInputs``): every
    layer's input in host memory, in ``hostOffloadBytesPerAccelerator``."""
    activation_offload_layers: int | None = None
    """Megatron's CPU offloading of this many layers' activations
    (``spec.parallelism.activationOffloadLayers``); the host bytes are
    ``hostOffloadBytesPerAccelerator``, the copies' exposed time
    ``stepPartsSeconds.activationOffload``."""
    virtual_pipeline_stages: int | None = None
    context: int | None = None
    """Context-parallel ranks (ring attention)."""
    expert: int | None = None
    """Expert-parallel ranks (a mixture of experts)."""
    expert_tensor: int | None = None
    """The ranks each routed expert is split over (the tensor degree, or fewer: MoE parallel
    folding)."""
    active_parameters: int | None = None
    """A mixture of experts' parameters one token runs through (top-k experts, not all)."""
    all_to_all_seconds: float | None = None
    """A mixture of experts: the dispatch / combine all-to-alls on the step's critical path."""
    expert_overlap: str | None = None
    """A mixture of experts: the all-to-all overlap schedule the step assumes
    (``spec.parallelism.expertOverlap``); the workers get it as RINGMASTER_EXPERT_OVERLAP."""
    expert_dispatch: str | None = None
    """A mixture of experts: how its tokens reach their experts (``AllToAll``, ``DeepEP``)."""
    pipeline_layout: str | None = None
    """spec.parallelism.pipelineLayout, where the job writes its stages out."""
    expert_capacity_factor: float | None = None
    """A mixture of experts dropping tokens: the capacity factor (absent: dropless)."""
    expert_pad_to_capacity: bool | None = None
    """With a capacity factor: whether every expert's input is padded to its capacity."""
    fits: bool | None = None
    """Whether the layout fits in the accelerators' memory."""
    reason: str | None = None
    """Why it does not fit, with the numbers."""
    tokens_per_second: float | None = None
    mfu: float | None = None
    """Model FLOPs utilisation: model FLOPs per second / the accelerators' dense peak."""
    slices: int | None = None
    """TPU multislice: the slices joined over the data-center network (absent for one)."""
    dcn_share: float | None = Field(default=None, alias="dcnShare")
    """The part of the step the cross-slice DCN traffic adds: (this step - the step of one slice
    doing its share of the work) / this step; the rest of the gradient reduction hides behind
    backward."""
    memory_per_accelerator_bytes: dict[str, float] | None = None
    """weights, gradients, optimizer, activations, reserve, total and capacity, in bytes."""
    framework: str | None = None
    """The framework the step is composed for (``spec.framework.name``, else inferred: the
    evidence says how); the workers get it as ``RINGMASTER_FRAMEWORK``."""
    cuda_graph: str | None = None
    """Megatron's CUDA graphs the step assumes (``spec.framework.cudaGraph``; ``None`` when left
    out); the workers get it as ``RINGMASTER_CUDA_GRAPH``."""
    step_parts_seconds: dict[str, float] | None = None
    """The step, part by part (seconds per step on the busiest accelerator): gemm, attention,
    memoryBound, loss, hostGap, optimizer, and the exposed communication and pipeline bubble;
    activationOffload where the recompute policy offloads activations to host memory (the
    copies' time beyond the layers' compute)."""
    host_offload_bytes_per_accelerator: float | None = None
    """Where ``activationRecompute`` offloads activations to host memory (QkvProjOffloaded,
    MinimalOffloaded): the bytes each accelerator keeps in its host's DRAM at the peak, held
    against its share of the host's DRAM where the catalog states it."""
    evidence: str | None = Field(default=None, max_length=1024)
    """What the prediction rests on: the calibration cell (accelerator x framework x precision)
    and its checked error, or ``extrapolated: no checked run of <framework> on <accelerator>``."""
    warnings: list[Annotated[str, Field(max_length=1024)]] | None = Field(
        default=None, max_length=8
    )
    """Valid but implausible input, each naming its field (a step longer than a day, memory
    beyond the whole gang, a parameter count far beyond any published model); also the
    ``Plausible`` condition and one Warning Event each."""
    placement: PlacementPlan | None = None
    """A gang of several GPU hosts: its step under each placement in its pool, and what
    ``spec.placement.topology: Auto`` decides from it."""


class TrainingProgress(StatusModel):
    """What the workers reported, beside what the engine predicted (docs/progress.md)."""

    step: int | None = None
    total_steps: int | None = None
    """From the latest report's ``totalSteps``, else ``spec.steps``."""
    percent: float | None = None
    observed_step_seconds: float | None = None
    """The median step time over the latest reports."""
    predicted_step_seconds: float | None = None
    """The prediction the observation is held against: the calibrated one where the cluster's
    calibration applies (``plan.calibratedStepSeconds``), else ``plan.stepSeconds``."""
    ratio: float | None = None
    """observedStepSeconds / predictedStepSeconds."""
    tokens_per_second: float | None = None
    samples_per_second: float | None = None
    eta: dt.datetime | None = None
    """When the job is expected to finish: the remaining steps at the observed step time (at
    the predicted one before any report)."""
    last_report_time: dt.datetime | None = None


class Admission(StatusModel):
    """The gang's admission, recorded before any of its pods is created: an operator that
    restarts finds it here, not in its memory."""

    pool: str
    """The node pool the gang was admitted on."""
    time: dt.datetime
    """When it was admitted."""
    attempt: int = Field(ge=0)
    """The gang attempt admitted (status.restarts + status.requeues at the time): a restart
    needs a new one."""
    hosts: list[str] | None = None
    """The host of each worker, by rank, when the operator chose them: each worker pod is
    pinned to its host, so kube-scheduler places the gang where admission counted its room."""
    blocks: list[str] | None = Field(default=None, max_length=4096)
    """The topology blocks (GKE ``gce-topology-block``, AWS network-node layer 1) of its hosts,
    where the pool's nodes carry them."""
    placement: str | None = Field(default=None, max_length=64)
    """Which of ``plan.placement.steps`` the admitted hosts are (``Packed``, ``Spread``, ...),
    where the pool's hosts carry topology labels."""
    predicted_step_seconds: float | None = None
    """The engine's step under that placement (``plan.stepSeconds`` is the packed one)."""
    accelerator: str | None = Field(default=None, max_length=63)
    """The accelerator type the gang was admitted on, where ``spec.accelerator.alternatives``
    offered others (its pods were built for it: resources, node selector, layout)."""
    workers: int | None = None
    """The gang's worker hosts on that accelerator (where alternatives were offered)."""
    per_worker: int | None = None
    """Accelerators per worker on that accelerator (where alternatives were offered)."""
    accelerators: list[AcceleratorChoice] | None = Field(
        default=None, max_length=MAX_ALTERNATIVES + 1
    )
    """Every accelerator considered, best first by ``spec.placement.objective``: the numbers
    the engine planned there, the one chosen, and why not the others."""
    slice_pools: list[str] | None = Field(default=None, max_length=MAX_SLICES)
    """A multislice job's node pool of each slice, by slice id (``MEGASCALE_SLICE_ID``): slice
    s holds ranks s x (workers / slices) to the next slice's first, and ``hosts`` names each
    one's host; ``pool`` is slice 0's. Absent for one slice."""


class WorkerCounts(StatusModel):
    """Worker pods by state."""

    total: int = 0
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


class TrainingJobStatus(StatusModel):
    """What the operator observed and decided. Written only by the operator."""

    observed_generation: int | None = None
    phase: str | None = None
    """One of :class:`TrainingJobPhase`."""
    conditions: list[Condition] = conditions_field()
    plan: TrainingPlan | None = None
    workers: WorkerCounts | None = None
    restarts: int | None = None
    """Gang restarts so far that a worker's failure caused (compared with
    runPolicy.backoffLimit)."""
    requeues: int | None = None
    """Gang restarts that cost no attempt: a host admission named for a worker was taken by
    another pod, cordoned, deleted or lost before the worker started there. Infrastructure, not
    the job: counted apart from restarts, as Kueue counts evictions."""
    pool: str | None = None
    """The node pool the gang was placed on."""
    admission: Admission | None = None
    """The admission of the current attempt (absent while the gang waits)."""
    reduction_server_pool: str | None = None
    """The ReductionServerPool (shared or dedicated) the workers use."""
    start_time: dt.datetime | None = None
    completion_time: dt.datetime | None = None
    progress: TrainingProgress | None = None
    """Progress reported by the workers, and the ETA (docs/progress.md)."""
    expected_start_time: dt.datetime | None = None
    """A waiting job's expected start, from the running jobs' ETAs on its candidate pools and
    the admission order; absent when unknown (``expectedStart`` says why)."""
    expected_start: str | None = Field(default=None, max_length=1024)
    """The expected start in words: the time and pool, or "unknown: " and the reason."""


# --- what may change while the gang runs -----------------------------------------------------
# The operator places a gang once, on one pool, in the shape the spec gives at admission; pods
# cannot move or change shape. An edit of that shape while the gang holds its pool would leave
# the running pods and the spec telling different stories (seen: a machineType edit turned a
# running job Pending with NoMatchingPool while its pods ran on). So the apiserver refuses such
# an edit from admission until the gang is released: a finished, suspended or waiting job (or
# one being suspended by the same update) may be edited, and its next gang takes the new shape.
ADMITTED_PHASES = (TrainingJobPhase.ADMITTED.value, TrainingJobPhase.RUNNING.value)
"""Phases in which a gang holds its pool. One place: the CEL and the Python twin both use it."""

_CEL_WAS_ADMITTED = (
    "has(oldSelf.status) && has(oldSelf.status.phase)"
    f" && oldSelf.status.phase in {list(ADMITTED_PHASES)}"
)


def gang_admitted(status: TrainingJobStatus) -> bool:
    """True while the job's gang holds its pool (``status.phase`` Admitted or Running)."""
    return status.phase in ADMITTED_PHASES


def _fixed_while_admitted(field: str, attribute: str, optional: bool = False) -> Rule:
    mine, old = f"self.spec.{field}", f"oldSelf.spec.{field}"
    unchanged = f"{mine} == {old}"
    if optional:  # absent on one side and present on the other is a change too
        unchanged = f"(has({mine}) ? has({old}) && {mine} == {old} : !has({old}))"

    def check(before: StoredObject, after: StoredObject) -> bool:
        return (
            getattr(before.spec, attribute) == getattr(after.spec, attribute)
            or after.spec.run_policy.suspend
            or not gang_admitted(before.status)
        )

    return Rule(
        cel=f"{unchanged} || self.spec.runPolicy.suspend || !({_CEL_WAS_ADMITTED})",
        message=f"{field} cannot change while the gang is admitted or running (status.phase "
        "Admitted or Running): suspend the job first (runPolicy.suspend: true, also allowed in "
        "the same update) or create a new TrainingJob",
        field_path=f".spec.{field}",
        reason="FieldValueForbidden",
        check_update=check,
    )


def _suspension_lifted_early(before: StoredObject, after: StoredObject) -> bool:
    lifted = before.spec.run_policy.suspend and not after.spec.run_policy.suspend
    return not lifted or not gang_admitted(before.status)


TRAINING_JOB_RULES = (
    _fixed_while_admitted("workers", "workers"),
    _fixed_while_admitted("machineType", "machine_type", optional=True),
    _fixed_while_admitted("model", "model"),
    _fixed_while_admitted("communication", "communication"),
    _fixed_while_admitted("template", "template"),
    _fixed_while_admitted("parallelism", "parallelism", optional=True),
    _fixed_while_admitted("framework", "framework", optional=True),
    # Otherwise suspend-edit-resume, done faster than the operator reacts, would leave the old
    # gang running under the new shape: the very orphan the rules above prevent.
    Rule(
        cel="!oldSelf.spec.runPolicy.suspend || self.spec.runPolicy.suspend"
        f" || !({_CEL_WAS_ADMITTED})",
        message="runPolicy.suspend cannot be set back to false before the job is suspended "
        "(status.phase is still Admitted or Running): wait for phase Suspended",
        field_path=".spec.runPolicy.suspend",
        reason="FieldValueForbidden",
        check_update=_suspension_lifted_early,
    ),
)

_WHILE_NOT_ADMITTED = (
    "while the gang is not admitted (phase not Admitted or Running), or in the update that sets "
    "runPolicy.suspend: true"
)
TRAINING_JOB_SPEC_CHANGES = (
    SpecChange(
        "accelerator",
        "never",
        "a job's hardware is fixed once created; create a new TrainingJob to change it",
    ),
    SpecChange("workers", _WHILE_NOT_ADMITTED, "the gang's size: its pods exist in this number"),
    SpecChange(
        "machineType",
        _WHILE_NOT_ADMITTED,
        "decides the pool; admitted pods cannot move to another pool",
    ),
    SpecChange(
        "model",
        _WHILE_NOT_ADMITTED,
        "the plan (strategy, reducers) is computed from it, and the running workers were "
        "started with that plan",
    ),
    SpecChange(
        "communication",
        _WHILE_NOT_ADMITTED,
        "the strategy and the reducers the running workers were started with",
    ),
    SpecChange(
        "template",
        _WHILE_NOT_ADMITTED,
        "every worker of a gang runs the same pod; a pod recreated after a crash must match the "
        "others",
    ),
    SpecChange(
        "parallelism",
        _WHILE_NOT_ADMITTED,
        "the layout (tensor, pipeline, sharding) every worker was started with",
    ),
    SpecChange(
        "framework",
        _WHILE_NOT_ADMITTED,
        "the step the plan predicts and the launcher's RINGMASTER_FRAMEWORK the workers got",
    ),
    SpecChange(
        "placement",
        "any time",
        "used by the next admission only: an admitted gang keeps its hosts and the accelerator "
        "its objective chose",
    ),
    SpecChange(
        "steps",
        "any time",
        "only the ETA and the expected start of the jobs waiting behind it follow it",
    ),
    SpecChange(
        "runPolicy",
        "any time, except that suspend: true is lifted only once the job is Suspended",
        "takes effect at once: backoffLimit at the next failure, activeDeadlineSeconds and "
        "ttlSecondsAfterFinished on the next check, suspend: true deletes the pods and releases "
        "the gang (which must have happened before the job resumes, in whatever new shape)",
    ),
)


TRAINING_JOB = Resource(
    kind="TrainingJob",
    plural="trainingjobs",
    short_name="tj",
    description="Data-parallel training: N worker hosts with K accelerators each, placed as one "
    "gang on one node pool; the operator picks ring all-reduce or a reduction server from its "
    "performance model.",
    spec=TrainingJobSpec,
    status=TrainingJobStatus,
    phases=TrainingJobPhase,
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase"),
        PrinterColumn(
            "Reason",
            "string",
            condition_reason("Schedulable"),
            "Why the gang is (not) placed: the Schedulable condition's reason",
        ),
        PrinterColumn(
            "Strategy", "string", ".status.plan.strategy", "Gradient reduction strategy chosen"
        ),
        PrinterColumn("Workers", "integer", ".spec.workers", "Worker hosts"),
        PrinterColumn(
            "Per-Worker", "integer", ".spec.accelerator.perWorker", "Accelerators per worker"
        ),
        PrinterColumn("Accelerator", "string", ".spec.accelerator.type", "Accelerator type"),
        PrinterColumn(
            "Admitted-On",
            "string",
            ".status.admission.accelerator",
            "The accelerator admission chose among spec.accelerator.alternatives",
            priority=1,
        ),
        PrinterColumn(
            "Step-Seconds", "number", ".status.plan.stepSeconds", "Predicted seconds per step"
        ),
        PrinterColumn(
            "Observed",
            "number",
            ".status.progress.observedStepSeconds",
            "Observed seconds per step",
        ),
        PrinterColumn(
            "Ratio", "number", ".status.progress.ratio", "Observed over predicted step time"
        ),
        PrinterColumn("Progress", "number", ".status.progress.percent", "Percent of the steps"),
        # "string", not "date": kubectl prints a future date as "<invalid>".
        PrinterColumn("ETA", "string", ".status.progress.eta", "Expected finish"),
        PrinterColumn(
            "Expected-Start",
            "string",
            ".status.expectedStartTime",
            "A waiting job's expected start",
        ),
        PrinterColumn(
            "Bottleneck", "string", ".status.plan.bottleneck", "What limits the step", priority=1
        ),
        PrinterColumn(
            "Cost-USD/h",
            "number",
            ".status.plan.costPerHourUSD",
            "Predicted cost per hour",
            priority=1,
        ),
        PrinterColumn("Pool", "string", ".status.pool", "Node pool of the gang", priority=1),
        PrinterColumn(
            "Layout", "string", ".status.plan.layout", "Tensor x pipeline x data", priority=1
        ),
        PrinterColumn(
            "MFU", "number", ".status.plan.mfu", "Predicted model FLOPs utilisation", priority=1
        ),
        AGE,
    ),
    rules=TRAINING_JOB_RULES,
    spec_changes=TRAINING_JOB_SPEC_CHANGES,
)
