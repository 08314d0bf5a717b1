"""spec.autoscaling.source ServerMetrics: the operator scales an InferenceEndpoint (each side of
a disaggregated one) on its model servers' own metrics. Every SCRAPE_INTERVAL_SECONDS it lists
the endpoint's ready serving pods, scrapes their Prometheus metrics (controllers.serving_metrics),
and asks the policy (planning.signal_scaling.decide) for a count, starting from the engine's
sustainable rate per replica in the endpoint's plan. The counts it keeps are what the endpoint's
reconcile runs (inference_lifecycle reads them as ``scaled``); a changed count queues one.

The memory (last scale event, the learnt correction) lives in the operator: a restarted
operator starts again from the plan's count and a correction of 1, the conservative side.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ringmaster.api import InferenceEndpointSpec, InferenceEndpointStatus
from ringmaster.controllers.autoscaling_source import UNIFIED, SideScaling, uses_server_metrics
from ringmaster.controllers.serving_metrics import ServerMetricsScraper, Target
from ringmaster.manifests.disaggregated import side_labels
from ringmaster.manifests.inference import LWS_WORKER_INDEX_LABEL, selector_labels
from ringmaster.planning.disaggregation import SIDES, runs_disaggregated
from ringmaster.planning.signal_scaling import (
    EngineCapacity,
    ScalingDecision,
    ScalingMemory,
    ScalingPolicy,
    Side,
    SloTargets,
    decide,
)

logger = logging.getLogger(__name__)
SCRAPE_INTERVAL_SECONDS = 15.0

ListPods = Callable[[str, str], Awaitable[list[dict[str, Any]]]]


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return bool(status.get("podIP")) and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def targets_of(pods: list[dict[str, Any]], port: int) -> list[Target]:
    """(pod, ip:port) of the ready, not terminating pods that serve requests."""
    return [
        (p["metadata"]["name"], f"{p['status']['podIP']}:{port}")
        for p in pods
        if _ready(p) and not p["metadata"].get("deletionTimestamp")
    ]


def engine_capacity(side_plan: Mapping[str, Any], output_tokens: float) -> EngineCapacity:
    """The plan's sustainable rate per replica, and its running sequences at that rate by
    Little's law (the time a request stays: TTFT + its tokens at TPOT, both p99, so the figure
    errs high and the in-flight term scales up late rather than early), capped by the batch."""
    rate = float(side_plan.get("perReplicaRequestsPerSecond") or 0.0)
    ttft = float(side_plan.get("ttftP99Milliseconds") or 0.0) / 1e3
    tpot = float(side_plan.get("tpotP99Milliseconds") or 0.0) / 1e3
    stay = ttft + max(output_tokens - 1.0, 0.0) * tpot
    concurrency = rate * stay
    batch = side_plan.get("maxNumSeqs")
    if batch:
        concurrency = min(concurrency, float(batch))
    return EngineCapacity(rate, concurrency)


class ServerMetricsAutoscaler:
    def __init__(
        self,
        list_pods: ListPods,
        scraper: ServerMetricsScraper | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.list_pods = list_pods
        self.scraper = scraper or ServerMetricsScraper()
        self.clock = clock
        self.memory: dict[tuple[str, str, str], ScalingMemory] = {}
        self.counts: dict[tuple[str, str], dict[str, SideScaling]] = {}

    def scaled(self, namespace: str, name: str) -> Mapping[str, SideScaling]:
        return self.counts.get((namespace, name), {})

    def forget(self, namespace: str, name: str) -> None:
        self.counts.pop((namespace, name), None)
        for side in (UNIFIED, *SIDES):
            self.memory.pop((namespace, name, side), None)
            self.scraper.forget((namespace, name, side))

    async def tick(
        self,
        namespace: str,
        name: str,
        spec: InferenceEndpointSpec,
        status: InferenceEndpointStatus,
        plan: Mapping[str, Any],
    ) -> bool:
        """Scrape, decide; True when a count changed (the caller queues a reconcile)."""
        if not uses_server_metrics(spec):
            changed = (namespace, name) in self.counts
            self.forget(namespace, name)
            return changed
        now = self.clock()
        settings = spec.autoscaling
        policy = ScalingPolicy(
            cooldown_seconds=float(settings.cool_down_seconds),
            stabilization_seconds=float(settings.scale_down_stabilization_seconds),
        )
        slo = spec.slo
        targets = SloTargets(
            (slo.time_to_first_token_p99_milliseconds or 0) / 1e3 or None,
            (slo.time_per_output_token_p99_milliseconds or 0) / 1e3 or None,
        )
        output_tokens = float(spec.tokens.output_mean) if spec.tokens else 1.0
        split = runs_disaggregated(dict(plan))
        sides = list(SIDES) if split else [UNIFIED]
        before = dict(self.counts.get((namespace, name), {}))
        after: dict[str, SideScaling] = {}
        for side in sides:
            side_plan = plan["disaggregation"][side] if split else plan
            labels = side_labels(name, side) if split else selector_labels(name)
            if int(side_plan.get("hostsPerReplica") or 1) > 1:
                labels = {**labels, LWS_WORKER_INDEX_LABEL: "0"}  # a group's leader serves
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            pods = await self.list_pods(namespace, selector)
            observed = await self.scraper.observe(
                (namespace, name, side),
                targets_of(pods, spec.port),
                settings.metrics_path,
                now,
            )
            previous = before.get(side)
            current = previous.replicas if previous else _current(status, side, plan)
            key = (namespace, name, side)
            decision: ScalingDecision = decide(
                current=current,
                min_replicas=spec.min_replicas,
                max_replicas=spec.max_replicas,
                engine=engine_capacity(side_plan, 1.0 if side == "prefill" else output_tokens),
                targets=targets.for_side(Side(side)),
                windows=list(observed.windows.values()),
                memory=self.memory.get(key, ScalingMemory()),
                now=now,
                policy=policy,
            )
            self.memory[key] = decision.memory
            errors = observed.describe() if observed.errors else ""
            after[side] = SideScaling(
                decision.replicas, str(decision.reason), decision.message, errors
            )
        self.counts[(namespace, name)] = after
        # Changed against what runs: the last count decided, else the endpoint's own.
        running = {
            side: before[side].replicas if side in before else _current(status, side, plan)
            for side in after
        }
        return any(after[side].replicas != running[side] for side in after)

    async def close(self) -> None:
        await self.scraper.close()


def _current(status: InferenceEndpointStatus, side: str, plan: Mapping[str, Any]) -> int:
    """The count running now: the endpoint's status, else the plan's."""
    if side == UNIFIED:
        return int(status.replicas if status.replicas is not None else plan.get("replicas") or 1)
    sides = status.sides
    running = getattr(sides, side, None) if sides is not None else None
    if running is not None and running.replicas is not None:
        return int(running.replicas)
    return int(plan["disaggregation"][side]["replicas"])
