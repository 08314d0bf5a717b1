"""llm-foundry as a framework (issue 41): its profile, its loss's memory, its published MPT runs as
checked evidence, and whether a layout fits judged at the memory limit."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.api.training_model import COMPILABLE_FRAMEWORKS
from ringmaster.calibration.evidence import cell_evidence, training_cells
from ringmaster.calibration.llm_training import (
    _layout_model,
    fit_triton_attention,
    mpt_model,
    published_layout_search,
    published_nic_gbps,
    throughput_report,
    training_points,
)
from ringmaster.engine import llm_memory as M
from ringmaster.engine import llm_training as L
from ringmaster.engine.ceilings import TRITON_FLASH_ATTENTION_RATIO
from ringmaster.engine.frameworks import COMPILABLE, framework, infer_framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_NONE, SHARD_FULL
from ringmaster.engine.units import GIB

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FOUNDRY = [r for r in training_points()["published_layouts"] if r.get("framework") == "LLMFoundry"]


def _row(rid: str) -> dict:
    return next(r for r in FOUNDRY if r["id"] == rid)


def test_the_profile_is_what_llm_foundry_runs():
    fw = framework("LLMFoundry")
    assert (fw.attention, fw.attention_ampere) == ("flash2", "flash2")  # attn_impl: flash
    assert fw.loss == "compiled" and fw.fused_loss_memory  # flash-attn's fused cross-entropy
    assert fw.memory_bound == "eager" and fw.host_launched  # the modules run eagerly
    assert not fw.copies_weights_back  # FSDP casts on the gather
    assert framework("LLMFoundry", compiled=True).fused_loss_memory  # compile keeps the loss
    assert infer_framework("mosaicml/llm-foundry:2.5.1_cu124-latest", "gpu")[0] == "LLMFoundry"
    assert set(COMPILABLE_FRAMEWORKS) == set(COMPILABLE)  # the CEL rule's twin


def test_parse_manifest_accepts_the_framework_with_compile():
    doc = yaml.safe_load((EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml").read_text())
    doc["spec"]["framework"] = {"name": "LLMFoundry", "compile": True}
    spec = parse_manifest(doc).spec
    assert spec.framework is not None and spec.framework.name == "LLMFoundry"


def _fsdp_step(
    accelerator: str,
    per_host: int,
    hosts: int,
    size: str = "13b",
    micro_batch: int = 2,
    framework_name: str = "LLMFoundry",
) -> L.LayoutArrays:
    """MPT at 2,048 tokens, full sharding, no recompute, one micro-batch per accelerator."""
    host = DEFAULT_CATALOG.host(accelerator, per_host)
    hw = L.layout_hardware(host, hosts, DEFAULT_CATALOG, framework=framework(framework_name))
    return L.evaluate_layouts(
        mpt_model(size, 2048),
        hw,
        tensor=1,
        pipeline=1,
        sharding=SHARD_FULL,
        micro_batch=micro_batch,
        recompute=RECOMPUTE_NONE,
        global_batch=micro_batch * per_host * hosts,
    )


def _one(x) -> float:
    return float(np.ravel(x)[0])


def test_the_fused_loss_keeps_the_bf16_logits_only_by_hand():
    """The same layout under LLMFoundry and Torchtitan differs by the loss: 4 bytes a logit
    (bf16 logits and their bf16 gradient) against 10 (an fp32 copy, its fp32 gradient and the
    bf16 one), on one GPU's tokens s b x vocabulary."""
    mem = {
        name: _one(_fsdp_step("nvidia-h100-80gb", 8, 1, "7b", 6, name).memory.activations)
        for name in ("LLMFoundry", "Torchtitan")
    }
    assert mem["Torchtitan"] - mem["LLMFoundry"] == pytest.approx(6.0 * 2048 * 6 * 50368)


def test_mpt_models_have_their_published_parameter_counts():
    """The tables' NumParams (learned positions of max_seq_len x d_model included, which the
    engine leaves out): MPT-7B 6,658,859,008 at 2,048 tokens, MPT-70B 64,862,437,376."""
    for size, seq, published in (("7b", 2048, 6658859008), ("70b", 2048, 64862437376)):
        model = mpt_model(size, seq)
        positions = seq * model.hidden
        assert model.parameters + positions == pytest.approx(published, rel=1e-3)


def test_every_published_llm_foundry_layout_fits_only_when_judged_at_the_limit():
    """183 runs on 8-128 A100 and H100. At the limit (the allocator frees its cache and
    retries before it fails) every one fits; with the allocator's slack of a run with room to
    spare (ALLOCATOR_OVERHEAD, what torchtitan reports as reserved) a fifth would be refused."""
    assert len(FOUNDRY) == 183
    refused_with_slack = 0
    for row in FOUNDRY:
        search = published_layout_search(row, published_nic_gbps(row))
        assert search.fits, (row["id"], search.reason)
        c = search.chosen
        slack = float(c.activations_bytes) * M.ALLOCATOR_OVERHEAD
        refused_with_slack += float(c.total_bytes) + slack > float(c.capacity_bytes)
    assert refused_with_slack >= 30


