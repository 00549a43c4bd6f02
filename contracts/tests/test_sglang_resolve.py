"""SGLang's own resolution (sglang 0.5.9 / 0.5.16 ``ServerArgs.__post_init__``, 0.5.19
``ServerArgs.resolve_once()`` -> ``arg_groups/pipeline.py:run_resolution_pipeline``) accepts every rollout
engine the product renders, with the exact ``--sglang-*`` flags Miles passes, the rollout pod's env, the
node's GPU memory (instance catalog) and the model's config.json; and the memory a rendered
``mem_fraction_static`` leaves holds SGLang's own reserve (and DeepEP V2's buffer)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from sglang_engines import Engine, engines, resolve

from workloads.derive.sglang_budget import DEEPEP_V2_CAPACITY_ENV, deepep_v2_buffer_bytes

ENGINES = engines()
BY_NAME = {e.name: e for e in ENGINES}
OWN = " [SGLang's own memory fraction]"
"""An engine that renders ``--sglang-mem-fraction-static``, once more without it: what SGLang reserves by itself."""


def _without(argv: list[str], flag: str) -> list[str]:
    if flag not in argv:
        return argv
    i = argv.index(flag)
    return argv[:i] + argv[i + 2:]


def _deepep_v2(name: str) -> bool:
    return "deepep_v2" in BY_NAME[name].spec["argv"]


WHOLE_NODE = " [its experts split over the whole node]"
"""An engine without expert parallelism inside a node, once more over all of the node's GPUs."""


def _tp_inside_a_node(name: str) -> bool:
    argv, spec = BY_NAME[name].spec["argv"], BY_NAME[name].spec
    return argv[argv.index("--sglang-ep-size") + 1] == "1" and spec["gpus_per_engine"] < spec["gpus_per_node"]


@functools.cache
def results(version: str) -> dict[str, dict]:
    """One child per SGLang version resolves its engines and the DeepEP V2 engines' own-fraction twins."""
    batch = [e for e in ENGINES if e.sglang == version]
    batch += [Engine(e.name + OWN, e.sglang, dict(e.spec, argv=_without(e.spec["argv"], "--sglang-mem-fraction-static")))
              for e in batch if _renders_fraction(e.name)]
    batch += [Engine(e.name + WHOLE_NODE, e.sglang, dict(e.spec, gpus_per_engine=e.spec["gpus_per_node"]))
              for e in batch if e.name in BY_NAME and _tp_inside_a_node(e.name)]
    return {e.name: r for e, r in zip(batch, resolve(batch))}


def result(name: str) -> dict:
    return results(BY_NAME[name].sglang)[name]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_sglang_resolves_the_rendered_engine(name):
    r = result(name)
    assert r["ok"], f"{name}: SGLang {BY_NAME[name].sglang} refuses the engine: {r['error']}\n{r['trace']}"


FRACTION = "--sglang-mem-fraction-static"
TOLERANCE_MIB = 1.0
"""Float arithmetic only: the budget floors its fraction to 3 decimals (workloads.derive.sglang_budget), so a
reserve equal to SGLang's leaves at least as much as SGLang keeps; SGLang's own reserve is read before its
rounding (contracts/sglang_resolve.py ``record_reserve``)."""


def _renders_fraction(name: str) -> bool:
    return FRACTION in BY_NAME[name].spec["argv"]


@pytest.mark.parametrize("name", sorted(n for n in BY_NAME if _renders_fraction(n)))
def test_the_rendered_static_fraction_leaves_sglangs_own_reserve(name):
    """The memory our ``--sglang-mem-fraction-static`` leaves outside the static pool holds what SGLang keeps
    there when left to itself (sglang 0.5.19 arg_groups/memory_hook.py:231-268: activations, decode and prefill
    CUDA graphs, parallel slack, for the engine's a2a and model: an MLA model's prefill graph is 1.5 GiB,
    :315-324, and a2a deepep_v2 turns that graph off, cuda_graph_hook.py:295-299), and on a DeepEP V2 engine
    also its ElasticBuffer, which SGLang reserves for ``deepep`` only (:337-349)."""
    e = BY_NAME[name]
    ours = result(name)
    assert ours["ok"], ours["error"]
    own = results(e.sglang)[name + OWN]
    assert own["ok"] and own["reserve_mib"] is not None, own
    buffer = 0.0
    if _deepep_v2(name):
        capacity = int(e.spec["env"][DEEPEP_V2_CAPACITY_ENV])
        nodes = max(1, e.spec["gpus_per_engine"] // e.spec["gpus_per_node"])
        model = json.loads((Path(e.spec["model_path"]) / "config.json").read_text())
        buffer = deepep_v2_buffer_bytes(capacity, hidden=model["hidden_size"], topk=model["num_experts_per_tok"],
                                        ranks=e.spec["gpus_per_engine"], nodes=nodes) / 2 ** 20
    left = (1 - ours["mem_fraction_static"]) * e.spec["gpu_memory_mib"]
    need = own["reserve_mib"] + buffer
    assert left >= need - TOLERANCE_MIB, (
        f"{name}: {FRACTION} {ours['mem_fraction_static']} leaves {left:.0f} MiB; SGLang {e.sglang} keeps "
        f"{own['reserve_mib']:.0f} MiB (prefill graph {own['prefill_graph']}) + DeepEP V2 buffer {buffer:.0f} MiB "
        f"= {need:.0f} MiB: {need - left:.0f} MiB short")


@pytest.mark.parametrize("name", sorted(n for n in BY_NAME if BY_NAME[n].sglang == "0.5.19"))
def test_the_prefill_graph_is_the_one_a_cuda_pod_resolves(name):
    """A pod's SGLang starts from the breakable prefill graph (0.5.19 model_executor/cuda_graph_config.py:112-121,
    CUDA only), keeps it with a2a none and turns it off with deepep_v2 (arg_groups/cuda_graph_hook.py:295-299).
    Without CUDA it would start from tc_piecewise, which DP attention turns off (:181), and the reserve read
    above would miss the 1.5 GiB an MLA model's graph takes in the pod (contracts/sglang_resolve.py
    ``cuda_prefill_default``)."""
    r = result(name)
    assert r["ok"], r["error"]
    assert r["prefill_graph"] == ("disabled" if r["moe_a2a_backend"] == "deepep_v2" else "breakable"), r


@pytest.mark.parametrize("name", sorted(n for n in BY_NAME if _tp_inside_a_node(n) and BY_NAME[n].sglang == "0.5.19"))
def test_sglang_refuses_fp8_experts_split_below_their_blocks(name):
    """The seed's tensor-parallel arm runs its engines on 2 GPUs: over the whole node, SGLang's model runner
    refuses Qwen3-30B-A3B-FP8's experts (768 columns / 8 = 96, not whole 128 blocks; moe_ep_setup.py:106-148),
    as the stack's own check does offline (workloads.checks.stack.validate_engine)."""
    assert result(name)["ok"]
    whole = results(BY_NAME[name].sglang)[name + WHOLE_NODE]
    assert not whole["ok"] and "For quantized MoE models" in whole["error"], whole
