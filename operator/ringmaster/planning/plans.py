"""From API specs to the engine and back: the plans the controllers and `ringmaster plan` use.

:func:`plan_training` and :func:`plan_inference` are pure (no I/O, no cluster): they translate a
validated spec into engine inputs, run the engine, and return a plan whose :meth:`to_json` is the
stable JSON contract of issue 4 (camelCase keys). Engine errors come back as :class:`PlanError`
whose message starts with the offending field's path, like the API's own errors.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ringmaster.api import TrainingPlan
from ringmaster.api.inferenceendpoint import DEFAULT_MAX_BATCH_SIZE
from ringmaster.engine.hardware import (
    DEFAULT_CATALOG,
    Catalog,
    CatalogOverrideError,
    UnknownHardwareError,
)
from ringmaster.engine.inference import InferenceInputs, InferencePrediction, predict_inference
from ringmaster.engine.llm_alternatives import Alternative, pareto_alternatives
from ringmaster.engine.llm_disaggregation import DisaggregationChoice
from ringmaster.engine.llm_layout_names import SHARD_FULL, SHARDINGS
from ringmaster.engine.llm_layout_search import Layout
from ringmaster.engine.llm_serving import (
    LlmServingInputs,
    LlmServingPrediction,
    predict_llm_serving,
)
from ringmaster.engine.serving_engines import infer_serving_engine
from ringmaster.engine.serving_hosts import replica_hosts
from ringmaster.engine.training import (
    DEFAULT_REDUCER_MACHINE,
    REDUCTION_SERVER,
    RING,
    StrategyPrediction,
    TrainingInputs,
    TrainingPrediction,
    predict_training,
)
from ringmaster.planning.alternatives import Ranking, ranked_choices
from ringmaster.planning.catalog import (
    CatalogError,
    installed_catalog,
    load_catalog,
    with_pool_profiles,
)
from ringmaster.planning.disaggregation import apply_choice, plan_disaggregation
from ringmaster.planning.layouts import (
    LayoutPlan,
    layout_json,
    layout_status,
    plan_layout,
    transformer_of,
)
from ringmaster.planning.placement import PlacementTable, placement_table

# A catalog file (YAML or JSON, planning/catalog.py) applied over the built-in catalog.
CATALOG_ENV = "RINGMASTER_CATALOG"


class PlanError(ValueError):
    """Input the engine cannot plan; the message names the field (``spec.machineType: ...``)."""


_catalog_cache: dict[str | None, Catalog] = {}


def active_catalog(path: str | None = None) -> Catalog:
    """The catalog plans use: the built-in one with the file ``path`` applied; without a path,
    the one the operator installed from its ConfigMap, else the file $RINGMASTER_CATALOG; with
    the pools' profiles the operator installed over it (planning.catalog.install_pool_profiles).
    """
    installed = installed_catalog()
    if path is None and installed is not None:
        return with_pool_profiles(installed)
    chosen = path or os.environ.get(CATALOG_ENV) or None
    if chosen not in _catalog_cache:
        try:
            _catalog_cache[chosen] = load_catalog(chosen) if chosen else DEFAULT_CATALOG
        except CatalogError as exc:
            raise PlanError(f"catalog: {exc}") from None
    return with_pool_profiles(_catalog_cache[chosen])


def _sig(x: float | None, digits: int = 6) -> float | None:
    """Round to ``digits`` significant figures: stable JSON without float noise."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return float(f"{x:.{digits}g}")


# --- the specs' shape (structural, so tests and controllers can pass any object with it) ---------


class _TrainingSpec(Protocol):
    workers: int
    accelerator: Any
    machine_type: str | None
    model: Any
    communication: Any


class _InferenceSpec(Protocol):
    accelerator: Any
    model: Any
    precision: Any
    kv_cache_precision: Any
    tokens: Any
    slo: Any
    max_batch_size: int | None
    replicas: int | None
    min_replicas: int
    max_replicas: int


# --- training ------------------------------------------------------------------------------------


