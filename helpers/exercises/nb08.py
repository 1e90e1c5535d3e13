"""Exercises of notebook 08: real multi-process runs."""
import numbers

from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Mistake, call_learner, describe, register

# ------------------------------------------------------------------ 08.1 the host-local loader

# (step, host, num_hosts, global_batch) cases the judge tries on a fresh 40-row data set;
# the last ones run past the end of the data set.
_LOADER_CASES = [(0, 0, 2, 8), (0, 1, 2, 8), (3, 1, 2, 8), (2, 3, 4, 8), (1, 2, 3, 12),
                 (4, 1, 2, 8), (5, 0, 2, 12), (7, 3, 4, 12)]
_ROWS = 40


def _expected_rows(step, host, num_hosts, global_batch, n=_ROWS):
    import numpy as np

    per_host = global_batch // num_hosts
    return (step * global_batch + host * per_host + np.arange(per_host)) % n


def _loader_data(n=_ROWS):
    import numpy as np

    rng = np.random.default_rng(8)
    order = rng.permutation(n)  # row r holds the tag order[r]: the judge can tell rows apart
    data_x = np.stack([order, order * 10 + 1, order * 10 + 2], axis=1).astype(np.float32)
    data_y = (order * 100.0 + 7).astype(np.float32).reshape(n, 1)
    return order, data_x, data_y


def _rows_of(result, data_x, data_y, order):
    import numpy as np

    if not isinstance(result, tuple) or len(result) != 2:
        raise Mistake(f"the loader should return a pair (x, y) of numpy arrays; got {describe(result)}")
    x, y = (np.asarray(a) for a in result)
    if x.ndim != 2 or x.shape[1:] != data_x.shape[1:] or y.ndim != 2 or y.shape[1:] != data_y.shape[1:]:
        raise Mistake(f"x should have rows like data_x (shape (rows, {data_x.shape[1]})) and y like "
                      f"data_y (shape (rows, 1)); got x {x.shape} and y {y.shape}")
    if len(x) != len(y):
        raise Mistake(f"x has {len(x)} rows but y has {len(y)}: read the same rows of both")
    where = {int(t): r for r, t in enumerate(order)}
    rows_x = [where.get(int(round(float(v)))) for v in x[:, 0]]
    rows_y = [where.get(int(round((float(v) - 7) / 100))) for v in y[:, 0]]
    if None in rows_x or None in rows_y or not np.array_equal(x, data_x[[r or 0 for r in rows_x]]):
        raise Mistake("the loader returned values that are not rows of data_x / data_y; return "
                      "whole rows, e.g. data_x[rows]")
    if rows_x != rows_y:
        raise Mistake("x and y come from different rows: read the same row numbers from both")
    return rows_x


