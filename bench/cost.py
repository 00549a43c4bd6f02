"""What nodes cost, by how they are bought, and the estimate of an experiment before a cluster exists.

A node is priced by its capacity type (EKS ``eks.amazonaws.com/capacityType``: ``ON_DEMAND``, ``SPOT``,
``CAPACITY_BLOCK``; an ODCR node is labelled ``ON_DEMAND`` and known as one from its pool's
``capacity.type``):

- **Capacity Block, ODCR**: the user's contract price, the stack pool's ``capacity.hourlyPrice`` (typed,
  ``stackconfig.stack.Capacity``); no contract price is no price, never the on-demand one;
- **Spot**: the mean Spot price over the attempt's window from EC2 ``DescribeSpotPriceHistory`` (boto3,
  ``Linux/UNIX``, the node's availability zone; each price holds from its timestamp to the next),
  collected by ``report --spot-prices`` into ``spot-prices.json`` so the report stays offline;
- **On-demand**: the pool's ``capacity.hourlyPrice`` when the stack sets one, else the catalog's
  on-demand price of the instance type, which is us-east-1's (``CATALOG_REGION``: the generated
  catalog's ``on_demand_usd_per_hour_us_east_1``), so a node in another region has none from it.

Guarantees: a price is never invented; each price names its source and its region (a contract price
the stack's region, the node's zone's region read from its ``topology.kubernetes.io/zone``); a node in
another region than its price's has no price; a node with no price makes the cost None, never 0. ``estimate`` refuses what ``bench run`` refuses (each attempt's objects are made by
``workloads.deploy.submit.run_objects``, which raises for a stack or pool that cannot hold the run) and
shows what a reserved pool costs whether the experiment uses all of it or not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from stackconfig.errors import BadInput
from stackconfig.files import STACKS_DIR
from typing import TYPE_CHECKING, Any

from catalog import CATALOG

from .artifacts import Node
from .experiment import Experiment, schedule

if TYPE_CHECKING:  # pragma: no cover
    from stackconfig.stack import StackConfig

RESERVED_TYPES = ("CAPACITY_BLOCK", "ODCR")
CATALOG_REGION = "us-east-1"
"""The region of the catalog's on-demand prices (``catalog/data/ec2-instance-types.json``)."""
SPOT_FILE = "spot-prices.json"
PRODUCT = "Linux/UNIX"


@dataclass(frozen=True)
class PoolPrice:
    instance_type: str
    capacity_type: str
    contract: float | None
    """The stack's ``capacity.hourlyPrice``."""


@dataclass(frozen=True)
class Prices:
    """USD per node-hour: stack pools by name, Spot prices by (instance type, zone), the catalog."""

    pools: dict[str, PoolPrice]
    basis: str
    spot: dict[str, dict] | None = None
    """``"<instance type> <zone>"`` -> {"usd": mean price, "source": ...} (``spot-prices.json``)."""
    region: str | None = None
    """The stack's region, where its pools' contract prices hold (None: no stack)."""

    def node(self, node: Node, zone: str = "") -> tuple[float | None, str]:
        """The price of one node and where it came from; None where the price's region is not the node's."""
        price, source, region = self._price(node, zone)
        where = region_of(zone)
        if price is not None and where and region and where != region:
            return None, f"{source}: a {region} price, the node is in {where} (set capacity.hourlyPrice, report --stack)"
        return price, source

    def _price(self, node: Node, zone: str) -> tuple[float | None, str, str | None]:
        pool = self.pools.get(node.pool)
        if pool is not None and pool.instance_type != node.instance_type:
            pool = None
        kind = pool.capacity_type if pool is not None and pool.capacity_type in RESERVED_TYPES else node.capacity_type
        if kind == "SPOT":
            got = (self.spot or {}).get(f"{node.instance_type} {zone}")
            if got is None:
                return None, f"Spot {node.instance_type} {zone or '(no zone)'}: no Spot price (report --spot-prices)", None
            return got["usd"], got["source"], region_of(zone)
        if kind in RESERVED_TYPES:
            if pool is None or pool.contract is None:
                return None, (f"{kind} {node.instance_type}: no contract price (set capacity.hourlyPrice of pool "
                              f"{node.pool or '?'} in the stack, and report --stack)"), None
            return pool.contract, (f"contract price of {kind} pool {node.pool} ({self.basis}, {self.region}, "
                                   f"capacity.hourlyPrice)"), self.region
        if pool is not None and pool.contract is not None:
            return pool.contract, f"pool {node.pool} of {self.basis} ({self.region}, capacity.hourlyPrice)", self.region
        row = CATALOG.get(node.instance_type)
        if row is not None and row.on_demand_hourly_usd:
            return row.on_demand_hourly_usd, f"catalog on-demand {node.instance_type}, {CATALOG_REGION}", CATALOG_REGION
        return None, f"no price for {node.instance_type or 'an unlabelled node'}", None


