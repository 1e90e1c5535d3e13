"""Exercises of notebook 01: meshes, axis names, and which host owns which cell."""
from __future__ import annotations

from typing import Any

from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Kernel

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
from helpers.exercises.core import Mistake, call_learner, describe, register


def _ids(devices) -> list:
    return [d.id for d in devices]


# ------------------------------------------------------------------ 01.1 build the mesh

def _judge_build_mesh(build_mesh) -> None:
    import jax
    from jax.sharding import Mesh

    devs = jax.devices()
    cases = [(list(devs), 2), (list(devs)[::-1], 2), (list(devs), 4), (list(devs)[:6], 3)]
    for devices, num_hosts in cases:
        per_host = len(devices) // num_hosts
        mesh = call_learner(build_mesh, list(devices), num_hosts)
        where = f"for {len(devices)} devices on {num_hosts} hosts"
        if not isinstance(mesh, Mesh):
            if hasattr(mesh, "shape") and hasattr(mesh, "reshape"):
                raise Mistake(f"build_mesh returned the device grid ({describe(mesh)}), not a mesh: "
                              "wrap it as Mesh(grid, ('host', 'device')) to give its axes names")
            raise Mistake(f"build_mesh should return a jax.sharding.Mesh, but returned {describe(mesh)}")
        names = tuple(mesh.axis_names)
        if names != ("host", "device"):
            if sorted(names) == ["device", "host"]:
                raise Mistake(f"your mesh's axes are named {names}: the first axis should run over the "
                              "hosts and be called 'host', the second over each host's devices ('device')")
            raise Mistake(f"your mesh's axes are named {names}; the course calls them ('host', 'device')")
        shape = tuple(mesh.devices.shape)
        if shape != (num_hosts, per_host):
            if shape == (per_host, num_hosts):
                raise Mistake(f"{where} your mesh has shape {shape}: the 'host' axis has {per_host} "
                              f"entries but there are {num_hosts} hosts; reshape to "
                              "(num_hosts, devices per host), hosts first")
            raise Mistake(f"{where} your mesh has shape {shape}, but a (host, device) mesh needs "
                          f"({num_hosts}, {per_host}): one row per host, one column per device of a host")
        got = [_ids(row) for row in mesh.devices]
        want = [_ids(devices[h * per_host:(h + 1) * per_host]) for h in range(num_hosts)]
        if got == want:
            continue
        from_jax = [_ids(devs[h * per_host:(h + 1) * per_host]) for h in range(num_hosts)]
        if set(_ids(mesh.devices.flat)) != set(_ids(devices)) or got == from_jax:
            raise Mistake(f"{where} your mesh holds devices {got}, but the devices you were given are "
                          f"{_ids(devices)}: build the mesh from the `devices` argument, not from "
                          "jax.devices() (with jax.make_mesh, pass devices=devices)")
        owner = {d.id: i // per_host for i, d in enumerate(devices)}
        for h, row in enumerate(got):
            hosts = sorted({owner[i] for i in row})
            if len(hosts) > 1:
                raise Mistake(f"{where} row host={h} of your mesh holds devices {row}, which belong to "
                              f"hosts {hosts}: each row must be one host's devices. reshape(num_hosts, -1) "
                              "keeps them together; a .T or reshape(-1, num_hosts) interleaves them")
        raise Mistake(f"{where} your rows are {got} but host by host the devices are {want}: keep the "
                      "devices in the order you were given them")


register(Judged(
    id="01.1", kernel=KERNEL,
    title="a (host, device) mesh from a list of devices",
    answer_name="build_mesh",
    solution='''
def build_mesh(devices, num_hosts):
    """A ('host', 'device') mesh: row h holds host h's devices."""
    grid = np.array(devices).reshape(num_hosts, len(devices) // num_hosts)
    return Mesh(grid, ("host", "device"))
''',
    judged_by=_judge_build_mesh,
    hints=(
        "Turn the list into a numpy array and reshape it into a grid with one row per host; "
        "then give the two axes their names with Mesh(grid, names).",
        "The list comes host by host: its first len(devices) // num_hosts entries are host 0's. "
        "reshape(num_hosts, -1) keeps those in row 0.",
    ),
    wrong_answers=(
        WrongAnswer('''
def build_mesh(devices, num_hosts):
    return Mesh(np.array(devices).reshape(-1, num_hosts), ("host", "device"))
''', "reshape to (num_hosts, devices per host), hosts first"),
        WrongAnswer('''
def build_mesh(devices, num_hosts):
    return Mesh(np.array(devices).reshape(-1, num_hosts).T, ("host", "device"))
''', "each row must be one host's devices"),
        WrongAnswer('''
def build_mesh(devices, num_hosts):
    return Mesh(np.array(devices).reshape(num_hosts, -1), ("device", "host"))
''', "the first axis should run over the hosts"),
        WrongAnswer('''
def build_mesh(devices, num_hosts):
    return jax.make_mesh((num_hosts, len(devices) // num_hosts), ("host", "device"))
''', "build the mesh from the `devices` argument"),
        WrongAnswer('''
def build_mesh(devices, num_hosts):
    return np.array(devices).reshape(num_hosts, -1)
''', "not a mesh"),
    ),
))


# ------------------------------------------------------------------ 01.2 host 1's cells

_SHUFFLED_HOST1 = {(0, 1), (0, 3), (1, 1), (1, 3)}


def _as_cells(answer: Any) -> set:
    import numbers

    if isinstance(answer, (str, bytes)) or not isinstance(answer, (list, tuple, set, frozenset)):
        raise Mistake(f"expected a list of (host index, device index) pairs like [(0, 1), (1, 2)], "
                      f"but got {describe(answer)}")
    items = list(answer)
    if items and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in items):
        raise Mistake("those look like device ids; give the mesh cells instead, as "
                      "(host index, device index) pairs, like (0, 1) for row host=0, column device=1")
    cells = set()
    for item in items:
        if (not isinstance(item, (tuple, list)) or len(item) != 2
                or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in item)):
            raise Mistake(f"each cell should be a pair of whole numbers (host index, device index), "
                          f"but one is {describe(item)}")
        cells.add((int(item[0]), int(item[1])))
    return cells


