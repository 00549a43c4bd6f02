"""A run's ``extraArgs`` cannot undo what the platform renders (issue 34, review34 defect A1): a flag of the
rendered Miles/Megatron/SGLang command line, in ``--flag value`` or ``--flag=value`` form, is refused with
one line naming the file, the field and what to set instead, through the one gate (the stack's own run,
its declared runs, ``runs plan``, ``runs submit``, ``bench``) with exit 2; other flags stay accepted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_workloads import FP8_V2, merge, variant

from bench.experiment import arm_run, load_experiment
from stackconfig.errors import BadInput
from stackconfig.stack import StackConfigError
from workloads.checks import extra_args, gate
from workloads.checks.extra_args import extra_arg_problem, platform_flags
from workloads.checks.runs import input_problems, run_config, run_model, run_view
from workloads.cli.runs import main as runs_main
from workloads.derive.argv import entry_and_flags, miles_argv

SEED = ROOT / "experiments" / "seed-p5en.yaml"
SHARED = "p5en-shared"
V2_RUN = ROOT / "runs" / "deepep-v2-qwen3-30b-fp8.yaml"
NCCL_RUN = ROOT / "runs" / "grpo-qwen3-30b.yaml"

ENGINE_A2A = ["--sglang-moe-a2a-backend", "deepep_v2", "--sglang-deepep-v2-mode", "hybrid"]
"""Review case 1: the NCCL arm switched to DeepEP V2 engines, with none of the env and budget V2 needs."""
TRAINER_FLEX = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepepv2"]
"""Review case 2: the trainer back on Megatron's flex/deepepv2 dispatcher, the issue-34 A2 hang."""
NOT_THE_PLATFORMS = ["--seed", "1234", "--sglang-router-port", "30000"]
"""The seed's own extra flag and the serving bench's router port: the platform renders neither."""


def _with_extra(run, extra: list[str]):
    return run.model_copy(update={"extra_args": [*run.extra_args, *extra]})


def _nccl_arm():
    exp = load_experiment(SEED)
    return gate.read(exp.stack), arm_run(exp, "miles-nccl")


def test_review_case_1_engines_switched_to_deepep_v2_on_the_nccl_arm_are_refused():
    cfg, run = _nccl_arm()
    assert "--sglang-moe-a2a-backend" not in miles_argv(run_config(cfg, run))  # the arm renders no all-to-all
    bad = _with_extra(run, ENGINE_A2A)
    with pytest.raises(BadInput, match=r"^run [\w-]+: extraArgs: --sglang-moe-a2a-backend is set by the platform .*"
                                       r"allowed: leave it out, and set deepep\.version"):
        run_model(cfg, bad)
    assert input_problems(cfg, bad) == [extra_arg_problem(run_view(cfg, bad), "extraArgs").replace("workloads.run.", "")]


def test_review_case_2_the_trainer_switched_to_flex_deepepv2_is_refused_by_runs_plan_and_submit(tmp_path, capsys):
    doc = yaml.safe_load(V2_RUN.read_text())
    for extra in (TRAINER_FLEX, ["--moe-token-dispatcher-type=flex", "--moe-flex-dispatcher-backend=deepepv2"]):
        path = tmp_path / "flex.yaml"
        path.write_text(yaml.safe_dump(doc | {"extraArgs": extra}))
        assert runs_main(["plan", SHARED, str(path)]) == 2
        assert runs_main(["submit", SHARED, str(path), "--dry-run"]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err == [f"runs: {path}: extraArgs: {extra[0]} is set by the platform (workloads/derive/argv.py), and a "
                       f"repeated flag replaces its value (argparse keeps the last); allowed: leave it out, and set "
                       f"deepep.version (and deepep.sglangMode): the platform derives the all-to-all, expert runner "
                       f"and trainer dispatcher from it (workloads/derive/moe_backend.py)"] * 2


def test_the_stacks_own_run_and_its_declared_runs_are_refused_by_the_gate():
    with pytest.raises(StackConfigError, match=r"\n  workloads\.run\.extraArgs: --moe-token-dispatcher-type is set by "
                                               r"the platform"):
        variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"extraArgs": TRAINER_FLEX}}}))
    with pytest.raises(StackConfigError, match=r"workloads\.run\.extraArgs: --sglang-moe-a2a-backend=deepep_v2 is set "
                                               r"by the platform"):
        variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"deepep": {"version": "off"},
                                                                  "extraArgs": ["--sglang-moe-a2a-backend=deepep_v2"]}}}))


