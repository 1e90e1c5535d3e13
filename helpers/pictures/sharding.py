"""Pictures of meshes and of sharded arrays, coloured by device, with host borders drawn.

Every device keeps one colour in every picture (by its position in `jax.devices()`, from the
colour-blind-safe Okabe-Ito palette; devices 8-15 get a lighter tint and hatching). A thick
black outline groups the devices one host owns. A tile held by one device is filled with its
colour; a tile held by several (copies) is pale, with one small coloured badge per holder
inside it, so a copy never looks like a slice. Placement comes only from JAX's
`devices_indices_map`, via `helpers.pictures.layout.sharding_layout`, which also gives the text form.

>>> draw_mesh(mesh)                                  # doctest: +SKIP
>>> draw_sharding((8, 4), mesh, P("device"))         # doctest: +SKIP
>>> print(sharding_text(x))                          # doctest: +SKIP

The figures are closed before they are returned: ending a cell with one shows it once, and
playing with the explorer does not pile up open figures.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle
from matplotlib.transforms import Affine2D

from helpers.pictures.described import DescribedFigure, described
from helpers.pictures.layout import (  # noqa: F401  (re-exported: one import for the notebooks)
    HostOf,
    ShardingLayout,
    Tile,
    format_index,
    format_spec,
    mesh_label,
    mesh_text,
    mesh_words,
    sharding_layout,
    sharding_text,
)
from helpers.pictures.layout import check_mesh, host_function, plural, shape_text

OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999")
MAX_WIDTH = 7.8  # inches: fits JupyterLab's default notebook width
MIN_WIDTH = 6.6  # room for the title and the key
HOST_EDGE = dict(edgecolor="black", linewidth=2.4)
_FONT = 9


# ----------------------------------------------------------------------------- colours
def device_style(position: int) -> dict:
    """Fill colour, hatch and readable text colour of the device at `position` in jax.devices()."""
    base = to_rgb(OKABE_ITO[position % len(OKABE_ITO)])
    second_round = (position // len(OKABE_ITO)) % 2 == 1
    face = tuple(0.45 * c + 0.55 for c in base) if second_round else base
    lum = sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
              for w, c in zip((0.2126, 0.7152, 0.0722), face))
    text = "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"
    return {"facecolor": face, "hatch": "//" if second_round else None,
            "hatchcolor": tuple(c * 0.8 for c in base), "text": text}


def _positions() -> dict:
    return {d: i for i, d in enumerate(jax.devices())}


# ----------------------------------------------------------------------------- painting
class _Painter:
    """Draws straight on a figure in inches from its top-left corner, y downwards.

    No axes and no layout engine: fast (the explorer redraws on every click) and the same
    picture every time.
    """

    def __init__(self, width: float, height: float, *, pyplot: bool):
        if pyplot:  # pyplot wakes Jupyter's inline backend so a returned figure displays

            self.fig = plt.figure(figsize=(width, height))
            plt.close(self.fig)
        else:
            self.fig = Figure(figsize=(width, height))
        self.tr = Affine2D().scale(1, -1).translate(0, height) + self.fig.dpi_scale_trans
        # One invisible full-figure Axes holds everything: IPython skips figures without Axes.
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_axis_off()

    def rect(self, x: float, y: float, w: float, h: float, **kw) -> None:
        self.ax.add_artist(Rectangle((x, y), w, h, transform=self.tr, **kw))

    def text(self, x: float, y: float, s: str, *, size: float = 8, gid: str | None = None, **kw):
        kw = {"ha": "center", "va": "center", **kw}
        t = self.ax.text(x, y, s, transform=self.tr, fontsize=size, **kw)
        if gid:
            t.set_gid(gid)
        return t

    def lines(self, segments: list, **kw) -> None:
        self.ax.add_artist(LineCollection(segments, transform=self.tr, **kw))

    def device(self, x, y, w, h, device, host: int, position: int, fmt: str, size: float) -> None:
        """One device's mesh cell or tile: its colour and its 'device id / host' label."""
        style = device_style(position)
        self.rect(x, y, w, h, facecolor=style["facecolor"], hatch=style["hatch"],
                  hatchcolor=style["hatchcolor"], edgecolor="white", linewidth=0.8)
        self.text(x + w / 2, y + h / 2, fmt.format(d=device.id, h=host), size=size,
                  color=style["text"], linespacing=1.1, gid=f"device-{device.id}")

    def rounded(self, x: float, y: float, w: float, h: float, r: float, **kw) -> FancyBboxPatch:
        patch = FancyBboxPatch((x, y), w, h, boxstyle=f"round,pad=0,rounding_size={r:.3f}",
                               transform=self.tr, **kw)
        self.ax.add_artist(patch)
        return patch

    def badge(self, x, y, w, h, device, host: int, position: int, fmt: str, size: float) -> None:
        """A small rounded chip in a device's colour, labelled like its mesh cell: one holder."""
        style = device_style(position)
        self.rounded(x, y, w, h, min(0.05, 0.25 * min(w, h)), facecolor=style["facecolor"],
                     hatch=style["hatch"], hatchcolor=style["hatchcolor"], edgecolor="none")
        self.text(x + w / 2, y + h / 2, fmt.format(d=device.id, h=host), size=size,
                  color=style["text"], linespacing=1.1, gid=f"device-{device.id}")

    def axis_labels(self, x, y, w, h, cols, rows) -> None:
        """Ticks and names on the top (cols) and left (rows) edges of a w x h box at (x, y).

        cols/rows: (name or None, [(offset in inches, tick label), ...]).
        """
        name, ticks = cols
        for off, label in ticks:
            self.text(x + off, y - 0.06, label, va="bottom")
        if name:
            self.text(x + w / 2, y - 0.26, name, size=9, va="bottom")
        name, ticks = rows
        for off, label in ticks:
            self.text(x - 0.07, y + off, label, ha="right")
        if name:
            width = max((len(lbl) for _, lbl in ticks), default=0) * 0.065
            self.text(x - 0.2 - width, y + h / 2, name, size=9, rotation=90)