def _judge_host1_cells(answer) -> None:
    cells = _as_cells(answer)
    if cells == _SHUFFLED_HOST1:
        return
    outside = sorted(c for c in cells if not (0 <= c[0] < 2 and 0 <= c[1] < 4))
    if outside:
        raise Mistake(f"the mesh has 2 rows (host=0, 1) and 4 columns (device=0..3), so {outside[0]} "
                      "is not a cell; write (host index, device index), row first")
    if cells == {(1, 0), (1, 1), (1, 2), (1, 3)}:
        raise Mistake("those are the cells of the row LABELLED host=1, but a label does not decide who "
                      "owns a device: that row holds devices 2, 6, 3, 7, and only 6 and 7 are host 1's. "
                      "Look at which device ids land where")
    if cells == {(0, 2), (0, 3), (1, 2), (1, 3)}:
        raise Mistake("that is where host 1 sits in `twisted`; `shuffled` is built differently: "
                      "work out reshape(2, 4).T, then reshape(2, 4) again")
    if len(cells) != 4:
        raise Mistake(f"host 1 owns 4 devices (4, 5, 6, 7), so 4 cells, but you gave {len(cells)}")
    wrong = sorted(cells - _SHUFFLED_HOST1)
    raise Mistake(f"cell {wrong[0]} does not hold one of host 1's devices (4, 5, 6, 7); print "
                  "shuffled.devices and look for them")


register(Judged(
    id="01.2", kernel=KERNEL,
    title="the cells of host 1's devices in a shuffled mesh",
    answer_name="host1_cells",
    solution="host1_cells = [(0, 1), (0, 3), (1, 1), (1, 3)]  # shuffled.devices is [[0 4 1 5] [2 6 3 7]]",
    judged_by=_judge_host1_cells,
    hints=(
        "Work out the device grid step by step: reshape(2, 4) gives [[0 1 2 3] [4 5 6 7]]; "
        "what do .T and then reshape(2, 4) make of it?",
        "Host 1 owns devices 4, 5, 6 and 7 whatever the mesh calls its rows. Find those ids in the grid "
        "and write down their (row, column).",
    ),
    wrong_answers=(
        WrongAnswer("host1_cells = [(1, 0), (1, 1), (1, 2), (1, 3)]", "a label does not decide"),
        WrongAnswer("host1_cells = [4, 5, 6, 7]", "those look like device ids"),
        WrongAnswer("host1_cells = [(0, 2), (0, 3), (1, 2), (1, 3)]", "that is where host 1 sits in `twisted`"),
        WrongAnswer("host1_cells = [(1, 0), (3, 0), (1, 1), (3, 1)]", "row first"),
        WrongAnswer("host1_cells = [(0, 1), (0, 3), (1, 1)]", "so 4 cells"),
    ),
))


# ------------------------------------------------------------------ 01.3 which meshes follow hosts

_FOLLOW = {"A", "B", "D"}
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


