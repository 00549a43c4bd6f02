"""The cluster's own exposure: the API endpoint, the creator's admin access, load-balancer subnets.
Each attack is played against the stack schema and the rendered graph, and each invariant's
policy catches a broken copy of a real stack."""

from __future__ import annotations
from workloads.checks import gate

import copy
import json

import pytest
from conftest import graph_of

from analysis import mocks
from analysis.rules import view
from components.network import NO_LOAD_BALANCER_TAG, PUBLIC_ELB_TAG
from stackconfig.files import raw_stack, stack_names
from stackconfig.stack import StackConfigError, load_stack
from test_policy import Break, _copy, _run, _set
from test_policy import test_policy_names_the_broken_resource as policy_names_the_broken_resource
from policy.rules import POLICIES

EKS = "aws:eks/cluster:Cluster"
ADMIN = "arn:aws:iam::123456789012:role/platform-admin"


def _raw(stack: str = "dev") -> dict:
    return copy.deepcopy(raw_stack(stack))


def _with_cluster(stack: str = "dev", **cluster) -> dict:
    raw = _raw(stack)
    raw["cluster"] = {**raw["cluster"], **cluster}
    return raw


def _refused(raw: dict, stack: str = "dev") -> str:
    with pytest.raises(StackConfigError) as err:
        load_stack(stack, raw)
    return str(err.value)


def _build(raw: dict, stack: str = "dev") -> mocks.Graph:
    import program
    cfg = load_stack(stack, raw)
    return mocks.run(lambda: program.build(cfg), region=cfg.region, stack=stack)


# --- item 9: the API endpoint --------------------------------------------------------------------

def test_every_stack_names_its_api_networks_and_admins():
    for stack in stack_names():
        cluster = raw_stack(stack)["cluster"]
        assert cluster["publicAccessCidrs"] and "0.0.0.0/0" not in cluster["publicAccessCidrs"], stack
        assert cluster["adminRoleArns"], stack


def test_public_endpoint_without_cidrs_is_refused():
    raw = _raw()
    del raw["cluster"]["publicAccessCidrs"]
    msg = _refused(raw)
    assert msg.splitlines()[0] == "stack 'dev': invalid configuration"
    assert "cluster.publicAccessCidrs: the public API endpoint needs the networks allowed" in msg
    assert "endpointPublicAccess: false" in msg


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "0.0.0.0/00"])
def test_internet_wide_endpoint_needs_the_stack_to_opt_in_by_name(cidr):
    msg = _refused(_with_cluster(publicAccessCidrs=["10.1.0.0/16", cidr]))
    assert f"cluster.publicAccessCidrs: {cidr} opens the Kubernetes API to the internet" in msg
    assert "cluster.publicAccessFromAnywhere: dev" in msg
    wrong = _refused(_with_cluster(publicAccessCidrs=["0.0.0.0/0"], publicAccessFromAnywhere="p5en-prod"))
    assert "cluster.publicAccessFromAnywhere: 'p5en-prod' is not this stack's name; allowed: dev" in wrong
    cfg = load_stack("dev", _with_cluster(publicAccessCidrs=["0.0.0.0/0"], publicAccessFromAnywhere="dev"))
    assert cfg.cluster.public_access_cidrs == ["0.0.0.0/0"]


def test_private_endpoint_takes_no_cidrs():
    msg = _refused(_with_cluster(endpointPublicAccess=False))
    assert "cluster.publicAccessCidrs: only with endpointPublicAccess: true; allowed: []" in msg
    vpc = _build(_with_cluster(endpointPublicAccess=False, publicAccessCidrs=[])).named(
        EKS, "rl-dev").inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False and "publicAccessCidrs" not in vpc


def test_rendered_endpoint_admits_only_the_stack_cidrs():
    vpc = graph_of("p5en-prod").named(EKS, "rl-p5en-prod").inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True and vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


# --- item 12: no implicit cluster-creator admin ----------------------------------------------------

def test_admins_are_required_and_well_formed():
    raw = _raw()
    del raw["cluster"]["adminRoleArns"]
    assert "cluster.adminRoleArns: at least one IAM role ARN is required" in _refused(raw)
    msg = _refused(_with_cluster(adminRoleArns=["not-an-arn"]))
    assert "cluster.adminRoleArns.0: Value error, 'not-an-arn' is not an IAM role or user ARN" in msg \
        or "'not-an-arn' is not an IAM role or user ARN" in msg


