"""The local cluster's wait for Ready nodes (its pure parts), and `ringmaster cluster pools`
needing no control-plane binaries."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ringmaster.localcluster.readiness import (
    BASE_WAIT_SECONDS,
    Progress,
    ReadyCount,
    node_is_ready,
    wait_limit_seconds,
)

pytestmark = pytest.mark.unit


def node(name: str, ready: str | None = "True") -> dict:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, *conditions]},
    }


def test_the_limit_grows_with_the_node_count() -> None:
    assert wait_limit_seconds(0) == BASE_WAIT_SECONDS
    assert wait_limit_seconds(2000) > wait_limit_seconds(200) > wait_limit_seconds(20)
    # What failed at scale: 2,000 nodes under kubectl wait's fixed 180 s.
    assert wait_limit_seconds(2000) > 180
    # Linear: the per-node share is the same at every size.
    assert wait_limit_seconds(2000) - wait_limit_seconds(1000) == pytest.approx(
        wait_limit_seconds(1000) - wait_limit_seconds(0)
    )


def test_a_node_is_ready_only_by_its_ready_condition() -> None:
    assert node_is_ready(node("a"))
    assert not node_is_ready(node("a", "False"))
    assert not node_is_ready(node("a", "Unknown"))
    assert not node_is_ready(node("a", None))
    assert not node_is_ready({"metadata": {"name": "a"}})


def test_a_ready_node_still_tainted_not_ready_is_not_ready_yet() -> None:
    # The scheduler refuses it until the node lifecycle controller lifts the taint.
    tainted = node("a") | {
        "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}
    }
    assert not node_is_ready(tainted)
    unreachable = node("a") | {
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}
    }
    assert not node_is_ready(unreachable)
    # A pool's own taint (TPU, say) is the pods' business, not readiness.
    pool_taint = node("a") | {
        "spec": {"taints": [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]}
    }
    assert node_is_ready(pool_taint)


def test_the_count_follows_list_items_and_watch_events_of_the_expected_nodes() -> None:
    count = ReadyCount(frozenset({"a", "b", "c"}))
    count.observe(node("a"))
    count.observe(node("b", "False"))
    count.observe(node("other"))  # not one of ours
    assert count.summary() == "1/3 nodes Ready" and not count.done
    assert count.not_ready() == ["b", "c"]
    count.observe(node("b"))
    count.observe(node("c"))
    assert count.done
    count.observe(node("c", "False"))  # a node can go NotReady again
    assert not count.done
    count.observe(node("c"))
    count.observe(node("a"), deleted=True)  # and be deleted
    assert count.summary() == "2/3 nodes Ready"


def test_progress_is_printed_at_each_tenth_and_every_few_seconds() -> None:
    progress = Progress(total=1000, every_seconds=10)
    assert progress.due(0, now=0.0)  # the first line
    assert not progress.due(50, now=1.0)
    assert progress.due(100, now=2.0)  # a tenth
    assert not progress.due(150, now=3.0)
    assert progress.due(160, now=12.5)  # ten seconds since the last line
    assert progress.due(1000, now=13.0)  # done


def test_cluster_pools_needs_no_control_plane_binaries(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RINGMASTER_BIN_DIR"}
    env["RINGMASTER_CACHE_DIR"] = str(tmp_path)  # no cluster, no binaries in there
    result = subprocess.run(
        [sys.executable, "-m", "ringmaster", "cluster", "pools", "--name", "nowhere"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "RINGMASTER_BIN_DIR" not in result.stderr and "bin-dir" not in result.stderr
    assert "no cluster 'nowhere'" in result.stderr
    assert "ringmaster cluster up --name nowhere" in result.stderr
    assert "Traceback" not in result.stderr
