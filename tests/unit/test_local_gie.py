"""`ringmaster cluster up --gie`: where the Gateway API Inference Extension's CRDs are looked for,
and the flag (no cluster needed; tests/e2e/test_inference_pool_crds.py installs them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ringmaster.localcluster import add_arguments
from ringmaster.localcluster.gie import CRD_DIRECTORY, LocalInferenceExtension


def test_the_crds_are_available_only_where_cluster_tools_copied_some(tmp_path: Path) -> None:
    assert CRD_DIRECTORY == "gie-crds"  # the folder hack/cluster-tools.sh fills
    assert not LocalInferenceExtension.available(tmp_path)
    (tmp_path / CRD_DIRECTORY).mkdir()
    assert not LocalInferenceExtension.available(tmp_path)  # an empty copy installs nothing
    (tmp_path / CRD_DIRECTORY / "inference.networking.k8s.io_inferencepools.yaml").write_text("")
    assert LocalInferenceExtension.available(tmp_path)


def test_cluster_up_takes_gie_as_it_takes_lws() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["up", "--gie", "--lws"]).gie
    assert not parser.parse_args(["up"]).gie
