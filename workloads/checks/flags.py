"""Which command-line flags exist, read statically from the pinned releases (nothing imported), and
the check every generated argv goes through (``argv_problems``) against its software profile's lists.

- SGLang: ``sglang/srt/server_args.py`` read out of the release wheel and parsed with ``ast``.
  SGLang 0.5.17 derives most flags from the ``ServerArgs`` dataclass (``A[T, "help"]`` /
  ``A[T, Arg(...)]`` annotations: ``--<field-name-with-dashes>``, ``cli_name`` and ``aliases``,
  nothing for ``no_cli=True`` or for fields without help/Arg) and registers the rest with literal
  ``parser.add_argument("--x", ...)`` calls; both styles are read, with the literal ``choices``.
  SGLang 0.5.23 declares those fields on namespace classes under ``sglang/srt/arg_groups/fields/``
  (``NAMESPACES``), read from the same wheel.
- Miles: the flag list of the pinned release (``workloads/schemas/miles/<tag>-flags.json``, vendored with its origin):
  Miles' own flags, the Megatron flags its examples use, and the ``--sglang-`` passthrough rule
  (every ServerArgs flag as ``--sglang-<flag>`` except the fields Miles sets itself).
"""

from __future__ import annotations

import ast
import json
import zipfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Callable

from software import Profile, profile

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"

SERVER_ARGS = "sglang/srt/server_args.py"


@dataclass
class SGLangFlags:
    flags: dict[str, str] = field(default_factory=dict)
    """Every CLI flag -> the ServerArgs field (dest) it sets."""
    choices: dict[str, list] = field(default_factory=dict)
    """Literal choices per dest, where the source states them."""


def _literal_list(node: ast.AST, constants: dict[str, list]) -> list | None:
    if isinstance(node, (ast.List, ast.Tuple)):
        try:
            return [ast.literal_eval(e) for e in node.elts]
        except ValueError:
            return None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _annotation_meta(ann: ast.AST) -> tuple[ast.AST | None, ast.AST | None]:
    """(inner type, first Arg(...) call or help string) of ``A[T, ...]`` / ``Annotated[T, ...]``."""
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)
            and ann.value.id in ("A", "Annotated") and isinstance(ann.slice, ast.Tuple)):
        return None, None
    inner, *meta = ann.slice.elts
    for m in meta:
        if isinstance(m, ast.Call) and isinstance(m.func, ast.Name) and m.func.id == "Arg":
            return inner, m
        if isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not (
                isinstance(m, ast.Constant) and not isinstance(m.value, str)):
            return inner, m
    return inner, None


def _literal_choices(inner: ast.AST) -> list | None:
    node = inner
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        node = node.slice
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [ast.literal_eval(e) for e in elts]
    return None


NAMESPACES = "_INPUT_NAMESPACES"
"""SGLang 0.5.23 ``server_args.py``: the list of namespace classes (imported from
``sglang/srt/arg_groups/fields/``) whose fields ``ServerArgs`` takes, and ``add_cli_args`` registers
through ``add_cli_args_from_dataclass(parser, ServerArgs)`` (sglang 0.5.23 ``server_args.py:522, 353``,
``arg_groups/fields/__init__.py:18`` ``collect_input_fields``, ``arg_groups/arg_utils.py:298``)."""

Read = Callable[[str], "str | None"]
"""Another file of the release by its path in the wheel (``sglang/srt/...py``); None where it has none."""


def _module_path(module: str) -> list[str]:
    base = module.replace(".", "/")
    return [f"{base}.py", f"{base}/__init__.py"]


def _read_module(module: str, read: Read) -> ast.Module | None:
    for path in _module_path(module):
        if (text := read(path)) is not None:
            return ast.parse(text)
    return None


def _constants(tree: ast.Module, read: Read | None) -> dict[str, list]:
    """The module's literal lists, and those it imports by name from another SGLang module where a
    ``choices=`` or ``aliases=`` names one (0.5.23: ``sglang/srt/arg_groups/choices.py``)."""
    out = {t.id: v for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
           and isinstance(t := n.targets[0], ast.Name) and (v := _literal_list(n.value, {})) is not None}
    named = {k.value.id for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg in ("choices", "aliases")
             and isinstance(k.value, ast.Name) and k.value.id not in out}
    for node in tree.body:
        wanted = [a for a in getattr(node, "names", []) if (a.asname or a.name) in named]
        if read and wanted and isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang."):
            source = _read_module(node.module, read)
            found = _constants(source, None) if source else {}
            out |= {a.asname or a.name: found[a.name] for a in wanted if a.name in found}
    return out


