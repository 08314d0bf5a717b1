"""A mixture of experts on one GPU as a lent H200 ran it (calibration/measured/device/
2026-11-30-h200): torchtitan's MoE layer in plain PyTorch, eager and compiled, its routing
measured apart (moe_ops.json, moe_ops_compiled.json) and whole steps of Qwen3-30B-A3B's,
Mixtral 8x7B's and OLMoE's widths (engine.moe_routing, the one-rank load)."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

import numpy as np
import pytest

from ringmaster.calibration import device_steps as D
from ringmaster.engine import moe_routing as R
from ringmaster.engine import moe_training as M
from ringmaster.engine import step_parts as P
from ringmaster.engine.ceilings import ceilings_for
from ringmaster.engine.frameworks import framework, moe_sync_paid, moe_sync_source
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.layout_hardware import layout_hardware
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RECOMPUTE_NONE, SHARD_NONE
from ringmaster.engine.llm_training import evaluate_layouts
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS

pytestmark = pytest.mark.unit

QWEN3_30B = KNOWN_TRANSFORMERS["qwen3-30b-a3b"]


def moe_steps(eager: bool) -> list[D.DeviceRow]:
    return [
        r
        for r in D.device_rows()
        if r.source == "2026-11-30-h200"
        and r.group.startswith("training")
        and (" eager " in r.setup) == eager
    ]


def test_the_routing_bytes_are_the_fit_of_the_h200s_measurements():
    assert D.fit_moe_routing_bytes("eager") == R.MOE_EAGER_BYTES_PER_ELEMENT
    assert D.fit_moe_routing_bytes("compiled") == {
        "routed": R.MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT
    }


def test_the_routing_of_a_width_left_out_of_the_fit_checks_it():
    """Mixtral's width (hidden 4,096, top-2 of 8) is not in either fit: eager within 10 %,
    compiled within 10 %; the eager fit's two widths within 2 % (the compiled layer's within
    25 %: 32 and 23 bytes a routed element, one median between them)."""
    for kind, fitted_within in (("eager", 0.02), ("compiled", 0.25)):
        rows = [r for r in D.device_rows() if r.group == f"moe-routing-{kind}"]
        assert {r.role for r in rows} == {"fitted", "checked"}
        for r in rows:
            assert abs(r.error) < (fitted_within if r.role == "fitted" else 0.10), r.setup
        checked = [r.setup.split()[0] for r in rows if r.role == "checked"]
        assert checked == ["mixtral-8x7b-2l"]


def test_each_memory_bound_mode_routes_its_own_way():
    """Eager stacks route op by op (14x the fused bound for Qwen3-30B-A3B), compiled ones in
    Inductor's kernels (3x), fused ones (Megatron's TE, MaxText's XLA) at the bound."""
    assert [R.routing_kind(m) for m in ("eager", "hf_eager", "compiled", "fused")] == [
        "eager",
        "eager",
        "compiled",
        "fused",
    ]
    one = np.asarray(False)
    moved = {k: float(R.moe_routing_bytes_per_token(QWEN3_30B, one, k)) for k in R.ROUTING_KINDS}
    assert 13 < moved["eager"] / moved["fused"] < 16
    assert 2.5 < moved["compiled"] / moved["fused"] < 3.5
    for name, kind in (
        ("PyTorch", "eager"),
        ("Torchtitan", "eager"),
        ("DeepSpeed", "eager"),
        ("Megatron", "fused"),
        ("LLMFoundry", "fused"),  # eager norms, but MegaBlocks' own gather / scatter kernels
    ):
        fw = framework(name)
        assert R.routing_kind(fw.memory_bound, fw.name) == kind, name
    assert framework("LLMFoundry").memory_bound == "eager"
    said = R.moe_routing_evidence(framework("LLMFoundry"))
    assert "LLMFoundry's MegaBlocks' Triton gather and scatter" in said
    assert R.routing_kind(framework("Torchtitan", compiled=True).memory_bound) == "compiled"
    said = R.moe_routing_evidence(framework("DeepSpeed"))
    assert said.endswith("carried to DeepSpeed's own layer")
    assert "not measured: a lower bound" in R.moe_routing_evidence(framework("Megatron"))
    assert "compile-d layer measured on a lent H200" in R.moe_routing_evidence(
        framework("PyTorch", compiled=True)
    )


