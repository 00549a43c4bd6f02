"""The fault engine of the benchmark's fault arms: AWS Fault Injection Service (FIS) experiment
templates the stack creates, the role FIS acts with, and the IAM policies that let a bench user start
them (``bench.faults`` starts them; nothing else of the platform does).

Why FIS, not an in-cluster injector: the faults the field cares about (a process killed, an instance
gone) are what FIS does with AWS' own agent and audit trail (CloudTrail ``StartExperiment``), each
template is a reviewed, fixed action on a fixed target selector, and the identity that acts is FIS'
role, not the bench user's: a team member only gets ``fis:StartExperiment`` on its own team's
templates. An in-cluster injector would be one more privileged controller (pods delete in every team
namespace) to build, image and patch. Actions (FIS User Guide, "AWS FIS Actions reference"):

- ``aws:eks:pod-delete`` on an ``aws:eks:pod`` target (``clusterIdentifier``, ``namespace``,
  ``selectorType: labelSelector``, ``selectorValue``), ``gracePeriodSeconds: 0``: a crash (SIGKILL,
  no preStop), one pod (``COUNT(1)``) carrying ``FAULT_TARGET_LABEL`` = the group, which no template renders:
  the bench puts it on exactly one pod of its attempt while it holds the group's ``fault_lease``. FIS runs
  its pod in the target namespace with ``kubernetesServiceAccount`` (``workloads.render.faults``);
- ``aws:ec2:terminate-instances`` on ``aws:ec2:instance`` with the tag ``FAULT_TAG`` = a value unique
  to one fault (``fault_tag``: ``<cluster>:<fault id>``, ``ALL`` of them): the bench tags exactly one
  instance with a fresh value and points the template's target at that value
  (``UpdateExperimentTemplate``) before starting it, so a tag left by a failed clean-up or another
  operator's fault (another value) is never selected; the deployed template's value
  (``<cluster>:unset``) matches no instance. Its policy (``node_policy``) is for the platform's
  operators only: tagging is not tied to a team, so it could stop any node.

The pod templates stay fixed: a team member may not update them, since an update could point FIS'
role (which reaches every team namespace) at another team's namespace. Instead the label they select
is put on one pod at a time per group and team: ``bench.faults`` takes the group's Lease in the team
namespace (coordination.k8s.io/v1, ``fault_lease``, ``FAULT_LEASE_SECONDS``; ``bench.lease``), checks
that no pod carries the label, labels the one pod, starts the template, and removes the label and frees
the Lease once FIS resolved its target and acted. It still checks that its pod alone carries the label
before starting, and afterwards that FIS hit it (``ListExperimentResolvedTargets``), which catches a pod
labelled by hand by someone who ignores the Lease. The stack renders each team's Leases, free
(``workloads.render.faults.fault_leases``, as many as the team quota's Lease count); the member's rights for
this (get and update of those Leases, never a create, and the label on its team's pods and nothing else of a
pod) are ``workloads.render.faults.member_rules`` and the team pod policy's
``workloads.render.pod_rules.member_pod_update``.

The fault kinds are data (``stackconfig/faults.yaml``, typed by ``stackconfig.faults``): each names one of
the actions above and the worker group it hits; the templates and the bench policies derive from it (as
do ``bench.faults`` and ``bench.simulate``), so a new kind on an existing action is one entry there.

Guarantees: nothing is created unless ``faults.enabled`` is set; the FIS role may terminate only
instances tagged ``FAULT_TAG`` = ``<this cluster>:...`` and gets Kubernetes access only through the
access entry's group (``FIS_GROUP``), which each team namespace binds (``workloads.render.faults``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws

from stackconfig.faults import fault_kinds

from .iam import policy_document, trust_policy

FAULT_TAG = "rl.platform/fault-target"
"""EC2 tag on the one instance a ``terminate-gpu-node`` fault terminates (value: ``fault_tag``)."""
UNSET = "unset"
"""The fault id of the deployed terminate template: no instance is ever tagged with it."""
FAULT_TARGET_LABEL = "rl.platform/fault-target"
"""Pod label, its value a worker group's name, that the pod templates select (one ``key=value``, the form the
``aws:eks:pod`` target's ``labelSelector`` takes). No template renders it: ``bench.faults`` puts it on the one
pod a fault is for while it holds the group's ``fault_lease``, and removes it once FIS resolved its target."""
FAULT_LEASE_SECONDS = 60
"""``leaseDurationSeconds`` of a ``fault_lease``: how long a crashed holder keeps a team's teammates waiting
(the holder renews it at every poll of its FIS experiment, ``bench.faults``)."""
CLUSTER_TAG, FAULT_KIND_TAG, TEAM_TAG = "rl.platform/cluster", "rl.platform/fault", "rl.platform/team"
FIS_GROUP = "rl-fault-injector"
"""Kubernetes group of the FIS role's access entry (EKS access entries, ``kubernetesGroups``)."""
FIS_SERVICE_ACCOUNT = "fis-pod-delete"


