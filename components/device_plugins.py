"""Device plugins: the NVIDIA and EFA device plugins, pinned, on every GPU node we build.

Guarantees: both tolerate exactly the taints our GPU pools carry (derived from the pools, so a
new taint cannot leave GPUs or EFA devices unadvertised); the EFA plugin's supported types cover
every EFA type in the catalog; the NVIDIA plugin selects nodes by the ``nvidia.com/gpu.present``
label every GPU pool sets and exposes GDRCopy for GPU-initiated transfers (DeepEP); the EFA plugin's
image comes from the EKS add-on registry of the cluster's own region (the chart's default is the
us-west-2 one, which a cluster elsewhere would reach across regions through its NAT gateway, while
its own region's registry is served by the stack's ECR interface endpoints). They take the pools,
the region and chart pins, not a whole stack, so a program that owns its cluster (pulumi-eks, say) can
install them for the pools it attaches. Both are DaemonSet-only charts: they are installed without
``atomic`` (which waits for every pod) and without waiting, since GPU nodes join over many minutes
and a DaemonSet pod appears only once its node has joined.
"""

from __future__ import annotations

from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from catalog import EFA_TYPES
from stackconfig.stack import Pool, Taint
from stackconfig.chart_images import values as image_values
from stackconfig.images import EKS_REGISTRY, localized
from stackconfig.versions import Chart, Charts

from .registry import eks_addon_registry, filled

from .gpu_node_setup import QUARANTINE_TAINT, registration_taints

NAMESPACE = "kube-system"


def gpu_taints(pools: Sequence[Pool]) -> list[Taint]:
    """Every distinct taint a GPU pool's nodes may carry, in a stable order, the burn-in and quarantine
    taints included whether or not the stack's burn-in is on (the plugins must advertise GPUs and EFA
    devices to the burn-in pod of a node that is not proven yet or is re-tested after a failure;
    tolerating an absent taint changes nothing)."""
    taints = {(t.key, t.value, t.effect): t for p in pools if p.instance.is_gpu
              for t in (*registration_taints(p, burn_in=True), QUARANTINE_TAINT)}
    return [taints[k] for k in sorted(taints)]


def tolerations(taints: Sequence[Taint]) -> list[dict]:
    return [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in taints]


def efa_plugin_values(taints: Sequence[Taint], charts: Charts, region: str) -> dict:
    """The pinned image (``efa-device-plugin``) in ``region``'s EKS registry, by digest."""
    pin = charts.image("efa-device-plugin").replace(EKS_REGISTRY, eks_addon_registry(region), 1)
    return {
        **image_values("efa_device_plugin", {"efa-device-plugin": pin}),
        "tolerations": tolerations(taints),
        "supportedInstanceLabels": {"keys": ["node.kubernetes.io/instance-type"],
                                    "values": list(EFA_TYPES)},
    }


DEVICE_LIST_STRATEGY = "volume-mounts"
"""How the plugin tells the NVIDIA runtime which GPUs a container was allocated: volume mounts a pod cannot
set itself, instead of the ``NVIDIA_VISIBLE_DEVICES`` variable any container can (k8s-device-plugin v0.20.0
README, ``DEVICE_LIST_STRATEGY``; chart values.yaml:33 ``deviceListStrategy``, rendered as the
``DEVICE_LIST_STRATEGY`` env of the plugin, templates/daemonset-device-plugin.yml:154-156). Together with
the node's toolkit settings (``components.gpu_runtime``), which make the runtime read the mounts and ignore
the variable in unprivileged containers. GDRCopy is unaffected: the plugin sets ``NVIDIA_GDRCOPY`` whatever the
strategy (internal/plugin/server.go:339-341) and the toolkit applies it once devices are selected
(nvidia-container-toolkit v1.20.0 internal/modifier/gated.go:36-40)."""


def nvidia_plugin_values(taints: Sequence[Taint], image: str) -> dict:
    """``mofedEnabled: false`` pinned: EFA is not Mellanox OFED, and the EKS EFA setup needs no MOFED
    (nvidia-device-plugin 0.20.0 values.yaml: ``mofedEnabled: null``, so off unless a default
    changes). ``gdrcopyEnabled`` only exposes /dev/gdrdrv to the containers; the gdrdrv kernel module
    itself must be on the host. ``deviceListStrategy``: ``DEVICE_LIST_STRATEGY``. ``image``: the pin
    ``nvidia-device-plugin``, localized (nvcr.io, which ECR cannot cache: the stack repository's copy)."""
    return {
        **image_values("nvidia_device_plugin", {"nvidia-device-plugin": image}),
        "tolerations": tolerations(taints),
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "gdrcopyEnabled": True,
        "mofedEnabled": False,
        "deviceListStrategy": DEVICE_LIST_STRATEGY,
    }


def _release(name: str, chart: Chart, values: dict, provider: k8s.Provider,
             parent: pulumi.Resource, after: Sequence[pulumi.Resource]) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        name, name=name, chart=chart.chart, version=chart.version, namespace=NAMESPACE,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo), values=values,
        atomic=False, skip_await=True, opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=list(after)))


class DevicePlugins(pulumi.ComponentResource):
    """Helm releases of the NVIDIA and EFA device plugins."""

    def __init__(self, name: str, taints: Sequence[Taint], charts: Charts, provider: k8s.Provider, region: str,
                 repository_url: pulumi.Input[str] | None = None, after: Sequence[pulumi.Resource] = (),
                 opts: pulumi.ResourceOptions | None = None):
        """``repository_url``: the ECR repository the NVIDIA device plugin's image was copied into
        (docs/getting-started/first-deploy.md, Deploy); without one, its public name (nvcr.io)."""
        efa_values = efa_plugin_values(taints, charts, region)  # an unknown region fails before anything is registered
        super().__init__("rlplatform:k8s:DevicePlugins", name, None, opts)
        pin = charts.image("nvidia-device-plugin")
        nvidia_values = nvidia_plugin_values(taints, pin if repository_url is None else localized(pin))
        self.nvidia = _release("nvidia-device-plugin", charts.nvidia_device_plugin,
                               filled(nvidia_values, repository_url), provider, self, after)
        self.efa = _release("aws-efa-k8s-device-plugin", charts.efa_device_plugin,
                            efa_values, provider, self, after)
        self.register_outputs({})
