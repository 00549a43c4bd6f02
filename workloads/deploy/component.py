"""Workloads: the Kubernetes side of a stack, registered from the rendered manifests.

KubeRay operator and Volcano (Helm, pinned) on the system pool; the checkpoint file system
(FSx for Lustre linked to the bucket) and its static PV/PVC; the namespace's NetworkPolicies
(default deny plus one per workload); the RayCluster and the PodDisruptionBudgets that keep
voluntary evictions off its head, trainer (and non-Spot rollout) pods; the optional RayJob; the
reward service (Deployment, Service, PodDisruptionBudget); the preprocessing Job; with a Capacity
Block end time, the CronJob that asks Miles for a checkpoint before the block's nodes drain. Every
object goes through the cluster's provider and waits for what it needs (CRDs, device plugins, the
pool's nodes, the file system's association).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.fsx import CheckpointFileSystem
from components.platform import Platform
from components.registry import filled
from stackconfig.versions import Chart

from workloads.derive import layout as L
from workloads.derive.paths import CHECKPOINT_DIR
from workloads import render as M
from workloads.derive.model import WorkloadModel
from workloads.render.admission import team_admission
from workloads.render.faults import fault_injector_policy, fault_rbac
from workloads.render.network_policies import kuberay_operator_policy
from workloads.render.runs import team_run_budget
from workloads.render.teams import (TEAM_SERVICE_ACCOUNT, namespace_of, run_submitter_cluster_role, team_checkpoint_prefix,
                           team_fsx_pv, team_fsx_pvc, team_objects, team_scripts, team_volumes)
from workloads.schema.teams import team_group
from workloads.deploy.submit import RunObjects

TYPED = {
    "Namespace": k8s.core.v1.Namespace,
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "PersistentVolume": k8s.core.v1.PersistentVolume,
    "PersistentVolumeClaim": k8s.core.v1.PersistentVolumeClaim,
    "Service": k8s.core.v1.Service,
    "Deployment": k8s.apps.v1.Deployment,
    "PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
    "Job": k8s.batch.v1.Job,
    "CronJob": k8s.batch.v1.CronJob,
    "NetworkPolicy": k8s.networking.v1.NetworkPolicy,
    "ResourceQuota": k8s.core.v1.ResourceQuota,
    "LimitRange": k8s.core.v1.LimitRange,
    "PriorityClass": k8s.scheduling.v1.PriorityClass,
    "Role": k8s.rbac.v1.Role,
    "Lease": k8s.coordination.v1.Lease,
    "RoleBinding": k8s.rbac.v1.RoleBinding,
    "ClusterRole": k8s.rbac.v1.ClusterRole,
    "ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "ValidatingAdmissionPolicy": k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
}


class Workloads(pulumi.ComponentResource):
    """Operators, storage, Ray cluster, optional RayJob, reward service and preprocessing Job."""

    def __init__(self, m: WorkloadModel, platform: Platform, runs: Sequence[RunObjects] = (),
                 opts: pulumi.ResourceOptions | None = None):
        name = f"{m.cluster_name}-workloads"
        super().__init__("rlplatform:workloads:Workloads", name, None, opts)
        self._provider = platform.cluster.provider
        self._repository_url = platform.registry.repository_url
        node_group = {p: platform.pools[p].node_group for p in platform.pools}
        system = node_group[m.system_pool.name]
        plugins = [platform.device_plugins.nvidia, platform.device_plugins.efa]

        self.storage = CheckpointFileSystem(
            f"{m.cluster_name}-fsx", capacity_gib=m.settings.storage.capacity_gib,
            throughput_per_tib=m.settings.storage.throughput_per_tib,
            subnet_id=platform.network.node_subnet_id, vpc_id=platform.network.vpc.id,
            node_security_group_id=platform.cluster.security_group_id, bucket=platform.checkpoints.name,
            export_dir=CHECKPOINT_DIR, retain=m.retain_storage,
            opts=pulumi.ResourceOptions(parent=self))

        charts = m.charts
        cluster = platform.cluster  # strict NetworkPolicy mode: the operators' pods are allowed before they start
        self.platform_priority = self._object(M.platform_priority_class(), after=[system])  # before the pods naming it
        self.kuberay = self._release("kuberay-operator", charts.kuberay_operator, M.KUBERAY_NAMESPACE, M.kuberay_values(m),
                                     after=[system, self.platform_priority,
                                            *cluster.allow_platform_namespace(
                                                M.KUBERAY_NAMESPACE, policy=kuberay_operator_policy(m.namespace, m.api_server))])
        self.volcano = self._release("volcano", charts.volcano, M.VOLCANO_NAMESPACE, M.volcano_values(m),
                                     after=[system, *cluster.allow_platform_namespace(M.VOLCANO_NAMESPACE)])
        self.fsx_csi = self._release("aws-fsx-csi-driver", charts.fsx_csi_driver, "kube-system",
                                     M.fsx_csi_values(m), after=[system], daemonset_only=True)

        self.namespace = ns = self._object(M.namespace(m), after=[system])
        self.network_policies = [self._object(np, after=[ns]) for np in M.network_policies(m)]
        sa = self._object(M.service_account(m), after=[ns])
        scripts = self._object(M.scripts_configmap(m), after=[ns])
        fs = self.storage
        pv = self._object(M.fsx_pv(m, fs.id, fs.dns_name, fs.mount_name),
                          after=[self.fsx_csi, fs.association])
        pvc = self._object(M.fsx_pvc(m), after=[ns, pv])

        gpu_groups = [node_group[p.name] for p in m.gpu_pools]
        self.raycluster = (self._custom(M.raycluster(m), after=[self.kuberay, pvc, sa, *plugins, *gpu_groups])
                           if m.raycluster else None)
        self.ray_pdbs = [self._object(pdb, after=[ns]) for pdb in M.ray_pdbs(m)] if m.raycluster else []
        self.queue = self._custom(M.volcano_queue(m), after=[self.volcano])
        self.priority_classes = [self._object(pc, after=[system]) for pc in M.priority_classes(m)]
        dirs = (self._object(M.team_directories_job(m), after=[pvc, node_group[m.utility_pool.name]])
                if m.settings.teams else None)
        admission = team_admission(m)
        submitters = ([self._object(o, after=[system]) for o in (run_submitter_cluster_role(), *admission)]
                      if m.settings.teams else [])
        self.members = self._team_members(m, platform)
        self.teams = {team.name: self._team(team, m, platform, after=[system, *submitters], directories=dirs)
                      for team in m.settings.teams}
        self.runs = [self._custom(r.rayjob, after=[self.kuberay, self.volcano, *self.teams[r.run.team],
                                                   *self.priority_classes, *plugins, *gpu_groups])
                     for r in runs]
        self.run_budgets = [self._object(team_run_budget(m, t), after=self.teams[t.name][:1]) for t in m.settings.teams]
        self.rayjob = (self._custom(M.rayjob(m), after=[self.raycluster])
                       if m.ray_job else None)

        reward = m.reward
        self.reward = None
        if reward is not None:
            after = [scripts, ns, node_group[reward.pool.name], self.platform_priority, *(plugins if reward.gpus else [])]
            self.reward = self._object(M.reward_deployment(m), after=after)
            self._object(M.reward_service(m), after=[ns])
            self._object(M.reward_pdb(m), after=[ns])
        job = m.stage
        self.stage = (self._object(M.preprocess_job(m), after=[pvc, scripts, sa, node_group[job.pool.name]])
                      if job and not m.runs else None)
        end = m.block_end
        self.checkpoint_trigger = None
        if end is not None:
            self.checkpoint_trigger = self._object(M.checkpoint_trigger_cronjob(m),
                                                   after=[pvc, node_group[m.utility_pool.name]])
            if end.trigger <= datetime.now(timezone.utc):
                pulumi.log.warn(f"the Capacity Block of pool(s) {', '.join(end.pools)} ends {end.end:%Y-%m-%d %H:%M} "
                                f"UTC: its checkpoint trigger ({end.trigger:%Y-%m-%d %H:%M} UTC) is already past; "
                                f"set capacity.endTime of the new block")
        self.register_outputs({"rayCluster": L.RAY_CLUSTER, "fileSystemId": fs.id})

    def _team(self, team, m: WorkloadModel, platform: Platform, after: Sequence[pulumi.Resource],
              directories: pulumi.Resource) -> list[pulumi.Resource]:
        """A team's namespace first, then its quota, service account, scripts and policies in it, its
        queue once Volcano is up, the Pod Identity role that reaches only the team's checkpoint prefix,
        and the PVs/PVCs of its directories once they exist."""
        reward = m.settings.reward.team_ports([t.name for t in m.settings.teams])[team.name] if m.reward else None
        ns, *rest = team_objects(team, m.pools, m.namespace, reward, m.head)
        rest += [*fault_rbac(team), fault_injector_policy(team)] if m.settings.fault_injection else []
        namespace = self._object(ns, after=after)
        role = platform.checkpoints.prefix_writer(
            f"{m.cluster_name}-team-{team.name}-writer", namespace_of(team.name), TEAM_SERVICE_ACCOUNT,
            team_checkpoint_prefix(team), opts=pulumi.ResourceOptions(parent=self))
        fs, volumes = self.storage, []
        for claim, _ in team_volumes(team):
            pv = self._object(team_fsx_pv(m, team, claim, fs.id, fs.dns_name, fs.mount_name), after=[directories])
            volumes += [pv, self._object(team_fsx_pvc(m, team, claim), after=[namespace, pv])]
        return [namespace, role, *(self._custom(o, after=[self.volcano]) if o["kind"] == "Queue"
                                   else self._object(o, after=[namespace]) for o in rest),
                self._object(team_scripts(m, team), after=[namespace]), *volumes]

    def _team_members(self, m: WorkloadModel, platform: Platform) -> list[aws.eks.AccessEntry]:
        """One EKS access entry per member ARN ("An IAM principal can't be included in more than one
        access entry", EKS user guide, grant-k8s-access), in the Kubernetes group of every team that
        lists it; STANDARD entries need no access policy: the RBAC bindings on those groups grant the rest."""
        groups: dict[str, list[str]] = {}
        for team in m.settings.teams:
            for arn in team.members:
                groups.setdefault(arn, []).append(team_group(team.name))
        return [aws.eks.AccessEntry(f"{m.cluster_name}-member-{i}", cluster_name=platform.cluster.name, principal_arn=arn,
                                    kubernetes_groups=names, type="STANDARD", opts=pulumi.ResourceOptions(parent=self))
                for i, (arn, names) in enumerate(sorted(groups.items()))]

    def _opts(self, after: Sequence[pulumi.Resource]) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self._provider, depends_on=list(after))

    def _release(self, name: str, chart: Chart, namespace: str, values: dict,
                 after: Sequence[pulumi.Resource], daemonset_only: bool = False) -> k8s.helm.v3.Release:
        """Operators install atomically; a DaemonSet-only chart does not wait for pods on nodes that
        are still joining (Helm's wait would hold, then roll back, while GPU pools scale up)."""
        return k8s.helm.v3.Release(
            name, name=name, chart=chart.chart, version=chart.version, namespace=namespace,
            create_namespace=True, repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
            values=filled(values, self._repository_url), atomic=not daemonset_only, skip_await=daemonset_only,
            opts=self._opts(after))

    @staticmethod
    def _object_name(obj: dict) -> str:
        """``<kind>-<name>``, with the namespace where it is not the workloads' own (team objects)."""
        md = obj["metadata"]
        where = f"{md['namespace']}-" if md.get("namespace", "").startswith("team-") else ""
        return f"{obj['kind'].lower()}-{where}{md['name']}"

    def _object(self, obj: dict, after: Sequence[pulumi.Resource]) -> pulumi.CustomResource:
        cls = TYPED[obj["kind"]]
        obj = filled(obj, self._repository_url)
        # Top-level fields are keyword arguments in snake case (PriorityClass ``globalDefault``).
        args = {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        return cls(self._object_name(obj), **args, opts=self._opts(after))

    def _custom(self, obj: dict, after: Sequence[pulumi.Resource]) -> k8s.apiextensions.CustomResource:
        obj = filled(obj, self._repository_url)
        return k8s.apiextensions.CustomResource(
            self._object_name(obj), api_version=obj["apiVersion"], kind=obj["kind"],
            metadata=obj["metadata"], spec=obj["spec"], opts=self._opts(after))