def test_bench_refuses_an_experiment_whose_extra_args_undo_the_platform(tmp_path, capsys):
    from bench.__main__ import main
    doc = yaml.safe_load(SEED.read_text())
    doc["base"]["extraArgs"] = [*doc["base"]["extraArgs"], *ENGINE_A2A]
    exp = tmp_path / "seed-a2a.yaml"
    exp.write_text(yaml.safe_dump(doc))
    assert main(["run", str(exp), "--dry-run"]) == 2
    assert main(["estimate", str(exp)]) == 2  # bad input, as `run` says it, each problem said of its arm
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("extraArgs: --sglang-moe-a2a-backend is set by the platform" in e for e in err)


def test_flags_the_platform_does_not_render_stay_accepted(tmp_path, capsys):
    cfg, run = _nccl_arm()
    ok = _with_extra(run, NOT_THE_PLATFORMS)
    assert input_problems(cfg, ok) == [] and miles_argv(run_config(cfg, ok))[-4:] == NOT_THE_PLATFORMS
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(NCCL_RUN.read_text()) | {"extraArgs": ["--seed=7"]}))
    assert runs_main(["plan", SHARED, str(path)]) == 0
    assert variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"extraArgs": NOT_THE_PLATFORMS}}}))


@pytest.mark.parametrize("arm", ["slime", "miles-tp", "miles-nccl", "miles-deepep-v2"])
def test_every_flag_the_renderer_emits_is_refused_in_both_forms(arm):
    exp = load_experiment(SEED)
    cfg = gate.read(exp.stack)
    seen = run_config(cfg, arm_run(exp, arm))
    rendered = entry_and_flags(miles_argv(seen))[1]
    flags = {t for t in rendered if t.startswith("--")} - set(seen.workloads.run.extra_args)
    assert flags <= platform_flags(seen)
    for flag in sorted(flags):
        for extra in ([flag, "1"], [f"{flag}=1"]):
            run = seen.workloads.run.model_copy(update={"extra_args": extra})
            probe = seen.model_copy(update={"workloads": seen.workloads.model_copy(update={"run": run})})
            assert extra_arg_problem(probe) is not None, (arm, extra)


def test_a_flag_only_another_value_of_a_run_field_renders_is_refused():
    """The NCCL arm renders no ``--sglang-deepep-v2-mode`` and no ``--use-kl-loss``; deepep.version and
    grpo.klLossCoef render them, so they are the platform's too."""
    cfg, run = _nccl_arm()
    seen = run_config(cfg, run)
    argv = miles_argv(seen)
    for flag in ("--sglang-deepep-v2-mode", "--use-kl-loss", "--moe-enable-deepep"):
        assert flag not in argv and flag in platform_flags(seen), flag


def test_a_flag_the_renderer_starts_to_emit_is_refused_with_no_change_to_the_check(monkeypatch):
    cfg, run = _nccl_arm()
    seen = run_view(cfg, _with_extra(run, ["--some-new-platform-flag", "1"]))  # no flag list has it: unchecked view
    assert extra_arg_problem(seen) is None
    real = extra_args.miles_argv
    monkeypatch.setattr(extra_args, "miles_argv", lambda c: [*real(c), "--some-new-platform-flag", "2"])
    problem = extra_arg_problem(seen)
    assert problem is not None and problem.startswith("workloads.run.extraArgs: --some-new-platform-flag is set by")


@pytest.mark.parametrize("written", [
    ["--custom-config-path", "/tmp/flex.yaml"], ["--custom-config-path=/tmp/flex.yaml"],  # Miles: every key set on args
    ["--yaml-cfg", "/tmp/megatron.yaml"],  # Megatron: the whole namespace replaced by the file's
    ["--sglang-config", "/tmp/engines.yaml"],  # Miles: engine groups and ServerArgs overrides applied last
    ["--sglang-cuda-graph-config", '{"decode": {"max_bs": 1024}}'],  # SGLang: the JSON over --cuda-graph-*
    ["--sglang-json-model-override-args", '{"num_experts_per_tok": 16}'],  # SGLang: the engines' model config
    ["--sglang-decrypted-config-file", "other.json"],  # SGLang: another config.json for the engines' model
    ["--nccl-communicator-config-path", "/tmp/nccl.yaml"]])  # Megatron: NCCL's network per process group
