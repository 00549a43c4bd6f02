"""Offline plan of a stack: ``moe-rl plan <stack> [--json FILE] [--diagram FILE.svg]``.

Runs the real program for the stack under Pulumi's mock engine (no Pulumi CLI, no AWS
credentials, no network) and prints, per pool, instance type, capacity, nodes, GPUs, EFA
devices and bandwidth and cost; the IP budget; where each workload pod lands; the resource
graph and its modelled deploy critical path; and every rule violation. Exit code: 0 when the
stack passes every rule, 1 when a rule is violated, 2 when the stack's config does not validate.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from stackconfig.stack import StackConfig, StackConfigError
from stackconfig.files import STACKS_DIR

EXIT_OK, EXIT_VIOLATIONS, EXIT_INVALID = 0, 1, 2


def workload_placements(cfg: StackConfig) -> tuple[list[Any] | None, str]:
    """The workloads' schedulability check on the workload model derived from ``cfg``."""
    from workloads.derive.model import derive
    from workloads.checks.schedulability import check
    return list(check(derive(cfg))), ""


def record(cfg: StackConfig):
    """Run the program for ``cfg`` under mocks; return the graph it registered."""
    if _PROCESS["trim_sdks"]:
        _trim_sdks()
    import program
    from analysis import mocks
    try:
        return mocks.run(lambda: program.build(cfg), region=cfg.region, stack=cfg.stack)
    except StackConfigError:
        raise
    except Exception as err:
        if _PROCESS["trimmed"]:  # the trimmed SDKs' doing or not: the SDKs in full have the last word
            _plan_again_in_full(err)
        raise


_PROCESS = {"trim_sdks": False, "trimmed": False}
"""Set by ``own_process``: the first ``record`` installs the trimmed SDKs (and says so here)."""


def _trim_sdks() -> None:
    """analysis/sdk_subset.py's SDKs for this process, once; where they cannot be had (a cache that cannot be
    written, an SDK generated otherwise), the SDKs load in full, with one line saying why."""
    _PROCESS["trim_sdks"] = False
    from analysis import sdk_subset
    try:
        _PROCESS["trimmed"] = bool(sdk_subset.install())
    except Exception as err:  # noqa: BLE001 - any: the SDKs in full plan the same, only slower
        print(f"plan: the SDKs load in full ({type(err).__name__}: {err})", file=sys.stderr)


def _plan_again_in_full(err: Exception) -> NoReturn:
    """This process's command again in a process of its own with the SDKs in full (``python -m moe_rl.cli``,
    which sets up no process): the plan printed nothing yet, and prints what the SDKs in full give."""
    print(f"plan: {type(err).__name__}: {err}; planning again with the SDKs in full", file=sys.stderr)
    _flush()
    os.execv(sys.executable, [sys.executable, "-m", "moe_rl.cli", *sys.argv[1:]])


class WorkloadsDoNotFit(Exception):
    """The program refuses to register anything because workload pods would stay Pending."""

    def __init__(self, cfg: StackConfig, placements: list[Any], refusal: StackConfigError):
        super().__init__(str(refusal))
        self.cfg, self.placements, self.refusal = cfg, placements, refusal


def plan_stack(stack: str, directory: Path = STACKS_DIR):
    """Validate, record and judge one stack. Raises StackConfigError for an invalid config and
    WorkloadsDoNotFit when the program refuses to build because pods cannot be placed."""
    from analysis.planning import make_plan
    from workloads.checks import gate
    cfg = gate.typed(stack, directory)
    found = gate.field_problems(cfg)  # the gate's checks, then the pods' fit shown as placements
    if found:
        with gate.of_file(stack, directory):
            raise StackConfigError(gate.report(stack, found))
    placements, note = workload_placements(cfg)
    try:
        graph = record(cfg)
    except StackConfigError as err:
        if placements and not all(p.fits for p in placements):
            raise WorkloadsDoNotFit(cfg, placements, err) from None
        raise
    return make_plan(cfg, graph, placements, note), graph


