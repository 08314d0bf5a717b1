"""The chart's RBAC: no wildcard, no secrets, and exactly the verbs the operator's code needs.

The table below is the contract; templates/_rbac.tpl says why each rule exists. The other tests
tie the table to the code: every resource kopf watches or indexes is listable and watchable,
every kind the operator server-side applies can be created and patched. Sufficiency is proven on
a real apiserver by tests/e2e/test_helm.py (the operator runs on the ServiceAccount's token).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict
from typing import Any

import pytest

from tests.chart.conftest import Render

CORE = ""
RM = "ringmaster.dev"
NAMESPACED_RULES = {
    (CORE, "pods"): {"list", "watch", "get", "create", "delete", "patch"},
    (CORE, "services"): {"create", "patch"},
    (CORE, "events"): {"create"},
    (RM, "trainingjobs"): {"list", "watch", "delete"},
    (RM, "reductionserverpools"): {"list", "watch", "create", "patch"},
    (RM, "inferenceendpoints"): {"list", "watch"},
    (RM, "poolprofiles"): {"list", "watch"},
    (RM, "trainingjobs/status"): {"patch"},
    (RM, "reductionserverpools/status"): {"patch"},
    (RM, "inferenceendpoints/status"): {"patch"},
    (RM, "poolprofiles/status"): {"patch"},
    (RM, "trainingjobs/finalizers"): {"update"},
    (RM, "reductionserverpools/finalizers"): {"update"},
    (RM, "inferenceendpoints/finalizers"): {"update"},
    (RM, "poolprofiles/finalizers"): {"update"},
    # A PoolProfile's payload: created anywhere, patched by its one name (below).
    (CORE, "configmaps"): {"create"},
    ("apps", "statefulsets"): {"create", "patch"},
    # Deleted when an endpoint's arrangement changes (aggregated to disaggregated sides).
    ("apps", "deployments"): {"list", "watch", "create", "patch", "delete"},
    ("autoscaling", "horizontalpodautoscalers"): {"list", "watch", "create", "patch", "delete"},
    # spec.routing: the Inference Extension's pools and objective (controllers/inference_routing).
    ("inference.networking.k8s.io", "inferencepools"): {"create", "patch", "delete"},
    ("inference.networking.x-k8s.io", "inferenceobjectives"): {"create", "patch", "delete"},
}
# Rules by resourceNames among the namespaced ones: a PoolProfile's payload ConfigMap, patched by
# its one name (manifests/profiling.py, PAYLOAD_CONFIGMAP).
NAMED_NAMESPACED_RULES = {(CORE, "configmaps", ("ringmaster-profile-payload",)): {"patch"}}
CLUSTER_RULES = {
    (CORE, "namespaces"): {"list", "watch"},
    # A PoolProfile labels (and, if asked, taints) the hosts it flags.
    (CORE, "nodes"): {"list", "watch", "get", "patch"},
    ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}

# With kueue.enabled only (templates/_rbac.tpl; controllers/kueue_workloads.py).
KUEUE = "kueue.x-k8s.io"
KUEUE_NAMESPACED_RULES = {
    (KUEUE, "workloads"): {"list", "watch", "create", "patch", "delete"},
    (KUEUE, "workloads/status"): {"patch"},
}
KUEUE_CLUSTER_RULES = {
    (KUEUE, "resourceflavors"): {"list", "watch"},
    (KUEUE, "workloadpriorityclasses"): {"list", "watch"},
    (KUEUE, "topologies"): {"list", "watch"},
}

# Every layout the values can produce.
LAYOUTS = {
    "all-namespaces": {},
    "all-namespaces-peering": {"replicaCount": 2},
    "some-namespaces": {"watchNamespaces": ["team-a", "team-b"]},
    "some-namespaces-peering": {"watchNamespaces": ["team-a"], "replicaCount": 3},
}


def roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("ClusterRole", "Role")]


def table(role: dict[str, Any]) -> dict[tuple[str, str, tuple[str, ...]], set[str]]:
    """(group, resource, resourceNames) -> verbs, merging rules that repeat a resource."""
    out: dict[tuple[str, str, tuple[str, ...]], set[str]] = defaultdict(set)
    for rule in role["rules"]:
        names = tuple(rule.get("resourceNames", ()))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out[(group, resource, names)] |= set(rule["verbs"])
    return dict(out)


def unnamed(t: dict[tuple[str, str, tuple[str, ...]], set[str]]) -> dict[tuple[str, str], set[str]]:
    return {(g, r): v for (g, r, names), v in t.items() if not names}


def granted(objects: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """What the ServiceAccount may do anywhere it is bound, without resourceNames."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for role in roles(objects):
        for key, verbs in unnamed(table(role)).items():
            out[key] |= verbs
    return dict(out)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_wildcards_no_secrets_no_escalation(render: Render, layout: str):
    found = roles(render(LAYOUTS[layout]))
    assert found
    for role in found:
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, rule
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in item for item in rule.get(field, [])), (field, rule)
            assert not {"secrets", "serviceaccounts"} & set(rule["resources"]), rule
            if "configmaps" in rule["resources"]:
                assert rule["resources"] == ["configmaps"], rule
                if "resourceNames" not in rule:  # a new one: never read, patched, deleted
                    assert rule["verbs"] == ["create"], rule
                elif rule["resourceNames"] == ["ringmaster-profile-payload"]:
                    assert rule["verbs"] == ["patch"], rule  # the PoolProfiles' payload
                else:  # the catalog's and calibration's, by name, in the release's namespace
                    assert role["kind"] == "Role", rule
                    assert (rule["resourceNames"], rule["verbs"]) in (
                        (["rm-ringmaster-catalog"], ["get"]),
                        (["rm-ringmaster-calibration"], ["get", "patch"]),
                    ), rule
            assert not any(r.startswith(("roles", "clusterroles")) for r in rule["resources"])
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(
                rule["verbs"]
            ), rule
            assert "pods/exec" not in rule["resources"] and "nodes/proxy" not in rule["resources"]


