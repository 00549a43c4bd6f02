"""Resolve rollout engines with one pinned SGLang wheel (its directory on PYTHONPATH): reads a JSON list
of engines on stdin, prints one JSON result per engine on stdout's last line.

Each engine's ``ServerArgs`` is built as Miles builds it, by the rollout pods' own preflight code
(``workloads.pod.preflight.sglang_server_args``, which cites radixark/miles 49cac7b5).
Then the pod's environment is set, the node's GPU memory (instance catalog, MiB) replaces
``get_device_memory_capacity`` where the wheel's resolution calls it (0.5.19
``sglang/srt/arg_groups/pipeline.py:23,223``; 0.5.9/0.5.16 ``sglang/srt/server_args.py``
``__post_init__``), and resolution runs: ``resolve_once()`` where the wheel has it (0.5.19
``server_args.py:3673``), else the constructor's ``__post_init__``, then the model runner's quantized-MoE
check (``check_model_load``). ``device="cuda"`` stands for what ``get_device()`` finds in the pod (no CUDA here),
and the prefill CUDA graph's default backend is the one a CUDA pod gets (``cuda_prefill_default``).
An engine without ``--sglang-mem-fraction-static`` also reports the memory SGLang keeps outside its own
fraction, before rounding (``record_reserve``)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from workloads.pod.preflight import resolve_sglang  # noqa: E402 - the rollout pods' own builder


def patch_gpu_memory(mib: int) -> None:
    import importlib
    for name in ("sglang.srt.arg_groups.pipeline", "sglang.srt.server_args"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "get_device_memory_capacity"):
            mod.get_device_memory_capacity = lambda device=None, _m=mib: _m


def cuda_prefill_default() -> None:
    """The prefill CUDA graph's default backend as in a pod: 0.5.19 picks "breakable" when ``is_cuda()`` (torch
    sees a CUDA GPU) and "tc_piecewise" otherwise (``model_executor/cuda_graph_config.py:112-121``). On this CPU
    it would pick tc_piecewise, which DP attention and any all-to-all turn off (``arg_groups/cuda_graph_hook.py:
    169-259``) where breakable stays on (:262-323, off only for an all-to-all outside none/deepep/megamoe/
    flashinfer), and the memory reserve counts the prefill graph only while it is on (``memory_hook.py:315-324``).
    Wheels without that function (0.5.9, 0.5.16) are left as they are."""
    try:
        from sglang.srt.model_executor import cuda_graph_config
    except ImportError:
        return
    if hasattr(cuda_graph_config, "default_prefill_backend"):
        cuda_graph_config.default_prefill_backend = lambda: cuda_graph_config.Backend.BREAKABLE


class record_reserve:
    """The MiB SGLang keeps outside the static fraction it picks itself: 0.5.19 ``memory_hook.py:260-268``
    declares ``round((gpu_mem - reserved_mem) / gpu_mem, 3)``; the module's ``round`` is wrapped to keep the
    unrounded value, so ``reserved_mem`` is read back exactly, not from the 3-decimal fraction. None where the
    wheel has no such module (0.5.9, 0.5.16) or the engine passes its own fraction (that branch is not run)."""

    def __init__(self, gpu_mib: int):
        self.gpu_mib, self.mib, self.module = gpu_mib, None, None

    def __enter__(self):
        try:
            from sglang.srt.arg_groups import memory_hook as module
        except ImportError:
            return self
        self.module = module

        def spy(value, digits=None):
            self.mib = self.gpu_mib * (1 - value)
            return round(value, digits)
        module.round = spy
        return self

    def __exit__(self, *exc):
        if self.module is not None:
            del self.module.round


def decode_max_bs(a) -> int | None:
    graphs = getattr(a, "cuda_graph_config", None)
    decode = getattr(graphs, "decode", None)
    return getattr(decode, "max_bs", None) if decode is not None else getattr(a, "cuda_graph_max_bs", None)


def prefill_backend(a) -> str | None:
    graphs = getattr(a, "cuda_graph_config", None)
    return getattr(getattr(graphs, "prefill", None), "backend", None)


def check_model_load(a) -> None:
    """The model runner's own check of a blockwise-quantized MoE checkpoint against the engine's TP, EP and MoE
    DP sizes (0.5.19 model_executor/model_runner_components/moe_ep_setup.py:106-148, called at model load,
    model_runner.py:460; the runner's sizes are the server args'): it reads only the model's config.json.
    Wheels without it (0.5.9, 0.5.16) check at weight creation, which needs a GPU."""
    try:
        from sglang.srt.model_executor.model_runner_components.moe_ep_setup import check_quantized_moe_compatibility
    except ImportError:
        return
    from sglang.srt.configs.model_config import ModelConfig
    check_quantized_moe_compatibility(model_config=ModelConfig.from_server_args(a), tp_size=a.tp_size,
                                      moe_ep_size=a.ep_size, moe_dp_size=a.moe_dp_size)


def resolve(engine: dict) -> dict:
    base = dict(os.environ)
    os.environ.update(engine["env"])
    try:
        patch_gpu_memory(engine["gpu_memory_mib"])
        cuda_prefill_default()
        with record_reserve(engine["gpu_memory_mib"]) as reserve:
            a = resolve_sglang(engine, device="cuda")
        if hasattr(a, "resolve_once"):
            from sglang.srt.arg_groups.model_override_base import resolved_view
            a = resolved_view(a)  # 0.5.19 keeps the fields raw; the view overlays what resolution declared
        check_model_load(a)
        return {"ok": True, "chunked_prefill_size": a.chunked_prefill_size,
                "mem_fraction_static": a.mem_fraction_static, "max_running_requests": a.max_running_requests,
                "decode_max_bs": decode_max_bs(a), "moe_a2a_backend": a.moe_a2a_backend,
                "reserve_mib": reserve.mib, "prefill_graph": prefill_backend(a)}
    except Exception as err:  # noqa: BLE001 - SGLang's refusal is the result
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
