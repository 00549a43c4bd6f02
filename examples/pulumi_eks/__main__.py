"""Attach this repo's EFA node pools to a cluster made by pulumi-eks (``eks.Cluster``).

pulumi-eks owns the control plane (API authentication, no default node group, VPC CNI add-on);
this repo's components add what it does not know about: ``EfaPeerSecurityGroup``, a ``GpuNodePool``
of p5en.48xlarge with all 16 EFA interfaces on a Capacity Block or ODCR (plus a small system pool
for CoreDNS and the other untainted system pods), the NVIDIA and EFA device plugins
(``GpuDevicePlugins``, through the cluster's kubeconfig) and a ``CheckpointStore`` bound by Pod
Identity.
They only take plain outputs of the cluster: ``eks_cluster.name``,
``eks_cluster.vpc_config.cluster_security_group_id`` (the group EKS itself attaches to nodes; a
launch template with its own groups must carry it), the node role ARN and the kubeconfig.

``pulumi up`` in this folder deploys it (set ``aws:region``; optionally ``availabilityZone``,
``secondaryAvailabilityZone``, ``capacityType`` = CAPACITY_BLOCK | ODCR and ``reservationId``).
"""

import json
import sys
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from components.multilang import CheckpointStore, EfaPeerSecurityGroup, GpuDevicePlugins, GpuNodePool
from stackconfig.versions import Versions

cfg, versions = pulumi.Config(), Versions()
zone = cfg.get("availabilityZone") or f"{aws.config.region or 'us-east-1'}a"
zone2 = cfg.get("secondaryAvailabilityZone") or f"{zone[:-1]}b"

# A small VPC: private node subnets behind one NAT gateway (multi-interface nodes get no public IP).
vpc = aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16", enable_dns_hostnames=True, enable_dns_support=True)
igw = aws.ec2.InternetGateway("igw", vpc_id=vpc.id)
public = aws.ec2.Subnet("public", vpc_id=vpc.id, cidr_block="10.0.255.0/24", availability_zone=zone,
                        map_public_ip_on_launch=True, tags={"kubernetes.io/role/elb": "1"})
public_rt = aws.ec2.RouteTable("public", vpc_id=vpc.id, routes=[
    aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)])
aws.ec2.RouteTableAssociation("public", subnet_id=public.id, route_table_id=public_rt.id)
nat = aws.ec2.NatGateway("nat", subnet_id=public.id,
                         allocation_id=aws.ec2.Eip("nat", domain="vpc").allocation_id)
private_rt = aws.ec2.RouteTable("private", vpc_id=vpc.id, routes=[
    aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)])
subnets, egress = {}, []
for key, az, cidr in (("efa", zone, "10.0.0.0/18"), ("spread-a", zone, "10.0.64.0/19"),
                      ("spread-b", zone2, "10.0.96.0/19")):
    subnets[key] = aws.ec2.Subnet(key, vpc_id=vpc.id, cidr_block=cidr, availability_zone=az,
                                  tags={"kubernetes.io/role/internal-elb": "1"})
    egress.append(aws.ec2.RouteTableAssociation(key, subnet_id=subnets[key].id, route_table_id=private_rt.id))
spread = [subnets["spread-a"].id, subnets["spread-b"].id]

node_role = aws.iam.Role("gpu-nodes", assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}))
policies = [aws.iam.RolePolicyAttachment(f"gpu-nodes-{p}", role=node_role.name,
                                         policy_arn=f"arn:aws:iam::aws:policy/{p}")
            for p in ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                      "AmazonEC2ContainerRegistryReadOnly")]

# Plain inputs only (no Resource objects): pulumi-eks runs in its own provider process.
cluster = eks.Cluster(
    "rl", vpc_id=vpc.id, private_subnet_ids=spread, public_subnet_ids=[public.id],
    version=versions.kubernetes, authentication_mode=eks.AuthenticationMode.API,
    skip_default_node_group=True, skip_default_security_groups=True, endpoint_private_access=True,
    vpc_cni_options=eks.VpcCniOptionsArgs(addon_version=versions.addons.vpc_cni),  # EFA-only needs >= 1.18.5
    access_entries={"gpu-nodes": eks.AccessEntryArgs(principal_arn=node_role.arn,
                                                     type=eks.AccessEntryType.EC2_LINUX)})
cluster_name = cluster.eks_cluster.name
cluster_sg = cluster.eks_cluster.vpc_config.cluster_security_group_id
aws.eks.Addon("pod-identity-agent", cluster_name=cluster_name, addon_name="eks-pod-identity-agent",
              addon_version=versions.addons.pod_identity_agent)

efa = EfaPeerSecurityGroup("rl-efa", {"vpc_id": vpc.id})
nodes = {"cluster_name": cluster_name, "node_role_arn": node_role.arn, "node_subnet_id": subnets["efa"].id,
         "spread_subnet_ids": spread, "cluster_security_group_id": cluster_sg,
         "efa_security_group_id": efa.security_group_id}
after = pulumi.ResourceOptions(depends_on=[*policies, *egress])  # nodes join only with these in place
system = GpuNodePool("rl-system", {"pool_name": "system", "role": "system", "instance_type": "m7i.xlarge",
                                   "min_nodes": 2, "desired_nodes": 2, "max_nodes": 3, **nodes}, after)
train = GpuNodePool("rl-train", {
    "pool_name": "train", "role": "train", "instance_type": "p5en.48xlarge",
    "min_nodes": 0, "desired_nodes": 2, "max_nodes": 2,
    "capacity_type": cfg.get("capacityType") or "CAPACITY_BLOCK",
    "reservation_id": cfg.get("reservationId") or "cr-0123456789abcdef0", **nodes}, after)
plugins = GpuDevicePlugins("rl-device-plugins", {"kubeconfig": cluster.kubeconfig_json, "region": zone[:-1]},
                           pulumi.ResourceOptions(depends_on=[system]))
store = CheckpointStore("rl-checkpoints", {"cluster_name": cluster_name, "namespace": "rl"})

pulumi.export("clusterName", cluster_name)
pulumi.export("kubeconfig", pulumi.Output.secret(cluster.kubeconfig_json))
pulumi.export("trainNodeGroup", train.node_group_name)
pulumi.export("efaDevicesPerNode", train.efa_devices_per_node)
pulumi.export("checkpointBucket", store.bucket_name)
pulumi.export("checkpointWriterRoleArn", store.writer_role_arn)
