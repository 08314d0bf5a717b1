"""The InferenceEndpoint decision: pool, replica count, objects to apply, status and Events.

Pure: no I/O, no clock (``now`` is an argument), no kopf. The kopf shell (inferenceendpoint.py)
reads the endpoint, its Deployment and the node pools from kopf's indexes, calls
:func:`reconcile_inference` and applies the :class:`Decision`. Level-based: the same snapshot
always gives the same decision, so running it again after a crash or on a resync is safe.

Who owns the replica count:

- autoscaling off: the operator. The count is ``spec.replicas`` when set (``kubectl scale
  ie/NAME`` writes it through the scale subresource), else the engine's smallest count that meets
  the target, clamped by minReplicas/maxReplicas; it goes into every apply of the Deployment.
- autoscaling on: the HPA, on the Deployment. The operator applies the Deployment without
  ``replicas`` so the two never fight. Server-side apply would *delete* a field its manager
  stops applying, so before letting go the operator hands the count to a second field manager
  (:data:`REPLICAS_MANAGER`, applied once with the count already running, or the engine's on
  creation); that manager keeps it until the HPA writes its own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ringmaster.api import (
    InferenceEndpointPhase,
    InferenceEndpointSpec,
    InferenceEndpointStatus,
    InferencePlan,
)
from ringmaster.api.common import ConditionStatus
from ringmaster.controllers.autoscaling_source import (
    UNIFIED,
    SideScaling,
    scaling_condition,
    uses_hpa,
)
from ringmaster.controllers.inference_routing import InferenceExtension, route
from ringmaster.controllers.reporting import (
    Conditions,
    Event,
    plan_warnings,
    report_plausibility,
)
from ringmaster.manifests.inference import (
    LWS_KIND,
    OUTPUT_TOKENS_PER_SECOND_METRIC,
    REQUESTS_PER_SECOND_METRIC,
    ServingPlacement,
    autoscaler,
    endpoint_url,
    replicas_only,
    selector_string,
    server_service,
    server_workload,
    serving_env,
)
from ringmaster.placement.labels import accelerator_resource as resource_for
from ringmaster.placement.pools import NodePool, NoPool, accelerator_pools, gang_fits
from ringmaster.planning import PlanError
from ringmaster.planning.disaggregation import runs_disaggregated

READY, CAPACITY_MET, SCHEDULABLE = "Ready", "CapacityMet", "Schedulable"
# The operator's field manager, and the one that holds the replica count during the hand-over
# to an HPA (see the module's docstring).
MAIN_MANAGER = "ringmaster"
REPLICAS_MANAGER = "ringmaster-replicas"

Planner = Callable[[InferenceEndpointSpec], dict[str, Any]]
"""spec -> the engine's plan in the JSON contract of ``ringmaster plan`` (raises PlanError)."""


@dataclass(frozen=True)
class EndpointView:
    name: str
    namespace: str
    generation: int
    spec: InferenceEndpointSpec
    status: InferenceEndpointStatus