def test_creator_is_no_admin_and_kubernetes_waits_for_the_named_admins():
    graph = graph_of("p5en-shared")
    eks = graph.named(EKS, "rl-p5en-shared")
    assert eks.inputs["accessConfig"]["bootstrapClusterCreatorAdminPermissions"] is False
    entries = [r for r in graph.resources if r.type == "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
               and r.inputs["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")]
    assert [e.inputs["principalArn"] for e in entries] == [ADMIN]
    provider = next(r for r in graph.resources if r.type == "pulumi:providers:kubernetes")
    assert {e.urn for e in entries} <= set(provider.dependencies)


# --- item 2: no internet-facing load balancer subnets unless asked -------------------------------

def _subnet_tags(graph: mocks.Graph, stack: str) -> dict[str, dict]:
    return {r.name.removeprefix(f"rl-{stack}-"): r.inputs["tags"] for r in graph.resources if r.type == view.SUBNET}


def test_public_subnets_are_hidden_from_load_balancer_discovery():
    tags = _subnet_tags(graph_of("p5en-prod"), "p5en-prod")
    for name in ("public-a", "public-b"):
        assert PUBLIC_ELB_TAG not in tags[name] and tags[name][NO_LOAD_BALANCER_TAG] == "shared"
    for name in ("nodes", "private-a", "private-b"):
        assert tags[name]["kubernetes.io/role/internal-elb"] == "1"
        assert not any(k.startswith("kubernetes.io/cluster/") for k in tags[name])


def test_no_load_balancer_tag_names_no_possible_cluster():
    """EKS cluster names start with a letter or digit, so the tag names a cluster that cannot exist."""
    name = NO_LOAD_BALANCER_TAG.removeprefix("kubernetes.io/cluster/")
    assert not name[0].isalnum()


def test_a_stack_may_ask_for_public_load_balancers():
    raw = _raw()
    raw["network"] = {"publicLoadBalancers": True}
    tags = _subnet_tags(_build(raw), "dev")
    assert tags["public-a"][PUBLIC_ELB_TAG] == "1" and NO_LOAD_BALANCER_TAG not in tags["public-a"]


# --- the policies catch each broken variant ------------------------------------------------------

def _endpoint_open_to_world(g):
    eks = g.named(EKS, "rl-p5en-prod")
    _set(eks, "vpcConfig", {**eks.inputs["vpcConfig"], "publicAccessCidrs": ["10.0.0.0/8", "0.0.0.0/0"]})
    return EKS, eks.name


def _endpoint_default_cidrs(g):
    eks = g.named(EKS, "rl-p5")
    vpc = {k: v for k, v in eks.inputs["vpcConfig"].items() if k != "publicAccessCidrs"}
    _set(eks, "vpcConfig", vpc)
    return EKS, eks.name


def _access_config(stack: str, change):
    """A break that replaces the cluster's accessConfig with ``change(accessConfig)``."""
    def mutate(g):
        eks = g.named(EKS, f"rl-{stack}")
        _set(eks, "accessConfig", change(eks.inputs["accessConfig"]))
        return EKS, eks.name
    return mutate


def _public_elb_tag(g):
    subnet = g.named(view.SUBNET, "rl-p5en-shared-public-b")
    _set(subnet, "tags", {**subnet.inputs["tags"], PUBLIC_ELB_TAG: "1"})
    return view.SUBNET, subnet.name


def _vpc_cni(g, stack: str) -> mocks.Registered:
    return g.named(view.ADDON, f"rl-{stack}-vpc-cni")


def _standard_mode(g):
    addon = _vpc_cni(g, "p5en-shared")
    values = json.loads(addon.inputs["configurationValues"])
    values["env"]["NETWORK_POLICY_ENFORCING_MODE"] = "standard"
    _set(addon, "configurationValues", json.dumps(values))
    return view.ADDON, addon.name


def _mode_unset(g):
    addon = _vpc_cni(g, "p6-b300")
    _set(addon, "configurationValues", json.dumps({"enableNetworkPolicy": "true", "env": {}}))
    return view.ADDON, addon.name


def _policies_off(g):
    addon = _vpc_cni(g, "dev")
    values = json.loads(addon.inputs["configurationValues"])
    _set(addon, "configurationValues", json.dumps({**values, "enableNetworkPolicy": "false"}))
    return view.ADDON, addon.name


