"""Network sizing, cluster settings, add-ons, device plugins and the checkpoint bucket."""

import base64
import ipaddress
import json

import pytest
import yaml
from conftest import ROOT, graph_of, load

from catalog import EFA_TYPES
from analysis import mocks
from stackconfig.stack import load_stack
from components.network import node_ip_demand, plan_subnets, prefix_delegation
from components.node_pool import EKS_TAINT_EFFECT, node_config
from stackconfig.versions import Versions



def platform_part(stack: str) -> dict:
    """A stack file's platform section alone (the platform schema knows no ``workloads:``)."""
    raw = yaml.safe_load(open(ROOT / f"stacks/Pulumi.{stack}.yaml"))["config"]["moe-rl-platform:platform"]
    raw.pop("workloads", None)
    return raw

def test_subnets_hold_every_pool_at_max_size(stack):
    cfg = load(stack)
    plan = {s.name: s for s in plan_subnets(cfg)}
    delegated = prefix_delegation(cfg)
    single = sum(p.nodes.max * node_ip_demand(p, delegated) for p in cfg.pools if p.single_az)
    spread = sum(p.nodes.max * node_ip_demand(p, delegated) for p in cfg.pools if not p.single_az)
    assert plan["nodes"].capacity >= single and plan["nodes"].zone == cfg.availability_zone
    for name in ("private-a", "private-b"):
        assert plan[name].capacity >= spread
    nets = [ipaddress.IPv4Network(s.cidr) for s in plan.values()]
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    assert {plan["private-a"].zone, plan["private-b"].zone} == {cfg.availability_zone,
                                                                cfg.secondary_availability_zone}


def test_p5en_prod_ip_demand_counts_pods_not_efa():
    cfg = load("p5en-prod")
    # 48 p5en nodes x (198 pods + 1 node IP); EFA-only interfaces take no address.
    gpu = [p for p in cfg.pools if p.instance_type == "p5en.48xlarge"]
    assert sum(p.nodes.max * node_ip_demand(p, False) for p in gpu) == 48 * 199


def test_efa_cidr_moves_the_node_subnet():
    raw = yaml.safe_load(open(ROOT / "stacks/Pulumi.p5en-prod.yaml"))["config"]["moe-rl-platform:platform"]
    raw.pop("workloads")  # the program's section; StackConfig is the platform alone
    raw["pools"][2]["nodes"] = 256
    with pytest.raises(Exception, match="network.vpcCidr"):
        plan_subnets(load_stack("big", raw))
    raw["network"] = {"efaCidr": "10.1.0.0/16"}
    plan = {s.name: s for s in plan_subnets(load_stack("big", raw))}
    assert ipaddress.IPv4Network(plan["nodes"].cidr).subnet_of(ipaddress.IPv4Network("10.1.0.0/16"))


def test_prefix_delegation_when_pods_exceed_card0():
    raw = platform_part("p5")
    cfg = load_stack("p5", raw)
    assert not prefix_delegation(cfg)
    raw["pools"][1]["maxPods"] = 150
    cfg = load_stack("p5", raw)
    assert prefix_delegation(cfg)
    assert "maxPods: 150" in node_config(cfg.pools[1])


