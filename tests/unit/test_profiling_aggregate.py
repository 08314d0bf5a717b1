"""A pool's results together (profiling/aggregate.py): medians and flagged hosts by hand, the
status it writes and reads back, and `ringmaster plan --profile` on a fixture PoolProfile."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.cli import main
from ringmaster.engine.ceilings import H100_COPY_GBPS, ceilings_for
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.profiling.aggregate import (
    DEGRADED_THRESHOLD,
    MAX_STATUS_HOSTS,
    ProfileError,
    flag_reasons,
    measurement_from_object,
    measurement_from_results,
    measurement_from_status,
    measurements_from_document,
    summarize,
    summary_json,
)
from ringmaster.profiling.results import HostResult, parse_result

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data"
PROFILE = DATA / "poolprofile-h100-a.yaml"
RESULTS = DATA / "poolprofile-h100-a-results.json"
LLAMA = Path(__file__).resolve().parents[2] / "examples" / "trainingjob-llama3-8b-fsdp-h100.yaml"
H100 = ceilings_for(DEFAULT_CATALOG.accelerator("nvidia-h100-80gb"))
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 4096), (2048, 5120, 4096)]
DEVICE = {"name": "NVIDIA H100 80GB HBM3", "count": 8, "memoryBytes": 85520809984, "torch": "2.11"}


def host(
    node: str,
    sustained: float | None = 700.0,
    *,
    shapes: float | None = None,
    hbm: float | None = 3000.0,
    step_seconds: float | None = None,
    slow_row: float = 1.0,
    **extra: Any,
) -> HostResult:
    """One host's result: ``shapes`` scales every GEMM shape's rate (1000 TFLOP/s x the shape's
    index + 1, so the shapes differ), ``slow_row`` only the first shape's."""
    body: dict[str, Any] = {"version": 1, "node": node, "device": DEVICE}
    if sustained is not None:
        body["sustainedTflops"] = {"bf16": sustained}
    if shapes is not None:
        body["gemm"] = [
            {
                "precision": "bf16",
                "m": m,
                "n": n,
                "k": k,
                "seconds": 0.001,
                "tflops": 100.0 * (i + 1) * shapes * (slow_row if i == 0 else 1.0),
            }
            for i, (m, n, k) in enumerate(SHAPES)
        ]
    if hbm is not None:
        body["hbmGBps"] = hbm
    if step_seconds is not None:
        body["referenceStep"] = {
            "parameters": 124_000_000,
            "tokens": 16384,
            "seconds": step_seconds,
        }
    body.update(extra)
    return parse_result(body)


def pool(*results: HostResult) -> dict[str, HostResult]:
    return {r.node: r for r in results}


# --- medians and flags by hand ---------------------------------------------------------------


def test_three_hosts_medians_and_a_slow_host() -> None:
    s = summarize(pool(host("a", 700.0), host("b", 710.0), host("c", 560.0, hbm=2990.0)))
    assert s.sustained_tflops == {"bf16": 700.0}
    assert s.hbm_gbps == 3000.0  # 2990, 3000, 3000
    assert s.hosts == 3 and s.nodes == ("a", "b", "c")
    assert [(f.node, f.measurement) for f in s.flagged] == [("c", "gemm.sustained.bf16")]
    flag = s.flagged[0]
    assert (flag.value, flag.median) == (560.0, 700.0)
    assert flag.shortfall == pytest.approx(0.2)  # 1 - 560 / 700
    assert s.flagged_hosts == ("c",)
    assert flag_reasons(s) == {
        "c": "gemm.sustained.bf16 560 TFLOP/s, 20.0% below the pool's median 700"
    }


def test_four_hosts_median_is_the_middle_pair() -> None:
    s = summarize(pool(host("a", 700.0), host("b", 702.0), host("c", 698.0), host("d", 559.2)))
    assert s.sustained_tflops["bf16"] == 699.0  # (698 + 700) / 2
    (flag,) = s.flagged
    assert flag.node == "d" and flag.median == 699.0
    assert flag.shortfall == pytest.approx(1 - 559.2 / 699.0)  # 0.2


