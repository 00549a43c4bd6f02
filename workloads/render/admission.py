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
"""

from __future__ import annotations

from collections.abc import Iterable

from components.faults import FIS_GROUP, FIS_SERVICE_ACCOUNT
from components.gpu_node_setup import BURN_IN_TAINT, QUARANTINE_TAINT
from stackconfig.stack import POOL_LABEL

from workloads.derive.model import WorkloadModel
from workloads.derive.resources import EFA, GPU
from workloads.schema.teams import PART_OF_LABEL, TEAM_LABEL
from workloads.render.common import PART_OF, RAY_NODE_TYPE_LABEL
from workloads.render.pod_limits import (PodLimits, grace_bounded, head_sized, limit_variables, per_container,
                                         pod_limit_rules, pod_limits, whole_node)
from workloads.render.runs import (NO_HEAD_RESTART, PRIORITY_LABEL, QUEUE_LABEL, SUBMISSION_MODE, TASK_PRIORITY,
                                   priority_classes)

POD_POLICY, SERVICE_POLICY, RAYJOB_POLICY, RAYCLUSTER_POLICY, PODGROUP_POLICY, DELETION_POLICY = (
    "rl-team-pods", "rl-team-services", "rl-team-rayjobs", "rl-team-rayclusters", "rl-team-podgroups",
    "rl-team-deletions")
TEAM_NAMESPACES = {"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}}
SCHEDULER = "volcano"
"""The scheduler name KubeRay sets on every pod of a RayCluster when started with
``--batch-scheduler=volcano`` (volcano_scheduler.go:44-46 and 122-129, raycluster_controller.go:1652,
1675, 1699, v1.7.0)."""
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes")
"""Pod Security Standards, baseline, "Sysctls" (kubernetes.io/docs/concepts/security/pod-security-standards, v1.35)."""
SELINUX_TYPES = ("container_t", "container_init_t", "container_kvm_t", "container_engine_t")
"""Pod Security Standards, baseline, "SELinux": the allowed ``seLinuxOptions.type`` values besides empty."""
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
UNTOUCHABLE_TAINTS = (BURN_IN_TAINT.key, QUARANTINE_TAINT.key)
"""The burn-in taint every GPU node registers with until it passes, and the quarantine taint of a node
that failed it (``nodes/``): a team pod tolerating either lands on untested or broken hardware."""
PREEMPTABLE = "volcano.sh/preemptable"
"""Volcano reads it from a pod's annotations, else its labels, default true, and an unparsable value as
false (v1.15.1 pkg/scheduler/api/pod_info.go:125-150); preempt and reclaim skip a task that is not
preemptable (actions/preempt/preempt.go:207, actions/reclaim/reclaim.go:189); a PodGroup's the same way
(api/job_info.go:524-550). KubeRay copies a RayJob's annotations to its PodGroup (volcano_scheduler.go:218-219)."""
VOLUME_TYPES = ("emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected", "downwardAPI")
"""What a run's pods mount (scratch, the team's fileset claims, the scripts, KubeRay's token); no network
file system (nfs, iscsi, ...), no inline CSI volume or generic ephemeral claim (either reaches storage the
platform did not grant) and no ``image`` volume (pulls any image, Kubernetes 1.33+)."""
OPERATOR_FIELDS = ("enableInTreeAutoscaling", "autoscalerOptions", "gcsFaultToleranceOptions", "networkPolicy",
                   "headServiceAnnotations", "managedBy", "tlsOptions", "historyServerOptions")
