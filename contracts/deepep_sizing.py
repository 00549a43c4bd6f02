"""DeepEP's own SM and QP sizing (``ElasticBuffer.get_theoretical_num_sms`` / ``get_theoretical_num_qps``) on the
rendered engines, with the DeepEP tree of argv[1] on the path (the sgl-deep-ep wheel SGLang 0.5.19 depends on).
Reads a JSON list of engines (``ranks``, ``nodes``, ``num_sms`` the pod sets or 0) on stdin; prints one JSON
result per engine on stdout's last line: the QPs the SM count gives, and what the automatic count does.

``deep_ep/__init__.py`` refuses to import without a CUDA device, and ``deep_ep._C`` is the CUDA extension:
the package is entered below its ``__init__`` and ``_C`` stands as opaque placeholders, so the Python of
``deep_ep/buffers/elastic.py`` and ``deep_ep/utils/envs.py`` runs as shipped. The buffer's own state is what
its ``__init__`` sets for SGLang's call (sglang 0.5.19 layers/moe/token_dispatcher/deepep_v2.py:178-187:
``allow_hybrid_mode`` from the v2 mode, ``prefer_overlap_with_compute=False``, ``num_allocated_qps`` 0, so
65 or 129 by ``check_fast_rdma_atomic_support``: elastic.py:328-332)."""

from __future__ import annotations

import json
import sys
import types


class _Native(types.ModuleType):
    """``deep_ep._C`` on a CPU: every name an opaque placeholder (none is called by the sizing)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def elastic(root: str):
    package = types.ModuleType("deep_ep")
    package.__path__ = [f"{root}/deep_ep"]
    sys.modules["deep_ep"] = package
    sys.modules["deep_ep._C"] = _Native("deep_ep._C")
    from deep_ep.buffers.elastic import ElasticBuffer
    from deep_ep.utils.envs import check_fast_rdma_atomic_support
    return ElasticBuffer, check_fast_rdma_atomic_support


class _State:
    """The attributes the sizing methods read (a class instance: ``weak_lru`` keeps a weak reference)."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def size(buffer_cls, fast_atomics, engine: dict) -> dict:
    nodes, ranks = engine["nodes"], engine["ranks"]
    hybrid = nodes > 1
    state = _State(
        allow_hybrid_mode=hybrid, prefer_overlap_with_compute=False, num_ranks=ranks,
        num_allocated_qps=(65 if fast_atomics() else 129) if hybrid else 17,
        num_scaleout_ranks=nodes, num_scaleup_ranks=ranks // nodes, num_rdma_ranks=nodes, num_nvlink_ranks=ranks // nodes)
    out = {"allocated_qps": state.num_allocated_qps}
    if engine["num_sms"]:
        out["qps"] = buffer_cls.get_theoretical_num_qps(state, engine["num_sms"])
    try:
        out["auto_sms"] = buffer_cls.get_theoretical_num_sms(state, engine["experts"], engine["topk"])
    except Exception as err:  # noqa: BLE001 - DeepEP's own failure is the result
        out["auto_sms_error"] = f"{type(err).__name__}: {err}"
    return out


def main() -> int:
    buffer_cls, fast_atomics = elastic(sys.argv[1])
    engines = json.load(sys.stdin)
    sys.stdout.write("\n" + json.dumps([size(buffer_cls, fast_atomics, e) for e in engines]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
