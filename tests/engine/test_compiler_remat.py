"""A rematerialising compiler (XLA under MaxText) recomputes what its remat policy would save beyond
the chip rather than fail: the layout fits, at the recompute's price (engine.recompute)."""

from dataclasses import replace

import numpy as np
import pytest

from ringmaster.calibration.llm_training import maxtext_model
from ringmaster.engine import llm_training as L
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import (
    RECOMPUTE_FULL,
    RECOMPUTE_MINIMAL,
    RECOMPUTES,
    SHARD_FULL,
)
from ringmaster.engine.recompute import compiler_remat_share, mix_with_full, remat_percent
from ringmaster.planning.layouts import compiler_remat_note

pytestmark = pytest.mark.unit


def test_the_share_is_the_overflow_over_what_the_policy_keeps_beyond_full_by_hand():
    # 100 bytes on a 90-byte chip; the policy keeps 60 of activations, Full 20: 10 of the 40
    assert float(compiler_remat_share(100.0, 60.0, 20.0, 90.0)) == pytest.approx(0.25)
    # the allocator's slack rides on what is freed: 10 of 40 x 1.1
    assert float(compiler_remat_share(100.0, 60.0, 20.0, 90.0, 0.1)) == pytest.approx(10 / 44)
    assert float(compiler_remat_share(80.0, 60.0, 20.0, 90.0)) == 0.0  # it fits as it is
    assert float(compiler_remat_share(100.0, 20.0, 20.0, 90.0)) == 0.0  # Full: nothing to drop
    assert float(compiler_remat_share(200.0, 60.0, 20.0, 90.0)) == 1.0  # Full does not fit either
    assert float(mix_with_full(0.25, 4.0, 8.0)) == pytest.approx(5.0)


def _v5p_64b(framework_name: str = "MaxText", capacity: float | None = None):
    """MaxText's 64B config on a v5p-128 (64 chips): TP 4 x FSDP 16, 12 sequences of 2,048 a
    tensor group (per_device_batch_size 3), under ``recompute`` (src/maxtext/configs/tpu/v5p/
    64b.sh: remat_policy minimal)."""
    host = DEFAULT_CATALOG.host("tpu-v5p-slice", 4)
    hw = L.layout_hardware(
        host, 16, DEFAULT_CATALOG, slice_axes=(4, 4, 4), framework=framework(framework_name)
    )
    if capacity is not None:
        hw = replace(hw, memory_bytes=capacity)
    model = maxtext_model(64)

    def run(recompute: int) -> L.LayoutArrays:
        return L.evaluate_layouts(
            model,
            hw,
            tensor=np.array([4]),
            pipeline=np.array([1]),
            sharding=np.array([SHARD_FULL]),
            micro_batch=np.array([12]),
            recompute=np.array([recompute]),
            global_batch=192,
        )

    return hw, run


def test_minimal_overflows_a_chip_and_xla_recomputes_part_of_it_to_fit():
    # Minimal needs 95.26 GiB (MaxText's fp32 parameters with no bf16 copy beside them; the
    # logits and a rebuilt layer's working set in one XLA buffer), within the 95.74 a v5p lets
    # XLA allocate; on a chip of 95.0 GiB under 1 % of its surplus over Full leaves the memory
    hw, run = _v5p_64b(capacity=95.0 * 2**30)
    assert float(_v5p_64b()[1](RECOMPUTE_MINIMAL).compiler_remat[0]) == 0.0  # the v5p holds it
    minimal, full = run(RECOMPUTE_MINIMAL), run(RECOMPUTE_FULL)
    assert bool(minimal.fits[0]) and bool(full.fits[0])
    share = float(minimal.compiler_remat[0])
    assert 0.0 < share < 0.01
    assert float(minimal.memory.total[0]) == pytest.approx(hw.memory_bytes)
    assert float(full.compiler_remat[0]) == 0.0
    # unbounded, Minimal would need more than the chip; with room it pays no recompute
    _, roomy = _v5p_64b(capacity=4 * hw.memory_bytes)
    free = roomy(RECOMPUTE_MINIMAL)
    assert float(free.memory.total[0]) > hw.memory_bytes
    assert float(free.compiler_remat[0]) == 0.0
    # the time: between Minimal's with room and Full's, at the share of the way
    t_min, t_full, t = (float(x.step_seconds[0]) for x in (free, full, minimal))
    assert t_min < t < t_full
    assert (t - t_min) / (t_full - t_min) == pytest.approx(share, rel=0.05)


def test_a_stack_without_a_rematerialising_compiler_still_refuses_it():
    _, run = _v5p_64b("PyTorch")
    minimal = run(RECOMPUTE_MINIMAL)
    assert not bool(minimal.fits[0])
    assert float(minimal.compiler_remat[0]) == 0.0