"""RayCluster spec fields that make KubeRay v1.7.0 create or hand over objects: the autoscaler's
ServiceAccount, Role (pods get/list/watch/patch, rayclusters get/patch) and RoleBinding
(raycluster_controller.go:2226-2360, common/rbac.go:30-61); the GCS Redis cleanup Job (common/gcs_ft.go);
a NetworkPolicy (networkpolicy_controller.go:71-114); the head Service's annotations, e.g. a cloud load
balancer's (raycluster_controller.go:638); another controller in charge (raycluster_controller.go:158);
the mTLS certificates (raycluster_mtls_controller.go, utils/util.go:805-811); the history collector
sidecar (common/pod.go:304-306)."""
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
"""The PodGroup of a pod, set by KubeRay (volcano_scheduler.go populateAnnotations, v1.6.2:263-267) and read by
Volcano."""
FIXED_POD_METADATA = (("annotations", GROUP_ANNOTATION), ("annotations", TASK_PRIORITY), ("labels", PRIORITY_LABEL))
"""A pod's PodGroup, its order within it and its priority label: set when KubeRay creates it, never changed."""
ORPHAN_FINALIZER = "orphan"
"""metav1.FinalizerOrphanDependents: an object carrying it is deleted leaving its dependents, whatever the
DELETE asks (apiserver v0.35.3 pkg/registry/generic/registry/store.go, deletionFinalizersForGarbageCollection)."""
HEAD_OPERATOR_FIELDS = ("enableIngress", "ingressOptions")
"""headGroupSpec fields that make KubeRay create an Ingress (raycluster_controller.go:499)."""


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _contexts(check: str) -> str:
    """``check`` (a CEL predicate of ``s``, a securityContext) holds for the pod's and every container's."""
    return (f"(!has(object.spec.securityContext) || [object.spec.securityContext].all(s, {check}))"
            f" && variables.containers.all(c, !has(c.securityContext) || [c.securityContext].all(s, {check}))")