def _namespace_classes(tree: ast.Module, read: Read | None) -> list[tuple[ast.ClassDef, dict[str, list]]]:
    """The namespace classes of ``NAMESPACES`` (none before 0.5.23), each with its module's constants."""
    names = next((n.value.elts for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                  and isinstance(n.targets[0], ast.Name) and n.targets[0].id == NAMESPACES
                  and isinstance(n.value, ast.List)), [])
    if names and read is None:
        raise ValueError(f"server_args.py declares its fields in {NAMESPACES}: the release's other files are needed")
    modules = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    out = []
    for name in names:
        source = _read_module(modules.get(getattr(name, "id", None), ""), read) if isinstance(name, ast.Name) else None
        cls = next((n for n in source.body if isinstance(n, ast.ClassDef) and n.name == name.id), None) if source else None
        if cls is None:
            raise ValueError(f"{NAMESPACES}: {ast.unparse(name)} is not a class of a module the wheel holds")
        out.append((cls, _constants(source, read)))
    return out


def _field_flags(cls: ast.ClassDef, constants: dict[str, list], out: SGLangFlags) -> None:
    """The flags of ``cls``'s ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields into ``out``."""
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        dest = stmt.target.id
        inner, meta = _annotation_meta(stmt.annotation)
        if meta is None:
            continue
        names = ["--" + dest.replace("_", "-")]
        choices = _literal_choices(inner)
        if isinstance(meta, ast.Call):
            kw = {k.arg: k.value for k in meta.keywords}
            if "no_cli" in kw and ast.literal_eval(kw["no_cli"]) is True:
                continue
            if "cli_name" in kw:
                names = [ast.literal_eval(kw["cli_name"])]
            if "aliases" in kw:
                names += _literal_list(kw["aliases"], constants) or []
            if "choices" in kw:
                choices = _literal_list(kw["choices"], constants) or choices
        for n in names:
            out.flags[n] = dest
        if choices is not None:
            out.choices[dest] = choices


def parse_server_args(source: str, read: Read | None = None) -> SGLangFlags:
    """The flags of ``sglang/srt/server_args.py`` (``source``): ``ServerArgs``' fields, those of the
    namespace classes it collects (0.5.23 on: read with ``read``), and ``add_cli_args``' literal calls."""
    tree = ast.parse(source)
    constants = _constants(tree, read)
    out = SGLangFlags()
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    for namespace, their_constants in _namespace_classes(tree, read):
        _field_flags(namespace, their_constants, out)
    _field_flags(cls, constants, out)
    add_cli = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    for call in ast.walk(add_cli):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            kw = {k.arg: k.value for k in call.keywords}
            dest = ast.literal_eval(kw["dest"]) if "dest" in kw else names[0].lstrip("-").replace("-", "_")
            for n in names:
                out.flags[n] = dest
            if "choices" in kw and (c := _literal_list(kw["choices"], constants)) is not None:
                out.choices[dest] = c
    return out


def wheel_reader(z: zipfile.ZipFile) -> Read:
    """``Read`` over an open wheel."""
    held = set(z.namelist())
    return lambda path: z.read(path).decode() if path in held else None


def sglang_flags_from_wheel(wheel: Path) -> SGLangFlags:
    with zipfile.ZipFile(wheel) as z:
        return parse_server_args(z.read(SERVER_ARGS).decode(), wheel_reader(z))


@dataclass
class MilesFlags:
    miles: set[str]
    megatron_examples: set[str]
    sglang_prefix: str
    sglang_skipped: set[str]
    """ServerArgs dests Miles sets itself (not registered as --sglang-*)."""
    miles_defined_sglang: set[str]
    fsdp_only: set[str]


def miles_flags(path: Path) -> MilesFlags:
    d = json.loads(path.read_text())
    passthrough = d["sglang_passthrough"]
    return MilesFlags(miles=set(d["miles_flags"]) | set(d["boolean_optional_negations"]),
                      megatron_examples=set(d["megatron"]["flags_used_in_miles_examples"]),
                      sglang_prefix=passthrough["prefix"], sglang_skipped=set(passthrough["skipped"]),
                      miles_defined_sglang=set(passthrough["miles_defined_sglang_flags"]),
                      fsdp_only=set(d["fsdp_backend_flags"]["flags"]))