def fault_tag(cluster: str, fault: str) -> str:
    """The ``FAULT_TAG`` value of one fault: the cluster, then an id no other fault has."""
    return f"{cluster}:{fault}"


def fault_lease(group: str) -> str:
    """The coordination.k8s.io/v1 Lease in a team namespace that one attempt holds from labelling a pod of
    ``group`` with ``FAULT_TARGET_LABEL`` to FIS' resolution of the target (``bench.lease``)."""
    return f"rl-fault-target-{group}"


def team_fault_leases() -> list[str]:
    """Every Lease a team namespace holds: one per group a team's pod fault hits, each rendered with the
    namespace (``workloads.render.faults.fault_leases``); the team quota admits no other."""
    return sorted({fault_lease(k.group) for k in fault_kinds().values() if k.per_team})


def pod_delete_template(cluster: str, namespace: str, group: str) -> dict:
    """Targets and action of one ``aws:eks:pod-delete`` template (FIS actions reference: parameters
    ``gracePeriodSeconds``, ``kubernetesServiceAccount``; target ``aws:eks:pod``)."""
    return {"targets": [{"name": "pod", "resource_type": "aws:eks:pod", "selection_mode": "COUNT(1)",
                         "parameters": {"clusterIdentifier": cluster, "namespace": namespace,
                                        "selectorType": "labelSelector",
                                        "selectorValue": f"{FAULT_TARGET_LABEL}={group}"}}],
            "actions": [{"name": "kill", "action_id": "aws:eks:pod-delete",
                         "parameters": [{"key": "gracePeriodSeconds", "value": "0"},
                                        {"key": "kubernetesServiceAccount", "value": FIS_SERVICE_ACCOUNT}],
                         "target": {"key": "Pods", "value": "pod"}}]}


def terminate_template(cluster: str, fault: str = UNSET) -> dict:
    """``aws:ec2:terminate-instances`` on the instances tagged ``FAULT_TAG`` = ``fault_tag(cluster, fault)``."""
    return {"targets": [{"name": "node", "resource_type": "aws:ec2:instance", "selection_mode": "ALL",
                         "resource_tags": [{"key": FAULT_TAG, "value": fault_tag(cluster, fault)}],
                         "filters": [{"path": "State.Name", "values": ["running"]}]}],
            "actions": [{"name": "terminate", "action_id": "aws:ec2:terminate-instances",
                         "target": {"key": "Instances", "value": "node"}}]}


