"""LLM training layouts on the real control plane: a job that fits only with an Auto layout gets
one and its pods carry it; a context-parallel job runs with its layout in the workers' env; a job
that fits nowhere waits with DoesNotFit and creates nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.planning import plan_training
from tests.e2e.kube import Cluster, OperatorProcess, wait_for
from tests.e2e.test_trainingjob import condition, events_of, job, pools_of, worker_pods

REPO = Path(__file__).resolve().parents[2]
AUTO_EXAMPLE = REPO / "examples" / "trainingjob-llama2-70b-auto-a100.yaml"
LAYOUT_VARIABLES = (
    ("RINGMASTER_TENSOR_PARALLEL", "tensor"),
    ("RINGMASTER_PIPELINE_PARALLEL", "pipeline"),
    ("RINGMASTER_CONTEXT_PARALLEL", "context"),
    ("RINGMASTER_DATA_PARALLEL", "data"),
    ("RINGMASTER_SHARDING", "sharding"),
    ("RINGMASTER_MICRO_BATCH_SIZE", "microBatchSize"),
    ("RINGMASTER_GLOBAL_BATCH_SIZE", "globalBatchSize"),
    ("RINGMASTER_ACTIVATION_RECOMPUTE", "activationRecompute"),
)


def example() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(AUTO_EXAMPLE.read_text())
    doc["spec"]["template"] = {"image": "trainer:1", "command": ["python", "train.py"]}
    return doc


def test_a_job_that_fits_only_with_auto_gets_a_layout_and_its_pods_carry_it(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    doc = example()
    # Plain data parallelism (tensor 1, pipeline 1, no sharding) does not fit: 70B with Adam.
    ddp = copy.deepcopy(doc)
    ddp["spec"]["parallelism"].update(tensor=1, pipeline=1, sharding="None")
    assert plan_training(parse_manifest(ddp).spec).to_json()["fits"] is False

    cluster.apply(doc, ns)
    name = doc["metadata"]["name"]
    pods = wait_for(
        lambda: (
            len(p := worker_pods(cluster, ns, name)) == 4
            and all(q["spec"].get("nodeName") for q in p)
            and p
        ),
        timeout=90,
        what=f"{name}'s 4 worker pods, bound",
    )
    plan = job(cluster, ns, name)["status"]["plan"]
    assert plan["fits"] is True
    assert plan["tensor"] * plan["context"] * plan["pipeline"] * plan["data"] == 32
    cp = f" CP{plan['context']}" if plan["context"] > 1 else ""
    assert plan["layout"] == f"TP{plan['tensor']}{cp} PP{plan['pipeline']} DP{plan['data']}"
    assert 0 < plan["mfu"] < 1 and plan["tokensPerSecond"] > 0
    mem = plan["memoryPerAcceleratorBytes"]
    assert mem["total"] <= mem["capacity"]
    assert mem["capacity"] == pytest.approx(81_920 * 2**20, rel=1e-5)  # nvidia-smi: 81,920 MiB
    assert pools_of(cluster, pods) == {"a100-ultragpu-8g"}
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        for variable, key in LAYOUT_VARIABLES:
            assert env[variable] == str(plan[key]), (variable, env)

    table = cluster.kubectl("get", "tj", name, "-n", ns, "-o", "wide").stdout
    header, row = table.splitlines()[:2]
    assert "LAYOUT" in header and "MFU" in header
    assert plan["layout"] in row


def test_a_context_parallel_job_runs_with_its_layout_in_the_workers_env(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    doc = example()
    doc["metadata"]["name"] = "llama-cp"
    doc["spec"]["parallelism"].update(tensor=8, context=2, pipeline=2)
    cluster.apply(doc, ns)
    pods = wait_for(
        lambda: (
            len(p := worker_pods(cluster, ns, "llama-cp")) == 4
            and all(q["spec"].get("nodeName") for q in p)
            and p
        ),
        timeout=90,
        what="llama-cp's 4 worker pods, bound",
    )
    plan = job(cluster, ns, "llama-cp")["status"]["plan"]
    assert plan["fits"] is True and plan["context"] == 2
    assert plan["layout"] == "TP8 CP2 PP2 DP1"
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RINGMASTER_CONTEXT_PARALLEL"] == "2"
        assert env["RINGMASTER_TENSOR_PARALLEL"] == "8"
        assert env["RINGMASTER_DATA_PARALLEL"] == "1"
    # The apiserver refuses a context degree that cannot split the sequence, with the numbers.
    bad = example()
    bad["metadata"]["name"] = "llama-cp-bad"
    bad["spec"]["parallelism"]["context"] = 3
    result = cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert result.returncode != 0
    assert "context 3: 2 x context must divide sequenceLength 4096" in result.stderr


def test_a_torchtitan_job_gets_its_launcher_env_and_its_plan_shows_the_step_by_part(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    """spec.framework reaches the workers (RINGMASTER_FRAMEWORK) and status.plan composes the
    step for it: its parts, and the evidence the prediction rests on; Megatron's fused kernels
    predict a shorter step for the same layout. The apiserver refuses compile for Megatron."""
    ns = quiet_namespace
    doc = example()
    doc["metadata"]["name"] = "llama-titan"
    doc["spec"]["framework"] = {"name": "Torchtitan"}
    cluster.apply(doc, ns)
    pods = wait_for(
        lambda: (
            len(p := worker_pods(cluster, ns, "llama-titan")) == 4
            and all(q["spec"].get("nodeName") for q in p)
            and p
        ),
        timeout=90,
        what="llama-titan's 4 worker pods, bound",
    )
    plan = job(cluster, ns, "llama-titan")["status"]["plan"]
    assert plan["framework"] == "Torchtitan"
    parts = plan["stepPartsSeconds"]
    assert {"gemm", "attention", "memoryBound", "loss", "optimizer", "hostGap"} <= set(parts)
    assert parts["gemm"] > 0 and parts["attention"] > 0 and parts["memoryBound"] > 0
    assert plan["evidence"].startswith("framework Torchtitan (spec.framework); ")
    assert "A100 x Torchtitan x bf16: 4 checked runs" in plan["evidence"]
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RINGMASTER_FRAMEWORK"] == "Torchtitan"
    megatron = copy.deepcopy(doc)
    megatron["spec"]["framework"] = {"name": "Megatron"}
    faster = plan_training(parse_manifest(megatron).spec).to_status().step_seconds
    assert faster < plan["stepSeconds"]
    megatron["metadata"]["name"] = "llama-compiled-megatron"
    megatron["spec"]["framework"]["compile"] = True
    result = cluster.kubectl(
        "apply", "-n", ns, "-f", "-", input=yaml.safe_dump(megatron), check=False
    )
    assert result.returncode != 0
    assert "compile (torch.compile) applies to Torchtitan, DeepSpeed, LLMFoundry and PyTorch" in (
        result.stderr
    )
    # llm-foundry's compile_config: the apiserver admits LLMFoundry with compile (server-side
    # dry run: the CEL rule judged, nothing created).
    foundry = copy.deepcopy(megatron)
    foundry["metadata"]["name"] = "llama-compiled-foundry"
    foundry["spec"]["framework"]["name"] = "LLMFoundry"
    admitted = cluster.kubectl(
        "apply", "--dry-run=server", "-n", ns, "-f", "-", input=yaml.safe_dump(foundry), check=False
    )
    assert admitted.returncode == 0, admitted.stderr


def test_megatrons_partial_recompute_and_activation_offload_reach_the_plan_and_the_workers(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    """recomputeLayers and activationOffloadLayers on the real control plane: the plan and the
    workers' env carry each; the apiserver refuses what Megatron-Core would (offload with
    pipeline stages; recomputeLayers outside Megatron)."""
    ns = quiet_namespace
    jobs = {
        "llama-recompute-10": {
            "tensor": 8,
            "pipeline": 4,
            "activationRecompute": "Full",
            "recomputeLayers": 10,
        },
        "llama-offload-40": {"tensor": 8, "activationOffloadLayers": 40},
    }
    wanted = {
        "llama-recompute-10": ("recomputeLayers", "RINGMASTER_RECOMPUTE_LAYERS", 10),
        "llama-offload-40": ("activationOffloadLayers", "RINGMASTER_ACTIVATION_OFFLOAD_LAYERS", 40),
    }
    for name, parallelism in jobs.items():
        doc = example()
        doc["metadata"]["name"] = name
        doc["spec"]["framework"] = {"name": "Megatron"}
        doc["spec"]["parallelism"].update(parallelism)
        cluster.apply(doc, ns)
        pods = wait_for(
            lambda name=name: (
                len(p := worker_pods(cluster, ns, name)) == 4
                and all(q["spec"].get("nodeName") for q in p)
                and p
            ),
            timeout=90,
            what=f"{name}'s 4 worker pods, bound",
        )
        key, variable, value = wanted[name]
        plan = job(cluster, ns, name)["status"]["plan"]
        assert plan["fits"] is True and plan[key] == value, plan
        if key == "activationOffloadLayers":
            assert (plan["pipeline"], plan["activationRecompute"]) == (1, "None")
            assert plan["hostOffloadBytesPerAccelerator"] > 0
        for pod in pods:
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            assert env[variable] == str(value), (variable, env)
        cluster.kubectl("delete", "tj", name, "-n", ns, "--wait=true")
    refused = {
        "--offload-staged": (
            {"pipeline": 2, "activationOffloadLayers": 40},
            "runs on one pipeline stage without recompute",
        ),
        "--recompute-titan": (
            {"activationRecompute": "Full", "recomputeLayers": 4},
            "recomputeLayers is Megatron-LM's --recompute-num-layers",
        ),
    }
    for suffix, (parallelism, words) in refused.items():
        bad = example()
        bad["metadata"]["name"] = "llama" + suffix.replace("--", "-")
        bad["spec"]["framework"] = {"name": "Megatron" if "offload" in suffix else "Torchtitan"}
        bad["spec"]["parallelism"].update(parallelism)
        result = cluster.kubectl(
            "apply", "-n", ns, "-f", "-", input=yaml.safe_dump(bad), check=False
        )
        assert result.returncode != 0 and words in result.stderr, result.stderr


def test_the_apiserver_refuses_a_layout_that_does_not_divide_naming_the_numbers(
    crds_installed: Cluster, quiet_namespace: str
):
    doc = example()
    # 5 x 19 = 95: the first and the last stage cannot give up 15 layers of 5 each.
    doc["spec"]["parallelism"]["pipeline"] = 19
    result = crds_installed.kubectl(
        "apply", "-n", quiet_namespace, "-f", "-", input=yaml.safe_dump(doc), check=False
    )
    assert result.returncode != 0
    assert "pipeline 19 cannot stage layers 80" in result.stderr


def test_a_job_that_fits_nowhere_waits_with_does_not_fit_and_creates_nothing(
    operator: OperatorProcess, cluster: Cluster, quiet_namespace: str
):
    ns = quiet_namespace
    doc = example()
    doc["metadata"]["name"] = "too-big"
    doc["spec"]["workers"] = 2
    doc["spec"]["accelerator"] = {"type": "nvidia-tesla-a100", "perWorker": 8}
    cluster.apply(doc, ns)
    waiting = wait_for(
        lambda: (c := condition(job(cluster, ns, "too-big"), "Schedulable")) and c,
        timeout=60,
        what="too-big's Schedulable condition",
    )
    assert (waiting["status"], waiting["reason"]) == ("False", "DoesNotFit")
    assert "GiB per accelerator" in waiting["message"]
    assert "nvidia-tesla-a100 has" in waiting["message"]
    wait_for(lambda: "DoesNotFit" in events_of(cluster, ns, "too-big"), what="a DoesNotFit event")
    status = job(cluster, ns, "too-big")["status"]
    assert status["phase"] == "Pending" and status["plan"]["fits"] is False
    assert worker_pods(cluster, ns, "too-big") == []
    services = cluster.get_json("services", "-n", ns)["items"]
    assert services == []
