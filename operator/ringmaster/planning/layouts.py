"""A TrainingJob with a model architecture: its layout, planned by engine.llm_training.

:func:`plan_layout` turns the spec into a layout request (``Auto`` fields searched, the others
fixed), runs the search on the job's hardware, and expresses the chosen layout as the usual
:class:`TrainingPrediction` (ring and reduction server for the data-parallel part), so
``ringmaster plan``'s table, status.plan and the controllers keep one shape. :func:`layout_json`
is the JSON contract's additions (issue 12) and :func:`layout_status` the one mapping of a layout
to status.plan's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ringmaster.engine import collectives as C
from ringmaster.engine import llm_training as L
from ringmaster.engine import nccl_settings
from ringmaster.engine.activation_offload import offload_refusal
from ringmaster.engine.frameworks import Framework, framework, infer_framework, moe_sync_paid
from ringmaster.engine.hardware import Catalog
from ringmaster.engine.jax_runtime import jax_hardware
from ringmaster.engine.llm_layout_names import RECOMPUTES
from ringmaster.engine.llm_layout_search import (
    Layout,
    LayoutRequest,
    LayoutSearch,
    NoLayoutError,
    _layout,
    evaluate_layout,
    search_layouts,
)
from ringmaster.engine.llm_memory import stage_parameters
from ringmaster.engine.moe_training import OVERLAP_ONE_F_ONE_B
from ringmaster.engine.pipeline_layout import LayoutError, stage_split
from ringmaster.engine.recompute import RERUNS_FFN_OUTPUT, remat_percent
from ringmaster.engine.training import (
    REDUCTION_SERVER,
    RING,
    StrategyPrediction,
    TrainingInputs,
    TrainingPrediction,
    _wrapped,
    dcn_bandwidth,
    slice_shape,
)
from ringmaster.engine.transformer import LatentAttention, Transformer
from ringmaster.engine.units import DTYPE_BYTES, GIB

AUTO = "Auto"
# as the API's CEL rule (api.training_model.PARAMETERS_TOLERANCE_PERCENT)
PARAMETERS_TOLERANCE = 0.03


def transformer_of(arch: Any, sequence_length: int | None = None) -> Transformer:
    """The engine's Transformer for an API TransformerArchitecture."""
    mla = arch.latent_attention
    window = arch.sliding_window
    latent = None
    if mla is not None:
        latent = LatentAttention(
            kv_lora_rank=mla.kv_lora_rank,
            qk_rope_head_dim=mla.qk_rope_head_dim,
            qk_nope_head_dim=mla.qk_nope_head_dim,
            v_head_dim=mla.v_head_dim,
            q_lora_rank=mla.q_lora_rank or 0,
        )
    return Transformer(
        layers=arch.layers,
        hidden=arch.hidden_size,
        heads=arch.attention_heads,
        vocab=arch.vocab_size,
        sequence_length=sequence_length or arch.sequence_length,
        kv_heads=arch.kv_heads or 0,
        ffn_hidden=arch.ffn_hidden_size or 0,
        gated_ffn=arch.ffn_type == "Gated",
        tied_embeddings=arch.tied_embeddings,
        head_dim=arch.head_dim or 0,
        experts=arch.experts or 0,
        active_experts=arch.active_experts or 0,
        shared_experts=arch.shared_experts or 0,
        expert_ffn_hidden=arch.expert_ffn_hidden_size or 0,
        first_dense_layers=arch.first_dense_layers or 0,
        moe_layer_frequency=arch.moe_layer_frequency or 1,
        latent_attention=latent,
        sliding_window=window.size if window is not None else 0,
        full_attention_every=(window.full_attention_every or 0) if window is not None else 0,
        mtp_layers=arch.mtp_layers or 0,
        mxfp4_experts=arch.expert_weights == "MXFP4",
    )


@dataclass(frozen=True)
class LayoutPlan:
    search: LayoutSearch
    global_batch: int
    parameters: int
    hardware: L.LayoutHardware
    model: Transformer | None = None
    framework_label: str = ""
    evidence: str = ""
    # FP8 scaled op by op (compile off): the chosen layout's step in FP8, in bf16 and compiled.
    eager_fp8: EagerFp8Steps | None = None

    @property
    def chosen(self) -> Layout:
        return self.search.chosen


@dataclass(frozen=True)
class EagerFp8Steps:
    """The same layout's step with FP8 scaled op by op, in bf16, and with torch.compile: the
    lent H100 ran eager FP8 steps 1.4-1.7x as long as bf16 (docs/llm-training.md)."""

    fp8_seconds: float
    bf16_seconds: float
    compiled_seconds: float

    @property
    def loses_to_bf16(self) -> bool:
        return self.fp8_seconds > self.bf16_seconds

    def describe(self) -> str:
        verdict = "slower than" if self.loses_to_bf16 else "faster than"
        return (
            f"FP8 scaling runs op by op (spec.framework.compile is off): step "
            f"{self.fp8_seconds:.4g} s, {verdict} bf16 ({self.bf16_seconds:.4g} s); with compile "
            f"{self.compiled_seconds:.4g} s"
        )


