"""Which upstream module and version each control-plane binary is built from, derived from the stack pins.

- Kubernetes: the patch release of the pinned minor that the stack's kube-proxy add-on carries
  (``versions.addons.kube_proxy`` v1.35.3-eksbuild.N -> ``k8s.io/kubernetes v1.35.3``), so the API server
  is the release EKS runs; etcd is the one that release's go.mod requires (``go.etcd.io/etcd/server/v3``).
- Volcano: the chart version the stack pins (chart 1.15.1 ships Volcano v1.15.1); its ``volcano.sh/apis``
  is the served v1.14.0 with one constant added (``VOLCANO_APIS_SHIM`` says why and what else differs).
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
field we render. Different, and asserted only by two strict xfails (tests/controlplane/test_cp_runs.py):
v1.6.2 never fails a RayJob whose head stops
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
class Shim:
    """A module the proxy serves only at another version, copied at build time from the module cache into the
    component's build directory (``controlplane.build``; never committed) with ``files`` added, and named by a
    ``replace`` directive to that directory."""

    module: str
    version: str
    files: dict[str, str]
    """Path inside the module -> the text of a file added to the copy."""


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
    shims: dict[str, Shim] = field(default_factory=dict)
    """Module -> the served copy that stands for the directory the component's go.mod replaces it with."""


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


VOLCANO_APIS_SHIM = {"v1.15.1": Shim("volcano.sh/apis", "v1.14.0", {
    "pkg/apis/scheduling/v1beta1/zz_queue_allocation_gate.go":
        'package v1beta1\n\nconst QueueAllocationGateKey = GroupName + "/queue-allocation-gate"\n'})}
"""Volcano version -> the ``volcano.sh/apis`` it is built with. Volcano v1.15.1's go.mod replaces
``volcano.sh/apis`` with its own ``staging/src/volcano.sh/apis``, a nested module the proxy leaves out of ``volcano.sh/volcano``'s zip, and the proxy serves ``volcano.sh/apis`` v1.14.0
(and v1.13.0, v1.12.x) but neither v1.15.x nor a pseudo-version of volcano-sh/apis's v1.15.0 commit (f8d9adfa).
Built against apis v1.14.0, v1.15.1 lacks one name, ``schedulingv1beta1.QueueAllocationGateKey``
(pkg/scheduler/api/helpers.go:145,151, cache/util.go:151, actions/allocate/allocate.go:762); the shim adds it as
volcano-sh/volcano@v1.15.1 staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go:50-52 declares it.

Everything else apis v1.15.1 (that staging tree at the v1.15.1 tag) has over v1.14.0 is, read file by file:
- API types: no field added or removed. Only kubebuilder markers differ (batch v1alpha1 Job
  ``networkTopology.highestTierName`` loses its Pattern; the internal PodGroup type gains a MaxLength the
  v1beta1 type already had) and comments. The CRDs the API server validates with are the 1.15.1 chart's own,
  so nothing of ours (Queue, PodGroup, HyperNode) is decoded into a Go type that lacks a field.
- Generated clients (applyconfigurations, informers, the fake clientset): regenerated by code-generator v0.35.
  The one behavioural change, informers built with ``cache.ToListWatcherWithWatchListSemantics``, is the
  same for a real client: client-go v0.35.3 tools/cache/reflector.go:300-310 turns watch-list off only for a
  client that declares it unsupported (a fake), so v1.14.0's plain ``ListWatch`` streams the same way.
- go.mod: k8s.io modules v0.35.0 instead of v0.34.1; our go.mod pins them to v0.35.3 either way
  (Volcano's own replaces, repeated).
So the binaries are v1.15.1's scheduler, controllers and webhooks, built as the pinned release is."""


def volcano(version: str) -> Component:
    v = "volcano.sh/volcano/cmd/"
    shim = VOLCANO_APIS_SHIM.get(version)
    return Component("volcano", "volcano.sh/volcano", version,
                     {"vc-scheduler": v + "scheduler", "vc-controller-manager": v + "controller-manager",
                      "vc-webhook-manager": v + "webhook-manager"}, shims={shim.module: shim} if shim else {})


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