# --- text ---------------------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}:{s:02d}"


def _money(usd: float) -> str:
    return f"{usd:,.2f}"


def _table(rows: Sequence[Sequence[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                             enumerate(zip(r, widths))).rstrip() for r in rows]


def render_text(plan) -> str:
    t = plan.totals
    out = [f"Plan for stack {plan.stack}: region {plan.region}, zone {plan.zone}, cluster {plan.cluster}, "
           f"Kubernetes {plan.kubernetes}",
           "(the real program under Pulumi mocks: no Pulumi CLI, no AWS credentials, no network)", "",
           "Pools (nodes min/desired/max; GPUs, EFA bandwidth and $/h at desired size)"]
    rows = [["pool", "instance", "capacity", "nodes", "GPUs", "EFA/node", "Gbps/node", "Gbps total",
             "$/node-h", "$/h", "$/GPU-h", "price"]]
    for p in plan.pools:
        rows.append([p.name, p.instance_type, p.capacity, f"{p.nodes_min}/{p.nodes_desired}/{p.nodes_max}",
                     str(p.gpus_desired), f"{p.efa_attached}/{p.efa_max}" if p.efa_max else "-",
                     f"{p.efa_gbps_per_node:,.0f}" if p.efa_max else "-",
                     f"{p.efa_gbps_total:,.0f}" if p.efa_max else "-", _money(p.usd_per_node_hour), _money(p.usd_per_hour),
                     "-" if p.usd_per_gpu_hour is None else _money(p.usd_per_gpu_hour), p.price_basis])
    out += _table(rows, right={3, 4, 5, 6, 7, 8, 9, 10})
    per_gpu = "" if t.usd_per_gpu_hour is None else f", ${_money(t.usd_per_gpu_hour)} per GPU-hour all-in"
    out += [f"  total: {t.nodes_desired} nodes ({t.gpu_nodes_desired} GPU nodes), {t.gpus_desired} GPUs "
            f"(max {t.gpus_max}), {t.efa_gbps_total:,.0f} Gbps EFA; ${_money(t.usd_per_hour)}/h at desired, "
            f"${_money(t.usd_per_hour_max)}/h at max{per_gpu}", ""]

    out.append(f"IP budget (node and pod IPs at max pool size; prefix delegation "
               f"{'on' if plan.prefix_delegation else 'off'})")
    rows = [["subnet", "zone", "cidr", "holds", "needs", "use", "pools"]]
    for b in plan.ip_budget:
        rows.append([b.name, b.zone, b.cidr, f"{b.capacity:,}", f"{b.demand:,}",
                     f"{100 * b.demand / b.capacity:.0f}%", ", ".join(b.pools) or "-"])
    out += _table(rows, right={3, 4, 5}) + [""]

    out += _placement_lines(plan.placements, plan.placements_note) + [""]
    out += run_lines(plan.config) + [""]

    counts = sorted(plan.resource_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out.append(f"Resource graph: {sum(plan.resource_counts.values())} resources in {len(counts)} types, "
               f"grouped by {plan.components} components")
    names = [f"{n:>3} {ty.split(':')[0]}:{ty.split(':')[1].split('/')[0]}/{ty.rsplit(':', 1)[1]}"
             for ty, n in counts]
    half = (len(names) + 1) // 2
    width = max(len(n) for n in names[:half])
    for left, right in zip(names[:half], names[half:] + [""]):
        out.append(f"  {left.ljust(width)}   {right}".rstrip())
    out.append("")

    s = plan.schedule
    out.append(f"Deploy critical path (modelled from typical create times, analysis/create_times.py): "
               f"{_duration(s.critical_seconds)}; fully serial {_duration(s.serial_seconds)} "
               f"({s.parallelism:.1f}x parallelism kept)")
    rows = [["start", "takes", "resource", "waits on previous by"]]
    for p in s.path:
        rows.append([_clock(p.step.start), _clock(p.step.seconds), f"{p.step.type} {p.step.name}", p.via])
    out += _table(rows, right={0, 1})
    if plan.inherited:
        on_path = {p.step.urn for p in s.path}
        out.append(f"  held back by a parent component's depends_on, not by their own inputs "
                   f"({len(plan.inherited)}):")
        for st, delay in sorted(plan.inherited, key=lambda x: -x[1]):
            out.append(f"    {st.type} {st.name}: starts {_duration(delay)} after its inputs are ready"
                       + ("; on the critical path" if st.urn in on_path else ""))
        if plan.unheld_seconds < s.critical_seconds:
            out.append(f"  without these holds the critical path would be {_duration(plan.unheld_seconds)}")
    out.append("")

    out += [f"Warnings (a deploy refuses these while they stand): {len(plan.warnings)}"] if plan.warnings else []
    out += [f"  WARNING {w}" for w in plan.warnings]
    out += _violation_lines(plan.violations)
    return "\n".join(out) + "\n"


def run_lines(cfg: StackConfig) -> list[str]:
    """The run as the workload model derives it: submission, MoE path, images, checkpoints, and
    where Miles puts its training actors."""
    from stackconfig.images import STACK_REPOSITORY
    from workloads.derive.checkpoint_budget import GB, budget
    from workloads.derive.deepep import expert_precision, moe_backend
    from workloads.derive.model import derive
    from workloads.render import pod_templates
    from workloads.schema.teams import team_file_system_quotas, team_project_id
    m = derive(cfg)
    out = [f"Run: submitted through {m.settings.submit.value}"]
    if m.runs:
        out = ["Runs: teams submit them (moe-rl runs plan|submit "
               f"{cfg.stack} runs/<run>.yaml), each with its own Ray cluster in its team's queue"]
        storage = team_file_system_quotas(m.settings.teams, m.settings.storage.capacity_gib)
        ports = m.settings.reward.team_ports([t.name for t in m.settings.teams])
        for team in m.settings.teams:
            quotas = ", ".join(f"{pool} {q.guarantee}/{q.deserved}/{q.cap} GPUs" for pool, q in team.gpus.items())
            out.append(f"  team {team.name}: namespace/queue team-{team.name}, "
                       f"{'reclaimable' if team.reclaimable else 'not reclaimable'}, guarantee/deserved/cap {quotas}; "
                       f"file system {storage[team.name]} GiB (Lustre project {team_project_id(team.name)})"
                       f"{f', reward service port {ports[team.name]}' if m.reward else ''}")
        out.append("  below: the largest run (every GPU node) with the stack's default run settings")
    if m.argv is None:
        return out + [f"  {m.no_run}"]
    moe = moe_backend(cfg)
    soft = m.profile
    out.append(f"  software profile {soft.name}: {soft.summary}; image base {soft.image.base}, fabric "
               f"{m.settings.run.fabric}")
    for pool in m.gpu_pools:
        g = next(w for w in m.workers if w.pool.name == pool.name and w.gpus)
        a2a = moe.moe_a2a_backend if pool.role.value == "rollout" else moe.moe_token_dispatcher_type
        gin = {"5": "GPU-initiated (GIN type 5)", "2": "CPU proxy (GIN type 2)"}.get(g.env.get("NCCL_GIN_TYPE", ""), "none")
        out.append(f"    pool {pool.name}: profile {soft.name}, a2a {a2a}, GIN {gin}, NCCL {soft.nccl} "
                   f"over {'sockets' if g.env.get('NCCL_NET') == 'Socket' else 'EFA (aws-ofi-nccl)' if g.efa else 'no EFA'}")
    out.append(f"  MoE all-to-all: SGLang {moe.moe_a2a_backend} / runner {moe.moe_runner_backend}"
               f"{f' / mode {moe.deepep_mode}' if moe.deepep_mode else ''}"
               f"{f' / v2 mode {moe.deepep_v2_mode}' if moe.deepep_v2_mode else ''}; "
               f"Megatron {moe.moe_token_dispatcher_type}{' + DeepEP' if moe.moe_enable_deepep else ''} "
               f"({expert_precision(cfg)} experts, {m.settings.run.rollout.nodes_per_engine} node(s) per engine)")
    images: dict[str, list[str]] = {}
    for name, _, template, replicas in pod_templates(m):
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            if replicas and name not in images.setdefault(c["image"], []):
                images[c["image"]].append(name)
    ecr = f".dkr.ecr.{cfg.region}.amazonaws.com/"
    for image, pods in images.items():
        pinned = "digest-pinned" if "@sha256:" in image else "NOT digest-pinned"
        source = ("the stack's ECR repository (output imageRepository)" if image.startswith(STACK_REPOSITORY)
                  else "ECR in the region" if ecr in image else "NOT from ECR in the region: pulls go through the NAT")
        out.append(f"  image {image} ({pinned}; {source}): {', '.join(pods)}")
    from workloads.checks.schedulability import GPU, EFA, check, pool_claims
    out.append("  pool claims at desired size (every pod of every consumer / what the nodes offer):")
    for c in pool_claims(m, check(m)):
        cells = [f"{c.claimed[GPU]:g}/{c.capacity[GPU]:g} GPU", f"{c.claimed[EFA]:g}/{c.capacity[EFA]:g} EFA",
                 f"{c.claimed['cpu'] / 1000:,.0f}/{c.capacity['cpu'] / 1000:,.0f} CPU",
                 f"{c.claimed['memory'] / 1e9:,.0f}/{c.capacity['memory'] / 1e9:,.0f} GB"]
        out.append(f"    {c.pool:<9} {c.nodes:>3} nodes: {', '.join(cells)}"
                   + (f"  OVER: {', '.join(c.over)}" if c.over else ""))
    b = budget(cfg, expert_precision(cfg))
    out.append(f"  checkpoints: {b.save_bytes / GB:,.0f} GB per save, {b.saves_kept} kept at most "
               f"(--save-retain-interval), + model {b.hf_bytes / GB:,.0f} GB + data {b.data_bytes / GB:,.0f} GB = "
               f"{b.need_bytes / GB:,.0f} GB of {b.usable_bytes / GB:,.0f} GB usable on FSx")
    from workloads.render.acceptance import acceptance_command
    for pool in m.gpu_pools:
        out.append(f"  fabric acceptance ({pool.name}): {acceptance_command(m, pool.name)}")
    train = m.worker("trainer")
    out.append(f"  training actors: Miles' first {train.gpus * train.replicas} placement-group bundles select "
               f"ray.io/node-group={train.name} (the {train.replicas} {train.name} pods of pool {train.pool.name}) and "
               f"sort first: the Miles launcher (workloads/pod/miles_launcher.py), not node IP order")
    return out


def _placement_lines(placements: list[Any] | None, note: str) -> list[str]:
    out = ["Workload placement"]
    if placements is None:
        return out + [f"  {note}"]
    if not placements:
        return out + ["  no pod templates"]
    rows = [["pod", "pool", "fits"]]
    for p in placements:
        rows.append([p.pod, p.pool or "-", "yes" if p.fits else "NO: " + "; ".join(p.problems)])
    return out + _table(rows)


def _violation_lines(violations: Sequence[Any]) -> list[str]:
    if not violations:
        return ["Violations: none"]
    return [f"Violations: {len(violations)}"] + [f"  VIOLATION {v}" for v in violations]


def render_refusal(refused: WorkloadsDoNotFit) -> str:
    """What can be shown when the program registers nothing: where each pod lands, and why not."""
    from analysis.rules.plan import check_placements
    cfg = refused.cfg
    out = [f"Plan for stack {cfg.stack}: region {cfg.region}, zone {cfg.availability_zone}, "
           f"cluster {cfg.cluster_name}",
           "The program registers nothing for this stack: workload pods would stay Pending.", ""]
    out += _placement_lines(refused.placements, "") + [""]
    out += _violation_lines(check_placements(refused.placements))
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m analysis.plan`` (``moe-rl plan``)."""
    from workloads.cli.base import output_parent, stack_parent
    p = argparse.ArgumentParser(prog="python -m analysis.plan", description=__doc__.split("\n\n")[0],
                                parents=[stack_parent(), output_parent()])
    p.add_argument("--json", metavar="FILE", type=Path, help="write the plan as JSON")
    p.add_argument("--diagram", metavar="FILE.svg", type=Path, help="write the architecture diagram (SVG)")
    p.add_argument("--image-steps", action="store_true",
                   help="print only the shell lines that copy and first-pull the stack's images into its registry "
                        "($REPO: the imageRepository output)")
    return p


def image_steps(stack: str, directory: Path) -> int:
    """``program.image_steps`` of a stack that passes the gate, one line each."""
    import program
    from workloads.checks import gate
    try:
        cfg = gate.read(stack, directory)
    except StackConfigError as err:
        from workloads.cli.base import problem_lines
        for line in problem_lines(err):
            print(f"plan: {line}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write("".join(f"{line}\n" for line in program.image_steps(cfg)))
    return EXIT_OK


@contextlib.contextmanager
def _no_cycle_collection():
    """The plan allocates millions of objects (the SDKs' classes, the mock engine's Outputs) and frees
    them at exit; CPython's cyclic collector, triggered by allocations, re-walks every one of them (the
    library call on p5en-prod: 3.5 s of CPU with it, 3.2 s without, for 6 MB of peak memory). Reference
    counting still frees everything else; the collector is back on afterwards for a caller in-process."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def own_process() -> Callable[[int], NoReturn]:
    """Set up a process that runs nothing but this command: the installed ``moe-rl plan`` (not a test's
    process, nor ``python -m analysis.plan``, the alias a test runs in its own). The cyclic collector is
    off for the process's life (``main`` turns it off while it runs; this covers imports and exit too);
    the first plan recorded loads the SDKs trimmed to the classes the program uses (analysis/sdk_subset.py);
    and the returned function ends the process: output flushed, then out without freeing what it built, as
    mypy ends (mypy/util.py ``hard_exit``). BENCHMARKS.md has the CPU time against the library call's."""
    gc.disable()
    _PROCESS["trim_sdks"] = True
    return _leave


def _leave(code: int) -> NoReturn:
    _flush()
    os._exit(code)


def _flush() -> None:
    """What the process printed, out before it is replaced or ends without Python's own exit."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (``| head``): nothing more to say
            stream.flush()


def main(argv: Sequence[str] | None = None) -> int:
    with _no_cycle_collection():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.image_steps:
        return image_steps(args.stack, args.stack_dir)
    try:
        plan, graph = plan_stack(args.stack, args.stack_dir)
    except StackConfigError as err:
        from workloads.cli.base import problem_lines
        for line in problem_lines(err):
            print(f"plan: {line}", file=sys.stderr)
        return EXIT_INVALID
    except WorkloadsDoNotFit as refused:
        sys.stdout.write(render_refusal(refused))
        return EXIT_VIOLATIONS
    if args.output == "text":
        sys.stdout.write(render_text(plan))
    else:
        from workloads.cli.base import formatted
        sys.stdout.write(formatted(plan.to_json(), args.output))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(plan.to_json(), indent=2) + "\n")
    if args.diagram:
        from analysis.diagram import architecture_svg
        args.diagram.parent.mkdir(parents=True, exist_ok=True)
        args.diagram.write_text(architecture_svg(plan, graph))
    return EXIT_OK if plan.ok else EXIT_VIOLATIONS


if __name__ == "__main__":
    sys.exit(main())
