"""Hand-checked facts of the GPU families the platform is built for, authoritative over the
generated rows where they are more precise.

Sources: the EC2 accelerated-computing instance and EFA user guides (network card layout: on
p6-b300 network card 0 is ENA-only, so its 16 EFA interfaces sit on cards 1-16), the EFA generation
and aggregate EFA bandwidth per type, and the instance-store layout (disks x size) from the same
pages. The generated data gives only the total NVMe size and no per-card EFA support.
"""

from __future__ import annotations

P_NVME = dict(nvme_disks=8, nvme_disk_gb=3840)

GPU_FAMILIES: dict[str, dict] = {
    "p4d.24xlarge": dict(efa_generation=1, efa_gbps=400, nvme_disks=8, nvme_disk_gb=1000),
    "p4de.24xlarge": dict(efa_generation=1, efa_gbps=400, nvme_disks=8, nvme_disk_gb=1000),
    "p5.48xlarge": dict(efa_generation=2, efa_gbps=3200, **P_NVME),
    "p5e.48xlarge": dict(efa_generation=2, efa_gbps=3200, **P_NVME),
    "p5en.48xlarge": dict(efa_generation=3, efa_gbps=3200, **P_NVME),
    "p6-b200.48xlarge": dict(efa_generation=4, efa_gbps=3200, **P_NVME),
    "p6-b300.48xlarge": dict(efa_generation=4, efa_gbps=6400, card0_takes_efa=False, **P_NVME),
    "g6e.12xlarge": dict(efa_gbps=100, nvme_disks=2, nvme_disk_gb=1900),
}
"""Per type: only the fields the generated data lacks or states less precisely."""
