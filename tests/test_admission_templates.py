"""A team's Ray pod templates are held to the pod policy (issue 35, review item M3): a RayJob, or the RayCluster
KubeRay makes from it, whose template would make a pod the pod policy refuses is refused itself, with the
pod rule's own words. Admitted, KubeRay would try to create the refused pod on every reconcile while its
PodGroup counts against the team's queue. Every pod attack of the tables (``test_admission``,
``test_admission_tenants``, ``test_admission_holds``) is played as a template, except those the template
cannot carry (``POD_ONLY``); the control-plane tier plays the same table (tests/controlplane/test_cp_tenancy.py)."""

from __future__ import annotations

import copy

from test_admission import (as_kuberay_makes, cfg, operator_cluster, pod_attacks, policies, rayjob,  # noqa: F401
                            refused, run_pods)
from test_admission_holds import hold_attacks
from test_admission_tenants import tenant_pod_attacks

from workloads.render.admission import POD_POLICY, RAYCLUSTER_POLICY, RAYJOB_POLICY

MARK = "test.example/template"
"""An annotation naming the template a pod came from (0 the head, then each worker group), which no rule reads."""
POD_ONLY = {
    "schedulerName": "KubeRay sets every pod's (volcano_scheduler.go AddMetadataToChildResource)",
    "priorityClassName": "the templates' priority rule refuses it in its words (test_admission_holds.rayjob_attacks)",
    "no priorityClassName": "the same",
    "another rl- priority than the PodGroup's": "the same",
}
"""Pod attacks a template does not carry to the pod, or another rule of the Ray policies refuses."""


def templates(rayjob: dict) -> list[dict]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]


def as_template(pod: dict, template: dict, made: dict) -> dict:
    """The template KubeRay would make ``pod`` from: ``pod`` less what KubeRay added making ``made`` from
    ``template`` (``as_kuberay_makes``): labels, annotations, the scheduler and the token's environment."""
    out = {"metadata": copy.deepcopy(pod["metadata"]), "spec": copy.deepcopy(pod["spec"])}
    for part in ("labels", "annotations"):
        added = {k: v for k, v in made["metadata"].get(part, {}).items() if k not in template["metadata"].get(part, {})}
        for k, v in added.items():
            if out["metadata"].get(part, {}).get(k) == v:
                del out["metadata"][part][k]
    out["metadata"].get("annotations", {}).pop(MARK, None)
    if not out["metadata"].get("annotations") and "annotations" not in template["metadata"]:
        out["metadata"].pop("annotations", None)
    if "schedulerName" not in template["spec"] and out["spec"].get("schedulerName") == made["spec"]["schedulerName"]:
        del out["spec"]["schedulerName"]
    env_added = [e for e in made["spec"]["containers"][0]["env"] if e not in template["spec"]["containers"][0].get("env", [])]
    first = out["spec"]["containers"][0]
    first["env"] = [e for e in first.get("env", []) if e not in env_added]
    return out


def template_attacks(rayjob: dict, grace: int) -> dict[str, tuple[dict, str]]:
    """name -> (``rayjob`` with the template of the pod a pod attack changes changed alike, what the first refusal
    says: the pod rule's words)."""
    pods = run_pods(rayjob)
    for i, pod in enumerate(pods):
        pod["metadata"].setdefault("annotations", {})[MARK] = str(i)
    attacks = {**pod_attacks(pods[1]), **tenant_pod_attacks(pods), **hold_attacks(pods, grace)}
    out = {}
    for name, (pod, part) in attacks.items():
        if name in POD_ONLY:
            continue
        bad = copy.deepcopy(rayjob)
        index = int(pod["metadata"]["annotations"][MARK])
        template = templates(bad)[index]
        made = run_pods(rayjob)[index]
        changed = as_template(pod, templates(rayjob)[index], made)
        template.clear()
        template.update(changed)
        out[name] = (bad, part)
    return out


def test_each_template_attack_makes_the_pod_its_pod_attack_is(policies, rayjob):
    """The table is faithful: the pod KubeRay makes from each changed template is refused by the pod policy for the
    reason the table names (what a template carries reaches the pod)."""
    grace = 1800
    for name, (bad, part) in template_attacks(rayjob, grace).items():
        pods = run_pods(bad)
        reasons = [refused(policies[POD_POLICY], p, first=True) for p in pods]
        assert any(r and part in r[0] for r in reasons), (name, reasons)


def test_a_rayjob_and_its_cluster_whose_template_makes_a_refused_pod_are_refused(policies, rayjob):
    attacks = template_attacks(rayjob, 1800)
    assert len(attacks) == 19 + 35 + 20 - len(POD_ONLY)
    misses = []
    for name, (bad, part) in attacks.items():
        for policy, obj in ((RAYJOB_POLICY, bad), (RAYCLUSTER_POLICY, operator_cluster(bad))):
            messages = refused(policies[policy], obj, first=True)
            if not messages or part not in messages[0]:
                misses.append(f"{policy} {name}: {messages[:1] or 'admitted'}")
    assert misses == [], "\n".join(misses)


def test_the_runs_own_rayjob_and_cluster_pass(policies, rayjob):
    assert refused(policies[RAYJOB_POLICY], rayjob) == []
    assert refused(policies[RAYCLUSTER_POLICY], operator_cluster(rayjob)) == []
    assert as_template(run_pods(rayjob)[1], templates(rayjob)[1], run_pods(rayjob)[1]) == templates(rayjob)[1]
