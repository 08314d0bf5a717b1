"""Mixture-of-experts training as it really runs (issue 42): the all-to-all overlap schedules
(Megatron-Core's 1F1B overlap, DeepSeek's DualPipe), token dropping with a capacity factor, and
FP4 training on chips with FP4 tensor cores. Hand-computed cases and the bounds each model must
keep."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from ringmaster.engine import ceilings as CE
from ringmaster.engine import llm_training as L
from ringmaster.engine import moe_training as M
from ringmaster.engine.ceilings import ceilings_for
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_SELECTIVE
from ringmaster.engine.llm_layout_search import LayoutRequest, search_layouts
from ringmaster.engine.llm_memory import memory_per_accelerator, stage_parameters
from ringmaster.engine.step_parts import expert_tokens
from ringmaster.engine.training import resolve_compute_precision
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

QWEN3_30B = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]  # 128 experts, top-8, no shared expert
MIXTRAL = KNOWN_TRANSFORMERS["mixtral-8x7b"]  # 8 experts, top-2, no shared expert
DEEPSEEK = KNOWN_TRANSFORMERS["deepseek-v3"]  # 256 experts, top-8, one shared expert
LLAMA_8B = KNOWN_TRANSFORMERS["llama-3.1-8b"]


def gpus(accelerator: str, hosts: int = 1, precision: str | None = None) -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host(accelerator, 8)
    return L.layout_hardware(
        host, hosts, DEFAULT_CATALOG, compute_precision=precision, framework=framework("Megatron")
    )


def one(model, hw, **layout):  # type: ignore[no-untyped-def]
    base = dict(
        tensor=np.array([1]),
        pipeline=1,
        sharding=1,
        micro_batch=1,
        recompute=RECOMPUTE_SELECTIVE,
        global_batch=64,
        expert=8,
    )
    base.update(layout)
    return L.evaluate_layouts(model, hw, **base)


# --- token dropping -------------------------------------------------------------------------


def test_routed_load_by_hand() -> None:
    assert M.routed_load() == M.MOE_LOAD_IMBALANCE == 1.25  # dropless
    assert M.routed_load(1.0) == 1.0  # dropping caps the busiest expert at its capacity
    assert M.routed_load(2.0) == 1.25  # a loose cap leaves dropless's imbalance
    assert M.routed_load(2.0, pad_to_capacity=True) == 2.0  # padded: exactly the capacity
    assert M.routed_load(0.5, pad_to_capacity=True) == 0.5


def test_capacity_tokens_per_expert_by_hand() -> None:
    # Qwen3-30B-A3B, 4,096 tokens a rank, EP 4, top-8 of 128 experts. Megatron-Core's capacity
    # (moe_utils.get_capacity) per source rank: ceil(4096 x 8 / 128 x 1.5) = 384; four ranks
    # send to each expert: 1,536 tokens, padded, against dropless's mean of 1,024.
    per_rank = math.ceil(4096 * 8 / 128 * 1.5)
    assert per_rank == 384
    padded = expert_tokens(QWEN3_30B, 4096.0, 4, M.routed_load(1.5, pad_to_capacity=True))
    assert float(padded) == 4 * per_rank == 1536.0
    assert float(expert_tokens(QWEN3_30B, 4096.0, 4)) == 1024.0
    # Without padding the busiest expert takes min(1.25, 1.5) x the mean.
    dropping = expert_tokens(QWEN3_30B, 4096.0, 4, M.routed_load(1.5))
    assert float(dropping) == 1280.0


def test_capacity_scales_the_all_to_all_bytes() -> None:
    dropless = M.moe_all_to_all_bytes(QWEN3_30B, 1, 1, 1)
    padded = M.moe_all_to_all_bytes(QWEN3_30B, 1, 1, 1, M.routed_load(2.0, True))
    # a sequence's tokens x top-8 x hidden 2048 x 2 bytes x the load
    assert float(dropless) == QWEN3_30B.sequence_length * 8 * 2048 * 2 * 1.25
    assert float(padded) / float(dropless) == pytest.approx(2.0 / 1.25)


def test_dropping_at_capacity_one_is_faster_and_padding_to_two_slower() -> None:
    hw = gpus("nvidia-h100-80gb")
    dropless = one(QWEN3_30B, hw)
    tight = one(QWEN3_30B, hw, capacity_factor=1.0)
    padded = one(QWEN3_30B, hw, capacity_factor=2.0, pad_to_capacity=True)
    assert float(tight.step_seconds[0]) < float(dropless.step_seconds[0])
    assert float(padded.step_seconds[0]) > float(dropless.step_seconds[0])
    assert float(padded.expert_parallel_seconds[0]) > float(dropless.expert_parallel_seconds[0])


def test_a_dense_model_ignores_the_capacity_factor() -> None:
    hw = gpus("nvidia-h100-80gb")
    a = one(LLAMA_8B, hw, expert=1)
    b = one(LLAMA_8B, hw, expert=1, capacity_factor=1.0, pad_to_capacity=True)
    assert float(a.step_seconds[0]) == float(b.step_seconds[0])


# --- all-to-all overlap ---------------------------------------------------------------------


def test_exposed_all_to_all_by_hand() -> None:
    # 10 ms of all-to-alls, 3 ms of shared experts, 8 ms of a layer's compute, a quarter unpaired;
    # what hides still takes OVERLAP_INTERFERENCE (0.15) of its seconds from the compute beside it
    assert M.OVERLAP_INTERFERENCE == 0.15
    assert float(M.exposed_all_to_all(10.0, 3.0, 8.0, "None", 1.0)) == pytest.approx(7.0 + 0.45)
    paired_hidden = 0.75 * 8.0
    assert float(M.exposed_all_to_all(10.0, 3.0, 8.0, "OneFOneB", 0.25)) == pytest.approx(
        0.75 * 2.0 + 2.5 + 0.15 * paired_hidden
    )
    assert float(M.exposed_all_to_all(10.0, 3.0, 12.0, "DualPipe", 0.0)) == pytest.approx(1.5)


def test_unpaired_share_by_hand() -> None:
    # No pipeline: the first forward and the last backward of 8 micro-batches.
    assert float(M.unpaired_share("OneFOneB", 1, 1, 8)) == 1 / 8
    # Interleaved p 4, v 2, m 16: the first stage's 2 (p - 1) + (v - 1) p + 1 = 11 of 32 chunks.
    assert float(M.unpaired_share("OneFOneB", 4, 2, 16)) == 11 / 32
    assert float(M.unpaired_share("OneFOneB", 4, 2, 2)) == 1.0  # all warm-up: nothing paired
    assert float(M.unpaired_share("DualPipe", 16, 1, 120)) == 0.0
    assert float(M.unpaired_share("None", 16, 1, 120)) == 1.0


@pytest.mark.parametrize("model", [QWEN3_30B, MIXTRAL], ids=["qwen3-30b", "mixtral"])
@pytest.mark.parametrize("micro_batch", [1, 2, 4])
def test_overlap_never_makes_the_step_slower_without_shared_experts(model, micro_batch) -> None:
    """Without shared experts there is nothing for ``None`` to hide the all-to-alls behind that
    the overlap takes away, so OneFOneB can only shorten the step."""
    hw = gpus("nvidia-h100-80gb", hosts=2)
    none = one(model, hw, micro_batch=micro_batch, expert=8, global_batch=128)
    overlap = one(
        model, hw, micro_batch=micro_batch, expert=8, global_batch=128, expert_overlap="OneFOneB"
    )
    assert np.all(overlap.step_seconds <= none.step_seconds)
    assert np.all(overlap.expert_parallel_seconds <= none.expert_parallel_seconds)


def test_overlap_with_shared_experts_is_faster_at_many_micro_batches_where_realised() -> None:
    """DeepSeek-V3 (a shared expert beside the routed ones) at 256 micro-batches: with the
    schedule's ideal hiding the paired chunks' outweighs the shared experts' that the overlap
    gives up; as Megatron-Bridge's runs realise it (none, engine.frameworks
    .MEGATRON_ONE_F_ONE_B_REALISED) the overlap only gives the shared experts' up."""
    hw = gpus("nvidia-h100-80gb", hosts=2)
    ideal = replace(hw, framework=replace(hw.framework, one_f_one_b_realised=1.0))
    kwargs = dict(micro_batch=1, expert=16, global_batch=4096)
    none = one(DEEPSEEK, ideal, **kwargs)
    overlap = one(DEEPSEEK, ideal, expert_overlap="OneFOneB", **kwargs)
    assert float(overlap.step_seconds[0]) < float(none.step_seconds[0])
    assert hw.framework.one_f_one_b_realised == 0.0
    as_run = one(DEEPSEEK, hw, expert_overlap="OneFOneB", **kwargs)
    assert float(as_run.step_seconds[0]) > float(one(DEEPSEEK, hw, **kwargs).step_seconds[0])


