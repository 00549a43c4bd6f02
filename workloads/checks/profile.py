"""A run held to what its software profile's versions can do: each refusal names the field to change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from software import Framework, profiles

from workloads.checks.extra_args import extra_arg_problem
from workloads.checks.flags import argv_pairs, argv_problems
from workloads.derive.profile import image_field, multi_node_engines, run_profile

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig


def _others(test) -> str:
    return ", ".join(n for n, q in profiles().items() if test(q)) or "none"


def validate_profile(cfg: "ProgramConfig", argv: list[str], image: str) -> None:
    """ValueError naming the field when the run needs what its profile's versions lack."""
    run, p = cfg.workloads.run, run_profile(cfg)
    if run.rollout.nodes_per_engine > 1 and not multi_node_engines(p):
        raise ValueError(f"workloads.run.rollout.nodesPerEngine: {run.rollout.nodes_per_engine} nodes per engine need "
                         f"NCCL >= 2.30.7 (2.28 deadlocks CUDA-graph cross-node collectives); software {p.name} "
                         f"loads NCCL {p.nccl}; allowed: 1, or software: {_others(multi_node_engines)}")
    extra = {f for f, _ in argv_pairs(run.extra_args)}
    refused = extra & {"--sglang-" + f for f in p.refused_sglang}
    if refused and "deepep_v2" in argv:
        raise ValueError(f"workloads.run.extraArgs: {sorted(refused)[0]} is refused by SGLang {p.sglang.version} with "
                         f"--moe-a2a-backend deepep_v2 (sglang/srt/arg_groups/moe_hook.py:184-220); allowed: leave it out, "
                         f"or deepep.version off")
    if p.framework is Framework.MILES and "--true-on-policy-mode" in extra and "deepep_v2" in argv:
        raise ValueError("workloads.run.extraArgs: --true-on-policy-mode needs deterministic inference, which SGLang "
                         "refuses with deepep_v2; allowed: leave it out, or deepep.version off")
    problems = argv_problems(p, argv)
    if problems:
        field = "workloads.run.extraArgs" if any(pr.split(":")[0].split()[0] in extra for pr in problems) \
            else "workloads.run.software"
        raise ValueError(f"{field}: software {p.name} does not accept: {'; '.join(problems)}")
    if (taken := extra_arg_problem(cfg)) is not None:  # after the lists: a flag no list has is named as such
        raise ValueError(taken)
    if p.image.digest_required and "@sha256:" not in image:
        raise ValueError(f"{image_field(p)}: software {p.name} resolves {', '.join(p.image.required_args)} at build "
                         f"time, so only a digest names what was built; {image!r} has none; allowed: "
                         f"<repository>:{p.image.tag}@sha256:<digest> (workloads/image/README.md)")
