"""Admission in team namespaces: ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, GA since
Kubernetes 1.30) and their Deny bindings on every namespace labelled ``rl.platform/team``.

A binding matches requests by namespace, whoever sends them, so the KubeRay operator's own requests
(the RayCluster it copies from a RayJob, the head Service, the pods) are held to the same rules as
a team member's. What they guarantee:

- pods: no weaker than Pod Security ``baseline`` (every control of the Pod Security Standards'
  baseline list, the 1.34 probe and lifecycle ``host`` included), narrower where the platform can be
  (capabilities: IPC_LOCK only, NET_RAW dropped; the platform's volume types only), scheduled by Volcano
  only, never created bound to a node, at their PodGroup's priority (one of the platform's), always
  preemptable, on the GPU pools holding a whole node (a run's head on the head pool, no bigger than the
  platform's), stopping within the checkpoint grace (``render.pod_limits``), tolerating neither the
  burn-in nor the quarantine taint nor every taint, and with huge pages or EFA devices only beside GPUs;
  judged on every update that changes the spec, a label or an annotation, their PodGroup, order and
  priority fixed at creation;
- Services: ClusterIP only, no ``externalIPs`` (no load balancer, NodePort, ExternalName; the
  CVE-2020-8554 class);
- RayJobs: in the namespace's own queue at a platform priority, submitted over HTTP by the operator
  to the run's own head (no ``clusterSelector``, no custom head Service), with Ray token auth and
  no head restart;
- RayClusters (the operator's copy of a RayJob's cluster): the same cluster rules, queue and priority,
  checked on every update that changes a label too; every pod template at the cluster's priority and
  within the checkpoint grace; neither deleted leaving its objects behind (``propagationPolicy:
  Orphan``, ``orphanDependents``, the ``orphan`` finalizer): the RayCluster, PodGroup and pods of an
  orphaned RayJob would hold their nodes, and the team's ``runs`` budget would block every drain of them;
- Volcano PodGroups (KubeRay's, or the Volcano controller's for a pod without one): the namespace's
  own queue, a platform priority, preemptable.

The checks are in ``render.pod_rules``, ``render.ray_rules`` and ``render.queue_rules``; what a pod may
hold of a node, and for how long, in ``render.pod_limits``.
"""

from __future__ import annotations

from collections.abc import Iterable

from components.faults import FIS_GROUP

from workloads.derive.model import WorkloadModel
from workloads.schema.teams import PART_OF_LABEL, TEAM_LABEL
from workloads.render.cel import cel_list
from workloads.render.common import PART_OF
from workloads.render.pod_limits import PodLimits, limit_variables, pod_limits
from workloads.render.pod_rules import LABEL_VARIABLES, member_pod_update, pod_rules
from workloads.render.queue_rules import podgroup_rules, queue_rules
from workloads.render.ray_rules import NOT_ORPHANED, cluster_rules, deletion_rules, rayjob_rules
from workloads.render.runs import priority_classes

POD_POLICY, SERVICE_POLICY, RAYJOB_POLICY, RAYCLUSTER_POLICY, PODGROUP_POLICY, DELETION_POLICY = (
    "rl-team-pods", "rl-team-services", "rl-team-rayjobs", "rl-team-rayclusters", "rl-team-podgroups",
    "rl-team-deletions")
