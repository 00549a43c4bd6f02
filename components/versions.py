"""Every pinned version in one visible place: Kubernetes, EKS add-ons, Helm charts, images.

These are the defaults. A stack overrides any of them under ``versions:``; unknown keys are
rejected like everywhere else in the stack schema.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


class _Pinned(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)


class Addons(_Pinned):
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


class Chart(_Pinned):
    chart: str
    version: str
    repo: str


class Charts(_Pinned):
    efa_device_plugin: Chart = Chart(chart="aws-efa-k8s-device-plugin", version="v0.5.30",
                                     repo="https://aws.github.io/eks-charts")
    nvidia_device_plugin: Chart = Chart(chart="nvidia-device-plugin", version="0.20.0",
                                        repo="https://nvidia.github.io/k8s-device-plugin")


class Versions(_Pinned):
    kubernetes: str = Field("1.35", pattern=r"^1\.\d+$")
    addons: Addons = Addons()
    charts: Charts = Charts()
