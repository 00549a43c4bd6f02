"""Generate catalog/data/ec2-instance-types.json from public upstream data files.

Sources (download each file at the commit you pass on the command line):

  aws/karpenter-provider-aws
    website/content/en/docs/reference/instance-types.md    vCPU, memory, GPUs, EFA, NVMe, bandwidth
    pkg/providers/instancetype/zz_generated.vpclimits.go    network cards, ENIs, IPv4 per ENI, bare metal
    pkg/providers/pricing/zz_generated.pricing_aws.go       us-east-1 on-demand prices
  awslabs/amazon-eks-ami
    nodeadm/internal/kubelet/instance-info.jsonl            default-card ENIs and IPv4 per ENI (max pods)

Run (no network needed; stdlib only):

  python scripts/generate_catalog.py \
      --karpenter-commit <sha> --eks-ami-commit <sha> \
      --instance-types-md instance-types.md \
      --vpclimits zz_generated.vpclimits.go \
      --pricing zz_generated.pricing_aws.go \
      --instance-info instance-info.jsonl \
      --out catalog/data/ec2-instance-types.json

Kept: families usable for Kubernetes node pools, current generation only --
m/c/r generation >= 5, x generation >= 2, z1d, g/gr generation >= 5, p generation >= 4.
Fields the sources do not carry are written as null.
max_pods = ENIs * (IPv4 per ENI - 1) + 2 on the default network card, as amazon-eks-ami computes it.
network_baseline_gbps is Karpenter's instance-network-bandwidth label (baseline, all cards) / 1000.
Fractional-GPU types (g6f, gr6f) keep the source's gpus = 0 and their GPU-memory share.
"""

import argparse
import hashlib
import json
import re
from pathlib import Path

KARPENTER = "aws/karpenter-provider-aws"
EKS_AMI = "awslabs/amazon-eks-ami"
PATHS = {
    "instance_types_md": (KARPENTER, "website/content/en/docs/reference/instance-types.md"),
    "vpclimits": (KARPENTER, "pkg/providers/instancetype/zz_generated.vpclimits.go"),
    "pricing": (KARPENTER, "pkg/providers/pricing/zz_generated.pricing_aws.go"),
    "instance_info": (EKS_AMI, "nodeadm/internal/kubelet/instance-info.jsonl"),
}
MIN_GENERATION = {"m": 5, "c": 5, "r": 5, "x": 2, "z": 1, "g": 5, "gr": 5, "p": 4}
LABEL = "karpenter.k8s.aws/instance-"


def git_blob_sha1(data: bytes) -> str:
    """The id git gives a file's bytes (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def parse_instance_types_md(text: str) -> dict[str, dict[str, str]]:
    """Map each `### `name`` section to its label and resource table rows."""
    types: dict[str, dict[str, str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^### `([a-z0-9.-]+)`", line)
        if head:
            current = types.setdefault(head.group(1), {})
            continue
        row = re.match(r"^\s*\|([^|]+)\|([^|]*)\|\s*$", line)
        if current is not None and row and row.group(1) not in ("--", "Label", "Resource"):
            current[row.group(1).strip()] = row.group(2).strip()
    return types


def parse_vpclimits(text: str) -> dict[str, dict]:
    """Map instance type to its VPCLimits struct fields and network card list."""
    limits: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r'^\t"([a-z0-9.-]+)": \{', line)
        if head:
            current = limits.setdefault(head.group(1), {"cards": {}})
            continue
        if current is None:
            continue
        field = re.match(r"^\s*(\w+):\s*([\w\"]+),", line)
        if not field:
            continue
        key, value = field.group(1), field.group(2).strip('"')
        if key == "MaximumNetworkInterfaces":
            current["_card_max"] = int(value)
        elif key == "NetworkCardIndex":
            current["cards"][int(value)] = current.pop("_card_max")
        elif value.isdigit():
            current[key] = int(value)
        elif value in ("true", "false"):
            current[key] = value == "true"
    return limits


def parse_pricing(text: str, region: str = "us-east-1") -> dict[str, float]:
    """On-demand USD per hour for one region's block of the generated Go map."""
    block = re.search(r'\n\t"%s": \{(.*?)\n\t\},' % re.escape(region), text, re.S)
    if not block:
        return {}
    return {name: float(price) for name, price in re.findall(r'"([a-z0-9.-]+)": ([0-9.]+)', block.group(1))}


