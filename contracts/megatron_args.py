"""Megatron's own argument parsing and validation on a rendered trainer argv, for the profiles whose Miles or
Slime does not import here (miles-deepep-v2: Megatron 235952df; slime-0.2.4: Megatron 3714d81d), on a CPU.

Runs Megatron's ``parse_args(ignore_unknown_args=True)`` (the framework's own flags are left to the vendored
flag lists, workloads/checks/flags.py), then the defaults Miles sets between parsing and validation
(radixark/miles 49cac7b5: ``miles/utils/arguments.py:1108`` a micro-batch of 1;
``miles/backends/megatron_utils/arguments.py`` ``set_default_megatron_args``: the
distributed optimizer for Adam, bf16, the 4096 placeholder sequence length as max positions, yarn rope with
MLA; ``miles/utils/arguments.py:2686-2690`` the world size from the actor flags), then ``validate_args`` and
``core_transformer_config_from_args`` (``MLATransformerConfig`` with ``--multi-latent-attention``), which holds
the uneven pipeline split and the MoE rules. Not run: Transformer Engine is not installed, so the fused
permutation and RoPE fusion (``--moe-permute-fusion``, ``--apply-rope-fusion``) are turned off before the config
is built (Megatron refuses them without TE: "fused permutation is not available", "apply_rope_fusion is not
available"). Input and output as ``trainer_args.py``; PYTHONPATH holds the tree.
"""

from __future__ import annotations

import os
import sys
import traceback
import types

from child_jobs import serve  # beside this script: its directory is on sys.path


def check(job: dict) -> dict:
    import torch
    major, minor = divmod(job["sm"], 10)
    torch.cuda.get_device_capability = lambda *a, **k: (major, minor)
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(major=major, minor=minor)
    os.environ.update({**job["env"], "WORLD_SIZE": str(job["world_size"]), "RANK": "0", "LOCAL_RANK": "0"})
    sys.argv = ["train.py", *job["argv"]]
    try:
        from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args
        a = parse_args(ignore_unknown_args=True)
        a.micro_batch_size = a.micro_batch_size or 1  # Miles' parser default (miles/utils/arguments.py:1108)
        a.use_distributed_optimizer = a.optimizer is None or a.optimizer.lower() == "adam"
        a.bf16 = not a.fp16
        a.seq_length = a.seq_length or 4096
        a.max_position_embeddings = a.seq_length
        if getattr(a, "rope_type", "") is None:
            a.rope_type = "yarn" if a.multi_latent_attention else "rope"
        a.rank, a.world_size = 0, job["world_size"]
        validate_args(a)
        a.moe_permute_fusion = a.apply_rope_fusion = False  # no Transformer Engine here (module docstring)
        config_class = None
        if a.multi_latent_attention:
            from megatron.core.transformer.transformer_config import MLATransformerConfig as config_class
        config = core_transformer_config_from_args(a, config_class)
        return {"ok": True, "dispatcher": a.moe_token_dispatcher_type, "tp": a.tensor_model_parallel_size,
                "pp": a.pipeline_model_parallel_size, "ep": a.expert_model_parallel_size, "dp": a.data_parallel_size,
                "config": type(config).__name__}
    except BaseException as err:  # noqa: BLE001 - Megatron's refusal (argparse exits, asserts) is the result
        return {"ok": False, "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc(limit=-4)}


if __name__ == "__main__":
    sys.exit(serve(check))
