"""Valid but implausible input: what the API accepts and the engine plans, yet is almost surely a
slip (``1e16`` parameters for ``1e10``), reported as warnings that name the field.

The API's bounds are wide on purpose (a schema cannot know tomorrow's models), so a TrainingJob
with 1e16 parameters is accepted and predicts a 19-day step without a word. These checks look at
the spec and its plan together and say what is implausible and why; they never refuse anything.
`ringmaster plan` prints them; the operator turns each into a ``Warning`` Event and condition
(``reason`` is CamelCase for that purpose).

Pure: no I/O, no cluster. Only figures from the catalog and the constants below, each sourced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringmaster.api.architecture import architecture_parameters
from ringmaster.engine import nccl_settings
from ringmaster.engine.hardware import Catalog
from ringmaster.engine.jax_runtime import ignored_settings
from ringmaster.manifests.inference import serving_env
from ringmaster.manifests.training import layout_env
from ringmaster.planning import serving_flags, training_flags
from ringmaster.planning.disaggregation import runs_disaggregated
from ringmaster.planning.layouts import layout_status
from ringmaster.planning.plans import (
    InferenceReport,
    LlmInferenceReport,
    TrainingReport,
    _env_with_prefix,
    _nccl_env,
    active_catalog,
    plan_inference,
    serving_engine_choice,
)

# A training step longer than a day: the API caps a *measured* computeSecondsPerStep at the same
# (TrainingModel.compute_seconds_per_step, le=86400); a prediction beyond it means the inputs
# (usually parameters or flopsPerSample) are off by orders of magnitude.
LONGEST_PLAUSIBLE_STEP_SECONDS = 86400.0

# The largest published dense-or-sparse model by parameter count: Switch-C, 1.571e12 parameters
# (Fedus, Zoph, Shazeer, "Switch Transformers", JMLR 2022, arXiv:2101.03961, Table 9). Ten times
# that leaves room for what comes next and still catches typos of a few orders of magnitude.
LARGEST_PUBLISHED_PARAMETERS = 1.571e12
IMPLAUSIBLE_PARAMETER_FACTOR = 10.0

# Bytes per element of the gradient dtypes (IEEE 754 binary32 / binary16, bfloat16).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
# Training keeps at least the weights and their gradients (two copies at the gradient dtype);
# optimizer state adds more (12 bytes per parameter for mixed-precision Adam: Rajbhandari et al.,
# "ZeRO", SC 2020, section 3.1). The lower bound is used, so a warning means the model cannot fit
# even fully sharded (ZeRO-3 / FSDP) over every accelerator of the gang.
MIN_TRAINING_COPIES = 2

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Implausible:
    """One implausible input: the field to look at, a CamelCase reason, and why."""

    field: str
    """Dotted camelCase path from the object's root: ``spec.model.parameters``."""
    reason: str
    """For an Event's or condition's ``reason``: ``ImplausibleStepTime``..."""
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason, "message": self.message}


def _bytes(n: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e6:.3g} MB"


def _size_field(model: Any) -> str:
    if getattr(model, "parameters", None) is None and getattr(model, "architecture", None):
        return "spec.model.architecture"
    return "spec.model.parameters"


def _parameters(parameters: float, field: str = "spec.model.parameters") -> Implausible | None:
    limit = LARGEST_PUBLISHED_PARAMETERS * IMPLAUSIBLE_PARAMETER_FACTOR
    if parameters <= limit:
        return None
    return Implausible(
        field,
        "ImplausibleParameterCount",
        f"{parameters:.3g} parameters is more than {IMPLAUSIBLE_PARAMETER_FACTOR:g} times the "
        f"largest published model ({LARGEST_PUBLISHED_PARAMETERS:.4g}); is it a typo?",
    )


def _parameter_count(model: Any) -> float:
    """The parameters an architecture implies (the API's source of truth when one is given),
    else the count given."""
    if getattr(model, "architecture", None) is not None:
        return float(architecture_parameters(model.architecture))
    return float(model.parameters)


