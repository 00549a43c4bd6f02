"""Runs as separate, typed objects against a long-lived stack, and the offline plan of a set of them.

A run file (``runs/<name>.yaml``) names its team, its priority and the nodes it takes from each GPU
pool. ``plan_runs`` places a set of runs the way a gang scheduler with queue caps would: by priority,
then file order, a run starts only when every pool it needs has the nodes free and its team's cap
allows them, and otherwise waits, never partly placed. A run that no amount of waiting can place
(more nodes than the pool has, or more GPUs than its team's cap) is refused, naming run, pool and
resource.

    python -m workloads.runs <stack> runs/*.yaml        # exit 1 when a run can never fit

Not here yet: submitting, listing, following and cancelling runs on a cluster, preemption, and
per-run topology constraints.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml
from pydantic import Field, ValidationError

from stackconfig.base import SchemaModel
from stackconfig.files import STACKS_DIR, read_stack
from stackconfig.stack import Pool

from .stack import ProgramConfig
from .teams import TeamSettings


class RunFile(SchemaModel):
    """One run as its team submits it."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
    team: str
    priority: int = Field(0, ge=0)
    nodes: dict[str, int] = Field(min_length=1)
    """GPU pool name -> whole nodes the run takes (its Ray groups take whole nodes)."""


@dataclass
class Decision:
    run: str
    team: str
    starts: bool
    why: str
    gpus: dict[str, int] = field(default_factory=dict)


class NeverFits(ValueError):
    """A run that cannot be placed however long it waits."""


def load_run(path: Path) -> RunFile:
    try:
        return RunFile.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"run file {path}: {problems}") from None


def _never_fits(run: RunFile, pools: dict[str, Pool], teams: dict[str, TeamSettings]) -> str | None:
    if run.team not in teams:
        return f"run {run.name}: team {run.team!r} is not declared in the stack; teams: {', '.join(teams) or 'none'}"
    for name, nodes in run.nodes.items():
        pool = pools.get(name)
        if pool is None or not pool.instance.gpus:
            return f"run {run.name}: pool {name!r} is not a GPU pool of the stack; GPU pools: {', '.join(pools)}"
        if nodes > pool.nodes.desired:
            return (f"run {run.name}: pool {name}: {nodes} nodes requested, the pool has {pool.nodes.desired} "
                    f"(nvidia.com/gpu {nodes * pool.instance.gpus} > {pool.nodes.desired * pool.instance.gpus})")
        cap = teams[run.team].gpus.get(name)
        if cap is None or nodes * pool.instance.gpus > cap.cap:
            have = 0 if cap is None else cap.cap
            return (f"run {run.name}: pool {name}: nvidia.com/gpu {nodes * pool.instance.gpus} exceeds team "
                    f"{run.team}'s cap of {have} on that pool")
    return None


def plan_runs(cfg: ProgramConfig, runs: Sequence[RunFile]) -> list[Decision]:
    """Which runs start now and which wait, and why; NeverFits for a run that can never be placed."""
    pools = {p.name: p for p in cfg.pools if p.instance.gpus}
    teams = {t.name: t for t in cfg.workloads.teams}
    for run in runs:
        if (why := _never_fits(run, pools, teams)) is not None:
            raise NeverFits(why)
    free = {name: p.nodes.desired for name, p in pools.items()}
    used: dict[tuple[str, str], int] = {}
    out = []
    for run in sorted(runs, key=lambda r: -r.priority):  # stable: file order within a priority
        gpus = {name: n * pools[name].instance.gpus for name, n in run.nodes.items()}
        short = [f"pool {name}: {n} nodes needed, {free[name]} free" for name, n in run.nodes.items()
                 if n > free[name]]
        capped = [f"pool {name}: team {run.team} would use {used.get((run.team, name), 0) + g} GPUs, cap "
                  f"{teams[run.team].gpus[name].cap}" for name, g in gpus.items()
                  if used.get((run.team, name), 0) + g > teams[run.team].gpus[name].cap]
        if short or capped:
            out.append(Decision(run.name, run.team, False, "waits (whole gang or nothing): " + "; ".join(short + capped),
                                gpus))
            continue
        for name, n in run.nodes.items():
            free[name] -= n
            used[(run.team, name)] = used.get((run.team, name), 0) + gpus[name]
        out.append(Decision(run.name, run.team, True, "starts", gpus))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack")
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--stack-dir", type=Path, default=STACKS_DIR)
    args = parser.parse_args(argv)
    try:
        cfg = read_stack(args.stack, args.stack_dir, model=ProgramConfig)
        decisions = plan_runs(cfg, [load_run(p) for p in args.runs])
    except ValueError as err:  # NeverFits, a bad run file or stack file
        print(f"runs: {err}", file=sys.stderr)
        return 1
    for d in decisions:
        claims = ", ".join(f"{pool} {g} GPUs" for pool, g in d.gpus.items())
        print(f"{d.run:<24} team {d.team:<12} {claims:<32} {d.why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
