"""Exercises of notebook 07: data-parallel training across hosts (07.1, the fix, is defined last)."""
from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Kernel

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
from helpers.exercises.core import Mistake, describe, register
from helpers.exercises.judges import require_spec


def _judge_device5_rows(answer) -> None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in answer):
        raise Mistake(f"expected a pair of whole numbers (start, stop), like (0, 32); got {describe(answer)}")
    start, stop = answer
    if (start, stop) == (160, 192):
        return
    if (start, stop) == (32, 64):
        raise Mistake("(32, 64) are device 5's rows within host 1's own 128 rows; in the global "
                      "array host 0's 128 rows come first, so count from there")
    if (start, stop) == (192, 224):
        raise Mistake("devices count from 0: device 5 is the sixth device, so it holds the sixth "
                      "block of 32 rows")
    if (start, stop) == (5, 6) or stop - start == 1:
        raise Mistake("each device holds a block of rows, not one row: 256 rows over 8 devices")
    if (start, stop) in ((128, 256), (0, 256), (0, 128)):
        raise Mistake("P(('host', 'device')) splits the 256 rows over all 8 devices, so each "
                      "device holds 256 / 8 rows, not a host's share or the whole batch")
    if stop - start != 32:
        raise Mistake(f"({start}, {stop}) spans {stop - start} rows; with 256 rows over 8 "
                      "devices each device holds 32")
    raise Mistake(f"({start}, {stop}) is some device's size of block, but not device 5's; devices "
                  "take blocks in mesh order: host 0's devices 0-3, then host 1's 4-7")


register(Judged(
    id="07.2", kernel=KERNEL,
    title="device 5 holds rows 160..191 of the global batch",
    answer_name="device5_rows",
    solution="device5_rows = (160, 192)  # host 1's rows are 128..255; its second device gets 160..191",
    judged_by=_judge_device5_rows,
    hints=(
        "The global array puts host 0's 128 rows first, then host 1's 128 rows.",
        "Within a host, the 4 devices split the host's rows in order, 32 each.",
    ),
    wrong_answers=(
        WrongAnswer("device5_rows = (32, 64)", "host 0's 128 rows come first"),
        WrongAnswer("device5_rows = (192, 224)", "devices count from 0"),
        WrongAnswer("device5_rows = (128, 256)", "each device holds 256 / 8 rows"),
        WrongAnswer("device5_rows = (5, 6)", "a block of rows, not one row"),
        WrongAnswer("device5_rows = [160, 190]", "spans 30 rows"),
    ),
))


def _groups(answer) -> list:
    if not isinstance(answer, (list, tuple)) or not answer:
        raise Mistake(f"expected a list of groups of device ids, like [[0, 1], [2, 3, 4, 5, 6, 7]]; "
                      f"got {describe(answer)}")
    groups = []
    for group in answer:
        if not isinstance(group, (list, tuple, set, frozenset)) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in group):
            raise Mistake(f"each group must be a list of device ids like [0, 1]; got {describe(group)}")
        groups.append(frozenset(group))
    flat = [d for g in groups for d in g]
    if sorted(flat) != list(range(8)):
        raise Mistake("list each of the 8 devices 0..7 exactly once, in the group of devices "
                      "whose copies are equal")
    return groups


def _judge_equal_copies(answer) -> None:
    groups = set(_groups(answer))
    if groups == {frozenset(range(4)), frozenset(range(4, 8))}:
        return
    if groups == {frozenset(range(8))}:
        raise Mistake("out_specs=P() promises that all 8 copies are equal, but the batch typed as "
                      "the same on every host means the gradient is summed over 'device' only: "
                      "the two hosts' copies step with different data")
    if groups == {frozenset({d, d + 4}) for d in range(4)}:
        raise Mistake("devices 0 and 4 hold the same slice of the P('device') batch (its "
                      "claimed copies), but the gradient is averaged over 'device', over one "
                      "host's 4 devices, so the copies agree within a host, not across")
    if groups == {frozenset({d}) for d in range(8)}:
        raise Mistake("the pmean over 'device' gives a host's 4 devices the same gradient, so "
                      "their copies stay equal; only the hosts differ")
    raise Mistake("not these groups: ask which devices the gradient is averaged over "
                  "(the axis named in pmean), and which devices see the same data")


register(Judged(
    id="07.3", kernel=KERNEL,
    title="with P('device') each host's devices agree, the hosts do not",
    answer_name="equal_copies",
    solution="equal_copies = [[0, 1, 2, 3], [4, 5, 6, 7]]  # one group per host",
    judged_by=_judge_equal_copies,
    hints=(
        "The gradient is averaged with pmean over 'device' only. Which devices does that average "
        "connect?",
        "Host 0 owns devices 0-3 and host 1 owns devices 4-7; each host's devices see that host's rows.",
    ),
    wrong_answers=(
        WrongAnswer("equal_copies = [[0, 1, 2, 3, 4, 5, 6, 7]]", "summed over 'device' only"),
        WrongAnswer("equal_copies = [[0, 4], [1, 5], [2, 6], [3, 7]]", "agree within a host, not across"),
        WrongAnswer("equal_copies = [[0], [1], [2], [3], [4], [5], [6], [7]]", "only the hosts differ"),
        WrongAnswer("equal_copies = [[0, 1, 2, 3], [4, 5, 6]]", "each of the 8 devices"),
    ),
))

