"""Bad input, and how every command ends on it (stdlib only: any layer may import it).

A command exits 0 when done, 1 when it refuses on the merits (a plan with violations, a run that never
fits, a cluster that cannot be used) and 2 on bad input: a stack, run or experiment file, or what a file
names, that is wrong as written. Bad input is reported whole: every problem found in one pass, one line
each, ``<file>: <field path>: <problem>; allowed: <what is>`` (docs/reference/errors.md lists each case).
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any, Mapping

EXIT_OK, EXIT_REFUSED, EXIT_BAD_INPUT = 0, 1, 2
PROJECT = "moe-rl-platform"
"""The Pulumi project (Pulumi.yaml): a stack file holds the platform's settings under ``config.<PROJECT>:platform``,
which a refusal names in full."""


class BadInput(ValueError):
    """An input wrong as written: its message is one line per problem, each naming its field path."""

    def __init__(self, problems: list[str] | str, file: Path | str | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.file = file
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """Each problem, prefixed with the file where it names none."""
        if self.file is None:
            return self.problems
        return [p if str(self.file) in p else f"{self.file}: {p}" for p in self.problems]

    def at(self, file: Path | str) -> "BadInput":
        """The same problems, said of ``file``."""
        return type(self)(self.problems, file)


def file_problem(err: Exception) -> str:
    """The one line of a file that cannot be read (``OSError``) or is not YAML (a YAML error)."""
    if isinstance(err, OSError):
        return f"(file): cannot be read: {err.strerror or err}; allowed: a readable YAML file"
    return f"(file): not valid YAML: {' '.join(str(err).split())}"


def describe_errors(raw: Any, err: Any) -> list[str]:
    """Each of pydantic's errors as ``<field path>: <problem>; allowed: ...`` (for stack and run files)."""
    return [_describe(raw if isinstance(raw, Mapping) else {}, e) for e in err.errors()]


def _describe(raw: Mapping[str, Any], error: Mapping[str, Any]) -> str:
    """``<field path>: <problem>``; a model-level check names its field at the start of its message."""
    where = _where(raw, error["loc"])
    msg = error["msg"].removeprefix("Value error, ")
    ctx = error.get("ctx") or {}
    if error["type"] == "extra_forbidden":
        msg = "unknown key"
    elif error["type"] == "missing":
        msg = "missing; allowed: this key is required"
    elif error["type"] == "enum":
        msg = f"{error['input']!r} is not allowed; allowed: {ctx['expected']}"
    elif error["type"] == "literal_error":
        msg = f"{error['input']!r} is not allowed; allowed: {ctx['expected']}"
    elif error["type"] == "string_pattern_mismatch":
        msg = f"{error['input']!r} is not allowed; allowed: a string matching {ctx['pattern']}"
    elif error["type"] == "model_type" and error["loc"] == ():
        msg = f"a {type(error['input']).__name__}, not a mapping; allowed: a mapping of the file's keys"
    elif msg.startswith("Input should be "):  # a type or bound: what it should be is what is allowed
        msg = f"{reprlib.repr(error['input'])} is not allowed; allowed: {msg.removeprefix('Input should be ')}"
    field = re.match(r"^([A-Za-z][\w.\[\]-]*): ", msg)  # "-": profile names (versions.software.images.<name>)
    if field:
        where = f"{where}.{field.group(1)}" if where else field.group(1)
        msg = msg[field.end():]
    return f"{where or '(root)'}: {msg}"


def _where(raw: Mapping[str, Any], loc: tuple) -> str:
    """Render a pydantic location as ``pools[train].capacity``, naming pools by name."""
    parts: list[str] = []
    node: Any = raw
    for key in loc:
        if isinstance(key, int) and isinstance(node, list):
            name = node[key].get("name") if isinstance(node, list) and isinstance(node[key], Mapping) else None
            parts[-1] += f"[{name or key}]"
            node = node[key] if isinstance(node, list) else None
        else:
            parts.append(str(key))
            node = node.get(key) if isinstance(node, Mapping) else None
    return ".".join(parts)
