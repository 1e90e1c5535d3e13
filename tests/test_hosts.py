"""helpers.emulated.hosts: the one-process emulation equals real multi-process JAX, device by device.

The real side runs ONE launcher run (2 processes x 4 fake devices) that loops over every case
and prints JSON; the emulation side runs the same cases in one fresh 8-device process. Both
key each device's buffer by its position in the mesh.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import launch
from helpers.emulated import topology

# Shared by both sides: meshes are built from jax.devices() positions, which are the same in
# a real 2 x 4 run (process 0's devices first) and in one process with 8 devices.
CASES_SRC = r'''
import json
import numpy as np
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def meshes():
    d = np.array(jax.devices())
    return {
        "host_device": Mesh(d.reshape(2, 4), ("host", "device")),
        "device_host": Mesh(d.reshape(2, 4).T, ("device", "host")),
        # host 0's devices at mesh columns 0 and 2 of both rows: not a contiguous block
        "interleaved": Mesh(d[[0, 4, 1, 5, 2, 6, 3, 7]].reshape(2, 4), ("host", "device")),
        # notebook 03's mesh B: each row mixes the hosts, yet host 0's devices form one 2 x 2 block
        "twisted": Mesh(d.reshape(4, 2).T, ("host", "device")),
        # notebook 03's exercise 03.2: jax.make_mesh((4, 2), ("device", "host")) on CPU
        "devices_first": Mesh(d.reshape(4, 2), ("device", "host")),
    }

SPECS = {
    "P()": P(),
    "P('host')": P("host"),
    "P('device')": P("device"),
    "P(('host','device'))": P(("host", "device")),
    "P(('device','host'))": P(("device", "host")),
    "P(None,'device')": P(None, "device"),
    "P('host','device')": P("host", "device"),
}

def host_data(h):
    return (np.arange(16, dtype=np.float32).reshape(4, 4) + 100 * h)

def cases():
    out = []
    for m in meshes():
        for s in SPECS:
            out.append(("mapld", m, s, None))
    out.append(("mapld", "host_device", "P('device')", (4, 4)))
    out.append(("mapld", "host_device", "P(('host','device'))", (8, 4)))
    out.append(("mapld", "interleaved", "P('host')", (8, 4)))
    out.append(("mapld", "host_device", "P(('host','device'))", (4, 4)))  # each host passes the whole array
    for m in ("host_device", "device_host", "interleaved", "twisted", "devices_first"):
        for s in ("P()", "P('host')", "P('device')", "P(('host','device'))", "P(None,'device')"):
            out.append(("hla2ga", m, s, None))
    return out

def case_id(c):
    return f"{c[0]}-{c[1]}-{c[2]}" + (f"-global{c[3]}" if c[3] else "")

def describe(x, mesh):
    pos = {d: i for i, d in enumerate(mesh.devices.flat)}
    return {"shape": list(x.shape),
            "buffers": {str(pos[s.device]): np.asarray(s.data).tolist() for s in x.addressable_shards}}

REPORT_CASES = ["mapld-host_device-P('device')", "mapld-host_device-P('host')",
                "mapld-interleaved-P('host')", "mapld-host_device-P(('host','device'))"]

def report(x):
    from helpers.emulated.hosts import replica_report
    r = replica_report(x)
    pos = {d.id: i for i, d in enumerate(jax.devices())}  # real ids are 0-3 and 2048-2051
    return {"consistent": r.consistent, "only_local": r.only_local, "copies": r.copies,
            "slices": [[d.text, [[[pos[i] for i in devs], list(hosts), np.asarray(v).tolist()]
                                 for devs, hosts, v in d.groups]] for d in r.disagreements]}

def run_cases(build):
    ms = meshes()
    results = {}
    for c in cases():
        kind, m, s, gs = c
        try:
            x = build(kind, ms[m], SPECS[s], gs)
            results[case_id(c)] = describe(x, ms[m])
            if case_id(c) in REPORT_CASES:
                results[case_id(c)]["report"] = report(x)
        except Exception as e:
            results[case_id(c)] = {"error": type(e).__name__, "message": str(e)}
    return results
'''

REAL_DRIVER = r'''
from helpers.launch import initialize
initialize()
from jax.experimental import multihost_utils

def build(kind, mesh, spec, gs):
    local = host_data(jax.process_index())
    if kind == "mapld":
        return jax.make_array_from_process_local_data(NamedSharding(mesh, spec), local, gs)
    return multihost_utils.host_local_array_to_global_array(local, mesh, spec)

print("RESULT " + json.dumps(run_cases(build)))
'''

EMU_DRIVER = r'''
from helpers.emulated import hosts
from helpers.emulated.topology import emulate_hosts

emulate_hosts(2)  # as the notebooks' first cell does: building an array does not set it

def build(kind, mesh, spec, gs):
    data = [host_data(0), host_data(1)]
    if kind == "mapld":
        return hosts.make_array_from_process_local_data(NamedSharding(mesh, spec), data, gs)
    return hosts.host_local_array_to_global_array(data, mesh, spec)

print("RESULT " + json.dumps(run_cases(build)))
'''


def _case_ids() -> list[str]:
    ns: dict = {}
    exec(CASES_SRC, ns)  # defines functions only; nothing starts JAX
    return [ns["case_id"](c) for c in ns["cases"]()]


CASE_IDS = _case_ids()


@pytest.fixture(scope="module")
def real_results() -> dict:
    result = launch.run(source=CASES_SRC + REAL_DRIVER, hosts=2, devices_per_host=4, timeout=120)
    result.check()
    merged: dict = {}
    for out in result.stdout:
        line = next(l for l in out.splitlines() if l.startswith("RESULT "))
        for case, value in json.loads(line[len("RESULT "):]).items():
            if "error" in value:
                merged.setdefault(case, []).append(value)
            else:
                entry = merged.setdefault(case, {"shape": value["shape"], "buffers": {}})
                assert entry["shape"] == value["shape"], f"{case}: processes disagree on shape"
                entry["buffers"].update(value["buffers"])
                if "report" in value:  # every process gathers all buffers: same report
                    assert entry.setdefault("report", value["report"]) == value["report"]
    return merged


@pytest.fixture(scope="module")
def emulated_results() -> dict:
    code = CASES_SRC + EMU_DRIVER
    env = {"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_NUM_CPU_DEVICES": "8"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_there_are_enough_cases():
    assert len(CASE_IDS) >= 12
    assert any(c.startswith("hla2ga-interleaved") for c in CASE_IDS)


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", CASE_IDS)
def test_emulation_equals_a_real_two_process_run(case, real_results, emulated_results):
    real, emu = real_results[case], emulated_results[case]
    if isinstance(real, list):  # JAX raised on the real hosts: the emulation must raise too
        assert "error" in emu, f"real JAX raised {real[0]['error']}: {real[0]['message']}"
        assert emu["error"] == "ValueError", emu
        return
    assert "error" not in emu, emu["message"]
    assert emu["shape"] == real["shape"]
    assert sorted(emu["buffers"], key=int) == sorted(real["buffers"], key=int) == \
        [str(i) for i in range(8)]
    for pos in real["buffers"]:
        np.testing.assert_array_equal(np.asarray(emu["buffers"][pos]),
                                      np.asarray(real["buffers"][pos]),
                                      err_msg=f"{case}: mesh position {pos}")


@pytest.mark.multiprocess
def test_replica_report_agrees_with_a_real_run(real_results, emulated_results):
    ns: dict = {}
    exec(CASES_SRC, ns)
    for case in ns["REPORT_CASES"]:
        real, emu = real_results[case]["report"], emulated_results[case]["report"]
        assert real["only_local"] is False  # the real run gathered every process's buffers
        assert emu == real, case
    assert real_results["mapld-host_device-P('device')"]["report"]["consistent"] is False
    assert real_results["mapld-host_device-P('host')"]["report"]["consistent"] is True


@pytest.mark.multiprocess
def test_the_cases_cover_what_the_notebooks_teach(real_results):
    """Sanity of the ground truth itself (facts 11 and 12 of the course notes)."""
    hd = real_results["mapld-host_device-P('device')"]
    assert hd["shape"] == [4, 4]  # claims replication over hosts...
    assert hd["buffers"]["0"] != hd["buffers"]["4"]  # ...but the replicas differ
    assert real_results["mapld-host_device-P(('host','device'))"]["shape"] == [8, 4]
    assert isinstance(real_results["hla2ga-interleaved-P('host')"], list)  # HLA2GA raises
    assert "contiguous subcube" in real_results["hla2ga-interleaved-P('host')"][0]["message"]
    assert "error" not in real_results["hla2ga-device_host-P('host')"]
    assert "error" not in real_results["hla2ga-twisted-P(('host','device'))"]  # a block, not a row


# ----------------------------------------------------------------- in-process unit tests

@pytest.fixture
def eight():
    """The conftest's 8 fake devices; emulated-host state restored afterwards."""
    import jax

    if jax.device_count() != 8:
        pytest.skip("needs the 8 fake devices that conftest.py sets up")
    with topology.emulated_hosts(1):
        yield jax