def resolve_framework(spec: Any, kind: str) -> tuple[Framework, str]:
    """The job's framework profile and how it was chosen: ``spec.framework``, else the image's
    hint, else the default (engine.frameworks)."""
    given = getattr(spec, "framework", None)
    if given is not None:
        profile = framework(
            str(given.name),
            compiled=bool(given.compile),
            attention=given.attention_kernel,
            recompute_stops_early=given.recompute_stops_early,
            cuda_graph=given.cuda_graph,
        )
        compiled = " with torch.compile" if profile.compiled else ""
        graphs = "" if given.cuda_graph is None else f", CUDA graphs {given.cuda_graph}"
        return profile, f"framework {profile.name}{compiled}{graphs} (spec.framework)"
    template = getattr(spec, "template", None)
    name, why = infer_framework(getattr(template, "image", None), kind)
    return framework(name), f"framework {name} ({why})"


def gradient_reduction_note(chosen: Layout, profile: Framework, stated: bool | None) -> str | None:
    """What the data-parallel reduction after backward costs the chosen layout: ``stated``, the
    job's overlapGradientReduction (None: the framework's default, which was off)."""
    if stated is None:
        if chosen.sharding == "Full":
            return None  # ZeRO-3 overlaps its own: nothing the job left out applies
        head = (
            f"overlapGradientReduction left out: {profile.name}'s default, off (ZeRO-1 / -2 leave"
            " overlap_comm off)"
        )
    else:
        head = "overlapGradientReduction false"
        if chosen.sharding == "Full":
            return f"{head}: not for sharding Full, whose gathers and reductions run layer by layer"
    if chosen.data * chosen.context == 1:
        return f"{head}: one data-parallel rank, nothing to reduce"
    return (
        f"{head}: the data-parallel reduction after the last backward and the optimizer's"
        f" gather after the step, {_sig(chosen.exposed_data_parallel_seconds)} s of the step on"
        " its critical path"
    )


def tensor_overlap_note(hw: L.LayoutHardware, tensor: int) -> str:
    """What spec.parallelism.tensorOverlap changes in the chosen layout's step."""
    if hw.kind == "tpu":
        return "parallelism.tensorOverlap: on a TPU slice XLA overlaps them already"
    if tensor <= 1:
        return "parallelism.tensorOverlap: no tensor parallelism to overlap (tensor 1)"
    return (
        "tensor-parallel collectives overlapped with their GEMMs (parallelism.tensorOverlap): "
        f"one chunk in {tensor} exposed, and what the GEMMs cannot cover"
    )


def compiler_remat_note(layout: Layout) -> str:
    """Where XLA recomputes part of what the layout's recompute policy would save, to fit."""
    return (
        f"XLA rematerialises {remat_percent(layout.compiler_remat)} % of what recompute"
        f" {layout.recompute} saves beyond Full, so the step fits the chip's"
        f" {layout.capacity_bytes / GIB:.1f} GiB: its rematerialisation pass recomputes saved"
        " values under the memory limit rather than fail (priced at the policy's mean cost a"
        " byte: engine.recompute.compiler_remat_share)"
    )


def recompute_note(profile: Framework, recompute: str) -> str | None:
    """What ``recompute`` reruns under ``profile``, where that depends on the framework's
    checkpoint (engine.frameworks: early stop); None for the policies it does not change."""
    if RECOMPUTES.index(recompute) not in RERUNS_FFN_OUTPUT:
        return None
    if profile.recompute_stops_early:
        return (
            f"recompute {recompute} stops early under {profile.name}: the FFN's output "
            "projection is not rerun"
        )
    return f"recompute {recompute} reruns each layer's whole forward under {profile.name}"


def pipeline_send_note(profile: Framework, chosen: Layout) -> str | None:
    """Where the framework overlaps the interleaved schedule's sends and the plan does not:
    said, with what the plan charges for them; None elsewhere."""
    if not profile.overlaps_pipeline_sends or chosen.pipeline <= 1:
        return None
    if chosen.virtual_stages <= 1 or chosen.pipeline_send_seconds <= 0.0:
        return None
    return (
        f"pipeline sends charged whole ({chosen.pipeline_send_seconds:.3g} s a step): "
        f"{profile.name} overlaps them with compute under the interleaved schedule by default "
        "(overlap_p2p_comm), which the plan does not model"
    )


def _fixed(value: Any) -> Any:
    return None if value is None or value == AUTO else value


