"""Read an answer typed as text (in the drill form): Python literals, and P(...) specs.

Nothing is executed: the text is parsed, and only numbers, strings, None, tuples, lists,
sets and calls of P / PartitionSpec with such arguments are accepted.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from jax.sharding import PartitionSpec

from helpers.exercises.core import Mistake

SPEC_NAMES = ("P", "PartitionSpec", "jax.P", "jax.sharding.PartitionSpec")
_SLICE = re.compile(r"^\[?\s*(\d+)\s*:\s*(\d+)\s*\]?$")  # 2:4 or [2:4], as sharding_text prints


def parse_answer(text: str) -> Any:
    """The value the text stands for; Mistake with a short reason when it cannot be read."""
    text = str(text).strip()
    if not text:
        raise Mistake("type an answer first")
    if match := _SLICE.match(text):
        return int(match.group(1)), int(match.group(2))
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise Mistake(f"could not read {text!r}: write it as Python, like (0, 2), [0, 4] or P('host', None)") from None
    return _value(tree, text)


def _value(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Call) and ast.unparse(node.func) in SPEC_NAMES:
        if node.keywords:
            raise Mistake("P(...) takes one entry per dimension and no keywords")
        return PartitionSpec(*(_literal(arg, text) for arg in node.args))
    return _literal(node, text)


def _literal(node: ast.AST, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise Mistake(f"could not read {text!r}: use only numbers, names in quotes like 'host', None, "
                    "tuples and lists (and P(...) for a spec)") from None
