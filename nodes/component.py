"""BurnIn: the burn-in's objects registered in the stack's graph, and its replacement role.

Guarantees: the objects of ``nodes.render`` go through the cluster's provider after the system
pool's nodes and the device plugins (a GPU node's burn-in pod needs its GPUs and EFA devices
advertised), the DaemonSets after their namespace, account, scripts and policies; images are pulled
through the stack's registry (``components.registry.filled``). With ``burnIn.replaceFailed`` an EKS Pod Identity
role lets the replacement controller's service account (and no other: the burn-in pods hold no AWS
credentials) call ``autoscaling:SetInstanceHealth``, and only on Auto Scaling groups tagged
``eks:cluster-name`` = this cluster (the tag EKS puts on a managed node group's Auto Scaling group;
``aws:ResourceTag`` is a condition key of SetInstanceHealth in the Service Authorization Reference
for Amazon EC2 Auto Scaling). The controller's Deployment (re-test evictions always, replacement with
``burnIn.replaceFailed``) is registered after the role's Pod Identity association when there is one:
EKS Pod Identity injects credentials into a pod only when the association
exists as the pod is created (EKS user guide, pod-id-association), so a pod started first would run
without them until it is recreated. The controller's eviction Roles go in the runs' namespaces
(``run_namespaces``: the workloads' and each team's), after them. The GPU resource advertiser
(``nodes.pool_resources``) goes in with them the same way, whether or not the burn-in is on.
"""

from __future__ import annotations

import re
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.iam import PodRole, policy_document
from components.platform import Platform
from components.registry import filled
from workloads.deploy.component import TYPED
from workloads.derive.model import WorkloadModel

from .burn_in import PoolBurnIn
from .pool_resources import advertiser_objects
from .render import EVICT, NAMESPACE, REPLACE_ACCOUNT, burn_in_objects

KINDS = {**TYPED, "DaemonSet": k8s.apps.v1.DaemonSet}
LATER = ("DaemonSet", "Deployment")
"""Registered after the namespace, accounts, scripts and policies."""


def replacement_policy(cluster_name: str) -> str:
    return policy_document([{"Effect": "Allow", "Action": ["autoscaling:SetInstanceHealth"], "Resource": "*",
                             "Condition": {"StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster_name}}}])


class BurnIn(pulumi.ComponentResource):
    def __init__(self, m: WorkloadModel, plans: Sequence[PoolBurnIn], platform: Platform,
                 run_namespaces: Sequence[pulumi.Resource] = (), opts: pulumi.ResourceOptions | None = None):
        name = f"{m.cluster_name}-burn-in"
        super().__init__("rlplatform:nodes:BurnIn", name, None, opts)
        self._provider = platform.cluster.provider
        self._repository_url = platform.registry.repository_url
        system = platform.pools[m.system_pool.name].node_group
        plugins = [platform.device_plugins.nvidia, platform.device_plugins.efa]
        objects = [*burn_in_objects(m, list(plans)), *advertiser_objects(m)]
        first = [o for o in objects if o["kind"] not in LATER and o["metadata"]["name"] != EVICT]
        namespace = [self._object(o, [system]) for o in first if o["kind"] == "Namespace"]
        ready = [*namespace, *(self._object(o, [system, *namespace]) for o in first if o["kind"] != "Namespace")]
        ready += [self._object(o, [*namespace, *run_namespaces], f"-{o['metadata']['namespace']}")
                  for o in objects if o["metadata"]["name"] == EVICT]  # in the runs' namespaces, once they exist
        self.daemonsets = [self._object(o, [*ready, *plugins]) for o in objects if o["kind"] == "DaemonSet"]
        self.replacement = None
        if any(p.replace for p in plans):
            self.replacement = PodRole(f"{m.cluster_name}-burn-in-replace", platform.cluster.name, NAMESPACE,
                                       REPLACE_ACCOUNT, inline_policy=platform.cluster.name.apply(replacement_policy),
                                       opts=pulumi.ResourceOptions(parent=self))
        after = [*ready, *([self.replacement.association] if self.replacement else [])]
        self.controller = next((self._object(o, after) for o in objects if o["kind"] == "Deployment"), None)
        self.register_outputs({})

    def _object(self, obj: dict, after: Sequence[pulumi.Resource], where: str = "") -> pulumi.CustomResource:
        obj = filled(obj, self._repository_url)
        args = {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        return KINDS[obj["kind"]](f"{obj['kind'].lower()}{where}-{obj['metadata']['name']}", **args,
                                  opts=pulumi.ResourceOptions(parent=self, provider=self._provider,
                                                              depends_on=list(after)))
