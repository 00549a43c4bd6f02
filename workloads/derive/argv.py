"""The full Miles or Slime command line of a run, from the run spec, its software profile and the pools.

Shared by the KubeRay RayJob (``entrypoint``) and the TorchX component (the head's command), so
both submit exactly the same argv. Layout flags come from the pools: actor nodes and GPUs from the
training pool, rollout GPUs and the engine size from the rollout pool. The recipe's fixed flags and the
models' architecture flags are data (``software/models.yaml``: Miles v0.1.0's ``scripts/run_qwen3_30b_a3b.py``
and ``scripts/models/``); Slime v0.2.4 takes the same launch shape, and
where its CLI differs the profile says so (``software.Framework``). Every flag is checked against
the profile's vendored lists before anything is created (``workloads.derive.profile.validate_profile``).
"""

from __future__ import annotations

import json
import re

from typing import TYPE_CHECKING

from software import Framework
from software import models
from stackconfig.stack import Role

from workloads.derive.checkpoint_budget import retain_interval
from workloads.pod.miles_launcher import ARGV_ENV
from workloads.derive.layout import is_spot, reward_enabled
from workloads.derive.deepep import moe_backend
from workloads.derive.paths import paths
from workloads.derive.profile import run_profile
from workloads.derive.sglang_budget import Budget, deepep_v2_budget

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

SCRIPTS_DIR = "/opt/scripts"
"""Where every GPU pod mounts the stack's scripts (ConfigMap ``workload-scripts``)."""
MILES_LAUNCHER = f"{SCRIPTS_DIR}/miles_launcher.py"
"""Runs the entry point with its training actors pinned to the training group (``workloads.pod.miles_launcher``)."""
REWARD_SERVICE = "reward"
REWARD_PATH = "/reward"


def preset(model: str) -> list[str]:
    """The architecture flags of ``model`` (``software/models.yaml``); none when it has no entry."""
    entry = models.catalog().model(model)
    return entry.architecture.args if entry else []


def model_args(cfg: "ProgramConfig") -> list[str]:
    run = cfg.workloads.run
    if run.model_args is not None:
        return list(run.model_args)
    return preset(run.model)


def rollout_budget(cfg: "ProgramConfig") -> Budget | None:
    """The engine's token and memory budget (``workloads.derive.sglang_budget``) on every profile that can run
    DeepEP V2, whichever all-to-all the run picks: runs that differ only in ``deepep.version`` then run the
    same prefill chunk, decode graph batch, request pool and static memory, so the all-to-all is the one
    difference between them (the seed's Miles arms; ``tests/test_seed_arms.py``). The buffer's per-rank
    token capacity is DeepEP V2's alone (``rollout_env``). None on other profiles. Hidden size, top-k and
    multi-head latent attention come from the Megatron model flags the run passes (the same architecture)."""
    if "v2" not in run_profile(cfg).a2a:
        return None
    run, rollout = cfg.workloads.run, cfg.pool(Role.ROLLOUT)
    engine = engine_gpus(cfg)
    return deepep_v2_budget(rollout.instance.gpu_memory_seen_mib, engine, engine if run.rollout.dp_attention else 1,
                            run.rollout.nodes_per_engine, model_dim(cfg, "--hidden-size"),
                            model_dim(cfg, "--moe-router-topk"), mla(cfg), run.rollout.mem_fraction_static)


def model_dim(cfg: "ProgramConfig", flag: str) -> int:
    """``flag``'s value in the run's model flags, else in its model's preset."""
    for flags in (model_args(cfg), preset(cfg.workloads.run.model)):
        if flag in flags:
            return int(flags[flags.index(flag) + 1])
    raise ValueError(f"workloads.run.modelArgs: {flag} is needed to size DeepEP V2's buffer; allowed: add it")


def mla(cfg: "ProgramConfig") -> bool:
    """Megatron's ``--multi-latent-attention`` in the run's model flags or its model's preset: the
    architectures SGLang runs with MLA (DeepSeek-V3's; sglang 0.5.19 configs/model_config.py:925-948)."""
    return any("--multi-latent-attention" in flags for flags in (model_args(cfg), preset(cfg.workloads.run.model)))


def reward_url(cfg: "ProgramConfig") -> str:
    port = cfg.workloads.reward.port
    return f"http://{REWARD_SERVICE}.{cfg.checkpoints.namespace}.svc.cluster.local:{port}{REWARD_PATH}"


def engine_gpus(cfg: "ProgramConfig") -> int:
    """GPUs of one rollout engine: ``gpusPerEngine`` inside a node, else ``nodesPerEngine`` whole nodes."""
    rollout = cfg.workloads.run.rollout
    return rollout.gpus_per_engine or rollout.nodes_per_engine * cfg.pool(Role.ROLLOUT).instance.gpus


