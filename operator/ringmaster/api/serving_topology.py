"""How an LLM endpoint's replicas are arranged and reached: prefill / decode disaggregation
(``spec.disaggregation``) and inference-aware routing through the Gateway API Inference
Extension (``spec.routing``). The InferenceEndpoint spec holds both; the rules that need the
rest of the spec (an architecture, the batching, the replica count) sit on the spec."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ringmaster.api.base import Int, Rule, SpecModel, StatusModel

DisaggregationMode = Literal["Aggregated", "Auto", "Disaggregated"]
TransferBackend = Literal["NIXL", "Mooncake"]
InferencePoolMode = Literal["Auto", "Disabled"]
FailureMode = Literal["FailOpen", "FailClose"]
# A replica of one side: the same bounds as spec.accelerator.perReplica's.
MAX_SIDE_ACCELERATORS = 512
# The endpoint picker's gRPC port in the Gateway API Inference Extension's own deployment
# (config/charts/inferencepool values: inferenceExtension.extProcPort).
DEFAULT_PICKER_PORT = 9002
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class ServingSide(SpecModel):
    """One side of a disaggregated endpoint (prefill or decode). A field left out is the
    engine's choice: the replica's accelerators among a few sizes (the endpoint's perReplica,
    the smallest that holds the weights, twice that, a whole host), the tensor degree (the
    whole replica), the count (enough for the target at the SLO)."""

    per_replica: Int | None = Field(default=None, ge=1, le=MAX_SIDE_ACCELERATORS)
    """Accelerators of one replica of this side (of spec.accelerator.type)."""
    tensor: Int | None = Field(default=None, ge=1, le=MAX_SIDE_ACCELERATORS)
    """Tensor-parallel degree; must divide perReplica (the rest are pipeline stages)."""
    expert: Int | None = Field(default=None, ge=1, le=MAX_SIDE_ACCELERATORS)
    """Expert-parallel degree of a mixture of experts: 1 or the side's tensor degree."""
    replicas: Int | None = Field(default=None, ge=0, le=1000)
    """Replicas of this side; left out, the engine sizes them for the target at the SLO."""

    cel_rules = (
        Rule(
            cel="!has(self.tensor) || !has(self.perReplica) || self.perReplica % self.tensor == 0",
            message="tensor must divide perReplica",
            field_path=".tensor",
            check=lambda s: (
                s.tensor is None or s.per_replica is None or s.per_replica % s.tensor == 0
            ),
        ),
        Rule(
            cel="!has(self.expert) || self.expert == 1 || (has(self.tensor) ? self.expert == "
            "self.tensor : (has(self.perReplica) && self.expert == self.perReplica))",
            message="expert must be 1 or the side's tensor degree (tensor, else perReplica): "
            "expert parallelism spans the tensor-parallel ranks",
            field_path=".expert",
            check=lambda s: (
                s.expert is None
                or s.expert == 1
                or (s.expert == s.tensor if s.tensor is not None else s.expert == s.per_replica)
            ),
        ),
    )


class Disaggregation(SpecModel):
    """Prefill and decode on separate replicas, the KV cache handed over the fabric (vLLM's
    NixlConnector / MooncakeConnector, SGLang's --disaggregation-mode; llm-d, Dynamo).
    ``Aggregated``: one set of replicas does both (the default). ``Disaggregated``: two sides,
    each sized by the engine for the SLOs (TTFT: prefill at its load + the KV transfer +
    decode's first step; TPOT: decode at its batch). ``Auto``: the cheaper of the two plans
    that meets the SLOs; status.plan says which and why."""

    mode: DisaggregationMode = "Aggregated"
    transfer_backend: TransferBackend = "NIXL"
    """The KV connector: vLLM's NixlConnector or MooncakeConnector, SGLang's
    --disaggregation-transfer-backend nixl or mooncake. Its bytes are the prompt's KV cache;
    the engine times them on the fabric between the two sides' hosts."""
    prefill: ServingSide | None = None
    decode: ServingSide | None = None

    cel_rules = (
        Rule(
            cel="self.mode != 'Aggregated' || (!has(self.prefill) && !has(self.decode))",
            message="disaggregation.prefill and disaggregation.decode need mode Auto or "
            "Disaggregated (Aggregated serves both phases on one set of replicas)",
            field_path=".mode",
            check=lambda s: s.mode != "Aggregated" or (s.prefill is None and s.decode is None),
        ),
    )


