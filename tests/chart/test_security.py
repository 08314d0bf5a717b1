"""The chart as a security scanner (and a careful platform team) sees it: an optional
NetworkPolicy that lets in only metrics scrapes and lets out only API-server and DNS traffic,
and an image pinned by digest."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.conftest import CHART, Render, find, run_helm, set_args

DIGEST = "sha256:" + "0123456789abcdef" * 4
POLICY_ON = {"networkPolicy": {"enabled": True}}


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment")["spec"]["template"]
    return spec


def test_no_network_policy_unless_asked(render: Render) -> None:
    assert not [o for o in render() if o["kind"] == "NetworkPolicy"]


def test_the_policy_selects_the_operator_pod_and_admits_only_the_metrics_port(
    render: Render,
) -> None:
    objects = render(POLICY_ON)
    policy = find(objects, "NetworkPolicy")["spec"]
    template = pod_spec(objects)
    labels = template["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert "from" not in rule  # any scraper, on that port only
    (container,) = template["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named["metrics"] == 8080  # the port the rule names exists on the pod
    assert "health" in named  # probes come from the kubelet, not through the policy


def test_egress_goes_only_to_the_api_server_and_dns(render: Render) -> None:
    policy = find(render(POLICY_ON), "NetworkPolicy")["spec"]
    api, dns = policy["egress"]
    assert api["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
    assert "to" not in api  # no address given: any address, on the API ports only
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    (peer,) = dns["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }


def test_the_api_server_addresses_scrapers_and_dns_are_values(render: Render) -> None:
    values = {
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
            ],
            "apiServer": {"cidrs": ["172.18.0.2/32", "10.0.0.0/28"], "ports": [6443]},
            "dns": {"enabled": False},
        }
    }
    policy = find(render(values), "NetworkPolicy")["spec"]
    assert policy["ingress"][0]["from"] == values["networkPolicy"]["metricsFrom"]
    (api,) = policy["egress"]  # no DNS rule
    assert api["to"] == [
        {"ipBlock": {"cidr": "172.18.0.2/32"}},
        {"ipBlock": {"cidr": "10.0.0.0/28"}},
    ]
    assert api["ports"] == [{"port": 6443, "protocol": "TCP"}]


def test_without_metrics_the_policy_admits_nothing(render: Render) -> None:
    policy = find(render({**POLICY_ON, "metrics": {"port": 0}}), "NetworkPolicy")["spec"]
    assert policy["ingress"] == [] and "Ingress" in policy["policyTypes"]


def test_a_digest_pins_the_image_and_wins_over_the_tag(render: Render) -> None:
    (container,) = pod_spec(render({"image": {"repository": "reg.example/rm", "digest": DIGEST}}))[
        "spec"
    ]["containers"]
    assert container["image"] == f"reg.example/rm@{DIGEST}"
    (tagged,) = pod_spec(
        render({"image": {"repository": "reg.example/rm", "tag": "1.2", "digest": DIGEST}})
    )["spec"]["containers"]
    assert tagged["image"] == f"reg.example/rm@{DIGEST}"
    (plain,) = pod_spec(render({"image": {"repository": "reg.example/rm", "tag": "1.2"}}))["spec"][
        "containers"
    ]
    assert plain["image"] == "reg.example/rm:1.2"


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "0" * 64, DIGEST.upper()])
def test_a_malformed_digest_is_refused_naming_the_value(helm_binary: str, digest: str) -> None:
    values = {"image": {"repository": "rm", "digest": digest}}
    result = run_helm(helm_binary, "template", "rm", str(CHART), *set_args(values))
    assert result.returncode != 0
    assert "/image/digest" in result.stderr


@pytest.mark.parametrize(
    "values",
    [
        {"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.1"]}}},  # no prefix length
        {"networkPolicy": {"apiServer": {"ports": []}}},
        {"networkPolicy": {"enable": True}},  # misspelt
    ],
)
def test_a_bad_network_policy_value_is_refused(helm_binary: str, values: dict[str, Any]) -> None:
    result = run_helm(helm_binary, "template", "rm", str(CHART), *set_args(values))
    assert result.returncode != 0 and "networkPolicy" in result.stderr, result.stderr


def test_lint_is_clean_with_the_policy_and_a_digest(helm_binary: str) -> None:
    values = {**POLICY_ON, "image": {"repository": "rm", "digest": DIGEST}}
    result = run_helm(helm_binary, "lint", "--strict", str(CHART), *set_args(values))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout
