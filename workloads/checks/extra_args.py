"""A run's ``extraArgs`` cannot undo what the platform renders: every flag the renderer
(``workloads.derive.argv.miles_argv``) puts in the run's command line, or would put there under another value
of one of the run's own fields, is refused in ``extraArgs``, in both ``--flag value`` and ``--flag=value``
form. The extra flags are appended last and Miles, Megatron and SGLang parse with argparse, where the last
value wins, so a repeated flag silently replaces the platform's: ``--moe-token-dispatcher-type flex`` brings
back the DeepEP V2 trainer hang (``workloads.derive.moe_backend.choose``), ``--sglang-moe-a2a-backend
deepep_v2`` on an NCCL run starts DeepEP V2 engines without the environment and budget the platform derives
for it (``workloads.derive.env``, ``workloads.derive.sglang_budget``).

The refused set is read from the renderer, not listed here: the flags of the run's rendered argv, of the argv
rendered once per variant of the run (each boolean field of the run flipped, each enum and literal field at
each of its values, each zero number made positive: one field at a time; variants the rules refuse are
skipped), and every flag of the MoE backend (``MoEBackend`` with all its fields set: the SGLang all-to-all,
runner and DeepEP modes, the Megatron dispatcher), and every ``REPLACEMENT`` key, whatever the pools (a flag
rendered only for a Spot rollout pool is refused on an on-demand one). A flag the renderer starts to emit is
refused with no change here; ``REPLACEMENT`` words the refusal. Flags that take settings from a file or JSON
(``workloads.checks.extra_args_traced``) and flags that change the run's layout or NCCL environment under a dest
the renderer never emits (``workloads.checks.extra_args_layout``) are refused first, whatever the renderer emits.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from workloads.checks.extra_args_layout import layout_problem
from workloads.checks.extra_args_traced import BUDGET, budget_problem, config_file_problem, train_env_problem
from workloads.checks.flags import ProfileFlags, argv_pairs, profile_flags
from workloads.derive.argv import entry_and_flags, miles_argv, model_args, rollout_budget
from workloads.derive.moe_backend import MoEBackend
from workloads.derive.profile import run_profile

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

_MOE = "workloads.run.deepep.version (and deepep.sglangMode): the platform derives the all-to-all, expert runner and " \
       "trainer dispatcher from it (workloads/derive/moe_backend.py)"
BUDGET_SIZED = ("--sglang-chunked-prefill-size", "--sglang-cuda-graph-max-bs", "--sglang-max-running-requests")
"""Rendered only where a DeepEP V2 rollout budget applies (``workloads.derive.argv.rollout_budget``); elsewhere no
run field sets them and ``extraArgs`` may (a 235B model's smaller decode graph on miles-0.1)."""
REPLACEMENT: dict[str, str] = {
    "--sglang-ep-size": "workloads.run.rollout.expertParallel",
    "--sglang-enable-dp-attention": "workloads.run.rollout.dpAttention",
    "--sglang-dp-size": "workloads.run.rollout.dpAttention",
    "--sglang-mem-fraction-static": "workloads.run.rollout.memFractionStatic",
    **{flag: BUDGET for flag in BUDGET_SIZED},
    "--rollout-num-gpus-per-engine": "workloads.run.rollout.nodesPerEngine or gpusPerEngine",
    "--actor-num-nodes": "pools[].nodes.desired of the train pool (a run file: nodes)",
    "--actor-num-gpus-per-node": "the train pool's instanceType",
    "--num-gpus-per-node": "the rollout pool's instanceType",
    "--rollout-num-gpus": "pools[].nodes.desired of the rollout pool (a run file: nodes)",
    "--tensor-model-parallel-size": "workloads.run.parallel.tensor",
    "--pipeline-model-parallel-size": "workloads.run.parallel.pipeline",
    "--context-parallel-size": "workloads.run.parallel.context",
    "--expert-model-parallel-size": "workloads.run.parallel.expert",
    "--expert-tensor-parallel-size": "workloads.run.parallel.expertTensor",
    "--sequence-parallel": "workloads.run.parallel.sequenceParallel",
    "--use-kl-loss": "workloads.run.grpo.klLossCoef",
    "--rm-type": "workloads.run.rmType (or workloads.reward)",
    "--rm-url": "workloads.reward",
    "--use-fault-tolerance": "the rollout pool's capacity (Spot turns it on)",
    "--hf-checkpoint": "workloads.run.model",
    "--ref-load": "workloads.run.refModel",
    "--prompt-data": "workloads.run.dataset / promptFile",
    "--apply-chat-template": "workloads.run.applyChatTemplate",
    "--save-retain-interval": "workloads.run.saveInterval",
}
"""What to change instead, where the renderer's input is not the field of the flag's own name (``--lr`` is
``grpo.lr``: found by name). Every key is refused too, whatever this run renders: some are rendered from inputs
the run's variants do not vary (``--use-fault-tolerance`` only for a Spot rollout pool); ``BUDGET_SIZED`` only
where a DeepEP V2 rollout budget applies."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _field_paths(model: type[BaseModel], prefix: str = "workloads.run") -> Iterator[tuple[str, str]]:
    """(snake field name, its path) of every field of the run schema, nested settings included."""
    for name, info in model.model_fields.items():
        path = f"{prefix}.{_camel(name)}"
        yield name, path
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _field_paths(ann, path)


def replacement(flag: str, cfg: "ProgramConfig", moe_flags: set[str]) -> str:
    """Where the value ``flag`` carries is set instead: the table, the MoE backend, a run field of the
    flag's name, the model's architecture (``modelArgs``), else the software profile's recipe."""
    if flag in REPLACEMENT:
        return REPLACEMENT[flag]
    if flag in moe_flags:
        return _MOE
    name = flag.removeprefix("--").removeprefix("sglang-").replace("-", "_")
    by_name = dict(_field_paths(type(cfg.workloads.run)))
    if name in by_name:
        return by_name[name]
    if flag in model_args(cfg):
        return "workloads.run.modelArgs (the model's architecture flags)"
    return (f"nothing per run: software {run_profile(cfg).name}'s recipe sets it (software/models.yaml, "
            f"workloads/derive/argv.py)")


def _values(ann: Any, current: Any) -> list[Any]:
    """Other values of a field to render the argv with: a flipped boolean, every enum or literal member,
    a positive number for a zero one."""
    args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
    out: list[Any] = []
    for a in args:
        if a is bool:
            out.append(not current)
        elif isinstance(a, type) and issubclass(a, Enum):
            out += list(a)
        elif typing.get_origin(a) is Literal:
            out += list(typing.get_args(a))
        elif a in (int, float) and current == 0:
            out.append(a(1))
    return [v for v in out if v != current]


def _run_variants(run: BaseModel) -> Iterator[BaseModel]:
    """``run`` with one field changed (``_values``), for every field, nested settings included."""
    for name, info in type(run).model_fields.items():
        current = getattr(run, name)
        if isinstance(current, BaseModel):
            for inner in _run_variants(current):
                yield run.model_copy(update={name: inner})
        elif name != "software":  # another profile is another flag list, not another value of this run's flags
            for v in _values(info.annotation, current):
                yield run.model_copy(update={name: v})


def _flags(argv: list[str]) -> set[str]:
    return {f for f, _ in argv_pairs(entry_and_flags(argv)[1])}


def platform_flags(cfg: "ProgramConfig") -> set[str]:
    """Every flag the renderer sets for this run or for a one-field variant of it, every MoE backend flag
    (``MoEBackend.sglang_args`` behind the profile's ``--sglang-`` prefix, ``megatron_args``) and every
    ``REPLACEMENT`` key (the variants vary the run, not its pools: ``--use-fault-tolerance`` on an on-demand
    rollout pool), ``BUDGET_SIZED`` only where the run has a DeepEP V2 rollout budget."""
    run = cfg.workloads.run
    bare = run.model_copy(update={"extra_args": []})
    out: set[str] = set()
    for variant in (bare, *_run_variants(bare)):
        seen = cfg.model_copy(update={"workloads": cfg.workloads.model_copy(update={"run": variant})})
        try:
            out |= _flags(miles_argv(seen))
        except ValueError:  # a variant the rules refuse renders nothing
            if variant is bare:
                raise
    budget_only = set() if rollout_budget(cfg) is not None else set(BUDGET_SIZED)
    return out | moe_flags() | (set(REPLACEMENT) - budget_only)


def moe_flags() -> set[str]:
    every = MoEBackend("x", "x", "x", "x", "x", True)
    return {t for t in every.sglang_args("--sglang-") + every.megatron_args() if t.startswith("--")}


def extra_arg_problem(cfg: "ProgramConfig", field: str = "workloads.run.extraArgs") -> str | None:
    """``<field>: <flag> ...; allowed: ...`` for the first extra flag that takes settings from a file or JSON
    (``extra_args_traced.CONFIG_FILE_ARGS``) or changes the run's layout or NCCL environment
    (``extra_args_layout.LAYOUT_ARGS``), else for Miles' ``--train-env-vars`` naming a variable the
    platform sets or owns by prefix (``extra_args_traced.train_env_problem``), else for the first the platform renders (``--flag value`` or
    ``--flag=value``), else, where the run has a DeepEP V2 rollout budget, for the first that changes what it
    sized (``extra_args_traced.BUDGET_ARGS``), else None."""
    extra = cfg.workloads.run.extra_args
    if not extra:
        return None
    given = [(t.partition("=")[0], t) for t in extra if t.startswith("--")]
    pf = profile_flags(cfg.workloads.run.software)
    for flag, written in given:
        key = dest(pf, flag)
        if (problem := config_file_problem(key, written, field) or layout_problem(key, written, field)) is not None:
            return problem
    for flag, values in argv_pairs(extra):
        if dest(pf, flag) == "train_env_vars" and values:
            if (problem := train_env_problem(cfg, flag, values[0], field)) is not None:
                return problem
    platform = {dest(pf, f): f for f in sorted(platform_flags(cfg))}
    for flag, written in given:
        if (rendered := platform.get(dest(pf, flag))) is not None:
            moe = moe_flags()
            alias = "" if rendered == flag else f" (as {rendered}: both set the same argument)"
            return (f"{field}: {written} is set by the platform{alias} (workloads/derive/argv.py), and a repeated "
                    f"flag replaces its value (argparse keeps the last); allowed: leave it out, and set "
                    f"{replacement(rendered, cfg, moe)}")
    if rollout_budget(cfg) is not None:
        for flag, written in given:
            if (problem := budget_problem(dest(pf, flag), written, field)) is not None:
                return problem
    return None


def dest(pf: ProfileFlags, flag: str) -> str:
    """The argument ``flag`` sets, as its parser declares it: SGLang's ServerArgs field behind the ``--sglang-``
    prefix (``--sglang-ep`` and ``--sglang-ep-size`` both ``ep_size``), the ``dest`` of Megatron's or the
    framework's declaration (``--persistent-save-interval`` is ``save_interval``), else the flag itself."""
    if flag.startswith(pf.sglang_prefix):
        bare = "--" + flag[len(pf.sglang_prefix):]
        return "sglang:" + pf.sglang.get(bare, bare)
    decl = pf.framework.get(flag) or pf.megatron.get(flag) or {}
    return decl.get("dest") or flag.lstrip("-").replace("-", "_")
