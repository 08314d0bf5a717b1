"""The pool a training layout runs on, in the engine's units: :class:`LayoutHardware` (achieved
bandwidths, the chip's ceilings, the framework's kernels, the workers' NCCL restrictions), built by
:func:`layout_hardware` from a catalog host, with a multi-host NVLink domain (GB200 NVL72) as one
NCCL node (:func:`on_nvlink_domain`) and the step-level GEMM fit of a chip without measurements of
its own (:data:`GEMM_STEP_FIT`, :func:`step_fit`). The layout model (engine.llm_training) reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import ArrayLike

from ringmaster.engine import collectives as C
from ringmaster.engine.activation_offload import (
    host_link_bandwidth,
    host_memory_per_accelerator,
)
from ringmaster.engine.arrays import F64
from ringmaster.engine.ceilings import (
    H100_BURST_TFLOPS,
    H100_SUSTAINED_TFLOPS,
    Ceilings,
    ceilings_for,
)
from ringmaster.engine.efficiency import (
    ICI_EFFICIENCY,
    ICI_HOP_LATENCY,
    MEMORY_EFFICIENCY,
    NIC_EFFICIENCY,
    NVLINK_EFFICIENCY,
    NVLINK_HOP_LATENCY,
    PCIE_EFFICIENCY,
    PCIE_HOP_LATENCY,
    XGMI_EFFICIENCY,
    XGMI_HOP_LATENCY,
)
from ringmaster.engine.frameworks import (
    DEFAULT_GPU_FRAMEWORK,
    DEFAULT_TPU_FRAMEWORK,
    HOST_SECONDS_PER_KERNEL,
    Framework,
)
from ringmaster.engine.frameworks import framework as framework_profile
from ringmaster.engine.hardware import DEFAULT_CATALOG, Accelerator, Catalog, Host, MachineType
from ringmaster.engine.llm_layout_names import (
    FP8_RECIPES,
)
from ringmaster.engine.llm_memory import (
    ALLOCATOR_SLACK_AT_LIMIT,
    FRAMEWORK_RESERVE_BYTES,
    MOMENT_BYTES,
    PARAMETER_BYTES,
    optimizer_state_bytes,
)
from ringmaster.engine.profiled import profiled_pool
from ringmaster.engine.training import (
    resolve_compute_precision,
    vertex_reducer_count,
)

# What the chip's measured ceilings (engine.ceilings) do not carry: a chip without its own
# operator measurements runs its GEMMs at the H100's measured fractions of its own peak, times a
# factor fitted on one framework's published steps there, everything else in the step composed
# from the ceilings (engine.step_parts). Ampere: Megatron-LM SC'21 Table 1, alternate rows
# (calibration.llm_training; the other rows checked): the A100 holds more of its peak than the
# power-capped H100 does. TPU: MaxText's 16B row on a v5e-256 slice (XLA on the MXU). A test keeps
# both equal to their fits; the plan names them as step-level fits.
GEMM_STEP_FIT = {"ampere": 0.886, "tpu": 1.153}

LINK_EFFICIENCY = {
    "nvlink": NVLINK_EFFICIENCY,
    "pcie": PCIE_EFFICIENCY,
    "xgmi": XGMI_EFFICIENCY,
    "ici": ICI_EFFICIENCY,
}
LINK_HOP_LATENCY = {
    "nvlink": NVLINK_HOP_LATENCY,
    "pcie": PCIE_HOP_LATENCY,
    "xgmi": XGMI_HOP_LATENCY,
    "ici": ICI_HOP_LATENCY,
}


def _default_ceilings() -> Ceilings:
    return ceilings_for(DEFAULT_CATALOG.accelerator("nvidia-h100-80gb"))


# --- hardware, as the layout model needs it ----------------------------------------------------


@dataclass(frozen=True)
class LayoutHardware:
    """The pool a layout runs on, in engine units: achieved bandwidths (line rate x efficiency)."""

    kind: str  # "gpu" or "tpu"
    accelerator: str
    hosts: int
    per_host: int
    peak_flops: float  # at the compute precision (what MFU divides by)
    memory_bytes: float
    intra_bandwidth: float  # NVLink / PCIe / ICI link, achieved, bytes/s
    intra_hop_latency: float
    nic_bandwidth: float  # host NIC, achieved, bytes/s
    host_price: float  # USD/h
    slice_axes: tuple[int, int, int] = (1, 1, 1)  # TPU slice topology (one slice's)
    # TPU multislice: slices of slice_axes joined over the data-center network; the layout's
    # tensor / pipeline / context stay inside a slice, data parallelism spans the slices.
    slices: int = 1
    dcn_bandwidth: float = 0.0  # a host's achieved DCN bandwidth, bytes/s
    # Hybrid sharding on GPUs (spec.parallelism.dataReplicas): the data-parallel ranks form this
    # many replica groups; ZeRO / FSDP sharding spans one group's ranks and the groups all-reduce
    # their gradient shards over the hosts' NICs (torchtitan's data_parallel_replicate_degree,
    # FSDP's HYBRID_SHARD, MaxText's dcn_data_parallelism over GPU hosts). A TPU's slices do
    # this already (``slices``).
    data_replicas: int = 1
    # MaxText's decoder_layer_input offload (spec.parallelism.offloadLayerInputs): every layer's
    # input goes to host memory beside what the recompute policy offloads.
    offload_layer_inputs: bool = False
    # MaxText's num_vocab_tiling (spec.parallelism.vocabTiling): the loss computed in this many
    # chunks of the tokens, each chunk's logits recomputed in backward (engine.step_parts).
    vocab_tiles: int = 1
    # MaxText's use_iota_embed (spec.parallelism.iotaEmbed): the embedding lookup as a one-hot
    # matmul, forward and the table's gradient (engine.step_parts).
    iota_embed: bool = False
    # Adam's moments' dtype (spec.model.optimizerMomentsDType): fp32, or bf16 under
    # Megatron-Core's precision-aware optimizer (engine.llm_memory.optimizer_state_bytes).
    optimizer_moments: str = "fp32"
    # The gradients' bytes a parameter (spec.model.gradientDType): what the gradient buffer holds
    # and the data-parallel reduction moves, 4 (fp32 main grads, every framework's default) or 2
    # (Megatron-Core's main_grads_dtype / grad_reduce_in_bf16, torchtitan's mixed_precision_reduce).
    gradient_bytes: float = 4.0
    # The parameters' own dtype (spec.model.parameterDType): fp32 (the parameters, or the masters
    # beside bf16 weights), or bf16 with no fp32 copy (MaxText's weight_dtype bfloat16).
    parameter_dtype: str = "fp32"
    wrapped: tuple[bool, bool, bool] = (False, False, False)
    reducers: int = 0  # reduction-server reducers (0: none considered)
    reducer_bandwidth: float = 0.0  # achieved, bytes/s, per reducer
    reducer_price: float = 0.0
    reducer_machine_type: str = ""
    machine_type: str = ""
    memory_bandwidth: float = 0.0  # HBM, achieved, bytes/s (0: elementwise time not modelled)
    # What NCCL sees inside a GPU host (collectives.GpuFabric): the link kind, NVLink SHARP's
    # achieved bandwidth (0 without NVSwitch + Hopper or later) and the GPU generation.
    intra_link: str = "nvlink"
    nvls_bandwidth: float = 0.0
    nccl_arch: str = "ampere"
    compute_precision: str = "bf16"
    # The caching allocator's slack over activations: PyTorch's on GPUs; XLA assigns buffers
    # ahead of time on TPUs, so none there.
    allocator_overhead: float = ALLOCATOR_SLACK_AT_LIMIT
    # What the runtime holds outside the framework's allocations: the CUDA context and NCCL's
    # buffers on a GPU; none on a TPU, whose catalog memory is what XLA may allocate.
    runtime_reserve_bytes: float = FRAMEWORK_RESERVE_BYTES
    # Peaks of the matmuls outside the layers' linear layers (attention core, LM head): the
    # compute precision's, except under FP8 recipes, which keep some of them in bf16.
    attention_peak_flops: float = 0.0  # 0: peak_flops
    head_peak_flops: float = 0.0  # 0: peak_flops
    # The step's composition (engine.step_parts): the chip's ceilings, the framework's kernels,
    # the step-level GEMM fit of a chip without its own measurement (GEMM_STEP_FIT; 1 otherwise),
    # the power cap's toll on attention kernels measured at burst clocks (sustained / burst GEMM
    # rate of the measured chip), and an eager stack's host time per kernel.
    ceilings: Ceilings = field(default_factory=lambda: _default_ceilings())
    framework: Framework = field(default_factory=lambda: framework_profile(DEFAULT_GPU_FRAMEWORK))
    step_fit: float = 1.0
    step_fit_source: str = ""
    attention_derate: float = 1.0
    host_seconds_per_kernel: float = HOST_SECONDS_PER_KERNEL
    # --- issue 41 part 4 (network): what the workers' NCCL_ALGO / NCCL_PROTO /
    # NCCL_NVLS_ENABLE leave NCCL (collectives.parse_nccl_env; None: everything), passed to
    # every collective through LayoutHardware.fabric. planning.layouts sets them from the pod's env.
    nccl_algorithms: frozenset[int] | None = None
    nccl_protocols: frozenset[int] | None = None
    # issue 47: a pool measured by a PoolProfile (engine.profiled): what the profile replaced,
    # for the plan's evidence ("" on the catalog's figures).
    profile_evidence: str = ""
    # Offloaded activations (engine.activation_offload): the accelerator's link to host memory,
    # achieved bytes/s per direction (0: unknown), and its share of the host's DRAM (inf:
    # unknown, unchecked).
    host_link_bandwidth: float = 0.0
    host_memory_per_accelerator: float = math.inf
    # The run overlaps its tensor-parallel collectives with the GEMMs they feed or drain
    # (spec.parallelism.tensorOverlap: exposed_tensor_parallel_seconds).
    tensor_overlap: bool = False
    # The data-parallel reduction runs behind backward, bucket by bucket (DDP's hooks, Megatron's
    # --overlap-grad-reduce, DeepSpeed's overlap_comm), or after the last backward, on the step's
    # critical path (spec.parallelism.overlapGradientReduction false: Megatron-LM's own default).
    overlaps_gradient_reduction: bool = True

    @property
    def accelerators(self) -> int:
        return self.hosts * self.per_host

    @property
    def optimizer_moment_bytes(self) -> float:
        """Bytes of each of Adam's moments a parameter (MOMENT_BYTES of optimizer_moments)."""
        return MOMENT_BYTES[self.optimizer_moments]

    @property
    def parameter_bytes(self) -> float:
        """Bytes of the parameter (or master) the optimizer updates (PARAMETER_BYTES)."""
        return PARAMETER_BYTES[self.parameter_dtype]

    @property
    def optimizer_state_bytes(self) -> float:
        """The optimizer's state a parameter: the parameter (master) and Adam's two moments."""
        return optimizer_state_bytes(self.optimizer_moment_bytes, self.parameter_bytes)

    @property
    def replica_groups(self) -> int:
        """The groups the data-parallel ranks are replicated over, each sharding its states
        alone: a multislice job's slices, or a GPU job's hybrid-sharding replicas."""
        return self.slices * self.data_replicas

    def sharded_data_ranks(self, data: ArrayLike) -> F64:
        """The data-parallel ranks a layout's ZeRO / FSDP sharding spans: all of them, but in a
        multislice job only one slice's (MaxText shards over its ICI fsdp axis and replicates
        over dcn_data_parallelism's slices: its logical axis rules map no weight axis to
        'data'), and under hybrid sharding one replica group's."""
        return np.asarray(data, dtype=np.float64) / self.replica_groups

    def with_precision(self, precision: str) -> LayoutHardware:
        """The same hardware computing at ``precision`` (the LM head stays bf16 under FP8)."""
        return (
            self
            if precision == self.compute_precision
            else replace(self, compute_precision=precision)
        )

    def fabric(self, net_bandwidth: ArrayLike) -> C.GpuFabric:
        """The GPU host as NCCL sees it, with ``net_bandwidth`` of NIC for the group and the
        pod's NCCL_* restrictions (issue 41 part 4)."""
        return C.GpuFabric(
            intra_bandwidth=self.intra_bandwidth,
            net_bandwidth=net_bandwidth,
            intra_link=self.intra_link,
            nvls_bandwidth=self.nvls_bandwidth,
            arch=self.nccl_arch,
            algorithms=self.nccl_algorithms,
            protocols=self.nccl_protocols,
        )


