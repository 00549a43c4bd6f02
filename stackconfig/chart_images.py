"""Where each pinned chart's templates take its images from: the values that name them and how a
template joins them. ``values`` writes the pins (``versions.CHART_IMAGES``, localized into the
stack's registry) into a chart's values; ``rendered`` reads back the images the chart's templates
render from any values, so the image inventory and the tests judge what the pods would pull.

Read from each pinned chart's templates (not rendered here: no helm binary offline):
- kuberay-operator 1.7.0 (ray-project/kuberay v1.7.0) templates/deployment.yaml:68
  ``{{ image.repository }}:{{ image.tag }}``;
- volcano 1.15.1 (volcano-sh/volcano v1.15.1, installer/helm/chart/volcano) templates/controllers.yaml:174,
  scheduler.yaml:198, admission.yaml:156 and the admission-init Job admission-init.yaml:110:
  ``{{ basic.image_registry }}/{{ basic.<x>_image_name }}:{{ basic.<x>_image_tag_version | default
  basic.image_tag_version }}`` (the agent, agent scheduler and metrics templates are off by default);
- nvidia-device-plugin 0.20.0 (NVIDIA/k8s-device-plugin v0.20.0) templates/_helpers.tpl:83-86
  ``{{ image.repository }}:{{ image.tag | default v<appVersion> }}`` (GFD and NFD are off by default);
- aws-efa-k8s-device-plugin v0.5.30 (aws/eks-charts bfe91c4b) templates/daemonset.yaml:66
  ``{{ image.repository }}:{{ image.tag | default appVersion }}``;
- aws-fsx-csi-driver 1.17.0 (kubernetes-sigs/aws-fsx-csi-driver 5b227125) templates/node-daemonset.yaml:64,109,134
  and controller-deployment.yaml:45,98,116,133: ``printf "%s%s:%s" image.containerRegistry
  <repository> <tag>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .images import STACK_REGISTRY


@dataclass(frozen=True)
class Slot:
    pin: str
    """The pin's name in ``versions.CHART_IMAGES``."""
    repository: str
    tag: str
    registry: str | None = None
    """The value a template puts before the repository, where the chart has one."""
    separator: str = "/"


def _fsx(pin: str, at: str) -> Slot:
    return Slot(pin, f"{at}.repository", f"{at}.tag", "image.containerRegistry", "")


def _volcano(pin: str, part: str) -> Slot:
    return Slot(pin, f"basic.{part}_image_name", f"basic.{part}_image_tag_version", "basic.image_registry")


SLOTS: Mapping[str, tuple[Slot, ...]] = {
    "kuberay_operator": (Slot("kuberay-operator", "image.repository", "image.tag"),),
    "volcano": (_volcano("volcano-controller-manager", "controller"), _volcano("volcano-scheduler", "scheduler"),
                _volcano("volcano-webhook-manager", "admission")),
    "nvidia_device_plugin": (Slot("nvidia-device-plugin", "image.repository", "image.tag"),),
    "efa_device_plugin": (Slot("efa-device-plugin", "image.repository", "image.tag"),),
    "fsx_csi_driver": (_fsx("fsx-csi-driver", "image"),
                       _fsx("fsx-csi-node-driver-registrar", "sidecars.nodeDriverRegistrar.image"),
                       _fsx("fsx-csi-livenessprobe", "sidecars.livenessProbe.image"),
                       _fsx("fsx-csi-provisioner", "sidecars.provisioner.image"),
                       _fsx("fsx-csi-resizer", "sidecars.resizer.image")),
}
"""Per chart (the ``versions.charts`` field), every image its templates render with our values."""


def _parts(image: str, registry: bool) -> tuple[str, str, str]:
    """(registry, repository, tag) of a localized image with a tag: the registry is the host, or
    the stack's cache folder, when the chart takes it apart; else ``""``."""
    at = image.find("@")
    name = image if at < 0 else image[:at]
    colon = name.rfind(":")
    if colon <= name.rfind("/"):
        raise ValueError(f"{image!r}: a chart's template joins repository and tag: the pin needs a tag")
    repository, tag = image[:colon], image[colon + 1:]
    if not registry:
        return "", repository, tag
    keep = 2 if repository.startswith(STACK_REGISTRY + "/") else 1
    parts = repository.split("/")
    return "/".join(parts[:keep]), "/".join(parts[keep:]), tag


def _put(values: dict, key: str, value: str) -> None:
    *path, last = key.split(".")
    node = values
    for part in path:
        node = node.setdefault(part, {})
    if node.get(last, value) != value:
        raise ValueError(f"{key}: the chart's images need both {node[last]!r} and {value!r} there")
    node[last] = value


def values(chart: str, images: Mapping[str, str]) -> dict:
    """The values that make ``chart`` render exactly ``images`` (pin name -> localized image)."""
    out: dict[str, Any] = {}
    for slot in SLOTS[chart]:
        registry, repository, tag = _parts(images[slot.pin], slot.registry is not None and slot.separator == "/")
        if slot.registry is not None:
            _put(out, slot.registry, registry)
        _put(out, slot.repository, repository)
        _put(out, slot.tag, tag)
    return out


def _get(values: Mapping, key: str) -> str:
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ValueError(f"{key}: not set in the chart's values; every image the chart renders is pinned")
        node = node[part]
    return node


def rendered(chart: str, chart_values: Mapping) -> dict[str, str]:
    """The images ``chart``'s templates render from ``chart_values``, by slot."""
    out = {}
    for slot in SLOTS[chart]:
        registry = _get(chart_values, slot.registry) if slot.registry else ""
        prefix = f"{registry}{slot.separator}" if registry else ""
        out[slot.pin] = f"{prefix}{_get(chart_values, slot.repository)}:{_get(chart_values, slot.tag)}"
    return out
