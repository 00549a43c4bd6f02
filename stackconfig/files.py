"""Read a stack file (``stacks/Pulumi.<stack>.yaml``) into a validated StackConfig.

The offline plan and the tests read stack files the way the Pulumi CLI hands them to the
program: the ``<project>:platform`` key of ``config:``. Importing this module does not import the
schema (``stack``, which imports ``pulumi``): commands that only need ``STACKS_DIR`` stay light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .errors import PROJECT

if TYPE_CHECKING:  # pragma: no cover
    from .stack import StackConfig

ROOT = Path(__file__).resolve().parent.parent
STACKS_DIR = Path("stacks") if Path("stacks").is_dir() else ROOT / "stacks"
"""The current folder's ``stacks/`` (a checkout or a consumer project), else the repository's own."""
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """PyYAML's safe load, by libyaml's C parser where the wheel has it (about 10x faster); a document
    it refuses is parsed again by PyYAML's own, so nothing PyYAML accepts is refused and an error says
    what PyYAML says (line, column, the offending character). libyaml alone accepts a tab after a
    key's colon, as the Pulumi CLI's Go parser does."""
    try:
        return yaml.load(text, Loader=_FAST_LOADER)
    except (yaml.YAMLError, UnicodeEncodeError):  # libyaml cannot take a lone surrogate
        return yaml.load(text, Loader=yaml.SafeLoader)


def stack_names(directory: Path = STACKS_DIR) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in directory.glob("Pulumi.*.yaml"))


def raw_stack(stack: str, directory: Path = STACKS_DIR) -> dict:
    from .stack import CONFIG_KEY, StackConfigError
    path = directory / f"Pulumi.{stack}.yaml"
    if not directory.is_dir():
        raise StackConfigError(f"stack {stack!r}: no folder {directory} to read Pulumi.{stack}.yaml from; allowed: "
                               f"run from a folder holding stacks/, or name the folder (moe-rl --stacks DIR, "
                               f"--stack-dir DIR)")
    if not path.is_file():
        raise StackConfigError(f"stack {stack!r}: no stack file {path}; stacks: {', '.join(stack_names(directory))}")
    try:
        document = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:  # one line naming the file and the place, not a traceback
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise StackConfigError(f"stack {stack!r}: {path}{where}: not valid YAML: "
                               f"{getattr(err, 'problem', None) or err}") from None
    key = f"{PROJECT}:{CONFIG_KEY}"
    for where, node in (("(document)", document), ("config", document.get("config", {}) if isinstance(document, dict)
                                                     else None)):
        if not isinstance(node, dict):
            raise StackConfigError(f"stack {stack!r}: {path}: {where}: a {type(node).__name__}, not a mapping; allowed: "
                                   f"a mapping, config: {{{key}: <the stack's settings>}} (docs/reference/stack.md)")
    if key not in document["config"]:
        raise StackConfigError(f"stack {stack!r}: {path}: config.{key}: missing; allowed: the stack's settings under "
                               f"that key (docs/reference/stack.md); keys: {', '.join(map(str, document['config'])) or 'none'}")
    return document["config"][key]


def read_stack(stack: str, directory: Path = STACKS_DIR, model: type[StackConfig] | None = None) -> StackConfig:
    """The stack validated as ``model`` (default ``StackConfig``)."""
    from .stack import StackConfig, load_stack
    return load_stack(stack, raw_stack(stack, directory), model or StackConfig)
