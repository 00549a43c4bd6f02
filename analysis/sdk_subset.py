"""The plan's SDKs: pulumi_aws's and pulumi_kubernetes' own code, only the classes the program uses.

A service of pulumi_aws (``ec2``) or a group version of pulumi_kubernetes (``core.v1``) imports, on first
use, the module of every resource it has and two modules of every input and output type of all of them
(``_inputs``, ``outputs``: 2.6 MB of source for ec2, 4.5 MB for core/v1). The offline plan needs a few
dozen of those classes; loading the rest was most of its CPU time (BENCHMARKS.md).

``install()`` points each such package the program names (``analysis/sdk_scan.py``) at a trimmed copy of
it: an ``__init__`` that imports only the resource modules named, from the SDK's own folder, and
``_inputs``, ``outputs`` and ``_enums`` that hold, verbatim and in the SDK's order, every top-level
statement of the SDK's module the kept code names (any identifier in its text, docstrings included: more
is kept than needed), closed over every package it reaches. A package the source hands on whole, or whose
``__init__`` does more than import its modules (``pulumi_aws.config``), is not trimmed. The classes are the
SDK's own, so the program registers the same graph (``tests/test_sdk_subset.py`` compares every stack's
with the full SDKs'); a class reached that the copy lacks raises ``NotInSubset``, and the plan plans again
with the SDKs in full.

The copies are written once per SDK installation, Python and set of names, under
``$MOE_RL_SDK_SUBSET_CACHE`` (default ``~/.cache/moe-rl-sdk-subset``), compiled there as pip compiles the
SDKs; when one is written, those unused for ``KEEP_DAYS`` or beyond the ``KEEP`` most recently used are
removed. Only the installed ``moe-rl plan`` installs them (``analysis.plan.own_process``): a process that
imported a package in full keeps it.
"""

from __future__ import annotations

import ast
import compileall
import contextlib
import hashlib
import importlib.machinery
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

from .sdk_scan import ALL, SDKS, folder as _folder, installation, sdk_names

TYPE_MODULES = ("_enums", "_inputs", "outputs")
CACHE = Path(os.environ.get("MOE_RL_SDK_SUBSET_CACHE") or Path.home() / ".cache" / "moe-rl-sdk-subset")
KEEP_DAYS, KEEP = 30, 4
_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
"""This module's own text: a copy another version of it wrote is not used."""
_PLAIN_INIT = re.compile(r"import builtins as _builtins|import typing|from \.+ import _utilities|"
                         r"from \.\w+ import \*|from \. import outputs")
"""The statements of a generated package ``__init__`` that only import its modules."""
_IDENT = re.compile(r"[A-Za-z_]\w*")
_REFERENCE = {sdk: re.compile(rf"(?<![.\w])_?((?:[a-z][a-z0-9_]*\.){{{depth}}})(?:outputs\.)?([A-Za-z_]\w*)")
              for sdk, depth in SDKS.items()}
"""A name in another package of the same SDK, as its code writes it (``'_iam.PolicyStatementArgs'``,
``'iam.PolicyDocumentVersion'``, ``'_meta.v1.outputs.LabelSelector'``); an example in a docstring
(``aws.iam.Role``) is not one."""


class NotInSubset(AttributeError):
    """A class the trimmed copy of a package lacks (reached by a name made at run time)."""


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
        """Name -> the resource or function module that exports it: its ``__all__``, or else what a star
        import takes from it (helm/v3/helm.py has no ``__all__``)."""
        out = {}
        for path in self.folder.glob("*.py"):
            if path.stem in TYPE_MODULES or path.stem == "__init__":
                continue
            text = path.read_text()
            m = re.search(r"^__all__ = (\[[^\]]*\])", text, re.M)
            names = ast.literal_eval(m[1]) if m else [n for node in ast.parse(text).body for n in _defines(node)
                                                          if not n.startswith("_")]
            out.update((n, path.stem) for n in names)
        return out

    def text(self, module: str, statement: int) -> str:
        first, last, _ = self.statements[module][statement]
        return "".join(self.modules[module][first:last])


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
        self.untrimmed = {p for p, names in seeds.items() if ALL in names}  # handed on whole: loaded in full
        self.work: list[tuple[str, str, bool]] = [(p, n, True) for p, names in seeds.items() if ALL not in names
                                                  for n in sorted(names)]
        while self.work:
            self._keep(*self.work.pop())

    def package(self, name: str) -> _Package | None:
        """``name``'s statements, or None for a package loaded in full (``trimmable``)."""
        if name in self.untrimmed or name.split(".")[0] in self.untrimmed:
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
        """The SDK's own ``__init__`` (imports only: ``trimmable``) without the modules not kept, and a
        ``__getattr__`` naming a class the copy lacks."""
        kept = self.modules[name] | set(pkg.modules)
        lines = [line for line in (pkg.folder / "__init__.py").read_text().splitlines(keepends=True)
                 if not (m := re.fullmatch(r"from \.(\w+) import \*\s*", line)) or m[1] in kept]
        return "".join([f"# {name}: the resource modules of {pkg.folder} the plan's program names "
                        f"(analysis/sdk_subset.py)\n", *lines,
                        "\n\ndef __getattr__(name):\n",
                        "    from analysis.sdk_subset import NotInSubset\n",
                        f"    raise NotInSubset(f\"{name}.{{name}} is not in the plan's trimmed copy of the SDK "
                        f"(analysis/sdk_subset.py)\")\n"])


