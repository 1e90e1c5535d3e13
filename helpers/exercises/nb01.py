"""Exercises of notebook 01: meshes, axis names, and which host owns which cell."""
from __future__ import annotations

import re

import jax
import numpy as np
from jax.sharding import Mesh

from helpers.exercises import forms
from helpers.exercises.core import Kernel, Mistake, describe, register
from helpers.exercises.kinds import ProgramExercise, ValueExercise, alone
from helpers.exercises.rules import OutputRule, ValueRule
from helpers.emulated.topology import host_of

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)


# ------------------------------------------------------------------ 01.1 build the mesh

def _given(mesh) -> list:
    """The devices the judge hands build_mesh for a layout: the mesh's, in reverse (any order is allowed)."""
    return list(mesh.devices.flat)[::-1]


def _in_id_order(devices: list, num_hosts: int) -> list:
    return np.reshape(sorted(d.id for d in devices), (num_hosts, -1)).tolist()


def _built(build_mesh, mesh) -> tuple:
    """What build_mesh makes of the layout's devices: ('mesh', names, device-id rows, probe), or what it is
    instead. When the rows are in id order, `probe` is the rows it makes of half the devices (id order again
    means it sorts the list it is given; jax.devices() would bring devices from outside that half)."""
    given, num_hosts = _given(mesh), mesh.shape["host"]
    built = build_mesh(given, num_hosts)
    if isinstance(built, Mesh):
        rows = [[d.id for d in row] for row in built.devices]
        return ("mesh", tuple(built.axis_names), rows,
                _half_rows(build_mesh, given[: len(given) // 2], num_hosts) if rows == _in_id_order(given, num_hosts)
                else None)
    if hasattr(built, "shape") and hasattr(built, "reshape"):
        return ("grid", describe(built))
    return ("other", describe(built))


def _half_rows(build_mesh, half: list, num_hosts: int) -> list | None:
    try:
        built = build_mesh(half, num_hosts)
        return [[d.id for d in row] for row in built.devices]
    except Exception:  # any failure on half the devices: not a sorted copy of them
        return None


def _sorts(case) -> bool:
    """The mesh holds the given devices in id order, and half of them too: build_mesh sorts its argument."""
    half = _given(case.mesh)[: case.devices // 2]
    return (case.got[2] == _in_id_order(_given(case.mesh), case.layout[0])
            and case.got[3] == _in_id_order(half, case.layout[0]))


def _where(case) -> str:
    return f"for {case.devices} devices on {case.layout[0]} hosts"


def _given_ids(case) -> list:
    return [d.id for d in _given(case.mesh)]


def _want(case) -> list:
    """The right rows: the given devices, host by host."""
    return np.reshape(_given_ids(case), case.layout).tolist()


def _mixed_row(case):
    """(row index, its devices, their hosts) of the first row that holds several hosts' devices, or None."""
    owner = {d: h for h, row in enumerate(_want(case)) for d in row}
    for h, row in enumerate(case.got[2]):
        hosts = sorted({owner.get(d, -1) for d in row})
        if len(hosts) > 1:
            return h, row, hosts
    return None


def _build(body: str) -> str:
    return f"def build_mesh(devices, num_hosts):\n    return {body}\n"


register(ProgramExercise(
    id="01.1", kernel=KERNEL, answer_name="build_mesh", title="a (host, device) mesh from a list of devices",
    solution='''
def build_mesh(devices, num_hosts):
    """A ('host', 'device') mesh: row h holds host h's devices."""
    grid = np.array(devices).reshape(num_hosts, len(devices) // num_hosts)
    return Mesh(grid, ("host", "device"))
''',
    run=_built,
    meshes=((2, 4), (4, 2), (3, 2)),
    families=(
        OutputRule(lambda case: case.got[0] == "grid", example=_build("np.array(devices).reshape(num_hosts, -1)"),
             say=lambda case: f"build_mesh returned the device grid ({case.got[1]}), not a mesh: wrap it as "
                              "Mesh(grid, ('host', 'device')) to give its axes names"),
        OutputRule(lambda case: case.got[0] != "mesh", example=_build("list(devices)"),
             say=lambda case: f"build_mesh should return a jax.sharding.Mesh, but returned {case.got[1]}"),
        OutputRule(lambda case: sorted(case.got[1]) == ["device", "host"] and case.got[1] != ("host", "device"),
             example=_build('Mesh(np.array(devices).reshape(num_hosts, -1), ("device", "host"))'),
             say=lambda case: f"your mesh's axes are named {case.got[1]}: the first axis should run over the "
                              "hosts and be called 'host', the second over each host's devices ('device')"),
        OutputRule(lambda case: case.got[1] != ("host", "device"),
             example=_build('Mesh(np.array(devices).reshape(num_hosts, -1), ("hosts", "devices"))'),
             say=lambda case: f"your mesh's axes are named {case.got[1]}; the course calls them ('host', 'device')"),
        OutputRule(lambda case: np.shape(case.got[2]) == case.layout[::-1],
             example=_build('Mesh(np.array(devices).reshape(-1, num_hosts), ("host", "device"))'),
             say=lambda case: f"{_where(case)} your mesh has shape {np.shape(case.got[2])}: the 'host' axis has "
                              f"{case.layout[1]} entries but there are {case.layout[0]} hosts; reshape to "
                              "(num_hosts, devices per host), hosts first"),
        OutputRule(lambda case: np.shape(case.got[2]) != case.layout,
             example=_build('Mesh(np.array(devices).reshape(1, -1), ("host", "device"))'),
             say=lambda case: f"{_where(case)} your mesh has shape {np.shape(case.got[2])}, but a (host, device) mesh "
                              f"needs {case.layout}: one row per host, one column per device of a host"),
        OutputRule(_sorts, example=_build('Mesh(np.array(sorted(devices, key=lambda d: d.id)).reshape(num_hosts, -1), '
                                    '("host", "device"))'),
             say=lambda case: f"{_where(case)} your mesh holds devices {case.got[2]}, in id order, but the devices "
                              f"you were given come in the order {_given_ids(case)}: keep that order, do not sort "
                              "them. The list comes host by host, whatever the devices' ids"),
        OutputRule(lambda case: sorted(d for row in case.got[2] for d in row) != sorted(_given_ids(case))
             or case.got[2] == _in_id_order(_given(case.mesh), case.layout[0]),  # from jax.devices()
             example=_build('jax.make_mesh((num_hosts, len(devices) // num_hosts), ("host", "device"))'),
             say=lambda case: f"{_where(case)} your mesh holds devices {case.got[2]}, but the devices you were "
                              f"given are {_given_ids(case)}: build the mesh from the `devices` argument, "
                              "not from jax.devices() (with jax.make_mesh, pass devices=devices)"),
        OutputRule(lambda case: _mixed_row(case) is not None,
             example=_build('Mesh(np.array(devices).reshape(-1, num_hosts).T, ("host", "device"))'),
             say=lambda case: "{} row host={} of your mesh holds devices {}, which belong to hosts {}: each row must "
                              "be one host's devices. reshape(num_hosts, -1) keeps them together; a .T or "
                              "reshape(-1, num_hosts) interleaves them".format(_where(case), *_mixed_row(case))),
    ),
    otherwise=lambda case: (f"{_where(case)} your rows are {case.got[2]} but host by host the devices are "
                            f"{_want(case)}: keep the devices in the order you were given them"),
    hints=(
        "Turn the list into a numpy array and reshape it into a grid with one row per host; "
        "then give the two axes their names with Mesh(grid, names).",
        "The list comes host by host: its first len(devices) // num_hosts entries are host 0's. "
        "reshape(num_hosts, -1) keeps those in row 0.",
    ),
))


# ------------------------------------------------------------------ 01.2 host 1's cells

def _host1_cells() -> frozenset:
    """The cells of host 1's devices in the notebook's `shuffled` mesh."""
    shuffled = Mesh(np.array(jax.devices()).reshape(2, 4).T.reshape(2, 4), ("host", "device"))
    return frozenset((r, c) for (r, c), d in np.ndenumerate(shuffled.devices) if host_of(d) == 1)


def _off_mesh(cell: tuple[int, int]) -> bool:
    return not (0 <= cell[0] < 2 and 0 <= cell[1] < 4)


register(ValueExercise(
    id="01.2", kernel=KERNEL, answer_name="host1_cells", title="the cells of host 1's devices in a shuffled mesh",
    solution="host1_cells = [(0, 1), (0, 3), (1, 1), (1, 3)]  # shuffled.devices is [[0 4 1 5] [2 6 3 7]]",
    form=forms.cells(like="[(0, 1), (1, 2)]"),
    right=_host1_cells,
    wrong={
        frozenset({(1, 0), (1, 1), (1, 2), (1, 3)}):
            "those are the cells of the row LABELLED host=1, but a label does not decide who owns a device: that "
            "row holds devices 2, 6, 3, 7, and only 6 and 7 are host 1's. Look at which device ids land where",
        frozenset({(0, 2), (0, 3), (1, 2), (1, 3)}):
            "that is where host 1 sits in `twisted`; `shuffled` is built differently: work out "
            "reshape(2, 4).T, then reshape(2, 4) again",
    },
    rules=(
        ValueRule(lambda cells: any(map(_off_mesh, cells)), example=frozenset({(1, 0), (3, 0), (1, 1), (3, 1)}),
             say=lambda cells: f"the mesh has 2 rows (host=0, 1) and 4 columns (device=0..3), so "
                               f"{min(filter(_off_mesh, cells))} is not a cell; write (host index, device index), "
                               "row first"),
        ValueRule(lambda cells: len(cells) != 4, example=frozenset({(0, 1), (0, 3), (1, 1)}),
             say=lambda cells: f"host 1 owns 4 devices (4, 5, 6, 7), so 4 cells, but you gave {len(cells)}"),
    ),
    otherwise=lambda cells: (f"cell {min(cells - _host1_cells())} does not hold one of host 1's devices "
                             "(4, 5, 6, 7); print shuffled.devices and look for them"),
    hints=(
        "Work out the device grid step by step: reshape(2, 4) gives [[0 1 2 3] [4 5 6 7]]; "
        "what do .T and then reshape(2, 4) make of it?",
        "Host 1 owns devices 4, 5, 6 and 7 whatever the mesh calls its rows. Find those ids in the grid "
        "and write down their (row, column).",
    ),
))


# ------------------------------------------------------------------ 01.3 which meshes follow hosts

def _candidates() -> dict:
    """The notebook's five meshes."""
    devs = np.array(jax.devices())
    return {
        "A": Mesh(devs.reshape(2, 4), ("host", "device")),
        "B": Mesh(devs[::-1].reshape(2, 4), ("host", "device")),
        "C": Mesh(devs[[0, 1, 4, 5, 2, 3, 6, 7]].reshape(2, 4), ("host", "device")),
        "D": Mesh(devs.reshape(2, 4).T, ("device", "host")),
        "E": jax.make_mesh((4, 2), ("device", "host")),
    }


def _follows_hosts(mesh) -> bool:
    """Each position along 'host' holds one host's devices, and different positions different hosts."""
    along = np.moveaxis(mesh.devices, mesh.axis_names.index("host"), 0)
    owners = [{host_of(d) for d in group.flat} for group in along]
    return all(len(o) == 1 for o in owners) and len(set().union(*owners)) == len(owners)


def _following() -> frozenset:
    return frozenset(name for name, mesh in _candidates().items() if _follows_hosts(mesh))


_WHY = {
    "A": "A is the course's mesh: reshape(2, 4) keeps each host's devices in one row, so its 'host' "
         "axis follows the hosts",
    "B": "B's row host=0 holds devices 7, 6, 5, 4 and row host=1 devices 3, 2, 1, 0: each row is one "
         "host's devices, so its 'host' axis follows the hosts, even though row host=0 is host 1. "
         "The label's number need not match the process index",
    "C": "C's row host=0 holds devices 0, 1, 4, 5: two of host 0's and two of host 1's, so its 'host' "
         "axis does not follow the hosts",
    "D": "D's 'host' axis is its second axis, yet each of its two columns is one host's devices "
         "(0-3 and 4-7): where an axis sits in the mesh does not matter, only which devices lie along it",
    "E": "E is jax.make_mesh((4, 2), ('device', 'host')), which on this machine lays out jax.devices() "
         "in order as a 4 x 2 grid: the column host=0 holds devices 0, 2, 4, 6, from both hosts. Its "
         "axis called 'device' is the one that changes host",
}


def _about(letter: str) -> ValueRule:
    """The mistake about mesh `letter`; its example gets that mesh wrong and every other right."""
    return ValueRule(lambda chosen: (letter in chosen) != (letter in _following()),
                lambda chosen: _WHY[letter] if letter in chosen else f"you left out {letter}: {_WHY[letter]}",
                alone(letter))


def _letters(valid: str, like: str):
    """forms.letters, but a text with words in it ("A, B and D") is told to give a set instead."""
    letters = forms.letters(valid, like)

    def form(answer):
        if isinstance(answer, str):
            words = re.findall(r"[A-Za-z]+", answer)
            word = next((w for w in words if len(w) > 1 and not set(w.upper()) <= set(valid)), None)
            if word is not None:
                raise Mistake(f"give the meshes as a set of letters, like {like}; your text holds the word {word!r}, "
                              "which is no mesh")
        return letters(answer)
    return form


register(ValueExercise(
    id="01.3", kernel=KERNEL, answer_name="follows_hosts",
    title="which meshes have a 'host' axis that follows the hosts",
    solution='follows_hosts = {"A", "B", "D"}',
    form=_letters("ABCDE", like="{'A', 'B'}"),
    right=_following,
    rules=tuple(_about(letter) for letter in "CEABD"),  # a wrong pick first, then a missing one
    hints=(
        "For each mesh, write down its device grid, then take the devices at host=0 and those at "
        "host=1. The axis follows the hosts when each group is one host's devices, and the two groups "
        "are different hosts.",
        "Devices 0-3 are host 0's. The position of the 'host' axis (first or second) does not matter, "
        "nor whether host=0 happens to be host 0. jax.make_mesh on CPU reshapes jax.devices() in order.",
    ),
))


# ------------------------------------------------------------------ 01.4 make_mesh takes the first devices

def _small_mesh_hosts() -> tuple:
    mesh = jax.make_mesh((2, 2), ("host", "device"))
    return tuple(tuple(host_of(d) for d in row) for row in mesh.devices)


_NOT_SPREAD = ("make_mesh does not spread the mesh over the hosts: it takes the first 4 devices of "
               "jax.devices(), 0 to 3, all host 0's")

register(ValueExercise(
    id="01.4", kernel=KERNEL, answer_name="small_mesh_hosts",
    title="the hosts behind jax.make_mesh((2, 2), ...) on 2 hosts x 4 devices",
    solution="small_mesh_hosts = [[0, 0], [0, 0]]  # devices 0-3: the first 4 of jax.devices(), all host 0's",
    form=forms.grid(2, 2, like="[[0, 1], [0, 1]]", what="host numbers"),
    right=_small_mesh_hosts,
    wrong={
        ((0, 0), (1, 1)): "jax.make_mesh does not pick 2 devices from each host: it takes the first 4 devices "
                          "of jax.devices(), 0 to 3, and those are all host 0's. Its 'host' axis never leaves host 0",
        ((0, 1), (0, 1)): _NOT_SPREAD,
        ((0, 1), (1, 0)): _NOT_SPREAD,
        ((0, 1), (2, 3)): "those are the ids of the mesh's devices; give the host that owns each one instead",
    },
    rules=(
        ValueRule(lambda rows: any(h not in (0, 1) for row in rows for h in row), example=((0, 1), (4, 5)),
             say=lambda rows: f"there are 2 hosts, numbered 0 and 1: {max(h for row in rows for h in row)} is a "
                              "device id, not a host number. Give the host that owns each device"),
    ),
    otherwise=lambda rows: (f"not quite: {[list(r) for r in rows]}. make_mesh((2, 2), ...) uses devices 0, 1, 2, 3; "
                            "which host owns those?"),
    hints=(
        "make_mesh needs only 2 x 2 = 4 devices. Which 4 of the 8 does it take?",
        "It takes them from the start of jax.devices(), in order, whatever the axes are called.",
    ),
))
