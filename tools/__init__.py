"""Developer tooling: building and running notebooks, the README's course table.

Not imported by the notebooks. Scripts here run as `python tools/NAME.py` or `python -m tools.NAME`.
"""