def build(seeds: dict[str, set[str]], cache: Path = CACHE) -> Path:
    """The folder holding the trimmed packages for ``seeds``, written on first use: whole or not at all
    (staged, compiled, then renamed; a plan that loses the race to another keeps the other's, which is the
    same)."""
    key = hashlib.sha256(json.dumps([installation(), {k: sorted(v) for k, v in sorted(seeds.items())},
                                     _SOURCE]).encode()).hexdigest()[:20]
    folder = cache / key
    if folder.is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".new-", dir=cache))
    try:
        staging.chmod(0o755)  # mkdtemp makes it 0700; what it holds follows the umask, as the SDKs' own folders
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
    """Remove the copies unused for KEEP_DAYS or beyond the KEEP most recently used (``keep`` stays), and
    staging or scan files left an hour ago or more by a plan that died; what another plan removes meanwhile
    is left to it."""
    now, copies = time.time(), []
    for other in cache.iterdir():
        with contextlib.suppress(OSError):
            if other.name.startswith((".new-", "scan.")) and other.name != "scan.json":
                if now - other.stat().st_mtime > 3600:
                    shutil.rmtree(other) if other.is_dir() else other.unlink()
            elif other.is_dir() and other != keep:
                copies.append(((other / "packages.json").stat().st_mtime, other))
    copies.sort(reverse=True)
    for rank, (used, other) in enumerate(copies, start=1):
        if rank >= KEEP or now - used > KEEP_DAYS * 86400:
            shutil.rmtree(other, ignore_errors=True)


def _packages(folder: Path) -> Iterable[str]:
    return [".".join(p.parent.relative_to(folder).parts) for p in folder.rglob("__init__.py")]


def install(seeds: dict[str, set[str]] | None = None, cache: Path = CACHE) -> list[str]:
    """Point the SDKs' packages at their trimmed copies for this process; the packages pointed. A package
    registered lazily (as the SDKs register theirs) keeps its module object, so code that bound it keeps it;
    one the process already loaded in full is left as it is. Nothing changes unless the copy is whole."""
    import pulumi_aws  # noqa: F401 - each registers its packages lazily; a trimmed one replaces that entry
    import pulumi_kubernetes  # noqa: F401
    folder = build(sdk_names(known_path=cache / "scan.json") if seeds is None else seeds, cache)
    used = folder / "packages.json"
    with contextlib.suppress(OSError):  # a cache shared read-only: still used
        os.utime(used)  # in use: not pruned
    pointed = [(name, sys.modules.get(name), folder.joinpath(*name.split(".")))
               for name in json.loads(used.read_text())]
    pointed = [(name, module, trimmed) for name, module, trimmed in pointed if module is None or _lazy(module)]
    for name, module, trimmed in pointed:
        init, locations = trimmed / "__init__.py", [str(trimmed), str(_folder(name))]
        if module is None:  # pulumi_kubernetes' group versions, registered when their group loads
            spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=locations)
            spec.loader = importlib.util.LazyLoader(spec.loader)
            sys.modules[name] = module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            _repoint(module, name, init, locations)
    return [name for name, _, _ in pointed]


def _lazy(module) -> bool:
    """A module importlib.util.LazyLoader registered and nothing has loaded yet."""
    return type(module).__name__ == "_LazyModule"


def _repoint(module, name: str, init: Path, locations: list[str]) -> None:
    """Load a lazily registered package, when it first loads, from ``init`` and search ``locations`` for its
    modules, without loading it now (read through the module's own ``__dict__``: any attribute of a lazy
    module loads it; the lazy loader keeps what changed here, importlib/util.py ``_LazyModule``)."""
    namespace = object.__getattribute__(module, "__dict__")
    loader = importlib.machinery.SourceFileLoader(name, str(init))
    spec = namespace["__spec__"]
    spec.loader, spec.origin, spec.submodule_search_locations = loader, str(init), locations
    namespace.update(__loader__=loader, __file__=str(init), __path__=locations)
