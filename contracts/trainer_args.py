"""Miles' own argument parsing and validation (``miles.utils.arguments.parse_args``: its flags, SGLang's
``--sglang-*`` flags through ``ServerArgs.add_cli_args``, then Megatron's ``parse_args``/``validate_args``) on a
rendered trainer argv, on a CPU. Reads a JSON list of trainers on stdin, each: ``argv`` (the Miles flags), ``env`` (the Ray
job's environment, e.g. CUDA_DEVICE_MAX_CONNECTIONS), ``world_size`` (the trainer's GPUs), ``sm`` (the
pool's GPU compute capability, instance catalog), ``models`` (the pods' model paths -> folders holding the
model's config.json, contracts/data/models); prints one JSON result per trainer on stdout's last line.

What stands in for the GPU: Megatron's ``validate_args`` asks ``torch.cuda.get_device_capability()`` (grouped
GEMM) and ``get_device_properties(...).major`` (megatron/training/utils.py ``get_device_arch_version``); both
answer the pool's GPU from the catalog. Miles, Megatron and SGLang come from PYTHONPATH (the pinned trees)."""

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
    argv = job["argv"]
    for pod_path, folder in job["models"].items():
        argv = [a.replace(pod_path, folder) for a in argv]
    sys.argv = ["train.py", *argv]
    try:
        from miles.utils.arguments import parse_args
        a = parse_args()
        return {"ok": True, "dispatcher": a.moe_token_dispatcher_type, "tp": a.tensor_model_parallel_size,
                "ep": a.expert_model_parallel_size, "dp": a.data_parallel_size, "micro_batch": a.micro_batch_size}
    except BaseException as err:  # noqa: BLE001 - Miles' or Megatron's refusal (argparse exits) is the result
        return {"ok": False, "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc(limit=-4)}


if __name__ == "__main__":
    sys.exit(serve(check))
