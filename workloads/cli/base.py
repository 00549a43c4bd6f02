"""What every command shares (``workloads.cli.runs``, ``workloads.cli.acceptance``, ``workloads.cli.torchx``,
``nodes``, ``bench``, ``analysis.plan``): the options that name a stack, a cluster and the image repository,
each defined once (argparse parents), the one way to read the stack they name (``read_stack``: the gate,
``workloads.checks.gate.read``), and how the commands end: what the user can fix is one line on stderr and
an exit code, never a traceback.

Exit codes (``stackconfig.errors``): 2 bad input, every problem one line naming the file and the field:
a stack file (``StackConfigError``, also an unknown stack), a run or experiment file (``InvalidFile``, from
``read_input``), what a run names that its stack does not declare (``BadInput``); 1 a cluster that cannot
be used (``kube.CLUSTER_ERRORS``, said by ``kube.explain``) or a request that cannot be met (``ValueError``,
``LookupError``: a run that never fits, no such run, an artifact that does not add up).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

import yaml

from stackconfig.errors import EXIT_BAD_INPUT, EXIT_REFUSED, BadInput, file_problem
from stackconfig.files import STACKS_DIR
from stackconfig.images import REPOSITORY_OUTPUT

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

T = TypeVar("T")
INVALID_FILE_EXIT = EXIT_BAD_INPUT
FAILED_EXIT = EXIT_REFUSED


def _stack_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--stack-dir", type=Path, default=STACKS_DIR, metavar="DIR",
                   help="folder of the stack files (default: ./stacks if there is one, else the repository's)")
    return p


def stack_dir_parent() -> argparse.ArgumentParser:
    """``--stack-dir``: the folder of the stack files, for a command whose stack an input file names."""
    return _stack_dir(argparse.ArgumentParser(add_help=False))


def stack_parent(option: str | None = None) -> argparse.ArgumentParser:
    """The stack a command reads: ``stack`` (first positional), or ``--stack`` with help ``option`` where the
    command has a default for it or needs none; and ``--stack-dir``."""
    p = argparse.ArgumentParser(add_help=False)
    if option is None:
        p.add_argument("stack", help="stack name: <stack-dir>/Pulumi.<stack>.yaml")
    else:
        p.add_argument("--stack", help=option)
    return _stack_dir(p)


def cluster_parent(when: str = "") -> argparse.ArgumentParser:
    """``--context``: the kubeconfig context of the cluster the command talks to (``when`` it does)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--context", help=f"kubeconfig context{when} (default: the kubeconfig's current one)")
    return p


def image_parent() -> argparse.ArgumentParser:
    """``--repository``: the stack's ECR repository URL, which only the deployed stack knows (its account id)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--repository", default="", metavar="URL",
                   help=f"the stack's ECR repository URL (`pulumi stack output {REPOSITORY_OUTPUT} --stack <stack>`), "
                        f"needed when a pod runs an image of the stack's own repository")
    return p


FORMATS = ("text", "json", "yaml")


def output_parent() -> argparse.ArgumentParser:
    """``-o/--output``: a data command's output as text (the default), JSON or YAML."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-o", "--output", choices=FORMATS, default="text",
                   help="text (default), or the same data as json or yaml")
    return p


def formatted(data: object, fmt: str) -> str:
    """``data`` (JSON types) as ``fmt`` (json or yaml), ending in a newline."""
    if fmt == "json":
        import json
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False, width=120)


def read_stack(args: argparse.Namespace, stack: str | None = None) -> "ProgramConfig":
    """The stack ``stack`` (default: the one the command line names) from ``--stack-dir``, through the gate."""
    from workloads.checks import gate  # imports the stack schema (pulumi): only for a command that reads a stack
    return gate.read(stack or args.stack, args.stack_dir)


class InvalidFile(BadInput):
    """A run or experiment file that cannot be read or does not validate; each line names the file."""


def read_input(load: Callable[[Path], T], path: Path) -> T:
    """``load(path)``, with a missing, unreadable or invalid file raised as ``InvalidFile``."""
    try:
        return load(path)
    except BadInput as err:
        raise InvalidFile(err.problems, path) from None
    except (OSError, yaml.YAMLError) as err:
        raise InvalidFile(file_problem(err), path) from None
    except ValueError as err:
        raise InvalidFile(one_line(err), path) from None


def problem_lines(err: Exception) -> list[str]:
    """The lines a refusal of bad input prints: one per problem, each naming the file where it is known
    (a stack file's, ``StackConfigError.file``, set by ``workloads.checks.gate``)."""
    if isinstance(err, BadInput):
        return [one_line(line) for line in err.lines()]
    head, *rest = [line for line in str(err).splitlines() if line.strip()] or [""]
    file = getattr(err, "file", None)
    if rest and head.endswith("invalid configuration"):
        return [one_line(f"{file or head.removesuffix(' invalid configuration')}: {line.strip()}") for line in rest]
    text = one_line(str(err))
    return [text if file is None or str(file) in text else f"{file}: {text}"]


def one_line(text: object) -> str:
    """``text`` with its line breaks and runs of spaces folded (YAML and API messages span lines)."""
    return " ".join(str(text).split())


def _loaded(module: str, name: str) -> tuple[type[BaseException], ...]:
    """``module.name`` if ``module`` is loaded: an error of a module never imported was never raised,
    and importing the stack schema (pulumi) or the Kubernetes client for the check would make a
    command that needs neither (``bench report``) slow to start."""
    found = getattr(sys.modules.get(module), name, ())
    return found if isinstance(found, tuple) else (found,)


def run_command(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s exit code, or the exit code of the error it raised after saying it in one line."""
    try:
        return body()
    except (BadInput, *_loaded("stackconfig.stack", "StackConfigError")) as err:
        for line in problem_lines(err):
            print(f"{prog}: {line}", file=sys.stderr)
        return INVALID_FILE_EXIT
    except _loaded("workloads.cli.kube", "CLUSTER_ERRORS") as err:  # no kubeconfig or context, no answer, no CRD
        print(f"{prog}: {sys.modules['workloads.cli.kube'].explain(err)}", file=sys.stderr)
        return FAILED_EXIT
    except (ValueError, LookupError) as err:
        print(f"{prog}: {one_line(err)}", file=sys.stderr)
        return FAILED_EXIT
