"""``python -m workloads.cli.torchx``: submit a stack's Miles run through TorchX's kubernetes scheduler
(the component is ``workloads.deploy.torchx_miles``), on this repository's cluster client.

Exit codes, as every command's (``workloads.cli.base``): 0 submitted (or printed, ``--dry-run``); 1 a cluster
that cannot be used or an image repository not given; 2 an invalid or unknown stack."""

from __future__ import annotations

import argparse
import sys

from workloads.cli import kube
from workloads.cli.base import cluster_parent, image_parent, run_command, stack_parent
from workloads.deploy.torchx_miles import appdef, stack_model
from workloads.render.common import VOLCANO_QUEUE


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m workloads.cli.torchx``."""
    p = argparse.ArgumentParser(prog="python -m workloads.cli.torchx",
                                description="Submit the stack's Miles run through TorchX's kubernetes scheduler "
                                            "into its namespace and Volcano queue.",
                                parents=[stack_parent(), cluster_parent(), image_parent()])
    p.add_argument("--dry-run", action="store_true", help="print the Volcano Job; contact no cluster")
    return p


def main(argv: list[str] | None = None) -> int:
    """Submit on a client from ``workloads.cli.kube``: no cluster is one line and exit 1 instead of torchx's
    traceback, an invalid stack exit 2 (``workloads.cli.base.run_command``)."""
    args = parser().parse_args(argv)
    return run_command("torchx", lambda: _submit(args))


def _submit(args: argparse.Namespace) -> int:
    from torchx.runner import get_runner
    m = stack_model(args.stack, args.stack_dir)
    app = appdef(m, args.repository)
    cfg = {"namespace": m.namespace, "queue": VOLCANO_QUEUE, "reserved_millicpu": 0, "reserved_memmb": 0}
    if args.dry_run:
        print(get_runner().dryrun(app, "kubernetes", cfg={**cfg, "validate_spec": False}))
        return 0
    with get_runner(client=kube.connect(args.context, (kube.VOLCANO_JOBS,), m.namespace)) as runner:
        print(f"torchx: submitted {runner.run(app, 'kubernetes', cfg=cfg)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