def _mesh(order="host_device"):
    import jax
    from jax.sharding import Mesh

    d = np.array(jax.devices())
    if order == "host_device":
        return Mesh(d.reshape(2, 4), ("host", "device"))
    return Mesh(d[[0, 4, 1, 5, 2, 6, 3, 7]].reshape(2, 4), ("host", "device"))


def _sharding(spec, order="host_device"):
    from jax.sharding import NamedSharding

    return NamedSharding(_mesh(order), spec)


def test_uneven_rows_say_how_many_each_host_needs(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with pytest.raises(ValueError, match=r"into 8 equal parts.*6 entries \(2 hosts x 3 each\)"
                                         r".*multiple of 4 entries along axis 0"):
        hosts.make_array_from_process_local_data(_sharding(P(("host", "device"))),
                                                 [np.zeros(3), np.zeros(3)])


def test_host_count_must_divide_the_devices(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with pytest.raises(ValueError, match=r"data for 3 hosts, but 8 devices cannot be split"):
        hosts.make_array_from_process_local_data(_sharding(P("host")), [np.zeros(4)] * 3)


def test_host_count_must_match_the_emulated_hosts(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with topology.emulated_hosts(4), pytest.raises(ValueError, match=r"data for 2 hosts, but this notebook emulates 4"):
        hosts.make_array_from_process_local_data(_sharding(P("host")), [np.zeros(4)] * 2)


def test_hosts_with_conflicting_shapes_are_named(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with pytest.raises(ValueError, match=r"host 0 passed \(4,\) -> global \(8,\); "
                                         r"host 1 passed \(8,\) -> global \(16,\)"):
        hosts.make_array_from_process_local_data(_sharding(P(("host", "device"))),
                                                 [np.zeros(4), np.zeros(8)])


def test_global_shape_that_fits_neither_whole_nor_part(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with pytest.raises(ValueError, match=r"host 0's data has 4 entries along axis 0.*whole "
                                         r"axis \(16\) or its own part of it \(8\)"):
        hosts.make_array_from_process_local_data(_sharding(P(("host", "device"))),
                                                 [np.zeros(4)] * 2, global_shape=(16,))
    with pytest.raises(ValueError, match=r"10 entries, and 10 is not a multiple of 8"):
        hosts.make_array_from_process_local_data(_sharding(P(("host", "device"))),
                                                 [np.zeros(4)] * 2, global_shape=(10,))


def test_other_input_mistakes(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with pytest.raises(ValueError, match="one numpy array per emulated host"):
        hosts.make_array_from_process_local_data(_sharding(P("host")), np.zeros(4))
    with pytest.raises(ValueError, match="different dtypes"):
        hosts.make_array_from_process_local_data(_sharding(P("host")),
                                                 [np.zeros(4), np.zeros(4, dtype=np.int32)])
    with pytest.raises(ValueError, match=r"describes 2 array axes, but the hosts' data have 1"):
        hosts.make_array_from_process_local_data(_sharding(P("host", "device")), [np.zeros(4)] * 2)
    with pytest.raises(ValueError, match="without a mesh"):
        hosts.make_array_from_process_local_data(P("host"), [np.zeros(4)] * 2)


def test_hla2ga_refuses_a_mesh_whose_host_blocks_are_not_contiguous(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    with pytest.raises(ValueError, match=r"contiguous subcube.*host 0's devices are spread out"
                                         r".*make_array_from_process_local_data"):
        hosts.host_local_array_to_global_array([np.zeros(4)] * 2, _mesh("interleaved"), P("host"))
    with pytest.raises(ValueError, match=r"axis 0 of host 0's data .* into 4 equal parts.*3 entries"):
        hosts.host_local_array_to_global_array([np.zeros(3)] * 2, _mesh(), P(("host", "device")))


def test_replica_report_names_the_disagreeing_devices_and_hosts(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    x = hosts.make_array_from_process_local_data(_sharding(P("device")),
                                                 [np.arange(4.0), 100 + np.arange(4.0)])
    with topology.emulated_hosts(2):  # building x left the emulated host count alone
        report = hosts.replica_report(x)
    assert topology.num_hosts() == 1
    assert not report.consistent
    assert str(report) == repr(report)
    assert str(report).splitlines()[:4] == [
        "replicas DISAGREE on 4 of 4 slices of the (4,) array:",
        "  slice [0:1]:",
        "    device 0 (host 0): [0.]",
        "    device 4 (host 1): [100.]",
    ]
    assert [g[1] for g in report.disagreements[0].groups] == [(0,), (1,)]


def test_replica_report_when_all_is_well(eight):
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    same = [np.arange(4.0), np.arange(4.0)]
    assert hosts.replica_report(
        hosts.make_array_from_process_local_data(_sharding(P("device")), same)).consistent
    x = hosts.make_array_from_process_local_data(_sharding(P("host")), same)
    assert str(hosts.replica_report(x)) == (
        "replicas agree: each of the 2 slices of the (8,) array is held by 4 devices, "
        "and all copies are equal")
    y = hosts.make_array_from_process_local_data(_sharding(P(("host", "device"))), same)
    assert str(hosts.replica_report(y)) == (
        "no replicas: each of the 8 slices of the (8,) array lives on one device")


def test_interleaved_mesh_places_rows_like_jax(eight):
    """Fact 12: with P(('host','device')) on an interleaved mesh host 0 holds rows 0,2,4,6."""
    from jax.sharding import PartitionSpec as P

    from helpers.emulated import hosts

    x = hosts.make_array_from_process_local_data(
        _sharding(P(("host", "device")), "interleaved"), [np.arange(4.0), 10 + np.arange(4.0)])
    host0_rows = sorted(s.index[0].start for s in x.addressable_shards if s.device.id < 4)
    assert host0_rows == [0, 2, 4, 6]
    np.testing.assert_array_equal(np.asarray(x), [0, 10, 1, 11, 2, 12, 3, 13])
