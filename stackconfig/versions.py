"""Every pinned version in one visible place: Kubernetes, EKS add-ons, Helm charts, images.

These are the defaults. A stack overrides any of them under ``versions:``; unknown keys are
rejected like everywhere else in the stack schema.
"""

from __future__ import annotations

from typing import Any, Callable

import re

from pydantic import Field, field_validator

from software import Profile, profile

from .base import SchemaModel
from .images import EKS_REGISTRY, STACK_REPOSITORY
from .images import REPOSITORY_OUTPUT, with_repository  # noqa: F401  (where bench and controlplane import them)



class Addons(SchemaModel):
    """EKS managed add-on versions (``aws eks describe-addon-versions``)."""

    vpc_cni: str = "v1.21.1-eksbuild.5"
    coredns: str = "v1.14.3-eksbuild.3"
    kube_proxy: str = "v1.35.3-eksbuild.13"
    pod_identity_agent: str = "v1.3.10-eksbuild.2"
    node_monitoring_agent: str = "v1.6.2-eksbuild.1"
    cloudwatch_observability: str = "v5.3.0-eksbuild.1"

    @field_validator("vpc_cni")
    @classmethod
    def _efa_only_support(cls, version: str) -> str:
        numbers = re.match(r"^v(\d+)\.(\d+)\.(\d+)", version)
        if not numbers or tuple(map(int, numbers.groups())) < (1, 18, 5):
            raise ValueError(f"{version!r}: EFA-only interfaces need VPC CNI v1.18.5 or later")
        return version


class Chart(SchemaModel):
    chart: str
    version: str
    repo: str


PLACEHOLDER = "@sha256:" + "0" * 64
"""A pin whose digest is not known here: a deploy refuses it until the stack names the digest
(``versions.charts.images.<name>``; the plan's warning gives the command that prints it)."""

CHART_IMAGES: dict[str, str] = {
    "kuberay-operator": "quay.io/kuberay/operator:v1.7.0@sha256:"
                        "4a779237ef1c5262a63840ccf42d0d67f0b74e911158fbcaee4478fb1560bce6",
    "volcano-controller-manager": "docker.io/volcanosh/vc-controller-manager:v1.15.1@sha256:"
                                  "555245dd5c73524dee627ad0c2e308c9dd95af234df791d11e6bcdfa2f33a4ef",
    "volcano-scheduler": "docker.io/volcanosh/vc-scheduler:v1.15.1@sha256:"
                         "e79dc85279b5fd2c5e431571b4683f819ff0dfeacdf230fca49e6ce1f4509ae1",
    "volcano-webhook-manager": "docker.io/volcanosh/vc-webhook-manager:v1.15.1@sha256:"
                               "569e3671b6d9619c175062e6d3e82bfe3bb4bc3628b36347406ccc07f10fe12c",
    "nvidia-device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@sha256:"
                            "a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
    "efa-device-plugin": f"{EKS_REGISTRY}/eks/aws-efa-k8s-device-plugin:v0.5.20{PLACEHOLDER}",
    "fsx-csi-driver": f"public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver:v1.9.0{PLACEHOLDER}",
    "fsx-csi-node-driver-registrar": f"public.ecr.aws/csi-components/csi-node-driver-registrar:v2.16.0-eksbuild.3{PLACEHOLDER}",
    "fsx-csi-livenessprobe": f"public.ecr.aws/csi-components/livenessprobe:v2.18.0-eksbuild.3{PLACEHOLDER}",
    "fsx-csi-provisioner": f"public.ecr.aws/csi-components/csi-provisioner:v6.2.0-eksbuild.2{PLACEHOLDER}",
    "fsx-csi-resizer": f"public.ecr.aws/csi-components/csi-resizer:v2.1.0-eksbuild.3{PLACEHOLDER}",
}
"""Every image the pinned charts run (``stackconfig.chart_images.SLOTS``), by its public name, tag
and digest; the program pulls each through the stack's registry (``stackconfig.images.localized``).
Tags are the charts' own defaults (each chart's values.yaml at its pinned version). Digests, read,
not pulled here (no registry is reachable offline): KubeRay v1.7.0 from a public project's pins of
the operator it runs; Volcano v1.15.1 from a public deployment's record of the images it runs (amd64
nodes); the NVIDIA device plugin v0.20.0 from two public manifests that agree (one a GPU Operator
bundle). The EFA device plugin (the region's EKS registry) and the FSx CSI driver's five are not known
here: ``PLACEHOLDER``. Check any of them with ``crane digest <reference without the digest>``."""


