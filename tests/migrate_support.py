"""What the migration assistant finds in a test's snippet, for the tests of its rules (tests/test_migrate_*.py)."""
from __future__ import annotations

from pathlib import Path

from helpers import migrate
from helpers.migrate import findings


def write(path: Path, text: str) -> Path:
    """A file of a test's project (its folders made), for the rules that read a script's neighbours."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def package(root: Path, name: str, **modules: str) -> None:
    """A package of a test's project: `root/name/__init__.py`, and a module `name/key.py` for each keyword."""
    write(root / name / "__init__.py", "")
    for module, text in modules.items():
        write(root / name / f"{module}.py", text)


def project_rules(script: Path) -> set[tuple[int, str]]:
    """(line, rule) of every finding in a script, read with its project's modules."""
    return {(f.line, f.rule) for f in migrate.migrate(script, show=False)}


def rule_list(source: str) -> list[tuple[int, str]]:
    """(line, rule) of every finding, in line order."""
    return [(f.line, f.rule) for f in findings(source, "t.py")]


def rule_set(source: str) -> set[tuple[int, str]]:
    return set(rule_list(source))


def said(source: str, line: int, rule: str) -> str:
    """What the one finding of `rule` on `line` says and advises (there must be exactly one)."""
    (finding,) = [f for f in findings(source, "t.py") if (f.line, f.rule) == (line, rule)]
    return f"{finding.does} -> {finding.instead}"


def first_said(source: str, line: int, rule: str) -> str:
    """What the first finding of `rule` on `line` says and advises."""
    return next(f"{f.does} -> {f.instead}" for f in findings(source, "t.py") if (f.line, f.rule) == (line, rule))
