"""`ringmaster plan --sweep FIELD=RANGE`: one plan per value of a spec field.

For a TrainingJob with a model architecture (an LLM) the sweep re-plans the layout at every point
(:func:`sweep_layouts`): the question "how many accelerators should this job get?" is answered
with the layout the operator would choose at each size, not one layout stretched over all. An LLM
InferenceEndpoint is planned again whole at every point (:func:`sweep_llm_endpoint`): the spec
with the field changed is validated as ``kubectl apply`` would, then sized as the operator sizes
it (layout, batch, replicas, p99s), so a point the API or the engine refuses says why.

RANGE is ``A..B`` (every integer from A to B), ``A..B/S`` (step S), ``A..B*F`` (geometric: A,
A*F, ... up to B) or a comma list ``1,2,4.5``. FIELD is the manifest's camelCase name.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from typing import Any

from ringmaster.engine.hardware import Catalog
from ringmaster.engine.inference import InferenceInputs, InferencePrediction
from ringmaster.engine.training import TrainingInputs, TrainingPrediction
from ringmaster.planning.plans import (
    LlmInferenceReport,
    PlanError,
    TrainingReport,
    plan_inference,
    plan_training,
    predict_inference_inputs,
    predict_training_inputs,
)
from ringmaster.planning.plausibility import Implausible, inference_warnings

MAX_POINTS = 10_000

# camelCase field -> (engine attribute, scale, integer?)
TRAINING_FIELDS: dict[str, tuple[str, float, bool]] = {
    "workers": ("workers", 1.0, True),
    "perWorker": ("per_worker", 1.0, True),
    "reducers": ("reducers", 1.0, True),
    "batchSizePerAccelerator": ("batch_per_accelerator", 1.0, True),
    "parameters": ("parameters", 1.0, False),
    "computeSecondsPerStep": ("compute_seconds_per_step", 1.0, False),
    "flopsPerSample": ("flops_per_sample", 1.0, False),
}
INFERENCE_FIELDS: dict[str, tuple[str, float, bool]] = {
    "targetRequestsPerSecond": ("target_requests_per_second", 1.0, False),
    "latencyP99Milliseconds": ("latency_p99_seconds", 1e-3, False),
    "maxBatchSize": ("max_batch_size", 1.0, True),
    "perReplica": ("per_replica", 1.0, True),
    "parameters": ("parameters", 1.0, False),
    "flopsPerRequest": ("flops_per_request", 1.0, False),
    "maxReplicas": ("max_replicas", 1.0, True),
}

_RANGE = re.compile(r"^\s*([0-9.eE+-]+)\s*\.\.\s*([0-9.eE+-]+)\s*(?:([/*])\s*([0-9.eE+-]+))?\s*$")


@dataclass(frozen=True)
class Sweep:
    field: str
    values: tuple[float, ...]


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise PlanError(f"--sweep: {where}: {text!r} is not a number") from None


def parse_sweep(text: str) -> Sweep:
    """``workers=1..64`` -> Sweep("workers", (1, 2, ..., 64))."""
    if "=" not in text:
        raise PlanError(f"--sweep: expected FIELD=RANGE (e.g. workers=1..64), got {text!r}")
    name, _, spec = text.partition("=")
    name = name.strip()
    m = _RANGE.match(spec)
    values: list[float] = []
    if m:
        lo, hi = _number(m.group(1), name), _number(m.group(2), name)
        op, arg = m.group(3), m.group(4)
        if hi < lo:
            raise PlanError(f"--sweep: {name}: the range {spec} is empty")
        if op == "*":
            factor = _number(arg, name)
            if factor <= 1 or lo <= 0:
                raise PlanError(f"--sweep: {name}: a geometric range needs A > 0 and factor > 1")
            v = lo
            while v <= hi * (1 + 1e-12) and len(values) <= MAX_POINTS:
                values.append(v)
                v *= factor
        else:
            step = _number(arg, name) if op == "/" else 1.0
            if step <= 0:
                raise PlanError(f"--sweep: {name}: the step must be positive")
            count = int((hi - lo) / step + 1e-9) + 1
            if count > MAX_POINTS:
                raise PlanError(f"--sweep: {name}: {count} points; at most {MAX_POINTS}")
            values = [lo + i * step for i in range(count)]
    else:
        values = [_number(v.strip(), name) for v in spec.split(",") if v.strip()]
    if not values:
        raise PlanError(f"--sweep: {name}: no values in {spec!r}")
    if len(values) > MAX_POINTS:
        raise PlanError(f"--sweep: {name}: more than {MAX_POINTS} points")
    return Sweep(name, tuple(values))


def _positive_integer(field: str, value: float) -> int:
    """A swept value of an integer field, or the sweep's refusal."""
    if value != int(value) or value < 1:
        raise PlanError(f"--sweep: {field}: {value:g} is not a positive integer")
    return int(value)


