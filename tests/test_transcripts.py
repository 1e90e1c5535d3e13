"""notebooks/transcripts: the recordings notebook 12 shows of failures too slow to run live.

`tools/record_transcripts.py` writes them (minutes each); these tests only read them: each case
has its recording, made from a script that exists, with the messages the notebook quotes.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.record_transcripts import CASES, SCRIPTS, TRANSCRIPTS

NOTEBOOK_12 = Path(__file__).resolve().parents[1] / "notebooks" / "src" / "12_when_hosts_disagree.md"
QUOTED = {  # what notebook 12's prose says each recording shows
    "crash_under_plain_jax": ("ValueError: host 1 read a corrupt batch", "Barrier timed out",
                              "killed by SIGABRT"),
    "crash_before_first_collective": ("Gloo context initialization failed", "exit status 1"),
    "backend_never_starts": ("Getting local topologies failed", "cpu:local_topology/cpu/1"),
    "host_never_joins": ("host 0: joining", "RegisterTask", "DEADLINE_EXCEEDED", "killed by SIGABRT"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_case_has_a_recording_with_the_quoted_messages(name):
    script, _ = CASES[name]
    assert (SCRIPTS / script).is_file()
    text = (TRANSCRIPTS / f"{name}.txt").read_text()
    assert text.startswith(f"$ run({script!r}"), "rerun: python tools/record_transcripts.py " + name
    for quoted in QUOTED[name]:
        assert quoted in text, f"{name}.txt lacks {quoted!r}: rerun tools/record_transcripts.py {name}"
    assert "/tmp/" not in text and "127.0.0.1:" not in text.replace("127.0.0.1:<port>", "")
    assert f"transcripts/{name}.txt" in NOTEBOOK_12.read_text()
