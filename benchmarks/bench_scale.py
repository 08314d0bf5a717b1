"""The scale bench: the operator on a local cluster of thousands of simulated A100 hosts.

Brings up a private kwok cluster (`ringmaster-scale`) and, in one run:
1. floor (before): the pods the admitted gangs would run, created bare (no operator, so no host
   chosen: the pool's nodeSelector only), timed until all are bound and Running, then deleted;
2. operator: submits many TrainingJob gangs at once; timed until every gang is decided and every
   admitted gang's pods are bound and Running; checks no partial gang and exactly as many
   admitted as fit;
3. churn: admitted gangs finish in waves (their pods exit 0), the waiting ones take their room;
   the time from a gang's hosts freed to the next gang's pods bound (p50, p99), and the
   operator's CPU seconds per gang admitted meanwhile;
4. floor (after): as 1, on the same cluster, with the operator stopped;
5. floor with Services: as 4, each gang's headless Service created first, as the operator does
   (a diagnostic: what the Services cost the scheduler and the API server, not the operator);
6. floor pinned: as 4, each pod pinned to a host of its own as the operator's admission pins
   them (a diagnostic: how much of the operator's lead over 4 is the scheduler's search).
It prints figures and asserts nothing about time. Usage:

    python benchmarks/bench_scale.py [--hosts 2000] [--jobs 300] [--workers 8] [--waves 5]
        [--block-hosts 16] [--keep]

``--block-hosts N`` labels the pool's hosts into GKE topology blocks of N hosts (host i in block
b<i // N>), so admission packs each gang by topology (issue 43); the default is the local pool's
own (localcluster/pools.py, BLOCK_HOSTS), and 0 leaves the hosts without topology labels, as
before issue 43: run both to compare the operator with and without topology in its cycle.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ringmaster.api import TrainingJobSpec  # noqa: E402
from ringmaster.localcluster.cluster import Binaries, LocalCluster  # noqa: E402
from ringmaster.localcluster.pools import POOLS, POOLS_BY_NAME, PoolTemplate  # noqa: E402
from ringmaster.localcluster.ports import free_port  # noqa: E402
from ringmaster.manifests.training import (  # noqa: E402
    PoolPlacement,
    rendezvous_service,
    selector_labels,
    worker_pod,
)

POOL = "a100-highgpu-8g"
NAMESPACE = "bench"
# Makes a simulated worker exit 0 (docs/local-cluster.md): how the churn phase ends gangs.
EXIT = {"metadata": {"annotations": {"sim.ringmaster.dev/exit-code": "0"}}}


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


def pools_with_blocks(block_hosts: int) -> tuple[PoolTemplate, ...]:
    """The local cluster's pools, the bench's pool in topology blocks of ``block_hosts`` hosts
    (0: no topology labels at all)."""
    return tuple(replace(p, block_hosts=block_hosts) if p.name == POOL else p for p in POOLS)


def blocks_described(hosts: int, block_hosts: int) -> str:
    """What the bench's pool looks like to topology-aware admission."""
    if not block_hosts:
        return "none (no topology labels: admission places gangs by room only)"
    blocks = -(-hosts // block_hosts)
    return f"{blocks} GKE blocks of {block_hosts} hosts (cloud.google.com/gce-topology-block)"


def histogram_buckets(
    metrics: str, name: str, labels: dict[str, str] | None = None
) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of each bucket, summed over the series with these labels
    (default: the TrainingJob controller's)."""
    wanted = {"kind": "TrainingJob"} if labels is None else labels
    buckets: Counter[float] = Counter()
    for found, count in re.findall(rf"^{name}_bucket{{([^}}]*)}} (\S+)$", metrics, re.M):
        series = dict(re.findall(r'(\w+)="([^"]*)"', found))
        if all(series.get(k, "") == v for k, v in wanted.items()):
            le = series["le"]
            buckets[float("inf") if le == "+Inf" else float(le)] += float(count)
    return sorted(buckets.items())


def histogram_quantile(
    metrics: str,
    name: str,
    q: float,
    labels: dict[str, str] | None = None,
    since: str | None = None,
) -> float | None:
    """The upper bound of the bucket that holds quantile q, among the series with these labels;
    with `since` (an earlier scrape), of the observations made after it."""
    buckets = histogram_buckets(metrics, name, labels)
    if since is not None:
        earlier = dict(histogram_buckets(since, name, labels))
        buckets = [(le, count - earlier.get(le, 0.0)) for le, count in buckets]
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    return next((le for le, count in buckets if count >= q * total), None)


def plain_watch() -> Any:
    """A watch whose events' objects stay the decoded JSON."""
    import kubernetes

    class Plain(kubernetes.watch.Watch):  # type: ignore[misc]
        def get_return_type(self, func: Any) -> None:
            return None

    return Plain()


class PodClock:
    """A watch on the bench namespace's pods: when each was first seen bound, Running and
    Succeeded (wall clock of this process, monotonic)."""

    def __init__(self, kubeconfig: Path) -> None:
        import kubernetes

        self.client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.succeeded: dict[str, float] = {}
        self.job_of: dict[str, str] = {}
        self.live: set[str] = set()
        # Each TrainingJob's phase and Schedulable status, from a watch: polling a LIST of 300
        # jobs with their plans each second loads the API server in the operator's phase only.
        self.jobs: dict[str, dict[str, Any]] = {}
        self.jobs_api = kubernetes.client.CustomObjectsApi(self.client)
        self._stop = False
        jobs = ("ringmaster.dev", "v1alpha1", NAMESPACE, "trainingjobs")
        self._threads = [
            threading.Thread(
                target=self._watch,
                args=(self.core.list_namespaced_pod, (NAMESPACE,), self._record),
                daemon=True,
            ),
            threading.Thread(
                target=self._watch,
                args=(self.jobs_api.list_namespaced_custom_object, jobs, self._record_job),
                daemon=True,
            ),
        ]
        for thread in self._threads:
            thread.start()

    def _watch(self, lister: Any, args: tuple[str, ...], record: Any) -> None:
        """Record every event of one kind, as plain dicts: the client's typed models cost the
        bench milliseconds of CPU per pod event, on the cores of the cluster it measures."""
        version = ""
        while not self._stop:
            try:
                stream = plain_watch().stream(
                    lister, *args, resource_version=version or None, timeout_seconds=60
                )
                for event in stream:
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    record(event["type"], obj, time.monotonic())
            except Exception:  # a watch that expired or broke: list again
                version = ""
                time.sleep(0.5)

    def _record_job(self, kind: str, job: dict[str, Any], now: float) -> None:
        name = job["metadata"]["name"]
        if kind == "DELETED":
            self.jobs.pop(name, None)
            return
        status = job.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        self.jobs[name] = {
            "name": name,
            "phase": status.get("phase"),
            "schedulable": conditions.get("Schedulable", {}).get("status"),
            # the topology blocks admission put the gang in (status.admission.blocks)
            "blocks": len((status.get("admission") or {}).get("blocks") or []),
        }

    def _record(self, kind: str, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            self.live.discard(name)
            return
        self.live.add(name)
        self.created.setdefault(name, now)
        labels = pod["metadata"].get("labels") or {}
        if "ringmaster.dev/trainingjob" in labels:
            self.job_of[name] = labels["ringmaster.dev/trainingjob"]
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(name, now)
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Running":
            self.running.setdefault(name, now)
        elif phase == "Succeeded":
            self.succeeded.setdefault(name, now)

    def forget(self) -> None:
        for table in (self.created, self.bound, self.running, self.succeeded, self.job_of):
            table.clear()

    def count_running(self, names: set[str] | None = None) -> int:
        # Copies: the watch thread adds to these while the bench reads them (list() of a dict
        # runs without letting another thread in).
        live = set(list(self.live))
        return sum(1 for n in list(self.running) if n in live and (names is None or n in names))

    def stop(self) -> None:
        self._stop = True

    def progress(self, start: float) -> str:
        """When half, nine tenths and all of the pods were first seen, bound and Running,
        in seconds from ``start``: says whether pods reached the scheduler late or were
        scheduled slowly."""

        def marks(table: dict[str, float]) -> str:
            times = sorted(list(table.values()))
            if not times:
                return "-"
            picks = (times[len(times) // 2], times[(len(times) * 9) // 10], times[-1])
            return "/".join(f"{t - start:.0f}" for t in picks)

        return (
            f"created {marks(self.created)}  bound {marks(self.bound)}  "
            f"Running {marks(self.running)} s (half/90%/all)"
        )


FLOOR_LABEL = "bench.ringmaster.dev/floor"


def gang_pods(
    name: str, workers: int, service: bool = False, hosts: list[str] | None = None
) -> list[dict[str, Any]]:
    """The pods the operator creates for a gang on the A100 pool, without an owner; with
    ``service``, labelled so that the gang's headless Service selects them, as the operator's;
    with ``hosts``, each pinned to its host, as the operator's."""
    spec = TrainingJobSpec.model_validate(job(name, workers)["spec"])
    placement = PoolPlacement(
        pool=POOL,
        node_selector={"cloud.google.com/gke-nodepool": POOL},
        accelerator_resource="nvidia.com/gpu",
        machine_type="a2-highgpu-8g",
    )
    pods = [
        worker_pod(name, NAMESPACE, spec, placement, r, 0, host=hosts[r] if hosts else None)
        for r in range(workers)
    ]
    for pod in pods:
        extra = selector_labels(name) if service else {}
        pod["metadata"]["labels"] = {FLOOR_LABEL: "true", **extra}
    return pods


def wait_until(what: str, done: Any, timeout: float, every: float = 0.5) -> float:
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not done after {timeout:.0f}s")
        time.sleep(every)
    return time.monotonic() - start


def create_plain(clock: PodClock, pod: dict[str, Any]) -> None:
    """Create a pod without decoding the answer into the client's typed model (milliseconds
    of the bench's CPU per pod, which the operator, creating its pods the same way, does not
    spend)."""
    response = clock.core.create_namespaced_pod(NAMESPACE, pod, _preload_content=False)
    response.read()
    response.release_conn()


def floor(
    clock: PodClock,
    gangs: int,
    workers: int,
    label: str,
    services: bool = False,
    pinned: bool = False,
) -> float:
    """Create the gangs' pods bare, as fast as the API takes them; seconds until all Running.
    With ``services``, each gang's headless Service first, as the operator makes them: the
    endpoint controllers then follow every pod, and kube-scheduler applies its default
    topology spreading to pods a Service selects. With ``pinned``, each pod pinned to a host
    of its own (the pool's hosts in name order), as the operator's admission pins them."""
    gang_names = [f"floor-{i:04d}" for i in range(gangs)]
    hosts: list[str] = []
    if pinned:
        nodes = clock.core.list_node(label_selector=f"cloud.google.com/gke-nodepool={POOL}")
        hosts = sorted(n.metadata.name for n in nodes.items)
    pods = [
        p
        for g, name in enumerate(gang_names)
        for p in gang_pods(
            name, workers, services, hosts[g * workers : (g + 1) * workers] if pinned else None
        )
    ]
    names = {p["metadata"]["name"] for p in pods}
    svcs = [rendezvous_service(name) for name in gang_names] if services else []
    for svc in svcs:
        svc["metadata"]["labels"] = {FLOOR_LABEL: "true"}
    clock.forget()
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        if services:
            list(pool.map(lambda svc: clock.core.create_namespaced_service(NAMESPACE, svc), svcs))
        list(pool.map(lambda p: create_plain(clock, p), pods))
    wait_until(
        f"floor {label}: {len(names)} pods Running",
        lambda: clock.count_running(names) == len(names),
        900,
    )
    seconds = time.monotonic() - start
    print(f"floor_{label}_progress{' ' * (10 - len(label))}{clock.progress(start)}", flush=True)
    clock.core.delete_collection_namespaced_pod(
        NAMESPACE, label_selector=f"{FLOOR_LABEL}=true", grace_period_seconds=0
    )
    for svc in svcs:
        clock.core.delete_namespaced_service(svc["metadata"]["name"], NAMESPACE)
    wait_until("floor pods gone", lambda: not (set(list(clock.live)) & names), 600)
    return seconds


def submit_jobs(clock: PodClock, jobs: list[dict[str, Any]]) -> None:
    """All at once, as the floor creates its pods (same threads). `kubectl apply` of a List
    sends them one after another, and under the load of the first gangs' pods it took 20 s
    to send 100: the operator's time was the submitter's."""

    api = clock.jobs_api
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda body: api.create_namespaced_custom_object(
                    "ringmaster.dev", "v1alpha1", NAMESPACE, "trainingjobs", body
                ),
                jobs,
            )
        )


def job_states(clock: PodClock) -> list[dict[str, Any]]:
    """Every job's phase and Schedulable status, as the bench's watch last saw them."""
    return list(dict(clock.jobs).values())


def blocks_per_gang(clock: PodClock) -> str:
    """How many topology blocks each admitted gang's hosts span, as its status says: with
    blocks, a gang that fits one block should get one."""
    admitted = [s for s in job_states(clock) if s["schedulable"] == "True"]
    counts = Counter(s["blocks"] for s in admitted)
    if not counts or set(counts) == {0}:
        return "- (no blocks recorded: the pool has no topology labels)"
    return ", ".join(
        f"{n} gangs in {b} block{'s' if b != 1 else ''}" for b, n in sorted(counts.items())
    )


def wave_stages(clock: PodClock, finished: list[str], started: list[str]) -> str:
    """One churn wave's stages, first / last pod, in seconds from its first pod Succeeded:
    the finished gangs' pods Succeeded, then the next gangs' pods created (the operator's part)
    and bound (the scheduler's)."""
    gone, new = set(finished), set(started)

    def span(table: dict[str, float], jobs: set[str]) -> list[float]:
        return [t for p, t in list(table.items()) if clock.job_of.get(p) in jobs]

    freed = span(clock.succeeded, gone)
    if not freed:
        return "-"
    zero = min(freed)

    def first_last(times: list[float]) -> str:
        return f"{min(times) - zero:.2f}/{max(times) - zero:.2f}" if times else "-"

    return (
        f"Succeeded {first_last(freed)}  created {first_last(span(clock.created, new))}  "
        f"bound {first_last(span(clock.bound, new))} s (first/last pod)"
    )


def apiserver_metrics(cluster: LocalCluster) -> str:
    return str(cluster.kubectl("get", "--raw", "/metrics").stdout)


# The writes on an admitted gang's path: as kube-apiserver labels them (verb, resource,
# subresource), and as the operator names its calls.
GANG_PATH_WRITES = (
    ({"verb": "POST", "resource": "events", "subresource": ""}, "create Event"),
    (
        {"verb": "PATCH", "resource": "trainingjobs", "subresource": "status"},
        "patch trainingjobs/status",
    ),
    ({"verb": "POST", "resource": "pods", "subresource": ""}, "create Pod"),
)


def p50_p99(after: str, before: str, name: str, labels: dict[str, str]) -> str:
    """A histogram's p50 / p99 bucket bounds over the observations between two scrapes."""
    p50, p99 = (histogram_quantile(after, name, q, labels, since=before) for q in (0.5, 0.99))
    return f"{p50}/{p99}"


def apiserver_latency(after: str, before: str) -> str:
    """kube-apiserver's own time for the writes on a gang's path (all clients), between two
    scrapes: what a round trip costs at the server."""
    return (
        ", ".join(
            f"{server['verb']} {server['resource']}"
            + (f"/{server['subresource']}" if server["subresource"] else "")
            + " <= "
            + p50_p99(after, before, "apiserver_request_duration_seconds", server)
            for server, _ in GANG_PATH_WRITES
        )
        + " s (p50/p99)"
    )


def operator_api_wait(after: str, before: str) -> str:
    """What the operator waited for the same writes (ringmaster_api_request_duration_seconds):
    beside kube-apiserver's time, says whether a round trip's time is spent at the server."""
    return (
        ", ".join(
            f"{call} <= "
            + p50_p99(after, before, "ringmaster_api_request_duration_seconds", {"call": call})
            for _, call in GANG_PATH_WRITES
        )
        + " s (p50/p99)"
    )


def apiserver_requests(cluster: LocalCluster, text: str | None = None) -> Counter[tuple[str, str]]:
    """kube-apiserver's request counts by (verb, resource), all clients together; refused
    ones (not 2xx) also under (verb, resource + " refused <code>")."""
    text = apiserver_metrics(cluster) if text is None else text
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = (
                labels.get("verb", ""),
                labels.get("resource", "")
                + ("/" + labels["subresource"] if labels.get("subresource") else ""),
            )
            n = int(float(line.rsplit(" ", 1)[1]))
            counts[key] += n
            code = labels.get("code", "200")
            if not code.startswith("2"):
                counts[(key[0], f"{key[1]} refused {code}")] += n
    return counts


def _writes(requests: Counter[tuple[str, str]], refused: bool) -> Counter[tuple[str, str]]:
    return Counter(
        {
            k: v
            for k, v in requests.items()
            if k[0] not in ("GET", "LIST", "WATCH") and (" refused " in k[1]) == refused
        }
    )


def writes_of(requests: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return _writes(requests, refused=False)


def refused_writes(requests: Counter[tuple[str, str]]) -> str:
    refused = _writes(requests, refused=True)
    return ", ".join(f"{verb} {what} {n}" for (verb, what), n in refused.most_common(6)) or "none"


def operator_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        return str(response.read().decode())


def operator_metrics_or_empty(port: int) -> str:
    try:
        return operator_metrics(port)
    except OSError:
        return ""


def cpu_seconds(metrics: str) -> float:
    found = re.search(r"^process_cpu_seconds_total (\S+)", metrics, re.M)
    return float(found.group(1)) if found else float("nan")


def gc_seconds(metrics: str) -> float:
    """The operator's time in CPython's garbage collector, every generation."""
    samples = re.findall(r"^ringmaster_gc_pause_seconds_total\{[^}]*\} (\S+)", metrics, re.M)
    return sum(float(v) for v in samples)


class ComponentCpu:
    """CPU seconds of each control-plane process (kwokctl's pid files), the operator and this
    bench since the last reading: on 2 cores they share one budget, so where a phase's time
    went is in here."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.pids = {
            f.stem: int(f.read_text().strip())
            for f in (cluster.kubeconfig.parent / "pids").glob("*.pid")
        }
        self.last = self.read()

    def read(self) -> dict[str, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        seconds = {"bench": sum(os.times()[:2])}
        for name, pid in self.pids.items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            seconds[name] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        return seconds

    def since_last(self) -> str:
        now = self.read()
        spent = {k: v - self.last.get(k, 0.0) for k, v in now.items()}
        self.last = now
        ordered = sorted(spent.items(), key=lambda kv: -kv[1])
        return f"{sum(spent.values()):.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in ordered)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# The operator under cProfile: kopf stops on SIGTERM and returns, then the stats are written.
PROFILED = """
import cProfile, runpy, sys
sys.argv = ["ringmaster", *sys.argv[1:]]
profile = cProfile.Profile()
profile.enable()
try:
    runpy.run_module("ringmaster", run_name="__main__")
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats({out!r})
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000, help="a2-highgpu-8g hosts")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8, help="workers (hosts) per job")
    parser.add_argument("--waves", type=int, default=5, help="churn: waves of finishing gangs")
    parser.add_argument(
        "--block-hosts",
        type=int,
        default=POOLS_BY_NAME[POOL].block_hosts,
        help="hosts per topology block (default: the local pool's own; 0: no topology labels)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument(
        "--kwok-pod-workers",
        type=int,
        default=None,
        help="goroutines kwok plays pod stages with (default: kwok's 4); a new cluster only",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="run the operator under cProfile (its event loop's thread) and write the stats here",
    )
    parser.add_argument(
        "--timeline",
        metavar="FILE",
        default=None,
        help="write every pod's bound/Running/Succeeded times (monotonic, JSON) here",
    )
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
    fits = args.hosts // args.workers
    sizes = dict.fromkeys(POOLS_BY_NAME, 0) | {POOL: args.hosts}
    cluster = LocalCluster(Binaries.locate(bin_dir), "ringmaster-scale", args.kwok_pod_workers)
    start = time.monotonic()
    cluster.up(sizes, wait_seconds=900, pools=pools_with_blocks(args.block_hosts))
    nodes_up = time.monotonic() - start
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "-f", str(REPO / "crds"))
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)  # a kept cluster has it
    load_before = os.getloadavg()
    clock = PodClock(cluster.kubeconfig)
    cpu = ComponentCpu(cluster)
    floor_requests = apiserver_requests(cluster)
    floor_before = floor(clock, min(fits, args.jobs), args.workers, "before")
    floor_writes = writes_of(apiserver_requests(cluster) - floor_requests)
    print(f"floor_before_seconds            {floor_before:.1f}", flush=True)
    print(f"floor_before_cpu_seconds        {cpu.since_last()}", flush=True)

    metrics_port = free_port()
    log = (Path(os.environ.get("TMPDIR", "/tmp")) / "ringmaster-scale-operator.log").open("w")
    command = ["-m", "ringmaster", "run", "--metrics-port", str(metrics_port)]
    if args.profile:
        command = ["-c", PROFILED.format(out=args.profile), *command[2:]]
    operator = subprocess.Popen(
        [sys.executable, *command],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # Timed from a ready operator, as the floor is from a ready cluster: the gauge below is
        # first set once kopf has listed everything and the controllers have started.
        ready = wait_until(
            "the operator to start",
            lambda: "ringmaster_trainingjobs{" in operator_metrics_or_empty(metrics_port),
            900,
        )
        print(f"operator_ready_seconds          {ready:.1f}", flush=True)
        cpu.pids["operator"] = operator.pid
        clock.forget()
        cpu.since_last()
        at_submit = operator_metrics(metrics_port)
        cpu_at_submit, gc_at_submit = cpu_seconds(at_submit), gc_seconds(at_submit)
        jobs = [job(f"job-{i:04d}", args.workers) for i in range(args.jobs)]
        requests_before = apiserver_requests(cluster)
        submitted = time.monotonic()
        submit_jobs(clock, jobs)
        print(f"jobs_submitted_seconds          {time.monotonic() - submitted:.1f}", flush=True)
        decided_at = None
        while time.monotonic() - submitted < 1800:
            states = job_states(clock)
            decided = sum(1 for s in states if s["schedulable"] is not None)
            admitted = sum(1 for s in states if s["schedulable"] == "True")
            if decided == args.jobs and decided_at is None:
                decided_at = time.monotonic() - submitted
            want = min(admitted, fits) * args.workers
            if decided_at is not None and admitted and clock.count_running() >= want:
                break
            time.sleep(1)
        operator_seconds = time.monotonic() - submitted
        operator_progress = clock.progress(submitted)
        operator_cpu = cpu.since_last()
        requests = apiserver_requests(cluster) - requests_before
        per_job: dict[str, int] = {}
        for pod, owner in list(clock.job_of.items()):
            if pod in clock.live:
                per_job[owner] = per_job.get(owner, 0) + 1
        partial = sorted(j for j, n in per_job.items() if n != args.workers)
        metrics = operator_metrics(metrics_port)
        rss = re.search(r"^process_resident_memory_bytes (\S+)", metrics, re.M)

        print(f"hosts                           {args.hosts} (a2-highgpu-8g, 8 GPUs each)")
        print(f"topology_blocks                 {blocks_described(args.hosts, args.block_hosts)}")
        print(f"kwok_pod_workers                {args.kwok_pod_workers or '4 (kwok default)'}")
        print(f"nodes_ready_seconds             {nodes_up:.1f}")
        print(f"load_average_at_start           {' '.join(f'{x:.1f}' for x in load_before)}")
        print(f"jobs_submitted                  {args.jobs} x {args.workers} workers")
        print(f"jobs_admitted                   {admitted} (room for {fits} whole gangs)")
        print(f"partial_gangs                   {len(partial)} {partial[:5]}")
        print(f"blocks_per_admitted_gang        {blocks_per_gang(clock)}")
        decided_text = f"{decided_at:.1f}" if decided_at is not None else "not all decided"
        print(f"seconds_until_all_decided       {decided_text}")
        print(f"operator_seconds_to_all_running {operator_seconds:.1f}")
        print(f"operator_progress               {operator_progress}")
        print(f"operator_phase_cpu_seconds      {operator_cpu}")
        # Every client's writes meanwhile (the operator's, the scheduler's, kwok's, this bench's),
        # beside the floor's for the same pods: on a 2-core machine the API server's CPU is shared.
        writes = writes_of(requests)
        print(
            f"apiserver_writes_meanwhile      {sum(writes.values())} "
            f"(floor: {sum(floor_writes.values())}): "
            + ", ".join(f"{verb} {res} {n}" for (verb, res), n in writes.most_common(8))
        )
        print(f"apiserver_writes_refused        {refused_writes(requests)}")
        burst_metrics = operator_metrics(metrics_port)
        print(
            "operator_cpu_seconds_meanwhile  "
            f"{cpu_seconds(burst_metrics) - cpu_at_submit:.1f} "
            f"(of which garbage collection {gc_seconds(burst_metrics) - gc_at_submit:.1f})"
        )
        for q in (0.5, 0.99):
            value = histogram_quantile(metrics, "ringmaster_reconcile_duration_seconds", q)
            print(f"reconcile_seconds_p{int(q * 100):<2}          <= {value}")
        if rss:
            print(f"operator_resident_memory_mib    {float(rss.group(1)) / 2**20:.0f}", flush=True)

        # Churn: gangs finish in waves; the waiting ones take their room. It starts once the
        # operator has caught up with the burst (every admitted job's status says Running), so
        # it measures admission, not the burst's last status writes queued before its events.
        last_running = time.monotonic()
        wait_until(
            "every admitted job Running in its status",
            lambda: sum(1 for s in job_states(clock) if s["phase"] == "Running") >= admitted,
            300,
        )
        print(
            f"status_running_lag_seconds      {time.monotonic() - last_running:.1f} "
            "(from the burst's last pod Running to every admitted job's status Running)"
        )
        waiting = args.jobs - admitted
        per_wave = max(1, min(waiting, fits) // max(args.waves, 1)) if waiting else 0
        metrics_before_churn = operator_metrics(metrics_port)
        cpu_before = cpu_seconds(metrics_before_churn)
        apiserver_before_churn = apiserver_metrics(cluster)
        requests_before_churn = apiserver_requests(cluster, apiserver_before_churn)
        running_jobs = sorted({clock.job_of[p] for p in list(clock.running) if p in clock.job_of})
        finished: list[str] = []
        churn_admitted: list[str] = []
        for wave in range(args.waves if per_wave else 0):
            batch = running_jobs[wave * per_wave : (wave + 1) * per_wave]
            before = {s["name"] for s in job_states(clock) if s["schedulable"] == "True"}
            pods = [p for p, j in list(clock.job_of.items()) if j in batch]
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p: clock.core.patch_namespaced_pod(p, NAMESPACE, EXIT), pods))
            finished += batch

            def wave_bound(before: set[str] = before, n: int = len(batch)) -> bool:
                now = {s["name"] for s in job_states(clock) if s["schedulable"] == "True"}
                new = now - before
                return len(new) >= n and all(
                    sum(1 for p, j in list(clock.job_of.items()) if j == name and p in clock.bound)
                    == args.workers
                    for name in new
                )

            wait_until(f"churn wave {wave}", wave_bound, 600, every=1.0)
            now_admitted = {s["name"] for s in job_states(clock) if s["schedulable"] == "True"}
            new_gangs = sorted(now_admitted - before)
            churn_admitted += new_gangs
            print(f"churn_wave_{wave}                    {wave_stages(clock, batch, new_gangs)}")
        after = operator_metrics(metrics_port)
        cpu_after = cpu_seconds(after)
        print(f"churn_cpu_seconds               {cpu.since_last()}")
        apiserver_after_churn = apiserver_metrics(cluster)
        churn_writes = writes_of(
            apiserver_requests(cluster, apiserver_after_churn) - requests_before_churn
        )
        print(
            f"churn_apiserver_writes          {sum(churn_writes.values())}: "
            + ", ".join(f"{verb} {res} {n}" for (verb, res), n in churn_writes.most_common(10))
        )
        print(
            "churn_apiserver_latency         "
            + apiserver_latency(apiserver_after_churn, apiserver_before_churn)
        )
        print("churn_operator_api_wait         " + operator_api_wait(after, metrics_before_churn))
        print(
            "churn_operator_gc_seconds       "
            f"{gc_seconds(after) - gc_seconds(metrics_before_churn):.1f}"
        )

        def last(table: dict[str, float], name: str) -> float:
            return max(t for p, t in list(table.items()) if clock.job_of.get(p) == name)

        freed = sorted(last(clock.succeeded, j) for j in finished)
        bound = sorted(last(clock.bound, j) for j in churn_admitted)
        latencies = [b - f for f, b in zip(freed, bound, strict=False)]
        if latencies:
            print(f"churn_gangs_admitted            {len(churn_admitted)} in {args.waves} waves")
            print(f"churn_freed_to_bound_p50        {statistics.median(latencies):.2f} s")
            print(f"churn_freed_to_bound_p99        {percentile(latencies, 0.99):.2f} s")
            print(
                "operator_cpu_seconds_per_gang   "
                f"{(cpu_after - cpu_before) / max(len(churn_admitted), 1):.3f}"
            )
        # The operator's share of a gang's start (its own histograms): over the whole run, and
        # in the churn alone (the burst's 250 gangs would hide the churn's 50).
        for stage in ("queued", "created"):
            name, labels = "ringmaster_admission_start_seconds", {"stage": stage}
            p50, p99 = (histogram_quantile(after, name, q, labels) for q in (0.5, 0.99))
            print(f"admitted_to_{stage + '_seconds':<17} p50 <= {p50}, p99 <= {p99}")
            p50, p99 = (
                histogram_quantile(after, name, q, labels, since=metrics_before_churn)
                for q in (0.5, 0.99)
            )
            print(f"churn_admitted_to_{stage:<13} p50 <= {p50}, p99 <= {p99} s")
        p50, p99 = (
            histogram_quantile(after, "ringmaster_admission_cycle_seconds", q, {})
            for q in (0.5, 0.99)
        )
        print(f"admission_cycle_seconds         p50 <= {p50}, p99 <= {p99}", flush=True)

        if args.timeline:
            tables = {
                "created": dict(clock.created),
                "bound": dict(clock.bound),
                "running": dict(clock.running),
                "succeeded": dict(clock.succeeded),
            }
            Path(args.timeline).write_text(
                json.dumps(
                    {
                        **tables,
                        "job_of": dict(clock.job_of),
                        "finished": finished,
                        "churn_admitted": churn_admitted,
                    }
                )
            )

        # The floor again, on the same cluster, without the operator.
        cluster.kubectl("delete", "tj", "--all", "-n", NAMESPACE, "--wait=false")
        operator.terminate()
        operator.wait(timeout=60)
        wait_until("the jobs' pods gone", lambda: not list(clock.live), 900, every=1.0)
        floor_after = floor(clock, min(fits, args.jobs), args.workers, "after")
        floor_mean = (floor_before + floor_after) / 2
        print(f"floor_after_seconds             {floor_after:.1f}")
        print(f"operator_over_floor             {operator_seconds / floor_mean:.2f}")
        print(f"operator_over_floor_before      {operator_seconds / floor_before:.2f}")
        print(f"operator_over_floor_after       {operator_seconds / floor_after:.2f}")
        # The same pods with their gangs' headless Services (no operator): what the Services
        # alone cost the scheduler and the API server, apart from the operator's own cost.
        with_services = floor(clock, min(fits, args.jobs), args.workers, "services", services=True)
        print(f"floor_with_services_seconds     {with_services:.1f}")
        print(f"operator_over_floor_services    {operator_seconds / with_services:.2f}")
        # The same bare pods pinned to hosts as the operator pins its own: how much of the
        # operator's lead over the bare floor is kube-scheduler searching the pool per pod.
        pinned = floor(clock, min(fits, args.jobs), args.workers, "pinned", pinned=True)
        print(f"floor_pinned_seconds            {pinned:.1f}")
        print(f"operator_over_floor_pinned      {operator_seconds / pinned:.2f}")
        print(f"load_average_at_end             {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        clock.stop()
        if operator.poll() is None:
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
