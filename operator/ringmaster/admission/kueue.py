"""Kueue's protocol for an external job type, for TrainingJobs: pure (no kopf, no I/O).

Modelled on Kueue's own job integrations (kubernetes-sigs/kueue v0.19.2,
pkg/controller/jobframework/reconciler.go, pkg/workload/, apis/kueue/v1beta2):

- **Create.** A job labelled ``kueue.x-k8s.io/queue-name`` gets one Workload, named as Kueue names
  its own (``trainingjob-<name>-<hash>``, workload_names.go), controlled by the job (owner
  reference with ``controller: true``), labelled with the job's UID, with one pod set per kind of
  pod and their real templates and counts, and the priority of a WorkloadPriorityClass (label
  ``kueue.x-k8s.io/priority-class``) or of the pods' PriorityClass (``ExtractPriority``).
- **Wait.** Nothing runs until the Workload is ``Admitted``; while it is not, Kueue's
  ``QuotaReserved=False`` message says why (``IsAdmitted``).
- **Start.** On admission, each pod set's pods get the node labels and tolerations of the
  ResourceFlavors assigned to it (``podset.FromAssignment`` and ``Merge``: a node-selector key
  with another value is a conflict, not an override).
- **Report.** ``PodsReady`` (``generatePodsReadyCondition``), and ``Finished`` with reason
  Succeeded or Failed when the job ends (``workloadfinish.Finish``).
- **Evicted.** ``Evicted=True``: stop the job; once none of its pods is left, clear the quota
  reservation: ``Requeued`` (True only for Preempted and NodeFailures, as Kueue's integrations
  do), ``QuotaReserved=False`` reason Pending, no ``status.admission``, ``Admitted=False``. Kueue
  then queues the Workload again (or, for the other reasons, after its own backoff).
- **Suspend.** A job suspended by its user deactivates its Workload (``spec.active: false``),
  which makes Kueue evict it and keep it out of the queue until the job resumes: the user's
  suspend and Kueue's admission are two separate levers and never write each other's field.

- **Topology.** Where the job's pools carry topology levels and the cluster's Kueue runs
  Topology Aware Scheduling for them (a ResourceFlavor with ``spec.topologyName`` whose Topology
  has the level), the worker pod sets carry the job's topology verdict as Kueue's integrations
  write one: the pod template annotation ``kueue.x-k8s.io/podset-required-topology`` or
  ``-preferred-topology`` (the block level's node label) and ``-slice-required-topology`` with
  ``-slice-size`` (each tensor-parallel group's NVLink clique), and the same in the pod set's
  ``topologyRequest`` (jobframework/tas.go ``NewPodSetTopologyRequest``: Kueue reads the
  Workload's field, not the annotations, when it admits). Without such a flavor the pod sets
  ask for nothing: Kueue refuses a TAS request on a flavor without a topology
  (tas_flavorassigner.go), and Ringmaster's own packing is the job's placement.

  Kueue admits such a pod set with a ``topologyAssignment``: the domains (hosts, where the
  Topology's lowest level is the hostname) and how many pods each takes. Each worker pod goes to
  its rank's domain, as Kueue's TopologyUngater sends a rank-ordered pod (``rankToDomainID``:
  the domains in order, each repeated by its count), through a node selector of the domain's
  level labels, and carries the pod set's topology annotations, so that Kueue counts it as the
  Workload's and not a second time as a non-TAS pod of its node (``belongsToNonTASCache``).
  Without that, kube-scheduler may put the gang elsewhere in the pool than Kueue counted it,
  and Kueue then sees room taken twice and holds a later job Pending with room free.

Ringmaster adds one thing Kueue's integrations do not have: its own choice of pools. The worker
pod set's template carries a required node affinity over the pools Ringmaster would run the job
on, so Kueue only assigns flavors that fit them; on admission the flavor's node labels must
select one of those pools (:func:`pool_for_flavor`), or the job says why not.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kubernetes.utils.quantity import parse_quantity

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
WORKLOAD_KIND = "Workload"
WORKLOAD_PLURAL = "workloads"
WORKLOAD_CRD = f"{WORKLOAD_PLURAL}.{KUEUE_GROUP}"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# Set on a Workload that Ringmaster deactivated because its job was suspended: only those are
# activated again on resume (a Workload Kueue deactivated itself stays so).
SUSPENDED_ANNOTATION = "ringmaster.dev/deactivated-by-suspend"

# Topology Aware Scheduling (apis/kueue/v1beta2/topology_types.go).
TOPOLOGY_PLURAL = "topologies"
PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
PODSET_SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
PODSET_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
PODSET_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
# A pod with one of these is Kueue's TAS pod (pkg/util/tas IsTAS): its room is its Workload's
# topology assignment; without, Kueue counts it again as another tenant of its node.
TAS_POD_ANNOTATIONS = (
    PODSET_REQUIRED_TOPOLOGY,
    PODSET_PREFERRED_TOPOLOGY,
    PODSET_SLICE_REQUIRED_TOPOLOGY,
    PODSET_SLICE_SIZE,
    PODSET_UNCONSTRAINED_TOPOLOGY,
)

WORKERS_POD_SET = "workers"
REDUCERS_POD_SET = "reducers"
# Kueue's Workload takes at most 18 pod sets (apis/kueue/v1beta2/workload_types.go, PodSets'
# MaxItems); a multislice job gets one per slice up to that, so quota and flavors are per slice.
MAX_POD_SETS = 18


def worker_pod_sets(workers: int, slices: int) -> list[tuple[str, int]]:
    """The worker pod sets of a job, (name, count): ``workers`` for one slice; ``slice-<id>``
    per slice of a multislice job, each of ``workers / slices`` (every slice counted in quota,
    each given its own flavor); past MAX_POD_SETS slices, one ``workers`` set of them all (the
    form of Kueue's own JobSet integration: one pod set per replicated Job, count = replicas x
    parallelism), which still counts every slice."""
    if slices <= 1 or slices > MAX_POD_SETS:
        return [(WORKERS_POD_SET, workers)]
    return [(f"slice-{i}", workers // slices) for i in range(slices)]


def pod_set_of_rank(workers: int, slices: int, rank: int) -> tuple[str, int]:
    """The worker pod set that holds worker ``rank``, and the rank's index in it."""
    first = 0
    for name, count in worker_pod_sets(workers, slices):
        if rank < first + count:
            return name, rank - first
        first += count
    raise ValueError(f"rank {rank} is past the job's {workers} workers")


