"""The builders of an InferenceEndpoint's Deployment, Service and HPA."""

from __future__ import annotations

import pytest

from ringmaster.api import InferenceEndpointSpec
from ringmaster.manifests.inference import (
    REQUESTS_PER_SECOND_METRIC,
    ServingPlacement,
    autoscaler,
    endpoint_url,
    object_name,
    replicas_only,
    selector_labels,
    selector_string,
    server_deployment,
    server_service,
)

pytestmark = pytest.mark.unit
T4 = ServingPlacement(
    "t4-serving", {"cloud.google.com/gke-nodepool": "t4-serving"}, "nvidia.com/gpu"
)


def spec(**extra):
    body = {
        "accelerator": {"type": "nvidia-tesla-t4", "perReplica": 1},
        "model": {"parameters": "25.6M", "flopsPerRequest": "8.2G"},
        "precision": "INT8",
        "slo": {"targetRequestsPerSecond": 4000, "latencyP99Milliseconds": 25},
        "port": 8000,
        "template": {
            "image": "serving/resnet50:1",
            "args": ["--http-port=8000"],
            "env": [{"name": "MODEL", "value": "resnet50"}],
            "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
            "metadata": {
                "labels": {"team": "vision", "ringmaster.dev/role": "spoofed"},
                "annotations": {"prometheus.io/scrape": "true"},
            },
        },
        **extra,
    }
    return InferenceEndpointSpec.model_validate(body)


def test_deployment_runs_on_the_pool_with_the_accelerators_as_extended_resources():
    obj = server_deployment("resnet", "serving", spec(), T4, replicas=3)
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) == (
        "apps/v1",
        "Deployment",
        "resnet",
    )
    assert obj["metadata"]["namespace"] == "serving"
    assert obj["spec"]["replicas"] == 3
    pod = obj["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "t4-serving"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    (container,) = pod["containers"]
    assert container["image"] == "serving/resnet50:1"
    assert container["args"] == ["--http-port=8000"]
    assert container["env"] == [{"name": "MODEL", "value": "resnet50"}]
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert container["readinessProbe"]["tcpSocket"] == {"port": "http"}


def test_the_selector_matches_the_pods_and_a_template_label_cannot_break_it():
    obj = server_deployment("resnet", "serving", spec(), T4, replicas=1)
    selector = obj["spec"]["selector"]["matchLabels"]
    template = obj["spec"]["template"]["metadata"]
    assert selector == selector_labels("resnet")
    assert selector.items() <= template["labels"].items()
    assert template["labels"]["team"] == "vision"
    assert template["labels"]["ringmaster.dev/role"] == "server"
    assert template["annotations"] == {"prometheus.io/scrape": "true"}
    assert selector_string("resnet") == ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def test_replicas_left_out_when_another_manager_owns_them():
    assert "replicas" not in server_deployment("resnet", "serving", spec(), T4, None)["spec"]
    held = replicas_only("resnet", "serving", 4)
    assert held == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "resnet", "namespace": "serving"},
        "spec": {"replicas": 4},
    }


def test_tpu_replicas_request_tpus():
    tpu = ServingPlacement("tpu", {"cloud.google.com/gke-nodepool": "tpu"}, "google.com/tpu")
    the_spec = spec(accelerator={"type": "tpu-v4-podslice", "perReplica": 4})
    pod = server_deployment("bert", "ml", the_spec, tpu, 1)["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}
    assert pod["tolerations"][0]["key"] == "google.com/tpu"


def test_service_fronts_the_port_and_the_url_names_it():
    svc = server_service("resnet", "serving", spec())
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == selector_labels("resnet")
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
    ]
    assert endpoint_url("resnet", "serving", 8000) == (
        "http://resnet.serving.svc.cluster.local:8000"
    )


def test_long_and_dotted_names_become_dns_labels():
    name = "resnet50.int8." + "x" * 80
    assert len(object_name(name)) <= 63 and "." not in object_name(name)
    assert all(len(v) <= 63 for v in selector_labels(name).values())
    assert server_service(name, "ns", spec())["metadata"]["name"] == object_name(name)
    assert endpoint_url(name, "ns", 80).startswith(f"http://{object_name(name)}.ns.svc")
    assert object_name(name) != object_name(name + "y")


def test_hpa_scales_the_deployment_on_the_engines_rate_and_cpu():
    the_spec = spec(
        minReplicas=2,
        maxReplicas=8,
        autoscaling={"enabled": True, "targetCPUUtilizationPercentage": 60},
    )
    hpa = autoscaler("resnet", "serving", the_spec, 4571.36)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "resnet",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    pods, cpu = hpa["spec"]["metrics"]
    assert pods["pods"]["metric"]["name"] == REQUESTS_PER_SECOND_METRIC
    assert pods["pods"]["target"] == {"type": "AverageValue", "averageValue": "4571"}
    assert cpu["resource"]["target"] == {"type": "Utilization", "averageUtilization": 60}


def test_hpa_without_a_rate_scales_on_cpu_only_and_never_below_one():
    the_spec = spec(minReplicas=0, autoscaling={"enabled": True})
    hpa = autoscaler("resnet", "serving", the_spec, 0.0)
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource"]
    assert hpa["spec"]["minReplicas"] == 1


def test_the_hpa_target_keeps_an_llm_replicas_few_requests_per_second():
    from ringmaster.manifests.inference import per_replica_rate_quantity

    assert per_replica_rate_quantity(4571.9) == "4571"  # whole units from 100 up (within 1%)
    assert per_replica_rate_quantity(1.51812) == "1518m"  # not "1": a third more pods
    assert per_replica_rate_quantity(0.25) == "250m"
    assert per_replica_rate_quantity(0.0) is None