def _written_layout(model: Transformer, par: Any) -> tuple[Transformer, int]:
    """The model with spec.parallelism.pipelineLayout's layers per rank, and its virtual stages
    (ValueError naming the rule a layout breaks)."""
    try:
        split = stage_split(par.pipeline_layout, int(par.pipeline), model.layers, model.mtp_layers)
    except LayoutError as exc:
        raise ValueError(f"spec.parallelism.{exc}") from None
    given = par.virtual_pipeline_stages
    if given not in (1, split.virtual_stages):
        raise ValueError(
            f"spec.parallelism.pipelineLayout has {split.virtual_stages} chunks a rank; "
            f"virtualPipelineStages is {given} (leave it out or make them agree)"
        )
    return replace(model, stage_split=split), split.virtual_stages


def layout_request(spec: Any) -> LayoutRequest:
    """What the spec fixes and what it leaves to the search. Without spec.parallelism the job is
    plain data-parallel, as before: tensor 1, pipeline 1, no sharding, one micro-batch of
    batchSizePerAccelerator; only the recompute setting is searched."""
    model = transformer_of(spec.model.architecture)
    accelerators = spec.workers * spec.accelerator.per_worker
    par = getattr(spec, "parallelism", None)
    per_accelerator = spec.model.batch_size_per_accelerator
    if par is None:
        return LayoutRequest(
            model=model,
            global_batch=(per_accelerator or 1) * accelerators,
            tensor=1,
            pipeline=1,
            sharding="None",
            micro_batch=per_accelerator,
            context=1,
            expert=1,
            strategy=str(spec.communication.strategy),
        )
    global_batch = par.global_batch_size or (per_accelerator or 1) * accelerators
    virtual_stages = par.virtual_pipeline_stages
    if par.pipeline_layout is not None:
        model, virtual_stages = _written_layout(model, par)
    return LayoutRequest(
        model=model,
        global_batch=int(global_batch),
        tensor=_fixed(par.tensor),
        pipeline=_fixed(par.pipeline),
        sharding=_fixed(par.sharding),
        micro_batch=_fixed(par.micro_batch_size),
        recompute=_fixed(par.activation_recompute),
        recompute_layers=par.recompute_layers,
        offload_layers=par.activation_offload_layers,
        context=_fixed(par.context),
        expert=_fixed(par.expert),
        expert_tensor=_fixed(par.expert_tensor),
        virtual_stages=virtual_stages,
        strategy=str(spec.communication.strategy),
        expert_overlap=str(par.expert_overlap),
        capacity_factor=par.expert_capacity_factor,
        pad_to_capacity=bool(par.expert_pad_to_capacity),
        expert_dispatch=str(par.expert_dispatch),
    )


def _check_parameters(spec: Any, derived: int) -> None:
    given = spec.model.parameters
    if given is not None and abs(given - derived) > PARAMETERS_TOLERANCE * derived:
        raise ValueError(
            f"spec.model.parameters: {given} differs by more than 3% from {derived}, the count "
            "the architecture implies"
        )


def _bottleneck(layout: Layout) -> str:
    terms = {
        "compute": layout.compute_seconds,
        "tensor-parallel collectives": layout.tensor_parallel_seconds,
        "context-parallel K/V passes": layout.context_parallel_seconds,
        "expert-parallel all-to-all": layout.expert_parallel_seconds,
        "pipeline bubble": layout.bubble_seconds,
        "pipeline sends": layout.pipeline_send_seconds,
        "data-parallel reduction": layout.exposed_data_parallel_seconds,
    }
    ranked = sorted(terms.items(), key=lambda kv: -kv[1])
    (main, _), (second, seconds) = ranked[0], ranked[1]
    share = seconds / layout.step_seconds if layout.step_seconds > 0 else 0.0
    return f"{main}; then {second} ({share:.0%} of the step)" if share >= 0.10 else main


def _strategy(
    name: str, layout: Layout, hw: L.LayoutHardware, global_batch: int
) -> StrategyPrediction:
    samples = global_batch / layout.step_seconds
    rs = name == REDUCTION_SERVER
    return StrategyPrediction(
        name=name,
        algorithm="reduction server" if rs else "best of ring and tree",
        step_seconds=layout.step_seconds,
        compute_seconds=layout.step_seconds - layout.exposed_data_parallel_seconds,
        communication_seconds=layout.data_parallel_seconds,
        exposed_communication_seconds=layout.exposed_data_parallel_seconds,
        samples_per_second=samples,
        bus_bandwidth_gbps=None,
        bottleneck=_bottleneck(layout),
        cost_per_hour_usd=layout.cost_per_hour,
        cost_per_1000_samples_usd=layout.cost_per_hour / 3600.0 / samples * 1000.0,
        scaling_efficiency=1.0,
        reducers=hw.reducers if rs else None,
        reducer_machine_type=hw.reducer_machine_type if rs else None,
        vertex_reducers=hw.reducers if rs else None,
        cost_optimal_reducers=hw.reducers if rs else None,
    )


