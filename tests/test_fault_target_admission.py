"""What a team member may do to aim a pod fault (``bench.faults``): its Role (``render.faults.member_rules``) and
the team pod policy's rule on its pod updates (``render.pod_rules.member_pod_update``), played with the CEL
interpreter of ``test_admission``: adding or removing ``rl.platform/fault-target`` = the pod's own group passes;
every other change a member could now send with its pod ``patch`` is refused, as RBAC refused all of them
before."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from test_admission import cfg, policies, rayjob, refused, run_pods  # noqa: F401 (fixtures)

from components.faults import FAULT_TARGET_LABEL, fault_lease
from workloads.render.admission import POD_POLICY
from workloads.render.common import RAY_GROUP_LABEL
from workloads.render.faults import MEMBER_ROLE, fault_rbac
from workloads.render.runs import PRIORITY_LABEL, RUN_LABEL
from workloads.schema.teams import team_group
from test_workloads import k8s_version

MEMBER = (team_group("alpha"), "system:authenticated")
RULE = "a team member may change only the label"


@pytest.fixture(scope="module")
def rollout(rayjob):
    """A rollout pod as KubeRay makes it, with the group label KubeRay sets (common/pod.go, v1.7.0) and the
    owner and finalizer a running pod may carry."""
    pod = copy.deepcopy(run_pods(rayjob)[2])
    pod["metadata"]["labels"][RAY_GROUP_LABEL] = "rollout"
    pod["metadata"] |= {"ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "r-1",
                                             "uid": "u", "controller": True}], "finalizers": []}
    pod["spec"]["nodeName"] = "rollout-0"  # bound by the scheduler
    return pod


def _with(pod: dict, edit) -> dict:
    new = copy.deepcopy(pod)
    edit(new["metadata"], new["spec"])
    return new


def _label(value):
    return lambda md, spec: md["labels"].__setitem__(FAULT_TARGET_LABEL, value)


def test_a_member_adds_and_removes_the_fault_label_on_its_teams_pod(policies, rollout):
    labelled = _with(rollout, _label("rollout"))
    assert refused(policies[POD_POLICY], labelled, "UPDATE", rollout, groups=MEMBER) == []
    assert refused(policies[POD_POLICY], rollout, "UPDATE", labelled, groups=MEMBER) == []


ATTACKS = {
    "another group's value": _label("trainer"),
    "a value no template selects": _label("headgroup"),
    "moved into another run": lambda md, spec: md["labels"].__setitem__(RUN_LABEL, "their-run"),
    "a label of its own": lambda md, spec: md["labels"].__setitem__("team", "beta"),
    "a priority label": lambda md, spec: md["labels"].__setitem__(PRIORITY_LABEL, "rl-run-high"),
    "an annotation": lambda md, spec: md.setdefault("annotations", {}).__setitem__("volcano.sh/preemptable", "false"),
    "a finalizer that holds its deletion": lambda md, spec: md["finalizers"].append("example.com/hold"),
    "orphaned from its RayCluster": lambda md, spec: md.__setitem__("ownerReferences", []),
    "another image": lambda md, spec: spec["containers"][0].__setitem__("image", "attacker/image:1"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_member_changes_nothing_else_of_a_pod(policies, rollout, attack):
    """Each alone, and beside the fault label: refused by the member rule (before, by RBAC: no pod patch)."""
    for base in (rollout, _with(rollout, _label("rollout"))):
        messages = refused(policies[POD_POLICY], _with(base, ATTACKS[attack]), "UPDATE", rollout, groups=MEMBER)
        assert any(RULE in m for m in messages), messages


def test_the_operators_updates_are_judged_as_before(policies, rollout):
    """KubeRay's or the garbage collector's finalizer and owner updates are not the member rule's: admitted."""
    for edit in (ATTACKS["a finalizer that holds its deletion"], ATTACKS["orphaned from its RayCluster"]):
        assert refused(policies[POD_POLICY], _with(rollout, edit), "UPDATE", rollout) == []


def test_the_member_role_reaches_only_the_fault_leases_and_pod_patches(cfg):
    from workloads.derive.model import derive
    team = derive(cfg).settings.teams[0]
    objs = fault_rbac(team)
    role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == MEMBER_ROLE)
    binding = next(o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["name"] == MEMBER_ROLE)
    assert binding["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                    "name": team_group(team.name)}]
    assert binding["roleRef"]["name"] == MEMBER_ROLE and role["metadata"]["namespace"] == f"team-{team.name}"
    for obj in (role, binding):
        kubernetes_validate.validate(obj, k8s_version(cfg), strict=True)
    leases = [fault_lease("rollout"), fault_lease("trainer")]
    assert role["rules"] == [  # no create: RBAC cannot name a created object (review37c B1)
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": leases},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
