"""The NVIDIA container runtime's device selection on GPU nodes: only what the device plugin allocated.

The EKS AL2023 NVIDIA AMI installs the ``nvidia-container-toolkit`` RPM unchanged
(awslabs/amazon-eks-ami@81fec2e:templates/al2023/provisioners/install-nvidia-driver.sh:265) and makes
``nvidia`` containerd's default runtime (nodeadm/internal/containerd/runtime_config_nvidia.go). The RPM
writes /etc/nvidia-container-runtime/config.toml with the toolkit's defaults (NVIDIA/nvidia-container-toolkit
v1.20.0 packaging/rpm/SPECS/nvidia-container-toolkit.spec:102-104), among them
``accept-nvidia-visible-devices-envvar-when-unprivileged = true`` (api/config/v1/config.go:106): the runtime
then gives any container that sets ``NVIDIA_VISIBLE_DEVICES=all`` every GPU of the node, GPU request or
not (internal/config/image/cuda_image.go:258-292).

Both settings together, as the device plugin's docs ask (NVIDIA/k8s-device-plugin v0.20.0 README,
``DEVICE_LIST_STRATEGY``; and NVIDIA's "Preventing unprivileged access to GPUs in Kubernetes"):

- on the node: ``accept-nvidia-visible-devices-envvar-when-unprivileged = false`` and
  ``accept-nvidia-visible-devices-as-volume-mounts = true`` (the runtime reads the allocated devices from
  the mounts under /var/run/nvidia-container-devices, cuda_image.go:265-271, and ignores the variable
  in an unprivileged container, :281-289);
- in the device plugin: ``deviceListStrategy: volume-mounts`` (``components.device_plugins``).
"""

from __future__ import annotations

TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
TOOLKIT_SETTINGS = {"accept-nvidia-visible-devices-envvar-when-unprivileged": "false",
                    "accept-nvidia-visible-devices-as-volume-mounts": "true"}
"""The keys of the toolkit's config.toml (api/config/v1/config.go:64-65) and their values."""


def toolkit_script() -> str:
    """The ``text/x-shellscript`` part of every GPU pool: sets ``TOOLKIT_SETTINGS`` with ``nvidia-ctk config
    --in-place --set key=value`` (cmd/nvidia-ctk/config/config.go:75-100), before kubelet starts
    (``nodeadm-run.service`` is ``After=cloud-final.service``); the runtime reads the file for every
    container it creates, so nothing needs a restart. Fails the boot script if the file ends up otherwise."""
    sets = " ".join(f"--set {k}={v}" for k, v in TOOLKIT_SETTINGS.items())
    checks = "".join(f"grep -qE '^{k} *= *{v}$' {TOOLKIT_CONFIG}\n" for k, v in TOOLKIT_SETTINGS.items())
    return ("#!/bin/sh\n# rl.platform: the NVIDIA runtime injects only the GPUs a pod was allocated "
            "(components/gpu_runtime.py).\nset -eu\n"
            f"nvidia-ctk config --config-file={TOOLKIT_CONFIG} --in-place {sets}\n{checks}")
