"""helpers.pictures.sharding: the text form reports exactly JAX's placement; pictures have one label per
device, colour each device the same everywhere, draw copies as badges inside one pale tile
(never as strips that look like a split), and leave no figure open; bad requests raise a
ValueError that says what to change."""
import re

from helpers.devices import use_fake_devices

use_fake_devices(8)

import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from helpers.emulated import topology  # noqa: E402
from helpers.pictures.sharding import (  # noqa: E402
    MAX_WIDTH,
    device_style,
    draw_mesh,
    draw_sharding,
    mesh_text,
    sharding_layout,
    sharding_text,
)

DEVS = np.array(jax.devices())
MESHES = {
    "2x4": Mesh(DEVS.reshape(2, 4), ("host", "device")),
    "2x4 interleaved": Mesh(DEVS.reshape(4, 2).T, ("host", "device")),
    "2x4 permuted": Mesh(DEVS[[3, 1, 7, 5, 0, 2, 6, 4]].reshape(2, 4), ("host", "device")),
    "4x2": Mesh(DEVS.reshape(4, 2), ("host", "device")),
    "1x8 make_mesh": jax.make_mesh((1, 8), ("host", "device")),
    "8": Mesh(DEVS, ("device",)),
    "2x2x2": Mesh(DEVS.reshape(2, 2, 2), ("host", "x", "y")),
}
CASES = [
    ("2x4", (8,), P("device")),
    ("2x4", (8,), P(("host", "device"))),
    ("2x4", (8,), P(("device", "host"))),
    ("2x4", (8,), P("host")),
    ("2x4", (8,), P()),
    ("2x4", (), P()),
    ("2x4", (8, 4), P("device")),
    ("2x4", (8, 4), P(("host", "device"))),
    ("2x4", (8, 4), P(("device", "host"), None)),
    ("2x4", (8, 4), P(None, "device")),
    ("2x4", (8, 8), P("host", "device")),
    ("2x4", (8, 8), P("device", "host")),
    ("2x4", (4, 8, 4), P("host", "device")),
    ("2x4", (2, 4, 8), P(None, "device", "host")),
    ("2x4", (2, 8, 4), P(None, ("device", "host"))),
    ("2x4 interleaved", (8,), P("device")),
    ("2x4 interleaved", (8, 4), P(("host", "device"))),
    ("2x4 interleaved", (8, 4), P(("device", "host"))),
    ("2x4 permuted", (8,), P("device")),
    ("2x4 permuted", (8, 2), P(("host", "device"))),
    ("2x4 permuted", (4, 8), P("host", "device")),
    ("4x2", (8, 4), P("host")),
    ("4x2", (8, 4), P(("device", "host"))),
    ("1x8 make_mesh", (16,), P("device")),
    ("8", (8, 4), P("device")),
    ("8", (4, 8), P(None, "device")),
    ("2x2x2", (4, 4), P(("host", "x"), "y")),
    ("2x2x2", (2, 4, 2), P("host", None, "y")),
]

_ITEM = re.compile(r"dev (\d+) (\[[^\]]*\]|\(scalar\))")


@pytest.fixture
def two_hosts():
    """Emulate 2 hosts for one test, then put the previous setting back."""
    with topology.emulated_hosts(2):
        yield


def _jax_placement(mesh, spec, shape):
    raw = NamedSharding(mesh, spec).devices_indices_map(shape)
    return {d.id: tuple(sl.indices(n)[:2] for sl, n in zip(idx, shape)) for d, idx in raw.items()}


def _parse(text, shape):
    """{device id: ((start, stop), ...)} and {device id: host} read back from the text form."""
    placement, hosts, host = {}, {}, None
    for line in text.splitlines():
        m = re.match(r"host (\d+): ", line)
        if m:
            host = int(m.group(1))
        elif not line.startswith(" "):
            continue
        for dev, idx in _ITEM.findall(line):
            parts = [] if idx == "(scalar)" else idx[1:-1].split(", ")
            index = []
            for part, n in zip(parts, shape):
                a, b = part.split(":")
                index.append((int(a or 0), int(b or n)))
            placement[int(dev)] = tuple(index)
            hosts[int(dev)] = host
    return placement, hosts