def test_a_flag_that_takes_settings_from_a_file_or_json_is_refused_whatever_the_renderer_emits(written):
    """Each of these loads settings the flag-by-flag check cannot see (a file holding
    ``moe_token_dispatcher_type: flex`` brings back the trainer hang); traced in workloads/checks/extra_args_traced.py."""
    with pytest.raises(StackConfigError, match=rf"workloads\.run\.extraArgs: {re.escape(written[0])}.* takes settings "
                                               rf"from a file or JSON \(.*\), the platform's among them; allowed: "):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": written}}})


def test_a_file_flag_that_sets_none_of_the_platforms_settings_stays_accepted():
    """Traced and left allowed (extra_args_traced's docstring): Megatron's --use-checkpoint-args never runs on
    Miles' parse path, Miles' --eval-config holds evaluation data sets, SGLang's --deepep-config is the legacy
    DeepEP dispatcher's alone."""
    assert variant("p5en-prod", {"workloads": {"run": {"extraArgs": [
        "--use-checkpoint-args", "--eval-config", "/tmp/eval.yaml", "--sglang-deepep-config", "{}"]}}})


@pytest.mark.parametrize("alias, rendered", [("--sglang-ep", "--sglang-ep-size"),
                                             ("--sglang-expert-parallel-size", "--sglang-ep-size"),
                                             ("--persistent-save-interval", "--save-interval")])
def test_an_alias_of_a_rendered_flag_is_refused(alias, rendered):
    """argparse keeps the last value per argument, whatever name set it: an alias undoes the platform's as the
    rendered name does (SGLang's ServerArgs field, Megatron's dest, from the vendored flag lists)."""
    with pytest.raises(StackConfigError, match=rf"workloads\.run\.extraArgs: {alias} is set by the platform \(as "
                                               rf"{rendered}: both set the same argument\)"):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": [alias, "8"]}}})


BUDGET_FLAGS = [["--sglang-cuda-graph-bs", "1024"], ["--sglang-cuda-graph-bs-decode", "1", "1024"],
                ["--sglang-cuda-graph-max-bs-prefill", "16384"], ["--sglang-piecewise-cuda-graph-tokens", "16384"],
                ["--sglang-cuda-graph-backend-prefill", "breakable"], ["--sglang-enable-breakable-cuda-graph"],
                ["--sglang-pp-size", "2"], ["--sglang-pipeline-parallel-size", "2"],
                ["--sglang-speculative-algorithm", "EAGLE"]]
"""Flags that change what the DeepEP V2 budget sized (workloads/checks/extra_args_traced.py BUDGET_ARGS), aliases
included: the decode graph's batch, the prefill graph's sizes and backend, the pipeline stages, speculative tokens."""


@pytest.mark.parametrize("written", BUDGET_FLAGS)
def test_a_flag_that_changes_what_the_deepep_v2_budget_sized_is_refused_naming_the_budget(written):
    cfg = gate.read("p5en-prod")
    assert extra_args.rollout_budget(cfg) is not None  # miles-deepep-v2: every run there has the budget
    with pytest.raises(StackConfigError, match=rf"workloads\.run\.extraArgs: {re.escape(written[0])} changes what the "
                                               rf"DeepEP V2 rollout budget sizes \(.*\); allowed: leave it out, and set "
                                               rf"workloads\.run\.rollout \(the DeepEP V2 budget sizes it"):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": written}}})


