"""Node allocatable and pod sizes, derived from the instance catalog.

The allocatable model (what the scheduler can place on one node of a pool):

- **CPU**: vCPUs minus the EKS AL2023 (nodeadm) ``kubeReserved`` CPU: 6 % of the first core, 1 % of
  the second, 0.5 % of the third and fourth, 0.25 % of every further core. No ``systemReserved``.
- **Memory**: the catalog's GiB less the VM overhead (7.5 %, Karpenter's default
  ``VM_MEMORY_OVERHEAD_PERCENT``: the kernel's MemTotal is below the nominal size), minus
  ``kubeReserved`` memory (255 MiB + 11 MiB per pod the node may run, EKS formula), minus the hard
  eviction threshold (``memory.available`` 100 MiB), minus the pre-allocated huge pages.
- **Huge pages**: EFA-enabled nodes pre-allocate 5128 2-MiB pages (the EFA driver's setting on the
  EKS AL2023 NVIDIA AMI): ``hugepages-2Mi`` allocatable 10256 Mi, taken out of memory.
- **GPUs**: the catalog's count. **EFA devices**: the pool's EFA count, or the count the stack says
  the device plugin advertises (``workloads.efaDevices``). **Pods**: the pool's max pods.

Every node also runs DaemonSets (VPC CNI, kube-proxy, Pod Identity agent, node monitoring agent,
CloudWatch agent, Fluent Bit, DCGM exporter, NVIDIA and EFA device plugins, FSx CSI node). Their
requests are kept out of our pods' reach with ``DAEMONSET_RESERVE`` per node, a ceiling of the
pinned add-ons' requests, so a pod sized to "the whole node" still schedules.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from stackconfig.stack import Pool
from components.network import pods_per_node

MI = 1024 ** 2
GI = 1024 ** 3
G = 1000 ** 3

VM_MEMORY_OVERHEAD = 0.075
EVICTION_HARD_MI = 100
KUBE_RESERVED_BASE_MI = 255
KUBE_RESERVED_PER_POD_MI = 11
EFA_HUGEPAGES_2MI = 5128
"""2-MiB pages an EFA node pre-allocates."""
POD_HUGEPAGES_MI = 5120
"""What each EFA pod requests (hugepages-2Mi: 5120Mi), within the node's 10256 Mi."""
DAEMONSET_RESERVE_MILLICPU = 1000
DAEMONSET_RESERVE_MI = 2048

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"


def kube_reserved_millicpu(vcpu: int) -> int:
    """EKS kubeReserved CPU for a node with ``vcpu`` cores, in millicores."""
    cores = [(1, 60), (1, 10), (2, 5), (max(vcpu - 4, 0), 2.5)]
    reserved, left = 0.0, vcpu
    for count, per_core in cores:
        take = min(count, left)
        reserved += take * per_core
        left -= take
    return int(math.ceil(reserved))


@dataclass(frozen=True)
class Allocatable:
    pool: str
    millicpu: int
    memory: int
    """Bytes."""
    hugepages: int
    """Bytes of 2-MiB pages."""
    gpus: int
    efa: int
    pods: int

    def as_dict(self) -> dict[str, int]:
        return {"cpu": self.millicpu, "memory": self.memory, HUGEPAGES: self.hugepages, GPU: self.gpus,
                EFA: self.efa, "pods": self.pods}


def efa_devices(pool: Pool, advertised: dict[str, int] | None = None) -> int:
    """EFA devices a pod on ``pool`` requests: all the node advertises."""
    if pool.efa_devices and advertised and pool.name in advertised:
        return min(advertised[pool.name], pool.efa_devices)
    return pool.efa_devices


def allocatable(pool: Pool, advertised: dict[str, int] | None = None) -> Allocatable:
    it = pool.instance
    pods = pods_per_node(pool)
    hugepages = EFA_HUGEPAGES_2MI * 2 * MI if pool.efa_devices else 0
    capacity = int(it.memory_gib * GI * (1 - VM_MEMORY_OVERHEAD))
    reserved = (KUBE_RESERVED_BASE_MI + KUBE_RESERVED_PER_POD_MI * pods + EVICTION_HARD_MI) * MI
    return Allocatable(pool=pool.name, millicpu=it.vcpu * 1000 - kube_reserved_millicpu(it.vcpu),
                       memory=capacity - reserved - hugepages, hugepages=hugepages, gpus=it.gpus,
                       efa=efa_devices(pool, advertised), pods=pods)


def usable(alloc: Allocatable) -> tuple[int, int]:
    """(millicpu, memory bytes) left for our pods once the DaemonSets have theirs."""
    return alloc.millicpu - DAEMONSET_RESERVE_MILLICPU, alloc.memory - DAEMONSET_RESERVE_MI * MI


def whole_node(alloc: Allocatable, fraction: float = 1.0) -> tuple[int, int]:
    """A pod taking ``fraction`` of a node: whole cores and whole decimal gigabytes.

    Memory is in G (10^9 bytes) so the same size is expressible in TorchX's MB-based Resource.
    """
    mcpu, mem = usable(alloc)
    return int(mcpu * fraction) // 1000, int(mem * fraction) // G


# --- quantities -------------------------------------------------------------------------------

_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def parse_quantity(q: str | int | float) -> float:
    """A Kubernetes quantity as a number (bytes, cores, count)."""
    if isinstance(q, (int, float)):
        return float(q)
    m = re.fullmatch(r"([+-]?\d+(?:\.\d+)?)([a-zA-Z]{0,2})", q.strip())
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {q!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def millicpu(q: str | int | float) -> int:
    return int(round(parse_quantity(q) * 1000))


def effective_requests(resources: dict) -> dict[str, float]:
    """A container's requests as the API server defaults them: a limit with no request is the request."""
    limits = {k: parse_quantity(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {k: parse_quantity(v) for k, v in (resources.get("requests") or {}).items()}
    return {**limits, **requests}
