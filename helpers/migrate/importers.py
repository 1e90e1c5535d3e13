"""The files of a script's project that import it (a launcher that pmaps the agent a module defines), read for one
fact: the axis names their pmaps map over, so the module's own collectives over them are known as pmap's."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from helpers.migrate.aliases import expand
from helpers.migrate.folder import Folder
from helpers.migrate.project import folder_facts, imported_modules, project_modules, roots
from helpers.migrate.script import Script

MOST_FILES = 400  # a monorepo: look no further, keep the tool fast


def _dotted(script: Path, top: Path) -> list[str]:
    """The module's dotted name from the folder above its top package, and each package that holds it."""
    parts = list(script.relative_to(top).with_suffix("").parts)
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1) if parts[:n] != ["__init__"]]


def importers(script: Path, top: Path) -> list[Path]:
    """The .py files under `top` (the folder above the script's top package) that import its module or the
    package it is in (`from pkg.agents.a2c import A2CAgent`), the package itself left out."""
    names = set(_dotted(script, top)[:2])  # the module, and the package right above it (re-exported there)
    found = []
    for file in sorted(top.rglob("*.py"))[:MOST_FILES]:
        if file.resolve() == script.resolve() or file.name == "__init__.py":
            continue
        try:
            text = file.read_text(encoding="utf-8")
            if script.parent.name not in text:
                continue
            if any(not level and dotted in names for level, dotted in imported_modules(ast.parse(text))):
                found.append(file)
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue
    return found


def with_importers_axes(folder: Folder, script: Path, top: Path | None) -> Folder:
    """The script's project facts with the pmap axes of the files that import it."""
    if top is None or top == script.parent:
        return folder  # not in a package: nothing imports it by a dotted name
    axes = set()
    for file in importers(script, top):
        try:
            axes |= Script(expand(ast.parse(file.read_text(encoding="utf-8")))).pmap_axes
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue
    return dataclasses.replace(folder, pmap_axes=folder.pmap_axes | axes) if axes else folder


def script_facts(script: Path) -> Folder:
    """What a script named alone is read with: the facts of the project modules it imports, and the pmap axes of the
    project's files that import it."""
    return with_importers_axes(folder_facts(project_modules(script)), script, roots(script)[-1])
