"""The scale bench: the operator on a local cluster of thousands of simulated A100 hosts.

Brings up a private kwok cluster (`ringmaster-scale`), runs the operator, submits many
TrainingJob gangs at once and prints:
- how long the nodes took to come up;
- how long until every gang was decided (admitted, or refused for capacity);
- the operator's reconcile latency from its own histogram;
- the operator's peak memory.
It asserts nothing about time. Usage:

    python benchmarks/bench_scale.py [--hosts 2000] [--jobs 300] [--workers 8] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.kube import free_port  # noqa: E402

from ringmaster.localcluster.cluster import Binaries, LocalCluster  # noqa: E402
from ringmaster.localcluster.pools import POOLS_BY_NAME  # noqa: E402


def job(name: str, workers: int) -> dict[str, object]:
    return {
        "apiVersion": "ringmaster.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "workers": workers,
            "accelerator": {"type": "nvidia-tesla-a100", "perWorker": 8},
            "machineType": "a2-highgpu-8g",
            "model": {
                "parameters": "340M",
                "computeSecondsPerStep": 0.2,
                "batchSizePerAccelerator": 32,
            },
            "communication": {"strategy": "Ring"},
            "template": {"image": "trainer:1"},
        },
    }


def histogram_quantile(metrics: str, name: str, q: float) -> float | None:
    buckets = [
        (float("inf") if le == "+Inf" else float(le), float(count))
        for le, count in re.findall(
            rf'{name}_bucket{{kind="TrainingJob",le="([^"]+)"}} (\S+)', metrics
        )
    ]
    if not buckets:
        return None
    total = buckets[-1][1]
    return next((le for le, count in buckets if count >= q * total), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000, help="a2-highgpu-8g hosts")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8, help="workers (hosts) per job")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()

    bin_dir = (
        os.environ.get("RINGMASTER_BIN_DIR")
        or subprocess.run(
            ["bash", str(REPO / "hack/cluster-tools.sh")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    sizes = dict.fromkeys(POOLS_BY_NAME, 0) | {"a100-highgpu-8g": args.hosts}
    cluster = LocalCluster(Binaries.locate(bin_dir), "ringmaster-scale")
    start = time.monotonic()
    cluster.up(sizes, wait_seconds=900)
    nodes_up = time.monotonic() - start
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "-f", str(REPO / "crds"))
    cluster.kubectl("create", "namespace", "bench")

    metrics_port = free_port()
    log = (Path(os.environ.get("TMPDIR", "/tmp")) / "ringmaster-scale-operator.log").open("w")
    operator = subprocess.Popen(
        [sys.executable, "-m", "ringmaster", "run", "--metrics-port", str(metrics_port)],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(5)
        jobs = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [job(f"job-{i:04d}", args.workers) for i in range(args.jobs)],
        }
        submitted = time.monotonic()
        cluster.kubectl("apply", "-n", "bench", "-f", "-", input=json.dumps(jobs))
        decided = admitted = 0
        while time.monotonic() - submitted < 900:
            items = json.loads(cluster.kubectl("get", "tj", "-n", "bench", "-o", "json").stdout)
            conditions = [
                {c["type"]: c for c in (i.get("status") or {}).get("conditions", [])}
                for i in items["items"]
            ]
            decided = sum(1 for c in conditions if "Schedulable" in c)
            admitted = sum(
                1 for c in conditions if c.get("Schedulable", {}).get("status") == "True"
            )
            if decided == args.jobs:
                break
            time.sleep(1)
        all_decided = time.monotonic() - submitted
        pods = len(
            json.loads(cluster.kubectl("get", "pods", "-n", "bench", "-o", "json").stdout)["items"]
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as response:
            metrics = response.read().decode()
        rss = re.search(r"^process_resident_memory_bytes (\S+)", metrics, re.M)
        fits = args.hosts // args.workers
        print(f"hosts                           {args.hosts} (a2-highgpu-8g, 8 GPUs each)")
        print(f"nodes_ready_seconds             {nodes_up:.1f}")
        print(f"jobs_submitted                  {args.jobs} x {args.workers} workers")
        print(f"jobs_decided                    {decided}")
        print(f"jobs_admitted                   {admitted} (room for {fits} whole gangs)")
        print(f"worker_pods_created             {pods}")
        print(f"seconds_until_all_decided       {all_decided:.1f}")
        for q in (0.5, 0.99):
            value = histogram_quantile(metrics, "ringmaster_reconcile_duration_seconds", q)
            print(f"reconcile_seconds_p{int(q * 100):<2}          <= {value}")
        if rss:
            print(f"operator_resident_memory_mib    {float(rss.group(1)) / 2**20:.0f}")
    finally:
        operator.terminate()
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        if not args.keep:
            cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
