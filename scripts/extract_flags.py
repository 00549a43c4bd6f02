"""Extract the command-line flags of Miles and of Megatron-LM statically from their sources.

Nothing of Miles or Megatron is imported: the sources are parsed with ``ast`` (stdlib only) and the
argparse registrations are read the way argparse would see them.

Sources come from a git directory at a revision (``--git-dir DIR --rev REV``: read with ``git
cat-file``, e.g. the bare copies under ``/work/.mirror``) or from a folder holding the repository
tree (``--source-dir DIR``; then ``--commit`` names the commit it was taken from).

Miles (``miles`` command): every ``add_argument`` / ``reset_arg`` call reached from
``get_miles_extra_args_provider`` in ``miles/utils/arguments.py`` (following calls into the
functions it uses: the SGLang router/passthrough flags, the dashboard flags, the health checkers'
``add_arguments(parser, prefix=...)``), the FSDP backend's dataclass-derived flags, the
``--sglang-`` passthrough rule (prefix and the ServerArgs fields Miles skips), the entry points, the
Megatron pin and the ``--sglang-*`` / Megatron flags Miles' examples, scripts and docs use. The
flags that the generate functions in ``miles/rollout/generate_hub`` add only when chosen with
``--custom-generate-function-path`` are not Miles flags of the plain parser and are left out. The
output has the structure of ``workloads/schemas/miles/v0.1.0-flags.json``.

Megatron (``megatron`` command): every flag ``megatron/training/arguments.py``'s ``parse_args``
registers through ``add_megatron_arguments``: the literal ``add_argument`` calls of its ``_add_*``
functions and the groups ``ArgumentGroupFactory`` builds from config dataclasses (emulating
``megatron/training/argument_utils.py``: type from the annotation, ``store_true``/``store_false``
for bools, ``--no-``/``--disable-`` names, ``argparse_meta`` overrides, excluded fields).

Regenerate the vendored files::

    python scripts/extract_flags.py megatron --git-dir /work/.mirror/radixark+Megatron-LM/repo \\
        --rev 37f91617b95c1ef4f01fc66210e502572ad97fda \\
        --out workloads/schemas/megatron/37f91617b95c-flags.json
    python scripts/extract_flags.py miles --git-dir /work/.mirror/radixark+miles/repo \\
        --rev 49cac7b52507fe6953952c3e1d1ad05a01b144a4 \\
        --megatron-flags workloads/schemas/megatron/37f91617b95c-flags.json \\
        --out workloads/schemas/miles/49cac7b52507-flags.json
    python scripts/extract_flags.py megatron --git-dir /work/.mirror/NVIDIA+Megatron-LM/repo \
        --rev 3714d81d418c9f1bca4594fc35f9e8289f652862 --repository NVIDIA/Megatron-LM \
        --out workloads/schemas/megatron/3714d81d418c-flags.json
    python scripts/extract_flags.py megatron --git-dir /work/.mirror/radixark+Megatron-LM/repo \
        --rev 235952df607b3820716e5e67728a5ab470ca33ae --tag miles-main-20260819 \
        --out workloads/schemas/megatron/235952df607b-flags.json
    python scripts/extract_flags.py slime --git-dir /work/.mirror/THUDM+slime/repo \
        --rev bd217a63f113d74488170914e4d39e68c12e8cf0 --tag v0.2.4 \
        --megatron-flags workloads/schemas/megatron/3714d81d418c-flags.json \
        --out workloads/schemas/slime/bd217a63f113-flags.json
    pip download --no-deps sglang==0.5.19   # and 0.5.9
    python scripts/extract_flags.py sglang --wheel sglang-0.5.19-*.whl --out workloads/schemas/sglang/0.5.19-flags.json

Slime (``slime`` command) has Miles' parser layout under ``slime/``; its output has the same
structure (the framework's own flags under ``miles_flags``). SGLang (``sglang`` command): the
``ServerArgs`` flags of a release wheel, with the wheel's sha256; a list it cannot trust is refused and
nothing written (``sglang_trust_problems``). SGLang 0.5.23 (its fields under
``sglang/srt/arg_groups/fields/``, read too) removed ``--cuda-graph-max-bs``, which the platform passes::

    python scripts/extract_flags.py sglang --wheel sglang-0.5.23-*.whl --removed cuda-graph-max-bs \
        --out workloads/schemas/sglang/0.5.23-flags.json
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

GENERATED_BY = "scripts/extract_flags.py"


# --------------------------------------------------------------------------------------- sources

class Tree:
    """The files of one repository revision."""

    commit: str | None = None

    def read(self, path: str) -> str | None:
        raise NotImplementedError

    def files(self) -> list[str]:
        raise NotImplementedError


class GitTree(Tree):
    def __init__(self, git_dir: Path, rev: str):
        self.git = ["git", "--git-dir", str(git_dir)]
        self.commit = self._run("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
        self._files: list[str] | None = None
        self._cache: dict[str, str | None] = {}

    def _run(self, *args: str) -> str:
        return subprocess.run([*self.git, *args], check=True, capture_output=True, text=True).stdout

    def read(self, path: str) -> str | None:
        if path not in self._cache:
            done = subprocess.run([*self.git, "cat-file", "blob", f"{self.commit}:{path}"],
                                  check=False, capture_output=True)
            self._cache[path] = done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None
        return self._cache[path]

    def files(self) -> list[str]:
        if self._files is None:
            self._files = sorted(self._run("ls-tree", "-r", "--name-only", self.commit).splitlines())
        return self._files


class DirTree(Tree):
    def __init__(self, root: Path, commit: str | None):
        self.root, self.commit = root, commit

    def read(self, path: str) -> str | None:
        p = self.root / path
        return p.read_text("utf-8", "replace") if p.is_file() else None

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")
                      if p.is_file() and ".git" not in p.relative_to(self.root).parts)


class Unresolved(Exception):
    """A value the source does not state literally (environment, call, runtime object)."""


class TypeInference(Exception):
    """Megatron's ArgumentGroupFactory would raise TypeInferenceError here."""


