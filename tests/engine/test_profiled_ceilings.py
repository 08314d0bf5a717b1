"""A profiled pool's ceilings (engine/profiled.py) and their use by the planner: nothing measured
is the base, measured values by hand, E refit on a synthetic grid, the fabric through NCCL's
model, and properties of real plans (a slower profile never plans a faster step; the catalog's
own numbers leave it within 1 %)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmaster.api import load_manifests
from ringmaster.calibration.ceilings import GEMM_MIN_TOKENS
from ringmaster.engine import collectives as C
from ringmaster.engine import llm_training as L
from ringmaster.engine.ceilings import (
    H100_COPY_GBPS,
    Ceilings,
    ceilings_for,
    hbm_ratio,
    matmul_ratio,
)
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.profiled import (
    PROFILE_GEMM_MIN_TOKENS,
    AttentionRate,
    BusRate,
    GemmRate,
    PoolMeasurement,
    PoolSummary,
    ceilings_hbm_ratio,
    ceilings_matmul_ratio,
    profiled_ceilings,
    profiled_nic_bandwidth,
    refit_gemm_efficiency,
    slowest,
)
from ringmaster.planning import active_catalog, plan_inference, plan_training
from ringmaster.planning.catalog import (
    choose_pool_profiles,
    install_pool_profiles,
    installed_pool_profiles,
    with_pool_profiles,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
H100_NAME, A3 = "nvidia-h100-80gb", "a3-highgpu-8g"
ACC = DEFAULT_CATALOG.accelerator(H100_NAME)
MACHINE = DEFAULT_CATALOG.machine(A3)
BASE = ceilings_for(ACC)
WHEN = dt.datetime(2026, 11, 26, 1, 20, tzinfo=dt.UTC)
SHAPES = [
    (m, n, k)
    for m in (1024, 4096, 16384)
    for n, k in ((4096, 4096), (5120, 4096), (28672, 4096), (4096, 14336), (2048, 2048))
] + [(8, 4096, 4096), (256, 8192, 8192)]  # decode sizes: left out of the refit


def shape_rate(
    ce: Ceilings, precision: str, m: int, n: int, k: int, e: float | None = None
) -> float:
    """The shape model, uncapped, at E ``e`` (default the ceilings'), TFLOP/s."""
    e = ce.gemm_efficiency[precision] if e is None else e
    half = ce.gemm_half_dim[precision]
    peak = ce.peak_flops["fp8" if precision == "fp8" else "bf16"]
    return e / (1.0 + half / min(n, k) + half / m) * peak / 1e12


def catalog_summary(
    gemm: float = 1.0,
    hbm: float = 1.0,
    attention: float = 1.0,
    nic: float = 1.0,
    ce: Ceilings = BASE,
    hosts: int = 4,
) -> PoolSummary:
    """What a pool measuring the catalog's own figures times the factors would report."""
    fabric = C.gpu_fabric(ACC, MACHINE, 8)
    fabric = replace(fabric, net_bandwidth=float(np.asarray(fabric.net_bandwidth)) * nic)
    bus = float(C.nccl_collective(C.ALL_REDUCE, 2**32, hosts, 8, fabric).bus_bandwidth) / 1e9
    return PoolSummary(
        hosts=hosts,
        sustained_tflops={p: ce.sustained_flops[p] * gemm / 1e12 for p in ("bf16", "fp8")},
        burst_tflops={p: ce.burst_flops[p] * gemm / 1e12 for p in ("bf16", "fp8")},
        gemm=tuple(
            GemmRate(p, m, n, k, shape_rate(ce, p, m, n, k) * gemm, hosts)
            for p in ("bf16", "fp8")
            for m, n, k in SHAPES
        ),
        attention=tuple(
            AttentionRate(
                kn, d, s, hd, 32, float(ce.attention_flops(kn, d, s, hd)) * attention / 1e12
            )
            for kn in ("flash2", "cudnn")
            for d in ("forward", "backward")
            for s in (2048, 8192, 32768)
            for hd in (64, 128)
        ),
        hbm_gbps=H100_COPY_GBPS / ce.hbm_scale * hbm,
        collectives=(BusRate("all_reduce", 2**32, hosts * 8, hosts, bus),),
    )


def measurement(
    summary: PoolSummary, pool: str = "h100-a", accelerator: str = H100_NAME
) -> PoolMeasurement:
    return PoolMeasurement(pool, A3, accelerator, WHEN, summary)


def numbers(ce: Ceilings) -> dict[str, Any]:
    return {k: v for k, v in vars(ce).items() if k != "evidence"}


# --- the ceilings ----------------------------------------------------------------------------


def test_nothing_measured_is_the_base() -> None:
    got = profiled_ceilings(BASE, measurement(PoolSummary(hosts=3)))
    assert numbers(got) == numbers(BASE)
    assert {k: v for k, v in got.evidence.items() if k != "profile"} == dict(BASE.evidence)
    assert got.evidence["profile"] == "profiled on pool h100-a, 2026-11-26"


def test_sustained_gemm_and_hbm_by_hand() -> None:
    summary = PoolSummary(hosts=3, sustained_tflops={"bf16": 650.0, "fp8": 1200.0}, hbm_gbps=2500.0)
    got = profiled_ceilings(BASE, measurement(summary))
    assert got.sustained_flops["bf16"] == 650e12
    assert got.sustained_flops["fp8"] == 1200e12
    # fp8 with fast accumulation keeps the H100's ratio to fp8 (1360 / 1289.7)
    assert got.sustained_flops["fp8fast"] == pytest.approx(1200e12 * 1360.0 / 1289.7)
    assert got.hbm_scale == pytest.approx(3034.0 / 2500.0)
    assert got.burst_flops == BASE.burst_flops  # not measured: the base's
    assert got.gemm_efficiency == BASE.gemm_efficiency and got.attention == BASE.attention
    ev = "profiled on pool h100-a, 2026-11-26"
    assert got.evidence["matmul"] == ev and got.evidence["memory-bound"] == ev
    assert got.evidence["attention"] == BASE.evidence["attention"]


def test_a_burst_is_never_below_the_measured_sustained_rate() -> None:
    got = profiled_ceilings(BASE, measurement(PoolSummary(sustained_tflops={"bf16": 800.0})))
    assert got.burst_flops["bf16"] == got.sustained_flops["bf16"] == 800e12


def test_fp16_stands_for_the_16_bit_rate_and_partial_evidence_says_so() -> None:
    got = profiled_ceilings(BASE, measurement(PoolSummary(sustained_tflops={"fp16": 600.0})))
    assert got.sustained_flops["bf16"] == 600e12
    assert got.sustained_flops["fp8"] == BASE.sustained_flops["fp8"]
    assert got.evidence["matmul"].startswith(
        "profiled on pool h100-a, 2026-11-26 (bf16); the rest "
    )


def test_refit_reproduces_a_synthetic_grid_with_the_base_k() -> None:
    for precision, e in (("bf16", 0.7), ("fp8", 0.65)):
        grid = [
            GemmRate(precision, m, n, k, shape_rate(BASE, precision, m, n, k, e))
            for m, n, k in SHAPES
        ]
        peak = BASE.peak_flops[precision]
        assert refit_gemm_efficiency(grid, peak, BASE.gemm_half_dim[precision]) == pytest.approx(e)
        got = profiled_ceilings(BASE, measurement(PoolSummary(gemm=tuple(grid))))
        assert got.gemm_efficiency[precision] == pytest.approx(e)
        assert got.gemm_half_dim == BASE.gemm_half_dim
    fast = got.gemm_efficiency["fp8fast"]
    assert fast == pytest.approx(
        0.65 * BASE.gemm_efficiency["fp8fast"] / BASE.gemm_efficiency["fp8"]
    )
    assert PROFILE_GEMM_MIN_TOKENS == GEMM_MIN_TOKENS


def test_decode_sized_gemms_alone_change_nothing() -> None:
    grid = (GemmRate("bf16", 8, 4096, 4096, 5.0),)
    got = profiled_ceilings(BASE, measurement(PoolSummary(gemm=grid)))
    assert got.gemm_efficiency == BASE.gemm_efficiency
    assert got.evidence["matmul"] == BASE.evidence["matmul"]


def test_attention_scaled_at_the_measured_points() -> None:
    points = tuple(
        AttentionRate(
            "flash2",
            "forward",
            s,
            128,
            32,
            float(BASE.attention_flops("flash2", "forward", s, 128)) * f / 1e12,
        )
        for s, f in ((2048, 0.8), (8192, 0.9))
    )
    got = profiled_ceilings(BASE, measurement(PoolSummary(attention=points)))
    e, s0, d0 = BASE.attention[("flash2", "forward")]
    assert got.attention[("flash2", "forward")] == pytest.approx((e * np.sqrt(0.8 * 0.9), s0, d0))
    assert got.attention[("cudnn", "forward")] == BASE.attention[("cudnn", "forward")]
    assert got.evidence["attention"].startswith(
        "profiled on pool h100-a, 2026-11-26 (flash2 forward)"
    )


def test_the_catalogs_own_numbers_are_the_catalog() -> None:
    got = profiled_ceilings(BASE, measurement(catalog_summary()))
    for name in ("sustained_flops", "burst_flops", "gemm_efficiency"):
        assert getattr(got, name) == pytest.approx(getattr(BASE, name))
    for key, value in BASE.attention.items():
        assert got.attention[key] == pytest.approx(value)
    assert got.hbm_scale == pytest.approx(BASE.hbm_scale)


@pytest.mark.parametrize("name", sorted(DEFAULT_CATALOG.accelerators))
def test_serving_ratios_from_the_catalogs_ceilings_are_the_published_ones(name: str) -> None:
    acc = DEFAULT_CATALOG.accelerator(name)
    ce = ceilings_for(acc)
    for precision in ("bf16", "fp8", "int8", "fp4"):
        assert ceilings_matmul_ratio(ce, name, precision) == pytest.approx(
            matmul_ratio(name, precision)
        )
    assert ceilings_hbm_ratio(ce, name, acc.memory_bandwidth) == pytest.approx(hbm_ratio(name))


# --- the fabric ------------------------------------------------------------------------------


def test_nic_from_the_all_reduce_through_nccls_model() -> None:
    catalog_nic = MACHINE.nic_bandwidth * float(C.network_efficiency("tcpx", 8))
    for hosts in (2, 4, 16):
        for factor in (1.0, 0.6):
            fit = profiled_nic_bandwidth(catalog_summary(nic=factor, hosts=hosts), ACC, MACHINE)
            assert fit.nic_bandwidth == pytest.approx(catalog_nic * factor, rel=1e-3), hosts
    # on 2 hosts NCCL's NVLS tree carries half the message across: busbw near twice the NICs
    two = catalog_summary(hosts=2).collectives[0]
    assert two.bus_gbps > 1.8 * catalog_nic / 1e9


def test_nic_stays_the_catalogs_where_the_profile_cannot_tell() -> None:
    one_host = PoolSummary(collectives=(BusRate("all_reduce", 2**32, 8, 1, 400.0),))
    assert profiled_nic_bandwidth(one_host, ACC, MACHINE).nic_bandwidth is None
    small = PoolSummary(collectives=(BusRate("all_reduce", 2**20, 16, 2, 20.0),))
    assert "latency-bound" in profiled_nic_bandwidth(small, ACC, MACHINE).words
    nvlink = PoolSummary(collectives=(BusRate("all_reduce", 2**32, 16, 2, 4000.0),))
    fit = profiled_nic_bandwidth(nvlink, ACC, MACHINE)
    assert fit.nic_bandwidth is None and "links inside a host" in fit.words
    gb200 = DEFAULT_CATALOG.machine("a4x-highgpu-4g")
    rack = PoolSummary(collectives=(BusRate("all_reduce", 2**32, 16, 4, 300.0),))
    acc = DEFAULT_CATALOG.accelerator("nvidia-gb200")
    assert "NVLink domain" in profiled_nic_bandwidth(rack, acc, gb200).words


# --- planning on a profile -------------------------------------------------------------------


@pytest.fixture
def clean_profiles() -> Iterator[None]:
    install_pool_profiles([])
    yield
    install_pool_profiles([])


def llama_spec() -> Any:
    return load_manifests((EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml").read_text())[0].spec


def step(summary: PoolSummary | None) -> float:
    catalog = DEFAULT_CATALOG
    if summary is not None:
        catalog = with_pool_profiles(catalog, choose_pool_profiles([measurement(summary)]))
    report = plan_training(llama_spec(), machine_type=A3, catalog=catalog)
    return float(report.chosen.step_seconds)


@cache
def catalog_step() -> float:
    """The step on a profile of the catalog's own numbers."""
    return step(catalog_summary())


def test_the_catalogs_own_numbers_leave_the_step_within_1_percent() -> None:
    assert catalog_step() == pytest.approx(step(None), rel=0.01)


@pytest.mark.parametrize(
    "factors",
    [
        {"gemm": 0.8},
        {"gemm": 0.95},
        {"hbm": 0.7},
        {"attention": 0.85},
        {"nic": 0.5},
        {"gemm": 0.9, "hbm": 0.9, "attention": 0.9, "nic": 0.9},
    ],
    ids=str,
)
def test_a_slower_profile_never_plans_a_faster_step(factors: dict[str, float]) -> None:
    same = catalog_step()
    slower = step(catalog_summary(**factors))
    assert slower >= same * (1 - 1e-9)
    if set(factors) - {"nic"}:  # the example's exposed reduction is small: compute shows it
        assert slower > same * 1.01


def test_slower_gemms_alone_never_plan_faster_steps() -> None:
    """The rates, the shapes and the bursts each lowered apart, as a pool might report them."""
    base = catalog_step()
    full = catalog_summary()
    for scaled in (
        replace(full, sustained_tflops={p: v * 0.85 for p, v in full.sustained_tflops.items()}),
        replace(full, burst_tflops={p: v * 0.85 for p, v in full.burst_tflops.items()}),
        replace(full, gemm=tuple(replace(g, tflops=g.tflops * 0.85) for g in full.gemm)),
    ):
        assert step(scaled) >= base * (1 - 1e-9)


FACTOR = st.floats(0.5, 1.0)


@settings(max_examples=25, deadline=None)
@given(sustained=FACTOR, burst=FACTOR, shapes=FACTOR, attention=FACTOR, hbm=FACTOR, nic=FACTOR)
def test_any_profile_below_the_catalog_plans_no_faster_step(
    sustained: float, burst: float, shapes: float, attention: float, hbm: float, nic: float
) -> None:
    """Each measured quantity at its own fraction of the catalog's: the step is never faster."""
    full = catalog_summary(attention=attention, hbm=hbm, nic=nic)
    summary = replace(
        full,
        sustained_tflops={p: v * sustained for p, v in full.sustained_tflops.items()},
        burst_tflops={p: v * burst for p, v in full.burst_tflops.items()},
        gemm=tuple(replace(g, tflops=g.tflops * shapes) for g in full.gemm),
    )
    assert step(summary) >= catalog_step() * (1 - 1e-9)


def test_the_plan_names_the_profile_and_the_step_fit_is_the_profiles() -> None:
    catalog = with_pool_profiles(
        DEFAULT_CATALOG, choose_pool_profiles([measurement(catalog_summary(0.9))])
    )
    status = plan_training(llama_spec(), machine_type=A3, catalog=catalog).to_status()
    assert status.evidence is not None
    assert "profiled on pool h100-a, 2026-11-26: GEMMs bf16/fp8" in status.evidence
    # an A100 pool measured: the step-level GEMM fit of the catalog's A100 no longer applies
    a100 = DEFAULT_CATALOG.host("nvidia-tesla-a100", 8)
    summary = PoolSummary(sustained_tflops={"bf16": 250.0})
    profile = PoolMeasurement("a100-a", a100.machine.name, "nvidia-tesla-a100", WHEN, summary)
    plain = L.layout_hardware(a100, 2, DEFAULT_CATALOG)
    assert plain.step_fit == L.GEMM_STEP_FIT["ampere"]
    hw = L.layout_hardware(
        a100, 2, with_pool_profiles(DEFAULT_CATALOG, choose_pool_profiles([profile]))
    )
    assert (hw.step_fit, hw.step_fit_source) == (1.0, "profiled on pool a100-a, 2026-11-26")
    assert hw.ceilings.sustained_flops["bf16"] == 250e12


def test_a_profile_of_another_accelerator_is_not_used() -> None:
    other = measurement(catalog_summary(0.5), accelerator="nvidia-h200-141gb")
    catalog = with_pool_profiles(DEFAULT_CATALOG, choose_pool_profiles([other]))
    assert catalog.profile(DEFAULT_CATALOG.host(H100_NAME, 8, A3)) is None
    hw = L.layout_hardware(DEFAULT_CATALOG.host(H100_NAME, 8, A3), 2, catalog)
    assert hw.profile_evidence == "" and hw.ceilings == BASE


def test_the_slowest_pool_of_a_machine_type_is_used_and_named() -> None:
    fast = measurement(catalog_summary(1.0), pool="h100-b")
    slow = measurement(catalog_summary(0.9), pool="h100-a")
    chosen = slowest([fast, slow])
    assert chosen.pool == "h100-a" and chosen.alongside == ("h100-b",)
    assert "the slowest of the profiled pools of a3-highgpu-8g: also h100-b" in chosen.evidence_long
    # the reference step first, where every pool measured it (its whole step is the slower)
    fast = replace(fast, summary=replace(fast.summary, reference_tokens_per_second=1.0e5))
    assert slowest([fast, slow]).pool == "h100-a"  # only one measured it: GEMMs decide
    slow = replace(slow, summary=replace(slow.summary, reference_tokens_per_second=1.1e5))
    assert slowest([fast, slow]).pool == "h100-b"


def test_installed_profiles_compose_over_the_catalog(clean_profiles: None) -> None:
    assert active_catalog() is DEFAULT_CATALOG
    profile = measurement(catalog_summary(0.9))
    assert install_pool_profiles({"default/h100-a": profile}) is True
    assert install_pool_profiles({"default/h100-a": profile}) is False  # nothing changed
    assert installed_pool_profiles() == {(A3, H100_NAME): profile}
    active = active_catalog()
    assert active.profile(active.host(H100_NAME, 8, A3)) == profile
    assert active.accelerators is DEFAULT_CATALOG.accelerators
    assert active_catalog() is active  # composed once per change
    status = plan_training(llama_spec(), machine_type=A3).to_status()
    assert status.evidence is not None and "profiled on pool h100-a" in status.evidence
    assert install_pool_profiles([]) is True
    assert active_catalog() is DEFAULT_CATALOG


def test_serving_reads_the_profile() -> None:
    spec = load_manifests(
        (EXAMPLES / "inferenceendpoint-llama31-405b-bf16-2x-h100.yaml").read_text()
    )[0].spec
    before = plan_inference(spec, catalog=DEFAULT_CATALOG)
    machine = before.prediction.machine_type
    summary = catalog_summary(gemm=0.8, hbm=0.8)
    profile = PoolMeasurement("h100-s", machine, H100_NAME, WHEN, summary)
    after = plan_inference(
        spec, catalog=with_pool_profiles(DEFAULT_CATALOG, choose_pool_profiles([profile]))
    )
    assert "profiled on pool h100-s, 2026-11-26" in after.prediction.evidence
    assert any("GEMMs at 0.8x, HBM at 0.8x the catalog's" in n for n in after.prediction.notes)
    a, b = after.prediction, before.prediction
    assert a.offline_output_tokens_per_second < b.offline_output_tokens_per_second
