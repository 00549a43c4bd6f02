"""Flags of ``extraArgs`` refused because their upstream code changes the run's layout (where the engines run,
how many GPUs Ray is asked for, how an engine's ranks are split) or the NCCL environment the platform sets, under
a dest the renderer never emits, so ``workloads.checks.extra_args`` cannot find them by name. Refused whatever
the value, on every profile. Each key is the argument as ``extra_args.dest`` names it (``"sglang:<ServerArgs
field>"`` behind ``--sglang-``, else the parser's dest), so aliases are refused with it.

Traced at radixark/miles 49cac7b5 (the seed's Miles arms run a later Miles, which the profile checks against this
commit, the closest readable one; slime bd217a63 declares the same flags and was not read) and the sglang 0.5.19
wheel. Read and left allowed:

- Miles ``--offload-train`` (and ``--no-offload-*``): the trainer moves its own state to CPU between steps
  (miles/backends/megatron_utils/actor.py:162, :284); the layout and the engines are unchanged.
- Miles ``--eval-num-gpus-per-engine``: read only when ``--eval-num-gpus`` is positive (refused below).
- SGLang ``--enable-torch-symm-mem``: torch's symmetric-memory all-reduce (sglang/srt/distributed/bootstrap.py:
  201); it writes no NCCL variable. Its memory was not traced.
- SGLang ``--enable-elastic-expert-backup``: read by the Mooncake transfer engine only
  (distributed/device_communicators/mooncake_transfer_engine.py:336), not traced further.
"""

from __future__ import annotations

M = "radixark/miles 49cac7b5"
S = "sglang 0.5.19"
POOLS = "nothing per run: the platform puts the engines on the rollout pool and the trainer on the train pool"
ENGINE = "workloads.run.rollout (expertParallel, dpAttention, nodesPerEngine or gpusPerEngine)"
NCCL = "nothing per run: the platform sets NCCL's environment (workloads/derive/env.py)"

LAYOUT_ARGS: dict[str, tuple[str, str]] = {
    # Miles: the placement group and the rollout pool.
    "colocate": (f"Miles puts the engines on the trainer's GPUs and replaces --rollout-num-gpus with the trainer's "
                 f"GPU count ({M} miles/utils/arguments.py:3296-3317, miles/ray/placement_group.py:103-104)", POOLS),
    "debug_rollout_only": (f"Miles runs no training and replaces --actor-num-nodes and --actor-num-gpus-per-node "
                           f"({M} miles/utils/arguments.py:3238-3244, miles/ray/placement_group.py:98-102)", POOLS),
    "debug_train_only": (f"Miles starts no engines ({M} miles/ray/placement_group.py:95-96)", POOLS),
    "eval_num_gpus": (f"Miles asks Ray for the eval GPUs beside the trainer's and the rollout's, more than the "
                      f"pools hold, and waits for them with no timeout ({M} miles/ray/placement_group.py:105, "
                      f":57-60)", POOLS),
    "rollout_external": (f"Miles starts no engines and uses external ones ({M} miles/ray/placement_group.py:97-100)",
                         POOLS),
    "rollout_external_engine_addrs": (f"Miles sends rollouts to the engines at those addresses ({M} "
                                      f"miles/ray/rollout/addr_allocator.py:118)", POOLS),
    "prefill_num_servers": (f"Miles splits the engines into prefill and decode servers ({M} "
                            f"miles/backends/sglang_utils/sglang_config.py:170-185, sglang_engine.py:746-754)",
                            ENGINE),
    # Colocated-mode offload: the platform's engines never share the trainer's GPUs.
    "offload": (f"it turns on --offload-rollout ({M} miles/utils/arguments.py:3233-3236)", POOLS),
    "offload_rollout": (f"Miles releases the engines' memory once they start and turns on SGLang's memory saver for "
                        f"engines on the trainer's GPUs, colocated-mode machinery the platform's separate pools "
                        f"never use ({M} miles/ray/placement_group.py:205-206, miles/ray/rollout/rollout_server.py:"
                        f"52-55, miles/backends/sglang_utils/sglang_engine.py:720; its effect on engines on their own "
                        f"GPUs was not traced further)", POOLS),
    # SGLang: the engine's rank layout, which the platform derives and the memory budget sizes.
    "sglang:moe_dp_size": (f"SGLang replicates the experts moe-dp times inside an engine, so each GPU holds more "
                           f"expert weights than the engine's layout gives ({S} sglang/srt/arg_groups/"
                           f"parallel_hook.py:95-117)", ENGINE),
    "sglang:attn_cp_size": (f"SGLang splits attention across ranks, paired with --moe-dp-size ({S} "
                            f"sglang/srt/arg_groups/parallel_hook.py:95-117)", ENGINE),
    "sglang:dcp_size": (f"SGLang splits the decode KV cache across ranks and sets NCCL_GRAPH_MIXING_SUPPORT ({S} "
                        f"sglang/srt/server_args.py:945-952, arg_groups/parallel_hook.py:128-156, "
                        f"entrypoints/engine.py:1668-1672)",
                        ENGINE),
    **{key: (f"elastic EP changes the engine's expert-parallel group at run time and preallocates for its largest "
             f"size ({S} sglang/srt/arg_groups/parallel_hook.py:351-440, server_args.py:2502-2560)", ENGINE)
       for key in ("sglang:elastic_ep_backend", "sglang:max_ep_size", "sglang:elastic_ep_initial_size",
                   "sglang:ep_join_mode", "sglang:ep_join_rank_offset", "sglang:elastic_ep_rejoin")},
    # SGLang: the NCCL environment.
    "sglang:enable_symm_mem": (f"SGLang writes NCCL_CUMEM_ENABLE=1 and NCCL_NVLS_ENABLE=1 over the pod's values "
                               f"({S} sglang/srt/entrypoints/engine.py:1658-1667) and preallocates a 4 GiB "
                               f"symmetric pool (sglang/srt/arg_groups/memory_hook.py:283-289, distributed/"
                               f"device_communicators/pynccl_allocator.py:426-439) that neither SGLang's reserve nor "
                               f"the platform's budget counts", NCCL),
    "sglang:enable_nccl_nvls": (f"SGLang writes NCCL_NVLS_ENABLE=1 over the pod's value ({S} "
                                f"sglang/srt/entrypoints/engine.py:1660-1667)", NCCL),
}
"""The argument -> (what its upstream code does, what to set instead)."""


def layout_problem(key: str, written: str, field: str) -> str | None:
    """``<field>: <written> changes the run's layout or NCCL environment (...); allowed: leave it out (...)`` for
    a ``LAYOUT_ARGS`` key, else None."""
    if key not in LAYOUT_ARGS:
        return None
    what, allowed = LAYOUT_ARGS[key]
    return (f"{field}: {written} changes the run's layout or NCCL environment, which the platform sets ({what}); "
            f"allowed: leave it out, and set {allowed}")
