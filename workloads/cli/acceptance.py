"""Command line: print a pool's acceptance Job, or turn its logs into a report and a plot.

Exit codes: 0 done (report: the run met its figures); 1 a report below its figures, or a cluster that
cannot be used (--apply); 2 an invalid or unknown stack, or (the Job) a pool it has none for. Errors
are one line on stderr (``workloads.cli.base``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence


from workloads.cli.base import cluster_parent, read_stack, run_command, stack_parent
from workloads.pod import fabric_bench as FB
from workloads.derive.model import WorkloadModel

from workloads.acceptance.compare import THRESHOLD, compare
from workloads.acceptance.expected import (EXPECTED, family_of)
from workloads.render.acceptance import (acceptance_job, gpu_group, holds_pool, report_command)
from workloads.acceptance.parsers import (load_fabric_bench, parse_deepep)
from workloads.acceptance.plot import (plot_svg)


# --- command line --------------------------------------------------------------------------------------

def _model(args: argparse.Namespace) -> WorkloadModel:
    from workloads.derive.model import derive
    return derive(read_stack(args))


def report_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m workloads.cli.acceptance report``."""
    p = argparse.ArgumentParser(prog="python -m workloads.cli.acceptance report",
                                description="Compare a fabric acceptance run with its family's figures.",
                                parents=[stack_parent("the stack whose pool ran it (with --pool): its family's "
                                                      "figures")])
    p.add_argument("inputs", nargs="*", type=Path,
                   help="fabric_bench JSON files or Job logs (default: stdin); DeepEP lines are read from logs")
    p.add_argument("--family", choices=sorted(EXPECTED), help="the instance family whose figures to compare with")
    p.add_argument("--pool", help="the pool of --stack that ran it")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help=f"a series or pair fails below this fraction of its figure (default {THRESHOLD})")
    p.add_argument("--relative", type=float, default=0.8,
                   help="or below this fraction of the pool's median of its peers (default 0.8)")
    p.add_argument("--svg", type=Path, help="also write the plot here")
    return p


def job_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m workloads.cli.acceptance``."""
    p = argparse.ArgumentParser(prog="python -m workloads.cli.acceptance",
                                description="Print (or --apply) a GPU pool's fabric acceptance Job. "
                                            "'report' (first argument) compares a finished run.",
                                parents=[stack_parent(), cluster_parent(" for --apply")])
    p.add_argument("pool", help="the GPU pool to test")
    p.add_argument("--apply", action="store_true", help="create the Job on the cluster")
    return p


def _report_main(argv: Sequence[str]) -> int:
    p = report_parser()
    args = p.parse_args(argv)
    if args.family:
        family = args.family
    elif args.stack and args.pool:
        m = _model(args)
        family = family_of(gpu_group(m, args.pool).pool).name
    else:
        p.error("give --family, or --stack and --pool")
    texts = [f.read_text() for f in args.inputs] if args.inputs else [sys.stdin.read()]
    docs = []
    for t in texts:
        try:
            docs.append(load_fabric_bench(t))
        except ValueError:
            continue  # a log without fabric_bench's line (another pod's), or DeepEP's output alone
    if not docs:
        p.error(f"no {FB.FORMAT} document (nor a {FB.JSON_MARKER} line) in the input")
    deepep = [r for t in texts for r in parse_deepep(t)]
    report = compare(docs[-1], family, args.threshold, args.relative, deepep or None)
    if args.svg:
        args.svg.write_text(plot_svg(report))
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if report["ok"] else 1


def apply(job: dict, context: str | None) -> str:
    """Create the Job on the cluster (``kube.connect``: one line, ``kube.NoCluster``, when there is none)."""
    from kubernetes.client import ApiException, CustomObjectsApi

    from workloads.cli import kube
    api = kube.connect(context, (kube.VOLCANO_JOBS,), job["metadata"]["namespace"])
    group, version = job["apiVersion"].split("/")
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    try:
        CustomObjectsApi(api).create_namespaced_custom_object(group, version, namespace, kube.VOLCANO_JOBS.plural, job)
    except ApiException as err:
        if err.status == 409:
            raise kube.NoCluster(f"job {namespace}/{name} exists from an earlier run: read its logs, then `kubectl "
                                 f"-n {namespace} delete jobs.batch.volcano.sh {name}` and apply again") from None
        raise
    return f"{namespace}/{name}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        return run_command("acceptance", lambda: _report_main(argv[1:]))
    return run_command("acceptance", lambda: _job_main(argv))


def _job_main(argv: Sequence[str]) -> int:
    import yaml

    args = job_parser().parse_args(argv)
    try:
        m = _model(args)
        job = acceptance_job(m, args.pool)
    except ValueError as e:
        print(f"acceptance: {e}", file=sys.stderr)
        return 2
    if args.apply:
        print(f"acceptance: created {apply(job, args.context)}", file=sys.stderr)
    else:
        sys.stdout.write(yaml.safe_dump(job, sort_keys=False, width=120))
    if (why := holds_pool(m, args.pool)) is not None:
        print(f"acceptance: warning: {why}", file=sys.stderr)
    print(f"acceptance: when it has finished: {report_command(m, args.pool)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
