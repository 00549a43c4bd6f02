"""The policy pack's team-isolation rule (``analysis/rules/tenancy.py``): the shared stack passes, and each
way of removing or weakening a team namespace's admission policies, their bindings or its default-deny
NetworkPolicy is caught. The mutations are also the pack's broken variants (``test_policy.BREAKS``)."""

from __future__ import annotations

import copy

import pytest
from conftest import graph_copy, graph_of

from analysis import mocks
from analysis.rules.tenancy import check_team_isolation
from analysis.rules.view import NAMESPACE, NETWORK_POLICY, VAP, VAP_BINDING, Resource, Stack
from workloads.render.admission import admission_policies

TEAM_POLICIES = [o["metadata"]["name"] for o in admission_policies([], [], "") if o["kind"] == "ValidatingAdmissionPolicy"]

SHARED = "p5en-shared"
NS = "namespace-team-alpha"


def _graph() -> mocks.Graph:
    return graph_copy(SHARED)


def _stack(graph: mocks.Graph) -> Stack:
    return Stack(Resource(type=r.type, name=r.name, urn=r.urn, props=r.outputs) for r in graph.resources)


def _edit(r: mocks.Registered, edit) -> None:
    for props in (r.inputs, r.outputs):
        edit(props)


def _drop(graph: mocks.Graph, type_: str, name: str) -> None:
    graph.resources.remove(graph.named(type_, name))


def drop_pod_policy(g):
    _drop(g, VAP, "validatingadmissionpolicy-rl-team-pods")
    return NAMESPACE, NS


def drop_service_binding(g):
    _drop(g, VAP_BINDING, "validatingadmissionpolicybinding-rl-team-services")
    return NAMESPACE, NS


def binding_warns_only(g):
    _edit(g.named(VAP_BINDING, "validatingadmissionpolicybinding-rl-team-rayjobs"),
          lambda p: p["spec"].update(validationActions=["Warn", "Audit"]))
    return NAMESPACE, NS


def binding_selects_other_namespaces(g):
    _edit(g.named(VAP_BINDING, "validatingadmissionpolicybinding-rl-team-pods"),
          lambda p: p["spec"]["matchResources"].update(namespaceSelector={"matchLabels": {"rl.platform/team": "beta"}}))
    return NAMESPACE, NS


def pod_policy_loses_host_port(g):
    def edit(p):
        p["spec"]["validations"] = [v for v in p["spec"]["validations"] if "hostPort" not in v["expression"]]
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-pods"), edit)
    return VAP, "validatingadmissionpolicy-rl-team-pods"


def service_policy_ignores(g):
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-services"), lambda p: p["spec"].update(failurePolicy="Ignore"))
    return VAP, "validatingadmissionpolicy-rl-team-services"