@pytest.mark.parametrize("mesh_name, shape, spec", CASES, ids=[f"{m}-{s}-{p}" for m, s, p in CASES])
def test_text_reports_exactly_what_jax_places(two_hosts, mesh_name, shape, spec):
    mesh = MESHES[mesh_name]
    expected = _jax_placement(mesh, spec, shape)
    text = sharding_text(shape, mesh, spec)
    placement, hosts = _parse(text, shape)
    assert placement == expected
    assert hosts == {d.id: topology.host_of(d) for d in mesh.devices.flat}
    layout = sharding_layout(shape, mesh, spec)
    assert {d.id: idx for d, idx in layout.placement.items()} == expected
    copies = {}
    for idx in expected.values():
        copies[idx] = copies.get(idx, 0) + 1
    (reps,) = set(copies.values())
    assert len(layout.tiles) == len(copies)
    if len(copies) == 1:
        assert "1 tile:" in text
    elif reps == 1:
        assert "held by exactly 1 device" in text
    else:
        assert f"held by {reps} devices" in text


def test_text_form_for_two_hosts_of_four_devices(two_hosts):
    mesh = MESHES["2x4"]
    assert sharding_text((8,), mesh, P("device")) == (
        "shape (8,), P('device'), mesh (host=2, device=4)\n"
        "host 0: dev 0 [0:2]  dev 1 [2:4]  dev 2 [4:6]  dev 3 [6:8]\n"
        "host 1: dev 4 [0:2]  dev 5 [2:4]  dev 6 [4:6]  dev 7 [6:8]\n"
        "4 tiles of shape (2,); each tile is held by 2 devices, on 2 different hosts.\n"
        "split: dim 0 over 'device' (4 ways); copied along unused mesh axis 'host' (2 copies)."
    )
    text = sharding_text((8, 4), mesh, P(("host", "device")))
    assert "host 1: dev 4 [4:5, :]  dev 5 [5:6, :]  dev 6 [6:7, :]  dev 7 [7:8, :]" in text
    assert "each tile is held by exactly 1 device (no copies)" in text
    assert "all on the same host" in sharding_text((8,), mesh, P("host"))
    assert "held by all 8 devices (fully replicated) on 2 hosts" in sharding_text((8, 4), mesh, P())


def test_text_of_an_array_uses_its_sharding(two_hosts):
    mesh = MESHES["2x4"]
    x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P(("device", "host"))))
    assert sharding_text(x) == sharding_text((8, 4), mesh, P(("device", "host")))
    assert str(sharding_layout(x)) == sharding_text(x)


def test_mesh_text(two_hosts):
    assert mesh_text(MESHES["2x4"]) == (
        'mesh (host=2, device=4): 8 devices on 2 hosts; each cell is "device id (host)"\n'
        "        device=0  device=1  device=2  device=3\n"
        "host=0  0 (h0)    1 (h0)    2 (h0)    3 (h0)\n"
        "host=1  4 (h1)    5 (h1)    6 (h1)    7 (h1)"
    )
    assert "host=0  0 (h0)    2 (h0)    4 (h1)    6 (h1)" in mesh_text(MESHES["2x4 interleaved"])
    text = mesh_text(MESHES["2x2x2"])
    assert "host=1:" in text and "x=1  6 (h1)  7 (h1)" in text


INVALID = [
    ((8,), P("batch"), r"uses mesh axis 'batch', but this mesh has 'host' \(size 2\) and 'device' \(size 4\)"),
    ((8, 8), P("host", "host"), r"uses mesh axis 'host' more than once \(dimensions 0 and 1\).*P\(\('host', 'device'\)\)"),
    ((8,), P(("device", "device")), r"uses mesh axis 'device' more than once"),
    ((8,), P("device", None), r"has 2 entries but the array has 1 dimension \(shape \(8,\)\)"),
    ((), P("device"), r"has 1 entries but the array has 0 dimensions"),
    ((6,), P("device"), r"dimension 0 \(size 6\) into 4 pieces.*6 is not divisible by 4.*multiple of 4"),
    ((8, 6), P(None, ("host", "device")), r"dimension 1 \(size 6\) into 8 pieces over mesh axes 'host' \(2\) x 'device' \(4\)"),
    ((8,), P(3), r"entry 0 is 3; each entry must be None, a mesh axis name"),
    ((8,), ("host",), r"spec must be a PartitionSpec"),
    ("8", P(), r"expected a jax.Array or a shape like \(8, 4\)"),
    ((8, -1), P(), r"expected a jax.Array or a shape"),
]