def test_an_eager_framework_pays_the_routing_its_ops_move(monkeypatch):
    """Plain PyTorch routes op by op: the step's memory-bound part carries exactly the eager
    bytes at the chip's streaming rate, once per MoE layer and token."""
    one = np.asarray(False)
    eager = float(R.moe_routing_bytes_per_token(QWEN3_30B, one, "eager"))
    k, h = QWEN3_30B.active_experts, QWEN3_30B.hidden
    assert eager == pytest.approx(
        R.MOE_EAGER_BYTES_PER_ELEMENT["routed"] * k * h + R.MOE_EAGER_BYTES_PER_ELEMENT["token"] * h
    )
    hw = replace(
        layout_hardware(
            DEFAULT_CATALOG.host("nvidia-h200-141gb", 8), 1, DEFAULT_CATALOG,
            framework=framework("PyTorch"),
        ),
        per_host=1,
    )  # fmt: skip
    args = dict(tensor=1, pipeline=1, sharding=SHARD_NONE, micro_batch=1, global_batch=1)
    with_routing = evaluate_layouts(QWEN3_30B, hw, recompute=RECOMPUTE_NONE, **args)
    monkeypatch.setitem(R.MOE_EAGER_BYTES_PER_ELEMENT, "routed", 0.0)
    monkeypatch.setitem(R.MOE_EAGER_BYTES_PER_ELEMENT, "token", 0.0)
    without = evaluate_layouts(QWEN3_30B, hw, recompute=RECOMPUTE_NONE, **args)
    tokens = QWEN3_30B.sequence_length * QWEN3_30B.moe_layers
    routing = eager * tokens * hw.ceilings.hbm_scale / P.ce_stream_bytes_per_s()
    paid = float(with_routing.memory_bound_seconds - without.memory_bound_seconds)
    assert paid == pytest.approx(routing, rel=1e-6)


def test_one_rank_holding_every_expert_runs_the_mean_load():
    """The busiest expert-parallel rank takes MOE_LOAD_IMBALANCE x the mean; at one rank it
    holds every expert and runs exactly the routed tokens (padded to capacity: the capacity)."""
    e = np.array([1, 2, 8])
    assert M.routed_load(expert=e).tolist() == [1.0, 1.25, 1.25]
    assert M.routed_load(1.1, expert=e).tolist() == [1.0, 1.1, 1.1]
    assert M.routed_load(1.5, pad_to_capacity=True, expert=e).tolist() == [1.5, 1.5, 1.5]


def test_the_imbalance_prices_expert_parallel_layouts_only(monkeypatch):
    """A doubled imbalance slows the layout whose experts spread over 8 ranks and leaves the
    one-rank layout as it was (its GEMMs run the mean load); Full recompute's table takes the
    load's shape (one per expert degree)."""
    hw = layout_hardware(
        DEFAULT_CATALOG.host("nvidia-h100-80gb", 8), 8, DEFAULT_CATALOG,
        framework=framework("Megatron"),
    )  # fmt: skip

    def steps() -> np.ndarray:
        a = evaluate_layouts(
            QWEN3_30B,
            hw,
            tensor=1,
            pipeline=1,
            sharding=SHARD_NONE,
            micro_batch=1,
            global_batch=8,
            recompute=np.array([RECOMPUTE_FULL, RECOMPUTE_FULL]),
            expert=np.array([1, 8]),
        )
        return np.asarray(a.gemm_seconds)

    before = steps()
    monkeypatch.setattr(M, "MOE_LOAD_IMBALANCE", 2.0 * M.MOE_LOAD_IMBALANCE)
    after = steps()
    assert after.shape == (2,)
    assert after[0] == pytest.approx(before[0], rel=1e-12)
    assert after[1] > 1.2 * before[1]


def test_the_lent_h200s_moe_steps_hold():
    """Whole MoE steps on one H200 (14 eager: 5 with AdamW over fp32 weights, 9 forward +
    backward; 4 compiled): -14 % and -13 % at the median before the routing was measured and
    the one-rank load fixed, now within 5 % at the median and 10 % each, eager and compiled."""
    for eager, n in ((True, 14), (False, 4)):
        steps = moe_steps(eager)
        assert len(steps) == n
        assert median(abs(r.error) for r in steps) < 0.05
        assert all(abs(r.error) < 0.10 for r in steps), [r.setup for r in steps]


