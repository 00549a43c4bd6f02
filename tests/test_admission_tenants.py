"""Hostile-tenant attacks on the scheduler side, the GPU runtime and placement (issue 26; issue 23 item 11),
each played against the team namespaces' admission policies with the CEL interpreter of
``test_admission``: a run's own objects pass, each attack is refused with the message of its rule."""

from __future__ import annotations

import copy

import pytest
from test_admission import cfg, operator_cluster, policies, rayjob, refused, run_pods  # noqa: F401 (fixtures)

from workloads.render.admission import PODGROUP_POLICY, POD_POLICY, RAYCLUSTER_POLICY, RAYJOB_POLICY


def _pod(rayjob: dict, group: int) -> dict:
    """A run's pod as KubeRay makes it: 0 the head, 1 a trainer, 2 a rollout pod."""
    return run_pods(rayjob)[group]


def _changed(pod: dict, edit) -> dict:
    p = copy.deepcopy(pod)
    edit(p["spec"], p["spec"]["containers"][0], p)
    return p


def _only(messages: list[str], part: str) -> None:
    """Refused, first by the rule ``part`` names: the API server answers with the first refusal."""
    assert messages and part in messages[0], messages


# --- 1. queue hopping: autoscaler RBAC, relabelled RayClusters, PodGroups ----------------------------

CLUSTER_FIELD_ATTACKS = [
    ("enableInTreeAutoscaling", True), ("autoscalerOptions", {"upscalingMode": "Aggressive"}),
    ("gcsFaultToleranceOptions", {"redisAddress": "redis:6379"}), ("networkPolicy", {"mode": "DenyAll"}),
    ("headServiceAnnotations", {"service.beta.kubernetes.io/aws-load-balancer-type": "external"}),
    ("managedBy", "kueue.x-k8s.io/multikueue"), ("tlsOptions", {"enabled": True}),
    ("historyServerOptions", {"collectorOptions": {}}),
    ("headGroupSpec.enableIngress", True), ("headGroupSpec.ingressOptions", {"ingressClassName": "alb"}),
]
"""(path in a RayJob's rayClusterSpec, value): each refused as "creates no other object"."""


def with_cluster_field(rayjob: dict, path: str, value) -> dict:
    bad = copy.deepcopy(rayjob)
    node = bad["spec"]["rayClusterSpec"]
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return bad


@pytest.mark.parametrize("path, value", CLUSTER_FIELD_ATTACKS)
def test_a_team_ray_cluster_cannot_turn_on_fields_that_make_the_operator_create_objects(policies, rayjob, path, value):
    bad = with_cluster_field(rayjob, path, value)
    _only(refused(policies[RAYJOB_POLICY], bad), "creates no other object")
    _only(refused(policies[RAYCLUSTER_POLICY], {"metadata": operator_cluster(rayjob)["metadata"],
                                                "spec": bad["spec"]["rayClusterSpec"]}), "creates no other object")


def test_a_rayjob_cannot_hand_its_cluster_to_another_controller(policies, rayjob):
    bad = copy.deepcopy(rayjob)
    bad["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"  # rayjob_controller.go:107
    _only(refused(policies[RAYJOB_POLICY], bad), "creates no other object")


RELABEL_ATTACKS = [
    ("volcano.sh/queue-name", "team-beta", "own team's queue"),
    ("ray.io/priority-class-name", "system-node-critical", "run priorities"),
]
"""(label of the operator's RayCluster, new value, what the first refusal says)."""


@pytest.mark.parametrize("label, value, part", RELABEL_ATTACKS)
def test_relabelling_a_ray_cluster_into_another_queue_or_priority_is_refused_on_update(policies, rayjob, label,
                                                                                       value, part):
    """With the autoscaler's Role (rbac.go:52-56) a head could patch its RayCluster's labels; KubeRay then
    makes the RayCluster's PodGroup from them (volcano_scheduler.go:253-258)."""
    cluster = operator_cluster(rayjob)
    assert refused(policies[RAYCLUSTER_POLICY], cluster) == []
    moved = copy.deepcopy(cluster)
    moved["metadata"]["labels"][label] = value
    _only(refused(policies[RAYCLUSTER_POLICY], moved, "UPDATE", cluster), part)
    _only(refused(policies[RAYCLUSTER_POLICY], moved), part)


def podgroup(rayjob: dict) -> dict:
    """The PodGroup KubeRay makes for a RayJob (volcano_scheduler.go:209-260, v1.7.0): its annotations, queue
    and priority from the RayJob."""
    labels = rayjob["metadata"]["labels"]
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": f"ray-{rayjob['metadata']['name']}-pg",
                         "annotations": dict(rayjob["metadata"]["annotations"])},
            "spec": {"minMember": 5, "queue": labels["volcano.sh/queue-name"],
                     "priorityClassName": labels["ray.io/priority-class-name"]}}