@pytest.mark.parametrize("shape, spec, message", INVALID)
def test_invalid_requests_say_what_to_change(shape, spec, message):
    for call in (sharding_text, draw_sharding):
        with pytest.raises(ValueError, match=message) as info:
            call(shape, MESHES["2x4"], spec)
        error = info.value  # no JAX traceback chained onto the learner's message
        assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    assert plt.get_fignums() == []


def test_arrays_need_a_named_sharding_and_shapes_need_a_mesh():
    with pytest.raises(ValueError, match="SingleDeviceSharding, not a NamedSharding.*device_put"):
        sharding_text(jax.numpy.zeros(4))
    with pytest.raises(ValueError, match="not both"):
        sharding_text(jax.device_put(np.zeros(8), NamedSharding(MESHES["2x4"], P())), MESHES["2x4"], P())
    with pytest.raises(ValueError, match="also pass mesh="):
        sharding_text((8,), spec=P())
    with pytest.raises(ValueError, match="expected a jax.sharding.Mesh"):
        draw_mesh("mesh")
    with pytest.raises(ValueError, match="up to 3 dimensions"):
        draw_sharding((2, 2, 2, 2), MESHES["2x4"], P())


def _device_labels(fig):
    return [t for t in fig.findobj(Text) if (t.get_gid() or "").startswith("device-")]


def _boxes(fig):
    """Filled rectangles and rounded badges."""
    return [a for a in fig.findobj(lambda a: isinstance(a, (Rectangle, FancyBboxPatch))) if a.get_fill()]


def _box_under(fig, label):
    """The filled rectangle (or badge) centred on a device label."""
    x, y = label.get_position()
    for r in _boxes(fig):
        cx, cy = r.get_x() + r.get_width() / 2, r.get_y() + r.get_height() / 2
        if abs(cx - x) < 1e-9 and abs(cy - y) < 1e-9:
            return r
    raise AssertionError(f"no rectangle under {label.get_text()!r}")


def _fill_under(fig, label):
    return tuple(_box_under(fig, label).get_facecolor()[:3])


@pytest.mark.parametrize("mesh_name", ["2x4", "2x4 permuted", "8", "2x2x2"])
def test_draw_mesh_labels_every_device_once(two_hosts, mesh_name):
    fig = draw_mesh(MESHES[mesh_name])
    assert isinstance(fig, Figure) and fig.get_figwidth() <= MAX_WIDTH
    labels = _device_labels(fig)
    assert sorted(t.get_gid() for t in labels) == sorted(f"device-{d.id}" for d in DEVS)
    label = next(t for t in labels if t.get_gid() == "device-5")
    assert "5" in label.get_text() and "1" in label.get_text().split("\n")[-1]  # dev 5, host 1
    assert plt.get_fignums() == []


@pytest.mark.parametrize("shape, spec, tiles", [
    ((8,), P("device"), 4),
    ((8, 4), P(), 1),
    ((8, 4), P(("host", "device")), 8),
    ((4, 8, 4), P("host", "device"), 8),
    ((), P(), 1),
])
def test_draw_sharding_one_label_per_device_same_colours_as_the_mesh(two_hosts, shape, spec, tiles):
    mesh = MESHES["2x4"]
    assert len(sharding_layout(shape, mesh, spec).tiles) == tiles
    fig = draw_sharding(shape, mesh, spec)
    assert isinstance(fig, Figure) and fig.get_figwidth() <= MAX_WIDTH
    labels = _device_labels(fig)
    assert sorted(t.get_gid() for t in labels) == sorted(f"device-{d.id}" for d in DEVS)
    mesh_fig = draw_mesh(mesh)
    in_mesh = {t.get_gid(): _fill_under(mesh_fig, t) for t in _device_labels(mesh_fig)}
    for t in labels:
        assert _fill_under(fig, t) == in_mesh[t.get_gid()]
    assert plt.get_fignums() == []