BREAKS = [
    Break("endpoint-world", "p5en-prod", "api-endpoint-not-public", _endpoint_open_to_world, "0.0.0.0/0"),
    Break("endpoint-default-cidrs", "p5", "api-endpoint-not-public", _endpoint_default_cidrs, "the default"),
    Break("creator-admin", "p5en-shared", "no-implicit-cluster-admin", _access_config(
        "p5en-shared", lambda access: {**access, "bootstrapClusterCreatorAdminPermissions": True}), "is True"),
    Break("creator-admin-default", "dev", "no-implicit-cluster-admin", _access_config(
        "dev", lambda access: {"authenticationMode": "API"}), "is None"),
    Break("public-elb-tag", "p5en-shared", "no-public-load-balancer-subnets", _public_elb_tag, PUBLIC_ELB_TAG),
    Break("network-policy-standard", "p5en-shared", "network-policy-strict", _standard_mode, "'standard'"),
    Break("network-policy-mode-unset", "p6-b300", "network-policy-strict", _mode_unset, "None"),
    Break("network-policy-off", "dev", "network-policy-strict", _policies_off, "'false'"),
]


@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
@pytest.mark.parametrize("case", BREAKS, ids=[b.id for b in BREAKS])
def test_policy_names_the_broken_resource(case, preview):
    policy_names_the_broken_resource(case, preview)


def test_opt_ins_in_the_stack_file_satisfy_the_policies():
    """A stack that opts in (by name, or publicLoadBalancers) passes; the same graph without the
    opt-in in its config does not."""
    graph = _copy("dev")
    eks = graph.named(EKS, "rl-dev")
    _set(eks, "vpcConfig", {**eks.inputs["vpcConfig"], "publicAccessCidrs": ["0.0.0.0/0"]})
    _set(graph.named(view.SUBNET, "rl-dev-public-a"), "tags", {PUBLIC_ELB_TAG: "1"})
    names = ["api-endpoint-not-public", "no-public-load-balancer-subnets"]
    policies = [POLICIES[n] for n in names]
    assert {v.policy for v in _run("dev", graph, policies=policies)} == set(names)
    raw = _with_cluster(publicAccessCidrs=["0.0.0.0/0"], publicAccessFromAnywhere="dev")
    raw["network"] = {"publicLoadBalancers": True}
    assert _run("dev", graph, policies=policies, raw=raw) == []



# --- item 12: the Capacity Block trigger follows no link a team plants -----------------------------

def _shared_with_block_end(mount) -> "object":
    from datetime import datetime, timedelta, timezone

    from workloads.derive.model import derive
    from workloads.schema.stack import ProgramConfig
    raw = _raw("p5en-shared")
    end = datetime.now(timezone.utc) + timedelta(minutes=89)  # the 90-minute lead began a minute ago
    raw["pools"][1]["capacity"]["endTime"] = end.strftime("%Y-%m-%dT%H:%M:%SZ")
    raw["workloads"]["storage"] = {"mountPath": str(mount)}
    return derive(gate.load("p5en-shared", raw))