def _strategy_json(p: StrategyPrediction) -> dict[str, Any]:
    out: dict[str, Any] = {
        "stepSeconds": _sig(p.step_seconds),
        "communicationSeconds": _sig(p.communication_seconds),
        "samplesPerSecond": _sig(p.samples_per_second),
        "busBandwidthGBps": _sig(p.bus_bandwidth_gbps),
        "bottleneck": p.bottleneck,
        "costPerHourUSD": _sig(p.cost_per_hour_usd),
        # Beyond the contract's required keys: what a reader needs to trust the figures.
        "algorithm": p.algorithm,
        "protocol": p.protocol,
        "computeSeconds": _sig(p.compute_seconds),
        "exposedCommunicationSeconds": _sig(p.exposed_communication_seconds),
        "scalingEfficiency": _sig(p.scaling_efficiency),
        "costPer1000SamplesUSD": _sig(p.cost_per_1000_samples_usd),
    }
    if p.name == REDUCTION_SERVER:
        out["reducerShare"] = _sig(p.reducer_share)
        out["reducers"] = p.reducers
        out["reducerMachineType"] = p.reducer_machine_type
        out["costOptimalReducers"] = p.cost_optimal_reducers
        out["vertexRuleReducers"] = p.vertex_reducers
    return out


@dataclass(frozen=True)
class TrainingReport:
    name: str
    namespace: str | None
    prediction: TrainingPrediction
    kind: str = "TrainingJob"
    layout: LayoutPlan | None = None  # a model with an architecture: the layout and its fit
    # TPU multislice: the step of one slice doing one slice's share of the work (weak scaling,
    # :func:`weak_scaled`), against which the DCN's part of the step is told.
    one_slice_step_seconds: float | None = None
    slices: int = 1
    # A gang of several GPU hosts: its step under each placement in a pool with topology, and
    # what spec.placement.topology: Auto decides from it (planning.placement).
    placement: PlacementTable | None = None
    # A job with spec.accelerator.alternatives: every accelerator planned and ranked by its
    # objective (planning.alternatives); `ringmaster plan` sets it.
    accelerators: Ranking | None = None

    @property
    def dcn_share(self) -> float | None:
        """The part of the step the cross-slice traffic adds: (step of N slices - step of one
        slice doing its share) / step of N slices; None for one slice."""
        if self.slices <= 1 or self.one_slice_step_seconds is None:
            return None
        step = self.chosen.step_seconds
        return max(0.0, (step - self.one_slice_step_seconds) / step) if step > 0 else None

    @property
    def chosen_strategy(self) -> str:
        return self.prediction.chosen_strategy

    @property
    def chosen(self) -> StrategyPrediction:
        return self.prediction.strategies[self.prediction.chosen_strategy]

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        return {
            "kind": self.kind,
            "name": self.name,
            "chosenStrategy": p.chosen_strategy,
            "strategies": {k: _strategy_json(v) for k, v in p.strategies.items()},
            "machineType": p.machine_type,
            "workers": p.workers,
            "acceleratorsPerWorker": p.per_worker,
            "gradientBytes": _sig(p.gradient_bytes),
            "computePrecision": p.compute_precision,
            "notes": list(p.notes),
            **(layout_json(self.layout) if self.layout is not None else {}),
            **(
                {"slices": self.slices, "dcnShare": _sig(self.dcn_share)} if self.slices > 1 else {}
            ),
            **({"placement": self.placement.to_json()} if self.placement is not None else {}),
            **(
                {"accelerators": [c.to_k8s() for c in ranked_choices(self.accelerators)]}
                if self.accelerators is not None
                else {}
            ),
        }

    def to_status(self) -> TrainingPlan:
        """The chosen strategy's figures in the shape of a TrainingJob's ``status.plan``."""
        p = self.prediction
        chosen = self.chosen
        rule = p.strategies.get(REDUCTION_SERVER)
        uses_reducers = chosen.name == REDUCTION_SERVER
        plan = TrainingPlan(
            strategy=p.chosen_strategy,
            algorithm=chosen.algorithm,
            protocol=chosen.protocol,
            compute_precision=p.compute_precision,
            step_seconds=_sig(chosen.step_seconds),
            compute_seconds=_sig(chosen.compute_seconds),
            communication_seconds=_sig(chosen.communication_seconds),
            samples_per_second=_sig(chosen.samples_per_second),
            bus_bandwidth_gbps=_sig(chosen.bus_bandwidth_gbps),
            bottleneck=chosen.bottleneck,
            machine_type=p.machine_type,
            reducers=chosen.reducers if uses_reducers else None,
            reducer_machine_type=chosen.reducer_machine_type if uses_reducers else None,
            reducer_share=(
                _sig(chosen.reducer_share)
                if uses_reducers and chosen.reducer_share is not None and chosen.reducer_share < 1
                else None
            ),
            # The bandwidth rule's count: what a pool sized by its jobs gives this one.
            reducers_wanted=rule.vertex_reducers if rule else None,
            cost_optimal_reducers=rule.cost_optimal_reducers if rule else None,
            cost_per_hour_usd=_sig(chosen.cost_per_hour_usd),
            alternatives={
                name: step
                for name, strategy in p.strategies.items()
                if (step := _sig(strategy.step_seconds)) is not None
            },
        )
        if self.slices > 1:
            plan.slices = self.slices
            plan.dcn_share = _sig(self.dcn_share)
        if self.placement is not None:
            plan.placement = self.placement.to_status()
        # A layout (a model with an architecture) adds its own fields.
        return TrainingPlan.model_validate({**plan.model_dump(), **self.status_fields()})

    def status_fields(self) -> dict[str, Any]:
        """What status.plan adds for a layout (empty without an architecture)."""
        return layout_status(self.layout) if self.layout is not None else {}