def _axis_set(mean_over) -> frozenset:
    names = mean_over if isinstance(mean_over, (tuple, list)) else (mean_over,)
    if not names or not all(isinstance(n, str) for n in names):
        raise Mistake(f"mean_over names mesh axes, like 'host' or ('host', 'device'); got "
                      f"{describe(mean_over)}")
    unknown = [n for n in names if n not in ("host", "device")]
    if unknown:
        raise Mistake(f"the mesh has the axes 'host' and 'device'; {unknown[0]!r} is not one of them")
    return frozenset(names)


def _judge_fix(answer) -> None:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from helpers import hosts, topology, train
    from helpers.exercises.judges import same_placement

    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Mistake(f"expected a pair (batch_spec, mean_over), like (P('device'), 'device'); "
                      f"got {describe(answer)}")
    spec, axes = require_spec(answer[0]), _axis_set(answer[1])
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    shape = (train.GLOBAL_BATCH, train.IN_DIM)
    both = frozenset({"host", "device"})
    if same_placement(mesh, spec, P("device"), shape):
        if axes == frozenset({"device"}):
            raise Mistake("that is the step from the shard_map question the course started from: it runs, but P('device') claims every host "
                          "has the same rows, so each host's copy trains on its own data")
        raise Mistake("P('device') types the batch as the same on every host, so JAX refuses "
                      "one average over both axes (section 5 shows JAX raising): the spec must change too")
    if same_placement(mesh, spec, P("host"), shape):
        raise Mistake("P('host') gives each host's whole 128 rows to every one of its 4 devices: "
                      "the 4 devices repeat the same work instead of splitting it")
    if same_placement(mesh, spec, P(("device", "host")), shape):
        raise Mistake("P(('device', 'host')) splits the rows 8 ways but device-major, so the "
                      "global array interleaves blocks of host 0 and host 1; list the axes in "
                      "mesh order, host first")
    if same_placement(mesh, spec, P(), shape):
        raise Mistake("P() replicates the batch: every device would claim to hold all rows, and "
                      "every host to have the same ones")
    if len(spec) > 1 and spec[1] is not None:
        raise Mistake(f"{spec} splits axis 1 (the {train.IN_DIM} features) too; every device "
                      "needs whole examples. Put both mesh axes in one tuple for axis 0")
    if not same_placement(mesh, spec, P(("host", "device")), shape):
        raise Mistake(f"{spec} does not give every device its own rows; split axis 0 over both "
                      "mesh axes")
    if axes == frozenset({"device"}):
        raise Mistake("the batch spec is right, but averaging over 'device' only leaves the two "
                      "hosts with different losses, and out_specs=P() then fails: average over "
                      "every axis the batch is split over")
    if axes == frozenset({"host"}):
        raise Mistake("averaging over 'host' only leaves a host's 4 devices with different "
                      "losses: average over every axis the batch is split over")
    if axes != both:
        raise Mistake("average over both mesh axes")
    before = topology.num_hosts()
    topology.emulate_hosts(2)
    try:  # what the two hosts' calls would build, compared with the reference batch
        parts = [train.host_batch(7, h, 2)[0] for h in range(2)]
        x = hosts.make_array_from_process_local_data(NamedSharding(mesh, spec), parts)
    finally:
        topology.emulate_hosts(before)
    if not np.array_equal(np.asarray(x), train.global_batch_at(7)[0]):
        raise Mistake("the global array is not the reference batch row for row")


register(Judged(
    id="07.1", kernel=KERNEL,
    title="P(('host', 'device')), averaged over ('host', 'device'): one model, all the data",
    answer_name="fix",
    solution="fix = (P(('host', 'device')), ('host', 'device'))  # split over both, average over both",
    judged_by=_judge_fix,
    hints=(
        "The batch axis (axis 0) must be split 8 ways, so both mesh axes take part; several mesh "
        "axes on one array axis go together in a tuple, in mesh order.",
        "The loss must be the mean over every example of the global batch: average over every "
        "axis the batch is split over.",
    ),
    wrong_answers=(
        WrongAnswer("fix = (P('device'), 'device')", "the shard_map question the course started from"),
        WrongAnswer("fix = (P('device'), ('host', 'device'))", "the spec must change too"),
        WrongAnswer("fix = (P(('host', 'device')), 'device')", "different losses"),
        WrongAnswer("fix = (P('host'), ('host', 'device'))", "repeat the same work"),
        WrongAnswer("fix = (P(('device', 'host')), ('host', 'device'))", "host first"),
        WrongAnswer("fix = (P('host', 'device'), ('host', 'device'))", "splits axis 1"),
        WrongAnswer("fix = (P(('host', 'device')), ('host', 'chip'))", "not one of them"),
    ),
))