def test_budget_flags_stay_accepted_where_no_budget_applies_and_those_that_only_lower_it_everywhere():
    """SGLang 0.5.19 only lowers the KV pool to --max-total-tokens and bounds a prefill batch by the budget's
    chunk whatever --max-prefill-tokens says (extra_args_traced's BUDGET_ARGS docstring); miles-0.1 has no budget."""
    lowering = ["--sglang-max-total-tokens", "100000", "--sglang-max-prefill-tokens", "4096"]
    assert variant("p5en-prod", {"workloads": {"run": {"extraArgs": lowering}}})
    cfg = gate.read("p5en-shared")
    assert cfg.workloads.run.software == "miles-0.1" and extra_args.rollout_budget(cfg) is None
    assert variant("p5en-shared", {"workloads": {"run": {"extraArgs": [*lowering, "--sglang-cuda-graph-bs", "1024"]}}})


def test_a_budget_flag_in_a_run_file_is_refused_by_runs_plan(tmp_path, capsys):
    doc = yaml.safe_load(V2_RUN.read_text())
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(doc | {"extraArgs": ["--sglang-cuda-graph-bs=1024"]}))
    assert runs_main(["plan", SHARED, str(path)]) == 2  # the run file names software miles-deepep-v2
    assert capsys.readouterr().err.startswith(f"runs: {path}: extraArgs: --sglang-cuda-graph-bs=1024 changes what the "
                                              f"DeepEP V2 rollout budget sizes")


def test_a_flag_the_platform_renders_only_for_another_pool_is_refused_on_this_one():
    """--use-fault-tolerance is rendered only for a Spot rollout pool (workloads/derive/argv.py); the run's variants
    never change its pools, so on an on-demand pool it is refused as a REPLACEMENT key."""
    cfg = gate.read("p5en-prod")
    assert "--use-fault-tolerance" not in miles_argv(cfg)  # p5en-prod's rollout pool is on-demand
    with pytest.raises(StackConfigError, match=r"workloads\.run\.extraArgs: --use-fault-tolerance is set by the "
                                               r"platform .* allowed: leave it out, and set the rollout pool's capacity"):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": ["--use-fault-tolerance"]}}})


def test_train_env_vars_naming_a_variable_the_platform_sets_is_refused_and_others_pass():
    """Miles spreads --train-env-vars over each train actor's environment (miles 49cac7b5
    miles/ray/train/actor_factory.py:28-39): NCCL's network or NVLS set there undoes the platform's."""
    with pytest.raises(StackConfigError, match=r"workloads\.run\.extraArgs: --train-env-vars sets NCCL_NET, "
                                               r"NCCL_NVLS_ENABLE, and Miles puts the JSON over the training pods'"):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": [
            "--train-env-vars", '{"NCCL_NET": "Socket", "NCCL_NVLS_ENABLE": "0", "PYTORCH_CUDA_ALLOC_CONF": "x"}']}}})
    with pytest.raises(StackConfigError, match=r"--train-env-vars sets FI_PROVIDER, and Miles"):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": ['--train-env-vars={"FI_PROVIDER": "tcp"}']}}})
    assert variant("p5en-prod", {"workloads": {"run": {"extraArgs": [
        "--train-env-vars", '{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}']}}})


def test_a_budget_sized_flag_is_the_platforms_only_where_a_budget_applies():
    """--sglang-cuda-graph-max-bs is rendered (and refused) only on a DeepEP V2 profile; on miles-0.1 no run field
    sets it, so a run may (tests/test_workloads_flags.py's 235B variant passes 256)."""
    extra = {"workloads": {"run": {"extraArgs": ["--sglang-cuda-graph-max-bs", "256"]}}}
    assert variant("p5en-shared", extra).workloads.run.software == "miles-0.1"
    with pytest.raises(StackConfigError, match=r"--sglang-cuda-graph-max-bs is set by the platform"):
        variant("p5en-prod", extra)


MILES_LAYOUT = [
    (["--colocate"], r"--colocate changes the run's layout .*replaces --rollout-num-gpus"),
    (["--eval-num-gpus", "8"], r"--eval-num-gpus changes the run's layout .*placement_group\.py:105"),
    (["--eval-num-gpus=8"], r"--eval-num-gpus=8 changes the run's layout"),
    (["--debug-rollout-only"], r"--debug-rollout-only changes .*runs no training"),
    (["--debug-train-only"], r"--debug-train-only changes .*starts no engines"),
    (["--rollout-external-engine-addrs", "10.0.0.1:30000"], r"--rollout-external-engine-addrs changes"),
    (["--prefill-num-servers", "4"], r"--prefill-num-servers changes .*prefill and decode servers"),
    (["--offload"], r"--offload changes .*--offload-rollout"),
    (["--offload-rollout"], r"--offload-rollout changes .*memory saver"),
]
"""Review34c F2: Miles flags under a dest the renderer never emits that overwrite rendered arguments
(``--rollout-num-gpus``, the trainer's nodes) or ask Ray for GPUs the pools do not hold (the run then hangs)."""


