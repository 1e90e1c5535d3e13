"""A finding: one line of the learner's script, what it does on several hosts, what to write instead,
and the notebook section that teaches the fix; `findings(source)` applies every rule."""
from __future__ import annotations

import ast
import dataclasses
import re
import sys
import traceback
from pathlib import Path

from helpers.migrate import (batch_rules, checkpoint_rules, collective_rules, copy_rules, data_rules, einops_rules,
                             flax_rules, fold_rules, gradient_rules, host_read_rules, jax_rules, jit_collective_rules,
                             key_rules, keyword_rules, loader_rules, mesh_rules, negatives_rules, nnx_rules,
                             old_api_rules, process_zero_rules, refusal_rules, save_option_rules, scaling_rules,
                             sized_loader_rules, stack_read_rules, unread)
from helpers.migrate.aliases import expand
from helpers.migrate.helper_calls import said_at_calls
from helpers.migrate.script import Folder, Script

FAMILIES = (jax_rules, collective_rules, copy_rules, process_zero_rules, key_rules, flax_rules, nnx_rules,
            old_api_rules, data_rules, loader_rules, batch_rules, mesh_rules, host_read_rules, gradient_rules,
            negatives_rules, scaling_rules, keyword_rules, jit_collective_rules,
            save_option_rules, refusal_rules, checkpoint_rules, stack_read_rules, fold_rules, einops_rules,
            sized_loader_rules)
# rule -> (notebook, section heading without its number): a test checks them against the notebooks
LESSONS: dict[str, tuple[str, str]] = {k: v for family in (*FAMILIES, unread) for k, v in family.LESSONS.items()}
RULES = tuple(rule for family in FAMILIES for rule in family.RULES)
READ = {name for family in FAMILIES for name in getattr(family, "READS", ())}  # the names some rule reads


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the learner's script, what it does across hosts, and what to write instead."""

    path: str
    line: int
    rule: str
    does: str
    instead: str

    @property
    def lesson(self) -> str:
        notebook, section = LESSONS[self.rule]
        return f'notebook {notebook}, section "{section}"'

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.does} -> {self.instead} ({self.lesson})"


def findings(source: str, path: str = "<script>", *, first_line: int = 1,
             earlier: tuple[str, ...] = (), folder: Folder = Folder()) -> list[Finding]:
    """What the course says about each line of `source` (Python text), in line order.

    Raises SyntaxError for text that is not Python. `first_line` numbers a notebook cell's lines; `earlier` are
    the notebook's cells before it (their imports name what this cell calls); `folder` what the other files of
    its folder tell (the functions they hand gradients to, their pmaps' axes).
    """
    tree = expand(ast.parse(source, filename=path), dict(folder.aliases))
    script = Script(tree, tuple(ast.parse(cell) for cell in earlier), folder)
    said = [(node.lineno, rule, does, instead)
            for check in RULES for node, rule, does, instead in _guarded(check, script, path)]
    said += [(node.lineno, rule, does, instead) for node, rule, does, instead in said_at_calls(script, said)]
    found = {(line, rule, does): Finding(path, line + first_line - 1, rule, does, instead)
             for line, rule, does, instead in said}
    spoken = {line for line, _, _ in found}
    for node, name in unread.unread_names(script, READ):
        if node.lineno not in spoken:
            does, instead = unread.not_read(name)
            found[(node.lineno, "not-read", does)] = Finding(path, node.lineno + first_line - 1, "not-read",
                                                             does, instead)
    lines = source.splitlines()
    return sorted((f for (at, _, _), f in found.items() if not acknowledged(lines[at - 1] if at <= len(lines) else "",
                                                                            f.rule)),
                  key=lambda f: (f.line, f.rule, f.does))


def _guarded(check, script: Script, path: str) -> list[tuple[ast.AST, str, str, str]]:
    """A rule's findings; a rule that fails on this code (a bug of the tool) is said on stderr and skipped, so the
    other rules still read the file."""
    try:
        return list(check(script))
    except Exception as error:  # noqa: BLE001: any bug of one rule must not hide the others' findings
        where = traceback.extract_tb(error.__traceback__)[-1]
        print(f"migrate: {path}: the rule {check.__module__.rsplit('.', 1)[-1]}.{check.__name__} failed on this code "
              f"({type(error).__name__} at {Path(where.filename).name}:{where.lineno}), a bug of helpers.migrate: its "
              "findings here are missing, the other rules' are not", file=sys.stderr)
        return []


_OK = re.compile(r"#\s*migrate:\s*ok\b(?P<rules>[^#]*)")


def acknowledged(line: str, rule: str) -> bool:
    """The porter kept this line on purpose: `# migrate: ok` on it (every finding of the line), or `# migrate: ok
    RULE[, RULE]` (those rules only). The marks `--diff` leaves (`# migrate: RULE`) are no acknowledgement."""
    mark = _OK.search(line)
    if mark is None:
        return False
    named = {r for r in re.split(r"[\s,]+", mark.group("rules")) if r}
    return not named or rule in named