def layout(cfg: "ProgramConfig") -> dict[str, int]:
    """The Ray layout Miles is told: derived from the desired node counts of the two GPU pools."""
    train, rollout = cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)
    per_engine = engine_gpus(cfg)
    return {"actor_num_nodes": train.nodes.desired, "actor_num_gpus_per_node": train.instance.gpus,
            "num_gpus_per_node": rollout.instance.gpus,
            "rollout_num_gpus": rollout.nodes.desired * rollout.instance.gpus,
            "rollout_num_gpus_per_engine": per_engine}


def entry_and_flags(argv: "list[str] | tuple[str, ...]") -> tuple[str, list[str]]:
    """(entry point, Miles flags) of a command ``miles_argv`` built."""
    if list(argv[:2]) != ["python3", MILES_LAUNCHER]:
        raise ValueError(f"not a Miles command of this stack: {' '.join(argv[:3])}")
    return argv[2], list(argv[3:])


def driver(argv: "list[str] | tuple[str, ...]", runtime_env: "dict[str, str]", marker: str | None = None,
           attempt: int | None = None) -> tuple[str, dict[str, str]]:
    """(entrypoint, env vars) of a Ray job that runs ``argv``. The entrypoint is the launcher and plain
    paths only: it goes through bash, ``list2cmdline`` and sh (``workloads.pod.miles_launcher``). The
    entry point and flags travel as JSON in ``MILES_ARGV``; KubeRay's submitter puts the runtime
    environment inside double quotes for bash (common/job.go, ``strconv.Quote``), where ``$`` and
    backticks still expand, so no value may hold them."""
    entry, flags = entry_and_flags(argv)
    words = ["python3", MILES_LAUNCHER, *(["--marker", marker, "--attempt", str(attempt)] if marker else [])]
    unsafe = [w for w in words if not re.fullmatch(r"[\w./=:-]+", w)]
    if unsafe:
        raise ValueError(f"entrypoint word {unsafe[0]!r} would not survive the shells of a Ray job submission")
    env = {**runtime_env, ARGV_ENV: json.dumps([entry, *flags])}
    expanding = [w for w in [*runtime_env.values(), entry, *flags] if "$" in w or "`" in w]
    if expanding:
        raise ValueError(f"{expanding[0]!r}: '$' and '`' are expanded by the shell of KubeRay's job submitter; "
                         f"allowed: flag values without them")
    return " ".join(words), env