def region_of(zone: str) -> str:
    """The region of an Availability Zone name (``us-east-1a`` -> ``us-east-1``); "" for no zone."""
    return zone[:-1] if zone[-1:].isalpha() else zone


def stack_prices(stack: StackConfig | None, spot: dict | None = None) -> Prices:
    if stack is None:
        return Prices({}, "the catalog", spot)
    return Prices({p.name: PoolPrice(p.instance_type, p.capacity.type.value, p.capacity.hourly_price)
                   for p in stack.pools}, f"stack {stack.stack}", spot, stack.region)


def read_stack_config(stack: str, stack_dir: Path = STACKS_DIR) -> StackConfig:
    from workloads.checks import gate  # imports pulumi: only when a stack is named
    return gate.read(stack, stack_dir)


def load_prices(stack: str | None, root: Path | None = None, stack_dir: Path = STACKS_DIR) -> Prices:
    spot = None
    if root is not None and (Path(root) / SPOT_FILE).is_file():
        spot = json.loads((Path(root) / SPOT_FILE).read_text())
    return stack_prices(read_stack_config(stack, stack_dir) if stack else None, spot)


def spot_price(client: Any, instance_type: str, zone: str, start: datetime, end: datetime) -> dict | None:
    """Mean Spot price of ``instance_type`` in ``zone`` over [start, end], each price weighted by how long
    it held (DescribeSpotPriceHistory, every page); None when EC2 has no record."""
    records, token = [], None
    while True:
        kw = {"InstanceTypes": [instance_type], "ProductDescriptions": [PRODUCT], "StartTime": start,
              "EndTime": end, "Filters": [{"Name": "availability-zone", "Values": [zone]}]}
        page = client.describe_spot_price_history(**kw, **({"NextToken": token} if token else {}))
        records += [r for r in page.get("SpotPriceHistory", []) if r.get("AvailabilityZone") == zone
                    and r.get("InstanceType") == instance_type and r.get("ProductDescription", "").startswith(PRODUCT)]
        token = page.get("NextToken")
        if not token:
            break
    if not records:
        return None
    changes = sorted((max(r["Timestamp"].astimezone(timezone.utc), start), float(r["SpotPrice"])) for r in records)
    changes = [c for i, c in enumerate(changes) if i + 1 == len(changes) or changes[i + 1][0] > c[0]]
    total = (end - start).total_seconds()
    usd = sum(p * ((changes[i + 1][0] if i + 1 < len(changes) else end) - t).total_seconds()
              for i, (t, p) in enumerate(changes)) / total if total > 0 else changes[-1][1]
    return {"usd": round(usd, 6), "source": f"Spot {instance_type} {zone}, EC2 DescribeSpotPriceHistory mean over "
                                            f"{start.isoformat()}..{end.isoformat()} ({len(records)} records)"}


def collect_spot_prices(client: Any, wanted: dict[str, tuple[datetime, datetime]]) -> dict[str, dict]:
    """``spot-prices.json`` for every ``"<instance type> <zone>"`` of a Spot node and its window."""
    out = {}
    for key, (start, end) in sorted(wanted.items()):
        itype, zone = key.split(" ", 1)
        got = spot_price(client, itype, zone, start, end)
        if got is not None:
            out[key] = got
    return out


@dataclass(frozen=True)
class Estimate:
    attempts: int
    node_hours: float
    usd: float | None
    hours: float
    """How long the experiment holds the nodes, attempts one after another."""
    lines: list[str]
    reserved: list[str]
    """Per reserved pool: its nodes x the experiment's hours, paid whether used or not."""


def _pool_node(pool: Any) -> Node:
    """A node of a stack pool, as EKS labels it (an ODCR node is ``ON_DEMAND``; its pool says ODCR)."""
    kind = pool.capacity.type.value
    return Node("", pool.name, pool.name, pool.instance_type, "ON_DEMAND" if kind == "ODCR" else kind, 0)


def _pool_price(prices: Prices, pool: Any) -> float | None:
    return prices.node(_pool_node(pool))[0]


def attempt_hours(exp: Experiment, stack: StackConfig, arm: str) -> float:
    """One attempt of ``arm`` holding its nodes: start-up, every step, and every save at the file system's
    provisioned rate (``storage.save_time``, after the rollouts of ``deadlines.save_steps``): Megatron saves
    synchronously, the run's nodes waiting."""
    from .deadlines import one_save_s, save_steps
    saves_s = len(save_steps(exp, arm)) * one_save_s(exp, arm, stack)
    return (exp.estimate.startup_minutes * 60 + exp.total_steps * exp.estimate.step_seconds + saves_s) / 3600