def _apply(inputs: Any, fields: dict[str, tuple[str, float, bool]], sweep: Sweep) -> list[Any]:
    if sweep.field not in fields:
        raise PlanError(
            f"--sweep: {sweep.field}: not a field this kind can sweep; known: "
            f"{', '.join(sorted(fields))}"
        )
    attr, scale, integer = fields[sweep.field]
    out = []
    for v in sweep.values:
        value: float | int = _positive_integer(sweep.field, v) if integer else v * scale
        changes: dict[str, Any] = {attr: value}
        # A TPU topology fixes the chip count; a sweep of the size drops it (a line of chips).
        if isinstance(inputs, TrainingInputs) and attr in ("workers", "per_worker"):
            changes["topology"] = None
        out.append(replace(inputs, **changes))
    return out


def sweep_training(
    inputs: TrainingInputs, sweep: Sweep, catalog: Catalog
) -> list[tuple[float, TrainingPrediction]]:
    variants = _apply(inputs, TRAINING_FIELDS, sweep)
    return [
        (v, predict_training_inputs(x, catalog))
        for v, x in zip(sweep.values, variants, strict=True)
    ]


def sweep_inference(
    inputs: InferenceInputs, sweep: Sweep, catalog: Catalog
) -> list[tuple[float, InferencePrediction]]:
    variants = _apply(inputs, INFERENCE_FIELDS, sweep)
    return [
        (v, predict_inference_inputs(x, catalog))
        for v, x in zip(sweep.values, variants, strict=True)
    ]


# The fields an LLM training sweep varies: the accelerator count, through hosts or per host.
LAYOUT_FIELDS = ("workers", "perWorker")


@dataclass(frozen=True)
class LayoutPoint:
    """One size of an LLM training job: the plan the operator would make (its layout searched
    again), or why there is none at this size."""

    value: float
    accelerators: int
    report: TrainingReport | None
    error: str | None = None


def _resized(spec: Any, field: str, value: int) -> Any:
    """The spec with ``field`` set to ``value``; a TPU topology fixes the chip count, so a sweep
    of the size drops it (a line of chips), as the data-parallel sweep does."""
    acc = spec.accelerator
    if field == "workers":
        acc = acc.model_copy(update={"topology": None}) if acc.topology else acc
        return spec.model_copy(update={"workers": value, "accelerator": acc})
    return spec.model_copy(
        update={"accelerator": acc.model_copy(update={"per_worker": value, "topology": None})}
    )


def sweep_layouts(spec: Any, sweep: Sweep, catalog: Catalog) -> list[LayoutPoint]:
    """Plan an LLM TrainingJob at every value of ``workers`` or ``perWorker``, the layout searched
    at each; a size no layout divides (or no machine type holds) is a point with its reason."""
    if sweep.field not in LAYOUT_FIELDS:
        raise PlanError(
            f"--sweep: {sweep.field}: for a model with an architecture the sweep varies the "
            f"accelerator count; known: {', '.join(LAYOUT_FIELDS)}"
        )
    points = []
    for v in sweep.values:
        resized = _resized(spec, sweep.field, _positive_integer(sweep.field, v))
        count = resized.workers * resized.accelerator.per_worker
        try:
            report = plan_training(resized, catalog=catalog)
        except PlanError as exc:
            # One line per point: the reason without the field path and the hint after it.
            reason = str(exc).removeprefix("spec.parallelism: ").split(" (")[0]
            points.append(LayoutPoint(v, count, None, reason))
            continue
        points.append(LayoutPoint(v, count, report))
    return points


