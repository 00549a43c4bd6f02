"""An experiment file (``experiments/<name>.yaml``): one base run and the arms that vary it.

Guarantees: every arm is the base run with the arm's overrides deep-merged onto it and validated as a
``workloads.schema.settings.RunFile`` (any run-file field may be overridden, so an arm can change the
software profile, the all-to-all, the fabric or the nodes); every arm runs the same number of
steps; the attempts run in blocks, block ``r`` holding repeat ``r`` of every arm, in alternating
direction (A B C, then C B A: A B C C B A A B C ...), so drift in the cluster cancels within a block
pair instead of reading as a difference between arms (``stats``); every arm has at least
``stats.MIN_PAIRED_REPEATS`` repeats; a bad file fails with every problem at once, one line each
naming the file, the field path (``arms[<arm>].set.<path>``, ``base.<path>``) and what is allowed
(``stackconfig.errors.BadInput``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from stackconfig.base import SchemaModel
from stackconfig.errors import BadInput, describe_errors, file_problem
from stackconfig.faults import FaultKind, fault_kind, fault_kinds
from stackconfig.files import load_yaml
from workloads.schema.run import RunFile

from .stats import MIN_PAIRED_REPEATS

NAME = r"^[a-z]([-a-z0-9]{0,18}[a-z0-9])?$"
"""Experiment and arm names: short DNS labels, so ``<experiment>-<arm>-r<n>`` stays a valid run name."""


DRAIN = "drain-gpu-node"
"""No longer a fault: a drain respects the platform's ``runs`` PodDisruptionBudget (maxUnavailable 0),
so every eviction of a run pod is refused (429); what a drain does to a run is nothing, by design."""


class Fault(SchemaModel):
    kind: str
    """A fault kind of ``stackconfig/faults.yaml``: a crash through AWS FIS (``bench.faults``)."""
    at_step: int = Field(ge=1)
    """Injected once the driver log shows this rollout step complete."""

    @field_validator("kind")
    @classmethod
    def _known(cls, value: str) -> str:
        if value == DRAIN:
            raise ValueError(f"{DRAIN}: a drain respects the `runs` PodDisruptionBudget (maxUnavailable 0), so the "
                             f"Eviction API refuses every run pod with 429 and nothing happens to the run; allowed: "
                             f"{', '.join(fault_kinds())} (a terminate-instance kind is the node crash)")
        fault_kind(value)  # ValueError listing the allowed kinds
        return value

    @property
    def spec(self) -> FaultKind:
        return fault_kind(self.kind)


class ServingBench(SchemaModel):
    """SGLang's serving benchmark against the attempt's engines once ``atStep`` is logged (``bench.serving``):
    fixed prompts and lengths at a set concurrency; TTFT/TPOT/ITL percentiles in the report."""
    at_step: int = Field(ge=1)
    num_prompts: int = Field(256, ge=1)
    input_len: int = Field(1024, ge=1)
    output_len: int = Field(1024, ge=1)
    max_concurrency: int = Field(64, ge=1)
    seed: int = 1
    router_port: int = Field(30100, ge=1024, le=65535)
    """The run's router port (Miles ``--sglang-router-port``), fixed so the benchmark can reach it."""

    def miles_flags(self) -> list[str]:
        """The router on the head (Miles 49cac7b5 ``--pin-rollout-manager-to-head``,
        ``miles/utils/arguments.py:814``) on this port (``miles/backends/sglang_utils/arguments.py:19``)."""
        return ["--pin-rollout-manager-to-head", "--sglang-router-port", str(self.router_port)]


class Arm(SchemaModel):
    name: str = Field(pattern=NAME)
    set: dict[str, Any] = {}
    """Run-file fields this arm overrides (camelCase, as in a run file), deep-merged onto ``base``."""
    faults: list[Fault] = []
    """A fault arm: failures injected at chosen steps; its figures are kept out of the comparison."""
    serving: ServingBench | None = None
    """A fixed-workload rollout measurement during the arm's attempts (``bench.serving``)."""


