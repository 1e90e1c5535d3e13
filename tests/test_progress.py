"""helpers.progress: passed exercises and drills, kept in a file that survives restarts."""
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import progress as prog
from helpers import progress_store
from helpers.exercises import all_ids

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv(progress_store.ENV, str(path))
    monkeypatch.setattr(progress_store, "_noted", set())
    return path


def test_records_exercises_and_drills_and_shows_them_per_notebook(store):
    progress_store.record_exercise("02.1")
    progress_store.record_exercise("02.1")
    progress_store.record_exercise("05.3")
    progress_store.record_drill("tile", 7, True)
    progress_store.record_drill("tile", 7, True)
    progress_store.record_drill("spec", 8, False)
    report = prog.progress()
    text = report.text()
    assert f"exercises passed: 2 of {len(all_ids())}" in text
    row02 = next(line for line in text.splitlines() if line.startswith("02 "))
    assert "02.1 ✓" in row02 and "02.2 ·" in row02 and f"1/{sum(i.startswith('02.') for i in all_ids())}" in row02
    assert "█" in row02 and "░" in row02
    assert "drills passed: 1 (tile 1); answers checked: 3" in text
    assert {r.number for r in report.rows} >= {i.split(".")[0] for i in all_ids()}
    html = report._repr_html_()
    assert "<table" in html and "02.1&nbsp;✓" in html and "drills passed: 1" in html
    assert json.loads(store.read_text())["exercises"] == ["02.1", "05.3"]


def test_progress_survives_a_restart(store):
    progress_store.record_exercise("01.2")
    progress_store.record_drill("copies", 3, True)
    out = subprocess.run([sys.executable, "-m", "helpers.progress", "--file", str(store)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=True).stdout
    assert "01.2 ✓" in out and "drills passed: 1 (copies 1)" in out


def test_reset_starts_over(store, capsys):
    progress_store.record_exercise("02.1")
    report = prog.progress(reset=True)
    assert capsys.readouterr().out == "progress: started over.\n"
    assert report.passed == 0 and "02.1 ✓" not in report.text()


@pytest.mark.parametrize("content", [b"not json", b'{"exercises": "02.1"}', b"[1, 2]", b"\xff\xfe",
                                     b'{"exercises": [], "drills": {"tile": ["x"]}, "drill_answers": 0}'])
def test_an_unreadable_file_starts_fresh_with_one_note(store, capsys, content):
    store.write_bytes(content)
    assert prog.progress().passed == 0
    progress_store.record_exercise("02.1")
    prog.progress()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("progress: could not read") and lines[0].endswith("starting fresh.")
    assert prog.progress().rows and json.loads(store.read_text())["exercises"] == ["02.1"]


def test_an_unwritable_place_is_a_note_not_an_error(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv(progress_store.ENV, str(blocker / "progress.json"))
    monkeypatch.setattr(progress_store, "_noted", set())
    progress_store.record_exercise("02.1")
    progress_store.record_drill("tile", 1, True)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("progress: could not save to")


def test_off_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(progress_store.ENV, "off")
    monkeypatch.chdir(tmp_path)
    progress_store.record_exercise("02.1")
    assert progress_store.progress_file() is None
    assert "recording is off" in prog.progress().text()


def test_tests_never_write_the_learners_file(monkeypatch):
    monkeypatch.delenv(progress_store.ENV, raising=False)
    assert os.environ.get("PYTEST_CURRENT_TEST")
    assert progress_store.progress_file() is None


def test_default_place_is_the_git_ignored_repo_file_or_home(monkeypatch, tmp_path):
    monkeypatch.delenv(progress_store.ENV, raising=False)
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    writable = os.access(progress_store.REPO, os.W_OK)
    if writable:
        assert progress_store.progress_file() == ROOT / progress_store.FILE_NAME
    monkeypatch.setattr(progress_store.os, "access", lambda *a: False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert progress_store.progress_file() == tmp_path / ".jax-multihost-course" / "progress.json"
    patterns = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    for name in (progress_store.FILE_NAME, progress_store.FILE_NAME + "abc.tmp"):
        assert any(fnmatch.fnmatch(name, p) for p in patterns if p), name