# An LLM endpoint's sweepable fields: camelCase name -> (its path in the spec, integer?, the
# field it replaces: the SLO names exactly one target, so sweeping one drops the other).
LLM_ENDPOINT_FIELDS: dict[str, tuple[tuple[str, ...], bool, tuple[str, ...] | None]] = {
    "targetRequestsPerSecond": (
        ("slo", "targetRequestsPerSecond"),
        False,
        ("slo", "targetOutputTokensPerSecond"),
    ),
    "targetOutputTokensPerSecond": (
        ("slo", "targetOutputTokensPerSecond"),
        False,
        ("slo", "targetRequestsPerSecond"),
    ),
    "timeToFirstTokenP99Milliseconds": (("slo", "timeToFirstTokenP99Milliseconds"), False, None),
    "timePerOutputTokenP99Milliseconds": (
        ("slo", "timePerOutputTokenP99Milliseconds"),
        False,
        None,
    ),
    "maxBatchSize": (("maxBatchSize",), True, None),
    "maxReplicas": (("maxReplicas",), True, None),
    "perReplica": (("accelerator", "perReplica"), True, None),
    "inputMean": (("tokens", "inputMean"), True, None),
    "outputMean": (("tokens", "outputMean"), True, None),
}


@dataclass(frozen=True)
class LlmEndpointPoint:
    """One value of an LLM endpoint's sweep: the plan the operator would make, or why the API or
    the engine refuses the spec at that value."""

    value: float
    report: LlmInferenceReport | None
    error: str | None = None
    # The output tokens/s the spec asks of the endpoint at this point (its target): what the
    # point's cost per token is over.
    target_output_tokens_per_second: float | None = None
    # What is implausible about the spec at this value, as a plan of it would warn.
    warnings: tuple[Implausible, ...] = ()


def _with_value(data: dict[str, Any], path: tuple[str, ...], value: float | int) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def _without(data: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        data = data.get(key, {})
    data.pop(path[-1], None)


def sweep_llm_endpoint(
    spec: Any, name: str, sweep: Sweep, catalog: Catalog
) -> list[LlmEndpointPoint]:
    """Plan an LLM InferenceEndpoint at every value of ``sweep.field``: the spec with it changed,
    validated as the API validates it, then planned as the operator plans it."""
    from ringmaster.api.inferenceendpoint import InferenceEndpointSpec
    from ringmaster.api.manifest import ManifestError, validate_spec

    if sweep.field not in LLM_ENDPOINT_FIELDS:
        raise PlanError(
            f"--sweep: {sweep.field}: not a field an LLM endpoint can sweep; known: "
            f"{', '.join(sorted(LLM_ENDPOINT_FIELDS))}"
        )
    path, integer, replaced = LLM_ENDPOINT_FIELDS[sweep.field]
    given = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    points = []
    for v in sweep.values:
        data = copy.deepcopy(given)
        _with_value(data, path, _positive_integer(sweep.field, v) if integer else float(v))
        if replaced is not None:
            _without(data, replaced)
        try:
            variant = validate_spec("InferenceEndpoint", data)
            assert isinstance(variant, InferenceEndpointSpec)
        except ManifestError as exc:
            points.append(LlmEndpointPoint(v, None, str(exc.errors[0])))
            continue
        try:
            report = plan_inference(variant, name=name, catalog=catalog)
        except PlanError as exc:
            points.append(LlmEndpointPoint(v, None, str(exc).split(" (")[0]))
            continue
        assert isinstance(report, LlmInferenceReport)
        slo = variant.slo
        target = slo.target_output_tokens_per_second
        if target is None and slo.target_requests_per_second and variant.tokens is not None:
            target = slo.target_requests_per_second * variant.tokens.output_mean
        warned = tuple(inference_warnings(variant, report, catalog))
        points.append(LlmEndpointPoint(v, report, None, target, warned))
    return points
