"""The one gate every command passes a stack through: types (the schema), then every cross-field and
cross-object check, then that each rendered pod fits its pool. A stack the gate accepts is valid
for every command (``pulumi up``, the offline plan, the run, acceptance, burn-in and bench commands);
one it refuses gets every problem found, one line each, ``<field path>: <problem>; allowed: ...``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.registry import eks_addon_registry
from stackconfig.files import STACKS_DIR, raw_stack
from stackconfig.stack import StackConfig, StackConfigError, load_stack

from workloads.checks.runs import check_declared_runs
from workloads.checks.schedulability import check as placements
from workloads.checks.stack import validate_images, validate_pools, validate_run, validate_teams_of
from workloads.derive.model import derive
from workloads.schema.stack import ProgramConfig


@dataclass(frozen=True)
class Problem:
    """One refusal: the field to change (a stack path such as ``workloads.run.parallel.tensor`` or
    ``pools[train]``) and what is wrong with it, ending in what is allowed where that is known."""

    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


FIELD = re.compile(r"^([A-Za-z][\w.\[\]-]*): ")


def from_error(err: ValueError) -> Problem:
    """A check's ``ValueError("<field>: <problem>")`` as a Problem."""
    text = str(err)
    m = FIELD.match(text)
    return Problem(m.group(1), text[m.end():]) if m else Problem("(stack)", text)


def _raising(check: Callable[[ProgramConfig], None]) -> Callable[[ProgramConfig], list[Problem]]:
    def run(cfg: ProgramConfig) -> list[Problem]:
        try:
            check(cfg)
        except ValueError as err:
            return [from_error(err)]
        return []
    run.__name__ = check.__name__
    return run


def _region(cfg: ProgramConfig) -> None:
    eks_addon_registry(cfg.region)  # ValueError "region: ..." (the EFA device plugin's image)


def _pods_fit(cfg: ProgramConfig) -> list[Problem]:
    return [Problem(f"pools[{p.pool}]", msg) for p in placements(derive(cfg)) if not p.fits for msg in p.problems]


CHECKS: tuple[Callable[[ProgramConfig], list[Problem]], ...] = (
    *map(_raising, (_region, validate_teams_of, validate_pools, validate_images, validate_run, check_declared_runs)),
)
"""Each independent of the others' outcome: all run, so one pass reports every problem."""


def field_problems(cfg: ProgramConfig) -> list[Problem]:
    """Every problem of a typed stack short of the pods' fit."""
    return [p for check in CHECKS for p in check(cfg)]


def problems(cfg: ProgramConfig) -> list[Problem]:
    """Every problem of a typed stack; the pods' fit is checked once the rest holds (it derives the
    workload model, which assumes a valid run)."""
    return field_problems(cfg) or _pods_fit(cfg)


def report(stack: str, found: list[Problem]) -> str:
    """The one format of a refusal, as ``load_stack`` gives a type error."""
    return f"stack {stack!r}: invalid configuration\n" + "\n".join(f"  {p}" for p in found)


def checked(cfg: StackConfig) -> ProgramConfig:
    """``cfg`` as a ProgramConfig the gate accepts; StackConfigError listing every problem otherwise."""
    cfg = cfg if isinstance(cfg, ProgramConfig) else ProgramConfig.model_validate(cfg.model_dump())
    found = problems(cfg)
    if found:
        raise StackConfigError(report(cfg.stack, found))
    return cfg


def load(stack: str, raw: Mapping[str, Any] | None) -> ProgramConfig:
    """A stack's ``platform`` config (as the Pulumi CLI hands it over) through the whole gate."""
    return checked(load_stack(stack, raw, ProgramConfig))


def typed(stack: str, directory: Path = STACKS_DIR) -> ProgramConfig:
    """A stack file through the schema alone, for the one caller that shows the pods' placements
    before refusing (the offline plan: ``field_problems`` first, then the placements)."""
    with of_file(stack, directory):
        return load_stack(stack, raw_stack(stack, Path(directory)), ProgramConfig)


def read(stack: str, directory: Path = STACKS_DIR) -> ProgramConfig:
    """A stack file (``<directory>/Pulumi.<stack>.yaml``) through the whole gate."""
    with of_file(stack, directory):
        return load(stack, raw_stack(stack, Path(directory)))


@contextmanager
def of_file(stack: str, directory: Path = STACKS_DIR) -> Iterator[None]:
    """A StackConfigError raised meanwhile names the stack's file (``.file``: each problem line starts with it)."""
    try:
        yield
    except StackConfigError as err:
        err.file = Path(directory) / f"Pulumi.{stack}.yaml"
        raise
