"""A tiny, separate Pulumi program: add a p6-b300 rollout pool and a checkpoint store to a
cluster that some other program owns, reusing the package's components."""

import pulumi

from components.multilang import CheckpointStore, EfaPeerSecurityGroup, GpuNodePool

existing = pulumi.Config().get_object("cluster") or {
    "name": "team-cluster", "vpcId": "vpc-0123", "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
    "efaSubnetId": "subnet-efa", "subnetIds": ["subnet-a", "subnet-b"], "clusterSecurityGroupId": "sg-cluster",
}
efa = EfaPeerSecurityGroup("team-efa", {"vpc_id": existing["vpcId"]})
pool = GpuNodePool("team-rollout", {
    "pool_name": "rollout", "role": "rollout", "instance_type": "p6-b300.48xlarge",
    "min_nodes": 2, "desired_nodes": 2, "max_nodes": 2,
    "capacity_type": "CAPACITY_BLOCK", "reservation_id": "cr-0fedcba9876543210",
    "cluster_name": existing["name"], "node_role_arn": existing["nodeRoleArn"],
    "node_subnet_id": existing["efaSubnetId"], "spread_subnet_ids": existing["subnetIds"],
    "cluster_security_group_id": existing["clusterSecurityGroupId"],
    "efa_security_group_id": efa.security_group_id,
})
store = CheckpointStore("team-checkpoints", {"cluster_name": existing["name"], "namespace": "team-rl"})
pulumi.export("efaDevicesPerNode", pool.efa_devices_per_node)
pulumi.export("bucket", store.bucket_name)
