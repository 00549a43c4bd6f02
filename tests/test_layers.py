"""The layering a newcomer sees in the folder names holds in the code: no import cycle at run time,
and no module imports a layer above its own, not even for type annotations."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

LAYERS = ["catalog", "software", "stackconfig", "components", "workloads", "nodes", "program", "analysis", "policy", "bench"]
"""Bottom to top: each may import the ones before it, never one after it."""


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
    modules = project_modules()
    return {n: imports_of(n, p, set(modules), annotations) for n, p in modules.items()}


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


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
    assert scripts == {"moe-rl-plan": "analysis.plan:main", "moe-rl-bench": "bench.__main__:main"}


def reached(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def derived(module: str) -> bool:
    """The workload model, its renderers and the run files: built from the schema, never under it."""
    return module == "workloads.model" or module.startswith(("workloads.render", "workloads.runs"))


def test_the_stack_schema_reaches_no_model_renderer_or_run_file():
    """``workloads.stack`` (the schema) depends on settings and validation only; runs declared in a
    stack are checked by ``program.build`` instead. Annotation-only imports count: they are what a
    reader follows."""
    assert sorted(filter(derived, reached(graph(annotations=True), "workloads.stack"))) == []


def test_the_model_renderers_and_run_files_sit_in_no_import_circle():
    edges = graph(annotations=True)
    assert sorted(m for m in edges if derived(m) and m in reached(edges, m)) == []