class Link(SchemaModel):
    """One link of the chain that splits the gain: the share of ``to`` over ``from_``."""

    name: str = Field(pattern=NAME)
    from_: str = Field(alias="from")
    to: str


class Assumptions(SchemaModel):
    """What ``estimate`` assumes before anything has been measured (stated, not measured)."""

    step_seconds: float = Field(gt=0)
    startup_minutes: float = Field(15, ge=0)
    """Gang scheduling, image pull, model load and engine start of one attempt."""


COLLECT = "collect"
"""Validation context key: the cross-field problems are left to ``parse_experiment``, which says them with
the arms' own (every problem of a file in one pass)."""


class Experiment(SchemaModel):
    name: str = Field(pattern=NAME)
    stack: str
    """The stack the runs are submitted to (``workloads.submit: runs``)."""
    base: dict[str, Any]
    """A run file's fields (team, nodes, model, ...); ``name`` and ``grpo.numRollout`` are set per attempt."""
    arms: list[Arm] = Field(min_length=2)
    baseline: str
    steps: int = Field(ge=1)
    """Measured rollout steps per attempt."""
    warmup_steps: int = Field(0, ge=0)
    """Steps run first and left out of every figure (engine warm-up, CUDA graph capture, caches), counted
    from the first step each attempt logs (a resumed attempt warms up again)."""
    min_measured_steps: int = Field(10, ge=2)
    """An attempt with fewer measured steps in its log is refused (a cut log, a late start)."""
    repeats: int = Field(MIN_PAIRED_REPEATS, ge=MIN_PAIRED_REPEATS)
    """Paired repeats per arm: the unit of every interval (``stats``)."""
    order: Literal["mirrored"] = "mirrored"
    """Block ``r`` runs repeat ``r`` of every arm, forwards in odd blocks and backwards in even ones
    (A B C C B A), so a linear drift over two blocks adds the same to every arm."""
    decomposition: list[Link] = []
    """A chain of links from the baseline to the last arm; each link's share of the whole gain."""
    estimate: Assumptions

    @model_validator(mode="after")
    def _names(self, info: ValidationInfo) -> "Experiment":
        """Refuses what ``problems`` finds, unless validated with ``context={COLLECT: True}``: then
        ``parse_experiment`` collects those problems with every arm's."""
        problems = self.problems()
        if problems and not (info.context or {}).get(COLLECT):
            raise ValueError("\n".join(problems))
        return self

    def problems(self) -> list[str]:
        """Every problem across fields, one line each naming its field path and what is allowed."""
        names = [a.name for a in self.arms]
        arms = ", ".join(names)
        problems = []
        if len(set(names)) != len(names):
            problems.append(f"arms: duplicate arm name in {names}; allowed: one arm per name")
        if self.baseline not in names:
            problems.append(f"baseline: {self.baseline!r} is not an arm; allowed: {arms}")
        elif self.baseline in {a.name for a in self.arms if a.faults}:
            problems.append(f"baseline: {self.baseline!r} is a fault arm; allowed: an arm without faults")
        prev = self.baseline
        for link in self.decomposition:
            problems += [f"decomposition[{link.name}]: {end!r} is not an arm; allowed: {arms}"
                         for end in (link.from_, link.to) if end not in names]
            if link.from_ != prev and self.baseline in names:
                problems.append(f"decomposition[{link.name}].from: {link.from_!r}; allowed: {prev!r} (the links "
                                f"form one chain starting at the baseline)")
            prev = link.to
        if self.min_measured_steps > self.steps:
            problems.append(f"minMeasuredSteps: {self.min_measured_steps} is more than steps ({self.steps}); "
                            f"allowed: {f'2..{self.steps}' if self.steps >= 2 else 'none below 2 steps'}")
        problems += [f"arms[{arm.name}].faults: step {f.at_step} is after the last step {self.total_steps}; "
                     f"allowed: 1..{self.total_steps}" for arm in self.arms for f in arm.faults
                     if f.at_step > self.total_steps]
        return problems

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` onto ``base``: mappings merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out


def run_name(experiment: str, arm: str, repeat: int) -> str:
    return f"{experiment}-{arm}-r{repeat}"


def arm_run(exp: Experiment, arm: str, repeat: int = 1) -> RunFile:
    """The run file of one attempt: base + the arm's overrides, named and sized for the experiment;
    BadInput with a line per problem, each naming its field in the experiment (``arm_problems``)."""
    run, problems = _arm_run(exp, arm, repeat)
    if problems:
        raise BadInput(problems)
    return run


def arm_problems(exp: Experiment, arm: str) -> list[str]:
    """What is wrong with the arm's run file, one line each naming the field where the experiment sets
    it: ``arms[<arm>].set.<path>`` for a field the arm overrides, ``base.<path>`` for the rest."""
    return _arm_run(exp, arm, 1)[1]


def _arm_run(exp: Experiment, arm: str, repeat: int) -> tuple[RunFile | None, list[str]]:
    over = exp.arm(arm).set
    raw = deep_merge(exp.base, over)
    raw = deep_merge(raw, {"name": run_name(exp.name, arm, repeat), "grpo": {"numRollout": exp.total_steps}})
    if exp.arm(arm).serving is not None:
        raw["extraArgs"] = list(raw.get("extraArgs", [])) + exp.arm(arm).serving.miles_flags()
    try:
        return RunFile.model_validate(raw), []
    except ValidationError as err:
        errors, lines = err.errors(), describe_errors(raw, err)
    # a model-level check has no location: the field it names at the start of its message is where
    where = [e["loc"] or tuple(re.split(r"[.\[]", line.partition(": ")[0])) for e, line in zip(errors, lines)]
    return None, [f"arms[{arm}].set.{line}" if _overrides(over, loc) else f"base.{line}"
                  for loc, line in zip(where, lines)]


def _overrides(over: Any, loc: tuple) -> bool:
    """Whether the arm's ``set`` gives the value at ``loc`` (or replaces a list or value above it)."""
    node = over
    for key in loc:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif node is over or isinstance(node, dict):
            return False  # not in the arm's set, or a mapping merged onto the base's
        else:
            return True  # a list or value the arm gives in place of the base's
    return True


@dataclass(frozen=True)
class Attempt:
    arm: str
    repeat: int
    run: RunFile

    @property
    def folder(self) -> str:
        """``<arm>/r<repeat>``: where the attempt's artifacts are collected."""
        return f"{self.arm}/r{self.repeat}"


def schedule(exp: Experiment) -> list[Attempt]:
    """Every attempt in the order it runs: block by block, odd blocks forwards, even ones backwards."""
    pairs = [(a.name, r) for r in range(1, exp.repeats + 1) for a in (exp.arms if r % 2 else exp.arms[::-1])]
    return [Attempt(arm, r, arm_run(exp, arm, r)) for arm, r in pairs]


def parse_experiment(raw: Any, source: str) -> Experiment:
    """An experiment from its parsed YAML, every arm validated as a run file; BadInput naming ``source``,
    one line per problem, each naming its field path and what is allowed."""
    try:
        exp = Experiment.model_validate(raw, context={COLLECT: True})
    except ValidationError as err:  # a field wrong as written: its arms are not read
        raise BadInput(describe_errors(raw, err), source) from None
    problems = exp.problems() + [p for arm in exp.arms for p in arm_problems(exp, arm.name)]
    if problems:
        raise BadInput(list(dict.fromkeys(problems)), source)  # a base problem is every arm's: said once
    return exp


def load_experiment(path: Path) -> Experiment:
    """The experiment file at ``path``; BadInput naming it (also when it cannot be read or is not YAML)."""
    try:
        raw = load_yaml(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise BadInput(file_problem(err), path) from None
    return parse_experiment(raw, str(path))


def differences(exp: Experiment, a: str, b: str) -> dict[str, tuple[Any, Any]]:
    """Run-file fields that differ between two arms (dotted camelCase path -> (a, b))."""
    def flat(d: dict, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out |= flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
        return out
    ra, rb = (flat(arm_run(exp, x).model_dump(mode="json", by_alias=True, exclude={"name"})) for x in (a, b))
    return {k: (ra.get(k), rb.get(k)) for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)}