def _at_strategy(
    request: LayoutRequest, hw: L.LayoutHardware, layout: Layout, strategy: str
) -> Layout:
    a = evaluate_layout(request.model, hw, layout, request.global_batch, strategy)
    return _layout(a, 0, hw.memory_bytes)


def plan_layout(
    spec: Any, inputs: TrainingInputs, catalog: Catalog
) -> tuple[LayoutPlan, TrainingPrediction]:
    """The layout search on the job's hardware, and the prediction it implies."""
    request = layout_request(spec)
    derived = request.model.parameters
    _check_parameters(spec, derived)
    host = catalog.host(inputs.accelerator, inputs.per_worker, inputs.machine_type)
    acc = host.accelerator
    axes: tuple[int, int, int] | None = None
    wrapped = (False, False, False)
    if acc.kind == "tpu":
        axes = slice_shape(inputs)
        wrapped = _wrapped(acc, axes)
    use_reducers = acc.kind == "gpu" and inputs.strategy != RING and inputs.workers > 1
    profile, framework_label = resolve_framework(spec, acc.kind)
    hw = L.layout_hardware(
        host,
        inputs.workers,
        catalog,
        reducer_machine_type=inputs.reducer_machine_type if use_reducers else None,
        reducers=inputs.reducers,
        slice_axes=axes,
        wrapped=wrapped,
        compute_precision=inputs.compute_precision,
        fp8_recipe=getattr(spec.model, "fp8_recipe", None) or "Linear",
        slices=inputs.slices,
        dcn_bandwidth=dcn_bandwidth(host) if acc.kind == "tpu" else 0.0,
        framework=profile,
    )
    hw, network_notes = network_hardware(hw, host.machine, inputs.nccl_env)
    hw, jax_notes = jax_hardware(hw, inputs.xla_env)
    network_notes += jax_notes
    par = getattr(spec, "parallelism", None)
    # spec.parallelism.overlapGradientReduction, else (None) the framework's default
    stated_overlap = getattr(par, "overlap_gradient_reduction", None)
    hw = replace(
        hw,
        tensor_overlap=hw.tensor_overlap or bool(getattr(par, "tensor_overlap", False)),
        offload_layer_inputs=bool(getattr(par, "offload_layer_inputs", False)),
        vocab_tiles=int(getattr(par, "vocab_tiling", None) or 1),
        iota_embed=bool(getattr(par, "iota_embed", False)),
        overlaps_gradient_reduction=(
            profile.overlaps_gradient_reduction if stated_overlap is None else stated_overlap
        ),
        optimizer_moments=spec.model.moment_element_type,
        gradient_bytes=float(DTYPE_BYTES[spec.model.gradient_element_type]),
        parameter_dtype=str(spec.model.parameter_dtype),
    )
    refusal = offload_refusal(
        request.recompute or "", acc.name, request.offload_layers, hw.offload_layer_inputs
    )
    if refusal is not None:
        raise ValueError(f"spec.parallelism: {refusal}")
    wanted = getattr(par, "data_replicas", 1)
    hw, search, tried = _search_replicas(request, hw, wanted)
    chosen = search.chosen
    strategies = {
        RING: _strategy(RING, _at_strategy(request, hw, chosen, RING), hw, request.global_batch)
    }
    if hw.reducers > 0:
        rs_layout = _at_strategy(request, hw, chosen, REDUCTION_SERVER)
        strategies[REDUCTION_SERVER] = _strategy(
            REDUCTION_SERVER, rs_layout, hw, request.global_batch
        )
    params = stage_parameters(
        request.model, chosen.tensor, chosen.pipeline, chosen.expert, chosen.expert_tensor_degree
    )
    evidence = f"{framework_label}; " + training_evidence(
        acc.name, profile.name, hw.compute_precision, hw, chosen.context, request.model.is_moe
    )
    notes = [
        f"layout: {chosen.describe()} ({search.evaluated} layouts evaluated)",
        f"evidence: {evidence}",
    ]
    if not search.fits:
        notes.append(f"does not fit: {search.reason}")
    rerun = recompute_note(profile, chosen.recompute)
    if rerun is not None:
        notes.append(rerun)
    if chosen.compiler_remat > 0.0:
        notes.append(compiler_remat_note(chosen))
    if hw.tensor_overlap:
        notes.append(tensor_overlap_note(hw, chosen.tensor))
    if hw.data_replicas > 1:
        notes.append(hybrid_sharding_note(hw, chosen))
    if hw.vocab_tiles > 1:
        notes.append(
            f"vocabTiling {hw.vocab_tiles}: the loss in {hw.vocab_tiles} chunks of the tokens,"
            " the logits' memory divided by it; each chunk's logits computed again in backward"
            " (one more forward of the LM head)"
        )
    if hw.optimizer_moments != "fp32":
        notes.append(
            "optimizerMomentsDType bf16: Adam's moments in bf16 beside the fp32 master (8 bytes"
            " of optimizer state a parameter, not 12); the optimizer step's time scaled by the"
            " bytes it moves, 20 a parameter for the 28 measured with fp32 moments"
        )
    if not hw.overlaps_gradient_reduction:
        note = gradient_reduction_note(chosen, profile, stated_overlap)
        if note is not None:
            notes.append(note)
    if request.expert_overlap == OVERLAP_ONE_F_ONE_B and hw.framework.one_f_one_b_realised < 1.0:
        notes.append(
            f"expertOverlap OneFOneB: {hw.framework.name}'s published runs realise"
            f" {hw.framework.one_f_one_b_realised:.0%} of its hiding"
            " (engine.frameworks.MEGATRON_ONE_F_ONE_B_REALISED): the exchange is charged about"
            " whole, and the shared experts no longer run beside it"
        )
    if hw.parameter_dtype != "fp32":
        notes.append(
            "parameterDType bf16: the parameters, their gradients and Adam's moments in bf16 with"
            " no fp32 copy (8 bytes of state a parameter, not 16); the optimizer step's time"
            " scaled by the bytes it moves, 14 a parameter for the 28 measured in fp32"
        )
    if hw.iota_embed:
        notes.append(
            "iotaEmbed: the embedding looked up as a one-hot matmul on the matrix units, its"
            " forward and the table's gradient 4 x vocabulary x hidden FLOPs a token among the"
            " GEMMs (the one-hot operand's memory not modelled: XLA fuses its compare into the"
            " dot)"
        )
    if len(tried) > 1:
        notes.append(replicas_auto_note(hw.data_replicas, tried))
    sends = pipeline_send_note(profile, chosen)
    if sends is not None:
        notes.append(sends)
    eager_fp8 = eager_fp8_steps(request, hw, chosen)
    if eager_fp8 is not None and not eager_fp8.loses_to_bf16:  # else a warning says it
        notes.append(eager_fp8.describe())
    notes += network_notes
    if request.model.mxfp4_experts:  # a served checkpoint's format: not what training holds
        notes.append(
            "architecture.expertWeights MXFP4 describes the served checkpoint: training holds "
            "and computes its experts at the job's precision, as every other weight"
        )
    prediction = TrainingPrediction(
        chosen_strategy=chosen.strategy,
        strategies=strategies,
        machine_type=host.machine.name,
        accelerator=acc.name,
        workers=inputs.workers,
        per_worker=inputs.per_worker,
        gradient_bytes=float(np.maximum(params.first, params.last)) * hw.gradient_bytes,
        compute_seconds=chosen.step_seconds - chosen.exposed_data_parallel_seconds,
        compute_source="architecture",
        notes=tuple(notes),
    )
    plan = LayoutPlan(
        search=search,
        global_batch=request.global_batch,
        parameters=derived,
        hardware=hw,
        model=request.model,
        framework_label=profile.name,
        evidence=evidence,
        eager_fp8=eager_fp8,
    )
    return plan, prediction