def test_the_trigger_creates_sentinels_only_in_real_run_directories(tmp_path):
    """A real tree: alpha plants a symlinked run directory into beta's run, a SAVE_NOW link to a
    file outside, a dangling SAVE_NOW link, and a RUNNING link; only alpha's real run gets a sentinel,
    as a new regular file, and nothing outside alpha's directory changes."""
    import os
    import subprocess

    from workloads.render import trigger_script
    m = _shared_with_block_end(tmp_path)
    teams = tmp_path / "checkpoints" / "teams"
    alpha, beta = teams / "alpha", teams / "beta"  # team_checkpoint_directory: <run>/RUNNING below it
    for d in (alpha / "a1", alpha / "a-linked-file", alpha / "a-dangling", alpha / "a-marker-link", beta / "b1"):
        d.mkdir(parents=True)
    for d in (alpha / "a1", alpha / "a-linked-file", alpha / "a-dangling", beta / "b1"):
        (d / "RUNNING").write_text("1")
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_text("keep")
    os.symlink(beta / "b1", alpha / "into-beta")                          # a run directory that is a link
    os.symlink(victim, alpha / "a-linked-file" / "SAVE_NOW")              # a sentinel that is a link
    os.symlink(tmp_path / "outside" / "created", alpha / "a-dangling" / "SAVE_NOW")
    os.symlink(alpha / "a1" / "RUNNING", alpha / "a-marker-link" / "RUNNING")  # a marker that is a link
    done = subprocess.run(["/bin/sh", "-c", trigger_script(m, "alpha")], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    assert (alpha / "a1" / "SAVE_NOW").is_file() and not (alpha / "a1" / "SAVE_NOW").is_symlink()
    assert not (beta / "b1" / "SAVE_NOW").exists()
    assert victim.read_text() == "keep" and not (tmp_path / "outside" / "created").exists()
    assert not (alpha / "a-marker-link" / "SAVE_NOW").exists()
    assert "a-linked-file/SAVE_NOW exists: left alone" in done.stdout
    assert "a-dangling/SAVE_NOW exists: left alone" in done.stdout


def test_the_trigger_gives_each_team_a_container_that_mounts_only_its_directory():
    from workloads.render import checkpoint_trigger_cronjob
    from workloads.schema.teams import team_checkpoint_directory
    m = _shared_with_block_end("/mnt/fsx")
    job = checkpoint_trigger_cronjob(m)
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["team-alpha", "team-beta"]
    for c, team in zip(pod["containers"], ("alpha", "beta")):
        (mount,) = c["volumeMounts"]
        assert mount == {"name": "fsx", "mountPath": f"/mnt/fsx/{team_checkpoint_directory(team)}",
                         "subPath": team_checkpoint_directory(team)}
        lines = [line.strip() for line in c["command"][-1].splitlines()]
        (find,) = [line for line in lines if line.startswith("find ")]
        assert not {"-L", "-H", "-follow"} & set(find.split())
        assert not [line for line in lines if line.startswith("touch")]
        assert c["image"].endswith("@sha256:" + "0" * 63 + "2")  # the shared stack pins it
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False


# --- item 4: NetworkPolicy in strict mode, and every platform pod still allowed -------------------

def test_vpc_cni_enforces_network_policy_in_strict_mode():
    for stack in ("p5en-prod", "dev"):
        values = json.loads(_vpc_cni(graph_of(stack), stack).inputs["configurationValues"])
        assert values["enableNetworkPolicy"] == "true"
        assert values["env"]["NETWORK_POLICY_ENFORCING_MODE"] == "strict"


def _k8s(graph: mocks.Graph, kind: str) -> list[mocks.Registered]:
    return [r for r in graph.resources if r.type == f"kubernetes:{kind}"]


def test_every_namespace_with_pods_has_a_policy_before_its_pods():
    """Strict mode denies a pod that no NetworkPolicy selects (host-network pods excepted). Every
    namespace the stack puts pods in has a policy selecting them; in the platform's namespaces it
    exists before the add-on or release that starts the pods (and CoreDNS answers every pod)."""
    import kubernetes_validate

    from components.cluster import platform_pods_policy
    kubernetes_validate.validate(platform_pods_policy("kube-system"), "1.35.0", strict=True)
    graph = graph_of("p5en-shared")
    policies = {}
    for r in _k8s(graph, "networking.k8s.io/v1:NetworkPolicy"):
        md = r.inputs["metadata"]
        policies.setdefault(md["namespace"], []).append(r)
    selects_all = {ns: [p for p in ps if p.inputs["spec"]["podSelector"] in ({}, None) or
                        not p.inputs["spec"]["podSelector"].get("matchLabels")] for ns, ps in policies.items()}
    addons = {r.inputs["addonName"]: r for r in graph.resources if r.type == view.ADDON}
    releases = {r.inputs["namespace"]: r for r in graph.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    installers = {"kube-system": [addons["coredns"], addons["eks-node-monitoring-agent"]],
                  "amazon-cloudwatch": [addons["amazon-cloudwatch-observability"]],
                  "kuberay-system": [releases["kuberay-system"]],
                  "volcano-system": [releases["volcano-system"]]}
    for ns, starters in installers.items():
        allow = [p for p in selects_all.get(ns, []) if p.inputs["spec"].get("ingress") == [{}]
                 and p.inputs["spec"].get("egress") == [{}]
                 or ns == "kuberay-system" and p.inputs["spec"].get("egress")]  # narrowed: test_operator_egress
        assert allow, ns
        for starter in starters:
            assert allow[0].urn in starter.dependencies, (ns, starter.name)
    namespaces = {r.inputs["metadata"]["name"] for r in _k8s(graph, "core/v1:Namespace")}
    for ns in namespaces:
        assert selects_all.get(ns), ns  # rl, team-*: default deny plus DNS; the platform's: allow all