def argv_pairs(argv: list[str]) -> list[tuple[str, list[str]]]:
    """(flag, values) in order; values are the tokens up to the next ``--flag``. ``--flag=value`` is
    ``--flag`` with ``value``, as argparse reads it (CPython 3.11.7 Lib/argparse.py:2247-2249,
    ``_parse_optional``: the option string before the first ``=``)."""
    out: list[tuple[str, list[str]]] = []
    for tok in argv:
        if tok.startswith("--") and "=" in tok:
            flag, _, value = tok.partition("=")
            out.append((flag, [value]))
        elif tok.startswith("--"):
            out.append((tok, []))
        elif out:
            out[-1][1].append(tok)
    return out


def miles_flags_file(schemas: Path, commit: str) -> Path:
    """The vendored flag list of Miles at ``commit`` (``scripts/extract_flags.py``)."""
    return schemas / "miles" / f"{commit[:12]}-flags.json"


def megatron_flags_file(schemas: Path, commit: str) -> Path:
    return schemas / "megatron" / f"{commit[:12]}-flags.json"


@dataclass(frozen=True)
class ProfileFlags:
    """The flags a profile's entry point accepts: the framework's own (Miles or Slime), its
    Megatron's whole parser, and SGLang's ``ServerArgs`` behind the ``--sglang-`` prefix."""
    framework: dict[str, dict]
    negations: frozenset[str]
    megatron: dict[str, dict]
    sglang_prefix: str
    sglang_skipped: frozenset[str]
    sglang: dict[str, str]
    sglang_choices: dict[str, list]


@cache
def profile_flags(name: str) -> ProfileFlags:
    p = profile(name)
    fw = json.loads((SCHEMAS / p.framework_source.flags).read_text())
    mg = json.loads((SCHEMAS / p.megatron.flags).read_text())
    sg = json.loads((SCHEMAS / p.sglang.flags).read_text())
    return ProfileFlags(framework=fw["miles_flags"], negations=frozenset(fw["boolean_optional_negations"]),
                        megatron=mg["flags"], sglang_prefix=fw["sglang_passthrough"]["prefix"],
                        sglang_skipped=frozenset(fw["sglang_passthrough"]["skipped"]),
                        sglang=sg["flags"], sglang_choices=sg["choices"])


def _value_problem(flag: str, values: list[str], decl: dict) -> str | None:
    if decl.get("action") in ("store_true", "store_false"):
        return f"{flag} takes no value, got {values}" if values else None
    if decl.get("choices") and values and not set(values) <= {str(c) for c in decl["choices"]}:
        return f"{flag} {' '.join(values)}: allowed: {', '.join(map(str, decl['choices']))}"
    return None


def argv_problems(p: Profile, flags: list[str]) -> list[str]:
    """What the profile's entry point would refuse, or (Slime, whose Megatron parser ignores unknown
    flags: slime/utils/arguments.py:1423-1437 at bd217a63) silently drop: every flag is looked up in
    the framework's, then Megatron's, then (``--sglang-*``) SGLang's vendored list, and its values
    checked against the declared choices."""
    f = profile_flags(p.name)
    out = []
    where = (f"{p.framework.value} {p.framework_source.ref}, Megatron-LM {p.megatron.ref} or "
             f"SGLang {p.sglang.version}")
    for flag, values in argv_pairs(flags):
        if flag in f.negations:
            continue
        if flag in f.framework:
            problem = _value_problem(flag, values, f.framework[flag])
        elif flag.startswith(f.sglang_prefix):
            server = "--" + flag[len(f.sglang_prefix):]
            dest = f.sglang.get(server)
            if dest is None:
                problem = f"{flag}: SGLang {p.sglang.version} has no {server}"
            elif dest in f.sglang_skipped:
                problem = f"{flag}: {p.framework.value} sets {dest} itself and registers no {flag}"
            else:
                problem = _value_problem(flag, values, {"choices": f.sglang_choices.get(dest)})
        elif flag in f.megatron:
            problem = _value_problem(flag, values, f.megatron[flag])
        else:
            problem = f"{flag}: not a flag of {where}"
        if problem:
            out.append(problem)
    return out