class EndpointPicker(SpecModel):
    """The Gateway API Inference Extension's endpoint picker (EPP) that routes to the pool: a
    Service of the endpoint's namespace (an InferencePool's endpointPickerRef is a local
    reference)."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    """The picker's Service, in the endpoint's namespace."""
    namespace: str | None = Field(default=None, max_length=63)
    """Not allowed: the InferencePool can only name a picker of its own namespace. Present so
    that a reference to another namespace is refused by name instead of dropped."""
    port: Int = Field(default=DEFAULT_PICKER_PORT, ge=1, le=65535)
    failure_mode: FailureMode = "FailClose"
    """What the gateway does when the picker does not answer: FailClose refuses the request,
    FailOpen sends it to any pod of the pool."""

    cel_rules = (
        Rule(
            cel="!has(self.__namespace__)",
            message="the endpoint picker must be in the "
            "endpoint's own namespace (an InferencePool's endpointPickerRef is a local "
            "reference); leave namespace out",
            field_path=".namespace",
            check=lambda s: s.namespace is None,
        ),
    )


class Routing(SpecModel):
    """Inference-aware routing: an InferencePool (inference.networking.k8s.io/v1) that selects
    the endpoint's model-server pods and names its endpoint picker, so that an inference
    gateway (Envoy Gateway, kgateway, Istio, GKE, NGINX; llm-d's scheduler) routes by KV-cache
    and load. With disaggregation, one pool selects both sides and one per side selects its
    role's pods."""

    inference_pool: InferencePoolMode = "Auto"
    """Auto: an InferencePool when its CRD is served (a condition says when it is not, and the
    plain Service stays); Disabled: none."""
    endpoint_picker: EndpointPicker | None = None
    """The picker the pool names. Left out, no pool is created (the v1 InferencePool requires
    one) and a condition says so."""
    priority: Int | None = Field(default=None, ge=-1000, le=1000)
    """The InferenceObjective's priority for this endpoint's requests (higher is served first
    under load), where the installed Inference Extension has InferenceObjective."""


class ServingSideStatus(StatusModel):
    """One side of a disaggregated plan: its replicas and the settings its servers get."""

    replicas: int | None = None
    replicas_needed: int | None = None
    feasible: bool | None = None
    reason: Annotated[str, Field(max_length=1024)] | None = None
    per_replica: int | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    expert_parallel: int | None = None
    hosts_per_replica: int | None = None
    machine_type: str | None = None
    per_replica_requests_per_second: float | None = None
    ttft_p99_milliseconds: float | None = None
    """This side's share of TTFT: the prompt's queueing and compute (prefill), or the wait for
    a place in the batch and the first step (decode)."""
    tpot_p99_milliseconds: float | None = None
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    batching: str | None = None
    engine: str | None = None
    binding: str | None = None
    layout: Annotated[str, Field(max_length=1024)] | None = None
    evidence: Annotated[str, Field(max_length=1024)] | None = None
    """What this side's step rests on: its engine's fitted, measured and carried constants on
    its accelerator (the plan says where a number is extrapolated)."""


class KvTransferStatus(StatusModel):
    """The prompt's KV cache handed from prefill to decode."""

    bytes_per_request: float | None = None
    bytes_p99: float | None = None
    mean_milliseconds: float | None = None
    p99_milliseconds: float | None = None
    share_of_ttft: float | None = None
    """The p99 transfer over the endpoint's predicted TTFT p99."""
    link: Annotated[str, Field(max_length=256)] | None = None
    link_bytes_per_second: float | None = None
    evidence: Annotated[str, Field(max_length=1024)] | None = None


class AggregatedAlternative(StatusModel):
    """The aggregated plan a disaggregated one was weighed against (or the one that runs)."""

    feasible: bool | None = None
    reason: Annotated[str, Field(max_length=1024)] | None = None
    replicas: int | None = None
    per_replica: int | None = None
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")
    ttft_p99_milliseconds: float | None = None
    tpot_p99_milliseconds: float | None = None


class DisaggregationPlan(StatusModel):
    """status.plan.disaggregation: aggregated against disaggregated, and which runs."""

    mode: str | None = None
    transfer_backend: str | None = None
    chosen: str | None = None
    """``Aggregated`` or ``Disaggregated``."""
    why: Annotated[str, Field(max_length=1024)] | None = None
    aggregated: AggregatedAlternative | None = None
    feasible: bool | None = None
    reason: Annotated[str, Field(max_length=2048)] | None = None
    ttft_p99_milliseconds: float | None = None
    tpot_p99_milliseconds: float | None = None
    cost_per_hour_usd: float | None = Field(default=None, alias="costPerHourUSD")
    prefill_ttft_share: float | None = None
    """The share of the TTFT target (less the p99 transfer) the prefill side was sized for."""
    kv_transfer: KvTransferStatus | None = None
    prefill: ServingSideStatus | None = None
    decode: ServingSideStatus | None = None


class SideReplicas(StatusModel):
    replicas: int | None = None
    """Desired replicas of this side."""
    ready_replicas: int | None = None
    pool: str | None = None


class DisaggregatedReplicas(StatusModel):
    """status.sides: what runs on each side of a disaggregated endpoint."""

    prefill: SideReplicas | None = None
    decode: SideReplicas | None = None


__all__ = [
    "DEFAULT_PICKER_PORT",
    "Disaggregation",
    "DisaggregationMode",
    "EndpointPicker",
    "Routing",
    "ServingSide",
]