def eager_fp8_steps(
    request: LayoutRequest, hw: L.LayoutHardware, chosen: Layout
) -> EagerFp8Steps | None:
    """For FP8 whose scaling runs op by op (torchao without torch.compile), what the same layout
    steps in bf16 and with compile, so the user sees the cost of the choice; else None."""
    if hw.compute_precision != "fp8" or hw.framework.fp8_casts != "eager":
        return None
    strategy = chosen.strategy

    def step(other: L.LayoutHardware) -> float:
        a = evaluate_layout(request.model, other, chosen, request.global_batch, strategy)
        return float(np.ravel(a.step_seconds)[0])

    compiled = replace(hw, framework=framework(hw.framework.name, compiled=True))
    return EagerFp8Steps(chosen.step_seconds, step(hw.with_precision("bf16")), step(compiled))


def network_hardware(
    hw: L.LayoutHardware, machine: Any, env: tuple[tuple[str, str], ...]
) -> tuple[L.LayoutHardware, list[str]]:
    """The layout hardware as NCCL will run it (issue 41, part 4), and the notes that say so:

    * the workers' NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE restrict every collective of the
      layout (engine.nccl_settings sorts the other NCCL_* variables: no effect, or ignored);
    * an NVLink domain of several hosts (GB200 NVL72) is one NCCL node
      (engine.llm_training.on_nvlink_domain)."""
    settings = nccl_settings.classify(env)
    notes = settings.notes()
    if settings.modelled and hw.kind == "gpu":
        algos, protos = C.parse_nccl_env(dict(settings.modelled))
        hw = replace(hw, nccl_algorithms=frozenset(algos), nccl_protocols=frozenset(protos))
        if not C.nvls_enabled(dict(settings.modelled)):
            hw = replace(hw, nvls_bandwidth=0.0)
    hw, k = L.on_nvlink_domain(hw, machine)
    if k > 1:
        notes.append(
            f"NVLink domain: {k} hosts of {machine.name} ({hw.per_host} GPUs) run as one "
            f"NCCL node of its {machine.nvlink_domain}-GPU domain; tensor parallelism may "
            "span them"
        )
    return hw, notes


