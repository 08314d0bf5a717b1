"""`ringmaster plan`: both output forms, sweeps, and bad input (one line, exit status 2)."""

import json
from pathlib import Path

import pytest

from ringmaster.cli import main

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BERT = EXAMPLES / "trainingjob-bert-large-auto.yaml"
TPU = EXAMPLES / "trainingjob-resnet50-tpu-v4.yaml"
T4 = EXAMPLES / "inferenceendpoint-resnet50-int8-t4.yaml"

STRATEGY_KEYS = {
    "stepSeconds",
    "communicationSeconds",
    "samplesPerSecond",
    "busBandwidthGBps",
    "bottleneck",
    "costPerHourUSD",
}
IE_KEYS = {
    "kind",
    "name",
    "replicas",
    "batchSize",
    "perReplicaRequestsPerSecond",
    "p99LatencyMilliseconds",
    "bottleneck",
    "costPerHourUSD",
}


def plan(capsys, *args):
    code = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_plans_in_both_forms(capsys, path):
    code, out, err = plan(capsys, path)
    assert code == 0, err
    assert out.strip()
    code, out, err = plan(capsys, path, "-o", "json")
    assert code == 0, err
    json.loads(out)


def test_training_json_contract(capsys):
    code, out, _ = plan(capsys, BERT, "-o", "json")
    doc = json.loads(out)
    assert code == 0
    assert doc["kind"] == "TrainingJob" and doc["name"] == "bert-large-squad"
    assert doc["chosenStrategy"] in ("Ring", "ReductionServer")
    assert set(doc["strategies"]) == {"Ring", "ReductionServer"}
    for s in doc["strategies"].values():
        assert set(s) >= STRATEGY_KEYS
    rs = doc["strategies"]["ReductionServer"]
    assert {"reducers", "reducerMachineType", "costOptimalReducers"} <= set(rs)
    assert rs["reducers"] == 25 and rs["reducerMachineType"] == "n1-highcpu-16"
    # the choice is the faster one (Ring kept within 2%)
    ring_step = doc["strategies"]["Ring"]["stepSeconds"]
    faster = rs["stepSeconds"] < ring_step * 0.98
    assert doc["chosenStrategy"] == ("ReductionServer" if faster else "Ring")


def test_tpu_job_has_only_ring(capsys):
    doc = json.loads(plan(capsys, TPU, "-o", "json")[1])
    assert list(doc["strategies"]) == ["Ring"] and doc["chosenStrategy"] == "Ring"


def test_inference_json_contract(capsys):
    doc = json.loads(plan(capsys, T4, "-o", "json")[1])
    assert set(doc) >= IE_KEYS
    assert doc["kind"] == "InferenceEndpoint" and doc["replicas"] >= 2  # minReplicas: 2
    assert doc["p99LatencyMilliseconds"] <= 25


def test_table_has_units_bottleneck_and_cost(capsys):
    code, out, _ = plan(capsys, BERT)
    assert code == 0
    for text in (
        "step s",
        "samples/s",
        "$/hour",
        "bottleneck",
        "Ring",
        "ReductionServer",
        "chosen:",
    ):
        assert text in out