def _env_with_prefix(spec: _TrainingSpec, prefix: str) -> tuple[tuple[str, str], ...]:
    template = getattr(spec, "template", None)
    env = getattr(template, "env", None) or []
    return tuple(
        (str(e.name), str(e.value))
        for e in env
        if str(getattr(e, "name", "")).startswith(prefix) and getattr(e, "value", None)
    )


def _nccl_env(spec: _TrainingSpec) -> tuple[tuple[str, str], ...]:
    return _env_with_prefix(spec, "NCCL_")


def training_inputs(
    spec: _TrainingSpec,
    machine_type: str | None = None,
    reducers: int | None = None,
    reducer_share: float = 1.0,
) -> TrainingInputs:
    """The engine's inputs for a TrainingJob spec; ``machine_type`` (from the chosen node pool's
    labels) and ``reducers`` (the pool's actual size) override what the spec implies;
    ``reducer_share`` is the part of a shared pool's bandwidth the job gets (1 / the jobs bound to
    the pool that run at once; 1 for dedicated reducers). With an architecture the parameters may
    be left out (0 here: the layout planner derives them)."""
    model = spec.model
    comm = spec.communication
    rs = getattr(comm, "reduction_server", None)
    precision = getattr(model, "compute_precision", None)
    return TrainingInputs(
        accelerator=spec.accelerator.type,
        per_worker=spec.accelerator.per_worker,
        workers=spec.workers,
        parameters=float(model.parameters) if model.parameters is not None else 0.0,
        gradient_dtype=model.gradient_element_type,
        compute_seconds_per_step=model.compute_seconds_per_step,
        flops_per_sample=None if model.flops_per_sample is None else float(model.flops_per_sample),
        batch_per_accelerator=model.batch_size_per_accelerator,
        machine_type=machine_type or spec.machine_type,
        strategy=str(comm.strategy),
        reducers=reducers if reducers is not None else (rs.replicas if rs else None),
        reducer_machine_type=(rs.machine_type if rs else None) or DEFAULT_REDUCER_MACHINE,
        topology=spec.accelerator.topology,
        compute_precision=None if precision is None else str(precision),
        reducer_share=reducer_share,
        nccl_env=_nccl_env(spec),
        xla_env=_env_with_prefix(spec, "XLA_"),
        slices=spec.accelerator.slices,
    )