def training_evidence(
    accelerator: str,
    framework_name: str,
    precision: str,
    hw: L.LayoutHardware,
    context: int = 1,
    moe: bool = False,
) -> str:
    """The calibration cell a prediction rests on (calibration.evidence), the checked
    context-parallel runs' where the layout splits the sequence (``context`` above 1), the
    checked mixture-of-experts runs' for a mixture of experts (``moe``: the cells hold dense
    models), what the collectives inside a host rest on (several accelerators a host), and the
    ceilings'."""
    from ringmaster.calibration.evidence import (
        cell_evidence,
        collective_evidence,
        context_parallel_evidence,
        moe_training_evidence,
    )

    text = cell_evidence(accelerator, framework_name, precision)
    if moe:
        from ringmaster.engine.moe_routing import moe_routing_evidence

        routing = moe_routing_evidence(hw.framework)
        grouped = hw.ceilings.evidence.get("grouped-gemm", "")
        text = f"{text}; {moe_training_evidence(framework_name)}; {routing}"
        if grouped:
            text = f"{text}; grouped expert GEMMs {grouped}"
    if context > 1:
        text = f"{text}; {context_parallel_evidence()}"
    matmul = hw.ceilings.evidence.get("matmul", "")
    if precision == "fp4" and "matmul-fp4" in hw.ceilings.evidence:
        matmul = f"{matmul}; FP4 GEMMs {hw.ceilings.evidence['matmul-fp4']}"
    if hw.step_fit_source:
        matmul = f"GEMMs {hw.step_fit_source}"
    if hw.profile_evidence:  # issue 47: "profiled on pool h100-a, 2026-11-26: GEMMs bf16, ..."
        profiled_gemms = hw.step_fit_source.startswith("profiled")
        matmul = hw.profile_evidence if profiled_gemms else f"{matmul}; {hw.profile_evidence}"
    occupancy = hw.ceilings.evidence.get("attention-occupancy", "")
    if occupancy.startswith(("carried", "extrapolated")):  # the lent H100's law, not this chip's
        matmul = f"{matmul}; attention occupancy {occupancy}" if matmul else occupancy
    if precision in ("fp8", "fp4"):
        from ringmaster.engine.step_parts import fp8_cast_evidence

        casts = fp8_cast_evidence(hw.framework)
        matmul = f"{matmul}; {casts}" if matmul else casts
    text = f"{text}; {matmul}" if matmul else text
    if hw.per_host > 1:  # collectives inside a host or NVLink domain; last, as status truncates
        fabric = (hw.accelerator, hw.kind, hw.intra_link, hw.nccl_arch, hw.nvls_bandwidth > 0)
        text = f"{text}; {collective_evidence(*fabric)}"
    return text


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def _written(plan: LayoutPlan) -> str | None:
    """spec.parallelism.pipelineLayout, where the plan's model carries one."""
    split = plan.model.stage_split if plan.model is not None else None
    return split.written if split is not None else None


def _layout_fields(layout: Layout, global_batch: int, written: str | None = None) -> dict[str, Any]:
    return {
        "tensor": layout.tensor,
        "pipeline": layout.pipeline,
        "context": layout.context,
        "expert": layout.expert,
        "expertTensor": layout.expert_tensor_degree,
        "data": layout.data,
        "sharding": layout.sharding,
        "microBatchSize": layout.micro_batch,
        "globalBatchSize": global_batch,
        "virtualPipelineStages": layout.virtual_stages,
        "activationRecompute": layout.recompute,
        **({"recomputeLayers": layout.recompute_layers} if layout.recompute_layers else {}),
        **({"compilerRematShare": _sig(layout.compiler_remat, 4)} if layout.compiler_remat else {}),
        **({"activationOffloadLayers": layout.offload_layers} if layout.offload_layers else {}),
        **_moe_schedule_fields(layout),
        **({"pipelineLayout": written} if written else {}),
    }