def training_warnings(
    spec: Any, plan: TrainingReport, catalog: Catalog | None = None
) -> list[Implausible]:
    """What is implausible about a TrainingJob ``spec`` given its ``plan`` (from
    :func:`~ringmaster.planning.plans.plan_training`); empty when nothing is."""
    catalog = catalog or active_catalog()
    warnings: list[Implausible] = []
    model = spec.model
    parameters = _parameter_count(model)
    # Where the parameter count comes from: given, or implied by the architecture.
    size_field = _size_field(model)
    too_many = _parameters(parameters, size_field)
    if too_many:
        warnings.append(too_many)

    prediction = plan.prediction
    accelerators = prediction.workers * prediction.per_worker
    accelerator = catalog.accelerator(prediction.accelerator)
    needed = parameters * DTYPE_BYTES.get(model.gradient_element_type, 4) * MIN_TRAINING_COPIES
    if needed / accelerators > accelerator.memory_bytes:
        warnings.append(
            Implausible(
                size_field,
                "ExceedsAcceleratorMemory",
                f"weights and gradients alone ({model.gradient_element_type}) need"
                f" {_bytes(needed)}: "
                f"{_bytes(needed / accelerators)} per accelerator even sharded over all "
                f"{accelerators} of the gang, more than the {_bytes(accelerator.memory_bytes)} "
                f"of one {accelerator.name}",
            )
        )

    layout = plan.layout
    if layout is not None and layout.eager_fp8 is not None and layout.eager_fp8.loses_to_bf16:
        warnings.append(
            Implausible(
                "spec.model.computePrecision",
                "FP8SlowerThanBF16",
                f"{layout.eager_fp8.describe()}: turn on spec.framework.compile or train in bf16",
            )
        )

    warnings.extend(_training_flag_warnings(spec, plan))
    ignored = _ignored_nccl_settings(spec)
    if ignored:
        warnings.append(
            Implausible(
                "spec.template.env", "NcclSettingIgnored", nccl_settings.ignored_message(ignored)
            )
        )

    xla = _ignored_xla_settings(spec, layout)
    if xla:
        warnings.append(
            Implausible(
                "spec.template.env",
                "XlaSettingIgnored",
                "JAX / XLA settings the plan does not model (the step is XLA's default for "
                f"them): {'; '.join(xla)}",
            )
        )

    chosen = plan.chosen
    if chosen.step_seconds > LONGEST_PLAUSIBLE_STEP_SECONDS:
        days = chosen.step_seconds / SECONDS_PER_DAY
        if chosen.exposed_communication_seconds > chosen.compute_seconds:
            field = size_field  # the gradients to all-reduce come from it
            why = f"all-reducing {_bytes(prediction.gradient_bytes)} of gradients per step"
        elif prediction.compute_source == "measured":
            field = "spec.model.computeSecondsPerStep"
            why = "the measured compute time"
        elif model.flops_per_sample is not None:
            field = "spec.model.flopsPerSample"
            why = f"computing {float(model.flops_per_sample):.3g} FLOPs per sample"
        else:
            field = size_field  # the FLOPs follow from the architecture
            why = "computation"
        warnings.append(
            Implausible(
                field,
                "ImplausibleStepTime",
                f"the predicted step takes {chosen.step_seconds:.3g} s ({days:.3g} days), "
                f"mostly {why}; a training step longer than a day is almost surely a wrong input",
            )
        )
    return warnings


