"""JAX's GPU settings in a job's environment (engine.jax_runtime): the memory pool XLA plans in,
XLA's rematerialisation switched off, every other XLA_* variable listed; a bad fraction refused
by name; a stack that does not run XLA on a GPU unchanged."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.engine import llm_training as L
from ringmaster.engine.frameworks import framework
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.jax_runtime import REMAT_OFF, jax_hardware, jax_settings
from ringmaster.engine.llm_layout_names import RECOMPUTES, RING, SHARD_FULL
from ringmaster.engine.transformer import KNOWN_TRANSFORMERS
from ringmaster.engine.units import GIB
from ringmaster.planning import PlanError, plan_training

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _h100(name: str = "MaxText") -> L.LayoutHardware:
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8, "a3-highgpu-8g")
    return L.layout_hardware(host, 1, DEFAULT_CATALOG, framework=framework(name))


def test_the_settings_read_from_the_environment() -> None:
    s = jax_settings({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.85", "XLA_FLAGS": f"--a {REMAT_OFF}"})
    assert s.memory_fraction == 0.85 and s.remat_disabled and s.preallocate
    # the new name wins where both are set
    both = {"XLA_CLIENT_MEM_FRACTION": ".9", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}
    assert jax_settings(both).memory_fraction == 0.9
    off = jax_settings({"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_OTHER": "1"})
    assert off.memory_fraction is None and not off.preallocate and off.other == ("XLA_OTHER",)
    for bad in ("1.5", "0", "most"):
        with pytest.raises(ValueError, match="XLA_CLIENT_MEM_FRACTION"):
            jax_settings({"XLA_CLIENT_MEM_FRACTION": bad})


def test_a_stated_fraction_is_the_pool_and_nothing_is_reserved_beside_it() -> None:
    hw = _h100()
    pooled, notes = jax_hardware(hw, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.85"})
    assert pooled.memory_bytes == pytest.approx(0.85 * hw.memory_bytes)
    assert pooled.runtime_reserve_bytes == 0.0 and hw.runtime_reserve_bytes > 0.0
    assert any(
        "0.85 of the GPU" in n and f"{0.85 * hw.memory_bytes / GIB:.1f} GiB" in n for n in notes
    )
    default, notes = jax_hardware(hw, {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert default.memory_bytes == hw.memory_bytes
    assert any("default memory pool" in n for n in notes)
    assert any("allocated as the step needs it" in n for n in notes)
    platform, notes = jax_hardware(hw, {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"})
    assert platform.memory_bytes == hw.memory_bytes and any("no pool" in n for n in notes)


def test_the_flag_that_turns_xla_s_remat_off_refuses_an_overflowing_policy() -> None:
    """Llama 2 7B on 8 H100 under Minimal at 8 sequences a GPU overflows the pool: XLA would
    rematerialise part of it to fit; with its pass off it does not fit."""
    model = KNOWN_TRANSFORMERS["llama-2-7b"]
    env = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.85"}

    def run(hw: L.LayoutHardware) -> L.LayoutArrays:
        return L.evaluate_layouts(
            model,
            hw,
            global_batch=64,
            tensor=np.array([1]),
            pipeline=np.array([1]),
            sharding=np.array([SHARD_FULL]),
            micro_batch=np.array([8]),
            recompute=np.array([RECOMPUTES.index("Minimal")]),
            strategy=RING,
        )

    on, _ = jax_hardware(_h100(), env)
    off, notes = jax_hardware(_h100(), {**env, "XLA_FLAGS": REMAT_OFF})
    assert not off.framework.compiler_remat and any(REMAT_OFF in n for n in notes)
    rescued, refused = run(on), run(off)
    assert bool(rescued.fits[0]) and float(rescued.compiler_remat[0]) > 0.0
    assert not bool(refused.fits[0]) and float(refused.compiler_remat[0]) == 0.0


def test_a_stack_that_does_not_run_xla_on_a_gpu_is_unchanged_and_told_so() -> None:
    env = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}
    titan = _h100("Torchtitan")
    same, notes = jax_hardware(titan, env)
    assert same == titan and "no effect on the plan on framework Torchtitan" in notes[0]
    host = DEFAULT_CATALOG.host("tpu-v5-lite-podslice", 4)
    tpu = L.layout_hardware(host, 1, DEFAULT_CATALOG)
    assert jax_hardware(tpu, env)[0] == tpu
    assert jax_hardware(titan, {}) == (titan, [])


def _maxtext_gpu_job(env: dict[str, str]) -> dict:
    doc = copy.deepcopy(
        yaml.safe_load((EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml").read_text())
    )
    doc["spec"]["framework"] = {"name": "MaxText"}
    doc["spec"]["template"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return doc


def test_the_plan_takes_the_pool_and_refuses_a_bad_fraction_by_name() -> None:
    free = plan_training(parse_manifest(_maxtext_gpu_job({})).spec)
    pooled = plan_training(
        parse_manifest(_maxtext_gpu_job({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"})).spec
    )
    assert pooled.layout is not None and free.layout is not None
    assert pooled.layout.chosen.capacity_bytes == pytest.approx(
        0.5 * free.layout.hardware.memory_bytes
    )
    assert any("JAX's memory pool: 0.5 of the GPU" in n for n in pooled.prediction.notes)
    with pytest.raises(
        PlanError, match=re.escape("spec.template.env: XLA_PYTHON_CLIENT_MEM_FRACTION")
    ):
        plan_training(
            parse_manifest(_maxtext_gpu_job({"XLA_PYTHON_CLIENT_MEM_FRACTION": "2"})).spec
        )


def test_what_the_plan_does_not_read_is_a_warning_naming_it() -> None:
    from ringmaster.planning.plausibility import training_warnings

    env = {
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9",
        "XLA_FLAGS": f"--xla_gpu_enable_latency_hiding_scheduler=true {REMAT_OFF}",
        "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
    }
    spec = parse_manifest(_maxtext_gpu_job(env)).spec
    flagged = [
        w for w in training_warnings(spec, plan_training(spec)) if w.reason == "XlaSettingIgnored"
    ]
    assert len(flagged) == 1 and flagged[0].field == "spec.template.env"
    message = flagged[0].message
    assert "XLA_FLAGS --xla_gpu_enable_latency_hiding_scheduler" in message
    assert "XLA_PYTHON_CLIENT_ALLOCATOR=platform" in message
    assert "rematerialization" not in message and "MEM_FRACTION" not in message
    # the pool and the remat flag alone are read: no warning
    read = {k: env[k] for k in ("XLA_PYTHON_CLIENT_MEM_FRACTION",)} | {"XLA_FLAGS": REMAT_OFF}
    quiet = parse_manifest(_maxtext_gpu_job(read)).spec
    assert not [
        w for w in training_warnings(quiet, plan_training(quiet)) if w.reason == "XlaSettingIgnored"
    ]