def test_the_memory_plans_count_is_what_the_step_needs():
    row = _row("foundry-h100-bf16-7b-s2048-g8-mb6")
    c = published_layout_search(row).chosen
    parts = c.weights_bytes + c.gradients_bytes + c.optimizer_bytes + c.activations_bytes
    assert float(c.total_bytes) == pytest.approx(float(parts) + M.FRAMEWORK_RESERVE_BYTES)
    assert float(c.total_bytes) < 79.6 * GIB


def test_llm_foundry_rows_fit_one_kernel_constant_and_check_it_on_other_tables():
    """The A100-80GB table sets TRITON_FLASH_ATTENTION_RATIO (the 2023 stack's attention kernel,
    the only constant the rows set); the A100-40GB and H100 tables only check it."""
    assert fit_triton_attention() == TRITON_FLASH_ATTENTION_RATIO
    assert 0.4 <= TRITON_FLASH_ATTENTION_RATIO <= 0.77  # FlashAttention 2's paper, section 4.1
    cells = {(c.generation, c.framework, c.precision): c for c in training_cells()}
    assert (
        cells[("A100", "LLMFoundry", "bf16")].fitted,
        cells[("A100", "LLMFoundry", "bf16")].checked,
    ) == (61, 78)
    # the H100 table's 37 rows and the 5 MPT steps measured on a lent H100 (train_mpt)
    assert cells[("H100", "LLMFoundry", "bf16")].checked == 37 + 5
    assert cells[("H100", "LLMFoundry", "fp8")].checked == 7
    assert "78 checked runs" in cell_evidence("nvidia-tesla-a100", "LLMFoundry", "bf16")
    rows = {r.id: r for r in throughput_report()}
    errors: dict[str, list[float]] = {"a100-80": [], "a100-40": [], "h100": []}
    long: list[float] = []
    for r in FOUNDRY:
        key = next(k for k in errors if f"-{k}-" in r["id"])
        errors[key].append(rows[r["id"]].error)
        assert (rows[r["id"]].role == "fitted") == (key == "a100-80")
        if int(r["seq"]) >= 16384:
            long.append(rows[r["id"]].error)
    # Fitted and checked within 10 % at the median; the A100-40GB table unbiased; the H100
    # tables still optimistic (docs/llm-training.md says by how much and what is left).
    assert statistics.median(abs(e) for e in errors["a100-80"]) < 0.10
    assert abs(statistics.median(errors["a100-40"])) < 0.05
    assert statistics.median(abs(e) for e in errors["a100-40"]) < 0.10
    assert 0.0 < statistics.median(errors["h100"]) < 0.15
    # With FlashAttention 2's rate instead the long sequences are 45-63 % optimistic. 10.1 %
    # since NVLink rings fill at their link's rate (the A100's GEMM fit fell 3 %, the Triton
    # kernel's rose 5.5 %, and the H100 tables carry it): 7-9 % before.
    assert statistics.median(long) < 0.12


def test_without_the_2023_kernel_the_long_sequences_are_far_off():
    row = _row("foundry-a100-80-bf16-125m-s65536-g8-mb1")
    published = float(row["tokens_per_s_per_gpu"])
    triton = published_layout_search(row, 1600).chosen.tokens_per_second / 8 / published - 1
    flash = {**row, "attention": "FlashAttention2"}
    flash2 = published_layout_search(flash, 1600).chosen.tokens_per_second / 8 / published - 1
    assert abs(triton) < 0.10 < 0.40 < flash2


def test_an_mpt_row_names_its_model():
    row = _row("foundry-a100-80-bf16-30b-s2048-g8-mb3")
    model = _layout_model(row)
    assert (model.layers, model.hidden, model.heads, model.vocab) == (48, 7168, 56, 50368)
    assert model.tied_embeddings and not model.gated_ffn


def test_hidden_data_parallel_seconds_take_their_share_of_the_compute_on_gpus_only(monkeypatch):
    """As the data-parallel model charges it (engine.training): what hides behind the compute
    still takes OVERLAP_INTERFERENCE of its time from it on a GPU; a TPU's collectives run on its
    DMA engines."""
    charged = _fsdp_step("nvidia-h100-80gb", 8, 1)
    tpu = _fsdp_step("tpu-v5p-slice", 4, 4)
    monkeypatch.setattr(L, "OVERLAP_INTERFERENCE", 0.0)
    free = _fsdp_step("nvidia-h100-80gb", 8, 1)
    tpu_free = _fsdp_step("tpu-v5p-slice", 4, 4)
    hidden = _one(charged.data_parallel_seconds) - _one(charged.exposed_data_parallel_seconds)
    assert hidden > 0.1  # MPT-13B at micro-batch 2: a third of the compute
    assert _one(charged.step_seconds) - _one(free.step_seconds) == pytest.approx(0.15 * hidden)
    assert _one(tpu.data_parallel_seconds) - _one(tpu.exposed_data_parallel_seconds) > 0.1
    assert _one(tpu.step_seconds) == _one(tpu_free.step_seconds)
