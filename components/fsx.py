"""CheckpointFileSystem: a POSIX file system for Megatron checkpoints that lands them in S3.

Why not Mountpoint for S3: on a general-purpose bucket it has no rename and overwrites only with
O_TRUNC and sequential writes, while torch DCP's FileSystemWriter writes ``.metadata.tmp`` and
renames it, and Megatron rewrites ``latest_checkpointed_iteration.txt``. FSx for Lustre is a full
POSIX file system (atomic rename, overwrite, parallel writes from every rank), and a data repository
association exports what is written under ``/checkpoints`` to ``s3://<bucket>/checkpoints/``
(new and changed files) and imports new and changed objects from there.

Guarantees: PERSISTENT_2 (replicated storage, survives node loss) in the single EFA zone's node
subnet; its own security group allowing Lustre (TCP 988, 1018-1023) only from itself and the
nodes' cluster security group, and the nodes accepting Lustre from it; auto export AND import on
the association, neither of them of deletions: a file deleted on the file system stays in S3, and
an object deleted in S3 (a delete marker) stays on the file system. FSx for Lustre user guide,
"Automatically import updates from your S3 bucket" (AutoImportPolicy: NEW, CHANGED, DELETED; with
DELETED, a deleted object's file is deleted from the file system) and "Automatically export
updates to your S3 bucket" (AutoExportPolicy events, same names). (The FSx CSI driver that mounts it is the workloads' pinned Helm release.)
``pulumi destroy`` keeps a final backup unless the stack's
checkpoints opt out of retention.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

LUSTRE_PORTS = ((988, 988), (1018, 1023))
IMPORT_EVENTS = ["NEW", "CHANGED"]
"""Deletions in S3 are not imported: a delete in the bucket never deletes a checkpoint file."""
DRA_TIMEOUTS = pulumi.CustomTimeouts(create="180m", update="60m", delete="60m")
"""terraform-provider-aws ``internal/service/fsx/data_repository_association.go`` waits 10 minutes
for each; creating the association imports the metadata of every object already under the path
(``batch_import_meta_data_on_create``: a kept bucket re-linked after a file system replacement
holds weeks of checkpoints) and a delete waits for FSx to release the link. Estimates, not
measurements: the FSx guide gives no duration."""
EXPORT_EVENTS = ["NEW", "CHANGED"]
"""Deletions on the file system (Megatron's checkpoint retention) are not exported: S3 keeps every save."""


class CheckpointFileSystem(pulumi.ComponentResource):
    """FSx for Lustre (PERSISTENT_2) in the node subnet, linked to the checkpoint bucket."""

    def __init__(self, name: str, *, capacity_gib: int, throughput_per_tib: int, subnet_id: pulumi.Input[str],
                 vpc_id: pulumi.Input[str], node_security_group_id: pulumi.Input[str],
                 bucket: pulumi.Input[str], export_dir: str = "checkpoints", retain: bool = True,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:storage:CheckpointFileSystem", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            name, vpc_id=vpc_id, description="FSx for Lustre: Lustre from the nodes and the file servers",
            tags={"Name": name}, opts=child)
        sg = self.security_group.id
        rules: list[pulumi.Resource] = []
        for low, high in LUSTRE_PORTS:
            ports = f"{low}" if low == high else f"{low}-{high}"
            for source, ref in (("self", sg), ("nodes", node_security_group_id)):
                rules.append(aws.vpc.SecurityGroupIngressRule(
                    f"{name}-{source}-{ports}", security_group_id=sg, ip_protocol="tcp", from_port=low,
                    to_port=high, referenced_security_group_id=ref, description=f"Lustre {ports} from {source}",
                    opts=child))
            # Lustre servers also connect back to clients.
            rules.append(aws.vpc.SecurityGroupIngressRule(
                f"{name}-to-nodes-{ports}", security_group_id=node_security_group_id, ip_protocol="tcp",
                from_port=low, to_port=high, referenced_security_group_id=sg,
                description=f"Lustre {ports} from FSx", opts=child))
        rules.append(aws.vpc.SecurityGroupEgressRule(f"{name}-out", security_group_id=sg, ip_protocol="-1",
                                                     cidr_ipv4="0.0.0.0/0", description="FSx replies and S3",
                                                     opts=child))
        # FSx validates the group's Lustre rules when the file system is created and fails with
        # InvalidNetworkSettings if they are not there yet (aws-parallelcluster#6181): wait for them.
        self.file_system = aws.fsx.LustreFileSystem(
            name, storage_capacity=capacity_gib, subnet_ids=subnet_id, deployment_type="PERSISTENT_2",
            per_unit_storage_throughput=throughput_per_tib, file_system_type_version="2.15",
            data_compression_type="LZ4", security_group_ids=[sg], skip_final_backup=not retain,
            # Failed exports and imports go to CloudWatch Logs (/aws/fsx/lustre by default): FSx for
            # Lustre user guide, "Data repository event logs" (LogConfiguration level WARN_ERROR).
            log_configuration=aws.fsx.LustreFileSystemLogConfigurationArgs(level="WARN_ERROR"),
            tags={"Name": name}, opts=pulumi.ResourceOptions(parent=self, depends_on=rules))
        self.association = aws.fsx.DataRepositoryAssociation(
            name, file_system_id=self.file_system.id, file_system_path=f"/{export_dir}",
            data_repository_path=pulumi.Output.concat("s3://", bucket, f"/{export_dir}/"),
            batch_import_meta_data_on_create=True, delete_data_in_filesystem=False,
            s3=aws.fsx.DataRepositoryAssociationS3Args(
                auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=EXPORT_EVENTS),
                auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=IMPORT_EVENTS)),
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=DRA_TIMEOUTS))
        self.id = self.file_system.id
        self.dns_name = self.file_system.dns_name
        self.mount_name = self.file_system.mount_name
        self.register_outputs({"fileSystemId": self.file_system.id, "dnsName": self.file_system.dns_name})
