"""`ringmaster bench`: what a benchmark harness's closed loop should measure on one replica of an
LLM endpoint as Ringmaster deploys it, and its --compare against what a harness wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringmaster import cli
from ringmaster.api import load_manifests
from ringmaster.engine import llm_batching as B
from ringmaster.engine import llm_closed_loop as CL
from ringmaster.planning import bench as BE
from ringmaster.planning.plans import (
    active_catalog,
    llm_serving_inputs,
    predict_llm_serving_inputs,
)

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LLAMA = EXAMPLES / "inferenceendpoint-llama3-8b-fp8-h100.yaml"
RESNET = EXAMPLES / "inferenceendpoint-resnet50-int8-t4.yaml"
DISAGGREGATED = EXAMPLES / "inferenceendpoint-llama3-70b-disaggregated-h100.yaml"


def _spec(path: Path = LLAMA):
    (m,) = load_manifests(path.read_text(encoding="utf-8"), source=str(path))
    return m.spec, m.name


def test_the_bench_is_the_closed_loop_of_the_planned_replica():
    """The plan's replica (its terms, --max-num-seqs and --max-num-batched-tokens) under the
    harness's clients, the run's rounds its requests a client."""
    spec, name = _spec()
    catalog = active_catalog()
    got = BE.bench(spec, name, 32, 320, catalog)
    found = predict_llm_serving_inputs(llm_serving_inputs(spec), catalog)
    terms = found.replica_terms
    assert terms is not None
    budget = float(found.max_num_batched_tokens)
    n_in = float(spec.tokens.input_mean)
    slots = B.capacity(terms, float(found.max_num_seqs), budget, 0.0, B.Lengths(n_in, n_in)).slots
    loop = CL.closed_loop(terms, 32, int(float(slots)), budget, 10.0)
    assert got.loop == loop
    assert got.figures["output_tokens_per_second"] == pytest.approx(
        loop.requests_per_second * float(spec.tokens.output_mean)
    )
    assert f"--max-num-seqs {found.max_num_seqs}" in got.replica


def test_a_longer_run_shows_less_of_its_start_and_longer_prompts_wait_longer():
    spec, name = _spec()
    catalog = active_catalog()
    short = BE.bench(spec, name, 64, 128, catalog)
    long = BE.bench(spec, name, 64, 6400, catalog)
    assert long.loop.ttft < short.loop.ttft and long.loop.tpot == short.loop.tpot
    assert long.loop.steady_ttft == short.loop.steady_ttft
    assert short.loop.ttft_p99 > 5 * short.loop.steady_ttft
    longer = BE.bench(spec, name, 64, 640, catalog, input_tokens=4096, output_tokens=256)
    assert longer.loop.steady_ttft > short.loop.steady_ttft
    assert longer.input_tokens == 4096 and longer.output_tokens == 256


def test_the_command_prints_the_predicted_figures(capsys: pytest.CaptureFixture[str]):
    assert cli.main(["bench", str(LLAMA), "--concurrency", "16", "--requests", "160"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("InferenceEndpoint llama3-8b-fp8-h100: one replica (1 x nvidia-h100")
    assert "16 clients, 160 requests (10 a client, starting together), 512 / 256 tokens" in out
    for words in ("TTFT mean (ms)", "TTFT p99 (ms)", "TPOT mean (ms)", "output tokens/s"):
        assert words in out
    assert "evidence: closed-loop TTFT checked: 45 runs of vLLM on nvidia-h100-80gb" in out


def _vllm_result(path: Path, concurrency: int, requests: int, **figures: float) -> Path:
    path.write_text(
        json.dumps(
            {
                "max_concurrency": concurrency,
                "completed": requests,
                "num_prompts": requests,
                **figures,
            }
        ),
        encoding="utf-8",
    )
    return path


def test_compare_holds_it_to_a_vllm_bench_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    spec, name = _spec()
    predicted = BE.bench(spec, name, 16, 160, active_catalog()).figures
    result = _vllm_result(
        tmp_path / "vllm.json",
        16,
        160,
        mean_ttft_ms=2 * predicted["ttft_mean_ms"],
        p99_ttft_ms=predicted["ttft_p99_ms"],
        mean_tpot_ms=predicted["tpot_mean_ms"] / 0.8,
        output_throughput=predicted["output_tokens_per_second"],
    )
    args = ["--concurrency", "16", "--requests", "160", "--compare", str(result), "-o", "json"]
    code = cli.main(["bench", str(LLAMA), *args])
    assert code == 0
    body = json.loads(capsys.readouterr().out)
    assert body["error"]["ttftMeanMs"] == pytest.approx(-0.5, abs=1e-6)
    assert body["error"]["ttftP99Ms"] == pytest.approx(0.0, abs=1e-6)
    assert body["error"]["tpotMeanMs"] == pytest.approx(-0.2, abs=1e-6)
    assert "ttftP90Ms" not in body["measured"]  # the run did not report it
    assert body["predicted"]["slots"] >= body["predicted"]["running"] == 16
    assert body["load"] == {"concurrency": 16, "requests": 160}


def test_compare_reads_aiperfs_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    spec, name = _spec()
    predicted = BE.bench(spec, name, 8, 80, active_catalog()).figures
    export = {
        "time_to_first_token": {
            "unit": "ms",
            "avg": predicted["ttft_mean_ms"] * 1.25,
            "p90": 1.0,
            "p99": 2.0,
        },
        "inter_token_latency": {"unit": "s", "avg": predicted["tpot_mean_ms"] / 1e3},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 1000.0},
        "request_count": {"avg": 80},
        "input_config": {"loadgen": {"concurrency": 8}},
    }
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(json.dumps(export, indent=2), encoding="utf-8")
    run = BE.read_result(str(path))
    assert run.concurrency == 8 and run.requests == 80
    assert run.figures["tpot_mean_ms"] == pytest.approx(predicted["tpot_mean_ms"])
    args = ["--concurrency", "8", "--requests", "80", "--compare", str(path)]
    assert cli.main(["bench", str(LLAMA), *args]) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "-20.0%" in out  # the TTFT: 1 / 1.25 - 1


def test_a_result_of_another_load_or_no_result_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    load = ["--concurrency", "32", "--requests", "320"]
    other = _vllm_result(tmp_path / "c64.json", 64, 640, mean_ttft_ms=10.0)
    assert cli.main(["bench", str(LLAMA), *load, "--compare", str(other)]) == 2
    assert "--concurrency 32, but" in capsys.readouterr().err
    fewer = _vllm_result(tmp_path / "n100.json", 32, 100, mean_ttft_ms=10.0)
    assert cli.main(["bench", str(LLAMA), *load, "--compare", str(fewer)]) == 2
    assert "--requests 320, but" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}', encoding="utf-8")
    assert cli.main(["bench", str(LLAMA), *load, "--compare", str(junk)]) == 2
    assert "neither aiperf's" in capsys.readouterr().err


def test_bad_input_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert cli.main(["bench", str(RESNET), "--concurrency", "4", "--requests", "40"]) == 2
    assert "spec.model.architecture" in capsys.readouterr().err
    assert cli.main(["bench", str(DISAGGREGATED), "--concurrency", "4", "--requests", "40"]) == 2
    assert "spec.disaggregation.mode" in capsys.readouterr().err
    static = tmp_path / "static.yaml"
    text = LLAMA.read_text(encoding="utf-8")
    static.write_text(text.replace("  precision: FP8", "  precision: FP8\n  batching: Static"))
    assert cli.main(["bench", str(static), "--concurrency", "4", "--requests", "40"]) == 2
    assert "spec.batching Static" in capsys.readouterr().err
    assert cli.main(["bench", str(LLAMA), "--concurrency", "8", "--requests", "4"]) == 2
    assert "fewer than the 8 clients" in capsys.readouterr().err
    assert cli.main(["bench", str(LLAMA), "--concurrency", "0", "--requests", "4"]) == 2
    assert "--concurrency" in capsys.readouterr().err
    too_long = ["--input-tokens", "9000", "--output-tokens", "1000"]
    assert cli.main(["bench", str(LLAMA), "--concurrency", "4", "--requests", "8", *too_long]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringmaster bench: ") and len(err.strip().splitlines()) == 1
    # the manifest is read as `ringmaster plan` reads it: the same words for the same fault
    for path, words in ((tmp_path / "absent.yaml", "no such file"), (tmp_path, "is a directory")):
        assert cli.main(["bench", str(path), "--concurrency", "4", "--requests", "8"]) == 2
        assert capsys.readouterr().err == f"ringmaster bench: {path}: {words}" + (
            ", not a manifest file\n" if words == "is a directory" else "\n"
        )


def test_poisson_arrivals_are_the_plans_own_fixed_point():
    """At the plan's per-replica rate, the bench's TTFT and TPOT p99 are the plan's."""
    spec, name = _spec()
    catalog = active_catalog()
    found = predict_llm_serving_inputs(llm_serving_inputs(spec), catalog)
    rate = float(spec.slo.target_requests_per_second) / found.replicas
    got = BE.bench_rate(spec, name, rate, catalog)
    assert found.ttft_p99_seconds is not None and found.tpot_p99_seconds is not None
    assert got.figures["ttft_p99_ms"] == pytest.approx(found.ttft_p99_seconds * 1e3, rel=1e-9)
    assert got.figures["tpot_p99_ms"] == pytest.approx(found.tpot_p99_seconds * 1e3, rel=1e-9)
    assert got.figures["ttft_p50_ms"] < got.figures["ttft_p90_ms"] < got.figures["ttft_p99_ms"]
    assert "ttft_mean_ms" not in got.figures  # the fixed point gives quantiles
    faster = BE.bench_rate(spec, name, 1.4 * rate, catalog)
    assert faster.figures["ttft_p99_ms"] >= got.figures["ttft_p99_ms"]