def test_dualpipe_bubble_by_hand() -> None:
    # (p/2 - 1)(F&B + B - 3W): p 16, a slot of 3 s whose compute is 3 s (B = 2, W = 1): 7 x 2 s.
    assert float(M.dualpipe_bubble(3.0, 3.0, 16)) == pytest.approx(14.0)
    assert float(M.dualpipe_bubble(3.0, 3.0, 2)) == 0.0
    # 1F1B's bubble on the same stage: (p - 1) x 3 s = 45 s.
    assert float(M.dualpipe_bubble(3.0, 3.0, 16)) < 15 * 3.0


def test_dualpipe_schedules_only_what_its_library_accepts() -> None:
    assert bool(M.dualpipe_runs(16, 32)) and bool(M.dualpipe_runs(2, 4))
    assert not bool(M.dualpipe_runs(16, 30))  # fewer than 2 per rank
    assert not bool(M.dualpipe_runs(15, 60))  # odd pipeline
    assert not bool(M.dualpipe_runs(4, 9))  # odd micro-batches


def test_dualpipe_holds_two_stages_per_rank() -> None:
    kwargs = dict(
        tensor=1,
        pipeline=8,
        data=8,
        sharding=1,
        micro_batch=1,
        micro_batches=64,
        recompute=RECOMPUTE_SELECTIVE,
        expert=8,
    )
    plain = memory_per_accelerator(MIXTRAL, **kwargs)
    dual = memory_per_accelerator(MIXTRAL, dual_pipe=True, **kwargs)
    params = stage_parameters(MIXTRAL, 1, 8, 8)
    # the first rank's two stages, or two middle ones: about twice a 1F1B rank's state
    assert float(dual.weights) >= 1.5 * float(plain.weights)
    assert float(dual.optimizer) >= 1.5 * float(plain.optimizer)
    assert float(params.first + params.last) > float(params.middle)
    assert float(dual.activations) > float(plain.activations)  # p + 1 in flight