def pod_rules(priority_classes: Iterable[str]) -> list[tuple[str, str]]:
    """(CEL expression, message) of every check on a team pod, the Pod Security baseline list in its order."""
    classes = _cel_list(sorted(priority_classes))
    return [
        (_contexts("!has(s.windowsOptions) || !has(s.windowsOptions.hostProcess) || !s.windowsOptions.hostProcess"),
         "a team's pods may not run Windows HostProcess containers"),
        ("!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && object.spec.hostPID)"
         " && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
         "a team's pods may not use the node's network, PID or IPC namespaces"),
        ("variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
         " || !c.securityContext.privileged)",
         "a team's containers may not be privileged"),
        ("variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.capabilities)"
         " || !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(a, a == 'IPC_LOCK'))",
         "a team's containers may add IPC_LOCK (RDMA memory registration) and no other capability"),
        ("!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
         "a team's pods may not mount a hostPath (other teams' volumes live under the node's kubelet directory)"),
        ("variables.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
         "a team's containers may not take a hostPort (with the VPC CNI's portmap it captures that port of the "
         "node's addresses, the Pod Identity agent's included)"),
        (_contexts("!has(s.appArmorProfile) || s.appArmorProfile.type in ['RuntimeDefault', 'Localhost']")
         + " && (!has(object.metadata.annotations) || object.metadata.annotations.all(k, "
           f"!k.startsWith('{APPARMOR_ANNOTATION}') || object.metadata.annotations[k] == 'runtime/default'"
           " || object.metadata.annotations[k].startsWith('localhost/')))",
         "a team's pods may not run AppArmor Unconfined"),
        (_contexts("!has(s.seLinuxOptions) || ((!has(s.seLinuxOptions.type) || s.seLinuxOptions.type == ''"
                   f" || s.seLinuxOptions.type in {_cel_list(SELINUX_TYPES)})"
                   " && (!has(s.seLinuxOptions.user) || s.seLinuxOptions.user == '')"
                   " && (!has(s.seLinuxOptions.role) || s.seLinuxOptions.role == ''))"),
         "a team's pods may not set an SELinux user or role, or a type other than the container types"),
        ("variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.procMount)"
         " || c.securityContext.procMount == 'Default')",
         "a team's containers may not mount /proc Unmasked"),
        (_contexts("!has(s.seccompProfile) || s.seccompProfile.type != 'Unconfined'"),
         "a team's pods may not run seccomp Unconfined"),
        ("!has(object.spec.securityContext) || !has(object.spec.securityContext.sysctls)"
         f" || object.spec.securityContext.sysctls.all(x, x.name in {_cel_list(SAFE_SYSCTLS)})",
         "a team's pods may set only the namespaced sysctls Pod Security baseline allows"),
        ("request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
         "a team's pods may not be created bound to a node (spec.nodeName skips the scheduler, its queue and quota)"),
        ("variables.containers.all(c, !has(c.env) || c.env.all(e, e.name != 'RAY_AUTH_MODE'"
         " || (has(e.value) && e.value == 'token')))",
         "a team's containers may not turn Ray token authentication off (KubeRay keeps a RAY_AUTH_MODE the "
         "template sets, common/pod.go:387-393, v1.7.0)"),
        (f"has(object.spec.schedulerName) && object.spec.schedulerName == '{SCHEDULER}'",
         f"a team's pods are scheduled by Volcano (schedulerName {SCHEDULER}), in their team's queue"),
        (f"has(object.spec.priorityClassName) && object.spec.priorityClassName in {classes}"
         f" && has(object.metadata.labels) && '{PRIORITY_LABEL}' in object.metadata.labels"
         f" && object.spec.priorityClassName == object.metadata.labels['{PRIORITY_LABEL}']",
         f"a team's pods run at their PodGroup's priority, one of the platform's run priorities {classes}: "
         f"spec.priorityClassName equal to the label {PRIORITY_LABEL} KubeRay copies from the RayJob, as it "
         "does to the PodGroup (volcano_scheduler.go:253-265); Volcano orders by the PodGroup's, the kubelet's "
         "node-pressure eviction by the pod's"),
        ("variables.containers.all(c, has(c.securityContext) && has(c.securityContext.capabilities)"
         " && has(c.securityContext.capabilities.drop)"
         " && c.securityContext.capabilities.drop.exists(d, d == 'ALL' || d == 'NET_RAW'))",
         "a team's containers drop NET_RAW (capabilities.drop ALL or NET_RAW): raw sockets forge ARP and IP "
         "packets to other teams' pods past their NetworkPolicies"),
        ("request.operation != 'UPDATE' || ("
         + " && ".join(_same(m, k) for m, k in FIXED_POD_METADATA) + ")",
         f"a team pod's PodGroup ({GROUP_ANNOTATION}), order ({TASK_PRIORITY}) and priority label "
         f"({PRIORITY_LABEL}) are fixed when KubeRay creates it"),
        (f"!has(object.spec.serviceAccountName) || object.spec.serviceAccountName != '{FIS_SERVICE_ACCOUNT}'",
         f"a team's pods may not run as the fault engine's account {FIS_SERVICE_ACCOUNT} (it deletes pods past "
         "the runs PodDisruptionBudget; only the pod AWS FIS creates uses it)"),
        (_hosts_unset(),
         "a team's containers may not set a probe or lifecycle host (Pod Security baseline 1.34+, "
         "pod-security-admission policy/check_hostProbesAndhostLifecycle.go: the kubelet connects from the "
         "node, past the target's NetworkPolicy)"),
        ("!has(object.spec.volumes) || object.spec.volumes.all(v, has(v.hostPath) || "
         + " || ".join(f"has(v.{t})" for t in VOLUME_TYPES) + ")",
         f"a team's pods may mount only the platform's volume types {_cel_list(VOLUME_TYPES)}"),
        ("!has(object.spec.tolerations) || object.spec.tolerations.all(t, has(t.key) && t.key != ''"
         f" && !(t.key in {_cel_list(UNTOUCHABLE_TAINTS)}))",
         f"a team's pods may not tolerate every taint (a toleration without a key) or the burn-in and "
         f"quarantine taints {_cel_list(UNTOUCHABLE_TAINTS)}: untested or failed nodes"),
        (_preemptable(),
         f"a team's pods stay preemptable ({PREEMPTABLE} absent or 'true'): Volcano never preempts or reclaims "
         "a pod marked otherwise"),
        (f"variables.containers.all(c, !has(c.resources) || ([c.resources].all(r, {_no_gpu_extras('r')})))",
         f"a team's containers may not request huge pages or EFA devices without GPUs ({GPU}): they would hold "
         "a GPU node's huge pages or EFA devices and leave no room for GPU pods"),
        (f"has(object.spec.nodeSelector) && '{POOL_LABEL}' in object.spec.nodeSelector"
         f" && (object.spec.nodeSelector['{POOL_LABEL}'] in variables.gpuPools"
         f" || (object.spec.nodeSelector['{POOL_LABEL}'] == variables.headPool && has(object.metadata.labels)"
         f" && '{RAY_NODE_TYPE_LABEL}' in object.metadata.labels"
         f" && object.metadata.labels['{RAY_NODE_TYPE_LABEL}'] == 'head'))",
         f"a team's pods run on the pools meant for them: the GPU pools, and a run's head on the head pool "
         f"(nodeSelector {POOL_LABEL}; never the system, memory or reward pools)"),
        *pod_limit_rules(),
    ]


PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _same(meta: str, key: str) -> str:
    """``key`` of ``metadata.<meta>`` is the same in ``object`` and ``oldObject`` (absent in both included)."""
    def of(o: str) -> str:
        return f"(has({o}.metadata.{meta}) && '{key}' in {o}.metadata.{meta} ? {o}.metadata.{meta}['{key}'] : '')"
    return f"{of('object')} == {of('oldObject')}"


def _hosts_unset() -> str:
    """No container sets ``httpGet.host`` or ``tcpSocket.host`` in a probe or a postStart/preStop hook
    (pod-security-admission v0.34.0 policy/check_hostProbesAndhostLifecycle.go:29-56, 139-165)."""
    def unset(handler: str) -> str:
        return " && ".join(f"(!has({handler}.{kind}) || !has({handler}.{kind}.host) || {handler}.{kind}.host == '')"
                           for kind in ("httpGet", "tcpSocket"))
    probes = [f"(!has(c.{p}) || ({unset('c.' + p)}))" for p in PROBES]
    hooks = [f"(!has(c.lifecycle) || !has(c.lifecycle.{h}) || ({unset('c.lifecycle.' + h)}))"
             for h in ("postStart", "preStop")]
    return f"variables.containers.all(c, {' && '.join(probes + hooks)})"


def _preemptable(meta: str = "object.metadata") -> str:
    """``PREEMPTABLE`` is absent or 'true' in the annotations and the labels of ``meta``."""
    return " && ".join(f"(!has({meta}.{m}) || !('{PREEMPTABLE}' in {meta}.{m}) || {meta}.{m}['{PREEMPTABLE}'] == 'true')"
                       for m in ("annotations", "labels"))


def _no_gpu_extras(r: str) -> str:
    """Requests and limits (maps at ``r``) name huge pages or EFA devices only beside GPUs."""
    def extras(m: str) -> str:
        return f"has({r}.{m}) && {r}.{m}.exists(k, k.startsWith('hugepages-') || k == '{EFA}')"

    def gpus(m: str) -> str:  # a GPU count of 0 is a valid quantity that asks for none: it does not count
        return f"(has({r}.{m}) && '{GPU}' in {r}.{m} && string({r}.{m}['{GPU}']) != '0')"
    return f"!({extras('requests')} || {extras('limits')}) || {gpus('limits')} || {gpus('requests')}"


def service_rules() -> list[tuple[str, str]]:
    return [
        ("!has(object.spec.type) || object.spec.type == 'ClusterIP'",
         "a team's Services are ClusterIP only (no LoadBalancer, NodePort or ExternalName: KubeRay posts jobs to "
         "the head Service's DNS name)"),
        ("!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
         "a team's Services may not claim externalIPs (CVE-2020-8554)"),
    ]


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
        (_templates(spec, f"({whole_node('t.spec')}) && ({head_sized('t.spec')}) && {per_container('t.spec')}"),
         "a team's Ray pod templates hold whole nodes of the GPU pools and heads no bigger than the platform's "
         "(variables.gpuShapes, variables.headShape), resources per container, as their pods must"),
        (_templates(spec, grace_bounded("t.spec")),
         "a team's Ray pod templates stop within the platform's checkpoint grace (terminationGracePeriodSeconds "
         "at most variables.graceSeconds, capacityBlockEnd.checkpointMinutes)"),
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
    ]