def test_several_documents_give_a_list(capsys, tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text(BERT.read_text() + "\n---\n" + T4.read_text())
    docs = json.loads(plan(capsys, both, "-o", "json")[1])
    assert [d["kind"] for d in docs] == ["TrainingJob", "InferenceEndpoint"]


def test_sweep_workers_table_and_json(capsys):
    code, out, _ = plan(capsys, BERT, "--sweep", "workers=1..16")
    assert code == 0
    assert len([line for line in out.splitlines() if line.strip()]) == 2 + 16
    code, out, _ = plan(capsys, BERT, "--sweep", "workers=1..64*2", "-o", "json")
    sweep = json.loads(out)["sweep"]
    assert [p["workers"] for p in sweep["points"]] == [1, 2, 4, 8, 16, 32, 64]
    steps = [p["strategies"]["Ring"]["stepSeconds"] for p in sweep["points"]]
    assert steps == sorted(steps)  # more hosts: never a shorter ring step


def test_sweep_inference_target(capsys):
    code, out, _ = plan(
        capsys, T4, "--sweep", "targetRequestsPerSecond=1000,8000,64000", "-o", "json"
    )
    replicas = [p["replicas"] for p in json.loads(out)["sweep"]["points"]]
    assert code == 0 and replicas == sorted(replicas)


def test_catalog_override_changes_the_plan(capsys, tmp_path):
    cat = tmp_path / "catalog.yaml"
    cat.write_text("machineTypes:\n  a2-highgpu-8g:\n    pricePerHourUSD: 1.0\n")
    doc = json.loads(plan(capsys, BERT, "-o", "json", "--catalog", cat)[1])
    assert doc["strategies"]["Ring"]["costPerHourUSD"] == pytest.approx(8.0)


def bad(capsys, *args):
    code, out, err = plan(capsys, *args)
    assert code == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_missing_file(capsys, tmp_path):
    assert "no such file" in bad(capsys, tmp_path / "nope.yaml")


def test_invalid_yaml(capsys, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("spec: [unclosed\n")
    bad(capsys, f)


def _variant(tmp_path, old, new, source=BERT):
    text = source.read_text()
    assert old in text
    f = tmp_path / "variant.yaml"
    f.write_text(text.replace(old, new, 1))
    return f


def test_unknown_accelerator_names_the_field(capsys, tmp_path):
    f = _variant(tmp_path, "type: nvidia-tesla-a100", "type: nvidia-tesla-k80")
    assert "spec.accelerator.type" in bad(capsys, f)


def test_negative_workers_name_the_field(capsys, tmp_path):
    f = _variant(tmp_path, "workers: 8", "workers: -3")
    assert "spec.workers" in bad(capsys, f)


def test_bad_sweep_field_and_range(capsys):
    assert "known:" in bad(capsys, BERT, "--sweep", "gpus=1..4")
    assert "FIELD=RANGE" in bad(capsys, BERT, "--sweep", "workers")
    assert "empty" in bad(capsys, BERT, "--sweep", "workers=8..1")


def test_plot_without_sweep(capsys, tmp_path):
    assert "--sweep" in bad(capsys, BERT, "--plot", tmp_path / "x.png")


def test_plot(capsys, tmp_path):
    png = tmp_path / "curve.png"
    code, _, err = plan(capsys, BERT, "--sweep", "workers=1..8", "--plot", png)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 2 and "matplotlib" in err
    else:
        assert code == 0 and png.stat().st_size > 0


def test_bad_catalog_file(capsys, tmp_path):
    cat = tmp_path / "catalog.yaml"
    cat.write_text("machineTypes:\n  a2-highgpu-8g:\n    speed: 3\n")
    assert "speed: unknown field" in bad(capsys, BERT, "--catalog", cat)


def _bert_with(tmp_path, model_extra: str = "", nccl_algo: str = "") -> Path:
    text = BERT.read_text()
    if model_extra:
        text = text.replace(
            "    batchSizePerAccelerator: 32", f"    batchSizePerAccelerator: 32\n    {model_extra}"
        )
    if nccl_algo:
        text = text.replace(
            "      - name: NCCL_DEBUG\n        value: WARN",
            f"      - name: NCCL_DEBUG\n        value: WARN\n      - name: NCCL_ALGO\n"
            f"        value: {nccl_algo}",
        )
    path = tmp_path / "bert.yaml"
    path.write_text(text)
    return path


def test_compute_precision_sets_the_roofline_and_a_missing_unit_is_a_field_error(capsys, tmp_path):
    code, out, _ = plan(capsys, BERT, "-o", "json")
    base = json.loads(out)
    assert base["computePrecision"] == "bf16"
    code, out, err = plan(capsys, _bert_with(tmp_path, "computePrecision: tf32"), "-o", "json")
    assert code == 0, err
    tf32 = json.loads(out)
    ring, ring_tf32 = base["strategies"]["Ring"], tf32["strategies"]["Ring"]
    assert ring_tf32["computeSeconds"] == pytest.approx(2 * ring["computeSeconds"], rel=1e-4)
    code, _, err = plan(capsys, _bert_with(tmp_path, "computePrecision: fp8"))
    assert code == 2
    assert err.startswith("ringmaster plan: spec.model.computePrecision:") and "fp8" in err
    code, _, err = plan(capsys, _bert_with(tmp_path, "computePrecision: fp4"))
    assert code == 2 and "computePrecision" in err


def test_plan_json_names_the_nccl_algorithm_and_protocol(capsys):
    _, out, _ = plan(capsys, BERT, "-o", "json")
    ring = json.loads(out)["strategies"]["Ring"]
    # 8 hosts of 8 A100 on 100 Gbps TCP, 25 MiB buckets: NCCL's tuner picks the ring, and
    # LL128 over Simple once TCP with 8 GPUs reaches TCP_SHARED_NIC_EFFICIENCY of the NIC
    assert ring["algorithm"] == "Ring" and ring["protocol"] == "LL128"
    rs = json.loads(out)["strategies"]["ReductionServer"]
    assert rs["reducerShare"] == 1.0


def test_nccl_algo_in_the_pod_env_restricts_the_plan(capsys, tmp_path):
    code, out, err = plan(capsys, _bert_with(tmp_path, nccl_algo="tree"), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["strategies"]["Ring"]["algorithm"] == "Tree"
    assert any("NCCL_ALGO=tree" in n for n in doc["notes"])
    code, _, err = plan(capsys, _bert_with(tmp_path, nccl_algo="hypercube"))
    assert code == 2 and err.startswith("ringmaster plan: spec.template.env: NCCL_ALGO")


def test_a_job_on_a_shared_pool_is_planned_at_its_share_of_it(capsys):
    shared = EXAMPLES / "trainingjob-bert-large-reduction-server.yaml"  # names a shared pool
    code, alone, _ = plan(capsys, shared, "-o", "json")
    assert code == 0
    code, two, _ = plan(capsys, shared, "-o", "json", "--jobs-sharing-pool", "2")
    assert code == 0
    rs_alone = json.loads(alone)["strategies"]["ReductionServer"]
    rs_two = json.loads(two)["strategies"]["ReductionServer"]
    assert rs_alone["reducerShare"] == 1 and rs_two["reducerShare"] == 0.5
    assert rs_two["vertexRuleReducers"] == 2 * rs_alone["vertexRuleReducers"]
    # A job with dedicated reducers is not affected by the flag.
    code, dedicated, _ = plan(capsys, BERT, "-o", "json", "--jobs-sharing-pool", "2")
    assert json.loads(dedicated)["strategies"]["ReductionServer"]["reducerShare"] == 1
    assert plan(capsys, shared, "--jobs-sharing-pool", "0")[0] == 2


def _calibration_file(tmp_path, ratios, machine="a2-highgpu-8g", as_config_map=False):
    import datetime as dt

    now = dt.datetime.now(dt.UTC).isoformat()
    body = {
        "version": 1,
        "observations": [
            {
                "machine_type": machine,
                "kind": "data-parallel",
                "ratio": r,
                "job": f"n/j{i}/u",
                "time": now,
            }
            for i, r in enumerate(ratios)
        ],
    }
    path = tmp_path / "calibration.json"
    if as_config_map:
        import yaml

        doc = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c"},
            "data": {"calibration.json": json.dumps(body)},
        }
        path.write_text(yaml.safe_dump(doc))
    else:
        path.write_text(json.dumps(body))
    return path


def test_cluster_calibration_is_shown_beside_the_uncorrected_prediction(capsys, tmp_path):
    source = EXAMPLES / "trainingjob-bert-large-auto.yaml"
    config_map = _calibration_file(tmp_path, [1.1, 1.12, 1.2], as_config_map=True)
    code, out, _ = plan(capsys, source, "-o", "json", "--cluster-calibration", config_map)
    doc = json.loads(out)
    assert code == 0
    corrected = doc["clusterCalibration"]
    assert corrected["calibration"] == "x1.12 from 3 jobs observed on a2-highgpu-8g"
    _, table, _ = plan(capsys, source, "--cluster-calibration", config_map)
    [line] = [x for x in table.splitlines() if x.startswith("cluster calibration: ")]
    corrected_step = float(line.split()[2])
    uncorrected_step = float(line.split("uncorrected ")[1].split()[0])
    assert corrected_step == pytest.approx(1.12 * uncorrected_step, rel=1e-3)
    _, plain, _ = plan(capsys, source)
    assert "cluster calibration" not in plain


def test_a_calibration_for_another_machine_says_so_and_a_bad_file_is_one_line(capsys, tmp_path):
    source = EXAMPLES / "trainingjob-bert-large-auto.yaml"
    other = _calibration_file(tmp_path, [2.0, 2.0, 2.0], machine="a3-highgpu-8g")
    _, table, _ = plan(capsys, source, "--cluster-calibration", other)
    assert "cluster calibration: none for a2-highgpu-8g (data-parallel)" in table
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    assert "not a cluster calibration" in bad(capsys, source, "--cluster-calibration", broken)


def test_an_llm_plan_shows_the_step_by_part_the_framework_and_its_evidence(capsys):
    """issue 41: the table names the framework the step is composed for and its parts; the JSON
    carries them and the evidence (a cell with checked runs, or extrapolated)."""
    example = str(EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml")
    assert main(["plan", example]) == 0
    out = capsys.readouterr().out
    assert "compute by part (Torchtitan): GEMMs" in out and "optimizer" in out
    assert "evidence: framework Torchtitan (spec.framework); extrapolated:" in out
    assert main(["plan", example, "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    parts = plan["stepPartsSeconds"]
    assert plan["framework"] == "Torchtitan" and parts["attention"] > 0 and parts["loss"] > 0


def test_a_training_plan_says_which_collective_constants_its_chip_carries(capsys):
    """The NVLink fraction and the ring's fill are fitted on A100s: an H100's plan says it
    carries them; an A100's does not; NVLS names its own H100 fit."""
    from ringmaster.calibration.evidence import collective_evidence

    example = str(EXAMPLES / "trainingjob-llama3-8b-fsdp-h100.yaml")
    assert main(["plan", example]) == 0
    out = capsys.readouterr().out
    assert "collectives: NVLink and a ring's fill fitted on 8 x A100 (carried to nvidia-h1" in out
    assert "NVLS fitted on 8 x H100" in out
    a100 = collective_evidence("nvidia-tesla-a100", "gpu", "nvlink", "ampere", False)
    assert "carried" not in a100 and "NVLS" not in a100
    b200 = collective_evidence("nvidia-b200", "gpu", "nvlink", "blackwell", True)
    assert "carried to nvidia-b200" in b200 and "GB200 NVL72" in b200
    mi300x = collective_evidence("amd-mi300x", "gpu", "xgmi", "cdna3", False)
    assert "carried from 8 x A100" in mi300x
    assert "borrowed" in collective_evidence("nvidia-tesla-t4", "gpu", "pcie", "turing", False)
    assert "ICI" in collective_evidence("tpu-v5p", "tpu", "ici", "", False)


def test_an_llm_endpoints_plan_prints_its_evidence_and_serving_cell(capsys):
    """A user sees what a serving number rests on: the plan names the engine, then its cell
    of the serving evidence matrix (vLLM on the H100: the closed-loop runs measured there)."""
    code, out, _ = plan(capsys, EXAMPLES / "inferenceendpoint-llama3-8b-fp8-h100.yaml")
    assert code == 0
    evidence = next(line for line in out.splitlines() if line.startswith("evidence: "))
    assert evidence.startswith("evidence: engine vLLM (from the image")
    assert "; serving cell H100 x vLLM x FP8: " in evidence and "checked runs" in evidence
