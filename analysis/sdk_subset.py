"""The plan's SDKs: pulumi_aws's and pulumi_kubernetes' own code, only the classes the program uses.

A service of pulumi_aws (``ec2``) or a group version of pulumi_kubernetes (``core.v1``) imports, on first
use, the module of every resource it has and two modules of every input and output type of all of them
(``_inputs``, ``outputs``: 2.6 MB of source for ec2, 4.5 MB for core/v1). The offline plan needs a few
dozen of those classes; loading the rest was most of its CPU time (BENCHMARKS.md).

``install()`` puts, in front of each such package the program names (``sdk_names``: every reference the
project's source makes to a class of the SDKs, however it imports them), a package of the same name whose
``__init__`` imports only the resource modules named, from the SDK's own folder, and whose ``_inputs``,
``outputs`` and ``_enums`` hold, verbatim and in the SDK's order, every top-level statement of the SDK's
module that the kept code names (any identifier in its text, docstrings included: more is kept than
needed, never less), closed over every package it reaches. A package whose ``__init__`` does more than
import its modules (``pulumi_aws.config``) is not trimmed. The classes are the SDK's own, so the program
registers the same graph (``tests/test_sdk_subset.py`` compares every stack's with the full SDKs'). A
name reached only at run time (``getattr``) raises AttributeError naming it.

The trimmed packages are written once per SDK installation, Python and set of names, under
``$MOE_RL_SDK_SUBSET_CACHE`` (default ``~/.cache/moe-rl-sdk-subset``), compiled there as pip compiles the
SDKs; a folder unused for ``KEEP_DAYS`` is removed when another is written. Only the installed
``moe-rl plan`` installs them (``analysis.plan.own_process``): a process that imported a package in full
keeps it.
"""

from __future__ import annotations

import ast
import compileall
import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("program.py", "components", "workloads", "stackconfig", "nodes", "bench")
"""Where the program's code lives (what ``program.build`` imports); tests and scripts are not scanned."""
SDKS = {"pulumi_aws": 1, "pulumi_kubernetes": 2}
"""Each SDK and how many dotted levels below it a package of resources sits (``ec2``; ``core.v1``)."""
TYPE_MODULES = ("_enums", "_inputs", "outputs")
CACHE = Path(os.environ.get("MOE_RL_SDK_SUBSET_CACHE") or Path.home() / ".cache" / "moe-rl-sdk-subset")
KEEP_DAYS = 30
_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
"""This module's own text: a copy or a scan it made is not used by another version of it."""
_PLAIN_INIT = re.compile(r"import builtins as _builtins|import typing|from \.+ import _utilities|"
                         r"from \.\w+ import \*|from \. import outputs")
"""The statements of a generated package ``__init__`` that only import its modules."""
_IDENT = re.compile(r"[A-Za-z_]\w*")
_REFERENCE = {sdk: re.compile(rf"(?<![.\w])_?((?:[a-z][a-z0-9_]*\.){{{depth}}})(?:outputs\.)?([A-Za-z_]\w*)")
              for sdk, depth in SDKS.items()}
"""A name in another package of the same SDK, as its code writes it (``'_iam.PolicyStatementArgs'``,
``'iam.PolicyDocumentVersion'``, ``'_meta.v1.outputs.LabelSelector'``); an example in a docstring
(``aws.iam.Role``) is not one."""


def sdk_names(root: Path = ROOT, cache: Path = CACHE) -> dict[str, set[str]]:
    """{package: names} of every SDK class the project's source names: ``aws.ec2.Vpc`` after
    ``import pulumi_aws as aws``, ``pulumi_aws.kms.Key``, ``kms.Key`` after ``from pulumi_aws import kms``,
    ``corev1.Service`` after ``import pulumi_kubernetes.core.v1 as corev1``, ``from pulumi_aws.ec2 import Vpc``.
    Each file's names are kept in ``cache``/scan.json by its path, size and time, and read again when
    they, this module or the SDKs' installation change."""
    files = [p for s in SOURCES for p in ([root / s] if s.endswith(".py") else sorted((root / s).rglob("*.py")))
             if p.is_file()]
    known_path, reader = cache / "scan.json", [_SOURCE, _installation()]
    try:
        known = json.loads(known_path.read_text())
    except (OSError, ValueError):
        known = {}
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
    if scanned != files_known:
        with contextlib.suppress(OSError):  # a cache that cannot be written: scanned again next time
            cache.mkdir(parents=True, exist_ok=True)
            partial = known_path.with_suffix(f".{os.getpid()}")
            partial.write_text(json.dumps({"reader": reader, "files": scanned}))
            partial.replace(known_path)
    return found


