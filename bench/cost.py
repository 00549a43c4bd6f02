"""What nodes cost: the stack pool's price (``Pool.hourly_price``: the stack's ``capacity.hourlyPrice``,
else the catalog's on-demand price, the same rule the offline plan prices pools by), or, for a node
of no known pool, the catalog's on-demand price of its instance type. And the estimate of an
experiment before a cluster exists.

Guarantees: a price is never invented; a node with no price is named in the basis and the cost is
None, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from catalog import CATALOG

from .artifacts import Node
from .experiment import Experiment, arm_run, schedule

if TYPE_CHECKING:  # pragma: no cover
    from stackconfig.stack import StackConfig


@dataclass(frozen=True)
class Prices:
    """USD per node-hour, by pool name (from a stack) and by instance type (the catalog)."""

    pools: dict[str, tuple[str, float | None]]
    """pool -> (instance type, price)."""
    basis: str

    def node(self, node: Node) -> tuple[float | None, str]:
        """The price of one node and where it came from."""
        pool = self.pools.get(node.pool)
        if pool is not None and pool[0] == node.instance_type and pool[1] is not None:
            return pool[1], f"pool {node.pool} of {self.basis}"
        row = CATALOG.get(node.instance_type)
        if row is not None and row.on_demand_hourly_usd:
            return row.on_demand_hourly_usd, f"catalog on-demand {node.instance_type}"
        return None, f"no price for {node.instance_type or 'an unlabelled node'}"


def stack_prices(stack: StackConfig | None) -> Prices:
    if stack is None:
        return Prices({}, "the catalog")
    return Prices({p.name: (p.instance_type, p.hourly_price) for p in stack.pools}, f"stack {stack.stack}")


def load_prices(stack: str | None) -> Prices:
    if not stack:
        return stack_prices(None)
    from stackconfig.files import read_stack  # the stack schema imports pulumi: only when a stack is named
    from workloads.stack import ProgramConfig  # the whole stack file (its workloads too)
    return stack_prices(read_stack(stack, model=ProgramConfig))


@dataclass(frozen=True)
class Estimate:
    attempts: int
    node_hours: float
    usd: float | None
    hours: float
    """How long the experiment holds the nodes, attempts one after another."""
    lines: list[str]


def estimate(exp: Experiment, stack: StackConfig) -> Estimate:
    """Cost and duration from the stack's pool prices and the experiment's stated assumptions."""
    pools = {p.name: p for p in stack.pools}
    per_attempt_h = (exp.estimate.startup_minutes * 60 + exp.total_steps * exp.estimate.step_seconds) / 3600
    lines, total_usd, node_hours, priced = [], 0.0, 0.0, True
    for attempt in schedule(exp):
        run = attempt.run
        usd_h = 0.0
        for name, count in run.nodes.items():
            if name not in pools:
                raise ValueError(f"arm {attempt.arm}: nodes.{name}: stack {stack.stack!r} has no pool {name!r}; "
                                 f"pools: {', '.join(pools)}")
            price = pools[name].hourly_price
            if price is None:
                priced = False
            usd_h += count * (price or 0.0)
        nodes = sum(run.nodes.values())
        node_hours += nodes * per_attempt_h
        total_usd += usd_h * per_attempt_h
        lines.append(f"{attempt.folder:<28} {nodes:>5}  {per_attempt_h:6.2f} h  {f'${usd_h:,.2f}/h':>12}  "
                     f"{f'${usd_h * per_attempt_h:,.2f}':>10}")
    return Estimate(len(lines), node_hours, total_usd if priced else None, per_attempt_h * len(lines), lines)


def render_estimate(exp: Experiment, stack: StackConfig) -> str:
    est = estimate(exp, stack)
    arm_nodes = {a.name: dict(arm_run(exp, a.name).nodes) for a in exp.arms}
    out = [f"Experiment {exp.name} on stack {stack.stack}: {len(exp.arms)} arms x {exp.repeats} repeats, "
           f"{exp.warmup_steps} warm-up + {exp.steps} measured steps each, order {exp.order}",
           f"Assumed (experiment file, not measured): {exp.estimate.step_seconds:g} s per step, "
           f"{exp.estimate.startup_minutes:g} min start-up per attempt",
           "Prices: " + ", ".join(f"pool {p.name} {p.instance_type} "
                                  + (f"${p.hourly_price:,.2f}/node-h" if p.hourly_price else "no price")
                                  + (" (stack)" if p.capacity.hourly_price else " (catalog on-demand)")
                                  for p in stack.pools if any(p.name in n for n in arm_nodes.values())),
           "", f"  {'attempt (in run order)':<28} {'nodes':>5}  {'holds':>8}  {'rate':>12}  {'cost':>10}"]
    out += ["  " + line for line in est.lines]
    cost = "unknown (a pool has no price: set capacity.hourlyPrice)" if est.usd is None else f"${est.usd:,.2f}"
    if any(a.faults for a in exp.arms):
        out += ["", "Not counted: a fault that stops the job adds a start-up and the steps since the last checkpoint "
                    "(up to saveInterval) to its attempt."]
    out += ["", f"total: {est.attempts} attempts, {est.hours:.1f} h holding the nodes, {est.node_hours:,.1f} "
                f"node-hours, {cost}"]
    return "\n".join(out)