def test_the_plan_names_the_share_and_the_policy():
    from ringmaster.calibration.llm_training import published_layout_search, training_points

    row = next(r for r in training_points()["published_layouts"] if r["id"] == "maxtext-v5p-64b")
    # the scale table's 64B on 64 chips: per_device_batch_size 4 (16 a tensor group), not 64b.sh's 3
    search = published_layout_search({**row, "micro_batch": 16, "global_batch": 256})
    chosen = search.chosen
    assert search.fits and chosen.recompute == RECOMPUTES[RECOMPUTE_MINIMAL]
    assert 0.0 < chosen.compiler_remat < 1.0
    assert "Minimal + XLA remat" in chosen.describe()
    note = compiler_remat_note(chosen)
    assert f"{remat_percent(chosen.compiler_remat)} % of what recompute Minimal" in note


def test_a_maxtext_job_plans_it_and_its_status_carries_the_share():
    """MaxText's v5p 64B config at the scale table's per_device_batch_size 4 as a TrainingJob:
    it plans, fits and says how much XLA rematerialises (status.plan.compilerRematShare, which
    the status schema takes)."""
    from ringmaster.api import parse_manifest
    from ringmaster.api.trainingjob import TrainingPlan
    from ringmaster.planning import plan_training
    from ringmaster.planning.layouts import layout_status

    doc = {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "maxtext-64b-v5p-128"},
        "spec": {
            "workers": 16,
            "accelerator": {"type": "tpu-v5p-slice", "perWorker": 4, "topology": "4x4x4"},
            "framework": {"name": "MaxText"},
            "model": {
                "architecture": {
                    "layers": 64,
                    "hiddenSize": 8192,
                    "attentionHeads": 64,
                    "ffnHiddenSize": 28672,
                    "ffnType": "Gated",
                    "vocabSize": 32000,
                    "sequenceLength": 2048,
                }
            },
            "parallelism": {
                "tensor": 4,
                "pipeline": 1,
                "sharding": "Full",
                "microBatchSize": 16,
                "globalBatchSize": 256,
                "activationRecompute": "Minimal",
            },
            "template": {"image": "maxtext:latest"},
        },
    }
    plan = plan_training(parse_manifest(doc).spec)
    assert plan.layout is not None and plan.layout.search.fits
    chosen = plan.layout.chosen
    assert 0.2 < chosen.compiler_remat < 0.35
    status = layout_status(plan.layout)
    assert status["compilerRematShare"] == pytest.approx(chosen.compiler_remat, rel=1e-3)
    assert TrainingPlan.model_validate(status).compiler_remat_share == status["compilerRematShare"]
    assert any("XLA rematerialises" in n for n in plan.prediction.notes)


def test_the_search_leans_on_it_only_where_the_policy_is_given_or_nothing_else_fits():
    """Left to choose (recompute Auto), the search prefers a policy that fits on its own, even
    where None with most of it rematerialised would be priced faster: XLA's rematerialisation
    is what a stated policy gets, not a plan to aim for."""
    from ringmaster.calibration.llm_training import published_layout_search

    row = {
        "id": "maxtext-v5p-llama2-70b",
        "model": "llama-2-70b",
        "seq": 4096,
        "accelerator": "tpu-v5p-slice",
        "gpus": 512,
        "per_host": 4,
        "topology": "8x8x8",
        "global_batch": 2048,
        "micro_batch": 4,
        "tensor": 1,
        "pipeline": 1,
        "context": 1,
        "virtual": 1,
        "sharding": "Full",
        "precision": "bf16",
    }
    auto = published_layout_search({**row, "recompute": "Auto"})
    assert auto.fits and auto.chosen.compiler_remat == 0.0
    stated = published_layout_search({**row, "recompute": "None"})
    assert stated.fits and stated.chosen.compiler_remat > 0.5
    assert stated.chosen.step_seconds < auto.chosen.step_seconds  # priced faster, still not chosen


def test_maxtext_loss_keeps_the_logits_and_their_gradient_not_an_fp32_copy():
    """XLA fuses the cross-entropy: MaxText's published Llama 3.1 8B step on a v6e-256 (32,768
    tokens x 128,256 logits a chip, tpu-recipes training/trillium/Llama3.1-8B-MaxText) fits a
    32 GB chip, which an eager loss's fp32 copies (10 bytes a logit: 42 GB) could not."""
    from ringmaster.engine.llm_memory import (
        BYTES_LOSS_PER_LOGIT,
        BYTES_LOSS_PER_LOGIT_FUSED,
        loss_bytes_per_logit,
    )

    logits = 4 * 8192 * 128256
    chip = 32e9
    assert loss_bytes_per_logit(framework("MaxText")) == BYTES_LOSS_PER_LOGIT_FUSED
    assert BYTES_LOSS_PER_LOGIT_FUSED * logits < chip < BYTES_LOSS_PER_LOGIT * logits
    assert loss_bytes_per_logit(framework("PyTorch")) == BYTES_LOSS_PER_LOGIT  # eager upcast


def test_a_share_that_rounds_to_none_reads_under_one_percent():
    assert remat_percent(0.0035) == "<1"
    assert remat_percent(0.16) == "16"
    assert remat_percent(0.005) == "<1" and remat_percent(0.0051) == "1"
    assert remat_percent(0.0) == "0"
