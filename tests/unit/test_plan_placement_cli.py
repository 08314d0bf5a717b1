"""`ringmaster plan` prints a multi-host gang's step per placement in its pool (packed, spread over
blocks, and on NVLink-clique hosts TP in a clique against TP over the NICs) and which policy
``spec.placement.topology: Auto`` picks (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringmaster.cli import main

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BERT = EXAMPLES / "trainingjob-bert-large-auto.yaml"
TPU = EXAMPLES / "trainingjob-resnet50-tpu-v4.yaml"

NVL72 = """
apiVersion: ringmaster.dev/v1alpha1
kind: TrainingJob
metadata: {name: llama70b-nvl72}
spec:
  workers: 36
  accelerator: {type: nvidia-gb200, perWorker: 4}
  model:
    architecture: {layers: 80, hiddenSize: 8192, attentionHeads: 64, kvHeads: 8,
                   ffnHiddenSize: 28672, ffnType: Gated, vocabSize: 32000, sequenceLength: 4096}
  parallelism: {tensor: Auto, pipeline: 1, sharding: None, globalBatchSize: 288}
  template: {image: nvcr.io/nvidia/nemo:24.07}
"""


def plan(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["plan", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def placement_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("placement in the pool"))
    return lines[start : start + 6]


def test_an_nvl72_plan_shows_tp_in_a_clique_against_tp_over_the_nics(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = tmp_path / "nvl72.yaml"
    manifest.write_text(NVL72)
    code, out, err = plan(capsys, manifest)
    assert code == 0, err
    table = "\n".join(placement_lines(out))
    assert "spine oversubscription 1;" in table
    rows = {line.split()[-3]: line for line in table.splitlines() if line.endswith("%")}
    assert set(rows) == {"Packed", "Spread", "TensorOverNICs"}
    assert rows["Packed"].endswith("+0.0%") and rows["Spread"].endswith("+0.0%")
    loss = float(rows["TensorOverNICs"].split()[-1].rstrip("%"))
    assert loss > 5
    assert (
        "Auto: prefer one block (spread loses 0.0 %); require each TP group of 2 hosts in one "
        "NVLink clique" in table
    )
    code, out, err = plan(capsys, manifest, "-o", "json")
    placement = json.loads(out)["placement"]
    assert placement["nvlinkClique"] == "Required" and placement["block"] == "Preferred"
    assert placement["tensorGroupHosts"] == 2
    names = [s["placement"] for s in placement["steps"]]
    assert names[0] == "Packed" and "TensorOverNICs" in names and "Spread" in names


def test_a_stated_spine_oversubscription_makes_auto_require_one_block(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("machineTypes: {a2-highgpu-8g: {spineOversubscription: 2}}\n")
    code, out, err = plan(capsys, BERT, "--catalog", catalog)
    assert code == 0, err
    table = "\n".join(placement_lines(out))
    assert "spine oversubscription 2;" in table
    assert "Auto: require one block (spread loses" in table
    # Without it, the default non-blocking spine: nothing lost, Auto prefers.
    code, out, _ = plan(capsys, BERT)
    assert "Auto: prefer one block (spread loses 0.0 %)" in out
    code, out, _ = plan(capsys, BERT, "--catalog", catalog, "-o", "json")
    assert json.loads(out)["placement"]["block"] == "Required"


def test_a_bad_spine_oversubscription_is_refused_by_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("machineTypes: {a2-highgpu-8g: {spineOversubscription: 0.5}}\n")
    code, _, err = plan(capsys, BERT, "--catalog", catalog)
    assert code == 2 and "spineOversubscription" in err


def test_no_placement_table_for_a_tpu_slice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan(capsys, TPU)
    assert code == 0, err
    assert "placement in the pool" not in out
    code, out, _ = plan(capsys, TPU, "-o", "json")
    assert "placement" not in json.loads(out)