def _referenced(tree: ast.Module) -> Iterable[tuple[str, str]]:
    """(package, name) of each SDK class a module names, through whatever name it bound the SDK to."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain, node = [node.attr, *chain], node.value
        if isinstance(node, ast.Name) and node.id in bound:
            yield from _class_of(f"{bound[node.id]}.{'.'.join(chain)}".rstrip("."))
    for node in ast.walk(tree):  # from pulumi_aws.ec2 import Vpc
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                yield from _class_of(f"{node.module}.{a.name}")


def _class_of(dotted: str) -> Iterable[tuple[str, str]]:
    """``pulumi_aws.ec2.Vpc[.get]`` -> (``pulumi_aws.ec2``, ``Vpc``); nothing for anything else."""
    sdk, *rest = dotted.split(".")
    depth = SDKS.get(sdk)
    if depth is not None and len(rest) > depth and _folder(".".join([sdk, *rest[:depth]])).is_dir():
        yield ".".join([sdk, *rest[:depth]]), rest[depth]


class _Package:
    """One SDK package's top-level statements, indexed by the names each defines."""

    def __init__(self, name: str):
        self.name = name
        self.folder = _folder(name)
        self.modules: dict[str, list[str]] = {}   # module -> its lines
        self.statements: dict[str, list[tuple[int, int, set[str]]]] = {}  # module -> (first, last, defines)
        self.defined: dict[str, list[tuple[str, int]]] = {}  # name -> [(module, statement)]
        for module in TYPE_MODULES:
            path = self.folder / f"{module}.py"
            if path.is_file():
                self._index(module, path.read_text())
        self.exports = self._exports()

    def _index(self, module: str, text: str) -> None:
        lines, spans = text.splitlines(keepends=True), []
        for node in ast.parse(text).body:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            names = _defines(node)
            spans.append((first - 1, node.end_lineno, names))
            for n in names:
                self.defined.setdefault(n, []).append((module, len(spans) - 1))
        self.modules[module], self.statements[module] = lines, spans

    def _exports(self) -> dict[str, str]:
        """Name -> the resource or function module that exports it (its ``__all__``)."""
        out = {}
        for path in self.folder.glob("*.py"):
            if path.stem in TYPE_MODULES or path.stem == "__init__":
                continue
            head = path.read_text()
            m = re.search(r"^__all__ = (\[[^\]]*\])", head, re.M)
            for n in ast.literal_eval(m[1]) if m else []:
                out[n] = path.stem
        return out

    def text(self, module: str, statement: int) -> str:
        first, last, _ = self.statements[module][statement]
        return "".join(self.modules[module][first:last])


def _folder(package: str) -> Path:
    """The SDK's own folder of ``package``."""
    sdk, *rest = package.split(".")
    return _root(sdk).joinpath(*rest)


@functools.cache
def _root(sdk: str) -> Path:
    return Path(importlib.util.find_spec(sdk).submodule_search_locations[0])


def trimmable(package: str) -> bool:
    """Whether the SDK's ``__init__`` of ``package`` only imports its modules (a trimmed one does no more)."""
    init = _folder(package) / "__init__.py"
    return init.is_file() and all(_PLAIN_INIT.fullmatch(ast.unparse(node)) for node in ast.parse(init.read_text()).body)


