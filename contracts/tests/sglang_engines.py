"""Every rollout engine the product can render, as the SGLang contract resolves it: the stacks' own runs
and declared runs, each run file of runs/ (one per software profile) on the shared stack, each arm of
experiments/*.yaml on its stack. An engine is the rendered Miles argv (its ``--sglang-*`` flags and layout),
the rollout pod's environment (the Ray job's env vars over the rollout group's container env), the
rollout node's GPU memory from the instance catalog and the model's config.json (contracts/data/models).
``one_host_variants`` adds, for scripts/gpu_host_checks.py alone, each multi-node expert-parallel arm at one
node per engine: not shipped engines, and not in ``engines()``."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.experiment import arm_run, deep_merge, load_experiment
from stackconfig.files import stack_names
from stackconfig.stack import Role
from workloads.derive.argv import entry_and_flags
from workloads.derive.model import WorkloadModel, derive
from workloads.checks.runs import load_run
from workloads.checks.runs import run_model
from workloads.checks import gate

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "contracts" / "data" / "models"
WHEELS = ROOT / ".venv-contracts" / "sglang"
"""Where contracts/run installs each pinned SGLang wheel (``--no-deps --target <dir>/<version>``)."""
RESOLVER = ROOT / "contracts" / "sglang_resolve.py"
SHARED_STACK = "p5en-shared"


@dataclass(frozen=True)
class Engine:
    name: str
    sglang: str
    spec: dict


@functools.cache
def model_folder(model: str) -> str:
    """The folder SGLang and Miles read ``model``'s config.json from. A config whose ``auto_map`` names
    remote code (DeepSeek's ``configuration_deepseek.py``, upstream code not kept here) is read from a copy
    without ``auto_map``: with trust_remote_code, as Miles starts SGLang, transformers would load that module
    (in a pod it is in the staged model); without it transformers' own class of the same ``model_type``
    (transformers 5.12 ``DeepseekV3Config``) reads the same fields."""
    folder = MODELS / model
    config = json.loads((folder / "config.json").read_text())
    modules = {ref.split(".")[0] for ref in config.get("auto_map", {}).values()}
    if all((folder / f"{m}.py").is_file() for m in modules):
        return str(folder)
    copy = Path(tempfile.gettempdir()) / "contract-models" / model  # stable: the engines file names it
    copy.mkdir(parents=True, exist_ok=True)
    (copy / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "auto_map"}, indent=2))
    return str(copy)


def _flag(flags: list[str], name: str) -> int:
    return int(flags[flags.index(name) + 1])


def engine(name: str, m: WorkloadModel) -> Engine:
    _, flags = entry_and_flags(m.run_argv())
    rollout = m.worker("rollout")
    env = {**rollout.env, **m.runtime_env}
    trainer = m.worker("trainer").pool
    return Engine(name, m.profile.sglang.version, {
        "name": name, "argv": flags, "env": env, "model_path": model_folder(m.settings.run.model),
        "gpus_per_engine": _flag(flags, "--rollout-num-gpus-per-engine"),
        "gpus_per_node": _flag(flags, "--num-gpus-per-node"),
        "gpu_memory_mib": rollout.pool.instance.gpu_memory_seen_mib,  # what nvidia-smi shows SGLang
        "profile": m.profile.name, "trainer_sm": trainer.instance.gpu.sm,
        "trainer_gpus": _flag(flags, "--actor-num-nodes") * _flag(flags, "--actor-num-gpus-per-node"),
        "models": {m.paths.model: model_folder(m.settings.run.model), m.paths.ref_model: ref_folder(m)}})


def ref_folder(m: WorkloadModel) -> str:
    """The trainer's BF16 checkpoint's config folder: its own where kept, else (an FP8-only model's published
    upcast, whose config.json is not kept here) the model's."""
    return model_folder(m.ref_model) if (MODELS / m.ref_model / "config.json").is_file() else model_folder(
        m.settings.run.model)


@functools.cache
def engines() -> list[Engine]:
    out: list[Engine] = []
    for stack in stack_names():
        cfg = gate.read(stack)
        m = derive(cfg)
        if m.argv is not None and cfg.pool(Role.ROLLOUT) is not None:
            out.append(engine(f"stack {stack}", m))
        out += [engine(f"stack {stack} run {r.name}", run_model(cfg, r)) for r in cfg.workloads.runs]
    shared = gate.read(SHARED_STACK)
    for path in sorted((ROOT / "runs").glob("*.yaml")):
        out.append(engine(f"{path.name} on {SHARED_STACK}", run_model(shared, load_run(path))))
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        exp = load_experiment(path)
        cfg = gate.read(exp.stack)
        out += [engine(f"{path.name} arm {a.name} on {exp.stack}", run_model(cfg, arm_run(exp, a.name)))
                for a in exp.arms]
    return out


ONE_NODE = {"rollout": {"nodesPerEngine": 1}}
"""The override that makes an arm's one-host variant (run-file fields, as an arm's ``set``)."""
VARIANT = " at one node per engine (one-host variant, not shipped)"


def one_host_variants() -> list[Engine]:
    """Each experiment arm whose engines span several nodes with expert parallelism (seed-ab's and
    seed-p5en's miles-nccl and miles-deepep-v2: EP16 over two nodes), once more with the arm's ``set`` plus
    ``rollout.nodesPerEngine: 1``: EP over one node's GPUs, so one 8-GPU host can start it. Rendered by the
    same path as the shipped arms (``arm_run`` -> ``run_model``, whose ``run_config`` runs the stack's
    ``validate_run`` on it): for DeepEP V2 ``moe_backend.choose`` gives ``--sglang-deepep-v2-mode direct``
    on one node (``hybrid`` across nodes) and ``env.rollout_env`` adds ``EP_DISABLE_GIN=1``. Each spec names
    the shipped engine it varies in ``variant_of``. The arms' other fields are unchanged, so the variant's
    memory is sized for the arm's own rollout GPUs (seed-p5en's DeepSeek model needs eight H200s)."""
    out: list[Engine] = []
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        exp = load_experiment(path)
        cfg = gate.read(exp.stack)
        for a in exp.arms:
            shipped = arm_run(exp, a.name).rollout
            if shipped.nodes_per_engine == 1 or not shipped.expert_parallel:
                continue
            one = exp.model_copy(update={"arms": [a.model_copy(update={"set": deep_merge(a.set, ONE_NODE)})]})
            name = f"{path.name} arm {a.name} on {exp.stack}"
            e = engine(name + VARIANT, run_model(cfg, arm_run(one, a.name)))
            out.append(Engine(e.name, e.sglang, {**e.spec, "variant_of": name}))
    return out


def resolve(batch: list[Engine]) -> list[dict]:
    """One child per SGLang version (its wheel first on the path): each engine's result, in order."""
    version = {e.sglang for e in batch}
    assert len(version) == 1, version
    done = subprocess.run([sys.executable, str(RESOLVER)], input=json.dumps([e.spec for e in batch]),
                          capture_output=True, text=True, timeout=900,
                          env={"PYTHONPATH": str(WHEELS / version.pop()), "PATH": "/usr/bin:/bin",
                               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"resolver failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # the engines and the one-host variants as JSON, for scripts/gpu_host_checks.py engines
    json.dump([e.spec for e in engines() + one_host_variants()], sys.stdout, indent=1)  # (PYTHONPATH=. from the root)
