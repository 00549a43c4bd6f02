"""The guardrail policies `pulumi preview --policy-pack policy` enforces on every stack.

A thin wrapper: the checks are plain functions in ``analysis/rules`` (shared with the offline
plan); this module only names them as CrossGuard policies. Importable without starting anything:
``ALL`` is the list of policies, ``policy/__main__.py`` only wraps it in a ``PolicyPack``; tests
call the same functions with args built from a recorded graph (``policy/adapter.py``).

What CrossGuard sees, and how the checks cope with it:
- A resource policy gets the resource's inputs; a stack policy gets every resource's outputs,
  parent, dependencies and property dependencies (which input came from which resource).
- During a preview of resources that do not exist yet, computed values (ids, ARNs, bucket names,
  JSON built from them) are unknown. Properties are read through ``plain``, which turns them into
  ``UNKNOWN`` instead of letting the proxy raise; references between resources are followed
  through property dependencies when the value itself is unknown (``Stack.refs``). A check whose
  input is unknown is skipped for that resource; ``pulumi up`` runs it again with known values.
- Resource options carry ``protect`` but not ``retainOnDelete`` (the analyzer protocol has no
  such field), so the checkpoint bucket's protection is judged by ``forceDestroy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Iterable

from pulumi_policy import (EnforcementLevel, ReportViolation, ResourceValidationArgs,
                           ResourceValidationPolicy, StackValidationArgs, StackValidationPolicy)

from analysis.rules.cluster_security import POLICIES as CLUSTER_SECURITY
from analysis.rules.data import (check_bucket_kept, check_buckets_secure, check_pod_identity_unique,
                                 check_pod_roles_scoped, check_s3_scoped)
from analysis.rules.fabric import (check_efa_layouts, check_efa_security_group, check_efa_single_az, check_imdsv2,
                                   check_no_placement_with_reservation, check_no_world_ingress,
                                   check_training_not_spot)
from analysis.rules.security import SECURITY_POLICIES
from analysis.rules.tenancy import check_team_isolation
from analysis.rules.view import (BUCKET, IAM_POLICY, INGRESS_RULE, LAUNCH_TEMPLATE, LEGACY_RULE, ROLE,
                                 ROLE_POLICY, ROLE_POLICY_ATTACHMENT, SECURITY_GROUP, Resource, Stack, plain)

PACK_NAME = "moe-rl-platform-guardrails"

# --- the policies ------------------------------------------------------------------------------

ResourceCheck = Callable[[Resource], list[str]]
StackCheck = Callable[[Stack], Iterable[tuple[str, str]]]


def resource_from_args(args: ResourceValidationArgs) -> Resource:
    opts = args.opts
    return Resource(type=args.resource_type, name=args.name, urn=args.urn, props=plain(args.props),
                    parent=getattr(opts, "parent", None), protect=bool(getattr(opts, "protect", False)))


def resource_policy(name: str, description: str, types: Sequence[str], check: ResourceCheck
                    ) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type in types:
            for message in check(resource_from_args(args)):
                report_violation(message, None)

    policy = ResourceValidationPolicy(name=name, description=description, validate=validate,
                                      enforcement_level=EnforcementLevel.MANDATORY)
    policy.check = check  # type: ignore[attr-defined]
    policy.resource_types = tuple(types)  # type: ignore[attr-defined]
    return policy


_VIEWED: list = [None, None]
"""The last stack args and their view: every stack policy of one analysis reads the same args."""


def _view(args: StackValidationArgs) -> Stack:
    if _VIEWED[0] is not args:
        _VIEWED[:] = [args, Stack.from_args(args)]
    return _VIEWED[1]


def stack_policy(name: str, description: str, check: StackCheck,
                 enforcement: EnforcementLevel = EnforcementLevel.MANDATORY) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        for urn, message in check(_view(args)):
            report_violation(message, urn)

    policy = StackValidationPolicy(name=name, description=description, validate=validate,
                                   enforcement_level=enforcement)
    policy.check = check  # type: ignore[attr-defined]
    return policy


def summary(check: Callable) -> str:
    """A check's first docstring paragraph on one line: the description of its policy."""
    return " ".join((check.__doc__ or "").split("\n\n")[0].split())


ALL: list = [
    stack_policy("efa-interface-layout",
                 "EFA launch templates carry the instance type's full EFA layout (ENA primary, one "
                 "EFA-only interface per EFA card, as many as the type's EFA maximum); a template without "
                 "a type is checked against every type of its node groups.",
                 check_efa_layouts),
    stack_policy("efa-single-az",
                 "Node groups with EFA interfaces (or a capacity reservation) use subnets of one "
                 "Availability Zone, and all EFA node groups share it.",
                 check_efa_single_az),
    stack_policy("efa-security-group-self-rules",
                 "EFA interfaces carry a security group that allows all traffic in from and out to itself.",
                 check_efa_security_group),
    resource_policy("no-placement-group-with-reservation",
                    "Launch templates that target a Capacity Block or ODCR set no placement group.",
                    [LAUNCH_TEMPLATE], check_no_placement_with_reservation),
    stack_policy("training-never-spot",
                 "Node groups labelled rl.platform/role=train never run on Spot.",
                 check_training_not_spot),
    resource_policy("imdsv2-required",
                    "Every launch template requires IMDSv2 (metadataOptions.httpTokens = required).",
                    [LAUNCH_TEMPLATE], check_imdsv2),
    resource_policy("no-world-open-ingress",
                    "No security group allows inbound traffic from 0.0.0.0/0 or ::/0.",
                    [SECURITY_GROUP, INGRESS_RULE, LEGACY_RULE], check_no_world_ingress),
    stack_policy("checkpoint-bucket-secure",
                 "S3 buckets are versioned, KMS-encrypted, private and TLS-only.",
                 check_buckets_secure),
    resource_policy("checkpoint-bucket-kept",
                    "S3 buckets survive `pulumi destroy` (forceDestroy false) unless the stack opts out "
                    "with checkpoints.retainOnDestroy: false.",
                    [BUCKET], check_bucket_kept),
    stack_policy("pod-roles-scoped",
                 "IAM roles for pods are bound to named namespaces and service accounts.",
                 check_pod_roles_scoped),
    stack_policy("pod-identity-unique",
                 "One EKS Pod Identity association per service account (add-on associations included).",
                 check_pod_identity_unique),
    resource_policy("s3-access-scoped-to-bucket",
                    "IAM permissions for S3 name the bucket, never Resource \"*\".",
                    [ROLE_POLICY, IAM_POLICY, ROLE, ROLE_POLICY_ATTACHMENT], check_s3_scoped),
    *[resource_policy(name, summary(check), types, check) if types else stack_policy(name, summary(check), check)
      for name, check, types in SECURITY_POLICIES],
    stack_policy("team-isolation",
                 "Every team namespace is covered by each team admission policy, unweakened and bound with Deny, "
                 "and holds a default-deny NetworkPolicy.",
                 check_team_isolation),
    *(resource_policy(*policy) for policy in CLUSTER_SECURITY),
]
"""Every policy of the pack; all mandatory."""
MANDATORY = [p for p in ALL if p.enforcement_level is EnforcementLevel.MANDATORY]

POLICIES = {p.name: p for p in ALL}

