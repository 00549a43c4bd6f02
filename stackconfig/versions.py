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


EFA_DEVICE_PLUGIN_IMAGE = "eks/aws-efa-k8s-device-plugin"
"""The EFA device plugin's repository inside a region's EKS add-on registry. Chart v0.5.30 (aws/eks-charts
bfe91c4b, stable/aws-efa-k8s-device-plugin/values.yaml lines 1-4) defaults ``image.repository`` to
this path in the us-west-2 registry, tag v0.5.20 (its appVersion); the program sets the registry
of the stack's own region (``components.device_plugins.eks_addon_registry``) and keeps the tag."""


class Charts(SchemaModel):
    efa_device_plugin: Chart = Chart(chart="aws-efa-k8s-device-plugin", version="v0.5.30",
                                     repo="https://aws.github.io/eks-charts")
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


REPOSITORY_OUTPUT = "imageRepository"
"""The stack output (``pulumi stack output``) that holds the URL of the stack's ECR repository."""
STACK_REPOSITORY = "{" + REPOSITORY_OUTPUT + "}"
"""Stands for the stack's ECR repository URL in image references until registration fills it in."""


def dcgm_image(software: SoftwareStack) -> str:
    """The DCGM image the burn-in pulls: ``dcgm-<tag>`` in the stack repository."""
    return f"{STACK_REPOSITORY}:dcgm-{software.dcgm}"


def workload_image(software: SoftwareStack, p: Profile) -> str:
    """The image every Ray pod of a run on profile ``p`` runs: the stack's setting, else the profile
    recipe's tag in the stack repository."""
    return software.images.get(p.name) or f"{STACK_REPOSITORY}:{p.image.tag}"


class Versions(SchemaModel):
    kubernetes: str = Field("1.35", pattern=r"^1\.\d+$")
    addons: Addons = Addons()
    charts: Charts = Charts()
    software: SoftwareStack = SoftwareStack()


def map_images(value: Any, fill: Callable[[str], Any]) -> Any:
    """``value`` (a manifest, a list, an image) with ``fill(image)`` in place of every string that
    names ``STACK_REPOSITORY``."""
    if isinstance(value, dict):
        return {k: map_images(v, fill) for k, v in value.items()}
    if isinstance(value, list):
        return [map_images(v, fill) for v in value]
    if isinstance(value, str) and value.startswith(STACK_REPOSITORY):
        return fill(value)
    return value


def with_repository(value: Any, repository: str, stack: str = "<stack>") -> Any:
    """``value`` with the stack repository's URL in place of ``STACK_REPOSITORY``; ValueError when it is
    needed and not given, naming the flag and the stack output that holds the URL (it contains the AWS
    account id, which no stack file holds) and the stack field that names another image instead. At
    deployment the program fills in the repository's Output the same way (``map_images``)."""
    def fill(image: str) -> str:
        if not repository:
            raise ValueError(f"image {image!r} is in stack {stack}'s own ECR repository, whose URL only the deployed "
                             f"stack knows: pass --repository \"$(pulumi stack output {REPOSITORY_OUTPUT} --stack "
                             f"{stack})\", or name a full image reference for the profile under "
                             f"versions.software.images in the stack file")
        return image.replace(STACK_REPOSITORY, repository, 1)
    return map_images(value, fill)
