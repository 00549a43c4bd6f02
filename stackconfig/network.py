"""The stack's ``network`` settings: the VPC's address blocks and the cluster's Service range.

Guarantees: every block is a valid IPv4 network; the VPC blocks are /16 to /24 and disjoint; the Service
range meets the rules the EKS API gives for ``serviceIpv4Cidr`` (EKS API reference,
``KubernetesNetworkConfigRequest``: "Within one of the following private IP address blocks: 10.0.0.0/8,
172.16.0.0/12, or 192.168.0.0/16", "Doesn't overlap with any CIDR block assigned to the VPC", "Between /24
and /12"), so EKS cannot refuse it at creation, minutes into ``pulumi up``.
"""

from __future__ import annotations

import ipaddress

from pydantic import field_validator, model_validator

from .base import SchemaModel

PRIVATE_BLOCKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
"""Where EKS accepts a Service range (``KubernetesNetworkConfigRequest.serviceIpv4Cidr``)."""
SERVICE_PREFIXES = (12, 24)
"""The Service range's prefix length, widest and narrowest EKS accepts ("Between /24 and /12")."""


def kubernetes_service_ip(service_cidr: str) -> str:
    """The ClusterIP of the ``kubernetes`` Service in ``default``: the first address after the range's network
    address. kube-apiserver takes it as ``netutil.GetIndexedIP(&serviceClusterIPRange, 1)`` (kubernetes v1.35.3
    pkg/controlplane/apiserver/options/options.go:366-384, ``ServiceIPRange``, called with the first range of
    ``--service-cluster-ip-range``, cmd/kube-apiserver/app/options/completion.go:119), and its
    kubernetesservice controller creates the Service at that address."""
    return str(ipaddress.IPv4Network(service_cidr).network_address + 1)


class NetworkSettings(SchemaModel):
    vpc_cidr: str = "10.0.0.0/16"
    efa_cidr: str | None = None
    """Optional secondary VPC CIDR that holds only the single-AZ EFA node subnet (large stacks)."""
    public_load_balancers: bool = False
    """Let Kubernetes place internet-facing load balancers in the public subnets (they carry the
    ``kubernetes.io/role/elb`` tag then). Off: the public subnets hold only the NAT gateway and are
    hidden from the load-balancer controllers' subnet discovery (``components.network``)."""
    service_ipv4_cidr: str = "172.20.0.0/16"
    """The cluster's Service range (EKS ``kubernetesNetworkConfig.serviceIpv4Cidr``); its first address is the
    ``kubernetes`` Service's, which the platform's API-server NetworkPolicies allow. Private (10.0.0.0/8,
    172.16.0.0/12 or 192.168.0.0/16), /12 to /24, apart from the VPC's blocks. EKS sets it only at creation
    (a change replaces the cluster). Without it EKS picks 10.100.0.0/16 or 172.20.0.0/16 itself (API reference);
    a cluster in a 10.0.0.0/16 VPC showed its ``kubernetes`` Service at 172.20.0.1 (aws-network-policy-agent#553),
    so the default is most likely what a cluster created before this field has (docs/design/tenancy.md)."""

    @field_validator("vpc_cidr", "efa_cidr")
    @classmethod
    def _block(cls, cidr: str | None) -> str | None:
        if cidr is not None and not 16 <= ipaddress.IPv4Network(cidr).prefixlen <= 24:
            raise ValueError(f"{cidr}: a VPC CIDR block must be /16 to /24")
        return cidr

    @field_validator("service_ipv4_cidr")
    @classmethod
    def _service_range(cls, cidr: str) -> str:
        try:
            net = ipaddress.IPv4Network(cidr)
        except ValueError as err:
            raise ValueError(f"{cidr!r} is not an IPv4 network ({err}); allowed: a private range such as "
                             f"172.20.0.0/16") from None
        widest, narrowest = SERVICE_PREFIXES
        private = any(net.subnet_of(ipaddress.IPv4Network(b)) for b in PRIVATE_BLOCKS)
        if not private or not widest <= net.prefixlen <= narrowest:
            raise ValueError(f"{cidr} is not a range EKS accepts for services; allowed: /{widest} to /{narrowest} "
                             f"within {', '.join(PRIVATE_BLOCKS)}")
        return cidr

    @model_validator(mode="after")
    def _disjoint(self) -> "NetworkSettings":
        if self.efa_cidr and ipaddress.IPv4Network(self.efa_cidr).overlaps(ipaddress.IPv4Network(self.vpc_cidr)):
            raise ValueError(f"efaCidr: {self.efa_cidr} overlaps vpcCidr {self.vpc_cidr}; a secondary block must not")
        service = ipaddress.IPv4Network(self.service_ipv4_cidr)
        for field, block in (("vpcCidr", self.vpc_cidr), ("efaCidr", self.efa_cidr)):
            if block and service.overlaps(ipaddress.IPv4Network(block)):
                raise ValueError(f"serviceIpv4Cidr: {self.service_ipv4_cidr} overlaps {field} {block} (EKS refuses a "
                                 f"Service range that overlaps the VPC); allowed: a private /12 to /24 apart from "
                                 f"the VPC's blocks, e.g. {_suggestion(self)}")
        return self

    @property
    def kubernetes_service_ip(self) -> str:
        """``kubernetes_service_ip`` of this stack's Service range."""
        return kubernetes_service_ip(self.service_ipv4_cidr)


def _suggestion(settings: NetworkSettings) -> str:
    """The first of EKS's own two defaults (10.100.0.0/16, 172.20.0.0/16) apart from the VPC's blocks."""
    blocks = [ipaddress.IPv4Network(b) for b in (settings.vpc_cidr, settings.efa_cidr) if b]
    return next((c for c in ("172.20.0.0/16", "10.100.0.0/16")
                 if not any(ipaddress.IPv4Network(c).overlaps(b) for b in blocks)), "192.168.0.0/16")
