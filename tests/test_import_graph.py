"""The course's own modules import each other in one direction: no cycle in helpers/, benchmarks/
or tools/, counting the imports inside functions (which hide a cycle from Python, not from a reader)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("helpers", "benchmarks", "tools")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path, modules: set[str]) -> set[str]:
    """The course modules `path` imports anywhere in it (a `from package import name` of a submodule
    is an import of that submodule)."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != here}


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    files = [p for name in packages for p in sorted((root / name).rglob("*.py"))]
    modules = {module_name(p, root) for p in files}
    return {module_name(p, root): imports_of(p, root, modules) for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a, b, ..., a), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = "open", path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node], _ = "done", path.pop()
        return None

    return next((c for n in sorted(graph) if n not in state and (c := visit(n))), None)


def test_the_course_modules_import_in_one_direction():
    graph = import_graph(ROOT)
    assert "helpers.exercises.core" in graph and graph["helpers.exercises.kinds"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_check_finds_a_cycle_hidden_inside_a_function(tmp_path):
    package = tmp_path / "helpers"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from helpers.sub import b\n")
    (package / "sub" / "b.py").write_text("def later():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("import helpers.a\n")
    graph = import_graph(tmp_path, ("helpers",))
    assert graph["helpers.a"] == {"helpers.sub.b"} and graph["helpers.sub.b"] == {"helpers.sub.c"}
    assert find_cycle(graph) == ["helpers.a", "helpers.sub.b", "helpers.sub.c", "helpers.a"]
    (package / "sub" / "c.py").write_text("import json\n")
    assert find_cycle(import_graph(tmp_path, ("helpers",))) is None
