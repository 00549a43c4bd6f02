"""The benchmark command: what an experiment costs, its arms run on a cluster, and the report of what they
measured.

    python -m bench estimate experiments/seed-ab.yaml --stack p5en-prod   # cost and node time, offline
    python -m bench run experiments/seed-ab.yaml --out results/seed-ab --log-bucket BUCKET --repository URL
    python -m bench run experiments/seed-ab.yaml --out results/seed-ab ... --only miles-nccl/r2   # one attempt again
    python -m bench report results/seed-ab [--stack p5en-shared] [--no-plots]  # offline, from the artifacts

Exit codes: 0 done; 1 an artifact or run that does not add up, or a cluster that cannot be used; 2 an invalid
stack or experiment file (one line on stderr, ``workloads.cli.base``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from typing import TYPE_CHECKING

from workloads.cli.base import (cluster_parent, formatted, image_parent, output_parent, read_input, read_stack,
                                run_command, stack_dir_parent, stack_parent)

from .experiment import load_experiment, schedule

if TYPE_CHECKING:  # pragma: no cover
    from workloads.cli.runs_client import RunClient


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench``."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate", help="what the experiment costs and how long it holds the nodes",
                         parents=[stack_parent("stack whose pool prices to use (default: the experiment's)"),
                                  output_parent()])
    est.add_argument("experiment", type=Path, help="the experiment file (experiments/*.yaml)")
    run = sub.add_parser("run", help="submit the attempts one after another and collect their artifacts",
                         parents=[stack_dir_parent(), cluster_parent(), image_parent()])
    run.add_argument("experiment", type=Path, help="the experiment file (experiments/*.yaml)")
    run.add_argument("--out", type=Path, help="directory to collect into")
    run.add_argument("--dry-run", action="store_true", help="print every attempt's RayJob; contact no cluster")
    run.add_argument("--only", action="append", metavar="ARM/rN",
                     help="run only this attempt (repeatable), under a fresh attempt number, into the --out "
                          "directory it was collected for: an INCOMPLETE attempt again")
    run.add_argument("--cloudwatch", action="store_true",
                     help="also collect the Container Insights GPU and EFA metrics of each attempt (boto3, the "
                          "default AWS credentials, the stack's region)")
    run.add_argument("--log-bucket", help="the stack's checkpoint bucket (pulumi stack output checkpointBucket): "
                                          "driver logs are read from its exported copy once a head is gone")
    rep = sub.add_parser("report", help="report.md, report.json and SVG plots from a collected directory",
                         parents=[stack_parent("price nodes by this stack's pools: Capacity Block and ODCR at the "
                                               "pool's capacity.hourlyPrice (default: on-demand nodes at the "
                                               "catalog's price)")])
    rep.add_argument("dir", type=Path, help="the directory `run --out` collected into")
    rep.add_argument("--across-node-sets", action="store_true",
                     help="compare attempts that ran on different nodes (refused otherwise)")
    rep.add_argument("--spot-prices", metavar="REGION",
                     help="first collect the Spot nodes' prices from EC2 DescribeSpotPriceHistory (boto3, the "
                          "default AWS credentials) into spot-prices.json")
    rep.add_argument("--no-plots", dest="plots", action="store_false",
                     help="write report.md and report.json only (no SVG; matplotlib is not needed)")
    return p


def main(argv: Sequence[str] | None = None, client: "Callable[[], RunClient] | None" = None,
         out: Callable[[str], None] = print, aws: "Callable[[str, str], object] | None" = None) -> int:
    args = parser().parse_args(argv)
    return run_command("bench", lambda: _dispatch(args, client, out, aws or _boto3))


def _dispatch(args: argparse.Namespace, client: "Callable[[], RunClient] | None", out: Callable[[str], None],
              aws: Callable[[str, str], object]) -> int:
    if args.command == "estimate":
        from .cost import estimate, render_estimate
        exp = read_input(load_experiment, args.experiment)
        stack = read_stack(args, args.stack or exp.stack)
        if args.output == "text":
            out(render_estimate(exp, stack))
        else:
            est = {k: v for k, v in asdict(estimate(exp, stack)).items() if k not in ("lines", "reserved")}  # text
            data = {"experiment": exp.name, "stack": stack.stack, **est,
                    "schedule": [{"attempt": a.folder, "nodes": dict(a.run.nodes)} for a in schedule(exp)]}
            out(formatted(data, args.output).rstrip("\n"))
    elif args.command == "run":
        read_input(load_experiment, args.experiment)  # an invalid file is exit 2 before anything runs
        return _run(args, client, out, aws)
    else:
        from .report import write_report
        spot = None
        if args.spot_prices:
            import boto3
            spot = boto3.client("ec2", region_name=args.spot_prices)
        report = write_report(args.dir, args.stack, args.across_node_sets, spot, args.plots, args.stack_dir)
        out(f"wrote {args.dir}/report.md, report.json{' and plots' if args.plots else ''} "
            f"({len(report['arms'])} arms compared)")
    return 0


def _boto3(service: str, region: str):
    import boto3
    return boto3.client(service, region_name=region)


def _run(args: argparse.Namespace, client: "Callable[[], RunClient] | None", out: Callable[[str], None],
         aws: Callable[[str, str], object] = _boto3) -> int:
    """``aws(service, region)``: an AWS client with the default credentials (boto3)."""
    from workloads.cli.runs import kube_client

    from .faults import Injector
    from .runner import run_experiment
    cloudwatch = (lambda region: aws("cloudwatch", region)) if args.cloudwatch else None
    return run_experiment(args.experiment, args.out, args.dry_run, client or (lambda: kube_client(args.context)),
                          out, args.repository, args.stack_dir, cloudwatch,
                          injector=lambda region, cluster: Injector(aws("fis", region), aws("ec2", region), cluster),
                          s3=lambda region: aws("s3", region), log_bucket=args.log_bucket, only=args.only)


if __name__ == "__main__":
    sys.exit(main())
