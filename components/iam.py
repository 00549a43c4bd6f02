"""IAM: service roles from AWS managed policies, and pod roles bound by EKS Pod Identity.

Guarantees: every role trusts exactly one service principal; a pod role is usable only by the one
cluster, namespace and service account its PodIdentityAssociation names, twice over: its trust
policy admits only requests carrying those session tags, and every statement of its inline policy
holds only for a session tagged with them (so a second association elsewhere, or an association
edited to another namespace, gets a role that can do nothing); nothing here grants ``*:*``.

EKS Pod Identity tags each session it opens with ``eks-cluster-arn``, ``eks-cluster-name``,
``kubernetes-namespace``, ``kubernetes-service-account``, ``kubernetes-pod-name`` and
``kubernetes-pod-uid`` (EKS user guide, "Create IAM role with trust policy required by EKS Pod
Identity", pod-id-role, and "Grant pods access to AWS resources based on tags", pod-id-abac). In the
trust policy they are ``aws:RequestTag/<key>`` (the AssumeRole request carries them, hence
``sts:TagSession``); in permissions they are ``aws:PrincipalTag/<key>``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Sequence

import pulumi
import pulumi_aws as aws

MANAGED = "arn:aws:iam::aws:policy/"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
NAMESPACE_TAG = "kubernetes-namespace"
SERVICE_ACCOUNT_TAG = "kubernetes-service-account"
CLUSTER_ARN_TAG = "eks-cluster-arn"
CLUSTER_NAME_TAG = "eks-cluster-name"
"""The session tags EKS Pod Identity sets (pod-id-abac) that a pod role is held to."""


def trust_policy(service: str, actions: Sequence[str] = ("sts:AssumeRole",),
                 condition: dict | None = None) -> str:
    statement: dict[str, Any] = {"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions)}
    if condition:
        statement["Condition"] = condition
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


class ServiceRole(NamedTuple):
    role: aws.iam.Role
    attachments: list[aws.iam.RolePolicyAttachment]
    """Whatever uses the role depends on these, so it is created after and deleted before them."""


def service_role(name: str, service: str, managed_policies: Sequence[str], parent: pulumi.Resource,
                 actions: Sequence[str] = ("sts:AssumeRole",),
                 assume_role_policy: pulumi.Input[str] | None = None,
                 tags: dict[str, str] | None = None) -> ServiceRole:
    """A role for ``service`` with the named AWS managed policies attached."""
    role = aws.iam.Role(name, assume_role_policy=assume_role_policy or trust_policy(service, actions),
                        tags=tags, opts=pulumi.ResourceOptions(parent=parent))
    attachments = [aws.iam.RolePolicyAttachment(f"{name}-{policy.split('/')[-1]}", role=role.name,
                                                policy_arn=MANAGED + policy,
                                                opts=pulumi.ResourceOptions(parent=role))
                   for policy in managed_policies]
    return ServiceRole(role, attachments)


def session_tags(prefix: str, cluster: str, namespace: str, service_account: str,
                 cluster_tag: str = CLUSTER_NAME_TAG) -> dict:
    """``StringEquals`` on the Pod Identity session tags: ``prefix`` is ``aws:RequestTag`` (trust)
    or ``aws:PrincipalTag`` (permissions); ``cluster`` is the cluster's name or, with
    ``cluster_tag=CLUSTER_ARN_TAG``, its ARN."""
    return {"StringEquals": {f"{prefix}/{cluster_tag}": cluster, f"{prefix}/{NAMESPACE_TAG}": namespace,
                             f"{prefix}/{SERVICE_ACCOUNT_TAG}": service_account}}


def pod_trust_policy(cluster_name: str, namespace: str, service_account: str, cluster_arn: str | None = None) -> str:
    """Trust for Pod Identity sessions of one service account of one cluster: by name, and by ARN
    when given (the ``eks-cluster-arn`` session tag, EKS user guide pod-id-abac: the name alone
    would admit a cluster of that name in another account or region)."""
    condition = session_tags("aws:RequestTag", cluster_name, namespace, service_account)
    if cluster_arn is not None:
        condition["StringEquals"][f"aws:RequestTag/{CLUSTER_ARN_TAG}"] = cluster_arn
    return trust_policy(POD_IDENTITY_PRINCIPAL, ("sts:AssumeRole", "sts:TagSession"), condition)


def bind_to_session(document: str, condition: dict) -> str:
    """Every statement of ``document`` (an Allow) holds only under ``condition`` as well."""
    parsed = json.loads(document)
    for statement in parsed["Statement"]:
        merged = dict(statement.get("Condition", {}))
        for operator, pairs in condition.items():
            merged[operator] = {**merged.get(operator, {}), **pairs}
        statement["Condition"] = merged
    return json.dumps(parsed)


class PodRole(pulumi.ComponentResource):
    """An IAM role that only ``namespace/service_account`` pods of ``cluster_name`` can assume and use.

    ``by_addon``: an EKS add-on creates the association itself (its ``podIdentityAssociations``);
    a second association for the same service account would be refused by EKS.
    ``cluster_arn``: when given, the inline permissions are held to the ``eks-cluster-arn`` session
    tag (account and region included), else to ``eks-cluster-name``; with managed policies the
    trust is held to the ARN as well (the vpc-cni and CloudWatch add-on roles).
    ``tags``: tags of the role itself; IAM evaluates them as ``aws:PrincipalTag`` too (the key
    policy of the checkpoint key reads ``checkpoint-prefix`` from there).
    """

    def __init__(self, name: str, cluster_name: pulumi.Input[str], namespace: str,
                 service_account: str, managed_policies: Sequence[str] = (),
                 inline_policy: pulumi.Input[str] | None = None, by_addon: bool = False,
                 cluster_arn: pulumi.Input[str] | None = None, tags: dict[str, str] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:iam:PodRole", name, None, opts)
        # The trust names the cluster by name (known before the cluster exists, so a first preview
        # can judge it); a role with managed policies, which no session tag can bind, is trusted by
        # the cluster's ARN as well, as that trust is all that holds it to the cluster. The inline
        # permissions use the ARN where the caller has it.
        trust_arn = cluster_arn if managed_policies else None
        trust = pulumi.Output.all(cluster_name, trust_arn).apply(
            lambda a: pod_trust_policy(a[0], namespace, service_account, a[1]))
        cluster, tag = (cluster_arn, CLUSTER_ARN_TAG) if cluster_arn is not None else (cluster_name, CLUSTER_NAME_TAG)
        self.role = service_role(name, POD_IDENTITY_PRINCIPAL, managed_policies, self,
                                 assume_role_policy=trust, tags=tags).role
        if inline_policy is not None:
            bound = pulumi.Output.all(inline_policy, cluster).apply(lambda a: bind_to_session(
                a[0], session_tags("aws:PrincipalTag", a[1], namespace, service_account, tag)))
            aws.iam.RolePolicy(name, role=self.role.id, policy=bound, opts=pulumi.ResourceOptions(parent=self))
        self.association = None if by_addon else aws.eks.PodIdentityAssociation(
            name, cluster_name=cluster_name, namespace=namespace, service_account=service_account,
            role_arn=self.role.arn, opts=pulumi.ResourceOptions(parent=self))
        self.arn = self.role.arn
        self.register_outputs({"arn": self.role.arn})


def policy_document(statements: list[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
