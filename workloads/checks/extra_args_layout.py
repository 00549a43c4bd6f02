"""Flags of ``extraArgs`` refused because their upstream code changes the run's layout (where the engines run,
how many GPUs Ray is asked for, how an engine's ranks are split) or the NCCL environment the platform sets, under
a dest the renderer never emits, so ``workloads.checks.extra_args`` cannot find them by name. Refused whatever
the value, on every profile. Each key is the argument as ``extra_args.dest`` names it (``"sglang:<ServerArgs
field>"`` behind ``--sglang-``, else the parser's dest), so aliases are refused with it.

Traced at radixark/miles 49cac7b5: the seed's Miles arms run a later Miles, which the profile checks against this
commit, the closest readable one; slime bd217a63 declares the same flags and was not read. Read and left allowed:

- Miles ``--offload-train`` (and ``--no-offload-*``): the trainer moves its own state to CPU between steps
  (miles/backends/megatron_utils/actor.py:162, :284); the layout and the engines are unchanged.
- Miles ``--eval-num-gpus-per-engine``: read only when ``--eval-num-gpus`` is positive (refused below).
"""

from __future__ import annotations

M = "radixark/miles 49cac7b5"
POOLS = "nothing per run: the platform puts the engines on the rollout pool and the trainer on the train pool"
ENGINE = "workloads.run.rollout (expertParallel, dpAttention, nodesPerEngine or gpusPerEngine)"

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
