"""A run file against a stack: the checks that say a run can never be placed, and the stack as the
run sees it (its GPU pools at the run's node counts, its team's namespace and service account).

Everything pod-shaped for a run comes from the same derivation as the stack's own run
(``workloads.derive.model.derive``) applied to ``run_config``, so a submitted run and a declared one
cannot differ; the same checks (parallelism, DeepEP rules, checkpoint budget) run on it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from stackconfig.errors import BadInput
from stackconfig.stack import NodeCounts, Pool, Role, describe_errors

from components.gpu_node_setup import GpuNodeSetup, capability_labels

from workloads.derive.deepep import resolve_deepep
from workloads.derive.layout import reward_enabled
from workloads.derive.model import WorkloadModel, admitted_profiles, derive, gpu_setups, node_setups
from workloads.render.teams import TEAM_SERVICE_ACCOUNT, namespace_of
from workloads.schema.settings import Submission
from workloads.schema.run import RunFile, RunSpec
from workloads.checks.queues import gpu_pools, queue_shares
from workloads.checks.teams import pool_gpus
from workloads.checks.extra_args import extra_arg_problem
from workloads.checks.stack import validate_run
from workloads.derive.topology import run_tiers, unplaceable

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

class NeverFits(ValueError):
    """A run that cannot be placed however long it waits."""


class InvalidRun(BadInput):
    """A run that names what its stack does not declare (team, priority class, pool): bad input, exit 2."""


def load_run(path: Path) -> RunFile:
    """A run file, or BadInput naming the file and, one line each, every field that is wrong."""
    raw = yaml.safe_load(path.read_text())
    try:
        return RunFile.model_validate(raw)
    except ValidationError as err:
        raise BadInput(describe_errors(raw, err), path) from None


def input_problems(cfg: "ProgramConfig", run: RunFile) -> list[str]:
    """What ``run`` names that the stack does not declare, and a flag of its ``extraArgs`` that the platform
    renders (``workloads.checks.extra_args``), one ``<field>: <problem>; allowed: ...`` each."""
    teams = [t.name for t in cfg.workloads.teams]
    out = []
    if run.team not in teams:
        out.append(f"team: {run.team!r} is not a team of stack {cfg.stack}; allowed: {', '.join(teams) or 'none'}")
    if run.priority not in cfg.workloads.priority_classes:
        out.append(f"priority: {run.priority!r} is not one of the stack's workloads.priorityClasses; allowed: "
                   f"{', '.join(cfg.workloads.priority_classes)}")
    wanted = sorted(p.name for p in run_pools(cfg))
    out += [f"nodes.{name}: {name!r} is not the stack's training or rollout pool; allowed: {', '.join(wanted)}"
            for name in run.nodes if name not in wanted]
    if run.extra_args and not out:
        try:  # a run whose command line cannot be rendered is refused by validate_run, naming the field
            taken = extra_arg_problem(run_view(cfg, run), field="extraArgs")
        except ValueError:
            taken = None
        out += [taken.replace("workloads.run.", "")] if taken else []
    return out


def run_pools(cfg: "ProgramConfig") -> tuple[Pool, Pool]:
    """The training and rollout pools a run takes nodes from."""
    return cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)


def check_run(cfg: "ProgramConfig", run: RunFile) -> None:
    """NeverFits naming run, pool and resource when no amount of waiting can place the run."""
    teams = {t.name: t for t in cfg.workloads.teams}
    if cfg.workloads.submit is not Submission.RUNS:
        raise NeverFits(f"run {run.name}: stack {cfg.stack!r} has workloads.submit {cfg.workloads.submit.value}, "
                        f"where the GPU nodes are held by the stack's own run; allowed: submit runs")
    if problems := input_problems(cfg, run):
        raise InvalidRun([f"run {run.name}: {p}" for p in problems])
    wanted = {p.name for p in run_pools(cfg)}
    for name, nodes in run.nodes.items():
        pool = next(p for p in cfg.pools if p.name == name)
        gpus = nodes * pool.instance.gpus
        if nodes > pool.nodes.desired:
            raise NeverFits(f"run {run.name}: pool {name}: {nodes} nodes requested, the pool has {pool.nodes.desired} "
                            f"(nvidia.com/gpu {gpus} > {pool.nodes.desired * pool.instance.gpus})")
        cap = teams[run.team].gpus.get(name)
        if cap is None or gpus > cap.cap:
            raise NeverFits(f"run {run.name}: pool {name}: nvidia.com/gpu {gpus} exceeds team {run.team}'s cap of "
                            f"{0 if cap is None else cap.cap} on that pool")
    check_queue_limit(cfg, run)
    missing = sorted(wanted - {n for n, k in run.nodes.items() if k >= 1})
    if missing:
        raise NeverFits(f"run {run.name}: nodes.{missing[0]}: a run needs at least one node of the training and "
                        f"of the rollout pool; allowed: 1..{next(p for p in cfg.pools if p.name == missing[0]).nodes.desired}")
    tiers = cfg.workloads.network.tier_nodes
    if (why := unplaceable(run, run_tiers(run, run_pools(cfg)[0].name, tiers), tiers)) is not None:
        raise NeverFits(why)


def check_queue_limit(cfg: "ProgramConfig", run: RunFile) -> None:
    """NeverFits when the run alone needs more GPUs of a pool than its team's queue may ever hold there: Volcano's
    enqueue admits a job only while the queue's allocated + admitted + its own fit the queue's limit on every
    dimension the job requests, one per GPU pool (actions/enqueue/enqueue.go:81-103, capacity.go:1680-1692), so
    such a run stays Pending for ever."""
    pools = {p.name: p for p in gpu_pools(cfg)}
    gpus = {pool: n * pools[pool].instance.gpus for pool, n in run.nodes.items()}
    queue = queue_shares(cfg.workloads.teams, list(pools.values()))[run.team]
    for pool in queue.over_limit(gpus):  # within every pool's cap (above): the limit is what the other queues leave
        share, size = queue.pools[pool], pool_gpus(pools[pool])
        raise NeverFits(f"run {run.name}: pool {pool}: {gpus[pool]} GPUs, more than queue team-{run.team}'s limit "
                        f"of {share.limit} there (the pool's {size} GPUs less the {size - share.limit} guaranteed to "
                        f"other queues), so it would stay Pending for ever; allowed: at most {share.limit} GPUs of "
                        f"pool {pool}, or a stack whose other teams guarantee less there")


def _sized(pool: Pool, nodes: int) -> Pool:
    counts = NodeCounts(min=min(pool.nodes.min, nodes), desired=nodes, max=pool.nodes.max)
    return pool.model_copy(update={"nodes": counts})


def run_config(cfg: "ProgramConfig", run: RunFile) -> "ProgramConfig":
    """The stack as ``run`` sees it, checked like the stack's own run (ValueError "run <name>: ...")."""
    check_run(cfg, run)
    check_reward_share(cfg, run)
    seen = run_view(cfg, run)
    try:
        validate_run(seen)
    except ValueError as err:
        raise ValueError(f"run {run.name}: {str(err).replace('workloads.run.', '')}") from None
    check_capabilities(cfg, seen, run)
    return seen


