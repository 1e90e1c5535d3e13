"""Exercises of notebook 08: real multi-process runs."""
from __future__ import annotations

from typing import Callable

import numpy as np
from jax import P

from helpers.training import tiny
from helpers.exercises import forms
from helpers.exercises.core import Kernel, describe, register
from helpers.exercises.kinds import ProgramExercise, ValueExercise, from_hosts
from helpers.exercises.rules import ErrorRule, OutputRule, ValueRule
from helpers.exercises.processes import ProcessExercise

KERNEL = Kernel(devices=8)  # the first cell: use_fake_devices(8)
HOSTS = 2

# ------------------------------------------------------------------ 08.1 the host-local loader

# A 40-row data set, 7 steps of one row per device: with 8 devices a step ends on row 39 and the next starts past
# the end; with 6, step 6 runs past the end within the step (rows 36..41), so each kind of wrapping is tried.
_ROWS, _STEPS = 40, 7
_ORDER = np.random.default_rng(8).permutation(_ROWS)  # row r holds the tag _ORDER[r]: rows are told apart
_DATA_X = np.stack([_ORDER, _ORDER * 10 + 1, _ORDER * 10 + 2], axis=1).astype(np.float32)
_DATA_Y = (_ORDER * 100.0 + 7).astype(np.float32).reshape(_ROWS, 1)