def fis_role_statements(cluster: str, cluster_arn: str) -> list[dict]:
    """What FIS' role may do: terminate only tagged instances, describe them, and reach the cluster."""
    return [{"Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "arn:aws:ec2:*:*:instance/*",
             "Condition": {"StringLike": {f"aws:ResourceTag/{FAULT_TAG}": fault_tag(cluster, "*")}}},
            {"Effect": "Allow", "Action": "ec2:DescribeInstances", "Resource": "*"},
            {"Effect": "Allow", "Action": "eks:DescribeCluster", "Resource": cluster_arn}]


def team_policy_statements(cluster: str, team: str) -> list[dict]:
    """A team member's bench rights: start its own team's pod templates, and watch and stop only the
    experiments started under its team's tag (Service Authorization Reference, "Actions, resources, and
    condition keys for AWS Fault Injection Service": ``StartExperiment`` acts on the template and the new
    experiment and, with tags, needs ``fis:TagResource``; ``GetExperiment``, ``StopExperiment`` and
    ``ListExperimentResolvedTargets`` act on the experiment; all take ``aws:ResourceTag/<key>``, and
    ``TagResource`` ``aws:RequestTag/<key>`` and ``aws:TagKeys``).

    - an experiment starts only with ``TEAM_TAG`` = the team in its request tags, so every experiment a
      member starts carries the team; watch and stop need that tag on the experiment;
    - tags only on experiments, only ``rl.platform/`` keys, ``TEAM_TAG`` only this team's, and never over
      another team's (``...IfExists``: an experiment being created has none yet);
    - never a template's tags (explicit Deny, whatever else the member holds): its ``TEAM_TAG`` and
      ``FAULT_KIND_TAG`` are what decide who may start it."""
    templates, experiments = "arn:aws:fis:*:*:experiment-template/*", "arn:aws:fis:*:*:experiment/*"
    return [{"Effect": "Allow", "Action": "fis:StartExperiment", "Resource": templates,
             "Condition": {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster,
                                            f"aws:ResourceTag/{TEAM_TAG}": team}}},
            {"Effect": "Allow", "Action": "fis:StartExperiment", "Resource": experiments,
             "Condition": {"StringEquals": {f"aws:RequestTag/{TEAM_TAG}": team}}},
            {"Effect": "Allow", "Action": "fis:TagResource", "Resource": experiments,
             "Condition": {"StringEquals": {f"aws:RequestTag/{TEAM_TAG}": team},
                           "StringEqualsIfExists": {f"aws:ResourceTag/{TEAM_TAG}": team},
                           "ForAllValues:StringLike": {"aws:TagKeys": ["rl.platform/*"]}}},
            {"Effect": "Allow", "Action": ["fis:GetExperiment", "fis:StopExperiment", "fis:ListExperimentResolvedTargets"],
             "Resource": experiments, "Condition": {"StringEquals": {f"aws:ResourceTag/{TEAM_TAG}": team}}},
            {"Effect": "Allow", "Action": ["fis:ListExperimentTemplates", "fis:GetExperimentTemplate"], "Resource": "*"},
            {"Effect": "Deny", "Action": ["fis:TagResource", "fis:UntagResource"], "Resource": templates}]


def node_policy_statements(cluster: str) -> list[dict]:
    """An operator's node-fault rights: tag an instance of this cluster with ``FAULT_TAG`` = one of this
    cluster's fault values only (and remove that tag), point the cluster's terminate templates at a
    value and start them."""
    node_kinds = sorted(k.name for k in fault_kinds().values() if k.removes_node)
    own = {"aws:ResourceTag/eks:cluster-name": cluster}
    keys = {"ForAllValues:StringEquals": {"aws:TagKeys": [FAULT_TAG]}}
    templates = {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster, f"aws:ResourceTag/{FAULT_KIND_TAG}": node_kinds}}
    return [{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "arn:aws:ec2:*:*:instance/*",
             "Condition": {"StringEquals": own, **keys,
                           "StringLike": {f"aws:RequestTag/{FAULT_TAG}": fault_tag(cluster, "*")}}},
            {"Effect": "Allow", "Action": "ec2:DeleteTags", "Resource": "arn:aws:ec2:*:*:instance/*",
             "Condition": {"StringEquals": own, **keys}},
            {"Effect": "Allow", "Action": ["fis:StartExperiment", "fis:UpdateExperimentTemplate"],
             "Resource": "arn:aws:fis:*:*:experiment-template/*", "Condition": templates}]


def template_specs(cluster: str, teams: Sequence[tuple[str, str]]) -> dict[str, tuple[dict, dict]]:
    """Every FIS template of the engine, by the suffix of its resource name (``<team>-<kind>`` for a pod
    fault, ``<kind>`` for a node fault): (``pod_delete_template``/``terminate_template``, its tags)."""
    out: dict[str, tuple[dict, dict]] = {}
    for kind in fault_kinds().values():
        if kind.per_team:
            out |= {f"{team}-{kind.name}": (pod_delete_template(cluster, namespace, kind.group),
                                            {CLUSTER_TAG: cluster, TEAM_TAG: team, FAULT_KIND_TAG: kind.name})
                    for team, namespace in teams}
        else:
            out[kind.name] = (terminate_template(cluster), {CLUSTER_TAG: cluster, FAULT_KIND_TAG: kind.name})
    return out


class FaultEngine(pulumi.ComponentResource):
    """The FIS role, its cluster access, the templates of every fault kind (``template_specs``), and the
    bench policies (``teamPolicies`` per team, ``nodePolicy``)."""

    def __init__(self, cluster: str, cluster_arn: pulumi.Input[str], teams: Sequence[tuple[str, str]],
                 depends_on: Sequence[pulumi.Resource] = (), opts: pulumi.ResourceOptions | None = None):
        """``cluster``: the EKS cluster's name; ``teams``: (team, namespace) pairs."""
        name = f"{cluster}-faults"
        super().__init__("rlplatform:index:FaultEngine", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(depends_on))
        role = aws.iam.Role(f"{name}-fis", assume_role_policy=trust_policy("fis.amazonaws.com"), opts=child)
        aws.iam.RolePolicy(f"{name}-fis", role=role.id, policy=pulumi.Output.from_input(cluster_arn).apply(
            lambda arn: policy_document(fis_role_statements(cluster, arn))), opts=child)
        aws.eks.AccessEntry(f"{name}-fis", cluster_name=cluster, principal_arn=role.arn,
                            kubernetes_groups=[FIS_GROUP], type="STANDARD", opts=child)
        self.templates = {key: experiment_template(f"{name}-{key}", spec, tags, role.arn, child)
                          for key, (spec, tags) in template_specs(cluster, teams).items()}
        self.team_policies = {team: aws.iam.Policy(f"{name}-bench-{team}", description=f"bench faults of team {team}",
                                                   policy=policy_document(team_policy_statements(cluster, team)),
                                                   opts=child) for team, _ in teams}
        self.node_policy = aws.iam.Policy(f"{name}-bench-nodes", description="bench node faults (operators)",
                                          policy=policy_document(node_policy_statements(cluster)), opts=child)
        self.register_outputs({})

    def outputs(self) -> dict:
        return {"teamPolicies": {t: p.arn for t, p in self.team_policies.items()}, "nodePolicy": self.node_policy.arn}


def experiment_template(name: str, spec: dict, tags: dict, role_arn: pulumi.Input[str],
                        opts: pulumi.ResourceOptions) -> aws.fis.ExperimentTemplate:
    """``spec`` (``pod_delete_template``/``terminate_template``) as pulumi-aws 7.51.1's
    ``aws.fis.ExperimentTemplate`` (targets: name, resource_type, selection_mode, parameters,
    resource_tags, filters; actions: name, action_id, target, parameters)."""
    def target(t: dict) -> aws.fis.ExperimentTemplateTargetArgs:
        return aws.fis.ExperimentTemplateTargetArgs(
            name=t["name"], resource_type=t["resource_type"], selection_mode=t["selection_mode"],
            parameters=t.get("parameters"),
            resource_tags=[aws.fis.ExperimentTemplateTargetResourceTagArgs(**x) for x in t.get("resource_tags", [])] or None,
            filters=[aws.fis.ExperimentTemplateTargetFilterArgs(**x) for x in t.get("filters", [])] or None)
    actions = [aws.fis.ExperimentTemplateActionArgs(
        name=a["name"], action_id=a["action_id"], target=aws.fis.ExperimentTemplateActionTargetArgs(**a["target"]),
        parameters=[aws.fis.ExperimentTemplateActionParameterArgs(**p) for p in a.get("parameters", [])] or None)
        for a in spec["actions"]]
    return aws.fis.ExperimentTemplate(name, description=f"rl-platform bench fault {name}", role_arn=role_arn,
                                      stop_conditions=[aws.fis.ExperimentTemplateStopConditionArgs(source="none")],
                                      targets=[target(t) for t in spec["targets"]], actions=actions, tags=tags,
                                      opts=opts)