def test_five_hosts_20_percent_below_is_flagged_5_percent_is_not() -> None:
    s = summarize(
        pool(
            host("a", 700.0),
            host("b", 705.0),
            host("c", 695.0),
            host("d", 665.0),  # 5 % below the median (700): within the spread, not flagged
            host("e", 560.0),  # 20 % below: flagged
        )
    )
    assert s.sustained_tflops["bf16"] == 695.0  # 560, 665, 695, 700, 705
    assert [f.node for f in s.flagged] == ["e"]
    assert s.flagged[0].shortfall == pytest.approx(1 - 560 / 695)


def test_the_threshold_is_strict_and_given() -> None:
    hosts = pool(host("a", 700.0), host("b", 700.0), host("c", 630.0))  # exactly 10 % below
    assert summarize(hosts).flagged == ()
    assert [f.node for f in summarize(hosts, threshold=0.05).flagged] == ["c"]
    assert DEGRADED_THRESHOLD == 0.10
    with pytest.raises(ValueError, match="threshold"):
        summarize(hosts, threshold=1.5)


def test_two_hosts_flag_nothing_and_say_so() -> None:
    s = summarize(pool(host("a", 700.0), host("b", 400.0)))
    assert s.sustained_tflops["bf16"] == 550.0  # the median of two is their mean
    assert s.flagged == ()
    assert "2 hosts measured: none flagged" in s.note and "at least 3" in s.note


def test_a_measurement_on_fewer_than_three_hosts_flags_no_one() -> None:
    s = summarize(
        pool(host("a", 700.0, hbm=None), host("b", 700.0, hbm=3000.0), host("c", 700.0, hbm=1000.0))
    )
    assert s.flagged == () and s.hbm_gbps == 2000.0
    assert "too few hosts to flag on hbm" in s.note


def test_gemm_shapes_compare_a_hosts_median_over_shapes() -> None:
    s = summarize(
        pool(
            host("a", None, shapes=1.0),
            host("b", None, shapes=1.02),
            host("c", None, shapes=0.98),
            host("d", None, shapes=0.8),  # every shape 20 % slow: flagged
            host("e", None, shapes=1.0, slow_row=0.7),  # one row 30 % slow: a single row is not
        )
    )
    first = next(g for g in s.gemm if (g.m, g.n, g.k) == SHAPES[0])
    assert first.tflops == 98.0 and first.hosts == 5  # 70, 80, 98, 100, 102
    assert [(f.node, f.measurement) for f in s.flagged] == [("d", "gemm.bf16")]
    d = s.flagged[0]
    assert d.median == pytest.approx(1.0) and d.value == pytest.approx(0.8)


def test_reference_step_is_a_rate() -> None:
    s = summarize(
        pool(
            host("a", step_seconds=0.08),
            host("b", step_seconds=0.081),
            host("c", step_seconds=0.1),
        )
    )
    assert s.reference_tokens_per_second == pytest.approx(16384 / 0.081)
    assert s.reference_parameters == 124_000_000
    (flag,) = s.flagged
    assert (flag.node, flag.measurement, flag.unit) == ("c", "referenceStep", "tokens/s")
    assert flag.shortfall == pytest.approx(1 - 0.081 / 0.1)


def test_failures_are_listed_apart() -> None:
    failed = parse_result({"version": 1, "node": "x", "failure": "no module named torch"})
    s = summarize(pool(host("a"), host("b"), host("c"), failed))
    assert s.failures == {"x": "no module named torch"}
    assert s.hosts == 3 and "x" not in s.nodes and s.flagged == ()
    assert "1 failed" in s.note


def test_collectives_by_op_and_size_flag_no_one() -> None:
    ar = {"op": "all_reduce", "bytes": 2**30, "ranks": 24, "hosts": 3, "busGBps": 90.0}
    a2a = {"op": "all_to_all", "bytes": 2**30, "ranks": 24, "hosts": 3, "busGBps": 20.0}
    s = summarize(pool(host("a", collectives=[ar, a2a]), host("b"), host("c")))
    assert [(c.op, c.bytes, c.bus_gbps) for c in s.collectives] == [
        ("all_reduce", 2**30, 90.0),
        ("all_to_all", 2**30, 20.0),
    ]
    assert s.medians()["collective.all_reduce.1073741824B.24ranks.3hosts"] == 90.0


# --- status.measured -------------------------------------------------------------------------


