"""helpers.pictures.explorer: the sharding explorer, driven by setting control values (no browser)."""
from helpers.devices import use_fake_devices

use_fake_devices(8)

import base64  # noqa: E402
import html  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from helpers.pictures.sharding import sharding_text  # noqa: E402
from helpers.pictures.explorer import SPEC_CHOICES, ExplorerState, sharding_explorer  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _explorer_hosts(state):
    """The explorer's host map: host h owns the h-th block of devices_per_host devices."""
    return lambda d: jax.devices().index(d) // state.devices_per_host


def test_default_state_renders_picture_and_the_same_text_as_sharding_text():
    state = ExplorerState()
    result = state.render()
    assert result.error is None and result.png.startswith(PNG) and result.mesh_png.startswith(PNG)
    assert state.render().mesh_png is result.mesh_png  # same mesh: its picture is reused
    state.order = "interleaved"
    assert state.render().mesh_png != result.mesh_png
    state.order = "contiguous"
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("host", "device"))
    assert result.text == sharding_text((8, 4), mesh, P("device", None), host_of=_explorer_hosts(state))
    assert "NamedSharding(mesh, P('device', None))" in result.code
    assert plt.get_fignums() == []


@pytest.mark.parametrize("hosts, per_host, order, shape, spec", [
    (2, 4, "contiguous", "8", ["('host', 'device')"]),
    (2, 4, "interleaved", "8, 4", ["'device'", "None"]),
    (4, 2, "contiguous", "8, 4", ["('device', 'host')", "None"]),
    (2, 2, "contiguous", "4, 6", ["'host'", "'device'"]),
    (2, 4, "contiguous", "4, 8, 4", ["'host'", "'device'", "None"]),
])
def test_state_places_like_jax(hosts, per_host, order, shape, spec):
    state = ExplorerState(hosts, per_host, order, shape, spec + ["None"] * (3 - len(spec)))
    layout = state.layout()
    devs = np.array(jax.devices()[: hosts * per_host])
    grid = devs.reshape(hosts, per_host) if order == "contiguous" else devs.reshape(per_host, hosts).T
    assert (layout.mesh.devices == grid).all()
    dims = tuple(int(n) for n in shape.split(","))
    jax_spec = P(*(SPEC_CHOICES[s] for s in spec))
    raw = NamedSharding(Mesh(grid, ("host", "device")), jax_spec).devices_indices_map(dims)
    assert layout.placement == {d: tuple(s.indices(n)[:2] for s, n in zip(i, dims)) for d, i in raw.items()}
    assert layout.hosts == {d: list(devs).index(d) // per_host for d in devs}
    assert state.render(png=False).error is None


@pytest.mark.parametrize("changes, message", [
    (dict(hosts=4, devices_per_host=4), "4 hosts x 4 devices per host = 16 devices, but JAX has 8"),
    (dict(shape="6, 4"), "dimension 0 (size 6) into 4 pieces"),
    (dict(shape="8, x"), "write 1 to 3 whole numbers"),
    (dict(shape="8, 4, 2, 2"), "write 1 to 3 whole numbers"),
    (dict(spec=["'host'", "'host'", "None"]), "uses mesh axis 'host' more than once"),
])
def test_invalid_choices_give_the_message_instead_of_a_picture(changes, message):
    state = ExplorerState(**changes)
    result = state.render()
    assert result.png is None and result.text == "" and message in result.error


def test_widget_redraws_on_every_change_and_shows_errors_inline():
    w = sharding_explorer()
    assert "explorer" in w._dom_classes
    assert "explorer-spec-0" in w.specs[0]._dom_classes and "explorer-shape" in w.shape._dom_classes
    for box, css in ((w.mesh_picture, "explorer-mesh-picture"), (w.picture, "explorer-picture")):
        img = re.fullmatch(r'<img class="(.+?)" alt="(.+?)" src="data:image/png;base64,(.+?)" .*>', box.value)
        assert img and img[1] == css and base64.b64decode(img[3]).startswith(PNG)
    assert "dev 4 [0:2, :]" in html.unescape(w.text.value)
    assert html.unescape(re.search(r'alt="(.+?)"', w.picture.value)[1]).startswith(
        "Picture of the array's tiles: shape (8, 4), P('device', None)")

    w.specs[0].value = "('host', 'device')"
    assert w.state.spec[0] == "('host', 'device')"
    assert "dev 4 [4:5, :]" in html.unescape(w.text.value)

    w.shape.value = "8"
    assert w.state.parsed_shape() == (8,)
    assert [s.layout.display for s in w.specs] == [None, "none", "none"]
    assert w.result.text.startswith("shape (8,), P(('host', 'device'))")

    w.hosts.value = 4  # 4 x 4 = 16 devices: too many
    assert "16 devices, but JAX has 8" in html.unescape(w.error.value)
    assert "explorer-error-box" in w.error.value
    assert w.picture.layout.display == w.mesh_picture.layout.display == "none"
    assert w.text.value == ""

    w.devices_per_host.value = 2  # 4 x 2 = 8: valid again
    assert w.error.value == "" and w.picture.layout.display is None
    assert "host 3: dev 6 [6:7]  dev 7 [7:8]" in w.result.text

    w.order.value = "interleaved"
    assert "mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4).T" in html.unescape(w.code_view.value)
    assert plt.get_fignums() == []
    assert repr(w) == ("ShardingExplorer(4 hosts x 2 devices, interleaved, shape '8', "
                       "spec entries ('host', 'device'), None, None)")
