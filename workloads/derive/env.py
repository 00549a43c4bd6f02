"""The EFA / NCCL / DeepEP environment of a GPU pod, by instance family and DeepEP mode.

Sources: AWS's Miles/SLIME test cases on EKS (EFA and NCCL variables), DeepEP's README (V2 on
NCCL GIN, V1 on NVSHMEM), NCCL's GIN backend types (0 none, 2 proxy, 3 GDAKI, 5 EFA GDA in the
Amazon NCCL line), and Miles' own launcher (runtime env of every Ray worker). Whether NCCL may use
NVLink SHARP is the instance catalog's (``InstanceType.gpu.nvls``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from stackconfig.stack import Pool

from workloads.derive.argv import rollout_budget
from workloads.derive.deepep import DeepEP, GIN_TYPE, moe_backend
from workloads.derive.sglang_budget import DEEPEP_V2_SMS_ENV, HYBRID_NUM_SMS
from workloads.schema.run import DeepEPVersion, GinBackend

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

EFA_ENV = {
    "FI_PROVIDER": "efa",
    # NCCL loads libnccl-net-ofi.so for the short name (NVIDIA/nccl v2.27.5-1 src/plugin/plugin_open.cc:76-78);
    # a full path would work too: every pinned NCCL dlopens the value as given first (:63-67; v2.28.9-1 :69-75).
    "NCCL_NET_PLUGIN": "ofi",
}
"""aws-ofi-nccl 1.21's doc/efa-env-var.md: FI_EFA_FORK_SAFE is not needed (the plugin sets it),
RDMAV_FORK_SAFE must not be used, FI_EFA_USE_DEVICE_RDMA is not to be set with libfabric >= 1.18 and
aws-ofi-nccl >= 1.7 (libfabric aborts on an EFA device without RDMA when it is). No NCCL_PROTO=Simple:
only aws-ofi-nccl 1.5.0 and older need it."""
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "^lo", "NCCL_DEBUG": "WARN", "NCCL_CUMEM_ENABLE": "1"}
"""NCCL_CUMEM_ENABLE=1 on every GPU pod, whatever the all-to-all. NCCL's default is auto (-2,
NVIDIA/nccl@5067397c src/misc/cudawrap.cc:16); with cuMem NCCL allocates through cuMem objects, which
NVLS multicast buffers are (src/transport/nvls.cc:54-121), and enables symmetric-memory windows
(src/init.cc:1674) and runtime connection (:1040-1049, :1552). SGLang writes 0 when the variable is
unset (sglang 0.5.16 / 0.5.19 srt/entrypoints/engine.py ``_set_envs_and_config``, :1260-1261 /
:1658-1659) while its deepep_v2 hook sets 1 (0.5.19 srt/arg_groups/moe_hook.py:191-192, "ElasticBuffer
requires CUMEM"). Left to them, a DeepEP V2 arm alone would run NCCL on cuMem (and NVLS); set here,
the arms compare like for like, and SGLang (which keeps a user-set value) and Miles' train actors
(which copy it) agree."""
SOCKETS_ENV = {"NCCL_NET": "Socket", "NCCL_NET_PLUGIN": "none"}
"""``fabric: sockets``: NCCL's own TCP transport between nodes (NCCL_NET picks the network by name;
NCCL_NET_PLUGIN=none loads no plugin), so a run can be measured without EFA on the same pods."""
GDA_ENV = {"NCCL_SYM_GIN_KERNELS_ENABLE": "0"}
"""GPU-initiated EFA (GIN type 5) also needs NCCL's symmetric GIN kernels off
(aws/aws-ofi-nccl doc/gin-getting-started.md)."""


def deepep_env(deepep: DeepEP) -> dict[str, str]:
    """V2 (SGLang ``deepep_v2``, ``ElasticBuffer``): NCCL GIN through aws-ofi-nccl's GIN plugin, type 2
    (CPU proxy) or 5 (GPU-initiated EFA); ElasticBuffer's NCCL_CUMEM_ENABLE=1 is in every GPU pod
    (``NCCL_ENV``). V1 runs within one node in normal
    mode over NVLink: no NVSHMEM transport to configure (its internode path needs IBGDA, not on EFA)."""
    if deepep.version is DeepEPVersion.V2:
        env = {"NCCL_GIN_ENABLE": "1", "NCCL_GIN_TYPE": GIN_TYPE[deepep.gin_backend]}
        return {**env, **(GDA_ENV if deepep.gin_backend is GinBackend.GPU else {})}
    return {}


JIT_CACHE_DIR = "cache/deep_ep"
"""Under the shared file system's mount: DeepEP V2's JIT kernels, one directory per image."""


def deepep_runtime_env(deepep: DeepEP, mount: str, image: str) -> dict[str, str]:
    """DeepEP V2's own variables (none for V1 or off), for the rollout pods that run it.

    ``EP_JIT_CACHE_DIR``: DeepEP compiles its kernels at first use into ``$HOME/.deep_ep`` unless this
    is set (deepseek-ai/DeepEP csrc/jit/compiler.hpp ``Compiler()``), so every pod start compiled them
    again. On FSx they survive the pod; ``build()`` compiles into a temporary directory, fsyncs and
    renames the directory into place, written for distributed file systems (ibid.). Its key hashes
    the kernel's code, the flags and the NVCC version, not the contents of the headers it includes,
    so each image (by digest, else by tag) gets its own directory."""
    if deepep.version is not DeepEPVersion.V2:
        return {}
    key = hashlib.sha256(image.encode()).hexdigest()[:16]
    return {"EP_JIT_CACHE_DIR": f"{mount.rstrip('/')}/{JIT_CACHE_DIR}/{key}"}


def nvls_enable(pool: Pool) -> str:
    """``NCCL_NVLS_ENABLE``: 1 where the pool's GPUs have NVLink SHARP (the catalog's GPU record), else 0."""
    return "1" if pool.instance.gpu.nvls else "0"


def gpu_env(pool: Pool, efa: int, deepep: DeepEP | None, fabric: str = "efa") -> dict[str, str]:
    """Environment of a trainer or rollout pod on ``pool`` with ``efa`` devices; ``deepep`` None: the pod
    runs no DeepEP (the trainer: ``workloads.derive.moe_backend.choose``); ``fabric: sockets`` keeps NCCL
    off EFA (DeepEP is off then: ``workloads.schema.settings.RunBase``)."""
    env = dict(NCCL_ENV)
    env["NCCL_NVLS_ENABLE"] = nvls_enable(pool)
    if efa and fabric == "sockets":
        env.update(SOCKETS_ENV)
    elif efa:
        env.update(EFA_ENV)
        env.update(deepep_env(deepep) if deepep else {})
    return env


def runtime_env(pool: Pool) -> dict[str, str]:
    """``env_vars`` of the Ray job (what Miles' launcher passes to every Ray worker)."""
    return {
        "PYTHONUNBUFFERED": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "NCCL_NVLS_ENABLE": nvls_enable(pool),
        "PYTHONPATH": "/root/Megatron-LM",
    }


DIRECT_MODE_ENV = {"EP_DISABLE_GIN": "1"}
"""DeepEP V2 in direct mode (an engine within one node) moves tokens over NVLink only, but ElasticBuffer
still asks NCCL for GIN unless EP_DISABLE_GIN is set: amazon-contributing/DeepEP 2542d964
csrc/kernels/backend/nccl.cu (``num_ranks > 1 and not gin_disabled``; the direct branch keeps upstream's
FULL-connection requirements, VA and strong signals included, which EFA-GDA does not offer: only the
hybrid unordered kernels clear ``ginVaSignalsRequired``/``ginStrongSignalsRequired``), so it asserts
"NCCL GIN is unavailable". Honoured since deepseek-ai/DeepEP#630 (fixing #629: EP_DISABLE_GIN=1 did not
bypass the GIN check for single-node EP)."""


def rollout_env(cfg: "ProgramConfig") -> dict[str, str]:
    """What the rollout pods add for SGLang: DeepEP V2's per-rank token capacity
    (``workloads.derive.sglang_budget``); for engines within one node GIN off, across nodes the SM count
    (``sglang_budget.HYBRID_NUM_SMS``)."""
    budget = rollout_budget(cfg)
    if budget is None or moe_backend(cfg).moe_a2a_backend != "deepep_v2":
        return {}
    direct = moe_backend(cfg).deepep_v2_mode == "direct"
    return {**budget.env(), **(DIRECT_MODE_ENV if direct else {DEEPEP_V2_SMS_ENV: str(HYBRID_NUM_SMS)})}
