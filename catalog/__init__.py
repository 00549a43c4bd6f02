"""The instance catalog: every fact about an EC2 instance type that the platform depends on.

One row per type, one place per fact. Launch templates, subnet sizing, device-plugin coverage,
pod resource requests and the cost figures of the plan all derive from these rows.

Sources: EC2 DescribeInstanceTypes (as republished in the Karpenter instance-type reference),
the EC2 accelerated-computing and EFA user guides, the VPC CNI max-pods table, and public
us-east-1 on-demand prices (p6-b300: us-west-2, the first region listing it). Prices are
defaults; a stack overrides them per pool with ``capacity.hourlyPrice``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_gib: int
    max_pods: int
    """Pods per node with the VPC CNI on network card 0, without prefix delegation."""
    on_demand_hourly_usd: float | None
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: int = 0
    network_cards: int = 1
    efa_max: int = 0
    """DescribeInstanceTypes EfaInfo.MaximumEfaInterfaces: one EFA per network card up to this."""
    card0_takes_efa: bool = True
    efa_generation: int = 0
    efa_gbps: int = 0
    nvme_disks: int = 0
    nvme_disk_gb: int = 0

    @property
    def has_efa(self) -> bool:
        return self.efa_max > 0

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def nvme_total_gb(self) -> int:
        return self.nvme_disks * self.nvme_disk_gb


_P_SERIES = dict(vcpu=192, memory_gib=2048, gpus=8, nvme_disks=8, nvme_disk_gb=3840)

CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in (
        # GPU training / rollout families (EFA).
        InstanceType("p4d.24xlarge", vcpu=96, memory_gib=1152, gpus=8, gpu_model="A100",
                     gpu_memory_gib=40, network_cards=4, efa_max=4, efa_generation=1,
                     efa_gbps=400, nvme_disks=8, nvme_disk_gb=1000, max_pods=737,
                     on_demand_hourly_usd=21.96),
        InstanceType("p4de.24xlarge", vcpu=96, memory_gib=1152, gpus=8, gpu_model="A100",
                     gpu_memory_gib=80, network_cards=4, efa_max=4, efa_generation=1,
                     efa_gbps=400, nvme_disks=8, nvme_disk_gb=1000, max_pods=737,
                     on_demand_hourly_usd=27.45),
        InstanceType("p5.48xlarge", **_P_SERIES, gpu_model="H100", gpu_memory_gib=80,
                     network_cards=32, efa_max=32, efa_generation=2, efa_gbps=3200,
                     max_pods=100, on_demand_hourly_usd=55.04),
        InstanceType("p5e.48xlarge", **_P_SERIES, gpu_model="H200", gpu_memory_gib=141,
                     network_cards=32, efa_max=32, efa_generation=2, efa_gbps=3200,
                     max_pods=100, on_demand_hourly_usd=None),
        InstanceType("p5en.48xlarge", **_P_SERIES, gpu_model="H200", gpu_memory_gib=141,
                     network_cards=16, efa_max=16, efa_generation=3, efa_gbps=3200,
                     max_pods=198, on_demand_hourly_usd=63.30),
        InstanceType("p6-b200.48xlarge", **_P_SERIES, gpu_model="B200", gpu_memory_gib=179,
                     network_cards=8, efa_max=8, efa_generation=4, efa_gbps=3200,
                     max_pods=198, on_demand_hourly_usd=113.93),
        InstanceType("p6-b300.48xlarge", vcpu=192, memory_gib=4096, gpus=8, gpu_model="B300",
                     gpu_memory_gib=268, network_cards=17, efa_max=16, card0_takes_efa=False,
                     efa_generation=4, efa_gbps=6400, nvme_disks=8, nvme_disk_gb=3840,
                     max_pods=198, on_demand_hourly_usd=142.42),
        # GPU reward models.
        InstanceType("g6e.12xlarge", vcpu=48, memory_gib=384, gpus=4, gpu_model="L40S",
                     gpu_memory_gib=48, efa_max=1, efa_gbps=100, nvme_disks=2,
                     nvme_disk_gb=1900, max_pods=234,
                     on_demand_hourly_usd=10.49),
        # CPU pools: system add-ons, preprocessing, Ray head, memory-optimised buffers.
        InstanceType("m7i.xlarge", vcpu=4, memory_gib=16, max_pods=58,
                     on_demand_hourly_usd=0.2016),
        InstanceType("m7i.4xlarge", vcpu=16, memory_gib=64, max_pods=234,
                     on_demand_hourly_usd=0.8064),
        InstanceType("c7i.16xlarge", vcpu=64, memory_gib=128, max_pods=737,
                     on_demand_hourly_usd=2.856),
        InstanceType("r7i.16xlarge", vcpu=64, memory_gib=512, max_pods=737,
                     on_demand_hourly_usd=4.2336),
    )
}

EFA_TYPES: tuple[str, ...] = tuple(n for n, t in CATALOG.items() if t.has_efa)
GPU_TYPES: tuple[str, ...] = tuple(n for n, t in CATALOG.items() if t.is_gpu)


def instance(name: str) -> InstanceType:
    """The catalog row for ``name``; KeyError names the allowed types."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"{name!r} is not in the instance catalog; allowed: {', '.join(CATALOG)}") from None