def _defines(node: ast.stmt) -> set[str]:
    """Names a top-level statement of a generated module defines (``if not MYPY:`` blocks included)."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
        return {node.name}
    if isinstance(node, ast.If):
        return set().union(*(_defines(n) for n in node.body + node.orelse))
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)} - {"__all__", "MYPY"}
    return set()


class _Subset:
    """The closure of the seeds over every package they reach."""

    def __init__(self, seeds: dict[str, set[str]]):
        self.packages: dict[str, _Package] = {}
        self.modules: dict[str, set[str]] = {}                  # package -> kept resource modules
        self.kept: dict[str, dict[str, set[int]]] = {}          # package -> module -> kept statements
        self.untrimmed: set[str] = set()
        self.work: list[tuple[str, str, bool]] = [(p, n, True) for p, names in seeds.items() for n in sorted(names)]
        while self.work:
            self._keep(*self.work.pop())

    def package(self, name: str) -> _Package | None:
        """``name``'s statements, or None for a package loaded in full (``trimmable``)."""
        if name in self.untrimmed:
            return None
        if name not in self.packages:
            if not trimmable(name):
                self.untrimmed.add(name)
                return None
            self.packages[name] = _Package(name)
            self.modules[name], self.kept[name] = set(), {m: set() for m in TYPE_MODULES}
            for module, spans in self.packages[name].statements.items():  # imports, __all__, MYPY: always
                self.kept[name][module] |= {i for i, (_, _, names) in enumerate(spans) if not names}
        return self.packages[name]

    def _keep(self, package: str, name: str, exported: bool) -> None:
        """Keep what defines ``name`` in ``package``: a type, and with ``exported`` the resource or
        function module exporting it (``s3.BucketLogging`` is both a resource and an output type)."""
        pkg = self.package(package)
        if pkg is None:
            return
        module = pkg.exports.get(name) if exported else None
        if module and module not in self.modules[package]:
            self.modules[package].add(module)
            self._names_in(package, (pkg.folder / f"{module}.py").read_text())
        for module, i in pkg.defined.get(name, []):
            if i not in self.kept[package][module]:
                self.kept[package][module].add(i)
                self._names_in(package, pkg.text(module, i))

    def _names_in(self, package: str, text: str) -> None:
        """Queue what ``text`` names: its own package's types by name, another package's as written."""
        sdk = package.split(".")[0]
        for prefix, name in set(_REFERENCE[sdk].findall(text)):
            other = f"{sdk}.{prefix.rstrip('.')}"
            if other != package and _folder(other).is_dir():
                self.work.append((other, name, True))
        defined = self.packages[package].defined
        self.work += [(package, ident, False) for ident in set(_IDENT.findall(text)) if ident in defined]

    def write(self, into: Path) -> None:
        for name, pkg in self.packages.items():
            folder = into.joinpath(*name.split("."))
            folder.mkdir(parents=True)
            for module, kept in self.kept[name].items():
                if module in pkg.modules:
                    (folder / f"{module}.py").write_text(self._module(pkg, module, kept))
            (folder / "__init__.py").write_text(self._init(pkg, name))

    def _module(self, pkg: _Package, module: str, kept: set[int]) -> str:
        keep_names = {n for i in kept for n in pkg.statements[module][i][2]}
        out = [f"# {pkg.name}.{module}: the statements of {pkg.folder / module}.py the plan's program names "
               f"(analysis/sdk_subset.py)\n"]
        for i in sorted(kept):
            text = pkg.text(module, i)
            if text.startswith("__all__ = ["):
                text = f"__all__ = {sorted(n for n in ast.literal_eval(text.split('=', 1)[1]) if n in keep_names)!r}\n"
            out.append(text)
        return "".join(out)

    def _init(self, pkg: _Package, name: str) -> str:
        dots = "." * (name.count(".") + 1)
        lines = [f"# {name}: the resource modules of {pkg.folder} the plan's program names (analysis/sdk_subset.py)\n",
                 f"from {dots} import _utilities\n"]
        lines += ["from ._enums import *\n" if "_enums" in pkg.modules else ""]
        lines += [f"from .{m} import *\n" for m in sorted(self.modules[name])]
        lines += ["from ._inputs import *\n" if "_inputs" in pkg.modules else "",
                  "from . import outputs\n" if "outputs" in pkg.modules else "",
                  "\n\ndef __getattr__(name):\n",
                  f"    raise AttributeError(f\"{name}.{{name}} is not in the plan's subset of the SDK: "
                  f"analysis/sdk_subset.py keeps the classes the program's source names, not one it reaches by a "
                  f"name made at run time\")\n"]
        return "".join(lines)


