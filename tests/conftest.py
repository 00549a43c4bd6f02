"""Shared fixtures: each stack's program run once under Pulumi mocks, its graph recorded."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis import mocks  # noqa: E402
from stackconfig.files import stack_names  # noqa: E402

STACKS = stack_names()


def load(stack: str):
    """A stack file through the gate every command uses (``workloads.checks.gate``)."""
    from workloads.checks import gate
    return gate.read(stack)


@functools.cache
def graph_of(stack: str) -> mocks.Graph:
    import program
    cfg = load(stack)
    return mocks.run(lambda: program.build(cfg), region=cfg.region, stack=stack)


@pytest.fixture(params=STACKS)
def stack(request) -> str:
    return request.param


def send_json(handler, status: int, body) -> None:
    """Answer an ``http.server`` request with ``body`` as JSON (the fake API servers of the tests)."""
    import json
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