def test_summary_json_beside_the_catalog() -> None:
    s = summarize(pool(host("a", 690.0, hbm=2900.0), host("b", 700.0), host("c", 560.123)))
    out = summary_json(s, H100)
    sustained = out["gemm"]["sustainedTFLOPS"]["bf16"]
    assert sustained == {"measured": 690.0, "catalog": 706.6, "ratio": round(690 / 706.6, 4)}
    assert out["hbmGBps"] == {"measured": 3000.0, "catalog": 3034.0, "ratio": 0.9888}
    assert H100_COPY_GBPS / H100.hbm_scale == pytest.approx(3034.0)
    (flag,) = out["flagged"]
    assert flag["node"] == "c" and flag["value"] == 560.1  # 4 significant digits
    assert flag["measurement"] == "gemm.sustained.bf16" and flag["below"] == [flag["measurement"]]
    assert flag["shortfall"] == round(1 - 560.123 / 690.0, 4)
    assert out["hosts"] == 3 and out["failures"] == []
    assert "catalog" not in summary_json(s, None)["gemm"]["sustainedTFLOPS"]["bf16"]


def test_summary_json_shapes_and_attention_at_the_catalogs_points() -> None:
    att = [
        {"kernel": "flash2", "direction": "forward", "sequence": 4096, "headDim": 128,
         "heads": 32, "tflops": 300.0},
    ]  # fmt: skip
    s = summarize(pool(host("a", shapes=1.0, attention=att), host("b"), host("c")))
    out = summary_json(s, H100)
    shape = out["gemm"]["shapes"][0]
    modelled = float(
        H100.gemm_flops("bf16", min(shape["n"], shape["k"]), shape["m"], sustained=False)
    )
    assert shape["catalogTFLOPS"] == float(f"{modelled / 1e12:.4g}")
    (row,) = out["attention"]
    modelled = float(H100.attention_flops("flash2", "forward", 4096, 128))
    assert row["catalogTFLOPS"] == float(f"{modelled / 1e12:.4g}")
    assert row["ratio"] == float(f"{300e12 / modelled:.4g}") and row["headDim"] == 128


def test_status_lists_a_bounded_number_of_hosts() -> None:
    hosts = [host(f"n{i:04d}", 700.0) for i in range(MAX_STATUS_HOSTS + 40)]
    hosts += [host(f"slow{i:04d}", 500.0) for i in range(MAX_STATUS_HOSTS + 10)]
    out = summary_json(summarize(pool(*hosts)), H100)
    assert len(out["flagged"]) == MAX_STATUS_HOSTS and out["notListed"] == 10