def _training_flag_warnings(spec: Any, plan: TrainingReport) -> list[Implausible]:
    """torchrun's world against the gang, and, for a job whose plan chose a layout, the
    launcher's layout flags that contradict it and its switches the plan does not model
    (planning.training_flags)."""
    template = getattr(spec, "template", None)
    if template is None:
        return []
    env = {str(e.name): str(e.value) for e in (template.env or []) if e.value is not None}
    out = []
    world = training_flags.torchrun_world(
        template.command, template.args, plan.prediction.per_worker, plan.prediction.workers, env
    )
    if world:
        out.append(
            Implausible(
                "spec.template.args",
                "LauncherWorldMismatch",
                "torchrun starts another world than the gang's: "
                + "; ".join(c.describe() for c in world),
            )
        )
    if plan.layout is None:
        return out
    planned = {e["name"]: e["value"] for e in layout_env(layout_status(plan.layout))}
    hw = plan.layout.hardware
    assumed = {
        training_flags.EARLY_STOP: "true" if hw.framework.recompute_stops_early else "false",
        training_flags.TENSOR_OVERLAP: "true" if hw.tensor_overlap else "false",
        training_flags.IOTA_EMBED: "true" if hw.iota_embed else "false",
        training_flags.GRAD_OVERLAP: "true" if hw.overlaps_gradient_reduction else "false",
        training_flags.PARAMETER_DTYPE: hw.parameter_dtype,
    }
    flags = training_flags.classify(template.command, template.args, planned, env, assumed)
    if flags is None:
        return out
    if flags.conflicts:
        out.append(
            Implausible("spec.template.args", "LayoutFlagConflicts", flags.conflict_message())
        )
    if flags.not_modelled:
        out.append(Implausible("spec.template.args", "LayoutFlagIgnored", flags.ignored_message()))
    stated = getattr(spec.model, "compute_precision", None)
    if flags.precision is not None and flags.precision[1] != stated:
        switch, low = flags.precision
        out.append(
            Implausible(
                "spec.model.computePrecision",
                "PrecisionFlagConflicts",
                f"the launcher trains in {low.upper()} ({switch}) where spec.model"
                f".computePrecision is {stated or 'not set (bf16)'}: the plan is that"
                f" precision's step; set computePrecision: {low}",
            )
        )
    return out


def _ignored_xla_settings(spec: Any, layout: Any) -> tuple[str, ...]:
    """A JAX job's XLA_* settings the plan does not read (engine.jax_runtime)."""
    if layout is None:
        return ()
    hw = layout.hardware
    try:
        return ignored_settings(_env_with_prefix(spec, "XLA_"), hw.framework.name, hw.kind)
    except ValueError:  # a bad memory fraction: the plan itself already refused it
        return ()


def _ignored_nccl_settings(spec: Any) -> tuple[str, ...]:
    """The workers' NCCL_* variables the engine neither models nor knows to be harmless
    (engine.nccl_settings): the plan is NCCL's default for them, so the user is told by name."""
    try:
        return nccl_settings.classify(_nccl_env(spec)).ignored
    except ValueError:  # a bad modelled value: the plan itself already refused it
        return ()


def inference_warnings(
    spec: Any, plan: InferenceReport | LlmInferenceReport, catalog: Catalog | None = None
) -> list[Implausible]:
    """What is implausible about an InferenceEndpoint ``spec`` (weights that do not fit a replica
    are already an infeasible plan, with its reason)."""
    too_many = _parameters(_parameter_count(spec.model))
    warnings = [too_many] if too_many else []
    capped = _binding_batch_cap(spec, plan, catalog)
    if capped is not None:
        warnings.append(capped)
    warnings.extend(_serving_flag_warnings(spec, plan))
    nccl = _serving_nccl_settings(spec)
    if nccl:
        warnings.append(
            Implausible(
                "spec.template.env",
                "NcclSettingIgnored",
                "ignored by the engine: "
                + ", ".join(nccl)
                + " (the serving plan times each engine's own tensor-parallel all-reduce at"
                " its default settings; NCCL settings that may change it are not modelled)",
            )
        )
    return warnings


