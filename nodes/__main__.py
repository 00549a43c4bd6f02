"""The GPU nodes' burn-in, seen and steered from outside (``moe-rl nodes``).

    moe-rl nodes status [--context C] [--json]     every GPU node: pool, result, figures, age, reason
    moe-rl nodes plan STACK [--stack-dir DIR] [-o json|yaml]
                                                    the burn-in time each GPU pool adds before its nodes work
    moe-rl nodes retest NODE... | --refused         taint again and re-test (--refused: the nodes a run's
                                                    preflight refused since they passed)
    moe-rl nodes reset-breaker POOL                 close a pool's tripped replacement breaker (after a look)

``status`` also prints each pool's tripped replacement breaker; it exits 1 when a GPU node is not
passed (failed, testing or not tested), so a script can wait on it;
an invalid or unknown stack exits 2, a cluster that cannot be used 1, each one line on stderr (``workloads.cli.base``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

from .status import NodeRow, NodesClient


def _figures(f: dict) -> str:
    parts = []
    if "all_reduceGBs" in f or "all_to_allGBs" in f:
        parts.append(f"AR {f.get('all_reduceGBs', '-')} / A2A {f.get('all_to_allGBs', '-')} GB/s")
    if "efaLoopbackMBsMin" in f:
        parts.append(f"EFA >= {f['efaLoopbackMBsMin']:g} MB/s")
    if "neighbour" in f:
        parts.append(f"with {f['neighbour']}")
    if "seconds" in f:
        parts.append(f"{f['seconds']} s")
    return ", ".join(parts) or "-"


def _age(seconds: int) -> str:
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h" if seconds >= 86400 else f"{seconds // 3600}h{seconds % 3600 // 60}m"


def status_table(rows: Sequence[NodeRow]) -> list[str]:
    head = ("NODE", "POOL", "BURN-IN", "AGE", "TESTED", "FIGURES", "REASON")
    body = [(r.node, r.pool, r.state, _age(r.age_seconds), r.tested or "-", _figures(r.figures), r.reason or "-")
            for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(x, widths)) + "  " + x[-1] for x in [head, *body]]


def plan_data(stack: str, stack_dir: Path) -> dict:
    """The burn-in each GPU pool of ``stack`` runs before its nodes take work (``nodes.burn_in.plans``), as
    JSON types: what ``plan`` prints, and all of ``plan -o json|yaml``. ``pools`` is empty when burn-in is off."""
    from workloads.derive.model import derive
    from workloads.checks import gate

    from .burn_in import plans
    cfg = gate.read(stack, stack_dir)
    found = plans(derive(cfg), cfg)
    return {"stack": stack, "burn_in": bool(found), "pools": [{
        "pool": b.pool.name, "instance_type": b.pool.instance_type, "nodes": b.pool.nodes.desired,
        "dcgm_level": b.dcgm_level, "node_seconds": b.node_seconds, "steps": dict(b.steps),
        "floors": [asdict(f) for f in b.floors],
        "efa_loopback_floor_mbs": b.loopback_floor_mbs if b.steps["efa"] else None,
        "efa_loopback_floor_source": b.loopback_floor_source or None, "replace_failed": b.replace} for b in found]}


def _loopback(pool: dict) -> str:
    """The pool's EFA loopback floor and where it comes from, where the burn-in runs the EFA step."""
    floor, source = pool["efa_loopback_floor_mbs"], pool["efa_loopback_floor_source"]
    if floor is None:
        return ""
    return f"; EFA loopback >= {floor:g} MB/s" + (f" (measured: {source})" if source else " (derived: below it warns)")


