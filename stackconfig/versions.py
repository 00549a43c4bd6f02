"""Every pinned version in one visible place: Kubernetes, EKS add-ons, Helm charts, images.

These are the defaults. A stack overrides any of them under ``versions:``; unknown keys are
rejected like everywhere else in the stack schema.
"""

from __future__ import annotations

from typing import Any, Callable

import re

from pydantic import Field, field_validator

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
    """The GPU software set the workloads are generated for, and the images that carry it.

    The set ``workloads/image/Dockerfile`` builds (its ARGs carry the same pins), and why it differs
    from the earlier seed (SGLang 0.5.17, Miles 0.1.0, DeepEP 2.0, EFA installer 1.49):
    - Miles 49cac7b5 (radixark/miles #2682): resume restores the rollout counter; v0.1.0 restarts it.
    - SGLang: Miles' ``sglang-miles`` fork on the 0.5.16 line (``sglang_fork``), on Miles' base image;
      0.5.17 stock cannot run Miles, and neither can 0.5.19, the first with ``deepep_v2``.
    - EFA installer 1.50.0: aws-ofi-nccl 1.21.1 (NET/OFI; also the first plugin with GIN).
    - ``deepep`` / ``nccl``: the DeepEP V2 commit and NCCL a V2 image needs (NCCL 2.31.2 is what
      aws-ofi-nccl's GIN is tested with); V2 stays refused until Miles runs on SGLang >= 0.5.19.
    The Miles release image (``radixark/miles:v0.1.0``) has no EFA userspace (no aws-ofi-nccl): the
    GPU pods' preflight refuses it on EFA pools.
    """

    cuda: str = "13.0"
    pytorch: str = "2.11"
    """Torch of Miles' base image (lmsysorg/sglang v0.5.16, CUDA 13); the image build prints it."""
    nccl: str = Field("2.31.2", pattern=r"^\d+\.\d+(\.\d+)?$")
    """The NCCL a DeepEP V2 image needs (GIN over aws-ofi-nccl); the preflight checks it only then."""
    efa_installer: str = Field("1.50.0", pattern=r"^\d+\.\d+(\.\d+)?$")
    deepep: str = Field("dd758caf451848bd150e1046af3d0a73e5fff38d", pattern=r"^[0-9a-f]{40}$")
    """deepseek-ai/DeepEP commit (v2.1.0): ElasticBuffer and the legacy Buffer."""
    sglang: str = Field("0.5.16", pattern=r"^\d+\.\d+\.\d+$")
    """The SGLang release line the image's SGLang follows (its flags and MoE rules are checked against
    this release's wheel). Miles needs its own fork: ``sglang_fork``."""
    sglang_fork: str = Field("cb05a44f35a7c9e27e46d74112cc841ca674ef43", pattern=r"^[0-9a-f]{40}$")
    """sgl-project/sglang ``sglang-miles`` commit Miles' image installs (radixark/miles release-lock.json at
    286680d1e; docker/Dockerfile:19-20, 203-215 at 49cac7b5). Stock SGLang lacks the weight-sync API Miles
    imports (ParameterMapper, ParallelismContext), so DeepEP V2 (``deepep_v2``, SGLang >= 0.5.19) is not
    available with this Miles revision."""
    miles: str = Field("49cac7b52507fe6953952c3e1d1ad05a01b144a4", pattern=r"^[0-9a-f]{40}$")
    """radixark/miles commit: 49cac7b5 (PR #2682) resumes the rollout counter from the checkpoint; the
    v0.1.0 tag sets start_rollout_id = 0 in bridge mode even with --load (miles/utils/arguments.py)."""
    megatron: str = Field("37f91617b95c1ef4f01fc66210e502572ad97fda", pattern=r"^[0-9a-f]{40}$")
    """radixark/Megatron-LM commit (the one Miles v0.1.0's release-lock.json pins; 49cac7b5 pins none)."""
    ray: str = "2.53.0"
    """Ray in the image (KubeRay ``rayVersion``); head and workers must all run the same one."""
    image: str | None = None
    """Image of every Ray pod (head and workers must share Ray and Python versions). Default: the
    recipe's build (``workloads/image``) in the stack's own ECR repository, ``<imageRepository>:<imageTag>``,
    so pods pull from ECR in the cluster's region through its endpoints, not from Docker Hub."""
    image_tag: str = Field("miles-49cac7b5-efa1.50.0", pattern=r"^[\w][\w.-]{0,127}$")
    """Tag the recipe's build is pushed under in the stack's repository (``workloads/image/README.md``)."""
    reward_image: str | None = None
    """Image of the reward service; default: ``image``."""
    dcgm: str = Field("4.5.2-1-ubuntu22.04", pattern=r"^\d+\.\d+\.\d+-\d+-[\w.]+$")
    """NVIDIA DCGM 4.5.2 image tag (``nvcr.io/nvidia/cloud-native/dcgm``) the GPU burn-in runs
    ``dcgmi diag`` from. NGC is no ECR pull-through upstream
    (``components/registry.py``): copy it into the stack repository as ``dcgm-<tag>`` (README, Burn-in)."""


STACK_REPOSITORY = "{imageRepository}"
"""Stands for the stack's ECR repository URL in image references until registration fills it in."""


def dcgm_image(software: SoftwareStack) -> str:
    """The DCGM image the burn-in pulls: ``dcgm-<tag>`` in the stack repository."""
    return f"{STACK_REPOSITORY}:dcgm-{software.dcgm}"


def workload_image(software: SoftwareStack) -> str:
    """The image every Ray pod runs: the stack's setting, else the recipe's tag in the stack repository."""
    return software.image or f"{STACK_REPOSITORY}:{software.image_tag}"


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


def with_repository(value: Any, repository: str) -> Any:
    """``value`` with the stack repository's URL in place of ``STACK_REPOSITORY``; ValueError when it is
    needed and not given (``pulumi stack output imageRepository``). At deployment the program fills
    in the repository's Output the same way (``map_images``)."""
    def fill(image: str) -> str:
        if not repository:
            raise ValueError("the stack runs the default image in its own ECR repository: pass --repository "
                             "\"$(pulumi stack output imageRepository)\" (or set versions.software.image)")
        return image.replace(STACK_REPOSITORY, repository, 1)
    return map_images(value, fill)