def _serving_flag_warnings(
    spec: Any, plan: InferenceReport | LlmInferenceReport
) -> list[Implausible]:
    """The server's command-line flags that contradict the plan or that it does not model
    (planning.serving_flags), for an LLM endpoint whose server the command line names."""
    if not isinstance(plan, LlmInferenceReport):
        return []
    planned = plan.to_json()
    engine = planned.get("engine")
    template = getattr(spec, "template", None)
    if not engine or template is None:
        return []
    started = serving_flags.started_engine(template.command, template.args)
    if started is not None and started != engine:
        return [
            Implausible(
                "spec.template.args",
                "ServingEngineMismatch",
                f"the command line starts {started}'s server where the plan is {engine}'s"
                f" ({serving_engine_choice(spec)[1]}): the memory split, scheduler and kernels"
                f" planned are {engine}'s; name the engine that runs in spec.engine",
            )
        ]
    out = []
    engine_env = serving_flags.engine_env_not_modelled(
        str(engine), [str(e.name) for e in template.env or []]
    )
    if engine_env:
        out.append(
            Implausible(
                "spec.template.env",
                "ServingEnvIgnored",
                f"{engine} variables the plan does not model, planned on the engine's defaults: "
                + ", ".join(engine_env),
            )
        )
    # a disaggregated endpoint's sides get settings of their own: no one value to hold to
    settings = {} if runs_disaggregated(planned) else serving_env(planned)
    flags = serving_flags.classify(str(engine), template.command, template.args, settings)
    if flags is None:
        return out
    if flags.conflicts:
        out.append(
            Implausible("spec.template.args", "ServingFlagConflicts", flags.conflict_message())
        )
    if flags.not_modelled or flags.memory is not None:
        out.append(Implausible("spec.template.args", "ServingFlagIgnored", flags.ignored_message()))
    return out


def _serving_nccl_settings(spec: Any) -> tuple[str, ...]:
    """The serving pods' NCCL_* variables that may change performance: every one but those
    that cannot (engine.nccl_settings.is_no_effect). The serving step times each engine's own
    all-reduce kernel, so even the variables training models are not modelled here."""
    env = getattr(getattr(spec, "template", None), "env", None) or []
    names = sorted({str(e.name) for e in env if str(e.name).startswith("NCCL_")})
    return tuple(n for n in names if not nccl_settings.is_no_effect(n))


# A cap that holds an LLM replica to under half the sequences its KV cache holds is named: the
# CRD defaulted maxBatchSize to 32 before it capped LLM replicas, so an endpoint created then
# carries 32 without anyone having chosen it.
BATCH_CAP_SLACK = 2.0


def _binding_batch_cap(
    spec: Any, plan: InferenceReport | LlmInferenceReport, catalog: Catalog | None
) -> Implausible | None:
    """spec.maxBatchSize capping an LLM replica far below its KV cache, and what it costs."""
    cap = getattr(spec, "max_batch_size", None)
    if not isinstance(plan, LlmInferenceReport) or cap is None:
        return None
    p = plan.prediction
    if p.max_num_seqs < cap or p.max_concurrent_sequences < BATCH_CAP_SLACK * cap:
        return None
    free = plan_inference(spec.model_copy(update={"max_batch_size": None}), catalog=catalog)
    if not isinstance(free, LlmInferenceReport):
        return None

    def needed(report: LlmInferenceReport) -> float:
        n = report.prediction.replicas_needed
        return float("inf") if n is None else float(n)

    if needed(free) >= needed(plan):
        return None
    capped = (
        "no replica count meets the target"
        if p.replicas_needed is None
        else (f"{p.replicas_needed} replicas meet the target")
    )
    return Implausible(
        "spec.maxBatchSize",
        "BatchCapBinds",
        f"maxBatchSize {cap} holds each replica to {cap} running sequences where its KV cache "
        f"holds {p.max_concurrent_sequences:,}: {capped}, {free.prediction.replicas_needed} "
        "without the cap (before maxBatchSize capped LLM replicas the CRD defaulted it to 32; "
        "remove it to let the engine choose)",
    )
