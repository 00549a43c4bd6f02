"""Bad input, and how every command ends on it (stdlib only: any layer may import it).

A command exits 0 when done, 1 when it refuses on the merits (a plan with violations, a run that never
fits, a cluster that cannot be used) and 2 on bad input: a stack, run or experiment file, or what a file
names, that is wrong as written. Bad input is reported whole: every problem found in one pass, one line
each, ``<file>: <field path>: <problem>; allowed: <what is>`` (docs/reference/errors.md lists each case).
"""

from __future__ import annotations

from pathlib import Path

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