def _judge_follow(answer) -> None:
    if isinstance(answer, str):
        letters = [c for c in answer.upper() if c.isalpha()]
    elif isinstance(answer, (set, frozenset, list, tuple)) and all(isinstance(a, str) for a in answer):
        letters = [a.strip().upper() for a in answer]
    else:
        raise Mistake(f"expected a set of mesh letters like {{'A', 'B'}}, but got {describe(answer)}")
    chosen = set(letters)
    unknown = sorted(chosen - set(_WHY))
    if unknown:
        raise Mistake(f"there is no mesh {unknown[0]!r}; the meshes are 'A' to 'E'")
    if chosen == _FOLLOW:
        return
    extra = sorted(chosen - _FOLLOW)
    if extra:
        raise Mistake(_WHY[extra[0]])
    missing = sorted(_FOLLOW - chosen)
    raise Mistake(f"you left out {missing[0]}: " + _WHY[missing[0]])


register(Judged(
    id="01.3", kernel=KERNEL,
    title="which meshes have a 'host' axis that follows the hosts",
    answer_name="follows_hosts",
    solution='follows_hosts = {"A", "B", "D"}',
    judged_by=_judge_follow,
    hints=(
        "For each mesh, write down its device grid, then take the devices at host=0 and those at "
        "host=1. The axis follows the hosts when each group is one host's devices, and the two groups "
        "are different hosts.",
        "Devices 0-3 are host 0's. The position of the 'host' axis (first or second) does not matter, "
        "nor whether host=0 happens to be host 0. jax.make_mesh on CPU reshapes jax.devices() in order.",
    ),
    wrong_answers=(
        WrongAnswer('follows_hosts = {"A", "B"}', "where an axis sits in the mesh does not matter"),
        WrongAnswer('follows_hosts = {"A", "D"}', "need not match the process index"),
        WrongAnswer('follows_hosts = {"A", "B", "C", "D"}', "two of host 0's and two of host 1's"),
        WrongAnswer('follows_hosts = {"A", "B", "D", "E"}', "the column host=0 holds devices 0, 2, 4, 6"),
        WrongAnswer('follows_hosts = ["A", "F"]', "there is no mesh 'F'"),
    ),
))


# ------------------------------------------------------------------ 01.4 make_mesh takes the first devices

def _judge_small_mesh_hosts(answer) -> None:
    import numpy as np

    if not isinstance(answer, (list, tuple, np.ndarray)):
        raise Mistake(f"expected a 2 x 2 grid of host numbers like [[0, 1], [0, 1]], but got {describe(answer)}")
    try:
        grid = np.asarray(answer)
    except ValueError:
        grid = np.asarray(0.5)
    if grid.dtype.kind not in "iu":
        raise Mistake(f"expected a 2 x 2 grid of whole host numbers like [[0, 1], [0, 1]], but got {describe(answer)}")
    if grid.shape != (2, 2):
        raise Mistake(f"the mesh has shape (2, 2), so give a 2 x 2 grid of host numbers; yours has shape {grid.shape}")
    rows = grid.tolist()
    if rows == [[0, 0], [0, 0]]:
        return
    if rows == [[0, 0], [1, 1]]:
        raise Mistake("jax.make_mesh does not pick 2 devices from each host: it takes the first 4 devices "
                      "of jax.devices(), 0 to 3, and those are all host 0's. Its 'host' axis never leaves host 0")
    if rows == [[0, 1], [0, 1]] or rows == [[0, 1], [1, 0]]:
        raise Mistake("make_mesh does not spread the mesh over the hosts: it takes the first 4 devices of "
                      "jax.devices(), 0 to 3, all host 0's")
    raise Mistake(f"not quite: {rows}. make_mesh((2, 2), ...) uses devices 0, 1, 2, 3; which host owns those?")


register(Judged(
    id="01.4", kernel=KERNEL,
    title="the hosts behind jax.make_mesh((2, 2), ...) on 2 hosts x 4 devices",
    answer_name="small_mesh_hosts",
    solution="small_mesh_hosts = [[0, 0], [0, 0]]  # devices 0-3: the first 4 of jax.devices(), all host 0's",
    judged_by=_judge_small_mesh_hosts,
    hints=(
        "make_mesh needs only 2 x 2 = 4 devices. Which 4 of the 8 does it take?",
        "It takes them from the start of jax.devices(), in order, whatever the axes are called.",
    ),
    wrong_answers=(
        WrongAnswer("small_mesh_hosts = [[0, 0], [1, 1]]", "never leaves host 0"),
        WrongAnswer("small_mesh_hosts = [[0, 1], [0, 1]]", "does not spread the mesh over the hosts"),
        WrongAnswer("small_mesh_hosts = [0, 0, 0, 0]", "give a 2 x 2 grid"),
        WrongAnswer("small_mesh_hosts = 'host 0'", "expected a 2 x 2 grid"),
    ),
))
