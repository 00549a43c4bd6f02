"""What a team's Ray cluster may be, on its RayJob and on the RayCluster KubeRay makes from it, as (CEL,
message) checks (``render.admission``): submitted over HTTP by the operator to the run's own head (no
``clusterSelector``, no custom head Service), with Ray token auth, no head restart and no object KubeRay
would create besides the run's; every pod template held to what its pods must be; neither deleted leaving
its objects behind."""

from __future__ import annotations

from collections.abc import Iterable

from workloads.render.pod_rules import pod_rules, template_at
from workloads.render.queue_rules import queue_rules
from workloads.render.runs import NO_HEAD_RESTART, PRIORITY_LABEL, SUBMISSION_MODE

OPERATOR_FIELDS = ("enableInTreeAutoscaling", "autoscalerOptions", "gcsFaultToleranceOptions", "networkPolicy",
                   "headServiceAnnotations", "managedBy", "tlsOptions", "historyServerOptions")
"""RayCluster spec fields that make KubeRay v1.7.0 create or hand over objects: the autoscaler's
ServiceAccount, Role (pods get/list/watch/patch, rayclusters get/patch) and RoleBinding
(raycluster_controller.go:2226-2360, common/rbac.go:30-61); the GCS Redis cleanup Job (common/gcs_ft.go);
a NetworkPolicy (networkpolicy_controller.go:71-114); the head Service's annotations, e.g. a cloud load
balancer's (raycluster_controller.go:638); another controller in charge (raycluster_controller.go:158);
the mTLS certificates (raycluster_mtls_controller.go, utils/util.go:805-811); the history collector
sidecar (common/pod.go:304-306)."""
ORPHAN_FINALIZER = "orphan"
"""metav1.FinalizerOrphanDependents: an object carrying it is deleted leaving its dependents, whatever the
DELETE asks (apiserver v0.35.3 pkg/registry/generic/registry/store.go, deletionFinalizersForGarbageCollection)."""
HEAD_OPERATOR_FIELDS = ("enableIngress", "ingressOptions")
"""headGroupSpec fields that make KubeRay create an Ingress (raycluster_controller.go:499)."""


def cluster_rules(spec: str) -> list[tuple[str, str]]:
    """Checks of a Ray cluster spec at CEL path ``spec``: KubeRay keeps a user-supplied head Service and its
    type (common/service.go:79-110, 350-364, v1.7.0), and the operator's dashboard client goes to that
    Service's DNS name (utils/util.go:1022-1053); token auth makes KubeRay create the cluster's token
    Secret (raycluster_controller.go:423-470) and set RAY_AUTH_MODE/RAY_AUTH_TOKEN in every Ray container
    (common/pod.go:345-425), and the operator's client sends that token (utils/util.go:1061-1080)."""
    return [
        (f"!has({spec}.headGroupSpec.headService)",
         "a team's Ray cluster uses the head Service KubeRay makes (no headGroupSpec.headService)"),
        (f"!has({spec}.headGroupSpec.serviceType) || {spec}.headGroupSpec.serviceType == 'ClusterIP'",
         "a team's Ray head Service is ClusterIP"),
        (f"has({spec}.authOptions) && has({spec}.authOptions.mode) && {spec}.authOptions.mode == 'token'"
         f" && !has({spec}.authOptions.secretName)"
         f" && (!has({spec}.authOptions.enableK8sTokenAuth) || !{spec}.authOptions.enableK8sTokenAuth)",
         "a team's Ray cluster runs Ray token authentication with the token KubeRay generates for it "
         "(authOptions.mode token, no secretName)"),
        (f"has(object.metadata.labels) && '{PRIORITY_LABEL}' in object.metadata.labels && " + _templates(
            spec, f"has(t.spec.priorityClassName) && t.spec.priorityClassName == object.metadata.labels['{PRIORITY_LABEL}']"),
         f"a team's Ray pod templates name the run's priority (spec.priorityClassName = label {PRIORITY_LABEL}, "
         "the PodGroup's)"),
        (" && ".join([*(f"!has({spec}.{f})" for f in OPERATOR_FIELDS if f != "enableInTreeAutoscaling"),
                      f"(!has({spec}.enableInTreeAutoscaling) || !{spec}.enableInTreeAutoscaling)",
                      f"!has({spec}.headGroupSpec.ingressOptions)",
                      f"(!has({spec}.headGroupSpec.enableIngress) || !{spec}.headGroupSpec.enableIngress)"]),
         "a team's Ray cluster creates no other object through KubeRay: no autoscaler (its Role may patch "
         f"RayClusters and pods), no Ingress, GCS Redis cleanup Job, NetworkPolicy or mTLS objects (no "
         f"{', '.join(OPERATOR_FIELDS[1:])}, headGroupSpec.enableIngress or ingressOptions)"),
        (_runs_workers(spec),
         "a team's Ray cluster runs workers: a worker group of at least one pod (replicas within minReplicas.."
         "maxReplicas, numOfHosts at least 1, not suspended: KubeRay's GetWorkerGroupDesiredReplicas, "
         "utils/util.go:389-407, v1.7.0); a cluster of its head alone holds a head-pool slot with no GPU work"),
        *template_rules(spec),
    ]


