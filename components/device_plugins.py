"""Device plugins: the NVIDIA and EFA device plugins, pinned, on every GPU node we build.

Guarantees: both tolerate exactly the taints our GPU pools carry (derived from the pools, so a
new taint cannot leave GPUs or EFA devices unadvertised); the EFA plugin's supported types cover
every EFA type in the catalog; the NVIDIA plugin selects nodes by the ``nvidia.com/gpu.present``
label every GPU pool sets and exposes GDRCopy for GPU-initiated transfers (DeepEP).
"""

from __future__ import annotations

from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from catalog import EFA_TYPES
from stackconfig.stack import StackConfig, Taint
from stackconfig.versions import Chart

NAMESPACE = "kube-system"


def gpu_tolerations(cfg: StackConfig) -> list[dict]:
    """One toleration per distinct taint on a GPU pool, in a stable order."""
    taints: dict[tuple, Taint] = {}
    for pool in cfg.pools:
        if pool.instance.is_gpu:
            for t in pool.taints:
                taints[(t.key, t.value, t.effect)] = t
    return [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in sorted(taints.values(), key=lambda t: (t.key, t.value, t.effect))]


def efa_plugin_values(cfg: StackConfig) -> dict:
    return {
        "tolerations": gpu_tolerations(cfg),
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"],
                                    "values": list(EFA_TYPES)},
    }


def nvidia_plugin_values(cfg: StackConfig) -> dict:
    return {
        "tolerations": gpu_tolerations(cfg),
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "gdrcopyEnabled": True,
    }


def _release(name: str, chart: Chart, values: dict, provider: k8s.Provider,
             parent: pulumi.Resource, after: Sequence[pulumi.Resource]) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        name, name=name, chart=chart.chart, version=chart.version, namespace=NAMESPACE,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo), values=values,
        atomic=True, opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(after)))


class DevicePlugins(pulumi.ComponentResource):
    """Helm releases of the NVIDIA and EFA device plugins."""

    def __init__(self, name: str, cfg: StackConfig, provider: k8s.Provider,
                 after: Sequence[pulumi.Resource] = (), opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:k8s:DevicePlugins", name, None, opts)
        charts = cfg.versions.charts
        self.nvidia = _release("nvidia-device-plugin", charts.nvidia_device_plugin,
                               nvidia_plugin_values(cfg), provider, self, after)
        self.efa = _release("aws-efa-k8s-device-plugin", charts.efa_device_plugin,
                            efa_plugin_values(cfg), provider, self, after)
        self.register_outputs({})
