"""Exercises of notebook 04: pmap's collectives, in_axes/out_axes, and pmap on several hosts."""
from __future__ import annotations

import numbers
from typing import Any

from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Mistake, describe, register
from helpers.exercises.judges import require_numbers, require_shape

_V8 = (3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 7.0)


def _judge_centred(answer: Any) -> None:
    import numpy as np

    got = np.asarray(require_numbers(answer, 8, "the 8 outputs of centre(v8)"))
    v = np.asarray(_V8)
    mean, total = v.mean(), v.sum()
    if np.allclose(got, v - mean):
        return
    if np.allclose(got, mean):
        raise Mistake(f"that is pmean(v) alone ({mean:g} everywhere); each device then subtracts it "
                      "from its OWN value v")
    if np.allclose(got, v - total):
        raise Mistake(f"you subtracted the sum ({total:g}); pmean is the sum divided by the number of "
                      "devices, 8")
    if np.allclose(got, mean - v):
        raise Mistake("the sign is flipped: each device computes v - mean, its own value minus the mean")
    if np.allclose(got, 0):
        raise Mistake("pmean does not overwrite v: it returns the mean, and v is still this device's "
                      "own value, so the results differ from device to device")
    if np.allclose(got, v):
        raise Mistake("those are the inputs; each device subtracts the mean of all 8 values from its own")
    wrong = [i for i in range(8) if not np.isclose(got[i], v[i] - mean)]
    raise Mistake(f"not quite: device {wrong[0]} holds {v[wrong[0]]:g}; the mean of the 8 values is "
                  f"{mean:g}")


register(Judged(
    id="04.1",
    title="each device's value minus the mean over all devices",
    answer_name="centred",
    solution="centred = [-1.0, -3.0, 0.0, -3.0, 1.0, 5.0, -2.0, 3.0]  # v - mean(v8), and mean(v8) = 32 / 8 = 4",
    judged_by=_judge_centred,
    hints=(
        "pmean(v, 'i') gives every device the same number: the mean of v over all 8 devices.",
        "The 8 values add up to 32, so the mean is 4; device i returns v8[i] - 4.",
    ),
    wrong_answers=(
        WrongAnswer("centred = [4.0] * 8", "pmean(v) alone"),
        WrongAnswer("centred = [3 - 32, 1 - 32, 4 - 32, 1 - 32, 5 - 32, 9 - 32, 2 - 32, 7 - 32]", "subtracted the sum"),
        WrongAnswer("centred = [1.0, 3.0, 0.0, 3.0, -1.0, -5.0, 2.0, -3.0]", "sign is flipped"),
        WrongAnswer("centred = [0.0] * 8", "does not overwrite v"),
        WrongAnswer("centred = [-1.0, -3.0, 0.0, -3.0]", "expected 8 numbers"),
    ),
))


def _judge_g_shapes(answer: Any) -> None:
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise Mistake(f"expected a tuple of two shapes like ((8, 2), (3,)), but got {describe(answer)}")
    first = require_shape(answer[0], "the first output's shape")
    second = require_shape(answer[1], "the second output's shape")
    if first == (8, 5, 2):
        raise Mistake("out_axes=1 puts the device axis in position 1 of the first output, not in front")
    if first in ((5, 2), (2,)):
        raise Mistake("the device axis does not vanish: out_axes=1 puts it back, in position 1")
    if first == (5, 8, 3):
        raise Mistake("each device computes a @ w: its a is (5, 3) and w is (3, 2), so its result is (5, 2)")
    if first != (5, 8, 2):
        raise Mistake(f"the first output is not {first}: each device's a @ w is (5, 2), and out_axes=1 "
                      "inserts the 8 devices as axis 1")
    if second == (8,):
        raise Mistake("out_axes=None returns ONE copy of a value the devices agree on, with no device "
                      "axis: the psum is a scalar")
    if second != ():
        raise Mistake(f"the second output is not {second}: jnp.sum(a) is a scalar on each device, so is "
                      "its psum, and out_axes=None adds no device axis")


register(Judged(
    id="04.2",
    title="out_axes=1 moves the device axis; out_axes=None drops it",
    answer_name="g_shapes",
    solution="g_shapes = ((5, 8, 2), ())  # (5, 2) per device, stacked as axis 1; one scalar psum",
    judged_by=_judge_g_shapes,
    hints=(
        "In the body, a is one (5, 3) slice (in_axes=0 removes the device axis) and w is the whole (3, 2).",
        "out_axes=1 inserts the device axis (size 8) at position 1; out_axes=None inserts none.",
    ),
    wrong_answers=(
        WrongAnswer("g_shapes = ((8, 5, 2), ())", "position 1"),
        WrongAnswer("g_shapes = ((5, 8, 2), (8,))", "ONE copy"),
        WrongAnswer("g_shapes = ((5, 2), ())", "does not vanish"),
        WrongAnswer("g_shapes = [(5, 8, 2), ()]", "expected a tuple of two shapes"),
    ),
))


