"""spec.autoscaling.source ServerMetrics, from scrape to applied count: the autoscaler reads a
real HTTP server's vLLM metrics through the endpoint's ready pods and decides; the endpoint's
decision runs that count, says why in the Autoscaling condition and a Scaled Event, and makes
no HPA. Per side when disaggregated."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import InferenceEndpointSpec, InferenceEndpointStatus, find_condition
from ringmaster.api.manifest import parse_manifest
from ringmaster.controllers.autoscaling_source import UNIFIED, SideScaling
from ringmaster.controllers.inference_lifecycle import EndpointView, reconcile_inference
from ringmaster.controllers.server_metrics_autoscaler import (
    ServerMetricsAutoscaler,
    engine_capacity,
    targets_of,
)
from ringmaster.planning import plan_inference
from tests.unit.test_disaggregated_endpoints import pools
from tests.unit.test_serving_metrics_scraper import Pod, serving, vllm_later
from tests.unit.test_serving_signals import VLLM_DP2

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
SERVER_METRICS = {"enabled": True, "source": "ServerMetrics", "coolDownSeconds": 60}


def spec(example: str, **changes: Any) -> InferenceEndpointSpec:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    doc["spec"].update(copy.deepcopy(changes))
    return parse_manifest(doc).spec  # type: ignore[return-value]


def pod(name: str, address: str, ready: bool = True) -> dict[str, Any]:
    ip = address.split(":")[0]
    return {
        "metadata": {"name": name},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_only_ready_pods_with_an_address_are_scraped() -> None:
    pods = [pod("a", "10.0.0.1:0"), pod("b", "10.0.0.2:0", ready=False)]
    pods.append({"metadata": {"name": "c"}, "status": {"conditions": []}})
    assert targets_of(pods, 8000) == [("a", "10.0.0.1:8000")]


def test_engine_capacity_is_littles_law_capped_by_the_batch() -> None:
    side = {
        "perReplicaRequestsPerSecond": 2.0,
        "ttftP99Milliseconds": 500.0,
        "tpotP99Milliseconds": 20.0,
        "maxNumSeqs": 64,
    }
    # 2 req/s x (0.5 s + 199 x 0.02 s) = 8.96 sequences in flight.
    assert engine_capacity(side, 200.0).concurrency == pytest.approx(8.96)
    assert engine_capacity({**side, "maxNumSeqs": 4}, 200.0).concurrency == 4.0
    assert engine_capacity(side, 200.0).requests_per_second == 2.0


def test_a_load_step_on_the_servers_scales_the_endpoint_up() -> None:
    """One real server's vLLM metrics, 80 requests finished in 10 s (8 req/s) where the plan
    says a replica sustains 2 req/s: the autoscaler asks for at least 4 replicas at once."""
    server = Pod(VLLM_DP2)
    clock = [100.0]

    async def scenario() -> None:
        async with serving(server):
            s = spec(
                "inferenceendpoint-llama3-8b-fp8-h100.yaml",
                autoscaling=SERVER_METRICS,
                minReplicas=1,
                maxReplicas=10,
                port=int(server.address.split(":")[1]),
            )
            planned = plan_inference(s).to_json()
            plan = planned | {"perReplicaRequestsPerSecond": 2.0, "replicas": 1}

            async def list_pods(namespace: str, selector: str) -> list[dict[str, Any]]:
                assert namespace == "ml" and "ringmaster.dev/inferenceendpoint=llama" in selector
                return [pod("llama-0", server.address)]

            scaler = ServerMetricsAutoscaler(list_pods, clock=lambda: clock[0])
            try:
                status = InferenceEndpointStatus(replicas=1)
                # First look: a sample, no window yet, so nothing to act on.
                assert not await scaler.tick("ml", "llama", s, status, plan)
                assert scaler.scaled("ml", "llama")[UNIFIED].reason == "NoSignal"
                server.body = vllm_later()
                clock[0] += 10.0
                assert await scaler.tick("ml", "llama", s, status, plan)
                decided = scaler.scaled("ml", "llama")[UNIFIED]
                # 8 req/s over 2 per replica needs 4; the 26 requests in flight (the fixture's
                # running + waiting) over the plan's concurrency per replica may need more.
                per_replica = engine_capacity(plan, float(s.tokens.output_mean)).concurrency
                in_flight = math.ceil(26 / per_replica)
                assert decided.replicas == max(4, in_flight)
                assert decided.reason == ("ScaleUpQueue" if in_flight > 4 else "ScaleUpRate")
                # Off again: the autoscaler lets go, and says a count changed.
                off = s.autoscaling.model_copy(update={"enabled": False})
                manual = s.model_copy(update={"autoscaling": off})
                assert await scaler.tick("ml", "llama", manual, status, plan)
                assert scaler.scaled("ml", "llama") == {}
            finally:
                await scaler.close()

    asyncio.run(scenario())


def decide(s: InferenceEndpointSpec, scaled: dict[str, SideScaling], status=None):  # type: ignore[no-untyped-def]
    return reconcile_inference(
        EndpointView("llama", "ml", 1, s, status or InferenceEndpointStatus(replicas=3)),
        None,
        False,
        pools(),
        {},
        lambda x: plan_inference(x).to_json(),
        NOW,
        scaled=scaled,
    )


def test_the_endpoint_runs_the_autoscalers_count_and_says_why() -> None:
    s = spec("inferenceendpoint-llama3-8b-fp8-h100.yaml", autoscaling=SERVER_METRICS)
    scaled = {UNIFIED: SideScaling(5, "ScaleUpRate", "8 req/s observed over 2 req/s per replica")}
    decision = decide(s, scaled)
    (deployment,) = [o for o in decision.apply if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 5 and decision.status.replicas == 5
    assert not [o for o in decision.apply if o["kind"] == "HorizontalPodAutoscaler"]
    condition = find_condition(decision.status.conditions, "Autoscaling")
    assert condition is not None and condition.status == "True"
    assert condition.reason == "ScaleUpRate" and "8 req/s" in condition.message
    (event,) = [e for e in decision.events if e.reason == "Scaled"]
    assert "from 3 to 5" in event.message and "ScaleUpRate" in event.message
    # Nothing read yet: the engine's count, and the condition says it waits.
    waiting = decide(s, {})
    condition = find_condition(waiting.status.conditions, "Autoscaling")
    assert condition is not None and condition.status == "Unknown"
    # No server answers: False, NoSignal.
    silent = decide(s, {UNIFIED: SideScaling(3, "NoSignal", "no replica answered")})
    condition = find_condition(silent.status.conditions, "Autoscaling")
    assert condition is not None and (condition.status, condition.reason) == ("False", "NoSignal")


def test_each_side_of_a_disaggregated_endpoint_runs_its_own_count() -> None:
    s = spec(
        "inferenceendpoint-llama3-70b-disaggregated-h100.yaml",
        autoscaling=SERVER_METRICS,
    )
    scaled = {
        "prefill": SideScaling(4, "ScaleUpQueue", "12 waiting"),
        "decode": SideScaling(1, "ScaleDownIdle", "0.3 of capacity for 180 s"),
    }
    decision = decide(s, scaled, InferenceEndpointStatus(replicas=5))
    replicas = {
        o["metadata"]["name"]: o["spec"]["replicas"]
        for o in decision.apply
        if o["kind"] == "Deployment"
    }
    assert replicas == {"llama-prefill": 4, "llama-decode": 1}
    assert decision.status.replicas == 5
    condition = find_condition(decision.status.conditions, "Autoscaling")
    assert condition is not None and "prefill: 4 replicas, ScaleUpQueue" in condition.message
