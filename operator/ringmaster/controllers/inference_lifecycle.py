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
    is_tpu,
)
from ringmaster.api.common import ConditionStatus
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
    server_deployment,
    server_leader_worker_set,
    server_service,
    serving_env,
)
from ringmaster.placement.labels import GPU_RESOURCE, TPU_RESOURCE
from ringmaster.placement.pools import NodePool, NoPool, accelerator_pools, gang_fits
from ringmaster.planning import PlanError

READY, CAPACITY_MET = "Ready", "CapacityMet"
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
    events: list[Event] = field(default_factory=list)
    desired_replicas: int = 0
    target_requests_per_second: float = 0.0


def accelerator_resource(spec: InferenceEndpointSpec) -> str:
    return TPU_RESOURCE if is_tpu(spec.accelerator.type) else GPU_RESOURCE


def choose_pool(
    spec: InferenceEndpointSpec,
    pools: Mapping[str, NodePool],
    used: Mapping[str, Mapping[str, Decimal]],
    replicas: int,
    current: str | None = None,
    hosts: int = 1,
) -> NodePool | NoPool:
    """The pool for the replicas: nodes of the accelerator type with at least a pod's share of
    them (perReplica, or perReplica / hosts for a replica across ``hosts`` hosts). The pool
    already serving stays (moving would restart every replica); otherwise one where all replicas
    fit now, then the one whose hosts strand the fewest accelerators, then by name."""
    accelerator = spec.accelerator.type
    per_replica = spec.accelerator.per_replica // hosts
    big_enough = accelerator_pools(pools, accelerator, per_replica, "perReplica")
    if isinstance(big_enough, NoPool):
        return big_enough
    by_name = {p.name: p for p in big_enough}
    if current in by_name:
        return by_name[current]
    request = {accelerator_resource(spec): Decimal(per_replica)}

    def preference(pool: NodePool) -> tuple[bool, int, str]:
        fits = gang_fits(pool, used, request, max(replicas, 1) * hosts).fits
        return (not fits, pool.accelerators_per_node % per_replica, pool.name)

    return min(big_enough, key=preference)


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
                    "hostsPerReplica",
                    "layout",
                    "maxNumSeqs",
                    "maxModelLen",
                    "maxNumBatchedTokens",
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


def _capacity_condition(plan: Mapping[str, Any], replicas: int) -> tuple[ConditionStatus, str, str]:
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
    elif replicas < needed:
        reason = "TooFewReplicas"
    else:
        reason = "ModelDoesNotFit"
    return "False", reason, str(plan.get("reason") or "the engine predicts the target is not met")