def _key(p: _Painter, y: float, text: str) -> None:
    p.text(0.2, y, text, color="#555555", ha="left")


# ----------------------------------------------------------------------------- mesh
def _mesh_panels(devs, names):
    """(title, 2-D block of devices, row axis name, column axis name) for each panel."""
    if devs.ndim == 0:
        return [(None, devs.reshape(1, 1), None, None)]
    if devs.ndim == 1:
        return [(None, devs[None, :], None, names[0])]
    if devs.ndim == 2:
        return [(None, devs, names[0], names[1])]
    blocks = devs.reshape((-1,) + devs.shape[-2:])
    coords = list(np.ndindex(devs.shape[:-2]))
    return [(", ".join(f"{n}={i}" for n, i in zip(names, c)), b, names[-2], names[-1])
            for c, b in zip(coords, blocks)]


class _MeshPlan:
    HEAD, FOOT = 0.45, 0.35

    def __init__(self, mesh, host_of: HostOf, max_cell: float = 1.15):
        self.mesh = check_mesh(mesh)
        devs = np.asarray(mesh.devices, dtype=object)
        self.panels = _mesh_panels(devs, list(mesh.axis_names))
        self.hosts = {d: host_of(d) for d in devs.flat}
        title, block, rname, cname = self.panels[0]
        rows, cols = block.shape
        self.left = 0.7 if rname else 0.2
        self.top = (0.55 if cname else 0.15) + (0.25 if title else 0)
        k = len(self.panels)
        self.per_row = max(1, min(k, int((MAX_WIDTH - 0.3) // (self.left + cols * 0.6 + 0.2))))
        room = (MAX_WIDTH - 0.3) / self.per_row - self.left - 0.2
        self.cell = max(0.45, min(max_cell, room / cols))
        self.cell_h = max(0.42, self.cell * 0.7)
        self.pw, self.ph = self.left + cols * self.cell + 0.2, self.top + rows * self.cell_h + 0.1
        content = 0.3 + self.per_row * self.pw
        self.width = max(5.2, content)
        self.pad = 0.15 + (self.width - content) / 2
        self.height = self.HEAD + -(-k // self.per_row) * self.ph + self.FOOT

    def draw(self, p: _Painter, y0: float, positions: dict) -> None:
        hosts = len(set(self.hosts.values()))
        p.text(0.2, y0 + 0.25, f"mesh {mesh_label(self.mesh)}: {plural(len(self.hosts), 'device')} "
               f"on {plural(hosts, 'host')}", size=11, ha="left")
        _key(p, y0 + self.height - 0.17, "colour = device · thick outline = one host's devices")
        big = self.cell >= 0.7
        fmt = "dev {d}\nhost {h}" if big else "d{d}\nh{h}"
        for k, (title, block, rname, cname) in enumerate(self.panels):
            x = self.pad + (k % self.per_row) * self.pw + self.left
            y = y0 + self.HEAD + (k // self.per_row) * self.ph + self.top
            rows, cols = block.shape
            cw, ch = self.cell, self.cell_h
            segments = []
            for i in range(rows):
                for j in range(cols):
                    d = block[i, j]
                    p.device(x + j * cw, y + i * ch, cw, ch, d, self.hosts[d], positions[d], fmt,
                             _FONT if big else _FONT - 1)
                    for (ni, nj), seg in (((i - 1, j), ((j, i), (j + 1, i))),
                                          ((i + 1, j), ((j, i + 1), (j + 1, i + 1))),
                                          ((i, j - 1), ((j, i), (j, i + 1))),
                                          ((i, j + 1), ((j + 1, i), (j + 1, i + 1)))):
                        if not (0 <= ni < rows and 0 <= nj < cols) or self.hosts[block[ni, nj]] != self.hosts[d]:
                            segments.append([(x + a * cw, y + b * ch) for a, b in seg])
            p.lines(segments, colors="black", linewidths=HOST_EDGE["linewidth"] + 0.6,
                    capstyle="projecting")
            p.axis_labels(x, y, cols * cw, rows * ch,
                          (cname and f"{cname} (size {cols})", [((j + 0.5) * cw, str(j)) for j in range(cols)] if cname else []),
                          (rname and f"{rname} (size {rows})", [((i + 0.5) * ch, str(i)) for i in range(rows)] if rname else []))
            if title:
                p.text(x + cols * cw / 2, y - self.top + 0.12, title, size=9)


def draw_mesh(mesh, *, host_of: HostOf | None = None) -> DescribedFigure:
    """The mesh as a grid of devices: id, owning host, host outlines, axis names and sizes.

    1-D and 2-D meshes are one grid; a 3-D mesh is one panel per index of its first axis.
    `host_of` maps a device to its host (default: `helpers.emulated.topology.host_of`).
    """
    plan = _MeshPlan(mesh, host_function(host_of))
    p = _Painter(plan.width, plan.height, pyplot=True)
    plan.draw(p, 0, _positions())
    return described(p.fig, "Picture of the " + mesh_words(mesh, host_of=host_of))


# ----------------------------------------------------------------------------- sharding
class _ShardingPlan:
    FOOT = 0.35

    def __init__(self, layout: ShardingLayout, max_height: float = 3.6):
        self.layout = layout
        shape = layout.shape
        self.rank = len(shape)
        if self.rank > 3:
            raise ValueError(f"draw_sharding draws arrays of up to 3 dimensions; this one has shape "
                             f"{shape_text(shape)}. Use sharding_text for the placement.")
        digits = len(str(max(shape[-2:-1] or (0,))))  # row tick labels
        self.left = 0.35 + 0.07 * digits if self.rank >= 2 else 0.3
        inner = MAX_WIDTH - self.left - 0.3
        self.blocks, self.per_row, nrows = [None], 1, 1
        if self.rank == 3:  # one panel per distinct block of dim 0
            self.blocks = sorted({t.index[0] for t in layout.tiles})
            k = len(self.blocks)
            self.per_row = min(k, 4)
            pw = (inner - (self.per_row - 1) * self.left) / self.per_row
            rows, cols = max(shape[1], 1), max(shape[2], 1)
            ph = min(3.0, max(1.0, pw * rows / cols))
            self.panel = (min(pw, max(1.2, ph * cols / rows)), ph)
            nrows = -(-k // self.per_row)
        elif self.rank == 0:
            self.panel = (min(inner, max(2.4, 0.8 * layout.replication)), 1.3)
        elif self.rank == 1:
            self.panel = (inner, 1.1 if layout.replication < 4 else 1.5)
        else:
            rows, cols = max(shape[0], 1), max(shape[1], 1)
            h = min(max_height, max(1.3, inner * rows / cols))
            self.panel = (min(inner, max(3.0, h * cols / rows)), h)
        self.top = 0.5 + (0.25 if self.rank == 3 else 0)
        self.pw, self.ph = self.left + self.panel[0] + 0.1, self.top + self.panel[1] + 0.1
        content = 0.2 + self.per_row * self.pw
        self.width = max(MIN_WIDTH, content)
        self.pad = 0.1 + (self.width - content) / 2  # centres narrow pictures
        self.head = 0.75
        self.copies = layout.replication > 1
        self.height = self.head + nrows * self.ph + self.FOOT

    def draw(self, p: _Painter, y0: float) -> None:
        lay = self.layout
        p.text(0.2, y0 + 0.25, f"shape {shape_text(lay.shape)}, {format_spec(lay.spec)}, "
               f"mesh {mesh_label(lay.mesh)}", size=11, ha="left")
        p.text(0.2, y0 + 0.53, lay.summary(), size=8.5, ha="left", color="#333333")
        _key(p, y0 + self.height - 0.17, "colour = device · each tile names its device and host"
             + (" · pale tile with N badges = N full copies of it, outlined per host" if self.copies else ""))
        for k, block in enumerate(self.blocks):
            x = self.pad + (k % self.per_row) * self.pw + self.left
            y = y0 + self.head + (k // self.per_row) * self.ph + self.top
            self._draw_panel(p, x, y, block)

    def _draw_panel(self, p: _Painter, x: float, y: float, block) -> None:
        lay, shape = self.layout, self.layout.shape
        dims = {0: [None, None], 1: [None, 0], 2: [0, 1], 3: [1, 2]}[self.rank]
        extent = [max(shape[d], 1) if d is not None else 1 for d in dims]
        pw, ph = self.panel
        sy, sx = ph / extent[0], pw / extent[1]  # inches per index

        def span(tile, d):
            if d is None or not shape[d]:
                return (0, 1)
            return tile.index[d]

        rows, cols = set(), set()
        for tile in lay.tiles:
            if block is None or tile.index[0] == block:
                (r0, r1), (c0, c1) = span(tile, dims[0]), span(tile, dims[1])
                rows.update((r0, r1))
                cols.update((c0, c1))
                self._draw_tile(p, tile, x + c0 * sx, y + r0 * sy, (c1 - c0) * sx, (r1 - r0) * sy)
        name = lambda d: d is not None and f"dim {d} (size {shape[d]})"  # noqa: E731
        p.axis_labels(x, y, pw, ph,
                      (name(dims[1]), [(c * sx, str(c)) for c in sorted(cols)] if dims[1] is not None else []),
                      (name(dims[0]), [(r * sy, str(r)) for r in sorted(rows)] if dims[0] is not None else []))
        if block is not None:
            p.text(x + pw / 2, y - self.top + 0.12, f"dim 0 in [{block[0]}:{block[1]}]", size=9)

    def _draw_tile(self, p: _Painter, tile, x: float, y: float, w: float, h: float) -> None:
        lay = self.layout
        gx, gy = min(0.035, 0.15 * w), min(0.035, 0.15 * h)  # white space around each tile
        x, y, w, h = x + gx, y + gy, w - 2 * gx, h - 2 * gy
        devices = sorted(tile.devices, key=lambda d: (lay.hosts[d], lay.position[d]))
        if len(devices) == 1:  # one holder: the tile is that device's, in its colour
            (d,) = devices
            _, _, fmt, size = _label_format(w, h)
            p.device(x, y, w, h, d, lay.hosts[d], lay.position[d], fmt, size)
            p.rect(x, y, w, h, fill=False, **HOST_EDGE)
            return
        # several holders: a pale tile (its true extent) and one badge per copy inside it
        p.rect(x, y, w, h, gid="copies-tile", **COPIES_TILE)
        groups: list[list] = []  # each host's holders, in host order
        for d in devices:
            if groups and lay.hosts[groups[-1][0]] == lay.hosts[d]:
                groups[-1].append(d)
            else:
                groups.append([d])
        plan = _badge_plan(w, h, len(devices), [len(g) for g in groups])
        if plan.label:
            lx, ly, text, ha = plan.label
            p.text(x + lx, y + ly, text, size=_FONT - 0.5, color="#333333", ha=ha, gid="copies-label")
        _, _, fmt, size = _LABELS[plan.fmt]
        m = plan.cols * plan.bw + (plan.cols - 1) * _BADGE_GAP + 2 * _GROUP_PAD  # group box
        for k, group in enumerate(groups):
            rows = -(-len(group) // plan.cols)
            used = min(len(group), plan.cols)
            gx0 = x + plan.x0 + (k % plan.gcols) * (m + _GROUP_GAP)
            gy0 = y + plan.y0 + (k // plan.gcols) * (plan.gh + _GROUP_GAP)
            gw = used * plan.bw + (used - 1) * _BADGE_GAP + 2 * _GROUP_PAD
            gh = rows * plan.bh + (rows - 1) * _BADGE_GAP + 2 * _GROUP_PAD
            gx0 += (m - gw) / 2  # a short group sits in the middle of its slot
            for i, d in enumerate(group):
                bx = gx0 + _GROUP_PAD + (i % plan.cols) * (plan.bw + _BADGE_GAP)
                by = gy0 + _GROUP_PAD + (i // plan.cols) * (plan.bh + _BADGE_GAP)
                p.badge(bx, by, plan.bw, plan.bh, d, lay.hosts[d], lay.position[d], fmt, size)
            p.rounded(gx0, gy0, gw, gh, min(0.08, 0.3 * min(gw, gh)), fill=False, **HOST_EDGE)


_LABELS = [  # (min width, min height in inches, format, font size), longest first
    (0.72, 0.42, "dev {d}\nhost {h}", _FONT),
    (1.25, 0.22, "dev {d} · host {h}", _FONT),
    (0.32, 0.36, "d{d}\nh{h}", _FONT - 1),
    (0.5, 0.18, "d{d} h{h}", _FONT - 1),
    (0.0, 0.0, "{d}", 7),
]


def _label_format(w: float, h: float) -> tuple:
    """The longest device label that fits a cell of w x h inches: (min w, min h, format, size)."""
    return next(option for option in _LABELS if w >= option[0] and h >= option[1])


# ----------------------------------------------------------------------------- copies
COPIES_TILE = dict(facecolor="#F3F3F3", edgecolor="#8C8C8C", linewidth=1.0)
# per label format of _LABELS: the least room a badge needs for it (a badge has no border to
# keep clear of, so a little less than a tile), and the most a badge takes when there is more
_BADGE_MIN = [(0.62, 0.4), (1.1, 0.22), (0.3, 0.34), (0.46, 0.18), (0.0, 0.0)]
_BADGE_MAX = [(0.8, 0.46), (1.2, 0.28), (0.56, 0.42), (0.66, 0.24), (0.42, 0.3)]
_BADGE_GAP, _GROUP_PAD, _GROUP_GAP, _MARGIN = 0.06, 0.045, 0.09, 0.06


class _Candidate(NamedTuple):
    """One arrangement `_badge_plan` weighs: its score (lower is better), then its sizes and label."""

    score: tuple | None
    fmt: int
    bw: float
    bh: float
    cols: int
    gcols: int
    grows: int
    rows: int
    text: str | None
    top: float
    left: float


class _BadgePlan:
    """Where the badges and the 'N copies' label go inside a w x h tile (inches from its corner)."""

    __slots__ = ("fmt", "bw", "bh", "cols", "gcols", "gh", "x0", "y0", "label")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


def _badge_plan(w: float, h: float, copies: int, groups: list[int]) -> _BadgePlan:
    """The clearest arrangement of `copies` badges in host groups of the given sizes.

    Tries each place for the tile's label (above the badges, left of them, short, none) and
    each grid of groups and of badges within a group; keeps the one whose badges can carry the
    longest device label, preferring groups laid out like the mesh (one row per host).
    """
    full, short = f"{copies} copies", f"×{copies}"
    wide = lambda text: 0.062 * len(text) + 0.08  # noqa: E731  (room for the label's text)
    labels = [  # (cost, text, band on top, band on the left)
        (0.0, full, 0.2, 0.0),
        (0.0, full, 0.0, wide(full) + 0.06),
        (1.5, short, 0.17, 0.0),
        (1.5, short, 0.0, wide(short) + 0.06),
        (4.0, None, 0.0, 0.0),
    ]
    n, m = len(groups), max(groups)
    best = None
    for order, (cost, text, top, left) in enumerate(labels):
        if text and top and wide(text) > w:
            continue
        aw, ah = w - left - 2 * _MARGIN, h - top - 2 * _MARGIN
        if text and left:
            aw += _MARGIN / 2  # the label's band already keeps the badges off the edge
        if text and top:
            ah += _MARGIN / 2
        for gcols in range(1, n + 1):
            grows = -(-n // gcols)
            for cols in range(1, m + 1):
                rows = -(-m // cols)
                bw = ((aw - (gcols - 1) * _GROUP_GAP) / gcols - 2 * _GROUP_PAD - (cols - 1) * _BADGE_GAP) / cols
                bh = ((ah - (grows - 1) * _GROUP_GAP) / grows - 2 * _GROUP_PAD - (rows - 1) * _BADGE_GAP) / rows
                if bw < 0.06 or bh < 0.06:
                    continue
                fmt = next(i for i, (mw, mh) in enumerate(_BADGE_MIN) if bw >= mw and bh >= mh)
                score = (fmt + cost, rows, gcols if grows > 1 or rows > 1 else 0, order, -min(bw, bh))
                if best is None or score < best.score:
                    best = _Candidate(score, fmt, bw, bh, cols, gcols, grows, rows, text, top, left)
    if best is None:  # a sliver of a tile: tiny badges, no label
        cols = m
        bw = max(0.02, (w - n * (2 * _GROUP_PAD + _GROUP_GAP) - (m - 1) * n * _BADGE_GAP) / (n * m))
        bh = max(0.02, h - 2 * _GROUP_PAD - 0.02)
        best = _Candidate(None, len(_LABELS) - 1, bw, bh, cols, n, 1, 1, None, 0.0, 0.0)
    fmt, cols, gcols, grows, rows = best.fmt, best.cols, best.gcols, best.grows, best.rows
    text, top, left = best.text, best.top, best.left
    bw, bh = min(best.bw, _BADGE_MAX[fmt][0]), min(best.bh, _BADGE_MAX[fmt][1])
    gw = cols * bw + (cols - 1) * _BADGE_GAP + 2 * _GROUP_PAD
    gh = rows * bh + (rows - 1) * _BADGE_GAP + 2 * _GROUP_PAD
    bx = gcols * gw + (gcols - 1) * _GROUP_GAP  # the whole block of badges
    by = grows * gh + (grows - 1) * _GROUP_GAP
    label = None
    if text and top:  # label and badges together, centred in the tile
        y0 = (h - top - by) / 2 + top
        label = (w / 2, y0 - top / 2 - 0.02, text, "center")
        x0 = (w - bx) / 2
    elif text and left:
        x0 = (w - left - bx) / 2 + left
        label = (x0 - 0.08, h / 2, text, "right")
        y0 = (h - by) / 2
    else:
        x0, y0 = (w - bx) / 2, (h - by) / 2
    return _BadgePlan(fmt=fmt, bw=bw, bh=bh, cols=cols, gcols=gcols, gh=gh, x0=x0, y0=y0, label=label)


def draw_sharding(x_or_shape, mesh=None, spec=None, *, host_of: HostOf | None = None) -> DescribedFigure:
    """The global array as tiles: a tile held by one device is filled with its colour; a tile
    held by several is pale, with one badge per holding device (a full copy each) inside it.

    Pass a jax.Array with a NamedSharding, or a shape with `mesh` and `spec`. 0-D to 2-D
    arrays are one picture; a 3-D array is one panel per block of dimension 0.
    """
    layout = sharding_layout(x_or_shape, mesh, spec, host_of=host_of)
    plan = _ShardingPlan(layout)
    p = _Painter(plan.width, plan.height, pyplot=True)
    plan.draw(p, 0)
    return described(p.fig, "Picture of the array's tiles: " + layout.words())


def draw_layout(layout: ShardingLayout, *, mesh: bool = True, sharding: bool = True,
                pyplot: bool = False) -> DescribedFigure:
    """The mesh (on top) and/or the sharding of an already-built layout, in one figure.

    The explorer uses this with pyplot=False: the figure never enters pyplot's registry.
    """
    plans = []
    if mesh:
        plans.append(_MeshPlan(layout.mesh, layout.hosts.__getitem__, max_cell=0.95))
    if sharding:
        plans.append(_ShardingPlan(layout, max_height=3.0))
    if not plans:
        raise ValueError("draw_layout needs mesh=True, sharding=True or both")
    p = _Painter(max(plan.width for plan in plans), sum(plan.height for plan in plans), pyplot=pyplot)
    top = 0.0
    for plan in plans:
        if isinstance(plan, _MeshPlan):
            plan.draw(p, top, layout.position)
        else:
            plan.draw(p, top)
        top += plan.height
    return described(p.fig, layout_words(layout, mesh=mesh, sharding=sharding))


def layout_words(layout: ShardingLayout, *, mesh: bool = True, sharding: bool = True) -> str:
    """What `draw_layout` shows, in words (the explorer's pictures say it too)."""
    words = ["Picture of the " + mesh_words(layout.mesh, host_of=layout.hosts.__getitem__)] if mesh else []
    return " ".join(words + (["Picture of the array's tiles: " + layout.words()] if sharding else []))
