"""``spec.parallelism.dataReplicas``: hybrid sharding (HSDP) on GPUs. The data-parallel ranks form
replica groups; ZeRO / FSDP shards over one group, the groups all-reduce their gradient shards
over the NICs. Each chip holds and updates its group's share of the states; the sharded
collectives stay inside the group (a host's NVLink when a group is a host); sharding None is
unchanged; the API refuses replicas that do not divide the accelerators and replicas on a TPU;
the plan, its notes, the workers' env and torchtitan's flag carry it."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from ringmaster.api import parse_manifest
from ringmaster.engine import llm_training as L
from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.engine.llm_layout_names import RECOMPUTE_FULL, RING, SHARD_FULL, SHARD_NONE
from ringmaster.engine.llm_layout_search import LayoutRequest, NoLayoutError, search_layouts
from ringmaster.engine.llm_memory import BYTES_GATHER, BYTES_GRADIENTS, BYTES_OPTIMIZER
from ringmaster.manifests.training import layout_env
from ringmaster.planning import plan_training
from ringmaster.planning.layouts import _search_replicas, layout_status, replica_candidates
from ringmaster.planning.training_flags import classify
from tests.unit.test_llm_layouts import refusals
from tests.unit.test_recompute_layers import LLAMA3_8B

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainingjob-llama3-8b-fsdp-h100.yaml"


def _hosts(replicas: int = 1, hosts: int = 2) -> L.LayoutHardware:
    """``hosts`` a3-highgpu-8g (8 x H100, 4 x 200 Gbps GPUDirect-TCPX)."""
    host = DEFAULT_CATALOG.host("nvidia-h100-80gb", 8, "a3-highgpu-8g")
    return replace(L.layout_hardware(host, hosts, DEFAULT_CATALOG), data_replicas=replicas)


def _evaluate(hw: L.LayoutHardware, sharding: int = SHARD_FULL) -> L.LayoutArrays:
    """Llama 3 8B, tensor 1, one sequence a micro-batch, 4 micro-batches a rank, Full recompute."""
    return L.evaluate_layouts(
        LLAMA3_8B,
        hw,
        global_batch=4 * hw.accelerators,
        tensor=np.array([1]),
        pipeline=np.array([1]),
        sharding=np.array([sharding]),
        micro_batch=np.array([1]),
        recompute=np.array([RECOMPUTE_FULL]),
        strategy=RING,
    )


def test_each_chip_holds_its_group_s_share_of_the_states() -> None:
    # 16 ranks: one FSDP group holds 1/16 of gradients and optimizer state; 2 groups of a host,
    # 1/8 each.
    one, two = _evaluate(_hosts(1)), _evaluate(_hosts(2))
    params = LLAMA3_8B.parameters
    for arrays, ranks in ((one, 16), (two, 8)):
        state = float(arrays.memory.gradients[0] + arrays.memory.optimizer[0])
        assert state == pytest.approx(params * (BYTES_GRADIENTS + BYTES_OPTIMIZER) / ranks)
    assert float(two.memory.total[0]) > float(one.memory.total[0])
    # and updates its share: the optimizer step is the group's
    assert float(two.optimizer_seconds[0]) > float(one.optimizer_seconds[0])


def test_the_sharded_collectives_stay_in_the_group_and_the_groups_all_reduce_their_shards() -> None:
    """Full sharding over 16 ranks gathers the bf16 weights of every micro-batch over the NICs;
    two groups of a host gather over NVLink and all-reduce 1/8 of the fp32 gradients across the
    hosts: the step's data-parallel time falls."""
    hw1, hw2 = _hosts(1), _hosts(2)
    one, two = _evaluate(hw1), _evaluate(hw2)
    assert float(two.data_parallel_seconds[0]) < float(one.data_parallel_seconds[0])
    # the cross-group part by hand: each rank all-reduces its 1/8 of the fp32 gradients with its
    # counterpart on the other host, the 8 ranks of a host at once over the host's NICs
    reduce_bytes = LLAMA3_8B.parameters * BYTES_GRADIENTS
    across = float(L.hybrid_replica_seconds(reduce_bytes, 1.0, 1.0, 16.0, hw2))
    shard = L._data_parallel_seconds(reduce_bytes / 8, 8.0, 1.0, 2.0, hw2, RING).seconds
    assert across == pytest.approx(float(shard))
    inside = L._data_parallel_seconds(
        (reduce_bytes + 2 * 4 * LLAMA3_8B.parameters * BYTES_GATHER) / 2.0, 1.0, 1.0, 8.0, hw2, RING
    ).seconds
    assert float(two.data_parallel_seconds[0]) == pytest.approx(float(inside) + across)
    # one replica group: nothing across
    assert float(L.hybrid_replica_seconds(reduce_bytes, 1.0, 1.0, 16.0, hw1)) == 0.0