def test_cluster_security_and_logging(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    eks = graph.named("aws:eks/cluster:Cluster", cfg.cluster_name)
    assert eks.inputs["version"] == cfg.versions.kubernetes
    assert eks.inputs["accessConfig"]["authenticationMode"] == "API"
    key = graph.named("aws:kms/key:Key", f"{cfg.cluster_name}-secrets")
    assert key.inputs["enableKeyRotation"] is True
    enc = eks.inputs["encryptionConfig"]
    assert enc["resources"] == ["secrets"] and enc["provider"]["keyArn"] == key.outputs["arn"]
    assert set(eks.inputs["enabledClusterLogTypes"]) == {"api", "audit", "authenticator",
                                                         "controllerManager", "scheduler"}
    subnets = {s.outputs["id"]: s.inputs["availabilityZone"] for s in graph.of_type("aws:ec2/subnet:Subnet")}
    assert len({subnets[s] for s in eks.inputs["vpcConfig"]["subnetIds"]}) == 2


def test_addons_pinned_and_ordered(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    addons = {a.inputs["addonName"]: a for a in graph.of_type("aws:eks/addon:Addon")}
    pins = cfg.versions.addons
    expected = {"vpc-cni": pins.vpc_cni, "coredns": pins.coredns, "kube-proxy": pins.kube_proxy,
                "eks-pod-identity-agent": pins.pod_identity_agent,
                "eks-node-monitoring-agent": pins.node_monitoring_agent,
                "amazon-cloudwatch-observability": pins.cloudwatch_observability}
    assert {n: a.inputs["addonVersion"] for n, a in addons.items()} == expected
    cni = addons["vpc-cni"]
    assert cni.inputs["podIdentityAssociations"][0]["serviceAccount"] == "aws-node"
    cni_config = json.loads(cni.inputs["configurationValues"])
    assert cni_config["env"].get("ENABLE_PREFIX_DELEGATION") == ("true" if prefix_delegation(cfg) else None)
    assert cni_config["enableNetworkPolicy"] == "true"
    system_ng = graph.named("aws:eks/nodeGroup:NodeGroup", f"{cfg.cluster_name}-system")
    for needs_nodes in ("coredns", "eks-node-monitoring-agent", "amazon-cloudwatch-observability"):
        assert system_ng.urn in addons[needs_nodes].dependencies
    for before_nodes in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
        assert all(addons[before_nodes].urn in ng.dependencies
                   for ng in graph.of_type("aws:eks/nodeGroup:NodeGroup"))
    cw = addons["amazon-cloudwatch-observability"].inputs["podIdentityAssociations"][0]
    assert cw["serviceAccount"] == "cloudwatch-agent"


def test_vpc_cni_older_than_efa_only_support_is_refused():
    raw = platform_part("p5")
    raw["versions"] = {"addons": {"vpcCni": "v1.18.4-eksbuild.1"}}
    with pytest.raises(Exception, match=r"versions.addons.vpcCni: .*need VPC CNI v1.18.5 or later"):
        load_stack("p5", raw)
    raw["versions"] = {"addons": {"vpcCni": "v1.18.5-eksbuild.1"}}
    assert load_stack("p5", raw).versions.addons.vpc_cni == "v1.18.5-eksbuild.1"
    assert load_stack("p5", raw).versions.addons.coredns == Versions().addons.coredns


def test_node_groups_repair_and_update_one_at_a_time(stack):
    """Reserved pools update with MINIMAL (terminate first, never above the group's size: a full
    Capacity Block or ODCR has no room for the surge node DEFAULT launches first)."""
    reserved = {p.name for p in load(stack).pools if p.reserved}
    for ng in graph_of(stack).of_type("aws:eks/nodeGroup:NodeGroup"):
        assert ng.inputs["nodeRepairConfig"] == {"enabled": True}
        pool = ng.inputs["labels"]["rl.platform/pool"]
        want = {"maxUnavailable": 1, **({"updateStrategy": "MINIMAL"} if pool in reserved else {})}
        assert ng.inputs["updateConfig"] == want, pool


def test_cluster_is_on_standard_support_and_protected_unless_the_stack_opts_out(stack):
    (eks,) = graph_of(stack).of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["upgradePolicy"] == {"supportType": "STANDARD"}
    assert eks.inputs["deletionProtection"] is (stack != "dev")


def test_fsx_waits_for_its_security_group_rules():
    """FSx validates the Lustre ports (988, 1018-1023) at create time (aws-parallelcluster#6181)."""
    graph = graph_of("p5en-prod")
    (fs,) = graph.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    rules = [r.urn for r in graph.resources if r.type in ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                                                          "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
             and "-fsx-" in r.name]
    assert len(rules) == 7 and set(rules) <= set(fs.dependencies)


def test_endpoint_private_only_and_allow_list():
    raw = yaml.safe_load(open(ROOT / "stacks/Pulumi.dev.yaml"))["config"]["moe-rl-platform:platform"]
    raw["cluster"] = {**raw["cluster"], "endpointPublicAccess": False, "publicAccessCidrs": []}
    cfg = load_stack("dev", raw)
    import program
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack="dev")
    vpc = graph.named("aws:eks/cluster:Cluster", cfg.cluster_name).inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False and vpc["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in vpc
    raw["cluster"] = {**raw["cluster"], "endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"]}
    cfg = load_stack("dev", raw)
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack="dev")
    vpc = graph.named("aws:eks/cluster:Cluster", cfg.cluster_name).inputs["vpcConfig"]
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


