"""Which upstream module and version each control-plane binary is built from, derived from the stack pins.

- Kubernetes: the patch release of the pinned minor that the stack's kube-proxy add-on carries
  (``versions.addons.kube_proxy`` v1.35.3-eksbuild.N -> ``k8s.io/kubernetes v1.35.3``), so the API server
  is the release EKS runs; etcd is the one that release's go.mod requires (``go.etcd.io/etcd/server/v3``).
- Volcano: the chart version the stack pins (chart 1.15.1 ships Volcano v1.15.1).
- KubeRay: the chart version the stack pins (1.7.0), unless the Go module proxy does not serve it:
  ``SERVED`` names the version built instead and why; README.md ("Tests") and the tier's tests say so.
- kwok and Helm: test tools no stack pins (kwok's controller; Helm v3 renders the Volcano chart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stackconfig.versions import Versions

PINNED = Versions()

KUBERAY_SERVED = {"v1.7.0": "v1.6.2"}
"""Pinned KubeRay version -> the version built. The proxy answers 403 "not available" for
``github.com/ray-project/kuberay/ray-operator@v1.7.0``, for ``@v1.7.0-rc.0`` and for the pseudo-version of
the v1.7.0 tag's commit (59d663aeec13, 2026-08-19); v1.6.2 is the newest it serves. The same in both
(ray-project/kuberay v1.6.2..v1.7.0): the Volcano plugin (PodGroup ``ray-<rayjob>-pg``, minMember, minResources,
queue and priority labels, ``schedulerName``, group annotation), pod labels, token authentication, HTTPMode
submission, ``clusterSelector``, shutdown/TTL/deletion policy, the objects it owns; the CRD schemas accept every
field we render. Different, and no test of the tier relies on them: v1.6.2 never fails a RayJob whose head stops
answering (v1.7.0: Failed after ``RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS``, 300 s), and suspending a RayJob leaves
its PodGroup's minMember as it was (v1.7.0 sets it to 0, rayjob_controller.go:389-391)."""

KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.19.0"
"""Renders the Volcano chart (its templates ship in the ``volcano.sh/volcano`` module) with the stack's
values, as the pulumi-kubernetes Helm Release does with the Helm v3 library it embeds."""

ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    version: str
    binaries: dict[str, str]
    """Binary name -> Go package path."""
    extra_requires: tuple[tuple[str, str], ...] = ()
    mains: dict[str, str] = field(default_factory=dict)
    """Directory -> main.go source for binaries whose upstream has no main package we can name."""
    ldflags: str = "-s -w"
    staging: dict[str, str] = field(default_factory=dict)
    """Module -> version, for a module the component's go.mod replaces with a directory of its own that the
    proxy serves only at another version (``controlplane.build.staging_version``)."""


def kubernetes_version(versions: Versions = PINNED) -> str:
    release = re.match(r"^(v\d+\.\d+\.\d+)-eksbuild", versions.addons.kube_proxy)
    if not release or not release.group(1).startswith(f"v{versions.kubernetes}."):
        raise ValueError(f"kube-proxy {versions.addons.kube_proxy} is not a release of Kubernetes {versions.kubernetes}")
    return release.group(1)


def kubernetes(version: str) -> Component:
    major, minor = version[1:].split(".")[:2]
    stamp = "k8s.io/component-base/version"
    ldflags = (f"-s -w -X {stamp}.gitVersion={version} -X {stamp}.gitMajor={major} -X {stamp}.gitMinor={minor} "
               f"-X {stamp}.gitTreeState=clean")
    k = "k8s.io/kubernetes/cmd/"
    return Component(
        "kubernetes", "k8s.io/kubernetes", version,
        {"kube-apiserver": k + "kube-apiserver", "kube-controller-manager": k + "kube-controller-manager",
         "kube-scheduler": k + "kube-scheduler", "etcd": "./etcd"},
        extra_requires=(("go.etcd.io/etcd/server/v3", ETCD_VERSION),), mains={"etcd": ETCD_MAIN}, ldflags=ldflags)


ETCD_VERSION = "v3.6.5"
"""The etcd server k8s.io/kubernetes v1.35.3's go.mod requires (``go.etcd.io/etcd/server/v3 v3.6.5``)."""


VOLCANO_SERVED = {"v1.15.1": ("v1.14.1", "v1.14.0")}
"""Pinned Volcano version -> (the version built, the ``volcano.sh/apis`` it is built with). Volcano's go.mod
replaces ``volcano.sh/apis`` with its own ``staging/src/volcano.sh/apis``, a nested module the proxy leaves
out of ``volcano.sh/volcano``'s zip, so it must come from the proxy as ``volcano.sh/apis`` itself, which
serves v1.14.0 (and v1.13.0, v1.12.x) but neither v1.15.x nor a pseudo-version of volcano-sh/apis's
v1.15.0 commit (f8d9adfa). Volcano v1.14.1 is the newest release whose API types are served: apis v1.14.0
and v1.14.1 are the same tree (volcano-sh/apis, no change between the tags). Its chart (1.14.1) renders the
stack's values as 1.15.1's does (scheduler and controller ConfigMaps, flags, webhooks with
``failurePolicy: Fail``).

Read against v1.15.1 (volcano-sh/volcano v1.14.1..v1.15.1): the capacity plugin's realCapability, deserved,
queue order, allocate/enqueue checks and reclaim's guarantee check, the gang, priority, conformance, drf
plugins, eviction with the pod's own grace period (``defaultEvictor.Evict``), the PodGroup controller and
HyperNode discovery are the same. Different: (1) v1.14.1's preempt action visits queues in random order and
pops tasks of other queues' waiting jobs (actions/preempt/preempt.go:161, 229-276; v1.15.1 orders queues and
stays in the current one, 150-158, 236-286), so with another team's run waiting, a preemption can take another
victim or none; (2) v1.14.1 counts an Inqueue PodGroup's whole minResources though its pods are bound
(capacity.go:467-471; v1.15.1 subtracts them, 1110-1120), so a queue's next run is admitted one session later.
The tier's tests avoid both: no scenario expects a preemption while another queue has a run waiting, and
each run is submitted after the previous one's gang settled. The queue webhook's messages differ; tests
match refusals, not their text."""


def volcano(pinned: str) -> Component:
    version, apis = VOLCANO_SERVED.get(pinned, (pinned, pinned))
    v = "volcano.sh/volcano/cmd/"
    return Component("volcano", "volcano.sh/volcano", version,
                     {"vc-scheduler": v + "scheduler", "vc-controller-manager": v + "controller-manager",
                      "vc-webhook-manager": v + "webhook-manager"}, staging={"volcano.sh/apis": apis})


def kuberay(version: str) -> Component:
    return Component("kuberay", "github.com/ray-project/kuberay/ray-operator", KUBERAY_SERVED.get(version, version),
                     {"kuberay-operator": "github.com/ray-project/kuberay/ray-operator"})


def kwok(version: str) -> Component:
    return Component("kwok", "sigs.k8s.io/kwok", version, {"kwok": "sigs.k8s.io/kwok/cmd/kwok"})


def helm(version: str) -> Component:
    return Component("helm", "helm.sh/helm/v3", version, {"helm": "helm.sh/helm/v3/cmd/helm"})


COMPONENTS = (
    kubernetes(kubernetes_version()),
    volcano("v" + PINNED.charts.volcano.version),
    kuberay("v" + PINNED.charts.kuberay_operator.version),
    kwok(KWOK_VERSION),
    helm(HELM_VERSION),
)
