"""``python -m workloads.cli.torchx``: submit a stack's Miles run through TorchX's kubernetes scheduler
(the component is ``workloads.deploy.torchx_miles``), on this repository's cluster client."""

from __future__ import annotations

import argparse
import sys

from stackconfig.stack import StackConfigError

from workloads.cli import kube
from workloads.deploy.torchx_miles import appdef, stack_model
from workloads.render.common import VOLCANO_QUEUE


def main(argv: list[str] | None = None) -> int:
    """``python -m workloads.cli.torchx <stack> [--repository R] [--context C] [--dry-run]``: submit
    through TorchX's kubernetes scheduler into the stack's namespace and queue, on a client from
    ``workloads.cli.kube`` (one line and exit 1 when no cluster answers, instead of torchx's traceback)."""
    from torchx.runner import get_runner
    p = argparse.ArgumentParser(prog="python -m workloads.cli.torchx", description=main.__doc__.split(":")[0])
    p.add_argument("stack")
    p.add_argument("--stack-dir", default="stacks")
    p.add_argument("--repository", default="", help="pulumi stack output imageRepository")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--dry-run", action="store_true", help="print the Volcano Job; contact no cluster")
    args = p.parse_args(argv)
    try:
        m = stack_model(args.stack, args.stack_dir)
        app = appdef(m, args.repository)
        cfg = {"namespace": m.namespace, "queue": VOLCANO_QUEUE, "reserved_millicpu": 0, "reserved_memmb": 0}
        if args.dry_run:
            print(get_runner().dryrun(app, "kubernetes", cfg={**cfg, "validate_spec": False}))
            return 0
        with get_runner(client=kube.connect(args.context, (kube.VOLCANO_JOBS,), m.namespace)) as runner:
            print(f"torchx: submitted {runner.run(app, 'kubernetes', cfg=cfg)}", file=sys.stderr)
    except kube.CLUSTER_ERRORS as err:
        print(f"torchx: {kube.explain(err)}", file=sys.stderr)
        return 1
    except (ValueError, StackConfigError) as err:  # the stack file, the image repository
        print(f"torchx: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