@pytest.mark.parametrize("capacity, problem", [
    ({"type": "CAPACITY_BLOCK", "reservationId": "cr-0123456789abcdef0", "endTime": "2026-12-14T11:30:00"},
     "endTime: give a time zone"),
    ({"type": "ODCR", "reservationId": "cr-0123456789abcdef0", "endTime": "2026-12-14T11:30:00Z"},
     "endTime: only a Capacity Block has an end time, not ODCR"),
])
def test_capacity_block_end_time(capacity, problem):
    raw = platform_part("p5")
    raw["pools"][1]["capacity"] = capacity
    with pytest.raises(Exception, match=problem):
        load_stack("p5", raw)


def test_nodeadm_raid0_on_nvme_types(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    for pool in cfg.pools:
        lt = graph.named("aws:ec2/launchTemplate:LaunchTemplate", f"{cfg.cluster_name}-{pool.name}")
        mime = base64.b64decode(lt.inputs["userData"]).decode()
        body = mime.split("Content-Type: application/node.eks.aws\n\n")[1].split("\n--")[0]
        doc = yaml.safe_load(body)
        assert doc["kind"] == "NodeConfig"
        strategy = (doc["spec"].get("instance") or {}).get("localStorage", {}).get("strategy")
        assert (strategy == "RAID0") == (pool.instance.nvme_disks > 0)


def test_device_plugins_tolerate_exactly_gpu_and_quarantine_taints(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    effect = {v: k for k, v in EKS_TAINT_EFFECT.items()}
    gpu_taints = {(t["key"], t["value"], effect[t["effect"]]) for p in cfg.pools if p.instance.is_gpu
                  for t in graph.named("aws:eks/nodeGroup:NodeGroup", f"{cfg.cluster_name}-{p.name}").inputs["taints"]}
    assert ("rl.platform/burn-in", "pending", "NoSchedule") in gpu_taints  # what GPU nodes register with
    gpu_taints.add(("rl.platform/quarantine", "failed", "NoSchedule"))  # a failed node's re-test needs its devices
    releases = {r.inputs["name"]: r for r in graph.of_type("kubernetes:helm.sh/v3:Release")}
    charts = cfg.versions.charts
    for release, chart in (("aws-efa-k8s-device-plugin", charts.efa_device_plugin),
                           ("nvidia-device-plugin", charts.nvidia_device_plugin)):
        r = releases[release]
        assert (r.inputs["chart"], r.inputs["version"]) == (chart.chart, chart.version)
        tolerations = {(t["key"], t["value"], t["effect"]) for t in r.inputs["values"]["tolerations"]}
        assert tolerations == gpu_taints
        system_ng = graph.named("aws:eks/nodeGroup:NodeGroup", f"{cfg.cluster_name}-system")
        assert system_ng.urn in r.dependencies, "Helm waits for pods: a node must exist"
    efa_values = releases["aws-efa-k8s-device-plugin"].inputs["values"]
    assert set(efa_values["supportedInstanceLabels"]["values"]) == set(EFA_TYPES)


def test_checkpoint_bucket_never_loses_data(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    name = f"{cfg.cluster_name}-checkpoints"
    bucket = graph.named("aws:s3/bucket:Bucket", name)
    retain = cfg.checkpoints.retain_on_destroy
    assert bucket.retain_on_delete == retain and bucket.inputs["forceDestroy"] == (not retain)
    children = graph.children(bucket)
    assert all(c.retain_on_delete == retain for c in children)
    by_type = {c.type.split(":")[-1]: c.inputs for c in children}
    assert by_type["BucketVersioning"]["versioningConfiguration"]["status"] == "Enabled"
    sse = by_type["BucketServerSideEncryptionConfiguration"]["rules"][0]
    assert sse["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    pab = by_type["BucketPublicAccessBlock"]
    assert all(pab[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                        "restrictPublicBuckets"))
    assert by_type["BucketOwnershipControls"]["rule"]["objectOwnership"] == "BucketOwnerEnforced"
    policy = json.loads(by_type["BucketPolicy"]["policy"])
    deny = policy["Statement"][0]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    rule = by_type["BucketLifecycleConfiguration"]["rules"][0]
    assert rule["noncurrentVersionExpiration"]["noncurrentDays"] == cfg.checkpoints.noncurrent_version_days


def test_checkpoint_writer_scoped_to_bucket_and_service_account(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    name = f"{cfg.cluster_name}-checkpoints"
    bucket_arn = graph.named("aws:s3/bucket:Bucket", name).outputs["arn"]
    policy = json.loads(graph.named("aws:iam/rolePolicy:RolePolicy", f"{name}-writer").inputs["policy"])
    key_arn = graph.named("aws:kms/key:Key", name).outputs["arn"]
    resources = {r for s in policy["Statement"] for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])}
    assert resources == {bucket_arn, f"{bucket_arn}/*", key_arn}
    assert not any("*" == a or a.endswith(":*") for s in policy["Statement"] for a in s["Action"])
    assoc = graph.named("aws:eks/podIdentityAssociation:PodIdentityAssociation", f"{name}-writer")
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == (
        cfg.checkpoints.namespace, cfg.checkpoints.service_account)
    trust = json.loads(graph.named("aws:iam/role:Role", f"{name}-writer").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}


def test_node_role_has_no_admin(stack):
    cfg = load(stack)
    graph = graph_of(stack)
    node_role = graph.named("aws:iam/role:Role", f"{cfg.cluster_name}-node")
    attached = {a.inputs["policyArn"].rsplit("/", 1)[-1] for a in graph.children(node_role)}
    assert attached == {"AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly"}


def test_create_and_delete_order_of_roles_and_egress(stack):
    """The cluster waits for its role's policies and node groups for theirs and for NAT egress,
    so creates never race them and deletes remove the users first."""
    cfg = load(stack)
    graph = graph_of(stack)
    eks = graph.named("aws:eks/cluster:Cluster", cfg.cluster_name)
    cp_role = graph.named("aws:iam/role:Role", f"{cfg.cluster_name}-control-plane")
    assert {a.urn for a in graph.children(cp_role)} <= set(eks.dependencies)
    node_role = graph.named("aws:iam/role:Role", f"{cfg.cluster_name}-node")
    nat = graph.named("aws:ec2/natGateway:NatGateway", f"{cfg.cluster_name}-nat")
    for ng in graph.of_type("aws:eks/nodeGroup:NodeGroup"):
        assert {a.urn for a in graph.children(node_role)} <= set(ng.dependencies)
        assert nat.urn in ng.dependencies


def test_device_plugins_do_not_wait_for_gpu_nodes_and_pin_mofed_off():
    """DaemonSet-only charts: ``atomic`` would make Helm wait for a pod on every GPU node while 48
    nodes are still joining (and roll back at the timeout); the NVIDIA plugin's MOFED support stays
    off explicitly (EFA is not Mellanox OFED; chart 0.20.0 defaults it to null)."""
    graph = graph_of("p5en-prod")
    releases = {r.inputs["chart"]: r.inputs for r in graph.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    for chart in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        assert releases[chart].get("atomic") is False and releases[chart]["skipAwait"] is True, chart
    assert releases["nvidia-device-plugin"]["values"]["mofedEnabled"] is False
