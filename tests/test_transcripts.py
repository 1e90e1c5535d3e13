"""notebooks/transcripts: the recordings notebooks 08, 12, 14 and 15 show of failures too slow (or too
variable) to run live.

`tools/record_transcripts.py` writes them (minutes each); these tests only read them: each case
has its recording, made from a script that exists, with the messages the notebook quotes.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.record_transcripts import CASES, SCRIPTS, TRANSCRIPTS

SOURCES = Path(__file__).resolve().parents[1] / "notebooks" / "src"
QUOTED = {  # what notebook 12's prose says each recording shows
    "crash_under_plain_jax": ("ValueError: host 1 read a corrupt batch", "Barrier timed out",
                              "killed by SIGABRT"),
    "crash_before_first_collective": ("Gloo context initialization failed", "exit status 1"),
    "backend_never_starts": ("Getting local topologies failed", "cpu:local_topology/cpu/1",
                             "Either the leader task was preempted/died"),
    # notebook 14: the survivor of a killed host 1 ends at the heartbeat timeout
    "host_1_killed_under_plain_jax": ("Terminating process because the JAX distributed service detected fatal",
                                      "The tasks have crashed", "killed by SIGABRT"),
    "host_never_joins": ("host 0: joining", "RegisterTask", "DEADLINE_EXCEEDED", "killed by SIGABRT"),
    "host_never_joins_8": ("initialization_timeout=8", "RegisterTask", "killed by SIGABRT"),
    "backend_never_starts_host_dies": ("killed before its first JAX call", "The tasks have crashed",
                                       "killed by SIGABRT"),
    "dies_in_barrier_under_plain_jax": ("Connection closed by peer [127.0.0.1]", "Task 1 heartbeat timeout",
                                        "killed by SIGABRT"),
    # notebook 08: the hostname line, JAX's error naming the address dialled, the launcher's gist
    "gloo_advertises_loopback": ("resolves to 127.0.1.1", "Connection refused, remote=[127.0.1.1]",
                                 "dialled 127.0.1.1, a loopback address"),
    # notebook 15: hosts with hostnames of their own write one session folder; stop_trace fails on both
    "one_trace_dir_for_all_hosts": ("1 session folder(s), files: ['host0.trace.json.gz', 'host0.xplane.pb', "
                                    "'host1.trace.json.gz', 'host1.xplane.pb']", "ValueError: Invalid trace folder"),
}
SHOWN_IN = {"gloo_advertises_loopback": "08_real_multiprocess.md",
            "host_1_killed_under_plain_jax": "14_when_a_host_dies.md",
            "one_trace_dir_for_all_hosts": "15_where_the_time_goes.md"}  # else notebook 12


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_case_has_a_recording_with_the_quoted_messages(name):
    script, _ = CASES[name]
    assert (SCRIPTS / script).is_file()
    text = (TRANSCRIPTS / f"{name}.txt").read_text()
    assert text.startswith(f"$ run({script!r}"), "rerun: python tools/record_transcripts.py " + name
    for quoted in QUOTED[name]:
        assert quoted in text, f"{name}.txt lacks {quoted!r}: rerun tools/record_transcripts.py {name}"
    assert "/tmp/" not in text and "127.0.0.1:" not in text.replace("127.0.0.1:<port>", "")
    notebook = SOURCES / SHOWN_IN.get(name, "12_when_hosts_disagree.md")
    assert f"transcripts/{name}.txt" in notebook.read_text()
