"""The layering a newcomer sees in the folder names holds in the code: no import cycle at run time,
and no module imports a layer above its own, not even for type annotations."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from conftest import ROOT

LAYERS = ["catalog", "software", "stackconfig", "components", "workloads", "nodes", "program", "analysis", "policy", "bench", "moe_rl"]
"""Bottom to top: each may import the ones before it, never one after it."""

WORKLOADS = ["pod", "schema", "derive", "acceptance", "render", "checks", "deploy", "cli"]
"""The roles inside ``workloads`` (its docstring says what each holds), bottom to top by the same rule."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for layer in LAYERS
            for p in ([ROOT / f"{layer}.py"] if (ROOT / f"{layer}.py").exists() else (ROOT / layer).rglob("*.py"))}


def typing_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never executed)."""
    return {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
            and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
            for stmt in block.body for n in ast.walk(stmt)}


def imports_of(name: str, path: Path, known: set[str], annotations: bool) -> set[str]:
    """Every project module ``path`` imports, at any depth of the file (function-level imports
    included); those under ``if TYPE_CHECKING:`` only when ``annotations``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = set() if annotations else typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph(annotations: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a fresh copy: a test may plant an edge)."""
    return {n: set(targets) for n, targets in _graph(annotations).items()}


@functools.cache
def _graph(annotations: bool) -> dict[str, frozenset[str]]:
    modules = project_modules()
    return {n: frozenset(imports_of(n, p, set(modules), annotations)) for n, p in modules.items()}


def layer(module: str) -> tuple[int, int]:
    """(layer, role): a module of ``workloads`` is placed by its role package as well; the package
    ``workloads`` itself (its docstring) sits under every role."""
    parts = module.split(".")
    role = WORKLOADS.index(parts[1]) + 1 if parts[0] == "workloads" and len(parts) > 1 else 0
    return LAYERS.index(parts[0]), role


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_cycle_finder_finds_a_planted_cycle():
    edges = graph()
    edges["catalog"] = edges["catalog"] | {"program"}  # catalog -> program -> ... -> catalog
    assert any(c[0] == "catalog" and c[-1] == "catalog" for c in cycles(edges))


def test_no_module_imports_a_higher_layer():
    upward = sorted(f"{m} -> {t}" for m, targets in graph(annotations=True).items()
                    for t in targets if layer(t) > layer(m))
    assert upward == []


def test_every_package_ships_in_the_distribution():
    """pyproject's package list names every package folder of the layers (so another program that
    pip-installs the repository can import the workloads component and the plan, not only components)."""
    import tomllib
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {module_name(p.parent) for layer_name in LAYERS if (ROOT / layer_name).is_dir()
               for p in (ROOT / layer_name).rglob("__init__.py")}
    assert set(tool["packages"]) == folders and tool["py-modules"] == ["program"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"moe-rl": "moe_rl.cli:entry"}


def test_every_data_file_a_package_reads_ships_with_it():
    """A program that pip-installs the repository gets the data its packages read (catalog, profiles,
    models, fault kinds, vendored schemas, the image recipes, the lint justifications): every data
    file inside a package folder is named by pyproject's package-data."""
    import fnmatch
    import tomllib
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    missing = []
    for top in LAYERS:
        folder = ROOT / top
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            rel = path.relative_to(folder).as_posix()
            if (path.is_file() and path.suffix in {".json", ".yaml", ".yml", ".txt", ".sh", ""}
                    | ({".Dockerfile"} if path.name.endswith("Dockerfile") else set())
                    and "__pycache__" not in rel and path.name != "README.md"
                    and not any(fnmatch.fnmatch(rel, g) for g in data.get(top, []))):
                missing.append(f"{top}/{rel}")
    assert missing == []


def test_the_upward_check_finds_a_planted_role_violation():
    """The role order is checked, not only the top layers: a schema module importing the renderers
    is reported."""
    edges = graph(annotations=True)
    edges["workloads.schema.stack"] = edges["workloads.schema.stack"] | {"workloads.render.ray"}
    assert any(layer(t) > layer(m) for m, ts in edges.items() for t in ts)


def test_workloads_holds_only_its_role_packages():
    """No grab-bag modules beside the roles: every module of ``workloads`` lives in one of them."""
    here = ROOT / "workloads"
    assert sorted(p.name for p in here.glob("*.py")) == ["__init__.py"]
    packages = sorted(p.parent.name for p in here.glob("*/__init__.py"))
    assert packages == sorted(WORKLOADS)


IMAGE_PACKAGES = {"torch", "sglang", "miles", "huggingface_hub"}
"""What the workload image adds to Python (workloads/image/Dockerfile), which a pod program may use
inside the function that needs it."""


def test_the_pod_programs_use_the_standard_library_only():
    """The in-pod programs run in the image's Python with nothing of this repository beside them
    (the scripts ConfigMap holds the files alone): at module level they import the standard library
    only, inside functions also the image's own packages, and never a project module."""
    import sys
    found = {}
    for path in (ROOT / "workloads" / "pod").glob("*.py"):
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.setdefault(path.name, set()).add("." * node.level + (node.module or ""))
                continue
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) else [])
            allowed = set(sys.stdlib_module_names) | (set() if id(node) in top else IMAGE_PACKAGES)
            found.update({path.name: found.get(path.name, set()) | {n} for n in names
                          if n.split(".")[0] not in allowed})
    assert found == {}