PODGROUP_ATTACKS = [
    ({"queue": "team-beta"}, "own team's queue"),
    ({"queue": "default"}, "own team's queue"),
    ({"priorityClassName": "system-node-critical"}, "run priorities"),
    ({"priorityClassName": None}, "run priorities"),
]
"""(change to the run's PodGroup's spec (None: removed), what the refusal says)."""


def changed_podgroup(pg: dict, change: dict) -> dict:
    bad = copy.deepcopy(pg)
    for k, v in change.items():
        if v is None:
            bad["spec"].pop(k)
        else:
            bad["spec"][k] = v
    return bad


@pytest.mark.parametrize("change, part", PODGROUP_ATTACKS)
def test_a_podgroup_is_in_its_namespaces_queue_at_a_platform_priority(policies, rayjob, change, part):
    pg = podgroup(rayjob)
    assert refused(policies[PODGROUP_POLICY], pg) == []
    bad = changed_podgroup(pg, change)
    _only(refused(policies[PODGROUP_POLICY], bad), part)
    _only(refused(policies[PODGROUP_POLICY], bad, "UPDATE", pg), part)


# --- 2. GPU nodes held without GPUs ----------------------------------------------------------------

@pytest.mark.parametrize("where", ["annotations", "labels"])
def test_not_preemptable_is_refused_on_pods_rayjobs_and_podgroups(policies, rayjob, where):
    """Volcano skips a pod marked ``volcano.sh/preemptable: "false"`` (annotation, else label; an unparsable
    value reads as false) in preempt and reclaim (v1.15.1 pkg/scheduler/api/pod_info.go:125-150,
    actions/preempt/preempt.go:207, actions/reclaim/reclaim.go:189); a PodGroup's likewise (job_info.go:524-550)."""
    def mark(obj: dict, value: str) -> dict:
        out = copy.deepcopy(obj)
        out["metadata"].setdefault(where, {})["volcano.sh/preemptable"] = value
        return out
    trainer = _pod(rayjob, 1)
    for value in ("false", "False", "no"):
        _only(refused(policies[POD_POLICY], mark(trainer, value)), "preemptable")
        _only(refused(policies[PODGROUP_POLICY], mark(podgroup(rayjob), value)), "preemptable")
        assert any("preemptable" in m for m in refused(policies[RAYJOB_POLICY], mark(rayjob, value)))
    assert refused(policies[POD_POLICY], mark(trainer, "true")) == []


NOT_PREEMPTABLE = [(where, value) for where in ("annotations", "labels") for value in ("false", "False", "no")]
EXTRAS_WITHOUT_GPUS = [("hugepages-2Mi", "5120Mi"), ("hugepages-1Gi", "1Gi"), ("vpc.amazonaws.com/efa", "16")]