def _moe_schedule_fields(layout: Layout) -> dict[str, Any]:
    """A mixture of experts' all-to-all overlap (``None`` unless set) and token dropping (where
    the job sets a capacity factor)."""
    out: dict[str, Any] = {
        "expertOverlap": layout.expert_overlap,
        "expertDispatch": layout.expert_dispatch,
    }
    if layout.capacity_factor is not None:
        out["expertCapacityFactor"] = layout.capacity_factor
        out["expertPadToCapacity"] = layout.pad_to_capacity
    return out


def step_parts(layout: Layout) -> dict[str, float]:
    """The step part by part (engine.step_parts and the layout's communication), seconds."""
    return {
        "gemm": _sig(layout.gemm_seconds),
        "attention": _sig(layout.attention_seconds),
        "memoryBound": _sig(layout.memory_bound_seconds),
        "loss": _sig(layout.loss_seconds),
        "hostGap": _sig(layout.host_gap_seconds),
        **(
            {"activationOffload": _sig(layout.activation_offload_seconds)}
            if layout.host_offload_bytes > 0
            else {}
        ),
        "optimizer": _sig(layout.optimizer_seconds),
        "tensorParallel": _sig(layout.tensor_parallel_seconds),
        "contextParallel": _sig(layout.context_parallel_seconds),
        "expertParallel": _sig(layout.expert_parallel_seconds),
        "pipelineSends": _sig(layout.pipeline_send_seconds),
        "pipelineBubble": _sig(layout.bubble_seconds),
        "exposedDataParallel": _sig(layout.exposed_data_parallel_seconds),
        "overlapInterference": _sig(layout.overlap_interference_seconds),
    }


def _host_offload(layout: Layout) -> dict[str, float]:
    """The activations an offloading recompute policy (or Megatron's CPU offloading) keeps in
    host memory, per accelerator (nothing where everything stays in HBM)."""
    if layout.host_offload_bytes <= 0:
        return {}
    return {"hostOffloadBytesPerAccelerator": _sig(layout.host_offload_bytes)}


def _memory(layout: Layout) -> dict[str, float]:
    return {
        "weights": _sig(layout.weights_bytes),
        "gradients": _sig(layout.gradients_bytes),
        "optimizer": _sig(layout.optimizer_bytes),
        "activations": _sig(layout.activations_bytes),
        "reserve": _sig(layout.reserve_bytes),
        "total": _sig(layout.total_bytes),
        "capacity": _sig(layout.capacity_bytes),
    }


def layout_json(plan: LayoutPlan) -> dict[str, Any]:
    """The top-level keys ``ringmaster plan -o json`` adds for a model with an architecture."""
    c = plan.chosen
    return {
        "layout": _layout_fields(c, plan.global_batch, _written(plan)),
        "fits": plan.search.fits,
        "reason": plan.search.reason,
        "memoryPerAcceleratorBytes": _memory(c),
        "tokensPerSecond": _sig(c.tokens_per_second),
        "mfu": _sig(c.mfu, 4),
        "parameters": plan.parameters,
        "layoutsEvaluated": plan.search.evaluated,
        "framework": plan.framework_label,
        "stepPartsSeconds": step_parts(c),
        **_host_offload(c),
        "evidence": plan.evidence,
        **({"moe": moe_json(plan)} if plan.search.chosen and _is_moe(plan) else {}),
        "alternatives": [
            {
                "layout": _layout_fields(a.layout, plan.global_batch),
                "fits": a.layout.fits,
                "stepSeconds": _sig(a.layout.step_seconds),
                "memoryPerAcceleratorBytes": _sig(a.layout.total_bytes),
                "why": a.why,
            }
            for a in plan.search.alternatives
        ],
    }


def _is_moe(plan: LayoutPlan) -> bool:
    return plan.model is not None and plan.model.is_moe


def _cuda_graph(plan: LayoutPlan) -> str | None:
    """Megatron's CUDA graphs the step assumes (engine.frameworks.CUDA_GRAPHS); None elsewhere."""
    profile = plan.hardware.framework
    return profile.cuda_graph if profile.name == "Megatron" else None


def moe_json(plan: LayoutPlan) -> dict[str, Any]:
    """A mixture of experts' figures: its total and active parameters, the expert-parallel
    degree, and the dispatch / combine all-to-alls on the step's critical path."""
    c = plan.chosen
    model = plan.model
    assert model is not None
    return {
        "experts": model.experts,
        "activeExperts": model.active_experts,
        "sharedExperts": model.shared_experts,
        "moeLayers": model.moe_layers,
        "totalParameters": model.parameters,
        "activeParameters": model.active_parameters,
        "expertParallel": c.expert,
        "allToAllSeconds": _sig(c.expert_parallel_seconds),
        "allToAllShare": _sig(c.expert_parallel_seconds / c.step_seconds, 4)
        if c.step_seconds > 0
        else 0.0,
        # a dropless layer's exposed host sync a layer and micro-batch (engine.frameworks)
        "hostSyncSecondsPerLayer": _sig(
            moe_sync_paid(plan.hardware.framework, bool(c.pad_to_capacity), c.expert)
        ),
    }