@functools.cache
def _installation() -> list:
    """What the trimmed copy is made from: each SDK's version and where it is installed (its ``__init__``'s
    path and time: a reinstall rewrites it), and the Python that compiles it. An SDK edited in place by hand
    is not seen: remove the cache folder."""
    inits = [Path(importlib.util.find_spec(sdk).origin) for sdk in SDKS]
    return [{sdk: importlib.metadata.version(sdk) for sdk in SDKS}, [[str(p), p.stat().st_mtime_ns] for p in inits],
            sys.implementation.cache_tag]


def build(seeds: dict[str, set[str]], cache: Path = CACHE) -> Path:
    """The folder holding the trimmed packages for ``seeds``, written on first use: whole or not at all
    (staged, compiled, then renamed; a plan that loses the race to another keeps the other's, which is the
    same)."""
    key = hashlib.sha256(json.dumps([_installation(), {k: sorted(v) for k, v in sorted(seeds.items())},
                                     _SOURCE]).encode()).hexdigest()[:20]
    folder = cache / key
    if folder.is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".new-", dir=cache))
    try:
        staging.chmod(0o755)  # readable by whoever shares the cache, as the SDKs' own folders
        _Subset(seeds).write(staging)
        # bytecode now, as pip compiles the SDKs at install (PYTHONDONTWRITEBYTECODE would leave every import
        # to compile it again); tracebacks name the final folder
        if not compileall.compile_dir(staging, ddir=str(folder), quiet=2):
            raise RuntimeError(f"the trimmed SDK packages in {staging} do not compile")
        (staging / "packages.json").write_text(json.dumps(sorted(_packages(staging))))
        staging.rename(folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _prune(cache, keep=folder)
    return folder


def _prune(cache: Path, keep: Path) -> None:
    """Remove the folders of other SDK installations or names not used for KEEP_DAYS, and staging left
    by a plan that died an hour ago or more."""
    now = time.time()
    for other in cache.iterdir():
        used = other / "packages.json"
        age = now - (used.stat().st_mtime if used.exists() else other.stat().st_mtime)
        if other != keep and other.is_dir() and age > (3600 if other.name.startswith(".new-") else KEEP_DAYS * 86400):
            shutil.rmtree(other, ignore_errors=True)


def _packages(folder: Path) -> Iterable[str]:
    return [".".join(p.parent.relative_to(folder).parts) for p in folder.rglob("__init__.py")]


def install(seeds: dict[str, set[str]] | None = None, cache: Path = CACHE) -> list[str]:
    """Put the trimmed packages in front of the SDKs' for this process; the packages installed. A package
    the process already loaded in full is left as it is."""
    import pulumi_aws  # noqa: F401 - each registers its packages lazily; a trimmed one replaces that entry
    import pulumi_kubernetes  # noqa: F401
    folder = build(sdk_names() if seeds is None else seeds, cache)
    used = folder / "packages.json"
    try:
        os.utime(used)  # in use: not pruned
    except OSError:
        pass  # a cache shared read-only
    installed = []
    for name in json.loads(used.read_text()):
        current = sys.modules.get(name)
        if current is not None and type(current).__name__ != "_LazyModule":  # importlib.util's lazy module
            continue
        spec = importlib.util.spec_from_file_location(
            name, folder.joinpath(*name.split("."), "__init__.py"),
            submodule_search_locations=[str(folder.joinpath(*name.split("."))), str(_folder(name))])
        spec.loader = importlib.util.LazyLoader(spec.loader)  # loaded on first use, as the SDKs' own
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        parent, _, leaf = name.rpartition(".")
        if type(sys.modules.get(parent)).__name__ != "_LazyModule":  # a lazy parent binds it when it loads
            setattr(sys.modules[parent], leaf, module)
        installed.append(name)
    return installed