def _check_hardware(
    inputs: TrainingInputs | InferenceInputs | LlmServingInputs, catalog: Catalog, count: int
) -> None:
    """Name the field behind each unknown catalog name before the engine sees it."""
    role = "perWorker" if isinstance(inputs, TrainingInputs) else "perReplica"
    try:
        catalog.accelerator(inputs.accelerator)
    except UnknownHardwareError as exc:
        raise PlanError(
            f"spec.accelerator.type: {exc}; a catalog file adds one (--catalog, docs/catalog.md)"
        ) from None
    if inputs.machine_type is not None:
        try:
            catalog.host(inputs.accelerator, count, inputs.machine_type)
        except (UnknownHardwareError, CatalogOverrideError) as exc:
            raise PlanError(f"spec.machineType: {exc}") from None
    else:
        try:
            catalog.default_machine(inputs.accelerator, count)
        except UnknownHardwareError as exc:
            raise PlanError(f"spec.accelerator.{role}: {exc}") from None
    if isinstance(inputs, TrainingInputs):
        try:
            catalog.machine(inputs.reducer_machine_type)
        except UnknownHardwareError as exc:
            raise PlanError(f"spec.communication.reductionServer.machineType: {exc}") from None


def _engine_error(exc: Exception) -> PlanError:
    text = str(exc)
    if text.startswith(("spec.", "communication.", "model.")):
        return PlanError(text if text.startswith("spec.") else f"spec.{text}")
    if text.startswith(("NCCL_ALGO", "NCCL_PROTO", "XLA_")):
        return PlanError(f"spec.template.env: {text}")
    if text.startswith("reducer share"):
        return PlanError(f"reducerShare: {text}")
    if text.startswith("topology"):
        return PlanError(f"spec.accelerator.topology: {text}")
    return PlanError(f"spec: {text}")


def predict_training_inputs(inputs: TrainingInputs, catalog: Catalog) -> TrainingPrediction:
    _check_hardware(inputs, catalog, inputs.per_worker)
    try:
        return predict_training(inputs, catalog)
    except (ValueError, LookupError) as exc:
        raise _engine_error(exc) from None


def gradient_all_reduce(layout: Layout) -> bool:
    """Whether the layout all-reduces gradients across data-parallel replicas: the collective a
    reduction server replaces. Not with one replica (DP 1), nor fully sharded (FSDP / ZeRO-3
    reduce-scatters gradients and all-gathers weights instead), so such a job gets no reducers
    and no Ring / ReductionServer comparison."""
    return layout.data > 1 and layout.sharding != SHARDINGS[SHARD_FULL]


def plan_training(
    spec: _TrainingSpec,
    machine_type: str | None = None,
    reducers: int | None = None,
    *,
    name: str = "",
    namespace: str | None = None,
    catalog: Catalog | None = None,
    reducer_share: float = 1.0,
) -> TrainingReport:
    """What the operator decides for a TrainingJob: both strategies, the choice, the reducers;
    for a model with an architecture, the layout (searched where the spec says Auto) first.
    ``reducer_share``: for a job on a shared ReductionServerPool, 1 / the number of bound jobs
    running at once (the controller knows them); plans and sizing then use that share."""
    cat = catalog or active_catalog()
    report = _plan_training(spec, machine_type, reducers, name, namespace, cat, reducer_share)
    slices = getattr(spec.accelerator, "slices", 1)
    if slices <= 1:
        return report
    try:
        one = _plan_training(weak_scaled(spec, 1), machine_type, reducers, "", None, cat, 1.0)
        alone: float | None = one.chosen.step_seconds
    except PlanError:
        alone = None  # (one slice's share fits no layout: no DCN share to tell)
    return replace(report, slices=slices, one_slice_step_seconds=alone)


