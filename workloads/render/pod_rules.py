"""What a team pod may be, as (CEL, message) checks of the team pod policy (``render.admission``): no weaker
than Pod Security ``baseline`` (every control of its list, the 1.34 probe and lifecycle ``host`` included),
narrower where the platform can be (capabilities: IPC_LOCK only, NET_RAW dropped; the platform's volume
types only), scheduled by Volcano only, never created bound to a node, at its PodGroup's priority (one of
the platform's), always preemptable, on the pools meant for it within what it may hold of a node
(``render.pod_limits``), tolerating neither the burn-in nor the quarantine taint nor every taint, and with
huge pages or EFA devices only beside GPUs; its PodGroup, order and priority fixed at creation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from components.faults import FAULT_TARGET_LABEL, FIS_SERVICE_ACCOUNT
from components.gpu_node_setup import BURN_IN_TAINT, QUARANTINE_TAINT
from stackconfig.faults import fault_kinds
from stackconfig.stack import POOL_LABEL

from workloads.derive.resources import EFA, GPU
from workloads.render.cel import cel_list
from workloads.render.common import RAY_GROUP_LABEL, RAY_NODE_TYPE_LABEL
from workloads.render.pod_limits import pod_limit_rules
from workloads.render.queue_rules import PREEMPTABLE, preemptable
from workloads.render.runs import PRIORITY_LABEL, TASK_PRIORITY
from workloads.schema.teams import team_group

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
VOLUME_TYPES = ("emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected", "downwardAPI")
"""What a run's pods mount (scratch, the team's fileset claims, the scripts, KubeRay's token); no network
file system (nfs, iscsi, ...), no inline CSI volume or generic ephemeral claim (either reaches storage the
platform did not grant) and no ``image`` volume (pulls any image, Kubernetes 1.33+)."""
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
"""The PodGroup of a pod, set by KubeRay (volcano_scheduler.go populateAnnotations, v1.6.2:263-267) and read by
Volcano."""
FIXED_POD_METADATA = (("annotations", GROUP_ANNOTATION), ("annotations", TASK_PRIORITY), ("labels", PRIORITY_LABEL))
"""A pod's PodGroup, its order within it and its priority label: set when KubeRay creates it, never changed."""


@dataclass(frozen=True)
class PodAt:
    """Where the checks find a pod's parts, in CEL: the pod under admission (``POD``), or a pod template of a Ray
    cluster (``template_at``), whose pods KubeRay makes from it."""
    spec: str
    meta: str
    head: str
    """CEL: the pod is a Ray cluster's head."""
    containers: str = ""
    """A CEL list of every container, where the policy has one (``variables.containers``); else each list apart."""

    @property
    def template(self) -> bool:
        return not self.containers

    def all_containers(self, check: str) -> str:
        """``check`` (a CEL predicate of ``c``) holds for every container, init and ephemeral ones included (a
        template's lists are of three schema types, not joined)."""
        if self.containers:
            return f"{self.containers}.all(c, {check})"
        return " && ".join([f"{self.spec}.containers.all(c, {check})",
                            *(f"(!has({self.spec}.{k}) || {self.spec}.{k}.all(c, {check}))"
                              for k in ("initContainers", "ephemeralContainers"))])

    def of_meta(self, check: str) -> str:
        """``check`` of the metadata, which a template may lack."""
        return f"(!has({self.meta}) || ({check}))" if self.template else check


POD = PodAt("object.spec", "object.metadata", f"has(object.metadata.labels) && '{RAY_NODE_TYPE_LABEL}' in "
            f"object.metadata.labels && object.metadata.labels['{RAY_NODE_TYPE_LABEL}'] == 'head'", "variables.containers")


def template_at(head: bool) -> PodAt:
    """A pod template at ``t`` (a head's, else a worker group's)."""
    return PodAt("t.spec", "t.metadata", "true" if head else "false")


def _contexts(at: PodAt, check: str) -> str:
    """``check`` (a CEL predicate of ``s``, a securityContext) holds for the pod's and every container's."""
    return (f"(!has({at.spec}.securityContext) || [{at.spec}.securityContext].all(s, {check}))"
            f" && {at.all_containers(f'!has(c.securityContext) || [c.securityContext].all(s, {check})')}")


