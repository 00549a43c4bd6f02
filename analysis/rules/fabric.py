"""Guardrail checks of the fabric: EFA layout and zone, EFA security groups, placement, Spot for
training, IMDSv2, world-open ingress. Plain functions of a resource or a whole stack."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, Iterator

from catalog import CATALOG
from stackconfig.stack import ROLE_LABEL, Role

from .plan import efa_interface_problems
from .view import (ALL_PROTOCOLS, EFA_KINDS, EGRESS_RULE, INGRESS_RULE, LAUNCH_TEMPLATE, LEGACY_RULE, NODE_GROUP, Resource, SECURITY_GROUP, SUBNET, Stack, UNKNOWN, as_list, dig)


# --- EFA launch templates and node groups ------------------------------------------------------

def efa_interfaces(template: Mapping) -> list[dict]:
    return [i for i in as_list(template.get("networkInterfaces")) if isinstance(i, Mapping)
            and i.get("interfaceType") in EFA_KINDS]


def is_efa_template(template: Mapping) -> bool:
    return bool(efa_interfaces(template))


def is_reserved_template(template: Mapping) -> bool:
    spec = template.get("capacityReservationSpecification")
    if not isinstance(spec, Mapping):
        return spec is UNKNOWN
    return bool(spec.get("capacityReservationTarget")) or spec.get("capacityReservationPreference") not in (
        None, "open", "none")


def check_efa_layout(res: Resource, node_group_types: list | None = None) -> list[str]:
    """An EFA launch template carries exactly the interfaces ``components.efa.efa_layout`` gives its
    instance type: ENA primary at card 0/device 0, one EFA-only per EFA card, as many as the type's
    EFA maximum; no subnet or addresses on the interfaces; groups only on the interfaces. A template
    without an instance type (a Spot group of several types) is checked against each type of the node
    groups that launch it."""
    props = res.props
    if not is_efa_template(props):
        return []
    instance_type = props.get("instanceType")
    if instance_type is None and node_group_types:
        return [m for t in node_group_types for m in _efa_layout_problems(res, t)]
    return _efa_layout_problems(res, instance_type)


def check_efa_layouts(stack: Stack) -> Iterator[tuple[str, str]]:
    """``check_efa_layout`` for every launch template, with the instance types of its node groups."""
    types: dict[str, list] = {}
    for ng in stack.of_type(NODE_GROUP):
        for lt in _node_group_templates(stack, ng):
            types.setdefault(lt.urn, []).extend(as_list(ng.props.get("instanceTypes")))
    for lt in stack.of_type(LAUNCH_TEMPLATE):
        for message in check_efa_layout(lt, types.get(lt.urn)):
            yield lt.urn, message


def _efa_layout_problems(res: Resource, instance_type: Any) -> list[str]:
    props = res.props
    if instance_type is UNKNOWN:
        return []
    instance = CATALOG.get(instance_type) if isinstance(instance_type, str) else None
    if instance is None:
        return [f"{res.label}: has EFA interfaces but instanceType {instance_type!r} is not in the instance "
                f"catalog, so its EFA layout cannot be checked; EFA types: "
                f"{', '.join(n for n, t in CATALOG.items() if t.has_efa)}"]
    if not instance.has_efa:
        return [f"{res.label}: has EFA interfaces but {instance.name} has no EFA"]
    return [f"{res.label} ({instance.name}): {p}" for p in efa_interface_problems(props, instance)]


def check_imdsv2(res: Resource) -> list[str]:
    """Every launch template requires IMDSv2 session tokens."""
    tokens = dig(res.props, "metadataOptions", "httpTokens")
    if tokens is UNKNOWN or tokens == "required":
        return []
    return [f"{res.label}: metadataOptions.httpTokens is {tokens!r}; IMDSv2 needs 'required'"]


def check_no_placement_with_reservation(res: Resource) -> list[str]:
    """A template that launches into a Capacity Block or ODCR sets no placement group: a forced
    placement group blocks or shrinks launches into the reservation."""
    if not is_reserved_template(res.props):
        return []
    placement = res.props.get("placement")
    if not isinstance(placement, Mapping):
        return []
    groups = {k: placement[k] for k in ("groupName", "groupId") if placement.get(k) not in (None, "")}
    if not groups:
        return []
    shown = ", ".join(f"{k}={'<unknown>' if v is UNKNOWN else v!r}" for k, v in groups.items())
    return [f"{res.label}: targets a capacity reservation and sets placement {shown}; the reservation "
            f"already fixes placement"]


def _node_group_templates(stack: Stack, ng: Resource) -> list[Resource]:
    templates, _ = stack.refs(ng, "launchTemplate", LAUNCH_TEMPLATE)
    return templates


def check_efa_single_az(stack: Stack) -> Iterator[tuple[str, str]]:
    """Every node group whose launch template has EFA interfaces (or targets a reservation) uses
    subnets of one zone, and all EFA node groups share that zone: EFA traffic cannot cross zones."""
    efa_zones: dict[str, Resource] = {}
    for ng in stack.of_type(NODE_GROUP):
        templates = _node_group_templates(stack, ng)
        efa = any(is_efa_template(t.props) for t in templates)
        reserved = any(is_reserved_template(t.props) for t in templates)
        if not (efa or reserved):
            continue
        why = "EFA" if efa else "capacity-reservation"
        subnets, unresolved = stack.refs(ng, "subnetIds", SUBNET)
        if unresolved:
            yield ng.urn, (f"{ng.label}: {why} node group uses subnet(s) {', '.join(unresolved)} not defined in "
                           f"this stack; their zone cannot be verified")
        zones = {dig(s.props, "availabilityZone") or dig(s.props, "availabilityZoneId") for s in subnets}
        if UNKNOWN in zones:
            continue
        unplaced = [s.name for s in subnets if not isinstance(dig(s.props, "availabilityZone")
                                                              or dig(s.props, "availabilityZoneId"), str)]
        if unplaced:
            yield ng.urn, (f"{ng.label}: {why} node group uses subnet(s) {', '.join(unplaced)} without an "
                           f"availabilityZone (AWS would pick one); pin the zone")
            continue
        if len(zones) > 1:
            yield ng.urn, (f"{ng.label}: {why} node group spans zones {', '.join(sorted(map(str, zones)))} "
                           f"(subnets {', '.join(s.name for s in subnets)}); it must use one zone")
        elif efa and zones:
            efa_zones.setdefault(next(iter(zones)), ng)
    if len(efa_zones) > 1:
        for zone, ng in sorted(efa_zones.items()):
            yield ng.urn, (f"{ng.label}: EFA node groups are spread over zones {', '.join(sorted(efa_zones))}; "
                           f"this one is in {zone}; all EFA peers must share one zone")


def _rule_targets(stack: Stack, rule: Resource, group: Resource, key: str) -> bool:
    found, _ = stack.refs(rule, key, SECURITY_GROUP)
    return group in found


def _self_rule(stack: Stack, group: Resource, direction: str) -> bool:
    """``group`` admits all protocols from itself (ingress) or to itself (egress)."""
    rule_type = INGRESS_RULE if direction == "ingress" else EGRESS_RULE
    for rule in stack.of_type(rule_type):
        if (rule.props.get("ipProtocol") in ALL_PROTOCOLS
                and _rule_targets(stack, rule, group, "securityGroupId")
                and _rule_targets(stack, rule, group, "referencedSecurityGroupId")):
            return True
    for rule in stack.of_type(LEGACY_RULE):
        if (rule.props.get("type") == direction and rule.props.get("protocol") in ALL_PROTOCOLS
                and _rule_targets(stack, rule, group, "securityGroupId")
                and (rule.props.get("self") is True
                     or _rule_targets(stack, rule, group, "sourceSecurityGroupId"))):
            return True
    for inline in as_list(group.props.get(direction)):
        if isinstance(inline, Mapping) and inline.get("self") is True and inline.get("protocol") in ALL_PROTOCOLS:
            return True
    return False


def check_efa_security_group(stack: Stack) -> Iterator[tuple[str, str]]:
    """The EFA interfaces of every EFA launch template carry a security group of this stack that
    allows all protocols in from itself AND out to itself (without the egress rule NCCL fails with
    "Unreachable remote")."""
    for lt in stack.of_type(LAUNCH_TEMPLATE):
        interfaces = efa_interfaces(lt.props)
        if not interfaces:
            continue
        probe = Resource(lt.type, lt.name, lt.urn, {"networkInterfaces": interfaces}, lt.parent,
                         lt.dependencies, lt.property_dependencies)
        groups, _ = stack.refs(probe, "networkInterfaces", SECURITY_GROUP)
        missing = {g.name: [d for d in ("ingress", "egress") if not _self_rule(stack, g, d)] for g in groups}
        if not any(not dirs for dirs in missing.values()):
            detail = "; ".join(f"{name} lacks self {' and '.join(dirs)}" for name, dirs in sorted(missing.items()))
            yield lt.urn, (f"{lt.label}: no security group on its EFA interfaces allows all protocols both in "
                           f"from and out to itself ({detail or 'no security group of this stack on them'})")


def check_training_not_spot(stack: Stack) -> Iterator[tuple[str, str]]:
    """Node groups labelled ``rl.platform/role=train`` never run on Spot: not by capacity type and
    not by a launch template that asks for the spot market."""
    for ng in stack.of_type(NODE_GROUP):
        if dig(ng.props, "labels", ROLE_LABEL) != Role.TRAIN.value:
            continue
        if ng.props.get("capacityType") == "SPOT":
            yield ng.urn, f"{ng.label}: training node group has capacityType SPOT; training never runs on Spot"
        for lt in _node_group_templates(stack, ng):
            if dig(lt.props, "instanceMarketOptions", "marketType") == "spot":
                yield ng.urn, (f"{ng.label}: training node group's {lt.label} asks for the spot market; "
                               f"training never runs on Spot")


# --- security groups -----------------------------------------------------------------------

def _world(cidr: Any) -> bool:
    if not isinstance(cidr, str):
        return False
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False).prefixlen == 0
    except ValueError:
        return False


def check_no_world_ingress(res: Resource) -> list[str]:
    """No security group admits traffic from 0.0.0.0/0 or ::/0 (inline ingress, ingress rules)."""
    props, open_to = res.props, []
    if res.type == SECURITY_GROUP:
        for rule in as_list(props.get("ingress")):
            if isinstance(rule, Mapping):
                open_to += [c for key in ("cidrBlocks", "ipv6CidrBlocks") for c in as_list(rule.get(key)) if _world(c)]
    elif res.type == INGRESS_RULE:
        open_to += [props[k] for k in ("cidrIpv4", "cidrIpv6") if _world(props.get(k))]
    elif res.type == LEGACY_RULE and props.get("type") == "ingress":
        open_to += [c for key in ("cidrBlocks", "ipv6CidrBlocks") for c in as_list(props.get(key)) if _world(c)]
    return [f"{res.label}: allows inbound traffic from {c}" for c in dict.fromkeys(open_to)]