def _plan_training(
    spec: _TrainingSpec,
    machine_type: str | None,
    reducers: int | None,
    name: str,
    namespace: str | None,
    cat: Catalog,
    reducer_share: float,
) -> TrainingReport:
    inputs = training_inputs(spec, machine_type, reducers, reducer_share)
    if getattr(spec.model, "architecture", None) is not None:
        _check_hardware(inputs, cat, inputs.per_worker)
        try:
            layout, prediction = plan_layout(spec, inputs, cat)
        except (ValueError, LookupError) as exc:
            raise _engine_error(exc) from None
        if not gradient_all_reduce(layout.chosen) and prediction.chosen_strategy == RING:
            prediction = replace(
                prediction,
                strategies={k: v for k, v in prediction.strategies.items() if k == RING},
            )
        return TrainingReport(
            name=name,
            namespace=namespace,
            prediction=prediction,
            layout=layout,
            placement=_placement(inputs, prediction, layout, cat),
        )
    prediction = predict_training_inputs(inputs, cat)
    return TrainingReport(
        name=name,
        namespace=namespace,
        prediction=prediction,
        placement=_placement(inputs, prediction, None, cat),
    )


def _placement(
    inputs: TrainingInputs,
    prediction: TrainingPrediction,
    layout: LayoutPlan | None,
    cat: Catalog,
) -> PlacementTable | None:
    """The step per placement (planning.placement), for a layout that fits."""
    if layout is not None and not layout.search.fits:
        return None
    try:
        return placement_table(inputs, prediction, layout, cat)
    except (ValueError, LookupError) as exc:
        raise _engine_error(exc) from None


def weak_scaled(spec: Any, slices: int) -> Any:
    """A multislice spec at ``slices`` slices, each doing the same work as in the spec (MaxText's
    multislice runs keep the per-device batch: the global batch grows with the slices): workers
    and parallelism.globalBatchSize scaled by slices / spec's slices."""
    acc = spec.accelerator
    per_slice = spec.workers // acc.slices
    update: dict[str, Any] = {
        "workers": per_slice * slices,
        "accelerator": acc.model_copy(update={"slices": slices}),
    }
    parallelism = getattr(spec, "parallelism", None)
    if parallelism is not None and parallelism.global_batch_size is not None:
        batch = parallelism.global_batch_size // acc.slices * slices
        update["parallelism"] = parallelism.model_copy(update={"global_batch_size": batch})
    return spec.model_copy(update=update)


# --- inference -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceReport:
    name: str
    namespace: str | None
    precision: Any
    prediction: InferencePrediction
    kind: str = "InferenceEndpoint"

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        return {
            "kind": self.kind,
            "name": self.name,
            "replicas": p.replicas,
            "batchSize": p.batch_size,
            "perReplicaRequestsPerSecond": _sig(p.per_replica_requests_per_second),
            "p99LatencyMilliseconds": _sig(
                None if p.p99_latency_seconds is None else p.p99_latency_seconds * 1e3
            ),
            "bottleneck": p.bottleneck,
            "costPerHourUSD": _sig(p.cost_per_hour_usd),
            # Beyond the contract's required keys: whether the target is met, and why not.
            "feasible": p.feasible,
            "reason": p.reason,
            "replicasNeeded": p.replicas_needed,
            "capacityRequestsPerSecond": _sig(p.per_replica_capacity),
            "batchLatencyMilliseconds": _sig(p.batch_seconds * 1e3),
            "precision": self.precision,
            "machineType": p.machine_type,
            "notes": list(p.notes),
        }


