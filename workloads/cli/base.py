"""How the commands end (``workloads.cli.runs``, ``workloads.cli.acceptance``, ``nodes``, ``bench``): what the
user can fix is one line on stderr and an exit code, never a traceback.

Exit codes: 2 an invalid input file, a stack file (``StackConfigError``, also an unknown stack) or a run
or experiment file (``InvalidFile``, from ``read_input``); 1 a cluster that cannot be used
(``kube.CLUSTER_ERRORS``, said by ``kube.explain``) or a request that cannot be met (``ValueError``,
``LookupError``: a run that never fits, no such run, an artifact that does not add up).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, TypeVar

import yaml

T = TypeVar("T")
INVALID_FILE_EXIT = 2
FAILED_EXIT = 1


class InvalidFile(ValueError):
    """A run or experiment file that cannot be read or does not validate; the message names the file."""


def read_input(load: Callable[[Path], T], path: Path) -> T:
    """``load(path)``, with a missing, unreadable or invalid file raised as ``InvalidFile``."""
    try:
        return load(path)
    except (OSError, yaml.YAMLError, ValueError) as err:
        text = one_line(err)
        raise InvalidFile(text if str(path) in text else f"{path}: {text}") from None


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
    except (InvalidFile, *_loaded("stackconfig.stack", "StackConfigError")) as err:
        print(f"{prog}: {one_line(err)}", file=sys.stderr)
        return INVALID_FILE_EXIT
    except _loaded("workloads.cli.kube", "CLUSTER_ERRORS") as err:  # no kubeconfig or context, no answer, no CRD
        print(f"{prog}: {sys.modules['workloads.cli.kube'].explain(err)}", file=sys.stderr)
        return FAILED_EXIT
    except (ValueError, LookupError) as err:
        print(f"{prog}: {one_line(err)}", file=sys.stderr)
        return FAILED_EXIT
