"""A picture that says in words what it shows, for readers who cannot see it.

`described(fig, text)` gives a matplotlib figure `text` as its plain-text form. A notebook keeps
that text beside the PNG (its text/plain output), and the course's site makes it the picture's
alt text (site/build.py refuses a picture that has none). The course's drawings describe
themselves from the data that drew them (`helpers.pictures.sharding`, `traffic`, `timeline`); a
notebook's own plot says what its lines show in one call, from the numbers it plotted.
"""
from __future__ import annotations

from matplotlib.figure import Figure


class DescribedFigure(Figure):
    """A matplotlib Figure whose text form is a description of what it shows."""

    description = ""

    def __repr__(self) -> str:
        return self.description

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's plain-text form
        p.text(self.description)


def described(fig: Figure, text: str) -> DescribedFigure:
    """`fig`, whose text form (and the site's alt text) is now `text`, on one line."""
    text = " ".join(str(text).split())
    if not text:
        raise ValueError("a description says what the picture shows: got an empty one")
    if not isinstance(fig, Figure) or type(fig) not in (Figure, DescribedFigure):
        raise TypeError(f"described() takes a matplotlib Figure; got {type(fig).__name__}")
    fig.__class__ = DescribedFigure
    fig.description = text
    return fig