@dataclass(frozen=True)
class LlmInferenceReport:
    """An LLM endpoint's plan (spec.model.architecture set): the JSON adds the LLM figures to
    the keys every InferenceEndpoint plan has."""

    name: str
    namespace: str | None
    precision: Any
    prediction: LlmServingPrediction
    kind: str = "InferenceEndpoint"
    # The nearest feasible variants when the target is missed (engine.llm_alternatives).
    alternatives: tuple[Alternative, ...] = ()
    ttft_target_seconds: float | None = None
    tpot_target_seconds: float | None = None
    # spec.disaggregation Auto or On: (mode, transfer backend, the engine's choice)
    disaggregation: tuple[str, str, DisaggregationChoice] | None = None

    def to_json(self) -> dict[str, Any]:
        plan = self._aggregated_json()
        if self.disaggregation is not None:
            plan = apply_choice(plan, *self.disaggregation)
        return plan

    def _aggregated_json(self) -> dict[str, Any]:
        p = self.prediction
        ms = 1e3
        return {
            "kind": self.kind,
            "name": self.name,
            "replicas": p.replicas,
            "replicasNeeded": p.replicas_needed,
            "feasible": p.feasible,
            "reason": p.reason,
            "outputTokensPerSecondPerReplica": _sig(p.output_tokens_per_second_per_replica),
            "ttftP99Milliseconds": _sig(
                None if p.ttft_p99_seconds is None else p.ttft_p99_seconds * ms
            ),
            "tpotP99Milliseconds": _sig(
                None if p.tpot_p99_seconds is None else p.tpot_p99_seconds * ms
            ),
            "maxConcurrentSequences": p.max_concurrent_sequences,
            "kvCacheBytesPerToken": _sig(p.kv_cache_bytes_per_token),
            "weightsBytesPerAccelerator": _sig(p.weights_bytes_per_accelerator),
            # The keys every InferenceEndpoint plan has (status, HPA, events read them).
            "perReplicaRequestsPerSecond": _sig(p.requests_per_second_per_replica),
            "capacityRequestsPerSecond": _sig(p.saturation_requests_per_second),
            "p99LatencyMilliseconds": None,
            "batchSize": p.max_num_seqs,
            "bottleneck": p.bottleneck,
            "binding": p.binding or None,
            "costPerHourUSD": _sig(p.cost_per_hour_usd),
            "precision": p.precision,
            "kvCachePrecision": p.kv_cache_precision,
            "tensorParallel": p.tensor_parallel,
            "pipelineParallel": p.pipeline_parallel,
            "expertParallel": p.expert_parallel,
            "attentionDataParallel": p.attention_data_parallel,
            "redundantExperts": p.redundant_experts or None,
            "expertDispatch": p.expert_dispatch or None,
            "twoBatchOverlap": p.two_batch_overlap or None,
            "hostsPerReplica": p.hosts_per_replica,
            "layout": p.layout,
            "maxNumSeqs": p.max_num_seqs,
            "maxBatchSize": p.max_batch_size,
            "batching": p.batching,
            "maxNumBatchedTokens": p.max_num_batched_tokens,
            "maxModelLen": p.max_model_len,
            "engine": p.engine,
            "evidence": p.evidence[:1024],
            "machineType": p.machine_type,
            "notes": list(p.notes),
            # The offline maximum (no latency target), always; the rates at which each p99
            # target starts to fail (None: it holds up to the offline maximum); the load curve.
            "offlineOutputTokensPerSecondPerReplica": _sig(p.offline_output_tokens_per_second),
            "offlineRequestsPerSecondPerReplica": _sig(p.offline_requests_per_second),
            "offlineMaxNumSeqs": p.offline_max_num_seqs,
            "ttftSloRequestsPerSecondPerReplica": _sig(p.ttft_slo_rate),
            "tpotSloRequestsPerSecondPerReplica": _sig(p.tpot_slo_rate),
            "maxReplicasOutputTokensPerSecond": _sig(p.max_replicas_output_tokens_per_second),
            "loadCurve": [
                {
                    "load": c.load,
                    "requestsPerSecond": _sig(c.requests_per_second),
                    "outputTokensPerSecond": _sig(c.output_tokens_per_second),
                    "ttftP50Milliseconds": _sig(c.ttft_p50_seconds * ms),
                    "ttftP90Milliseconds": _sig(c.ttft_p90_seconds * ms),
                    "ttftP99Milliseconds": _sig(c.ttft_p99_seconds * ms),
                    "tpotP50Milliseconds": _sig(c.tpot_p50_seconds * ms),
                    "tpotP90Milliseconds": _sig(c.tpot_p90_seconds * ms),
                    "tpotP99Milliseconds": _sig(c.tpot_p99_seconds * ms),
                }
                for c in p.load_curve
            ],
            "alternatives": [
                {
                    "change": a.change,
                    "replicas": a.replicas,
                    "ttftP99Milliseconds": _sig(a.ttft_p99_seconds * ms),
                    "tpotP99Milliseconds": _sig(a.tpot_p99_seconds * ms),
                    "costPerHourUSD": _sig(a.cost_per_hour_usd),
                    "outputTokensPerSecondPerReplica": _sig(a.output_tokens_per_second_per_replica),
                    "fitsMaxReplicas": a.fits_max_replicas,
                }
                for a in self.alternatives
            ],
        }


