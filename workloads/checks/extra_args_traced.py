"""Flags of ``extraArgs`` refused for what their upstream code does, not because the renderer emits them
(``workloads.checks.extra_args`` refuses those): each was traced at the pinned versions (radixark/miles
49cac7b5, radixark/Megatron-LM 235952df, the sglang 0.5.19 wheel), and each key is the argument a flag sets
as ``extra_args.dest`` names it (``"sglang:<ServerArgs field>"`` behind ``--sglang-``, else the parser's
dest), so every alias of a refused flag is refused with it.

``CONFIG_FILE_ARGS``: flags that take settings from a file or a JSON value, so a setting the platform renders
can come back through them, past the flag-by-flag check. Traced and left allowed, because they set no setting
the platform renders:

- Megatron ``--use-checkpoint-args`` / ``--use-mp-args-from-checkpoint-args``: read only by
  ``parse_and_validate_args`` (235952df megatron/training/arguments.py:105-120), which Miles never calls: it
  calls Megatron's ``parse_args`` and ``validate_args`` itself (miles/utils/arguments.py:2676,
  miles/backends/megatron_utils/arguments.py:4), so they have no effect.
- Megatron ``--heterogeneous-layers-config-path`` / ``-encoded-json``: compares the architecture flags with
  the file and raises on a difference (arguments.py:189-265); it sets none of them.
- Megatron ``--kitchen-config-file``, ``--te-precision-config-file`` (a quantization recipe,
  megatron/training/argument_utils.py:483-495), ``--tp-comm-overlap-cfg``, the data-path files: their own
  subsystem's settings, none the platform renders.
- Miles ``--eval-config``: evaluation data sets and their sampling defaults only (miles/utils/arguments.py:
  2754-2769). Miles' ``--config`` is the FSDP backend's (miles/backends/fsdp_utils/arguments.py:71): no
  profile's flag list accepts it, so ``argv_problems`` already refuses it.
- SGLang ``--deepep-config``: read only by the legacy DeepEP dispatcher (sglang/srt/layers/moe/token_dispatcher/
  deepep.py:334-354: its SM count and normal-mode chunk configs); DeepEP V2 never reads it and the platform
  sets no legacy DeepEP size. SGLang's other ``*-config`` flags (speculative, sparse-KV, KV-event, multimodal,
  loader, cache backends) are read by their own subsystems only.
- Miles' ``--custom-*-path`` hooks name Python code, which can do anything; no check here can read it.

Miles' ``--train-env-vars`` JSON is refused where it names a variable the platform sets or one that can change
which NCCL, libfabric or plugin libraries load or how they run (``train_env_problem``, ``LOADER_PREFIXES``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from stackconfig.stack import Role

from workloads.derive.env import gpu_env, runtime_env

from .extra_args_layout import NCCL

if TYPE_CHECKING:  # pragma: no cover
    from workloads.schema.stack import ProgramConfig

EACH_FLAG = "each flag in extraArgs itself"

CONFIG_FILE_ARGS: dict[str, tuple[str, str]] = {
    # radixark/miles 49cac7b5 miles/utils/arguments.py:3475-3480 (miles_validate_args, called after the parse,
    # :2708): setattr(args, k, v) for every key of the file.
    "custom_config_path": ("Miles loads the YAML file it names and sets each of its keys on the parsed arguments, "
                           "after the command line", EACH_FLAG),
    # radixark/Megatron-LM 235952df megatron/training/arguments.py:155-158 (37f91617 :105-109, 3714d81 :111-115):
    # args = load_yaml(args.yaml_cfg), megatron/training/yaml_arguments.py:499-516 ("argparse arguments will be
    # ignored"); Miles parses through that function (miles/utils/arguments.py:2676).
    "yaml_cfg": ("Megatron replaces every parsed argument with the YAML file's, the command line ignored", EACH_FLAG),
    # Miles 49cac7b5 miles/ray/rollout/rollout_server.py:136-146 and :45-74: the YAML's server groups give the
    # engines, each with its own GPUs per engine and ServerArgs overrides; miles/backends/sglang_utils/
    # sglang_engine.py:799-801 applies the overrides last ("a per-group override wins over every args-derived
    # default"). SGLang's own --config is not passed through (Miles' _SKIPPED_SERVER_ARGS, arguments.py:39-41).
    "sglang:config": ("Miles deploys the rollout engines from the YAML file: GPUs per engine and any SGLang "
                      "setting per server group, applied over the --sglang-* flags",
                      "workloads.run.rollout, and each --sglang- flag in extraArgs itself"),
    # sglang 0.5.19 sglang/srt/arg_groups/cuda_graph_hook.py:91-96: the JSON is applied last, over the
    # --cuda-graph-* flags (server_args.py:1851-1858 "JSON wins over the per-phase --cuda-graph-* convenience
    # flags and over legacy flags"), the rendered --cuda-graph-max-bs included.
    "sglang:cuda_graph_config": ("SGLang takes the CUDA-graph settings in the JSON over the --cuda-graph-* flags",
                                 EACH_FLAG),
    # sglang 0.5.19 sglang/srt/configs/model_config.py:328, 336-341 and utils/hf_transformers/config.py:266-275:
    # each key of the JSON is set on the engines' model config (hidden size, top-k, experts, ...).
    "sglang:json_model_override_args": ("SGLang sets each key of the JSON on the engines' model config",
                                        "workloads.run.model (and modelArgs)"),
    # sglang 0.5.19 sglang/srt/configs/model_config.py:330-331, 616-620: the engines' model config is read from
    # this file instead of the checkpoint's config.json.
    "sglang:decrypted_config_file": ("SGLang reads the engines' model config from that file instead of the "
                                     "checkpoint's config.json", "workloads.run.model"),
    # Megatron-LM 235952df megatron/core/parallel_state.py:751-762 loads the YAML, get_nccl_options :149-179 sets
    # per process group NCCL's net_name (IB or socket) and CTA counts; Miles passes the path
    # (miles/backends/megatron_utils/initialize.py:45-56).
    "nccl_communicator_config_path": ("Megatron sets NCCL's network (IB or socket) and CTA counts per process "
                                      "group from the YAML file",
                                      NCCL),
}
"""The argument -> (what its upstream code does with the file or JSON, what to set instead)."""


def config_file_problem(key: str, written: str, field: str) -> str | None:
    """``<field>: <written> takes settings from a file or JSON (...); allowed: ...`` for a ``CONFIG_FILE_ARGS``
    key, else None."""
    if key not in CONFIG_FILE_ARGS:
        return None
    what, allowed = CONFIG_FILE_ARGS[key]
    return (f"{field}: {written} takes settings from a file or JSON ({what}), the platform's among them; "
            f"allowed: {allowed}")


BUDGET = "workloads.run.rollout (the DeepEP V2 budget sizes it: workloads/derive/sglang_budget.py)"
BUDGET_ARGS: dict[str, str] = {
    # sglang 0.5.19 sglang/srt/arg_groups/memory_hook.py:154-159: an explicit list makes its largest size the
    # decode graph's max batch, over the rendered --cuda-graph-max-bs the budget sized its reserve and buffer for.
    "sglang:cuda_graph_bs_decode": "its largest size becomes the decode CUDA graph's batch, over the rendered "
                                   "--sglang-cuda-graph-max-bs",
    # memory_hook.py:185-192, 219-221: the prefill graph's sizes come from the prefill chunk (2048 tokens with MLA),
    # which the budget sizes; reserve_for_graph_mb (:316-324) counts them outside the static memory fraction.
    "sglang:cuda_graph_max_bs_prefill": "it sets the prefill CUDA graph's sizes, which SGLang derives from the "
                                        "prefill chunk the budget sizes",
    "sglang:cuda_graph_bs_prefill": "it sets the prefill CUDA graph's sizes, which SGLang derives from the prefill "
                                    "chunk the budget sizes",
    # cuda_graph_hook.py:106-115: an explicit prefill backend skips SGLang's rules that turn the prefill graph off
    # for DP attention and all-to-all backends (:169-323), so it captures up to the prefill graph's largest size
    # per rank, which SGLang's DeepEP V2 check does not bound (moe_hook.py:379-423 checks the chunk and the
    # decode graph only). Refused whatever the backend, disabled included (its deprecated aliases set it too).
    "sglang:cuda_graph_backend_prefill": "an explicit prefill graph backend skips SGLang's rules that turn that "
                                         "graph off for DP attention and all-to-all engines",
    # memory_hook.py:236, 253 reserve tp_size * pp_size / 8 GiB; overrides.py:1832-1833 grows prefill chunks toward
    # --max-prefill-tokens under PP dynamic chunking. Miles passes it beside tp_size = every GPU of the engine
    # (miles 49cac7b5 miles/backends/sglang_utils/sglang_engine.py:731-733).
    "sglang:pp_size": "the budget sizes an engine of one pipeline stage",
    # moe_hook.py:410-423: the decode graph's tokens are its batch times the draft tokens per request, against
    # the per-rank capacity the budget sizes for one token per request (and :362-376 refuses a DeepEP V2 draft).
    "sglang:speculative_algorithm": "speculative decoding multiplies the decode graph's tokens by the draft "
                                    "tokens, and the budget sizes one token per request",
}
"""Arguments refused when the run has a DeepEP V2 rollout budget (``workloads.derive.argv.rollout_budget``):
they change what it sized (prefill chunk, decode graph batch, request pool, static memory, buffer capacity),
beside the flags it renders. Read in sglang 0.5.19 and left allowed:

