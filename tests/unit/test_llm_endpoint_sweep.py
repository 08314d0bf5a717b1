"""`ringmaster plan --sweep` on an LLM InferenceEndpoint: each point is the plan of the manifest
with that one value, validated as the API validates it and sized as the operator sizes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringmaster.cli import main

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LLAMA_8B = EXAMPLES / "inferenceendpoint-llama3-8b-fp8-h100.yaml"
LLAMA_70B = EXAMPLES / "inferenceendpoint-llama3-70b-a100-tp4.yaml"
DISAGGREGATED = EXAMPLES / "inferenceendpoint-llama3-70b-disaggregated-h100.yaml"


def plan(capsys, *args):
    code = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_each_point_is_the_plan_of_the_manifest_with_that_value(capsys, tmp_path):
    code, out, err = plan(
        capsys, LLAMA_8B, "--sweep", "targetRequestsPerSecond=10,100,1000", "-o", "json"
    )
    assert code == 0, err
    points = json.loads(out)["sweep"]["points"]
    assert [p["targetRequestsPerSecond"] for p in points] == [10, 100, 1000]
    replicas = [p["replicas"] for p in points]
    assert replicas == sorted(replicas) and replicas[0] < replicas[-1]
    assert [p["feasible"] for p in points] == [True, True, False]  # 1,000 req/s > 8 replicas
    edited = tmp_path / "at-100.yaml"
    text = LLAMA_8B.read_text()
    assert "targetRequestsPerSecond: 150" in text
    edited.write_text(text.replace("targetRequestsPerSecond: 150", "targetRequestsPerSecond: 100"))
    code, out, err = plan(capsys, edited, "-o", "json")
    assert code == 0, err
    whole = {k: v for k, v in json.loads(out).items() if k not in ("kind", "name", "namespace")}
    assert {k: v for k, v in points[1].items() if k != "targetRequestsPerSecond"} == whole


def test_a_value_the_api_refuses_is_a_point_with_the_field_and_the_rest_plan(capsys):
    code, out, err = plan(
        capsys, LLAMA_8B, "--sweep", "timeToFirstTokenP99Milliseconds=0,300", "-o", "json"
    )
    assert code == 0, err
    refused, planned = json.loads(out)["sweep"]["points"]
    assert refused["error"] == "spec.slo.timeToFirstTokenP99Milliseconds: must be > 0.0"
    assert planned["feasible"] and planned["ttftP99Milliseconds"] <= 300
    # one the engine refuses: 70B in BF16 does not fit one A100, and says so at its point
    code, out, err = plan(capsys, LLAMA_70B, "--sweep", "perReplica=1,3,4")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "needs 131 GiB of weights" in rows["1"]
    assert "must divide model.architecture.attentionHeads" in rows["3"]
    assert "TP4 PP1" in rows["4"] and rows["4"].rstrip().endswith("yes")


def test_sweeping_the_other_target_replaces_the_one_the_manifest_names(capsys):
    """The SLO names exactly one target (the CEL rule): a sweep of targetOutputTokensPerSecond
    on a manifest that names targetRequestsPerSecond plans with the tokens alone."""
    code, out, err = plan(
        capsys, LLAMA_8B, "--sweep", "targetOutputTokensPerSecond=1000,50000", "-o", "json"
    )
    assert code == 0, err
    points = json.loads(out)["sweep"]["points"]
    assert all("error" not in p for p in points), points
    assert points[0]["replicas"] < points[1]["replicas"]


def test_the_table_costs_the_target_and_the_plot_is_drawn(capsys, tmp_path):
    png = tmp_path / "sweep.png"
    code, out, err = plan(
        capsys, LLAMA_8B, "--sweep", "targetRequestsPerSecond=1,100", "--plot", png
    )
    assert code == 0, err
    assert "$/M tokens at target" in out and "planned whole at each point" in out
    lines = out.splitlines()
    low, high = lines[2].split(), lines[3].split()
    # one replica serves both loads' first point; the cost per token falls with the load
    cost = [float(r[-2].lstrip("$").replace(",", "")) for r in (low, high)]
    assert cost[0] > 10 * cost[1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_disaggregated_endpoint_sweeps_as_it_runs(capsys):
    """Each point is the endpoint as it runs: prefill and decode sides where the engine
    disaggregates it, their replicas and cost, as its own plan says."""
    code, out, err = plan(capsys, DISAGGREGATED, "--sweep", "targetRequestsPerSecond=1,20")
    assert code == 0, err
    low, high = out.splitlines()[2:4]
    assert "prefill x 8 +" in low and "decode x" in high
    code, out, err = plan(
        capsys, DISAGGREGATED, "--sweep", "targetRequestsPerSecond=1,20", "-o", "json"
    )
    points = json.loads(out)["sweep"]["points"]
    for p in points:
        split = p["disaggregation"]
        assert split["chosen"] == "Disaggregated"
        assert p["replicas"] == split["prefill"]["replicas"] + split["decode"]["replicas"]
    assert points[0]["replicas"] < points[1]["replicas"]


@pytest.mark.parametrize(
    ("path", "sweep", "words"),
    [
        (LLAMA_8B, "workers=1..2", "not a field an LLM endpoint can sweep; known:"),
        (LLAMA_8B, "maxBatchSize=1.5", "is not a positive integer"),
    ],
)
def test_what_cannot_be_swept_is_refused_in_one_line(capsys, path, sweep, words):
    code, out, err = plan(capsys, path, "--sweep", sweep)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1