def _max_utilisation(spec: _InferenceSpec) -> float:
    return float(getattr(spec.slo, "max_utilization_percent", 85)) / 100.0


def llm_serving_inputs(spec: _InferenceSpec) -> LlmServingInputs:
    slo = spec.slo
    tokens = spec.tokens
    ms = 1e-3
    parallelism = getattr(spec, "parallelism", None)
    engine, engine_source = serving_engine_choice(spec)
    return LlmServingInputs(
        model=transformer_of(spec.model.architecture),
        model_name=spec.model.name,
        accelerator=spec.accelerator.type,
        per_replica=spec.accelerator.per_replica,
        precision=str(spec.precision),
        kv_cache_precision=spec.kv_cache_precision,
        input_tokens_mean=float(tokens.input_mean),
        output_tokens_mean=float(tokens.output_mean),
        input_tokens_p99=None if tokens.input_p99 is None else float(tokens.input_p99),
        output_tokens_p99=None if tokens.output_p99 is None else float(tokens.output_p99),
        ttft_p99_seconds=float(slo.time_to_first_token_p99_milliseconds) * ms,
        tpot_p99_seconds=float(slo.time_per_output_token_p99_milliseconds) * ms,
        target_requests_per_second=slo.target_requests_per_second,
        target_output_tokens_per_second=slo.target_output_tokens_per_second,
        max_utilization=_max_utilisation(spec),
        replicas=spec.replicas,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        machine_type=getattr(spec, "machine_type", None),
        hosts_per_replica=getattr(spec.accelerator, "hosts_per_replica", None),
        tensor_parallel=parallelism.tensor if parallelism else None,
        pipeline_parallel=parallelism.pipeline if parallelism else None,
        expert_parallel=parallelism.expert if parallelism else None,
        attention_data=parallelism.attention_data if parallelism else None,
        redundant_experts=(parallelism.redundant_experts or 0) if parallelism else 0,
        expert_dispatch=parallelism.expert_dispatch if parallelism else None,
        two_batch_overlap=bool(parallelism.two_batch_overlap) if parallelism else False,
        max_batch_size=spec.max_batch_size,
        static_batching=getattr(spec, "batching", None) == "Static",
        engine=engine,
        engine_source=engine_source,
    )


def serving_engine_choice(spec: _InferenceSpec) -> tuple[str, str]:
    """The engine an LLM endpoint runs (spec.engine, else the image's hint, else the default)."""
    given = getattr(spec, "engine", None)
    if given is not None:
        return str(given), "spec.engine"
    template = getattr(spec, "template", None)
    return infer_serving_engine(getattr(template, "image", None))


def inference_inputs(spec: _InferenceSpec) -> InferenceInputs:
    return InferenceInputs(
        accelerator=spec.accelerator.type,
        per_replica=spec.accelerator.per_replica,
        parameters=float(spec.model.parameters),
        flops_per_request=float(spec.model.flops_per_request),
        precision=str(spec.precision),
        target_requests_per_second=float(spec.slo.target_requests_per_second),
        latency_p99_seconds=float(spec.slo.latency_p99_milliseconds) / 1e3,
        max_batch_size=spec.max_batch_size or DEFAULT_MAX_BATCH_SIZE,
        replicas=spec.replicas,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        machine_type=getattr(spec, "machine_type", None),
        max_utilisation=_max_utilisation(spec),
    )