def _judge_loader(load_my_rows) -> None:
    import numpy as np

    order, data_x, data_y = _loader_data()
    for step, host, num_hosts, global_batch in _LOADER_CASES:
        per_host = global_batch // num_hosts
        try:
            result = call_learner(load_my_rows, data_x, data_y, step, host, num_hosts, global_batch)
        except Mistake as mistake:
            if "IndexError" in str(mistake) and step * global_batch + global_batch > _ROWS:
                raise Mistake(f"step {step} of a {global_batch}-row batch runs past the "
                              f"{_ROWS}-row data set: wrap around to row 0 (row numbers modulo "
                              "len(data_x))") from None
            raise
        got = _rows_of(result, data_x, data_y, order)
        want = _expected_rows(step, host, num_hosts, global_batch).tolist()
        if got == want:
            continue
        case = f"(step={step}, host={host}, num_hosts={num_hosts}, global_batch={global_batch})"
        if len(got) == global_batch and num_hosts > 1:
            raise Mistake(f"for {case} your loader read all {global_batch} rows of the global "
                          f"batch; each host reads only its own {per_host}")
        past_end = step * global_batch + global_batch > _ROWS
        if past_end and len(got) < per_host:
            raise Mistake(f"for {case} the step runs past the end of the {_ROWS}-row data set "
                          f"and your loader returned {len(got)} rows: wrap around to row 0 "
                          "(row numbers modulo len(data_x))")
        if len(got) != per_host:
            raise Mistake(f"for {case} each host should read global_batch // num_hosts = "
                          f"{per_host} rows, not {len(got)}")
        if got == _expected_rows(step, 0, num_hosts, global_batch).tolist():
            raise Mistake(f"for {case} your loader read host 0's rows: every host reads the same "
                          "rows. Offset each host by host * (global_batch // num_hosts)")
        if got == ((step * per_host + host * per_host + np.arange(per_host)) % _ROWS).tolist():
            raise Mistake(f"for {case} your rows overlap another step's: a step covers "
                          "global_batch rows of the data set, so step s starts at row "
                          "s * global_batch")
        start = step * global_batch
        interleaved = ((start + host + num_hosts * np.arange(per_host)) % _ROWS).tolist()
        if got == interleaved:
            raise Mistake(f"for {case} your loader takes one row in every {num_hosts}: the "
                          "hosts share the step's rows correctly, but the global array puts host 0's block first, "
                          "then host 1's, so each host must read one contiguous block")
        raise Mistake(f"for {case} host {host} should read rows {want}, but your loader read {got}")


register(Judged(
    id="08.1",
    title="a host-local loader: one contiguous block of each step's global batch",
    answer_name="load_my_rows",
    solution='''
import numpy as np


def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    """This host's (x, y) rows of step `step`'s global batch."""
    per_host = global_batch // num_hosts
    first = step * global_batch + host * per_host
    rows = (first + np.arange(per_host)) % len(data_x)
    return data_x[rows], data_y[rows]
''',
    judged_by=_judge_loader,
    hints=(
        "Step s's global batch is the global_batch rows that start at row s * global_batch; "
        "split it into num_hosts equal, contiguous blocks.",
        "Host h's block starts h * (global_batch // num_hosts) rows into the step's batch; take "
        "the row numbers modulo len(data_x) so the last steps wrap around.",
    ),
    wrong_answers=(
        WrongAnswer('''
def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    rows = (step * global_batch + np.arange(global_batch // num_hosts)) % len(data_x)
    return data_x[rows], data_y[rows]
''', "every host reads the same rows"),
        WrongAnswer('''
def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    rows = (step * global_batch + np.arange(global_batch)) % len(data_x)
    return data_x[rows], data_y[rows]
''', "each host reads only its own"),
        WrongAnswer('''
def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    per_host = global_batch // num_hosts
    rows = ((step + host) * per_host + np.arange(per_host)) % len(data_x)
    return data_x[rows], data_y[rows]
''', "overlap another step's"),
        WrongAnswer('''
def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    rows = (step * global_batch + host + num_hosts * np.arange(global_batch // num_hosts)) % len(data_x)
    return data_x[rows], data_y[rows]
''', "one contiguous block"),
        WrongAnswer('''
def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    per_host = global_batch // num_hosts
    first = step * global_batch + host * per_host
    return data_x[first:first + per_host], data_y[first:first + per_host]
''', "wrap around"),
        WrongAnswer('''
def load_my_rows(data_x, data_y, step, host, num_hosts, global_batch):
    per_host = global_batch // num_hosts
    rows = (step * global_batch + host * per_host + np.arange(per_host)) % len(data_x)
    return data_x[rows], data_y[rows[::-1]]
''', "different rows"),
    ),
))

# ------------------------------------------------------------------ 08.2 process_allgather


def _shape(value, what: str) -> tuple:
    if not isinstance(value, tuple) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise Mistake(f"{what} should be a shape, a tuple of whole numbers like (3,) or (2, 5); "
                      f"got {describe(value)}")
    return value


