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


def private_reaches(root: Path, packages=PACKAGES) -> list[str]:
    """Every place a course module uses another module's private name: `from m import _x`, or
    `m._x` where `m` was imported as a course module (anywhere in the file, functions too)."""
    files = [p for name in packages for p in sorted((root / name).rglob("*.py"))]
    modules = {module_name(p, root) for p in files}
    found = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        here = module_name(path, root)
        bound = set()  # names this file binds to a course module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in packages:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{here}:{node.lineno}: from {node.module} import {alias.name}")
                    if f"{node.module}.{alias.name}" in modules:
                        bound.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        bound.add(alias.asname)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(f"{here}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_course_module_uses_another_ones_private_names():
    assert private_reaches(ROOT) == []


def test_the_check_finds_a_private_name_used_from_another_module(tmp_path):
    package = tmp_path / "helpers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def _secret():\n    pass\n")
    (package / "b.py").write_text("def f():\n    from helpers.a import _secret\n")
    (package / "c.py").write_text("from helpers import a\na._secret()\n")
    assert private_reaches(tmp_path, ("helpers",)) == [
        "helpers.b:2: from helpers.a import _secret", "helpers.c:2: a._secret"]


MAX_TOP_LEVEL_FILES = 8
LONG_MODULE_LINES = 600


def test_helpers_keeps_its_modules_in_packages_a_reader_can_see():
    files = sorted(p.name for p in (ROOT / "helpers").iterdir() if p.is_file() and p.suffix == ".py")
    assert len(files) <= MAX_TOP_LEVEL_FILES, (
        f"helpers/ holds {len(files)} modules beside its packages ({', '.join(files)}): put the "
        f"new one in the package of its job (CONTRIBUTING.md, Layout)")
    for package in (p for p in (ROOT / "helpers").iterdir() if p.is_dir() and p.name != "course_files"
                    and any(p.glob("*.py"))):
        assert (package / "__init__.py").is_file(), f"{package.name}/ has no __init__.py"
        assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), (
            f"helpers/{package.name}/__init__.py should say in its docstring what the package is for")


def test_a_long_module_says_why_it_is_long():
    for path in sorted((ROOT / "helpers").rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert lines <= LONG_MODULE_LINES or "Long because" in docstring, (
            f"{path.relative_to(ROOT)} has {lines} lines: split it by job, or say in its "
            f"docstring why it is one module ('Long because ...')")