def test_the_status_reads_back() -> None:
    att = [{"kernel": "cudnn", "direction": "backward", "sequence": 8192, "headDim": 128,
            "heads": 32, "tflops": 480.0}]  # fmt: skip
    ar = {"op": "all_reduce", "bytes": 2**32, "ranks": 24, "hosts": 3, "busGBps": 88.24}
    s = summarize(
        pool(
            host("a", 700.0, shapes=1.0, step_seconds=0.08, attention=att, collectives=[ar]),
            host("b", 702.0, shapes=1.0, step_seconds=0.08),
            host("c", 500.0, shapes=1.0, step_seconds=0.08),
        )
    )
    status = {
        "machineType": "a3-highgpu-8g",
        "accelerator": "nvidia-h100-80gb",
        "profiledAt": "2026-11-26T01:20:00Z",
        "measured": summary_json(s, H100),
    }
    m = measurement_from_status("h100-a", status)
    assert m.evidence == "profiled on pool h100-a, 2026-11-26"
    assert m.profiled_at == dt.datetime(2026, 11, 26, 1, 20, tzinfo=dt.UTC)
    back = m.summary
    assert back.medians() == pytest.approx(s.medians(), rel=5e-4)  # 4 significant digits
    assert back.hosts == 3 and back.flagged_hosts == ("c",)
    assert back.reference_parameters == 124_000_000


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"machineType": None}, "status.machineType: expected a non-empty string"),
        ({"profiledAt": "yesterday"}, "status.profiledAt: not an RFC 3339 time"),
        ({"measured": None}, "status.measured: nothing measured yet"),
        (
            {"measured": {"hbmGBps": {"measured": -1}}},
            "status.measured.hbmGBps.measured: expected a positive number",
        ),
        (
            {"measured": {"gemm": {"shapes": [{"precision": "bf16", "m": 1.5}]}}},
            "status.measured.gemm.shapes[0].m: expected a positive integer",
        ),
    ],
)
def test_a_bad_status_names_its_field(change: dict[str, Any], message: str) -> None:
    status = {
        "machineType": "a3-highgpu-8g",
        "accelerator": "nvidia-h100-80gb",
        "profiledAt": "2026-11-26T01:20:00Z",
        "measured": {"hosts": 3},
        **change,
    }
    with pytest.raises(ProfileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        measurement_from_status("h100-a", status)


def test_the_fixture_object_and_its_results_agree() -> None:
    obj = yaml.safe_load(PROFILE.read_text())
    m = measurement_from_object(obj)
    assert (m.pool, m.machine_type, m.accelerator) == (
        "h100-a",
        "a3-highgpu-8g",
        "nvidia-h100-80gb",
    )
    direct = measurement_from_results(
        json.loads(RESULTS.read_text()),
        pool="h100-a",
        machine_type="a3-highgpu-8g",
        catalog=DEFAULT_CATALOG,
    )
    assert direct.accelerator == "nvidia-h100-80gb" and direct.summary.flagged_hosts == (
        "gke-h100-a-4",
    )
    assert m.summary.medians() == pytest.approx(direct.summary.medians(), rel=5e-4)
    with pytest.raises(ProfileError, match="kind"):
        measurement_from_object({**obj, "kind": "TrainingJob"})
    listed = measurements_from_document(
        {"apiVersion": "v1", "kind": "List", "items": [obj]}, where="x", catalog=DEFAULT_CATALOG
    )
    assert listed == [m]


def test_results_need_a_machine_type_with_its_own_accelerator() -> None:
    bodies = json.loads(RESULTS.read_text())
    with pytest.raises(ProfileError, match="--profile-machine-type"):
        measurements_from_document(bodies, where="r.json", catalog=DEFAULT_CATALOG)
    with pytest.raises(ProfileError, match="carries no accelerator of its own"):
        measurement_from_results(
            bodies, pool="p", machine_type="n1-standard-8", catalog=DEFAULT_CATALOG
        )
    with pytest.raises(ProfileError, match=r"results\[0\]: .*hbmGBps"):
        measurement_from_results(
            [{**bodies[0], "hbmGBps": 1e9}],
            pool="p",
            machine_type="a3-highgpu-8g",
            catalog=DEFAULT_CATALOG,
        )


# --- ringmaster plan --profile ---------------------------------------------------------------


def plan(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_with_a_profile_prints_its_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    code, before, _ = plan(capsys, LLAMA, "-o", "json")
    assert code == 0
    code, out, err = plan(capsys, LLAMA, "--profile", PROFILE)
    assert code == 0, err
    assert "profiled on pool h100-a, 2026-11-26: GEMMs bf16/fp8" in out
    code, after, _ = plan(capsys, LLAMA, "--profile", PROFILE, "-o", "json")
    doc, base = json.loads(after), json.loads(before)
    assert "profiled on pool h100-a, 2026-11-26" in doc["evidence"]
    assert "profiled" not in base["evidence"]
    # the fixture's pool measured a few percent below the catalog: a slower step
    assert doc["strategies"]["Ring"]["stepSeconds"] > base["strategies"]["Ring"]["stepSeconds"]


def test_plan_with_results_and_a_machine_type(capsys: pytest.CaptureFixture[str]) -> None:
    args = (LLAMA, "--profile", RESULTS, "--profile-machine-type", "a3-highgpu-8g")
    code, out, err = plan(capsys, *args)
    assert code == 0, err
    assert "profiled on pool poolprofile-h100-a-results, 2026-11-26" in out
    code, _, err = plan(capsys, LLAMA, "--profile", RESULTS)
    assert code == 2 and "--profile-machine-type" in err and len(err.splitlines()) == 1


def test_plan_with_a_profile_of_another_machine_type_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bert = LLAMA.parent / "trainingjob-bert-large-auto.yaml"
    code, out, err = plan(capsys, bert, "--profile", PROFILE)
    assert code == 0 and "profiled" not in out
    assert "pool h100-a (a3-highgpu-8g, nvidia-h100-80gb) is not where any plan here runs" in err


def test_plan_with_a_bad_profile_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: ringmaster.dev/v1alpha1\nkind: PoolProfile\nspec: {pool: p}\n")
    code, _, err = plan(capsys, LLAMA, "--profile", bad)
    assert code == 2 and "status.measured: nothing measured yet" in err
    assert len(err.strip().splitlines()) == 1
