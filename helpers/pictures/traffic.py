"""Pictures of a program's collectives: who sends to whom, and which transfers cross hosts.

One row per collective of a `helpers.measure.traffic.Traffic` report (a collective repeated in a row,
as in an unrolled loop, is one row marked "x7"). The devices sit in a line,
grouped by host (thick outline), coloured as in every other picture of the course. Each
transfer of the cost model is an arc from sender to receiver: grey inside a host, red and
thicker across hosts; an arc's width grows with its bytes.

>>> draw_traffic(traffic(fn, x))   # doctest: +SKIP
"""
from __future__ import annotations

import jax
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from helpers.pictures.described import DescribedFigure, described
from helpers.measure.traffic import Traffic, format_bytes
from helpers.pictures.sharding import device_style

INSIDE, ACROSS = "#888888", "#C0102A"
MAX_PANELS = 8
_ROW_H, _WIDTH = 1.55, 7.8


def _order(report: Traffic) -> list:
    """The report's devices, grouped by host, then in jax.devices() order."""
    position = {d: i for i, d in enumerate(jax.devices())}
    return sorted(report.hosts, key=lambda d: (report.hosts[d], position[d]))


def draw_traffic(report: Traffic, *, title: str | None = None) -> DescribedFigure:
    """One row per collective: arcs for the transfers, red where they cross hosts."""
    folded = report.folded()  # an unrolled loop is one row, 'x7'
    shown = folded[:MAX_PANELS]
    rows = max(1, len(shown))
    fig = plt.figure(figsize=(_WIDTH, 0.55 + rows * _ROW_H + 0.35))
    plt.close(fig)
    fig.text(0.02, 1 - 0.3 / fig.get_figheight(), title or f"traffic: {report.summary()}",
             fontsize=11, va="center")
    fig.text(0.02, 0.17 / fig.get_figheight(), "grey arc = inside a host · red arc = across hosts · "
             "width grows with bytes", fontsize=8, color="#555555", va="center")
    if not shown:
        fig.text(0.5, 0.5, "no collectives: nothing moves between devices", ha="center", fontsize=10)
        return described(fig, f"Picture of {title or 'a program'}'s traffic: no collectives, nothing "
                              "moves between devices.")
    devices = _order(report)
    slot = {d: i for i, d in enumerate(devices)}
    positions = {d: i for i, d in enumerate(jax.devices())}
    biggest = max((float(t.nbytes) for c in shown for t in c.transfers()), default=1.0) or 1.0
    for row, collective in enumerate(shown):
        bottom = 1 - (0.55 + (row + 1) * _ROW_H) / fig.get_figheight()
        ax = fig.add_axes((0.02, bottom, 0.96, _ROW_H / fig.get_figheight()))
        _panel(ax, report, collective, devices, slot, positions, biggest)
    if len(folded) > MAX_PANELS:
        fig.text(0.98, 0.17 / fig.get_figheight(), f"... and {len(folded) - MAX_PANELS} more",
                 fontsize=8, ha="right", va="center")
    kinds = ", ".join(c.kind + (f" x{c.repeats}" if c.repeats > 1 else "") for c in folded)
    return described(fig, f"Picture of {title or 'the program'}'s traffic, one row of arcs per collective "
                          f"({kinds}), red where bytes cross hosts: {report.summary()}.")


def _panel(ax, report: Traffic, collective, devices, slot, positions, biggest: float) -> None:
    n = len(devices)
    ax.set_xlim(-0.6, max(n, 8) + 3.4)
    ax.set_ylim(-1.15, 1.25)
    ax.axis("off")
    for d in devices:
        style = device_style(positions[d])
        ax.add_patch(Rectangle((slot[d] - 0.35, -0.3), 0.7, 0.6, facecolor=style["facecolor"],
                               hatch=style["hatch"], edgecolor="white", linewidth=0.5))
        ax.text(slot[d], 0, str(d.id), ha="center", va="center", fontsize=8, color=style["text"])
    for host in sorted(set(report.hosts.values())):
        members = [slot[d] for d in devices if report.hosts[d] == host]
        ax.add_patch(Rectangle((min(members) - 0.42, -0.36), max(members) - min(members) + 0.84, 0.72,
                               fill=False, edgecolor="black", linewidth=2))
        ax.text((min(members) + max(members)) / 2, -0.36, f"host {host}", ha="center", va="center", fontsize=7,
                bbox=dict(facecolor="white", edgecolor="black", linewidth=1, pad=1.2), zorder=4)
    transfers = collective.transfers()
    alpha = 0.9 if len(transfers) <= 16 else 0.45  # a crowded panel (an all-to-all) stays readable
    for t in transfers:
        across = report.hosts[t.source] != report.hosts[t.target]
        a, b = slot[t.source], slot[t.target]
        upward = a < b  # left to right: an arc above the boxes; right to left: below
        rad = -min(0.6, 1.6 / abs(a - b))  # negative bends to the left of travel; long arcs flatter
        width = 0.6 + 2.4 * float(t.nbytes) / biggest
        ax.add_patch(FancyArrowPatch((a, 0.3 if upward else -0.3), (b, 0.3 if upward else -0.3),
                                     connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>",
                                     mutation_scale=7, linewidth=width,
                                     color=ACROSS if across else INSIDE, alpha=alpha, zorder=3))
    inside, across = report.split(collective)
    repeat = f" x{collective.repeats}" if collective.repeats > 1 else ""
    x_text = max(n, 8) - 0.2
    ax.text(x_text, 0.55, f"{collective.kind}{repeat}", fontsize=9, va="center")
    ax.text(x_text, 0.15, f"from {collective.jax_op}", fontsize=8, va="center", color="#555555")
    ax.text(x_text, -0.25, f"inside {format_bytes(inside)}", fontsize=8, va="center", color="#555555")
    ax.text(x_text, -0.65, f"across {format_bytes(across)}", fontsize=8, va="center", color=ACROSS)