def _rate(x: float) -> str:
    """Requests/s as people read them: whole numbers, but 0.47 stays 0.47."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _sizing_source(spec: InferenceEndpointSpec, plan: Mapping[str, Any], hpa_owns: bool) -> str:
    """Why the count is what it is, for the Scaled Event."""
    if hpa_owns:
        return "set by the HorizontalPodAutoscaler"
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


def _fail(
    decision: Decision,
    conditions: Conditions,
    reason: str,
    message: str,
) -> Decision:
    """A spec that cannot be planned: nothing is applied (what runs keeps running)."""
    status = decision.status
    status.phase = InferenceEndpointPhase.FAILED.value
    if not conditions.set(READY, "False", reason, message).was("False", reason):
        decision.events.append(Event("Warning", reason, message))
    conditions.stamp()
    return decision


def invalid_spec(
    status: InferenceEndpointStatus, generation: int, message: str, now: dt.datetime
) -> Decision:
    """The decision for a spec the models refuse (a CRD older than the operator)."""
    status = status.model_copy(deep=True)
    status.observed_generation = generation
    decision = Decision(status=status)
    return _fail(decision, Conditions(status, generation, now), "InvalidSpec", message)


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
) -> Decision:
    """``hardware``: why the operator's catalog cannot place the endpoint's accelerator
    (planning.catalog.hardware_problem), or None. ``group``: the endpoint's LeaderWorkerSet, which
    runs its replicas when they span hosts (``deployment`` runs them on one host);
    ``leader_worker_set_installed``: its CRD is served."""
    spec = endpoint.spec
    name, namespace = endpoint.name, endpoint.namespace
    previous = endpoint.status
    status = previous.model_copy(deep=True)
    status.observed_generation = endpoint.generation
    decision = Decision(status=status)
    conditions = Conditions(status, endpoint.generation, now)
    target = target_requests_per_second(spec)
    decision.target_requests_per_second = target

    if hardware is not None:
        # Like a missing pool: nothing is applied, what runs keeps running, and the endpoint
        # waits for the catalog to define its hardware.
        reason, message = hardware
        phase = InferenceEndpointPhase.DEGRADED if deployment else InferenceEndpointPhase.PENDING
        status.phase = phase.value
        if not conditions.set(READY, "False", reason, message).was("False", reason):
            decision.events.append(Event("Warning", reason, message))
        conditions.stamp()
        return decision

    try:
        plan = planner(spec)
    except PlanError as error:
        return _fail(decision, conditions, "PlanFailed", str(error))

    # A replica across hosts runs as one LeaderWorkerSet group; one on a host, as a Deployment.
    hosts = int(plan.get("hostsPerReplica") or 1)
    spans_hosts = hosts > 1
    previous_workload = deployment if spans_hosts else group
    if spans_hosts:
        deployment = group
    if spans_hosts and not leader_worker_set_installed:
        # Nothing is created: without its controller a LeaderWorkerSet would run no pod.
        reason = "LeaderWorkerSetNotInstalled"
        message = (
            f"each replica spans {hosts} hosts ({spec.accelerator.per_replica} x "
            f"{spec.accelerator.type}) and runs as a LeaderWorkerSet group, but the "
            "LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1) is not installed: install "
            'LeaderWorkerSet (docs/install.md, "With LeaderWorkerSet")'
        )
        running = deployment is not None or previous_workload is not None
        phase = InferenceEndpointPhase.DEGRADED if running else InferenceEndpointPhase.PENDING
        status.phase = phase.value
        if not conditions.set(READY, "False", reason, message).was("False", reason):
            decision.events.append(Event("Warning", reason, message))
        conditions.stamp()
        return decision

    # Who sets the count, and what it is (see the module's docstring).
    autoscaled = spec.autoscaling.enabled
    hpa_owns = (
        autoscaled
        and deployment is not None
        and bool(deployment.replicas_managers - {MAIN_MANAGER})
    )
    if hpa_owns:
        assert deployment is not None
        desired = deployment.spec_replicas
    elif autoscaled and deployment is not None:
        desired = deployment.spec_replicas  # switching the HPA on: start from what runs
    else:
        desired = int(plan["replicas"])
    if desired != plan["replicas"]:
        # The figures (capacity, p99, cost) for the count that actually runs.
        plan = planner(spec.model_copy(update={"replicas": desired}))
    decision.desired_replicas = desired

    status.replicas = desired
    status.ready_replicas = deployment.ready_replicas if deployment else 0
    status.selector = selector_string(name)
    status.url = endpoint_url(name, namespace, spec.port)
    status.plan = status_plan(plan, desired, target)
    decision.events += report_plausibility(conditions, plan_warnings(status.plan))

    capacity = _capacity_condition(plan, desired)
    capacity_before = conditions.set(CAPACITY_MET, *capacity)
    if capacity[0] == "False" and not capacity_before.was("False", capacity[1]):
        decision.events.append(Event("Warning", "CapacityNotMet", capacity[2]))
    elif capacity[0] == "True" and capacity_before.was("False"):
        decision.events.append(Event("Normal", "CapacityMet", capacity[2]))

    if _is_llm(plan) and plan.get("replicasNeeded") is None:
        # No replica can serve it: create nothing (what already runs keeps running) and wait
        # for a spec that fits, with the engine's reason.
        status.phase = (
            InferenceEndpointPhase.DEGRADED if deployment else InferenceEndpointPhase.PENDING
        ).value
        conditions.set(READY, "False", capacity[1], capacity[2])
        conditions.stamp()
        return decision

    pool = choose_pool(spec, pools, used, desired, current=previous.pool, hosts=hosts)
    if isinstance(pool, NoPool):
        # Nothing is applied: a Deployment without a pool's selector could land anywhere.
        phase = InferenceEndpointPhase.DEGRADED if deployment else InferenceEndpointPhase.PENDING
        status.phase = phase.value
        if not conditions.set(READY, "False", pool.reason, pool.message).was("False", pool.reason):
            decision.events.append(Event("Warning", pool.reason, pool.message))
        conditions.stamp()
        return decision
    if pool.name != previous.pool:
        decision.events.append(
            Event(
                "Normal",
                "PoolSelected",
                f"serving on node pool {pool.name} ({spec.accelerator.per_replica} x "
                f"{spec.accelerator.type} per replica"
                + (f", {hosts} hosts each" if spans_hosts else "")
                + ")",
            )
        )
    status.pool = pool.name
    placement = ServingPlacement(
        pool=pool.name,
        node_selector=pool.node_selector(),
        accelerator_resource=pool.accelerator_resource or accelerator_resource(spec),
    )

    count = None if hpa_owns else desired
    if spans_hosts:
        kind = LWS_KIND
        workload = server_leader_worker_set(
            name, namespace, spec, placement, count, hosts, serving_env(plan)
        )
    else:
        kind = "Deployment"
        workload = server_deployment(name, namespace, spec, placement, count, serving_env(plan))
    decision.apply = [workload, server_service(name, namespace, spec, groups=spans_hosts)]
    if previous_workload is not None:
        decision.delete_workload = "Deployment" if spans_hosts else LWS_KIND
    if autoscaled:
        metric = _autoscaling_target(spec, plan)
        decision.apply.append(autoscaler(name, namespace, spec, *metric, kind=kind))
        if not hpa_owns:
            decision.hold_replicas = replicas_only(name, namespace, desired, kind)
    elif autoscaler_present:
        decision.delete_autoscaler = True

    if previous.replicas != desired:
        source = _sizing_source(spec, plan, hpa_owns)
        message = (
            f"{_replicas(desired)}: {source}"
            if previous.replicas is None
            else f"scaled from {previous.replicas} to {_replicas(desired)}: {source}"
        )
        decision.events.append(Event("Normal", "Scaled", message))

    _readiness(decision, conditions, deployment, desired, capacity[0] == "True", kind)
    conditions.stamp()
    return decision


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
