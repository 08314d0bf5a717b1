"""The chart as Helm renders it: lint, objects, secure pod defaults, values -> flags, catalog,
peering, the schema's messages, the CRDs' one source, and the image it points at."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
import yaml

from ringmaster.engine.hardware import DEFAULT_CATALOG
from ringmaster.planning.catalog import apply_catalog, parse_catalog
from tests.chart.conftest import CHART, REPO, Render, find, kinds, run_helm, set_args

# Value sets that switch every optional part on, for lint and the cross-cutting checks.
FULL = {
    "replicaCount": 3,
    "watchNamespaces": ["team-a", "team-b"],
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "catalog": {"overrides": {"machineTypes": {"a2-highgpu-8g": {"pricePerHourUSD": 21.5}}}},
    "verbose": True,
}


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return container


def chart_meta() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


@pytest.mark.parametrize("values", [None, FULL], ids=["defaults", "everything-on"])
def test_helm_lint_is_clean(helm_binary: str, values: dict[str, Any] | None):
    result = run_helm(helm_binary, "lint", "--strict", str(CHART), *set_args(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_chart_crds_are_the_repository_crds_byte_for_byte():
    """One source: crds/ is generated from the API models; the chart carries a copy because
    Helm only installs CRDs from inside the chart. After `make crds`, refresh it with
    cp crds/*.yaml charts/ringmaster/crds/"""
    repo = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert repo, "no CRDs in crds/"
    stale = sorted(n for n in repo if chart.get(n) != repo[n])
    assert not stale, (
        f"charts/ringmaster/crds/ differs from crds/ for {stale}: "
        "run cp crds/*.yaml charts/ringmaster/crds/"
    )
    extra = sorted(set(chart) - set(repo) - {"kopf-peerings.kopf.dev.yaml"})
    assert not extra, f"CRDs in the chart that crds/ does not have: {extra}"


def test_default_install_renders_exactly_the_operator_objects(render: Render):
    objects = render()
    assert kinds(objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",  # the hardware catalog, empty
        "ConfigMap",  # the cluster calibration, written by the operator
        "CustomResourceDefinition",  # clusterkopfpeerings.kopf.dev
        "CustomResourceDefinition",  # inferenceendpoints
        "CustomResourceDefinition",  # kopfpeerings.kopf.dev
        "CustomResourceDefinition",  # poolprofiles
        "CustomResourceDefinition",  # reductionserverpools
        "CustomResourceDefinition",  # trainingjobs
        "Deployment",
        "Role",  # get the catalog ConfigMap and keep the calibration, in the release namespace
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert {"trainingjobs.ringmaster.dev", "clusterkopfpeerings.kopf.dev"} <= names
    for o in objects:
        if o["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == "ringmaster-system", o["kind"]


def test_the_operator_pod_is_locked_down(render: Render):
    objects = render()
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    container = operator_container(objects)
    sc = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in sc and "add" not in sc["capabilities"]
    for which in ("requests", "limits"):
        assert set(container["resources"][which]) == {"cpu", "memory"}, which
    # The one writable path under the read-only root.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/tmp"] == "tmp"
    assert pod["serviceAccountName"] == find(objects, "ServiceAccount")["metadata"]["name"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")


def test_defaults_run_one_standalone_operator_on_all_namespaces(render: Render):
    objects = render()
    deployment = find(objects, "Deployment")
    args = operator_container(objects)["args"]
    assert deployment["spec"]["replicas"] == 1
    # Never two standalone operators at once, not even during a rollout.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert args[0] == "run"
    assert not [a for a in args if a.startswith(("--peering", "--namespace", "-n"))]
    assert not [o for o in objects if o["kind"] in ("ClusterKopfPeering", "KopfPeering")]


def test_the_image_is_the_dockerfiles_at_the_charts_app_version(render: Render):
    meta = chart_meta()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    # The image is built from this checkout, so its tag (appVersion) is the package's version.
    assert meta["appVersion"] == pyproject["project"]["version"]
    assert operator_container(render())["image"] == f"ringmaster:{meta['appVersion']}"
    image = operator_container(render({"image": {"repository": "reg.example/rm", "tag": "abc"}}))
    assert image["image"] == "reg.example/rm:abc"


def test_probes_ask_kopfs_liveness_endpoint_where_the_flag_serves_it(render: Render):
    for port in (8081, 9999):
        container = operator_container(render({"health": {"port": port}}))
        (liveness,) = [a for a in container["args"] if a.startswith("--liveness=")]
        assert liveness == f"--liveness=http://0.0.0.0:{port}/healthz"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe in ("livenessProbe", "readinessProbe"):
            get = container[probe]["httpGet"]
            assert get["path"] == "/healthz"
            assert ports[get["port"]] == port


def test_metrics_service_and_service_monitor_reach_the_metrics_port(render: Render):
    objects = render({"metrics": {"port": 9090, "serviceMonitor": {"enabled": True}}})
    container = operator_container(objects)
    deployment = find(objects, "Deployment")
    service = find(objects, "Service")
    monitor = find(objects, "ServiceMonitor")
    assert "--metrics-port=9090" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (service_port,) = service["spec"]["ports"]
    assert ports[service_port["targetPort"]] == 9090
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service_port["name"]
    # Off: no port, no Service; a ServiceMonitor without them is refused, not rendered broken.
    off = render({"metrics": {"port": 0}})
    assert "Service" not in kinds(off)
    assert "--metrics-port=0" in operator_container(off)["args"]


def test_watch_namespaces_become_flags_and_role_bindings(render: Render):
    objects = render({"watchNamespaces": ["team-a", "team-b"]})
    args = operator_container(objects)["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    bindings = [
        o for o in objects if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["name"] == "rm-ringmaster-namespaced"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "rm-ringmaster", "namespace": "ringmaster-system"}
        ]


def test_replicas_use_kopf_peering_with_the_object_the_flag_names(render: Render):
    objects = render({"replicaCount": 2})
    deployment = find(objects, "Deployment")
    container = operator_container(objects)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert "--peering=rm-ringmaster" in container["args"]
    peering = find(objects, "ClusterKopfPeering")
    assert peering["apiVersion"] == "kopf.dev/v1"
    assert peering["metadata"]["name"] == "rm-ringmaster"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # Its CRD ships with the chart (Helm's crds/ installs it before the templates).
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert "clusterkopfpeerings.kopf.dev" in crds

    named = render({"replicaCount": 2, "peering": {"name": "rm-peers"}, "watchNamespaces": ["a"]})
    assert "--peering=rm-peers" in operator_container(named)["args"]
    peer = find(named, "KopfPeering")
    assert (peer["metadata"]["namespace"], peer["metadata"]["name"]) == ("a", "rm-peers")
    assert "kopfpeerings.kopf.dev" in {
        o["metadata"]["name"] for o in named if o["kind"] == "CustomResourceDefinition"
    }


def test_catalog_overrides_reach_the_operator_through_its_config_map(render: Render):
    overrides = {
        "machineTypes": {
            "a2-highgpu-8g": {"pricePerHourUSD": 21.5},
            "my-reducer": {"vcpus": 32, "nicGbps": 50, "pricePerHourUSD": 1.1},
        },
        "accelerators": {"nvidia-tesla-a100": {"peakTFLOPS": {"int8": 624}}},
        "defaultMachines": {"nvidia-tesla-t4": {"1": "n1-standard-4"}},
    }
    objects = render({"catalog": {"overrides": overrides}})
    container = operator_container(objects)
    config_map = find(objects, "ConfigMap", "rm-ringmaster-catalog")
    # The operator is told which ConfigMap to read (and re-read: no mount, no restart).
    namespace, name = config_map["metadata"]["namespace"], config_map["metadata"]["name"]
    assert f"--catalog-configmap={namespace}/{name}" in container["args"]
    assert "volumeMounts" not in container or not [
        m for m in container["volumeMounts"] if m["name"] == "catalog"
    ]
    # The operator validates the text as it will read it.
    text = config_map["data"]["catalog.yaml"]
    catalog = apply_catalog(DEFAULT_CATALOG, parse_catalog(text))
    assert catalog.machine("a2-highgpu-8g").price_per_hour == 21.5
    assert catalog.machine("my-reducer").vcpus == 32
    assert catalog.accelerator("nvidia-tesla-a100").peak_flops["int8"] == 624e12
    assert catalog.default_machine("nvidia-tesla-t4", 1).name == "n1-standard-4"
    # A changed catalog no longer changes the pod template: the operator picks it up live.
    deployment = find(objects, "Deployment")
    annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    assert "checksum/catalog" not in annotations


def test_the_catalog_config_map_exists_by_default_and_may_be_the_users(render: Render):
    objects = render()
    config_map = find(objects, "ConfigMap", "rm-ringmaster-catalog")
    text = config_map["data"]["catalog.yaml"]
    assert apply_catalog(DEFAULT_CATALOG, parse_catalog(text)).accelerators == (
        DEFAULT_CATALOG.accelerators
    )
    assert "RINGMASTER_CATALOG" not in {e["name"] for e in operator_container(objects)["env"]}
    existing = render({"catalog": {"existingConfigMap": "my-prices"}})
    assert [o["metadata"]["name"] for o in existing if o["kind"] == "ConfigMap"] == [
        "rm-ringmaster-calibration"
    ]
    namespace = find(existing, "Deployment")["metadata"]["namespace"]
    assert f"--catalog-configmap={namespace}/my-prices" in operator_container(existing)["args"]
    (role,) = [o for o in existing if o["kind"] == "Role"]
    assert role["rules"][0]["resourceNames"] == ["my-prices"]


# Wrong values and the words `helm install` must answer with (the schema's or the chart's).
BAD_VALUES = [
    ({"progress": {"enabled": True}}, r"progress.tls.secretName \(a certificate\) or"),
    ({"replicaCount": 0}, r"/replicaCount': minimum: got 0, want 1"),
    ({"replicaCount": "2"}, r"/replicaCount': got string, want integer"),
    ({"watchNamespaces": "team-a"}, r"/watchNamespaces': got string, want array"),
    ({"watchNamespaces": ["team-*"]}, r"/watchNamespaces/0': 'team-\*' does not match pattern"),
    ({"watchNamespaces": ["a", "a"]}, r"/watchNamespaces': items at 0 and 1 are equal"),
    ({"image": {"pullPolicy": "Sometimes"}}, r"/image/pullPolicy': value must be one of"),
    ({"image": {"repository": "rm:1.0"}}, r"/image/repository': 'rm:1.0' does not match"),
    ({"image": {"tag": "v 1"}}, r"/image/tag': 'v 1' does not match"),
    ({"resources": {"limits": {"memory": None}}}, r"/resources/limits': missing property 'memory'"),
    ({"resources": {"requests": {"cpu": "lots", "memory": "1Gi"}}}, r"/resources/requests/cpu'"),
    ({"metrics": {"port": 70000}}, r"/metrics/port': maximum: got 70,000, want 65,535"),
    ({"metrics": {"serviceMonitor": {"interval": "30"}}}, r"/interval': '30' does not match"),
    (
        {"catalog": {"overrides": {"gpus": {}}}},
        r"/catalog/overrides': additional properties 'gpus'",
    ),
    ({"replicas": 2}, r"at '': additional properties 'replicas' not allowed"),
    ({"serviceAccount": {"create": "yes"}}, r"/serviceAccount/create': got string, want boolean"),
    (
        {"catalog": {"overrides": {"machineTypes": {"x": {}}}, "existingConfigMap": "mine"}},
        r"catalog: set either overrides or existingConfigMap, not both",
    ),
    (
        {"metrics": {"port": 0, "serviceMonitor": {"enabled": True}}},
        r"metrics.serviceMonitor.enabled needs metrics.port > 0",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=lambda v: str(v)[:60])
def test_wrong_values_fail_with_a_message_naming_the_value(
    helm_binary: str, values: dict[str, Any], message: str
):
    result = run_helm(helm_binary, "template", "rm", str(CHART), *set_args(values))
    assert result.returncode != 0, f"accepted {values}"
    assert re.search(message, result.stderr), result.stderr


def test_notes_tell_how_to_try_the_examples():
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    for example in re.findall(r"examples/[\w.-]+\.yaml", notes):
        assert (REPO / example).is_file(), f"NOTES.txt names a missing {example}"
    assert "kubectl apply" in notes and "kubectl get tj,rsp,ie" in notes
    # The job name NOTES.txt describes is the example's.
    bert = yaml.safe_load((REPO / "examples" / "trainingjob-bert-large-auto.yaml").read_text())
    assert f"tj {bert['metadata']['name']}" in notes


def test_dockerfile_builds_a_slim_non_root_image_of_runtime_dependencies_only():
    text = (REPO / "Dockerfile").read_text()
    instructions = [
        line.strip() for line in re.sub(r"\\\n", " ", text).splitlines() if line.strip()
    ]
    instructions = [i for i in instructions if not i.startswith("#")]
    bases = [i.split()[1] for i in instructions if i.startswith("FROM ")]
    assert bases and all(re.fullmatch(r"python:3\.11-slim(-\w+)?", b) for b in bases), bases
    final = instructions[max(i for i, s in enumerate(instructions) if s.startswith("FROM ")) :]
    users = [i.split()[1] for i in final if i.startswith("USER ")]
    assert users, "the final stage sets no USER"
    uid = users[-1].split(":")[0]
    # Numeric and not root, matching the chart's runAsUser.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert uid.isdigit() and int(uid) != 0
    assert int(uid) == values["podSecurityContext"]["runAsUser"]
    runs = " ".join(i for i in instructions if i.startswith("RUN "))
    # Runtime dependencies only (no [test]/[plot] extras), from the configured index.
    assert "ringmaster[" not in runs and ".[" not in runs
    assert not re.search(r"index-url|--trusted-host|https?://", runs)
    # The final stage installs from the wheels built in the first: no network, no compiler.
    assert "--no-index" in " ".join(i for i in final if i.startswith("RUN "))
    assert re.search(r'ENTRYPOINT \["ringmaster"\]', text)
    # Everything COPY'd is in the .dockerignore allow-list.
    allowed = {
        line.strip()[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip().startswith("!")
    }
    copied = {
        src
        for i in instructions
        if i.startswith("COPY ") and "--from" not in i
        for src in i.split()[1:-1]
    }
    assert copied and copied <= allowed, copied - allowed


def test_the_progress_endpoint_serves_the_charts_certificate_behind_its_service(render: Render):
    objects = render({"progress": {"enabled": True, "tls": {"secretName": "rm-progress-tls"}}})
    args = operator_container(objects)["args"]
    namespace = find(objects, "Deployment")["metadata"]["namespace"]
    assert "--progress-port=8443" in args
    assert f"--progress-url=https://rm-ringmaster-progress.{namespace}.svc:8443" in args
    assert "--progress-tls-cert=/etc/ringmaster/progress-tls/tls.crt" in args
    assert "--progress-insecure-http" not in args
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "progress-tls", "secret": {"secretName": "rm-progress-tls"}} in volumes
    service = find(objects, "Service", "rm-ringmaster-progress")
    assert service["spec"]["ports"][0]["targetPort"] == "progress"
    plain = operator_container(render({"progress": {"enabled": True, "insecureHTTP": True}}))
    assert "--progress-insecure-http" in plain["args"]
    assert not any(a.startswith("--progress") for a in operator_container(render())["args"])