def _runs_workers(spec: str) -> str:
    """A worker group of the Ray cluster spec at ``spec`` makes at least one pod, as KubeRay counts them."""
    replicas, low = "(has(g.replicas) ? g.replicas : 0)", "(has(g.minReplicas) ? g.minReplicas : 0)"
    high = "(has(g.maxReplicas) ? g.maxReplicas : 2147483647)"
    desired = f"({replicas} < {low} ? {low} : ({replicas} > {high} ? {high} : {replicas}))"
    return (f"has({spec}.workerGroupSpecs) && {spec}.workerGroupSpecs.exists(g, !(has(g.suspend) && g.suspend)"
            f" && (!has(g.numOfHosts) || g.numOfHosts > 0) && {desired} > 0)")


def _templates(spec: str, check: str, worker_check: str | None = None) -> str:
    """``check`` (a CEL predicate of ``t``, a pod template) holds for every pod template of the Ray cluster
    spec at ``spec``: the head's and each worker group's (``worker_check`` there if given; two lists of two
    schema types, not joined)."""
    return (f"[{spec}.headGroupSpec.template].all(t, {check})"
            f" && (!has({spec}.workerGroupSpecs)"
            f" || {spec}.workerGroupSpecs.all(g, [g.template].all(t, {worker_check or check})))")


def template_rules(spec: str) -> list[tuple[str, str]]:
    """Every pod rule a template carries to its pods (``render.pod_rules``, ``render.pod_limits``), on every pod
    template of the Ray cluster spec at ``spec``, in the pod rule's words: admitted, a template whose pods the
    pod policy refuses has KubeRay try to create them on every reconcile, its PodGroup held in the queue."""
    head, worker = pod_rules((), template_at(head=True)), pod_rules((), template_at(head=False))
    return [(_templates(spec, h, w), f"a team's Ray pod template makes a pod the pod policy refuses: {m}")
            for (h, m), (w, _) in zip(head, worker, strict=True)]



def rayjob_rules(priority_classes: Iterable[str]) -> list[tuple[str, str]]:
    return [
        *queue_rules(priority_classes),
        (f"has(object.spec.submissionMode) && object.spec.submissionMode == '{SUBMISSION_MODE}'",
         f"a team's RayJob is submitted in {SUBMISSION_MODE}"),
        (f"has(object.metadata.annotations) && '{NO_HEAD_RESTART}' in object.metadata.annotations"
         f" && object.metadata.annotations['{NO_HEAD_RESTART}'] == 'true'",
         f"a team's RayJob keeps {NO_HEAD_RESTART}: a lost head ends the run and frees its nodes instead of "
         "holding them"),
        ("(!has(object.spec.clusterSelector) || size(object.spec.clusterSelector) == 0)"
         " && has(object.spec.rayClusterSpec)",
         "a team's RayJob brings up its own Ray cluster (rayClusterSpec, no clusterSelector)"),
        ("request.operation != 'UPDATE' || !has(oldObject.spec.suspend) || !oldObject.spec.suspend"
         " || (has(object.spec.suspend) && object.spec.suspend)",
         "a cancelled (suspended) attempt stays cancelled: submit --resume starts the next one"),
        ("!has(object.spec.managedBy)",
         "a team's RayJob creates no other object through KubeRay and stays KubeRay's (no managedBy: "
         "rayjob_controller.go:107 leaves it to another controller)"),
        *cluster_rules("object.spec.rayClusterSpec"),
    ]



NOT_ORPHANED = (f"!has(object.metadata.finalizers) || !('{ORPHAN_FINALIZER}' in object.metadata.finalizers)",
                f"a team's RayJob or Ray cluster does not carry the {ORPHAN_FINALIZER!r} finalizer: deleted, it would "
                "leave its Ray cluster, PodGroup and pods holding their nodes")
"""Judged on every write, a finalizer-only update included."""



def deletion_rules() -> list[tuple[str, str]]:
    """A DELETE's options (``request.options``: its DeleteOptions, apiserver v0.35.3
    pkg/admission/plugin/cel/condition.go:174-176) do not orphan the object's dependents."""
    return [("request.options == null || ((!has(request.options.propagationPolicy)"
             " || request.options.propagationPolicy != 'Orphan')"
             " && (!has(request.options.orphanDependents) || !request.options.orphanDependents))",
             "a team's RayJob or Ray cluster is deleted with its dependents (no propagationPolicy Orphan, no "
             "orphanDependents): an orphaned Ray cluster, PodGroup and pods hold their nodes, and the team's runs "
             "budget blocks every drain of them")]
