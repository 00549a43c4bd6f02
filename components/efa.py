"""EFA: the launch-template interface layout and the security group every EFA interface carries.

Guarantees (current AWS layout, valid on every family in the catalog, p6-b300 included):
- card 0 / device 0 is the primary ENA interface (``interface``); an EFA-only one never is;
- card 0 / device 1 is ``efa-only`` when card 0 takes EFA;
- every further EFA card N gets ``efa-only`` at N / 0, up to the catalog's EFA maximum (not the
  number of network cards: p6-b300 has 17 cards and 16 EFA);
- no subnet, public IP, addresses or prefixes on any interface (the node group supplies the
  subnet; EFA-only interfaces take no IP), security groups on every interface;
- the EFA security group allows all protocols in AND out to itself (NCCL fails with "Unreachable
  remote" without the egress rule) and is not tagged for the cluster (the load balancer controller
  would pick it up).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import pulumi
import pulumi_aws as aws

from catalog import InstanceType

PRIMARY = "interface"
EFA_ONLY = "efa-only"


class Interface(NamedTuple):
    card: int
    device: int
    kind: str


def efa_layout(it: InstanceType) -> list[Interface]:
    """The interfaces a node of ``it`` gets: the ENA primary, then one EFA-only per EFA card."""
    layout = [Interface(0, 0, PRIMARY)]
    first_card = 0 if it.card0_takes_efa else 1
    for card in range(first_card, first_card + it.efa_max):
        layout.append(Interface(card, 1 if card == 0 else 0, EFA_ONLY))
    return layout


def efa_interfaces(it: InstanceType, security_group_ids: Sequence[pulumi.Input[str]]
                   ) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """Launch-template network interfaces for ``it`` with ``security_group_ids`` on each."""
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=i.card, device_index=i.device, interface_type=i.kind,
            security_groups=list(security_group_ids), delete_on_termination="true")
        for i in efa_layout(it)
    ]


class EfaSecurityGroup(pulumi.ComponentResource):
    """A security group that lets EFA peers reach each other on every protocol, both directions."""

    def __init__(self, name: str, vpc_id: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None):
        super().__init__("rlplatform:efa:EfaSecurityGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.group = aws.ec2.SecurityGroup(
            name, vpc_id=vpc_id, description="EFA: all traffic to and from members of this group",
            tags={"Name": name}, opts=child)
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-self-in", security_group_id=self.group.id, ip_protocol="-1",
            referenced_security_group_id=self.group.id, description="EFA from peers", opts=child)
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-self-out", security_group_id=self.group.id, ip_protocol="-1",
            referenced_security_group_id=self.group.id, description="EFA to peers", opts=child)
        self.id = self.group.id
        self.register_outputs({"id": self.group.id})