def not_preemptable(obj: dict, where: str, value: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault(where, {})["volcano.sh/preemptable"] = value
    return out


def extras_without_gpus(pod: dict, resource: str, amount: str) -> dict:
    def cpu_only(s, c, p):
        for k in ("requests", "limits"):
            c["resources"][k].pop("nvidia.com/gpu")
            c["resources"][k][resource] = amount
    return _changed(pod, cpu_only)


@pytest.mark.parametrize("resource, amount", EXTRAS_WITHOUT_GPUS)
def test_huge_pages_and_efa_without_gpus_are_refused(policies, rayjob, resource, amount):
    _only(refused(policies[POD_POLICY], extras_without_gpus(_pod(rayjob, 1), resource, amount)), "without GPUs")
    for init in _pod(rayjob, 1)["spec"].get("initContainers", []):
        assert "nvidia.com/gpu" in init["resources"]["limits"]  # the run's own GPU init containers pass


# --- 4. placement -------------------------------------------------------------------------------------

GPU_POD_ELSEWHERE = ["system", "memory", "reward", "cpu"]
HEAD_ELSEWHERE = ["system", "memory", "reward"]


@pytest.mark.parametrize("pool", GPU_POD_ELSEWHERE)
def test_a_team_gpu_pod_cannot_be_placed_outside_the_gpu_pools(policies, rayjob, pool):
    moved = _changed(_pod(rayjob, 1), lambda s, c, p: s["nodeSelector"].update({"rl.platform/pool": pool}))
    _only(refused(policies[POD_POLICY], moved), "pools meant for")


@pytest.mark.parametrize("pool", HEAD_ELSEWHERE)
def test_a_team_head_cannot_be_placed_on_the_platform_pools(policies, rayjob, pool):
    moved = _changed(_pod(rayjob, 0), lambda s, c, p: s["nodeSelector"].update({"rl.platform/pool": pool}))
    _only(refused(policies[POD_POLICY], moved), "pools meant for")


def test_a_team_pod_without_a_pool_selector_is_refused(policies, rayjob):
    _only(refused(policies[POD_POLICY], _changed(_pod(rayjob, 1), lambda s, c, p: s.pop("nodeSelector"))),
          "pools meant for")


# --- 6. Pod Security baseline 1.34: probe and lifecycle hosts -------------------------------------------

PROBE_HOSTS = [
    ("livenessProbe", {"httpGet": {"host": "10.0.12.7", "port": 8265, "path": "/"}}),
    ("readinessProbe", {"tcpSocket": {"host": "ray-head.team-beta.svc", "port": 6379}}),
    ("startupProbe", {"httpGet": {"host": "169.254.170.23", "port": 80}}),
    ("lifecycle", {"postStart": {"httpGet": {"host": "10.0.12.7", "port": 8265}}}),
    ("lifecycle", {"preStop": {"tcpSocket": {"host": "10.0.12.7", "port": 6379}}}),
]


@pytest.mark.parametrize("field, handler", PROBE_HOSTS)
def test_probe_and_lifecycle_hosts_are_refused(policies, rayjob, field, handler):
    """Pod Security baseline since 1.34 (kubernetes/pod-security-admission v0.34.0
    policy/check_hostProbesAndhostLifecycle.go:29-56, 139-165): the kubelet sends these from the node,
    past the target's NetworkPolicy."""
    _only(refused(policies[POD_POLICY], _changed(_pod(rayjob, 1), lambda s, c, p: c.update({field: handler}))),
          "probe or lifecycle host")
    init = _changed(_pod(rayjob, 1), lambda s, c, p: s["initContainers"][0].update({field: handler}))
    _only(refused(policies[POD_POLICY], init), "probe or lifecycle host")


# --- 7. volume types ------------------------------------------------------------------------------------

VOLUMES = [
    {"nfs": {"server": "10.0.0.5", "path": "/"}},
    {"image": {"reference": "registry.example/any:latest"}},
    {"ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                                                    "resources": {"requests": {"storage": "1Gi"}}}}}},
    {"csi": {"driver": "fsx.csi.aws.com", "volumeAttributes": {"dnsname": "fs-0.fsx", "mountname": "m"}}},
    {"iscsi": {"targetPortal": "10.0.0.5:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0}},
]


@pytest.mark.parametrize("volume", VOLUMES)
def test_only_the_platforms_volume_types_are_allowed(policies, rayjob, volume):
    bad = _changed(_pod(rayjob, 1), lambda s, c, p: s["volumes"].append({"name": "v", **volume}))
    _only(refused(policies[POD_POLICY], bad), "volume types")


# --- issue 23 item 11: tolerations ----------------------------------------------------------------------

TOLERATIONS = [
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoSchedule"},
    {"key": "", "operator": "Exists"},
    {"key": "rl.platform/burn-in", "operator": "Exists"},
    {"key": "rl.platform/burn-in", "operator": "Equal", "value": "pending", "effect": "NoSchedule"},
    {"key": "rl.platform/quarantine", "operator": "Exists", "effect": "NoSchedule"},
]


@pytest.mark.parametrize("toleration", TOLERATIONS)
def test_a_team_pod_cannot_tolerate_untested_or_failed_nodes(policies, rayjob, toleration):
    bad = _changed(_pod(rayjob, 1), lambda s, c, p: s["tolerations"].append(toleration))
    _only(refused(policies[POD_POLICY], bad), "tolerate")


def test_a_run_pods_own_tolerations_pass(policies, rayjob):
    for pod in run_pods(rayjob):
        assert refused(policies[POD_POLICY], pod) == []



def test_the_pod_policy_judges_every_team_request_but_not_the_fis_pod_delete_pod(policies):
    """AWS FIS creates its own pod in the target namespace for aws:eks:pod-delete: the team pod policy
    (which would refuse its pool-less, platform-less spec) does not match the FIS access entry's group,
    and matches every other requester, a team member included."""
    import celpy
    from celpy import json_to_cel
    from components.faults import FIS_GROUP
    env = celpy.Environment()
    conditions = policies[POD_POLICY]["spec"]["matchConditions"]

    def matches(groups: list[str]) -> bool:
        act = {"request": json_to_cel({"userInfo": {"username": "u", "groups": groups}})}
        return all(env.program(env.compile(c["expression"])).evaluate(act) for c in conditions)
    assert not matches([FIS_GROUP, "system:authenticated"])
    assert matches(["team-alpha-members", "system:authenticated"])
    assert matches(["system:serviceaccounts:team-alpha", "system:authenticated"])
    other = [p for name, p in policies.items() if name != POD_POLICY]
    assert all("matchConditions" not in p["spec"] for p in other)  # RayJobs, clusters, podgroups: judged always


def zero_gpus(pod: dict, zero) -> dict:
    return _changed(pod, lambda spec, c, p: c.setdefault("resources", {}).update(
        limits={"nvidia.com/gpu": zero, "vpc.amazonaws.com/efa": 32, "hugepages-2Mi": "2Gi", "cpu": "2", "memory": "4Gi"},
        requests={"nvidia.com/gpu": zero, "vpc.amazonaws.com/efa": 32, "hugepages-2Mi": "2Gi", "cpu": "2",
                  "memory": "4Gi"}))


@pytest.mark.parametrize("zero", ["0", 0])
def test_a_gpu_count_of_zero_does_not_license_efa_or_huge_pages(policies, rayjob, zero):
    """A container with nvidia.com/gpu: 0 asks for no GPU (an extended resource of 0 requests nothing)
    yet would hold the node's EFA devices and huge pages."""
    _only(refused(policies[POD_POLICY], zero_gpus(_pod(rayjob, 0), zero)), "without GPUs")


def test_a_team_pod_cannot_run_as_the_fault_engines_account(policies, rayjob):
    from components.faults import FIS_SERVICE_ACCOUNT
    pod = _changed(_pod(rayjob, 0), lambda spec, c, p: spec.update(serviceAccountName=FIS_SERVICE_ACCOUNT))
    _only(refused(policies[POD_POLICY], pod), "fault engine's account")



def tenant_pod_attacks(pods: list[dict]) -> dict[str, tuple[dict, str]]:
    """Every pod attack of this module's tables, as one change to a run's pod (``pods``: head, trainer,
    rollout): name -> (pod, what the first refusal says); what the control-plane tier plays."""
    from components.faults import FIS_SERVICE_ACCOUNT
    head, trainer = pods[0], pods[1]

    def pool(pod: dict, name: str) -> dict:
        return _changed(pod, lambda s, c, p: s["nodeSelector"].update({"rl.platform/pool": name}))
    out = {f"not preemptable {w}={v}": (not_preemptable(trainer, w, v), "preemptable") for w, v in NOT_PREEMPTABLE}
    out |= {f"{r} without GPUs": (extras_without_gpus(trainer, r, a), "without GPUs") for r, a in EXTRAS_WITHOUT_GPUS}
    out |= {f"GPU pod on {p}": (pool(trainer, p), "pools meant for") for p in GPU_POD_ELSEWHERE}
    out |= {f"head on {p}": (pool(head, p), "pools meant for") for p in HEAD_ELSEWHERE}
    out["no pool selector"] = (_changed(trainer, lambda s, c, p: s.pop("nodeSelector")), "pools meant for")
    out |= {f"{f} host {i}": (_changed(trainer, lambda s, c, p, f=f, h=h: c.update({f: h})), "probe or lifecycle host")
            for i, (f, h) in enumerate(PROBE_HOSTS)}
    out |= {f"volume {next(iter(v))}": (_changed(trainer, lambda s, c, p, v=v: s["volumes"].append({"name": "v", **v})),
                                        "volume types") for v in VOLUMES}
    out |= {f"toleration {i}": (_changed(trainer, lambda s, c, p, t=t: s["tolerations"].append(t)), "tolerate")
            for i, t in enumerate(TOLERATIONS)}
    out["gpu 0 with EFA"] = (zero_gpus(head, "0"), "without GPUs")
    out["fault engine's account"] = (_changed(head, lambda s, c, p: s.update(serviceAccountName=FIS_SERVICE_ACCOUNT)),
                                     "fault engine's account")
    return out


def test_the_tenant_pod_table_is_what_the_tests_above_refuse(policies, rayjob):
    """The table the control-plane tier plays: each refused first for the reason it names."""
    attacks = tenant_pod_attacks(run_pods(rayjob))
    misses = [f"{n}: {refused(policies[POD_POLICY], pod) or 'admitted'}" for n, (pod, part) in attacks.items()
              if part not in (refused(policies[POD_POLICY], pod) or [""])[0]]
    assert len(attacks) == 35 and misses == []
