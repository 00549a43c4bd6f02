"""Resolve rollout engines with one pinned SGLang wheel (its directory on PYTHONPATH): reads a JSON list
of engines on stdin, prints one JSON result per engine on stdout's last line.

Each engine's ``ServerArgs`` is built as Miles builds it (radixark/miles 49cac7b5):
- ``miles/backends/sglang_utils/arguments.py:_add_prefixed_server_args`` registers SGLang's own
  ``ServerArgs.add_cli_args`` under ``--sglang-`` (dest ``sglang_<field>``), skipping
  ``_SKIPPED_SERVER_ARGS`` (so those flags are unknown to Miles' strict parser); here the prefix is
  stripped and SGLang's parser reads the rest, which gives the same field values;
- ``validate_args``: ``tp_size`` is ``--rollout-num-gpus-per-engine``; ``dp_size > 1`` needs DP attention;
- ``sglang_engine.py:_compute_server_args`` (lines 711-739, 807-817): the fixed kwargs below, then every
  ``ServerArgs`` field from the parsed flags, keys the wheel's ``ServerArgs`` lacks dropped.
Then the pod's environment is set, the node's GPU memory (instance catalog, MiB) replaces
``get_device_memory_capacity`` where the wheel's resolution calls it (0.5.19
``sglang/srt/arg_groups/pipeline.py:23,223``; 0.5.9/0.5.16 ``sglang/srt/server_args.py``
``__post_init__``), and resolution runs: ``resolve_once()`` where the wheel has it (0.5.19
``server_args.py:3673``), else the constructor's ``__post_init__``. ``device="cuda"`` stands for what
``get_device()`` finds in the pod (no CUDA here)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback

SKIPPED = ("model_path", "config", "trust_remote_code", "random_seed", "enable_memory_saver", "port", "nnodes",
           "node_rank", "dist_init_addr", "gpu_id_step", "base_gpu_id", "nccl_port", "skip_server_warmup",
           "enable_return_routed_experts", "enable_return_indexer_topk")
"""Miles 49cac7b5 arguments.py ``_SKIPPED_SERVER_ARGS``."""
PREFIX = "--sglang-"


def sglang_tokens(argv: list[str]) -> list[str]:
    """The ``--sglang-*`` flags of a Miles argv with their values, prefix stripped."""
    out, take = [], False
    for tok in argv:
        if tok.startswith("--"):
            take = tok.startswith(PREFIX)
            if take:
                out.append("--" + tok[len(PREFIX):])
        elif take:
            out.append(tok)
    return out


def server_args(engine: dict):
    from sglang.srt.server_args import ServerArgs
    tokens = sglang_tokens(engine["argv"])
    skipped = [t for t in tokens if t.startswith("--") and t[2:].replace("-", "_") in SKIPPED]
    if skipped:
        raise SystemExit(f"Miles does not register --sglang-{skipped[0][2:]} (arguments.py _SKIPPED_SERVER_ARGS)")
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add = parser.add_argument

    def short_dest(*names, **kw):
        """Miles' wrapper stores parallel sizes under the short field names (arguments.py:117-126)."""
        short = [n[2:].replace("-", "_") for n in names if isinstance(n, str) and n.startswith("--")]
        dest = next((d for d in short if d in ("tp_size", "dp_size", "pp_size", "ep_size")), None)
        return add(*names, **({"dest": dest} if dest and "dest" not in kw else {}), **kw)

    parser.add_argument = short_dest
    ServerArgs.add_cli_args(parser)
    parser.add_argument = add
    ns = parser.parse_args(["--model-path", engine["model_path"], *tokens])
    per_engine, per_node = engine["gpus_per_engine"], engine["gpus_per_node"]
    if ns.dp_size > 1 and not ns.enable_dp_attention:
        raise SystemExit("Miles validate_args: --sglang-dp-size > 1 needs --sglang-enable-dp-attention")
    kwargs = {"model_path": engine["model_path"], "trust_remote_code": True, "random_seed": 1234,
              "enable_memory_saver": False, "host": "127.0.0.1", "port": 30000, "nccl_port": 30001,
              "nnodes": max(1, per_engine // per_node), "node_rank": 0, "dist_init_addr": "127.0.0.1:30002",
              "gpu_id_step": 1, "base_gpu_id": 0, "tp_size": per_engine, "dp_size": ns.dp_size,
              "pp_size": ns.pp_size, "ep_size": ns.ep_size, "skip_server_warmup": True,
              "enable_draft_weights_cpu_backup": True, "enable_metrics": True, "device": "cuda"}
    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    for name in fields:
        if name not in kwargs and hasattr(ns, name):
            kwargs[name] = getattr(ns, name)
    return ServerArgs(**{k: v for k, v in kwargs.items() if k in fields})


def patch_gpu_memory(mib: int) -> None:
    import importlib
    for name in ("sglang.srt.arg_groups.pipeline", "sglang.srt.server_args"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "get_device_memory_capacity"):
            mod.get_device_memory_capacity = lambda device=None, _m=mib: _m


def decode_max_bs(a) -> int | None:
    graphs = getattr(a, "cuda_graph_config", None)
    decode = getattr(graphs, "decode", None)
    return getattr(decode, "max_bs", None) if decode is not None else getattr(a, "cuda_graph_max_bs", None)


def resolve(engine: dict) -> dict:
    base = dict(os.environ)
    os.environ.update(engine["env"])
    try:
        patch_gpu_memory(engine["gpu_memory_mib"])
        a = server_args(engine)
        if hasattr(a, "resolve_once"):
            a.resolve_once()
            from sglang.srt.arg_groups.model_override_base import resolved_view
            a = resolved_view(a)  # 0.5.19 keeps the fields raw; the view overlays what resolution declared
        return {"ok": True, "chunked_prefill_size": a.chunked_prefill_size,
                "mem_fraction_static": a.mem_fraction_static, "max_running_requests": a.max_running_requests,
                "decode_max_bs": decode_max_bs(a), "moe_a2a_backend": a.moe_a2a_backend}
    except (Exception, SystemExit) as err:  # noqa: BLE001 - SGLang's refusal is the result
        return {"ok": False, "error": f"{type(err).__name__}: {err}",
                "trace": traceback.format_exc(limit=-3)}
    finally:
        os.environ.clear()
        os.environ.update(base)


def main() -> int:
    engines = json.load(sys.stdin)
    results = [resolve(e) for e in engines]
    sys.stdout.write("\n" + json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