def run_view(cfg: "ProgramConfig", run: RunFile) -> "ProgramConfig":
    """The stack as ``run`` sees it, unchecked: its run in ``workloads.run``, its GPU pools at the run's
    node counts, its team's port of the reward service."""
    spec = RunSpec.model_validate(run.model_dump(exclude={"schema_version", "team", "priority", "nodes", "topology"}))
    # The team's own port of the reward service (its --rm-url), the one its namespace may reach.
    reward = cfg.workloads.reward.model_copy(update={"port": team_reward_port(cfg, run.team)})
    workloads = cfg.workloads.model_copy(update={"run": spec, "runs": [], "reward": reward})
    pools = [_sized(p, run.nodes[p.name]) if p.name in run.nodes else p for p in cfg.pools]
    return cfg.model_copy(update={"pools": pools, "workloads": workloads})


def check_reward_share(cfg: "ProgramConfig", run: RunFile) -> None:
    """ValueError when one rollout step of the run can have more samples waiting for a reward than the
    reward service holds for its team: Miles asks for each finished sample's reward with no bound of its
    own and fails the step on the first refusal (radixark/miles 49cac7b5 rm_hub/__init__.py:19-28), and each
    replica holds at least one running and ``queuePerTeam`` waiting requests of a team
    (docs/design/shared-services.md)."""
    s = cfg.workloads.reward
    if not reward_enabled(cfg):
        return
    samples = run.grpo.rollout_batch_size * run.grpo.n_samples_per_prompt
    held = s.replicas * (1 + s.queue_per_team)
    if samples > held:
        raise ValueError(f"run {run.name}: grpo: {samples} samples per rollout step (rolloutBatchSize x "
                         f"nSamplesPerPrompt) may all wait for a reward at once, more than the {held} requests the "
                         f"reward service holds for a team (workloads.reward.replicas {s.replicas} x (1 + "
                         f"queuePerTeam {s.queue_per_team})), and Miles fails the step on the first refusal; allowed: "
                         f"at most {held} samples per step, or a stack with more reward replicas or a longer queuePerTeam")


def team_reward_port(cfg: "ProgramConfig", team: str) -> int:
    w = cfg.workloads
    return w.reward.team_ports([t.name for t in w.teams])[team]


def check_capabilities(cfg: "ProgramConfig", seen: "ProgramConfig", run: RunFile) -> None:
    """NeverFits when the run's pods select a capability label (``rl.platform/gdrcopy``, ``efa-gda``) that
    the stack's node setup never gives the pool's nodes: they would stay Pending however long they wait."""
    have = node_setups(cfg)
    for pool, setup in gpu_setups(seen, resolve_deepep(seen)).items():
        carried = capability_labels(have.get(pool, GpuNodeSetup()))
        missing = [f"{k}={v}" for k, v in capability_labels(setup).items() if carried.get(k) != v]
        if missing:
            raise NeverFits(f"run {run.name}: pool {pool}: its pods select {', '.join(missing)}, which no node of "
                            f"the pool carries (the stack sets its nodes up for software "
                            f"{', '.join(sorted(p for p in admitted_profiles(cfg)))}); allowed: a software profile the "
                            f"stack admits (versions.software.images), or deepep.ginBackend: proxy")


def run_model(cfg: "ProgramConfig", run: RunFile) -> WorkloadModel:
    """Every pod of the run, derived once (``workloads.derive.model.derive``) from ``run_config``, in the
    team's namespace under the team's service account (whose role reaches only the team's prefix).
    The file system path the pods see is the team's directory (``render.teams.team_fsx_pv``)."""
    return replace(derive(run_config(cfg, run)), namespace=namespace_of(run.team),
                   service_account=TEAM_SERVICE_ACCOUNT, node_setups=node_setups(cfg))


def check_declared_runs(cfg: "ProgramConfig") -> None:
    """The runs declared in the stack (``workloads.runs``): each placeable and valid on its own,
    names unique ("workloads.runs[<name>]...: ...")."""
    seen: set[str] = set()
    for run in cfg.workloads.runs:
        if run.name in seen:
            raise ValueError(f"workloads.runs[{run.name}].name: duplicate run name; allowed: one entry per run")
        seen.add(run.name)
        try:
            run_config(cfg, run)
        except ValueError as err:
            raise ValueError(f"workloads.runs[{run.name}]: {err}") from None