def pod_rules(priority_classes: Iterable[str], at: PodAt = POD) -> list[tuple[str, str]]:
    """(CEL expression, message) of every check on a team pod at ``at``, the Pod Security baseline list in its
    order; of a template, those a template carries to its pods (not the scheduler, the priority label or the
    PodGroup KubeRay sets, ``render.ray_rules`` holds its priority)."""
    classes = cel_list(sorted(priority_classes))
    s, meta, every = at.spec, at.meta, at.all_containers
    pod_only = [] if at.template else [
        (f"has({s}.schedulerName) && {s}.schedulerName == '{SCHEDULER}'",
         f"a team's pods are scheduled by Volcano (schedulerName {SCHEDULER}), in their team's queue"),
        (f"has({s}.priorityClassName) && {s}.priorityClassName in {classes}"
         f" && has({meta}.labels) && '{PRIORITY_LABEL}' in {meta}.labels"
         f" && {s}.priorityClassName == {meta}.labels['{PRIORITY_LABEL}']",
         f"a team's pods run at their PodGroup's priority, one of the platform's run priorities {classes}: "
         f"spec.priorityClassName equal to the label {PRIORITY_LABEL} KubeRay copies from the RayJob, as it "
         "does to the PodGroup (volcano_scheduler.go:253-265); Volcano orders by the PodGroup's, the kubelet's "
         "node-pressure eviction by the pod's")]
    fixed = [] if at.template else [
        ("request.operation != 'UPDATE' || ("
         + " && ".join(_same(m, k) for m, k in FIXED_POD_METADATA) + ")",
         f"a team pod's PodGroup ({GROUP_ANNOTATION}), order ({TASK_PRIORITY}) and priority label "
         f"({PRIORITY_LABEL}) are fixed when KubeRay creates it")]
    created = "" if at.template else "request.operation != 'CREATE' || "
    pool = f"{s}.nodeSelector['{POOL_LABEL}']"
    return [
        (_contexts(at, "!has(s.windowsOptions) || !has(s.windowsOptions.hostProcess) || !s.windowsOptions.hostProcess"),
         "a team's pods may not run Windows HostProcess containers"),
        (f"!(has({s}.hostNetwork) && {s}.hostNetwork) && !(has({s}.hostPID) && {s}.hostPID)"
         f" && !(has({s}.hostIPC) && {s}.hostIPC)",
         "a team's pods may not use the node's network, PID or IPC namespaces"),
        (every("!has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged"),
         "a team's containers may not be privileged"),
        (every("!has(c.securityContext) || !has(c.securityContext.capabilities)"
               " || !has(c.securityContext.capabilities.add) || c.securityContext.capabilities.add.all(a, a == 'IPC_LOCK')"),
         "a team's containers may add IPC_LOCK (RDMA memory registration) and no other capability"),
        (f"!has({s}.volumes) || {s}.volumes.all(v, !has(v.hostPath))",
         "a team's pods may not mount a hostPath (other teams' volumes live under the node's kubelet directory)"),
        (every("!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0)"),
         "a team's containers may not take a hostPort (with the VPC CNI's portmap it captures that port of the "
         "node's addresses, the Pod Identity agent's included)"),
        (_contexts(at, "!has(s.appArmorProfile) || s.appArmorProfile.type in ['RuntimeDefault', 'Localhost']")
         + " && " + at.of_meta(
             f"(!has({meta}.annotations) || {meta}.annotations.all(k, "
             f"!k.startsWith('{APPARMOR_ANNOTATION}') || {meta}.annotations[k] == 'runtime/default'"
             f" || {meta}.annotations[k].startsWith('localhost/')))"),
         "a team's pods may not run AppArmor Unconfined"),
        (_contexts(at, "!has(s.seLinuxOptions) || ((!has(s.seLinuxOptions.type) || s.seLinuxOptions.type == ''"
                       f" || s.seLinuxOptions.type in {cel_list(SELINUX_TYPES)})"
                       " && (!has(s.seLinuxOptions.user) || s.seLinuxOptions.user == '')"
                       " && (!has(s.seLinuxOptions.role) || s.seLinuxOptions.role == ''))"),
         "a team's pods may not set an SELinux user or role, or a type other than the container types"),
        (every("!has(c.securityContext) || !has(c.securityContext.procMount) || c.securityContext.procMount == 'Default'"),
         "a team's containers may not mount /proc Unmasked"),
        (_contexts(at, "!has(s.seccompProfile) || s.seccompProfile.type != 'Unconfined'"),
         "a team's pods may not run seccomp Unconfined"),
        (f"!has({s}.securityContext) || !has({s}.securityContext.sysctls)"
         f" || {s}.securityContext.sysctls.all(x, x.name in {cel_list(SAFE_SYSCTLS)})",
         "a team's pods may set only the namespaced sysctls Pod Security baseline allows"),
        (f"{created}!has({s}.nodeName) || {s}.nodeName == ''",
         "a team's pods may not be created bound to a node (spec.nodeName skips the scheduler, its queue and quota)"),
        (every("!has(c.env) || c.env.all(e, e.name != 'RAY_AUTH_MODE' || (has(e.value) && e.value == 'token'))"),
         "a team's containers may not turn Ray token authentication off (KubeRay keeps a RAY_AUTH_MODE the "
         "template sets, common/pod.go:387-393, v1.7.0)"),
        *pod_only,
        (every("has(c.securityContext) && has(c.securityContext.capabilities)"
               " && has(c.securityContext.capabilities.drop)"
               " && c.securityContext.capabilities.drop.exists(d, d == 'ALL' || d == 'NET_RAW')"),
         "a team's containers drop NET_RAW (capabilities.drop ALL or NET_RAW): raw sockets forge ARP and IP "
         "packets to other teams' pods past their NetworkPolicies"),
        *fixed,
        (f"!has({s}.serviceAccountName) || {s}.serviceAccountName != '{FIS_SERVICE_ACCOUNT}'",
         f"a team's pods may not run as the fault engine's account {FIS_SERVICE_ACCOUNT} (it deletes pods past "
         "the runs PodDisruptionBudget; only the pod AWS FIS creates uses it)"),
        (_hosts_unset(at),
         "a team's containers may not set a probe or lifecycle host (Pod Security baseline 1.34+, "
         "pod-security-admission policy/check_hostProbesAndhostLifecycle.go: the kubelet connects from the "
         "node, past the target's NetworkPolicy)"),
        (f"!has({s}.volumes) || {s}.volumes.all(v, has(v.hostPath) || "
         + " || ".join(f"has(v.{t})" for t in VOLUME_TYPES) + ")",
         f"a team's pods may mount only the platform's volume types {cel_list(VOLUME_TYPES)}"),
        (f"!has({s}.tolerations) || {s}.tolerations.all(t, has(t.key) && t.key != ''"
         f" && !(t.key in {cel_list(UNTOUCHABLE_TAINTS)}))",
         f"a team's pods may not tolerate every taint (a toleration without a key) or the burn-in and "
         f"quarantine taints {cel_list(UNTOUCHABLE_TAINTS)}: untested or failed nodes"),
        (at.of_meta(preemptable(meta)),
         f"a team's pods stay preemptable ({PREEMPTABLE} absent or 'true'): Volcano never preempts or reclaims "
         "a pod marked otherwise"),
        (every(f"!has(c.resources) || ([c.resources].all(r, {_no_gpu_extras('r')}))"),
         f"a team's containers may not request huge pages or EFA devices without GPUs ({GPU}): they would hold "
         "a GPU node's huge pages or EFA devices and leave no room for GPU pods"),
        (f"has({s}.nodeSelector) && '{POOL_LABEL}' in {s}.nodeSelector"
         f" && ({pool} in variables.gpuPools || ({pool} == variables.headPool && {at.head}))",
         f"a team's pods run on the pools meant for them: the GPU pools, and a run's head on the head pool "
         f"(nodeSelector {POOL_LABEL}; never the system, memory or reward pools)"),
        *pod_limit_rules(s),
    ]


PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
MEMBER = f"request.userInfo.groups.exists(g, g.startsWith('{team_group('')}'))"
"""CEL: the request is a team member's (``workloads.schema.teams.team_group``: its EKS access entry's group)."""
LABEL_VARIABLES = [{"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
                   {"name": "oldLabels", "expression": "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"}]
"""The pod policy's variables ``member_pod_update`` reads (``oldLabels``: on an UPDATE only)."""


def member_pod_update() -> tuple[str, str]:
    """(CEL, message): a team member's update of a pod adds, changes or removes ``FAULT_TARGET_LABEL`` and
    nothing else, its value the pod's own group (``ray.io/group``) and a pod-fault group: what ``bench.faults``
    does to aim a fault (``render.faults.member_rules`` grants the patch). Spec, every other label, the
    annotations, finalizers and owner references stay as they were, so the member cannot move a pod into
    another run, queue or priority, hold its deletion, or orphan it. Held on every update, an unchanged one
    included; other identities' updates (KubeRay, the garbage collector, Job tracking) are not judged by it.
    Reads ``LABEL_VARIABLES`` (cel-python, which the tests run, fails to report an error under a ``{}`` literal)."""
    key, groups = FAULT_TARGET_LABEL, cel_list(sorted({k.group for k in fault_kinds().values() if k.per_team}))
    new, old = "variables.labels", "variables.oldLabels"

    def of(o: str, field: str) -> str:
        return f"(has({o}.metadata.{field}) ? {o}.metadata.{field} : [])"
    same = [f"{old}.all(k, k == '{key}' || (k in {new} && {new}[k] == {old}[k]))",
            f"{new}.all(k, k == '{key}' || (k in {old} && {old}[k] == {new}[k]))",
            f"(!('{key}' in {new}) || ({new}['{key}'] in {groups} && '{RAY_GROUP_LABEL}' in {new}"
            f" && {new}['{RAY_GROUP_LABEL}'] == {new}['{key}']))",
            "(has(object.metadata.annotations) == has(oldObject.metadata.annotations)"
            " && (!has(object.metadata.annotations) || object.metadata.annotations == oldObject.metadata.annotations))",
            *(f"{of('object', f)} == {of('oldObject', f)}" for f in ("finalizers", "ownerReferences")),
            "object.spec == oldObject.spec"]
    return (f"request.operation != 'UPDATE' || !{MEMBER} || ({' && '.join(same)})",
            f"a team member may change only the label {key} of a team pod, to the pod's own group "
            f"({RAY_GROUP_LABEL}) among the pod-fault groups {groups}, or remove it (bench faults, "
            "components.faults.fault_lease); every other label, annotation, finalizer, owner and the spec stay")


def _same(meta: str, key: str) -> str:
    """``key`` of ``metadata.<meta>`` is the same in ``object`` and ``oldObject`` (absent in both included)."""
    def of(o: str) -> str:
        return f"(has({o}.metadata.{meta}) && '{key}' in {o}.metadata.{meta} ? {o}.metadata.{meta}['{key}'] : '')"
    return f"{of('object')} == {of('oldObject')}"


def _hosts_unset(at: PodAt) -> str:
    """No container sets ``httpGet.host`` or ``tcpSocket.host`` in a probe or a postStart/preStop hook
    (pod-security-admission v0.34.0 policy/check_hostProbesAndhostLifecycle.go:29-56, 139-165)."""
    def unset(handler: str) -> str:
        return " && ".join(f"(!has({handler}.{kind}) || !has({handler}.{kind}.host) || {handler}.{kind}.host == '')"
                           for kind in ("httpGet", "tcpSocket"))
    probes = [f"(!has(c.{p}) || ({unset('c.' + p)}))" for p in PROBES]
    hooks = [f"(!has(c.lifecycle) || !has(c.lifecycle.{h}) || ({unset('c.lifecycle.' + h)}))"
             for h in ("postStart", "preStop")]
    return at.all_containers(" && ".join(probes + hooks))


def _no_gpu_extras(r: str) -> str:
    """Requests and limits (maps at ``r``) name huge pages or EFA devices only beside GPUs."""
    def extras(m: str) -> str:
        return f"has({r}.{m}) && {r}.{m}.exists(k, k.startsWith('hugepages-') || k == '{EFA}')"

    def gpus(m: str) -> str:  # a GPU count of 0 is a valid quantity that asks for none: it does not count
        return f"(has({r}.{m}) && '{GPU}' in {r}.{m} && string({r}.{m}['{GPU}']) != '0')"
    return f"!({extras('requests')} || {extras('limits')}) || {gpus('limits')} || {gpus('requests')}"