def plan_table(plan: dict) -> list[str]:
    """``plan_data``'s plan as the lines ``plan`` prints."""
    stack = plan["stack"]
    if not plan["burn_in"]:
        return [f"stack {stack}: burn-in off (burnIn.enabled: false); GPU nodes take work as soon as they join"]
    lines = [f"stack {stack}: each new GPU node is tainted until its burn-in passes"]
    for b in plan["pools"]:
        steps = ", ".join(f"{k} {v // 60} min" for k, v in b["steps"].items() if v)
        floors = ", ".join(f"{f['op']} >= {f['busbw']:g} GB/s{' (advisory)' if f['advisory'] else ''}"
                           for f in b["floors"])
        lines.append(f"  {b['pool']}: {b['instance_type']} x {b['nodes']}, DCGM level {b['dcgm_level']}, "
                     f"up to {b['node_seconds'] // 60} min per node ({steps}); "
                     f"floors: {floors or 'none for this family'}{_loopback(b)}"
                     f"{'; nodes failed for a hardware reason replaced' if b['replace_failed'] else ''}")
    return lines


def kube_client(context: str | None) -> NodesClient:
    """A client of the cluster that answers (``workloads.cli.kube.connect``: no kubeconfig, an unknown
    context or a silent API server is one line, not a traceback)."""
    from workloads.cli.kube import connect
    return NodesClient(connect(context))


def parser() -> argparse.ArgumentParser:
    """The command line of ``moe-rl nodes`` (alias ``python -m nodes``)."""
    from workloads.cli.base import cluster_parent, output_parent, stack_parent
    p = argparse.ArgumentParser(prog="python -m nodes", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    cluster = cluster_parent()
    s = sub.add_parser("status", parents=[cluster], help="every GPU node: pool, burn-in result, figures, age, reason; "
                                                         "exit 1 unless every one passed")
    s.add_argument("--json", action="store_true", help="the rows as JSON")
    sub.add_parser("plan", parents=[stack_parent(), output_parent()],
                   help="the burn-in time each GPU pool adds before its nodes work")
    r = sub.add_parser("retest", parents=[cluster], help="taint nodes again and re-test them")
    r.add_argument("nodes", nargs="*", help="node names")
    r.add_argument("--refused", action="store_true", help="also the nodes a run's preflight refused since they passed")
    rb = sub.add_parser("reset-breaker", parents=[cluster], help="close a pool's tripped replacement breaker")
    rb.add_argument("pool", help="the pool's name (stack file, pools[].name)")
    return p


def main(argv: Sequence[str] | None = None, client: Callable[[], NodesClient] | None = None,
         out: Callable[[str], None] = print) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.command == "retest" and not args.nodes and not args.refused:
        p.error("retest: name nodes or pass --refused")
    from workloads.cli.base import run_command
    return run_command("nodes", lambda: _dispatch(args, client, out))


def _dispatch(args: argparse.Namespace, client: Callable[[], NodesClient] | None, out: Callable[[str], None]) -> int:
    if args.command == "plan":
        plan = plan_data(args.stack, args.stack_dir)
        if args.output != "text":
            from workloads.cli.base import formatted
            out(formatted(plan, args.output).rstrip("\n"))
            return 0
        for line in plan_table(plan):
            out(line)
        return 0
    api = client() if client else kube_client(args.context)
    if args.command == "reset-breaker":
        closed = api.reset_breaker(args.pool)
        out(f"{args.pool}: replacement breaker {'reset' if closed else 'was not tripped'}")
        return 0
    if args.command == "status":
        rows = api.rows()
        if args.json:
            out(json.dumps([asdict(x) for x in rows], indent=2))
        else:
            for line in status_table(rows):
                out(line)
            for pool, doc in sorted(api.breakers().items()):
                if doc.get("tripped"):
                    out(f"replacement breaker {pool}: TRIPPED at {doc.get('at', '?')}: {doc['tripped']}; "
                        f"no replacement until python -m nodes reset-breaker {pool}")
        return 0 if rows and all(x.state == "passed" for x in rows) else 1
    names = sorted(set(args.nodes) | set(api.refused_nodes() if args.refused else []))
    for name in names:
        api.retest(name)
        out(f"{name}: tainted, burn-in asked again")
    if not names:
        out("no node to re-test")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
