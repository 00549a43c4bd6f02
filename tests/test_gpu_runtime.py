"""A container that asks for no GPU gets none, whatever ``NVIDIA_VISIBLE_DEVICES`` it sets (issue 26 item 3).

Offline, at the level of what the platform renders: the GPU pools' user data (the toolkit settings the
boot script applies to the AMI's default config.toml) and the NVIDIA device plugin's Helm values, fed to
a model of the NVIDIA runtime's device choice (NVIDIA/nvidia-container-toolkit v1.20.0
internal/config/image/cuda_image.go:258-292). Not checked here: that the AMI's toolkit version behaves
as v1.20.0 does, the chart renders the env, and containerd passes the plugin's mounts (needs a GPU node)."""

from __future__ import annotations

import base64
import re
from email import message_from_string

import pytest
from conftest import load

from components.device_plugins import gpu_taints, nvidia_plugin_values
from components.node_pool import user_data

TOOLKIT_DEFAULTS = {"accept-nvidia-visible-devices-envvar-when-unprivileged": "true",
                    "accept-nvidia-visible-devices-as-volume-mounts": "false"}
"""What the RPM writes (api/config/v1/config.go:106, toml.go:255-256, v1.20.0)."""
NODE_GPUS = [f"GPU-{i}" for i in range(8)]


def node_config(pool) -> dict[str, str]:
    """The toolkit config of a node of ``pool`` once its user data ran: the defaults, then every
    ``nvidia-ctk config ... --set key=value`` of its shell parts."""
    mime = message_from_string(base64.b64decode(user_data(pool)).decode())
    config = dict(TOOLKIT_DEFAULTS)
    for part in mime.walk():
        if part.get_content_type() == "text/x-shellscript":
            for line in part.get_payload().splitlines():
                if line.startswith("nvidia-ctk config"):
                    config.update(re.findall(r"--set ([\w-]+)=(\S+)", line))
    return config


def allocated(values: dict, gpus: int) -> tuple[dict[str, str], list[str]]:
    """(env, device mounts) the plugin gives a container allocated ``gpus`` GPUs under the chart's
    ``deviceListStrategy`` (default envvar; README ``DEVICE_LIST_STRATEGY``)."""
    devices = NODE_GPUS[:gpus]
    if not devices:
        return {}, []
    if values.get("deviceListStrategy", "envvar") == "volume-mounts":
        return {}, devices
    return {"NVIDIA_VISIBLE_DEVICES": ",".join(devices)}, []


def visible(config: dict[str, str], env: dict[str, str], mounts: list[str], privileged: bool = False) -> list[str]:
    """cuda_image.go:258-292: mounts first when accepted, else the variable if privileged or accepted."""
    if config["accept-nvidia-visible-devices-as-volume-mounts"] == "true" and mounts:
        return mounts
    requested = env.get("NVIDIA_VISIBLE_DEVICES", "")
    if not requested or requested in ("void", "none"):
        return []
    if privileged or config["accept-nvidia-visible-devices-envvar-when-unprivileged"] == "true":
        return NODE_GPUS if requested == "all" else requested.split(",")
    return []


@pytest.mark.parametrize("stack", ["p5en-shared", "p6-b200"])
def test_a_container_with_no_gpu_request_and_visible_devices_all_gets_no_gpu(stack):
    cfg = load(stack)
    values = nvidia_plugin_values(gpu_taints(cfg.pools), cfg.versions.charts.image("nvidia-device-plugin"))
    for pool in (p for p in cfg.pools if p.instance.is_gpu):
        config = node_config(pool)
        env, mounts = allocated(values, 0)
        assert visible(config, {**env, "NVIDIA_VISIBLE_DEVICES": "all"}, mounts) == [], pool.name
        env, mounts = allocated(values, pool.instance.gpus)  # a run's pod still gets its own GPUs
        assert visible(config, {**env, "NVIDIA_VISIBLE_DEVICES": "all"}, mounts) == NODE_GPUS[:pool.instance.gpus]


def test_only_gpu_pools_carry_the_toolkit_settings():
    cfg = load("p5en-shared")
    for pool in cfg.pools:
        assert (node_config(pool) != TOOLKIT_DEFAULTS) is pool.instance.is_gpu, pool.name
