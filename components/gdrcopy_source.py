"""GdrcopyTarball: the pinned GDRCopy source staged once in the stack's bucket for its GPU nodes.

Nodes that build gdrdrv (``components.gpu_node_setup``) used to download the tarball from GitHub at
every boot, all through the one NAT gateway. ``pulumi up`` now fetches it once (``RemoteAsset``, on the
machine that deploys) into ``GDRCOPY_KEY`` with a SHA256 checksum that S3 computes and keeps
(``checksumAlgorithm``, S3 user guide "Checking object integrity"); nodes read it through the VPC's S3
gateway endpoint (the endpoint policy already allows this bucket: ``Network.limit_s3_endpoint``) and the
boot script checks that checksum and the pinned tree hash. The node role may read that one object and
decrypt it with the bucket's key for that object only (SSE-KMS without bucket keys: the encryption
context is the object's ARN, see ``components.checkpoints``).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from .gpu_node_boot import GDRCOPY_KEY, GDRCOPY_URL
from .iam import policy_document


def node_read_policy(bucket_arn: str, key_arn: str, region: str) -> str:
    obj = f"{bucket_arn}/{GDRCOPY_KEY}"
    return policy_document([
        {"Sid": "GdrcopyTarball", "Effect": "Allow", "Action": "s3:GetObject", "Resource": obj},
        {"Sid": "GdrcopyTarballKey", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": key_arn,
         "Condition": {"StringEquals": {"kms:EncryptionContext:aws:s3:arn": obj,
                                        "kms:ViaService": f"s3.{region}.amazonaws.com"}}},
    ])


class GdrcopyTarball(pulumi.ComponentResource):
    """The staged tarball and the node role's read grant; ``bucket`` is where nodes fetch it."""

    def __init__(self, name: str, bucket_id: pulumi.Input[str], bucket_arn: pulumi.Input[str],
                 key_arn: pulumi.Input[str], node_role_name: pulumi.Input[str], region: str,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:nodes:GdrcopyTarball", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.object = aws.s3.BucketObjectv2(name, bucket=bucket_id, key=GDRCOPY_KEY,
                                            source=pulumi.RemoteAsset(GDRCOPY_URL), checksum_algorithm="SHA256",
                                            content_type="application/gzip", opts=child)
        self.read = aws.iam.RolePolicy(name, role=node_role_name, policy=pulumi.Output.all(bucket_arn, key_arn).apply(
            lambda a: node_read_policy(a[0], a[1], region)), opts=child)
        self.bucket = bucket_id
        self.register_outputs({"key": GDRCOPY_KEY})
