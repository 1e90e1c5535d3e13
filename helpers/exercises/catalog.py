"""Import every notebook's exercise module so that each registers its exercises."""
import importlib
import pkgutil

import helpers.exercises as _package

for _module in pkgutil.iter_modules(_package.__path__):
    if _module.name.startswith("nb"):
        importlib.import_module(f"helpers.exercises.{_module.name}")
