"""Every pod on a pool counts, whoever made it, and serving replicas take their room through the
admission cycle: a host promised to a gang is never granted to another pod of the operator."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ringmaster.admission.cycle import (
    Admit,
    CycleView,
    GangOption,
    Grant,
    Hold,
    QueueingSettings,
    Wait,
    WaitingGang,
    admission_pass,
    promise_for,
)
from ringmaster.admission.snapshot import ClusterSnapshot, shape
from ringmaster.api import InferenceEndpointSpec
from ringmaster.controllers.cluster_state import pod_facts
from ringmaster.manifests.inference import ServingPlacement, gate_lifted, server_deployment
from ringmaster.manifests.naming import ADMISSION_GATE
from ringmaster.manifests.training import pinned_host
from tests.unit.training_world import NOW, REDUCER_REQUEST, nodes

pytestmark = pytest.mark.unit
T4 = "t4-serving"
GPU1 = shape({"nvidia.com/gpu": Decimal(1)})
SELECTOR = {"cloud.google.com/gke-nodepool": T4}
SETTINGS = QueueingSettings()


def hosts() -> list[str]:
    return sorted(n.name for n in nodes({T4: 8}))


def snapshot(*pods) -> ClusterSnapshot:
    return ClusterSnapshot.rebuilt(REDUCER_REQUEST, nodes({T4: 8}), [pod_facts(p) for p in pods])


def pod(name, namespace="apps", labels=None, **spec) -> dict:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [container], **spec},
        "status": {"phase": "Pending"},
    }


def serving_pod(name="resnet-abc12") -> dict:
    """A replica as the endpoint's Deployment makes it (the real pod template)."""
    spec = InferenceEndpointSpec.model_validate(
        {
            "accelerator": {"type": "nvidia-tesla-t4", "perReplica": 1},
            "model": {"name": "resnet-50", "parameters": "25.6M", "flopsPerRequest": "8.2G"},
            "slo": {"targetRequestsPerSecond": 100, "latencyP99Milliseconds": 25},
            "template": {"image": "serving:1"},
        }
    )
    placement = ServingPlacement(T4, dict(SELECTOR), "nvidia.com/gpu")
    template = server_deployment("resnet", "apps", spec, placement, 1)["spec"]["template"]
    return {
        "metadata": {**template["metadata"], "name": name, "namespace": "apps"},
        "spec": template["spec"],
        "status": {"phase": "Pending"},
    }


def whole_pool_gang(workers=8) -> WaitingGang:
    option = GangOption(T4, GPU1, workers, False, "nvidia.com/gpu", 1)
    return WaitingGang(("ml", "bert"), NOW, "nvidia-tesla-t4", (option,))


def free_hosts(snap: ClusterSnapshot) -> int:
    return CycleView(snap).room(T4).count(GPU1, 100, False)


def test_pods_of_every_owner_take_room_bound_pinned_or_headed_to_the_pool():
    h = hosts()
    others = [
        # A user's plain pod, bound by kube-scheduler.
        pod("plain", nodeName=h[0]),
        # Another controller's pod, not bound yet, headed to the pool by its nodeSelector.
        pod(
            "their-job-0", labels={"app.kubernetes.io/managed-by": "someone"}, nodeSelector=SELECTOR
        ),
        # A pod pinned to a host by its node affinity, not bound yet.
        pod("pinned", affinity=gate_lifted(h[2])["spec"]["affinity"]),
        # A pod pinned by the hostname label, not bound yet.
        pod("by-hostname", nodeSelector={"kubernetes.io/hostname": h[3]}),
        # Ringmaster's own serving replica, bound.
        {**serving_pod("served"), "spec": {**serving_pod()["spec"], "nodeName": h[4]}},
    ]
    snap = snapshot(*others)
    assert free_hosts(snap) == 8 - 5
    # A serving replica at the gate holds nothing until a cycle grants it a host.
    gated = snapshot(*others, serving_pod())
    assert free_hosts(gated) == 3 and [p.name for p in gated.gated()] == ["resnet-abc12"]


def test_the_endpoint_pods_wait_at_the_admission_gate():
    template = serving_pod()
    assert template["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert pod_facts(template).gated
    lifted = gate_lifted("t4-serving-0003")["spec"]
    assert lifted["schedulingGates"] == [{"name": ADMISSION_GATE, "$patch": "delete"}]
    assert pinned_host(lifted) == "t4-serving-0003"


def test_a_replica_gets_a_host_no_gang_was_promised_and_waits_when_none_is_left():
    """The race of issue 34: the gang and the endpoint appear together, in either order."""
    # The gang first: it holds all 8 hosts; the replica waits at its gate with the numbers.
    snap = snapshot()
    grants, verdicts = admission_pass(snap, [whole_pool_gang()], SETTINGS, NOW)
    [admit] = verdicts
    assert isinstance(admit, Admit) and len(set(admit.hosts)) == 8
    snap.promise(promise_for(admit.key, 0, admit.option, admit.hosts))
    snap.set_pod(pod_facts(serving_pod()))
    grants, _ = admission_pass(snap, [], SETTINGS, NOW)
    [hold] = grants
    assert isinstance(hold, Hold) and hold.pod == ("apps", "resnet-abc12")
    assert "0 of 8 schedulable hosts" in hold.message and T4 in hold.message
    # The replica first: it is granted a named host, and the gang then waits for the eighth.
    snap = snapshot(serving_pod())
    grants, verdicts = admission_pass(snap, [whole_pool_gang()], SETTINGS, NOW)
    [grant] = grants
    assert isinstance(grant, Grant) and grant.host in hosts()
    [wait] = verdicts
    assert isinstance(wait, Wait) and wait.message.endswith("7 fit now")
    # Recorded, the grant holds its host before the pod event that shows it lifted, and an
    # older event of the pod (still gated) does not give the room back.
    snap.grant(grant.pod, grant.host)
    assert free_hosts(snap) == 7 and not snap.gated()
    snap.set_pod(pod_facts(serving_pod()))
    assert free_hosts(snap) == 7 and not snap.gated()
    grants, verdicts = admission_pass(snap, [whole_pool_gang(7)], SETTINGS, NOW)
    assert grants == [] and isinstance(verdicts[0], Admit)
    assert grant.host not in verdicts[0].hosts
    # The pod as the API shows it once lifted: pinned to the host, the same room.
    lifted = serving_pod()
    lifted["spec"] = {**lifted["spec"], **gate_lifted(grant.host)["spec"], "schedulingGates": []}
    snap.set_pod(pod_facts(lifted))
    assert free_hosts(snap) == 7
    # A grant the API refused gives the room back and the pod waits at its gate again.
    snap = snapshot(serving_pod())
    snap.grant(("apps", "resnet-abc12"), hosts()[0])
    snap.ungrant(("apps", "resnet-abc12"))
    assert free_hosts(snap) == 8 and len(snap.gated()) == 1


def test_replicas_are_granted_oldest_first_each_on_its_own_room():
    snap = snapshot(*(serving_pod(f"r-{i}") for i in range(10)))
    grants, _ = admission_pass(snap, [], SETTINGS, NOW)
    granted = [g for g in grants if isinstance(g, Grant)]
    assert [g.pod[1] for g in granted] == [f"r-{i}" for i in range(8)]
    assert len({g.host for g in granted}) == 8
    assert [g.pod[1] for g in grants if isinstance(g, Hold)] == ["r-8", "r-9"]
