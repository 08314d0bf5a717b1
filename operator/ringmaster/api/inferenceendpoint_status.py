"""InferenceEndpoint's status: its phase, the plan the operator decided, and conditions."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from ringmaster.api.base import StatusModel
from ringmaster.api.common import Condition, conditions_field
from ringmaster.api.serving_topology import DisaggregatedReplicas, DisaggregationPlan


class InferenceEndpointPhase(StrEnum):
    """Values of ``status.phase``."""

    PENDING = "Pending"  # accepted, not planned or placed yet
    PROGRESSING = "Progressing"  # replicas being created or replaced
    READY = "Ready"  # all desired replicas ready
    DEGRADED = "Degraded"  # fewer ready replicas than desired, or the SLO cannot be met
    FAILED = "Failed"


class InferencePlan(StatusModel):
    """The engine's sizing. Every field is declared: what is not here is not in status."""

    batch_size: int | None = None
    """Batch size chosen (at most maxBatchSize)."""
    warnings: list[Annotated[str, Field(max_length=1024)]] | None = Field(
        default=None, max_length=8
    )
    """Valid but implausible input, each naming its field (a step longer than a day, memory
    beyond the whole gang, a parameter count far beyond any published model); also the
    ``Plausible`` condition and one Warning Event each."""
    per_replica_requests_per_second: float | None = None
    """Predicted throughput of one replica within the latency target."""
    capacity_requests_per_second: float | None = None
    """Predicted throughput of all desired replicas."""
    latency_p99_milliseconds: float | None = None
    """Predicted p99 latency at the target rate."""
    replicas: int | None = None
    """Replicas the engine asks for (before minReplicas/maxReplicas and spec.replicas)."""
    bottleneck: str | None = None
    """``compute`` or ``memory`` (roofline), or ``latency``."""
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")
    target_requests_per_second: float | None = None
    """The target the plan was made for (spec.slo.targetRequestsPerSecond)."""
    saturation_requests_per_second: float | None = None
    """Predicted throughput of one replica at the chosen batch size with no latency bound."""
    machine_type: str | None = None
    precision: str | None = None
    output_tokens_per_second: float | None = None
    """LLM endpoints: predicted output tokens per second of all desired replicas."""
    ttft_p99_milliseconds: float | None = None
    """LLM endpoints: predicted p99 time to first token at the target rate."""
    tpot_p99_milliseconds: float | None = None
    """LLM endpoints: predicted p99 time per output token at the target rate."""
    output_tokens_per_second_per_replica: float | None = None
    """LLM endpoints: predicted output tokens per second of one replica."""
    binding: str | None = None
    """LLM endpoints: what bounds the batch (the KV cache, TTFT or TPOT target)."""
    max_concurrent_sequences: int | None = None
    """LLM endpoints: sequences the KV cache holds at once per replica."""
    kv_cache_bytes_per_token: float | None = None
    weights_bytes_per_accelerator: float | None = None
    kv_cache_precision: str | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    """LLM endpoints: pipeline stages of each replica."""
    expert_parallel: int | None = None
    """LLM endpoints: expert-parallel degree (1 for a dense model)."""
    attention_data_parallel: int | None = None
    """LLM endpoints: attention data-parallel groups of a replica (1 without)."""
    redundant_experts: int | None = None
    expert_dispatch: str | None = None
    """How tokens reach their experts (``AllToAll``, ``DeepEP``); absent for a dense model."""
    two_batch_overlap: bool | None = None
    hosts_per_replica: int | None = None
    """Hosts each replica spans (a LeaderWorkerSet group's size when more than one)."""
    layout: Annotated[str, Field(max_length=1024)] | None = None
    """LLM endpoints: the replica's layout across its accelerators and hosts, and why the engine
    chose it."""
    max_num_seqs: int | None = None
    """LLM endpoints: the server's max_num_seqs (vLLM's name)."""
    max_batch_size: int | None = None
    """LLM endpoints: the cap on the running batch the plan honoured (spec.maxBatchSize);
    absent: none, the engine picked maxNumSeqs within the KV cache."""
    batching: str | None = None
    """LLM endpoints: ``Continuous`` or ``Static`` (spec.batching)."""
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    """LLM endpoints: the server's token budget per step (vLLM's max_num_batched_tokens)."""
    engine: str | None = None
    """LLM endpoints: the serving engine the plan is made for (``spec.engine``, else inferred)."""
    evidence: Annotated[str, Field(max_length=1024)] | None = None
    """LLM endpoints: how the engine was chosen and what its step constants rest on (fitted on
    its own published runs, or ``extrapolated`` from another engine's)."""
    offline_output_tokens_per_second_per_replica: float | None = None
    """LLM endpoints: the most output tokens per second one replica serves with no latency
    target (every request queued at once), whether or not the SLO can be met."""
    offline_requests_per_second_per_replica: float | None = None
    ttft_slo_requests_per_second_per_replica: float | None = None
    """LLM endpoints: the per-replica rate above which the predicted TTFT p99 misses its target
    (absent: it holds up to the offline maximum)."""
    tpot_slo_requests_per_second_per_replica: float | None = None
    """LLM endpoints: the per-replica rate above which the predicted TPOT p99 misses its target
    (absent: it holds up to the offline maximum)."""
    disaggregation: DisaggregationPlan | None = None
    """spec.disaggregation Auto or Disaggregated: aggregated against prefill / decode sides, and
    which runs (the figures above are then the endpoint's as it runs)."""


class InferenceEndpointStatus(StatusModel):
    """What the operator observed and decided. Written only by the operator."""

    observed_generation: int | None = None
    phase: str | None = None
    """One of :class:`InferenceEndpointPhase`."""
    conditions: list[Condition] = conditions_field()
    plan: InferencePlan | None = None
    replicas: int | None = None
    """Desired replicas (the scale subresource's status.replicas)."""
    ready_replicas: int | None = None
    selector: str | None = None
    """Label selector of the replicas' pods, as a string (for the scale subresource and HPA)."""
    url: str | None = None
    """In-cluster URL of the endpoint's Service."""
    pool: str | None = None
    """The node pool the replicas run on."""
    sides: DisaggregatedReplicas | None = None
    """A disaggregated endpoint: each side's replicas (status.replicas counts both)."""
    inference_pools: list[Annotated[str, Field(max_length=253)]] | None = None
    """The InferencePools the operator keeps for the endpoint (spec.routing)."""