def _templates(spec: str, check: str) -> str:
    """``check`` (a CEL predicate of ``t``, a pod template) holds for every pod template of the Ray cluster
    spec at ``spec``: the head's and each worker group's (two lists of two schema types, not joined)."""
    return (f"[{spec}.headGroupSpec.template].all(t, {check})"
            f" && (!has({spec}.workerGroupSpecs) || {spec}.workerGroupSpecs.all(g, [g.template].all(t, {check})))")


def queue_rules(priority_classes: Iterable[str]) -> list[tuple[str, str]]:
    """The queue and priority labels KubeRay copies to the PodGroup (volcano_scheduler.go:253-258, v1.7.0)
    and to every pod (:263-265), on a RayJob and on the RayCluster made from it
    (rayjob_controller.go:997-1002)."""
    classes = _cel_list(sorted(priority_classes))
    return [
        (f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels"
         f" && object.metadata.labels['{QUEUE_LABEL}'] == request.namespace",
         f"a team's RayJob is in its own team's queue (label {QUEUE_LABEL} = its namespace): KubeRay copies the "
         "label to the PodGroup unchecked (volcano_scheduler.go:253-258, v1.7.0)"),
        (f"has(object.metadata.labels) && '{PRIORITY_LABEL}' in object.metadata.labels"
         f" && object.metadata.labels['{PRIORITY_LABEL}'] in {classes}",
         f"a team's RayJob has one of the platform's run priorities {classes} (label {PRIORITY_LABEL})"),
        (_preemptable(), f"a team's RayJob and Ray cluster stay preemptable ({PREEMPTABLE} absent or 'true'): "
                         "KubeRay copies their annotations to the PodGroup"),
    ]


def podgroup_rules(priority_classes: Iterable[str]) -> list[tuple[str, str]]:
    """A PodGroup (spec.queue, spec.priorityClassName: Volcano v1.15.1 config/crd/volcano/bases/
    scheduling.volcano.sh_podgroups.yaml) in the namespace's own queue at a platform priority: whoever
    makes it, KubeRay from the RayJob's labels or Volcano's controller from a pod's
    ``scheduling.volcano.sh/queue-name`` annotation (pkg/controllers/podgroup/pg_controller_handler.go:
    301-401)."""
    classes = _cel_list(sorted(priority_classes))
    return [
        ("has(object.spec.queue) && object.spec.queue == request.namespace",
         "a team's PodGroup is in its own team's queue (spec.queue = its namespace)"),
        (f"has(object.spec.priorityClassName) && object.spec.priorityClassName in {classes}",
         f"a team's PodGroup has one of the platform's run priorities {classes} (spec.priorityClassName)"),
        (_preemptable(), f"a team's PodGroup stays preemptable ({PREEMPTABLE} absent or 'true')"),
    ]


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
    pools = [{"name": "gpuPools", "expression": _cel_list(sorted(gpu_pools))},
             {"name": "headPool", "expression": f"'{head_pool}'"}]
    numbers = [*pools, *limit_variables(limits)] if limits else []
    labelled = f"{SPEC_UNCHANGED} && {META_UNCHANGED}"
    ray = [("ray.io", "v1", ["rayjobs"]), ("ray.io", "v1", ["rayclusters"])]
    return [*_policy(POD_POLICY, [("", "v1", ["pods", "pods/ephemeralcontainers"])], pod_rules(classes),
                     [containers, *numbers] if limits else [containers, *pools], unchanged=labelled,
                     match_conditions=[NOT_THE_FAULT_ENGINE]),
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
