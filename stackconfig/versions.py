"""Every pinned version in one visible place: Kubernetes, EKS add-ons, Helm charts, images.

These are the defaults. A stack overrides any of them under ``versions:``; unknown keys are
rejected like everywhere else in the stack schema.
"""

from __future__ import annotations

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

    Reference set: CUDA 13.0, PyTorch 2.12, NCCL 2.31, EFA installer 1.49, DeepEP 2.0, SGLang 0.5.17,
    Miles 0.1.0. Two of its facts pull against each other, and the defaults below resolve them:
    - DeepEP V2's GPU-initiated EFA backend (NCCL GIN type 5) needs EFA installer >= 1.50; with 1.49
      DeepEP V2 runs on NCCL's CPU-proxy GIN backend (type 2). The default keeps 1.49 (proxy); setting
      ``efaInstaller: "1.50.0"`` (and an image built with it) switches to the GPU-initiated backend.
    - Miles v0.1.0's release image carries SGLang from Miles' ``sglang-miles`` branch (0.5.16 line).
      The default image is that release; every ``--sglang-*`` flag the workloads generate is checked
      against SGLang ``sglang``'s own ServerArgs (the pinned wheel) and against the flags Miles v0.1.0's
      examples pass, so the same argv runs on either. An upstream 0.5.17 build is a one-line ``image``.
    The Miles release image has no EFA userspace (libfabric, aws-ofi-nccl): for EFA, build
    ``workloads/image/Dockerfile`` (EFA installer ``efaInstaller`` on top of ``image``) and set ``image``.
    """

    cuda: str = "13.0"
    pytorch: str = "2.12"
    nccl: str = Field("2.31", pattern=r"^\d+\.\d+(\.\d+)?$")
    efa_installer: str = Field("1.49.0", pattern=r"^\d+\.\d+(\.\d+)?$")
    deepep: str = Field("2.0", pattern=r"^\d+\.\d+(\.\d+)?$")
    sglang: str = Field("0.5.17", pattern=r"^\d+\.\d+\.\d+$")
    miles: str = "0.1.0"
    ray: str = "2.53.0"
    """Ray in the image (KubeRay ``rayVersion``); head and workers must all run the same one."""
    image: str = "radixark/miles:v0.1.0"
    """Image of every Ray pod (head and workers must share Ray and Python versions)."""
    reward_image: str | None = None
    """Image of the reward service; default: ``image``."""


class Versions(SchemaModel):
    kubernetes: str = Field("1.35", pattern=r"^1\.\d+$")
    addons: Addons = Addons()
    charts: Charts = Charts()
    software: SoftwareStack = SoftwareStack()