class EnumMember:
    def __init__(self, cls: str, name: str, value):
        self.cls, self.name, self.value = cls, name, value


class Modules:
    """Parsed modules of a tree, import resolution and literal evaluation."""

    def __init__(self, tree: Tree):
        self.tree = tree
        self.read: list[str] = []  # paths read, in order
        self._ast: dict[str, ast.Module | None] = {}

    def module(self, path: str) -> ast.Module | None:
        if path not in self._ast:
            src = self.tree.read(path)
            self._ast[path] = ast.parse(src) if src is not None else None
            if src is not None:
                self.read.append(path)
        return self._ast[path]

    def need(self, path: str) -> ast.Module:
        mod = self.module(path)
        if mod is None:
            raise SystemExit(f"{path} not found at {self.tree.commit}")
        return mod

    # ---- names

    def module_path(self, dotted: str, level: int = 0, here: str = "") -> str | None:
        if level:
            base = here.split("/")[:-level]
            parts = base + (dotted.split(".") if dotted else [])
        else:
            parts = dotted.split(".")
        for cand in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
            if self.tree.read(cand) is not None:
                return cand
        return None

    def lookup(self, path: str, name: str, scope: ast.AST | None = None, _seen=None):
        """(path, node) of the definition of ``name`` seen from module ``path`` (and ``scope``)."""
        _seen = _seen or set()
        if (path, name) in _seen:
            return None
        _seen.add((path, name))
        mod = self.module(path)
        if mod is None:
            return None
        bodies = []
        if scope is not None:
            bodies.append(list(ast.walk(scope)))
        bodies.append(mod.body)
        for body in bodies:
            for node in body:
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return path, node
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                        isinstance(node.targets[0], ast.Name) and node.targets[0].id == name:
                    return path, node.value
                if isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        if (alias.asname or alias.name) == name:
                            target = self.module_path(node.module or "", node.level, path)
                            if target is None:
                                return None
                            return self.lookup(target, alias.name, None, _seen)
        return None

    # ---- enums

    def enum_members(self, path: str, cls: ast.ClassDef) -> list[EnumMember] | None:
        bases = {ast.unparse(b).split(".")[-1] for b in cls.bases}
        if not bases & {"Enum", "StrEnum", "IntEnum", "IntFlag", "Flag"}:
            return None
        out = []
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                n = stmt.targets[0].id
                if n.startswith("_"):
                    continue
                try:
                    v = self.value(stmt.value, path)
                except Unresolved:
                    v = n.lower() if "StrEnum" in bases else n  # auto()
                out.append(EnumMember(cls.name, n, v))
        return out

    def enum(self, node: ast.AST, path: str, scope=None) -> list[EnumMember] | None:
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "signal.Signals":
            return [EnumMember("Signals", s.name, int(s)) for s in signal.Signals]
        if not isinstance(node, ast.Name):
            return None
        found = self.lookup(path, node.id, scope)
        if found and isinstance(found[1], ast.ClassDef):
            return self.enum_members(found[0], found[1])
        return None

    # ---- values

    _BINOPS: ClassVar[dict] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                               ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
                               ast.Pow: operator.pow}

    def value(self, node: ast.AST, path: str, bindings: dict | None = None, scope=None):
        """The value a literal-ish expression has; ``Unresolved`` for anything runtime-dependent."""
        bindings = bindings or {}
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [self.value(e, path, bindings, scope) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {self.value(k, path, bindings, scope): self.value(v, path, bindings, scope)
                    for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINOPS:
            return self._BINOPS[type(node.op)](self.value(node.left, path, bindings, scope),
                                               self.value(node.right, path, bindings, scope))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self.value(node.operand, path, bindings, scope)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.JoinedStr):
            parts = []
            for p in node.values:
                if isinstance(p, ast.Constant):
                    parts.append(p.value)
                elif isinstance(p, ast.FormattedValue) and p.format_spec is None and p.conversion == -1:
                    parts.append(str(self.value(p.value, path, bindings, scope)))
                else:
                    raise Unresolved(ast.unparse(node))
            return "".join(parts)
        if isinstance(node, ast.Name):
            if node.id in bindings:
                return bindings[node.id]
            found = self.lookup(path, node.id, scope)
            if found and not isinstance(found[1], (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                return self.value(found[1], found[0])
            if (found and isinstance(found[1], ast.FunctionDef)) or (not found and node.id in PRIMITIVES):
                return node.id  # a converter (argparse ``type=``): a function or a builtin, by name
            raise Unresolved(node.id)
        if isinstance(node, ast.Attribute):
            if ast.unparse(node.value) == "signal" and node.attr.startswith("SIG"):
                return EnumMember("Signals", node.attr, int(getattr(signal, node.attr)))
            if isinstance(node.value, ast.Name) and node.value.id in bindings \
                    and isinstance(bindings[node.value.id], EnumMember):
                m = bindings[node.value.id]
                if node.attr in ("value", "name"):
                    return getattr(m, node.attr)
            members = self.enum(node.value, path, scope)
            if members:
                for m in members:
                    if m.name == node.attr:
                        return m
            raise Unresolved(ast.unparse(node))
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
            gen = node.generators[0]
            if isinstance(gen.target, ast.Name) and not gen.ifs:
                members = self.enum(gen.iter, path, scope)
                items = members if members is not None else self.value(gen.iter, path, bindings, scope)
                return [self.value(node.elt, path, {**bindings, gen.target.id: it}, scope) for it in items]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("tuple", "list", "sorted") and len(node.args) == 1 and not node.keywords:
            v = self.value(node.args[0], path, bindings, scope)
            return sorted(v) if node.func.id == "sorted" else list(v)
        raise Unresolved(ast.unparse(node))


def jsonable(v):
    if isinstance(v, EnumMember):
        return v.name
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


def dest_of(names: list[str]) -> str:
    long = [n for n in names if n.startswith("--")]
    return (long or names)[0].lstrip("-").replace("-", "_")


def describe_call(mods: Modules, call: ast.Call, path: str, names: list[str], bindings: dict, scope=None) -> dict:
    """argparse's view of one ``add_argument(*names, **kw)`` call."""
    kw = {k.arg: k.value for k in call.keywords if k.arg}

    def val(key, fallback=None):
        if key not in kw:
            return fallback
        try:
            return jsonable(mods.value(kw[key], path, bindings, scope))
        except Unresolved:
            return None

    action = None
    if "action" in kw:
        a = kw["action"]
        action = a.value if isinstance(a, ast.Constant) else ast.unparse(a).split(".")[-1]
    default = {"store_true": False, "store_false": True}.get(action) if "default" not in kw else val("default")
    typ = None
    if "type" in kw:
        t = kw["type"]
        typ = t.id if isinstance(t, ast.Name) else ast.unparse(t)
    choices = val("choices")
    return {"type": typ, "default": default, "choices": choices, "nargs": val("nargs"), "action": action,
            "dest": val("dest") if "dest" in kw else dest_of(names)}


def call_names(mods: Modules, call: ast.Call, path: str, bindings: dict, skip: int = 0) -> list[str] | None:
    names = []
    for a in call.args[skip:]:
        if isinstance(a, ast.Starred):
            return None
        try:
            v = mods.value(a, path, bindings)
        except Unresolved:
            return None
        if not isinstance(v, str):
            return None
        names.append(v)
    return names if names and all(n.startswith("-") for n in names) else None


def add(out: dict, names: list[str], desc: dict, where: str, conflicts: list[str]) -> None:
    for n in names:
        if n in out:
            conflicts.append(f"{n} registered twice ({where})")
            continue
        out[n] = dict(desc)


# ------------------------------------------------------------------------------------------ Miles

FRAMEWORKS = {"miles": "radixark/miles", "slime": "THUDM/slime"}
"""Miles forked from Slime and kept its parser layout: the same files under each package name."""


def parser_files(package: str) -> dict[str, str]:
    """The argument files of Miles or Slime (``package``), by role."""
    return {"args": f"{package}/utils/arguments.py", "sglang": f"{package}/backends/sglang_utils/arguments.py",
            "megatron": f"{package}/backends/megatron_utils/arguments.py",
            "fsdp": f"{package}/backends/fsdp_utils/arguments.py"}


FLAG_TOKEN = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
EXAMPLE_DIRS = ("examples/", "scripts/", "docs/")


class MilesWalker:
    def __init__(self, mods: Modules):
        self.mods = mods
        self.flags: dict[str, dict] = {}
        self.conflicts: list[str] = []
        self.seen: set[tuple[str, str]] = set()

    def walk_function(self, path: str, fn: ast.AST, bindings: dict) -> None:
        key = (path, getattr(fn, "name", ""), tuple(sorted(bindings.items())))
        if key in self.seen:
            return
        self.seen.add(key)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "add_argument":
                names = call_names(self.mods, node, path, bindings)
                if names:
                    self.register(names, describe_call(self.mods, node, path, names, bindings), path)
            elif isinstance(f, ast.Name) and f.id == "reset_arg":
                # reset_arg(parser, "--x", **kw): a new flag where the parser (FSDP backend) lacks it
                names = call_names(self.mods, node, path, bindings, skip=1)
                if names:
                    self.register(names, describe_call(self.mods, node, path, names, bindings), path)
            elif isinstance(f, ast.Name):
                found = self.mods.lookup(path, f.id)
                if found and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.walk_function(found[0], found[1], {})
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                # Class.add_arguments(parser, prefix="...") of an imported class
                found = self.mods.lookup(path, f.value.id)
                if found and isinstance(found[1], ast.ClassDef):
                    meth = next((m for m in found[1].body if isinstance(m, ast.FunctionDef) and m.name == f.attr),
                                None)
                    if meth is not None:
                        try:
                            bound = {k.arg: self.mods.value(k.value, path) for k in node.keywords if k.arg}
                        except Unresolved:
                            continue
                        self.walk_function(found[0], meth, bound)

    def register(self, names: list[str], desc: dict, path: str) -> None:
        desc.pop("dest")
        if self.flags.get(names[0]) == desc:
            return  # the same reset_arg reached twice
        add(self.flags, names, desc, path, self.conflicts)


def fsdp_flags(mods: Modules, package: str) -> dict:
    """``build_fsdp_parser``: its literal flags plus one flag per ``FSDPArgs`` dataclass field (none
    where the revision has no FSDP backend, as Slime v0.2.4)."""
    fsdp_path = parser_files(package)["fsdp"]
    if mods.tree.read(fsdp_path) is None:
        return {}
    mod = mods.need(fsdp_path)
    fn = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "build_fsdp_parser")
    out: dict[str, dict] = {}
    skipped = set()
    cls_name = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and ast.unparse(node.left) == "f.name" and \
                isinstance(node.comparators[0], ast.Constant):
            skipped.add(node.comparators[0].value)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "dataclasses.fields":
            cls_name = node.args[0].id
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = call_names(mods, node, fsdp_path, {})
            if names:
                d = describe_call(mods, node, fsdp_path, names, {})
                d.pop("dest")
                for n in names:
                    out[n] = d
    cls = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if name in skipped:
            continue
        ann = stmt.annotation
        # ``T | None`` / ``Optional[T]``: the first non-None member
        if isinstance(ann, ast.BinOp):
            members = [m for m in (ann.left, ann.right) if not (isinstance(m, ast.Constant) and m.value is None)]
            ann = members[0]
        elif isinstance(ann, ast.Subscript) and ast.unparse(ann.value) == "Optional":
            ann = ann.slice
        typ = ast.unparse(ann)
        try:
            default = mods.value(stmt.value, fsdp_path) if stmt.value is not None else None
        except Unresolved:
            default = None
        flag = "--" + name.replace("_", "-")
        if typ == "bool":
            out[flag] = {"type": None, "default": default, "choices": None, "nargs": None,
                         "action": "BooleanOptionalAction"}
        else:
            out[flag] = {"type": typ, "default": default, "choices": None, "nargs": None, "action": None}
    return out


def sglang_passthrough(mods: Modules, package: str) -> tuple[str, list[str]]:
    """(prefix, skipped ServerArgs fields) of the non-inheriting ``_add_prefixed_server_args`` call."""
    sglang_path = parser_files(package)["sglang"]
    mod = mods.need(sglang_path)
    for node in ast.walk(mod):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "_add_prefixed_server_args":
            kw = {k.arg: k.value for k in node.keywords}
            if mods.value(kw["inherit"], sglang_path) is False:
                prefix = mods.value(kw["flag_prefix"], sglang_path)
                return f"--{prefix}-", mods.value(kw["skipped_args"], sglang_path)
    # Slime v0.2.4: ``add_sglang_arguments`` wraps ``parser.add_argument`` to prefix every ServerArgs
    # flag with ``--sglang-`` and drops the dests listed in its local ``skipped_args``.
    for node in ast.walk(mod):
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["skipped_args"]:
            return "--sglang-", mods.value(node.value, sglang_path)
    raise SystemExit(f"no _add_prefixed_server_args(..., inherit=False) nor skipped_args in {sglang_path}")


def entry_points(mods: Modules, package: str) -> list[str]:
    """Top-level scripts that build their arguments with ``<package>.utils.arguments.parse_args``."""
    out = []
    for f in mods.tree.files():
        if "/" in f or not f.endswith(".py"):
            continue
        mod = mods.module(f)
        if mod and any(isinstance(n, ast.ImportFrom) and n.module == f"{package}.utils.arguments"
                       and any(a.name == "parse_args" for a in n.names) for n in mod.body):
            out.append(f)
    return out


def megatron_pin(mods: Modules) -> dict:
    """The Megatron-LM the release image builds: ``release-lock.json``, else ``docker/Dockerfile``."""
    lock = mods.tree.read("release-lock.json")
    if lock is not None:
        mods.read.append("release-lock.json")
        d = json.loads(lock)
        return {"branch": d["megatron_branch"], "commit": d["megatron_commit"], "from": "release-lock.json",
                "repo": d["megatron_repo"]}
    src = mods.tree.read("docker/Dockerfile")
    if src is None:
        return {"branch": None, "commit": None, "from": None, "repo": None}
    mods.read.append("docker/Dockerfile")
    args = dict(re.findall(r"^ARG (MEGATRON_\w+)=\"?([^\"\n]*)\"?$", src, re.MULTILINE))
    return {"branch": args.get("MEGATRON_BRANCH") or None, "commit": args.get("MEGATRON_COMMIT") or None,
            "from": "docker/Dockerfile", "repo": args.get("MEGATRON_REPO") or None}


def example_tokens(tree: Tree) -> set[str]:
    out: set[str] = set()
    for f in tree.files():
        if f.startswith(EXAMPLE_DIRS):
            src = tree.read(f)
            if src is not None:
                out.update(FLAG_TOKEN.findall(src))
    return out


def extract_miles(tree: Tree, repository: str, tag: str | None, megatron_flags: set[str] | None,
                  package: str = "miles") -> dict:
    """Miles' flags, or Slime's (``package="slime"``: same parser layout, same output structure)."""
    mods = Modules(tree)
    files = parser_files(package)
    mod = mods.need(files["args"])
    provider = next(n for n in mod.body if isinstance(n, ast.FunctionDef)
                    and n.name == f"get_{package}_extra_args_provider")
    walker = MilesWalker(mods)
    walker.walk_function(files["args"], provider, {})
    if walker.conflicts:
        raise SystemExit("argparse would reject: " + "; ".join(walker.conflicts))
    flags = walker.flags
    negations = sorted("--no-" + f[2:] for f, d in flags.items() if d["action"] == "BooleanOptionalAction")
    prefix, skipped = sglang_passthrough(mods, package)
    mods.module(files["megatron"])  # calls Megatron's parse_args; read for the record
    fsdp = fsdp_flags(mods, package)
    entries = entry_points(mods, package)
    pin = megatron_pin(mods)
    miles = set(flags) | set(negations)
    no_prefix = "--no-" + prefix[2:]
    miles_sglang = sorted(f for f in miles if f.startswith((prefix, no_prefix)))
    tokens = example_tokens(tree)
    used_sglang = sorted(t for t in tokens if t.startswith(prefix) and t not in miles)
    used_megatron = sorted(t for t in tokens if megatron_flags is not None and t in megatron_flags
                           and t not in miles and not t.startswith(prefix))
    # the parser sources, the pin, and the entry points (other top-level modules were only looked at)
    paths = [p for p in mods.read if "/" in p or p in entries or p == "release-lock.json"]
    return {
        "origin": {"repository": repository, "tag": tag, "commit": tree.commit, "paths": paths},
        "generated_by": GENERATED_BY,
        "miles_flags": {f: flags[f] for f in sorted(flags)},
        "boolean_optional_negations": negations,
        "entry_points": entries,
        "sglang_passthrough": {"prefix": prefix, "skipped": skipped, "miles_defined_sglang_flags": miles_sglang,
                               "flags_used_in_miles_examples": used_sglang},
        "megatron": {"pinned": pin, "flags_used_in_miles_examples": used_megatron},
        "fsdp_backend_flags": {"flags": {f: fsdp[f] for f in sorted(fsdp)}},
    }


# --------------------------------------------------------------------------------------- Megatron

MEGATRON_PARSER = "megatron/training/arguments.py"
PRIMITIVES = {"int", "float", "str", "bool"}


class FactoryEmulator:
    """``megatron/training/argument_utils.py`` ``ArgumentGroupFactory``, read statically."""

    def __init__(self, mods: Modules):
        self.mods = mods

    def fields(self, path: str, cls: ast.ClassDef) -> list[tuple[str, ast.AnnAssign]]:
        """Dataclass fields, the first base class's first (an override keeps its place)."""
        out: dict[str, tuple[str, ast.AnnAssign]] = {}
        for base in cls.bases[:1]:
            if isinstance(base, ast.Name):
                found = self.mods.lookup(path, base.id)
                if found and isinstance(found[1], ast.ClassDef):
                    for name, item in self.fields(found[0], found[1]):
                        out[name] = item
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and "ClassVar" not in ast.unparse(stmt.annotation):
                out[stmt.target.id] = (path, stmt)
        return list(out.items())

    def _union(self, node: ast.AST) -> list[ast.AST] | None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return (self._union(node.left) or [node.left]) + (self._union(node.right) or [node.right])
        if isinstance(node, ast.Subscript):
            base = ast.unparse(node.value).split(".")[-1]
            if base == "Optional":
                return (self._union(node.slice) or [node.slice]) + [ast.Constant(None)]
            if base == "Union":
                elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                return [x for e in elts for x in (self._union(e) or [e])]
        return None

    def extract_type(self, ann: ast.AST, path: str) -> dict:
        union = self._union(ann)
        if union is not None:
            if isinstance(union[1], ast.Constant) and union[1].value is None:
                return self.extract_type(union[0], path)
            raise TypeInference(f"Unions not supported by argparse: {ast.unparse(ann)}")
        members = self.mods.enum(ann, path)
        if members is not None:
            return {"type": members[0].cls if members else ast.unparse(ann),
                    "choices": [m.name for m in members]}
        if isinstance(ann, ast.Subscript):
            base = ast.unparse(ann.value).split(".")[-1]
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            if base in ("list", "List"):
                if len(elts) != 1:
                    raise TypeInference(f"Multi-type lists not supported by argparse: {ast.unparse(ann)}")
                return {**self.extract_type(elts[0], path), "nargs": "+"}
            if base == "Literal":
                choices = [self.mods.value(e, path) for e in elts]
                return {"type": type(choices[0]).__name__, "choices": choices}
            raise TypeInference(f"Unsupported type: {ast.unparse(ann)}")
        text = ast.unparse(ann)
        if text in ("Callable", "ContextManager", "Any") or text.startswith("typing."):
            raise TypeInference(f"Unsupported type: {text}")  # typing aliases have an origin
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return {"type": ann.value}
        return {"type": text}

    def flags(self, cls_path: str, cls: ast.ClassDef, exclude: set[str]) -> list[tuple[list[str], dict]]:
        out = []
        for name, (path, stmt) in self.fields(cls_path, cls):
            if name in exclude:
                continue
            default, meta = None, None
            v = stmt.value
            if isinstance(v, ast.Call) and ast.unparse(v.func).split(".")[-1] == "field":
                kw = {k.arg: k.value for k in v.keywords}
                if "init" in kw and self.mods.value(kw["init"], path) is False:
                    continue
                if "default" in kw:
                    default = self._default(kw["default"], path)
                elif "default_factory" in kw:
                    fac = kw["default_factory"]
                    if isinstance(fac, ast.Lambda):
                        default = self._default(fac.body, path)
                    else:
                        default = {"list": [], "dict": {}, "set": [], "tuple": []}.get(ast.unparse(fac))
                if "metadata" in kw:
                    meta = self.mods.value(kw["metadata"], path).get("argparse_meta")
                has_default = "default" in kw
            else:
                default = self._default(v, path) if v is not None else None
                has_default = v is not None
            kwargs = {"arg_names": ["--" + name.replace("_", "-")], "dest": name, "default": default}
            try:
                kwargs.update(self.extract_type(stmt.annotation, path))
                if kwargs["type"] == "bool":
                    # ``attribute.default == False``; a default_factory leaves default MISSING
                    store_true = has_default and default == False
                    kwargs["action"] = "store_true" if store_true else "store_false"
                    kwargs.pop("type")
                    if not store_true:
                        kwargs["arg_names"] = ["--no-" + name.replace("_", "-"),
                                               "--disable-" + name.replace("_", "-")]
            except TypeInference:
                if meta is None:
                    raise SystemExit(f"{cls.name}.{name}: ArgumentGroupFactory cannot infer "
                                     f"{ast.unparse(stmt.annotation)} and there is no argparse_meta")
            if meta:
                kwargs.update(jsonable(meta))
            names = kwargs.pop("arg_names")
            out.append((names, {"type": kwargs.get("type"), "default": jsonable(kwargs.get("default")),
                                "choices": kwargs.get("choices"), "nargs": kwargs.get("nargs"),
                                "action": kwargs.get("action"), "dest": kwargs.get("dest")}))
        return out

    def _default(self, node: ast.AST, path: str):
        try:
            return jsonable(self.mods.value(node, path))
        except Unresolved:
            return None


def extract_megatron(tree: Tree, repository: str, tag: str | None) -> dict:
    mods = Modules(tree)
    mod = mods.need(MEGATRON_PARSER)
    mods.need("megatron/training/argument_utils.py")
    funcs = {n.name: n for n in mod.body if isinstance(n, ast.FunctionDef)}
    order = [c.func.id for c in ast.walk(funcs["add_megatron_arguments"])
             if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in funcs]
    parse_args = funcs["parse_args"]
    assert any(isinstance(c, ast.Call) and ast.unparse(c.func) == "add_megatron_arguments"
               for c in ast.walk(parse_args)), "parse_args no longer calls add_megatron_arguments"
    emulator = FactoryEmulator(mods)
    flags: dict[str, dict] = {}
    conditional: dict[str, str] = {}
    groups: dict[str, str] = {}
    conflicts: list[str] = []
    for fname in order:
        fn = funcs[fname]
        parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}
        factories: dict[str, tuple[str, ast.ClassDef, set[str]]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    ast.unparse(node.value.func) == "ArgumentGroupFactory":
                call = node.value
                found = mods.lookup(MEGATRON_PARSER, call.args[0].id, fn)
                exclude = set()
                for k in call.keywords:
                    if k.arg == "exclude":
                        exclude = set(mods.value(k.value, MEGATRON_PARSER, scope=fn))
                factories[node.targets[0].id] = (found[0], found[1], exclude)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr == "build_group" and isinstance(node.func.value, ast.Name):
                path, cls, exclude = factories[node.func.value.id]
                for names, desc in emulator.flags(path, cls, exclude):
                    add(flags, names, desc, f"{fname}: {cls.name}", conflicts)
                    for n in names:
                        groups[n] = f"{path}:{cls.name}"
            elif node.func.attr == "add_argument":
                names = call_names(mods, node, MEGATRON_PARSER, {})
                if not names:
                    continue
                add(flags, names, describe_call(mods, node, MEGATRON_PARSER, names, {}, fn), fname, conflicts)
                up = parents.get(node)
                while up is not None and up is not fn:
                    if isinstance(up, ast.If):
                        for n in names:
                            conditional[n] = f"{fname}: only if {ast.unparse(up.test)}"
                        break
                    up = parents.get(up)
                for n in names:
                    groups[n] = f"{MEGATRON_PARSER}:{fname}"
    if conflicts:
        raise SystemExit("argparse would reject: " + "; ".join(conflicts))
    return {
        "origin": {"repository": repository, "tag": tag, "commit": tree.commit, "paths": mods.read},
        "generated_by": GENERATED_BY,
        "flags": {f: flags[f] for f in sorted(flags)},
        "conditional": {f: conditional[f] for f in sorted(conditional)},
        "registered_by": {f: groups[f] for f in sorted(groups)},
    }


# ------------------------------------------------------------------------------------------ SGLang

def extract_sglang(wheel: Path) -> dict:
    """Every ``ServerArgs`` CLI flag -> its dest, and the literal choices, of one SGLang release wheel
    (read with ``workloads.checks.flags.parse_server_args``; the wheel's sha256 is recorded)."""
    import hashlib
    import zipfile
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from workloads.checks.flags import SERVER_ARGS, parse_server_args, wheel_reader
    read: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        reader = wheel_reader(z)

        def recorded(path: str) -> str | None:
            text = reader(path)
            if text is not None:
                read.add(path)
            return text
        parsed = parse_server_args(z.read(SERVER_ARGS).decode(), recorded)
    version = wheel.name.split("-")[1]
    origin = {"distribution": "sglang", "version": version, "wheel": wheel.name,
              "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "path": SERVER_ARGS}
    if read:  # 0.5.23 on: the namespace classes' modules and the constants they import
        origin["also_read"] = sorted(read)
    return {"origin": origin, "generated_by": GENERATED_BY, "flags": dict(sorted(parsed.flags.items())),
            "choices": dict(sorted(parsed.choices.items()))}


# ------------------------------------------------------------------------------- trusting a result

FLOOR_SHARE = 0.5
"""A release with fewer flags than this share of the fewest any other profile's release has is a parse
that missed where the release declares its flags (SGLang 0.5.23 moved the ``ServerArgs`` fields to
``sglang/srt/arg_groups/fields/``: 9 flags read before the parser followed them), not a release that
dropped them. Half: the profiles'
releases hold 341 (0.5.9) to 516 (0.5.19) flags, and the oldest passes against the newer ones."""


def known_sglang(but: str) -> dict[str, dict[str, str]]:
    """The vendored flag list of each software profile's SGLang release other than ``but``, by version."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from software import profiles
    from workloads.checks.flags import SCHEMAS
    return {p.sglang.version: json.loads((SCHEMAS / p.sglang.flags).read_text())["flags"]
            for p in profiles().values() if p.sglang.version != but}


def sglang_flags_in_use() -> set[str]:
    """The ``ServerArgs`` flags the platform passes: the ``--sglang-*`` flags (prefix removed) of the
    command line of every stack's own run, and of every run file under ``runs/`` on each stack that
    admits it. A stack or run the gate refuses (one naming the release being extracted) is left out."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from stackconfig.files import STACKS_DIR, stack_names
    from workloads.checks import gate
    from workloads.checks.flags import argv_pairs, profile_flags
    from workloads.checks.runs import load_run, run_config
    from workloads.derive.argv import miles_argv
    from workloads.schema.settings import Submission
    runs = sorted((STACKS_DIR.parent / "runs").glob("*.yaml"))
    used: set[str] = set()
    for stack in stack_names():
        try:
            cfg = gate.read(stack)
        except ValueError as err:
            print(f"stack {stack} left out of the flags in use: {err}", file=sys.stderr)
            continue
        seen = [cfg]
        if cfg.workloads.submit is Submission.RUNS:
            seen = []
            for path in runs:
                try:
                    seen.append(run_config(cfg, load_run(path)))
                except ValueError:
                    continue  # another stack's team, or a run this stack never places
        for c in seen:
            prefix = profile_flags(c.workloads.run.software).sglang_prefix
            used |= {"--" + f[len(prefix):] for f, _ in argv_pairs(miles_argv(c)) if f.startswith(prefix)}
    return used


def sglang_trust_problems(version: str, flags: dict[str, str], known: dict[str, dict[str, str]],
                          in_use: set[str], removed: set[str] = frozenset()) -> list[str]:
    """Why SGLang ``version``'s extracted ``flags`` cannot be trusted, judged against the ``known``
    releases' lists: fewer flags than ``FLOOR_SHARE`` of the fewest any of them has, or a flag the
    platform passes (``in_use``) that every known release has and this one lacks, unless the maintainer
    read the release and names it ``removed`` (a ``removed`` flag the list has is a mistake)."""
    out = [f"SGLang {version}: --removed {f}, but the release has it" for f in sorted(removed & set(flags))]
    if known:
        fewest = min(known, key=lambda v: len(known[v]))
        floor = int(len(known[fewest]) * FLOOR_SHARE)
        if len(flags) < floor:
            out.append(f"SGLang {version}: {len(flags)} flags read, fewer than {floor} ({FLOOR_SHARE:.0%} of "
                       f"{fewest}'s {len(known[fewest])}): the release declares its flags where "
                       f"workloads/checks/flags.py parse_server_args does not read; extend it")
    lacking = sorted(f for f in in_use if f not in set(flags) | removed and all(f in k for k in known.values()))
    if lacking:
        out.append(f"SGLang {version}: no {', '.join(lacking)}, which the platform passes and "
                   f"{', '.join(sorted(known, key=lambda v: tuple(map(int, v.split('.')))))} all have; read the "
                   f"release's server_args and sglang/srt/arg_groups/fields/ before trusting this (a flag the release "
                   f"removed: --removed NAME)")
    return out


# -------------------------------------------------------------------------------------------- CLI

def write(doc: dict, out: Path | None) -> None:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"  # as scripts/vendor_schemas.py
    if out is None:
        sys.stdout.write(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)


def tree_from(args) -> Tree:
    if args.git_dir:
        return GitTree(args.git_dir, args.rev)
    return DirTree(args.source_dir, args.commit)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    wheel = sub.add_parser("sglang", help="SGLang's ServerArgs flags, read from a release wheel")
    wheel.add_argument("--wheel", type=Path, required=True, help="sglang-<version>-*.whl (pip download --no-deps)")
    wheel.add_argument("--out", type=Path, help="output file (default: stdout)")
    wheel.add_argument("--removed", action="append", default=[], metavar="NAME",
                       type=lambda name: "--" + name.lstrip("-"),
                       help="a flag the platform passes that this release no longer has, found so by reading it, "
                            "without its dashes (cuda-graph-max-bs); recorded in the list's origin; repeatable")
    for name, repo in (*FRAMEWORKS.items(), ("megatron", "radixark/Megatron-LM")):
        p = sub.add_parser(name)
        src = p.add_mutually_exclusive_group(required=True)
        src.add_argument("--git-dir", type=Path, help="a git directory (bare is fine)")
        src.add_argument("--source-dir", type=Path, help="a folder holding the repository's files")
        p.add_argument("--rev", default="HEAD", help="revision to read from --git-dir")
        p.add_argument("--commit", help="the commit --source-dir was taken from (recorded)")
        p.add_argument("--repository", default=repo)
        p.add_argument("--tag", default=None, help="the tag the revision carries, if any (recorded)")
        p.add_argument("--out", type=Path, help="output file (default: stdout)")
        if name in FRAMEWORKS:
            p.add_argument("--megatron-flags", type=Path,
                           help="a Megatron flag file (the megatron command's output) used to pick the "
                                "Megatron flags Miles' examples use; without it that list is empty")
    args = parser.parse_args(argv)
    if args.what == "sglang":
        doc = extract_sglang(args.wheel)
        version = doc["origin"]["version"]
        problems = sglang_trust_problems(version, doc["flags"], known_sglang(but=version), sglang_flags_in_use(),
                                         set(args.removed))
        if problems:
            raise SystemExit("refused, nothing written: " + "; ".join(problems))
        if args.removed:
            doc["origin"]["removed"] = sorted(args.removed)
        write(doc, args.out)
        return
    tree = tree_from(args)
    if args.what == "megatron":
        doc = extract_megatron(tree, args.repository, args.tag)
    else:
        mflags = set(json.loads(args.megatron_flags.read_text())["flags"]) if args.megatron_flags else None
        doc = extract_miles(tree, args.repository, args.tag, mflags, package=args.what)
    write(doc, args.out)


if __name__ == "__main__":
    main()
