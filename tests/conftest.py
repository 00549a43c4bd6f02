"""Shared fixtures: each stack file through the gate once, and each config's program run once per
test session under Pulumi mocks, its graph recorded.

A recorded graph is stored (pickled) under the session's temporary root, so the xdist workers of
one session share it; nothing outlives the session, so no source change can meet a stale graph.
Configs and graphs handed out are shared by every test of a worker: a test that changes one fails
(``_shared_unchanged``); a test that needs to change a graph takes ``graph_copy``.
"""

from __future__ import annotations

import atexit
import copy
import functools
import gc
import hashlib
import os
import pickle
import sys
from pathlib import Path
from typing import Callable

import pytest

gc.set_threshold(100_000, 50, 50)  # from the start of collection: see pytest_collection_finish

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis import mocks  # noqa: E402
from stackconfig.files import stack_names  # noqa: E402

STACKS = stack_names()


# --- what the tests' third-party libraries repeat -----------------------------------------------------

def _repeat_less() -> None:
    """kubernetes_validate reads and parses its schema files (1.4 MB of ``_definitions.json``) on
    every ``validate``: they are the installed package's, parsed once per worker here."""
    import kubernetes_validate.utils as kv
    kv.schema_contents = functools.cache(kv.schema_contents)
    kv.all_versions = functools.cache(kv.all_versions)


_repeat_less()


def pytest_collection_finish(session) -> None:
    """What is loaded by now (modules, schemas, strategies) is kept for the session: frozen out of
    the garbage collector's view, which runs less often from the start of collection (the thresholds
    above). Measured on 2 cores: full collections of that heap took 14 of the 17 s each worker spent
    collecting garbage; the suite's wall time dropped about a fifth, its peak memory stayed under
    1 GB a worker. What stays frozen is never collected: a finalizer of an object alive now that later
    becomes garbage in a cycle does not run, so an error it would raise is not reported."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session, exitstatus) -> None:
    """An xdist worker (``workerinput``: xdist sets it on a worker's config only, unlike the
    environment a worker's child inherits) leaves without tearing its interpreter down: its results
    are with the controller by the time it exits (xdist/remote.py sends ``workerfinished`` after this
    hook; the controller then ends the worker), and freeing its heap object by object (about 700 MB
    of graphs, schemas and modules) kept the suite waiting 2-3 s after the last test."""
    if hasattr(session.config, "workerinput"):
        atexit.register(_leave_now, int(exitstatus))


def _leave_now(status: int) -> None:
    """Exit with the session's status, skipping the exit handlers registered before this one."""
    import logging
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def load(stack: str):
    """A stack file through the gate every command uses (``workloads.checks.gate``); the config
    is frozen and shared."""
    return _handed(f"config {stack}", _CONFIGS, stack, _read, lambda cfg: cfg.model_dump_json())


_CONFIGS: dict[str, object] = {}


@functools.cache
def _raw(stack: str) -> dict:
    from stackconfig.files import raw_stack
    return raw_stack(stack)


def raw_config(stack: str) -> dict:
    """A fresh copy of the stack file's ``platform`` config (the file parsed once per worker)."""
    return copy.deepcopy(_raw(stack))


def _read(stack: str):
    from workloads.checks import gate
    return gate.read(stack)


# --- recorded graphs -------------------------------------------------------------------------------

_STORE: list[Path] = []
"""The session's graph folder (set by ``_graph_store``; empty before the session starts)."""
_PICKLED: dict[str, bytes] = {}
_GRAPHS: dict[str, mocks.Graph] = {}


def _key(cfg, stack: str) -> str:
    return hashlib.sha256(f"{stack}\n{cfg.model_dump_json()}".encode()).hexdigest()[:32]


def _record(cfg, stack: str) -> bytes:
    import program
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack=stack)
    return pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL)


def _pickled(cfg, stack: str) -> tuple[str, bytes]:
    """The key and pickled graph of ``program.build(cfg)``: from this worker, else from the
    session's folder (another worker recorded it), else recorded now (under the folder's lock,
    so one worker records each graph)."""
    key = _key(cfg, stack)
    if key not in _PICKLED:
        if not _STORE:
            _PICKLED[key] = _record(cfg, stack)
        else:
            from filelock import FileLock
            path = _STORE[0] / f"{key}.pickle"
            with FileLock(f"{path}.lock"):
                if not path.exists():
                    path.with_suffix(".part").write_bytes(_record(cfg, stack))
                    path.with_suffix(".part").replace(path)
                _PICKLED[key] = path.read_bytes()
    return key, _PICKLED[key]


def recorded(cfg, stack: str | None = None) -> mocks.Graph:
    """The graph ``program.build(cfg)`` registers under mocks (URNs of ``stack``, default the
    config's), shared: for a test that only reads it. Not for a test that patches the program."""
    key, data = _pickled(cfg, stack or cfg.stack)
    return _handed(f"graph of stack {stack or cfg.stack} ({key})", _GRAPHS, key, lambda _: pickle.loads(data),
                   _fingerprint)


def graph_of(stack: str) -> mocks.Graph:
    """The stack file's recorded graph (shared; see ``recorded``)."""
    return recorded(load(stack))


def graph_copy(stack: str, cfg=None) -> mocks.Graph:
    """A private copy of the recorded graph of ``stack`` (or of ``cfg``), for a test to change."""
    return pickle.loads(_pickled(cfg or load(stack), stack)[1])


def _fingerprint(graph: mocks.Graph) -> bytes:
    return pickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL)


@pytest.fixture(scope="session", autouse=True)
def _graph_store(tmp_path_factory):
    """The folder shared by the session's workers: the parent of a worker's temporary root."""
    base = tmp_path_factory.getbasetemp()
    store = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "recorded-graphs"
    store.mkdir(exist_ok=True)
    _STORE[:] = [store]
    yield
    _STORE.clear()


# --- shared objects stay as they were ---------------------------------------------------------------

_FINGERPRINTS: dict[str, tuple[object, Callable, object]] = {}
"""name -> (shared object, its fingerprint function, its fingerprint when first handed out)."""
_HANDED: set[str] = set()
"""Names handed out during the running test."""


def _handed(name: str, memo: dict, key, make: Callable, fingerprint: Callable):
    """``memo[key]`` (made on first use), noted as handed to the running test."""
    if key not in memo:
        memo[key] = make(key)
        _FINGERPRINTS[name] = (memo[key], fingerprint, fingerprint(memo[key]))
    _HANDED.add(name)
    return memo[key]


@pytest.fixture(autouse=True)
def _shared_unchanged():
    """Fail the test that changed a shared config or graph: it would change the tests after it."""
    _HANDED.clear()
    yield
    changed = sorted(n for n in _HANDED if (e := _FINGERPRINTS[n])[1](e[0]) != e[2])
    if changed:  # the tests after this one get unchanged ones
        for memo in (_CONFIGS, _GRAPHS, _FINGERPRINTS):
            memo.clear()
    assert not changed, f"the test changed the shared {changed}: change a copy (conftest.graph_copy)"


@pytest.fixture(params=STACKS)
def stack(request) -> str:
    return request.param


def serve(server) -> None:
    """Serve ``server`` (a fake API server, ``http.server``) on a daemon thread, polling for its
    ``shutdown`` every 10 ms (the default 0.5 s made every test with a fake server wait that long)."""
    import threading
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()


def send_json(handler, status: int, body) -> None:
    """Answer an ``http.server`` request with ``body`` as JSON (the fake API servers of the tests)."""
    import json
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
