"""Which classes of pulumi_aws and pulumi_kubernetes the project's source names: what the plan's trimmed SDKs
(``analysis/sdk_subset.py``) keep.

A class is named however a file imports the SDK: ``aws.ec2.Vpc`` after ``import pulumi_aws as aws``,
``pulumi_aws.kms.Key``, ``kms.Key`` after ``from pulumi_aws import kms``, ``corev1.Service`` after
``import pulumi_kubernetes.core.v1 as corev1``, ``from pulumi_aws.ec2 import Vpc``. Where a file hands a
package on as an object (``ec2 = aws.ec2``, ``getattr(aws.ec2, name)``, ``from pulumi_aws.ec2 import *``), the
package is named whole (``ALL``), and where it hands on an SDK itself (``f(aws)``), every package of it: what
such code reaches cannot be read from the source, so none of it is trimmed. Only code that reaches a class by
a name made at run time through a name this scan does not see (an SDK module re-exported by another project
module) is missed; the plan then plans again with the SDKs in full (``analysis/plan.py``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("program.py", "components", "workloads", "stackconfig", "nodes", "bench", "catalog", "software")
"""Where the program's code lives (what ``program.build`` imports); ``tests/test_sdk_subset.py`` holds every
module the plan loads from the project to it."""
SDKS = {"pulumi_aws": 1, "pulumi_kubernetes": 2}
"""Each SDK and how many dotted levels below it a package of resources sits (``ec2``; ``core.v1``)."""
ALL = "*"
"""The name that stands for every class of a package (and, on an SDK itself, of every package of it)."""
_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def folder(package: str) -> Path:
    """The SDK's own folder of ``package`` (``pulumi_aws.ec2``)."""
    sdk, *rest = package.split(".")
    return _root(sdk).joinpath(*rest)


@functools.cache
def _root(sdk: str) -> Path:
    return Path(importlib.util.find_spec(sdk).submodule_search_locations[0])


@functools.cache
def installation() -> list:
    """Each SDK's version and where it is installed (its ``__init__``'s path and time: a reinstall rewrites
    it), and the Python that reads it. An SDK edited in place by hand is not seen."""
    inits = [Path(importlib.util.find_spec(sdk).origin) for sdk in SDKS]
    return [{sdk: importlib.metadata.version(sdk) for sdk in SDKS}, [[str(p), p.stat().st_mtime_ns] for p in inits],
            sys.implementation.cache_tag]


def sdk_names(root: Path = ROOT, known_path: Path | None = None) -> dict[str, set[str]]:
    """{package or SDK: names} the project's source names (``ALL`` where it hands the package or SDK on).
    With ``known_path``, each file's names are kept there by its path, size and time, and read again when
    they, this module or the SDKs' installation change."""
    files = [p for s in SOURCES for p in ([root / s] if s.endswith(".py") else sorted((root / s).rglob("*.py")))
             if p.is_file()]
    reader = [_SOURCE, installation()]
    known: dict = {}
    if known_path is not None:
        with contextlib.suppress(OSError, ValueError):
            known = json.loads(known_path.read_text())
    files_known = known.get("files", {}) if known.get("reader") == reader else {}
    scanned, found = {}, {}
    for path in files:
        stat = path.stat()
        stamp = [stat.st_size, stat.st_mtime_ns]
        entry = files_known.get(str(path))
        if not entry or entry[0] != stamp:
            text = path.read_text()
            names = sorted(set(_referenced(ast.parse(text)))) if any(sdk in text for sdk in SDKS) else []
            entry = [stamp, [list(n) for n in names]]
        scanned[str(path)] = entry
        for package, name in entry[1]:
            found.setdefault(package, set()).add(name)
    if known_path is not None and scanned != files_known:
        with contextlib.suppress(OSError):  # a cache that cannot be written: scanned again next time
            known_path.parent.mkdir(parents=True, exist_ok=True)
            partial = known_path.with_suffix(f".{os.getpid()}")
            partial.write_text(json.dumps({"reader": reader, "files": scanned}))
            partial.replace(known_path)
    return found


def _referenced(tree: ast.Module) -> Iterable[tuple[str, str]]:
    """(package, name) of each SDK class a module names through whatever name it bound the SDK to, and
    (package or SDK, ``ALL``) where it hands one on as an object."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                yield from _imported(node.module, a.name)
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
    bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if id(node) in bases or not isinstance(node, (ast.Attribute, ast.Name)) or not isinstance(node.ctx, ast.Load):
            continue
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain, node = [node.attr, *chain], node.value
        if isinstance(node, ast.Name) and node.id in bound:
            yield from _named(".".join([bound[node.id], *chain]))


def _imported(module: str, name: str) -> Iterable[tuple[str, str]]:
    """``from pulumi_aws.ec2 import Vpc`` names Vpc; ``from pulumi_aws.ec2 import *`` the whole package."""
    sdk, *rest = module.split(".")
    if SDKS.get(sdk) == len(rest) and folder(module).is_dir():
        yield module, ALL if name == "*" else name


def _named(dotted: str) -> Iterable[tuple[str, str]]:
    """What a whole expression (not the start of a longer one) names: ``pulumi_aws.ec2.Vpc[.get]`` the class;
    ``pulumi_aws.ec2`` the package whole; ``pulumi_aws`` (or ``pulumi_kubernetes.core``) every package of the
    SDK; nothing outside the SDKs or for a top-level class (``pulumi_aws.Provider``)."""
    sdk, *rest = dotted.split(".")
    depth = SDKS.get(sdk)
    if depth is None or not folder(".".join([sdk, *rest[:depth]])).is_dir():
        return
    if len(rest) > depth:
        yield ".".join([sdk, *rest[:depth]]), rest[depth]
    elif len(rest) == depth:
        yield dotted, ALL
    else:
        yield sdk, ALL