def on_nvlink_domain(hw: LayoutHardware, machine: MachineType) -> tuple[LayoutHardware, int]:
    """``hw`` with each NVLink domain of several hosts (GB200 NVL72) as one NCCL node: its hosts
    together are the layout's host (tensor parallelism may span it, NVLink inside, its NICs
    together to other domains, its price the hosts' together); and how many hosts make one (1:
    the domain is the host)."""
    if hw.kind != "gpu" or machine.nvlink_domain <= hw.per_host:
        return hw, 1
    k = int(C.hosts_per_domain(machine, hw.hosts))
    if k == 1:
        return hw, 1
    domain = replace(
        hw,
        hosts=hw.hosts // k,
        per_host=hw.per_host * k,
        nic_bandwidth=hw.nic_bandwidth * k,
        host_price=hw.host_price * k,
    )
    return domain, k


def layout_hardware(
    host: Host,
    hosts: int,
    catalog: Catalog,
    *,
    reducer_machine_type: str | None = None,
    reducers: int | None = None,
    slice_axes: tuple[int, int, int] | None = None,
    wrapped: tuple[bool, bool, bool] = (False, False, False),
    compute_precision: str | None = None,
    fp8_recipe: str = "Linear",
    slices: int = 1,
    dcn_bandwidth: float = 0.0,
    framework: Framework | None = None,
) -> LayoutHardware:
    """The hardware of ``hosts`` x ``host`` (a reducer machine type adds the reduction-server
    option: ``reducers`` of them, or as many as Vertex AI's bandwidth rule asks).
    ``compute_precision``: ``spec.model.computePrecision`` (default bf16, else fp16). Under fp8
    the layers' linear layers run at the catalog's FP8 peak; ``fp8_recipe`` ``Linear`` keeps
    the attention core in bf16 (Transformer Engine's default, torchtitan's Float8 on nn.Linear),
    ``AllMatmuls`` runs it in FP8 too (Transformer Engine's FP8 attention); the LM head stays
    bf16 in both (neither recipe converts the output layer). Under fp4 (NVFP4, Transformer
    Engine's NVFP4BlockScaling) the linear layers run at the FP4 peak but for the share kept in
    bf16 (step_parts.NVFP4_BF16_LINEAR_SHARE); the attention core and the LM head stay bf16."""
    acc = host.accelerator
    precision = resolve_compute_precision(acc, compute_precision)
    if fp8_recipe not in FP8_RECIPES:
        raise ValueError(f"fp8 recipe {fp8_recipe!r}: expected one of {', '.join(FP8_RECIPES)}")
    peak = acc.peak(precision)
    half = acc.peak("bf16") if precision in ("fp8", "fp4") else peak
    attention_peak = peak if fp8_recipe == "AllMatmuls" else half
    ceilings = ceilings_for(acc)
    fw = (
        framework
        if framework is not None
        else framework_profile(
            DEFAULT_TPU_FRAMEWORK if acc.kind == "tpu" else DEFAULT_GPU_FRAMEWORK
        )
    )
    fit, fit_source, derate = step_fit(acc)
    # The transport's achieved rate: kernel TCP shared by the host's GPUs loses more.
    # issue 41 part 4: EFA's efficiency by generation
    nic = host.nic_bandwidth * float(
        C.network_efficiency(host.machine.transport, host.count, host.machine.efa_generation)
    )
    profile_evidence = ""
    measured = catalog.profile(host)
    if measured is not None:  # issue 47: the pool's own measurements in place of the catalog's
        pool = profiled_pool(ceilings, measured, acc, host.machine, nic, (fit, fit_source, derate))
        ceilings, nic, profile_evidence = pool.ceilings, pool.nic_bandwidth, pool.evidence
        fit, fit_source, derate = pool.step_fit, pool.step_fit_source, pool.attention_derate
    k, reducer_bw, reducer_price = 0, 0.0, 0.0
    if reducer_machine_type and acc.kind == "gpu" and hosts > 1:
        reducer = catalog.machine(reducer_machine_type)
        rule = int(vertex_reducer_count(hosts, host.nic_bandwidth, reducer.nic_bandwidth))
        k = reducers or rule
        reducer_bw = reducer.nic_bandwidth * NIC_EFFICIENCY
        reducer_price = reducer.price_per_hour
    return LayoutHardware(
        kind=acc.kind,
        accelerator=acc.name,
        hosts=hosts,
        per_host=host.count,
        peak_flops=peak,
        memory_bytes=acc.memory_bytes,
        # An xGMI mesh: the links among the host's GPUs in use (collectives.link_bandwidth).
        intra_bandwidth=(
            acc.ici_link_bandwidth
            if acc.kind == "tpu"
            else float(C.link_bandwidth(acc, host.count))
        )
        * LINK_EFFICIENCY[acc.intra_link],
        intra_hop_latency=LINK_HOP_LATENCY[acc.intra_link],
        nic_bandwidth=nic,
        host_price=host.price_per_hour,
        ceilings=ceilings,
        framework=fw,
        step_fit=fit,
        step_fit_source=fit_source,
        attention_derate=derate,
        allocator_overhead=0.0 if acc.kind == "tpu" else ALLOCATOR_SLACK_AT_LIMIT,
        runtime_reserve_bytes=0.0 if acc.kind == "tpu" else FRAMEWORK_RESERVE_BYTES,
        attention_peak_flops=attention_peak,
        head_peak_flops=half,
        slice_axes=slice_axes or (hosts * host.count // max(slices, 1), 1, 1),
        slices=max(slices, 1),
        dcn_bandwidth=dcn_bandwidth,
        wrapped=wrapped,
        reducers=k,
        reducer_bandwidth=reducer_bw,
        reducer_price=reducer_price,
        reducer_machine_type=reducer_machine_type or "",
        machine_type=host.machine.name,
        memory_bandwidth=acc.memory_bandwidth * MEMORY_EFFICIENCY,
        intra_link=acc.intra_link,
        nvls_bandwidth=C.nvls_bandwidth(acc),  # issue 41 part 4: NVLS efficiency by generation
        nccl_arch=acc.nccl_arch or "volta",
        compute_precision=precision,
        profile_evidence=profile_evidence,
        host_link_bandwidth=host_link_bandwidth(acc.name),
        host_memory_per_accelerator=host_memory_per_accelerator(acc.name),
    )


def step_fit(acc: Accelerator) -> tuple[float, str, float]:
    """(GEMM step fit, its source, attention's power derate) of ``acc``: 1 and the measured
    sustained / burst ratio where the chip's own ceilings are measured or carried from the H100
    (Hopper, Blackwell: the same power-capped behaviour assumed), else the step-level fit."""
    key = "tpu" if acc.kind == "tpu" else acc.nccl_arch
    if key in GEMM_STEP_FIT:
        source = (
            "fitted on MaxText's v5e steps (calibration.llm_training)"
            if key == "tpu"
            else "fitted on Megatron-LM's A100 steps, SC'21 Table 1 (calibration.llm_training)"
        )
        return GEMM_STEP_FIT[key], source, 1.0
    derate = H100_SUSTAINED_TFLOPS["bf16"] / H100_BURST_TFLOPS["bf16"]
    return 1.0, "", derate
