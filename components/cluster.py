"""Cluster: the EKS control plane, its access, encryption, logging and managed add-ons.

Guarantees:
- pinned Kubernetes version; control-plane subnets in two zones; the Service range from the stack
  (``network.serviceIpv4Cidr``); the private endpoint always on (``PRIVATE_ENDPOINT``);
- API authentication mode with access entries (no aws-auth ConfigMap); admins only by access entry
  from the stack (no implicit creator admin), the Kubernetes provider waits for them;
- the API endpoint public only to the stack's CIDRs, or private;
- Kubernetes secrets encrypted with a customer-managed, rotating KMS key;
- all control-plane log types on by default;
- NetworkPolicy enforced in strict mode, every platform namespace's pods allowed by a policy
  that exists before they start;
- pinned managed add-ons: VPC CNI (Pod Identity for its own role, prefix delegation when a pool
  needs it), kube-proxy and the Pod Identity agent before nodes; CoreDNS, the node monitoring
  agent and CloudWatch observability once the system pool exists, so none waits degraded;
- a kubeconfig (secret) that authenticates with ``aws eks get-token`` and a Kubernetes provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from stackconfig.stack import StackConfig
from .iam import PodRole, service_role
from .network import prefix_delegation

ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


PRIVATE_ENDPOINT = True
"""The private API endpoint is always on: "If you enable private access, Kubernetes API requests from within
your cluster's VPC use the private VPC endpoint" (EKS API reference, ``VpcConfigRequest.endpointPrivateAccess``),
the cross-account interfaces EKS creates in the cluster's subnets (``subnetIds``). So a pod's request to the API
server stays in those subnets, which the platform's API-server NetworkPolicies allow
(``components.network.api_server_cidrs``); with it off, a pod resolving the endpoint's name would reach it
through the NAT gateway at public addresses no policy names."""
STRICT_NETWORK_POLICY = "strict"
PLATFORM_PODS_POLICY = "platform-pods"
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"


def vpc_cni_configuration(cfg: StackConfig) -> str:
    """VPC CNI settings: NetworkPolicy enforcement on (the workloads' namespace is default-deny), in
    strict mode, and prefix delegation only when a pool asks for more pods than IPs allow.

    amazon-vpc-cni-k8s v1.21.1 (the add-on's chart): ``enableNetworkPolicy`` turns on the policy
    controller and agent (charts/aws-vpc-cni/templates/configmap.yaml, daemonset.yaml
    ``--enable-network-policy``); ``env`` goes to the aws-node container, whose
    ``NETWORK_POLICY_ENFORCING_MODE`` (values.yaml, default ``standard``; README "v1.17.1+") the node
    agent reads when a pod is set up (aws-network-policy-agent pkg/rpc/rpc_handler.go: strict ->
    DEFAULT_DENY until the pod's policies are applied). Strict mode also denies every pod that no
    policy selects, host-network pods excepted: ``platform_pods_policy`` covers the platform's own."""
    env = {"NETWORK_POLICY_ENFORCING_MODE": STRICT_NETWORK_POLICY}
    if prefix_delegation(cfg):
        env |= {"ENABLE_PREFIX_DELEGATION": "true", "WARM_PREFIX_TARGET": "1"}
    return json.dumps({"enableNetworkPolicy": "true", "env": env})


def platform_pods_policy(namespace: str) -> dict:
    """A NetworkPolicy that lets every pod of a platform namespace (kube-system, add-ons, operators)
    talk as it did before strict mode: strict mode denies a pod that no policy selects, and these
    pods (CoreDNS, the operators' webhooks, the CloudWatch agent) need the API server, each other,
    AWS endpoints and the workloads. Team and workload namespaces get narrow policies instead."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": PLATFORM_PODS_POLICY, "namespace": namespace,
                         "annotations": {"rl.platform/allows": "all traffic of the platform's pods in this "
                                                               "namespace, as before strict mode"}},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]}}


@dataclass(frozen=True)
class Running:
    """What EKS says of a cluster that exists."""

    version: str
    service_cidr: str | None = None
    """``kubernetesNetworkConfig.serviceIpv4Cidr``, which EKS sets only at creation."""


def running_cluster(name: str) -> Running | None:
    """Cluster ``name`` as EKS runs it (``aws.eks.get_cluster``, at preview), None when there is no such
    cluster yet (a first deploy); any other error of the invoke is raised."""
    try:
        found = aws.eks.get_cluster(name=name)
    except Exception as err:  # the invoke's error: "invoke of aws:eks/getCluster:getCluster failed: ..."
        if "ResourceNotFoundException" in str(err):
            return None
        raise
    network = found.kubernetes_network_configs or []
    return Running(found.version, network[0].service_ipv4_cidr if network else None)


def control_plane_problems(cfg: StackConfig, running: Callable[[str], Running | None] = running_cluster) -> list[str]:
    """A first deploy (no cluster yet) with the private endpoint alone, which the deploying machine,
    outside the VPC the deploy creates, cannot reach; a cluster EKS runs at a newer minor than
    ``versions.kubernetes``: with supportType STANDARD EKS
    upgrades the control plane itself at the end of standard support (EKS user guide, "Learn about
    Kubernetes version lifecycle on EKS"), and a stack still pinned below would plan a downgrade EKS
    refuses (UpdateClusterVersion takes only the next minor up), minutes into ``pulumi up``; a cluster
    whose Service range is not ``network.serviceIpv4Cidr``: EKS sets it only at creation ("You can't change
    this value after the cluster is created", API reference ``KubernetesNetworkConfigRequest``), so the
    plan would replace the cluster, which deletion protection then refuses."""
    found = running(cfg.cluster_name)
    if found is None:
        if cfg.cluster.endpoint_public_access:
            return []
        return ["cluster.endpointPublicAccess: false on a first deploy: the program creates the Kubernetes objects "
                "through the private endpoint, reachable only from inside the VPC this deploy creates; allowed: true "
                "with publicAccessCidrs naming the deploying network for the first deploy, then false from a machine "
                "in the VPC or connected to it (VPN, Direct Connect, peering)"]
    problems = []
    if tuple(map(int, found.version.split("."))) > tuple(map(int, cfg.versions.kubernetes.split("."))):
        problems.append(f"versions.kubernetes: {cfg.versions.kubernetes}, but EKS runs cluster {cfg.cluster_name} at "
                        f"{found.version} (it upgrades a cluster at the end of standard support) and cannot downgrade "
                        f"it; allowed: {found.version}, with add-on versions for it (versions.addons)")
    if found.service_cidr and found.service_cidr != cfg.network.service_ipv4_cidr:
        problems.append(f"network.serviceIpv4Cidr: {cfg.network.service_ipv4_cidr}, but EKS runs cluster "
                        f"{cfg.cluster_name} with {found.service_cidr}, set only at creation (another value replaces "
                        f"the cluster); allowed: {found.service_cidr}")
    return problems


def kubeconfig(name: pulumi.Input[str], endpoint: pulumi.Input[str], ca_data: pulumi.Input[str],
               region: str) -> pulumi.Output[str]:
    """A kubeconfig that gets its token from ``aws eks get-token`` (no static credentials)."""
    def render(args: list) -> str:
        cluster_name, server, ca = args
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": cluster_name,
            "clusters": [{"name": cluster_name, "cluster": {"server": server,
                                                           "certificate-authority-data": ca}}],
            "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
            "users": [{"name": cluster_name, "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region]}}}],
        })
    return pulumi.Output.secret(pulumi.Output.all(name, endpoint, ca_data).apply(render))


class Cluster(pulumi.ComponentResource):
    """EKS control plane with KMS, logging, access entries, pinned add-ons and a k8s provider."""

    def __init__(self, name: str, cfg: StackConfig, subnet_ids: Sequence[pulumi.Input[str]],
                 opts: pulumi.ResourceOptions | None = None):
        """``subnet_ids``: the subnets ``components.network.CLUSTER_SUBNETS`` names (the API-server
        NetworkPolicies allow their CIDRs)."""
        super().__init__("rlplatform:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self._cfg = cfg
        key = aws.kms.Key(f"{name}-secrets", description=f"EKS secrets encryption for {name}",
                          enable_key_rotation=True, deletion_window_in_days=30, opts=child)
        control_plane = service_role(f"{name}-control-plane", "eks.amazonaws.com", ["AmazonEKSClusterPolicy"], self)
        settings = cfg.cluster
        self.eks = aws.eks.Cluster(
            name,
            name=name,
            version=cfg.versions.kubernetes,
            role_arn=control_plane.role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(subnet_ids), endpoint_private_access=PRIVATE_ENDPOINT,
                endpoint_public_access=settings.endpoint_public_access,
                public_access_cidrs=settings.public_access_cidrs if settings.endpoint_public_access else None),
            # The creator's admin access would be an access entry EKS makes outside this graph;
            # admins are the stack's adminRoleArns instead (EKS API CreateCluster,
            # accessConfig.bootstrapClusterCreatorAdminPermissions, default true). EKS reads it only
            # at creation (terraform-provider-aws internal/service/eks/cluster.go: ForceNew), so a
            # cluster created before keeps its creator entry (docs/getting-started/first-deploy.md: delete it by hand) rather
            # than being replaced: the change is ignored on update.
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API", bootstrap_cluster_creator_admin_permissions=False),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"], provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn)),
            # The Service range, explicit: its first address is the ``kubernetes`` Service's, which the
            # API-server NetworkPolicies allow (stackconfig.network). EKS sets it only at creation.
            kubernetes_network_config=aws.eks.ClusterKubernetesNetworkConfigArgs(
                ip_family="ipv4", service_ipv4_cidr=cfg.network.service_ipv4_cidr),
            enabled_cluster_log_types=settings.log_types,
            bootstrap_self_managed_addons=False,
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=settings.support_type),
            deletion_protection=settings.deletion_protection,
            opts=pulumi.ResourceOptions(parent=self, depends_on=control_plane.attachments,
                                        ignore_changes=["accessConfig.bootstrapClusterCreatorAdminPermissions"]),
        )
        self.name = self.eks.name
        self.security_group_id = self.eks.vpc_config.cluster_security_group_id
        self.admin_access = []
        """The admins' access policies: Kubernetes objects wait for them (the deployer is one)."""
        for i, arn in enumerate(settings.admin_role_arns):
            entry = aws.eks.AccessEntry(f"{name}-admin-{i}", cluster_name=self.name, principal_arn=arn,
                                        type="STANDARD", opts=child)
            self.admin_access.append(aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}", cluster_name=self.name, principal_arn=entry.principal_arn,
                policy_arn=ADMIN_POLICY,
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"), opts=child))
        addons = cfg.versions.addons
        cni_role = PodRole(f"{name}-vpc-cni", self.name, "kube-system", "aws-node",
                           managed_policies=["AmazonEKS_CNI_Policy"], by_addon=True, cluster_arn=self.eks.arn,
                           opts=child)
        self.node_addons = [
            self._addon("eks-pod-identity-agent", addons.pod_identity_agent),
            self._addon("kube-proxy", addons.kube_proxy),
            self._addon("vpc-cni", addons.vpc_cni, configuration_values=vpc_cni_configuration(cfg),
                        pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                            role_arn=cni_role.arn, service_account="aws-node")]),
        ]
        self.kubeconfig = kubeconfig(self.name, self.eks.endpoint,
                                     self.eks.certificate_authority.data, cfg.region)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig,
                                     enable_server_side_apply=True,
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=self.admin_access))
        self.kube_system_pods = self.allow_platform_namespace("kube-system", create=False)
        self.register_outputs({"name": self.name, "endpoint": self.eks.endpoint})

    def _addon(self, addon: str, version: str, depends_on: Sequence[pulumi.Resource] = (),
               **extra) -> aws.eks.Addon:
        return aws.eks.Addon(
            f"{self._pulumi_name()}-{addon}", cluster_name=self.name, addon_name=addon,
            addon_version=version, resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE", **extra,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)))

    def _pulumi_name(self) -> str:
        return self.eks._name

    def allow_platform_namespace(self, namespace: str, create: bool = True,
                                 policy: dict | None = None) -> list[pulumi.Resource]:
        """``platform_pods_policy`` in ``namespace``, or the narrower ``policy`` given (created here when
        ``create``): whatever installs pods there waits for these, so no platform pod starts under
        strict mode's deny-all."""
        opts = pulumi.ResourceOptions(parent=self, provider=self.provider)
        made: list[pulumi.Resource] = []
        if create:
            made.append(k8s.core.v1.Namespace(f"{self._pulumi_name()}-{namespace}", metadata={"name": namespace},
                                              opts=opts))
        policy = policy or platform_pods_policy(namespace)
        made.append(k8s.networking.v1.NetworkPolicy(
            f"{self._pulumi_name()}-{namespace}-{PLATFORM_PODS_POLICY}", metadata=policy["metadata"],
            spec=policy["spec"], opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=made))))
        return made

    def add_node_addons(self, after: Sequence[pulumi.Resource]) -> list[aws.eks.Addon]:
        """Add-ons whose pods need schedulable nodes, created after the system pool: CoreDNS,
        the node monitoring agent (feeds node auto-repair) and CloudWatch observability
        (Container Insights with per-node GPU via DCGM and EFA metrics)."""
        addons = self._cfg.versions.addons
        name = self._pulumi_name()
        cloudwatch = PodRole(f"{name}-cloudwatch", self.name, CLOUDWATCH_NAMESPACE, "cloudwatch-agent",
                             managed_policies=["CloudWatchAgentServerPolicy"], by_addon=True,
                             cluster_arn=self.eks.arn, opts=pulumi.ResourceOptions(parent=self))
        kube_system = [*after, *self.kube_system_pods]
        return [
            self._addon("coredns", addons.coredns, depends_on=kube_system),
            self._addon("eks-node-monitoring-agent", addons.node_monitoring_agent, depends_on=kube_system),
            self._addon("amazon-cloudwatch-observability", addons.cloudwatch_observability,
                        depends_on=[*after, *self.allow_platform_namespace(CLOUDWATCH_NAMESPACE)],
                        pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                            role_arn=cloudwatch.arn, service_account="cloudwatch-agent")]),
        ]