def test_without_sharding_the_replicas_change_nothing() -> None:
    one = _evaluate(_hosts(1), SHARD_NONE)
    two = _evaluate(_hosts(2), SHARD_NONE)
    for a, b in ((one.step_seconds, two.step_seconds), (one.memory.total, two.memory.total)):
        assert float(b[0]) == pytest.approx(float(a[0]))


def test_a_data_degree_the_replicas_do_not_divide_is_not_searched() -> None:
    request = LayoutRequest(LLAMA3_8B, global_batch=64, tensor=8, pipeline=1, context=1)
    # tensor 8 on 2 hosts leaves 2 data ranks: 4 replica groups cannot split them
    with pytest.raises(NoLayoutError, match="dataReplicas 4"):
        search_layouts(request, _hosts(4))
    assert search_layouts(request, _hosts(2)).chosen.data == 2


def _job(**parallelism: Any) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc["spec"]["parallelism"].update(parallelism)
    return doc


def test_the_api_refuses_replicas_that_split_no_accelerators_and_replicas_on_a_tpu() -> None:
    assert refusals(_job(dataReplicas=2)) == ([], [])
    crd, python = refusals(_job(dataReplicas=3))
    words = "must divide the accelerators"
    assert any(p == "spec.parallelism.dataReplicas" and words in m for _, p, m in crd), crd
    assert any(p.endswith("dataReplicas") and words in m for p, m in python), python
    tpu = _job(dataReplicas=2)
    tpu["spec"]["accelerator"] = {
        "type": "tpu-v5-lite-podslice",
        "perWorker": 4,
        "topology": "2x4",
    }
    crd, python = refusals(tpu)
    assert any("TPUs take 1" in m for _, _, m in crd), crd
    assert any("TPUs take 1" in m for _, m in python), python


def test_the_plan_its_note_the_env_and_torchtitan_s_flag_carry_it() -> None:
    plan = plan_training(parse_manifest(_job(dataReplicas=2)).spec)
    assert plan.layout is not None
    status = layout_status(plan.layout)
    assert status["dataReplicas"] == 2
    notes = plan.prediction.notes
    assert any("2 replica groups of 8 data-parallel ranks" in n for n in notes), notes
    env = {e["name"]: e["value"] for e in layout_env(status)}
    assert env["RINGMASTER_DATA_REPLICAS"] == "2"
    plain = layout_status(plan_training(parse_manifest(_job()).spec).layout)
    assert plain["dataReplicas"] == 1
    assert (
        plain["memoryPerAcceleratorBytes"]["total"] < status["memoryPerAcceleratorBytes"]["total"]
    )
    flags = classify(
        ["torchrun", "-m", "torchtitan.train", "--parallelism.data_parallel_replicate_degree=4"],
        None,
        dict((e["name"], e["value"]) for e in layout_env(status)),
    )
    assert flags is not None
    assert [c.variable for c in flags.conflicts] == ["RINGMASTER_DATA_REPLICAS"]


def test_auto_searches_none_and_one_group_a_host_and_takes_the_faster() -> None:
    """Llama 2 7B at 1,024 tokens, one sequence a micro-batch, on 4 a3-highgpu-8g: fully sharded
    over 32 GPUs its weights' gathers cross the TCPX NICs every micro-batch and stay exposed;
    one group a host gathers over NVLink: Auto takes 4 groups. On one host, or a TPU, it is 1."""
    model = replace(LLAMA3_8B, sequence_length=1024)
    request = LayoutRequest(
        model, global_batch=128, tensor=1, pipeline=1, context=1, sharding="Full", micro_batch=1
    )
    hw = _hosts(1, hosts=4)
    steps = {r: search_layouts(request, replace(hw, data_replicas=r)).chosen for r in (1, 4)}
    assert steps[4].step_seconds < steps[1].step_seconds
    chosen_hw, search, tried = _search_replicas(request, hw, "Auto")
    assert sorted(tried) == [1, 4]
    assert chosen_hw.data_replicas == 4
    assert search.chosen.step_seconds == pytest.approx(steps[4].step_seconds)
    assert replica_candidates(_hosts(1, hosts=1), "Auto") == [1]
    tpu = L.layout_hardware(
        DEFAULT_CATALOG.host("tpu-v5-lite-podslice", 4), 4, DEFAULT_CATALOG, slice_axes=(4, 4, 1)
    )
    assert replica_candidates(tpu, "Auto") == [1]
    with pytest.raises(ValueError, match="TPUs take 1"):
        replica_candidates(tpu, 2)


def test_auto_is_taken_at_the_api_and_the_plan_names_its_choice() -> None:
    assert refusals(_job(dataReplicas="Auto")) == ([], [])
    plan = plan_training(parse_manifest(_job(dataReplicas="Auto")).spec)
    assert plan.layout is not None
    # two hosts whose FSDP gathers already hide behind compute: one group a host only doubles
    # each chip's states and optimizer step, so Auto keeps none
    assert layout_status(plan.layout)["dataReplicas"] == 1
    assert any(n.startswith("dataReplicas Auto: 1 kept (1 group: ") for n in plan.prediction.notes)
