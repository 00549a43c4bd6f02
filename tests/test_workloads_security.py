"""Pod security of everything the program registers, read from the recorded mock graph of every
stack (plus p5en-prod with the RayJob and a Capacity Block end, so the CronJob is covered): no privileged container, no host namespace, no hostPath, no privilege
escalation, every capability dropped (GPU pods add back IPC_LOCK only), RuntimeDefault seccomp,
resources on every container, read-only roots where no Miles code runs; the only Helm releases
allowed host access are the device plugins and the FSx CSI node plugin, for the reasons stated
below. Then the NetworkPolicies, evaluated with Kubernetes' semantics: what the run needs is
allowed, the rest is denied."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pytest
from conftest import STACKS, graph_of, load
from test_workloads import HELM, RAYJOB, merge, variant, variant_graph

from analysis import mocks
from stackconfig.files import raw_stack
from workloads.derive.model import derive
from workloads.derive import layout as L
from workloads import render as M
from workloads.derive.resources import EFA, GPU
from workloads.render.team_quotas import QUOTA_CAPABILITIES

END = "2026-12-14T11:30:00Z"


def with_end_time(stack: str = "p5en-prod", end: str = END, pools: tuple[str, ...] = ("train",),
                  extra: dict | None = None) -> dict:
    """A stack override that gives ``pools`` a Capacity Block end time."""
    raw = raw_stack(stack)
    out = [merge(p, {"capacity": {"endTime": end}}) if p["name"] in pools else p for p in raw["pools"]]
    return merge({"pools": out}, extra or {})


EVERYTHING = with_end_time(extra=RAYJOB)
"""p5en-prod with every optional object: the RayJob and the Capacity Block CronJob."""


GRAPHS = [*STACKS, "p5en-prod+rayJob+endTime"]


def with_a_run(team: str) -> dict:
    """A declared run of ``team`` on a runs-mode stack."""
    return {"workloads": {"runs": [{"name": "probe", "team": team, "priority": "low",
                                    "nodes": {"train": 2, "rollout": 2}}]}}


def graph_for(name: str) -> mocks.Graph:
    """Every stack's graph; a runs-mode stack with a declared run of its last team, so its run's pods are
    checked too."""
    if name == GRAPHS[-1]:
        return variant_graph("p5en-prod", EVERYTHING)
    cfg = load(name)
    return variant_graph(name, with_a_run(cfg.workloads.teams[-1].name)) if cfg.workloads.submit.value == "runs" \
        else graph_of(name)


# --- pod specs of every registered object ------------------------------------------------------------

PODLESS = {"Namespace", "ServiceAccount", "ConfigMap", "PersistentVolume", "PersistentVolumeClaim", "Service",
           "PodDisruptionBudget", "NetworkPolicy", "Queue", "PriorityClass", "ResourceQuota", "LimitRange",
           "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
           "ValidatingAdmissionPolicyBinding"}


def pod_specs(obj: dict) -> list[tuple[str, dict]]:
    """(where, pod spec) of every pod an object creates; fails on a kind it does not know."""
    kind, spec, name = obj["kind"], obj.get("spec") or {}, obj["metadata"]["name"]
    if kind in PODLESS:
        return []
    if kind in ("Deployment", "Job", "DaemonSet"):
        return [(f"{kind}/{name}", spec["template"]["spec"])]
    if kind == "CronJob":
        return [(f"{kind}/{name}", spec["jobTemplate"]["spec"]["template"]["spec"])]
    if kind == "RayCluster":
        return [(f"{kind}/{name}/head", spec["headGroupSpec"]["template"]["spec"])] + [
            (f"{kind}/{name}/{g['groupName']}", g["template"]["spec"]) for g in spec["workerGroupSpecs"]]
    if kind == "RayJob":
        return pod_specs({"kind": "RayCluster", "metadata": {"name": name}, "spec": spec["rayClusterSpec"]}) \
            if "rayClusterSpec" in spec else []
    raise AssertionError(f"{kind} {name}: unknown kind; say whether it creates pods")


def registered_objects(graph: mocks.Graph) -> list[dict]:
    return [dict(r.inputs) for r in graph.resources
            if r.custom and r.type.startswith("kubernetes:") and r.type != HELM and r.inputs.get("kind")]


def is_gpu_pod(pod: dict) -> bool:
    return any(GPU in (c.get("resources") or {}).get("limits", {}) or EFA in (c.get("resources") or {}).get("limits", {})
               for c in pod["containers"])


def host_access(where: str, pod: dict) -> list[str]:
    """Every way ``pod`` reaches into its node or beyond its container's defaults."""
    problems = [f"{where}: {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    problems += [f"{where}: hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
    if (pod.get("securityContext") or {}).get("seccompProfile") != {"type": "RuntimeDefault"}:
        problems.append(f"{where}: pod seccompProfile is not RuntimeDefault")
    allowed_adds = {"IPC_LOCK"} if is_gpu_pod(pod) else set()
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext") or {}
        at = f"{where}/{c['name']}"
        if sc.get("privileged"):
            problems.append(f"{at}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{at}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if caps.get("drop") != ["ALL"]:
            problems.append(f"{at}: capabilities not all dropped ({caps.get('drop')})")
        quota = next((cap for kind, cap in QUOTA_CAPABILITIES.items() if c["name"].startswith(f"{kind}-")), None) \
            if where == "Job/team-directories" else None
        if not set(caps.get("add", [])) <= (allowed_adds | {quota} if quota else allowed_adds):
            problems.append(f"{at}: adds {caps.get('add')}")
        if sc.get("procMount", "Default") != "Default":
            problems.append(f"{at}: procMount {sc['procMount']}")
        problems += [f"{at}: hostPort {p['hostPort']}" for p in c.get("ports", []) if p.get("hostPort")]
    return problems


@pytest.mark.parametrize("name", GRAPHS)
def test_no_registered_pod_is_privileged_or_reaches_the_host(name):
    pods = [wp for obj in registered_objects(graph_for(name)) for wp in pod_specs(obj)]
    assert len(pods) >= 5
    problems = [p for where, pod in pods for p in host_access(where, pod)]
    assert problems == [], "\n".join(problems)
    for where, pod in pods:  # IPC_LOCK exactly on the trainer and rollout pods (RDMA memory registration)
        if where == "Job/team-directories":  # one capability per quota container (render.team_quotas)
            continue
        adds = {a for c in pod["containers"]
                for a in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add", [])}
        gpu_worker = where.endswith(("/trainer", "/rollout")) or (  # a GPU node's burn-in runs as its Ray pod
            where.startswith("DaemonSet/burn-in-") and EFA in pod["containers"][0]["resources"]["limits"])
        assert adds == ({"IPC_LOCK"} if gpu_worker else set()), (where, adds)


def test_the_check_catches_each_kind_of_host_access():
    cfg = load("p5en-prod")
    clean = M.ray_pod_template(derive(cfg), L.worker(cfg, "trainer"))["spec"]
    assert host_access("trainer", clean) == []
    cases = [
        lambda s: s.update(hostNetwork=True),
        lambda s: s.update(hostPID=True),
        lambda s: s.update(hostIPC=True),
        lambda s: s["volumes"].append({"name": "dev", "hostPath": {"path": "/dev"}}),
        lambda s: s.pop("securityContext"),
        lambda s: s["containers"][0]["securityContext"].update(privileged=True),
        lambda s: s["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
        lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["IPC_LOCK", "SYS_ADMIN"]),
        lambda s: s["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
    ]
    import copy
    for mutate in cases:
        spec = copy.deepcopy(clean)
        mutate(spec)
        assert host_access("trainer", spec), mutate
    cpu = copy.deepcopy(M.stage_template(derive(cfg))["spec"])
    cpu["containers"][0]["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    assert host_access("stage", cpu)  # IPC_LOCK only where GPUs/EFA are requested


# --- Helm releases: the only ones allowed host access ------------------------------------------------

HOST_ACCESS_RELEASES = {
    "aws-efa-k8s-device-plugin":
        "aws/eks-charts stable/aws-efa-k8s-device-plugin v0.5.30: privileged, hostNetwork, hostPath "
        "/var/lib/kubelet/device-plugins (registers vpc.amazonaws.com/efa with the kubelet) and /dev/infiniband "
        "(discovers the EFA devices it advertises and hands them to pods)",
    "nvidia-device-plugin":
        "NVIDIA/k8s-device-plugin chart 0.20.0: hostPath /var/lib/kubelet/device-plugins (registers "
        "nvidia.com/gpu), /var/run/cdi and the driver root (CDI specs of the GPUs and gdrdrv); with our values it "
        "is not privileged (allowPrivilegeEscalation false, capabilities drop ALL)",
    "aws-fsx-csi-driver":
        "kubernetes-sigs/aws-fsx-csi-driver chart 1.17.0, node plugin only: privileged with Bidirectional mount "
        "propagation and hostPath of the kubelet directory, because it performs the Lustre mount on the node "
        "that the pods' FSx volume then uses; no controller (static PV)",
}
"""Releases whose charts run pods with host access, and why. Every other release gets no host access
from its chart's defaults or from our values."""
PLUGIN_VALUES = {
    "aws-efa-k8s-device-plugin": {"tolerations", "supportedInstanceLabels", "image"},
    "nvidia-device-plugin": {"tolerations", "nodeSelector", "gdrcopyEnabled", "mofedEnabled", "deviceListStrategy", "image"},
    "aws-fsx-csi-driver": {"nodeComponentOnly", "controller", "node", "image", "sidecars"},
}
"""The only values we pass them: placement, device coverage and the pinned images
(``stackconfig.chart_images``). In particular nothing that widens
their access (NVIDIA: compatWithCPUManager or a MIG strategy make it privileged / CAP_SYS_ADMIN;
securityContext, hostNetwork or extra volumes on any of them)."""
ESCALATING_KEYS = {"privileged", "hostNetwork", "hostPID", "hostIPC", "hostPath", "securityContext",
                   "podSecurityContext", "compatWithCPUManager", "migStrategy", "capabilities", "enableHostNetwork",
                   "allowPrivilegeEscalation", "runAsUser", "extraVolumes", "extraVolumeMounts"}


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


@pytest.mark.parametrize("stack", STACKS)
def test_only_the_device_plugins_and_the_csi_node_plugin_get_host_access(stack):
    releases = {r.inputs["name"]: r.inputs.get("values") or {} for r in graph_of(stack).of_type(HELM)}
    assert set(HOST_ACCESS_RELEASES) <= set(releases)
    others = set(releases) - set(HOST_ACCESS_RELEASES)
    assert others == {"kuberay-operator", "volcano"}, others
    for name, values in releases.items():
        assert not _keys(values) & ESCALATING_KEYS, (name, _keys(values) & ESCALATING_KEYS)
    for name, allowed in PLUGIN_VALUES.items():
        assert set(releases[name]) <= allowed, (name, set(releases[name]) - allowed)
    assert releases["aws-fsx-csi-driver"]["nodeComponentOnly"] is True
    for name in ("aws-efa-k8s-device-plugin", "nvidia-device-plugin"):
        assert set(releases[name]["image"]) == {"repository", "tag"}
    assert all(set(v["image"]) == {"repository", "tag"} for v in releases["aws-fsx-csi-driver"]["sidecars"].values())


# --- hardening of the CPU containers ----------------------------------------------------------------------

def test_every_container_has_requests_limits_and_a_pull_policy():
    for name in GRAPHS:
        for obj in registered_objects(graph_for(name)):
            for where, pod in pod_specs(obj):
                for c in pod["containers"]:
                    res = c.get("resources") or {}
                    assert {"cpu", "memory"} <= set(res.get("requests", {})) & set(res.get("limits", {})), (name, where)
                    assert c.get("imagePullPolicy") == "IfNotPresent", (name, where)


def test_containers_without_miles_code_have_a_read_only_root_and_no_token():
    cfg = variant("p5en-prod", EVERYTHING)
    templates = {"reward": M.reward_template(derive(cfg)), "stage": M.stage_template(derive(cfg)),
                 "trigger": M.trigger_template(derive(cfg))}
    for name, t in templates.items():
        spec = t["spec"]
        (c,) = spec["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
        tmp = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        if name != "trigger":  # the trigger only writes on the FSx volume
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert "emptyDir" in volumes[tmp["/tmp"]], name
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert env["HOME"] == "/tmp", name
        if name != "stage":  # the stage Job keeps the checkpoint-writer identity (Pod Identity, S3)
            assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec, name
    stage = templates["stage"]["spec"]
    (c,) = stage["containers"]
    assert not any("valueFrom" in e for e in c["env"])  # the HF token is a file, not an env var
    secret = next(v for v in stage["volumes"] if "secret" in v)["secret"]
    assert secret["secretName"] == "hf-token" and secret["optional"] is True


def test_ray_and_torchx_pods_share_the_hardening():
    from test_workloads_torchx import volcano_job
    for t in volcano_job("p5en-prod")["spec"]["tasks"]:
        pod = t["template"]
        assert M.RAY_PODS.items() <= pod["metadata"]["labels"].items()
        assert host_access(t["name"], pod["spec"]) == []


# --- NetworkPolicies, evaluated -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict = field(default_factory=dict, hash=False)


def NAMESPACE_LABELS(ns: str) -> dict:
    """The API server's name label, and the team label the platform puts on team namespaces."""
    team = {"rl.platform/team": ns.removeprefix("team-")} if ns.startswith("team-") else {}
    return {"kubernetes.io/metadata.name": ns, **team}


def _expression(e: dict, labels: dict) -> bool:
    op, key = e["operator"], e["key"]
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    inside = labels.get(key) in e.get("values", [])
    if op == "In":
        return inside
    assert op == "NotIn", op
    return key in labels and not inside


def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    return selector.get("matchLabels", {}).items() <= labels.items() and all(
        _expression(e, labels) for e in selector.get("matchExpressions", []))


def _peer(peer: dict, policy_ns: str, other) -> bool:
    if "ipBlock" in peer:
        if isinstance(other, Pod):
            return False  # pod IPs are in the VPC; our ipBlocks are external or link-local (checked below)
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(other)
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except", []))
    if not isinstance(other, Pod):
        return False
    if "namespaceSelector" in peer:
        ns_ok = _selects(peer["namespaceSelector"], NAMESPACE_LABELS(other.namespace))
    else:
        ns_ok = other.namespace == policy_ns
    return ns_ok and _selects(peer.get("podSelector", {}), other.labels)


def _port(ports: list[dict] | None, port: int, proto: str) -> bool:
    return not ports or any(p.get("protocol", "TCP") == proto and p.get("port") in (None, port) for p in ports)


def _direction(policies: list[dict], pod: Pod, other, port: int, proto: str, kind: str) -> bool:
    mine = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
            and _selects(p["spec"]["podSelector"], pod.labels) and kind in p["spec"]["policyTypes"]]
    if not mine:
        return True  # not isolated in this direction
    key, peers = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    return any((not rule.get(peers) or any(_peer(x, pod.namespace, other) for x in rule[peers]))
               and _port(rule.get("ports"), port, proto)
               for p in mine for rule in p["spec"].get(key, []))


def allowed(policies: list[dict], src, dst, port: int, proto: str = "TCP") -> bool:
    """Kubernetes NetworkPolicy semantics: egress of ``src`` and ingress of ``dst`` must both allow."""
    out = _direction(policies, src, dst, port, proto, "Egress") if isinstance(src, Pod) else True
    into = _direction(policies, dst, src, port, proto, "Ingress") if isinstance(dst, Pod) else True
    return out and into


S3, HF, POD_IDENTITY, IMDS = "52.216.8.1", "18.239.50.3", "169.254.170.23", "169.254.169.254"


def cluster_pods(cfg) -> dict[str, Pod]:
    ns = cfg.checkpoints.namespace
    pods = {g: Pod(f"ray-{g}", ns, M.ray_pod_labels(derive(cfg), g)) for g in ["head"] + [w.name for w in L.ray_workers(cfg)]}
    pods["torchx"] = Pod("torchx-worker", ns, {**M.RAY_PODS, "app.kubernetes.io/managed-by": "torchx.pytorch.org"})
    pods["reward"] = Pod("reward", ns, M.reward_template(derive(cfg))["metadata"]["labels"])
    pods["stage"] = Pod("stage", ns, M.stage_template(derive(cfg))["metadata"]["labels"])
    pods["trigger"] = Pod("trigger", ns, M.trigger_template(derive(cfg))["metadata"]["labels"])
    pods["debug"] = Pod("debug", ns, {"run": "debug"})
    pods["other-ns"] = Pod("intruder", "default", dict(M.RAY_PODS))  # same labels, another namespace
    pods["dns"] = Pod("coredns", "kube-system", {"k8s-app": "kube-dns"})
    pods["kuberay"] = Pod("kuberay-operator", M.KUBERAY_NAMESPACE, {"app.kubernetes.io/name": "kuberay-operator"})
    return pods


def test_network_policies_allow_what_the_run_needs_and_nothing_else():
    cfg = variant("p5en-prod", EVERYTHING)
    policies = M.network_policies(derive(cfg))
    P = cluster_pods(cfg)
    reward = cfg.workloads.reward.port
    ray = ["head", "trainer", "rollout", "buffer", "preprocess", "torchx"]
    must = [
        *[(P[a], P[b], port) for a in ray for b in ray if a != b
          for port in (6379, 8265, 10002, 19999, 29500, 45678)],  # Ray ports, NCCL/Gloo/TCPStore, SGLang
        *[(P[a], P["reward"], reward) for a in ray],
        *[(P[a], S3, 443) for a in ray + ["stage"]], (P["stage"], HF, 443),
        *[(P[a], POD_IDENTITY, 80) for a in ray + ["stage"]],
        (P["kuberay"], P["head"], 8265),
        *[(P[a], P["dns"], 53) for a in P if P[a].namespace == cfg.checkpoints.namespace],
    ]
    must_not = [
        (P["other-ns"], P["head"], 8265), (P["other-ns"], P["trainer"], 29500), (P["other-ns"], P["reward"], reward),
        (P["debug"], P["head"], 8265), (P["debug"], P["reward"], reward), (P["stage"], P["reward"], reward),
        (P["kuberay"], P["head"], 6379),
        (P["kuberay"], P["trainer"], 8265), (P["reward"], P["head"], 6379), (P["reward"], S3, 443),
        (P["trigger"], S3, 443), (P["trigger"], P["head"], 8265), (P["stage"], P["head"], 6379),
        (P["head"], IMDS, 80), (P["trainer"], IMDS, 80), (P["trainer"], S3, 80),
        (P["head"], P["other-ns"], 8080), (P["reward"], P["other-ns"], 80),
    ]
    for src, dst, port in must:
        assert allowed(policies, src, dst, port), f"needed but denied: {src} -> {dst}:{port}"
    for src, dst, port in must_not:
        assert not allowed(policies, src, dst, port), f"allowed but not needed: {src} -> {dst}:{port}"
    assert allowed(policies, P["trainer"], P["dns"], 53, "UDP")
    assert not allowed(policies, P["trainer"], P["rollout"], 29500, "UDP")  # Ray, NCCL and SGLang use TCP


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_is_isolated_and_named_by_a_policy(stack):
    """Default deny covers the namespace; each pod template is also selected by a policy of its own
    (what checkov's CKV2_K8S_6 asks), and each policy says what it allows."""
    cfg, graph = load(stack), graph_of(stack)
    policies = [o for o in registered_objects(graph) if o["kind"] == "NetworkPolicy"]
    deny = next(p for p in policies if p["metadata"]["name"] == "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    for name, pool, template, _ in M.pod_templates(derive(cfg)):
        labels = template["metadata"]["labels"]
        own = [p for p in policies if p["spec"]["podSelector"] and _selects(p["spec"]["podSelector"], labels)]
        assert own, name
    assert all(p["metadata"]["annotations"]["rl.platform/allows"] for p in policies)
    api_server = set(derive(cfg).api_server)  # the kubernetes Service /32 and the cluster's subnets, 443 alone
    for p in policies:
        for rule in p["spec"].get("egress", []):
            for peer in rule.get("to", []):
                if "ipBlock" in peer:  # never the pods' own VPC ranges by accident: internet, link-local, API server
                    net = ipaddress.ip_network(peer["ipBlock"]["cidr"])
                    if str(net) in api_server:
                        assert rule["ports"] == [{"protocol": "TCP", "port": 443}], p["metadata"]["name"]
                        continue
                    assert net.prefixlen == 0 or net.is_link_local, p["metadata"]["name"]


def test_the_evaluator_follows_kubernetes_semantics():
    ns = "rl"
    a, b = Pod("a", ns, {"app": "a"}), Pod("b", ns, {"app": "b"})
    assert allowed([], a, b, 80)  # nothing selects them: not isolated
    deny = {"metadata": {"namespace": ns}, "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    assert not allowed([deny], a, b, 80)
    allow_in = {"metadata": {"namespace": ns}, "spec": {"podSelector": {"matchLabels": {"app": "b"}},
                                                         "policyTypes": ["Ingress"],
                                                         "ingress": [{"from": [{"podSelector": {}}],
                                                                      "ports": [{"protocol": "TCP", "port": 80}]}]}}
    allow_out = {"metadata": {"namespace": ns}, "spec": {"podSelector": {"matchLabels": {"app": "a"}},
                                                          "policyTypes": ["Egress"], "egress": [{}]}}
    assert not allowed([deny, allow_in], a, b, 80)  # a's egress is still denied
    assert allowed([deny, allow_in, allow_out], a, b, 80)
    assert not allowed([deny, allow_in, allow_out], a, b, 81)
    assert not allowed([deny, allow_in, allow_out], Pod("a", "other", {"app": "a"}), b, 80)


def test_fsx_csi_controller_runs_no_pod():
    """Chart 1.17.0 renders the controller Deployment even with nodeComponentOnly; with no replicas it
    runs nothing privileged and holds no credentials (its service account must stay: create false
    fails the install when the account does not exist)."""
    from workloads.derive.model import derive
    from workloads.render import fsx_csi_values
    values = fsx_csi_values(derive(load("p5en-prod")))
    assert values["controller"] == {"replicaCount": 0}
    assert values["nodeComponentOnly"] is True