def replica_candidates(hw: L.LayoutHardware, wanted: int | str | None) -> list[int]:
    """The hybrid-sharding replica counts to search: the spec's, or under ``Auto`` none and one
    group a host (GPU jobs of several hosts; 1 elsewhere)."""
    if wanted == AUTO:
        return [1, hw.hosts] if hw.kind == "gpu" and hw.hosts > 1 else [1]
    replicas = int(wanted or 1)
    if replicas > 1 and hw.kind == "tpu":
        raise ValueError(
            "spec.parallelism.dataReplicas: a TPU job's slices replicate its states "
            "(accelerator.slices); TPUs take 1"
        )
    return [replicas]


def _search_replicas(
    request: LayoutRequest, hw: L.LayoutHardware, wanted: int | str | None
) -> tuple[L.LayoutHardware, LayoutSearch, dict[int, LayoutSearch]]:
    """The layout search at each replica count (replica_candidates): the fastest that fits,
    fewer groups on a tie, and every count's search; a count no layout divides is passed over
    (refused where it was the spec's one)."""
    best: tuple[L.LayoutHardware, LayoutSearch] | None = None
    error: NoLayoutError | None = None
    tried: dict[int, LayoutSearch] = {}
    for replicas in replica_candidates(hw, wanted):
        candidate = replace(hw, data_replicas=replicas)
        try:
            search = search_layouts(request, candidate)
        except NoLayoutError as exc:
            error = error or exc
            continue
        tried[replicas] = search
        if best is None or _beats(search, best[1]):
            best = (candidate, search)
    if best is None:
        raise ValueError(f"spec.parallelism: {error}")
    return best[0], best[1], tried


def replicas_auto_note(chosen: int, tried: dict[int, LayoutSearch]) -> str:
    """What ``dataReplicas: Auto`` compared and kept."""
    steps = "; ".join(
        f"{r} group{'s' if r > 1 else ''}: {s.chosen.step_seconds:.4g} s"
        + ("" if s.fits else " (does not fit)")
        for r, s in sorted(tried.items())
    )
    return f"dataReplicas Auto: {chosen} kept ({steps})"


def _beats(a: LayoutSearch, b: LayoutSearch) -> bool:
    """Whether search ``a``'s choice beats ``b``'s: one that fits over one that does not, then a
    step shorter by more than 0.1 %."""
    if a.fits != b.fits:
        return a.fits
    return a.chosen.step_seconds < b.chosen.step_seconds * (1.0 - 1e-3)


def hybrid_sharding_note(hw: L.LayoutHardware, chosen: Layout) -> str:
    """What spec.parallelism.dataReplicas does to the chosen layout."""
    group = chosen.data * chosen.context // hw.data_replicas
    if chosen.sharding == "None":
        return (
            f"hybrid sharding: {hw.data_replicas} replica groups, but sharding None keeps every "
            "state whole: one all-reduce over all data-parallel ranks, as without them"
        )
    return (
        f"hybrid sharding: {hw.data_replicas} replica groups of {group} data-parallel ranks; "
        f"sharding {chosen.sharding} spans one group (each chip holds 1/{group} of the states), "
        "the groups all-reduce their gradient shards over the NICs"
    )


def layout_status(plan: LayoutPlan) -> dict[str, Any]:
    """status.plan's layout fields (camelCase), the one place that maps a layout to status."""
    c = plan.chosen
    out = {
        "layout": c.name,
        **_layout_fields(c, plan.global_batch, _written(plan)),
        "dataReplicas": plan.hardware.data_replicas,
        "offloadLayerInputs": plan.hardware.offload_layer_inputs,
        "vocabTiling": plan.hardware.vocab_tiles,
        "iotaEmbed": plan.hardware.iota_embed,
        "overlapGradientReduction": plan.hardware.overlaps_gradient_reduction,
        "optimizerMomentsDType": plan.hardware.optimizer_moments,
        "parameterDType": plan.hardware.parameter_dtype,
        "fits": plan.search.fits,
        "reason": plan.search.reason,
        "tokensPerSecond": _sig(c.tokens_per_second),
        "mfu": _sig(c.mfu, 4),
        "memoryPerAcceleratorBytes": _memory(c),
        "framework": plan.framework_label or None,
        "cudaGraph": _cuda_graph(plan),
        "stepPartsSeconds": step_parts(c),
        **_host_offload(c),
        "evidence": plan.evidence[:1024] or None,
    }
    if _is_moe(plan):
        out["activeParameters"] = plan.model.active_parameters if plan.model else None
        out["allToAllSeconds"] = _sig(c.expert_parallel_seconds)
    return out