def test_dualpipe_shortens_deepseek_v3_s_published_layout() -> None:
    """DeepSeek-V3's layout (2,048 H800-like H100s, PP16 EP64 ZeRO-1): DualPipe's shorter bubble
    and hidden all-to-alls make it faster than the same layout without overlap."""
    hw = gpus("nvidia-h100-80gb", hosts=256, precision="fp8")
    runs = {}
    for overlap in ("None", "DualPipe"):
        request = LayoutRequest(
            DEEPSEEK,
            15360,
            tensor=1,
            pipeline=16,
            context=1,
            expert=64,
            sharding="Optimizer",
            recompute="Selective",
            expert_overlap=overlap,
        )
        runs[overlap] = search_layouts(request, hw).chosen
    assert runs["DualPipe"].bubble_seconds < runs["None"].bubble_seconds
    assert runs["DualPipe"].expert_parallel_seconds < runs["None"].expert_parallel_seconds
    assert runs["DualPipe"].micro_batches % 2 == 0 and runs["DualPipe"].micro_batches >= 32


# --- FP4 ------------------------------------------------------------------------------------


def test_fp4_gemms_are_their_measured_fraction_at_the_fp4_peak(monkeypatch) -> None:
    """NVFP4 at the B200's measured FP4 fraction (engine.ceilings.MEASURED_FP4_MATMUL_RATIO,
    over the H100's FP8) on FP8's shape model; a chip without one carries FP8's fraction."""
    b200 = DEFAULT_CATALOG.accelerator("nvidia-b200")
    ratio = b200.peak("fp4") / b200.peak("fp8")
    assert ratio == 2.0
    measured = CE.MEASURED_FP4_MATMUL_RATIO["nvidia-b200"] / CE.matmul_ratio("nvidia-b200", "fp8")
    for carried in (False, True):
        if carried:
            monkeypatch.setattr(CE, "MEASURED_FP4_MATMUL_RATIO", {})
        ce = ceilings_for(b200)
        for width, tokens in ((1024, 4096), (8192, 8192), (256, 512)):
            fp4 = float(ce.gemm_flops("fp4", width, tokens))
            fp8 = float(ce.gemm_flops("fp8", width, tokens))
            assert fp4 == pytest.approx(ratio * fp8 * (1.0 if carried else measured))
        word = "carried from FP8" if carried else "measured: NVFP4"
        assert word in ce.evidence["matmul-fp4"]


@pytest.mark.parametrize("model", [LLAMA_8B, QWEN3_30B], ids=["dense", "moe"])
def test_fp4_is_faster_than_fp8_by_at_most_the_peak_ratio(model) -> None:
    fp8 = one(model, gpus("nvidia-b200", precision="fp8"), expert=1 if model is LLAMA_8B else 8)
    fp4 = one(model, gpus("nvidia-b200", precision="fp4"), expert=1 if model is LLAMA_8B else 8)
    speedup = float(fp8.step_seconds[0]) / float(fp4.step_seconds[0])
    assert 1.0 < speedup <= 2.0


def test_fp4_on_a_chip_without_fp4_units_is_refused_by_name() -> None:
    h100 = DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")
    with pytest.raises(ValueError, match="nvidia-h100-80gb has no fp4 units"):
        resolve_compute_precision(h100, "fp4")
    assert resolve_compute_precision(DEFAULT_CATALOG.accelerator("nvidia-b200"), "fp4") == "fp4"


def test_fp4_keeps_the_attention_core_and_the_head_in_bf16() -> None:
    hw = gpus("nvidia-b200", precision="fp4")
    b200 = DEFAULT_CATALOG.accelerator("nvidia-b200")
    assert hw.peak_flops == b200.peak("fp4")
    assert hw.attention_peak_flops == hw.head_peak_flops == b200.peak("bf16")
