"""The run command: plan runs offline, and submit, list, show, follow and cancel them on a cluster.

    python -m workloads.cli.runs plan   <stack> runs/*.yaml [--running a,b]   # offline; exit 1 if a run never fits
    python -m workloads.cli.runs submit <stack> runs/x.yaml [--dry-run] [--resume] [--repository URL]
    python -m workloads.cli.runs list   [--team T] [-o json|yaml]
    python -m workloads.cli.runs show   <team> <run> [-o json|yaml]
    python -m workloads.cli.runs follow <team> <run>
    python -m workloads.cli.runs cancel <team> <run> [--now]
    python -m workloads.cli.runs profiles [<profile>] [--build]        # software profiles and their pins
    python -m workloads.cli.runs profiles <profile> --record-image FILE  # keep the built image's versions file

Exit codes: 0 done; 1 a run that never fits (plan), a cluster that cannot be used or a request it
refuses; 2 an invalid stack or run file. Errors are one line on stderr (``workloads.cli.base``).

``submit --dry-run`` prints what it would create without a cluster (tiers from the stack's
``workloads.network``); otherwise tiers come from the cluster's HyperNodes. ``--resume`` submits the
next attempt, which resumes from the run's last complete checkpoint. A run whose image is in the
stack's own ECR repository (its profile's default, or a ``versions.software.images`` entry written with
``{imageRepository}``) needs ``--repository "$(pulumi stack output imageRepository --stack <stack>)"``: the
URL holds the AWS account id, which no stack file does (``--dry-run`` prints the placeholder). The
cluster is the current kubeconfig context (``--context`` on each command that talks to it to choose
another); the stack files are read from ``--stack-dir``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import yaml

from software import profile, profiles
from software.report import record_image, report
from stackconfig.images import STACK_REPOSITORY, with_repository

from workloads.cli import kube
from workloads.derive.checkpoint_budget import GB
from workloads.cli.base import (InvalidFile, cluster_parent, formatted, image_parent, output_parent, read_input,
                                read_stack, run_command, stack_parent)
from workloads.render.teams import namespace_of
from workloads.cli.runs_client import RunClient, attempt_of
from workloads.checks.runs import input_problems, load_run, run_pools
from workloads.checks.run_plan import Planner
from workloads.checks.pool_guarantees import unmet_guarantees
from workloads.deploy.submit import run_objects, sendable
from workloads.schema.run import RunFile

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig
from workloads.derive.topology import run_tiers


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m workloads.cli.runs``."""
    p = argparse.ArgumentParser(prog="python -m workloads.cli.runs", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    stack, cluster = stack_parent(), cluster_parent()
    plan = sub.add_parser("plan", parents=[stack, output_parent()],
                          help="which runs start, wait or are preempted; exit 1 if one never fits")
    plan.add_argument("runs", nargs="+", type=Path, help="run files (runs/*.yaml)")
    plan.add_argument("--running", default="", help="comma-separated runs already running (name, or team/name)")
    submit = sub.add_parser("submit", parents=[stack, cluster, image_parent()],
                            help="create the run's RayJob in its team's namespace")
    submit.add_argument("run", type=Path, help="the run file")
    submit.add_argument("--dry-run", action="store_true", help="print the objects; contact no cluster")
    submit.add_argument("--resume", action="store_true", help="submit the next attempt of a run")
    lst = sub.add_parser("list", parents=[cluster, output_parent()], help="every run's attempts and state")
    lst.add_argument("--team", help="one team's runs (a team member may read no other namespace)")
    for name, text in (("show", "a run's attempts, gang and pods"), ("follow", "stream a run's driver log"),
                       ("cancel", "stop a run after it checkpoints")):
        cmd = sub.add_parser(name, parents=[cluster, output_parent()] if name == "show" else [cluster], help=text)
        cmd.add_argument("team", help="the run's team (namespace team-<team>)")
        cmd.add_argument("run", help="the run's name (its run file's name:)")
    sub.choices["cancel"].add_argument("--now", action="store_true", help="no checkpoint: delete the pods at once")
    sub.choices["cancel"].add_argument("--wait-minutes", type=int, default=30,
                                       help="longest wait for the checkpoint before deleting (default 30)")
    profiles = sub.add_parser("profiles", parents=[output_parent()],
                              help="the software profiles a run can name, with their pins")
    profiles.add_argument("profile", nargs="?", help="one profile (default: every one; an unknown name is refused listing them)")
    profiles.add_argument("--build", action="store_true", help="print the image build command instead")
    profiles.add_argument("--record-image", type=Path, metavar="FILE",
                          help="the built image's /etc/rl-platform-image-versions: its NCCL becomes the profile's")
    return p


def read_runs(cfg: "ProgramConfig", paths: Sequence[Path]) -> list[RunFile]:
    """The run files, each read and held to its stack (what it names must be declared there), and no
    two the same run of a team; InvalidFile with every problem of every file, one line each."""
    problems: list[str] = []
    runs: list[RunFile] = []
    seen: dict[str, Path] = {}
    for path in paths:
        try:
            run = read_input(load_run, path)
        except InvalidFile as err:
            problems += err.lines()
            continue
        problems += [f"{path}: {p}" for p in input_problems(cfg, run)]
        if run.key in seen:
            problems.append(f"{path}: name: {run.name!r} is team {run.team}'s run of {seen[run.key]} too; allowed: "
                            f"one file per run of a team (another name, or another team's run)")
        seen.setdefault(run.key, path)
        runs.append(run)
    if problems:
        raise InvalidFile(problems)
    return runs


def plan(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    cfg = read_stack(args)
    runs = read_runs(cfg, args.runs)
    planner = Planner(cfg)
    decisions = planner.plan(runs, frozenset(filter(None, args.running.split(","))))
    train = run_pools(cfg)[0].name
    by_key = {r.key: r for r in runs}
    runs_of = [by_key[f"{d.team}/{d.run}"] for d in decisions]
    if args.output != "text":
        out(formatted([{**asdict(d), "placed": d.placed} for d in decisions], args.output).rstrip("\n"))
        return 0
    for d, run in zip(decisions, runs_of):
        claims = ", ".join(f"{pool} {g} GPUs" for pool, g in d.gpus.items())
        tiers = "; ".join(t.describe() for t in run_tiers(run, train, cfg.workloads.network.tier_nodes))
        out(f"{d.run:<22} team {d.team:<10} {d.priority:<7} {d.action:<9} {claims:<30} {d.why}")
        out(f"{'':<22} network: {tiers}")
    placed = [run for d, run in zip(decisions, runs_of) if d.placed]
    for team in cfg.workloads.teams:
        parts = []
        for pool, quota in team.gpus.items():
            used = sum(planner.gpus(r).get(pool, 0) for r in placed if r.team == team.name)
            parts.append(f"pool {pool} {used}/{quota.cap} GPUs (guarantee {quota.guarantee})")
        out(f"queue team-{team.name}: " + ", ".join(parts))
    for unmet in unmet_guarantees(planner, runs_of, decisions):
        out(unmet.line())
    for name, pool in planner.pools.items():
        used = sum(r.nodes.get(name, 0) for r in placed)
        out(f"pool {name}: {used}/{pool.nodes.desired} nodes claimed by running and starting runs")
    disk = sum(planner.disk[r.key] for r in placed)
    out(f"file system: {disk / GB:,.0f} of {planner.usable / GB:,.0f} GB usable budgeted by running and starting runs "
        f"(saves kept, staged model and data)")
    return 0


def submit(args: argparse.Namespace, client: Callable[[], RunClient], out: Callable[[str], None]) -> int:
    cfg = read_stack(args)
    run = read_runs(cfg, [args.run])[0]
    if args.dry_run:
        objs = run_objects(cfg, run)
        out(f"# {objs.gang.describe()}; {objs.trainer.describe()}")
        shown = with_repository(objs.rayjob, args.repository or STACK_REPOSITORY, args.stack)
        out(yaml.safe_dump(shown, sort_keys=False))
        return 0
    sendable(cfg, run_objects(cfg, run).rayjob, args.repository)  # fail before touching the cluster
    api = client()
    busy = api.unfinished(run.team, run.name)
    if busy:
        raise ValueError(f"run {run.name}: {', '.join(busy)} not finished; an attempt shares the checkpoint directory, "
                         f"so cancel it (runs cancel {run.team} {run.name}) or wait before submitting another")
    if args.resume:
        run = attempt_of(run, api.next_attempt(run))
    train, rollout = run_pools(cfg)
    sizes, trainers = api.run_tier_sizes(run, train.name, rollout.name)
    objs = run_objects(cfg, run, sizes or None, trainers or None)
    created = api.submit(sendable(cfg, objs.rayjob, args.repository))
    out(f"submitted {created['metadata']['namespace']}/{created['metadata']['name']} "
        f"({objs.gang.describe()}; {objs.trainer.describe()})")
    return 0


def _table(api: RunClient, team: str | None, out: Callable[[str], None]) -> None:
    for s in api.list(team):
        out(f"{s.team:<12} {s.run:<24} attempt {s.attempt:<3} {s.deployment_status or 'New':<14} "
            f"{s.job_status or '-':<10} {s.message}")


def _data(api: RunClient, args: argparse.Namespace) -> list | dict:
    """What ``list`` or ``show`` prints, as JSON types (``-o json|yaml``): each attempt's ``RunStatus``
    fields; for ``show`` also the gang's (PodGroup's) phase and each pod's phase by name."""
    if args.command == "list":
        return [asdict(s) for s in api.list(args.team)]
    shown = api.show(args.team, args.run)
    return {**shown, "attempts": [asdict(s) for s in shown["attempts"]]}


def on_cluster(args: argparse.Namespace, client: Callable[[], RunClient], out: Callable[[str], None]) -> int:
    api = client()
    if args.command in ("list", "show") and args.output != "text":
        out(formatted(_data(api, args), args.output).rstrip("\n"))
    elif args.command == "list":
        _table(api, args.team, out)
    elif args.command == "show":
        shown = api.show(args.team, args.run)
        for s in shown["attempts"]:
            out(f"{s.rayjob}: {s.deployment_status or 'New'} {s.job_status or '-'} {s.message}")
        out(f"gang (PodGroup): {shown['podGroup']}")
        for pod, phase in sorted(shown["pods"].items()):
            out(f"  {pod}: {phase}")
    elif args.command == "follow":
        for chunk in api.follow(args.team, args.run):
            out(chunk.rstrip("\n"))
    else:
        saved = None if args.now else api.checkpoint(args.team, args.run, args.wait_minutes * 60)
        names = api.cancel(args.team, args.run, now=args.now)
        how = ("pods deleted at once, no checkpoint" if args.now else "after its checkpoint" if saved else
               f"no checkpoint: none running, the request failed, or none within {args.wait_minutes} min")
        out(f"cancelled {', '.join(names) or 'nothing'} ({how})")
    return 0


def kube_client(context: str | None, team: str | None = None) -> RunClient:
    """A client of the cluster that answers, serves RayJobs and, for a team, has its namespace."""
    return RunClient(kube.connect(context, (kube.RAYJOBS,), namespace_of(team) if team else None))


def main(argv: Sequence[str] | None = None, client: Callable[[], RunClient] | None = None,
         out: Callable[[str], None] = print) -> int:
    args = parser().parse_args(argv)
    make = client or (lambda: kube_client(getattr(args, "context", None), getattr(args, "team", None)))
    return run_command("runs", lambda: _dispatch(args, make, out))


def _dispatch(args: argparse.Namespace, make: Callable[[], RunClient], out: Callable[[str], None]) -> int:
    if args.command == "plan":
        return plan(args, out)
    if args.command == "submit":
        return submit(args, make, out)
    if args.command == "profiles":
        if args.record_image and not args.profile:
            raise ValueError("profiles --record-image: name the profile whose image it is")
        if args.output != "text" and not args.record_image and not args.build:
            chosen = [profile(args.profile)] if args.profile else list(profiles().values())
            out(formatted({p.name: p.model_dump(mode="json", by_alias=True) for p in chosen}, args.output).rstrip("\n"))
            return 0
        lines = (record_image(args.profile, args.record_image.read_text()) if args.record_image
                 else report(args.profile, args.build))
        for line in lines:
            out(line)
        return 0
    return on_cluster(args, make, out)


if __name__ == "__main__":
    sys.exit(main())
