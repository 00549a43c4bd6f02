"""What AWS says about each pool's capacity reservation, asked at preview before anything is built.

A stack names its Capacity Blocks and ODCRs by id (``capacity.reservationId``); nothing offline can
tell whether the id exists, or whether it is in the stack's zone and for the pool's instance type.
A reservation elsewhere makes the node group's instances fail to launch (the launch template
targets it: EC2 user guide, "Use Capacity Reservations": the instance's zone and type must match
the reservation's), minutes into ``pulumi up``. ``reservation_problems`` asks at preview:

- Capacity Block: ``aws.ec2.get_capacity_block_reservation`` (pulumi-aws 7.51.1, invoke
  ``aws:ec2/getCapacityBlockReservation``: returns only reservations of type ``capacity-block``);
- ODCR: pulumi-aws 7.51.1 has no ``get_capacity_reservation``, so the Cloud Control read of
  ``AWS::EC2::CapacityReservation`` (``aws.cloudcontrol.get_resource``; its ``properties`` JSON has
  ``AvailabilityZone`` and ``InstanceType``, CloudFormation resource reference);
- an ODCR resource-group ARN names several reservations: not looked up.

Besides zone and type, its state and size: one that is expired, cancelled or failed never launches
an instance (``REFUSED_STATES``: the states pulumi-aws 7.51.1 documents for a Capacity Block's
``state``, and EC2's for an ODCR), and one that holds fewer instances than the pool runs
(``nodes.desired``) leaves the rest unlaunched. Its free count is shown, not judged: on a later
``pulumi up`` the pool's own nodes take it.

Both are data-source invokes: they run at ``pulumi preview`` and ``pulumi up`` (and need
``ec2:DescribeCapacityReservations`` and, for ODCRs, ``cloudformation:GetResource``).
"""

from __future__ import annotations

import json
from typing import Callable, NamedTuple

import pulumi_aws as aws

from stackconfig.stack import CapacityType, Pool, StackConfig

CLOUDCONTROL_TYPE = "AWS::EC2::CapacityReservation"


REFUSED_STATES = frozenset({"expired", "cancelled", "failed", "payment-failed"})


class Reservation(NamedTuple):
    zone: str
    instance_type: str
    state: str | None = None
    total: int | None = None
    free: int | None = None


Lookup = Callable[[Pool], Reservation | None]


def lookup(pool: Pool) -> Reservation | None:
    """The reservation ``pool`` targets as AWS reports it (None for a resource group); raises the
    invoke's error when AWS does not know the id."""
    rid = pool.capacity.reservation_id
    if rid is None or rid.startswith("arn:"):
        return None
    if pool.capacity.type is CapacityType.CAPACITY_BLOCK:
        found = aws.ec2.get_capacity_block_reservation(id=rid)
        return Reservation(found.availability_zone, found.instance_type, found.state, found.instance_count,
                           found.available_instance_count)
    props = json.loads(aws.cloudcontrol.get_resource(type_name=CLOUDCONTROL_TYPE, identifier=rid).properties)
    return Reservation(props["AvailabilityZone"], props["InstanceType"], props.get("State"),
                       props.get("TotalInstanceCount", props.get("InstanceCount")), props.get("AvailableInstanceCount"))


def reservation_problems(cfg: StackConfig, find: Lookup = lookup) -> list[str]:
    """One line per reserved pool whose reservation AWS does not know, or holds in another zone or
    for another instance type than the stack asks."""
    problems = []
    for pool in (p for p in cfg.pools if p.reserved):
        rid = pool.capacity.reservation_id
        where = f"pools[{pool.name}].capacity.reservationId"
        try:
            found = find(pool)
        except Exception as err:  # the invoke's error: "invoke of aws:... failed: ..." (pulumi.runtime.invoke)
            problems.append(f"{where}: {rid} ({pool.capacity.type.value}) is not a reservation AWS knows in "
                            f"{cfg.region}: {err}")
            continue
        if found is None:
            continue
        if found.zone != cfg.availability_zone:
            problems.append(f"{where}: {rid} is in {found.zone}, not the stack's availabilityZone "
                            f"{cfg.availability_zone}; allowed: a reservation in {cfg.availability_zone}")
        if found.instance_type != pool.instance_type:
            problems.append(f"{where}: {rid} reserves {found.instance_type}, not the pool's instanceType "
                            f"{pool.instance_type}; allowed: a reservation of {pool.instance_type}")
        problems += _held(where, rid, found, pool)
    return problems


def _held(where: str, rid: str, found: Reservation, pool: Pool) -> list[str]:
    """A state that launches nothing, and fewer instances than the pool runs."""
    out = []
    if found.state in REFUSED_STATES:
        out.append(f"{where}: {rid} is {found.state}; allowed: an active or scheduled reservation")
    if found.total is not None and found.total < pool.nodes.desired:
        free = f" ({found.free} free)" if found.free is not None else ""
        out.append(f"{where}: {rid} holds {found.total} instances{free}, the pool runs {pool.nodes.desired} "
                   f"(nodes.desired); allowed: a reservation of at least {pool.nodes.desired}, or fewer nodes")
    return out