def parse_instance_info(text: str) -> dict[str, dict]:
    rows = (json.loads(line) for line in text.splitlines() if line.strip())
    return {row["instanceType"]: row for row in rows}


def wanted(labels: dict[str, str]) -> bool:
    category = labels.get(LABEL + "category")
    generation = labels.get(LABEL + "generation")
    if category not in MIN_GENERATION or not (generation or "").isdigit():
        return False
    return int(generation) >= MIN_GENERATION[category]


def as_int(value):
    return int(value) if value not in (None, "") else None


def build_row(labels, limits, eni_info, price):
    network_cards = len(limits["cards"]) if limits else None
    default_card = limits.get("DefaultNetworkCardIndex", 0) if limits else 0
    if eni_info:  # amazon-eks-ami's figures for the default network card
        enis, ips = eni_info["defaultMaxENIs"], eni_info["ipv4AddressesPerInterface"]
    elif limits:
        enis, ips = limits["cards"].get(default_card), limits.get("IPv4PerInterface")
    else:
        enis = ips = None
    bandwidth_mbps = as_int(labels.get(LABEL + "network-bandwidth"))
    gpu_name = labels.get(LABEL + "gpu-name")
    return {
        "family": labels.get(LABEL + "family"),
        "arch": labels.get("kubernetes.io/arch"),
        "cpu_manufacturer": labels.get(LABEL + "cpu-manufacturer"),
        "vcpu": as_int(labels.get(LABEL + "cpu")),
        "memory_mib": as_int(labels.get(LABEL + "memory")),
        "gpus": as_int(labels.get(LABEL + "gpu-count")) or 0,
        "gpu_manufacturer": labels.get(LABEL + "gpu-manufacturer"),
        "gpu_model": gpu_name.upper() if gpu_name else None,
        "gpu_memory_mib": as_int(labels.get(LABEL + "gpu-memory")),
        "network_cards": network_cards,
        "max_enis": enis,
        "max_enis_all_cards": limits.get("Interface") if limits else None,
        "ipv4_per_eni": ips,
        "efa_max": as_int(labels.get("vpc.amazonaws.com/efa")) or 0,
        "efa_network_card_indexes": None,  # no public source lists EFA support per card
        "network_baseline_gbps": bandwidth_mbps / 1000 if bandwidth_mbps is not None else None,
        "nvme_disks": None,  # the sources give only the total local NVMe size
        "nvme_disk_gb": None,
        "nvme_total_gb": as_int(labels.get(LABEL + "local-nvme")),
        "max_pods": enis * (ips - 1) + 2 if enis and ips else None,
        "bare_metal": limits.get("IsBareMetal") if limits else None,
        "on_demand_usd_per_hour_us_east_1": price,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--karpenter-commit", required=True)
    parser.add_argument("--eks-ami-commit", required=True)
    parser.add_argument("--instance-types-md", required=True, type=Path)
    parser.add_argument("--vpclimits", required=True, type=Path)
    parser.add_argument("--pricing", required=True, type=Path)
    parser.add_argument("--instance-info", required=True, type=Path)
    parser.add_argument("--out", type=Path, default=Path("catalog/data/ec2-instance-types.json"))
    args = parser.parse_args()

    commits = {KARPENTER: args.karpenter_commit, EKS_AMI: args.eks_ami_commit}
    raw, origin = {}, []
    for key, (repo, path) in PATHS.items():
        data = getattr(args, key).read_bytes()
        raw[key] = data.decode("utf-8")
        origin.append({"repository": repo, "commit": commits[repo], "path": path, "blob": git_blob_sha1(data)})

    types = parse_instance_types_md(raw["instance_types_md"])
    limits = parse_vpclimits(raw["vpclimits"])
    prices = parse_pricing(raw["pricing"])
    eni_info = parse_instance_info(raw["instance_info"])

    rows = {
        name: build_row(labels, limits.get(name), eni_info.get(name), prices.get(name))
        for name, labels in sorted(types.items())
        if wanted(labels)
    }
    catalog = {"origin": origin, "generated_by": "scripts/generate_catalog.py", "instance_types": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(catalog, indent=2) + "\n")
    print(f"wrote {len(rows)} instance types to {args.out}")


if __name__ == "__main__":
    main()
