"""InferenceEndpoint: model-serving replicas on an accelerator pool, sized from a throughput and
latency target."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ringmaster.api.accelerators import AcceleratorType
from ringmaster.api.architecture import TransformerArchitecture
from ringmaster.api.base import Int, Rule, SpecModel
from ringmaster.api.common import MachineType, PodTemplate
from ringmaster.api.inferenceendpoint_status import (
    InferenceEndpointPhase,
    InferenceEndpointStatus,
)
from ringmaster.api.parallelism import ExpertDispatch
from ringmaster.api.quantity import Count
from ringmaster.api.resource import AGE, PrinterColumn, Resource, condition_reason
from ringmaster.api.serving_topology import (
    Disaggregation,
    Routing,
)

Precision = Literal["FP32", "FP16", "INT8", "BF16", "FP8", "INT4", "FP4"]
KvCachePrecision = Literal["BF16", "FP16", "FP8"]
Batching = Literal["Continuous", "Static"]
ServingEngineName = Literal["vLLM", "SGLang", "TensorRT-LLM"]
# The precisions of each engine: a model without an architecture is served as one block of
# FLOPs (FP32/FP16/INT8); an LLM (with an architecture) in BF16/FP16, FP8, weight-only INT4 or
# FP4 (NVFP4 on Blackwell; whether the accelerator has FP4 units is the catalog's word, so the
# operator judges it: a condition, not a CEL rule).
BLOCK_PRECISIONS = ("FP32", "FP16", "INT8")
LLM_PRECISIONS = ("BF16", "FP16", "FP8", "INT4", "FP4")
DEFAULT_MAX_UTILIZATION_PERCENT = 85
# The dynamic batcher's largest batch where spec.maxBatchSize is left out (endpoints without an
# architecture; an LLM endpoint's batch is then the engine's choice within its KV cache).
DEFAULT_MAX_BATCH_SIZE = 32
MAX_BATCH_SIZE = 4096


MAX_ACCELERATORS_PER_REPLICA = 512
MAX_HOSTS_PER_REPLICA = 64


class InferenceAccelerator(SpecModel):
    """The accelerators of each serving replica: one host, or a group of hosts (a replica that
    spans hosts runs as one LeaderWorkerSet group: docs/serving.md)."""

    type: AcceleratorType
    """Accelerator type as GKE labels nodes: any name of that form; the operator's catalog
    (docs/catalog.md) must define it, or the endpoint waits with reason ``UnknownAccelerator``."""
    per_replica: Int = Field(default=1, ge=1, le=MAX_ACCELERATORS_PER_REPLICA)
    """Accelerators per replica: a host shape of the type in the catalog (one host per
    replica), or a multiple of one (``16`` on 8-GPU hosts: two hosts per replica). A count the
    catalog cannot build waits with reason ``UnsupportedHostShape`` and the shapes it has."""
    hosts_per_replica: Int | None = Field(default=None, ge=1, le=MAX_HOSTS_PER_REPLICA)
    """Hosts each replica spans; perReplica / hostsPerReplica accelerators on each, a host shape
    of the catalog. Default: one host when perReplica is a host shape, else the fewest hosts of
    the largest shape that divides perReplica."""

    cel_rules = (
        Rule(
            cel="!has(self.hostsPerReplica) || self.perReplica % self.hostsPerReplica == 0",
            message="hostsPerReplica must divide perReplica (the same accelerators on each host)",
            field_path=".hostsPerReplica",
            check=lambda s: s.hosts_per_replica is None or s.per_replica % s.hosts_per_replica == 0,
        ),
    )


class ServingParallelism(SpecModel):
    """How a replica's accelerators split the model (LLM endpoints). A degree left out is
    chosen by the engine (``Auto``): tensor parallelism over one host, and across hosts either
    tensor parallelism inside each host with pipeline stages across them, or tensor parallelism
    over every accelerator on the fabric, whichever serves the target with fewer replicas
    (``status.plan.layout`` names the choice and why)."""

    tensor: Int | None = Field(default=None, ge=1, le=MAX_ACCELERATORS_PER_REPLICA)
    """Tensor-parallel degree (vLLM ``--tensor-parallel-size``, SGLang ``--tp-size``); must
    divide the attention heads; tensor x pipeline = perReplica."""
    pipeline: Int | None = Field(default=None, ge=1, le=MAX_ACCELERATORS_PER_REPLICA)
    """Pipeline stages (vLLM ``--pipeline-parallel-size``, SGLang ``--pp-size``); at most the
    layers; tensor x pipeline = perReplica."""
    expert: Int | None = Field(default=None, ge=1, le=MAX_ACCELERATORS_PER_REPLICA)
    """Expert-parallel degree of a mixture-of-experts model's expert layers (vLLM
    ``--enable-expert-parallel``, SGLang ``--ep-size``): the experts spread over the replica's
    tensor-parallel ranks, so it is 1 or the tensor-parallel degree (tensor, else perReplica /
    pipeline, else perReplica: with both left out, the engine then keeps tensor parallelism over
    the whole replica), and must divide architecture.experts (a dense model takes 1). Passed to
    the server as RINGMASTER_EXPERT_PARALLEL. With attentionData above 1 it is perReplica (wide
    EP: the experts over every accelerator of the replica, across its hosts)."""
    attention_data: Int | None = Field(default=None, ge=1, le=MAX_ACCELERATORS_PER_REPLICA)
    """Attention data parallelism of a mixture of experts (SGLang ``--enable-dp-attention
    --dp-size``, vLLM ``--data-parallel-size`` with ``--enable-expert-parallel``, TensorRT-LLM
    ``enable_attention_dp``): the replica's accelerators form attentionData groups of
    ``tensor`` that each run attention and the dense layers on their own sequences, with their
    own KV cache (a latent (MLA) cache split by sequence, not copied on every rank), while the
    routed experts spread over every accelerator of the replica (expert = perReplica), across
    its hosts. tensor x attentionData = perReplica, no pipeline. Passed to the server as
    RINGMASTER_ATTENTION_DATA_PARALLEL."""
    redundant_experts: Int | None = Field(default=None, ge=0, le=1024)
    """Extra copies of the busiest routed experts (SGLang ``--ep-num-redundant-experts``, vLLM
    ``--eplb-config.num_redundant_experts``; DeepSeek's EPLB): experts + redundantExperts slots
    are spread evenly over the expert-parallel ranks, which they must divide (DeepSeek-R1's
    256 + 32 over 72 GPUs), and each copy holds memory. Passed as
    RINGMASTER_REDUNDANT_EXPERTS."""
    expert_dispatch: ExpertDispatch | None = None
    """How tokens reach their experts and come back under expert parallelism: ``AllToAll``
    (the default: NCCL all-to-alls of 16-bit activations, k copies of each token) or ``DeepEP``
    (SGLang ``--moe-a2a-backend deepep``, vLLM ``--all2all-backend deepep_*``): FP8 dispatch
    with a 32-bit scale per 128 channels and a 16-bit combine; a step that carries prompts runs
    its normal kernels (one copy of a token per destination host over the NICs, forwarded over
    NVLink inside it), a decode step its low-latency kernels (a copy per expert's rank). Passed
    as RINGMASTER_EXPERT_DISPATCH."""
    two_batch_overlap: bool | None = None
    """Run each step as two micro-batches, one's expert dispatch and combine beside the other's
    compute (SGLang ``--enable-two-batch-overlap``, vLLM ``--enable-dbo``); needs attentionData
    above 1. The plan charges each layer the larger of its compute and its exchange, and the
    weights streamed twice a step. Passed as RINGMASTER_TWO_BATCH_OVERLAP."""

    cel_rules = (
        Rule(
            cel="!has(self.tensor) || !has(self.pipeline) || self.tensor * self.pipeline <= "
            f"{MAX_ACCELERATORS_PER_REPLICA}",
            message=f"tensor x pipeline must be at most {MAX_ACCELERATORS_PER_REPLICA}",
            field_path=".tensor",
            check=lambda s: (
                s.tensor is None
                or s.pipeline is None
                or s.tensor * s.pipeline <= MAX_ACCELERATORS_PER_REPLICA
            ),
        ),
        Rule(
            cel="!has(self.twoBatchOverlap) || !self.twoBatchOverlap || "
            "(has(self.attentionData) && self.attentionData > 1)",
            message="twoBatchOverlap needs attentionData above 1: the engines overlap the "
            "experts' dispatch under attention data parallelism (SGLang's "
            "--enable-two-batch-overlap, vLLM's --enable-dbo)",
            field_path=".twoBatchOverlap",
            check=lambda s: (
                not s.two_batch_overlap or (s.attention_data is not None and s.attention_data > 1)
            ),
        ),
        Rule(
            cel="!has(self.attentionData) || self.attentionData == 1 || !has(self.pipeline) "
            "|| self.pipeline == 1",
            message="attentionData above 1 takes no pipeline: its groups of tensor accelerators "
            "each hold every layer (SGLang's and vLLM's attention data parallelism)",
            field_path=".attentionData",
            check=lambda s: (
                s.attention_data is None
                or s.attention_data == 1
                or s.pipeline is None
                or s.pipeline == 1
            ),
        ),
    )


class InferenceModel(SpecModel):
    """What is served: the figures the engine's roofline needs, or an LLM's architecture."""

    name: str | None = Field(default=None, max_length=128)
    """Free-form model name, for people (``resnet-50``, ``Llama-3-8B``)."""
    parameters: Count | None = None
    """Number of parameters: an integer or ``"25.6M"``, ``"7B"`` (K, M, G/B, T). Required
    without an architecture; with one, the architecture's count is used."""
    flops_per_request: Count | None = None
    """FLOPs of one request's forward pass (ResNet-50 at 224x224: about ``"8.2G"``). Required
    without an architecture; an LLM's FLOPs follow from the architecture and spec.tokens."""
    architecture: TransformerArchitecture | None = None
    """A decoder-only transformer: the endpoint is then sized as LLM serving (prefill, decode,
    KV cache, continuous batching; spec.tokens and the TTFT / TPOT targets apply).
    ``sequenceLength`` is the longest context served."""

    cel_rules = (
        Rule(
            cel="has(self.architecture) || (has(self.parameters) && has(self.flopsPerRequest))",
            message="parameters and flopsPerRequest are required without an architecture",
            field_path=".parameters",
            check=lambda s: (
                s.architecture is not None
                or (s.parameters is not None and s.flops_per_request is not None)
            ),
        ),
    )


class TokenLengths(SpecModel):
    """Prompt and generation lengths of an LLM endpoint's requests, in tokens."""

    input_mean: Int = Field(ge=1, le=4194304)
    """Mean prompt length."""
    output_mean: Int = Field(ge=1, le=4194304)
    """Mean number of generated tokens."""
    input_p99: Int | None = Field(default=None, ge=1, le=4194304)
    """99th percentile prompt length (TTFT is sized for it). Default: inputMean."""
    output_p99: Int | None = Field(default=None, ge=1, le=4194304)
    """99th percentile generation length (the longest sequence must fit the KV cache).
    Default: outputMean."""

    cel_rules = (
        Rule(
            cel="!has(self.inputP99) || self.inputP99 >= self.inputMean",
            message="inputP99 must be at least inputMean",
            field_path=".inputP99",
            check=lambda s: s.input_p99 is None or s.input_p99 >= s.input_mean,
        ),
        Rule(
            cel="!has(self.outputP99) || self.outputP99 >= self.outputMean",
            message="outputP99 must be at least outputMean",
            field_path=".outputP99",
            check=lambda s: s.output_p99 is None or s.output_p99 >= s.output_mean,
        ),
    )


class Slo(SpecModel):
    """The service level the replica count is sized for."""

    target_requests_per_second: float | None = Field(default=None, gt=0, le=10_000_000)
    """Requests per second the endpoint must sustain (or targetOutputTokensPerSecond)."""
    target_output_tokens_per_second: float | None = Field(default=None, gt=0, le=1e12)
    """LLM endpoints: generated tokens per second the endpoint must sustain, instead of
    targetRequestsPerSecond."""
    latency_p99_milliseconds: float | None = Field(default=None, le=600_000)
    """99th percentile latency target, including batching delay; must be positive. Required
    without an architecture."""
    time_to_first_token_p99_milliseconds: float | None = Field(default=None, gt=0, le=600_000)
    """LLM endpoints: 99th percentile time to first token (queueing + prefill). Required with
    an architecture."""
    time_per_output_token_p99_milliseconds: float | None = Field(default=None, gt=0, le=60_000)
    """LLM endpoints: 99th percentile time per output token (one decode step of the running
    batch). Required with an architecture."""
    max_utilization_percent: Int = Field(default=DEFAULT_MAX_UTILIZATION_PERCENT, ge=1, le=100)
    """The most of a replica's capacity the sizing uses, whatever the latency model allows:
    headroom for the engine's own throughput error (docs/engine.md says why 85)."""

    cel_rules = (
        Rule(
            cel="!has(self.latencyP99Milliseconds) || self.latencyP99Milliseconds > 0.0",
            message="latencyP99Milliseconds must be greater than 0",
            field_path=".latencyP99Milliseconds",
            check=lambda s: s.latency_p99_milliseconds is None or s.latency_p99_milliseconds > 0,
        ),
        Rule(
            cel="has(self.targetRequestsPerSecond) != has(self.targetOutputTokensPerSecond)",
            message="set exactly one of targetRequestsPerSecond and targetOutputTokensPerSecond",
            field_path=".targetRequestsPerSecond",
            check=lambda s: (
                (s.target_requests_per_second is None)
                != (s.target_output_tokens_per_second is None)
            ),
        ),
    )


AutoscalingSource = Literal["HPA", "ServerMetrics"]


class Autoscaling(SpecModel):
    """Optional autoscaling between minReplicas and maxReplicas. ``source: HPA``: a
    HorizontalPodAutoscaler on the endpoint's Deployment (an HPA on the endpoint's own scale
    subresource cannot read a count while spec.replicas is unset). ``source: ServerMetrics``:
    the operator scrapes the model servers' own Prometheus metrics (vLLM's and SGLang's
    requests running and waiting, KV-cache use, TTFT / TPOT) and sets the count toward the
    engine's sustainable rate per replica, corrected by what the replicas report; per side when
    disaggregated."""

    enabled: bool = False
    """True: the replica count follows the load; the engine's count is the starting point."""
    source: AutoscalingSource = "HPA"
    target_cpu_utilization_percentage: Int = Field(
        default=70, ge=1, le=100, alias="targetCPUUtilizationPercentage"
    )
    """HPA only: the CPU utilisation the HPA holds the pods at."""
    cool_down_seconds: Int = Field(default=120, ge=10, le=3600)
    """ServerMetrics only: at most one scale event per this many seconds."""
    scale_down_stabilization_seconds: Int = Field(default=180, ge=0, le=3600)
    """ServerMetrics only: how long the load must stay low before replicas are removed."""
    metrics_path: str = Field(default="/metrics", max_length=256, pattern=r"^/")
    """ServerMetrics only: the path of the servers' Prometheus metrics on spec.port."""


_PAR = "self.parallelism"
_ARCH = "self.model.architecture"
_G = "self.accelerator.perReplica"
_CEL_P99_IN = "(has(self.tokens.inputP99) ? self.tokens.inputP99 : self.tokens.inputMean)"
_CEL_P99_OUT = "(has(self.tokens.outputP99) ? self.tokens.outputP99 : self.tokens.outputMean)"
_CEL_LONGEST = f"{_CEL_P99_IN} + {_CEL_P99_OUT}"


def _longest(tokens: TokenLengths) -> int:
    """The longest request the engine sizes for: p99 prompt + p99 generation (means by
    default)."""
    return (tokens.input_p99 or tokens.input_mean) + (tokens.output_p99 or tokens.output_mean)


# The tensor-parallel degree the spec fixes (twin: tensor_degree): parallelism.tensor, else
# perReplica over the pipeline stages, else (Auto) perReplica itself, which every layout the
# engine picks divides (and the one it keeps when the expert degree is perReplica).
_CEL_TENSOR_DEGREE = (
    f"(has({_PAR}) && has({_PAR}.tensor) ? {_PAR}.tensor : (has({_PAR}) && has({_PAR}.pipeline)"
    f" ? {_G} / {_PAR}.pipeline : (has({_PAR}) && has({_PAR}.attentionData) ? {_G} / "
    f"{_PAR}.attentionData : {_G})))"
)
# Attention data parallelism above 1 (twin: attention_data_degree).
_CEL_WIDE_EP = f"(has({_PAR}) && has({_PAR}.attentionData) && {_PAR}.attentionData > 1)"
_CEL_EXPERT_SLOTS = (
    f"({_ARCH}.experts + (has({_PAR}.redundantExperts) ? {_PAR}.redundantExperts : 0))"
)
# Whether the degrees given divide perReplica: the rules that read the tensor-parallel degree
# judge only then (the rules on tensor and pipeline report the rest).
_CEL_DEGREES_DIVIDE = (
    f"(!has({_PAR}) || ((!has({_PAR}.tensor) || {_G} % {_PAR}.tensor == 0)"
    f" && (!has({_PAR}.pipeline) || {_G} % {_PAR}.pipeline == 0)"
    f" && (!has({_PAR}.attentionData) || {_G} % {_PAR}.attentionData == 0)))"
)


class InferenceEndpointSpec(SpecModel):
    """The desired serving endpoint."""

    accelerator: InferenceAccelerator
    machine_type: MachineType | None = None
    """Machine type of the replicas' hosts (``a3-ultragpu-8g``), as TrainingJob's: the plan
    sizes and prices that machine (its accelerators per host, NIC and price; a replica of
    fewer accelerators than its host pays its share, perReplica / the host's accelerators, and
    replicas pack on the host), and the replicas run only on node pools of that machine type
    (``node.kubernetes.io/instance-type``): another pool of the accelerator waits with reason
    ``NoMatchingPool`` naming both. The catalog (docs/catalog.md) must define it with
    accelerator.type on it, else the plan fails naming the machine types it has. A replica
    across hosts takes whole hosts of it. Omitted: derived from the accelerator and the
    accelerators per host (8 x nvidia-h100-80gb -> a3-highgpu-8g), on any pool of the
    accelerator."""
    model: InferenceModel
    precision: Precision = "FP16"
    """Arithmetic the model is served in; INT8 needs fewer replicas where the accelerator has
    INT8 throughput (T4, A100). LLM endpoints (with an architecture): BF16, FP16, FP8 (FP8
    tensor cores: H100 and later; planned as a checkpoint with calibrated static activation
    scales, as ModelOpt's and llm-compressor's FP8 ones carry: quantising a 16-bit checkpoint
    online computes each scale and costs more a GEMM, TensorRT-LLM's 7-9 us), INT4 (weight-only,
    W4A16 as AWQ and GPTQ) or FP4 (NVFP4 weights and activations with one FP8 scale per 16
    values, on FP4 tensor cores: Blackwell; elsewhere the endpoint is not planned and says
    why)."""
    kv_cache_precision: KvCachePrecision | None = None
    """LLM endpoints: the KV cache's element type. Default: the activations' precision (FP8 for
    FP8, else 16-bit); FP8 halves the cache and doubles the sequences that fit."""
    tokens: TokenLengths | None = None
    """LLM endpoints: prompt and generation lengths. Required with an architecture."""
    parallelism: ServingParallelism | None = None
    """LLM endpoints: the replica's tensor / pipeline / expert degrees; each one left out is
    chosen by the engine."""
    engine: ServingEngineName | None = None
    """LLM endpoints: the serving engine the replicas run (``vLLM``, ``SGLang``,
    ``TensorRT-LLM``): its memory split and scheduler shape the plan, and the server gets it as
    ``RINGMASTER_SERVING_ENGINE`` (README, "Serving engines", maps the settings to each one's
    flags). Left out: the one the container image names, else ``vLLM``; ``status.plan.evidence``
    says which, and what the engine's step constants were fitted on."""
    slo: Slo
    max_batch_size: Int | None = Field(default=None, ge=1, le=MAX_BATCH_SIZE)
    """Largest batch a replica runs. Without an architecture: the dynamic batcher's largest
    batch (default 32); the engine picks the batch size up to this. LLM endpoints: the most
    sequences a replica runs at once, the serving engine's max-num-seqs (vLLM
    ``--max-num-seqs``, SGLang ``--max-running-requests``, TensorRT-LLM ``--max_batch_size``):
    the plan picks max-num-seqs at most this (``status.plan.maxNumSeqs``, passed to the server;
    ``status.plan.maxBatchSize`` shows the cap), and the offline maximum and the load curve are
    those of that batch. Left out: the engine picks max-num-seqs within the KV cache."""
    batching: Batching | None = None
    """LLM endpoints: how a replica forms its batch. ``Continuous`` (the default): in-flight
    batching, sequences join and leave the running batch at every step (vLLM, SGLang,
    TensorRT-LLM's default). ``Static``: a batch of up to maxBatchSize requests (the engine's
    choice within the KV cache when maxBatchSize is left out) is prefilled together and decoded
    until its longest sequence finishes before the next batch starts, every step running the
    whole batch (TensorRT-LLM's static batching, fixed-batch benchmark runs): its throughput is
    batch x output tokens / (the batch's prefill + output x the decode step at that batch), and
    a request waits for the batch in flight (docs/engine.md). The server gets
    ``RINGMASTER_BATCHING=Static`` (nothing for Continuous)."""

    replicas: Int | None = Field(default=None, ge=0, le=1000)
    """Fixed replica count, overriding the engine's sizing (also what ``kubectl scale`` sets).
    Omitted: sized from the SLO."""
    min_replicas: Int = Field(default=1, ge=0, le=1000)
    max_replicas: Int = Field(default=10, ge=1, le=1000)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, json_schema_extra={"default": {}})
    port: Int = Field(default=8080, ge=1, le=65535)
    """Port the server listens on; the endpoint's Service exposes it."""
    disaggregation: Disaggregation = Field(
        default_factory=Disaggregation, json_schema_extra={"default": {}}
    )
    routing: Routing | None = None
    template: PodTemplate

    cel_rules = (
        Rule(
            cel="self.minReplicas <= self.maxReplicas",
            message="minReplicas must not exceed maxReplicas",
            field_path=".minReplicas",
            check=lambda s: s.min_replicas <= s.max_replicas,
        ),
        Rule(
            cel="has(self.model.architecture) == has(self.tokens)",
            message="spec.tokens is required with model.architecture, and only used with one",
            field_path=".tokens",
            check=lambda s: (s.model.architecture is None) == (s.tokens is None),
        ),
        Rule(
            cel="has(self.model.architecture) ? self.precision in "
            f"{list(LLM_PRECISIONS)} : self.precision in {list(BLOCK_PRECISIONS)}",
            message="precision must be BF16, FP16, FP8, INT4 or FP4 with model.architecture, and "
            "FP32, FP16 or INT8 without",
            field_path=".precision",
            check=lambda s: (
                s.precision
                in (LLM_PRECISIONS if s.model.architecture is not None else BLOCK_PRECISIONS)
            ),
        ),
        Rule(
            cel="has(self.model.architecture) || !has(self.kvCachePrecision)",
            message="kvCachePrecision needs model.architecture",
            field_path=".kvCachePrecision",
            check=lambda s: s.model.architecture is not None or s.kv_cache_precision is None,
        ),
        Rule(
            cel="has(self.model.architecture) || !has(self.batching)",
            message="batching needs model.architecture (LLM endpoints); other endpoints' dynamic "
            "batcher forms batches of up to maxBatchSize",
            field_path=".batching",
            check=lambda s: s.model.architecture is not None or s.batching is None,
        ),
        Rule(
            cel="has(self.model.architecture) ? (has(self.slo.timeToFirstTokenP99Milliseconds)"
            " && has(self.slo.timePerOutputTokenP99Milliseconds)) : "
            "(has(self.slo.latencyP99Milliseconds) && has(self.slo.targetRequestsPerSecond))",
            message="an LLM endpoint needs slo.timeToFirstTokenP99Milliseconds and "
            "slo.timePerOutputTokenP99Milliseconds; any other needs slo.latencyP99Milliseconds "
            "and slo.targetRequestsPerSecond",
            field_path=".slo",
            check=lambda s: (
                (
                    s.slo.time_to_first_token_p99_milliseconds is not None
                    and s.slo.time_per_output_token_p99_milliseconds is not None
                )
                if s.model.architecture is not None
                else (
                    s.slo.latency_p99_milliseconds is not None
                    and s.slo.target_requests_per_second is not None
                )
            ),
        ),
        Rule(
            cel="has(self.model.architecture) || !has(self.parallelism)",
            message="spec.parallelism needs model.architecture (LLM endpoints)",
            field_path=".parallelism",
            check=lambda s: s.model.architecture is not None or s.parallelism is None,
        ),
        Rule(
            cel=f"!has({_PAR}) || !has({_PAR}.tensor) || {_G} % {_PAR}.tensor == 0",
            message="parallelism.tensor must divide accelerator.perReplica",
            field_path=".parallelism.tensor",
            check=lambda s: (
                s.parallelism is None
                or s.parallelism.tensor is None
                or s.accelerator.per_replica % s.parallelism.tensor == 0
            ),
            message_expression=(
                f"'tensor %d does not divide perReplica %d'.format([{_PAR}.tensor, {_G}])"
            ),
            message_for=lambda s: (
                f"tensor {s.parallelism.tensor} does not divide perReplica "
                f"{s.accelerator.per_replica}"
            ),
        ),
        Rule(
            cel=f"!has({_PAR}) || !has({_PAR}.pipeline) || {_G} % {_PAR}.pipeline == 0",
            message="parallelism.pipeline must divide accelerator.perReplica",
            field_path=".parallelism.pipeline",
            check=lambda s: (
                s.parallelism is None
                or s.parallelism.pipeline is None
                or s.accelerator.per_replica % s.parallelism.pipeline == 0
            ),
            message_expression=(
                f"'pipeline %d does not divide perReplica %d'.format([{_PAR}.pipeline, {_G}])"
            ),
            message_for=lambda s: (
                f"pipeline {s.parallelism.pipeline} does not divide perReplica "
                f"{s.accelerator.per_replica}"
            ),
        ),
        Rule(
            cel=f"!has({_PAR}) || !has({_PAR}.tensor) || !has({_PAR}.pipeline) || "
            f"{_PAR}.tensor * {_PAR}.pipeline == {_G}",
            message="parallelism.tensor x parallelism.pipeline must equal accelerator.perReplica",
            field_path=".parallelism",
            check=lambda s: (
                s.parallelism is None
                or s.parallelism.tensor is None
                or s.parallelism.pipeline is None
                or s.parallelism.tensor * s.parallelism.pipeline == s.accelerator.per_replica
            ),
            message_expression=(
                "'tensor %d x pipeline %d is %d accelerators, not perReplica %d'.format("
                f"[{_PAR}.tensor, {_PAR}.pipeline, {_PAR}.tensor * {_PAR}.pipeline, {_G}])"
            ),
            message_for=lambda s: (
                f"tensor {s.parallelism.tensor} x pipeline {s.parallelism.pipeline} is "
                f"{s.parallelism.tensor * s.parallelism.pipeline} accelerators, not perReplica "
                f"{s.accelerator.per_replica}"
            ),
        ),
        Rule(
            cel=f"!has({_ARCH}) || !has({_PAR}) || !has({_PAR}.pipeline) || "
            f"{_PAR}.pipeline <= {_ARCH}.layers",
            message="parallelism.pipeline must be at most model.architecture.layers",
            field_path=".parallelism.pipeline",
            check=lambda s: (
                s.model.architecture is None
                or s.parallelism is None
                or s.parallelism.pipeline is None
                or s.parallelism.pipeline <= s.model.architecture.layers
            ),
            message_expression=(
                "'pipeline %d: more stages than the %d layers (model.architecture.layers)'"
                f".format([{_PAR}.pipeline, {_ARCH}.layers])"
            ),
            message_for=lambda s: (
                f"pipeline {s.parallelism.pipeline}: more stages than the "
                f"{s.model.architecture.layers} layers (model.architecture.layers)"
            ),
        ),
        Rule(
            # The longest request (p99 prompt + p99 generation, each its mean when left out)
            # must fit the context the architecture serves: no cache size changes that.
            cel=f"!has({_ARCH}) || !has(self.tokens) || {_CEL_LONGEST} <= {_ARCH}.sequenceLength",
            message="tokens.inputP99 + tokens.outputP99 (each its mean when left out) must be at "
            "most model.architecture.sequenceLength",
            field_path=".tokens",
            check=lambda s: (
                s.model.architecture is None
                or s.tokens is None
                or _longest(s.tokens) <= s.model.architecture.sequence_length
            ),
            message_expression=(
                "'the longest request, %d prompt + %d generated tokens, is longer than the %d "
                "tokens the model serves (model.architecture.sequenceLength)'"
                f".format([{_CEL_P99_IN}, {_CEL_P99_OUT}, {_ARCH}.sequenceLength])"
            ),
            message_for=lambda s: (
                f"the longest request, {s.tokens.input_p99 or s.tokens.input_mean} prompt + "
                f"{s.tokens.output_p99 or s.tokens.output_mean} generated tokens, is longer than "
                f"the {s.model.architecture.sequence_length} tokens the model serves "
                "(model.architecture.sequenceLength)"
            ),
        ),
        Rule(
            # tensor alone fixes the stages too: the engine runs perReplica / tensor of them.
            cel=f"!has({_ARCH}) || !has({_PAR}) || has({_PAR}.pipeline) || "
            f"!has({_PAR}.tensor) || {_G} / {_PAR}.tensor <= {_ARCH}.layers",
            message="with parallelism.pipeline left out, accelerator.perReplica / "
            "parallelism.tensor pipeline stages must be at most model.architecture.layers",
            field_path=".parallelism.tensor",
            check=lambda s: (
                s.model.architecture is None
                or s.parallelism is None
                or s.parallelism.pipeline is not None
                or s.parallelism.tensor is None
                or s.accelerator.per_replica // s.parallelism.tensor <= s.model.architecture.layers
            ),
            message_expression=(
                "'tensor %d leaves perReplica %d / tensor = %d pipeline stages, more than the %d"
                " layers (model.architecture.layers)'"
                f".format([{_PAR}.tensor, {_G}, {_G} / {_PAR}.tensor, {_ARCH}.layers])"
            ),
            message_for=lambda s: (
                f"tensor {s.parallelism.tensor} leaves perReplica {s.accelerator.per_replica} / "
                f"tensor = {s.accelerator.per_replica // s.parallelism.tensor} pipeline stages, "
                f"more than the {s.model.architecture.layers} layers (model.architecture.layers)"
            ),
        ),
        Rule(
            # The tensor-parallel degree: parallelism.tensor, else perReplica over the pipeline
            # stages, else (Auto) perReplica itself, which every layout the engine picks divides.
            cel=f"!has({_ARCH}) || !{_CEL_DEGREES_DIVIDE}"
            f" || {_ARCH}.attentionHeads % {_CEL_TENSOR_DEGREE} == 0",
            message="the tensor-parallel degree (parallelism.tensor, else accelerator.perReplica "
            "/ parallelism.pipeline, else accelerator.perReplica) must divide "
            "model.architecture.attentionHeads",
            field_path=".accelerator.perReplica",
            check=lambda s: (
                s.model.architecture is None
                or not degrees_divide(s)
                or s.model.architecture.attention_heads % tensor_degree(s) == 0
            ),
        ),
        Rule(
            cel=f"!has({_ARCH}) || !has({_PAR}) || !has({_PAR}.expert) || {_PAR}.expert == 1 "
            f"|| (has({_ARCH}.experts) && {_CEL_EXPERT_SLOTS} % {_PAR}.expert == 0)",
            message="parallelism.expert must divide model.architecture.experts plus "
            "parallelism.redundantExperts (a dense model takes expert 1)",
            field_path=".parallelism.expert",
            check=lambda s: (
                s.model.architecture is None
                or s.parallelism is None
                or s.parallelism.expert is None
                or s.parallelism.expert == 1
                or (
                    s.model.architecture.experts is not None
                    and expert_slots(s) % s.parallelism.expert == 0
                )
            ),
            message_expression=(
                f"has({_ARCH}.experts) ? 'expert %d does not divide the %d expert slots "
                "(model.architecture.experts + parallelism.redundantExperts)'"
                f".format([{_PAR}.expert, {_CEL_EXPERT_SLOTS}]) : "
                "'expert %d needs a mixture of experts (model.architecture.experts); a dense "
                f"model takes expert 1'.format([{_PAR}.expert])"
            ),
            message_for=lambda s: (
                f"expert {s.parallelism.expert} does not divide the {expert_slots(s)} expert "
                "slots (model.architecture.experts + parallelism.redundantExperts)"
                if s.model.architecture.experts is not None
                else f"expert {s.parallelism.expert} needs a mixture of experts "
                "(model.architecture.experts); a dense model takes expert 1"
            ),
        ),
        Rule(
            cel=f"!has({_PAR}) || !has({_PAR}.expert) || {_PAR}.expert == 1 || {_CEL_WIDE_EP} "
            f"|| !{_CEL_DEGREES_DIVIDE} || {_PAR}.expert == {_CEL_TENSOR_DEGREE}",
            message="parallelism.expert must be 1 or the tensor-parallel degree "
            "(parallelism.tensor, else accelerator.perReplica / parallelism.pipeline, else "
            "accelerator.perReplica): expert parallelism spans the tensor-parallel ranks (vLLM's "
            "--enable-expert-parallel)",
            field_path=".parallelism.expert",
            check=lambda s: (
                s.parallelism is None
                or s.parallelism.expert is None
                or s.parallelism.expert == 1
                or attention_data_degree(s) > 1
                or not degrees_divide(s)
                or s.parallelism.expert == tensor_degree(s)
            ),
            message_expression=(
                "'expert %d must be 1 or the tensor-parallel degree %d (parallelism.tensor, else"
                " perReplica / parallelism.pipeline, else perReplica): expert parallelism spans"
                " the tensor-parallel ranks'"
                f".format([{_PAR}.expert, {_CEL_TENSOR_DEGREE}])"
            ),
            message_for=lambda s: (
                f"expert {s.parallelism.expert} must be 1 or the tensor-parallel degree "
                f"{tensor_degree(s)} (parallelism.tensor, else perReplica / "
                "parallelism.pipeline, else perReplica): expert parallelism spans the "
                "tensor-parallel ranks"
            ),
        ),
        Rule(
            cel=f"!{_CEL_WIDE_EP} || !has({_ARCH}) || has({_ARCH}.experts)",
            message="parallelism.attentionData above 1 needs a mixture of experts "
            "(model.architecture.experts): it spreads the experts over the replica while each "
            "group serves its own sequences; a dense model serves more sequences with more "
            "replicas",
            field_path=".parallelism.attentionData",
            check=lambda s: (
                attention_data_degree(s) == 1
                or s.model.architecture is None
                or s.model.architecture.experts is not None
            ),
        ),
        Rule(
            cel=f"!has({_PAR}) || !has({_PAR}.attentionData) || {_G} % {_PAR}.attentionData == 0"
            f" && (!has({_PAR}.tensor) || {_PAR}.tensor * {_PAR}.attentionData == {_G})",
            message="parallelism.attentionData must divide accelerator.perReplica, and tensor x "
            "attentionData must be perReplica (each attention group is tensor accelerators)",
            field_path=".parallelism.attentionData",
            check=lambda s: (
                s.parallelism is None
                or s.parallelism.attention_data is None
                or (
                    s.accelerator.per_replica % s.parallelism.attention_data == 0
                    and (
                        s.parallelism.tensor is None
                        or s.parallelism.tensor * s.parallelism.attention_data
                        == s.accelerator.per_replica
                    )
                )
            ),
        ),
        Rule(
            cel=f"!{_CEL_WIDE_EP} || !has({_PAR}.expert) || {_PAR}.expert == {_G}",
            message="with attentionData above 1 the experts spread over the whole replica: "
            "parallelism.expert must be accelerator.perReplica (or left out)",
            field_path=".parallelism.expert",
            check=lambda s: (
                attention_data_degree(s) == 1
                or s.parallelism is None
                or s.parallelism.expert is None
                or s.parallelism.expert == s.accelerator.per_replica
            ),
        ),
        Rule(
            cel=f"!{_CEL_WIDE_EP} || !has({_ARCH}) || !has({_ARCH}.experts) || "
            f"{_CEL_EXPERT_SLOTS} % {_G} == 0",
            message="with attentionData above 1 the experts spread over every accelerator of "
            "the replica: model.architecture.experts + parallelism.redundantExperts must be a "
            "multiple of accelerator.perReplica",
            field_path=".parallelism.redundantExperts",
            check=lambda s: (
                attention_data_degree(s) == 1
                or s.model.architecture is None
                or s.model.architecture.experts is None
                or expert_slots(s) % s.accelerator.per_replica == 0
            ),
            message_expression=(
                "'with attentionData above 1 the experts spread over every accelerator of the "
                "replica: %d expert slots (experts + redundantExperts) do not divide over the %d "
                "accelerators of perReplica; add redundant experts to a multiple'"
                f".format([{_CEL_EXPERT_SLOTS}, {_G}])"
            ),
            message_for=lambda s: (
                "with attentionData above 1 the experts spread over every accelerator of the "
                f"replica: {expert_slots(s)} expert slots (experts + redundantExperts) do not "
                f"divide over the {s.accelerator.per_replica} accelerators of perReplica; add "
                "redundant experts to a multiple"
            ),
        ),
        Rule(
            cel=f"!has({_PAR}) || !has({_ARCH}) || has({_ARCH}.experts) || "
            f"((!has({_PAR}.redundantExperts) || {_PAR}.redundantExperts == 0) && "
            f"!has({_PAR}.expertDispatch))",
            message="parallelism.redundantExperts and parallelism.expertDispatch need a mixture "
            "of experts (model.architecture.experts)",
            field_path=".parallelism",
            check=lambda s: (
                s.parallelism is None
                or s.model.architecture is None
                or s.model.architecture.experts is not None
                or (not s.parallelism.redundant_experts and s.parallelism.expert_dispatch is None)
            ),
        ),
        Rule(
            cel="self.disaggregation.mode == 'Aggregated' || has(self.model.architecture)",
            message="disaggregation needs model.architecture: prefill and decode are the phases "
            "of an LLM server",
            field_path=".disaggregation.mode",
            check=lambda s: (
                s.disaggregation.mode == "Aggregated" or s.model.architecture is not None
            ),
        ),
        Rule(
            cel="self.disaggregation.mode == 'Aggregated' || !has(self.batching) || "
            "self.batching == 'Continuous'",
            message="disaggregation needs batching Continuous: a static batch runs its prompts "
            "and its generation together to the end",
            field_path=".disaggregation.mode",
            check=lambda s: (
                s.disaggregation.mode == "Aggregated" or s.batching in (None, "Continuous")
            ),
        ),
        Rule(
            cel="self.disaggregation.mode == 'Aggregated' || !has(self.replicas)",
            message="spec.replicas counts aggregated replicas; a disaggregated endpoint takes "
            "disaggregation.prefill.replicas and disaggregation.decode.replicas",
            field_path=".replicas",
            check=lambda s: s.disaggregation.mode == "Aggregated" or s.replicas is None,
        ),
        Rule(
            cel="self.disaggregation.mode == 'Aggregated' || !self.autoscaling.enabled || "
            "self.autoscaling.source == 'ServerMetrics'",
            message="autoscaling source HPA scales one workload; a disaggregated endpoint's two "
            "sides are scaled by autoscaling.source ServerMetrics",
            field_path=".autoscaling.source",
            check=lambda s: (
                s.disaggregation.mode == "Aggregated"
                or not s.autoscaling.enabled
                or s.autoscaling.source == "ServerMetrics"
            ),
        ),
        Rule(
            cel="self.autoscaling.source == 'HPA' || has(self.model.architecture)",
            message="autoscaling source ServerMetrics reads an LLM server's metrics (vLLM, "
            "SGLang): it needs model.architecture",
            field_path=".autoscaling.source",
            check=lambda s: s.autoscaling.source == "HPA" or s.model.architecture is not None,
        ),
        Rule(
            cel="!has(self.routing) || has(self.model.architecture)",
            message="routing (an InferencePool) needs model.architecture: the Inference "
            "Extension routes LLM requests",
            field_path=".routing",
            check=lambda s: s.routing is None or s.model.architecture is not None,
        ),
        Rule(
            cel="!has(self.replicas) || (self.replicas >= self.minReplicas"
            " && self.replicas <= self.maxReplicas)",
            message="replicas must be between minReplicas and maxReplicas",
            field_path=".replicas",
            check=lambda s: s.replicas is None or s.min_replicas <= s.replicas <= s.max_replicas,
        ),
    )


def degrees_divide(spec: InferenceEndpointSpec) -> bool:
    """Whether parallelism.tensor and .pipeline, where given, divide perReplica (twin of
    ``_CEL_DEGREES_DIVIDE``)."""
    par, g = spec.parallelism, spec.accelerator.per_replica
    degrees = (par.tensor, par.pipeline, par.attention_data) if par is not None else ()
    return all(d is None or g % d == 0 for d in degrees)


def attention_data_degree(spec: InferenceEndpointSpec) -> int:
    """parallelism.attentionData, 1 when left out."""
    par = spec.parallelism
    return 1 if par is None or par.attention_data is None else par.attention_data


def expert_slots(spec: InferenceEndpointSpec) -> int:
    """The routed experts plus their redundant copies (twin of ``_CEL_EXPERT_SLOTS``)."""
    arch, par = spec.model.architecture, spec.parallelism
    experts = 0 if arch is None or arch.experts is None else arch.experts
    return experts + (0 if par is None else par.redundant_experts or 0)


def tensor_degree(spec: InferenceEndpointSpec) -> int:
    """The tensor-parallel degree the spec fixes (Auto: perReplica, which the engine's layouts
    divide); the CEL rules on attentionHeads and on parallelism.expert and their twins read
    it."""
    par = spec.parallelism
    if par is not None and par.tensor is not None:
        return par.tensor
    if par is not None and par.pipeline is not None:
        return max(1, spec.accelerator.per_replica // par.pipeline)
    if par is not None and par.attention_data is not None:
        return max(1, spec.accelerator.per_replica // par.attention_data)
    return spec.accelerator.per_replica


INFERENCE_ENDPOINT = Resource(
    kind="InferenceEndpoint",
    plural="inferenceendpoints",
    short_name="ie",
    description="Model-serving replicas on an accelerator pool, sized by the operator's "
    "performance model to meet a throughput and p99 latency target.",
    spec=InferenceEndpointSpec,
    status=InferenceEndpointStatus,
    phases=InferenceEndpointPhase,
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase"),
        PrinterColumn(
            "Reason",
            "string",
            condition_reason("Ready"),
            "Why the endpoint is (not) ready: the Ready condition's reason",
        ),
        PrinterColumn("Replicas", "integer", ".status.replicas", "Desired replicas"),
        PrinterColumn("Ready", "integer", ".status.readyReplicas", "Ready replicas"),
        PrinterColumn(
            "Capacity-RPS",
            "number",
            ".status.plan.capacityRequestsPerSecond",
            "Predicted requests per second of the desired replicas",
        ),
        PrinterColumn(
            "Target-RPS", "number", ".spec.slo.targetRequestsPerSecond", "Target requests/second"
        ),
        PrinterColumn("Accelerator", "string", ".spec.accelerator.type", "Accelerator type"),
        PrinterColumn("Precision", "string", ".spec.precision", "Serving precision", priority=1),
        PrinterColumn(
            "P99-ms",
            "number",
            ".status.plan.latencyP99Milliseconds",
            "Predicted p99 latency",
            priority=1,
        ),
        PrinterColumn(
            "Tokens/s",
            "number",
            ".status.plan.outputTokensPerSecond",
            "LLM: predicted output tokens per second of the desired replicas",
        ),
        PrinterColumn(
            "TTFT-ms",
            "number",
            ".status.plan.ttftP99Milliseconds",
            "LLM: predicted p99 time to first token",
        ),
        PrinterColumn(
            "TPOT-ms",
            "number",
            ".status.plan.tpotP99Milliseconds",
            "LLM: predicted p99 time per output token",
        ),
        PrinterColumn(
            "Prefill",
            "integer",
            ".status.sides.prefill.replicas",
            "Disaggregated: prefill replicas",
        ),
        PrinterColumn(
            "Decode", "integer", ".status.sides.decode.replicas", "Disaggregated: decode replicas"
        ),
        PrinterColumn("URL", "string", ".status.url", "In-cluster URL", priority=1),
        AGE,
    ),
    scale=True,
)