def _judge_gather_shapes(answer) -> None:
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Mistake(f"expected a pair of shapes, like ((3,), (2, 5)); got {describe(answer)}")
    every, copies = _shape(answer[0], "the shape of every"), _shape(answer[1], "the shape of copies")
    if every == (128,):
        raise Mistake("process_allgather(errors, tiled=True) returns the whole global array, "
                      "(256,), on every host, not this host's 128 errors")
    if every == (2, 128):
        raise Mistake("errors is already one global array; tiled=True puts its shards back in "
                      "their global places, (256,), rather than one row per host")
    if every == (32,):
        raise Mistake("a device's block has 32 errors, but process_allgather gathers all of them")
    if every != (256,):
        raise Mistake(f"{every} is not the shape of the global errors array (one error per "
                      "example of the 256-example batch)")
    if copies in ((194,), (97,)):
        raise Mistake("mine is a numpy array, each host's own data: without tiled=True, "
                      "process_allgather stacks the hosts' arrays along a new first axis, one "
                      "row per host")
    if copies == (97, 2):
        raise Mistake("the new axis comes first: one row per host")
    if copies != (2, 97):
        raise Mistake(f"{copies} is not what stacking 2 hosts' 97 values gives")


register(Judged(
    id="08.2",
    title="process_allgather: (256,) for the global errors, (2, 97) for the hosts' numpy arrays",
    answer_name="gathered_shapes",
    solution="gathered_shapes = ((256,), (2, 97))  # the global array whole; one row per host",
    judged_by=_judge_gather_shapes,
    hints=(
        "errors is a global jax.Array of shape (256,); tiled=True reassembles exactly that.",
        "mine is plain numpy, this host's own data; without tiled=True the hosts' arrays are "
        "stacked along a new leading axis.",
    ),
    wrong_answers=(
        WrongAnswer("gathered_shapes = ((128,), (2, 97))", "not this host's 128 errors"),
        WrongAnswer("gathered_shapes = ((2, 128), (2, 97))", "one row per host"),
        WrongAnswer("gathered_shapes = ((256,), (194,))", "stacks the hosts' arrays"),
        WrongAnswer("gathered_shapes = ((256,), (97, 2))", "the new axis comes first"),
        WrongAnswer("gathered_shapes = [(256,), (2, 97)]", "expected a pair"),
    ),
))

# ------------------------------------------------------------------ 08.3 the pitfall, for real


def _judge_seed_count(answer) -> None:
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        raise Mistake(f"expected a whole number (how many errors each host gets); got {describe(answer)}")
    count = int(answer)
    if count == 128:
        return
    if count == 256:
        raise Mistake("256 is the correct run's count. With P('device') the global array is "
                      "one host's 128 examples, copied along 'host'; the other host's examples "
                      "are not part of it, so there is nothing more to gather")
    if count == 32:
        raise Mistake("32 is one device's block; process_allgather returns the whole (claimed) "
                      "global array")
    if count == 64:
        raise Mistake("P('device') splits the rows over the 4 devices of a host, not 8")
    raise Mistake(f"{count} is not the length of the P('device') errors array: the batch each "
                  "host passes has 128 rows")


register(Judged(
    id="08.3",
    title="with P('device') each host gathers 128 errors: the global array is one host's batch",
    answer_name="errors_gathered",
    solution="errors_gathered = 128  # P('device'): the global array is one host's 128 rows",
    judged_by=_judge_seed_count,
    hints=(
        "With P('device'), what global shape does make_array_from_process_local_data give to a "
        "host's (128, 4) batch? (Notebook 03, section 2.)",
        "The errors array is sharded like the batch, and tiled=True returns the global array.",
    ),
    wrong_answers=(
        WrongAnswer("errors_gathered = 256", "nothing more to gather"),
        WrongAnswer("errors_gathered = 32", "one device's block"),
        WrongAnswer("errors_gathered = 64", "not 8"),
        WrongAnswer('errors_gathered = "128"', "expected a whole number"),
    ),
))
