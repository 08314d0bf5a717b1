"""The InferenceEndpoint decision when the plan runs disaggregated (status.plan.disaggregation
chosen ``Disaggregated``): two sides, each placed, built and counted like an aggregated
endpoint's replicas (inference_lifecycle's phases, one side at a time), behind one Service in
front of the decode side.

Pure, as inference_lifecycle: the shell applies the Decision. The aggregated workload and its
HPA, left from before the plan split, go once the sides are applied; the sides go the other way
(inference_lifecycle._workload deletes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringmaster.api import InferenceEndpointPhase
from ringmaster.api.serving_topology import DisaggregatedReplicas, SideReplicas

# inference_lifecycle loads this module when it first runs a disaggregated plan, by then
# whole, so the import goes one way at load time.
from ringmaster.controllers import inference_lifecycle as life
from ringmaster.controllers.autoscaling_source import scaling_condition
from ringmaster.controllers.inference_lifecycle import DeploymentView, _Step
from ringmaster.controllers.inference_routing import route
from ringmaster.controllers.reporting import plan_warnings, report_plausibility
from ringmaster.manifests.disaggregated import (
    SIDE_NAMES,
    decode_service,
    side_env,
    side_name,
    side_spec,
    side_workload,
)
from ringmaster.manifests.inference import (
    LWS_KIND,
    ServingPlacement,
    endpoint_url,
    selector_string,
    serving_env,
    workload_name,
)
from ringmaster.placement.pools import NodePool, NoPool


@dataclass(frozen=True)
class _Side:
    name: str  # prefill or decode
    plan: dict[str, Any]
    desired: int
    per_replica: int
    hosts: int

    @property
    def kind(self) -> str:
        return LWS_KIND if self.hosts > 1 else "Deployment"


def _sides(step: _Step) -> list[_Side]:
    split = step.plan["disaggregation"]
    out = []
    for name in SIDE_NAMES:
        plan = split[name]
        scaled = step.scaled.get(name)  # the server-metrics autoscaler's count, when it runs
        out.append(
            _Side(
                name,
                plan,
                scaled.replicas if scaled is not None else int(plan["replicas"]),
                int(plan["perReplica"]),
                int(plan.get("hostsPerReplica") or 1),
            )
        )
    return out


def _current(step: _Step, side: _Side) -> DeploymentView | None:
    return step.side_workloads.get(side_name(step.endpoint.name, side.name, side.kind))


def reconcile_disaggregated(step: _Step) -> None:
    """Counts, capacity, pools, workloads and readiness of both sides, into step.decision."""
    spec, status, name = step.spec, step.status, step.endpoint.name
    sides = _sides(step)
    total = sum(s.desired for s in sides)
    step.desired = step.decision.desired_replicas = total
    views = {s.name: _current(step, s) for s in sides}
    ready = {s.name: (v.ready_replicas if (v := views[s.name]) else 0) for s in sides}
    status.replicas = total
    status.ready_replicas = sum(ready.values())
    status.selector = selector_string(name)
    status.url = endpoint_url(name, step.endpoint.namespace, spec.port)
    status.plan = _status_plan(step, sides, total)
    step.decision.events += report_plausibility(step.conditions, plan_warnings(status.plan))
    scaling_condition(step.conditions, spec, step.scaled)
    previous_total = step.endpoint.status.replicas
    if previous_total is not None and previous_total != total:
        why = "; ".join(f"{n}: {c.reason}, {c.message}" for n, c in step.scaled.items())
        step.event(
            "Normal",
            "Scaled",
            f"scaled from {previous_total} to {total} replicas ("
            + ", ".join(f"{s.name} {s.desired}" for s in sides)
            + f"): {why or 'the engine plan'}",
        )

    step.capacity = _capacity(step.plan)
    value, reason, message = step.capacity
    before = step.conditions.set(life.CAPACITY_MET, value, reason, message)
    if value == "False" and not before.was("False", reason):
        step.event("Warning", "CapacityNotMet", message)
    elif value == "True" and before.was("False"):
        step.event("Normal", "CapacityMet", message)
    if value == "False" and step.plan.get("replicasNeeded") is None:
        step.wait(reason, message, announce=False)
        return

    if any(s.hosts > 1 for s in sides) and not step.leader_worker_set_installed:
        step.wait(
            "LeaderWorkerSetNotInstalled",
            "a side's replica spans hosts and runs as a LeaderWorkerSet group, but the "
            "LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1) is not installed: install "
            'LeaderWorkerSet (docs/install.md, "With LeaderWorkerSet")',
        )
        return

    placed: dict[str, NodePool] = {}
    previous = step.endpoint.status.sides
    for side in sides:
        own = side_spec(spec, side.per_replica)
        current = getattr(getattr(previous, side.name, None), "pool", None) if previous else None
        pool = life.choose_pool(own, step.pools, step.used, side.desired, current, side.hosts)
        if isinstance(pool, NoPool):
            step.wait(pool.reason, f"{side.name} side: {pool.message}")
            return
        placed[side.name] = pool
    schedulable = [
        (side, life.replicas_placeable(placed[side.name], side.per_replica, side.hosts))
        for side in sides
    ]
    worst = min(schedulable, key=lambda sp: sp[1] - sp[0].desired)
    side, placeable = worst
    value, reason, message = life._schedulable(
        side_spec(spec, side.per_replica), placed[side.name], side.desired, side.hosts, placeable
    )
    message = f"{side.name} side: {message}"
    if step.conditions.transition(life.SCHEDULABLE, value, reason, message) and value == "False":
        step.event("Warning", reason, message)
    if any(p == 0 and s.desired > 0 for s, p in schedulable):
        step.wait(reason, message, announce=False)
        return
    status.pool = placed["decode"].name
    status.sides = DisaggregatedReplicas(
        **{
            s.name: SideReplicas(
                replicas=s.desired, ready_replicas=ready[s.name], pool=placed[s.name].name
            )
            for s in sides
        }
    )

    _workloads(step, sides, placed)
    route(step, True, {s.name: s.hosts > 1 for s in sides})
    _readiness(step, sides, views)


def _workloads(step: _Step, sides: list[_Side], placed: dict[str, NodePool]) -> None:
    spec, name, namespace = step.spec, step.endpoint.name, step.endpoint.namespace
    backend = str(step.plan["disaggregation"].get("transferBackend") or "NIXL")
    wanted = set()
    for side in sides:
        own = side_spec(spec, side.per_replica)
        pool = placed[side.name]
        placement = ServingPlacement(
            pool=pool.name,
            node_selector=pool.node_selector(),
            accelerator_resource=pool.accelerator_resource or life.accelerator_resource(spec),
        )
        env = side_env(serving_env(side.plan), backend, side.name)
        step.decision.apply.append(
            side_workload(name, namespace, own, side.name, placement, side.desired, side.hosts, env)
        )
        wanted.add(side_name(name, side.name, side.kind))
    decode = next(s for s in sides if s.name == "decode")
    step.decision.apply.append(decode_service(name, namespace, spec, decode.hosts > 1))
    # What ran before the split (the aggregated workload, its HPA) and a side of the other kind.
    for kind, running in (("Deployment", step.deployment), (LWS_KIND, step.group)):
        if running is not None:
            step.decision.delete_objects.append((kind, workload_name(name, kind)))
    for other in step.side_workloads:
        if other not in wanted:
            kind = LWS_KIND if other.endswith("-group") else "Deployment"
            step.decision.delete_objects.append((kind, other))
    if step.autoscaler_present:
        step.decision.delete_autoscaler = True


def _status_plan(step: _Step, sides: list[_Side], total: int) -> Any:
    """status.plan of the endpoint as it runs: the sides' capacity is the narrower side's (a
    request needs both), its output tokens at the mean output, TTFT / TPOT p99 the plan's."""
    plan = life.status_plan(step.plan, total, step.decision.target_requests_per_second)
    capacity = min(
        s.desired * float(s.plan.get("perReplicaRequestsPerSecond") or 0.0) for s in sides
    )
    output = float(step.spec.tokens.output_mean) if step.spec.tokens else 1.0
    return plan.model_copy(
        update={
            "capacity_requests_per_second": life._sig(capacity),
            "output_tokens_per_second": life._sig(capacity * output),
            "ttft_p99_milliseconds": step.plan.get("ttftP99Milliseconds"),
            "tpot_p99_milliseconds": step.plan.get("tpotP99Milliseconds"),
            "layout": step.plan.get("layout"),
        }
    )