def miles_argv(cfg: "ProgramConfig") -> list[str]:
    """``python3 <placement launcher> /root/<miles|slime>/<entry point> <flags>``: the one command every
    submit path runs (the launcher pins the training actors to the training group, then runs the entry
    point of the run's software profile)."""
    run, grpo, par = cfg.workloads.run, cfg.workloads.run.grpo, cfg.workloads.run.parallel
    p, lay, moe, software = paths(cfg), layout(cfg), moe_backend(cfg), run_profile(cfg)
    recipe = models.catalog().recipe
    if not lay["actor_num_nodes"] or not lay["rollout_num_gpus"]:
        idle = [q.name for q in (cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)) if not q.nodes.desired]
        raise ValueError(f"stack {cfg.stack!r}: pool(s) {', '.join(idle)} have 0 desired nodes; "
                         f"scale them up (pools[].nodes.desired) before starting a run")
    a: list[str] = ["python3", MILES_LAUNCHER, f"{software.workdir}/{run.entry_point.value}"]

    def f(flag: str, *values: object) -> None:
        a.append(flag)
        a.extend(str(v) for v in values)

    if software.framework is Framework.MILES:
        # Slime reads --train-backend in a pre-parser only (choices: megatron, the default:
        # slime/utils/arguments.py:1392-1405 at bd217a63), so it is no flag of its parser.
        f("--train-backend", "megatron")
    f("--megatron-to-hf-mode", "bridge")
    # Checkpoints: HF weights (bridge mode loads them directly), Megatron saves on FSx -> S3. SGLang
    # serves --hf-checkpoint; the trainer starts from --ref-load, BF16 beside an FP8 model (Miles
    # docs/advanced/low-precision.md, layout.ref_model).
    f("--hf-checkpoint", p.model)
    f("--ref-load", p.ref_model)
    f("--load", p.checkpoints)
    f("--save", p.checkpoints)
    f("--save-interval", run.save_interval)
    # Keep the latest save only (workloads/derive/checkpoint_budget.py): Megatron deletes the previous one.
    f("--save-retain-interval", retain_interval(cfg))
    if software.checkpoint_on_stop:
        # A checkpoint on demand: the Capacity Block end CronJob, a preempted pod's preStop hook or
        # `runs cancel` creates this file. Slime has no such flag: its periodic save is all there is.
        f("--save-trigger-sentinel", p.save_trigger)
    # Data and reward.
    f("--prompt-data", p.data)
    f("--input-key", run.input_key)
    f("--label-key", run.label_key)
    if run.apply_chat_template:
        f("--apply-chat-template")
    a.extend(recipe.rollout)
    if reward_enabled(cfg):
        f("--rm-type", "remote_rm")
        f("--rm-url", reward_url(cfg))
    else:
        f("--rm-type", run.rm_type)
    # GRPO.
    f("--num-rollout", grpo.num_rollout)
    f("--rollout-batch-size", grpo.rollout_batch_size)
    f("--n-samples-per-prompt", grpo.n_samples_per_prompt)
    f("--rollout-max-response-len", grpo.rollout_max_response_len)
    f("--rollout-temperature", grpo.rollout_temperature)
    f("--global-batch-size", grpo.global_batch_size)
    a.extend(recipe.grpo)
    if grpo.kl_loss_coef > 0:
        # With --use-kl-loss Miles loads --ref-load and runs the reference forward pass even at
        # coefficient 0; without it no reference model is built.
        f("--use-kl-loss")
    f("--kl-loss-coef", grpo.kl_loss_coef)
    f("--kl-loss-type", grpo.kl_loss_type)
    f("--entropy-coef", grpo.entropy_coef)
    f("--eps-clip", grpo.eps_clip)
    f("--eps-clip-high", grpo.eps_clip_high)
    f("--lr", grpo.lr)
    a.extend(recipe.optimizer)
    # Megatron parallelism and performance.
    f("--tensor-model-parallel-size", par.tensor)
    if par.sequence_parallel:
        f("--sequence-parallel")
    f("--pipeline-model-parallel-size", par.pipeline)
    f("--context-parallel-size", par.context)
    f("--expert-model-parallel-size", par.expert)
    f("--expert-tensor-parallel-size", par.expert_tensor)
    a.extend(recipe.recompute)
    f("--max-tokens-per-gpu", grpo.max_tokens_per_gpu)
    a.extend(models.catalog().precision(run.model))
    a.extend(model_args(cfg))
    # Megatron's MoE token dispatcher and SGLang's a2a backend/runner: workloads.derive.moe_backend's rules.
    a.extend(moe.megatron_args())
    # Layout: actors on the training pool, SGLang engines on the rollout pool.
    f("--actor-num-nodes", lay["actor_num_nodes"])
    f("--actor-num-gpus-per-node", lay["actor_num_gpus_per_node"])
    f("--num-gpus-per-node", lay["num_gpus_per_node"])
    f("--rollout-num-gpus", lay["rollout_num_gpus"])
    f("--rollout-num-gpus-per-engine", lay["rollout_num_gpus_per_engine"])
    # SGLang engines: expert parallel over the whole engine, DeepEP all-to-all.
    engine = lay["rollout_num_gpus_per_engine"]
    budget = rollout_budget(cfg)
    if budget is not None:  # a DeepEP V2 profile: prefill chunk, graph batch, requests and memory sized to its buffer
        a.extend(budget.sglang_args())
    elif run.rollout.mem_fraction_static is not None:
        f("--sglang-mem-fraction-static", run.rollout.mem_fraction_static)
    f("--sglang-ep-size", engine if run.rollout.expert_parallel else 1)
    if moe.moe_a2a_backend != "none":
        f("--sglang-moe-a2a-backend", moe.moe_a2a_backend)
    if moe.moe_runner_backend != "auto":
        f("--sglang-moe-runner-backend", moe.moe_runner_backend)
    if moe.deepep_mode:
        f("--sglang-deepep-mode", moe.deepep_mode)
    if moe.deepep_v2_mode:
        f("--sglang-deepep-v2-mode", moe.deepep_v2_mode)
    if run.rollout.dp_attention and engine > 1:
        f("--sglang-enable-dp-attention")
        f("--sglang-dp-size", engine)
    # A Spot rollout pool loses engines: health-check them and restart dead ones before weight sync.
    if is_spot(cfg.pool(Role.ROLLOUT)):
        f("--use-fault-tolerance")
    a.extend(run.extra_args)
    return a


def flags(argv: list[str]) -> list[str]:
    """The ``--flag`` tokens of an argv (values that look like negative numbers excluded)."""
    return [t for t in argv if t.startswith("--")]
