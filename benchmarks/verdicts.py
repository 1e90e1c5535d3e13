"""Section 11: how long a learner waits for the verdict on an answer whose hosts hang.

Every catalogued wrong answer of the exercises judged in real processes that hang (12.1, 12.3),
and one answer handed in per exercise with a broadcast under `if jax.process_index() == 0`
(10.3, 12.3, as a learner would write it: in 12.3 the hosts hang; in 10.3, whose run goes on
into the reference's collectives, they crash on the mismatch), is checked as a learner's first
check: nothing of the exercise is known yet (no reference output, no catalogue). The figure runs from the last
line any host of the learner's run printed to the verdict: the idle limit, the stack dumps,
the reference and the catalogue lookup. Warm hosts (forked from a process that has imported
JAX) and cold ones (HELPERS_LAUNCH_WARM=0), each in a fresh Python with 8 fake devices.
"""
from __future__ import annotations

import os
import statistics
import time

from benchmarks.measure import log, record, run_worker
from benchmarks.tables import fmt_s, md_table

KEY = "verdicts"
TITLE = "A hang's verdict: from the last line a host printed to the checker's verdict"
CATALOGUED = ("12.1", "12.3")  # exercises whose catalogue has answers that hang
HANDED_IN = {"10.3": "args[0]", "12.3": "1"}  # exercise -> what its function returns past the broadcast
QUICK_IDS = ("12.3",)
MODES = ("warm", "cold")


def _broadcast_on_host_0(answer_name: str, returns: str) -> str:
    return (f"def {answer_name}(*args):\n"
            "    from jax.experimental import multihost_utils\n"
            "    if jax.process_index() == 0:\n"
            "        multihost_utils.broadcast_one_to_all(np.zeros(1))\n"
            f"    return {returns}\n")


def worker(cold: bool, ids: list[str]) -> tuple[list, dict]:
    """Judge each hanging answer as a first check; (benchmarks, facts) for `run_worker`."""
    if cold:
        os.environ["HELPERS_LAUNCH_WARM"] = "0"
    from helpers import exercises, launch
    from helpers.emulated.topology import emulated_hosts
    from helpers.exercises.core import MEMO

    runs: list = []  # (the run's script, its result), in the order the runs ended
    real_run = launch.run
    launch.run = lambda *args, **kwargs: runs.append((kwargs.get("source", ""), real_run(*args, **kwargs))) \
        or runs[-1][1]
    measured = []
    for ex_id in ids:
        exercise = exercises.get(ex_id)
        answers = [(f"catalogued {i + 1}", source) for i, source in enumerate(exercise.wrong)
                   if ex_id in CATALOGUED]
        if ex_id in HANDED_IN:
            answers.append(("handed in", _broadcast_on_host_0(exercise.answer_name, HANDED_IN[ex_id])))
        for what, source in answers:
            MEMO.forget(lambda key: key[0] == ex_id)
            runs.clear()
            with emulated_hosts(exercise.kernel.hosts or 1):
                status, message = exercises.verdict(ex_id, source)
            done = time.monotonic()
            # the learner's run: its script holds the answer (a together driver, as a literal)
            learners = next((r for script, r in runs if source in script or repr(source) in script), None)
            assert status == "mistake", f"{ex_id} {what}: {status}: {message}"
            hung = learners is not None and learners.stopped_after is not None
            if learners is None or learners.last_output_at is None or not (hung or what == "handed in"):
                continue  # a catalogued answer that does not hang
            measured.append({"id": ex_id, "answer": what, "seconds": done - learners.last_output_at,
                             "ended": "hang" if hung else "crash", "runs": len(runs), "verdict": message[:160]})
    mode = "cold" if cold else "warm"
    values = [m["seconds"] for m in measured]
    assert values, "no answer hung: the catalogue changed?"
    return [record(f"verdicts/{mode}", values)], {"answers": measured}


def measure(results, opts) -> None:
    ids = list(QUICK_IDS if opts.quick else dict.fromkeys([*CATALOGUED, *HANDED_IN]))
    facts = {}
    for mode in MODES:
        benchmarks, found = run_worker("benchmarks.verdicts:worker", 8, timeout=1200, cold=mode == "cold", ids=ids)
        results.add(*benchmarks)
        facts[mode] = found["answers"]
        values = [a["seconds"] for a in found["answers"]]
        log(f"verdicts, {mode} hosts: {len(values)} answers, median {fmt_s(statistics.median(values))}, "
            f"worst {fmt_s(max(values))}")
    results.sections[KEY] = {"modes": facts, "ids": ids}


def render(results) -> str:
    data = results.sections[KEY]
    modes = [m for m in MODES if m in data["modes"]]
    summary = md_table(
        ["hosts", "answers", "median", "worst"],
        [[mode, str(len(answers)), fmt_s(statistics.median(a["seconds"] for a in answers)),
          fmt_s(max(a["seconds"] for a in answers))] for mode, answers in ((m, data["modes"][m]) for m in modes)])
    seconds = {(mode, a["id"], a["answer"]): a["seconds"] for mode in modes for a in data["modes"][mode]}
    rows = [[a["id"], a["answer"], a.get("ended", "hang"),
             *(fmt_s(seconds[(mode, a["id"], a["answer"])]) if (mode, a["id"], a["answer"]) in seconds else "–"
               for mode in modes),
             str(a["runs"]), a["verdict"].split(":")[0]]
            for a in data["modes"][modes[0]]]
    detail = md_table(["exercise", "answer", "the hosts", *modes, "runs", "verdict begins"], rows)
    return summary + "\n\n" + detail + "\n\n" + (
        "Each answer is a learner's first check of its exercise: the reference and the catalogue "
        "have not run yet. The learner's run is stopped once every host has printed nothing for "
        "the idle limit (4 s) and none was computing (helpers.launch.activity); then the reference "
        "and the catalogue programs run side by side, at most 3 runs at once, so several programs "
        "that hang cost one idle limit, not one each. `runs` counts the multi-process runs the "
        "check made (warm). A crash ends the learner's run at once; its verdict waits for the reference "
        "and the catalogue. One measurement per answer and mode.")