def estimate(exp: Experiment, stack: StackConfig) -> Estimate:
    """Cost and duration from the stack's pool prices and the experiment's stated assumptions; each
    attempt's objects made as ``bench run`` makes them (what run refuses, this refuses)."""
    from workloads.deploy.submit import run_objects  # the run command's own checks

    prices = stack_prices(stack)
    pools = {p.name: p for p in stack.pools}
    lines, total_usd, node_hours, priced, hours = [], 0.0, 0.0, True, 0.0
    for attempt in schedule(exp):
        run = attempt.run
        for name in run.nodes:
            if name not in pools:
                raise ValueError(f"arm {attempt.arm}: nodes.{name}: stack {stack.stack!r} has no pool {name!r}; "
                                 f"pools: {', '.join(pools)}")
        try:
            run_objects(stack, run)
        except BadInput as err:  # bad input stays bad input (exit 2), each problem said of its arm
            raise BadInput([f"arm {attempt.arm}: {line}" for line in err.lines()]) from None
        except ValueError as err:
            raise ValueError(f"arm {attempt.arm}: {err}") from None
        rates = [(count, _pool_price(prices, pools[name])) for name, count in run.nodes.items()]
        usd_h = None if any(r is None for _, r in rates) else sum(c * r for c, r in rates)
        priced = priced and usd_h is not None
        nodes, per_attempt_h = sum(run.nodes.values()), attempt_hours(exp, stack, attempt.arm)
        hours += per_attempt_h
        node_hours += nodes * per_attempt_h
        total_usd += (usd_h or 0.0) * per_attempt_h
        rate, cost = ("no price", "-") if usd_h is None else (f"${usd_h:,.2f}/h", f"${usd_h * per_attempt_h:,.2f}")
        lines.append(f"{attempt.folder:<28} {nodes:>5}  {per_attempt_h:6.2f} h  {rate:>12}  {cost:>10}")
    used = {n for a in schedule(exp) for n in a.run.nodes}
    reserved = []
    for name in sorted(used):
        p = pools[name]
        if p.capacity.type.value in RESERVED_TYPES:
            price = _pool_price(prices, p)
            most = max(a.run.nodes.get(name, 0) for a in schedule(exp))
            cost = "no contract price" if price is None else f"${price * p.nodes.desired * hours:,.2f}"
            reserved.append(f"pool {name} ({p.capacity.type.value}): {p.nodes.desired} nodes x {hours:.1f} h = "
                            f"{p.nodes.desired * hours:,.1f} node-hours, {cost}, paid whether used or not (the "
                            f"experiment uses at most {most})")
    return Estimate(len(lines), node_hours, total_usd if priced else None, hours, lines, reserved)


def render_estimate(exp: Experiment, stack: StackConfig) -> str:
    est = estimate(exp, stack)
    prices = stack_prices(stack)
    used = {n for a in schedule(exp) for n in a.run.nodes}
    basis = []
    for p in stack.pools:
        if p.name in used:
            price, source = prices.node(_pool_node(p))
            basis.append(f"pool {p.name}: " + (f"${price:,.2f}/node-h ({source})" if price is not None else source))
    out = [f"Experiment {exp.name} on stack {stack.stack}: {len(exp.arms)} arms x {exp.repeats} repeats, "
           f"{exp.warmup_steps} warm-up + {exp.steps} measured steps each, order {exp.order}",
           f"Assumed (experiment file, not measured): {exp.estimate.step_seconds:g} s per step, "
           f"{exp.estimate.startup_minutes:g} min start-up per attempt",
           "Prices: " + "; ".join(basis),
           "", f"  {'attempt (in run order)':<28} {'nodes':>5}  {'holds':>8}  {'rate':>12}  {'cost':>10}"]
    out += ["  " + line for line in est.lines]
    cost = ("unknown (a node has no price: a reserved pool needs capacity.hourlyPrice, its contract price)"
            if est.usd is None else f"${est.usd:,.2f}")
    if any(a.faults for a in exp.arms):
        out += ["", "Not counted: a fault that stops the job adds a start-up and the steps since the last checkpoint "
                    "(up to saveInterval) to its attempt."]
    from .storage import room  # the run command's own checks, as estimate's
    space = room(exp, stack)
    if space is not None:
        out += [""] + space.describe().splitlines()
    from .deadlines import deadlines  # the run command's own deadlines
    out += ["", "Deadlines of bench run, per arm (past one an attempt is INCOMPLETE; the hours above count start-up, "
                "steps and saves):"]
    for arm in exp.arms:
        out += [f"  {arm.name}: " + "\n    ".join(deadlines(exp, arm.name, stack).describe())]
    out += ["", f"total: {est.attempts} attempts, {est.hours:.1f} h holding the nodes, {est.node_hours:,.1f} "
                f"node-hours, {cost}"]
    if est.reserved:
        out += ["", "Reserved pools (the view of the whole reservation):"] + [f"  {r}" for r in est.reserved]
    return "\n".join(out)