def _rows_read(result) -> tuple | str:
    """The data-set rows a loader returned, or what is wrong with its result (a message)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return f"the loader should return a pair (x, y) of numpy arrays; got {describe(result)}"
    x, y = (np.asarray(a) for a in result)
    if x.ndim != 2 or x.shape[1:] != _DATA_X.shape[1:] or y.ndim != 2 or y.shape[1:] != _DATA_Y.shape[1:]:
        return (f"x should have rows like data_x (shape (rows, {_DATA_X.shape[1]})) and y like data_y (shape "
                f"(rows, 1)); got x {x.shape} and y {y.shape}")
    if len(x) != len(y):
        return f"x has {len(x)} rows but y has {len(y)}: read the same rows of both"
    where = {int(t): r for r, t in enumerate(_ORDER)}
    rows_x = [where.get(int(round(float(v)))) for v in x[:, 0]]
    rows_y = [where.get(int(round((float(v) - 7) / 100))) for v in y[:, 0]]
    if None in rows_x or None in rows_y or not np.array_equal(x, _DATA_X[[r or 0 for r in rows_x]]):
        return "the loader returned values that are not rows of data_x / data_y; return whole rows, e.g. data_x[rows]"
    if rows_x != rows_y:
        return "x and y come from different rows: read the same row numbers from both"
    return tuple(rows_x)


class _Counted(np.ndarray):
    """A data set that counts the rows each read of it takes (`data[rows]`); what a read returns is plain numpy."""

    def __getitem__(self, index):
        out = super().__getitem__(index)
        if isinstance(out, np.ndarray):
            self.rows_read += len(out) if out.ndim else 1
            return out.view(np.ndarray)
        return out


def _counted(data: np.ndarray) -> _Counted:
    out = data.copy().view(_Counted)
    out.rows_read = 0
    return out


def _loads(load_my_rows, mesh) -> tuple:
    """Every host's rows at every step, one row per device of the layout per step, and how many rows of the data
    set it read for them; or a message."""
    hosts, batch = mesh.shape["host"], mesh.size
    reads = []
    for step in range(_STEPS):
        for host in range(hosts):
            data_x, data_y = _counted(_DATA_X), _counted(_DATA_Y)
            rows = _rows_read(load_my_rows(data_x, data_y, step, host, hosts, batch))
            if isinstance(rows, str):
                return rows
            reads.append(((step, host, hosts, batch), rows, max(data_x.rows_read, data_y.rows_read)))
    return tuple(reads)


def _first_wrong_read(case) -> tuple[tuple, tuple]:
    """(split (step, host, num_hosts, global_batch), rows read) of the loader's first read unlike the reference's."""
    return next((split, got) for (split, got, _), (_, want, _) in zip(case.got, case.want) if got != want)


def _over_read(case) -> tuple[tuple, int] | None:
    """(split, rows of the data set read) of the first right read that read more rows than it kept; None if none."""
    return next(((split, read) for (split, got, read), (_, want, _) in zip(case.got, case.want)
                 if got == want and read > len(got)), None)


def _over_read_said(case) -> str:
    (step, host, hosts, batch), read = _over_read(case)
    return (f"your loader returns the right rows, but for (step={step}, host={host}, num_hosts={hosts}, "
            f"global_batch={batch}) it read {read} rows of the data set to keep {batch // hosts}: reading the whole "
            "global batch on every host and slicing it costs every host the whole batch's reading. Read only "
            "this host's rows")


def _loader(rows: str, ret: str = "data_x[rows], data_y[rows]") -> str:
    return (f"def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):\n"
            f"    per_host = global_batch // num_hosts\n    rows = {rows}\n    return {ret}\n")


def _said(text: str) -> Callable:
    """The message "for (step=..., host=..., ...) `text`" about the loader's first wrong read, with {got} (the
    rows it read), {batch}, {per_host}, {hosts} of that read and {rows} (the data set's) filled in."""
    def message(case) -> str:
        (step, host, hosts, batch), got = _first_wrong_read(case)
        return (f"for (step={step}, host={host}, num_hosts={hosts}, global_batch={batch}) "
                + text.format(got=len(got), batch=batch, per_host=batch // hosts, hosts=hosts, rows=_ROWS))
    return message


def _read_wrong_count(case) -> bool:
    if isinstance(case.got, str) or _over_read(case):
        return False
    (_, _, hosts, batch), got = _first_wrong_read(case)
    return len(got) != batch // hosts


register(ProgramExercise(
    id="08.1", kernel=KERNEL, answer_name="load_my_rows",
    title="a host-local loader: one contiguous block of each step's global batch",
    solution='''
import numpy as np


def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    """This host's (x, y) rows of step `step`'s global batch."""
    per_host = global_batch // num_hosts
    first = step * global_batch + host * per_host
    rows = (first + np.arange(per_host)) % len(data_x)
    return data_x[rows], data_y[rows]
''',
    run=_loads,
    meshes=((2, 4), (4, 2), (3, 2)),
    wrong={
        _loader("(step * global_batch + np.arange(per_host)) % len(data_x)"):
            _said("your loader read host 0's rows: every host reads the same rows. Offset each host by "
                  "host * (global_batch // num_hosts)"),
        _loader("(step * global_batch + np.arange(global_batch)) % len(data_x)"):
            _said("your loader read all {batch} rows of the global batch; each host reads only its own {per_host}"),
        _loader("((step + host) * per_host + np.arange(per_host)) % len(data_x)"):
            _said("your rows overlap another step's: a step covers global_batch rows of the data set, so step s "
                  "starts at row s * global_batch"),
        _loader("(step * global_batch + host + num_hosts * np.arange(per_host)) % len(data_x)"):
            _said("your loader takes one row in every {hosts}: the hosts share the step's rows correctly, but the "
                  "global array puts host 0's block first, then host 1's, so each host must read one contiguous "
                  "block"),
        _loader("slice(step * global_batch + host * per_host, step * global_batch + (host + 1) * per_host)"):
            _said("the step runs past the end of the {rows}-row data set and your loader returned {got} rows: wrap "
                  "around to row 0 (row numbers modulo len(data_x))"),
        _loader("(step * global_batch + host * per_host + host * (per_host // num_hosts) "
                "+ np.arange(per_host // num_hosts)) % len(data_x)"):
            _said("your loader splits the rows by host twice: it takes this host's block of the step, then this "
                  "host's share of that block, so it returned {got} rows where each host needs {per_host}. Split "
                  "the step's rows once"),
        _loader("(step * global_batch) % len(data_x) + host * per_host + np.arange(per_host)"):
            lambda case: "your loader wraps where a step starts, but not the rows within a step: with "
                         f"global_batch={case.devices} a step's rows run past the end of the {_ROWS}-row data set. "
                         "Take every row number modulo len(data_x)",
    },
    errors=(ErrorRule(lambda text: "out of bounds" in text or "IndexError" in text,
                 example=_loader("step * global_batch + host * per_host + np.arange(per_host)"),
                 say=f"your loader runs past the end of the {_ROWS}-row data set: wrap around to row 0 (row numbers "
                     "modulo len(data_x))"),),
    families=(
        OutputRule(lambda case: not isinstance(case.got, str) and _over_read(case) is not None, say=_over_read_said,
             example=_loader("(step * global_batch + np.arange(global_batch)) % len(data_x)",
                             ret="data_x[rows][host * per_host:(host + 1) * per_host], "
                                 "data_y[rows][host * per_host:(host + 1) * per_host]")),
        OutputRule(lambda case: isinstance(case.got, str), say=lambda case: case.got,
             example=_loader("(step * global_batch + host * per_host + np.arange(per_host)) % len(data_x)",
                             ret="data_x[rows], data_y[rows[::-1]]")),
        OutputRule(_read_wrong_count,
             example=_loader("(step * global_batch + host * per_host + np.arange(per_host + 1)) % len(data_x)"),
             say=_said("each host should read global_batch // num_hosts = {per_host} rows, not {got}")),
    ),
    otherwise=_said("the rows your loader read are not this host's contiguous block of the step's global batch"),
    hints=(
        "Step s's global batch is the global_batch rows that start at row s * global_batch; "
        "split it into num_hosts equal, contiguous blocks.",
        "Host h's block starts h * (global_batch // num_hosts) rows into the step's batch; take "
        "the row numbers modulo len(data_x) so the last steps wrap around.",
    ),
))


# ------------------------------------------------------------------ 08.2 process_allgather

_MINE = 97  # the length of the notebook's `mine`, each host's own numpy array

register(ValueExercise(
    id="08.2", kernel=KERNEL, answer_name="gathered_shapes",
    title="process_allgather: (256,) for the global errors, (2, 97) for the hosts' numpy arrays",
    solution="gathered_shapes = ((256,), (2, 97))  # the global array whole; one row per host",
    form=forms.tuple_of(forms.shape("the shape of every"), forms.shape("the shape of copies"),
                        like="((3,), (2, 5))", of="shapes"),
    right=lambda: ((tiny.GLOBAL_BATCH,), (HOSTS, _MINE)),
    rules=(
        ValueRule(lambda s: s[0] == (tiny.GLOBAL_BATCH // HOSTS,), example=((128,), (2, 97)),
             say="process_allgather(errors, tiled=True) returns the whole global array, (256,), on every host, not "
                 "this host's 128 errors"),
        ValueRule(lambda s: s[0] == (HOSTS, tiny.GLOBAL_BATCH // HOSTS), example=((2, 128), (2, 97)),
             say="errors is already one global array; tiled=True puts its shards back in their global places, "
                 "(256,), rather than one row per host"),
        ValueRule(lambda s: s[0] == (tiny.GLOBAL_BATCH // 8,), example=((32,), (2, 97)),
             say="a device's block has 32 errors, but process_allgather gathers all of them"),
        ValueRule(lambda s: s[0] != (tiny.GLOBAL_BATCH,), example=((512,), (2, 97)),
             say=lambda s: f"{s[0]} is not the shape of the global errors array (one error per example of the "
                           "256-example batch)"),
        ValueRule(lambda s: s[1] in ((HOSTS * _MINE,), (_MINE,)), example=((256,), (194,)),
             say="mine is a numpy array, each host's own data: without tiled=True, process_allgather stacks the "
                 "hosts' arrays along a new first axis, one row per host"),
        ValueRule(lambda s: s[1] == (_MINE, HOSTS), example=((256,), (97, 2)),
             say="the new axis comes first: one row per host"),
    ),
    otherwise=lambda s: f"{s[1]} is not what stacking 2 hosts' 97 values gives",
    hints=(
        "errors is a global jax.Array of shape (256,); tiled=True reassembles exactly that.",
        "mine is plain numpy, this host's own data; without tiled=True the hosts' arrays are "
        "stacked along a new leading axis.",
    ),
))


# ------------------------------------------------------------------ 08.3 the pitfall, for real

def _pitfall_length() -> int:
    """The length of the global array the two hosts build from their (128, 4) batches with P('device')."""
    parts = [np.zeros((tiny.GLOBAL_BATCH // HOSTS, tiny.IN_DIM), np.float32)] * HOSTS
    return from_hosts(parts, P("device")).shape[0]


register(ValueExercise(
    id="08.3", kernel=KERNEL, answer_name="errors_gathered",
    title="with P('device') each host gathers 128 errors: the global array is one host's batch",
    solution="errors_gathered = 128  # P('device'): the global array is one host's 128 rows",
    form=forms.whole("how many errors each host gets"),
    right=_pitfall_length,
    wrong={
        256: "256 is the correct run's count. With P('device') the global array is one host's 128 examples, copied "
             "along 'host'; the other host's examples are not part of it, so there is nothing more to gather",
        32: "32 is one device's block; process_allgather returns the whole (claimed) global array",
        64: "P('device') splits the rows over the 4 devices of a host, not 8",
    },
    otherwise=lambda n: (f"{n} is not the length of the P('device') errors array: the batch each host passes has "
                         "128 rows"),
    hints=(
        "With P('device'), what global shape does make_array_from_process_local_data give to a "
        "host's (128, 4) batch? (Notebook 03, section 2.)",
        "The errors array is sharded like the batch, and tiled=True returns the global array.",
    ),
))


# ------------------------------------------------------------------ 08.4 a global result, on every host

_MEAN_DRIVER = '''
from helpers.errors import explain as _one_line  # a name the learner's code will not take
from helpers.launch import initialize
initialize()
{answer}
import json

mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), ("host", "device"))
sharding = NamedSharding(mesh, P(("host", "device")))
out = []
for padding in (2, 3):  # two global batches; the last `padding` rows (all on the last host) are filler
    n = 4 * jax.device_count()
    every_error = np.random.default_rng(padding).uniform(size=n).astype(np.float32)
    every_mask = (np.arange(n) < n - padding).astype(np.float32)
    share = n // jax.process_count()
    mine = slice(jax.process_index() * share, (jax.process_index() + 1) * share)
    errors, mask = (jax.make_array_from_process_local_data(sharding, a[mine]) for a in (every_error, every_mask))
    try:
        out.append(round(float(mean_error(errors, mask)), 5))
    except Exception as error:  # reported as this host's result, so the judge can name it
        out.append(_one_line(error))
print(json.dumps(out))
'''


def _mean(body: str) -> str:
    return f"def mean_error(errors, mask):\n    return {body}\n"


def _raised(case) -> tuple[int, str] | None:
    """(host, the error) of the first host where the learner's function raised, or None."""
    if not isinstance(case.got, tuple):
        return None
    return next(((h, v) for h, values in enumerate(case.got) for v in values if isinstance(v, str)), None)


register(ProcessExercise(
    id="08.4", kernel=KERNEL, answer_name="mean_error", signature="(errors, mask)",
    title="a global masked mean read on every host: the same number everywhere",
    setup="from jax.experimental import multihost_utils\n",
    solution='''
def mean_error(errors, mask):
    """The mean of the real rows' errors (mask 1) of global arrays spread over every host, the same on every host."""
    return float(jnp.sum(errors * mask) / jnp.sum(mask))  # jit-compiled sums over every device of every host
''',
    driver=_MEAN_DRIVER,
    meshes=((2, 2), (2, 1)),  # (hosts, devices per host); 2 devices first, where one block is not a host's part
    timeout=90.0,
    wrong={
        _mean("float(jnp.mean(errors))"):
            "your mean counts the padding rows: weigh each error by mask and divide by the number of real rows",
        _mean("float(jnp.sum(errors * mask) / errors.size)"):
            "you divide by every row, padding included: divide by the number of real rows, jnp.sum(mask)",
        _mean("float(sum(np.sum(np.asarray(e.data) * np.asarray(m.data)) for e, m in "
              "zip(errors.addressable_shards, mask.addressable_shards)) / "
              "sum(np.sum(np.asarray(m.data)) for m in mask.addressable_shards))"):
            "each host printed the mean of its own rows: addressable_shards holds only this process's part of the "
            "arrays, so the hosts disagree. Sum over the global arrays (jnp.sum), or gather them first "
            "(process_allgather(..., tiled=True))",
        _mean("float(np.sum(np.asarray(errors) * np.asarray(mask)) / np.sum(np.asarray(mask)))"):
            "np.asarray(errors) fails on every host: the array spans devices of both processes, and a process can "
            "only read its own. Use jnp.sum on the global arrays, or process_allgather(..., tiled=True)",
    },
    families=(OutputRule(lambda case: _raised(case) is not None, example=_mean("errors.mean_of_all()"),
                   say=lambda case: "on host {}, your function raised {}".format(*_raised(case))),
              OutputRule(lambda case: isinstance(case.got, tuple) and len({tuple(h) for h in case.got}) > 1,
                   example=_mean("float(np.mean(np.asarray(errors.addressable_data(0))))"),
                   say="the hosts printed different numbers: each read only part of the arrays. A global result "
                       "must be the same on every host: reduce the global arrays, or gather them first"),),
    otherwise="every host printed the same number, but it is not the mean error of the real rows",
    hints=(
        "Each process holds only its own shards. jnp.sum of a global array adds over every device of every host, "
        "and its result is replicated: every host can read it.",
        "The mean over real rows is sum(errors * mask) / sum(mask), both sums over the whole global arrays.",
    ),
))