TEAM_NAMESPACES = {"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}}


def service_rules() -> list[tuple[str, str]]:
    return [
        ("!has(object.spec.type) || object.spec.type == 'ClusterIP'",
         "a team's Services are ClusterIP only (no LoadBalancer, NodePort or ExternalName: KubeRay posts jobs to "
         "the head Service's DNS name)"),
        ("!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
         "a team's Services may not claim externalIPs (CVE-2020-8554)"),
    ]


SPEC_UNCHANGED = "request.operation == 'UPDATE' && object.spec == oldObject.spec"
"""An update that leaves the spec as it was (a finalizer removed, a status-like label): objects admitted
before a policy existed or changed (a K8sJobMode submitter's pods losing the Job controller's tracking
finalizer, an older RayJob being deleted) are not held by it forever."""
META_UNCHANGED = ("(has(object.metadata.labels) ? object.metadata.labels : {}) =="
                  " (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})"
                  " && (has(object.metadata.annotations) ? object.metadata.annotations : {}) =="
                  " (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {})")


NOT_THE_FAULT_ENGINE = {"name": "not-the-fault-engine", "expression": f"!('{FIS_GROUP}' in request.userInfo.groups)"}
"""The team pod policy does not judge the pod AWS FIS creates for an ``aws:eks:pod-delete`` experiment
(FIS User Guide, "Use the AWS FIS aws:eks:pod actions": FIS creates its own pod, from its own image, in
the target namespace). Only the FIS role's EKS access entry carries ``FIS_GROUP`` (``components.faults``),
whose trust is the FIS service and whose templates the stack defines; a team member cannot join a group
an access entry names. Its RBAC there is create/get/list/delete pods (``render.faults.ENGINE_RULES``)."""


def _policy(name: str, resources: list[tuple[str, str, list[str]]], rules: list[tuple[str, str]],
            variables: list[dict] | None = None, unchanged: str | None = SPEC_UNCHANGED,
            match_conditions: list[dict] | None = None, always: list[tuple[str, str]] = (),
            operations: tuple[str, ...] = ("CREATE", "UPDATE")) -> list[dict]:
    """A policy on ``resources`` ((group, version, resources)) at each of ``operations``: ``rules`` except at
    an UPDATE that is ``unchanged``, ``always`` at every one; and its Deny binding on every team namespace."""
    md = {"name": name, "labels": {PART_OF_LABEL: PART_OF}}
    skip = [{"name": "unchanged", "expression": unchanged}] if unchanged else []
    spec: dict = {"failurePolicy": "Fail", **({"matchConditions": match_conditions} if match_conditions else {}),
                  "matchConstraints": {"resourceRules": [
                      {"apiGroups": [g], "apiVersions": [v], "operations": list(operations), "resources": r}
                      for g, v, r in resources]},
                  "variables": [*skip, *(variables or [])],
                  "validations": [*({"expression": f"variables.unchanged || ({e})" if unchanged else e, "message": m}
                                    for e, m in rules),
                                  *({"expression": e, "message": m} for e, m in always)]}
    return [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": md,
             "spec": spec},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": md, "spec": {"policyName": name, "validationActions": ["Deny"],
                                      "matchResources": TEAM_NAMESPACES}}]


def admission_policies(priority_classes: Iterable[str], gpu_pools: Iterable[str], head_pool: str,
                       limits: PodLimits | None = None) -> list[dict]:
    """Every admission policy of the team namespaces and its binding, policy first; team pods may run on
    ``gpu_pools`` and a run's head on ``head_pool``, within ``limits``. Without ``limits`` the policies lack
    the variables that hold the stack's numbers: what the offline plan's team-isolation rule compares
    (``analysis.rules.tenancy``), not what is deployed."""
    classes = list(priority_classes)
    containers = {"name": "containers", "expression":
                  "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
                  " + (has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])"}
    pools = [{"name": "gpuPools", "expression": cel_list(sorted(gpu_pools))},
             {"name": "headPool", "expression": f"'{head_pool}'"}]
    numbers = [*pools, *(limit_variables(limits) if limits else [])]
    labelled = f"{SPEC_UNCHANGED} && {META_UNCHANGED}"
    ray = [("ray.io", "v1", ["rayjobs"]), ("ray.io", "v1", ["rayclusters"])]
    return [*_policy(POD_POLICY, [("", "v1", ["pods", "pods/ephemeralcontainers"])], pod_rules(classes),
                     [containers, *numbers, *LABEL_VARIABLES], unchanged=labelled,
                     match_conditions=[NOT_THE_FAULT_ENGINE], always=[member_pod_update()]),
            *_policy(SERVICE_POLICY, [("", "v1", ["services"])], service_rules()),
            *_policy(RAYJOB_POLICY, ray[:1], rayjob_rules(classes), numbers, unchanged=labelled, always=[NOT_ORPHANED]),
            *_policy(RAYCLUSTER_POLICY, ray[1:], [*queue_rules(classes), *cluster_rules("object.spec")], numbers,
                     unchanged=labelled, always=[NOT_ORPHANED]),
            *_policy(PODGROUP_POLICY, [("scheduling.volcano.sh", "v1beta1", ["podgroups"])], podgroup_rules(classes),
                     unchanged=labelled),
            *_policy(DELETION_POLICY, ray, [], unchanged=None, always=deletion_rules(), operations=("DELETE",))]


def team_admission(m: WorkloadModel) -> list[dict]:
    """``admission_policies`` of the stack: its run priorities, GPU pools, head pool and pod limits."""
    return admission_policies((pc["metadata"]["name"] for pc in priority_classes(m)),
                              (p.name for p in m.gpu_pools), m.head_pool.name, pod_limits(m))
