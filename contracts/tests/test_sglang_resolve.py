"""SGLang's own resolution (sglang 0.5.9 / 0.5.16 ``ServerArgs.__post_init__``, 0.5.19
``ServerArgs.resolve_once()`` -> ``arg_groups/pipeline.py:run_resolution_pipeline``) accepts every rollout
engine the product renders, with the exact ``--sglang-*`` flags Miles passes, the rollout pod's env, the
node's GPU memory (instance catalog) and the model's config.json; and DeepEP V2's buffer fits the memory
the engine leaves outside ``mem_fraction_static``."""

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
"""A DeepEP V2 engine once more without ``--sglang-mem-fraction-static``: what SGLang reserves by itself."""


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
              for e in batch if _deepep_v2(e.name)]
    batch += [Engine(e.name + WHOLE_NODE, e.sglang, dict(e.spec, gpus_per_engine=e.spec["gpus_per_node"]))
              for e in batch if e.name in BY_NAME and _tp_inside_a_node(e.name)]
    return {e.name: r for e, r in zip(batch, resolve(batch))}


def result(name: str) -> dict:
    return results(BY_NAME[name].sglang)[name]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_sglang_resolves_the_rendered_engine(name):
    r = result(name)
    assert r["ok"], f"{name}: SGLang {BY_NAME[name].sglang} refuses the engine: {r['error']}\n{r['trace']}"


@pytest.mark.parametrize("name", sorted(n for n in BY_NAME if _deepep_v2(n)))
def test_deepep_v2_buffer_fits_outside_the_static_memory(name):
    """What SGLang keeps outside ``mem_fraction_static`` when left to itself (sglang 0.5.19
    arg_groups/memory_hook.py:233-268, which reserves DeepEP buffers for ``deepep`` only, :337-349)
    must still be there once our fraction also holds DeepEP V2's ElasticBuffer."""
    e = BY_NAME[name]
    ours = result(name)
    assert ours["ok"], ours["error"]
    default = results(e.sglang)[name + OWN]
    assert default["ok"], default["error"]
    gpu = e.spec["gpu_memory_mib"] * 2 ** 20
    capacity = int(e.spec["env"][DEEPEP_V2_CAPACITY_ENV])
    nodes = max(1, e.spec["gpus_per_engine"] // e.spec["gpus_per_node"])
    model = json.loads((Path(e.spec["model_path"]) / "config.json").read_text())
    buffer = deepep_v2_buffer_bytes(capacity, hidden=model["hidden_size"], topk=model["num_experts_per_tok"],
                                    ranks=e.spec["gpus_per_engine"], nodes=nodes)
    assert (1 - ours["mem_fraction_static"]) * gpu >= (1 - default["mem_fraction_static"]) * gpu + buffer



@pytest.mark.parametrize("name", sorted(n for n in BY_NAME if _tp_inside_a_node(n) and BY_NAME[n].sglang == "0.5.19"))
def test_sglang_refuses_fp8_experts_split_below_their_blocks(name):
    """The seed's tensor-parallel arm runs its engines on 2 GPUs: over the whole node, SGLang's model runner
    refuses Qwen3-30B-A3B-FP8's experts (768 columns / 8 = 96, not whole 128 blocks; moe_ep_setup.py:106-148),
    as the stack's own check does offline (workloads.checks.stack.validate_engine)."""
    assert result(name)["ok"]
    whole = results(BY_NAME[name].sglang)[name + WHOLE_NODE]
    assert not whole["ok"] and "For quantized MoE models" in whole["error"], whole
