"""``moe-rl``: the platform's one command. Each subcommand is an existing command's own parser and main,
reached with the arguments as typed (``moe-rl runs plan p5en-shared runs/*.yaml`` runs
``workloads.cli.runs.main(["plan", "p5en-shared", ...])``), so nothing is parsed twice; the ``python -m``
paths stay as aliases. What this layer adds: one entry point and its help, ``--stacks DIR`` (given to
every subcommand that reads a stack, as its ``--stack-dir``), the subcommands' own names in their usage
lines, and shell completion (click's: subcommands, options, stack names, and paths elsewhere).

Exit codes (every subcommand): 0 done; 1 a refusal on the merits (a plan with violations, a run that never
fits, a node not passed, a cluster or service that cannot be used); 2 bad input (an invalid or unknown stack,
run or experiment file, a wrong argument). The table of bad-input cases: docs/reference/cli.md.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import click
from click.shell_completion import CompletionItem

STACKS_ENV = "MOE_RL_STACKS"


@dataclass(frozen=True)
class Sub:
    """A subcommand: the module whose ``main(argv)`` it runs, the arguments put before the user's, and
    the module's parser for those arguments (for ``--stacks``, completion and the reference page)."""

    module: str
    help: str
    parser: Callable[[Sequence[str]], argparse.ArgumentParser] = field(compare=False)
    prefix: tuple[str, ...] = ()

    @property
    def prog(self) -> str:
        return f"python -m {self.module.removesuffix('.__main__')}"


def _from(module: str, name: str = "parser") -> Callable[[Sequence[str]], argparse.ArgumentParser]:
    return lambda _argv: getattr(importlib.import_module(module), name)()


def _acceptance(argv: Sequence[str]) -> argparse.ArgumentParser:
    cli = importlib.import_module("workloads.cli.acceptance")
    return cli.report_parser() if argv[:1] == ["report"] else cli.job_parser()


SUBCOMMANDS = {
    "plan": Sub("analysis.plan", "the offline plan of a stack: what it creates, what each pod fits, every "
                "rule's violations (exit 1 on one)", parser=_from("analysis.plan")),
    "runs": Sub("workloads.cli.runs", "plan runs offline; submit, list, show, follow and cancel them on the cluster",
                parser=_from("workloads.cli.runs")),
    "profiles": Sub("workloads.cli.runs", "the software profiles a run can name, with their pins (runs profiles)",
                    prefix=("profiles",), parser=_from("workloads.cli.runs")),
    "bench": Sub("bench.__main__", "an experiment's cost, its arms run on a cluster, and their report",
                 parser=_from("bench.__main__")),
    "nodes": Sub("nodes.__main__", "the GPU nodes' burn-in: status, plan, re-test, breaker reset",
                 parser=_from("nodes.__main__")),
    "acceptance": Sub("workloads.cli.acceptance", "a GPU pool's fabric acceptance Job, and the report of its run",
                      parser=_acceptance),
    "fsx-status": Sub("components.fsx_status", "the checkpoint file system's data repository associations "
                      "(exit 1 unless every one is AVAILABLE)", parser=_from("components.fsx_status")),
    "fsx-drain": Sub("components.fsx_drain", "wait until the file system's automatic export queue is empty, before "
                     "a destroy (exit 1 if it is not in time)", parser=_from("components.fsx_drain")),
    "torchx": Sub("workloads.cli.torchx", "submit the stack's Miles run through TorchX's kubernetes scheduler",
                  parser=_from("workloads.cli.torchx")),
}