def _number(value: Any, what: str) -> float:
    """One number: a Python or numpy number, or a 0-d array (jnp.float32(52.) counts); else a Mistake."""
    import numpy as np

    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise Mistake(f"{what} is one number, but you gave {describe(value)}")
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "shape") and tuple(value.shape) == () and hasattr(value, "dtype"):
        if np.dtype(value.dtype).kind in "iuf":
            return float(value)
    raise Mistake(f"{what} is one number, but you gave {describe(value)}")


def _judge_host1(answer: Any) -> None:
    if not isinstance(answer, tuple) or len(answer) != 3:
        raise Mistake("expected a tuple of three things: (total[0], index.tolist(), total.shape), "
                      f"but got {describe(answer)}")
    total, index, shape = answer
    total = _number(total, "total[0]")
    if isinstance(index, (str, bytes, dict)) or index is None:
        raise Mistake(f"index.tolist() is a list of one position per local device, but you gave {describe(index)}")
    import numpy as np

    try:
        indices = np.asarray(index, dtype=float).reshape(-1).tolist()
    except (TypeError, ValueError):
        raise Mistake(f"index.tolist() is a list of numbers, but you gave {describe(index)}") from None
    shape = require_shape(shape, "total.shape")
    if total == 21:
        raise Mistake("21 is host 1's own sum (10 + 11); pmap's psum spans the devices of ALL hosts, so it "
                      "also adds the other hosts' values")
    if total == 1:
        raise Mistake("1 is host 0's sum only; psum adds the values of all 8 devices on all 4 hosts")
    if total == 52:
        raise Mistake("52 is the total of the 2-host run in the next cells; here 4 hosts pass 2 values "
                      "each: add 0, 1, 10, 11, 20, 21, 30, 31")
    if total != 124:
        raise Mistake(f"psum gives {total:g}? Add up all 8 devices' values: host h passes 10h and 10h + 1")
    if indices == [0, 1]:
        raise Mistake("axis_index counts devices across all hosts: host 0's devices are 0 and 1, so host "
                      "1's are 2 and 3")
    if len(indices) != 2 and shape == (2,):
        raise Mistake(f"index has one position per local device of host 1, 2 of them, but your list "
                      f"has {len(indices)}")
    if indices != [2, 3]:
        raise Mistake(f"host 1's axis_index is not {[int(i) if i == int(i) else i for i in indices]}: "
                      "positions run 0-7 over the hosts in order, 2 devices per host")
    if shape == (8,):
        raise Mistake("pmap's outputs are host-local: host 1 gets one row per LOCAL device, not 8")
    if shape == (4,):
        raise Mistake("host 1 has 2 local devices in this run (4 hosts x 2), so it passes and gets back "
                      "2 rows, not 4")
    if shape != (2,):
        raise Mistake(f"total.shape is not {shape}: host 1 passed 2 values and gets one psum per local "
                      "device")


register(Judged(
    id="04.3",
    title="pmap on several hosts: local shapes, global collectives",
    answer_name="host1",
    solution="host1 = (124.0, [2, 3], (2,))  # psum over all 4 hosts; global positions; local shape",
    judged_by=_judge_host1,
    hints=(
        "The collectives and axis_index see all 8 devices of the run; the shapes are each host's own.",
        "psum adds 0+1, 10+11, 20+21 and 30+31 (one pair per host); host 1's 2 devices come after host "
        "0's 2.",
    ),
    wrong_answers=(
        WrongAnswer("host1 = (21.0, [2, 3], (2,))", "host 1's own sum"),
        WrongAnswer("host1 = (124.0, [0, 1], (2,))", "across all hosts"),
        WrongAnswer("host1 = (124.0, [2, 3], (8,))", "host-local"),
        WrongAnswer("host1 = (52.0, [4, 5, 6, 7], (4,))", "total of the 2-host run"),
        WrongAnswer("host1 = (124.0, [2, 3], (4,))", "2 local devices"),
        WrongAnswer("host1 = (124.0, [2, 3])", "expected a tuple of three"),
        WrongAnswer("host1 = ('124', [2, 3], (2,))", "is one number"),
    ),
))