def test_fp8_grouped_gemms_are_checked_and_their_lean_is_said():
    """torch._scaled_grouped_mm on the lent H200 (50 calls, the bf16 grid's shapes): the engine's
    FP8 grouped call, FP8 decode terms under the bf16 cap, is 21 % short at the median (checked,
    not fitted: the published runs' kernels are Transformer Engine's); the bf16 calls of the same
    run check the bf16 cap within 10 %. An MoE plan names both."""
    fp8 = [r for r in D.device_rows() if r.group == "grouped-gemm-fp8"]
    bf16 = [
        r
        for r in D.device_rows()
        if r.group == "grouped-gemm" and r.source.startswith("2026-11-30")
    ]
    assert len(fp8) == len(bf16) == 50
    assert {r.role for r in fp8 + bf16} == {"checked"}
    assert -0.25 < median(r.error for r in fp8) < -0.15
    assert median(abs(r.error) for r in bf16) < 0.10
    said = ceilings_for(DEFAULT_CATALOG.accelerator("nvidia-h100-80gb")).evidence["grouped-gemm"]
    assert "torch._scaled_grouped_mm ran 21 % slower" in said


def test_torchtitans_expert_parallel_dispatch_pays_a_host_sync_a_layer():
    """torchtitan's all-to-all and DeepEP dispatchers read the counts back to the host (its
    token_dispatcher's tolist, DeepEP's do_cpu_sync): Megatron-Core's fitted sync a MoE layer and
    micro-batch, carried and said; its local dispatcher (one rank) keeps them on the device."""
    titan = framework("Torchtitan")
    assert titan.moe_sync_seconds == framework("Megatron").moe_sync_seconds > 0
    hw = layout_hardware(
        DEFAULT_CATALOG.host("nvidia-b200", 8), 8, DEFAULT_CATALOG, framework=titan
    )  # fmt: skip
    gaps = {}
    for expert in (1, 8):
        parts = P.micro_batch_parts(QWEN3_30B, hw, 1, 1, 1, RECOMPUTE_NONE, expert=expert)
        gaps[expert] = float(parts.host_gap)
    sync = QWEN3_30B.moe_layers * titan.moe_sync_seconds
    assert gaps[8] - gaps[1] == pytest.approx(sync, rel=1e-9)
    said = R.moe_routing_evidence(titan)
    assert "above one expert-parallel rank, its dispatch's host sync a layer at" in said
    assert "Megatron-Core's fitted 4.07 ms, carried" in said
    assert "host sync" not in R.moe_routing_evidence(framework("Megatron"))
    # what a plan reports as paid follows the layout's degree, and names where it comes from
    megatron = framework("Megatron")
    assert moe_sync_paid(titan, False, 1) == 0.0 < moe_sync_paid(titan, False, 8)
    assert moe_sync_paid(megatron, False, 1) == moe_sync_paid(megatron, False, 8) > 0.0
    assert moe_sync_paid(titan, True, 8) == 0.0  # padded to capacity: static shapes
    assert "TORCHTITAN_MOE_SYNC_SECONDS" in moe_sync_source(titan)
    assert "MEGATRON_MOE_SYNC_SECONDS" in moe_sync_source(megatron)


def test_calibrate_prints_each_routing_fit_with_a_width_left_out():
    """The two fit widths left out in turn (the other width's ops alone refit the term): the
    eager per-routed-element term holds within 1 %, its per-token term within 15 %; the compiled
    layer's one term moves 30-44 %, which calibrate prints (a loose fit, said)."""
    from ringmaster.calibration.evidence import render_leave_one_out

    rows = D.moe_routing_leave_one_width_out()
    assert len(rows) == 6
    errors = {(name, source.split()[0]): error for name, source, *_, error in rows}
    assert errors[('MOE_EAGER_BYTES_PER_ELEMENT["routed"]', "qwen3-30b-a3b-4l")] < 0.01
    assert max(e for (n, _), e in errors.items() if n.endswith('["token"]')) < 0.15
    assert min(e for (n, _), e in errors.items() if n.startswith("MOE_COMPILED")) > 0.25
    assert "MOE_COMPILED_BYTES_PER_ROUTED_ELEMENT" in render_leave_one_out()