@pytest.mark.parametrize(("extra", "match"), MILES_LAYOUT)
def test_a_miles_flag_that_changes_the_placement_is_refused_naming_what_it_does(extra, match):
    cfg, run = _nccl_arm()
    with pytest.raises(BadInput, match=r"^run [\w-]+: extraArgs: " + match + r".*; allowed: leave it out"):
        run_model(cfg, _with_extra(run, extra))


def test_offloading_the_trainer_alone_stays_accepted():
    """--offload-train moves the trainer's own state to CPU between steps; the layout is unchanged."""
    cfg, run = _nccl_arm()
    assert run_model(cfg, _with_extra(run, ["--offload-train"]))


SGLANG_LAYOUT = [
    (["--sglang-moe-dp-size", "2"], r"--sglang-moe-dp-size changes .*replicates the experts"),
    (["--sglang-moe-data-parallel-size=2"], r"--sglang-moe-data-parallel-size=2 changes"),  # the alias
    (["--sglang-attn-cp-size", "2"], r"--sglang-attn-cp-size changes"),
    (["--sglang-attention-context-parallel-size", "2"], r"--sglang-attention-context-parallel-size changes"),
    (["--sglang-dcp-size", "2"], r"--sglang-dcp-size changes .*decode KV cache"),
    (["--sglang-elastic-ep-backend", "mooncake"], r"--sglang-elastic-ep-backend changes .*elastic EP"),
    (["--sglang-max-ep-size", "32"], r"--sglang-max-ep-size changes .*elastic EP"),
    (["--sglang-enable-symm-mem"], r"--sglang-enable-symm-mem changes .*NCCL_NVLS_ENABLE=1 .*4 GiB"),
    (["--sglang-enable-nccl-nvls"], r"--sglang-enable-nccl-nvls changes .*NCCL_NVLS_ENABLE=1 over the pod's value"),
]
"""Review34c F3: SGLang flags under a dest the renderer never emits that change the engine's rank layout (the
layout the budget sized) or write NCCL variables the platform sets (sglang 0.5.19)."""


@pytest.mark.parametrize(("extra", "match"), SGLANG_LAYOUT)
def test_an_sglang_flag_that_changes_the_engine_layout_or_nccl_env_is_refused(extra, match):
    cfg, run = _nccl_arm()
    with pytest.raises(BadInput, match=r"^run [\w-]+: extraArgs: " + match + r".*; allowed: leave it out"):
        run_model(cfg, _with_extra(run, extra))


@pytest.mark.parametrize("names", [{"LD_PRELOAD": "/x/libnccl.so.2"}, {"LD_LIBRARY_PATH": "/x"},
                                   {"NCCL_P2P_DISABLE": "1"}, {"FI_EFA_USE_DEVICE_RDMA": "0"},
                                   {"CUDA_VISIBLE_DEVICES": "0"}, {"NVSHMEM_REMOTE_TRANSPORT": "none"},
                                   {"UCX_TLS": "tcp"}])
def test_train_env_vars_that_can_change_which_nccl_or_plugin_loads_are_refused_by_prefix(names):
    """Review34c F4: LD_PRELOAD or LD_LIBRARY_PATH load another NCCL in the train actors than the one the platform
    checked; NCCL_*, FI_*, CUDA_*, NVSHMEM_*, UCX_* change how NCCL, libfabric and the plugins run under the name
    "efa". Refused by prefix, not only the names the platform sets."""
    (name,) = names
    with pytest.raises(StackConfigError, match=rf"--train-env-vars sets {name}, and Miles puts the JSON over the "
                                               r"training pods' environment; the platform owns .* every "
                                               r"NCCL_\*, FI_\*, LD_\*"):
        variant("p5en-prod", {"workloads": {"run": {"extraArgs": ["--train-env-vars", json.dumps(names)]}}})
