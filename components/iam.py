"""IAM: service roles from AWS managed policies, and pod roles bound by EKS Pod Identity.

Guarantees: every role trusts exactly one service principal; pod roles are usable only by the one
namespace/service account their PodIdentityAssociation names; nothing here grants ``*:*``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Sequence

import pulumi
import pulumi_aws as aws

MANAGED = "arn:aws:iam::aws:policy/"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def trust_policy(service: str, actions: Sequence[str] = ("sts:AssumeRole",)) -> str:
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions)}],
    })


class ServiceRole(NamedTuple):
    role: aws.iam.Role
    attachments: list[aws.iam.RolePolicyAttachment]
    """Whatever uses the role depends on these, so it is created after and deleted before them."""


def service_role(name: str, service: str, managed_policies: Sequence[str], parent: pulumi.Resource,
                 actions: Sequence[str] = ("sts:AssumeRole",)) -> ServiceRole:
    """A role for ``service`` with the named AWS managed policies attached."""
    role = aws.iam.Role(name, assume_role_policy=trust_policy(service, actions),
                        opts=pulumi.ResourceOptions(parent=parent))
    attachments = [aws.iam.RolePolicyAttachment(f"{name}-{policy.split('/')[-1]}", role=role.name,
                                                policy_arn=MANAGED + policy,
                                                opts=pulumi.ResourceOptions(parent=role))
                   for policy in managed_policies]
    return ServiceRole(role, attachments)


class PodRole(pulumi.ComponentResource):
    """An IAM role that only ``namespace/service_account`` pods of ``cluster_name`` can assume.

    ``by_addon``: an EKS add-on creates the association itself (its ``podIdentityAssociations``);
    a second association for the same service account would be refused by EKS.
    """

    def __init__(self, name: str, cluster_name: pulumi.Input[str], namespace: str,
                 service_account: str, managed_policies: Sequence[str] = (),
                 inline_policy: pulumi.Input[str] | None = None, by_addon: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:iam:PodRole", name, None, opts)
        # Pod Identity needs TagSession as well as AssumeRole.
        self.role = service_role(name, POD_IDENTITY_PRINCIPAL, managed_policies, self,
                                 actions=("sts:AssumeRole", "sts:TagSession")).role
        if inline_policy is not None:
            aws.iam.RolePolicy(name, role=self.role.id, policy=inline_policy,
                               opts=pulumi.ResourceOptions(parent=self))
        self.association = None if by_addon else aws.eks.PodIdentityAssociation(
            name, cluster_name=cluster_name, namespace=namespace, service_account=service_account,
            role_arn=self.role.arn, opts=pulumi.ResourceOptions(parent=self))
        self.arn = self.role.arn
        self.register_outputs({"arn": self.role.arn})


def policy_document(statements: list[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
