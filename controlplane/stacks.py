"""Stack files as a team has them after its first build: the shipped files with every placeholder image
digest (``stackconfig.images.placeholder_digest``) replaced by a digest of its own, written to a directory
the commands read with ``--stack-dir``. ``runs submit`` refuses placeholder digests before it sends
anything, as it must; kwok pulls no image, so any well-formed digest serves."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

import yaml

from stackconfig.files import STACKS_DIR
from stackconfig.images import placeholder_digest
from workloads.checks import gate


def _built(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _built(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_built(v) for v in value]
    if isinstance(value, str) and placeholder_digest(value):
        name = value.rsplit("@", 1)[0]
        return f"{name}@sha256:{hashlib.sha256(name.encode()).hexdigest()}"
    return value


def built_stack_dir(stack: str, directory: Path) -> Path:
    """``directory`` holding ``Pulumi.<stack>.yaml`` with its images' digests filled in."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (STACKS_DIR / f"Pulumi.{stack}.yaml").read_text()
    (directory / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(_built(yaml.safe_load(text)), sort_keys=False))
    return directory


def built(stack: str, directory: Path):
    """The built stack's config through the gate every command uses."""
    return gate.read(stack, built_stack_dir(stack, directory))


def variant(stack: str, name: str, change: Callable[[dict], None], directory: Path):
    """A test stack ``name``: the built ``stack`` with ``change`` applied to its platform config (the
    ``moe-rl-platform:platform`` mapping), written to ``directory`` and read through the gate like a shipped one."""
    built_stack_dir(stack, directory)
    doc = yaml.safe_load((directory / f"Pulumi.{stack}.yaml").read_text())
    change(doc["config"]["moe-rl-platform:platform"])
    (directory / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return gate.read(name, directory)
