"""helpers.measure.traces reads profiler traces; helpers.pictures.timeline draws them. The traces are recorded here.

The module's fixture records two traces in this process (8 fake devices), as if two hosts had each
written one: two steps of a jitted sum over a sharded array (XLA makes it an all-reduce), each
step a StepTraceAnnotation, with a TraceAnnotation inside.
"""
import gzip
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import P
from jax.sharding import NamedSharding

from helpers.pictures.timeline import draw_timeline
from helpers.measure.traces import (collective_ms, collectives, during, is_collective, python_call, read_hosts,
                                    read_trace, steps, trace_file)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    mesh = jax.make_mesh((8,), ("d",))
    x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, P("d")))
    total = jax.jit(lambda x: jnp.sum(x, axis=0), out_shardings=NamedSharding(mesh, P()))
    total(x).block_until_ready()  # compiled before the traces
    for host in (0, 1):
        with jax.profiler.trace(str(root / f"host{host}"), create_perfetto_trace=True):
            for step in range(2):
                with jax.profiler.StepTraceAnnotation("train", step_num=step):
                    with jax.profiler.TraceAnnotation("input"):
                        y = x + 1
                    total(y).block_until_ready()
    return root


def test_read_trace_finds_steps_annotations_and_devices(root):
    events = read_trace(root / "host0")
    assert [(s.step, s.thread) for s in steps(events)] == [(0, "python"), (1, "python")]
    assert sum(e.name == "input" for e in events) == 2
    devices = {e.device for e in events if e.device is not None}
    assert devices <= {d.id for d in jax.devices()} and devices
    assert all(e.host == 0 and e.end_us >= e.start_us for e in events)
    assert [e.start_us for e in events] == sorted(e.start_us for e in events)


def test_the_collectives_of_a_step_are_the_all_reduce(root):
    events = read_trace(root / "host0")
    step = steps(events)[1]
    found = collectives(during(events, step))
    assert found and all(e.name.startswith("all-reduce") for e in found)
    assert all(step.start_us <= e.start_us < step.end_us for e in found)
    assert 0 < collective_ms(events, step) <= step.dur_ms


def test_read_hosts_reads_one_directory_per_host(root):
    traces = read_hosts(root)
    assert sorted(traces) == [0, 1]
    assert all(e.host == 1 for e in traces[1])
    assert len(steps(traces[1])) == 2


def test_read_trace_takes_the_file_itself(root):
    assert len(read_trace(trace_file(root / "host0"))) == len(read_trace(root / "host0"))


def test_a_list_of_events_without_metadata_is_read_too(tmp_path):
    path = tmp_path / "plain.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump([{"ph": "X", "name": "all-reduce.1", "ts": 5, "dur": 2, "args": {"device_ordinal": "3"}},
                   {"ph": "B", "name": "ignored", "ts": 1}], f)
    (event,) = read_trace(path)
    assert (event.name, event.device, event.thread, event.dur_ms) == ("all-reduce.1", 3, "", 0.002)


def test_a_directory_without_a_trace_or_with_two_says_so(root, tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace under"):
        trace_file(tmp_path)
    shutil.copytree(root / "host0", tmp_path / "both")
    shutil.copytree(root / "host1" / "plugins" / "profile", tmp_path / "both" / "plugins" / "profile",
                    dirs_exist_ok=True)
    folders = list((tmp_path / "both" / "plugins" / "profile").iterdir())
    if len(folders) == 1:  # both recordings named their folder after the same second: make it two
        shutil.copytree(folders[0], folders[0].with_name(folders[0].name + "_again"))
    with pytest.raises(FileNotFoundError, match="2 traces under .*a directory of its own"):
        trace_file(tmp_path / "both")
    with pytest.raises(FileNotFoundError, match="no host directories"):
        read_hosts(tmp_path / "both")


@pytest.mark.parametrize("name, collective", [
    ("all-reduce", True), ("all-reduce.5", True), ("all-gather.2", True), ("reduce-scatter.1", True),
    ("all-reduce-start.3", True), ("psum_invariant.7", True), ("reduce_scatter.7", True), ("all_gather.3", True),
    ("ppermute.3", True), ("end: all-reduce.5", False), ("dot.2", False), ("add_tanh_fusion", False),
    ("wrapped_copy", False), ("train", False),
])
def test_is_collective(name, collective):
    assert is_collective(name) is collective


def test_draw_timeline_has_a_row_per_host_thread_and_device(root):
    traces = read_hosts(root)
    fig = draw_timeline(traces, steps=(1,))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    devices = sorted({e.device for e in traces[0] if e.device is not None})
    assert labels[0] == "host 0 Python" and labels[1:1 + len(devices)] == [f"host 0 device {d}" for d in devices]
    assert len(labels) == 2 * (1 + len(devices))


def test_draw_timeline_names_a_step_without_collectives(root):
    with pytest.raises(ValueError, match="no collective in step 5"):
        draw_timeline(read_hosts(root), steps=(5,))


def test_a_python_call_is_named_without_its_line_number():
    assert python_call("$pjit.py:491 _trace_for_jit") == "pjit.py _trace_for_jit"
    assert python_call("$pjit.py:466 _trace_for_jit") == "pjit.py _trace_for_jit"  # jax 0.10.2's line
    assert python_call("backend_compile_and_load") is None
    assert python_call("all-reduce.5") is None


def test_draw_timeline_lines_up_a_loop_that_does_not_block():
    """Host 0 dispatches steps 0-1 at once and its devices run their all-reduces later, outside the step
    annotations; host 1 sleeps in each step. Each device's n-th collective is step n's: both hosts' step-1
    all-reduces end at the same place."""
    from helpers.measure.traces import Event
    from helpers.pictures.timeline import _offsets

    def step(host, n, start, dur):
        return Event(host, "train", start, dur, "python", step=n)

    def all_reduce(host, start, end):
        return Event(host, "all-reduce.5", start, end - start, "tf_XLAExecute/1", device=host)

    traces = {0: [step(0, 0, 0, 10), step(0, 1, 10, 1), all_reduce(0, 11, 300), all_reduce(0, 300, 600)],
              1: [step(1, 0, 0, 290), all_reduce(1, 290, 1300), step(1, 1, 1290, 300), all_reduce(1, 1590, 1600)]}
    offsets = _offsets(traces, first_step=1)
    assert (offsets[0], offsets[1]) == (600, 1600)
    assert "2 hosts" in repr(draw_timeline(traces, steps=(1,)))