@dataclass(frozen=True)
class DeploymentView:
    """What the decision needs to know of the endpoint's Deployment."""

    generation: int
    observed_generation: int
    spec_replicas: int
    replicas: int  # pods the Deployment has (status.replicas)
    updated_replicas: int
    ready_replicas: int
    replicas_managers: frozenset[str] = frozenset()
    """Field managers that own spec.replicas (server-side apply's managedFields)."""
    progress_deadline_exceeded: bool = False
    name: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> DeploymentView:
        """A Deployment, or a LeaderWorkerSet (its status counts groups, and has no
        observedGeneration: its controller acts on every generation it reports on)."""
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        if obj.get("kind") == LWS_KIND and "observedGeneration" not in status:
            status = {**status, "observedGeneration": metadata.get("generation") or 0}
        managers = frozenset(
            str(entry.get("manager"))
            for entry in metadata.get("managedFields") or []
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        )
        stuck = any(
            c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
            for c in status.get("conditions") or []
        )
        return cls(
            generation=int(metadata.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            spec_replicas=int(spec.get("replicas", 1)),
            replicas=int(status.get("replicas") or 0),
            updated_replicas=int(status.get("updatedReplicas") or 0),
            ready_replicas=int(status.get("readyReplicas") or 0),
            replicas_managers=managers,
            progress_deadline_exceeded=stuck,
            name=str(metadata.get("name") or ""),
        )

    def serves(self, desired: int) -> bool:
        """The Deployment has acted on its latest spec and has `desired` ready pods of the
        current template (extra pods still going away during a scale-in do not matter)."""
        return (
            self.observed_generation >= self.generation
            and self.updated_replicas >= desired
            and self.ready_replicas >= desired
        )


@dataclass
class Decision:
    status: InferenceEndpointStatus
    apply: list[dict[str, Any]] = field(default_factory=list)
    """Objects to server-side apply, in order, as MAIN_MANAGER (owner references added by the
    shell)."""
    hold_replicas: dict[str, Any] | None = None
    """Applied as REPLICAS_MANAGER after `apply`: the hand-over of the count to the HPA."""
    delete_autoscaler: bool = False
    delete_workload: str | None = None
    """The kind of the workload the endpoint no longer runs on (a Deployment once its replicas
    span hosts, a LeaderWorkerSet once they fit one), deleted after `apply`."""
    delete_objects: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of other objects the endpoint no longer runs on (a disaggregated side's
    workload once the plan runs aggregated, and the other way round; an InferencePool once
    routing is off), deleted after `apply`."""
    events: list[Event] = field(default_factory=list)
    desired_replicas: int = 0
    target_requests_per_second: float = 0.0


def accelerator_resource(spec: InferenceEndpointSpec) -> str:
    return resource_for(spec.accelerator.type)


def choose_pool(
    spec: InferenceEndpointSpec,
    pools: Mapping[str, NodePool],
    used: Mapping[str, Mapping[str, Decimal]],
    replicas: int,
    current: str | None = None,
    hosts: int = 1,
) -> NodePool | NoPool:
    """The pool for the replicas: nodes of the accelerator type (and of spec.machineType, when
    given) with at least perReplica of them; for a replica across ``hosts`` hosts, nodes of
    exactly perReplica / hosts (each pod
    of a group takes a whole host, one per host, so a larger host would strand the rest and run
    another machine than the plan priced). The pool already serving stays (moving would
    restart every replica); otherwise one where all replicas fit now, then the one whose hosts
    strand the fewest accelerators, then by name."""
    accelerator = spec.accelerator.type
    per_host = spec.accelerator.per_replica // hosts
    big_enough = accelerator_pools(pools, accelerator, per_host, "perReplica")
    if isinstance(big_enough, NoPool):
        return big_enough
    if spec.machine_type is not None:
        # The plan sized and priced this machine: another one runs another plan.
        mine = [p for p in big_enough if p.identity.instance_type == spec.machine_type]
        if not mine:
            seen = ", ".join(
                f"{p.name} ({p.identity.instance_type or 'no instance-type label'})"
                for p in big_enough
            )
            return NoPool(
                "NoMatchingPool",
                f"no {accelerator} pool of machine type {spec.machine_type} (spec.machineType); "
                f"the {accelerator} pools run {seen}: add a pool of {spec.machine_type}, or set "
                "spec.machineType to one of theirs",
            )
        big_enough = mine
    if hosts > 1:
        exact = [p for p in big_enough if p.accelerators_per_node == per_host]
        if not exact:
            shapes = ", ".join(f"{p.name} {p.accelerators_per_node}" for p in big_enough)
            return NoPool(
                "UnsupportedHostShape",
                f"each replica is planned as {hosts} hosts x {per_host} {accelerator} "
                f"(perReplica {spec.accelerator.per_replica}), one pod per host; no pool has "
                f"hosts of {per_host} (accelerators per host: {shapes}): add such a pool, or "
                "make perReplica a multiple of a pool's host",
            )
        big_enough = exact
    by_name = {p.name: p for p in big_enough}
    if current in by_name:
        return by_name[current]
    request = {accelerator_resource(spec): Decimal(per_host)}

    def preference(pool: NodePool) -> tuple[bool, int, str]:
        fits = gang_fits(pool, used, request, max(replicas, 1) * hosts).fits
        return (not fits, pool.accelerators_per_node % per_host, pool.name)

    return min(big_enough, key=preference)


def replicas_placeable(pool: NodePool, per_replica: int, hosts: int = 1) -> int:
    """How many replicas the pool's schedulable hosts hold at most, whoever else runs there:
    replicas on one host pack by accelerators; a group takes ``hosts`` whole hosts."""
    per_host = per_replica // hosts
    if hosts > 1:
        return sum(1 for n in pool.nodes if n.schedulable and n.accelerators >= per_host) // hosts
    return sum(n.accelerators // per_replica for n in pool.nodes if n.schedulable)


def _schedulable(
    spec: InferenceEndpointSpec, pool: NodePool, desired: int, hosts: int, placeable: int
) -> tuple[ConditionStatus, str, str]:
    """Schedulable: whether the pool, as large as it is, can hold the desired replicas."""
    unit = "group" if hosts > 1 else "replica"
    shape = (
        f"{hosts} hosts of {spec.accelerator.per_replica // hosts} x {spec.accelerator.type}"
        if hosts > 1
        else f"{spec.accelerator.per_replica} x {spec.accelerator.type}"
    )
    schedulable = sum(1 for n in pool.nodes if n.schedulable)
    if placeable >= desired:
        return (
            "True",
            "PoolFits",
            f"pool {pool.name} holds {placeable} {unit}s of {shape} on its {schedulable} "
            f"schedulable hosts; {desired} desired",
        )
    if placeable == 0:
        return (
            "False",
            "PoolTooSmall",
            f"one {unit} needs {shape}; pool {pool.name} has {schedulable} schedulable hosts, "
            f"so none can run (nothing is created until the pool grows)",
        )
    return (
        "False",
        "PoolTooSmall",
        f"{desired} {unit}s of {shape} desired; pool {pool.name} has {schedulable} schedulable "
        f"hosts, which hold {placeable}: {desired - placeable} wait until the pool grows",
    )


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def target_requests_per_second(spec: InferenceEndpointSpec) -> float:
    """The SLO's rate in requests/s (an LLM target in output tokens/s over the mean output)."""
    slo = spec.slo
    if slo.target_requests_per_second is not None:
        return float(slo.target_requests_per_second)
    tokens = spec.tokens.output_mean if spec.tokens is not None else 1
    return float(slo.target_output_tokens_per_second or 0.0) / tokens


def status_plan(plan: Mapping[str, Any], replicas: int, target: float) -> InferencePlan:
    """The engine's plan in the shape of ``status.plan`` (every key a declared field of
    InferencePlan); an LLM plan adds its token figures."""
    per_replica = plan.get("perReplicaRequestsPerSecond") or 0.0
    fields: dict[str, Any] = {
        "batchSize": plan.get("batchSize"),
        "perReplicaRequestsPerSecond": per_replica,
        "capacityRequestsPerSecond": _sig(replicas * per_replica),
        "latencyP99Milliseconds": plan.get("p99LatencyMilliseconds"),
        "replicas": plan.get("replicasNeeded"),
        "bottleneck": plan.get("bottleneck"),
        "costPerHourUSD": plan.get("costPerHourUSD"),
        "targetRequestsPerSecond": _sig(target),
        "saturationRequestsPerSecond": plan.get("capacityRequestsPerSecond"),
        "machineType": plan.get("machineType"),
        "precision": plan.get("precision"),
        "warnings": plan.get("warnings") or None,
        "disaggregation": plan.get("disaggregation"),
    }
    if _is_llm(plan):
        tokens = plan.get("outputTokensPerSecondPerReplica") or 0.0
        fields |= {
            "outputTokensPerSecond": _sig(replicas * tokens),
            "outputTokensPerSecondPerReplica": tokens,
            "ttftP99Milliseconds": plan.get("ttftP99Milliseconds"),
            "tpotP99Milliseconds": plan.get("tpotP99Milliseconds"),
            "binding": plan.get("binding"),
            **{
                key: plan.get(key)
                for key in (
                    "maxConcurrentSequences",
                    "kvCacheBytesPerToken",
                    "weightsBytesPerAccelerator",
                    "kvCachePrecision",
                    "tensorParallel",
                    "pipelineParallel",
                    "expertParallel",
                    "attentionDataParallel",
                    "redundantExperts",
                    "expertDispatch",
                    "twoBatchOverlap",
                    "hostsPerReplica",
                    "layout",
                    "maxNumSeqs",
                    "maxBatchSize",
                    "batching",
                    "maxModelLen",
                    "maxNumBatchedTokens",
                    "engine",
                    "evidence",
                    "offlineOutputTokensPerSecondPerReplica",
                    "offlineRequestsPerSecondPerReplica",
                    "ttftSloRequestsPerSecondPerReplica",
                    "tpotSloRequestsPerSecondPerReplica",
                )
            },
        }
    return InferencePlan.model_validate(fields)


def _autoscaling_target(
    spec: InferenceEndpointSpec, plan: Mapping[str, Any]
) -> tuple[float | None, str]:
    """The HPA's per-pod target: the engine's sustainable rate at the SLO, in the SLO's unit."""
    if spec.slo.target_output_tokens_per_second is not None:
        return plan.get("outputTokensPerSecondPerReplica"), OUTPUT_TOKENS_PER_SECOND_METRIC
    return plan.get("perReplicaRequestsPerSecond"), REQUESTS_PER_SECOND_METRIC


def _is_llm(plan: Mapping[str, Any]) -> bool:
    return "outputTokensPerSecondPerReplica" in plan


# How the engine's refusals of a precision begin (engine/llm_serving.py: "precision FP4 needs
# FP4 tensor cores ...", "kvCachePrecision FP8 needs ...").
_PRECISION_REFUSALS = ("precision ", "kvCachePrecision ")


def _capacity_condition(
    spec: InferenceEndpointSpec, plan: Mapping[str, Any], replicas: int
) -> tuple[ConditionStatus, str, str]:
    """CapacityMet with the numbers: the engine's own sentence when the target is out of reach,
    and for an LLM endpoint which target binds the per-replica rate."""
    per_replica = plan.get("perReplicaRequestsPerSecond") or 0.0
    if plan.get("feasible"):
        if _is_llm(plan):
            tokens = plan.get("outputTokensPerSecondPerReplica") or 0.0
            return (
                "True",
                "TargetMet",
                f"{replicas} x {tokens:,.0f} output tokens/s = {replicas * tokens:,.0f} output "
                f"tokens/s, predicted TTFT p99 {plan.get('ttftP99Milliseconds'):.3g} ms and TPOT "
                f"p99 {plan.get('tpotP99Milliseconds'):.3g} ms; {plan.get('binding')} binds",
            )
        p99 = plan.get("p99LatencyMilliseconds")
        return (
            "True",
            "TargetMet",
            f"{replicas} x {per_replica:,.0f} req/s = {replicas * per_replica:,.0f} req/s, "
            f"predicted p99 {p99:.3g} ms",
        )
    needed = plan.get("replicasNeeded")
    text = str(plan.get("reason") or "")
    if needed is None:
        # An LLM that no replica can hold (weights, cache, FP8 units) names no latency target.
        unservable = _is_llm(plan) and "target" not in text
        reason = "ModelDoesNotFit" if unservable else "LatencyTargetUnreachable"
        if text.startswith(_PRECISION_REFUSALS):
            # The accelerator lacks the precision's tensor cores: the model may fit well.
            reason = "PrecisionUnsupported"
    elif replicas < needed:
        reason = "TooFewReplicas"
    else:
        reason = "ModelDoesNotFit"
    return "False", reason, str(plan.get("reason") or "the engine predicts the target is not met")


def _rate(x: float) -> str:
    """Requests/s as people read them: whole numbers, but 0.47 stays 0.47."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _sizing_source(
    spec: InferenceEndpointSpec,
    plan: Mapping[str, Any],
    hpa_owns: bool,
    scaled: SideScaling | None = None,
) -> str:
    """Why the count is what it is, for the Scaled Event."""
    if hpa_owns:
        return "set by the HorizontalPodAutoscaler"
    if scaled is not None:
        return f"the servers' metrics ({scaled.reason}): {scaled.message}"
    if spec.replicas is not None:
        return "spec.replicas"
    needed = plan.get("replicasNeeded")
    rate = plan.get("perReplicaRequestsPerSecond") or 0.0
    target = target_requests_per_second(spec)
    slo = spec.slo
    if spec.model.architecture is not None:
        latency = (
            f"TTFT p99 {slo.time_to_first_token_p99_milliseconds:g} ms and TPOT p99 "
            f"{slo.time_per_output_token_p99_milliseconds:g} ms"
        )
    else:
        latency = f"p99 {slo.latency_p99_milliseconds:g} ms"
    if needed is None:
        return f"minReplicas; no batch size meets {latency}"
    need = (
        f"the engine needs {needed} x {_rate(rate)} req/s for {_rate(target)} req/s within "
        f"{latency}"
    )
    if needed < spec.min_replicas:
        return f"minReplicas; {need}"
    if needed > spec.max_replicas:
        return f"maxReplicas; {need}"
    return need


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def _wait(
    decision: Decision,
    conditions: Conditions,
    reason: str,
    message: str,
    phase: InferenceEndpointPhase,
    announce: bool = True,
) -> Decision:
    """The one way an endpoint waits or fails: nothing is applied (what runs keeps running),
    Ready=False says why, and a Warning Event announces a new reason (``announce`` False when
    another condition's Event already said it)."""
    decision.status.phase = phase.value
    changed = not conditions.set(READY, "False", reason, message).was("False", reason)
    if changed and announce:
        decision.events.append(Event("Warning", reason, message))
    conditions.stamp()
    return decision


def invalid_spec(
    status: InferenceEndpointStatus, generation: int, message: str, now: dt.datetime
) -> Decision:
    """The decision for a spec the models refuse (a CRD older than the operator)."""
    status = status.model_copy(deep=True)
    status.observed_generation = generation
    conditions = Conditions(status, generation, now)
    return _wait(
        Decision(status=status), conditions, "InvalidSpec", message, InferenceEndpointPhase.FAILED
    )


def refused_apply(
    decision: Decision, kind: str, name: str, message: str, now: dt.datetime
) -> Decision:
    """The API server refused one of the endpoint's objects (a Service of its name that another
    controller owns): Ready=False names the object and the server's words, with a Warning."""
    status = decision.status
    conditions = Conditions(status, status.observed_generation or 0, now)
    refused = Decision(
        status=status, target_requests_per_second=decision.target_requests_per_second
    )
    running = status.ready_replicas or status.replicas
    phase = InferenceEndpointPhase.DEGRADED if running else InferenceEndpointPhase.PENDING
    reason = "ApplyRefused"
    return _wait(
        refused, conditions, reason, f"the API server refused {kind} {name}: {message}", phase
    )


class _Stop:
    """A phase's answer when the decision is made: the later phases do not run."""


STOP = _Stop()


@dataclass
class _Step:
    """What every phase of the serving reconcile works on."""

    endpoint: EndpointView
    decision: Decision
    conditions: Conditions
    planner: Planner
    pools: Mapping[str, NodePool]
    used: Mapping[str, Mapping[str, Decimal]]
    hardware: tuple[str, str] | None
    deployment: DeploymentView | None
    group: DeploymentView | None
    leader_worker_set_installed: bool
    autoscaler_present: bool
    plan: Mapping[str, Any] = field(default_factory=dict)
    hosts: int = 1
    desired: int = 0
    hpa_owns: bool = False
    capacity: tuple[ConditionStatus, str, str] = ("Unknown", "", "")
    pool: NodePool | None = None
    # A disaggregated endpoint's side workloads by name (manifests.disaggregated.side_name).
    side_workloads: Mapping[str, DeploymentView] = field(default_factory=dict)
    inference_extension: InferenceExtension = field(default_factory=InferenceExtension)
    # spec.autoscaling.source ServerMetrics: the counts the autoscaler decided, by side
    # (server_metrics_autoscaler.UNIFIED for an aggregated endpoint).
    scaled: Mapping[str, SideScaling] = field(default_factory=dict)

    @property
    def spec(self) -> InferenceEndpointSpec:
        return self.endpoint.spec

    @property
    def status(self) -> InferenceEndpointStatus:
        return self.decision.status

    @property
    def spans_hosts(self) -> bool:
        return self.hosts > 1

    @property
    def kind(self) -> str:
        """The workload that runs the replicas: a LeaderWorkerSet group per replica across
        hosts, a Deployment's pod per replica on one host."""
        return LWS_KIND if self.spans_hosts else "Deployment"

    @property
    def workload(self) -> DeploymentView | None:
        return self.group if self.spans_hosts else self.deployment

    @property
    def other_workload(self) -> DeploymentView | None:
        """The workload of the other kind, left from before the replicas' shape changed."""
        return self.deployment if self.spans_hosts else self.group

    def wait(self, reason: str, message: str, announce: bool = True) -> _Stop:
        """Wait with a reason: Degraded while replicas run on either workload, else Pending."""
        running = self.deployment is not None or self.group is not None
        phase = InferenceEndpointPhase.DEGRADED if running else InferenceEndpointPhase.PENDING
        _wait(self.decision, self.conditions, reason, message, phase, announce)
        return STOP

    def event(self, type_: str, reason: str, message: str) -> None:
        self.decision.events.append(Event(type_, reason, message))  # type: ignore[arg-type]


def reconcile_inference(
    endpoint: EndpointView,
    deployment: DeploymentView | None,
    autoscaler_present: bool,
    pools: Mapping[str, NodePool],
    used: Mapping[str, Mapping[str, Decimal]],
    planner: Planner,
    now: dt.datetime,
    hardware: tuple[str, str] | None = None,
    group: DeploymentView | None = None,
    leader_worker_set_installed: bool = False,
    side_workloads: Mapping[str, DeploymentView] | None = None,
    inference_extension: InferenceExtension | None = None,
    scaled: Mapping[str, SideScaling] | None = None,
) -> Decision:
    """``hardware``: why the operator's catalog cannot place the endpoint's accelerator
    (planning.catalog.hardware_problem), or None. ``group``: the endpoint's LeaderWorkerSet, which
    runs its replicas when they span hosts (``deployment`` runs them on one host);
    ``leader_worker_set_installed``: its CRD is served. The phases run in order until one
    decides (waits, fails) or all have run."""
    status = endpoint.status.model_copy(deep=True)
    status.observed_generation = endpoint.generation
    decision = Decision(status=status)
    decision.target_requests_per_second = target_requests_per_second(endpoint.spec)
    step = _Step(
        endpoint,
        decision,
        Conditions(status, endpoint.generation, now),
        planner,
        pools,
        used,
        hardware,
        deployment,
        group,
        leader_worker_set_installed,
        autoscaler_present,
        side_workloads=side_workloads or {},
        inference_extension=inference_extension or InferenceExtension(),
        scaled=scaled or {},
    )
    for phase in _PHASES:
        if phase(step) is STOP:
            return decision
    step.conditions.stamp()
    return decision


def _hardware(step: _Step) -> _Stop | None:
    """Like a missing pool: the endpoint waits for the catalog to define its hardware."""
    return step.wait(*step.hardware) if step.hardware is not None else None


def _plan(step: _Step) -> _Stop | None:
    """The engine's plan; its refusal fails the endpoint (nothing applied)."""
    try:
        step.plan = step.planner(step.spec)
    except PlanError as error:
        _wait(
            step.decision, step.conditions, "PlanFailed", str(error), InferenceEndpointPhase.FAILED
        )
        return STOP
    step.hosts = int(step.plan.get("hostsPerReplica") or 1)
    if runs_disaggregated(step.plan):
        from ringmaster.controllers.inference_sides import reconcile_disaggregated

        reconcile_disaggregated(step)
        return STOP
    step.status.sides = None
    return None


def _installation(step: _Step) -> _Stop | None:
    """Replicas across hosts need LeaderWorkerSet: without its controller a LeaderWorkerSet
    would run no pod, so nothing is created."""
    if not step.spans_hosts or step.leader_worker_set_installed:
        return None
    spec = step.spec
    return step.wait(
        "LeaderWorkerSetNotInstalled",
        f"each replica spans {step.hosts} hosts ({spec.accelerator.per_replica} x "
        f"{spec.accelerator.type}) and runs as a LeaderWorkerSet group, but the "
        "LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1) is not installed: install "
        'LeaderWorkerSet (docs/install.md, "With LeaderWorkerSet")',
    )


def _replica_count(step: _Step) -> _Stop | None:
    """Who sets the count and what it is (see the module's docstring), the plan's figures for
    that count, and CapacityMet. An LLM no replica can serve waits with the engine's reason."""
    spec, status, workload = step.spec, step.status, step.workload
    hpa = uses_hpa(spec)
    step.hpa_owns = (
        hpa and workload is not None and bool(workload.replicas_managers - {MAIN_MANAGER})
    )
    scaled = step.scaled.get(UNIFIED)
    if hpa and workload is not None:
        desired = workload.spec_replicas  # the HPA's count, or what runs when it takes over
    elif scaled is not None:
        desired = scaled.replicas  # the server-metrics autoscaler's
    else:
        desired = int(step.plan["replicas"])
    if desired != step.plan["replicas"]:
        # The figures (capacity, p99, cost) for the count that actually runs.
        step.plan = step.planner(spec.model_copy(update={"replicas": desired}))
    step.desired = step.decision.desired_replicas = desired

    name = step.endpoint.name
    status.replicas = desired
    status.ready_replicas = workload.ready_replicas if workload else 0
    status.selector = selector_string(name)
    status.url = endpoint_url(name, step.endpoint.namespace, spec.port)
    status.plan = status_plan(step.plan, desired, step.decision.target_requests_per_second)
    step.decision.events += report_plausibility(step.conditions, plan_warnings(status.plan))

    step.capacity = _capacity_condition(spec, step.plan, desired)
    value, reason, message = step.capacity
    before = step.conditions.set(CAPACITY_MET, value, reason, message)
    if value == "False" and not before.was("False", reason):
        step.event("Warning", "CapacityNotMet", message)
    elif value == "True" and before.was("False"):
        step.event("Normal", "CapacityMet", message)
    if _is_llm(step.plan) and step.plan.get("replicasNeeded") is None:
        # No replica can serve it: wait for a spec that fits (CapacityNotMet announced it).
        return step.wait(reason, message, announce=False)
    return None


def _pool(step: _Step) -> _Stop | None:
    """The pool, its hosts' shape and how many of the replicas it can hold. A pool that cannot
    hold one replica gets nothing applied: a Deployment without a pool's selector could land
    anywhere, and a group that never fits would hold gated pods forever."""
    spec = step.spec
    pool = choose_pool(
        spec,
        step.pools,
        step.used,
        step.desired,
        current=step.endpoint.status.pool,
        hosts=step.hosts,
    )
    if isinstance(pool, NoPool):
        return step.wait(pool.reason, pool.message)
    placeable = replicas_placeable(pool, spec.accelerator.per_replica, step.hosts)
    value, reason, message = _schedulable(spec, pool, step.desired, step.hosts, placeable)
    if step.conditions.transition(SCHEDULABLE, value, reason, message) and value == "False":
        step.event("Warning", reason, message)
    if placeable == 0 and step.desired > 0:
        return step.wait(reason, message, announce=False)
    if pool.name != step.endpoint.status.pool:
        step.event(
            "Normal",
            "PoolSelected",
            f"serving on node pool {pool.name} ({spec.accelerator.per_replica} x "
            f"{spec.accelerator.type} per replica"
            + (f", {step.hosts} hosts each" if step.spans_hosts else "")
            + ")",
        )
    step.status.pool = pool.name
    step.pool = pool
    return None


def _workload(step: _Step) -> _Stop | None:
    """The workload (a Deployment, or a LeaderWorkerSet of replicas across hosts: one builder)
    and the Service in front; the workload of the other kind, once the shape changed, goes."""
    assert step.pool is not None
    spec, name, namespace = step.spec, step.endpoint.name, step.endpoint.namespace
    placement = ServingPlacement(
        pool=step.pool.name,
        node_selector=step.pool.node_selector(),
        accelerator_resource=step.pool.accelerator_resource or accelerator_resource(spec),
    )
    count = None if step.hpa_owns else step.desired
    workload = server_workload(
        name, namespace, spec, placement, count, step.hosts, serving_env(step.plan)
    )
    step.decision.apply = [workload, server_service(name, namespace, spec, step.spans_hosts)]
    # The sides of a disaggregated plan the endpoint ran before.
    step.decision.delete_objects += [
        (LWS_KIND if side.endswith("-group") else "Deployment", side)
        for side in step.side_workloads
    ]
    if step.other_workload is not None:
        other = "Deployment" if step.spans_hosts else LWS_KIND
        step.decision.delete_workload = other
    route(step, False, {"": step.spans_hosts})
    return None


def _autoscaler(step: _Step) -> _Stop | None:
    """The HPA while autoscaling is on (after the count's hand-over), none otherwise."""
    spec, name, namespace = step.spec, step.endpoint.name, step.endpoint.namespace
    if uses_hpa(spec):
        metric = _autoscaling_target(spec, step.plan)
        step.decision.apply.append(autoscaler(name, namespace, spec, *metric, kind=step.kind))
        if not step.hpa_owns:
            step.decision.hold_replicas = replicas_only(name, namespace, step.desired, step.kind)
    elif step.autoscaler_present:
        step.decision.delete_autoscaler = True
    return None


def _scaled(step: _Step) -> _Stop | None:
    """A Scaled Event when the count changes, saying who decided it."""
    previous = step.endpoint.status.replicas
    scaling_condition(step.conditions, step.spec, step.scaled)
    if previous != step.desired:
        source = _sizing_source(step.spec, step.plan, step.hpa_owns, step.scaled.get(UNIFIED))
        message = (
            f"{_replicas(step.desired)}: {source}"
            if previous is None
            else f"scaled from {previous} to {_replicas(step.desired)}: {source}"
        )
        step.event("Normal", "Scaled", message)
    return None


def _ready(step: _Step) -> _Stop | None:
    _readiness(
        step.decision,
        step.conditions,
        step.workload,
        step.desired,
        step.capacity[0] == "True",
        step.kind,
    )
    return None


_PHASES: tuple[Callable[[_Step], _Stop | None], ...] = (
    _hardware,
    _plan,
    _installation,
    _replica_count,
    _pool,
    _workload,
    _autoscaler,
    _scaled,
    _ready,
)


def _readiness(
    decision: Decision,
    conditions: Conditions,
    deployment: DeploymentView | None,
    desired: int,
    capacity_met: bool,
    kind: str = "Deployment",
) -> None:
    """Ready and the phase, from the Deployment's status (or the LeaderWorkerSet's, whose ready
    replicas are groups whose leader and workers are all ready)."""
    status = decision.status
    ready = deployment.ready_replicas if deployment else 0
    counts = f"{min(ready, desired)}/{desired} replicas ready"
    if deployment is None:
        value, reason, message = "False", "Creating", f"creating the {kind}"
    elif desired == 0:
        value, reason, message = "False", "ScaledToZero", "no replicas are desired"
    elif deployment.serves(desired):
        value, reason, message = "True", "ReplicasReady", counts
    elif deployment.progress_deadline_exceeded:
        value, reason, message = "False", "ProgressDeadlineExceeded", counts
    else:
        value, reason, message = "False", "ReplicasNotReady", counts
    before = conditions.set(READY, value, reason, message)  # type: ignore[arg-type]
    if value == "True" and not before.was("True"):
        decision.events.append(Event("Normal", "Ready", counts))

    if not capacity_met or reason == "ProgressDeadlineExceeded":
        status.phase = InferenceEndpointPhase.DEGRADED.value
    elif value == "True":
        status.phase = InferenceEndpointPhase.READY.value
    elif deployment is None:
        status.phase = InferenceEndpointPhase.PENDING.value
    else:
        status.phase = InferenceEndpointPhase.PROGRESSING.value