# Kueue's condition types and reasons (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED, ADMITTED, EVICTED = "QuotaReserved", "Admitted", "Evicted"
FINISHED, PODS_READY, REQUEUED = "Finished", "PodsReady", "Requeued"
EVICTED_BY_PREEMPTION, EVICTED_BY_NODE_FAILURES = "Preempted", "NodeFailures"
# Evictions after which the integration itself marks the Workload Requeued=True (reconciler.go).
REQUEUED_AT_ONCE = frozenset({EVICTED_BY_PREEMPTION, EVICTED_BY_NODE_FAILURES})

_MAX_NAME = 253  # Kueue's longMaxWorkloadNameLength (ShortWorkloadNames is off by default)
_HASH_LENGTH = 5


def queue_name(labels: Mapping[str, str] | None) -> str | None:
    """The LocalQueue a job asks for, or None when it is not Kueue's to admit."""
    value = (labels or {}).get(QUEUE_NAME_LABEL)
    return value or None


def workload_name(
    job: str, uid: str, kind: str = "TrainingJob", group: str = "ringmaster.dev"
) -> str:
    """The name Kueue's integrations give a job's Workload (GetWorkloadNameForOwnerWithGVK):
    ``<kind>-<name>`` cut to fit, a dash, and 5 hex digits of sha1(kind, group, name, uid)."""
    prefix = f"{kind.lower()}-{job}"[: _MAX_NAME - 1 - _HASH_LENGTH]
    digest = hashlib.sha1("\n".join((kind, group, job, uid)).encode(), usedforsecurity=False)
    return f"{prefix}-{digest.hexdigest()[:_HASH_LENGTH]}"


# ---------------------------------------------------------------- priority


@dataclass(frozen=True)
class WorkloadPriority:
    value: int
    ref: Mapping[str, str] | None = None  # spec.priorityClassRef: group, kind, name


@dataclass(frozen=True)
class PriorityProblem:
    reason: str
    message: str