def test_all_namespaces_grants_exactly_the_table(render: Render):
    objects = render()
    (role,) = [r for r in roles(objects) if r["kind"] == "ClusterRole"]
    assert (
        table(role)
        == {(g, r, ()): v for (g, r), v in {**CLUSTER_RULES, **NAMESPACED_RULES}.items()}
        | NAMED_NAMESPACED_RULES
    )
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert catalog_role(objects) is not None
    assert [o["roleRef"]["kind"] for o in objects if o["kind"] == "RoleBinding"] == ["Role"]


def catalog_role(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The one Role: in the release namespace, get the catalog ConfigMap and post Events."""
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert table(role) == {
        (CORE, "configmaps", ("rm-ringmaster-catalog",)): {"get"},
        (CORE, "configmaps", ("rm-ringmaster-calibration",)): {"get", "patch"},
        (CORE, "events", ()): {"create"},
    }
    (binding,) = [
        o for o in objects if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "Role"
    ]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    return role


def test_some_namespaces_grant_namespaced_rights_only_there(render: Render):
    objects = render(LAYOUTS["some-namespaces"])
    cluster_role = next(
        o
        for o in objects
        if o["metadata"]["name"] == "rm-ringmaster" and o["kind"] == "ClusterRole"
    )
    namespaced = next(o for o in objects if o["metadata"]["name"] == "rm-ringmaster-namespaced")
    # Cluster-wide: read nodes and CRDs, and follow the namespaces; no pod anywhere.
    assert table(cluster_role) == {(g, r, ()): v for (g, r), v in CLUSTER_RULES.items()}
    assert (
        table(namespaced)
        == {(g, r, ()): v for (g, r), v in NAMESPACED_RULES.items()} | NAMED_NAMESPACED_RULES
    )
    cluster_bindings = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert [b["roleRef"]["name"] for b in cluster_bindings] == ["rm-ringmaster"]
    role_bindings = [
        o for o in objects if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    ]
    assert {b["metadata"]["namespace"] for b in role_bindings} == {"team-a", "team-b"}
    assert {b["roleRef"]["name"] for b in role_bindings} == {"rm-ringmaster-namespaced"}


@pytest.mark.parametrize(
    ("layout", "plural"),
    [
        ("all-namespaces-peering", "clusterkopfpeerings"),
        ("some-namespaces-peering", "kopfpeerings"),
    ],
)
def test_peering_may_write_only_its_own_peering_object(render: Render, layout: str, plural: str):
    objects = render(LAYOUTS[layout])
    rules = {k: v for role in roles(objects) for k, v in table(role).items() if k[0] == "kopf.dev"}
    assert rules == {
        ("kopf.dev", plural, ()): {"list", "watch"},
        ("kopf.dev", plural, ("rm-ringmaster",)): {"patch"},
    }
    # Without replicas, no peering rights at all.
    plain = render({k: v for k, v in LAYOUTS[layout].items() if k != "replicaCount"})
    assert not [k for role in roles(plain) for k in table(role) if k[0] == "kopf.dev"]


def _kopf_resources(registry: Any = None) -> set[tuple[str, str]]:
    """(group, plural) of every resource the controllers' kopf handlers watch or index."""
    import kopf

    import ringmaster.controllers as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    registry = registry or kopf.get_default_registry()
    handlers: list[Any] = []
    for sub in (registry._indexing, registry._watching, registry._spawning, registry._changing):
        handlers.extend(sub.get_all_handlers())
    out = set()
    for handler in handlers:
        selector = handler.selector
        if selector.group:
            out.add((selector.group, selector.plural or selector.any_name))
        else:  # "pods", "nodes": core v1, named by plural
            out.add((CORE, selector.any_name or selector.plural))
    return out


def test_every_resource_kopf_watches_is_listable_and_watchable(render: Render):
    watched = _kopf_resources()
    assert (CORE, "nodes") in watched and (RM, "trainingjobs") in watched
    for layout, values in LAYOUTS.items():
        rights = granted(render(values))
        for key in watched:
            assert {"list", "watch"} <= rights.get(key, set()), (layout, key)


def test_every_kind_the_operator_applies_can_be_created_and_patched(render: Render):
    from ringmaster.controllers.kubeapi import _PATHS

    rights = granted(render())
    for kind, (prefix, plural) in _PATHS.items():
        group = "" if prefix == "/api/v1" else prefix.split("/")[2]
        verbs = rights.get((group, plural), set())
        # Server-side apply patches, and creates the object when it is absent.
        if kind == "Pod":
            continue  # pods are created (KubeApi.create), never applied: see the pod rule
        if kind == "ConfigMap":
            continue  # the calibration's only, which the chart creates: patched by name
        if kind == "LeaderWorkerSet":
            verbs = granted(render({"lws": {"enabled": True}})).get((group, plural), set())
        assert {"create", "patch"} <= verbs, kind


def test_every_delete_and_create_the_controllers_make_is_granted(render: Render):
    """The writes outside server-side apply, read from the controllers' calls to KubeApi."""
    import re
    from pathlib import Path

    import ringmaster.controllers as package
    from ringmaster.controllers.kubeapi import _PATHS

    rights = granted(render())
    needs: set[tuple[str, str, str]] = set()
    for path in Path(package.__path__[0]).glob("*.py"):
        source = path.read_text()
        for verb in ("delete", "patch"):
            for kind in re.findall(rf'api\.{verb}_object\([^,]+,\s*"(\w+)"', source):
                prefix, plural = _PATHS[kind]
                needs.add(("" if prefix == "/api/v1" else prefix.split("/")[2], plural, verb))
        if "api.delete_pod(" in source:
            needs.add((CORE, "pods", "delete"))
        for name in re.findall(r"api\.delete_custom\((\w+)", source):
            module = importlib.import_module(f"{package.__name__}.{path.stem}")
            needs.add((RM, getattr(module, name), "delete"))
    for kind in ("Pod", "Service"):  # KubeApi.create's kinds
        needs.add((CORE, _PATHS[kind][1], "create"))
    assert (CORE, "pods", "delete") in needs and len(needs) >= 4, needs
    assert (CORE, "pods", "patch") in needs  # the serving pods' admission gate
    for group, plural, verb in needs:
        assert verb in rights.get((group, plural), set()), (group, plural, verb)


def test_kueue_rights_come_only_with_kueue_enabled(render: Render):
    assert not [key for key in granted(render()) if key[0] == KUEUE]
    (role,) = [r for r in roles(render({"kueue": {"enabled": True}})) if r["kind"] == "ClusterRole"]
    everything = {
        **CLUSTER_RULES,
        **NAMESPACED_RULES,
        **KUEUE_CLUSTER_RULES,
        **KUEUE_NAMESPACED_RULES,
    }
    assert (
        table(role) == {(g, r, ()): v for (g, r), v in everything.items()} | NAMED_NAMESPACED_RULES
    )
    objects = render({"kueue": {"enabled": True}, **LAYOUTS["some-namespaces"]})
    by_name = {o["metadata"]["name"]: o for o in roles(objects) if o["kind"] == "ClusterRole"}
    cluster = {**CLUSTER_RULES, **KUEUE_CLUSTER_RULES}
    namespaced = {**NAMESPACED_RULES, **KUEUE_NAMESPACED_RULES}
    assert table(by_name["rm-ringmaster"]) == {(g, r, ()): v for (g, r), v in cluster.items()}
    assert (
        table(by_name["rm-ringmaster-namespaced"])
        == {(g, r, ()): v for (g, r), v in namespaced.items()} | NAMED_NAMESPACED_RULES
    )


def test_what_the_kueue_handlers_watch_is_granted_when_enabled(render: Render):
    import kopf

    from ringmaster.controllers.kueue_workloads import register

    registry = kopf.OperatorRegistry()
    register(registry)
    watched = _kopf_resources(registry)
    assert (KUEUE, "workloads") in watched and (KUEUE, "resourceflavors") in watched
    for layout, values in LAYOUTS.items():
        rights = granted(render({**values, "kueue": {"enabled": True}}))
        for key in watched:
            assert {"list", "watch"} <= rights.get(key, set()), (layout, key)


def test_the_operator_uses_kueue_only_when_enabled(render: Render):
    def args(values: dict[str, Any]) -> list[str]:
        deployment = next(o for o in render(values) if o["kind"] == "Deployment")
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--kueue=off" in args({})
    assert "--kueue=auto" in args({"kueue": {"enabled": True}})


def test_the_progress_endpoint_adds_token_reviews_only_and_calibration_can_go(render: Render):
    """progress.enabled: create TokenReviews, nothing more (no read of ServiceAccounts or
    tokens); calibration.enabled=false: no ConfigMap rule but the catalog's."""
    objects = render({"progress": {"enabled": True, "insecureHTTP": True}})
    (role,) = [r for r in roles(objects) if r["kind"] == "ClusterRole"]
    extra = (
        set(table(role))
        - {(g, r, ()) for g, r in {**CLUSTER_RULES, **NAMESPACED_RULES}}
        - set(NAMED_NAMESPACED_RULES)
    )
    assert extra == {("authentication.k8s.io", "tokenreviews", ())}
    assert table(role)[("authentication.k8s.io", "tokenreviews", ())] == {"create"}
    assert "tokenreviews" not in str(roles(render()))
    without = render({"calibration": {"enabled": False}})
    (catalog_only,) = [o for o in without if o["kind"] == "Role"]
    assert {k[2] for k in table(catalog_only) if k[1] == "configmaps"} == {
        ("rm-ringmaster-catalog",)
    }


def test_leader_worker_set_rights_come_only_with_lws_enabled(render: Render):
    lws = ("leaderworkerset.x-k8s.io", "leaderworkersets")
    assert lws not in granted(render())
    for layout, values in LAYOUTS.items():
        rights = granted(render({**values, "lws": {"enabled": True}}))
        assert rights[lws] == {"list", "watch", "create", "patch", "delete"}, layout

    def args(values: dict[str, Any]) -> list[str]:
        deployment = next(o for o in render(values) if o["kind"] == "Deployment")
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--lws=off" in args({})
    assert "--lws=auto" in args({"lws": {"enabled": True}})