def _capacity(plan: Mapping[str, Any]) -> tuple[Any, str, str]:
    split = plan["disaggregation"]
    p, d = split["prefill"], split["decode"]
    transfer = split.get("kvTransfer") or {}
    if plan.get("feasible"):
        return (
            "True",
            "TargetMet",
            f"disaggregated: {p['replicas']} prefill x {p['perReplica']} + {d['replicas']} decode "
            f"x {d['perReplica']}, predicted TTFT p99 {plan['ttftP99Milliseconds']:.4g} ms "
            f"(KV transfer {transfer.get('p99Milliseconds') or 0:.3g} ms) and TPOT p99 "
            f"{plan['tpotP99Milliseconds']:.3g} ms",
        )
    reason = (
        "TooFewReplicas" if plan.get("replicasNeeded") is not None else "LatencyTargetUnreachable"
    )
    return "False", reason, str(plan.get("reason") or "the engine predicts the target is not met")


def _readiness(step: _Step, sides: list[_Side], views: dict[str, DeploymentView | None]) -> None:
    parts = []
    missing = [s.name for s in sides if views[s.name] is None]
    serving = all((v := views[s.name]) is not None and v.serves(s.desired) for s in sides)
    for s in sides:
        view = views[s.name]
        got = view.ready_replicas if view else 0
        parts.append(f"{s.name} {min(got, s.desired)}/{s.desired}")
    counts = ", ".join(parts) + " replicas ready"
    if missing:
        value, reason, message = "False", "Creating", f"creating the {' and '.join(missing)} side"
    elif serving:
        value, reason, message = "True", "ReplicasReady", counts
    else:
        value, reason, message = "False", "ReplicasNotReady", counts
    before = step.conditions.set(life.READY, value, reason, message)  # type: ignore[arg-type]
    if value == "True" and not before.was("True"):
        step.event("Normal", "Ready", counts)
    status = step.status
    if step.capacity[0] != "True":
        status.phase = InferenceEndpointPhase.DEGRADED.value
    elif value == "True":
        status.phase = InferenceEndpointPhase.READY.value
    elif missing:
        status.phase = InferenceEndpointPhase.PENDING.value
    else:
        status.phase = InferenceEndpointPhase.PROGRESSING.value
    step.conditions.stamp()