class Charts(SchemaModel):
    efa_device_plugin: Chart = Chart(chart="aws-efa-k8s-device-plugin", version="v0.5.30",
                                     repo="https://aws.github.io/eks-charts")
    """Its image is the EKS add-on registry's of the stack's region (the chart's default is us-west-2's)."""
    nvidia_device_plugin: Chart = Chart(chart="nvidia-device-plugin", version="0.20.0",
                                        repo="https://nvidia.github.io/k8s-device-plugin")
    kuberay_operator: Chart = Chart(chart="kuberay-operator", version="1.7.0",
                                    repo="https://ray-project.github.io/kuberay-helm/")
    """Ships the RayCluster/RayJob/RayService CRDs of KubeRay v1.7.0 (structure kept in workloads/schemas/crds)."""
    volcano: Chart = Chart(chart="volcano", version="1.15.1", repo="https://volcano-sh.github.io/helm-charts")
    """Gang scheduler the TorchX ``kubernetes`` scheduler submits to (batch.volcano.sh/v1alpha1 Job)."""
    fsx_csi_driver: Chart = Chart(chart="aws-fsx-csi-driver", version="1.17.0",
                                  repo="https://kubernetes-sigs.github.io/aws-fsx-csi-driver")
    """FSx for Lustre CSI driver 1.9.0, node plugin only: mounts the checkpoint file system (static PV)."""
    images: dict[str, str] = {}
    """Pin name -> image reference with tag and digest, in place of the default pin (``CHART_IMAGES``
    in stackconfig/versions.py: ``efa-device-plugin``, ``fsx-csi-driver``, ...)."""

    @field_validator("images")
    @classmethod
    def _pins(cls, images: dict[str, str]) -> dict[str, str]:
        for name, ref in images.items():
            if name not in CHART_IMAGES:
                raise ValueError(f"{name}: not an image of the pinned charts; allowed: {', '.join(CHART_IMAGES)}")
            if not re.fullmatch(r"\S+:[\w.-]+@sha256:[0-9a-f]{64}", ref):
                raise ValueError(f"{name}: {ref!r} is not <repository>:<tag>@sha256:<64 hex digits>; the chart "
                                 f"joins repository and tag, and every chart image is pinned by digest")
        return images

    def image(self, name: str) -> str:
        """The pin ``name`` as this stack has it."""
        return self.images.get(name) or CHART_IMAGES[name]


class SoftwareStack(SchemaModel):
    """The images the workloads run. What is in them (framework, SGLang, Megatron, CUDA, torch,
    NCCL, EFA installer, DeepEP, Ray) is a software profile's (``software/profiles.yaml``), chosen
    per run with ``workloads.run.software`` / a run file's ``software:``; its recipe and tag are in
    the profile too, so the tag the README builds is the tag the pods pull."""

    images: dict[str, str] = {}
    """Profile name -> image reference, in place of the profile's recipe build in the stack's own ECR
    repository (``<imageRepository>:<profile image tag>``). ``{imageRepository}`` may stand for the
    repository: ``"{imageRepository}:<tag>@sha256:<digest>"``."""
    reward_image: str | None = None
    """Image of the reward service; default: the run's image."""
    dcgm: str = Field("4.5.2-1-ubuntu22.04", pattern=r"^\d+\.\d+\.\d+-\d+-[\w.]+$")
    """NVIDIA DCGM 4.5.2 image tag (``nvcr.io/nvidia/cloud-native/dcgm``) the GPU burn-in runs
    ``dcgmi diag`` from: copy it into the stack repository as ``dcgm-<tag>`` (docs/operations/burn-in.md)."""

    @field_validator("images")
    @classmethod
    def _profiles(cls, images: dict[str, str]) -> dict[str, str]:
        for name, ref in images.items():
            profile(name)  # ValueError listing the allowed names
            if not re.fullmatch(r"\S+", ref):
                raise ValueError(f"{name}: {ref!r} is not an image reference")
        return images


DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm"


def dcgm_image(software: SoftwareStack) -> str:
    """The DCGM image the burn-in pulls, by its public name: nvcr.io, which ECR cannot cache, so the
    copy ``dcgm-<tag>`` in the stack repository (``stackconfig.images.localized``)."""
    return f"{DCGM_IMAGE}:{software.dcgm}"


def workload_image(software: SoftwareStack, p: Profile) -> str:
    """The image every Ray pod of a run on profile ``p`` runs: the stack's setting, else the profile
    recipe's tag in the stack repository."""
    return software.images.get(p.name) or f"{STACK_REPOSITORY}:{p.image.tag}"


class Versions(SchemaModel):
    kubernetes: str = Field("1.35", pattern=r"^1\.\d+$")
    addons: Addons = Addons()
    charts: Charts = Charts()
    software: SoftwareStack = SoftwareStack()
