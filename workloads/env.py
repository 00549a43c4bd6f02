"""The EFA / NCCL / DeepEP environment of a GPU pod, by instance family and DeepEP mode.

Sources: AWS's Miles/SLIME test cases on EKS (EFA and NCCL variables), DeepEP's README (V2 on
NCCL GIN, V1 on NVSHMEM), NCCL's GIN backend types (0 none, 2 proxy, 3 GDAKI, 5 EFA GDA in the
Amazon NCCL line), and Miles' own launcher (runtime env of every Ray worker).
"""

from __future__ import annotations

from stackconfig.stack import Pool

from .layout import GIN_TYPE, DeepEP
from .settings import DeepEPVersion

NVLS_GPUS = frozenset({"H100", "H200", "B200", "B300"})
"""NVLink SHARP (NVLS) needs third-generation NVSwitch: Hopper and newer, not A100."""

EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "RDMAV_FORK_SAFE": "1",
    # The short name: a full path to the plugin silently falls back to TCP sockets.
    "NCCL_NET_PLUGIN": "ofi",
}
"""No NCCL_PROTO=Simple: only aws-ofi-nccl 1.5.0 and older need it (its README); the image carries a
newer one, where LL/LL128 are safe and faster for small messages."""
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "^lo", "NCCL_DEBUG": "WARN"}


def deepep_env(deepep: DeepEP) -> dict[str, str]:
    """V2 (SGLang ``deepep_v2``, ``ElasticBuffer``): NCCL GIN through aws-ofi-nccl's GIN plugin, type 2
    (CPU proxy) or 5 (GPU-initiated EFA). NCCL_CUMEM_ENABLE is set in the pod so SGLang (which keeps a
    user-set value) and Miles' train actors (which copy it) agree. V1 runs within one node in normal
    mode over NVLink: no NVSHMEM transport to configure (its internode path needs IBGDA, not on EFA)."""
    if deepep.version is DeepEPVersion.V2:
        return {"NCCL_GIN_ENABLE": "1", "NCCL_GIN_TYPE": GIN_TYPE[deepep.gin_backend], "NCCL_CUMEM_ENABLE": "1"}
    return {}


def gpu_env(pool: Pool, efa: int, deepep: DeepEP) -> dict[str, str]:
    """Environment of a trainer or rollout pod on ``pool`` with ``efa`` devices."""
    env = dict(NCCL_ENV)
    env["NCCL_NVLS_ENABLE"] = "1" if pool.instance.gpu_model in NVLS_GPUS else "0"
    if efa:
        env.update(EFA_ENV)
        env.update(deepep_env(deepep))
    return env


def runtime_env(pool: Pool) -> dict[str, str]:
    """``env_vars`` of the Ray job (what Miles' launcher passes to every Ray worker)."""
    return {
        "PYTHONUNBUFFERED": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "NCCL_NVLS_ENABLE": "1" if pool.instance.gpu_model in NVLS_GPUS else "0",
        "PYTHONPATH": "/root/Megatron-LM",
    }