@contextmanager
def renamed_parsers(old: str, new: str) -> Iterator[None]:
    """Parsers made meanwhile whose ``prog`` starts with ``old`` are named ``new`` instead (usage, errors)."""
    init = argparse.ArgumentParser.__init__

    def renamed(self, *args, **kwargs):
        prog = kwargs.get("prog")
        if prog and prog.startswith(old):
            kwargs["prog"] = new + prog[len(old):]
        init(self, *args, **kwargs)
    argparse.ArgumentParser.__init__ = renamed
    try:
        yield
    finally:
        argparse.ArgumentParser.__init__ = init


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def chosen(p: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser ``argv`` reaches and the words after its name."""
    words = list(argv)
    while (sub := _subparsers(p)) is not None:
        name = next((w for w in words if w in sub.choices), None)
        if name is None:
            break
        p, words = sub.choices[name], words[words.index(name) + 1:]
    return p, words


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


def forwarded(sub: Sub, args: Sequence[str], stacks: Path | None) -> list[str]:
    """The argv ``sub``'s main gets: its prefix, the user's words, and ``--stack-dir`` where it reads a stack."""
    argv = [*sub.prefix, *args]
    if stacks is not None and "--stack-dir" not in argv:
        p, _ = chosen(sub.parser(argv), argv)
        if "--stack-dir" in _options(p) and not {"-h", "--help"} & set(argv):
            argv += ["--stack-dir", str(stacks)]
    return argv


def _stack_names(stacks: Path | None) -> list[str]:
    from stackconfig.files import STACKS_DIR, stack_names
    return stack_names(stacks or STACKS_DIR)


def _complete(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Subcommands, options, and stack names where the (sub)parser takes a stack; elsewhere the shell's
    own completion of paths (a run or experiment file, an output file, a directory)."""
    sub = SUBCOMMANDS[ctx.command.name]
    argv = [*sub.prefix, *(ctx.params.get("args") or ())]
    p, words = chosen(sub.parser(argv), argv)
    found: list[str] = []
    if (subs := _subparsers(p)) is not None:
        found += subs.choices
    if incomplete.startswith("-"):
        found += sorted(_options(p))
    elif (words[-1:] == ["--stack"] or
          (not [w for w in words if not w.startswith("-")] and any(a.dest == "stack" and not a.option_strings
                                                                  for a in p._actions))):
        found += _stack_names(ctx.find_root().params.get("stacks"))
    if not found and not incomplete.startswith("-"):
        return [CompletionItem(incomplete, type="file")]
    return [CompletionItem(w) for w in found if w.startswith(incomplete)]


class _Passing(click.Command):
    """A command whose words all go to the module's parser: an option being typed is completed from it too."""

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        return _complete(ctx, self.params[0], incomplete)


def _command(name: str, sub: Sub) -> click.Command:
    @click.pass_context
    def run(ctx: click.Context, args: tuple[str, ...]) -> None:
        argv = forwarded(sub, args, ctx.find_root().params.get("stacks"))
        with renamed_parsers(sub.prog, "moe-rl" if sub.prefix else f"moe-rl {name}"):  # a prefix names the subcommand
            module = importlib.import_module(sub.module)
            owned = ctx.find_root().obj is OWN_PROCESS and hasattr(module, "own_process")
            leave = module.own_process() if owned else ctx.exit
            try:
                code = module.main(argv)
            except SystemExit as done:  # argparse: --help (0) or a usage error (2); a message is 1, as Python has it
                code = done.code if isinstance(done.code, int) or done.code is None else 1
        leave(code or 0)
    return _Passing(name, callback=run, help=f"{sub.help}. Arguments: `moe-rl {name} --help`.",
                    short_help=sub.help, add_help_option=False,
                    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                    params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED, shell_complete=_complete)])


@click.group(commands={n: _command(n, s) for n, s in SUBCOMMANDS.items()},
             context_settings={"help_option_names": ["-h", "--help"]},
             help="The platform's one command: plan stacks and runs offline, submit runs, run benchmarks, steer the "
                  "GPU nodes' burn-in and fabric acceptance.\n\n" + __doc__.split("\n\n")[1].replace("\n", " "))
@click.option("--stacks", type=click.Path(file_okay=False, path_type=Path), envvar=STACKS_ENV,
              help=f"folder of the stack files (Pulumi.<stack>.yaml); default ./stacks; env {STACKS_ENV}")
@click.version_option(package_name="moe-rl-platform")
def main(stacks: Path | None) -> None:
    """The platform's command."""


OWN_PROCESS = object()
"""``entry``'s mark: the process runs this one command (a test's CliRunner or ``python -m moe_rl.cli`` line,
run in the test's process, does not)."""


def entry() -> None:
    """The installed ``moe-rl`` (pyproject's script): a subcommand whose module has ``own_process`` sets the
    process up for itself first and ends it as that returns (``moe-rl plan``: analysis.plan.own_process)."""
    main(obj=OWN_PROCESS)


if __name__ == "__main__":  # pragma: no cover - python -m moe_rl.cli, as the tests run a moe-rl line in their
    main()                #   own process: the process is not this command's (entry's is)