def test_device_colours_are_distinct_and_fixed():
    colours = [device_style(i)["facecolor"] for i in range(16)]
    assert len(set(colours)) == 16
    assert device_style(3) == device_style(3)
    assert device_style(8)["hatch"] and not device_style(0)["hatch"]


def test_draw_sharding_of_an_array_and_a_permuted_mesh(two_hosts):
    mesh = MESHES["2x4 permuted"]
    x = jax.device_put(np.zeros((8, 2)), NamedSharding(mesh, P(("device", "host"))))
    labels = _device_labels(draw_sharding(x))
    assert len(labels) == 8
    assert plt.get_fignums() == []


def _extent(box):
    return box.get_x(), box.get_y(), box.get_x() + box.get_width(), box.get_y() + box.get_height()


@pytest.mark.parametrize("shape, spec, copies", [
    ((8, 4), P("device"), 2),
    ((8, 4), P(), 8),
    ((8,), P("host"), 4),
    ((8,), P("device"), 2),
    ((), P(), 8),
    ((4, 8, 4), P("device"), 2),
    ((2, 8, 4), P(None, "device"), 2),
])
def test_copies_are_badges_inside_one_pale_tile_not_strips(two_hosts, shape, spec, copies):
    """A replicated tile keeps its full extent; its holders are small badges well inside it."""
    mesh = MESHES["2x4"]
    layout = sharding_layout(shape, mesh, spec)
    fig = draw_sharding(shape, mesh, spec)
    tiles = [r for r in fig.findobj(Rectangle) if r.get_gid() == "copies-tile"]
    assert len(tiles) == len(layout.tiles)
    labels = [t for t in fig.findobj(Text) if t.get_gid() == "copies-label"]
    assert len(labels) == len(tiles) and {t.get_text() for t in labels} == {f"{copies} copies"}
    badges = {t.get_gid(): _box_under(fig, t) for t in _device_labels(fig)}
    assert len(badges) == len(DEVS) and all(isinstance(b, FancyBboxPatch) for b in badges.values())
    for tile in tiles:
        tx0, ty0, tx1, ty1 = _extent(tile)
        inside = [b for b in badges.values() if tx0 < _extent(b)[0] and _extent(b)[2] < tx1
                  and ty0 < _extent(b)[1] and _extent(b)[3] < ty1]
        assert len(inside) == copies  # every badge well inside its tile: none spans it
        for b in inside:
            assert b.get_width() < 0.9 * tile.get_width() and b.get_height() < 0.9 * tile.get_height()
    keys = [t.get_text() for t in fig.findobj(Text) if "badges" in t.get_text()]
    assert keys and "copies" in keys[0] and "strips" not in keys[0]
    assert plt.get_fignums() == []


def test_a_tile_with_one_holder_is_filled_with_its_colour(two_hosts):
    fig = draw_sharding((8, 4), MESHES["2x4"], P(("host", "device")))
    assert not [r for r in fig.findobj(Rectangle) if r.get_gid() == "copies-tile"]
    assert not [t for t in fig.findobj(Text) if "badges" in t.get_text() or t.get_gid() == "copies-label"]
    assert not fig.findobj(FancyBboxPatch)
    assert len(_device_labels(fig)) == 8


def test_a_picture_is_described_in_words_from_its_data():
    from helpers.pictures.described import described

    mesh = jax.make_mesh((2, 4), ("host", "device"))
    by_four = lambda d: d.id // 4  # noqa: E731 - host h owns devices 4h..4h+3
    assert repr(draw_mesh(mesh, host_of=by_four)) == ("Picture of the mesh (host=2, device=4): 8 devices on 2 hosts; host=0: "
                                     "devices 0, 1, 2, 3 (host 0) along device; host=1: devices 4, 5, 6, 7 "
                                     "(host 1) along device.")
    words = repr(draw_sharding((8,), mesh, P("device"), host_of=by_four))
    assert words.startswith("Picture of the array's tiles: shape (8,), P('device'), mesh (host=2, device=4); "
                            "host 0: dev 0 [0:2] dev 1 [2:4]")
    assert "each tile is held by 2 devices, on 2 different hosts" in words
    with pytest.raises(ValueError, match="empty"):
        described(draw_mesh(mesh), "  ")
    with pytest.raises(TypeError, match="matplotlib Figure"):
        described("not a figure", "words")