def predict_inference_inputs(inputs: InferenceInputs, catalog: Catalog) -> InferencePrediction:
    _check_hardware(inputs, catalog, inputs.per_replica)
    try:
        return predict_inference(inputs, catalog)
    except (ValueError, LookupError) as exc:
        raise _engine_error(exc) from None


def predict_llm_serving_inputs(inputs: LlmServingInputs, catalog: Catalog) -> LlmServingPrediction:
    try:
        catalog.accelerator(inputs.accelerator)
        per_host, _ = replica_hosts(
            catalog,
            inputs.accelerator,
            inputs.per_replica,
            inputs.hosts_per_replica,
            inputs.machine_type,
        )
    except UnknownHardwareError as exc:
        field = "accelerator.perReplica"
        if inputs.accelerator not in catalog.accelerators:
            field = "accelerator.type"
        elif inputs.machine_type is not None:
            field = "machineType"
        raise PlanError(f"spec.{field}: {exc}") from None
    _check_hardware(inputs, catalog, per_host)
    try:
        found = predict_llm_serving(inputs, catalog)
    except (ValueError, LookupError) as exc:
        raise _engine_error(exc) from None
    return replace(found, evidence=with_serving_cell(inputs, found))


def with_serving_cell(inputs: LlmServingInputs, found: LlmServingPrediction) -> str:
    """The plan's evidence with the serving evidence matrix's cell the prediction rests on
    (calibration.serving_evidence; a mixture of experts' own cell) after the engine's name,
    near the front of a text status truncates, as a training plan names its framework and then
    its cell."""
    from ringmaster.calibration.serving_evidence import serving_cell_evidence

    cell = serving_cell_evidence(
        inputs.accelerator, found.engine, found.precision, moe=inputs.model.is_moe
    )
    engine, _, rest = found.evidence.partition("; ")
    if not engine.startswith("engine ") or not rest:
        return f"{cell}; {found.evidence}" if found.evidence else cell
    return f"{engine}; {cell}; {rest}"


def plan_inference(
    spec: _InferenceSpec,
    *,
    name: str = "",
    namespace: str | None = None,
    catalog: Catalog | None = None,
) -> InferenceReport | LlmInferenceReport:
    """Batch size, replicas, p99 and cost for an InferenceEndpoint; for an LLM endpoint
    (spec.model.architecture) throughput in tokens, TTFT / TPOT p99 and the KV cache."""
    if getattr(spec.model, "architecture", None) is not None:
        llm = llm_serving_inputs(spec)
        active = catalog or active_catalog()
        found = predict_llm_serving_inputs(llm, active)
        # A missed target is explained with the nearest variants that meet it (only then: the
        # search plans a dozen variants).
        options = () if found.feasible else tuple(pareto_alternatives(llm, found, active))
        disaggregation = None
        config = getattr(spec, "disaggregation", None)
        if config is not None and config.mode != "Aggregated":
            try:
                choice = plan_disaggregation(spec, llm, found, active)
            except (ValueError, LookupError) as exc:
                raise PlanError(f"spec.disaggregation: {exc}") from None
            disaggregation = (str(config.mode), str(config.transfer_backend), choice)
        return LlmInferenceReport(
            name=name,
            namespace=namespace,
            precision=llm.precision,
            prediction=found,
            alternatives=options,
            ttft_target_seconds=llm.ttft_p99_seconds,
            tpot_target_seconds=llm.tpot_p99_seconds,
            disaggregation=disaggregation,
        )
    inputs = inference_inputs(spec)
    prediction = predict_inference_inputs(inputs, catalog or active_catalog())
    return InferenceReport(
        name=name, namespace=namespace, precision=inputs.precision, prediction=prediction
    )


__all__ = [
    "CATALOG_ENV",
    "REDUCTION_SERVER",
    "RING",
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
