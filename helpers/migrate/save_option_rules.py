"""A checkpoint saved by process 0 unless an option says every host: `is_saver = config.save_all_hosts or
jax.process_index() == 0`, a name that then guards the saves (`if is_saver: checkpointer.save(...)`). After the port
the state is global arrays, split over the hosts when sharded: every process saves its own shards, so the process-0
default is the one that hangs (or writes a partial checkpoint). Said on the process-0 half of the test.
"""
from __future__ import annotations

import ast
from typing import Iterator

from helpers.migrate.process_zero_rules import is_checkpoint_save
from helpers.migrate.host_zero import only_process_zero
from helpers.migrate.script import Script, code_of

# the lesson is process_zero_rules' for the same rule id
LESSONS: dict[str, tuple[str, str]] = {}


def _process_zero_parts(s: Script, test: ast.AST) -> list[ast.AST]:
    """The operands of an `or` (inside the test, also under an `and`) that are process 0 only, read through a name
    bound to such a test (`is_chief = jax.process_index() == 0`); [] unless the `or` has another operand."""
    found = []
    for node in ast.walk(test):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
            continue
        for part in node.values:
            held = s.value(part) if isinstance(part, ast.Name) else part
            if held is not None and only_process_zero(held, s.names, s.value):
                found.append(part)
    return found


def _guards_a_save(s: Script, name: str) -> bool:
    """Some `if` whose test reads `name` runs a checkpoint save in its body."""
    for node in ast.walk(s.tree):
        if isinstance(node, ast.If) and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.test)):
            if any(isinstance(n, ast.Call) and is_checkpoint_save(s, n) for stmt in node.body for n in ast.walk(stmt)):
                return True
    return False


def process_zero_unless_option(s: Script) -> Iterator[tuple[ast.AST, str, str, str]]:
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        parts = _process_zero_parts(s, node.value)
        if not parts or not _guards_a_save(s, node.targets[0].id):
            continue
        name = node.targets[0].id
        for part in parts:
            yield (part, "process-zero-save",
                   f"{name} = {code_of(node.value)} saves checkpoints on process 0 only unless the option says "
                   "every host: a checkpoint of global arrays is saved by every process (each writes its own "
                   "shards), so with the default process 0 waits for hosts that never call the save",
                   f"save on every host: {name} = True (Orbax lets process 0 write the shared metadata)")


RULES = (process_zero_unless_option,)
