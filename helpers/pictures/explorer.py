"""Interactive explorers built on helpers.pictures.sharding. The logic lives in plain classes (no browser
needed to test it); the widgets only copy control values in and results out.

>>> sharding_explorer()      # last line of a notebook cell        # doctest: +SKIP
"""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field

import ipywidgets as widgets
import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from helpers.pictures.layout import ShardingLayout, format_spec, sharding_layout
from helpers.pictures.sharding import draw_layout, layout_words

# Spec entry choices: the label a learner sees -> the PartitionSpec entry.
SPEC_CHOICES = {
    "None": None,
    "'host'": "host",
    "'device'": "device",
    "('host', 'device')": ("host", "device"),
    "('device', 'host')": ("device", "host"),
}
ORDERS = {
    "contiguous": "in order: mesh row h = host h's devices",
    "interleaved": "interleaved: mesh rows mix devices of different hosts",
}
MAX_DIMS = 3
DPI = 80


@dataclass
class ExplorerResult:
    """What one redraw produces: pictures (PNG bytes) and text, or an error message."""

    png: bytes | None  # the sharding picture
    mesh_png: bytes | None  # the mesh picture (redrawn only when the mesh changes)
    text: str
    code: str
    error: str | None
    layout: ShardingLayout | None = None


@dataclass
class ExplorerState:
    """The explorer's control values and everything computed from them.

    The explorer's mesh is `jax.devices()[:hosts * devices_per_host]` arranged as
    (host, device); emulated host h owns the h-th block of `devices_per_host` of them.
    """

    hosts: int = 2
    devices_per_host: int = 4
    order: str = "contiguous"
    shape: str = "8, 4"
    spec: list = field(default_factory=lambda: ["'device'", "None", "None"])
    _mesh_cache: tuple = field(default=(None, None), init=False, repr=False, compare=False)

    def parsed_shape(self) -> tuple[int, ...]:
        """The shape box's text as a tuple; ValueError saying how to write it."""
        text = str(self.shape).strip().strip("()[]").strip()
        try:
            shape = tuple(int(p) for p in text.replace(" ", ",").split(",") if p.strip()) if text else ()
        except ValueError:
            shape = None
        if not shape or any(n < 1 for n in shape) or len(shape) > MAX_DIMS:
            raise ValueError(
                f"shape {self.shape!r}: write 1 to {MAX_DIMS} whole numbers of at least 1, "
                "separated by commas, like 8, 4"
            )
        return shape

    def partition_spec(self):
        """P(...) with one entry per dimension of the shape."""
        rank = len(self.parsed_shape())
        return PartitionSpec(*(SPEC_CHOICES[label] for label in list(self.spec)[:rank]))

    def _devices(self) -> list:
        count = jax.device_count()
        need = self.hosts * self.devices_per_host
        if need > count:
            raise ValueError(
                f"{self.hosts} hosts x {self.devices_per_host} devices per host = {need} devices, "
                f"but JAX has {count}. Pick fewer hosts or fewer devices per host (at most {count} "
                "in all), or restart with use_fake_devices(a larger number)."
            )
        return jax.devices()[:need]

    def mesh(self):
        """The (host, device) mesh the controls describe."""
        devs = np.array(self._devices(), dtype=object)
        h, d = self.hosts, self.devices_per_host
        grid = devs.reshape(h, d) if self.order == "contiguous" else devs.reshape(d, h).T
        return Mesh(grid, ("host", "device"))

    def code(self) -> str:
        """The JAX code that builds the same mesh and sharding."""
        n, h, d = self.hosts * self.devices_per_host, self.hosts, self.devices_per_host
        grid = f"reshape({h}, {d})" if self.order == "contiguous" else f"reshape({d}, {h}).T"
        try:
            spec = format_spec(self.partition_spec())
        except ValueError:
            spec = "P(...)"
        return (f"mesh = Mesh(np.array(jax.devices()[:{n}]).{grid}, ('host', 'device'))\n"
                f"sharding = NamedSharding(mesh, {spec})")

    def layout(self) -> ShardingLayout:
        """Who holds what; ValueError (with the fix) for an invalid combination."""
        devices = self._devices()
        index = {dev: i // self.devices_per_host for i, dev in enumerate(devices)}
        return sharding_layout(self.parsed_shape(), self.mesh(), self.partition_spec(),
                               host_of=index.__getitem__)

    def render(self, *, png: bool = True) -> ExplorerResult:
        """One redraw: layout, text and PNG pictures, or the error message to show instead."""
        code = self.code()
        try:
            layout = self.layout()
        except ValueError as err:
            return ExplorerResult(None, None, "", code, str(err))
        sharding_png = mesh_png = None
        if png:
            sharding_png = _png(draw_layout(layout, mesh=False))
            key = (self.hosts, self.devices_per_host, self.order)
            if self._mesh_cache[0] != key:
                self._mesh_cache = (key, _png(draw_layout(layout, sharding=False)))
            mesh_png = self._mesh_cache[1]
        return ExplorerResult(sharding_png, mesh_png, layout.text(), code, None, layout)


def _img(png: bytes, css_class: str, words: str) -> str:
    """An <img> of a PNG, with what it shows in words as its alt text (screen readers, the site)."""
    data = base64.b64encode(png).decode("ascii")
    return (f'<img class="{css_class}" alt="{html.escape(words)}" src="data:image/png;base64,{data}" '
            'style="max-width: 100%">')


def _png(fig) -> bytes:
    """PNG bytes of a figure made with pyplot=False (nothing to close: pyplot never saw it)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


_ERROR_STYLE = ("border-left: 4px solid #D55E00; background: #fff4ec; color: #6b2a00; "
                "padding: 6px 10px; white-space: pre-wrap")


def _row() -> widgets.Layout:
    return widgets.Layout(flex_flow="row wrap")


def _look() -> dict:
    """Full-length descriptions; a Layout of its own (hiding one control must not hide others)."""
    return dict(style={"description_width": "initial"}, layout=widgets.Layout(width="auto"))


class ShardingExplorer(widgets.VBox):
    """The explorer widget; `.state` is its ExplorerState, `.result` the last redraw."""

    def __init__(self, state: ExplorerState | None = None):
        self.state = state or ExplorerState()
        s = self.state
        if not isinstance(s.shape, str):
            s.shape = ", ".join(str(n) for n in s.shape)
        count = jax.device_count()
        self.hosts = widgets.Dropdown(options=list(range(1, count + 1)), value=s.hosts,
                                      description="hosts", **_look())
        self.devices_per_host = widgets.Dropdown(options=list(range(1, count + 1)),
                                                 value=s.devices_per_host, description="devices per host",
                                                 **_look())
        self.order = widgets.Dropdown(options=[(v, k) for k, v in ORDERS.items()], value=s.order,
                                      description="mesh order", **_look())
        self.shape = widgets.Text(value=s.shape, description="array shape", continuous_update=False,
                                  placeholder="8, 4", style=_look()["style"])
        self.specs = [widgets.Dropdown(options=list(SPEC_CHOICES), value=s.spec[i],
                                       description=f"P entry for dim {i}", **_look())
                      for i in range(MAX_DIMS)]
        for name, w in [("hosts", self.hosts), ("devices-per-host", self.devices_per_host),
                        ("order", self.order), ("shape", self.shape)]:
            w.add_class(f"explorer-{name}")
        for i, w in enumerate(self.specs):
            w.add_class(f"explorer-spec-{i}")
        self.note = widgets.HTML(
            f"<div>The explorer builds a ('host', 'device') mesh from the first hosts x devices "
            f"per host of JAX's {count} devices; host h owns the h-th block of devices-per-host "
            "of them, as in the course's one-process emulation. <i>mesh order</i> lays those "
            "devices out in the mesh in order or interleaved. Pick a PartitionSpec entry for each "
            "dimension of the array (type the shape, then Enter).</div>"
        )
        self.error = widgets.HTML().add_class("explorer-error")
        # pictures as <img> in HTML widgets: an Image widget cannot carry alt text
        self.mesh_picture = widgets.HTML().add_class("explorer-mesh-picture-box")
        self.picture = widgets.HTML().add_class("explorer-picture-box")
        self.text = widgets.HTML().add_class("explorer-text")
        self.code_view = widgets.HTML().add_class("explorer-code")
        controls = [self.hosts, self.devices_per_host, self.order, self.shape, *self.specs]
        for w in controls:
            w.observe(self._on_change, names="value")
        super().__init__([
            self.note,
            widgets.HBox([self.hosts, self.devices_per_host, self.order], layout=_row()),
            widgets.HBox([self.shape], layout=_row()),
            widgets.HBox(self.specs, layout=_row()),
            self.code_view, self.error, self.mesh_picture, self.picture, self.text,
        ])
        self.add_class("explorer")
        self.result: ExplorerResult | None = None
        self.refresh()

    def __repr__(self) -> str:  # short and deterministic: it is the cell's text/plain output
        s = self.state
        return (f"ShardingExplorer({s.hosts} hosts x {s.devices_per_host} devices, {s.order}, "
                f"shape {s.shape!r}, spec entries {', '.join(s.spec[:MAX_DIMS])})")

    def _on_change(self, _change=None) -> None:
        self.refresh()

    def refresh(self) -> ExplorerResult:
        """Copy the controls into the state, redraw, and show the picture and text or the error."""
        s = self.state
        s.hosts, s.devices_per_host = self.hosts.value, self.devices_per_host.value
        s.order, s.shape = self.order.value, self.shape.value
        s.spec = [w.value for w in self.specs]
        try:
            rank = len(s.parsed_shape())
        except ValueError:
            rank = MAX_DIMS
        for i, w in enumerate(self.specs):
            w.layout.display = None if i < rank else "none"
        result = s.render()
        self.result = result
        self.code_view.value = f'<pre style="margin: 0">{html.escape(result.code)}</pre>'
        if result.error:
            self.error.value = (f'<div class="explorer-error-box" style="{_ERROR_STYLE}">'
                                f"⚠ {html.escape(result.error)}</div>")
            self.picture.layout.display = self.mesh_picture.layout.display = "none"
            self.text.value = ""
        else:
            self.error.value = ""
            mesh_img = _img(result.mesh_png, "explorer-mesh-picture", layout_words(result.layout, sharding=False))
            if self.mesh_picture.value != mesh_img:
                self.mesh_picture.value = mesh_img
            self.picture.value = _img(result.png, "explorer-picture", layout_words(result.layout, mesh=False))
            self.picture.layout.display = self.mesh_picture.layout.display = None
            self.text.value = f'<pre style="margin: 0">{html.escape(result.text)}</pre>'
        return result


def sharding_explorer(state: ExplorerState | None = None) -> ShardingExplorer:
    """A widget to try PartitionSpecs on a (host, device) mesh: picture and text on each change."""
    return ShardingExplorer(state)