- ``--max-total-tokens``: only lowers the KV pool the static fraction gives (mem_cache/kv_cache_configurator.py:
  2082-2091, a larger value is ignored with a warning) and the prefill graph's largest size (memory_hook.py:
  206-210), so it frees memory and cannot take the buffer's.
- ``--max-prefill-tokens``: with the budget's chunked prefill on, a prefill batch is bounded by the chunk and
  this only lowers it (managers/schedule_policy.py:821-822; the :1239-1246 bound applies without chunking);
  SGLang's DeepEP V2 check and memory reserve read the chunk, not it (moe_hook.py:386-389, overrides.py:1822-1834,
  memory_hook.py:243-248), except under PP dynamic chunking (``pp_size`` is refused above).
- ``--disable-cuda-graph``, ``--cuda-graph-backend-decode`` and the other off-switches: a graph turned off frees
  the memory reserved for it; the decode graph's backend does not change its sizes.
"""


def budget_problem(key: str, written: str, field: str) -> str | None:
    """``<field>: <written> changes what the DeepEP V2 rollout budget sizes (...); allowed: ...`` for a
    ``BUDGET_ARGS`` key, else None (call it only where the run has a budget)."""
    if key not in BUDGET_ARGS:
        return None
    return (f"{field}: {written} changes what the DeepEP V2 rollout budget sizes ({BUDGET_ARGS[key]}); allowed: "
            f"leave it out, and set {BUDGET}")


LOADER_PREFIXES = ("NCCL_", "FI_", "LD_", "CUDA_", "NVSHMEM_", "UCX_")
"""Environment variables refused in ``--train-env-vars`` by prefix: they choose which NCCL, libfabric and plugin
libraries load (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``NCCL_NET_PLUGIN``) or how they run (``NCCL_P2P_*``,
``FI_EFA_*``, ...), under the transport the platform checked and names (issue 34 A3's loaded-NCCL check reads the
library mapped in its own process, not in the train actors')."""


def train_env_problem(cfg: "ProgramConfig", written: str, value: str, field: str) -> str | None:
    """``<field>: <written> sets <variables> ...; allowed: ...`` when Miles' ``--train-env-vars`` JSON names an
    environment variable the platform sets on the training pods (its NCCL, EFA and Ray runtime variables, under
    either fabric) or one of a ``LOADER_PREFIXES`` prefix, else None. Miles 49cac7b5
    miles/ray/train/actor_factory.py:28-39 spreads the JSON last into every train actor's environment
    (``**args.train_env_vars``, parsed with json.loads: miles/utils/arguments.py:309-314), over the pod's;
    other variables (``PYTORCH_CUDA_ALLOC_CONF``, ...) stay allowed. A value that is no JSON object is left to
    Miles, which fails to start on it."""
    try:
        names = json.loads(value)
    except ValueError:
        return None
    pool = cfg.pool(Role.TRAIN)
    ours = {*gpu_env(pool, 1, None, "efa"), *gpu_env(pool, 1, None, "sockets"), *runtime_env(pool)}
    given = set(names) if isinstance(names, dict) else set()
    taken = sorted(n for n in given if n in ours or n.startswith(LOADER_PREFIXES))
    if not taken:
        return None
    return (f"{field}: {written} sets {', '.join(taken)}, and Miles puts the JSON over the training pods' "
            f"environment; the platform owns the variables it sets there (workloads/derive/env.py) and every "
            f"{'*, '.join(LOADER_PREFIXES)}* variable (they choose which NCCL, libfabric and plugins load and how "
            f"they run); allowed: leave {'them' if len(taken) > 1 else 'it'} out (workloads.run.fabric picks "
            f"NCCL's network; other variables, such as PYTORCH_CUDA_ALLOC_CONF, pass)")