def workload_priority(
    job_labels: Mapping[str, str],
    pod_priority_class: str | None,
    workload_classes: Mapping[str, int],
    pod_classes: Mapping[str, tuple[int, bool]],
) -> WorkloadPriority | PriorityProblem:
    """The Workload's priority as Kueue's ExtractPriority finds it: the WorkloadPriorityClass the
    job's label names, else the pods' PriorityClass, else the cluster's default PriorityClass,
    else 0. ``pod_classes``: name -> (value, globalDefault)."""
    wanted = job_labels.get(PRIORITY_CLASS_LABEL)
    if wanted:
        if wanted not in workload_classes:
            return PriorityProblem(
                "PriorityClassNotFound",
                f"WorkloadPriorityClass {wanted} (label {PRIORITY_CLASS_LABEL}) does not exist",
            )
        ref = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": wanted}
        return WorkloadPriority(workload_classes[wanted], ref)
    if pod_priority_class:
        if pod_priority_class not in pod_classes:
            return PriorityProblem(
                "PriorityClassNotFound",
                f"PriorityClass {pod_priority_class} (spec.template.priorityClassName) "
                "does not exist",
            )
        ref = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pod_priority_class}
        return WorkloadPriority(pod_classes[pod_priority_class][0], ref)
    default = sorted((n, v) for n, (v, is_default) in pod_classes.items() if is_default)
    if default:
        name, value = default[0]
        return WorkloadPriority(
            value, {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
        )
    return WorkloadPriority(0)


# ---------------------------------------------------------------- the Workload a job maps to


@dataclass(frozen=True)
class TopologyRequest:
    """A pod set's request to Kueue's Topology Aware Scheduling: all its pods in one domain of
    ``required`` (or preferably of ``preferred``), and every ``slice_size`` consecutive pods in
    one domain of ``slice_level``."""

    required: str | None = None
    preferred: str | None = None
    slice_level: str | None = None
    slice_size: int | None = None

    def annotations(self) -> dict[str, str]:
        """The pod template annotations Kueue's integrations read it from."""
        out = {}
        if self.required:
            out[PODSET_REQUIRED_TOPOLOGY] = self.required
        elif self.preferred:
            out[PODSET_PREFERRED_TOPOLOGY] = self.preferred
        if self.slice_level and self.slice_size:
            out[PODSET_SLICE_REQUIRED_TOPOLOGY] = self.slice_level
            out[PODSET_SLICE_SIZE] = str(self.slice_size)
        return out

    def to_workload(self) -> dict[str, Any]:
        """The pod set's ``topologyRequest`` (PodSetTopologyRequest), as jobframework builds it
        from the annotations."""
        out: dict[str, Any] = {}
        if self.required:
            out["required"] = self.required
        elif self.preferred:
            out["preferred"] = self.preferred
        if self.slice_level and self.slice_size:
            out["podSetSliceRequiredTopology"] = self.slice_level
            out["podSetSliceSize"] = self.slice_size
        return out


def topology_request(
    levels: Sequence[str],
    block: str,
    cliques: str,
    group_hosts: int,
    tas_levels: Collection[str],
    clique_key: str,
) -> TopologyRequest | None:
    """The worker pod set's request from the job's topology verdict: ``block`` (Required or
    Preferred) for the pool's block level (``levels[0]`` of the pool's topology levels, the
    NVLink clique ``clique_key`` aside), and ``cliques`` for each group of ``group_hosts``
    hosts (Required: one NVLink clique each, a Kueue pod set slice). Only the levels Kueue has
    (``tas_levels``: those of the Topologies of the flavors that can hold the job) are asked
    for; None when none is."""
    block_key = next((k for k in levels if k != clique_key), None)
    required = preferred = None
    if block_key is not None and block_key in tas_levels:
        if block == "Required":
            required = block_key
        else:
            preferred = block_key
    slice_level, slice_size = None, None
    splits = group_hosts > 1 and clique_key in levels and clique_key in tas_levels
    if splits and cliques == "Required":
        slice_level, slice_size = clique_key, group_hosts
    if required is None and preferred is None and slice_level is None:
        return None
    return TopologyRequest(required, preferred, slice_level, slice_size)


def tas_levels(
    pools: Sequence[Mapping[str, str]],
    flavors: Mapping[str, Flavor],
    topologies: Mapping[str, Sequence[str]],
) -> set[str]:
    """The node labels of the levels Kueue's Topology Aware Scheduling knows for the job's
    pools: the levels of the Topology of every flavor with one whose node labels select one of
    ``pools`` (the labels every node of each carries)."""
    levels: set[str] = set()
    for flavor in flavors.values():
        if flavor.topology_name is None or flavor.topology_name not in topologies:
            continue
        if any(all(p.get(k) == v for k, v in flavor.node_labels.items()) for p in pools):
            levels.update(topologies[flavor.topology_name])
    return levels


def topology_levels(body: Mapping[str, Any]) -> tuple[str, ...]:
    """A Kueue Topology's levels, outermost first: their node labels."""
    return tuple(
        str(level["nodeLabel"])
        for level in (body.get("spec") or {}).get("levels") or []
        if level.get("nodeLabel")
    )


@dataclass(frozen=True)
class PodSet:
    """One homogeneous group of the job's pods: a real pod (its template) and how many."""

    name: str
    count: int
    pod: Mapping[str, Any]
    topology: TopologyRequest | None = None


def template_for_pools(
    pod: Mapping[str, Any], pools: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    """A pod set's template from one real pod: its metadata cut to labels and annotations (all a
    Workload's template may carry), and its pool node selector widened to a required node
    affinity over all the pools Ringmaster would run it on (one OR-ed term per pool), so that
    Kueue assigns only flavors whose node labels agree with one of them."""
    metadata = pod.get("metadata") or {}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    pool_keys = {key for selector in pools for key in selector}
    selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k not in pool_keys}
    if selector:
        spec["nodeSelector"] = selector
    else:
        spec.pop("nodeSelector", None)
    if pools:
        terms = [
            {
                "matchExpressions": [
                    {"key": k, "operator": "In", "values": [v]} for k, v in sorted(one.items())
                ]
            }
            for one in pools
        ]
        affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    template: dict[str, Any] = {"spec": spec}
    kept = {k: dict(metadata[k]) for k in ("labels", "annotations") if metadata.get(k)}
    if kept:
        template["metadata"] = kept
    return template


def build_workload(
    *,
    job: str,
    namespace: str,
    uid: str,
    queue: str,
    pod_sets: Sequence[PodSet],
    priority: WorkloadPriority,
    pools: Sequence[Mapping[str, str]],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Workload for a planned job (its owner reference is added by the shell, which has the
    job's body). ``pools``: the node selectors of the pools the job may run on, best first."""
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [_pod_set(s, pools) for s in pod_sets if s.count > 0],
        "priority": priority.value,
    }
    if priority.ref is not None:
        spec["priorityClassRef"] = dict(priority.ref)
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": WORKLOAD_KIND,
        "metadata": {
            "name": workload_name(job, uid),
            "namespace": namespace,
            "labels": {**(labels or {}), JOB_UID_LABEL: uid},
        },
        "spec": spec,
    }


def _pod_set(pod_set: PodSet, pools: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    template = template_for_pools(pod_set.pod, pools)
    out: dict[str, Any] = {"name": pod_set.name, "count": pod_set.count, "template": template}
    if pod_set.topology is not None:
        metadata = template.setdefault("metadata", {})
        metadata["annotations"] = {
            **metadata.get("annotations", {}),
            **pod_set.topology.annotations(),
        }
        out["topologyRequest"] = pod_set.topology.to_workload()
    return out


def _requests(template: Mapping[str, Any]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    containers = (template.get("spec") or {}).get("containers") or []
    return tuple(
        (
            c.get("name", ""),
            tuple(
                sorted(
                    (f"{kind}/{name}", str(parse_quantity(value)))  # type: ignore[no-untyped-call]
                    for kind in ("requests", "limits")
                    for name, value in ((c.get("resources") or {}).get(kind) or {}).items()
                )
            ),
        )
        for c in containers
    )


def quota_shape(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What Kueue counts of a Workload's spec: its queue, and each pod set's name, count and the
    resources of its containers. Two specs of the same shape reserve the same quota; the rest of
    a template (env, image) may differ without a new Workload."""
    return (
        spec.get("queueName"),
        tuple(
            (s.get("name"), int(s.get("count", 1)), _requests(s.get("template") or {}))
            for s in spec.get("podSets") or []
        ),
    )


def priority_shape(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    return (spec.get("priority"), dict(spec.get("priorityClassRef") or {}))


def topology_shape(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """Each pod set's topology request: changed (the plan moved Auto's verdict, or Kueue's
    Topologies changed) before Kueue reserves quota, the Workload follows; after, it keeps the
    one it was admitted with (a running gang is not evicted over it)."""
    return tuple(
        (s.get("name"), dict(s.get("topologyRequest") or {})) for s in spec.get("podSets") or []
    )


@dataclass(frozen=True)
class WorkloadWrite:
    """One write to a job's Workload; the shell applies them in list order, after the job's
    status (so an admission is on record before the pods) and before any pod is created."""

    action: Literal["create", "patch", "status", "delete"]
    name: str
    body: Mapping[str, Any] | None = None
    """create: the Workload; patch: a merge patch of it; status: a merge patch of its status."""


# ---------------------------------------------------------------- reading a Workload


@dataclass(frozen=True)
class Condition:
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class WorkloadView:
    """What Ringmaster reads of the job's Workload."""

    name: str
    body: Mapping[str, Any]
    conditions: Mapping[str, Condition]
    cluster_queue: str | None
    flavors: Mapping[str, Mapping[str, str]]  # pod set -> resource -> ResourceFlavor
    active: bool
    domains: Mapping[str, tuple[Mapping[str, str], ...]] = field(default_factory=dict)
    """Pod set -> each pod's node labels by rank in the pod set, where Kueue's admission gave the
    pod set a topology assignment."""

    def true(self, type_: str) -> bool:
        condition = self.conditions.get(type_)
        return condition is not None and condition.status == "True"

    @property
    def quota_reserved(self) -> bool:
        return self.true(QUOTA_RESERVED)

    @property
    def admitted(self) -> bool:
        return self.true(ADMITTED)

    @property
    def finished(self) -> Condition | None:
        return self.conditions.get(FINISHED) if self.true(FINISHED) else None

    @property
    def evicted(self) -> Condition | None:
        return self.conditions.get(EVICTED) if self.true(EVICTED) else None

    @property
    def runs(self) -> bool:
        """The job may run its pods: admitted, neither evicted nor finished (Kueue's IsAdmitted,
        checked after eviction, as reconciler.go orders it)."""
        return self.admitted and self.evicted is None and self.finished is None

    @property
    def deactivated_by_suspend(self) -> bool:
        annotations = (self.body.get("metadata") or {}).get("annotations") or {}
        return annotations.get(SUSPENDED_ANNOTATION) == "true"

    def pending_message(self) -> str:
        """Kueue's own word on why the Workload waits (QuotaReserved=False), if it said one."""
        if not self.active:
            return "the Workload is deactivated (spec.active is false)"
        for type_ in (QUOTA_RESERVED, ADMITTED):
            condition = self.conditions.get(type_)
            if condition is not None and condition.status == "False" and condition.message:
                return condition.message
        return "waiting for Kueue to consider it"


def read_workload(body: Mapping[str, Any]) -> WorkloadView:
    status = body.get("status") or {}
    conditions = {
        c["type"]: Condition(c.get("status", "Unknown"), c.get("reason", ""), c.get("message", ""))
        for c in status.get("conditions") or []
        if c.get("type")
    }
    admission = status.get("admission") or {}
    assignments = admission.get("podSetAssignments") or []
    flavors = {a.get("name", "main"): dict(a.get("flavors") or {}) for a in assignments}
    domains = {
        a.get("name", "main"): rank_domains(a["topologyAssignment"])
        for a in assignments
        if a.get("topologyAssignment")
    }
    return WorkloadView(
        name=(body.get("metadata") or {}).get("name", ""),
        body=body,
        conditions=conditions,
        cluster_queue=admission.get("clusterQueue"),
        flavors=flavors,
        active=(body.get("spec") or {}).get("active", True) is not False,
        domains=domains,
    )


def rank_domains(assignment: Mapping[str, Any]) -> tuple[Mapping[str, str], ...]:
    """Each pod's node labels, by rank, from a pod set's ``topologyAssignment``: the domains in
    order, each repeated by its pod count (Kueue's ``rankToDomainID``). Reads v1beta2's
    compressed ``slices`` and v1beta1's ``domains``."""
    levels = [str(level) for level in assignment.get("levels") or []]
    by_rank: list[Mapping[str, str]] = []
    for values, count in _assigned_domains(assignment):
        labels = dict(zip(levels, values, strict=True))
        by_rank.extend([labels] * count)
    return tuple(by_rank)


def _assigned_domains(assignment: Mapping[str, Any]) -> list[tuple[list[str], int]]:
    if "domains" in assignment:
        return [([str(v) for v in d["values"]], int(d["count"])) for d in assignment["domains"]]
    out: list[tuple[list[str], int]] = []
    for piece in assignment.get("slices") or []:
        n = int(piece["domainCount"])
        columns = []
        for level in piece["valuesPerLevel"]:
            if "universal" in level:
                columns.append([str(level["universal"])] * n)
            else:
                one = level["individual"]
                prefix, suffix = one.get("prefix") or "", one.get("suffix") or ""
                columns.append([f"{prefix}{root}{suffix}" for root in one["roots"]])
        counts = piece["podCounts"]
        per_domain = (
            [int(c) for c in counts["individual"]]
            if "individual" in counts
            else [int(counts["universal"])] * n
        )
        out.extend(zip([list(v) for v in zip(*columns, strict=True)], per_domain, strict=True))
    return out


def tas_pod_annotations(view: WorkloadView, pod_set: str) -> dict[str, str]:
    """The topology annotations a pod of ``pod_set`` carries once Kueue placed the pod set by
    topology: those of the pod set's template (the job's request), or Kueue's unconstrained one
    where the job asked for none (a TAS flavor places every pod set it admits); {} where Kueue
    gave the pod set no topology assignment."""
    if pod_set not in view.domains:
        return {}
    for one in (view.body.get("spec") or {}).get("podSets") or []:
        if one.get("name") == pod_set:
            metadata = (one.get("template") or {}).get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            kept = {k: str(v) for k, v in annotations.items() if k in TAS_POD_ANNOTATIONS}
            if kept:
                return kept
    return {PODSET_UNCONSTRAINED_TOPOLOGY: "true"}


def owned_by(body: Mapping[str, Any], uid: str) -> bool:
    """The Workload's controller is the job with this UID (a job deleted and created again under
    the same name has another UID, and its old Workload goes with the old job)."""
    return any(
        ref.get("controller") and ref.get("uid") == uid
        for ref in (body.get("metadata") or {}).get("ownerReferences") or []
    )


# ---------------------------------------------------------------- flavors -> pods


@dataclass(frozen=True)
class Flavor:
    """What a ResourceFlavor puts into the pods it is assigned to."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    topology_name: str | None = None
    """The Kueue Topology of a flavor that runs Topology Aware Scheduling."""

    @classmethod
    def from_object(cls, body: Mapping[str, Any]) -> Flavor:
        spec = body.get("spec") or {}
        return cls(
            dict(spec.get("nodeLabels") or {}),
            tuple(dict(t) for t in spec.get("tolerations") or []),
            spec.get("topologyName") or None,
        )


@dataclass(frozen=True)
class FlavorPlacement:
    """The node labels and tolerations of the flavors assigned to one pod set (merged as Kueue's
    podset.FromAssignment merges them: each flavor once, in resource order)."""

    flavors: tuple[str, ...]
    node_labels: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]

    def describe(self) -> str:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(self.node_labels.items()))
        return f"flavor {'+'.join(self.flavors)}" + (f" ({labels})" if labels else "")


@dataclass(frozen=True)
class FlavorProblem:
    reason: str
    message: str


def flavor_placement(
    view: WorkloadView, pod_set: str, flavors: Mapping[str, Flavor]
) -> FlavorPlacement | FlavorProblem:
    assigned = view.flavors.get(pod_set)
    if assigned is None:
        return FlavorProblem(
            "FlavorMismatch", f"Kueue's admission of {view.name} assigns no flavor to {pod_set}"
        )
    names: list[str] = []
    labels: dict[str, str] = {}
    tolerations: list[Mapping[str, Any]] = []
    for _resource, name in sorted(assigned.items()):
        if name in names:
            continue
        flavor = flavors.get(name)
        if flavor is None:
            return FlavorProblem(
                "ResourceFlavorNotFound", f"ResourceFlavor {name} (assigned by Kueue) not found"
            )
        names.append(name)
        for key, value in flavor.node_labels.items():
            if labels.get(key, value) != value:
                return FlavorProblem(
                    "FlavorMismatch",
                    f"flavors {'+'.join(names)} disagree on node label {key}",
                )
            labels[key] = value
        tolerations += [t for t in flavor.tolerations if t not in tolerations]
    return FlavorPlacement(tuple(names), labels, tuple(tolerations))


def pool_for_flavor(
    candidates: Sequence[tuple[str, Mapping[str, str]]], placement: FlavorPlacement
) -> str | FlavorProblem:
    """The first of Ringmaster's candidate pools (name, labels every node of it carries), best
    first, whose nodes the flavor's node labels select; or why none is."""
    for name, labels in candidates:
        if all(labels.get(k) == v for k, v in placement.node_labels.items()):
            return name
    pools = ", ".join(name for name, _ in candidates) or "none"
    return FlavorProblem(
        "FlavorMismatch",
        f"Kueue admitted the job on {placement.describe()}, which selects none of the pools that "
        f"can run it ({pools}): give the flavor node labels of one of them",
    )


def merged_placement(
    node_selector: Mapping[str, str], placement: FlavorPlacement
) -> dict[str, str] | FlavorProblem:
    """The pod's node selector with the flavor's node labels added (podset.Merge: the same key
    with another value is a conflict)."""
    merged = dict(node_selector)
    for key, value in placement.node_labels.items():
        if merged.get(key, value) != value:
            return FlavorProblem(
                "FlavorMismatch",
                f"{placement.describe()} sets {key}={value} but the pods need {key}={merged[key]}",
            )
        merged[key] = value
    return merged


# ---------------------------------------------------------------- writing a Workload's status


class StatusEdit:
    """Changes to one Workload's status, written as one merge patch with the resourceVersion
    read (a precondition: if Kueue wrote in between, the patch is refused and the job looks
    again). Conditions are set as apimeta.SetStatusCondition sets them."""

    def __init__(self, view: WorkloadView, now: dt.datetime) -> None:
        self.view = view
        self.now = now
        metadata = view.body.get("metadata") or {}
        self.generation = int(metadata.get("generation") or 1)
        self.conditions: list[dict[str, Any]] = copy.deepcopy(
            list((view.body.get("status") or {}).get("conditions") or [])
        )
        self.clear_admission = False
        self.changed = False

    def find(self, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def set(self, type_: str, status: str, reason: str, message: str) -> None:
        stamp = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        message = message[:32768]  # metav1.Condition's limit
        existing = self.find(type_)
        if existing is None:
            self.conditions.append(
                {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": stamp,
                    "observedGeneration": self.generation,
                }
            )
            self.changed = True
            return
        wanted = {"reason": reason, "message": message, "observedGeneration": self.generation}
        if existing.get("status") != status:
            existing["status"] = status
            existing["lastTransitionTime"] = stamp
            self.changed = True
        for key, value in wanted.items():
            if existing.get(key) != value:
                existing[key] = value
                self.changed = True

    def patch(self) -> dict[str, Any] | None:
        if not self.changed:
            return None
        status: dict[str, Any] = {"conditions": self.conditions}
        if self.clear_admission:
            status["admission"] = None
        version = (self.view.body.get("metadata") or {}).get("resourceVersion")
        return {"metadata": {"resourceVersion": version}, "status": status}


def report_pods_ready(edit: StatusEdit, ready: bool) -> None:
    """PodsReady as Kueue's generatePodsReadyCondition words it, written only when its status or
    reason changes."""
    before = edit.find(PODS_READY)
    before_reason = before.get("reason") if before else None
    if not edit.view.admitted:
        wanted = ("False", "WaitForStart", "Not all pods are ready or succeeded")
    elif ready:
        recovered = before_reason in ("WaitForRecovery", "Recovered")
        reason = "Recovered" if recovered else "Started"
        wanted = ("True", reason, "All pods reached readiness and the workload is running")
    elif before is not None and (
        before.get("status") == "True" or before_reason == "WaitForRecovery"
    ):
        wanted = ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
    else:
        wanted = ("False", "WaitForStart", "Not all pods are ready or succeeded")
    if before is None or (before.get("status"), before_reason) != wanted[:2]:
        edit.set(PODS_READY, *wanted)


def report_finished(edit: StatusEdit, succeeded: bool, message: str) -> None:
    if edit.view.finished is None:
        edit.set(FINISHED, "True", "Succeeded" if succeeded else "Failed", message)


def release_after_eviction(edit: StatusEdit) -> None:
    """The job stopped after an eviction and none of its pods is left: give the quota back, as
    Kueue's integrations do (Requeued, QuotaReserved=False, no admission, Admitted=False)."""
    evicted = edit.view.evicted
    if evicted is None or not edit.view.quota_reserved:
        return
    requeue = evicted.reason in REQUEUED_AT_ONCE
    edit.set(REQUEUED, "True" if requeue else "False", evicted.reason, evicted.message)
    edit.set(QUOTA_RESERVED, "False", "Pending", evicted.message)
    edit.clear_admission = True
    if edit.view.admitted:
        edit.set(ADMITTED, "False", "NoReservation", "The workload has no reservation")