def test_a_rate_past_the_offline_maximum_is_refused(capsys: pytest.CaptureFixture[str]):
    assert cli.main(["bench", str(LLAMA), "--request-rate", "1e6"]) == 2
    assert "past the replica's offline maximum" in capsys.readouterr().err
    assert cli.main(["bench", str(LLAMA), "--request-rate", "5", "--requests", "50"]) == 2
    assert "--requests goes with --concurrency" in capsys.readouterr().err
    assert cli.main(["bench", str(LLAMA), "--concurrency", "5"]) == 2
    assert "--concurrency needs --requests" in capsys.readouterr().err


def test_compare_at_a_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    spec, name = _spec()
    predicted = BE.bench_rate(spec, name, 10.0, active_catalog()).figures
    result = tmp_path / "rate.json"
    body = {
        "request_rate": 10.0,
        "max_concurrency": None,
        "completed": 1000,
        "median_ttft_ms": predicted["ttft_p50_ms"] * 2,
        "p99_tpot_ms": predicted["tpot_p99_ms"],
        "mean_ttft_ms": 1.0,
    }
    result.write_text(json.dumps(body), encoding="utf-8")
    args = ["--request-rate", "10", "--compare", str(result), "-o", "json"]
    assert cli.main(["bench", str(LLAMA), *args]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["load"] == {"requestRate": 10.0}
    assert out["error"]["ttftP50Ms"] == pytest.approx(-0.5, abs=1e-6)
    assert out["error"]["tpotP99Ms"] == pytest.approx(0.0, abs=1e-6)
    assert "ttftMeanMs" not in out["error"]  # a mean the fixed point does not predict
    args = ["--request-rate", "20", "--compare", str(result)]
    assert cli.main(["bench", str(LLAMA), *args]) == 2
    assert "--request-rate 20, but" in capsys.readouterr().err
    closed = _vllm_result(tmp_path / "closed.json", 16, 160, mean_ttft_ms=10.0)
    assert cli.main(["bench", str(LLAMA), "--request-rate", "10", "--compare", str(closed)]) == 2
    assert "capped its clients at 16" in capsys.readouterr().err


def test_clients_beyond_the_cache_say_what_the_wait_leaves_out():
    """More clients than the replica's cache holds sequences: they wait for a slot, and the
    output says that an engine admitting on a prompt's blocks may start them sooner."""
    spec, name = _spec()
    catalog = active_catalog()
    got = BE.bench(spec, name, 2000, 4000, catalog)
    assert got.loop is not None and got.loop.waiting_seconds > 0.0
    assert got.running == got.slots < 2000
    assert "clients wait for one" in got.detail and "preempts" in got.detail
    few = BE.bench(spec, name, 8, 80, catalog)
    assert "wait" not in few.detail.split(";")[0]


def test_a_wide_expert_parallel_replica_is_named_as_it_runs():
    spec, name = _spec(EXAMPLES / "inferenceendpoint-deepseek-r1-wide-ep-h200.yaml")
    got = BE.bench(spec, name, 16, 160, active_catalog())
    assert got.replica.startswith("16 x nvidia-h200-141gb, TP1 x DP16 (attention), EP16, SGLang")