def rayjob_policy_skips_updates(g):
    def edit(p):
        p["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = ["CREATE"]
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-rayjobs"), edit)
    return VAP, "validatingadmissionpolicy-rl-team-rayjobs"


def pod_policy_never_checks(g):
    def edit(p):
        p["spec"]["variables"] = [{**v, "expression": "true"} if v["name"] == "unchanged" else v
                                  for v in p["spec"]["variables"]]
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-pods"), edit)
    return VAP, "validatingadmissionpolicy-rl-team-pods"


def pod_policy_exempts_a_team(g):
    def edit(p):
        p["spec"]["matchConditions"] = [*p["spec"]["matchConditions"],
                                        {"name": "not-alpha", "expression": "!('team-alpha' in request.userInfo.groups)"}]
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-pods"), edit)
    return VAP, "validatingadmissionpolicy-rl-team-pods"


def drop_default_deny(g):
    _drop(g, NETWORK_POLICY, "networkpolicy-team-alpha-default-deny")
    return NAMESPACE, NS


def default_deny_allows_ingress(g):
    _edit(g.named(NETWORK_POLICY, "networkpolicy-team-alpha-default-deny"),
          lambda p: p["spec"].update(ingress=[{}]))
    return NAMESPACE, NS


def pods_may_use_the_system_pool(g):
    def edit(p):
        p["spec"]["variables"] = [{**v, "expression": v["expression"].replace("[", "['system', ", 1)}
                                  if v["name"] == "gpuPools" else v for v in p["spec"]["variables"]]
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-pods"), edit)
    return VAP, "validatingadmissionpolicy-rl-team-pods"


def rayclusters_skip_label_updates(g):
    def edit(p):
        p["spec"]["variables"] = [{**v, "expression": "request.operation == 'UPDATE' && object.spec == oldObject.spec"}
                                  if v["name"] == "unchanged" else v for v in p["spec"]["variables"]]
    _edit(g.named(VAP, "validatingadmissionpolicy-rl-team-rayclusters"), edit)
    return VAP, "validatingadmissionpolicy-rl-team-rayclusters"


def drop_podgroup_policy(g):
    _drop(g, VAP, "validatingadmissionpolicy-rl-team-podgroups")
    return NAMESPACE, NS


BROKEN = {
    "no pod policy": (drop_pod_policy, "no ValidatingAdmissionPolicy rl-team-pods"),
    "no service binding": (drop_service_binding, "no binding of rl-team-services"),
    "binding only warns": (binding_warns_only, "does not Deny"),
    "binding selects another team": (binding_selects_other_namespaces, "does not select namespace team-alpha"),
    "hostPort check removed": (pod_policy_loses_host_port, "lost the check(s): a team's containers may not take a hostPort"),
    "failurePolicy Ignore": (service_policy_ignores, "failurePolicy Ignore"),
    "UPDATE not matched": (rayjob_policy_skips_updates, "no longer matches ray.io/v1/rayjobs/UPDATE"),
    "checks skipped by a variable": (pod_policy_never_checks, "a variable its checks read was changed"),
    "a team exempted by a match condition": (pod_policy_exempts_a_team, "narrowed by matchPolicy"),
    "no default deny": (drop_default_deny, "no default-deny NetworkPolicy in team-alpha"),
    "default deny allows ingress": (default_deny_allows_ingress, "no default-deny NetworkPolicy in team-alpha"),
    "no podgroup policy": (drop_podgroup_policy, "no ValidatingAdmissionPolicy rl-team-podgroups"),
    "gpu pools widened to the system pool": (pods_may_use_the_system_pool, "a variable its checks read was changed"),
    "ray cluster label updates skipped": (rayclusters_skip_label_updates, "a variable its checks read was changed"),
}


def test_the_shared_stack_isolates_every_team():
    assert list(check_team_isolation(_stack(graph_of(SHARED)))) == []


def test_a_stack_without_teams_is_not_asked_for_team_policies():
    assert list(check_team_isolation(_stack(graph_of("p5en-prod")))) == []


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_each_broken_variant_is_caught_on_the_resource_it_names(case):
    mutate, expect = BROKEN[case]
    graph = _graph()
    type_, name = mutate(graph)
    urn = graph.named(type_, name).urn
    found = [m for u, m in check_team_isolation(_stack(graph)) if u == urn]
    assert any(name in m and expect in m for m in found), found


def without_rule(stack: Stack, policy: Resource, index: int) -> Stack:
    """``stack`` with ``policy``'s validation ``index`` removed (the rest untouched)."""
    props = copy.deepcopy(policy.props)
    del props["spec"]["validations"][index]
    return Stack(Resource(r.type, r.name, r.urn, props) if r is policy else r for r in stack.resources)


def test_each_rule_removed_is_caught_on_its_policy():
    """Issue 26, issue 23 item 11: one broken variant per rule, derived from the rules the platform renders
    (``workloads.render.admission``), so a new rule has its variant without a list to extend here."""
    stack = _stack(graph_of(SHARED))
    policies = [r for r in stack.of_type(VAP) if r.props["metadata"]["name"] in TEAM_POLICIES]
    assert sorted(r.props["metadata"]["name"] for r in policies) == sorted(TEAM_POLICIES)
    for policy in policies:
        for i, rule in enumerate(policy.props["spec"]["validations"]):
            found = [m for u, m in check_team_isolation(without_rule(stack, policy, i)) if u == policy.urn]
            assert found == [f"{policy.label}: lost the check(s): {rule['message']}"], (policy.name, i)
